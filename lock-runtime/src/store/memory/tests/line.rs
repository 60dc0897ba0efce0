//! A plain lock's line (acquire.lua, line.lua): a waiter for a lock another
//! holds gets in line, a release names the first in line (so that only its
//! client wakes a waiter), whoever asks first while the lock is free takes
//! it until the first waiter was passed over `PASSES` times in a row, and a
//! waiter that gives up leaves the line, naming the next.

use std::time::Duration;

use redis::PushKind;

use super::{Inbox, acquire, keys, release, run, try_acquire};
use crate::base::keys::LockKeys;
use crate::store::memory::{MemoryServer, MemorySubscriber};
use crate::store::scripts::{Giving, Quarantine, Stored, calls};

const LEASE: Duration = Duration::from_secs(30);

/// `PASSES` in line.lua.
const PASSES: usize = 4;

/// An owner id of `client` in the runtime's form.
fn owner(client: &str, scope: u32) -> String {
    format!("test@host:1/{client}:{scope}")
}

/// One attempt of `owner`, which waits: `[1, fence, count]` when it takes
/// the lock, `[0, ms, quarantined]` when it is told to wait that long.
async fn attempt(server: &MemoryServer, lock: &LockKeys, owner: &str) -> Vec<i64> {
    try_acquire(server, lock, owner, LEASE, LEASE, &Quarantine::none())
        .await
        .expect("acquire")
}

fn line(server: &MemoryServer, lock: &LockKeys) -> Vec<String> {
    match server.command(&["ZRANGE", &lock.queue(), "0", "-1"]) {
        redis::Value::Array(items) => items
            .iter()
            .map(|item| match item {
                redis::Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                other => panic!("not a member: {other:?}"),
            })
            .collect(),
        other => panic!("not a list: {other:?}"),
    }
}

/// The channel of `owner`'s client for `lock`: a release that names one
/// of its waiters goes there (see `wake` in line.lua).
fn inbox_of(lock: &LockKeys, owner: &str) -> String {
    let client = owner.rsplit_once(':').expect("an owner id").0;
    format!("{}:{client}", lock.channel())
}

/// The payload of the last message on the lock's channel or an inbox,
/// which must be the inbox of the waiter it names.
fn last_named(lock: &LockKeys, inbox: &Inbox) -> String {
    let messages = inbox.messages();
    let (kind, channel, payload) = messages.last().expect("a message").clone();
    assert_eq!(kind, PushKind::Message);
    assert_eq!(
        channel,
        inbox_of(lock, &payload),
        "sent to its client alone"
    );
    payload
}

/// A lock `name` that `a` holds while `b` and then `c` wait, and what its
/// channel received (while the subscriber lives).
struct HeldAndWaited {
    server: MemoryServer,
    lock: LockKeys,
    inbox: Inbox,
    _subscriber: MemorySubscriber,
    owners: [String; 3],
}

async fn held_and_waited(name: &str) -> HeldAndWaited {
    let server = MemoryServer::new();
    let lock = keys(name);
    let inbox = Inbox::default();
    let subscriber = server.subscriber(inbox.sink());
    let owners = [owner("a", 1), owner("b", 1), owner("c", 1)];
    let inboxes = owners.each_ref().map(|owner| inbox_of(&lock, owner));
    let [a, b, c] = inboxes.each_ref().map(String::as_str);
    subscriber.subscribe(&[&lock.channel(), a, b, c]).unwrap();
    acquire(&server, &lock, &owners[0], LEASE).await;
    assert_eq!(attempt(&server, &lock, &owners[1]).await[0], 0);
    assert_eq!(attempt(&server, &lock, &owners[2]).await[0], 0);
    HeldAndWaited {
        server,
        lock,
        inbox,
        _subscriber: subscriber,
        owners,
    }
}

#[tokio::test]
async fn a_release_names_the_first_waiter_in_line() {
    let held = held_and_waited("named").await;
    let (server, lock, inbox) = (&held.server, &held.lock, &held.inbox);
    let [a, b, c] = &held.owners;
    // Trying again keeps a waiter's place.
    assert_eq!(attempt(server, lock, b).await[0], 0);
    assert_eq!(line(server, lock), [b.as_str(), c.as_str()]);

    release(server, lock, a, false).await;
    assert_eq!(inbox.messages().len(), 1);
    assert_eq!(last_named(lock, inbox), *b);

    // The one named takes it: its place is over, and the lock's release
    // names the next, who still waits.
    assert_eq!(attempt(server, lock, b).await[0], 1);
    assert_eq!(line(server, lock), [c.as_str()]);
    release(server, lock, b, false).await;
    assert_eq!(last_named(lock, inbox), *c);
    assert_eq!(attempt(server, lock, c).await[0], 1);
    assert!(line(server, lock).is_empty());
    // Nobody waits: its release is not announced.
    release(server, lock, c, false).await;
    assert_eq!(inbox.messages().len(), 2);
}

