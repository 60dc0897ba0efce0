//! [`SentinelGroup`]: a master, its replicas and the Sentinels watching
//! them, all private processes.

use crate::resp::Reply;
use crate::{RedisServer, ask, ask_text, info_field, is_live, log_tail, wait_for};

/// The name under which the Sentinels monitor the master.
const SERVICE_NAME: &str = "lock-testkit";
/// `down-after-milliseconds`: how long the master may not answer before a
/// Sentinel considers it down. Small, so that failovers take seconds, but not
/// 1000: with 1000, about one failover in 12 was followed by a second,
/// spurious one (a Sentinel judged the just-promoted master down), and the
/// demoted node was only turned into a replica 20 s later. With 2000 this did
/// not happen in 24 trials.
const DOWN_AFTER_MS: u32 = 2000;
/// `failover-timeout`: bounds each step of a failover, and a failed attempt
/// is only retried after twice this long.
const FAILOVER_TIMEOUT_MS: u32 = 5000;
/// Arguments of every data node (on top of [`RedisServer::start_with`]'s).
/// Replicas sync at once instead of after the default 5 s wait for more
/// replicas; this matters again after a failover.
const DATA_ARGS: [&str; 2] = ["--repl-diskless-sync-delay", "0"];

/// A master, its replicas and the Sentinels monitoring them, all private
/// processes on `127.0.0.1`, stopped when the group is dropped.
///
/// Created with [`SentinelGroup::start`]. Data nodes are numbered in
/// [`SentinelGroup::nodes`] with the initial master first; which of them is
/// the master changes with failovers, so ask
/// [`SentinelGroup::current_master_port`] or [`SentinelGroup::master`].
///
/// The Sentinels monitor the master as [`SentinelGroup::service_name`] with
/// a quorum of a majority of them, `down-after-milliseconds 2000` and
/// `failover-timeout 5000`: a killed master is replaced in about 5 s (if an
/// election fails, the Sentinels retry after 10 s).
#[derive(Debug)]
pub struct SentinelGroup {
    /// Declared before `nodes`, so that the Sentinels are stopped first and
    /// do not react to the data nodes going away.
    sentinels: Vec<RedisServer>,
    /// The data nodes, the initial master first.
    nodes: Vec<RedisServer>,
}

impl SentinelGroup {
    /// Start a master, `replicas` replicas of it and `sentinels` Sentinels
    /// monitoring it, and wait until the group is healthy (see
    /// [`SentinelGroup::wait_until_ok`]).
    ///
    /// Data nodes get the arguments of [`RedisServer::start_with`], plus
    /// `--repl-diskless-sync-delay 0` and, for replicas, `--replicaof
    /// 127.0.0.1 <master port>`. Each Sentinel runs as `redis-server
    /// <config> --sentinel` with a config file of its own (which it
    /// rewrites) containing `sentinel monitor lock-testkit 127.0.0.1 <master
    /// port> <sentinels / 2 + 1>`. Forming the group takes a few seconds,
    /// mostly for the Sentinels to discover each other (they announce
    /// themselves every 2 s).
    ///
    /// # Panics
    ///
    /// If `sentinels` is 0, if a process cannot be started, or if the group
    /// is not healthy within 30 s; the processes started so far are stopped.
    pub fn start(replicas: usize, sentinels: usize) -> SentinelGroup {
        assert!(
            sentinels > 0,
            "lock-testkit: a Sentinel group needs at least one Sentinel"
        );
        let master = RedisServer::start_with(&DATA_ARGS);
        let master_port = master.port().to_string();
        let mut nodes = vec![master];
        for _ in 0..replicas {
            let mut args = DATA_ARGS.to_vec();
            args.extend(["--replicaof", "127.0.0.1", &master_port]);
            nodes.push(RedisServer::start_with(&args));
        }
        let mut group = SentinelGroup {
            sentinels: Vec::new(),
            nodes,
        };
        // A Sentinel learns the replicas from the master's `INFO`, which it
        // reads when it connects and then only every 10 s: start the
        // Sentinels once the replicas are attached.
        group.wait_for("the replicas to sync", || {
            group.check_replication(group.nodes[0].port())
        });

        let quorum = sentinels / 2 + 1;
        let config = format!(
            "sentinel monitor {SERVICE_NAME} 127.0.0.1 {master_port} {quorum}\n\
             sentinel down-after-milliseconds {SERVICE_NAME} {DOWN_AFTER_MS}\n\
             sentinel failover-timeout {SERVICE_NAME} {FAILOVER_TIMEOUT_MS}\n"
        );
        for _ in 0..sentinels {
            let sentinel =
                RedisServer::start_custom(Some(&config), &mut || vec!["--sentinel".to_owned()]);
            group.sentinels.push(sentinel);
        }
        group.wait_until_ok();
        group
    }

