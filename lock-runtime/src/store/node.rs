//! One lock store and the calls run on it, each within a timeout, sent
//! again only when that is safe, and followed by `WAIT` where replicas
//! must confirm it. Acquisitions and releases that are ready at the same
//! moment go as one script call (see [`crate::store::coalesce`]).

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
};
use redis::{Arg, Cmd, ErrorKind, FromRedisValue, RedisError, ServerError, ServerErrorKind, Value};
use tokio_util::sync::CancellationToken;

use crate::base::config::Replicas;
use crate::base::error::{Chain, LockError, is_read_only};
use crate::base::keys::slot;
use crate::store::answers::{AnsweringAgain, Answers};
use crate::store::coalesce::{Coalescer, Failure, Lane, Reply, Transport};
use crate::store::connection::Conn;
use crate::store::scripts::{
    Acquire, Acquired, Call, Form, HandedOn, Library, Quarantine, Released, Runs, Undo, acquired,
    as_script, is_function_call, released, unexpected,
};

/// How soon a store whose calls went unanswered is first asked whether it
/// answers again, while a give-back waits for it (see [`Node::probe`]); the
/// pause doubles from there.
const PROBE_FIRST: Duration = Duration::from_millis(100);

/// The longest pause between two such questions: as often as a waiter
/// tries again while Redis is unreachable.
const PROBE_AT_MOST: Duration = Duration::from_millis(500);

/// One lock store: a server, a Sentinel-followed master, or a whole Cluster
/// (whose connection routes each call to the slot of its keys), with the
/// timeout every call gets.
#[derive(Clone)]
pub(crate) struct Node {
    conn: Conn,
    /// A second connection for calls followed by `WAIT`, which blocks the
    /// connection it runs on until the replicas answer: on the main one it
    /// would hold up every renewal behind it.
    replicated: Conn,
    timeout: Duration,
    quarantine: Quarantine,
    /// Release messages go out with SPUBLISH (a Cluster).
    sharded: bool,
    /// Acquisitions and releases waiting to go together; `None`: every
    /// call goes alone (see [`Node::uncoalesced`]).
    coalescer: Option<Arc<Coalescer>>,
    /// Whether its calls are answered (see [`Node::answering_again`]).
    answers: Arc<Answers>,
    /// What its calls learnt of the servers.
    learnt: Arc<Learnt>,
}

/// What a node's calls learnt of its servers, for the calls after them.
#[derive(Default)]
struct Learnt {
    /// The server refused the library's functions (see [`Form`]): its
    /// calls are EVALSHAs of the scripts from then on.
    functions_refused: AtomicBool,
    /// Cluster nodes an ASK named that redis-rs had no connection to (a
    /// master given no slot yet), and when: not asked again for
    /// [`ASK_AGAIN_AFTER`], since each try makes redis-rs reconnect from
    /// its seed nodes.
    unreachable: std::sync::Mutex<Vec<(String, Instant)>>,
}

/// How long a node an ASK named is not asked again after redis-rs had no
/// connection to it (see [`Learnt::unreachable`]).
const ASK_AGAIN_AFTER: Duration = Duration::from_secs(30);

impl Learnt {
    fn unreachable(&self) -> std::sync::MutexGuard<'_, Vec<(String, Instant)>> {
        // Only pushed to and pruned; a panic cannot leave it torn.
        self.unreachable.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `address` was found unreachable lately.
    fn is_unreachable(&self, address: &str) -> bool {
        let mut unreachable = self.unreachable();
        unreachable.retain(|(_, at)| at.elapsed() < ASK_AGAIN_AFTER);
        unreachable.iter().any(|(known, _)| known == address)
    }

    fn note_unreachable(&self, address: &str) {
        self.unreachable()
            .push((address.to_owned(), Instant::now()));
    }
}

impl Node {
    pub(crate) fn new(
        (conn, replicated): (Conn, Conn),
        timeout: Duration,
        quarantine: Quarantine,
        sharded: bool,
    ) -> Self {
        Node {
            conn,
            replicated,
            timeout,
            quarantine,
            sharded,
            coalescer: Some(Arc::default()),
            answers: Arc::default(),
            learnt: Arc::default(),
        }
    }

