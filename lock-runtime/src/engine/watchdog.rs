//! The renewal registry: one background task per client keeps every held
//! lock alive, many locks per round trip, and tells holders when a lock is lost.
//!
//! Each held lock has a *validity deadline*: the time its last confirmed
//! renewal (or its acquisition) was **sent**, plus the lease, minus a drift
//! margin. Redis started counting the lease no earlier than that send, so up
//! to the deadline nobody else can hold the lock. When the deadline passes
//! without a confirmed renewal (Redis paused, unreachable, or slow), the lock
//! is declared lost right then, before Redis could hand it to someone else.

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use hashbrown::hash_table::{Entry, HashTable};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::base::config::Replicas;
use crate::base::error::{Chain, LockError, LossReason};
use crate::base::keys::LockKeys;
use crate::base::telemetry::{self, Tracked};
use crate::engine::backend::{Backend, Renewal};
use crate::store::scripts::{Renewing, Stored};

/// How much before its validity deadline a lock is declared lost: timers
/// fire a little late, and the drift margin is what makes the deadline safe,
/// so the watchdog aims early rather than on the dot. An acquisition whose
/// grant arrives this close to its deadline is given back, not handed out.
pub(crate) const DECLARE_EARLY: Duration = Duration::from_millis(3);

/// Locks renewed in one script call at most.
const BATCH: usize = 250;

/// The longest the watchdog sleeps after a pass, when locks were taken
/// since the one before. A lock is usually released before the watchdog's
/// pass for it runs; without this timer, a watchdog left with nothing to do
/// (or with locks of a longer lease, due later) would be woken by each new
/// lock that falls due before its next wake (a task switch, often a thread
/// woken, for each lock a busy client takes). On this timer, only a lock
/// due within it wakes it; once a whole pause passes without a new lock,
/// it sleeps until its held locks fall due, or until told.
const IDLE_WAKE: Duration = Duration::from_secs(1);

/// One lock held by one owner, shared by the owner's nested guards.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) name: String,
    pub(crate) keys: LockKeys,
    pub(crate) stored: Stored,
    pub(crate) owner: Arc<str>,
    pub(crate) fence: u64,
    /// Replicas that must confirm each renewal (from the first acquisition).
    replicas: Option<Replicas>,
    state: Mutex<Timing>,
    /// Cancelled when the lock is lost (made on first use, see
    /// `lost_token`).
    lost: OnceLock<CancellationToken>,
    reason: OnceLock<LossReason>,
    /// Tokens of multi-lock guards that include this lock: losing any of
    /// their locks loses them all.
    groups: Mutex<Vec<CancellationToken>>,
    pub(crate) tracked: Tracked,
    /// An upgrade or a downgrade under this hold's owner id (asking for
    /// the other side of the read-write lock) went unanswered: it may have
    /// taken the other side in Redis with no guard for it, or its release
    /// left it held (see `guard.rs`, `mark_unsettled`). The last guard of
    /// this hold gives the other side back too: kept taken until the time
    /// held here (`lock_at_least`), if there is one.
    other_side_unsettled: Mutex<Option<Option<Instant>>>,
    /// A guard of it gave back every level at once (see `guard.rs`,
    /// `end`): a release of another guard of it that reaches Redis after
    /// that finds the lock gone, and its level went with it.
    given_back_whole: AtomicBool,
}

#[derive(Debug)]
struct Timing {
    lease: Duration,
    drift: Duration,
    /// Until when the lock is surely ours.
    valid_until: Instant,
    /// When the next renewal is due.
    renew_at: Instant,
    /// A renewal call for this lock has not answered yet.
    in_flight: bool,
    /// Guards alive for this lock (re-entry shares the entry).
    guards: usize,
    /// Renewed by the watchdog; otherwise the lease is a hard bound, and
    /// the lock is renewed only when a guard extends it or the client
    /// checks its locks after a lost connection.
    renewed: bool,
    /// Never renewed past this (`LockRequest::max_hold`): the body is
    /// stopped then, as on any loss.
    cap: Option<Instant>,
}

impl Timing {
    /// Records an acquisition or renewal sent at `sent` and confirmed, which
    /// made Redis keep the lock at least `lease` from then. The deadline
    /// comes from that lease, not from `self.lease`, which a nested
    /// acquisition may have lengthened while a renewal with the shorter
    /// one was in flight.
    fn confirm(&mut self, sent: Instant, lease: Duration) {
        let confirmed = self.valid_until.max(sent + lease - self.drift);
        // Never past the cap: a renewal sent before a nested cap came (see
        // `Registry::hold`) asked for a whole lease.
        self.valid_until = self.cap.map_or(confirmed, |cap| confirmed.min(cap));
        self.renew_at = self.next_renewal(sent);
    }

    /// When a renewal sent at `sent` is followed by the next: a third of
    /// the lease later, or never for a lock that is not renewed.
    fn next_renewal(&self, sent: Instant) -> Instant {
        let capped = self.cap.is_some_and(|cap| sent + self.lease >= cap);
        if self.renewed && !capped {
            sent + self.lease / 3
        } else {
            sent + NEVER
        }
    }

    /// Whether the hold has reached its cap: it is valid up to the cap
    /// (less the drift), and never renewed past it.
    fn at_cap(&self) -> bool {
        self.cap
            .is_some_and(|cap| self.valid_until + self.drift >= cap)
    }

