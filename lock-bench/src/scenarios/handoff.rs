//! Handoff: from the holder's release to the waiter holding the lock.

use std::time::{Duration, Instant};

use lock_runtime::LockClient;
use tokio::sync::oneshot;

use crate::contenders::{BenchError, Floor, HandLock, PubSubFloor, rslock_manager};
use crate::measure::Samples;
use crate::scenarios::Ctx;
use crate::scenarios::contention::Waiter;

/// How long the waiter is given to start waiting before the release.
const SETTLE: Duration = Duration::from_millis(10);

/// One contender's handoff times.
pub struct HandoffRow {
    /// Its name.
    pub name: String,
    /// Its short name.
    pub short_name: String,
    /// From the start of the release to the waiter's acquire returning.
    pub samples: Samples,
}

/// The scenario's result.
pub struct Handoff {
    /// One row per contender.
    pub rows: Vec<HandoffRow>,
    /// PING round trips measured in the same run.
    pub rtt: Samples,
}

/// A holder and a waiter of each kind, on separate connections as in two processes.
async fn contenders(url: &str) -> Result<Vec<(Waiter, Waiter)>, BenchError> {
    let mut pairs = Vec::new();
    // Each its own client (named as the contention scenario's clients per
    // task): the lock goes across by the published release.
    let apart = |client: LockClient| Waiter::OursApart(std::sync::Arc::from([client]), false);
    pairs.push((
        apart(LockClient::connect(url).await?),
        apart(LockClient::connect(url).await?),
    ));
    for every in [Duration::from_millis(1), Duration::from_millis(10)] {
        pairs.push((
            Waiter::HandPoll(HandLock::connect(url, "hand:").await?, every),
            Waiter::HandPoll(HandLock::connect(url, "hand:").await?, every),
        ));
    }
    let rslock = || {
        Waiter::Rslock(
            rslock_manager(url, Some((3, Duration::from_millis(10)))),
            "pauses ≤ 10 ms",
        )
    };
    pairs.push((rslock(), rslock()));
    pairs.push((
        Waiter::PubSubFloor(PubSubFloor::connect(url, "bench:psfloor:released").await?),
        Waiter::PubSubFloor(PubSubFloor::connect(url, "bench:psfloor:released").await?),
    ));
    Ok(pairs)
}

/// Runs the scenario: the holder takes the lock, the waiter starts waiting,
/// the holder releases; the time from the release call to the waiter's
/// acquisition is recorded.
pub async fn run(ctx: &Ctx) -> Result<Handoff, BenchError> {
    let iterations = ctx.size(200, 30);
    let floor = Floor::connect(&ctx.url).await?;
    let pairs = contenders(&ctx.url).await?;
    let mut rows: Vec<HandoffRow> = pairs
        .iter()
        .map(|(w, _)| HandoffRow {
            name: w.name(),
            short_name: w.short_name(),
            samples: Samples::with_capacity(iterations),
        })
        .collect();
    let mut rtt = Samples::with_capacity(2000);
    for _ in 0..200 {
        floor.ping().await?;
    }
    // Interleave: each iteration runs every contender once, then some PINGs.
    for i in 0..iterations {
        for (row, (holder, waiter)) in rows.iter_mut().zip(&pairs) {
            let key = format!("bench:h:{i}");
            let held = holder.try_acquire(&key).await?;
            let (acquired_tx, acquired_rx) = oneshot::channel();
            let waiting = {
                let (waiter, key) = (waiter.clone(), key.clone());
                tokio::spawn(async move {
                    let holding = waiter.acquire(&key).await?;
                    let _ = acquired_tx.send(Instant::now());
                    waiter.release(holding).await
                })
            };
            tokio::time::sleep(SETTLE).await;
            let released = Instant::now();
            holder.release(held).await?;
            let acquired = acquired_rx.await.map_err(|_| "the waiter failed")?;
            waiting.await??;
            row.samples
                .push(acquired.saturating_duration_since(released));
        }
        for _ in 0..10 {
            let t = Instant::now();
            floor.ping().await?;
            rtt.push(t.elapsed());
        }
    }
    Ok(Handoff { rows, rtt })
}
