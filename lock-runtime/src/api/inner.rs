//! What the handles of one client share: its settings, its store, its
//! waiters and held locks, and whether it is open. A [`LockClient`] is an
//! `Arc` of it, and the requests and guards it makes each hold one, which
//! keeps the client alive while they exist (see the `Drop` below) without
//! referring to the client's handle type: `client` makes requests, a
//! request makes guards, and all three sit on this module.
//!
//! [`LockClient`]: crate::LockClient

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::base::config::Config;
use crate::base::error::LockError;
use crate::base::keys::LockKeys;
use crate::engine::backend::Backend;
use crate::engine::handoffs::Offers;
use crate::engine::wakeups::Wakeups;
use crate::engine::watchdog::Registry;
use crate::store::scripts::{Released, Stored};

/// The releases [`LockClient::shutdown`](crate::LockClient::shutdown)
/// waits for, run as tasks: those of guards dropped as their client shuts
/// down, and the give-backs sent again in the background (see
/// [`Inner::retire_later`]), with the first failure during the shutdown
/// kept for it to report.
#[derive(Default)]
pub(crate) struct ClosingReleases {
    tasks: TaskTracker,
    first_failure: Mutex<Option<LockError>>,
}

impl ClosingReleases {
    /// Runs `release` on `runtime`, as one of the releases waited for.
    pub(crate) fn spawn(
        &self,
        release: impl Future<Output = ()> + Send + 'static,
        runtime: &tokio::runtime::Handle,
    ) {
        self.tasks.spawn_on(release, runtime);
    }

    /// How many are under way.
    #[cfg(test)]
    pub(crate) fn under_way(&self) -> usize {
        self.tasks.len()
    }

    /// Keeps `err` if it is the first release failure.
    pub(crate) fn record(&self, err: LockError) {
        let mut first = self.first_failure.lock().unwrap_or_else(|e| e.into_inner());
        first.get_or_insert(err);
    }

    /// Waits for the releases under way, at most `bound` (no more are
    /// started: the client is closed), and returns the first failure.
    pub(crate) async fn finish(&self, bound: Duration) -> Option<LockError> {
        self.tasks.close();
        if tokio::time::timeout(bound, self.tasks.wait())
            .await
            .is_err()
        {
            tracing::debug!("releases and give-backs still under way");
        }
        let mut first = self.first_failure.lock().unwrap_or_else(|e| e.into_inner());
        first.take()
    }
}

/// The state one client's handles share.
pub(crate) struct Inner {
    pub(crate) id: Uuid,
    /// `NAME@HOST:PID/CLIENT`, the part every owner id of this client shares.
    pub(super) owner_prefix: String,
    pub(crate) config: Config,
    pub(crate) backend: Backend,
    pub(crate) wakeups: Wakeups,
    /// Waiters a release of this client may hand a lock to.
    pub(crate) offers: Offers,
    pub(crate) registry: Arc<Registry>,
    pub(super) next_scope: AtomicU64,
    pub(super) shutdown: CancellationToken,
    /// [`LockClient::shutdown`](crate::LockClient::shutdown) was called: no more locks are taken.
    pub(crate) closed: AtomicBool,
    /// Cancelled when the client shuts down: waits under way end.
    pub(crate) closing: CancellationToken,
    /// The releases [`LockClient::shutdown`](crate::LockClient::shutdown)
    /// waits for (of guards dropped as the client shuts down, and the
    /// give-backs sent again), and the first error of one that Redis could
    /// not be told of.
    pub(crate) closing_releases: Arc<ClosingReleases>,
    /// Until when the restart quarantine keeps locks closed, as the last
    /// acquisition that met it was told.
    pub(super) quarantine_until: Mutex<Option<Instant>>,
}

impl Inner {
    /// A fresh owner id for an acquisition outside any scope.
    pub(crate) fn new_owner(&self) -> Arc<str> {
        let scope = self.next_scope.fetch_add(1, Ordering::Relaxed);
        format!("{}:{scope}", self.owner_prefix).into()
    }

    /// Stops the watchdog and the subscriber.
    pub(crate) fn stop(&self) {
        self.shutdown.cancel();
    }