    /// How its calls run their scripts: as the library's functions until
    /// the server refuses them.
    fn form(&self) -> Form {
        if self.learnt.functions_refused.load(Ordering::Relaxed) {
            Form::Script
        } else {
            Form::Function
        }
    }

    /// The node with every call sent alone: for Redlock masters. Their
    /// contenders race for every master at once, and coalescing, which
    /// delays a call while another of its lane is on its way, made them
    /// split the masters between them more often: with one master frozen,
    /// waiters were starved past a minute of waiting in the Redlock tests.
    /// Alone, each call reaches each master as soon as it is ready.
    pub(crate) fn uncoalesced(self) -> Node {
        Node {
            coalescer: None,
            ..self
        }
    }

    /// Hears of the times this store answers again after calls to it went
    /// unanswered (timed out, or a connection failed).
    pub(crate) fn answering_again(&self) -> AnsweringAgain {
        self.answers.watch()
    }

    /// Asks the store (`PING`) whether it answers again, in a task of its
    /// own, while calls to it are unanswered and somebody waits to hear of
    /// its next answer ([`answering_again`]: a give-back held up by an
    /// outage, see `Backend::retire`): first after [`PROBE_FIRST`], then
    /// ever less often, down to once every [`PROBE_AT_MOST`], as a waiter
    /// retries. A client that makes no other call would otherwise learn
    /// that the outage is over only from the give-back's next try, after a
    /// pause that grew while the outage lasted, with the lock taken by
    /// nobody meanwhile. One probe runs per store at most; it stops when
    /// `closing` is cancelled (the client stopped).
    ///
    /// [`answering_again`]: Self::answering_again
    pub(crate) fn probe(&self, closing: &CancellationToken) {
        if !self.answers.start_probing() {
            return;
        }
        let (node, closing) = (self.clone(), closing.clone());
        tokio::spawn(async move {
            let mut pause = PROBE_FIRST;
            let asked = async {
                loop {
                    tokio::time::sleep(pause).await;
                    if !node.answers.keep_probing() {
                        return;
                    }
                    // Only an answer counts: a probe that times out tells
                    // nothing the calls' own timeouts did not, and must not
                    // make the connection replace itself again.
                    if node.ping().await.is_ok() {
                        node.answered(&node.conn);
                    }
                    pause = (pause * 2).min(PROBE_AT_MOST);
                }
            };
            tokio::select! {
                () = asked => {}
                // Stopped: the give-backs it was asking for are over.
                () = closing.cancelled() => node.answers.stop_probing(),
            }
        });
    }

    /// The command connection and the timeout each call gets: for the
    /// operator commands of `admin.rs` that are not scripts (SCAN).
    pub(crate) fn parts(&self) -> (&Conn, Duration) {
        (&self.conn, self.timeout)
    }

    /// Runs an acquisition's acquire script. With `replicas`, a grant
    /// counts only once that many replicas have it; otherwise it is given
    /// back and the caller gets [`LockError::NotReplicated`].
    pub(crate) async fn acquire(
        &self,
        name: &str,
        call: &Acquire,
        replicas: Option<Replicas>,
    ) -> Result<Acquired, LockError> {
        let (take, locks) = (call.take(), call.locks());
        let Some(replicas) = replicas else {
            let reply: Vec<i64> = self.coalesced(name, take, Some(call.undo())).await?;
            return acquired(name, locks, &reply);
        };
        let (reply, acked): (Vec<i64>, Acked) =
            self.run_replicated(Some(name), take, replicas).await?;
        let outcome = acquired(name, locks, &reply)?;
        let replication = acked
            .count(Some(name))
            .and_then(|acked| replicated(Some(name), replicas, acked));
        if let Acquired::Held(granted) = &outcome
            && let Err(err) = replication
        {
            let undo = call.undo().call(granted);
            if let Err(undo_err) = self.release(name, &undo, locks).await {
                tracing::debug!(key = %name, error = %Chain(&undo_err), "giving back an unreplicated lock failed; it expires after its lease");
            }
            return Err(err);
        }
        Ok(outcome)
    }