    /// The name the Sentinels know the master by (`"lock-testkit"`), for
    /// `SENTINEL get-master-addr-by-name` and Sentinel clients.
    pub fn service_name(&self) -> &str {
        SERVICE_NAME
    }

    /// The URLs of all Sentinels (`"redis://127.0.0.1:PORT/"`), running or
    /// not.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// The Sentinel processes.
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// Sentinel `index`, e.g. to `kill` or `restart` it (a restarted
    /// Sentinel keeps its rewritten config, hence its ID and what it knew).
    ///
    /// # Panics
    ///
    /// If there is no such Sentinel.
    pub fn sentinel_mut(&mut self, index: usize) -> &mut RedisServer {
        &mut self.sentinels[index]
    }

    /// The data nodes (master and replicas), the initial master first.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Data node `index`, e.g. to `kill` or `restart` it.
    ///
    /// A restarted node has no data and comes back with its original
    /// arguments: the initial master as a master, the others as replicas of
    /// the initial master. The Sentinels then turn it into a replica of the
    /// current master, which can take them 10 to 20 s
    /// ([`SentinelGroup::wait_until_ok`] waits for it).
    ///
    /// # Panics
    ///
    /// If there is no such node.
    pub fn node_mut(&mut self, index: usize) -> &mut RedisServer {
        &mut self.nodes[index]
    }

    /// The port of the master, as named by the first running, unpaused
    /// Sentinel that answers `SENTINEL get-master-addr-by-name`.
    ///
    /// # Panics
    ///
    /// If no Sentinel answers.
    pub fn current_master_port(&self) -> u16 {
        let mut reasons = Vec::new();
        for sentinel in self.sentinels.iter().filter(|s| is_live(s)) {
            match master_port_from(sentinel) {
                Ok(port) => return port,
                Err(e) => reasons.push(e),
            }
        }
        panic!("lock-testkit: no Sentinel named the master: {reasons:?}");
    }

