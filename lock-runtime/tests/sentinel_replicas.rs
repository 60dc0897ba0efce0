//! `min_replicas` against the replicas a Sentinel failover may promote, on
//! real Sentinel groups: `WAIT` counts any replicas, and the promoted one
//! need not be among them, so only a count of every replica keeps a
//! failover from granting a lock twice. The client reads the replicas at
//! connect and after each failover, warns when its `min_replicas` is short
//! of them, and with `strict_min_replicas` refuses to connect; a partition
//! shows the double grant a short count allows.

mod common;

use std::collections::HashMap;
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use common::{blocking, builder_for, connect, sentinel_builder, start_sentinel_group};
use lock_runtime::LockError;
use lock_testkit::{SentinelGroup, unique_key};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// The fields of every warning logged in this test binary.
static WARNINGS: Mutex<Vec<HashMap<String, String>>> = Mutex::new(Vec::new());

/// Records warnings (the one subscriber of this binary).
struct Warnings;

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl<S: tracing::Subscriber> Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if *event.metadata().level() == tracing::Level::WARN {
            let mut fields = HashMap::new();
            event.record(&mut Fields(&mut fields));
            WARNINGS.lock().unwrap().push(fields);
        }
    }
}

fn record_warnings() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let subscriber = tracing_subscriber::registry().with(Warnings);
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
    });
}

/// The replica-count warnings about the master on `port`.
fn short_of_replicas(port: u16) -> Vec<HashMap<String, String>> {
    let master = format!("127.0.0.1:{port}");
    WARNINGS
        .lock()
        .unwrap()
        .iter()
        .filter(|fields| fields.get("master") == Some(&master) && fields.contains_key("needed"))
        .cloned()
        .collect()
}

