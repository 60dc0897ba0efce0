//! Lock names are opaque strings: every distinct string is a lock of its
//! own (`x`, `{x}` and `{x}:holders` are three), names with braces in any
//! place work on a Redis Cluster for every kind of lock (all keys of a lock
//! in one slot), a hash tag in the name decides the slot, and the operator
//! API reports names exactly as given. See the layout in keys.rs.

mod common;

use std::time::Duration;

use common::{cluster_builder, connect, ok, start_cluster, start_server_with_clients};
use lock_runtime::{LockClient, LockGuard, LockRequest};
use lock_testkit::RedisCluster;

/// Names that a layout which keeps hash tags as they are would alias
/// (`{x}` with `x`, `{x}:holders` with a companion key of `x`), split
/// across Cluster slots (a `}` before any `{`), or decode wrongly.
const TRICKY: [&str; 14] = [
    "x",
    "{x}",
    "{x}:holders",
    "x:holders",
    "}x",
    "}",
    "}{",
    "{}x",
    "a{b",
    "{{x}",
    "%7Bx%7D",
    "50%",
    "}a{t}{b}",
    "ünï{cødé}🔒",
];

/// `request` tried once must find the lock taken.
async fn refused(request: LockRequest, what: &str) {
    match request.wait(Duration::ZERO).acquire().await {
        Ok(_) => panic!("{what}: taken twice"),
        Err(err) => assert!(err.is_timeout(), "{what}: {err}"),
    }
}

