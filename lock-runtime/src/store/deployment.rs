//! Where the locks live: one server, a Cluster, a Sentinel-watched master,
//! or independent masters for Redlock; or this process's memory, for tests.

#[cfg(feature = "memory")]
use crate::store::memory::MemoryStore;

/// The Redis deployment a [`LockClient`](crate::LockClient) takes its locks on.
///
/// A plain URL (`&str` or `String`) is a single server, so
/// `LockClient::connect("redis://127.0.0.1:6379")` keeps working; the other
/// deployments have constructors. URLs may carry a user name, a password,
/// a database number (not in a Cluster) and the `rediss://` scheme for TLS.
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
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Deployment {
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
}

impl Deployment {
    /// A Redis Cluster reached through these seed nodes.
    pub fn cluster<I>(nodes: I) -> Deployment
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        Deployment::Cluster(nodes.into_iter().map(Into::into).collect())
    }

    /// The master of `service` as reported by these sentinels.
    pub fn sentinel<I>(sentinels: I, service: impl Into<String>) -> Deployment
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        Deployment::Sentinel {
            sentinels: sentinels.into_iter().map(Into::into).collect(),
            service: service.into(),
        }
    }

    /// Redlock over these independent masters (an odd number, 3 or 5, is usual).
    pub fn redlock<I>(masters: I) -> Deployment
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        Deployment::Redlock(masters.into_iter().map(Into::into).collect())
    }

    /// Every URL the deployment names, for checks and messages.
    pub(crate) fn urls(&self) -> &[String] {
        match self {
            Deployment::Server(url) => std::slice::from_ref(url),
            Deployment::Cluster(urls) | Deployment::Redlock(urls) => urls,
            Deployment::Sentinel { sentinels, .. } => sentinels,
            #[cfg(feature = "memory")]
            Deployment::Memory(_) => &[],
        }
    }

    /// Whether the deployment is one of Redis servers that names none.
    pub(crate) fn names_no_server(&self) -> bool {
        #[cfg(feature = "memory")]
        if let Deployment::Memory(_) = self {
            return false;
        }
        self.urls().is_empty()
    }
}

impl From<&str> for Deployment {
    fn from(url: &str) -> Deployment {
        Deployment::Server(url.to_owned())
    }
}

impl From<String> for Deployment {
    fn from(url: String) -> Deployment {
        Deployment::Server(url)
    }
}

impl From<&String> for Deployment {
    fn from(url: &String) -> Deployment {
        Deployment::Server(url.clone())
    }
}

#[cfg(feature = "memory")]
impl From<MemoryStore> for Deployment {
    fn from(store: MemoryStore) -> Deployment {
        Deployment::Memory(store)
    }
}
