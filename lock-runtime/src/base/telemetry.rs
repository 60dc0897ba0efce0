//! What a running lock tells the outside: one `tracing` span per lock taken,
//! and metrics through the [`metrics`](https://docs.rs/metrics) facade.
//!
//! Every metric name, label and span field is defined here, so that the
//! rest of the runtime only calls short helpers and the names cannot drift
//! apart between the places that record them.
//!
//! # The span
//!
//! Each acquisition opens a span named `lock` (at `INFO`, or the client's
//! `span_level`) that lives as long as the guard; its fields are listed on [`LockGuard::span`], the public face
//! of this part. The acquire, the critical section and the release run
//! inside it; the watchdog's events about a lock name it as their parent.
//!
//! Debug events inside the span (acquired, timed out, released) leave the
//! key to the span. Events at `WARN`, and those the watchdog logs from its
//! own task, name the key and fencing token themselves: a subscriber that
//! keeps only warnings drops the `INFO` span, and the warning must still
//! say which lock it is about.
//!
//! # The metrics
//!
//! See [`metric_names`]. Labels are bounded sets: the lock's kind, an
//! outcome, an error class. Never the key: keys like `order:<id>` would make
//! one time series per order.
//!
//! [`LockGuard::span`]: crate::LockGuard::span

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tracing::field::{Empty, display};
use tracing::{Level, Span};

use tokio_util::sync::CancellationToken;

use crate::base::error::{Chain, LockError, LossReason};
use crate::base::kind::Kind;

/// The names of the metrics `lock-runtime` records through the
/// [`metrics`](https://docs.rs/metrics) facade (with its default `metrics`
/// feature), for dashboards, alerts and tests.
///
/// They follow the Prometheus conventions: the crate's name as a prefix
/// (`lock_runtime_`), so that they cannot collide with an application's
/// own metrics about its locks; base units in the name (`_seconds`),
/// `_total` on counters. Histograms are in seconds. Labels:
///
/// * `kind`: the kind of lock: `exclusive` (also `lock_all`), `fair`,
///   `semaphore`, and the two sides of a read-write lock, `read` and
///   `write` (`write_lock`, or the attribute's `mode = "write"`);
/// * `outcome`: on the histograms, how the wait or hold ended;
/// * `reason` on [`LOCK_LOST_TOTAL`]: `not_held`, `expired`, `not_held_at_release`,
///   `not_held_at_reentry`, `lease_ended`;
/// * `operation` and `error` on [`LOCK_ERRORS_TOTAL`].
///
/// The lock's key is never a label (one series per order id would be
/// unbounded); the `lock` span of `tracing` carries it.
///
/// ```
/// use lock_runtime::metric_names;
///
/// assert_eq!(metric_names::LOCK_WAIT_SECONDS, "lock_runtime_wait_seconds");
/// assert!(metric_names::ALL.contains(&"lock_runtime_locks_held"));
/// ```
pub mod metric_names {
    /// Counter: locks taken (each re-entry counts too). Labels: `kind`.
    pub const LOCK_ACQUIRED_TOTAL: &str = "lock_runtime_acquired_total";
    /// Counter: acquisitions that gave up because the lock stayed taken for
    /// the whole wait. Labels: `kind`, `cause` (`held`: another holder;
    /// `restart_quarantine`: the restart quarantine held it back).
    pub const LOCK_TIMEOUTS_TOTAL: &str = "lock_runtime_timeouts_total";
    /// Counter: held locks found lost, once per lock. Labels: `kind`,
    /// `reason` (`not_held`: a renewal found it deleted or taken over;
    /// `expired`: no renewal was confirmed in time; `not_held_at_release`;
    /// `not_held_at_reentry`: a nested acquisition found it deleted or
    /// taken over; `lease_ended`: a fixed lease ran out).
    pub const LOCK_LOST_TOTAL: &str = "lock_runtime_lost_total";
    /// Counter: guards released, explicitly or on drop, with the lock
    /// still held. Labels: `kind`.
    pub const LOCK_RELEASED_TOTAL: &str = "lock_runtime_released_total";
    /// Counter: errors other than timeouts and losses. Labels: `kind`,
    /// `operation` (`acquire`, `release`, `renew`; a failed renewal round
    /// trip counts once per lock it carried), `error` (`unavailable`,
    /// `command_timeout`, `not_replicated`, `no_quorum`, `wrong_type`,
    /// `read_only`, `auth`, `config`, `redis`, `no_runtime`).
    pub const LOCK_ERRORS_TOTAL: &str = "lock_runtime_errors_total";
    /// Histogram, seconds: time to take a lock. Labels: `kind`, `outcome`
    /// (`acquired`, `timed_out`, `error`; `lost` for a re-entry that found
    /// the lock it entered no longer held, whose loss the enclosing hold
    /// counts in [`LOCK_LOST_TOTAL`]).
    pub const LOCK_WAIT_SECONDS: &str = "lock_runtime_wait_seconds";
    /// Histogram, seconds: time a lock was held, per guard. Labels: `kind`,
    /// `outcome` (`released`, `lost`, `error`).
    pub const LOCK_HOLD_SECONDS: &str = "lock_runtime_hold_seconds";
    /// Histogram, seconds: one per renewal call of the watchdog, which
    /// renews many locks at once. Labels: `outcome` (`ok`, `error`).
    pub const LOCK_RENEWAL_ROUND_TRIP_SECONDS: &str = "lock_runtime_renewal_round_trip_seconds";
    /// Gauge: locks this process holds now (a re-entered lock counts once).
    /// Labels: `kind`.
    pub const LOCK_HELD: &str = "lock_runtime_locks_held";
    /// Gauge: acquisitions of this process waiting for a lock now (taken
    /// at the first try: not counted). Labels: `kind`.
    pub const LOCK_WAITERS: &str = "lock_runtime_waiters";
    /// Gauge: lock clients open in this process (connected and not yet
    /// dropped or shut down). The gauges below count or read these.
    pub const CLIENTS: &str = "lock_runtime_clients";
    /// Gauge: clients whose release messages arrive (their subscriber
    /// connections are up); below [`CLIENTS`], waiters of the others fall
    /// back to short sleeps.
    pub const SUBSCRIBER_CONNECTED: &str = "lock_runtime_subscriber_connected";
    /// Gauge: clients held back by a server's restart quarantine now (the
    /// last acquisition that met it was told it is not over).
    pub const RESTART_QUARANTINED: &str = "lock_runtime_restart_quarantined";
    /// Gauge, seconds: how late the watchdog runs (see
    /// [`Health::watchdog_lag`](crate::Health::watchdog_lag)): the largest
    /// of the process's clients' last readings; renewals are that late.
    pub const WATCHDOG_LAG_SECONDS: &str = "lock_runtime_watchdog_lag_seconds";

