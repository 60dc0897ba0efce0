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

/// What a grant of `locks` locks (`{1, token, count, ...}`, one pair per
/// lock) took; `None` for any other reply.
pub(crate) fn granted(locks: usize, reply: &[i64]) -> Option<Vec<Taken>> {
    let [1, taken @ ..] = reply else {
        return None;
    };
    (taken.len() == 2 * locks).then(|| {
        taken
            .chunks_exact(2)
            .map(|pair| Taken {
                fence: pair[0] as u64,
                count: pair[1] as u64,
            })
            .collect()
    })
}

/// Reads the acquire scripts' reply for `locks` locks.
pub(crate) fn acquired(name: &str, locks: usize, reply: &[i64]) -> Result<Acquired, LockError> {
    if let Some(held) = granted(locks, reply) {
        return Ok(Acquired::Held(held));
    }
    match reply {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A grant yields one token and depth per lock; a busy reply, or a
    /// grant of another number of locks, grants nothing.
    #[test]
    fn a_grant_is_read_with_its_tokens() {
        let two = [
            Taken {
                fence: 41,
                count: 1,
            },
            Taken { fence: 7, count: 2 },
        ];
        assert_eq!(granted(2, &[1, 41, 1, 7, 2]), Some(two.to_vec()));
        assert!(matches!(
            acquired("k", 2, &[1, 41, 1, 7, 2]),
            Ok(Acquired::Held(held)) if held == two
        ));
        assert_eq!(granted(1, &[1, 41, 1, 7, 2]), None);
        assert!(acquired("k", 1, &[1, 41, 1, 7, 2]).is_err());
        assert_eq!(granted(1, &[0, 250, 0]), None);
        assert_eq!(granted(1, &[]), None);
    }
}
