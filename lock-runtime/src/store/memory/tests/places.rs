//! Places in a sorted set: semaphore permits (one or several per holder,
//! under the number of permits the semaphore records), and the read side
//! of read-write locks taking turns with a writer.

use std::slice;
use std::time::Duration;

use redis::Value;

use super::{Inbox, acquire_permit, bulk, int, keys, run, try_acquire};
use crate::base::keys::LockKeys;
use crate::base::kind::{Kind, Permits};
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
    run(
        server,
        &calls::read_acquire(lock, calls::Asker::fresh(owner), lease, mark),
    )
    .await
    .expect("acquire to read")
}

/// Takes (or re-enters) `take` of the `limit` permits of the semaphore
/// `lock` for `owner`.
async fn acquire_several(
    server: &MemoryServer,
    lock: &LockKeys,
    owner: &str,
    lease: Duration,
    limit: u32,
    take: u32,
) -> Vec<i64> {
    let permits = Permits { limit, take };
    run(
        server,
        &calls::permit_acquire(lock, calls::Asker::fresh(owner), lease, permits),
    )
    .await
    .expect("acquire permits")
}

/// The semaphore's recorded number of permits and the permits its
/// holders hold together, as its hash says (0 where a field is missing).
fn taken(server: &MemoryServer, lock: &LockKeys) -> (i64, i64) {
    let field = |name: &str| match server.command(&["HGET", &lock.holders(), name]) {
        Value::BulkString(text) => String::from_utf8(text).unwrap().parse().unwrap(),
        _ => 0,
    };
    (field("limit"), field("taken"))
}

