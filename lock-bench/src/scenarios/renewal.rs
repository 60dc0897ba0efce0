//! Renewal at scale: many held locks, what renewing them costs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lock_runtime::{LockClient, LockGuard};
use tokio::task::JoinSet;

use crate::contenders::BenchError;
use crate::measure::{self, CommandStats};
use crate::scenarios::Ctx;

/// Acquisitions (and releases) in flight at once.
pub const IN_FLIGHT: usize = 256;

/// The result for one number of held locks.
pub struct RenewalRow {
    /// Locks held.
    pub locks: usize,
    /// Their lease.
    pub lease: Duration,
    /// How long renewal was observed.
    pub window: Duration,
    /// Time to acquire all of them.
    pub acquire_time: Duration,
    /// Time to release all of them.
    pub release_time: Duration,
    /// What Redis executed during the window.
    pub stats: CommandStats,
    /// CPU time of this process during the window.
    pub client_cpu: Duration,
    /// CPU time of redis-server during the window.
    pub server_cpu: Duration,
    /// CPU time of this process while acquiring.
    pub acquire_cpu: Duration,
    /// Resident memory before acquiring and while holding.
    pub rss: (u64, u64),
    /// Live heap bytes before acquiring and while holding.
    pub heap: (i64, i64),
    /// Redis `used_memory` before and while holding.
    pub server_memory: (u64, u64),
    /// Locks reported lost during the window (must be 0).
    pub lost: usize,
    /// Locks the client was renewing at the end of the window.
    pub renewing: usize,
}

impl RenewalRow {
    /// Renewal script calls per second.
    pub fn calls_per_sec(&self) -> f64 {
        self.stats.script_calls() as f64 / self.window.as_secs_f64()
    }

    /// Locks renewed per script call (each renewal is one PEXPIRE inside it).
    pub fn locks_per_call(&self) -> f64 {
        self.stats.calls("pexpire") as f64 / self.stats.script_calls().max(1) as f64
    }

    /// Renewal calls per renewal interval (a third of the lease).
    pub fn calls_per_interval(&self) -> f64 {
        self.calls_per_sec() * (self.lease / 3).as_secs_f64()
    }

    /// Heap bytes per held lock.
    pub fn heap_per_lock(&self) -> f64 {
        (self.heap.1 - self.heap.0) as f64 / self.locks as f64
    }

    /// Resident bytes per held lock.
    pub fn rss_per_lock(&self) -> f64 {
        (self.rss.1 as f64 - self.rss.0 as f64) / self.locks as f64
    }

    /// Client CPU as a share of one core during the window.
    pub fn client_cpu_share(&self) -> f64 {
        self.client_cpu.as_secs_f64() / self.window.as_secs_f64()
    }

    /// Client CPU per lock renewal, in microseconds.
    pub fn cpu_per_renewal_us(&self) -> f64 {
        self.client_cpu.as_secs_f64() * 1e6 / self.stats.calls("pexpire").max(1) as f64
    }
}

/// The scenario's result.
pub struct Renewal {
    /// One row per number of held locks.
    pub rows: Vec<RenewalRow>,
}

/// Acquires `names` with `IN_FLIGHT` acquisitions at once.
async fn acquire_all(
    locks: &LockClient,
    count: usize,
    lease: Duration,
) -> Result<Vec<LockGuard>, BenchError> {
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = JoinSet::new();
    for _ in 0..IN_FLIGHT {
        let (locks, next) = (locks.clone(), next.clone());
        workers.spawn(async move {
            let mut held = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return Ok::<_, BenchError>(held);
                }
                let guard = locks
                    .lock(format!("bench:r:{count}:{i}"))
                    .lease(lease)
                    .wait(Duration::ZERO)
                    .acquire()
                    .await?;
                held.push(guard);
            }
        });
    }
    let mut guards = Vec::with_capacity(count);
    while let Some(done) = workers.join_next().await {
        guards.extend(done??);
    }
    Ok(guards)
}

/// Releases every guard with `IN_FLIGHT` releases at once.
async fn release_all(guards: Vec<LockGuard>) -> Result<(), BenchError> {
    let chunk = guards.len().div_ceil(IN_FLIGHT).max(1);
    let mut guards = guards;
    let mut workers = JoinSet::new();
    while !guards.is_empty() {
        let rest = guards.split_off(guards.len().saturating_sub(chunk));
        workers.spawn(async move {
            for guard in rest {
                guard.release().await?;
            }
            Ok::<_, BenchError>(())
        });
    }
    while let Some(done) = workers.join_next().await {
        done??;
    }
    Ok(())
}

fn used_memory(ctx: &Ctx) -> u64 {
    ctx.info_field("memory", "used_memory")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

async fn hold(
    ctx: &Ctx,
    count: usize,
    lease: Duration,
    window: Duration,
) -> Result<RenewalRow, BenchError> {
    let locks = LockClient::connect(&ctx.url).await?;
    // Warm up the client (connections, the per-process key tables).
    locks
        .lock("bench:r:warmup")
        .lease(lease)
        .wait(Duration::ZERO)
        .acquire()
        .await?
        .release()
        .await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    measure::trim_heap();
    let rss0 = measure::rss();
    let heap0 = measure::live_heap();
    let server_memory0 = used_memory(ctx);

    let cpu = measure::process_cpu();
    let start = Instant::now();
    let guards = acquire_all(&locks, count, lease).await?;
    let acquire_time = start.elapsed();
    let acquire_cpu = measure::process_cpu() - cpu;

    // Let transient buffers go before reading memory.
    tokio::time::sleep(Duration::from_millis(300)).await;
    measure::trim_heap();
    let rss1 = measure::rss();
    let heap1 = measure::live_heap();
    let server_memory1 = used_memory(ctx);

    let before = ctx.command_stats();
    let cpu0 = measure::process_cpu();
    let server_cpu0 = ctx.server_cpu();
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let window = started.elapsed();
    let client_cpu = measure::process_cpu() - cpu0;
    let server_cpu = ctx.server_cpu().saturating_sub(server_cpu0);
    let stats = before.delta(&ctx.command_stats()).of_runtime(true);
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    let renewing = locks.held();

    let start = Instant::now();
    release_all(guards).await?;
    let release_time = start.elapsed();
    drop(locks);
    Ok(RenewalRow {
        locks: count,
        lease,
        window,
        acquire_time,
        release_time,
        stats,
        client_cpu,
        server_cpu,
        acquire_cpu,
        rss: (rss0, rss1),
        heap: (heap0, heap1),
        server_memory: (server_memory0, server_memory1),
        lost,
        renewing,
    })
}

/// Runs the scenario: 10 000 and 100 000 locks with a 30 s lease, observed
/// for two renewal intervals (20 s); the quick run holds 10 000 locks with a
/// 3 s lease for three intervals (3 s).
pub async fn run(ctx: &Ctx) -> Result<Renewal, BenchError> {
    let lease = ctx.size(Duration::from_secs(30), Duration::from_secs(3));
    let counts: &[usize] = ctx.size(&[10_000, 100_000], &[10_000]);
    let window = ctx.size(lease * 2 / 3, lease);
    let mut rows = Vec::new();
    for &count in counts {
        rows.push(hold(ctx, count, lease, window).await?);
    }
    Ok(Renewal { rows })
}
