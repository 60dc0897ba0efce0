//! Taking a lock: the request builder, the acquisition's setup and first
//! attempt, and its wait (`wait.rs`).

mod checks;
mod policy;
mod traces;
mod wait;

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::api::guard::{LockGuard, renewals};
use crate::api::inner::Inner;
use crate::api::scope;
use crate::base::config::Replicas;
use crate::base::error::{LockError, LossReason};
use crate::base::keys::{self, LockKeys};
use crate::base::kind::Kind;
use crate::base::telemetry::{self, Acquiring, Hold, Tracked};
use crate::engine::backend::{Attempt, Times};
use crate::engine::wakeups::Watch;
use crate::engine::watchdog::{Acquisition, DECLARE_EARLY};
use crate::store::scripts::calls::Asking;
use crate::store::scripts::{Acquired, Giving, Stored, Taken};

use traces::{Trace, Unsettled, Waiting};
use wait::{Step, Wait};

/// A lock about to be taken: set the lease and the wait, then
/// [`acquire`](LockRequest::acquire). Made by [`LockClient::lock`], or by
/// [`LockClient::lock_all`] for several locks taken together.
///
/// [`LockClient::lock`]: crate::LockClient::lock
/// [`LockClient::lock_all`]: crate::LockClient::lock_all
#[derive(Debug, Clone)]
#[must_use = "a lock request does nothing until `acquire` is awaited"]
pub struct LockRequest {
    client: Arc<Inner>,
    kind: Kind,
    /// The locks' names, sorted and without duplicates.
    names: Vec<String>,
    /// How errors and logs name a request for several locks: the names
    /// joined by `+` (see [`label`](Self::label)).
    joined: Option<String>,
    lease: Duration,
    wait: Duration,
    /// Replicas that must confirm the lock (`None`: the client's setting).
    replicas: Option<u32>,
    /// The lease is a hard bound: the watchdog does not renew the lock.
    fixed_lease: bool,
    /// How long after its acquisition the lock stays taken at least, even
    /// when released sooner.
    at_least: Option<Duration>,
    /// How long the lock is renewed at most.
    max_hold: Option<Duration>,
    /// A builder method that does not apply to this kind of lock, refused
    /// at `acquire`.
    misuse: Option<String>,
    /// Made as the write side of a read-write lock: its metrics say
    /// `write` (see `telemetry::kind_label`).
    write: bool,
}

/// An acquisition under way: what its setup and first attempt leave for
/// its wait (see [`LockRequest::begin`]). Fields are dropped in the order
/// they are declared here, the reverse of the order they are made: an
/// early registration first, then the turn marks, and what an unsettled
/// grant may hold last (as the wait's own bindings are).
struct Underway<'a> {
    keys: &'a [LockKeys],
    /// A re-entry of locks an enclosing critical section holds.
    reentry: bool,
    /// How a re-entry asks for each lock (empty: afresh).
    asking: String,
    owner: Arc<str>,
    /// A waiter's registration for its turn, made before its first attempt
    /// (see `registers_early`).
    early: Option<Watch>,
    /// Turn marks, taken back if it stops waiting without the locks.
    marked: Option<Waiting<'a>>,
    /// Given back if the acquisition ends without the locks.
    unsettled: Unsettled<'a>,
    started: Instant,
    deadline: Instant,
    /// Queued behind this process's waiters: no first attempt.
    behind: bool,
    /// A fair waiter that gets in line with a release of its client (see
    /// `joins_with_release`): no first attempt either.
    joining: bool,
    /// How long the first attempt found the lock taken for, if it said.
    first_busy: Option<Duration>,
    /// Until when the restart quarantine keeps the locks closed, when the
    /// last attempt found only it in the way.
    closed: Option<Instant>,
}

/// How one attempt to take a request's locks ended, short of an error.
enum Outcome {
    Taken(LockGuard),
    /// Another owner holds at least one of the locks, for this much longer
    /// at most (`None`: one has no expiry); or, `quarantined`, only the
    /// restart quarantine keeps them, for `ttl` more.
    Busy {
        ttl: Option<Duration>,
        quarantined: bool,
    },
    /// A grant came too late to be held, and giving it back failed without
    /// saying whether it ran: the owner id may still hold the locks, and a
    /// give-back arriving late would free them under a new grant to the
    /// same owner id, so it must not be used again (see `grant`).
    Abandon(LockError),
}

