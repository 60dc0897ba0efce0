//! The checker: turns what the run recorded into the published figures.
//!
//! Everything here is a pure function of the records, so that the
//! definitions can be tested on hand-made histories (`tests/checker.rs`).
//!
//! # Definitions
//!
//! A holder's **unwarned interval** on a key runs from when `acquire()`
//! returned its guard to the earliest of: when it began releasing, when it
//! noticed `lost()`, and (for a killed worker) its death. One exception: a
//! holder whose *process was frozen* (a stall fault blocked its runtime) when
//! its validity deadline passed could not be told anything; its interval
//! ends at that deadline. Overlaps that exist only because of that exception
//! are reported apart, as *overlaps with a frozen holder*: no lock service
//! can prevent them, and fencing is what must catch their writes.
//!
//! Two unwarned intervals on the same key that overlap in time are an
//! **unwarned overlap**: two holders both believed they held the lock.
//!
//! # Per kind of lock
//!
//! Every section has a [`Role`]; the rules above apply per key as follows.
//!
//! - **Exclusive** holders (plain, fair and multi-key locks, and the write
//!   side of a read-write lock) overlap nobody. A multi-key section is
//!   recorded once per key, with that key's token, so exclusion and fencing
//!   are judged per key.
//! - **Readers** may overlap each other, never an exclusive holder.
//! - **Permit** holders (a semaphore of N permits, [`History::permits`]) may
//!   overlap each other up to N at once: the violation is an acquisition
//!   that makes N + 1 unwarned permit holders of the key at once.
//!
//! Only exclusive holders' writes are fenced, and only their tokens must
//! grow in acquisition order: readers and permit holders hold concurrently,
//! so neither the order in which their `acquire()`s returned nor one shared
//! highest token means anything for them.
//!
//! # Holders
//!
//! A holder is one critical section: worker, task and section number
//! ([`Holder`]), not a process or a task. Locked calls made inside a
//! critical section ([`Section::parent`]) are sections of their own: two
//! calls joined inside one section, each taking lock B, are two holders of
//! B and must exclude each other like any two holders, even though they run
//! in the same task of the same process. The one exception is a
//! **re-entry**: a call that takes a lock an enclosing section of its task
//! already holds is that section holding it again (same owner, same token,
//! inside its interval), and is judged as part of it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use crate::record::{Call, CancelHow, FailKind, LossKind, ReleaseOutcome, Role, TryOutcome};

/// How long after a stall ends a frozen holder still counts as frozen: the
/// runtime needs a moment to run its watchdog and deliver `lost()`.
pub const FROZEN_GRACE_US: i64 = 200_000;

/// A loss notice later than this after the validity deadline is late.
pub const LATE_NOTICE_US: i64 = 100_000;

/// Two `acquire()` calls closer than this have no clear arrival order.
pub const ARRIVAL_SLACK_US: i64 = 10_000;

/// The worker id of the orchestrator's own client (the operator), whose
/// holds after a removal are sections like any other.
pub const OPERATOR: u32 = 0;

/// A holder whose lock was removed from Redis (force-released, deleted)
/// must be told, or stop, within this part of the lease after the removal:
/// its next renewal, a third of the lease at most, plus the round trip.
pub fn removal_notice_us(lease_us: i64) -> i64 {
    lease_us / 2
}

/// A lock that nobody holds must not stay taken longer than this part of
/// the lease after a release dropped midway or failed, or a try-lock that gave up.
pub fn stuck_limit_us(lease_us: i64) -> i64 {
    lease_us / 2
}

/// The kinds of fault the injector knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// SIGSTOP Redis for less than the lease, then SIGCONT.
    RedisPauseShort,
    /// SIGSTOP Redis for longer than the lease, then SIGCONT.
    RedisPauseLong,
    /// SIGKILL Redis and start it again on the same port at once (empty).
    RedisRestart,
    /// SIGKILL Redis and start it again after more than a lease (empty).
    RedisRestartDelayed,
    /// `CLIENT KILL TYPE normal` (and sometimes `TYPE pubsub`).
    ClientKill,
    /// `CLIENT PAUSE <ms>`.
    ClientPause,
    /// Delay all traffic through the proxy.
    ProxyDelay,
    /// Cut every proxied connection and refuse new ones for a while.
    ProxyCut,
    /// `SAVE` a snapshot, let the workers go on for a while, then SIGKILL
    /// Redis and start it again from that older snapshot: locks granted
    /// since are forgotten and the fencing counters come back lower than
    /// tokens already handed out.
    RedisRestartStale,
    /// Black-hole the proxy (nothing relayed either way, nothing closed)
    /// for longer than the lease, then lift it.
    ProxyBlackhole,
    /// A worker blocks its runtime inside a critical section for longer
    /// than the lease.
    WorkerStall,
    /// SIGKILL a worker inside a critical section, and start a new one.
    WorkerKill,
    /// An operator `force_release` of a lock while a holder's body runs;
    /// the operator takes the lock at once; the holder re-enters it.
    ForceRelease,
    /// A raw `DEL` of a held lock's keys, then as [`FaultKind::ForceRelease`].
    KeyDelete,
    /// A holder's `release()` dropped by a short timeout, sometimes while
    /// the server is stalled.
    ReleaseCut,
    /// A try-lock during a server stall, failing on a short command timeout
    /// or dropped by a short timeout.
    TryLockStall,
    /// Cluster: `CLUSTER FAILOVER` on a replica of the master of a lock key.
    ClusterFailover,
    /// Cluster: SIGKILL the master of a lock key, wait for its replica to
    /// take over, restart the killed node (it rejoins as a replica).
    ClusterMasterKill,
    /// Sentinel: SIGKILL the master, wait for the failover, restart the old
    /// master (the Sentinels make it a replica).
    SentinelMasterKill,
    /// Sentinel: drop the master's replica links, let it grant for a moment,
    /// then as [`FaultKind::SentinelMasterKill`].
    SentinelLaggingKill,
    /// Redlock: SIGSTOP one or two masters for a while.
    RedlockPause,
    /// Redlock: SIGKILL one or two masters, restart them (empty) later.
    RedlockKill,
    /// Redlock: cut one master's proxy and refuse connections for a while.
    RedlockPartition,
    /// Eviction run: `volatile-lru` and a `maxmemory` just above what is
    /// used, filler keys with TTLs written until lock keys are evicted,
    /// then `maxmemory 0` / `noeviction` again.
    Eviction,
}

impl FaultKind {
    /// Every kind, in report order.
    pub const ALL: [FaultKind; 16] = [
        FaultKind::RedisPauseShort,
        FaultKind::RedisPauseLong,
        FaultKind::RedisRestart,
        FaultKind::RedisRestartDelayed,
        FaultKind::RedisRestartStale,
        FaultKind::ClientKill,
        FaultKind::ClientPause,
        FaultKind::ProxyDelay,
        FaultKind::ProxyCut,
        FaultKind::ProxyBlackhole,
        FaultKind::WorkerStall,
        FaultKind::WorkerKill,
        FaultKind::ForceRelease,
        FaultKind::KeyDelete,
        FaultKind::ReleaseCut,
        FaultKind::TryLockStall,
    ];

    /// The faults a single-Redis fault plan starts with: those that roll
    /// Redis back in time or cut it off silently, which every rule (tokens,
    /// fenced writes, overlaps) judges best on exclusive locks, the first
    /// kind of lock run, and those that remove a held lock from Redis while
    /// its holder re-enters it (a re-entry is where exclusive locks are
    /// taken most often: `#[distributed_lock]` functions).
    pub const FIRST: [FaultKind; 4] = [
        FaultKind::ForceRelease,
        FaultKind::RedisRestartStale,
        FaultKind::ProxyBlackhole,
        FaultKind::KeyDelete,
    ];

