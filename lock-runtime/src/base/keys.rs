//! How a lock name becomes Redis keys.
//!
//! A lock named `order:42` under the prefix `lock:` uses:
//!
//! * `lock:{order:42}`: a hash with the owner, the re-entry count and the
//!   fencing token, expiring after the lease (for a semaphore: a sorted set
//!   of holders scored by lease expiry, beside `lock:{order:42}:holders`
//!   with their re-entry counts, tokens and permits held, the semaphore's
//!   number of permits and how many are taken);
//! * `lock:{order:42}:readers` and `lock:{order:42}:readers:holders`: the
//!   readers of a read-write lock, leased like semaphore permits, and
//!   `lock:{order:42}:writer-waiting` and `lock:{order:42}:readers-waiting`,
//!   set by writers and readers waiting for each other, so that they take turns;
//! * `lock:{order:42}:queue` and `lock:{order:42}:queue:alive`: the
//!   waiters in line in arrival order (fair waiters, and waiters for a
//!   plain lock that one holds), and until when each counts as still
//!   waiting; `lock:{order:42}:queue:passed`: how often others took a plain
//!   lock past its first waiter;
//! * `lock:{order:42}:released`: the pub/sub channel its release is announced
//!   on; `lock:{order:42}:released:NAME@HOST:PID/CLIENT`, one client's own
//!   channel for it, where a plain or fair lock's release naming a waiter
//!   of that client in line goes (see `wake` in line.lua);
//! * `lock:{order:42}:gone:OWNER` and `lock:{order:42}:readers:gone:OWNER`,
//!   for a while after an acquisition whose answer was lost was given back:
//!   the owner id `OWNER` is retired, and a late acquire call of it is
//!   refused (see prelude.lua's `gone_key`);
//! * `lock:fence:{T}`: the fencing counter shared by every lock in the same
//!   Redis Cluster hash slot, where `T` is a short tag chosen to hash to that slot;
//!   and, for at most a restart quarantine after a counter was created on a
//!   server that had just started, `lock:fence:{T}:born`; and after a save,
//!   `lock:fence:up` (on a Cluster, `lock:fence:{T}:up` per slot), which
//!   vouches for the server's uptime (see fence.lua).
//!
//! # Names with braces
//!
//! Every distinct string is a lock of its own, and a Redis Cluster hash tag
//! in the name (the text between its first `{` and the first `}` after it,
//! when not empty) decides the slot, so that a user can co-locate locks with
//! their data. Let `ENC` escape `%` as `%25`, `{` as `%7B` and `}` as `%7D`
//! (and nothing else, so that it leaves ordinary names as they are). Then the
//! lock key of a name is:
//!
//! * without a hash tag, `PREFIX{` + `ENC(name)` + `}`: `order:42` is
//!   `lock:{order:42}`, `{}x` is `lock:{%7B%7Dx}`, `}x` is `lock:{%7Dx}`;
//!   the empty name, which no request takes, is `lock:{%}`;
//! * with the hash tag `tag`, name = `pre{tag}post`: `PREFIX{` + `tag` +
//!   `}` + `ENC(pre)` + `{` + `ENC(post)` + `}`, the tag unescaped so that
//!   the slot is the one the user chose: `{tenant:7}:order:42` is
//!   `lock:{tenant:7}{:order:42}`, `a{t}b` is `lock:{t}a{b}`.
//!
//! No two names, and no lock and another's companion key or counter, share
//! a key: `ENC` is injective and its output has no braces, so a key without
//! a tag has exactly one `}` (where it ends) and a key with one exactly two
//! (the second where it ends); the suffixes of the companion keys and the
//! channel have no braces (a client's own channel for a lock, a channel and
//! never a key, ends in its owner part, which may), so the last `}` of any
//! key marks where its lock
//! key ends and what follows names the companion; and fencing counters start
//! with `PREFIXfence:`, where lock keys start with `PREFIX{` (a prefix has no
//! braces: the builder refuses it). Every key of a lock starts with the same
//! `PREFIX{...}`, a non-empty hash tag, so they all share one slot, which is
//! the slot of `ENC(name)` (of `name` itself for an ordinary name) or of `tag`.
//! [`lock_name`] reads a lock key back into its name.
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
//! Each token is the larger of the counter plus one and the server's clock in
//! microseconds (fence.lua's `next_fence`). Acquisitions never outpace a
//! microsecond clock, so tokens follow the clock, and a counter that comes
//! back lower than tokens already handed out (a restart from an older
//! snapshot, a backup restored) or not at all (a restart without persistence)
//! still yields a token above every earlier one: a fenced store keeps
//! rejecting the holders from before the loss. This assumes the server's
//! clock does not step back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Number of hash slots in Redis Cluster.
const SLOTS: usize = 16_384;