/// Waits for `check` to return something, up to `limit`, looking again
/// every 100 ms.
async fn until<T>(what: &str, limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "{what} not seen within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What the (first) sentinel reports of each replica of the master.
fn sentinel_replicas(group: &SentinelGroup) -> Vec<HashMap<String, String>> {
    let sentinel = redis::Client::open(group.sentinel_urls()[0].as_str()).unwrap();
    let mut conn = sentinel.get_connection().unwrap();
    redis::cmd("SENTINEL")
        .arg("REPLICAS")
        .arg(group.service_name())
        .query(&mut conn)
        .unwrap()
}

/// What the (first) sentinel reports of the master.
fn sentinel_master(group: &SentinelGroup) -> HashMap<String, String> {
    let sentinel = redis::Client::open(group.sentinel_urls()[0].as_str()).unwrap();
    let mut conn = sentinel.get_connection().unwrap();
    redis::cmd("SENTINEL")
        .arg("MASTER")
        .arg(group.service_name())
        .query(&mut conn)
        .unwrap()
}

/// The priority the sentinel has read for the replica on `port`.
fn priority_seen(group: &SentinelGroup, port: u16) -> Option<String> {
    let port = port.to_string();
    sentinel_replicas(group)
        .into_iter()
        .find(|replica| replica.get("port") == Some(&port))?
        .remove("slave-priority")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_confirmation_is_short_of_two_promotable_replicas() {
    record_warnings();
    let group = start_sentinel_group(2, 1);
    let master = group.current_master_port();

    // Warned, and connected: the default is to warn.
    let warned = connect(sentinel_builder(&group).min_replicas(1)).await;
    let warnings = short_of_replicas(master);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let fields = &warnings[0];
    for (field, value) in [
        ("min_replicas", "1"),
        ("needed", "2"),
        ("replicas", "2"),
        ("promotable", "2"),
        ("connected", "2"),
        ("down", "0"),
        ("unknown_priority", "0"),
    ] {
        assert_eq!(
            fields.get(field).map(String::as_str),
            Some(value),
            "{field}: {fields:?}"
        );
    }
    drop(warned);

    // Strict: refused, naming the counts.
    let err = sentinel_builder(&group)
        .min_replicas(1)
        .strict_min_replicas(true)
        .connect()
        .await
        .expect_err("refused");
    let LockError::Config(message) = &err else {
        panic!("expected a Config error, got {err:?}");
    };
    for part in [
        "min_replicas 1",
        &format!("127.0.0.1:{master}"),
        "2 known (2 connected, 0 down), 2 of them promotable",
        "Set min_replicas to 2",
    ] {
        assert!(message.contains(part), "`{part}` not in: {message}");
    }

    // Every replica confirms: accepted, strict or not, without a warning.
    let strict = connect(
        sentinel_builder(&group)
            .min_replicas(2)
            .strict_min_replicas(true),
    )
    .await;
    let guard = strict
        .lock(unique_key("every-replica").as_str())
        .acquire()
        .await
        .expect("confirmed by both replicas");
    guard.release().await.expect("release");
    assert_eq!(short_of_replicas(master).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_at_priority_zero_still_confirms_so_it_still_counts() {
    record_warnings();
    let group = start_sentinel_group(2, 1);
    let replicas: Vec<u16> = group
        .nodes()
        .iter()
        .map(|node| node.port())
        .filter(|port| *port != group.current_master_port())
        .collect();
    let node = |port: u16| group.nodes().iter().find(|n| n.port() == port).unwrap();

    // One replica may never be promoted, but its confirmation alone
    // satisfies WAIT 1, and the other one would be promoted without it.
    node(replicas[0]).cli(&["CONFIG", "SET", "replica-priority", "0"]);
    until(
        "the sentinel reading priority 0",
        Duration::from_secs(20),
        || (priority_seen(&group, replicas[0]).as_deref() == Some("0")).then_some(()),
    )
    .await;
    let err = sentinel_builder(&group)
        .min_replicas(1)
        .strict_min_replicas(true)
        .connect()
        .await
        .expect_err("refused");
    let message = err.to_string();
    assert!(
        message.contains("2 known (2 connected, 0 down), 1 of them promotable"),
        "{message}"
    );
    connect(
        sentinel_builder(&group)
            .min_replicas(2)
            .strict_min_replicas(true),
    )
    .await;

    // No replica can be promoted: Sentinel never fails over, no count is
    // needed.
    node(replicas[1]).cli(&["CONFIG", "SET", "replica-priority", "0"]);
    until(
        "the sentinel reading priority 0",
        Duration::from_secs(20),
        || (priority_seen(&group, replicas[1]).as_deref() == Some("0")).then_some(()),
    )
    .await;
    connect(sentinel_builder(&group).strict_min_replicas(true)).await;
    connect(
        sentinel_builder(&group)
            .min_replicas(1)
            .strict_min_replicas(true),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replicas_are_counted_again_after_a_failover() {
    record_warnings();
    let mut group = start_sentinel_group(2, 1);
    let old = group.current_master_port();
    let locks = connect(sentinel_builder(&group).min_replicas(1)).await;
    assert_eq!(short_of_replicas(old).len(), 1);

    blocking(|| group.kill_master());
    let new = blocking(|| group.wait_for_failover(old));
    // The next command finds the old master gone and follows the new one,
    // whose replicas are read again: the other replica, and the old master
    // (down, remembered by the sentinels: it comes back as a replica).
    let name = unique_key("after-failover");
    let guard = locks
        .lock(name.as_str())
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("acquire on the new master");
    let warning = until(
        "a warning about the new master",
        Duration::from_secs(10),
        || short_of_replicas(new).pop(),
    )
    .await;
    assert_eq!(
        warning.get("needed").map(String::as_str),
        Some("2"),
        "{warning:?}"
    );
    assert_eq!(
        warning.get("down").map(String::as_str),
        Some("1"),
        "{warning:?}"
    );
    guard.release().await.expect("release");
}

/// A connection to the server on `port` as the user `a`.
fn as_a(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://a:pw@127.0.0.1:{port}/"))
        .unwrap()
        .get_connection()
        .unwrap()
}

/// The replicas online in `INFO replication` of the server on `port`,
/// asked as `a` or as the default user.
fn online_replicas(conn: &mut redis::Connection) -> Vec<String> {
    let info: String = redis::cmd("INFO").arg("replication").query(conn).unwrap();
    info.lines()
        .filter(|line| line.starts_with("slave") && line.contains("state=online"))
        .map(str::to_owned)
        .collect()
}

/// The partition of the docs, on one machine: ACLs cut the connections a
/// partition would. {old master, R1, client A} keep talking to each other;
/// the sentinels, R2, R3 and client B reach neither the old master nor R1.
/// With `min_replicas = 1`, R1 confirms A's lock, the sentinels promote R2
/// or R3, neither of which ever had it, the other replicates it and
/// confirms B's lock: both hold it, and A goes on renewing it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_grants_a_lock_confirmed_by_one_replica_twice() {
    record_warnings();
    let group = start_sentinel_group(3, 1);
    let old = group.current_master_port();
    let nodes: Vec<u16> = group.nodes().iter().map(|node| node.port()).collect();
    let (master, r1) = (&group.nodes()[0], &group.nodes()[1]);
    assert_eq!(master.port(), old);

    // The user `a`, on the side that keeps the old master: client A, and
    // R1's replication link.
    for node in [master, r1] {
        node.cli(&["ACL", "SETUSER", "a", "on", ">pw", "~*", "&*", "+@all"]);
    }
    r1.cli(&["CONFIG", "SET", "masteruser", "a"]);
    r1.cli(&["CONFIG", "SET", "masterauth", "pw"]);
    let node = redis::RedisConnectionInfo::default()
        .set_username("a")
        .set_password("pw");
    let sentinel = SentinelClient::build(
        group.sentinel_urls(),
        String::from(group.service_name()),
        Some(SentinelNodeConnectionInfo::default().set_redis_connection_info(node)),
        SentinelServerType::Master,
    )
    .unwrap();
    let a = connect(
        builder_for(sentinel)
            .command_timeout(Duration::from_secs(1))
            .replica_timeout(Duration::from_millis(300))
            .min_replicas(1),
    )
    .await;
    // A was warned: one confirmation out of three replicas.
    assert_eq!(short_of_replicas(old).len(), 1);

    // The partition: the old master and R1 refuse everyone but `a`.
    for port in [nodes[0], nodes[1]] {
        let mut conn = as_a(port);
        redis::cmd("ACL")
            .arg(&["SETUSER", "default", "off"])
            .exec(&mut conn)
            .unwrap();
        redis::cmd("CLIENT")
            .arg(&["KILL", "USER", "default"])
            .exec(&mut conn)
            .unwrap();
    }
    let r1_online = format!("port={},state=online", nodes[1]);
    let mut old_master = as_a(old);
    until(
        "R1 alone replicating the old master",
        Duration::from_secs(10),
        || {
            let online = online_replicas(&mut old_master);
            (online.len() == 1 && online[0].contains(&r1_online)).then_some(())
        },
    )
    .await;

    let name = unique_key("partition");
    let held_by_a = a
        .lock(name.as_str())
        .lease(Duration::from_secs(3))
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect("A's lock, confirmed by R1");
    // Three confirmations are not to be had on A's side.
    let err = a
        .lock(unique_key("every-replica").as_str())
        .min_replicas(3)
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect_err("only R1 confirms");
    assert!(
        matches!(
            err,
            LockError::NotReplicated {
                wanted: 3,
                acked: 1,
                ..
            }
        ),
        "{err:?}"
    );

    // The sentinels promote R2 or R3, and the other replicates it.
    let new = until(
        "the sentinel promoting R2 or R3",
        Duration::from_secs(30),
        || {
            let master = sentinel_master(&group);
            let port = master.get("port")?.parse().ok()?;
            let promoted = port == nodes[2] || port == nodes[3];
            (promoted && master.get("flags")? == "master").then_some(port)
        },
    )
    .await;
    let new_master = group.nodes().iter().find(|n| n.port() == new).unwrap();
    let mut conn = redis::Client::open(new_master.url())
        .unwrap()
        .get_connection()
        .unwrap();
    until(
        "a replica of the new master",
        Duration::from_secs(30),
        || (!online_replicas(&mut conn).is_empty()).then_some(()),
    )
    .await;

    let b = connect(sentinel_builder(&group).min_replicas(1)).await;
    let held_by_b = b
        .lock(name.as_str())
        .lease(Duration::from_secs(3))
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .expect("B's lock, confirmed by the new master's replica");
    // A's lock is still held, and renewed after B got it: a lock is valid
    // for its lease from when its last confirmed renewal was sent, so a
    // validity past B's grant plus the lease means a renewal sent later.
    let renewed_after = Instant::now() + Duration::from_secs(3);
    until("A renewing its lock", Duration::from_secs(10), || {
        (held_by_a.valid_until() > renewed_after).then_some(())
    })
    .await;
    assert!(!held_by_a.is_lost(), "A's lock was lost");
    assert!(!held_by_b.is_lost(), "B's lock was lost");
}
