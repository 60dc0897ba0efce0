//! The Lua scripts, and typed calls to them on one lock store with a
//! timeout on every call.
//!
//! Each script is hashed once per process ([`redis::Script`] in a static) and
//! run with EVALSHA; after a server restart empties the script cache, the
//! NOSCRIPT reply makes redis-rs load it and retry.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{FromRedisValue, Script, ScriptInvocation};

use crate::connection::Conn;
use crate::error::LockError;
use crate::keys::LockKeys;

/// One script in its two forms: release messages sent with PUBLISH, or with
/// SPUBLISH (sharded pub/sub, for a Cluster).
pub(crate) struct ScriptPair {
    plain: Script,
    sharded: Script,
}

impl ScriptPair {
    fn get(&self, sharded: bool) -> &Script {
        if sharded { &self.sharded } else { &self.plain }
    }
}

/// A script with the shared helpers of `prelude.lua` in front of it.
macro_rules! script {
    ($file:literal) => {
        LazyLock::new(|| ScriptPair {
            plain: Script::new(concat!(
                "local PUBLISH = 'PUBLISH'\n",
                include_str!("scripts/prelude.lua"),
                include_str!(concat!("scripts/", $file))
            )),
            sharded: Script::new(concat!(
                "local PUBLISH = 'SPUBLISH'\n",
                include_str!("scripts/prelude.lua"),
                include_str!(concat!("scripts/", $file))
            )),
        })
    };
}

static ACQUIRE: LazyLock<ScriptPair> = script!("acquire.lua");
static RELEASE: LazyLock<ScriptPair> = script!("release.lua");
static RENEW: LazyLock<ScriptPair> = script!("renew.lua");
static PERMIT_ACQUIRE: LazyLock<ScriptPair> = script!("permit_acquire.lua");
static READ_ACQUIRE: LazyLock<ScriptPair> = script!("read_acquire.lua");
static PLACE_RELEASE: LazyLock<ScriptPair> = script!("place_release.lua");
static FAIR_ACQUIRE: LazyLock<ScriptPair> = script!("fair_acquire.lua");
static FAIR_LEAVE: LazyLock<ScriptPair> = script!("fair_leave.lua");
static FENCE_RAISE: LazyLock<ScriptPair> = script!("fence_raise.lua");

/// How a held item is stored, which decides how it is renewed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stored {
    /// A lock hash whose `owner` field names the holder.
    Hash,
    /// A place in a sorted set scored by lease expiry, with a companion
    /// hash of re-entry counts and tokens (a semaphore's permits, a
    /// read-write lock's readers).
    /// `queue` is the lock's line of fair waiters, for read locks; `limit`
    /// how many may hold places at once (a semaphore's permits; 0 for
    /// readers, who have no limit of their own).
    Place {
        set: String,
        holders: String,
        queue: Option<String>,
        limit: u32,
    },
}

impl Stored {
    /// How many holders it may have at once, which decides how many
    /// Redlock masters must agree on a grant (see `backend::needed`).
    pub(crate) fn holders_at_once(&self) -> u32 {
        match self {
            Stored::Place { limit, .. } if *limit > 1 => *limit,
            _ => 1,
        }
    }
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
/// `next_fence` in prelude.lua and `LockClientBuilder::restart_quarantine`).
#[derive(Debug, Clone)]
pub(crate) struct Quarantine {
    /// The run ids of the servers behind the connection when this client
    /// connected, comma-separated.
    pub(crate) seen: Arc<str>,
    pub(crate) length: Duration,
    pub(crate) strict: bool,
}

/// Replicas that must have a write before it counts (`WAIT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Replicas {
    pub(crate) count: u32,
    pub(crate) timeout: Duration,
}

