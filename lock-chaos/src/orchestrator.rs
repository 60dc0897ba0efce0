//! The orchestrator: starts Redis, the proxy, the fenced resource and the
//! client processes, injects faults, and collects what everyone recorded.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_runtime::{LockClient, LockGuard, LockRequest};
use lock_testkit::{Proxy, RedisCluster, RedisServer, Revision, SentinelGroup};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

use crate::checker::{
    CrashCheck, Evicted, Fault, FaultKind, Hang, History, Holder, OPERATOR, Removal, RemovalTokens,
    Section, Stall, StuckCheck,
};
use crate::clock::{self, now_us};
use crate::options::{LockKind, Options, PERMITS, Setup};
use crate::record::{ReleaseOutcome, Role, SectionLine, WorkerLine};
use crate::resource::Resource;
use crate::rng::Rng;
use crate::worker::{PREFIX, WorkerConfig, deployment_spec};

/// Time after a crashed holder's lease before its locks must be gone.
const CRASH_SLACK: Duration = Duration::from_millis(300);

/// Facts about the run that are not figures.
#[derive(Debug, Clone, Default)]
pub struct RunInfo {
    /// `redis_version` of the server.
    pub redis_version: String,
    /// How long the run took, start to end.
    pub elapsed: Duration,
    /// Worker processes started (first ones and replacements).
    pub workers_started: u32,
    /// Connections through the proxy.
    pub proxy_connections: u64,
    /// Lines from workers that could not be parsed.
    pub garbled_lines: u64,
    /// Workers killed at the end because they did not stop in time.
    pub stragglers: u32,
    /// The commit of the workspace, and whether `lock-runtime/` differed from it.
    pub revision: String,
}

/// `git` commit of the workspace this binary was built from, best effort,
/// and whether the runtime, the fault suite or Cargo.lock had changes
/// beyond it.
fn revision() -> String {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let measured = ["lock-runtime", "lock-chaos", "Cargo.lock"];
    match lock_testkit::revision(root.as_ref(), &measured) {
        Some(Revision {
            commit,
            changed: Some(false),
        }) => format!("commit {commit}"),
        Some(Revision {
            commit,
            changed: Some(true),
        }) => {
            format!("commit {commit} with uncommitted changes")
        }
        Some(Revision {
            commit,
            changed: None,
        }) => format!("commit {commit} (git could not tell whether it had uncommitted changes)"),
        None => "an unknown commit".into(),
    }
}

/// What the worker-reading tasks collect.
#[derive(Debug, Default)]
struct Collected {
    sections: Vec<(u32, SectionLine)>,
    history: History,
    clients: HashMap<u32, String>,
    garbled: u64,
}

type Shared = Arc<Mutex<Collected>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct Worker {
    id: u32,
    child: Child,
    stdin: ChildStdin,
}

/// The Redis processes of a run.
enum Topo {
    Single(RedisServer),
    Cluster(RedisCluster),
    Sentinel(SentinelGroup),
    Redlock(Vec<RedisServer>),
}

impl Topo {
    fn start(setup: Setup) -> Topo {
        match setup {
            // `DEBUG SLEEP` stalls the server in the release-cut and
            // try-lock faults.
            Setup::Single | Setup::Eviction => Topo::Single(RedisServer::start_with(&[
                "--enable-debug-command",
                "local",
            ])),
            Setup::Cluster => Topo::Cluster(RedisCluster::start(3, 1)),
            Setup::Sentinel { .. } => Topo::Sentinel(SentinelGroup::start(2, 3)),
            Setup::Redlock => Topo::Redlock(RedisServer::start_many(5)),
        }
    }

    fn single(&mut self) -> &mut RedisServer {
        match self {
            Topo::Single(redis) => redis,
            _ => panic!("a single-server fault in a topology run"),
        }
    }

    fn cluster(&mut self) -> &mut RedisCluster {
        match self {
            Topo::Cluster(cluster) => cluster,
            _ => panic!("a cluster fault outside a cluster run"),
        }
    }

    fn sentinel(&mut self) -> &mut SentinelGroup {
        match self {
            Topo::Sentinel(group) => group,
            _ => panic!("a Sentinel fault outside a Sentinel run"),
        }
    }

    fn redlock(&mut self) -> &mut Vec<RedisServer> {
        match self {
            Topo::Redlock(masters) => masters,
            _ => panic!("a Redlock fault outside a Redlock run"),
        }
    }

    /// The ports of the servers the clients reach through a proxy of their
    /// own: the single server, or every Redlock master.
    fn proxied_ports(&self) -> Vec<u16> {
        match self {
            Topo::Single(server) => vec![server.port()],
            Topo::Redlock(masters) => masters.iter().map(RedisServer::port).collect(),
            Topo::Cluster(_) | Topo::Sentinel(_) => Vec::new(),
        }
    }

    /// How the clients reach a Cluster or a Sentinel group: directly
    /// (`None` for the topologies behind proxies).
    /// As the workers' argument (see [`deployment_spec`]).
    fn direct_deployment(&self) -> Option<String> {
        match self {
            Topo::Cluster(cluster) => Some(deployment_spec::cluster(&cluster.urls())),
            Topo::Sentinel(group) => Some(deployment_spec::sentinel(
                group.service_name(),
                &group.sentinel_urls(),
            )),
            Topo::Single(_) | Topo::Redlock(_) => None,
        }
    }

    /// A data node, for `INFO server`.
    fn any_node(&self) -> &RedisServer {
        match self {
            Topo::Single(redis) => redis,
            Topo::Cluster(cluster) => cluster.node(0),
            Topo::Sentinel(group) => &group.nodes()[0],
            Topo::Redlock(masters) => &masters[0],
        }
    }

    /// The nodes that keep the locks `k<key>` of `keys`, each with the Redis
    /// keys of those locks it keeps: the server, the node serving each
    /// lock's slot, the master the Sentinels name, or every running Redlock
    /// master (each with every key).
    fn groups(&self, keys: &[u32]) -> Vec<(&RedisServer, Vec<String>)> {
        let all = || {
            keys.iter()
                .flat_map(|&k| holder_keys(k))
                .collect::<Vec<_>>()
        };
        match self {
            Topo::Single(redis) => vec![(redis, all())],
            Topo::Sentinel(group) => vec![(group.master(), all())],
            Topo::Redlock(masters) => masters
                .iter()
                .filter(|m| m.is_running())
                .map(|m| (m, all()))
                .collect(),
            Topo::Cluster(cluster) => {
                let mut groups: Vec<(usize, Vec<String>)> = Vec::new();
                for &k in keys {
                    let master = cluster.master_for_key(&lock_key(k));
                    match groups.iter_mut().find(|(i, _)| *i == master) {
                        Some((_, held)) => held.extend(holder_keys(k)),
                        None => groups.push((master, holder_keys(k).to_vec())),
                    }
                }
                groups
                    .into_iter()
                    .map(|(i, held)| (cluster.node(i), held))
                    .collect()
            }
        }
    }
}

/// Everything a run needs while it injects faults.
struct Run {
    options: Options,
    kind: LockKind,
    setup: Setup,
    redis: Arc<Mutex<Topo>>,
    /// The single server's proxy, or one per Redlock master.
    proxies: Vec<Proxy>,
    /// What the workers connect to (see [`deployment_spec`]).
    deployment: String,
    resource: Resource,
    exe: std::path::PathBuf,
    rng: Rng,
    workers: Vec<Worker>,
    next_id: u32,
    collected: Shared,
    events: mpsc::UnboundedReceiver<(u32, WorkerLine)>,
    events_tx: mpsc::UnboundedSender<(u32, WorkerLine)>,
    /// Death time of every worker that did not stop by itself.
    deaths: HashMap<u32, i64>,
    faults: Vec<Fault>,
    crashes: Vec<CrashCheck>,
    unexpected_exits: u32,
    /// Keys Redis evicted (eviction faults).
    evictions: Vec<Evicted>,
    /// The operator's client, connected to the single server directly: it
    /// force-releases locks and takes them after a removal.
    operator: Option<LockClient>,
    /// Sections of the operator's client so far.
    operator_seq: u64,
    /// Locks removed from Redis while held.
    removals: Vec<Removal>,
    /// Where they stand among the fencing tokens of their locks.
    removal_tokens: Vec<RemovalTokens>,
    /// Dropped releases and try-locks that gave up.
    stuck_checks: Vec<StuckCheck>,
    /// Until when the restart quarantine may keep locks closed after the
    /// last restart of the single server (see `open_from`).
    closed_until: i64,
}

/// Runs blocking work on the single Redis server (pause, restart, commands).
async fn with_redis<T: Send + 'static>(
    redis: &Arc<Mutex<Topo>>,
    f: impl FnOnce(&mut RedisServer) -> T + Send + 'static,
) -> Result<T, String> {
    let redis = redis.clone();
    tokio::task::spawn_blocking(move || f(lock(&redis).single()))
        .await
        .map_err(|err| format!("redis-server control failed: {err}"))
}

/// The fencing counters on `node` (name and value), if it answers.
fn fence_counters(node: &RedisServer) -> Option<BTreeMap<String, i64>> {
    // Counters only: not their `:born` markers, nor the `:up` marks the
    // restart check leaves after a save (`fence:up`, `fence:{T}:up`).
    let list = "local out = {} \
                for _, k in ipairs(redis.call('KEYS', ARGV[1])) do \
                  local tail = string.match(k, ':(%a+)$') \
                  if tail ~= 'born' and tail ~= 'up' and redis.call('TYPE', k)['ok'] == 'string' then \
                    table.insert(out, k) \
                    table.insert(out, redis.call('GET', k)) \
                  end \
                end \
                return out";
    let counters = format!("{}fence:*", crate::worker::PREFIX);
    let reply = node
        .try_cli(&["EVAL", list, "0", &counters], Duration::from_secs(1))
        .ok()?;
    if reply.starts_with("ERR") {
        return None;
    }
    Some(counters_in(&reply))
}

