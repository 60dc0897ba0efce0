//! [`RedisCluster`]: a Redis Cluster of private `redis-server` processes.

use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::resp::Reply;
use crate::server::{binary, major_version};
use crate::{RedisServer, ask, ask_text, free_port, info_field, is_live, log_tail, wait_for};

/// Number of hash slots of a Redis Cluster.
const SLOTS: usize = 16384;
/// `cluster-node-timeout` in milliseconds: how long a node may be unreachable
/// before it counts as failing. Small, so that a killed master is failed over
/// within a few seconds.
const NODE_TIMEOUT_MS: &str = "1000";
/// Name of each node's cluster config file, inside its own directory (the
/// server's working directory), where it survives restarts.
const CONFIG_FILE: &str = "nodes.conf";
/// Flags with which a node is not (yet, or any longer) a healthy member.
const UNHEALTHY_FLAGS: [&str; 4] = ["fail", "fail?", "handshake", "noaddr"];

/// A Redis Cluster of private `redis-server` processes on `127.0.0.1`, all
/// stopped when it is dropped.
///
/// Created with [`RedisCluster::start`]. Nodes are identified by their index
/// in [`RedisCluster::nodes`], which stays with the process (its port, its
/// node ID) across failovers and restarts; roles change, so ask
/// [`RedisCluster::masters`], [`RedisCluster::replicas_of`] and
/// [`RedisCluster::master_for_key`] for the current ones.
///
/// Every node runs with `--cluster-node-timeout 1000`, so a master that is
/// killed or paused is failed over within a few seconds, provided a majority
/// of the masters is still up (at least 3 masters are needed to survive the
/// loss of one). Replica migration (`cluster-allow-replica-migration`) is
/// off, so replicas only change masters through failovers.
#[derive(Debug)]
pub struct RedisCluster {
    /// The nodes; see the type's documentation for their order.
    nodes: Vec<RedisServer>,
    /// The cluster node ID of each node, kept across restarts in its
    /// [`CONFIG_FILE`].
    ids: Vec<String>,
    /// The slot ranges each node served when the cluster was last seen; the
    /// failover waits need to know which slots have to move.
    last_slots: Mutex<Vec<Vec<(u16, u16)>>>,
}

impl RedisCluster {
    /// Start a cluster of `masters` masters with `replicas_per_master`
    /// replicas each, and wait until it is healthy (see
    /// [`RedisCluster::wait_until_ok`]).
    ///
    /// The `masters * (1 + replicas_per_master)` nodes are numbered in this
    /// order: the masters first, master `i` serving the `i`-th of `masters`
    /// equal ranges of slots, then the replicas of master 0, those of master
    /// 1, and so on. The cluster is formed directly with `CLUSTER
    /// ADDSLOTSRANGE`, `MEET` and `REPLICATE` (no `redis-cli`); it usually
    /// takes a second or two.
    ///
    /// Each node gets, besides the arguments of [`RedisServer::start_with`],
    /// `--cluster-enabled yes`, its own cluster config file, a cluster bus
    /// port of its own (`--cluster-port`, also a free port),
    /// `--cluster-node-timeout 1000`, `--cluster-allow-replica-migration no`
    /// and `--repl-diskless-sync-delay 0` (replicas sync at once). A binary
    /// older than Redis 7.0 (`LOCK_TESTKIT_REDIS_SERVER` may name one) is
    /// given what it understands, as with [`RedisCluster::start_binary`].
    ///
    /// # Panics
    ///
    /// If `masters` is 0 or above 16384, if a node cannot be started, if
    /// the cluster is not healthy within 30 s (the nodes started so far are
    /// stopped), or if the binary's `--version` cannot be run.
    pub fn start(masters: usize, replicas_per_master: usize) -> RedisCluster {
        Self::start_from(None, masters, replicas_per_master)
    }

