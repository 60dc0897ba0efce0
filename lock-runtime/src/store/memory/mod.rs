//! An in-process stand-in for a Redis server, which runs the lock scripts
//! themselves (Lua 5.1, as Redis embeds it), so that locks kept in memory
//! behave exactly as locks kept in Redis, with no lock logic of their own.
//!
//! [`MemoryServer`] is a [`redis::aio::ConnectionLike`]: `Script::invoke_async`
//! (EVALSHA, then SCRIPT LOAD and EVALSHA again on NOSCRIPT), `Cmd::query_async`
//! and pipelines work on it as on a connection. Replies are what Redis 7.0
//! sends over RESP2, down to error messages; [`MemorySubscriber`] receives
//! what PUBLISH and SPUBLISH send, as RESP3 pushes.
//!
//! What it keeps: strings, hashes and sorted sets, with expiry in
//! milliseconds. Commands: PING ECHO TIME INFO LASTSAVE DBSIZE FLUSHALL FLUSHDB
//! SELECT(0) WAIT, DEL UNLINK EXISTS TYPE KEYS SCAN, PEXPIRE EXPIRE PERSIST
//! PTTL TTL, GET SET INCR DECR INCRBY DECRBY, HDEL HEXISTS HGET HGETALL
//! HINCRBY HLEN HMGET HSET, ZADD ZCARD ZCOUNT ZRANGE ZRANGEBYSCORE ZREM
//! ZREMRANGEBYSCORE ZSCORE, PUBLISH SPUBLISH PUBSUB, EVAL EVALSHA SCRIPT;
//! anything else is `ERR unknown command`, as FCALL is, as on Redis 6.2: the
//! client's first call finds it so, and the client runs the scripts by
//! EVALSHA from then on.
//!
//! Known differences from Redis 7.0:
//!
//! * Time is the wall clock read once, when the server is created, advanced
//!   by a monotonic clock ([`std::time::Instant`]): leases run out in real
//!   time even when tokio's clock is paused, and jumps of the system clock
//!   are not seen. During a script, keys expire (and PTTL and PEXPIRE count)
//!   by the time the script started; Redis 7.0 freezes only expiry so. TIME
//!   always reads the clock.
//! * Direct commands reply in RESP2 shapes even where a RESP3 connection
//!   would get maps or doubles (HGETALL, ZSCORE); script replies are the
//!   same in both.
//! * A script runs to completion: there is no busy-script timeout and no
//!   SCRIPT KILL, so a script that loops forever blocks the server.
//! * Scripts have no `cjson`, `cmsgpack`, `struct` or `bit` libraries;
//!   `math.random` is not Redis's deterministic generator; the standard
//!   library tables (`string`, `redis`, ...) are not read-only (globals are);
//!   `rawget(_G, name)` sees nothing (`_G` is a read-only view); numbers
//!   in error tables are written with 17 digits, not Lua's 14.
//!   Error messages, their `script: <sha>, on @user_script:<line>.`
//!   suffix, `pcall`/`xpcall` of `redis.call` and every conversion match
//!   Redis 7.0.15 (a test compares them with a real server).
//! * Hash fields come back in byte order, keys from KEYS and SCAN sorted;
//!   SCAN returns everything at once with cursor 0. ZRANGE BYLEX is not
//!   supported.
//! * WAIT answers 0 at once (there are no replicas).
//! * Subscriptions are made through [`MemoryServer::subscriber`], not with
//!   SUBSCRIBE on the connection, and are confirmed by the call returning,
//!   not by a push.

mod clock;
mod commands;
mod handle;
mod lua;
mod pubsub;
mod reply;
mod store;
#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use redis::aio::ConnectionLike;
use redis::{Arg, Cmd, Pipeline, PushInfo, RedisFuture, Value};

use self::clock::Clock;
use self::commands::{Ctx, ServerInfo};
use self::lua::LuaEngine;
pub(crate) use self::pubsub::MemorySubscriber;
use self::pubsub::PubSub;
use self::reply::Reply;
use self::store::Store;

pub use self::handle::MemoryStore;

/// An in-memory Redis server, shared by its clones (an `Arc` inside).
///
/// ```ignore
/// let server = MemoryServer::new();
/// let mut conn = server.clone();
/// let fence: i64 = Script::new("return redis.call('INCR', KEYS[1])")
///     .key("fence")
///     .invoke_async(&mut conn)
///     .await?;
/// ```
#[derive(Clone)]
pub(crate) struct MemoryServer {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    clock: Clock,
    pubsub: Arc<PubSub>,
}

/// Everything a command may touch, behind one lock: scripts are atomic.
struct State {
    store: Store,
    info: ServerInfo,
    lua: LuaEngine,
}

/// Locks `mutex`, ignoring poisoning (no command leaves state half-changed
/// on a panic that matters more than the panic itself).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A fresh run id: 40 hex digits, as Redis makes them.
fn new_run_id() -> String {
    let mut id = uuid::Uuid::new_v4().simple().to_string();
    id.push_str(&uuid::Uuid::new_v4().simple().to_string()[..8]);
    id
}

impl Default for MemoryServer {
    fn default() -> Self {
        MemoryServer::new()
    }
}

impl fmt::Debug for MemoryServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = lock(&self.inner.state);
        f.debug_struct("MemoryServer")
            .field("run_id", &state.info.run_id)
            .field("keys", &state.store.len())
            .finish_non_exhaustive()
    }
}

