//! Pub/sub: releases announced on the lock's channel, PUBLISH and
//! SPUBLISH, and subscribers that send commands from their callback.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::{PushInfo, PushKind, Value};

use super::{Inbox, acquire, bulk, int, keys, release, run, try_acquire};
use crate::base::kind::Kind;
use crate::store::memory::MemoryServer;
use crate::store::scripts::{Giving, Quarantine, Stored, calls};

#[tokio::test]
async fn release_publishes_to_the_lock_channel() {
    let server = MemoryServer::new();
    let lock = keys("announced");
    let lease = Duration::from_millis(30_000);
    let inbox = Inbox::default();
    let subscriber = server.subscriber(inbox.sink());
    subscriber.subscribe(&[&lock.channel()]).unwrap();

    // Nobody waits: the release is not announced.
    acquire(&server, &lock, "a:1", lease).await;
    release(&server, &lock, "a:1", false).await;
    assert!(inbox.messages().is_empty(), "nobody waited");

    // A caller that will wait finds the lock taken, marks it and gets in
    // line: the release names it, so that only its client wakes a waiter.
    acquire(&server, &lock, "a:1", lease).await;
    acquire(&server, &lock, "a:1", lease).await;
    let busy = try_acquire(&server, &lock, "b:1", lease, lease, &Quarantine::none()).await;
    assert_eq!(busy.unwrap()[0], 0);
    release(&server, &lock, "a:1", false).await;
    assert!(inbox.messages().is_empty(), "still held once");
    release(&server, &lock, "a:1", false).await;
    assert_eq!(
        inbox.messages(),
        [(PushKind::Message, lock.channel(), "b:1".to_owned())]
    );
    assert_eq!(
        server.command(&["PUBSUB", "NUMSUB", &lock.channel()]),
        Value::Array(vec![bulk(&lock.channel()), Value::Int(1)])
    );

    subscriber.unsubscribe(&lock.channel()).unwrap();
    acquire(&server, &lock, "a:1", lease).await;
    release(&server, &lock, "a:1", false).await;
    assert_eq!(inbox.messages().len(), 1, "unsubscribed");
}

#[tokio::test]
async fn a_writer_that_held_readers_back_announces_its_release() {
    let server = MemoryServer::new();
    let lock = keys("turns");
    let lease = Duration::from_millis(30_000);
    let inbox = Inbox::default();
    let subscriber = server.subscriber(inbox.sink());
    subscriber.subscribe(&[&lock.channel()]).unwrap();
    let read = |owner: &'static str| {
        let call = calls::read_acquire(&lock, calls::Asker::fresh(owner), lease, lease);
        let server = server.clone();
        async move { run::<Vec<i64>>(&server, &call).await.unwrap() }
    };

    // A reader holds it; a writer waits and marks its turn, which holds a
    // second reader back (so that one does not mark the writer's hash).
    assert_eq!(read("r:1").await[0], 1);
    let writer = try_acquire(&server, &lock, "w:1", lease, lease, &Quarantine::none()).await;
    assert_eq!(writer.unwrap()[0], 0);
    assert_eq!(read("r:2").await[0], 0, "held back by the writer's mark");
    let place = Stored::for_kind(Kind::Read, &lock);
    let gone: Vec<i64> = run(
        &server,
        &calls::release(std::slice::from_ref(&lock), &place, "r:1", Giving::ALL),
    )
    .await
    .unwrap();
    assert_eq!(gone, [0]);
    let before = inbox.messages().len();

    // The writer gets its turn, and its release wakes the reader it held back.
    let writer = try_acquire(&server, &lock, "w:1", lease, lease, &Quarantine::none()).await;
    assert_eq!(writer.unwrap()[0], 1);
    release(&server, &lock, "w:1", false).await;
    assert_eq!(
        inbox.messages().len(),
        before + 1,
        "the release is announced"
    );
}

#[tokio::test]
async fn publish_counts_receivers_and_spublish_reaches_shard_subscribers() {
    let server = MemoryServer::new();
    let (plain, sharded) = (Inbox::default(), Inbox::default());
    let one = server.subscriber(plain.sink());
    let two = server.subscriber(sharded.sink());
    one.subscribe(&["ch", "ch"]).unwrap();
    two.subscribe(&["ch"]).unwrap();
    two.ssubscribe(&["ch"]).unwrap();
    assert_eq!(int(&server.command(&["PUBLISH", "ch", "hello"])), 2);
    assert_eq!(int(&server.command(&["SPUBLISH", "ch", "shard"])), 1);
    assert_eq!(int(&server.command(&["PUBLISH", "nobody", "x"])), 0);
    assert_eq!(
        plain.messages(),
        [(PushKind::Message, "ch".to_owned(), "hello".to_owned())]
    );
    assert_eq!(
        sharded.messages(),
        [
            (PushKind::Message, "ch".to_owned(), "hello".to_owned()),
            (PushKind::SMessage, "ch".to_owned(), "shard".to_owned()),
        ]
    );
    drop(one);
    assert_eq!(int(&server.command(&["PUBLISH", "ch", "again"])), 1);
    // From a script, too, and delivered once the script is done.
    let from_script = server.command(&[
        "EVAL",
        "return redis.call('PUBLISH', KEYS[1], 'x')",
        "1",
        "ch",
    ]);
    assert_eq!(int(&from_script), 1);
    assert_eq!(sharded.messages().len(), 4);
}

#[tokio::test]
async fn a_subscriber_may_send_commands_from_its_callback() {
    let server = MemoryServer::new();
    let seen = Arc::new(AtomicUsize::new(0));
    let echo = {
        let server = server.clone();
        let seen = seen.clone();
        move |push: PushInfo| {
            seen.fetch_add(1, Ordering::SeqCst);
            if push.data.get(1) == Some(&bulk("ping")) {
                // Publishing from the callback neither deadlocks nor loses the message.
                server.command(&["PUBLISH", "ch", "pong"]);
            }
        }
    };
    let subscriber = server.subscriber(echo);
    subscriber.subscribe(&["ch"]).unwrap();
    server.command(&["PUBLISH", "ch", "ping"]);
    assert_eq!(seen.load(Ordering::SeqCst), 2);
}
