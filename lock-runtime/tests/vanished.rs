//! A lock that vanishes from Redis while its holder's body runs (an
//! operator's force-release, a stray `DEL`, an eviction, a failover that
//! lost it) is never granted again to that holder as a "re-entry": a
//! nested call on it fails as lost, and the enclosing hold is declared lost
//! and its body stopped, for every kind of lock.

mod common;

use std::time::Duration;

use common::{lock_key, ok, start_server_with_clients, within};
use lock_runtime::{LockClient, LockError, LockRequest, LossReason};
use lock_testkit::unique_key;

/// Holds `name` with `take(holder)`, lets `vanish` make it disappear while
/// the body runs, then has the body take it again: the nested call must
/// fail as lost, and the body must be stopped with a loss.
async fn nested_call_after_vanishing(
    holder: &LockClient,
    take: impl Fn(&LockClient) -> LockRequest,
    vanish: impl AsyncFnOnce(),
) -> LockError {
    let outer = take(holder).acquire().await.expect("outer acquire");
    let mut nested = None;
    let body = outer.scope(async {
        vanish().await;
        nested = Some(take(holder).wait(Duration::ZERO).acquire().await);
        // The body goes on; the loss must stop it.
        tokio::time::sleep(Duration::from_secs(60)).await;
    });
    let ended = tokio::time::timeout(Duration::from_secs(10), body)
        .await
        .expect("the body is stopped by the loss, not left running");
    let stopped = ended.expect_err("the body ends with the loss");
    assert!(stopped.is_lost(), "{stopped}");
    assert!(outer.is_lost(), "the enclosing guard is told");
    let released = outer.release().await.expect_err("released after its loss");
    assert!(released.is_lost(), "{released}");
    match nested.expect("the nested call returned") {
        Ok(guard) => panic!(
            "a vanished lock was granted again as a re-entry (token {})",
            guard.fence()
        ),
        Err(err) => err,
    }
}

