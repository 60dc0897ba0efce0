//! The Lua scripts, and typed calls to them with a timeout on every call.
//!
//! Each script is hashed once per process ([`redis::Script`] in a static) and
//! run with EVALSHA; after a server restart empties the script cache, the
//! NOSCRIPT reply makes redis-rs load it and retry.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{FromRedisValue, Script, ScriptInvocation};

use crate::error::LockError;
use crate::keys::LockKeys;

/// A script with the shared helpers of `prelude.lua` in front of it.
macro_rules! script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("scripts/prelude.lua"),
                include_str!(concat!("scripts/", $file))
            ))
        })
    };
}

static ACQUIRE: LazyLock<Script> = script!("acquire.lua");
static RELEASE: LazyLock<Script> = script!("release.lua");
static RENEW: LazyLock<Script> = script!("renew.lua");
static PERMIT_ACQUIRE: LazyLock<Script> = script!("permit_acquire.lua");
static READ_ACQUIRE: LazyLock<Script> = script!("read_acquire.lua");
static PLACE_RELEASE: LazyLock<Script> = script!("place_release.lua");
static FAIR_ACQUIRE: LazyLock<Script> = script!("fair_acquire.lua");
static FAIR_LEAVE: LazyLock<Script> = script!("fair_leave.lua");

/// How a held item is stored, which decides how it is renewed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stored {
    /// A lock hash whose `owner` field names the holder.
    Hash,
    /// A place in a sorted set scored by lease expiry, with a companion
    /// hash of re-entry counts and tokens (a semaphore's permits, a
    /// read-write lock's readers).
    /// `queue` is the lock's line of fair waiters, for read locks.
    Place {
        set: String,
        holders: String,
        queue: Option<String>,
    },
}

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

/// The restart quarantine every acquire script applies (see
/// `quarantine_left` in prelude.lua and `LockClientBuilder::restart_quarantine`).
#[derive(Debug, Clone)]
pub(crate) struct Quarantine {
    /// The server's run id when this client connected.
    pub(crate) seen: Arc<str>,
    pub(crate) length: Duration,
    pub(crate) strict: bool,
}

/// A connection to the lock server plus the timeout every call gets.
#[derive(Clone)]
pub(crate) struct Scripts {
    conn: ConnectionManager,
    timeout: Duration,
    quarantine: Quarantine,
}

impl Scripts {
    pub(crate) fn new(conn: ConnectionManager, timeout: Duration, quarantine: Quarantine) -> Self {
        Scripts {
            conn,
            timeout,
            quarantine,
        }
    }

    /// Appends the quarantine arguments every acquire script takes last.
    fn quarantine_args(&self, call: &mut ScriptInvocation<'_>) {
        let quarantine = &self.quarantine;
        call.arg(&*quarantine.seen)
            .arg(quarantine.length.as_millis() as u64)
            .arg(if quarantine.strict { "1" } else { "0" });
    }

    /// Takes every lock in `keys` or none; `name` names them in errors. A
    /// caller that waits for readers holds new readers back for `waiting`.
    pub(crate) async fn acquire(
        &self,
        name: &str,
        keys: &[LockKeys],
        owner: &str,
        lease: Duration,
        waiting: Duration,
    ) -> Result<Acquired, LockError> {
        let mut call = ACQUIRE.prepare_invoke();
        for lock in keys {
            call.key(&lock.lock);
        }
        for lock in keys {
            call.key(&lock.fence);
        }
        for lock in keys {
            call.key(lock.readers());
        }
        for lock in keys {
            call.key(lock.writer_waiting());
        }
        for lock in keys {
            call.key(lock.readers_waiting());
        }
        call.arg(owner)
            .arg(millis(lease))
            .arg(waiting.as_millis() as u64);
        self.quarantine_args(&mut call);
        let reply: Vec<i64> = self.run(Some(name), &call, self.timeout).await?;
        acquired(name, keys.len(), &reply)
    }

    /// Takes (or re-enters) one of `permits` permits of a semaphore.
    pub(crate) async fn acquire_permit(
        &self,
        name: &str,
        keys: &LockKeys,
        owner: &str,
        lease: Duration,
        permits: u32,
    ) -> Result<Acquired, LockError> {
        let mut call = PERMIT_ACQUIRE.prepare_invoke();
        call.key(&keys.lock)
            .key(keys.holders())
            .key(&keys.fence)
            .arg(owner)
            .arg(millis(lease))
            .arg(permits);
        self.quarantine_args(&mut call);
        let reply: Vec<i64> = self.run(Some(name), &call, self.timeout).await?;
        acquired(name, 1, &reply)
    }