    /// The faults of the topology runs and of the eviction run (never in a
    /// single-Redis run).
    pub const TOPOLOGY: [FaultKind; 8] = [
        FaultKind::ClusterFailover,
        FaultKind::ClusterMasterKill,
        FaultKind::SentinelMasterKill,
        FaultKind::SentinelLaggingKill,
        FaultKind::RedlockPause,
        FaultKind::RedlockKill,
        FaultKind::RedlockPartition,
        FaultKind::Eviction,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::RedisPauseShort => "redis-pause-short",
            FaultKind::RedisPauseLong => "redis-pause-long",
            FaultKind::RedisRestart => "redis-restart",
            FaultKind::RedisRestartDelayed => "redis-restart-delayed",
            FaultKind::RedisRestartStale => "redis-restart-stale",
            FaultKind::ClientKill => "client-kill",
            FaultKind::ClientPause => "client-pause",
            FaultKind::ProxyDelay => "proxy-delay",
            FaultKind::ProxyCut => "proxy-cut",
            FaultKind::ProxyBlackhole => "proxy-blackhole",
            FaultKind::WorkerStall => "worker-stall",
            FaultKind::WorkerKill => "worker-kill",
            FaultKind::ForceRelease => "force-release",
            FaultKind::KeyDelete => "key-delete",
            FaultKind::ReleaseCut => "release-cut",
            FaultKind::TryLockStall => "trylock-stall",
            FaultKind::ClusterFailover => "cluster-failover",
            FaultKind::ClusterMasterKill => "cluster-master-kill",
            FaultKind::SentinelMasterKill => "sentinel-master-kill",
            FaultKind::SentinelLaggingKill => "sentinel-lagging-master-kill",
            FaultKind::RedlockPause => "redlock-pause",
            FaultKind::RedlockKill => "redlock-kill",
            FaultKind::RedlockPartition => "redlock-partition",
            FaultKind::Eviction => "eviction",
        }
    }

    /// What the fault does, for reports.
    pub fn description(self) -> &'static str {
        match self {
            FaultKind::RedisPauseShort => "SIGSTOP Redis for 10–80 % of the lease, then SIGCONT",
            FaultKind::RedisPauseLong => "SIGSTOP Redis for 1.2–3 leases, then SIGCONT",
            FaultKind::RedisRestart => {
                "SIGKILL Redis, restart it at once on the same port (no persistence: empty)"
            }
            FaultKind::RedisRestartDelayed => {
                "SIGKILL Redis, restart it on the same port a lease + 0.5 s later (empty)"
            }
            FaultKind::RedisRestartStale => {
                "`SAVE` a snapshot, let the workers go on for 0.5–2 s, then SIGKILL Redis and restart \
                 it from that snapshot: locks granted since are forgotten, fencing counters come \
                 back lower than tokens already handed out"
            }
            FaultKind::ClientKill => "`CLIENT KILL TYPE normal` (half the time `TYPE pubsub` too)",
            FaultKind::ClientPause => "`CLIENT PAUSE` for 0.2–2 leases",
            FaultKind::ProxyDelay => {
                "delay every byte through the proxy by 20 ms–0.6 lease, for 1–2.5 s"
            }
            FaultKind::ProxyCut => {
                "cut every proxied connection, refuse new ones for 0.1–1.5 leases"
            }
            FaultKind::ProxyBlackhole => {
                "black-hole the proxy for 1.5–3 leases: nothing relayed either way, no connection \
                 closed (bytes wait in full TCP buffers), new ones accepted but held; then lift it \
                 and let everything flow on the same connections"
            }
            FaultKind::WorkerStall => {
                "a worker blocks its runtime (std::thread::sleep) inside a critical section for 1.5–3 leases"
            }
            FaultKind::WorkerKill => {
                "SIGKILL a worker inside a critical section (renewals running), start a new worker"
            }
            FaultKind::ForceRelease => {
                "an operator's `force_release` (the admin API) of a lock whose holder's body runs; \
                 the operator's client takes the lock at once and holds it 10–60 ms; the holder \
                 re-enters its lock (a nested acquisition in its scope, as the attribute makes) \
                 40–150 ms after its body began"
            }
            FaultKind::KeyDelete => {
                "a raw `DEL` of the keys of a lock whose holder's body runs (no release \
                 published); then as force-release"
            }
            FaultKind::ReleaseCut => {
                "a holder's `release()` dropped by a 0–20 ms `tokio::time::timeout`, in 2 of 3 \
                 while the server is stalled 60–250 ms (`DEBUG SLEEP`, or the proxy paused); \
                 then how long the lock stays taken with nobody holding it"
            }
            FaultKind::TryLockStall => {
                "a try-lock (`try_acquire()`, wait 0) during a 80–250 ms stall (`DEBUG SLEEP`, \
                 or the proxy paused): half through a client whose command timeout (40 ms) is \
                 shorter than the stall, half dropped by a 1–20 ms timeout; then how long the \
                 lock stays taken with nobody holding it"
            }
            FaultKind::ClusterFailover => {
                "`CLUSTER FAILOVER` on a replica of the master serving a random lock key; wait until it took over"
            }
            FaultKind::ClusterMasterKill => {
                "SIGKILL the master serving a random lock key, wait for its replica to take over, \
                 restart the killed node (empty; it rejoins as a replica)"
            }
            FaultKind::SentinelMasterKill => {
                "SIGKILL the master, wait for the Sentinels' failover, restart the old master \
                 (empty; the Sentinels make it a replica)"
            }
            FaultKind::SentinelLaggingKill => {
                "SIGSTOP the replicas and `CLIENT KILL TYPE replica` on the master, 400–900 ms \
                 later SIGKILL it and SIGCONT the replicas: what it granted meanwhile reached no \
                 replica; \
                 `SENTINEL FAILOVER` at once (no wait for the master to be judged down), then \
                 restart as above"
            }
            FaultKind::RedlockPause => "SIGSTOP one or two of the five masters for 0.5–3 leases",
            FaultKind::RedlockKill => {
                "SIGKILL one or two of the five masters, restart them (empty) a lease + 0.5 s later"
            }
            FaultKind::RedlockPartition => {
                "cut every connection to one master through its proxy, refuse new ones for 1–3 leases"
            }
            FaultKind::Eviction => {
                "`maxmemory-policy volatile-lru` and a `maxmemory` just above what is used, filler \
                 keys with TTLs written until lock keys are evicted (up to 3 s), then `maxmemory 0`, \
                 `noeviction` and the filler deleted"
            }
        }
    }

    /// Parses a name printed by [`FaultKind::name`] (a fault of the
    /// single-Redis runs, [`FaultKind::ALL`]).
    pub fn from_name(name: &str) -> Option<FaultKind> {
        FaultKind::ALL.into_iter().find(|kind| kind.name() == name)
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Who held a lock: one critical section of one task of one worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Holder {
    /// Worker id (a respawned worker gets a new one).
    pub worker: u32,
    /// Task number within the worker.
    pub task: u32,
    /// Critical-section number within the task.
    pub seq: u64,
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "w{}.t{}#{}", self.worker, self.task, self.seq)
    }
}

/// One critical section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// Who held it.
    pub holder: Holder,
    /// Key index.
    pub key: u32,
    /// What the holder may share the key with.
    pub role: Role,
    /// Fencing token.
    pub token: u64,
    /// When `acquire()` was called (unknown for a killed worker).
    pub start: Option<i64>,
    /// When `acquire()` returned the guard.
    pub acquired: i64,
    /// When the holder began releasing, or when its process was killed.
    pub end: i64,
    /// Its process was killed while it held the lock.
    pub killed: bool,
    /// When it noticed `lost()`.
    pub told: Option<i64>,
    /// Why it was told.
    pub reason: Option<LossKind>,
    /// `valid_until()` when it was told.
    pub valid_at_told: Option<i64>,
    /// `valid_until()` when it stopped (unknown for a killed worker and for
    /// a locked call).
    pub valid_end: Option<i64>,
    /// The critical section of the same task this one was taken inside (a
    /// locked call made in it), if any. On the same key it is a re-entry:
    /// one holder with its ancestor, not a holder of its own.
    pub parent: Option<Holder>,
}

impl Section {
    /// The validity deadline that was last in force.
    fn deadline(&self) -> Option<i64> {
        self.valid_at_told.or(self.valid_end)
    }

