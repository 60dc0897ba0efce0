//! Waiting for a lock, as a state machine: one deadline around a loop of
//! named steps. A wait tries once ([`Wait::try_once`]), judges what the
//! attempt found ([`Wait::judge`]), sleeps until a release, the holder's
//! lease running out or a handoff ([`Wait::sleep`]), and takes what a
//! handoff answered ([`Wait::take_answer`]). What differs by kind of lock
//! comes from `policy.rs`; the optional mechanisms (turn marks, a place in
//! line, handoff offers, giving back a grant it may hold) are fields that
//! are `None` where they do not apply.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::futures::Notified;
use tokio::time::Instant;

use crate::api::guard::LockGuard;
use crate::base::error::{Chain, LockError};
use crate::base::keys::LockKeys;
use crate::base::telemetry;
use crate::engine::handoffs::{Answer, Offered, Offers};
use crate::engine::wakeups::Watch;
use crate::store::scripts::Taken;

use super::traces::{Trace, Unsettled, Waiting};
use super::{JOIN_WITHIN, LockRequest, Outcome, Underway, closed_until, fair_retry, fair_stay};

/// First pause before retrying an acquire that failed to reach Redis; it
/// doubles up to 500 ms.
const RETRY_AFTER_ERROR: Duration = Duration::from_millis(25);

/// How long a waiter sleeps between attempts while release messages cannot
/// reach it (the pub/sub connection is down). Normal waiting does not poll.
const FALLBACK_RETRY: Duration = Duration::from_millis(100);

/// What a wait does after an attempt.
pub(super) enum Step {
    /// The acquisition ends with this.
    Done(Result<LockGuard, LockError>),
    /// It sleeps until then at the latest, and tries again.
    SleepUntil(Instant),
}

/// How a waiter's sleep ended: the answer to its offer, if one came, and
/// whether a release woke it.
pub(super) struct Woke {
    answer: Option<Answer>,
    woken: bool,
}

#[cfg(test)]
impl From<Option<Answer>> for Woke {
    fn from(answer: Option<Answer>) -> Self {
        Woke {
            answer,
            woken: false,
        }
    }
}

/// A waiting acquisition. Fields are dropped in the order they are
/// declared: a grant handed on and not yet looked at, the place in line,
/// the registration for wake-ups, the waiter count of the metrics, the turn
/// marks, and what an unsettled grant may hold last.
pub(super) struct Wait<'a> {
    /// The outcome of a handoff, taken by the next attempt instead of
    /// asking Redis.
    handed: Option<Result<Outcome, LockError>>,
    /// A fair waiter's place in line, left if it stops waiting without
    /// the lock.
    in_line: Option<Waiting<'a>>,
    /// The registration for the releases that wake this waiter.
    pub(super) watch: Watch,
    _waiter: telemetry::Waiter,
    /// Turn marks, taken back if it stops waiting without the locks.
    marked: Option<Waiting<'a>>,
    /// Given back if the acquisition ends without the locks.
    unsettled: Unsettled<'a>,
    owner: Arc<str>,
    /// How a re-entry asks for each lock (empty: afresh).
    asking: String,
    reentry: bool,
    keys: &'a [LockKeys],
    request: &'a LockRequest,
    span: &'a tracing::Span,
    started: Instant,
    deadline: Instant,
    /// How long the first attempt found the lock taken for, if it said.
    first_busy: Option<Duration>,
    /// Until when the restart quarantine keeps the locks closed, when the
    /// last attempt found only it in the way.
    closed: Option<Instant>,
    /// The pause before the next retry after an error.
    backoff: Duration,
    /// The error of the last attempt, reported if the wait ends on it.
    last_error: Option<LockError>,
    /// The next attempt is skipped: it waits for its turn instead (for an
    /// early registrant, only if its watch saw every release since, see
    /// `try_once`).
    wait_in_turn: bool,
    /// It registered for its turn before its first attempt, and is yet to
    /// take its next step.
    registered_early: bool,
    /// When this waiter last tried: one that is told to wait on still
    /// tries at least every `fair_retry` of its lease, which keeps its place in line
    /// (and its marks) from lapsing.
    tried_at: Instant,
    /// Where it offers to be handed the lock while it sleeps, if it may be.
    offers: Option<&'a Offers>,
    /// A fair waiter's place in line among its client's waiters, which
    /// orders its offers (see [`Offers::line_place`]).
    line_place: Option<u64>,
    /// A fair waiter not in line yet, which a release of its client puts
    /// in line (see `joins_with_release`) unless it gets in line by itself
    /// first, after `JOIN_WITHIN`.
    joining: bool,
}