/// `request` tried once must get the lock; it is released at once.
async fn free(request: LockRequest, what: &str) {
    let guard = request
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap_or_else(|err| panic!("{what}: {err}"));
    guard
        .release()
        .await
        .unwrap_or_else(|err| panic!("{what}: release: {err}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_strings_are_distinct_locks() {
    let (server, [a, b]) = start_server_with_clients().await;
    let mut held: Vec<LockGuard> = Vec::new();

    // An exclusive lock and the same name in braces.
    held.push(ok(&server, a.lock("x").acquire().await));
    held.push(ok(
        &server,
        b.lock("{x}").wait(Duration::ZERO).acquire().await,
    ));
    // A name spelling another lock's companion key, as every kind.
    held.push(ok(
        &server,
        b.semaphore("{x}:holders", 1)
            .wait(Duration::ZERO)
            .acquire()
            .await,
    ));
    held.push(ok(&server, a.semaphore("sem", 1).acquire().await));
    held.push(ok(
        &server,
        b.lock("{sem}:holders").wait(Duration::ZERO).acquire().await,
    ));
    held.push(ok(&server, a.read_lock("rw").acquire().await));
    for name in [
        "{rw}:readers",
        "{rw}:readers:holders",
        "{rw}:writer-waiting",
    ] {
        let guard = b.write_lock(name).wait(Duration::ZERO).acquire().await;
        held.push(ok(&server, guard));
    }
    held.push(ok(&server, a.fair_lock("turn").acquire().await));
    for name in ["{turn}:queue", "{turn}:queue:alive", "{turn}:released"] {
        let guard = b.fair_lock(name).wait(Duration::ZERO).acquire().await;
        held.push(ok(&server, guard));
    }
    // An escaped spelling of a name with braces, and a name ending like a
    // companion key.
    held.push(ok(&server, a.lock("%7Bx%7D").acquire().await));
    held.push(ok(
        &server,
        b.lock("x:holders").wait(Duration::ZERO).acquire().await,
    ));

    // Each is still a lock: the other client cannot take any of them.
    refused(b.lock("x"), "x").await;
    refused(a.lock("{x}"), "{x}").await;
    refused(a.semaphore("{x}:holders", 1), "{x}:holders").await;
    refused(b.semaphore("sem", 1), "sem").await;
    refused(b.write_lock("rw"), "rw").await;
    refused(a.read_lock("{rw}:readers"), "{rw}:readers").await;
    refused(b.fair_lock("turn"), "turn").await;
    refused(a.fair_lock("{turn}:queue"), "{turn}:queue").await;
    refused(b.lock("%7Bx%7D"), "%7Bx%7D").await;
    refused(a.lock("x:holders"), "x:holders").await;

    // Inspecting one shows its own holder, not the other's.
    let x = ok(&server, a.inspect("x").await).expect("x held");
    let braced = ok(&server, a.inspect("{x}").await).expect("{x} held");
    assert_eq!(x.name, "x");
    assert_eq!(braced.name, "{x}");
    assert_ne!(x.key, braced.key);
    assert_eq!(x.holders[0].owner_id.as_ref().unwrap().client, a.id());
    assert_eq!(braced.holders[0].owner_id.as_ref().unwrap().client, b.id());

    for guard in held {
        ok(&server, guard.release().await);
    }
    assert!(ok(&server, a.list(None).await).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_inspect_show_names_as_given() {
    let (server, [locks]) = start_server_with_clients().await;
    let mut held = Vec::new();
    for name in TRICKY {
        held.push(ok(&server, locks.lock(name).acquire().await));
    }
    // Other kinds, whose companion keys the listing must fold into them.
    held.push(ok(&server, locks.semaphore("}sem", 2).acquire().await));
    held.push(ok(&server, locks.read_lock("{rw}:x").acquire().await));
    held.push(ok(&server, locks.fair_lock("a{fair").acquire().await));

    let mut expected: Vec<&str> = TRICKY.to_vec();
    expected.extend(["}sem", "{rw}:x", "a{fair"]);
    expected.sort_unstable();
    let listed = ok(&server, locks.list(None).await);
    let names: Vec<&str> = listed.iter().map(|info| info.name.as_str()).collect();
    assert_eq!(names, expected);
    for info in &listed {
        let one = ok(&server, locks.inspect(&info.name).await).expect("held");
        assert_eq!(one.name, info.name);
        assert_eq!(one.key, info.key);
    }
    // Patterns match the names as given, braces included.
    let tagged = ok(&server, locks.list(Some("{x}*")).await);
    let names: Vec<&str> = tagged.iter().map(|info| info.name.as_str()).collect();
    assert_eq!(names, ["{x}", "{x}:holders"]);

    for guard in held {
        ok(&server, guard.release().await);
    }
    assert!(ok(&server, locks.list(None).await).is_empty());
}

/// A Cluster test client whose keys start with `prefix`.
async fn prefixed_client(cluster: &RedisCluster, prefix: &str) -> LockClient {
    connect(cluster_builder(cluster).prefix(prefix)).await
}

/// A kind of lock: how to take it, and what it must keep out.
type Make = fn(&LockClient, &str) -> LockRequest;

fn kinds() -> [(&'static str, Make, Make); 5] {
    [
        ("exclusive", |c, n| c.lock(n), |c, n| c.lock(n)),
        (
            "semaphore",
            |c, n| c.semaphore(n, 1),
            |c, n| c.semaphore(n, 1),
        ),
        ("read", |c, n| c.read_lock(n), |c, n| c.write_lock(n)),
        ("write", |c, n| c.write_lock(n), |c, n| c.read_lock(n)),
        ("fair", |c, n| c.fair_lock(n), |c, n| c.fair_lock(n)),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn names_with_braces_work_for_every_kind_on_a_cluster() {
    let cluster = start_cluster(3, 0);
    // Each kind under a prefix of its own, so that every kind takes the
    // very same names.
    let lease = Duration::from_millis(600);
    let mut held: Vec<(String, LockGuard)> = Vec::new();
    let mut clients = Vec::new();
    for (kind, take, _) in kinds() {
        let prefix = format!("{kind}:");
        let (a, b) = (
            prefixed_client(&cluster, &prefix).await,
            prefixed_client(&cluster, &prefix).await,
        );
        for name in TRICKY {
            let guard = take(&a, name)
                .lease(lease)
                .acquire()
                .await
                .unwrap_or_else(|err| panic!("{kind} {name:?}: {err}"));
            held.push((format!("{kind} {name:?}"), guard));
        }
        clients.push((kind, a, b));
    }
    // Every name at once, across slots.
    let (all_a, all_b) = (
        prefixed_client(&cluster, "all:").await,
        prefixed_client(&cluster, "all:").await,
    );
    let all = all_a
        .lock_all(TRICKY)
        .lease(lease)
        .acquire()
        .await
        .expect("lock_all of every name");
    assert_eq!(all.fences().len(), TRICKY.len());
    held.push(("lock_all".into(), all));

    // Held past several leases: renewals reach every key's slot.
    tokio::time::sleep(lease * 3).await;
    for (what, guard) in &held {
        assert!(!guard.is_lost(), "{what} was lost");
    }
    for (kind, a, b) in &clients {
        let (_, _, against) = kinds().into_iter().find(|k| k.0 == *kind).unwrap();
        for name in TRICKY {
            refused(against(b, name), &format!("{kind} {name:?}")).await;
        }
        let listed = a.list(None).await.expect("list");
        let mut names: Vec<&str> = listed.iter().map(|i| i.name.as_str()).collect();
        let mut expected = TRICKY.to_vec();
        names.sort_unstable();
        expected.sort_unstable();
        assert_eq!(names, expected, "{kind}");
    }
    for name in TRICKY {
        refused(all_b.lock(name), &format!("lock_all {name:?}")).await;
    }

    for (what, guard) in held {
        guard
            .release()
            .await
            .unwrap_or_else(|err| panic!("{what}: release: {err}"));
    }
    for (kind, _, b) in &clients {
        let (_, take, _) = kinds().into_iter().find(|k| k.0 == *kind).unwrap();
        for name in TRICKY {
            free(take(b, name), &format!("{kind} {name:?} after release")).await;
        }
    }
    free(all_b.lock_all(TRICKY), "lock_all after release").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hash_tag_in_the_name_decides_the_cluster_slot() {
    let cluster = start_cluster(3, 0);
    let (a, b) = (
        prefixed_client(&cluster, "lock:").await,
        prefixed_client(&cluster, "lock:").await,
    );
    let keyslot = |key: &str| cluster.node(0).cli(&["CLUSTER", "KEYSLOT", key]);
    let tenant = keyslot("tenant:7");
    let master = cluster.master_for_key("{tenant:7}");

    // Two names with the same tag, taken together in their one slot.
    let orders = ["{tenant:7}:order:1", "{tenant:7}:order:2"];
    let both = a.lock_all(orders).acquire().await.expect("lock_all");
    let listed = a.list(None).await.expect("list");
    assert_eq!(
        listed.iter().map(|i| i.name.as_str()).collect::<Vec<_>>(),
        orders
    );
    for info in &listed {
        assert_eq!(keyslot(&info.key), tenant, "{}", info.key);
        assert_eq!(
            cluster.node(master).cli(&["EXISTS", &info.key]),
            "1",
            "{} on the master of {{tenant:7}}",
            info.key
        );
    }
    refused(b.lock(orders[0]), orders[0]).await;
    // Other names in the same slot are other locks.
    free(b.lock("tenant:7"), "tenant:7").await;
    free(b.lock("{tenant:7}"), "{tenant:7}").await;
    free(b.lock_all(["{tenant:7}", "{tenant:7}:order:3"]), "same tag").await;
    both.release().await.expect("release");
    free(b.lock(orders[1]), orders[1]).await;

    // A name without a tag keeps the slot it always had.
    let plain = a.lock("order:42").acquire().await.expect("acquire");
    let info = a.inspect("order:42").await.expect("inspect").expect("held");
    assert_eq!(info.key, "lock:{order:42}");
    assert_eq!(keyslot(&info.key), keyslot("order:42"));
    plain.release().await.expect("release");
}