    /// Like [`RedisCluster::start`], every node running the `redis-server`
    /// binary at `bin` (see [`RedisServer::start_binary`]). A binary older
    /// than Redis 7.0 is given what it understands: each node's cluster bus
    /// is on its port + 10000 (a node whose port is above 55535 is started
    /// again on another), and slots are assigned with `CLUSTER ADDSLOTS`.
    ///
    /// # Panics
    ///
    /// Like [`RedisCluster::start`], and if `bin --version` cannot be run.
    pub fn start_binary(
        bin: impl AsRef<Path>,
        masters: usize,
        replicas_per_master: usize,
    ) -> RedisCluster {
        Self::start_from(Some(bin.as_ref()), masters, replicas_per_master)
    }

    /// [`RedisCluster::start`] with the binary `bin`, if given.
    fn start_from(bin: Option<&Path>, masters: usize, replicas_per_master: usize) -> RedisCluster {
        let before_7 = major_version(&binary(bin)) < 7;
        assert!(
            (1..=SLOTS).contains(&masters),
            "lock-testkit: a cluster needs between 1 and {SLOTS} masters, not {masters}"
        );
        let total = masters * (1 + replicas_per_master);
        let mut bus_ports = Vec::with_capacity(total);
        let mut nodes = Vec::with_capacity(total);
        for _ in 0..total {
            let (node, bus_port) = start_node(bin, before_7);
            nodes.push(node);
            bus_ports.push(bus_port);
        }
        let ids = nodes
            .iter()
            .map(|node| setup(ask_text(node, &["CLUSTER", "MYID"])))
            .collect();
        let cluster = RedisCluster {
            nodes,
            ids,
            last_slots: Mutex::new(vec![Vec::new(); total]),
        };
        cluster.form(masters, replicas_per_master, &bus_ports, before_7);
        cluster
    }

    /// The URLs of all nodes (`"redis://127.0.0.1:PORT/"`), in node order,
    /// whether they are running or not: seed URLs for a cluster client.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// All nodes, in node order (see [`RedisCluster::start`]).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Node `index`, e.g. to `pause` it or send it a command.
    ///
    /// # Panics
    ///
    /// If there is no such node.
    pub fn node(&self, index: usize) -> &RedisServer {
        &self.nodes[index]
    }

    /// Node `index`, e.g. to `kill` or `restart` it. A restarted node keeps
    /// its node ID and rejoins the cluster, with no data; a master that was
    /// failed over while it was down comes back as a replica of the node that
    /// replaced it.
    ///
    /// # Panics
    ///
    /// If there is no such node.
    pub fn node_mut(&mut self, index: usize) -> &mut RedisServer {
        &mut self.nodes[index]
    }

    /// The cluster node ID (`CLUSTER MYID`) of node `index`.
    ///
    /// # Panics
    ///
    /// If there is no such node.
    pub fn node_id(&self, index: usize) -> &str {
        &self.ids[index]
    }

    /// The index of the node with the given port, if it is one of ours.
    pub fn index_of_port(&self, port: u16) -> Option<usize> {
        self.nodes.iter().position(|n| n.port() == port)
    }

    /// The nodes that serve slots, in node order, as seen now by the first
    /// running, unpaused node that answers.
    ///
    /// A master that is down but not failed over yet still serves its slots,
    /// so it is included.
    ///
    /// # Panics
    ///
    /// If no running, unpaused node answers.
    pub fn masters(&self) -> Vec<usize> {
        let view = self.current_view();
        (0..self.nodes.len())
            .filter(|&i| view[i].as_ref().is_some_and(|e| !e.slots.is_empty()))
            .collect()
    }

    /// The nodes that replicate node `master`, in node order, as seen now
    /// by the first running, unpaused node that answers. Replicas that are
    /// down are included.
    ///
    /// # Panics
    ///
    /// If no running, unpaused node answers.
    pub fn replicas_of(&self, master: usize) -> Vec<usize> {
        let view = self.current_view();
        (0..self.nodes.len())
            .filter(|&i| {
                view[i]
                    .as_ref()
                    .is_some_and(|e| e.replica_of == Some(master))
            })
            .collect()
    }

