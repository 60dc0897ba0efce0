//! Connections to each kind of deployment behind one type, and the
//! subscriber side used for release messages.
//!
//! A single server and each Redlock master get a redis-rs
//! [`ConnectionManager`]; a Cluster gets a cluster connection, which routes
//! each script by its first key (every key of a call shares one slot); a
//! Sentinel-watched master gets a [`Following`] connection, which asks the
//! sentinels for the master again whenever the one it talks to fails or
//! turns into a replica.
//!
//! Connections come from URLs or from redis-rs values an application hands
//! over (see `Deployment`): their settings are kept, and this crate's own
//! are added where they leave something unset ([`node_info`],
//! [`open_client`]) or where safety needs them ([`ClusterSource`]).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{
    Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Pipeline, ProtocolVersion, RedisError,
    RedisFuture, RedisResult, Value,
};

use crate::base::config::Config;
use crate::base::error::{Chain, LockError, is_read_only, not_reached};
use crate::base::redact::Redacted;
#[cfg(feature = "memory")]
use crate::store::memory::MemoryServer;

/// A command connection to one lock store.
#[derive(Clone)]
pub(crate) enum Conn {
    Manager(Managed),
    Cluster(ClusterConnection),
    Following(Following),
    /// The in-process store of [`LockClient::in_memory`](crate::LockClient::in_memory).
    #[cfg(feature = "memory")]
    Memory(MemoryServer),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Manager(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
            Conn::Following(conn) => conn.req_packed_command(cmd),
            #[cfg(feature = "memory")]
            Conn::Memory(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Manager(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Following(conn) => conn.req_packed_commands(pipeline, offset, count),
            #[cfg(feature = "memory")]
            Conn::Memory(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Manager(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
            Conn::Following(conn) => conn.get_db(),
            #[cfg(feature = "memory")]
            Conn::Memory(conn) => conn.get_db(),
        }
    }
}

impl Conn {
    /// Whether this is a Cluster connection.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Conn::Cluster(_))
    }

    /// A command on this connection got no answer in time. After a few in a
    /// row the connection is replaced (where it can be): a connection whose
    /// packets vanish without a reset (a partition, a moved address) would
    /// otherwise wait for every command's timeout for minutes, since a
    /// response timeout does not make redis-rs reconnect. A Cluster
    /// connection relies on TCP keepalive and the user timeout instead.
    pub(crate) fn timed_out(&self) {
        match self {
            Conn::Manager(conn) => conn.timed_out(),
            Conn::Following(conn) => conn.timed_out(),
            Conn::Cluster(_) => {}
            #[cfg(feature = "memory")]
            Conn::Memory(_) => {}
        }
    }

    /// A command on this connection was answered.
    pub(crate) fn answered(&self) {
        match self {
            Conn::Manager(conn) => conn.answered(),
            Conn::Following(conn) => conn.answered(),
            Conn::Cluster(_) => {}
            #[cfg(feature = "memory")]
            Conn::Memory(_) => {}
        }
    }

    /// `INFO section` of every server behind this connection (each
    /// master and replica of a Cluster), as text.
    pub(crate) async fn info(&mut self, section: &str) -> RedisResult<Vec<String>> {
        let mut info = redis::cmd("INFO");
        info.arg(section);
        match self {
            Conn::Cluster(conn) => {
                let reply = conn
                    .route_command(
                        info,
                        RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllNodes, None)),
                    )
                    .await?;
                Ok(texts(reply))
            }
            _ => Ok(vec![info.query_async(self).await?]),
        }
    }
}

/// Every text in a reply, however nested (a Cluster answers per node).
fn texts(reply: Value) -> Vec<String> {
    match reply {
        Value::BulkString(bytes) => vec![String::from_utf8_lossy(&bytes).into_owned()],
        Value::VerbatimString { text, .. } | Value::SimpleString(text) => vec![text],
        Value::Array(items) | Value::Set(items) => items.into_iter().flat_map(texts).collect(),
        Value::Map(pairs) => pairs.into_iter().flat_map(|(_, v)| texts(v)).collect(),
        _ => Vec::new(),
    }
}

/// Commands in a row that get no answer before a connection is replaced.
const TIMEOUTS_BEFORE_RECONNECT: u32 = 2;

/// Commands in a row without an answer on one connection.
#[derive(Default)]
struct Unanswered(AtomicU32);

