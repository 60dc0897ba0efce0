//! Leader election on top of the exclusive lock.
//!
//! An election is the exclusive lock named by the election's name: the
//! candidate that holds it leads, the watchdog renews it while the leader
//! lives, and its fencing token is the leader's. Everything a lock gives
//! carries over: waiting candidates sleep until a release is published (or
//! the leader's lease would run out), a leader is told when it loses the
//! lock, and a crashed leader's lock is free again within one lease.
//!
//! Candidates wait as plain lock waiters, not as fair ones: a fair waiter
//! tries again every second to keep its place in line, while a plain one
//! sleeps until a release or the holder's lease, which is what a candidate
//! that may wait for days needs.

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use crate::api::client::LockClient;
use crate::api::guard::LockGuard;
use crate::api::request::LockRequest;
use crate::base::error::{Chain, LockError};
use crate::base::kind::HoldMode;
use crate::base::owner::OwnerId;

/// How long one acquisition of a campaign waits at most before the
/// campaign starts another: it only bounds each acquisition's deadline (a
/// `Duration::MAX` wait would overflow an `Instant`). A candidate waiting
/// all that time shows as one timed-out acquisition a day in the metrics.
const ROUND: Duration = Duration::from_secs(24 * 60 * 60);

/// First pause of a campaign after an acquisition ended on an error that
/// may pass (Redis unreachable); it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// Longest pause of a campaign between acquisitions that ended on errors.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// An election about to be campaigned in: made by
/// [`LockClient::election`]; set the lease (and, if the campaign should
/// not wait forever, a wait), then [`campaign`](Election::campaign).
///
/// ```no_run
/// # async fn run(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
/// use std::time::Duration;
///
/// let leader = locks
///     .election("scheduler")
///     .lease(Duration::from_secs(10)) // a crashed leader is replaced within 10 s
///     .campaign() // waits until this process leads
///     .await?;
/// println!("leading with fencing token {}", leader.fence());
/// leader.resign().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use = "an election does nothing until `campaign` is awaited"]
pub struct Election {
    client: LockClient,
    name: String,
    lease: Option<Duration>,
    wait: Option<Duration>,
    replicas: Option<u32>,
}

impl LockClient {
    /// Starts an election for `name`: [`campaign`](Election::campaign) waits
    /// until this process leads, and gives a [`Leadership`].
    ///
    /// The election is the exclusive lock `name` (as [`lock`](LockClient::lock)
    /// takes it): the leader is its holder, the leader's fencing token is the
    /// lock's, `lockctl inspect NAME` shows the leader, and
    /// [`force_release`](LockClient::force_release) deposes it. Give an
    /// election a name of its own: a lock of the same name taken elsewhere
    /// is the same lock, and its holder counts as the leader.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::LockClient;
    ///
    /// let locks = LockClient::in_memory().await?;
    /// let leader = locks.election("scheduler").campaign().await?;
    /// assert!(!leader.is_lost());
    /// // Nobody else can lead meanwhile.
    /// assert!(locks.election("scheduler").try_lead().await?.is_none());
    /// leader.resign().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn election(&self, name: impl Into<String>) -> Election {
        Election {
            client: self.clone(),
            name: name.into(),
            lease: None,
            wait: None,
            replicas: None,
        }
    }

    /// Who leads the election `name` right now, with the leader's fencing
    /// token; `None` when nobody leads. Anyone may ask, candidate or not.
    ///
    /// It reads the election's lock as [`inspect`](LockClient::inspect)
    /// does (on Redlock masters, the leader a majority of masters has, and
    /// a token that may be larger than the leader's own). To follow the
    /// changes of leader, [`watch`](LockClient::watch) the same name.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// # let locks = lock_runtime::LockClient::in_memory().await?;
    /// let leader = locks.election("scheduler").campaign().await?;
    /// let info = locks.leader_of("scheduler").await?.expect("someone leads");
    /// assert_eq!(info.fence, leader.fence());
    /// assert!(info.is_held_by(&locks)); // this client leads
    /// println!("led by {} with token {}", info.label(), info.fence);
    ///
    /// leader.resign().await?;
    /// assert!(locks.leader_of("scheduler").await?.is_none());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] when the name is held as a semaphore or a read
    /// lock, which no election takes; [`LockError::WrongType`] when its key
    /// holds something that is not a lock; connection errors otherwise.
    pub async fn leader_of(&self, name: &str) -> Result<Option<LeaderInfo>, LockError> {
        let Some(info) = self.inspect(name).await? else {
            return Ok(None);
        };
        if let Some(other) = info.holders.iter().find(|h| h.mode != HoldMode::Exclusive) {
            return Err(LockError::Config(format!(
                "`{name}` is held as a {} lock ({} holds a {}), not by the leader of an election",
                info.kind,
                other.label(),
                other.mode
            )));
        }
        Ok(info.holders.into_iter().next().map(|holder| LeaderInfo {
            name: info.name,
            owner: holder.owner,
            owner_id: holder.owner_id,
            fence: holder.fence,
            ttl: holder.ttl,
        }))
    }
}

