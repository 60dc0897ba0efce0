//! `#[distributed_lock(min_replicas = N)]` against a real master with one
//! replica: the body runs once the replica has the lock; with the replica
//! paused, the call fails with `NotReplicated` and leaves no lock behind;
//! `min_replicas = 0` turns the client's `min_replicas` off.
//!
//! Every test starts its own master and replica and names its client with
//! `client = ...`, so the tests can run in parallel.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use lock_runtime::{LockClient, LockError, distributed_lock};
use lock_testkit::{RedisServer, unique_key};
mod support;

use support::{connect, redis_key};

/// How long the master's `WAIT` gives the replica to confirm a lock: short,
/// so that a paused replica costs little time.
const REPLICA_TIMEOUT: Duration = Duration::from_millis(200);

/// The `wait` of the replicated functions below, as a `Duration`.
const WAIT: Duration = Duration::from_secs(1);

/// A master and a replica of it, in sync.
struct Replicated {
    master: RedisServer,
    replica: RedisServer,
}

impl Replicated {
    /// Starts both, and waits until the replica has synced with the master.
    fn start() -> Replicated {
        let master = RedisServer::start();
        // Full syncs start at once, not after the default 5 s a diskless
        // sync waits for more replicas to join.
        assert_eq!(
            master.cli(&["CONFIG", "SET", "repl-diskless-sync-delay", "0"]),
            "OK"
        );
        let replica =
            RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let on_master = master.cli(&["INFO", "replication"]);
            let on_replica = replica.cli(&["INFO", "replication"]);
            if on_master.contains("connected_slaves:1")
                && on_replica.contains("master_link_status:up")
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the replica did not sync within 10 s\nmaster:\n{on_master}\nreplica:\n{on_replica}\n\
                 master log:\n{}\nreplica log:\n{}",
                master.log(),
                replica.log()
            );
            thread::sleep(Duration::from_millis(20));
        }
        Replicated { master, replica }
    }

    /// A client of the master with a short replica timeout, asking every
    /// lock for `min_replicas` replicas unless the lock names its own.
    async fn client(&self, min_replicas: u32) -> LockClient {
        LockClient::builder(self.master.url())
            .min_replicas(min_replicas)
            .replica_timeout(REPLICA_TIMEOUT)
            .connect()
            .await
            .unwrap_or_else(|err| panic!("connect: {err}\n{}", self.master.log()))
    }

    /// Pauses the replica until the returned value is dropped (also when
    /// the test fails).
    fn pause_replica(&self) -> Paused<'_> {
        self.replica.pause();
        Paused(&self.replica)
    }
}

struct Paused<'a>(&'a RedisServer);

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        self.0.resume();
    }
}

/// Whether `server` has the Redis key of the lock `name`; `false` when it
/// does not answer (a paused replica).
fn has_lock(server: &RedisServer, name: &str) -> bool {
    server
        .try_cli(&["EXISTS", &redis_key(name)], Duration::from_secs(1))
        .is_ok_and(|reply| reply == "1")
}

// ---------------------------------------------------------------------------

/// Runs once the replica has the lock; says whether the replica had the
/// lock's key while the body ran.
#[distributed_lock(key = "<name>", client = locks, min_replicas = 1, wait = "1s")]
async fn replicated(
    locks: &LockClient,
    name: &str,
    replica: &RedisServer,
    ran: &AtomicBool,
) -> Result<bool, LockError> {
    ran.store(true, Ordering::SeqCst);
    Ok(has_lock(replica, name))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_one_runs_once_the_replica_has_the_lock() {
    let pair = Replicated::start();
    let locks = pair.client(0).await;
    let name = unique_key("replicated");
    let ran = AtomicBool::new(false);

    let on_replica = replicated(&locks, &name, &pair.replica, &ran)
        .await
        .unwrap_or_else(|err| panic!("replicated: {err}\n{}", pair.master.log()));
    assert!(ran.load(Ordering::SeqCst));
    assert!(on_replica, "the replica has the lock while the body runs");
    assert!(
        !has_lock(&pair.master, &name),
        "released when the function returned"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_one_fails_within_its_wait_while_the_replica_is_paused() {
    let pair = Replicated::start();
    let locks = pair.client(0).await;
    let name = unique_key("unreplicated");
    let ran = AtomicBool::new(false);

    let paused = pair.pause_replica();
    let started = Instant::now();
    let result = replicated(&locks, &name, &pair.replica, &ran).await;
    let took = started.elapsed();
    match result {
        Err(LockError::NotReplicated {
            key,
            wanted,
            acked,
            after,
        }) => {
            assert_eq!(key.as_deref(), Some(name.as_str()));
            assert_eq!((wanted, acked), (1, 0));
            assert_eq!(after, REPLICA_TIMEOUT);
        }
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    assert!(!ran.load(Ordering::SeqCst), "the body did not run");
    // Retried within the wait: at least one more attempt after the first,
    // and done about when the wait is over (the last attempt may start just
    // before it ends and take one replica timeout, plus giving the lock back).
    assert!(took >= WAIT, "gave up after {took:?}, before the wait");
    assert!(
        took < WAIT + REPLICA_TIMEOUT + Duration::from_secs(2),
        "gave up only after {took:?}"
    );
    assert!(
        !has_lock(&pair.master, &name),
        "the unreplicated lock was given back on the master"
    );
    // Free for a client that does not ask for replicas, at once.
    let plain = connect(&pair.master).await;
    plain
        .lock(&name)
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect("the lock is free")
        .release()
        .await
        .expect("release");

    // Once the replica is back, the same call succeeds.
    drop(paused);
    let on_replica = replicated(&locks, &name, &pair.replica, &ran)
        .await
        .unwrap_or_else(|err| panic!("after resume: {err}\n{}", pair.replica.log()));
    assert!(on_replica && ran.load(Ordering::SeqCst));
}

// ---------------------------------------------------------------------------

/// `min_replicas = 0`: whatever the client asks for, no replica waits.
#[distributed_lock(key = "<name>", client = locks, min_replicas = 0, wait = "1s")]
async fn unreplicated(
    locks: &LockClient,
    name: &str,
    master: &RedisServer,
) -> Result<bool, LockError> {
    Ok(has_lock(master, name))
}

/// The client's `min_replicas` applies.
#[distributed_lock(key = "<name>", client = locks, wait = "1s")]
async fn client_default(locks: &LockClient, name: &str) -> Result<(), LockError> {
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_zero_turns_the_clients_setting_off() {
    let pair = Replicated::start();
    let locks = pair.client(1).await;
    let name = unique_key("off");

    let _paused = pair.pause_replica();
    let on_master = unreplicated(&locks, &name, &pair.master)
        .await
        .unwrap_or_else(|err| panic!("unreplicated: {err}\n{}", pair.master.log()));
    assert!(on_master, "the master has the lock while the body runs");
    assert!(!has_lock(&pair.master, &name), "released");

    // The client's own setting is in force without the option.
    match client_default(&locks, &name).await {
        Err(LockError::NotReplicated { wanted: 1, .. }) => {}
        other => panic!("expected NotReplicated from the client's min_replicas, got {other:?}"),
    }
    assert!(!has_lock(&pair.master, &name), "given back");
}
