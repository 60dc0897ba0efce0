//! Waiters a release of their own client may hand a lock to.
//!
//! A task waiting for an exclusive lock *offers* to take it while it
//! sleeps. A task of the same client that releases that lock takes the
//! first offer and sends `handoff.lua` in place of its release: if the lock
//! becomes free, Redis gives it to the waiter in the same step, and the
//! waiter holds it when the answer comes, without being woken to try again.
//! Only waiters in this process can be handed a lock this way: the
//! releaser needs the waiter's owner id and lease, and the answer reaches
//! the waiter through memory, not through Redis.
//!
//! An offer is taken out of the queue by exactly one side: the releaser
//! (which then always answers it) or the waiter withdrawing it before it
//! tries again (which then gets no answer). A waiter that finds its offer
//! already taken waits for the answer instead of trying: trying meanwhile
//! under the same owner id would count as a re-entry.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

/// The answer to an offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// The lock is the waiter's, with this fencing token; its lease runs
    /// from no earlier than `sent`, when the handoff was sent.
    Handed { fence: u64, sent: Instant },
    /// The lock was not handed on (still held, kept, or others' turn): the
    /// waiter tries as usual.
    Declined,
    /// The handoff failed or was dropped while under way: the lock may or
    /// may not be the waiter's.
    Unknown,
}

/// Offers to take locks, by lock key, in the order they were made.
#[derive(Debug, Default)]
pub(crate) struct Offers {
    by_lock: Mutex<HashMap<String, VecDeque<Offer>>>,
    next_id: AtomicU64,
}

#[derive(Debug)]
struct Offer {
    id: u64,
    taker: Taker,
}

/// An offer taken by a releaser: whom to hand the lock to, and for how
/// long. Dropping it unanswered answers [`Answer::Unknown`].
#[derive(Debug)]
pub(crate) struct Taker {
    pub(crate) owner: Arc<str>,
    pub(crate) lease: Duration,
    answer: oneshot::Sender<Answer>,
}

impl Taker {
    /// Tells the waiter; `false` when it is gone (stopped waiting while
    /// the handoff was under way), so that a lock handed to it can be
    /// given back.
    pub(crate) fn answer(self, answer: Answer) -> bool {
        self.answer.send(answer).is_ok()
    }
}

/// A waiter's open offer; withdrawn when dropped.
pub(crate) struct Offered<'a> {
    offers: &'a Offers,
    key: String,
    id: u64,
    answer: oneshot::Receiver<Answer>,
}

impl Offers {
    fn by_lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, VecDeque<Offer>>> {
        // Only pushed to and taken from; a panic cannot leave it torn.
        self.by_lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Offers to take the lock `key` as `owner` for `lease`.
    pub(crate) fn offer(&self, key: &str, owner: &Arc<str>, lease: Duration) -> Offered<'_> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (answer, receiver) = oneshot::channel();
        let taker = Taker {
            owner: owner.clone(),
            lease,
            answer,
        };
        self.by_lock()
            .entry(key.to_owned())
            .or_default()
            .push_back(Offer { id, taker });
        Offered {
            offers: self,
            key: key.to_owned(),
            id,
            answer: receiver,
        }
    }

    /// The first open offer for the lock `key`, if any.
    pub(crate) fn take(&self, key: &str) -> Option<Taker> {
        let mut by_lock = self.by_lock();
        let queue = by_lock.get_mut(key)?;
        let offer = queue.pop_front();
        if queue.is_empty() {
            by_lock.remove(key);
        }
        offer.map(|offer| offer.taker)
    }

    /// Takes offer `id` out of the queue; `false` when a releaser took it.
    fn remove(&self, key: &str, id: u64) -> bool {
        let mut by_lock = self.by_lock();
        let Some(queue) = by_lock.get_mut(key) else {
            return false;
        };
        let before = queue.len();
        queue.retain(|offer| offer.id != id);
        let removed = queue.len() < before;
        if queue.is_empty() {
            by_lock.remove(key);
        }
        removed
    }
}

impl Offered<'_> {
    /// The releaser's answer, once one took the offer.
    pub(crate) async fn answered(&mut self) -> Answer {
        (&mut self.answer).await.unwrap_or(Answer::Unknown)
    }

    /// Withdraws the offer: `None` when it was still open (no answer will
    /// come), or the answer of the releaser that took it.
    pub(crate) async fn withdraw(mut self) -> Option<Answer> {
        if self.offers.remove(&self.key, self.id) {
            None
        } else {
            Some(self.answered().await)
        }
    }
}

impl Drop for Offered<'_> {
    fn drop(&mut self) {
        self.offers.remove(&self.key, self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn offers_are_taken_in_order_and_withdrawn_once() {
        let offers = Offers::default();
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let first = offers.offer("k", &a, Duration::from_secs(1));
        let second = offers.offer("k", &b, Duration::from_secs(2));
        let taker = offers.take("k").expect("an open offer");
        assert_eq!(&*taker.owner, "a");
        assert!(taker.answer(Answer::Declined));
        assert_eq!(first.withdraw().await, Some(Answer::Declined));
        assert_eq!(second.withdraw().await, None);
        assert!(offers.take("k").is_none());
    }

    #[tokio::test]
    async fn a_dropped_offer_is_gone_and_an_unanswered_one_is_unknown() {
        let offers = Offers::default();
        let owner: Arc<str> = "a".into();
        drop(offers.offer("k", &owner, Duration::from_secs(1)));
        assert!(offers.take("k").is_none());
        let offered = offers.offer("k", &owner, Duration::from_secs(1));
        drop(offers.take("k"));
        assert_eq!(offered.withdraw().await, Some(Answer::Unknown));
        let offered = offers.offer("k", &owner, Duration::from_secs(1));
        let taker = offers.take("k").expect("an open offer");
        drop(offered);
        assert!(!taker.answer(Answer::Declined));
    }
}
