//! Places in a sorted set: semaphore permits, and the read side of
//! read-write locks taking turns with a writer.

use std::slice;
use std::time::Duration;

use redis::Value;

use super::{acquire_permit, bulk, int, keys, run, try_acquire};
use crate::base::keys::LockKeys;
use crate::base::kind::Kind;
use crate::store::memory::MemoryServer;
use crate::store::scripts::{Giving, Quarantine, Stored, calls};

/// Gives back one level of the place `owner` holds in `lock`, a lock of
/// `kind` (a semaphore's permit, or a read lock).
async fn release_place(
    server: &MemoryServer,
    kind: Kind,
    lock: &LockKeys,
    owner: &str,
) -> Vec<i64> {
    let stored = Stored::for_kind(kind, lock);
    run(
        server,
        &calls::release(slice::from_ref(lock), &stored, owner, Giving::ONE),
    )
    .await
    .expect("release a place")
}

/// Takes (or re-enters) the read side of `lock` for `owner`; a reader that
/// has to wait claims the next turn for readers for `mark`.
async fn acquire_read(
    server: &MemoryServer,
    lock: &LockKeys,
    owner: &str,
    lease: Duration,
    mark: Duration,
) -> Vec<i64> {
    run(server, &calls::read_acquire(lock, owner, lease, mark))
        .await
        .expect("acquire to read")
}

#[tokio::test]
async fn semaphore_permits_are_limited_and_expire() {
    let server = MemoryServer::new();
    let sem = keys("sem");
    let (lease, short) = (Duration::from_millis(30_000), Duration::from_millis(50));
    let semaphore = Kind::Permits(2);
    let a = acquire_permit(&server, &sem, "a:1", lease, 2).await;
    let b = acquire_permit(&server, &sem, "b:1", lease, 2).await;
    assert_eq!((a[0], a[2], b[0]), (1, 1, 1));
    assert!(b[1] > a[1], "{b:?} after {a:?}");
    assert_eq!(
        acquire_permit(&server, &sem, "a:1", lease, 2).await,
        [1, a[1], 2]
    );
    let busy = acquire_permit(&server, &sem, "c:1", lease, 2).await;
    assert_eq!(busy[0], 0);
    assert!((29_000..=30_000).contains(&busy[1]), "{busy:?}");

    assert_eq!(release_place(&server, semaphore, &sem, "a:1").await, [1]);
    assert_eq!(release_place(&server, semaphore, &sem, "a:1").await, [0]);
    assert_eq!(release_place(&server, semaphore, &sem, "a:1").await, [-1]);
    assert_eq!(acquire_permit(&server, &sem, "c:1", short, 2).await[0], 1);
    assert_eq!(int(&server.command(&["ZCARD", &sem.lock])), 2);

    // c's short lease runs out: its place is taken back for d.
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert_eq!(acquire_permit(&server, &sem, "d:1", lease, 2).await[0], 1);
    assert_eq!(
        server.command(&["ZRANGE", &sem.lock, "0", "-1"]),
        Value::Array(vec![bulk("b:1"), bulk("d:1")])
    );
    let Value::Array(holders) = server.command(&["HGETALL", &sem.holders()]) else {
        panic!("holders is a hash");
    };
    assert!(!holders.contains(&bulk("c:c:1")), "{holders:?}");
    assert_eq!(holders.len(), 8); // c: and f: for b and d
}

#[tokio::test]
async fn readers_share_and_take_turns_with_a_writer() {
    let server = MemoryServer::new();
    let lock = keys("rw");
    let (lease, mark) = (Duration::from_millis(30_000), Duration::from_millis(5_000));
    assert_eq!(acquire_read(&server, &lock, "r:1", lease, mark).await[0], 1);
    assert_eq!(acquire_read(&server, &lock, "r:2", lease, mark).await[0], 1);
    // A writer waits for the readers and marks itself waiting...
    let writer = try_acquire(&server, &lock, "w:1", lease, mark, &Quarantine::none())
        .await
        .unwrap();
    assert_eq!(writer[0], 0);
    assert_eq!(
        server.command(&["GET", &lock.writer_waiting()]),
        bulk("w:1")
    );
    // ...which holds back new readers but not those already in.
    assert_eq!(acquire_read(&server, &lock, "r:3", lease, mark).await[0], 0);
    assert_eq!(acquire_read(&server, &lock, "r:1", lease, mark).await[0], 1);

    let readers = keys("rw");
    for owner in ["r:1", "r:1", "r:2"] {
        let left = release_place(&server, Kind::Read, &readers, owner).await;
        assert!(left[0] >= 0);
    }
    let writer = try_acquire(&server, &lock, "w:1", lease, mark, &Quarantine::none())
        .await
        .unwrap();
    assert_eq!(writer[0], 1);
    assert_eq!(int(&server.command(&["EXISTS", &lock.writer_waiting()])), 0);
}
