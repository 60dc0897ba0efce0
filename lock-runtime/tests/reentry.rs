//! Ownership by task scope: re-entry inside a critical section, another
//! task as another owner, counts back to zero.

mod common;

use std::time::Duration;

use common::{client, lock_key, ok, within};
use lock_testkit::{RedisServer, unique_key};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_scope_reenters_and_a_spawned_task_waits() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let name = unique_key("reentry");
    let key = lock_key(&name);

    let outer = ok(&server, locks.lock(name.as_str()).acquire().await);
    let fence = outer.fence();
    assert_eq!(server.cli(&["HGET", &key, "count"]), "1");
    let scoped = outer.scope(async {
        assert_eq!(lock_runtime::current().map(|c| c.key), Some(name.clone()));
        // Re-entry: no waiting, same token, count 2 then 3.
        let inner = ok(
            &server,
            locks
                .lock(name.as_str())
                .wait(Duration::ZERO)
                .acquire()
                .await,
        );
        assert_eq!(inner.fence(), fence);
        assert_eq!(server.cli(&["HGET", &key, "count"]), "2");
        let innermost = inner
            .scope(async {
                let g = ok(
                    &server,
                    locks
                        .lock(name.as_str())
                        .wait(Duration::ZERO)
                        .acquire()
                        .await,
                );
                assert_eq!(server.cli(&["HGET", &key, "count"]), "3");
                g
            })
            .await
            .expect("not lost");
        ok(&server, innermost.release().await);
        assert_eq!(server.cli(&["HGET", &key, "count"]), "2");

        // A spawned task does not inherit the scope: it is another owner.
        let other = locks.clone();
        let other_name = name.clone();
        let spawned = tokio::spawn(async move {
            assert!(lock_runtime::current().is_none());
            other.lock(other_name).wait(Duration::ZERO).acquire().await
        });
        let refused = spawned
            .await
            .unwrap()
            .expect_err("spawned task must not re-enter");
        assert!(refused.is_timeout(), "{refused}");
        ok(&server, inner.release().await);
        assert_eq!(server.cli(&["HGET", &key, "count"]), "1");
    });
    scoped.await.expect("not lost");

    // Outside the scope the same task is a new owner and waits too.
    let outside = locks
        .lock(name.as_str())
        .wait(Duration::ZERO)
        .acquire()
        .await;
    assert!(outside.expect_err("outside the scope").is_timeout());

    // A waiter in another task gets the lock once the count is back to zero.
    let waiter = {
        let locks = locks.clone();
        let name = name.clone();
        tokio::spawn(async move {
            locks
                .lock(name)
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !waiter.is_finished(),
        "waiter must wait while the lock is held"
    );
    ok(&server, outer.release().await);
    let next = within(&server, Duration::from_secs(5), "waiter", waiter)
        .await
        .unwrap();
    let next = ok(&server, next);
    assert!(next.fence() > fence);
    ok(&server, next.release().await);
    assert_eq!(server.cli(&["EXISTS", &key]), "0");
    assert_eq!(locks.held(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_guard_releases_in_the_background() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let other = client(&server).await;
    let name = unique_key("drop");
    let guard = ok(
        &server,
        locks
            .lock(name.as_str())
            .lease(Duration::from_secs(30))
            .acquire()
            .await,
    );
    drop(guard);
    // Free at once (not after the 30 s lease): another client takes it.
    let taken = within(
        &server,
        Duration::from_secs(5),
        "acquire after drop",
        other
            .lock(name.as_str())
            .wait(Duration::from_secs(10))
            .acquire(),
    )
    .await;
    ok(&server, ok(&server, taken).release().await);
    assert_eq!(locks.held(), 0);
}