/// How long a fair waiter keeps its place in line without trying again, at
/// most; a waiter that died leaves the line after its stay (see
/// [`fair_stay`]).
const FAIR_STAY: Duration = Duration::from_secs(3);

/// The shortest stay in line, whatever the lease: a waiter tries again a
/// third of its stay apart, so a shorter one would cost Redis a call per
/// waiter more often than a lock's round trips are worth.
const FAIR_STAY_MIN: Duration = Duration::from_millis(250);

/// How long a fair waiter with this lease keeps its place in line without
/// trying again: half the lease, from [`FAIR_STAY_MIN`] to [`FAIR_STAY`].
/// A waiter that died (its process killed) holds up those behind it until
/// its place lapses, as a holder that died holds the lock until its lease
/// runs out; tied to the lease, a dead waiter at the head of the line keeps
/// a free lock from the others for half a lease at most, where a fixed
/// stay would keep a lock of a short lease for several of its leases.
fn fair_stay(lease: Duration) -> Duration {
    (lease / 2).clamp(FAIR_STAY_MIN, FAIR_STAY)
}

/// How often a fair waiter with this lease tries again while nobody names
/// it: to keep its place in line (three tries per stay, so one slow or lost
/// call does not cost it its place), and to take the lock if the waiter
/// before it died.
fn fair_retry(lease: Duration) -> Duration {
    fair_stay(lease) / 3
}

/// How long a fair waiter that came while others of its client wait waits
/// for a release of its client to take its offer and put it in line (see
/// `joins_with_release`) before it gets in line by itself (the wait rounds
/// it up by a millisecond: about 2 ms). A release that took the offer puts
/// it in line when its call runs in Redis, as an attempt of its own would.
const JOIN_WITHIN: Duration = Duration::from_millis(1);

impl LockRequest {
    /// Marks the request as the write side of a read-write lock, for its
    /// metrics' `kind` label.
    pub(crate) fn writing(self) -> Self {
        LockRequest {
            write: true,
            ..self
        }
    }

    pub(crate) fn new(client: Arc<Inner>, kind: Kind, mut names: Vec<String>) -> Self {
        // One canonical order, so that calls naming the same locks in any
        // order take them the same way, and each name once.
        names.sort_unstable();
        names.dedup();
        let config = &client.config;
        LockRequest {
            joined: (names.len() > 1).then(|| keys::joined(names.iter().map(String::as_str))),
            lease: config.default_lease,
            wait: config.default_wait,
            client,
            kind,
            names,
            replicas: None,
            fixed_lease: false,
            at_least: None,
            max_hold: None,
            misuse: None,
            write: false,
        }
    }

    /// How long the lock outlives this holder if it stops renewing it
    /// (crashes, is cut off). At least [`MIN_LEASE`](crate::MIN_LEASE).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long to wait while someone else holds the lock;
    /// `Duration::ZERO` tries exactly once, `Duration::MAX` waits as long
    /// as it takes.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Replicas that must confirm this lock, its acquisition and every
    /// renewal, before they count; overrides the client's
    /// [`min_replicas`](crate::LockClientBuilder::min_replicas) (0 turns it
    /// off for this lock).
    pub fn min_replicas(mut self, replicas: u32) -> Self {
        self.replicas = Some(replicas);
        self
    }

