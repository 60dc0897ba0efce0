//! The client: connections, background tasks, and the entry point for locks.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::ConnectionInfo;
use redis::aio::ConnectionLike;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::api::inner::Inner;
use crate::api::request::LockRequest;
use crate::base::config::Config;
use crate::base::error::LockError;
use crate::base::kind::Kind;
use crate::base::owner;
use crate::base::redact::redact_urls;
use crate::base::telemetry;
use crate::engine::backend::{self, Backend, Topology};
use crate::engine::handoffs::Offers;
use crate::engine::wakeups::{OnDisconnect, Subscriber, Wakeups};
use crate::engine::watchdog::{self, Registry};
use crate::store::connection::{
    self, ClusterSource, Conn, Following, Managed, OnSwitch, Sentinels,
};
use crate::store::deployment::{Deployment, Spec};
#[cfg(feature = "memory")]
use crate::store::memory::MemoryStore;
use crate::store::node::Node;
use crate::store::replicas::ReplicaCheck;
use crate::store::scripts::Quarantine;

/// A handle to a Redis server for taking locks. Cheap to clone: clones share
/// one command connection, one pub/sub connection and one watchdog.
///
/// ```no_run
/// # async fn run() -> Result<(), lock_runtime::LockError> {
/// use std::time::Duration;
/// use lock_runtime::LockClient;
///
/// let locks = LockClient::connect("redis://127.0.0.1:6379").await?;
/// let guard = locks
///     .lock("order:42")
///     .lease(Duration::from_secs(30))
///     .wait(Duration::from_secs(5))
///     .acquire()
///     .await?;
/// println!("holding order:42 with fencing token {}", guard.fence());
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct LockClient {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

/// One field of an `INFO` text (empty when missing).
fn info_field(info: &str, name: &str) -> String {
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// The run id and uptime in one `INFO server` text.
fn server_run(info: &str) -> (String, Duration) {
    let uptime = info_field(info, "uptime_in_seconds")
        .parse()
        .unwrap_or(u64::MAX);
    (info_field(info, "run_id"), Duration::from_secs(uptime))
}

/// The eviction policy of a server whose memory is limited, if it may
/// evict keys with an expiry (every lock key has one): `volatile-*` and
/// `allkeys-*` policies under a `maxmemory`. `None` for `noeviction` or no
/// limit.
fn evicting_policy(info: &str) -> Option<String> {
    let limited = info_field(info, "maxmemory").parse::<u64>().unwrap_or(0) > 0;
    let policy = info_field(info, "maxmemory_policy");
    (limited && !policy.is_empty() && policy != "noeviction").then_some(policy)
}

/// The Redis version a Cluster needs: wake-ups there use sharded pub/sub
/// (`SSUBSCRIBE`, and `SPUBLISH` in the release scripts), new in 7.0.
const CLUSTER_SINCE: (u64, u64) = (7, 0);

/// Refuses a Cluster with a node older than [`CLUSTER_SINCE`], given the
/// `INFO server` text of each node: the client would connect, and then
/// fail to release locks and find held ones lost. A node that names no
/// version it can read is let be.
fn check_sharded_pubsub(infos: &[String], address: &str) -> Result<(), LockError> {
    for info in infos {
        let found = info_field(info, "redis_version");
        let mut parts = found.split('.').map(|part| part.parse::<u64>());
        let (Some(Ok(major)), Some(Ok(minor))) = (parts.next(), parts.next()) else {
            continue;
        };
        if (major, minor) < CLUSTER_SINCE {
            let (major, minor) = CLUSTER_SINCE;
            return Err(LockError::Config(format!(
                "the Redis Cluster at {address} runs Redis {found}; locks on a Cluster need \
                 Redis {major}.{minor} or later, for sharded pub/sub (SSUBSCRIBE, SPUBLISH)"
            )));
        }
    }
    Ok(())
}

/// The connections of one store before its quarantine is known.
struct Connected {
    conn: Conn,
    replicated: Conn,
    address: String,
}

/// Opens the command connections to one server and its subscriber: three
/// connections, each a redis-rs [`ConnectionManager`](redis::aio::ConnectionManager)
/// (one TCP connection, reopened when it drops). With `shared`, the
/// application's manager is the command connection and two are opened.
async fn connect_server(
    info: ConnectionInfo,
    config: &Config,
    push: impl redis::aio::AsyncPushSender + Clone,
    shared: Option<redis::aio::ConnectionManager>,
) -> Result<(Connected, Subscriber), LockError> {
    let address = info.addr().to_string();
    let client = connection::redis_client(info.clone(), config)?;
    let subscriber_client = connection::redis_client(connection::resp3(info), config)?;
    let settings = connection::manager_config(config);
    let opened = async {
        let conn = match shared {
            Some(manager) => Managed::shared(client.clone(), settings.clone(), manager),
            None => Managed::connect(client.clone(), settings.clone()).await?,
        };
        let waiting = settings
            .clone()
            .set_response_timeout(Some(config.replicated_timeout()));
        let replicated = Managed::connect(client, waiting).await?;
        let subscriber =
            Managed::connect(subscriber_client, settings.set_push_sender(push)).await?;
        Ok::<_, redis::RedisError>((conn, replicated, subscriber))
    };
    let (conn, replicated, subscriber) = opened
        .await
        .map_err(|err| LockError::from_redis(None, err))?;
    Ok((
        Connected {
            conn: Conn::Manager(conn),
            replicated: Conn::Manager(replicated),
            address,
        },
        Subscriber::Manager(subscriber),
    ))
}

/// The `run_id` of the server behind `conn`, within `timeout`.
async fn run_id(conn: &Conn, timeout: Duration) -> Result<String, LockError> {
    let mut conn = conn.clone();
    match tokio::time::timeout(timeout, conn.info("server")).await {
        Ok(Ok(infos)) => Ok(infos
            .first()
            .map(|info| info_field(info, "run_id"))
            .unwrap_or_default()),
        Ok(Err(err)) => Err(LockError::from_redis(None, err)),
        Err(_) => Err(LockError::CommandTimeout {
            key: None,
            after: timeout,
        }),
    }
}

/// Checks that an application's shared manager and the client given with
/// it reach one server and one database: the scripts run on the one and
/// the replicated writes and release messages on the other, which would
/// otherwise be two lock stores.
async fn check_shared(
    connected: &Connected,
    manager_db: i64,
    client_db: i64,
    config: &Config,
) -> Result<(), LockError> {
    if manager_db != client_db {
        return Err(LockError::Config(format!(
            "Deployment::shared: the ConnectionManager uses database {manager_db} and the \
             client database {client_db}; both must reach the same server and database"
        )));
    }
    let shared = run_id(&connected.conn, config.command_timeout).await?;
    let own = run_id(&connected.replicated, config.command_timeout).await?;
    if shared != own {
        return Err(LockError::Config(format!(
            "Deployment::shared: the ConnectionManager and the client reach two different \
             servers (run ids {shared} and {own}; the client's is {}); both must reach the \
             same server",
            connected.address
        )));
    }
    Ok(())
}

/// Checks that the server behind a Sentinel client's connection is a
/// master: a `SentinelClient` built for replicas would send every lock to
/// a replica, which refuses them.
async fn check_master(connected: &Connected, config: &Config) -> Result<(), LockError> {
    let mut conn = connected.conn.clone();
    let infos = match tokio::time::timeout(config.command_timeout, conn.info("replication")).await {
        Ok(result) => result.map_err(|err| LockError::from_redis(None, err))?,
        Err(_) => {
            return Err(LockError::CommandTimeout {
                key: None,
                after: config.command_timeout,
            });
        }
    };
    match infos.first().map(|info| info_field(info, "role")) {
        Some(role) if role != "master" => Err(LockError::Config(format!(
            "the SentinelClient leads to a {role}, not a master: build it with \
             SentinelServerType::Master ({})",
            connected.address
        ))),
        _ => Ok(()),
    }
}

/// Opens the connections to a Cluster: two command connections and a
/// subscriber, each connected to every node (masters and replicas).
async fn connect_cluster(
    source: ClusterSource,
    address: String,
    config: &Config,
    push: impl redis::aio::AsyncPushSender,
) -> Result<(Connected, Subscriber), LockError> {
    let opened = async {
        let conn = source.commands(config).await?;
        let replicated = source.replicated(config).await?;
        let subscriber = source.subscriber(config, push).await?;
        Ok::<_, redis::RedisError>((conn, replicated, subscriber))
    };
    let (conn, replicated, subscriber) = opened
        .await
        .map_err(|err| LockError::from_redis(None, err))?;
    Ok((
        Connected {
            conn: Conn::Cluster(conn),
            replicated: Conn::Cluster(replicated),
            address,
        },
        Subscriber::Cluster(subscriber),
    ))
}

/// Opens the connections to the master `sentinels` report: two command
/// connections and a subscriber, each following the master.
async fn connect_sentinel(
    sentinels: Sentinels,
    address: String,
    config: &Config,
    wakeups: &Wakeups,
    on_disconnect: &OnDisconnect,
) -> Result<(Connected, Subscriber), LockError> {
    // One set of sentinels for every connection: whichever learns of a new
    // master first moves the others before their next command.
    let sentinels = Arc::new(sentinels);
    let settings = connection::manager_config(config);
    // Whether min_replicas covers the replicas a failover may promote: read
    // now and at each new master.
    let replicas = ReplicaCheck::new(sentinels.clone(), config);
    // When commands move to a new master, the locks held on the old one are
    // checked there at once, and the subscriber follows.
    let on_switch: OnSwitch = {
        let check_now = on_disconnect.clone();
        let resubscribe = wakeups.resubscriber(0);
        let replicas = replicas.clone();
        Arc::new(move || {
            check_now();
            resubscribe();
            if let Some(replicas) = &replicas {
                replicas.after_switch();
            }
        })
    };
    let quiet: OnSwitch = Arc::new(|| {});
    let opened = async {
        let conn = Following::connect(
            sentinels.clone(),
            settings.clone(),
            on_switch.clone(),
            false,
        )
        .await?;
        let waiting = settings
            .clone()
            .set_response_timeout(Some(config.replicated_timeout()));
        let replicated = Following::connect(sentinels.clone(), waiting, on_switch, false).await?;
        let subscriber = Following::connect(
            sentinels,
            settings.set_push_sender(wakeups.push_handler(0, on_disconnect.clone())),
            quiet,
            true,
        )
        .await?;
        Ok::<_, redis::RedisError>((conn, replicated, subscriber))
    };
    let (conn, replicated, subscriber) = opened
        .await
        .map_err(|err| LockError::from_redis(None, err))?;
    if let Some(replicas) = &replicas {
        replicas.at_connect().await?;
    }
    Ok((
        Connected {
            address,
            conn: Conn::Following(conn),
            replicated: Conn::Following(replicated),
        },
        Subscriber::Following(subscriber),
    ))
}

/// Opens the connections to every Redlock master at once.
async fn connect_redlock(
    masters: Vec<ConnectionInfo>,
    config: &Config,
    wakeups: &Wakeups,
    on_disconnect: &OnDisconnect,
) -> Result<(Vec<Connected>, Vec<Subscriber>, usize), LockError> {
    let count = masters.len();
    let connecting = masters.into_iter().enumerate().map(|(i, info)| {
        connect_server(
            info,
            config,
            wakeups.push_handler(i, on_disconnect.clone()),
            None,
        )
    });
    // Every master must be reachable at start: a client that starts with a
    // master missing could not tell a typo from an outage.
    let (nodes, subscribers) = futures_util::future::try_join_all(connecting)
        .await?
        .into_iter()
        .unzip();
    Ok((nodes, subscribers, backend::needed(count, 1)))
}

/// Connects to every store of `deployment`: the command connections, the
/// subscribers, and how many stores a subscription needs.
async fn connect_deployment(
    deployment: &Deployment,
    config: &Config,
    wakeups: &Wakeups,
    on_disconnect: &OnDisconnect,
) -> Result<(Vec<Connected>, Vec<Subscriber>, usize), LockError> {
    let one = |(node, subscriber)| Ok((vec![node], vec![subscriber], 1));
    let push = || wakeups.push_handler(0, on_disconnect.clone());
    let urls = |urls: &[String]| {
        urls.iter()
            .map(|url| connection::connection_info(url))
            .collect::<Result<Vec<_>, _>>()
    };
    let infos = |infos: &[ConnectionInfo]| -> Vec<ConnectionInfo> {
        infos.iter().cloned().map(connection::node_info).collect()
    };
    match &deployment.spec {
        Spec::Server(url) => {
            let info = connection::connection_info(url)?;
            one(connect_server(info, config, push(), None).await?)
        }
        Spec::ServerInfo(info) => {
            let info = connection::node_info(info.clone());
            one(connect_server(info, config, push(), None).await?)
        }
        Spec::Shared { manager, client } => {
            let info = connection::node_info(client.get_connection_info().clone());
            let client_db = info.redis_settings().db();
            let (node, subscriber) =
                connect_server(info, config, push(), Some(manager.clone())).await?;
            check_shared(&node, ConnectionLike::get_db(manager), client_db, config).await?;
            one((node, subscriber))
        }
        #[cfg(feature = "memory")]
        Spec::Memory(store) => {
            let push = push();
            let subscriber = store.server.subscriber(move |message| {
                // The handler only queues: it cannot fail.
                let _ = push(message);
            });
            let node = Connected {
                conn: Conn::Memory(store.server.clone()),
                replicated: Conn::Memory(store.server.clone()),
                address: "memory".to_owned(),
            };
            Ok((vec![node], vec![Subscriber::Memory(subscriber)], 1))
        }
        Spec::Redlock(masters) => {
            connect_redlock(urls(masters)?, config, wakeups, on_disconnect).await
        }
        Spec::RedlockNodes(masters) => {
            connect_redlock(infos(masters), config, wakeups, on_disconnect).await
        }
        Spec::Cluster(seeds) => {
            let source = ClusterSource::from_nodes(&urls(seeds)?, config)?;
            one(connect_cluster(source, redact_urls(seeds), config, push()).await?)
        }
        Spec::ClusterNodes(seeds) => {
            let address = seeds
                .iter()
                .map(|info| info.addr().to_string())
                .collect::<Vec<_>>()
                .join(",");
            let source = ClusterSource::from_nodes(&infos(seeds), config)?;
            one(connect_cluster(source, address, config, push()).await?)
        }
        Spec::ClusterClient(client) => {
            let source = ClusterSource::from_client(client)?;
            one(connect_cluster(source, "a ClusterClient".into(), config, push()).await?)
        }
        Spec::Sentinel { sentinels, service } => {
            let address = format!("{service} via {}", redact_urls(sentinels));
            let sentinels = Sentinels::new(sentinels, service, config)?;
            one(connect_sentinel(sentinels, address, config, wakeups, on_disconnect).await?)
        }
        Spec::SentinelNodes { sentinels, service } => {
            let address = format!(
                "{service} via {}",
                sentinels
                    .iter()
                    .map(|info| info.addr().to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            );
            let sentinels = Sentinels::of_nodes(sentinels.clone(), service, config)?;
            one(connect_sentinel(sentinels, address, config, wakeups, on_disconnect).await?)
        }
        Spec::SentinelClient(client) => {
            let sentinels = Sentinels::of_client(client.clone(), config);
            let connected = connect_sentinel(
                sentinels,
                "the master of a SentinelClient".into(),
                config,
                wakeups,
                on_disconnect,
            )
            .await?;
            check_master(&connected.0, config).await?;
            one(connected)
        }
    }
}

/// Builds a store from its connections, reading the run ids the restart
/// quarantine compares against.
async fn node(connected: Connected, config: &Config, sharded: bool) -> Result<Node, LockError> {
    let quarantine = Quarantine {
        seen: "".into(),
        length: config.restart_quarantine,
        strict: config.strict_restart_quarantine,
    };
    let probe = Node::new(
        (connected.conn.clone(), connected.replicated.clone()),
        config.command_timeout,
        quarantine.clone(),
        sharded,
    );
    let memory = probe.info("memory").await?;
    if let Some(policy) = memory.iter().find_map(|info| evicting_policy(info)) {
        if !config.allow_eviction {
            return Err(LockError::Config(format!(
                "Redis at {} may evict keys (maxmemory-policy {policy} under a maxmemory \
                 limit): it could drop a held lock and grant it again while its holder \
                 works on. Set maxmemory-policy to noeviction: `CONFIG SET maxmemory-policy \
                 noeviction` and the same line in redis.conf, or, on a managed service, in \
                 its parameter group or configuration (the guide's deployments chapter, \
                 \"Memory limits\", has a table); or keep locks on a server without a \
                 memory limit. LockClientBuilder::allow_eviction(true) accepts the risk",
                connected.address
            )));
        }
        tracing::warn!(
            server = %connected.address,
            %policy,
            "Redis may evict keys: a held lock could be dropped and granted again \
             while its holder works on (allowed by allow_eviction)"
        );
    }
    let servers = probe.info("server").await?;
    if sharded {
        check_sharded_pubsub(&servers, &connected.address)?;
    }
    let runs: Vec<(String, Duration)> = servers.iter().map(|info| server_run(info)).collect();
    if let Some((_, uptime)) = runs.iter().min_by_key(|(_, uptime)| *uptime)
        && *uptime < config.restart_quarantine
        && !config.strict_restart_quarantine
    {
        tracing::info!(
            ?uptime,
            server = %connected.address,
            "Redis started recently: if it restarted without its data, locks \
             granted before may still be in use; strict_restart_quarantine \
             would hold new locks back"
        );
    }
    let seen = runs
        .iter()
        .map(|(run, _)| run.as_str())
        .collect::<Vec<_>>()
        .join(",");
    Ok(Node::new(
        (connected.conn, connected.replicated),
        config.command_timeout,
        Quarantine {
            seen: seen.into(),
            ..quarantine
        },
        sharded,
    ))
}

/// Makes sure rustls has a crypto provider for the process before a TLS
/// connection asks for one (rustls would panic without): the one the
/// application installed, or, with the `tls-rustls-ring` feature, ring's,
/// installed now. Otherwise a `LockError::Config` that says what to do.
#[cfg(feature = "tls-rustls")]
fn crypto_provider() -> Result<(), LockError> {
    if rustls::crypto::CryptoProvider::get_default().is_some() {
        return Ok(());
    }
    #[cfg(feature = "tls-rustls-ring")]
    {
        // Another thread may install one meanwhile: either is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Ok(())
    }
    #[cfg(not(feature = "tls-rustls-ring"))]
    Err(LockError::Config(
        "a `rediss://` connection needs a rustls crypto provider, and the application \
         installed none: call `rustls::crypto::ring::default_provider().install_default()` \
         (or aws-lc-rs's) when it starts, or turn on lock-runtime's `tls-rustls-ring` feature"
            .into(),
    ))
}

impl LockClient {
    /// Connects the client `config` describes to `deployment`, and starts
    /// its watchdog and subscriber (see [`LockClient::connect`]).
    pub(crate) async fn open(
        deployment: Deployment,
        config: Config,
    ) -> Result<LockClient, LockError> {
        #[cfg(feature = "tls-rustls")]
        if deployment.may_use_tls() {
            crypto_provider()?;
        }
        let shutdown = CancellationToken::new();
        let registry = Arc::new(Registry::default());
        let on_disconnect: OnDisconnect = {
            let registry = registry.clone();
            Arc::new(move || registry.check_now())
        };
        let id = Uuid::new_v4();
        let owner_prefix = format!("{}/{id}", owner::this_process(config.name.as_deref()));
        // Release messages name the owner id whose turn it is: this
        // client's start with its prefix.
        let (wakeups, pending) = Wakeups::new(format!("{owner_prefix}:"));
        let sharded = deployment.is_cluster();
        let connecting = async {
            let (connected, subscribers, needed) =
                // Boxed: the connection futures of every kind of deployment
                // would otherwise make `connect`'s future large and deep.
                Box::pin(connect_deployment(
                    &deployment,
                    &config,
                    &wakeups,
                    &on_disconnect,
                ))
                .await?;
            let nodes = futures_util::future::try_join_all(
                connected
                    .into_iter()
                    .map(|connected| node(connected, &config, sharded)),
            )
            .await?;
            Ok::<_, LockError>((nodes, subscribers, needed))
        };
        // The managers retry; bound the whole attempt by the connect timeout.
        let limit = config.connect_timeout * 3;
        let (mut nodes, subscribers, needed) = match tokio::time::timeout(limit, connecting).await {
            Ok(Ok(connected)) => connected,
            Ok(Err(err)) => {
                shutdown.cancel();
                return Err(err);
            }
            Err(_) => {
                shutdown.cancel();
                return Err(LockError::CommandTimeout {
                    key: None,
                    after: limit,
                });
            }
        };
        wakeups.start(
            pending,
            subscribers,
            needed,
            config.command_timeout,
            shutdown.clone(),
        );
        let topology = if deployment.is_redlock() {
            Topology::Quorum(nodes.into_iter().map(Node::uncoalesced).collect())
        } else if deployment.is_cluster() {
            Topology::Cluster(nodes.remove(0))
        } else {
            Topology::Single(nodes.remove(0))
        };
        let backend = Backend::new(topology);
        tokio::spawn(watchdog::run(
            registry.clone(),
            backend.clone(),
            shutdown.clone(),
        ));
        tracing::debug!(client = %id, prefix = %config.prefix, "lock client connected");
        let shutdown_token = shutdown.clone();
        let client = LockClient {
            inner: Arc::new(Inner {
                id,
                owner_prefix,
                config,
                backend,
                wakeups,
                offers: Offers::default(),
                registry,
                next_scope: AtomicU64::new(1),
                shutdown,
                closed: AtomicBool::new(false),
                closing: CancellationToken::new(),
                closing_releases: Arc::default(),
                quarantine_until: Mutex::new(None),
            }),
        };
        // The health gauges, as `health()` reads the client (without its
        // `PING`), for as long as the client lives.
        let weak = Arc::downgrade(&client.inner);
        tokio::spawn(telemetry::report_health(shutdown_token, move || {
            let inner = weak.upgrade()?;
            let now = Instant::now();
            let quarantined = inner.quarantine_left(now).is_some();
            Some((
                inner.wakeups.is_connected(),
                quarantined,
                inner.registry.lag(now),
            ))
        }));
        Ok(client)
    }

    /// Starts a request for the lock `name`; set its lease and wait, then
    /// [`acquire`](LockRequest::acquire) it.
    ///
    /// Any string names a lock, and every distinct string is a lock of its
    /// own (`order:42` and `{order:42}` are two). A Redis Cluster hash tag in
    /// the name (`{tenant:7}:order:42`) decides its slot, so locks can share
    /// a slot with data.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// use std::time::Duration;
    ///
    /// let locks = lock_runtime::LockClient::in_memory().await?;
    /// let guard = locks
    ///     .lock("order:42")
    ///     .lease(Duration::from_secs(30))
    ///     .wait(Duration::from_secs(5))
    ///     .acquire()
    ///     .await?;
    /// assert_eq!(guard.name(), "order:42");
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock(&self, name: impl Into<String>) -> LockRequest {
        LockRequest::new(self.inner.clone(), Kind::Exclusive, vec![name.into()])
    }

    /// Starts a request for several locks taken together: all of them or
    /// none, in one atomic step, so that two calls naming the same locks in
    /// opposite orders never deadlock. A name given twice is one lock.
    ///
    /// The guard holds them all; losing any one of them loses the guard
    /// ([`LockGuard::lost`](crate::LockGuard::lost)), and each lock keeps its own fencing token
    /// ([`LockGuard::fences`](crate::LockGuard::fences)).
    ///
    /// ```no_run
    /// # async fn run(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// let (from, to) = (17, 4);
    /// let both = locks
    ///     .lock_all([format!("account:{from}"), format!("account:{to}")])
    ///     .acquire()
    ///     .await?;
    /// // transfer between the two accounts
    /// both.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock_all<I>(&self, names: I) -> LockRequest
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        LockRequest::new(
            self.inner.clone(),
            Kind::Exclusive,
            names.into_iter().map(Into::into).collect(),
        )
    }

    /// Starts a request for one of `permits` permits of the semaphore
    /// `name` ([`permits`](LockRequest::permits) takes several at once): the
    /// permits its holders hold together never exceed `permits`. Each hold
    /// is leased and renewed like a lock, so a crashed holder's permits come
    /// back after its lease; a release wakes as many waiters as it frees
    /// permits.
    ///
    /// The semaphore records its number of permits with its first holder:
    /// while anyone holds a permit, a request naming another number is
    /// refused with [`LockError::Config`](crate::LockError::Config), naming
    /// both. Once the last holder lets go (or its lease runs out) the
    /// semaphore is forgotten, its number too, and the next holder may
    /// record another.
    ///
    /// Within one critical section, taking the same semaphore again
    /// re-enters the permits already held instead of taking more.
    ///
    /// ```no_run
    /// # async fn run(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// // At most 3 exports run at once across every instance.
    /// let permit = locks.semaphore("exports", 3).acquire().await?;
    /// // export
    /// permit.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn semaphore(&self, name: impl Into<String>, permits: u32) -> LockRequest {
        LockRequest::new(
            self.inner.clone(),
            Kind::Permits(permits.into()),
            vec![name.into()],
        )
    }

    /// Starts a request for the read side of the read-write lock `name`:
    /// any number of readers hold it together while no writer does. The
    /// write side is the plain lock ([`lock`](LockClient::lock), or its
    /// alias [`write_lock`](LockClient::write_lock)).
    ///
    /// A writer waiting for readers holds back new readers, so a stream of
    /// readers cannot starve it; readers already in may re-enter. A task
    /// holding the write lock may also take the read lock (and keep reading
    /// after releasing the write lock).
    ///
    /// ```no_run
    /// # async fn run(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// let reading = locks.read_lock("catalog").acquire().await?;
    /// // read the catalog while others may read it too
    /// reading.release().await?;
    ///
    /// let writing = locks.write_lock("catalog").acquire().await?;
    /// // rewrite it alone
    /// writing.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn read_lock(&self, name: impl Into<String>) -> LockRequest {
        LockRequest::new(self.inner.clone(), Kind::Read, vec![name.into()])
    }

    /// The write side of the read-write lock `name`: the same as
    /// [`lock`](LockClient::lock), which also waits for readers.
    pub fn write_lock(&self, name: impl Into<String>) -> LockRequest {
        self.lock(name).writing()
    }

    /// Starts a request for the fair lock `name`: exclusive like
    /// [`lock`](LockClient::lock), but waiters take it in the order they
    /// arrived, across every client. A release wakes exactly the next
    /// waiter in line. A waiter that gives up (times out, or its future is
    /// dropped) leaves the line at once; one that dies leaves it within
    /// half the lease (at least 250 ms, at most 3 s), and the waiters
    /// behind it go on. A waiter's arrival is when it gets in line: with
    /// its first attempt or, when tasks of this client already wait, with
    /// the next release of this client that takes its offer within about 2
    /// ms (else with its own attempt then). Use one kind of lock per name:
    /// a plain `lock`'s waiters on the same name share the line, and take
    /// the lock out of its order.
    ///
    /// ```no_run
    /// # async fn run(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// let turn = locks.fair_lock("printer").acquire().await?;
    /// // print, in arrival order
    /// turn.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn fair_lock(&self, name: impl Into<String>) -> LockRequest {
        LockRequest::new(self.inner.clone(), Kind::Fair, vec![name.into()])
    }

    /// This client's unique id, the first part of every owner id it uses.
    pub fn id(&self) -> Uuid {
        self.inner.id
    }

    /// How many locks this client holds and renews right now.
    pub fn held(&self) -> usize {
        self.inner.registry.len()
    }
}

