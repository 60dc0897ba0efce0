//! Owner ids a give-back retired: an acquisition whose answer was lost is
//! given back under an owner id its caller never uses again, and the
//! acquire call may reach Redis only after that give-back (see `gone_key`
//! in `prelude.lua`). Every script that grants afresh must then refuse it,
//! or the lock stays taken by nobody for its lease. Run on this server and,
//! when one is at hand, on a real Redis.

use std::slice;
use std::time::Duration;

use redis::Value;
use redis::aio::ConnectionLike;

use super::{call, int, keys, real_redis};
use crate::base::kind::Kind;
use crate::store::memory::MemoryServer;
use crate::store::scripts::{Call, Giving, Stored, calls};

const LEASE: Duration = Duration::from_secs(60);
const RETIRE: Duration = Duration::from_secs(30);

/// The first item of an acquire script's reply: 1 granted, 0 busy.
fn granted(reply: &Value) -> bool {
    match reply {
        Value::Array(items) => int(&items[0]) == 1,
        other => panic!("not an acquire reply: {other:?}"),
    }
}

/// The give-back of everything `owner` may hold of `lock`, retiring it.
fn give_back(kind: Kind, lock: &str, owner: &str) -> Call {
    let lock = keys(lock);
    let giving = Giving {
        retire: RETIRE,
        ..Giving::ABANDONED
    };
    calls::release(
        slice::from_ref(&lock),
        &Stored::for_kind(kind, &lock),
        owner,
        giving,
    )
}

/// The fresh acquire call of `owner` for one lock of each kind.
pub(super) fn acquire(kind: Kind, lock: &str, owner: &str) -> Call {
    let lock = keys(lock);
    let asker = calls::Asker::fresh(owner);
    match kind {
        Kind::Exclusive => {
            calls::acquire(slice::from_ref(&lock), asker, LEASE, Duration::ZERO, true)
        }
        Kind::Permits(permits) => calls::permit_acquire(&lock, asker, LEASE, permits),
        Kind::Read => calls::read_acquire(&lock, asker, LEASE, Duration::ZERO),
        Kind::Fair => calls::fair_acquire(&lock, asker, LEASE, Duration::from_secs(3), true),
    }
}

/// For each kind: the give-back runs first, then its acquire call arrives
/// late and is refused; another owner id still takes the lock at once, so
/// nothing else is held back.
async fn late_acquires_are_refused(conn: &mut impl ConnectionLike, server: &str) {
    let kinds = [
        (Kind::Exclusive, "retired:plain"),
        (Kind::Permits(2.into()), "retired:sem"),
        (Kind::Read, "retired:rw"),
        (Kind::Fair, "retired:fair"),
    ];
    for (kind, lock) in kinds {
        call(conn, &give_back(kind, lock, "gone")).await.unwrap();
        let late = call(conn, &acquire(kind, lock, "gone")).await.unwrap();
        assert!(
            !granted(&late),
            "{server}: {kind:?}: a late acquire of a retired owner id was granted: {late:?}"
        );
        let other = call(conn, &acquire(kind, lock, "other")).await.unwrap();
        assert!(
            granted(&other),
            "{server}: {kind:?}: another owner id was held back: {other:?}"
        );
    }
    // A give-back without retiring (a plain release) refuses nothing.
    let lock = keys("retired:plain-release");
    let release = calls::release(slice::from_ref(&lock), &Stored::Hash, "kept", Giving::ALL);
    call(conn, &release).await.unwrap();
    let asked = call(
        conn,
        &acquire(Kind::Exclusive, "retired:plain-release", "kept"),
    )
    .await
    .unwrap();
    assert!(granted(&asked), "{server}: {asked:?}");
}

on_both!(
    a_retired_owner_id_is_refused_by_every_acquire_script,
    late_acquires_are_refused
);

