//! One suite, two backends: every test here runs against a real
//! `redis-server` (module `on_redis`) and against the in-process store of
//! `LockClient::in_memory` (module `in_memory`), which must behave the same
//! way: leases, re-entry, every lock kind, fairness, fencing, waking, loss.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{QUARANTINE, contend, spawn_acquire, try_once_when_up};
use lock_runtime::{
    LockClient, LockClientBuilder, LockError, LockRequest, LossReason, MemoryStore,
    distributed_lock,
};
use lock_testkit::{RedisServer, unique_key};

/// Where the locks of one test live.
enum Store {
    Redis(RedisServer),
    Memory(MemoryStore),
}

impl Store {
    fn redis() -> Store {
        Store::Redis(RedisServer::start())
    }

    fn memory() -> Store {
        Store::Memory(MemoryStore::new())
    }

    /// A builder with the test clients' settings.
    fn builder(&self) -> LockClientBuilder {
        match self {
            Store::Redis(server) => common::builder(server),
            Store::Memory(store) => common::builder_for(store.clone()),
        }
    }

    async fn client(&self) -> LockClient {
        common::connect(self.builder()).await
    }

    /// Loses every key at once: a restart without persistence.
    fn restart(&mut self) {
        match self {
            Store::Redis(server) => server.restart(),
            Store::Memory(store) => store.restart(),
        }
    }

    /// What went on in the store, for failure messages.
    fn log(&self) -> String {
        match self {
            Store::Redis(server) => server.log(),
            Store::Memory(store) => format!("{store:?}"),
        }
    }

    fn ok<T>(&self, result: Result<T, LockError>) -> T {
        result.unwrap_or_else(|err| panic!("unexpected error: {err}\nstore:\n{}", self.log()))
    }

    async fn within<T>(&self, limit: Duration, what: &str, fut: impl Future<Output = T>) -> T {
        match tokio::time::timeout(limit, fut).await {
            Ok(out) => out,
            Err(_) => panic!("{what} took longer than {limit:?}\nstore:\n{}", self.log()),
        }
    }
}

/// Asserts that `request`, tried once, finds the lock taken.
async fn busy(request: LockRequest, why: &str) {
    let refused = request.wait(Duration::ZERO).acquire().await;
    assert!(refused.expect_err(why).is_timeout(), "{why}");
}

/// Generates each test twice: on a real server and in memory.
macro_rules! conformance {
    ($($test:ident),* $(,)?) => {
        mod on_redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test(super::Store::redis()).await
                }
            )*
        }
        mod in_memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test(super::Store::memory()).await
                }
            )*
        }
    };
}

conformance! {
    contending_clients_exclude_each_other_and_fences_grow,
    a_held_lock_times_out_others_and_its_release_wakes_a_waiter,
    a_short_lease_is_renewed_while_held,
    the_same_scope_re_enters_and_a_spawned_task_waits,
    losing_the_data_means_loss_then_quarantine_then_larger_tokens,
    a_client_that_met_the_store_after_its_loss_does_not_open_the_quarantine,
    a_semaphore_admits_its_permits_only,
    readers_share_and_writers_exclude,
    fair_waiters_are_served_in_arrival_order,
    lock_all_takes_every_lock_or_none,
    the_attribute_runs_the_body_under_the_lock,
    a_forced_release_stops_the_body_and_the_lock_is_listed_until_then,
    try_acquire_says_none_while_the_lock_is_taken,
    a_fixed_lease_is_a_hard_bound_unless_extended,
    a_lock_held_at_least_stays_taken_after_an_early_release,
    a_waiter_takes_a_lock_held_at_least_when_the_minimum_ends,
    an_election_has_one_leader_who_hands_over_on_resign_and_drop,
    a_semaphore_holder_takes_several_permits_all_or_none,
    a_semaphore_keeps_the_number_of_permits_its_first_holder_named,
}

async fn contending_clients_exclude_each_other_and_fences_grow(store: Store) {
    let clients = [store.client().await, store.client().await];
    let name = unique_key("contend");
    let seen = store
        .within(
            Duration::from_secs(60),
            "contention",
            contend(&clients, &name, 6, 5, Duration::from_secs(5)),
        )
        .await;
    assert_eq!(seen.errors, Vec::<String>::new());
    assert_eq!(seen.overlaps, 0);
    assert_eq!(seen.count, 30);
    assert!(
        seen.fences.windows(2).all(|pair| pair[0] < pair[1]),
        "{:?}",
        seen.fences
    );
}

