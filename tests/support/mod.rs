//! Shared by the attribute tests: each test starts its own `redis-server`.

use lock_runtime::LockClient;
use lock_testkit::RedisServer;

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
