//! What a server that forgets goes back on: a restart from an older
//! snapshot, eviction under a memory limit, a release after a loss.

mod common;

use std::time::{Duration, Instant};

use common::{
    QUARANTINE, builder, client, connect, ok, start_server_with_clients, try_once_when_up, until,
};
use lock_runtime::LockError;
use lock_testkit::{RedisServer, unique_key};

/// Takes and releases `name` once; its fencing token.
async fn take_and_release(
    server: &RedisServer,
    locks: &lock_runtime::LockClient,
    name: &str,
) -> u64 {
    let guard = ok(server, locks.lock(name).acquire().await);
    let fence = guard.fence();
    ok(server, guard.release().await);
    fence
}

/// Runs `f` on a blocking thread (it stops and starts processes).
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking task")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_never_go_back_after_a_restart_from_an_older_snapshot() {
    let mut server = RedisServer::start();
    let name = unique_key("snapshot");
    // Without a quarantine the lock is granted at once after the restart:
    // only the token rule stands between the holders and a repeated token.
    let locks = connect(builder(&server).restart_quarantine(Duration::ZERO)).await;
    let mut before = vec![take_and_release(&server, &locks, &name).await];
    server.cli(&["SAVE"]);
    for _ in 0..5 {
        before.push(take_and_release(&server, &locks, &name).await);
    }
    let mut server = blocking(move || {
        // SIGKILL: nothing is saved; the restart loads the older dump.
        server.restart();
        server
    })
    .await;
    let after = ok(&server, try_once_when_up(&locks, &name).await);
    let highest = before.iter().max().copied().unwrap();
    assert!(
        after.fence() > highest,
        "token {} after the restart, {highest} handed out before it ({before:?})",
        after.fence()
    );
    ok(&server, after.release().await);
    blocking(move || server.kill()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_granted_after_the_snapshot_is_not_granted_again_within_the_quarantine() {
    let (server, [holder]) = start_server_with_clients().await;
    let name = unique_key("forgotten");
    // The slot is in use before the snapshot...
    take_and_release(&server, &holder, &name).await;
    server.cli(&["SAVE"]);
    // ...and the lock is granted after it: the restarted server forgets it.
    let held = ok(
        &server,
        holder
            .lock(name.as_str())
            .lease(Duration::from_secs(2))
            .acquire()
            .await,
    );
    let restarted_at = Instant::now();
    let server = blocking(move || {
        let mut server = server;
        server.restart();
        server
    })
    .await;

    // A client that meets the server only after the restart cannot know it
    // restarted; the counter that came back from the snapshot tells it.
    let newcomer = client(&server).await;
    let refused = newcomer
        .lock(name.as_str())
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect_err("granted again while its holder may still work");
    assert!(refused.is_timeout(), "{refused}");
    // Named as the quarantine, with the time left, not as a holder's lock.
    let &LockError::Quarantined { left, .. } = &refused else {
        panic!("not named as the quarantine: {refused}");
    };
    assert!(left > Duration::ZERO && left <= QUARANTINE, "{left:?}");
    // The client's health reports it too.
    let health = newcomer.health().await;
    assert!(
        health
            .quarantine_left
            .is_some_and(|left| left <= QUARANTINE),
        "{health:?}"
    );
    assert!(
        refused.to_string().contains("restart quarantine"),
        "{refused}"
    );
    // A waiter whose wait ends within the quarantine is told the same.
    let waited = newcomer
        .lock(name.as_str())
        .wait(Duration::from_millis(300))
        .acquire()
        .await
        .expect_err("still within the quarantine");
    assert!(matches!(waited, LockError::Quarantined { .. }), "{waited}");
    assert!(
        restarted_at.elapsed() < QUARANTINE,
        "the check came too late"
    );

    // The holder is told, and once the quarantine is over the lock is
    // granted again, with a higher token.
    tokio::time::timeout(Duration::from_secs(5), held.lost())
        .await
        .expect("the holder is told of the loss");
    let fence = held.fence();
    drop(held);
    let again = ok(
        &server,
        newcomer
            .lock(name.as_str())
            .wait(QUARANTINE + Duration::from_secs(2))
            .acquire()
            .await,
    );
    assert!(again.fence() > fence, "{} after {fence}", again.fence());
    assert!(restarted_at.elapsed() >= QUARANTINE - Duration::from_secs(1));
    ok(&server, again.release().await);
}

/// How many times the server has run `INFO` (this call not counted).
fn info_calls(server: &RedisServer) -> u64 {
    let stats = server.cli(&["INFO", "commandstats"]);
    stats
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_info:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|calls| calls.parse().ok())
        .unwrap_or(0)
}