    /// Holds the lock for `at_most` at most: the lease is `at_most`, and the
    /// watchdog does not renew it (unless extended with
    /// [`LockGuard::extend`]). When it runs out while the guard lives,
    /// [`lost`](LockGuard::lost) fires (a
    /// [`LossReason::LeaseEnded`](crate::LossReason::LeaseEnded) loss), and a
    /// `#[distributed_lock]` body is stopped. For jobs that must never hold
    /// a lock longer than a bound (`lock_at_most` of the attribute,
    /// ShedLock's `lockAtMostFor`); to keep a short renewed lease with a
    /// bound on the whole hold, see [`max_hold`](Self::max_hold).
    ///
    /// A re-entry must ask for the same kind of lease as the held lock
    /// (bounded or renewed), or it is refused with [`LockError::Config`].
    ///
    /// ```no_run
    /// # async fn run(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// use std::time::Duration;
    ///
    /// let guard = locks
    ///     .lock("report:nightly")
    ///     .lock_at_most(Duration::from_secs(600))
    ///     .acquire()
    ///     .await?;
    /// // Held for ten minutes at most, renewed by nobody.
    /// # drop(guard);
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock_at_most(mut self, at_most: Duration) -> Self {
        self.lease = at_most;
        self.fixed_lease = true;
        self
    }

    /// Keeps the lock taken until `at_least` after it was acquired, even
    /// when it is released sooner: a job that finishes fast is then not run
    /// again at once by an instance whose clock or schedule is a little
    /// behind (`lock_at_least` of the attribute, ShedLock's
    /// `lockAtLeastFor`). Released later than that, the lock is freed at
    /// once, as usual. For exclusive and fair locks (including `lock_all`
    /// and write locks); a semaphore or read lock with it is refused with
    /// [`LockError::Config`].
    ///
    /// ```no_run
    /// # async fn run(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// use std::time::Duration;
    ///
    /// let Some(guard) = locks
    ///     .lock("job:cleanup")
    ///     .lock_at_least(Duration::from_secs(30))
    ///     .try_acquire()
    ///     .await?
    /// else {
    ///     return Ok(()); // another instance ran it within the last 30 s
    /// };
    /// // ... the job ...
    /// guard.release().await?; // the lock stays taken until 30 s after it was taken
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock_at_least(mut self, at_least: Duration) -> Self {
        self.at_least = Some(at_least);
        self
    }

    /// Renews the lock while the guard lives, but never past `max_hold`
    /// after it was taken: then [`lost`](LockGuard::lost) fires (a
    /// [`LossReason::MaxHold`](crate::LossReason::MaxHold) loss), a
    /// `#[distributed_lock]` body is stopped, and the lock expires in Redis
    /// by itself at that time if the guard is kept. A bound on how long
    /// one holder can keep others out (a body stuck in a loop, a call that
    /// never returns), unlike [`lock_at_most`](Self::lock_at_most), which
    /// also gives up the renewal that protects a long hold against a
    /// crash: here the lease stays short and renewed. `max_hold` of the
    /// attribute. At least [`MIN_LEASE`](crate::MIN_LEASE); a lease
    /// longer than it is shortened to it. A nested re-entry's cap applies
    /// to the whole hold, the earlier one winning; an
    /// [`extend`](LockGuard::extend) never goes past it.
    ///
    /// ```no_run
    /// # async fn run(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// use std::time::Duration;
    ///
    /// let guard = locks
    ///     .lock("import:feed")
    ///     .lease(Duration::from_secs(30))
    ///     .max_hold(Duration::from_secs(15 * 60))
    ///     .acquire()
    ///     .await?;
    /// tokio::select! {
    ///     _ = guard.lost() => eprintln!("held for 15 minutes, or lost: stop"),
    ///     _ = import() => {}
    /// }
    /// # Ok(())
    /// # }
    /// # async fn import() {}
    /// ```
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    /// Takes `permits` of the semaphore's permits at once, all or none
    /// (one without it): while this holder holds them, the permits all
    /// holders hold together still never exceed the semaphore's number.
    /// The guard gives every one of them back at its release (of its last
    /// re-entry level), or its lease gives them back if it stops renewing.
    ///
    /// A task that holds the semaphore in an enclosing critical section
    /// re-enters the permits it holds (one more re-entry level, no new
    /// permit) when it asks for as many or fewer; asking for more is
    /// [`LockError::Config`], since a holder cannot grow its hold. Asking
    /// for none, or for more than the semaphore has, is
    /// [`LockError::Config`] too, as is `permits` on a request that is not
    /// a semaphore's ([`LockClient::semaphore`](crate::LockClient::semaphore)).
    ///
    /// ```no_run
    /// # async fn run(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// // A pool of 10 connections; this job needs 3 of them at once.
    /// let three = locks.semaphore("db-pool", 10).permits(3).acquire().await?;
    /// // ... use three connections ...
    /// three.release().await?; // all three come back
    /// # Ok(())
    /// # }
    /// ```
    pub fn permits(mut self, permits: u32) -> Self {
        match &mut self.kind {
            Kind::Permits(asked) => asked.take = permits,
            other => {
                self.misuse = Some(format!(
                    "`permits` applies to semaphores (LockClient::semaphore), not to the {} lock `{}`",
                    other.lock_kind(),
                    self.label()
                ))
            }
        }
        self
    }

