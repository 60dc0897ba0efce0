//! Waking waiters on release: one pub/sub connection per client.
//!
//! A waiter *watches* a lock's release channel before it retries, so a
//! release between its failed attempt and its sleep cannot be missed. Waiters
//! on the same lock in one process share one subscription; a release message
//! wakes one of them (in arrival order), not all, and a woken waiter that
//! gives up passes the wake-up on (tokio's `Notify` does that). A message
//! that names a waiter of another client (the first in the lock's line, see
//! acquire.lua) wakes none of them: only that client's tries. A release
//! of a plain or fair lock, or a waiter leaving its line, sends such a
//! message to that client alone, on the lock's channel followed by `:` and
//! the client's part of its owner ids (its *inbox* for that lock, see
//! `wake` in line.lua), unless a waiter not in line waits for the lock
//! too: each watched channel is subscribed together with its inbox, and
//! Redis writes such a release to one client, not to every client with
//! waiters for the lock. (A read lock's or a semaphore's release still
//! names its first fair waiter on the lock's channel.)
//!
//! Subscriptions are made by one task, in the order the watch counts
//! changed, and that task unsubscribes from a channel only once it is out
//! of the map, before the SUBSCRIBE of any watch that came after: a late
//! UNSUBSCRIBE can never cancel a newer SUBSCRIBE. A channel nobody watches any more stays
//! subscribed for [`LINGER`]: a client whose tasks wait for the same lock
//! again and again (workers of one queue) subscribes once, not at every
//! wait, and its waiters need not try again once subscribed (see
//! [`Wakeups::is_subscribed`]). When the connection drops, that task
//! subscribes again to every watched channel and then wakes every waiter,
//! since a release may have been missed meanwhile.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::{Notify, mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::base::error::{Chain, not_reached};
use crate::base::keys;
use crate::store::connection::{Following, Managed};
#[cfg(feature = "memory")]
use crate::store::memory::MemorySubscriber;

/// A release message that names nobody: any waiter may take the lock.
const ANYONE: &str = "released";

/// What a subscriber calls when its connection drops.
pub(crate) type OnDisconnect = Arc<dyn Fn() + Send + Sync>;

/// Whether a channel's subscription is confirmed by the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Readiness {
    Pending,
    Subscribed,
    /// The subscription failed: waiters fall back to short sleeps.
    Failed,
}

#[derive(Debug)]
struct Channel {
    name: String,
    /// Single-lock waiters queue here: a release wakes one of them.
    notify: Notify,
    /// How many single-lock waiters queue on `notify`.
    in_turn: AtomicUsize,
    /// Multi-lock waiters and readers, each with a notification of its own:
    /// a release wakes every one of them, since each may still find another
    /// of its locks taken and must not swallow the wake-up of a single-lock
    /// waiter.
    listeners: Mutex<Vec<Arc<Notify>>>,
    /// Fair waiters by owner id: a release that names one wakes only it.
    named: Mutex<HashMap<Arc<str>, Arc<Notify>>>,
    ready: watch::Sender<Readiness>,
    /// How many times every waiter was woken at once (after the
    /// subscriptions came back: releases may have been missed). Such a
    /// wake-up leaves nothing for a waiter registered but not asleep yet,
    /// which learns of it from this count (see [`Watch::undisturbed`]).
    woken_all: AtomicUsize,
}

/// Which releases wake a waiter.
#[derive(Debug, Clone)]
pub(crate) enum Wake {
    /// One waiter per release, in arrival order: for a release that names
    /// nobody or a waiter of this client (see [`Channel::wake`]).
    One,
    /// Every release wakes this waiter.
    Every,
    /// Releases that name this owner id (fair locks), or nobody in particular.
    Named(Arc<str>),
}

