//! Tests that start whole topologies of real `redis-server` processes and
//! fail them over.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use lock_testkit::{RedisCluster, RedisServer, SentinelGroup, unique_key};

/// The value of `field` in an `INFO`-style reply.
fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(|v| v.trim().to_owned())
}

/// Set `key` on its master and wait until `replicas` replicas have it.
///
/// Not with `WAIT`: each `cli` call is a connection of its own, and `WAIT`
/// on a connection that wrote nothing returns at once. Instead, until
/// `replicas` replicas have acknowledged the master's replication offset
/// as it was after the write (`INFO replication`).
fn set_replicated(master: &RedisServer, key: &str, value: &str, replicas: usize) {
    assert_eq!(master.cli(&["SET", key, value]), "OK");
    let field = |info: &str, name: &str| -> Option<u64> {
        info.lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|n| n.trim().parse().ok())
    };
    let info = master.cli(&["INFO", "replication"]);
    let written = field(&info, "master_repl_offset:").expect("a replication offset");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let info = master.cli(&["INFO", "replication"]);
        let acked = info
            .lines()
            .filter(|line| line.starts_with("slave"))
            .filter_map(|line| line.split(',').find_map(|kv| kv.strip_prefix("offset=")))
            .filter(|offset| offset.parse::<u64>().is_ok_and(|o| o >= written))
            .count();
        if acked >= replicas {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{acked} of {replicas} replicas have the write:\n{info}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// How many entries of a rendered `SENTINEL REPLICAS`/`SENTINELS` reply
/// (key and value lines) have exactly the flags `flags`.
fn count_flags(rendered: &str, flags: &str) -> usize {
    let lines: Vec<&str> = rendered.lines().collect();
    lines
        .windows(2)
        .filter(|kv| kv[0] == "flags" && kv[1] == flags)
        .count()
}

#[test]
fn independent_masters() {
    let servers = RedisServer::start_many(3);
    let ports: HashSet<u16> = servers.iter().map(RedisServer::port).collect();
    assert_eq!(ports.len(), 3);
    for server in &servers {
        assert_eq!(server.cli(&["PING"]), "PONG");
        let info = server.cli(&["INFO", "replication"]);
        assert_eq!(info_field(&info, "role").as_deref(), Some("master"));
    }
}

#[test]
fn cluster_shape_and_routing() {
    let started = Instant::now();
    let cluster = RedisCluster::start(3, 1);
    eprintln!("cluster of 6 nodes formed in {:?}", started.elapsed());

    assert_eq!(cluster.nodes().len(), 6);
    assert_eq!(cluster.urls().len(), 6);
    assert_eq!(cluster.urls()[0], cluster.node(0).url());
    for node in cluster.nodes() {
        let info = node.cli(&["CLUSTER", "INFO"]);
        assert_eq!(info_field(&info, "cluster_state").as_deref(), Some("ok"));
        assert_eq!(
            info_field(&info, "cluster_slots_assigned").as_deref(),
            Some("16384")
        );
        assert_eq!(
            info_field(&info, "cluster_known_nodes").as_deref(),
            Some("6")
        );
        assert_eq!(info_field(&info, "cluster_size").as_deref(), Some("3"));
    }
    assert_eq!(cluster.masters(), vec![0, 1, 2]);
    for master in 0..3 {
        assert_eq!(cluster.replicas_of(master), vec![3 + master]);
        let replica = cluster.node(3 + master);
        let info = replica.cli(&["INFO", "replication"]);
        assert_eq!(info_field(&info, "role").as_deref(), Some("slave"));
        assert_eq!(
            info_field(&info, "master_port"),
            Some(cluster.node(master).port().to_string())
        );
    }
    let ids: HashSet<&str> = (0..6).map(|i| cluster.node_id(i)).collect();
    assert_eq!(ids.len(), 6);
    assert_eq!(cluster.index_of_port(cluster.node(4).port()), Some(4));

    // Keys with different hash tags land on every master.
    let mut seen = HashSet::new();
    for tag in 0..30 {
        let key = unique_key(&format!("{{tag{tag}}}:lock"));
        let master = cluster.master_for_key(&key);
        seen.insert(master);
        let other = (master + 1) % 3;
        let moved = cluster.node(other).cli(&["SET", &key, "x"]);
        assert!(moved.starts_with("MOVED "), "{moved}");
        assert!(
            moved.ends_with(&format!("127.0.0.1:{}", cluster.node(master).port())),
            "{moved}"
        );
        set_replicated(cluster.node(master), &key, "owner", 1);
        assert_eq!(cluster.node(master).cli(&["GET", &key]), "owner");
    }
    assert_eq!(seen, HashSet::from([0, 1, 2]));
}

#[test]
fn cluster_manual_failover() {
    let cluster = RedisCluster::start(3, 1);
    let key = unique_key("manual-failover");
    let old = cluster.master_for_key(&key);
    set_replicated(cluster.node(old), &key, "before", 1);

    let started = Instant::now();
    let new = cluster.failover(old);
    eprintln!("manual cluster failover took {:?}", started.elapsed());

    assert_eq!(cluster.replicas_of(old), Vec::<usize>::new());
    assert_eq!(new, 3 + old);
    assert_eq!(cluster.master_for_key(&key), new);
    assert_eq!(cluster.replicas_of(new), vec![old]);
    assert_eq!(cluster.node(new).cli(&["GET", &key]), "before");
    // The old master is a synced replica now: it redirects writes.
    let moved = cluster.node(old).cli(&["SET", &key, "x"]);
    assert!(moved.starts_with("MOVED "), "{moved}");
    set_replicated(cluster.node(new), &key, "after", 1);
}

#[test]
fn cluster_kill_master_fails_over() {
    let mut cluster = RedisCluster::start(3, 1);
    let key = unique_key("kill-failover");
    let old = cluster.master_for_key(&key);
    set_replicated(cluster.node(old), &key, "before", 1);

    let started = Instant::now();
    cluster.kill_master(old);
    assert!(!cluster.node(old).is_running());
    let new = cluster.wait_for_failover(old);
    eprintln!(
        "cluster failover after SIGKILL took {:?}",
        started.elapsed()
    );

    assert_eq!(new, 3 + old);
    assert_eq!(cluster.master_for_key(&key), new);
    assert!(!cluster.masters().contains(&old));
    assert_eq!(cluster.node(new).cli(&["GET", &key]), "before");

    // The old master comes back empty, as a replica of its replacement.
    let started = Instant::now();
    cluster.restart_node(old);
    eprintln!("restarted node rejoined in {:?}", started.elapsed());
    assert_eq!(cluster.replicas_of(new), vec![old]);
    let info = cluster.node(old).cli(&["INFO", "replication"]);
    assert_eq!(info_field(&info, "role").as_deref(), Some("slave"));
}

#[test]
fn cluster_pause_master_fails_over() {
    let cluster = RedisCluster::start(3, 1);
    let old = 1;
    cluster.node(old).pause();
    let started = Instant::now();
    let new = cluster.wait_for_failover(old);
    eprintln!(
        "cluster failover after SIGSTOP took {:?}",
        started.elapsed()
    );
    assert_eq!(new, 4);
    cluster.node(old).resume();
    cluster.wait_until_ok();
    assert_eq!(cluster.replicas_of(new), vec![old]);
}

#[test]
fn sentinel_shape() {
    let started = Instant::now();
    let group = SentinelGroup::start(2, 3);
    eprintln!("Sentinel group formed in {:?}", started.elapsed());

    let master = group.nodes()[0].port();
    assert_eq!(group.current_master_port(), master);
    assert_eq!(group.master().port(), master);
    assert_eq!(group.master_url(), group.nodes()[0].url());
    assert_eq!(
        group.replica_urls(),
        vec![group.nodes()[1].url(), group.nodes()[2].url()]
    );
    assert_eq!(group.sentinel_urls().len(), 3);

    for sentinel in group.sentinels() {
        let addr = sentinel.cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", group.service_name()]);
        assert_eq!(addr, format!("127.0.0.1\n{master}"));
        let replicas = sentinel.cli(&["SENTINEL", "REPLICAS", group.service_name()]);
        assert_eq!(count_flags(&replicas, "slave"), 2, "{replicas}");
        let sentinels = sentinel.cli(&["SENTINEL", "SENTINELS", group.service_name()]);
        assert_eq!(count_flags(&sentinels, "sentinel"), 2, "{sentinels}");
    }

    let key = unique_key("sentinel");
    set_replicated(group.master(), &key, "v", 2);
    assert_eq!(group.nodes()[2].cli(&["GET", &key]), "v");
}

#[test]
fn sentinel_kill_master_fails_over() {
    let mut group = SentinelGroup::start(2, 3);
    let key = unique_key("sentinel-failover");
    set_replicated(group.master(), &key, "before", 2);

    let started = Instant::now();
    let old = group.kill_master();
    assert_eq!(old, group.nodes()[0].port());
    let new = group.wait_for_failover(old);
    eprintln!(
        "Sentinel failover after SIGKILL took {:?}",
        started.elapsed()
    );

    assert_ne!(new, old);
    assert_eq!(group.current_master_port(), new);
    assert_eq!(group.master().cli(&["GET", &key]), "before");
    let info = group.master().cli(&["INFO", "replication"]);
    assert_eq!(info_field(&info, "role").as_deref(), Some("master"));
    assert_eq!(group.replica_urls().len(), 1);
    // The remaining replica follows the new master.
    set_replicated(group.master(), &key, "after", 1);
}
