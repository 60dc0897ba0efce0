//! Worker mode: one client process with several tasks that take locks over
//! and over, write to the fenced resource inside each critical section, and
//! report every critical section on stdout (see [`record`](crate::record)).
//! The kind of lock ([`LockKind`]) is the same for every task of a run; a
//! multi-key section writes and reports once per key, with that key's token.
//!
//! The tasks also do what real callers do:
//!
//! - they give up on some acquisitions while they wait: the future is
//!   dropped by a short `tokio::time::timeout`, or the task awaiting it is
//!   aborted ([`CANCEL_ONE_IN`]);
//! - with exclusive and fair locks, some critical sections make locked
//!   calls ([`LOCKED_CALLS_ONE_IN`]): a `#[distributed_lock]` function on
//!   the section's own lock (a re-entry), then two such calls joined with
//!   `tokio::join!`, each on one other lock. Each call reports a section of
//!   its own, naming the section it was made in, so that the checker can
//!   tell two holders in one task apart.
//!
//! The runtime is single-threaded on purpose: a stall fault
//! (`std::thread::sleep` inside a critical section) then freezes the whole
//! client, its watchdog included, like a long GC pause or a starved host.

use std::future::Future;
use std::io::Write as _;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use lock_runtime::{
    Deployment, LockClient, LockError, LockGuard, LockRequest, LossReason, distributed_lock,
};
use tokio::io::AsyncBufReadExt;
use tokio::time::Instant;

use crate::clock::{self, now_us};
use crate::options::{LockKind, PERMITS};
use crate::record::{
    Call, CancelHow, FailKind, LossKind, ReleaseOutcome, Role, SectionLine, TryOutcome, WorkerLine,
    WriteRequest,
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
    /// Whether the client may connect to a server that evicts keys (the
    /// eviction run).
    pub allow_eviction: bool,
}

/// The worker argument naming a deployment other than one server:
/// `cluster|url,url,..`, `sentinel|service|url,..` or `redlock|url,..` (a
/// plain URL is one server); [`parse_deployment`] reads it back.
pub mod deployment_spec {
    /// A Redis Cluster through these seed nodes.
    pub fn cluster(urls: &[String]) -> String {
        format!("cluster|{}", urls.join(","))
    }

    /// The master of `service` these sentinels report.
    pub fn sentinel(service: &str, sentinels: &[String]) -> String {
        format!("sentinel|{service}|{}", sentinels.join(","))
    }

