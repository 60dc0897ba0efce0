//! Operator tooling: see who holds which lock, who waits, and take a lock
//! away from a holder that is stuck.
//!
//! Everything here works on lock *names* (what [`LockClient::lock`] takes),
//! under the client's prefix, on any deployment: one server, a
//! Sentinel-watched master, a Redis Cluster (every master is scanned) or
//! Redlock masters (each is read, and what a majority of them holds is
//! reported). The `lockctl` command line is built on it.
//!
//! ```no_run
//! # async fn run() -> Result<(), lock_runtime::LockError> {
//! use lock_runtime::LockClient;
//!
//! let locks = LockClient::connect("redis://127.0.0.1:6379").await?;
//! for info in locks.list(Some("order:*")).await? {
//!     for holder in &info.holders {
//!         let who = holder.owner_id.as_ref().map(|o| o.name.as_str()).unwrap_or("?");
//!         println!("{} held by {who} (token {}, {:?} left)", info.name, holder.fence, holder.ttl);
//!     }
//! }
//! # Ok(())
//! # }
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::time::Duration;

use futures_util::StreamExt;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, FromRedisValue, RedisResult, Value};

use crate::api::client::LockClient;
use crate::base::error::LockError;
use crate::base::keys::{self, LockKeys};
use crate::base::kind::{HoldMode, LockKind};
use crate::base::owner::OwnerId;
use crate::engine::backend::needed;
use crate::engine::wakeups::{Wake, Watch};
use crate::store::connection::Conn;
use crate::store::node::{Node, within};
use crate::store::scripts::calls;

/// How many locks [`LockClient::list`] inspects at once.
const INSPECTING_AT_ONCE: usize = 16;

/// Keys SCAN asks for per round trip.
const SCAN_COUNT: usize = 1000;

/// One holder of a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The owner id as stored in Redis.
    pub owner: String,
    /// The owner id parsed: which program, host, process, client and scope
    /// holds the lock (`None` for an id in another form, such as one
    /// written by an older version).
    pub owner_id: Option<OwnerId>,
    /// How it holds the lock.
    pub mode: HoldMode,
    /// How many times the holder has entered the lock (re-entry depth).
    pub count: u64,
    /// How many of a semaphore's permits the holder holds (see
    /// [`LockRequest::permits`](crate::LockRequest::permits)); 1 for the
    /// other modes.
    pub permits: u32,
    /// The holder's fencing token (on Redlock masters, see
    /// [`LockClient::inspect`]).
    pub fence: u64,
    /// What is left of its lease (`None`: the key has no expiry, which the
    /// lock scripts never leave behind).
    pub ttl: Option<Duration>,
}

impl Holder {
    /// `NAME@HOST:PID` of the owner, or the raw owner id when it does not
    /// parse: what an operator needs to find the process.
    pub fn label(&self) -> String {
        match &self.owner_id {
            Some(id) => format!("{}@{}:{}", id.name, id.host, id.pid),
            None => self.owner.clone(),
        }
    }
}

/// Who waits for a lock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiters {
    /// Connections subscribed to the lock's release channel. Each client
    /// subscribes once however many of its tasks wait, so this counts
    /// waiting *clients*; a watching operator tool counts too.
    pub subscribers: u64,
    /// The owner ids of waiters in line, first first: fair waiters, and
    /// waiters for a plain lock that someone holds (its release wakes the
    /// first of them, not a waiter in every client).
    pub queued: Vec<String>,
}

impl Waiters {
    /// Whether anyone is known to wait.
    pub fn is_empty(&self) -> bool {
        self.subscribers == 0 && self.queued.is_empty()
    }
}

/// A snapshot of one lock: what [`LockClient::inspect`] and
/// [`LockClient::list`] return.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock's name, exactly as given to [`LockClient::lock`] (every
    /// distinct string is a lock of its own: `order:42` and `{order:42}`
    /// are two).
    pub name: String,
    /// The Redis key of the lock (under the client's prefix).
    pub key: String,
    /// What kind of lock it is.
    pub kind: LockKind,
    /// Who holds it; empty while fair waiters wait for a lock just released.
    pub holders: Vec<Holder>,
    /// A semaphore's number of permits, as its holders recorded it (`None`
    /// for the other kinds, and for holders of a version that recorded
    /// none). The permits of [`holders`](Self::holders) add up to at most
    /// this.
    pub limit: Option<u32>,
    /// Who waits for it.
    pub waiters: Waiters,
}

