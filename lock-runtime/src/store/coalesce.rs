//! Calls of one client that are ready at the same moment go to Redis as one
//! script call.
//!
//! Redis runs scripts on one thread, and most of what a lock script costs
//! it is per call, not per lock: parsing the command, looking the script
//! up, entering Lua, building and writing the reply. So acquisitions and
//! releases of one client are coalesced, per script and (on a Cluster) per
//! hash slot, as the watchdog does for renewals: while one call of a
//! *lane* is on its way, the calls that become ready wait, and go together
//! (`batch.lua` runs each as it would run alone; see "Who sends" for when).
//! There is no timer: a call that finds its lane idle goes at once, alone,
//! as it would without coalescing, so a lone caller is never slowed; the
//! batches grow with the load, by themselves.
//!
//! Who sends. A call that finds its lane idle enough (nothing waiting,
//! fewer than [`IN_FLIGHT`] calls gone alone or in batches on their way)
//! goes alone, sent from its caller's own future, and its reply comes
//! straight back to it: a lone call costs no task switch, no channel and
//! nothing shared. Calls that find the lane busy wait for the lane's
//! *sender*, a task that runs while calls wait and hands each caller its
//! reply, whatever the callers' futures do. It sends what waits as one
//! batch when it starts, and again whenever it finds calls waiting and
//! fewer than [`IN_FLIGHT`] batches of its own on their way; it looks
//! again each time one of them is back. (A call that comes while the
//! sender waits for a batch waits for that batch.) The sender never waits
//! for a call gone alone, which only its caller's future drives: so a
//! caller whose future is polled once and then kept without being polled
//! (a `buffer_unordered` under back-pressure, a `select!` branch no longer
//! polled) holds up no other call; its own reply waits for it, and a grant
//! in it stays its own. Until it is polled again or dropped, its call
//! counts as on its way, and the lane's calls go through the sender.
//!
//! Cancellation. A caller dropped while its call waits takes it out (its
//! call is never sent). Releases too: a release whose caller gave up (its
//! command timeout ran out) was reported as failed, and the lock is left to
//! its lease; sent later, it could give back a level that the same owner
//! (a scope's owner id) has taken anew since. A caller dropped once its
//! call is on its way cannot stop it: the call still runs, its reply is
//! handed to the callers still there, and an acquisition granted to a
//! caller that is gone is given back at once (its `undo` call), instead of
//! staying taken until its lease runs out. A caller dropped midway through
//! a call it sent alone leaves the rest of it to a task (see [`Alone`]);
//! the sender's batches are in a task from the start.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::{FromRedisValue, RedisError, Value};
use tokio::sync::oneshot;

use crate::base::detached::poll_in_place;
use crate::base::error::LockError;
use crate::base::keys::slot;
use crate::store::scripts::{Call, Undo};

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

/// A reply handed to a waiting caller, with the give-back of what it
/// granted: the caller's end uses it if it is dropped with the reply unread.
type Handed = (Reply, Option<Undo>);

/// What sends calls to Redis: runs `calls`, all of one script, as one
/// script call (alone when there is one), within the command timeout.
/// For several calls, the reply is one reply per call (see `batch.lua`).
pub(crate) trait Transport: Clone + Send + Sync + 'static {
    /// The command is made from `calls` before this returns: the future
    /// borrows none of them.
    fn send<'a>(
        &self,
        calls: impl ExactSizeIterator<Item = &'a Call> + Clone,
    ) -> BoxFuture<'static, Reply>;
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

/// One caller's call, waiting for the lane's sender or in a batch on its
/// way.
struct Waiter {
    call: Call,
    /// Gives back what `call` granted, if its caller is gone by the time
    /// the reply comes (an acquisition's; none for a release).
    undo: Option<Undo>,
    reply: oneshot::Sender<Handed>,
}

/// How many calls of one lane may be on their way when another goes alone
/// (calls gone alone and batches together), and how many batches the
/// lane's sender may have on their way at once (its own only: it never
/// waits for a call gone alone, see the module's documentation). So at
/// most twice as many calls of a lane are on their way at once, when calls
/// gone alone are still out as the sender starts. One keeps the batches
/// largest; two let a batch be built, sent and answered while the other is
/// run by Redis: lock-bench's throughput scenario (64 tasks) went from
/// 54 000 to 57 000 pairs/s with two, on the 2-core machine of
/// BENCHMARKS.md (when the bound counted calls gone alone in the sender's
/// too; under that load the sender runs throughout, and calls rarely go
/// alone). Four made the batches smaller and the scenario slower (49 000
/// to 51 000 pairs/s against 55 000 to 56 000 with two, same run): each
/// script call costs Redis more than a call within a batch.
const IN_FLIGHT: u8 = 2;