/// The Redis keys and channel that make up one lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LockKeys {
    /// The hash holding owner, count and fence.
    pub(crate) lock: String,
    /// The fencing counter of the lock's slot, shared by every lock of the
    /// slot (see [`fence_key`]).
    pub(crate) fence: Arc<str>,
}

impl LockKeys {
    /// The keys for the lock `name` under `prefix`.
    pub(crate) fn new(prefix: &str, name: &str) -> LockKeys {
        let lock = lock_key(prefix, name);
        LockKeys {
            fence: fence_key(prefix, slot(&lock)),
            lock,
        }
    }

    /// The channel a release is published on. Made when needed rather
    /// than kept: a client holding many locks keeps their keys.
    pub(crate) fn channel(&self) -> String {
        channel(&self.lock)
    }
}

/// The fencing counter of `slot` under `prefix`: `PREFIXfence:{T}`, where
/// the tag `T` hashes to the slot. One copy per slot and prefix for the
/// whole process, which every [`LockKeys`] of the slot shares: a client
/// holding many locks would otherwise keep a copy per lock.
fn fence_key(prefix: &str, slot: u16) -> Arc<str> {
    type Counters = HashMap<String, Vec<Option<Arc<str>>>>;
    static COUNTERS: OnceLock<Mutex<Counters>> = OnceLock::new();
    let mut counters = COUNTERS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if !counters.contains_key(prefix) {
        counters.insert(prefix.to_owned(), vec![None; SLOTS]);
    }
    let by_slot = counters.get_mut(prefix).expect("inserted above");
    by_slot[slot as usize]
        .get_or_insert_with(|| format!("{prefix}fence:{{{}}}", slot_tag(slot)).into())
        .clone()
}

/// The suffix of a lock's release channel.
pub(crate) const RELEASED: &str = ":released";
/// The suffix of a semaphore's holders (see [`LockKeys::holders`]).
pub(crate) const HOLDERS: &str = ":holders";
/// The suffix of a read-write lock's readers (see [`LockKeys::readers`]).
pub(crate) const READERS: &str = ":readers";
/// The suffix of the readers' counts (see [`LockKeys::readers_holders`]).
pub(crate) const READERS_HOLDERS: &str = ":readers:holders";
/// The suffix of the waiting readers' marker.
pub(crate) const READERS_WAITING: &str = ":readers-waiting";
/// The suffix of the waiters' line (see [`LockKeys::queue`]).
pub(crate) const QUEUE: &str = ":queue";
/// The suffix of the waiters' liveness.
pub(crate) const QUEUE_ALIVE: &str = ":queue:alive";
/// The suffix of how often a plain lock's first waiter was passed over.
pub(crate) const QUEUE_PASSED: &str = ":queue:passed";
/// The suffix of a waiting writer's marker.
pub(crate) const WRITER_WAITING: &str = ":writer-waiting";

/// The suffixes [`LockKeys`] appends to the lock key for its companion keys
/// (the channel aside), longest first where one ends another.
pub(crate) const COMPANIONS: [&str; 8] = [
    QUEUE_PASSED,
    READERS_HOLDERS,
    READERS_WAITING,
    WRITER_WAITING,
    QUEUE_ALIVE,
    HOLDERS,
    READERS,
    QUEUE,
];

impl LockKeys {
    /// A semaphore's companion hash: each holder's re-entry count, token
    /// and permits held; the number of permits and how many are taken.
    pub(crate) fn holders(&self) -> String {
        companion(&self.lock, HOLDERS)
    }

    /// A read-write lock's readers, scored by lease expiry.
    pub(crate) fn readers(&self) -> String {
        companion(&self.lock, READERS)
    }

    /// The readers' re-entry counts and tokens.
    pub(crate) fn readers_holders(&self) -> String {
        companion(&self.lock, READERS_HOLDERS)
    }