    /// The lease a renewal sent at `sent` asks for: the lease, up to the
    /// cap; or for a lock that is not renewed (or at its cap), the shortest
    /// there is: a check that it is still held, which never lengthens it,
    /// since renewals never shorten what Redis keeps.
    fn lease_at(&self, sent: Instant) -> Duration {
        let left = self
            .cap
            .map_or(self.lease, |cap| cap.saturating_duration_since(sent));
        if self.renewed && !left.is_zero() {
            self.lease.min(left)
        } else {
            FIXED_CHECK
        }
    }
}

/// What a renewal of a fixed lease asks for: only that the lock is still
/// held (PEXPIRE is never sent for less than 1 ms, and a renewal never
/// shortens a lease).
const FIXED_CHECK: Duration = Duration::from_millis(1);

/// Far enough ahead to stand for "never" in a `renew_at`.
const NEVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

impl Held {
    /// Whether this is the item `key` held by `owner`.
    fn is(&self, key: &str, owner: &str) -> bool {
        renewed_key(&self.keys, &self.stored) == key && &*self.owner == owner
    }

    /// A token cancelled when the lock is lost. Made on first use: most
    /// holders never wait for a loss, and a token is a sizeable allocation
    /// for a client holding many locks.
    pub(crate) fn lost_token(&self) -> &CancellationToken {
        // Under the groups' lock, as in `declare_lost`: whichever comes
        // second sees what the other did.
        let _groups = self.groups();
        let token = self.lost.get_or_init(CancellationToken::new);
        if self.is_lost() {
            token.cancel();
        }
        token
    }

    /// Why the lock was lost, once it was.
    pub(crate) fn loss(&self) -> Option<LossReason> {
        self.reason.get().copied()
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.reason.get().is_some()
    }

    /// Whether the other side may be held in Redis with no guard for it
    /// (see [`Registry::other_side_unsettled`]), and if so, until when it
    /// stays taken at least (`None`: no such time).
    pub(crate) fn other_side_unsettled(&self) -> Option<Option<Instant>> {
        *self
            .other_side_unsettled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Records that a guard of it gives back every level at once: set
    /// before that release is sent.
    pub(crate) fn give_back_whole(&self) {
        self.given_back_whole.store(true, Ordering::Release);
    }

    /// Whether a guard of it gave back every level at once (see
    /// [`give_back_whole`](Self::give_back_whole)).
    pub(crate) fn given_back_whole(&self) -> bool {
        self.given_back_whole.load(Ordering::Acquire)
    }

    /// Whether every guard of it has let it go (released or dropped): the
    /// release is sent after this turns true, so a renewal that then finds
    /// the lock gone crossed that release, and it is no loss.
    fn is_released(&self) -> bool {
        self.timing().guards == 0
    }

    /// Whether the hold reached its `max_hold` cap.
    pub(crate) fn at_cap(&self) -> bool {
        self.timing().at_cap()
    }

    pub(crate) fn is_renewed(&self) -> bool {
        self.timing().renewed
    }

    /// Until when the lock is surely held, as far as this process knows.
    pub(crate) fn valid_until(&self) -> Instant {
        self.timing().valid_until
    }

    fn timing(&self) -> std::sync::MutexGuard<'_, Timing> {
        // A panic while holding this lock cannot leave `Timing` inconsistent
        // (every update is a plain field store), so poisoning is ignored.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn declare_lost(&self, reason: LossReason) {
        if self.reason.set(reason).is_ok() {
            tracing::warn!(parent: self.tracked.span(), key = %self.name, fence = self.fence, %reason, "lock lost");
            self.tracked.lost(reason);
            let groups = self.groups();
            if let Some(token) = self.lost.get() {
                token.cancel();
            }
            for group in groups.iter() {
                group.cancel();
            }
        }
    }

    fn groups(&self) -> std::sync::MutexGuard<'_, Vec<CancellationToken>> {
        // Only ever pushed to; nothing to leave half-done.
        self.groups.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Cancels `group` when this lock is lost (at once if it already is).
    pub(crate) fn join_group(&self, group: &CancellationToken) {
        self.groups().push(group.clone());
        if self.is_lost() {
            group.cancel();
        }
    }
}

/// The key whose expiry renewal extends; with the owner, it tells held
/// items apart (a writer that also reads holds two).
fn renewed_key<'a>(keys: &'a LockKeys, stored: &'a Stored) -> &'a str {
    match stored {
        Stored::Hash => &keys.lock,
        Stored::Place(place) => &place.set,
    }
}

/// Held items by (renewed key, owner id), and when the watchdog wakes next.
#[derive(Default)]
struct Entries {
    /// The held items themselves, found by their (renewed key, owner id):
    /// a table of pointers, rather than a map that would keep a copy of
    /// both strings beside each (a client may hold a great many locks).
    map: HashTable<Arc<Held>>,
    hasher: RandomState,
    /// The watchdog's next wake-up (`None`: asleep until told). A new lock
    /// wakes it only if it falls due earlier, so that taking many locks does
    /// not cost a sweep over all of them each.
    next_wake: Option<Instant>,
    /// A lock was taken since the watchdog's last pass (see [`IDLE_WAKE`]).
    taken_since_sweep: bool,
}

/// Every lock this client holds.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    held: Mutex<Entries>,
    changed: Notify,
    /// How late (µs) the watchdog's last timed pass ran after it was due.
    late_us: AtomicU64,
}

