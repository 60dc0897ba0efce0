//! A scheduled job that must run on one instance at a time, and once per
//! period, however many instances of the service are scheduled to run it.
//!
//! Every instance calls `nightly_report` at about the same time. The first
//! to take the lock `job:nightly-report:<period>` does the work and records
//! that the period is done, inside the lock; the others either find the lock
//! taken (`wait = "0s"`: they skip at once) or, if they come later, find the
//! period done. The default client comes from `lock_runtime::install`.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example single_instance_job
//! ```
//!
//! The demo starts three copies of itself as separate processes (the
//! instances), prints what each did, and checks that exactly one ran the
//! job. Without `REDIS_URL`, it starts a private `redis-server` for them.

use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_runtime::{LockClient, LockError, distributed_lock};

const INSTANCES: u32 = 3;

#[derive(Debug)]
enum JobError {
    Lock(LockError),
    Redis(redis::RedisError),
}

impl std::fmt::Display for JobError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobError::Lock(err) => write!(f, "lock: {err}"),
            JobError::Redis(err) => write!(f, "redis: {err}"),
        }
    }
}

impl From<LockError> for JobError {
    fn from(err: LockError) -> Self {
        JobError::Lock(err)
    }
}

impl From<redis::RedisError> for JobError {
    fn from(err: redis::RedisError) -> Self {
        JobError::Redis(err)
    }
}

enum Outcome {
    Ran { fence: u64 },
    AlreadyDone,
}

/// The job. `lease = "5s"`: if this instance dies mid-run, another may take
/// over five seconds later; while it lives, the lock is renewed.
#[distributed_lock(key = "job:nightly-report:<period>", lease = "5s", wait = "0s")]
async fn nightly_report(
    period: &str,
    redis: &mut redis::aio::MultiplexedConnection,
) -> Result<Outcome, JobError> {
    let done_key = format!("job:nightly-report:{period}:done");
    let done: Option<u64> = redis::cmd("GET").arg(&done_key).query_async(redis).await?;
    if done.is_some() {
        return Ok(Outcome::AlreadyDone);
    }
    let fence = lock_runtime::current().map_or(0, |held| held.fence);

    // The work: longer than a third of the lease, so the lock is renewed.
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Record the period as done, with the fencing token of the run.
    let () = redis::cmd("SET")
        .arg(&done_key)
        .arg(fence)
        .arg("EX")
        .arg(7 * 24 * 3600)
        .query_async(redis)
        .await?;
    Ok(Outcome::Ran { fence })
}

/// One instance: `single_instance_job --instance N --period P`, with `REDIS_URL` set.
async fn instance(number: u32, period: &str) -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL")?;
    lock_runtime::install(LockClient::connect(&url).await?)?;
    let mut redis = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;

    match nightly_report(period, &mut redis).await {
        Ok(Outcome::Ran { fence }) => {
            println!("instance {number}: ran the job (fencing token {fence})")
        }
        Ok(Outcome::AlreadyDone) => {
            println!("instance {number}: skipped, the period is already done")
        }
        Err(JobError::Lock(err)) if err.is_timeout() => {
            println!("instance {number}: skipped, another instance is running the job")
        }
        Err(err) => return Err(format!("instance {number}: {err}").into()),
    }
    Ok(())
}

/// The demo: starts the instances and checks their report.
fn demo() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _private_server) = match std::env::var("REDIS_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let server = lock_testkit::RedisServer::start();
            (server.url(), Some(server))
        }
    };
    // A period unique to this demo run, so reruns against one Redis run again.
    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let period = format!("demo-{since_epoch}-{}", std::process::id());
    println!("{INSTANCES} instances run the job for period {period} (Redis at {url})");

    let children = (1..=INSTANCES)
        .map(|number| {
            Command::new(std::env::current_exe()?)
                .args(["--instance", &number.to_string(), "--period", &period])
                .env("REDIS_URL", &url)
                .stdout(Stdio::piped())
                .spawn()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut ran = 0;
    for child in children {
        let output = child.wait_with_output()?;
        let report = String::from_utf8_lossy(&output.stdout);
        print!("{report}");
        if !output.status.success() {
            return Err(format!("an instance failed: {}", output.status).into());
        }
        ran += report.matches("ran the job").count();
    }
    if ran != 1 {
        return Err(format!("{ran} instances ran the job; exactly one should have").into());
    }
    println!("exactly one instance ran the job");
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [flag, number, period_flag, period]
            if flag == "--instance" && period_flag == "--period" =>
        {
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(instance(number.parse()?, period))
        }
        [] => demo(),
        _ => Err("usage: single_instance_job [--instance N --period P]".into()),
    }
}
