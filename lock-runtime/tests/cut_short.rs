//! Releases and acquisitions cut short (a timeout around them, a server
//! that stalls past the command timeout) never leave a lock taken by
//! nobody for its lease: a release dropped midway still frees the lock, and
//! a grant that may have happened after its caller gave up is given back.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{builder, connect, lock_key, ok, within};
use lock_runtime::{LockClient, LockError, LockRequest};
use lock_testkit::{RedisServer, unique_key};

/// Long enough that a lock left behind would outlast every bound below.
const LEASE: Duration = Duration::from_secs(30);

/// How long another client may wait for the lock: far less than the lease.
const WAIT: Duration = Duration::from_secs(5);

/// Asserts that another client takes `name` well within its lease.
async fn free_for_another(server: &RedisServer, name: &str) {
    free_for_another_as(server, name, |c, n| c.lock(n)).await;
}

/// Asserts that another client takes `name`, as the kind of lock `request`
/// makes, well within its lease.
async fn free_for_another_as(server: &RedisServer, name: &str, request: Request) {
    let other = connect(builder(server).default_lease(LEASE)).await;
    let taken = request(&other, name).wait(WAIT).acquire().await;
    let guard = taken.unwrap_or_else(|err| {
        panic!(
            "`{name}` stayed taken by nobody ({err}); holder: {:?}",
            server.cli(&["HGETALL", &lock_key(name)])
        )
    });
    ok(server, guard.release().await);
}

/// A client whose command timeout is `timeout`, shorter than the stalls.
async fn impatient(server: &RedisServer, timeout: Duration) -> LockClient {
    connect(
        builder(server)
            .default_lease(LEASE)
            .command_timeout(timeout),
    )
    .await
}

/// Takes and releases a lock once, so that the server has the scripts: an
/// acquire sent while it stalls then runs when it resumes (a first call
/// would only find its script missing).
async fn warm_up(server: &RedisServer, locks: &LockClient) {
    let guard = ok(server, locks.lock(unique_key("warm-up")).acquire().await);
    ok(server, guard.release().await);
}