    /// Runs a release call for `locks` locks: one outcome per lock.
    pub(crate) async fn release(
        &self,
        name: &str,
        call: &Call,
        locks: usize,
    ) -> Result<Vec<Released>, LockError> {
        let left: Vec<i64> = self.coalesced(name, call, None).await?;
        if left.len() != locks {
            return Err(unexpected(name, call.script_name(), &left));
        }
        Ok(left.into_iter().map(released).collect())
    }

    /// Runs a handoff call (`handoff.lua`): what the release did, and to
    /// which offer the lock was handed, with which token.
    pub(crate) async fn handoff(&self, name: &str, call: &Call) -> Result<HandedOn, LockError> {
        let reply: Vec<i64> = self.coalesced(name, call, None).await?;
        match reply[..] {
            [left, 0, 0] => Ok(HandedOn {
                released: released(left),
                to: None,
            }),
            [left, fence, chosen] if fence > 0 && chosen > 0 => Ok(HandedOn {
                released: released(left),
                to: Some((chosen as usize - 1, fence as u64)),
            }),
            _ => Err(unexpected(name, call.script_name(), &reply)),
        }
    }

    /// Runs a renewal call within `timeout` (at most the usual one): `true`
    /// for each item still held. With `replicas`, the renewal counts only
    /// once that many replicas have it (an error otherwise).
    pub(crate) async fn renew(
        &self,
        call: &Call,
        timeout: Duration,
        replicas: Option<Replicas>,
    ) -> Result<Vec<bool>, LockError> {
        let renewed: Vec<i64> = match replicas {
            Some(replicas) => {
                let (renewed, acked): (Vec<i64>, Acked) =
                    self.run_replicated(None, call, replicas).await?;
                replicated(None, replicas, acked.count(None)?)?;
                renewed
            }
            None => {
                self.run_on(&self.conn, None, call, timeout.min(self.timeout))
                    .await?
            }
        };
        Ok(renewed.into_iter().map(|r| r == 1).collect())
    }

    /// Runs `call` on the command connection, with the usual timeout;
    /// `name` names the lock in errors.
    pub(crate) async fn run<T: FromRedisValue>(
        &self,
        name: Option<&str>,
        call: &Call,
    ) -> Result<T, LockError> {
        self.run_on(&self.conn, name, call, self.timeout).await
    }

    /// Runs `call` together with the calls of the same script (and slot)
    /// that are ready at the same moment; `undo` gives back what it
    /// granted if the caller is gone when the reply comes.
    async fn coalesced<T: FromRedisValue>(
        &self,
        name: &str,
        call: &Call,
        undo: Option<&Undo>,
    ) -> Result<T, LockError> {
        let Some(coalescer) = &self.coalescer else {
            return self.run(Some(name), call).await;
        };
        let lane = Lane::of(call, self.conn.is_cluster());
        let reply = coalescer
            .run(self, lane, call.clone(), undo.cloned(), self.timeout)
            .await;
        let value = reply.map_err(|failure| failure.error(Some(name), self.timeout))?;
        redis::from_redis_value(value).map_err(|err| LockError::from_redis(Some(name), err.into()))
    }

    /// Whether the store answers its command connection: a `PING` (on a
    /// Cluster, to every master) within the command timeout.
    pub(crate) async fn ping(&self) -> Result<(), LockError> {
        let mut conn = self.conn.clone();
        let ping = redis::cmd("PING");
        match &mut conn {
            Conn::Cluster(cluster) => {
                let everywhere =
                    RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                within(self.timeout, None, cluster.route_command(ping, everywhere))
                    .await
                    .map(drop)
            }
            _ => within(self.timeout, None, ping.query_async::<()>(&mut conn)).await,
        }
    }

    /// `INFO section` of every server behind this node.
    pub(crate) async fn info(&self, section: &str) -> Result<Vec<String>, LockError> {
        let mut conn = self.conn.clone();
        within(self.timeout, None, conn.info(section)).await
    }

    /// Tells `conn` and this store's [`Answers`] whether a call on `conn`
    /// was answered (an error reply is an answer too), so that the
    /// connection can replace itself after repeated timeouts, and work
    /// waiting out an outage goes on when it ends.
    fn noted<T>(&self, conn: &Conn, result: Result<T, LockError>) -> Result<T, LockError> {
        match &result {
            Ok(_) => self.answered(conn),
            Err(err) => self.note(conn, err),
        }
        result
    }

