//! Shared set-up for the integration tests: every test starts its own
//! `redis-server` (lock-testkit) and connects clients to it.
//!
//! Most tests need a few lines of set-up:
//!
//! ```ignore
//! let (server, [holder, waiter]) = start_server_with_clients().await;
//! let name = unique_key("handoff");
//! let guard = ok(&server, holder.lock(name.as_str()).acquire().await);
//! ```
//!
//! - One server: [`start_server_with_clients`], or [`RedisServer::start`]
//!   (or `start_with`) and then [`client`] / [`clients`]. For a client with
//!   other settings, adjust [`builder`] and [`connect`] it.
//! - Other deployments: [`start_cluster`] with [`cluster_builder`] and
//!   [`cluster_clients`]; [`start_sentinel_group`] with
//!   [`sentinel_builder`]; [`redlock_builder`] over
//!   `RedisServer::start_many`. Every builder starts from [`builder_for`].
//! - A holder in a child process that the test can kill: [`spawn_holder`]
//!   in the test, [`holder_client`] in the child.
//! - Metrics and spans: [`telemetry`].
//! - Checks: [`ok`] and [`within`] (failures show the server log),
//!   [`lock_key`], [`spawn_acquire`], [`try_once_when_up`], [`contend`].
//!
//! Each test binary compiles this module on its own and uses a part of it.
#![allow(dead_code)] // each test binary uses a different part

pub mod telemetry;

use std::time::Duration;

use lock_runtime::{Deployment, LockClient, LockClientBuilder, LockError, LockGuard, LockRequest};
use lock_testkit::{RedisCluster, RedisServer, SentinelGroup};

/// The settings every test client starts from, on any deployment: a
/// 1 s connect timeout, a 500 ms command timeout and the test
/// [`QUARANTINE`]. Short timeouts make tests that pause and kill servers
/// fail fast.
pub fn builder_for(deployment: impl Into<Deployment>) -> LockClientBuilder {
    LockClient::builder(deployment)
        .connect_timeout(Duration::from_secs(1))
        .command_timeout(Duration::from_millis(500))
        .restart_quarantine(QUARANTINE)
}

/// Connects `builder`, failing the test if it cannot: for a client with
/// settings of its own, e.g. `connect(builder(&server).drift(d)).await`.
pub async fn connect(builder: LockClientBuilder) -> LockClient {
    builder.connect().await.expect("connect")
}

/// A client with timeouts suited to tests that pause and kill the server.
pub async fn client(server: &RedisServer) -> LockClient {
    connect(builder(server)).await
}

/// The settings of [`client`], to adjust before [`connect`]ing.
pub fn builder(server: &RedisServer) -> LockClientBuilder {
    builder_for(server.url())
}

/// `N` clients of `server`, each with connections of its own, as from
/// [`client`] (N is usually inferred: `let [a, b] = clients(&server).await`).
pub async fn clients<const N: usize>(server: &RedisServer) -> [LockClient; N] {
    connect_each(|| builder(server)).await
}

/// Starts a server and connects `N` clients to it, as from [`client`]:
/// `let (server, [locks]) = start_server_with_clients().await`.
pub async fn start_server_with_clients<const N: usize>() -> (RedisServer, [LockClient; N]) {
    let server = RedisServer::start();
    let clients = clients(&server).await;
    (server, clients)
}

/// Connects `N` clients one after the other, each from a fresh `builder()`.
async fn connect_each<const N: usize>(builder: impl Fn() -> LockClientBuilder) -> [LockClient; N] {
    let mut clients = Vec::with_capacity(N);
    for _ in 0..N {
        clients.push(connect(builder()).await);
    }
    clients
        .try_into()
        .unwrap_or_else(|_| unreachable!("N clients"))
}

/// The restart quarantine of test clients: longer than their leases.
pub const QUARANTINE: Duration = Duration::from_secs(3);

/// Runs a blocking test-kit call (one that waits for a topology to form or
/// fail over) with `block_in_place`, so that the runtime's other tasks
/// (renewals, reconnects) go on meanwhile. Needs a multi-thread runtime.
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// Starts a Redis Cluster of `masters` masters with `replicas_per_master`
/// replicas each (see [`RedisCluster::start`]), off the runtime.
pub fn start_cluster(masters: usize, replicas_per_master: usize) -> RedisCluster {
    blocking(|| RedisCluster::start(masters, replicas_per_master))
}

/// The settings of Cluster test clients: those of [`builder_for`] with a
/// 1 s command timeout.
pub fn cluster_builder(cluster: &RedisCluster) -> LockClientBuilder {
    builder_for(Deployment::cluster(cluster.urls())).command_timeout(Duration::from_secs(1))
}