    /// Every name above.
    pub const ALL: [&str; 14] = [
        LOCK_ACQUIRED_TOTAL,
        LOCK_TIMEOUTS_TOTAL,
        LOCK_LOST_TOTAL,
        LOCK_RELEASED_TOTAL,
        LOCK_ERRORS_TOTAL,
        LOCK_WAIT_SECONDS,
        LOCK_HOLD_SECONDS,
        LOCK_RENEWAL_ROUND_TRIP_SECONDS,
        LOCK_HELD,
        LOCK_WAITERS,
        CLIENTS,
        SUBSCRIBER_CONNECTED,
        RESTART_QUARANTINED,
        WATCHDOG_LAG_SECONDS,
    ];
}

use metric_names::*;

/// Registers the unit and description of every lock metric with the
/// installed `metrics` recorder, so that exporters print them (`# HELP`
/// lines for Prometheus).
///
/// The first acquisition of the process does this by itself; call it after
/// installing a recorder if the recorder comes later than that, or to have
/// the descriptions before any lock is taken. Calling it again is harmless.
/// Without the `metrics` feature it does nothing.
///
/// ```
/// // After installing the recorder (for example metrics-exporter-prometheus):
/// lock_runtime::describe_metrics();
/// ```
pub fn describe_metrics() {
    #[cfg(feature = "metrics")]
    {
        use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
        describe_counter!(
            LOCK_ACQUIRED_TOTAL,
            Unit::Count,
            "Locks taken, re-entries included"
        );
        describe_counter!(
            LOCK_TIMEOUTS_TOTAL,
            Unit::Count,
            "Lock acquisitions that gave up after waiting their whole wait"
        );
        describe_counter!(
            LOCK_LOST_TOTAL,
            Unit::Count,
            "Held locks found lost (deleted, taken over, or not renewed in time)"
        );
        describe_counter!(
            LOCK_RELEASED_TOTAL,
            Unit::Count,
            "Locks released while held"
        );
        describe_counter!(
            LOCK_ERRORS_TOTAL,
            Unit::Count,
            "Errors taking, releasing or renewing locks, other than timeouts and losses"
        );
        describe_histogram!(
            LOCK_WAIT_SECONDS,
            Unit::Seconds,
            "Time taken to take a lock"
        );
        describe_histogram!(LOCK_HOLD_SECONDS, Unit::Seconds, "Time a lock was held");
        describe_histogram!(
            LOCK_RENEWAL_ROUND_TRIP_SECONDS,
            Unit::Seconds,
            "Round trip of one watchdog renewal call (many locks at once)"
        );
        describe_gauge!(LOCK_HELD, Unit::Count, "Locks held by this process");
        describe_gauge!(
            LOCK_WAITERS,
            Unit::Count,
            "Acquisitions of this process waiting for a lock"
        );
        describe_gauge!(CLIENTS, Unit::Count, "Lock clients open in this process");
        describe_gauge!(
            SUBSCRIBER_CONNECTED,
            Unit::Count,
            "Lock clients whose release messages arrive"
        );
        describe_gauge!(
            RESTART_QUARANTINED,
            Unit::Count,
            "Lock clients held back by a server's restart quarantine"
        );
        describe_gauge!(
            WATCHDOG_LAG_SECONDS,
            Unit::Seconds,
            "How late the lock watchdog runs"
        );
    }
}

