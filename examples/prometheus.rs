//! Lock metrics scraped by Prometheus: installs the Prometheus exporter of
//! the `metrics` ecosystem with an HTTP listener, takes locks in every way
//! that shows up in the metrics (released, contended, timed out, lost, an
//! error), then scrapes its own `/metrics` endpoint and prints the `lock_*`
//! series. Fails if one of them is missing or wrong, so CI runs it.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example prometheus
//! ```
//!
//! Without `REDIS_URL`, it starts a private `redis-server`. The exporter
//! listens on a free loopback port. Its output (the
//! `_bucket` lines left out; timings vary):
//!
//! ```text
//! # HELP lock_runtime_timeouts_total Lock acquisitions that gave up after waiting their whole wait
//! # TYPE lock_runtime_timeouts_total counter
//! lock_runtime_timeouts_total{kind="exclusive",cause="held"} 1
//! # HELP lock_runtime_errors_total Errors taking, releasing or renewing locks, other than timeouts and losses
//! # TYPE lock_runtime_errors_total counter
//! lock_runtime_errors_total{kind="exclusive",operation="acquire",error="wrong_type"} 1
//! # HELP lock_runtime_lost_total Held locks found lost (deleted, taken over, or not renewed in time)
//! # TYPE lock_runtime_lost_total counter
//! lock_runtime_lost_total{kind="exclusive",reason="not_held"} 1
//! # HELP lock_runtime_acquired_total Locks taken, re-entries included
//! # TYPE lock_runtime_acquired_total counter
//! lock_runtime_acquired_total{kind="exclusive"} 6
//! # HELP lock_runtime_released_total Locks released while held
//! # TYPE lock_runtime_released_total counter
//! lock_runtime_released_total{kind="exclusive"} 5
//! # HELP lock_runtime_subscriber_connected Lock clients whose release messages arrive
//! # TYPE lock_runtime_subscriber_connected gauge
//! lock_runtime_subscriber_connected 2
//! # HELP lock_runtime_locks_held Locks held by this process
//! # TYPE lock_runtime_locks_held gauge
//! lock_runtime_locks_held{kind="exclusive"} 0
//! # HELP lock_runtime_waiters Acquisitions of this process waiting for a lock
//! # TYPE lock_runtime_waiters gauge
//! lock_runtime_waiters{kind="exclusive"} 0
//! # HELP lock_runtime_restart_quarantined Lock clients held back by a server's restart quarantine
//! # TYPE lock_runtime_restart_quarantined gauge
//! lock_runtime_restart_quarantined 0
//! # HELP lock_runtime_clients Lock clients open in this process
//! # TYPE lock_runtime_clients gauge
//! lock_runtime_clients 2
//! # HELP lock_runtime_watchdog_lag_seconds How late the lock watchdog runs
//! # TYPE lock_runtime_watchdog_lag_seconds gauge
//! lock_runtime_watchdog_lag_seconds 0
//! # HELP lock_runtime_renewal_round_trip_seconds Round trip of one watchdog renewal call (many locks at once)
//! # TYPE lock_runtime_renewal_round_trip_seconds histogram
//! lock_runtime_renewal_round_trip_seconds_sum{outcome="ok"} 0.005352014999999999
//! lock_runtime_renewal_round_trip_seconds_count{outcome="ok"} 4
//! # HELP lock_runtime_wait_seconds Time taken to take a lock
//! # TYPE lock_runtime_wait_seconds histogram
//! lock_runtime_wait_seconds_sum{kind="exclusive",outcome="timed_out"} 0.101830165
//! lock_runtime_wait_seconds_count{kind="exclusive",outcome="timed_out"} 1
//! lock_runtime_wait_seconds_sum{kind="exclusive",outcome="acquired"} 0.484356083
//! lock_runtime_wait_seconds_count{kind="exclusive",outcome="acquired"} 6
//! lock_runtime_wait_seconds_sum{kind="exclusive",outcome="error"} 0.000598723
//! lock_runtime_wait_seconds_count{kind="exclusive",outcome="error"} 1
//! # HELP lock_runtime_hold_seconds Time a lock was held
//! # TYPE lock_runtime_hold_seconds histogram
//! lock_runtime_hold_seconds_sum{kind="exclusive",outcome="lost"} 0.102612893
//! lock_runtime_hold_seconds_count{kind="exclusive",outcome="lost"} 1
//! lock_runtime_hold_seconds_sum{kind="exclusive",outcome="released"} 0.47504943099999997
//! lock_runtime_hold_seconds_count{kind="exclusive",outcome="released"} 5
//! (90 _bucket lines omitted)
//! all 14 lock metrics present
//! ```

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::Duration;

use lock_runtime::{LockClient, LockError, distributed_lock, metric_names, redis};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