/// `N` clients of `cluster` with the settings of [`cluster_builder`].
pub async fn cluster_clients<const N: usize>(cluster: &RedisCluster) -> [LockClient; N] {
    connect_each(|| cluster_builder(cluster)).await
}

/// One lock name per master of `cluster`, with that master's index: names
/// `{prefix}:{i}` whose keys hash to each master in turn.
pub fn names_on_every_master(cluster: &RedisCluster, prefix: &str) -> Vec<(String, usize)> {
    let mut found: Vec<(String, usize)> = Vec::new();
    for i in 0.. {
        let name = format!("{prefix}:{i}");
        let master = cluster.master_for_key(&lock_key(&name));
        if found.iter().all(|(_, m)| *m != master) {
            found.push((name, master));
        }
        if found.len() == cluster.masters().len() {
            return found;
        }
    }
    unreachable!()
}

/// Starts a master with `replicas` replicas watched by `sentinels`
/// Sentinels (see [`SentinelGroup::start`]), off the runtime.
pub fn start_sentinel_group(replicas: usize, sentinels: usize) -> SentinelGroup {
    blocking(|| SentinelGroup::start(replicas, sentinels))
}

/// The settings of Sentinel test clients: those of [`builder_for`] with a
/// 1 s command timeout and a 300 ms replica timeout.
pub fn sentinel_builder(group: &SentinelGroup) -> LockClientBuilder {
    builder_for(Deployment::sentinel(
        group.sentinel_urls(),
        group.service_name(),
    ))
    .command_timeout(Duration::from_secs(1))
    .replica_timeout(Duration::from_millis(300))
}

/// The settings of Redlock test clients over `masters` (independent
/// servers, e.g. from `RedisServer::start_many`): those of [`builder_for`].
pub fn redlock_builder(masters: &[RedisServer]) -> LockClientBuilder {
    builder_for(Deployment::redlock(masters.iter().map(RedisServer::url)))
}

/// The Redis key of the lock `name` (see the layout in keys.rs).
pub fn lock_key(name: &str) -> String {
    format!("lock:{{{name}}}")
}