/// One lock store: a server, a Sentinel-followed master, or a whole Cluster
/// (whose connection routes each call to the slot of its keys), with the
/// timeout every call gets.
#[derive(Clone)]
pub(crate) struct Node {
    conn: Conn,
    /// A second connection for calls followed by `WAIT`, which blocks the
    /// connection it runs on until the replicas answer: on the main one it
    /// would hold up every renewal behind it.
    replicated: Conn,
    timeout: Duration,
    quarantine: Quarantine,
    /// Release messages go out with SPUBLISH (a Cluster).
    sharded: bool,
}

impl Node {
    pub(crate) fn new(
        (conn, replicated): (Conn, Conn),
        timeout: Duration,
        quarantine: Quarantine,
        sharded: bool,
    ) -> Self {
        Node {
            conn,
            replicated,
            timeout,
            quarantine,
            sharded,
        }
    }

    /// The command connection, the timeout each call gets, and whether
    /// release messages go out with SPUBLISH: for the operator commands of
    /// `admin.rs`, which run their own scripts and commands.
    pub(crate) fn parts(&self) -> (&Conn, Duration, bool) {
        (&self.conn, self.timeout, self.sharded)
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
        (lease, waiting): (Duration, Duration),
        replicas: Option<Replicas>,
    ) -> Result<Acquired, LockError> {
        let mut call = ACQUIRE.get(self.sharded).prepare_invoke();
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
        let acquired = self.acquire_with(name, keys.len(), &call, replicas).await?;
        self.replicated_or_undo(name, &keys[0].lock, acquired, replicas, async || {
            self.release(name, keys, owner, false).await.map(drop)
        })
        .await
    }

    /// Takes (or re-enters) one of `permits` permits of a semaphore.
    pub(crate) async fn acquire_permit(
        &self,
        name: &str,
        keys: &LockKeys,
        owner: &str,
        lease: Duration,
        permits: u32,
        replicas: Option<Replicas>,
    ) -> Result<Acquired, LockError> {
        let mut call = PERMIT_ACQUIRE.get(self.sharded).prepare_invoke();
        call.key(&keys.lock)
            .key(keys.holders())
            .key(&keys.fence)
            .arg(owner)
            .arg(millis(lease))
            .arg(permits);
        self.quarantine_args(&mut call);
        let acquired = self.acquire_with(name, 1, &call, replicas).await?;
        self.replicated_or_undo(name, &keys.lock, acquired, replicas, async || {
            self.release_place(
                name,
                (&keys.lock, &keys.holders()),
                (&keys.channel, None),
                owner,
                false,
            )
            .await
            .map(drop)
        })
        .await
    }

    /// Takes or re-enters the read side of a read-write lock; a caller
    /// that has to wait claims the next turn for readers for `waiting`.
    pub(crate) async fn acquire_read(
        &self,
        name: &str,
        keys: &LockKeys,
        owner: &str,
        (lease, waiting): (Duration, Duration),
        replicas: Option<Replicas>,
    ) -> Result<Acquired, LockError> {
        let mut call = READ_ACQUIRE.get(self.sharded).prepare_invoke();
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
        let acquired = self.acquire_with(name, 1, &call, replicas).await?;
        self.replicated_or_undo(name, &keys.lock, acquired, replicas, async || {
            self.release_place(
                name,
                (&keys.readers(), &keys.readers_holders()),
                (&keys.channel, Some(&keys.queue())),
                owner,
                false,
            )
            .await
            .map(drop)
        })
        .await
    }

