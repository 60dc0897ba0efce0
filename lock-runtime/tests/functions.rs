//! Where the server has Redis Functions (Redis 7.0 and later, Valkey), the
//! scripts run as functions of one library, loaded again when the server
//! has lost it; where it has none or refuses them (Redis 6.2, an ACL, a
//! renamed command), as scripts by EVALSHA. Either way a server out of
//! memory still lets locks go.

mod common;

use std::time::Duration;

use common::{builder, builder_for, command_stat, connect, ran};
use lock_runtime::LockClient;
use lock_testkit::{RedisServer, unique_key};

/// The server's major version.
fn major(server: &RedisServer) -> u32 {
    let info = server.cli(&["INFO", "server"]);
    info.lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .and_then(|version| version.trim().split('.').next()?.parse().ok())
        .expect("a version")
}

/// Takes and gives back a fresh lock, `times` times.
async fn lock_and_unlock(locks: &LockClient, times: usize) {
    let name = unique_key("fn");
    for round in 0..times {
        let guard = locks
            .lock(format!("{name}:{round}"))
            .wait(Duration::ZERO)
            .acquire()
            .await
            .expect("acquire");
        guard.release().await.expect("release");
    }
}

/// The libraries loaded on `server`, by name.
fn libraries(server: &RedisServer) -> Vec<String> {
    let listed = server.cli(&["FUNCTION", "LIST"]);
    let mut lines = listed.lines();
    let mut names = Vec::new();
    while let Some(line) = lines.next() {
        if line.trim() == "library_name" {
            names.extend(lines.next().map(|name| name.trim().to_owned()));
        }
    }
    names
}

#[tokio::test]
async fn scripts_run_as_functions_of_one_library() {
    let server = RedisServer::start();
    let locks = connect(builder(&server)).await;
    lock_and_unlock(&locks, 3).await;
    if major(&server) < 7 {
        // No functions before Redis 7.0: every call is an EVALSHA.
        assert_eq!(ran(&server, "evalsha"), 6);
        return;
    }
    assert_eq!(ran(&server, "fcall"), 6, "one call each way");
    assert_eq!(ran(&server, "evalsha"), 0);
    let loaded = libraries(&server);
    assert_eq!(loaded.len(), 1, "{loaded:?}");
    assert!(loaded[0].starts_with("lockrt_"), "{loaded:?}");
}

#[tokio::test]
async fn a_library_the_server_lost_is_loaded_again() {
    let server = RedisServer::start();
    if major(&server) < 7 {
        return;
    }
    let locks = connect(builder(&server)).await;
    lock_and_unlock(&locks, 1).await;
    // As a restart without persistence, or an operator, would leave it.
    server.cli(&["FUNCTION", "FLUSH"]);
    assert!(libraries(&server).is_empty());
    lock_and_unlock(&locks, 2).await;
    assert_eq!(libraries(&server).len(), 1);
    assert_eq!(ran(&server, "evalsha"), 0, "still functions");
    assert_eq!(
        command_stat(&server, "fcall", "failed_calls"),
        2,
        "one miss per load"
    );
}

#[tokio::test]
async fn a_server_that_refuses_functions_runs_the_scripts() {
    if major(&RedisServer::start()) < 7 {
        return;
    }
    // FCALL unknown; FUNCTION unknown (FCALL finds nothing, and the
    // library cannot be loaded); an ACL user without them.
    for refusal in ["FCALL", "FUNCTION", "ACL"] {
        let server = if refusal == "ACL" {
            RedisServer::start()
        } else {
            RedisServer::start_with(&["--rename-command", refusal, ""])
        };
        let locks = if refusal == "ACL" {
            server.cli(&["ACL", "SETUSER", "default", "-fcall", "-function"]);
            connect(builder_for(server.url().as_str())).await
        } else {
            connect(builder(&server)).await
        };
        lock_and_unlock(&locks, 3).await;
        assert_eq!(ran(&server, "evalsha"), 6, "{refusal}: scripts");
        assert_eq!(ran(&server, "fcall"), 0, "{refusal}");
        // Refused once, then never asked again.
        let tried = command_stat(&server, "fcall", "calls")
            + command_stat(&server, "fcall", "rejected_calls");
        assert!(tried <= 1, "{refusal}: FCALL tried {tried} times");
    }
}