    /// Takes or re-enters the read side of a read-write lock; a caller
    /// that has to wait claims the next turn for readers for `waiting`.
    pub(crate) async fn acquire_read(
        &self,
        name: &str,
        keys: &LockKeys,
        owner: &str,
        lease: Duration,
        waiting: Duration,
    ) -> Result<Acquired, LockError> {
        let mut call = READ_ACQUIRE.prepare_invoke();
        call.key(&keys.lock)
            .key(keys.readers())
            .key(keys.readers_holders())
            .key(&keys.fence)
            .key(keys.writer_waiting())
            .key(keys.readers_waiting())
            .arg(owner)
            .arg(millis(lease))
            .arg(waiting.as_millis() as u64);
        self.quarantine_args(&mut call);
        let reply: Vec<i64> = self.run(Some(name), &call, self.timeout).await?;
        acquired(name, 1, &reply)
    }

    /// Takes or re-enters a lock in arrival order; when it is not the
    /// caller's turn and `enqueue` is set, the caller waits in line, where it
    /// stays for `stay` unless it tries again.
    pub(crate) async fn acquire_fair(
        &self,
        name: &str,
        keys: &LockKeys,
        owner: &str,
        lease: Duration,
        stay: Duration,
        enqueue: bool,
    ) -> Result<Acquired, LockError> {
        let mut call = FAIR_ACQUIRE.prepare_invoke();
        call.key(&keys.lock)
            .key(&keys.fence)
            .key(keys.queue())
            .key(keys.queue_alive())
            .key(keys.readers())
            .arg(owner)
            .arg(millis(lease))
            .arg(millis(stay))
            .arg(if enqueue { "1" } else { "0" });
        self.quarantine_args(&mut call);
        let reply: Vec<i64> = self.run(Some(name), &call, self.timeout).await?;
        acquired(name, 1, &reply)
    }

    /// Takes a fair waiter out of line.
    pub(crate) async fn leave_line(
        &self,
        name: &str,
        keys: &LockKeys,
        owner: &str,
    ) -> Result<(), LockError> {
        let mut call = FAIR_LEAVE.prepare_invoke();
        call.key(keys.queue())
            .key(keys.queue_alive())
            .key(&keys.lock)
            .key(&keys.channel)
            .arg(owner);
        self.run::<i64>(Some(name), &call, self.timeout).await?;
        Ok(())
    }

    /// Gives back one level of a place in a leased set (a permit, a read
    /// lock), every level when `all`, and announces it on `channel`, naming
    /// the first in `queue` if there is one.
    pub(crate) async fn release_place(
        &self,
        name: &str,
        (set, holders): (&str, &str),
        (channel, queue): (&str, Option<&str>),
        owner: &str,
        all: bool,
    ) -> Result<Released, LockError> {
        let mut call = PLACE_RELEASE.prepare_invoke();
        call.key(set).key(holders).key(channel);
        if let Some(queue) = queue {
            call.key(queue);
        }
        call.arg(owner).arg(if all { "1" } else { "0" });
        let left: Vec<i64> = self.run(Some(name), &call, self.timeout).await?;
        match left.as_slice() {
            [left] => Ok(released(*left)),
            _ => Err(unexpected(name, "release", &left)),
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
        for lock in keys {
            call.key(lock.queue());
        }
        call.arg(owner).arg(if all { "1" } else { "0" });
        let left: Vec<i64> = self.run(Some(name), &call, self.timeout).await?;
        if left.len() != keys.len() {
            return Err(unexpected(name, "release", &left));
        }
        Ok(left.into_iter().map(released).collect())
    }

    /// Renews `items` (lock key, how it is stored, owner, lease) in one
    /// call; `true` where still held.
    pub(crate) async fn renew<'a>(
        &self,
        items: impl IntoIterator<Item = (&'a str, &'a Stored, &'a str, Duration)>,
        timeout: Duration,
    ) -> Result<Vec<bool>, LockError> {
        let mut call = RENEW.prepare_invoke();
        for (key, stored, owner, lease) in items {
            match stored {
                Stored::Hash => call.key(key).key(key).arg("x"),
                Stored::Place { set, holders, .. } => call.key(set).key(holders).arg("z"),
            };
            call.arg(owner).arg(millis(lease));
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

/// Reads the acquire scripts' reply for `locks` locks.
fn acquired(name: &str, locks: usize, reply: &[i64]) -> Result<Acquired, LockError> {
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
        [0, ttl] => Ok(Acquired::Busy {
            ttl: (*ttl >= 0).then(|| Duration::from_millis(*ttl as u64)),
        }),
        _ => Err(unexpected(name, "acquire", reply)),
    }
}

/// Reads one release outcome.
fn released(left: i64) -> Released {
    match left {
        0 => Released::Free,
        n if n > 0 => Released::StillHeld(n as u64),
        _ => Released::NotHeld,
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
