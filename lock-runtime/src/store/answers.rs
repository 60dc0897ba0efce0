//! Whether a store answers again after calls to it went unanswered, so
//! that work waiting out an outage (a give-back sent again, see
//! `Backend::retire`) goes on as soon as the outage ends rather than after
//! a pause that grew while it lasted. While such work waits, the store is
//! asked whether it answers again (see `Node::probe`), for a client that
//! makes no other call.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::watch;

/// A store's answers, as its calls report them: each answer that follows
/// calls left unanswered (timed out, or a connection that failed) starts a
/// new round of answers, which every [`AnsweringAgain`] hears of.
#[derive(Debug)]
pub(crate) struct Answers {
    /// A call went unanswered since the last answer.
    unanswered: AtomicBool,
    /// How many times the store answered again.
    again: watch::Sender<u64>,
    /// A probe asks the store whether it answers again (see
    /// [`start_probing`](Self::start_probing)).
    probing: AtomicBool,
}

impl Default for Answers {
    fn default() -> Self {
        Answers {
            unanswered: AtomicBool::new(false),
            again: watch::Sender::new(0),
            probing: AtomicBool::new(false),
        }
    }
}

impl Answers {
    /// A call got no answer (a timeout, a connection that failed).
    pub(crate) fn unanswered(&self) {
        self.unanswered.store(true, Ordering::Release);
    }

    /// A call was answered (an error reply is an answer too). Costs one
    /// load when nothing went unanswered before it.
    pub(crate) fn answered(&self) {
        if self.unanswered.load(Ordering::Acquire) && self.unanswered.swap(false, Ordering::AcqRel)
        {
            self.again
                .send_modify(|rounds| *rounds = rounds.wrapping_add(1));
        }
    }

    /// Whether the store should be asked whether it answers again: a call
    /// went unanswered since the last answer, and somebody waits to hear
    /// of the next one (an [`AnsweringAgain`] is alive).
    fn wanted(&self) -> bool {
        self.unanswered.load(Ordering::Acquire) && self.again.receiver_count() > 0
    }

    /// Whether the caller starts a probe (see `Node::probe`): one is
    /// wanted and none runs. One runs per store at most.
    pub(crate) fn start_probing(&self) -> bool {
        self.wanted() && !self.probing.swap(true, Ordering::AcqRel)
    }

    /// Whether the running probe goes on. It stops once it is not wanted
    /// (the store answered, or nobody waits any more); wanted again in the
    /// moment it stopped, it goes on unless another probe started.
    pub(crate) fn keep_probing(&self) -> bool {
        if self.wanted() {
            return true;
        }
        self.stop_probing();
        self.start_probing()
    }

    /// The running probe stopped for good (the client stopped).
    pub(crate) fn stop_probing(&self) {
        self.probing.store(false, Ordering::Release);
    }

    /// Hears of the times the store answers again from now on.
    pub(crate) fn watch(&self) -> AnsweringAgain {
        AnsweringAgain(self.again.subscribe())
    }
}

/// The times a store answers again after calls went unanswered (see
/// [`Answers::watch`]).
pub(crate) struct AnsweringAgain(watch::Receiver<u64>);

impl AnsweringAgain {
    /// Ready once the store answered again since this was made or last
    /// ready: at once if that happened already.
    pub(crate) async fn next(&mut self) {
        if self.0.changed().await.is_err() {
            // The store is gone: it never answers again.
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn heard(again: &mut AnsweringAgain) -> bool {
        tokio::time::timeout(Duration::from_millis(20), again.next())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn only_an_answer_after_calls_went_unanswered_is_heard() {
        let answers = Answers::default();
        let mut again = answers.watch();
        answers.answered();
        assert!(!heard(&mut again).await, "nothing went unanswered");
        answers.unanswered();
        answers.unanswered();
        assert!(!heard(&mut again).await, "no answer yet");
        answers.answered();
        answers.answered();
        assert!(heard(&mut again).await, "the store answered again");
        assert!(!heard(&mut again).await, "heard once per outage");
    }

    #[tokio::test]
    async fn an_answer_before_the_wait_began_is_heard_at_once() {
        let answers = Answers::default();
        let mut again = answers.watch();
        answers.unanswered();
        answers.answered();
        assert!(heard(&mut again).await);
    }

    #[test]
    fn one_probe_runs_while_somebody_waits_for_an_answer() {
        let answers = Answers::default();
        answers.unanswered();
        assert!(!answers.start_probing(), "nobody waits to hear of it");
        let again = answers.watch();
        assert!(answers.start_probing());
        assert!(!answers.start_probing(), "one probe per store");
        assert!(answers.keep_probing(), "still unanswered");
        answers.answered();
        assert!(!answers.keep_probing(), "the store answered");
        answers.unanswered();
        assert!(answers.start_probing(), "a new outage, a new probe");
        drop(again);
        assert!(!answers.keep_probing(), "nobody waits any more");
        assert!(!answers.start_probing());
    }
}