async fn a_held_lock_times_out_others_and_its_release_wakes_a_waiter(store: Store) {
    let (holder, other) = (store.client().await, store.client().await);
    let name = unique_key("wake");
    // A lease far longer than the test: only the release can let the
    // waiter in within the bound below.
    let lease = Duration::from_secs(30);
    let guard = store.ok(holder.lock(name.as_str()).lease(lease).acquire().await);
    busy(other.lock(name.as_str()), "held").await;

    let waiting = spawn_acquire(
        other
            .lock(name.as_str())
            .lease(lease)
            .wait(Duration::from_secs(20)),
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let fence = guard.fence();
    let released = Instant::now();
    store.ok(guard.release().await);
    let (woke, next) = waiting.await.unwrap();
    let next = store.ok(next);
    assert!(
        woke.duration_since(released) < Duration::from_secs(5),
        "woken after {:?}",
        woke.duration_since(released)
    );
    assert!(next.fence() > fence);
}

async fn a_short_lease_is_renewed_while_held(store: Store) {
    let (holder, other) = (store.client().await, store.client().await);
    let name = unique_key("renew");
    let guard = store.ok(holder
        .lock(name.as_str())
        .lease(Duration::from_millis(300))
        .acquire()
        .await);
    // Five leases later the lock is still ours.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!guard.is_lost());
    busy(other.lock(name.as_str()), "still held").await;
    store.ok(guard.release().await);
    let next = store.ok(other
        .lock(name.as_str())
        .wait(Duration::ZERO)
        .acquire()
        .await);
    store.ok(next.release().await);
}

async fn the_same_scope_re_enters_and_a_spawned_task_waits(store: Store) {
    let locks = store.client().await;
    let name = unique_key("reenter");
    let guard = store.ok(locks.lock(name.as_str()).acquire().await);
    let fence = guard.fence();
    let (inner_fence, spawned) = store.ok(guard
        .scope(async {
            let inner = locks.lock(name.as_str()).acquire().await?;
            let inner_fence = inner.fence();
            inner.release().await?;
            // Another task is another owner, even inside the scope.
            let (locks, name) = (locks.clone(), name.clone());
            let spawned =
                tokio::spawn(async move { locks.lock(name).wait(Duration::ZERO).acquire().await })
                    .await
                    .expect("task");
            Ok::<_, LockError>((inner_fence, spawned))
        })
        .await
        .and_then(|inner| inner));
    assert_eq!(inner_fence, fence, "a re-entry keeps the token");
    assert!(spawned.expect_err("another owner").is_timeout());
    // The outer hold survived the inner release.
    assert!(!guard.is_lost());
    busy(locks.lock(name.as_str()), "still held").await;
    store.ok(guard.release().await);
}

async fn losing_the_data_means_loss_then_quarantine_then_larger_tokens(mut store: Store) {
    let locks = store.client().await;
    let name = unique_key("restart");
    let guard = store.ok(locks
        .lock(name.as_str())
        .lease(Duration::from_secs(2))
        .acquire()
        .await);
    let fence = guard.fence();
    store.restart();
    store
        .within(Duration::from_secs(5), "lost() after restart", guard.lost())
        .await;
    drop(guard);
    // Until the quarantine ends, no lock: holders from before the loss may
    // not have been told yet.
    let refused = store
        .within(
            Duration::from_secs(5),
            "refusal",
            try_once_when_up(&locks, &name),
        )
        .await;
    assert!(refused.expect_err("quarantined").is_timeout());
    let again = store.ok(locks
        .lock(name.as_str())
        .wait(QUARANTINE * 3)
        .acquire()
        .await);
    assert!(again.fence() > fence, "{} <= {fence}", again.fence());
}

async fn a_semaphore_admits_its_permits_only(store: Store) {
    let (first, second) = (store.client().await, store.client().await);
    let name = unique_key("permits");
    let mut held = Vec::new();
    for locks in [&first, &second, &first] {
        held.push(store.ok(locks.semaphore(name.as_str(), 3).acquire().await));
    }
    busy(second.semaphore(name.as_str(), 3), "three permits taken").await;
    let waiting = spawn_acquire(
        second
            .semaphore(name.as_str(), 3)
            .wait(Duration::from_secs(20)),
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    store.ok(held.remove(0).release().await);
    let (_, fourth) = store
        .within(Duration::from_secs(10), "fourth permit", waiting)
        .await
        .unwrap();
    store.ok(store.ok(fourth).release().await);
}

async fn readers_share_and_writers_exclude(store: Store) {
    let (first, second) = (store.client().await, store.client().await);
    let name = unique_key("rw");
    let reader = store.ok(first.read_lock(name.as_str()).acquire().await);
    let another = store.ok(second.read_lock(name.as_str()).acquire().await);
    busy(second.write_lock(name.as_str()), "readers in").await;
    let writing = spawn_acquire(
        second
            .write_lock(name.as_str())
            .wait(Duration::from_secs(20)),
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    store.ok(reader.release().await);
    store.ok(another.release().await);
    let (_, writer) = store
        .within(Duration::from_secs(10), "writer", writing)
        .await
        .unwrap();
    let writer = store.ok(writer);
    busy(first.read_lock(name.as_str()), "writer in").await;
    store.ok(writer.release().await);
}

async fn fair_waiters_are_served_in_arrival_order(store: Store) {
    const WAITERS: usize = 5;
    let clients = [store.client().await, store.client().await];
    let name = unique_key("fair");
    let guard = store.ok(clients[0].fair_lock(name.as_str()).acquire().await);
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
            turn.release().await
        }));
        // Each waiter gets in line before the next arrives.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    store.ok(guard.release().await);
    for waiter in waiters {
        store.ok(store
            .within(Duration::from_secs(30), "fair waiter", waiter)
            .await
            .unwrap());
    }
    assert_eq!(*order.lock().unwrap(), (0..WAITERS).collect::<Vec<_>>());
}

