//! The lock operations over a whole deployment: straight through to one
//! store, split by hash slot on a Cluster, or agreed by a quorum of
//! independent masters (Redlock).
//!
//! # Redlock
//!
//! Every operation goes to every master at once. An acquisition holds when
//! `needed` masters granted it (a majority for a lock; more for a semaphore,
//! below) and the lease minus the time it took and the drift margin is still
//! left; otherwise what was granted is given back. The caller does not wait
//! for slow or stopped masters once the outcome is known: their answers are
//! awaited in the background, and a grant that arrives after a failed
//! acquisition is given back too. The caller may try again under the same
//! owner id meanwhile, so each give-back names the tokens it gives back: held
//! up until that grant lapsed and the owner id was granted the lock again,
//! it leaves the later grant alone (see `calls::undo`).
//!
//! A renewal holds where `needed` masters renewed; a lock is lost when so
//! many masters no longer have it that `needed` cannot be reached. A release
//! (a give-back too) is done once a majority of masters answered it; with
//! fewer, it fails ([`LockError::NoQuorum`]): the others keep the lock, and
//! a release that must be sent again is.
//!
//! **Fencing tokens.** Each master counts on its own, so the largest token
//! among the granting masters is taken, and then written back to them
//! (`fence_raise.lua`) before the lock is handed out. Any later majority
//! shares at least one master with this one, whose counter is by then past
//! the token, so the next holder's token is larger: tokens keep growing as
//! long as Redlock's mutual exclusion itself holds.
//!
//! **Semaphores.** With `k` permits, `k + 1` holders must never each find a
//! grant at `needed` of `n` masters, each master granting at most `k`: that
//! takes `(k + 1) * needed > k * n`, so `needed = k * n / (k + 1) + 1`, a
//! plain majority when `k = 1`.
//!
//! A holder may take several of the permits (`LockRequest::permits`; all or
//! none on each master), and the same quorum bounds the permits held, not
//! only the holders: each master grants at most `k` permits in all, so
//! holders holding `P` permits together, each granted by `needed` masters,
//! were granted `P * needed <= k * n` permits over the masters; with
//! `(k + 1) * needed > k * n`, `P <= k`. (Counting holders is the case of
//! one permit each.) Each master records `k` with the semaphore's first
//! holder and refuses another number while it has holders; `needed` is a
//! majority for every `k`, so quorums for two numbers would share a master:
//! holders granted under different numbers never hold at once. When so many
//! masters refuse a request's number that `needed` cannot be reached, the
//! request gets their refusal ([`LockError::Config`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use futures_util::{Stream, StreamExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::base::config::Replicas;
use crate::base::error::{Chain, LockError};
use crate::base::keys::{LockKeys, slot};
use crate::base::kind::Kind;
use crate::store::answers::AnsweringAgain;
use crate::store::connection::USER_TIMEOUT;
use crate::store::node::Node;
use crate::store::scripts::calls::{Asker, Asking, Next};
use crate::store::scripts::{
    Acquire, Acquired, Call, Giving, HandedOn, Released, Renewing, Stored, Taken, Undo, calls,
};

/// How many Redlock masters must answer a release before it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answering {
    /// A majority; the others' answers are awaited in the background.
    Majority,
    /// Every master, or its refusal (which leaves nothing to run later).
    Every,
}

/// How the deployment is reached.
pub(crate) enum Topology {
    /// One server, or the master Sentinel reports.
    Single(Node),
    /// A Redis Cluster: one connection that routes each call by its keys'
    /// slot, so calls naming keys of several slots are split by slot.
    Cluster(Node),
    /// Independent masters, agreeing by quorum.
    Quorum(Vec<Node>),
}

/// The outcome of renewing one item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    Renewed,
    /// No longer held by its owner.
    Gone,
    /// Not known (a failed call): try again before the deadline.
    Unknown,
}

/// The lock operations of a client, over its deployment. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Backend {
    topology: Arc<Topology>,
}

/// The times an acquisition needs: the lease, how long a waiting caller's
/// turn-taking mark lasts unless it tries again (zero: it does not wait),
/// and the drift margin.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Times {
    pub(crate) lease: Duration,
    pub(crate) mark: Duration,
    pub(crate) drift: Duration,
}

/// One attempt to take locks: what the deployment is asked for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attempt<'a> {
    /// How errors and logs name the locks.
    pub(crate) name: &'a str,
    pub(crate) locks: &'a [LockKeys],
    pub(crate) owner: &'a str,
    /// How the attempt asks for each lock: empty when afresh, or, when an
    /// enclosing critical section of `owner` holds them, the codes of
    /// [`Asking`](crate::store::scripts::calls::Asking), one per lock; the
    /// attempt fails as lost if they are not held so any more (see
    /// `acquire.lua`).
    pub(crate) asking: &'a str,
    pub(crate) kind: Kind,
    pub(crate) times: Times,
    /// A fair waiter's place in line: how long it stays there without
    /// trying again, and whether it waits in line at all.
    pub(crate) line: (Duration, bool),
    pub(crate) replicas: Option<Replicas>,
}