    /// End of the interval ignoring the frozen-holder exception.
    fn raw_end(&self) -> i64 {
        self.told.map_or(self.end, |told| told.min(self.end))
    }
}

/// One write the fenced resource received, in the order it received them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Write {
    /// When it arrived.
    pub at: i64,
    /// Who wrote.
    pub holder: Holder,
    /// Key index.
    pub key: u32,
    /// What the writer may share the key with (only exclusive writes are fenced).
    pub role: Role,
    /// The writer's token.
    pub token: u64,
    /// Begin marker (`true`) or end marker.
    pub begin: bool,
    /// Whether the resource accepted it.
    pub accepted: bool,
    /// When the writer's `acquire()` returned (as the writer said).
    pub acquired: i64,
}

/// A time a worker blocked its own runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stall {
    /// Worker id.
    pub worker: u32,
    /// Start of the blocking sleep.
    pub start: i64,
    /// End of it.
    pub end: i64,
}

/// One injected fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// Its kind.
    pub kind: FaultKind,
    /// When it began.
    pub start: i64,
    /// When it was over.
    pub end: i64,
    /// Its parameters, for the log.
    pub detail: String,
}

/// What the orchestrator saw of the locks of a worker it killed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrashCheck {
    /// The killed worker.
    pub worker: u32,
    /// The key its parked task held.
    pub key: u32,
    /// When it was killed.
    pub killed_at: i64,
    /// `PTTL` of that lock key right after the kill (`None`: could not ask).
    pub pttl_ms: Option<i64>,
    /// Whether the key was still owned by the dead worker right after the kill.
    pub owned_at_kill: bool,
    /// Locks still owned by the dead worker a lease (plus slack) after the
    /// kill (`None`: could not ask).
    pub held_after_lease: Option<u32>,
}

/// A call the worker's watchdog abandoned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hang {
    /// Worker id.
    pub worker: u32,
    /// Which call.
    pub call: Call,
    /// Key index.
    pub key: u32,
    /// When it was called.
    pub start: i64,
    /// The limit it exceeded.
    pub limit_ms: u64,
}

/// Everything a run recorded.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// Lease of every lock, in microseconds.
    pub lease_us: i64,
    /// Permits of every semaphore (for [`Role::Permit`] sections).
    pub permits: u32,
    /// Critical sections.
    pub sections: Vec<Section>,
    /// Writes, in the order the resource received them.
    pub writes: Vec<Write>,
    /// Stalls of worker runtimes.
    pub stalls: Vec<Stall>,
    /// Injected faults.
    pub faults: Vec<Fault>,
    /// Checks after killing workers.
    pub crashes: Vec<CrashCheck>,
    /// Acquires that returned an error, by kind.
    pub failures: BTreeMap<FailKind, u64>,
    /// Releases by outcome.
    pub releases: BTreeMap<ReleaseOutcome, u64>,
    /// Abandoned calls.
    pub hangs: Vec<Hang>,
    /// Lock keys still held once every worker had stopped and a lease had passed.
    pub leftover: Option<u32>,
    /// Workers that exited without being told to.
    pub unexpected_exits: u32,
    /// Acquisitions cancelled while they waited, by how.
    pub cancelled: BTreeMap<CancelHow, u64>,
    /// Per worker that stopped when told: the locks its client still held
    /// once its tasks had stopped.
    pub exits: Vec<(u32, u64)>,
    /// Keys Redis evicted (eviction run), as its keyspace notifications
    /// told.
    pub evictions: Vec<Evicted>,
    /// When the workers were told to stop.
    pub stopped_at: Option<i64>,
    /// Locks removed from Redis while held (force-released, deleted).
    pub removals: Vec<Removal>,
    /// Where removals stand among the fencing tokens of their locks, for
    /// those the orchestrator could read the fencing counter around.
    pub removal_tokens: Vec<RemovalTokens>,
    /// Releases dropped midway and try-locks that gave up, each followed
    /// by a look at how long the lock stayed taken.
    pub stuck_checks: Vec<StuckCheck>,
    /// Releases run under a short timeout as ordered, by outcome (`None`:
    /// dropped before they returned).
    pub cut_releases: BTreeMap<Option<ReleaseOutcome>, u64>,
    /// Try-locks made during a stall, by outcome.
    pub try_locks: BTreeMap<TryOutcome, u64>,
}

/// A lock removed from Redis while someone may have held it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removal {
    /// Key index.
    pub key: u32,
    /// When the command that removed it returned.
    pub at: i64,
    /// How ([`FaultKind::ForceRelease`] or [`FaultKind::KeyDelete`]).
    pub how: FaultKind,
}

/// Where a [`Removal`] stands among the fencing tokens of its lock, which
/// orders it with the grants in Redis whatever the clients' replies did:
/// every grant draws its token from the fencing counter of the lock's slot
/// in the script that grants it, and the counter only grows. So a grant
/// Redis ordered before the removal has a token at most the counter's value
/// at the removal, and one ordered after it a greater token.
///
/// A `DEL` reads the counter in the script that deletes (`before` =
/// `after`, exact); `force_release` cannot, so the counter is read just
/// before it and, with the holders Redis has (every one of them granted
/// after the removal, which left none), just after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovalTokens {
    /// Key index (the removal's).
    pub key: u32,
    /// The removal's `at`.
    pub at: i64,
    /// Every token up to this one was granted before the removal (the
    /// counter before it; 0 when it could not be read).
    pub before: u64,
    /// Every token above this one was granted after the removal (the
    /// counter after it).
    pub after: u64,
    /// Tokens of the holders of the lock in Redis when `after` was read:
    /// granted after the removal.
    pub holding: Vec<u64>,
    /// When the read of `after` returned (`at` for a `DEL`).
    pub checked: i64,
}

/// A release dropped midway or a try-lock that gave up on the lock `key`:
/// from `free_from` (when it gave up, or the stall ended if later) the lock
/// must be free for others within [`stuck_limit_us`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StuckCheck {
    /// Key index.
    pub key: u32,
    /// [`FaultKind::ReleaseCut`] or [`FaultKind::TryLockStall`].
    pub what: FaultKind,
    /// When the call was dropped or returned its error.
    pub gave_up: i64,
    /// When the lock should have been free at the latest: `gave_up`, or
    /// the end of the stall it happened in.
    pub free_from: i64,
}

/// How long a lock stayed taken by nobody after a [`StuckCheck`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stuck {
    /// The check.
    pub check: StuckCheck,
    /// When the lock was free for others: `free_from`, or the end of the
    /// last holder's section that held it then.
    pub free_at: i64,
    /// The next acquisition of the key after the call gave up, if any
    /// before the run stopped.
    pub next: Option<i64>,
    /// Time from `free_at` until that acquisition (or the end of the run).
    pub stuck_us: i64,
}

/// A key Redis evicted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evicted {
    /// The key.
    pub name: String,
    /// The lock it belongs to, if it is a key of a lock `k<index>`.
    pub lock: Option<u32>,
    /// Whether it is the lock's own key (the hash that says who holds it).
    pub holder_key: bool,
    /// When the notification arrived.
    pub at: i64,
}

/// How the workers came back after a black hole was lifted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovery {
    /// When the black hole was lifted.
    pub lifted: i64,
    /// Time from the lift to the first acquisition after it (µs).
    pub first_grant: Option<i64>,
    /// Workers that had acquired before the black hole and were not killed
    /// before acquiring again.
    pub workers: usize,
    /// Of those, workers that acquired again before the run stopped.
    pub back: usize,
    /// Longest time from the lift to a worker's first acquisition (µs).
    pub slowest: Option<i64>,
}