async fn lock_all_takes_every_lock_or_none(store: Store) {
    let (first, second) = (store.client().await, store.client().await);
    let (a, b) = (unique_key("all-a"), unique_key("all-b"));
    let b_held = store.ok(first.lock(b.as_str()).acquire().await);
    busy(second.lock_all([a.as_str(), b.as_str()]), "b is held").await;
    // Nothing was taken: `a` is free.
    let a_held = store.ok(first.lock(a.as_str()).wait(Duration::ZERO).acquire().await);
    store.ok(a_held.release().await);
    store.ok(b_held.release().await);
    let both = store.ok(second
        .lock_all([a.as_str(), b.as_str()])
        .wait(Duration::ZERO)
        .acquire()
        .await);
    assert_eq!(both.fences().len(), 2);
}

/// A locked function that records whether another body was inside.
#[distributed_lock(key = "job:<id>", lease = "5s", wait = "20s", client = locks)]
async fn locked_job(
    locks: &LockClient,
    id: &str,
    inside: &Mutex<u32>,
    most: &Mutex<u32>,
) -> Result<u64, LockError> {
    {
        let mut now = inside.lock().unwrap();
        *now += 1;
        let mut most = most.lock().unwrap();
        *most = (*most).max(*now);
    }
    // Re-entering the same lock inside the body does not deadlock.
    let token = nested_job(locks, id).await?;
    tokio::time::sleep(Duration::from_millis(20)).await;
    *inside.lock().unwrap() -= 1;
    Ok(token)
}

#[distributed_lock(key = "job:<id>", wait = "0s", client = locks)]
async fn nested_job(locks: &LockClient, id: &str) -> Result<u64, LockError> {
    Ok(lock_runtime::current().expect("inside a lock").fence)
}

async fn the_attribute_runs_the_body_under_the_lock(store: Store) {
    let clients = [store.client().await, store.client().await];
    let id = unique_key("attr");
    let (inside, most) = (Mutex::new(0), Mutex::new(0));
    let runs = (0..6).map(|i| locked_job(&clients[i % 2], &id, &inside, &most));
    let tokens = store
        .within(
            Duration::from_secs(60),
            "locked jobs",
            futures_util::future::join_all(runs),
        )
        .await;
    let mut tokens: Vec<u64> = tokens.into_iter().map(|t| store.ok(t)).collect();
    assert_eq!(*most.lock().unwrap(), 1, "two bodies were inside at once");
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 6, "each run had its own token");
}

/// Works far longer than the test waits, unless its lock is lost.
#[distributed_lock(key = "long:<id>", lease = "3s", client = locks)]
async fn long_job(
    locks: &LockClient,
    id: &str,
    started: &tokio::sync::Notify,
) -> Result<(), LockError> {
    started.notify_one();
    tokio::time::sleep(Duration::from_secs(600)).await;
    Ok(())
}

