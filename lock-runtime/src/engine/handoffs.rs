//! Waiters a release of their own client may hand a lock to.
//!
//! A task waiting for an exclusive or fair lock *offers* to take it while
//! it sleeps. A task of the same client that releases that lock takes the
//! open offers and sends `handoff.lua` in place of its release: if the lock
//! becomes free, Redis gives it to the waiter whose turn it is (the first
//! plain waiter; for a fair lock, the first in line if it is among them) in
//! the same step, and that waiter holds it when the answer comes, without
//! being woken to try again. Only waiters in this process can be handed a
//! lock this way: the releaser needs the waiter's owner id and lease, and
//! the answer reaches the waiter through memory, not through Redis.
//!
//! An offer is in one of three places: open (in its lock's queue), taken
//! (a handoff naming it is under way), or answered. A waiter withdraws an
//! open offer before it tries again; one that finds its offer taken waits
//! for the answer instead, since trying meanwhile under the same owner id
//! would count as a re-entry. Once the handoff's answer is in, the releaser
//! answers the waiter it was handed to, and every waiter when the call
//! failed; the other offers go back to their places in the queue (by
//! their order, see `insert_in_order`), without waking their waiters,
//! unless a waiter asked for its answer meanwhile.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

/// The most offers of fair waiters one release takes. They are kept in the
/// order their waiters got in line (see [`Offers::line_place`]), so the
/// first in line, when it is this client's and sleeping, is the first of
/// them; the others cover places whose answers came back in another order
/// than Redis made them. Each offer taken is three arguments more to the
/// handoff call, which Redis reads on its one thread (with 16, a contended
/// fair lock made about 5 % fewer acquisitions a second than with 2).
const MOST_TAKEN: usize = 3;

/// The most offers of fair waiters not in line yet one release takes, to
/// put them in line (see [`Offers::offer`]).
const MOST_JOINING: usize = 8;

/// The answer to an offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// The lock is the waiter's, with this fencing token; its lease runs
    /// from no earlier than `sent`, when the handoff was sent.
    Handed { fence: u64, sent: Instant },
    /// The lock was not handed on (still held, kept, or not this waiter's
    /// turn): a plain waiter tries as usual; a fair one waits on, as a
    /// release names the first in line.
    Declined,
    /// The lock was handed to another waiter of this client: still taken,
    /// so the waiter waits on without trying.
    Passed,
    /// The handoff failed or was dropped while under way: the lock may or
    /// may not be the waiter's.
    Unknown,
    /// A fair waiter that was not in line yet: the handoff put it in line,
    /// and did not hand it the lock. `taken`: it handed the lock to another
    /// waiter of this client, so the lock is still taken and the waiter
    /// waits on, as [`Passed`](Answer::Passed); otherwise it tries at once,
    /// as [`Declined`](Answer::Declined) (the lock may be free: kept past
    /// its release, the releaser's lease run out, or another's turn).
    InLine { taken: bool },
}

/// Offers to take locks, by lock key: a fair waiter's by its place in line
/// ([`Offers::line_place`]), the others in the order they were made.
#[derive(Debug, Default)]
pub(crate) struct Offers {
    places: Mutex<Places>,
    next_id: AtomicU64,
}

#[derive(Debug, Default)]
struct Places {
    /// Open offers, by lock key.
    open: HashMap<String, VecDeque<Offer>>,
    /// Taken offers, by id: whether their waiter wants its answer (it
    /// would have withdrawn the offer to try again).
    taken: HashMap<u64, bool>,
}

/// A waiter's offer: whom to hand the lock to, and for how long.
#[derive(Debug)]
pub(crate) struct Offer {
    id: u64,
    pub(crate) owner: Arc<str>,
    pub(crate) lease: Duration,
    /// A fair waiter, served in its line's order.
    pub(crate) fair: bool,
    /// Where it goes in its lock's queue: a fair waiter's place in line
    /// among this client's waiters, a plain one's the offer's own number.
    order: u64,
    /// A fair waiter not in line yet, which the handoff puts in line, to
    /// stay this long without trying again.
    pub(crate) joining: Option<Duration>,
    /// Put in line by a handoff that did not hand it the lock: what its
    /// waiter is told when it withdraws the offer.
    lined: Option<Answer>,
    /// Dropped unanswered, it answers [`Answer::Unknown`].
    answer: oneshot::Sender<Answer>,
}

