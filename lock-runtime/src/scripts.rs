//! The Lua scripts, and typed calls to them on one lock store with a
//! timeout on every call.
//!
//! Each script is hashed once per process ([`redis::Script`] in a static) and
//! run with EVALSHA; after a server restart empties the script cache, the
//! NOSCRIPT reply makes redis-rs load it and retry.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{ErrorKind, FromRedisValue, Script, ScriptInvocation, ServerErrorKind};

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
static TURN_LEAVE: LazyLock<ScriptPair> = script!("turn_leave.lua");

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
    /// caller that waits for readers holds new readers back with a mark
    /// that lasts `mark` unless it tries again.
    pub(crate) async fn acquire(
        &self,
        name: &str,
        keys: &[LockKeys],
        owner: &str,
        (lease, mark): (Duration, Duration),
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
            .arg(mark.as_millis() as u64);
        self.quarantine_args(&mut call);
        let acquired = self.acquire_with(name, keys.len(), &call, replicas).await?;
        self.replicated_or_undo(name, acquired, replicas, async || {
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
        self.replicated_or_undo(name, acquired, replicas, async || {
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
    /// that has to wait claims the next turn for readers with a mark that
    /// lasts `mark` unless it tries again.
    pub(crate) async fn acquire_read(
        &self,
        name: &str,
        keys: &LockKeys,
        owner: &str,
        (lease, mark): (Duration, Duration),
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
            .arg(mark.as_millis() as u64);
        self.quarantine_args(&mut call);
        let acquired = self.acquire_with(name, 1, &call, replicas).await?;
        self.replicated_or_undo(name, acquired, replicas, async || {
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
        self.replicated_or_undo(name, acquired, replicas, async || {
            self.release(name, std::slice::from_ref(keys), owner, false)
                .await
                .map(drop)
        })
        .await
    }

    /// Runs an acquire script and reads its reply for `locks` locks; when
    /// replicas must confirm it, with the number of replicas that did.
    async fn acquire_with(
        &self,
        name: &str,
        locks: usize,
        call: &ScriptInvocation<'_>,
        replicas: Option<Replicas>,
    ) -> Result<(Acquired, u32), LockError> {
        let (reply, acked): (Vec<i64>, u32) = match replicas {
            Some(replicas) => {
                self.run_replicated(Some(name), call, (replicas, false))
                    .await?
            }
            None => (
                self.run(&self.conn, Some(name), call, (self.timeout, false))
                    .await?,
                0,
            ),
        };
        Ok((acquired(name, locks, &reply)?, acked))
    }

    /// With `replicas` set, a lock just taken counts only once that many
    /// replicas have it; otherwise it is given back (`undo`) and the caller
    /// gets [`LockError::NotReplicated`].
    async fn replicated_or_undo(
        &self,
        name: &str,
        (acquired, acked): (Acquired, u32),
        replicas: Option<Replicas>,
        undo: impl AsyncFnOnce() -> Result<(), LockError>,
    ) -> Result<Acquired, LockError> {
        let (Some(replicas), Acquired::Held(_)) = (replicas, &acquired) else {
            return Ok(acquired);
        };
        match replicated(Some(name), replicas, acked) {
            Ok(()) => Ok(acquired),
            Err(err) => {
                if let Err(undo_err) = undo().await {
                    tracing::debug!(key = %name, error = %undo_err, "giving back an unreplicated lock failed; it expires after its lease");
                }
                Err(err)
            }
        }
    }

    /// Runs a script followed by `WAIT` in one pipeline, on the connection
    /// kept for replicated writes: the script's reply and how many
    /// replicas have its writes.
    ///
    /// One pipeline, so that both go out on one connection. `WAIT` counts
    /// the replicas that have the writes of the connection it runs on: sent
    /// after the script on a connection that had been replaced in between,
    /// it would confirm a grant that no replica has. (It also blocks the
    /// connection it runs on until the replicas answer, which is why it
    /// does not run on the main connection, where it would hold up every
    /// renewal behind it.)
    async fn run_replicated<T: FromRedisValue>(
        &self,
        name: Option<&str>,
        call: &ScriptInvocation<'_>,
        (replicas, idempotent): (Replicas, bool),
    ) -> Result<(T, u32), LockError> {
        let mut pipe = redis::pipe();
        pipe.invoke_script(call)
            .cmd("WAIT")
            .arg(replicas.count)
            .arg(replicas.timeout.as_millis() as u64);
        let conn = &self.replicated;
        let pipe = &pipe;
        let query = || {
            let mut conn = conn.clone();
            async move {
                match pipe.query_async(&mut conn).await {
                    // A restarted server has forgotten the script: load it,
                    // and run the pipeline again (the script did not run).
                    Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                        call.load_async(&mut conn).await?;
                        pipe.query_async(&mut conn).await
                    }
                    other => other,
                }
            }
        };
        noted(
            conn,
            within(
                self.timeout + replicas.timeout,
                name,
                retried(conn.is_cluster(), idempotent, query),
            )
            .await,
        )
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
        self.run::<i64>(&self.conn, Some(name), &call, (self.timeout, true))
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
            // The fair waiters' liveness beside their queue (keys.rs).
            call.key(queue).key(format!("{queue}:alive"));
        }
        call.arg(owner).arg(if all { "1" } else { "0" });
        // Every level at once is safe to run twice (the second run finds
        // nothing held); one level down of several is not.
        let left: Vec<i64> = self
            .run(&self.conn, Some(name), &call, (self.timeout, all))
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
        for lock in keys {
            call.key(lock.queue_alive());
        }
        call.arg(owner).arg(if all { "1" } else { "0" });
        // Every level at once is safe to run twice (the second run finds
        // nothing held); one level down of several is not.
        let left: Vec<i64> = self
            .run(&self.conn, Some(name), &call, (self.timeout, all))
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
        let mut empty = true;
        for (key, stored, owner, lease) in items {
            empty = false;
            match stored {
                Stored::Hash => call.key(key).key(key).arg("x"),
                Stored::Place { set, holders, .. } => call.key(set).key(holders).arg("z"),
            };
            call.arg(owner).arg(millis(lease));
        }
        if empty {
            return Ok(Vec::new());
        }
        let renewed: Vec<i64> = match replicas {
            Some(replicas) => {
                let (renewed, acked) = self.run_replicated(None, &call, (replicas, true)).await?;
                replicated(None, replicas, acked)?;
                renewed
            }
            None => {
                self.run(&self.conn, None, &call, (timeout.min(self.timeout), true))
                    .await?
            }
        };
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
        self.run::<i64>(&self.conn, Some(name), &call, (self.timeout, true))
            .await?;
        Ok(())
    }

    /// `INFO section` of every server behind this node.
    pub(crate) async fn info(&self, section: &str) -> Result<Vec<String>, LockError> {
        let mut conn = self.conn.clone();
        match tokio::time::timeout(self.timeout, conn.info(section)).await {
            Ok(result) => result.map_err(|err| LockError::from_redis(None, err)),
            Err(_) => Err(LockError::CommandTimeout {
                key: None,
                after: self.timeout,
            }),
        }
    }

    /// Runs `call` on `conn` within `timeout`. `idempotent`: running it
    /// twice for one request does what running it once does, so that it
    /// may be sent again after a failure that leaves open whether it ran
    /// (see [`retried`]).
    async fn run<T: FromRedisValue>(
        &self,
        conn: &Conn,
        name: Option<&str>,
        call: &ScriptInvocation<'_>,
        (timeout, idempotent): (Duration, bool),
    ) -> Result<T, LockError> {
        let invoke = || {
            let mut conn = conn.clone();
            async move { call.invoke_async(&mut conn).await }
        };
        noted(
            conn,
            within(
                timeout,
                name,
                retried(conn.is_cluster(), idempotent, invoke),
            )
            .await,
        )
    }

    /// Takes back the marks a writer or reader that stops waiting set to
    /// hold the other side back, and wakes the waiters they held back.
    pub(crate) async fn leave_turns(
        &self,
        name: &str,
        keys: &[LockKeys],
        owner: &str,
    ) -> Result<(), LockError> {
        let mut call = TURN_LEAVE.get(self.sharded).prepare_invoke();
        for lock in keys {
            call.key(lock.writer_waiting());
        }
        for lock in keys {
            call.key(lock.readers_waiting());
        }
        for lock in keys {
            call.key(&lock.channel);
        }
        call.arg(owner);
        self.run::<i64>(&self.conn, Some(name), &call, (self.timeout, true))
            .await?;
        Ok(())
    }

    /// Runs a script of someone else's (the operator commands of
    /// `admin.rs`) on the command connection, with the usual timeout.
    pub(crate) async fn invoke<T: FromRedisValue>(
        &self,
        name: &str,
        call: &ScriptInvocation<'_>,
    ) -> Result<T, LockError> {
        self.run(&self.conn, Some(name), call, (self.timeout, true))
            .await
    }
}

/// How often a Cluster call refused without running is sent again.
const CLUSTER_RETRIES: u32 = 3;

/// Runs `call`, and on a Cluster sends it again (after a pause that
/// doubles from 20 ms) when the answer proves it did not run: a redirect
/// (MOVED, ASK), a slot or master down or loading, a read-only replica, a
/// refused connection; and, for an `idempotent` call, after any I/O error.
/// redis-rs's own retries are off for the command connection (see
/// `connection::cluster_builder`), because they also resend after an I/O
/// error or a response timeout, when the script may have run already: an
/// acquisition would then count a re-entry twice, a release count down
/// twice and free a lock an outer scope still holds. Those failures go to
/// the caller, as on a single server.
async fn retried<T, F, Fut>(cluster: bool, idempotent: bool, mut call: F) -> redis::RedisResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = redis::RedisResult<T>>,
{
    let mut pause = Duration::from_millis(20);
    let mut left = if cluster { CLUSTER_RETRIES } else { 0 };
    loop {
        match call().await {
            Err(err) if left > 0 && (did_not_run(&err) || idempotent && err.is_io_error()) => {
                left -= 1;
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            other => return other,
        }
    }
}

/// Whether an error proves that the command was not carried out: refused
/// by the server without running (a redirect, a slot or master down or
/// loading, a read-only replica), or never delivered (a refused
/// connection). A connection lost after sending proves nothing: redis-rs
/// reports it as a broken pipe, as it does for one lost before.
fn did_not_run(err: &redis::RedisError) -> bool {
    use ServerErrorKind::*;
    matches!(
        err.kind(),
        ErrorKind::Server(
            Moved | Ask | TryAgain | ClusterDown | MasterDown | BusyLoading | ReadOnly
        ) | ErrorKind::ClusterConnectionNotFound
    ) || err.is_connection_refusal()
}

/// Whether `acked` replicas are enough for `replicas`.
fn replicated(name: Option<&str>, replicas: Replicas, acked: u32) -> Result<(), LockError> {
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

/// Tells `conn` whether a call on it was answered (an error reply is an
/// answer too), so that it can replace itself after repeated timeouts.
fn noted<T>(conn: &Conn, result: Result<T, LockError>) -> Result<T, LockError> {
    match &result {
        Err(LockError::CommandTimeout { .. }) => conn.timed_out(),
        Ok(_) | Err(LockError::Redis { .. } | LockError::WrongType { .. }) => conn.answered(),
        Err(_) => {}
    }
    result
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// How many times `retried` sends a call that fails with `err` every
    /// time.
    async fn sends(cluster: bool, idempotent: bool, err: fn() -> redis::RedisError) -> u32 {
        let sent = AtomicU32::new(0);
        let outcome: redis::RedisResult<()> = retried(cluster, idempotent, || {
            sent.fetch_add(1, Ordering::SeqCst);
            async move { Err(err()) }
        })
        .await;
        assert!(outcome.is_err());
        sent.load(Ordering::SeqCst)
    }

    fn moved() -> redis::RedisError {
        redis::RedisError::from((
            ErrorKind::Server(ServerErrorKind::Moved),
            "moved",
            "3999 127.0.0.1:6381".to_owned(),
        ))
    }

    /// What redis-rs reports for a connection lost with a request on it,
    /// whether or not the request reached the server.
    fn connection_lost() -> redis::RedisError {
        std::io::Error::from(std::io::ErrorKind::BrokenPipe).into()
    }

    #[tokio::test(start_paused = true)]
    async fn a_cluster_call_is_sent_again_only_when_it_surely_did_not_run() {
        // Refused without running: sent again.
        assert_eq!(sends(true, false, moved).await, 1 + CLUSTER_RETRIES);
        // Lost on the way back: an acquisition or a release of one level
        // may have run, and must not run twice.
        assert_eq!(sends(true, false, connection_lost).await, 1);
        // Safe to run twice (a renewal, a release of every level).
        assert_eq!(
            sends(true, true, connection_lost).await,
            1 + CLUSTER_RETRIES
        );
        // One server: the connection manager reconnects; the callers retry.
        assert_eq!(sends(false, true, moved).await, 1);
    }
}
