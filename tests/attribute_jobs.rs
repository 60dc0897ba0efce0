//! `#[distributed_lock]` for scheduled jobs, against a real `redis-server`,
//! through annotated functions only: `on_busy = "skip"` (a busy lock is
//! `Ok(None)`), `lock_at_least` (a fast job keeps its lock for a minimum)
//! and `lock_at_most` (a lease that is never renewed, and stops the body).
//!
//! Every test starts its own server and names its clients with
//! `client = ...`; none touches the process-wide default client. Timings
//! are asserted as orders of events and generous bounds only.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use lock_runtime::{LockClient, LockError, distributed_lock};
use lock_testkit::{RedisServer, unique_key};
mod support;

use support::{PROMPTLY, connect, free_now, promptly, redis_key};

/// Tries `name` through the runtime API without waiting: proves it is taken.
async fn busy_now(locks: &LockClient, name: &str) {
    let taken = locks.lock(name).try_acquire().await.expect("try_acquire");
    if let Some(guard) = taken {
        guard.release().await.expect("release");
        panic!("`{name}` is free");
    }
}

#[derive(Debug)]
enum AppError {
    Lock(LockError),
    Rejected,
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        AppError::Lock(err)
    }
}

// ---------------------------------------------------------------------------
// on_busy = "skip"

/// A job that counts its runs; `reject` makes the body fail.
#[distributed_lock(key = "job:<name>", client = locks, wait = "0s", on_busy = "skip")]
async fn skip_at_once(
    locks: &LockClient,
    name: &str,
    runs: &AtomicU32,
    reject: bool,
) -> Result<Option<u32>, AppError> {
    if reject {
        return Err(AppError::Rejected);
    }
    Ok(Some(runs.fetch_add(1, Ordering::SeqCst) + 1))
}

#[distributed_lock(key = "job:<name>", client = locks, wait = "300ms", on_busy = "skip")]
async fn skip_after_waiting(
    locks: &LockClient,
    name: &str,
    runs: &AtomicU32,
) -> Result<Option<u32>, AppError> {
    Ok(Some(runs.fetch_add(1, Ordering::SeqCst) + 1))
}

