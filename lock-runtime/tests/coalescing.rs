//! Acquisitions and releases of one client that are ready at the same
//! moment go to Redis as one script call, each still granted, refused or
//! failed on its own; a grant to a caller that is gone is given back; the
//! hot path asks Redis nothing it does not need (no INFO once the server has
//! been up longer than the restart quarantine, no PUBLISH when nobody waits).
//! The server is paused (SIGSTOP) to hold calls back until they pile up.

mod common;

use std::collections::HashSet;
use std::task::Poll;
use std::time::Duration;

use common::{builder, command_stat, connect, ran, scripts_ran};
use lock_runtime::{LockClient, LockError, LockGuard};
use lock_testkit::{RedisServer, unique_key};
use tokio::task::JoinHandle;

/// Acquires `PREFIX:0` .. `PREFIX:{count - 1}` (without waiting), each in
/// a task, while the server is paused, so that they pile up and go
/// together once it resumes (after 300 ms).
async fn acquire_while_paused(
    server: &RedisServer,
    locks: &LockClient,
    prefix: &str,
    count: usize,
) -> Vec<JoinHandle<Result<LockGuard, LockError>>> {
    server.pause();
    let tasks = (0..count)
        .map(|i| {
            let locks = locks.clone();
            let name = format!("{prefix}:{i}");
            tokio::spawn(async move { locks.lock(name).wait(Duration::ZERO).acquire().await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.resume();
    tasks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_ready_together_go_as_one_script_call() {
    let server = RedisServer::start();
    let locks = connect(builder(&server).command_timeout(Duration::from_secs(5))).await;
    let prefix = unique_key("together");
    server.cli(&["CONFIG", "RESETSTAT"]);

    // Paused: the first calls wait for an answer, the rest pile up behind.
    let tasks = acquire_while_paused(&server, &locks, &prefix, 64).await;

    let mut guards = Vec::new();
    for task in tasks {
        guards.push(task.await.expect("task").expect("each lock granted"));
    }
    let fences: HashSet<u64> = guards.iter().map(|guard| guard.fence()).collect();
    assert_eq!(fences.len(), 64, "every holder has a token of its own");
    // At most: two calls gone alone, two batches of the lane's sender
    // while the server is paused, and what waits after them, in one more
    // once a batch is back.
    let acquire_calls = scripts_ran(&server);
    assert!(
        acquire_calls <= 5,
        "64 acquisitions ready together took {acquire_calls} script calls"
    );

    server.pause();
    let releases: Vec<_> = guards
        .into_iter()
        .map(|guard| tokio::spawn(guard.release()))
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.resume();
    for release in releases {
        release.await.expect("task").expect("each lock released");
    }
    let release_calls = scripts_ran(&server) - acquire_calls;
    assert!(
        release_calls <= 5,
        "64 releases ready together took {release_calls} script calls"
    );
    let pattern = format!("{}*", common::lock_key(&prefix).trim_end_matches('}'));
    assert_eq!(server.cli(&["KEYS", &pattern]), "", "every lock is free");
}

/// A batch hands each call its own keys and arguments, however many: a
/// call of thousands of keys (a multi-lock of 1,700 locks has 8,500) among
/// calls of a few. (batch.lua copies a call's part of them with `unpack`
/// up to a bound, which returns at most about 8,000 values, and by a loop
/// beyond it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_of_many_keys_go_in_a_batch_too() {
    let server = RedisServer::start();
    let locks = connect(builder(&server).command_timeout(Duration::from_secs(10))).await;
    let prefix = unique_key("wide");
    let acquire = |task: usize, count: usize| {
        let locks = locks.clone();
        let names: Vec<String> = (0..count).map(|i| format!("{prefix}:{task}:{i}")).collect();
        tokio::spawn(async move { locks.lock_all(names).wait(Duration::ZERO).acquire().await })
    };
    server.cli(&["CONFIG", "RESETSTAT"]);
    server.pause();
    // Two calls go alone and wait for the paused server; the calls after
    // them find their lane busy and wait for its sender, which sends the
    // first of them as it starts, and may send the second, each a batch of
    // one call (sent as a lone call is). The last three wait until a batch
    // is back, and go as one.
    let mut tasks = vec![(acquire(0, 1), 1), (acquire(1, 1), 1)];
    for (task, count) in [(2, 2), (3, 1)] {
        tokio::time::sleep(Duration::from_millis(100)).await;
        tasks.push((acquire(task, count), count));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    for (task, count) in [(4, 1_700), (5, 1), (6, 3)] {
        tasks.push((acquire(task, count), count));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.resume();

    let mut guards = Vec::new();
    for (task, count) in tasks {
        let guard = task.await.expect("task").expect("every lock granted");
        assert_eq!(guard.fences().len(), count);
        guards.push(guard);
    }
    let fences: HashSet<u64> = guards
        .iter()
        .flat_map(|guard| guard.fences())
        .map(|lock| lock.fence)
        .collect();
    assert_eq!(fences.len(), 1_709, "every lock has a token of its own");
    let calls = scripts_ran(&server);
    assert!(
        calls <= 5,
        "the last three acquisitions went as one batch: {calls} script calls"
    );
    for guard in guards {
        guard.release().await.expect("release");
    }
    let pattern = format!("{}*", common::lock_key(&prefix).trim_end_matches('}'));
    assert_eq!(server.cli(&["KEYS", &pattern]), "", "every lock is free");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_fails_in_a_batch_fails_alone() {
    let server = RedisServer::start();
    let locks = connect(builder(&server).command_timeout(Duration::from_secs(5))).await;
    let prefix = unique_key("alone");
    // The lock key of one name holds a string: its acquisition fails.
    let broken = format!("{prefix}:3");
    server.cli(&["SET", &common::lock_key(&broken), "not a lock"]);

    let tasks = acquire_while_paused(&server, &locks, &prefix, 8).await;

    for (i, task) in tasks.into_iter().enumerate() {
        let outcome = task.await.expect("task");
        if i == 3 {
            let err = outcome.expect_err("the key holds a string");
            assert!(matches!(err, LockError::WrongType { .. }), "{err}");
            assert_eq!(err.key(), Some(broken.as_str()));
        } else {
            drop(outcome.expect("the other locks are granted"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_to_a_dropped_acquisition_is_given_back() {
    let server = RedisServer::start();
    let locks = connect(builder(&server).command_timeout(Duration::from_secs(5))).await;
    let name = unique_key("dropped");
    // Taken once first: Redis then has the script, so the acquire below
    // goes out at once, ahead of its give-back (a first call would only
    // find its script missing, and be sent again after the give-back,
    // which retires its owner id: the acquire is then refused, and the
    // grant this test is about never happens).
    let guard = locks.lock(name.as_str()).acquire().await.expect("free");
    guard.release().await.expect("release");
    let counters = server.cli(&["KEYS", "lock:fence:*"]);
    let counter = counters
        .lines()
        .find(|key| key.ends_with('}'))
        .expect("the slot's fencing counter")
        .to_owned();
    let drawn = server.cli(&["GET", &counter]);

    // The acquire script is sent, and its caller gives up before Redis
    // runs it.
    server.pause();
    let gave_up = tokio::time::timeout(
        Duration::from_millis(200),
        locks.lock(name.as_str()).wait(Duration::ZERO).acquire(),
    )
    .await;
    assert!(gave_up.is_err(), "the server is paused");
    server.resume();

    // Redis grants it to an owner no guard has; the client gives it back,
    // long before its 30 s lease would run out.
    let key = common::lock_key(&name);
    let freed = async {
        while server.cli(&["EXISTS", &key]) != "0" {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    // The grant and the give-back come too close together to see the lock
    // taken in between; the token it drew shows it was run.
    let ran = async {
        while server.cli(&["GET", &counter]) == drawn {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(3), ran)
        .await
        .expect("Redis ran the acquisition once resumed");
    tokio::time::timeout(Duration::from_secs(3), freed)
        .await
        .expect("the orphaned grant is given back");
    let guard = locks
        .lock(name.as_str())
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect("free again");
    guard.release().await.expect("release");
}

#[tokio::test]
async fn the_hot_path_asks_nothing_it_does_not_need() {
    let server = RedisServer::start();
    let quarantine = Duration::from_secs(1);
    let locks = connect(builder(&server).restart_quarantine(quarantine)).await;
    let name = unique_key("lean");
    // LASTSAVE counts whole seconds from the start: past the quarantine
    // and one more second, the server has surely been up long enough.
    tokio::time::sleep(quarantine + Duration::from_millis(2100)).await;
    server.cli(&["CONFIG", "RESETSTAT"]);

    let guard = locks.lock(name.as_str()).acquire().await.expect("acquire");
    guard.release().await.expect("release");

    // First: reading the stats is an INFO too.
    assert_eq!(ran(&server, "info"), 0, "the uptime comes from LASTSAVE");
    assert_eq!(ran(&server, "lastsave"), 1, "asked once");
    // (FCALL, or EVALSHA on Redis 6.2: see tests/functions.rs.)
    assert_eq!(scripts_ran(&server), 2, "one call each way");
    assert_eq!(ran(&server, "publish"), 0, "nobody waited");

    // What the scripts learnt is kept (by the library's functions; by
    // nothing on Redis 6.2, where each call asks again): the server has
    // been up for the quarantine, and nothing is asked again.
    for round in 0..10 {
        let guard = locks
            .lock(format!("{name}:{round}"))
            .acquire()
            .await
            .expect("acquire");
        guard.release().await.expect("release");
    }
    // (INFO is not asked either, but the test's own reads of the stats
    // are INFOs too.)
    assert_eq!(scripts_ran(&server), 22);
    if ran(&server, "fcall") > 0 {
        assert_eq!(ran(&server, "lastsave"), 1, "not asked again");
    }
    assert_eq!(ran(&server, "get"), 0, "no `:up` mark read");
}

/// A nested guard's release (one level) whose caller gave up while it
/// waited behind others is not sent later: sent later, it could give back
/// a level the same owner (a scope's owner id) took anew in between. (The
/// last guard's release, of every level, is sent all the same: see
/// `cut_short.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_release_given_up_while_it_waits_is_not_sent_later() {
    let server = RedisServer::start();
    let locks = connect(builder(&server).command_timeout(Duration::from_secs(5))).await;
    let prefix = unique_key("given-up");
    let mut guards = Vec::new();
    for i in 0..5 {
        let name = format!("{prefix}:{i}");
        guards.push(locks.lock(name).acquire().await.expect("acquire"));
    }
    let nested = format!("{prefix}:5");
    let outer = locks
        .lock(nested.as_str())
        .acquire()
        .await
        .expect("acquire");
    let key = common::lock_key(&nested);
    outer
        .scope(async {
            let inner = locks
                .lock(nested.as_str())
                .acquire()
                .await
                .expect("re-enter");
            assert_eq!(server.cli(&["HGET", &key, "count"]), "2");

            // Two releases go alone and the others in a batch of the
            // lane's sender, all held up by the paused server; the nested
            // one comes after those, waits for the sender's batch, and its
            // caller gives up.
            server.pause();
            let on_their_way: Vec<_> = guards
                .into_iter()
                .map(|guard| tokio::spawn(guard.release()))
                .collect();
            tokio::time::sleep(Duration::from_millis(100)).await;
            let gave_up = tokio::time::timeout(Duration::from_millis(100), inner.release()).await;
            assert!(gave_up.is_err(), "the server is paused");
            server.resume();
            for release in on_their_way {
                release.await.expect("task").expect("released");
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert_eq!(
                server.cli(&["HGET", &key, "count"]),
                "2",
                "a nested release given up was sent after all"
            );
        })
        .await
        .expect("not lost");
    // The outer guard's release gives back every level.
    outer.release().await.expect("released");
    assert_eq!(server.cli(&["EXISTS", &key]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_before_any_write_fails_the_whole_batch() {
    let primary = RedisServer::start();
    let server = RedisServer::start();
    let locks = connect(builder(&server).command_timeout(Duration::from_secs(5))).await;
    let prefix = unique_key("refused");
    // The server becomes a replica: every write is refused (READONLY).
    server.cli(&["REPLICAOF", "127.0.0.1", &primary.port().to_string()]);
    server.cli(&["CONFIG", "RESETSTAT"]);

    let tasks = acquire_while_paused(&server, &locks, &prefix, 8).await;
    for task in tasks {
        let err = task
            .await
            .expect("task")
            .expect_err("a replica grants nothing");
        assert!(matches!(err, LockError::ReadOnly { .. }), "{err}");
    }
    // The batched call failed as a whole, as a lone call does, which is
    // what a Sentinel-followed connection needs to see to follow the new
    // master; not a reply with eight errors inside.
    // (FCALL: a function that may write is refused up front on a replica,
    // before it runs, as a rejected call; EVALSHA, on Redis 6.2: the
    // script fails at its first write, as a failed call.)
    let (mut refused, mut answered) = (0, 0);
    for command in ["fcall", "evalsha"] {
        refused += command_stat(&server, command, "rejected_calls")
            + command_stat(&server, command, "failed_calls");
        answered += ran(&server, command);
    }
    assert!(refused > 0, "the script calls were sent");
    assert_eq!(answered, 0, "every script call failed as a whole");
}

#[tokio::test]
async fn a_user_without_lastsave_still_takes_locks() {
    let server = RedisServer::start();
    // The guide's ACL line as it was before LASTSAVE was needed.
    server.cli(&[
        "ACL",
        "SETUSER",
        "locks",
        "reset",
        "on",
        ">secret",
        "~lock:*",
        "&lock:*",
        "+hello",
        "+ping",
        "+info",
        "+evalsha",
        "+script|load",
        "+subscribe",
        "+unsubscribe",
        "+publish",
        "+time",
        "+get",
        "+set",
        "+del",
        "+exists",
        "+pttl",
        "+pexpire",
        "+hget",
        "+hmget",
        "+hset",
        "+hincrby",
    ]);
    let url = format!("redis://locks:secret@127.0.0.1:{}", server.port());
    let locks = connect(common::builder_for(url.as_str())).await;
    let guard = locks
        .lock(unique_key("no-lastsave"))
        .acquire()
        .await
        .expect("INFO decides when LASTSAVE is refused");
    guard.release().await.expect("release");
}

/// Nothing a lane does for one caller waits for another caller's future to
/// be polled: acquisitions polled once and then kept without being polled
/// (a `buffer_unordered` under back-pressure, a `select!` branch no longer
/// polled) hold up no other call of the client, and still get their own
/// replies when they are polled again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_kept_unpolled_hold_up_no_other_call() {
    let server = RedisServer::start();
    // A command timeout longer than the bound below: a call held up fails
    // the bound, not its own timeout.
    let locks = connect(builder(&server).command_timeout(Duration::from_secs(30))).await;
    let prefix = unique_key("unpolled");

    // As many acquisitions as may be on their way at once, each polled
    // once (its call sent) and then left alone. The server is paused
    // meanwhile, so that no answer can come within that one poll.
    server.pause();
    let mut kept: Vec<_> = (0..2)
        .map(|i| {
            let request = locks.lock(format!("{prefix}:{i}")).wait(Duration::ZERO);
            Box::pin(request.acquire())
        })
        .collect();
    for acquisition in &mut kept {
        let polled = std::future::poll_fn(|cx| Poll::Ready(acquisition.as_mut().poll(cx))).await;
        assert!(polled.is_pending(), "the server is paused: {polled:?}");
    }
    server.resume();

    let other = tokio::time::timeout(
        Duration::from_secs(5),
        locks
            .lock(format!("{prefix}:other"))
            .wait(Duration::ZERO)
            .acquire(),
    )
    .await
    .expect("an acquisition of another lock is not held up by the unpolled ones")
    .expect("granted");
    other.release().await.expect("release");

    // Polled again, the kept ones get their own replies.
    for acquisition in kept {
        let guard = tokio::time::timeout(Duration::from_secs(5), acquisition)
            .await
            .expect("a kept acquisition completes once polled")
            .expect("granted");
        guard.release().await.expect("release");
    }
}