impl<'a> Wait<'a> {
    /// A fair waiter: one that waits in line (and keeps its place to the
    /// end: the place is only ever marked taken; it moves with the owner id
    /// when the waiter must take a new one, see `Waiting::new_owner`).
    fn fair(&self) -> bool {
        self.in_line.is_some()
    }

    /// Starts waiting after the first attempt (or none, when it queues
    /// behind this process's waiters): registers for wake-ups, unless the
    /// waiter did before its first attempt, and waits until they can
    /// arrive (the channels subscribed), the deadline, or the client's
    /// shutdown.
    pub(super) async fn start(
        request: &'a LockRequest,
        underway: Underway<'a>,
        span: &'a tracing::Span,
    ) -> Result<Self, LockError> {
        let inner = &request.client;
        let (keys, owner) = (underway.keys, underway.owner);
        tracing::debug!(wait = ?request.wait, "lock busy; waiting");
        let registered_early = underway.early.is_some();
        let watch = underway.early.unwrap_or_else(|| {
            let channels: Vec<String> = keys.iter().map(LockKeys::channel).collect();
            let wake = request.wake(keys, &owner);
            inner
                .wakeups
                .watch(channels.iter().map(String::as_str), wake)
        });
        // A fair waiter is in line (its first attempt put it there) or about
        // to be (a joiner); it leaves the line if it stops waiting without
        // the lock.
        let in_line = request
            .waits_in_line()
            .then(|| Waiting::new(request, keys, &owner, Trace::PlaceInLine));
        let offers = request
            .takes_handoffs(keys, underway.reentry)
            .then_some(&inner.offers);
        // Drawn now: the first attempt put it in line (its answer came just
        // now), or, for a joiner, which made none, it is about to offer to
        // be put in line by a release.
        let line_place = offers.filter(|_| in_line.is_some()).map(Offers::line_place);
        let mut wait = Wait {
            handed: None,
            in_line,
            watch,
            _waiter: telemetry::Waiter::new(request.metric_kind()),
            marked: underway.marked,
            unsettled: underway.unsettled,
            owner,
            asking: underway.asking,
            reentry: underway.reentry,
            keys,
            request,
            span,
            started: underway.started,
            deadline: underway.deadline,
            first_busy: underway.first_busy,
            closed: underway.closed,
            backoff: RETRY_AFTER_ERROR,
            last_error: None,
            wait_in_turn: underway.behind || registered_early,
            registered_early: registered_early && !underway.behind,
            tried_at: Instant::now(),
            offers,
            line_place,
            // `joins_with_release` asked `takes_handoffs` with the same keys.
            joining: underway.joining,
        };
        tokio::select! {
            _ = wait.watch.subscribed() => {}
            _ = tokio::time::sleep_until(wait.deadline) => {}
            _ = inner.closing.cancelled() => return Err(LockError::ShutDown),
        }
        wait.tried_at = Instant::now();
        Ok(wait)
    }

    /// One try: the lock a handoff granted, or, when it waits for its turn
    /// (queued behind this process's waiters, or registered for its turn
    /// before its first attempt), busy for a while; otherwise an attempt in
    /// Redis.
    pub(super) async fn try_once(&mut self, now: Instant) -> Result<Outcome, LockError> {
        if let Some(handed) = self.handed.take() {
            return handed;
        }
        // One that registered before its first attempt skips the next only
        // if no release can have gone by unseen since it registered (asked
        // once registered for this sleep's wake-up, so that one from now
        // on wakes it).
        let early = std::mem::take(&mut self.registered_early);
        if std::mem::take(&mut self.wait_in_turn) && (!early || self.watch.undisturbed()) {
            // No holder's lease is known yet, so look again after a while
            // in any case; a waiter not in line yet, soon.
            let look_again = if self.joining {
                JOIN_WITHIN
            } else {
                self.request.lease.min(Duration::from_secs(3)) / 3
            };
            return Ok(Outcome::Busy {
                ttl: Some(
                    self.first_busy
                        .map_or(look_again, |ttl| ttl.min(look_again)),
                ),
                quarantined: false,
            });
        }
        self.tried_at = now;
        // A fair attempt puts the waiter in line, whatever else it does.
        self.joining = false;
        self.unsettled
            .attempt((&self.owner, &self.asking), self.deadline, self.span)
            .await
    }