/// Describes the metrics the first time a lock is taken.
fn describe_once() {
    static DESCRIBED: std::sync::Once = std::sync::Once::new();
    DESCRIBED.call_once(describe_metrics);
}

type Labels<'a> = &'a [(&'static str, &'static str)];

fn count(name: &'static str, labels: Labels<'_>) {
    #[cfg(feature = "metrics")]
    keys::with_key(name, labels, |recorder, key| {
        recorder.register_counter(key, &keys::METADATA).increment(1);
    });
    #[cfg(not(feature = "metrics"))]
    let _ = (name, labels);
}

fn observe(name: &'static str, labels: Labels<'_>, value: Duration) {
    #[cfg(feature = "metrics")]
    keys::with_key(name, labels, |recorder, key| {
        let histogram = recorder.register_histogram(key, &keys::METADATA);
        histogram.record(value.as_secs_f64());
    });
    #[cfg(not(feature = "metrics"))]
    let _ = (name, labels, value);
}

fn add(name: &'static str, labels: Labels<'_>, delta: f64) {
    #[cfg(feature = "metrics")]
    keys::with_key(name, labels, |recorder, key| {
        recorder
            .register_gauge(key, &keys::METADATA)
            .increment(delta);
    });
    #[cfg(not(feature = "metrics"))]
    let _ = (name, labels, delta);
}

/// The metrics' keys, made once per thread for each name and set of
/// labels. The `metrics` macros make a key at every call (a vector of
/// labels, and its hash), and a lock records about six metrics per
/// acquisition and release. Names and label values are all `&'static str`,
/// so the cache is keyed by their addresses and lengths: cheap to hash,
/// and bounded by the labels this module writes (the same text at two
/// addresses is two entries for one series, which is only a little memory).
#[cfg(feature = "metrics")]
mod keys {
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::hash::{BuildHasherDefault, Hasher};
    use std::rc::Rc;

    use metrics::{Key, Label, Level, Metadata, Recorder};

    use super::Labels;

    /// What the `metrics` macros record with calls from the telemetry
    /// module (whose path is the target, not this module's).
    pub(super) static METADATA: Metadata<'static> =
        Metadata::new(TELEMETRY, Level::INFO, Some(TELEMETRY));

    const TELEMETRY: &str = "lock_runtime::base::telemetry";

    /// The most labels a cached key has (more are not cached).
    const MOST_LABELS: usize = 3;

    /// Where a static string is: its address and length.
    type At = (usize, usize);

    /// Where a name is, and its labels' keys and values.
    type Id = (At, [(At, At); MOST_LABELS]);

    /// Hashes the addresses of [`Id`] (not text anyone else chooses).
    #[derive(Default)]
    struct Addresses(u64);

    impl Hasher for Addresses {
        fn finish(&self) -> u64 {
            self.0
        }

        fn write(&mut self, bytes: &[u8]) {
            for byte in bytes {
                self.write_u64(u64::from(*byte));
            }
        }

        fn write_u64(&mut self, word: u64) {
            self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }

        fn write_usize(&mut self, word: usize) {
            self.write_u64(word as u64);
        }
    }

    thread_local! {
        static KEYS: RefCell<HashMap<Id, Rc<Key>, BuildHasherDefault<Addresses>>> =
            RefCell::default();
    }