#[tokio::test]
async fn a_full_server_still_lets_locks_go() {
    // With the library loaded, and without it (a server new to this
    // version of the crate, or flushed): a full server refuses FUNCTION
    // LOAD, and the release runs by EVALSHA.
    for flushed in [false, true] {
        let server = RedisServer::start();
        let functions = major(&server) >= 7;
        let locks = connect(builder(&server)).await;
        let name = unique_key("full");
        let guard = locks.lock(name.as_str()).acquire().await.expect("acquire");
        let key = common::lock_key(&name);
        if flushed && functions {
            server.cli(&["FUNCTION", "FLUSH"]);
        }
        // Out of memory, without eviction: Redis refuses writes that need
        // memory.
        server.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
        server.cli(&["CONFIG", "SET", "maxmemory", "1"]);
        let refused = locks
            .lock(unique_key("full-other"))
            .wait(Duration::ZERO)
            .acquire()
            .await;
        assert!(refused.is_err(), "a full server grants nothing");
        guard.release().await.expect("released all the same");
        assert_eq!(server.cli(&["EXISTS", &key]), "0");

        // Memory again: the scripts run as functions again.
        server.cli(&["CONFIG", "SET", "maxmemory", "0"]);
        server.cli(&["CONFIG", "RESETSTAT"]);
        lock_and_unlock(&locks, 1).await;
        if functions {
            assert_eq!(ran(&server, "fcall"), 2, "flushed: {flushed}");
        }
    }
}

/// The guide's ACL line (deployments.md, "An ACL user"), read from the
/// guide itself: a client connected as its user runs every kind of lock as
/// functions, waits, and uses the operator API, with no denial in
/// `ACL LOG`.
#[tokio::test]
async fn the_guides_acl_user_runs_every_kind_of_lock() {
    let server = RedisServer::start();
    if major(&server) < 7 {
        // Redis 6.2 knows neither FCALL nor FUNCTION in an ACL rule.
        return;
    }
    let guide = include_str!("../guide/deployments.md");
    let line = guide
        .lines()
        .find(|line| line.starts_with("ACL SETUSER locks "))
        .expect("the guide's ACL line");
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(server.cli(&words), "OK");
    server.cli(&["ACL", "LOG", "RESET"]);
    let url = format!("redis://locks:secret@127.0.0.1:{}", server.port());
    let locks = connect(builder_for(url.as_str())).await;
    let other = connect(builder_for(url.as_str())).await;
    let name = unique_key("acl");

    // A waiter on another client, woken by the release.
    let held = locks.lock(name.as_str()).acquire().await.expect("lock");
    let waiter = {
        let (other, name) = (other.clone(), name.clone());
        tokio::spawn(async move {
            let guard = other
                .lock(name.as_str())
                .wait(Duration::from_secs(5))
                .acquire()
                .await
                .expect("woken");
            guard.release().await.expect("release");
        })
    };
    assert!(locks.inspect(&name).await.expect("inspect").is_some());
    assert!(!locks.list(None).await.expect("list").is_empty());
    held.release().await.expect("release");
    waiter.await.expect("waiter");

    for request in [
        locks.read_lock(format!("{name}:rw")),
        locks.write_lock(format!("{name}:rw")),
        locks.semaphore(format!("{name}:sem"), 2),
        locks.fair_lock(format!("{name}:fair")),
    ] {
        let guard = request.acquire().await.expect("acquire");
        guard.release().await.expect("release");
    }
    let forced = locks
        .lock(format!("{name}:forced"))
        .acquire()
        .await
        .expect("lock");
    assert!(
        locks
            .force_release(&format!("{name}:forced"))
            .await
            .expect("force")
    );
    drop(forced);

    // (redis-rs sends CLIENT SETINFO at connect and ignores the answer:
    // Redis 7.0 does not know it; Valkey does, and logs its refusal.)
    let log = server.cli(&["ACL", "LOG"]);
    let mut lines = log.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "object" {
            let object = lines.next().unwrap_or_default().trim();
            assert_eq!(object, "client|setinfo", "a denial: {log}");
        }
    }
    assert!(ran(&server, "fcall") > 0, "functions");
    assert_eq!(ran(&server, "evalsha"), 0);
}