impl Unanswered {
    /// Counts one more; true (and the count starts over) when that makes
    /// [`TIMEOUTS_BEFORE_RECONNECT`].
    fn one_more(&self) -> bool {
        let reached = self.0.fetch_add(1, Ordering::Relaxed) + 1 >= TIMEOUTS_BEFORE_RECONNECT;
        if reached {
            self.reset();
        }
        reached
    }

    fn reset(&self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

/// A [`ConnectionManager`] that is replaced by a fresh one after
/// [`TIMEOUTS_BEFORE_RECONNECT`] commands in a row went unanswered.
#[derive(Clone)]
pub(crate) struct Managed {
    shared: Arc<ManagedShared>,
}

struct ManagedShared {
    client: redis::Client,
    config: ConnectionManagerConfig,
    current: RwLock<ConnectionManager>,
    /// Commands in a row without an answer.
    timeouts: Unanswered,
}

impl Managed {
    /// Connects now (a first failure is the caller's to report).
    pub(crate) async fn connect(
        client: redis::Client,
        config: ConnectionManagerConfig,
    ) -> RedisResult<Managed> {
        let manager = ConnectionManager::new_with_config(client.clone(), config.clone()).await?;
        Ok(Managed {
            shared: Arc::new(ManagedShared {
                client,
                config,
                current: RwLock::new(manager),
                timeouts: Unanswered::default(),
            }),
        })
    }

    /// Sends commands on `manager`, an application's connection to the
    /// server `client` reaches, instead of a connection of its own; after
    /// [`TIMEOUTS_BEFORE_RECONNECT`] commands in a row without an answer it
    /// is replaced by a fresh one of its own from `client` (the
    /// application's is left as it is).
    pub(crate) fn shared(
        client: redis::Client,
        config: ConnectionManagerConfig,
        manager: ConnectionManager,
    ) -> Managed {
        Managed {
            shared: Arc::new(ManagedShared {
                client,
                config,
                current: RwLock::new(manager),
                timeouts: Unanswered::default(),
            }),
        }
    }

    /// The manager commands go to now.
    pub(crate) fn manager(&self) -> ConnectionManager {
        // Only ever replaced whole; a panic cannot leave it torn.
        self.shared
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn timed_out(&self) {
        if self.shared.timeouts.one_more() {
            self.reconnect();
        }
    }

    /// Replaces the connection with a fresh one, which connects on its
    /// first command, so that this never waits.
    pub(crate) fn reconnect(&self) {
        let shared = &self.shared;
        shared.timeouts.reset();
        match ConnectionManager::new_lazy_with_config(shared.client.clone(), shared.config.clone())
        {
            Ok(fresh) => {
                tracing::warn!(
                    server = %shared.client.get_connection_info().addr(),
                    "Redis stopped answering; reconnecting"
                );
                *shared.current.write().unwrap_or_else(|e| e.into_inner()) = fresh;
            }
            Err(err) => {
                tracing::debug!(error = %Chain(&err), "replacing an unanswering connection failed")
            }
        }
    }

    fn answered(&self) {
        self.shared.timeouts.reset();
    }
}

impl ConnectionLike for Managed {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let mut manager = self.manager();
        Box::pin(async move { manager.req_packed_command(cmd).await })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let mut manager = self.manager();
        Box::pin(async move { manager.req_packed_commands(pipeline, offset, count).await })
    }

    fn get_db(&self) -> i64 {
        self.shared
            .client
            .get_connection_info()
            .redis_settings()
            .db()
    }
}

/// How long a connection's data may stay unacknowledged before the kernel
/// ends the connection (`TCP_USER_TIMEOUT`, on Linux): a call written to a
/// connection reaches Redis within this long, or never, unless something
/// between them (a proxy) took it over meanwhile.
pub(crate) const USER_TIMEOUT: Duration = Duration::from_secs(30);

/// TCP settings of every connection: keepalive probes, so that an idle
/// connection (the subscriber's) whose peer vanished is noticed, and a user
/// timeout, so that data left unacknowledged ends the connection rather than
/// waiting for the kernel's retransmissions for many minutes.
fn tcp_settings() -> redis::io::tcp::TcpSettings {
    use redis::io::tcp::socket2::TcpKeepalive;
    let keepalive = TcpKeepalive::new()
        .with_time(Duration::from_secs(10))
        .with_interval(Duration::from_secs(5));
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "fuchsia"))]
    let keepalive = keepalive.with_retries(3);
    let settings = redis::io::tcp::TcpSettings::default().set_keepalive(keepalive);
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "fuchsia"))]
    let settings = settings.set_user_timeout(USER_TIMEOUT);
    settings
}

