//! The builder that sets a client's settings and connects it.

use std::time::Duration;

use crate::api::client::LockClient;
use crate::base::config::{Config, MAX_TIMEOUT};
use crate::base::error::LockError;
use crate::store::deployment::Deployment;

/// Builds a [`LockClient`] with settings other than the defaults.
///
/// ```no_run
/// # async fn run() -> Result<(), lock_runtime::LockError> {
/// use std::time::Duration;
/// use lock_runtime::LockClient;
///
/// let locks = LockClient::builder("redis://127.0.0.1:6379/0")
///     .prefix("billing:lock:")
///     .default_lease(Duration::from_secs(10))
///     .default_wait(Duration::from_secs(2))
///     .command_timeout(Duration::from_millis(500))
///     .connect()
///     .await?;
/// # drop(locks);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `connect` is awaited"]
pub struct LockClientBuilder {
    pub(crate) deployment: Deployment,
    pub(crate) config: Config,
}

impl LockClientBuilder {
    pub(crate) fn new(deployment: Deployment) -> Self {
        LockClientBuilder {
            deployment,
            config: Config::default(),
        }
    }

    /// The name this client's owner ids carry, so that an operator listing
    /// locks (`lockctl list`) can tell who holds what. Default: the
    /// program's name. Owner ids also carry the host and process id; see
    /// [`OwnerId`](crate::OwnerId).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.config.name = Some(name.into());
        self
    }

    /// Prefix of every Redis key and channel this client uses (default `lock:`).
    /// Clients that must exclude each other need the same prefix. It may not
    /// contain `{` or `}`, which would change the keys' Cluster hash slot.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.config.prefix = prefix.into();
        self
    }

    /// Lease of a lock when the caller names none (default 30 s). The lease is
    /// how long a lock outlives a holder that crashed; a live holder renews it.
    pub fn default_lease(mut self, lease: Duration) -> Self {
        self.config.default_lease = lease;
        self
    }

    /// How long to wait for a held lock when the caller names no wait
    /// (default 10 s). `Duration::ZERO` tries once.
    pub fn default_wait(mut self, wait: Duration) -> Self {
        self.config.default_wait = wait;
        self
    }

    /// A fixed safety margin for clock drift and scheduling delays, taken off
    /// each lease when deciding how long a lock is surely held (default: 1 %
    /// of the lease plus 2 ms).
    pub fn drift(mut self, drift: Duration) -> Self {
        self.config.drift = Some(drift);
        self
    }

    /// How long after Redis restarts no lock is granted (default 30 s;
    /// `Duration::ZERO` turns this off). Set it to at least the longest
    /// lease any client uses.
    ///
    /// A Redis that restarts without its data, or from an older snapshot
    /// (RDB, an AOF written every second, a backup), has forgotten locks
    /// while their holders, not told yet, go on working; granting the same
    /// locks at once would make two holders. This is the Redlock paper's
    /// *delayed restart*, done by the clients: a lock is refused (waiters
    /// wait, `wait(0)` gets [`LockError::Timeout`]) until the server has been
    /// up for this long, by when every lock granted before has run out and
    /// its holder has been told. It applies to every hash slot whose fencing
    /// counter came back through the restart, for every client, and to the
    /// other slots of a server this client saw restart; see
    /// [`strict_restart_quarantine`](Self::strict_restart_quarantine) for
    /// clients that connect after a restart that lost everything. A promoted
    /// replica is not a restart (see [`min_replicas`](Self::min_replicas)).
    /// Turned off, fencing tokens still never go back.
    ///
    /// At most a year: a longer one, `Duration::MAX` included, is taken as
    /// a year.
    pub fn restart_quarantine(mut self, quarantine: Duration) -> Self {
        self.config.restart_quarantine = quarantine.min(MAX_TIMEOUT);
        self
    }

    /// Also apply the [restart quarantine](Self::restart_quarantine) to a
    /// server this client never saw restart, as long as it has been up for
    /// less than the quarantine (default off). Turn it on when clients may
    /// start right after a Redis crash (a process restarted along with it);
    /// the price is that the first locks after *any* Redis start wait for the
    /// quarantine.
    pub fn strict_restart_quarantine(mut self, strict: bool) -> Self {
        self.config.strict_restart_quarantine = strict;
        self
    }

    /// Replicas that must confirm every acquisition and renewal before it
    /// counts (default 0; a request may name its own with
    /// [`LockRequest::min_replicas`](crate::LockRequest::min_replicas)).
    ///
    /// After granting a lock, the master is asked to `WAIT` until that many
    /// replicas have it. If fewer confirm within the
    /// [replica timeout](Self::replica_timeout), the lock is given back and
    /// the attempt fails with [`LockError::NotReplicated`] (retried within
    /// the wait). A renewal that is not confirmed does not move the lock's
    /// deadline. It costs one round trip to the replicas per acquisition
    /// and renewal.
    ///
    /// With Sentinel or a Cluster, this keeps a failover from granting a
    /// confirmed lock twice **only when it counts every replica of the
    /// master**. `WAIT` is satisfied by *any* N replicas, while the replica
    /// promoted need not be one of them: Sentinel skips replicas it cannot
    /// reach (a partition that leaves the master, one replica and a client
    /// on one side, the sentinels and the other replicas on the other) and
    /// ranks by `replica-priority` before replication offset, and a
    /// replica with `replica-priority 0`, never promoted, may be the one
    /// that confirmed. So with two replicas, `min_replicas(1)` narrows the
    /// window but does not close it; `min_replicas(2)` does, at the price
    /// that locks are refused (`NotReplicated`) while either replica is
    /// down or lagging. Only when no replica can be promoted (all at
    /// priority 0, so no failover) is a smaller count as safe.
    ///
    /// On Sentinel, the client reads the replicas when it connects and
    /// each time it follows the master to a new address (the master's
    /// `INFO replication`, and `SENTINEL REPLICAS` for their priorities),
    /// and logs a warning naming the counts when this setting is below
    /// them; [`strict_min_replicas`](Self::strict_min_replicas) refuses to
    /// connect instead. A lock that names its own count (including
    /// through the attribute's `min_replicas` option) is not checked: below
    /// every replica, it has the same gap.
    pub fn min_replicas(mut self, replicas: u32) -> Self {
        self.config.min_replicas = replicas;
        self
    }

    /// Refuse to connect to a Sentinel-watched master when
    /// [`min_replicas`](Self::min_replicas) does not count every replica
    /// that could take part in a failover (default off: a warning is
    /// logged instead).
    ///
    /// When set, [`connect`](Self::connect) reads the master's replicas
    /// (`INFO replication`) and what the sentinels know of them
    /// (`SENTINEL REPLICAS`: their `replica-priority`, and those down now,
    /// which Sentinel remembers until `SENTINEL RESET`), and fails with
    /// [`LockError::Config`] naming the counts when `min_replicas` is below
    /// the number of replicas while at least one of them can be promoted.
    /// A replica whose priority the sentinels do not report is counted as
    /// promotable. Replicas added later are read at the next failover the
    /// client follows, and a shortfall then is logged as a warning: the
    /// client does not stop. Other deployments are not checked.
    pub fn strict_min_replicas(mut self, strict: bool) -> Self {
        self.config.strict_min_replicas = strict;
        self
    }

    /// How long to wait for [replicas](Self::min_replicas) to confirm a
    /// write (default 500 ms). At most a year: a longer one, `Duration::MAX`
    /// included, is taken as a year.
    pub fn replica_timeout(mut self, timeout: Duration) -> Self {
        self.config.replica_timeout = timeout.min(MAX_TIMEOUT);
        self
    }

    /// The level of the `lock` span each acquisition opens (see
    /// [`LockGuard::span`](crate::LockGuard::span)); default `INFO`. A
    /// library in a larger application often wants `DEBUG`, so that its
    /// locks show only when asked for. Events at `WARN` (a lock lost, a
    /// failed release) name their lock themselves and show whatever this
    /// level is.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), lock_runtime::LockError> {
    /// let locks = lock_runtime::LockClient::builder("redis://127.0.0.1:6379")
    ///     .span_level(tracing::Level::DEBUG)
    ///     .connect()
    ///     .await?;
    /// # drop(locks);
    /// # Ok(())
    /// # }
    /// ```
    pub fn span_level(mut self, level: tracing::Level) -> Self {
        self.config.span_level = level;
        self
    }

    /// Connect even to a server that may evict keys (default: refuse).
    ///
    /// Lock keys expire after their lease, so under a `maxmemory` limit any
    /// policy but `noeviction` (`volatile-lru`, `allkeys-lru`, ...) lets
    /// Redis drop a held lock to make room, and grant it to the next caller
    /// while its holder works on; the holder only learns of it at its next
    /// renewal. [`connect`](Self::connect) therefore checks every server's
    /// `maxmemory` and `maxmemory-policy` and fails with
    /// [`LockError::Config`] when eviction is possible. Run locks on a
    /// server with `maxmemory-policy noeviction` (writes then fail with an
    /// error when memory is full, which the client reports) or without a
    /// memory limit. Set this only where losing mutual exclusion under
    /// memory pressure is acceptable; a warning is logged instead. A policy
    /// changed after the client connected is not noticed.
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.config.allow_eviction = allow;
        self
    }

    /// Time allowed for each attempt to open a connection (default 5 s).
    /// At most a year: a longer one, `Duration::MAX` included, is taken as
    /// a year.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect_timeout = timeout.min(MAX_TIMEOUT);
        self
    }

    /// Time allowed for any one Redis command, after which it fails with
    /// [`LockError::CommandTimeout`] (default 3 s). At most a year: a
    /// longer one, `Duration::MAX` included, is taken as a year.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.config.command_timeout = timeout.min(MAX_TIMEOUT);
        self
    }

    /// Trusts these PEM root certificates for `rediss://` URLs instead of the
    /// system's, for servers whose certificate comes from a private CA.
    #[cfg(feature = "tls-rustls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls-rustls")))]
    pub fn tls_root_certificates(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.config.tls_roots = Some(pem.into());
        self
    }

    /// Checks the settings, connects, and starts the client's background tasks.
    ///
    /// Fails with [`LockError::Config`] for a bad URL or setting,
    /// [`LockError::Auth`] for refused credentials and
    /// [`LockError::Unavailable`] or [`LockError::CommandTimeout`] when the
    /// server cannot be reached within the connect timeout.
    pub async fn connect(self) -> Result<LockClient, LockError> {
        self.config.check()?;
        if self.deployment.names_no_server() {
            return Err(LockError::Config("the deployment names no server".into()));
        }
        LockClient::open(self.deployment, self.config).await
    }
}

/// How clients are made: connected with default settings, or built.
impl LockClient {
    /// Connects with default settings to a `redis://` or `rediss://` URL
    /// (user name, password and database number come from the URL:
    /// `redis://user:secret@host:6379/2`), or to any other [`Deployment`].
    ///
    /// Must be called inside a Tokio runtime: the client starts its watchdog
    /// and subscriber tasks there.
    pub async fn connect(deployment: impl Into<Deployment>) -> Result<LockClient, LockError> {
        LockClient::builder(deployment).connect().await
    }

    /// A builder for settings other than the defaults.
    pub fn builder(deployment: impl Into<Deployment>) -> LockClientBuilder {
        LockClientBuilder::new(deployment.into())
    }
}