    /// Redlock over these masters.
    pub fn redlock(urls: &[String]) -> String {
        format!("redlock|{}", urls.join(","))
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
            self.allow_eviction.to_string(),
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
            allow_eviction,
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
            allow_eviction: allow_eviction.parse().ok()?,
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
    /// Sections making locked calls right now.
    locked_calls: AtomicU32,
    /// A stall waits for the locked calls to end: start no new ones.
    stall_pending: AtomicBool,
    /// The next critical section waits this long (ms) for its lock to be
    /// removed, then re-enters it (0: none ordered).
    reenter_ms: AtomicU64,
    /// The next release runs under a timeout of this many ms, minus one
    /// (0: none ordered).
    cut_ms: AtomicU64,
    /// The orchestrator's `GO`: the stall a cut release waits for has begun.
    go: tokio::sync::Notify,
    /// Section numbers of the orchestrated task ([`WorkerConfig::tasks`]):
    /// the try-locks that got the lock.
    extra_seq: AtomicU64,
}

/// The command timeout of the worker's second client, which makes the
/// try-locks ordered during a stall (shorter than the stall).
pub const SHORT_COMMAND_TIMEOUT: Duration = Duration::from_millis(40);

/// What the orders and the orchestrated task need.
struct Ctx {
    config: WorkerConfig,
    client: LockClient,
    /// A client whose command timeout is [`SHORT_COMMAND_TIMEOUT`].
    short: LockClient,
    shared: Arc<Shared>,
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
    connect_with(config, config.command_timeout).await
}

async fn connect_with(config: &WorkerConfig, command_timeout: Duration) -> LockClient {
    loop {
        let mut builder = LockClient::builder(parse_deployment(&config.url));
        if config.min_replicas > 0 {
            builder = builder.min_replicas(config.min_replicas);
        }
        if config.allow_eviction {
            builder = builder.allow_eviction(true);
        }
        let connecting = builder
            .prefix(PREFIX)
            .default_lease(config.lease)
            .default_wait(config.wait)
            .command_timeout(command_timeout)
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
    let short = connect_with(&config, SHORT_COMMAND_TIMEOUT).await;
    emit(WorkerLine::Hello {
        client: client.id().to_string(),
    });
    let ctx = Arc::new(Ctx {
        config: config.clone(),
        client: client.clone(),
        short,
        shared: shared.clone(),
    });
    tokio::spawn(orders(ctx.clone()));
    let tasks: Vec<_> = (0..config.tasks)
        .map(|task| {
            let rng = Rng::new(config.seed, (u64::from(config.id) << 16) | u64::from(task));
            tokio::spawn(task_loop(ctx.clone(), task, rng))
        })
        .collect();
    for task in tasks {
        let _ = task.await;
    }
    emit(WorkerLine::Exit {
        held: client.held() as u64,
    });
    std::process::ExitCode::SUCCESS
}

/// Reads orders from stdin: `STALL <ms>`, `PARK`, `REENTER <ms>`, `CUT
/// <ms>`, `GO`, `TRY <key> <ms>`, `STOP`. A closed stdin (the orchestrator is
/// gone) stops the worker too.
async fn orders(ctx: Arc<Ctx>) {
    let shared = &ctx.shared;
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let mut words = line.split_whitespace();
        let word = words.next();
        let mut number = || words.next().and_then(|w| w.parse::<u64>().ok());
        match (word, number()) {
            (Some("STALL"), Some(ms)) => shared.stall_ms.store(ms, Ordering::SeqCst),
            (Some("PARK"), _) => shared.park.store(true, Ordering::SeqCst),
            (Some("REENTER"), Some(ms)) => shared.reenter_ms.store(ms.max(1), Ordering::SeqCst),
            (Some("CUT"), Some(ms)) => shared.cut_ms.store(ms + 1, Ordering::SeqCst),
            (Some("GO"), _) => shared.go.notify_one(),
            (Some("TRY"), Some(key)) => {
                let drop_after = number().unwrap_or(0);
                tokio::spawn(try_lock(ctx.clone(), key as u32, drop_after));
            }
            (Some("STOP"), _) => break,
            _ => {}
        }
    }
    shared.stop.store(true, Ordering::SeqCst);
}

/// A request for the lock `k<key>` alone, of the run's kind (a multi-key
/// run takes `lock(k)`, a read-write run the write side), and its role.
fn single_request(config: &WorkerConfig, client: &LockClient, key: u32) -> (LockRequest, Role) {
    let name = format!("k{key}");
    match config.kind {
        LockKind::Exclusive | LockKind::Multi => (client.lock(name), Role::Exclusive),
        LockKind::Fair => (client.fair_lock(name), Role::Exclusive),
        LockKind::Semaphore => (client.semaphore(name, PERMITS), Role::Permit),
        LockKind::ReadWrite => (client.write_lock(name), Role::Exclusive),
    }
}

/// Reports a section of the orchestrated task (number `config.tasks`): the
/// guard's keys, held from `acquired` until now; then releases it.
async fn extra_section(ctx: &Ctx, guard: LockGuard, role: Role, start: i64, acquired: i64) {
    let seq = ctx.shared.extra_seq.fetch_add(1, Ordering::SeqCst) + 1;
    let task = ctx.config.tasks;
    tokio::time::sleep(Duration::from_millis(2)).await;
    let release = now_us();
    let valid_end = clock::instant_us(guard.valid_until());
    let lost = guard.is_lost();
    for lock in guard.fences() {
        let key = lock.name.strip_prefix('k').and_then(|k| k.parse().ok());
        emit(WorkerLine::Section(SectionLine {
            task,
            seq,
            key: key.unwrap_or(0),
            role,
            token: lock.fence,
            start,
            acquired,
            release,
            told: lost.then_some(release),
            reason: lost.then(|| loss_kind(&guard)),
            valid_at_told: lost.then_some(valid_end),
            valid_end: Some(valid_end),
            parent: None,
        }));
    }
    let outcome = match guard.release().await {
        Ok(()) => ReleaseOutcome::Ok,
        Err(err) if err.is_lost() => ReleaseOutcome::Lost,
        Err(_) => ReleaseOutcome::Error,
    };
    emit(WorkerLine::Released { task, seq, outcome });
}

/// A try-lock of `k<key>` ordered during a stall: through the client with
/// the short command timeout (`drop_after` 0), or dropped by a timeout of
/// `drop_after` ms. Reports how it ended (the orchestrator then probes the
/// lock).
async fn try_lock(ctx: Arc<Ctx>, key: u32, drop_after: u64) {
    let client = if drop_after == 0 {
        &ctx.short
    } else {
        &ctx.client
    };
    let (request, role) = single_request(&ctx.config, client, key);
    let start = now_us();
    let result = if drop_after == 0 {
        Some(request.try_acquire().await)
    } else {
        tokio::time::timeout(Duration::from_millis(drop_after), request.try_acquire())
            .await
            .ok()
    };
    let at = now_us();
    let (outcome, guard) = match result {
        Some(Ok(Some(guard))) => (TryOutcome::Acquired, Some(guard)),
        Some(Ok(None)) => (TryOutcome::Busy, None),
        Some(Err(_)) => (TryOutcome::Failed, None),
        None => (TryOutcome::Dropped, None),
    };
    emit(WorkerLine::TryLock { key, at, outcome });
    if let Some(guard) = guard {
        extra_section(&ctx, guard, role, start, at).await;
    }
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

fn loss_reason(reason: LossReason) -> LossKind {
    match reason {
        LossReason::NotHeld => LossKind::NotHeld,
        LossReason::Expired => LossKind::Expired,
        LossReason::NotHeldAtRelease => LossKind::AtRelease,
        // Named by its Debug form: not every version of the runtime has it.
        other if format!("{other:?}") == "NotHeldAtReentry" => LossKind::AtReentry,
        _ => LossKind::Other,
    }
}

fn loss_kind(guard: &LockGuard) -> LossKind {
    match guard.lost_error() {
        LockError::Lost { reason, .. } => loss_reason(reason),
        _ => LossKind::Other,
    }
}

/// Why an acquisition gave no guard.
enum NotAcquired {
    /// An error.
    Failed(LockError),
    /// Cancelled while it waited.
    Cancelled(CancelHow),
    /// The watchdog gave up on it.
    Hung,
}

/// How long a short critical section holds its lock (ms, from..to).
pub const SHORT_MS: (u64, u64) = (2, 20);

/// One in this many critical sections holds its lock 0.5–2.5 leases.
pub const LONG_ONE_IN: u64 = 50;

/// A task pauses up to this long (ms) between a release and its next
/// acquisition.
pub const PAUSE_MS: u64 = 10;

/// One in this many acquisitions is cancelled if it takes more than 1 to
/// 150 ms.
pub const CANCEL_ONE_IN: u64 = 10;

/// One in this many critical sections (of exclusive and fair locks, on a
/// lock with another above it) makes locked calls: a re-entry, then two
/// calls joined on another lock.
pub const LOCKED_CALLS_ONE_IN: u64 = 8;

/// Takes `request`, as callers do: awaited to the end, or (with `cancel`)
/// given up after a while by dropping the future, through a timeout or by
/// aborting the task that awaits it. Returns the guard and when
/// `acquire()` returned it.
async fn take(
    shared: &Shared,
    request: LockRequest,
    limit: Duration,
    cancel: Option<(CancelHow, Duration)>,
) -> Result<(LockGuard, i64), NotAcquired> {
    match cancel {
        None => match bounded(shared, limit, request.acquire()).await {
            Some(Ok(guard)) => Ok((guard, now_us())),
            Some(Err(err)) => Err(NotAcquired::Failed(err)),
            None => Err(NotAcquired::Hung),
        },
        Some((CancelHow::Timeout, after)) => {
            match tokio::time::timeout(after, request.acquire()).await {
                Ok(Ok(guard)) => Ok((guard, now_us())),
                Ok(Err(err)) => Err(NotAcquired::Failed(err)),
                Err(_) => Err(NotAcquired::Cancelled(CancelHow::Timeout)),
            }
        }
        Some((CancelHow::Abort, after)) => {
            let waiting = tokio::spawn(async move {
                let result = request.acquire().await;
                (result, now_us())
            });
            tokio::time::sleep(after).await;
            waiting.abort();
            match waiting.await {
                Ok((Ok(guard), at)) => Ok((guard, at)),
                Ok((Err(err), _)) => Err(NotAcquired::Failed(err)),
                Err(_) => Err(NotAcquired::Cancelled(CancelHow::Abort)),
            }
        }
    }
}

/// What a task draws before each acquisition.
struct Attempt {
    /// The lock's key (for `multi`, the first of its two).
    key: u32,
    /// The acquisition, of the run's kind of lock.
    request: LockRequest,
    /// What the holder may share the key with.
    role: Role,
    /// Whether the acquisition is given up, how and after how long.
    cancel: Option<(CancelHow, Duration)>,
    /// The lock the section's locked calls take, if it makes any.
    calls_on: Option<u32>,
}

impl Attempt {
    /// Draws a random key, whether to cancel, and whether to make locked
    /// calls.
    fn draw(config: &WorkerConfig, client: &LockClient, rng: &mut Rng) -> Attempt {
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
        let cancel = (rng.below(CANCEL_ONE_IN) == 0).then(|| {
            let how = if rng.below(2) == 0 {
                CancelHow::Timeout
            } else {
                CancelHow::Abort
            };
            (how, Duration::from_millis(rng.range(1, 150)))
        });
        // Locked calls inside this section: on a key above this one, so
        // that every task takes its locks in one order (no deadlock).
        let calls_on = (matches!(config.kind, LockKind::Exclusive | LockKind::Fair)
            && u64::from(key) + 1 < keys
            && rng.below(LOCKED_CALLS_ONE_IN) == 0)
            .then(|| rng.range(u64::from(key) + 1, keys - 1) as u32);
        Attempt {
            key,
            request,
            role,
            cancel,
            calls_on,
        }
    }
}

/// Reports an acquisition of `k<key>` called at `start` that gave no
/// guard; after an error, pauses 5–50 ms before the next attempt.
async fn report_not_acquired(
    not: NotAcquired,
    task: u32,
    key: u32,
    start: i64,
    limit: Duration,
    rng: &mut Rng,
) {
    match not {
        NotAcquired::Failed(err) => {
            emit(WorkerLine::Failed {
                task,
                key,
                kind: fail_kind(&err),
                start,
                end: now_us(),
            });
            tokio::time::sleep(Duration::from_millis(rng.range(5, 50))).await;
        }
        NotAcquired::Cancelled(how) => emit(WorkerLine::Cancelled {
            task,
            key,
            how,
            start,
            end: now_us(),
        }),
        NotAcquired::Hung => emit(WorkerLine::Hung {
            task,
            key,
            call: Call::Acquire,
            start,
            limit_ms: limit.as_millis() as u64,
        }),
    }
}

/// Every key `guard` holds with its own token (one but for multi); `key`
/// stands for a name that is no `k<i>`.
fn fenced_keys(guard: &LockGuard, key: u32) -> Vec<(u32, u64)> {
    guard
        .fences()
        .iter()
        .map(|lock| {
            let index = lock.name.strip_prefix('k').and_then(|k| k.parse().ok());
            (index.unwrap_or(key), lock.fence)
        })
        .collect()
}

/// Releases `guard` (section `seq` of `k<key>`) and reports how it went;
/// `false` if the release did not return within `limit` (reported as
/// hung).
async fn release_and_report(
    ctx: &Arc<Ctx>,
    guard: LockGuard,
    limit: Duration,
    task: u32,
    key: u32,
    seq: u64,
) -> bool {
    let shared = &ctx.shared;
    let cut = shared.cut_ms.swap(0, Ordering::SeqCst);
    if cut > 0 {
        // As ordered: once the stall has begun, the release under a short
        // timeout, dropped if it does not return in time; then someone
        // wants the lock.
        emit(WorkerLine::Releasing { task, seq, key });
        let _ = tokio::time::timeout(Duration::from_secs(2), shared.go.notified()).await;
        let after = Duration::from_millis(cut - 1);
        let result = tokio::time::timeout(after, guard.release()).await;
        let at = now_us();
        let outcome = match result {
            Ok(Ok(())) => Some(ReleaseOutcome::Ok),
            Ok(Err(err)) if err.is_lost() => Some(ReleaseOutcome::Lost),
            Ok(Err(_)) => Some(ReleaseOutcome::Error),
            Err(_) => None,
        };
        emit(WorkerLine::ReleaseCut {
            task,
            seq,
            key,
            at,
            outcome,
        });
        if let Some(outcome) = outcome {
            emit(WorkerLine::Released { task, seq, outcome });
        }
        return true;
    }
    let outcome = match bounded(shared, limit, guard.release()).await {
        Some(Ok(())) => ReleaseOutcome::Ok,
        Some(Err(err)) if err.is_lost() => ReleaseOutcome::Lost,
        Some(Err(_)) => ReleaseOutcome::Error,
        None => {
            emit(WorkerLine::Hung {
                task,
                key,
                call: Call::Release,
                start: now_us(),
                limit_ms: limit.as_millis() as u64,
            });
            return false;
        }
    };
    emit(WorkerLine::Released { task, seq, outcome });
    true
}

/// One task: takes a random lock over and over until told to stop, holds
/// it for a critical section (sometimes with locked calls in it), reports
/// the section and releases.
async fn task_loop(ctx: Arc<Ctx>, task: u32, mut rng: Rng) {
    let (config, client, shared) = (&ctx.config, &ctx.client, &ctx.shared);
    let mut writer = Writer::new(config.resource);
    // The writers of two locked calls joined inside a section.
    let mut joined = [Writer::new(config.resource), Writer::new(config.resource)];
    let mut seq = 0u64;
    let acquire_limit = config.wait + config.command_timeout + HANG_SLACK;
    let release_limit = config.command_timeout + HANG_SLACK;
    while !shared.stop.load(Ordering::SeqCst) {
        let Attempt {
            key,
            request,
            role,
            cancel,
            calls_on,
        } = Attempt::draw(config, client, &mut rng);
        let start = now_us();
        let (guard, acquired) = match take(shared, request, acquire_limit, cancel).await {
            Ok(taken) => taken,
            Err(not) => {
                report_not_acquired(not, task, key, start, acquire_limit, &mut rng).await;
                continue;
            }
        };
        seq += 1;
        let parts = fenced_keys(&guard, key);
        let mut section = Section {
            config,
            guard: &guard,
            writer: &mut writer,
            task,
            seq,
            parts: &parts,
            role,
            acquired,
            told: None,
        };
        // No locked calls while a stall is on its way: their holders have
        // no guard to read a deadline from, which a frozen holder needs.
        match calls_on {
            Some(other) if !shared.stall_pending.load(Ordering::SeqCst) => {
                section
                    .run_locked_calls(shared, client, other, &mut seq, &mut joined)
                    .await
            }
            _ => section.run(shared, client, &mut seq, &mut rng).await,
        }
        section.report(start);
        let section_seq = section.seq;
        if release_and_report(&ctx, guard, release_limit, task, key, section_seq).await {
            tokio::time::sleep(Duration::from_millis(rng.range(0, PAUSE_MS))).await;
        }
    }
}

/// A call of a `#[distributed_lock]` function made inside a critical
/// section, and what its body saw.
struct LockedCall<'a> {
    client: &'a LockClient,
    config: &'a WorkerConfig,
    writer: &'a mut Writer,
    task: u32,
    /// Its own section number.
    seq: u64,
    /// The section it is made in.
    parent: u64,
    /// The lock it takes.
    key: u32,
    /// Whom its writes are from: a re-entry writes as the section it
    /// re-enters (number, acquisition time); another call as itself.
    writes_as: Option<(u64, i64)>,
    /// How long its body holds the lock.
    hold: Duration,
    /// When it was called.
    start: i64,
    /// When its body began, and with which token.
    acquired: Option<(i64, u64)>,
    /// When its body finished (not when it was dropped).
    finished: Option<i64>,
    /// What the call returned, and when.
    returned: Option<(Result<(), LockError>, i64)>,
    /// Whether its section was reported: as soon as the call returned, so
    /// that a worker killed later in the enclosing section (say, while the
    /// other joined call waits) has told when this one released; otherwise
    /// the orchestrator knows it only from its begin marker, and takes it
    /// for held until the worker died.
    reported: bool,
}

impl LockedCall<'_> {
    /// The body of the locked functions: writes, holds, writes.
    async fn body(&mut self) {
        let acquired = now_us();
        let token = lock_runtime::current().map_or(0, |lock| lock.fence);
        self.acquired = Some((acquired, token));
        self.write(true).await;
        tokio::time::sleep(self.hold).await;
        self.write(false).await;
        self.finished = Some(now_us());
    }

