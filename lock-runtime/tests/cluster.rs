//! Redis Cluster, started for real (3 masters, 3 replicas): locks whose keys
//! live on every master, sharded pub/sub wake-ups, locks across slots, and
//! holders told of loss across a failover unless their lock is on the new
//! master.

mod common;

use std::time::{Duration, Instant};

use common::{
    blocking, cluster_builder, cluster_clients, connect, contend, lock_key, names_on_every_master,
    spawn_acquire, start_cluster,
};
use lock_testkit::unique_key;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_kind_of_lock_works_on_every_master_and_wakes_waiters() {
    let cluster = start_cluster(3, 1);
    let [a, b] = cluster_clients(&cluster).await;
    let prefix = unique_key("spread");
    for (name, master) in names_on_every_master(&cluster, &prefix) {
        let held = a.lock(name.as_str()).acquire().await.expect("acquire");
        let key = lock_key(&name);
        assert_eq!(
            cluster.node(master).cli(&["EXISTS", &key]),
            "1",
            "{key} on its master"
        );

        // A waiter on the other client is woken by the sharded release
        // message (to its client's inbox for the lock, see line.lua) long
        // before the 30 s lease would run out, and before its next try to
        // keep its place in line (1.5 s).
        let waiter = spawn_acquire(b.lock(name.as_str()).wait(Duration::from_secs(20)));
        tokio::time::sleep(Duration::from_millis(100)).await;
        let released = Instant::now();
        held.release().await.expect("release");
        let (when, outcome) = waiter.await.expect("waiter");
        outcome
            .expect("waiter takes the lock")
            .release()
            .await
            .expect("release");
        assert!(
            when.duration_since(released) < Duration::from_secs(1),
            "woken {:?} after the release",
            when.duration_since(released)
        );

        let permit = a
            .semaphore(format!("{name}:sem"), 2)
            .acquire()
            .await
            .expect("permit");
        let reading = a
            .read_lock(format!("{name}:rw"))
            .acquire()
            .await
            .expect("read");
        let turn = a
            .fair_lock(format!("{name}:fair"))
            .acquire()
            .await
            .expect("fair");
        for guard in [permit, reading, turn] {
            guard.release().await.expect("release");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn locks_in_different_slots_are_taken_all_or_none() {
    let cluster = start_cluster(3, 1);
    let [a, b] = cluster_clients(&cluster).await;
    let names: Vec<String> = names_on_every_master(&cluster, &unique_key("multi"))
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let all = a
        .lock_all(names.clone())
        .acquire()
        .await
        .expect("all three");
    assert_eq!(all.fences().len(), 3);
    all.release().await.expect("release");

    // With the middle one held elsewhere, taking all fails and leaves the
    // other two free.
    let middle = b.lock(names[1].as_str()).acquire().await.expect("one");
    let err = a
        .lock_all(names.clone())
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect_err("one is taken");
    assert!(err.is_timeout(), "{err}");
    for name in [&names[0], &names[2]] {
        let free = b.lock(name.as_str()).wait(Duration::ZERO).acquire().await;
        free.expect("left free").release().await.expect("release");
    }
    // A waiter for all of them gets them once the middle one is released.
    let waiter = spawn_acquire(a.lock_all(names.clone()).wait(Duration::from_secs(10)));
    tokio::time::sleep(Duration::from_millis(100)).await;
    middle.release().await.expect("release");
    let (_, outcome) = waiter.await.expect("waiter");
    outcome
        .expect("all after the release")
        .release()
        .await
        .expect("release");

    // Transfers in opposite orders across slots never deadlock.
    let mut tasks = Vec::new();
    for task in 0..4 {
        let locks = if task % 2 == 0 { a.clone() } else { b.clone() };
        let mut names = names.clone();
        if task % 2 == 1 {
            names.reverse();
        }
        tasks.push(tokio::spawn(async move {
            for _ in 0..20 {
                let both = locks
                    .lock_all(names.clone())
                    .wait(Duration::from_secs(20))
                    .acquire()
                    .await?;
                both.release().await?;
            }
            Ok::<_, lock_runtime::LockError>(())
        }));
    }
    for task in tasks {
        task.await.expect("task").expect("transfers");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_planned_failover_keeps_held_locks() {
    let cluster = start_cluster(3, 1);
    let [a, b] = cluster_clients(&cluster).await;
    let name = unique_key("planned");
    let master = cluster.master_for_key(&lock_key(&name));
    let held = a
        .lock(name.as_str())
        .lease(Duration::from_secs(2))
        .acquire()
        .await
        .expect("acquire");
    // CLUSTER FAILOVER waits for the replica to catch up: the lock moves.
    let new_master = blocking(|| cluster.failover(master));
    assert_ne!(new_master, master);
    // Renewals reach the new master: the lock outlives several leases.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!held.is_lost(), "lost across a planned failover");
    let err = b
        .lock(name.as_str())
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect_err("held");
    assert!(err.is_timeout(), "{err}");
    held.release().await.expect("release after the failover");
    let again = b.lock(name.as_str()).wait(Duration::ZERO).acquire().await;
    assert!(again.is_ok(), "free after release: {:?}", again.err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_master_keeps_replicated_locks_and_tells_of_the_others() {
    let mut cluster = start_cluster(3, 1);
    let safe = connect(cluster_builder(&cluster).min_replicas(1)).await;
    let [plain] = cluster_clients(&cluster).await;
    let prefix = unique_key("killed");
    let (name, master) = names_on_every_master(&cluster, &prefix).remove(0);
    // Leases longer than the failover takes (a few seconds): while the
    // master is down nothing is renewed, and a lease that ran out meanwhile
    // would be lost whatever the replicas had.
    let replicated = safe
        .lock(name.as_str())
        .lease(Duration::from_secs(15))
        .acquire()
        .await
        .expect("acquire, replicated");
    let others: Vec<_> = {
        let mut guards = Vec::new();
        for i in 0..5 {
            let guard = plain
                .lock(format!("{{{name}}}:plain:{i}"))
                .lease(Duration::from_secs(15))
                .acquire()
                .await
                .expect("acquire");
            guards.push(guard);
        }
        guards
    };

    blocking(|| cluster.kill_master(master));
    let new_master = blocking(|| cluster.wait_for_failover(master));
    tokio::time::sleep(Duration::from_secs(3)).await;

    // The replicated lock was on the replica that took over: still held,
    // and nobody else can take it.
    assert!(!replicated.is_lost(), "a replicated lock was lost");
    let err = plain
        .lock(name.as_str())
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect_err("held");
    assert!(err.is_timeout(), "{err}");
    // Every other holder is either still holding on the new master, or told.
    for (i, guard) in others.iter().enumerate() {
        // The name's hash tag decides the slot: its key is `lock:{tag}{rest}`.
        let key = format!("lock:{{{name}}}{{:plain:{i}}}");
        let on_new_master = cluster.node(new_master).cli(&["EXISTS", &key]) == "1";
        assert!(
            on_new_master != guard.is_lost(),
            "lock {i}: on the new master {on_new_master}, lost {}",
            guard.is_lost()
        );
    }
    replicated.release().await.expect("release");

    // Contention after the failover keeps exclusion (without min_replicas:
    // the promoted replica may have no replica of its own yet).
    let run = contend(
        &[plain.clone(), plain],
        &format!("{prefix}:after"),
        4,
        10,
        Duration::from_secs(2),
    )
    .await;
    assert_eq!(run.overlaps, 0);
    assert_eq!(run.count, 40, "{:?}", run.errors);
}

/// Locks in two slots: the first slot taken, the second busy, and the give
/// back of the first left unanswered (its master stopped). That give-back
/// may still run, and would free a later grant to the same owner id, so
/// the waiter goes on under a new one, and takes both under it once they
/// are free.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_multi_slot_give_back_left_unanswered_is_not_followed_by_the_same_owner_id() {
    let cluster = start_cluster(3, 0);
    // Stops stay under the cluster's node timeout (1 s), which would mark
    // the master failed.
    let builder = || cluster_builder(&cluster).command_timeout(Duration::from_millis(200));
    let (a, b) = (connect(builder()).await, connect(builder()).await);
    let slot = |name: &str, master: usize| -> u64 {
        let slot = cluster
            .node(master)
            .cli(&["CLUSTER", "KEYSLOT", &lock_key(name)]);
        slot.parse().unwrap()
    };
    let mut two: Vec<(String, usize)> =
        names_on_every_master(&cluster, &unique_key("unanswered"))[..2].to_vec();
    two.sort_by_key(|(name, master)| slot(name, *master));
    let [(first, first_master), (second, second_master)] = [two[0].clone(), two[1].clone()];
    let owner_of_first = || {
        cluster
            .node(first_master)
            .cli(&["HGET", &lock_key(&first), "owner"])
    };

    let held = b
        .lock(second.as_str())
        .acquire()
        .await
        .expect("held elsewhere");
    cluster.node(second_master).pause();
    let both = a
        .lock_all([first.clone(), second.clone()])
        .wait(Duration::from_secs(20));
    let waiter = spawn_acquire(both);
    let started = Instant::now();
    while cluster
        .node(first_master)
        .cli(&["EXISTS", &lock_key(&first)])
        == "0"
    {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "first slot not taken"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let before = owner_of_first();
    // The second slot answers busy; the give-back of the first goes
    // unanswered for longer than the command timeout.
    cluster.node(first_master).pause();
    cluster.node(second_master).resume();
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.node(first_master).resume();

    held.release().await.expect("release");
    let (_, outcome) = waiter.await.expect("waiter");
    let guard = outcome.expect("both once free");
    assert_ne!(owner_of_first(), before, "the owner id was used again");
    guard.release().await.expect("release");
}

/// A lock whose slot migrates to another master while it is held (a live
/// reshard: the slot MIGRATING on its master and IMPORTING on another, the
/// lock's key moved, the migration not ended) stays held: its renewals
/// follow ASK to the node that has it now. Once the slot has moved, its
/// release frees it there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lock_whose_slot_migrates_while_held_stays_held() {
    let cluster = start_cluster(3, 0);
    let [locks, other] = cluster_clients(&cluster).await;
    // Every master has run the lock scripts (the library is loaded there).
    for (name, _) in names_on_every_master(&cluster, &unique_key("warm")) {
        let warm = locks.lock(name.as_str()).acquire().await.expect("acquire");
        warm.release().await.expect("release");
    }
    let name = unique_key("migrating");
    let key = lock_key(&name);
    let held = locks
        .lock(name.as_str())
        .lease(Duration::from_millis(900))
        .acquire()
        .await
        .expect("acquire");
    let source = cluster.master_for_key(&key);
    let target = cluster
        .masters()
        .into_iter()
        .find(|m| *m != source)
        .unwrap();
    let slot = cluster.node(source).cli(&["CLUSTER", "KEYSLOT", &key]);
    let (source_id, target_id) = (cluster.node_id(source), cluster.node_id(target));
    let setslot = |node: usize, how: &[&str]| {
        let args = [&["CLUSTER", "SETSLOT", slot.as_str()][..], how].concat();
        assert_eq!(cluster.node(node).cli(&args), "OK", "{args:?}");
    };
    setslot(target, &["IMPORTING", source_id]);
    setslot(source, &["MIGRATING", target_id]);
    let port = cluster.node(target).port().to_string();
    let migrate = ["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS", &key];
    assert_eq!(cluster.node(source).cli(&migrate), "OK");

    // Three leases with the slot migrating: renewed where the key is now.
    tokio::time::sleep(Duration::from_millis(2700)).await;
    assert!(!held.is_lost(), "lost while its slot migrated");

    // The migration ends: the slot's other keys (its fencing counter) go
    // too, and every master learns the slot's new node.
    let rest = cluster
        .node(source)
        .cli(&["CLUSTER", "GETKEYSINSLOT", &slot, "100"]);
    for other_key in rest.lines().filter(|line| !line.is_empty()) {
        let migrate = [
            "MIGRATE",
            "127.0.0.1",
            &port,
            "",
            "0",
            "5000",
            "KEYS",
            other_key,
        ];
        assert_eq!(cluster.node(source).cli(&migrate), "OK");
    }
    setslot(target, &["NODE", target_id]);
    setslot(source, &["NODE", target_id]);
    for node in cluster
        .masters()
        .into_iter()
        .filter(|n| ![source, target].contains(n))
    {
        setslot(node, &["NODE", target_id]);
    }
    // Still there, under its holder: renewed where it moved (its lease,
    // 900 ms, would have run out three times over).
    let owner = cluster.node(target).cli(&["HGET", &key, "owner"]);
    assert!(
        !owner.trim().is_empty(),
        "the lock expired on the node it moved to"
    );
    held.release().await.expect("release once the slot moved");
    let again = other
        .lock(name.as_str())
        .wait(Duration::from_secs(5))
        .acquire()
        .await;
    again
        .expect("free after the release")
        .release()
        .await
        .expect("release");
}
