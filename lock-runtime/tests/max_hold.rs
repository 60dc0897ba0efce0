//! `max_hold`: a lock renewed while its holder lives, but never past a cap.

mod common;

use std::time::{Duration, Instant};

use common::{lock_key, ok, start_server_with_clients, within};
use lock_runtime::{LockError, LossReason};
use lock_testkit::unique_key;

/// The lock's time to live in Redis, in ms (negative: gone).
fn pttl(server: &lock_testkit::RedisServer, name: &str) -> i64 {
    server
        .cli(&["PTTL", &lock_key(name)])
        .trim()
        .parse()
        .expect("PTTL")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_is_renewed_up_to_its_cap_and_stopped_there() {
    let (server, [locks, other]) = start_server_with_clients().await;
    let name = unique_key("capped");
    let (lease, max_hold) = (Duration::from_millis(600), Duration::from_millis(2500));
    let taken = Instant::now();
    let guard = ok(
        &server,
        locks
            .lock(name.as_str())
            .lease(lease)
            .max_hold(max_hold)
            .acquire()
            .await,
    );
    // Renewed: well past its lease, still held, and never in Redis for
    // longer than the cap from when it was taken.
    tokio::time::sleep(lease * 2).await;
    assert!(!guard.is_lost());
    let busy = ok(&server, other.lock(name.as_str()).try_acquire().await);
    assert!(busy.is_none(), "taken while its holder renews it");
    let left = pttl(&server, &name);
    assert!(
        left > 0
            && Duration::from_millis(left as u64)
                <= max_hold.saturating_sub(taken.elapsed()) + Duration::from_millis(50),
        "PTTL {left} ms with {:?} of the cap left",
        max_hold.saturating_sub(taken.elapsed())
    );

    // At the cap the holder is told, and the lock lapses in Redis.
    within(&server, max_hold * 2, "told at the cap", guard.lost()).await;
    let told = taken.elapsed();
    assert!(
        told >= max_hold - lease && told <= max_hold + Duration::from_millis(500),
        "told after {told:?}, cap {max_hold:?}"
    );
    let lost = guard.lost_error();
    assert!(
        matches!(
            lost,
            LockError::Lost {
                reason: LossReason::MaxHold,
                ..
            }
        ),
        "{lost}"
    );
    // Kept (not released): the lock expires by itself at the cap.
    let next = ok(
        &server,
        other
            .lock(name.as_str())
            .wait(Duration::from_secs(5))
            .acquire()
            .await,
    );
    assert!(
        taken.elapsed() <= max_hold + Duration::from_secs(1),
        "free {:?} after it was taken, cap {max_hold:?}",
        taken.elapsed()
    );
    ok(&server, next.release().await);
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_never_goes_past_the_cap_and_a_short_cap_is_refused() {
    let (server, [locks]) = start_server_with_clients().await;
    let name = unique_key("extended");
    let max_hold = Duration::from_secs(2);
    let guard = ok(
        &server,
        locks
            .lock(name.as_str())
            .lease(Duration::from_secs(30))
            .max_hold(max_hold)
            .acquire()
            .await,
    );
    // The lease was shortened to the cap.
    assert!(pttl(&server, &name) <= 2000, "{}", pttl(&server, &name));
    ok(&server, guard.extend(Duration::from_secs(60)).await);
    assert!(pttl(&server, &name) <= 2000, "{}", pttl(&server, &name));
    ok(&server, guard.release().await);

    let refused = locks
        .lock(unique_key("short"))
        .max_hold(Duration::from_millis(10))
        .acquire()
        .await
        .expect_err("a cap shorter than any lease");
    assert!(matches!(refused, LockError::Config(_)), "{refused}");
}

/// A re-entry's cap bounds the whole hold, also when renewals of the outer
/// hold already reached past it: the body is stopped at the nested cap,
/// not up to a lease later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_cap_stops_the_hold_it_entered() {
    let (server, [locks]) = start_server_with_clients().await;
    let name = unique_key("nested-cap");
    let lease = Duration::from_secs(6);
    let outer = ok(
        &server,
        locks.lock(name.as_str()).lease(lease).acquire().await,
    );
    let nested_cap = Duration::from_millis(500);
    let entered = Instant::now();
    let body = outer.scope(async {
        let _inner = ok(
            &server,
            locks
                .lock(name.as_str())
                .lease(lease)
                .max_hold(nested_cap)
                .acquire()
                .await,
        );
        std::future::pending::<()>().await;
    });
    let stopped = within(&server, lease * 2, "the body stopped", body).await;
    let took = entered.elapsed();
    assert!(stopped.is_err(), "the body ran on");
    // Stopped at the nested cap (less the drift), well before the outer
    // lease, which renewals had not even needed yet.
    assert!(took < lease / 2, "stopped {took:?} after the re-entry");
    let lost = outer.lost_error();
    assert!(
        matches!(
            lost,
            LockError::Lost {
                reason: LossReason::MaxHold,
                ..
            }
        ),
        "{lost:?}"
    );
}

/// A body that never ends by itself.
#[lock_runtime::distributed_lock(key = "hangs:<id>", lease = "600ms", max_hold = "1500ms", client = locks)]
async fn hangs(locks: lock_runtime::LockClient, id: String) -> Result<(), LockError> {
    std::future::pending::<()>().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_stops_a_body_at_its_max_hold() {
    let (server, [locks, other]) = start_server_with_clients().await;
    let id = unique_key("job");
    let started = Instant::now();
    let ended = within(
        &server,
        Duration::from_secs(10),
        "the body stopped",
        hangs(locks, id.clone()),
    )
    .await;
    assert!(
        matches!(
            ended,
            Err(LockError::Lost {
                reason: LossReason::MaxHold,
                ..
            })
        ),
        "{ended:?}"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(1000),
        "stopped after {:?}",
        started.elapsed()
    );
    // The body's guard gives the lock back as it drops (in the
    // background), and the cap ends it in Redis anyway.
    let next = ok(
        &server,
        other
            .lock(format!("hangs:{id}"))
            .wait(Duration::from_secs(2))
            .acquire()
            .await,
    );
    ok(&server, next.release().await);
}