impl Channel {
    fn listeners(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Notify>>> {
        // Only pushed to and removed from; a panic cannot leave it torn.
        self.listeners.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn named(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Arc<Notify>>> {
        // Only inserted into and removed from; a panic cannot leave it torn.
        self.named.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes for a release message: the fair waiter it names, if that one
    /// waits here; otherwise one single-lock waiter (or all, after a
    /// reconnect, fair ones included) and every multi-lock waiter. A
    /// message that names a waiter of another client (`ours` says which
    /// are this client's) wakes no single-lock waiter here: the release
    /// chose that one to try (see acquire.lua), and waking one in every
    /// client would have them all try for the one lock.
    fn wake(&self, payload: Option<&str>, all: bool, ours: &str) {
        if let Some(named) = payload.and_then(|owner| self.named().get(owner).cloned()) {
            named.notify_one();
            return;
        }
        if all {
            self.woken_all.fetch_add(1, Ordering::Relaxed);
            self.notify.notify_waiters();
            for named in self.named().values() {
                named.notify_one();
            }
        } else if self.in_turn.load(Ordering::Relaxed) > 0
            && payload.is_none_or(|p| p == ANYONE || p.starts_with(ours))
        {
            // Only while someone is registered to wait in turn: a channel
            // left subscribed after its last waiter (see `LINGER`) keeps no
            // wake-up for the next, whose attempt comes after this release.
            self.notify.notify_one();
        }
        for listener in self.listeners().iter() {
            listener.notify_one();
        }
    }
}

/// A subscribed channel: how many waiters watch it, and since when nobody
/// has (see [`LINGER`]).
#[derive(Debug)]
struct Watched {
    count: usize,
    channel: Arc<Channel>,
    idle_since: Option<Instant>,
}

#[derive(Debug, Default)]
struct Channels {
    /// Subscribed channels.
    watched: Mutex<HashMap<String, Watched>>,
    /// What the owner ids of this client's waiters start with.
    ours: String,
    /// What a channel's name is followed by in its inbox's: `:` and the
    /// client's part of its owner ids.
    inbox: String,
}

impl Channels {
    fn watched(&self) -> std::sync::MutexGuard<'_, HashMap<String, Watched>> {
        // Only counts and handles live here; a panic while locked cannot
        // leave them half-updated.
        self.watched.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn get(&self, name: &str) -> Option<Arc<Channel>> {
        self.watched().get(name).map(|w| w.channel.clone())
    }

    /// The watched channel a message on `name` is for: the channel itself,
    /// or the channel whose inbox it is.
    fn receiving(&self, name: &str) -> Option<Arc<Channel>> {
        self.get(name)
            .or_else(|| self.get(name.strip_suffix(self.inbox.as_str())?))
    }

    /// What to subscribe to (or unsubscribe from) for `names`: each
    /// channel and its inbox.
    fn with_inboxes(&self, names: &[&str]) -> Vec<String> {
        names
            .iter()
            .flat_map(|name| [(*name).to_owned(), format!("{name}{}", self.inbox)])
            .collect()
    }

    fn all(&self) -> Vec<Arc<Channel>> {
        self.watched().values().map(|w| w.channel.clone()).collect()
    }

    /// Forgets the channels nobody watched for [`LINGER`], for the
    /// subscriber task to unsubscribe from before it reads its next
    /// command: a waiter that comes after subscribes anew, after that. Not
    /// one whose SUBSCRIBE the task has still to send.
    fn sweep(&self) -> Vec<String> {
        let mut stale = Vec::new();
        self.watched().retain(|name, w| {
            let idle = w.idle_since.is_some_and(|idle| idle.elapsed() >= LINGER)
                && *w.channel.ready.borrow() != Readiness::Pending;
            if idle {
                stale.push(name.clone());
            }
            !idle
        });
        stale
    }
}

enum Command {
    Subscribe(Arc<Channel>),
    /// The connection to this store dropped: subscribe to everything again
    /// there, then wake all.
    Resubscribe(usize),
}

/// Commands for the subscriber task, until it starts.
pub(crate) struct Pending {
    receiver: mpsc::UnboundedReceiver<Command>,
}

/// The pub/sub side of a client.
#[derive(Debug)]
pub(crate) struct Wakeups {
    channels: Arc<Channels>,
    commands: mpsc::UnboundedSender<Command>,
    /// Enough subscriber connections are up for release messages to
    /// arrive (as far as the subscriber task knows).
    connected: Arc<AtomicBool>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Subscribe(channel) => write!(f, "Subscribe({})", channel.name),
            Command::Resubscribe(node) => write!(f, "Resubscribe({node})"),
        }
    }
}

impl Wakeups {
    /// The message side of a client, before its connections exist: hand
    /// [`push_handler`](Self::push_handler)s to the subscriber connections,
    /// then [`start`](Self::start) the task that owns them.
    ///
    /// `ours` is what the owner ids of the client's waiters start with.
    pub(crate) fn new(ours: String) -> (Wakeups, Pending) {
        let inbox = format!(":{}", ours.strip_suffix(':').unwrap_or(&ours));
        let channels = Arc::new(Channels {
            ours,
            inbox,
            ..Channels::default()
        });
        let (commands, receiver) = mpsc::unbounded_channel();
        let wakeups = Wakeups {
            channels: channels.clone(),
            commands,
            connected: Arc::new(AtomicBool::new(false)),
        };
        (wakeups, Pending { receiver })
    }

    /// What the subscriber connection to store `node` does with each push:
    /// release messages wake waiters; a dropped connection calls
    /// `on_disconnect` (the client has every held lock checked at once: the
    /// server may have restarted without them) and resubscribes.
    pub(crate) fn push_handler(
        &self,
        node: usize,
        on_disconnect: OnDisconnect,
    ) -> impl Fn(PushInfo) -> Result<(), redis::aio::SendError> + Send + Sync + Clone + 'static
    {
        let channels = self.channels.clone();
        let commands = self.commands.clone();
        move |push: PushInfo| {
            if push.kind == PushKind::Disconnection {
                on_disconnect();
            }
            dispatch(&channels, &commands, node, push);
            Ok(())
        }
    }

    /// A call that asks for everything to be subscribed again on store
    /// `node` (its connection moved to another server).
    pub(crate) fn resubscriber(&self, node: usize) -> impl Fn() + Send + Sync + 'static {
        let commands = self.commands.clone();
        move || {
            let _ = commands.send(Command::Resubscribe(node));
        }
    }

    /// Starts the task that owns the subscriber connections, one per store;
    /// a channel counts as subscribed when `needed` of them confirmed it.
    /// Every [`CHECK_EVERY`] it asks each subscriber connection to answer
    /// within `timeout`, and replaces and resubscribes one that does not.
    pub(crate) fn start(
        &self,
        pending: Pending,
        subscribers: Vec<Subscriber>,
        needed: usize,
        timeout: Duration,
        shutdown: CancellationToken,
    ) {
        let live = vec![true; subscribers.len()];
        let stores = Stores {
            subscribers,
            live,
            needed,
            timeout,
        };
        self.connected.store(stores.enough(), Ordering::Relaxed);
        tokio::spawn(subscriber(
            stores,
            pending.receiver,
            self.channels.clone(),
            self.connected.clone(),
            shutdown,
        ));
    }

    /// Whether enough subscriber connections are up for release messages
    /// to arrive. A connection that dropped counts as down until it is
    /// subscribed again.
    pub(crate) fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }

    /// Whether tasks of this process wait for the lock whose key is `lock`,
    /// with release messages arriving. Asked at every acquisition and
    /// release: its channel's name is made only when some lock is watched.
    pub(crate) fn has_live_waiters(&self, lock: &str) -> bool {
        self.live_channel(lock, |count, _| count > 0)
    }

    /// Whether tasks of this process wait for the lock whose key is `lock`
    /// alone and in turn (a release wakes one of them: see [`Wake::One`]),
    /// with release messages arriving: asleep, or making the first attempt
    /// they registered for (see `LockRequest::registers_early`). Waiters
    /// for several locks, readers and fair waiters do not count: each
    /// tries when any release comes.
    pub(crate) fn has_live_waiters_in_turn(&self, lock: &str) -> bool {
        self.live_channel(lock, |_, channel| {
            channel.in_turn.load(Ordering::Relaxed) > 0
        })
    }

    /// Whether the channel of `lock` is watched, subscribed, and `counts`
    /// (given how many waiters watch it, and the channel).
    fn live_channel(&self, lock: &str, counts: impl Fn(usize, &Channel) -> bool) -> bool {
        let watched = self.channels.watched();
        !watched.is_empty()
            && watched.get(keys::channel(lock).as_str()).is_some_and(|w| {
                counts(w.count, &w.channel) && *w.channel.ready.borrow() == Readiness::Subscribed
            })
    }

    /// Whether release messages of `lock` arrive now: its channel is
    /// subscribed (others wait for it, or did a moment ago). A waiter that
    /// registers before its first attempt then needs no second one (see
    /// `LockRequest::registers_early`).
    pub(crate) fn is_subscribed(&self, lock: &str) -> bool {
        self.live_channel(lock, |_, _| true)
    }