/// The most calls one script call carries: a batch runs on Redis's one
/// thread, and every other client of that Redis waits for it to end.
const MOST_PER_BATCH: usize = 256;

#[derive(Default)]
struct Queue {
    /// Calls waiting for the sender; while there are any, it runs.
    waiting: Vec<Waiter>,
    /// Calls on their way that went alone.
    alone: u8,
    /// Whether the lane's sender task runs.
    sender: bool,
    /// Batches the sender has on their way.
    batches: u8,
}

impl Queue {
    fn idle(&self) -> bool {
        self.waiting.is_empty() && self.alone == 0 && !self.sender
    }

    /// Whether a call may go alone: nothing waits for the sender (which
    /// would then be overtaken), and fewer than [`IN_FLIGHT`] calls of the
    /// lane are on their way.
    fn may_go_alone(&self) -> bool {
        self.waiting.is_empty() && self.alone + self.batches < IN_FLIGHT
    }
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
        undo: Option<Undo>,
        timeout: Duration,
    ) -> Reply {
        // Decided under the lanes' lock, let go of before anything is
        // awaited.
        let route = {
            let mut lanes = self.lanes();
            let queue = lanes.entry(lane).or_default();
            if queue.may_go_alone() {
                queue.alone += 1;
                Route::Alone(call, undo)
            } else {
                let (reply, replied) = oneshot::channel();
                queue.waiting.push(Waiter { call, undo, reply });
                let new_sender = !std::mem::replace(&mut queue.sender, true);
                Route::Waits(replied, new_sender)
            }
        };
        let (replied, new_sender) = match route {
            // The transport bounds the call by the command timeout.
            Route::Alone(call, undo) => {
                // Counted out from here, even if making the call panics.
                let out = Out {
                    coalescer: self.clone(),
                    lane,
                };
                return Alone {
                    sending: Some(transport.send(std::iter::once(&call))),
                    undo,
                    transport,
                    out: Some(out),
                }
                .await;
            }
            Route::Waits(replied, new_sender) => (replied, new_sender),
        };
        if new_sender {
            // Made here, so that a task dropped before it ran still stops it.
            let sender = Sender {
                coalescer: self.clone(),
                lane,
                stopped: false,
            };
            tokio::spawn(run_sender(sender, transport.clone()));
        }
        let replied = Replied {
            receiver: replied,
            transport,
        };
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
}

/// How a call goes: alone, or waiting for the lane's sender (to be started
/// when `true`) and its reply from this channel.
enum Route {
    Alone(Call, Option<Undo>),
    Waits(oneshot::Receiver<Handed>, bool),
}

/// A waiting caller's end of its reply's channel. Dropped with a reply in
/// it (handed on just as the caller's future was dropped, or as its timeout
/// ran out), it gives back what the reply granted: the sender saw the
/// caller still there, so it did not.
struct Replied<'a, T: Transport> {
    receiver: oneshot::Receiver<Handed>,
    transport: &'a T,
}

impl<T: Transport> Future for Replied<'_, T> {
    type Output = Result<Reply, oneshot::error::RecvError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.receiver)
            .poll(cx)
            .map(|handed| handed.map(|(reply, _undo)| reply))
    }
}

impl<T: Transport> Drop for Replied<'_, T> {
    fn drop(&mut self) {
        // Closed first: a reply is then either here or never sent.
        self.receiver.close();
        if let Ok((Ok(value), Some(undo))) = self.receiver.try_recv()
            && tokio::runtime::Handle::try_current().is_ok()
        {
            give_back(self.transport, &value, &undo);
        }
    }
}

/// A call gone alone, sent from its caller's future: its reply goes
/// straight to the caller, with no channel, task or shared state between
/// them. Dropped before the reply came, it leaves the rest to a task, which
/// gives back what the call granted (its `undo`).
struct Alone<'a, T: Transport> {
    /// The call on its way, until its reply came.
    sending: Option<BoxFuture<'static, Reply>>,
    undo: Option<Undo>,
    transport: &'a T,
    /// The call's place among its lane's calls on their way.
    out: Option<Out>,
}

impl<T: Transport> Future for Alone<'_, T> {
    type Output = Reply;

    /// # Panics
    ///
    /// When polled again after it returned its reply, as any future may.
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Reply> {
        // (A call that panicked is done too: its `Out` goes with it.)
        let polled = poll_in_place(
            &mut self.sending,
            cx,
            "a call gone alone is not polled after its reply",
        );
        if polled.is_ready() {
            self.out = None;
        }
        polled
    }
}

impl<T: Transport> Drop for Alone<'_, T> {
    fn drop(&mut self) {
        let Some(sending) = self.sending.take() else {
            return;
        };
        // Without a runtime nothing can run the rest: it is dropped, and a
        // grant in it is left to its lease.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (undo, out, transport) = (self.undo.take(), self.out.take(), self.transport.clone());
        runtime.spawn(async move {
            let reply = sending.await;
            drop(out);
            if let (Ok(value), Some(undo)) = (reply, undo) {
                give_back(&transport, &value, &undo);
            }
        });
    }
}

