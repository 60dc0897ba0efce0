//! `#[distributed_lock]` against a real `redis-server`, through annotated
//! functions only: keys built from arguments, mutual exclusion across
//! clients, re-entry, timeouts, loss, and release on every way out.
//!
//! Every test starts its own server. Only `default_client_from_install`
//! touches the process-wide default client; the others name theirs with
//! `client = ...`, so the tests can run in parallel.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_runtime::{CurrentLock, LockClient, LockError, distributed_lock};
use lock_testkit::{RedisServer, unique_key};
mod support;

use support::{connect, redis_key};
use tokio::sync::Notify;

/// Bound for anything that should happen "promptly": far above the
/// expected milliseconds, far below the 30 s leases used where a lock must
/// not simply have expired.
const PROMPTLY: Duration = Duration::from_secs(5);

#[derive(Debug)]
enum AppError {
    Lock(LockError),
    Rejected(&'static str),
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        AppError::Lock(err)
    }
}

/// Takes `name` through the runtime API with a short wait: proves the lock
/// is free (again) without waiting for a lease to run out.
async fn take_promptly(locks: &LockClient, name: &str) -> Duration {
    let started = Instant::now();
    let guard = locks
        .lock(name)
        .wait(PROMPTLY)
        .acquire()
        .await
        .unwrap_or_else(|err| panic!("`{name}` is not free again: {err}"));
    let waited = started.elapsed();
    guard.release().await.expect("release");
    waited
}

// ---------------------------------------------------------------------------

struct Tenant {
    id: u32,
}

struct Order {
    tenant: Tenant,
    number: String,
}

#[distributed_lock(key = "{tenant:<order.tenant.id>}:order:<order.number>", client = locks)]
async fn ship(
    locks: &LockClient,
    order: &Order,
    server: &RedisServer,
) -> Result<(CurrentLock, String), AppError> {
    let held = lock_runtime::current().ok_or(AppError::Rejected("no current lock"))?;
    let exists = server.cli(&["EXISTS", &tagged_key(&held.name)]);
    Ok((held, exists))
}

/// The Redis key of a lock named `{tag}rest` (keys.rs): the tag decides the
/// Cluster slot, the rest follows it in a second pair of braces.
fn tagged_key(name: &str) -> String {
    let (tag, rest) = name[1..].split_once('}').expect("a hash tag");
    format!("lock:{{{tag}}}{{{rest}}}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_is_built_from_fields_and_named_by_current() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let order = Order {
        tenant: Tenant { id: 7 },
        number: unique_key("n"),
    };
    let expected = format!("{{tenant:7}}:order:{}", order.number);

    assert!(lock_runtime::current().is_none());
    let (first, exists) = ship(&locks, &order, &server).await.expect("ship");
    assert_eq!(first.name, expected);
    assert_eq!(exists, "1", "the lock is in Redis while the body runs");
    assert!(
        lock_runtime::current().is_none(),
        "no lock outside the body"
    );
    assert_eq!(
        server.cli(&["EXISTS", &tagged_key(&expected)]),
        "0",
        "released when the function returned"
    );

    let (second, _) = ship(&locks, &order, &server).await.expect("ship again");
    assert!(
        second.fence > first.fence,
        "fencing tokens grow: {first:?} then {second:?}"
    );
}

// ---------------------------------------------------------------------------

/// One service, several instances with their own clients (as on several
/// hosts), all locking per SKU.
struct Inventory {
    locks: LockClient,
    inside: Arc<AtomicBool>,
    intervals: Arc<Mutex<Vec<(Instant, Instant)>>>,
}

impl Inventory {
    #[distributed_lock(key = "sku:<sku>", client = self.locks, wait = "30s")]
    async fn reserve(&self, sku: &str) -> Result<(), LockError> {
        self.critical_section().await;
        Ok(())
    }

    #[distributed_lock(key = "sku:<sku>", client = self.locks, wait = "30s")]
    async fn restock(&self, sku: &str) -> Result<(), LockError> {
        self.critical_section().await;
        Ok(())
    }