    async fn write(&mut self, begin: bool) {
        let Some((acquired, token)) = self.acquired else {
            return;
        };
        let (seq, acquired) = self.writes_as.unwrap_or((self.seq, acquired));
        let request = WriteRequest {
            worker: self.config.id,
            task: self.task,
            seq,
            key: self.key,
            role: Role::Exclusive,
            token,
            begin,
            acquired,
        };
        for _ in 0..3 {
            if self.writer.write(&request).await.is_ok() {
                break;
            }
        }
    }

    /// Calls the locked function of the run's kind of lock.
    async fn call(&mut self) {
        self.start = now_us();
        let key = self.key;
        let result = if self.config.kind == LockKind::Fair {
            fair_locked_call(self, key).await
        } else {
            locked_call(self, key).await
        };
        let returned = now_us();
        self.returned = Some((result, returned));
        self.report(returned);
    }

    /// Reports the call, once: its critical section if its body ran (ended when
    /// the body finished, or when it was dropped: the holder was told), or
    /// the error it returned. `stopped`: when the enclosing section's work
    /// ended (the call was dropped then if it had not returned).
    fn report(&mut self, stopped: i64) {
        if std::mem::replace(&mut self.reported, true) {
            return;
        }
        let returned = self.returned.as_ref().map(|(_, at)| *at).unwrap_or(stopped);
        let result = self.returned.as_ref().map(|(result, _)| result);
        let Some((acquired, token)) = self.acquired else {
            if let Some(Err(err)) = result {
                emit(WorkerLine::Failed {
                    task: self.task,
                    key: self.key,
                    kind: fail_kind(err),
                    start: self.start,
                    end: returned,
                });
            }
            return;
        };
        let (release, told, reason) = match self.finished {
            Some(done) => (done, None, None),
            None => {
                let reason = match result {
                    Some(Err(LockError::Lost { reason, .. })) => loss_reason(*reason),
                    _ => LossKind::Other,
                };
                (returned, Some(returned), Some(reason))
            }
        };
        emit(WorkerLine::Section(SectionLine {
            task: self.task,
            seq: self.seq,
            key: self.key,
            role: Role::Exclusive,
            token,
            start: self.start,
            acquired,
            release,
            told,
            reason,
            valid_at_told: None,
            valid_end: None,
            parent: Some(self.parent),
        }));
        let outcome = match result {
            Some(Ok(())) => ReleaseOutcome::Ok,
            Some(Err(err)) if !err.is_lost() => ReleaseOutcome::Error,
            // Lost, or dropped with the section it was made in.
            _ => ReleaseOutcome::Lost,
        };
        emit(WorkerLine::Released {
            task: self.task,
            seq: self.seq,
            outcome,
        });
    }
}

