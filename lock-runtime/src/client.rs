//! The client: connections, background tasks, and the entry point for locks.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{IntoConnectionInfo, ProtocolVersion};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::config::{Config, LockClientBuilder};
use crate::error::LockError;
use crate::request::{Kind, LockRequest};
use crate::scripts::{Quarantine, Scripts};
use crate::wakeups::Wakeups;
use crate::watchdog::{self, Registry};

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

pub(crate) struct Inner {
    pub(crate) id: Uuid,
    pub(crate) config: Config,
    pub(crate) scripts: Scripts,
    pub(crate) wakeups: Wakeups,
    pub(crate) registry: Arc<Registry>,
    next_scope: AtomicU64,
    shutdown: CancellationToken,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Guards keep the client alive, so nothing is held any more: stop
        // the watchdog and the subscriber.
        self.shutdown.cancel();
    }
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClient")
            .field("id", &self.inner.id)
            .field("prefix", &self.inner.config.prefix)
            .field("held", &self.inner.registry.len())
            .finish_non_exhaustive()
    }
}

/// A redis-rs client for `info`, trusting the configured TLS roots if any.
fn redis_client(info: redis::ConnectionInfo, config: &Config) -> Result<redis::Client, LockError> {
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

/// The server's run id, which changes whenever it restarts, and its uptime.
async fn server_run(conn: &ConnectionManager) -> redis::RedisResult<(String, Duration)> {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn.clone())
        .await?;
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name))
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    let uptime = field("uptime_in_seconds:").parse().unwrap_or(u64::MAX);
    Ok((field("run_id:"), Duration::from_secs(uptime)))
}

impl LockClient {
    /// Connects with default settings to a `redis://` or `rediss://` URL;
    /// user name, password and database number come from the URL
    /// (`redis://user:secret@host:6379/2`).
    ///
    /// Must be called inside a Tokio runtime: the client starts its watchdog
    /// and subscriber tasks there.
    pub async fn connect(url: &str) -> Result<LockClient, LockError> {
        LockClient::builder(url).connect().await
    }

    /// A builder for settings other than the defaults.
    pub fn builder(url: &str) -> LockClientBuilder {
        LockClientBuilder::new(url)
    }