impl Attempt<'_> {
    /// How the locks are stored once taken.
    pub(crate) fn stored(&self) -> Stored {
        Stored::for_kind(self.kind, &self.locks[0])
    }

    /// The acquire call for `locks` (all of the attempt's, or one Cluster
    /// slot's), and the call that gives back what it granted, announcing
    /// it when `announce` (see [`Giving::announce`] and [`Backend::release`]).
    /// With `line`, an exclusive lock's line applies (see `acquire.lua`):
    /// for one lock asked for alone, on one store.
    fn calls(&self, locks: &[LockKeys], announce: bool, line: bool) -> Acquire {
        let (owner, lease, mark) = (self.owner, self.times.lease, self.times.mark);
        let asker = Asker {
            owner,
            asking: self.asking,
        };
        let take = match self.kind {
            Kind::Exclusive => calls::acquire(locks, asker, lease, mark, line),
            Kind::Permits(permits) => calls::permit_acquire(&locks[0], asker, lease, permits),
            Kind::Read => calls::read_acquire(&locks[0], asker, lease, mark),
            Kind::Fair => {
                let (stay, enqueue) = self.line;
                calls::fair_acquire(&locks[0], asker, lease, stay, enqueue)
            }
        };
        let giving = Giving {
            announce,
            ..Giving::ONE
        };
        Acquire::new(take, locks.len(), self.stored(), giving)
    }
}

/// How many of `nodes` masters must agree for a lock that `holders` may
/// hold at once (see the module docs).
pub(crate) fn needed(nodes: usize, holders: u32) -> usize {
    let k = holders.max(1) as usize;
    k * nodes / (k + 1) + 1
}

/// A call run on one store, as a future that owns what it needs.
type OpFuture<T> = BoxFuture<'static, Result<Vec<T>, LockError>>;

/// What a call run on one store reads from its reply: one value per lock.
type Op<T> = fn(Node, String, Call, usize) -> OpFuture<T>;

/// A release: what happened to each lock.
fn releasing(node: Node, name: String, call: Call, locks: usize) -> OpFuture<Released> {
    Box::pin(async move { node.release(&name, &call, locks).await })
}

/// A call whose reply says nothing the caller needs.
fn answered(node: Node, name: String, call: Call, locks: usize) -> OpFuture<()> {
    Box::pin(async move {
        node.run::<redis::Value>(Some(&name), &call).await?;
        Ok(vec![(); locks])
    })
}

/// How long a give-back retires an owner id whose grant went unanswered
/// (see [`Backend::retire`]): as long as the call that granted it may take
/// to reach Redis over a connection ([`USER_TIMEOUT`]), and then some. A
/// server that stalled runs that call and the give-back within moments of
/// each other when it resumes, however long it stalled.
pub(crate) const RETIRED_FOR: Duration = USER_TIMEOUT.saturating_add(Duration::from_secs(5));

/// How long a give-back whose grant went unanswered is sent again while
/// Redis does not answer (see [`Backend::retire`]). A server stopped (a
/// `SIGSTOP`, a paused VM) keeps its connections: when it resumes it runs
/// the call that granted the lock, and one of the give-backs sent meanwhile
/// must run too. The bound keeps give-backs from piling up against a server
/// that never comes back; after a longer pause the lock lapses after its
/// lease, as it would without the give-back. Each pending give-back is one
/// small task that tries every few seconds.
pub(crate) const GIVE_BACK_FOR: Duration = Duration::from_secs(600);

/// The longest pause between two tries of such a give-back.
const GIVE_BACK_PAUSE_AT_MOST: Duration = Duration::from_secs(5);

/// Ready once any of the stores answers again (see [`AnsweringAgain`]).
async fn answering_again(stores: &mut [AnsweringAgain]) {
    if stores.is_empty() {
        return std::future::pending().await;
    }
    let each = stores.iter_mut().map(|store| Box::pin(store.next()));
    futures_util::future::select_all(each).await;
}

/// A duration between zero and `most`, different from call to call (the
/// clock's nanoseconds): enough to spread retries apart, no randomness
/// that anything depends on.
fn jitter(most: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |now| u64::from(now.subsec_nanos()));
    let most = u64::try_from(most.as_nanos()).unwrap_or(u64::MAX).max(1);
    Duration::from_nanos(nanos % most)
}

impl Backend {
    pub(crate) fn new(topology: Topology) -> Backend {
        Backend {
            topology: Arc::new(topology),
        }
    }

    /// Every store behind the deployment (one, or each Redlock master).
    pub(crate) fn nodes(&self) -> &[Node] {
        match &*self.topology {
            Topology::Single(node) | Topology::Cluster(node) => std::slice::from_ref(node),
            Topology::Quorum(nodes) => nodes,
        }
    }

    /// Whether the deployment answers commands: every store of one server
    /// or a Cluster, a quorum of Redlock masters; otherwise the first
    /// failure.
    pub(crate) async fn ping(&self) -> Result<(), LockError> {
        let nodes = self.nodes();
        let answers = futures_util::future::join_all(nodes.iter().map(Node::ping)).await;
        let needed = match &*self.topology {
            Topology::Quorum(nodes) => needed(nodes.len(), 1),
            _ => nodes.len(),
        };
        let answered = answers.iter().filter(|answer| answer.is_ok()).count();
        match answers.into_iter().find_map(Result::err) {
            Some(err) if answered < needed => Err(err),
            _ => Ok(()),
        }
    }

    /// Takes every lock of `attempt` or none.
    pub(crate) async fn acquire(&self, attempt: &Attempt<'_>) -> Result<Acquired, LockError> {
        let locks = attempt.locks;
        match &*self.topology {
            Topology::Cluster(node) if by_slot(locks.iter().map(|l| l.lock.as_str())).len() > 1 => {
                acquire_by_slot(node, attempt).await
            }
            Topology::Single(node) | Topology::Cluster(node) => {
                let call = attempt.calls(locks, false, locks.len() == 1);
                node.acquire(attempt.name, &call, attempt.replicas).await
            }
            Topology::Quorum(nodes) => on_quorum(nodes, attempt).await,
        }
    }

