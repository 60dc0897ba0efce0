//! A client's place in a service's life: a readiness check, and a shutdown
//! that gives back what it holds.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use crate::api::client::LockClient;
use crate::base::error::{Chain, LockError, LossReason};
use crate::store::scripts::Giving;

/// Watchdog lag above which a client is not ready: renewals run that late,
/// and a lease much shorter than a few seconds could run out meanwhile.
pub const WATCHDOG_LAG_LIMIT: Duration = Duration::from_millis(500);

/// How a client stands, for a readiness probe: see [`LockClient::health`].
///
/// ```no_run
/// # async fn run(locks: lock_runtime::LockClient) {
/// let health = locks.health().await;
/// if !health.is_ready() {
///     eprintln!("locks not ready: {health:?}");
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Health {
    /// Why the command connections did not answer a `PING` within the
    /// command timeout (every server of the deployment; a quorum of
    /// Redlock masters), or `None` when they did.
    pub commands_error: Option<String>,
    /// Enough subscriber connections are up for release messages to
    /// arrive; without them waiters fall back to short sleeps.
    pub subscriber_connected: bool,
    /// How late the watchdog runs: its last pass after it was due, or how
    /// long a pass is overdue now (a starved or blocked runtime). Renewals
    /// are that late too.
    pub watchdog_lag: Duration,
    /// How much longer the restart quarantine keeps locks closed, as the
    /// last acquisition that met it was told: the server restarted
    /// recently, and no lock is granted until then.
    pub quarantine_left: Option<Duration>,
    /// Locks the client holds.
    pub held: usize,
    /// [`LockClient::shutdown`] was called.
    pub shut_down: bool,
}

impl Health {
    /// Ready to take and hold locks: Redis answers, release messages
    /// arrive, the watchdog keeps time (within [`WATCHDOG_LAG_LIMIT`]) and
    /// the client is not shut down. The restart quarantine does not make a
    /// client unready: it holds every client of the server back alike, and
    /// ends by itself.
    pub fn is_ready(&self) -> bool {
        self.commands_error.is_none()
            && self.subscriber_connected
            && self.watchdog_lag <= WATCHDOG_LAG_LIMIT
            && !self.shut_down
    }
}

impl LockClient {
    /// Checks whether the client can take and hold locks (see [`Health`]):
    /// pings the deployment, bounded by the command timeout, and reads the
    /// rest from the client's own state. For a service's readiness probe.
    ///
    /// ```no_run
    /// # async fn run(locks: lock_runtime::LockClient) {
    /// // In an axum router: .route("/ready", get(ready))
    /// let ready = locks.health().await.is_ready();
    /// # let _ = ready;
    /// # }
    /// ```
    pub async fn health(&self) -> Health {
        let inner = &self.inner;
        let commands_error = inner
            .backend
            .ping()
            .await
            .err()
            .map(|err| Chain(&err).to_string());
        let now = Instant::now();
        Health {
            commands_error,
            subscriber_connected: inner.wakeups.is_connected(),
            watchdog_lag: inner.registry.lag(now),
            quarantine_left: inner.quarantine_left(now),
            held: inner.registry.len(),
            shut_down: inner.closed.load(Ordering::Acquire),
        }
    }

    /// Shuts the client down, for a service that is stopping (on SIGTERM):
    ///
    /// 1. it takes no more locks: acquisitions fail with
    ///    [`LockError::ShutDown`], and those waiting end so; a release that
    ///    Redis did not answer before, waiting to be sent again in the
    ///    background, is sent at once (and waited for, as in 2);
    /// 2. every hold is told it is lost ([`LossReason::ShutDown`]), so that
    ///    bodies under `#[distributed_lock]` or
    ///    [`LockGuard::lost`](crate::LockGuard::lost) stop, and their guards,
    ///    dropped, give their locks back (every level, as any last release,
    ///    but for a side of a read-write lock whose other side the same
    ///    task still holds: see [`LockGuard::release`](crate::LockGuard::release);
    ///    `shutdown` waits for those releases too);
    /// 3. after up to the command timeout for that, it gives back whatever
    ///    is still held (a guard kept past the loss), every level at once,
    ///    so that other instances take the locks at once instead of after
    ///    their leases;
    /// 4. it stops the watchdog and the subscriber.
    ///
    /// Clones of the client share its state: all of them are shut down.
    /// Calling it again does nothing more.
    ///
    /// ```no_run
    /// # async fn run(
    /// #     locks: lock_runtime::LockClient,
    /// #     terminate: tokio::sync::oneshot::Receiver<()>,
    /// # ) -> Result<(), lock_runtime::LockError> {
    /// // SIGTERM arrived (`tokio::signal::unix::signal` in a service), and the
    /// // server stopped taking requests.
    /// terminate.await.ok();
    /// locks.shutdown().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// The first error of a give-back Redis could not be told of, a guard's
    /// dropped meanwhile, one sent again or one of its own (on Redlock,
    /// fewer than a majority of masters answered: [`LockError::NoQuorum`]);
    /// those locks expire after their leases.
    pub async fn shutdown(&self) -> Result<(), LockError> {
        let inner = &self.inner;
        if inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        inner.closing.cancel();
        let held = inner.registry.snapshot();
        for held in &held {
            held.declare_lost(LossReason::ShutDown);
        }
        // Bodies told of the loss stop at their next await, and their
        // guards give the locks back as they drop.
        let grace = Instant::now() + inner.config.command_timeout;
        while inner.registry.len() > 0 && Instant::now() < grace {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The guards dropped meanwhile give their locks back in tasks of
        // their own, and give-backs sent again wait in theirs (cut short
        // by the shutdown: sent at once): waited for (each within its
        // command timeout), and the first that Redis could not be told of
        // reported.
        let bound = inner.config.call_timeout(None) * 2;
        let failed = inner.closing_releases.finish(bound).await;
        let left = inner.registry.drain();
        let giving_back = left.iter().map(|held| {
            inner.backend.release(
                &held.name,
                std::slice::from_ref(&held.keys),
                &held.stored,
                &held.owner,
                Giving::ABANDONED,
            )
        });
        let given = futures_util::future::join_all(giving_back).await;
        inner.stop();
        tracing::debug!(client = %inner.id, given_back = left.len(), "lock client shut down");
        match failed.or_else(|| given.into_iter().find_map(Result::err)) {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }
}
