//! A holder process that dies leaks nothing past its lease.

mod common;

use std::time::{Duration, Instant};

use common::{client, holder_client, ok, spawn_holder};
use lock_testkit::{RedisServer, unique_key};

/// Run by `a_killed_holder_frees_the_lock_within_one_lease` in a child
/// process: takes the lock, says so, and holds it until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run as a child process by the crash test"]
async fn holder_process() {
    let Some((locks, name)) = holder_client().await else {
        return;
    };
    let guard = locks
        .lock(name)
        .lease(Duration::from_secs(2))
        .acquire()
        .await
        .expect("acquire");
    println!("HELD {}", guard.fence());
    tokio::time::sleep(Duration::from_secs(600)).await;
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_frees_the_lock_within_one_lease() {
    let server = RedisServer::start();
    let name = unique_key("crash");
    let (mut child, child_fence) = spawn_holder(&server, "holder_process", &name);

    // Renewed while alive: still held after more than a lease.
    let locks = client(&server).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let attempt = locks
        .lock(name.as_str())
        .wait(Duration::ZERO)
        .acquire()
        .await;
    assert!(attempt.expect_err("holder alive").is_timeout());

    child.kill().expect("SIGKILL holder");
    child.wait().unwrap();
    let killed_at = Instant::now();
    let guard = ok(
        &server,
        locks
            .lock(name.as_str())
            .wait(Duration::from_secs(10))
            .acquire()
            .await,
    );
    let freed_after = killed_at.elapsed();
    assert!(
        freed_after <= Duration::from_millis(2000 + 500),
        "{freed_after:?}"
    );
    assert!(guard.fence() > child_fence);
    ok(&server, guard.release().await);
}