/// A call gone alone: while it is on its way, it counts among its lane's
/// calls on their way; dropped, it leaves them.
struct Out {
    coalescer: Arc<Coalescer>,
    lane: Lane,
}

impl Drop for Out {
    fn drop(&mut self) {
        let mut lanes = self.coalescer.lanes();
        let Some(queue) = lanes.get_mut(&self.lane) else {
            return;
        };
        queue.alone = queue.alone.saturating_sub(1);
        if queue.idle() {
            lanes.remove(&self.lane);
        }
    }
}

/// What the sender does next.
enum Next {
    /// Sends these calls as one batch.
    Send(Vec<Waiter>),
    /// Waits for a batch of its own to be back.
    Wait,
    /// Nothing waits and nothing of its own is on its way: it stops.
    Stop,
}

/// The sender of a lane: sends what waits there, batch after batch, until
/// nothing waits and nothing it sent is on its way. It never waits for a
/// call gone alone, which only its caller's future drives: a caller that
/// stops polling holds up no one else.
async fn run_sender<T: Transport>(mut sender: Sender, transport: T) {
    let mut batches = FuturesUnordered::new();
    loop {
        match sender.next(batches.len()) {
            Next::Send(batch) => batches.push(deliver(&transport, batch)),
            Next::Wait => {
                batches.next().await;
            }
            Next::Stop => return,
        }
    }
}

/// The sender's hold on its lane. Dropped before it stopped (its task
/// dropped: the runtime is shutting down), it stops, and the calls that
/// wait are dropped unsent: no one is left to send them.
struct Sender {
    coalescer: Arc<Coalescer>,
    lane: Lane,
    stopped: bool,
}

impl Sender {
    /// What to do next, with `on_their_way` batches of its own on their
    /// way. A batch is the calls waiting whose callers are still there (at
    /// most [`MOST_PER_BATCH`]), when fewer than [`IN_FLIGHT`] batches of
    /// its own are on their way.
    fn next(&mut self, on_their_way: usize) -> Next {
        let mut lanes = self.coalescer.lanes();
        let Some(queue) = lanes.get_mut(&self.lane) else {
            self.stopped = true;
            return Next::Stop;
        };
        queue.batches = u8::try_from(on_their_way).unwrap_or(u8::MAX);
        queue.waiting.retain(|waiter| !waiter.reply.is_closed());
        if queue.waiting.is_empty() {
            if on_their_way > 0 {
                return Next::Wait;
            }
            queue.sender = false;
            self.stopped = true;
            if queue.idle() {
                lanes.remove(&self.lane);
            }
            return Next::Stop;
        }
        if queue.batches >= IN_FLIGHT {
            return Next::Wait;
        }
        queue.batches += 1;
        let most = queue.waiting.len().min(MOST_PER_BATCH);
        Next::Send(queue.waiting.drain(..most).collect())
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        let mut lanes = self.coalescer.lanes();
        let Some(queue) = lanes.get_mut(&self.lane) else {
            return;
        };
        let unsent = std::mem::take(&mut queue.waiting);
        queue.sender = false;
        queue.batches = 0;
        if queue.idle() {
            lanes.remove(&self.lane);
        }
        drop(lanes);
        // Their callers are told so at once (outside the lock).
        drop(unsent);
    }
}

