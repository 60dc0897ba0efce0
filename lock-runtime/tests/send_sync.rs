//! The public types and futures can cross threads: the client, the guard,
//! a leadership and the error are `Send + Sync`, and the futures of
//! `acquire`, `try_acquire`, `release`, `scope`, `campaign`, `health` and
//! `shutdown` are `Send` (and `'static` where they own what they use), so
//! that a multi-threaded runtime can spawn them. These are compile-time
//! checks: a type that lost one of these traits fails to build this file.
//! The futures are also run, against the in-memory store, in spawned tasks.

use std::error::Error;
use std::future::Future;
use std::time::Duration;

use lock_runtime::{
    Election, Health, Leadership, LockClient, LockError, LockGuard, LockRequest, MemoryStore,
};

fn send_sync<T: Send + Sync + 'static>() {}

fn send_sync_clone<T: Send + Sync + Clone + 'static>() {}

fn error<T: Error + Send + Sync + 'static>() {}

/// Passes `fut` through, requiring it to be `Send` (it may borrow).
fn send<F: Future + Send>(fut: F) -> F {
    fut
}

/// Spawns `fut` on the multi-threaded runtime, which requires it and its
/// output to be `Send + 'static`.
async fn spawned<F>(fut: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(fut).await.expect("the task does not panic")
}

#[test]
fn the_public_types_are_send_and_sync() {
    send_sync_clone::<LockClient>();
    send_sync::<LockGuard>();
    send_sync::<LockRequest>();
    send_sync_clone::<Election>();
    send_sync::<Leadership>();
    send_sync_clone::<Health>();
    send_sync_clone::<MemoryStore>();
    send_sync::<LockError>();
    error::<LockError>();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_futures_are_send_and_spawnable() -> Result<(), LockError> {
    let locks = LockClient::in_memory().await?;

    // acquire and release, each in a task of its own.
    let guard = spawned(locks.lock("send:acquire").acquire()).await?;
    spawned(guard.release()).await?;

    // try_acquire: free, then held by the guard it returned.
    let guard = spawned(locks.lock("send:try").try_acquire())
        .await?
        .expect("nobody holds it");
    let busy = spawned(locks.lock("send:try").try_acquire()).await?;
    assert!(busy.is_none());

    // scope with a Send body: the borrowing future is Send, and a task
    // that owns the guard can run it.
    let inner = locks.clone();
    let depth = send(guard.scope(async move {
        let nested = inner.lock("send:try").acquire().await?;
        nested.release().await?;
        Ok::<_, LockError>(2)
    }))
    .await??;
    assert_eq!(depth, 2);
    let inner = locks.clone();
    let depth = spawned(async move {
        let out = guard
            .scope(async move {
                let nested = inner.lock("send:try").acquire().await?;
                nested.release().await?;
                Ok::<_, LockError>(2)
            })
            .await;
        guard.release().await?;
        out?
    })
    .await?;
    assert_eq!(depth, 2);

    // campaign, and the Leadership it yields, across tasks.
    let election = locks.election("send:leader").wait(Duration::from_secs(5));
    let leadership = spawned(election.campaign()).await?;
    spawned(async move { leadership.resign().await }).await?;

    // health and shutdown borrow the client: Send as they are, and
    // spawnable by a task that owns a clone.
    let health = send(locks.health()).await;
    assert!(health.is_ready(), "{health:?}");
    let owned = locks.clone();
    let health = spawned(async move { owned.health().await }).await;
    assert_eq!(health.held, 0);
    send(locks.shutdown()).await?;
    let owned = locks.clone();
    spawned(async move { owned.shutdown().await }).await?;
    assert!(locks.health().await.shut_down);
    Ok(())
}