    fn answered(&self, conn: &Conn) {
        conn.answered();
        self.answers.answered();
    }

    /// Tells the connection and this store's [`Answers`] whether a failed
    /// call was answered (see [`noted`](Self::noted)).
    fn note(&self, conn: &Conn, err: &LockError) {
        match err {
            LockError::CommandTimeout { .. } => {
                conn.timed_out();
                self.answers.unanswered();
            }
            LockError::Redis { .. } | LockError::WrongType { .. } => self.answered(conn),
            LockError::Unavailable { .. } => self.answers.unanswered(),
            _ => {}
        }
    }

    async fn run_on<T: FromRedisValue>(
        &self,
        conn: &Conn,
        name: Option<&str>,
        call: &Call,
        timeout: Duration,
    ) -> Result<T, LockError> {
        let cmd = call.command(self.sharded, &self.quarantine, self.form());
        let runs = call.runs(self.sharded);
        let learnt = &self.learnt;
        let invoke = || run_script(conn.clone(), &cmd, runs, &Sending::Alone, learnt);
        self.noted(
            conn,
            within(
                timeout,
                name,
                retried(conn.is_cluster(), call.is_idempotent(), invoke),
            )
            .await,
        )
    }

    /// Runs a script followed by `WAIT` in one pipeline, on the connection
    /// kept for replicated writes: the script's reply and how many
    /// replicas have its writes.
    ///
    /// One pipeline, so that both go out on one connection. `WAIT` counts
    /// the replicas that have the writes of the connection it runs on: sent
    /// after the script on a connection that had been replaced in between,
    /// it would confirm a grant that no replica has. (It also blocks the
    /// connection it runs on until the replicas answer, which is why it
    /// does not run on the main connection, where it would hold up every
    /// renewal behind it.)
    async fn run_replicated<T: FromRedisValue>(
        &self,
        name: Option<&str>,
        call: &Call,
        replicas: Replicas,
    ) -> Result<(T, Acked), LockError> {
        let cmd = call.command(self.sharded, &self.quarantine, self.form());
        let runs = call.runs(self.sharded);
        let sending = Sending::ThenWait(replicas);
        let (conn, learnt) = (&self.replicated, &self.learnt);
        let query = || run_script(conn.clone(), &cmd, runs, &sending, learnt);
        self.noted(
            conn,
            within(
                self.timeout + replicas.timeout,
                name,
                retried(conn.is_cluster(), call.is_idempotent(), query),
            )
            .await,
        )
    }
}

impl Transport for Node {
    fn send<'a>(
        &self,
        mut calls: impl ExactSizeIterator<Item = &'a Call> + Clone,
    ) -> BoxFuture<'static, Reply> {
        let (sharded, quarantine, form) = (self.sharded, &self.quarantine, self.form());
        let (cmd, runs) = match calls.len() {
            1 => {
                let call = calls.clone().next().expect("one call");
                (call.command(sharded, quarantine, form), call.runs(sharded))
            }
            _ => Call::batch(calls.clone(), sharded, quarantine, form).expect("a batch has calls"),
        };
        let idempotent = calls.all(Call::is_idempotent);
        let node = self.clone();
        Box::pin(async move {
            let conn = &node.conn;
            let learnt = &node.learnt;
            let invoke = || run_script::<Value>(conn.clone(), &cmd, runs, &Sending::Alone, learnt);
            let reply = bounded(node.timeout, retried(conn.is_cluster(), idempotent, invoke)).await;
            if let Err(failure) = &reply {
                node.note(conn, &failure.clone().error(None, node.timeout));
            } else {
                node.answered(conn);
            }
            reply
        })
    }
}

/// How a script's command is sent.
enum Sending {
    Alone,
    /// Followed by `WAIT` in one pipeline (see [`Node::run_replicated`]):
    /// the script's reply and how many replicas have its writes.
    ThenWait(Replicas),
}

