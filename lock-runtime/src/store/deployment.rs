//! Where the locks live: one server, a Cluster, a Sentinel-watched master,
//! or independent masters for Redlock; or this process's memory, for tests.
//! Each is named by URLs, or by the redis-rs values an application already
//! has (a `redis::Client`, a `ConnectionInfo`, a `ClusterClient`, a
//! `SentinelClient`, a `ConnectionManager` to share).

use std::fmt;
use std::sync::Arc;

use redis::ConnectionInfo;
use redis::aio::ConnectionManager;
use redis::cluster::ClusterClient;
use redis::sentinel::SentinelClient;

use crate::base::redact::{Redacted, RedactedList};
#[cfg(feature = "memory")]
use crate::store::memory::MemoryStore;

/// The Redis deployment a [`LockClient`](crate::LockClient) takes its locks on.
///
/// A plain URL (`&str` or `String`) is a single server, so
/// `LockClient::connect("redis://127.0.0.1:6379")` keeps working; the other
/// deployments have constructors. URLs may carry a user name, a password,
/// a database number (not in a Cluster) and the `rediss://` scheme for TLS.
/// A password never shows: `Debug` output, errors and `tracing` fields
/// write it as `***`.
///
/// ```no_run
/// # async fn run() -> Result<(), lock_runtime::LockError> {
/// use lock_runtime::{Deployment, LockClient};
///
/// // Redis Cluster: any reachable nodes; the client learns the rest.
/// let cluster = LockClient::connect(Deployment::cluster([
///     "redis://10.0.0.1:7000",
///     "redis://10.0.0.2:7000",
/// ]))
/// .await?;
///
/// // A master watched by Sentinel, followed across failovers.
/// let sentinel = LockClient::builder(Deployment::sentinel(
///     ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"],
///     "locks",
/// ))
/// .min_replicas(1)
/// .connect()
/// .await?;
///
/// // Redlock over five independent masters.
/// let redlock = LockClient::connect(Deployment::redlock([
///     "redis://10.0.1.1:6379",
///     "redis://10.0.1.2:6379",
///     "redis://10.0.1.3:6379",
///     "redis://10.0.1.4:6379",
///     "redis://10.0.1.5:6379",
/// ]))
/// .await?;
/// # drop((cluster, sentinel, redlock));
/// # Ok(())
/// # }
/// ```
///
/// # Bring your own connection
///
/// An application that already talks to Redis through redis-rs can hand
/// over what it has instead of URLs: a `redis::Client` or a
/// [`ConnectionInfo`] (one server), a [`ClusterClient`], a
/// [`SentinelClient`] convert with `From`; lists of `ConnectionInfo` have
/// constructors ([`cluster_nodes`](Deployment::cluster_nodes),
/// [`sentinel_nodes`](Deployment::sentinel_nodes),
/// [`redlock_nodes`](Deployment::redlock_nodes)), and
/// [`shared`](Deployment::shared) lends the client an application's
/// [`ConnectionManager`] for its commands. Credentials, the database, TLS
/// certificates and TCP settings come with them. The lock client still opens
/// connections of its own from them, with the builder's timeouts; what
/// carries over where is in the guide's
/// [deployments chapter](crate::guide::deployments), section "Bring your
/// own connection".
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use lock_runtime::{Deployment, LockClient};
///
/// // The client the application already uses (password, database, TLS).
/// let redis = redis::Client::open("redis://:secret@10.0.0.1:6379/2")?;
/// let locks = LockClient::builder(redis.clone())
///     .command_timeout(Duration::from_millis(500))
///     .connect()
///     .await?;
///
/// // Redlock over clients built elsewhere.
/// let masters = ["redis://10.0.1.1:6379", "redis://10.0.1.2:6379", "redis://10.0.1.3:6379"]
///     .map(redis::Client::open)
///     .into_iter()
///     .collect::<Result<Vec<_>, _>>()?;
/// let redlock = LockClient::connect(Deployment::redlock_nodes(
///     masters.iter().map(|client| client.get_connection_info().clone()),
/// ))
/// .await?;
/// # drop((locks, redlock));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Deployment {
    pub(crate) spec: Spec,
}

