//! One function per script, which builds its call: the only place that
//! knows each script's KEYS and ARGV layout (besides the script's header).

use std::time::Duration;

use super::items::Items;
use super::{
    ACQUIRE, Call, FAIR_ACQUIRE, FAIR_LEAVE, FENCE_RAISE, FORCE_RELEASE, Giving, HANDOFF, INSPECT,
    PERMIT_ACQUIRE, PLACE_RELEASE, Place, READ_ACQUIRE, RELEASE, RENEW, Renewing, Stored,
    TURN_LEAVE, Taken,
};
use crate::base::keys::{self, LockKeys};
use crate::base::kind::Permits;

/// Milliseconds for PEXPIRE, never zero (PEXPIRE 0 would delete the key).
fn millis(duration: Duration) -> String {
    lease_millis(duration).to_string()
}

/// [`millis`] as a number.
fn lease_millis(duration: Duration) -> u64 {
    (duration.as_millis() as u64).max(1)
}

fn flag(on: bool) -> String {
    flag_of(on).to_owned()
}

fn flag_of(on: bool) -> &'static str {
    if on { "1" } else { "0" }
}

/// How a request asks for one of its locks (the acquire scripts' "asking"
/// argument, one character per lock): afresh, or re-entering what an
/// enclosing critical section of the same owner id holds. The scripts
/// refuse a re-entry as lost when the lock is no longer held that way,
/// instead of granting it afresh behind the enclosing holder's back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asking {
    /// Not held by this owner id yet.
    Fresh,
    /// Held by this owner id: one more level, lengthening its lease to the
    /// request's if that is longer.
    Reentry,
    /// Held by this owner id with a fixed lease, which bounds the whole
    /// hold: one more level, the lease kept as it is.
    ReentryKeepingLease,
    /// The other side of a read-write lock is held by this owner id (a
    /// writer taking the read side, a reader upgrading): this side is
    /// taken with the request's lease.
    OtherSide,
}

impl Asking {
    pub(crate) fn code(self) -> char {
        match self {
            Asking::Fresh => '0',
            Asking::Reentry => 'h',
            Asking::ReentryKeepingLease => 'k',
            Asking::OtherSide => 'o',
        }
    }
}

/// [`Asking::Fresh`]'s code as an argument.
const FRESH: &str = "0";

/// Who asks for locks: its owner id, and how it asks for each lock (the
/// codes of [`Asking`], one per lock; empty: every lock afresh).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Asker<'a> {
    pub(crate) owner: &'a str,
    pub(crate) asking: &'a str,
}

impl<'a> Asker<'a> {
    /// An owner taking locks it does not hold yet.
    #[cfg(test)]
    pub(crate) fn fresh(owner: &'a str) -> Self {
        Asker { owner, asking: "" }
    }

    /// The asking argument of a script that takes several locks.
    fn every(&self) -> &str {
        if self.asking.is_empty() {
            FRESH
        } else {
            self.asking
        }
    }

    /// The asking argument of a script that takes one lock.
    fn one(&self) -> String {
        let first = self.asking.chars().next();
        first.unwrap_or(Asking::Fresh.code()).to_string()
    }
}

/// Each lock's keys of one role after another: the layout of the scripts
/// that take several locks at once (`KEYS[1..n]`, then `KEYS[n+1..2n]`, ...).
fn by_role(locks: &[LockKeys], roles: &[fn(&LockKeys) -> String]) -> Vec<String> {
    roles
        .iter()
        .flat_map(|role| locks.iter().map(role))
        .collect()
}

/// `acquire.lua`: takes every lock in `locks` or none; a caller that has
/// to wait for readers holds new readers back with a mark that lasts
/// `mark` unless it tries again. With `line` (one lock asked for alone,
/// not on Redlock), the lock's line applies: one that waits for it while
/// another holds it gets in line for as long, and it is taken past the
/// line's first waiter only so often.
pub(crate) fn acquire(
    locks: &[LockKeys],
    asker: Asker,
    lease: Duration,
    mark: Duration,
    line: bool,
) -> Call {
    let bytes: usize = locks.iter().map(|l| l.lock.len() + l.fence.len()).sum();
    let mut items = Items::with_capacity(2 * locks.len() + 5, bytes + 64);
    for lock in locks {
        items.key(&[&lock.lock]);
    }
    for lock in locks {
        items.key(&[&lock.fence]);
    }
    items
        .arg(&[asker.owner])
        .number(lease_millis(lease))
        .number(mark.as_millis() as u64)
        .arg(&[asker.every()])
        .arg(&[flag_of(line)]);
    Call::of(&ACQUIRE, items).quarantined()
}