/// `settings` with this crate's keepalive probes and user timeout (see
/// [`tcp_settings`]) where it sets none of its own; anything else in it
/// (`TCP_NODELAY`, linger) is kept.
fn tcp_defaults(settings: &redis::io::tcp::TcpSettings) -> redis::io::tcp::TcpSettings {
    let ours = tcp_settings();
    let mut merged = settings.clone();
    if merged.keepalive().is_none()
        && let Some(keepalive) = ours.keepalive()
    {
        merged = merged.set_keepalive(keepalive.clone());
    }
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "fuchsia"))]
    if merged.user_timeout().is_none()
        && let Some(timeout) = ours.user_timeout()
    {
        merged = merged.set_user_timeout(timeout);
    }
    merged
}

/// A server's connection info with this crate's TCP keepalive and user
/// timeout where it sets none of its own: for a URL, or for a
/// `ConnectionInfo` an application handed over (whose own TCP settings win).
pub(crate) fn node_info(info: ConnectionInfo) -> ConnectionInfo {
    let settings = tcp_defaults(info.tcp_settings());
    info.set_tcp_settings(settings)
}

/// Parses a URL, naming it in the error (its password hidden).
pub(crate) fn connection_info(url: &str) -> Result<ConnectionInfo, LockError> {
    url.into_connection_info()
        .map(node_info)
        .map_err(|err| LockError::Config(format!("bad Redis URL `{}`: {err}", Redacted(url))))
}

/// Whether `info` carries TLS certificates of its own (a client built with
/// `redis::Client::build_with_tls`, or its connection info).
fn has_own_certificates(info: &ConnectionInfo) -> bool {
    matches!(
        info.addr(),
        ConnectionAddr::TcpTls {
            tls_params: Some(_),
            ..
        }
    )
}

/// The same server with the RESP3 protocol, so that messages arrive as pushes.
pub(crate) fn resp3(info: ConnectionInfo) -> ConnectionInfo {
    let settings = info.redis_settings().clone();
    info.set_redis_settings(settings.set_protocol(ProtocolVersion::RESP3))
}

/// A redis-rs client trusting `roots` (PEM) if any, unless `info` carries
/// certificates of its own, which are kept. Roots with an address that is
/// not TLS are refused by redis-rs ("requires a URL with the `rediss://`
/// scheme").
pub(crate) fn open_client(
    info: ConnectionInfo,
    roots: Option<&Vec<u8>>,
) -> RedisResult<redis::Client> {
    match roots {
        #[cfg(feature = "tls-rustls")]
        Some(roots) if !has_own_certificates(&info) => redis::Client::build_with_tls(
            info,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(roots.clone()),
            },
        ),
        _ => redis::Client::open(info),
    }
}

/// A redis-rs client trusting the configured TLS roots if any (see
/// [`open_client`]).
pub(crate) fn redis_client(
    info: ConnectionInfo,
    config: &Config,
) -> Result<redis::Client, LockError> {
    open_client(info, config.tls_roots.as_ref()).map_err(|err| LockError::from_redis(None, err))
}

/// Settings of every connection manager the client opens.
pub(crate) fn manager_config(config: &Config) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(config.connect_timeout))
        .set_response_timeout(Some(config.command_timeout))
        // Few quick retries per reconnection; every failed command starts a
        // new reconnection, so this never gives up for good.
        .set_number_of_retries(2)
        .set_min_delay(Duration::from_millis(20))
        .set_max_delay(Duration::from_millis(500))
}

