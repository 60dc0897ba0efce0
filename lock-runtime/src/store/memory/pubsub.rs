//! Pub/sub: who listens to which channel, and delivery outside every lock.
//!
//! A PUBLISH (from a script or a command) looks up the channel's subscribers
//! and queues one message for each, in the order the store ran the commands;
//! once the command has let go of the store, the queue is drained by calling
//! each subscriber's callback. One thread drains at a time, so every
//! subscriber sees messages in publication order, and a callback may itself
//! send commands (its messages are delivered after it returns).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use redis::{PushInfo, PushKind, Value};

use super::lock;

/// A subscriber's callback.
type Sink = dyn Fn(PushInfo) + Send + Sync;

/// Channels and the callbacks subscribed to them.
#[derive(Default)]
struct Registry {
    /// SUBSCRIBE-style channels: PUBLISH delivers to these.
    channels: HashMap<Vec<u8>, BTreeMap<u64, Arc<Sink>>>,
    /// SSUBSCRIBE-style shard channels: SPUBLISH delivers to these.
    shard_channels: HashMap<Vec<u8>, BTreeMap<u64, Arc<Sink>>>,
    /// Every subscriber, so that a disconnection reaches those with no channel.
    subscribers: BTreeMap<u64, Arc<Sink>>,
}

impl Registry {
    fn namespace(&mut self, shard: bool) -> &mut HashMap<Vec<u8>, BTreeMap<u64, Arc<Sink>>> {
        if shard {
            &mut self.shard_channels
        } else {
            &mut self.channels
        }
    }
}

#[derive(Default)]
struct Outbox {
    queue: VecDeque<(Arc<Sink>, PushInfo)>,
    /// Whether some thread is draining the queue.
    delivering: bool,
}

/// The pub/sub side of one [`super::MemoryServer`].
#[derive(Default)]
pub(crate) struct PubSub {
    registry: Mutex<Registry>,
    outbox: Mutex<Outbox>,
    next_id: AtomicU64,
}

impl fmt::Debug for PubSub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let registry = lock(&self.registry);
        f.debug_struct("PubSub")
            .field("channels", &registry.channels.len())
            .field("shard_channels", &registry.shard_channels.len())
            .field("subscribers", &registry.subscribers.len())
            .finish()
    }
}

impl PubSub {
    fn registry(&self) -> MutexGuard<'_, Registry> {
        lock(&self.registry)
    }

    /// Queues `payload` for every subscriber of `channel` (of a shard channel
    /// when `shard`); how many there are. Call [`PubSub::deliver`] after
    /// letting go of the store.
    pub(crate) fn publish(&self, channel: &[u8], payload: &[u8], shard: bool) -> usize {
        let sinks: Vec<Arc<Sink>> = match self.registry().namespace(shard).get(channel) {
            Some(subscribers) => subscribers.values().cloned().collect(),
            None => return 0,
        };
        let kind = if shard {
            PushKind::SMessage
        } else {
            PushKind::Message
        };
        let mut outbox = lock(&self.outbox);
        for sink in &sinks {
            outbox.queue.push_back((
                sink.clone(),
                PushInfo {
                    kind: kind.clone(),
                    data: vec![
                        Value::BulkString(channel.to_vec()),
                        Value::BulkString(payload.to_vec()),
                    ],
                },
            ));
        }
        sinks.len()
    }

    /// Calls the callbacks of every queued message, unless another thread is
    /// already at it (it then delivers these too).
    pub(crate) fn deliver(&self) {
        {
            let mut outbox = lock(&self.outbox);
            if outbox.delivering || outbox.queue.is_empty() {
                return;
            }
            outbox.delivering = true;
        }
        loop {
            let batch = {
                let mut outbox = lock(&self.outbox);
                if outbox.queue.is_empty() {
                    outbox.delivering = false;
                    return;
                }
                std::mem::take(&mut outbox.queue)
            };
            for (sink, push) in batch {
                sink(push);
            }
        }
    }

    /// The channels (shard channels when `shard`) with at least one
    /// subscriber, for PUBSUB CHANNELS.
    pub(crate) fn channels(&self, shard: bool) -> Vec<Vec<u8>> {
        let mut channels: Vec<Vec<u8>> = self.registry().namespace(shard).keys().cloned().collect();
        channels.sort();
        channels
    }

    /// How many subscribe to `channel`, for PUBSUB NUMSUB.
    pub(crate) fn subscribers(&self, channel: &[u8], shard: bool) -> usize {
        self.registry()
            .namespace(shard)
            .get(channel)
            .map_or(0, BTreeMap::len)
    }

    /// Drops every subscription and tells every subscriber it was
    /// disconnected, as a restarting server would.
    pub(crate) fn disconnect_all(&self) {
        let sinks: Vec<Arc<Sink>> = {
            let mut registry = self.registry();
            registry.channels.clear();
            registry.shard_channels.clear();
            registry.subscribers.values().cloned().collect()
        };
        {
            let mut outbox = lock(&self.outbox);
            for sink in sinks {
                outbox.queue.push_back((
                    sink,
                    PushInfo {
                        kind: PushKind::Disconnection,
                        data: vec![],
                    },
                ));
            }
        }
        self.deliver();
    }
}

