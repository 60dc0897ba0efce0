//! Redlock over five independent masters, each a real `redis-server`:
//! mutual exclusion and growing fencing tokens while one or two masters are
//! stopped or killed, and clean failures when a majority is gone.

mod common;

use std::time::Duration;

use common::{builder_for, connect, contend, redlock_builder, scripts_ran, within};
use lock_runtime::{Deployment, LockClient, LockError};
use lock_testkit::{Proxy, RedisServer, unique_key};

/// A Redlock client over `masters`: the test settings, with a command
/// timeout of 300 ms rather than 500 ms.
async fn redlock(masters: &[RedisServer]) -> LockClient {
    connect(redlock_builder(masters).command_timeout(Duration::from_millis(300))).await
}

/// Whether the lock key is on the master (for counting where a lock is).
fn has_key(master: &RedisServer, name: &str) -> bool {
    master.cli(&["EXISTS", &common::lock_key(name)]) == "1"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exclusion_holds_while_a_master_is_paused_and_another_killed() {
    let mut masters = RedisServer::start_many(5);
    let clients = [redlock(&masters).await, redlock(&masters).await];
    let name = unique_key("redlock");

    let quiet = contend(&clients, &name, 8, 10, Duration::from_secs(2)).await;
    assert_eq!(quiet.errors, Vec::<String>::new());

    // One master frozen (answers nothing), one dead: three still agree.
    masters[1].pause();
    masters[3].kill();
    let faulty = contend(&clients, &name, 4, 10, Duration::from_secs(2)).await;
    masters[1].resume();

    for run in [&quiet, &faulty] {
        assert_eq!(run.overlaps, 0, "two bodies overlapped");
        assert_eq!(run.count, run.fences.len() as u64, "lost an update");
    }
    assert_eq!(
        faulty.count, 40,
        "errors with three masters up: {:?}",
        faulty.errors
    );
    let fences: Vec<u64> = quiet.fences.iter().chain(&faulty.fences).copied().collect();
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens must grow with each holder: {fences:?}"
    );
}