#[cfg(feature = "memory")]
#[cfg_attr(docsrs, doc(cfg(feature = "memory")))]
impl LockClient {
    /// A client whose locks live in a new [`MemoryStore`] in this process,
    /// with default settings: for unit tests of code that takes locks,
    /// without a Redis server. Locks behave as on Redis (the same scripts
    /// run), but only within this process: never use it to coordinate
    /// several processes. For settings, or several clients on one store,
    /// use [`LockClient::builder`] with a [`MemoryStore`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::LockClient;
    ///
    /// let locks = LockClient::in_memory().await?;
    /// let guard = locks.lock("order:42").acquire().await?;
    /// assert!(guard.fence() > 0);
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn in_memory() -> Result<LockClient, LockError> {
        LockClient::connect(MemoryStore::new()).await
    }
}

#[cfg(test)]
mod tests {
    use super::check_sharded_pubsub;

    #[test]
    fn a_cluster_needs_redis_7_on_every_node() {
        let info = |version: &str| {
            format!("# Server\r\nredis_version:{version}\r\nredis_mode:cluster\r\n")
        };
        let err = check_sharded_pubsub(&[info("7.0.15"), info("6.2.14")], "127.0.0.1:7000")
            .expect_err("6.2 has no sharded pub/sub");
        let message = err.to_string();
        assert!(
            message.contains("Redis 6.2.14") && message.contains("7.0 or later"),
            "{message}"
        );
        for fine in [["7.0.0", "7.2.4"], ["8.0.1", "10.0.0"]] {
            let infos = fine.map(info);
            assert!(check_sharded_pubsub(&infos, "a").is_ok(), "{infos:?}");
        }
        // A server that does not say which version it is, is let be.
        assert!(check_sharded_pubsub(&["# Server\r\n".to_owned()], "a").is_ok());
    }
}