    /// The URL of the master named by the Sentinels (see
    /// [`SentinelGroup::current_master_port`]).
    ///
    /// # Panics
    ///
    /// If no Sentinel answers.
    pub fn master_url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.current_master_port())
    }

    /// The data node the Sentinels name as the master (see
    /// [`SentinelGroup::current_master_port`]).
    ///
    /// # Panics
    ///
    /// If no Sentinel answers.
    pub fn master(&self) -> &RedisServer {
        let port = self.current_master_port();
        self.node_with_port(port).unwrap_or_else(|| {
            panic!("lock-testkit: the Sentinels name port {port}, which is none of our nodes")
        })
    }

    /// The URLs of the running data nodes other than the master named by the
    /// Sentinels.
    ///
    /// # Panics
    ///
    /// If no Sentinel answers.
    pub fn replica_urls(&self) -> Vec<String> {
        let master = self.current_master_port();
        self.nodes
            .iter()
            .filter(|n| n.is_running() && n.port() != master)
            .map(RedisServer::url)
            .collect()
    }

    /// Kill the master named by the Sentinels with `SIGKILL` (a crash), and
    /// return its port for [`SentinelGroup::wait_for_failover`].
    ///
    /// # Panics
    ///
    /// If no Sentinel answers, or the master is not running.
    pub fn kill_master(&mut self) -> u16 {
        let port = self.current_master_port();
        let index = self
            .nodes
            .iter()
            .position(|n| n.port() == port)
            .unwrap_or_else(|| {
                panic!("lock-testkit: the Sentinels name port {port}, which is none of our nodes")
            });
        assert!(
            self.nodes[index].is_running(),
            "lock-testkit: the master on port {port} is not running"
        );
        self.nodes[index].kill();
        port
    }

    /// Wait until the Sentinels have replaced the master on
    /// `old_master_port` and the group is healthy again (see
    /// [`SentinelGroup::wait_until_ok`]), and return the new master's port.
    ///
    /// Use it after killing or pausing the master. A failover usually
    /// completes about 5 s after the master went down.
    ///
    /// # Panics
    ///
    /// If that takes more than 30 s (e.g. because there is no replica, or
    /// too few Sentinels for the quorum are up).
    pub fn wait_for_failover(&self, old_master_port: u16) -> u16 {
        let what = format!("the Sentinels to replace the master on port {old_master_port}");
        self.wait_for(&what, || {
            let port = self.check_health()?;
            if port == old_master_port {
                return Err(format!("the master is still on port {port}"));
            }
            Ok(port)
        })
    }

    /// Wait until the group is healthy:
    ///
    /// - every running, unpaused Sentinel names the same master, sees it as
    ///   up (flags `master` only), sees every other running, unpaused
    ///   Sentinel as connected and up, sees every running, unpaused data
    ///   node other than the master as a replica of it with its link up, and
    ///   passes `SENTINEL CKQUORUM`;
    /// - that master reports `role:master`, and every other running,
    ///   unpaused data node reports replicating it with
    ///   `master_link_status:up`.
    ///
    /// # Panics
    ///
    /// If that takes more than 30 s; the message says what was last seen.
    pub fn wait_until_ok(&self) {
        self.wait_for("the Sentinel group to be healthy", || self.check_health());
    }

    /// One health check; see [`SentinelGroup::wait_until_ok`]. Returns the
    /// master's port.
    fn check_health(&self) -> Result<u16, String> {
        let live_sentinels: Vec<&RedisServer> =
            self.sentinels.iter().filter(|s| is_live(s)).collect();
        let mut agreed: Option<u16> = None;
        for sentinel in &live_sentinels {
            let port = master_port_from(sentinel)?;
            match agreed {
                None => agreed = Some(port),
                Some(first) if first != port => {
                    return Err(format!(
                        "Sentinels disagree on the master: port {first} vs port {port} \
                         (Sentinel on port {})",
                        sentinel.port()
                    ));
                }
                Some(_) => {}
            }
            let master = ask(sentinel, &["SENTINEL", "MASTER", SERVICE_NAME])?;
            let field = |name: &str| master.map_field(name).unwrap_or_default();
            if field("flags") != "master" {
                return Err(format!(
                    "Sentinel on port {} sees the master with flags {:?}",
                    sentinel.port(),
                    field("flags")
                ));
            }
            let others = field("num-other-sentinels").parse::<usize>().unwrap_or(0);
            if others + 1 < live_sentinels.len() {
                return Err(format!(
                    "Sentinel on port {} knows {others} other Sentinels, not {}",
                    sentinel.port(),
                    live_sentinels.len() - 1
                ));
            }
            let replicas = ask(sentinel, &["SENTINEL", "REPLICAS", SERVICE_NAME])?;
            for node in self.live_nodes().filter(|n| n.port() != port) {
                check_entry(
                    sentinel,
                    &replicas,
                    node.port(),
                    "slave",
                    &[
                        ("master-link-status", "ok"),
                        ("master-port", &port.to_string()),
                    ],
                )?;
            }
            // Sentinels learn about each other from hello messages before
            // they have connected: wait for the connections, too.
            let others = ask(sentinel, &["SENTINEL", "SENTINELS", SERVICE_NAME])?;
            for other in live_sentinels
                .iter()
                .filter(|s| s.port() != sentinel.port())
            {
                check_entry(sentinel, &others, other.port(), "sentinel", &[])?;
            }
            let quorum = ask_text(sentinel, &["SENTINEL", "CKQUORUM", SERVICE_NAME])?;
            if !quorum.starts_with("OK") {
                return Err(format!(
                    "SENTINEL CKQUORUM on port {}: {quorum}",
                    sentinel.port()
                ));
            }
        }
        let port = agreed.ok_or_else(|| "no Sentinel is running and unpaused".to_owned())?;
        self.check_replication(port)?;
        Ok(port)
    }

    /// Whether the node on `master_port` is a running master, and every other
    /// running, unpaused data node a replica of it with its link up.
    fn check_replication(&self, master_port: u16) -> Result<(), String> {
        let master = self
            .node_with_port(master_port)
            .ok_or_else(|| format!("port {master_port} is none of our data nodes"))?;
        if !is_live(master) {
            return Err(format!(
                "the master on port {master_port} is not running or paused"
            ));
        }
        let info = ask_text(master, &["INFO", "replication"])?;
        if info_field(&info, "role") != Some("master") {
            return Err(format!(
                "the master on port {master_port} reports role:{}",
                info_field(&info, "role").unwrap_or("(missing)")
            ));
        }
        for node in self.live_nodes().filter(|n| n.port() != master_port) {
            let info = ask_text(node, &["INFO", "replication"])?;
            let want_port = master_port.to_string();
            let expected = [
                ("role", "slave"),
                ("master_port", want_port.as_str()),
                ("master_link_status", "up"),
            ];
            for (field, want) in expected {
                let got = info_field(&info, field);
                if got != Some(want) {
                    return Err(format!(
                        "data node on port {} reports {field}:{}, not {want}",
                        node.port(),
                        got.unwrap_or("(missing)")
                    ));
                }
            }
        }
        Ok(())
    }

    fn live_nodes(&self) -> impl Iterator<Item = &RedisServer> {
        self.nodes.iter().filter(|n| is_live(n))
    }

    fn node_with_port(&self, port: u16) -> Option<&RedisServer> {
        self.nodes.iter().find(|n| n.port() == port)
    }

    /// [`wait_for`], with the end of every process's log in the panic
    /// message.
    fn wait_for<T>(&self, what: &str, check: impl FnMut() -> Result<T, String>) -> T {
        wait_for(what, check, || {
            let nodes = self.nodes.iter().map(|n| ("data node", n));
            let sentinels = self.sentinels.iter().map(|s| ("Sentinel", s));
            nodes
                .chain(sentinels)
                .map(|(kind, n)| {
                    format!("--- {kind} on port {} log ---\n{}\n", n.port(), log_tail(n))
                })
                .collect()
        })
    }
}

