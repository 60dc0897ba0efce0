//! Attribute cost: a `#[distributed_lock]` function against the same calls
//! written by hand.

use std::time::{Duration, Instant};

use lock_runtime::{LockClient, LockError};

use crate::contenders::BenchError;
use crate::measure::{Samples, us};
use crate::scenarios::Ctx;

/// The annotated function: an empty body under the lock `bench:a:<id>`.
#[lock_runtime::distributed_lock(key = "bench:a:<id>", lease = "30s", wait = "0s", client = locks)]
async fn annotated(locks: &LockClient, id: u64) -> Result<(), LockError> {
    Ok(())
}

/// What the attribute does, by hand: acquire, run the body in the lock's
/// scope (so `current()` and re-entry work, and loss stops it), release.
async fn by_hand(locks: &LockClient, id: u64) -> Result<(), LockError> {
    let guard = locks
        .lock(format!("bench:a:{id}"))
        .lease(Duration::from_secs(30))
        .wait(Duration::ZERO)
        .acquire()
        .await?;
    let result = guard.scope(async { Ok::<(), LockError>(()) }).await?;
    guard.release().await?;
    result
}

/// The bare guard: acquire and release, no scope.
async fn guard_only(locks: &LockClient, id: u64) -> Result<(), LockError> {
    let guard = locks
        .lock(format!("bench:a:{id}"))
        .lease(Duration::from_secs(30))
        .wait(Duration::ZERO)
        .acquire()
        .await?;
    guard.release().await
}

/// One way of taking the lock.
#[derive(Clone, Copy)]
enum Way {
    Annotated,
    ByHand,
    GuardOnly,
}

impl Way {
    const ALL: [Way; 3] = [Way::Annotated, Way::ByHand, Way::GuardOnly];

    fn name(self) -> &'static str {
        match self {
            Way::Annotated => "#[distributed_lock] fn",
            Way::ByHand => "by hand: acquire, scope, release",
            Way::GuardOnly => "guard only: acquire, release",
        }
    }

    async fn call(self, locks: &LockClient, id: u64) -> Result<(), LockError> {
        match self {
            Way::Annotated => annotated(locks, id).await,
            Way::ByHand => by_hand(locks, id).await,
            Way::GuardOnly => guard_only(locks, id).await,
        }
    }
}

/// One way's latencies.
pub struct AttributeRow {
    /// Its name.
    pub name: &'static str,
    /// Every call.
    pub samples: Samples,
    /// The median of each block, in microseconds.
    pub round_p50: Vec<f64>,
}

/// The scenario's result.
pub struct Attribute {
    /// Annotated, by hand, guard only.
    pub rows: Vec<AttributeRow>,
}

/// Runs the scenario like the uncontended one: sequential calls on free
/// keys, rounds in rotating order.
pub async fn run(ctx: &Ctx) -> Result<Attribute, BenchError> {
    let locks = LockClient::connect(&ctx.url).await?;
    let rounds = ctx.size(100, 20);
    let per_round = 100u64;
    let mut id = 0u64;
    for way in Way::ALL {
        for _ in 0..ctx.size(500, 100) {
            id += 1;
            way.call(&locks, id).await?;
        }
    }
    let mut rows: Vec<AttributeRow> = Way::ALL
        .iter()
        .map(|way| AttributeRow {
            name: way.name(),
            samples: Samples::default(),
            round_p50: Vec::new(),
        })
        .collect();
    for round in 0..rounds {
        for offset in 0..Way::ALL.len() {
            let i = (round + offset) % Way::ALL.len();
            let mut samples = Samples::with_capacity(per_round as usize);
            for _ in 0..per_round {
                id += 1;
                let t = Instant::now();
                Way::ALL[i].call(&locks, id).await?;
                samples.push(t.elapsed());
            }
            rows[i].round_p50.push(us(samples.p50()));
            rows[i].samples.extend(&samples);
        }
    }
    Ok(Attribute { rows })
}