/// A fair attempt whose answer was lost put its owner id in line behind
/// the holder; its give-back takes it out of the line (and the read side's
/// line), or it would hold up the waiters behind it until its place lapsed.
async fn a_retired_owner_id_leaves_the_line(conn: &mut impl ConnectionLike, server: &str) {
    for (kind, lock) in [
        (Kind::Fair, "retired:line"),
        (Kind::Read, "retired:read-line"),
    ] {
        let keys = keys(lock);
        let holder = call(conn, &acquire(Kind::Fair, lock, "holder"))
            .await
            .unwrap();
        assert!(granted(&holder), "{server}: {holder:?}");
        let queued = calls::fair_acquire(
            &keys,
            calls::Asker::fresh("gone"),
            LEASE,
            Duration::from_secs(3),
            true,
        );
        call(conn, &queued).await.unwrap();
        let in_line = || redis::cmd("ZSCORE").arg(keys.queue()).arg("gone").clone();
        let before: Option<f64> = in_line().query_async(conn).await.unwrap();
        assert!(before.is_some(), "{server}: the waiter is in line");
        call(conn, &give_back(kind, lock, "gone")).await.unwrap();
        let after: Option<f64> = in_line().query_async(conn).await.unwrap();
        assert_eq!(
            after, None,
            "{server}: {kind:?}: a retired owner id kept its place in line"
        );
    }
}

on_both!(
    a_retired_owner_id_leaves_the_line_of_fair_waiters,
    a_retired_owner_id_leaves_the_line
);

/// The first field of a hash, or `None`.
async fn hget(conn: &mut impl ConnectionLike, key: &str, field: &str) -> Option<String> {
    redis::cmd("HGET")
        .arg(key)
        .arg(field)
        .query_async(conn)
        .await
        .unwrap()
}

/// The members of a sorted set, lowest score first.
async fn members(conn: &mut impl ConnectionLike, key: &str) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query_async(conn)
        .await
        .unwrap()
}

/// A waiter whose handoff answer was lost retires its owner id; a handoff
/// that runs after that passes it over, for the next plain waiter or, when
/// none is left, a plain release.
async fn a_handoff_passes_over_retired_waiters(conn: &mut impl ConnectionLike, server: &str) {
    for (lock, next) in [
        ("retired:handoff", Some("next")),
        ("retired:handoff-none", None),
    ] {
        let keys = keys(lock);
        let held = call(conn, &acquire(Kind::Exclusive, lock, "holder"))
            .await
            .unwrap();
        assert!(granted(&held), "{server}: {held:?}");
        call(conn, &give_back(Kind::Exclusive, lock, "gone"))
            .await
            .unwrap();
        let mut offers = vec![calls::Next {
            owner: "gone",
            lease: LEASE,
            fair: false,
            joining: None,
        }];
        offers.extend(next.map(|owner| calls::Next {
            owner,
            lease: LEASE,
            fair: false,
            joining: None,
        }));
        let handoff = calls::handoff(&keys, "holder", Giving::ALL, &offers);
        call(conn, &handoff).await.unwrap();
        let owner = hget(conn, &keys.lock, "owner").await;
        assert_eq!(
            owner.as_deref(),
            next,
            "{server}: the lock went to {owner:?}"
        );
    }
}

on_both!(
    a_handoff_passes_over_a_retired_waiter,
    a_handoff_passes_over_retired_waiters
);

/// A release that hands a fair lock on first puts its client's waiters
/// that are not in line yet in line, in their order, each to stay as long
/// as it asks; the lock goes to the first in line, here the first of them
/// (nobody else waits). A retired owner id is not put in line.
async fn a_handoff_puts_new_waiters_in_line(conn: &mut impl ConnectionLike, server: &str) {
    let lock = "retired:joining";
    let keys = keys(lock);
    let holder = call(conn, &acquire(Kind::Fair, lock, "holder"))
        .await
        .unwrap();
    assert!(granted(&holder), "{server}: {holder:?}");
    call(conn, &give_back(Kind::Fair, lock, "gone"))
        .await
        .unwrap();
    let stay = Duration::from_millis(1500);
    let offers = ["gone", "first", "second"].map(|owner| calls::Next {
        owner,
        lease: LEASE,
        fair: true,
        joining: Some(stay),
    });
    let handoff = calls::handoff(&keys, "holder", Giving::ALL, &offers);
    call(conn, &handoff).await.unwrap();
    let owner = hget(conn, &keys.lock, "owner").await;
    assert_eq!(owner.as_deref(), Some("first"), "{server}");
    // Sent again (its answer lost): it says the lock went to the second
    // offer, and puts nobody in line again (not the new holder).
    let again = call(conn, &handoff).await.unwrap();
    match &again {
        Value::Array(items) => assert_eq!(int(&items[2]), 2, "{server}: {again:?}"),
        other => panic!("{server}: not a handoff reply: {other:?}"),
    }
    let line = members(conn, &keys.queue()).await;
    assert_eq!(line, ["second"], "{server}: the line after the handoff");
    let alive = members(conn, &keys.queue_alive()).await;
    assert_eq!(alive, ["second"], "{server}");
    for key in [keys.queue(), keys.queue_alive()] {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(conn)
            .await
            .unwrap();
        assert!(
            (1..=1500).contains(&ttl),
            "{server}: {key} lives {ttl} ms, for a stay of 1500 ms"
        );
    }
}