    /// The marker waiting readers set so that the next free turn is theirs.
    pub(crate) fn readers_waiting(&self) -> String {
        companion(&self.lock, READERS_WAITING)
    }

    /// The waiters in line (fair ones, and a plain lock's while it is
    /// held), scored by arrival.
    pub(crate) fn queue(&self) -> String {
        queue(&self.lock)
    }

    /// The waiters' liveness, scored by when each stops counting.
    pub(crate) fn queue_alive(&self) -> String {
        queue_alive(&self.lock)
    }

    /// The marker a writer waiting for readers sets, to hold back new readers.
    pub(crate) fn writer_waiting(&self) -> String {
        companion(&self.lock, WRITER_WAITING)
    }
}

/// The key of the lock whose key is `lock` that ends in `suffix` (one of
/// the constants above).
pub(crate) fn companion(lock: &str, suffix: &str) -> String {
    [lock, suffix].concat()
}

/// The channel a release of the lock whose key is `lock` is published on.
pub(crate) fn channel(lock: &str) -> String {
    companion(lock, RELEASED)
}

/// The waiters in line of the lock whose key is `lock`.
pub(crate) fn queue(lock: &str) -> String {
    companion(lock, QUEUE)
}

/// The waiters' liveness of the lock whose key is `lock`.
pub(crate) fn queue_alive(lock: &str) -> String {
    companion(lock, QUEUE_ALIVE)
}

/// How errors and logs name several locks taken together: their names
/// joined by ` + `.
pub(crate) fn joined<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let mut label = String::new();
    for (i, name) in names.into_iter().enumerate() {
        if i > 0 {
            label.push_str(" + ");
        }
        label.push_str(name);
    }
    label
}

/// The lock key of the lock `name` under `prefix` (see the module docs).
fn lock_key(prefix: &str, name: &str) -> String {
    let mut key = String::with_capacity(prefix.len() + name.len() + 4);
    key.push_str(prefix);
    key.push('{');
    match split_tag(name) {
        Some((pre, tag, post)) => {
            key.push_str(tag);
            key.push('}');
            escape(pre, &mut key);
            key.push('{');
            escape(post, &mut key);
        }
        // A lone `%`, which `escape` never writes: the empty name needs a
        // non-empty hash tag too, or its companions would hash elsewhere.
        None if name.is_empty() => key.push('%'),
        None => escape(name, &mut key),
    }
    key.push('}');
    key
}

/// The name of the lock whose lock key is `key` under `prefix`: the inverse
/// of [`LockKeys::new`]'s `lock`. `None` when `key` is no lock key (a
/// companion key, a fencing counter, someone else's key under the prefix).
pub(crate) fn lock_name(prefix: &str, key: &str) -> Option<String> {
    let rest = key.strip_prefix(prefix)?.strip_prefix('{')?;
    let (first, rest) = rest.split_once('}')?;
    let name = if rest.is_empty() {
        if first == "%" {
            String::new()
        } else {
            unescape(first)?
        }
    } else {
        let (pre, post) = rest.strip_suffix('}')?.split_once('{')?;
        format!("{}{{{first}}}{}", unescape(pre)?, unescape(post)?)
    };
    // Every key that decodes is checked against the name's own key, so
    // that keys no name maps to (`lock:{%7b}`, `lock:{t}%7B{}`) are refused.
    (lock_key(prefix, &name) == key).then_some(name)
}

/// `name` split around its hash tag: `(pre, tag, post)` for `pre{tag}post`.
fn split_tag(name: &str) -> Option<(&str, &str, &str)> {
    let (open, close) = tag_braces(name)?;
    Some((&name[..open], &name[open + 1..close], &name[close + 1..]))
}

/// Appends `text` to `out` with `%`, `{` and `}` percent-escaped.
fn escape(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
}