    /// Gives back what `owner` holds of `locks`, stored as `stored` (one
    /// level, or every level: see [`Giving`]); one outcome per lock.
    pub(crate) async fn release(
        &self,
        name: &str,
        locks: &[LockKeys],
        stored: &Stored,
        owner: &str,
        giving: Giving,
    ) -> Result<Vec<Released>, LockError> {
        self.release_on(name, locks, (stored, owner), giving, Answering::Majority)
            .await
    }

    /// Gives back a grant to `owner` that came too late to be held, as
    /// [`release`](Self::release) does, before `owner` asks for the locks
    /// again. On Redlock it waits for every master, where a release returns
    /// once a majority answered: a give-back still on its way to another
    /// master would free there the grant `owner` asks for next. A master
    /// that does not answer fails it (one that refuses it does not: it
    /// will not run it later), and the caller goes on under a new owner
    /// id.
    pub(crate) async fn give_back(
        &self,
        name: &str,
        locks: &[LockKeys],
        stored: &Stored,
        owner: &str,
        giving: Giving,
    ) -> Result<Vec<Released>, LockError> {
        self.release_on(name, locks, (stored, owner), giving, Answering::Every)
            .await
    }

    async fn release_on(
        &self,
        name: &str,
        locks: &[LockKeys],
        (stored, owner): (&Stored, &str),
        giving: Giving,
        answering: Answering,
    ) -> Result<Vec<Released>, LockError> {
        // On Redlock every release is announced: a client's subscription
        // counts as live once a majority of masters confirmed it, so the
        // master where a waiter marked the lock may be one whose messages
        // it does not get; the announcements of the others make up for it.
        let giving = Giving {
            announce: giving.announce || matches!(*self.topology, Topology::Quorum(_)),
            ..giving
        };
        let build = |locks: &[LockKeys]| calls::release(locks, stored, owner, giving);
        let per_store = self
            .everywhere(name, locks, build, releasing, answering)
            .await?;
        Ok((0..locks.len())
            .map(|i| merge_released(per_store.iter().map(|store| store[i])))
            .collect())
    }

    /// Gives back whatever `owner` may hold of `locks` (every level), and
    /// retires `owner` from them for [`RETIRED_FOR`]: an acquire or a
    /// handoff to `owner` whose answer was lost may have granted them, and
    /// nobody will use `owner` again. Returns how each lock was found, or
    /// `None` when no give-back was answered.
    ///
    /// The call that may have granted them can still run after the
    /// give-back: it may have gone out on another connection (the one kept
    /// for `WAIT`, or one replaced since), a proxy may hold it, and a
    /// server that stalled runs the two in either order when it resumes.
    /// So the give-back leaves a mark that makes every acquire script
    /// refuse `owner` (see `gone_key` in `prelude.lua`), and is sent again
    /// until Redis answers it (every level of an owner id nobody uses is
    /// safe to give back any number of times): first after `again_after`,
    /// then ever less often (with a little jitter, so that the give-backs
    /// of many calls cut short by one outage do not all arrive at once),
    /// and at once when a store answers a call of this client again after
    /// calls to it went unanswered (the outage is over; once per pause at
    /// most; a probe asks the store meanwhile, for a client that makes no
    /// other call, see `Node::probe`), for [`GIVE_BACK_FOR`] at most. It
    /// stops early when `stopped` is cancelled: the client stopped. Once
    /// `hurry` is cancelled (the client is shutting down, and waits for
    /// it), it pauses no more: it is sent at once, and a try begun after
    /// that which fails ends it. Giving up, it returns the last try's error.
    ///
    /// A lock its holder asked to keep taken until `keep_until` (see
    /// `LockRequest::lock_at_least`) is kept until then.
    pub(crate) async fn retire(
        &self,
        name: &str,
        locks: &[LockKeys],
        (stored, owner): (&Stored, &str),
        keep_until: Option<Instant>,
        again_after: Duration,
        (stopped, hurry): (&CancellationToken, &CancellationToken),
    ) -> Result<Vec<Released>, LockError> {
        let until = Instant::now() + GIVE_BACK_FOR;
        let mut pause = again_after;
        // Each store's answers from now on: a store that answers again
        // (after calls to it went unanswered) ends the pause at once. The
        // give-back's own tries may all have waited for a connection that
        // a stalled server never let them write on, while the call that
        // granted the lock went out before, on the connection replaced
        // since: it runs when the server resumes, and would keep the lock
        // until the next try, after a pause that grew while the stall
        // lasted.
        let mut answering: Vec<AnsweringAgain> =
            self.nodes().iter().map(Node::answering_again).collect();
        let mut early = true;
        loop {
            let giving = Giving {
                retire: RETIRED_FOR,
                keep: keep_until.map_or(Duration::ZERO, |keep_until| {
                    keep_until.saturating_duration_since(Instant::now())
                }),
                ..Giving::ABANDONED
            };
            let hurried = hurry.is_cancelled();
            match self.release(name, locks, stored, owner, giving).await {
                Ok(released) => return Ok(released),
                Err(err)
                    if stopped.is_cancelled() || hurried || Instant::now() + pause >= until =>
                {
                    tracing::warn!(key = %name, error = %Chain(&err), "giving back a lock whose grant went unanswered failed; it expires after its lease");
                    return Err(err);
                }
                Err(err) => {
                    tracing::debug!(key = %name, error = %Chain(&err), "giving back a lock whose grant went unanswered failed; trying again");
                    // The client began shutting down during the try: once
                    // more, at once.
                    if hurry.is_cancelled() {
                        continue;
                    }
                    // A client with no other calls hears of the answer
                    // from a probe (while an answer can end the pause).
                    if early {
                        for node in self.nodes() {
                            node.probe(stopped);
                        }
                    }
                    let woken = tokio::select! {
                        () = tokio::time::sleep(pause + jitter(pause / 4)) => false,
                        () = answering_again(&mut answering), if early => true,
                        () = hurry.cancelled() => continue,
                        () = stopped.cancelled() => return Err(err),
                    };
                    // Once per pause at most: a store that answers some
                    // calls but not this one's (a Cluster with one shard
                    // out, whose other shards answer) would otherwise
                    // wake every give-back after each of its answers.
                    early = !woken;
                    pause = (pause * 2).min(GIVE_BACK_PAUSE_AT_MOST);
                }
            }
        }
    }

