//! Give-backs that arrive late: what an acquire call granted is given back
//! (a Redlock attempt without a quorum, a grant replicas did not confirm,
//! one whose caller was gone), and the give-back can be held up, on a
//! connection that went dead or by a server that stalled, until after the
//! grant lapsed and the same owner id was granted the lock again. It names
//! the tokens it gives back, and must leave that later grant to its holder:
//! freed, the lock would be taken by a second holder while the first still
//! counts on it. Run on this server and, when one is at hand, on a real
//! Redis.

use std::slice;

use redis::Value;
use redis::aio::ConnectionLike;

use super::retired::acquire;
use super::{call, int, keys, real_redis};
use crate::base::kind::Kind;
use crate::store::memory::MemoryServer;
use crate::store::scripts::{Acquire, Giving, Stored, Taken, calls};

/// What an acquire script's reply granted (it must grant).
fn taken(server: &str, reply: &Value) -> Vec<Taken> {
    let Value::Array(items) = reply else {
        panic!("{server}: not an acquire reply: {reply:?}");
    };
    assert_eq!(int(&items[0]), 1, "{server}: not granted: {reply:?}");
    items[1..]
        .chunks_exact(2)
        .map(|pair| Taken {
            fence: int(&pair[0]) as u64,
            count: int(&pair[1]) as u64,
        })
        .collect()
}

/// The one count a release script answers: levels left, or -1 for not
/// held (that way).
fn left(reply: &Value) -> i64 {
    match reply {
        Value::Array(items) => int(&items[0]),
        other => panic!("not a release reply: {other:?}"),
    }
}

async fn late_give_backs_leave_later_grants(conn: &mut impl ConnectionLike, server: &str) {
    let kinds = [
        (Kind::Exclusive, "given-back:plain"),
        (Kind::Permits(2.into()), "given-back:sem"),
        (Kind::Read, "given-back:rw"),
        (Kind::Fair, "given-back:fair"),
    ];
    for (kind, lock) in kinds {
        let named = keys(lock);
        let stored = Stored::for_kind(kind, &named);
        let take = acquire(kind, lock, "owner");
        let acquired = Acquire::new(take.clone(), 1, stored.clone(), Giving::ONE);
        let undo = acquired.undo();
        let release = calls::release(slice::from_ref(&named), &stored, "owner", Giving::ONE);
        let context = format!("{server}: {kind:?}");

        let first = taken(server, &call(conn, &take).await.unwrap());
        // The first grant lapses (given back here, as its lease would end),
        // and the same owner id is granted the lock again.
        call(conn, &release).await.unwrap();
        let again = taken(server, &call(conn, &take).await.unwrap());
        assert!(again[0].fence > first[0].fence, "{context}");

        // The first grant's give-back arrives only now: not its to free.
        let late = call(conn, &undo.call(&first)).await.unwrap();
        assert_eq!(left(&late), -1, "{context}: {late:?}");
        let held = call(conn, &release).await.unwrap();
        assert_eq!(left(&held), 0, "{context}: the later grant was freed");

        // A give-back of a re-entry counts down the hold it entered, whose
        // token it shares.
        let outer = taken(server, &call(conn, &take).await.unwrap());
        let inner = taken(server, &call(conn, &take).await.unwrap());
        assert_eq!(
            (inner[0].fence, inner[0].count),
            (outer[0].fence, 2),
            "{context}"
        );
        let one_down = call(conn, &undo.call(&inner)).await.unwrap();
        assert_eq!(left(&one_down), 1, "{context}: {one_down:?}");
        let last = call(conn, &undo.call(&outer)).await.unwrap();
        assert_eq!(left(&last), 0, "{context}: {last:?}");
    }
}

on_both!(
    a_late_give_back_leaves_a_later_grant_to_the_same_owner_id,
    late_give_backs_leave_later_grants
);
