//! The Lua scripts, and typed calls to them with a timeout on every call.
//!
//! Each script is hashed once per process ([`redis::Script`] in a static) and
//! run with EVALSHA; after a server restart empties the script cache, the
//! NOSCRIPT reply makes redis-rs load it and retry.

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{FromRedisValue, Script, ScriptInvocation};

use crate::error::LockError;
use crate::keys::LockKeys;

static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/acquire.lua")));
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/release.lua")));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/renew.lua")));

/// What the acquire script found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// The caller holds every lock, with these fencing tokens and re-entry
    /// depths, in the order the locks were named.
    Held(Vec<Taken>),
    /// Another owner holds at least one lock, for this much longer at most
    /// (`None`: one has no expiry).
    Busy { ttl: Option<Duration> },
}

/// One lock as the acquire script left it for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Taken {
    pub(crate) fence: u64,
    pub(crate) count: u64,
}

/// What the release script did to one lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// The lock is free and waiters were told.
    Free,
    /// This many re-entry levels remain.
    StillHeld(u64),
    /// The caller did not hold the lock.
    NotHeld,
}

/// A connection to the lock server plus the timeout every call gets.
#[derive(Clone)]
pub(crate) struct Scripts {
    conn: ConnectionManager,
    timeout: Duration,
}

impl Scripts {
    pub(crate) fn new(conn: ConnectionManager, timeout: Duration) -> Self {
        Scripts { conn, timeout }
    }

    /// Takes every lock in `keys` or none; `name` names them in errors.
    pub(crate) async fn acquire(
        &self,
        name: &str,
        keys: &[LockKeys],
        owner: &str,
        lease: Duration,
    ) -> Result<Acquired, LockError> {
        let mut call = ACQUIRE.prepare_invoke();
        for lock in keys {
            call.key(&lock.lock);
        }
        for lock in keys {
            call.key(&lock.fence);
        }
        call.arg(owner).arg(millis(lease));
        let reply: Vec<i64> = self.run(Some(name), &call, self.timeout).await?;
        match reply.as_slice() {
            [1, taken @ ..] if taken.len() == 2 * keys.len() => Ok(Acquired::Held(
                taken
                    .chunks_exact(2)
                    .map(|pair| Taken {
                        fence: pair[0] as u64,
                        count: pair[1] as u64,
                    })
                    .collect(),
            )),
            [0, ttl] => Ok(Acquired::Busy {
                ttl: (*ttl >= 0).then(|| Duration::from_millis(*ttl as u64)),
            }),
            _ => Err(unexpected(name, "acquire", &reply)),
        }
    }

    /// Counts each lock in `keys` one level down, or every level when `all`
    /// is set; one outcome per lock.
    pub(crate) async fn release(
        &self,
        name: &str,
        keys: &[LockKeys],
        owner: &str,
        all: bool,
    ) -> Result<Vec<Released>, LockError> {
        let mut call = RELEASE.prepare_invoke();
        for lock in keys {
            call.key(&lock.lock);
        }
        for lock in keys {
            call.key(&lock.channel);
        }
        call.arg(owner).arg(if all { "1" } else { "0" });
        let left: Vec<i64> = self.run(Some(name), &call, self.timeout).await?;
        if left.len() != keys.len() {
            return Err(unexpected(name, "release", &left));
        }
        Ok(left
            .into_iter()
            .map(|left| match left {
                0 => Released::Free,
                n if n > 0 => Released::StillHeld(n as u64),
                _ => Released::NotHeld,
            })
            .collect())
    }

    /// Renews `locks` (lock key, owner, lease) in one call; `true` where still held.
    pub(crate) async fn renew<'a>(
        &self,
        locks: impl IntoIterator<Item = (&'a str, &'a str, Duration)>,
        timeout: Duration,
    ) -> Result<Vec<bool>, LockError> {
        let mut call = RENEW.prepare_invoke();
        for (key, owner, lease) in locks {
            call.key(key).arg(owner).arg(millis(lease));
        }
        let renewed: Vec<i64> = self.run(None, &call, timeout.min(self.timeout)).await?;
        Ok(renewed.into_iter().map(|r| r == 1).collect())
    }

    async fn run<T: FromRedisValue>(
        &self,
        name: Option<&str>,
        call: &ScriptInvocation<'_>,
        timeout: Duration,
    ) -> Result<T, LockError> {
        let mut conn = self.conn.clone();
        match tokio::time::timeout(timeout, call.invoke_async(&mut conn)).await {
            // The connection's own response timeout may fire first.
            Ok(Err(err)) if err.is_timeout() => Err(LockError::CommandTimeout {
                key: name.map(str::to_owned),
                after: timeout,
            }),
            Ok(result) => result.map_err(|err| LockError::from_redis(name, err)),
            Err(_) => Err(LockError::CommandTimeout {
                key: name.map(str::to_owned),
                after: timeout,
            }),
        }
    }
}

/// A reply no version of the script gives: another program's script under
/// the same name, or a corrupted reply.
fn unexpected(name: &str, script: &str, reply: &[i64]) -> LockError {
    LockError::Redis {
        key: Some(name.to_owned()),
        source: redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "unexpected reply from a lock script",
            format!("{script}: {reply:?}"),
        )),
    }
}

/// Milliseconds for PEXPIRE, never zero (PEXPIRE 0 would delete the key).
fn millis(duration: Duration) -> u64 {
    (duration.as_millis() as u64).max(1)
}
