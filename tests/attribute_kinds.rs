//! The kinds of lock `#[distributed_lock]` takes besides a plain `key`,
//! against a real `redis-server`, through annotated functions only:
//! several keys at once (`keys`), semaphores (`permits`), read-write locks
//! (`mode`) and fair locks (`fair`).
//!
//! Every test starts its own server and names its clients with
//! `client = ...`; none touches the process-wide default client.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_runtime::{LockClient, LockError, distributed_lock};
use lock_testkit::{RedisServer, unique_key};
mod support;

use support::{connect, free_now, promptly, redis_key};
use tokio::sync::{Barrier, oneshot};

// ---------------------------------------------------------------------------
// keys = [...]

/// Accounts in memory, with a flag per account that is set while a
/// transfer touches it: a second transfer touching it at the same time
/// fails the test, and so does a lost update.
#[derive(Default)]
struct Ledger {
    balances: Mutex<HashMap<String, i64>>,
    busy: Mutex<HashMap<String, Arc<AtomicBool>>>,
}

impl Ledger {
    fn open(&self, account: &str, balance: i64) {
        self.balances
            .lock()
            .unwrap()
            .insert(account.to_owned(), balance);
        self.busy
            .lock()
            .unwrap()
            .insert(account.to_owned(), Arc::default());
    }

    fn balance(&self, account: &str) -> i64 {
        self.balances.lock().unwrap()[account]
    }

    fn busy(&self, account: &str) -> Arc<AtomicBool> {
        self.busy.lock().unwrap()[account].clone()
    }

    /// A read-modify-write spread over an await point: it loses updates
    /// unless the locks exclude other transfers of the same accounts.
    async fn add(&self, account: &str, cents: i64) {
        let before = self.balance(account);
        tokio::task::yield_now().await;
        self.balances
            .lock()
            .unwrap()
            .insert(account.to_owned(), before + cents);
    }
}

#[distributed_lock(keys = ["account:<from>", "account:<to>"], client = locks, wait = "30s")]
async fn transfer(
    locks: &LockClient,
    ledger: &Ledger,
    from: &str,
    to: &str,
    cents: i64,
) -> Result<Vec<String>, LockError> {
    let held: Vec<String> = lock_runtime::current_locks()
        .into_iter()
        .map(|lock| lock.name)
        .collect();
    let mut accounts = vec![from, to];
    accounts.dedup();
    let flags: Vec<_> = accounts
        .iter()
        .map(|account| ledger.busy(account))
        .collect();
    for (account, flag) in accounts.iter().zip(&flags) {
        assert!(
            !flag.swap(true, Ordering::SeqCst),
            "two transfers touch `{account}` at once"
        );
    }
    ledger.add(from, -cents).await;
    ledger.add(to, cents).await;
    for flag in &flags {
        flag.store(false, Ordering::SeqCst);
    }
    Ok(held)
}

