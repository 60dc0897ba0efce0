//! Bring your own connection: clients built from the redis-rs values an
//! application already has (a `redis::Client`, a `ConnectionInfo`, a
//! `ClusterClient`, a `SentinelClient`, lists of connection infos for
//! Redlock, a shared `ConnectionManager`), on real servers. Each takes and
//! excludes locks with clients built from URLs, keeps the builder's
//! settings, and fails with a clear error when the handle is bad.

mod common;

use std::time::{Duration, Instant};

use common::{
    QUARANTINE, builder_for, connect, lock_key, names_on_every_master, ok, spawn_acquire,
    start_cluster, start_sentinel_group,
};
use lock_runtime::{Deployment, LockClient, LockError};
use lock_testkit::{RedisServer, TlsServer, free_port, unique_key};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{ConnectionInfo, IntoConnectionInfo, ProtocolVersion};

/// A connection info for `url` with `password` set in it.
fn info_with_password(url: &str, password: &str) -> ConnectionInfo {
    let info = url.into_connection_info().unwrap();
    let settings = info.redis_settings().clone().set_password(password);
    info.set_redis_settings(settings)
}

/// The `connected_clients` field of the server's `INFO clients` (the
/// test kit's own connection for asking included), once connections
/// closed just before are gone.
async fn connected_clients(server: &RedisServer) -> usize {
    tokio::time::sleep(Duration::from_millis(100)).await;
    let info = server.cli(&["INFO", "clients"]);
    info.lines()
        .find_map(|line| line.strip_prefix("connected_clients:"))
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or_else(|| panic!("no connected_clients in {info}"))
}