/// Histogram buckets, in seconds. Without buckets the exporter renders
/// histograms as summaries (quantiles), which Prometheus cannot aggregate
/// across instances.
const BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// A locked function: its acquisition, body and release are counted like
/// any hand-written lock.
#[distributed_lock(key = "order:<id>", client = locks, wait = "5s")]
async fn settle(locks: &LockClient, id: u64) -> Result<u64, LockError> {
    tokio::time::sleep(Duration::from_millis(20)).await;
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
    // A port the system has free (a service would use a fixed one).
    let listen = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?;
    PrometheusBuilder::new()
        .with_http_listener(listen)
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), BUCKETS)?
        .install()?;
    // The first acquisition would describe them too; doing it here puts
    // the `# HELP` lines in the scrape even before any lock is taken.
    lock_runtime::describe_metrics();

    let locks = LockClient::connect(url.as_str()).await?;
    let other = LockClient::connect(url.as_str()).await?;

    // Released: a locked function, three times.
    for id in 1..=3 {
        settle(&locks, id).await?;
    }

    // Contended: `other` waits while `locks` holds the lock, and gets it on
    // release. The short lease makes the watchdog renew it meanwhile.
    let held = locks
        .lock("report:daily")
        .lease(Duration::from_millis(300))
        .acquire()
        .await?;
    let waiter = {
        let other = other.clone();
        tokio::spawn(async move {
            let guard = other
                .lock("report:daily")
                .wait(Duration::from_secs(5))
                .acquire()
                .await?;
            guard.release().await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Timed out: `other` tries for 100 ms while the lock is still held.
    let timed_out = other
        .lock("report:daily")
        .wait(Duration::from_millis(100))
        .acquire()
        .await;
    assert!(timed_out.is_err_and(|err| err.is_timeout()));
    held.release().await?;
    waiter.await??;

    // Lost: an operator force-releases a held lock; the next renewal finds
    // it gone.
    let doomed = locks
        .lock("import:feed")
        .lease(Duration::from_millis(300))
        .acquire()
        .await?;
    other.force_release("import:feed").await?;
    doomed.lost().await;
    assert!(doomed.release().await.is_err_and(|err| err.is_lost()));

    // An error: the key holds a string, not a lock.
    let mut redis = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    redis::cmd("SET")
        .arg("lock:{not-a-lock}")
        .arg("x")
        .exec_async(&mut redis)
        .await?;
    let wrong = locks.lock("not-a-lock").acquire().await;
    assert!(matches!(wrong, Err(LockError::WrongType { .. })));

    let scrape = tokio::task::spawn_blocking(move || scrape(listen)).await??;
    let mut omitted = 0;
    for line in scrape.lines().filter(|line| line.contains("lock_")) {
        if line.contains("_bucket{") {
            omitted += 1;
        } else {
            println!("{line}");
        }
    }
    println!("({omitted} _bucket lines omitted)");

    let missing: Vec<&str> = metric_names::ALL
        .into_iter()
        .filter(|name| !has_series(&scrape, name))
        .collect();
    let expected = [
        r#"lock_runtime_acquired_total{kind="exclusive"} 6"#,
        r#"lock_runtime_released_total{kind="exclusive"} 5"#,
        r#"lock_runtime_timeouts_total{kind="exclusive",cause="held"} 1"#,
        r#"lock_runtime_lost_total{kind="exclusive",reason="not_held"} 1"#,
        r#"lock_runtime_errors_total{kind="exclusive",operation="acquire",error="wrong_type"} 1"#,
        r#"lock_runtime_locks_held{kind="exclusive"} 0"#,
    ];
    let wrong: Vec<&str> = expected
        .into_iter()
        .filter(|line| !scrape.lines().any(|have| have == *line))
        .collect();
    if !missing.is_empty() || !wrong.is_empty() {
        eprintln!("missing metrics: {missing:?}; missing or different lines: {wrong:?}");
        return Ok(ExitCode::FAILURE);
    }
    println!("all {} lock metrics present", metric_names::ALL.len());
    Ok(ExitCode::SUCCESS)
}

/// Whether the exposition text has a sample of `name` (a histogram's come
/// as `name_bucket`, `name_sum` and `name_count`).
fn has_series(scrape: &str, name: &str) -> bool {
    scrape.lines().any(|line| {
        line.strip_prefix(name)
            .is_some_and(|rest| rest.starts_with(['{', ' ']) || rest.starts_with("_count"))
    })
}

/// `GET /metrics` over plain HTTP/1.0, the way Prometheus scrapes; the body.
fn scrape(addr: SocketAddr) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    match response.split_once("\r\n\r\n") {
        Some((head, body))
            if head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200") =>
        {
            Ok(body.to_owned())
        }
        _ => Err(std::io::Error::other(format!(
            "unexpected answer: {response}"
        ))),
    }
}
