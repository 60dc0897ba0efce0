//! Worker mode: one client process with several tasks that take locks over
//! and over, write to the fenced resource inside each critical section, and
//! report every critical section on stdout (see [`record`](crate::record)).
//! The kind of lock ([`LockKind`]) is the same for every task of a run; a
//! multi-key section writes and reports once per key, with that key's token.
//!
//! The runtime is single-threaded on purpose: a stall fault
//! (`std::thread::sleep` inside a critical section) then freezes the whole
//! client, its watchdog included, like a long GC pause or a starved host.

use std::future::Future;
use std::io::Write as _;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use lock_runtime::{Deployment, LockClient, LockError, LockGuard, LossReason};
use tokio::io::AsyncBufReadExt;
use tokio::time::Instant;

use crate::clock::{self, now_us};
use crate::options::{LockKind, PERMITS};
use crate::record::{
    Call, FailKind, LossKind, ReleaseOutcome, Role, SectionLine, WorkerLine, WriteRequest,
};
use crate::resource::Writer;
use crate::rng::Rng;

/// Extra time a call may take beyond its wait and command timeout before
/// the worker's watchdog calls it hung.
const HANG_SLACK: Duration = Duration::from_secs(1);

/// Lock-key prefix used by the suite (the lock `k0` is the hash `chaos:{k0}`).
pub const PREFIX: &str = "chaos:";

/// Settings of one worker process.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// This worker's id.
    pub id: u32,
    /// Where the locks live: a Redis URL (the proxy's), or a deployment
    /// spec made by [`deployment_spec`].
    pub url: String,
    /// The fenced resource.
    pub resource: SocketAddr,
    /// Number of lock names (`k0`..).
    pub keys: u32,
    /// Tasks in this process.
    pub tasks: u32,
    /// Lease of every lock.
    pub lease: Duration,
    /// Wait of every acquire.
    pub wait: Duration,
    /// The client's command timeout.
    pub command_timeout: Duration,
    /// The client's restart quarantine.
    pub restart_quarantine: Duration,
    /// Whether the quarantine also covers servers the client never saw restart.
    pub strict_quarantine: bool,
    /// Seed of this worker's choices.
    pub seed: u64,
    /// The kind of lock the tasks take.
    pub kind: LockKind,
    /// The client's `min_replicas` (0: not set).
    pub min_replicas: u32,
}

/// The worker argument naming a deployment other than one server:
/// `cluster|url,url,..`, `sentinel|service|url,..` or `redlock|url,..`.
pub fn deployment_spec(deployment: &Deployment) -> String {
    match deployment {
        Deployment::Cluster(urls) => format!("cluster|{}", urls.join(",")),
        Deployment::Sentinel { sentinels, service } => {
            format!("sentinel|{service}|{}", sentinels.join(","))
        }
        Deployment::Redlock(urls) => format!("redlock|{}", urls.join(",")),
        Deployment::Server(url) => url.clone(),
        other => format!("{other:?}"),
    }
}

/// Parses what [`deployment_spec`] made; a plain URL is one server.
pub fn parse_deployment(spec: &str) -> Deployment {
    let list = |urls: &str| -> Vec<String> { urls.split(',').map(str::to_owned).collect() };
    let mut parts = spec.splitn(3, '|');
    match (parts.next(), parts.next(), parts.next()) {
        (Some("cluster"), Some(urls), None) => Deployment::cluster(list(urls)),
        (Some("redlock"), Some(urls), None) => Deployment::redlock(list(urls)),
        (Some("sentinel"), Some(service), Some(urls)) => Deployment::sentinel(list(urls), service),
        _ => Deployment::from(spec),
    }
}

impl WorkerConfig {
    /// The arguments that make the binary run this worker.
    pub fn to_args(&self) -> Vec<String> {
        vec![
            "__worker".into(),
            self.id.to_string(),
            self.url.clone(),
            self.resource.to_string(),
            self.keys.to_string(),
            self.tasks.to_string(),
            self.lease.as_millis().to_string(),
            self.wait.as_millis().to_string(),
            self.command_timeout.as_millis().to_string(),
            self.restart_quarantine.as_millis().to_string(),
            self.strict_quarantine.to_string(),
            self.seed.to_string(),
            self.kind.name().to_owned(),
            self.min_replicas.to_string(),
        ]
    }