/// Two holders that overlapped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// Key index.
    pub key: u32,
    /// The earlier holder.
    pub first: Holder,
    /// Its token.
    pub first_token: u64,
    /// When it acquired.
    pub first_acquired: i64,
    /// When its unwarned interval ended (told, released, deadline or death).
    pub first_end: i64,
    /// Whether and why it was told, eventually.
    pub first_reason: Option<LossKind>,
    /// When it was told, if it was.
    pub first_told: Option<i64>,
    /// The later holder.
    pub second: Holder,
    /// Its token.
    pub second_token: u64,
    /// When it acquired: the overlap began here.
    pub second_acquired: i64,
    /// How long both believed they held the lock, in microseconds.
    pub overlap_us: i64,
    /// Faults active around the overlap (within a lease).
    pub faults: Vec<FaultKind>,
    /// The last fault injected before the overlap began.
    pub last_fault: Option<FaultKind>,
    /// Holders at once: 2 for a pair; for permits, N + 1 (`first` is the
    /// earliest of the others).
    pub holders: usize,
}

/// A fencing token that was not greater than an earlier token of its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Regression {
    /// Key index.
    pub key: u32,
    /// The holder with the low token.
    pub holder: Holder,
    /// Its token.
    pub token: u64,
    /// When it acquired.
    pub acquired: i64,
    /// The largest earlier token of the key.
    pub earlier_max: u64,
    /// Faults active in the lease before the acquisition.
    pub faults: Vec<FaultKind>,
}

/// An accepted write although another holder had already written with an
/// equal or greater token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleWrite {
    /// The write.
    pub write: Write,
    /// The other holder's token that should have stopped it.
    pub other_token: u64,
}

/// Summary statistics of a set of durations, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Spread {
    /// How many.
    pub count: usize,
    /// Smallest.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Spread {
    /// Statistics of `values` (microseconds), reported in milliseconds.
    pub fn of(mut values: Vec<i64>) -> Spread {
        if values.is_empty() {
            return Spread::default();
        }
        values.sort_unstable();
        let at = |q: f64| {
            let i = ((values.len() - 1) as f64 * q).round() as usize;
            values[i] as f64 / 1000.0
        };
        Spread {
            count: values.len(),
            min: at(0.0),
            p50: at(0.5),
            p99: at(0.99),
            max: at(1.0),
        }
    }
}

/// The figures of a run.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    /// Critical sections entered.
    pub acquisitions: usize,
    /// Acquires that returned an error, by kind.
    pub failures: BTreeMap<FailKind, u64>,
    /// Releases by outcome.
    pub releases: BTreeMap<ReleaseOutcome, u64>,
    /// Faults injected, by kind.
    pub faults: BTreeMap<FaultKind, u64>,
    /// Writes the resource accepted.
    pub writes_accepted: usize,
    /// **Safety**: overlapping unwarned intervals.
    pub unwarned_overlaps: Vec<Overlap>,
    /// Overlaps only with a holder that was frozen past its deadline.
    pub frozen_overlaps: Vec<Overlap>,
    /// **Safety**: writes accepted although another holder had written with
    /// an equal or greater token before.
    pub stale_accepted: Vec<StaleWrite>,
    /// **Safety**: tokens not greater than an earlier token of their key.
    pub token_regressions: Vec<Regression>,
    /// Writes rejected after their writer's unwarned interval ended (or
    /// while it was frozen): the fence doing its job.
    pub stale_rejected: usize,
    /// Writes rejected while their writer still held the lock (unwarned, not
    /// frozen): only a token that went backwards can cause this.
    pub current_rejected: usize,
    /// Holders told of loss, by reason: validity deadline minus notice time.
    pub notices: BTreeMap<LossKind, Spread>,
    /// Holders told only after their frozen process thawed: deadline minus
    /// notice time.
    pub frozen_notices: Spread,
    /// Notices more than [`LATE_NOTICE_US`] after the deadline, or holders
    /// that ran that far past their deadline untold, while not frozen.
    pub late_notices: usize,
    /// Workers killed inside a critical section.
    pub crashes: usize,
    /// Crashed holders whose lock Redis still showed as theirs right after
    /// the kill (the kill did land inside a held critical section).
    pub crashes_holding: usize,
    /// Largest PTTL of a crashed holder's lock right after the kill (ms).
    pub crash_max_pttl_ms: Option<i64>,
    /// **Safety**: crashed holders' locks with a PTTL above the lease, or
    /// still held by the dead worker a lease (plus slack) after the kill.
    pub held_past_crash: usize,
    /// Crash checks that could not ask Redis.
    pub crash_unchecked: usize,
    /// **Safety**: acquires that neither returned a guard nor an error in
    /// time (waiters never woken).
    pub hung_acquires: usize,
    /// Releases that did not return in time.
    pub hung_releases: usize,
    /// Holders told of loss.
    pub told: usize,
    /// Time from a release to the acquisition of a waiter, outside faults.
    pub handoff: Spread,
    /// Lock keys left once every worker had stopped and a lease had passed.
    pub leftover: Option<u32>,
    /// Workers that exited without being told to.
    pub unexpected_exits: u32,
    /// Information, for fair locks: pairs of exclusive holders of a key
    /// where the later arrival (by more than [`ARRIVAL_SLACK_US`]) acquired
    /// first while the earlier one was still waiting.
    pub out_of_order: usize,
    /// Pairs of exclusive holders of a key that both waited at once (the
    /// later one called `acquire()` more than [`ARRIVAL_SLACK_US`] after the
    /// earlier one, before the earlier one acquired).
    pub waiting_pairs: usize,
    /// Acquisitions cancelled while they waited, by how.
    pub cancelled: BTreeMap<CancelHow, u64>,
    /// Locked calls that re-entered a lock their task held (depth 2).
    pub reentries: usize,
    /// Time from calling to entering, of those re-entries.
    pub reentry_wait: Spread,
    /// Locked calls on another lock inside a critical section (joined in
    /// pairs on the same lock).
    pub nested_calls: usize,
    /// Locks the clients still held when their tasks had stopped.
    pub held_at_exit: u64,
    /// Keys of the suite's locks that Redis evicted.
    pub evicted_lock_keys: usize,
    /// Evictions of a lock's own key while a holder held it (grants lost).
    pub evicted_held: usize,
    /// How workers came back after each black hole.
    pub recoveries: Vec<Recovery>,
    /// Locks removed from Redis (force-released, deleted) while held.
    pub removed_held: usize,
    /// Overlaps with a holder whose lock was removed from Redis, before it
    /// could be told (told or stopped within [`removal_notice_us`], and no
    /// re-entry granted after the removal): the operator's doing, fencing's
    /// job.
    pub removed_overlaps: Vec<Overlap>,
    /// Re-entries granted with a token other than the section's they
    /// re-enter: the lock had vanished and was taken afresh.
    pub regranted: usize,
    /// After each release dropped midway or try-lock that gave up: how long
    /// the lock stayed taken by nobody.
    pub stuck: Vec<Stuck>,
    /// **Safety**: of those, locks taken by nobody for longer than
    /// [`stuck_limit_us`].
    pub stuck_locks: usize,
    /// Releases run under a short timeout as ordered, by outcome.
    pub cut_releases: BTreeMap<Option<ReleaseOutcome>, u64>,
    /// Try-locks made during a stall, by outcome.
    pub try_locks: BTreeMap<TryOutcome, u64>,
}

