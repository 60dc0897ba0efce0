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
/// * `kind`: [`LockKind`](crate::LockKind) as a string: `exclusive` (also
///   write locks and `lock_all`), `semaphore`, `read-write` (read locks),
///   `fair`;
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
    /// (`acquired`, `timed_out`, `error`).
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

    /// Every name above.
    pub const ALL: [&str; 9] = [
        LOCK_ACQUIRED_TOTAL,
        LOCK_TIMEOUTS_TOTAL,
        LOCK_LOST_TOTAL,
        LOCK_RELEASED_TOTAL,
        LOCK_ERRORS_TOTAL,
        LOCK_WAIT_SECONDS,
        LOCK_HOLD_SECONDS,
        LOCK_RENEWAL_ROUND_TRIP_SECONDS,
        LOCK_HELD,
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
    metrics::counter!(name, labels).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (name, labels);
}

fn observe(name: &'static str, labels: Labels<'_>, value: Duration) {
    #[cfg(feature = "metrics")]
    metrics::histogram!(name, labels).record(value.as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = (name, labels, value);
}

fn held_by(kind: &'static str, delta: f64) {
    #[cfg(feature = "metrics")]
    metrics::gauge!(LOCK_HELD, &[("kind", kind)]).increment(delta);
    #[cfg(not(feature = "metrics"))]
    let _ = (kind, delta);
}

fn kind_label(kind: Kind) -> &'static str {
    kind.lock_kind().as_str()
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
    pub(crate) fn start(kind: Kind, key: &str, level: Level) -> Acquiring {
        describe_once();
        let kind = kind_label(kind);
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
    pub(crate) fn finish(self, result: Result<&[(&str, u64)], &LockError>) {
        let Acquiring {
            span,
            kind,
            started,
        } = self;
        let waited = started.elapsed();
        span.record("wait_seconds", waited.as_secs_f64());
        let outcome = match result {
            Ok(fences) => {
                if let Some((_, first)) = fences.first() {
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
    pub(crate) fn new(kind: Kind, span: &Span, renewals_before: u64) -> Hold {
        Hold {
            span: span.clone(),
            kind: kind_label(kind),
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
    /// The span of the acquisition that first took the lock, for the
    /// watchdog's events about it.
    span: Span,
    renewals: AtomicU64,
    /// Whether its loss has been counted already.
    lost: AtomicBool,
}

impl Tracked {
    pub(crate) fn new(kind: Kind, span: &Span) -> Tracked {
        Tracked {
            kind,
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
        kind_label(self.kind)
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
