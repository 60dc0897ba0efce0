//! The orchestrator: starts Redis, the proxy, the fenced resource and the
//! client processes, injects faults, and collects what everyone recorded.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_testkit::RedisServer;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

use crate::checker::{CrashCheck, Fault, FaultKind, Hang, History, Holder, Section, Stall};
use crate::clock::{self, now_us};
use crate::options::{LockKind, Options, PERMITS};
use crate::proxy::Proxy;
use crate::record::{SectionLine, WorkerLine};
use crate::resource::Resource;
use crate::rng::Rng;
use crate::worker::{PREFIX, WorkerConfig};

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

/// `git` commit of the workspace this binary was built from, best effort.
fn revision() -> String {
    let repo = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(args)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    match (
        git(&["rev-parse", "--short", "HEAD"]),
        git(&["status", "--porcelain", "--", "lock-runtime"]),
    ) {
        (Some(commit), Some(changes)) if changes.is_empty() => format!("commit {commit}"),
        (Some(commit), Some(_)) => format!("commit {commit} with uncommitted changes"),
        _ => "an unknown commit".into(),
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

/// Everything a run needs while it injects faults.
struct Run {
    options: Options,
    kind: LockKind,
    redis: Arc<Mutex<RedisServer>>,
    proxy: Proxy,
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
}

/// Runs blocking work on the Redis server (pause, restart, commands).
async fn with_redis<T: Send + 'static>(
    redis: &Arc<Mutex<RedisServer>>,
    f: impl FnOnce(&mut RedisServer) -> T + Send + 'static,
) -> Result<T, String> {
    let redis = redis.clone();
    tokio::task::spawn_blocking(move || f(&mut lock(&redis)))
        .await
        .map_err(|err| format!("redis-server control failed: {err}"))
}

/// One command to Redis, directly (not through the proxy); `None` on error.
async fn redis_cli(redis: &Arc<Mutex<RedisServer>>, args: Vec<String>) -> Option<String> {
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

/// Runs [`HELD_BY`] for the client id `client` on `keys`.
async fn held_by(
    redis: &Arc<Mutex<RedisServer>>,
    client: &str,
    keys: Vec<String>,
) -> Option<(u32, i64)> {
    let mut args = vec![
        "EVAL".to_owned(),
        HELD_BY.to_owned(),
        keys.len().to_string(),
    ];
    args.extend(keys);
    args.push(client.to_owned());
    let reply = redis_cli(redis, args).await?;
    let mut lines = reply.lines();
    let n = lines.next()?.trim().parse().ok()?;
    let longest = lines.next()?.trim().parse().ok()?;
    Some((n, longest))
}

fn scaled(d: Duration, percent: u64) -> Duration {
    d * percent as u32 / 100
}

impl Run {
    async fn spawn_worker(&mut self) -> Result<(), String> {
        let id = self.next_id;
        self.next_id += 1;
        let config = WorkerConfig {
            id,
            url: self.proxy.url(),
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
                self.proxy.set_delay(delay);
                tokio::time::sleep(span).await;
                self.proxy.set_delay(Duration::ZERO);
                format!("{} ms for {} ms", delay.as_millis(), span.as_millis())
            }
            FaultKind::ProxyCut => {
                let refuse = scaled(lease, self.rng.range(10, 150));
                self.proxy.set_refuse(true);
                self.proxy.cut();
                tokio::time::sleep(refuse).await;
                self.proxy.set_refuse(false);
                format!("refused {} ms", refuse.as_millis())
            }
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
        };
        self.faults.push(Fault {
            kind,
            start,
            end: now_us(),
            detail,
        });
        Ok(())
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
            Some(client) => held_by(&self.redis, client, holder_keys(key).to_vec()).await,
            None => None,
        };
        let owned_at_kill = at_kill.is_some_and(|(n, _)| n > 0);
        self.spawn_worker().await?;

        let check_at = killed_at + clock::micros(self.options.lease + CRASH_SLACK);
        tokio::time::sleep(Duration::from_micros((check_at - now_us()).max(0) as u64)).await;
        let every_key: Vec<String> = (0..self.options.keys).flat_map(holder_keys).collect();
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
        WorkerLine::Parked { .. } => {}
    }
    drop(c);
    if matches!(
        line,
        WorkerLine::Hello { .. } | WorkerLine::Stalled { .. } | WorkerLine::Parked { .. }
    ) {
        let _ = events.send((worker, line));
    }
}