    /// Runs `record` with the current recorder and the key of `name` with
    /// `labels`.
    pub(super) fn with_key(
        name: &'static str,
        labels: Labels<'_>,
        record: impl FnOnce(&dyn Recorder, &Key),
    ) {
        let address = |text: &str| (text.as_ptr() as usize, text.len());
        let make = || {
            let labels = labels.iter().map(|(k, v)| Label::from_static_parts(k, v));
            Key::from_parts(name, labels.collect::<Vec<_>>())
        };
        if labels.len() > MOST_LABELS {
            let key = make();
            return metrics::with_recorder(|recorder| record(recorder, &key));
        }
        let mut id: Id = (address(name), [((0, 0), (0, 0)); MOST_LABELS]);
        for (slot, (k, v)) in id.1.iter_mut().zip(labels) {
            *slot = (address(k), address(v));
        }
        // The recorder runs with the cache free (it is the application's
        // code), and without it while the thread's locals are torn down.
        let cached = KEYS.try_with(|keys| {
            let mut keys = keys.borrow_mut();
            keys.entry(id).or_insert_with(|| Rc::new(make())).clone()
        });
        let key = cached.unwrap_or_else(|_| Rc::new(make()));
        metrics::with_recorder(|recorder| record(recorder, &key));
    }
}

fn held_by(kind: &'static str, delta: f64) {
    add(LOCK_HELD, &[("kind", kind)], delta);
}

/// One acquisition waiting for a lock, counted in [`LOCK_WAITERS`] while
/// this lives.
pub(crate) struct Waiter(&'static str);

impl Waiter {
    /// `kind` is the acquisition's label (see [`kind_label`]).
    pub(crate) fn new(kind: &'static str) -> Waiter {
        add(LOCK_WAITERS, &[("kind", kind)], 1.0);
        Waiter(kind)
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        add(LOCK_WAITERS, &[("kind", self.0)], -1.0);
    }
}

/// What a client's health gauges show of it: one client's share of
/// [`CLIENTS`], [`SUBSCRIBER_CONNECTED`] and [`RESTART_QUARANTINED`] (each
/// client adds its own, so that they count the process's clients), and its
/// reading of [`WATCHDOG_LAG_SECONDS`]. Dropped, it takes its share back.
struct ClientGauges {
    /// Its place in [`LAGS`].
    id: u64,
    connected: bool,
    quarantined: bool,
}

/// Each live client's last watchdog lag, in seconds, by [`ClientGauges`]'
/// id: the gauge shows the largest, the one an alert is about.
static LAGS: std::sync::Mutex<Vec<(u64, f64)>> = std::sync::Mutex::new(Vec::new());

/// Records `lag` as client `id`'s (`None`: it is gone) and shows the
/// largest lag of the live clients.
fn show_lag(id: u64, lag: Option<f64>) {
    let mut lags = LAGS.lock().unwrap_or_else(|e| e.into_inner());
    lags.retain(|(client, _)| *client != id);
    if let Some(lag) = lag {
        lags.push((id, lag));
    }
    let largest = lags.iter().map(|(_, lag)| *lag).fold(0.0, f64::max);
    #[cfg(feature = "metrics")]
    metrics::gauge!(WATCHDOG_LAG_SECONDS).set(largest);
    #[cfg(not(feature = "metrics"))]
    let _ = largest;
}

impl ClientGauges {
    fn new() -> ClientGauges {
        describe_once();
        add(CLIENTS, &[], 1.0);
        // Every gauge has a series from the start, at zero until it counts
        // something: a dashboard or an alert then reads 0, not "no data".
        add(SUBSCRIBER_CONNECTED, &[], 0.0);
        add(RESTART_QUARANTINED, &[], 0.0);
        static IDS: AtomicU64 = AtomicU64::new(0);
        ClientGauges {
            id: IDS.fetch_add(1, Ordering::Relaxed),
            connected: false,
            quarantined: false,
        }
    }

    /// Brings the client's share up to date.
    fn report(&mut self, connected: bool, quarantined: bool, lag: Duration) {
        let change =
            |now: bool, before: bool| f64::from(u8::from(now)) - f64::from(u8::from(before));
        if connected != self.connected {
            add(SUBSCRIBER_CONNECTED, &[], change(connected, self.connected));
        }
        if quarantined != self.quarantined {
            add(
                RESTART_QUARANTINED,
                &[],
                change(quarantined, self.quarantined),
            );
        }
        (self.connected, self.quarantined) = (connected, quarantined);
        show_lag(self.id, Some(lag.as_secs_f64()));
    }
}

/// How often a client's health gauges are brought up to date.
const GAUGES_EVERY: Duration = Duration::from_secs(1);

/// A client's health as its gauges show it: subscriber connected, held
/// back by a restart quarantine, watchdog lag.
pub(crate) type ClientHealth = (bool, bool, Duration);

/// Keeps a client's share of the health gauges (see [`ClientGauges`]) up
/// to date with what `read` says, until `stop` is cancelled or `read` says
/// nothing (the client is gone). Without the `metrics` feature it returns
/// at once.
pub(crate) async fn report_health(
    stop: CancellationToken,
    mut read: impl FnMut() -> Option<ClientHealth>,
) {
    if !cfg!(feature = "metrics") {
        return;
    }
    let mut gauges = ClientGauges::new();
    let mut every = tokio::time::interval(GAUGES_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            () = stop.cancelled() => return,
        }
        let Some((connected, quarantined, lag)) = read() else {
            return;
        };
        gauges.report(connected, quarantined, lag);
    }
}