/// `permit_acquire.lua`: takes (or re-enters) `permits.take` of the
/// `permits.limit` permits of a semaphore, all or none (a bare number:
/// one of that many).
pub(crate) fn permit_acquire(
    lock: &LockKeys,
    asker: Asker,
    lease: Duration,
    permits: impl Into<Permits>,
) -> Call {
    let Permits { limit, take } = permits.into();
    let keys = vec![lock.lock.clone(), lock.holders(), lock.fence.to_string()];
    let args = vec![
        asker.owner.to_owned(),
        millis(lease),
        limit.to_string(),
        take.to_string(),
        asker.one(),
    ];
    Call::new(&PERMIT_ACQUIRE, keys, args).quarantined()
}

/// `read_acquire.lua`: takes or re-enters the read side of a read-write
/// lock; a caller that has to wait claims the next turn for readers with a
/// mark that lasts `mark` unless it tries again.
pub(crate) fn read_acquire(lock: &LockKeys, asker: Asker, lease: Duration, mark: Duration) -> Call {
    let keys = vec![
        lock.lock.clone(),
        lock.readers(),
        lock.readers_holders(),
        lock.fence.to_string(),
        lock.writer_waiting(),
        lock.readers_waiting(),
    ];
    let args = vec![
        asker.owner.to_owned(),
        millis(lease),
        mark.as_millis().to_string(),
        asker.one(),
    ];
    Call::new(&READ_ACQUIRE, keys, args).quarantined()
}

/// `fair_acquire.lua`: takes or re-enters a lock in arrival order; when it
/// is not the caller's turn and `enqueue` is set, the caller waits in line,
/// where it stays for `stay` unless it tries again.
pub(crate) fn fair_acquire(
    lock: &LockKeys,
    asker: Asker,
    lease: Duration,
    stay: Duration,
    enqueue: bool,
) -> Call {
    let keys = vec![lock.lock.clone(), lock.fence.to_string()];
    let args = vec![
        asker.owner.to_owned(),
        millis(lease),
        millis(stay),
        flag(enqueue),
        asker.one(),
    ];
    Call::new(&FAIR_ACQUIRE, keys, args).quarantined()
}

/// Gives back what `owner` holds of `locks`, stored as `stored`: one
/// re-entry level, or every level (see [`Giving`]). Lock hashes go through
/// `release.lua` (several at once), which may keep a freed lock taken a
/// while longer; a place (a permit, a read lock) through
/// `place_release.lua`, which announces it and names the first fair waiter
/// in line, if any.
///
/// Every level at once is safe to run twice (the second run finds nothing
/// held, or keeps the lock again for as long); one level down of several
/// is not.
pub(crate) fn release(locks: &[LockKeys], stored: &Stored, owner: &str, giving: Giving) -> Call {
    let locks = locks.iter().map(|lock| lock.lock.as_str());
    release_of(locks, stored, owner, giving, &[])
}

/// The release that gives back what the acquire call `take` granted, with
/// the tokens `granted` (see [`Undo`](super::Undo)): every acquire script's
/// first keys are the keys of its `locks` locks, in order, and its first
/// argument is the owner id.
///
/// The give-back frees only a lock still held under the token it was
/// granted with: one the owner id holds under another token was granted
/// to it again after the grant given back lapsed, and a give-back that
/// arrives late (held up on a connection that went dead) must leave it
/// to its holder. (A re-entry keeps its lock's token: a give-back of a
/// re-entry counts down one level of the hold it entered.)
pub(crate) fn undo(
    take: &Call,
    locks: usize,
    stored: &Stored,
    giving: Giving,
    granted: &[Taken],
) -> Call {
    let owner = take.args().next().unwrap_or_default();
    let tokens: Vec<u64> = granted.iter().map(|taken| taken.fence).collect();
    release_of(take.keys().take(locks), stored, owner, giving, &tokens)
}

