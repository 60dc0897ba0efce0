//! The scenarios, and what they share: the server, the contenders, keys.

pub mod attribute;
pub mod contention;
pub mod handoff;
pub mod renewal;
pub mod rw;
pub mod throughput;
pub mod uncontended;

use std::time::Duration;

use lock_runtime::LockClient;
use lock_testkit::RedisServer;

use crate::contenders::{BenchError, Floor, HandLock, rslock_manager};
use crate::measure::CommandStats;

/// The lease every scenario but renewal uses: long enough that nothing is
/// renewed while a benchmark holds a lock.
pub const LEASE: Duration = Duration::from_secs(30);

/// The private server every scenario runs against, and the run's size.
pub struct Ctx {
    /// The server, started by the benchmark on a free loopback port.
    pub server: RedisServer,
    /// Its URL.
    pub url: String,
    /// Smoke-test sizes instead of full ones.
    pub quick: bool,
}

impl Ctx {
    /// `INFO commandstats` now.
    pub fn command_stats(&self) -> CommandStats {
        CommandStats::parse(&self.server.cli(&["INFO", "commandstats"]))
    }

    /// One field of `INFO` (e.g. `used_memory`).
    pub fn info_field(&self, section: &str, field: &str) -> Option<String> {
        let info = self.server.cli(&["INFO", section]);
        info.lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
    }

    /// Pick `full` or `quick` by the run's size.
    pub fn size<T>(&self, full: T, quick: T) -> T {
        if self.quick { quick } else { full }
    }
}

/// A small, fast random generator for key names (xorshift64*).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed` (any value).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A random lock name under `prefix`.
    pub fn key(&mut self, prefix: &str) -> String {
        format!("{prefix}:{:016x}", self.next_u64())
    }
}

/// One implementation under test, for lock + unlock of free locks.
#[derive(Clone)]
pub enum Contender {
    /// lock-runtime.
    Ours(LockClient),
    /// SET NX PX + compare-and-delete by hand.
    Hand(HandLock),
    /// The `rslock` crate.
    Rslock(rslock::LockManager),
    /// Two bare round trips.
    Floor(Floor),
}

impl Contender {
    /// The four contenders of the uncontended and throughput scenarios.
    pub async fn all(url: &str) -> Result<Vec<Contender>, BenchError> {
        Ok(vec![
            Contender::Ours(LockClient::connect(url).await?),
            Contender::Hand(HandLock::connect(url, "hand:").await?),
            Contender::Rslock(rslock_manager(url, None)),
            Contender::Floor(Floor::connect(url).await?),
        ])
    }

    /// Whether it is lock-runtime (whose `SET` calls run inside its
    /// scripts, see [`CommandStats::of_runtime`]).
    pub fn is_runtime(&self) -> bool {
        matches!(self, Contender::Ours(_))
    }

    /// Its name in tables and charts.
    pub fn name(&self) -> &'static str {
        match self {
            Contender::Ours(_) => "lock-runtime",
            Contender::Hand(_) => "hand-written redis-rs",
            Contender::Rslock(_) => "rslock",
            Contender::Floor(_) => "floor (SET + EVALSHA)",
        }
    }

    /// Takes the free lock `name` and gives it back.
    pub async fn pair(&self, name: &str) -> Result<(), BenchError> {
        match self {
            Contender::Ours(locks) => {
                let guard = locks
                    .lock(name)
                    .lease(LEASE)
                    .wait(Duration::ZERO)
                    .acquire()
                    .await?;
                guard.release().await?;
            }
            Contender::Hand(hand) => {
                let guard = hand
                    .try_lock(name, LEASE)
                    .await?
                    .ok_or_else(|| format!("hand-written: `{name}` was busy"))?;
                if !hand.unlock(guard).await? {
                    return Err(format!("hand-written: `{name}` was not held at unlock").into());
                }
            }
            Contender::Rslock(manager) => {
                let key = format!("rslock:{name}");
                let lock = manager.lock(key.as_str(), LEASE).await?;
                lock.release().await;
            }
            Contender::Floor(floor) => {
                floor.set(name).await?;
                floor.script().await?;
            }
        }
        Ok(())
    }
}