impl Drop for ClientGauges {
    fn drop(&mut self) {
        self.report(false, false, Duration::ZERO);
        show_lag(self.id, None);
        add(CLIENTS, &[], -1.0);
    }
}

/// The `kind` label of a lock of `kind`: the [`LockKind`](crate::LockKind),
/// except that the two sides of a read-write lock are told apart: `read`,
/// and `write` for a request made as the write side (`write_lock`, the
/// attribute's `mode = "write"`), which is otherwise an `exclusive` lock.
pub(crate) fn kind_label(kind: Kind, write: bool) -> &'static str {
    match kind {
        Kind::Read => "read",
        Kind::Exclusive if write => "write",
        kind => kind.lock_kind().as_str(),
    }
}

/// The `error` label: the variant, as a bounded set of names.
fn error_label(err: &LockError) -> &'static str {
    match err {
        LockError::Timeout { .. } => "timeout",
        LockError::Quarantined { .. } => "restart_quarantine",
        LockError::Lost { .. } => "lost",
        LockError::NotInstalled => "not_installed",
        LockError::WrongType { .. } => "wrong_type",
        LockError::Auth { .. } => "auth",
        LockError::ReadOnly { .. } => "read_only",
        LockError::Unavailable { .. } => "unavailable",
        LockError::CommandTimeout { .. } => "command_timeout",
        LockError::NotReplicated { .. } => "not_replicated",
        LockError::NoQuorum { .. } => "no_quorum",
        LockError::ShutDown => "shut_down",
        LockError::Config(_) => "config",
        LockError::Redis { .. } => "redis",
    }
}

fn reason_label(reason: LossReason) -> &'static str {
    match reason {
        LossReason::NotHeld => "not_held",
        LossReason::Expired => "expired",
        LossReason::NotHeldAtRelease => "not_held_at_release",
        LossReason::NotHeldAtReentry => "not_held_at_reentry",
        LossReason::LeaseEnded => "lease_ended",
        LossReason::ShutDown => "shut_down",
        LossReason::MaxHold => "max_hold",
    }
}

/// An acquisition under way: its span and when it started.
pub(crate) struct Acquiring {
    span: Span,
    kind: &'static str,
    started: Instant,
}

impl Acquiring {
    /// Opens the `lock` span of a request for `key`, at `level`.
    /// `kind` is its label (see [`kind_label`]).
    pub(crate) fn start(kind: &'static str, key: &str, level: Level) -> Acquiring {
        describe_once();
        // A span's level is part of its callsite, a constant: one callsite
        // per level.
        macro_rules! lock_span {
            ($level:expr) => {
                tracing::span!(
                    $level,
                    "lock",
                    key,
                    kind,
                    fence = Empty,
                    fences = Empty,
                    depth = Empty,
                    wait_seconds = Empty,
                    hold_seconds = Empty,
                    renewals = Empty,
                    outcome = Empty,
                    error = Empty,
                )
            };
        }
        let span = if level == Level::ERROR {
            lock_span!(Level::ERROR)
        } else if level == Level::WARN {
            lock_span!(Level::WARN)
        } else if level == Level::INFO {
            lock_span!(Level::INFO)
        } else if level == Level::DEBUG {
            lock_span!(Level::DEBUG)
        } else {
            lock_span!(Level::TRACE)
        };
        Acquiring {
            span,
            kind,
            started: Instant::now(),
        }
    }

    pub(crate) fn span(&self) -> &Span {
        &self.span
    }