impl Figures {
    /// The safety figures that must be 0, with their names.
    pub fn safety(&self) -> [(&'static str, usize); 6] {
        [
            (
                "overlapping critical sections among holders not told of loss",
                self.unwarned_overlaps.len(),
            ),
            (
                "stale-token writes the resource accepted",
                self.stale_accepted.len(),
            ),
            (
                "fencing tokens not above an earlier token of the key",
                self.token_regressions.len(),
            ),
            (
                "locks held past a crashed holder's lease",
                self.held_past_crash,
            ),
            (
                "waiters never woken (acquire returned nothing within wait + slack)",
                self.hung_acquires,
            ),
            (
                "locks taken by nobody for over half the lease (after a release dropped or failed, or a failed try-lock)",
                self.stuck_locks,
            ),
        ]
    }

    /// Whether every safety figure is 0.
    pub fn is_safe(&self) -> bool {
        self.safety().iter().all(|(_, n)| *n == 0)
    }
}

/// Faults whose window, widened by `margin` on both sides, contains `at`.
fn faults_near(faults: &[Fault], at: i64, margin: i64) -> Vec<FaultKind> {
    let mut kinds: Vec<FaultKind> = faults
        .iter()
        .filter(|f| f.start - margin <= at && at <= f.end + margin)
        .map(|f| f.kind)
        .collect();
    kinds.sort();
    kinds.dedup();
    kinds
}

/// The last fault that began at or before `at`.
fn last_fault(faults: &[Fault], at: i64) -> Option<FaultKind> {
    faults
        .iter()
        .filter(|f| f.start <= at)
        .max_by_key(|f| f.start)
        .map(|f| f.kind)
}

/// Whether a stall of `worker` covers `at` (with the grace after it).
fn frozen_at(stalls: &[Stall], worker: u32, at: i64) -> bool {
    stalls
        .iter()
        .any(|s| s.worker == worker && s.start <= at && at <= s.end + FROZEN_GRACE_US)
}

/// End of a section's unwarned interval (see the module docs).
pub fn claim_end(section: &Section, stalls: &[Stall]) -> i64 {
    let raw = section.raw_end();
    match section.deadline() {
        Some(deadline) if deadline < raw && frozen_at(stalls, section.holder.worker, deadline) => {
            deadline
        }
        _ => raw,
    }
}

/// Computes every figure of a run.
pub fn analyze(history: &History) -> Figures {
    let holders: HashSet<Holder> = history.sections.iter().map(|s| s.holder).collect();
    let ancestors = reentry_ancestors(&history.sections);
    let reentries: HashSet<Holder> = ancestors.keys().copied().collect();
    let mut figures = Figures {
        acquisitions: holders.len(),
        failures: history.failures.clone(),
        releases: history.releases.clone(),
        leftover: history.leftover,
        unexpected_exits: history.unexpected_exits,
        cancelled: history.cancelled.clone(),
        held_at_exit: history.exits.iter().map(|&(_, held)| held).sum(),
        cut_releases: history.cut_releases.clone(),
        try_locks: history.try_locks.clone(),
        ..Figures::default()
    };
    let nested: HashSet<Holder> = history
        .sections
        .iter()
        .filter(|s| s.parent.is_some())
        .map(|s| s.holder)
        .collect();
    figures.reentries = reentries.len();
    figures.reentry_wait = Spread::of(
        history
            .sections
            .iter()
            .filter(|s| reentries.contains(&s.holder))
            .filter_map(|s| Some(s.acquired - s.start?))
            .collect(),
    );
    figures.nested_calls = nested.len() - reentries.len();
    for fault in &history.faults {
        *figures.faults.entry(fault.kind).or_default() += 1;
    }
    let lease = history.lease_us;

    let mut by_key: BTreeMap<u32, Vec<&Section>> = BTreeMap::new();
    for section in &history.sections {
        by_key.entry(section.key).or_default().push(section);
    }
    for sections in by_key.values_mut() {
        sections.sort_by_key(|s| (s.acquired, s.holder));
    }

    // A re-entry is its ancestor's holding again (same owner, same token),
    // within its ancestor's interval: judged as part of it.
    for sections in by_key.values_mut() {
        sections.retain(|s| !reentries.contains(&s.holder));
    }
    let cuts = removal_cuts(history, &by_key, &ancestors, &mut figures);
    overlaps(history, &by_key, &cuts, &mut figures);
    stuck(history, &by_key, &mut figures);
    regressions(history, &by_key, &mut figures);
    fencing(history, &mut figures);
    notices(history, &mut figures);
    handoffs(history, &by_key, &mut figures);
    arrivals(&by_key, &mut figures);
    evictions(history, &by_key, &mut figures);
    figures.recoveries = recoveries(history);

    figures.crashes = history.crashes.len();
    for crash in &history.crashes {
        figures.crashes_holding += usize::from(crash.owned_at_kill);
        figures.crash_max_pttl_ms = figures.crash_max_pttl_ms.max(crash.pttl_ms);
        let lease_ms = lease / 1000;
        let pttl_bad = crash.pttl_ms.is_some_and(|p| p == -1 || p > lease_ms);
        let held_bad = crash.held_after_lease.is_some_and(|n| n > 0);
        if pttl_bad || held_bad {
            figures.held_past_crash += 1;
        }
        if crash.pttl_ms.is_none() || crash.held_after_lease.is_none() {
            figures.crash_unchecked += 1;
        }
    }
    for hang in &history.hangs {
        match hang.call {
            Call::Acquire => figures.hung_acquires += 1,
            Call::Release => figures.hung_releases += 1,
        }
    }
    figures
}

/// Whether two holders of one key may not hold it at once (permit holders
/// are counted apart, see [`permit_overlaps`]).
fn conflicts(a: Role, b: Role) -> bool {
    !matches!(
        (a, b),
        (Role::Read, Role::Read) | (Role::Permit, _) | (_, Role::Permit)
    )
}

/// An earlier section whose interval may still be open: it, the end of its
/// unwarned interval, the end ignoring the frozen-holder and removal
/// exceptions, and the removal that ended its unwarned interval (its `at`),
/// if one did.
type Open<'a> = (&'a Section, i64, i64, Option<i64>);

/// Whether the unwarned interval of the open section `first` had ended for
/// `later`, granted at `at`: by the clock, or because the removal that cut
/// it came before `later`'s grant in Redis. The cut is placed at the
/// removal's `at`, when the command that removed the lock returned to the
/// orchestrator, which may be milliseconds after Redis ran it; a grant in
/// that gap came after the removal all the same, and its token, drawn in
/// the granting script, says so where the removal's place among the tokens
/// is known ([`RemovalTokens`]).
fn ended_before(
    history: &History,
    &(first, first_end, _, cut): &Open<'_>,
    later: &Section,
) -> bool {
    first_end <= later.acquired
        || cut.is_some_and(|at| granted_after_removal(history, first.key, at, later.token))
}

/// Whether the grant of `token` on `key` came after the removal at `at`,
/// by the tokens (unknown: not).
fn granted_after_removal(history: &History, key: u32, at: i64, token: u64) -> bool {
    history
        .removal_tokens
        .iter()
        .find(|t| t.key == key && t.at == at)
        .is_some_and(|order| token > order.after || order.holding.contains(&token))
}

/// Per section (holder and key) whose lock was removed from Redis while it
/// held it (granted before the removal: see [`removed_before`]): when, if
/// the removal ends its unwarned interval. It does when
/// the holder was told or stopped within [`removal_notice_us`] of the
/// removal and no re-entry of it was granted after the removal: a holder
/// cannot know of a removal before its next renewal, and the operator took
/// that risk. A re-entry granted after the removal, or a holder still
/// untold past that time, keeps its whole interval: the runtime asked Redis
/// (or should have) and believed it still held the lock. Also counts the
/// removals that hit a holder, and the re-entries granted a new token.
fn removal_cuts(
    history: &History,
    by_key: &BTreeMap<u32, Vec<&Section>>,
    ancestors: &HashMap<Holder, Holder>,
    figures: &mut Figures,
) -> HashMap<(Holder, u32), i64> {
    let tokens: HashMap<(Holder, u32), u64> = history
        .sections
        .iter()
        .map(|s| ((s.holder, s.key), s.token))
        .collect();
    // Re-entries, by the section they re-enter: when each was granted.
    let mut grants: HashMap<(Holder, u32), Vec<i64>> = HashMap::new();
    for section in &history.sections {
        if let Some(&ancestor) = ancestors.get(&section.holder) {
            grants
                .entry((ancestor, section.key))
                .or_default()
                .push(section.acquired);
            if tokens
                .get(&(ancestor, section.key))
                .is_some_and(|&token| token != section.token)
            {
                figures.regranted += 1;
            }
        }
    }
    let bound = removal_notice_us(history.lease_us);
    let mut cuts = HashMap::new();
    let mut hit = HashSet::new();
    for sections in by_key.values() {
        for &section in sections {
            let end = claim_end(section, &history.stalls);
            let Some(removal) = history.removals.iter().find(|r| {
                r.key == section.key && r.at < end && removed_before(history, r, section)
            }) else {
                continue;
            };
            hit.insert((removal.key, removal.at));
            let regranted = grants
                .get(&(section.holder, section.key))
                .is_some_and(|at| at.iter().any(|&t| t > removal.at));
            if !regranted && section.raw_end() <= removal.at + bound {
                cuts.insert((section.holder, section.key), removal.at);
            }
        }
    }
    figures.removed_held = hit.len();
    cuts
}

