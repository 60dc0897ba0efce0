//! Tests of the in-memory server: the real lock scripts run through
//! `redis::Script` as the client runs them, Redis's conversion rules, and
//! (when a `redis-server` 7.0 is at hand, as in CI) the same commands and
//! scripts compared reply by reply with a real server.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use redis::{PushInfo, PushKind, RedisResult, Script, ServerErrorKind, Value};

use super::MemoryServer;
use crate::keys::LockKeys;

const PRELUDE: &str = include_str!("../scripts/prelude.lua");

/// A lock script as scripts.rs builds it: which command announces releases,
/// the prelude, then the script.
fn lock_script(body: &str) -> Script {
    Script::new(&format!("local PUBLISH = 'PUBLISH'\n{PRELUDE}{body}"))
}

static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| lock_script(include_str!("../scripts/acquire.lua")));
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| lock_script(include_str!("../scripts/release.lua")));
static RENEW: LazyLock<Script> =
    LazyLock::new(|| lock_script(include_str!("../scripts/renew.lua")));
static PERMIT_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| lock_script(include_str!("../scripts/permit_acquire.lua")));
static PLACE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| lock_script(include_str!("../scripts/place_release.lua")));
static READ_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| lock_script(include_str!("../scripts/read_acquire.lua")));
static FAIR_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| lock_script(include_str!("../scripts/fair_acquire.lua")));
static FAIR_LEAVE: LazyLock<Script> =
    LazyLock::new(|| lock_script(include_str!("../scripts/fair_leave.lua")));

static SET_STRING: LazyLock<Script> =
    LazyLock::new(|| Script::new("return redis.call('SET', KEYS[1], 'x')"));

fn keys(name: &str) -> LockKeys {
    LockKeys::new("lock:", name)
}

/// The restart quarantine arguments: none.
const NO_QUARANTINE: (&str, u64, &str) = ("", 0, "0");

async fn acquire(server: &MemoryServer, lock: &LockKeys, owner: &str, lease_ms: u64) -> Vec<i64> {
    try_acquire(server, lock, owner, lease_ms, 0, NO_QUARANTINE)
        .await
        .expect("acquire")
}

async fn try_acquire(
    server: &MemoryServer,
    lock: &LockKeys,
    owner: &str,
    lease_ms: u64,
    waiting_ms: u64,
    (seen, quarantine_ms, strict): (&str, u64, &str),
) -> RedisResult<Vec<i64>> {
    let mut call = ACQUIRE.prepare_invoke();
    call.key(&lock.lock)
        .key(&lock.fence)
        .key(lock.readers())
        .key(lock.writer_waiting())
        .key(lock.readers_waiting())
        .arg(owner)
        .arg(lease_ms)
        .arg(waiting_ms)
        .arg(seen)
        .arg(quarantine_ms)
        .arg(strict);
    call.invoke_async(&mut server.clone()).await
}

async fn release(server: &MemoryServer, lock: &LockKeys, owner: &str, all: bool) -> Vec<i64> {
    RELEASE
        .key(&lock.lock)
        .key(&lock.channel)
        .key(lock.queue())
        .key(lock.queue_alive())
        .arg(owner)
        .arg(if all { "1" } else { "0" })
        .invoke_async(&mut server.clone())
        .await
        .expect("release")
}

async fn acquire_permit(
    server: &MemoryServer,
    lock: &LockKeys,
    owner: &str,
    lease_ms: u64,
    permits: u32,
) -> Vec<i64> {
    PERMIT_ACQUIRE
        .key(&lock.lock)
        .key(lock.holders())
        .key(&lock.fence)
        .arg(owner)
        .arg(lease_ms)
        .arg(permits)
        .arg(NO_QUARANTINE.0)
        .arg(NO_QUARANTINE.1)
        .arg(NO_QUARANTINE.2)
        .invoke_async(&mut server.clone())
        .await
        .expect("acquire a permit")
}

async fn release_permit(server: &MemoryServer, lock: &LockKeys, owner: &str) -> Vec<i64> {
    PLACE_RELEASE
        .key(&lock.lock)
        .key(lock.holders())
        .key(&lock.channel)
        .arg(owner)
        .arg("0")
        .invoke_async(&mut server.clone())
        .await
        .expect("release a permit")
}

async fn acquire_read(
    server: &MemoryServer,
    lock: &LockKeys,
    owner: &str,
    lease_ms: u64,
    waiting_ms: u64,
) -> Vec<i64> {
    READ_ACQUIRE
        .key(&lock.lock)
        .key(lock.readers())
        .key(lock.readers_holders())
        .key(&lock.fence)
        .key(lock.writer_waiting())
        .key(lock.readers_waiting())
        .arg(owner)
        .arg(lease_ms)
        .arg(waiting_ms)
        .arg(NO_QUARANTINE.0)
        .arg(NO_QUARANTINE.1)
        .arg(NO_QUARANTINE.2)
        .invoke_async(&mut server.clone())
        .await
        .expect("acquire to read")
}

async fn acquire_fair(
    server: &MemoryServer,
    lock: &LockKeys,
    owner: &str,
    lease_ms: u64,
    enqueue: bool,
) -> Vec<i64> {
    FAIR_ACQUIRE
        .key(&lock.lock)
        .key(&lock.fence)
        .key(lock.queue())
        .key(lock.queue_alive())
        .key(lock.readers())
        .arg(owner)
        .arg(lease_ms)
        .arg(10_000)
        .arg(if enqueue { "1" } else { "0" })
        .arg(NO_QUARANTINE.0)
        .arg(NO_QUARANTINE.1)
        .arg(NO_QUARANTINE.2)
        .invoke_async(&mut server.clone())
        .await
        .expect("acquire fairly")
}

/// Every push a subscriber received.
#[derive(Clone, Default)]
struct Inbox(Arc<Mutex<Vec<PushInfo>>>);

impl Inbox {
    fn sink(&self) -> impl Fn(PushInfo) + Send + Sync + 'static {
        let inbox = self.0.clone();
        move |push| inbox.lock().unwrap().push(push)
    }

    /// (kind, channel, payload) of every message so far.
    fn messages(&self) -> Vec<(PushKind, String, String)> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|push| {
                let text = |value: &Value| match value {
                    Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                    other => format!("{other:?}"),
                };
                let channel = push.data.first().map(text).unwrap_or_default();
                let payload = push.data.get(1).map(text).unwrap_or_default();
                (push.kind.clone(), channel, payload)
            })
            .collect()
    }
}

fn bulk(text: &str) -> Value {
    Value::BulkString(text.as_bytes().to_vec())
}