/// A builder for cluster connections to these seed nodes (URLs parsed, or
/// connection infos handed over, both through [`node_info`]); `resp3` for
/// the subscriber, which needs pushes.
pub(crate) fn cluster_builder(
    nodes: &[ConnectionInfo],
    config: &Config,
    resp3_pushes: bool,
) -> Result<ClusterClientBuilder, LockError> {
    if nodes.iter().any(has_own_certificates) {
        // redis-rs builds every cluster connection's TLS settings from the
        // builder's, not from the seed nodes': they would be dropped.
        return Err(LockError::Config(
            "TLS certificates inside a ConnectionInfo are not used for Redis Cluster \
             connections by redis-rs: trust a private CA with \
             LockClientBuilder::tls_root_certificates, or pass a ClusterClient built \
             with .certs(...)"
                .into(),
        ));
    }
    // Every node's connection gets the builder's TCP settings (redis-rs
    // ignores the seed nodes' own): the first node's, with this crate's
    // keepalive where it sets none.
    let tcp = nodes
        .first()
        .map(|first| tcp_defaults(first.tcp_settings()))
        .unwrap_or_else(tcp_settings);
    let nodes: Vec<ConnectionInfo> = nodes
        .iter()
        .cloned()
        .map(|info| if resp3_pushes { resp3(info) } else { info })
        .collect();
    // The command connection does not let redis-rs resend a request: it
    // would also resend after an I/O error or a response timeout, when a
    // script may have run already, and run it twice for one request (a
    // release counted down twice frees a lock an outer scope still holds).
    // `scripts::retried` resends only what was refused without running.
    // Subscribing twice does no harm, so the subscriber keeps the retries.
    let retries = if resp3_pushes { 3 } else { 0 };
    let mut builder = ClusterClientBuilder::new(nodes)
        .connection_timeout(config.connect_timeout)
        .response_timeout(config.command_timeout)
        .tcp_settings(tcp)
        .retries(retries)
        .min_retry_wait(20)
        .max_retry_wait(500);
    if resp3_pushes {
        builder = builder.use_protocol(ProtocolVersion::RESP3);
    }
    #[cfg(feature = "tls-rustls")]
    if let Some(roots) = &config.tls_roots {
        builder = builder.certs(redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(roots.clone()),
        });
    }
    Ok(builder)
}

/// Where a Cluster's connections come from: clients built here from seed
/// nodes, or an application's [`ClusterClient`] used as it is.
pub(crate) struct ClusterSource {
    /// For the command connections: redis-rs never resends on them.
    commands: ClusterClient,
    /// For the subscriber: RESP3, for pushes.
    subscriber: ClusterClient,
}

impl ClusterSource {
    /// Clients of these seed nodes with this crate's settings (see
    /// [`cluster_builder`]).
    pub(crate) fn from_nodes(
        nodes: &[ConnectionInfo],
        config: &Config,
    ) -> Result<ClusterSource, LockError> {
        let from_redis = |err| LockError::from_redis(None, err);
        Ok(ClusterSource {
            commands: cluster_builder(nodes, config, false)?
                .build()
                .map_err(from_redis)?,
            subscriber: cluster_builder(nodes, config, true)?
                .build()
                .map_err(from_redis)?,
        })
    }

    /// An application's client, for every connection. Its settings cannot
    /// be read or changed (beyond the timeouts), so it is checked instead:
    /// it must not resend commands, since a lock script resent after an I/O
    /// error or a timeout may run twice (see `cluster_builder`), and it must
    /// speak RESP3, in which release messages arrive as pushes.
    pub(crate) fn from_client(client: &ClusterClient) -> Result<ClusterSource, LockError> {
        let settings = ClusterClientSettings::of(client);
        if settings.retries != Some(0) {
            let retries = settings
                .retries
                .map_or_else(|| "an unknown number of".to_owned(), |n| n.to_string());
            return Err(LockError::Config(format!(
                "the ClusterClient resends commands ({retries} retries): a lock script resent \
                 after an I/O error or a timeout may have run already and would run twice. \
                 Build the ClusterClient for locks with .retries(0) (the lock client resends \
                 only what was refused without running), or pass the node URLs or \
                 ConnectionInfos (Deployment::cluster, Deployment::cluster_nodes)"
            )));
        }
        if !settings.resp3 {
            return Err(LockError::Config(
                "the ClusterClient speaks RESP2: release messages arrive as RESP3 pushes. \
                 Build the ClusterClient for locks with \
                 .use_protocol(redis::ProtocolVersion::RESP3)"
                    .into(),
            ));
        }
        Ok(ClusterSource {
            commands: client.clone(),
            subscriber: client.clone(),
        })
    }

    /// A command connection, with the client's connect and command timeouts.
    pub(crate) async fn commands(&self, config: &Config) -> RedisResult<ClusterConnection> {
        self.commands
            .get_async_connection_with_config(cluster_config(config))
            .await
    }

