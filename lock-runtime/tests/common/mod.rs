//! Shared set-up for the integration tests: every test starts its own
//! `redis-server` (lock-testkit) and connects clients to it.
#![allow(dead_code)] // each test binary uses a different part

use std::time::Duration;

use lock_runtime::{LockClient, LockError};
use lock_testkit::RedisServer;

/// A client with timeouts suited to tests that pause and kill the server.
pub async fn client(server: &RedisServer) -> LockClient {
    builder(server).connect().await.expect("connect")
}

pub fn builder(server: &RedisServer) -> lock_runtime::LockClientBuilder {
    LockClient::builder(&server.url())
        .connect_timeout(Duration::from_secs(1))
        .command_timeout(Duration::from_millis(500))
}

/// The Redis key of the lock `name` (see the layout in keys.rs).
pub fn lock_key(name: &str) -> String {
    format!("lock:{{{name}}}")
}

/// Runs `fut`, failing the test with the server log if it takes longer than `limit`.
pub async fn within<T>(
    server: &RedisServer,
    limit: Duration,
    what: &str,
    fut: impl Future<Output = T>,
) -> T {
    match tokio::time::timeout(limit, fut).await {
        Ok(out) => out,
        Err(_) => panic!(
            "{what} took longer than {limit:?}\nserver log:\n{}",
            server.log()
        ),
    }
}

/// Unwraps a lock result, with the server log in the failure message.
pub fn ok<T>(server: &RedisServer, result: Result<T, LockError>) -> T {
    result.unwrap_or_else(|err| panic!("unexpected error: {err}\nserver log:\n{}", server.log()))
}