    /// Records how the acquisition ended: granted, with each lock's key
    /// and fencing token in the order they were named, or failed.
    pub(crate) fn finish<'a>(
        self,
        result: Result<impl ExactSizeIterator<Item = (&'a str, u64)> + Clone, &LockError>,
    ) {
        let Acquiring {
            span,
            kind,
            started,
        } = self;
        let waited = started.elapsed();
        span.record("wait_seconds", waited.as_secs_f64());
        let outcome = match result {
            Ok(fences) => {
                if let Some((_, first)) = fences.clone().next() {
                    span.record("fence", first);
                }
                if fences.len() > 1 {
                    let mut all = String::new();
                    for (key, fence) in fences {
                        let _ = write!(all, "{}{key}={fence}", sep(&all));
                    }
                    span.record("fences", all.as_str());
                }
                tracing::debug!(parent: &span, ?waited, "acquired");
                count(LOCK_ACQUIRED_TOTAL, &[("kind", kind)]);
                "acquired"
            }
            Err(err) if err.is_timeout() => {
                span.record("outcome", "timed_out");
                tracing::debug!(parent: &span, ?waited, error = %Chain(&err), "timed out");
                let cause = match err {
                    LockError::Quarantined { .. } => "restart_quarantine",
                    _ => "held",
                };
                count(LOCK_TIMEOUTS_TOTAL, &[("kind", kind), ("cause", cause)]);
                "timed_out"
            }
            // A re-entry that found the lock no longer held: the hold it
            // entered counts the loss (LOCK_LOST_TOTAL), once.
            Err(err) if err.is_lost() => {
                span.record("outcome", "lost");
                tracing::debug!(parent: &span, error = %Chain(&err), "acquire found the lock lost");
                "lost"
            }
            Err(err) => {
                span.record("outcome", "error");
                span.record("error", display(err));
                tracing::debug!(parent: &span, error = %Chain(&err), "acquire failed");
                let error = error_label(err);
                count(
                    LOCK_ERRORS_TOTAL,
                    &[("kind", kind), ("operation", "acquire"), ("error", error)],
                );
                "error"
            }
        };
        observe(
            LOCK_WAIT_SECONDS,
            &[("kind", kind), ("outcome", outcome)],
            waited,
        );
    }
}

fn sep(so_far: &str) -> &'static str {
    if so_far.is_empty() { "" } else { " " }
}

/// Records the re-entry depth of a fresh grant (1: not a re-entry).
pub(crate) fn depth(span: &Span, depth: u64) {
    span.record("depth", depth);
}

/// One guard's hold of its locks, from acquisition to its end.
#[derive(Debug)]
pub(crate) struct Hold {
    span: Span,
    kind: &'static str,
    since: Option<Instant>,
    /// Renewals of the first lock before this guard took it (re-entry
    /// shares the lock with an outer guard).
    renewals_before: u64,
}

/// What is left in a guard once its hold has been handed on for the end:
/// nothing to record.
impl Default for Hold {
    fn default() -> Hold {
        Hold {
            span: Span::none(),
            kind: "",
            since: None,
            renewals_before: 0,
        }
    }
}

impl Hold {
    /// Starts timing a hold acquired in `span`, of a lock renewed
    /// `renewals_before` times already (by an outer guard that re-entered).
    /// `kind` is its label (see [`kind_label`]).
    pub(crate) fn new(kind: &'static str, span: &Span, renewals_before: u64) -> Hold {
        Hold {
            span: span.clone(),
            kind,
            since: Some(Instant::now()),
            renewals_before,
        }
    }

    /// The lock's span.
    pub(crate) fn span(&self) -> &Span {
        &self.span
    }

    /// Records how the hold ended: released (`Ok`), lost, or an error,
    /// with the lock renewed `renewals` times in all; `lost` is what the
    /// registry keeps of the lock a `Lost` error names.
    pub(crate) fn finish(
        self,
        result: &Result<(), LockError>,
        renewals: u64,
        lost: Option<&Tracked>,
    ) {
        let (outcome, error) = match result {
            Ok(()) => {
                count(LOCK_RELEASED_TOTAL, &[("kind", self.kind)]);
                ("released", None)
            }
            Err(LockError::Lost { reason, .. }) => {
                // Counted here if the watchdog did not declare it first.
                if let Some(tracked) = lost {
                    tracked.lost(*reason);
                }
                ("lost", None)
            }
            Err(err) => {
                self.span.record("error", display(err));
                ("error", Some(error_label(err)))
            }
        };
        self.end(outcome, error, renewals);
    }

    /// Records a guard dropped where no runtime could release it: the lock
    /// stays taken until its lease runs out.
    pub(crate) fn unreleased(self, renewals: u64) {
        self.span.record(
            "error",
            "guard dropped outside a Tokio runtime; the lock expires after its lease",
        );
        self.end("error", Some("no_runtime"), renewals);
    }

    fn end(self, outcome: &'static str, error: Option<&'static str>, renewals: u64) {
        let Some(since) = self.since else {
            return; // never started: nothing was held
        };
        let hold = since.elapsed();
        let renewed = renewals.saturating_sub(self.renewals_before);
        self.span.record("hold_seconds", hold.as_secs_f64());
        self.span.record("renewals", renewed);
        self.span.record("outcome", outcome);
        if let Some(error) = error {
            count(
                LOCK_ERRORS_TOTAL,
                &[
                    ("kind", self.kind),
                    ("operation", "release"),
                    ("error", error),
                ],
            );
        }
        observe(
            LOCK_HOLD_SECONDS,
            &[("kind", self.kind), ("outcome", outcome)],
            hold,
        );
    }
}

