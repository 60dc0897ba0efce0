//! How a lock name becomes Redis keys.
//!
//! A lock named `order:42` under the prefix `lock:` uses:
//!
//! * `lock:{order:42}`: a hash with the owner, the re-entry count and the
//!   fencing token, expiring after the lease (for a semaphore: a sorted set
//!   of holders scored by lease expiry, beside `lock:{order:42}:holders`
//!   with their re-entry counts and tokens);
//! * `lock:{order:42}:readers` and `lock:{order:42}:readers:holders`: the
//!   readers of a read-write lock, leased like semaphore permits, and
//!   `lock:{order:42}:writer-waiting` and `lock:{order:42}:readers-waiting`,
//!   set by writers and readers waiting for each other, so that they take turns;
//! * `lock:{order:42}:queue` and `lock:{order:42}:queue:alive`: the fair
//!   waiters in arrival order, and until when each counts as still waiting;
//! * `lock:{order:42}:released`: the pub/sub channel its release is announced on;
//! * `lock:fence:{T}`: the fencing counter shared by every lock in the same
//!   Redis Cluster hash slot, where `T` is a short tag chosen to hash to that slot;
//!   and, for at most a restart quarantine after a counter was created on a
//!   server that had just started, `lock:fence:{T}:born` (see prelude.lua).
//!
//! Names that already carry a hash tag (`{tenant:7}:order:42`) keep it, so a
//! user can co-locate locks with their data; names without one are wrapped in
//! braces so that the lock and its channel always share a slot.
//!
//! # Why fencing counters are per slot
//!
//! A fencing token must be strictly greater than every earlier token for the
//! same lock. A counter per lock name does that but never expires: a service
//! locking `order:<id>` over millions of orders would leave millions of keys
//! behind. One counter per deployment is bounded but cannot sit in the same
//! Cluster slot as every lock, and a Cluster script must touch one slot only.
//! So every lock in slot `s` draws from the counter `lock:fence:{T[s]}`, which
//! hashes to `s` too: at most 16 384 small keys, whatever the number of lock
//! names, and tokens from one counter are strictly increasing for every lock
//! that uses it. On a single server the same layout applies unchanged.
//!
//! A counter starts at the server's clock in microseconds when it is created,
//! then counts up by one per acquisition. Acquisitions never outpace a
//! microsecond clock, so if the server loses the counter (a restart without
//! persistence, eviction) the new one starts above every token handed out
//! before, and a fenced store keeps rejecting the holders from before the loss.
//! This assumes the server's clock does not jump back by more than the time
//! the lost counter had been counting ahead of it.

use std::sync::OnceLock;

/// Number of hash slots in Redis Cluster.
const SLOTS: usize = 16_384;

/// The Redis keys and channel that make up one lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LockKeys {
    /// The hash holding owner, count and fence.
    pub(crate) lock: String,
    /// The channel a release is published on.
    pub(crate) channel: String,
    /// The fencing counter of the lock's slot.
    pub(crate) fence: String,
}

impl LockKeys {
    /// The keys for the lock `name` under `prefix`.
    pub(crate) fn new(prefix: &str, name: &str) -> LockKeys {
        let lock = if hash_tag(name).is_some() {
            format!("{prefix}{name}")
        } else {
            format!("{prefix}{{{name}}}")
        };
        let tag = slot_tag(slot(&lock));
        LockKeys {
            channel: format!("{lock}:released"),
            fence: format!("{prefix}fence:{{{tag}}}"),
            lock,
        }
    }
}

impl LockKeys {
    /// A semaphore's companion hash: each holder's re-entry count and token.
    pub(crate) fn holders(&self) -> String {
        format!("{}:holders", self.lock)
    }

    /// A read-write lock's readers, scored by lease expiry.
    pub(crate) fn readers(&self) -> String {
        format!("{}:readers", self.lock)
    }

    /// The readers' re-entry counts and tokens.
    pub(crate) fn readers_holders(&self) -> String {
        format!("{}:readers:holders", self.lock)
    }

    /// The marker waiting readers set so that the next free turn is theirs.
    pub(crate) fn readers_waiting(&self) -> String {
        format!("{}:readers-waiting", self.lock)
    }

    /// The fair waiters in line, scored by arrival.
    pub(crate) fn queue(&self) -> String {
        format!("{}:queue", self.lock)
    }

    /// The fair waiters' liveness, scored by when each stops counting.
    pub(crate) fn queue_alive(&self) -> String {
        format!("{}:queue:alive", self.lock)
    }

    /// The marker a writer waiting for readers sets, to hold back new readers.
    pub(crate) fn writer_waiting(&self) -> String {
        format!("{}:writer-waiting", self.lock)
    }
}

/// The part of `key` Redis Cluster hashes: the text between the first `{` and
/// the first `}` after it, when that text is not empty.
fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let close = key[open + 1..].find('}')?;
    (close > 0).then(|| &key[open + 1..open + 1 + close])
}

/// The Redis Cluster hash slot of `key`.
pub(crate) fn slot(key: &str) -> u16 {
    let hashed = hash_tag(key).unwrap_or(key);
    crc16::State::<crc16::XMODEM>::calculate(hashed.as_bytes()) % SLOTS as u16
}

/// A short string that hashes to `slot`: the smallest decimal number that does.
fn slot_tag(slot: u16) -> &'static str {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        let mut tags = vec![String::new(); SLOTS];
        let mut missing = SLOTS;
        // About 170 000 candidates fill every slot (coupon collector), once per process.
        let mut n = 0u32;
        while missing > 0 {
            let candidate = n.to_string();
            let tag = &mut tags[usize::from(self::slot(&candidate))];
            if tag.is_empty() {
                *tag = candidate;
                missing -= 1;
            }
            n += 1;
        }
        tags
    });
    &tags[usize::from(slot)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_the_redis_cluster_spec() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(slot("123456789"), 12739);
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(slot("foo{}{bar}"), slot("foo{}{bar}"));
        assert_ne!(slot("foo{}{bar}"), slot("bar"));
        assert_eq!(slot("foo{{bar}}zap"), slot("{bar"));
    }

    #[test]
    fn plain_names_are_wrapped_in_a_hash_tag() {
        let keys = LockKeys::new("lock:", "order:42");
        assert_eq!(keys.lock, "lock:{order:42}");
        assert_eq!(keys.channel, "lock:{order:42}:released");
        assert_eq!(slot(&keys.lock), slot("order:42"));
        assert_eq!(slot(&keys.channel), slot(&keys.lock));
        assert_eq!(slot(&keys.fence), slot(&keys.lock));
    }

    #[test]
    fn names_with_a_hash_tag_keep_it() {
        let keys = LockKeys::new("lock:", "{tenant:7}:order:42");
        assert_eq!(keys.lock, "lock:{tenant:7}:order:42");
        assert_eq!(slot(&keys.lock), slot("tenant:7"));
        assert_eq!(slot(&keys.channel), slot(&keys.lock));
        assert_eq!(slot(&keys.fence), slot(&keys.lock));
    }

    #[test]
    fn every_slot_has_a_tag_that_hashes_to_it() {
        for s in (0..SLOTS as u16).step_by(97).chain([0, SLOTS as u16 - 1]) {
            assert_eq!(slot(slot_tag(s)), s);
        }
    }

    #[test]
    fn fence_counters_are_bounded_by_the_slot_count() {
        let counters: std::collections::HashSet<String> = (0..50_000)
            .map(|id| LockKeys::new("lock:", &format!("order:{id}")).fence)
            .collect();
        assert!(counters.len() <= SLOTS);
    }
}
