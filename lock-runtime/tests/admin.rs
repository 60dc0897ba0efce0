//! The operator API against real servers: `inspect` shows every kind of
//! lock with its holders and waiters, `list` finds each held lock once
//! (on one server, across a Cluster's masters, and by majority on Redlock
//! masters), `force_release` frees a lock, wakes its waiters and makes its
//! holder's guard lost, `watch` sees holders come and go.

mod common;

use std::time::Duration;

use common::{
    builder, cluster_builder, connect, names_on_every_master, ok, redlock_builder, start_cluster,
    within,
};
use lock_runtime::{HoldMode, LockClient, LockKind};
use lock_testkit::RedisServer;

/// A client whose owner ids carry the name `billing`.
async fn billing(server: &RedisServer) -> LockClient {
    connect(builder(server).name("billing")).await
}

/// Polls `inspect` until `check` holds (waiters subscribe and queue in the
/// background), failing with the last snapshot and the server log.
async fn eventually(
    server: &RedisServer,
    locks: &LockClient,
    name: &str,
    what: &str,
    check: impl Fn(&lock_runtime::LockInfo) -> bool,
) -> lock_runtime::LockInfo {
    let mut last = None;
    for _ in 0..100 {
        last = ok(server, locks.inspect(name).await);
        if let Some(info) = &last
            && check(info)
        {
            return info.clone();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what}: last seen {last:#?}\nserver log:\n{}", server.log())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exclusive_lock_shows_its_holder() {
    let server = RedisServer::start();
    let locks = billing(&server).await;
    assert_eq!(ok(&server, locks.inspect("invoice:7").await), None);

    let lease = Duration::from_secs(30);
    let guard = ok(
        &server,
        locks.lock("invoice:7").lease(lease).acquire().await,
    );
    let info = ok(&server, locks.inspect("invoice:7").await).expect("held");
    assert_eq!(info.name, "invoice:7");
    assert_eq!(info.key, "lock:{invoice:7}");
    assert_eq!(info.kind, LockKind::Exclusive);
    assert_eq!(info.holders.len(), 1);
    let holder = &info.holders[0];
    assert_eq!(holder.mode, HoldMode::Exclusive);
    assert_eq!(holder.count, 1);
    assert_eq!(holder.fence, guard.fence());
    let ttl = holder.ttl.expect("leased");
    assert!(ttl <= lease && ttl > lease / 2, "{ttl:?}");
    let owner = holder.owner_id.as_ref().expect("owner id parses");
    assert_eq!(owner.name, "billing");
    assert_eq!(owner.pid, std::process::id());
    assert_eq!(owner.client, locks.id());
    assert_eq!(holder.owner, owner.to_string());
    assert!(holder.label().starts_with("billing@"), "{}", holder.label());
    assert!(info.waiters.is_empty(), "{:?}", info.waiters);

    // The same name in braces is another lock, which nobody holds.
    assert_eq!(ok(&server, locks.inspect("{invoice:7}").await), None);

    ok(&server, guard.release().await);
    assert_eq!(ok(&server, locks.inspect("invoice:7").await), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentered_lock_shows_its_depth() {
    let server = RedisServer::start();
    let locks = billing(&server).await;
    let outer = ok(&server, locks.lock("ledger").acquire().await);
    let inner = outer
        .scope(async {
            let inner = ok(
                &server,
                locks.lock("ledger").wait(Duration::ZERO).acquire().await,
            );
            let info = ok(&server, locks.inspect("ledger").await).expect("held");
            assert_eq!(info.holders.len(), 1);
            assert_eq!(info.holders[0].count, 2);
            assert_eq!(info.holders[0].fence, outer.fence());
            inner
        })
        .await
        .expect("not lost");
    ok(&server, inner.release().await);
    let info = ok(&server, locks.inspect("ledger").await).expect("held");
    assert_eq!(info.holders[0].count, 1);
    ok(&server, outer.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_shows_each_permit_holder() {
    let server = RedisServer::start();
    let locks = billing(&server).await;
    let first = ok(&server, locks.semaphore("exports", 3).acquire().await);
    let second = ok(&server, locks.semaphore("exports", 3).acquire().await);
    let info = ok(&server, locks.inspect("exports").await).expect("held");
    assert_eq!(info.kind, LockKind::Semaphore);
    assert_eq!(info.holders.len(), 2, "{info:#?}");
    assert!(info.holders.iter().all(|h| h.mode == HoldMode::Permit));
    assert!(info.holders.iter().all(|h| h.count == 1 && h.ttl.is_some()));
    let mut fences: Vec<u64> = info.holders.iter().map(|h| h.fence).collect();
    fences.sort_unstable();
    let mut expected = vec![first.fence(), second.fence()];
    expected.sort_unstable();
    assert_eq!(fences, expected);
    ok(&server, first.release().await);
    let info = ok(&server, locks.inspect("exports").await).expect("held");
    assert_eq!(info.holders.len(), 1);
    assert_eq!(info.holders[0].fence, second.fence());
    ok(&server, second.release().await);
    assert_eq!(ok(&server, locks.inspect("exports").await), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_lock_shows_its_readers_and_a_waiting_writer() {
    let server = RedisServer::start();
    let (locks, other) = (billing(&server).await, common::client(&server).await);
    let a = ok(&server, locks.read_lock("catalog").acquire().await);
    let b = ok(&server, locks.read_lock("catalog").acquire().await);
    let writer = common::spawn_acquire(other.write_lock("catalog").wait(Duration::from_secs(20)));
    let info = eventually(&server, &locks, "catalog", "a waiting writer", |info| {
        info.waiters.subscribers == 1
    })
    .await;
    assert_eq!(info.kind, LockKind::ReadWrite);
    assert_eq!(info.holders.len(), 2);
    assert!(info.holders.iter().all(|h| h.mode == HoldMode::Read));
    ok(&server, a.release().await);
    ok(&server, b.release().await);
    let (_, taken) = within(&server, Duration::from_secs(10), "writer", writer)
        .await
        .expect("writer task");
    let taken = ok(&server, taken);
    let info = ok(&server, locks.inspect("catalog").await).expect("held");
    assert_eq!(info.kind, LockKind::Exclusive);
    assert_eq!(info.holders[0].fence, taken.fence());
    ok(&server, taken.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_waiters_are_shown_in_line() {
    let server = RedisServer::start();
    let locks = billing(&server).await;
    let waiting = common::client(&server).await;
    let held = ok(&server, locks.fair_lock("printer").acquire().await);
    let first = common::spawn_acquire(waiting.fair_lock("printer").wait(Duration::from_secs(20)));
    eventually(
        &server,
        &locks,
        "printer",
        "the first waiter in line",
        |info| info.waiters.queued.len() == 1,
    )
    .await;
    let second = common::spawn_acquire(waiting.fair_lock("printer").wait(Duration::from_secs(20)));
    // A waiter subscribes once its first attempt put it in line: the
    // subscription may come a little after its place.
    let info = eventually(
        &server,
        &locks,
        "printer",
        "two waiters in line, their client subscribed",
        |info| info.waiters.queued.len() == 2 && info.waiters.subscribers > 0,
    )
    .await;
    assert_eq!(info.kind, LockKind::Fair);
    assert_eq!(info.holders[0].fence, held.fence());
    // One client waits: one subscription, however many of its tasks wait.
    assert_eq!(info.waiters.subscribers, 1);
    let queued: Vec<lock_runtime::OwnerId> = info
        .waiters
        .queued
        .iter()
        .map(|owner| owner.parse().expect("owner id"))
        .collect();
    assert!(queued.iter().all(|owner| owner.client == waiting.id()));
    assert!(
        queued[0].scope < queued[1].scope,
        "arrival order: {queued:?}"
    );

    ok(&server, held.release().await);
    let (_, next) = within(&server, Duration::from_secs(10), "first waiter", first)
        .await
        .expect("task");
    let next = ok(&server, next);
    let info = ok(&server, locks.inspect("printer").await).expect("held");
    assert_eq!(info.holders[0].owner, queued[0].to_string());
    assert_eq!(info.waiters.queued, vec![queued[1].to_string()]);
    ok(&server, next.release().await);
    let (_, last) = within(&server, Duration::from_secs(10), "second waiter", second)
        .await
        .expect("task");
    ok(&server, ok(&server, last).release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_finds_each_held_lock_once_by_pattern() {
    let server = RedisServer::start();
    let locks = billing(&server).await;
    let mut guards = Vec::new();
    for name in ["order:1", "order:2", "{tenant:7}:order:3", "invoice:1"] {
        guards.push(ok(&server, locks.lock(name).acquire().await));
    }
    guards.push(ok(
        &server,
        locks.semaphore("order:exports", 2).acquire().await,
    ));
    guards.push(ok(
        &server,
        locks.semaphore("order:exports", 2).acquire().await,
    ));
    guards.push(ok(
        &server,
        locks.read_lock("order:catalog").acquire().await,
    ));
    // A key of someone else's under the prefix is no lock.
    server.cli(&["SET", "lock:{order:stray}", "x"]);
    // A lock under another prefix is another client's business.
    let other = connect(builder(&server).prefix("other:")).await;
    guards.push(ok(&server, other.lock("order:9").acquire().await));

    let names = |infos: Vec<lock_runtime::LockInfo>| -> Vec<String> {
        infos.into_iter().map(|info| info.name).collect()
    };
    assert_eq!(
        names(ok(&server, locks.list(Some("order:*")).await)),
        ["order:1", "order:2", "order:catalog", "order:exports"]
    );
    let all = ok(&server, locks.list(None).await);
    assert_eq!(
        names(all.clone()),
        [
            "invoice:1",
            "order:1",
            "order:2",
            "order:catalog",
            "order:exports",
            "{tenant:7}:order:3"
        ]
    );
    let exports = all.iter().find(|i| i.name == "order:exports").unwrap();
    assert_eq!(exports.kind, LockKind::Semaphore);
    assert_eq!(exports.holders.len(), 2);
    assert_eq!(
        names(ok(&server, locks.list(Some("{tenant:7}:*")).await)),
        ["{tenant:7}:order:3"]
    );
    assert_eq!(
        names(ok(&server, locks.list(Some("order:[12]")).await)),
        ["order:1", "order:2"]
    );
    assert!(ok(&server, locks.list(Some("nothing:*")).await).is_empty());
    assert_eq!(names(ok(&server, other.list(None).await)), ["order:9"]);
    for guard in guards {
        ok(&server, guard.release().await);
    }
    assert!(ok(&server, locks.list(None).await).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_wakes_a_waiter_and_the_holder_learns_of_the_loss() {
    let server = RedisServer::start();
    let holder = billing(&server).await;
    let (waiter, operator) = (common::client(&server).await, common::client(&server).await);
    // A lease the watchdog renews for as long as the holder lives: only the
    // force release can let the waiter in.
    let guard = ok(
        &server,
        holder
            .lock("nightly")
            .lease(Duration::from_secs(3))
            .acquire()
            .await,
    );
    let waiting = common::spawn_acquire(waiter.lock("nightly").wait(Duration::from_secs(30)));
    eventually(&server, &operator, "nightly", "a waiter", |info| {
        info.waiters.subscribers == 1
    })
    .await;

    assert!(ok(&server, operator.force_release("nightly").await));
    let (_, taken) = within(&server, Duration::from_secs(10), "the waiter", waiting)
        .await
        .expect("task");
    let taken = ok(&server, taken);
    assert!(taken.fence() > guard.fence());
    within(&server, Duration::from_secs(10), "loss", guard.lost()).await;
    assert!(guard.lost_error().is_lost());
    // The new holder is untouched by the old one's renewals.
    let info = ok(&server, operator.inspect("nightly").await).expect("held");
    assert_eq!(
        info.holders[0].owner_id.as_ref().unwrap().client,
        waiter.id()
    );
    ok(&server, taken.release().await);
    assert!(!ok(&server, operator.force_release("nightly").await));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_frees_every_permit_and_reader() {
    let server = RedisServer::start();
    let locks = billing(&server).await;
    let permits = [
        ok(&server, locks.semaphore("slots", 2).acquire().await),
        ok(&server, locks.semaphore("slots", 2).acquire().await),
    ];
    let reader = ok(&server, locks.read_lock("doc").acquire().await);
    assert!(ok(&server, locks.force_release("slots").await));
    assert!(ok(&server, locks.force_release("doc").await));
    assert!(ok(&server, locks.list(None).await).is_empty());
    // Both permits are free again for others.
    let other = common::client(&server).await;
    let mut again = Vec::new();
    for _ in 0..2 {
        let request = other.semaphore("slots", 2).wait(Duration::ZERO);
        again.push(ok(&server, request.acquire().await));
    }
    for guard in again {
        ok(&server, guard.release().await);
    }
    drop((permits, reader));
}

/// A semaphore's set, or a read-write lock's readers, left with only the
/// place of a holder whose lease ran out (kept alive by the renewals of
/// holders since gone) holds nothing: it is not shown as held, and taking
/// it away says nothing was held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_of_only_expired_places_frees_nothing_held() {
    let server = RedisServer::start();
    let locks = billing(&server).await;
    for (name, set) in [("slots", "lock:{slots}"), ("doc", "lock:{doc}:readers")] {
        server.cli(&["ZADD", set, "1", "billing@gone:1:1"]);
        server.cli(&["PEXPIRE", set, "60000"]);
        assert_eq!(ok(&server, locks.inspect(name).await), None, "{name}");
        assert!(!ok(&server, locks.force_release(name).await), "{name}");
        assert_eq!(server.cli(&["EXISTS", set]), "0", "{name}: cleared");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_sees_holders_come_and_go() {
    let server = RedisServer::start();
    let locks = billing(&server).await;
    let operator = common::client(&server).await;
    let mut watch = ok(&server, operator.watch("batch").await);
    assert_eq!(watch.current(), None);

    let guard = ok(&server, locks.lock("batch").acquire().await);
    let seen = within(&server, Duration::from_secs(10), "acquire", watch.changed()).await;
    let seen = ok(&server, seen).expect("held");
    assert_eq!(seen.holders[0].fence, guard.fence());
    // The watch's own subscription is not counted as a waiter.
    assert_eq!(seen.waiters.subscribers, 0);

    ok(&server, guard.release().await);
    let seen = within(&server, Duration::from_secs(10), "release", watch.changed()).await;
    assert_eq!(ok(&server, seen), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_refuses_a_key_that_is_not_a_lock() {
    let server = RedisServer::start();
    let locks = billing(&server).await;
    server.cli(&["SET", "lock:{config}", "x"]);
    let err = locks.inspect("config").await.expect_err("not a lock");
    assert!(
        matches!(err, lock_runtime::LockError::WrongType { .. }),
        "{err}"
    );
    assert!(!ok(&server, locks.force_release("config").await));
    assert_eq!(server.cli(&["GET", "lock:{config}"]), "x");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_is_listed_across_every_master() {
    let cluster = start_cluster(3, 0);
    let named = |name: &'static str| connect(cluster_builder(&cluster).name(name));
    let (locks, waiter) = (named("billing").await, named("waiter").await);
    // One lock on each master.
    let names = names_on_every_master(&cluster, "job");
    let mut guards = Vec::new();
    for (name, _) in &names {
        guards.push(locks.lock(name.as_str()).acquire().await.expect("acquire"));
    }
    guards.push(
        locks
            .semaphore("job:sem", 2)
            .acquire()
            .await
            .expect("permit"),
    );
    let listed = locks.list(Some("job:*")).await.expect("list");
    let mut expected: Vec<String> = names.iter().map(|(n, _)| n.clone()).collect();
    expected.push("job:sem".to_owned());
    expected.sort();
    assert_eq!(
        listed.iter().map(|i| i.name.clone()).collect::<Vec<_>>(),
        expected
    );

    // A waiter's sharded subscription is counted on its lock's master, and
    // the force release reaches it with SPUBLISH.
    let (first, _) = &names[0];
    let waiting = tokio::spawn({
        let request = waiter.lock(first.as_str()).wait(Duration::from_secs(30));
        async move { request.acquire().await }
    });
    let mut subscribed = false;
    for _ in 0..100 {
        let info = locks.inspect(first).await.expect("inspect").expect("held");
        if info.waiters.subscribers == 1 {
            subscribed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(subscribed, "the waiter's subscription was never counted");
    assert!(locks.force_release(first).await.expect("force release"));
    let taken = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter woke")
        .expect("task")
        .expect("acquired");
    let info = locks.inspect(first).await.expect("inspect").expect("held");
    assert_eq!(info.holders[0].owner_id.as_ref().unwrap().name, "waiter");
    taken.release().await.expect("release");
    drop(guards);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_lists_what_a_majority_holds() {
    let servers = RedisServer::start_many(3);
    let locks = connect(redlock_builder(&servers).name("billing")).await;
    let guard = locks.lock("sweep").acquire().await.expect("acquire");
    // A leftover on one master only (a partial grant) is not a lock.
    servers[0].cli(&[
        "HSET",
        "lock:{partial}",
        "owner",
        "x@y:1/67e55044-10b1-426f-9247-bb680e5fe0c8:1",
        "count",
        "1",
        "fence",
        "5",
    ]);
    let listed = locks.list(None).await.expect("list");
    assert_eq!(listed.len(), 1, "{listed:#?}");
    let info = &listed[0];
    assert_eq!(info.name, "sweep");
    assert_eq!(info.holders.len(), 1);
    // Each master stores its own token: the holder's is the largest among
    // the masters that granted first, the one reported the largest of all.
    assert!(info.holders[0].fence >= guard.fence());
    assert_eq!(locks.inspect("partial").await.expect("inspect"), None);

    // One master gone: the other two still make a majority.
    let mut servers = servers;
    servers[2].kill();
    let info = locks
        .inspect("sweep")
        .await
        .expect("inspect")
        .expect("held");
    assert_eq!(info.holders[0].owner, listed[0].holders[0].owner);
    assert!(locks.force_release("sweep").await.expect("force release"));
    assert_eq!(locks.inspect("sweep").await.expect("inspect"), None);
}
