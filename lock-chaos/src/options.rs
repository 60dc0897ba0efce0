//! Command-line options of the orchestrator.

use std::path::PathBuf;
use std::time::Duration;

use crate::checker::FaultKind;

/// Permits of every semaphore in a `semaphore` run.
pub const PERMITS: u32 = 2;

/// Default fault time per kind with `--ci`.
pub const CI_DURATION: Duration = Duration::from_secs(12);

/// The kind of lock the worker tasks take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LockKind {
    /// `lock(k)`: one holder.
    Exclusive,
    /// `lock_all([a, b])` on two distinct random keys.
    Multi,
    /// `semaphore(k, PERMITS)`.
    Semaphore,
    /// `read_lock(k)` three times in four, `write_lock(k)` otherwise.
    ReadWrite,
    /// `fair_lock(k)`: one holder, waiters in arrival order.
    Fair,
}

impl LockKind {
    /// Every kind, in report order.
    pub const ALL: [LockKind; 5] = [
        LockKind::Exclusive,
        LockKind::Multi,
        LockKind::Semaphore,
        LockKind::ReadWrite,
        LockKind::Fair,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            LockKind::Exclusive => "exclusive",
            LockKind::Multi => "multi",
            LockKind::Semaphore => "semaphore",
            LockKind::ReadWrite => "rw",
            LockKind::Fair => "fair",
        }
    }

    /// What the worker tasks call, for reports.
    pub fn description(self) -> &'static str {
        match self {
            LockKind::Exclusive => "`lock(k)` on one random key",
            LockKind::Multi => "`lock_all([a, b])` on two distinct random keys",
            LockKind::Semaphore => "`semaphore(k, 2)` on one random key (2 permits)",
            LockKind::ReadWrite => {
                "`read_lock(k)` (3 in 4 sections) or `write_lock(k)` (1 in 4) on one random key"
            }
            LockKind::Fair => "`fair_lock(k)` on one random key",
        }
    }

    /// Parses a name printed by [`LockKind::name`].
    pub fn from_name(name: &str) -> Option<LockKind> {
        LockKind::ALL.into_iter().find(|kind| kind.name() == name)
    }
}

impl std::fmt::Display for LockKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Where the locks live during a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Topology {
    /// One `redis-server` behind the proxy (the original suite).
    Single,
    /// A Redis Cluster of 3 masters and 3 replicas.
    Cluster,
    /// A master, 2 replicas and 3 Sentinels.
    Sentinel,
    /// Redlock over 5 independent masters, each behind its own proxy.
    Redlock,
    /// One server behind the proxy that is made to evict keys (measured).
    Eviction,
}

impl Topology {
    /// Every topology, in report order.
    pub const ALL: [Topology; 5] = [
        Topology::Single,
        Topology::Cluster,
        Topology::Sentinel,
        Topology::Redlock,
        Topology::Eviction,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Topology::Single => "single",
            Topology::Cluster => "cluster",
            Topology::Sentinel => "sentinel",
            Topology::Redlock => "redlock",
            Topology::Eviction => "eviction",
        }
    }

    /// Parses a name printed by [`Topology::name`].
    pub fn from_name(name: &str) -> Option<Topology> {
        Topology::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The runs made for this topology (Sentinel: with and without
    /// `min_replicas`).
    pub fn setups(self) -> Vec<Setup> {
        match self {
            Topology::Single => vec![Setup::Single],
            Topology::Cluster => vec![Setup::Cluster],
            Topology::Sentinel => vec![
                Setup::Sentinel { min_replicas: 1 },
                Setup::Sentinel { min_replicas: 0 },
            ],
            Topology::Redlock => vec![Setup::Redlock],
            Topology::Eviction => vec![Setup::Eviction],
        }
    }
}

impl std::fmt::Display for Topology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One run's deployment and client settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Setup {
    /// One server behind the proxy.
    Single,
    /// A Cluster of 3 masters + 3 replicas, clients with `min_replicas(1)`.
    Cluster,
    /// A Sentinel group; clients with `min_replicas(n)`.
    Sentinel {
        /// The clients' `min_replicas`.
        min_replicas: u32,
    },
    /// Redlock over 5 masters behind proxies.
    Redlock,
    /// One server behind the proxy whose memory limit is lowered until it
    /// evicts lock keys; clients built with `.allow_eviction(true)`.
    Eviction,
}