    /// The node that serves `key`'s hash slot (`CLUSTER KEYSLOT`), as seen
    /// now by the first running, unpaused node that answers.
    ///
    /// # Panics
    ///
    /// If no running, unpaused node answers, or none serves the slot.
    pub fn master_for_key(&self, key: &str) -> usize {
        let mut reasons = Vec::new();
        for node in self.nodes.iter().filter(|n| is_live(n)) {
            let owner = ask(node, &["CLUSTER", "KEYSLOT", key]).and_then(|reply| {
                let slot = match reply {
                    Reply::Integer(slot) => u16::try_from(slot)
                        .map_err(|_| format!("CLUSTER KEYSLOT returned {slot}"))?,
                    other => return Err(format!("CLUSTER KEYSLOT returned {other:?}")),
                };
                let view = self.view_from(node)?;
                owner_of(&view, slot).ok_or_else(|| format!("no node serves slot {slot}"))
            });
            match owner {
                Ok(owner) => return owner,
                Err(e) => reasons.push(e),
            }
        }
        panic!("lock-testkit: cannot find the master of key {key:?}: {reasons:?}");
    }

    /// Wait until the cluster is healthy, as seen by every running, unpaused
    /// node:
    ///
    /// - `CLUSTER INFO` reports `cluster_state:ok`, all 16384 slots assigned
    ///   and ok, and all nodes known;
    /// - the nodes agree on who serves which slots and who replicates whom,
    ///   and no running, unpaused node is flagged as failing;
    /// - every slot is served by a running, unpaused node, so right after a
    ///   master is killed or paused this waits for its failover;
    /// - every running, unpaused replica's link to its master is up
    ///   (`master_link_status:up`), i.e. it has synced.
    ///
    /// # Panics
    ///
    /// If that takes more than 30 s; the message says what was last seen.
    pub fn wait_until_ok(&self) {
        let view = self.wait_for("the cluster to be healthy", || self.check_health());
        self.remember(&view);
    }

    /// A planned failover: run `CLUSTER FAILOVER` on a running, unpaused
    /// replica of node `master` (the first in node order), wait until it has
    /// taken over all of `master`'s slots and the cluster is healthy again
    /// (see [`RedisCluster::wait_until_ok`]; the old master is then a synced
    /// replica of the new one), and return the new master's index.
    ///
    /// # Panics
    ///
    /// If `master` serves no slots or has no running, unpaused replica, if
    /// the replica refuses the command, or if the failover does not complete
    /// within 30 s.
    pub fn failover(&self, master: usize) -> usize {
        self.remember_master(master);
        let replica = self
            .replicas_of(master)
            .into_iter()
            .find(|&r| is_live(&self.nodes[r]))
            .unwrap_or_else(|| {
                panic!(
                    "lock-testkit: {} has no running, unpaused replica to fail over to",
                    self.describe(master)
                )
            });
        let reply = self.nodes[replica].cli(&["CLUSTER", "FAILOVER"]);
        assert_eq!(
            reply,
            "OK",
            "lock-testkit: CLUSTER FAILOVER on {} failed",
            self.describe(replica)
        );
        self.wait_for_takeover(master, Some(replica))
    }

    /// Kill master `master` with `SIGKILL` (a crash); its replicas take over
    /// after about `cluster-node-timeout` plus an election, which
    /// [`RedisCluster::wait_for_failover`] waits for.
    ///
    /// # Panics
    ///
    /// If node `master` does not serve slots or is not running.
    pub fn kill_master(&mut self, master: usize) {
        self.remember_master(master);
        assert!(
            self.nodes[master].is_running(),
            "lock-testkit: {} is not running",
            self.describe(master)
        );
        self.nodes[master].kill();
    }

    /// Wait until all the slots node `old_master` served (when the cluster
    /// was last seen, e.g. by [`RedisCluster::kill_master`]) are served by
    /// one other node and the cluster is healthy again (see
    /// [`RedisCluster::wait_until_ok`]), and return that node's index.
    ///
    /// Use it after killing or pausing a master. With the 1 s node timeout,
    /// a failover usually completes 2 to 5 s after the master went down.
    ///
    /// # Panics
    ///
    /// If `old_master` served no slots, or if no failover completes within
    /// 30 s (e.g. because the master had no replica, or a majority of the
    /// masters is down).
    pub fn wait_for_failover(&self, old_master: usize) -> usize {
        self.wait_for_takeover(old_master, None)
    }