    /// Tries to take the lock once, without waiting: `None` when someone
    /// else holds it. The request's wait is not used.
    ///
    /// ```no_run
    /// # async fn run(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// match locks.lock("job:hourly").try_acquire().await? {
    ///     Some(guard) => {
    ///         // ... run the job ...
    ///         guard.release().await?;
    ///     }
    ///     None => { /* another instance is running it */ }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`acquire`](LockRequest::acquire), except that a lock held by
    /// someone else is `Ok(None)`, not [`LockError::Timeout`].
    pub async fn try_acquire(self) -> Result<Option<LockGuard>, LockError> {
        match self.wait(Duration::ZERO).acquire().await {
            Ok(guard) => Ok(Some(guard)),
            Err(err) if err.is_timeout() => Ok(None),
            Err(err) => Err(err),
        }
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
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// use std::time::Duration;
    ///
    /// let locks = lock_runtime::LockClient::in_memory().await?;
    /// let first = locks.lock("invoice:7").acquire().await?;
    /// // Another owner waits up to 50 ms, and times out: the lock is held.
    /// let second = locks.lock("invoice:7").wait(Duration::from_millis(50)).acquire().await;
    /// assert!(second.is_err_and(|err| err.is_timeout()));
    /// first.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LockError::Timeout`] when the lock stayed held for the whole wait;
    /// [`LockError::Config`] for an empty name or a lease below
    /// [`MIN_LEASE`](crate::MIN_LEASE); the connection errors of
    /// [`LockError`] otherwise.
    pub async fn acquire(self) -> Result<LockGuard, LockError> {
        // The span lives on in the guard: see the `telemetry` module.
        let level = self.client.config.span_level;
        let acquiring = Acquiring::start(self.metric_kind(), self.label(), level);
        let span = acquiring.span().clone();
        let client = self.client.clone();
        let mut result = self.acquire_inner(&span).instrument(span.clone()).await;
        // Granted while the client was shutting down (a release of its own
        // handed it on, or the grant crossed the shutdown): given back.
        if result.is_ok() && client.check_open().is_err() {
            result = Err(LockError::ShutDown);
        }
        match &result {
            Ok(guard) => acquiring.finish(Ok(guard.named_fences())),
            Err(err) => acquiring.finish(Err::<std::iter::Empty<_>, _>(err)),
        }
        result
    }

    /// Takes the locks: sets the acquisition up, makes its first attempt
    /// (unless it queues behind this process's waiters), and waits if that
    /// did not end it.
    async fn acquire_inner(mut self, span: &tracing::Span) -> Result<LockGuard, LockError> {
        self.check()?;
        let inner = &self.client;
        let keys: Vec<LockKeys> = self
            .names
            .iter()
            .map(|name| LockKeys::new(&inner.config.prefix, name))
            .collect();
        let (scoped, asking) = self.enclosing(&keys)?;
        let mut underway = self.begin(&keys, scoped, asking);
        if !underway.behind
            && let Some(done) = self.try_first(&mut underway, span).await
        {
            return done;
        }
        // Boxed: only a waiting acquisition pays for the wait's state, and
        // the futures of the acquisitions nested inside critical sections
        // stay small.
        Box::pin(self.wait_for(underway, span)).await
    }

    /// Sets an acquisition up: its owner id (the enclosing critical
    /// section's for a re-entry, else a fresh one), its deadline, the turn
    /// marks it leaves, whether it queues behind this process's waiters,
    /// and a waiter's early registration for its turn.
    fn begin<'a>(
        &'a self,
        keys: &'a [LockKeys],
        scoped: Option<Arc<str>>,
        asking: String,
    ) -> Underway<'a> {
        let inner = &self.client;
        let owner = scoped.clone().unwrap_or_else(|| self.client.new_owner());
        // A fresh owner id whose acquire call got no answer (a timeout, a
        // connection lost), or whose call is cut short by the caller
        // dropping this future, may hold the locks with nobody using them:
        // what it may hold is given back if the request ends without a guard.
        let unsettled = Unsettled::new(self, keys);
        let started = Instant::now();
        let deadline = deadline_after(started, self.wait);
        // If it stops waiting without the lock, it takes its marks back.
        let marked = self
            .marks_turns()
            .then(|| Waiting::new(self, keys, &owner, Trace::Marks));
        let joining = self.joins_with_release(keys, scoped.is_some());
        let behind = joining || self.queues_behind(keys, scoped.is_some());
        let early = self.registers_early(keys, scoped.is_some()).then(|| {
            let channel = keys[0].channel();
            inner
                .wakeups
                .watch([channel.as_str()], self.wake(keys, &owner))
        });
        Underway {
            keys,
            reentry: scoped.is_some(),
            asking,
            owner,
            early,
            marked,
            unsettled,
            started,
            deadline,
            behind,
            joining,
            first_busy: None,
            closed: None,
        }
    }

    /// The first attempt: `Some` with the acquisition's result when it
    /// ends it (taken, refused, or busy with no wait), `None` when the
    /// acquisition goes on to wait.
    async fn try_first(
        &self,
        underway: &mut Underway<'_>,
        span: &tracing::Span,
    ) -> Option<Result<LockGuard, LockError>> {
        let inner = &self.client;
        let a = underway;
        let first = a
            .unsettled
            .attempt((&a.owner, &a.asking), a.deadline, span)
            .await;
        match first {
            Ok(Outcome::Taken(guard)) => {
                Waiting::taken(&mut a.marked);
                // A waiter registered early got it: it wakes nobody else
                // on its way out.
                if let Some(early) = &a.early {
                    early.acquired();
                }
                Some(Ok(guard))
            }
            Ok(Outcome::Busy { ttl, quarantined }) if self.wait.is_zero() => Some(Err(
                self.timeout(a.started, closed_until(inner, quarantined, ttl))
            )),
            Ok(Outcome::Busy { ttl, quarantined }) => {
                a.first_busy = ttl;
                a.closed = closed_until(inner, quarantined, ttl);
                None
            }
            Ok(Outcome::Abandon(err)) | Err(err)
                if self.wait.is_zero() || !err.is_unavailable() || a.reentry =>
            {
                Some(Err(err))
            }
            Ok(Outcome::Abandon(_)) | Err(_) => {
                a.owner = self.abandon(a.keys, a.owner.clone());
                a.unsettled.settle();
                Waiting::new_owner(&mut a.marked, &a.owner);
                // Registered under the old owner id.
                a.early = None;
                None
            }
        }
    }

    /// Waits for the locks until the deadline: sleeps until a release is
    /// published, the holder's lease would run out, or a release of this
    /// client hands the lock on, and tries again (see [`Wait`]).
    async fn wait_for(
        &self,
        underway: Underway<'_>,
        span: &tracing::Span,
    ) -> Result<LockGuard, LockError> {
        let mut wait = Wait::start(self, underway, span).await?;
        let notifier = wait.watch.notifier();
        loop {
            // Register for the wake-up before trying, so that a release
            // between this attempt and the sleep below still wakes us.
            let mut released = pin!(notifier.notify().notified());
            released.as_mut().enable();
            let now = Instant::now();
            let attempt = wait.try_once(now).await;
            let until = match wait.judge(attempt, now) {
                Step::Done(result) => return result,
                Step::SleepUntil(until) => until,
            };
            let woke = wait.sleep(until, released).await?;
            wait.take_answer(woke).await;
        }
    }

    /// The owner id of the enclosing critical sections that hold the
    /// request's locks, if they do, and how the request asks for each of
    /// them (see [`reentry`](Self::reentry); empty: afresh). Re-entry only
    /// for locks an enclosing critical section holds: a lock first taken
    /// here gets an owner of its own, so that calls joined inside a
    /// critical section exclude each other (see scope.rs).
    fn enclosing(&self, keys: &[LockKeys]) -> Result<(Option<Arc<str>>, String), LockError> {
        match scope::taker(self.client.id, &self.names) {
            scope::Taker::Fresh => Ok((None, String::new())),
            scope::Taker::Reentry(owner) => {
                let asking = self.reentry(keys, &owner)?;
                Ok((Some(owner), asking))
            }
            scope::Taker::Mixed => Err(LockError::Config(format!(
                "`{}`: this task holds some of these locks in enclosing critical \
                 sections but not all of them under one owner; take the held ones \
                 and the others in separate requests",
                self.label()
            ))),
        }
    }

    /// How a re-entry under `owner` asks for each lock (the codes of
    /// [`Asking`]), from what the enclosing critical sections hold of it:
    /// the lock itself, or the other side of a read-write lock. A lock they
    /// no longer hold was lost: the re-entry fails as lost at once, and so
    /// does their hold. Refuses a re-entry whose lease is of the other kind
    /// than the held lock's (fixed or renewed): a renewed re-entry would
    /// keep a fixed lease renewed past its bound, a fixed one could not
    /// bound a lock that an enclosing scope renews.
    fn reentry(&self, keys: &[LockKeys], owner: &Arc<str>) -> Result<String, LockError> {
        let registry = &self.client.registry;
        let mut asking = String::with_capacity(keys.len());
        for lock in keys {
            let stored = Stored::for_kind(self.kind, lock);
            let how = match registry.renewed(lock, &stored, owner) {
                Some(renewed) if renewed == self.fixed_lease => {
                    let (held, asked) = if self.fixed_lease {
                        ("renewed", "fixed")
                    } else {
                        ("fixed", "renewed")
                    };
                    return Err(LockError::Config(format!(
                        "`{}` is held with a {held} lease by an enclosing critical section; \
                         re-entering it with a {asked} lease would change how long it is held",
                        self.label()
                    )));
                }
                Some(true) => Asking::Reentry,
                Some(false) => Asking::ReentryKeepingLease,
                None if self.holds_other_side(lock, owner) => Asking::OtherSide,
                None => {
                    registry.lose_all(lock, owner, LossReason::NotHeldAtReentry);
                    return Err(LockError::Lost {
                        key: self.label().to_owned(),
                        reason: LossReason::NotHeldAtReentry,
                    });
                }
            };
            asking.push(how.code());
        }
        Ok(asking)
    }

    /// Whether `owner` holds the other side of the read-write lock `lock`
    /// (the write side for a read request, the read side for a write one).
    fn holds_other_side(&self, lock: &LockKeys, owner: &Arc<str>) -> bool {
        let registry = &self.client.registry;
        Stored::other_side(self.kind, lock)
            .is_some_and(|other| registry.renewed(lock, &other, owner).is_some())
    }

    /// An upgrade or downgrade of `keys` under `owner` ended without an
    /// answer: it may hold this side with no guard for it. The enclosing
    /// hold of the other side is marked, and its last guard gives this side
    /// back once its own release is answered (see `guard.rs`,
    /// `give_back_other_side`).
    fn other_side_unsettled(&self, keys: &[LockKeys], owner: &Arc<str>) {
        let registry = &self.client.registry;
        for lock in keys {
            if let Some(other) = Stored::other_side(self.kind, lock) {
                registry.other_side_unsettled(lock, &other, owner, None);
            }
        }
    }

    /// One attempt: the guard, or how long the locks others hold stay taken.
    async fn attempt(
        &self,
        keys: &[LockKeys],
        (owner, asking): (&Arc<str>, &str),
        deadline: Instant,
        span: &tracing::Span,
    ) -> Result<Outcome, LockError> {
        let inner = &self.client;
        inner.check_open()?;
        let sent = Instant::now();
        let backend = &inner.backend;
        let replicas = inner.config.replicas(self.replicas);
        let times = Times {
            lease: self.lease,
            // A mark outlives a waiter that died by a lease at most (and no
            // more than a fair waiter's place in line); a live waiter tries
            // again well before it lapses (the scripts see to that).
            mark: deadline
                .saturating_duration_since(sent)
                .min(self.lease)
                .min(fair_stay(self.lease)),
            drift: inner.config.drift_for(self.lease),
        };
        let attempt = Attempt {
            name: self.label(),
            locks: keys,
            owner,
            asking,
            kind: self.kind,
            times,
            line: (fair_stay(self.lease), !self.wait.is_zero()),
            replicas,
        };
        let taken = match backend.acquire(&attempt).await {
            Ok(Acquired::Held(taken)) => taken,
            Ok(Acquired::Busy { ttl, quarantined }) => {
                return Ok(Outcome::Busy { ttl, quarantined });
            }
            Err(err) => {
                if !asking.is_empty() && err.is_lost() {
                    // The lock went while the enclosing critical section
                    // held it (force-released, evicted, lost in a
                    // failover): that hold is over too, and its body is
                    // stopped as on any loss.
                    for lock in keys {
                        inner
                            .registry
                            .lose_all(lock, owner, LossReason::NotHeldAtReentry);
                    }
                }
                return Err(err);
            }
        };
        self.grant(keys, owner, &taken, (sent, replicas), span)
            .await
    }

    /// The guard for locks granted to `owner` (by an attempt sent at
    /// `sent`, or handed on by a release sent then), or `Busy` when the
    /// grant came too late to be held.
    async fn grant(
        &self,
        keys: &[LockKeys],
        owner: &Arc<str>,
        taken: &[Taken],
        (sent, replicas): (Instant, Option<Replicas>),
        span: &tracing::Span,
    ) -> Result<Outcome, LockError> {
        let inner = &self.client;
        let backend = &inner.backend;
        let stored = Stored::for_kind(self.kind, &keys[0]);
        let drift = inner.config.drift_for(self.lease);
        // A grant whose answer came after its validity deadline (the lease
        // from sending, less the drift) is no use: Redis may have expired it
        // and granted it to another already, while this process was frozen
        // or the answer was held up (a paused server, a WAIT for replicas).
        // Handing it out would make a holder that is lost on arrival, with a
        // token older than the new holder's. It is given back instead, and
        // the caller tries again within its wait. The next attempt uses the
        // same owner id, so the give-back must be done first, on every
        // Redlock master too: arriving after that attempt took the lock
        // anew, it would free it under its new holder. If it fails, the
        // caller goes on under a new owner id (see `abandon`, and
        // `Outcome::Abandon`) or reports the error.
        if Instant::now() + DECLARE_EARLY >= sent + self.lease - drift {
            tracing::debug!(
                after = ?sent.elapsed(),
                lease = ?self.lease,
                "lock granted too late to be held; giving it back"
            );
            let giving = Giving {
                announce: true,
                ..Giving::ONE
            };
            if let Err(err) = backend
                .give_back(self.label(), keys, &stored, owner, giving)
                .await
            {
                return Ok(Outcome::Abandon(err));
            }
            return Ok(Outcome::Busy {
                ttl: Some(Duration::ZERO),
                quarantined: false,
            });
        }
        if let Some(first) = taken.first() {
            telemetry::depth(span, first.count);
        }
        let held: Vec<_> = self
            .names
            .iter()
            .zip(keys)
            .zip(taken)
            .map(|((name, keys), taken)| {
                inner.registry.hold(Acquisition {
                    name,
                    keys,
                    stored: &stored,
                    owner,
                    fence: taken.fence,
                    lease: self.lease,
                    drift,
                    sent,
                    replicas,
                    renewed: !self.fixed_lease,
                    cap: self
                        .max_hold
                        .and_then(|max_hold| sent.checked_add(max_hold)),
                    tracked: Tracked::new(self.kind, self.metric_kind(), span),
                })
            })
            .collect();
        let hold = Hold::new(self.metric_kind(), span, renewals(&held));
        let guard = LockGuard::new(self.client.clone(), held, hold);
        Ok(Outcome::Taken(guard.held_at_least(self.at_least, sent)))
    }

    /// How errors and logs name the request: its lock's name, or the names
    /// joined by `+` (made once, and only for several locks).
    fn label(&self) -> &str {
        match &self.joined {
            Some(joined) => joined,
            None => self.names.first().map_or("", String::as_str),
        }
    }

    /// The `kind` label of the request's metrics.
    fn metric_kind(&self) -> &'static str {
        telemetry::kind_label(self.kind, self.write)
    }

    /// An acquire whose answer was lost may still have taken the lock. The
    /// owner id it used belongs to no scope, so whatever it holds is dropped
    /// (in the background; otherwise the lease runs out), and the next
    /// attempt uses a new owner id, which the abandoned one cannot be
    /// mistaken for.
    fn abandon(&self, keys: &[LockKeys], owner: Arc<str>) -> Arc<str> {
        self.give_back_for(keys, owner);
        self.client.new_owner()
    }

    /// Gives back, in the background, whatever `owner` may hold of `keys`
    /// (see [`abandon`](Self::abandon)), and retires `owner` from them:
    /// `owner` is never used again (see [`Backend::retire`], which sends
    /// the give-back until Redis answers it).
    ///
    /// [`Backend::retire`]: crate::engine::backend::Backend::retire
    fn give_back_for(&self, keys: &[LockKeys], owner: Arc<str>) {
        let inner = &self.client;
        let again_after = inner.config.call_timeout(self.replicas);
        let stored = Stored::for_kind(self.kind, &keys[0]);
        let (label, locks) = (self.label().to_owned(), keys.to_vec());
        inner.retire_later(label, locks, vec![(stored, None)], vec![owner], again_after);
    }

    /// The error for a wait that ended without the locks: held by others,
    /// or, when the last attempt found only the restart quarantine in the
    /// way, closed by it until `closed`.
    fn timeout(&self, started: Instant, closed: Option<Instant>) -> LockError {
        let (key, waited) = (self.label().to_owned(), started.elapsed());
        match closed {
            Some(until) => LockError::Quarantined {
                key,
                waited,
                left: until.saturating_duration_since(Instant::now()),
            },
            None => LockError::Timeout { key, waited },
        }
    }
}

