//! The built `lockctl` binary against a real redis-server on a free port,
//! while a client named `billing` holds locks.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use lock_runtime::{LockClient, LockGuard};
use lock_testkit::RedisServer;
use serde_json::Value;

/// A lock client named `billing`, with short timeouts for tests.
async fn billing(server: &RedisServer) -> LockClient {
    LockClient::builder(server.url())
        .name("billing")
        .connect_timeout(Duration::from_secs(1))
        .command_timeout(Duration::from_millis(500))
        .restart_quarantine(Duration::from_secs(3))
        .connect()
        .await
        .expect("connect")
}

fn lockctl_command(server: &RedisServer, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lockctl"));
    command
        .arg("--url")
        .arg(server.url())
        .args(args)
        // Not a terminal: no prompt, no colors, whoever runs the tests.
        .stdin(Stdio::null())
        .env_remove("NO_COLOR");
    command
}

/// Runs lockctl to the end, off the runtime so that the test's own lock
/// clients keep renewing and waiting meanwhile.
async fn lockctl(server: &RedisServer, args: &[&str]) -> Output {
    let mut command = lockctl_command(server, args);
    tokio::task::spawn_blocking(move || command.output().expect("run lockctl"))
        .await
        .expect("lockctl thread")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Checks the exit code, with everything lockctl and the server said.
fn expect_code(server: &RedisServer, output: &Output, code: i32) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}\nserver log:\n{}",
        stdout(output),
        stderr(output),
        server.log()
    );
}

