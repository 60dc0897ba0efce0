//! A future that runs in its caller's task, and finishes in a task of its
//! own if the caller drops it midway.
//!
//! Some work must not stop with the caller that started it: a guard's last
//! release, a handoff whose waiters wait for their answers.
//! Spawning it costs a task switch (two, with the caller awaiting the
//! task) on every call; running it in place costs nothing more, and only a
//! caller that is dropped before it is done hands the rest to a task.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::future::BoxFuture;

/// Runs its future in place; dropped before the future is done, it spawns
/// the rest on the current runtime (without a runtime, the rest is dropped:
/// nothing can run it).
pub(crate) struct Detached<T: Send + 'static> {
    future: Option<BoxFuture<'static, T>>,
}

impl<T: Send + 'static> Detached<T> {
    pub(crate) fn new(future: impl Future<Output = T> + Send + 'static) -> Detached<T> {
        Detached {
            future: Some(Box::pin(future)),
        }
    }
}

impl<T: Send + 'static> Future for Detached<T> {
    type Output = T;

    /// # Panics
    ///
    /// When polled again after it returned its output, as any future may.
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        poll_in_place(
            &mut self.future,
            cx,
            "a Detached future is not polled after it is done",
        )
    }
}

/// Polls the future in `slot` in place, and empties the slot once it is
/// done: with its output, or with a panic, which is passed on. A future
/// that panicked is done too: it must not be spawned again by a `Drop`
/// that finishes what is left in the slot (it would only panic once more,
/// in a task of its own).
///
/// # Panics
///
/// When the slot is empty (polled after it is done), with `done` as the
/// message; and with the future's own panic.
pub(crate) fn poll_in_place<T>(
    slot: &mut Option<BoxFuture<'static, T>>,
    cx: &mut Context<'_>,
    done: &str,
) -> Poll<T> {
    let future = slot.as_mut().expect(done);
    match catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(cx))) {
        Ok(Poll::Pending) => Poll::Pending,
        Ok(ready) => {
            *slot = None;
            ready
        }
        Err(panic) => {
            *slot = None;
            resume_unwind(panic)
        }
    }
}

impl<T: Send + 'static> Drop for Detached<T> {
    fn drop(&mut self) {
        if let Some(future) = self.future.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            // Its output has no one to go to.
            runtime.spawn(async move {
                future.await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn runs_in_its_callers_task_and_gives_its_output() {
        let caller = tokio::spawn(async {
            let ran_in = Detached::new(async { tokio::task::id() }).await;
            (tokio::task::id(), ran_in)
        });
        let (caller, ran_in) = caller.await.unwrap();
        assert_eq!(caller, ran_in, "no task of its own");
    }

    #[test]
    fn a_future_that_panicked_is_not_run_again() {
        let mut detached = Detached::new(async { panic!("the future's own panic") });
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let polled = catch_unwind(AssertUnwindSafe(|| Pin::new(&mut detached).poll(&mut cx)));
        assert!(polled.is_err(), "the panic reaches the caller");
        assert!(detached.future.is_none(), "nothing left to spawn on drop");
    }

    #[tokio::test(start_paused = true)]
    async fn finishes_in_a_task_when_dropped_midway() {
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let detached = Detached::new(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            flag.store(true, Ordering::SeqCst);
        });
        // Polled once, then dropped while it sleeps.
        let _ = tokio::time::timeout(Duration::from_millis(10), detached).await;
        assert!(!done.load(Ordering::SeqCst));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(done.load(Ordering::SeqCst), "the rest ran in a task");
    }
}