/// What the watchdog's registry keeps of one held lock for telemetry.
#[derive(Debug)]
pub(crate) struct Tracked {
    /// The kind of lock: its metrics' label, and what its release does (a
    /// fair lock is handed to the first in line, see `handoffs.rs`).
    kind: Kind,
    /// Its label in metrics (see [`kind_label`]).
    label: &'static str,
    /// The span of the acquisition that first took the lock, for the
    /// watchdog's events about it.
    span: Span,
    renewals: AtomicU64,
    /// Whether its loss has been counted already.
    lost: AtomicBool,
}

impl Tracked {
    pub(crate) fn new(kind: Kind, label: &'static str, span: &Span) -> Tracked {
        Tracked {
            kind,
            label,
            span: span.clone(),
            renewals: AtomicU64::new(0),
            lost: AtomicBool::new(false),
        }
    }

    /// The kind of lock it is.
    pub(crate) fn kind(&self) -> Kind {
        self.kind
    }

    /// The kind's label in metrics.
    fn label(&self) -> &'static str {
        self.label
    }

    /// The span of the acquisition that took the lock.
    pub(crate) fn span(&self) -> &Span {
        &self.span
    }

    /// How many renewals of the lock were confirmed.
    pub(crate) fn renewals(&self) -> u64 {
        self.renewals.load(Ordering::Relaxed)
    }

    /// A renewal of the lock was confirmed.
    pub(crate) fn renewed(&self) {
        self.renewals.fetch_add(1, Ordering::Relaxed);
    }

    /// The lock was found lost; counted once, whoever finds it first.
    pub(crate) fn lost(&self, reason: LossReason) {
        if !self.lost.swap(true, Ordering::Relaxed) {
            count(
                LOCK_LOST_TOTAL,
                &[("kind", self.label()), ("reason", reason_label(reason))],
            );
        }
    }

    /// The registry started renewing the lock: this process holds it.
    pub(crate) fn held(&self) {
        held_by(self.label(), 1.0);
    }

    /// The registry stopped renewing the lock (released or lost).
    pub(crate) fn unheld(&self) {
        held_by(self.label(), -1.0);
    }
}