    /// Starts watching the release channels of one or more locks; the
    /// subscriptions live as long as the watch (and [`LINGER`] after the
    /// last), and `wake` says which releases wake this waiter.
    pub(crate) fn watch<'a>(&self, names: impl IntoIterator<Item = &'a str>, wake: Wake) -> Watch {
        let mut watched = self.channels.watched();
        // Whether every channel was subscribed already, with how many
        // times each had woken every waiter (see `Watch::undisturbed`).
        let mut joined = Some(Vec::new());
        let channels: Vec<Arc<Channel>> = names
            .into_iter()
            .map(|name| match watched.get_mut(name) {
                Some(w) => {
                    w.count += 1;
                    w.idle_since = None;
                    let subscribed = *w.channel.ready.borrow() == Readiness::Subscribed;
                    let woken_all = w.channel.woken_all.load(Ordering::Relaxed);
                    joined = joined
                        .take()
                        .filter(|_| subscribed)
                        .map(|mut joined: Vec<usize>| {
                            joined.push(woken_all);
                            joined
                        });
                    w.channel.clone()
                }
                None => {
                    let channel = Arc::new(Channel {
                        name: name.to_owned(),
                        notify: Notify::new(),
                        in_turn: AtomicUsize::new(0),
                        listeners: Mutex::new(Vec::new()),
                        named: Mutex::new(HashMap::new()),
                        ready: watch::Sender::new(Readiness::Pending),
                        woken_all: AtomicUsize::new(0),
                    });
                    let w = Watched {
                        count: 1,
                        channel: channel.clone(),
                        idle_since: None,
                    };
                    watched.insert(name.to_owned(), w);
                    joined = None;
                    // Sent while the map is locked: commands keep the map's order.
                    if self
                        .commands
                        .send(Command::Subscribe(channel.clone()))
                        .is_err()
                    {
                        channel.ready.send_replace(Readiness::Failed);
                    }
                    channel
                }
            })
            .collect();
        drop(watched);
        let own = match &wake {
            Wake::One => {
                for channel in &channels {
                    channel.in_turn.fetch_add(1, Ordering::Relaxed);
                }
                None
            }
            Wake::Every => {
                let own = Arc::new(Notify::new());
                for channel in &channels {
                    channel.listeners().push(own.clone());
                }
                Some(own)
            }
            Wake::Named(owner) => {
                let own = Arc::new(Notify::new());
                for channel in &channels {
                    channel.named().insert(owner.clone(), own.clone());
                }
                Some(own)
            }
        };
        Watch {
            channels,
            wake,
            own,
            joined,
            acquired: AtomicBool::new(false),
            shared: self.channels.clone(),
        }
    }
}

/// One waiter's interest in the release channels of the locks it waits for.
pub(crate) struct Watch {
    channels: Vec<Arc<Channel>>,
    wake: Wake,
    /// A notification of its own, unless woken in turn with others.
    own: Option<Arc<Notify>>,
    /// When every channel was subscribed already as the watch began: how
    /// many times each had woken every waiter then.
    joined: Option<Vec<usize>>,
    /// Set when the waiter got its lock; one that gives up instead passes
    /// its turn on.
    acquired: AtomicBool,
    shared: Arc<Channels>,
}

impl Watch {
    /// Waits until every subscription is confirmed; false if one failed.
    pub(crate) async fn subscribed(&self) -> bool {
        for channel in &self.channels {
            let mut ready = channel.ready.subscribe();
            match ready.wait_for(|r| *r != Readiness::Pending).await {
                Ok(r) if *r == Readiness::Subscribed => {}
                _ => return false,
            }
        }
        true
    }

    /// Whether every release since the watch began reached it: its channels
    /// were subscribed already then, and have been since, without a
    /// reconnect (whose wake-up of every waiter leaves nothing for one not
    /// asleep yet). A waiter registered before an attempt may then sleep
    /// after it without trying again.
    pub(crate) fn undisturbed(&self) -> bool {
        self.is_live()
            && self.joined.as_ref().is_some_and(|joined| {
                self.channels
                    .iter()
                    .zip(joined)
                    .all(|(channel, &n)| channel.woken_all.load(Ordering::Relaxed) == n)
            })
    }

    /// Whether release messages are arriving; false means the caller should
    /// not rely on being woken.
    pub(crate) fn is_live(&self) -> bool {
        self.channels
            .iter()
            .all(|channel| *channel.ready.borrow() == Readiness::Subscribed)
    }

    /// Goes on under the owner id `owner`: a fair waiter that gave up its
    /// old id (see `Wait::new_owner`) is woken by releases that name the
    /// new one. Its notification stays the same, so that what registered
    /// for it before still wakes.
    pub(crate) fn rename(&mut self, owner: &Arc<str>) {
        let (Wake::Named(old), Some(own)) = (&self.wake, &self.own) else {
            return;
        };
        for channel in &self.channels {
            let mut named = channel.named();
            named.remove(old);
            named.insert(owner.clone(), own.clone());
        }
        self.wake = Wake::Named(owner.clone());
    }

    /// Records that the waiter got its lock.
    pub(crate) fn acquired(&self) {
        self.acquired.store(true, Ordering::Relaxed);
    }

    /// The notification a release (or a resubscription) sends.
    pub(crate) fn notify(&self) -> &Notify {
        notification(self.own.as_deref(), &self.channels[0])
    }

    /// The same notification as [`notify`](Self::notify), as a handle that
    /// does not borrow the watch: a waiter registers for it before an
    /// attempt and sleeps on it after, while the steps in between change
    /// the waiter that owns the watch.
    pub(crate) fn notifier(&self) -> Notifier {
        Notifier {
            own: self.own.clone(),
            channel: self.channels[0].clone(),
        }
    }
}