    async fn critical_section(&self) {
        let start = Instant::now();
        assert!(
            !self.inside.swap(true, Ordering::SeqCst),
            "two holders at once"
        );
        tokio::time::sleep(Duration::from_millis(15)).await;
        self.inside.store(false, Ordering::SeqCst);
        self.intervals.lock().unwrap().push((start, Instant::now()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn methods_of_one_service_exclude_each_other_across_clients() {
    let server = RedisServer::start();
    let sku = unique_key("sku");
    let inside = Arc::new(AtomicBool::new(false));
    let intervals = Arc::new(Mutex::new(Vec::new()));

    let mut tasks = Vec::new();
    for _ in 0..2 {
        let inventory = Arc::new(Inventory {
            locks: connect(&server).await,
            inside: inside.clone(),
            intervals: intervals.clone(),
        });
        for worker in 0..3 {
            let (inventory, sku) = (inventory.clone(), sku.clone());
            tasks.push(tokio::spawn(async move {
                for round in 0..4 {
                    if (worker + round) % 2 == 0 {
                        inventory.reserve(&sku).await?;
                    } else {
                        inventory.restock(&sku).await?;
                    }
                }
                Ok::<_, LockError>(())
            }));
        }
    }
    for task in tasks {
        task.await.expect("task panicked").expect("lock error");
    }

    let mut intervals = intervals.lock().unwrap().clone();
    assert_eq!(intervals.len(), 2 * 3 * 4);
    intervals.sort();
    for pair in intervals.windows(2) {
        assert!(
            pair[1].0 >= pair[0].1,
            "critical sections overlap: {pair:?}"
        );
    }
}

/// A `&mut self` method whose client is a field of `self`, and whose body
/// mutates other fields.
struct Counter {
    locks: LockClient,
    redis: redis::aio::MultiplexedConnection,
    increments: u32,
}

impl Counter {
    /// A read-modify-write that loses updates unless the lock excludes.
    #[distributed_lock(key = "counter:<name>", client = self.locks, wait = "30s")]
    async fn increment(&mut self, name: &str) -> Result<(), LockError> {
        let value: Option<u64> = redis::cmd("GET")
            .arg(name)
            .query_async(&mut self.redis)
            .await
            .expect("GET");
        tokio::task::yield_now().await;
        let () = redis::cmd("SET")
            .arg(name)
            .arg(value.unwrap_or(0) + 1)
            .query_async(&mut self.redis)
            .await
            .expect("SET");
        self.increments += 1;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mut_self_methods_lose_no_updates() {
    let server = RedisServer::start();
    let name = unique_key("counter");
    let redis = redis::Client::open(server.url()).expect("redis url");

    let mut tasks = Vec::new();
    for _ in 0..3 {
        let mut counter = Counter {
            locks: connect(&server).await,
            redis: redis
                .get_multiplexed_async_connection()
                .await
                .expect("connect"),
            increments: 0,
        };
        let name = name.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..20 {
                counter.increment(&name).await?;
            }
            Ok::<_, LockError>(counter.increments)
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.expect("task panicked").expect("lock error");
    }
    assert_eq!(total, 60);
    assert_eq!(server.cli(&["GET", &name]), "60", "an update was lost");
}

// ---------------------------------------------------------------------------

type Events = Arc<Mutex<Vec<&'static str>>>;
type Spawned = tokio::task::JoinHandle<Result<u64, LockError>>;

fn record(events: &Events, event: &'static str) {
    events.lock().unwrap().push(event);
}

#[distributed_lock(key = "account:<id>", client = locks, wait = "0s")]
async fn inner(locks: &LockClient, id: &str) -> Result<u64, LockError> {
    Ok(lock_runtime::current().expect("inside").fence)
}

#[distributed_lock(key = "account:<id>", client = locks, wait = "30s")]
async fn waiting(locks: LockClient, id: String, events: Events) -> Result<u64, LockError> {
    record(&events, "spawned task entered");
    Ok(lock_runtime::current().expect("inside").fence)
}

#[distributed_lock(key = "account:<id>", client = locks)]
async fn outer(
    locks: &LockClient,
    id: &str,
    events: &Events,
) -> Result<(u64, u64, Spawned), LockError> {
    let fence = lock_runtime::current().expect("inside").fence;
    // The same lock in the same task re-enters at once (`inner` does not
    // wait at all), keeping the fencing token.
    let nested = inner(locks, id).await?;

    // A spawned task is another owner: trying once fails...
    let (l, i) = (locks.clone(), id.to_owned());
    let once = tokio::spawn(async move { inner(&l, &i).await })
        .await
        .expect("join");
    assert!(once.as_ref().is_err_and(LockError::is_timeout), "{once:?}");

    // ...and waiting lasts until this body is done.
    let spawned = tokio::spawn(waiting(locks.clone(), id.to_owned(), events.clone()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    record(events, "outer body done");
    Ok((fence, nested, spawned))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_calls_re_enter_and_spawned_tasks_wait() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let id = unique_key("acct");
    let events = Events::default();

    let (fence, nested, spawned) = outer(&locks, &id, &events).await.expect("outer");
    assert_eq!(nested, fence, "re-entry keeps the fencing token");

    let spawned_fence = tokio::time::timeout(PROMPTLY, spawned)
        .await
        .expect("the spawned task still waits after the outer call returned")
        .expect("join")
        .expect("spawned task");
    assert!(spawned_fence > fence, "a new holder gets a new token");
    assert_eq!(
        *events.lock().unwrap(),
        ["outer body done", "spawned task entered"]
    );
    assert_eq!(
        server.cli(&["EXISTS", &redis_key(&id)]),
        "0",
        "every level released"
    );
}

#[distributed_lock(key = "account:<id>", client = locks, wait = "10s")]
async fn update(locks: &LockClient, id: &str, inside: &AtomicUsize) -> Result<u64, LockError> {
    assert_eq!(
        inside.fetch_add(1, Ordering::SeqCst),
        0,
        "two updates inside at once"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    inside.fetch_sub(1, Ordering::SeqCst);
    Ok(lock_runtime::current().expect("inside").fence)
}

#[distributed_lock(key = "batch:<id>", client = locks)]
async fn batch(
    locks: &LockClient,
    id: &str,
    inside: &AtomicUsize,
) -> Result<(u64, u64), LockError> {
    // Joined inside a body locked on another key: each update is an owner
    // of its own, so they exclude each other.
    let (a, b) = tokio::join!(update(locks, id, inside), update(locks, id, inside));
    Ok((a?, b?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joined_locked_calls_inside_another_lock_exclude_each_other() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let id = unique_key("joined");
    let inside = AtomicUsize::new(0);
    let (a, b) = batch(&locks, &id, &inside).await.expect("batch");
    assert_ne!(a, b, "the joined calls shared one holder's token");
}

// ---------------------------------------------------------------------------

#[distributed_lock(key = "<name>", client = locks, wait = "0s")]
async fn try_once(locks: &LockClient, name: &str, ran: &AtomicBool) -> Result<(), AppError> {
    ran.store(true, Ordering::SeqCst);
    Ok(())
}

#[distributed_lock(key = "<name>", client = locks, wait = "300ms")]
async fn try_briefly(locks: &LockClient, name: &str, ran: &AtomicBool) -> Result<(), AppError> {
    ran.store(true, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_skips_the_body() {
    let server = RedisServer::start();
    let (locks, other) = (connect(&server).await, connect(&server).await);
    let name = unique_key("busy");
    let ran = AtomicBool::new(false);

    let held = other.lock(&name).acquire().await.expect("hold");

    let result = try_once(&locks, &name, &ran).await;
    assert!(
        matches!(&result, Err(AppError::Lock(err)) if err.is_timeout()),
        "{result:?}"
    );

    let started = Instant::now();
    let result = try_briefly(&locks, &name, &ran).await;
    let waited = started.elapsed();
    assert!(
        matches!(&result, Err(AppError::Lock(err)) if err.is_timeout()),
        "{result:?}"
    );
    assert!(
        waited >= Duration::from_millis(250),
        "gave up after {waited:?}"
    );
    assert!(waited < PROMPTLY, "waited {waited:?}");
    assert!(!ran.load(Ordering::SeqCst), "the body ran without the lock");

    held.release().await.expect("release");
    try_once(&locks, &name, &ran).await.expect("free lock");
    assert!(ran.load(Ordering::SeqCst));
}

// ---------------------------------------------------------------------------

#[distributed_lock(key = "<name>", client = locks, lease = "1s", wait = "0s")]
async fn endless(
    locks: &LockClient,
    name: &str,
    started: &Notify,
    steps: &AtomicU32,
) -> Result<(), LockError> {
    started.notify_one();
    loop {
        steps.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_whose_lock_is_deleted_is_stopped_and_returns_lost() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let name = unique_key("job");
    let (started, steps) = (Notify::new(), AtomicU32::new(0));

    let delete = async {
        started.notified().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            server.cli(&["DEL", &redis_key(&name)]),
            "1",
            "the lock was not in Redis"
        );
        Instant::now()
    };
    let (result, deleted_at) = tokio::join!(
        tokio::time::timeout(
            Duration::from_secs(20),
            endless(&locks, &name, &started, &steps)
        ),
        delete
    );
    let stopped_after = deleted_at.elapsed();
    let result = result.expect("the body kept running without its lock");
    assert!(result.as_ref().is_err_and(LockError::is_lost), "{result:?}");
    // The watchdog renews every lease/3; it noticed within a few rounds.
    assert!(
        stopped_after < PROMPTLY,
        "stopped {stopped_after:?} after the delete"
    );

    // The body was dropped: it takes no more steps.
    let steps_then = steps.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(steps.load(Ordering::SeqCst), steps_then);
    assert_eq!(locks.held(), 0);
}

// ---------------------------------------------------------------------------

#[distributed_lock(key = "<name>", client = locks, lease = "30s")]
async fn panics(locks: LockClient, name: String) -> Result<(), LockError> {
    tokio::task::yield_now().await;
    if !name.is_empty() {
        panic!("the body panics while holding `{name}`");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_body_releases_the_lock() {
    let server = RedisServer::start();
    let (locks, other) = (connect(&server).await, connect(&server).await);
    let name = unique_key("panic");

    let joined = tokio::spawn(panics(locks.clone(), name.clone())).await;
    assert!(joined.is_err_and(|err| err.is_panic()));
    assert_eq!(locks.held(), 0);

    // Free long before its 30 s lease could have run out.
    let waited = take_promptly(&other, &name).await;
    assert!(waited < PROMPTLY, "{waited:?}");
}

#[distributed_lock(key = "<name>", client = locks, lease = "30s")]
async fn slow(locks: &LockClient, name: &str, started: &Notify) -> Result<(), LockError> {
    started.notify_one();
    tokio::time::sleep(Duration::from_secs(60)).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_call_releases_the_lock() {
    let server = RedisServer::start();
    let (locks, other) = (connect(&server).await, connect(&server).await);
    let name = unique_key("dropped");
    let started = Notify::new();

    let mut call = Box::pin(slow(&locks, &name, &started));
    tokio::select! {
        _ = &mut call => panic!("the slow body finished"),
        () = started.notified() => {}
    }
    assert_eq!(server.cli(&["EXISTS", &redis_key(&name)]), "1");
    drop(call); // as a caller's timeout or a cancelled request does
    assert_eq!(locks.held(), 0, "renewal stops at once");

    let waited = take_promptly(&other, &name).await;
    assert!(waited < PROMPTLY, "{waited:?}");
}

#[distributed_lock(key = "<name>", client = locks)]
async fn rejects(locks: &LockClient, name: &str, early: bool) -> Result<u32, AppError> {
    if early {
        return Err(AppError::Rejected("early return"));
    }
    let parsed: Result<u32, AppError> = Err(AppError::Rejected("question mark"));
    parsed?;
    Ok(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_returns_and_errors_release_the_lock() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let name = unique_key("early");

    for (early, expected) in [(true, "early return"), (false, "question mark")] {
        let result = rejects(&locks, &name, early).await;
        assert!(
            matches!(result, Err(AppError::Rejected(why)) if why == expected),
            "{result:?}"
        );
        // Released before the call returned, not in the background.
        assert_eq!(server.cli(&["EXISTS", &redis_key(&name)]), "0");
    }
}

// ---------------------------------------------------------------------------

#[distributed_lock(key = "installed:<name>")]
async fn with_default_client(name: &str) -> Result<String, LockError> {
    Ok(lock_runtime::current().expect("inside").name)
}

/// The only test in this binary that uses the process-wide default client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_client_from_install() {
    let name = unique_key("default");
    let before = with_default_client(&name).await;
    assert!(matches!(before, Err(LockError::NotInstalled)), "{before:?}");

    let server = RedisServer::start();
    lock_runtime::install(connect(&server).await).expect("the first install");
    let key = with_default_client(&name)
        .await
        .expect("with the installed client");
    assert_eq!(key, format!("installed:{name}"));
    assert_eq!(server.cli(&["EXISTS", &redis_key(&key)]), "0");
}

// ---------------------------------------------------------------------------

#[distributed_lock(key = "bounds:shortest", lease = "100ms", wait = "0s", client = locks)]
async fn shortest_lease(locks: &LockClient) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "bounds:longest", lease = "8760h", wait = "0s", client = locks)]
async fn longest_lease(locks: &LockClient) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "bounds:job", lock_at_most = "8760h", lock_at_least = "8760h", wait = "0s", client = locks)]
async fn longest_job(locks: &LockClient) -> Result<(), LockError> {
    Ok(())
}

/// The shortest and the longest leases the attribute compiles are leases
/// the runtime takes: the macro repeats the runtime's bounds
/// (`MIN_LEASE`, `MAX_LEASE`), and one past them does not compile (see
/// lock-macros' `ui/fail/lease_too_short.rs` and `lease_too_long.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_s_lease_bounds_are_the_runtime_s() {
    assert_eq!(lock_runtime::MIN_LEASE, Duration::from_millis(100));
    assert_eq!(lock_runtime::MAX_LEASE, Duration::from_secs(8760 * 3600));
    let server = RedisServer::start();
    let locks = connect(&server).await;
    shortest_lease(&locks).await.expect("the shortest lease");
    longest_lease(&locks).await.expect("the longest lease");
    longest_job(&locks)
        .await
        .expect("the longest lock_at_most and lock_at_least");
    let held = server.cli(&["EXISTS", &redis_key("bounds:job")]);
    assert_eq!(held, "1", "kept taken for lock_at_least");
}