    /// Takes or re-enters a lock in arrival order; when it is not the
    /// caller's turn and `enqueue` is set, the caller waits in line, where it
    /// stays for `stay` unless it tries again.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn acquire_fair(
        &self,
        name: &str,
        keys: &LockKeys,
        owner: &str,
        lease: Duration,
        stay: Duration,
        enqueue: bool,
        replicas: Option<Replicas>,
    ) -> Result<Acquired, LockError> {
        let mut call = FAIR_ACQUIRE.get(self.sharded).prepare_invoke();
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
        let acquired = self.acquire_with(name, 1, &call, replicas).await?;
        self.replicated_or_undo(name, &keys.lock, acquired, replicas, async || {
            self.release(name, std::slice::from_ref(keys), owner, false)
                .await
                .map(drop)
        })
        .await
    }

    /// Runs an acquire script, on the replicated connection when replicas
    /// must confirm it, and reads its reply for `locks` locks.
    async fn acquire_with(
        &self,
        name: &str,
        locks: usize,
        call: &ScriptInvocation<'_>,
        replicas: Option<Replicas>,
    ) -> Result<Acquired, LockError> {
        let conn = if replicas.is_some() {
            &self.replicated
        } else {
            &self.conn
        };
        let reply: Vec<i64> = self.run(conn, Some(name), call, self.timeout).await?;
        acquired(name, locks, &reply)
    }

    /// With `replicas` set, a lock just taken counts only once that many
    /// replicas have it; otherwise it is given back (`undo`) and the caller
    /// gets [`LockError::NotReplicated`].
    async fn replicated_or_undo(
        &self,
        name: &str,
        first_key: &str,
        acquired: Acquired,
        replicas: Option<Replicas>,
        undo: impl AsyncFnOnce() -> Result<(), LockError>,
    ) -> Result<Acquired, LockError> {
        let (Some(replicas), Acquired::Held(_)) = (replicas, &acquired) else {
            return Ok(acquired);
        };
        match self.wait_replicas(Some(name), first_key, replicas).await {
            Ok(()) => Ok(acquired),
            Err(err) => {
                if let Err(undo_err) = undo().await {
                    tracing::debug!(key = %name, error = %undo_err, "giving back an unreplicated lock failed; it expires after its lease");
                }
                Err(err)
            }
        }
    }

    /// Waits until `replicas.count` replicas have every write made on the
    /// replicated connection so far (WAIT on the master of `key`'s slot).
    async fn wait_replicas(
        &self,
        name: Option<&str>,
        key: &str,
        replicas: Replicas,
    ) -> Result<(), LockError> {
        let mut conn = self.replicated.clone();
        let wait = conn.wait_replicas(crate::keys::slot(key), replicas.count, replicas.timeout);
        let acked = match tokio::time::timeout(replicas.timeout + self.timeout, wait).await {
            Ok(Ok(acked)) => acked,
            Ok(Err(err)) => return Err(LockError::from_redis(name, err)),
            Err(_) => 0,
        };
        if acked >= replicas.count {
            Ok(())
        } else {
            Err(LockError::NotReplicated {
                key: name.map(str::to_owned),
                wanted: replicas.count,
                acked,
                after: replicas.timeout,
            })
        }
    }

    /// Takes a fair waiter out of line.
    pub(crate) async fn leave_line(
        &self,
        name: &str,
        keys: &LockKeys,
        owner: &str,
    ) -> Result<(), LockError> {
        let mut call = FAIR_LEAVE.get(self.sharded).prepare_invoke();
        call.key(keys.queue())
            .key(keys.queue_alive())
            .key(&keys.lock)
            .key(&keys.channel)
            .arg(owner);
        self.run::<i64>(&self.conn, Some(name), &call, self.timeout)
            .await?;
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
        let mut call = PLACE_RELEASE.get(self.sharded).prepare_invoke();
        call.key(set).key(holders).key(channel);
        if let Some(queue) = queue {
            call.key(queue);
        }
        call.arg(owner).arg(if all { "1" } else { "0" });
        let left: Vec<i64> = self
            .run(&self.conn, Some(name), &call, self.timeout)
            .await?;
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
        let mut call = RELEASE.get(self.sharded).prepare_invoke();
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
        let left: Vec<i64> = self
            .run(&self.conn, Some(name), &call, self.timeout)
            .await?;
        if left.len() != keys.len() {
            return Err(unexpected(name, "release", &left));
        }
        Ok(left.into_iter().map(released).collect())
    }

    /// Renews `items` (lock key, how it is stored, owner, lease) in one
    /// call; `true` where still held. With `replicas`, the renewal counts
    /// only once that many replicas have it (an error otherwise).
    pub(crate) async fn renew<'a>(
        &self,
        items: impl IntoIterator<Item = RenewItem<'a>>,
        timeout: Duration,
        replicas: Option<Replicas>,
    ) -> Result<Vec<bool>, LockError> {
        let mut call = RENEW.get(self.sharded).prepare_invoke();
        let mut first_key = None;
        for (key, stored, owner, lease) in items {
            first_key.get_or_insert(key);
            match stored {
                Stored::Hash => call.key(key).key(key).arg("x"),
                Stored::Place { set, holders, .. } => call.key(set).key(holders).arg("z"),
            };
            call.arg(owner).arg(millis(lease));
        }
        let Some(first_key) = first_key else {
            return Ok(Vec::new());
        };
        let conn = if replicas.is_some() {
            &self.replicated
        } else {
            &self.conn
        };
        let renewed: Vec<i64> = self
            .run(conn, None, &call, timeout.min(self.timeout))
            .await?;
        if let Some(replicas) = replicas {
            self.wait_replicas(None, first_key, replicas).await?;
        }
        Ok(renewed.into_iter().map(|r| r == 1).collect())
    }

    /// Raises fencing counters to at least the given tokens.
    pub(crate) async fn raise_fences(
        &self,
        name: &str,
        counters: &[(&str, u64)],
    ) -> Result<(), LockError> {
        let mut call = FENCE_RAISE.get(self.sharded).prepare_invoke();
        for (counter, token) in counters {
            call.key(*counter).arg(*token);
        }
        self.run::<i64>(&self.conn, Some(name), &call, self.timeout)
            .await?;
        Ok(())
    }

    /// `INFO server` of every server behind this node.
    pub(crate) async fn info_server(&self) -> Result<Vec<String>, LockError> {
        let mut conn = self.conn.clone();
        match tokio::time::timeout(self.timeout, conn.info_server()).await {
            Ok(result) => result.map_err(|err| LockError::from_redis(None, err)),
            Err(_) => Err(LockError::CommandTimeout {
                key: None,
                after: self.timeout,
            }),
        }
    }

    async fn run<T: FromRedisValue>(
        &self,
        conn: &Conn,
        name: Option<&str>,
        call: &ScriptInvocation<'_>,
        timeout: Duration,
    ) -> Result<T, LockError> {
        let mut conn = conn.clone();
        within(timeout, name, call.invoke_async(&mut conn)).await
    }

    /// Runs a script of someone else's (the operator commands of
    /// `admin.rs`) on the command connection, with the usual timeout.
    pub(crate) async fn invoke<T: FromRedisValue>(
        &self,
        name: &str,
        call: &ScriptInvocation<'_>,
    ) -> Result<T, LockError> {
        self.run(&self.conn, Some(name), call, self.timeout).await
    }
}

/// Bounds a Redis call by `timeout` and sorts its error; `name` names the
/// lock in the error.
pub(crate) async fn within<T>(
    timeout: Duration,
    name: Option<&str>,
    call: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T, LockError> {
    let timed_out = || LockError::CommandTimeout {
        key: name.map(str::to_owned),
        after: timeout,
    };
    match tokio::time::timeout(timeout, call).await {
        // The connection's own response timeout may fire first.
        Ok(Err(err)) if err.is_timeout() => Err(timed_out()),
        Ok(result) => result.map_err(|err| LockError::from_redis(name, err)),
        Err(_) => Err(timed_out()),
    }
}

/// One item to renew: the lock key, how it is stored, the owner, the lease.
pub(crate) type RenewItem<'a> = (&'a str, &'a Stored, &'a str, Duration);

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