/// A handle on a [`Watch`]'s notification (see [`Watch::notifier`]).
pub(crate) struct Notifier {
    own: Option<Arc<Notify>>,
    channel: Arc<Channel>,
}

impl Notifier {
    /// The notification a release (or a resubscription) sends.
    pub(crate) fn notify(&self) -> &Notify {
        notification(self.own.as_deref(), &self.channel)
    }
}

/// A waiter's notification: its own when it has one (it is woken in turn
/// with others), else its first channel's.
fn notification<'a>(own: Option<&'a Notify>, channel: &'a Channel) -> &'a Notify {
    own.unwrap_or(&channel.notify)
}

impl Drop for Watch {
    fn drop(&mut self) {
        for channel in &self.channels {
            match &self.wake {
                Wake::One => {
                    channel.in_turn.fetch_sub(1, Ordering::Relaxed);
                }
                Wake::Every => channel
                    .listeners()
                    .retain(|l| !self.own.as_ref().is_some_and(|own| Arc::ptr_eq(l, own))),
                Wake::Named(owner) => {
                    channel.named().remove(owner);
                }
            }
        }
        let gave_up = !self.acquired.load(Ordering::Relaxed);
        let mut watched = self.shared.watched();
        for channel in &self.channels {
            if let Some(w) = watched.get_mut(&channel.name) {
                // A waiter that leaves without the lock may have been the one
                // a release woke, or may hold up one queued behind it: let
                // the next one look.
                if gave_up && w.count > 1 && matches!(self.wake, Wake::One) {
                    channel.notify.notify_one();
                }
                w.count -= 1;
                if w.count == 0 {
                    // Unsubscribed by the subscriber task after `LINGER`,
                    // unless a waiter comes first.
                    w.idle_since = Some(Instant::now());
                }
            }
        }
    }
}

impl Wakeups {
    /// Routes a release message on `channel` as if it had come from Redis.
    #[cfg(test)]
    pub(crate) fn deliver(&self, channel: &str, payload: &str) {
        let push = PushInfo {
            kind: PushKind::Message,
            data: vec![
                Value::BulkString(channel.as_bytes().to_vec()),
                Value::BulkString(payload.as_bytes().to_vec()),
            ],
        };
        dispatch(&self.channels, &self.commands, 0, push);
    }
}

/// Routes a push from the subscriber connection.
fn dispatch(
    channels: &Channels,
    commands: &mpsc::UnboundedSender<Command>,
    node: usize,
    push: PushInfo,
) {
    match push.kind {
        PushKind::Message | PushKind::SMessage => {
            if let Some(Value::BulkString(name)) = push.data.first()
                && let Some(channel) = std::str::from_utf8(name)
                    .ok()
                    .and_then(|name| channels.receiving(name))
            {
                let payload = match push.data.get(1) {
                    Some(Value::BulkString(payload)) => std::str::from_utf8(payload).ok(),
                    _ => None,
                };
                tracing::trace!(channel = %channel.name, ?payload, "release message");
                channel.wake(payload, false, &channels.ours);
            }
        }
        PushKind::Disconnection => {
            tracing::debug!(node, "subscriber connection dropped");
            let _ = commands.send(Command::Resubscribe(node));
        }
        _ => {}
    }
}

/// A subscriber connection to one store.
pub(crate) enum Subscriber {
    /// A server, or one Redlock master.
    Manager(Managed),
    /// The master Sentinel reports, followed across failovers.
    Following(Following),
    /// A Cluster: sharded subscriptions, one channel at a time since each
    /// channel lives in its own slot. redis-rs subscribes again by itself
    /// when slots move.
    Cluster(ClusterConnection),
    /// The in-process store's subscriber.
    #[cfg(feature = "memory")]
    Memory(MemorySubscriber),
}

impl Subscriber {
    async fn subscribe(&mut self, names: &[String]) -> redis::RedisResult<()> {
        match self {
            Subscriber::Manager(conn) => conn.manager().subscribe(names).await,
            Subscriber::Following(conn) => conn.manager().subscribe(names).await,
            Subscriber::Cluster(conn) => {
                for name in names {
                    conn.ssubscribe(name).await?;
                }
                Ok(())
            }
            #[cfg(feature = "memory")]
            Subscriber::Memory(subscriber) => {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                subscriber.subscribe(&names)
            }
        }
    }