async fn a_forced_release_stops_the_body_and_the_lock_is_listed_until_then(store: Store) {
    let (worker, operator) = (
        store
            .builder()
            .name("worker")
            .connect()
            .await
            .expect("connect"),
        store.client().await,
    );
    let id = unique_key("forced");
    let name = format!("long:{id}");
    let started = tokio::sync::Notify::new();
    let job = long_job(&worker, &id, &started);
    tokio::pin!(job);
    tokio::select! {
        _ = started.notified() => {}
        outcome = &mut job => panic!("the job ended first: {outcome:?}"),
    }
    let listed = store.ok(operator.list(Some("long:*")).await);
    assert_eq!(listed.len(), 1, "{listed:?}");
    let holder = &listed[0].holders[0];
    let owner = holder.owner_id.as_ref().expect("a readable owner id");
    assert_eq!(owner.name, "worker");
    assert_eq!(owner.pid, std::process::id());
    assert!(store.ok(operator.force_release(&name).await));
    // The holder learns at its next renewal (a third of the lease) and the
    // body is dropped at its next await.
    let outcome = store
        .within(Duration::from_secs(10), "the stopped job", job)
        .await;
    assert!(outcome.expect_err("lost").is_lost());
    assert!(store.ok(operator.list(Some("long:*")).await).is_empty());
}

async fn a_client_that_met_the_store_after_its_loss_does_not_open_the_quarantine(mut store: Store) {
    let aware = store.client().await;
    let name = unique_key("late-client");
    let guard = store.ok(aware
        .lock(name.as_str())
        .lease(Duration::from_secs(2))
        .acquire()
        .await);
    store.restart();
    // A client that never saw the store before its loss cannot know that
    // holders from before may not have been told yet (unless strict): it
    // takes the lock and creates the slot's fencing counter.
    let late = store.client().await;
    let taken = store
        .within(
            Duration::from_secs(5),
            "the late client's lock",
            try_once_when_up(&late, &name),
        )
        .await;
    store.ok(store.ok(taken).release().await);
    // The client that saw the loss still waits out its quarantine, although
    // the counter now exists.
    let refused = try_once_when_up(&aware, &name).await;
    assert!(
        refused.expect_err("still quarantined").is_timeout(),
        "granted inside the quarantine"
    );
    store
        .within(Duration::from_secs(5), "lost() after restart", guard.lost())
        .await;
    let again = store.ok(aware
        .lock(name.as_str())
        .wait(QUARANTINE * 3)
        .acquire()
        .await);
    store.ok(again.release().await);
}

async fn try_acquire_says_none_while_the_lock_is_taken(store: Store) {
    let (holder, other) = (store.client().await, store.client().await);
    let name = unique_key("try");
    let guard = store
        .ok(holder.lock(name.as_str()).try_acquire().await)
        .expect("a free lock is taken");
    let started = Instant::now();
    let busy = store.ok(other
        .lock(name.as_str())
        .wait(Duration::from_secs(30))
        .try_acquire()
        .await);
    assert!(busy.is_none(), "taken by another client");
    // Tried once: the request's wait is not used.
    assert!(started.elapsed() < Duration::from_secs(10));
    store.ok(guard.release().await);
    let taken = store.ok(other.lock(name.as_str()).try_acquire().await);
    assert!(taken.is_some(), "free again after the release");
}

async fn a_fixed_lease_is_a_hard_bound_unless_extended(store: Store) {
    let (holder, other) = (store.client().await, store.client().await);
    let name = unique_key("fixed");
    let lease = Duration::from_millis(600);
    let fixed = |client: &LockClient| client.lock(name.as_str()).lock_at_most(lease);

    // Not renewed: lost when the lease runs out, and free in Redis then.
    let guard = store.ok(fixed(&holder).acquire().await);
    store
        .within(Duration::from_secs(10), "loss at the lease", guard.lost())
        .await;
    assert!(
        matches!(
            guard.lost_error(),
            LockError::Lost {
                reason: LossReason::LeaseEnded,
                ..
            }
        ),
        "{:?}",
        guard.lost_error()
    );
    let next = store.ok(other.lock(name.as_str()).acquire().await);
    store.ok(next.release().await);
    drop(guard);

    // Extended by hand: held past its first lease, then lost at the new one.
    let guard = store.ok(fixed(&holder).acquire().await);
    let extended = Instant::now();
    store.ok(guard.extend(Duration::from_secs(3)).await);
    tokio::time::sleep(lease * 2).await;
    assert!(!guard.is_lost(), "extended past its first lease");
    busy(other.lock(name.as_str()), "extended").await;
    store
        .within(
            Duration::from_secs(10),
            "loss at the extension",
            guard.lost(),
        )
        .await;
    assert!(extended.elapsed() >= Duration::from_secs(2));
    drop(guard);

    // An extension below the minimum lease, or beyond the maximum, is refused.
    let guard = store.ok(fixed(&holder).wait(Duration::from_secs(10)).acquire().await);
    for wrong in [Duration::from_millis(1), Duration::MAX] {
        let refused = guard.extend(wrong).await;
        assert!(matches!(refused, Err(LockError::Config(_))), "{refused:?}");
    }

    // Re-entered with the other kind of lease: refused, so that a renewed
    // re-entry cannot keep a fixed lease alive past its bound.
    let inner = guard
        .scope(holder.lock(name.as_str()).lease(lease).acquire())
        .await
        .expect("not lost");
    assert!(matches!(inner, Err(LockError::Config(_))), "{inner:?}");
    let inner = store.ok(guard
        .scope(fixed(&holder).acquire())
        .await
        .expect("not lost"));
    store.ok(inner.release().await);
    store.ok(guard.release().await);
}