    /// The connection for calls followed by `WAIT` (see
    /// [`Config::replicated_timeout`]).
    pub(crate) async fn replicated(&self, config: &Config) -> RedisResult<ClusterConnection> {
        let settings = cluster_config(config).set_response_timeout(config.replicated_timeout());
        self.commands
            .get_async_connection_with_config(settings)
            .await
    }

    /// The subscriber connection: pushes go to `push`.
    pub(crate) async fn subscriber(
        &self,
        config: &Config,
        push: impl redis::aio::AsyncPushSender,
    ) -> RedisResult<ClusterConnection> {
        self.subscriber
            .get_async_connection_with_config(cluster_config(config).set_push_sender(push))
            .await
    }
}

/// The timeouts of every cluster connection.
fn cluster_config(config: &Config) -> ClusterConfig {
    ClusterConfig::new()
        .set_connection_timeout(config.connect_timeout)
        .set_response_timeout(config.command_timeout)
}

/// What can be learned of a [`ClusterClient`]'s settings. redis-rs has no
/// getters for them; they are read from its `Debug` text, and a setting
/// that cannot be found there reads as unsafe (unknown retries, RESP2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClusterClientSettings {
    /// How often a failed command is sent again, if found.
    pub(crate) retries: Option<u32>,
    /// Whether its connections speak RESP3.
    pub(crate) resp3: bool,
    /// Whether its connections use TLS.
    pub(crate) tls: bool,
}

impl ClusterClientSettings {
    pub(crate) fn of(client: &ClusterClient) -> ClusterClientSettings {
        let text = format!("{client:?}");
        // The seed nodes come first; only the client-wide parameters count.
        let params = text
            .split_once("cluster_params:")
            .map_or("", |(_, params)| params);
        let retries = params
            .split_once("number_of_retries: ")
            .and_then(|(_, rest)| {
                let digits =
                    rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
                rest[..digits].parse().ok()
            });
        ClusterClientSettings {
            retries,
            resp3: params.contains("protocol: Some(RESP3)"),
            tls: params.contains(" tls: Some("),
        }
    }
}

/// The sentinels of one service, asked for its master.
pub(crate) struct Sentinels {
    client: Arc<tokio::sync::Mutex<SentinelClient>>,
    /// The master address last learned, so that every connection through
    /// these sentinels moves as soon as one of them found the new master.
    latest: RwLock<Option<String>>,
    /// PEM roots trusted for a master reached over TLS without
    /// certificates of its own.
    tls_roots: Option<Vec<u8>>,
}

impl Sentinels {
    /// Sentinels at `urls` watching `service`; the data nodes are reached
    /// with the credentials and database of the first URL.
    pub(crate) fn new(
        urls: &[String],
        service: &str,
        config: &Config,
    ) -> Result<Sentinels, LockError> {
        let infos = urls
            .iter()
            .map(|url| connection_info(url))
            .collect::<Result<Vec<_>, _>>()?;
        Sentinels::of_nodes(infos, service, config)
    }

    /// An application's Sentinel client (shared with clones of its
    /// deployment), for its service's master.
    pub(crate) fn of_client(
        client: Arc<tokio::sync::Mutex<SentinelClient>>,
        config: &Config,
    ) -> Sentinels {
        Sentinels {
            client,
            latest: RwLock::new(None),
            tls_roots: config.tls_roots.clone(),
        }
    }

    /// Sentinels described by these connection infos (URLs parsed, or
    /// infos handed over) watching `service`; the data nodes are reached
    /// with the credentials and database of the first one.
    pub(crate) fn of_nodes(
        infos: Vec<ConnectionInfo>,
        service: &str,
        config: &Config,
    ) -> Result<Sentinels, LockError> {
        let infos: Vec<ConnectionInfo> = infos.into_iter().map(node_info).collect();
        let node = infos
            .first()
            .map(|first| first.redis_settings().clone())
            .ok_or_else(|| LockError::Config("no sentinel given".into()))?;
        // Sentinels themselves take no database number and speak RESP2.
        let sentinel_infos: Vec<ConnectionInfo> = infos
            .into_iter()
            .map(|info| {
                let settings = info.redis_settings().clone().set_db(0);
                info.set_redis_settings(settings)
            })
            .collect();
        let client = SentinelClient::build(
            sentinel_infos,
            // An owned name fits `build` with and without the `tls-rustls` feature
            // (redis-rs takes `String` without it, `impl AsRef<str>` with it).
            String::from(service),
            Some(SentinelNodeConnectionInfo::default().set_redis_connection_info(node)),
            SentinelServerType::Master,
        )
        .map_err(|err| LockError::from_redis(None, err))?;
        Ok(Sentinels {
            client: Arc::new(tokio::sync::Mutex::new(client)),
            latest: RwLock::new(None),
            tls_roots: config.tls_roots.clone(),
        })
    }