/// `holder` takes `name`, `other` is refused it while held, and gets it
/// once `holder` releases it (woken by the release message).
async fn exclude(server: &RedisServer, holder: &LockClient, other: &LockClient, name: &str) {
    let guard = ok(
        server,
        holder
            .lock(name)
            .lease(Duration::from_secs(5))
            .acquire()
            .await,
    );
    let refused = other.lock(name).wait(Duration::ZERO).acquire().await;
    assert!(
        matches!(&refused, Err(err) if err.is_timeout()),
        "{refused:?}"
    );
    let waiting = spawn_acquire(other.lock(name).wait(Duration::from_secs(10)));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released = Instant::now();
    ok(server, guard.release().await);
    let (woken, next) = waiting.await.unwrap();
    let next = ok(server, next);
    // Woken by the release message, not by a timer.
    assert!(
        woken.duration_since(released) < Duration::from_secs(1),
        "{:?}",
        woken.duration_since(released)
    );
    ok(server, next.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_client_and_a_connection_info_with_a_password_take_and_exclude_locks() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    // The application's own client, with its password and database.
    let redis = redis::Client::open(format!("redis://:s3cret@127.0.0.1:{}/2", server.port()))
        .expect("a client");
    let from_client = connect(builder_for(redis.clone())).await;
    // A connection info whose password was set in code, on the same database.
    let info = info_with_password(&format!("{}2", server.url()), "s3cret");
    let from_info = connect(builder_for(info)).await;
    let from_url = connect(builder_for(format!(
        "redis://:s3cret@127.0.0.1:{}/2",
        server.port()
    )))
    .await;

    let name = unique_key("byo-client");
    exclude(&server, &from_client, &from_info, &name).await;
    exclude(&server, &from_info, &from_url, &name).await;

    // The locks live in the client's database 2.
    let guard = ok(&server, from_client.lock(name.as_str()).acquire().await);
    assert_eq!(
        server.cli(&["EXISTS", &lock_key(&name)]),
        "0",
        "not in db 0"
    );
    let mut db2 = redis.get_multiplexed_async_connection().await.unwrap();
    let exists: i64 = redis::cmd("EXISTS")
        .arg(lock_key(&name))
        .query_async(&mut db2)
        .await
        .unwrap();
    assert_eq!(exists, 1, "in db 2");
    ok(&server, guard.release().await);

    // Without the password, the same server refuses: a clear error.
    let err = LockClient::connect(server.url().into_connection_info().unwrap())
        .await
        .expect_err("no password");
    assert!(matches!(err, LockError::Auth { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_builders_timeouts_apply_to_a_handed_over_client() {
    let server = RedisServer::start();
    let redis = redis::Client::open(server.url()).unwrap();
    let locks = connect(
        LockClient::builder(redis)
            .connect_timeout(Duration::from_secs(1))
            .command_timeout(Duration::from_millis(300))
            .restart_quarantine(QUARANTINE),
    )
    .await;
    server.pause();
    let started = Instant::now();
    let once = locks.lock("paused").wait(Duration::ZERO).acquire().await;
    assert!(
        matches!(once, Err(LockError::CommandTimeout { after, .. }) if after == Duration::from_millis(300)),
        "{once:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    // Connecting to the paused server gives up within the connect timeout
    // (three attempts at most), with a clear error.
    let started = Instant::now();
    let err = LockClient::builder(redis::Client::open(server.url()).unwrap())
        .connect_timeout(Duration::from_millis(300))
        .connect()
        .await
        .expect_err("paused");
    assert!(err.is_unavailable(), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    server.resume();
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
async fn a_shared_connection_manager_carries_the_lock_scripts_next_to_the_applications_commands() {
    let server = RedisServer::start();
    let redis = redis::Client::open(server.url()).unwrap();
    let mut app = ConnectionManager::new(redis.clone())
        .await
        .expect("manager");

    // A client of its own opens three connections: commands, replicated
    // writes, subscriber.
    let before = connected_clients(&server).await;
    let own = connect(builder_for(redis.clone())).await;
    assert_eq!(connected_clients(&server).await - before, 3);
    // Sharing the application's manager saves the command connection.
    let before = connected_clients(&server).await;
    let shared = connect(builder_for(Deployment::shared(app.clone(), redis.clone()))).await;
    assert_eq!(connected_clients(&server).await - before, 2);

    let name = unique_key("shared");
    exclude(&server, &shared, &own, &name).await;
    exclude(&server, &own, &shared, &name).await;

    // The application keeps using its connection while a lock is renewed
    // on it, past its lease.
    let guard = ok(
        &server,
        shared
            .lock(name.as_str())
            .lease(Duration::from_millis(600))
            .acquire()
            .await,
    );
    let key = unique_key("app");
    for i in 0..20 {
        let () = redis::cmd("SET")
            .arg(&key)
            .arg(i)
            .query_async(&mut app)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let value: i64 = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut app)
        .await
        .unwrap();
    assert_eq!(value, 19);
    assert!(!guard.is_lost());
    let refused = own.lock(name.as_str()).wait(Duration::ZERO).acquire().await;
    assert!(
        matches!(&refused, Err(err) if err.is_timeout()),
        "{refused:?}"
    );
    ok(&server, guard.release().await);
    // Both clients' scripts ran on the application's one server.
    assert_eq!(server.cli(&["EXISTS", &lock_key(&name)]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_manager_must_reach_the_clients_server_and_database() {
    let [one, two]: [RedisServer; 2] = RedisServer::start_many(2).try_into().unwrap();
    let manager = ConnectionManager::new(redis::Client::open(one.url()).unwrap())
        .await
        .unwrap();

    let elsewhere = redis::Client::open(two.url()).unwrap();
    let err = LockClient::connect(Deployment::shared(manager.clone(), elsewhere))
        .await
        .expect_err("two servers");
    assert!(
        matches!(&err, LockError::Config(text) if text.contains("different servers")),
        "{err:?}"
    );

    let other_db = redis::Client::open(format!("{}1", one.url())).unwrap();
    let err = LockClient::connect(Deployment::shared(manager, other_db))
        .await
        .expect_err("two databases");
    assert!(
        matches!(&err, LockError::Config(text) if text.contains("database")),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_or_unreachable_handles_are_clear_errors() {
    let nobody = format!("redis://127.0.0.1:{}/", free_port());
    let quick = |deployment: Deployment| {
        LockClient::builder(deployment)
            .connect_timeout(Duration::from_millis(300))
            .connect()
    };

    let err = quick(redis::Client::open(nobody.as_str()).unwrap().into())
        .await
        .expect_err("nothing listens");
    assert!(err.is_unavailable(), "{err:?}");

    let err = quick(Deployment::redlock_nodes([nobody
        .as_str()
        .into_connection_info()
        .unwrap()]))
    .await
    .expect_err("nothing listens");
    assert!(err.is_unavailable(), "{err:?}");

    let err = quick(Deployment::cluster_nodes([nobody
        .as_str()
        .into_connection_info()
        .unwrap()]))
    .await
    .expect_err("nothing listens");
    assert!(err.is_unavailable(), "{err:?}");

    let sentinel = SentinelClient::build(
        vec![nobody.as_str()],
        String::from("locks"),
        None,
        SentinelServerType::Master,
    )
    .unwrap();
    let err = quick(sentinel.into()).await.expect_err("no sentinel");
    assert!(err.is_unavailable(), "{err:?}");

    let manager = ConnectionManager::new_lazy_with_config(
        redis::Client::open(nobody.as_str()).unwrap(),
        ConnectionManagerConfig::new(),
    )
    .unwrap();
    let err = quick(Deployment::shared(
        manager,
        redis::Client::open(nobody.as_str()).unwrap(),
    ))
    .await
    .expect_err("nothing listens");
    assert!(err.is_unavailable(), "{err:?}");

    // Naming no server at all.
    for empty in [
        Deployment::cluster_nodes([]),
        Deployment::redlock_nodes([]),
        Deployment::sentinel_nodes([], "locks"),
    ] {
        let err = LockClient::connect(empty).await.expect_err("no server");
        assert!(matches!(err, LockError::Config(_)), "{err:?}");
    }

    // A ClusterClient with redis-rs's default settings resends commands:
    // refused before anything is sent, saying what to change.
    let cluster = ClusterClient::new([nobody.as_str()]).unwrap();
    let err = LockClient::connect(cluster).await.expect_err("resends");
    assert!(
        matches!(&err, LockError::Config(text) if text.contains(".retries(0)")),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_client_and_cluster_node_infos_take_and_exclude_locks() {
    let cluster = start_cluster(3, 0);
    let seed = cluster.node(0);
    // The application's ClusterClient, built the way the lock client needs it.
    let for_locks = ClusterClient::builder(cluster.urls())
        .retries(0)
        .use_protocol(ProtocolVersion::RESP3)
        .build()
        .unwrap();
    let from_client = connect(builder_for(for_locks).command_timeout(Duration::from_secs(1))).await;
    let infos = cluster
        .urls()
        .iter()
        .map(|url| url.as_str().into_connection_info().unwrap())
        .collect::<Vec<_>>();
    let from_infos = connect(
        builder_for(Deployment::cluster_nodes(infos)).command_timeout(Duration::from_secs(1)),
    )
    .await;
    let from_urls = connect(common::cluster_builder(&cluster)).await;

    // On every master: locks, exclusion, and sharded release messages.
    for (name, _) in names_on_every_master(&cluster, &unique_key("byo-cluster")) {
        exclude(seed, &from_client, &from_infos, &name).await;
        exclude(seed, &from_infos, &from_urls, &name).await;
        exclude(seed, &from_urls, &from_client, &name).await;
    }

    // The application's usual ClusterClient speaks RESP2 and resends.
    let usual = ClusterClient::new(cluster.urls()).unwrap();
    let err = LockClient::connect(usual).await.expect_err("resends");
    assert!(matches!(err, LockError::Config(_)), "{err:?}");
    let resp2 = ClusterClient::builder(cluster.urls())
        .retries(0)
        .build()
        .unwrap();
    let err = LockClient::connect(resp2).await.expect_err("RESP2");
    assert!(
        matches!(&err, LockError::Config(text) if text.contains("RESP3")),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sentinel_client_and_sentinel_node_infos_take_and_exclude_locks() {
    let group = start_sentinel_group(1, 1);
    let master = group.master();
    let sentinel = SentinelClient::build(
        group.sentinel_urls(),
        String::from(group.service_name()),
        Some(SentinelNodeConnectionInfo::default()),
        SentinelServerType::Master,
    )
    .unwrap();
    let from_client = connect(builder_for(sentinel).min_replicas(1)).await;
    let infos = group
        .sentinel_urls()
        .iter()
        .map(|url| url.as_str().into_connection_info().unwrap())
        .collect::<Vec<_>>();
    let from_infos = connect(builder_for(Deployment::sentinel_nodes(
        infos,
        group.service_name(),
    )))
    .await;
    let from_urls = connect(common::sentinel_builder(&group)).await;

    let name = unique_key("byo-sentinel");
    exclude(master, &from_client, &from_infos, &name).await;
    exclude(master, &from_infos, &from_urls, &name).await;
    // The replicated writes (min_replicas) work through the handed-over client.
    let guard = ok(
        master,
        from_client
            .lock(name.as_str())
            .min_replicas(1)
            .acquire()
            .await,
    );
    ok(master, guard.release().await);

    // A Sentinel client built for replicas would send every lock to one.
    let replicas = SentinelClient::build(
        group.sentinel_urls(),
        String::from(group.service_name()),
        None,
        SentinelServerType::Replica,
    )
    .unwrap();
    let err = LockClient::connect(replicas).await.expect_err("a replica");
    assert!(
        matches!(&err, LockError::Config(text) if text.contains("SentinelServerType::Master")),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_over_handed_over_clients_excludes_redlock_over_urls() {
    let masters = RedisServer::start_many(3);
    let clients: Vec<redis::Client> = masters
        .iter()
        .map(|master| redis::Client::open(master.url()).unwrap())
        .collect();
    let from_clients = connect(builder_for(Deployment::redlock_nodes(
        clients
            .iter()
            .map(|client| client.get_connection_info().clone()),
    )))
    .await;
    let from_urls = connect(common::redlock_builder(&masters)).await;
    let name = unique_key("byo-redlock");
    exclude(&masters[0], &from_clients, &from_urls, &name).await;
    exclude(&masters[0], &from_urls, &from_clients, &name).await;
    // Every master has the lock.
    let guard = ok(
        &masters[0],
        from_clients.lock(name.as_str()).acquire().await,
    );
    for master in &masters {
        assert_eq!(master.cli(&["EXISTS", &lock_key(&name)]), "1");
    }
    ok(&masters[0], guard.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_roots_apply_where_a_handle_brings_no_certificates_of_its_own() {
    let TlsServer {
        server,
        url,
        certificates,
    } = TlsServer::start();
    let ca_pem = certificates.ca_pem.clone();

    // A connection info without certificates: the builder's roots apply.
    let info = url.as_str().into_connection_info().unwrap();
    let with_roots = connect(
        builder_for(info.clone())
            .tls_root_certificates(ca_pem.clone())
            .connect_timeout(Duration::from_secs(2)),
    )
    .await;
    // Without them the server's certificate is not trusted.
    let untrusted = LockClient::builder(info)
        .connect_timeout(Duration::from_secs(1))
        .connect()
        .await;
    assert!(untrusted.is_err());

    // A client that brings its own certificates keeps them.
    let own = redis::Client::build_with_tls(
        url.as_str(),
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(ca_pem.clone().into_bytes()),
        },
    )
    .unwrap();
    let with_own = connect(builder_for(own).connect_timeout(Duration::from_secs(2))).await;

    let name = unique_key("byo-tls");
    exclude(&server, &with_roots, &with_own, &name).await;
}

/// Every deployment, handles included, can move between threads, and so
/// can connecting to it (e.g. in a spawned task).
#[test]
fn deployments_and_connecting_are_send() {
    fn send_sync<T: Send + Sync>(_: &T) {}
    fn send<T: Send>(_: T) {}
    let sentinel = SentinelClient::build(
        vec!["redis://127.0.0.1:1"],
        String::from("locks"),
        None,
        SentinelServerType::Master,
    )
    .unwrap();
    let deployment = Deployment::from(sentinel);
    send_sync(&deployment);
    send(LockClient::connect(deployment));
}
