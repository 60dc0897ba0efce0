//! Ownership by task scope: re-entry inside a critical section, another
//! task as another owner, counts back to zero.

mod common;

use std::time::Duration;

use common::{lock_key, ok, start_server_with_clients, within};
use lock_testkit::unique_key;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_scope_reenters_and_a_spawned_task_waits() {
    let (server, [locks]) = start_server_with_clients().await;
    let name = unique_key("reentry");
    let key = lock_key(&name);

    let outer = ok(&server, locks.lock(name.as_str()).acquire().await);
    let fence = outer.fence();
    assert_eq!(server.cli(&["HGET", &key, "count"]), "1");
    let scoped = outer.scope(async {
        assert_eq!(lock_runtime::current().map(|c| c.name), Some(name.clone()));
        // Re-entry: no waiting, same token, count 2 then 3.
        let inner = ok(
            &server,
            locks
                .lock(name.as_str())
                .wait(Duration::ZERO)
                .acquire()
                .await,
        );
        assert_eq!(inner.fence(), fence);
        assert_eq!(server.cli(&["HGET", &key, "count"]), "2");
        let innermost = inner
            .scope(async {
                let g = ok(
                    &server,
                    locks
                        .lock(name.as_str())
                        .wait(Duration::ZERO)
                        .acquire()
                        .await,
                );
                assert_eq!(server.cli(&["HGET", &key, "count"]), "3");
                g
            })
            .await
            .expect("not lost");
        ok(&server, innermost.release().await);
        assert_eq!(server.cli(&["HGET", &key, "count"]), "2");

        // A spawned task does not inherit the scope: it is another owner.
        let other = locks.clone();
        let other_name = name.clone();
        let spawned = tokio::spawn(async move {
            assert!(lock_runtime::current().is_none());
            other.lock(other_name).wait(Duration::ZERO).acquire().await
        });
        let refused = spawned
            .await
            .unwrap()
            .expect_err("spawned task must not re-enter");
        assert!(refused.is_timeout(), "{refused}");
        ok(&server, inner.release().await);
        assert_eq!(server.cli(&["HGET", &key, "count"]), "1");
    });
    scoped.await.expect("not lost");

    // Outside the scope the same task is a new owner and waits too.
    let outside = locks
        .lock(name.as_str())
        .wait(Duration::ZERO)
        .acquire()
        .await;
    assert!(outside.expect_err("outside the scope").is_timeout());

    // A waiter in another task gets the lock once the count is back to zero.
    let waiter = {
        let locks = locks.clone();
        let name = name.clone();
        tokio::spawn(async move {
            locks
                .lock(name)
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !waiter.is_finished(),
        "waiter must wait while the lock is held"
    );
    ok(&server, outer.release().await);
    let next = within(&server, Duration::from_secs(5), "waiter", waiter)
        .await
        .unwrap();
    let next = ok(&server, next);
    assert!(next.fence() > fence);
    ok(&server, next.release().await);
    assert_eq!(server.cli(&["EXISTS", &key]), "0");
    assert_eq!(locks.held(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_guard_releases_in_the_background() {
    let (server, [locks, other]) = start_server_with_clients().await;
    let name = unique_key("drop");
    let guard = ok(
        &server,
        locks
            .lock(name.as_str())
            .lease(Duration::from_secs(30))
            .acquire()
            .await,
    );
    drop(guard);
    // Free at once (not after the 30 s lease): another client takes it.
    let taken = within(
        &server,
        Duration::from_secs(5),
        "acquire after drop",
        other
            .lock(name.as_str())
            .wait(Duration::from_secs(10))
            .acquire(),
    )
    .await;
    ok(&server, ok(&server, taken).release().await);
    assert_eq!(locks.held(), 0);
}

/// Takes `name` (waiting), holds it for a moment while counting how many
/// calls are inside at once, and returns its token.
async fn update(
    locks: &lock_runtime::LockClient,
    name: &str,
    inside: &std::sync::atomic::AtomicUsize,
    most: &std::sync::atomic::AtomicUsize,
) -> Result<u64, lock_runtime::LockError> {
    use std::sync::atomic::Ordering;
    let guard = locks
        .lock(name)
        .wait(Duration::from_secs(10))
        .acquire()
        .await?;
    let fence = guard.fence();
    guard
        .scope(async {
            let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(150)).await;
            inside.fetch_sub(1, Ordering::SeqCst);
        })
        .await?;
    guard.release().await?;
    Ok(fence)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_joined_inside_a_critical_section_exclude_each_other() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (server, [locks]) = start_server_with_clients().await;
    let (outer_name, account) = (unique_key("batch"), unique_key("account"));
    let (inside, most) = (AtomicUsize::new(0), AtomicUsize::new(0));

    let outer = ok(&server, locks.lock(outer_name.as_str()).acquire().await);
    let (a, b) = outer
        .scope(async {
            tokio::join!(
                update(&locks, &account, &inside, &most),
                update(&locks, &account, &inside, &most)
            )
        })
        .await
        .expect("not lost");
    let (a, b) = (ok(&server, a), ok(&server, b));
    // Each call took the lock as an owner of its own: one after the other,
    // each with its own token.
    assert_eq!(
        most.load(Ordering::SeqCst),
        1,
        "both calls were inside at once"
    );
    assert_ne!(a, b, "both calls got the same token");

    // Joined calls on the lock the section holds re-enter it: they are
    // part of the holder's work.
    let (c, d) = outer
        .scope(async {
            tokio::join!(
                locks
                    .lock(outer_name.as_str())
                    .wait(Duration::ZERO)
                    .acquire(),
                locks
                    .lock(outer_name.as_str())
                    .wait(Duration::ZERO)
                    .acquire()
            )
        })
        .await
        .expect("not lost");
    let (c, d) = (ok(&server, c), ok(&server, d));
    assert_eq!((c.fence(), d.fence()), (outer.fence(), outer.fence()));
    ok(&server, c.release().await);
    ok(&server, d.release().await);

    // Held in part by the section: refused with a clear error rather than
    // re-entering one and sharing the other.
    let err = outer
        .scope(
            locks
                .lock_all([outer_name.clone(), account.clone()])
                .acquire(),
        )
        .await
        .expect("not lost")
        .expect_err("partly held");
    assert!(matches!(err, lock_runtime::LockError::Config(_)), "{err}");
    ok(&server, outer.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentering_a_held_lock_does_not_queue_behind_local_waiters() {
    let (server, [locks]) = start_server_with_clients().await;
    let name = unique_key("busy");
    let outer = ok(
        &server,
        locks
            .lock(name.as_str())
            .lease(Duration::from_secs(30))
            .acquire()
            .await,
    );
    // Other tasks of the same client wait for the lock.
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let request = locks.lock(name.as_str()).wait(Duration::from_secs(20));
            tokio::spawn(async move { request.acquire().await?.release().await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let took = outer
        .scope(async {
            let started = std::time::Instant::now();
            let inner = locks
                .lock(name.as_str())
                .lease(Duration::from_secs(30))
                .wait(Duration::from_secs(20))
                .acquire()
                .await;
            (started.elapsed(), inner)
        })
        .await
        .expect("not lost");
    let (took, inner) = (took.0, ok(&server, took.1));
    // One round trip; queueing behind the waiters took a third of the
    // lease's first seconds (1 s).
    assert!(took < Duration::from_millis(700), "re-entry took {took:?}");
    ok(&server, inner.release().await);
    ok(&server, outer.release().await);
    for waiter in waiters {
        ok(&server, waiter.await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_fixed_lease_keeps_the_outer_bound() {
    let (server, [locks]) = start_server_with_clients().await;
    let name = unique_key("fixed-nested");
    let key = lock_key(&name);
    let lease = Duration::from_secs(4);
    let take = || locks.lock(name.as_str()).lock_at_most(lease);
    let outer = ok(&server, take().acquire().await);
    let bound = outer.valid_until();
    // Part of the bound goes by before the nested call.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    outer
        .scope(async {
            let inner = ok(&server, take().acquire().await);
            assert!(inner.valid_until() <= bound, "the bound moved");
            // Redis keeps it no longer than the outer lease either (a
            // stretched lease would be back near 4000 ms).
            let pttl: u64 = server.cli(&["PTTL", &key]).trim().parse().unwrap();
            assert!(pttl <= 3000, "stretched in Redis: {pttl} ms left");
            ok(&server, inner.release().await);
        })
        .await
        .expect("not lost");
    assert!(outer.valid_until() <= bound, "the bound moved");
    ok(&server, outer.release().await);
}