/// A waiter that found the lock taken sleeps until the holder's lease
/// would run out; an early release that keeps the lock to its minimum
/// tells it, and it takes the lock when the minimum ends, not at the end of
/// the lease (it waited out its whole wait before).
async fn a_waiter_takes_a_lock_held_at_least_when_the_minimum_ends(store: Store) {
    let (holder, other) = (store.client().await, store.client().await);
    let name = unique_key("atleast-waiter");
    let (lease, at_least) = (Duration::from_secs(15), Duration::from_secs(1));
    let acquired = Instant::now();
    let guard = store.ok(holder
        .lock(name.as_str())
        .lease(lease)
        .lock_at_least(at_least)
        .acquire()
        .await);
    let waiter = spawn_acquire(other.lock(name.as_str()).wait(Duration::from_secs(12)));
    // Waiting: subscribed to releases (after its first attempt), then, a
    // moment later, asleep until the holder's lease would run out.
    store
        .within(Duration::from_secs(5), "the waiter subscribed", async {
            while store
                .ok(holder.inspect(&name).await)
                .is_none_or(|info| info.waiters.subscribers == 0)
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    store.ok(guard.release().await);
    let (taken_at, outcome) = store
        .within(Duration::from_secs(15), "the waiter", waiter)
        .await
        .expect("waiter");
    let waited = store.ok(outcome);
    let took = taken_at.duration_since(acquired);
    assert!(
        took >= at_least - Duration::from_millis(100) && took < lease / 3,
        "taken {took:?} after the holder took it"
    );
    store.ok(waited.release().await);
}

async fn a_lock_held_at_least_stays_taken_after_an_early_release(store: Store) {
    let (holder, other) = (store.client().await, store.client().await);
    let name = unique_key("atleast");
    let at_least = Duration::from_millis(1500);
    let acquired = Instant::now();
    let guard = store.ok(holder
        .lock(name.as_str())
        .lock_at_least(at_least)
        .acquire()
        .await);
    store.ok(guard.release().await);
    busy(other.lock(name.as_str()), "kept after the release").await;
    let waited = store.ok(other
        .lock(name.as_str())
        .wait(Duration::from_secs(20))
        .acquire()
        .await);
    assert!(
        acquired.elapsed() >= at_least - Duration::from_millis(100),
        "taken again {:?} after the first acquisition",
        acquired.elapsed()
    );
    store.ok(waited.release().await);

    // Released after the minimum: freed at once.
    let guard = store.ok(holder
        .lock(name.as_str())
        .lock_at_least(Duration::from_millis(200))
        .acquire()
        .await);
    tokio::time::sleep(Duration::from_millis(400)).await;
    store.ok(guard.release().await);
    let again = store.ok(other.lock(name.as_str()).try_acquire().await);
    assert!(again.is_some(), "free at once after the minimum");

    // Not beyond the maximum lease.
    let refused = holder
        .lock(name.as_str())
        .lock_at_least(Duration::MAX)
        .acquire()
        .await;
    assert!(matches!(refused, Err(LockError::Config(_))), "{refused:?}");

    // Not for a semaphore or a read lock.
    let refused = holder
        .semaphore(name.as_str(), 2)
        .lock_at_least(at_least)
        .acquire()
        .await;
    assert!(matches!(refused, Err(LockError::Config(_))), "{refused:?}");
}

/// Campaigns in a task of its own; resolves to when it ended and how.
fn spawn_campaign(
    election: lock_runtime::Election,
) -> tokio::task::JoinHandle<(Instant, Result<lock_runtime::Leadership, LockError>)> {
    tokio::spawn(async move {
        let outcome = election.campaign().await;
        (Instant::now(), outcome)
    })
}

async fn an_election_has_one_leader_who_hands_over_on_resign_and_drop(store: Store) {
    let (first, second) = (store.client().await, store.client().await);
    let name = unique_key("election");
    // Far longer than the bounds below: only a release explains a handover.
    let lease = Duration::from_secs(30);
    let election = |locks: &LockClient| locks.election(name.as_str()).lease(lease);
    assert_eq!(store.ok(second.leader_of(&name).await), None);

    let leader = store.ok(election(&first).campaign().await);
    assert!(store.ok(election(&second).try_lead().await).is_none());
    let info = store.ok(second.leader_of(&name).await).expect("a leader");
    assert!(info.is_held_by(&first));
    assert_eq!(info.fence, leader.fence());

    // Resigning hands over to the waiting candidate at once.
    let waiting = spawn_campaign(election(&second));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "two leaders at once");
    let (old, resigned) = (leader.fence(), Instant::now());
    store.ok(leader.resign().await);
    let (at, leader) = store
        .within(Duration::from_secs(10), "handover on resign", waiting)
        .await
        .unwrap();
    let leader = store.ok(leader);
    assert!(at.duration_since(resigned) < Duration::from_secs(5));
    assert!(leader.fence() > old);
    let info = store.ok(first.leader_of(&name).await).expect("a leader");
    assert!(info.is_held_by(&second));

    // So does dropping the leadership.
    let waiting = spawn_campaign(election(&first));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "two leaders at once");
    let (old, dropped) = (leader.fence(), Instant::now());
    drop(leader);
    let (at, leader) = store
        .within(Duration::from_secs(10), "handover on drop", waiting)
        .await
        .unwrap();
    let leader = store.ok(leader);
    assert!(at.duration_since(dropped) < Duration::from_secs(5));
    assert!(leader.fence() > old);
    assert_eq!(
        store.ok(leader.scope(async { leader.fence() }).await),
        leader.fence()
    );
    store.ok(leader.resign().await);
    assert_eq!(store.ok(second.leader_of(&name).await), None);
}

