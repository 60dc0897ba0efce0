//! Exclusive locks: acquire and release, re-entry and fencing tokens,
//! several locks at once, and expiry.

use std::time::Duration;

use redis::Value;

use super::{acquire, bulk, int, keys, release, run};
use crate::store::memory::MemoryServer;
use crate::store::scripts::calls;

#[tokio::test]
async fn fence_tokens_grow_and_reentry_counts() {
    let server = MemoryServer::new();
    let lock = keys("order:1");
    let lease = Duration::from_millis(30_000);
    let first = acquire(&server, &lock, "a:1", lease).await;
    assert_eq!(first[0], 1);
    let fence = first[1];
    // A new counter starts at the server clock in microseconds.
    assert!(fence > 1_600_000_000_000_000, "{fence}");
    assert_eq!(first[2], 1);

    assert_eq!(acquire(&server, &lock, "a:1", lease).await, [1, fence, 2]);
    assert_eq!(release(&server, &lock, "a:1", false).await, [1]);
    assert_eq!(release(&server, &lock, "a:1", false).await, [0]);
    assert_eq!(release(&server, &lock, "a:1", false).await, [-1]);

    // Tokens grow with the server clock (fence.lua's next_fence).
    let next = acquire(&server, &lock, "b:1", lease).await;
    assert_eq!((next[0], next[2]), (1, 1));
    assert!(next[1] > fence, "{next:?} after {fence}");
    // Another lock in the same slot draws from the same counter.
    let held = server.command(&["HGETALL", &lock.lock]);
    assert_eq!(
        held,
        Value::Array(vec![
            bulk("count"),
            bulk("1"),
            bulk("fence"),
            bulk(&next[1].to_string()),
            bulk("owner"),
            bulk("b:1"),
        ])
    );
    assert_eq!(
        server.command(&["GET", &lock.fence]),
        bulk(&next[1].to_string())
    );
}

#[tokio::test]
async fn a_busy_lock_reports_the_holders_lease_and_only_the_owner_releases() {
    let server = MemoryServer::new();
    let lock = keys("busy");
    let lease = Duration::from_millis(30_000);
    assert_eq!(acquire(&server, &lock, "a:1", lease).await[0], 1);
    let busy = acquire(&server, &lock, "b:1", lease).await;
    assert_eq!(busy[0], 0);
    assert!((29_000..=30_000).contains(&busy[1]), "{busy:?}");
    assert_eq!(release(&server, &lock, "b:1", false).await, [-1]);
    assert_eq!(int(&server.command(&["EXISTS", &lock.lock])), 1);

    // A holder with no expiry makes the reply -1.
    server.command(&["PERSIST", &lock.lock]);
    assert_eq!(acquire(&server, &lock, "b:1", lease).await, [0, -1, 0]);
}

#[tokio::test]
async fn several_locks_are_taken_all_or_none() {
    let server = MemoryServer::new();
    let (one, two) = (keys("multi:1"), keys("multi:2"));
    let lease = Duration::from_millis(30_000);
    assert_eq!(acquire(&server, &two, "b:1", lease).await[0], 1);
    let both = calls::acquire(
        &[one.clone(), two.clone()],
        calls::Asker::fresh("a:1"),
        lease,
        Duration::ZERO,
        false,
    );
    let reply: Vec<i64> = run(&server, &both).await.unwrap();
    assert_eq!(reply[0], 0);
    assert_eq!(
        int(&server.command(&["EXISTS", &one.lock])),
        0,
        "none taken"
    );
    release(&server, &two, "b:1", false).await;
    let reply: Vec<i64> = run(&server, &both).await.unwrap();
    assert_eq!(reply.len(), 5);
    assert_eq!(reply[0], 1);
}

#[tokio::test]
async fn locks_expire_after_their_lease() {
    let server = MemoryServer::new();
    let lock = keys("expiring");
    let lease = Duration::from_millis(50);
    let first = acquire(&server, &lock, "a:1", lease).await;
    let busy = acquire(&server, &lock, "b:1", lease).await;
    assert_eq!(busy[0], 0);
    assert!(busy[1] <= 50, "{busy:?}");
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert_eq!(int(&server.command(&["PTTL", &lock.lock])), -2);
    assert_eq!(int(&server.command(&["EXISTS", &lock.lock])), 0);
    let second = acquire(&server, &lock, "b:1", lease).await;
    assert_eq!((second[0], second[2]), (1, 1));
    assert!(second[1] > first[1], "{second:?} after {first:?}");
    assert_eq!(release(&server, &lock, "a:1", false).await, [-1]);
}

#[tokio::test(start_paused = true)]
async fn leases_run_in_real_time_even_when_tokio_time_is_paused() {
    let server = MemoryServer::new();
    let lock = keys("paused");
    let lease = Duration::from_millis(10_000);
    acquire(&server, &lock, "a:1", lease).await;
    tokio::time::sleep(Duration::from_secs(3600)).await; // Skipped at once.
    assert_eq!(acquire(&server, &lock, "b:1", lease).await[0], 0);
}