impl Setup {
    /// The topology.
    pub fn topology(self) -> Topology {
        match self {
            Setup::Single => Topology::Single,
            Setup::Cluster => Topology::Cluster,
            Setup::Sentinel { .. } => Topology::Sentinel,
            Setup::Redlock => Topology::Redlock,
            Setup::Eviction => Topology::Eviction,
        }
    }

    /// The clients' `min_replicas`.
    pub fn min_replicas(self) -> u32 {
        match self {
            Setup::Cluster => 1,
            Setup::Sentinel { min_replicas } => min_replicas,
            Setup::Single | Setup::Redlock | Setup::Eviction => 0,
        }
    }

    /// Whether a safety figure above 0 fails the run. The Sentinel run
    /// without `min_replicas` measures what asynchronous replication loses,
    /// the eviction run what evicting lock keys does.
    pub fn must_be_safe(self) -> bool {
        !matches!(self, Setup::Sentinel { min_replicas: 0 } | Setup::Eviction)
    }

    /// A short label for tables and messages.
    pub fn label(self) -> String {
        match self {
            Setup::Single => "single".into(),
            Setup::Cluster => "cluster (min_replicas 1)".into(),
            Setup::Sentinel { min_replicas: 0 } => {
                "sentinel WITHOUT min_replicas (measured, not a failure)".into()
            }
            Setup::Sentinel { min_replicas } => format!("sentinel (min_replicas {min_replicas})"),
            Setup::Redlock => "redlock (5 masters)".into(),
            Setup::Eviction => "eviction (measured, not a failure)".into(),
        }
    }

    /// What is started, for reports.
    pub fn description(self) -> String {
        match self {
            Setup::Single => "one `redis-server` behind the proxy".into(),
            Setup::Cluster => {
                "a Redis Cluster of 3 masters and 3 replicas (`cluster-node-timeout` \
                1 s), clients built with `Deployment::cluster(urls)` and `.min_replicas(1)`, \
                connected to the nodes directly"
                    .into()
            }
            Setup::Sentinel { min_replicas } => format!(
                "a master, 2 replicas and 3 Sentinels (quorum 2, `down-after-milliseconds` 2 s), \
                 clients connected directly, built with \
                 `Deployment::sentinel(sentinel_urls, service)`{}",
                if min_replicas == 0 {
                    " and **no** `min_replicas`: a lock is granted before any replica has it, so a \
                     failover can lose it. Its safety figures are measured, not required to be 0"
                        .to_owned()
                } else {
                    format!(" and `.min_replicas({min_replicas})`")
                }
            ),
            Setup::Redlock => "5 independent masters, each behind its own loopback proxy, clients \
                built with `Deployment::redlock(proxy_urls)`"
                .into(),
            Setup::Eviction => "one `redis-server` behind the proxy, clients built with \
                `.allow_eviction(true)`, whose memory limit the `eviction` fault lowers until \
                it evicts lock keys (`volatile-lru`): a deployment the client refuses by \
                default. Its safety figures are measured, not required to be 0"
                .into(),
        }
    }

    /// The faults injected in this setup's runs (a single-Redis run uses
    /// `--faults`).
    pub fn faults(self) -> Vec<FaultKind> {
        let mut faults = match self {
            Setup::Single => return FaultKind::ALL.to_vec(),
            // Nothing else, so that what happens is eviction's doing.
            Setup::Eviction => return vec![FaultKind::Eviction],
            Setup::Cluster => vec![FaultKind::ClusterFailover, FaultKind::ClusterMasterKill],
            Setup::Sentinel { .. } => vec![
                FaultKind::SentinelLaggingKill,
                FaultKind::SentinelMasterKill,
            ],
            Setup::Redlock => vec![
                FaultKind::RedlockPartition,
                FaultKind::RedlockPause,
                FaultKind::RedlockKill,
            ],
        };
        faults.extend([FaultKind::WorkerStall, FaultKind::WorkerKill]);
        faults
    }
}

/// Usage text.
pub const USAGE: &str = "\
lock-chaos: fault suite for lock-runtime

USAGE:
    cargo run --release -p lock-chaos -- [OPTIONS]