    pub(crate) async fn open(url: String, config: Config) -> Result<LockClient, LockError> {
        #[cfg(feature = "tls")]
        if url.starts_with("rediss://") {
            // rustls needs one crypto provider per process; keep the user's if set.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let info = url
            .as_str()
            .into_connection_info()
            .map_err(|err| LockError::Config(format!("bad Redis URL `{url}`: {err}")))?;
        let redis_settings = info.redis_settings().clone();
        let subscriber_info = info
            .clone()
            .set_redis_settings(redis_settings.set_protocol(ProtocolVersion::RESP3));
        let client = redis_client(info, &config)?;
        let subscriber_client = redis_client(subscriber_info, &config)?;

        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.connect_timeout))
            .set_response_timeout(Some(config.command_timeout))
            // Few quick retries per reconnection; every failed command
            // starts a new reconnection, so this never gives up for good.
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(500));

        let shutdown = CancellationToken::new();
        let registry = Arc::new(Registry::default());
        let connecting = async {
            let conn = ConnectionManager::new_with_config(client, manager_config.clone()).await?;
            let wakeups = Wakeups::start(
                subscriber_client,
                manager_config.clone(),
                registry.clone(),
                shutdown.clone(),
            )
            .await?;
            Ok::<_, redis::RedisError>((conn, wakeups))
        };
        // The manager retries; bound the whole attempt by the connect timeout.
        let limit = config.connect_timeout * 3;
        let (conn, wakeups) = match tokio::time::timeout(limit, connecting).await {
            Ok(Ok(connected)) => connected,
            Ok(Err(err)) => {
                shutdown.cancel();
                return Err(LockError::from_redis(None, err));
            }
            Err(_) => {
                shutdown.cancel();
                return Err(LockError::CommandTimeout {
                    key: None,
                    after: limit,
                });
            }
        };

        let seen = match tokio::time::timeout(config.command_timeout, server_run(&conn)).await {
            Ok(Ok((seen, uptime))) => {
                if uptime < config.restart_quarantine && !config.strict_restart_quarantine {
                    tracing::info!(
                        ?uptime,
                        "Redis started recently: if it restarted without its data, locks \
                         granted before may still be in use; strict_restart_quarantine \
                         would hold new locks back"
                    );
                }
                seen
            }
            Ok(Err(err)) => return Err(LockError::from_redis(None, err)),
            Err(_) => {
                return Err(LockError::CommandTimeout {
                    key: None,
                    after: config.command_timeout,
                });
            }
        };
        let quarantine = Quarantine {
            seen: seen.into(),
            length: config.restart_quarantine,
            strict: config.strict_restart_quarantine,
        };
        let scripts = Scripts::new(conn, config.command_timeout, quarantine);
        tokio::spawn(watchdog::run(
            registry.clone(),
            scripts.clone(),
            shutdown.clone(),
        ));
        let id = Uuid::new_v4();
        tracing::debug!(client = %id, prefix = %config.prefix, "lock client connected");
        Ok(LockClient {
            inner: Arc::new(Inner {
                id,
                config,
                scripts,
                wakeups,
                registry,
                next_scope: AtomicU64::new(1),
                shutdown,
            }),
        })
    }

    /// Starts a request for the lock `name`; set its lease and wait, then
    /// [`acquire`](LockRequest::acquire) it.
    ///
    /// Any string names a lock. A name with a Redis Cluster hash tag
    /// (`{tenant:7}:order:42`) keeps it, so locks can share a slot with data.
    pub fn lock(&self, name: impl Into<String>) -> LockRequest {
        LockRequest::new(self.clone(), Kind::Exclusive, vec![name.into()])
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
            self.clone(),
            Kind::Exclusive,
            names.into_iter().map(Into::into).collect(),
        )
    }

    /// Starts a request for one of `permits` permits of the semaphore
    /// `name`: up to `permits` holders at once. Each permit is leased and
    /// renewed like a lock, so a crashed holder's permit comes back after
    /// its lease; a release wakes one waiter. Everyone using the semaphore
    /// must name the same number of permits.
    ///
    /// Within one critical section, taking the same semaphore again
    /// re-enters the permit already held instead of taking a second one.
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
        LockRequest::new(self.clone(), Kind::Permits(permits), vec![name.into()])
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
        LockRequest::new(self.clone(), Kind::Read, vec![name.into()])
    }

    /// The write side of the read-write lock `name`: the same as
    /// [`lock`](LockClient::lock), which also waits for readers.
    pub fn write_lock(&self, name: impl Into<String>) -> LockRequest {
        self.lock(name)
    }

    /// Starts a request for the fair lock `name`: exclusive like
    /// [`lock`](LockClient::lock), but waiters take it in the order they
    /// arrived, across every client. A release wakes exactly the next
    /// waiter in line. A waiter that gives up (times out, or its future is
    /// dropped) leaves the line at once; one that dies leaves it within a
    /// few seconds, without holding up the waiters behind it. Use one kind
    /// of lock per name: a plain `lock` on the same name does not queue.
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
        LockRequest::new(self.clone(), Kind::Fair, vec![name.into()])
    }

    /// This client's unique id, the first part of every owner id it uses.
    pub fn id(&self) -> Uuid {
        self.inner.id
    }

    /// How many locks this client holds and renews right now.
    pub fn held(&self) -> usize {
        self.inner.registry.len()
    }

    /// A fresh owner id for an acquisition outside any scope.
    pub(crate) fn new_owner(&self) -> Arc<str> {
        let scope = self.inner.next_scope.fetch_add(1, Ordering::Relaxed);
        format!("{}:{scope}", self.inner.id).into()
    }
}