impl Sending {
    /// Sends `cmd` as this says; on a Cluster, a call the server answers
    /// with ASK (its slot migrating, its keys on the node importing it) is
    /// sent there at once, after `ASKING`. ASK says it did not run, and
    /// redis-rs follows it only with its own retries, which are off (see
    /// [`retried`]). Without this, the renewals and releases of locks
    /// already moved failed until the migration ended: a slot that stays
    /// migrating longer than a lease (a large slot, a throttled or stopped
    /// reshard) lost its locks. (A call whose keys are split between the
    /// two nodes gets TRYAGAIN from either, which `retried` sends again.)
    ///
    /// Not where it would cost more than it saves: to a node redis-rs has
    /// no connection to (a master with no slot yet, which a reshard fills:
    /// redis-rs then reconnects from its seed nodes, so that node is not
    /// asked again for a while, see [`Learnt::unreachable`]), nor when the
    /// node lacks the library (`FUNCTION LOAD` is routed to the slot's
    /// owner, the migrating node). The call then fails with the ASK, as it
    /// did before it was followed. (A missing script is loaded on every
    /// node, and the call sent again.)
    async fn send<T: FromRedisValue>(
        &self,
        conn: &mut Conn,
        cmd: &Cmd,
        learnt: &Learnt,
    ) -> redis::RedisResult<T> {
        let err = match self.send_to(conn, cmd, None).await {
            Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::Ask) => err,
            other => return other,
        };
        let Some((address, node)) = asked_node(&err).filter(|_| conn.is_cluster()) else {
            return Err(err);
        };
        if learnt.is_unreachable(&address) {
            return Err(err);
        }
        match Box::pin(self.send_to(conn, cmd, Some(node))).await {
            Err(asked) if asked.kind() == ErrorKind::ClusterConnectionNotFound => {
                learnt.note_unreachable(&address);
                Err(err)
            }
            // A missing script is loaded on every node (`SCRIPT LOAD`), the
            // asked one too: `run_script` loads it and sends the call again.
            Err(asked)
                if matches!(
                    Recovery::of(&asked, cmd),
                    Some(Recovery::LoadLibrary | Recovery::AsScript)
                ) =>
            {
                Err(err)
            }
            other => other,
        }
    }

    /// Sends `cmd` as this says, to the slot's node, or, `asked`, to that
    /// node of a Cluster after `ASKING` (in one pipeline).
    async fn send_to<T: FromRedisValue>(
        &self,
        conn: &mut Conn,
        cmd: &Cmd,
        asked: Option<SingleNodeRoutingInfo>,
    ) -> redis::RedisResult<T> {
        if let (Sending::Alone, None) = (self, &asked) {
            return cmd.query_async(conn).await;
        }
        let mut pipe = redis::pipe();
        let offset = match asked {
            Some(_) => {
                pipe.cmd("ASKING");
                1
            }
            None => 0,
        };
        pipe.add_command(cmd.clone());
        if let Sending::ThenWait(replicas) = self {
            pipe.cmd("WAIT")
                .arg(replicas.count)
                // At least 1 ms: `WAIT n 0` would wait without end.
                .arg(replicas.timeout.as_millis().max(1) as u64);
        }
        let count = match self {
            Sending::Alone => 1,
            Sending::ThenWait(_) => 2,
        };
        pipe.ignore_errors();
        // Boxed, as every path but the common one above: the future of
        // every call holds what its paths hold, and a large one costs every
        // call (and overflowed a thread's stack in unoptimised builds).
        let replies: Vec<Value> = match (asked, conn) {
            (Some(node), Conn::Cluster(cluster)) => {
                Box::pin(cluster.route_pipeline(pipe, offset, count, node)).await?
            }
            (_, conn) => Box::pin(pipe.query_async(conn)).await?,
        };
        // The script's refusal is the call's error, as when it runs alone.
        // WAIT's own refusal is the caller's to read (see `Acked`): the
        // script ran, and what it granted must not be left taken.
        match (self, replies.first()) {
            (_, Some(Value::ServerError(refused))) => Err(refused.clone().into()),
            (Sending::Alone, Some(reply)) => Ok(T::from_redis_value(reply.clone())?),
            (Sending::ThenWait(_), _) => Ok(T::from_redis_value(Value::Array(replies))?),
            (Sending::Alone, None) => Err(RedisError::from((
                ErrorKind::UnexpectedReturnType,
                "no reply to a call sent after ASKING",
            ))),
        }
    }
}

