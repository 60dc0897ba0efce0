//! The one vocabulary of lock kinds, from the attribute's options to the
//! metrics' labels and the operator commands: what a request takes
//! ([`Kind`]), what kind of lock a name is ([`LockKind`]), and how one
//! holder holds it ([`HoldMode`]).

use std::fmt;

use crate::base::error::LockError;

/// What kind of lock a request takes (also what `#[distributed_lock]`
/// names, through `__private`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One holder at a time, of every named lock: `key`, `keys`, `mode = "write"`.
    Exclusive,
    /// Some of a semaphore's permits: `permits = N` (one of N).
    Permits(Permits),
    /// Any number of readers while no writer (exclusive holder) holds it:
    /// `mode = "read"`.
    Read,
    /// Exclusive, taken in arrival order: `fair = true`.
    Fair,
}

/// What a semaphore request asks for: `take` of the semaphore's `limit`
/// permits, all or none. From a number, one permit of that many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permits {
    /// How many permits the semaphore has: the sum of the permits its
    /// holders hold never exceeds it.
    pub limit: u32,
    /// How many of them this holder takes.
    pub take: u32,
}

impl From<u32> for Permits {
    /// One of `limit` permits.
    fn from(limit: u32) -> Permits {
        Permits { limit, take: 1 }
    }
}

impl Permits {
    /// A [`LockError::Config`] for a request that can never be granted: a
    /// semaphore without permits, or a holder taking none or more than
    /// there are. `name` names the semaphore.
    pub(crate) fn check(self, name: &str) -> Result<(), LockError> {
        let problem = if self.limit == 0 {
            "needs at least one permit".to_owned()
        } else if self.take == 0 {
            "cannot be taken with no permit: take at least one".to_owned()
        } else if self.take > self.limit {
            format!(
                "has {} permits: a holder cannot take {}",
                self.limit, self.take
            )
        } else {
            return Ok(());
        };
        Err(LockError::Config(format!("semaphore `{name}` {problem}")))
    }
}

/// What kind of lock a name is, as its keys in Redis show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum LockKind {
    /// A plain lock ([`LockClient::lock`](crate::LockClient::lock), [`LockClient::lock_all`](crate::LockClient::lock_all)), or
    /// the write side of a read-write lock without readers.
    Exclusive,
    /// A fair lock ([`LockClient::fair_lock`](crate::LockClient::fair_lock)): held, or waited for in line.
    Fair,
    /// A semaphore ([`LockClient::semaphore`](crate::LockClient::semaphore)) with permits taken.
    Semaphore,
    /// A read-write lock with readers ([`LockClient::read_lock`](crate::LockClient::read_lock)), and
    /// perhaps a writer that is downgrading.
    ReadWrite,
}

impl LockKind {
    /// A lower-case name: `exclusive`, `fair`, `semaphore` or `read-write`.
    pub fn as_str(self) -> &'static str {
        match self {
            LockKind::Exclusive => "exclusive",
            LockKind::Fair => "fair",
            LockKind::Semaphore => "semaphore",
            LockKind::ReadWrite => "read-write",
        }
    }
}

impl fmt::Display for LockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a [`Holder`](crate::Holder) holds its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum HoldMode {
    /// Alone: a plain or fair lock, or the write side of a read-write lock.
    Exclusive,
    /// Permits of a semaphore (one or more: see [`Holder::permits`](crate::Holder::permits)).
    Permit,
    /// The read side of a read-write lock, beside other readers.
    Read,
}

impl HoldMode {
    /// A lower-case name: `exclusive`, `permit` or `read`.
    pub fn as_str(self) -> &'static str {
        match self {
            HoldMode::Exclusive => "exclusive",
            HoldMode::Permit => "permit",
            HoldMode::Read => "read",
        }
    }
}

impl fmt::Display for HoldMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Kind {
    /// The kind of lock a request of this kind takes: the `kind` label of
    /// the metrics and of the `lock` span, as operators see it in `lockctl`.
    pub fn lock_kind(self) -> LockKind {
        match self {
            Kind::Exclusive => LockKind::Exclusive,
            Kind::Permits(_) => LockKind::Semaphore,
            Kind::Read => LockKind::ReadWrite,
            Kind::Fair => LockKind::Fair,
        }
    }

    /// How a request of this kind holds its lock once granted.
    pub fn hold_mode(self) -> HoldMode {
        match self {
            Kind::Exclusive | Kind::Fair => HoldMode::Exclusive,
            Kind::Permits(_) => HoldMode::Permit,
            Kind::Read => HoldMode::Read,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_request_kind_names_its_lock_kind_and_hold_mode() {
        let names: Vec<(&str, &str)> = [
            Kind::Exclusive,
            Kind::Permits(2.into()),
            Kind::Read,
            Kind::Fair,
        ]
        .into_iter()
        .map(|kind| (kind.lock_kind().as_str(), kind.hold_mode().as_str()))
        .collect();
        assert_eq!(
            names,
            [
                ("exclusive", "exclusive"),
                ("semaphore", "permit"),
                ("read-write", "read"),
                ("fair", "exclusive"),
            ]
        );
    }

    #[test]
    fn a_request_for_permits_that_can_never_be_granted_is_refused() {
        let check = |limit, take| Permits { limit, take }.check("pool");
        assert!(check(1, 1).is_ok());
        assert!(check(10, 3).is_ok());
        assert!(check(10, 10).is_ok());
        for (limit, take, says) in [
            (0, 1, "semaphore `pool` needs at least one permit"),
            (3, 0, "take at least one"),
            (3, 4, "has 3 permits: a holder cannot take 4"),
        ] {
            let err = check(limit, take).expect_err("refused");
            assert!(matches!(err, LockError::Config(_)), "{err:?}");
            assert!(err.to_string().contains(says), "{err}");
        }
        assert_eq!(Permits::from(5), Permits { limit: 5, take: 1 });
    }
}