/// What gives back, in the background, whatever an owner id may hold of
/// the lock an offer was for.
pub(crate) type GiveBack<'a> = &'a (dyn Fn(Arc<str>) + Sync);

/// A waiter's open offer; withdrawn when dropped. Dropped with an answer
/// that says the lock may be the waiter's, unread, it gives the lock back.
pub(crate) struct Offered<'a> {
    offers: &'a Offers,
    key: String,
    id: u64,
    owner: Arc<str>,
    answer: oneshot::Receiver<Answer>,
    give_back: GiveBack<'a>,
}

impl Offers {
    fn places(&self) -> std::sync::MutexGuard<'_, Places> {
        // Offers are only moved between the maps; a panic cannot leave
        // one half moved.
        self.places.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A fair waiter's place in line among this client's waiters, drawn
    /// once its first attempt put it in line (places drawn in the order
    /// those attempts' answers came, which is the order Redis made them
    /// when they came on one connection), or, for a waiter that gets in
    /// line with a release of its client and made no attempt, when it
    /// starts waiting: behind every waiter of the client in line by then.
    pub(crate) fn line_place(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Offers to take the lock `key` as `owner` for `lease`, as a fair
    /// waiter with its [`line_place`](Self::line_place) or a plain one
    /// (`None`); `give_back` is called if the offer is dropped with an
    /// unread answer that says the lock may be `owner`'s. A plain offer
    /// goes after every other; a fair one by its place in line, so that a
    /// waiter that tried again (and offered anew) keeps its turn.
    ///
    /// A fair waiter that is not in line yet (`joining`, with its stay in
    /// line) asks the release to put it in line first: a waiter that comes
    /// while a task of its client holds the lock gets in line with that
    /// task's release, in the same call, instead of a call of its own.
    pub(crate) fn offer<'a>(
        &'a self,
        key: &str,
        owner: &Arc<str>,
        (lease, line, joining): (Duration, Option<u64>, Option<Duration>),
        give_back: GiveBack<'a>,
    ) -> Offered<'a> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let order = line.unwrap_or(id);
        let (answer, receiver) = oneshot::channel();
        let offer = Offer {
            id,
            owner: owner.clone(),
            lease,
            fair: line.is_some(),
            order,
            joining: joining.filter(|_| line.is_some()),
            lined: None,
            answer,
        };
        let mut places = self.places();
        insert_in_order(places.open.entry(key.to_owned()).or_default(), offer);
        Offered {
            offers: self,
            key: key.to_owned(),
            id,
            owner: owner.clone(),
            answer: receiver,
            give_back,
        }
    }

    /// Takes the open offers for the lock `key` that a release of a fair
    /// lock (`fair`) or a plain one may hand it to, in their order: of fair
    /// waiters in line, at most [`MOST_TAKEN`] (the first in line is among
    /// them, or the lock is not handed on), and of those not in line yet,
    /// at most [`MOST_JOINING`]; of plain ones, the first. Each must be
    /// [`settle`](Self::settle)d.
    pub(crate) fn take(&self, key: &str, fair: bool) -> Vec<Offer> {
        let (most, most_joining) = if fair {
            (MOST_TAKEN, MOST_JOINING)
        } else {
            (1, 0)
        };
        let mut places = self.places();
        let Some(queue) = places.open.get_mut(key) else {
            return Vec::new();
        };
        let mut taken = Vec::new();
        let (mut lined, mut joining) = (0, 0);
        let mut i = 0;
        while i < queue.len() && (lined < most || joining < most_joining) {
            let offer = &queue[i];
            let take = offer.fair == fair
                && if offer.joining.is_some() {
                    joining < most_joining
                } else {
                    lined < most
                };
            if take {
                if let Some(offer) = queue.remove(i) {
                    if offer.joining.is_some() {
                        joining += 1;
                    } else {
                        lined += 1;
                    }
                    taken.push(offer);
                }
            } else {
                i += 1;
            }
        }
        if queue.is_empty() {
            places.open.remove(key);
        }
        for offer in &taken {
            places.taken.insert(offer.id, false);
        }
        taken
    }

    /// Settles the offers `taken` for the lock `key` once the handoff's
    /// outcome is known: `answer` for each offer's index. Offers answered
    /// [`Passed`](Answer::Passed) or [`Declined`](Answer::Declined) go back
    /// to their places in the queue unanswered, unless their waiter asked for
    /// its answer or is gone; those of waiters the handoff put in line go
    /// back in line ([`InLine`](Answer::InLine)). Returns the owner ids of
    /// the waiters that are gone although the lock may be theirs, or their
    /// place in line that the handoff made, to give it back for them.
    pub(crate) fn settle(
        &self,
        key: &str,
        taken: Vec<Offer>,
        answer: impl Fn(usize) -> Answer,
    ) -> Vec<Arc<str>> {
        let mut gone = Vec::new();
        let mut back = Vec::new();
        let mut places = self.places();
        for (i, mut offer) in taken.into_iter().enumerate() {
            let wants = places.taken.remove(&offer.id).unwrap_or(true);
            let answer = match answer(i) {
                Answer::Passed if offer.joining.is_some() => Answer::InLine { taken: true },
                Answer::Declined if offer.joining.is_some() => Answer::InLine { taken: false },
                answer => answer,
            };
            match answer {
                answer @ (Answer::Handed { .. } | Answer::Unknown) => {
                    let owner = offer.owner.clone();
                    if offer.answer.send(answer).is_err() {
                        gone.push(owner);
                    }
                }
                // A waiter that stopped waiting (its offer dropped) wants
                // its answer too, and is gone.
                answer if wants => {
                    let owner = offer.owner.clone();
                    let in_line = matches!(answer, Answer::InLine { .. });
                    if offer.answer.send(answer).is_err() && in_line {
                        gone.push(owner);
                    }
                }
                _ if offer.answer.is_closed() => {}
                answer @ Answer::InLine { .. } => {
                    offer.joining = None;
                    offer.lined = Some(answer);
                    back.push(offer);
                }
                _ => back.push(offer),
            }
        }
        if !back.is_empty() {
            let queue = places.open.entry(key.to_owned()).or_default();
            for offer in back {
                insert_in_order(queue, offer);
            }
        }
        gone
    }

    /// Takes offer `id` out of the queue, when it was open: with what a
    /// handoff that put its waiter in line meanwhile said, if one did.
    /// `None` when it is taken (marked as wanting its answer) or answered
    /// already.
    fn withdraw(&self, key: &str, id: u64) -> Option<Option<Answer>> {
        let mut places = self.places();
        if let Some(wants) = places.taken.get_mut(&id) {
            *wants = true;
            return None;
        }
        let queue = places.open.get_mut(key)?;
        let at = queue.iter().position(|offer| offer.id == id)?;
        let lined = queue.remove(at).and_then(|offer| offer.lined);
        if queue.is_empty() {
            places.open.remove(key);
        }
        Some(lined)
    }
}