#[tokio::test]
async fn a_waiter_passed_over_too_often_has_the_lock_kept_for_it() {
    let server = MemoryServer::new();
    let lock = keys("passed");
    let waiter = owner("w", 1);
    let mut scope = 0;
    let mut other = || {
        scope += 1;
        owner("o", scope)
    };

    let first = other();
    acquire(&server, &lock, &first, LEASE).await;
    assert_eq!(attempt(&server, &lock, &waiter).await[0], 0);
    release(&server, &lock, &first, false).await;
    // Others asking while it is free take it past the waiter, up to PASSES
    // times in a row.
    for _ in 0..PASSES {
        let next = other();
        assert_eq!(attempt(&server, &lock, &next).await[0], 1, "taken past");
        release(&server, &lock, &next, false).await;
    }
    let turned_away = other();
    let refused = attempt(&server, &lock, &turned_away).await;
    assert_eq!(refused[0], 0, "kept for the waiter");
    assert!(refused[1] > 0 && refused[1] <= LEASE.as_millis() as i64);
    // Not by a try-lock of another client either. Another waiter of the
    // waiter's client may take it (a release naming the waiter wakes one of
    // its client's waiters), and then the waiter itself.
    let refused = try_acquire(
        &server,
        &lock,
        &other(),
        LEASE,
        Duration::ZERO,
        &Quarantine::none(),
    )
    .await
    .expect("try");
    assert_eq!(refused[0], 0);
    let sibling = owner("w", 2);
    assert_eq!(attempt(&server, &lock, &sibling).await[0], 1);
    release(&server, &lock, &sibling, false).await;
    assert_eq!(attempt(&server, &lock, &waiter).await[0], 1);
    // The one turned away waits in line behind it.
    assert_eq!(line(&server, &lock), [turned_away.as_str()]);
    release(&server, &lock, &waiter, false).await;
    assert_eq!(attempt(&server, &lock, &turned_away).await[0], 1);
    assert!(line(&server, &lock).is_empty());
}

#[tokio::test]
async fn a_waiter_that_gives_up_leaves_the_line_and_names_the_next() {
    let held = held_and_waited("left").await;
    let (server, lock, inbox) = (&held.server, &held.lock, &held.inbox);
    let [a, b, c] = &held.owners;
    // A waiter that leaves while the lock is held wakes nobody.
    let leave = |who: &str| calls::turn_leave(std::slice::from_ref(lock), who);
    run::<i64>(server, &leave(c)).await.expect("leave");
    assert!(inbox.messages().is_empty());
    assert_eq!(line(server, lock), [b.as_str()]);
    assert_eq!(attempt(server, lock, c).await[0], 0);

    // The release names b; b gives up instead of taking it: c is named.
    release(server, lock, a, false).await;
    assert_eq!(last_named(lock, inbox), *b);
    run::<i64>(server, &leave(b)).await.expect("leave");
    assert_eq!(last_named(lock, inbox), *c);
    assert_eq!(line(server, lock), [c.as_str()]);
    assert_eq!(attempt(server, lock, c).await[0], 1);
}

#[tokio::test]
async fn the_count_of_passes_lasts_as_long_as_the_line() {
    let server = MemoryServer::new();
    let lock = keys("passes-last");
    let waiter = owner("w", 1);
    let mark = Duration::from_millis(1_000);
    let wait = |who: String| {
        let (server, lock) = (&server, &lock);
        async move {
            try_acquire(server, lock, &who, LEASE, mark, &Quarantine::none())
                .await
                .expect("acquire")
        }
    };
    let passed = format!("{}:queue:passed", lock.lock);
    let pttl = |key: &str| -> i64 {
        match server.command(&["PTTL", key]) {
            redis::Value::Int(ms) => ms,
            other => panic!("not a ttl: {other:?}"),
        }
    };

    let holder = owner("o", 1);
    acquire(&server, &lock, &holder, LEASE).await;
    assert_eq!(wait(waiter.clone()).await[0], 0);
    release(&server, &lock, &holder, false).await;
    let next = owner("o", 2);
    assert_eq!(attempt(&server, &lock, &next).await[0], 1, "taken past");
    // The holder keeps it longer than the waiter's place would last on its
    // own; the waiter keeps its place by trying, and the count with it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(wait(waiter.clone()).await[0], 0);
    assert!(pttl(&passed) > 900, "{} ms left", pttl(&passed));
}

#[tokio::test]
async fn a_first_waiter_gone_does_not_lift_the_bound_for_the_next() {
    let server = MemoryServer::new();
    let lock = keys("gone-first");
    let (gone, next) = (owner("g", 1), owner("n", 1));
    let holder = owner("o", 1);
    acquire(&server, &lock, &holder, LEASE).await;
    let short = Duration::from_millis(50);
    let tried = try_acquire(&server, &lock, &gone, LEASE, short, &Quarantine::none()).await;
    assert_eq!(tried.expect("acquire")[0], 0);
    assert_eq!(attempt(&server, &lock, &next).await[0], 0);
    // The first waiter stops trying (its process died): its place lapses.
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Releases that name nobody (a client with waiters of its own) leave
    // the line as it is.
    let release_announced = |who: String| {
        let call = calls::release(
            std::slice::from_ref(&lock),
            &Stored::Hash,
            &who,
            Giving {
                announce: true,
                ..Giving::ONE
            },
        );
        let server = &server;
        async move { run::<Vec<i64>>(server, &call).await.expect("release") }
    };
    release_announced(holder).await;
    for scope in 2..2 + PASSES as u32 {
        let other = owner("o", scope);
        assert_eq!(attempt(&server, &lock, &other).await[0], 1, "taken past");
        release_announced(other).await;
    }
    let refused = attempt(&server, &lock, &owner("o", 99)).await;
    assert_eq!(refused[0], 0, "kept for the live waiter");
    assert_eq!(
        line(&server, &lock)[0],
        next,
        "the lapsed one left the line"
    );
}