OPTIONS:
    --kind <LIST>          comma-separated kinds of lock, one run each (default
                           exclusive; every kind with --ci): exclusive, multi,
                           semaphore, rw, fair; `all` names every kind
    --duration <D>         how long to inject faults, per kind on one server
                           (default 300s; 12s with --ci)
    --topology-duration <D>
                           how long to inject faults in each topology run
                           (default 90s; --duration when that alone is given)
    --clients <N>          client processes (default 4)
    --tasks <N>            tasks per client process (default 8)
    --keys <N>             lock names the tasks contend for (default 16;
                           multi runs use twice as many)
    --lease <D>            lease of every lock (default 1s)
    --wait <D>             wait of every acquire (default 2s)
    --command-timeout <D>  the clients' command timeout (default 300ms)
    --restart-quarantine <D>
                           the clients' restart quarantine: no lock for this long
                           after Redis restarts without its data (default: the
                           lease; 0s turns it off)
    --strict-quarantine    quarantine also servers a client never saw restart
    --seed <N>             seed of the fault plan and the workload (default 1)
    --faults <LIST>        comma-separated fault kinds to inject in the
                           single-server runs (default all): redis-pause-short,
                           redis-pause-long, redis-restart, redis-restart-delayed,
                           redis-restart-stale, client-kill, client-pause,
                           proxy-delay, proxy-cut, proxy-blackhole, worker-stall,
                           worker-kill, force-release, key-delete, release-cut,
                           trylock-stall
    --topology <LIST>      comma-separated deployments, one run each (default
                           single; every one with --ci): single, cluster (3
                           masters + 3 replicas), sentinel (master + 2 replicas
                           + 3 Sentinels; run with min_replicas 1 and without),
                           redlock (5 masters, each behind a proxy), eviction
                           (one server made to evict lock keys; measured, not
                           a failure); `all` names every one. Topology runs
                           take exclusive locks and inject that topology's
                           faults
    --report <PATH>        write the figures as Markdown to PATH (e.g. RELIABILITY.md)
    --ci                   the short runs for CI: every kind (unless --kind),
                           12 s of faults each, and every topology (unless
                           --topology)
    -h, --help             this text

Durations: 500ms, 1s, 1.5s, 2m, 1m30s. The single-server runs share one fault
plan: each goes on where the previous kind's run stopped, so that short runs
together inject every kind of fault. The exit code is 1 when a safety figure
is not 0 in a run that must be safe (all but the measured ones: sentinel
without min_replicas, eviction), 2 when the run could not be carried out.
With RUST_LOG set (e.g. RUST_LOG=lock_runtime=debug), every process prints
the runtime's logs on stderr, stamped with CLOCK_MONOTONIC in ms and its pid.";

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// How long faults are injected, per kind of lock on one server.
    pub duration: Duration,
    /// How long faults are injected in each run of another topology than
    /// a single server (Cluster, Sentinel, Redlock, eviction).
    pub topology_duration: Duration,
    /// Client processes.
    pub clients: u32,
    /// Tasks per client process.
    pub tasks: u32,
    /// Lock names.
    pub keys: u32,
    /// Lease of every lock.
    pub lease: Duration,
    /// Wait of every acquire.
    pub wait: Duration,
    /// The clients' command timeout.
    pub command_timeout: Duration,
    /// The clients' restart quarantine (`None`: the lease).
    pub restart_quarantine: Option<Duration>,
    /// Whether the quarantine covers servers a client never saw restart.
    pub strict_quarantine: bool,
    /// Seed.
    pub seed: u64,
    /// Kinds of lock, one run each, in this order.
    pub kinds: Vec<LockKind>,
    /// Deployments, in this order (only single runs every kind).
    pub topologies: Vec<Topology>,
    /// Fault kinds to inject.
    pub faults: Vec<FaultKind>,
    /// Where to write the Markdown report.
    pub report: Option<PathBuf>,
    /// The short CI run.
    pub ci: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            duration: Duration::from_secs(300),
            topology_duration: Duration::from_secs(90),
            clients: 4,
            tasks: 8,
            keys: 16,
            lease: Duration::from_secs(1),
            wait: Duration::from_secs(2),
            command_timeout: Duration::from_millis(300),
            restart_quarantine: None,
            strict_quarantine: false,
            seed: 1,
            kinds: vec![LockKind::Exclusive],
            topologies: vec![Topology::Single],
            faults: FaultKind::ALL.to_vec(),
            report: None,
            ci: false,
        }
    }
}

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    /// Run with these options.
    Run(Box<Options>),
    /// Print the usage.
    Help,
}

/// Parses a duration such as `500ms`, `1s`, `1.5s`, `2m` or `1m30s`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("bad duration `{text}` (try 500ms, 1s, 2m, 1m30s)");
    let mut total = Duration::ZERO;
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let (number, tail) = rest.split_at(digits);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let value: f64 = number.parse().map_err(|_| bad())?;
        let seconds = match unit {
            "ms" => value / 1000.0,
            "s" => value,
            "m" => value * 60.0,
            "h" => value * 3600.0,
            _ => return Err(bad()),
        };
        total += Duration::try_from_secs_f64(seconds).map_err(|_| bad())?;
        rest = tail;
    }
    Ok(total)
}