    /// Restart node `index` (see [`RedisCluster::node_mut`]) and wait until
    /// the cluster is healthy again, i.e. until the node has rejoined and, if
    /// it is a replica, synced.
    ///
    /// # Panics
    ///
    /// If the node cannot be restarted, or the cluster is not healthy within
    /// 30 s.
    pub fn restart_node(&mut self, index: usize) {
        self.nodes[index].restart();
        self.wait_until_ok();
    }

    /// Set up the cluster of freshly started nodes; see
    /// [`RedisCluster::start`].
    fn form(&self, masters: usize, replicas_per_master: usize, bus_ports: &[u16], before_7: bool) {
        for i in 0..masters {
            let first = i * SLOTS / masters;
            let last = (i + 1) * SLOTS / masters - 1;
            if before_7 {
                // No ADDSLOTSRANGE before 7.0.
                let slots: Vec<String> = (first..=last).map(|s| s.to_string()).collect();
                let mut args = vec!["CLUSTER", "ADDSLOTS"];
                args.extend(slots.iter().map(String::as_str));
                self.setup_ok(i, &args);
                continue;
            }
            self.setup_ok(
                i,
                &[
                    "CLUSTER",
                    "ADDSLOTSRANGE",
                    &first.to_string(),
                    &last.to_string(),
                ],
            );
        }
        // Distinct config epochs, as `redis-cli --cluster create` sets them,
        // so that the nodes need not first resolve epoch collisions. This is
        // only accepted before a node has met others.
        for i in 0..self.nodes.len() {
            self.setup_ok(i, &["CLUSTER", "SET-CONFIG-EPOCH", &(i + 1).to_string()]);
        }
        // Node 0 meets everyone; gossip introduces the others to each other.
        for (node, bus_port) in self.nodes.iter().zip(bus_ports).skip(1) {
            self.setup_ok(
                0,
                &[
                    "CLUSTER",
                    "MEET",
                    "127.0.0.1",
                    &node.port().to_string(),
                    &bus_port.to_string(),
                ],
            );
        }
        // `CLUSTER REPLICATE` needs the replica to know its master.
        self.wait_for("all cluster nodes to know each other", || {
            for i in 0..self.nodes.len() {
                let view = self.view_from(&self.nodes[i])?;
                for (j, entry) in view.iter().enumerate() {
                    match entry {
                        None => {
                            return Err(format!(
                                "{} does not know {}",
                                self.describe(i),
                                self.describe(j)
                            ));
                        }
                        Some(e) if e.has_any_flag(&["handshake", "noaddr"]) => {
                            return Err(format!(
                                "{} sees {} with flags {:?}",
                                self.describe(i),
                                self.describe(j),
                                e.flags
                            ));
                        }
                        Some(_) => {}
                    }
                }
            }
            Ok(())
        });
        for master in 0..masters {
            for k in 0..replicas_per_master {
                let replica = masters + master * replicas_per_master + k;
                self.setup_ok(replica, &["CLUSTER", "REPLICATE", &self.ids[master]]);
            }
        }
        self.wait_until_ok();
    }

    /// Send a setup command that must answer `OK`.
    fn setup_ok(&self, index: usize, args: &[&str]) {
        let reply = setup(ask_text(&self.nodes[index], args));
        assert_eq!(
            reply,
            "OK",
            "lock-testkit: cannot set up the cluster: {args:?} on {} returned {reply:?}",
            self.describe(index)
        );
    }