/// The node an ASK redirect names (`host:port`; the port after the last
/// colon, so that an IPv6 address keeps its own), with its address.
fn asked_node(err: &RedisError) -> Option<(String, SingleNodeRoutingInfo)> {
    let (address, _slot) = err.redirect_node()?;
    let (host, port) = address.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return None;
    }
    let node = SingleNodeRoutingInfo::ByAddress {
        host: host.to_owned(),
        port: port.parse().ok()?,
    };
    Some((address.to_owned(), node))
}

/// What `WAIT` answered after a script: how many replicas have its
/// writes, or WAIT's refusal (an ACL without it, a renamed command).
struct Acked(Result<u32, redis::ServerError>);

impl FromRedisValue for Acked {
    fn from_redis_value(value: Value) -> Result<Self, redis::ParsingError> {
        match value {
            Value::ServerError(refused) => Ok(Acked(Err(refused))),
            other => Ok(Acked(Ok(u32::from_redis_value(other)?))),
        }
    }
}

impl Acked {
    /// The replicas that have the writes, or WAIT's refusal as an error.
    fn count(self, name: Option<&str>) -> Result<u32, LockError> {
        self.0
            .map_err(|refused| LockError::from_redis(name, refused.into()))
    }
}

/// What a refused script command needs before it is sent again.
enum Recovery {
    /// The server does not know the script (restarted, its script cache
    /// flushed): `SCRIPT LOAD` it.
    LoadScript,
    /// The server does not know the library's function (restarted without
    /// it, its functions flushed, a master new to the Cluster): load it.
    LoadLibrary,
    /// The server has no functions (before Redis 7.0) or refuses them (an
    /// ACL, a renamed command): run the script by EVALSHA.
    AsScript,
}

impl Recovery {
    /// What `err`, the reply to `cmd`, asks for, if anything.
    fn of(err: &RedisError, cmd: &Cmd) -> Option<Recovery> {
        if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) {
            return Some(Recovery::LoadScript);
        }
        if !is_function_call(cmd) {
            return None;
        }
        if replied(err, "ERR", "Function not found") {
            return Some(Recovery::LoadLibrary);
        }
        functions_refused(err).then_some(Recovery::AsScript)
    }
}

/// Whether `err` refuses a function command itself: unknown (before Redis
/// 7.0, a renamed command) or not permitted (an ACL: not a key or channel
/// the ACL denies, whose message names no command).
fn functions_refused(err: &RedisError) -> bool {
    replied(err, "ERR", "unknown command")
        || reply_is(err, |reply| {
            reply.code() == "NOPERM"
                && reply.details().is_some_and(|detail| {
                    detail.contains("'fcall'") || detail.contains("'function|load'")
                })
        })
}

/// Whether `err` is the script command's own error reply, with `code` and
/// a text that starts with `text`.
fn replied(err: &RedisError, code: &str, text: &str) -> bool {
    reply_is(err, |reply| {
        reply.code() == code && reply.details().unwrap_or("").starts_with(text)
    })
}

/// Whether `err` holds the script command's own error reply (a pipeline's
/// first command's, not `WAIT`'s), and it is what `is` says.
fn reply_is(err: &RedisError, is: impl Fn(&ServerError) -> bool) -> bool {
    err.clone().into_server_errors().is_some_and(|errors| {
        errors
            .first()
            .is_some_and(|(index, reply)| *index == 0 && is(reply))
    })
}

/// Loads `library` where `call` goes: on a Cluster, the master of its
/// key's slot (sent to every master, redis-rs would keep one master's
/// answer and drop the others'). `REPLACE`: a server that has it already
/// (loaded by another client meanwhile) takes it again, forgetting only
/// what its functions learnt of the server (see `library.lua`).
async fn load_library(conn: &mut Conn, library: &Library, call: &Cmd) -> redis::RedisResult<()> {
    let mut load = redis::cmd("FUNCTION");
    load.arg("LOAD").arg("REPLACE").arg(&library.text);
    // FCALL function numkeys key...: the first key decides the slot.
    if let Conn::Cluster(cluster) = conn
        && let Some(Arg::Simple(key)) = call.args_iter().nth(3)
        && let Ok(key) = std::str::from_utf8(key)
    {
        let master = Route::new(slot(key), SlotAddr::Master);
        let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(master));
        return cluster.route_command(load, route).await.map(drop);
    }
    load.query_async::<Value>(conn).await.map(drop)
}

