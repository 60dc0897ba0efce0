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
            // The other party polls it right now: that poll's wake-ups,
            // and its end, wake this party too.
            Err(TryLockError::WouldBlock) => return Poll::Pending,
            // It panicked in the other party's poll (which got the panic):
            // it is over.
            Err(TryLockError::Poisoned(poisoned)) => {
                let mut slot = poisoned.into_inner();
                *slot = None;
                return self.finish();
            }
        };
        let Some(future) = slot.as_mut() else {
            return Poll::Ready(());
        };
        let waker = Waker::from(shared.wakers.clone());
        match future.as_mut().poll(&mut Context::from_waker(&waker)) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                *slot = None;
                drop(slot);
                self.finish()
            }
        }
    }

    /// Marks it done and wakes the party that did not finish it.
    fn finish(&self) -> Poll<()> {
        self.shared.done.store(true, Ordering::Release);
        Wake::wake_by_ref(&self.shared.wakers);
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