impl LockInfo {
    /// The holders' owners, modes, tokens and re-entry counts: what a
    /// change of holder changes (the leases left change all the time).
    fn holding(&self) -> Vec<(HoldMode, &str, u64, u64)> {
        let mut holding: Vec<_> = self
            .holders
            .iter()
            .map(|h| (h.mode, h.owner.as_str(), h.fence, h.count))
            .collect();
        holding.sort_unstable();
        holding
    }
}

/// One store's view of a lock, as inspect.lua returns it.
#[derive(Debug, Default)]
struct Seen {
    /// The type of the lock key (`none`, `hash`, `zset`, or a foreign one).
    lock_type: String,
    fair: bool,
    holders: Vec<Holder>,
    queued: Vec<String>,
    subscribers: u64,
    /// A semaphore's number of permits (`None`: none recorded).
    limit: Option<u32>,
}

impl Seen {
    /// Whether the lock key holds something no lock script writes.
    fn is_foreign(&self) -> bool {
        !matches!(self.lock_type.as_str(), "none" | "hash" | "zset")
    }
}

impl LockClient {
    /// A snapshot of the lock `name`: its kind, holders and waiters, or
    /// `None` when nobody holds it or waits in line for it.
    ///
    /// On Redlock masters, a holder is reported when a majority of the
    /// masters have it, with the lease left on that majority, and the
    /// largest token and re-entry count among them. Each master stores its
    /// own token, and the holder's is the largest among the masters that
    /// granted it first, so the token reported may be larger than the
    /// holder's (never smaller, while every master answers). Waiters are
    /// counted on the master with the most.
    ///
    /// A key under the lock's name that holds something else (a string
    /// written by another program) is [`LockError::WrongType`].
    ///
    /// ```no_run
    /// # async fn run(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// match locks.inspect("order:42").await? {
    ///     Some(info) => {
    ///         for holder in &info.holders {
    ///             println!(
    ///                 "{} {} by {} (entered {}x, token {}, lease left {:?})",
    ///                 info.kind, info.name, holder.label(), holder.count, holder.fence, holder.ttl
    ///             );
    ///         }
    ///         println!("{} clients waiting", info.waiters.subscribers);
    ///     }
    ///     None => println!("order:42 is free"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let keys = LockKeys::new(&self.inner.config.prefix, name);
        let seen = self.seen_everywhere(name, &keys).await?;
        if let Some(foreign) = seen.iter().flatten().find(|seen| seen.is_foreign()) {
            return Err(LockError::WrongType {
                key: name.to_owned(),
                source: redis::RedisError::from((
                    redis::ErrorKind::UnexpectedReturnType,
                    "WRONGTYPE the lock key holds a type no lock script writes",
                    format!("`{}` is a {}", keys.lock, foreign.lock_type),
                )),
            });
        }
        Ok(merge(&self.inner.config.prefix, name, &keys, seen))
    }

    /// Every lock under the client's prefix that is held (or waited for in
    /// line) and whose name matches the glob `pattern` (`*`, `?`, `[a-z]`,
    /// `[^a]`, `\` to escape, as Redis's `SCAN MATCH`), sorted by name;
    /// `None` lists them all.
    ///
    /// Keys are found with `SCAN`, which does not block the server: on a
    /// Cluster on every master, on Redlock on every master with each lock
    /// reported as [`inspect`](LockClient::inspect) does. A lock taken or
    /// released while the scan runs may or may not be listed. Each lock is
    /// listed once, whatever keys it has (a semaphore's holders, a
    /// read-write lock's readers, a fair lock's queue), and the fencing
    /// counters are skipped.
    ///
    /// ```no_run
    /// # async fn run(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// let stuck: Vec<_> = locks
    ///     .list(Some("report:*"))
    ///     .await?
    ///     .into_iter()
    ///     .filter(|info| info.holders.iter().any(|h| h.count > 10))
    ///     .collect();
    /// # Ok(())
    /// # }
    /// ```
    pub async fn list(&self, pattern: Option<&str>) -> Result<Vec<LockInfo>, LockError> {
        let prefix = self.inner.config.prefix.as_str();
        let nodes = self.inner.backend.nodes();
        let scanned =
            futures_util::future::join_all(nodes.iter().map(|node| scan(node, prefix))).await;
        let mut keys = BTreeSet::new();
        let mut failed = Vec::new();
        for outcome in scanned {
            match outcome {
                Ok(found) => keys.extend(found),
                Err(err) => failed.push(err),
            }
        }
        // Redlock: a majority of masters is enough to see every lock held.
        if nodes.len() - failed.len() < needed(nodes.len(), 1)
            && let Some(err) = failed.pop()
        {
            return Err(err);
        }

        let matches = |name: &str| pattern.is_none_or(|pattern| glob_match(pattern, name));
        // Each key is read as belonging to a lock (`x:holders` to `x`)...
        let mut primary = BTreeSet::new();
        // ...and a key that ends like a companion key also as a lock of its
        // own (a name may end in `:holders` too), which counts only when
        // the lock it would belong to is not held: the layout cannot tell
        // the two apart otherwise.
        let mut fallback: BTreeMap<String, Option<String>> = BTreeMap::new();
        for key in &keys {
            if is_fence_counter(prefix, key) {
                continue;
            }
            let base = strip_companion(key);
            let owner = lock_name(prefix, base);
            if base.len() != key.len()
                && let Some(own) = lock_name(prefix, key).filter(|name| matches(name))
            {
                fallback.insert(own, owner.clone());
            }
            if let Some(name) = owner.filter(|name| matches(name)) {
                primary.insert(name);
            }
        }

        let mut seen = self.inspect_many(primary).await?;
        let undecided: BTreeSet<String> = fallback
            .values()
            .flatten()
            .filter(|owner| !seen.contains_key(*owner))
            .cloned()
            .collect();
        let decided = self.inspect_many(undecided).await?;
        let own_locks: BTreeSet<String> = fallback
            .into_iter()
            .filter(|(_, owner)| {
                owner.as_ref().is_none_or(|owner| {
                    seen.get(owner)
                        .or(decided.get(owner))
                        .is_none_or(Option::is_none)
                })
            })
            .map(|(own, _)| own)
            .collect();
        seen.extend(self.inspect_many(own_locks).await?);
        let mut found: BTreeMap<String, LockInfo> = BTreeMap::new();
        for info in seen.into_values().flatten() {
            found.insert(info.name.clone(), info);
        }
        Ok(found.into_values().collect())
    }

    /// Takes the lock `name` away from whoever holds it: deletes what its
    /// holders hold (every holder of a semaphore or read-write lock) and
    /// publishes the release on its channel, so that waiters try again at
    /// once, in one atomic script. True when something was held.
    ///
    /// The holders are not asked: each learns of the loss at its next
    /// renewal (a third of its lease at most), when
    /// [`LockGuard::lost`](crate::LockGuard::lost) fires and a
    /// `#[distributed_lock]` body is stopped. Until then a holder may still
    /// be working, so the next holder can overlap with it: fencing tokens
    /// are what keeps its late writes out. Use this for a holder that is
    /// stuck, not as a way to take turns.
    ///
    /// On Redlock masters every master is cleared; a master that cannot be
    /// reached keeps its part until the lease runs out there.
    ///
    /// ```no_run
    /// # async fn run(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// if locks.force_release("nightly-report").await? {
    ///     println!("released; its holder will be told at its next renewal");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn force_release(&self, name: &str) -> Result<bool, LockError> {
        let keys = LockKeys::new(&self.inner.config.prefix, name);
        let nodes = self.inner.backend.nodes();
        let outcomes = futures_util::future::join_all(nodes.iter().map(|node| {
            let keys = &keys;
            async move {
                node.run::<i64>(Some(name), &calls::force_release(keys))
                    .await
            }
        }))
        .await;
        let mut released = false;
        let mut last_error = None;
        for outcome in outcomes {
            match outcome {
                Ok(deleted) => released |= deleted == 1,
                Err(err) => last_error = Some(err),
            }
        }
        match last_error {
            Some(err) if !released => Err(err),
            _ => {
                if released {
                    tracing::warn!(key = %name, "lock force-released by an operator");
                }
                Ok(released)
            }
        }
    }

    /// Follows the lock `name`: [`LockWatch::changed`] resolves each time
    /// its holders change (taken, re-entered, released, expired, taken
    /// over). Release messages are received on the client's pub/sub
    /// connection; the lock is also read every 200 ms (see
    /// [`LockWatch::poll_every`]), since acquisitions publish nothing, nor
    /// does a release to the watch's client when it names a waiter of
    /// another client in the lock's line (that message goes to the waiter's
    /// client alone): such a change is seen at the next read.
    ///
    /// ```no_run
    /// # async fn run(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// let mut watch = locks.watch("order:42").await?;
    /// loop {
    ///     match watch.changed().await? {
    ///         Some(info) => println!("held by {:?}", info.holders.iter().map(|h| h.label()).collect::<Vec<_>>()),
    ///         None => println!("free"),
    ///     }
    /// }
    /// # }
    /// ```
    pub async fn watch(&self, name: &str) -> Result<LockWatch, LockError> {
        let keys = LockKeys::new(&self.inner.config.prefix, name);
        let subscription = self
            .inner
            .wakeups
            .watch([keys.channel().as_str()], Wake::Every);
        // Subscribed before the first read, so that no release between the
        // two goes unseen; without a subscription, polling still works.
        let limit = self.inner.config.command_timeout * 2;
        let _ = tokio::time::timeout(limit, subscription.subscribed()).await;
        let mut watch = LockWatch {
            client: self.clone(),
            name: name.to_owned(),
            subscription,
            every: Duration::from_millis(200),
            current: None,
        };
        watch.current = watch.read().await?;
        Ok(watch)
    }

    /// [`inspect`](LockClient::inspect) of each name, a few at a time; a
    /// key of someone else's under the prefix is no lock (`None`).
    async fn inspect_many(
        &self,
        names: BTreeSet<String>,
    ) -> Result<BTreeMap<String, Option<LockInfo>>, LockError> {
        let infos: Vec<(String, Result<Option<LockInfo>, LockError>)> =
            futures_util::stream::iter(names)
                .map(|name| async move {
                    let info = self.inspect(&name).await;
                    (name, info)
                })
                .buffer_unordered(INSPECTING_AT_ONCE)
                .collect()
                .await;
        let mut found = BTreeMap::new();
        for (name, info) in infos {
            match info {
                Ok(info) => {
                    found.insert(name, info);
                }
                Err(LockError::WrongType { .. }) => {
                    found.insert(name, None);
                }
                Err(err) => return Err(err),
            }
        }
        Ok(found)
    }

    /// [`Seen`] on every store; `None` for a store that failed, unless too
    /// few answered to know what a majority holds.
    async fn seen_everywhere(
        &self,
        name: &str,
        keys: &LockKeys,
    ) -> Result<Vec<Option<Seen>>, LockError> {
        let nodes = self.inner.backend.nodes();
        let outcomes =
            futures_util::future::join_all(nodes.iter().map(|node| seen_on(node, name, keys)))
                .await;
        let answered = outcomes.iter().filter(|o| o.is_ok()).count();
        let mut seen = Vec::with_capacity(outcomes.len());
        let mut last_error = None;
        for outcome in outcomes {
            match outcome {
                Ok(one) => seen.push(Some(one)),
                Err(err) => {
                    last_error = Some(err);
                    seen.push(None);
                }
            }
        }
        match last_error {
            Some(err) if answered < needed(nodes.len(), 1) => Err(err),
            _ => Ok(seen),
        }
    }
}

