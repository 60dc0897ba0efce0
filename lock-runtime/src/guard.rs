//! A held lock.

use std::fmt;
use std::sync::Arc;

use crate::client::LockClient;
use crate::error::{LockError, LossReason};
use crate::scope::{self, Scope};
use crate::scripts::Released;
use crate::watchdog::Held;

/// Proof of holding a lock. The watchdog renews the lock while the guard
/// lives; [`release`](LockGuard::release) gives it back and reports how that
/// went, dropping the guard gives it back in the background.
///
/// ```no_run
/// # async fn run(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
/// let guard = locks.lock("invoice:7").acquire().await?;
/// let token = guard.fence(); // hand it to the storage you write to
/// tokio::select! {
///     _ = guard.lost() => eprintln!("lost invoice:7; stop writing"),
///     _ = do_work(token) => {}
/// }
/// guard.release().await?;
/// # Ok(())
/// # }
/// # async fn do_work(_token: u64) {}
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct LockGuard {
    client: LockClient,
    held: Arc<Held>,
    /// Set once the lock has been given back (or handed to `release`).
    done: bool,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.held.name)
            .field("fence", &self.held.fence)
            .field("lost", &self.held.is_lost())
            .finish()
    }
}

impl LockGuard {
    pub(crate) fn new(client: LockClient, held: Arc<Held>) -> Self {
        LockGuard {
            client,
            held,
            done: false,
        }
    }

    /// The lock's name.
    pub fn key(&self) -> &str {
        &self.held.name
    }

    /// The fencing token: strictly greater than the token of every earlier
    /// holder of this lock. Re-entering a held lock keeps the token.
    ///
    /// Hand it to the storage the critical section writes to and have the
    /// storage reject writes that carry a smaller token than the largest it
    /// has seen: a holder that stalled past its lease then cannot overwrite
    /// the work of the next holder.
    pub fn fence(&self) -> u64 {
        self.held.fence
    }

    /// Resolves once the lock is lost: a renewal found it deleted or held by
    /// another owner, or no renewal was confirmed before the lease could run
    /// out (Redis unreachable, paused, or restarted). Never resolves while
    /// the lock is held.
    pub async fn lost(&self) {
        self.held.lost().await
    }

    /// Until when the lock is surely held, as far as this process knows: the
    /// send time of the last confirmed renewal plus the lease, minus the
    /// drift margin. Work that must finish under the lock should finish by then.
    pub fn valid_until(&self) -> std::time::Instant {
        self.held.valid_until().into_std()
    }

    /// Whether the lock has been lost; see [`lost`](LockGuard::lost).
    pub fn is_lost(&self) -> bool {
        self.held.is_lost()
    }

    /// Runs `fut` as this lock's critical section.
    ///
    /// Inside it, [`current`](crate::current) names this lock, and taking
    /// any lock of the same client again re-enters it instead of waiting.
    /// If the lock is lost first, `fut` is dropped at its next await point
    /// and the result is [`LockError::Lost`].
    ///
    /// ```no_run
    /// # async fn run(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// let outer = locks.lock("account:9").acquire().await?;
    /// let depth = outer
    ///     .scope(async {
    ///         // Same task, same lock: re-enters at once.
    ///         let inner = locks.lock("account:9").acquire().await?;
    ///         inner.release().await?;
    ///         Ok::<_, lock_runtime::LockError>(2)
    ///     })
    ///     .await??;
    /// assert_eq!(depth, 2);
    /// outer.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn scope<F: Future>(&self, fut: F) -> Result<F::Output, LockError> {
        let scope = Scope {
            client: self.client.inner.id,
            owner: self.held.owner.clone(),
            name: self.held.name.clone(),
            fence: self.held.fence,
            parent: scope::innermost(),
        };
        let lost = self.held.lost_token().clone();
        scope::enter(scope, async move {
            tokio::select! {
                biased;
                _ = lost.cancelled() => Err(self.lost_error()),
                out = fut => Ok(out),
            }
        })
        .await
    }

    /// The error for this lock having been lost.
    pub fn lost_error(&self) -> LockError {
        LockError::Lost {
            key: self.held.name.clone(),
            reason: self.held.loss().unwrap_or(LossReason::NotHeld),
        }
    }

    /// Gives the lock back (one level, if re-entered) and stops renewing it.
    ///
    /// # Errors
    ///
    /// [`LockError::Lost`] when the lock was lost before the release, or
    /// found already expired or taken over; connection errors when Redis
    /// could not be told, in which case the lock expires after its lease.
    pub async fn release(mut self) -> Result<(), LockError> {
        self.done = true;
        let last = self.client.inner.registry.unhold(&self.held);
        let was_lost = self.held.loss();
        let released = self
            .client
            .inner
            .scripts
            .release(&self.held.name, &self.held.keys, &self.held.owner, false)
            .await?;
        tracing::debug!(key = %self.held.name, fence = self.held.fence, ?released, last, "released");
        match (released, was_lost) {
            (_, Some(reason)) => Err(LockError::Lost {
                key: self.held.name.clone(),
                reason,
            }),
            (Released::NotHeld, None) => Err(LockError::Lost {
                key: self.held.name.clone(),
                reason: LossReason::NotHeldAtRelease,
            }),
            (Released::Free | Released::StillHeld(_), None) => Ok(()),
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.client.inner.registry.unhold(&self.held);
        // Never block in drop: release on the runtime if there is one,
        // otherwise the lease runs out by itself.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::debug!(key = %self.held.name, "guard dropped outside a runtime; lock expires after its lease");
            return;
        };
        let scripts = self.client.inner.scripts.clone();
        let held = self.held.clone();
        runtime.spawn(async move {
            match scripts.release(&held.name, &held.keys, &held.owner, false).await {
                Ok(released) => {
                    tracing::debug!(key = %held.name, fence = held.fence, ?released, "released on drop")
                }
                Err(err) => {
                    tracing::warn!(key = %held.name, error = %err, "release on drop failed; lock expires after its lease")
                }
            }
        });
    }
}
