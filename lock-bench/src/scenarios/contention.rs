//! Contention: 16 tasks take one key over and over, with a short body.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use lock_runtime::{LockClient, LockGuard};
use tokio::task::JoinSet;

use crate::contenders::{BenchError, HandGuard, HandLock, PubSubFloor, rslock_manager};
use crate::measure::{CommandStats, Samples};
use crate::scenarios::{Ctx, LEASE};

/// Tasks contending for the one key.
pub const TASKS: usize = 16;

/// A lock implementation that can wait for a busy lock.
#[derive(Clone)]
pub enum Waiter {
    /// lock-runtime: sleeps until the release is published.
    Ours(LockClient),
    /// lock-runtime's fair lock: waiters queue in arrival order.
    OursFair(LockClient),
    /// lock-runtime with a client per task, as processes of their own
    /// would have: no release hands the lock to a waiter of its client, so
    /// the waiter a release names is woken by its message (`fair`: the fair
    /// lock). Each task takes [`for_task`](Waiter::for_task)'s client.
    OursApart(Arc<[LockClient]>, bool),
    /// Hand-written: tries again after a fixed pause.
    HandPoll(HandLock, Duration),
    /// rslock's `acquire`: rounds of 3 tries with random pauses.
    Rslock(rslock::LockManager, &'static str),
    /// The bare pub/sub wake-up by hand (handoff scenario only).
    PubSubFloor(PubSubFloor),
}

/// A lock held through a [`Waiter`].
pub enum Holding {
    /// lock-runtime's guard.
    Ours(LockGuard),
    /// The hand-written lock's token.
    Hand(HandGuard),
    /// rslock's lock.
    Rslock(rslock::Lock),
}

impl Waiter {
    /// Whether it is lock-runtime (whose `SET` calls run inside its
    /// scripts, see [`CommandStats::of_runtime`]).
    pub fn is_runtime(&self) -> bool {
        matches!(
            self,
            Waiter::Ours(_) | Waiter::OursFair(_) | Waiter::OursApart(..)
        )
    }

    /// What task `task` of a round takes the lock through: its own client
    /// for [`Waiter::OursApart`], the shared one otherwise.
    pub fn for_task(&self, task: usize) -> Waiter {
        match self {
            Waiter::OursApart(clients, fair) => {
                let client = clients[task % clients.len()].clone();
                if *fair {
                    Waiter::OursFair(client)
                } else {
                    Waiter::Ours(client)
                }
            }
            other => other.clone(),
        }
    }

    /// The contention scenario's contenders.
    pub async fn all(url: &str) -> Result<Vec<Waiter>, BenchError> {
        let hand = HandLock::connect(url, "hand:").await?;
        let locks = LockClient::connect(url).await?;
        let mut apart = Vec::with_capacity(TASKS);
        for _ in 0..TASKS {
            apart.push(LockClient::connect(url).await?);
        }
        let apart: Arc<[LockClient]> = apart.into();
        Ok(vec![
            Waiter::OursApart(apart.clone(), false),
            Waiter::OursApart(apart, true),
            Waiter::Ours(locks.clone()),
            Waiter::OursFair(locks),
            Waiter::HandPoll(hand.clone(), Duration::from_millis(1)),
            Waiter::HandPoll(hand, Duration::from_millis(10)),
            Waiter::Rslock(
                rslock_manager(url, None),
                "defaults: 3 tries, pauses ≤ 200 ms",
            ),
            Waiter::Rslock(
                rslock_manager(url, Some((3, Duration::from_millis(10)))),
                "pauses ≤ 10 ms",
            ),
        ])
    }

    /// Its name in tables.
    pub fn name(&self) -> String {
        match self {
            Waiter::OursApart(_, false) => {
                "lock-runtime `lock`, a client per task (first in line woken)".to_owned()
            }
            Waiter::OursApart(_, true) => {
                "lock-runtime `fair_lock`, a client per task (FIFO queue)".to_owned()
            }
            Waiter::Ours(_) => "lock-runtime `lock`, one client (handed on in process)".to_owned(),
            Waiter::OursFair(_) => {
                "lock-runtime `fair_lock`, one client (handed on in process)".to_owned()
            }
            Waiter::HandPoll(_, every) => format!("hand-written, retry every {every:?}"),
            Waiter::Rslock(_, how) => format!("rslock ({how})"),
            Waiter::PubSubFloor(_) => "floor: bare pub/sub wake-up by hand".to_owned(),
        }
    }