    /// What an attempt made at `now` leaves to do: done (taken, a definite
    /// error, or the deadline passed), or sleep until the holder's lease
    /// would run out, a retry after an error, or a fallback poll.
    pub(super) fn judge(&mut self, attempt: Result<Outcome, LockError>, now: Instant) -> Step {
        // A give-back that got no answer (see `Outcome::Abandon`), which
        // the arm for unanswered calls below also takes.
        let abandoned = matches!(attempt, Ok(Outcome::Abandon(_)));
        let mut wake = match attempt {
            Ok(Outcome::Taken(guard)) => {
                self.unsettled.settle();
                Waiting::taken(&mut self.in_line);
                Waiting::taken(&mut self.marked);
                self.watch.acquired();
                return Step::Done(Ok(guard));
            }
            // Sleep until the holder's lease would run out at the latest.
            Ok(Outcome::Busy { ttl, quarantined }) => {
                self.last_error = None;
                self.closed = closed_until(&self.request.client, quarantined, ttl);
                tracing::trace!(?ttl, live = self.watch.is_live(), "still busy");
                ttl.map_or(self.deadline, |ttl| now + ttl + Duration::from_millis(1))
            }
            // Redis unreachable or slow: keep trying within the wait.
            Ok(Outcome::Abandon(err)) | Err(err) if err.is_unavailable() && !self.reentry => {
                tracing::debug!(error = %Chain(&err), "acquire failed; retrying");
                // A fair waiter keeps its owner id, and so its place in
                // line, after an acquire call that got no answer: a grant
                // that call made is found as its own by the next attempt (a
                // re-entry, given back whole with the guard), and given back
                // if none comes. Not after a give-back that got none (a
                // grant too late, one not confirmed by replicas or a
                // quorum): arriving late, it could free a later grant to the
                // same owner id.
                let kept = !abandoned
                    && self.fair()
                    && matches!(
                        err,
                        LockError::Unavailable { .. } | LockError::CommandTimeout { .. }
                    );
                if !kept {
                    self.unsettled.settle();
                    self.new_owner();
                }
                self.last_error = Some(err);
                self.backoff = (self.backoff * 2).min(Duration::from_millis(500));
                now + self.backoff
            }
            Ok(Outcome::Abandon(err)) | Err(err) => return Step::Done(Err(err)),
        };
        if Instant::now() >= self.deadline {
            return Step::Done(Err(self.ended_at_deadline()));
        }
        if !self.watch.is_live() {
            wake = wake.min(now + FALLBACK_RETRY);
        }
        if self.fair() {
            wake = wake.min(now + fair_retry(self.request.lease));
        }
        Step::SleepUntil(wake.min(self.deadline))
    }

    /// Sleeps until `until`, a release (`released`, registered before the
    /// attempt), or an answer to the offer it makes meanwhile to be handed
    /// the lock; the answer, if one came.
    pub(super) async fn sleep(
        &mut self,
        until: Instant,
        released: Pin<&mut Notified<'_>>,
    ) -> Result<Woke, LockError> {
        let (request, keys) = (self.request, self.keys);
        // What a waiter dropped with an answer it never read may hold.
        let give_back = move |owner: Arc<str>| request.give_back_for(keys, owner);
        let mut offered = self.offers.map(|offers| {
            let joining = self.joining.then(|| fair_stay(request.lease));
            let asked = (request.lease, self.line_place, joining);
            offers.offer(&keys[0].lock, &self.owner, asked, &give_back)
        });
        let closing = &request.client.closing;
        let mut woken = false;
        let answer = tokio::select! {
            _ = released => {
                woken = true;
                None
            }
            _ = tokio::time::sleep_until(until) => None,
            answer = answer_to(&mut offered) => Some(answer),
            // Taken back like any withdrawn offer (see `Offered`).
            _ = closing.cancelled() => return Err(LockError::ShutDown),
        };
        // Not answered yet: withdrawn before trying again, or, when a
        // release took it meanwhile, its answer awaited (trying under the
        // same owner id now would count as a re-entry).
        let answer = match (answer, offered) {
            (Some(answer), _) => Some(answer),
            // Bounded by the wait: a waiter dropped with its answer unread
            // gives back what it may hold (see `Offered`).
            (None, Some(offered)) => tokio::select! {
                answer = offered.withdraw() => answer,
                _ = tokio::time::sleep_until(self.deadline) => {
                    return Err(self.ended_at_deadline());
                }
            },
            (None, None) => None,
        };
        Ok(Woke { answer, woken })
    }