    /// One health check; see [`RedisCluster::wait_until_ok`]. Returns the
    /// view all live nodes agree on.
    fn check_health(&self) -> Result<View, String> {
        let total = self.nodes.len();
        let live: Vec<usize> = (0..total).filter(|&i| is_live(&self.nodes[i])).collect();
        let mut agreed: Option<(usize, View)> = None;
        for &i in &live {
            let node = &self.nodes[i];
            let info = ask_text(node, &["CLUSTER", "INFO"])?;
            let expected = [
                ("cluster_state", "ok".to_owned()),
                ("cluster_slots_assigned", SLOTS.to_string()),
                ("cluster_slots_ok", SLOTS.to_string()),
                ("cluster_known_nodes", total.to_string()),
            ];
            for (field, want) in expected {
                let got = info_field(&info, field);
                if got != Some(want.as_str()) {
                    return Err(format!(
                        "{} reports {field}:{}",
                        self.describe(i),
                        got.unwrap_or("(missing)")
                    ));
                }
            }

            let view = self.view_from(node)?;
            for (j, entry) in view.iter().enumerate() {
                let Some(entry) = entry else {
                    return Err(format!(
                        "{} does not know {}",
                        self.describe(i),
                        self.describe(j)
                    ));
                };
                let live_j = is_live(&self.nodes[j]);
                if live_j && entry.has_any_flag(&UNHEALTHY_FLAGS) {
                    return Err(format!(
                        "{} sees {} with flags {:?}",
                        self.describe(i),
                        self.describe(j),
                        entry.flags
                    ));
                }
                if !live_j && !entry.slots.is_empty() {
                    return Err(format!(
                        "{} says slots {:?} are served by {}, which is {}",
                        self.describe(i),
                        entry.slots,
                        self.describe(j),
                        if self.nodes[j].is_paused() {
                            "paused"
                        } else {
                            "not running"
                        }
                    ));
                }
            }
            if let Some(Some(me)) = view.get(i)
                && me.replica_of.is_some()
            {
                let replication = ask_text(node, &["INFO", "replication"])?;
                let link = info_field(&replication, "master_link_status");
                if link != Some("up") {
                    return Err(format!(
                        "{} is a replica with master_link_status:{}",
                        self.describe(i),
                        link.unwrap_or("(missing)")
                    ));
                }
            }

            match &agreed {
                None => agreed = Some((i, view)),
                Some((first, first_view)) => {
                    if let Some(j) = (0..total).find(|&j| !same_role(&first_view[j], &view[j])) {
                        return Err(format!(
                            "{} and {} disagree about {}: {:?} vs {:?}",
                            self.describe(*first),
                            self.describe(i),
                            self.describe(j),
                            first_view[j],
                            view[j]
                        ));
                    }
                }
            }
        }
        agreed
            .map(|(_, view)| view)
            .ok_or_else(|| "no cluster node is running and unpaused".to_owned())
    }

    /// Wait until the slots `old` served when last seen are all served by one
    /// other node (`expected`, if given) and the cluster is healthy; return
    /// that node.
    fn wait_for_takeover(&self, old: usize, expected: Option<usize>) -> usize {
        let old_slots = self.slots()[old].clone();
        let Some(&(first_slot, _)) = old_slots.first() else {
            panic!(
                "lock-testkit: {} served no slots when the cluster was last seen, \
                 so there is nothing to fail over",
                self.describe(old)
            );
        };
        let what = format!("the slots of {} to be taken over", self.describe(old));
        let (new, view) = self.wait_for(&what, || {
            let view = self.check_health()?;
            let owner = owner_of(&view, first_slot)
                .ok_or_else(|| format!("no node serves slot {first_slot}"))?;
            if owner == old {
                return Err(format!(
                    "{} still serves slot {first_slot}",
                    self.describe(old)
                ));
            }
            if let Some(expected) = expected
                && owner != expected
            {
                return Err(format!(
                    "slot {first_slot} moved to {}, not to {}",
                    self.describe(owner),
                    self.describe(expected)
                ));
            }
            for slot in old_slots.iter().flat_map(|&(lo, hi)| [lo, hi]) {
                if owner_of(&view, slot) != Some(owner) {
                    return Err(format!(
                        "slot {slot} is not served by {} like slot {first_slot}",
                        self.describe(owner)
                    ));
                }
            }
            Ok((owner, view))
        });
        self.remember(&view);
        new
    }

    /// Record the slots of `master` as seen now, for the failover waits.
    ///
    /// # Panics
    ///
    /// If it serves no slots.
    fn remember_master(&self, master: usize) {
        let view = self.current_view();
        let slots = view[master]
            .as_ref()
            .map(|e| e.slots.clone())
            .unwrap_or_default();
        assert!(
            !slots.is_empty(),
            "lock-testkit: {} is not a master serving slots",
            self.describe(master)
        );
        self.slots()[master] = slots;
    }

