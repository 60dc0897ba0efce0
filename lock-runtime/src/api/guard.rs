//! A held lock.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::api::inner::Inner;
use crate::base::detached::Detached;
use crate::base::error::{Chain, LockError, LossReason};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::api::scope::{self, CurrentLock, Scope};
use crate::base::keys::{self, LockKeys};
use crate::base::kind::Kind;
use crate::base::telemetry::Hold;
use crate::engine::handoffs::{Answer, Offer};
use crate::engine::watchdog::{self, Held};
use crate::store::scripts::calls::Next;
use crate::store::scripts::{Giving, HandedOn, Released, Stored};

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
    client: Arc<Inner>,
    /// The locks held, in canonical order; one unless taken with `lock_all`.
    held: Vec<Arc<Held>>,
    /// For several locks: cancelled when any of them is lost (one lock has
    /// its own token, see `Held::lost_token`).
    group: Option<CancellationToken>,
    /// Set once the locks have been given back (or handed to `release`).
    done: bool,
    /// The lock's span, and what it records at the end.
    telemetry: Hold,
    /// Until when the locks stay taken at least, even when released sooner
    /// (`LockRequest::lock_at_least`).
    keep_until: Option<Instant>,
    /// Cancelled when the critical section ends (see
    /// [`cancellation_token`](LockGuard::cancellation_token)); made on
    /// first use, as the lost token is.
    ended: std::sync::OnceLock<CancellationToken>,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("locks", &self.fences())
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl LockGuard {
    /// A guard over `held`, which is never empty.
    pub(crate) fn new(client: Arc<Inner>, held: Vec<Arc<Held>>, telemetry: Hold) -> Self {
        let group = match held.as_slice() {
            [_] => None,
            many => {
                let group = CancellationToken::new();
                for held in many {
                    held.join_group(&group);
                }
                Some(group)
            }
        };
        LockGuard {
            client,
            held,
            group,
            done: false,
            telemetry,
            keep_until: None,
            ended: std::sync::OnceLock::new(),
        }
    }

    /// Keeps the locks taken until `at_least` after `acquired` at their
    /// release (see `LockRequest::lock_at_least`).
    pub(crate) fn held_at_least(mut self, at_least: Option<Duration>, acquired: Instant) -> Self {
        // At most `MAX_LEASE` (checked before acquiring): no overflow.
        self.keep_until = at_least.and_then(|at_least| acquired.checked_add(at_least));
        self
    }

    /// Makes the lock (every lock of the guard) live at least `lease` from
    /// now in Redis, and moves [`valid_until`](LockGuard::valid_until)
    /// accordingly: for a lock taken with a
    /// [`lock_at_most`](crate::LockRequest::lock_at_most), the way to hold it
    /// longer than planned. It never shortens what Redis keeps. The
    /// watchdog goes on renewing a renewed lock with its own lease.
    ///
    /// ```no_run
    /// # async fn run(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// use std::time::Duration;
    ///
    /// let guard = locks
    ///     .lock("import:batch-7")
    ///     .lock_at_most(Duration::from_secs(60))
    ///     .acquire()
    ///     .await?;
    /// // ... the import runs long: a minute more, from now.
    /// guard.extend(Duration::from_secs(60)).await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LockError::Lost`] when the lock is gone (or was lost before);
    /// [`LockError::Config`] for a lease below
    /// [`MIN_LEASE`](crate::MIN_LEASE); connection errors when Redis could
    /// not confirm the extension, in which case the lock keeps its
    /// deadline.
    pub async fn extend(&self, lease: Duration) -> Result<(), LockError> {
        if self.is_lost() {
            return Err(self.lost_error());
        }
        let inner = &self.client;
        let label = label(&self.held);
        inner.config.check_lease(&label, lease)?;
        watchdog::extend(&inner.registry, &inner.backend, &label, &self.held, lease)
            .instrument(self.span().clone())
            .await
    }

    fn first(&self) -> &Held {
        &self.held[0]
    }

    /// The lock's name (the first in sorted order, for a guard over
    /// several), as given to [`LockClient::lock`](crate::LockClient::lock);
    /// its Redis key is another string (see [`LockInfo::key`](crate::LockInfo::key)).
    pub fn name(&self) -> &str {
        &self.first().name
    }

    /// The `tracing` span of this lock. It opens when the acquisition
    /// starts and lasts as long as the guard; the waiting, the critical
    /// section of [`scope`](LockGuard::scope) (and so the body of a
    /// `#[distributed_lock]` function) and the release run inside it.
    ///
    /// Named `lock`, level `INFO` (or the client's
    /// [`span_level`](crate::LockClientBuilder::span_level)), target `lock_runtime::telemetry`, with
    /// these fields, recorded as they become known:
    ///
    /// | field          | value                                                      |
    /// |----------------|------------------------------------------------------------|
    /// | `key`          | the lock's name (`a + b` for [`lock_all`](crate::LockClient::lock_all)) |
    /// | `kind`         | `exclusive`, `semaphore`, `read-write` or `fair`           |
    /// | `fence`        | the fencing token (of the first lock), once acquired      |
    /// | `fences`       | every lock's `name=token`, for several locks              |
    /// | `depth`        | 1 for a fresh acquisition, more for a re-entry            |
    /// | `wait_seconds` | time the acquisition took, acquired or not                |
    /// | `hold_seconds` | time held, at the end                                      |
    /// | `renewals`     | renewals confirmed while held, at the end                 |
    /// | `outcome`      | `released`, `timed_out`, `lost` or `error`, at the end    |
    /// | `error`        | the error's message, with `outcome = error`               |
    ///
    /// A timed-out or failed acquisition has a span too, without a guard.
    /// Warnings (a lock lost, a release that failed) name the key
    /// themselves, so that they say which lock even where the span is
    /// filtered out.
    ///
    /// Enter it around work done under the lock outside `scope`, so that
    /// the work's events carry the lock:
    ///
    /// ```no_run
    /// use tracing::Instrument;
    /// # async fn run(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// let guard = locks.lock("invoice:7").acquire().await?;
    /// async {
    ///     tracing::info!("rendering the invoice"); // logged inside `lock{key="invoice:7" ...}`
    /// }
    /// .instrument(guard.span().clone())
    /// .await;
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn span(&self) -> &tracing::Span {
        self.telemetry.span()
    }

    /// The fencing token: strictly greater than the token of every earlier
    /// holder of this lock. Re-entering a held lock keeps the token. For a
    /// guard over several locks, the token of the first; see
    /// [`fences`](LockGuard::fences).
    ///
    /// Hand it to the storage the critical section writes to and have the
    /// storage reject writes that carry a smaller token than the largest it
    /// has seen: a holder that stalled past its lease then cannot overwrite
    /// the work of the next holder.
    pub fn fence(&self) -> u64 {
        self.first().fence
    }

    /// Each lock's name and fencing token, as [`fences`](Self::fences)
    /// has them, without copying the names.
    pub(crate) fn named_fences(&self) -> impl ExactSizeIterator<Item = (&str, u64)> + Clone {
        self.held
            .iter()
            .map(|held| (held.name.as_str(), held.fence))
    }

    /// Every lock this guard holds with its own fencing token, in sorted order.
    pub fn fences(&self) -> Vec<CurrentLock> {
        self.held
            .iter()
            .map(|held| CurrentLock {
                name: held.name.clone(),
                fence: held.fence,
            })
            .collect()
    }

    /// Resolves once the lock (any of the locks) is lost: a renewal found it
    /// deleted or held by another owner, or no renewal was confirmed before
    /// the lease could run out (Redis unreachable, paused, or restarted).
    /// Never resolves while the locks are held.
    ///
    /// It also resolves on its own once the validity deadline
    /// ([`valid_until`](LockGuard::valid_until)) has passed, without waiting
    /// for the watchdog: a process that was frozen (a blocking call, a paused
    /// VM) learns it at its first await after thawing.
    ///
    /// ```no_run
    /// # async fn run(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// let guard = locks.lock("ledger:7").acquire().await?;
    /// tokio::select! {
    ///     _ = guard.lost() => return Err(guard.lost_error()), // stop writing
    ///     _ = post_entries(guard.fence()) => {}
    /// }
    /// guard.release().await
    /// # }
    /// # async fn post_entries(_fence: u64) {}
    /// ```
    pub async fn lost(&self) {
        let lost = self.lost_token();
        loop {
            // Read the clock first: after a freeze the timer driver's idea
            // of now lags, and a sleep would wait for it.
            let deadline = self.deadline();
            if lost.is_cancelled() || Instant::now() >= deadline {
                return;
            }
            // On waking, look again: a confirmed renewal may have moved the
            // deadline since.
            tokio::select! {
                _ = lost.cancelled() => return,
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// Until when the locks are surely held, as far as this process knows:
    /// the send time of the last confirmed renewal plus the lease, minus the
    /// drift margin. Work that must finish under the lock should finish by then.
    pub fn valid_until(&self) -> std::time::Instant {
        self.deadline().into_std()
    }

    fn deadline(&self) -> Instant {
        let earliest = self.held.iter().map(|held| held.valid_until()).min();
        earliest.unwrap_or_else(Instant::now)
    }

    /// Whether the lock (any of the locks) has been lost; see [`lost`](LockGuard::lost).
    pub fn is_lost(&self) -> bool {
        self.held.iter().any(|held| held.is_lost()) || Instant::now() >= self.deadline()
    }

    /// Cancelled when any of the locks is lost.
    /// A token cancelled when the critical section ends: the lock (any of
    /// the locks) is lost, or this guard is released or dropped. Hand it to
    /// work spawned inside the critical section, which outlives the
    /// guard's own future otherwise, so that it stops with the section.
    /// Each call gives a child of the section's token: cancelling it stops
    /// only its own holders.
    ///
    /// ```no_run
    /// # async fn run(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// let guard = locks.lock("report:2026-11").acquire().await?;
    /// let stop = guard.cancellation_token();
    /// let worker = tokio::spawn(async move {
    ///     tokio::select! {
    ///         _ = stop.cancelled() => {} // lost, or released: stop writing
    ///         _ = write_report() => {}
    ///     }
    /// });
    /// worker.await.ok();
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// # async fn write_report() {}
    /// ```
    pub fn cancellation_token(&self) -> CancellationToken {
        self.section_token().child_token()
    }

    /// Cancelled when the critical section ends (see
    /// [`cancellation_token`](LockGuard::cancellation_token)).
    fn section_token(&self) -> &CancellationToken {
        self.ended.get_or_init(|| self.lost_token().child_token())
    }

    /// The critical section is over: work handed its token stops.
    fn end_section(&self) {
        if let Some(ended) = self.ended.get() {
            ended.cancel();
        }
    }

    fn lost_token(&self) -> &CancellationToken {
        self.group
            .as_ref()
            .unwrap_or_else(|| self.first().lost_token())
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
            client: self.client.id,
            owner: self.first().owner.clone(),
            locks: self.fences(),
            parent: scope::innermost(),
            ended: self.section_token().clone(),
        };
        let span = self.span().clone();
        scope::enter(scope, async move {
            tokio::select! {
                biased;
                _ = self.lost() => Err(self.lost_error()),
                out = fut => Ok(out),
            }
        })
        .instrument(span)
        .await
    }

    /// The error for this lock having been lost.
    pub fn lost_error(&self) -> LockError {
        // The lock declared lost, or else the one whose deadline comes (or
        // came) first: of several locks, the one a loss not declared yet
        // concerns.
        let lost = self.held.iter().find(|held| held.is_lost());
        let earliest = || self.held.iter().min_by_key(|held| held.valid_until());
        let held = lost.or_else(earliest).map_or(self.first(), |held| &**held);
        // Not declared yet, but past its deadline: it counts as expired (a
        // fixed lease, as ended).
        let reason = held
            .loss()
            .unwrap_or(if Instant::now() < held.valid_until() {
                LossReason::NotHeld
            } else if held.at_cap() {
                LossReason::MaxHold
            } else if held.is_renewed() {
                LossReason::Expired
            } else {
                LossReason::LeaseEnded
            });
        LockError::Lost {
            key: held.name.clone(),
            reason,
        }
    }

    /// Gives the lock back (one level, if re-entered) and stops renewing it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// let locks = lock_runtime::LockClient::in_memory().await?;
    /// let guard = locks.lock("invoice:7").acquire().await?;
    /// guard.release().await?; // Err(Lost) if it was lost meanwhile
    /// assert!(locks.lock("invoice:7").try_acquire().await?.is_some());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// A release whose future is dropped before it is done (a `timeout`
    /// around it, a request handler cancelled) still gives the lock back,
    /// in a task of its own: the last guard's release frees every level,
    /// which is safe to send late. Only a nested guard's one-level release
    /// stops with its future, and the enclosing guard's release then frees
    /// that level too.
    ///
    /// The last guard of one side of a read-write lock (a guard of that
    /// lock alone) released while this task still holds the other side
    /// under the same owner (after an upgrade or a downgrade) gives back
    /// one level instead: the hold of the other side may take this side
    /// again, and a release that reaches Redis after that (on Redlock, a
    /// master slower than the majority the release returned on) counts the
    /// new grant down rather than freeing it. Whatever such a release
    /// leaves held (it failed, or a re-entry whose answer was lost counted
    /// one more in Redis) is given back whole, kept until its
    /// [`lock_at_least`](crate::LockRequest::lock_at_least) minimum, when
    /// the hold of the other side (a guard of that lock alone) is
    /// released, or at once if that release began first; while this side
    /// is held here again, its own last release frees it instead.
    ///
    /// # Errors
    ///
    /// [`LockError::Lost`] when the lock was lost before the release, or
    /// found already expired or taken over; connection errors when Redis
    /// could not be told (on Redlock, fewer than a majority of masters:
    /// [`LockError::NoQuorum`]). The last guard's release is then sent again
    /// in the background until Redis answers (for ten minutes at most; the
    /// lock expires after its lease if Redis never does): a stalled server
    /// does not leave the lock taken by nobody for its lease.
    /// [`LockClient::shutdown`](crate::LockClient::shutdown) sends it at
    /// once, waits for it, and reports it if it fails again. A hold that
    /// [`LockClient::shutdown`](crate::LockClient::shutdown) ended is still
    /// held in Redis: it is given back like any other, and a give-back that
    /// fails is reported as that failure rather than as lost.
    pub async fn release(mut self) -> Result<(), LockError> {
        self.end_section();
        self.done = true;
        let lost_before = self.is_lost().then(|| self.lost_error());
        let last = stop_renewing(&self.client, &self.held);
        let telemetry = std::mem::take(&mut self.telemetry);
        let ending = Ending {
            lost_before,
            last,
            keep_until: self.keep_until,
        };
        if !last {
            return end(&self.client, &self.held, ending, telemetry).await;
        }
        // Nobody would give the locks back if this future were dropped
        // midway (the watchdog stopped renewing them): they would stay
        // taken by nobody for their whole lease.
        let (client, held) = (self.client.clone(), std::mem::take(&mut self.held));
        Detached::new(async move { end(&client, &held, ending, telemetry).await }).await
    }
}

/// How a guard ends.
struct Ending {
    /// The loss found before the release, if any.
    lost_before: Option<LockError>,
    /// No other guard of this process holds the locks.
    last: bool,
    /// Until when the locks stay taken at least.
    keep_until: Option<Instant>,
}

/// Gives a guard's locks back and says whether they were still held; the
/// lock's span records the outcome.
async fn end(
    client: &Arc<Inner>,
    held: &[Arc<Held>],
    ending: Ending,
    telemetry: Hold,
) -> Result<(), LockError> {
    let Ending {
        lost_before,
        last,
        keep_until,
    } = ending;
    // A hold the client's shutdown ended is still held in Redis, and the
    // client takes no more locks: it is given back as any other.
    let shut_down = matches!(
        lost_before,
        Some(LockError::Lost {
            reason: LossReason::ShutDown,
            ..
        })
    );
    let outcome = async {
        // The last guard gives back every level: a re-entry whose answer
        // was lost may have counted one more in Redis than guards here, and
        // every level at once is safe to send again after a failure that
        // leaves open whether it ran. Not for a lock lost before: the same
        // owner may hold it anew. Nor for an upgrade or a downgrade (see
        // `within_other_side`).
        let within_other_side = last && within_other_side(client, held);
        let whole = last && (lost_before.is_none() || shut_down) && !within_other_side;
        let keep = keep_until.map_or(Duration::ZERO, |until| {
            until.saturating_duration_since(Instant::now())
        });
        if whole {
            for held in held {
                held.give_back_whole();
            }
        }
        let released = give_back(client, held, whole, keep).await;
        if within_other_side && !settled(&released) {
            mark_unsettled(client, held, keep_until);
        }
        let other_side = if last {
            unsettled_other_side(client, held)
        } else {
            None
        };
        match &released {
            Err(err) if whole => give_back_later(client, held, keep_until, err, other_side),
            _ => give_back_other_side(client, held, other_side),
        }
        // A lock lost before is reported as lost, whether or not Redis
        // could be told of the release; one the shutdown ended, which
        // Redis still had, by the release's failure if it failed.
        if let Some(lost) = lost_before {
            return match released {
                Err(err) if shut_down => Err(err),
                _ => Err(lost),
            };
        }
        // A guard that gives back one level of a hold whose last guard
        // gave back every level (which reached Redis first) finds the lock
        // gone, and that is no loss: its level went with that release
        // (which reports a lock gone before it came). Only such a release:
        // a guard last for one lock of several, with a nested guard left
        // on another, gives back one level of each, and a lock it finds
        // gone was lost.
        let overtaken = |held: &Held| !whole && held.given_back_whole();
        match held
            .iter()
            .zip(released?)
            .find(|(held, r)| *r == Released::NotHeld && !overtaken(held))
        {
            Some((held, _)) => Err(LockError::Lost {
                key: held.name.clone(),
                reason: LossReason::NotHeldAtRelease,
            }),
            None => Ok(()),
        }
    }
    .instrument(telemetry.span().clone())
    .await;
    finish(telemetry, &outcome, held);
    outcome
}

/// A last release that failed without saying whether it ran (Redis
/// stalled, the connection dropped; on Redlock, too few masters) may have
/// left the locks taken: it is sent again in the background until Redis
/// (a majority of masters) answers it (see
/// [`Backend::retire`]), so that a stall does not leave them taken by
/// nobody for their lease. Their owner id is done with them, so retiring
/// it refuses nothing anyone will ask for, unless it still holds the other
/// side of a read-write lock: then nothing is sent again.
///
/// `other_side`, the other side of the read-write lock that an upgrade or
/// downgrade whose answer was lost may have taken (see
/// [`give_back_other_side`]), is given back once this one is.
///
/// [`Backend::retire`]: crate::engine::backend::Backend::retire
fn give_back_later(
    client: &Arc<Inner>,
    held: &[Arc<Held>],
    keep_until: Option<Instant>,
    err: &LockError,
    other_side: Option<Side>,
) {
    if !err.is_unavailable() {
        give_back_other_side(client, held, other_side);
        return;
    }
    let inner = client;
    // An upgrade or a downgrade shares its owner id with the other side of
    // the read-write lock, held by an enclosing scope that may take this
    // side again meanwhile (asking for the other side, which no retirement
    // refuses): a give-back sent late could free that. Its last release
    // gives back one level and does not come here (see
    // `within_other_side`), unless the other side was taken since: then
    // the hold of the other side gives it back when it ends.
    if held.iter().any(|held| holds_either_side(inner, held)) {
        mark_unsettled(client, held, keep_until);
        return;
    }
    let keys = keys_of(held).into_owned();
    let label = label(held).into_owned();
    tracing::debug!(key = %label, error = %Chain(err), "release failed; sending it again in the background");
    // This side first: the call that may have taken the other side needs
    // this one held (see `give_back_other_side`).
    let mut sides = vec![(held[0].stored.clone(), keep_until)];
    sides.extend(other_side);
    let owners = vec![held[0].owner.clone()];
    inner.retire_later(label, keys, sides, owners, resend_after(inner));
}

/// The first pause before a give-back of a guard's locks that got no
/// answer is sent again: the time a call of the client may take before it
/// counts as unanswered (a release does not wait for replicas).
fn resend_after(client: &Inner) -> Duration {
    client.config.command_timeout
}

/// One side of a read-write lock to give back, and until when it stays
/// taken at least (`lock_at_least`), if it does.
type Side = (Stored, Option<Instant>);

/// The other side of the read-write lock of `held` (a last guard's lock)
/// that an upgrade or a downgrade made from it, whose answer was lost, may
/// have taken, or whose release left held, with no guard for it (see
/// `Held::other_side_unsettled`), with the time it stays taken until.
/// None when a guard of this client holds either side under the same owner
/// id: that one's last release gives back every level of its side, and the
/// owner id may still ask for the other. Once neither is held here, nothing
/// asks for the lock under that owner id again (a re-entry, an upgrade or a
/// downgrade needs a hold here), so giving back, and retiring the owner id
/// from, that side refuses and frees nothing anyone holds or asks for.
fn unsettled_other_side(client: &Arc<Inner>, held: &[Arc<Held>]) -> Option<Side> {
    let [held] = held else {
        return None;
    };
    let keep_until = held.other_side_unsettled()?;
    let other = Stored::other_side(held.tracked.kind(), &held.keys)?;
    (!holds_either_side(client, held)).then_some((other, keep_until))
}

/// Whether `held`'s lock is one side of a read-write lock whose other side a
/// guard of this client holds under the same owner id: an upgrade or a
/// downgrade, made within that hold, which may take this side again.
///
/// Its last guard gives back one level rather than every level. A release
/// can reach Redis after the same hold took this side again: on Redlock it
/// returns once a majority of masters answered, and a slower master may
/// run it only then (the new grant went out on a connection opened since
/// the one that carries it); anywhere, a release that got no answer may
/// still run. Every level at once would free that new grant there; one
/// level counts it down (it re-entered what the release was to free).
fn within_other_side(client: &Inner, held: &[Arc<Held>]) -> bool {
    let [held] = held else {
        return false;
    };
    let registry = &client.registry;
    Stored::other_side(held.tracked.kind(), &held.keys)
        .is_some_and(|other| registry.renewed(&held.keys, &other, &held.owner).is_some())
}

/// Whether a last release of one level (see [`within_other_side`]) left
/// nothing of its side held: it failed (it may never run, or run only
/// later), or levels were left (a re-entry whose answer was lost counted
/// one more in Redis than guards here).
fn settled(released: &Result<Vec<Released>, LockError>) -> bool {
    released.as_ref().is_ok_and(|released| {
        released
            .iter()
            .all(|r| !matches!(r, Released::StillHeld(_)))
    })
}

/// Marks the hold of the other side that `held` (an upgrade or a
/// downgrade, whose guard kept it taken until `keep_until`, if given) was
/// taken under: its side may still be held in Redis with no guard for it,
/// and that hold's last guard gives it back whole once its own release is
/// answered (see [`unsettled_other_side`]), kept until then. A hold that
/// began ending meanwhile (its release was sent while this one was on its
/// way) would not: the side is given back whole now instead. Nothing asks
/// for the lock under that owner id any more, as when that hold gives it
/// back, unless this side is held here again under that owner id.
fn mark_unsettled(client: &Arc<Inner>, held: &[Arc<Held>], keep_until: Option<Instant>) {
    for held in held {
        let Some(other) = Stored::other_side(held.tracked.kind(), &held.keys) else {
            continue;
        };
        let registry = &client.registry;
        // Not while this side is held here again, under the same owner id
        // (taken again before that hold ended): its own last release gives
        // back every level, this one's too.
        if !registry.other_side_unsettled(&held.keys, &other, &held.owner, keep_until)
            && !holds_either_side(client, held)
        {
            give_back_side(client, held, (held.stored.clone(), keep_until));
        }
    }
}

/// Whether a guard of this client holds `held`'s lock under its owner id:
/// its side, or the other side of a read-write lock.
fn holds_either_side(client: &Inner, held: &Held) -> bool {
    let registry = &client.registry;
    let holds = |stored: &Stored| registry.renewed(&held.keys, stored, &held.owner).is_some();
    holds(&held.stored)
        || Stored::other_side(held.tracked.kind(), &held.keys).is_some_and(|other| holds(&other))
}

/// Gives back `other_side` (see [`unsettled_other_side`]) of `held`'s
/// lock whole, in the background, sent again until Redis answers. Sent
/// after the release of `held`'s own side: the lost call, if Redis runs it
/// only now, finds that side no longer held and takes nothing (asking for
/// the other side needs this one held).
fn give_back_other_side(client: &Arc<Inner>, held: &[Arc<Held>], other_side: Option<Side>) {
    let (Some(side), [held]) = (other_side, held) else {
        return;
    };
    tracing::debug!(key = %held.name, "giving back the other side an upgrade or a downgrade may have left held");
    give_back_side(client, held, side);
}

/// Gives back `side` of `held`'s lock whole, and retires `held`'s owner id
/// from it, in the background, sent again until Redis answers.
fn give_back_side(client: &Arc<Inner>, held: &Held, side: Side) {
    let locks = vec![held.keys.clone()];
    let owners = vec![held.owner.clone()];
    let label = held.name.clone();
    client.retire_later(label, locks, vec![side], owners, resend_after(client));
}

/// Records how a hold of `held` ended.
fn finish(telemetry: Hold, outcome: &Result<(), LockError>, held: &[Arc<Held>]) {
    let lost = match outcome {
        Err(LockError::Lost { key, .. }) => held
            .iter()
            .find(|held| held.name == *key)
            .map(|held| &held.tracked),
        _ => None,
    };
    telemetry.finish(outcome, renewals(held), lost);
}

/// How many renewals of the first lock the watchdog has confirmed.
pub(crate) fn renewals(held: &[Arc<Held>]) -> u64 {
    held.first().map_or(0, |held| held.tracked.renewals())
}

/// Takes a guard's locks out of the watchdog's care; true when no other
/// guard holds any of them.
fn stop_renewing(client: &Arc<Inner>, held: &[Arc<Held>]) -> bool {
    let mut last = true;
    for held in held {
        last &= client.registry.unhold(held);
    }
    last
}

/// How errors and logs name a guard's locks: their names joined by `+`
/// (a single lock's is borrowed: most guards hold one, and each release
/// names it).
fn label(held: &[Arc<Held>]) -> Cow<'_, str> {
    match held {
        [one] => Cow::Borrowed(&one.name),
        several => keys::joined(several.iter().map(|held| held.name.as_str())).into(),
    }
}

/// The keys of a guard's locks (a single lock's borrowed, as in [`label`]).
fn keys_of(held: &[Arc<Held>]) -> Cow<'_, [LockKeys]> {
    match held {
        [one] => Cow::Borrowed(std::slice::from_ref(&one.keys)),
        several => several.iter().map(|held| held.keys.clone()).collect(),
    }
}