    /// Takes what a handoff answered: a grant for the next try, a new
    /// owner id, or a turn to wait.
    pub(super) async fn take_answer(&mut self, Woke { answer, woken }: Woke) {
        match answer {
            Some(Answer::Handed { fence, sent }) => {
                let taken = [Taken { fence, count: 1 }];
                let granted =
                    self.request
                        .grant(self.keys, &self.owner, &taken, (sent, None), self.span);
                self.handed = Some(granted.await);
            }
            // The handoff failed or was dropped, so the lock may or may not
            // be this owner id's. A fair waiter tries again under it,
            // keeping its place in line: a lock handed to it counts as a
            // re-entry, given back whole with the guard. A plain waiter
            // gives back what it may hold and goes on under a new owner id.
            Some(Answer::Unknown) if self.fair() => {}
            Some(Answer::Unknown) => self.new_owner(),
            // Handed to another waiter of this client, so still taken: wait
            // on, unless it is time to try (which keeps a fair waiter's
            // place in line) or a release woke it meanwhile (a named wake-up
            // is its turn; it is not sent twice).
            Some(Answer::Passed) => {
                self.wait_in_turn =
                    !woken && self.tried_at.elapsed() < fair_retry(self.request.lease);
            }
            // Put in line by the handoff, which did not hand it the lock:
            // in line as after an attempt. It waits for its turn while the
            // lock went to another waiter of this client, unless a release
            // named it meanwhile; otherwise it tries at once, as below.
            Some(Answer::InLine { taken }) => {
                self.joining = false;
                self.tried_at = Instant::now();
                self.wait_in_turn = taken && !woken;
            }
            // Not handed on (still held, or others' turn): try at once.
            Some(Answer::Declined) | None => {}
        }
    }

    /// Goes on under a new owner id, giving back what the old one may hold
    /// (see [`LockRequest::abandon`]); the marks and the place in line it
    /// left follow.
    fn new_owner(&mut self) {
        self.owner = self.request.abandon(self.keys, self.owner.clone());
        Waiting::new_owner(&mut self.marked, &self.owner);
        Waiting::new_owner(&mut self.in_line, &self.owner);
        // A fair waiter is woken by releases that name it: by its new id.
        self.watch.rename(&self.owner);
    }

    /// The error for a wait that ended without the locks.
    fn timeout(&self) -> LockError {
        self.request.timeout(self.started, self.closed)
    }

    /// The error for a wait that reached its deadline: what stopped its
    /// last attempt, if that failed (Redis unreachable the whole time
    /// reads as that, not as a lock held by others), else the timeout.
    fn ended_at_deadline(&mut self) -> LockError {
        let failed = self.last_error.take();
        failed.unwrap_or_else(|| self.timeout())
    }
}

/// The answer to a waiter's offer, if it made one; otherwise never.
async fn answer_to(offered: &mut Option<Offered<'_>>) -> Answer {
    match offered {
        Some(offered) => offered.answered().await,
        None => std::future::pending().await,
    }
}

/// The steps, one at a time, on locks in this process (no Redis): what each
/// decides from an outcome it is given.
#[cfg(all(test, feature = "memory"))]
mod tests {
    use super::*;
    use crate::LockClient;
    use std::pin::pin;

    fn timed_out() -> LockError {
        LockError::CommandTimeout {
            key: None,
            after: Duration::from_millis(5),
        }
    }

    fn busy(ttl: Duration) -> Result<Outcome, LockError> {
        Ok(Outcome::Busy {
            ttl: Some(ttl),
            quarantined: false,
        })
    }

