//! Connections whose packets vanish without a reset (a partition, a moved
//! address): the client must notice and connect afresh, for its commands and
//! for its release messages.

mod common;

use std::time::{Duration, Instant};

use common::{builder_for, connect, ok};
use lock_runtime::{LockClient, LockGuard};
use lock_testkit::{Proxy, RedisServer, unique_key};

/// A client that reaches `server` only through `proxy`: the test settings,
/// with a command timeout of 300 ms rather than 500 ms.
async fn client_through(proxy: &Proxy) -> LockClient {
    connect(builder_for(proxy.url()).command_timeout(Duration::from_millis(300))).await
}

/// Releases `held` and checks that `waiter`, whose connections went dead,
/// takes the lock soon after (well before the holder's lease would have
/// run out), then gives it back.
async fn released_wakes(server: &RedisServer, held: LockGuard, waiter: Waiter) {
    let released = Instant::now();
    ok(server, held.release().await);
    let (taken_at, guard) = waiter.await.unwrap();
    let guard = ok(server, guard);
    let after = taken_at.saturating_duration_since(released);
    assert!(
        after < Duration::from_secs(10),
        "took {after:?} after the release"
    );
    ok(server, guard.release().await);
}

/// A task waiting for a lock (see `common::spawn_acquire`).
type Waiter = tokio::task::JoinHandle<(Instant, Result<LockGuard, lock_runtime::LockError>)>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_connection_that_stops_answering_is_replaced() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await.expect("proxy");
    let locks = client_through(&proxy).await;
    let guard = ok(
        &server,
        locks
            .lock(unique_key("stranded"))
            .lease(Duration::from_secs(3))
            .acquire()
            .await,
    );
    // Every connection open now goes dead without being closed; new ones
    // get through.
    proxy.strand();
    // Renewals time out on the dead connection; after a few in a row the
    // client connects afresh and the lock is renewed before its deadline.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(!guard.is_lost(), "lost: {}", guard.lost_error());
    let other = ok(
        &server,
        locks
            .lock(unique_key("after"))
            .wait(Duration::ZERO)
            .acquire()
            .await,
    );
    ok(&server, other.release().await);
    ok(&server, guard.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_stops_answering_is_replaced() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await.expect("proxy");
    let waiting = client_through(&proxy).await;
    let holder = common::client(&server).await;
    let name = unique_key("stranded-waiter");
    let held = ok(
        &server,
        holder
            .lock(name.as_str())
            .lease(Duration::from_secs(60))
            .acquire()
            .await,
    );
    let waiter = common::spawn_acquire(waiting.lock(name.as_str()).wait(Duration::from_secs(40)));
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The waiter's connections, its subscriber's among them, go dead.
    proxy.strand();
    // Released after the subscriber was checked (every 5 s): only a fresh
    // subscription carries the release message; the holder's lease is far.
    tokio::time::sleep(Duration::from_secs(7)).await;
    released_wakes(&server, held, waiter).await;
}

/// A subscription that fails on a connection whose packets vanish (the
/// store's first sign of it, before any check) has the connection replaced
/// and every waiter's channels subscribed again on the new one: a waiter
/// that was subscribed before is woken by the next release, not left
/// asleep until the holder's lease runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_that_fails_replaces_the_subscriber() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await.expect("proxy");
    let waiting = client_through(&proxy).await;
    let holder = common::client(&server).await;
    let (first, second) = (unique_key("subscribed"), unique_key("subscribing"));
    let lease = Duration::from_secs(60);
    let hold = |name: &str| holder.lock(name).lease(lease).acquire();
    let held = ok(&server, hold(&first).await);
    let _other = ok(&server, hold(&second).await);
    let waiter = common::spawn_acquire(waiting.lock(first.as_str()).wait(Duration::from_secs(40)));
    let channel = format!("{}:released", common::lock_key(&first));
    let subscribed = async {
        while server.cli(&["PUBSUB", "NUMSUB", &channel]).lines().nth(1) != Some("1") {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    common::within(
        &server,
        Duration::from_secs(5),
        "the waiter subscribed",
        subscribed,
    )
    .await;
    // The waiter's connections go dead; the next subscription, for a
    // waiter of another lock, is the first to find out (checks come every
    // 5 s: the release comes before the next one).
    proxy.strand();
    let _late = common::spawn_acquire(waiting.lock(second.as_str()).wait(Duration::from_secs(40)));
    tokio::time::sleep(Duration::from_secs(1)).await;
    released_wakes(&server, held, waiter).await;
}
