//! Taking a lock: the request builder and the waiting loop.

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::client::LockClient;
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::keys::LockKeys;
use crate::scope;
use crate::scripts::{Acquired, Released};
use crate::watchdog::Acquisition;

/// How long a waiter sleeps between attempts while release messages cannot
/// reach it (the pub/sub connection is down). Normal waiting does not poll.
const FALLBACK_RETRY: Duration = Duration::from_millis(100);

/// A lock about to be taken: set the lease and the wait, then
/// [`acquire`](LockRequest::acquire). Made by [`LockClient::lock`].
#[derive(Debug, Clone)]
#[must_use = "a lock request does nothing until `acquire` is awaited"]
pub struct LockRequest {
    client: LockClient,
    name: String,
    lease: Duration,
    wait: Duration,
}

impl LockRequest {
    pub(crate) fn new(client: LockClient, name: String) -> Self {
        let config = &client.inner.config;
        LockRequest {
            lease: config.default_lease,
            wait: config.default_wait,
            client,
            name,
        }
    }

    /// How long the lock outlives this holder if it stops renewing it
    /// (crashes, is cut off). At least [`MIN_LEASE`](crate::MIN_LEASE).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long to wait while someone else holds the lock;
    /// `Duration::ZERO` tries exactly once.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Takes the lock, waiting up to the request's wait.
    ///
    /// Inside the critical section of a lock this task already holds
    /// through the same client (see [`LockGuard::scope`]), taking it again
    /// re-enters it: the returned guard counts one level, and the lock is
    /// free only when every level has been released.
    ///
    /// While the lock is held by someone else, the caller sleeps until a
    /// release is published, the holder's lease runs out, or its own wait
    /// ends, whichever comes first; it does not poll.
    ///
    /// # Errors
    ///
    /// [`LockError::Timeout`] when the lock stayed held for the whole wait;
    /// [`LockError::Config`] for an empty name or a lease below
    /// [`MIN_LEASE`](crate::MIN_LEASE); the connection errors of
    /// [`LockError`] otherwise.
    pub async fn acquire(self) -> Result<LockGuard, LockError> {
        let span = tracing::debug_span!("lock.acquire", key = %self.name);
        self.acquire_inner().instrument(span).await
    }

    async fn acquire_inner(self) -> Result<LockGuard, LockError> {
        let inner = &self.client.inner;
        if self.name.is_empty() {
            return Err(LockError::Config("lock name is empty".into()));
        }
        inner.config.check_lease(&self.name, self.lease)?;
        let keys = LockKeys::new(&inner.config.prefix, &self.name);
        let owner = scope::owner_for(inner.id).unwrap_or_else(|| self.client.new_owner());
        let started = Instant::now();
        let deadline = started + self.wait;

        if let Some(guard) = self.attempt(&keys, &owner).await? {
            return Ok(guard);
        }
        if self.wait.is_zero() {
            return Err(self.timeout(started));
        }

        tracing::debug!(wait = ?self.wait, "lock busy; waiting");
        let watch = inner.wakeups.watch(&keys.channel);
        tokio::select! {
            _ = watch.subscribed() => {}
            _ = tokio::time::sleep_until(deadline) => {}
        }
        loop {
            // Register for the wake-up before trying, so that a release
            // between this attempt and the sleep below still wakes us.
            let mut released = pin!(watch.notify().notified());
            released.as_mut().enable();
            let ttl = match self.attempt_or_busy(&keys, &owner).await? {
                Ok(guard) => {
                    tracing::debug!(waited = ?started.elapsed(), "acquired after waiting");
                    return Ok(guard);
                }
                Err(ttl) => ttl,
            };
            let now = Instant::now();
            if now >= deadline {
                return Err(self.timeout(started));
            }
            // Sleep until the holder's lease would run out at the latest.
            let mut wake = ttl.map_or(deadline, |ttl| now + ttl + Duration::from_millis(1));
            if !watch.is_live() {
                wake = wake.min(now + FALLBACK_RETRY);
            }
            tokio::select! {
                _ = released => {}
                _ = tokio::time::sleep_until(wake.min(deadline)) => {}
            }
        }
    }

    /// One attempt; `None` when someone else holds the lock.
    async fn attempt(&self, keys: &LockKeys, owner: &Arc<str>) -> Result<Option<LockGuard>, LockError> {
        Ok(self.attempt_or_busy(keys, owner).await?.ok())
    }

    /// One attempt: the guard, or the holder's remaining lease.
    async fn attempt_or_busy(
        &self,
        keys: &LockKeys,
        owner: &Arc<str>,
    ) -> Result<Result<LockGuard, Option<Duration>>, LockError> {
        let inner = &self.client.inner;
        let sent = Instant::now();
        let outcome = inner
            .scripts
            .acquire(&self.name, keys, owner, self.lease)
            .await;
        match outcome {
            Ok(Acquired::Held { fence, count }) => {
                let held = inner.registry.hold(Acquisition {
                    name: &self.name,
                    keys,
                    owner,
                    fence,
                    lease: self.lease,
                    drift: inner.config.drift_for(self.lease),
                    sent,
                });
                tracing::debug!(fence, depth = count, "acquired");
                Ok(Ok(LockGuard::new(self.client.clone(), held)))
            }
            Ok(Acquired::Busy { ttl }) => Ok(Err(ttl)),
            Err(err) => {
                if err.is_unavailable() && scope::owner_for(inner.id).is_none() {
                    self.abandon(keys, owner);
                }
                Err(err)
            }
        }
    }

    /// The acquire may have taken effect even though its answer was lost;
    /// an owner id used by nobody else can safely drop whatever it holds.
    fn abandon(&self, keys: &LockKeys, owner: &Arc<str>) {
        let scripts = self.client.inner.scripts.clone();
        let (name, keys, owner) = (self.name.clone(), keys.clone(), owner.clone());
        tokio::spawn(async move {
            if let Ok(Released::Free) = scripts.release(&name, &keys, &owner, true).await {
                tracing::debug!(key = %name, "dropped a lock whose acquire answer was lost");
            }
        });
    }

    fn timeout(&self, started: Instant) -> LockError {
        tracing::debug!(waited = ?started.elapsed(), "timed out");
        LockError::Timeout {
            key: self.name.clone(),
            waited: started.elapsed(),
        }
    }
}