/// What a [`Deployment`] names, kept out of the public API: the variants
/// carry redis-rs handles whose shape is this crate's business.
#[derive(Clone)]
pub(crate) enum Spec {
    /// One Redis server (or a proxy in front of one).
    Server(String),
    /// A Redis Cluster, reached through any of these seed nodes. Each lock's
    /// keys share one hash slot; release messages use sharded pub/sub.
    Cluster(Vec<String>),
    /// The master Redis Sentinel reports for `service`, asked of these
    /// sentinels (their own URLs, not the data nodes'). The client follows
    /// failovers to the new master. The password and database in the first
    /// sentinel URL are also used for the data nodes.
    Sentinel {
        /// URLs of the sentinels.
        sentinels: Vec<String>,
        /// The master's name in the sentinels' configuration.
        service: String,
    },
    /// Independent masters (no replication between them): a lock is held
    /// when a majority of them granted it (Redlock). See the README's
    /// "Redlock" section for what that promises.
    Redlock(Vec<String>),
    /// A store in this process's memory, for unit tests without Redis (see
    /// [`LockClient::in_memory`](crate::LockClient::in_memory)). Clients
    /// built on clones of one [`MemoryStore`] exclude each other.
    #[cfg(feature = "memory")]
    #[cfg_attr(docsrs, doc(cfg(feature = "memory")))]
    Memory(MemoryStore),
    /// One server, as a redis-rs [`ConnectionInfo`] describes it: from a
    /// `ConnectionInfo` or a `redis::Client` (`From` both). Its user name,
    /// password, database, protocol, TLS certificates and TCP settings are
    /// used; the builder's TLS roots only where it carries no certificates
    /// of its own, and TCP keepalive only where it sets none.
    ServerInfo(ConnectionInfo),
    /// One server whose command connection is the application's own
    /// [`ConnectionManager`], shared (see [`Deployment::shared`]); `client`
    /// reaches the same server and database, for the connections that
    /// cannot be shared.
    Shared {
        /// The application's connection, used for the lock scripts.
        manager: ConnectionManager,
        /// A client of the same server and database.
        client: redis::Client,
    },
    /// A Redis Cluster reached through these seed nodes, as redis-rs
    /// [`ConnectionInfo`]s (see [`Deployment::cluster_nodes`]). The user
    /// name, password and TLS mode of the first one are used for every node.
    ClusterNodes(Vec<ConnectionInfo>),
    /// A Redis Cluster through the application's own [`ClusterClient`]
    /// (`From`), whose settings are used as they are: it must be built with
    /// `.retries(0)` and `.use_protocol(ProtocolVersion::RESP3)`, or
    /// connecting fails with [`LockError::Config`](crate::LockError::Config)
    /// saying why.
    ClusterClient(ClusterClient),
    /// The master Sentinel reports for `service`, asked of these sentinels
    /// (see [`Deployment::sentinel_nodes`]). The user name, password and
    /// database of the first one are also used for the data nodes.
    SentinelNodes {
        /// The sentinels themselves.
        sentinels: Vec<ConnectionInfo>,
        /// The master's name in the sentinels' configuration.
        service: String,
    },
    /// The master an application's [`SentinelClient`] finds (`From`): its
    /// sentinels, service name and data-node settings (credentials, TLS,
    /// database) are used. It must be built with
    /// `SentinelServerType::Master`. Clones of this deployment share the
    /// one `SentinelClient`.
    SentinelClient(Arc<tokio::sync::Mutex<SentinelClient>>),
    /// Redlock over independent masters given as redis-rs
    /// [`ConnectionInfo`]s (see [`Deployment::redlock_nodes`]).
    RedlockNodes(Vec<ConnectionInfo>),
}

impl Deployment {
    /// What `spec` names.
    pub(crate) fn of(spec: Spec) -> Deployment {
        Deployment { spec }
    }

    /// One Redis server (or a proxy in front of one), by URL: the same as
    /// `Deployment::from(url)`.
    pub fn server(url: impl Into<String>) -> Deployment {
        Deployment::of(Spec::Server(url.into()))
    }

