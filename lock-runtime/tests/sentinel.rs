//! A master watched by Sentinel, with two replicas and three sentinels, all
//! started for real: the client finds the master through the sentinels,
//! follows it across a failover, and with `min_replicas` no lock is granted
//! twice when the master dies.

mod common;

use std::time::Duration;

use common::{blocking, connect, contend, lock_key, sentinel_builder, start_sentinel_group};
use lock_runtime::LockError;
use lock_testkit::unique_key;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicated_locks_survive_the_master_dying_and_the_client_follows() {
    let mut group = start_sentinel_group(2, 3);
    let safe = connect(sentinel_builder(&group).min_replicas(1)).await;
    let other = connect(sentinel_builder(&group).min_replicas(1)).await;
    let name = unique_key("sentinel");
    // A lease longer than the failover takes (about 5 s): nothing is
    // renewed while there is no master.
    let held = safe
        .lock(name.as_str())
        .lease(Duration::from_secs(20))
        .acquire()
        .await
        .expect("acquire");
    let key = lock_key(&name);
    assert!(
        group.replica_urls().len() == 2,
        "two replicas: {:?}",
        group.replica_urls()
    );

    let old = blocking(|| group.kill_master());
    let new = blocking(|| group.wait_for_failover(old));
    assert_ne!(old, new);
    // The lock reached a replica before it was granted, and the most up to
    // date replica was promoted: still held, on the new master, by us.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !held.is_lost(),
        "a replicated lock was lost in the failover"
    );
    assert_eq!(group.master().cli(&["EXISTS", &key]), "1");
    let err = other
        .lock(name.as_str())
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect_err("still held");
    assert!(err.is_timeout(), "{err}");
    held.release().await.expect("release on the new master");

    // Both clients now work against the new master.
    let run = contend(
        &[safe, other],
        &format!("{name}:after"),
        4,
        10,
        Duration::from_secs(2),
    )
    .await;
    assert_eq!(run.overlaps, 0);
    assert_eq!(run.count, 40, "{:?}", run.errors);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lock_no_replica_confirms_is_given_back_with_a_clear_error() {
    let group = start_sentinel_group(2, 3);
    let locks = connect(sentinel_builder(&group)).await;
    let name = unique_key("unreplicated");
    let replicas: Vec<_> = group
        .nodes()
        .iter()
        .filter(|node| node.port() != group.current_master_port())
        .collect();
    for replica in &replicas {
        replica.pause();
    }
    let outcome = locks
        .lock(name.as_str())
        .min_replicas(1)
        .wait(Duration::from_millis(800))
        .acquire()
        .await;
    let master_has_it = group.master().cli(&["EXISTS", &lock_key(&name)]);
    for replica in &replicas {
        replica.resume();
    }
    match outcome {
        Err(LockError::NotReplicated {
            wanted: 1,
            acked: 0,
            ..
        }) => {}
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    assert_eq!(
        master_has_it, "0",
        "the unreplicated lock was left on the master"
    );
    // Without the requirement the same lock is granted at once.
    let guard = locks
        .lock(name.as_str())
        .wait(Duration::ZERO)
        .acquire()
        .await;
    guard.expect("granted").release().await.expect("release");
}

/// A master demoted under its clients' connections (an operator's
/// `REPLICAOF`, Redis's `FAILOVER`), with the sentinels reporting the new
/// one: a call refused as READONLY makes the client ask the sentinels and
/// follow. It kept sending to the old master, and every call failed as
/// read-only until the connection happened to drop.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_master_demoted_under_its_connections_is_followed_on_read_only() {
    let group = start_sentinel_group(1, 1);
    let locks = connect(sentinel_builder(&group)).await;
    let first = unique_key("before-demotion");
    let guard = locks.lock(first.as_str()).acquire().await.expect("acquire");
    guard.release().await.expect("release");
    let old = group.master();
    let new = group
        .nodes()
        .iter()
        .find(|node| node.port() != old.port())
        .expect("a replica");
    let new_port = new.port().to_string();
    new.cli(&["REPLICAOF", "NO", "ONE"]);
    old.cli(&["REPLICAOF", "127.0.0.1", &new_port]);
    let sentinel = &group.sentinels()[0];
    let service = group.service_name();
    sentinel.cli(&["SENTINEL", "REMOVE", service]);
    sentinel.cli(&["SENTINEL", "MONITOR", service, "127.0.0.1", &new_port, "1"]);
    common::until(
        Duration::from_secs(10),
        "the sentinel reports the new master",
        async || {
            sentinel
                .cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", service])
                .contains(&new_port)
        },
    )
    .await;
    // The next calls go to the new master (whose restart quarantine may
    // hold the first of them back), not to the read-only old one.
    for i in 0..3 {
        let name = unique_key(&format!("after-demotion-{i}"));
        let outcome = locks
            .lock(name.as_str())
            .wait(Duration::from_secs(5))
            .acquire()
            .await;
        assert!(
            !matches!(outcome, Err(LockError::ReadOnly { .. })),
            "still sent to the demoted master: {:?}",
            outcome.map(drop)
        );
        if let Ok(guard) = outcome {
            guard.release().await.expect("release");
        }
    }
}