/// What a newly confirmed acquisition brings to the registry.
pub(crate) struct Acquisition<'a> {
    pub(crate) name: &'a str,
    pub(crate) keys: &'a LockKeys,
    pub(crate) stored: &'a Stored,
    pub(crate) owner: &'a Arc<str>,
    pub(crate) fence: u64,
    pub(crate) lease: Duration,
    pub(crate) drift: Duration,
    /// When the acquire script was sent.
    pub(crate) sent: Instant,
    pub(crate) replicas: Option<Replicas>,
    /// Renewed by the watchdog (not a fixed lease).
    pub(crate) renewed: bool,
    /// Never renewed past this (`LockRequest::max_hold`).
    pub(crate) cap: Option<Instant>,
    pub(crate) tracked: Tracked,
}

impl std::fmt::Debug for Entries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entries")
            .field("held", &self.map.len())
            .field("next_wake", &self.next_wake)
            .field("taken_since_sweep", &self.taken_since_sweep)
            .finish()
    }
}

impl Entries {
    fn hash(&self, key: &str, owner: &str) -> u64 {
        self.hasher.hash_one((key, owner))
    }

    /// The item `key` held by `owner`.
    fn get(&self, key: &str, owner: &str) -> Option<&Arc<Held>> {
        self.map
            .find(self.hash(key, owner), |held| held.is(key, owner))
    }

    /// Puts `held` in, in place of the item of the same key and owner,
    /// which it returns.
    fn insert(&mut self, held: Arc<Held>) -> Option<Arc<Held>> {
        let (key, owner) = (renewed_key(&held.keys, &held.stored), &*held.owner);
        let hash = self.hash(key, owner);
        let hasher = &self.hasher;
        match self.map.entry(
            hash,
            |other| other.is(key, owner),
            |other| hasher.hash_one((renewed_key(&other.keys, &other.stored), &*other.owner)),
        ) {
            Entry::Occupied(mut entry) => Some(std::mem::replace(entry.get_mut(), held)),
            Entry::Vacant(entry) => {
                entry.insert(held);
                None
            }
        }
    }

    /// Takes `held` out, if it is the one in the table for its key and owner.
    fn remove(&mut self, held: &Arc<Held>) -> bool {
        let (key, owner) = (renewed_key(&held.keys, &held.stored), &*held.owner);
        let hash = self.hash(key, owner);
        match self.map.find_entry(hash, |other| Arc::ptr_eq(other, held)) {
            Ok(entry) => {
                entry.remove();
                true
            }
            Err(_) => false,
        }
    }
}

impl Registry {
    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        // The map is only ever inserted into and removed from; a panic
        // elsewhere while it was locked leaves it usable.
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts renewing a lock, or adds a guard to one this owner holds already.
    pub(crate) fn hold(&self, acquired: Acquisition<'_>) -> Arc<Held> {
        let key = renewed_key(acquired.keys, acquired.stored);
        let mut entries = self.entries();
        if let Some(held) = entries
            .get(key, acquired.owner)
            .filter(|held| !held.is_lost())
            .cloned()
        {
            let mut timing = held.timing();
            timing.guards += 1;
            // A re-entry with the other kind of lease is refused before it
            // is sent (see `renewed`): the first guard's kind stays. A
            // fixed lease is a bound on the whole hold (`lock_at_most`): a
            // nested fixed-lease call keeps the outer bound, never moves
            // it (its acquire asked to keep the lease as it is: the `k` of
            // `Asking::ReentryKeepingLease` in `calls.rs`).
            if acquired.renewed {
                timing.lease = timing.lease.max(acquired.lease);
                timing.drift = timing.drift.max(acquired.drift);
                timing.confirm(acquired.sent, acquired.lease);
            }
            // A nested cap bounds the whole hold too: the earlier wins.
            // Renewals made before it may have taken the hold past it, so
            // it is valid no longer than the cap (Redis keeps the lock
            // longer: no drift margin is due), and the sweep is told of the
            // new deadline.
            if let Some(cap) = acquired.cap {
                let cap = timing.cap.map_or(cap, |held| held.min(cap));
                timing.cap = Some(cap);
                if cap < timing.valid_until {
                    timing.valid_until = cap;
                    let lost_at = cap.checked_sub(DECLARE_EARLY).unwrap_or(cap);
                    if entries.next_wake.is_none_or(|wake| lost_at < wake) {
                        entries.next_wake = Some(lost_at);
                        self.changed.notify_one();
                    }
                }
            }
            drop(timing);
            return held;
        }
        let held = Arc::new(Held {
            name: acquired.name.to_owned(),
            keys: acquired.keys.clone(),
            stored: acquired.stored.clone(),
            owner: acquired.owner.clone(),
            fence: acquired.fence,
            replicas: acquired.replicas,
            state: Mutex::new(Timing {
                lease: acquired.lease,
                drift: acquired.drift,
                valid_until: acquired.sent + acquired.lease - acquired.drift,
                renew_at: acquired.sent + acquired.lease / 3,
                in_flight: false,
                guards: 1,
                renewed: acquired.renewed,
                cap: acquired.cap,
            }),
            lost: OnceLock::new(),
            reason: OnceLock::new(),
            groups: Mutex::new(Vec::new()),
            tracked: acquired.tracked,
            other_side_unsettled: Mutex::new(None),
            given_back_whole: AtomicBool::new(false),
        });
        let due = {
            let mut timing = held.timing();
            timing.renew_at = timing.next_renewal(acquired.sent);
            // As the sweep schedules it: loss is declared a little early.
            timing.renew_at.min(timing.valid_until - DECLARE_EARLY)
        };
        if let Some(replaced) = entries.insert(held.clone()) {
            replaced.tracked.unheld();
        }
        entries.taken_since_sweep = true;
        held.tracked.held();
        if entries.next_wake.is_none_or(|wake| due < wake) {
            entries.next_wake = Some(due);
            self.changed.notify_one();
        }
        held
    }

