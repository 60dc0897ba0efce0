//! The built `lockctl` binary against a real redis-server on a free port,
//! while a client named `billing` holds locks.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use lock_runtime::{Deployment, LockClient, LockGuard};
use lock_testkit::{Certificates, RedisServer, TlsServer, free_port};
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

/// lockctl with these arguments only: no `--url`, and none of the
/// variables it reads from the environment, whoever runs the tests.
fn bare_command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lockctl"));
    command
        .args(args)
        // Not a terminal: no prompt, no colors.
        .stdin(Stdio::null())
        .env_remove("NO_COLOR")
        .env_remove("LOCKCTL_PASSWORD")
        .env_remove("LOCKCTL_URL")
        .env_remove("REDIS_URL");
    command
}

fn lockctl_command(server: &RedisServer, args: &[&str]) -> Command {
    let mut command = bare_command(&["--url", &server.url()]);
    command.args(args);
    command
}

/// Runs `command` to the end, off the runtime so that the test's own lock
/// clients keep renewing and waiting meanwhile.
async fn output(mut command: Command) -> Output {
    tokio::task::spawn_blocking(move || command.output().expect("run lockctl"))
        .await
        .expect("lockctl thread")
}

async fn lockctl(server: &RedisServer, args: &[&str]) -> Output {
    output(lockctl_command(server, args)).await
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
async fn a_semaphore_shows_its_permits_taken_of_its_number() {
    let server = RedisServer::start();
    let locks = billing(&server).await;
    let two = locks
        .semaphore("exports", 5)
        .permits(2)
        .acquire()
        .await
        .expect("two permits");
    let one = locks
        .semaphore("exports", 5)
        .acquire()
        .await
        .expect("one permit");

    let listed = lockctl(&server, &["list"]).await;
    expect_code(&server, &listed, 0);
    let text = stdout(&listed);
    assert!(text.contains("semaphore 3/5"), "{text}");

    let inspected = lockctl(&server, &["inspect", "exports"]).await;
    expect_code(&server, &inspected, 0);
    let text = stdout(&inspected);
    assert!(text.contains("permits  3 of 5 taken"), "{text}");
    assert!(text.contains("(permit x2)"), "{text}");
    assert!(text.contains("(permit x1)"), "{text}");

    let json = lockctl(&server, &["--json", "inspect", "exports"]).await;
    expect_code(&server, &json, 0);
    let info: Value = serde_json::from_str(&stdout(&json)).expect("JSON");
    assert_eq!(info["limit"], 5);
    let mut permits: Vec<u64> = info["holders"]
        .as_array()
        .expect("holders")
        .iter()
        .map(|holder| holder["permits"].as_u64().expect("permits"))
        .collect();
    permits.sort_unstable();
    assert_eq!(permits, [1, 2]);

    two.release().await.expect("release");
    one.release().await.expect("release");
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

// ---------------------------------------------------------------------------
// The password from the environment, and --tls-ca
// ---------------------------------------------------------------------------

/// A password with characters that must be percent-encoded in a URL.
const PASSWORD: &str = "s3cret p@ss/w:rd%";
/// [`PASSWORD`] as written in a URL.
const PASSWORD_IN_URL: &str = "s3cret%20p%40ss%2Fw%3Ard%25";

/// A server that wants [`PASSWORD`].
fn server_with_password() -> RedisServer {
    RedisServer::start_with(&["--requirepass", PASSWORD])
}

/// The server's URL with [`PASSWORD`] in it.
fn url_with_password(server: &RedisServer) -> String {
    format!("redis://:{PASSWORD_IN_URL}@127.0.0.1:{}/", server.port())
}

/// Neither `secret` nor its URL spelling is in anything lockctl printed.
fn assert_hidden(output: &Output, secret: &str, in_url: &str) {
    for (what, text) in [("stdout", stdout(output)), ("stderr", stderr(output))] {
        assert!(
            !text.contains(secret) && !text.contains(in_url),
            "the password is in lockctl's {what}: {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_from_the_environment_authenticates() {
    let server = server_with_password();
    let locks = LockClient::builder(url_with_password(&server))
        .name("billing")
        .connect()
        .await
        .expect("connect with the password");
    let guard = hold(&locks, "invoice:7").await;

    // Without a password the server refuses lockctl.
    let refused = lockctl(&server, &["list"]).await;
    expect_code(&server, &refused, 1);
    assert!(
        stderr(&refused).contains("authentication"),
        "{}",
        stderr(&refused)
    );

    // --url without a password, the password from LOCKCTL_PASSWORD.
    let mut command = lockctl_command(&server, &["list"]);
    command.env("LOCKCTL_PASSWORD", PASSWORD);
    let listed = output(command).await;
    expect_code(&server, &listed, 0);
    assert!(stdout(&listed).contains("invoice:7"), "{}", stdout(&listed));
    assert_hidden(&listed, PASSWORD, PASSWORD_IN_URL);

    // The server from LOCKCTL_URL, or else REDIS_URL, when --url is not given.
    for variable in ["LOCKCTL_URL", "REDIS_URL"] {
        let mut command = bare_command(&["--json", "inspect", "invoice:7"]);
        command
            .env(variable, server.url())
            .env("LOCKCTL_PASSWORD", PASSWORD);
        let inspected = output(command).await;
        expect_code(&server, &inspected, 0);
        let one: Value = serde_json::from_str(&stdout(&inspected)).expect("JSON");
        assert_eq!(one["holders"][0]["fence"], guard.fence(), "{variable}");
    }
    // LOCKCTL_URL comes before REDIS_URL, and --url before both.
    let mut command = bare_command(&["list"]);
    command
        .env("LOCKCTL_URL", server.url())
        .env("REDIS_URL", "redis://127.0.0.1:1/")
        .env("LOCKCTL_PASSWORD", PASSWORD);
    expect_code(&server, &output(command).await, 0);
    let mut command = lockctl_command(&server, &["list"]);
    command
        .env("LOCKCTL_URL", "redis://127.0.0.1:1/")
        .env("LOCKCTL_PASSWORD", PASSWORD);
    expect_code(&server, &output(command).await, 0);

    // A password written in the URL wins over the environment's.
    let mut command = bare_command(&["--url", &url_with_password(&server), "list"]);
    command.env("LOCKCTL_PASSWORD", "not the password");
    expect_code(&server, &output(command).await, 0);

    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_goes_to_every_redlock_master() {
    let masters: Vec<RedisServer> = (0..3).map(|_| server_with_password()).collect();
    let locks = LockClient::builder(Deployment::redlock(
        masters.iter().map(url_with_password).collect::<Vec<_>>(),
    ))
    .name("billing")
    .connect()
    .await
    .expect("connect with the password");
    let guard = hold(&locks, "invoice:7").await;

    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let mut command = bare_command(&["--redlock", &urls.join(","), "list"]);
    command.env("LOCKCTL_PASSWORD", PASSWORD);
    let listed = output(command).await;
    expect_code(&masters[2], &listed, 0);
    // lockctl connects to every master or fails: each took the password.
    assert!(stdout(&listed).contains("invoice:7"), "{}", stdout(&listed));
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_is_never_printed() {
    let server = server_with_password();
    let closed = format!("redis://127.0.0.1:{}/", free_port());
    // What a wrong password looks like in a URL, to look for it there too.
    let wrong = "wr0ng p@ss";
    let wrong_in_url = "wr0ng%20p%40ss";

    // Refused by the server, in text and in JSON.
    for args in [&["list"][..], &["--json", "inspect", "invoice:7"]] {
        let mut command = lockctl_command(&server, args);
        command.env("LOCKCTL_PASSWORD", wrong);
        let refused = output(command).await;
        expect_code(&server, &refused, 1);
        assert!(
            stderr(&refused).contains("refused authentication"),
            "{}",
            stderr(&refused)
        );
        assert_hidden(&refused, wrong, wrong_in_url);
    }

    // No server there.
    let mut command = bare_command(&["--url", &closed, "list"]);
    command.env("LOCKCTL_PASSWORD", PASSWORD);
    let unreachable = output(command).await;
    expect_code(&server, &unreachable, 1);
    assert_hidden(&unreachable, PASSWORD, PASSWORD_IN_URL);

    // A URL the library refuses, quoted in its message: it is quoted with
    // the password that went into it, hidden. Each deployment's URLs get it.
    let bad = "redis://127.0.0.1:notaport/";
    for option in ["--url", "--cluster", "--redlock", "--sentinel"] {
        let mut command = bare_command(&[option, bad, "--service", "locks", "list"]);
        if option != "--sentinel" {
            command = bare_command(&[option, bad, "list"]);
        }
        command.env("LOCKCTL_PASSWORD", PASSWORD);
        let refused = output(command).await;
        expect_code(&server, &refused, 1);
        assert!(
            stderr(&refused).contains("redis://:***@127.0.0.1:notaport/"),
            "{option}: {}",
            stderr(&refused)
        );
        assert_hidden(&refused, PASSWORD, PASSWORD_IN_URL);
    }

    // A password written in a URL is hidden as well.
    let in_url = format!("redis://:{PASSWORD_IN_URL}@127.0.0.1:notaport/");
    let refused = output(bare_command(&["--url", &in_url, "list"])).await;
    expect_code(&server, &refused, 1);
    assert_hidden(&refused, PASSWORD, PASSWORD_IN_URL);

    // By every command, `doctor` too (which quotes the URL itself), also
    // when the password is not percent-encoded or its scheme is written in
    // capitals.
    let (secret, secret_in_url) = ("s3cr/et", "s3cr%2Fet");
    let unencoded = format!("redis://:{secret}@127.0.0.1:{}/", free_port());
    let socket = format!("UNIX:///nonexistent/redis.sock?pass={secret_in_url}");
    for url in [&unencoded, &socket] {
        for command in ["list", "doctor"] {
            let printed = output(bare_command(&["--url", url, command])).await;
            expect_code(&server, &printed, 1);
            assert_hidden(&printed, secret, secret_in_url);
        }
    }
    let printed = output(bare_command(&[
        "--url",
        &url_with_password(&server),
        "doctor",
    ]))
    .await;
    assert_hidden(&printed, PASSWORD, PASSWORD_IN_URL);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_ca_must_be_a_readable_pem_file() {
    let dir = scratch_dir("tls-ca-checks");
    let missing = dir.join("missing.pem");
    let refused = output(bare_command(&[
        "--url",
        "rediss://127.0.0.1:1/",
        "--tls-ca",
        missing.to_str().expect("UTF-8 path"),
        "list",
    ]))
    .await;
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let message = stderr(&refused);
    assert!(
        message.contains("cannot read the --tls-ca file") && message.contains("missing.pem"),
        "{message}"
    );

    let not_pem = dir.join("not.pem");
    std::fs::write(&not_pem, "not a certificate\n").expect("write");
    let refused = output(bare_command(&[
        "--url",
        "rediss://127.0.0.1:1/",
        "--tls-ca",
        not_pem.to_str().expect("UTF-8 path"),
        "list",
    ]))
    .await;
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("holds no PEM certificate"),
        "{}",
        stderr(&refused)
    );

    // A CA for a deployment without TLS is a mistake worth saying.
    let tls = Certificates::generate();
    let refused = output(bare_command(&[
        "--url",
        "redis://127.0.0.1:1/",
        "--tls-ca",
        tls.ca.to_str().expect("UTF-8 path"),
        "list",
    ]))
    .await;
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("rediss://"),
        "{}",
        stderr(&refused)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_ca_trusts_a_private_ca() {
    // The plain port stays open for the holder.
    let TlsServer {
        server,
        url,
        certificates: tls,
    } = TlsServer::start();
    let path = |path: &std::path::Path| path.to_str().expect("UTF-8 path").to_owned();
    let locks = billing(&server).await;
    let guard = hold(&locks, "invoice:7").await;

    let listed = output(bare_command(&[
        "--url",
        &url,
        "--tls-ca",
        &path(&tls.ca),
        "list",
    ]))
    .await;
    expect_code(&server, &listed, 0);
    assert!(
        stdout(&listed).contains(&guard.fence().to_string()),
        "{}",
        stdout(&listed)
    );

    // Without the CA, the server's certificate is not trusted.
    let untrusted = output(bare_command(&["--url", &url, "list"])).await;
    expect_code(&server, &untrusted, 1);
    guard.release().await.expect("release");
}

/// A fresh directory under Cargo's scratch directory for tests.
fn scratch_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("lockctl-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// The findings of `lockctl --json doctor`: (check, status) pairs.
fn doctor_findings(output: &Output) -> Vec<(String, String)> {
    let found: Value = serde_json::from_str(stdout(output).trim()).expect("doctor JSON");
    found
        .as_array()
        .expect("an array")
        .iter()
        .map(|f| {
            (
                f["check"].as_str().unwrap_or_default().to_owned(),
                f["status"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_passes_a_fit_server_and_names_what_to_change_on_an_evicting_one() {
    let fit = RedisServer::start();
    let passed = lockctl(&fit, &["--json", "doctor"]).await;
    expect_code(&fit, &passed, 0);
    let found = doctor_findings(&passed);
    for check in [
        "version",
        "eviction",
        "role",
        "scripting",
        "functions",
        "pubsub",
        "persistence",
    ] {
        assert!(
            found.iter().any(|(c, _)| c == check),
            "no {check} check: {found:?}"
        );
    }
    assert!(
        found.iter().all(|(_, status)| status != "fail"),
        "{found:?}"
    );

    assert!(
        found.contains(&("functions".to_owned(), "ok".to_owned())),
        "{found:?}"
    );
    // FCALL refused: the client falls back to EVALSHA, which doctor warns of.
    let no_functions = RedisServer::start_with(&["--rename-command", "FCALL", ""]);
    let warned = lockctl(&no_functions, &["--json", "doctor"]).await;
    assert!(
        doctor_findings(&warned).contains(&("functions".to_owned(), "warn".to_owned())),
        "{}",
        stdout(&warned)
    );

    // A memory limit with an evicting policy: the client would refuse it.
    let evicting =
        RedisServer::start_with(&["--maxmemory", "10mb", "--maxmemory-policy", "volatile-lru"]);
    let failed = lockctl(&evicting, &["doctor"]).await;
    expect_code(&evicting, &failed, 5);
    let text = stdout(&failed);
    assert!(
        text.contains("FAIL") && text.contains("maxmemory-policy noeviction"),
        "{text}"
    );
    let json = lockctl(&evicting, &["--json", "doctor"]).await;
    expect_code(&evicting, &json, 5);
    assert!(
        doctor_findings(&json).contains(&("eviction".to_owned(), "fail".to_owned())),
        "{}",
        stdout(&json)
    );

    // Redlock masters: one cannot be reached (exit 1), the other is still
    // examined.
    let gone = format!("redis://127.0.0.1:{}", free_port());
    let masters = format!("{},{gone}", fit.url());
    let partly = output(bare_command(&["--redlock", &masters, "doctor"])).await;
    expect_code(&fit, &partly, 1);
    assert!(stdout(&partly).contains("version"), "{}", stdout(&partly));
    assert!(stderr(&partly).contains(&gone), "{}", stderr(&partly));

    // Sentinels hold no locks: a usage error that says what to give.
    let sentinels = output(bare_command(&[
        "--sentinel",
        &fit.url(),
        "--service",
        "mymaster",
        "doctor",
    ]))
    .await;
    expect_code(&fit, &sentinels, 2);
    assert!(
        stderr(&sentinels).contains("--url"),
        "{}",
        stderr(&sentinels)
    );
}