    /// Parses what [`to_args`](WorkerConfig::to_args) made (after `__worker`).
    pub fn from_args(args: &[String]) -> Option<WorkerConfig> {
        let [
            id,
            url,
            resource,
            keys,
            tasks,
            lease,
            wait,
            timeout,
            quarantine,
            strict,
            seed,
            kind,
            min_replicas,
        ] = args
        else {
            return None;
        };
        let ms = |s: &String| s.parse().ok().map(Duration::from_millis);
        Some(WorkerConfig {
            id: id.parse().ok()?,
            url: url.clone(),
            resource: resource.parse().ok()?,
            keys: keys.parse().ok()?,
            tasks: tasks.parse().ok()?,
            lease: ms(lease)?,
            wait: ms(wait)?,
            command_timeout: ms(timeout)?,
            restart_quarantine: ms(quarantine)?,
            strict_quarantine: strict.parse().ok()?,
            seed: seed.parse().ok()?,
            kind: LockKind::from_name(kind)?,
            min_replicas: min_replicas.parse().ok()?,
        })
    }
}

/// Orders from the orchestrator (stdin lines) and the worker's own state.
#[derive(Debug, Default)]
struct Shared {
    stop: AtomicBool,
    /// A stall to do in the next critical section, in milliseconds.
    stall_ms: AtomicU64,
    /// Park the next critical section (to be killed inside it).
    park: AtomicBool,
    /// Total time this process spent stalled, in microseconds.
    stalled_us: AtomicU64,
}

/// Prints one line on stdout at once.
fn emit(line: WorkerLine) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Runs a worker until told to stop (or until stdin closes); the exit code.
pub fn run(config: WorkerConfig) -> std::process::ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("worker {}: no runtime: {err}", config.id);
            return std::process::ExitCode::from(2);
        }
    };
    runtime.block_on(main(config))
}

