//! A password in a connection URL never shows: not in the `Debug` output of
//! a `Deployment` or a `LockClientBuilder`, not in the errors of a bad URL,
//! of an unreachable server or of a refused deployment, and not in the
//! `tracing` events and spans written while connecting.
//!
//! Every event and span field of this test binary is written, as text, to
//! one buffer that each test checks at its end.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_runtime::{Deployment, LockClient, LockClientBuilder, LockError};
use lock_testkit::{RedisCluster, RedisServer, SentinelGroup, free_port};

/// The password every URL here carries.
const SECRET: &str = "S3cretPassw0rd";
/// A password with characters a URL must percent-encode, as written in
/// URLs (`p@ss/w?rd#S3cret`).
const ENCODED: &str = "p%40ss%2Fw%3Frd%23S3cret";
/// The user the servers here are given, with [`SECRET`].
const USER: &str = "locks";

/// Each spelling of each password.
fn secrets() -> [&'static str; 3] {
    [SECRET, ENCODED, "p@ss/w?rd#S3cret"]
}

/// Fails if `text` shows a password.
#[track_caller]
fn assert_hidden(what: &str, text: &str) {
    for secret in secrets() {
        assert!(
            !text.contains(secret),
            "{what} shows the password `{secret}`:\n{text}"
        );
    }
}

/// Fails if a password shows in the `Display`, alternate `Display`, `Debug`
/// or pretty `Debug` of `value`.
#[track_caller]
fn assert_formats_hidden<T: std::fmt::Display + std::fmt::Debug>(what: &str, value: &T) {
    assert_hidden(what, &format!("{value}"));
    assert_hidden(what, &format!("{value:#}"));
    assert_hidden(what, &format!("{value:?}"));
    assert_hidden(what, &format!("{value:#?}"));
}

/// Fails if a password shows in the `Debug` or pretty `Debug` of `value`.
#[track_caller]
fn assert_debug_hidden<T: std::fmt::Debug>(what: &str, value: &T) {
    assert_hidden(what, &format!("{value:?}"));
    assert_hidden(what, &format!("{value:#?}"));
}

/// Runs `test` on a runtime of its own (one thread, so that the tasks it
/// spawns run there too) and fails if a password shows in the `tracing`
/// events and spans written meanwhile (at `TRACE`, with every field),
/// which it returns.
fn logged<F: Future<Output = ()>>(test: F) -> String {
    let buffer = Arc::new(Mutex::new(Vec::new()));
    let writer = {
        let buffer = buffer.clone();
        move || Shared(buffer.clone())
    };
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(writer)
        .finish();
    {
        let _default = tracing::subscriber::set_default(subscriber);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(test);
        // The client's tasks end (and log) as the runtime shuts down.
        drop(runtime);
    }
    let logs =
        String::from_utf8_lossy(&buffer.lock().unwrap_or_else(|e| e.into_inner())).into_owned();
    assert_hidden("the logs", &logs);
    logs
}

/// A writer into the shared log buffer.
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `redis://locks:SECRET@127.0.0.1:PORT/`, and the other ways of writing a
/// password into a URL.
fn with_password(port: u16) -> [String; 4] {
    [
        format!("redis://{USER}:{SECRET}@127.0.0.1:{port}/"),
        format!("redis://:{SECRET}@127.0.0.1:{port}/0"),
        format!("rediss://{USER}:{ENCODED}@127.0.0.1:{port}/?protocol=resp3"),
        format!("redis+unix:///tmp/redis-{port}.sock?db=1&pass={SECRET}"),
    ]
}

/// A URL of each kind of deployment named by URLs, each URL carrying a
/// password.
fn url_deployments(urls: &[String]) -> Vec<Deployment> {
    let mut deployments: Vec<Deployment> = urls.iter().map(Deployment::from).collect();
    deployments.extend([
        Deployment::cluster(urls.to_vec()),
        Deployment::sentinel(urls.to_vec(), "locks"),
        Deployment::redlock(urls.to_vec()),
    ]);
    deployments
}

/// Builder settings that fail fast against servers that do not answer.
fn builder(deployment: impl Into<Deployment>) -> LockClientBuilder {
    LockClient::builder(deployment)
        .connect_timeout(Duration::from_millis(300))
        .command_timeout(Duration::from_millis(500))
}

