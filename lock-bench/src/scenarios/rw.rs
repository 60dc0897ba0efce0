//! Read-write lock: 15 reader tasks and one writer on one key, with a short
//! body; readers per second while a writer waits, and whether the writer
//! gets in.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use lock_runtime::{LockClient, LockGuard};
use tokio::task::JoinSet;

use crate::contenders::BenchError;
use crate::measure::{CommandStats, Samples};
use crate::scenarios::{Ctx, LEASE};

/// Reader tasks.
pub const READERS: usize = 15;

/// The body every holder runs: a sleep of this long.
pub const BODY: Duration = Duration::from_millis(1);

/// What the tasks of one phase take.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Readers take `read_lock`; no writer.
    ReadersOnly,
    /// Readers take `read_lock`, one writer `write_lock`.
    ReadWrite,
    /// All 16 tasks take the plain exclusive `lock`.
    Exclusive,
}

/// One phase's result.
pub struct RwPhase {
    /// Its name in tables.
    pub name: &'static str,
    /// Whether a writer task ran.
    pub has_writer: bool,
    /// Whether every task took the exclusive lock.
    pub exclusive: bool,
    /// Acquisitions by the reader tasks.
    pub reader_acqs: u64,
    /// Acquisitions by the writer task.
    pub writer_acqs: u64,
    /// Time run.
    pub elapsed: Duration,
    /// The readers' waits, from calling acquire to holding the lock.
    pub reader_waits: Samples,
    /// The writer's waits.
    pub writer_waits: Samples,
    /// The writer's wait still unfinished when the phase ended.
    pub writer_unfinished: Duration,
    /// Holders that were inside together when they must not be (must be 0).
    pub violations: u64,
    /// The most readers inside at once.
    pub max_readers_inside: u32,
    /// What Redis executed.
    pub stats: CommandStats,
}

impl RwPhase {
    /// Reader acquisitions per second.
    pub fn reader_rate(&self) -> f64 {
        self.reader_acqs as f64 / self.elapsed.as_secs_f64()
    }

    /// Writer acquisitions per second.
    pub fn writer_rate(&self) -> f64 {
        self.writer_acqs as f64 / self.elapsed.as_secs_f64()
    }

    /// The writer's longest wait, finished or not.
    pub fn writer_longest(&mut self) -> Duration {
        self.writer_waits.max().max(self.writer_unfinished)
    }

    /// Commands clients sent per acquisition.
    pub fn commands_per_acq(&self) -> f64 {
        self.stats.client_calls() as f64 / (self.reader_acqs + self.writer_acqs).max(1) as f64
    }
}

/// The scenario's result.
pub struct Rw {
    /// Readers only (the baseline), readers with a writer, all on `lock`.
    pub phases: Vec<RwPhase>,
    /// How long each phase ran.
    pub duration: Duration,
}

impl Rw {
    /// The phase run in `mode`.
    pub fn phase(&mut self, mode: Mode) -> &mut RwPhase {
        let i = match mode {
            Mode::ReadersOnly => 0,
            Mode::ReadWrite => 1,
            Mode::Exclusive => 2,
        };
        &mut self.phases[i]
    }
}

/// Who is inside, to catch holders that must not be together.
#[derive(Default)]
struct Inside {
    readers: AtomicU32,
    writers: AtomicU32,
    max_readers: AtomicU32,
}

struct TaskResult {
    writer: bool,
    acquisitions: u64,
    waits: Samples,
    unfinished: Duration,
    violations: u64,
}

async fn take(
    locks: &LockClient,
    key: &str,
    mode: Mode,
    writer: bool,
) -> Result<LockGuard, BenchError> {
    let request = match (mode, writer) {
        (Mode::Exclusive, _) => locks.lock(key),
        (_, true) => locks.write_lock(key),
        (_, false) => locks.read_lock(key),
    };
    Ok(request
        .lease(LEASE)
        .wait(Duration::from_secs(120))
        .acquire()
        .await?)
}