    /// A short name for charts.
    pub fn short_name(&self) -> String {
        match self {
            Waiter::OursApart(_, false) => "lock-runtime".to_owned(),
            Waiter::OursApart(_, true) => "lock-runtime fair".to_owned(),
            Waiter::Ours(_) => "lock-runtime 1 client".to_owned(),
            Waiter::OursFair(_) => "lock-runtime fair 1 client".to_owned(),
            Waiter::HandPoll(_, every) => format!("hand {every:?}"),
            Waiter::Rslock(_, how) if how.starts_with("defaults") => "rslock".to_owned(),
            Waiter::Rslock(..) => "rslock 10ms".to_owned(),
            Waiter::PubSubFloor(_) => "floor: pub/sub by hand".to_owned(),
        }
    }

    /// Takes the lock `name`, waiting as long as it takes.
    pub async fn acquire(&self, name: &str) -> Result<Holding, BenchError> {
        Ok(match self {
            Waiter::Ours(..) | Waiter::OursFair(..) | Waiter::OursApart(..) => {
                Holding::Ours(self.ours(name, Duration::from_secs(120)).acquire().await?)
            }
            Waiter::HandPoll(hand, every) => {
                Holding::Hand(hand.lock_polling(name, LEASE, *every).await?)
            }
            Waiter::Rslock(manager, _) => {
                let key = format!("rslock:{name}");
                Holding::Rslock(manager.acquire_no_guard(key.as_str(), LEASE).await?)
            }
            Waiter::PubSubFloor(floor) => Holding::Hand(floor.lock(name, LEASE).await?),
        })
    }

    /// Takes the lock `name` if it is free, without waiting.
    pub async fn try_acquire(&self, name: &str) -> Result<Holding, BenchError> {
        Ok(match self {
            Waiter::Ours(..) | Waiter::OursFair(..) | Waiter::OursApart(..) => {
                Holding::Ours(self.ours(name, Duration::ZERO).acquire().await?)
            }
            Waiter::HandPoll(hand, _) => Holding::Hand(
                hand.try_lock(name, LEASE)
                    .await?
                    .ok_or_else(|| format!("`{name}` is busy"))?,
            ),
            Waiter::Rslock(manager, _) => {
                let key = format!("rslock:{name}");
                Holding::Rslock(manager.lock(key.as_str(), LEASE).await?)
            }
            Waiter::PubSubFloor(floor) => Holding::Hand(
                floor
                    .try_lock(name, LEASE)
                    .await?
                    .ok_or_else(|| format!("`{name}` is busy"))?,
            ),
        })
    }

    /// Gives a held lock back.
    pub async fn release(&self, holding: Holding) -> Result<(), BenchError> {
        match (self, holding) {
            (_, Holding::Ours(guard)) => guard.release().await?,
            (Waiter::HandPoll(hand, _), Holding::Hand(guard)) => {
                if !hand.unlock(guard).await? {
                    return Err("hand-written lock was not held at unlock".into());
                }
            }
            (Waiter::PubSubFloor(floor), Holding::Hand(guard)) => {
                if !floor.unlock(guard).await? {
                    return Err("pub/sub floor lock was not held at unlock".into());
                }
            }
            (_, Holding::Rslock(lock)) => lock.release().await,
            (_, Holding::Hand(_)) => return Err("hand-written guard released elsewhere".into()),
        }
        Ok(())
    }
}

impl Waiter {
    /// lock-runtime's request for `name`, waiting up to `wait` (through the
    /// first client of [`Waiter::OursApart`]: a round gives each task its
    /// own, see [`for_task`](Waiter::for_task)).
    ///
    /// # Panics
    ///
    /// For a contender other than lock-runtime.
    fn ours(&self, name: &str, wait: Duration) -> lock_runtime::LockRequest {
        let (locks, fair) = match self {
            Waiter::Ours(locks) => (locks, false),
            Waiter::OursFair(locks) => (locks, true),
            Waiter::OursApart(clients, fair) => (&clients[0], *fair),
            _ => unreachable!("not lock-runtime"),
        };
        let request = if fair {
            locks.fair_lock(name)
        } else {
            locks.lock(name)
        };
        request.lease(LEASE).wait(wait)
    }
}

/// One contender's result.
pub struct ContentionRow {
    /// Its name.
    pub name: String,
    /// Its short name.
    pub short_name: String,
    /// Acquisitions in all rounds.
    pub acquisitions: u64,
    /// Time run in all rounds.
    pub elapsed: Duration,
    /// Time from calling acquire to holding the lock.
    pub waits: Samples,
    /// The longest wait still unfinished when a round ended.
    pub unfinished: Duration,
    /// Critical sections that began while another one was running (must be 0).
    pub overlaps: u64,
    /// The most acquisitions one task made in a round, summed over rounds.
    pub busiest: u64,
    /// What Redis executed.
    pub stats: CommandStats,
    /// CPU time of redis-server during the rounds.
    pub server_cpu: Duration,
}

impl ContentionRow {
    /// Acquisitions per second.
    pub fn rate(&self) -> f64 {
        self.acquisitions as f64 / self.elapsed.as_secs_f64()
    }