/// Gives each lock back one level, or every level when `whole`; a lock
/// that becomes free stays taken for `keep` more (zero: freed at once).
async fn give_back(
    client: &Arc<Inner>,
    held: &[Arc<Held>],
    whole: bool,
    keep: Duration,
) -> Result<Vec<Released>, LockError> {
    let inner = client;
    let keys = keys_of(held);
    let label = label(held);
    let (owner, stored) = (&held[0].owner, &held[0].stored);
    let announce = keys
        .iter()
        .any(|lock| inner.wakeups.has_live_waiters(&lock.lock));
    let giving = Giving {
        all: whole,
        keep,
        announce,
        retire: Duration::ZERO,
    };
    // A lock tasks of this client wait for goes straight to the one whose
    // turn it is (see `handoffs.rs`).
    if let ([lock], Stored::Hash) = (&keys[..], stored) {
        let fair = held[0].tracked.kind() == Kind::Fair;
        let taken = inner.offers.take(&lock.lock, fair);
        if !taken.is_empty() {
            let handing_on = hand_on(
                client.clone(),
                label.into_owned(),
                lock.clone(),
                owner.clone(),
                giving,
                taken,
            );
            return Detached::new(handing_on).await;
        }
    }
    let released = inner
        .backend
        .release(&label, &keys, stored, owner, giving)
        .await?;
    tracing::debug!(?released, "released");
    Ok(released)
}