/// One subscriber of a [`super::MemoryServer`], like a RESP3 connection in
/// subscribed mode: every message published on a channel it subscribes to
/// reaches its callback as
/// `PushInfo { kind: PushKind::Message, data: [BulkString(channel), BulkString(payload)] }`,
/// the shape redis-rs gives RESP3 pushes (`PushKind::SMessage` for SPUBLISH
/// to a shard channel it subscribes to with [`MemorySubscriber::ssubscribe`]).
///
/// Subscribing and unsubscribing send no confirmation pushes: they take effect
/// when the call returns, so a message published afterwards is delivered.
/// Dropping the subscriber unsubscribes it from everything.
pub(crate) struct MemorySubscriber {
    pubsub: Arc<PubSub>,
    id: u64,
    sink: Arc<Sink>,
}

impl fmt::Debug for MemorySubscriber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemorySubscriber")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl MemorySubscriber {
    pub(super) fn new(
        pubsub: Arc<PubSub>,
        on_push: impl Fn(PushInfo) + Send + Sync + 'static,
    ) -> MemorySubscriber {
        let id = pubsub.next_id.fetch_add(1, Ordering::Relaxed);
        let sink: Arc<Sink> = Arc::new(on_push);
        pubsub.registry().subscribers.insert(id, sink.clone());
        MemorySubscriber { pubsub, id, sink }
    }

    fn add(&self, channels: &[&str], shard: bool) {
        let mut registry = self.pubsub.registry();
        for channel in channels {
            registry
                .namespace(shard)
                .entry(channel.as_bytes().to_vec())
                .or_default()
                .insert(self.id, self.sink.clone());
        }
    }

    fn remove(&self, channel: &str, shard: bool) {
        let mut registry = self.pubsub.registry();
        let namespace = registry.namespace(shard);
        if let Some(subscribers) = namespace.get_mut(channel.as_bytes()) {
            subscribers.remove(&self.id);
            if subscribers.is_empty() {
                namespace.remove(channel.as_bytes());
            }
        }
    }

    /// SUBSCRIBE: from now on, PUBLISH to any of `channels` reaches this
    /// subscriber (once, however often it subscribes).
    pub(crate) fn subscribe(&self, channels: &[&str]) -> redis::RedisResult<()> {
        self.add(channels, false);
        Ok(())
    }

    /// UNSUBSCRIBE from one channel (nothing happens if not subscribed).
    pub(crate) fn unsubscribe(&self, channel: &str) -> redis::RedisResult<()> {
        self.remove(channel, false);
        Ok(())
    }

    /// SSUBSCRIBE: from now on, SPUBLISH to any of `channels` reaches this
    /// subscriber, as `PushKind::SMessage`.
    #[cfg(test)]
    pub(crate) fn ssubscribe(&self, channels: &[&str]) -> redis::RedisResult<()> {
        self.add(channels, true);
        Ok(())
    }
}

impl Drop for MemorySubscriber {
    fn drop(&mut self) {
        let mut registry = self.pubsub.registry();
        registry.subscribers.remove(&self.id);
        for shard in [false, true] {
            registry.namespace(shard).retain(|_, subscribers| {
                subscribers.remove(&self.id);
                !subscribers.is_empty()
            });
        }
    }
}