/// The inverse of [`escape`]: `None` for text it never writes (a brace, a
/// `%` that starts none of its three escapes).
fn unescape(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(['%', '{', '}']) {
        out.push_str(&rest[..at]);
        let escaped = rest[at..].get(..3)?;
        out.push(match escaped {
            "%25" => '%',
            "%7B" => '{',
            "%7D" => '}',
            _ => return None,
        });
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Some(out)
}

/// The part of `key` Redis Cluster hashes: the text between the first `{` and
/// the first `}` after it, when that text is not empty.
fn hash_tag(key: &str) -> Option<&str> {
    tag_braces(key).map(|(open, close)| &key[open + 1..close])
}

/// Where the braces of `key`'s hash tag are, when it has one.
fn tag_braces(key: &str) -> Option<(usize, usize)> {
    let open = key.find('{')?;
    let close = open + 1 + key[open + 1..].find('}')?;
    (close > open + 1).then_some((open, close))
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
    fn locks_taken_together_are_named_by_their_names_joined() {
        assert_eq!(joined(["a"]), "a");
        assert_eq!(joined(["a", "b:{c}", "d"]), "a + b:{c} + d");
        assert_eq!(joined([]), "");
        // An empty name (refused later, with the label in the message)
        // keeps its place.
        assert_eq!(joined(["", "b"]), " + b");
    }

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
        assert_eq!(keys.channel(), "lock:{order:42}:released");
        assert_eq!(slot(&keys.lock), slot("order:42"));
        assert_eq!(slot(&keys.channel()), slot(&keys.lock));
        assert_eq!(slot(&keys.fence), slot(&keys.lock));
    }

    #[test]
    fn a_hash_tag_in_the_name_decides_the_slot() {
        let keys = LockKeys::new("lock:", "{tenant:7}:order:42");
        assert_eq!(keys.lock, "lock:{tenant:7}{:order:42}");
        assert_eq!(slot(&keys.lock), slot("tenant:7"));
        assert_eq!(slot(&keys.lock), slot("{tenant:7}:order:42"));
        assert_eq!(slot(&keys.channel()), slot(&keys.lock));
        assert_eq!(slot(&keys.fence), slot(&keys.lock));
        for name in TRICKY.iter().copied().filter(|n| hash_tag(n).is_some()) {
            let lock = LockKeys::new("lock:", name).lock;
            assert_eq!(hash_tag(&lock), hash_tag(name), "{name} as {lock}");
        }
    }

    /// Names that alias, split across slots or escape wrongly in a naive layout.
    const TRICKY: [&str; 27] = [
        "x",
        "{x}",
        "}x",
        "{}x",
        "a{b",
        "{{x}",
        "{x}:holders",
        "x:holders",
        "{x}:queue",
        "%7Bx%7D",
        "%7Bx%7D:holders",
        "%7B",
        "%",
        "50%",
        "%%",
        "}",
        "{",
        "{}",
        "}{",
        "ünïcødé:🔒",
        "{ünï}cødé",
        "{tenant:7}:order:1",
        "{tenant:7}:order:2",
        "tenant:7",
        "a{t}b",
        "fence:{0}",
        "",
    ];

    #[test]
    fn tricky_names_map_to_these_keys() {
        for (name, key) in [
            ("order:42", "lock:{order:42}"),
            ("x", "lock:{x}"),
            ("{x}", "lock:{x}{}"),
            ("}x", "lock:{%7Dx}"),
            ("{}x", "lock:{%7B%7Dx}"),
            ("a{b", "lock:{a%7Bb}"),
            ("{{x}", "lock:{{x}{}"),
            ("{x}:holders", "lock:{x}{:holders}"),
            ("%7Bx%7D", "lock:{%257Bx%257D}"),
            ("50%", "lock:{50%25}"),
            ("{tenant:7}:order:1", "lock:{tenant:7}{:order:1}"),
            ("a{t}b", "lock:{t}a{b}"),
            ("}a{t}{b}", "lock:{t}%7Da{%7Bb%7D}"),
            ("", "lock:{%}"),
        ] {
            assert_eq!(LockKeys::new("lock:", name).lock, key, "{name}");
        }
    }

    #[test]
    fn lock_keys_read_back_as_their_names() {
        for prefix in ["lock:", "", "p%:"] {
            for name in TRICKY {
                let keys = LockKeys::new(prefix, name);
                assert_eq!(
                    lock_name(prefix, &keys.lock).as_deref(),
                    Some(name),
                    "{prefix}{name} as {}",
                    keys.lock
                );
            }
        }
        assert_eq!(unescape("%25%7B%7D").as_deref(), Some("%{}"));
        for name in TRICKY {
            let mut escaped = String::new();
            escape(name, &mut escaped);
            assert!(!escaped.contains(['{', '}']), "{escaped}");
            assert_eq!(unescape(&escaped).as_deref(), Some(name));
        }
    }

    #[test]
    fn other_keys_read_back_as_no_name() {
        let keys = LockKeys::new("lock:", "{x}:holders");
        for key in [
            keys.holders(),
            keys.queue_alive(),
            keys.channel(),
            keys.fence.to_string(),
            format!("{}:born", keys.fence),
            format!("{}:up", keys.fence),
            "lock:fence:up".into(),
            LockKeys::new("lock:", "x").holders(),
            "lock:order:42".into(),
            "other:{x}".into(),
            "lock:{x}y".into(),
            "lock:{}".into(),
            "lock:{%7b}".into(),
            "lock:{%7}".into(),
            "lock:{x{}".into(),
            "lock:{t}%7B{}".into(),
            "lock:{t}a{b}c".into(),
            "lock:{t}a{b}{c}".into(),
        ] {
            assert_eq!(lock_name("lock:", &key), None, "{key}");
        }
    }

    /// Every key and the channel of the lock `name`.
    fn all_keys(keys: &LockKeys) -> Vec<String> {
        let mut all: Vec<String> = COMPANIONS
            .iter()
            .map(|suffix| format!("{}{suffix}", keys.lock))
            .collect();
        all.extend([keys.lock.clone(), keys.channel()]);
        all
    }

    #[test]
    fn companions_are_the_lock_key_and_a_suffix_without_braces() {
        let keys = LockKeys::new("lock:", "{x}:y");
        let mut made = vec![
            keys.holders(),
            keys.readers(),
            keys.readers_holders(),
            keys.readers_waiting(),
            keys.writer_waiting(),
            keys.queue(),
            keys.queue_alive(),
            companion(&keys.lock, QUEUE_PASSED),
        ];
        let mut listed: Vec<String> = COMPANIONS
            .iter()
            .map(|suffix| format!("{}{suffix}", keys.lock))
            .collect();
        made.sort();
        listed.sort();
        assert_eq!(made, listed);
        assert!(keys.channel().ends_with(":released"));
        for suffix in COMPANIONS.iter().chain([&":released"]) {
            assert!(!suffix.contains(['{', '}']), "{suffix}");
        }
    }

    /// Every string of up to `len` characters from `alphabet`.
    fn every_string(alphabet: &[char], len: usize) -> Vec<String> {
        let mut all = vec![String::new()];
        let mut last = vec![String::new()];
        for _ in 0..len {
            last = last
                .iter()
                .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
                .collect();
            all.extend(last.iter().cloned());
        }
        all
    }

    #[test]
    fn no_two_names_share_a_key_and_each_lock_is_in_one_slot() {
        // Exhaustive over short strings of braces and escape look-alikes,
        // plus the tricky names.
        let mut names = every_string(&['{', '}', '%', '7', 'B', 'a', ':'], 5);
        names.extend(TRICKY.iter().map(|n| n.to_string()));
        names.sort();
        names.dedup();
        let mut owner: std::collections::HashMap<String, &str> = Default::default();
        let mut fences = std::collections::HashSet::new();
        for name in &names {
            let keys = LockKeys::new("lock:", name);
            let lock_slot = slot(&keys.lock);
            for key in all_keys(&keys) {
                assert_eq!(slot(&key), lock_slot, "{key} of {name:?}");
                if let Some(other) = owner.insert(key.clone(), name) {
                    panic!("{key} belongs to both {other:?} and {name:?}");
                }
            }
            assert_eq!(slot(&keys.fence), lock_slot, "fence of {name:?}");
            if let Some(tag) = hash_tag(name) {
                assert_eq!(lock_slot, slot(tag), "{name:?}");
            }
            assert_eq!(
                lock_name("lock:", &keys.lock).as_deref(),
                Some(name.as_str())
            );
            fences.insert(keys.fence.to_string());
            fences.insert(format!("{}:born", keys.fence));
            fences.insert(format!("{}:up", keys.fence));
        }
        for fence in &fences {
            assert!(!owner.contains_key(fence), "{fence} is a lock's key");
        }
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
            .map(|id| {
                LockKeys::new("lock:", &format!("order:{id}"))
                    .fence
                    .to_string()
            })
            .collect();
        assert!(counters.len() <= SLOTS);
    }
}
