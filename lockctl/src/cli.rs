//! The command line: deployments, options and commands.

use clap::{Args, Parser, Subcommand};
use lock_runtime::Deployment;

/// What `--help` says about exit codes; also the contract the tests check.
const EXIT_CODES: &str = "\
Exit codes:
  0  done (for `inspect`: the lock is held or waited for; for `release`: it was released)
  1  Redis could not be reached or answered with an error
  2  bad usage, including `release` without --force
  3  `inspect` or `release`: nobody holds the lock
  4  `release`: not confirmed at the prompt";

/// See and manage the locks of lock-runtime: who holds what, who waits,
/// and take a lock away from a stuck holder.
///
/// Locks are named as in the code (`order:42`, the `key` of
/// `#[distributed_lock]`), under the prefix the clients use (`--prefix`,
/// default `lock:`).
#[derive(Debug, Parser)]
#[command(name = "lockctl", version, after_help = EXIT_CODES)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) target: Target,

    /// The master's name in the sentinels' configuration (with `--sentinel`).
    #[arg(long, value_name = "NAME")]
    pub(crate) service: Option<String>,

    /// The key prefix the lock clients use.
    #[arg(long, global = true, default_value = "lock:", value_name = "PREFIX")]
    pub(crate) prefix: String,

    /// Print JSON instead of text (one object per line for `watch`).
    #[arg(long, global = true)]
    pub(crate) json: bool,

    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Where the locks live: at most one of these, before the command
/// (default: `--url redis://127.0.0.1:6379`).
#[derive(Debug, Args)]
#[group(multiple = false)]
pub(crate) struct Target {
    /// One Redis server.
    #[arg(long, value_name = "URL")]
    url: Option<String>,

    /// A Redis Cluster, reached through any of these nodes.
    #[arg(long, value_name = "URL,..", value_delimiter = ',')]
    cluster: Vec<String>,

    /// The master these sentinels report for `--service`.
    #[arg(
        long,
        value_name = "URL,..",
        value_delimiter = ',',
        requires = "service"
    )]
    sentinel: Vec<String>,

    /// Independent masters used with Redlock.
    #[arg(long, value_name = "URL,..", value_delimiter = ',')]
    redlock: Vec<String>,
}

impl Target {
    /// The deployment these options name.
    pub(crate) fn deployment(&self, service: Option<&str>) -> Deployment {
        if !self.cluster.is_empty() {
            Deployment::cluster(self.cluster.clone())
        } else if !self.sentinel.is_empty() {
            Deployment::sentinel(self.sentinel.clone(), service.unwrap_or_default())
        } else if !self.redlock.is_empty() {
            Deployment::redlock(self.redlock.clone())
        } else {
            Deployment::from(
                self.url
                    .clone()
                    .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned()),
            )
        }
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// List held locks: key, kind, owner, re-entry count, lease left,
    /// fencing token, waiters.
    List {
        /// Only names matching this glob (`order:*`, `job:[0-9]*`).
        pattern: Option<String>,
    },
    /// Show one lock: every holder in full and the waiters in line.
    Inspect {
        /// The lock's name.
        name: String,
    },
    /// Print each change of a lock's holders as it happens, until Ctrl-C.
    ///
    /// Releases are seen at once (the release channel); acquisitions at
    /// the next read, every `--interval-ms`.
    Watch {
        /// The lock's name.
        name: String,
        /// Stop after this many changes.
        #[arg(long, value_name = "N")]
        count: Option<u64>,
        /// How often to read the lock, in milliseconds.
        #[arg(long, value_name = "MS", default_value_t = 200)]
        interval_ms: u64,
    },
    /// Take a lock away from its holders (needs --force).
    ///
    /// Deletes what the holders hold and publishes the release, so waiters
    /// try again at once. The holders are not asked: each learns of the loss
    /// at its next renewal and may keep working until then, so the next
    /// holder can overlap with it (fencing tokens keep its late writes out).
    /// With --force on a terminal, lockctl shows the holders and asks
    /// first, unless --yes; when stdin is not a terminal (a script), --force
    /// alone is the consent.
    Release {
        /// The lock's name.
        name: String,
        /// Really release it.
        #[arg(long)]
        force: bool,
        /// Do not ask for confirmation on a terminal.
        #[arg(long, short = 'y')]
        yes: bool,
    },
}