    async fn unsubscribe(&mut self, name: &str) -> redis::RedisResult<()> {
        match self {
            Subscriber::Manager(conn) => conn.manager().unsubscribe(name).await,
            Subscriber::Following(conn) => conn.manager().unsubscribe(name).await,
            Subscriber::Cluster(conn) => conn.sunsubscribe(name).await,
            #[cfg(feature = "memory")]
            Subscriber::Memory(subscriber) => subscriber.unsubscribe(name),
        }
    }

    /// Whether the connection still answers within `timeout`. Nothing else
    /// is sent on a subscriber connection between subscriptions, so without
    /// asking, one whose packets vanish (a partition, a moved address)
    /// would go unnoticed while release messages stop.
    async fn answers(&mut self, timeout: Duration) -> bool {
        let mut conn = match self {
            Subscriber::Manager(conn) => conn.manager(),
            Subscriber::Following(conn) => conn.manager(),
            // redis-rs checks a Cluster's connections itself; the
            // in-process store cannot stop answering.
            Subscriber::Cluster(_) => return true,
            #[cfg(feature = "memory")]
            Subscriber::Memory(_) => return true,
        };
        let ping = redis::cmd("PING");
        let answer = tokio::time::timeout(timeout, ping.query_async::<Value>(&mut conn));
        matches!(answer.await, Ok(Ok(_)))
    }

    /// Replaces a connection that stopped answering with a fresh one; false
    /// when it cannot be (redis-rs keeps a Cluster's connections itself).
    async fn replace(&mut self) -> bool {
        match self {
            Subscriber::Manager(conn) => conn.reconnect(),
            Subscriber::Following(conn) => conn.reconnect().await,
            Subscriber::Cluster(_) => return false,
            #[cfg(feature = "memory")]
            Subscriber::Memory(_) => return false,
        }
        true
    }

    /// Before subscribing again: find the master anew if it may have
    /// moved, and check that it answers. Finding it also moves the
    /// client's command connections there before their next command.
    async fn reconnect(&mut self) -> redis::RedisResult<()> {
        if let Subscriber::Following(conn) = self {
            conn.refresh(&conn.address()).await;
            redis::cmd("PING")
                .query_async::<()>(&mut conn.manager())
                .await?;
        }
        Ok(())
    }
}

/// The subscriber connections and which of them are known to be subscribed.
struct Stores {
    subscribers: Vec<Subscriber>,
    /// Subscribed to every watched channel (as far as we know).
    live: Vec<bool>,
    /// How many live stores a channel needs to count as subscribed.
    needed: usize,
    /// How long a connection may take to answer a check.
    timeout: Duration,
}

impl Stores {
    /// Asks every live connection to answer; one that does not is
    /// replaced and counts as dropped. True if any was.
    async fn check(&mut self) -> bool {
        let mut dropped = false;
        for (node, (subscriber, live)) in self
            .subscribers
            .iter_mut()
            .zip(self.live.iter_mut())
            .enumerate()
        {
            if *live && !subscriber.answers(self.timeout).await {
                tracing::warn!(
                    node,
                    "subscriber connection stopped answering; reconnecting"
                );
                subscriber.replace().await;
                *live = false;
                dropped = true;
            }
        }
        dropped
    }

    /// Unsubscribes from `name` on every store whose subscriptions are up.
    async fn unsubscribe(&mut self, name: &str) {
        for (subscriber, live) in self.subscribers.iter_mut().zip(&self.live) {
            if *live && let Err(err) = subscriber.unsubscribe(name).await {
                tracing::debug!(error = %Chain(&err), channel = %name, "unsubscribe failed");
            }
        }
    }

    fn enough(&self) -> bool {
        self.live.iter().filter(|live| **live).count() >= self.needed
    }

    /// Subscribes the live stores to `names`: whether enough confirmed,
    /// and whether a store's connection was replaced. A store that fails
    /// waits for `resubscribe`, which subscribes it to every channel; one
    /// whose connection went dead (no answer, or dropped) gets a fresh one
    /// first: a connection whose packets vanish may fail a subscription
    /// before any check asks it to answer, and checks ask only live stores.
    async fn subscribe(&mut self, names: &[String]) -> (bool, bool) {
        let mut replaced = false;
        for (subscriber, live) in self.subscribers.iter_mut().zip(self.live.iter_mut()) {
            if *live && let Err(err) = subscriber.subscribe(names).await {
                tracing::warn!(error = %Chain(&err), "subscribing to release channels failed");
                if not_reached(&err) {
                    replaced |= subscriber.replace().await;
                }
                *live = false;
            }
        }
        (self.enough(), replaced)
    }
}

