//! Calls of one client that are ready at the same moment go to Redis as one
//! script call.
//!
//! Redis runs scripts on one thread, and most of what a lock script costs
//! it is per call, not per lock: parsing the command, looking the script
//! up, entering Lua, building and writing the reply. So acquisitions and
//! releases of one client are coalesced, per script and (on a Cluster) per
//! hash slot, as the watchdog does for renewals: while one call of a
//! *lane* is on its way, the calls that become ready wait, and go together
//! as soon as it is back (`batch.lua` runs each as it would run alone).
//! There is no timer: a call that finds its lane idle goes at once, alone,
//! as it would without coalescing, so a lone caller is never slowed; the
//! batches grow with the load, by themselves.
//!
//! Cancellation. A caller dropped while its call waits takes it out (its
//! call is never sent). Releases too: a release whose caller gave up (its
//! command timeout ran out) was reported as failed, and the lock is left to
//! its lease; sent later, it could give back a level that the same owner
//! (a scope's owner id) has taken anew since. A caller dropped once its
//! call is on its way cannot stop it: the batch still runs, its
//! reply is handed to the callers still there, and an acquisition granted
//! to a caller that is gone is given back at once (its `undo` call),
//! instead of staying taken until its lease runs out. A caller whose call
//! goes alone sends it itself, without a task of its own (a lone call costs
//! no task switch); if it is dropped midway, the rest goes on in a task
//! (see [`Detached`]). A batch with other callers' calls goes in a task,
//! so that their replies never wait for one caller's future to be polled.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::{RedisError, Value};
use tokio::sync::oneshot;

use crate::base::detached::Detached;
use crate::base::error::LockError;
use crate::base::keys::slot;
use crate::store::scripts::Call;

/// Why a call has no reply.
#[derive(Debug, Clone)]
pub(crate) enum Failure {
    /// Redis's error, or the connection's.
    Redis(RedisError),
    /// No answer within the command timeout.
    TimedOut,
}

impl Failure {
    /// The error for a caller: `name` names its lock, `timeout` is the one
    /// that ran out.
    pub(crate) fn error(self, name: Option<&str>, timeout: Duration) -> LockError {
        match self {
            Failure::Redis(err) => LockError::from_redis(name, err),
            Failure::TimedOut => LockError::CommandTimeout {
                key: name.map(str::to_owned),
                after: timeout,
            },
        }
    }
}

/// A script's reply, or why there is none.
pub(crate) type Reply = Result<Value, Failure>;

/// What sends calls to Redis: runs `calls`, all of one script, as one
/// script call (alone when there is one), within the command timeout.
/// For several calls, the reply is one reply per call (see `batch.lua`).
pub(crate) trait Transport: Clone + Send + Sync + 'static {
    fn send(&self, calls: Vec<Call>) -> BoxFuture<'static, Reply>;
}

/// Calls that go to Redis together: one script, one hash slot (a Cluster
/// call names keys of one slot only; on one server every call is slot 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Lane {
    script: &'static str,
    slot: u16,
}

impl Lane {
    /// The lane of `call`; `cluster`: calls are split by hash slot.
    pub(crate) fn of(call: &Call, cluster: bool) -> Lane {
        let slot = match call.first_key() {
            Some(key) if cluster => slot(key),
            _ => 0,
        };
        Lane {
            script: call.script_name(),
            slot,
        }
    }
}

/// One caller's call, waiting to be sent or on its way.
struct Waiter {
    call: Call,
    /// Gives back what `call` granted, if its caller is gone by the time
    /// the reply comes (an acquisition's; none for a release).
    undo: Option<Call>,
    reply: oneshot::Sender<Reply>,
}

/// How many calls of one lane may be on their way at once. One keeps the
/// batches largest; two let a batch be built, sent and answered while the
/// other is run by Redis: lock-bench's throughput scenario (64 tasks) went
/// from 54 000 to 57 000 pairs/s with two, on the 2-core machine of
/// BENCHMARKS.md.
const IN_FLIGHT: u8 = 2;

/// The most calls one script call carries: a batch runs on Redis's one
/// thread, and every other client of that Redis waits for it to end.
const MOST_PER_BATCH: usize = 256;

#[derive(Default)]
struct Queue {
    waiting: Vec<Waiter>,
    /// Calls of this lane on their way (at most [`IN_FLIGHT`]): when there
    /// are as many as may be, the waiting ones go when one is back.
    sending: u8,
}

/// The lanes of one connection.
#[derive(Default)]
pub(crate) struct Coalescer {
    lanes: Mutex<HashMap<Lane, Queue>>,
}

