//! A future that two parties may drive: whoever polls it moves it on, and
//! either one's poll is enough for it to finish.
//!
//! A call sent alone by a caller's future is driven by that future; when
//! the caller stops polling (a `select!` branch no longer polled, a
//! `buffer_unordered` under back-pressure), another party (the lane's
//! sender, see `store/coalesce.rs`) drives it instead. `futures`' `Shared`
//! does this for any number of parties, but keeps their wakers behind a
//! mutex that the thread delivering the reply holds while it wakes them:
//! the caller, woken, blocks on that mutex at once, which costs two system
//! calls and a thread switch per call. Here each party has a slot of its
//! own ([`AtomicWaker`]), and a wake-up wakes both slots without a lock.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::future::BoxFuture;
use futures_util::task::AtomicWaker;

/// Who drives a [`Flight`]: each has its own waker slot, so there are at
/// most two parties waiting (a role may be taken over: a task that takes
/// over a dropped caller's flight drives it as the caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Party {
    /// The future that started it.
    Caller,
    /// The one that drives it when the caller does not.
    Other,
}

/// A future of `()` that [`Party::Caller`] and [`Party::Other`] may both
/// drive (see the module's documentation). Clones share it.
#[derive(Clone)]
pub(crate) struct Flight {
    shared: Arc<Shared>,
}

struct Shared {
    /// The future, until it is done; locked only while one party polls it.
    future: Mutex<Option<BoxFuture<'static, ()>>>,
    done: AtomicBool,
    /// An `Arc` of their own, not `Shared` itself as the waker: the future
    /// keeps the waker it is polled with (in the reply's channel), and a
    /// waker that owned the future would keep a flight that both parties
    /// dropped unfinished alive for good.
    wakers: Arc<Wakers>,
}

/// The parties' wakers. The future is polled with a waker that wakes both.
#[derive(Default)]
struct Wakers {
    caller: AtomicWaker,
    other: AtomicWaker,
}

impl Wake for Wakers {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.caller.wake();
        self.other.wake();
    }
}

impl Flight {
    pub(crate) fn new(future: impl Future<Output = ()> + Send + 'static) -> Flight {
        Flight {
            shared: Arc::new(Shared {
                future: Mutex::new(Some(Box::pin(future))),
                done: AtomicBool::new(false),
                wakers: Arc::default(),
            }),
        }
    }

    /// The future `party` awaits to drive it to its end.
    pub(crate) fn driven_by(self, party: Party) -> Driven {
        Driven {
            flight: self,
            party,
        }
    }

    fn poll_by(&self, party: Party, cx: &mut Context<'_>) -> Poll<()> {
        let shared = &*self.shared;
        // Registered before looking: a wake-up from here on reaches this
        // party, whoever polls the future meanwhile.
        match party {
            Party::Caller => shared.wakers.caller.register(cx.waker()),
            Party::Other => shared.wakers.other.register(cx.waker()),
        }
        if shared.done.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        let mut slot = match shared.future.try_lock() {
            Ok(slot) => slot,
            // The other party polls it right now. A wake-up that comes
            // during that poll may already have been spent on this party
            // (woken, it found the future locked), and the other party may
            // never be polled again: this party polls again as soon as it
            // can, which is as soon as that poll ends (a poll does not
            // wait for anything).
            Err(TryLockError::WouldBlock) => {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            // A poll panicked without finishing it (see below): it is over.
            Err(TryLockError::Poisoned(poisoned)) => {
                let mut slot = poisoned.into_inner();
                *slot = None;
                return self.finish(party);
            }
        };
        let Some(future) = slot.as_mut() else {
            return Poll::Ready(());
        };
        let waker = Waker::from(shared.wakers.clone());
        let polled = catch_unwind(AssertUnwindSafe(|| {
            future.as_mut().poll(&mut Context::from_waker(&waker))
        }));
        match polled {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(())) => {
                *slot = None;
                drop(slot);
                self.finish(party)
            }
            // The panic goes to this party; the other is told it is over.
            Err(panic) => {
                *slot = None;
                drop(slot);
                let _ = self.finish(party);
                resume_unwind(panic)
            }
        }
    }