async fn a_semaphore_holder_takes_several_permits_all_or_none(store: Store) {
    let (first, second) = (store.client().await, store.client().await);
    let name = unique_key("several");
    let three = store.ok(first.semaphore(name.as_str(), 4).permits(3).acquire().await);
    busy(
        second.semaphore(name.as_str(), 4).permits(2),
        "two of the one left",
    )
    .await;
    let one = store.ok(second.semaphore(name.as_str(), 4).acquire().await);
    busy(second.semaphore(name.as_str(), 4), "all four taken").await;
    let info = store.ok(second.inspect(&name).await).expect("held");
    assert_eq!(info.limit, Some(4));
    assert_eq!(info.holders.iter().map(|h| h.permits).sum::<u32>(), 4);

    // Its release gives all three back: a waiter for three gets in.
    let waiting = spawn_acquire(
        second
            .semaphore(name.as_str(), 4)
            .permits(3)
            .wait(Duration::from_secs(20)),
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "three permits of one free");
    store.ok(three.release().await);
    let (_, again) = store
        .within(Duration::from_secs(10), "three permits", waiting)
        .await
        .unwrap();
    store.ok(store.ok(again).release().await);
    store.ok(one.release().await);
    assert_eq!(store.ok(first.inspect(&name).await), None);
}

async fn a_semaphore_keeps_the_number_of_permits_its_first_holder_named(store: Store) {
    let (first, second) = (store.client().await, store.client().await);
    let name = unique_key("recorded");
    let held = store.ok(first.semaphore(name.as_str(), 2).acquire().await);
    let refused = second.semaphore(name.as_str(), 3).acquire().await;
    match refused {
        Err(LockError::Config(text)) => assert!(text.contains("has 2 permits, not 3"), "{text}"),
        other => panic!("another number of permits: {other:?}"),
    }
    store.ok(held.release().await);
    // Empty: forgotten, so another number may start it afresh.
    let held = store.ok(second
        .semaphore(name.as_str(), 3)
        .permits(3)
        .acquire()
        .await);
    busy(first.semaphore(name.as_str(), 3), "three of three taken").await;
    let refused = first.semaphore(name.as_str(), 2).try_acquire().await;
    assert!(matches!(refused, Err(LockError::Config(_))), "{refused:?}");
    store.ok(held.release().await);
}
