//! Test support that starts real, private `redis-server` processes, alone or
//! as whole topologies.
//!
//! - [`RedisServer`]: one server ([`RedisServer::start_many`] for several
//!   independent masters, e.g. for Redlock). [`RedisServer::script_calls`]
//!   counts the scripts it has run (`EVALSHA` and `EVAL`).
//! - [`RedisCluster`]: a Redis Cluster of masters and replicas, with manual
//!   and automatic failover.
//! - [`SentinelGroup`]: a master, its replicas and the Sentinels watching
//!   them, with automatic failover.
//! - [`Proxy`]: a TCP proxy between a client and a server that delays,
//!   cuts, refuses or black-holes its traffic (async: it runs on Tokio).
//!
//! Every [`RedisServer`] is a child process of the test binary, listening on
//! its own free port on `127.0.0.1`, with its own temporary working directory
//! and log file, and no persistence (`--save "" --appendonly no`). Tests never
//! depend on a server that is already running or on a fixed port.
//!
//! The servers' API is plain synchronous `std` code, so it can be used from
//! both sync and async (e.g. `#[tokio::test]`) tests; only [`Proxy`] is
//! async, and runs on the Tokio runtime that starts it. Failures to start a
//! server are test failures and therefore panic, with the server's log in
//! the message.
//!
//! The `redis-server` binary is looked up on `PATH`; set the environment
//! variable `LOCK_TESTKIT_REDIS_SERVER` to use another binary for every
//! server, topology and restart (a path, or a name looked up on `PATH`:
//! Valkey's `valkey-server`, or an older Redis), or start a server or a
//! cluster from a binary of its own with [`RedisServer::start_binary`] or
//! [`RedisCluster::start_binary`]. Sentinels are run with the same binary,
//! as `redis-server <config> --sentinel`; neither `redis-sentinel` nor
//! `redis-cli` is needed. A binary older than Redis 7.0 is given what it
//! understands: `--enable-debug-command` is left out (`DEBUG` is always
//! allowed there) and a cluster is formed the 6.2 way (see
//! [`RedisCluster::start_binary`]). The project's scripts run the tests with
//! Redis 7.0 (the distribution's), Valkey 9.1 and Redis 6.2.
//!
//! # Example
//!
//! ```
//! use lock_testkit::{RedisServer, unique_key};
//!
//! let mut server = RedisServer::start();
//! let key = unique_key("lock");
//!
//! assert_eq!(server.cli(&["PING"]), "PONG");
//! assert_eq!(server.cli(&["SET", &key, "owner-1"]), "OK");
//! assert_eq!(server.cli(&["GET", &key]), "owner-1");
//!
//! // Simulate a hung server, then a crash and a restart (data is lost).
//! server.pause();
//! server.resume();
//! server.restart();
//! assert_eq!(server.cli(&["GET", &key]), "(nil)");
//!
//! // Connect a real client with `server.url()`, e.g. "redis://127.0.0.1:PORT/".
//! println!("{}", server.url());
//! ```
//!
//! # Topologies
//!
//! Topologies are made of [`RedisServer`]s (Sentinels included) and are
//! reachable through them, so everything above (`cli`, `pause`, `kill`,
//! `restart`, ...) works on each of their processes. Starting a topology
//! waits until it is fully formed, and its failover helpers wait until the
//! new master is in place everywhere; all of these panic with a description
//! of what was last seen if that takes longer than 30 s.
//!
//! ```no_run
//! use lock_testkit::{RedisCluster, SentinelGroup};
//!
//! // 3 masters with 1 replica each; slots are split evenly between masters.
//! let mut cluster = RedisCluster::start(3, 1);
//! let seeds = cluster.urls();
//! let master = cluster.master_for_key("orders:42");
//! cluster.kill_master(master);
//! let promoted = cluster.wait_for_failover(master);
//! assert_eq!(cluster.master_for_key("orders:42"), promoted);
//!
//! // 1 master, 2 replicas, 3 Sentinels (quorum 2).
//! let mut group = SentinelGroup::start(2, 3);
//! let sentinels = group.sentinel_urls();
//! let old = group.kill_master();
//! let new = group.wait_for_failover(old);
//! assert_eq!(group.current_master_port(), new);
//! # drop((seeds, sentinels));
//! ```
//!
//! Typical times on a 2-core machine: a cluster of 6 nodes forms in about
//! 2 s and fails over in 2 to 3 s after its master is killed or paused (0.2
//! to 0.6 s for a planned `CLUSTER FAILOVER`); a Sentinel group of 3 data
//! nodes and 3 Sentinels forms in about 2.5 s and fails over in about 5 s.
//!
//! # Caveats
//!
//! A server is killed when its [`RedisServer`] is dropped, and a topology's
//! processes when the topology is dropped. A server stored in a `static` is
//! never dropped, and a test binary that is killed (or aborts) cannot clean
//! up, so such servers outlive the test run.
//!
//! [`free_port`] never returns a port twice within a process, so a killed
//! server's port is not given to another server of the same test binary.
//! Another process (e.g. a second test binary running at the same time) may
//! still take it: replicas of the killed server, which keep reconnecting to
//! its port until they are promoted or reconfigured, would then resync from
//! that foreign server and lose their data.