    /// Whether a release may hand a lock straight to a waiter of the same
    /// client (see `handoffs.rs`). Not on Redlock: a lock handed on by some
    /// masters and released by others would leave the waiter without a
    /// quorum, and a round of the waiter's own is needed anyway.
    pub(crate) fn hands_on(&self) -> bool {
        !matches!(*self.topology, Topology::Quorum(_))
    }

    /// Gives back what `owner` holds of the lock hash `lock` (as
    /// [`release`](Self::release) does) and, when it becomes free, hands it
    /// to the one of `offers` whose turn it is (`handoff.lua`). Where locks
    /// are not handed on ([`hands_on`](Self::hands_on)), a plain release.
    pub(crate) async fn handoff(
        &self,
        name: &str,
        lock: &LockKeys,
        owner: &str,
        giving: Giving,
        offers: &[Next<'_>],
    ) -> Result<HandedOn, LockError> {
        match &*self.topology {
            Topology::Single(node) | Topology::Cluster(node) => {
                let call = calls::handoff(lock, owner, giving, offers);
                node.handoff(name, &call).await
            }
            Topology::Quorum(_) => {
                let locks = std::slice::from_ref(lock);
                let released = self
                    .release(name, locks, &Stored::Hash, owner, giving)
                    .await?;
                Ok(HandedOn {
                    released: released.first().copied().unwrap_or_default(),
                    to: None,
                })
            }
        }
    }

    /// Takes back the turn-taking marks of a writer or reader that stopped
    /// waiting.
    pub(crate) async fn leave_turns(
        &self,
        name: &str,
        locks: &[LockKeys],
        owner: &str,
    ) -> Result<(), LockError> {
        let build = |locks: &[LockKeys]| calls::turn_leave(locks, owner);
        self.everywhere(name, locks, build, answered, Answering::Majority)
            .await
            .map(drop)
    }

    /// Takes a fair waiter out of line.
    pub(crate) async fn leave_line(
        &self,
        name: &str,
        lock: &LockKeys,
        owner: &str,
    ) -> Result<(), LockError> {
        let build = |locks: &[LockKeys]| calls::fair_leave(&locks[0], owner);
        let locks = std::slice::from_ref(lock);
        self.everywhere(name, locks, build, answered, Answering::Majority)
            .await
            .map(drop)
    }

    /// Runs the calls `build` makes for `locks` wherever they must go: on a
    /// Cluster one per hash slot, put back in the order of `locks`; on
    /// Redlock on every master, answering once as many as `answering` asks
    /// did (a majority: a stopped master must not make every release wait
    /// for its timeout; the other calls go on in the background). One
    /// result per store that answered, each with one value per lock; the
    /// last error if none did. On Redlock, fewer answering is a failure: a
    /// master's refusal as it is, otherwise [`LockError::NoQuorum`].
    async fn everywhere<T: Copy + Default + Send + 'static>(
        &self,
        name: &str,
        locks: &[LockKeys],
        build: impl Fn(&[LockKeys]) -> Call,
        op: Op<T>,
        answering: Answering,
    ) -> Result<Vec<Vec<T>>, LockError> {
        match &*self.topology {
            Topology::Single(node) => {
                let one = op(node.clone(), name.to_owned(), build(locks), locks.len()).await?;
                Ok(vec![one])
            }
            Topology::Cluster(node) => {
                let groups = by_slot(locks.iter().map(|l| l.lock.as_str()));
                let calls = groups.iter().map(|group| {
                    let group_locks: Vec<LockKeys> =
                        group.iter().map(|&i| locks[i].clone()).collect();
                    op(
                        node.clone(),
                        name.to_owned(),
                        build(&group_locks),
                        group.len(),
                    )
                });
                let outcomes = futures_util::future::join_all(calls).await;
                let mut merged = vec![T::default(); locks.len()];
                for (group, outcome) in groups.iter().zip(outcomes) {
                    for (&i, one) in group.iter().zip(outcome?) {
                        merged[i] = one;
                    }
                }
                Ok(vec![merged])
            }
            Topology::Quorum(nodes) => {
                let call = build(locks);
                let enough = needed(nodes.len(), 1);
                let mut pending: FuturesUnordered<_> = nodes
                    .iter()
                    .map(|node| op(node.clone(), name.to_owned(), call.clone(), locks.len()))
                    .collect();
                let mut outcomes = Vec::new();
                while let Some(outcome) = pending.next().await {
                    outcomes.push(outcome);
                    let answered = outcomes.iter().filter(|o| o.is_ok()).count();
                    if answering == Answering::Majority && answered >= enough {
                        break;
                    }
                }
                if !pending.is_empty() {
                    tokio::spawn(async move { while pending.next().await.is_some() {} });
                }
                // Fewer than a majority answered (every master did, the
                // others with errors): a release left the lock where most
                // masters keep it, taken until its lease runs out, so it
                // failed, and one that must be sent again (`retire`, a last
                // release) is, unless a master refused it for good.
                let answered = outcomes.iter().filter(|o| o.is_ok()).count();
                if answered < enough {
                    let mut errors: Vec<LockError> =
                        outcomes.into_iter().filter_map(Result::err).collect();
                    if let Some(i) = errors.iter().position(|err| !err.is_unavailable()) {
                        return Err(errors.swap_remove(i));
                    }
                    if let Some(last) = errors.pop() {
                        let unreachable = nodes.len() - answered;
                        return Err(no_quorum(name, enough, nodes.len(), unreachable, last));
                    }
                    return Ok(Vec::new());
                }
                // Every master asked to answer: one whose answer was lost
                // may still run the call (a master that refused it did not
                // run it, and never will).
                if answering == Answering::Every {
                    let mut lost: Vec<LockError> = Vec::new();
                    let mut answers = Vec::new();
                    for outcome in outcomes {
                        match outcome {
                            Err(err) if err.is_unavailable() => lost.push(err),
                            other => answers.push(other),
                        }
                    }
                    let unanswered = lost.len();
                    if let Some(last) = lost.pop() {
                        return Err(no_quorum(name, nodes.len(), nodes.len(), unanswered, last));
                    }
                    return successes(answers);
                }
                successes(outcomes)
            }
        }
    }

