//! Whether `min_replicas` keeps a Sentinel failover from granting a lock
//! twice, read from the master and the sentinels.
//!
//! `WAIT n` returns once *any* n replicas have a write. Sentinel promotes a
//! replica it can reach, ranked by `replica-priority` (0: never) before
//! replication offset. So the promoted replica is sure to have a confirmed
//! lock only when every replica confirmed it: a replica left out may be
//! the one promoted (cut off from the master but not from the sentinels,
//! or first by priority), and a confirmation from a replica that is never
//! promoted protects nothing. Only when no replica can be promoted (no
//! failover at all) does a smaller count suffice.
//!
//! The client reads the replicas when it connects and each time it follows
//! the master to a new address, and warns (or, at connect and with
//! `strict_min_replicas`, refuses) when its `min_replicas` is below them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use redis::RedisResult;

use crate::base::config::Config;
use crate::base::error::{Chain, LockError};
use crate::store::connection::Sentinels;
use crate::store::node::within;

/// What one Sentinel knows of one replica (`SENTINEL REPLICAS`), field by
/// field.
type Listed = HashMap<String, String>;

/// An `info-refresh` above this (in ms, about 31 years) is the time since
/// 1970: the sentinel has not read the replica's `INFO` yet (it was just
/// added, as every replica is after a failover), so the priority it
/// reports is its default, not the replica's.
const NEVER_READ_MS: u64 = 1_000_000_000_000;

/// How often, and how many times, a count with replicas the sentinels have
/// not read yet is taken again before it is believed (they read a new
/// replica within about a second).
const REREAD: (Duration, u32) = (Duration::from_millis(500), 10);

/// The replicas of one master, as counted for `min_replicas`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Replicas {
    /// Replicas connected to the master now (`INFO replication`).
    pub(crate) connected: u32,
    /// Every replica known: connected to the master or listed by the
    /// sentinels (which remember one that is down until `SENTINEL RESET`).
    pub(crate) known: u32,
    /// Of those, the ones a failover may promote: a `replica-priority`
    /// other than 0, or one not known.
    pub(crate) promotable: u32,
    /// Of the known ones, those the sentinels see as down or disconnected.
    pub(crate) down: u32,
    /// Of the known ones, those whose priority is not known (counted as
    /// promotable): not listed by the sentinels, or not read by them yet.
    pub(crate) unknown: u32,
    /// Unknown ones that are up: the sentinels are about to read them.
    pub(crate) unread: u32,
    /// Whether the sentinels' list was read at all.
    pub(crate) listed: bool,
}

impl Replicas {
    /// Counts the replicas in the master's `INFO replication` text and the
    /// sentinels' list of them (`None`: the sentinels could not say).
    pub(crate) fn count(info: &str, listed: Option<&[Listed]>) -> Replicas {
        let attached: HashSet<String> = attached(info).collect();
        let mut replicas = Replicas {
            connected: attached.len() as u32,
            listed: listed.is_some(),
            ..Replicas::default()
        };
        let mut seen = HashSet::new();
        for entry in listed.unwrap_or_default() {
            let field = |name: &str| entry.get(name).map(String::as_str).unwrap_or_default();
            let address = format!("{}:{}", field("ip"), field("port"));
            if !seen.insert(address) {
                continue;
            }
            let flags = field("flags");
            let down = ["s_down", "o_down", "disconnected"]
                .iter()
                .any(|flag| flags.split(',').any(|f| f == *flag));
            let read = field("info-refresh")
                .parse::<u64>()
                .is_ok_and(|ms| ms < NEVER_READ_MS);
            let priority = field("slave-priority")
                .parse::<u64>()
                .or_else(|_| field("replica-priority").parse::<u64>())
                .ok();
            replicas.known += 1;
            replicas.down += u32::from(down);
            match priority {
                Some(0) if read => {}
                Some(_) if read => replicas.promotable += 1,
                _ => {
                    replicas.promotable += 1;
                    replicas.unknown += 1;
                    replicas.unread += u32::from(!down);
                }
            }
        }
        // Attached to the master but not listed (`replica-announced no`, or
        // no list at all): it can confirm writes, and may be promoted.
        let unlisted = attached.difference(&seen).count() as u32;
        replicas.known += unlisted;
        replicas.promotable += unlisted;
        replicas.unknown += unlisted;
        replicas
    }

    /// The smallest `min_replicas` with which no failover grants a
    /// confirmed lock twice: every replica, unless none can be promoted.
    pub(crate) fn needed(&self) -> u32 {
        if self.promotable == 0 { 0 } else { self.known }
    }
}