fn assert_lost_at_reentry(err: &LockError) {
    assert!(
        matches!(
            err,
            LockError::Lost {
                reason: LossReason::NotHeldAtReentry,
                ..
            }
        ),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_released_lock_taken_by_another_meanwhile_is_not_reentered() {
    let (server, [a, b, c]) = start_server_with_clients().await;
    let name = unique_key("vanished-exclusive");
    let take = |locks: &LockClient| locks.lock(name.as_str());
    let err = nested_call_after_vanishing(&a, take, async || {
        assert!(ok(&server, b.force_release(&name).await), "it was held");
        // Another holder comes and goes meanwhile.
        let other = ok(&server, b.lock(name.as_str()).try_acquire().await).expect("free");
        ok(&server, other.release().await);
    })
    .await;
    assert_lost_at_reentry(&err);
    assert_eq!(err.key(), Some(name.as_str()));
    // Nobody holds it: the nested call granted nothing to the old holder.
    assert_eq!(server.cli(&["EXISTS", &lock_key(&name)]), "0");
    let third = ok(&server, c.lock(name.as_str()).try_acquire().await);
    assert!(third.is_some(), "free for a third client");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_lock_is_not_reentered() {
    let (server, [a]) = start_server_with_clients().await;
    let name = unique_key("vanished-del");
    let key = lock_key(&name);
    let take = |locks: &LockClient| locks.lock(name.as_str());
    let err = nested_call_after_vanishing(&a, take, async || {
        assert_eq!(server.cli(&["DEL", &key]), "1");
    })
    .await;
    assert_lost_at_reentry(&err);
    assert_eq!(server.cli(&["EXISTS", &key]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_by_another_is_not_reentered() {
    let (server, [a, b]) = start_server_with_clients().await;
    let name = unique_key("vanished-taken");
    let take = |locks: &LockClient| locks.lock(name.as_str());
    let other = std::sync::Mutex::new(None);
    let err = nested_call_after_vanishing(&a, take, async || {
        ok(&server, b.force_release(&name).await);
        let taken = ok(&server, b.lock(name.as_str()).try_acquire().await);
        *other.lock().unwrap() = taken;
    })
    .await;
    assert_lost_at_reentry(&err);
    let other = other.into_inner().unwrap().expect("b took it");
    assert!(!other.is_lost(), "the new holder keeps it");
    ok(&server, other.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_lock_force_released_is_not_reentered() {
    let (server, [a, b]) = start_server_with_clients().await;
    let name = unique_key("vanished-fair");
    let take = |locks: &LockClient| locks.fair_lock(name.as_str());
    let err = nested_call_after_vanishing(&a, take, async || {
        ok(&server, b.force_release(&name).await);
    })
    .await;
    assert_lost_at_reentry(&err);
    assert_eq!(server.cli(&["EXISTS", &lock_key(&name)]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_lock_force_released_is_not_reentered() {
    let (server, [a, b]) = start_server_with_clients().await;
    let name = unique_key("vanished-read");
    let take = |locks: &LockClient| locks.read_lock(name.as_str());
    let err = nested_call_after_vanishing(&a, take, async || {
        ok(&server, b.force_release(&name).await);
    })
    .await;
    assert_lost_at_reentry(&err);
    let info = ok(&server, b.inspect(&name).await);
    assert!(
        info.as_ref().is_none_or(|info| info.holders.is_empty()),
        "{info:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_never_hands_out_more_permits_than_it_has() {
    let (server, [a, b, c]) = start_server_with_clients().await;
    let name = unique_key("vanished-semaphore");
    let take = |locks: &LockClient| locks.semaphore(name.as_str(), 2);
    let others = std::sync::Mutex::new(Vec::new());
    let err = nested_call_after_vanishing(&a, take, async || {
        ok(&server, b.force_release(&name).await);
        // Both permits go to others.
        for locks in [&b, &c] {
            let permit = ok(&server, take(locks).try_acquire().await).expect("a permit");
            others.lock().unwrap().push(permit);
        }
    })
    .await;
    assert_lost_at_reentry(&err);
    // Two holders, as many as the semaphore has permits.
    assert_eq!(server.cli(&["ZCARD", &lock_key(&name)]), "2");
    for permit in others.into_inner().unwrap() {
        ok(&server, permit.release().await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_still_held_is_reentered_as_before() {
    let (server, [a]) = start_server_with_clients().await;
    let name = unique_key("vanished-control");
    let outer = ok(&server, a.lock(name.as_str()).acquire().await);
    let depth = within(
        &server,
        Duration::from_secs(10),
        "re-entry",
        outer.scope(async {
            let inner = ok(&server, a.lock(name.as_str()).try_acquire().await).expect("re-entered");
            let depth = server.cli(&["HGET", &lock_key(&name), "count"]);
            ok(&server, inner.release().await);
            depth
        }),
    )
    .await
    .expect("not lost");
    assert_eq!(depth, "2");
    assert!(!outer.is_lost());
    ok(&server, outer.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_write_side_is_not_reentered_through_a_nested_read_side() {
    let (server, [a]) = start_server_with_clients().await;
    let name = unique_key("vanished-downgraded");
    let key = lock_key(&name);
    // The writer also holds the read side, in a nested guard kept alive.
    let take = |locks: &LockClient| locks.write_lock(name.as_str());
    let reading = std::sync::Mutex::new(None);
    let err = nested_call_after_vanishing(&a, take, async || {
        let read = ok(&server, a.read_lock(name.as_str()).try_acquire().await);
        *reading.lock().unwrap() = read;
        assert_eq!(server.cli(&["DEL", &key]), "1");
    })
    .await;
    assert_lost_at_reentry(&err);
    assert_eq!(server.cli(&["EXISTS", &key]), "0", "not granted again");
    drop(reading);
}

/// A fixed lease on the other side of a read-write lock (an upgrade, a
/// downgrade) is the request's own: the nested call takes that side with
/// its whole lease, as it would alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_other_side_taken_with_a_fixed_lease_gets_the_whole_lease() {
    let (server, [a]) = start_server_with_clients().await;
    let lease = Duration::from_secs(10);
    let name = unique_key("fixed-sides");
    let write = ok(
        &server,
        a.write_lock(name.as_str())
            .lock_at_most(lease)
            .acquire()
            .await,
    );
    let readers = format!("{}:readers", lock_key(&name));
    let pttl = write
        .scope(async {
            let read = a.read_lock(name.as_str()).lock_at_most(lease);
            let read = ok(&server, read.acquire().await);
            let pttl: i64 = server.cli(&["PTTL", &readers]).trim().parse().unwrap();
            ok(&server, read.release().await);
            pttl
        })
        .await
        .expect("not lost");
    assert!(pttl > 5_000, "the read side got {pttl} ms of a 10 s lease");
    ok(&server, write.release().await);
}
