//! Throughput: 64 tasks on distinct keys, lock + unlock pairs per second.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use crate::contenders::BenchError;
use crate::measure::{self, CommandStats};
use crate::scenarios::{Contender, Ctx, Persistence, Rng};

/// Concurrent tasks.
pub const TASKS: usize = 64;

/// One contender's throughput.
pub struct ThroughputRow {
    /// Its name.
    pub name: &'static str,
    /// Pairs per second in each round.
    pub rounds: Vec<f64>,
    /// What Redis executed for it.
    pub stats: CommandStats,
    /// Pairs completed in all rounds.
    pub pairs: u64,
    /// CPU time of this process, all rounds.
    pub client_cpu: Duration,
    /// CPU time of redis-server, all rounds.
    pub server_cpu: Duration,
    /// Wall time, all rounds.
    pub elapsed: Duration,
}

/// The scenario's result.
pub struct Throughput {
    /// Ours, hand-written, rslock, floor.
    pub rows: Vec<ThroughputRow>,
    /// How long each contender ran per round.
    pub duration: Duration,
    /// The server's snapshots over the measured rounds.
    pub persistence: Persistence,
}

/// Runs `TASKS` tasks of `contender`, task `i` on random names from
/// `pools[i]`, for `duration` (or one pass over each pool when `None`);
/// pairs done and the time taken.
async fn burst(
    contender: &Contender,
    pools: &Arc<Vec<Vec<String>>>,
    duration: Option<Duration>,
    seed: u64,
) -> Result<(u64, Duration), BenchError> {
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for task in 0..TASKS {
        let (contender, pools) = (contender.clone(), pools.clone());
        let mut rng = Rng::new(seed * 1000 + task as u64);
        tasks.spawn(async move {
            let pool = &pools[task];
            let mut pairs = 0u64;
            match duration {
                None => {
                    for name in pool {
                        contender.pair(name).await?;
                        pairs += 1;
                    }
                }
                Some(duration) => {
                    let deadline = start + duration;
                    while Instant::now() < deadline {
                        let name = &pool[rng.next_u64() as usize % pool.len()];
                        contender.pair(name).await?;
                        pairs += 1;
                    }
                }
            }
            Ok::<_, BenchError>(pairs)
        });
    }
    let mut pairs = 0;
    while let Some(done) = tasks.join_next().await {
        pairs += done??;
    }
    Ok((pairs, start.elapsed()))
}

/// Runs the scenario, rotating the contenders' order between rounds.
pub async fn run(ctx: &Ctx) -> Result<Throughput, BenchError> {
    let contenders = Contender::all(&ctx.url).await?;
    let rounds = ctx.size(3, 1);
    let duration = ctx.size(Duration::from_secs(2), Duration::from_millis(500));
    // Each task has names of its own; every name is used once in a warm-up
    // pass, as in the uncontended scenario.
    let mut rng = Rng::new(7);
    let pools: Arc<Vec<Vec<String>>> = Arc::new(
        (0..TASKS)
            .map(|task| {
                (0..64)
                    .map(|_| rng.key(&format!("bench:t:{task}")))
                    .collect()
            })
            .collect(),
    );
    // A server with a save policy has just saved (see `Ctx::fresh_save`).
    ctx.fresh_save().await?;
    for contender in &contenders {
        burst(contender, &pools, None, 0).await?;
    }
    let mut rows: Vec<ThroughputRow> = contenders
        .iter()
        .map(|c| ThroughputRow {
            name: c.name(),
            rounds: Vec::new(),
            stats: CommandStats::default(),
            pairs: 0,
            client_cpu: Duration::ZERO,
            server_cpu: Duration::ZERO,
            elapsed: Duration::ZERO,
        })
        .collect();
    let saves_before = ctx.save_state();
    for round in 0..rounds {
        for offset in 0..contenders.len() {
            let i = (round + offset) % contenders.len();
            let before = ctx.command_stats();
            let cpu = measure::process_cpu();
            let server_cpu = ctx.server_cpu();
            let (pairs, took) =
                burst(&contenders[i], &pools, Some(duration), round as u64 + 1).await?;
            rows[i].client_cpu += measure::process_cpu() - cpu;
            rows[i].server_cpu += ctx.server_cpu().saturating_sub(server_cpu);
            rows[i].elapsed += took;
            let after = ctx.command_stats();
            rows[i]
                .stats
                .add(&before.delta(&after).of_runtime(contenders[i].is_runtime()));
            rows[i].pairs += pairs;
            rows[i].rounds.push(pairs as f64 / took.as_secs_f64());
        }
    }
    let persistence = Persistence::between(&ctx.save, saves_before, ctx.save_state());
    Ok(Throughput {
        rows,
        duration,
        persistence,
    })
}