/// Parses the arguments after the program name.
pub fn parse(args: &[String]) -> Result<Parsed, String> {
    let mut options = Options::default();
    let mut duration = None;
    let mut topology_duration = None;
    let mut faults = None;
    let mut kinds = None;
    let mut topologies = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag, Some(value.to_owned())),
            _ => (arg.as_str(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next().cloned())
                .ok_or_else(|| format!("`{flag}` needs a value"))
        };
        let number = |v: String| {
            v.parse::<u64>()
                .map_err(|_| format!("`{flag}` needs a whole number, not `{v}`"))
        };
        let count = |v: String| match number(v)? {
            0 => Err(format!("`{flag}` must be at least 1")),
            n => u32::try_from(n).map_err(|_| format!("`{flag}` is too large")),
        };
        match flag {
            "-h" | "--help" => return Ok(Parsed::Help),
            "--ci" => options.ci = true,
            "--strict-quarantine" => options.strict_quarantine = true,
            "--restart-quarantine" => options.restart_quarantine = Some(parse_duration(&value()?)?),
            "--duration" => duration = Some(parse_duration(&value()?)?),
            "--topology-duration" => topology_duration = Some(parse_duration(&value()?)?),
            "--clients" => options.clients = count(value()?)?,
            "--tasks" => options.tasks = count(value()?)?,
            "--keys" => options.keys = count(value()?)?,
            "--lease" => options.lease = parse_duration(&value()?)?,
            "--wait" => options.wait = parse_duration(&value()?)?,
            "--command-timeout" => options.command_timeout = parse_duration(&value()?)?,
            "--seed" => options.seed = number(value()?)?,
            "--report" => options.report = Some(PathBuf::from(value()?)),
            "--kind" => {
                let list = value()?;
                let named: Vec<LockKind> = if list == "all" {
                    LockKind::ALL.to_vec()
                } else {
                    list.split(',')
                        .filter(|name| !name.is_empty())
                        .map(|name| {
                            LockKind::from_name(name.trim())
                                .ok_or_else(|| format!("unknown kind of lock `{name}`"))
                        })
                        .collect::<Result<_, _>>()?
                };
                if named.is_empty() {
                    return Err("`--kind` names no kind of lock".into());
                }
                kinds = Some(named);
            }
            "--topology" => {
                let list = value()?;
                let named: Vec<Topology> = if list == "all" {
                    Topology::ALL.to_vec()
                } else {
                    list.split(',')
                        .filter(|name| !name.is_empty())
                        .map(|name| {
                            Topology::from_name(name.trim())
                                .ok_or_else(|| format!("unknown topology `{name}`"))
                        })
                        .collect::<Result<_, _>>()?
                };
                if named.is_empty() {
                    return Err("`--topology` names no topology".into());
                }
                topologies = Some(named);
            }
            "--faults" => {
                let named: Vec<FaultKind> = value()?
                    .split(',')
                    .filter(|name| !name.is_empty())
                    .map(|name| {
                        FaultKind::from_name(name.trim())
                            .ok_or_else(|| format!("unknown fault kind `{name}`"))
                    })
                    .collect::<Result<_, _>>()?;
                if named.is_empty() {
                    return Err("`--faults` names no fault kind".into());
                }
                faults = Some(named);
            }
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    options.duration = duration.unwrap_or(if options.ci {
        CI_DURATION
    } else {
        options.duration
    });
    // A topology run lasts as long as a kind's run with --ci or when
    // --duration alone is given; otherwise its own default.
    options.topology_duration = topology_duration.unwrap_or(if options.ci || duration.is_some() {
        options.duration
    } else {
        options.topology_duration
    });
    options.faults = faults.unwrap_or_else(|| options.default_faults());
    options.kinds = kinds.unwrap_or_else(|| options.default_kinds());
    options.topologies = topologies.unwrap_or_else(|| options.default_topologies());
    if options.kinds.contains(&LockKind::Multi) && options.keys < 2 {
        return Err("`--kind multi` needs `--keys` of at least 2".into());
    }
    if options.lease < Duration::from_millis(300) {
        return Err("`--lease` must be at least 300ms".into());
    }
    if options.command_timeout.is_zero() {
        return Err("`--command-timeout` must be longer than 0".into());
    }
    Ok(Parsed::Run(Box::new(options)))
}