    /// Runs `check` on a wait of `request` for the lock `key`, begun as
    /// after a first attempt that found it busy.
    async fn waiting<F>(request: LockRequest, check: F)
    where
        F: AsyncFnOnce(&mut Wait<'_>),
    {
        let inner = &request.client;
        let keys = [LockKeys::new(&inner.config.prefix, &request.names[0])];
        let span = tracing::Span::none();
        let underway = request.begin(&keys, None, String::new());
        let mut wait = Wait::start(&request, underway, &span)
            .await
            .expect("the client is open");
        check(&mut wait).await;
    }

    #[tokio::test]
    async fn a_busy_lock_is_slept_on_until_its_lease_would_run_out() {
        let locks = LockClient::in_memory().await.unwrap();
        let request = locks.lock("wait:busy").wait(Duration::from_secs(60));
        waiting(request, async |wait| {
            let now = Instant::now();
            let step = wait.judge(busy(Duration::from_millis(300)), now);
            let Step::SleepUntil(until) = step else {
                panic!("a busy lock within the wait is slept on");
            };
            assert_eq!(until, now + Duration::from_millis(301));
            // A lease longer than the wait: it sleeps until the deadline.
            let step = wait.judge(busy(Duration::from_secs(600)), now);
            assert!(matches!(step, Step::SleepUntil(until) if until == wait.deadline));
        })
        .await;
    }

    #[tokio::test]
    async fn an_unanswered_attempt_backs_off_under_a_new_owner_id() {
        let locks = LockClient::in_memory().await.unwrap();
        let request = locks.lock("wait:error").wait(Duration::from_secs(60));
        waiting(request, async |wait| {
            let mut pauses = Vec::new();
            for _ in 0..6 {
                let before = wait.owner.clone();
                let now = Instant::now();
                let Step::SleepUntil(until) = wait.judge(Err(timed_out()), now) else {
                    panic!("an unanswered attempt is retried within the wait");
                };
                pauses.push(until - now);
                // A plain waiter does not use an owner id again whose
                // acquire may still run.
                assert_ne!(wait.owner, before);
            }
            let ms = |ms| Duration::from_millis(ms);
            assert_eq!(
                pauses,
                [ms(50), ms(100), ms(200), ms(400), ms(500), ms(500)]
            );
            // Busy again: the error is forgotten, and the pause with it
            // stays where it got to.
            wait.judge(busy(ms(10)), Instant::now());
            assert!(wait.last_error.is_none());
        })
        .await;
    }

    #[tokio::test]
    async fn a_fair_waiter_put_in_line_by_a_handoff_tries_unless_the_lock_was_passed_on() {
        let locks = LockClient::in_memory().await.unwrap();
        let request = locks.fair_lock("wait:lined").wait(Duration::from_secs(60));
        waiting(request, async |wait| {
            let lined = |taken, woken| Woke {
                answer: Some(Answer::InLine { taken }),
                woken,
            };
            wait.joining = true;
            // Handed to another waiter of its client: still taken, it waits.
            wait.take_answer(lined(true, false)).await;
            assert!(!wait.joining, "it is in line");
            assert!(wait.wait_in_turn);
            // Not handed on: the lock may be free, it tries at once.
            wait.wait_in_turn = false;
            wait.take_answer(lined(false, false)).await;
            assert!(!wait.wait_in_turn);
            // Named by a release meanwhile: its turn, whatever the handoff did.
            wait.take_answer(lined(true, true)).await;
            assert!(!wait.wait_in_turn);
        })
        .await;
    }

    #[tokio::test]
    async fn a_fair_waiter_keeps_its_place_after_an_unanswered_attempt() {
        let locks = LockClient::in_memory().await.unwrap();
        let request = locks.fair_lock("wait:fair").wait(Duration::from_secs(60));
        waiting(request, async |wait| {
            let before = wait.owner.clone();
            let now = Instant::now();
            let Step::SleepUntil(until) = wait.judge(Err(timed_out()), now) else {
                panic!("an unanswered attempt is retried within the wait");
            };
            assert_eq!(wait.owner, before, "its place in line is under this id");
            assert_eq!(until, now + RETRY_AFTER_ERROR * 2);
            // Busy for longer, it tries again within fair_retry at the
            // latest (which keeps its place in line); a handoff that failed
            // does not change its owner id either.
            let Step::SleepUntil(until) = wait.judge(busy(Duration::from_secs(30)), now) else {
                panic!("busy within the wait");
            };
            assert_eq!(until, now + fair_retry(wait.request.lease));
            wait.take_answer(Some(Answer::Unknown).into()).await;
            assert_eq!(wait.owner, before);
        })
        .await;
    }

    #[tokio::test]
    async fn a_fair_waiter_whose_late_grant_was_not_given_back_goes_on_under_a_new_owner_id() {
        let locks = LockClient::in_memory().await.unwrap();
        let request = locks
            .fair_lock("wait:abandon")
            .wait(Duration::from_secs(60));
        waiting(request, async |wait| {
            let before = wait.owner.clone();
            // A grant too late to be held, whose give-back got no answer: a
            // give-back arriving late would free a later grant to the same
            // owner id, so that id is not used again.
            let now = Instant::now();
            let step = wait.judge(Ok(Outcome::Abandon(timed_out())), now);
            assert!(
                matches!(step, Step::SleepUntil(_)),
                "retried within the wait"
            );
            assert_ne!(wait.owner, before);
            // Releases that name the new owner id wake it.
            let notifier = wait.watch.notifier();
            let woken = notifier.notify().notified();
            let channel = wait.keys[0].channel();
            wait.request.client.wakeups.deliver(&channel, &wait.owner);
            tokio::time::timeout(Duration::from_secs(5), woken)
                .await
                .expect("a release naming the new owner id wakes the waiter");
        })
        .await;
    }

    #[tokio::test]
    async fn a_plain_waiter_whose_handoff_failed_goes_on_under_a_new_owner_id() {
        let locks = LockClient::in_memory().await.unwrap();
        let request = locks.lock("wait:unknown").wait(Duration::from_secs(60));
        waiting(request, async |wait| {
            let before = wait.owner.clone();
            wait.take_answer(Some(Answer::Unknown).into()).await;
            assert_ne!(wait.owner, before);
            // Passed to another waiter of this client: it waits its turn,
            // and its next try asks nothing of the store.
            wait.take_answer(Some(Answer::Passed).into()).await;
            assert!(wait.wait_in_turn);
            let tried_at = wait.tried_at;
            let lease = wait.request.lease;
            let attempt = wait.try_once(Instant::now()).await;
            let look_again = lease.min(Duration::from_secs(3)) / 3;
            assert!(matches!(
                attempt,
                Ok(Outcome::Busy { ttl: Some(ttl), quarantined: false }) if ttl <= look_again
            ));
            assert_eq!(wait.tried_at, tried_at, "no attempt was made");
            // The lock is free: the next try takes it.
            let now = Instant::now();
            let attempt = wait.try_once(now).await;
            assert_eq!(wait.tried_at, now);
            let Step::Done(Ok(guard)) = wait.judge(attempt, now) else {
                panic!("a free lock is taken");
            };
            guard.release().await.unwrap();
        })
        .await;
    }

    /// A wait whose offer a release of its client took, and never
    /// answered (its handoff call hangs), ends at its deadline with what
    /// stopped its last attempt, as any wait does: not as a timeout, which
    /// would say the lock was held throughout.
    #[tokio::test]
    async fn a_wait_ending_on_an_unanswered_offer_ends_with_what_stopped_it() {
        let locks = LockClient::in_memory().await.unwrap();
        let request = locks.lock("wait:offer").wait(Duration::from_millis(300));
        waiting(request, async |wait| {
            let Step::SleepUntil(until) = wait.judge(Err(timed_out()), Instant::now()) else {
                panic!("an unanswered attempt is retried within the wait");
            };
            let (request, key) = (wait.request, wait.keys[0].lock.clone());
            let notifier = wait.watch.notifier();
            let released = pin!(notifier.notify().notified());
            let taking = async {
                loop {
                    let taken = request.client.offers.take(&key, false);
                    if !taken.is_empty() {
                        return taken;
                    }
                    tokio::task::yield_now().await;
                }
            };
            let (woke, _taken) = tokio::join!(wait.sleep(until, released), taking);
            assert!(
                matches!(woke, Err(LockError::CommandTimeout { .. })),
                "{:?}",
                woke.err()
            );
        })
        .await;
    }

    #[tokio::test]
    async fn a_wait_past_its_deadline_ends_with_what_stopped_it() {
        let locks = LockClient::in_memory().await.unwrap();
        let request = locks.lock("wait:deadline").wait(Duration::from_millis(1));
        waiting(request, async |wait| {
            tokio::time::sleep_until(wait.deadline).await;
            // The last attempt's error, when it failed.
            let step = wait.judge(Err(timed_out()), Instant::now());
            assert!(matches!(
                step,
                Step::Done(Err(LockError::CommandTimeout { .. }))
            ));
            // A timeout when the lock was busy, naming the restart
            // quarantine when only it was in the way.
            let step = wait.judge(busy(Duration::from_secs(1)), Instant::now());
            assert!(matches!(step, Step::Done(Err(LockError::Timeout { .. }))));
            let quarantined = Ok(Outcome::Busy {
                ttl: Some(Duration::from_secs(1)),
                quarantined: true,
            });
            let step = wait.judge(quarantined, Instant::now());
            assert!(matches!(
                step,
                Step::Done(Err(LockError::Quarantined { .. }))
            ));
            // A definite error ends it at once.
            let refused = LockError::Config("refused".into());
            let step = wait.judge(Err(refused), Instant::now());
            assert!(matches!(step, Step::Done(Err(LockError::Config(_)))));
        })
        .await;
    }
}