/// Adds [`USER`] with [`SECRET`] to `server`, allowed everything; its
/// default user stays as it was, for the test kit and the replicas.
fn add_user(server: &RedisServer) {
    let reply = server.cli(&[
        "ACL",
        "SETUSER",
        USER,
        "on",
        &format!(">{SECRET}"),
        "~*",
        "&*",
        "+@all",
    ]);
    assert_eq!(reply, "OK", "ACL SETUSER on port {}", server.port());
}

/// Lets `server` evict keys, which connecting refuses with an error that
/// names the deployment.
fn allow_eviction_on(server: &RedisServer) {
    assert_eq!(server.cli(&["CONFIG", "SET", "maxmemory", "512mb"]), "OK");
    assert_eq!(
        server.cli(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]),
        "OK"
    );
}

/// The URL of `server` with [`USER`] and [`SECRET`] in it.
fn url_of(server: &RedisServer) -> String {
    format!("redis://{USER}:{SECRET}@127.0.0.1:{}/", server.port())
}

#[test]
fn debug_of_every_deployment_hides_the_password() {
    let urls = with_password(6379);
    for deployment in url_deployments(&urls) {
        let shown = format!("{deployment:?}");
        assert_debug_hidden("Deployment", &deployment);
        // The URLs still show, with the user name and without the password.
        assert!(shown.contains("***"), "{shown}");
        assert!(shown.contains("6379"), "{shown}");
    }
    let shown = format!("{:?}", Deployment::from(urls[0].as_str()));
    assert!(
        shown.contains(&format!("redis://{USER}:***@127.0.0.1:6379/")),
        "{shown}"
    );

    // Deployments from redis-rs values (their own `Debug` redacts).
    let infos: Vec<redis::ConnectionInfo> = urls
        .iter()
        .take(3)
        .map(|url| redis::IntoConnectionInfo::into_connection_info(url.as_str()).expect(url))
        .collect();
    let client = redis::Client::open(urls[0].as_str()).expect("client");
    let cluster =
        redis::cluster::ClusterClient::new(vec![urls[0].clone()]).expect("cluster client");
    let sentinel = redis::sentinel::SentinelClient::build(
        vec![urls[0].as_str()],
        String::from("locks"),
        None,
        redis::sentinel::SentinelServerType::Master,
    )
    .expect("sentinel client");
    for deployment in [
        Deployment::from(client.clone()),
        Deployment::from(infos[1].clone()),
        Deployment::cluster_nodes(infos.clone()),
        Deployment::sentinel_nodes(infos.clone(), "locks"),
        Deployment::redlock_nodes(infos.clone()),
        Deployment::from(cluster),
        Deployment::from(sentinel),
    ] {
        assert_debug_hidden("Deployment", &deployment);
    }
}

#[test]
fn debug_of_the_builder_hides_the_password() {
    for deployment in url_deployments(&with_password(6379)) {
        let builder = LockClient::builder(deployment).prefix("app:lock:");
        assert_debug_hidden("LockClientBuilder", &builder);
        assert!(format!("{builder:?}").contains("***"), "{builder:?}");
    }
}

#[test]
fn a_bad_url_error_hides_the_password() {
    logged(async {
        let bad = [
            format!("redis://{USER}:{SECRET}@127.0.0.1:notaport/"),
            format!("redis://:{SECRET}@127.0.0.1:6379/notadb"),
            format!("redis://{USER}:{ENCODED}@/0"),
            // Not percent-encoded: the URL ends its user part at the `/`.
            format!("redis://{USER}:p@ss/w?rd#{SECRET}@127.0.0.1:6379"),
            format!("http://{USER}:{SECRET}@127.0.0.1:6379"),
            format!("{USER}:{SECRET}@127.0.0.1:6379"),
        ];
        for url in &bad {
            let good = format!("redis://127.0.0.1:{}/", free_port());
            for deployment in [
                Deployment::from(url.as_str()),
                Deployment::cluster([good.clone(), url.clone()]),
                Deployment::sentinel([good.clone(), url.clone()], "locks"),
                Deployment::redlock([good.clone(), url.clone(), good.clone()]),
            ] {
                let kind = format!("{deployment:?}");
                let err = builder(deployment)
                    .connect()
                    .await
                    .expect_err("a bad URL is refused");
                assert!(
                    matches!(&err, LockError::Config(message) if message.contains("bad Redis URL")),
                    "{kind}: {err:?}"
                );
                assert_formats_hidden(&format!("the error of {kind}"), &err);
            }
        }
    });
}