/// Whether Redis granted `section` before `removal`, so that the removal
/// took its lock away: judged by its token where the removal's place among
/// the tokens is known ([`RemovalTokens`]), not by when the reply reached
/// the holder, which may be after the removal for a grant before it, or
/// before the removal's own reply for a grant after it. A token up to
/// `before` was granted before; one above `after`, or of a holder Redis had
/// after the removal, after. In between (granted while `force_release` was
/// on its way), a section not in Redis after the removal was granted
/// before it if it had not begun to release by the time that was read: a
/// grant after the removal would still have been there. One that had may
/// have been either, and is not taken as cut (its interval ends by then).
/// Without tokens, by the time `acquire()` returned.
fn removed_before(history: &History, removal: &Removal, section: &Section) -> bool {
    let Some(order) = history
        .removal_tokens
        .iter()
        .find(|t| t.key == removal.key && t.at == removal.at)
    else {
        return section.acquired <= removal.at;
    };
    let token = section.token;
    if token <= order.before {
        true
    } else if token > order.after || order.holding.contains(&token) {
        false
    } else {
        section.raw_end() >= order.checked
    }
}

/// How long each lock stayed taken by nobody after a release dropped
/// midway or a try-lock that gave up: from when it should have been free
/// (the check's `free_from`, or the end of a section that held it then)
/// to the next acquisition of the key.
fn stuck(history: &History, by_key: &BTreeMap<u32, Vec<&Section>>, figures: &mut Figures) {
    let limit = stuck_limit_us(history.lease_us);
    for check in &history.stuck_checks {
        let sections = by_key.get(&check.key).map_or(&[][..], Vec::as_slice);
        let next = sections
            .iter()
            .map(|s| s.acquired)
            .filter(|&at| at > check.gave_up)
            .min();
        let until = next.or(history.stopped_at).unwrap_or(check.free_from);
        let free_at = sections
            .iter()
            .filter(|s| s.acquired < until && s.end > check.free_from)
            .map(|s| s.end)
            .fold(check.free_from, i64::max);
        let stuck_us = (until - free_at).max(0);
        if stuck_us > limit {
            figures.stuck_locks += 1;
        }
        figures.stuck.push(Stuck {
            check: check.clone(),
            free_at,
            next,
            stuck_us,
        });
    }
}

fn overlaps(
    history: &History,
    by_key: &BTreeMap<u32, Vec<&Section>>,
    cuts: &HashMap<(Holder, u32), i64>,
    figures: &mut Figures,
) {
    for (&key, sections) in by_key {
        let mut open: Vec<Open<'_>> = Vec::new();
        for &later in sections {
            let at = later.acquired;
            open.retain(|&(_, _, raw, _)| raw > at);
            let claim = claim_end(later, &history.stalls);
            let cut = cuts.get(&(later.holder, key)).copied();
            let later_end = cut.map_or(claim, |cut| cut.min(claim));
            if later_end > at {
                let overlap = |first: &Section, first_end: i64, holders: usize| Overlap {
                    key,
                    first: first.holder,
                    first_token: first.token,
                    first_acquired: first.acquired,
                    first_end,
                    first_reason: first.reason,
                    first_told: first.told,
                    second: later.holder,
                    second_token: later.token,
                    second_acquired: at,
                    overlap_us: first_end.min(later_end) - at,
                    faults: faults_near(&history.faults, at, history.lease_us),
                    last_fault: last_fault(&history.faults, at),
                    holders,
                };
                for open_section in &open {
                    let &(first, first_end, first_raw, cut) = open_section;
                    if !conflicts(first.role, later.role) {
                        continue;
                    }
                    if !ended_before(history, open_section, later) {
                        figures.unwarned_overlaps.push(overlap(first, first_end, 2));
                    } else if first_raw > at {
                        let apart = Overlap {
                            overlap_us: first_raw.min(later_end) - at,
                            ..overlap(first, first_raw, 2)
                        };
                        if cut.is_some() {
                            figures.removed_overlaps.push(apart);
                        } else {
                            figures.frozen_overlaps.push(apart);
                        }
                    }
                }
                if later.role == Role::Permit {
                    permit_overlaps(history, &open, (later, later_end), figures, overlap);
                }
            }
            let raw = later.raw_end().max(claim);
            open.push((later, later_end, raw, cut.filter(|&cut| cut < claim)));
        }
    }
}