/// A lock followed by [`LockClient::watch`].
pub struct LockWatch {
    client: LockClient,
    name: String,
    subscription: Watch,
    every: Duration,
    current: Option<LockInfo>,
}

impl fmt::Debug for LockWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockWatch")
            .field("name", &self.name)
            .field("every", &self.every)
            .field("current", &self.current)
            .finish_non_exhaustive()
    }
}

impl LockWatch {
    /// The lock as last seen: at the start, then after each change.
    pub fn current(&self) -> Option<&LockInfo> {
        self.current.as_ref()
    }

    /// How often the lock is read besides on release messages (default
    /// 200 ms). Shorter sees brief holders that a longer one misses.
    pub fn poll_every(mut self, every: Duration) -> Self {
        self.every = every.max(Duration::from_millis(10));
        self
    }

    /// Waits until the holders differ from [`current`](Self::current), and
    /// returns the new state (`None`: nobody holds the lock now). A holder
    /// that comes and goes between two reads is not seen.
    pub async fn changed(&mut self) -> Result<Option<LockInfo>, LockError> {
        loop {
            tokio::select! {
                _ = self.subscription.notify().notified() => {}
                _ = tokio::time::sleep(self.every) => {}
            }
            let now = self.read().await?;
            let before = self.current.as_ref().map(LockInfo::holding);
            let after = now.as_ref().map(LockInfo::holding);
            if before.unwrap_or_default() != after.unwrap_or_default() {
                self.current = now.clone();
                return Ok(now);
            }
            // Same holders: keep the leases and waiters up to date.
            self.current = now;
        }
    }