    /// A Redis Cluster reached through these seed nodes.
    pub fn cluster<I>(nodes: I) -> Deployment
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        Deployment::of(Spec::Cluster(nodes.into_iter().map(Into::into).collect()))
    }

    /// The master of `service` as reported by these sentinels.
    pub fn sentinel<I>(sentinels: I, service: impl Into<String>) -> Deployment
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        Deployment::of(Spec::Sentinel {
            sentinels: sentinels.into_iter().map(Into::into).collect(),
            service: service.into(),
        })
    }

    /// Redlock over these independent masters (an odd number, 3 or 5, is usual).
    pub fn redlock<I>(masters: I) -> Deployment
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        Deployment::of(Spec::Redlock(masters.into_iter().map(Into::into).collect()))
    }

    /// A Redis Cluster reached through these seed nodes, given as redis-rs
    /// [`ConnectionInfo`]s (from a `redis::Client`:
    /// `client.get_connection_info().clone()`).
    ///
    /// The lock client builds its own cluster connections from them, with
    /// its own settings (no resent commands, the builder's timeouts, TCP
    /// keepalive and TLS roots). redis-rs takes the user name, password and
    /// TLS mode of the first node for every node, and cannot carry TLS
    /// certificates kept inside a `ConnectionInfo` into cluster connections:
    /// such nodes are refused when connecting; trust a private CA with
    /// [`tls_root_certificates`](crate::LockClientBuilder::tls_root_certificates),
    /// or pass a [`ClusterClient`] built with `.certs(...)`.
    pub fn cluster_nodes<I>(nodes: I) -> Deployment
    where
        I: IntoIterator<Item = ConnectionInfo>,
    {
        Deployment::of(Spec::ClusterNodes(nodes.into_iter().collect()))
    }

    /// The master of `service` as reported by these sentinels, given as
    /// redis-rs [`ConnectionInfo`]s. The data nodes are reached with the
    /// user name, password and database of the first one, without TLS; for
    /// other data-node settings pass a [`SentinelClient`] instead.
    pub fn sentinel_nodes<I>(sentinels: I, service: impl Into<String>) -> Deployment
    where
        I: IntoIterator<Item = ConnectionInfo>,
    {
        Deployment::of(Spec::SentinelNodes {
            sentinels: sentinels.into_iter().collect(),
            service: service.into(),
        })
    }

    /// Redlock over these independent masters, given as redis-rs
    /// [`ConnectionInfo`]s (from `redis::Client`s:
    /// `clients.iter().map(|c| c.get_connection_info().clone())`).
    pub fn redlock_nodes<I>(masters: I) -> Deployment
    where
        I: IntoIterator<Item = ConnectionInfo>,
    {
        Deployment::of(Spec::RedlockNodes(masters.into_iter().collect()))
    }

    /// One server, with the application's [`ConnectionManager`] as the lock
    /// client's command connection: lock scripts and renewals go out on it,
    /// between the application's own commands. `client` must reach the same
    /// server and database (checked when connecting); the lock client opens
    /// from it the two connections that cannot be shared: the subscriber for
    /// release messages and the one for writes that wait for replicas.
    ///
    /// Sharing is safe for mutual exclusion as long as the application
    /// never changes the state of that connection (`SELECT`, `CLIENT REPLY`,
    /// `MULTI` sent as separate commands rather than an atomic pipeline,
    /// `HELLO`, `RESET`, `AUTH` as another user). It keeps locks alive only
    /// while the application sends no blocking command on it (`BLPOP`,
    /// `XREAD BLOCK`, `WAIT`, a slow script): renewals queue behind it, and a
    /// renewal that comes too late loses the lock. After a few commands in a
    /// row go unanswered, the lock client stops sharing and opens its own
    /// command connection from `client`. The manager's own response timeout
    /// and reconnection settings stay; the builder's command timeout still
    /// bounds every call.
    pub fn shared(manager: ConnectionManager, client: redis::Client) -> Deployment {
        Deployment::of(Spec::Shared { manager, client })
    }

    /// Every URL the deployment names, for checks and messages.
    pub(crate) fn urls(&self) -> &[String] {
        match &self.spec {
            Spec::Server(url) => std::slice::from_ref(url),
            Spec::Cluster(urls) | Spec::Redlock(urls) => urls,
            Spec::Sentinel { sentinels, .. } => sentinels,
            _ => &[],
        }
    }

    /// Whether the deployment is one of Redis servers that names none.
    pub(crate) fn names_no_server(&self) -> bool {
        match &self.spec {
            #[cfg(feature = "memory")]
            Spec::Memory(_) => false,
            Spec::ServerInfo(_)
            | Spec::Shared { .. }
            | Spec::ClusterClient(_)
            | Spec::SentinelClient(_) => false,
            Spec::ClusterNodes(nodes) | Spec::RedlockNodes(nodes) => nodes.is_empty(),
            Spec::SentinelNodes { sentinels, .. } => sentinels.is_empty(),
            _ => self.urls().is_empty(),
        }
    }

    /// Whether this is a Redis Cluster (sharded release messages, one
    /// connection for every slot).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(
            &self.spec,
            Spec::Cluster(_) | Spec::ClusterNodes(_) | Spec::ClusterClient(_)
        )
    }

    /// Whether this is Redlock over independent masters.
    pub(crate) fn is_redlock(&self) -> bool {
        matches!(&self.spec, Spec::Redlock(_) | Spec::RedlockNodes(_))
    }

    /// Whether connecting may need TLS as far as can be seen beforehand:
    /// a `rediss://` URL, or a TLS address in a `ConnectionInfo` or client.
    /// A `SentinelClient` does not say.
    #[cfg(feature = "tls-rustls")]
    pub(crate) fn may_use_tls(&self) -> bool {
        let tls =
            |info: &ConnectionInfo| matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. });
        match &self.spec {
            Spec::ServerInfo(info) => tls(info),
            Spec::Shared { client, .. } => tls(client.get_connection_info()),
            Spec::ClusterNodes(nodes) | Spec::RedlockNodes(nodes) => nodes.iter().any(tls),
            Spec::SentinelNodes { sentinels, .. } => sentinels.iter().any(tls),
            Spec::ClusterClient(client) => {
                crate::store::connection::ClusterClientSettings::of(client).tls
            }
            _ => self
                .urls()
                .iter()
                .any(|url| url.starts_with("rediss://") || url.starts_with("valkeys://")),
        }
    }
}