mod cluster;
mod proxy;
mod resp;
mod revision;
mod sentinel;
mod server;
mod stats;
mod tls;

pub use cluster::RedisCluster;
pub use proxy::Proxy;
pub use revision::{Revision, revision};
pub use sentinel::SentinelGroup;
pub use server::{RedisServer, free_port, unique_key};
pub use tls::{Certificates, TlsServer};

use std::thread;
use std::time::{Duration, Instant};

/// How long a topology may take to form or to fail over.
const TOPOLOGY_TIMEOUT: Duration = Duration::from_secs(30);
/// Interval between two checks of a topology's state.
const TOPOLOGY_POLL: Duration = Duration::from_millis(50);
/// Timeout of one command sent to inspect a topology. Short, so that a hung
/// node makes one check fail rather than stall the wait.
const QUERY_TIMEOUT: Duration = Duration::from_secs(1);

/// Call `check` every [`TOPOLOGY_POLL`] until it returns `Ok`, and return
/// that value.
///
/// `check` returns `Err(reason)` while the awaited state is not reached yet.
///
/// # Panics
///
/// After [`TOPOLOGY_TIMEOUT`], with `what` (completing "timed out waiting
/// for ..."), the last reason, and what `context` returns (e.g. logs).
fn wait_for<T>(
    what: &str,
    mut check: impl FnMut() -> Result<T, String>,
    context: impl FnOnce() -> String,
) -> T {
    let deadline = Instant::now() + TOPOLOGY_TIMEOUT;
    loop {
        match check() {
            Ok(value) => return value,
            Err(reason) if Instant::now() >= deadline => panic!(
                "lock-testkit: timed out after {} s waiting for {what}; last seen: {reason}\n{}",
                TOPOLOGY_TIMEOUT.as_secs(),
                context()
            ),
            Err(_) => thread::sleep(TOPOLOGY_POLL),
        }
    }
}

/// The last lines of a server's log, for failure messages about a topology
/// (whole logs of all its processes would drown the reason).
fn log_tail(node: &RedisServer) -> String {
    const LINES: usize = 20;
    let log = node.log();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(LINES)..].join("\n")
}

/// The value of `field` in an `INFO`-style reply (`field:value` lines).
fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}

/// Whether a node can be asked about the topology: running and not paused.
fn is_live(node: &RedisServer) -> bool {
    node.is_running() && !node.is_paused()
}

/// Send a command to `node` with [`QUERY_TIMEOUT`]; an I/O error or an error
/// reply becomes an `Err` describing it, for [`wait_for`] reasons.
fn ask(node: &RedisServer, args: &[&str]) -> Result<resp::Reply, String> {
    match node.query(args, QUERY_TIMEOUT) {
        Ok(resp::Reply::Error(e)) => Err(format!("{args:?} on port {} failed: {e}", node.port())),
        Ok(reply) => Ok(reply),
        Err(e) => Err(format!("{args:?} on port {} failed: {e}", node.port())),
    }
}

/// Like [`ask`], for commands whose reply is a string.
fn ask_text(node: &RedisServer, args: &[&str]) -> Result<String, String> {
    let reply = ask(node, args)?;
    reply.as_text().ok_or_else(|| {
        format!(
            "{args:?} on port {} returned an unexpected reply {reply:?}",
            node.port()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_info_fields() {
        let info = "# Cluster\r\ncluster_state:ok\r\ncluster_slots_ok:16384\r\n";
        assert_eq!(info_field(info, "cluster_state"), Some("ok"));
        assert_eq!(info_field(info, "cluster_slots_ok"), Some("16384"));
        assert_eq!(info_field(info, "cluster_slots"), None);
        assert_eq!(info_field(info, "missing"), None);
    }
}