/// Judges a permit holder's acquisition: with the earlier permit holders
/// still open, more than N unwarned holders at once is a violation; more
/// than N only when frozen holders past their deadline count is apart.
fn permit_overlaps(
    history: &History,
    open: &[Open<'_>],
    (later, later_end): (&Section, i64),
    figures: &mut Figures,
    overlap: impl Fn(&Section, i64, usize) -> Overlap,
) {
    let at = later.acquired;
    let permits = history.permits.max(1) as usize;
    let others: Vec<&Open<'_>> = open.iter().filter(|o| o.0.role == Role::Permit).collect();
    let ended = |o: &Open<'_>| ended_before(history, o, later);
    let removed = others.iter().any(|&o| o.3.is_some() && ended(o));
    let unwarned: Vec<&&Open<'_>> = others.iter().filter(|&&o| !ended(o)).collect();
    if unwarned.len() + 1 > permits {
        let first = unwarned[0];
        let end = unwarned.iter().map(|o| o.1).min().unwrap_or(first.1);
        figures.unwarned_overlaps.push(Overlap {
            overlap_us: end.min(later_end) - at,
            ..overlap(first.0, first.1, unwarned.len() + 1)
        });
    } else if others.len() + 1 > permits {
        let first = others[0];
        let end = others.iter().map(|o| o.2).min().unwrap_or(first.2);
        let apart = Overlap {
            overlap_us: end.min(later_end) - at,
            ..overlap(first.0, first.2, others.len() + 1)
        };
        if removed {
            figures.removed_overlaps.push(apart);
        } else {
            figures.frozen_overlaps.push(apart);
        }
    }
}

/// The sections that re-enter a lock: taken inside a section of the same
/// task that holds the same key (or inside one of its descendants).
pub fn reentries(sections: &[Section]) -> HashSet<Holder> {
    reentry_ancestors(sections).into_keys().collect()
}

/// Each section that re-enters a lock, with the outermost section of its
/// task that holds that key (the one whose holding it continues).
pub fn reentry_ancestors(sections: &[Section]) -> HashMap<Holder, Holder> {
    let parents: HashMap<Holder, Holder> = sections
        .iter()
        .filter_map(|s| Some((s.holder, s.parent?)))
        .collect();
    let held: HashSet<(Holder, u32)> = sections.iter().map(|s| (s.holder, s.key)).collect();
    sections
        .iter()
        .filter_map(|s| {
            let outermost = std::iter::successors(s.parent, |h| parents.get(h).copied())
                .take(16)
                .filter(|&ancestor| held.contains(&(ancestor, s.key)))
                .last()?;
            Some((s.holder, outermost))
        })
        .collect()
}

/// Counts evicted lock keys, and those evicted while a holder held them.
fn evictions(history: &History, by_key: &BTreeMap<u32, Vec<&Section>>, figures: &mut Figures) {
    for evicted in &history.evictions {
        let Some(lock) = evicted.lock else { continue };
        figures.evicted_lock_keys += 1;
        let held = by_key.get(&lock).is_some_and(|sections| {
            sections
                .iter()
                .any(|s| s.acquired <= evicted.at && evicted.at < claim_end(s, &history.stalls))
        });
        if evicted.holder_key && held {
            figures.evicted_held += 1;
        }
    }
}

/// How the workers came back after each black hole: the first acquisition
/// after the lift, per worker that had acquired before it (workers killed
/// before acquiring again are left out).
fn recoveries(history: &History) -> Vec<Recovery> {
    let mut by_worker: BTreeMap<u32, Vec<i64>> = BTreeMap::new();
    for section in history
        .sections
        .iter()
        .filter(|s| s.holder.worker != OPERATOR)
    {
        by_worker
            .entry(section.holder.worker)
            .or_default()
            .push(section.acquired);
    }
    let stopped = history.stopped_at.unwrap_or(i64::MAX);
    history
        .faults
        .iter()
        .filter(|f| f.kind == FaultKind::ProxyBlackhole)
        .map(|fault| {
            let lifted = fault.end;
            let mut recovery = Recovery {
                lifted,
                first_grant: None,
                workers: 0,
                back: 0,
                slowest: None,
            };
            for (&worker, acquired) in &by_worker {
                if !acquired.iter().any(|&at| at < fault.start) {
                    continue;
                }
                let again = acquired
                    .iter()
                    .filter(|&&at| at > lifted && at <= stopped)
                    .min();
                let killed = history
                    .crashes
                    .iter()
                    .any(|c| c.worker == worker && c.killed_at > fault.start);
                match again {
                    Some(&at) => {
                        recovery.workers += 1;
                        recovery.back += 1;
                        let took = at - lifted;
                        recovery.slowest = recovery.slowest.max(Some(took));
                        recovery.first_grant =
                            Some(recovery.first_grant.map_or(took, |t| t.min(took)));
                    }
                    None if killed => {}
                    None => recovery.workers += 1,
                }
            }
            recovery
        })
        .collect()
}

fn regressions(history: &History, by_key: &BTreeMap<u32, Vec<&Section>>, figures: &mut Figures) {
    for (&key, sections) in by_key {
        let mut max: Option<u64> = None;
        for section in sections {
            if section.role == Role::Exclusive
                && let Some(earlier_max) = max
                && section.token <= earlier_max
            {
                figures.token_regressions.push(Regression {
                    key,
                    holder: section.holder,
                    token: section.token,
                    acquired: section.acquired,
                    earlier_max,
                    faults: faults_near(
                        &history.faults,
                        section.acquired - history.lease_us / 2,
                        history.lease_us / 2,
                    ),
                });
            }
            max = max.max(Some(section.token));
        }
    }
}

fn fencing(history: &History, figures: &mut Figures) {
    let claims: HashMap<(Holder, u32), (i64, i64)> = history
        .sections
        .iter()
        .map(|s| {
            let claim = (s.acquired, claim_end(s, &history.stalls));
            ((s.holder, s.key), claim)
        })
        .collect();
    // Per key: the best accepted (token, holder) and the best token of
    // another holder than that one.
    let mut best: HashMap<u32, ((u64, Holder), Option<u64>)> = HashMap::new();
    for write in history.writes.iter().filter(|w| w.role == Role::Exclusive) {
        if !write.accepted {
            match claims.get(&(write.holder, write.key)) {
                Some(&(acquired, end)) if acquired <= write.at && write.at < end => {
                    figures.current_rejected += 1
                }
                _ => figures.stale_rejected += 1,
            }
            continue;
        }
        figures.writes_accepted += 1;
        let entry = best.entry(write.key);
        let slot = entry.or_insert(((write.token, write.holder), None));
        let ((top, top_holder), second) = *slot;
        let other = if top_holder != write.holder {
            Some(top)
        } else {
            second
        };
        if let Some(other_token) = other
            && other_token >= write.token
        {
            figures.stale_accepted.push(StaleWrite {
                write: *write,
                other_token,
            });
        }
        // Keep the top two tokens of distinct holders.
        if top_holder == write.holder {
            slot.0.0 = top.max(write.token);
        } else if write.token > top {
            *slot = ((write.token, write.holder), Some(top));
        } else {
            slot.1 = Some(second.map_or(write.token, |s| s.max(write.token)));
        }
    }
}

fn notices(history: &History, figures: &mut Figures) {
    let mut margins: BTreeMap<LossKind, Vec<i64>> = BTreeMap::new();
    let mut frozen = Vec::new();
    let mut seen = HashSet::new();
    // A multi-key section has one record per key, and one notice.
    for section in history.sections.iter().filter(|s| seen.insert(s.holder)) {
        let worker = section.holder.worker;
        if let (Some(told), Some(reason)) = (section.told, section.reason) {
            figures.told += 1;
            if let Some(deadline) = section.valid_at_told {
                if frozen_at(&history.stalls, worker, deadline) {
                    frozen.push(deadline - told);
                } else {
                    margins.entry(reason).or_default().push(deadline - told);
                    if told - deadline > LATE_NOTICE_US {
                        figures.late_notices += 1;
                    }
                }
            }
        } else if !section.killed
            && let Some(deadline) = section.valid_end
            && section.end - deadline > LATE_NOTICE_US
            && !frozen_at(&history.stalls, worker, deadline)
        {
            figures.late_notices += 1;
        }
    }
    figures.notices = margins
        .into_iter()
        .map(|(reason, values)| (reason, Spread::of(values)))
        .collect();
    figures.frozen_notices = Spread::of(frozen);
}

fn handoffs(history: &History, by_key: &BTreeMap<u32, Vec<&Section>>, figures: &mut Figures) {
    let mut values = Vec::new();
    for sections in by_key.values() {
        for pair in sections.windows(2) {
            let (prev, next) = (pair[0], pair[1]);
            if prev.role != Role::Exclusive || next.role != Role::Exclusive {
                continue;
            }
            let released = prev.end;
            let waiting = next.start.is_some_and(|start| start < released);
            if prev.killed || prev.told.is_some() || !waiting || next.acquired < released {
                continue;
            }
            let quiet = history
                .faults
                .iter()
                .all(|f| f.end + history.lease_us < released || f.start > next.acquired);
            if quiet {
                values.push(next.acquired - released);
            }
        }
    }
    figures.handoff = Spread::of(values);
}

/// Counts, for information, exclusive holders of a key that acquired before
/// an earlier arrival that was still waiting (see [`Figures::out_of_order`]).
fn arrivals(by_key: &BTreeMap<u32, Vec<&Section>>, figures: &mut Figures) {
    for sections in by_key.values() {
        let mut arrived: Vec<(i64, i64)> = sections
            .iter()
            .filter(|s| s.role == Role::Exclusive)
            .filter_map(|s| Some((s.start?, s.acquired)))
            .collect();
        arrived.sort_unstable();
        for (i, &(start, acquired)) in arrived.iter().enumerate() {
            for &(later_start, later_acquired) in &arrived[i + 1..] {
                if later_start >= acquired {
                    break;
                }
                if later_start - start <= ARRIVAL_SLACK_US {
                    continue;
                }
                figures.waiting_pairs += 1;
                if later_acquired < acquired {
                    figures.out_of_order += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: i64 = 1_000_000;

    /// A section of worker `worker` on k0 with token `token`, held from
    /// `acquired` to `end` (µs), untold.
    fn held(worker: u32, role: Role, token: u64, acquired: i64, end: i64) -> Section {
        Section {
            holder: Holder {
                worker,
                task: 0,
                seq: token,
            },
            key: 0,
            role,
            token,
            start: Some(acquired - 10),
            acquired,
            end,
            killed: false,
            told: None,
            reason: None,
            valid_at_told: None,
            valid_end: Some(end + 500_000),
            parent: None,
        }
    }

    /// Told at `told` that a renewal found its lock gone.
    fn told(mut section: Section, told: i64) -> Section {
        section.told = Some(told);
        section.reason = Some(LossKind::NotHeld);
        section.valid_at_told = Some(told + 600_000);
        section
    }

    /// A history of `sections` on k0, removed at 50 ms; `tokens` places the
    /// removal among the tokens: (before, after, holding, checked).
    fn removed(sections: Vec<Section>, tokens: Option<(u64, u64, Vec<u64>, i64)>) -> History {
        let at = 50_000;
        History {
            lease_us: LEASE,
            permits: 2,
            sections,
            removals: vec![Removal {
                key: 0,
                at,
                how: FaultKind::ForceRelease,
            }],
            removal_tokens: tokens
                .into_iter()
                .map(|(before, after, holding, checked)| RemovalTokens {
                    key: 0,
                    at,
                    before,
                    after,
                    holding,
                    checked,
                })
                .collect(),
            ..History::default()
        }
    }

    #[test]
    fn a_co_holder_granted_before_a_removal_but_answered_after_it_was_cut_by_it() {
        // Read-write: w1 and w2 read k0 (tokens 10 and 11); a DEL at 50 ms
        // reads the counter at 11: w2 was granted before it, though its
        // reply came at 52 ms. The operator writes from 60 to 90 ms (token
        // 12); both readers are told at their next renewal (200 ms).
        let sections = || {
            vec![
                told(held(1, Role::Read, 10, 0, 300_000), 200_000),
                told(held(2, Role::Read, 11, 52_000, 300_000), 200_000),
                held(OPERATOR, Role::Exclusive, 12, 60_000, 90_000),
            ]
        };
        let figures = analyze(&removed(sections(), Some((11, 11, vec![], 50_000))));
        assert!(figures.is_safe(), "{figures:?}");
        assert_eq!(figures.removed_overlaps.len(), 2);
        assert_eq!(figures.removed_held, 1);
        // By the time replies came, w2 would have held k0 with the writer.
        let figures = analyze(&removed(sections(), None));
        assert_eq!(figures.unwarned_overlaps.len(), 1, "{figures:?}");
        assert_eq!(figures.unwarned_overlaps[0].first.worker, 2);

        // A semaphore of 2 permits: w1 and w2 (granted before, w2 answered
        // at 52 ms); after the removal the operator (token 12) and w3
        // (token 13, at 70 ms) take both permits.
        let sections = || {
            vec![
                told(held(1, Role::Permit, 10, 0, 300_000), 200_000),
                told(held(2, Role::Permit, 11, 52_000, 300_000), 200_000),
                held(OPERATOR, Role::Permit, 12, 60_000, 90_000),
                held(3, Role::Permit, 13, 70_000, 100_000),
            ]
        };
        let figures = analyze(&removed(sections(), Some((11, 11, vec![], 50_000))));
        assert!(figures.is_safe(), "{figures:?}");
        let figures = analyze(&removed(sections(), None));
        assert_eq!(figures.unwarned_overlaps.len(), 1, "{figures:?}");
        assert_eq!(figures.unwarned_overlaps[0].holders, 3);
    }

    #[test]
    fn a_holder_granted_after_a_removal_still_overlaps() {
        // The DEL at 50 ms reads the counter at 10: w2's read (token 11)
        // was granted after it, though its reply came at 45 ms, before the
        // DEL's own. The operator writes from 60 to 90 ms (token 12) while
        // w2 reads, untold: an overlap, whatever the removal did to w1.
        let sections = || {
            vec![
                told(held(1, Role::Read, 10, 0, 300_000), 200_000),
                held(2, Role::Read, 11, 45_000, 150_000),
                held(OPERATOR, Role::Exclusive, 12, 60_000, 90_000),
            ]
        };
        let figures = analyze(&removed(sections(), Some((10, 10, vec![], 50_000))));
        assert_eq!(figures.unwarned_overlaps.len(), 1, "{figures:?}");
        let overlap = &figures.unwarned_overlaps[0];
        assert_eq!((overlap.first.worker, overlap.second.worker), (2, OPERATOR));
        assert_eq!(figures.removed_overlaps.len(), 1);
        // By the time replies came, w2 would have been cut by the removal.
        let figures = analyze(&removed(sections(), None));
        assert!(figures.is_safe(), "{figures:?}");

        // Permits: w2 (token 11), the operator (12) and w3 (13), all
        // granted after the removal, hold 3 of 2 permits at once.
        let sections = vec![
            told(held(1, Role::Permit, 10, 0, 300_000), 200_000),
            held(2, Role::Permit, 11, 45_000, 150_000),
            held(OPERATOR, Role::Permit, 12, 60_000, 90_000),
            held(3, Role::Permit, 13, 70_000, 100_000),
        ];
        let figures = analyze(&removed(sections, Some((10, 10, vec![], 50_000))));
        assert_eq!(figures.unwarned_overlaps.len(), 1, "{figures:?}");
        assert_eq!(figures.unwarned_overlaps[0].holders, 3);
    }

    #[test]
    fn a_grant_after_a_removal_answered_before_its_command_returned_is_the_removals() {
        // w1 holds k0 (token 10). The DEL reads the counter at 10 and
        // returns to the orchestrator at 50 ms; w2 is granted k0 in between
        // (token 11, answered at 49 ms). w1 is told at its next renewal.
        let sections = || {
            vec![
                told(held(1, Role::Exclusive, 10, 0, 300_000), 200_000),
                held(2, Role::Exclusive, 11, 49_000, 80_000),
            ]
        };
        let figures = analyze(&removed(sections(), Some((10, 10, vec![], 50_000))));
        assert!(figures.is_safe(), "{figures:?}");
        assert_eq!(figures.removed_overlaps.len(), 1, "{figures:?}");
        assert_eq!(figures.removed_held, 1);
        // Without the tokens, w2's grant came before the DEL's reply: it
        // counts against w1's interval.
        let figures = analyze(&removed(sections(), None));
        assert_eq!(figures.unwarned_overlaps.len(), 1, "{figures:?}");
        assert_eq!(figures.unwarned_overlaps[0].second.worker, 2);

        // A semaphore of 2 permits: w1 and w3 hold them (tokens 9 and 10);
        // the DEL removes both, then w2 and w4 take them (11 and 12), all
        // answered before the DEL returned.
        let sections = vec![
            told(held(3, Role::Permit, 9, 0, 300_000), 200_000),
            told(held(1, Role::Permit, 10, 1_000, 300_000), 200_000),
            held(2, Role::Permit, 11, 48_000, 80_000),
            held(4, Role::Permit, 12, 49_000, 80_000),
        ];
        let figures = analyze(&removed(sections.clone(), Some((10, 10, vec![], 50_000))));
        assert!(figures.is_safe(), "{figures:?}");
        assert!(!figures.removed_overlaps.is_empty(), "{figures:?}");
        let figures = analyze(&removed(sections, None));
        assert!(!figures.unwarned_overlaps.is_empty(), "{figures:?}");
    }

    #[test]
    fn grants_while_a_force_release_was_on_its_way_are_judged_by_what_redis_held_after_it() {
        // The counter read 10 before the force_release and 13 after it, at
        // 51 ms, when Redis held k0 for token 13 only. w2 (token 11,
        // answered at 53 ms) was not there and had not begun releasing: it
        // was granted before the removal, which cut it. w3 (token 13,
        // answered at 49 ms) was there: granted after, so it overlaps the
        // operator's write (token 14).
        let sections = vec![
            told(held(1, Role::Read, 10, 0, 300_000), 200_000),
            told(held(2, Role::Read, 11, 53_000, 300_000), 200_000),
            held(3, Role::Read, 13, 49_000, 150_000),
            held(OPERATOR, Role::Exclusive, 14, 60_000, 90_000),
        ];
        let figures = analyze(&removed(sections, Some((10, 13, vec![13], 51_000))));
        assert_eq!(figures.unwarned_overlaps.len(), 1, "{figures:?}");
        let overlap = &figures.unwarned_overlaps[0];
        assert_eq!((overlap.first.worker, overlap.second.worker), (3, OPERATOR));

        // w4 read (token 11) and w5 wrote (token 12) from 50.2 and 50.3 ms,
        // both gone by the look at 51 ms: granted before the removal or
        // after it, Redis cannot say, so neither is taken as cut, and their
        // overlap counts.
        let sections = vec![
            told(held(1, Role::Read, 10, 0, 300_000), 200_000),
            held(4, Role::Read, 11, 50_200, 50_900),
            held(5, Role::Exclusive, 12, 50_300, 50_800),
        ];
        let figures = analyze(&removed(sections, Some((10, 13, vec![], 51_000))));
        assert_eq!(figures.unwarned_overlaps.len(), 1, "{figures:?}");
        assert_eq!(figures.unwarned_overlaps[0].overlap_us, 500);
    }
}