/// Pauses `server` now and resumes it after `d`; the task ends then.
fn stall(server: &Arc<RedisServer>, d: Duration) -> tokio::task::JoinHandle<()> {
    server.pause();
    let server = server.clone();
    tokio::spawn(async move {
        tokio::time::sleep(d).await;
        server.resume();
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_dropped_midway_still_frees_the_lock() {
    let server = RedisServer::start();
    let locks = connect(builder(&server).default_lease(LEASE)).await;
    let names: Vec<String> = (0..3).map(|_| unique_key("cut-release")).collect();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(ok(&server, locks.lock(name.as_str()).acquire().await));
    }
    let last = guards.pop().expect("three guards");
    server.pause();
    // Two releases on their way, held up by the stalled server...
    let in_flight: Vec<_> = guards
        .into_iter()
        .map(|guard| tokio::spawn(guard.release()))
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // ...and a third given up on: it waits for the lane's sender, or is on
    // its way in a batch, when it is dropped.
    let cut = tokio::time::timeout(Duration::from_millis(20), last.release()).await;
    assert!(
        cut.is_err(),
        "the release cannot finish while Redis is stalled: {cut:?}"
    );
    server.resume();
    for release in in_flight {
        ok(&server, release.await.expect("release task"));
    }
    for name in &names {
        free_for_another(&server, name).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_lock_that_timed_out_on_a_stall_does_not_keep_the_lock() {
    let server = Arc::new(RedisServer::start());
    let locks = impatient(&server, Duration::from_millis(200)).await;
    let name = unique_key("cut-try");
    warm_up(&server, &locks).await;
    let resume = stall(&server, Duration::from_millis(400));
    let tried = locks.lock(name.as_str()).try_acquire().await;
    let err = tried.expect_err("Redis is stalled past the command timeout");
    assert!(err.is_unavailable(), "{err}");
    resume.await.expect("resumed");
    // The acquire ran when Redis resumed; its grant is given back.
    within(
        &server,
        Duration::from_secs(10),
        "the lock to be free",
        free_for_another(&server, &name),
    )
    .await;
}

/// An upgrade shares its owner id with the read side it upgrades: when its
/// release fails in a stall, sending it again later could free the write
/// side that the same critical section took again meanwhile. It is not
/// sent again: the write side taken again stays held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_release_of_an_upgrade_does_not_free_the_write_side_taken_again() {
    let server = Arc::new(RedisServer::start());
    let locks = impatient(&server, Duration::from_millis(40)).await;
    warm_up(&server, &locks).await;
    let name = unique_key("cut-upgrade");
    let reading = ok(&server, locks.read_lock(name.as_str()).acquire().await);
    let held = reading
        .scope(async {
            let writing = locks.write_lock(name.as_str()).acquire().await?;
            let resume = stall(&server, Duration::from_millis(400));
            let released = writing.release().await;
            assert!(released.is_err(), "Redis is stalled: {released:?}");
            resume.await.expect("resumed");
            let again = locks.write_lock(name.as_str()).acquire().await?;
            let owner = || server.cli(&["HGET", &lock_key(&name), "owner"]);
            let taken_by = owner();
            // Longer than the pauses between the tries of a give-back sent
            // again (40 ms, doubling) that is still going when Redis resumes.
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let still = owner();
            again.release().await?;
            Ok::<_, LockError>((taken_by, still))
        })
        .await;
    let (taken_by, still) = ok(&server, ok(&server, held));
    assert!(
        !taken_by.trim().is_empty(),
        "the write side was taken again"
    );
    assert_eq!(
        still, taken_by,
        "the write side taken again was freed behind its holder"
    );
    ok(&server, reading.release().await);
}

/// An upgrade (a write lock taken inside a read lock's critical section)
/// whose answer is lost in a stall may have taken the write side with no
/// guard for it; a downgrade, the read side. Once the side it was made
/// from is released, that side is given back too, not left taken by nobody
/// for its lease: another client's writer gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_upgrade_or_downgrade_is_given_back_with_the_side_it_came_from() {
    let server = Arc::new(RedisServer::start());
    let locks = impatient(&server, Duration::from_millis(40)).await;
    warm_up(&server, &locks).await;
    let read: Request = |c, n| c.read_lock(n);
    let write: Request = |c, n| c.write_lock(n);
    for (what, outer, inner) in [("upgrade", read, write), ("downgrade", write, read)] {
        let name = unique_key(&format!("cut-{what}"));
        let held = ok(&server, outer(&locks, &name).acquire().await);
        let tried = held
            .scope(async {
                let resume = stall(&server, Duration::from_millis(200));
                let tried = inner(&locks, &name).wait(Duration::ZERO).acquire().await;
                resume.await.expect("resumed");
                tried
            })
            .await;
        let tried = ok(&server, tried);
        assert!(
            tried.as_ref().is_err_and(LockError::is_unavailable),
            "{what}: Redis is stalled: {tried:?}"
        );
        // The call ran when Redis resumed: that side is taken, by nobody.
        let taken = match what {
            "upgrade" => server.cli(&["HEXISTS", &lock_key(&name), "owner"]),
            _ => server.cli(&["ZCARD", &format!("{}:readers", lock_key(&name))]),
        };
        assert_eq!(taken, "1", "{what}: the lost call took its side");
        ok(&server, held.release().await);
        // A writer: a reader would get in next to a reader left behind.
        free_for_another_as(&server, &name, write).await;
    }
}

/// A kind of lock, by the request for a name it makes.
type Request = fn(&LockClient, &str) -> LockRequest;

/// Each kind of lock, by name.
fn every_kind() -> [(&'static str, Request); 4] {
    [
        ("lock", |c, n| c.lock(n)),
        ("fair_lock", |c, n| c.fair_lock(n)),
        ("semaphore", |c, n| c.semaphore(n, 1)),
        ("read_lock", |c, n| c.read_lock(n)),
    ]
}

/// A try-lock on a client with a command timeout far shorter than the
/// stall (the fault suite's trylock-stall: 40 ms against 200 ms), of every
/// kind. Its give-back is tried while Redis still stalls, fails on the
/// command timeout, and the connection is replaced meanwhile; it must be
/// sent again, and the acquire, run when Redis resumes, must not keep the
/// lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_lock_of_every_kind_given_up_early_in_a_stall_does_not_keep_the_lock() {
    let server = Arc::new(RedisServer::start());
    let locks = impatient(&server, Duration::from_millis(40)).await;
    for (_, request) in every_kind() {
        let warm = ok(
            &server,
            request(&locks, &unique_key("warm-up")).acquire().await,
        );
        ok(&server, warm.release().await);
    }
    // Twice each, on the same client, with nothing answered between: the
    // first stall leaves its connection being replaced.
    for (kind, request) in every_kind().into_iter().chain(every_kind()) {
        let name = unique_key("cut-try-early");
        let resume = stall(&server, Duration::from_millis(200));
        let tried = request(&locks, &name).try_acquire().await;
        assert!(
            tried.is_err(),
            "{kind}: Redis is stalled past the command timeout"
        );
        resume.await.expect("resumed");
        free_for_another_as(&server, &name, request).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_dropped_while_its_call_is_on_its_way_leaves_nothing_behind() {
    let server = RedisServer::start();
    let locks = connect(builder(&server).default_lease(LEASE)).await;
    let name = unique_key("cut-acquire");
    warm_up(&server, &locks).await;
    server.pause();
    let cut = tokio::time::timeout(
        Duration::from_millis(100),
        locks.lock(name.as_str()).wait(WAIT).acquire(),
    )
    .await;
    assert!(cut.is_err(), "cannot finish while Redis is stalled");
    server.resume();
    free_for_another(&server, &name).await;
}

/// A long stall (many command timeouts) in which the connection is replaced
/// between an acquire and its give-back: the acquire went out on the old
/// connection and runs when Redis resumes, while every try of the give-back
/// waited for a new connection that Redis, stalled, never let it write on.
/// The next try would come only after a pause grown long over the stall
/// (doubling from the command timeout); instead, the give-back is sent
/// again as soon as Redis answers this client again, so that another task
/// of this client waiting for the lock gets it well within the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_give_back_held_up_by_a_long_stall_goes_out_once_redis_answers_again() {
    let server = Arc::new(RedisServer::start());
    let locks = impatient(&server, LONG_STALL_TIMEOUT).await;
    warm_up(&server, &locks).await;
    let name = cut_short_in_a_long_stall(&server, &locks, "cut-long").await;
    taken_after_the_stall(&server, &locks, &name, Duration::from_millis(500)).await;
}

/// As above, but the client that cut the acquire short makes no other call
/// once Redis resumes: the lock goes to another client. Nothing of the
/// first client's would be answered to end the give-back's pause early, so
/// while a give-back waits for a store that stopped answering, the client
/// asks the store (a `PING`) until it answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_give_back_held_up_by_a_long_stall_goes_out_without_other_calls() {
    let server = Arc::new(RedisServer::start());
    let locks = impatient(&server, LONG_STALL_TIMEOUT).await;
    // Connected before the stall, and idle during it.
    let other = connect(builder(&server).default_lease(LEASE)).await;
    warm_up(&server, &locks).await;
    warm_up(&server, &other).await;
    let name = cut_short_in_a_long_stall(&server, &locks, "cut-quiet").await;
    // The probe asks every 500 ms at most, and here, with pauses of 100 ms
    // doubling from about 300 ms into the stall, about 200 ms after it.
    taken_after_the_stall(&server, &other, &name, Duration::from_millis(700)).await;
}

/// The command timeout of the client whose calls a long stall cuts short.
const LONG_STALL_TIMEOUT: Duration = Duration::from_millis(100);

/// Stalls `server` for 2.8 s while two try-locks of `locks` (whose command
/// timeout is [`LONG_STALL_TIMEOUT`]) time out in turn; returns the second
/// one's lock, once the server resumed. The stall is long enough that the
/// give-back's tries (pauses of 100 ms doubling, with up to a quarter
/// more) are all over before it ends (the fifth ends by 2.5 s), and the
/// next one comes 0.9 s after it or later, unless the store answering
/// again ends its pause.
async fn cut_short_in_a_long_stall(
    server: &Arc<RedisServer>,
    locks: &LockClient,
    prefix: &str,
) -> String {
    let (first, name) = (unique_key("cut-first"), unique_key(prefix));
    let resume = stall(server, Duration::from_millis(2800));
    // Two acquires in flight on one connection, timing out in turn: the
    // second timeout in a row replaces the connection before the second
    // acquire's give-back is sent.
    let before = locks.lock(first.as_str()).try_acquire();
    let tried = async {
        tokio::time::sleep(LONG_STALL_TIMEOUT / 5).await;
        locks.lock(name.as_str()).try_acquire().await
    };
    let (before, tried) = tokio::join!(before, tried);
    assert!(before.is_err() && tried.is_err(), "Redis is stalled");
    resume.await.expect("resumed");
    name
}

/// Asserts that `locks` takes `name` within `wait` of now (far less than
/// its lease).
async fn taken_after_the_stall(
    server: &RedisServer,
    locks: &LockClient,
    name: &str,
    wait: Duration,
) {
    let started = std::time::Instant::now();
    let waited = locks.lock(name).wait(wait).acquire().await;
    let guard = waited.unwrap_or_else(|err| {
        panic!(
            "`{name}` stayed taken after Redis resumed ({err}); holder: {:?}",
            server.cli(&["HGETALL", &lock_key(name)])
        )
    });
    assert!(started.elapsed() < wait);
    ok(server, guard.release().await);
}