/// Gives a lock back and, if it becomes free, hands it to the one of the
/// waiters `taken` of this client whose turn it is, and tells it (see
/// `handoffs.rs`). A lock that may have been handed to a waiter that
/// stopped waiting meanwhile is given back for it. It runs in the caller's
/// task; the caller runs it as a [`Detached`] future, so that if it is
/// dropped midway, what is left runs in a task of its own (on the current
/// runtime; outside one, the waiters are answered as after a failed call,
/// and a lock handed to one that is gone lapses after its lease). A
/// release kept but no longer polled holds its waiters up, as any future
/// that is not polled.
async fn hand_on(
    client: Arc<Inner>,
    label: String,
    lock: LockKeys,
    owner: Arc<str>,
    giving: Giving,
    taken: Vec<Offer>,
) -> Result<Vec<Released>, LockError> {
    let (label, lock, owner) = (label.as_str(), &lock, &*owner);
    let inner = client;
    let sent = Instant::now();
    let offers: Vec<Next<'_>> = taken
        .iter()
        .map(|offer| Next {
            owner: &offer.owner,
            lease: offer.lease,
            fair: offer.fair,
            joining: offer.joining,
        })
        .collect();
    let mut outcome = inner
        .backend
        .handoff(label, lock, owner, giving, &offers)
        .await;
    // Every level at once is safe to send again after a failure that
    // leaves open whether the handoff ran: if it did, the second call
    // finds the lock with the waiter it went to and says so again (see
    // `handoff.lua`), so that neither the waiter nor this release is left
    // guessing.
    let resent = outcome.is_err() && giving.all;
    if let Err(err) = &outcome
        && resent
    {
        tracing::debug!(key = %label, error = %Chain(&err), "handoff failed; sending it again");
        outcome = inner
            .backend
            .handoff(label, lock, owner, giving, &offers)
            .await;
    }
    drop(offers);
    let answer = |i: usize| match &outcome {
        Ok(HandedOn {
            to: Some((to, fence)),
            ..
        }) if *to == i => Answer::Handed {
            fence: *fence,
            sent,
        },
        Ok(HandedOn { to: Some(_), .. }) => Answer::Passed,
        Ok(HandedOn { to: None, .. }) => Answer::Declined,
        Err(_) => Answer::Unknown,
    };
    // A waiter that stopped waiting meanwhile cannot give back what it may
    // have been handed (a failed call may still have run): that is done
    // here, in the background, retiring its owner id (which nobody uses
    // any more), so that a handoff that runs late cannot hand the lock to
    // it either (see `handoff.lua`).
    let gone = inner.offers.settle(&lock.lock, taken, answer);
    if !gone.is_empty() {
        tracing::debug!(key = %label, "the waiter a lock may have been handed to is gone; giving it back");
        let locks = vec![lock.clone()];
        let sides = vec![(Stored::Hash, None)];
        inner.retire_later(label.to_owned(), locks, sides, gone, resend_after(&inner));
    }
    // Sent again and found neither held by this releaser nor handed on by
    // it: the first call may have let it go to nobody, or the lock was lost
    // (a failover without it): reported as not held, the safe reading.
    let handed = outcome?;
    tracing::debug!(released = ?handed.released, handed = handed.to.is_some(), "released");
    Ok(vec![handed.released])
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        self.end_section();
        if self.done {
            return;
        }
        let last = stop_renewing(&self.client, &self.held);
        let lost_before = self.is_lost().then(|| self.lost_error());
        let telemetry = std::mem::take(&mut self.telemetry);
        // Never block in drop: release on the runtime if there is one,
        // otherwise the lease runs out by itself.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::debug!(key = %self.name(), "guard dropped outside a runtime; lock expires after its lease");
            match lost_before {
                Some(lost) => finish(telemetry, &Err(lost), &self.held),
                None => telemetry.unreleased(renewals(&self.held)),
            }
            return;
        };
        let client = self.client.clone();
        let held = std::mem::take(&mut self.held);
        let keep_until = self.keep_until;
        let closing = client.closed.load(Ordering::Acquire);
        let releasing = async move {
            // A loss was logged when it was found; only a failed release is news.
            let ending = Ending {
                lost_before,
                last,
                keep_until,
            };
            match end(&client, &held, ending, telemetry).await {
                Err(err) if !err.is_lost() => {
                    tracing::warn!(key = %held[0].name, error = %Chain(&err), "release on drop failed");
                    if closing {
                        client.closing_releases.record(err);
                    }
                }
                _ => {}
            }
        };
        // Dropped as the client shuts down: `shutdown` waits for the
        // release, and reports its failure.
        if closing {
            self.client.closing_releases.spawn(releasing, &runtime);
        } else {
            runtime.spawn(releasing);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LockClient;

    /// What an upgrade's release left held is not given back for it while
    /// the write side is held again under the same owner id (a second
    /// upgrade, made after the first was released and before the read hold
    /// ended), even once the read hold is gone: that would free the second
    /// upgrade's lock. It did, when the read hold's end came between the
    /// first upgrade's release and its answer.
    #[tokio::test]
    async fn a_side_held_again_is_not_given_back_for_an_earlier_hold() {
        let locks = LockClient::in_memory().await.expect("client");
        let read = locks.read_lock("rw").acquire().await.expect("read");
        let upgrade = || locks.write_lock("rw").wait(Duration::ZERO).acquire();
        let (first, again) = read
            .scope(async {
                let first = upgrade().await.expect("upgrade");
                let held = first.held.clone();
                first.release().await.expect("release");
                (held, upgrade().await.expect("upgrade again"))
            })
            .await
            .expect("not lost");
        // The read hold ends before the first upgrade's answer is marked.
        for held in &read.held {
            locks.inner.registry.unhold(held);
        }
        mark_unsettled(&locks.inner, &first, None);
        let settled = async {
            while locks.inner.closing_releases.under_way() > 0 {
                tokio::task::yield_now().await;
            }
        };
        let waited = tokio::time::timeout(Duration::from_secs(10), settled);
        waited.await.expect("the give-backs under way ended");
        again.release().await.expect("still held");
        read.release().await.expect("release");
    }
}