    /// Whether the lock `keys` stored as `stored`, held by `owner`, is
    /// renewed by the watchdog (`None`: this client does not hold it).
    pub(crate) fn renewed(
        &self,
        keys: &LockKeys,
        stored: &Stored,
        owner: &Arc<str>,
    ) -> Option<bool> {
        let entries = self.entries();
        let held = entries.get(renewed_key(keys, stored), owner)?;
        Some(held.timing().renewed)
    }

    /// An upgrade or a downgrade under `owner` went unanswered, or the
    /// last release of one left it held (see `guard.rs`, `mark_unsettled`):
    /// marks the hold of the other side it was made from (the lock `keys` stored as
    /// `stored`), whose last guard then gives this side back too, kept
    /// taken until `keep_until` if given (the latest such time of every
    /// mark). False when this client no longer holds that side under
    /// `owner`: the hold ended (or began ending) before, and will not give
    /// this side back.
    pub(crate) fn other_side_unsettled(
        &self,
        keys: &LockKeys,
        stored: &Stored,
        owner: &Arc<str>,
        keep_until: Option<Instant>,
    ) -> bool {
        // Under the entries' lock: the hold's last guard takes it out of
        // them (`unhold`) before it reads the mark, so a mark made here is
        // read.
        let entries = self.entries();
        let Some(held) = entries.get(renewed_key(keys, stored), owner) else {
            return false;
        };
        let mut unsettled = held
            .other_side_unsettled
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let before = unsettled.flatten();
        *unsettled = Some(before.max(keep_until));
        true
    }

    /// Drops one guard; the last one stops renewal. True when it was the last.
    pub(crate) fn unhold(&self, held: &Arc<Held>) -> bool {
        let mut entries = self.entries();
        let last = {
            let mut timing = held.timing();
            timing.guards = timing.guards.saturating_sub(1);
            timing.guards == 0
        };
        if last && entries.remove(held) {
            held.tracked.unheld();
        }
        last
    }

    /// Marks a lock lost and stops renewing it.
    pub(crate) fn lose(&self, held: &Arc<Held>, reason: LossReason) {
        if self.entries().remove(held) {
            held.tracked.unheld();
        }
        held.declare_lost(reason);
    }

    /// Marks lost whatever `owner` holds of the lock `keys`, whichever way
    /// it is stored (the lock hash, a semaphore's or the readers' set): a
    /// nested acquisition found it no longer `owner`'s, so the enclosing
    /// hold must stop as on any other loss.
    pub(crate) fn lose_all(&self, keys: &LockKeys, owner: &str, reason: LossReason) {
        let readers = keys.readers();
        let found: Vec<Arc<Held>> = {
            let entries = self.entries();
            [keys.lock.as_str(), readers.as_str()]
                .into_iter()
                .filter_map(|key| entries.get(key, owner).cloned())
                .collect()
        };
        for held in found {
            self.lose(&held, reason);
        }
    }

    /// Renews every held lock now rather than when due: the connection to
    /// Redis dropped, and a restarted server may have lost the locks.
    pub(crate) fn check_now(&self) {
        let now = Instant::now();
        for held in self.entries().map.iter() {
            held.timing().renew_at = now;
        }
        self.changed.notify_one();
    }

    /// Number of locks being renewed.
    pub(crate) fn len(&self) -> usize {
        self.entries().map.len()
    }

    /// Every lock held now.
    pub(crate) fn snapshot(&self) -> Vec<Arc<Held>> {
        self.entries().map.iter().cloned().collect()
    }

    /// Takes every lock out of the watchdog's care and returns them (the
    /// client is shutting down).
    pub(crate) fn drain(&self) -> Vec<Arc<Held>> {
        let mut entries = self.entries();
        let drained: Vec<Arc<Held>> = entries.map.drain().collect();
        for held in &drained {
            held.tracked.unheld();
        }
        entries.next_wake = None;
        drained
    }

    /// How late the watchdog runs at `now`: its last timed pass after it
    /// was due, or, when a pass is overdue now (the runtime is starved or
    /// blocked), how long overdue. Renewals are that much late too.
    pub(crate) fn lag(&self, now: Instant) -> Duration {
        let overdue = self
            .entries()
            .next_wake
            .map_or(Duration::ZERO, |due| now.saturating_duration_since(due));
        Duration::from_micros(self.late_us.load(Ordering::Relaxed)).max(overdue)
    }

    /// One pass of the watchdog at `now`: declares overdue locks lost, takes
    /// the locks due for renewal (and those due soon, so that they join the
    /// same round trip), and says when the next pass is needed.
    fn sweep(&self, now: Instant) -> (Vec<Arc<Held>>, Vec<Arc<Held>>, Option<Instant>) {
        let mut overdue = Vec::new();
        let mut due = Vec::new();
        let mut next: Option<Instant> = None;
        let mut entries = self.entries();
        entries.map.retain(|held| {
            let mut timing = held.timing();
            if now + DECLARE_EARLY >= timing.valid_until {
                held.tracked.unheld();
                overdue.push(held.clone());
                return false;
            }
            // Renew early by up to a sixth of the lease to batch locks whose
            // renewals fall close together.
            if !timing.in_flight && now + timing.lease / 6 >= timing.renew_at {
                timing.in_flight = true;
                due.push(held.clone());
            }
            let lost_at = timing.valid_until - DECLARE_EARLY;
            let wake = if timing.in_flight {
                lost_at
            } else {
                timing.renew_at.min(lost_at)
            };
            next = Some(next.map_or(wake, |n| n.min(wake)));
            true
        });
        // Locks come and go: stay on a timer rather than be woken by the
        // next one (see IDLE_WAKE).
        if std::mem::take(&mut entries.taken_since_sweep) {
            let idle = now + IDLE_WAKE;
            next = Some(next.map_or(idle, |next| next.min(idle)));
        }
        entries.next_wake = next;
        (overdue, due, next)
    }
}

