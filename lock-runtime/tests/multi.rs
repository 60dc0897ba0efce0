//! Several locks taken together: all or none, in one canonical order.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{lock_key, ok, spawn_acquire, start_server_with_clients, within};
use lock_testkit::unique_key;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_transfers_between_two_accounts_never_deadlock() {
    const TRANSFERS: usize = 1000;
    let (server, clients) = start_server_with_clients::<2>().await;
    let (a, b) = (unique_key("account"), unique_key("account"));
    let balances = Arc::new([AtomicI64::new(1_000), AtomicI64::new(1_000)]);
    let inside = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let overlaps = Arc::new(AtomicUsize::new(0));

    let tasks: Vec<_> = [(0usize, 1usize), (1, 0)]
        .into_iter()
        .map(|(from, to)| {
            let locks = clients[from].clone();
            let names = [a.clone(), b.clone()];
            let (balances, inside, overlaps) = (balances.clone(), inside.clone(), overlaps.clone());
            tokio::spawn(async move {
                for _ in 0..TRANSFERS {
                    // Named in opposite orders by the two tasks.
                    let both = locks
                        .lock_all([names[from].clone(), names[to].clone()])
                        .wait(Duration::from_secs(10))
                        .acquire()
                        .await?;
                    for account in [from, to] {
                        if inside[account].fetch_add(1, Ordering::SeqCst) != 0 {
                            overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    let (x, y) = (
                        balances[from].load(Ordering::SeqCst),
                        balances[to].load(Ordering::SeqCst),
                    );
                    tokio::task::yield_now().await;
                    balances[from].store(x - 1, Ordering::SeqCst);
                    balances[to].store(y + 1, Ordering::SeqCst);
                    for account in [from, to] {
                        inside[account].fetch_sub(1, Ordering::SeqCst);
                    }
                    both.release().await?;
                }
                Ok::<_, lock_runtime::LockError>(())
            })
        })
        .collect();
    within(&server, Duration::from_secs(120), "2000 transfers", async {
        for task in tasks {
            ok(&server, task.await.unwrap());
        }
    })
    .await;
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    assert_eq!(balances[0].load(Ordering::SeqCst), 1_000);
    assert_eq!(balances[1].load(Ordering::SeqCst), 1_000);
    assert_eq!(server.cli(&["EXISTS", &lock_key(&a), &lock_key(&b)]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_or_none_and_a_duplicate_name_is_one_lock() {
    let (server, [locks, other]) = start_server_with_clients().await;
    let (a, b) = (unique_key("a"), unique_key("b"));

    let same = ok(
        &server,
        locks.lock_all([a.clone(), a.clone()]).acquire().await,
    );
    assert_eq!(same.fences().len(), 1);
    assert_eq!(server.cli(&["HGET", &lock_key(&a), "count"]), "1");
    ok(&server, same.release().await);

    // `b` is taken by another client: taking both fails and leaves `a` free.
    let held_b = ok(&server, other.lock(b.as_str()).acquire().await);
    let err = locks
        .lock_all([a.clone(), b.clone()])
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect_err("b is held");
    assert!(err.is_timeout(), "{err}");
    assert_eq!(server.cli(&["EXISTS", &lock_key(&a)]), "0");

    // A waiter for both takes them as soon as `b` is released.
    let waiting = spawn_acquire(
        locks
            .lock_all([a.clone(), b.clone()])
            .wait(Duration::from_secs(20)),
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished());
    let released = Instant::now();
    ok(&server, held_b.release().await);
    let (taken_at, both) = waiting.await.unwrap();
    let both = ok(&server, both);
    assert!(
        taken_at - released < Duration::from_secs(1),
        "{:?}",
        taken_at - released
    );
    let fences = both.fences();
    let mut names = vec![a.clone(), b.clone()];
    names.sort();
    assert_eq!(
        fences.iter().map(|f| f.name.clone()).collect::<Vec<_>>(),
        names
    );

    // Inside the critical section each lock re-enters on its own.
    both.scope(async {
        assert_eq!(lock_runtime::current_locks(), fences);
        let one = ok(
            &server,
            locks.lock(b.as_str()).wait(Duration::ZERO).acquire().await,
        );
        assert_eq!(server.cli(&["HGET", &lock_key(&b), "count"]), "2");
        ok(&server, one.release().await);
    })
    .await
    .expect("not lost");
    ok(&server, both.release().await);
    assert_eq!(server.cli(&["EXISTS", &lock_key(&a), &lock_key(&b)]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_any_one_lock_stops_the_body() {
    let (server, [locks]) = start_server_with_clients().await;
    let (a, b, c) = (unique_key("a"), unique_key("b"), unique_key("c"));
    let all = ok(
        &server,
        locks
            .lock_all([a.clone(), b.clone(), c.clone()])
            .lease(Duration::from_secs(1))
            .acquire()
            .await,
    );
    server.cli(&["DEL", &lock_key(&b)]);
    let outcome = within(
        &server,
        Duration::from_secs(5),
        "scope",
        all.scope(async {
            tokio::time::sleep(Duration::from_secs(60)).await;
        }),
    )
    .await;
    let err = outcome.expect_err("stopped");
    assert!(err.is_lost());
    assert_eq!(err.key(), Some(b.as_str()));
    assert!(all.release().await.expect_err("lost").is_lost());
    // The locks that were still held are given back.
    assert_eq!(server.cli(&["EXISTS", &lock_key(&a), &lock_key(&c)]), "0");
}

/// A task waiting for two locks, one of them free, does not hold back a
/// task of its client that asks for the free one alone: that task tries at
/// once (it queues behind waiters of this process only when a release of
/// the lock is to wake one of them, and nobody holds this one to release
/// it). It took the free lock before a client that came 300 ms later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_for_several_locks_does_not_hold_back_one_for_its_free_lock() {
    let (server, [locks, holder, later]) = start_server_with_clients().await;
    let (free, taken) = (unique_key("free"), unique_key("taken"));
    let held = ok(&server, holder.lock(taken.as_str()).acquire().await);
    let both = locks.lock_all([free.clone(), taken.clone()]);
    let waiting_for_both = spawn_acquire(both.wait(Duration::from_secs(30)));
    let channel = format!("{}:released", lock_key(&free));
    within(
        &server,
        Duration::from_secs(5),
        "the waiter subscribed",
        async {
            while server.cli(&["PUBSUB", "NUMSUB", &channel]).lines().nth(1) != Some("1") {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        },
    )
    .await;

    // Each takes the lock, notes its token and lets it go.
    let take = |request: lock_runtime::LockRequest| {
        tokio::spawn(async move {
            let guard = request.acquire().await?;
            let fence = guard.fence();
            guard.release().await?;
            Ok::<_, lock_runtime::LockError>(fence)
        })
    };
    let alone = take(locks.lock(free.as_str()).wait(Duration::from_secs(10)));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let came_later = take(later.lock(free.as_str()).wait(Duration::from_secs(10)));
    let alone = ok(&server, alone.await.unwrap());
    let came_later = ok(&server, came_later.await.unwrap());
    assert!(
        alone < came_later,
        "the task of the waiter's client took the free lock first"
    );
    ok(&server, held.release().await);
    let (_, both) = waiting_for_both.await.unwrap();
    ok(&server, ok(&server, both).release().await);
}