/// The counters in `fence_counters`' reply (name and value lines): a value
/// that is not a number is some other key under the prefix, skipped, so
/// that it cannot hide every counter.
fn counters_in(reply: &str) -> BTreeMap<String, i64> {
    let lines: Vec<&str> = reply.lines().collect();
    lines
        .chunks_exact(2)
        .filter_map(|pair| Some((pair[0].to_owned(), pair[1].trim().parse().ok()?)))
        .collect()
}

/// Runs blocking work on the topology; a panic (lock-testkit's way of
/// failing) becomes the first line of its message.
async fn with_topo<T: Send + 'static>(
    topo: &Arc<Mutex<Topo>>,
    f: impl FnOnce(&mut Topo) -> T + Send + 'static,
) -> Result<T, String> {
    let topo = topo.clone();
    tokio::task::spawn_blocking(move || f(&mut lock(&topo)))
        .await
        .map_err(|err| {
            if !err.is_panic() {
                return err.to_string();
            }
            let panic = err.into_panic();
            let text = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "panic".to_owned());
            let first = text.lines().next().unwrap_or_default();
            first.chars().take(300).collect()
        })
}

/// One command to Redis, directly (not through the proxy); `None` on error.
async fn redis_cli(redis: &Arc<Mutex<Topo>>, args: Vec<String>) -> Option<String> {
    with_redis(redis, move |r| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        r.try_cli(&args, Duration::from_secs(1)).ok()
    })
    .await
    .ok()
    .flatten()
}

fn lock_key(key: u32) -> String {
    format!("{PREFIX}{{k{key}}}")
}

/// The Redis keys where holders of the lock `k<key>` are recorded, whatever
/// its kind: the lock hash (exclusive, fair, multi-key, writer) or the
/// semaphore's permits, and the read-write lock's readers (sorted sets).
fn holder_keys(key: u32) -> [String; 2] {
    [lock_key(key), format!("{}:readers", lock_key(key))]
}

/// The Redis Cluster hash slot of `key`: the CRC16 (XMODEM) of its hash
/// tag, or of the whole key without one, modulo 16384. The runtime keeps
/// each lock's fencing counter in its lock's slot.
fn key_slot(key: &str) -> u16 {
    let tag = key.find('{').and_then(|open| {
        let rest = &key[open + 1..];
        rest.find('}')
            .filter(|&len| len > 0)
            .map(|len| &rest[..len])
    });
    crc16::State::<crc16::XMODEM>::calculate(tag.unwrap_or(key).as_bytes()) % 16_384
}

/// The fencing counter every grant of the lock `k<key>` draws its token
/// from (the one in the lock's slot), and its value, if it exists.
fn fence_counter(node: &RedisServer, key: u32) -> Option<(String, u64)> {
    let slot = key_slot(&lock_key(key));
    let (name, value) = fence_counters(node)?
        .into_iter()
        .find(|(name, _)| key_slot(name) == slot)?;
    Some((name, u64::try_from(value).ok()?))
}

/// Deletes `KEYS[2..]` (a raw `DEL`) and reads the fencing counter
/// `KEYS[1]` at that moment: returns the number of keys deleted and the
/// counter (-1: none).
const DELETE_READING_COUNTER: &str = "\
local counter = redis.call('GET', KEYS[1]) or '-1'
return {redis.call('DEL', unpack(KEYS, 2)), counter}";