/// One phase: the readers on `readers`' client, the writer (if any) on its own.
async fn phase(
    readers: &LockClient,
    writer: &LockClient,
    key: &str,
    mode: Mode,
    duration: Duration,
) -> Result<(Duration, Vec<TaskResult>, u32), BenchError> {
    let inside = Arc::new(Inside::default());
    let start = Instant::now();
    let deadline = tokio::time::Instant::from_std(start + duration);
    let tasks_n = READERS + usize::from(mode != Mode::ReadersOnly);
    let mut tasks = JoinSet::new();
    for t in 0..tasks_n {
        let is_writer = t == READERS;
        let locks = if is_writer {
            writer.clone()
        } else {
            readers.clone()
        };
        let (key, inside) = (key.to_owned(), inside.clone());
        // Exclusive: every task is a writer as far as overlaps go.
        let exclusive = is_writer || mode == Mode::Exclusive;
        tasks.spawn(async move {
            let mut result = TaskResult {
                writer: is_writer,
                acquisitions: 0,
                waits: Samples::with_capacity(1024),
                unfinished: Duration::ZERO,
                violations: 0,
            };
            loop {
                let asked = Instant::now();
                if asked >= deadline.into_std() {
                    break;
                }
                let guard = tokio::select! {
                    guard = take(&locks, &key, mode, is_writer) => guard?,
                    _ = tokio::time::sleep_until(deadline) => {
                        result.unfinished = asked.elapsed();
                        break;
                    }
                };
                result.waits.push(asked.elapsed());
                if exclusive {
                    let before = inside.writers.fetch_add(1, Ordering::SeqCst);
                    if before != 0 || inside.readers.load(Ordering::SeqCst) != 0 {
                        result.violations += 1;
                    }
                } else {
                    let before = inside.readers.fetch_add(1, Ordering::SeqCst);
                    inside.max_readers.fetch_max(before + 1, Ordering::SeqCst);
                    if inside.writers.load(Ordering::SeqCst) != 0 {
                        result.violations += 1;
                    }
                }
                tokio::time::sleep(BODY).await;
                if exclusive {
                    inside.writers.fetch_sub(1, Ordering::SeqCst);
                } else {
                    inside.readers.fetch_sub(1, Ordering::SeqCst);
                }
                guard.release().await?;
                result.acquisitions += 1;
            }
            Ok::<_, BenchError>(result)
        });
    }
    let mut results = Vec::with_capacity(tasks_n);
    while let Some(done) = tasks.join_next().await {
        results.push(done??);
    }
    let max_readers = inside.max_readers.load(Ordering::SeqCst);
    Ok((start.elapsed().min(duration), results, max_readers))
}

/// Runs the scenario.
pub async fn run(ctx: &Ctx) -> Result<Rw, BenchError> {
    let readers = LockClient::connect(&ctx.url).await?;
    let writer = LockClient::connect(&ctx.url).await?;
    let duration = ctx.size(Duration::from_secs(4), Duration::from_millis(600));
    let mut phases = Vec::new();
    for (i, (mode, name)) in [
        (Mode::ReadersOnly, "15 readers, no writer (baseline)"),
        (
            Mode::ReadWrite,
            "15 readers + 1 writer (`read_lock` / `write_lock`)",
        ),
        (
            Mode::Exclusive,
            "16 tasks on plain `lock` (15 \"readers\" + 1 \"writer\")",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        // A fresh key per phase: a phase cut short may leave its lock held.
        let key = format!("bench:rw:{i}");
        let before = ctx.command_stats();
        let (elapsed, results, max_readers_inside) =
            phase(&readers, &writer, &key, mode, duration).await?;
        // Background work of the phase (unsubscribes) is part of its cost.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let after = ctx.command_stats();
        let mut p = RwPhase {
            name,
            has_writer: mode != Mode::ReadersOnly,
            exclusive: mode == Mode::Exclusive,
            reader_acqs: 0,
            writer_acqs: 0,
            elapsed,
            reader_waits: Samples::default(),
            writer_waits: Samples::default(),
            writer_unfinished: Duration::ZERO,
            violations: 0,
            max_readers_inside,
            stats: before.delta(&after).of_runtime(true),
        };
        for task in results {
            p.violations += task.violations;
            if task.writer {
                p.writer_acqs += task.acquisitions;
                p.writer_waits.extend(&task.waits);
                p.writer_unfinished = p.writer_unfinished.max(task.unfinished);
            } else {
                p.reader_acqs += task.acquisitions;
                p.reader_waits.extend(&task.waits);
            }
        }
        phases.push(p);
    }
    Ok(Rw { phases, duration })
}