/// A locked function: the lock `k<key>`, from the client the call names.
#[distributed_lock(key = "k<key>", client = call.client)]
async fn locked_call(call: &mut LockedCall<'_>, key: u32) -> Result<(), LockError> {
    call.body().await;
    Ok(())
}

/// The same, with a fair lock.
#[distributed_lock(key = "k<key>", fair = true, client = call.client)]
async fn fair_locked_call(call: &mut LockedCall<'_>, key: u32) -> Result<(), LockError> {
    call.body().await;
    Ok(())
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

    /// Reports the section once per key it held, with that key's token;
    /// `start`: when `acquire()` was called.
    fn report(&self, start: i64) {
        let (told, reason, valid_at_told) = match self.told {
            Some((at, valid)) => (Some(at), Some(loss_kind(self.guard)), Some(valid)),
            None => (None, None, None),
        };
        let release = now_us();
        let valid_end = clock::instant_us(self.guard.valid_until());
        for &(key, token) in self.parts {
            emit(WorkerLine::Section(SectionLine {
                task: self.task,
                seq: self.seq,
                key,
                role: self.role,
                token,
                start,
                acquired: self.acquired,
                release,
                told,
                reason,
                valid_at_told,
                valid_end: Some(valid_end),
                parent: None,
            }));
        }
    }

    /// Writes a marker unless the holder knows it lost the lock.
    async fn write(&mut self, begin: bool) {
        if self.guard.is_lost() {
            self.notice();
            return;
        }
        self.write_unchecked(begin).await;
    }

    /// Writes a marker without asking whether the lock is still held, as a
    /// program frozen in its critical section does when it runs on: it
    /// does not know yet, and its write is the fence's to stop.
    async fn write_unchecked(&mut self, begin: bool) {
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

    /// A critical section that makes locked calls (`#[distributed_lock]`
    /// functions), as real callers nest them: one on its own lock, which
    /// re-enters it (depth 2), then two joined with `tokio::join!`, each on
    /// the lock `k<other>`. The two joined calls are two holders of
    /// `k<other>`: each must get its own owner and token and wait for the
    /// other. `seq` numbers the calls' sections.
    async fn run_locked_calls(
        &mut self,
        shared: &Shared,
        client: &LockClient,
        other: u32,
        seq: &mut u64,
        joined: &mut [Writer; 2],
    ) {
        self.write(true).await;
        if self.told.is_some() {
            return;
        }
        let (own, acquired) = (self.parts[0].0, self.acquired);
        let mut next = || {
            *seq += 1;
            *seq
        };
        let (reentry_seq, first_seq, second_seq) = (next(), next(), next());
        let [first_writer, second_writer] = joined;
        let make = |writer, seq, key, writes_as| LockedCall {
            client,
            config: self.config,
            writer,
            task: self.task,
            seq,
            parent: self.seq,
            key,
            writes_as,
            hold: Duration::from_millis(10 + seq % 30),
            start: now_us(),
            acquired: None,
            finished: None,
            returned: None,
            reported: false,
        };
        let mut reentry = make(
            &mut *self.writer,
            reentry_seq,
            own,
            Some((self.seq, acquired)),
        );
        let mut first = make(first_writer, first_seq, other, None);
        let mut second = make(second_writer, second_seq, other, None);
        // The re-entry, then the joined calls, each waiting up to its wait.
        let limit = (self.config.wait + self.config.command_timeout + HANG_SLACK) * 3;
        shared.locked_calls.fetch_add(1, Ordering::SeqCst);
        let work = async {
            reentry.call().await;
            tokio::join!(first.call(), second.call());
        };
        let done = bounded(shared, limit, self.guard.scope(work)).await;
        let stopped = now_us();
        shared.locked_calls.fetch_sub(1, Ordering::SeqCst);
        for mut call in [reentry, first, second] {
            call.report(stopped);
        }
        match done {
            // The section's own lock was lost: its work was dropped.
            Some(Err(_)) => self.notice(),
            Some(Ok(())) => {}
            None => emit(WorkerLine::Hung {
                task: self.task,
                key: other,
                call: Call::Acquire,
                start: acquired,
                limit_ms: limit.as_millis() as u64,
            }),
        }
        if self.told.is_none() {
            self.write(false).await;
        }
        if self.told.is_none() && self.guard.is_lost() {
            self.notice();
        }
    }

    /// A critical section that, as ordered, waits `delay` for its lock to
    /// be removed from Redis (the orchestrator force-releases or deletes it
    /// once told, and takes it itself), then re-enters it: a nested
    /// acquisition of the same lock of the same kind inside `guard.scope`,
    /// as a `#[distributed_lock]` function called in the body makes. The
    /// re-entry is a section of its own (number from `seq`) whose parent is
    /// this one. A re-entry that fails as `Lost` tells this holder.
    async fn reenter_after_removal(
        &mut self,
        shared: &Shared,
        client: &LockClient,
        seq: &mut u64,
        delay: Duration,
    ) {
        let (key, token) = self.parts[0];
        emit(WorkerLine::Reentering {
            task: self.task,
            seq: self.seq,
            key,
            token,
        });
        self.hold_for(delay).await;
        if self.told.is_some() {
            return;
        }
        let names: Vec<String> = self.parts.iter().map(|(k, _)| format!("k{k}")).collect();
        let request = match (self.config.kind, self.role) {
            (LockKind::Exclusive, _) => client.lock(&names[0]),
            (LockKind::Fair, _) => client.fair_lock(&names[0]),
            (LockKind::Semaphore, _) => client.semaphore(&names[0], PERMITS),
            (LockKind::ReadWrite, Role::Read) => client.read_lock(&names[0]),
            (LockKind::ReadWrite, _) => client.write_lock(&names[0]),
            (LockKind::Multi, _) => client.lock_all(names),
        };
        *seq += 1;
        let nested = *seq;
        let start = now_us();
        let work = async {
            let inner = request.acquire().await?;
            let acquired = now_us();
            let fences = inner.fences();
            tokio::time::sleep(Duration::from_millis(5)).await;
            let end = now_us();
            let released = inner.release().await;
            Ok::<_, LockError>((acquired, fences, end, released))
        };
        let limit = self.config.wait + self.config.command_timeout + HANG_SLACK;
        shared.locked_calls.fetch_add(1, Ordering::SeqCst);
        let done = bounded(shared, limit, self.guard.scope(work)).await;
        shared.locked_calls.fetch_sub(1, Ordering::SeqCst);
        match done {
            // The section's lock was lost while it re-entered.
            Some(Err(_)) => self.notice(),
            Some(Ok(Ok((acquired, fences, end, released)))) => {
                for lock in fences {
                    let index = lock.name.strip_prefix('k').and_then(|k| k.parse().ok());
                    emit(WorkerLine::Section(SectionLine {
                        task: self.task,
                        seq: nested,
                        key: index.unwrap_or(key),
                        role: self.role,
                        token: lock.fence,
                        start,
                        acquired,
                        release: end,
                        told: None,
                        reason: None,
                        valid_at_told: None,
                        valid_end: None,
                        parent: Some(self.seq),
                    }));
                }
                let outcome = match released {
                    Ok(()) => ReleaseOutcome::Ok,
                    Err(err) if err.is_lost() => ReleaseOutcome::Lost,
                    Err(_) => ReleaseOutcome::Error,
                };
                emit(WorkerLine::Released {
                    task: self.task,
                    seq: nested,
                    outcome,
                });
            }
            // The runtime said the lock is gone: this holder was told.
            Some(Ok(Err(err))) if err.is_lost() => self.notice(),
            Some(Ok(Err(err))) => emit(WorkerLine::Failed {
                task: self.task,
                key,
                kind: fail_kind(&err),
                start,
                end: now_us(),
            }),
            None => emit(WorkerLine::Hung {
                task: self.task,
                key,
                call: Call::Acquire,
                start,
                limit_ms: limit.as_millis() as u64,
            }),
        }
        if self.told.is_none() {
            self.write(false).await;
        }
        if self.told.is_none() && self.guard.is_lost() {
            self.notice();
        }
    }

    async fn run(&mut self, shared: &Shared, client: &LockClient, seq: &mut u64, rng: &mut Rng) {
        self.write(true).await;
        let stall = shared.stall_ms.swap(0, Ordering::SeqCst);
        if stall > 0 {
            // Holders in locked calls have no deadline the checker could
            // end a frozen holder's interval at: let theirs finish first,
            // and no new ones start meanwhile.
            shared.stall_pending.store(true, Ordering::SeqCst);
            while shared.locked_calls.load(Ordering::SeqCst) > 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let start = now_us();
            std::thread::sleep(Duration::from_millis(stall));
            let end = now_us();
            shared.stall_pending.store(false, Ordering::SeqCst);
            shared
                .stalled_us
                .fetch_add((end - start) as u64, Ordering::SeqCst);
            emit(WorkerLine::Stalled { start, end });
            // Straight on to the end marker, as a paused program would,
            // before it could look at its lock: by now its lease has run
            // out here (the stall outlasts it), and the write tests the
            // fence, which must refuse it if another holder came since.
            self.write_unchecked(false).await;
            if self.guard.is_lost() {
                self.notice();
            }
            return;
        }
        let reenter = shared.reenter_ms.swap(0, Ordering::SeqCst);
        if reenter > 0 && self.told.is_none() {
            let delay = Duration::from_millis(reenter);
            return self.reenter_after_removal(shared, client, seq, delay).await;
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
            // Mostly short sections; one in LONG_ONE_IN spans several
            // renewals, so that faults catch holders in the middle of
            // their work.
            let lease = self.config.lease.as_millis() as u64;
            let work = if rng.below(LONG_ONE_IN) == 0 {
                rng.range(lease / 2, lease * 5 / 2)
            } else {
                rng.range(SHORT_MS.0, SHORT_MS.1)
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