fn int(value: &Value) -> i64 {
    match value {
        Value::Int(n) => *n,
        other => panic!("not an integer: {other:?}"),
    }
}

/// The error code and message of an error reply.
fn error(value: &Value) -> String {
    match value {
        Value::ServerError(err) => format!("{} {}", err.code(), err.details().unwrap_or_default()),
        other => panic!("not an error: {other:?}"),
    }
}

#[tokio::test]
async fn fence_tokens_grow_and_reentry_counts() {
    let server = MemoryServer::new();
    let lock = keys("order:1");
    let first = acquire(&server, &lock, "a:1", 30_000).await;
    assert_eq!(first[0], 1);
    let fence = first[1];
    // A new counter starts at the server clock in microseconds.
    assert!(fence > 1_600_000_000_000_000, "{fence}");
    assert_eq!(first[2], 1);

    assert_eq!(acquire(&server, &lock, "a:1", 30_000).await, [1, fence, 2]);
    assert_eq!(release(&server, &lock, "a:1", false).await, [1]);
    assert_eq!(release(&server, &lock, "a:1", false).await, [0]);
    assert_eq!(release(&server, &lock, "a:1", false).await, [-1]);

    // Tokens grow with the server clock (prelude.lua's next_fence).
    let next = acquire(&server, &lock, "b:1", 30_000).await;
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
    assert_eq!(acquire(&server, &lock, "a:1", 30_000).await[0], 1);
    let busy = acquire(&server, &lock, "b:1", 30_000).await;
    assert_eq!(busy[0], 0);
    assert!((29_000..=30_000).contains(&busy[1]), "{busy:?}");
    assert_eq!(release(&server, &lock, "b:1", false).await, [-1]);
    assert_eq!(int(&server.command(&["EXISTS", &lock.lock])), 1);

    // A holder with no expiry makes the reply -1.
    server.command(&["PERSIST", &lock.lock]);
    assert_eq!(acquire(&server, &lock, "b:1", 30_000).await, [0, -1]);
}

#[tokio::test]
async fn several_locks_are_taken_all_or_none() {
    let server = MemoryServer::new();
    let (one, two) = (keys("multi:1"), keys("multi:2"));
    assert_eq!(acquire(&server, &two, "b:1", 30_000).await[0], 1);
    let mut call = ACQUIRE.prepare_invoke();
    for key in [&one.lock, &two.lock] {
        call.key(key);
    }
    for lock in [&one, &two] {
        call.key(&lock.fence);
    }
    for lock in [&one, &two] {
        call.key(lock.readers());
    }
    for lock in [&one, &two] {
        call.key(lock.writer_waiting());
    }
    for lock in [&one, &two] {
        call.key(lock.readers_waiting());
    }
    call.arg("a:1")
        .arg(30_000)
        .arg(0)
        .arg(NO_QUARANTINE.0)
        .arg(NO_QUARANTINE.1)
        .arg(NO_QUARANTINE.2);
    let reply: Vec<i64> = call.invoke_async(&mut server.clone()).await.unwrap();
    assert_eq!(reply[0], 0);
    assert_eq!(
        int(&server.command(&["EXISTS", &one.lock])),
        0,
        "none taken"
    );
    release(&server, &two, "b:1", false).await;
    let reply: Vec<i64> = call.invoke_async(&mut server.clone()).await.unwrap();
    assert_eq!(reply.len(), 5);
    assert_eq!(reply[0], 1);
}