    /// Renews `items` (at most one batch); one outcome per item. `Err` when
    /// nothing could be learned at all.
    pub(crate) async fn renew(
        &self,
        items: &[Renewing<'_>],
        timeout: Duration,
        replicas: &[Option<Replicas>],
    ) -> Result<Vec<Renewal>, LockError> {
        match &*self.topology {
            Topology::Single(node) => renew_on(node, items, timeout, replicas).await,
            Topology::Cluster(node) => {
                let groups = by_slot(items.iter().map(|item| item.key));
                let calls = groups.iter().map(|group| {
                    let group_items: Vec<Renewing<'_>> = group.iter().map(|&i| items[i]).collect();
                    let group_replicas: Vec<Option<Replicas>> =
                        group.iter().map(|&i| replicas[i]).collect();
                    async move { renew_on(node, &group_items, timeout, &group_replicas).await }
                });
                let outcomes = futures_util::future::join_all(calls).await;
                let mut renewed = vec![Renewal::Unknown; items.len()];
                let mut last_error = None;
                for (group, outcome) in groups.iter().zip(outcomes) {
                    match outcome {
                        Ok(outcome) => {
                            for (&i, one) in group.iter().zip(outcome) {
                                renewed[i] = one;
                            }
                        }
                        Err(err) => last_error = Some(err),
                    }
                }
                unless_all_unknown(renewed, last_error)
            }
            Topology::Quorum(nodes) => renew_by_quorum(nodes, items, timeout, replicas).await,
        }
    }
}

/// `renewed`, or `last_error` when nothing at all was learned.
fn unless_all_unknown(
    renewed: Vec<Renewal>,
    last_error: Option<LockError>,
) -> Result<Vec<Renewal>, LockError> {
    match last_error {
        Some(err) if renewed.iter().all(|r| *r == Renewal::Unknown) => Err(err),
        _ => Ok(renewed),
    }
}

/// Renews on one store, in one call per replication requirement.
async fn renew_on(
    node: &Node,
    items: &[Renewing<'_>],
    timeout: Duration,
    replicas: &[Option<Replicas>],
) -> Result<Vec<Renewal>, LockError> {
    let mut renewed = vec![Renewal::Unknown; items.len()];
    // Items that must be replicated go apart: their call ends with WAIT.
    let mut kinds: BTreeMap<Option<(u32, Duration)>, Vec<usize>> = BTreeMap::new();
    for (i, wanted) in replicas.iter().enumerate() {
        kinds
            .entry(wanted.map(|r| (r.count, r.timeout)))
            .or_default()
            .push(i);
    }
    let mut last_error = None;
    for (wanted, indices) in kinds {
        let wanted = wanted.map(|(count, timeout)| Replicas { count, timeout });
        let batch: Vec<Renewing<'_>> = indices.iter().map(|&i| items[i]).collect();
        match node.renew(&calls::renew(&batch), timeout, wanted).await {
            Ok(outcome) => {
                for (&i, still) in indices.iter().zip(outcome) {
                    renewed[i] = if still {
                        Renewal::Renewed
                    } else {
                        Renewal::Gone
                    };
                }
            }
            Err(err) => last_error = Some(err),
        }
    }
    unless_all_unknown(renewed, last_error)
}

/// Renews on every master; an item is renewed where enough masters renewed
/// it, gone where too many no longer have it for that.
async fn renew_by_quorum(
    nodes: &[Node],
    items: &[Renewing<'_>],
    timeout: Duration,
    replicas: &[Option<Replicas>],
) -> Result<Vec<Renewal>, LockError> {
    let outcomes = futures_util::future::join_all(
        nodes
            .iter()
            .map(|node| renew_on(node, items, timeout, replicas)),
    )
    .await;
    let answers = successes(outcomes)?;
    Ok(items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let needed = needed(nodes.len(), item.stored.holders_at_once());
            let renewed = answers.iter().filter(|a| a[i] == Renewal::Renewed).count();
            let gone = answers.iter().filter(|a| a[i] == Renewal::Gone).count();
            if renewed >= needed {
                Renewal::Renewed
            } else if nodes.len() - gone < needed {
                Renewal::Gone
            } else {
                Renewal::Unknown
            }
        })
        .collect())
}

/// Indices of `keys` grouped by hash slot, the groups in slot order (so
/// that every client takes a Cluster's slots in the same order).
fn by_slot<'a>(keys: impl Iterator<Item = &'a str>) -> Vec<Vec<usize>> {
    let mut groups: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
    for (i, key) in keys.enumerate() {
        groups.entry(slot(key)).or_default().push(i);
    }
    groups.into_values().collect()
}