    async fn read(&self) -> Result<Option<LockInfo>, LockError> {
        let mut info = self.client.inspect(&self.name).await?;
        // The watch's own subscription is no waiter.
        if let Some(info) = &mut info
            && self.subscription.is_live()
        {
            info.waiters.subscribers = info.waiters.subscribers.saturating_sub(1);
        }
        Ok(info)
    }
}

/// One store's view of the lock `keys`.
async fn seen_on(node: &Node, name: &str, keys: &LockKeys) -> Result<Seen, LockError> {
    let reply: Value = node.run(Some(name), &calls::inspect(keys)).await?;
    parse_seen(reply).ok_or_else(|| LockError::Redis {
        key: Some(name.to_owned()),
        source: redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "unexpected reply from the inspect script",
        )),
    })
}

fn parse_seen(reply: Value) -> Option<Seen> {
    let Value::Array(parts) = reply else {
        return None;
    };
    let [lock_type, fair, holders, queued, subscribers, limit]: [Value; 6] =
        parts.try_into().ok()?;
    let text = |value: &Value| String::from_redis_value_ref(value).ok();
    let number = |value: &Value| i64::from_redis_value_ref(value).ok();
    let Value::Array(holders) = holders else {
        return None;
    };
    let holders = holders
        .chunks_exact(6)
        .map(|h| {
            let owner = text(&h[1])?;
            Some(Holder {
                owner_id: owner.parse().ok(),
                owner,
                mode: match text(&h[0])?.as_str() {
                    "p" => HoldMode::Permit,
                    "r" => HoldMode::Read,
                    _ => HoldMode::Exclusive,
                },
                count: u64::try_from(number(&h[2])?).unwrap_or(0),
                fence: u64::try_from(number(&h[3])?).unwrap_or(0),
                ttl: u64::try_from(number(&h[4])?)
                    .ok()
                    .map(Duration::from_millis),
                permits: u32::try_from(number(&h[5])?).unwrap_or(1),
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Seen {
        lock_type: text(&lock_type)?,
        fair: number(&fair)? == 1,
        holders,
        queued: Vec::<String>::from_redis_value(queued).ok()?,
        subscribers: u64::try_from(number(&subscribers)?).unwrap_or(0),
        limit: u32::try_from(number(&limit)?)
            .ok()
            .filter(|&limit| limit > 0),
    })
}

/// What a majority of the stores see (all of them: the one store of a
/// server or Cluster), or `None` when nobody holds the lock or waits in line.
fn merge(prefix: &str, name: &str, keys: &LockKeys, seen: Vec<Option<Seen>>) -> Option<LockInfo> {
    let stores = seen.len();
    let majority = needed(stores, 1);
    let answered: Vec<Seen> = seen.into_iter().flatten().collect();

    // Holders by (mode, owner), with every store's view of them.
    let mut views: BTreeMap<(HoldMode, String), Vec<Holder>> = BTreeMap::new();
    for seen in &answered {
        for holder in &seen.holders {
            views
                .entry((holder.mode, holder.owner.clone()))
                .or_default()
                .push(holder.clone());
        }
    }
    let holders: Vec<Holder> = views
        .into_values()
        .filter(|views| views.len() >= majority)
        .map(|mut views| {
            // Held while a majority still has it: the lease left on the
            // store that is the last of the majority to let it go.
            views.sort_by_key(|h| std::cmp::Reverse(h.ttl.unwrap_or(Duration::MAX)));
            let ttl = views[majority - 1].ttl;
            let fence = views.iter().map(|h| h.fence).max().unwrap_or(0);
            let count = views.iter().map(|h| h.count).max().unwrap_or(0);
            let permits = views.iter().map(|h| h.permits).max().unwrap_or(1);
            Holder {
                ttl,
                fence,
                count,
                permits,
                ..views.swap_remove(0)
            }
        })
        .collect();

    let mut in_line: HashMap<&str, usize> = HashMap::new();
    for seen in &answered {
        for owner in &seen.queued {
            *in_line.entry(owner).or_default() += 1;
        }
    }
    let mut queued: Vec<String> = Vec::new();
    for seen in &answered {
        for owner in &seen.queued {
            if in_line[owner.as_str()] >= majority && !queued.contains(owner) {
                queued.push(owner.clone());
            }
        }
    }
    if holders.is_empty() && queued.is_empty() {
        return None;
    }
    let fair = answered.iter().filter(|s| s.fair).count() >= majority;
    let kind = if holders.iter().any(|h| h.mode == HoldMode::Permit) {
        LockKind::Semaphore
    } else if holders.iter().any(|h| h.mode == HoldMode::Read) {
        LockKind::ReadWrite
    } else if fair || (holders.is_empty() && !queued.is_empty()) {
        // A plain lock's waiters get in line too (while another holds it,
        // and stay until they take it or their place lapses), so a free
        // lock with a line reads as fair: nothing records the kind of a
        // lock nobody holds.
        LockKind::Fair
    } else {
        LockKind::Exclusive
    };
    let subscribers = answered.iter().map(|s| s.subscribers).max().unwrap_or(0);
    // The number most stores recorded (they agree but for a store that
    // missed the semaphore's start: see `backend`'s module docs), the
    // larger on a tie.
    let mut limits: BTreeMap<u32, usize> = BTreeMap::new();
    for limit in answered.iter().filter_map(|s| s.limit) {
        *limits.entry(limit).or_default() += 1;
    }
    let limit = (kind == LockKind::Semaphore)
        .then(|| limits.into_iter().max_by_key(|&(limit, n)| (n, limit)))
        .flatten()
        .map(|(limit, _)| limit);
    Some(LockInfo {
        name: lock_name(prefix, &keys.lock).unwrap_or_else(|| name.to_owned()),
        key: keys.lock.clone(),
        kind,
        holders,
        limit,
        waiters: Waiters {
            subscribers,
            queued,
        },
    })
}

/// The name of the lock whose lock key is `key`, exactly as it was given;
/// `None` when no lock name maps to `key` (see keys.rs).
fn lock_name(prefix: &str, key: &str) -> Option<String> {
    keys::lock_name(prefix, key)
}

/// The lock key a companion key belongs to (`lock:{x}:holders` →
/// `lock:{x}`), or the key itself. A lock key ends at its last `}` and no
/// companion suffix has a brace, so what follows the last `}` tells a
/// companion key from a lock key (`lock:{x:holders}`, of the lock
/// `x:holders`).
fn strip_companion(key: &str) -> &str {
    let base = key.rfind('}').map_or(key, |end| &key[..=end]);
    if keys::COMPANIONS.contains(&&key[base.len()..]) {
        base
    } else {
        key
    }
}

/// Whether `key` is a fencing counter, `PREFIXfence:{DIGITS}` (keys.rs), or
/// one of its marks: of a counter created during a restart quarantine
/// (`…:born`), or of the uptime after a save (`…:up`, or the server's
/// `PREFIXfence:up`, all fence.lua).
fn is_fence_counter(prefix: &str, key: &str) -> bool {
    if key.strip_prefix(prefix) == Some("fence:up") {
        return true;
    }
    let key = key
        .strip_suffix(":born")
        .or_else(|| key.strip_suffix(":up"))
        .unwrap_or(key);
    key.strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix("fence:{"))
        .and_then(|rest| rest.strip_suffix('}'))
        .is_some_and(|tag| !tag.is_empty() && tag.bytes().all(|b| b.is_ascii_digit()))
}

/// Every key under `prefix` on one store: on a Cluster, on each master.
async fn scan(node: &Node, prefix: &str) -> Result<Vec<String>, LockError> {
    let (conn, timeout) = node.parts();
    let pattern = format!("{}*", glob_escape(prefix));
    match conn.clone() {
        Conn::Cluster(mut cluster) => {
            // redis-rs routes no SCAN across a Cluster: ask every master for
            // its address, then scan each by address.
            let masters = within(
                timeout,
                None,
                cluster.route_command(
                    redis::cmd("PING"),
                    RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None)),
                ),
            )
            .await?;
            let Value::Map(masters) = masters else {
                return Err(LockError::Config(
                    "the Cluster did not list its masters".into(),
                ));
            };
            let mut keys = Vec::new();
            for (address, _) in masters {
                let address = String::from_redis_value(address)
                    .map_err(|err| LockError::from_redis(None, err.into()))?;
                let (host, port) = address
                    .rsplit_once(':')
                    .and_then(|(host, port)| Some((host.to_owned(), port.parse().ok()?)))
                    .ok_or_else(|| {
                        LockError::Config(format!("unexpected Cluster node address `{address}`"))
                    })?;
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                    host: host.trim_matches(['[', ']']).to_owned(),
                    port,
                });
                let mut cluster = cluster.clone();
                keys.extend(
                    scan_with(timeout, &pattern, async |cmd: Cmd| {
                        cluster.route_command(cmd, routing.clone()).await
                    })
                    .await?,
                );
            }
            Ok(keys)
        }
        mut other => {
            scan_with(timeout, &pattern, async |cmd: Cmd| {
                cmd.query_async(&mut other).await
            })
            .await
        }
    }
}