async fn connect(config: &WorkerConfig) -> LockClient {
    loop {
        let mut builder = LockClient::builder(parse_deployment(&config.url));
        if config.min_replicas > 0 {
            builder = builder.min_replicas(config.min_replicas);
        }
        let connecting = builder
            .prefix(PREFIX)
            .default_lease(config.lease)
            .default_wait(config.wait)
            .command_timeout(config.command_timeout)
            .connect_timeout(config.command_timeout)
            .restart_quarantine(config.restart_quarantine)
            .strict_restart_quarantine(config.strict_quarantine)
            .connect();
        match connecting.await {
            Ok(client) => return client,
            // Redis may be down or paused by a fault right now.
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

async fn main(config: WorkerConfig) -> std::process::ExitCode {
    let shared = Arc::new(Shared::default());
    let client = connect(&config).await;
    emit(WorkerLine::Hello {
        client: client.id().to_string(),
    });
    tokio::spawn(orders(shared.clone()));
    let tasks: Vec<_> = (0..config.tasks)
        .map(|task| {
            let rng = Rng::new(config.seed, (u64::from(config.id) << 16) | u64::from(task));
            tokio::spawn(task_loop(
                config.clone(),
                client.clone(),
                shared.clone(),
                task,
                rng,
            ))
        })
        .collect();
    for task in tasks {
        let _ = task.await;
    }
    std::process::ExitCode::SUCCESS
}

/// Reads orders from stdin: `STALL <ms>`, `PARK`, `STOP`. A closed stdin
/// (the orchestrator is gone) stops the worker too.
async fn orders(shared: Arc<Shared>) {
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let mut words = line.split_whitespace();
        match (words.next(), words.next().and_then(|w| w.parse().ok())) {
            (Some("STALL"), Some(ms)) => shared.stall_ms.store(ms, Ordering::SeqCst),
            (Some("PARK"), _) => shared.park.store(true, Ordering::SeqCst),
            (Some("STOP"), _) => break,
            _ => {}
        }
    }
    shared.stop.store(true, Ordering::SeqCst);
}

/// Runs `fut`, or gives up after `limit` plus whatever time this process
/// spent stalled meanwhile (a frozen runtime cannot run anything).
async fn bounded<F: Future>(shared: &Shared, limit: Duration, fut: F) -> Option<F::Output> {
    let started = Instant::now();
    let stalled_before = shared.stalled_us.load(Ordering::SeqCst);
    let mut fut = pin!(fut);
    let mut deadline = started + limit;
    loop {
        tokio::select! {
            biased;
            out = &mut fut => return Some(out),
            _ = tokio::time::sleep_until(deadline) => {
                let stalled = shared.stalled_us.load(Ordering::SeqCst) - stalled_before;
                let extended = started + limit + Duration::from_micros(stalled);
                if extended <= Instant::now() {
                    return None;
                }
                deadline = extended;
            }
        }
    }
}

fn fail_kind(err: &LockError) -> FailKind {
    if err.is_timeout() {
        FailKind::Timeout
    } else if err.is_unavailable() {
        FailKind::Unavailable
    } else {
        FailKind::Other
    }
}

fn loss_kind(guard: &LockGuard) -> LossKind {
    match guard.lost_error() {
        LockError::Lost { reason, .. } => match reason {
            LossReason::NotHeld => LossKind::NotHeld,
            LossReason::Expired => LossKind::Expired,
            LossReason::NotHeldAtRelease => LossKind::AtRelease,
            _ => LossKind::Other,
        },
        _ => LossKind::Other,
    }
}

async fn task_loop(
    config: WorkerConfig,
    client: LockClient,
    shared: Arc<Shared>,
    task: u32,
    mut rng: Rng,
) {
    let mut writer = Writer::new(config.resource);
    let mut seq = 0u64;
    let acquire_limit = config.wait + config.command_timeout + HANG_SLACK;
    let release_limit = config.command_timeout + HANG_SLACK;
    while !shared.stop.load(Ordering::SeqCst) {
        let keys = u64::from(config.keys);
        let key = rng.below(keys) as u32;
        let name = format!("k{key}");
        let (request, role) = match config.kind {
            LockKind::Exclusive => (client.lock(name), Role::Exclusive),
            LockKind::Fair => (client.fair_lock(name), Role::Exclusive),
            LockKind::Semaphore => (client.semaphore(name, PERMITS), Role::Permit),
            LockKind::ReadWrite if rng.below(4) == 0 => (client.write_lock(name), Role::Exclusive),
            LockKind::ReadWrite => (client.read_lock(name), Role::Read),
            LockKind::Multi => {
                let other = (u64::from(key) + 1 + rng.below(keys - 1)) % keys;
                (
                    client.lock_all([name, format!("k{other}")]),
                    Role::Exclusive,
                )
            }
        };
        let start = now_us();
        let acquiring = request.acquire();
        let guard = match bounded(&shared, acquire_limit, acquiring).await {
            Some(Ok(guard)) => guard,
            Some(Err(err)) => {
                emit(WorkerLine::Failed {
                    task,
                    key,
                    kind: fail_kind(&err),
                    start,
                    end: now_us(),
                });
                tokio::time::sleep(Duration::from_millis(rng.range(5, 50))).await;
                continue;
            }
            None => {
                emit(WorkerLine::Hung {
                    task,
                    key,
                    call: Call::Acquire,
                    start,
                    limit_ms: acquire_limit.as_millis() as u64,
                });
                continue;
            }
        };
        seq += 1;
        let acquired = now_us();
        // Every key the guard holds with its own token (one but for multi).
        let parts: Vec<(u32, u64)> = guard
            .fences()
            .iter()
            .map(|lock| {
                let index = lock.key.strip_prefix('k').and_then(|k| k.parse().ok());
                (index.unwrap_or(key), lock.fence)
            })
            .collect();
        let mut section = Section {
            config: &config,
            guard: &guard,
            writer: &mut writer,
            task,
            seq,
            parts: &parts,
            role,
            acquired,
            told: None,
        };
        section.run(&shared, &mut rng).await;
        let (told, reason, valid_at_told) = match section.told {
            Some((at, valid)) => (Some(at), Some(loss_kind(&guard)), Some(valid)),
            None => (None, None, None),
        };
        let release = now_us();
        let valid_end = clock::instant_us(guard.valid_until());
        for &(key, token) in &parts {
            emit(WorkerLine::Section(SectionLine {
                task,
                seq,
                key,
                role,
                token,
                start,
                acquired,
                release,
                told,
                reason,
                valid_at_told,
                valid_end,
            }));
        }
        let outcome = match bounded(&shared, release_limit, guard.release()).await {
            Some(Ok(())) => ReleaseOutcome::Ok,
            Some(Err(err)) if err.is_lost() => ReleaseOutcome::Lost,
            Some(Err(_)) => ReleaseOutcome::Error,
            None => {
                emit(WorkerLine::Hung {
                    task,
                    key,
                    call: Call::Release,
                    start: now_us(),
                    limit_ms: release_limit.as_millis() as u64,
                });
                continue;
            }
        };
        emit(WorkerLine::Released { task, seq, outcome });
        tokio::time::sleep(Duration::from_millis(rng.range(0, 20))).await;
    }
}

/// One critical section in progress.
struct Section<'a> {
    config: &'a WorkerConfig,
    guard: &'a LockGuard,
    writer: &'a mut Writer,
    task: u32,
    seq: u64,
    /// Every key held, with its token.
    parts: &'a [(u32, u64)],
    role: Role,
    acquired: i64,
    /// When `lost()` was noticed, and `valid_until()` then.
    told: Option<(i64, i64)>,
}

impl Section<'_> {
    fn notice(&mut self) {
        if self.told.is_none() {
            let valid = clock::instant_us(self.guard.valid_until());
            self.told = Some((now_us(), valid));
        }
    }

    /// Writes a marker unless the holder knows it lost the lock. A holder
    /// that was frozen does not know yet: its write is the fence's to stop.
    async fn write(&mut self, begin: bool) {
        if self.guard.is_lost() {
            self.notice();
            return;
        }
        for &(key, token) in self.parts {
            let request = WriteRequest {
                worker: self.config.id,
                task: self.task,
                seq: self.seq,
                key,
                role: self.role,
                token,
                begin,
                acquired: self.acquired,
            };
            for _ in 0..3 {
                if self.writer.write(&request).await.is_ok() {
                    break;
                }
            }
        }
    }

    /// Waits up to `d`, stopping early if the lock is lost.
    async fn hold_for(&mut self, d: Duration) {
        tokio::select! {
            _ = self.guard.lost() => self.notice(),
            _ = tokio::time::sleep(d) => {}
        }
    }

    async fn run(&mut self, shared: &Shared, rng: &mut Rng) {
        self.write(true).await;
        let stall = shared.stall_ms.swap(0, Ordering::SeqCst);
        if stall > 0 {
            let start = now_us();
            std::thread::sleep(Duration::from_millis(stall));
            let end = now_us();
            shared
                .stalled_us
                .fetch_add((end - start) as u64, Ordering::SeqCst);
            emit(WorkerLine::Stalled { start, end });
            // Straight on to the end marker, as a paused program would.
            self.write(false).await;
            if self.guard.is_lost() {
                self.notice();
            }
            return;
        }
        if shared.park.swap(false, Ordering::SeqCst) {
            emit(WorkerLine::Parked {
                task: self.task,
                key: self.parts[0].0,
                token: self.parts[0].1,
            });
            // Held (and renewed) until the orchestrator kills this process,
            // which it does within a lease; a few seconds at most, in case
            // the order outlived the orchestrator's patience.
            self.hold_for(self.config.lease * 3 + Duration::from_secs(2))
                .await;
        } else {
            // Mostly short sections; one in ten spans several renewals, so
            // that faults catch holders in the middle of their work.
            let lease = self.config.lease.as_millis() as u64;
            let work = if rng.below(10) == 0 {
                rng.range(lease / 2, lease * 5 / 2)
            } else {
                rng.range(5, 60)
            };
            self.hold_for(Duration::from_millis(work)).await;
        }
        if self.told.is_none() {
            self.write(false).await;
        }
        if self.told.is_none() && self.guard.is_lost() {
            self.notice();
        }
    }
}