/// Whether a failed `FUNCTION LOAD` says the server will never run the
/// library: it refuses functions (see [`functions_refused`]), or cannot
/// compile or register it. Anything else (out of memory, a timeout, a
/// master down) may pass.
fn library_refused(err: &RedisError) -> bool {
    functions_refused(err)
        || replied(err, "ERR", "Error compiling")
        || replied(err, "ERR", "Error registering")
}

/// Sends `cmd`, which runs a script (`runs`) by `FCALL` or `EVALSHA`, as
/// `sending` says; each time a reply proves that the command did not run,
/// does what it asks and sends it again:
/// * a server that does not know the script is sent it (`SCRIPT LOAD`);
/// * a server that does not know the library's function is sent the
///   library, once; when that fails, or the function is still missing
///   there (a Cluster slot that moved meanwhile), this call runs by EVALSHA
///   (a server out of memory refuses `FUNCTION LOAD`, not `SCRIPT LOAD`,
///   and must still let locks go), and the next call tries the library
///   again, unless the server will never run it ([`library_refused`]);
/// * a server that refuses functions gets the script by EVALSHA, and so
///   does every later call (`refused`).
async fn run_script<T: FromRedisValue>(
    mut conn: Conn,
    cmd: &Cmd,
    runs: Runs,
    sending: &Sending,
    learnt: &Learnt,
) -> redis::RedisResult<T> {
    let refused = &learnt.functions_refused;
    let mut sent = Cow::Borrowed(cmd);
    let mut loaded = false;
    // At most: the library loaded, the function still missing, the script
    // loaded.
    for _ in 0..3 {
        let err = match sending.send(&mut conn, &sent, learnt).await {
            Err(err) => err,
            done => return done,
        };
        match Recovery::of(&err, &sent) {
            Some(Recovery::LoadScript) => {
                Box::pin(runs.script.load_async(&mut conn)).await?;
            }
            Some(Recovery::LoadLibrary) => {
                let load = if loaded {
                    Ok(())
                } else {
                    Box::pin(load_library(&mut conn, runs.library, &sent)).await
                };
                if let Err(load) = &load
                    && library_refused(load)
                {
                    tracing::debug!(error = %load, "the server refuses the lock library: scripts run by EVALSHA");
                    refused.store(true, Ordering::Relaxed);
                }
                if loaded || load.is_err() {
                    sent = Cow::Owned(as_script(&sent, runs.script));
                }
                loaded = true;
            }
            Some(Recovery::AsScript) => {
                refused.store(true, Ordering::Relaxed);
                sent = Cow::Owned(as_script(&sent, runs.script));
            }
            None => return Err(err),
        }
    }
    sending.send(&mut conn, &sent, learnt).await
}

/// How often a Cluster call refused without running is sent again.
const CLUSTER_RETRIES: u32 = 3;