/// Sends `batch` as one call and hands each caller its reply.
async fn deliver<T: Transport>(transport: &T, batch: Vec<Waiter>) {
    let calls = batch.iter().map(|waiter| &waiter.call);
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

/// Hands `reply` to its caller; a grant whose caller is gone is given back
/// (and one whose caller goes before it reads it, by the caller's end:
/// see [`Replied`]).
fn hand<T: Transport>(transport: &T, waiter: Waiter, reply: Reply) {
    if let Err((Ok(value), Some(undo))) = waiter.reply.send((reply, waiter.undo)) {
        give_back(transport, &value, &undo);
    }
}

/// Gives back what `value`, the reply of an acquisition whose caller is
/// gone, granted (if it did), with `undo`, in a task of its own.
fn give_back<T: Transport>(transport: &T, value: &Value, undo: &Undo) {
    let Some(undo) = Vec::<i64>::from_redis_value_ref(value)
        .ok()
        .and_then(|reply| undo.call_for(&reply))
    else {
        return;
    };
    let give_back = transport.send(std::iter::once(&undo));
    tokio::spawn(async move {
        if let Err(failure) = give_back.await {
            tracing::debug!(
                ?failure,
                "giving back a lock granted to a dropped acquisition failed; it expires after its lease"
            );
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::keys::LockKeys;
    use crate::store::scripts::calls;
    use crate::store::scripts::calls::Asker;
    use crate::store::scripts::{Acquire, Giving, Stored};
    use futures_util::FutureExt;
    use std::panic::AssertUnwindSafe;
    use std::sync::atomic::Ordering::SeqCst;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A transport that holds its first `held` calls on their way for
    /// good and answers every other at once: an acquire script with a
    /// grant of one lock (token 5), any other with 1. It keeps the name of
    /// every script it was given.
    #[derive(Clone, Default)]
    struct Granting {
        held: Arc<AtomicUsize>,
        sent: Arc<Mutex<Vec<&'static str>>>,
    }

    impl Transport for Granting {
        fn send<'a>(
            &self,
            calls: impl ExactSizeIterator<Item = &'a Call> + Clone,
        ) -> BoxFuture<'static, Reply> {
            let names: Vec<_> = calls.map(Call::script_name).collect();
            self.sent.lock().unwrap().extend(&names);
            let hold = |n: usize| n.checked_sub(1);
            if self.held.fetch_update(SeqCst, SeqCst, hold).is_ok() {
                return Box::pin(futures_util::future::pending());
            }
            let reply = match names[..] {
                ["acquire.lua"] => Value::Array([1, 5, 1].map(Value::Int).to_vec()),
                _ => Value::Int(1),
            };
            Box::pin(async move { Ok(reply) })
        }
    }

    /// A grant handed to a waiting caller whose future is then dropped
    /// before it read it is given back (by the caller's end of the channel:
    /// the sender saw the caller there).
    #[tokio::test]
    async fn a_grant_handed_to_a_caller_dropped_before_it_read_it_is_given_back() {
        let coalescer = Arc::new(Coalescer::default());
        let transport = Granting {
            held: Arc::new(AtomicUsize::new(IN_FLIGHT.into())),
            ..Granting::default()
        };
        let lock = LockKeys::new("lock:", "a");
        let lease = Duration::from_secs(10);
        let take = calls::acquire(&[lock], Asker::fresh("owner"), lease, Duration::ZERO, true);
        let acquire = Acquire::new(take.clone(), 1, Stored::Hash, Giving::ONE);
        let lane = Lane::of(&take, false);
        let run = || {
            let undo = Some(acquire.undo().clone());
            Box::pin(coalescer.run(&transport, lane, take.clone(), undo, lease))
        };
        // Calls gone alone, held on their way, fill the lane: the next
        // waits for the lane's sender.
        let mut alone: Vec<_> = (0..IN_FLIGHT).map(|_| run()).collect();
        for call in &mut alone {
            assert!(call.now_or_never().is_none());
        }
        let mut waiting = run();
        assert!((&mut waiting).now_or_never().is_none());
        // The sender sends it and hands it its grant ...
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        // ... which its caller never reads.
        drop(waiting);
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        let sent = transport.sent.lock().unwrap().clone();
        let alone = ["acquire.lua"; IN_FLIGHT as usize];
        assert_eq!(sent[..alone.len()], alone);
        assert_eq!(sent[alone.len()..], ["acquire.lua", "release.lua"]);
    }

    /// A transport whose calls panic when polled, counting the polls.
    #[derive(Clone, Default)]
    struct Panicking {
        polls: Arc<AtomicUsize>,
    }

    impl Transport for Panicking {
        fn send<'a>(
            &self,
            _calls: impl ExactSizeIterator<Item = &'a Call> + Clone,
        ) -> BoxFuture<'static, Reply> {
            Box::pin(PanicOnPoll {
                polls: self.polls.clone(),
            })
        }
    }

    /// Panics at every poll (an `async` block would panic at once when
    /// polled again, without counting).
    struct PanicOnPoll {
        polls: Arc<AtomicUsize>,
    }

    impl Future for PanicOnPoll {
        type Output = Reply;

        fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Reply> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            panic!("the transport's own panic")
        }
    }

    #[tokio::test]
    async fn a_call_gone_alone_that_panicked_is_not_run_again_and_leaves_its_lane() {
        let coalescer = Arc::new(Coalescer::default());
        let transport = Panicking::default();
        let call = calls::inspect(&LockKeys::new("lock:", "a"));
        let lane = Lane::of(&call, false);
        let run = coalescer.run(&transport, lane, call, None, Duration::from_secs(1));
        let panicked = futures_util::FutureExt::catch_unwind(AssertUnwindSafe(run)).await;
        assert!(panicked.is_err(), "the panic reaches the caller");
        // A task spawned on drop would run here.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(transport.polls.load(Ordering::SeqCst), 1, "polled once");
        assert!(coalescer.lanes().is_empty(), "the lane is left");
    }
}