impl MemoryServer {
    /// A server with no keys, no scripts and a new run id, up from now.
    pub(crate) fn new() -> MemoryServer {
        let clock = Clock::new();
        let info = ServerInfo {
            run_id: new_run_id(),
            started_us: clock.now_us(),
        };
        let lua = LuaEngine::new().expect("the Lua state and its bootstrap script load");
        MemoryServer {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    store: Store::default(),
                    info,
                    lua,
                }),
                clock,
                pubsub: Arc::default(),
            }),
        }
    }

    /// Whether `other` is a clone of this server.
    pub(crate) fn same_as(&self, other: &MemoryServer) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The run id INFO reports (40 hex digits, new at every restart).
    #[cfg(test)]
    pub(crate) fn run_id(&self) -> String {
        lock(&self.inner.state).info.run_id.clone()
    }

    /// A subscriber whose messages go to `on_push` (see [`MemorySubscriber`]).
    /// `on_push` is called outside every lock of the server, from the thread
    /// of the command that published, and may itself send commands.
    pub(crate) fn subscriber(
        &self,
        on_push: impl Fn(PushInfo) + Send + Sync + 'static,
    ) -> MemorySubscriber {
        MemorySubscriber::new(self.inner.pubsub.clone(), on_push)
    }

    /// Runs one command (`args[0]` is its name) and returns its reply; errors
    /// are `Value::ServerError`, as redis-rs reads them off the wire.
    pub(crate) fn command<A: AsRef<[u8]>>(&self, args: &[A]) -> Value {
        let args: Vec<Vec<u8>> = args.iter().map(|arg| arg.as_ref().to_vec()).collect();
        self.execute(&args).into_value()
    }

    /// Simulates a restart without persistence: every key and script is
    /// gone, the run id is new and the uptime starts again from zero; every
    /// subscriber loses its subscriptions and gets a
    /// `PushKind::Disconnection` push, as from a dropped connection.
    pub(crate) fn restart(&self) {
        {
            let mut state = lock(&self.inner.state);
            state.store.clear();
            state.lua.flush();
            state.info = ServerInfo {
                run_id: new_run_id(),
                started_us: self.inner.clock.now_us(),
            };
        }
        self.inner.pubsub.disconnect_all();
    }

    fn execute(&self, args: &[Vec<u8>]) -> Reply {
        let reply = {
            let mut state = lock(&self.inner.state);
            self.execute_locked(&mut state, args)
        };
        self.inner.pubsub.deliver();
        reply
    }

    /// Runs one command on the locked state; published messages are queued
    /// for [`PubSub::deliver`].
    fn execute_locked(&self, state: &mut State, args: &[Vec<u8>]) -> Reply {
        let command = match commands::check(args) {
            Ok(command) => command,
            Err(error) => return error,
        };
        let now = self.inner.clock.now_ms();
        let State { store, info, lua } = state;
        store.sweep(now);
        let ctx = Ctx {
            store,
            now,
            clock: &self.inner.clock,
            server: info,
            pubsub: &self.inner.pubsub,
        };
        match command.name {
            "eval" | "evalsha" | "script" => lua.execute(ctx, args),
            _ => {
                let mut ctx = ctx;
                command.run(&mut ctx, args)
            }
        }
    }

    /// Runs a pipeline as a server would answer it: every reply in order, or
    /// for a transaction MULTI's `OK`, a `QUEUED` per command and EXEC's
    /// array of replies, all run under one lock.
    fn execute_pipeline(&self, pipeline: &Pipeline) -> Vec<Value> {
        let commands: Vec<Vec<Vec<u8>>> = pipeline.cmd_iter().map(arguments).collect();
        let replies = if pipeline.is_transaction() {
            let mut replies = vec![Value::Okay];
            let queued: Vec<Reply> = commands
                .iter()
                .map(|args| match commands::check(args) {
                    Ok(_) => Reply::Status("QUEUED".to_owned()),
                    Err(error) => error,
                })
                .collect();
            let aborted = queued.iter().any(Reply::is_error);
            replies.extend(queued.into_iter().map(Reply::into_value));
            if aborted {
                replies.push(
                    Reply::error("EXECABORT Transaction discarded because of previous errors.")
                        .into_value(),
                );
            } else {
                let mut state = lock(&self.inner.state);
                let results = commands
                    .iter()
                    .map(|args| self.execute_locked(&mut state, args).into_value())
                    .collect();
                replies.push(Value::Array(results));
            }
            replies
        } else {
            commands
                .iter()
                .map(|args| {
                    let reply = {
                        let mut state = lock(&self.inner.state);
                        self.execute_locked(&mut state, args)
                    };
                    reply.into_value()
                })
                .collect()
        };
        self.inner.pubsub.deliver();
        replies
    }
}

/// A command's arguments (a SCAN cursor placeholder reads as 0).
fn arguments(cmd: &Cmd) -> Vec<Vec<u8>> {
    cmd.args_iter()
        .map(|arg| match arg {
            Arg::Simple(bytes) => bytes.to_vec(),
            _ => b"0".to_vec(),
        })
        .collect()
}

impl ConnectionLike for MemoryServer {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move { Ok(self.execute(&arguments(cmd)).into_value()) })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let replies = self.execute_pipeline(pipeline);
            Ok(replies.into_iter().skip(offset).take(count).collect())
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}
