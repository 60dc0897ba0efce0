//! What an acquisition leaves behind in Redis while it is under way, and
//! takes back when it ends without the locks: a grant it may have been
//! made without learning of it ([`Unsettled`]), a waiter's turn-taking
//! marks and a fair waiter's place in line ([`Waiting`]).

use std::sync::Arc;

use tokio::time::Instant;

use crate::base::error::{Chain, LockError};
use crate::base::keys::LockKeys;
use crate::store::scripts::calls::Asking;

use super::{LockRequest, Outcome};

/// A fresh owner id whose last acquire call may have granted the locks
/// without the caller learning of it: the call got no answer (timed out,
/// its connection lost), or the request's future was dropped while it was
/// on its way. Redis may run such a call after its caller gave up (a
/// stalled server runs it when it resumes), which would leave the locks
/// taken by nobody for a whole lease. Unless settled, what the owner id
/// may hold is given back when the request ends (see
/// [`LockRequest::give_back_for`]). A re-entry's owner id belongs to the
/// enclosing critical section and is never given back from here.
pub(super) struct Unsettled<'a> {
    request: &'a LockRequest,
    keys: &'a [LockKeys],
    owner: Option<Arc<str>>,
    /// The owner id of an upgrade or a downgrade (a re-entry asking for
    /// the other side of a read-write lock) whose answer is unknown: it may
    /// hold this side with no guard for it. The enclosing critical section
    /// may take this side again under the same owner id, so it is not
    /// given back from here: the enclosing hold is marked, and its last
    /// guard gives this side back (see
    /// [`LockRequest::other_side_unsettled`]).
    other_side: Option<Arc<str>>,
    /// An earlier call under the same owner id got no answer: it may still
    /// run, on another connection than the next calls' (one replaced
    /// meanwhile, the one kept for `WAIT`), after them. Only a grant, or
    /// giving the owner id up, settles it.
    earlier: bool,
}

impl<'a> Unsettled<'a> {
    pub(super) fn new(request: &'a LockRequest, keys: &'a [LockKeys]) -> Self {
        Unsettled {
            request,
            keys,
            owner: None,
            other_side: None,
            earlier: false,
        }
    }

    /// One attempt at the locks under `owner`, asking as `asking` (empty:
    /// afresh), within `deadline`: what it leaves unknown is kept track of,
    /// and settled by its answer.
    pub(super) async fn attempt(
        &mut self,
        (owner, asking): (&Arc<str>, &str),
        deadline: Instant,
        span: &tracing::Span,
    ) -> Result<Outcome, LockError> {
        self.arm(owner, asking);
        let attempt = self
            .request
            .attempt(self.keys, (owner, asking), deadline, span)
            .await;
        self.after(&attempt);
        attempt
    }

    /// An acquire call under `owner`, asking as `asking` (empty: afresh),
    /// is about to be sent.
    fn arm(&mut self, owner: &Arc<str>, asking: &str) {
        if asking.is_empty() && self.owner.is_none() {
            self.owner = Some(owner.clone());
        }
        if asking.contains(Asking::OtherSide.code()) && self.other_side.is_none() {
            self.other_side = Some(owner.clone());
        }
    }

    /// The owner id holds nothing unknown to the caller: it was granted
    /// the locks, or what it may hold was given back.
    pub(super) fn settle(&mut self) {
        self.owner = None;
        self.other_side = None;
        self.earlier = false;
    }

    /// Settles after an attempt that was answered (taken, busy, or a
    /// definite error), unless an earlier call under the same owner id is
    /// still unknown.
    fn after(&mut self, attempt: &Result<Outcome, LockError>) {
        match attempt {
            Ok(Outcome::Taken(_)) => self.settle(),
            Ok(Outcome::Abandon(_)) => self.earlier = true,
            Err(err) if err.is_unavailable() => self.earlier = true,
            Ok(Outcome::Busy { .. }) | Err(_) if !self.earlier => self.settle(),
            Ok(Outcome::Busy { .. }) | Err(_) => {}
        }
    }
}

impl Drop for Unsettled<'_> {
    fn drop(&mut self) {
        if let Some(owner) = self.owner.take() {
            tracing::debug!(key = %self.request.label(), "acquire ended without knowing whether it was granted; giving back what it may hold");
            self.request.give_back_for(self.keys, owner);
        }
        if let Some(owner) = self.other_side.take() {
            tracing::debug!(key = %self.request.label(), "upgrade or downgrade ended without knowing whether it was granted; the enclosing hold gives it back");
            self.request.other_side_unsettled(self.keys, &owner);
        }
    }
}

/// What a waiter leaves in Redis while it waits, and takes back if it stops
/// waiting without the lock (timeout, error, or the caller dropping the
/// future), so that nobody is held back for a turn nobody takes. A waiter
/// that dies leaves what lapses by itself within its stay in line (half its
/// lease, from 250 ms to 3 s: see `fair_stay`).
#[derive(Debug, Clone, Copy)]
pub(super) enum Trace {
    /// The turn-taking marks of a waiting writer or reader (a writer
    /// waiting for readers holds new readers back; waiting readers hold
    /// back a writer that just let go).
    Marks,
    /// A fair waiter's place in line, which would hold up the waiters
    /// behind it.
    PlaceInLine,
}

/// A waiter's [`Trace`], taken back on drop unless the lock was taken.
pub(super) struct Waiting<'a> {
    request: &'a LockRequest,
    keys: &'a [LockKeys],
    owner: Arc<str>,
    trace: Trace,
    waiting: bool,
}

impl<'a> Waiting<'a> {
    pub(super) fn new(
        request: &'a LockRequest,
        keys: &'a [LockKeys],
        owner: &Arc<str>,
        trace: Trace,
    ) -> Self {
        Waiting {
            request,
            keys,
            owner: owner.clone(),
            trace,
            waiting: true,
        }
    }

    /// The lock was taken: the acquisition took the trace back itself.
    pub(super) fn taken(waiting: &mut Option<Self>) {
        if let Some(waiting) = waiting {
            waiting.waiting = false;
        }
    }

    /// Attempts go on under a new owner id: the old one's trace lapses.
    pub(super) fn new_owner(waiting: &mut Option<Self>, owner: &Arc<str>) {
        if let Some(waiting) = waiting {
            waiting.owner = owner.clone();
        }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if !self.waiting {
            return;
        }
        let backend = self.request.client.backend.clone();
        let (label, keys, owner, trace) = (
            self.request.label().to_owned(),
            self.keys.to_vec(),
            self.owner.clone(),
            self.trace,
        );
        let undo = {
            let label = label.clone();
            async move {
                match trace {
                    Trace::Marks => backend.leave_turns(&label, &keys, &owner).await,
                    Trace::PlaceInLine => backend.leave_line(&label, &keys[0], &owner).await,
                }
            }
        };
        let failed = match trace {
            Trace::Marks => "taking back a waiting mark failed; it lapses",
            Trace::PlaceInLine => "leaving the line failed; the place lapses",
        };
        undo_in_background(label, failed, undo);
    }
}

/// Runs `undo` on the current runtime, if there is one (without one, what it
/// would undo lapses by itself); a failure is logged as `failed`, with the
/// lock's name `key`.
fn undo_in_background(
    key: String,
    failed: &'static str,
    undo: impl Future<Output = Result<(), LockError>> + Send + 'static,
) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        if let Err(err) = undo.await {
            tracing::debug!(%key, error = %Chain(&err), "{failed}");
        }
    });
}