/// The master's port according to `sentinel`.
fn master_port_from(sentinel: &RedisServer) -> Result<u16, String> {
    let reply = ask(
        sentinel,
        &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE_NAME],
    )?;
    reply
        .as_array()
        .and_then(|addr| addr.get(1))
        .and_then(Reply::as_text)
        .and_then(|port| port.parse().ok())
        .ok_or_else(|| {
            format!(
                "SENTINEL GET-MASTER-ADDR-BY-NAME on port {} returned {reply:?}",
                sentinel.port()
            )
        })
}

/// Whether `entries` (a `SENTINEL REPLICAS` or `SENTINELS` reply from
/// `sentinel`) lists the process on `port` as up, with the flag `role` and
/// the `expected` fields.
fn check_entry(
    sentinel: &RedisServer,
    entries: &Reply,
    port: u16,
    role: &str,
    expected: &[(&str, &str)],
) -> Result<(), String> {
    let port_text = port.to_string();
    let entry = entries
        .as_array()
        .unwrap_or_default()
        .iter()
        .find(|e| e.map_field("port").as_deref() == Some(port_text.as_str()))
        .ok_or_else(|| {
            format!(
                "Sentinel on port {} does not know the process on port {port}",
                sentinel.port()
            )
        })?;
    let flags = entry.map_field("flags").unwrap_or_default();
    // Other flags, such as `master_down` (this Sentinel's last opinion about
    // an old master), do not matter.
    let healthy = flags.split(',').any(|f| f == role)
        && !flags
            .split(',')
            .any(|f| matches!(f, "s_down" | "o_down" | "disconnected"));
    if !healthy {
        return Err(format!(
            "Sentinel on port {} sees the process on port {port} with flags {flags:?}",
            sentinel.port()
        ));
    }
    for &(field, want) in expected {
        let got = entry.map_field(field).unwrap_or_default();
        if got != want {
            return Err(format!(
                "Sentinel on port {} sees the process on port {port} with {field} {got:?}, \
                 not {want:?}",
                sentinel.port()
            ));
        }
    }
    Ok(())
}