/// Takes locks in several Cluster slots one slot at a time, in slot order;
/// when one slot's locks are busy, gives back the slots taken so far, so
/// that nothing is held while waiting (all or none, never a deadlock).
async fn acquire_by_slot(node: &Node, attempt: &Attempt<'_>) -> Result<Acquired, LockError> {
    let locks = attempt.locks;
    let groups = by_slot(locks.iter().map(|l| l.lock.as_str()));
    let mut taken: Vec<Option<Taken>> = vec![None; locks.len()];
    // Each slot taken so far: its call, and the tokens it was granted.
    let mut taken_slots: Vec<(Acquire, Vec<Taken>)> = Vec::new();
    for group in &groups {
        let group_locks: Vec<LockKeys> = group.iter().map(|&i| locks[i].clone()).collect();
        let asking: String = if attempt.asking.is_empty() {
            String::new()
        } else {
            group
                .iter()
                // The codes are ASCII: one byte per lock.
                .map(|&i| {
                    attempt
                        .asking
                        .as_bytes()
                        .get(i)
                        .map_or(Asking::Fresh.code(), |&code| char::from(code))
                })
                .collect()
        };
        let group_attempt = Attempt {
            asking: &asking,
            ..*attempt
        };
        let call = group_attempt.calls(&group_locks, false, false);
        let outcome = node.acquire(attempt.name, &call, attempt.replicas).await;
        match outcome {
            Ok(Acquired::Held(held)) => {
                for (&i, &one) in group.iter().zip(&held) {
                    taken[i] = Some(one);
                }
                taken_slots.push((call, held));
            }
            other => {
                let mut unanswered = None;
                for (slot, granted) in taken_slots {
                    if let Err(err) = node
                        .release(attempt.name, &slot.undo().call(&granted), slot.locks())
                        .await
                    {
                        tracing::debug!(key = %attempt.name, error = %Chain(&err), "giving back part of a multi-slot acquisition failed");
                        unanswered = Some(err);
                    }
                }
                // A give-back that failed may still run, or not: the owner
                // id may hold those slots for their lease. (Arriving late,
                // it names the tokens it gives back, so it cannot free a
                // later grant: see `calls::undo`.) So a busy attempt fails
                // as unanswered instead, and the caller gives back what the
                // owner id may hold, sent again until answered, and goes on
                // under a new one, as after a grant too late whose
                // give-back failed (see `LockRequest::grant`).
                return match (other, unanswered) {
                    // Busy would settle the owner id; an error is reported
                    // as it is (and one that leaves the outcome open
                    // retires the owner id too).
                    (Ok(_), Some(err)) if err.is_unavailable() => Err(err),
                    (other, _) => other,
                };
            }
        }
    }
    Ok(Acquired::Held(taken.into_iter().flatten().collect()))
}