/// A fault plan: every kind in turn, shuffled anew each round.
struct Plan {
    kinds: Vec<FaultKind>,
    queue: Vec<FaultKind>,
}

impl Plan {
    fn next(&mut self, rng: &mut Rng) -> FaultKind {
        if self.queue.is_empty() {
            self.queue = self.kinds.clone();
            rng.shuffle(&mut self.queue);
        }
        self.queue.pop().expect("refilled above")
    }
}

/// Runs the whole suite and returns what it recorded.
pub async fn run(options: &Options, kind: LockKind) -> Result<(History, RunInfo), String> {
    let started = now_us();
    let redis = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .map_err(|err| format!("cannot start redis-server: {err}"))?;
    let port = redis.port();
    let redis = Arc::new(Mutex::new(redis));
    let info_server = redis_cli(&redis, vec!["INFO".into(), "server".into()]).await;
    let redis_version = info_server
        .as_deref()
        .and_then(|info| info.lines().find_map(|l| l.strip_prefix("redis_version:")))
        .unwrap_or("?")
        .trim()
        .to_owned();
    let proxy = Proxy::start(port)
        .await
        .map_err(|err| format!("cannot start the proxy: {err}"))?;
    let resource = Resource::start()
        .await
        .map_err(|err| format!("cannot start the fenced resource: {err}"))?;
    let exe = std::env::current_exe().map_err(|err| format!("cannot find this binary: {err}"))?;
    let (events_tx, events) = mpsc::unbounded_channel();
    let mut run = Run {
        options: options.clone(),
        kind,
        redis,
        proxy,
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
    };
    for _ in 0..options.clients {
        run.spawn_worker().await?;
    }
    // Wait until every client is connected, then let the load settle.
    let mut hello = HashSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while hello.len() < options.clients as usize {
        match tokio::time::timeout_at(deadline, run.events.recv()).await {
            Ok(Some((id, WorkerLine::Hello { .. }))) => {
                hello.insert(id);
            }
            Ok(Some(_)) => {}
            _ => return Err("client processes did not connect within 20 s".into()),
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    let mut plan = Plan {
        kinds: options.faults.clone(),
        queue: Vec::new(),
    };
    let faults_end = now_us() + clock::micros(options.duration);
    // The longest fault takes about this long; none starts that close to the end.
    let longest = clock::micros(options.lease * 4 + options.wait);
    let mut last_report = now_us();
    while now_us() + longest < faults_end {
        run.reap().await?;
        let kind = plan.next(&mut run.rng);
        run.inject(kind).await?;
        let gap = Duration::from_millis(run.rng.range(300, 1000));
        tokio::time::sleep(gap).await;
        if now_us() - last_report > 15_000_000 {
            last_report = now_us();
            let done = lock(&run.collected).sections.len();
            eprintln!(
                "  {:>4.0} s: {} faults, {} critical sections",
                (now_us() - started) as f64 / 1e6,
                run.faults.len(),
                done
            );
        }
    }
    tokio::time::sleep(Duration::from_micros((faults_end - now_us()).max(0) as u64)).await;
    let stragglers = run.stop_workers().await;

    // Every lock must be free a lease after the last holder stopped.
    tokio::time::sleep(options.lease + CRASH_SLACK).await;
    let mut leftover = Some(0);
    for k in 0..options.keys {
        let mut exists = vec!["EXISTS".to_owned()];
        exists.extend(holder_keys(k));
        match redis_cli(&run.redis, exists)
            .await
            .map(|n| n.parse::<u32>())
        {
            Some(Ok(n)) => leftover = leftover.map(|l| l + n),
            _ => leftover = None,
        }
    }

    let writes = run.resource.log();
    let collected = std::mem::take(&mut *lock(&run.collected));
    let mut history = collected.history;
    history.lease_us = clock::micros(options.lease);
    history.permits = PERMITS;
    history.writes = writes;
    history.faults = std::mem::take(&mut run.faults);
    history.crashes = std::mem::take(&mut run.crashes);
    history.leftover = leftover;
    history.unexpected_exits = run.unexpected_exits;
    history.sections = sections(&collected.sections, &history.writes, &run.deaths);

    let info = RunInfo {
        redis_version,
        elapsed: Duration::from_micros((now_us() - started) as u64),
        workers_started: run.next_id - 1,
        proxy_connections: run.proxy.connections(),
        garbled_lines: collected.garbled,
        stragglers,
        revision: revision(),
    };
    Ok((history, info))
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
                valid_end: Some(s.valid_end),
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
            },
        );
    }
    sections.into_values().collect()
}
