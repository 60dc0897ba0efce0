//! A client in a service's life: shutdown gives back what it holds and
//! stops its holders and waiters; health says what a readiness probe
//! needs; a guard's cancellation token ends with its critical section.

mod common;

use std::time::Duration;

use common::{client, ok, start_server_with_clients, until, within};
use lock_runtime::{LockClient, LockError, LockGuard, LossReason};
use lock_testkit::{RedisServer, unique_key};

/// Waits until `watcher` sees a client subscribed to `name`'s release
/// channel: a waiter that is really waiting.
async fn a_waiter_shows(server: &RedisServer, watcher: &LockClient, name: &str) {
    until(Duration::from_secs(10), "a waiter shows", async || {
        ok(server, watcher.inspect(name).await).is_some_and(|info| info.waiters.subscribers > 0)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_the_holders_and_gives_back_every_lock_at_once() {
    let (server, [locks, other]) = start_server_with_clients().await;
    let lease = Duration::from_secs(30);
    let (body, kept) = (unique_key("body"), unique_key("kept"));
    // A body that stops when its lock is lost, as the attribute's does.
    let guard = ok(
        &server,
        locks.lock(body.as_str()).lease(lease).acquire().await,
    );
    let holder = tokio::spawn(async move {
        guard.lost().await;
        let reason = match guard.lost_error() {
            LockError::Lost { reason, .. } => reason,
            other => panic!("not a loss: {other}"),
        };
        drop(guard);
        reason
    });
    // A guard kept past the loss: the shutdown gives its lock back itself.
    let stuck = ok(
        &server,
        locks.lock(kept.as_str()).lease(lease).acquire().await,
    );
    // Another instance waits for the first lock.
    let waiter = {
        let (other, body) = (other.clone(), body.clone());
        tokio::spawn(async move {
            other
                .lock(body.as_str())
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        })
    };
    a_waiter_shows(&server, &other, &body).await;

    ok(&server, locks.shutdown().await);
    let reason = within(&server, Duration::from_secs(5), "holder told", holder)
        .await
        .expect("holder task");
    assert_eq!(reason, LossReason::ShutDown);
    // Taken by the waiter long before the lease would have run out.
    let taken = within(&server, Duration::from_secs(5), "waiter", waiter)
        .await
        .expect("waiter task");
    ok(&server, ok(&server, taken).release().await);
    let again = ok(&server, other.lock(kept.as_str()).try_acquire().await);
    let again = again.expect("the kept guard's lock was given back");
    ok(&server, again.release().await);
    // The kept guard learns it on release.
    assert!(stuck.is_lost());
    let released = stuck
        .release()
        .await
        .expect_err("given back by the shutdown");
    assert!(
        matches!(
            released,
            LockError::Lost {
                reason: LossReason::ShutDown,
                ..
            }
        ),
        "{released}"
    );
    assert_eq!(locks.held(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_shutdown_nothing_is_taken_and_waiters_end() {
    let (server, [locks, other]) = start_server_with_clients().await;
    let name = unique_key("busy");
    let held = ok(&server, other.lock(name.as_str()).acquire().await);
    let waiter = {
        let (locks, name) = (locks.clone(), name.clone());
        tokio::spawn(async move {
            locks
                .lock(name.as_str())
                .wait(Duration::from_secs(30))
                .acquire()
                .await
        })
    };
    a_waiter_shows(&server, &other, &name).await;
    assert!(locks.health().await.is_ready());

    ok(&server, locks.shutdown().await);
    let ended = within(&server, Duration::from_secs(5), "waiter ends", waiter)
        .await
        .expect("waiter task");
    assert!(matches!(ended, Err(LockError::ShutDown)), "{ended:?}");
    let refused = locks.lock(unique_key("fresh")).acquire().await;
    assert!(matches!(refused, Err(LockError::ShutDown)), "{refused:?}");
    // Clones share the client.
    let clone = locks.clone();
    let refused = clone.lock(unique_key("fresh")).try_acquire().await;
    assert!(matches!(refused, Err(LockError::ShutDown)), "{refused:?}");
    let health = locks.health().await;
    assert!(health.shut_down && !health.is_ready(), "{health:?}");
    // A second shutdown does nothing more.
    ok(&server, locks.shutdown().await);
    ok(&server, held.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_says_when_redis_stops_answering() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let health = locks.health().await;
    assert!(health.is_ready(), "{health:?}");
    assert!(health.subscriber_connected, "{health:?}");
    assert_eq!(health.commands_error, None);
    assert_eq!(health.quarantine_left, None);
    let guard = ok(&server, locks.lock(unique_key("held")).acquire().await);
    assert_eq!(locks.health().await.held, 1);

    server.pause();
    let health = locks.health().await;
    server.resume();
    assert!(!health.is_ready(), "{health:?}");
    assert!(health.commands_error.is_some(), "{health:?}");

    until(Duration::from_secs(10), "ready again", async || {
        locks.health().await.is_ready()
    })
    .await;
    ok(&server, guard.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_s_cancellation_token_ends_with_its_critical_section() {
    let (server, [locks, operator]) = start_server_with_clients().await;
    // Released.
    let guard = ok(&server, locks.lock(unique_key("released")).acquire().await);
    let (first, second) = (guard.cancellation_token(), guard.cancellation_token());
    // A child cancelled by its holder stops only its own holders.
    second.cancel();
    assert!(!first.is_cancelled());
    assert!(!guard.is_lost());
    ok(&server, guard.release().await);
    assert!(first.is_cancelled());

    // Dropped.
    let guard = ok(&server, locks.lock(unique_key("dropped")).acquire().await);
    let token = guard.cancellation_token();
    drop(guard);
    assert!(token.is_cancelled());

    // Lost: an operator removed the lock; the next renewal finds it gone.
    let name = unique_key("lost");
    let guard = ok(
        &server,
        locks
            .lock(name.as_str())
            .lease(Duration::from_secs(1))
            .acquire()
            .await,
    );
    let token = guard.cancellation_token();
    assert!(ok(&server, operator.force_release(&name).await));
    within(&server, Duration::from_secs(5), "token cancelled", async {
        token.cancelled().await
    })
    .await;
    assert!(guard.is_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_body_gets_the_token_of_its_critical_section() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    assert!(lock_runtime::current_cancellation_token().is_none());
    let guard = ok(&server, locks.lock(unique_key("body")).acquire().await);
    // What a `#[distributed_lock]` body runs in.
    let token = ok(
        &server,
        guard
            .scope(async { lock_runtime::current_cancellation_token() })
            .await,
    )
    .expect("a token inside the critical section");
    assert!(!token.is_cancelled());
    ok(&server, guard.release().await);
    assert!(token.is_cancelled());
}

/// A guard dropped as the client shuts down (its body told of the
/// shutdown) gives its lock back like any last release, and `shutdown`
/// waits for that and reports it when Redis could not be told. It gave
/// back one level, sent nothing again, and `shutdown` said Ok while the
/// lock stayed taken for its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_reports_a_dropped_guard_s_release_that_redis_did_not_get() {
    let name = unique_key("dropped-at-shutdown");
    let (server, proxy, locks, guard) = holding_through_proxy(&name, Duration::from_secs(20)).await;
    // A body that stops when its lock is lost, as the attribute's does.
    let body = tokio::spawn(async move {
        guard.lost().await;
        drop(guard);
    });
    // The connections open now go dead for good.
    proxy.strand();
    let shut = shut_down(&server, &locks).await;
    assert!(
        matches!(&shut, Err(err) if err.is_unavailable()),
        "{shut:?}"
    );
    body.await.expect("body");
}

/// A release that Redis did not answer is sent again in the background,
/// after a pause; a shutdown meanwhile sends it at once and waits for it,
/// and reports it if it fails again. Before, the shutdown cancelled it in
/// its pause and said Ok, and the lock stayed taken by nobody for its
/// lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_a_release_sent_again_in_the_background() {
    let name = unique_key("sent-again-at-shutdown");
    let (server, proxy, locks, guard) = holding_through_proxy(&name, Duration::from_secs(30)).await;
    // The connections open now go dead; new ones work.
    proxy.strand();
    let released = guard.release().await;
    assert!(
        matches!(&released, Err(err) if err.is_unavailable()),
        "{released:?}"
    );
    // The release is sent again after a pause of the command timeout
    // (500 ms): the shutdown comes within it.
    let shut = shut_down(&server, &locks).await;
    let other = client(&server).await;
    let taken = other
        .lock(name.as_str())
        .wait(Duration::ZERO)
        .acquire()
        .await;
    match shut {
        Ok(()) => drop(ok(&server, taken)),
        Err(err) => assert!(err.is_unavailable(), "{err:?}"),
    }
}

/// A server, a proxy in front of it, a client connected through the proxy
/// (whose connections a test can strand), and that client's guard of
/// `name`, taken with `lease`.
async fn holding_through_proxy(
    name: &str,
    lease: Duration,
) -> (RedisServer, lock_testkit::Proxy, LockClient, LockGuard) {
    let server = RedisServer::start();
    let proxy = lock_testkit::Proxy::start(server.port())
        .await
        .expect("proxy");
    let locks = common::connect(common::builder_for(proxy.url().as_str())).await;
    let guard = ok(&server, locks.lock(name).lease(lease).acquire().await);
    (server, proxy, locks, guard)
}

/// `locks.shutdown()`, failing the test if it takes over 10 s.
async fn shut_down(server: &RedisServer, locks: &LockClient) -> Result<(), LockError> {
    within(
        server,
        Duration::from_secs(10),
        "shutdown",
        locks.shutdown(),
    )
    .await
}
