//! Shared set-up for the integration tests: every test starts its own
//! `redis-server` (lock-testkit) and connects clients to it.
#![allow(dead_code)] // each test binary uses a different part

use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockGuard, LockRequest};
use lock_testkit::RedisServer;

/// A client with timeouts suited to tests that pause and kill the server.
pub async fn client(server: &RedisServer) -> LockClient {
    builder(server).connect().await.expect("connect")
}

pub fn builder(server: &RedisServer) -> lock_runtime::LockClientBuilder {
    LockClient::builder(server.url())
        .connect_timeout(Duration::from_secs(1))
        .command_timeout(Duration::from_millis(500))
        .restart_quarantine(QUARANTINE)
}

/// The restart quarantine of test clients: longer than their leases.
pub const QUARANTINE: Duration = Duration::from_secs(3);

/// The Redis key of the lock `name` (see the layout in keys.rs).
pub fn lock_key(name: &str) -> String {
    format!("lock:{{{name}}}")
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

/// Unwraps a lock result, with the server log in the failure message.
pub fn ok<T>(server: &RedisServer, result: Result<T, LockError>) -> T {
    result.unwrap_or_else(|err| panic!("unexpected error: {err}\nserver log:\n{}", server.log()))
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
