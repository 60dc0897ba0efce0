//! Tests of the in-memory server: the real lock scripts run through
//! `redis::Script` as the client runs them, Redis's conversion rules, and
//! (when a `redis-server` 7.0 is at hand, as in CI) the same commands and
//! scripts compared reply by reply with a real server.
//!
//! Every lock-script call is built by `store::scripts::calls`, the one
//! place that knows the scripts' KEYS and ARGV layouts; only calls the
//! builders cannot express (hand-made scripts, odd arguments) are written
//! out here, and say so.
//!
//! One module per command family; this one holds what they share: the
//! lock-script helpers, a subscriber's inbox, reply helpers, and a
//! connection to a real Redis.

/// A test that runs `check` on the in-memory server and, when one is at
/// hand, on a real Redis (the module using it imports `MemoryServer` and
/// `real_redis`).
macro_rules! on_both {
    ($test:ident, $check:ident) => {
        #[tokio::test]
        async fn $test() {
            let mut memory = MemoryServer::new();
            $check(&mut memory, "memory").await;
            if let Some((_real, mut conn)) = real_redis().await {
                $check(&mut conn, "redis-server").await;
            }
        }
    };
}

mod commands;
mod differential;
mod fair;
mod given_back;
mod line;
mod locks;
mod places;
mod pubsub;
mod renew;
mod retired;
mod scripting;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::{FromRedisValue, PushInfo, PushKind, RedisResult, ScriptInvocation, Value};

use super::MemoryServer;
use crate::base::keys::LockKeys;
use crate::store::scripts::{Call, Giving, Quarantine, Stored, calls};

fn keys(name: &str) -> LockKeys {
    LockKeys::new("lock:", name)
}

/// What a client connected to one server (not a Cluster) sends for `call`:
/// releases announced with PUBLISH, and no restart quarantine.
fn invocation(call: &Call) -> ScriptInvocation<'static> {
    call.invocation(false, &Quarantine::none())
}

/// Runs `call` on `conn` as a client does (see [`invocation`]).
async fn call(conn: &mut impl redis::aio::ConnectionLike, call: &Call) -> RedisResult<Value> {
    invocation(call).invoke_async(conn).await
}

/// Runs `call` on `server` as a client does (see [`invocation`]).
async fn run<T: FromRedisValue>(server: &MemoryServer, call: &Call) -> RedisResult<T> {
    invocation(call).invoke_async(&mut server.clone()).await
}

/// Takes (or re-enters) the exclusive lock `lock` for `owner`.
async fn acquire(server: &MemoryServer, lock: &LockKeys, owner: &str, lease: Duration) -> Vec<i64> {
    try_acquire(
        server,
        lock,
        owner,
        lease,
        Duration::ZERO,
        &Quarantine::none(),
    )
    .await
    .expect("acquire")
}

/// `acquire.lua` on one lock: `mark` is how long a writer that has to wait
/// for readers holds new readers back; `quarantine` the restart quarantine.
async fn try_acquire(
    server: &MemoryServer,
    lock: &LockKeys,
    owner: &str,
    lease: Duration,
    mark: Duration,
    quarantine: &Quarantine,
) -> RedisResult<Vec<i64>> {
    calls::acquire(
        std::slice::from_ref(lock),
        calls::Asker::fresh(owner),
        lease,
        mark,
        true,
    )
    .invocation(false, quarantine)
    .invoke_async(&mut server.clone())
    .await
}

/// Gives back one re-entry level of the lock hash `lock`, or every level
/// when `all`.
async fn release(server: &MemoryServer, lock: &LockKeys, owner: &str, all: bool) -> Vec<i64> {
    run(
        server,
        &calls::release(
            std::slice::from_ref(lock),
            &Stored::Hash,
            owner,
            if all { Giving::ALL } else { Giving::ONE },
        ),
    )
    .await
    .expect("release")
}

/// Takes (or re-enters) one of `permits` permits of the semaphore `lock`.
async fn acquire_permit(
    server: &MemoryServer,
    lock: &LockKeys,
    owner: &str,
    lease: Duration,
    permits: u32,
) -> Vec<i64> {
    run(
        server,
        &calls::permit_acquire(lock, calls::Asker::fresh(owner), lease, permits),
    )
    .await
    .expect("acquire a permit")
}

/// Every push a subscriber received.
#[derive(Clone, Default)]
struct Inbox(Arc<Mutex<Vec<PushInfo>>>);

impl Inbox {
    fn sink(&self) -> impl Fn(PushInfo) + Send + Sync + 'static {
        let inbox = self.0.clone();
        move |push| inbox.lock().unwrap().push(push)
    }

    /// (kind, channel, payload) of every message so far.
    fn messages(&self) -> Vec<(PushKind, String, String)> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|push| {
                let text = |value: &Value| match value {
                    Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                    other => format!("{other:?}"),
                };
                let channel = push.data.first().map(text).unwrap_or_default();
                let payload = push.data.get(1).map(text).unwrap_or_default();
                (push.kind.clone(), channel, payload)
            })
            .collect()
    }
}

fn bulk(text: &str) -> Value {
    Value::BulkString(text.as_bytes().to_vec())
}

fn int(value: &Value) -> i64 {
    match value {
        Value::Int(n) => *n,
        other => panic!("not an integer: {other:?}"),
    }
}

/// The error code and message of an error reply.
fn error(value: &Value) -> String {
    match value {
        Value::ServerError(err) => format!("{} {}", err.code(), err.details().unwrap_or_default()),
        other => panic!("not an error: {other:?}"),
    }
}

/// A connection to a fresh real Redis 7.0, or `None` (with a note) when
/// the `redis-server` at hand is another version, whose messages differ.
async fn real_redis() -> Option<(lock_testkit::RedisServer, redis::aio::MultiplexedConnection)> {
    let real = lock_testkit::RedisServer::start();
    let client = redis::Client::open(real.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await
        .unwrap();
    if info.contains("redis_version:7.0.") {
        Some((real, conn))
    } else {
        eprintln!("skipped: the real server is not Redis 7.0");
        None
    }
}