/// The `ip:port` of each replica in an `INFO replication` text
/// (`slave0:ip=10.0.0.2,port=6379,state=online,offset=1,lag=0`).
fn attached(info: &str) -> impl Iterator<Item = String> + '_ {
    info.lines().filter_map(|line| {
        let (name, fields) = line.trim().split_once(':')?;
        let number = name.strip_prefix("slave")?;
        if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let field = |wanted: &str| {
            fields
                .split(',')
                .find_map(|pair| pair.strip_prefix(wanted)?.strip_prefix('='))
        };
        Some(format!("{}:{}", field("ip")?, field("port")?))
    })
}

/// The replicas of the master at `master` (`host:port`) as the sentinels
/// know them, asked of the first sentinel that answers, or `None` when it
/// does not monitor that address (it has not learned of a failover yet).
async fn listed_by_sentinels(
    sentinels: &Sentinels,
    master: &str,
) -> RedisResult<Option<Vec<Listed>>> {
    let mut conn = sentinels
        .sentinel()
        .await?
        .get_multiplexed_async_connection()
        .await?;
    let masters: Vec<Listed> = redis::cmd("SENTINEL")
        .arg("MASTERS")
        .query_async(&mut conn)
        .await?;
    let name = masters.iter().find_map(|entry| {
        let field = |name: &str| entry.get(name).map(String::as_str).unwrap_or_default();
        (format!("{}:{}", field("ip"), field("port")) == master).then(|| field("name").to_owned())
    });
    let Some(name) = name else {
        return Ok(None);
    };
    let replicas = redis::cmd("SENTINEL")
        .arg("REPLICAS")
        .arg(name)
        .query_async(&mut conn)
        .await?;
    Ok(Some(replicas))
}

/// Reads and judges the replicas of a Sentinel-watched master against the
/// client's `min_replicas`, at connect and after each failover.
pub(crate) struct ReplicaCheck {
    sentinels: Arc<Sentinels>,
    min_replicas: u32,
    strict: bool,
    /// Bounds each reading (connecting and asking master and sentinels).
    timeout: Duration,
    /// The master address last judged: one failover, one judgement,
    /// however many connections moved with it.
    judged: tokio::sync::Mutex<Option<String>>,
}

impl ReplicaCheck {
    /// The check for a client with `config`, or `None` when it asks for no
    /// replicas and is not strict (nothing to protect, nothing to say).
    pub(crate) fn new(sentinels: Arc<Sentinels>, config: &Config) -> Option<Arc<ReplicaCheck>> {
        (config.min_replicas > 0 || config.strict_min_replicas).then(|| {
            Arc::new(ReplicaCheck {
                sentinels,
                min_replicas: config.min_replicas,
                strict: config.strict_min_replicas,
                timeout: config.connect_timeout + config.command_timeout,
                judged: tokio::sync::Mutex::new(None),
            })
        })
    }

    /// The master's address and its replicas, read once.
    async fn read(&self) -> Result<(String, Replicas), LockError> {
        let reading = async {
            let master = self.sentinels.master().await?;
            let address = master.get_connection_info().addr().to_string();
            let mut conn = master.get_multiplexed_async_connection().await?;
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut conn)
                .await?;
            let listed = match listed_by_sentinels(&self.sentinels, &address).await {
                Ok(listed) => listed,
                Err(err) => {
                    tracing::debug!(error = %Chain(&err), "asking the sentinels for the replicas failed");
                    None
                }
            };
            Ok::<_, redis::RedisError>((address, Replicas::count(&info, listed.as_deref())))
        };
        within(self.timeout, None, reading).await
    }

    /// Reads the replicas, again for a while if a shortfall may only be
    /// replicas the sentinels have not read yet (right after a failover).
    async fn settled(&self) -> Result<(String, Replicas), LockError> {
        let (pause, times) = REREAD;
        let mut read = self.read().await?;
        for _ in 1..times {
            let (_, replicas) = &read;
            if self.min_replicas >= replicas.needed() || replicas.unread == 0 {
                break;
            }
            tokio::time::sleep(pause).await;
            read = self.read().await?;
        }
        Ok(read)
    }

    /// Judges the master the client connects to: an error when strict and
    /// short, a warning when short.
    pub(crate) async fn at_connect(&self) -> Result<(), LockError> {
        let mut judged = self.judged.lock().await;
        let (master, replicas) = self.settled().await?;
        *judged = Some(master.clone());
        let needed = replicas.needed();
        if self.min_replicas >= needed {
            return Ok(());
        }
        if self.strict {
            return Err(LockError::Config(format!(
                "min_replicas {} does not cover the replicas of the master at {master}: {} \
                 known ({} connected, {} down), {} of them promotable{}; a failover may \
                 promote a replica that never confirmed a lock and grant it twice. Set \
                 min_replicas to {needed}, or give the replicas that must never take over \
                 replica-priority 0 and make the rest confirm; \
                 LockClientBuilder::strict_min_replicas(false) accepts the risk",
                self.min_replicas,
                replicas.known,
                replicas.connected,
                replicas.down,
                replicas.promotable,
                unknown_note(&replicas),
            )));
        }
        warn(self.min_replicas, &master, &replicas);
        Ok(())
    }

    /// After commands moved to a new master: judges it in the background
    /// (once per address), warning when short.
    pub(crate) fn after_switch(self: &Arc<ReplicaCheck>) {
        let this = self.clone();
        tokio::spawn(async move {
            let mut judged = this.judged.lock().await;
            if judged.as_deref() == this.sentinels.latest().as_deref() {
                return;
            }
            match this.settled().await {
                Ok((master, replicas)) => {
                    if this.min_replicas < replicas.needed() {
                        warn(this.min_replicas, &master, &replicas);
                    }
                    *judged = Some(master);
                }
                Err(err) => {
                    tracing::debug!(error = %Chain(&err), "reading the new master's replicas failed");
                }
            }
        });
    }
}

