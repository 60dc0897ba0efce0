//! Lock spans and metrics through OpenTelemetry: the `lock` span of every
//! lock becomes an OpenTelemetry span (through `tracing-opentelemetry`),
//! a child of the request that took it, and the lock metrics become
//! OpenTelemetry instruments (through `metrics-exporter-otel`, a recorder
//! of the `metrics` facade the library records to). Fails if a span or a
//! metric is missing, so CI runs it.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example opentelemetry
//! ```
//!
//! Without `REDIS_URL`, it starts a private `redis-server`. It exports to
//! memory, to check what arrived; a service sends both to a collector
//! instead: build the providers with `opentelemetry-otlp`'s `SpanExporter`
//! and `MetricExporter` where this uses `InMemorySpanExporter` and
//! `InMemoryMetricExporter`, and the rest stays as it is. Its output
//! (timings and ids vary):
//!
//! ```text
//! span `lock` key=order:1 kind=exclusive fence=1795748140402402 outcome=released, child of `handle_order`
//! span `lock` key=order:2 kind=exclusive fence=1795748140413034 outcome=released, child of `handle_order`
//! span `lock` key=order:3 kind=exclusive fence=1795748140423280 outcome=released, child of `handle_order`
//! span `lock` key=report:daily kind=exclusive fence=1795748140431792 outcome=released
//! span `lock` key=report:daily kind=exclusive fence=1795748140639407 outcome=released
//! metric lock_runtime_acquired_total: sum 5
//! metric lock_runtime_clients: gauge 1
//! metric lock_runtime_hold_seconds: histogram of 5 values
//! metric lock_runtime_locks_held: gauge 0
//! metric lock_runtime_released_total: sum 5
//! metric lock_runtime_restart_quarantined: gauge 0
//! metric lock_runtime_subscriber_connected: gauge 1
//! metric lock_runtime_wait_seconds: histogram of 5 values
//! metric lock_runtime_waiters: gauge 0
//! metric lock_runtime_watchdog_lag_seconds: gauge 0
//! every span and metric arrived
//! ```

use std::process::ExitCode;
use std::time::Duration;

use lock_runtime::{LockClient, LockError, distributed_lock, metric_names};
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing_subscriber::prelude::*;

/// A locked function, called from a request's span: its lock's span is a
/// child of that span.
#[distributed_lock(key = "order:<id>", client = locks, wait = "5s")]
async fn settle(locks: &LockClient, id: u64) -> Result<u64, LockError> {
    tokio::time::sleep(Duration::from_millis(5)).await;
    Ok(id)
}