    /// Record the slots of every node in `view`.
    fn remember(&self, view: &View) {
        let mut slots = self.slots();
        for (known, entry) in slots.iter_mut().zip(view) {
            if let Some(entry) = entry {
                known.clone_from(&entry.slots);
            }
        }
    }

    fn slots(&self) -> MutexGuard<'_, Vec<Vec<(u16, u16)>>> {
        // Never poisoned in practice: nothing panics while holding the lock.
        self.last_slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// `CLUSTER NODES` of `node`, parsed.
    fn view_from(&self, node: &RedisServer) -> Result<View, String> {
        let text = ask_text(node, &["CLUSTER", "NODES"])?;
        parse_nodes(&text, &self.ids).map_err(|e| format!("port {}: {e}", node.port()))
    }

    /// The view of the first running, unpaused node that answers.
    fn current_view(&self) -> View {
        let mut reasons = Vec::new();
        for node in self.nodes.iter().filter(|n| is_live(n)) {
            match self.view_from(node) {
                Ok(view) => return view,
                Err(e) => reasons.push(e),
            }
        }
        panic!("lock-testkit: no running, unpaused cluster node answered: {reasons:?}");
    }

    /// [`wait_for`], with the end of every node's log in the panic message.
    fn wait_for<T>(&self, what: &str, check: impl FnMut() -> Result<T, String>) -> T {
        wait_for(what, check, || {
            self.nodes
                .iter()
                .enumerate()
                .map(|(i, n)| format!("--- {} log ---\n{}", self.describe(i), log_tail(n)))
                .collect()
        })
    }

    fn describe(&self, index: usize) -> String {
        format!("node {index} (port {})", self.nodes[index].port())
    }
}

/// Start one cluster node; returns it and its cluster bus port.
fn start_node(bin: Option<&Path>, before_7: bool) -> (RedisServer, u16) {
    let mut bus_port = 0;
    let node = RedisServer::start_custom_binary(bin, None, &mut || {
        // By default the bus port is the data port + 10000, which may be
        // taken or above 65535; a free port of its own avoids both. Before
        // 7.0 it cannot be chosen: a node that cannot have it is started
        // again on another port.
        let bus = if before_7 {
            Vec::new()
        } else {
            bus_port = free_port();
            vec!["--cluster-port".to_owned(), bus_port.to_string()]
        };
        [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            CONFIG_FILE,
            "--cluster-node-timeout",
            NODE_TIMEOUT_MS,
            // So that the node names its own address in `CLUSTER NODES`
            // before others have told it.
            "--cluster-announce-ip",
            "127.0.0.1",
            "--cluster-allow-replica-migration",
            "no",
            // Replicas sync at once instead of after the default 5 s wait
            // for more replicas.
            "--repl-diskless-sync-delay",
            "0",
        ]
        .map(str::to_owned)
        .into_iter()
        .chain(bus)
        .collect()
    });
    if before_7 {
        bus_port = node.port() + 10000;
    }
    (node, bus_port)
}

/// Unwrap a setup step's result.
fn setup<T>(result: Result<T, String>) -> T {
    result.unwrap_or_else(|e| panic!("lock-testkit: cannot set up the cluster: {e}"))
}

/// What one node's `CLUSTER NODES` says about one node.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    /// For a replica, the index of its master.
    replica_of: Option<usize>,
    /// The slot ranges (inclusive) the node serves.
    slots: Vec<(u16, u16)>,
    /// Flags such as `myself`, `master`, `slave`, `fail?`, `fail`.
    flags: Vec<String>,
}

impl Entry {
    fn has_any_flag(&self, flags: &[&str]) -> bool {
        self.flags.iter().any(|f| flags.contains(&f.as_str()))
    }

    fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(lo, hi)| (lo..=hi).contains(&slot))
    }
}

/// One node's picture of the cluster, indexed like [`RedisCluster::nodes`];
/// `None` for a node it does not know.
type View = Vec<Option<Entry>>;

/// Whether two views give a node the same role and slots (failure flags,
/// which spread at different times, are not compared).
fn same_role(a: &Option<Entry>, b: &Option<Entry>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => {
            a.replica_of == b.replica_of
                && a.slots == b.slots
                && a.has_any_flag(&["master"]) == b.has_any_flag(&["master"])
        }
        (None, None) => true,
        _ => false,
    }
}