/// What the counts leave unknown, for messages.
fn unknown_note(replicas: &Replicas) -> String {
    match (replicas.listed, replicas.unknown) {
        (false, _) => " (the sentinels did not list them: priorities not known)".to_owned(),
        (true, 0) => String::new(),
        (true, unknown) => format!(" ({unknown} of unknown priority counted)"),
    }
}

/// The warning for a client whose `min_replicas` is short of `replicas`.
fn warn(min_replicas: u32, master: &str, replicas: &Replicas) {
    tracing::warn!(
        min_replicas,
        needed = replicas.needed(),
        replicas = replicas.known,
        promotable = replicas.promotable,
        connected = replicas.connected,
        down = replicas.down,
        unknown_priority = replicas.unknown,
        %master,
        "min_replicas does not cover every replica of the master{}: a failover may \
         promote a replica that never confirmed a lock, and grant it twice",
        unknown_note(replicas),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
        slave0:ip=127.0.0.1,port=7001,state=online,offset=10,lag=0\r\n\
        slave1:ip=127.0.0.1,port=7002,state=online,offset=10,lag=1\r\n\
        master_failover_state:no-failover\r\nslave_read_repl_offset:10\r\n";

    fn listed(port: u16, priority: u32, flags: &str, refresh: u64) -> Listed {
        [
            ("ip", "127.0.0.1".to_owned()),
            ("port", port.to_string()),
            ("flags", flags.to_owned()),
            ("slave-priority", priority.to_string()),
            ("info-refresh", refresh.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    #[test]
    fn every_replica_is_needed_once_one_can_be_promoted() {
        let both = [
            listed(7001, 100, "slave", 800),
            listed(7002, 100, "slave", 800),
        ];
        let replicas = Replicas::count(INFO, Some(&both));
        assert_eq!(
            (replicas.known, replicas.promotable, replicas.connected),
            (2, 2, 2)
        );
        assert_eq!(replicas.needed(), 2);
        // A replica never promoted still confirms writes in its stead.
        let one = [
            listed(7001, 0, "slave", 800),
            listed(7002, 100, "slave", 800),
        ];
        let replicas = Replicas::count(INFO, Some(&one));
        assert_eq!((replicas.promotable, replicas.needed()), (1, 2));
        // No replica can be promoted: no failover.
        let none = [listed(7001, 0, "slave", 800), listed(7002, 0, "slave", 800)];
        assert_eq!(Replicas::count(INFO, Some(&none)).needed(), 0);
    }

    #[test]
    fn replicas_down_unlisted_or_unread_count_as_promotable() {
        // The sentinels remember a replica that is down; one they list but
        // have not read reports the default priority.
        let with_down = [
            listed(7001, 0, "slave", 800),
            listed(7003, 100, "s_down,slave,disconnected", 1_700_000_000_000),
        ];
        let replicas = Replicas::count(INFO, Some(&with_down));
        assert_eq!(
            replicas,
            Replicas {
                connected: 2,
                known: 3,
                promotable: 2,
                down: 1,
                unknown: 2,
                unread: 0,
                listed: true,
            }
        );
        let fresh = [
            with_down[0].clone(),
            listed(7002, 0, "slave", 1_700_000_000_000),
        ];
        let replicas = Replicas::count(INFO, Some(&fresh));
        assert_eq!((replicas.unread, replicas.needed()), (1, 2));
        // Without the sentinels' list, the master's replicas all count.
        let replicas = Replicas::count(INFO, None);
        assert_eq!(
            (replicas.known, replicas.promotable, replicas.listed),
            (2, 2, false)
        );
        assert_eq!(
            Replicas::count("role:master\r\nconnected_slaves:0\r\n", None).needed(),
            0
        );
    }
}
