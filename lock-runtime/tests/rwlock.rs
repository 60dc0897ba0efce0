//! Read-write locks: readers together, writers alone, writers not starved.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{lock_key, ok, start_server_with_clients, within};
use lock_runtime::LockError;
use lock_testkit::unique_key;

#[derive(Default)]
struct Checker {
    readers: AtomicUsize,
    writers: AtomicUsize,
    most_readers: AtomicUsize,
    violations: AtomicUsize,
}

impl Checker {
    fn enter_read(&self) {
        let now = self.readers.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_readers.fetch_max(now, Ordering::SeqCst);
        if self.writers.load(Ordering::SeqCst) != 0 {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn leave_read(&self) {
        self.readers.fetch_sub(1, Ordering::SeqCst);
    }
    fn enter_write(&self) {
        if self.writers.fetch_add(1, Ordering::SeqCst) != 0
            || self.readers.load(Ordering::SeqCst) != 0
        {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn leave_write(&self) {
        self.writers.fetch_sub(1, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_overlap_and_writers_are_alone() {
    let (server, clients) = start_server_with_clients::<2>().await;
    let name = unique_key("rw");
    let checker = Arc::new(Checker::default());
    let mut tasks = Vec::new();
    for task in 0..8 {
        let locks = clients[task % 2].clone();
        let (name, checker) = (name.clone(), checker.clone());
        let writer = task < 2;
        tasks.push(tokio::spawn(async move {
            for _ in 0..20 {
                if writer {
                    let guard = locks
                        .write_lock(name.as_str())
                        .wait(Duration::from_secs(30))
                        .acquire()
                        .await?;
                    checker.enter_write();
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    checker.leave_write();
                    guard.release().await?;
                } else {
                    let guard = locks
                        .read_lock(name.as_str())
                        .wait(Duration::from_secs(30))
                        .acquire()
                        .await?;
                    checker.enter_read();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    checker.leave_read();
                    guard.release().await?;
                }
            }
            Ok::<_, LockError>(())
        }));
    }
    within(
        &server,
        Duration::from_secs(60),
        "readers and writers",
        async {
            for task in tasks {
                ok(&server, task.await.unwrap());
            }
        },
    )
    .await;
    assert_eq!(
        checker.violations.load(Ordering::SeqCst),
        0,
        "a writer overlapped"
    );
    assert!(
        checker.most_readers.load(Ordering::SeqCst) > 1,
        "readers never overlapped"
    );
    for suffix in [
        "",
        ":readers",
        ":readers:holders",
        ":writer-waiting",
        ":readers-waiting",
    ] {
        assert_eq!(
            server.cli(&["EXISTS", &format!("{}{suffix}", lock_key(&name))]),
            "0"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stream_of_readers_does_not_starve_a_writer() {
    let (server, [readers, writer]) = start_server_with_clients().await;
    let name = unique_key("starve");
    let stop = Arc::new(AtomicBool::new(false));
    // Readers overlap one another so that, without writer preference, the
    // lock would never be free of readers.
    let stream = {
        let (readers, name, stop) = (readers.clone(), name.clone(), stop.clone());
        tokio::spawn(async move {
            let mut running = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let (readers, name) = (readers.clone(), name.clone());
                running.push(tokio::spawn(async move {
                    let guard = readers
                        .read_lock(name)
                        .wait(Duration::from_secs(30))
                        .acquire()
                        .await?;
                    tokio::time::sleep(Duration::from_millis(60)).await;
                    guard.release().await
                }));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            for reader in running {
                reader.await.unwrap()?;
            }
            Ok::<_, LockError>(())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let guard = ok(
        &server,
        writer
            .write_lock(name.as_str())
            .wait(Duration::from_secs(10))
            .acquire()
            .await,
    );
    let waited = started.elapsed();
    ok(&server, guard.release().await);
    stop.store(true, Ordering::SeqCst);
    ok(&server, stream.await.unwrap());
    assert!(waited < Duration::from_secs(3), "writer waited {waited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_lets_go_and_comes_back_lets_waiting_readers_in_first() {
    let (server, [readers, writer]) = start_server_with_clients().await;
    let name = unique_key("writer-loop");
    for _ in 0..5 {
        let guard = ok(&server, writer.write_lock(name.as_str()).acquire().await);
        let reading = {
            let request = readers
                .read_lock(name.as_str())
                .wait(Duration::from_secs(10));
            tokio::spawn(async move {
                let read = request.acquire().await?;
                let at = Instant::now();
                tokio::time::sleep(Duration::from_millis(20)).await;
                read.release().await?;
                Ok::<_, LockError>(at)
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Let go and ask again at once, as a writer in a loop would.
        ok(&server, guard.release().await);
        let again = ok(
            &server,
            writer
                .write_lock(name.as_str())
                .wait(Duration::from_secs(10))
                .acquire()
                .await,
        );
        let writer_back = Instant::now();
        let reader_in = ok(&server, reading.await.unwrap());
        assert!(
            reader_in < writer_back,
            "the writer took the lock straight back"
        );
        ok(&server, again.release().await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentry_downgrade_and_renewal() {
    let (server, [locks, other]) = start_server_with_clients().await;
    let name = unique_key("downgrade");
    let key = lock_key(&name);

    // Read re-entry keeps one place; the read lease is renewed.
    let read = ok(
        &server,
        locks
            .read_lock(name.as_str())
            .lease(Duration::from_secs(1))
            .acquire()
            .await,
    );
    read.scope(async {
        let again = ok(
            &server,
            locks
                .read_lock(name.as_str())
                .wait(Duration::ZERO)
                .acquire()
                .await,
        );
        assert_eq!(server.cli(&["ZCARD", &format!("{key}:readers")]), "1");
        assert_eq!(again.fence(), read.fence());
        ok(&server, again.release().await);
    })
    .await
    .expect("not lost");
    let shared = ok(
        &server,
        other
            .read_lock(name.as_str())
            .wait(Duration::ZERO)
            .acquire()
            .await,
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!read.is_lost());
    let blocked = other
        .write_lock(name.as_str())
        .wait(Duration::ZERO)
        .acquire()
        .await;
    assert!(blocked.expect_err("readers hold it").is_timeout());
    ok(&server, shared.release().await);
    ok(&server, read.release().await);

    // Downgrade: the writer takes the read lock, then lets go of writing.
    let write = ok(&server, locks.write_lock(name.as_str()).acquire().await);
    let reading = write
        .scope(async {
            let nested = ok(
                &server,
                locks
                    .write_lock(name.as_str())
                    .wait(Duration::ZERO)
                    .acquire()
                    .await,
            );
            assert_eq!(server.cli(&["HGET", &key, "count"]), "2");
            ok(&server, nested.release().await);
            ok(
                &server,
                locks
                    .read_lock(name.as_str())
                    .wait(Duration::ZERO)
                    .acquire()
                    .await,
            )
        })
        .await
        .expect("not lost");
    let no_reader = other
        .read_lock(name.as_str())
        .wait(Duration::ZERO)
        .acquire()
        .await;
    assert!(no_reader.expect_err("writer holds it").is_timeout());
    ok(&server, write.release().await);
    // Still reading: others may read, nobody may write.
    let reader = ok(
        &server,
        other
            .read_lock(name.as_str())
            .wait(Duration::ZERO)
            .acquire()
            .await,
    );
    let writer = other
        .write_lock(name.as_str())
        .wait(Duration::ZERO)
        .acquire()
        .await;
    assert!(writer.expect_err("still read").is_timeout());
    ok(&server, reader.release().await);
    ok(&server, reading.release().await);
    let writer = ok(
        &server,
        other
            .write_lock(name.as_str())
            .wait(Duration::ZERO)
            .acquire()
            .await,
    );
    ok(&server, writer.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_stops_waiting_takes_its_turn_back() {
    let (server, [locks]) = start_server_with_clients().await;
    let name = unique_key("reader-gives-up");
    let writer = ok(&server, locks.write_lock(name.as_str()).acquire().await);

    // A reader waiting behind the writer claims the next turn for readers,
    // then its caller stops waiting.
    let gave_up = tokio::time::timeout(
        Duration::from_millis(300),
        locks
            .read_lock(name.as_str())
            .wait(Duration::from_secs(60))
            .acquire(),
    )
    .await;
    assert!(gave_up.is_err(), "the reader got in past a writer");
    // Another reader dies while waiting (its future is never dropped, so
    // nothing takes its mark back): the mark lapses within its lease.
    let mut dead = Box::pin(
        locks
            .read_lock(name.as_str())
            .lease(Duration::from_secs(1))
            .wait(Duration::from_secs(60))
            .acquire(),
    );
    tokio::select! {
        _ = &mut dead => panic!("the reader got in past a writer"),
        _ = tokio::time::sleep(Duration::from_millis(300)) => {}
    }
    std::mem::forget(dead);
    ok(&server, writer.release().await);

    // No reader waits any more: a writer gets the free lock.
    let started = Instant::now();
    let next = locks
        .write_lock(name.as_str())
        .wait(Duration::from_secs(5))
        .acquire()
        .await;
    let next = ok(&server, next);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    ok(&server, next.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_stops_waiting_takes_its_turn_back() {
    let (server, [locks]) = start_server_with_clients().await;
    let name = unique_key("writer-gives-up");
    let reader = ok(&server, locks.read_lock(name.as_str()).acquire().await);

    // A writer waiting for the reader holds new readers back, then its
    // caller stops waiting.
    let gave_up = tokio::time::timeout(
        Duration::from_millis(300),
        locks
            .write_lock(name.as_str())
            .wait(Duration::from_secs(60))
            .acquire(),
    )
    .await;
    assert!(gave_up.is_err(), "the writer got in past a reader");

    // New readers are not held back for a writer that is gone.
    let started = Instant::now();
    let another = locks
        .read_lock(name.as_str())
        .wait(Duration::from_secs(2))
        .acquire()
        .await;
    let another = ok(&server, another);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    ok(&server, another.release().await);
    ok(&server, reader.release().await);
}

/// A reader upgrades to the fair write side (`fair_lock` on the name it
/// reads), as to the plain one: its own read place is not a reader in its
/// way; another reader is, and holds the upgrade back until it leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_upgrades_to_the_fair_write_side() {
    let (server, [locks, other]) = start_server_with_clients().await;
    let name = unique_key("fair-upgrade");
    let read = ok(&server, locks.read_lock(name.as_str()).acquire().await);
    read.scope(async {
        let upgrade = locks.fair_lock(name.as_str()).wait(Duration::ZERO);
        let writing = ok(&server, upgrade.acquire().await);
        let blocked = other
            .read_lock(name.as_str())
            .wait(Duration::ZERO)
            .acquire()
            .await;
        assert!(
            blocked
                .expect_err("the upgraded reader writes")
                .is_timeout()
        );
        ok(&server, writing.release().await);

        let reader = ok(&server, other.read_lock(name.as_str()).acquire().await);
        let upgrade = locks.fair_lock(name.as_str()).wait(Duration::ZERO);
        let held_back = upgrade.acquire().await;
        assert!(held_back.expect_err("another reader").is_timeout());
        ok(&server, reader.release().await);
        let upgrade = locks.fair_lock(name.as_str()).wait(Duration::from_secs(5));
        ok(
            &server,
            ok(&server, upgrade.acquire().await).release().await,
        );
    })
    .await
    .expect("not lost");
    ok(&server, read.release().await);
}

/// The lease of the holds in the tests of an upgrade's levels: longer than
/// any of them, so that nothing lapses on its own.
const LEASE: Duration = Duration::from_secs(30);

/// Upgrades to the write side of `name` (inside the scope of a read hold
/// of it) and counts one level more in Redis than guards here, as a
/// re-entry whose answer was lost does (written as the script writes it).
async fn upgrade_with_a_level_left(
    server: &lock_testkit::RedisServer,
    locks: &lock_runtime::LockClient,
    name: &str,
) -> lock_runtime::LockGuard {
    let write = locks.write_lock(name).lease(LEASE);
    let write = ok(server, write.wait(Duration::ZERO).acquire().await);
    server.cli(&["HINCRBY", &lock_key(name), "count", "1"]);
    write
}

/// Waits until the lock hash `key` is gone (its write side given back).
async fn until_given_back(server: &lock_testkit::RedisServer, key: &str) {
    within(
        server,
        Duration::from_secs(10),
        "the write side given back",
        async {
            while server.cli(&["EXISTS", key]) == "1" {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        },
    )
    .await;
}

/// An upgrade's last release gives back one level (the read hold it was
/// taken under may take the write side again, and a release reaching Redis
/// late must not free that). When levels are left in Redis (a re-entry
/// whose answer was lost counted one more there, written here as the
/// script writes it), the write side is given back whole once the read
/// hold is released, not left taken for its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_left_with_levels_is_given_back_with_the_read_hold() {
    let (server, [locks]) = start_server_with_clients().await;
    let name = unique_key("upgrade-levels");
    let key = lock_key(&name);
    let read = ok(
        &server,
        locks.read_lock(name.as_str()).lease(LEASE).acquire().await,
    );
    read.scope(async {
        let write = upgrade_with_a_level_left(&server, &locks, &name).await;
        ok(&server, write.release().await);
        // One level given back, one left: still taken, by nobody here.
        assert_eq!(server.cli(&["HGET", &key, "count"]), "1");
    })
    .await
    .expect("not lost");
    ok(&server, read.release().await);
    until_given_back(&server, &key).await;
    let writer = locks.write_lock(name.as_str()).wait(Duration::ZERO);
    ok(&server, ok(&server, writer.acquire().await).release().await);
}

/// A client of `server` through a proxy (to hold its calls back), with a
/// 300 ms command timeout.
async fn through_proxy(
    server: &lock_testkit::RedisServer,
) -> (lock_testkit::Proxy, lock_runtime::LockClient) {
    let proxy = lock_testkit::Proxy::start(server.port())
        .await
        .expect("proxy");
    let builder = common::builder_for(proxy.url().as_str());
    let locks = common::connect(builder.command_timeout(Duration::from_millis(300))).await;
    (proxy, locks)
}

/// As above, with the read hold's release sent while the upgrade's is on
/// its way (its caller gave up on it): the hold that would give back what
/// the upgrade's release left had already ended. The write side is given
/// back at once instead. It stayed taken by nobody for its lease before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_left_with_levels_after_the_read_hold_ended_is_given_back() {
    let server = lock_testkit::RedisServer::start();
    let (proxy, locks) = through_proxy(&server).await;
    let name = unique_key("upgrade-levels-late");
    let key = lock_key(&name);
    let read = ok(
        &server,
        locks.read_lock(name.as_str()).lease(LEASE).acquire().await,
    );
    read.scope(async {
        let write = upgrade_with_a_level_left(&server, &locks, &name).await;
        proxy.set_delay(Duration::from_millis(100));
        // Given up on: it goes on in a task of its own.
        let release = tokio::time::timeout(Duration::from_millis(10), write.release());
        assert!(release.await.is_err(), "the release was held back");
    })
    .await
    .expect("not lost");
    ok(&server, read.release().await);
    until_given_back(&server, &key).await;
}

/// A downgrade's write side kept until its minimum (`lock_at_least`) whose
/// release got no answer, given back with the read hold it was released
/// under, stays taken until that minimum. It was freed with the read hold
/// before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_left_held_keeps_its_minimum_when_given_back() {
    let server = lock_testkit::RedisServer::start();
    let (proxy, locks) = through_proxy(&server).await;
    let name = unique_key("downgrade-kept");
    let key = lock_key(&name);
    let write = locks
        .write_lock(name.as_str())
        .lease(Duration::from_secs(30));
    let write = ok(
        &server,
        write.lock_at_least(Duration::from_secs(20)).acquire().await,
    );
    let read = write
        .scope(async {
            locks
                .read_lock(name.as_str())
                .wait(Duration::ZERO)
                .acquire()
                .await
        })
        .await
        .expect("not lost");
    let read = ok(&server, read);
    // The write side's release runs only after its caller heard nothing.
    proxy.set_delay(Duration::from_millis(600));
    let released = write.release().await;
    assert!(released.is_err(), "{released:?}");
    proxy.set_delay(Duration::ZERO);
    within(&server, Duration::from_secs(5), "the late release", async {
        while server.cli(&["HGET", &key, "count"]) != "0" {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    ok(&server, read.release().await);
    // Given back whole with the read hold, and still kept until its minimum.
    within(&server, Duration::from_secs(5), "the give-back", async {
        while server.cli(&["KEYS", &format!("{key}:gone:*")]).is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let ttl: i64 = server.cli(&["PTTL", &key]).parse().unwrap();
    assert!(ttl > 10_000, "kept until its minimum: {ttl} ms left");
}