/// Lists what each deployment names, with every password shown as `***`
/// (redis-rs redacts passwords in its own `Debug` output).
impl fmt::Debug for Deployment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.spec {
            Spec::Server(url) => f.debug_tuple("Server").field(&Redacted(url)).finish(),
            Spec::Cluster(urls) => f.debug_tuple("Cluster").field(&RedactedList(urls)).finish(),
            Spec::Sentinel { sentinels, service } => f
                .debug_struct("Sentinel")
                .field("sentinels", &RedactedList(sentinels))
                .field("service", service)
                .finish(),
            Spec::Redlock(urls) => f.debug_tuple("Redlock").field(&RedactedList(urls)).finish(),
            #[cfg(feature = "memory")]
            Spec::Memory(store) => f.debug_tuple("Memory").field(store).finish(),
            Spec::ServerInfo(info) => f.debug_tuple("ServerInfo").field(info).finish(),
            Spec::Shared { manager, client } => f
                .debug_struct("Shared")
                .field("manager", manager)
                .field("client", client)
                .finish(),
            Spec::ClusterNodes(nodes) => f.debug_tuple("ClusterNodes").field(nodes).finish(),
            Spec::ClusterClient(client) => f.debug_tuple("ClusterClient").field(client).finish(),
            Spec::SentinelNodes { sentinels, service } => f
                .debug_struct("SentinelNodes")
                .field("sentinels", sentinels)
                .field("service", service)
                .finish(),
            // redis-rs gives a SentinelClient no `Debug`.
            Spec::SentinelClient(_) => f.write_str("SentinelClient(..)"),
            Spec::RedlockNodes(nodes) => f.debug_tuple("RedlockNodes").field(nodes).finish(),
        }
    }
}

impl From<&str> for Deployment {
    fn from(url: &str) -> Deployment {
        Deployment::of(Spec::Server(url.to_owned()))
    }
}

impl From<String> for Deployment {
    fn from(url: String) -> Deployment {
        Deployment::of(Spec::Server(url))
    }
}

impl From<&String> for Deployment {
    fn from(url: &String) -> Deployment {
        Deployment::of(Spec::Server(url.clone()))
    }
}

/// One server: the client's connection info (address, credentials,
/// database, protocol, TLS certificates, TCP settings).
impl From<redis::Client> for Deployment {
    fn from(client: redis::Client) -> Deployment {
        Deployment::of(Spec::ServerInfo(client.get_connection_info().clone()))
    }
}

/// One server: the client's connection info.
impl From<&redis::Client> for Deployment {
    fn from(client: &redis::Client) -> Deployment {
        Deployment::of(Spec::ServerInfo(client.get_connection_info().clone()))
    }
}

/// One server.
impl From<ConnectionInfo> for Deployment {
    fn from(info: ConnectionInfo) -> Deployment {
        Deployment::of(Spec::ServerInfo(info))
    }
}

/// A Redis Cluster through this client, whose settings are used as they
/// are: it must be built with `.retries(0)` and
/// `.use_protocol(ProtocolVersion::RESP3)`, or connecting fails with
/// [`LockError::Config`](crate::LockError::Config) saying why.
impl From<ClusterClient> for Deployment {
    fn from(client: ClusterClient) -> Deployment {
        Deployment::of(Spec::ClusterClient(client))
    }
}

/// The master this Sentinel client finds: its sentinels, service name and
/// data-node settings (credentials, TLS, database) are used. It must be
/// built with `SentinelServerType::Master`. Clones of the deployment share
/// the one `SentinelClient`.
impl From<SentinelClient> for Deployment {
    fn from(client: SentinelClient) -> Deployment {
        Deployment::of(Spec::SentinelClient(Arc::new(tokio::sync::Mutex::new(
            client,
        ))))
    }
}

#[cfg(feature = "memory")]
#[cfg_attr(docsrs, doc(cfg(feature = "memory")))]
impl From<MemoryStore> for Deployment {
    fn from(store: MemoryStore) -> Deployment {
        Deployment::of(Spec::Memory(store))
    }
}
