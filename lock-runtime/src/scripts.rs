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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// The caller holds the lock, with this fencing token and re-entry depth.
    Held { fence: u64, count: u64 },
    /// Another owner holds it for this much longer (`None`: no expiry set).
    Busy { ttl: Option<Duration> },
}

/// What the release script did.
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

    pub(crate) async fn acquire(
        &self,
        name: &str,
        keys: &LockKeys,
        owner: &str,
        lease: Duration,
    ) -> Result<Acquired, LockError> {
        let mut call = ACQUIRE.prepare_invoke();
        call.key(&keys.lock)
            .key(&keys.fence)
            .arg(owner)
            .arg(millis(lease));
        let (held, value, count): (i64, i64, i64) =
            self.run(Some(name), &call, self.timeout).await?;
        Ok(if held == 1 {
            Acquired::Held {
                fence: value as u64,
                count: count as u64,
            }
        } else {
            Acquired::Busy {
                ttl: (value >= 0).then(|| Duration::from_millis(value as u64)),
            }
        })
    }

    /// Counts one level down, or every level when `all` is set.
    pub(crate) async fn release(
        &self,
        name: &str,
        keys: &LockKeys,
        owner: &str,
        all: bool,
    ) -> Result<Released, LockError> {
        let mut call = RELEASE.prepare_invoke();
        call.key(&keys.lock)
            .key(&keys.channel)
            .arg(owner)
            .arg(if all { "1" } else { "0" });
        let left: i64 = self.run(Some(name), &call, self.timeout).await?;
        Ok(match left {
            0 => Released::Free,
            n if n > 0 => Released::StillHeld(n as u64),
            _ => Released::NotHeld,
        })
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

/// Milliseconds for PEXPIRE, never zero (PEXPIRE 0 would delete the key).
fn millis(duration: Duration) -> u64 {
    (duration.as_millis() as u64).max(1)
}