/// When a wait that starts at `started` ends. A wait too long for the clock
/// (`Duration::MAX`: wait as long as it takes) ends in thirty years, as
/// tokio's far future does.
fn deadline_after(started: Instant, wait: Duration) -> Instant {
    started
        .checked_add(wait)
        .unwrap_or_else(|| started + Duration::from_secs(30 * 365 * 24 * 3600))
}

/// Until when the restart quarantine keeps locks closed, from an attempt
/// that found only it in the way (see [`Outcome::Busy`]); the client's
/// health reports it.
fn closed_until(inner: &Inner, quarantined: bool, ttl: Option<Duration>) -> Option<Instant> {
    let until = quarantined.then(|| Instant::now() + ttl.unwrap_or_default());
    if let Some(until) = until {
        inner.met_quarantine(until);
    }
    until
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{fair_retry, fair_stay};

    #[test]
    fn a_fair_waiter_stays_in_line_for_half_its_lease_within_bounds() {
        let ms = Duration::from_millis;
        assert_eq!(fair_stay(ms(30_000)), ms(3_000));
        assert_eq!(fair_stay(ms(6_000)), ms(3_000));
        assert_eq!(fair_stay(ms(1_000)), ms(500));
        assert_eq!(fair_stay(ms(100)), ms(250));
        assert_eq!(fair_retry(ms(30_000)), ms(1_000));
        assert_eq!(fair_retry(ms(1_000)), ms(500) / 3);
    }
}