#[distributed_lock(keys = ["account:<from>", "account:<to>"], client = locks, wait = "0s")]
async fn try_transfer(
    locks: &LockClient,
    ledger: &Ledger,
    from: &str,
    to: &str,
    cents: i64,
) -> Result<(), LockError> {
    ledger.add(from, -cents).await;
    ledger.add(to, cents).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_in_opposite_orders_never_deadlock_and_lose_no_update() {
    const ROUNDS: i64 = 500;
    let server = RedisServer::start();
    let (a, b) = (unique_key("a"), unique_key("b"));
    let ledger = Arc::new(Ledger::default());
    ledger.open(&a, 10_000);
    ledger.open(&b, 10_000);

    // Two instances with their own clients: one moves 3 from a to b, the
    // other 2 from b to a, each naming the accounts in its own order.
    let mut tasks = Vec::new();
    for (from, to, cents) in [(a.clone(), b.clone(), 3), (b.clone(), a.clone(), 2)] {
        let locks = connect(&server).await;
        let ledger = ledger.clone();
        tasks.push(tokio::spawn(async move {
            let mut held = Vec::new();
            for _ in 0..ROUNDS {
                held = transfer(&locks, &ledger, &from, &to, cents).await?;
            }
            Ok::<_, LockError>(held)
        }));
    }
    let mut expected = vec![format!("account:{a}"), format!("account:{b}")];
    expected.sort();
    for task in tasks {
        let held = promptly("the transfers", task)
            .await
            .expect("task panicked")
            .unwrap_or_else(|err| panic!("transfer failed: {err}\n{}", server.log()));
        assert_eq!(held, expected, "current_locks() inside the body");
    }

    assert_eq!(ledger.balance(&a), 10_000 - 3 * ROUNDS + 2 * ROUNDS);
    assert_eq!(ledger.balance(&b), 10_000 + 3 * ROUNDS - 2 * ROUNDS);
    let locks = connect(&server).await;
    for account in [&a, &b] {
        free_now(&locks, &format!("account:{account}")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_twice_is_one_lock() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let a = unique_key("a");
    let ledger = Ledger::default();
    ledger.open(&a, 100);

    let held = promptly("a transfer to the same account", async {
        transfer(&locks, &ledger, &a, &a, 7).await
    })
    .await
    .expect("transfer to the same account");
    assert_eq!(held, [format!("account:{a}")]);
    assert_eq!(ledger.balance(&a), 100);
    assert_eq!(
        server.cli(&["EXISTS", &redis_key(&format!("account:{a}"))]),
        "0",
        "released when the function returned"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_taken_all_or_none() {
    let server = RedisServer::start();
    let (locks, other) = (connect(&server).await, connect(&server).await);
    let (a, b) = (unique_key("a"), unique_key("b"));
    let ledger = Ledger::default();
    ledger.open(&a, 100);
    ledger.open(&b, 100);

    let held_b = other
        .lock(format!("account:{b}"))
        .acquire()
        .await
        .expect("hold b");
    let result = try_transfer(&locks, &ledger, &a, &b, 10).await;
    assert!(
        result.as_ref().is_err_and(LockError::is_timeout),
        "{result:?}"
    );
    assert_eq!(ledger.balance(&a), 100, "the body ran without every lock");
    // The free one was not taken and left behind.
    free_now(&other, &format!("account:{a}")).await;

    held_b.release().await.expect("release b");
    try_transfer(&locks, &ledger, &a, &b, 10)
        .await
        .expect("both free");
    assert_eq!((ledger.balance(&a), ledger.balance(&b)), (90, 110));
}

// ---------------------------------------------------------------------------
// permits = N

/// How many bodies run at once, and the most seen.
#[derive(Default)]
struct Occupancy {
    inside: AtomicU32,
    most: AtomicU32,
}

impl Occupancy {
    fn enter(&self) -> u32 {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        now
    }

    fn leave(&self) {
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

#[distributed_lock(key = "exports:<region>", permits = 2, client = locks, wait = "30s")]
async fn export(
    locks: LockClient,
    region: String,
    occupancy: Arc<Occupancy>,
    pair: Arc<Barrier>,
) -> Result<(), LockError> {
    let now = occupancy.enter();
    assert!(now <= 2, "{now} holders of a semaphore with 2 permits");
    // Each body waits for a second holder: this only ends if two bodies
    // hold a permit at the same time.
    promptly("a second holder", pair.wait()).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    occupancy.leave();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_let_in_at_most_that_many_at_once() {
    let server = RedisServer::start();
    let region = unique_key("eu");
    let occupancy = Arc::new(Occupancy::default());
    let pair = Arc::new(Barrier::new(2));

    let mut tasks = Vec::new();
    for _ in 0..2 {
        let locks = connect(&server).await;
        for _ in 0..3 {
            tasks.push(tokio::spawn(export(
                locks.clone(),
                region.clone(),
                occupancy.clone(),
                pair.clone(),
            )));
        }
    }
    for task in tasks {
        promptly("the exports", task)
            .await
            .expect("task panicked")
            .unwrap_or_else(|err| panic!("export failed: {err}\n{}", server.log()));
    }
    assert_eq!(occupancy.most.load(Ordering::SeqCst), 2);
    assert_eq!(occupancy.inside.load(Ordering::SeqCst), 0);
}

// ---------------------------------------------------------------------------
// mode = "read" / "write"

/// Readers and writers inside one read-write lock right now.
#[derive(Default)]
struct ReadWrite {
    readers: Occupancy,
    writers: Occupancy,
}

#[distributed_lock(key = "catalog:<name>", mode = "read", client = locks, wait = "30s")]
async fn read_catalog(
    locks: LockClient,
    name: String,
    seen: Arc<ReadWrite>,
    together: Option<Arc<Barrier>>,
) -> Result<(), LockError> {
    seen.readers.enter();
    assert_eq!(
        seen.writers.inside.load(Ordering::SeqCst),
        0,
        "a reader inside with a writer"
    );
    if let Some(together) = together {
        promptly("the other readers", together.wait()).await;
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(
        seen.writers.inside.load(Ordering::SeqCst),
        0,
        "a writer came in while a reader was inside"
    );
    seen.readers.leave();
    Ok(())
}

#[distributed_lock(key = "catalog:<name>", mode = "write", client = locks, wait = "30s")]
async fn write_catalog(
    locks: LockClient,
    name: String,
    seen: Arc<ReadWrite>,
) -> Result<(), LockError> {
    write_alone(&seen).await;
    Ok(())
}

/// The write side is the plain lock: `key` alone excludes readers too.
#[distributed_lock(key = "catalog:<name>", client = locks, wait = "30s")]
async fn rebuild_catalog(
    locks: LockClient,
    name: String,
    seen: Arc<ReadWrite>,
) -> Result<(), LockError> {
    write_alone(&seen).await;
    Ok(())
}

async fn write_alone(seen: &ReadWrite) {
    let writers = seen.writers.enter();
    assert_eq!(writers, 1, "two writers at once");
    assert_eq!(
        seen.readers.inside.load(Ordering::SeqCst),
        0,
        "a writer inside with readers"
    );
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(
        seen.readers.inside.load(Ordering::SeqCst),
        0,
        "a reader came in while a writer was inside"
    );
    seen.writers.leave();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_the_lock_and_writers_hold_it_alone() {
    const READERS: usize = 4;
    let server = RedisServer::start();
    let name = unique_key("catalog");
    let seen = Arc::new(ReadWrite::default());
    let clients = [connect(&server).await, connect(&server).await];

    // Readers overlap: each waits inside for all the others.
    let together = Arc::new(Barrier::new(READERS));
    let readers: Vec<_> = (0..READERS)
        .map(|i| {
            tokio::spawn(read_catalog(
                clients[i % 2].clone(),
                name.clone(),
                seen.clone(),
                Some(together.clone()),
            ))
        })
        .collect();
    for reader in readers {
        promptly("the readers", reader)
            .await
            .expect("reader panicked")
            .expect("reader");
    }
    assert_eq!(seen.readers.most.load(Ordering::SeqCst), READERS as u32);

    // Readers and writers mixed, across two clients: a writer is always
    // alone, and readers never see one.
    let mut tasks = Vec::new();
    for i in 0..6 {
        let (locks, name, seen) = (clients[i % 2].clone(), name.clone(), seen.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..10 {
                match (i, round % 3) {
                    (0 | 1, 0) => write_catalog(locks.clone(), name.clone(), seen.clone()).await?,
                    (0 | 1, _) => {
                        rebuild_catalog(locks.clone(), name.clone(), seen.clone()).await?
                    }
                    _ => read_catalog(locks.clone(), name.clone(), seen.clone(), None).await?,
                }
            }
            Ok::<_, LockError>(())
        }));
    }
    for task in tasks {
        promptly("readers and writers", task)
            .await
            .expect("task panicked")
            .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    }
    assert_eq!(seen.writers.most.load(Ordering::SeqCst), 1);
    free_now(&clients[0], &format!("catalog:{name}")).await;
}

#[distributed_lock(key = "catalog:<name>", mode = "read", client = locks, wait = "0s")]
async fn read_at_once(locks: &LockClient, name: &str) -> Result<u64, LockError> {
    Ok(lock_runtime::current().expect("inside").fence)
}

#[distributed_lock(key = "catalog:<name>", mode = "write", client = locks, wait = "30s")]
async fn write_then_read(locks: &LockClient, name: &str) -> Result<(), LockError> {
    // The writer reads without waiting for itself...
    read_at_once(locks, name).await?;
    // ...while another task cannot read until the writer is done.
    let (other, name) = (locks.clone(), name.to_owned());
    let outside = tokio::spawn(async move { read_at_once(&other, &name).await })
        .await
        .expect("join");
    assert!(outside.is_err_and(|err| err.is_timeout()));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_may_read_its_own_lock() {
    let server = RedisServer::start();
    let locks = connect(&server).await;
    let name = unique_key("catalog");
    promptly("the writer", write_then_read(&locks, &name))
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    read_at_once(&locks, &name)
        .await
        .expect("free for readers again");
    free_now(&locks, &format!("catalog:{name}")).await;
}

// ---------------------------------------------------------------------------
// fair = true

type Entries = Arc<Mutex<Vec<usize>>>;

#[distributed_lock(key = "printer:<name>", fair = true, client = locks, wait = "30s")]
async fn print(
    locks: LockClient,
    name: String,
    who: usize,
    entries: Entries,
    hold: Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>,
) -> Result<(), LockError> {
    entries.lock().unwrap().push(who);
    if let Some((entered, release)) = hold {
        let _ = entered.send(());
        let _ = release.await;
    }
    tokio::task::yield_now().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_locks_are_taken_in_arrival_order() {
    const WAITERS: usize = 6;
    let server = RedisServer::start();
    let name = unique_key("printer");
    let clients = [connect(&server).await, connect(&server).await];
    let entries = Entries::default();

    let (entered, holding) = oneshot::channel();
    let (release, released) = oneshot::channel();
    let holder = tokio::spawn(print(
        clients[0].clone(),
        name.clone(),
        0,
        entries.clone(),
        Some((entered, released)),
    ));
    promptly("the first holder", holding)
        .await
        .expect("holder entered");

    // Waiters from both clients arrive one after the other while the lock
    // is held: each is started once the one before it is in line.
    let queue = format!("{}:queue", redis_key(&format!("printer:{name}")));
    let mut waiters = Vec::new();
    for who in 1..=WAITERS {
        waiters.push(tokio::spawn(print(
            clients[who % 2].clone(),
            name.clone(),
            who,
            entries.clone(),
            None,
        )));
        promptly("a waiter getting in line", async {
            while server.cli(&["ZCARD", &queue]) != who.to_string() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
    }

    release.send(()).expect("holder waiting");
    for task in std::iter::once(holder).chain(waiters) {
        promptly("the fair lock's holders", task)
            .await
            .expect("task panicked")
            .unwrap_or_else(|err| panic!("{err}\n{}", server.log()));
    }
    assert_eq!(
        *entries.lock().unwrap(),
        (0..=WAITERS).collect::<Vec<_>>(),
        "entry order"
    );
}
