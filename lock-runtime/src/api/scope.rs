//! Lock ownership by task scope, kept in a task-local.
//!
//! Async tasks move between threads, so a thread id says nothing about who
//! holds a lock. Instead, a lock's critical section runs inside a *scope*
//! ([`LockGuard::scope`](crate::LockGuard::scope), or the body of a
//! `#[distributed_lock]` function) that records, in a task-local, the owner
//! id it holds locks under: the client's uuid plus a scope number.
//!
//! Taking a lock that an enclosing scope (of the same client) already holds
//! uses that scope's owner id, so it re-enters the lock instead of waiting
//! for itself. Every other acquisition, inside a scope or not, gets an owner
//! id of its own: two calls joined or polled together inside a critical
//! section, each taking a lock the section does not hold, exclude each
//! other as two tasks would. A task spawned from inside the scope does not
//! inherit task-locals: it is a different owner and waits like anyone else.
//!
//! Futures joined *inside* the critical section of a lock share that lock,
//! as statements inside it do: taking it again re-enters it, since they are
//! all part of the holder's work.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

tokio::task_local! {
    static SCOPE: Arc<Scope>;
}

/// One level of held lock in the current task.
#[derive(Debug)]
pub(crate) struct Scope {
    pub(crate) client: Uuid,
    pub(crate) owner: Arc<str>,
    /// The locks of this critical section (several for a multi-lock).
    pub(crate) locks: Vec<CurrentLock>,
    pub(crate) parent: Option<Arc<Scope>>,
    /// Cancelled when the critical section ends: its lock lost, its guard
    /// released or dropped.
    pub(crate) ended: CancellationToken,
}

impl Scope {
    fn ancestors(self: &Arc<Self>) -> impl Iterator<Item = &Arc<Scope>> {
        std::iter::successors(Some(self), |scope| scope.parent.as_ref())
    }
}

/// The scope the current task runs in, if any.
pub(crate) fn innermost() -> Option<Arc<Scope>> {
    SCOPE.try_with(Arc::clone).ok()
}

/// Which owner takes the locks `names` of `client` in the current task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Taker {
    /// No enclosing scope holds any of them: a new owner of its own.
    Fresh,
    /// One enclosing scope holds all of them: its owner re-enters them.
    Reentry(Arc<str>),
    /// Enclosing scopes hold some of them, or hold them under different
    /// owners: one request cannot both re-enter and take fresh.
    Mixed,
}

/// Who takes `client`'s locks `names` here: the owner of the enclosing
/// scope that holds them (re-entry), or a new owner when none does.
pub(crate) fn taker(client: Uuid, names: &[String]) -> Taker {
    let Some(innermost) = innermost() else {
        return Taker::Fresh;
    };
    let holder = |name: &String| {
        innermost
            .ancestors()
            .find(|scope| scope.client == client && scope.locks.iter().any(|l| &l.name == name))
            .map(|scope| scope.owner.clone())
    };
    let mut owners = names.iter().map(holder);
    let Some(first) = owners.next() else {
        return Taker::Fresh;
    };
    if owners.any(|owner| owner != first) {
        return Taker::Mixed;
    }
    first.map_or(Taker::Fresh, Taker::Reentry)
}

/// Runs `fut` inside a new scope for a held lock.
pub(crate) async fn enter<F: Future>(scope: Scope, fut: F) -> F::Output {
    SCOPE.scope(Arc::new(scope), fut).await
}

/// The lock the current task holds, as seen from inside its critical section.
///
/// Returned by [`current`]: pass [`fence`](CurrentLock::fence) to the storage
/// a critical section writes to, so that it can reject writes from a holder
/// whose lock has since passed to someone else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentLock {
    /// The lock's name, as given to [`LockClient::lock`](crate::LockClient::lock).
    pub name: String,
    /// Its fencing token.
    pub fence: u64,
}

/// The innermost lock held by the current task's critical section, or `None`
/// outside of any.
///
/// Inside the body of a `#[distributed_lock]` function or a
/// [`LockGuard::scope`](crate::LockGuard::scope), this names the lock and its
/// fencing token without passing the guard around:
///
/// ```no_run
/// # async fn run(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
/// let guard = locks.lock("report:daily").acquire().await?;
/// guard
///     .scope(async {
///         let held = lock_runtime::current().expect("inside a critical section");
///         assert_eq!(held.name, "report:daily");
///         // storage.write_if_newer(held.fence, ...)
///     })
///     .await?;
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
pub fn current() -> Option<CurrentLock> {
    innermost().and_then(|scope| scope.locks.first().cloned())
}

/// A token cancelled when the innermost critical section ends (its lock
/// is lost, or its guard released or dropped), or `None` outside of any:
/// inside a `#[distributed_lock]` body, what
/// [`LockGuard::cancellation_token`](crate::LockGuard::cancellation_token)
/// is for a guard. Hand it to work the body spawns, which would otherwise
/// outlive the body (dropped when the lock is lost) and its lock.
///
/// ```no_run
/// use lock_runtime::distributed_lock;
///
/// #[distributed_lock(key = "export:<day>", lease = "30s")]
/// async fn export(day: u32) -> Result<(), lock_runtime::LockError> {
///     let stop = lock_runtime::current_cancellation_token().expect("inside the lock");
///     let upload = tokio::spawn(async move {
///         tokio::select! {
///             _ = stop.cancelled() => {} // the lock is gone: stop
///             _ = upload_part(day) => {}
///         }
///     });
///     upload.await.ok();
///     Ok(())
/// }
/// # async fn upload_part(_day: u32) {}
/// ```
pub fn current_cancellation_token() -> Option<CancellationToken> {
    innermost().map(|scope| scope.ended.child_token())
}

/// Every lock of the innermost critical section, with its own fencing token:
/// several for one taken with [`LockClient::lock_all`](crate::LockClient::lock_all),
/// in the canonical (sorted) order; empty outside of any critical section.
pub fn current_locks() -> Vec<CurrentLock> {
    innermost().map_or_else(Vec::new, |scope| scope.locks.clone())
}
