//! What the lock scripts answer, read into types.

use std::time::Duration;

use crate::base::error::{LockError, LossReason};

/// What an acquire script found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// The caller holds every lock, with these fencing tokens and re-entry
    /// depths, in the order the locks were named.
    Held(Vec<Taken>),
    /// Another owner holds at least one lock, for this much longer at most
    /// (`None`: one has no expiry); or, `quarantined`, only the restart
    /// quarantine is in the way, for `ttl` more.
    Busy {
        ttl: Option<Duration>,
        quarantined: bool,
    },
}

/// One lock as the acquire script left it for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Taken {
    pub(crate) fence: u64,
    pub(crate) count: u64,
}

/// What the release script did to one lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Released {
    /// The lock is free and waiters were told.
    Free,
    /// This many re-entry levels remain.
    StillHeld(u64),
    /// The caller did not hold the lock.
    #[default]
    NotHeld,
}

/// What a handoff (`handoff.lua`) did: the release's outcome for the
/// releaser, and, if the lock was handed on, to which offer (its index) and
/// with which fencing token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HandedOn {
    pub(crate) released: Released,
    pub(crate) to: Option<(usize, u64)>,
}

/// Reads the acquire scripts' reply for `locks` locks.
pub(crate) fn acquired(name: &str, locks: usize, reply: &[i64]) -> Result<Acquired, LockError> {
    match reply {
        [1, taken @ ..] if taken.len() == 2 * locks => Ok(Acquired::Held(
            taken
                .chunks_exact(2)
                .map(|pair| Taken {
                    fence: pair[0] as u64,
                    count: pair[1] as u64,
                })
                .collect(),
        )),
        [0, ttl, rest @ ..] if rest.len() <= 1 => Ok(Acquired::Busy {
            ttl: (*ttl >= 0).then(|| Duration::from_millis(*ttl as u64)),
            quarantined: rest == [1],
        }),
        // A semaphore request that cannot be granted (permit_acquire.lua).
        [-1, recorded, asked] => Err(LockError::Config(format!(
            "semaphore `{name}` has {recorded} permits, not {asked}: its holders recorded \
             {recorded}, and every request must name that number while it has holders"
        ))),
        [-2, held, asked] => Err(LockError::Config(format!(
            "semaphore `{name}`: this task holds {held} of its permits in an enclosing \
             critical section and asks for {asked}; a re-entry holds the permits of the \
             outer hold and cannot take more"
        ))),
        [-3, limit, asked] => Err(LockError::Config(format!(
            "semaphore `{name}` has {limit} permits: a holder cannot take {asked}"
        ))),
        // A re-entry that found the lock no longer its owner's (acquire.lua).
        [-4, _] => Err(LockError::Lost {
            key: name.to_owned(),
            reason: LossReason::NotHeldAtReentry,
        }),
        _ => Err(unexpected(name, "acquire", reply)),
    }
}

/// Reads one release outcome.
pub(crate) fn released(left: i64) -> Released {
    match left {
        0 => Released::Free,
        n if n > 0 => Released::StillHeld(n as u64),
        _ => Released::NotHeld,
    }
}

/// A reply no version of the script gives: another program's script under
/// the same name, or a corrupted reply.
pub(crate) fn unexpected(name: &str, script: &str, reply: &[i64]) -> LockError {
    LockError::Redis {
        key: Some(name.to_owned()),
        source: redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "unexpected reply from a lock script",
            format!("{script}: {reply:?}"),
        )),
    }
}
