//! Fair locks: arrival order, exactly-one wake-ups, waiters that give up or die.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{client, holder_env, lock_key, ok, spawn_acquire, until_in_line, within};
use lock_runtime::{LockClient, LockError};
use lock_testkit::{RedisServer, unique_key};
use tokio::task::JoinHandle;

/// Takes the fair lock `name` (waiting up to 10 s) in a task, and gives it
/// back at once.
fn take_turn(locks: LockClient, name: String) -> JoinHandle<Result<(), LockError>> {
    tokio::spawn(async move {
        let turn = locks
            .fair_lock(name)
            .wait(Duration::from_secs(10))
            .acquire()
            .await?;
        turn.release().await
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_take_the_lock_in_arrival_order_and_only_the_next_wakes() {
    const WAITERS: usize = 12;
    let server = RedisServer::start();
    let clients = [client(&server).await, client(&server).await];
    let holder = client(&server).await;
    let name = unique_key("fifo");
    let guard = ok(&server, holder.fair_lock(name.as_str()).acquire().await);

    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for arrival in 0..WAITERS {
        let (locks, name, order) = (clients[arrival % 2].clone(), name.clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let turn = locks
                .fair_lock(name)
                .wait(Duration::from_secs(30))
                .acquire()
                .await?;
            order.lock().unwrap().push(arrival);
            tokio::time::sleep(Duration::from_millis(5)).await;
            turn.release().await
        }));
        // Let each waiter get in line before the next arrives.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        server.cli(&["ZCARD", &format!("{}:queue", lock_key(&name))]),
        WAITERS.to_string()
    );

    let before = server.script_calls();
    ok(&server, guard.release().await);
    within(
        &server,
        Duration::from_secs(20),
        "every waiter's turn",
        async {
            for waiter in waiters {
                ok(&server, waiter.await.unwrap());
            }
        },
    )
    .await;
    let calls = server.script_calls() - before;
    assert_eq!(*order.lock().unwrap(), (0..WAITERS).collect::<Vec<_>>());
    // Per handoff: one release and one acquire, plus a few periodic
    // check-ins. Waking every waiter on each release would cost about
    // WAITERS * WAITERS / 2 attempts.
    assert!(
        calls < 4 * WAITERS as u64,
        "{calls} script calls for {WAITERS} handoffs"
    );
    for suffix in ["", ":queue", ":queue:alive"] {
        assert_eq!(
            server.cli(&["EXISTS", &format!("{}{suffix}", lock_key(&name))]),
            "0"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_comes_while_its_client_holds_the_lock_keeps_arrival_order() {
    let server = RedisServer::start();
    let (locks, other) = (client(&server).await, client(&server).await);
    let name = unique_key("joining");
    let fair = |locks: &LockClient| locks.fair_lock(name.as_str()).wait(Duration::from_secs(10));
    let held = ok(&server, fair(&locks).acquire().await);
    let order = Arc::new(Mutex::new(Vec::new()));
    let turn = |locks: &LockClient, who: &'static str| {
        let (request, order) = (fair(locks), order.clone());
        tokio::spawn(async move {
            let guard = request.acquire().await?;
            order.lock().unwrap().push(who);
            tokio::time::sleep(Duration::from_millis(20)).await;
            guard.release().await
        })
    };
    // A waiter of this client gets in line, then one of another client.
    // The third comes to this client, which holds the lock and has a
    // waiter: it gets in line with the holder's release, or by itself
    // soon after, behind the other client's waiter either way.
    let first = turn(&locks, "first");
    until_in_line(&server, &name, "1", Duration::from_secs(10)).await;
    let second = turn(&other, "second");
    until_in_line(&server, &name, "2", Duration::from_secs(10)).await;
    let third = turn(&locks, "third");
    ok(&server, held.release().await);
    within(&server, Duration::from_secs(10), "every turn", async {
        for waiter in [first, second, third] {
            ok(&server, waiter.await.unwrap());
        }
    })
    .await;
    assert_eq!(*order.lock().unwrap(), ["first", "second", "third"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_of_one_client_taking_turns_make_about_one_script_call_per_turn() {
    const TASKS: usize = 8;
    const TURNS: usize = 40;
    let server = RedisServer::start();
    let locks = client(&server).await;
    let name = unique_key("turns");
    let before = server.script_calls();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (locks, name) = (locks.clone(), name.clone());
            tokio::spawn(async move {
                for _ in 0..TURNS {
                    let turn = locks
                        .fair_lock(name.as_str())
                        .wait(Duration::from_secs(30))
                        .acquire()
                        .await?;
                    tokio::task::yield_now().await;
                    turn.release().await?;
                }
                Ok::<_, LockError>(())
            })
        })
        .collect();
    within(&server, Duration::from_secs(60), "every turn", async {
        for task in tasks {
            ok(&server, task.await.unwrap());
        }
    })
    .await;
    let (calls, turns) = (server.script_calls() - before, (TASKS * TURNS) as u64);
    // A task that comes back for the lock while others of its client wait
    // gets in line with the next release, which hands the lock on (one
    // call per turn); by its own attempt, each turn would cost two.
    assert!(
        calls * 10 <= turns * 15,
        "{calls} script calls for {turns} turns"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_leaves_the_line_at_once() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let holder = client(&server).await;
    let name = unique_key("give-up");
    let guard = ok(&server, holder.fair_lock(name.as_str()).acquire().await);

    let impatient = {
        let (locks, name) = (locks.clone(), name.clone());
        tokio::spawn(async move {
            locks
                .fair_lock(name)
                .wait(Duration::from_millis(300))
                .acquire()
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let patient = spawn_acquire(locks.fair_lock(name.as_str()).wait(Duration::from_secs(20)));
    let gave_up = impatient.await.unwrap().expect_err("timed out");
    assert!(gave_up.is_timeout());
    // A dropped waiter leaves the line too.
    let dropped = {
        let (locks, name) = (locks.clone(), name.clone());
        tokio::spawn(async move {
            locks
                .fair_lock(name)
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    dropped.abort();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        server.cli(&["ZCARD", &format!("{}:queue", lock_key(&name))]),
        "1"
    );

    let released = Instant::now();
    ok(&server, guard.release().await);
    let (taken_at, turn) = patient.await.unwrap();
    assert!(
        taken_at - released < Duration::from_millis(800),
        "{:?}",
        taken_at - released
    );
    ok(&server, ok(&server, turn).release().await);
}

/// Run by `a_waiter_that_dies_stops_holding_up_the_line` in a child process:
/// waits in line until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run as a child process by the fair-lock test"]
async fn fair_waiter_process() {
    let Some((url, name)) = holder_env() else {
        return;
    };
    let locks = lock_runtime::LockClient::connect(&url)
        .await
        .expect("connect");
    println!("HELD 0");
    let _ = locks
        .fair_lock(name)
        .wait(Duration::from_secs(600))
        .acquire()
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_dies_stops_holding_up_the_line() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let name = unique_key("dies");
    let guard = ok(&server, locks.fair_lock(name.as_str()).acquire().await);
    let (mut child, _) = common::spawn_holder(&server, "fair_waiter_process", &name);
    until_in_line(&server, &name, "1", Duration::from_secs(10)).await;
    let next = {
        let (locks, name) = (locks.clone(), name.clone());
        tokio::spawn(async move {
            locks
                .fair_lock(name)
                .wait(Duration::from_secs(30))
                .acquire()
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    child.kill().expect("SIGKILL waiter");
    child.wait().unwrap();
    let killed = Instant::now();
    ok(&server, guard.release().await);
    let turn = within(&server, Duration::from_secs(15), "next waiter", next)
        .await
        .unwrap();
    let turn: lock_runtime::LockGuard = ok(&server, turn);
    // The dead waiter's place lapses after a few seconds, not a lease.
    assert!(
        killed.elapsed() < Duration::from_secs(8),
        "{:?}",
        killed.elapsed()
    );
    ok(&server, turn.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_stopped_holds_up_a_short_lease_for_half_of_it_at_most() {
    let server = RedisServer::start();
    let lease = Duration::from_secs(1);
    let name = unique_key("half");
    let request = |locks: &LockClient| {
        locks
            .fair_lock(name.as_str())
            .lease(lease)
            .wait(Duration::from_secs(30))
    };
    let holder = client(&server).await;
    let guard = ok(&server, request(&holder).acquire().await);

    // A waiter of another client gets in line, then stops trying without
    // leaving (its future is never dropped), as one whose process died.
    let stopping = client(&server).await;
    let mut stopped = Box::pin(request(&stopping).acquire());
    tokio::select! {
        _ = &mut stopped => panic!("took a held lock"),
        _ = until_in_line(&server, &name, "1", Duration::from_secs(10)) => {}
    }
    std::mem::forget(stopped);
    let since = Instant::now();
    let next = client(&server).await;
    let waiter = {
        let request = request(&next);
        tokio::spawn(async move { request.acquire().await })
    };
    until_in_line(&server, &name, "2", Duration::from_secs(10)).await;
    ok(&server, guard.release().await);

    let turn = within(&server, Duration::from_secs(10), "next waiter", waiter)
        .await
        .unwrap();
    ok(&server, ok(&server, turn).release().await);
    // Its place lapsed half a lease after its last try, and the next one
    // took the lock at its next try; a stay of 3 s, whatever the lease,
    // would have kept it from the others for two leases at least.
    assert!(
        since.elapsed() < Duration::from_millis(1500),
        "{:?}",
        since.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_names_no_waiter_that_is_gone() {
    use futures_util::StreamExt;
    let server = RedisServer::start();
    let locks = client(&server).await;
    let name = unique_key("gone");
    let guard = ok(&server, locks.fair_lock(name.as_str()).acquire().await);
    let (mut child, _) = common::spawn_holder(&server, "fair_waiter_process", &name);
    let queue = format!("{}:queue", lock_key(&name));
    let (server, queue) = (&server, queue.as_str());
    let in_line =
        |count: &'static str| until_in_line(server, &name, count, Duration::from_secs(10));
    in_line("1").await;
    let dead = server.cli(&["ZRANGE", queue, "0", "0"]);
    child.kill().expect("SIGKILL waiter");
    child.wait().unwrap();
    let killed = Instant::now();

    // A second waiter lines up before the dead one's place lapses, then
    // stops trying without leaving (its future is never dropped), so that
    // nothing but the release itself could drop the dead one from the line.
    // It is another client's: a waiter of the releasing client would be
    // handed the lock, with no message (see handoff.rs).
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let other = client(server).await;
    let mut second = Box::pin(
        other
            .fair_lock(name.as_str())
            .wait(Duration::from_secs(30))
            .acquire(),
    );
    tokio::select! {
        _ = &mut second => panic!("took the lock out of turn"),
        _ = in_line("2") => {}
    }
    std::mem::forget(second);
    let alive = server.cli(&["ZRANGE", queue, "-1", "-1"]);
    // The dead waiter's place lapses 3 s after its last try; the second's
    // does not yet.
    tokio::time::sleep(Duration::from_millis(3500).saturating_sub(killed.elapsed())).await;

    let listener = redis::Client::open(server.url()).unwrap();
    let mut messages = listener.get_async_pubsub().await.expect("pubsub");
    // The lock's channel and every client's inbox for it (see line.lua).
    let channel = format!("{}:released", lock_key(&name));
    messages
        .psubscribe(format!("{channel}*"))
        .await
        .expect("subscribe");
    ok(server, guard.release().await);
    let message = within(server, Duration::from_secs(5), "release message", async {
        messages.on_message().next().await.expect("a message")
    })
    .await;
    let named: String = message.get_payload().expect("text");
    assert_ne!(named, dead, "the release named a waiter that is gone");
    assert_eq!(
        named, alive,
        "the release did not name the waiter next in line"
    );
    let client = alive.rsplit_once(':').expect("an owner id").0;
    assert_eq!(
        message.get_channel_name(),
        format!("{channel}:{client}"),
        "not sent to the named waiter's client alone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_behind_another_of_its_client_tries_only_to_get_in_line_and_on_its_turn() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let waiting = client(&server).await;
    let name = unique_key("early");
    let guard = ok(&server, holder.fair_lock(name.as_str()).acquire().await);

    // The first waiter subscribes to the lock's channel; the second finds
    // it watched already.
    let first = take_turn(waiting.clone(), name.clone());
    until_in_line(&server, &name, "1", Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before = server.script_calls();
    let second = take_turn(waiting.clone(), name.clone());
    until_in_line(&server, &name, "2", Duration::from_secs(5)).await;
    // Time enough for an attempt right after getting in line, if any.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        server.script_calls() - before,
        1,
        "the second waiter's only call so far put it in line"
    );

    ok(&server, guard.release().await);
    within(&server, Duration::from_secs(5), "both turns", async {
        ok(&server, first.await.unwrap());
        ok(&server, second.await.unwrap());
    })
    .await;
}

/// A fair waiter behind a plain (not fair) holder of another client marks
/// the holder's hash, so that its release is announced: the waiter is woken
/// by it, not by its next look a second later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_holders_release_wakes_a_fair_waiter() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let waiting = client(&server).await;
    let name = unique_key("mixed");
    let guard = ok(&server, holder.lock(name.as_str()).acquire().await);
    let waiter = take_turn(waiting, name.clone());
    until_in_line(&server, &name, "1", Duration::from_secs(5)).await;

    server.cli(&["CONFIG", "RESETSTAT"]);
    ok(&server, guard.release().await);
    let published = server
        .cli(&["INFO", "commandstats"])
        .lines()
        .any(|line| line.starts_with("cmdstat_publish:"));
    assert!(published, "the plain holder's release was not announced");
    within(
        &server,
        Duration::from_secs(5),
        "the waiter's turn",
        async {
            ok(&server, waiter.await.unwrap());
        },
    )
    .await;
}
