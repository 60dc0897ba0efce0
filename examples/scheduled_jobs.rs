//! A job on a schedule, run by every instance of a service, that must run
//! once per tick however many instances fire it (ShedLock's use case).
//!
//! Three instances, each with its own lock client, fire `cleanup` on the
//! cron schedule `* * * * * *` (every second; the `cron` crate reads it),
//! their clocks a little apart (0, 120 and 240 ms). The attribute does the
//! rest:
//!
//! * `on_busy = "skip"`: an instance that finds the lock taken skips the
//!   tick (`Ok(None)`), which it can tell apart from an error;
//! * `lock_at_least = "700ms"`: a run that ends fast keeps the lock taken
//!   until 700 ms after it started, so the instances whose clocks are
//!   behind find it taken and do not run the job a second time;
//! * `lock_at_most = "3s"`: a run is never held longer than that (no
//!   watchdog renewal); one run here hangs, and is stopped with a `Lost`
//!   error when the bound runs out.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example scheduled_jobs
//! ```
//!
//! It checks itself: one run per tick, never two runs closer than the
//! minimum, and the hung run stopped. Without `REDIS_URL`, it starts a
//! private `redis-server`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use cron::Schedule;
use lock_runtime::{LockClient, LockError, distributed_lock};
use tokio::time::Instant;

/// When the job fires: every second (cron with a seconds field: second,
/// minute, hour, day of month, month, day of week).
const SCHEDULE: &str = "* * * * * *";
const TICKS: u32 = 6;
const AT_LEAST: Duration = Duration::from_millis(700);
/// The tick on which the job hangs.
const HANGS_AT: u32 = 3;

/// Runs of the job: which instance ran it, when, and whether it finished.
#[derive(Default)]
struct Log {
    runs: Vec<(u32, Duration, bool)>,
}

/// The job: a short piece of work, except on tick `HANGS_AT`, where it
/// hangs far past `lock_at_most`.
#[distributed_lock(
    key = "job:cleanup",
    wait = "0s",
    on_busy = "skip",
    lock_at_least = "700ms",
    lock_at_most = "3s",
    client = locks
)]
async fn cleanup(
    locks: &LockClient,
    instance: u32,
    tick: u32,
    log: &Mutex<Log>,
    started: Instant,
) -> Result<Option<()>, LockError> {
    let at = started.elapsed();
    let index = {
        let mut log = log.lock().unwrap();
        log.runs.push((instance, at, false));
        log.runs.len() - 1
    };
    let work = if tick == HANGS_AT {
        Duration::from_secs(60)
    } else {
        Duration::from_millis(50)
    };
    tokio::time::sleep(work).await;
    log.lock().unwrap().runs[index].2 = true;
    Ok(Some(()))
}

/// One instance: fires the job at each time of `schedule` from `first`
/// on, its clock `skew` behind; a time it is late for (the hung run) is
/// skipped, as a cron daemon does.
async fn instance(
    number: u32,
    url: String,
    (schedule, first): (Schedule, DateTime<Utc>),
    skew: Duration,
    log: Arc<Mutex<Log>>,
    started: Instant,
) -> Result<Vec<String>, LockError> {
    let locks = LockClient::connect(url).await?;
    let mut report = Vec::new();
    let mut after = first - chrono::Duration::milliseconds(1);
    while let Some(next) = schedule.after(&after).next() {
        let tick = (next - first).num_seconds() as u32 + 1;
        if tick > TICKS {
            break;
        }
        after = next;
        let until = (next - Utc::now()).to_std().unwrap_or_default() + skew;
        tokio::time::sleep(until).await;
        if Utc::now() - next > chrono::Duration::milliseconds(500) {
            continue;
        }
        let line = match cleanup(&locks, number, tick, &log, started).await {
            Ok(Some(())) => format!("tick {tick}: instance {number} ran the job"),
            Ok(None) => format!("tick {tick}: instance {number} skipped (taken)"),
            Err(err) if err.is_lost() => {
                format!("tick {tick}: instance {number} stopped at lock_at_most: {err}")
            }
            Err(err) => return Err(err),
        };
        println!("{line}");
        report.push(line);
    }
    Ok(report)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let (url, _private_server) = match std::env::var("REDIS_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let server = lock_testkit::RedisServer::start();
            (server.url(), Some(server))
        }
    };
    let schedule: Schedule = SCHEDULE.parse()?;
    // The first time of the schedule at least 200 ms away: time to connect.
    let first = schedule
        .after(&(Utc::now() + chrono::Duration::milliseconds(200)))
        .next()
        .ok_or("the schedule never fires")?;
    println!("3 instances fire `cleanup` on `{SCHEDULE}` for {TICKS} ticks (Redis at {url})");
    let log = Arc::new(Mutex::new(Log::default()));
    let started = Instant::now() + (first - Utc::now()).to_std().unwrap_or_default();
    let instances: Vec<_> = (0..3u32)
        .map(|i| {
            let skew = Duration::from_millis(120) * i;
            let cron = (schedule.clone(), first);
            tokio::spawn(instance(
                i + 1,
                url.clone(),
                cron,
                skew,
                log.clone(),
                started,
            ))
        })
        .collect();
    let mut reports = Vec::new();
    for handle in instances {
        reports.extend(handle.await??);
    }

    let runs = std::mem::take(&mut log.lock().unwrap().runs);
    let mut starts: Vec<Duration> = runs.iter().map(|(_, at, _)| *at).collect();
    starts.sort();
    let closest = starts.windows(2).map(|pair| pair[1] - pair[0]).min();
    let stopped = reports
        .iter()
        .filter(|line| line.contains("stopped"))
        .count();
    let unfinished = runs.iter().filter(|(.., finished)| !finished).count();
    println!(
        "{} runs in {TICKS} ticks; closest two {closest:?} apart; {stopped} stopped at lock_at_most",
        runs.len()
    );
    // The hung run holds the lock for 3 s, through the ticks after it.
    if runs.len() < 3 || runs.len() > TICKS as usize {
        return Err(format!("{} runs; expected one per free tick", runs.len()).into());
    }
    if closest.is_some_and(|gap| gap < AT_LEAST - Duration::from_millis(50)) {
        return Err(format!("two runs {closest:?} apart, closer than lock_at_least").into());
    }
    if stopped != 1 || unfinished != 1 {
        return Err(format!("{stopped} runs stopped, {unfinished} unfinished; expected 1").into());
    }
    println!("one run per free tick, none closer than lock_at_least, the hung one stopped");
    Ok(())
}