    /// Cancelled once the client stops: shut down, or dropped. Background
    /// work of the client (give-backs sent again) ends then.
    pub(crate) fn stopped(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Gives back in the background, and retires, what each of `owners`
    /// may hold of `locks`, side by side in the order of `sides`: each
    /// stored as it says (see [`Backend::retire`]), and kept taken until its
    /// time if it has one. Each give-back is sent again, first after
    /// `again_after`, until Redis answers or the client stops; the next
    /// side's goes once it is answered (or given up). A shutdown waits
    /// for them: it ends their pauses, and reports the first that fails
    /// then. Two sides are the
    /// two of a read-write lock: an upgrade or downgrade made from the
    /// first, whose answer was lost, may have taken the second, which it
    /// can only have done while the first was held (see `guard.rs`,
    /// `give_back_other_side`). Outside a runtime nothing is sent, and the
    /// locks lapse after their lease.
    ///
    /// [`Backend::retire`]: crate::engine::backend::Backend::retire
    pub(crate) fn retire_later(
        &self,
        label: String,
        locks: Vec<LockKeys>,
        sides: Vec<(Stored, Option<Instant>)>,
        owners: Vec<Arc<str>>,
        again_after: Duration,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (backend, stopped) = (self.backend.clone(), self.stopped());
        let (hurry, releases) = (self.closing.clone(), self.closing_releases.clone());
        let giving_back = async move {
            for (stored, keep_until) in &sides {
                let held = (stored, &owners[..]);
                let tokens = (&stopped, &hurry);
                let failed = retire(
                    &backend,
                    &label,
                    &locks,
                    held,
                    *keep_until,
                    again_after,
                    tokens,
                );
                // During a shutdown, which waits for it and reports it.
                if let Some(err) = failed.await
                    && hurry.is_cancelled()
                {
                    releases.record(err);
                }
            }
        };
        self.closing_releases.spawn(giving_back, &runtime);
    }

    /// The client is shut down: acquisitions fail.
    pub(crate) fn check_open(&self) -> Result<(), LockError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(LockError::ShutDown);
        }
        Ok(())
    }

    /// An acquisition found the restart quarantine closing the locks until
    /// `until`.
    pub(crate) fn met_quarantine(&self, until: Instant) {
        *self
            .quarantine_until
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(until);
    }

    /// How much longer the restart quarantine lasts, if the last
    /// acquisition that met it said it is not over at `now`.
    pub(crate) fn quarantine_left(&self, now: Instant) -> Option<Duration> {
        let until = *self
            .quarantine_until
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        until.filter(|until| *until > now).map(|until| until - now)
    }
}

/// Gives back, and retires, what each of `owners` may hold of `locks`,
/// stored as `stored`, each until Redis answers or the client stops, or
/// it fails once the client is shutting down (`tokens`: stopped, and
/// shutting down; see [`Backend::retire`]); the first such failure.
async fn retire(
    backend: &Backend,
    label: &str,
    locks: &[LockKeys],
    (stored, owners): (&Stored, &[Arc<str>]),
    keep_until: Option<Instant>,
    again_after: Duration,
    tokens: (&CancellationToken, &CancellationToken),
) -> Option<LockError> {
    let giving_back = owners.iter().map(|owner| {
        let held = (stored, &**owner);
        backend.retire(label, locks, held, keep_until, again_after, tokens)
    });
    let mut failed = None;
    for released in futures_util::future::join_all(giving_back).await {
        match released {
            Ok(released) if released.contains(&Released::Free) => {
                tracing::debug!(key = %label, "gave back a lock whose grant went unanswered");
            }
            Ok(_) => {}
            Err(err) => {
                failed.get_or_insert(err);
            }
        }
    }
    failed
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Guards keep the client alive, so nothing is held any more: stop
        // the watchdog and the subscriber.
        self.shutdown.cancel();
    }
}

/// Shown as the client it is the state of (a request shows its client so).
impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClient")
            .field("id", &self.id)
            .field("prefix", &self.config.prefix)
            .field("held", &self.registry.len())
            .finish_non_exhaustive()
    }
}