impl Election {
    /// How long the election's lock outlives a leader that stops renewing
    /// it (crashes, is cut off): how long the election may stay without a
    /// leader. Defaults to the client's lease; at least
    /// [`MIN_LEASE`](crate::MIN_LEASE). A short lease replaces a dead
    /// leader sooner, but a leader then loses its lead after a shorter
    /// outage of Redis (see [`LockRequest::lease`]).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Gives up the campaign after `wait` without leading:
    /// [`campaign`](Election::campaign) then returns [`LockError::Timeout`]
    /// (or the last connection error, if Redis could not be reached at the
    /// end). Without it, a campaign waits until this process leads, however
    /// long that takes. `Duration::ZERO` tries once.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Replicas that must confirm the election's lock, as
    /// [`LockRequest::min_replicas`].
    pub fn min_replicas(mut self, replicas: u32) -> Self {
        self.replicas = Some(replicas);
        self
    }

    /// The name of the election (and of its lock).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The request for the election's lock, waiting up to `wait`.
    fn request(&self, wait: Duration) -> LockRequest {
        let mut request = self.client.lock(self.name.as_str()).wait(wait);
        if let Some(lease) = self.lease {
            request = request.lease(lease);
        }
        if let Some(replicas) = self.replicas {
            request = request.min_replicas(replicas);
        }
        request
    }

