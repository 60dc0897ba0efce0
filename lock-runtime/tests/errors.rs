//! Bad days give clear errors in bounded time, never panics.

mod common;

use std::time::{Duration, Instant};

use common::{client, lock_key, ok, start_server_with_clients, within};
use lock_runtime::{LockClient, LockError};
use lock_testkit::{RedisServer, free_port, unique_key};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_redis_fails_to_connect_in_bounded_time() {
    let port = free_port();
    let started = Instant::now();
    let err = LockClient::builder(format!("redis://127.0.0.1:{port}"))
        .connect_timeout(Duration::from_millis(500))
        .connect()
        .await
        .expect_err("nothing listens there");
    assert!(err.is_unavailable(), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_an_auth_error() {
    let server = RedisServer::start_with(&["--requirepass", "right"]);
    let url = format!("redis://:wrong@127.0.0.1:{}/", server.port());
    let started = Instant::now();
    let err = LockClient::connect(&url).await.expect_err("wrong password");
    assert!(matches!(err, LockError::Auth { .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(10));

    let missing = LockClient::connect(server.url())
        .await
        .expect_err("no password");
    assert!(matches!(missing, LockError::Auth { .. }), "{missing:?}");

    let url = format!("redis://:right@127.0.0.1:{}/", server.port());
    let locks = LockClient::connect(&url).await.expect("right password");
    let guard = ok(&server, locks.lock("with-auth").acquire().await);
    ok(&server, guard.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_number_comes_from_the_url() {
    let server = RedisServer::start();
    let locks = LockClient::connect(format!("{}3", server.url()))
        .await
        .expect("connect");
    let name = unique_key("db");
    let guard = ok(&server, locks.lock(name.as_str()).acquire().await);
    assert_eq!(
        server.cli(&["EXISTS", &lock_key(&name)]),
        "0",
        "not in db 0"
    );
    assert_eq!(server.cli(&["DBSIZE"]), "0");
    ok(&server, guard.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_key_holding_a_string_is_a_wrong_type_error() {
    let (server, [locks]) = start_server_with_clients().await;
    let name = unique_key("string");
    server.cli(&["SET", &lock_key(&name), "not a lock"]);
    let err = locks
        .lock(name.as_str())
        .acquire()
        .await
        .expect_err("not a lock");
    assert!(matches!(err, LockError::WrongType { .. }), "{err:?}");
    assert_eq!(err.key(), Some(name.as_str()));
    assert!(err.to_string().contains(&name), "{err}");
    assert_eq!(server.cli(&["GET", &lock_key(&name)]), "not a lock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_replica_is_a_read_only_error() {
    // A replica of a master that does not exist still refuses writes.
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &free_port().to_string()]);
    let locks = client(&replica).await;
    let err = locks
        .lock("on-replica")
        .acquire()
        .await
        .expect_err("read-only");
    assert!(matches!(err, LockError::ReadOnly { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_makes_acquire_time_out_not_hang() {
    let (server, [locks]) = start_server_with_clients().await;
    server.pause();
    // Trying once: fails after the 500 ms command timeout.
    let started = Instant::now();
    let once = locks.lock("paused").wait(Duration::ZERO).acquire().await;
    assert!(
        matches!(once, Err(LockError::CommandTimeout { .. })),
        "{once:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // Waiting: keeps trying for the wait, then reports why it failed.
    let started = Instant::now();
    let waited = locks
        .lock("paused")
        .wait(Duration::from_secs(1))
        .acquire()
        .await;
    server.resume();
    assert!(
        matches!(waited, Err(LockError::CommandTimeout { .. })),
        "{waited:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    // Once the server answers again, so does the client.
    let guard = ok(
        &server,
        locks
            .lock("paused")
            .wait(Duration::from_secs(5))
            .acquire()
            .await,
    );
    ok(&server, guard.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_names_and_settings_are_config_errors() {
    let (server, [locks]) = start_server_with_clients().await;
    assert!(matches!(
        locks.lock("").acquire().await,
        Err(LockError::Config(_))
    ));
    let short = locks
        .lock("k")
        .lease(Duration::from_millis(10))
        .acquire()
        .await;
    assert!(matches!(short, Err(LockError::Config(_))));
    let braces = LockClient::builder(server.url())
        .prefix("a{b}")
        .connect()
        .await;
    assert!(matches!(braces, Err(LockError::Config(_))));
    let url = LockClient::connect("http://nope").await;
    assert!(matches!(url, Err(LockError::Config(_))), "{url:?}");
    // `WAIT` counts whole milliseconds, and `WAIT n 0` waits without end:
    // a replica timeout under 1 ms is refused, also for a client whose
    // requests name their own replicas.
    for min_replicas in [1, 0] {
        for timeout in [Duration::ZERO, Duration::from_micros(500)] {
            let refused = LockClient::builder(server.url())
                .min_replicas(min_replicas)
                .replica_timeout(timeout)
                .connect()
                .await;
            assert!(
                matches!(&refused, Err(LockError::Config(m)) if m.contains("replica_timeout")),
                "{timeout:?}: {refused:?}"
            );
        }
    }
}

/// A restart quarantine of `Duration::MAX` is taken as a year: on a server
/// that just started, the first lock of a slot leaves a marker for the
/// quarantine's length, which Redis takes in whole milliseconds (past 2^53
/// ms, the script wrote it as a float, and Redis refused it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_quarantine_too_long_for_redis_is_taken_as_a_year() {
    let server = RedisServer::start();
    let locks = LockClient::builder(server.url())
        .restart_quarantine(Duration::MAX)
        .connect()
        .await;
    let locks = ok(&server, locks);
    let name = unique_key("long-quarantine");
    let guard = ok(
        &server,
        locks
            .lock(name.as_str())
            .wait(Duration::ZERO)
            .acquire()
            .await,
    );
    ok(&server, guard.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_too_long_for_the_clock_mean_no_limit_not_a_panic() {
    // `Duration::MAX` for "no limit" overflows the clock, and the WAIT
    // after each acquisition takes its timeout in milliseconds.
    let master = RedisServer::start();
    let replica =
        RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
    within(
        &replica,
        Duration::from_secs(10),
        "the replica's sync",
        async {
            while !replica
                .cli(&["INFO", "replication"])
                .contains("master_link_status:up")
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        },
    )
    .await;
    let locks = LockClient::builder(master.url())
        .connect_timeout(Duration::MAX)
        .command_timeout(Duration::MAX)
        .replica_timeout(Duration::MAX)
        .min_replicas(1)
        .connect()
        .await;
    let locks = ok(&master, locks);
    let name = unique_key("no-limit");
    let guard = ok(&master, locks.lock(name.as_str()).acquire().await);
    assert_eq!(replica.cli(&["EXISTS", &lock_key(&name)]), "1");
    ok(&master, guard.release().await);
}

/// `WAIT` is given the replica timeout on top of the command timeout: with
/// no replica to confirm a grant, an acquisition fails as not replicated
/// after the replica timeout, not as unanswered at the command timeout
/// (which then also read replicas that confirm between the two as a lost
/// answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_timeout_longer_than_the_command_timeout_is_waited_for() {
    let server = RedisServer::start();
    let locks = LockClient::builder(server.url())
        .command_timeout(Duration::from_millis(500))
        .replica_timeout(Duration::from_millis(1500))
        .connect()
        .await;
    let locks = ok(&server, locks);
    // The server has the library's functions before the call that waits.
    let warm = ok(&server, locks.lock("warm-up").acquire().await);
    ok(&server, warm.release().await);
    let name = unique_key("wait-longer");
    let started = Instant::now();
    let outcome = locks
        .lock(name.as_str())
        .min_replicas(1)
        .wait(Duration::ZERO)
        .acquire()
        .await;
    let took = started.elapsed();
    assert!(
        matches!(outcome, Err(LockError::NotReplicated { .. })),
        "{outcome:?} after {took:?}"
    );
    assert!(took >= Duration::from_millis(1400), "{took:?}");
    // The grant no replica confirmed was given back.
    assert_eq!(server.cli(&["EXISTS", &lock_key(&name)]), "0");
}

/// A `WAIT` that Redis refuses (here an ACL without it) after the script
/// granted the lock: the grant is given back, and the refusal is the
/// error. The grant stayed taken for its whole lease before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_wait_gives_the_grant_back() {
    let (server, [locks]) = start_server_with_clients().await;
    let warm = ok(&server, locks.lock("warm-up").acquire().await);
    ok(&server, warm.release().await);
    server.cli(&["ACL", "SETUSER", "default", "-wait"]);
    let name = unique_key("wait-refused");
    let outcome = locks
        .lock(name.as_str())
        .min_replicas(1)
        .lease(Duration::from_secs(20))
        .wait(Duration::ZERO)
        .acquire()
        .await;
    assert!(
        matches!(&outcome, Err(LockError::Auth { .. })),
        "{:?}",
        outcome.map(drop)
    );
    assert_eq!(server.cli(&["EXISTS", &lock_key(&name)]), "0");
}
