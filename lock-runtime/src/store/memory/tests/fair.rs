//! Fair locks: taken in arrival order, the first in line woken.

use std::time::Duration;

use redis::PushKind;

use super::{Inbox, int, keys, release, run};
use crate::base::keys::LockKeys;
use crate::store::memory::MemoryServer;
use crate::store::scripts::calls;

/// Takes the fair lock `lock` for `owner` if it is its turn; otherwise,
/// when `enqueue`, `owner` waits in line, where it stays for 10 s unless
/// it tries again.
async fn acquire_fair(
    server: &MemoryServer,
    lock: &LockKeys,
    owner: &str,
    lease: Duration,
    enqueue: bool,
) -> Vec<i64> {
    let stay = Duration::from_millis(10_000);
    run(
        server,
        &calls::fair_acquire(lock, calls::Asker::fresh(owner), lease, stay, enqueue),
    )
    .await
    .expect("acquire fairly")
}

#[tokio::test]
async fn fair_locks_wake_the_first_in_line() {
    let server = MemoryServer::new();
    let lock = keys("fair");
    let lease = Duration::from_millis(30_000);
    let inbox = Inbox::default();
    let subscriber = server.subscriber(inbox.sink());
    subscriber.subscribe(&[&lock.channel()]).unwrap();

    assert_eq!(acquire_fair(&server, &lock, "a:1", lease, true).await[0], 1);
    assert_eq!(acquire_fair(&server, &lock, "b:1", lease, true).await[0], 0);
    assert_eq!(acquire_fair(&server, &lock, "c:1", lease, true).await[0], 0);
    assert_eq!(release(&server, &lock, "a:1", false).await, [0]);
    assert_eq!(
        inbox.messages(),
        [(PushKind::Message, lock.channel(), "b:1".to_owned())]
    );
    // Not c's turn while b is first in line.
    assert_eq!(acquire_fair(&server, &lock, "c:1", lease, true).await[0], 0);
    // b leaves the line: c is told, and takes it.
    let left: i64 = run(&server, &calls::fair_leave(&lock, "b:1"))
        .await
        .unwrap();
    assert_eq!(left, 0);
    assert_eq!(inbox.messages()[1].2, "c:1");
    assert_eq!(acquire_fair(&server, &lock, "c:1", lease, true).await[0], 1);
    assert_eq!(int(&server.command(&["ZCARD", &lock.queue()])), 0);
}
