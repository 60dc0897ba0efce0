//! Uncontended over a network: lock + unlock of free keys, one task, with
//! every contender reaching Redis through the testkit's proxy, which holds
//! each chunk back in each direction, as a Redis in another zone or host
//! would. Each lock + unlock is two round trips for every contender, so
//! what a lock does beyond them weighs less the longer they take.

use std::time::{Duration, Instant};

use lock_testkit::Proxy;

use crate::contenders::{BenchError, Floor};
use crate::measure::Samples;
use crate::scenarios::{Contender, Ctx, Rng};

/// The delay asked of the proxy, each way; the report gives the PING round
/// trip measured through the proxy.
pub const ADDED: Duration = Duration::from_micros(250);

/// The scenario's result.
pub struct Remote {
    /// Ours, hand-written, rslock, floor, in that order: every lock +
    /// unlock, in all rounds.
    pub rows: Vec<(&'static str, Samples)>,
    /// One PING through the proxy, measured between the rounds.
    pub rtt: Samples,
    /// Rounds run: one block of pairs per contender each.
    pub rounds: usize,
    /// Lock + unlock pairs per block.
    pub per_round: usize,
}

/// Runs the scenario: as `uncontended`, in rotating order, through a proxy
/// that delays both directions by [`ADDED`].
pub async fn run(ctx: &Ctx) -> Result<Remote, BenchError> {
    let proxy = Proxy::start(ctx.server.port())
        .await
        .map_err(|err| BenchError::from(format!("proxy: {err}")))?;
    proxy.set_delay(ADDED);
    let url = proxy.url();
    let contenders = Contender::all(&url).await?;
    let floor = Floor::connect(&url).await?;
    let rounds = ctx.size(20, 4);
    let per_round = 25;
    let mut rng = Rng::new(3);
    let pool: Vec<String> = (0..ctx.size(256, 64))
        .map(|_| rng.key("bench:remote"))
        .collect();
    for contender in &contenders {
        for key in &pool {
            contender.pair(key).await?;
        }
    }
    let mut rows: Vec<(&'static str, Samples)> = contenders
        .iter()
        .map(|c| (c.name(), Samples::with_capacity(rounds * per_round)))
        .collect();
    let mut rtt = Samples::with_capacity(rounds * 5);
    for round in 0..rounds {
        for _ in 0..5 {
            let t = Instant::now();
            floor.ping().await?;
            rtt.push(t.elapsed());
        }
        for offset in 0..contenders.len() {
            let i = (round + offset) % contenders.len();
            for _ in 0..per_round {
                let key = &pool[rng.next_u64() as usize % pool.len()];
                let t = Instant::now();
                contenders[i].pair(key).await?;
                rows[i].1.push(t.elapsed());
            }
        }
    }
    Ok(Remote {
        rows,
        rtt,
        rounds,
        per_round,
    })
}
