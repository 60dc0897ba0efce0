//! Renewal keeps a lock; loss is detected and signalled in time.

mod common;

use std::time::{Duration, Instant};

use common::{
    QUARANTINE, builder, client, connect, lock_key, ok, spawn_acquire, start_server_with_clients,
    try_once_when_up, within,
};
use lock_runtime::LossReason;
use lock_testkit::{RedisServer, unique_key};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_keeps_a_short_lease_held_for_several_leases() {
    let (server, [holder, other]) = start_server_with_clients().await;
    let name = unique_key("renew");
    let guard = ok(
        &server,
        holder
            .lock(name.as_str())
            .lease(Duration::from_secs(1))
            .acquire()
            .await,
    );

    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(3500) {
        let attempt = other
            .lock(name.as_str())
            .wait(Duration::ZERO)
            .acquire()
            .await;
        assert!(attempt.expect_err("still held").is_timeout());
        let pttl: i64 = server.cli(&["PTTL", &lock_key(&name)]).parse().unwrap();
        assert!(pttl > 0, "lease ran out while held");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(!guard.is_lost());
    ok(&server, guard.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_key_is_noticed_within_about_a_third_of_the_lease() {
    let (server, [holder]) = start_server_with_clients().await;
    let name = unique_key("deleted");
    let lease = Duration::from_millis(1500);
    let guard = ok(
        &server,
        holder.lock(name.as_str()).lease(lease).acquire().await,
    );

    assert_eq!(server.cli(&["DEL", &lock_key(&name)]), "1");
    let deleted_at = Instant::now();
    within(&server, lease, "lost() after DEL", guard.lost()).await;
    let noticed = deleted_at.elapsed();
    // Renewal runs every lease/3; allow scheduling slack on top.
    assert!(
        noticed <= lease / 3 + Duration::from_millis(300),
        "{noticed:?}"
    );
    let err = guard.release().await.expect_err("lost");
    assert!(err.is_lost(), "{err}");
    assert!(matches!(
        err,
        lock_runtime::LockError::Lost {
            reason: LossReason::NotHeld,
            ..
        }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stolen_lock_is_lost_and_the_body_stops() {
    let (server, [holder]) = start_server_with_clients().await;
    let name = unique_key("stolen");
    let guard = ok(
        &server,
        holder
            .lock(name.as_str())
            .lease(Duration::from_secs(1))
            .acquire()
            .await,
    );
    server.cli(&["HSET", &lock_key(&name), "owner", "somebody-else"]);
    let outcome = within(
        &server,
        Duration::from_secs(5),
        "scope",
        guard.scope(async {
            tokio::time::sleep(Duration::from_secs(60)).await;
        }),
    )
    .await;
    assert!(outcome.expect_err("body must be stopped").is_lost());
    // Releasing does not touch the other owner's lock.
    assert!(guard.release().await.expect_err("lost").is_lost());
    assert_eq!(
        server.cli(&["HGET", &lock_key(&name), "owner"]),
        "somebody-else"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_means_loss_before_the_lease_runs_out() {
    let server = RedisServer::start();
    // A fixed, generous drift margin makes "before" observable from outside.
    let holder = connect(builder(&server).drift(Duration::from_millis(400))).await;
    let name = unique_key("paused");
    let lease = Duration::from_secs(3);
    let guard = ok(
        &server,
        holder.lock(name.as_str()).lease(lease).acquire().await,
    );
    tokio::time::sleep(Duration::from_millis(300)).await;

    server.pause();
    within(&server, lease * 2, "lost() while paused", guard.lost()).await;
    server.resume();
    // The key is still in Redis: the holder was told before its lease ran out.
    let pttl: i64 = server.cli(&["PTTL", &lock_key(&name)]).parse().unwrap();
    assert!(
        pttl > 0,
        "lease ran out before the holder was told (pttl {pttl})"
    );
    assert!(matches!(
        guard.lost_error(),
        lock_runtime::LockError::Lost {
            reason: LossReason::Expired,
            ..
        }
    ));
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_means_loss_and_the_client_recovers() {
    let (mut server, [holder, waiter]) = start_server_with_clients().await;
    let name = unique_key("restart");
    let guard = ok(
        &server,
        holder
            .lock(name.as_str())
            .lease(Duration::from_secs(2))
            .acquire()
            .await,
    );

    let fence_before = guard.fence();

    server.restart();
    let restarted = Instant::now();
    within(
        &server,
        Duration::from_secs(5),
        "lost() after restart",
        guard.lost(),
    )
    .await;
    drop(guard);

    // The same client works again once the server is back, after the
    // restart quarantine: until then the lock is refused, since holders
    // from before the restart may not have been told yet.
    let refused = within(
        &server,
        Duration::from_secs(5),
        "refusal",
        try_once_when_up(&holder, &name),
    )
    .await;
    assert!(refused.expect_err("quarantined").is_timeout());
    let again = ok(
        &server,
        holder
            .lock(name.as_str())
            .wait(Duration::from_secs(10))
            .acquire()
            .await,
    );
    // Redis counts uptime_in_seconds from the whole second it started in
    // and reports whole seconds; the scripts read it as a second less, so
    // the quarantine never ends early and may end up to a second late.
    // (`restarted` is taken once the server answers, a moment after it
    // started.)
    let waited = restarted.elapsed();
    assert!(
        waited >= QUARANTINE - Duration::from_millis(500),
        "{waited:?}"
    );
    assert!(waited < QUARANTINE + Duration::from_secs(3), "{waited:?}");
    assert!(!again.is_lost());
    // The restarted server lost the fencing counter; tokens still grow.
    assert!(
        again.fence() > fence_before,
        "{} <= {fence_before}",
        again.fence()
    );
    // A client connected before the restart still wakes on release: its
    // subscriber connection came back too.
    let waiting = spawn_acquire(waiter.lock(name.as_str()).wait(Duration::from_secs(20)));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released = Instant::now();
    ok(&server, again.release().await);
    let (taken_at, taken) = waiting.await.unwrap();
    let taken = ok(&server, taken);
    assert!(taken_at - released < Duration::from_secs(1));
    ok(&server, taken.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_is_noticed_at_once_not_at_the_next_renewal() {
    let (mut server, [holder]) = start_server_with_clients().await;
    let name = unique_key("restart-long-lease");
    // Next renewal due in 10 s; the dropped connection triggers a check now.
    let lease = Duration::from_secs(30);
    let guard = ok(
        &server,
        holder.lock(name.as_str()).lease(lease).acquire().await,
    );
    server.restart();
    let restarted = Instant::now();
    within(
        &server,
        Duration::from_secs(5),
        "lost() after restart",
        guard.lost(),
    )
    .await;
    assert!(
        restarted.elapsed() < Duration::from_secs(3),
        "{:?}",
        restarted.elapsed()
    );
    assert!(matches!(
        guard.lost_error(),
        lock_runtime::LockError::Lost {
            reason: LossReason::NotHeld,
            ..
        }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_met_the_server_after_its_restart_quarantine_only_when_strict() {
    let mut server = RedisServer::start();
    server.restart();
    // Connected after the restart: it never saw the server lose anything.
    let relaxed = client(&server).await;
    let guard = ok(
        &server,
        relaxed.lock("fresh").wait(Duration::ZERO).acquire().await,
    );
    ok(&server, guard.release().await);

    server.restart();
    let strict = connect(builder(&server).strict_restart_quarantine(true)).await;
    let refused = strict.lock("fresh").wait(Duration::ZERO).acquire().await;
    assert!(refused.expect_err("strict: quarantined").is_timeout());
    let started = Instant::now();
    let guard = ok(
        &server,
        strict
            .lock("fresh")
            .wait(Duration::from_secs(10))
            .acquire()
            .await,
    );
    assert!(started.elapsed() < QUARANTINE + Duration::from_secs(2));
    ok(&server, guard.release().await);

    // Turned off, nothing waits.
    server.restart();
    let off = connect(
        builder(&server)
            .strict_restart_quarantine(true)
            .restart_quarantine(Duration::ZERO),
    )
    .await;
    let guard = ok(
        &server,
        off.lock("fresh").wait(Duration::ZERO).acquire().await,
    );
    ok(&server, guard.release().await);
}

#[tokio::test(flavor = "current_thread")]
async fn a_holder_frozen_past_its_deadline_learns_it_at_its_next_await() {
    let (server, [holder]) = start_server_with_clients().await;
    let name = unique_key("frozen");
    let guard = ok(
        &server,
        holder
            .lock(name.as_str())
            .lease(Duration::from_secs(1))
            .acquire()
            .await,
    );
    let knew = guard
        .scope(async {
            // Blocks the only runtime thread: the watchdog cannot run, but
            // the guard reads the clock.
            std::thread::sleep(Duration::from_millis(1500));
            guard.is_lost()
        })
        .await;
    assert_eq!(knew.ok(), Some(true));
    let outcome = guard.scope(async { "ran without the lock" }).await;
    let err = outcome.expect_err("a lost lock runs no critical section");
    assert!(
        matches!(
            err,
            lock_runtime::LockError::Lost {
                reason: LossReason::Expired,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(guard.is_lost());
    drop(guard);
}