/// One renewal call of the watchdog for the locks of `batch` answered (or
/// failed) after `round_trip`.
pub(crate) fn renewal<'a>(
    round_trip: Duration,
    batch: impl Iterator<Item = &'a Tracked>,
    error: Option<&LockError>,
) {
    let outcome = if error.is_some() { "error" } else { "ok" };
    observe(
        LOCK_RENEWAL_ROUND_TRIP_SECONDS,
        &[("outcome", outcome)],
        round_trip,
    );
    if let Some(error) = error {
        let error = error_label(error);
        for tracked in batch {
            count(
                LOCK_ERRORS_TOTAL,
                &[
                    ("kind", tracked.label()),
                    ("operation", "renew"),
                    ("error", error),
                ],
            );
        }
    }
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use super::*;

    /// The gauges' values: the recorder's snapshots give each gauge's
    /// change since the last one, added up here (a gauge that is set, the
    /// watchdog's lag, reads as its last value).
    #[derive(Default)]
    struct Gauges(std::collections::BTreeMap<String, f64>);

    impl Gauges {
        fn read(&mut self, recorder: &DebuggingRecorder) -> &Self {
            for (key, _, _, value) in recorder.snapshotter().snapshot().into_vec() {
                if let DebugValue::Gauge(value) = value {
                    let name = key.key().name().to_owned();
                    let total = self.0.entry(name.clone()).or_default();
                    if name == WATCHDOG_LAG_SECONDS {
                        *total = value.into_inner();
                    } else {
                        *total += value.into_inner();
                    }
                }
            }
            self
        }

        fn value(&self, name: &str) -> f64 {
            self.0.get(name).copied().unwrap_or_default()
        }
    }

    #[test]
    fn each_client_adds_its_share_to_the_health_gauges_and_takes_it_back() {
        let recorder = DebuggingRecorder::new();
        metrics::with_local_recorder(&recorder, || {
            let mut first = ClientGauges::new();
            let mut second = ClientGauges::new();
            let mut gauges = Gauges::default();
            // Lags far above any other client's in this process (the
            // gauge shows the largest of all).
            first.report(true, false, Duration::from_secs(20));
            second.report(false, true, Duration::from_secs(70));
            let now = gauges.read(&recorder);
            assert_eq!(now.value(CLIENTS), 2.0);
            assert_eq!(now.value(SUBSCRIBER_CONNECTED), 1.0);
            assert_eq!(now.value(RESTART_QUARANTINED), 1.0);
            assert_eq!(now.value(WATCHDOG_LAG_SECONDS), 70.0, "the larger lag");
            // Reported again unchanged: counted once.
            second.report(false, true, Duration::from_secs(70));
            // The second one's subscriber comes back, its quarantine ends,
            // and its watchdog keeps time again.
            second.report(true, false, Duration::ZERO);
            let now = gauges.read(&recorder);
            assert_eq!(now.value(SUBSCRIBER_CONNECTED), 2.0);
            assert_eq!(now.value(RESTART_QUARANTINED), 0.0);
            assert_eq!(now.value(WATCHDOG_LAG_SECONDS), 20.0, "the other one's");
            drop(first);
            let now = gauges.read(&recorder);
            assert_eq!(now.value(CLIENTS), 1.0);
            assert!(
                now.value(WATCHDOG_LAG_SECONDS) < 20.0,
                "the dropped one's lag is gone"
            );
            assert_eq!(now.value(SUBSCRIBER_CONNECTED), 1.0);
            drop(second);
            let now = gauges.read(&recorder);
            assert_eq!(now.value(CLIENTS), 0.0);
            assert_eq!(now.value(SUBSCRIBER_CONNECTED), 0.0);
        });
    }

    #[test]
    fn cached_keys_keep_each_name_and_set_of_labels_apart() {
        let recorder = DebuggingRecorder::new();
        metrics::with_local_recorder(&recorder, || {
            for _ in 0..3 {
                count(LOCK_ACQUIRED_TOTAL, &[("kind", "exclusive")]);
            }
            count(LOCK_ACQUIRED_TOTAL, &[("kind", "fair")]);
            count(LOCK_RELEASED_TOTAL, &[("kind", "fair")]);
            let many = [("kind", "read"), ("operation", "acquire"), ("error", "io")];
            count(LOCK_ERRORS_TOTAL, &many);
            count(
                LOCK_ERRORS_TOTAL,
                &[many[0], many[1], many[2], ("more", "x")],
            );
            observe(LOCK_WAIT_SECONDS, &many[..1], Duration::from_millis(250));
            let mut seen: Vec<String> = recorder
                .snapshotter()
                .snapshot()
                .into_vec()
                .into_iter()
                .map(|(key, _, _, value)| {
                    let labels: Vec<String> = key
                        .key()
                        .labels()
                        .map(|label| format!("{}={}", label.key(), label.value()))
                        .collect();
                    let value = match value {
                        DebugValue::Counter(n) => n.to_string(),
                        DebugValue::Histogram(values) => format!("{values:?}"),
                        DebugValue::Gauge(value) => value.to_string(),
                    };
                    format!("{} {} {value}", key.key().name(), labels.join(","))
                })
                .collect();
            seen.sort();
            let expected = [
                format!("{LOCK_ACQUIRED_TOTAL} kind=exclusive 3"),
                format!("{LOCK_ACQUIRED_TOTAL} kind=fair 1"),
                format!("{LOCK_ERRORS_TOTAL} kind=read,operation=acquire,error=io 1"),
                format!("{LOCK_ERRORS_TOTAL} kind=read,operation=acquire,error=io,more=x 1"),
                format!("{LOCK_RELEASED_TOTAL} kind=fair 1"),
                format!("{LOCK_WAIT_SECONDS} kind=read [0.25]"),
            ];
            assert_eq!(seen, expected);
        });
    }

    #[test]
    fn waiters_are_counted_while_they_wait_and_the_sides_of_a_read_write_lock_apart() {
        let recorder = DebuggingRecorder::new();
        metrics::with_local_recorder(&recorder, || {
            let mut gauges = Gauges::default();
            let read = Waiter::new(kind_label(Kind::Read, false));
            let write = Waiter::new(kind_label(Kind::Exclusive, true));
            let plain = Waiter::new(kind_label(Kind::Exclusive, false));
            let snapshot = recorder.snapshotter().snapshot().into_vec();
            let mut kinds: Vec<(String, f64)> = snapshot
                .into_iter()
                .filter_map(|(key, _, _, value)| {
                    let label = key.key().labels().next()?.value().to_owned();
                    match value {
                        DebugValue::Gauge(value) => Some((label, value.into_inner())),
                        _ => None,
                    }
                })
                .collect();
            kinds.sort_by(|a, b| a.0.cmp(&b.0));
            let expected = ["exclusive", "read", "write"].map(|kind| (kind.to_owned(), 1.0));
            assert_eq!(kinds, expected);
            drop((read, write, plain));
            // Each takes its count back (the snapshot above took the three).
            assert_eq!(gauges.read(&recorder).value(LOCK_WAITERS), -3.0);
        });
    }
}