    /// The longest wait, finished or not.
    pub fn longest_wait(&mut self) -> Duration {
        self.waits.max().max(self.unfinished)
    }
}

/// The scenario's result.
pub struct Contention {
    /// One row per contender.
    pub rows: Vec<ContentionRow>,
    /// How long each round ran.
    pub duration: Duration,
    /// Rounds per contender.
    pub rounds: usize,
}

struct TaskResult {
    acquisitions: u64,
    waits: Samples,
    unfinished: Duration,
    overlaps: u64,
}

/// `TASKS` tasks take `key` through `waiter` until `deadline`.
async fn round(
    waiter: &Waiter,
    key: &str,
    duration: Duration,
) -> Result<(Duration, Vec<TaskResult>), BenchError> {
    let inside = Arc::new(AtomicU32::new(0));
    let start = Instant::now();
    let deadline = tokio::time::Instant::from_std(start + duration);
    let mut tasks = JoinSet::new();
    for task in 0..TASKS {
        let (waiter, key, inside) = (waiter.for_task(task), key.to_owned(), inside.clone());
        tasks.spawn(async move {
            let mut result = TaskResult {
                acquisitions: 0,
                waits: Samples::with_capacity(1024),
                unfinished: Duration::ZERO,
                overlaps: 0,
            };
            loop {
                let asked = Instant::now();
                if asked >= deadline.into_std() {
                    break;
                }
                let holding = tokio::select! {
                    holding = waiter.acquire(&key) => holding?,
                    _ = tokio::time::sleep_until(deadline) => {
                        result.unfinished = asked.elapsed();
                        break;
                    }
                };
                result.waits.push(asked.elapsed());
                // The critical section: short, with one scheduling point.
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    result.overlaps += 1;
                }
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                waiter.release(holding).await?;
                result.acquisitions += 1;
            }
            Ok::<_, BenchError>(result)
        });
    }
    let mut results = Vec::with_capacity(TASKS);
    while let Some(done) = tasks.join_next().await {
        results.push(done??);
    }
    Ok((start.elapsed().min(duration), results))
}

/// Runs the scenario.
pub async fn run(ctx: &Ctx) -> Result<Contention, BenchError> {
    let waiters = Waiter::all(&ctx.url).await?;
    let rounds = ctx.size(2, 1);
    let duration = ctx.size(Duration::from_secs(3), Duration::from_millis(800));
    let mut rows: Vec<ContentionRow> = waiters
        .iter()
        .map(|w| ContentionRow {
            name: w.name(),
            short_name: w.short_name(),
            acquisitions: 0,
            elapsed: Duration::ZERO,
            waits: Samples::default(),
            unfinished: Duration::ZERO,
            overlaps: 0,
            busiest: 0,
            stats: CommandStats::default(),
            server_cpu: Duration::ZERO,
        })
        .collect();
    for r in 0..rounds {
        for offset in 0..waiters.len() {
            let i = (r + offset) % waiters.len();
            // A fresh key per round: a round cut short may leave its lock held.
            let key = format!("bench:c:{i}:{r}");
            let before = ctx.command_stats();
            let server_cpu = ctx.server_cpu();
            let (elapsed, results) = round(&waiters[i], &key, duration).await?;
            // Background work of the round (unsubscribes) is part of its cost.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let server_cpu = ctx.server_cpu().saturating_sub(server_cpu);
            let after = ctx.command_stats();
            let row = &mut rows[i];
            row.stats
                .add(&before.delta(&after).of_runtime(waiters[i].is_runtime()));
            row.server_cpu += server_cpu;
            row.elapsed += elapsed;
            row.busiest += results.iter().map(|t| t.acquisitions).max().unwrap_or(0);
            for task in results {
                row.acquisitions += task.acquisitions;
                row.waits.extend(&task.waits);
                row.unfinished = row.unfinished.max(task.unfinished);
                row.overlaps += task.overlaps;
            }
        }
    }
    Ok(Contention {
        rows,
        duration,
        rounds,
    })
}