/// Redlock keeps no line of waiters: each master would keep its own, in
/// the order calls reached it, and could keep the lock for a waiter the
/// others do not keep it for. A waiter marks the lock, so that its release
/// wakes it, and takes it once released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_get_in_no_line_on_redlock() {
    let masters = RedisServer::start_many(3);
    let (holder, waiter) = (redlock(&masters).await, redlock(&masters).await);
    let name = unique_key("no-line");
    let key = common::lock_key(&name);
    let guard = holder
        .lock(name.as_str())
        .lease(Duration::from_secs(30))
        .acquire()
        .await
        .expect("acquire");
    let waiting = {
        let name = name.clone();
        tokio::spawn(async move {
            let request = waiter.lock(name).wait(Duration::from_secs(20));
            request.acquire().await.expect("acquire").release().await
        })
    };
    within(
        &masters[0],
        Duration::from_secs(10),
        "the waiter's mark",
        async {
            while masters.iter().any(|m| m.cli(&["HGET", &key, "w"]) != "1") {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        },
    )
    .await;
    for master in &masters {
        assert_eq!(master.cli(&["EXISTS", &format!("{key}:queue")]), "0");
    }
    guard.release().await.expect("release");
    let released = within(&masters[0], Duration::from_secs(10), "the waiter", waiting).await;
    released.unwrap().expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_is_held_on_a_majority_and_released_everywhere() {
    let masters = RedisServer::start_many(5);
    let locks = redlock(&masters).await;
    let name = unique_key("majority");
    let guard = locks.lock(name.as_str()).acquire().await.expect("acquire");
    let holding = masters.iter().filter(|m| has_key(m, &name)).count();
    assert!(holding >= 3, "held on {holding} of 5 masters");

    // A second client finds it taken.
    let other = redlock(&masters).await;
    let err = other
        .lock(name.as_str())
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect_err("taken");
    assert!(err.is_timeout(), "{err}");

    guard.release().await.expect("release");
    // The release returns once a majority answered; the rest follow.
    let gone = async {
        while masters.iter().any(|m| has_key(m, &name)) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(3), gone)
        .await
        .expect("released on every master");
    let again = other
        .lock(name.as_str())
        .wait(Duration::ZERO)
        .acquire()
        .await;
    assert!(again.is_ok(), "free after release: {:?}", again.err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_keep_growing_when_majorities_change() {
    let mut masters = RedisServer::start_many(5);
    let locks = redlock(&masters).await;
    let name = unique_key("fences");
    let mut last = 0;
    // Each round a different pair of masters is down, so consecutive
    // holders are granted by different majorities, with different counters.
    // A grant a paused master makes once it resumes stays until its lease
    // runs out (the release could not reach it): short leases.
    for round in 0..5 {
        let (a, b) = (round % 5, (round + 2) % 5);
        masters[a].pause();
        masters[b].pause();
        let guard = locks
            .lock(name.as_str())
            .lease(Duration::from_secs(1))
            .wait(Duration::from_secs(5))
            .acquire()
            .await
            .unwrap_or_else(|err| panic!("round {round}: {err}"));
        assert!(
            guard.fence() > last,
            "round {round}: {} after {last}",
            guard.fence()
        );
        last = guard.fence();
        guard.release().await.expect("release");
        masters[a].resume();
        masters[b].resume();
    }
    // A master restarted empty counts on from its clock, and the raise
    // keeps the others above every token handed out.
    masters[0].restart();
    let guard = locks
        .lock(name.as_str())
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("acquire after a restart");
    assert!(guard.fence() > last);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_majority_acquisitions_fail_cleanly() {
    let mut masters = RedisServer::start_many(5);
    let locks = redlock(&masters).await;
    let name = unique_key("no-quorum");
    let held = locks.lock(name.as_str()).acquire().await.expect("acquire");
    for master in &mut masters[..3] {
        master.kill();
    }
    let started = std::time::Instant::now();
    let err = locks
        .lock(format!("{name}:other"))
        .wait(Duration::from_secs(1))
        .acquire()
        .await
        .expect_err("no majority");
    assert!(
        matches!(
            err,
            LockError::NoQuorum {
                needed: 3,
                nodes: 5,
                ..
            }
        ),
        "expected NoQuorum, got {err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    // The lock held before is lost once renewals cannot reach a majority.
    tokio::time::timeout(Duration::from_secs(40), held.lost())
        .await
        .expect("the held lock is declared lost");
    // Nothing was left on the surviving masters by the failed attempt.
    let other = format!("{name}:other");
    assert!(masters[3..].iter().all(|m| !has_key(m, &other)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_never_has_more_holders_than_permits() {
    let masters = RedisServer::start_many(5);
    let clients = [redlock(&masters).await, redlock(&masters).await];
    let name = unique_key("permits");
    let inside = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let most = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for task in 0..6 {
        let locks = clients[task % 2].clone();
        let (name, inside, most) = (name.clone(), inside.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            use std::sync::atomic::Ordering::SeqCst;
            for _ in 0..5 {
                let permit = locks
                    .semaphore(name.as_str(), 2)
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await
                    .expect("permit");
                let now = inside.fetch_add(1, SeqCst) + 1;
                most.fetch_max(now, SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                inside.fetch_sub(1, SeqCst);
                permit.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let most = most.load(std::sync::atomic::Ordering::SeqCst);
    assert!(most <= 2, "{most} holders of 2 permits");
    assert_eq!(most, 2, "both permits were never used at once");
}

/// An acquisition whose quorum came too late to use the lock (the lease,
/// less the drift margin, ran out before enough masters granted it) fails:
/// what a master that had not answered by then grants afterwards is given
/// back at once, as after any failed attempt, not left taken for its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_after_a_quorum_that_came_too_late_is_given_back() {
    let masters = RedisServer::start_many(3);
    let locks = connect(redlock_builder(&masters).command_timeout(Duration::from_secs(10))).await;
    let name = unique_key("late-quorum");
    let lease = Duration::from_secs(2);
    masters[0].pause();
    masters[1].pause();
    let request = locks.lock(name.as_str()).lease(lease);
    let attempt = tokio::spawn(request.try_acquire());
    within(
        &masters[2],
        Duration::from_secs(5),
        "the first grant",
        async {
            while !has_key(&masters[2], &name) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        },
    )
    .await;
    // The second grant, a quorum of two, comes after the lease is over.
    tokio::time::sleep(lease + Duration::from_millis(200)).await;
    masters[0].resume();
    let outcome = within(&masters[0], Duration::from_secs(5), "the attempt", attempt).await;
    assert!(
        outcome.unwrap().unwrap().is_none(),
        "a quorum too late holds nothing"
    );

    // The third master grants only now: given back well within its lease.
    masters[1].resume();
    within(&masters[1], lease / 2, "the late grant given back", async {
        while scripts_ran(&masters[1]) < 2 || has_key(&masters[1], &name) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    // The grant that made the quorum too late was given back too.
    assert!(!has_key(&masters[0], &name));
}

/// A release that reaches fewer than a majority of masters leaves the lock
/// where most of them keep it, taken until its lease runs out: it fails,
/// and is sent again in the background until a majority answers. Whether
/// the others fail last (stopped: timed out) or first (dead: refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_answered_by_a_minority_of_masters_fails() {
    let mut masters = RedisServer::start_many(3);
    let locks = redlock(&masters).await;
    let name = unique_key("minority-release");
    let guard = locks
        .lock(name.as_str())
        .lease(Duration::from_secs(30))
        .acquire()
        .await
        .expect("acquire");
    masters[0].pause();
    masters[1].pause();
    let released = guard.release().await;
    assert!(
        matches!(&released, Err(err @ LockError::NoQuorum { .. }) if err.is_unavailable()),
        "{released:?}"
    );
    masters[0].resume();
    masters[1].resume();
    within(
        &masters[0],
        Duration::from_secs(10),
        "given back everywhere",
        async {
            while masters.iter().any(|master| has_key(master, &name)) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        },
    )
    .await;

    let guard = locks.lock(name.as_str()).acquire().await.expect("acquire");
    masters[0].kill();
    masters[1].kill();
    let released = guard.release().await;
    assert!(
        matches!(&released, Err(LockError::NoQuorum { .. })),
        "{released:?}"
    );
}

/// A give-back held up (here by a network that delivers nothing for a
/// while) until after the grant it gives back lapsed and the same owner id
/// was granted the lock again leaves that later grant alone: it names the
/// token it gives back. It freed the later grant before, under a holder
/// still counting on that master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_give_back_held_up_leaves_a_later_grant_to_the_same_owner_id() {
    let masters = RedisServer::start_many(3);
    let proxy = Proxy::start(masters[0].port()).await.expect("proxy");
    let urls = [proxy.url(), masters[1].url(), masters[2].url()];
    // Long enough that no call gives up while the test holds it back.
    let timeout = Duration::from_secs(5);
    let waiter = connect(builder_for(Deployment::redlock(urls)).command_timeout(timeout)).await;
    let holder = redlock(&masters).await;
    let name = unique_key("held-up");
    let key = common::lock_key(&name);

    // Held by the second and third masters only.
    let held = holder
        .lock(name.as_str())
        .lease(Duration::from_secs(30))
        .acquire()
        .await
        .expect("held elsewhere");
    masters[0].cli(&["DEL", &key]);
    masters[1].pause();
    masters[2].pause();
    let attempt = tokio::spawn(waiter.lock(name.as_str()).try_acquire());
    within(
        &masters[0],
        Duration::from_secs(5),
        "the first grant",
        async {
            while !has_key(&masters[0], &name) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        },
    )
    .await;
    let owner = masters[0].cli(&["HGET", &key, "owner"]);
    let fence: u64 = masters[0].cli(&["HGET", &key, "fence"]).parse().unwrap();
    // The others answer busy, and the first master's grant is given back,
    // into a network that holds it.
    proxy.blackhole(true);
    masters[1].resume();
    masters[2].resume();
    let outcome = within(&masters[1], Duration::from_secs(5), "the attempt", attempt).await;
    assert!(outcome.unwrap().unwrap().is_none(), "busy on two of three");

    // Meanwhile the grant lapsed, and the same owner id was granted the
    // lock again (written here as the acquire script writes it).
    masters[0].cli(&["DEL", &key]);
    let later = (fence + 1_000).to_string();
    masters[0].cli(&["HSET", &key, "owner", &owner, "count", "1", "fence", &later]);
    masters[0].cli(&["PEXPIRE", &key, "30000"]);
    let ran = scripts_ran(&masters[0]);
    proxy.blackhole(false);
    within(
        &masters[0],
        Duration::from_secs(10),
        "the give-back",
        async {
            while scripts_ran(&masters[0]) == ran {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        },
    )
    .await;
    assert_eq!(
        masters[0].cli(&["HGET", &key, "owner"]),
        owner,
        "the give-back freed a later grant"
    );
    held.release().await.expect("release");
}

/// A Redlock client that reaches each of `masters` through a proxy, with
/// the late-grant tests' timing (a 2 s command timeout, a 990 ms drift
/// margin), once every master has the library's functions (loading them
/// through delaying proxies would add round trips).
async fn through_proxies(masters: &[RedisServer]) -> (Vec<Proxy>, LockClient) {
    let mut proxies = Vec::new();
    for master in masters {
        proxies.push(Proxy::start(master.port()).await.expect("proxy"));
    }
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let builder = builder_for(Deployment::redlock(urls))
        .command_timeout(Duration::from_secs(2))
        .drift(Duration::from_millis(990));
    let locks = connect(builder).await;
    let warm = locks.lock("warm-up").acquire().await.expect("acquire");
    warm.release().await.expect("release");
    (proxies, locks)
}

/// Puts the first two masters 1.5 s away: their quorum comes within a
/// [`late_request`]'s 3 s lease less the drift (with 500 ms to spare), and
/// the fence raise after it takes 1.5 s more, too late to hold the lock.
fn late_quorum(proxies: &[Proxy]) {
    proxies[0].set_delay(Duration::from_millis(750));
    proxies[1].set_delay(Duration::from_millis(750));
}

/// The late-grant tests' acquisition of `name`.
fn late_request(locks: &LockClient, name: &str) -> lock_runtime::LockRequest {
    locks
        .lock(name)
        .lease(Duration::from_secs(3))
        .wait(Duration::from_secs(30))
}

/// A grant that came too late to be held (here the fence raise took too
/// long) is given back before its owner id asks again, on every master: a
/// give-back still on its way to a master that did not answer could free
/// the grant asked for next there. So a master that does not answer it
/// sends the waiter on under a new owner id, and the old one is retired. It
/// asked again under the old one once a majority answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_grant_given_back_unanswered_by_one_master_is_not_followed_by_the_same_owner_id() {
    let masters = RedisServer::start_many(3);
    let (proxies, locks) = through_proxies(&masters).await;
    let name = unique_key("late-everywhere");
    // The third master answers nothing within the command timeout.
    late_quorum(&proxies);
    proxies[2].set_delay(Duration::from_millis(2500));
    let waiter = tokio::spawn(late_request(&locks, &name).acquire());
    let retired = format!("{}:gone:*", common::lock_key(&name));
    within(
        &masters[0],
        Duration::from_secs(20),
        "an owner id retired",
        async {
            while masters[0].cli(&["KEYS", &retired]).is_empty() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        },
    )
    .await;
    waiter.abort();
}

/// A master that refuses the give-back of a grant too late to be held (a
/// read-only one here) will not run it later: the waiter tries again as
/// after any busy attempt, and takes the lock once the masters answer in
/// time. It ended with the master's refusal before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_grant_given_back_refused_by_one_master_is_followed_by_a_retry() {
    let masters = RedisServer::start_many(3);
    let (proxies, locks) = through_proxies(&masters).await;
    let name = unique_key("late-refused");
    // As above, with the third master refusing every write at once.
    masters[2].cli(&["REPLICAOF", "127.0.0.1", "1"]);
    late_quorum(&proxies);
    let waiter = tokio::spawn(late_request(&locks, &name).acquire());
    // Once a grant came too late and was given back, the masters answer in
    // time again.
    within(
        &masters[0],
        Duration::from_secs(20),
        "a grant given back",
        async {
            while scripts_ran(&masters[0]) < 5 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        },
    )
    .await;
    proxies[0].set_delay(Duration::ZERO);
    proxies[1].set_delay(Duration::ZERO);
    let outcome = within(&masters[0], Duration::from_secs(20), "the waiter", waiter).await;
    let guard = outcome
        .expect("waiter")
        .expect("taken once the masters answer in time");
    guard.release().await.expect("release");
}

/// The last release of a read-write lock's write side taken under a hold
/// of its read side (an upgrade) gives back one level, not every level: it
/// returns once a majority of masters answered, and a slower master may run
/// it only after the same hold took the write side again there (through a
/// connection opened since). It then counts that grant down rather than
/// freeing it. It freed the later grant on that master before, under a
/// holder that counted on it (with one more master failing, another client
/// could take the write side too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_release_of_an_upgrade_leaves_the_upgrade_taken_again() {
    let masters = RedisServer::start_many(3);
    let proxy = Proxy::start(masters[2].port()).await.expect("proxy");
    let urls = [masters[0].url(), masters[1].url(), proxy.url()];
    let timeout = Duration::from_millis(300);
    let locks = connect(builder_for(Deployment::redlock(urls)).command_timeout(timeout)).await;
    let name = unique_key("late-upgrade-release");
    let key = common::lock_key(&name);
    let lease = Duration::from_secs(30);
    let read = locks.read_lock(name.as_str()).lease(lease);
    let read = read.acquire().await.expect("read");
    let upgrade = || {
        let request = locks.write_lock(name.as_str()).lease(lease);
        request.wait(Duration::ZERO).acquire()
    };
    // The third master's count of the write side's levels ("": free), and
    // a wait for it to reach `levels` (an acquisition returns once the
    // other two granted it).
    let count = || masters[2].cli(&["HGET", &key, "count"]);
    let granted_there = |levels: &'static str| {
        within(
            &masters[2],
            Duration::from_secs(3),
            "the grant",
            async move {
                while count() != levels {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            },
        )
    };
    // Upgraded on the third master too (the read side is there).
    let readers = format!("{key}:readers");
    within(
        &masters[2],
        Duration::from_secs(3),
        "the read grant",
        async {
            while masters[2].cli(&["ZCARD", &readers]) != "1" {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        },
    )
    .await;
    read.scope(async {
        let write = upgrade().await.expect("upgrade");
        granted_there("1").await;
        // What reaches the third master from now on is held back 5 s:
        // the release returns on the other two.
        let connections = proxy.connections();
        proxy.set_delay(Duration::from_secs(5));
        write.release().await.expect("released on a majority");
        // A second call the third master leaves unanswered (queued behind
        // the release) makes the client replace its connection to it once
        // both timed out; a ping opens the new one.
        proxy.set_delay(Duration::ZERO);
        let probe = locks.lock(unique_key("probe")).try_acquire().await;
        drop(probe.expect("taken on a majority"));
        within(
            &masters[2],
            Duration::from_secs(5),
            "a new connection",
            async {
                while proxy.connections() == connections {
                    locks.health().await;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
        )
        .await;

        // Taken again on the third master too (re-entering there what the
        // release is still to free), before the release reaches it; then
        // the release does.
        let again = upgrade().await.expect("upgrade again");
        granted_there("2").await;
        within(
            &masters[2],
            Duration::from_secs(10),
            "the late release",
            async {
                while count() == "2" {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
        )
        .await;
        assert!(
            has_key(&masters[2], &name),
            "the late release freed the write side taken again"
        );
        assert_eq!(count(), "1");
        again.release().await.expect("release");
    })
    .await
    .expect("not lost");
    read.release().await.expect("release");
    assert!(!has_key(&masters[2], &name));
}