on_both!(
    a_handoff_puts_a_fair_lock_s_new_waiters_in_line,
    a_handoff_puts_new_waiters_in_line
);

/// A late waiting call of a retired owner id is refused before it leaves
/// the marks a waiter leaves: a writer's on the readers, a reader's on the
/// writer, a plain waiter's on the holder (which would hold others back or
/// announce releases nobody waits for).
async fn retired_waiters_leave_no_marks(conn: &mut impl ConnectionLike, server: &str) {
    let (wait, stay) = (Duration::from_secs(3), Duration::from_secs(3));
    // A writer waiting for a reader.
    let lock = keys("retired:marks-writer");
    let reader = calls::read_acquire(&lock, calls::Asker::fresh("reader"), LEASE, Duration::ZERO);
    assert!(granted(&call(conn, &reader).await.unwrap()), "{server}");
    call(
        conn,
        &give_back(Kind::Exclusive, "retired:marks-writer", "gone"),
    )
    .await
    .unwrap();
    let late = calls::acquire(
        slice::from_ref(&lock),
        calls::Asker::fresh("gone"),
        LEASE,
        wait,
        true,
    );
    assert!(!granted(&call(conn, &late).await.unwrap()), "{server}");
    let marker: Option<String> = redis::cmd("GET")
        .arg(lock.writer_waiting())
        .query_async(conn)
        .await
        .unwrap();
    assert_eq!(marker, None, "{server}: a retired writer held readers back");
    // A plain waiter and a reader waiting for a writer.
    let lock = keys("retired:marks-reader");
    let writer = acquire(Kind::Exclusive, "retired:marks-reader", "writer");
    assert!(granted(&call(conn, &writer).await.unwrap()), "{server}");
    call(
        conn,
        &give_back(Kind::Exclusive, "retired:marks-reader", "gone"),
    )
    .await
    .unwrap();
    call(conn, &give_back(Kind::Read, "retired:marks-reader", "gone"))
        .await
        .unwrap();
    let late = calls::acquire(
        slice::from_ref(&lock),
        calls::Asker::fresh("gone"),
        LEASE,
        wait,
        true,
    );
    assert!(!granted(&call(conn, &late).await.unwrap()), "{server}");
    let late = calls::read_acquire(&lock, calls::Asker::fresh("gone"), LEASE, stay);
    assert!(!granted(&call(conn, &late).await.unwrap()), "{server}");
    assert_eq!(
        hget(conn, &lock.lock, "w").await,
        None,
        "{server}: a retired waiter marked the holder"
    );
    let marker: Option<String> = redis::cmd("GET")
        .arg(lock.readers_waiting())
        .query_async(conn)
        .await
        .unwrap();
    assert_eq!(marker, None, "{server}: a retired reader held writers back");
}

on_both!(
    a_retired_waiter_leaves_no_marks,
    retired_waiters_leave_no_marks
);

#[tokio::test]
async fn the_retirement_lapses() {
    let mut memory = MemoryServer::new();
    let giving = Giving {
        retire: Duration::from_millis(50),
        ..Giving::ABANDONED
    };
    let lock = keys("retired:lapses");
    call(
        &mut memory,
        &calls::release(slice::from_ref(&lock), &Stored::Hash, "gone", giving),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(120)).await;
    let asked = call(
        &mut memory,
        &acquire(Kind::Exclusive, "retired:lapses", "gone"),
    )
    .await
    .unwrap();
    assert!(granted(&asked), "{asked:?}");
}
