//! Waiting: timeouts, try-once, and prompt handoff through pub/sub.

mod common;

use std::time::{Duration, Instant};

use common::{
    builder, builder_for, connect, lock_key, ok, spawn_acquire, start_server_with_clients, within,
};
use lock_runtime::{LockClient, LockRequest};
use lock_testkit::{Proxy, RedisServer, unique_key};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_times_out_after_about_the_wait() {
    let (server, [holder, waiter]) = start_server_with_clients().await;
    let name = unique_key("timeout");
    let guard = ok(&server, holder.lock(name.as_str()).acquire().await);

    let started = Instant::now();
    let err = waiter
        .lock(name.as_str())
        .wait(Duration::from_millis(700))
        .acquire()
        .await
        .expect_err("held by another client");
    let waited = started.elapsed();
    assert!(err.is_timeout(), "{err}");
    assert_eq!(err.key(), Some(name.as_str()));
    assert!(
        waited >= Duration::from_millis(700),
        "gave up early: {waited:?}"
    );
    assert!(waited < Duration::from_secs(3), "overslept: {waited:?}");
    ok(&server, guard.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_zero_tries_once() {
    let (server, [holder, waiter]) = start_server_with_clients().await;
    let name = unique_key("try-once");
    let guard = ok(&server, holder.lock(name.as_str()).acquire().await);

    let started = Instant::now();
    let err = waiter
        .lock(name.as_str())
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect_err("held");
    assert!(err.is_timeout());
    assert!(started.elapsed() < Duration::from_secs(1));
    ok(&server, guard.release().await);
    let free = ok(
        &server,
        waiter
            .lock(name.as_str())
            .wait(Duration::ZERO)
            .acquire()
            .await,
    );
    ok(&server, free.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unbounded_wait_waits_for_the_release() {
    let (server, [holder, waiter]) = start_server_with_clients().await;
    let name = unique_key("wait-max");
    let guard = ok(&server, holder.lock(name.as_str()).acquire().await);
    let waiting = spawn_acquire(waiter.lock(name.as_str()).wait(Duration::MAX));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "waits while the lock is held");
    ok(&server, guard.release().await);
    let (_, taken) = within(&server, Duration::from_secs(10), "the waiter", waiting)
        .await
        .unwrap();
    ok(&server, ok(&server, taken).release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_takes_over_right_after_a_release_despite_a_long_lease() {
    let (server, [holder, waiter]) = start_server_with_clients().await;
    let name = unique_key("handoff");
    let lease = Duration::from_secs(30);

    for _ in 0..5 {
        let guard = ok(
            &server,
            holder.lock(name.as_str()).lease(lease).acquire().await,
        );
        let waiting = spawn_acquire(
            waiter
                .lock(name.as_str())
                .lease(lease)
                .wait(Duration::from_secs(20)),
        );
        // Let the waiter fail once and go to sleep on the release channel.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiting.is_finished());
        let released_at = Instant::now();
        ok(&server, guard.release().await);
        let (acquired_at, taken) = within(&server, Duration::from_secs(10), "handoff", waiting)
            .await
            .unwrap();
        let handoff = acquired_at - released_at;
        // Woken by the release message, not by the 30 s lease running out.
        assert!(handoff < Duration::from_secs(1), "handoff took {handoff:?}");
        ok(&server, ok(&server, taken).release().await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_waiters_in_one_process_all_get_their_turn() {
    let (server, [holder, waiters]) = start_server_with_clients().await;
    let name = unique_key("queue");
    let guard = ok(
        &server,
        holder
            .lock(name.as_str())
            .lease(Duration::from_secs(30))
            .acquire()
            .await,
    );
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (locks, name) = (waiters.clone(), name.clone());
            tokio::spawn(async move {
                let guard = locks
                    .lock(name)
                    .wait(Duration::from_secs(20))
                    .acquire()
                    .await?;
                tokio::time::sleep(Duration::from_millis(5)).await;
                guard.release().await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    ok(&server, guard.release().await);
    within(&server, Duration::from_secs(10), "eight handoffs", async {
        for task in tasks {
            ok(&server, task.await.unwrap());
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_releases_and_comes_back_queues_behind_the_waiter() {
    let (server, [locks]) = start_server_with_clients().await;
    let name = unique_key("barging");
    for _ in 0..5 {
        let guard = ok(&server, locks.lock(name.as_str()).acquire().await);
        let waiter = {
            let (locks, name) = (locks.clone(), name.clone());
            tokio::spawn(async move {
                let guard = locks
                    .lock(name)
                    .wait(Duration::from_secs(10))
                    .acquire()
                    .await?;
                let at = Instant::now();
                tokio::time::sleep(Duration::from_millis(20)).await;
                guard.release().await?;
                Ok::<_, lock_runtime::LockError>(at)
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Release and ask again at once, as a loop body would.
        ok(&server, guard.release().await);
        let again = ok(
            &server,
            locks
                .lock(name.as_str())
                .wait(Duration::from_secs(10))
                .acquire()
                .await,
        );
        let back_at = Instant::now();
        let waiter_at = ok(&server, waiter.await.unwrap());
        assert!(
            waiter_at < back_at,
            "the returning task took the lock first"
        );
        ok(&server, again.release().await);
    }
}

/// The request of the late-grant tests: a lease short enough to run out
/// while its answer is held up, a wait long enough to take the lock again.
fn short_lease(locks: &LockClient, name: &str) -> LockRequest {
    locks
        .lock(name)
        .lease(Duration::from_millis(200))
        .wait(Duration::from_secs(5))
}

/// A grant whose answer comes after its lease has run out (here the server
/// is paused between the call and its answer; in production, a frozen
/// process or a WAIT for replicas) is not handed out lost on arrival, with
/// a token another holder may already have passed: it is given back and the
/// lock taken again, with its lease ahead of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_answered_after_its_lease_is_not_handed_out() {
    let server = RedisServer::start();
    let locks = connect(builder(&server).command_timeout(Duration::from_secs(5))).await;
    let name = unique_key("late");
    // The scripts loaded and the connection up before the pause.
    let warm = ok(&server, locks.lock(format!("{name}:warm")).acquire().await);
    ok(&server, warm.release().await);

    server.pause();
    let acquiring = spawn_acquire(short_lease(&locks, &name));
    tokio::time::sleep(Duration::from_millis(400)).await;
    server.resume();
    let guard = ok(&server, acquiring.await.expect("task").1);

    let left = guard.valid_until().checked_duration_since(Instant::now());
    assert!(
        left.is_some() && !guard.is_lost(),
        "handed out a lock whose lease had run out before its answer came"
    );
    ok(&server, guard.release().await);
}

/// The late grant above, when Redis let it expire before its answer came
/// (the answer held up on its way back, as when the client's process is
/// frozen): the next attempt, under the same owner id, takes the lock anew,
/// and giving the late grant back must not free it under its new holder.
/// One thread, so that a give-back left to another task would go after
/// that attempt.
#[tokio::test]
async fn a_late_grant_given_back_leaves_the_lock_taken_anew() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await.expect("proxy");
    let holder = connect(builder(&server)).await;
    let waiter = connect(builder_for(proxy.url()).command_timeout(Duration::from_secs(5))).await;
    let name = unique_key("late-expired");
    let held = ok(&server, holder.lock(name.as_str()).acquire().await);
    let acquiring = spawn_acquire(short_lease(&waiter, &name));
    tokio::time::sleep(Duration::from_millis(300)).await;

    // From the release on, everything to and from the waiter takes 400 ms:
    // the wake-up comes at 400 ms, its attempt reaches Redis at 800 ms, which
    // grants the lock for 200 ms, and the answer comes at 1200 ms.
    proxy.set_delay(Duration::from_millis(400));
    ok(&server, held.release().await);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    proxy.set_delay(Duration::ZERO);
    let guard = ok(&server, acquiring.await.expect("task").1);

    // Time for a give-back sent behind the new attempt to arrive.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let owner = server.cli(&["HGET", &lock_key(&name), "owner"]);
    assert!(
        !owner.trim().is_empty() && !guard.is_lost(),
        "the late grant's give-back freed the lock its guard holds"
    );
    ok(&server, guard.release().await);
}

/// Waiters in separate clients, as in separate processes: a release wakes
/// the first in the lock's line, not a waiter in every client, each of
/// which would try for the one lock (a thundering herd: with 16 processes
/// contending, 17 script calls per acquisition).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_one_waiting_client_not_one_in_every_client() {
    let (server, [holder, a, b, c, d, e]) = start_server_with_clients().await;
    let name = unique_key("herd");
    server.cli(&["CONFIG", "RESETSTAT"]);
    let guard = ok(
        &server,
        holder
            .lock(name.as_str())
            .lease(Duration::from_secs(30))
            .acquire()
            .await,
    );
    let waiters: Vec<_> = [a, b, c, d, e]
        .into_iter()
        .map(|locks| spawn_waiter(locks, &name))
        .collect();
    // Each waiter tried, got in line, subscribed and tried again: asleep
    // after the holder's call and two of each waiter.
    common::until_in_line(&server, &name, "5", Duration::from_secs(10)).await;
    let asleep: u64 = 1 + 2 * 5;
    common::until(Duration::from_secs(10), "every waiter asleep", async || {
        common::scripts_ran(&server) >= asleep
    })
    .await;

    server.cli(&["CONFIG", "RESETSTAT"]);
    ok(&server, guard.release().await);
    let first = futures_util::future::select_all(waiters);
    let (first, _, rest) =
        within(&server, Duration::from_secs(10), "the first waiter", first).await;
    let held = first.unwrap();
    // Time for every client woken to try (they would within milliseconds).
    tokio::time::sleep(Duration::from_millis(100)).await;
    let ran = common::scripts_ran(&server);
    // The release and the one woken; the others keep their places by trying
    // every 1.5 s, which may fall in this window for one or two of them.
    // Woken in every client, all five would have tried: six.
    assert!(ran <= 4, "{ran} script calls for one release");
    assert!(rest.iter().all(|w| !w.is_finished()));
    drop(held);
    for waiter in rest {
        waiter.abort();
    }
}

/// A task of its own taking `name` through `locks`, waiting up to 30 s.
fn spawn_waiter(locks: LockClient, name: &str) -> tokio::task::JoinHandle<lock_runtime::LockGuard> {
    let name = name.to_owned();
    tokio::spawn(async move {
        locks
            .lock(name)
            .lease(Duration::from_secs(30))
            .wait(Duration::from_secs(30))
            .acquire()
            .await
            .expect("acquire")
    })
}

/// A release naming the first waiter in line sends its message to that
/// waiter's client alone (its inbox for the lock), not on the lock's
/// channel, which every client with waiters for the lock subscribes: Redis
/// writes one message, not one per client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_naming_a_waiter_sends_one_message_to_its_client() {
    use futures_util::StreamExt;

    let (server, [holder, a, b, c]) = start_server_with_clients().await;
    let name = unique_key("inbox");
    let channel = format!("{}:released", lock_key(&name));
    let mut listener = redis::Client::open(server.url())
        .expect("url")
        .get_async_pubsub()
        .await
        .expect("pub/sub connection");
    listener.subscribe(&channel).await.expect("subscribe");
    let guard = ok(&server, holder.lock(name.as_str()).acquire().await);
    let waiters: Vec<_> = [a, b, c]
        .into_iter()
        .map(|locks| spawn_waiter(locks, &name))
        .collect();
    common::until_in_line(&server, &name, "3", Duration::from_secs(10)).await;
    // Each waiting client subscribed to the lock's channel and its inbox.
    let pattern = format!("{channel}:*");
    common::until(Duration::from_secs(10), "three inboxes", async || {
        server
            .cli(&["PUBSUB", "CHANNELS", &pattern])
            .lines()
            .count()
            == 3
    })
    .await;

    ok(&server, guard.release().await);
    let (first, _, rest) = within(
        &server,
        Duration::from_secs(10),
        "the first waiter",
        futures_util::future::select_all(waiters),
    )
    .await;
    drop(first.unwrap());
    let mut messages = listener.on_message();
    let heard = tokio::time::timeout(Duration::from_millis(300), messages.next()).await;
    assert!(
        heard.is_err(),
        "the lock's channel carried a message naming one waiter: {:?}",
        heard.map(|m| m.map(|m| m.get_payload::<String>()))
    );
    for waiter in rest {
        waiter.abort();
    }
}

/// A waiter that is not in line (one for several locks) marks the lock it
/// waits for so that its release reaches every client, also when the
/// release names another client's waiter in line: told only through that
/// waiter's inbox, it would sleep until the holder's lease ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_naming_a_waiter_in_line_still_wakes_a_waiter_for_several_locks() {
    let (server, [holder, in_line, several]) = start_server_with_clients().await;
    let name = unique_key("not-in-line");
    let other = unique_key("not-in-line-other");
    let lease = Duration::from_secs(20);
    let guard = ok(
        &server,
        holder.lock(name.as_str()).lease(lease).acquire().await,
    );
    let first = tokio::spawn({
        let name = name.clone();
        async move {
            // Takes the lock when named, and lets it go at once.
            let guard = in_line
                .lock(name)
                .wait(Duration::from_secs(15))
                .acquire()
                .await;
            guard.expect("the waiter in line").release().await
        }
    });
    common::until_in_line(&server, &name, "1", Duration::from_secs(10)).await;
    server.cli(&["CONFIG", "RESETSTAT"]);
    let both = tokio::spawn({
        let names = [name.clone(), other.clone()];
        async move {
            several
                .lock_all(names)
                .lease(lease)
                .wait(Duration::from_secs(15))
                .acquire()
                .await
        }
    });
    let hash = lock_key(&name);
    common::until(
        Duration::from_secs(10),
        "marked by a waiter not in line",
        async || server.cli(&["HGET", &hash, "w"]) == "1",
    )
    .await;
    // Its second attempt, made once subscribed, is over: it sleeps.
    common::until(Duration::from_secs(10), "asleep", async || {
        common::scripts_ran(&server) >= 2
    })
    .await;

    let released = Instant::now();
    ok(&server, guard.release().await);
    // Whichever of the two the release let in first, the other follows.
    let both = within(
        &server,
        Duration::from_secs(10),
        "the waiter for both",
        both,
    )
    .await;
    drop(ok(&server, both.expect("the waiter for both's task")));
    assert!(
        released.elapsed() < Duration::from_secs(8),
        "woken only when the holder's lease would have run out: {:?}",
        released.elapsed()
    );
    ok(&server, first.await.expect("the waiter in line's task"));
}
