//! Handoff: a release gives the lock straight to a waiting task of its own
//! client, which holds it when the answer comes (`handoff.lua`).

mod common;

use std::time::{Duration, Instant};

use common::{
    builder, client, clients, connect, lock_key, ok, scripts_ran, spawn_acquire,
    start_server_with_clients, until_in_line, within,
};
use lock_runtime::{LockClient, LockError, LockGuard};
use lock_testkit::{RedisServer, unique_key};
use tokio::task::JoinHandle;

/// Takes `name` with `lease`, then starts a task of the same client that
/// waits for it (up to `wait`), and gives that task time to start waiting.
async fn held_with_a_waiter(
    server: &RedisServer,
    locks: &LockClient,
    name: &str,
    (lease, wait): (Duration, Duration),
) -> (
    LockGuard,
    JoinHandle<(Instant, Result<LockGuard, LockError>)>,
) {
    let held = ok(server, locks.lock(name).lease(lease).acquire().await);
    let waiting = spawn_acquire(locks.lock(name).lease(lease).wait(wait));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "waits while the lock is held");
    (held, waiting)
}

/// Pauses the server and starts releasing `held` in a task, so that the
/// handoff is on its way, unanswered, when this returns; the caller
/// resumes the server.
async fn release_while_paused(
    server: &RedisServer,
    held: LockGuard,
) -> JoinHandle<Result<(), LockError>> {
    server.pause();
    let releasing = tokio::spawn(held.release());
    tokio::time::sleep(Duration::from_millis(100)).await;
    releasing
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_the_lock_to_a_waiting_task_of_its_client() {
    let (server, [locks]) = start_server_with_clients().await;
    let name = unique_key("handoff");
    let lease = Duration::from_secs(30);
    let times = (lease, Duration::from_secs(10));
    let (first, waiting) = held_with_a_waiter(&server, &locks, &name, times).await;

    let before = scripts_ran(&server);
    let first_fence = first.fence();
    ok(&server, first.release().await);
    let (_, taken) = within(&server, Duration::from_secs(5), "the waiter", waiting)
        .await
        .unwrap();
    let second = ok(&server, taken);
    // The release was the only call: the waiter did not try again.
    assert_eq!(
        scripts_ran(&server) - before,
        1,
        "one call from release to the next holder"
    );
    assert!(
        second.fence() > first_fence,
        "a new token: {} after {first_fence}",
        second.fence()
    );
    let holder = server.cli(&["HGET", &common::lock_key(&name), "owner"]);
    assert!(!holder.trim().is_empty(), "held in Redis");
    ok(&server, second.release().await);
    assert_eq!(
        server.cli(&["EXISTS", &common::lock_key(&name)]).trim(),
        "0"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_dropped_midway_still_hands_the_lock_on() {
    let (server, [locks]) = start_server_with_clients().await;
    let name = unique_key("handoff-dropped");
    let lease = Duration::from_secs(60);
    let times = (lease, Duration::from_secs(20));
    let (first, waiting) = held_with_a_waiter(&server, &locks, &name, times).await;

    // The handoff is on its way when the release is dropped: the rest of
    // it still runs, and the waiter is told that it holds the lock.
    let before = scripts_ran(&server);
    let releasing = release_while_paused(&server, first).await;
    releasing.abort();
    assert!(releasing.await.is_err(), "the release was dropped midway");
    server.resume();
    let (_, taken) = within(&server, Duration::from_secs(10), "the waiter", waiting)
        .await
        .unwrap();
    let second = ok(&server, taken);
    // A waiter not told would give back what it may hold and try again.
    assert_eq!(
        scripts_ran(&server) - before,
        1,
        "handed on: the handoff was the only call"
    );
    ok(&server, second.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_whose_answer_was_lost_is_neither_a_loss_nor_a_stranded_waiter() {
    let server = RedisServer::start();
    let locks = connect(builder(&server).command_timeout(Duration::from_millis(300))).await;
    let name = unique_key("handoff-unanswered");
    let times = (Duration::from_secs(30), Duration::from_secs(20));
    let (first, waiting) = held_with_a_waiter(&server, &locks, &name, times).await;

    // The handoff runs, but only once its call timed out: its answer is
    // lost. The release finds out what it did.
    let releasing = release_while_paused(&server, first).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    server.resume();
    let released = within(&server, Duration::from_secs(5), "the release", releasing)
        .await
        .expect("release task");
    assert!(
        released.is_ok(),
        "a release that handed the lock on is no loss: {released:?}"
    );
    // The waiter is told it holds the lock, well before its wait ends.
    let (_, taken) = within(&server, Duration::from_secs(5), "the waiter", waiting)
        .await
        .unwrap();
    let second = ok(&server, taken);
    let holder = server.cli(&["HGET", &common::lock_key(&name), "fence"]);
    assert_eq!(holder.trim(), second.fence().to_string(), "held as told");
    ok(&server, second.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_handed_to_a_waiter_that_stopped_waiting_is_given_back() {
    let (server, [locks, other]) = start_server_with_clients().await;
    let name = unique_key("handoff-gone");
    let lease = Duration::from_secs(60);
    let times = (lease, Duration::from_secs(30));
    let (first, waiting) = held_with_a_waiter(&server, &locks, &name, times).await;

    // The handoff is under way when the waiter stops waiting.
    let releasing = release_while_paused(&server, first).await;
    waiting.abort();
    let _ = waiting.await;
    server.resume();
    let _ = releasing.await;

    // Given back for the waiter: another client takes it well within the
    // 60 s lease the waiter asked for.
    let taken = ok(
        &server,
        other
            .lock(name.as_str())
            .wait(Duration::from_secs(10))
            .acquire()
            .await,
    );
    ok(&server, taken.release().await);
}

/// As above, with a stall far longer than the command timeout: the
/// handoff's answer is lost, and so is the first give-back for the waiter
/// that went away; the give-back is sent again until Redis answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_handed_to_a_waiter_that_went_away_in_a_stall_is_given_back() {
    let server = RedisServer::start();
    let locks = connect(builder(&server).command_timeout(Duration::from_millis(40))).await;
    let name = unique_key("handoff-gone-stall");
    let lease = Duration::from_secs(60);
    let times = (lease, Duration::from_secs(30));
    let (first, waiting) = held_with_a_waiter(&server, &locks, &name, times).await;

    // The handoff (sent twice) and the first give-back all time out while
    // the server stalls; they run when it resumes.
    let releasing = release_while_paused(&server, first).await;
    waiting.abort();
    let _ = waiting.await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    server.resume();
    let _ = releasing.await;

    let other = client(&server).await;
    let taken = other
        .lock(name.as_str())
        .wait(Duration::from_secs(10))
        .acquire()
        .await;
    let taken = taken.unwrap_or_else(|err| {
        panic!(
            "stayed taken by a waiter that went away ({err}): {:?}",
            server.cli(&["HGETALL", &common::lock_key(&name)])
        )
    });
    ok(&server, taken.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_another_client_are_not_starved_by_handoffs() {
    let server = RedisServer::start();
    let [busy] = clients(&server).await;
    let other = client(&server).await;
    let name = unique_key("handoff-fair");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Four tasks of one client pass the lock between them without a pause.
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (locks, name, stop) = (busy.clone(), name.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(guard) = locks
                    .lock(name.as_str())
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await
                {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    let _ = guard.release().await;
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let taken = other
        .lock(name.as_str())
        .wait(Duration::from_secs(10))
        .acquire()
        .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let guard = ok(&server, taken);
    ok(&server, guard.release().await);
    for task in tasks {
        task.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_release_hands_the_lock_to_the_first_in_line() {
    let (server, [locks]) = start_server_with_clients().await;
    let name = unique_key("handoff-line");
    let lease = Duration::from_secs(30);
    let first = ok(
        &server,
        locks.fair_lock(name.as_str()).lease(lease).acquire().await,
    );
    let fair = |locks: &lock_runtime::LockClient| {
        locks
            .fair_lock(name.as_str())
            .lease(lease)
            .wait(Duration::from_secs(10))
    };
    let second = spawn_acquire(fair(&locks));
    tokio::time::sleep(Duration::from_millis(150)).await;
    let third = spawn_acquire(fair(&locks));
    tokio::time::sleep(Duration::from_millis(150)).await;

    let before = scripts_ran(&server);
    let first_fence = first.fence();
    ok(&server, first.release().await);
    let (_, taken) = within(&server, Duration::from_secs(5), "the second", second)
        .await
        .unwrap();
    let second = ok(&server, taken);
    assert!(!third.is_finished(), "the third waits for the second");
    ok(&server, second.release().await);
    let (_, taken) = within(&server, Duration::from_secs(5), "the third", third)
        .await
        .unwrap();
    let third = ok(&server, taken);
    // Each release handed the lock on: no waiter tried again.
    assert_eq!(scripts_ran(&server) - before, 2, "one call per turn");
    assert!(third.fence() > first_fence);
    ok(&server, third.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_lock_is_not_handed_past_the_first_in_line_of_another_client() {
    let (server, [locks, other]) = start_server_with_clients().await;
    let name = unique_key("handoff-other-first");
    let lease = Duration::from_secs(30);
    let fair = |locks: &lock_runtime::LockClient| {
        locks
            .fair_lock(name.as_str())
            .lease(lease)
            .wait(Duration::from_secs(10))
    };
    let held = ok(&server, fair(&locks).acquire().await);
    // First in line: a waiter of another client; then one of this client.
    let remote = spawn_acquire(fair(&other));
    tokio::time::sleep(Duration::from_millis(150)).await;
    let local = spawn_acquire(fair(&locks));
    tokio::time::sleep(Duration::from_millis(150)).await;

    ok(&server, held.release().await);
    let (_, taken) = within(&server, Duration::from_secs(5), "the first in line", remote)
        .await
        .unwrap();
    let remote = ok(&server, taken);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !local.is_finished(),
        "the second in line waits for the first"
    );
    ok(&server, remote.release().await);
    let (_, taken) = within(&server, Duration::from_secs(5), "the second in line", local)
        .await
        .unwrap();
    ok(&server, ok(&server, taken).release().await);
}

/// Fair waiters of the holder's own client that come while another of its
/// tasks waits in line get in line with the holder's release (handoff.lua),
/// behind that one, which is handed the lock; the line they are left in
/// lapses by itself if it is abandoned, after their own stay in line (here
/// 3 s, where the first waiter's shorter lease keeps its place for 1 s
/// only). On one thread, the two newcomers run until they wait to join a
/// release, the release then takes them, and the line is read before any
/// waiter runs again.
#[tokio::test]
async fn waiters_that_join_a_release_get_in_line_for_their_own_stay() {
    let (server, [locks]) = start_server_with_clients().await;
    let name = unique_key("handoff-join");
    let fair = |lease: u64| {
        locks
            .fair_lock(name.as_str())
            .lease(Duration::from_millis(lease))
            .wait(Duration::from_secs(10))
    };
    let held = ok(&server, fair(30_000).acquire().await);
    let first = spawn_acquire(fair(2_000));
    until_in_line(&server, &name, "1", Duration::from_secs(5)).await;
    let (second, third) = (spawn_acquire(fair(30_000)), spawn_acquire(fair(30_000)));
    tokio::task::yield_now().await;

    let before = scripts_ran(&server);
    ok(&server, held.release().await);
    assert_eq!(
        scripts_ran(&server) - before,
        1,
        "the newcomers made no call"
    );
    let queue = format!("{}:queue", lock_key(&name));
    assert_eq!(
        server.cli(&["ZCARD", &queue]),
        "2",
        "both newcomers in line"
    );
    for set in [queue.clone(), format!("{queue}:alive")] {
        let ttl = server.cli(&["PTTL", &set]);
        assert!(
            ttl.parse::<u64>().unwrap() > 2_000,
            "{set} expires in {ttl} ms"
        );
    }

    for (waiter, who) in [
        (first, "the first"),
        (second, "the second"),
        (third, "the third"),
    ] {
        let (_, taken) = within(&server, Duration::from_secs(5), who, waiter)
            .await
            .unwrap();
        ok(&server, ok(&server, taken).release().await);
    }
}