#[tokio::test]
async fn release_publishes_to_the_lock_channel() {
    let server = MemoryServer::new();
    let lock = keys("announced");
    let inbox = Inbox::default();
    let subscriber = server.subscriber(inbox.sink());
    subscriber.subscribe(&[&lock.channel]).unwrap();

    acquire(&server, &lock, "a:1", 30_000).await;
    acquire(&server, &lock, "a:1", 30_000).await;
    release(&server, &lock, "a:1", false).await;
    assert!(inbox.messages().is_empty(), "still held once");
    release(&server, &lock, "a:1", false).await;
    assert_eq!(
        inbox.messages(),
        [(
            PushKind::Message,
            lock.channel.clone(),
            "released".to_owned()
        )]
    );
    assert_eq!(
        server.command(&["PUBSUB", "NUMSUB", &lock.channel]),
        Value::Array(vec![bulk(&lock.channel), Value::Int(1)])
    );

    subscriber.unsubscribe(&lock.channel).unwrap();
    acquire(&server, &lock, "a:1", 30_000).await;
    release(&server, &lock, "a:1", false).await;
    assert_eq!(inbox.messages().len(), 1, "unsubscribed");
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

#[tokio::test]
async fn renew_extends_held_locks_and_reports_lost_ones() {
    let server = MemoryServer::new();
    let (held, lost, clobbered) = (keys("renew:1"), keys("renew:2"), keys("renew:3"));
    acquire(&server, &held, "a:1", 1_000).await;
    acquire(&server, &lost, "b:1", 1_000).await;
    acquire(&server, &clobbered, "a:1", 1_000).await;
    // Overwritten with another type: its renewal fails alone (redis.pcall).
    server.command(&["SET", &clobbered.lock, "x"]);
    let renewed: Vec<i64> = RENEW
        .key(&held.lock)
        .key(&held.lock)
        .arg("x")
        .arg("a:1")
        .arg(60_000)
        .key(&lost.lock)
        .key(&lost.lock)
        .arg("x")
        .arg("a:1")
        .arg(60_000)
        .key(&clobbered.lock)
        .key(&clobbered.lock)
        .arg("x")
        .arg("a:1")
        .arg(60_000)
        .invoke_async(&mut server.clone())
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
    acquire_permit(&server, &lock, "a:1", 60, 2).await;
    let renew = |owner: &'static str| {
        let server = server.clone();
        let lock = lock.clone();
        async move {
            let renewed: Vec<i64> = RENEW
                .key(&lock.lock)
                .key(lock.holders())
                .arg("z")
                .arg(owner)
                .arg(30_000)
                .invoke_async(&mut server.clone())
                .await
                .unwrap();
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
    let taken: Vec<i64> = ACQUIRE
        .key(&lock.lock)
        .key(&lock.fence)
        .key(lock.readers())
        .key(lock.writer_waiting())
        .key(lock.readers_waiting())
        .arg("a:1")
        .arg(30_000)
        .arg(0)
        .arg(NO_QUARANTINE.0)
        .arg(NO_QUARANTINE.1)
        .arg(NO_QUARANTINE.2)
        .invoke_async(conn)
        .await
        .unwrap();
    assert_eq!(taken[0], 1);
    let permit: Vec<i64> = PERMIT_ACQUIRE
        .key(&sem.lock)
        .key(sem.holders())
        .key(&sem.fence)
        .arg("a:1")
        .arg(30_000)
        .arg(2)
        .arg(NO_QUARANTINE.0)
        .arg(NO_QUARANTINE.1)
        .arg(NO_QUARANTINE.2)
        .invoke_async(conn)
        .await
        .unwrap();
    assert_eq!(permit[0], 1);
    let renewed: Vec<i64> = RENEW
        .key(&lock.lock)
        .key(&lock.lock)
        .arg("x")
        .arg("a:1")
        .arg(600)
        .key(&sem.lock)
        .key(sem.holders())
        .arg("z")
        .arg("a:1")
        .arg(600)
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

#[tokio::test]
async fn locks_expire_after_their_lease() {
    let server = MemoryServer::new();
    let lock = keys("expiring");
    let first = acquire(&server, &lock, "a:1", 50).await;
    let busy = acquire(&server, &lock, "b:1", 50).await;
    assert_eq!(busy[0], 0);
    assert!(busy[1] <= 50, "{busy:?}");
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert_eq!(int(&server.command(&["PTTL", &lock.lock])), -2);
    assert_eq!(int(&server.command(&["EXISTS", &lock.lock])), 0);
    let second = acquire(&server, &lock, "b:1", 50).await;
    assert_eq!((second[0], second[2]), (1, 1));
    assert!(second[1] > first[1], "{second:?} after {first:?}");
    assert_eq!(release(&server, &lock, "a:1", false).await, [-1]);
}

#[tokio::test(start_paused = true)]
async fn leases_run_in_real_time_even_when_tokio_time_is_paused() {
    let server = MemoryServer::new();
    let lock = keys("paused");
    acquire(&server, &lock, "a:1", 10_000).await;
    tokio::time::sleep(Duration::from_secs(3600)).await; // Skipped at once.
    assert_eq!(acquire(&server, &lock, "b:1", 10_000).await[0], 0);
}

#[tokio::test]
async fn semaphore_permits_are_limited_and_expire() {
    let server = MemoryServer::new();
    let sem = keys("sem");
    let a = acquire_permit(&server, &sem, "a:1", 30_000, 2).await;
    let b = acquire_permit(&server, &sem, "b:1", 30_000, 2).await;
    assert_eq!((a[0], a[2], b[0]), (1, 1, 1));
    assert!(b[1] > a[1], "{b:?} after {a:?}");
    assert_eq!(
        acquire_permit(&server, &sem, "a:1", 30_000, 2).await,
        [1, a[1], 2]
    );
    let busy = acquire_permit(&server, &sem, "c:1", 30_000, 2).await;
    assert_eq!(busy[0], 0);
    assert!((29_000..=30_000).contains(&busy[1]), "{busy:?}");

    assert_eq!(release_permit(&server, &sem, "a:1").await, [1]);
    assert_eq!(release_permit(&server, &sem, "a:1").await, [0]);
    assert_eq!(release_permit(&server, &sem, "a:1").await, [-1]);
    assert_eq!(acquire_permit(&server, &sem, "c:1", 50, 2).await[0], 1);
    assert_eq!(int(&server.command(&["ZCARD", &sem.lock])), 2);

    // c's short lease runs out: its place is taken back for d.
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert_eq!(acquire_permit(&server, &sem, "d:1", 30_000, 2).await[0], 1);
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
    assert_eq!(
        acquire_read(&server, &lock, "r:1", 30_000, 5_000).await[0],
        1
    );
    assert_eq!(
        acquire_read(&server, &lock, "r:2", 30_000, 5_000).await[0],
        1
    );
    // A writer waits for the readers and marks itself waiting...
    let writer = try_acquire(&server, &lock, "w:1", 30_000, 5_000, NO_QUARANTINE)
        .await
        .unwrap();
    assert_eq!(writer[0], 0);
    assert_eq!(
        server.command(&["GET", &lock.writer_waiting()]),
        bulk("w:1")
    );
    // ...which holds back new readers but not those already in.
    assert_eq!(
        acquire_read(&server, &lock, "r:3", 30_000, 5_000).await[0],
        0
    );
    assert_eq!(
        acquire_read(&server, &lock, "r:1", 30_000, 5_000).await[0],
        1
    );

    let readers = keys("rw");
    for owner in ["r:1", "r:1", "r:2"] {
        let left: Vec<i64> = PLACE_RELEASE
            .key(readers.readers())
            .key(readers.readers_holders())
            .key(&readers.channel)
            .key(readers.queue())
            .key(readers.queue_alive())
            .arg(owner)
            .arg("0")
            .invoke_async(&mut server.clone())
            .await
            .unwrap();
        assert!(left[0] >= 0);
    }
    let writer = try_acquire(&server, &lock, "w:1", 30_000, 5_000, NO_QUARANTINE)
        .await
        .unwrap();
    assert_eq!(writer[0], 1);
    assert_eq!(int(&server.command(&["EXISTS", &lock.writer_waiting()])), 0);
}

#[tokio::test]
async fn fair_locks_wake_the_first_in_line() {
    let server = MemoryServer::new();
    let lock = keys("fair");
    let inbox = Inbox::default();
    let subscriber = server.subscriber(inbox.sink());
    subscriber.subscribe(&[&lock.channel]).unwrap();

    assert_eq!(
        acquire_fair(&server, &lock, "a:1", 30_000, true).await[0],
        1
    );
    assert_eq!(
        acquire_fair(&server, &lock, "b:1", 30_000, true).await[0],
        0
    );
    assert_eq!(
        acquire_fair(&server, &lock, "c:1", 30_000, true).await[0],
        0
    );
    assert_eq!(release(&server, &lock, "a:1", false).await, [0]);
    assert_eq!(
        inbox.messages(),
        [(PushKind::Message, lock.channel.clone(), "b:1".to_owned())]
    );
    // Not c's turn while b is first in line.
    assert_eq!(
        acquire_fair(&server, &lock, "c:1", 30_000, true).await[0],
        0
    );
    // b leaves the line: c is told, and takes it.
    let left: i64 = FAIR_LEAVE
        .key(lock.queue())
        .key(lock.queue_alive())
        .key(&lock.lock)
        .key(&lock.channel)
        .arg("b:1")
        .invoke_async(&mut server.clone())
        .await
        .unwrap();
    assert_eq!(left, 0);
    assert_eq!(inbox.messages()[1].2, "c:1");
    assert_eq!(
        acquire_fair(&server, &lock, "c:1", 30_000, true).await[0],
        1
    );
    assert_eq!(int(&server.command(&["ZCARD", &lock.queue()])), 0);
}

#[tokio::test]
async fn the_restart_quarantine_reads_info() {
    let server = MemoryServer::new();
    let lock = keys("quarantined");
    // Strict: a new counter on a server up for less than the quarantine
    // keeps the slot closed for the rest of it.
    let closed = try_acquire(&server, &lock, "a:1", 30_000, 0, ("", 60_000, "1"))
        .await
        .unwrap();
    assert_eq!(closed[0], 0);
    assert!((59_000..=60_000).contains(&closed[1]), "{closed:?}");
    assert_eq!(int(&server.command(&["EXISTS", &lock.fence])), 0);
    // Not strict, and this is the server seen at connect: open.
    let run_id = server.run_id();
    let open = try_acquire(&server, &lock, "a:1", 30_000, 0, (&run_id, 60_000, "0"))
        .await
        .unwrap();
    assert_eq!(open[0], 1);
    // After a restart, the client's run id is another server's: closed.
    server.restart();
    assert_ne!(server.run_id(), run_id);
    let closed = try_acquire(&server, &lock, "b:1", 30_000, 0, (&run_id, 60_000, "0"))
        .await
        .unwrap();
    assert_eq!(closed[0], 0);
}

#[tokio::test]
async fn a_string_at_a_lock_key_is_wrongtype() {
    let server = MemoryServer::new();
    let lock = keys("clobbered");
    server.command(&["SET", &lock.lock, "not a hash"]);
    let err = try_acquire(&server, &lock, "a:1", 30_000, 0, NO_QUARANTINE)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("WRONGTYPE"));
    let detail = err.detail().unwrap_or_default();
    assert!(
        detail.starts_with("Operation against a key holding the wrong kind of value script: "),
        "{detail}"
    );
    assert!(
        detail.ends_with(".") && detail.contains(", on @user_script:"),
        "{detail}"
    );
    assert_eq!(server.command(&["GET", &lock.lock]), bulk("not a hash"));
}

#[tokio::test]
async fn unknown_scripts_are_loaded_and_retried() {
    let server = MemoryServer::new();
    let script = Script::new("return {KEYS[1], ARGV[1], #KEYS, #ARGV}");
    let unknown = server.command(&["EVALSHA", script.get_hash(), "0"]);
    let Value::ServerError(err) = &unknown else {
        panic!("{unknown:?}");
    };
    assert_eq!(err.kind(), Some(ServerErrorKind::NoScript));
    assert_eq!(
        error(&unknown),
        "NOSCRIPT No matching script. Please use EVAL."
    );

    let reply: (String, String, i64, i64) = script
        .key("k")
        .arg("v")
        .invoke_async(&mut server.clone())
        .await
        .unwrap();
    assert_eq!(reply, ("k".to_owned(), "v".to_owned(), 1, 1));
    assert_eq!(
        server.command(&["SCRIPT", "EXISTS", &script.get_hash().to_uppercase(), "0"]),
        Value::Array(vec![Value::Int(1), Value::Int(0)])
    );
    // EVAL caches the script too, under the hash redis-rs computes.
    let other = Script::new("return 7");
    assert_eq!(int(&server.command(&["EVAL", "return 7", "0"])), 7);
    assert_eq!(int(&server.command(&["EVALSHA", other.get_hash(), "0"])), 7);

    // A restart forgets scripts; invoking loads them again.
    server.restart();
    assert_eq!(
        server.command(&["SCRIPT", "EXISTS", script.get_hash()]),
        Value::Array(vec![Value::Int(0)])
    );
    let again: (String, String, i64, i64) = script
        .key("k")
        .arg("v")
        .invoke_async(&mut server.clone())
        .await
        .unwrap();
    assert_eq!(again.2, 1);
}

#[tokio::test]
async fn script_values_convert_as_in_redis() {
    let server = MemoryServer::new();
    let eval = |body: &str| server.command(&["EVAL", body, "0"]);
    assert_eq!(
        eval("return {1, 'a', false, true, 2.9, -2.9, {ok='fine'}, nil, 5}"),
        Value::Array(vec![
            Value::Int(1),
            bulk("a"),
            Value::Nil,
            Value::Int(1),
            Value::Int(2),
            Value::Int(-2),
            Value::SimpleString("fine".to_owned()),
        ])
    );
    assert_eq!(eval("return {ok='OK'}"), Value::Okay);
    assert_eq!(error(&eval("return {err='My Error'}")), "My Error");
    assert_eq!(error(&eval("return redis.error_reply('Oops')")), "ERR Oops");
    assert_eq!(
        eval("return redis.status_reply('FINE')"),
        Value::SimpleString("FINE".to_owned())
    );
    assert_eq!(eval("return 1/0"), Value::Int(i64::MIN));
    // Replies as Lua sees them.
    server.command(&["SET", "n", "5"]);
    assert_eq!(
        eval(
            "return {type(redis.call('GET', 'missing')), type(redis.call('INCR', 'n')), \
             redis.call('PING').ok, type(redis.call('HMGET', 'nokey', 'a')[1])}"
        ),
        Value::Array(vec![
            bulk("boolean"),
            bulk("number"),
            bulk("PONG"),
            bulk("boolean")
        ])
    );
    // Numbers passed to commands are written with 17 significant digits.
    assert_eq!(
        eval(
            "redis.call('SET', 'f', 0.1) redis.call('SET', 'g', 2^53) return {redis.call('GET', 'f'), redis.call('GET', 'g')}"
        ),
        Value::Array(vec![bulk("0.10000000000000001"), bulk("9007199254740992")])
    );
    // redis.pcall returns the error; Lua's pcall gets its message.
    server.command(&["SET", "s", "x"]);
    assert_eq!(
        eval(
            "local ok, e = pcall(redis.call, 'HGET', 's', 'f') return {tostring(ok), e, redis.pcall('HGET', 's', 'f').err}"
        ),
        Value::Array(vec![
            bulk("false"),
            bulk("WRONGTYPE Operation against a key holding the wrong kind of value"),
            bulk("WRONGTYPE Operation against a key holding the wrong kind of value"),
        ])
    );
}

#[tokio::test]
async fn script_errors_say_where_as_in_redis() {
    let server = MemoryServer::new();
    let eval = |body: &str| {
        let sha = super::lua::sha1_hex(body.as_bytes());
        let reply = error(&server.command(&["EVAL", body, "0"]));
        reply.replace(&sha, "<sha>")
    };
    assert_eq!(
        eval("\nerror('foo')"),
        "ERR user_script:2: foo script: <sha>, on @user_script:2."
    );
    assert_eq!(
        eval("return redis.call('NOPE')"),
        "ERR Unknown Redis command called from script script: <sha>, on @user_script:1."
    );
    assert_eq!(
        eval("return redis.call('GET')"),
        "ERR Wrong number of args calling Redis command from script script: <sha>, on @user_script:1."
    );
    assert_eq!(
        eval("return redis.call('GET', {})"),
        "ERR Lua redis lib command arguments must be strings or integers script: <sha>, on @user_script:1."
    );
    assert_eq!(
        eval("return redis.call('EVAL', 'return 1', '0')"),
        "ERR This Redis command is not allowed from script script: <sha>, on @user_script:1."
    );
    assert_eq!(
        eval("x = 1"),
        "ERR user_script:1: Attempt to modify a readonly table script: <sha>, on @user_script:1."
    );
    assert_eq!(
        eval("return os.time()"),
        "ERR user_script:1: Script attempted to access nonexistent global variable 'os' script: <sha>, on @user_script:1."
    );
    assert_eq!(
        eval("return 1 +"),
        "ERR Error compiling script (new function): user_script:1: unexpected symbol near '<eof>'"
    );
}

#[tokio::test]
async fn commands_reply_as_redis_does() {
    let server = MemoryServer::new();
    let cmd = |args: &[&str]| server.command(args);
    assert_eq!(cmd(&["PING"]), Value::SimpleString("PONG".to_owned()));
    assert_eq!(
        error(&cmd(&["FOO", "a", "b"])),
        "ERR unknown command 'FOO', with args beginning with: 'a' 'b' "
    );
    assert_eq!(
        error(&cmd(&["GET"])),
        "ERR wrong number of arguments for 'get' command"
    );
    assert_eq!(cmd(&["HSET", "h", "a", "1", "b", "2"]), Value::Int(2));
    assert_eq!(
        error(&cmd(&["GET", "h"])),
        "WRONGTYPE Operation against a key holding the wrong kind of value"
    );
    assert_eq!(cmd(&["TYPE", "h"]), Value::SimpleString("hash".to_owned()));
    assert_eq!(cmd(&["HDEL", "h", "a", "b"]), Value::Int(2));
    assert_eq!(cmd(&["EXISTS", "h"]), Value::Int(0), "empty hashes vanish");
    assert_eq!(cmd(&["PTTL", "h"]), Value::Int(-2));
    cmd(&["SET", "k", "v"]);
    assert_eq!(cmd(&["PTTL", "k"]), Value::Int(-1));
    assert_eq!(cmd(&["PEXPIRE", "k", "0"]), Value::Int(1));
    assert_eq!(cmd(&["EXISTS", "k"]), Value::Int(0), "PEXPIRE 0 deletes");
    cmd(&["SET", "k", "v", "PX", "100000"]);
    assert!((99_000..=100_000).contains(&int(&cmd(&["PTTL", "k"]))));
    assert_eq!(
        cmd(&["INCR", "k"]),
        Value::ServerError(
            match redis::parse_redis_value(b"-ERR value is not an integer or out of range\r\n")
                .unwrap()
            {
                Value::ServerError(err) => err,
                _ => unreachable!(),
            }
        )
    );
    assert_eq!(cmd(&["ZADD", "z", "1", "a", "2", "b"]), Value::Int(2));
    assert_eq!(cmd(&["ZADD", "z", "GT", "0", "a"]), Value::Int(0));
    assert_eq!(cmd(&["ZSCORE", "z", "a"]), bulk("1"));
    assert_eq!(
        cmd(&["ZRANGE", "z", "-1", "-1", "WITHSCORES"]),
        Value::Array(vec![bulk("b"), bulk("2")])
    );
    assert_eq!(
        cmd(&["KEYS", "*"]),
        Value::Array(vec![bulk("k"), bulk("z")])
    );
    let Value::Array(time) = cmd(&["TIME"]) else {
        panic!("TIME is an array");
    };
    assert_eq!(time.len(), 2);
    let Value::BulkString(info) = cmd(&["INFO", "server"]) else {
        panic!("INFO is a bulk string");
    };
    let info = String::from_utf8(info).unwrap();
    assert!(
        info.contains(&format!("\r\nrun_id:{}\r\n", server.run_id())),
        "{info}"
    );
    assert!(info.contains("\r\nuptime_in_seconds:0\r\n"), "{info}");
}

#[tokio::test]
async fn pipelines_and_transactions_run_every_command() {
    let server = MemoryServer::new();
    let (a, b): (i64, i64) = redis::pipe()
        .cmd("INCR")
        .arg("n")
        .cmd("INCR")
        .arg("n")
        .query_async(&mut server.clone())
        .await
        .unwrap();
    assert_eq!((a, b), (1, 2));
    let (c, d): (i64, i64) = redis::pipe()
        .atomic()
        .cmd("INCR")
        .arg("n")
        .cmd("GET")
        .arg("n")
        .query_async(&mut server.clone())
        .await
        .unwrap();
    assert_eq!((c, d), (3, 3));
    let aborted: RedisResult<(i64,)> = redis::pipe()
        .atomic()
        .cmd("NOPE")
        .query_async(&mut server.clone())
        .await;
    assert!(aborted.is_err());
    assert_eq!(server.command(&["GET", "n"]), bulk("3"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_holder_at_a_time_across_threads() {
    let server = MemoryServer::new();
    let lock = keys("contended");
    let inside = Arc::new(AtomicBool::new(false));
    let granted = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for worker in 0..4 {
        let (server, lock, inside, granted) = (
            server.clone(),
            lock.clone(),
            inside.clone(),
            granted.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let owner = format!("w:{worker}");
            let mut fences = Vec::new();
            for _ in 0..50 {
                let reply = acquire(&server, &lock, &owner, 30_000).await;
                if reply[0] == 1 {
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders");
                    fences.push(reply[1]);
                    granted.fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    inside.store(false, Ordering::SeqCst);
                    assert_eq!(release(&server, &lock, &owner, false).await, [0]);
                }
                tokio::task::yield_now().await;
            }
            fences
        }));
    }
    let mut fences = Vec::new();
    for task in tasks {
        fences.extend(task.await.unwrap());
    }
    assert!(granted.load(Ordering::SeqCst) > 0);
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(
        fences.len(),
        granted.load(Ordering::SeqCst),
        "every fence is new"
    );
}

#[test]
fn the_server_is_send_and_sync() {
    fn check<T: Send + Sync + Clone + 'static>() {}
    check::<MemoryServer>();
    fn check_subscriber<T: Send + Sync>() {}
    check_subscriber::<super::MemorySubscriber>();
}

/// A connection to a fresh real Redis 7.0, or `None` (with a note) when
/// the `redis-server` at hand is another version, whose messages differ.
async fn real_redis() -> Option<(lock_testkit::RedisServer, redis::aio::MultiplexedConnection)> {
    let real = lock_testkit::RedisServer::start();
    let client = redis::Client::open(real.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await
        .unwrap();
    if info.contains("redis_version:7.0.") {
        Some((real, conn))
    } else {
        eprintln!("skipped: the real server is not Redis 7.0");
        None
    }
}

/// The same commands and scripts, on this server and on a real Redis 7.0:
/// every reply must be the same.
#[tokio::test]
async fn replies_match_a_real_redis_server() {
    let Some((_real, mut conn)) = real_redis().await else {
        return;
    };
    let mut memory = MemoryServer::new();
    let mut mismatches = Vec::new();
    for args in differential_commands() {
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        // Both through redis-rs's error extraction, so that an error nested
        // in an array compares as the error it becomes for a caller.
        let expected = comparable(cmd.query_async::<Value>(&mut conn).await);
        let actual = comparable(
            redis::aio::ConnectionLike::req_packed_command(&mut memory, &cmd)
                .await
                .and_then(Value::extract_error),
        );
        if actual != expected {
            mismatches.push(format!(
                "{args:?}\n  redis:  {expected:?}\n  memory: {actual:?}"
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

/// The lock scripts through the same scenario on this server and on a
/// real Redis 7.0: the same replies, up to the clock (fencing tokens are
/// compared by when each first appeared, times to the nearest second).
#[tokio::test]
async fn lock_scripts_match_a_real_redis_server() {
    let Some((_real, mut conn)) = real_redis().await else {
        return;
    };
    let mut memory = MemoryServer::new();
    let scenario = lock_scenario();
    let mut expected = Normalizer::default();
    let mut actual = Normalizer::default();
    let mut mismatches = Vec::new();
    for (step, (what, call)) in scenario.iter().enumerate() {
        let real_reply =
            expected.normalize(comparable(call.invoke_async::<Value>(&mut conn).await));
        let memory_reply =
            actual.normalize(comparable(call.invoke_async::<Value>(&mut memory).await));
        if real_reply != memory_reply {
            mismatches.push(format!(
                "step {step} ({what})\n  redis:  {real_reply}\n  memory: {memory_reply}"
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

/// Replies made comparable across servers whose clocks differ.
#[derive(Default)]
struct Normalizer {
    fences: Vec<i64>,
}

impl Normalizer {
    fn normalize(&mut self, value: Value) -> String {
        match value {
            Value::Array(items) => {
                let items: Vec<String> =
                    items.into_iter().map(|item| self.normalize(item)).collect();
                format!("[{}]", items.join(", "))
            }
            // Fencing tokens start at the server clock in microseconds.
            Value::Int(n) if n > 1_000_000_000_000_000 => {
                let index = self.fences.iter().position(|f| *f == n).unwrap_or_else(|| {
                    self.fences.push(n);
                    self.fences.len() - 1
                });
                format!("fence#{index}")
            }
            // Times left, to the nearest second.
            Value::Int(n) if n > 100 => format!("~{}s", (n + 500) / 1000),
            other => format!("{other:?}"),
        }
    }
}

fn lock_scenario() -> Vec<(&'static str, redis::ScriptInvocation<'static>)> {
    let (plain, sem, rw, fair, other) = (
        keys("diff:plain"),
        keys("diff:sem"),
        keys("diff:rw"),
        keys("diff:fair"),
        keys("diff:other"),
    );
    let acquire = |lock: &LockKeys, owner: &str, waiting: u64, strict: bool| {
        let mut call = ACQUIRE.prepare_invoke();
        call.key(&lock.lock)
            .key(&lock.fence)
            .key(lock.readers())
            .key(lock.writer_waiting())
            .key(lock.readers_waiting())
            .arg(owner)
            .arg(60_000)
            .arg(waiting)
            .arg("")
            .arg(if strict { 60_000 } else { 0 })
            .arg(if strict { "1" } else { "0" });
        call
    };
    let release = |lock: &LockKeys, owner: &str, all: bool| {
        let mut call = RELEASE.prepare_invoke();
        call.key(&lock.lock)
            .key(&lock.channel)
            .key(lock.queue())
            .key(lock.queue_alive())
            .arg(owner)
            .arg(if all { "1" } else { "0" });
        call
    };
    let permit = |owner: &str| {
        let mut call = PERMIT_ACQUIRE.prepare_invoke();
        call.key(&sem.lock)
            .key(sem.holders())
            .key(&sem.fence)
            .arg(owner)
            .arg(60_000)
            .arg(2)
            .arg("")
            .arg(0)
            .arg("0");
        call
    };
    let place_release =
        |set: String, holders: String, channel: &str, queue: Option<String>, owner: &str| {
            let mut call = PLACE_RELEASE.prepare_invoke();
            call.key(set).key(holders).key(channel);
            if let Some(queue) = queue {
                call.key(&queue).key(format!("{queue}:alive"));
            }
            call.arg(owner).arg("0");
            call
        };
    let read = |owner: &str| {
        let mut call = READ_ACQUIRE.prepare_invoke();
        call.key(&rw.lock)
            .key(rw.readers())
            .key(rw.readers_holders())
            .key(&rw.fence)
            .key(rw.writer_waiting())
            .key(rw.readers_waiting())
            .arg(owner)
            .arg(60_000)
            .arg(5_000)
            .arg("")
            .arg(0)
            .arg("0");
        call
    };
    let fair_acquire = |owner: &str| {
        let mut call = FAIR_ACQUIRE.prepare_invoke();
        call.key(&fair.lock)
            .key(&fair.fence)
            .key(fair.queue())
            .key(fair.queue_alive())
            .key(fair.readers())
            .arg(owner)
            .arg(60_000)
            .arg(10_000)
            .arg("1")
            .arg("")
            .arg(0)
            .arg("0");
        call
    };
    let renew = |items: &[(&LockKeys, &str)]| {
        let mut call = RENEW.prepare_invoke();
        for (lock, owner) in items {
            call.key(&lock.lock)
                .key(&lock.lock)
                .arg("x")
                .arg(*owner)
                .arg(60_000);
        }
        call
    };
    let mut fair_leave = FAIR_LEAVE.prepare_invoke();
    fair_leave
        .key(fair.queue())
        .key(fair.queue_alive())
        .key(&fair.lock)
        .key(&fair.channel)
        .arg("c");
    let mut clobber_check = ACQUIRE.prepare_invoke();
    clobber_check
        .key(&other.channel) // a string set below
        .key(&other.fence)
        .key(other.readers())
        .key(other.writer_waiting())
        .key(other.readers_waiting())
        .arg("a")
        .arg(60_000)
        .arg(0)
        .arg("")
        .arg(0)
        .arg("0");
    let mut set_string = SET_STRING.prepare_invoke();
    set_string.key(&other.channel);
    vec![
        ("acquire", acquire(&plain, "a", 0, false)),
        ("re-enter", acquire(&plain, "a", 0, false)),
        ("busy", acquire(&plain, "b", 0, false)),
        ("release by another", release(&plain, "b", false)),
        ("release one level", release(&plain, "a", false)),
        ("release", release(&plain, "a", false)),
        ("acquire again", acquire(&plain, "b", 0, false)),
        (
            "renew",
            renew(&[(&plain, "b"), (&other, "b"), (&plain, "a")]),
        ),
        ("re-enter, to release all", acquire(&plain, "b", 0, false)),
        ("release all levels", release(&plain, "b", true)),
        ("permit a", permit("a")),
        ("permit b", permit("b")),
        ("permit a again", permit("a")),
        ("permit c, busy", permit("c")),
        (
            "permit release",
            place_release(sem.lock.clone(), sem.holders(), &sem.channel, None, "b"),
        ),
        ("permit c", permit("c")),
        ("read r1", read("r1")),
        ("writer waits", acquire(&rw, "w", 5_000, false)),
        ("read r2 held back", read("r2")),
        ("read r1 again", read("r1")),
        (
            "reader leaves",
            place_release(
                rw.readers(),
                rw.readers_holders(),
                &rw.channel,
                Some(rw.queue()),
                "r1",
            ),
        ),
        (
            "reader leaves",
            place_release(
                rw.readers(),
                rw.readers_holders(),
                &rw.channel,
                Some(rw.queue()),
                "r1",
            ),
        ),
        ("writer in", acquire(&rw, "w", 5_000, false)),
        ("read r2 waits", read("r2")),
        ("writer out", release(&rw, "w", false)),
        (
            "writer back, readers first",
            acquire(&rw, "w", 5_000, false),
        ),
        ("read r2", read("r2")),
        ("fair a", fair_acquire("a")),
        ("fair b", fair_acquire("b")),
        ("fair c", fair_acquire("c")),
        ("fair a out", release(&fair, "a", false)),
        ("fair c, not its turn", fair_acquire("c")),
        ("fair b", fair_acquire("b")),
        ("fair c leaves", fair_leave),
        ("quarantined", acquire(&other, "a", 0, true)),
        ("a string", set_string),
        ("wrong type", clobber_check),
    ]
}

/// A reply, or the error a caller gets, as a comparable value.
fn comparable(result: RedisResult<Value>) -> Value {
    result.unwrap_or_else(|err| {
        let message = format!(
            "-{} {}\r\n",
            err.code().unwrap_or("?"),
            err.detail().unwrap_or("")
        );
        redis::parse_redis_value(message.as_bytes()).unwrap()
    })
}

fn differential_commands() -> Vec<Vec<&'static str>> {
    let script_bodies = [
        "return {1, 'a', false, true, 2.9, -2.9, {ok='fine'}, nil, 5}",
        "return {1, 2, {err='inner'}}",
        "return {ok='a', err='b'}",
        "return {ok=1}",
        "return 3.99",
        "return -3.99",
        "return 2^63",
        "return",
        "return redis.error_reply('My Error')",
        "return redis.error_reply('Oops')",
        "return redis.status_reply('FINE')",
        "return redis.status_reply(1)",
        "return redis.call('NOPE')",
        "return redis.call('GET')",
        "return redis.call()",
        "return redis.call('GET', {})",
        "return redis.call('EVAL', 'return 1', '0')",
        "return redis.pcall('NOPE')",
        "x = 1",
        "return y",
        "\n\nerror('third line')",
        "error({err='My Error'})",
        "error({err=5})",
        "error()",
        "error('x', 0)",
        "return 1 +",
        "return tostring(rawget(_G, 'os'))",
        "local ok, e = pcall(redis.call, 'HGET', 's', 'f') return {tostring(ok), e}",
        "return redis.pcall('HGET', 's', 'f')",
        "return {type(redis.call('GET', 'missing')), redis.call('PING').ok, redis.call('TYPE', 's').ok}",
        "redis.call('SET', 'f', 0.1) redis.call('SET', 'g', 1e20) redis.call('SET', 'h2', 123456789012345678) return {redis.call('GET', 'f'), redis.call('GET', 'g'), redis.call('GET', 'h2')}",
        "return redis.call('HMGET', 'nokey', 'a', 'b')",
        "return redis.call('ZRANGE', 'z', 0, -1, 'WITHSCORES')",
        "return redis.sha1hex('a')",
        "return tostring(1e15)",
        "return string.format('%d', 1700000000123456)",
        "KEYS[1] = 'changed' return KEYS",
        "return redis.log('a', 'b')",
        "return redis.log(9, 'b')",
        "return redis.log(redis.LOG_WARNING, 'b')",
        "redis.log(redis.LOG_WARNING)",
        "return redis.setresp(4)",
        "return redis.setresp()",
        "return redis.setresp(2)",
        "return redis.sha1hex(5)",
        "return redis.sha1hex()",
        "local ok, e = xpcall(function() return redis.call('NOPE') end, \
         function(e) return type(e) .. ':' .. tostring(e.err) end) return {tostring(ok), e}",
        "local ok, e = pcall(error, {err = 'x'}) return e",
        "local ok, e = pcall(error, 'x') return e",
    ];
    let mut commands: Vec<Vec<&'static str>> = vec![
        vec!["PING"],
        vec!["PING", "hi"],
        vec!["PING", "a", "b"],
        vec!["ECHO", "x"],
        vec!["FOO", "a", "b"],
        vec!["GET"],
        vec!["SET", "s", "1"],
        vec!["GET", "s"],
        vec!["INCR", "s"],
        vec!["INCRBY", "s", "10"],
        vec!["INCRBY", "s", "x"],
        vec!["DECR", "s"],
        vec!["SET", "big", "9223372036854775807"],
        vec!["INCR", "big"],
        vec!["SET", "lead", "01"],
        vec!["INCR", "lead"],
        vec!["HSET", "h", "a", "1", "b", "2"],
        vec!["HSET", "h", "a"],
        vec!["HGET", "h", "a"],
        vec!["HMGET", "h", "a", "x", "b"],
        vec!["HINCRBY", "h", "a", "5"],
        vec!["HINCRBY", "h", "a", "x"],
        vec!["HSET", "h", "c", "x"],
        vec!["HINCRBY", "h", "c", "1"],
        vec!["HDEL", "h", "a", "x"],
        vec!["HLEN", "h"],
        vec!["HEXISTS", "h", "b"],
        vec!["HGETALL", "h"],
        vec!["GET", "h"],
        vec!["HGET", "s", "a"],
        vec!["ZADD", "s", "1", "a"],
        vec!["INCR", "h"],
        vec!["ZADD", "z", "1", "a", "2", "b", "3", "c"],
        vec!["ZADD", "z", "GT", "0", "a"],
        vec!["ZADD", "z", "GT", "CH", "5", "a", "1", "d"],
        vec!["ZADD", "z", "NX", "9", "a", "9", "e"],
        vec!["ZADD", "z", "XX", "7", "zz"],
        vec!["ZADD", "z", "LT", "CH", "0.5", "b"],
        vec!["ZADD", "z", "INCR", "1.5", "a"],
        vec!["ZADD", "z", "XX", "INCR", "1", "nope"],
        vec!["ZADD", "z", "NX", "GT", "1", "a"],
        vec!["ZADD", "z", "XX", "NX", "1", "a"],
        vec!["ZADD", "z", "INCR", "1", "a", "2", "b"],
        vec!["ZADD", "z", "1"],
        vec!["ZADD", "z", "1", "a", "2"],
        vec!["ZADD", "z", "abc", "a"],
        vec!["ZADD", "z", "nan", "a"],
        vec!["ZADD", "z", "inf", "i"],
        vec!["ZADD", "z", "INCR", "-inf", "i"],
        vec!["ZADD", "z", "0.1", "f"],
        vec!["ZSCORE", "z", "a"],
        vec!["ZSCORE", "z", "f"],
        vec!["ZSCORE", "z", "i"],
        vec!["ZSCORE", "z", "nope"],
        vec!["ZCARD", "z"],
        vec!["ZCOUNT", "z", "(1", "+inf"],
        vec!["ZCOUNT", "z", "-inf", "2"],
        vec!["ZCOUNT", "z", "x", "1"],
        vec!["ZRANGE", "z", "0", "-1"],
        vec!["ZRANGE", "z", "0", "-1", "WITHSCORES"],
        vec!["ZRANGE", "z", "-1", "-1", "WITHSCORES"],
        vec!["ZRANGE", "z", "-100", "1"],
        vec!["ZRANGE", "z", "1", "0"],
        vec!["ZRANGE", "z", "0", "1", "REV"],
        vec![
            "ZRANGE",
            "z",
            "(1",
            "5",
            "BYSCORE",
            "LIMIT",
            "1",
            "2",
            "WITHSCORES",
        ],
        vec!["ZRANGE", "z", "5", "(1", "BYSCORE", "REV"],
        vec!["ZRANGE", "z", "0", "-1", "LIMIT", "0", "1"],
        vec!["ZRANGE", "z", "x", "1"],
        vec!["ZRANGEBYSCORE", "z", "-inf", "+inf"],
        vec![
            "ZRANGEBYSCORE",
            "z",
            "(1",
            "3",
            "WITHSCORES",
            "LIMIT",
            "0",
            "1",
        ],
        vec!["ZRANGEBYSCORE", "z", "1", "3", "LIMIT", "1"],
        vec!["ZRANGEBYSCORE", "z", "-inf", "+inf", "LIMIT", "1", "-1"],
        vec!["ZRANGEBYSCORE", "z", "a", "b"],
        vec!["ZREM", "z", "a", "nope"],
        vec!["ZREMRANGEBYSCORE", "z", "-inf", "(2"],
        vec!["ZRANGE", "z", "0", "-1", "WITHSCORES"],
        vec!["ZRANGE", "h", "0", "-1"],
        vec!["DEL", "z", "z"],
        vec!["EXISTS", "z", "h", "h", "nope"],
        vec!["TYPE", "h"],
        vec!["TYPE", "nope"],
        vec!["TYPE", "s"],
        vec!["PTTL", "nope"],
        vec!["PTTL", "s"],
        vec!["PEXPIRE", "nope", "100"],
        vec!["PEXPIRE", "s", "x"],
        vec!["PEXPIRE", "s", "100000", "XX"],
        vec!["PEXPIRE", "s", "100000", "NX", "XX"],
        vec!["PEXPIRE", "s", "100000", "GT", "LT"],
        vec!["PEXPIRE", "s", "100000", "FOO"],
        vec!["PEXPIRE", "s", "100000", "GT"],
        vec!["PEXPIRE", "s", "100000", "NX"],
        vec!["PEXPIRE", "s", "100000", "NX"],
        vec!["PERSIST", "s"],
        vec!["PTTL", "s"],
        vec!["PEXPIRE", "s", "-5"],
        vec!["EXISTS", "s"],
        vec!["SET", "k", "v", "NX"],
        vec!["SET", "k", "v2", "NX"],
        vec!["SET", "k", "v3", "XX", "GET"],
        vec!["SET", "k", "v", "NX", "GET"],
        vec!["SET", "k", "v", "PX", "0"],
        vec!["SET", "k", "v", "EX", "-1"],
        vec!["SET", "k", "v", "PX", "abc"],
        vec!["SET", "k", "v", "NX", "XX"],
        vec!["SET", "k", "v", "KEEPTTL", "PX", "10"],
        vec!["SET", "k", "v", "FOO"],
        vec!["SET", "h", "v", "GET"],
        vec!["HSET", "hh", "f", "v"],
        vec!["SET", "hh", "v"],
        vec!["TYPE", "hh"],
        vec!["GET", "k"],
        vec!["DEL"],
        vec!["PUBLISH", "ch", "msg"],
        vec!["SCRIPT", "FOO"],
        vec!["SCRIPT", "LOAD", "return 1"],
        vec![
            "SCRIPT",
            "EXISTS",
            "e0e1f9fabfc9d4800c877a703b823ac0578ff8db",
            "abc",
        ],
        vec!["EVALSHA", "E0E1F9FABFC9D4800C877A703B823AC0578FF8DB", "0"],
        vec!["EVALSHA", "0123456789012345678901234567890123456789", "0"],
        vec!["EVAL", "return KEYS[1]", "2", "a"],
        vec!["EVAL", "return KEYS[1]", "-1"],
        vec!["EVAL", "return KEYS[1]", "x"],
        vec!["EVAL", "return 1"],
        vec![
            "EVAL",
            "return {KEYS[1], ARGV[1], ARGV[2]}",
            "1",
            "k",
            "a",
            "b",
        ],
        vec!["SET", "s", "x"],
        vec!["ZADD", "z", "1", "a", "2", "b"],
    ];
    for body in script_bodies {
        commands.push(vec!["EVAL", body, "0"]);
    }
    commands.push(vec![
        "EVAL",
        "return redis.call('HGETALL', KEYS[1])",
        "1",
        "h",
    ]);
    commands
}