/// The default, written out: a busy lock is an error.
#[distributed_lock(key = "job:<name>", client = locks, wait = "0s", on_busy = "error")]
async fn fail_at_once(locks: &LockClient, name: &str, runs: &AtomicU32) -> Result<u32, AppError> {
    Ok(runs.fetch_add(1, Ordering::SeqCst) + 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_returns_none_while_another_holds_the_lock() {
    let server = RedisServer::start();
    let (locks, other) = (connect(&server).await, connect(&server).await);
    let name = unique_key("report");
    let runs = AtomicU32::new(0);

    let held = other
        .lock(format!("job:{name}"))
        .acquire()
        .await
        .expect("another instance takes the job");
    let skipped = promptly("a skipped run", skip_at_once(&locks, &name, &runs, false)).await;
    assert!(matches!(skipped, Ok(None)), "{skipped:?}");

    // With a wait, the whole wait is waited before skipping.
    let started = Instant::now();
    let skipped = promptly("a skipped run", skip_after_waiting(&locks, &name, &runs)).await;
    let waited = started.elapsed();
    assert!(matches!(skipped, Ok(None)), "{skipped:?}");
    assert!(waited >= Duration::from_millis(200), "waited {waited:?}");

    // Without `on_busy = "skip"`, the same is an error.
    let failed = promptly("a failed run", fail_at_once(&locks, &name, &runs)).await;
    assert!(
        matches!(&failed, Err(AppError::Lock(err)) if err.is_timeout()),
        "{failed:?}"
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "a body ran without the lock"
    );

    held.release().await.expect("release");
    let ran = promptly("a run", skip_at_once(&locks, &name, &runs, false)).await;
    assert!(matches!(ran, Ok(Some(1))), "{ran:?}");
    let ran = promptly("a run", skip_after_waiting(&locks, &name, &runs)).await;
    assert!(matches!(ran, Ok(Some(2))), "{ran:?}");
    free_now(&other, &format!("job:{name}")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_keeps_the_bodys_own_errors() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let name = unique_key("report");
    let runs = AtomicU32::new(0);

    let rejected = promptly("a failing run", skip_at_once(&locks, &name, &runs, true)).await;
    assert!(matches!(rejected, Err(AppError::Rejected)), "{rejected:?}");
    // Released on the way out, as usual.
    free_now(&locks, &format!("job:{name}")).await;
}

// ---------------------------------------------------------------------------
// lock_at_least

/// The minimum: long enough that the calls right after the first one are
/// certainly within it, short enough to wait out.
const AT_LEAST: Duration = Duration::from_secs(3);

#[distributed_lock(
    key = "job:<name>",
    client = locks,
    wait = "0s",
    on_busy = "skip",
    lock_at_least = "3s"
)]
async fn fast_job(
    locks: &LockClient,
    name: &str,
    runs: &AtomicU32,
) -> Result<Option<u32>, LockError> {
    Ok(Some(runs.fetch_add(1, Ordering::SeqCst) + 1))
}

/// The same job on another instance that waits for its turn.
#[distributed_lock(
    key = "job:<name>",
    client = locks,
    wait = "30s",
    on_busy = "skip",
    lock_at_least = "3s"
)]
async fn fast_job_waiting(
    locks: &LockClient,
    name: &str,
    runs: &AtomicU32,
) -> Result<Option<u32>, LockError> {
    Ok(Some(runs.fetch_add(1, Ordering::SeqCst) + 1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_at_least_keeps_a_fast_job_locked_for_the_minimum() {
    let server = RedisServer::start();
    let (locks, other) = (connect(&server).await, connect(&server).await);
    let name = unique_key("cleanup");
    let runs = AtomicU32::new(0);

    let started = Instant::now();
    let ran = promptly("the first run", fast_job(&locks, &name, &runs)).await;
    assert!(matches!(ran, Ok(Some(1))), "{ran:?}");
    let key = redis_key(&format!("job:{name}"));
    assert_eq!(
        server.cli(&["EXISTS", &key]),
        "1",
        "released at once, after {:?}",
        started.elapsed()
    );

    // Within the minimum, the job is busy for this instance and any other.
    for client in [&locks, &other] {
        let again = promptly("a second run", fast_job(client, &name, &runs)).await;
        assert!(matches!(again, Ok(None)), "{again:?}");
    }
    busy_now(&other, &format!("job:{name}")).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let within = started.elapsed();

    // After it, the job runs again: a waiting instance gets it then, and
    // not before.
    let ran = tokio::time::timeout(AT_LEAST + PROMPTLY, fast_job_waiting(&other, &name, &runs))
        .await
        .expect("the job after the minimum");
    let ran_after = started.elapsed();
    assert!(matches!(ran, Ok(Some(2))), "{ran:?}");
    assert!(
        within < AT_LEAST,
        "the busy calls took {within:?}, longer than the minimum"
    );
    assert!(
        ran_after >= AT_LEAST - Duration::from_millis(500),
        "ran again {ran_after:?} after the first run, within the minimum of {AT_LEAST:?}"
    );
}

/// A body longer than its minimum: the lock is released when it ends.
#[distributed_lock(key = "job:<name>", client = locks, wait = "0s", lock_at_least = "200ms")]
async fn slow_job(locks: &LockClient, name: &str) -> Result<(), LockError> {
    tokio::time::sleep(Duration::from_millis(600)).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_at_least_releases_a_slower_job_when_it_ends() {
    let server = RedisServer::start();
    let (locks, other) = (connect(&server).await, connect(&server).await);
    let name = unique_key("slow");
    promptly("the slow job", slow_job(&locks, &name))
        .await
        .expect("slow job");
    free_now(&other, &format!("job:{name}")).await;
}

#[distributed_lock(keys = ["job:<name>:a", "job:<name>:b"], client = locks, lock_at_least = "1m")]
async fn fast_pair(locks: &LockClient, name: &str) -> Result<(), LockError> {
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_at_least_keeps_every_key_of_keys() {
    let server = RedisServer::start();
    let (locks, other) = (connect(&server).await, connect(&server).await);
    let name = unique_key("pair");
    promptly("the pair job", fast_pair(&locks, &name))
        .await
        .expect("pair job");
    for part in ["a", "b"] {
        let lock = format!("job:{name}:{part}");
        assert_eq!(server.cli(&["EXISTS", &redis_key(&lock)]), "1", "{lock}");
        busy_now(&other, &lock).await;
    }
}

// ---------------------------------------------------------------------------
// lock_at_most

/// Sleeps `work`, with a lease of one second that is never renewed. With
/// `on_busy = "skip"`, to show that a lost lock is still an error.
#[distributed_lock(
    key = "job:<name>",
    client = locks,
    wait = "0s",
    lock_at_most = "1s",
    on_busy = "skip"
)]
async fn bounded_job(
    locks: &LockClient,
    name: &str,
    work: Duration,
    finished: &AtomicBool,
) -> Result<Option<()>, LockError> {
    tokio::time::sleep(work).await;
    finished.store(true, Ordering::SeqCst);
    Ok(Some(()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_at_most_stops_a_body_that_runs_past_it() {
    let server = RedisServer::start();
    let (locks, other) = (connect(&server).await, connect(&server).await);
    let name = unique_key("report");

    // Within the bound: an ordinary run, released at its end.
    let finished = AtomicBool::new(false);
    let ran = promptly(
        "a short run",
        bounded_job(&locks, &name, Duration::from_millis(50), &finished),
    )
    .await;
    assert!(matches!(ran, Ok(Some(()))), "{ran:?}");
    assert!(finished.load(Ordering::SeqCst));
    free_now(&other, &format!("job:{name}")).await;

    // Past it: stopped when the lease runs out, long before the sleep ends.
    let finished = AtomicBool::new(false);
    let started = Instant::now();
    let result = promptly(
        "a run past `lock_at_most`",
        bounded_job(&locks, &name, Duration::from_secs(60), &finished),
    )
    .await;
    let stopped_after = started.elapsed();
    assert!(result.as_ref().is_err_and(LockError::is_lost), "{result:?}");
    assert!(!finished.load(Ordering::SeqCst), "the body ran to its end");
    assert!(
        stopped_after >= Duration::from_millis(500),
        "stopped after {stopped_after:?}, before the lease could run out"
    );

    // The lock expires with its lease: another instance takes it promptly.
    let guard = other
        .lock(format!("job:{name}"))
        .wait(PROMPTLY)
        .acquire()
        .await
        .unwrap_or_else(|err| panic!("not free after its lease: {err}"));
    guard.release().await.expect("release");
}