/// [`release`] of the locks whose lock keys are `locks`; with `tokens`
/// (one per lock), only of the locks held under those tokens (see
/// [`undo`]).
fn release_of<'a>(
    locks: impl ExactSizeIterator<Item = &'a str> + Clone,
    stored: &Stored,
    owner: &str,
    giving: Giving,
    tokens: &[u64],
) -> Call {
    let call = match stored {
        Stored::Hash => {
            let bytes: usize = locks.clone().map(str::len).sum();
            let mut items = Items::with_capacity(locks.len() + 5, bytes + owner.len() + 16);
            for lock in locks.clone() {
                items.key(&[lock]);
            }
            items
                .arg(&[owner])
                .arg(&[flag_of(giving.all)])
                .number(giving.keep.as_millis() as u64)
                .arg(&[flag_of(giving.announce)]);
            if !giving.retire.is_zero() || !tokens.is_empty() {
                items.number(retire_millis(giving));
            }
            for &token in tokens {
                items.number(token);
            }
            Call::of(&RELEASE, items)
        }
        Stored::Place(place) => {
            let Place {
                set,
                holders,
                queued,
                ..
            } = &**place;
            let mut locks = locks;
            let lock = locks.next().unwrap_or_default();
            let mut keys = vec![set.clone(), holders.clone(), keys::channel(lock)];
            if *queued {
                // A read lock: name the first fair waiter in line.
                keys.extend([keys::queue(lock), keys::queue_alive(lock)]);
            }
            let mut args = vec![owner.to_owned(), flag(giving.all)];
            if !giving.retire.is_zero() || !tokens.is_empty() {
                args.push(retire_millis(giving).to_string());
            }
            if let Some(token) = tokens.first() {
                args.push(token.to_string());
            }
            Call::new(&PLACE_RELEASE, keys, args)
        }
    };
    call.idempotent(giving.all)
}

/// The release scripts' retire argument: how long `giving` retires the
/// owner id for, 0 for not at all (present only when tokens follow it).
fn retire_millis(giving: Giving) -> u64 {
    if giving.retire.is_zero() {
        0
    } else {
        lease_millis(giving.retire)
    }
}

/// How many times in a row a lock that waiters of other clients marked is
/// handed from one waiter of a client to the next before it is released
/// and announced to all (see `handoff.lua`).
pub(crate) const HANDOFFS_IN_A_ROW: u32 = 8;

/// A waiter of the releasing client a lock may be handed to (see
/// `handoff.lua`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Next<'a> {
    pub(crate) owner: &'a str,
    pub(crate) lease: Duration,
    /// A fair waiter, served in its line's order; otherwise a plain one.
    pub(crate) fair: bool,
    /// A fair waiter not in line yet, which the call puts in line first,
    /// to stay there this long without trying again.
    pub(crate) joining: Option<Duration>,
}