/// Runs the watchdog of one client until `shutdown` is cancelled (the client
/// and every guard of it are gone).
pub(crate) async fn run(registry: Arc<Registry>, backend: Backend, shutdown: CancellationToken) {
    loop {
        let (overdue, due, next) = registry.sweep(Instant::now());
        for held in overdue {
            let reason = if held.at_cap() {
                LossReason::MaxHold
            } else if held.is_renewed() {
                LossReason::Expired
            } else {
                LossReason::LeaseEnded
            };
            held.declare_lost(reason);
        }
        for batch in due.chunks(BATCH) {
            tokio::spawn(renew(registry.clone(), backend.clone(), batch.to_vec()));
        }
        let changed = registry.changed.notified();
        let timed = tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = changed => false,
            _ = sleep_until(next) => true,
        };
        let late = match next {
            Some(due) if timed => Instant::now().saturating_duration_since(due),
            _ => Duration::ZERO,
        };
        let late_us = u64::try_from(late.as_micros()).unwrap_or(u64::MAX);
        registry.late_us.store(late_us, Ordering::Relaxed);
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// How long a renewal call sent at `sent` for locks valid until
/// `deadlines` waits for its answer (the command timeout caps it too): an
/// answer after the latest deadline comes too late to save any of them.
/// Not the earliest: a lock with a short lease would cut the wait short for
/// every other, whose answers, slower than that, would never count, while
/// the sweep declares each lock lost at its own deadline anyway (and an
/// answer is timed from when the call was sent).
fn batch_timeout(sent: Instant, deadlines: impl IntoIterator<Item = Instant>) -> Duration {
    let latest = deadlines.into_iter().fold(sent, Instant::max);
    latest
        .saturating_duration_since(sent)
        .max(Duration::from_millis(1))
}

/// Renews one batch of locks in one script call and records the outcome.
async fn renew(registry: Arc<Registry>, backend: Backend, batch: Vec<Arc<Held>>) {
    let sent = Instant::now();
    let mut deadlines = Vec::with_capacity(batch.len());
    let locks: Vec<Renewing<'_>> = batch
        .iter()
        .map(|held| {
            let timing = held.timing();
            deadlines.push(timing.valid_until);
            Renewing {
                key: held.keys.lock.as_str(),
                stored: &held.stored,
                owner: &held.owner,
                lease: timing.lease_at(sent),
            }
        })
        .collect();
    let leases: Vec<Duration> = locks.iter().map(|item| item.lease).collect();
    let replicas: Vec<Option<Replicas>> = batch.iter().map(|held| held.replicas).collect();
    let timeout = batch_timeout(sent, deadlines);
    let outcome = backend.renew(&locks, timeout, &replicas).await;
    telemetry::renewal(
        sent.elapsed(),
        batch.iter().map(|held| &held.tracked),
        outcome.as_ref().err(),
    );
    let retry = |held: &Held| {
        let mut timing = held.timing();
        timing.in_flight = false;
        timing.renew_at = Instant::now() + retry_delay(timing.lease);
    };
    match outcome {
        Ok(renewed) => {
            tracing::debug!(locks = batch.len(), "renewed");
            for ((held, outcome), lease) in batch.iter().zip(renewed).zip(leases) {
                match outcome {
                    Renewal::Renewed => {
                        held.tracked.renewed();
                        tracing::trace!(parent: held.tracked.span(), key = %held.name, fence = held.fence, "renewed");
                        let mut timing = held.timing();
                        timing.confirm(sent, lease);
                        timing.in_flight = false;
                    }
                    // Released by its own guards while the renewal was on
                    // its way: the release deleted it, nobody took it.
                    Renewal::Gone if held.is_released() => {
                        tracing::trace!(parent: held.tracked.span(), key = %held.name, fence = held.fence, "renewal crossed the release");
                    }
                    Renewal::Gone => registry.lose(held, LossReason::NotHeld),
                    Renewal::Unknown => retry(held),
                }
            }
        }
        Err(err) => {
            tracing::warn!(locks = batch.len(), error = %Chain(&err), "renewal failed; retrying");
            for held in &batch {
                retry(held);
            }
        }
    }
    registry.changed.notify_one();
}

/// Makes each of `held` live at least `lease` from now in Redis (a guard's
/// `extend`), and moves its validity deadline accordingly. `name` names
/// the locks in errors.
pub(crate) async fn extend(
    registry: &Registry,
    backend: &Backend,
    name: &str,
    held: &[Arc<Held>],
    lease: Duration,
) -> Result<(), LockError> {
    let sent = Instant::now();
    // Never past a hold's cap (`max_hold`).
    let lease = held
        .iter()
        .filter_map(|held| held.timing().cap)
        .map(|cap| cap.saturating_duration_since(sent).max(FIXED_CHECK))
        .fold(lease, Duration::min);
    let items: Vec<Renewing<'_>> = held
        .iter()
        .map(|held| Renewing {
            key: held.keys.lock.as_str(),
            stored: &held.stored,
            owner: &held.owner,
            lease,
        })
        .collect();
    let replicas: Vec<Option<Replicas>> = held.iter().map(|held| held.replicas).collect();
    let renewed = backend.renew(&items, lease, &replicas).await?;
    let mut unknown = false;
    for (held, outcome) in held.iter().zip(renewed) {
        match outcome {
            Renewal::Renewed => held.timing().confirm(sent, lease),
            Renewal::Gone => {
                registry.lose(held, LossReason::NotHeld);
                return Err(LockError::Lost {
                    key: held.name.clone(),
                    reason: LossReason::NotHeld,
                });
            }
            Renewal::Unknown => unknown = true,
        }
    }
    registry.changed.notify_one();
    if unknown {
        return Err(LockError::Unavailable {
            key: Some(name.to_owned()),
            source: redis::RedisError::from((
                redis::ErrorKind::Io,
                "the extension could not be confirmed everywhere; the lock keeps its deadline",
            )),
        });
    }
    Ok(())
}

/// How soon a failed renewal is tried again.
fn retry_delay(lease: Duration) -> Duration {
    (lease / 20).min(Duration::from_millis(250))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renewal_waits_as_long_as_it_can_save_a_lock_of_its_batch() {
        let sent = Instant::now();
        let secs = |s| sent + Duration::from_secs(s);
        // A lock with a few seconds left does not cut short the wait for
        // one with a minute left.
        assert_eq!(
            batch_timeout(sent, [secs(2), secs(60), secs(5)]),
            Duration::from_secs(60)
        );
        // Every deadline past: the least wait, not none.
        let past = sent.checked_sub(Duration::from_secs(1)).unwrap_or(sent);
        assert_eq!(batch_timeout(sent, [past]), Duration::from_millis(1));
    }

    fn acquisition<'a>(
        keys: &'a LockKeys,
        owner: &'a Arc<str>,
        lease: Duration,
        sent: Instant,
    ) -> Acquisition<'a> {
        Acquisition {
            name: "k",
            keys,
            stored: &Stored::Hash,
            owner,
            fence: 7,
            lease,
            drift: Duration::from_millis(12),
            sent,
            replicas: None,
            renewed: true,
            cap: None,
            tracked: Tracked::new(
                crate::base::kind::Kind::Exclusive,
                "exclusive",
                &tracing::Span::none(),
            ),
        }
    }

    #[test]
    fn a_capped_hold_asks_for_no_more_than_its_cap_and_ends_there() {
        let registry = Registry::default();
        let keys = LockKeys::new("lock:", "capped");
        let owner: Arc<str> = Arc::from("owner");
        let start = Instant::now();
        let lease = Duration::from_secs(3);
        let cap = start + Duration::from_secs(4);
        let held = registry.hold(Acquisition {
            cap: Some(cap),
            ..acquisition(&keys, &owner, lease, start)
        });
        assert!(!held.at_cap());
        // A renewal 2 s in asks for the 2 s left, not the lease...
        let at = start + Duration::from_secs(2);
        let asked = held.timing().lease_at(at);
        assert_eq!(asked, Duration::from_secs(2));
        let mut timing = held.timing();
        timing.confirm(at, asked);
        // ...and is the last: none is due before the cap.
        assert!(
            timing.renew_at > cap + lease,
            "{:?}",
            timing.renew_at - start
        );
        drop(timing);
        assert!(held.at_cap());
        // Past the cap, a check asks for nothing more.
        assert_eq!(held.timing().lease_at(cap), FIXED_CHECK);
    }

    /// A nested cap ends the hold at the cap itself: not earlier by the
    /// outer lease's drift margin (which may be longer than the cap, and
    /// would end the hold as it is entered), and not later when a renewal
    /// sent before the cap came, for a whole lease, answers after it.
    #[test]
    fn a_nested_cap_ends_the_hold_at_the_cap() {
        let registry = Registry::default();
        let keys = LockKeys::new("lock:", "nested-cap");
        let owner: Arc<str> = Arc::from("owner");
        let start = Instant::now();
        let lease = Duration::from_secs(60);
        let held = registry.hold(Acquisition {
            drift: Duration::from_millis(602),
            ..acquisition(&keys, &owner, lease, start)
        });
        // A renewal goes out 20 s in, for a whole lease...
        let sent = start + Duration::from_secs(20);
        let asked = held.timing().lease_at(sent);
        assert_eq!(asked, lease);
        // ...and a re-entry capped at 500 ms is granted meanwhile.
        let entered = sent + Duration::from_millis(1);
        let cap = entered + Duration::from_millis(500);
        registry.hold(Acquisition {
            cap: Some(cap),
            ..acquisition(&keys, &owner, lease, entered)
        });
        let (overdue, _, _) = registry.sweep(entered + Duration::from_millis(1));
        assert!(overdue.is_empty(), "lost as it was entered");
        assert_eq!(held.timing().valid_until, cap);
        // The renewal's answer does not take the hold past the cap.
        held.timing().confirm(sent, asked);
        assert_eq!(held.timing().valid_until, cap);
        assert!(held.at_cap());
        let (overdue, _, _) = registry.sweep(cap);
        assert_eq!(overdue.len(), 1, "held past its cap");
    }

    #[tokio::test(start_paused = true)]
    async fn renewal_falls_due_at_a_third_of_the_lease() {
        let registry = Registry::default();
        let keys = LockKeys::new("t:", "a");
        let owner: Arc<str> = "o".into();
        let start = Instant::now();
        let lease = Duration::from_secs(3);
        registry.hold(acquisition(&keys, &owner, lease, start));

        let (overdue, due, next) = registry.sweep(start);
        assert!(overdue.is_empty() && due.is_empty());
        assert_eq!(next, Some(start + Duration::from_secs(1)));

        let (_, due, next) = registry.sweep(start + Duration::from_secs(1));
        assert_eq!(due.len(), 1);
        // In flight: the next wake is when loss would be declared, just
        // before the validity deadline.
        assert_eq!(
            next,
            Some(start + lease - Duration::from_millis(12) - DECLARE_EARLY)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_fixed_lease_is_never_renewed_but_checked_after_a_lost_connection() {
        let registry = Registry::default();
        let keys = LockKeys::new("t:", "a");
        let owner: Arc<str> = "o".into();
        let start = Instant::now();
        let lease = Duration::from_secs(3);
        let fixed = Acquisition {
            renewed: false,
            ..acquisition(&keys, &owner, lease, start)
        };
        let held = registry.hold(fixed);
        let deadline = start + lease - Duration::from_millis(12);

        // Nothing falls due: the next wake is when loss would be declared.
        let (overdue, due, next) = registry.sweep(start + Duration::from_secs(2));
        assert!(overdue.is_empty() && due.is_empty());
        assert_eq!(next, Some(deadline - DECLARE_EARLY));

        // After a lost connection it is checked once, asking for no more
        // than it has: its deadline stays.
        registry.check_now();
        let now = start + Duration::from_secs(2);
        let (_, due, _) = registry.sweep(now);
        assert_eq!(due.len(), 1);
        let check = held.timing().lease_at(now);
        assert_eq!(check, FIXED_CHECK);
        let mut timing = held.timing();
        timing.confirm(now, check);
        timing.in_flight = false;
        drop(timing);
        assert_eq!(held.valid_until(), deadline);

        let (overdue, _, _) = registry.sweep(deadline - DECLARE_EARLY);
        assert_eq!(overdue.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn only_a_lock_due_earlier_than_the_next_wake_wakes_the_watchdog() {
        let registry = Registry::default();
        let owner: Arc<str> = "o".into();
        let start = Instant::now();
        let (a, b, c) = (
            LockKeys::new("t:", "a"),
            LockKeys::new("t:", "b"),
            LockKeys::new("t:", "c"),
        );
        registry.hold(acquisition(&a, &owner, Duration::from_secs(3), start));
        registry.sweep(start);
        let next_wake = || registry.entries().next_wake;
        assert_eq!(next_wake(), Some(start + Duration::from_secs(1)));
        // Due later than the scheduled wake: the watchdog sleeps on.
        registry.hold(acquisition(&b, &owner, Duration::from_secs(30), start));
        assert_eq!(next_wake(), Some(start + Duration::from_secs(1)));
        // Due earlier: it is woken, and knows when.
        registry.hold(acquisition(&c, &owner, Duration::from_millis(300), start));
        assert_eq!(next_wake(), Some(start + Duration::from_millis(100)));
    }

    /// Whether the watchdog was told to look again since this was last
    /// asked (a pending notification, taken).
    fn woken(registry: &Registry) -> bool {
        use futures_util::FutureExt;
        registry.changed.notified().now_or_never().is_some()
    }

    #[tokio::test(start_paused = true)]
    async fn locks_that_come_and_go_do_not_wake_the_watchdog_each() {
        let registry = Registry::default();
        let owner: Arc<str> = "o".into();
        let start = Instant::now();
        let lease = Duration::from_secs(30);
        let (a, b) = (LockKeys::new("t:", "a"), LockKeys::new("t:", "b"));

        // The first lock wakes the watchdog, which runs after the lock is
        // gone again: it stays on a timer.
        let held = registry.hold(acquisition(&a, &owner, lease, start));
        assert!(
            woken(&registry),
            "asleep until told: the first lock tells it"
        );
        registry.unhold(&held);
        let (_, _, next) = registry.sweep(start);
        assert_eq!(next, Some(start + IDLE_WAKE));

        // The next lock falls due later than that: no wake.
        let held = registry.hold(acquisition(&b, &owner, lease, start));
        assert!(
            !woken(&registry),
            "a lock due later than the timer does not wake it"
        );
        registry.unhold(&held);

        // A pass with locks taken since the last keeps the timer; a pass
        // without lets it sleep until told.
        let (_, _, next) = registry.sweep(start + IDLE_WAKE);
        assert_eq!(next, Some(start + IDLE_WAKE * 2));
        let (_, _, next) = registry.sweep(start + IDLE_WAKE * 2);
        assert_eq!(next, None);
        registry.hold(acquisition(&a, &owner, lease, start + IDLE_WAKE * 2));
        assert!(woken(&registry), "asleep until told again");
    }

    #[tokio::test(start_paused = true)]
    async fn a_lock_held_long_does_not_make_each_new_lock_wake_the_watchdog() {
        let registry = Registry::default();
        let owner: Arc<str> = "o".into();
        let start = Instant::now();
        let (long, short) = (LockKeys::new("t:", "long"), LockKeys::new("t:", "short"));
        registry.hold(acquisition(&long, &owner, Duration::from_secs(60), start));
        assert!(woken(&registry));
        // Renewal of the long lock falls due in 20 s; locks were taken, so
        // the watchdog looks again within a second.
        let (_, _, next) = registry.sweep(start);
        assert_eq!(next, Some(start + IDLE_WAKE));
        // A lock of a shorter lease falls due in 10 s: after that second.
        let held = registry.hold(acquisition(&short, &owner, Duration::from_secs(30), start));
        assert!(!woken(&registry), "due after the next look: no wake");
        registry.unhold(&held);
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_lock_wakes_the_watchdog_in_time_to_declare_it_lost_early() {
        let registry = Registry::default();
        let owner: Arc<str> = "o".into();
        let start = Instant::now();
        let (a, b) = (LockKeys::new("t:", "a"), LockKeys::new("t:", "b"));
        registry.hold(acquisition(&a, &owner, Duration::from_secs(30), start));
        registry.sweep(start);
        assert!(woken(&registry));
        let next_wake = start + IDLE_WAKE;
        assert_eq!(registry.entries().next_wake, Some(next_wake));
        // A fixed lease valid until 1 ms after that wake: loss is declared
        // DECLARE_EARLY before its deadline, which is before the wake.
        let drift = Duration::from_millis(12);
        let lease = IDLE_WAKE + drift + Duration::from_millis(1);
        let fixed = Acquisition {
            renewed: false,
            ..acquisition(&b, &owner, lease, start)
        };
        registry.hold(fixed);
        assert!(woken(&registry), "due before the next wake");
        assert_eq!(
            registry.entries().next_wake,
            Some(start + lease - drift - DECLARE_EARLY)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn locks_due_soon_join_the_same_batch() {
        let registry = Registry::default();
        let owner: Arc<str> = "o".into();
        let start = Instant::now();
        let lease = Duration::from_secs(6);
        let first = LockKeys::new("t:", "a");
        let second = LockKeys::new("t:", "b");
        let late = LockKeys::new("t:", "c");
        registry.hold(acquisition(&first, &owner, lease, start));
        registry.hold(acquisition(
            &second,
            &owner,
            lease,
            start + Duration::from_millis(900),
        ));
        registry.hold(acquisition(
            &late,
            &owner,
            lease,
            start + Duration::from_secs(2),
        ));

        let (_, due, _) = registry.sweep(start + Duration::from_secs(2));
        let mut names: Vec<_> = due.iter().map(|h| h.keys.lock.clone()).collect();
        names.sort();
        assert_eq!(names, vec![first.lock, second.lock]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lock_without_confirmed_renewal_is_lost_just_before_its_deadline() {
        let registry = Registry::default();
        let keys = LockKeys::new("t:", "a");
        let owner: Arc<str> = "o".into();
        let start = Instant::now();
        let lease = Duration::from_secs(3);
        let held = registry.hold(acquisition(&keys, &owner, lease, start));

        let deadline = start + lease - Duration::from_millis(12);
        let declared = deadline - DECLARE_EARLY;
        let (overdue, _, _) = registry.sweep(declared - Duration::from_millis(1));
        assert!(overdue.is_empty());
        let (overdue, _, next) = registry.sweep(declared);
        assert_eq!(overdue.len(), 1);
        assert_eq!(next, None);
        assert_eq!(registry.len(), 0);
        overdue[0].declare_lost(LossReason::Expired);
        assert!(held.is_lost());
        assert_eq!(held.loss(), Some(LossReason::Expired));
    }

    #[tokio::test(start_paused = true)]
    async fn a_confirmed_renewal_moves_the_deadline_from_its_send_time() {
        let registry = Registry::default();
        let keys = LockKeys::new("t:", "a");
        let owner: Arc<str> = "o".into();
        let start = Instant::now();
        let lease = Duration::from_secs(3);
        let held = registry.hold(acquisition(&keys, &owner, lease, start));
        let sent = start + Duration::from_secs(1);
        held.timing().confirm(sent, lease);
        assert_eq!(held.valid_until(), sent + lease - Duration::from_millis(12));
        assert_eq!(held.timing().renew_at, sent + Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn nested_guards_share_one_entry_until_the_last_is_gone() {
        let registry = Registry::default();
        let keys = LockKeys::new("t:", "a");
        let owner: Arc<str> = "o".into();
        let start = Instant::now();
        let outer = registry.hold(acquisition(&keys, &owner, Duration::from_secs(3), start));
        let inner = registry.hold(acquisition(&keys, &owner, Duration::from_secs(9), start));
        assert!(Arc::ptr_eq(&outer, &inner));
        assert_eq!(registry.len(), 1);
        assert_eq!(outer.timing().lease, Duration::from_secs(9));
        assert!(!registry.unhold(&inner));
        assert_eq!(registry.len(), 1);
        assert!(registry.unhold(&outer));
        assert_eq!(registry.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_entry_is_replaced_by_a_fresh_acquisition() {
        let registry = Registry::default();
        let keys = LockKeys::new("t:", "a");
        let owner: Arc<str> = "o".into();
        let start = Instant::now();
        let old = registry.hold(acquisition(&keys, &owner, Duration::from_secs(3), start));
        registry.lose(&old, LossReason::NotHeld);
        let new = registry.hold(acquisition(&keys, &owner, Duration::from_secs(3), start));
        assert!(!Arc::ptr_eq(&old, &new));
        // The old guard going away does not stop the new lock's renewal.
        registry.unhold(&old);
        assert_eq!(registry.len(), 1);
    }
}