    /// Campaigns until this process leads, and returns its [`Leadership`].
    ///
    /// While another candidate leads, the campaign sleeps until a
    /// release is published (a resignation, a leader's guard dropped) or
    /// the leader's lease would run out (a crashed leader), as a lock
    /// waiter does: it does not poll. A release reaches the waiting
    /// candidates at once, and one of them takes over.
    ///
    /// Without a [`wait`](Election::wait), the campaign goes on through
    /// Redis outages: while Redis cannot be reached, it keeps trying as a
    /// lock waiter does (about every 100 ms while release messages cannot
    /// reach it), and leads once Redis is back and nobody else does (after the client's restart quarantine, if Redis came
    /// back without its data). Only errors that waiting cannot cure end it.
    /// To stop a campaign, drop its future (in `tokio::select!` against
    /// shutdown, for instance).
    ///
    /// ```no_run
    /// use tokio_util::sync::CancellationToken;
    ///
    /// # async fn run(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// # let shutdown = CancellationToken::new();
    /// tokio::select! {
    ///     leader = locks.election("scheduler").campaign() => {
    ///         let leader = leader?;
    ///         // Lead until shut down (or deposed: then `scope` is Err(Lost)).
    ///         let _ = leader.scope(shutdown.cancelled()).await;
    ///         let _ = leader.resign().await; // hands over at once
    ///     }
    ///     _ = shutdown.cancelled() => {} // stopped campaigning
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LockError::Timeout`] when a [`wait`](Election::wait) was given and
    /// another candidate led for all of it (or the last connection error,
    /// when Redis could not be reached at the end of it);
    /// [`LockError::Config`] for an empty name or a lease below
    /// [`MIN_LEASE`](crate::MIN_LEASE); [`LockError::WrongType`],
    /// [`LockError::Auth`], [`LockError::ReadOnly`] and
    /// [`LockError::Redis`], which waiting does not cure, at once.
    pub async fn campaign(self) -> Result<Leadership, LockError> {
        let started = Instant::now();
        // `None`: no wait given, or one too long to have an end.
        let deadline = self.wait.and_then(|wait| started.checked_add(wait));
        tracing::debug!(election = %self.name, wait = ?self.wait, "campaigning");
        let mut backoff = FIRST_BACKOFF;
        loop {
            let round = deadline.map_or(ROUND, |deadline| {
                deadline
                    .saturating_duration_since(Instant::now())
                    .min(ROUND)
            });
            let outcome = self.request(round).acquire().await;
            let over = deadline.is_some_and(|deadline| Instant::now() >= deadline);
            match outcome {
                Ok(guard) => {
                    tracing::debug!(election = %self.name, fence = guard.fence(), "leading");
                    return Ok(Leadership { guard });
                }
                Err(err) if err.is_timeout() => {
                    if over {
                        return Err(LockError::Timeout {
                            key: self.name,
                            waited: started.elapsed(),
                        });
                    }
                    backoff = FIRST_BACKOFF;
                }
                Err(err) if err.is_unavailable() => {
                    if over {
                        return Err(err);
                    }
                    tracing::warn!(
                        election = %self.name, error = %Chain(&err),
                        "campaign could not reach Redis; still campaigning"
                    );
                    let pause = deadline.map_or(backoff, |deadline| {
                        deadline
                            .saturating_duration_since(Instant::now())
                            .min(backoff)
                    });
                    tokio::time::sleep(pause).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// Leads if nobody does right now, without waiting: `None` when
    /// another candidate leads. The election's wait is not used.
    ///
    /// ```no_run
    /// # async fn run(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// if let Some(leader) = locks.election("compactor").try_lead().await? {
    ///     // ... one round of leader work ...
    ///     leader.resign().await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`campaign`](Election::campaign) with a zero wait, except that a
    /// leader in place is `Ok(None)`; connection errors are returned, not
    /// retried.
    pub async fn try_lead(self) -> Result<Option<Leadership>, LockError> {
        let guard = self.request(Duration::ZERO).try_acquire().await?;
        Ok(guard.map(|guard| Leadership { guard }))
    }
}

/// This process leads an election, from [`Election::campaign`], until it
/// resigns or loses the lead.
///
/// It is the guard of the election's lock: the watchdog renews it while it
/// lives, [`lost`](Leadership::lost) resolves when the lead is lost (a
/// renewal found the lock gone or taken over, or Redis stayed silent until
/// the lease could run out), [`resign`](Leadership::resign) hands the lead
/// over and reports how that went, and dropping it resigns in the
/// background (without a runtime, the lease runs out). A leadership that
/// was lost stays lost: campaign again to lead again.
///
/// ```no_run
/// # async fn run(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
/// let leader = locks.election("scheduler").campaign().await?;
/// let token = leader.fence(); // hand it to the storage the leader writes to
/// tokio::select! {
///     _ = leader.lost() => eprintln!("no longer leading: {}", leader.lost_error()),
///     _ = schedule(token) => {}
/// }
/// # Ok(())
/// # }
/// # async fn schedule(_token: u64) {}
/// ```
#[derive(Debug)]
#[must_use = "the lead is resigned as soon as the leadership is dropped"]
pub struct Leadership {
    guard: LockGuard,
}

impl Leadership {
    /// The election's name.
    pub fn name(&self) -> &str {
        self.guard.name()
    }

    /// The leader's fencing token: strictly greater than the token of every
    /// earlier leader of this election (and every earlier holder of its
    /// lock). Hand it to the storage the leader writes to, and have the
    /// storage refuse writes with a token smaller than the largest it has
    /// seen: a leader that stalled past its lease then cannot overwrite the
    /// work of the next one.
    pub fn fence(&self) -> u64 {
        self.guard.fence()
    }

    /// Resolves once the lead is lost (see [`LockGuard::lost`]); never while
    /// this process leads.
    pub async fn lost(&self) {
        self.guard.lost().await
    }