impl Options {
    /// The options of one kind's run: a multi-lock section takes two lock
    /// names, so its runs use twice the names, which keeps its contention,
    /// and so its number of critical sections, near a one-lock kind's.
    pub fn for_kind(&self, kind: LockKind) -> Options {
        let mut options = self.clone();
        if kind == LockKind::Multi {
            options.keys = self.keys.saturating_mul(2);
        }
        options
    }

    /// The kinds run when `--kind` is not given.
    fn default_kinds(&self) -> Vec<LockKind> {
        if self.ci {
            LockKind::ALL.to_vec()
        } else {
            vec![LockKind::Exclusive]
        }
    }

    /// The topologies run when `--topology` is not given.
    fn default_topologies(&self) -> Vec<Topology> {
        if self.ci {
            Topology::ALL.to_vec()
        } else {
            vec![Topology::Single]
        }
    }

    /// Every run's setup, in order.
    pub fn setups(&self) -> Vec<Setup> {
        self.topologies.iter().flat_map(|t| t.setups()).collect()
    }

    /// The faults injected when `--faults` is not given: every kind.
    pub fn default_faults(&self) -> Vec<FaultKind> {
        FaultKind::ALL.to_vec()
    }

    /// How long faults are injected in a run of `setup`.
    pub fn faults_for(&self, setup: Setup) -> Duration {
        if setup == Setup::Single {
            self.duration
        } else {
            self.topology_duration
        }
    }

    /// The clients' restart quarantine.
    pub fn quarantine(&self) -> Duration {
        self.restart_quarantine.unwrap_or(self.lease)
    }

    /// The command line that reproduces this run.
    pub fn command(&self) -> String {
        let defaults = Options::default();
        let mut parts = vec!["cargo run --release -p lock-chaos --".to_owned()];
        if self.ci {
            parts.push("--ci".into());
        }
        let default_duration = if self.ci {
            CI_DURATION
        } else {
            defaults.duration
        };
        let mut flag = |name: &str, value: String, default: String| {
            if value != default {
                parts.push(format!("--{name} {value}"));
            }
        };
        let d = |d: Duration| {
            let ms = d.as_millis();
            if ms.is_multiple_of(1000) {
                format!("{}s", ms / 1000)
            } else {
                format!("{ms}ms")
            }
        };
        let kinds = |kinds: &[LockKind]| {
            if kinds == LockKind::ALL {
                "all".to_owned()
            } else {
                kinds.iter().map(|k| k.name()).collect::<Vec<_>>().join(",")
            }
        };
        flag("kind", kinds(&self.kinds), kinds(&self.default_kinds()));
        let topologies = |list: &[Topology]| {
            if list == Topology::ALL {
                "all".to_owned()
            } else {
                list.iter().map(|t| t.name()).collect::<Vec<_>>().join(",")
            }
        };
        flag(
            "topology",
            topologies(&self.topologies),
            topologies(&self.default_topologies()),
        );
        flag("duration", d(self.duration), d(default_duration));
        // Only runs of other topologies than one server have it.
        let default_topology_duration = if self.topologies.iter().all(|t| *t == Topology::Single) {
            self.topology_duration
        } else if self.ci || self.duration != default_duration {
            self.duration
        } else {
            defaults.topology_duration
        };
        flag(
            "topology-duration",
            d(self.topology_duration),
            d(default_topology_duration),
        );
        flag(
            "clients",
            self.clients.to_string(),
            defaults.clients.to_string(),
        );
        flag("tasks", self.tasks.to_string(), defaults.tasks.to_string());
        flag("keys", self.keys.to_string(), defaults.keys.to_string());
        flag("lease", d(self.lease), d(defaults.lease));
        flag("wait", d(self.wait), d(defaults.wait));
        flag(
            "command-timeout",
            d(self.command_timeout),
            d(defaults.command_timeout),
        );
        flag(
            "restart-quarantine",
            self.restart_quarantine.map(d).unwrap_or_default(),
            String::new(),
        );
        flag("seed", self.seed.to_string(), defaults.seed.to_string());
        let names =
            |kinds: &[FaultKind]| kinds.iter().map(|k| k.name()).collect::<Vec<_>>().join(",");
        flag("faults", names(&self.faults), names(&self.default_faults()));
        if self.strict_quarantine {
            parts.push("--strict-quarantine".into());
        }
        if let Some(report) = &self.report {
            parts.push(format!("--report {}", report.display()));
        }
        parts.join(" ")
    }
}