/// SCAN to the end through `send`, collecting the keys that are text.
async fn scan_with(
    timeout: Duration,
    pattern: &str,
    mut send: impl AsyncFnMut(Cmd) -> RedisResult<Value>,
) -> Result<Vec<String>, LockError> {
    let mut keys = Vec::new();
    let mut cursor = 0u64;
    loop {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT);
        let reply = within(timeout, None, send(cmd)).await?;
        let (next, batch): (u64, Vec<Vec<u8>>) = redis::from_redis_value(reply)
            .map_err(|err| LockError::from_redis(None, err.into()))?;
        keys.extend(
            batch
                .into_iter()
                .filter_map(|key| String::from_utf8(key).ok()),
        );
        if next == 0 {
            return Ok(keys);
        }
        cursor = next;
    }
}

/// `text` with the glob's special characters escaped, for SCAN MATCH.
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// Whether `text` matches the glob `pattern`, as Redis matches them: `*`
/// any run, `?` any one character, `[abc]`, `[a-z]`, `[^a]` one of a set
/// (or not), `\` takes the next character literally.
pub(crate) fn glob_match(pattern: &str, text: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let text: Vec<char> = text.chars().collect();
    // Iterative matching with one backtrack point, the last `*` seen.
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        let step = match pattern.get(p) {
            Some('*') => {
                star = Some((p, t));
                p += 1;
                continue;
            }
            Some('?') => Some(p + 1),
            Some('[') => class_match(&pattern, p, text[t]),
            Some('\\') if p + 1 < pattern.len() => (pattern[p + 1] == text[t]).then_some(p + 2),
            Some(&c) => (c == text[t]).then_some(p + 1),
            None => None,
        };
        match (step, star) {
            (Some(next), _) => {
                p = next;
                t += 1;
            }
            (None, Some((star_p, star_t))) => {
                p = star_p + 1;
                t = star_t + 1;
                star = Some((star_p, star_t + 1));
            }
            (None, None) => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

/// Matches `c` against the class opening at `pattern[open]`; the index
/// after the class when it matches.
fn class_match(pattern: &[char], open: usize, c: char) -> Option<usize> {
    let mut i = open + 1;
    let negated = matches!(pattern.get(i), Some('^'));
    if negated {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    while i < pattern.len() && (first || pattern[i] != ']') {
        first = false;
        let low = if pattern[i] == '\\' && i + 1 < pattern.len() {
            i += 1;
            pattern[i]
        } else {
            pattern[i]
        };
        if pattern.get(i + 1) == Some(&'-') && i + 2 < pattern.len() && pattern[i + 2] != ']' {
            let high = pattern[i + 2];
            let (low, high) = if low <= high {
                (low, high)
            } else {
                (high, low)
            };
            matched |= (low..=high).contains(&c);
            i += 3;
        } else {
            matched |= low == c;
            i += 1;
        }
    }
    // An unclosed class matches nothing, as in Redis.
    (i < pattern.len() && matched != negated).then_some(i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_redis_does() {
        for (pattern, text, expected) in [
            ("*", "", true),
            ("*", "order:42", true),
            ("order:*", "order:42", true),
            ("order:*", "orders", false),
            ("order:?", "order:4", true),
            ("order:?", "order:42", false),
            ("*:42", "order:42", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("[ab]x", "bx", true),
            ("[^ab]x", "bx", false),
            ("[^ab]x", "cx", true),
            ("[a-c]x", "cx", true),
            ("[a-c]x", "dx", false),
            ("\\*x", "*x", true),
            ("\\*x", "ax", false),
            ("{t}:*", "{t}:order", true),
            ("[ab", "a", false),
        ] {
            assert_eq!(glob_match(pattern, text), expected, "{pattern} on {text}");
        }
    }

    #[test]
    fn keys_map_back_to_one_name() {
        assert_eq!(
            lock_name("lock:", "lock:{order:42}").as_deref(),
            Some("order:42")
        );
        assert_eq!(
            lock_name("lock:", "lock:{tenant:7}{:order:42}").as_deref(),
            Some("{tenant:7}:order:42")
        );
        // Not the key of any name: names without a tag get braces, and a
        // tag in the name is followed by the escaped rest in braces.
        assert_eq!(lock_name("lock:", "lock:order:42"), None);
        assert_eq!(lock_name("lock:", "lock:{tenant:7}:order:42"), None);
        assert_eq!(lock_name("lock:", "other:{x}"), None);
        for name in [
            "order:42",
            "{tenant:7}:order:42",
            "a{b}c",
            "x:holders",
            "{x}",
            "{x}:holders",
            "}x",
            "{}x",
            "a{b",
            "{{x}",
            "%7Bx%7D",
            "50%",
        ] {
            let keys = LockKeys::new("lock:", name);
            assert_eq!(lock_name("lock:", &keys.lock).as_deref(), Some(name));
        }
    }

    #[test]
    fn companion_keys_and_counters_are_recognised() {
        for name in ["job", "{x}", "{x}:holders", "x:holders", "}x", "a{t}b"] {
            let keys = LockKeys::new("lock:", name);
            for companion in [
                keys.holders(),
                keys.readers(),
                keys.readers_holders(),
                keys.readers_waiting(),
                keys.writer_waiting(),
                keys.queue(),
                keys.queue_alive(),
            ] {
                assert_eq!(strip_companion(&companion), keys.lock, "{companion}");
                assert_eq!(lock_name("lock:", &companion), None, "{companion}");
            }
            assert_eq!(strip_companion(&keys.lock), keys.lock);
            // An owner id's retirement mark (prelude.lua) names no lock.
            for set in [&keys.lock, &keys.readers()] {
                assert_eq!(lock_name("lock:", &format!("{set}:gone:u:1")), None);
            }
            assert!(is_fence_counter("lock:", &keys.fence));
            assert!(is_fence_counter("lock:", &format!("{}:born", keys.fence)));
            assert!(is_fence_counter("lock:", &format!("{}:up", keys.fence)));
            assert!(is_fence_counter("lock:", "lock:fence:up"));
            assert!(!is_fence_counter("lock:", &keys.lock));
        }
        // A name ending like a companion is a lock of its own.
        let own = LockKeys::new("lock:", "x:holders");
        assert_eq!(strip_companion(&own.lock), own.lock);
        assert_eq!(strip_companion("lock:{x}:other"), "lock:{x}:other");
        assert!(!is_fence_counter("lock:", "lock:fence:{x}"));
    }

    #[test]
    fn prefixes_are_escaped_for_scan() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
        assert!(glob_match(&format!("{}*", glob_escape("p[1]:")), "p[1]:x"));
    }
}
