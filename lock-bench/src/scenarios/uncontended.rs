//! Uncontended: lock + unlock of random free keys, one task, sequential.

use std::time::{Duration, Instant};

use crate::contenders::{BenchError, Floor};
use crate::measure::{self, CommandStats, Samples, us};
use crate::scenarios::{Contender, Ctx, Persistence, Rng};

/// One contender's latencies.
pub struct LatencyRow {
    /// Its name.
    pub name: &'static str,
    /// Every lock + unlock, in all rounds.
    pub samples: Samples,
    /// The median of each block, in microseconds.
    pub round_p50: Vec<f64>,
    /// What Redis executed for it.
    pub stats: CommandStats,
    /// CPU time of this process, all rounds.
    pub client_cpu: Duration,
    /// CPU time of redis-server, all rounds.
    pub server_cpu: Duration,
}

/// The scenario's result.
pub struct Uncontended {
    /// Ours, hand-written, rslock, floor, in that order.
    pub rows: Vec<LatencyRow>,
    /// One PING, measured between the rounds.
    pub rtt: Samples,
    /// Rounds run: one block of pairs per contender each.
    pub rounds: usize,
    /// Lock + unlock pairs per block.
    pub per_round: usize,
    /// Names the keys are drawn from.
    pub pool: usize,
    /// The server's snapshots over the measured rounds.
    pub persistence: Persistence,
}

/// Runs the scenario: every contender does `per_round` pairs per round, in
/// an order that rotates from round to round, so drift in the machine's
/// speed does not favour one of them.
pub async fn run(ctx: &Ctx) -> Result<Uncontended, BenchError> {
    let contenders = Contender::all(&ctx.url).await?;
    let floor = Floor::connect(&ctx.url).await?;
    // Small blocks in rotating order, so that a change in the machine's
    // speed (other load, frequency) hits every contender alike.
    let rounds = ctx.size(150, 30);
    let per_round = 100;
    let mut rng = Rng::new(1);
    // Names come from a pool, each used once in the warm-up: in a service
    // that has run for a while the runtime's per-slot fencing counters
    // exist, and the first use of a slot (which creates one) is not timed.
    let pool: Vec<String> = (0..ctx.size(2048, 512))
        .map(|_| rng.key("bench:u"))
        .collect();
    // A server with a save policy has just saved (see `Ctx::fresh_save`).
    ctx.fresh_save().await?;
    for contender in &contenders {
        for key in &pool {
            contender.pair(key).await?;
        }
    }

    let mut rows: Vec<LatencyRow> = contenders
        .iter()
        .map(|c| LatencyRow {
            name: c.name(),
            samples: Samples::with_capacity(rounds * per_round),
            round_p50: Vec::new(),
            stats: CommandStats::default(),
            client_cpu: Duration::ZERO,
            server_cpu: Duration::ZERO,
        })
        .collect();
    let mut rtt = Samples::with_capacity(rounds * 20);
    let saves_before = ctx.save_state();
    for round in 0..rounds {
        for _ in 0..20 {
            let t = Instant::now();
            floor.ping().await?;
            rtt.push(t.elapsed());
        }
        for offset in 0..contenders.len() {
            let i = (round + offset) % contenders.len();
            let contender = &contenders[i];
            let round_keys: Vec<&String> = (0..per_round)
                .map(|_| &pool[rng.next_u64() as usize % pool.len()])
                .collect();
            let before = ctx.command_stats();
            let mut samples = Samples::with_capacity(per_round);
            let cpu = measure::process_cpu();
            let server_cpu = ctx.server_cpu();
            for key in &round_keys {
                let t = Instant::now();
                contender.pair(key).await?;
                samples.push(t.elapsed());
            }
            let client_cpu = measure::process_cpu() - cpu;
            let server_cpu = ctx.server_cpu().saturating_sub(server_cpu);
            let after = ctx.command_stats();
            let row = &mut rows[i];
            row.client_cpu += client_cpu;
            row.server_cpu += server_cpu;
            row.stats
                .add(&before.delta(&after).of_runtime(contender.is_runtime()));
            row.round_p50.push(us(samples.p50()));
            row.samples.extend(&samples);
        }
    }
    let persistence = Persistence::between(&ctx.save, saves_before, ctx.save_state());
    Ok(Uncontended {
        rows,
        rtt,
        rounds,
        per_round,
        pool: pool.len(),
        persistence,
    })
}
