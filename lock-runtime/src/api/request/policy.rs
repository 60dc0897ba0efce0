//! How a request waits, by kind of lock: what it leaves in Redis while it
//! waits, which release wakes it, and whether it may be handed the lock.
//! The acquisition's steps (`begin` and `try_first`, and the wait in
//! `wait.rs`) ask these, and nothing else there looks at the kind.

use std::sync::Arc;

use crate::base::keys::LockKeys;
use crate::base::kind::Kind;
use crate::engine::wakeups::Wake;

use super::LockRequest;

impl LockRequest {
    /// Whether a waiter marks its turn: a writer waiting for readers holds
    /// new readers back, waiting readers hold back a writer that just let
    /// go (see acquire.lua and read_acquire.lua).
    pub(super) fn marks_turns(&self) -> bool {
        !self.wait.is_zero() && matches!(self.kind, Kind::Exclusive | Kind::Read)
    }

    /// Whether a fair waiter's first attempt puts it in line (fair_acquire.lua).
    pub(super) fn waits_in_line(&self) -> bool {
        self.kind == Kind::Fair
    }

    /// Whether the request queues behind this process's waiters for the
    /// lock without trying first. Tasks of this process already waiting (or
    /// registered for their turn and making their first attempt) go
    /// first: a newcomer (often the task that just released it) that tried
    /// at once would take it from under the waiter the release is waking,
    /// which then starts over at the back. So the newcomer is woken in
    /// turn. A task re-entering (`reentry`) a lock it holds goes straight
    /// in: the waiters wait for it. Only waiters woken in turn count:
    /// waiting for this lock alone, one of them is woken by its release.
    /// A waiter for several locks (or a reader) may wait for another one,
    /// with this one free and nobody to release it.
    pub(super) fn queues_behind(&self, keys: &[LockKeys], reentry: bool) -> bool {
        !self.wait.is_zero()
            && !reentry
            && self.kind == Kind::Exclusive
            && keys.len() == 1
            && self.client.wakeups.has_live_waiters_in_turn(&keys[0].lock)
    }

    /// Whether a fair waiter gets in line with a release of this client
    /// instead of a first attempt of its own: when tasks of this client
    /// already wait for the lock, one of them (or the task that holds it)
    /// is about to release it, and a release that hands the lock on (see
    /// `handoffs.rs`) puts the newcomer in line in the same call. Under
    /// contention within one process (workers of a queue taking the same
    /// lock), that is one call to Redis per turn instead of two. A
    /// newcomer that no release takes within `JOIN_WITHIN` gets in line
    /// by itself.
    pub(super) fn joins_with_release(&self, keys: &[LockKeys], reentry: bool) -> bool {
        !self.wait.is_zero()
            && self.waits_in_line()
            && self.takes_handoffs(keys, reentry)
            && self.has_local_waiters(&keys[0])
    }

    /// Whether a waiter for one exclusive or fair lock registers for its
    /// turn before its first attempt: for a lock whose channel this client
    /// has subscribed (others wait for it here, or did a moment ago), a
    /// release right after that attempt put it in line still wakes it, so
    /// it need not try again at once to find out, as a waiter that
    /// subscribes only then must (unless a release may have gone by unseen
    /// meanwhile: see `Watch::undisturbed`). Not a re-entry, which waits for a lock
    /// its own critical section holds only when that was lost.
    pub(super) fn registers_early(&self, keys: &[LockKeys], reentry: bool) -> bool {
        !self.wait.is_zero()
            && !reentry
            && matches!(self.kind, Kind::Exclusive | Kind::Fair)
            && keys.len() == 1
            && self.client.wakeups.is_subscribed(&keys[0].lock)
    }

    /// Which releases wake the waiter `owner`.
    pub(super) fn wake(&self, keys: &[LockKeys], owner: &Arc<str>) -> Wake {
        match self.kind {
            // A fair waiter is woken when a release names it.
            Kind::Fair => Wake::Named(owner.clone()),
            // Readers may all go in at once: each is woken by every release;
            // so is a waiter for several locks, which may find one still taken,
            // and one for several permits, which may find too few free (and
            // must not swallow the wake-up of a waiter for one: a release
            // sends one per permit freed).
            Kind::Read => Wake::Every,
            Kind::Permits(permits) if permits.take > 1 => Wake::Every,
            _ if keys.len() > 1 => Wake::Every,
            _ => Wake::One,
        }
    }

    /// Whether the waiter offers, while it sleeps, to be handed the lock
    /// by a release of this client (see `handoffs.rs`): a waiter for one
    /// exclusive or fair lock under an owner id of its own (not a
    /// `reentry`), without replicas to confirm the grant, when the backend
    /// hands locks on. Its grant then comes from the release.
    pub(super) fn takes_handoffs(&self, keys: &[LockKeys], reentry: bool) -> bool {
        let inner = &self.client;
        matches!(self.kind, Kind::Exclusive | Kind::Fair)
            && keys.len() == 1
            && !reentry
            && inner.config.replicas(self.replicas).is_none()
            && inner.backend.hands_on()
    }

    /// Whether tasks of this client wait for `lock` now.
    fn has_local_waiters(&self, lock: &LockKeys) -> bool {
        let wakeups = &self.client.wakeups;
        wakeups.has_live_waiters(&lock.lock)
    }
}
