//! Shared by the attribute tests: each test starts its own `redis-server`.

#![allow(dead_code)] // each test binary uses some of these

use std::time::Duration;

use lock_runtime::LockClient;
use lock_testkit::RedisServer;

/// Bound for anything that should happen "promptly": far above the
/// expected milliseconds, far below the 30 s waits and 60 s sleeps the
/// tests use where a call must not simply time out or finish.
pub const PROMPTLY: Duration = Duration::from_secs(10);

/// Fails the test instead of hanging it.
pub async fn promptly<F: Future>(what: &str, fut: F) -> F::Output {
    tokio::time::timeout(PROMPTLY, fut)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {PROMPTLY:?}"))
}

/// Takes `name` through the runtime API without waiting: proves it is free.
pub async fn free_now(locks: &LockClient, name: &str) {
    let guard = locks
        .lock(name)
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap_or_else(|err| panic!("`{name}` is not free: {err}"));
    guard.release().await.expect("release");
}

/// A client of `server`, failing the test with the server log if it cannot connect.
pub async fn connect(server: &RedisServer) -> LockClient {
    LockClient::connect(server.url())
        .await
        .unwrap_or_else(|err| panic!("connect: {err}\n{}", server.log()))
}

/// The Redis key of a lock whose name has no hash tag.
pub fn redis_key(name: &str) -> String {
    format!("lock:{{{name}}}")
}