/// `handoff.lua`: gives back what `owner` holds of `lock` (as [`release`]
/// does for a lock hash) and, when it becomes free, hands it to the one of
/// `offers` whose turn it is.
pub(crate) fn handoff(lock: &LockKeys, owner: &str, giving: Giving, offers: &[Next<'_>]) -> Call {
    let keys = vec![lock.lock.clone(), lock.fence.to_string()];
    let mut args = vec![
        owner.to_owned(),
        flag(giving.all),
        giving.keep.as_millis().to_string(),
        flag(giving.announce),
        HANDOFFS_IN_A_ROW.to_string(),
        offers.len().to_string(),
    ];
    for next in offers {
        let how = match next.joining {
            Some(stay) => format!("j{}", stay.as_millis()),
            None => flag(next.fair),
        };
        args.extend([next.owner.to_owned(), millis(next.lease), how]);
    }
    Call::new(&HANDOFF, keys, args).quarantined()
}

/// `renew.lua`: renews `items` in one call, each for its own lease.
pub(crate) fn renew(items: &[Renewing<'_>]) -> Call {
    let mut keys = Vec::with_capacity(2 * items.len());
    let mut args = Vec::with_capacity(3 * items.len());
    for item in items {
        let kind = match item.stored {
            Stored::Hash => {
                keys.extend([item.key.to_owned(), item.key.to_owned()]);
                "x"
            }
            Stored::Place(place) => {
                keys.extend([place.set.clone(), place.holders.clone()]);
                "z"
            }
        };
        args.extend([kind.to_owned(), item.owner.to_owned(), millis(item.lease)]);
    }
    Call::new(&RENEW, keys, args).idempotent(true)
}

/// `fence_raise.lua`: raises fencing counters to at least the given tokens.
pub(crate) fn fence_raise(counters: &[(&str, u64)]) -> Call {
    let keys = counters.iter().map(|(key, _)| (*key).to_owned()).collect();
    let args = counters
        .iter()
        .map(|(_, token)| token.to_string())
        .collect();
    Call::new(&FENCE_RAISE, keys, args).idempotent(true)
}

/// `fair_leave.lua`: takes a fair waiter out of line.
pub(crate) fn fair_leave(lock: &LockKeys, owner: &str) -> Call {
    let keys = vec![
        lock.queue(),
        lock.queue_alive(),
        lock.lock.clone(),
        lock.channel(),
    ];
    Call::new(&FAIR_LEAVE, keys, vec![owner.to_owned()]).idempotent(true)
}

/// `turn_leave.lua`: takes back the marks a writer or reader that stops
/// waiting set to hold the other side back, and its place in line, and
/// wakes the waiters they held back.
pub(crate) fn turn_leave(locks: &[LockKeys], owner: &str) -> Call {
    let keys = by_role(
        locks,
        &[
            LockKeys::writer_waiting,
            LockKeys::readers_waiting,
            |l| l.channel(),
            LockKeys::queue,
            LockKeys::queue_alive,
            |l| l.lock.clone(),
        ],
    );
    Call::new(&TURN_LEAVE, keys, vec![owner.to_owned()]).idempotent(true)
}

/// Every key of one lock, for the operator scripts that look at all of them.
fn every_key(lock: &LockKeys) -> Vec<String> {
    vec![
        lock.lock.clone(),
        lock.holders(),
        lock.readers(),
        lock.readers_holders(),
        lock.queue(),
        lock.queue_alive(),
        lock.channel(),
    ]
}

/// `inspect.lua`: what one store holds of a lock (holders, waiters, subscribers).
pub(crate) fn inspect(lock: &LockKeys) -> Call {
    Call::new(&INSPECT, every_key(lock), Vec::new()).idempotent(true)
}

/// `force_release.lua`: deletes a lock whoever holds it, and wakes its waiters.
pub(crate) fn force_release(lock: &LockKeys) -> Call {
    Call::new(&FORCE_RELEASE, every_key(lock), Vec::new()).idempotent(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_locks_are_laid_out_role_by_role() {
        let locks = [LockKeys::new("lock:", "a"), LockKeys::new("lock:", "b")];
        let call = release(&locks, &Stored::Hash, "me", Giving::ALL);
        assert_eq!(call.keys().collect::<Vec<_>>(), ["lock:{a}", "lock:{b}"]);
        assert_eq!(call.args().collect::<Vec<_>>(), ["me", "1", "0", "0"]);
        assert!(call.is_idempotent());
        assert!(!release(&locks, &Stored::Hash, "me", Giving::ONE).is_idempotent());
    }

    #[test]
    fn a_lease_is_never_zero_milliseconds() {
        let lock = LockKeys::new("lock:", "a");
        let call = permit_acquire(&lock, Asker::fresh("me"), Duration::from_micros(10), 3);
        assert_eq!(call.args().collect::<Vec<_>>(), ["me", "1", "3", "1", "0"]);
    }

    #[test]
    fn a_permit_request_names_the_semaphores_permits_then_how_many_it_takes() {
        let lock = LockKeys::new("lock:", "pool");
        let several = Permits { limit: 10, take: 4 };
        let call = permit_acquire(&lock, Asker::fresh("me"), Duration::from_secs(1), several);
        assert_eq!(
            call.keys().collect::<Vec<_>>(),
            ["lock:{pool}", "lock:{pool}:holders", &lock.fence]
        );
        assert_eq!(
            call.args().collect::<Vec<_>>(),
            ["me", "1000", "10", "4", "0"]
        );
    }
}