    /// A client for the master the sentinels report now (checked to be
    /// master by asking it its role), with this crate's TCP keepalive and
    /// the configured TLS roots where the Sentinel client's data-node
    /// settings leave them unset.
    pub(crate) async fn master(&self) -> RedisResult<redis::Client> {
        let master = self.client.lock().await.async_get_client().await?;
        let info = node_info(master.get_connection_info().clone());
        let master = match info.addr() {
            ConnectionAddr::TcpTls { .. } => open_client(info, self.tls_roots.as_ref())?,
            _ => redis::Client::open(info)?,
        };
        *self.latest.write().unwrap_or_else(|e| e.into_inner()) =
            Some(master.get_connection_info().addr().to_string());
        Ok(master)
    }

    /// A client of one of the sentinels themselves (the first that answers
    /// as one), for what they know beyond the master's address.
    pub(crate) async fn sentinel(&self) -> RedisResult<redis::Client> {
        self.client.lock().await.async_get_sentinel_client().await
    }

    /// The master address last learned, if any.
    pub(crate) fn latest(&self) -> Option<String> {
        self.latest
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// A connection to whichever server the sentinels report as master.
///
/// Commands go to the current master through a [`ConnectionManager`]. When
/// one fails with a connection error, or with READONLY because the server
/// became a replica in a failover, the sentinels are asked again and, if the
/// master moved, a new manager replaces the old one. A READONLY command was
/// not carried out, so it is sent once more to the new master; any other
/// failed command is returned as an error (it may or may not have run), and
/// the callers retry as they do after any connection error.
#[derive(Clone)]
pub(crate) struct Following {
    shared: Arc<FollowingShared>,
    db: i64,
}

struct FollowingShared {
    sentinels: Arc<Sentinels>,
    config: ConnectionManagerConfig,
    /// Called after commands moved to a new master.
    on_switch: OnSwitch,
    /// Connects with RESP3, for pub/sub pushes.
    pushes: bool,
    current: RwLock<(String, ConnectionManager)>,
    /// Held while the sentinels are asked, so that one failure makes one
    /// lookup however many commands failed with it.
    refreshing: tokio::sync::Mutex<()>,
    /// Commands in a row without an answer.
    timeouts: Unanswered,
}

/// What to do once a [`Following`] connection moved to a new master.
pub(crate) type OnSwitch = Arc<dyn Fn() + Send + Sync>;

impl Following {
    /// Connects to the current master with `config` (a push sender in it
    /// carries over to every later master).
    pub(crate) async fn connect(
        sentinels: Arc<Sentinels>,
        config: ConnectionManagerConfig,
        on_switch: OnSwitch,
        pushes: bool,
    ) -> RedisResult<Following> {
        let master = with_pushes(sentinels.master().await?, pushes)?;
        let address = master.get_connection_info().addr().to_string();
        let db = master.get_connection_info().redis_settings().db();
        let manager = ConnectionManager::new_with_config(master, config.clone()).await?;
        Ok(Following {
            shared: Arc::new(FollowingShared {
                sentinels,
                config,
                on_switch,
                pushes,
                current: RwLock::new((address, manager)),
                refreshing: tokio::sync::Mutex::new(()),
                timeouts: Unanswered::default(),
            }),
            db,
        })
    }

    fn current(&self) -> (String, ConnectionManager) {
        // Only ever replaced whole; a panic cannot leave it torn.
        self.shared
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The connection to send on: the current one, unless another
    /// connection through the same sentinels learned of a new master.
    async fn up_to_date(&self) -> (String, ConnectionManager) {
        let (address, manager) = self.current();
        match self.shared.sentinels.latest() {
            Some(latest) if latest != address => {
                self.refresh(&address).await;
                self.current()
            }
            _ => (address, manager),
        }
    }

    /// The address of the master commands go to now.
    pub(crate) fn address(&self) -> String {
        self.current().0
    }

    /// The manager commands go to now.
    pub(crate) fn manager(&self) -> ConnectionManager {
        self.current().1
    }

    /// Asks the sentinels for the master and switches to it if it moved
    /// since `seen` (the address the failed command went to). True when
    /// commands now go elsewhere.
    pub(crate) async fn refresh(&self, seen: &str) -> bool {
        let _one_at_a_time = self.shared.refreshing.lock().await;
        if self.address() != seen {
            return true; // another caller switched already
        }
        let Some(master) = self.ask_master().await else {
            return false;
        };
        let address = master.get_connection_info().addr().to_string();
        if address == seen {
            return false;
        }
        match ConnectionManager::new_with_config(master, self.shared.config.clone()).await {
            Ok(manager) => {
                tracing::info!(from = %seen, to = %address, "following the master to its new address");
                self.switch_to(address, manager);
                true
            }
            Err(err) => {
                tracing::debug!(error = %Chain(&err), master = %address, "connecting to the new master failed");
                false
            }
        }
    }

    /// The client of the master the sentinels report now, or `None` (logged)
    /// when they cannot say.
    async fn ask_master(&self) -> Option<redis::Client> {
        let master = self.shared.sentinels.master().await;
        match master.and_then(|master| with_pushes(master, self.shared.pushes)) {
            Ok(master) => Some(master),
            Err(err) => {
                tracing::debug!(error = %Chain(&err), "asking the sentinels for the master failed");
                None
            }
        }
    }

    /// Sends commands to `manager`, connected to `address`, from now on.
    fn switch_to(&self, address: String, manager: ConnectionManager) {
        *self
            .shared
            .current
            .write()
            .unwrap_or_else(|e| e.into_inner()) = (address, manager);
        (self.shared.on_switch)();
    }

    /// See [`Conn::timed_out`]: after a few commands in a row without an
    /// answer, asks the sentinels for the master and connects to it afresh,
    /// even at the same address.
    fn timed_out(&self) {
        if self.shared.timeouts.one_more() {
            let this = self.clone();
            tokio::spawn(async move { this.reconnect().await });
        }
    }

    fn answered(&self) {
        self.shared.timeouts.reset();
    }

    /// Replaces the connection with a fresh one to the master the
    /// sentinels report now.
    pub(crate) async fn reconnect(&self) {
        let _one_at_a_time = self.shared.refreshing.lock().await;
        let Some(master) = self.ask_master().await else {
            return;
        };
        let address = master.get_connection_info().addr().to_string();
        match ConnectionManager::new_lazy_with_config(master, self.shared.config.clone()) {
            Ok(manager) => {
                tracing::warn!(master = %address, "Redis stopped answering; reconnecting");
                self.switch_to(address, manager);
            }
            Err(err) => {
                tracing::debug!(error = %Chain(&err), "replacing an unanswering connection failed")
            }
        }
    }

    /// After a failed command: follow the master if it moved, and say
    /// whether the command can be sent again (it was refused as READONLY,
    /// so it did not run, and there is a new master to send it to).
    async fn after_failure(&self, seen: &str, err: &RedisError) -> bool {
        if !moved_master(err) {
            return false;
        }
        // Refused as READONLY, or never connected: the command did not run.
        let did_not_run = is_read_only(err) || err.is_connection_refusal();
        self.refresh(seen).await && did_not_run
    }
}
/// The same master's client, speaking RESP3 (with this crate's TCP
/// keepalive, from [`Sentinels::master`]: it idles between messages) when
/// `pushes` is set.
fn with_pushes(master: redis::Client, pushes: bool) -> RedisResult<redis::Client> {
    if pushes {
        let info = master.get_connection_info().clone();
        redis::Client::open(resp3(node_info(info)))
    } else {
        Ok(master)
    }
}

/// Whether an error suggests the master is no longer where it was.
fn moved_master(err: &RedisError) -> bool {
    is_read_only(err) || not_reached(err)
}

impl Following {
    /// After a command's `outcome`: whether it failed because the master
    /// moved and can be sent again to the new one (see `after_failure`).
    /// redis-rs hands a server's error reply back as a value (it becomes
    /// an error only later, in `query_async`): a READONLY reply, the first
    /// of a pipeline's, says the master was demoted under this connection.
    async fn send_again(&self, seen: &str, outcome: Result<&Value, &RedisError>) -> bool {
        match outcome {
            Err(err) => self.after_failure(seen, err).await,
            Ok(Value::ServerError(refused)) => {
                let err = RedisError::from(refused.clone());
                is_read_only(&err) && self.after_failure(seen, &err).await
            }
            Ok(_) => false,
        }
    }
}

impl ConnectionLike for Following {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (seen, mut manager) = self.up_to_date().await;
            let outcome = manager.req_packed_command(cmd).await;
            if self.send_again(&seen, outcome.as_ref()).await {
                return self.manager().req_packed_command(cmd).await;
            }
            outcome
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (seen, mut manager) = self.up_to_date().await;
            let outcome = manager.req_packed_commands(pipeline, offset, count).await;
            // Only a refusal of the pipeline's first command proves that
            // nothing of it wrote (the scripts' pipelines: the script, then
            // WAIT, which a replica refuses too).
            let first = match &outcome {
                Ok(values) => values.first().map(Ok),
                Err(err) => Some(Err(err)),
            };
            if let Some(first) = first
                && self.send_again(&seen, first).await
            {
                return self
                    .manager()
                    .req_packed_commands(pipeline, offset, count)
                    .await;
            }
            outcome
        })
    }

