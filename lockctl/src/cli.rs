//! The command line: deployments, options and commands.

use std::env::VarError;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use lock_runtime::Deployment;

use crate::secret::{Redactor, with_password};

/// The password for every URL of the deployment.
pub(crate) const PASSWORD_ENV: &str = "LOCKCTL_PASSWORD";
/// The server when no deployment option is given.
pub(crate) const URL_ENV: &str = "LOCKCTL_URL";
/// The server when neither a deployment option nor `LOCKCTL_URL` is given.
pub(crate) const REDIS_URL_ENV: &str = "REDIS_URL";
/// The server when none is named anywhere.
const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// What `--help` says after the options: the environment, and the exit
/// codes (also the contract the tests check).
const AFTER_HELP: &str = "\
Environment:
  LOCKCTL_PASSWORD  the password for every URL of the deployment (the server, the cluster
                    seeds, the sentinels, the Redlock masters), so that it is not on the
                    command line where `ps` shows it; lockctl never prints it. A password
                    written in a URL wins over it for that URL.
  LOCKCTL_URL       the server when no --url, --cluster, --sentinel or --redlock is given
  REDIS_URL         the same, when LOCKCTL_URL is not set either
  NO_COLOR          no colors

Exit codes:
  0  done (for `inspect`: the lock is held or waited for; for `release`: it was released)
  1  Redis could not be reached or answered with an error
  2  bad usage, including `release` without --force, or an unreadable --tls-ca file
  3  `inspect` or `release`: nobody holds the lock
  4  `release`: not confirmed at the prompt
  5  `doctor`: a server needs a change (see its FAIL lines)";

/// See and manage the locks of lock-runtime: who holds what, who waits,
/// and take a lock away from a stuck holder.
///
/// Locks are named as in the code (`order:42`, the `key` of
/// `#[distributed_lock]`), under the prefix the clients use (`--prefix`,
/// default `lock:`).
#[derive(Debug, Parser)]
#[command(name = "lockctl", version, after_help = AFTER_HELP)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) target: Target,

    /// The master's name in the sentinels' configuration (with `--sentinel`).
    #[arg(long, value_name = "NAME")]
    pub(crate) service: Option<String>,

    /// Trust the CA certificates in this PEM file for `rediss://` URLs,
    /// instead of the system's roots: for servers whose certificate comes
    /// from a private CA.
    #[arg(long, value_name = "PEM_FILE")]
    pub(crate) tls_ca: Option<PathBuf>,

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
/// (default: `--url` from LOCKCTL_URL, else REDIS_URL, else
/// `redis://127.0.0.1:6379`). The password comes from the URLs or
/// LOCKCTL_PASSWORD.
#[derive(Debug, Args)]
#[group(multiple = false)]
pub(crate) struct Target {
    /// One Redis server [default: $LOCKCTL_URL, else $REDIS_URL, else
    /// redis://127.0.0.1:6379].
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

/// What lockctl takes from its environment.
#[derive(Debug, Default)]
pub(crate) struct Env {
    /// `LOCKCTL_PASSWORD`.
    pub(crate) password: Option<String>,
    /// `LOCKCTL_URL`, else `REDIS_URL`.
    pub(crate) url: Option<String>,
}

impl Env {
    /// Reads the variables; an empty one counts as unset.
    pub(crate) fn read() -> Result<Env, String> {
        let var = |name: &str| match std::env::var(name) {
            Ok(value) if !value.is_empty() => Ok(Some(value)),
            Ok(_) | Err(VarError::NotPresent) => Ok(None),
            Err(VarError::NotUnicode(_)) => Err(format!("{name} is not valid UTF-8")),
        };
        let url = match var(URL_ENV)? {
            Some(url) => Some(url),
            None => var(REDIS_URL_ENV)?,
        };
        Ok(Env {
            password: var(PASSWORD_ENV)?,
            url,
        })
    }
}

/// How to connect, and what never to print (no `Debug`: it holds the
/// password).
pub(crate) struct Connection {
    /// The deployment, with the password in each of its URLs.
    pub(crate) deployment: Deployment,
    /// The PEM file of `--tls-ca`, read.
    pub(crate) tls_roots: Option<Vec<u8>>,
    /// Hides the passwords in messages.
    pub(crate) redactor: Redactor,
    /// The URLs given (with their passwords): the server, the Cluster
    /// seeds, the sentinels or the Redlock masters.
    pub(crate) urls: Vec<String>,
    /// How the URLs are used.
    pub(crate) shape: Shape,
}

/// What the URLs of a deployment are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// Servers that hold locks: one, or each Redlock master.
    Servers,
    /// Cluster nodes.
    Cluster,
    /// Sentinels, which hold no locks.
    Sentinels,
}

