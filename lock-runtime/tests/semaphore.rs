//! Counting semaphores: at most N permits held, one or several per holder,
//! leased, under the number of permits the semaphore records; prompt
//! wake-ups.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{
    client, connect, holder_client, lock_key, ok, redlock_builder, spawn_acquire, spawn_holder,
    start_server_with_clients, within,
};
use lock_runtime::{LockClient, LockError, MIN_LEASE};
use lock_testkit::{RedisServer, unique_key};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn never_more_than_n_holders() {
    const PERMITS: usize = 3;
    let (server, clients) = start_server_with_clients::<2>().await;
    let name = unique_key("pool");
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..12)
        .map(|task| {
            let locks = clients[task % 2].clone();
            let (name, inside, most) = (name.clone(), inside.clone(), most.clone());
            tokio::spawn(async move {
                for _ in 0..15 {
                    let permit = locks
                        .semaphore(name.as_str(), PERMITS as u32)
                        .wait(Duration::from_secs(30))
                        .acquire()
                        .await?;
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    permit.release().await?;
                }
                Ok::<_, LockError>(())
            })
        })
        .collect();
    within(&server, Duration::from_secs(60), "180 permits", async {
        for task in tasks {
            ok(&server, task.await.unwrap());
        }
    })
    .await;
    assert!(
        most.load(Ordering::SeqCst) <= PERMITS,
        "more than {PERMITS} holders"
    );
    assert_eq!(
        most.load(Ordering::SeqCst),
        PERMITS,
        "permits were never all in use"
    );
    assert_eq!(server.cli(&["EXISTS", &lock_key(&name)]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentry_keeps_one_permit_and_waiters_wake_on_release() {
    let (server, [locks, other]) = start_server_with_clients().await;
    let name = unique_key("single");
    assert!(matches!(
        locks.semaphore(name.as_str(), 0).acquire().await,
        Err(LockError::Config(_))
    ));

    let permit = ok(
        &server,
        locks
            .semaphore(name.as_str(), 2)
            .lease(Duration::from_secs(1))
            .acquire()
            .await,
    );
    permit
        .scope(async {
            let again = ok(
                &server,
                locks
                    .semaphore(name.as_str(), 2)
                    .wait(Duration::ZERO)
                    .acquire()
                    .await,
            );
            assert_eq!(again.fence(), permit.fence());
            assert_eq!(server.cli(&["ZCARD", &lock_key(&name)]), "1");
            ok(&server, again.release().await);
        })
        .await
        .expect("not lost");
    let second = ok(&server, other.semaphore(name.as_str(), 2).acquire().await);
    assert!(second.fence() > permit.fence());
    let third = other
        .semaphore(name.as_str(), 2)
        .wait(Duration::ZERO)
        .acquire()
        .await;
    assert!(third.expect_err("both permits taken").is_timeout());

    // Renewed past the 1 s lease; a waiter wakes when a permit is released.
    let waiting = spawn_acquire(
        other
            .semaphore(name.as_str(), 2)
            .wait(Duration::from_secs(20)),
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!waiting.is_finished() && !permit.is_lost());
    let released = Instant::now();
    ok(&server, permit.release().await);
    let (taken_at, taken) = waiting.await.unwrap();
    assert!(taken_at - released < Duration::from_millis(800));
    ok(&server, ok(&server, taken).release().await);
    ok(&server, second.release().await);
    assert_eq!(server.cli(&["EXISTS", &lock_key(&name)]), "0");
}

/// Run by `a_killed_holders_permit_comes_back` in a child process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run as a child process by the semaphore crash test"]
async fn permit_holder_process() {
    let Some((locks, name)) = holder_client().await else {
        return;
    };
    let permit = locks
        .semaphore(name, 1)
        .lease(Duration::from_secs(2))
        .acquire()
        .await
        .expect("acquire");
    println!("HELD {}", permit.fence());
    tokio::time::sleep(Duration::from_secs(600)).await;
    drop(permit);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holders_permit_comes_back() {
    let server = RedisServer::start();
    let name = unique_key("crash-permit");
    let (mut child, _) = spawn_holder(&server, "permit_holder_process", &name);

    let locks = client(&server).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let busy = locks
        .semaphore(name.as_str(), 1)
        .wait(Duration::ZERO)
        .acquire()
        .await;
    assert!(
        busy.expect_err("renewed while the holder lives")
            .is_timeout()
    );

    child.kill().expect("SIGKILL holder");
    child.wait().unwrap();
    let killed_at = Instant::now();
    let permit = ok(
        &server,
        locks
            .semaphore(name.as_str(), 1)
            .wait(Duration::from_secs(10))
            .acquire()
            .await,
    );
    assert!(
        killed_at.elapsed() <= Duration::from_millis(2500),
        "{:?}",
        killed_at.elapsed()
    );
    ok(&server, permit.release().await);
}

/// `tasks` tasks spread over `clients`, task `i` taking `i % 3 + 1` of the
/// `limit` permits of `name` `rounds` times; the most permits held at once
/// (counted from inside each hold, so never more than were granted).
async fn contend_with_mixed_sizes(
    clients: &[LockClient],
    name: &str,
    limit: u32,
    tasks: usize,
    rounds: usize,
) -> Result<usize, LockError> {
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..tasks)
        .map(|task| {
            let locks = clients[task % clients.len()].clone();
            let (name, inside, most) = (name.to_owned(), inside.clone(), most.clone());
            let take = task % 3 + 1;
            tokio::spawn(async move {
                for _ in 0..rounds {
                    let held = locks
                        .semaphore(name.as_str(), limit)
                        .permits(take as u32)
                        .wait(Duration::from_secs(30))
                        .acquire()
                        .await?;
                    let now = inside.fetch_add(take, Ordering::SeqCst) + take;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside.fetch_sub(take, Ordering::SeqCst);
                    held.release().await?;
                }
                Ok::<_, LockError>(())
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task")?;
    }
    Ok(most.load(Ordering::SeqCst))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn permits_of_mixed_sizes_never_add_up_past_the_limit() {
    const LIMIT: usize = 5;
    let (server, clients) = start_server_with_clients::<2>().await;
    let name = unique_key("mixed");
    let most = within(&server, Duration::from_secs(90), "mixed sizes", async {
        ok(
            &server,
            contend_with_mixed_sizes(&clients, &name, LIMIT as u32, 9, 10).await,
        )
    })
    .await;
    assert!(most <= LIMIT, "{most} permits of {LIMIT} held at once");
    assert!(
        most > 3,
        "holders never shared the semaphore ({most} at most)"
    );
    assert_eq!(server.cli(&["EXISTS", &lock_key(&name)]), "0");
    assert_eq!(
        server.cli(&["EXISTS", &format!("{}:holders", lock_key(&name))]),
        "0"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_permits_are_taken_all_or_none_and_come_back_together() {
    let (server, [locks, other]) = start_server_with_clients().await;
    let name = unique_key("all-or-none");
    let holders = format!("{}:holders", lock_key(&name));
    let three = ok(
        &server,
        locks.semaphore(name.as_str(), 5).permits(3).acquire().await,
    );
    // 3 + 3 > 5: none taken.
    let refused = other.semaphore(name.as_str(), 5).permits(3).try_acquire();
    assert!(ok(&server, refused.await).is_none());
    assert_eq!(server.cli(&["ZCARD", &lock_key(&name)]), "1");
    assert_eq!(server.cli(&["HGET", &holders, "taken"]), "3");
    let two = other.semaphore(name.as_str(), 5).permits(2).try_acquire();
    let two = ok(&server, two.await).expect("two permits left");
    assert!(two.fence() > three.fence());
    let one = other.semaphore(name.as_str(), 5).try_acquire();
    assert!(ok(&server, one.await).is_none(), "all five taken");

    // What the semaphore shows.
    let info = ok(&server, other.inspect(&name).await).expect("held");
    assert_eq!(info.limit, Some(5));
    let mut permits: Vec<u32> = info.holders.iter().map(|h| h.permits).collect();
    permits.sort_unstable();
    assert_eq!(permits, [2, 3]);

    // Releasing three permits wakes three waiters of one client at once.
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            spawn_acquire(
                other
                    .semaphore(name.as_str(), 5)
                    .wait(Duration::from_secs(20)),
            )
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(waiters.iter().all(|w| !w.is_finished()));
    let released = Instant::now();
    ok(&server, three.release().await);
    let mut held = vec![two];
    for waiter in waiters {
        let (taken_at, taken) = waiter.await.unwrap();
        assert!(
            taken_at - released < Duration::from_millis(800),
            "{:?} after the release",
            taken_at - released
        );
        held.push(ok(&server, taken));
    }
    for guard in held {
        ok(&server, guard.release().await);
    }
    assert_eq!(server.cli(&["EXISTS", &lock_key(&name), &holders]), "0");

    // Requests that could never be granted.
    for (limit, take) in [(5, 0), (5, 6), (0, 1)] {
        let err = locks
            .semaphore(name.as_str(), limit)
            .permits(take)
            .acquire()
            .await
            .expect_err("refused");
        assert!(matches!(err, LockError::Config(_)), "{err:?}");
    }
}

#[tokio::test]
async fn permits_on_a_lock_is_refused_at_acquire() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let err = locks
        .lock("not-a-semaphore")
        .permits(2)
        .acquire()
        .await
        .expect_err("refused");
    assert!(
        matches!(&err, LockError::Config(message) if message.contains("`permits` applies to semaphores")),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_entry_holds_the_permits_of_the_outer_hold() {
    let (server, [locks, other]) = start_server_with_clients().await;
    let name = unique_key("reenter");
    let outer = ok(
        &server,
        locks.semaphore(name.as_str(), 4).permits(2).acquire().await,
    );
    outer
        .scope(async {
            // As many or fewer: the same permits, one more level.
            for take in [2, 1] {
                let inner = ok(
                    &server,
                    locks
                        .semaphore(name.as_str(), 4)
                        .permits(take)
                        .acquire()
                        .await,
                );
                assert_eq!(inner.fence(), outer.fence());
                ok(&server, inner.release().await);
            }
            // More: a holder cannot grow its hold.
            let err = locks
                .semaphore(name.as_str(), 4)
                .permits(3)
                .acquire()
                .await
                .expect_err("more than the outer hold");
            assert!(matches!(err, LockError::Config(_)), "{err:?}");
            let text = err.to_string();
            assert!(
                text.contains("holds 2") && text.contains("asks for 3"),
                "{text}"
            );
        })
        .await
        .expect("not lost");
    // Still two permits held, not more: two are left for others.
    let rest = other.semaphore(name.as_str(), 4).permits(3).try_acquire();
    assert!(ok(&server, rest.await).is_none());
    let rest = other.semaphore(name.as_str(), 4).permits(2).try_acquire();
    let rest = ok(&server, rest.await).expect("two left");
    ok(&server, rest.release().await);
    ok(&server, outer.release().await);
    assert_eq!(server.cli(&["EXISTS", &lock_key(&name)]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_keeps_its_number_of_permits_until_it_empties() {
    let (server, [locks, other]) = start_server_with_clients().await;
    let name = unique_key("limit");
    let held = ok(&server, locks.semaphore(name.as_str(), 3).acquire().await);

    // Another number is refused at once (not waited on), naming both.
    let started = Instant::now();
    let err = other
        .semaphore(name.as_str(), 5)
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect_err("another number");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(matches!(err, LockError::Config(_)), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("has 3 permits, not 5"), "{text}");
    // Even by its own holder, re-entering.
    held.scope(async {
        let again = locks.semaphore(name.as_str(), 2).acquire().await;
        assert!(matches!(again, Err(LockError::Config(_))), "{again:?}");
    })
    .await
    .expect("not lost");
    let same = ok(&server, other.semaphore(name.as_str(), 3).acquire().await);

    // Emptied by releases: the next holder records its own number.
    ok(&server, held.release().await);
    ok(&server, same.release().await);
    let five = ok(
        &server,
        other.semaphore(name.as_str(), 5).permits(4).acquire().await,
    );
    assert_eq!(
        ok(&server, locks.inspect(&name).await).unwrap().limit,
        Some(5)
    );
    let refused = locks.semaphore(name.as_str(), 3).try_acquire().await;
    assert!(matches!(refused, Err(LockError::Config(_))), "{refused:?}");
    ok(&server, five.release().await);

    // Emptied by a lease that ran out (a holder that stopped renewing).
    let lapsing = ok(
        &server,
        locks
            .semaphore(name.as_str(), 2)
            .lock_at_most(MIN_LEASE * 3)
            .acquire()
            .await,
    );
    let refused = other.semaphore(name.as_str(), 7).try_acquire().await;
    assert!(matches!(refused, Err(LockError::Config(_))), "{refused:?}");
    tokio::time::sleep(MIN_LEASE * 5).await;
    let seven = ok(
        &server,
        other.semaphore(name.as_str(), 7).permits(7).acquire().await,
    );
    ok(&server, seven.release().await);
    drop(lapsing);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_redlock_permits_of_mixed_sizes_never_add_up_past_the_limit() {
    let masters = RedisServer::start_many(3);
    let builder = || redlock_builder(&masters).command_timeout(Duration::from_millis(300));
    let clients = [connect(builder()).await, connect(builder()).await];
    let name = unique_key("redlock-mixed");
    let most = tokio::time::timeout(
        Duration::from_secs(90),
        contend_with_mixed_sizes(&clients, &name, 4, 6, 5),
    )
    .await
    .expect("within 90 s")
    .expect("every acquisition");
    assert!(most <= 4, "{most} permits of 4 held at once");

    // A number the masters recorded otherwise is refused by the quorum.
    let held = clients[0]
        .semaphore(name.as_str(), 4)
        .permits(2)
        .acquire()
        .await
        .expect("two permits");
    let err = clients[1]
        .semaphore(name.as_str(), 6)
        .acquire()
        .await
        .expect_err("another number");
    assert!(matches!(err, LockError::Config(_)), "{err:?}");
    assert!(err.to_string().contains("has 4 permits, not 6"), "{err}");
    held.release().await.expect("release");
}