/// Runs `call`, and on a Cluster sends it again (after a pause that
/// doubles from 20 ms) when the answer proves it did not run: a redirect
/// (MOVED, ASK), a slot or master down or loading, a read-only replica, a
/// refused connection; and, for an `idempotent` call, after any I/O error.
/// redis-rs's own retries are off for the command connection (see
/// `connection::cluster_builder`), because they also resend after an I/O
/// error or a response timeout, when the script may have run already: an
/// acquisition would then count a re-entry twice, a release count down
/// twice and free a lock an outer scope still holds. Those failures go to
/// the caller, as on a single server.
async fn retried<T, F, Fut>(cluster: bool, idempotent: bool, mut call: F) -> redis::RedisResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = redis::RedisResult<T>>,
{
    let mut pause = Duration::from_millis(20);
    let mut left = if cluster { CLUSTER_RETRIES } else { 0 };
    loop {
        match call().await {
            Err(err) if left > 0 && (did_not_run(&err) || idempotent && err.is_io_error()) => {
                left -= 1;
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            other => return other,
        }
    }
}

/// Whether an error proves that the command was not carried out: refused
/// by the server without running (a redirect, a slot or master down or
/// loading, a read-only replica), or never delivered (a refused
/// connection). A connection lost after sending proves nothing: redis-rs
/// reports it as a broken pipe, as it does for one lost before.
fn did_not_run(err: &redis::RedisError) -> bool {
    use ServerErrorKind::*;
    matches!(
        err.kind(),
        ErrorKind::Server(Moved | Ask | TryAgain | ClusterDown | MasterDown | BusyLoading)
            | ErrorKind::ClusterConnectionNotFound
    ) || is_read_only(err)
        || err.is_connection_refusal()
}

/// Whether `acked` replicas are enough for `replicas`.
fn replicated(name: Option<&str>, replicas: Replicas, acked: u32) -> Result<(), LockError> {
    if acked >= replicas.count {
        Ok(())
    } else {
        Err(LockError::NotReplicated {
            key: name.map(str::to_owned),
            wanted: replicas.count,
            acked,
            after: replicas.timeout,
        })
    }
}

/// Bounds a Redis call by `timeout` and sorts its error; `name` names the
/// lock in the error.
pub(crate) async fn within<T>(
    timeout: Duration,
    name: Option<&str>,
    call: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T, LockError> {
    bounded(timeout, call)
        .await
        .map_err(|failure| failure.error(name, timeout))
}

/// Bounds a Redis call by `timeout`.
async fn bounded<T>(
    timeout: Duration,
    call: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T, Failure> {
    match tokio::time::timeout(timeout, call).await {
        // The connection's own response timeout may fire first.
        Ok(Err(err)) if err.is_timeout() => Err(Failure::TimedOut),
        Ok(result) => result.map_err(Failure::Redis),
        Err(_) => Err(Failure::TimedOut),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// How many times `retried` sends a call that fails with `err` every
    /// time.
    async fn sends(cluster: bool, idempotent: bool, err: fn() -> redis::RedisError) -> u32 {
        let sent = AtomicU32::new(0);
        let outcome: redis::RedisResult<()> = retried(cluster, idempotent, || {
            sent.fetch_add(1, Ordering::SeqCst);
            async move { Err(err()) }
        })
        .await;
        assert!(outcome.is_err());
        sent.load(Ordering::SeqCst)
    }

    fn moved() -> redis::RedisError {
        redis::RedisError::from((
            ErrorKind::Server(ServerErrorKind::Moved),
            "moved",
            "3999 127.0.0.1:6381".to_owned(),
        ))
    }

    /// What redis-rs reports for a connection lost with a request on it,
    /// whether or not the request reached the server.
    fn connection_lost() -> redis::RedisError {
        std::io::Error::from(std::io::ErrorKind::BrokenPipe).into()
    }

    #[tokio::test(start_paused = true)]
    async fn a_cluster_call_is_sent_again_only_when_it_surely_did_not_run() {
        // Refused without running: sent again.
        assert_eq!(sends(true, false, moved).await, 1 + CLUSTER_RETRIES);
        // Lost on the way back: an acquisition or a release of one level
        // may have run, and must not run twice.
        assert_eq!(sends(true, false, connection_lost).await, 1);
        // Safe to run twice (a renewal, a release of every level).
        assert_eq!(
            sends(true, true, connection_lost).await,
            1 + CLUSTER_RETRIES
        );
        // One server: the connection manager reconnects; the callers retry.
        assert_eq!(sends(false, true, moved).await, 1);
    }

    /// A script's write refused by a read-only replica before Redis 7.0.
    fn read_only_before_7() -> redis::RedisError {
        let line = "-ERR Error running script (call to f_bd6f3018b28bbdb36260f19d3c44afed740db987): \
                    @user_script:1: @user_script: 1: -READONLY You can't write against a read \
                    only replica.\r\n";
        match redis::parse_redis_value(line.as_bytes()) {
            Ok(Value::ServerError(err)) => err.into(),
            other => panic!("not an error reply: {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_script_refused_by_a_redis_6_replica_did_not_run() {
        assert!(did_not_run(&read_only_before_7()));
        assert_eq!(
            sends(true, false, read_only_before_7).await,
            1 + CLUSTER_RETRIES
        );
    }
}