/// Sends the attempt's acquire call to every master and decides as soon as
/// `needed` granted or can no longer grant (see the module docs). Grants of
/// a failed attempt, and late ones, are given back.
async fn on_quorum(nodes: &[Node], attempt: &Attempt<'_>) -> Result<Acquired, LockError> {
    let (name, times) = (attempt.name, attempt.times);
    let needed = needed(nodes.len(), attempt.stored().holders_at_once());
    // Not in line on Redlock: each master would keep a line of its own,
    // and could keep the lock for a waiter the others do not.
    let call = attempt.calls(attempt.locks, true, false);
    let grants = Grants {
        nodes,
        name,
        undo: call.undo().clone(),
        locks: call.locks(),
    };
    let started = Instant::now();
    let mut pending: FuturesUnordered<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let (node, name, call) = (node.clone(), name.to_owned(), call.clone());
            let replicas = attempt.replicas;
            async move { (i, node.acquire(&name, &call, replicas).await) }
        })
        .collect();
    let mut answers = Answers::default();
    while let Some((i, outcome)) = pending.next().await {
        answers.add(i, outcome);
        if answers.granted.len() >= needed || answers.granted.len() + pending.len() < needed {
            break;
        }
    }
    // Validity: what is left of the lease once the slowest needed master
    // answered, less the drift margin.
    let mut held = answers.granted.len() >= needed;
    if held && started.elapsed() + times.drift >= times.lease {
        tracing::debug!(key = %name, elapsed = ?started.elapsed(), "quorum reached too late to use the lock");
        held = false;
    }
    if !held {
        // Decided only now, after the lateness check: a grant from a master
        // still to answer is given back, whether too few masters granted
        // or a quorum came too late.
        grants.give_back(answers.granted.clone(), pending);
        if !answers.granted.is_empty() {
            // Contenders that split the masters between them would split
            // them again if all retried at once, woken by each other's give
            // backs: a random pause lets one of them go first (the Redlock
            // paper's random retry delay).
            tokio::time::sleep(split_pause()).await;
        }
        return answers.refusal(name, nodes.len(), needed);
    }
    let merged = answers.merged(attempt.locks.len());
    let counters: Vec<(&str, u64)> = attempt
        .locks
        .iter()
        .zip(&merged)
        .map(|(keys, taken)| (&*keys.fence, taken.fence))
        .collect();
    let raise = calls::fence_raise(&counters);
    let raised = futures_util::future::join_all(
        answers
            .granted
            .iter()
            .map(|(i, _)| nodes[*i].run::<i64>(Some(name), &raise)),
    )
    .await;
    let raised_on = raised.iter().filter(|r| r.is_ok()).count();
    if raised_on < needed {
        grants.give_back(answers.granted, pending);
        let last = raised
            .into_iter()
            .find_map(Result::err)
            .unwrap_or_else(|| LockError::Config("fence raise failed".into()));
        return Err(no_quorum(
            name,
            needed,
            nodes.len(),
            nodes.len() - raised_on,
            last,
        ));
    }
    keep_late(pending);
    Ok(Acquired::Held(merged))
}

/// The masters' answers to a Redlock acquisition, as far as it waited for
/// them.
#[derive(Default)]
struct Answers {
    /// Each master that granted it, by its place among the masters, and
    /// what it granted (one per lock).
    granted: Vec<(usize, Vec<Taken>)>,
    /// Each master that found it busy: how long the lease in the way has
    /// left, and whether only the restart quarantine was in the way.
    busy: Vec<(Option<Duration>, bool)>,
    errors: Vec<LockError>,
}

impl Answers {
    fn add(&mut self, i: usize, outcome: Result<Acquired, LockError>) {
        match outcome {
            Ok(Acquired::Held(taken)) => self.granted.push((i, taken)),
            Ok(Acquired::Busy { ttl, quarantined }) => self.busy.push((ttl, quarantined)),
            Err(err) => self.errors.push(err),
        }
    }

    /// One token and depth per lock: the largest any granting master gave.
    fn merged(&self, locks: usize) -> Vec<Taken> {
        (0..locks)
            .map(|lock| Taken {
                fence: self
                    .granted
                    .iter()
                    .map(|(_, t)| t[lock].fence)
                    .max()
                    .unwrap_or(0),
                count: self
                    .granted
                    .iter()
                    .map(|(_, t)| t[lock].count)
                    .max()
                    .unwrap_or(0),
            })
            .collect()
    }

    /// What an attempt that did not hold answers, of `nodes` masters of
    /// which `needed` had to grant it: the error that kept it from a
    /// quorum, or busy for as long as the longest lease in the way.
    fn refusal(mut self, name: &str, nodes: usize, needed: usize) -> Result<Acquired, LockError> {
        // Masters that refused the request itself (a semaphore's number of
        // permits that disagrees with the one they recorded).
        let refused = self
            .errors
            .iter()
            .filter(|err| matches!(err, LockError::Config(_)))
            .count();
        if nodes - refused < needed
            && let Some(i) = self
                .errors
                .iter()
                .position(|err| matches!(err, LockError::Config(_)))
        {
            return Err(self.errors.swap_remove(i));
        }
        // A re-entry that masters found no longer its owner's, and that a
        // quorum does not confirm: the lock is lost.
        if let Some(i) = self.errors.iter().position(LockError::is_lost) {
            return Err(self.errors.swap_remove(i));
        }
        let unreachable = self.errors.len();
        if nodes - unreachable < needed
            && let Some(last) = self.errors.pop()
        {
            return Err(no_quorum(name, needed, nodes, unreachable, last));
        }
        let ttl = self
            .busy
            .iter()
            .try_fold(Duration::ZERO, |longest, (ttl, _)| {
                ttl.map(|t| longest.max(t))
            });
        let quarantined =
            !self.busy.is_empty() && self.busy.iter().all(|(_, quarantined)| *quarantined);
        Ok(Acquired::Busy { ttl, quarantined })
    }
}

/// What a Redlock acquisition was granted, on which masters, to give back
/// when it did not hold.
struct Grants<'a> {
    nodes: &'a [Node],
    name: &'a str,
    /// The give-back, built only when some master's grant must be given
    /// back.
    undo: Undo,
    locks: usize,
}