/// `INFO server`'s `field` as a number.
fn info_number(server: &RedisServer, field: &str) -> u64 {
    let info = server.cli(&["INFO", "server"]);
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in INFO: {info}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_save_acquisitions_stop_asking_info_and_a_restart_still_closes_the_slot() {
    let (server, [holder]) = start_server_with_clients().await;
    let name = unique_key("marked");
    // Up for longer than the quarantine (read in whole seconds, one less).
    until(
        QUARANTINE + Duration::from_secs(5),
        "server up",
        async || info_number(&server, "uptime_in_seconds") > QUARANTINE.as_secs() + 1,
    )
    .await;
    take_and_release(&server, &holder, &name).await;
    // A save makes LASTSAVE recent: it no longer shows the uptime. Once its
    // second is over, the next acquisition reads INFO once and leaves its
    // mark; the acquisitions after it read no INFO at all, of any lock (the
    // mark is the server's: on one server a script may use any key).
    server.cli(&["SAVE"]);
    let saved: u64 = server.cli(&["LASTSAVE"]).trim().parse().expect("LASTSAVE");
    until(
        Duration::from_secs(3),
        "LASTSAVE's second over",
        async || {
            let time = server.cli(&["TIME"]);
            let secs: u64 = time
                .lines()
                .next()
                .unwrap_or("0")
                .trim()
                .parse()
                .unwrap_or(0);
            secs > saved
        },
    )
    .await;
    take_and_release(&server, &holder, &name).await;
    let before = info_calls(&server);
    for _ in 0..5 {
        take_and_release(&server, &holder, &name).await;
        take_and_release(&server, &holder, &unique_key("marked-other")).await;
    }
    // `before`'s own INFO is the one call counted since.
    assert_eq!(
        info_calls(&server) - before,
        1,
        "acquisitions after a save still read INFO"
    );

    // The mark is in the next snapshot, and a lock granted after it is
    // forgotten by a restart from it: the mark must not vouch for the
    // restarted server, which has been up for less than the quarantine.
    server.cli(&["SAVE"]);
    let held = ok(
        &server,
        holder
            .lock(name.as_str())
            .lease(Duration::from_secs(2))
            .acquire()
            .await,
    );
    let server = blocking(move || {
        let mut server = server;
        server.restart();
        server
    })
    .await;
    let newcomer = client(&server).await;
    let refused = newcomer
        .lock(name.as_str())
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect_err("granted again while its holder may still work");
    assert!(
        matches!(refused, LockError::Quarantined { .. }),
        "{refused}"
    );
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_may_evict_keys_is_refused_unless_allowed() {
    let server =
        RedisServer::start_with(&["--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru"]);
    let err = builder(&server)
        .connect()
        .await
        .expect_err("a server that may evict held locks");
    let text = err.to_string();
    assert!(matches!(err, lock_runtime::LockError::Config(_)), "{err}");
    assert!(
        text.contains("volatile-lru") && text.contains("noeviction"),
        "{text}"
    );

    let allowed = connect(builder(&server).allow_eviction(true)).await;
    let name = unique_key("evictable");
    take_and_release(&server, &allowed, &name).await;

    // A limit without eviction is fine: writes fail when memory is full,
    // they never drop a held lock.
    server.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    let locks = client(&server).await;
    take_and_release(&server, &locks, &name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releasing_a_lost_lock_reports_the_loss_even_when_the_release_fails() {
    let (server, [locks]) = start_server_with_clients().await;
    let guard = ok(
        &server,
        locks
            .lock(unique_key("lost-then-unreachable"))
            .lease(Duration::from_millis(600))
            .acquire()
            .await,
    );
    server.pause();
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("declared lost while the server is paused");
    // The release cannot reach the paused server either.
    let err = guard.release().await.expect_err("lost");
    server.resume();
    assert!(err.is_lost(), "expected Lost, got {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_met_the_server_at_its_start_is_never_refused() {
    // A fresh server and a client that saw it start: nothing was lost, so
    // no lock may be refused, also not around the end of the quarantine,
    // whose uptime Redis reports in whole seconds.
    let (server, [locks]) = start_server_with_clients().await;
    let names: Vec<String> = (0..4).map(|i| unique_key(&format!("fresh{i}"))).collect();
    let until = Instant::now() + QUARANTINE + Duration::from_secs(3);
    let mut rounds = 0;
    while Instant::now() < until {
        for name in &names {
            let guard = locks
                .lock(name.as_str())
                .wait(Duration::ZERO)
                .acquire()
                .await;
            ok(&server, ok(&server, guard).release().await);
        }
        rounds += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(rounds > 10, "{rounds}");
}