    fn get_db(&self) -> i64 {
        self.db
    }
}

#[cfg(test)]
mod tests {
    use redis::cluster::ClusterClient;

    use super::*;

    #[test]
    fn reads_a_cluster_clients_retries_protocol_and_tls() {
        let seeds = ["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"];
        let default = ClusterClient::new(seeds).unwrap();
        assert_eq!(
            ClusterClientSettings::of(&default),
            ClusterClientSettings {
                retries: Some(16),
                resp3: false,
                tls: false
            },
            "{default:?}"
        );
        let for_locks = ClusterClient::builder(seeds)
            .retries(0)
            .use_protocol(ProtocolVersion::RESP3)
            .build()
            .unwrap();
        assert_eq!(
            ClusterClientSettings::of(&for_locks),
            ClusterClientSettings {
                retries: Some(0),
                resp3: true,
                tls: false
            },
            "{for_locks:?}"
        );
        // RESP3 in the seed URLs counts as the client's protocol.
        let from_urls = ClusterClient::builder(["redis://127.0.0.1:7000/?protocol=resp3"])
            .retries(0)
            .build()
            .unwrap();
        assert!(ClusterClientSettings::of(&from_urls).resp3, "{from_urls:?}");
        #[cfg(feature = "tls-rustls")]
        {
            let tls = ClusterClient::new(["rediss://127.0.0.1:7000"]).unwrap();
            assert!(ClusterClientSettings::of(&tls).tls, "{tls:?}");
        }
    }