impl Grants<'_> {
    /// Gives back, in a task of its own, what the masters in `granted` (by
    /// their place among the masters, with the tokens each granted)
    /// granted, and whatever the masters still to answer (`pending`) grant
    /// when they do.
    ///
    /// The caller may try again under the same owner id at once, and a
    /// give-back held up (on a connection that went dead, by a master that
    /// stalled) may arrive after the grant it gives back lapsed and another
    /// was made to that owner id: each names the tokens it gives back, and
    /// leaves a later grant alone (see `calls::undo`).
    fn give_back<S>(&self, granted: Vec<(usize, Vec<Taken>)>, pending: S)
    where
        S: Stream<Item = (usize, Result<Acquired, LockError>)> + Send + Unpin + 'static,
    {
        // Nothing granted and nothing to wait for: no task.
        if granted.is_empty() && pending.size_hint().1 == Some(0) {
            return;
        }
        let (undo, locks, name) = (self.undo.clone(), self.locks, self.name.to_owned());
        let nodes = self.nodes.to_vec();
        let late = pending.filter_map(|(i, outcome)| {
            std::future::ready(match outcome {
                Ok(Acquired::Held(taken)) => Some((i, taken)),
                _ => None,
            })
        });
        tokio::spawn(async move {
            let (undo, name, nodes) = (&undo, &name, &nodes);
            futures_util::stream::iter(granted)
                .chain(late)
                .for_each_concurrent(None, |(i, taken)| async move {
                    if let Err(err) = nodes[i].release(name, &undo.call(&taken), locks).await {
                        tracing::debug!(key = %name, error = %Chain(&err), "giving back a grant failed; it expires after its lease");
                    }
                })
                .await;
        });
    }
}

/// Waits, in a task of its own, for the masters that had not answered when
/// an acquisition held: their grants stay, renewed along with the others
/// (a coalesced acquire call dropped before its answer gives back what it
/// granted, see `coalesce.rs`).
fn keep_late<S>(mut pending: S)
where
    S: Stream<Item = (usize, Result<Acquired, LockError>)> + Send + Unpin + 'static,
{
    if pending.size_hint().1 != Some(0) {
        tokio::spawn(async move { while pending.next().await.is_some() {} });
    }
}

/// Redlock's [`LockError::NoQuorum`] for `name`: `unreachable` of `nodes`
/// masters failed where `needed` must agree, `last` the last failure.
fn no_quorum(
    name: &str,
    needed: usize,
    nodes: usize,
    unreachable: usize,
    last: LockError,
) -> LockError {
    LockError::NoQuorum {
        key: name.to_owned(),
        needed,
        nodes,
        unreachable,
        last: Box::new(last),
    }
}

/// A random pause of 1 to 25 ms.
fn split_pause() -> Duration {
    use std::hash::{BuildHasher, Hasher};
    // Each RandomState is seeded afresh: enough randomness for a backoff.
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    Duration::from_millis(1 + random % 25)
}

/// One release outcome from each master's: held somewhere still (the
/// deepest re-entry left), free, or held nowhere.
fn merge_released(outcomes: impl Iterator<Item = Released>) -> Released {
    let mut merged = Released::NotHeld;
    for outcome in outcomes {
        merged = match (merged, outcome) {
            (Released::StillHeld(a), Released::StillHeld(b)) => Released::StillHeld(a.max(b)),
            (Released::StillHeld(a), _) | (_, Released::StillHeld(a)) => Released::StillHeld(a),
            (Released::Free, _) | (_, Released::Free) => Released::Free,
            _ => Released::NotHeld,
        };
    }
    merged
}

/// The successful outcomes, or the last error if every store failed.
fn successes<T>(outcomes: Vec<Result<T, LockError>>) -> Result<Vec<T>, LockError> {
    let mut last_error = None;
    let ok: Vec<T> = outcomes
        .into_iter()
        .filter_map(|outcome| outcome.map_err(|err| last_error = Some(err)).ok())
        .collect();
    match last_error {
        Some(err) if ok.is_empty() => Err(err),
        _ => Ok(ok),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_needs_a_majority() {
        assert_eq!(needed(1, 1), 1);
        assert_eq!(needed(3, 1), 2);
        assert_eq!(needed(5, 1), 3);
        assert_eq!(needed(4, 1), 3);
    }

    #[test]
    fn a_semaphore_needs_enough_masters_that_one_holder_too_many_cannot_fit() {
        for nodes in 1..=7usize {
            for permits in 1..=6u32 {
                let k = permits as usize;
                let q = needed(nodes, permits);
                assert!(q <= nodes, "{nodes} masters, {permits} permits");
                // k + 1 holders each granted by q masters exceed what the
                // masters can grant together (k each)...
                assert!(
                    (k + 1) * q > k * nodes,
                    "{nodes} masters, {permits} permits"
                );
                // ...and q is the smallest such number.
                assert!((k + 1) * (q - 1) <= k * nodes);
            }
        }
        assert_eq!(needed(5, 2), 4);
    }

    #[test]
    fn release_outcomes_merge_to_the_most_held() {
        use Released::*;
        assert_eq!(merge_released([NotHeld, Free, NotHeld].into_iter()), Free);
        assert_eq!(
            merge_released([Free, StillHeld(2), StillHeld(1)].into_iter()),
            StillHeld(2)
        );
        assert_eq!(merge_released([NotHeld, NotHeld].into_iter()), NotHeld);
        assert_eq!(merge_released(std::iter::empty()), NotHeld);
    }

    #[test]
    fn keys_group_by_slot_in_slot_order() {
        let keys = ["lock:{b}", "lock:{a}", "lock:{b}:x", "lock:{c}"];
        let groups = by_slot(keys.into_iter());
        let slots: Vec<u16> = groups.iter().map(|g| slot(keys[g[0]])).collect();
        let mut sorted = slots.clone();
        sorted.sort_unstable();
        assert_eq!(slots, sorted);
        assert!(groups.iter().any(|g| g == &vec![0, 2]));
        assert_eq!(groups.iter().map(Vec::len).sum::<usize>(), 4);
    }
}