    /// Whether the lead has been lost; see [`lost`](Leadership::lost).
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// `Ok` while this process leads, as far as it knows; the
    /// [`LockError::Lost`] of [`lost_error`](Leadership::lost_error) once
    /// the lead is lost. For a last check before a write (which the fencing
    /// token still guards, since the lead can be lost right after).
    ///
    /// ```no_run
    /// # async fn run(leader: lock_runtime::Leadership) -> Result<(), lock_runtime::LockError> {
    /// leader.check()?;
    /// write_schedule(leader.fence()).await;
    /// # Ok(())
    /// # }
    /// # async fn write_schedule(_token: u64) {}
    /// ```
    pub fn check(&self) -> Result<(), LockError> {
        if self.is_lost() {
            Err(self.lost_error())
        } else {
            Ok(())
        }
    }

    /// The [`LockError::Lost`] for this lead having been lost, with the
    /// election's name as its key.
    pub fn lost_error(&self) -> LockError {
        self.guard.lost_error()
    }

    /// Until when this process surely leads, as far as it knows (see
    /// [`LockGuard::valid_until`]).
    pub fn valid_until(&self) -> std::time::Instant {
        self.guard.valid_until()
    }

    /// Runs `fut` while this process leads: if the lead is lost first, `fut`
    /// is dropped at its next await point and the result is
    /// [`LockError::Lost`]. It is the critical section of the election's
    /// lock ([`LockGuard::scope`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// # let locks = lock_runtime::LockClient::in_memory().await?;
    /// let leader = locks.election("scheduler").campaign().await?;
    /// // Err(LockError::Lost) if the lead is lost before the work is done.
    /// let written = leader.scope(write_schedule(leader.fence())).await?;
    /// assert_eq!(written, leader.fence());
    /// leader.resign().await?;
    /// # Ok(())
    /// # }
    /// # async fn write_schedule(token: u64) -> u64 { token }
    /// ```
    pub async fn scope<F: Future>(&self, fut: F) -> Result<F::Output, LockError> {
        self.guard.scope(fut).await
    }

    /// The guard of the election's lock, for what a leadership does not
    /// repeat ([`span`](LockGuard::span), [`extend`](LockGuard::extend)).
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// Steps down: releases the election's lock, which wakes the waiting
    /// candidates at once, and stops renewing it.
    ///
    /// # Errors
    ///
    /// [`LockError::Lost`] when the lead had been lost before (the lock
    /// expired or was taken over); connection errors when Redis could not be
    /// told, in which case the lead passes on when the lease runs out.
    pub async fn resign(self) -> Result<(), LockError> {
        let name = self.name().to_owned();
        let outcome = self.guard.release().await;
        tracing::debug!(election = %name, ok = outcome.is_ok(), "resigned");
        outcome
    }
}

/// The current leader of an election: what [`LockClient::leader_of`]
/// returns.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderInfo {
    /// The election's name.
    pub name: String,
    /// The leader's owner id, as stored in Redis.
    pub owner: String,
    /// The owner id parsed: which program, host, process and client leads
    /// (`None` for an id in another form, such as one written by an older
    /// version).
    pub owner_id: Option<OwnerId>,
    /// The leader's fencing token.
    pub fence: u64,
    /// What is left of the leader's lease (renewed while it lives).
    pub ttl: Option<Duration>,
}

impl LeaderInfo {
    /// `NAME@HOST:PID` of the leader, or the raw owner id when it does not
    /// parse: what an operator needs to find the process.
    pub fn label(&self) -> String {
        match &self.owner_id {
            Some(id) => format!("{}@{}:{}", id.name, id.host, id.pid),
            None => self.owner.clone(),
        }
    }

    /// Whether `client` (some candidate of it) is the leader.
    pub fn is_held_by(&self, client: &LockClient) -> bool {
        self.owner_id
            .as_ref()
            .is_some_and(|id| id.client == client.id())
    }
}

impl fmt::Display for LeaderInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} led by {} (token {})",
            self.name,
            self.label(),
            self.fence
        )
    }
}