/// Waits, up to `bound`, until the line of fair waiters for `name` holds
/// `count` of them.
pub async fn until_in_line(server: &RedisServer, name: &str, count: &str, bound: Duration) {
    let queue = format!("{}:queue", lock_key(name));
    within(server, bound, &format!("{count} in line"), async {
        while server.cli(&["ZCARD", &queue]) != count {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

/// Runs `fut`, failing the test with the server log if it takes longer than `limit`.
pub async fn within<T>(
    server: &RedisServer,
    limit: Duration,
    what: &str,
    fut: impl Future<Output = T>,
) -> T {
    match tokio::time::timeout(limit, fut).await {
        Ok(out) => out,
        Err(_) => panic!(
            "{what} took longer than {limit:?}\nserver log:\n{}",
            server.log()
        ),
    }
}

/// Polls `done` every 20 ms until it holds, failing after `limit`: for
/// tests that wait for an event rather than sleep.
pub async fn until(limit: Duration, what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !done().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Unwraps a lock result, with the server log in the failure message.
pub fn ok<T>(server: &RedisServer, result: Result<T, LockError>) -> T {
    result.unwrap_or_else(|err| panic!("unexpected error: {err}\nserver log:\n{}", server.log()))
}

/// One field (`calls`, `failed_calls`, ...) of `command`'s line in the
/// server's `INFO commandstats` (0 without one).
pub fn command_stat(server: &RedisServer, command: &str, name: &str) -> u64 {
    stat_in(&command_stats(server), command, name)
}

/// How many times the server ran `command` since the last `CONFIG
/// RESETSTAT`, not counting refusals: rejected before running (counted
/// apart), or failed (the NOSCRIPT, or the function not found, that makes
/// the client load a script or the library on first use).
pub fn ran(server: &RedisServer, command: &str) -> u64 {
    ran_in(&command_stats(server), command)
}

/// Script calls the server ran since the last `CONFIG RESETSTAT`, by FCALL
/// or EVALSHA (Redis 6.2, or a server refusing functions), not counting
/// refusals (see [`ran`]).
pub fn scripts_ran(server: &RedisServer) -> u64 {
    let stats = command_stats(server);
    ran_in(&stats, "fcall") + ran_in(&stats, "evalsha")
}

/// The server's `INFO commandstats`, read once for every figure taken
/// from it: one moment's counts (and one INFO, which it counts too).
fn command_stats(server: &RedisServer) -> String {
    server.cli(&["INFO", "commandstats"])
}

/// `command`'s calls in `stats` less its failed ones (see [`ran`]).
fn ran_in(stats: &str, command: &str) -> u64 {
    stat_in(stats, command, "calls").saturating_sub(stat_in(stats, command, "failed_calls"))
}

/// One field of `command`'s line in `stats` (0 without one).
fn stat_in(stats: &str, command: &str, name: &str) -> u64 {
    let prefix = format!("cmdstat_{command}:");
    stats
        .lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|fields| {
            fields
                .split(',')
                .find_map(|field| field.strip_prefix(name)?.strip_prefix('='))
        })
        .map_or(0, |n| n.parse().expect("a number"))
}

/// Environment of a holder child process: the server URL and the lock name.
pub const HOLDER_URL: &str = "LOCK_TEST_HOLDER_URL";
pub const HOLDER_NAME: &str = "LOCK_TEST_HOLDER_NAME";

/// The URL and lock name when this process runs as a holder child.
pub fn holder_env() -> Option<(String, String)> {
    Some((
        std::env::var(HOLDER_URL).ok()?,
        std::env::var(HOLDER_NAME).ok()?,
    ))
}

/// In a holder child process (see [`spawn_holder`]): a client of the
/// parent's server with the default settings, and the lock name to take.
/// `None` when the test runs on its own rather than as a child: it should
/// return at once.
pub async fn holder_client() -> Option<(LockClient, String)> {
    let (url, name) = holder_env()?;
    let locks = LockClient::connect(&url).await.expect("connect");
    Some((locks, name))
}

/// Re-runs this test binary's ignored test `test` as a child process that
/// takes the lock `name`, and waits until it prints `HELD <fence>`.
pub fn spawn_holder(server: &RedisServer, test: &str, name: &str) -> (std::process::Child, u64) {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--ignored", "--nocapture"])
        .env(HOLDER_URL, server.url())
        .env(HOLDER_NAME, name)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn holder");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let held = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|line| line.starts_with("HELD "))
        .unwrap_or_else(|| panic!("holder never took the lock\n{}", server.log()));
    (child, held[5..].parse().unwrap())
}

/// Tries `name` once with `locks` until the store answers (a restarted
/// server refuses connections for a moment): the first answer that is not
/// "unavailable".
pub async fn try_once_when_up(locks: &LockClient, name: &str) -> Result<LockGuard, LockError> {
    loop {
        match locks.lock(name).wait(Duration::ZERO).acquire().await {
            Err(err) if err.is_unavailable() => tokio::time::sleep(Duration::from_millis(50)).await,
            other => return other,
        }
    }
}

/// Runs `request.acquire()` in a task of its own; resolves to when it
/// returned and what.
pub fn spawn_acquire(
    request: LockRequest,
) -> tokio::task::JoinHandle<(std::time::Instant, Result<LockGuard, LockError>)> {
    tokio::spawn(async move {
        let outcome = request.acquire().await;
        (std::time::Instant::now(), outcome)
    })
}

/// What [`contend`] saw.
#[derive(Debug, Default)]
pub struct Contention {
    /// Times a body started while another was inside.
    pub overlaps: usize,
    /// The counter every body incremented by read, yield, write.
    pub count: u64,
    /// Fencing tokens in the order the bodies ran.
    pub fences: Vec<u64>,
    /// Acquisitions that failed (each error's text).
    pub errors: Vec<String>,
}

/// `tasks` tasks spread over `clients` each take the lock `name` `rounds`
/// times and increment a shared counter inside by read, yield, write, which
/// only mutual exclusion keeps exact. Failed acquisitions are counted, not
/// fatal, so that tests with faults can run through them.
pub async fn contend(
    clients: &[LockClient],
    name: &str,
    tasks: usize,
    rounds: usize,
    lease: Duration,
) -> Contention {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    let seen = Arc::new(Mutex::new(Contention::default()));
    let inside = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for task in 0..tasks {
        let locks = clients[task % clients.len()].clone();
        let (name, seen, inside) = (name.to_owned(), seen.clone(), inside.clone());
        handles.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let guard = match locks
                    .lock(name.as_str())
                    .lease(lease)
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                {
                    Ok(guard) => guard,
                    Err(err) => {
                        seen.lock().unwrap().errors.push(err.to_string());
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    seen.lock().unwrap().overlaps += 1;
                }
                let count = {
                    let mut seen = seen.lock().unwrap();
                    seen.fences.push(guard.fence());
                    seen.count
                };
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_micros(300)).await;
                seen.lock().unwrap().count = count + 1;
                inside.fetch_sub(1, Ordering::SeqCst);
                let _ = guard.release().await;
            }
        }));
    }
    for handle in handles {
        handle.await.expect("task panicked");
    }
    Arc::try_unwrap(seen)
        .expect("tasks are done")
        .into_inner()
        .unwrap()
}