/// Reads the fencing counter `KEYS[1]` and the tokens of every holder of
/// the lock `KEYS[2]` (its hash's, or its semaphore's permits' in
/// `KEYS[3]`) and of its readers (`KEYS[4]`, tokens in `KEYS[5]`), at once.
const COUNTER_AND_HOLDERS: &str = "\
local out = {redis.call('GET', KEYS[1]) or '-1'}
local function places(set, tokens)
  if redis.call('TYPE', set)['ok'] ~= 'zset' or redis.call('TYPE', tokens)['ok'] ~= 'hash' then
    return
  end
  for _, owner in ipairs(redis.call('ZRANGE', set, 0, -1)) do
    out[#out + 1] = redis.call('HGET', tokens, 'f:' .. owner) or '0'
  end
end
local kind = redis.call('TYPE', KEYS[2])['ok']
if kind == 'hash' then
  out[#out + 1] = redis.call('HGET', KEYS[2], 'fence') or '0'
elseif kind == 'zset' then
  places(KEYS[2], KEYS[3])
end
places(KEYS[4], KEYS[5])
return out";

/// The fencing counter `counter` of the lock `k<key>` and the tokens of
/// the lock's holders in Redis, read at once; `None` if it cannot be read.
fn holding_after(node: &RedisServer, key: u32, counter: &str) -> Option<(u64, Vec<u64>)> {
    let lock = lock_key(key);
    let keys = [
        counter.to_owned(),
        lock.clone(),
        format!("{lock}:holders"),
        format!("{lock}:readers"),
        format!("{lock}:readers:holders"),
    ];
    let mut args = vec!["EVAL", COUNTER_AND_HOLDERS, "5"];
    args.extend(keys.iter().map(String::as_str));
    let reply = node.try_cli(&args, Duration::from_secs(1)).ok()?;
    let mut lines = reply.lines();
    let after = lines.next()?.trim().parse::<u64>().ok()?;
    let holding = lines
        .map(|t| t.trim().parse::<u64>().ok())
        .collect::<Option<_>>()?;
    Some((after, holding))
}

/// Counts the places in `KEYS` held by owners whose id starts with
/// `ARGV[1]`: a hash's `owner`, or a sorted set's members whose lease (the
/// score, ms) has not run out. Returns that count and the longest time one
/// of them still has (ms; -1 if one has no expiry, -2 if there is none).
const HELD_BY: &str = "\
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n, longest, forever = 0, -2, false
local function mine(id) return string.sub(id, 1, #ARGV[1]) == ARGV[1] end
for _, key in ipairs(KEYS) do
  local kind = redis.call('TYPE', key)['ok']
  if kind == 'hash' then
    local owner = redis.call('HGET', key, 'owner')
    if owner and mine(owner) then
      n = n + 1
      local pttl = redis.call('PTTL', key)
      if pttl < 0 then forever = true else longest = math.max(longest, pttl) end
    end
  elseif kind == 'zset' then
    local held = redis.call('ZRANGEBYSCORE', key, '(' .. now, '+inf', 'WITHSCORES')
    for i = 1, #held, 2 do
      if mine(held[i]) then
        n = n + 1
        longest = math.max(longest, tonumber(held[i + 1]) - now)
      end
    end
  end
end
if forever then longest = -1 end
return {n, longest}";

/// Runs [`HELD_BY`] for the client id `client` on the locks `locks`, on
/// every node that keeps them. Redlock: the most places held on one master
/// (masters that do not answer are skipped); elsewhere the sum.
async fn held_by(redis: &Arc<Mutex<Topo>>, client: &str, locks: Vec<u32>) -> Option<(u32, i64)> {
    let client = client.to_owned();
    with_topo(redis, move |topo| {
        let redlock = matches!(topo, Topo::Redlock(_));
        let mut result: Option<(u32, i64)> = None;
        for (node, keys) in topo.groups(&locks) {
            let count = keys.len().to_string();
            let mut args = vec!["EVAL", HELD_BY, &count];
            args.extend(keys.iter().map(String::as_str));
            args.push(&client);
            let parsed = node
                .try_cli(&args, Duration::from_secs(1))
                .ok()
                .and_then(|reply| {
                    let mut lines = reply.lines();
                    let n: u32 = lines.next()?.trim().parse().ok()?;
                    let longest: i64 = lines.next()?.trim().parse().ok()?;
                    Some((n, longest))
                });
            let (n, longest) = match parsed {
                Some(found) => found,
                None if redlock => continue,
                None => return None,
            };
            result = Some(match result {
                None => (n, longest),
                Some((n0, l0)) => (
                    if redlock { n0.max(n) } else { n0 + n },
                    if l0 == -1 || longest == -1 {
                        -1
                    } else {
                        l0.max(longest)
                    },
                ),
            });
        }
        result
    })
    .await
    .ok()
    .flatten()
}

/// Lock keys of `k0..k<keys>` that exist, on every node that keeps them.
async fn leftover(redis: &Arc<Mutex<Topo>>, keys: u32) -> Option<u32> {
    with_topo(redis, move |topo| {
        let locks: Vec<u32> = (0..keys).collect();
        let mut total = 0;
        for (node, held) in topo.groups(&locks) {
            // One lock's keys (they share a slot) per command.
            for one in held.chunks(2) {
                let mut args = vec!["EXISTS"];
                args.extend(one.iter().map(String::as_str));
                let reply = node.try_cli(&args, Duration::from_secs(1)).ok()?;
                total += reply.parse::<u32>().ok()?;
            }
        }
        Some(total)
    })
    .await
    .ok()
    .flatten()
}

/// Distinct indices below `n`, `count` of them.
fn pick(rng: &mut Rng, n: usize, count: usize) -> Vec<usize> {
    let mut all: Vec<usize> = (0..n).collect();
    rng.shuffle(&mut all);
    all.truncate(count);
    all.sort_unstable();
    all
}

fn scaled(d: Duration, percent: u64) -> Duration {
    d * percent as u32 / 100
}

/// Lock script calls `node` has run so far, if it answers (see
/// [`RedisServer::script_calls`]). Fencing counters cannot count grants:
/// tokens follow the server clock.
fn lock_script_calls(node: &RedisServer) -> Option<u64> {
    node.try_script_calls(Duration::from_secs(1)).ok()
}

/// First step of the lagging Sentinel kill: stops the master's replicas and
/// drops their links. Returns what was done (the start of the fault's
/// detail) and the lock script calls the master had run by then.
fn cut_off_replicas(group: &SentinelGroup) -> (String, Option<u64>) {
    // Stop the replicas first, then cut their links: a stopped replica
    // cannot reconnect and catch up from the backlog, and nothing written
    // after the cut is on its way to it. They stay stopped until the master
    // is dead.
    let master = group.current_master_port();
    for node in group.nodes().iter().filter(|n| n.port() != master) {
        node.pause();
    }
    let args = ["CLIENT", "KILL", "TYPE", "replica"];
    let cut = match group.master().try_cli(&args, Duration::from_secs(1)) {
        Ok(n) => format!("{n} replicas stopped and their links dropped, "),
        Err(err) => format!("replica links not dropped ({err}), "),
    };
    // What the replicas will have: every script run before the cut.
    (cut, lock_script_calls(group.master()))
}

/// Kills the Sentinel group's master and resumes the replicas
/// [`cut_off_replicas`] stopped; after a lagging kill, also tells a Sentinel
/// to fail over. Returns the old master's port, what the forced failover
/// said (empty if none) and the lock script calls the master had run.
fn kill_sentinel_master(group: &mut SentinelGroup, lagging: bool) -> (u16, String, Option<u64>) {
    let counted = lock_script_calls(group.master());
    let old = group.kill_master();
    for node in group.nodes().iter().filter(|n| n.is_paused()) {
        node.resume();
    }
    // After the lagging kill, a Sentinel is told to fail over at once (no
    // 2 s wait for the master to be judged down), so the new master can be
    // in place within about a lease: what the old one granted in its last
    // moments may still be in use there.
    let forced = lagging.then(|| {
        let service = group.service_name().to_owned();
        let args = ["SENTINEL", "FAILOVER", service.as_str()];
        match group.sentinels()[0].try_cli(&args, Duration::from_secs(1)) {
            Ok(reply) => format!("SENTINEL FAILOVER: {reply}; "),
            Err(err) => format!("SENTINEL FAILOVER failed ({err}); "),
        }
    });
    (old, forced.unwrap_or_default(), counted)
}

/// The end of a Sentinel kill's detail: the failover from port `old` (and
/// the `lost` lock script calls no replica saw, if counted), then the
/// restart of the old master.
fn sentinel_failover_outcome(
    old: u16,
    over: Result<u16, String>,
    took: Duration,
    lost: Option<i64>,
    restarted: Result<(), String>,
) -> String {
    let mut detail = String::new();
    match over {
        Ok(new) => {
            detail += &format!("port {old} → port {new} after {} ms", took.as_millis());
            if let Some(lost) = lost {
                detail += &format!(
                    ", {lost} lock script calls after the cut (acquisitions, renewals, releases), seen by no replica"
                );
            }
        }
        Err(err) => detail += &format!("port {old} killed, no failover: {err}"),
    }
    if let Err(err) = restarted {
        detail += &format!("; restart failed: {err}");
    } else {
        detail += &format!("; port {old} restarted (empty)");
    }
    detail
}

impl Run {
    async fn spawn_worker(&mut self) -> Result<(), String> {
        let id = self.next_id;
        self.next_id += 1;
        let config = WorkerConfig {
            id,
            url: self.deployment.clone(),
            resource: self.resource.addr(),
            keys: self.options.keys,
            tasks: self.options.tasks,
            lease: self.options.lease,
            wait: self.options.wait,
            command_timeout: self.options.command_timeout,
            restart_quarantine: self.options.quarantine(),
            strict_quarantine: self.options.strict_quarantine,
            seed: self.options.seed,
            kind: self.kind,
            min_replicas: self.setup.min_replicas(),
            allow_eviction: self.setup == Setup::Eviction,
        };
        let mut child = Command::new(&self.exe)
            .args(config.to_args())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|err| format!("cannot start worker process: {err}"))?;
        let stdin = child.stdin.take().ok_or("worker has no stdin")?;
        let stdout = child.stdout.take().ok_or("worker has no stdout")?;
        let collected = self.collected.clone();
        let events = self.events_tx.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                collect(&collected, &events, id, &line);
            }
        });
        self.workers.push(Worker { id, child, stdin });
        Ok(())
    }

    /// Replaces workers that exited without being told to.
    async fn reap(&mut self) -> Result<(), String> {
        let mut exited = Vec::new();
        for (i, worker) in self.workers.iter_mut().enumerate() {
            if let Ok(Some(status)) = worker.child.try_wait() {
                eprintln!("worker {} exited by itself ({status})", worker.id);
                self.deaths.insert(worker.id, now_us());
                exited.push(i);
            }
        }
        for i in exited.into_iter().rev() {
            self.workers.remove(i);
            self.unexpected_exits += 1;
            self.spawn_worker().await?;
        }
        Ok(())
    }

    /// Waits for a line of `kind` from `worker`, up to `limit`.
    async fn expect(
        &mut self,
        worker: u32,
        limit: Duration,
        wanted: fn(&WorkerLine) -> bool,
    ) -> Option<WorkerLine> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some((id, line))) if id == worker && wanted(&line) => return Some(line),
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return None,
            }
        }
    }

    fn drain_events(&mut self) {
        while self.events.try_recv().is_ok() {}
    }

    async fn order(&mut self, index: usize, order: &str) -> bool {
        let worker = &mut self.workers[index];
        worker
            .stdin
            .write_all(format!("{order}\n").as_bytes())
            .await
            .is_ok()
    }

    async fn inject(&mut self, kind: FaultKind) -> Result<(), String> {
        let lease = self.options.lease;
        let start = now_us();
        // When the fault ended, if that was before `inject` returns.
        let mut ended = None;
        let detail = match kind {
            FaultKind::RedisPauseShort | FaultKind::RedisPauseLong => {
                let percent = if kind == FaultKind::RedisPauseShort {
                    self.rng.range(10, 80)
                } else {
                    self.rng.range(120, 300)
                };
                let d = scaled(lease, percent);
                with_redis(&self.redis, |r| r.pause()).await?;
                tokio::time::sleep(d).await;
                with_redis(&self.redis, |r| r.resume()).await?;
                format!("{} ms", d.as_millis())
            }
            FaultKind::RedisRestart => {
                with_redis(&self.redis, |r| r.restart()).await?;
                "at once".to_owned()
            }
            FaultKind::RedisRestartDelayed => {
                let down = lease + Duration::from_millis(500);
                with_redis(&self.redis, |r| r.kill()).await?;
                tokio::time::sleep(down).await;
                with_redis(&self.redis, |r| r.restart()).await?;
                format!("down {} ms", down.as_millis())
            }
            FaultKind::ClientKill => {
                let pubsub = self.rng.below(2) == 0;
                let kill = |t: &str| ["CLIENT", "KILL", "TYPE", t].map(str::to_owned).to_vec();
                let normal = redis_cli(&self.redis, kill("normal")).await;
                let mut detail = format!("normal: {}", normal.as_deref().unwrap_or("?"));
                if pubsub {
                    let killed = redis_cli(&self.redis, kill("pubsub")).await;
                    detail += &format!(", pubsub: {}", killed.as_deref().unwrap_or("?"));
                }
                detail
            }
            FaultKind::ClientPause => {
                let d = scaled(lease, self.rng.range(20, 200));
                let ms = d.as_millis().to_string();
                redis_cli(&self.redis, vec!["CLIENT".into(), "PAUSE".into(), ms]).await;
                tokio::time::sleep(d).await;
                format!("{} ms", d.as_millis())
            }
            FaultKind::ProxyDelay => {
                let delay =
                    Duration::from_millis(self.rng.range(20, lease.as_millis() as u64 * 6 / 10));
                let span = Duration::from_millis(self.rng.range(1000, 2500));
                self.proxies[0].set_delay(delay);
                tokio::time::sleep(span).await;
                self.proxies[0].set_delay(Duration::ZERO);
                format!("{} ms for {} ms", delay.as_millis(), span.as_millis())
            }
            FaultKind::ProxyCut => {
                let refuse = scaled(lease, self.rng.range(10, 150));
                self.proxies[0].set_refuse(true);
                self.proxies[0].cut();
                tokio::time::sleep(refuse).await;
                self.proxies[0].set_refuse(false);
                format!("refused {} ms", refuse.as_millis())
            }
            FaultKind::ProxyBlackhole => {
                let d = scaled(lease, self.rng.range(150, 300));
                self.proxies[0].blackhole(true);
                tokio::time::sleep(d).await;
                self.proxies[0].blackhole(false);
                let lifted = now_us();
                ended = Some(lifted);
                // Give the clients time to come back before the next fault,
                // so that how they do is the black hole's doing.
                let back = self.await_recovery(lifted, lease * 3).await;
                format!(
                    "{} ms; {back} of {} clients took a lock within {} ms of the lift",
                    d.as_millis(),
                    self.workers.len(),
                    (now_us() - lifted) / 1000
                )
            }
            FaultKind::RedisRestartStale => self.restart_stale().await?,
            FaultKind::Eviction => self.evict().await?,
            FaultKind::WorkerStall => {
                let index = self.rng.below(self.workers.len() as u64) as usize;
                let id = self.workers[index].id;
                let d = scaled(lease, self.rng.range(150, 300));
                self.drain_events();
                self.order(index, &format!("STALL {}", d.as_millis())).await;
                let limit = d + self.options.wait + Duration::from_secs(5);
                let stalled = self
                    .expect(id, limit, |l| matches!(l, WorkerLine::Stalled { .. }))
                    .await;
                match stalled {
                    Some(_) => format!("worker {id}, {} ms", d.as_millis()),
                    None => format!(
                        "worker {id}, {} ms (no critical section came)",
                        d.as_millis()
                    ),
                }
            }
            FaultKind::WorkerKill => self.kill_worker().await?,
            FaultKind::ForceRelease | FaultKind::KeyDelete => self.remove_held(kind).await?,
            FaultKind::ReleaseCut => {
                let (detail, end) = self.release_cut().await?;
                ended = end;
                detail
            }
            FaultKind::TryLockStall => {
                let (detail, end) = self.trylock_stall().await?;
                ended = end;
                detail
            }
            topology => self.inject_topology(topology).await,
        };
        if matches!(
            kind,
            FaultKind::RedisRestart | FaultKind::RedisRestartDelayed | FaultKind::RedisRestartStale
        ) {
            // The scripts read the uptime in whole seconds, one less than
            // INFO says: a quarantine lasts up to a second longer.
            self.closed_until =
                now_us() + clock::micros(self.options.quarantine() + Duration::from_secs(1));
        }
        self.faults.push(Fault {
            kind,
            start,
            end: ended.unwrap_or_else(now_us),
            detail,
        });
        Ok(())
    }

    /// Waits until every worker has taken a lock after `since`, or `limit`;
    /// returns how many did.
    async fn await_recovery(&mut self, since: i64, limit: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let back: HashSet<u32> = lock(&self.collected)
                .sections
                .iter()
                .filter(|(_, s)| s.acquired > since)
                .map(|(worker, _)| *worker)
                .collect();
            let count = self.workers.iter().filter(|w| back.contains(&w.id)).count();
            if count == self.workers.len() || tokio::time::Instant::now() >= deadline {
                return count;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `SAVE`s a snapshot, lets the workers go on for 0.5–2 s, then kills
    /// Redis and starts it again from that snapshot (the dump file is then
    /// removed, so that later restarts start empty again).
    async fn restart_stale(&mut self) -> Result<String, String> {
        let gap = Duration::from_millis(self.rng.range(500, 2000));
        let saved = with_redis(&self.redis, |r| {
            let saved = r.try_cli(&["SAVE"], Duration::from_secs(5));
            (saved, fence_counters(r))
        })
        .await?;
        let (saved, at_save) = saved;
        tokio::time::sleep(gap).await;
        let (at_kill, after, removed) = with_redis(&self.redis, |r| {
            let at_kill = fence_counters(r);
            r.restart();
            let after = fence_counters(r);
            let removed = std::fs::remove_file(r.dir().join("dump.rdb"));
            (at_kill, after, removed)
        })
        .await?;
        let mut detail = match saved {
            Ok(reply) if reply == "OK" => format!("SAVE, {} ms later SIGKILL", gap.as_millis()),
            Ok(reply) => format!(
                "SAVE failed ({reply}), {} ms later SIGKILL",
                gap.as_millis()
            ),
            Err(err) => format!("SAVE failed ({err}), {} ms later SIGKILL", gap.as_millis()),
        };
        detail += " and restart from the snapshot";
        match (at_save, at_kill, after) {
            (Some(at_save), Some(at_kill), Some(after)) => {
                // How far each counter went back: its value at the kill
                // minus its value once the snapshot was loaded.
                let back: Vec<i64> = at_kill
                    .iter()
                    .map(|(name, &v)| v - after.get(name).copied().unwrap_or(0))
                    .filter(|&d| d > 0)
                    .collect();
                let moved = at_kill
                    .iter()
                    .filter(|(name, v)| at_save.get(*name) != Some(*v))
                    .count();
                detail += &format!(
                    "; {} of {} fencing counters moved after the SAVE, {} came back lower \
                     (by up to {})",
                    moved,
                    at_kill.len(),
                    back.len(),
                    back.iter().max().copied().unwrap_or(0)
                );
            }
            _ => detail += "; fencing counters unknown",
        }
        if let Err(err) = removed {
            detail += &format!(" (dump.rdb not removed: {err})");
        }
        Ok(detail)
    }

    /// Makes Redis evict: `volatile-lru` and a `maxmemory` just above what
    /// is used, then filler keys with TTLs until a lock's key is evicted
    /// (3 s at most); then no limit again, and the filler deleted. Evicted
    /// keys are learnt from keyspace notifications.
    async fn evict(&mut self) -> Result<String, String> {
        let (port, events) = with_redis(&self.redis, |r| {
            let events = r
                .try_cli(
                    &["CONFIG", "GET", "notify-keyspace-events"],
                    Duration::from_secs(1),
                )
                .ok()
                .and_then(|reply| reply.lines().nth(1).map(str::to_owned))
                .unwrap_or_default();
            let set = ["CONFIG", "SET", "notify-keyspace-events", "Ee"];
            let _ = r.try_cli(&set, Duration::from_secs(1));
            (r.port(), events)
        })
        .await?;
        let found: Arc<Mutex<Vec<Evicted>>> = Arc::default();
        let (ready_tx, ready) = tokio::sync::oneshot::channel();
        let watcher = tokio::spawn(watch_evictions(port, found.clone(), ready_tx));
        let watching = tokio::time::timeout(Duration::from_secs(2), ready)
            .await
            .is_ok_and(|r| r.is_ok());
        let seen = found.clone();
        let pressure = with_redis(&self.redis, move |r| {
            let cli = |args: &[&str]| r.try_cli(args, Duration::from_secs(2)).unwrap_or_default();
            let field = |section: &str, name: &str| -> Option<u64> {
                cli(&["INFO", section])
                    .lines()
                    .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                    .and_then(|v| v.trim().parse().ok())
            };
            let evicted_before = field("stats", "evicted_keys");
            let used = field("memory", "used_memory").unwrap_or(0);
            let limit = used + FILLER_MARGIN;
            cli(&["CONFIG", "SET", "maxmemory-policy", "volatile-lru"]);
            cli(&["CONFIG", "SET", "maxmemory", &limit.to_string()]);
            let began = std::time::Instant::now();
            let mut written = 0u64;
            let size = FILLER_SIZE.to_string();
            while began.elapsed() < Duration::from_secs(3) {
                let first = written.to_string();
                let batch = FILLER_BATCH.to_string();
                cli(&["EVAL", FILL, "0", &first, &batch, &size]);
                written += FILLER_BATCH;
                let holder_key_evicted = lock(&seen).iter().any(|e| e.holder_key);
                if holder_key_evicted {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            let took = began.elapsed();
            cli(&["CONFIG", "SET", "maxmemory", "0"]);
            cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
            let deleted = cli(&["EVAL", UNFILL, "0"]);
            let evicted_after = field("stats", "evicted_keys");
            let evicted = evicted_before
                .zip(evicted_after)
                .map(|(before, after)| after - before);
            (used, limit, written, took, deleted, evicted)
        })
        .await;
        // Notifications of the last evictions may still be on their way.
        tokio::time::sleep(Duration::from_millis(50)).await;
        watcher.abort();
        let restored = with_redis(&self.redis, move |r| {
            let set = ["CONFIG", "SET", "notify-keyspace-events", events.as_str()];
            r.try_cli(&set, Duration::from_secs(1)).is_ok()
        })
        .await?;
        let (used, limit, written, took, deleted, evicted) = pressure?;
        let found = std::mem::take(&mut *lock(&found));
        let locks: Vec<String> = found
            .iter()
            .filter(|e| e.lock.is_some())
            .map(|e| e.name.strip_prefix(PREFIX).unwrap_or(&e.name).to_owned())
            .collect();
        let fencing = found
            .iter()
            .filter(|e| e.name.starts_with(&format!("{PREFIX}fence:")))
            .count();
        // The counters themselves, not their `:born` markers.
        let counters = found
            .iter()
            .filter(|e| {
                e.name.starts_with(&format!("{PREFIX}fence:")) && !e.name.ends_with(":born")
            })
            .count();
        let mut detail = format!(
            "maxmemory {} KiB (used {} KiB), {written} filler keys of {} KiB in {} ms; \
             evicted keys: {}, of them lock keys {}{}, fencing keys {fencing} (counters \
             {counters}); limit lifted, {deleted} filler keys deleted",
            limit / 1024,
            used / 1024,
            FILLER_SIZE / 1024,
            took.as_millis(),
            evicted.map_or("?".to_owned(), |n| n.to_string()),
            locks.len(),
            if locks.is_empty() {
                String::new()
            } else {
                format!(" ({})", locks.join(", "))
            },
        );
        if !watching {
            detail += " (keyspace notifications not received)";
        }
        if !restored {
            detail += " (notify-keyspace-events not restored)";
        }
        self.evictions.extend(found);
        Ok(detail)
    }

    /// Parks a task of a random worker inside a critical section, kills the
    /// worker there, checks that its locks run out within a lease, and starts
    /// a new worker.
    async fn kill_worker(&mut self) -> Result<String, String> {
        let index = self.rng.below(self.workers.len() as u64) as usize;
        let id = self.workers[index].id;
        self.drain_events();
        self.order(index, "PARK").await;
        let limit = self.options.wait + Duration::from_secs(5);
        let parked = self
            .expect(id, limit, |l| matches!(l, WorkerLine::Parked { .. }))
            .await;
        let Some(WorkerLine::Parked { key, token, .. }) = parked else {
            return Ok(format!("worker {id}: no critical section came; not killed"));
        };
        // Let renewals run for a while before the kill.
        let held = Duration::from_millis(self.rng.range(0, self.options.lease.as_millis() as u64));
        tokio::time::sleep(held).await;
        let mut worker = self.workers.remove(index);
        let _ = worker.child.kill().await;
        let killed_at = now_us();
        self.deaths.insert(id, killed_at);
        let client = lock(&self.collected).clients.get(&id).cloned();

        let at_kill = match &client {
            Some(client) => held_by(&self.redis, client, vec![key]).await,
            None => None,
        };
        let owned_at_kill = at_kill.is_some_and(|(n, _)| n > 0);
        self.spawn_worker().await?;

        let check_at = killed_at + clock::micros(self.options.lease + CRASH_SLACK);
        tokio::time::sleep(Duration::from_micros((check_at - now_us()).max(0) as u64)).await;
        let every_key: Vec<u32> = (0..self.options.keys).collect();
        let held_after = match &client {
            Some(client) => held_by(&self.redis, client, every_key)
                .await
                .map(|(n, _)| n),
            None => None,
        };
        // The time the dead holder's place had left (-2: it held none).
        let pttl_ms = at_kill.map(|(_, longest)| longest);
        self.crashes.push(CrashCheck {
            worker: id,
            key,
            killed_at,
            pttl_ms,
            owned_at_kill,
            held_after_lease: held_after,
        });
        Ok(format!(
            "worker {id} holding k{key} (token {token}) after {} ms; PTTL {}",
            held.as_millis(),
            pttl_ms.map_or("?".to_owned(), |p| format!("{p} ms"))
        ))
    }

    /// The operator's client: connected to the single server directly (not
    /// through the proxy), with the workers' prefix and settings.
    async fn connect_operator(&self) -> Result<LockClient, String> {
        let url = with_redis(&self.redis, |r| r.url()).await?;
        let options = &self.options;
        LockClient::builder(url.as_str())
            .name("operator")
            .prefix(PREFIX)
            .default_lease(options.lease)
            .command_timeout(options.command_timeout)
            .connect_timeout(options.command_timeout)
            .restart_quarantine(options.quarantine())
            .connect()
            .await
            .map_err(|err| format!("cannot connect the operator's client: {}", err.chain()))
    }

    /// A request of the operator's client for the lock `k<key>` alone, of
    /// the run's kind, and its role (as the workers' probes take it).
    fn operator_request(&self, key: u32) -> Option<(LockRequest, Role)> {
        let client = self.operator.as_ref()?;
        let name = format!("k{key}");
        Some(match self.kind {
            LockKind::Exclusive | LockKind::Multi => (client.lock(name), Role::Exclusive),
            LockKind::Fair => (client.fair_lock(name), Role::Exclusive),
            LockKind::Semaphore => (client.semaphore(name, PERMITS), Role::Permit),
            LockKind::ReadWrite => (client.write_lock(name), Role::Exclusive),
        })
    }

    /// Records a section of the operator's client (worker [`OPERATOR`]).
    fn operator_section(&mut self, key: u32, role: Role, guard: &LockGuard, times: [i64; 3]) {
        self.operator_seq += 1;
        let [start, acquired, release] = times;
        let valid_end = clock::instant_us(guard.valid_until());
        let lost = guard.is_lost();
        let line = SectionLine {
            task: 0,
            seq: self.operator_seq,
            key,
            role,
            token: guard.fence(),
            start,
            acquired,
            release,
            told: lost.then_some(release),
            reason: None,
            valid_at_told: lost.then_some(valid_end),
            valid_end: Some(valid_end),
            parent: None,
        };
        lock(&self.collected).sections.push((OPERATOR, line));
    }

    /// Force-releases (`ForceRelease`) or deletes (`KeyDelete`) the lock of
    /// a critical section while its body runs, then takes the lock with the
    /// operator's client and holds it 10–60 ms. The holder, told to,
    /// re-enters its lock 40–150 ms after its body began.
    async fn remove_held(&mut self, kind: FaultKind) -> Result<String, String> {
        let index = self.rng.below(self.workers.len() as u64) as usize;
        let id = self.workers[index].id;
        let delay = self.rng.range(40, 150);
        let hold = Duration::from_millis(self.rng.range(10, 60));
        self.drain_events();
        self.order(index, &format!("REENTER {delay}")).await;
        let limit = self.options.wait + Duration::from_secs(5);
        let parked = self
            .expect(id, limit, |l| matches!(l, WorkerLine::Reentering { .. }))
            .await;
        let Some(WorkerLine::Reentering { key, token, .. }) = parked else {
            return Ok(format!("worker {id}: no critical section came"));
        };
        let name = format!("k{key}");
        // A look first: a connection an earlier fault cut is found dead by
        // this call, and replaced, instead of failing the removal (which is
        // not sent twice: a second one could take the lock from a later
        // holder). Before the counter is read, so as not to widen the gap
        // between the two.
        if let (FaultKind::ForceRelease, Some(operator)) = (kind, &self.operator) {
            let _ = operator.inspect(&name).await;
        }
        // The fencing counter of the lock's slot and its value now, to
        // place the removal among the tokens (see RemovalTokens).
        let counter = with_redis(&self.redis, move |r| fence_counter(r, key))
            .await
            .ok()
            .flatten();
        let mut at_removal = None;
        let removed = match kind {
            FaultKind::ForceRelease => match &self.operator {
                Some(operator) => operator
                    .force_release(&name)
                    .await
                    .map_err(|err| err.chain().to_string()),
                None => Err("no operator client".to_owned()),
            },
            // The DEL reads the counter in the same script.
            _ => match &counter {
                Some((counter, _)) => {
                    let mut args = vec!["EVAL".to_owned(), DELETE_READING_COUNTER.to_owned()];
                    args.push("3".to_owned());
                    args.push(counter.clone());
                    args.extend(holder_keys(key));
                    let reply = redis_cli(&self.redis, args).await;
                    let mut lines = reply.as_deref().unwrap_or_default().lines();
                    match lines.next().map(|n| n.trim().parse::<u32>()) {
                        Some(Ok(n)) => {
                            at_removal = lines.next().and_then(|c| c.trim().parse::<u64>().ok());
                            Ok(n > 0)
                        }
                        _ => Err("DEL failed".to_owned()),
                    }
                }
                None => {
                    let mut args = vec!["DEL".to_owned()];
                    args.extend(holder_keys(key));
                    match redis_cli(&self.redis, args).await {
                        Some(n) => Ok(n.trim().parse::<u32>().unwrap_or(0) > 0),
                        None => Err("DEL failed".to_owned()),
                    }
                }
            },
        };
        let at = now_us();
        let tokens = match (kind, counter) {
            (FaultKind::ForceRelease, Some((counter, before))) => {
                let after = with_redis(&self.redis, move |r| holding_after(r, key, &counter))
                    .await
                    .ok()
                    .flatten();
                after.map(|(after, holding)| RemovalTokens {
                    key,
                    at,
                    before,
                    after,
                    holding,
                    checked: now_us(),
                })
            }
            _ => at_removal.map(|counter| RemovalTokens {
                key,
                at,
                before: counter,
                after: counter,
                holding: Vec::new(),
                checked: at,
            }),
        };
        let how = if kind == FaultKind::ForceRelease {
            "force_release"
        } else {
            "DEL"
        };
        let mut detail = format!("worker {id} holding k{key} (token {token}): {how} ");
        match removed {
            Ok(true) => {
                self.removals.push(Removal { key, at, how: kind });
                detail += "removed it";
                // Where the removal stands among the tokens, which the
                // checker orders grants by (otherwise by the clock).
                match &tokens {
                    Some(t) if t.before == t.after => {
                        detail += &format!(" (fencing counter {})", t.before)
                    }
                    Some(t) => {
                        detail +=
                            &format!(" (fencing counter {} before, {} after)", t.before, t.after)
                    }
                    None => detail += " (fencing counter unread)",
                }
                self.removal_tokens.extend(tokens);
            }
            Ok(false) => detail += "found nothing",
            Err(err) => detail += &format!("failed ({err})"),
        }
        // The operator takes the lock while the holder goes on.
        let Some((request, role)) = self.operator_request(key) else {
            return Ok(detail);
        };
        let start = now_us();
        match request.wait(Duration::from_millis(300)).acquire().await {
            Ok(guard) => {
                let acquired = now_us();
                tokio::time::sleep(hold).await;
                let release = now_us();
                self.operator_section(key, role, &guard, [start, acquired, release]);
                let released = guard.release().await;
                detail += &format!(
                    "; the operator took it {} ms later (token {}) and held it {} ms{}",
                    (acquired - at) / 1000,
                    self.operator_seq_token(),
                    hold.as_millis(),
                    if released.is_ok() {
                        ""
                    } else {
                        " (its release failed)"
                    }
                );
            }
            Err(err) => detail += &format!("; the operator could not take it: {}", err.chain()),
        }
        // Let the holder re-enter and finish before the next fault.
        tokio::time::sleep(Duration::from_millis(delay + 50)).await;
        Ok(detail)
    }

    /// The token of the operator's last section.
    fn operator_seq_token(&self) -> u64 {
        lock(&self.collected)
            .sections
            .iter()
            .rev()
            .find(|(worker, _)| *worker == OPERATOR)
            .map_or(0, |(_, s)| s.token)
    }

    /// Stalls the server for `d`: `DEBUG SLEEP` (`debug`) or the proxy
    /// paused (black-holed); returns when the stall ended and how it was
    /// made. Once the stall has begun, gives worker `index` the `order`.
    async fn stall(
        &mut self,
        debug: bool,
        d: Duration,
        index: usize,
        order: &str,
    ) -> (i64, String) {
        if debug {
            let secs = format!("{:.3}", d.as_secs_f64());
            let sleeping = {
                let redis = self.redis.clone();
                tokio::task::spawn_blocking(move || {
                    let mut r = lock(&redis);
                    r.single()
                        .try_cli(&["DEBUG", "SLEEP", &secs], Duration::from_secs(5))
                })
            };
            // Let the command reach the server first.
            tokio::time::sleep(Duration::from_millis(3)).await;
            self.order(index, order).await;
            let reply = sleeping.await;
            let end = now_us();
            let how = match reply {
                Ok(Ok(reply)) if reply.starts_with("OK") => "DEBUG SLEEP".to_owned(),
                Ok(Ok(reply)) => format!("DEBUG SLEEP refused ({reply})"),
                Ok(Err(err)) => format!("DEBUG SLEEP failed ({err})"),
                Err(err) => format!("DEBUG SLEEP failed ({err})"),
            };
            (end, how)
        } else {
            let began = tokio::time::Instant::now();
            self.proxies[0].blackhole(true);
            self.order(index, order).await;
            tokio::time::sleep_until(began + d).await;
            self.proxies[0].blackhole(false);
            (now_us(), "proxy paused".to_owned())
        }
    }

    /// When a lock that should be free from `at` can be taken: then, or
    /// once the restart quarantine after the last restart is surely over.
    /// A call that gave up while the quarantine kept every lock closed
    /// left nothing taken; the time until the quarantine ends is the
    /// quarantine's, not the call's.
    fn open_from(&self, at: i64) -> i64 {
        at.max(self.closed_until)
    }

    /// After a call that gave up on `k<key>` at `since`: the operator's
    /// client (another client than the worker's) takes the lock, waiting up
    /// to two leases, holds it 2 ms and releases it, so that someone wants
    /// the lock while the checker measures how long it stays taken.
    /// Returns when the lock was next taken by anyone after `since`.
    async fn probe(&mut self, key: u32, since: i64) -> Option<i64> {
        if let Some((request, role)) = self.operator_request(key) {
            let start = now_us();
            if let Ok(guard) = request.wait(self.options.lease * 2).acquire().await {
                let acquired = now_us();
                tokio::time::sleep(Duration::from_millis(2)).await;
                self.operator_section(key, role, &guard, [start, acquired, now_us()]);
                let _ = guard.release().await;
            }
        }
        lock(&self.collected)
            .sections
            .iter()
            .filter(|(_, s)| s.key == key && s.acquired > since && s.parent.is_none())
            .map(|(_, s)| s.acquired)
            .min()
    }

    /// Orders a worker's next release to run under a 0–20 ms timeout, in
    /// 2 of 3 while the server is stalled 60–250 ms (the holder says when it
    /// is about to release, the stall begins, then it is told to go on); if
    /// it was dropped,
    /// records when the lock should have been free and waits until it is
    /// taken again (up to two leases). Returns the detail and when the
    /// fault ended.
    async fn release_cut(&mut self) -> Result<(String, Option<i64>), String> {
        let index = self.rng.below(self.workers.len() as u64) as usize;
        let id = self.workers[index].id;
        let after = self.rng.range(0, 20);
        let mode = self.rng.below(3);
        let d = Duration::from_millis(self.rng.range(60, 250));
        self.drain_events();
        self.order(index, &format!("CUT {after}")).await;
        let limit = self.options.wait + Duration::from_secs(3);
        let releasing = self
            .expect(id, limit, |l| matches!(l, WorkerLine::Releasing { .. }))
            .await;
        if releasing.is_none() {
            return Ok((format!("worker {id}: no release came"), None));
        }
        let (stall_end, how) = match mode {
            0 => {
                self.order(index, "GO").await;
                (None, "no stall".to_owned())
            }
            mode => {
                let (end, how) = self.stall(mode == 1, d, index, "GO").await;
                (Some(end), format!("{how} {} ms", d.as_millis()))
            }
        };
        let cut = self
            .expect(id, limit, |l| matches!(l, WorkerLine::ReleaseCut { .. }))
            .await;
        let Some(WorkerLine::ReleaseCut {
            key, at, outcome, ..
        }) = cut
        else {
            return Ok((format!("worker {id}: no release came ({how})"), stall_end));
        };
        let mut detail = format!("worker {id}, k{key}, timeout {after} ms, {how}: ");
        match outcome {
            Some(outcome @ (ReleaseOutcome::Ok | ReleaseOutcome::Lost)) => {
                let said = match outcome {
                    ReleaseOutcome::Ok => "ok",
                    _ => "lost",
                };
                detail += &format!("the release returned {said} in time");
            }
            // A release that failed (Redis stalled past the command
            // timeout) may not have run: the client sends it again, and
            // the lock must be free soon after the stall, as after a
            // release dropped midway.
            Some(ReleaseOutcome::Error) | None => {
                let failed = outcome.is_some();
                let free_from = self.open_from(stall_end.map_or(at, |end| end.max(at)));
                self.stuck_checks.push(StuckCheck {
                    key,
                    what: FaultKind::ReleaseCut,
                    gave_up: at,
                    free_from,
                });
                let again = self.probe(key, at).await;
                detail += &format!(
                    "{}; {}",
                    if failed {
                        "returned an error"
                    } else {
                        "dropped"
                    },
                    probed(again, free_from)
                );
            }
        }
        Ok((detail, stall_end))
    }

    /// Stalls the server 80–250 ms and orders a try-lock of a random lock
    /// meanwhile: through the worker's client with the short command
    /// timeout, or dropped by a 1–20 ms timeout. If it gave up, records
    /// when the lock should have been free and waits until it is taken
    /// again (up to two leases).
    async fn trylock_stall(&mut self) -> Result<(String, Option<i64>), String> {
        let index = self.rng.below(self.workers.len() as u64) as usize;
        let id = self.workers[index].id;
        let key = self.rng.below(u64::from(self.options.keys)) as u32;
        let debug = self.rng.below(2) == 0;
        let drop_after = if self.rng.below(2) == 0 {
            0
        } else {
            self.rng.range(1, 20)
        };
        let d = Duration::from_millis(self.rng.range(80, 250));
        self.drain_events();
        let order = format!("TRY {key} {drop_after}");
        let (stall_end, how) = self.stall(debug, d, index, &order).await;
        let limit = self.options.wait + Duration::from_secs(3);
        let tried = self
            .expect(id, limit, |l| matches!(l, WorkerLine::TryLock { .. }))
            .await;
        let way = if drop_after == 0 {
            format!(
                "short command timeout ({} ms)",
                crate::worker::SHORT_COMMAND_TIMEOUT.as_millis()
            )
        } else {
            format!("dropped after {drop_after} ms")
        };
        let mut detail = format!("worker {id}, k{key}, {way}, {how} {} ms: ", d.as_millis());
        let Some(WorkerLine::TryLock { at, outcome, .. }) = tried else {
            detail += "no answer from the worker";
            return Ok((detail, Some(stall_end)));
        };
        detail += &format!("{outcome:?}");
        if outcome.gave_up() {
            let free_from = self.open_from(stall_end.max(at));
            self.stuck_checks.push(StuckCheck {
                key,
                what: FaultKind::TryLockStall,
                gave_up: at,
                free_from,
            });
            let again = self.probe(key, at).await;
            detail += &format!("; {}", probed(again, free_from));
        }
        Ok((detail, Some(stall_end)))
    }

    /// Injects a fault of a topology run; returns its detail (failures to
    /// control the topology are described there, not fatal).
    async fn inject_topology(&mut self, kind: FaultKind) -> String {
        // Drawn first for every kind, even those that use no key: moving it
        // would change the faults a seed gives.
        let key = self.rng.below(u64::from(self.options.keys)) as u32;
        match kind {
            FaultKind::ClusterFailover => self.cluster_failover(key).await,
            FaultKind::ClusterMasterKill => self.cluster_master_kill(key).await,
            FaultKind::SentinelMasterKill => self.sentinel_master_kill(false).await,
            FaultKind::SentinelLaggingKill => self.sentinel_master_kill(true).await,
            FaultKind::RedlockPause => self.redlock_stop(true).await,
            FaultKind::RedlockKill => self.redlock_stop(false).await,
            FaultKind::RedlockPartition => self.redlock_partition().await,
            other => format!("{other} is not a topology fault; skipped"),
        }
    }

    /// Cluster: a planned `CLUSTER FAILOVER` of the master of `k<key>`.
    async fn cluster_failover(&mut self, key: u32) -> String {
        let began = tokio::time::Instant::now();
        let done = with_topo(&self.redis, move |t| {
            let cluster = t.cluster();
            cluster.wait_until_ok();
            let master = cluster.master_for_key(&lock_key(key));
            (master, cluster.failover(master))
        })
        .await;
        match done {
            Ok((old, new)) => format!(
                "k{key}: node {old} → node {new}, {} ms",
                began.elapsed().as_millis()
            ),
            Err(err) => format!("k{key}: failed: {err}"),
        }
    }

    /// Cluster: kills the master of `k<key>`, waits for a replica to take
    /// over, and restarts the killed node (it rejoins as a replica).
    async fn cluster_master_kill(&mut self, key: u32) -> String {
        let killed = with_topo(&self.redis, move |t| {
            let cluster = t.cluster();
            cluster.wait_until_ok();
            let master = cluster.master_for_key(&lock_key(key));
            cluster.kill_master(master);
            master
        })
        .await;
        let old = match killed {
            Ok(old) => old,
            Err(err) => return format!("k{key}: failed before the kill: {err}"),
        };
        let began = tokio::time::Instant::now();
        let over = with_topo(&self.redis, move |t| t.cluster().wait_for_failover(old)).await;
        let took = began.elapsed();
        let restarted = with_topo(&self.redis, move |t| t.cluster().restart_node(old)).await;
        let over = match over {
            Ok(new) => format!("node {new} took over after {} ms", took.as_millis()),
            Err(err) => format!("no takeover: {err}"),
        };
        let restarted = match restarted {
            Ok(()) => "rejoined as a replica".to_owned(),
            Err(err) => format!("restart failed: {err}"),
        };
        format!("k{key}: node {old} killed; {over}; node {old} {restarted}")
    }

    /// Sentinel: kills the master, waits for the failover and restarts the
    /// old master (empty). `lagging`: first cuts the replicas off and lets
    /// the master go on alone for a moment, then forces the failover, and
    /// counts the lock script calls no replica saw.
    async fn sentinel_master_kill(&mut self, lagging: bool) -> String {
        let prepared = with_topo(&self.redis, move |t| {
            let group = t.sentinel();
            group.wait_until_ok();
            if lagging {
                cut_off_replicas(group)
            } else {
                (String::new(), None)
            }
        })
        .await;
        let (mut detail, replicated) = match prepared {
            Ok(prepared) => prepared,
            Err(err) => return format!("failed before the kill: {err}"),
        };
        if lagging {
            let gap = Duration::from_millis(self.rng.range(400, 900));
            tokio::time::sleep(gap).await;
            detail += &format!("master killed {} ms later; ", gap.as_millis());
        }
        let killed = with_topo(&self.redis, move |t| {
            kill_sentinel_master(t.sentinel(), lagging)
        })
        .await;
        let (old, counted) = match killed {
            Ok((old, forced, counted)) => {
                detail += &forced;
                (old, counted)
            }
            Err(err) => return format!("{detail}kill failed: {err}"),
        };
        let began = tokio::time::Instant::now();
        let over = with_topo(&self.redis, move |t| t.sentinel().wait_for_failover(old)).await;
        let took = began.elapsed();
        let restarted = with_topo(&self.redis, move |t| {
            let group = t.sentinel();
            let index = group.nodes().iter().position(|n| n.port() == old);
            let index = index.expect("the killed master is one of the nodes");
            group.node_mut(index).restart();
        })
        .await;
        // What the failover lost: the lock scripts the old master ran after
        // the cut (acquisitions, renewals, releases), whose writes no
        // replica saw. Without `min_replicas` the acquisitions among them
        // were grants; with it, attempts the missing replicas made the
        // client give back.
        let lost = counted
            .zip(replicated)
            .map(|(died, cut)| died as i64 - cut as i64);
        detail += &sentinel_failover_outcome(old, over, took, lost, restarted);
        detail
    }

    /// Redlock: pauses (`pause`) or kills one or two masters, then resumes
    /// or restarts them (empty) later.
    async fn redlock_stop(&mut self, pause: bool) -> String {
        let lease = self.options.lease;
        let count = 1 + self.rng.below(2) as usize;
        let masters = pick(&mut self.rng, 5, count);
        let down = if pause {
            scaled(lease, self.rng.range(50, 300))
        } else {
            lease + Duration::from_millis(500)
        };
        let stopped = masters.clone();
        let stop = with_topo(&self.redis, move |t| {
            for &i in &stopped {
                if pause {
                    t.redlock()[i].pause();
                } else {
                    t.redlock()[i].kill();
                }
            }
        })
        .await;
        tokio::time::sleep(down).await;
        let stopped = masters.clone();
        let back = with_topo(&self.redis, move |t| {
            for &i in &stopped {
                if pause {
                    t.redlock()[i].resume();
                } else {
                    t.redlock()[i].restart();
                }
            }
        })
        .await;
        let what = if pause { "paused" } else { "down" };
        let mut detail = format!("masters {masters:?} {what} {} ms", down.as_millis());
        for err in [stop.err(), back.err()].into_iter().flatten() {
            detail += &format!(" (failed: {err})");
        }
        detail
    }

    /// Redlock: cuts one master's proxy and refuses connections for a while.
    async fn redlock_partition(&mut self) -> String {
        let master = self.rng.below(5) as usize;
        let d = scaled(self.options.lease, self.rng.range(100, 300));
        let proxy = &self.proxies[master];
        proxy.set_refuse(true);
        proxy.cut();
        tokio::time::sleep(d).await;
        proxy.set_refuse(false);
        format!("master {master} cut off {} ms", d.as_millis())
    }

    /// Tells every worker to stop, and kills those that do not in time.
    async fn stop_workers(&mut self) -> u32 {
        for i in 0..self.workers.len() {
            self.order(i, "STOP").await;
        }
        let limit = self.options.wait + self.options.command_timeout * 2 + Duration::from_secs(3);
        let mut stragglers = 0;
        for mut worker in std::mem::take(&mut self.workers) {
            match tokio::time::timeout(limit, worker.child.wait()).await {
                Ok(Ok(status)) if status.success() => {}
                Ok(_) => {
                    self.deaths.insert(worker.id, now_us());
                    self.unexpected_exits += 1;
                }
                Err(_) => {
                    let _ = worker.child.kill().await;
                    self.deaths.insert(worker.id, now_us());
                    stragglers += 1;
                }
            }
        }
        stragglers
    }
}

/// Memory above what Redis uses when the eviction fault sets `maxmemory`.
const FILLER_MARGIN: u64 = 256 * 1024;
/// Size of one filler value.
const FILLER_SIZE: u64 = 8 * 1024;
/// Filler keys written per command.
const FILLER_BATCH: u64 = 8;

/// Writes `ARGV[2]` filler keys `filler:<n>` of `ARGV[3]` bytes, with a
/// TTL (so that `volatile-lru` may evict them), numbered from `ARGV[1]`.
const FILL: &str = "\
local value = string.rep('x', tonumber(ARGV[3]))
for i = 0, tonumber(ARGV[2]) - 1 do
  redis.call('SET', 'filler:' .. (tonumber(ARGV[1]) + i), value, 'EX', 60)
end
return 1";

/// Deletes every filler key; returns how many there were.
const UNFILL: &str = "\
local keys = redis.call('KEYS', 'filler:*')
for _, key in ipairs(keys) do redis.call('UNLINK', key) end
return #keys";

/// The lock a key of the suite belongs to (`chaos:{k<i>}` and its companion
/// keys), and whether it is the lock's own key.
pub fn lock_of(name: &str) -> Option<(u32, bool)> {
    let rest = name.strip_prefix(PREFIX)?.strip_prefix("{k")?;
    let (index, tail) = rest.split_once('}')?;
    Some((index.parse().ok()?, tail.is_empty()))
}

/// Subscribes (directly, not through the proxy) to the notifications of
/// evicted keys and records them until aborted; `ready` fires once
/// subscribed.
async fn watch_evictions(
    port: u16,
    found: Arc<Mutex<Vec<Evicted>>>,
    ready: tokio::sync::oneshot::Sender<()>,
) -> std::io::Result<()> {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    let channel = "__keyevent@0__:evicted";
    let subscribe = format!(
        "*2\r\n$9\r\nSUBSCRIBE\r\n${}\r\n{channel}\r\n",
        channel.len()
    );
    write.write_all(subscribe.as_bytes()).await?;
    read_push(&mut read).await?;
    let _ = ready.send(());
    loop {
        let push = read_push(&mut read).await?;
        let at = now_us();
        if let [kind, _, key] = push.as_slice()
            && kind == "message"
        {
            let of = lock_of(key);
            lock(&found).push(Evicted {
                name: key.clone(),
                lock: of.map(|(index, _)| index),
                holder_key: of.is_some_and(|(_, own)| own),
                at,
            });
        }
    }
}

/// Reads one RESP array of bulk strings and integers (a pub/sub push).
async fn read_push<R: tokio::io::AsyncBufRead + Unpin>(
    read: &mut R,
) -> std::io::Result<Vec<String>> {
    async fn line<R: tokio::io::AsyncBufRead + Unpin>(read: &mut R) -> std::io::Result<String> {
        let mut line = String::new();
        if read.read_line(&mut line).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(line.trim_end().to_owned())
    }
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "unexpected reply");
    let head = line(read).await?;
    let count: usize = head
        .strip_prefix('*')
        .and_then(|n| n.parse().ok())
        .ok_or_else(bad)?;
    let mut items = Vec::with_capacity(count);
    for _ in 0..count {
        let item = line(read).await?;
        match item.strip_prefix('$') {
            Some(len) => {
                let len: usize = len.parse().map_err(|_| bad())?;
                let mut bytes = vec![0u8; len + 2];
                read.read_exact(&mut bytes).await?;
                bytes.truncate(len);
                items.push(String::from_utf8_lossy(&bytes).into_owned());
            }
            None => items.push(item.trim_start_matches(':').to_owned()),
        }
    }
    Ok(items)
}

fn collect(
    collected: &Shared,
    events: &mpsc::UnboundedSender<(u32, WorkerLine)>,
    worker: u32,
    text: &str,
) {
    let Some(line) = WorkerLine::parse(text) else {
        lock(collected).garbled += 1;
        return;
    };
    let mut c = lock(collected);
    match &line {
        WorkerLine::Hello { client } => {
            c.clients.insert(worker, client.clone());
        }
        WorkerLine::Section(section) => c.sections.push((worker, section.clone())),
        WorkerLine::Released { outcome, .. } => {
            *c.history.releases.entry(*outcome).or_default() += 1
        }
        WorkerLine::Failed { kind, .. } => *c.history.failures.entry(*kind).or_default() += 1,
        WorkerLine::Hung {
            key,
            call,
            start,
            limit_ms,
            ..
        } => c.history.hangs.push(Hang {
            worker,
            call: *call,
            key: *key,
            start: *start,
            limit_ms: *limit_ms,
        }),
        WorkerLine::Stalled { start, end } => c.history.stalls.push(Stall {
            worker,
            start: *start,
            end: *end,
        }),
        WorkerLine::Cancelled { how, .. } => *c.history.cancelled.entry(*how).or_default() += 1,
        WorkerLine::Exit { held } => c.history.exits.push((worker, *held)),
        WorkerLine::ReleaseCut { outcome, .. } => {
            *c.history.cut_releases.entry(*outcome).or_default() += 1
        }
        WorkerLine::TryLock { outcome, .. } => {
            *c.history.try_locks.entry(*outcome).or_default() += 1
        }
        WorkerLine::Parked { .. }
        | WorkerLine::Reentering { .. }
        | WorkerLine::Releasing { .. } => {}
    }
    drop(c);
    if matches!(
        line,
        WorkerLine::Hello { .. }
            | WorkerLine::Stalled { .. }
            | WorkerLine::Parked { .. }
            | WorkerLine::Reentering { .. }
            | WorkerLine::Releasing { .. }
            | WorkerLine::ReleaseCut { .. }
            | WorkerLine::TryLock { .. }
    ) {
        let _ = events.send((worker, line));
    }
}

/// A fault plan: every kind in turn, shuffled anew each round (with its
/// own generator, so that the plan does not depend on the faults' random
/// parameters). In a topology run, topology faults alternate with the
/// others, and the first round starts with the first topology fault listed
/// (so that even a short run has it). In a single-Redis run, the first
/// round starts with [`FaultKind::FIRST`], so that the first kind of lock
/// (exclusive, unless `--kind` says otherwise) meets them even in a short
/// run.
struct Plan {
    kinds: Vec<FaultKind>,
    queue: Vec<FaultKind>,
    topology: bool,
    rounds: u32,
    rng: Rng,
}

impl Plan {
    fn next(&mut self) -> FaultKind {
        if self.queue.is_empty() {
            self.queue = self.kinds.clone();
            self.rng.shuffle(&mut self.queue);
            if self.topology {
                let (mut topo, mut rest): (Vec<_>, Vec<_>) = self
                    .queue
                    .iter()
                    .partition(|k| FaultKind::TOPOLOGY.contains(k));
                if self.rounds == 0 {
                    topo.sort_by_key(|k| self.kinds.iter().position(|x| x == k));
                }
                let mut order = Vec::new();
                while !topo.is_empty() || !rest.is_empty() {
                    if !topo.is_empty() {
                        order.push(topo.remove(0));
                    }
                    if !rest.is_empty() {
                        order.push(rest.remove(0));
                    }
                }
                order.reverse();
                self.queue = order;
            } else if self.rounds == 0 {
                // The queue is popped from its end: put these last.
                for first in FaultKind::FIRST.iter().rev() {
                    if let Some(i) = self.queue.iter().position(|k| k == first) {
                        let kind = self.queue.remove(i);
                        self.queue.push(kind);
                    }
                }
            }
            self.rounds += 1;
        }
        self.queue.pop().expect("refilled above")
    }
}

impl Plan {
    /// The plan of a run: `--faults` for a single-Redis run, the setup's
    /// own faults otherwise; the first `skip` faults already passed.
    fn new(options: &Options, setup: Setup, skip: usize) -> Plan {
        let mut plan = Plan {
            kinds: if setup == Setup::Single {
                options.faults.clone()
            } else {
                setup.faults()
            },
            queue: Vec::new(),
            topology: setup != Setup::Single,
            rounds: 0,
            rng: Rng::new(options.seed, 1),
        };
        for _ in 0..skip {
            plan.next();
        }
        plan
    }
}

/// Runs the whole suite and returns what it recorded. `skip`: faults of
/// the fault plan that earlier runs injected. A single-Redis run goes on
/// with the plan where the previous one stopped, so that short runs of
/// several kinds of lock together inject every kind of fault.
pub async fn run(
    options: &Options,
    kind: LockKind,
    setup: Setup,
    skip: usize,
) -> Result<(History, RunInfo), String> {
    let started = now_us();
    let (mut run, redis_version) = Run::start(options, kind, setup).await?;
    run.start_workers().await?;
    let mut plan = Plan::new(options, setup, skip);
    run.inject_faults(&mut plan, started).await?;
    let stopped_at = now_us();
    let stragglers = run.stop_workers().await;

    // Every lock must be free a lease after the last holder stopped.
    tokio::time::sleep(options.lease + CRASH_SLACK).await;
    let leftover = leftover(&run.redis, options.keys).await;
    let (history, garbled_lines) = run.history(leftover, stopped_at);

    let info = RunInfo {
        redis_version,
        elapsed: Duration::from_micros((now_us() - started) as u64),
        workers_started: run.next_id - 1,
        proxy_connections: run.proxies.iter().map(Proxy::connections).sum(),
        garbled_lines,
        stragglers,
        revision: revision(),
    };
    Ok((history, info))
}

/// `redis_version` of a data node of the run, or `?`.
async fn redis_version(redis: &Arc<Mutex<Topo>>) -> String {
    let info_server = with_topo(redis, |t| {
        t.any_node()
            .try_cli(&["INFO", "server"], Duration::from_secs(1))
            .ok()
    })
    .await
    .ok()
    .flatten();
    info_server
        .as_deref()
        .and_then(|info| info.lines().find_map(|l| l.strip_prefix("redis_version:")))
        .unwrap_or("?")
        .trim()
        .to_owned()
}

/// A proxy in front of each of `ports`.
async fn start_proxies(ports: Vec<u16>) -> Result<Vec<Proxy>, String> {
    let mut proxies = Vec::new();
    for port in ports {
        let proxy = Proxy::start(port)
            .await
            .map_err(|err| format!("cannot start the proxy: {err}"))?;
        proxies.push(proxy);
    }
    Ok(proxies)
}

impl Run {
    /// Starts the Redis processes of `setup`, their proxies and the fenced
    /// resource (no workers yet); also returns the servers'
    /// `redis_version`.
    async fn start(
        options: &Options,
        kind: LockKind,
        setup: Setup,
    ) -> Result<(Run, String), String> {
        let redis = tokio::task::spawn_blocking(move || Topo::start(setup))
            .await
            .map_err(|err| format!("cannot start redis-server: {err}"))?;
        let ports = redis.proxied_ports();
        let direct = redis.direct_deployment();
        let redis = Arc::new(Mutex::new(redis));
        let redis_version = redis_version(&redis).await;
        let proxies = start_proxies(ports).await?;
        let deployment = match (direct, setup) {
            (Some(deployment), _) => deployment,
            (None, Setup::Redlock) => {
                deployment_spec::redlock(&proxies.iter().map(Proxy::url).collect::<Vec<_>>())
            }
            (None, _) => proxies[0].url(),
        };
        let resource = Resource::start()
            .await
            .map_err(|err| format!("cannot start the fenced resource: {err}"))?;
        let exe =
            std::env::current_exe().map_err(|err| format!("cannot find this binary: {err}"))?;
        let (events_tx, events) = mpsc::unbounded_channel();
        let run = Run {
            options: options.clone(),
            kind,
            setup,
            redis,
            proxies,
            deployment,
            resource,
            exe,
            rng: Rng::new(options.seed, 0),
            workers: Vec::new(),
            next_id: 1,
            collected: Shared::default(),
            events,
            events_tx,
            deaths: HashMap::new(),
            faults: Vec::new(),
            crashes: Vec::new(),
            unexpected_exits: 0,
            evictions: Vec::new(),
            operator: None,
            operator_seq: 0,
            removals: Vec::new(),
            removal_tokens: Vec::new(),
            stuck_checks: Vec::new(),
            closed_until: 0,
        };
        let mut run = run;
        if setup == Setup::Single {
            run.operator = Some(run.connect_operator().await?);
        }
        Ok((run, redis_version))
    }

    /// Starts the workers, waits until every client is connected, then
    /// lets the load settle.
    async fn start_workers(&mut self) -> Result<(), String> {
        let clients = self.options.clients as usize;
        for _ in 0..clients {
            self.spawn_worker().await?;
        }
        let mut hello = HashSet::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while hello.len() < clients {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some((id, WorkerLine::Hello { .. }))) => {
                    hello.insert(id);
                }
                Ok(Some(_)) => {}
                _ => return Err("client processes did not connect within 20 s".into()),
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok(())
    }

    /// Injects the faults of `plan`, one after the other with a pause
    /// between them, for the run's `--duration` (none starts too close to
    /// its end), replacing workers that exited; progress on stderr every
    /// 15 s (`started`: when the run started).
    async fn inject_faults(&mut self, plan: &mut Plan, started: i64) -> Result<(), String> {
        let faults_end = now_us() + clock::micros(self.options.faults_for(self.setup));
        // The longest fault takes about this long; none starts that close to the end.
        let longest = clock::micros(self.options.lease * 4 + self.options.wait);
        let mut last_report = now_us();
        while now_us() + longest < faults_end {
            self.reap().await?;
            let kind = plan.next();
            self.inject(kind).await?;
            let gap = Duration::from_millis(self.rng.range(200, 500));
            tokio::time::sleep(gap).await;
            if now_us() - last_report > 15_000_000 {
                last_report = now_us();
                let done = lock(&self.collected).sections.len();
                eprintln!(
                    "  {:>4.0} s: {} faults, {} critical sections",
                    (now_us() - started) as f64 / 1e6,
                    self.faults.len(),
                    done
                );
            }
        }
        tokio::time::sleep(Duration::from_micros((faults_end - now_us()).max(0) as u64)).await;
        Ok(())
    }

    /// What the run recorded, once the workers have stopped (at
    /// `stopped_at`) and `leftover` lock keys were counted; also the
    /// number of worker lines that could not be parsed.
    fn history(&mut self, leftover: Option<u32>, stopped_at: i64) -> (History, u64) {
        let writes = self.resource.log();
        let collected = std::mem::take(&mut *lock(&self.collected));
        let mut history = collected.history;
        history.lease_us = clock::micros(self.options.lease);
        history.permits = PERMITS;
        history.writes = writes;
        history.faults = std::mem::take(&mut self.faults);
        history.crashes = std::mem::take(&mut self.crashes);
        history.leftover = leftover;
        history.unexpected_exits = self.unexpected_exits;
        history.evictions = std::mem::take(&mut self.evictions);
        history.removals = std::mem::take(&mut self.removals);
        history.removal_tokens = std::mem::take(&mut self.removal_tokens);
        history.stuck_checks = std::mem::take(&mut self.stuck_checks);
        history.stopped_at = Some(stopped_at);
        history.sections = sections(&collected.sections, &history.writes, &self.deaths);
        (history, collected.garbled)
    }
}

/// What the probe of a lock left by a cut-short call saw (`again`, when it
/// took the lock, in µs like `free_from`, when the lock should have been
/// free). The probe waits its turn behind the workers: the report's figure
/// for the lock staying taken by nobody is when anyone took it.
fn probed(again: Option<i64>, free_from: i64) -> String {
    match again {
        Some(t) => format!(
            "the probe took it {} ms after it should have been free",
            (t - free_from).max(0) / 1000
        ),
        None => "the probe did not take it within two leases".to_owned(),
    }
}

/// Critical sections: those their holders reported, plus those of killed
/// workers, known from their begin markers and ended by their death.
fn sections(
    reported: &[(u32, SectionLine)],
    writes: &[crate::checker::Write],
    deaths: &HashMap<u32, i64>,
) -> Vec<Section> {
    // Keyed by holder and key: a multi-key section has one record per key.
    let mut sections: BTreeMap<(Holder, u32), Section> = BTreeMap::new();
    for (worker, s) in reported {
        let holder = Holder {
            worker: *worker,
            task: s.task,
            seq: s.seq,
        };
        sections.insert(
            (holder, s.key),
            Section {
                holder,
                key: s.key,
                role: s.role,
                token: s.token,
                start: Some(s.start),
                acquired: s.acquired,
                end: s.release,
                killed: false,
                told: s.told,
                reason: s.reason,
                valid_at_told: s.valid_at_told,
                valid_end: s.valid_end,
                parent: s.parent.map(|seq| Holder {
                    worker: *worker,
                    task: s.task,
                    seq,
                }),
            },
        );
    }
    for write in writes {
        if sections.contains_key(&(write.holder, write.key)) {
            continue;
        }
        let Some(&died) = deaths.get(&write.holder.worker) else {
            continue;
        };
        sections.insert(
            (write.holder, write.key),
            Section {
                holder: write.holder,
                key: write.key,
                role: write.role,
                token: write.token,
                start: None,
                acquired: write.acquired,
                end: died,
                killed: true,
                told: None,
                reason: None,
                valid_at_told: None,
                valid_end: None,
                parent: None,
            },
        );
    }
    sections.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::{counters_in, key_slot};

    #[test]
    fn a_value_that_is_not_a_counter_hides_no_counter() {
        let reply =
            "chaos:fence\n1795825415623644\nchaos:fence:up\n1795825400:2000\nchaos:fence:{k1}\n7\n";
        let counters = counters_in(reply);
        assert_eq!(counters.len(), 2, "{counters:?}");
        assert_eq!(counters["chaos:fence"], 1_795_825_415_623_644);
        assert_eq!(counters["chaos:fence:{k1}"], 7);
        assert!(counters_in("").is_empty());
    }

    #[test]
    fn key_slots_are_redis_cluster_slots() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(key_slot("123456789"), 0x31C3);
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
        // An empty tag: the whole key.
        assert_eq!(key_slot("foo{}{bar}"), 8363);
        assert_eq!(key_slot("chaos:{k3}"), key_slot("k3"));
    }
}