    /// Marks it done and wakes the party that did not finish it.
    fn finish(&self, by: Party) -> Poll<()> {
        let shared = &*self.shared;
        shared.done.store(true, Ordering::Release);
        match by {
            Party::Caller => shared.wakers.other.wake(),
            Party::Other => shared.wakers.caller.wake(),
        }
        Poll::Ready(())
    }
}

/// A [`Flight`] driven by one party: ready when the flight is done.
pub(crate) struct Driven {
    flight: Flight,
    party: Party,
}

impl Future for Driven {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.flight.poll_by(self.party, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Polls `driven` once, with the test task's waker.
    async fn poll_once(driven: &mut Driven) -> Poll<()> {
        std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *driven).poll(cx))).await
    }

    use tokio::sync::oneshot;

    #[tokio::test]
    async fn the_other_party_finishes_what_the_caller_stopped_polling() {
        let (go, gone) = oneshot::channel::<()>();
        let (done, finished) = oneshot::channel();
        let flight = Flight::new(async move {
            let _ = gone.await;
            let _ = done.send(());
        });
        let mut caller = flight.clone().driven_by(Party::Caller);
        // Polled once by its caller, which then stops polling it.
        let polled = poll_once(&mut caller).await;
        assert!(polled.is_pending());
        let other = tokio::spawn(flight.driven_by(Party::Other));
        go.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), other)
            .await
            .expect("driven to its end by the other party")
            .unwrap();
        assert!(finished.await.is_ok(), "the future ran to its end");
        assert!(poll_once(&mut caller).await.is_ready());
    }

    /// A waker that counts its wake-ups.
    #[derive(Default)]
    struct Count(std::sync::atomic::AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_wake_up_spent_while_the_other_party_polls_is_not_lost() {
        // The reply comes while the caller polls the future, and wakes the
        // other party, which finds the future locked; the caller's poll
        // then ends, and the caller is never polled again.
        let other: Arc<Mutex<Option<Driven>>> = Arc::default();
        let woken = Arc::new(Count::default());
        let other_waker = Waker::from(woken.clone());
        let (inside, reply) = (other.clone(), Arc::new(AtomicBool::new(false)));
        let replied = reply.clone();
        let waker_inside = other_waker.clone();
        let flight = Flight::new(std::future::poll_fn(move |cx| {
            if replied.load(Ordering::SeqCst) {
                return Poll::Ready(());
            }
            replied.store(true, Ordering::SeqCst);
            cx.waker().wake_by_ref();
            let mut other = inside.lock().unwrap();
            let other = other.as_mut().unwrap();
            let polled = Pin::new(other).poll(&mut Context::from_waker(&waker_inside));
            assert!(polled.is_pending(), "locked by the caller's poll");
            Poll::Pending
        }));
        *other.lock().unwrap() = Some(flight.clone().driven_by(Party::Other));
        let mut caller = flight.driven_by(Party::Caller);
        let noop = Waker::noop();
        let polled = Pin::new(&mut caller).poll(&mut Context::from_waker(noop));
        assert!(polled.is_pending());
        let before = woken.0.load(Ordering::SeqCst);
        assert!(before > 0, "the other party is told to poll again");
        let mut other = other.lock().unwrap().take().unwrap();
        let polled = Pin::new(&mut other).poll(&mut Context::from_waker(&other_waker));
        assert!(polled.is_ready(), "the other party finishes it");
    }

    #[tokio::test]
    async fn either_party_is_woken_when_the_other_finishes_it() {
        let (go, gone) = oneshot::channel::<()>();
        let flight = Flight::new(async move {
            let _ = gone.await;
        });
        let mut other = flight.clone().driven_by(Party::Other);
        assert!(poll_once(&mut other).await.is_pending());
        let caller = tokio::spawn(flight.driven_by(Party::Caller));
        go.send(()).unwrap();
        caller.await.unwrap();
        // Woken by the caller's end, without polling the future itself.
        tokio::time::timeout(Duration::from_secs(5), other)
            .await
            .expect("woken when the caller finished it");
    }
}