/// The task that owns the subscriber connections.
async fn subscriber(
    mut stores: Stores,
    mut commands: mpsc::UnboundedReceiver<Command>,
    channels: Arc<Channels>,
    connected: Arc<AtomicBool>,
    shutdown: CancellationToken,
) {
    let mut batch = Vec::new();
    let mut delay = RESUBSCRIBE_FIRST;
    let mut check = tokio::time::interval(CHECK_EVERY);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    check.reset();
    let mut sweep = tokio::time::interval(LINGER / 2);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    sweep.reset();
    // When stores that lost their subscriptions are retried: set once per
    // `delay`, so that the other arms (commands, checks, sweeps) running
    // meanwhile do not put the retry off.
    let mut retry_at: Option<tokio::time::Instant> = None;
    loop {
        connected.store(stores.enough(), Ordering::Relaxed);
        // Stores that lost their subscriptions are retried on a timer,
        // between commands, so one store that stays down holds up no other.
        let retry = stores.live.iter().any(|live| !live);
        let retry_when = if retry {
            *retry_at.get_or_insert_with(|| tokio::time::Instant::now() + delay)
        } else {
            retry_at = None;
            tokio::time::Instant::now()
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            received = commands.recv_many(&mut batch, 256) => {
                if received == 0 {
                    return;
                }
            }
            _ = check.tick() => {
                if stores.check().await {
                    delay = RESUBSCRIBE_FIRST;
                    retry_at = None;
                    after_loss(&mut stores, &channels).await;
                }
                continue;
            }
            _ = sweep.tick() => {
                for name in channels.sweep() {
                    for name in channels.with_inboxes(&[&name]) {
                        stores.unsubscribe(&name).await;
                    }
                }
                continue;
            }
            _ = tokio::time::sleep_until(retry_when), if retry => {
                if resubscribe(&mut stores, &channels).await {
                    delay = RESUBSCRIBE_FIRST;
                } else {
                    delay = (delay * 2).min(Duration::from_secs(1));
                }
                retry_at = None;
                continue;
            }
        }
        let mut pending = std::mem::take(&mut batch).into_iter().peekable();
        while let Some(command) = pending.next() {
            match command {
                Command::Subscribe(first) => {
                    // Consecutive subscriptions go out as one SUBSCRIBE.
                    let mut group = vec![first];
                    while let Some(Command::Subscribe(_)) = pending.peek() {
                        if let Some(Command::Subscribe(next)) = pending.next() {
                            group.push(next);
                        }
                    }
                    let names: Vec<&str> = group.iter().map(|c| c.name.as_str()).collect();
                    let (enough, replaced) = stores.subscribe(&channels.with_inboxes(&names)).await;
                    if replaced {
                        // A replaced connection lost every subscription it
                        // carried: with too few stores left, every waiter
                        // looks again on its own until `resubscribe` is
                        // done, as after a dropped connection.
                        unless_enough(&stores, &channels);
                        delay = RESUBSCRIBE_FIRST;
                        retry_at = None;
                    }
                    let readiness = if enough {
                        Readiness::Subscribed
                    } else {
                        Readiness::Failed
                    };
                    for channel in group {
                        channel.ready.send_replace(readiness);
                    }
                }
                Command::Resubscribe(node) => {
                    if let Some(live) = stores.live.get_mut(node) {
                        *live = false;
                    }
                    delay = RESUBSCRIBE_FIRST;
                    retry_at = None;
                    after_loss(&mut stores, &channels).await;
                }
            }
        }
    }
}

/// With too few stores subscribed, every watched channel reads as failed:
/// its waiters look again on their own until [`resubscribe`] is done.
fn unless_enough(stores: &Stores, channels: &Channels) {
    if !stores.enough() {
        for channel in channels.all() {
            channel.ready.send_replace(Readiness::Failed);
        }
    }
}

/// Some stores lost their subscriptions (dropped, or not answering): the
/// waiters learn it if too few are left, and the stores are subscribed
/// again at once.
async fn after_loss(stores: &mut Stores, channels: &Channels) {
    unless_enough(stores, channels);
    resubscribe(stores, channels).await;
}

/// How long a channel nobody watches any more stays subscribed.
pub(crate) const LINGER: Duration = Duration::from_secs(2);

/// How often the subscriber connections are asked to answer.
pub(crate) const CHECK_EVERY: Duration = Duration::from_secs(5);

/// First pause before subscribing again on a store that dropped; it
/// doubles up to 1 s.
const RESUBSCRIBE_FIRST: Duration = Duration::from_millis(20);