    #[test]
    fn a_cluster_client_that_resends_or_speaks_resp2_is_refused() {
        let seeds = ["redis://127.0.0.1:7000"];
        let resending = ClusterClient::builder(seeds)
            .use_protocol(ProtocolVersion::RESP3)
            .build()
            .unwrap();
        let err = ClusterSource::from_client(&resending)
            .err()
            .expect("refused");
        assert!(err.to_string().contains(".retries(0)"), "{err}");
        let resp2 = ClusterClient::builder(seeds).retries(0).build().unwrap();
        let err = ClusterSource::from_client(&resp2).err().expect("refused");
        assert!(err.to_string().contains("RESP3"), "{err}");
    }

    #[test]
    fn own_tcp_settings_win_and_ours_fill_the_gaps() {
        let info = node_info("redis://127.0.0.1:6379".into_connection_info().unwrap());
        assert!(info.tcp_settings().keepalive().is_some());
        let own = redis::io::tcp::TcpSettings::default()
            .set_nodelay(true)
            .set_keepalive(redis::io::tcp::socket2::TcpKeepalive::new());
        let info = node_info(
            "redis://127.0.0.1:6379"
                .into_connection_info()
                .unwrap()
                .set_tcp_settings(own),
        );
        assert!(info.tcp_settings().nodelay());
        // The application's keepalive (no probe times set) is kept as it is.
        assert_eq!(
            format!("{:?}", info.tcp_settings().keepalive()),
            format!("{:?}", Some(redis::io::tcp::socket2::TcpKeepalive::new()))
        );
    }
}
