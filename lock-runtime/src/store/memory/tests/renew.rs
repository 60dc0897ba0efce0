//! Renewals: lock hashes and permits, lost ones, and leases never shortened.

use std::time::Duration;

use super::{acquire, acquire_permit, int, invocation, keys, real_redis, run};
use crate::base::kind::Kind;
use crate::store::memory::MemoryServer;
use crate::store::scripts::{Giving, Renewing, Stored, calls};

#[tokio::test]
async fn a_renewal_arriving_after_a_release_does_not_stretch_the_minimum_hold() {
    let server = MemoryServer::new();
    let lock = keys("renew:kept");
    acquire(&server, &lock, "a:1", Duration::from_millis(30_000)).await;
    let keep = Giving {
        all: true,
        keep: Duration::from_millis(500),
        announce: false,
        retire: Duration::ZERO,
    };
    let left: Vec<i64> = run(
        &server,
        &calls::release(std::slice::from_ref(&lock), &Stored::Hash, "a:1", keep),
    )
    .await
    .unwrap();
    assert_eq!(left, [0]);
    // Still taken, for the minimum only.
    let ttl = int(&server.command(&["PTTL", &lock.lock]));
    assert!((1..=500).contains(&ttl), "{ttl}");
    // A renewal sent before the release, arriving after it.
    let late = Renewing {
        key: &lock.lock,
        stored: &Stored::Hash,
        owner: "a:1",
        lease: Duration::from_millis(30_000),
    };
    let renewed: Vec<i64> = run(&server, &calls::renew(&[late])).await.unwrap();
    assert_eq!(renewed, [0], "no longer its owner's to renew");
    assert!(int(&server.command(&["PTTL", &lock.lock])) <= 500);
}

#[tokio::test]
async fn renew_extends_held_locks_and_reports_lost_ones() {
    let server = MemoryServer::new();
    let (held, lost, clobbered) = (keys("renew:1"), keys("renew:2"), keys("renew:3"));
    let short = Duration::from_millis(1_000);
    acquire(&server, &held, "a:1", short).await;
    acquire(&server, &lost, "b:1", short).await;
    acquire(&server, &clobbered, "a:1", short).await;
    // Overwritten with another type: its renewal fails alone (redis.pcall).
    server.command(&["SET", &clobbered.lock, "x"]);
    let renewing = |key| Renewing {
        key,
        stored: &Stored::Hash,
        owner: "a:1",
        lease: Duration::from_millis(60_000),
    };
    let renewed: Vec<i64> = run(
        &server,
        &calls::renew(&[
            renewing(&held.lock),
            renewing(&lost.lock),
            renewing(&clobbered.lock),
        ]),
    )
    .await
    .unwrap();
    assert_eq!(renewed, [1, 0, 0]);
    let ttl = int(&server.command(&["PTTL", &held.lock]));
    assert!((59_000..=60_000).contains(&ttl), "{ttl}");
    assert!(int(&server.command(&["PTTL", &lost.lock])) <= 1_000);
}

#[tokio::test]
async fn renew_extends_permits_unless_their_lease_ran_out() {
    let server = MemoryServer::new();
    let lock = keys("renew:sem");
    acquire_permit(&server, &lock, "a:1", Duration::from_millis(60), 2).await;
    let stored = Stored::for_kind(Kind::Permits(2.into()), &lock);
    let renew = |owner: &'static str| {
        let call = calls::renew(&[Renewing {
            key: &lock.lock,
            stored: &stored,
            owner,
            lease: Duration::from_millis(30_000),
        }]);
        let server = server.clone();
        async move {
            let renewed: Vec<i64> = run(&server, &call).await.unwrap();
            renewed
        }
    };
    assert_eq!(renew("a:1").await, [1]);
    assert!(int(&server.command(&["PTTL", &lock.holders()])) > 29_000);
    assert_eq!(renew("b:1").await, [0]);
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert_eq!(renew("a:1").await, [1], "renewed to 30 s before");
}

/// A renewal with a shorter lease than the one Redis holds (a nested
/// acquisition lengthened it while the renewal was on its way) leaves the
/// longer one, for a lock hash and for a permit.
async fn renewal_keeps_the_longer_lease<C: redis::aio::ConnectionLike + Clone>(conn: &mut C) {
    let (lock, sem) = (keys("renew:longer"), keys("renew:longer-sem"));
    let lease = Duration::from_millis(30_000);
    let taken: Vec<i64> = invocation(&calls::acquire(
        std::slice::from_ref(&lock),
        calls::Asker::fresh("a:1"),
        lease,
        Duration::ZERO,
        true,
    ))
    .invoke_async(conn)
    .await
    .unwrap();
    assert_eq!(taken[0], 1);
    let permit: Vec<i64> = invocation(&calls::permit_acquire(
        &sem,
        calls::Asker::fresh("a:1"),
        lease,
        2,
    ))
    .invoke_async(conn)
    .await
    .unwrap();
    assert_eq!(permit[0], 1);
    let shorter = Duration::from_millis(600);
    let place = Stored::for_kind(Kind::Permits(2.into()), &sem);
    let renewed: Vec<i64> = invocation(&calls::renew(&[
        Renewing {
            key: &lock.lock,
            stored: &Stored::Hash,
            owner: "a:1",
            lease: shorter,
        },
        Renewing {
            key: &sem.lock,
            stored: &place,
            owner: "a:1",
            lease: shorter,
        },
    ]))
    .invoke_async(conn)
    .await
    .unwrap();
    assert_eq!(renewed, [1, 1]);
    for key in [&lock.lock, &sem.lock, &sem.holders()] {
        let ttl: i64 = redis::cmd("PTTL").arg(key).query_async(conn).await.unwrap();
        assert!(ttl > 29_000, "{key}: {ttl} ms left after a 600 ms renewal");
    }
    let expiry: f64 = redis::cmd("ZSCORE")
        .arg(&sem.lock)
        .arg("a:1")
        .query_async(conn)
        .await
        .unwrap();
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await.unwrap();
    let now = (secs * 1000 + micros / 1000) as f64;
    assert!(expiry - now > 29_000.0, "the permit's lease was shortened");
}

#[tokio::test]
async fn a_renewal_never_shortens_a_lease() {
    renewal_keeps_the_longer_lease(&mut MemoryServer::new()).await;
    if let Some((_real, mut conn)) = real_redis().await {
        renewal_keeps_the_longer_lease(&mut conn).await;
    }
}