#[tokio::main]
async fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    // REDIS_URL, or a private server for the demo (stopped when dropped).
    let (url, _private_server) = match std::env::var("REDIS_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let server = lock_testkit::RedisServer::start();
            (server.url(), Some(server))
        }
    };

    // Traces: `tracing` spans, the library's `lock` span among them, go to
    // OpenTelemetry.
    let spans = InMemorySpanExporter::default();
    let tracer_provider = SdkTracerProvider::builder()
        .with_simple_exporter(spans.clone())
        .build();
    let tracer = tracer_provider.tracer("orders");
    tracing_subscriber::registry()
        .with(tracing_subscriber::EnvFilter::new("info"))
        .with(tracing_opentelemetry::layer().with_tracer(tracer))
        .init();

    // Metrics: the `metrics` facade's recorder is an OpenTelemetry meter.
    let metrics = InMemoryMetricExporter::default();
    let meter_provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(metrics.clone()).build())
        .build();
    let recorder = metrics_exporter_otel::OpenTelemetryRecorder::new(meter_provider.meter("locks"));
    metrics::set_global_recorder(recorder)?;
    lock_runtime::describe_metrics();

    let locks = LockClient::connect(url.as_str()).await?;

    // Three requests, each in a span of its own, each settling an order
    // under its lock.
    for id in 1..=3 {
        let request = tracing::info_span!("handle_order", order = id);
        tracing::Instrument::instrument(settle(&locks, id), request).await?;
    }
    // A contended lock: a second task waits while the first holds it.
    let held = locks.lock("report:daily").acquire().await?;
    let waiting = {
        let locks = locks.clone();
        tokio::spawn(async move {
            let guard = locks
                .lock("report:daily")
                .wait(Duration::from_secs(5))
                .acquire()
                .await?;
            guard.release().await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await?;
    waiting.await??;
    // The client's gauges are brought up to date every second.
    tokio::time::sleep(Duration::from_millis(1100)).await;

    tracer_provider.force_flush()?;
    meter_provider.force_flush()?;
    let spans = spans.get_finished_spans()?;
    let metrics = metrics.get_finished_metrics()?;

    let mut problems = Vec::new();
    let lock_spans: Vec<&SpanData> = spans.iter().filter(|span| span.name == "lock").collect();
    for span in &lock_spans {
        let parent = spans
            .iter()
            .find(|other| other.span_context.span_id() == span.parent_span_id);
        let parent = parent.map_or(String::new(), |parent| {
            format!(", child of `{}`", parent.name)
        });
        println!(
            "span `lock` {}{parent}",
            fields(span, &["key", "kind", "fence", "outcome"])
        );
    }
    for id in 1..=3 {
        let key = format!("order:{id}");
        let settled = lock_spans
            .iter()
            .find(|span| attribute(span, "key") == Some(key.clone()));
        let in_request = settled.is_some_and(|span| {
            spans.iter().any(|parent| {
                parent.name == "handle_order"
                    && parent.span_context.span_id() == span.parent_span_id
            })
        });
        if !in_request {
            problems.push(format!(
                "no `lock` span for {key} inside its request's span"
            ));
        }
    }

    let last = metrics.last().ok_or("no metrics exported")?;
    for (name, value) in values(last) {
        println!("metric {name}: {value}");
    }
    let expected = [
        metric_names::LOCK_ACQUIRED_TOTAL,
        metric_names::LOCK_RELEASED_TOTAL,
        metric_names::LOCK_WAIT_SECONDS,
        metric_names::LOCK_HOLD_SECONDS,
        metric_names::LOCK_HELD,
        metric_names::LOCK_WAITERS,
        metric_names::CLIENTS,
        metric_names::SUBSCRIBER_CONNECTED,
        metric_names::RESTART_QUARANTINED,
        metric_names::WATCHDOG_LAG_SECONDS,
    ];
    let exported: Vec<String> = values(last).into_iter().map(|(name, _)| name).collect();
    for name in expected {
        if !exported.iter().any(|have| have == name) {
            problems.push(format!("metric {name} was not exported"));
        }
    }
    if !problems.is_empty() {
        eprintln!("{problems:#?}");
        return Ok(ExitCode::FAILURE);
    }
    println!("every span and metric arrived");
    Ok(ExitCode::SUCCESS)
}

/// A span attribute's value, as text.
fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

/// `key=value` for each of `keys` the span has.
fn fields(span: &SpanData, keys: &[&str]) -> String {
    keys.iter()
        .filter_map(|key| attribute(span, key).map(|value| format!("{key}={value}")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Each lock metric's name with its total (a sum, a gauge's value, or a
/// histogram's count), summed over its attribute sets.
fn values(exported: &ResourceMetrics) -> Vec<(String, String)> {
    let mut values = Vec::new();
    for scope in exported.scope_metrics() {
        for metric in scope.metrics() {
            let value = match metric.data() {
                AggregatedMetrics::F64(MetricData::Gauge(gauge)) => {
                    format!(
                        "gauge {}",
                        gauge.data_points().map(|p| p.value()).sum::<f64>()
                    )
                }
                AggregatedMetrics::U64(MetricData::Sum(sum)) => {
                    format!("sum {}", sum.data_points().map(|p| p.value()).sum::<u64>())
                }
                AggregatedMetrics::F64(MetricData::Histogram(histogram)) => format!(
                    "histogram of {} values",
                    histogram.data_points().map(|p| p.count()).sum::<u64>()
                ),
                other => format!("{other:?}"),
            };
            values.push((metric.name().to_owned(), value));
        }
    }
    values.sort();
    values
}
