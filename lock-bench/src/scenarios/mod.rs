//! The scenarios, and what they share: the server, the contenders, keys.

pub mod attribute;
pub mod contention;
pub mod handoff;
pub mod remote;
pub mod renewal;
pub mod rw;
pub mod throughput;
pub mod uncontended;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_runtime::LockClient;
use lock_testkit::RedisServer;

use crate::contenders::{BenchError, Floor, HandLock, rslock_manager};
use crate::measure::{self, CommandStats};

/// The lease every scenario but renewal uses: long enough that nothing is
/// renewed while a benchmark holds a lock.
pub const LEASE: Duration = Duration::from_secs(30);

/// Redis's default save policy (`redis.conf` of Redis 7, and what a server
/// started without one uses): a snapshot after an hour if a key changed,
/// after 5 minutes if 100 did, after a minute if 10 000 did.
pub const DEFAULT_SAVE: &str = "3600 1 300 100 60 10000";

/// A private server scenarios run against, and the run's size.
pub struct Ctx {
    /// The server, started by the benchmark on a free loopback port.
    pub server: RedisServer,
    /// Its URL.
    pub url: String,
    /// Smoke-test sizes instead of full ones.
    pub quick: bool,
    /// Its save policy as the server reports it (`CONFIG GET save`); empty
    /// when it never snapshots.
    pub save: String,
}

/// The server's snapshots at one moment, from `INFO persistence`.
#[derive(Debug, Clone, Copy)]
pub struct SaveState {
    /// Snapshots made since the server started.
    pub saves: u64,
    /// When the last one was made (Unix seconds; the server's start before
    /// the first).
    pub last_save: u64,
    /// When this was read (Unix seconds).
    pub at: u64,
}

/// A server's persistence over a scenario's measured rounds, for the report.
#[derive(Debug, Clone)]
pub struct Persistence {
    /// The save policy; empty for none.
    pub save: String,
    /// Seconds since the last snapshot (or the server's start) when the
    /// measured rounds began and when they ended.
    pub since_save: (u64, u64),
    /// Snapshots made during the measured rounds.
    pub saves_during: u64,
}

impl Persistence {
    /// What happened between the states read before and after the rounds.
    pub fn between(save: &str, before: SaveState, after: SaveState) -> Persistence {
        Persistence {
            save: save.to_owned(),
            since_save: (
                before.at.saturating_sub(before.last_save),
                after.at.saturating_sub(after.last_save),
            ),
            saves_during: after.saves.saturating_sub(before.saves),
        }
    }
}

/// Unix time in seconds.
fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
}

impl Ctx {
    /// Starts a server with `--save SAVE` (`""`: none, lock-testkit's
    /// default), in a directory of its own that it writes snapshots into.
    pub fn start(save: &str, quick: bool) -> Ctx {
        let server = RedisServer::start_with(&["--save", save]);
        let reply = server.cli(&["CONFIG", "GET", "save"]);
        let save = reply.lines().nth(1).unwrap_or("").trim().to_owned();
        Ctx {
            url: server.url(),
            server,
            quick,
            save,
        }
    }

    /// CPU time redis-server (its process, all threads; not a snapshot
    /// child) has used so far, to the nanosecond.
    pub fn server_cpu(&self) -> Duration {
        measure::process_cpu_of(self.server.pid())
    }

    /// The server's snapshots now.
    pub fn save_state(&self) -> SaveState {
        self.persistence_info().0
    }

    /// `INFO persistence`: the snapshots, whether one is being written, and
    /// how the last background one went.
    fn persistence_info(&self) -> (SaveState, bool, String) {
        let info = self.server.cli(&["INFO", "persistence"]);
        let text = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map_or(String::new(), |v| v.trim().to_owned())
        };
        let number = |name: &str| text(name).parse::<u64>().unwrap_or(0);
        let state = SaveState {
            saves: number("rdb_saves"),
            last_save: number("rdb_last_save_time"),
            at: unix_now().as_secs(),
        };
        (
            state,
            number("rdb_bgsave_in_progress") != 0,
            text("rdb_last_bgsave_status"),
        )
    }

    /// When the server has a save policy: makes a snapshot now (`BGSAVE`,
    /// as the policy does once enough keys changed) and waits until it is
    /// written and the second `LASTSAVE` reports is over, so that what runs
    /// next sees a server that has just saved, settled as it is for most of
    /// the time after a save (the runtime leaves its `:up` marks only once
    /// that second is over). Fails when the snapshot fails: with the
    /// default `stop-writes-on-bgsave-error`, the server would then refuse
    /// writes.
    pub async fn fresh_save(&self) -> Result<(), BenchError> {
        if self.save.is_empty() {
            return Ok(());
        }
        let before = self.save_state();
        // SCHEDULE: after the one in progress, if the policy started one.
        // `rdb_saves` counts a background save when it starts.
        self.server.cli(&["BGSAVE", "SCHEDULE"]);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let (state, status) = loop {
            let (state, in_progress, status) = self.persistence_info();
            if state.saves > before.saves && !in_progress {
                break (state, status);
            }
            if std::time::Instant::now() > deadline {
                return Err("redis-server: BGSAVE did not finish within 30 s".into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        if status != "ok" {
            return Err(format!(
                "redis-server: BGSAVE failed (rdb_last_bgsave_status {status:?}):\n{}",
                self.server.log()
            )
            .into());
        }
        let over = Duration::from_secs(state.last_save + 1) + Duration::from_millis(20);
        if let Some(wait) = over.checked_sub(unix_now()) {
            tokio::time::sleep(wait).await;
        }
        Ok(())
    }

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