/// The node that serves `slot` in `view`.
fn owner_of(view: &View, slot: u16) -> Option<usize> {
    view.iter()
        .position(|e| e.as_ref().is_some_and(|e| e.serves(slot)))
}

/// Parse `CLUSTER NODES` output; `ids` are the node IDs by index.
///
/// Each line is `<id> <ip:port@cport[,hostname]> <flags> <master-id or ->
/// <ping-sent> <pong-recv> <config-epoch> <link-state> <slot>...`, where a
/// slot is `N`, `N-M`, or a `[...]` migration entry (ignored).
fn parse_nodes(text: &str, ids: &[String]) -> Result<View, String> {
    let index_of = |id: &str| {
        ids.iter()
            .position(|known| known == id)
            .ok_or_else(|| format!("unknown node ID {id:?} in CLUSTER NODES"))
    };
    let mut view = vec![None; ids.len()];
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 8 {
            return Err(format!("malformed CLUSTER NODES line {line:?}"));
        }
        let index = index_of(fields[0])?;
        let replica_of = match fields[3] {
            "-" => None,
            master => Some(index_of(master)?),
        };
        let mut slots = Vec::new();
        for slot in fields[8..].iter().filter(|s| !s.starts_with('[')) {
            let parse = |s: &str| {
                s.parse::<u16>()
                    .map_err(|_| format!("bad slot {slot:?} in CLUSTER NODES line {line:?}"))
            };
            slots.push(match slot.split_once('-') {
                Some((lo, hi)) => (parse(lo)?, parse(hi)?),
                None => (parse(slot)?, parse(slot)?),
            });
        }
        let flags = fields[2].split(',').map(str::to_owned).collect();
        view[index] = Some(Entry {
            replica_of,
            slots,
            flags,
        });
    }
    Ok(view)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "07c37dfeb235213a872192d90877d0cd55635b91";
    const B: &str = "67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1";
    const C: &str = "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca";

    fn ids() -> Vec<String> {
        [A, B, C].map(str::to_owned).to_vec()
    }

    #[test]
    fn parses_cluster_nodes() {
        let text = format!(
            "{A} 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-8191 9000 [93->-{B}]\n\
             {B} 127.0.0.1:30002@31002,host master - 0 1426238317239 2 connected 8192-8999 9001-16383\n\
             {C} 127.0.0.1:30003@31003 slave,fail {A} 0 1426238316232 1 disconnected\n"
        );
        let view = parse_nodes(&text, &ids()).unwrap();
        let a = view[0].as_ref().unwrap();
        assert_eq!(a.slots, vec![(0, 8191), (9000, 9000)]);
        assert_eq!(a.replica_of, None);
        assert!(a.has_any_flag(&["master"]));
        let c = view[2].as_ref().unwrap();
        assert_eq!(c.replica_of, Some(0));
        assert!(c.slots.is_empty());
        assert!(c.has_any_flag(&UNHEALTHY_FLAGS));
        assert!(!a.has_any_flag(&UNHEALTHY_FLAGS));
        assert_eq!(owner_of(&view, 0), Some(0));
        assert_eq!(owner_of(&view, 9000), Some(0));
        assert_eq!(owner_of(&view, 8999), Some(1));
        assert_eq!(owner_of(&view, 16383), Some(1));
        assert!(same_role(&view[0], &view[0]));
        assert!(!same_role(&view[0], &view[1]));
        assert!(!same_role(&view[0], &None));
    }

    #[test]
    fn reports_unknown_nodes_and_bad_lines() {
        let partial = parse_nodes(
            &format!("{A} :0@0 myself,master - 0 0 0 connected\n"),
            &ids(),
        )
        .unwrap();
        assert!(partial[0].is_some() && partial[1].is_none() && partial[2].is_none());
        assert!(parse_nodes("ffff :0@0 master - 0 0 0 connected\n", &ids()).is_err());
        assert!(parse_nodes(&format!("{A} :0@0 master\n"), &ids()).is_err());
        assert!(parse_nodes(&format!("{A} :0@0 master - 0 0 0 connected x-1\n"), &ids()).is_err());
    }
}