/// Puts `offer` in `queue` by its order, after the offers of the same order:
/// an offer taken and given back goes back to its place (the front, for
/// the first ones), and a fair waiter's new offer to its place in line.
fn insert_in_order(queue: &mut VecDeque<Offer>, offer: Offer) {
    let at = queue
        .iter()
        .rposition(|other| other.order <= offer.order)
        .map_or(0, |i| i + 1);
    queue.insert(at, offer);
}

impl Offered<'_> {
    /// The releaser's answer, once one took the offer and answered it.
    pub(crate) async fn answered(&mut self) -> Answer {
        (&mut self.answer).await.unwrap_or(Answer::Unknown)
    }

    /// Withdraws the offer: `None` when it was open (no answer will come;
    /// [`InLine`](Answer::InLine) when a handoff put its waiter in line
    /// meanwhile), or the answer of the releaser that took it (awaited,
    /// when it has not come yet).
    pub(crate) async fn withdraw(mut self) -> Option<Answer> {
        match self.offers.withdraw(&self.key, self.id) {
            Some(lined) => lined,
            None => Some(self.answered().await),
        }
    }
}

impl Drop for Offered<'_> {
    fn drop(&mut self) {
        self.take_back();
    }
}

impl Offered<'_> {
    /// Takes the offer back as its waiter stops waiting (see `Drop`): a
    /// taken offer is settled by its releaser, which finds this waiter
    /// gone, and an answer that came unread is acted on.
    fn take_back(&mut self) {
        {
            let mut places = self.offers.places();
            places.taken.remove(&self.id);
            if let Some(queue) = places.open.get_mut(&self.key) {
                queue.retain(|offer| offer.id != self.id);
                if queue.is_empty() {
                    places.open.remove(&self.key);
                }
            }
        }
        // Closed first: a releaser that answers from now on finds the
        // waiter gone (and gives back or retires what it handed), rather
        // than delivering an answer that is dropped unread with the
        // receiver, between the look below and the end of this drop.
        self.answer.close();
        // Answered, but the waiter never read it: the lock may be its.
        if let Ok(Answer::Handed { .. } | Answer::Unknown) = self.answer.try_recv() {
            (self.give_back)(self.owner.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(name: &str) -> Arc<str> {
        name.into()
    }

    static NOTHING: fn(Arc<str>) = |_| {};

    #[tokio::test]
    async fn an_offer_dropped_with_its_grant_unread_gives_the_lock_back() {
        let offers = Offers::default();
        let given_back = Mutex::new(Vec::new());
        let record = |owner: Arc<str>| given_back.lock().unwrap().push(owner);
        let lease = Duration::from_secs(1);
        let offered = offers.offer("k", &owner("a"), (lease, None, None), &record);
        let taken = offers.take("k", false);
        let sent = Instant::now();
        let gone = offers.settle("k", taken, |_| Answer::Handed { fence: 1, sent });
        assert!(gone.is_empty(), "the answer was delivered");
        drop(offered);
        assert_eq!(*given_back.lock().unwrap(), [owner("a")]);
        // Read, it is the waiter's to hold: nothing is given back.
        let mut offered = offers.offer("k", &owner("b"), (lease, None, None), &record);
        let taken = offers.take("k", false);
        offers.settle("k", taken, |_| Answer::Handed { fence: 2, sent });
        assert_eq!(offered.answered().await, Answer::Handed { fence: 2, sent });
        drop(offered);
        assert_eq!(given_back.lock().unwrap().len(), 1);
    }

    /// A releaser that answers a taken offer while its waiter is dropping
    /// it (after the drop looked for an answer, before the receiver went)
    /// finds the waiter gone: the lock it hands is given back by the
    /// releaser, not dropped unread with the receiver.
    #[tokio::test]
    async fn an_offer_answered_while_it_is_dropped_counts_as_gone() {
        let offers = Offers::default();
        let lease = Duration::from_secs(1);
        let mut offered = offers.offer("k", &owner("a"), (lease, None, None), &NOTHING);
        let taken = offers.take("k", false);
        // The drop's work, with the offer still alive: the moment between
        // its look for an answer and the receiver's end.
        offered.take_back();
        let sent = Instant::now();
        let gone = offers.settle("k", taken, |_| Answer::Handed { fence: 1, sent });
        assert_eq!(gone, [owner("a")], "the handed lock went unread");
        drop(offered);
    }

    #[tokio::test]
    async fn offers_are_taken_in_order_and_others_go_back_unanswered() {
        let offers = Offers::default();
        let lease = Duration::from_secs(1);
        let (a, b) = (offers.line_place(), offers.line_place());
        let mut first = offers.offer("k", &owner("a"), (lease, Some(a), None), &NOTHING);
        let plain = offers.offer("k", &owner("p"), (lease, None, None), &NOTHING);
        let second = offers.offer("k", &owner("b"), (lease, Some(b), None), &NOTHING);
        // A fair lock's release takes the fair offers; a plain one's, the
        // first plain offer.
        let taken = offers.take("k", true);
        let names: Vec<_> = taken.iter().map(|o| &*o.owner).collect();
        assert_eq!(names, ["a", "b"]);
        assert!(
            offers.take("k", true).is_empty(),
            "taken offers are not open"
        );
        let sent = Instant::now();
        let handed = |i| match i {
            0 => Answer::Handed { fence: 7, sent },
            _ => Answer::Passed,
        };
        assert!(offers.settle("k", taken, handed).is_empty());
        assert_eq!(first.answered().await, Answer::Handed { fence: 7, sent });
        // The second went back, open, and is withdrawn without an answer.
        assert_eq!(second.withdraw().await, None);
        let taken = offers.take("k", false);
        assert_eq!(taken.iter().map(|o| &*o.owner).collect::<Vec<_>>(), ["p"]);
        assert!(offers.settle("k", taken, |_| Answer::Declined).is_empty());
        assert_eq!(plain.withdraw().await, None);
        assert!(offers.take("k", false).is_empty());
    }

    #[tokio::test]
    async fn fair_offers_go_by_place_in_line_and_a_release_takes_the_first_few() {
        let offers = Offers::default();
        let lease = Duration::from_secs(1);
        let places: Vec<u64> = (0..5).map(|_| offers.line_place()).collect();
        let names = ["a", "b", "c", "d", "e"];
        // They offer in another order than they got in line.
        let mut offered: Vec<_> = [4, 2, 0, 3, 1]
            .into_iter()
            .map(|i| {
                let offer = (lease, Some(places[i]), None);
                (i, offers.offer("k", &owner(names[i]), offer, &NOTHING))
            })
            .collect();
        // The first in line tries again, offering anew: it keeps its turn.
        let at = offered.iter().position(|(i, _)| *i == 0).unwrap();
        let (_, first) = offered.remove(at);
        assert_eq!(first.withdraw().await, None);
        let _first = offers.offer("k", &owner("a"), (lease, Some(places[0]), None), &NOTHING);
        let taken = offers.take("k", true);
        let taken_names: Vec<_> = taken.iter().map(|o| &*o.owner).collect();
        assert_eq!(taken_names, ["a", "b", "c"]);
        assert!(offers.settle("k", taken, |_| Answer::Declined).is_empty());
        // Back at the front, in their order.
        let taken = offers.take("k", true);
        let taken_names: Vec<_> = taken.iter().map(|o| &*o.owner).collect();
        assert_eq!(taken_names, ["a", "b", "c"]);
        drop(taken);
    }

    #[tokio::test]
    async fn a_waiter_not_in_line_yet_is_put_in_line_by_the_handoff() {
        let offers = Offers::default();
        let (lease, stay) = (Duration::from_secs(1), Some(Duration::from_millis(500)));
        let places: Vec<u64> = (0..5).map(|_| offers.line_place()).collect();
        let offer = |i: usize, joining| {
            let name = ["a", "b", "c", "d", "e"][i];
            offers.offer(
                "k",
                &owner(name),
                (lease, Some(places[i]), joining),
                &NOTHING,
            )
        };
        // Four in line, then one that is not yet.
        let lined: Vec<_> = (0..4).map(|i| offer(i, None)).collect();
        let joining = offer(4, stay);
        let taken = offers.take("k", true);
        let joins: Vec<_> = taken.iter().map(|o| (&*o.owner, o.joining)).collect();
        assert_eq!(
            joins,
            [("a", None), ("b", None), ("c", None), ("e", stay)],
            "the first three in line, and the one to put in line"
        );
        // The lock went to the first. The others go back to their places:
        // the one put in line after the fourth, as one in line now.
        let sent = Instant::now();
        let handed = |i| match i {
            0 => Answer::Handed { fence: 1, sent },
            _ => Answer::Passed,
        };
        assert!(offers.settle("k", taken, handed).is_empty());
        let taken = offers.take("k", true);
        let names: Vec<_> = taken.iter().map(|o| (&*o.owner, o.joining)).collect();
        assert_eq!(names, [("b", None), ("c", None), ("d", None)]);
        assert!(offers.settle("k", taken, |_| Answer::Passed).is_empty());
        let taken = offers.take("k", true);
        assert_eq!(taken.len(), 3);
        assert!(offers.settle("k", taken, |_| Answer::Passed).is_empty());
        // It is told when it withdraws its offer.
        assert_eq!(
            joining.withdraw().await,
            Some(Answer::InLine { taken: true })
        );
        drop(lined);

        // One that stopped waiting after the handoff put it in line is
        // reported, to take it out of the line.
        let joining = offer(4, stay);
        let taken = offers.take("k", true);
        drop(joining);
        assert_eq!(
            offers.settle("k", taken, |_| Answer::Declined),
            [owner("e")]
        );
    }

    #[tokio::test]
    async fn a_waiter_that_withdraws_an_answered_offer_gets_its_answer() {
        let offers = Offers::default();
        let lease = Duration::from_secs(1);
        let offered = offers.offer("k", &owner("a"), (lease, None, None), &NOTHING);
        let taken = offers.take("k", false);
        let sent = Instant::now();
        offers.settle("k", taken, |_| Answer::Handed { fence: 3, sent });
        // Answered before it withdrew: the answer is not lost (the lock is
        // its own, and it would otherwise try again under the same owner).
        assert_eq!(
            offered.withdraw().await,
            Some(Answer::Handed { fence: 3, sent })
        );
    }

    #[tokio::test]
    async fn a_waiter_that_withdraws_a_taken_offer_gets_its_answer() {
        let offers = Offers::default();
        let lease = Duration::from_secs(1);
        let offered = offers.offer("k", &owner("a"), (lease, None, None), &NOTHING);
        let taken = offers.take("k", false);
        let (answer, settled) = tokio::join!(offered.withdraw(), async {
            tokio::task::yield_now().await;
            offers.settle("k", taken, |_| Answer::Declined)
        });
        assert!(settled.is_empty());
        assert_eq!(answer, Some(Answer::Declined));
    }

    #[tokio::test]
    async fn a_gone_waiter_that_may_hold_the_lock_is_reported() {
        let offers = Offers::default();
        let lease = Duration::from_secs(1);
        drop(offers.offer("k", &owner("a"), (lease, None, None), &NOTHING));
        assert!(
            offers.take("k", false).is_empty(),
            "a dropped offer is withdrawn"
        );
        let offered = offers.offer("k", &owner("a"), (lease, None, None), &NOTHING);
        let taken = offers.take("k", false);
        drop(offered);
        let gone = offers.settle("k", taken, |_| Answer::Unknown);
        assert_eq!(gone, [owner("a")]);
        let offered = offers.offer("k", &owner("b"), (lease, None, None), &NOTHING);
        let taken = offers.take("k", false);
        drop(offered);
        assert!(offers.settle("k", taken, |_| Answer::Passed).is_empty());
        assert!(
            offers.take("k", false).is_empty(),
            "a gone waiter's offer is dropped"
        );
        // Dropping the taken offers unsettled answers Unknown.
        let offered = offers.offer("k", &owner("c"), (lease, None, None), &NOTHING);
        drop(offers.take("k", false));
        assert_eq!(offered.withdraw().await, Some(Answer::Unknown));
    }
}