/// Subscribes every store that lost its subscriptions to every watched
/// channel again, then wakes every waiter to look at its lock again, since
/// a release may have been missed meanwhile. True when none is left out.
async fn resubscribe(stores: &mut Stores, channels: &Channels) -> bool {
    let all = channels.all();
    let names: Vec<&str> = all.iter().map(|c| c.name.as_str()).collect();
    let names = channels.with_inboxes(&names);
    let mut back = false;
    for (node, (subscriber, live)) in stores
        .subscribers
        .iter_mut()
        .zip(stores.live.iter_mut())
        .enumerate()
    {
        if *live {
            continue;
        }
        let outcome = match subscriber.reconnect().await {
            Ok(()) if names.is_empty() => Ok(()),
            Ok(()) => subscriber.subscribe(&names).await,
            Err(err) => Err(err),
        };
        match outcome {
            Ok(()) => {
                *live = true;
                back = true;
                tracing::debug!(node, channels = all.len(), "resubscribed after reconnect");
            }
            Err(err) => {
                tracing::debug!(node, error = %Chain(&err), "resubscribe failed; retrying");
                // The next try goes on a fresh connection if this one went
                // dead meanwhile (see `Stores::subscribe`).
                if not_reached(&err) {
                    subscriber.replace().await;
                }
            }
        }
    }
    if back && stores.enough() {
        for channel in &all {
            channel.ready.send_replace(Readiness::Subscribed);
            channel.wake(None, true, "");
        }
    }
    stores.live.iter().all(|live| *live)
}

#[cfg(test)]
mod tests {
    use std::pin::pin;

    use futures_util::FutureExt;

    use super::{Readiness, Wake, Wakeups};

    const CHANNEL: &str = "lock:{x}:released";

    #[tokio::test]
    async fn a_message_naming_a_waiter_of_another_client_wakes_none_here() {
        let (wakeups, _pending) = Wakeups::new("app@host:1/ours:".to_owned());
        let watch = wakeups.watch([CHANNEL], Wake::One);
        let notifier = watch.notifier();
        let mut woken = pin!(notifier.notify().notified());
        woken.as_mut().enable();

        // The release chose a waiter of another client to try.
        wakeups.deliver(CHANNEL, "app@host:1/theirs:7");
        assert!(woken.as_mut().now_or_never().is_none(), "woken for another");
        // One of ours, or nobody in particular: one of ours tries.
        wakeups.deliver(CHANNEL, "app@host:1/ours:3");
        assert!(woken.as_mut().now_or_never().is_some(), "named ours");
        // Named ours on this client's inbox for the lock (see line.lua).
        let mut woken = pin!(notifier.notify().notified());
        woken.as_mut().enable();
        let inbox = format!("{CHANNEL}:app@host:1/ours");
        assert_eq!(wakeups.channels.with_inboxes(&[CHANNEL]), [CHANNEL, &inbox]);
        wakeups.deliver(&inbox, "app@host:1/ours:4");
        assert!(woken.as_mut().now_or_never().is_some(), "on its inbox");
        let mut woken = pin!(notifier.notify().notified());
        woken.as_mut().enable();
        wakeups.deliver(CHANNEL, "released");
        assert!(woken.as_mut().now_or_never().is_some(), "anyone");
    }

    #[tokio::test]
    async fn a_waiter_registered_early_knows_when_a_release_may_have_gone_by() {
        let (wakeups, _pending) = Wakeups::new("app@host:1/ours:".to_owned());
        // Joined while the subscription is still on its way: a release
        // may come before it is in place.
        let first = wakeups.watch([CHANNEL], Wake::One);
        assert!(!first.undisturbed());
        let channel = wakeups.channels.get(CHANNEL).unwrap();
        channel.ready.send_replace(Readiness::Subscribed);
        assert!(!first.undisturbed(), "joined before it was subscribed");
        let second = wakeups.watch([CHANNEL], Wake::One);
        assert!(second.undisturbed());
        // The subscriptions came back after a loss: every waiter asleep is
        // woken, and one not asleep yet must look for itself.
        channel.wake(None, true, "");
        assert!(!second.undisturbed());
        assert!(wakeups.watch([CHANNEL], Wake::One).undisturbed());
        channel.ready.send_replace(Readiness::Failed);
        assert!(!wakeups.watch([CHANNEL], Wake::One).undisturbed());
    }

    #[tokio::test]
    async fn a_channel_nobody_watches_keeps_no_wake_up_for_the_next() {
        let (wakeups, _pending) = Wakeups::new("app@host:1/ours:".to_owned());
        drop(wakeups.watch([CHANNEL], Wake::One));
        // Still subscribed (see LINGER), with nobody to wake.
        wakeups.deliver(CHANNEL, "released");
        let watch = wakeups.watch([CHANNEL], Wake::One);
        let notifier = watch.notifier();
        let mut woken = pin!(notifier.notify().notified());
        woken.as_mut().enable();
        assert!(woken.as_mut().now_or_never().is_none());
    }
}