async fn hold(locks: &LockClient, name: &str) -> LockGuard {
    locks.lock(name).acquire().await.expect("acquire")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_inspect_show_who_holds_what() {
    let server = RedisServer::start();
    let locks = billing(&server).await;
    let invoice = hold(&locks, "invoice:7").await;
    let other = hold(&locks, "report:1").await;

    let listed = lockctl(&server, &["list"]).await;
    expect_code(&server, &listed, 0);
    let text = stdout(&listed);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    for column in ["KEY", "KIND", "OWNER", "COUNT", "TTL", "FENCE", "WAITERS"] {
        assert!(lines[0].contains(column), "{text}");
    }
    let row = lines[1];
    assert!(row.starts_with("invoice:7 "), "{text}");
    assert!(row.contains("exclusive"), "{text}");
    assert!(row.contains("billing@"), "{text}");
    assert!(
        row.contains(&format!(":{} ", std::process::id())),
        "owner's pid: {text}"
    );
    assert!(row.contains(&invoice.fence().to_string()), "{text}");
    assert!(!text.contains('\x1b'), "no colors into a pipe: {text:?}");

    let listed = lockctl(&server, &["list", "invoice:*"]).await;
    expect_code(&server, &listed, 0);
    assert_eq!(stdout(&listed).lines().count(), 2, "{}", stdout(&listed));

    let json = lockctl(&server, &["--json", "list"]).await;
    expect_code(&server, &json, 0);
    let all: Value = serde_json::from_str(&stdout(&json)).expect("JSON");
    let all = all.as_array().expect("an array");
    assert_eq!(all.len(), 2);
    let first = &all[0];
    assert_eq!(first["name"], "invoice:7");
    assert_eq!(first["key"], "lock:{invoice:7}");
    assert_eq!(first["kind"], "exclusive");
    let holder = &first["holders"][0];
    assert_eq!(holder["name"], "billing");
    assert_eq!(holder["pid"], std::process::id());
    assert_eq!(holder["client"], locks.id().to_string());
    assert_eq!(holder["count"], 1);
    assert_eq!(holder["fence"], invoice.fence());
    assert!(holder["ttl_ms"].as_u64().expect("ttl") > 0);
    assert_eq!(first["waiters"]["subscribers"], 0);

    let inspected = lockctl(&server, &["inspect", "invoice:7"]).await;
    expect_code(&server, &inspected, 0);
    let text = stdout(&inspected);
    assert!(text.starts_with("invoice:7  exclusive"), "{text}");
    assert!(text.contains("key      lock:{invoice:7}"), "{text}");
    assert!(text.contains(&locks.id().to_string()), "{text}");

    // --json after the command works too.
    let inspected = lockctl(&server, &["inspect", "invoice:7", "--json"]).await;
    expect_code(&server, &inspected, 0);
    let one: Value = serde_json::from_str(&stdout(&inspected)).expect("JSON");
    assert_eq!(one["holders"][0]["fence"], invoice.fence());

    let missing = lockctl(&server, &["--json", "inspect", "nothing"]).await;
    expect_code(&server, &missing, 3);
    assert_eq!(stdout(&missing).trim(), "null");

    invoice.release().await.expect("release");
    other.release().await.expect("release");
    let listed = lockctl(&server, &["list"]).await;
    expect_code(&server, &listed, 0);
    assert_eq!(stdout(&listed).trim(), "no locks held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_without_force_is_refused() {
    let server = RedisServer::start();
    let locks = billing(&server).await;
    let guard = hold(&locks, "invoice:7").await;
    let refused = lockctl(&server, &["release", "invoice:7"]).await;
    expect_code(&server, &refused, 2);
    assert!(stderr(&refused).contains("--force"), "{}", stderr(&refused));
    assert!(
        locks.inspect("invoice:7").await.expect("inspect").is_some(),
        "still held"
    );
    assert!(!guard.is_lost());
    guard.release().await.expect("release");

    let nothing = lockctl(&server, &["release", "invoice:7", "--force", "--yes"]).await;
    expect_code(&server, &nothing, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_force_frees_the_lock_and_wakes_a_waiter() {
    let server = RedisServer::start();
    let locks = billing(&server).await;
    let waiter_client = billing(&server).await;
    let guard = locks
        .lock("invoice:7")
        .lease(Duration::from_secs(3))
        .acquire()
        .await
        .expect("acquire");
    let waiter = tokio::spawn({
        let request = waiter_client
            .lock("invoice:7")
            .wait(Duration::from_secs(60));
        async move { request.acquire().await }
    });
    // The waiter is subscribed before lockctl releases.
    for _ in 0..100 {
        let info = locks.inspect("invoice:7").await.expect("inspect");
        if info.is_some_and(|info| info.waiters.subscribers == 1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let released = lockctl(
        &server,
        &["--json", "release", "invoice:7", "--force", "--yes"],
    )
    .await;
    expect_code(&server, &released, 0);
    let reply: Value = serde_json::from_str(&stdout(&released)).expect("JSON");
    assert_eq!(
        reply,
        serde_json::json!({"name": "invoice:7", "released": true})
    );

    let taken = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .unwrap_or_else(|_| panic!("the waiter was not woken\n{}", server.log()))
        .expect("task")
        .expect("acquired");
    assert!(taken.fence() > guard.fence());
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("the holder learns of the loss");
    taken.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_sees_an_acquire_and_a_release() {
    let server = RedisServer::start();
    let locks = billing(&server).await;
    let mut child = lockctl_command(&server, &["watch", "batch", "--count", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run lockctl watch");
    // Lines as they come, read on a thread of their own.
    let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    let out = BufReader::new(child.stdout.take().expect("stdout"));
    std::thread::spawn(move || {
        for line in out.lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let next = async |lines: &mut tokio::sync::mpsc::UnboundedReceiver<String>| {
        tokio::time::timeout(Duration::from_secs(20), lines.recv())
            .await
            .unwrap_or_else(|_| panic!("no line from lockctl watch\n{}", server.log()))
            .expect("a line")
    };

    let first = next(&mut lines).await;
    assert!(first.ends_with("batch free"), "{first}");
    let guard = hold(&locks, "batch").await;
    let acquired = next(&mut lines).await;
    assert!(acquired.contains("batch held by billing@"), "{acquired}");
    assert!(acquired.contains(&guard.fence().to_string()), "{acquired}");
    guard.release().await.expect("release");
    let released = next(&mut lines).await;
    assert!(released.ends_with("batch free"), "{released}");

    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .expect("thread")
        .expect("lockctl exits after two changes");
    assert!(status.success(), "{status}");
}