impl Coalescer {
    fn lanes(&self) -> MutexGuard<'_, HashMap<Lane, Queue>> {
        self.lanes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `call` with the other calls of its lane that are ready, through
    /// `transport`; its own reply, within `timeout` (waiting included).
    pub(crate) async fn run<T: Transport>(
        self: &Arc<Self>,
        transport: &T,
        lane: Lane,
        call: Call,
        undo: Option<Call>,
        timeout: Duration,
    ) -> Reply {
        let (reply, replied) = oneshot::channel();
        let send = {
            let mut lanes = self.lanes();
            let queue = lanes.entry(lane).or_default();
            queue.waiting.push(Waiter { call, undo, reply });
            let send = queue.sending < IN_FLIGHT;
            queue.sending += u8::from(send);
            send
        };
        if send {
            let (coalescer, transport) = (self.clone(), transport.clone());
            Detached::new(async move {
                let Some(batch) = coalescer.take(lane) else {
                    return;
                };
                if batch.len() > 1 {
                    // Other callers' calls: their replies must not wait for
                    // this caller's future to be polled.
                    tokio::spawn(async move {
                        deliver(&transport, batch).await;
                        if coalescer.take_turn(lane) {
                            drain(coalescer, transport, lane).await;
                        }
                    });
                    return;
                }
                deliver(&transport, batch).await;
                // Calls that came while this one was on its way go next,
                // in a task: this caller has its reply.
                if coalescer.take_turn(lane) {
                    tokio::spawn(drain(coalescer, transport, lane));
                }
            })
            .await;
        }
        match tokio::time::timeout(timeout, replied).await {
            Ok(Ok(reply)) => reply,
            // Never sent: the runtime is shutting down.
            Ok(Err(_)) => Err(Failure::Redis(RedisError::from((
                redis::ErrorKind::Io,
                "the call was dropped unsent (runtime shutting down)",
            )))),
            Err(_) => Err(Failure::TimedOut),
        }
    }

    /// The calls waiting in `lane` whose callers are still there, for a
    /// sender to send now (at most [`MOST_PER_BATCH`]); `None` when there
    /// are none, and the sender stops.
    fn take(&self, lane: Lane) -> Option<Vec<Waiter>> {
        let mut lanes = self.lanes();
        let queue = lanes.get_mut(&lane)?;
        queue.waiting.retain(|waiter| !waiter.reply.is_closed());
        if queue.waiting.is_empty() {
            stop_sending(&mut lanes, lane);
            return None;
        }
        let most = queue.waiting.len().min(MOST_PER_BATCH);
        Some(queue.waiting.drain(..most).collect())
    }

    /// After a sender's call came back: whether calls are waiting in `lane`
    /// (and the sender goes on), or the sender stops.
    fn take_turn(&self, lane: Lane) -> bool {
        let mut lanes = self.lanes();
        match lanes.get(&lane) {
            Some(queue) if !queue.waiting.is_empty() => true,
            Some(_) => {
                stop_sending(&mut lanes, lane);
                false
            }
            None => false,
        }
    }
}

/// One sender of `lane` stops; an idle lane is forgotten.
fn stop_sending(lanes: &mut HashMap<Lane, Queue>, lane: Lane) {
    if let Some(queue) = lanes.get_mut(&lane) {
        queue.sending = queue.sending.saturating_sub(1);
        if queue.sending == 0 && queue.waiting.is_empty() {
            lanes.remove(&lane);
        }
    }
}

/// Sends what waits in `lane`, batch after batch, until nothing does.
async fn drain<T: Transport>(coalescer: Arc<Coalescer>, transport: T, lane: Lane) {
    while let Some(batch) = coalescer.take(lane) {
        deliver(&transport, batch).await;
    }
}

/// Sends `batch` as one call and hands each caller its reply.
async fn deliver<T: Transport>(transport: &T, batch: Vec<Waiter>) {
    let calls = batch.iter().map(|waiter| waiter.call.clone()).collect();
    match transport.send(calls).await {
        Ok(value) if batch.len() == 1 => {
            let waiter = batch.into_iter().next().expect("one waiter");
            hand(transport, waiter, Ok(value));
        }
        Ok(Value::Array(values)) if values.len() == batch.len() => {
            for (waiter, value) in batch.into_iter().zip(values) {
                hand(transport, waiter, one_reply(value));
            }
        }
        Ok(other) => {
            let err = RedisError::from((
                redis::ErrorKind::Client,
                "a batch of lock calls got an unexpected reply",
                format!("{other:?}"),
            ));
            for waiter in batch {
                hand(transport, waiter, Err(Failure::Redis(err.clone())));
            }
        }
        Err(failure) => {
            for waiter in batch {
                hand(transport, waiter, Err(failure.clone()));
            }
        }
    }
}

/// One call's reply out of a batch's: an error comes as its message (a
/// string; the coalesced scripts reply with arrays), see `batch.lua`.
fn one_reply(value: Value) -> Reply {
    let message = match value {
        Value::BulkString(message) => message,
        Value::SimpleString(message) => message.into_bytes(),
        other => return Ok(other),
    };
    let line = [b"-".as_slice(), &message, b"\r\n"].concat();
    match redis::parse_redis_value(&line) {
        Ok(Value::ServerError(err)) => Err(Failure::Redis(err.into())),
        _ => Err(Failure::Redis(RedisError::from((
            redis::ErrorKind::Client,
            "a lock script failed",
            String::from_utf8_lossy(&message).into_owned(),
        )))),
    }
}

/// Hands `reply` to its caller; a grant whose caller is gone is given back.
fn hand<T: Transport>(transport: &T, waiter: Waiter, reply: Reply) {
    let Err(Ok(value)) = waiter.reply.send(reply) else {
        return;
    };
    let (Some(undo), true) = (waiter.undo, granted(&value)) else {
        return;
    };
    let give_back = transport.send(vec![undo]);
    tokio::spawn(async move {
        if let Err(failure) = give_back.await {
            tracing::debug!(
                ?failure,
                "giving back a lock granted to a dropped acquisition failed; it expires after its lease"
            );
        }
    });
}

/// Whether an acquire script's reply grants (`{1, ...}`).
fn granted(value: &Value) -> bool {
    matches!(value, Value::Array(items) if matches!(items.first(), Some(Value::Int(1))))
}
