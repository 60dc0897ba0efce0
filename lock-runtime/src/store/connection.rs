//! Connections to each kind of deployment behind one type, and the
//! subscriber side used for release messages.
//!
//! A single server and each Redlock master get a redis-rs
//! [`ConnectionManager`]; a Cluster gets a cluster connection, which routes
//! each script by its first key (every key of a call shares one slot); a
//! Sentinel-watched master gets a [`Following`] connection, which asks the
//! sentinels for the master again whenever the one it talks to fails or
//! turns into a replica.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{
    Cmd, ConnectionInfo, IntoConnectionInfo, Pipeline, ProtocolVersion, RedisError, RedisFuture,
    RedisResult, Value,
};

use crate::base::config::Config;
use crate::base::error::LockError;
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
            Err(err) => tracing::debug!(error = %err, "replacing an unanswering connection failed"),
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
    let settings = settings.set_user_timeout(Duration::from_secs(30));
    settings
}

/// Parses a URL, naming it in the error.
pub(crate) fn connection_info(url: &str) -> Result<ConnectionInfo, LockError> {
    url.into_connection_info()
        .map(|info| info.set_tcp_settings(tcp_settings()))
        .map_err(|err| LockError::Config(format!("bad Redis URL `{url}`: {err}")))
}

/// The same server with the RESP3 protocol, so that messages arrive as pushes.
pub(crate) fn resp3(info: ConnectionInfo) -> ConnectionInfo {
    let settings = info.redis_settings().clone();
    info.set_redis_settings(settings.set_protocol(ProtocolVersion::RESP3))
}

/// A redis-rs client trusting the configured TLS roots if any.
pub(crate) fn redis_client(
    info: ConnectionInfo,
    config: &Config,
) -> Result<redis::Client, LockError> {
    let client = match &config.tls_roots {
        #[cfg(feature = "tls")]
        Some(roots) => redis::Client::build_with_tls(
            info,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(roots.clone()),
            },
        ),
        _ => redis::Client::open(info),
    };
    client.map_err(|err| LockError::from_redis(None, err))
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

/// A builder for cluster connections to these seed nodes; `resp3` for the
/// subscriber, which needs pushes.
pub(crate) fn cluster_builder(
    urls: &[String],
    config: &Config,
    resp3_pushes: bool,
) -> Result<ClusterClientBuilder, LockError> {
    let nodes = urls
        .iter()
        .map(|url| connection_info(url).map(|info| if resp3_pushes { resp3(info) } else { info }))
        .collect::<Result<Vec<_>, _>>()?;
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
        .retries(retries)
        .min_retry_wait(20)
        .max_retry_wait(500);
    if resp3_pushes {
        builder = builder.use_protocol(ProtocolVersion::RESP3);
    }
    #[cfg(feature = "tls")]
    if let Some(roots) = &config.tls_roots {
        builder = builder.certs(redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(roots.clone()),
        });
    }
    Ok(builder)
}

/// The sentinels of one service, asked for its master.
pub(crate) struct Sentinels {
    client: tokio::sync::Mutex<SentinelClient>,
    /// The master address last learned, so that every connection through
    /// these sentinels moves as soon as one of them found the new master.
    latest: RwLock<Option<String>>,
}

impl Sentinels {
    /// Sentinels at `urls` watching `service`; the data nodes are reached
    /// with the credentials and database of the first URL.
    pub(crate) fn new(urls: &[String], service: &str) -> Result<Sentinels, LockError> {
        let infos = urls
            .iter()
            .map(|url| connection_info(url))
            .collect::<Result<Vec<_>, _>>()?;
        let node = infos
            .first()
            .map(|first| first.redis_settings().clone())
            .ok_or_else(|| LockError::Config("no sentinel URL given".into()))?;
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
            // An owned name fits `build` with and without the `tls` feature
            // (redis-rs takes `String` without it, `impl AsRef<str>` with it).
            String::from(service),
            Some(SentinelNodeConnectionInfo::default().set_redis_connection_info(node)),
            SentinelServerType::Master,
        )
        .map_err(|err| LockError::from_redis(None, err))?;
        Ok(Sentinels {
            client: tokio::sync::Mutex::new(client),
            latest: RwLock::new(None),
        })
    }

    /// A client for the master the sentinels report now (checked to be
    /// master by asking it its role).
    pub(crate) async fn master(&self) -> RedisResult<redis::Client> {
        let master = self.client.lock().await.async_get_client().await?;
        *self.latest.write().unwrap_or_else(|e| e.into_inner()) =
            Some(master.get_connection_info().addr().to_string());
        Ok(master)
    }

    /// The master address last learned, if any.
    fn latest(&self) -> Option<String> {
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
                tracing::debug!(error = %err, master = %address, "connecting to the new master failed");
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
                tracing::debug!(error = %err, "asking the sentinels for the master failed");
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
            Err(err) => tracing::debug!(error = %err, "replacing an unanswering connection failed"),
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
        let did_not_run = err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
            || err.is_connection_refusal();
        self.refresh(seen).await && did_not_run
    }
}
/// The same master's client, speaking RESP3 (with this crate's TCP
/// settings: it idles between messages) when `pushes` is set.
fn with_pushes(master: redis::Client, pushes: bool) -> RedisResult<redis::Client> {
    if pushes {
        let info = master.get_connection_info().clone();
        redis::Client::open(resp3(info.set_tcp_settings(tcp_settings())))
    } else {
        Ok(master)
    }
}

/// Whether an error suggests the master is no longer where it was.
fn moved_master(err: &RedisError) -> bool {
    err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
        || err.is_io_error()
        || err.is_connection_refusal()
        || err.is_connection_dropped()
        || err.is_timeout()
}

impl ConnectionLike for Following {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (seen, mut manager) = self.up_to_date().await;
            match manager.req_packed_command(cmd).await {
                Err(err) if self.after_failure(&seen, &err).await => {
                    self.manager().req_packed_command(cmd).await
                }
                other => other,
            }
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
            match manager.req_packed_commands(pipeline, offset, count).await {
                Err(err) if self.after_failure(&seen, &err).await => {
                    self.manager()
                        .req_packed_commands(pipeline, offset, count)
                        .await
                }
                other => other,
            }
        })
    }

    fn get_db(&self) -> i64 {
        self.db
    }
}