#[test]
fn an_unreachable_deployment_error_hides_the_password() {
    logged(async {
        let urls: Vec<String> = (0..3)
            .map(|_| with_password(free_port())[0].clone())
            .collect();
        for deployment in [
            Deployment::from(urls[0].as_str()),
            Deployment::cluster(urls.clone()),
            Deployment::sentinel(urls.clone(), "locks"),
            Deployment::redlock(urls.clone()),
        ] {
            let kind = format!("{deployment:?}");
            let err = builder(deployment)
                .connect()
                .await
                .expect_err("nothing listens there");
            assert_formats_hidden(&format!("the error of {kind}"), &err);
        }
    });
}

#[test]
fn a_server_and_its_errors_hide_the_password() {
    logged(async {
        let server = RedisServer::start();
        add_user(&server);
        let url = url_of(&server);
        // Connecting writes the server's address to the logs ("started recently").
        let locks = builder(url.as_str()).connect().await.expect("connect");
        let guard = locks.lock("redaction").acquire().await.expect("acquire");
        guard.release().await.expect("release");
        drop(locks);

        let client = redis::Client::open(url.as_str()).expect("client");
        let manager = client.get_connection_manager().await.expect("manager");
        let shared = Deployment::shared(manager, client);
        assert_debug_hidden("Deployment::Shared", &shared);
        assert_debug_hidden("LockClientBuilder", &builder(shared.clone()));

        allow_eviction_on(&server);
        for deployment in [Deployment::from(url.as_str()), shared] {
            let kind = format!("{deployment:?}");
            let err = builder(deployment)
                .connect()
                .await
                .expect_err("a server that may evict keys is refused");
            assert!(matches!(err, LockError::Config(_)), "{kind}: {err:?}");
            assert_formats_hidden(&format!("the error of {kind}"), &err);
        }
    });
}

#[test]
fn a_cluster_and_its_errors_hide_the_password() {
    let logs = logged(async {
        let cluster = RedisCluster::start(1, 0);
        for node in cluster.nodes() {
            add_user(node);
        }
        let urls: Vec<String> = cluster.nodes().iter().map(url_of).collect();
        // Connecting writes the deployment's address to the logs ("started recently").
        let locks = builder(Deployment::cluster(urls.clone()))
            .command_timeout(Duration::from_secs(1))
            .connect()
            .await
            .expect("connect");
        let guard = locks.lock("redaction").acquire().await.expect("acquire");
        guard.release().await.expect("release");
        drop(locks);

        allow_eviction_on(cluster.node(0));
        let err = builder(Deployment::cluster(urls))
            .command_timeout(Duration::from_secs(1))
            .connect()
            .await
            .expect_err("a Cluster that may evict keys is refused");
        assert!(matches!(err, LockError::Config(_)), "{err:?}");
        assert!(err.to_string().contains(&format!("{USER}:***@")), "{err}");
        assert_formats_hidden("the error of a Cluster", &err);
    });
    // The deployment's address was logged ("started recently"), redacted.
    assert!(logs.contains(&format!("{USER}:***@")), "{logs}");
}

#[test]
fn a_sentinel_deployment_and_its_errors_hide_the_password() {
    let logs = logged(async {
        let group = SentinelGroup::start(0, 1);
        for server in group.sentinels().iter().chain(group.nodes()) {
            add_user(server);
        }
        let urls: Vec<String> = group.sentinels().iter().map(url_of).collect();
        let deployment = Deployment::sentinel(urls, group.service_name());
        // Connecting writes the deployment's address to the logs ("started recently").
        let locks = builder(deployment.clone())
            .command_timeout(Duration::from_secs(1))
            .connect()
            .await
            .expect("connect");
        let guard = locks.lock("redaction").acquire().await.expect("acquire");
        guard.release().await.expect("release");
        drop(locks);

        allow_eviction_on(group.master());
        let err = builder(deployment)
            .command_timeout(Duration::from_secs(1))
            .connect()
            .await
            .expect_err("a master that may evict keys is refused");
        assert!(matches!(err, LockError::Config(_)), "{err:?}");
        assert!(err.to_string().contains(&format!("{USER}:***@")), "{err}");
        assert_formats_hidden("the error of a Sentinel deployment", &err);
    });
    // The deployment's address was logged ("started recently"), redacted.
    assert!(logs.contains(&format!("{USER}:***@")), "{logs}");
}