impl Cli {
    /// The deployment the options and `env` name, with the password of
    /// `env` in every URL that has none, and the `--tls-ca` file read.
    /// Errors are usage errors, and name no password.
    pub(crate) fn connection(&self, env: &Env) -> Result<Connection, String> {
        let target = &self.target;
        let named = |urls: &[String]| -> Vec<String> {
            urls.iter()
                .map(|url| match &env.password {
                    Some(password) => with_password(url, password),
                    None => url.clone(),
                })
                .collect()
        };
        let (deployment, urls, shape) = if !target.cluster.is_empty() {
            let urls = named(&target.cluster);
            (Deployment::cluster(urls.clone()), urls, Shape::Cluster)
        } else if !target.sentinel.is_empty() {
            let urls = named(&target.sentinel);
            let service = self.service.clone().unwrap_or_default();
            (
                Deployment::sentinel(urls.clone(), service),
                urls,
                Shape::Sentinels,
            )
        } else if !target.redlock.is_empty() {
            let urls = named(&target.redlock);
            (Deployment::redlock(urls.clone()), urls, Shape::Servers)
        } else {
            let url = target
                .url
                .clone()
                .or_else(|| env.url.clone())
                .unwrap_or_else(|| DEFAULT_URL.to_owned());
            let urls = named(&[url]);
            (Deployment::from(urls[0].clone()), urls, Shape::Servers)
        };
        let redactor = Redactor::new(env.password.as_deref(), &urls);
        let tls_roots = match &self.tls_ca {
            None => None,
            Some(path) => {
                let pem = read_pem(path)?;
                let tls = urls.iter().any(|url| {
                    let url = url.to_ascii_lowercase();
                    url.starts_with("rediss://") || url.starts_with("valkeys://")
                });
                if !tls {
                    return Err(
                        "--tls-ca is for `rediss://` URLs, and the deployment has none \
                         (a `rediss://host:port` URL turns TLS on)"
                            .to_owned(),
                    );
                }
                Some(pem)
            }
        };
        Ok(Connection {
            deployment,
            tls_roots,
            redactor,
            urls,
            shape,
        })
    }
}

/// The contents of a PEM file with at least one certificate in it.
fn read_pem(path: &std::path::Path) -> Result<Vec<u8>, String> {
    let pem = std::fs::read(path)
        .map_err(|err| format!("cannot read the --tls-ca file `{}`: {err}", path.display()))?;
    let marker = b"-----BEGIN CERTIFICATE-----";
    if !pem.windows(marker.len()).any(|window| window == marker) {
        return Err(format!(
            "the --tls-ca file `{}` holds no PEM certificate (no `-----BEGIN CERTIFICATE-----` line)",
            path.display()
        ));
    }
    Ok(pem)
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
    /// Releases are seen at once (the release channel), except one that
    /// names another client's waiter in line (sent to that client alone);
    /// those and acquisitions at the next read, every `--interval-ms`.
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
    /// Check that each server suits the locks, and say what to change.
    ///
    /// Reads the version, INFO, the eviction policy, scripting, functions,
    /// publishing, persistence and the replication role of the server, of each Redlock
    /// master, or of each Cluster node named (name every master). Sentinels
    /// hold no locks: give the master's --url instead. Exit code 5 when
    /// something must change; warnings alone exit 0.
    Doctor,
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
