//! Metrics and `lock` spans recorded by the runtime, for tests that check
//! them (telemetry.rs).
//!
//! The metrics recorder and the span collector are global to the test
//! binary (the watchdog and releases on drop record from tasks of their
//! own, which a thread-local recorder would not see), so tests that read
//! them take turns: each starts with `let _turn = take_turn().await;` and
//! reads the metrics as deltas, calling [`metrics`] once to start from zero.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// One test at a time: the metrics are process-wide.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Waits until no other test of this binary is recording, installs the
/// metrics recorder and the span collector (the first time), and returns
/// the turn: hold it until the test ends.
pub async fn take_turn() -> tokio::sync::MutexGuard<'static, ()> {
    let turn = TURN.lock().await;
    installed();
    turn
}

/// The recorder's snapshotter and the collected spans, installed once.
fn installed() -> &'static (Snapshotter, Spans) {
    static INSTALLED: OnceLock<(Snapshotter, Spans)> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().expect("the only metrics recorder");
        let spans = Spans::default();
        let subscriber = tracing_subscriber::registry().with(spans.clone());
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        (snapshotter, spans)
    })
}

/// The recorder's snapshotter, for what [`metrics`] leaves out (units and
/// descriptions).
pub fn snapshotter() -> &'static Snapshotter {
    &installed().0
}

/// Metric values since the last call (the debugging recorder hands out
/// counters, gauges and histogram samples as deltas).
pub struct Metrics(Vec<Series>);

/// A metric's name, labels and value.
type Series = (String, Vec<(String, String)>, DebugValue);

/// The metrics recorded since the last call.
pub fn metrics() -> Metrics {
    let snapshot = snapshotter().snapshot().into_vec();
    Metrics(
        snapshot
            .into_iter()
            .map(|(key, _, _, value)| {
                let (_, key) = key.into_parts();
                let labels = key
                    .labels()
                    .map(|l| (l.key().to_owned(), l.value().to_owned()))
                    .collect();
                (key.name().to_owned(), labels, value)
            })
            .collect(),
    )
}

impl Metrics {
    fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&str, &str)],
    ) -> impl Iterator<Item = &'a DebugValue> {
        self.0.iter().filter_map(move |(n, have, value)| {
            let all = labels
                .iter()
                .all(|(k, v)| have.iter().any(|(hk, hv)| hk == k && hv == v));
            (n == name && all).then_some(value)
        })
    }

    /// Sum of the counter over the series carrying `labels`.
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.matching(name, labels)
            .map(|value| match value {
                DebugValue::Counter(n) => *n,
                other => panic!("{name} is not a counter: {other:?}"),
            })
            .sum()
    }

    /// Change of the gauge over the series carrying `labels`.
    pub fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.matching(name, labels)
            .map(|value| match value {
                DebugValue::Gauge(n) => n.into_inner(),
                other => panic!("{name} is not a gauge: {other:?}"),
            })
            .sum()
    }

    /// The histogram's samples over the series carrying `labels`.
    pub fn samples(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        self.matching(name, labels)
            .flat_map(|value| match value {
                DebugValue::Histogram(samples) => samples.iter().map(|s| s.into_inner()),
                other => panic!("{name} is not a histogram: {other:?}"),
            })
            .collect()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(&self.0).finish()
    }
}

/// The fields of one `lock` span as they were last recorded.
type Fields = Arc<Mutex<HashMap<String, String>>>;

/// A layer that keeps the fields of every `lock` span.
#[derive(Clone, Default)]
pub struct Spans {
    /// Open spans by id (ids are reused once a span closes).
    open: Arc<Mutex<HashMap<u64, Fields>>>,
    all: Arc<Mutex<Vec<Fields>>>,
}

struct Visitor<'a>(&'a mut HashMap<String, String>);

impl Visit for Visitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().into(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }
}

impl<S> tracing_subscriber::Layer<S> for Spans
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        if attrs.metadata().name() != "lock" {
            return;
        }
        let mut fields = HashMap::new();
        fields.insert("level".to_owned(), attrs.metadata().level().to_string());
        attrs.record(&mut Visitor(&mut fields));
        let fields = Arc::new(Mutex::new(fields));
        self.open
            .lock()
            .unwrap()
            .insert(id.into_u64(), fields.clone());
        self.all.lock().unwrap().push(fields);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        if let Some(fields) = self.open.lock().unwrap().get(&id.into_u64()) {
            values.record(&mut Visitor(&mut fields.lock().unwrap()));
        }
    }

    fn on_close(&self, id: Id, _: Context<'_, S>) {
        self.open.lock().unwrap().remove(&id.into_u64());
    }
}

impl Spans {
    /// The fields of every `lock` span of the lock `key`, oldest first.
    pub fn of(&self, key: &str) -> Vec<HashMap<String, String>> {
        self.all
            .lock()
            .unwrap()
            .iter()
            .map(|fields| fields.lock().unwrap().clone())
            .filter(|fields| fields.get("key").map(String::as_str) == Some(key))
            .collect()
    }

    /// The fields of the open span `id`.
    pub fn by_id(&self, id: &Id) -> Option<HashMap<String, String>> {
        let open = self.open.lock().unwrap();
        open.get(&id.into_u64())
            .map(|fields| fields.lock().unwrap().clone())
    }
}

/// The `lock` spans collected so far.
pub fn spans() -> &'static Spans {
    &installed().1
}