#[tokio::test]
async fn semaphore_permits_are_limited_and_expire() {
    let server = MemoryServer::new();
    let sem = keys("sem");
    let (lease, short) = (Duration::from_millis(30_000), Duration::from_millis(50));
    let semaphore = Kind::Permits(2.into());
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
    // c:, f: and p: for b and d, the limit and the permits taken.
    assert_eq!(holders.len(), 16, "{holders:?}");
    assert_eq!(taken(&server, &sem), (2, 2));
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

#[tokio::test]
async fn several_permits_are_taken_all_or_none_and_given_back_together() {
    let server = MemoryServer::new();
    let sem = keys("sem:several");
    let lease = Duration::from_millis(30_000);
    let semaphore = Kind::Permits(Permits { limit: 5, take: 3 });
    let a = acquire_several(&server, &sem, "a:1", lease, 5, 3).await;
    assert_eq!((a[0], a[2]), (1, 1));
    assert_eq!(taken(&server, &sem), (5, 3));
    // 3 + 3 > 5: none of them.
    let busy = acquire_several(&server, &sem, "b:1", lease, 5, 3).await;
    assert_eq!(busy[0], 0);
    assert!((29_000..=30_000).contains(&busy[1]), "{busy:?}");
    assert_eq!(int(&server.command(&["ZCARD", &sem.lock])), 1);
    // 3 + 2 = 5: in.
    let b = acquire_several(&server, &sem, "b:1", lease, 5, 2).await;
    assert_eq!(b[0], 1);
    assert_eq!(taken(&server, &sem), (5, 5));
    assert_eq!(
        acquire_several(&server, &sem, "c:1", lease, 5, 1).await[0],
        0
    );

    // A's release gives its three permits back at once, one message each.
    let inbox = Inbox::default();
    let subscriber = server.subscriber(inbox.sink());
    subscriber.subscribe(&[&sem.channel()]).unwrap();
    assert_eq!(release_place(&server, semaphore, &sem, "a:1").await, [0]);
    assert_eq!(taken(&server, &sem), (5, 2));
    assert_eq!(inbox.messages().len(), 3, "{:?}", inbox.messages());
    for owner in ["c:1", "d:1", "e:1"] {
        assert_eq!(
            acquire_several(&server, &sem, owner, lease, 5, 1).await[0],
            1
        );
    }
    assert_eq!(
        acquire_several(&server, &sem, "f:1", lease, 5, 1).await[0],
        0
    );
    assert_eq!(taken(&server, &sem), (5, 5));

    // Every holder gone: the semaphore is gone, its number too.
    for owner in ["b:1", "c:1", "d:1", "e:1"] {
        assert_eq!(release_place(&server, semaphore, &sem, owner).await, [0]);
    }
    assert_eq!(
        int(&server.command(&["EXISTS", &sem.lock, &sem.holders()])),
        0
    );
}

#[tokio::test]
async fn a_re_entry_holds_what_the_outer_hold_does() {
    let server = MemoryServer::new();
    let sem = keys("sem:reentry");
    let lease = Duration::from_millis(30_000);
    let outer = acquire_several(&server, &sem, "a:1", lease, 4, 2).await;
    // As many or fewer: one more level, the same permits and token.
    assert_eq!(
        acquire_several(&server, &sem, "a:1", lease, 4, 2).await,
        [1, outer[1], 2]
    );
    assert_eq!(
        acquire_several(&server, &sem, "a:1", lease, 4, 1).await,
        [1, outer[1], 3]
    );
    assert_eq!(taken(&server, &sem), (4, 2));
    // More than it holds: refused, with both numbers, and nothing changes.
    assert_eq!(
        acquire_several(&server, &sem, "a:1", lease, 4, 3).await,
        [-2, 2, 3]
    );
    assert_eq!(
        server.command(&["HGET", &sem.holders(), "c:a:1"]),
        bulk("3")
    );
    let semaphore = Kind::Permits(Permits { limit: 4, take: 2 });
    for left in [2, 1, 0] {
        assert_eq!(release_place(&server, semaphore, &sem, "a:1").await, [left]);
    }
    assert_eq!(int(&server.command(&["EXISTS", &sem.holders()])), 0);
}

#[tokio::test]
async fn the_number_of_permits_is_recorded_while_the_semaphore_has_holders() {
    let server = MemoryServer::new();
    let sem = keys("sem:limit");
    let (lease, short) = (Duration::from_millis(30_000), Duration::from_millis(50));
    assert_eq!(
        acquire_several(&server, &sem, "a:1", short, 3, 1).await[0],
        1
    );
    // Another number is refused while a holder holds, naming both, even
    // for a re-entry, and even with permits to spare.
    assert_eq!(
        acquire_several(&server, &sem, "b:1", lease, 5, 1).await,
        [-1, 3, 5]
    );
    assert_eq!(
        acquire_several(&server, &sem, "a:1", lease, 2, 1).await,
        [-1, 3, 2]
    );
    assert_eq!(int(&server.command(&["ZCARD", &sem.lock])), 1);
    // Asking for none or more than there are: refused before anything.
    assert_eq!(
        acquire_several(&server, &sem, "b:1", lease, 3, 4).await,
        [-3, 3, 4]
    );
    assert_eq!(
        acquire_several(&server, &sem, "b:1", lease, 3, 0).await,
        [-3, 3, 0]
    );

    // The holder's lease runs out: the semaphore is forgotten, and the
    // next holder records its own number.
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert_eq!(
        acquire_several(&server, &sem, "b:1", lease, 5, 4).await[0],
        1
    );
    assert_eq!(taken(&server, &sem), (5, 4));
    assert_eq!(
        acquire_several(&server, &sem, "c:1", lease, 3, 1).await,
        [-1, 5, 3]
    );
    assert_eq!(
        acquire_several(&server, &sem, "c:1", lease, 5, 1).await[0],
        1
    );
    assert_eq!(
        acquire_several(&server, &sem, "d:1", lease, 5, 1).await[0],
        0
    );
}

#[tokio::test]
async fn expired_holders_give_their_permits_back() {
    let server = MemoryServer::new();
    let sem = keys("sem:expired");
    let (lease, short) = (Duration::from_millis(30_000), Duration::from_millis(50));
    assert_eq!(
        acquire_several(&server, &sem, "a:1", short, 4, 3).await[0],
        1
    );
    assert_eq!(
        acquire_several(&server, &sem, "b:1", lease, 4, 1).await[0],
        1
    );
    assert_eq!(
        acquire_several(&server, &sem, "c:1", lease, 4, 2).await[0],
        0
    );
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert_eq!(
        acquire_several(&server, &sem, "c:1", lease, 4, 3).await[0],
        1
    );
    assert_eq!(taken(&server, &sem), (4, 4));
    assert_eq!(
        server.command(&["HGET", &sem.holders(), "p:a:1"]),
        Value::Nil
    );
}

#[tokio::test]
async fn holders_without_a_count_of_permits_count_as_one_each() {
    // What a version that took one permit per holder left: members, counts
    // and tokens, but no permits per holder, number of permits or total.
    let server = MemoryServer::new();
    let sem = keys("sem:older");
    let (lease, far) = (Duration::from_millis(30_000), "99999999999999");
    for owner in ["a:1", "b:1"] {
        server.command(&["ZADD", &sem.lock, far, owner]);
        server.command(&["HSET", &sem.holders(), &format!("c:{owner}"), "1"]);
        server.command(&["HSET", &sem.holders(), &format!("f:{owner}"), "7"]);
    }
    assert_eq!(
        acquire_several(&server, &sem, "c:1", lease, 3, 2).await[0],
        0
    );
    assert_eq!(
        acquire_several(&server, &sem, "c:1", lease, 3, 1).await[0],
        1
    );
    assert_eq!(taken(&server, &sem), (3, 3));
    // An older holder re-enters its one permit, and gives it back.
    assert_eq!(
        acquire_several(&server, &sem, "a:1", lease, 3, 1).await,
        [1, 7, 2]
    );
    let semaphore = Kind::Permits(3.into());
    for left in [1, 0] {
        assert_eq!(release_place(&server, semaphore, &sem, "a:1").await, [left]);
    }
    assert_eq!(taken(&server, &sem), (3, 2));
    assert_eq!(
        acquire_several(&server, &sem, "d:1", lease, 3, 1).await[0],
        1
    );
}
