//! What `#[distributed_lock]` expands to calls. Not a public API: names and
//! signatures here change with the macro crate, which `lock-runtime` pins.

use std::time::Duration;

pub use crate::api::client::LockClient;
pub use crate::api::guard::LockGuard;
pub use crate::api::install::installed;
use crate::api::request::LockRequest;
use crate::base::error::Chain;
pub use crate::base::error::LockError;
pub use crate::base::kind::Kind;

/// The client an attribute without `client = ...` uses.
pub fn default_client() -> Result<LockClient, LockError> {
    installed()
}

/// The attribute's lock options; `None` and `false`: the client's defaults.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `lease`, or `lock_at_most`.
    pub lease: Option<Duration>,
    /// `wait`.
    pub wait: Option<Duration>,
    /// `min_replicas`; `Some(0)` turns the client's off for this lock.
    pub min_replicas: Option<u32>,
    /// `lock_at_least`.
    pub at_least: Option<Duration>,
    /// `lock_at_most`: the lease is a hard bound, not renewed.
    pub fixed_lease: bool,
    /// `max_hold`: renewed up to this after it was taken, no further.
    pub max_hold: Option<Duration>,
    /// `mode = "write"`: the write side of a read-write lock (an exclusive
    /// lock, whose metrics say `write`).
    pub write: bool,
}

/// Takes a lock of `kind` over `keys` (several only for `Exclusive`), with
/// the attribute's options where given and the client's defaults elsewhere.
pub async fn acquire_with(
    client: &LockClient,
    kind: Kind,
    keys: Vec<String>,
    options: Options,
) -> Result<LockGuard, LockError> {
    if kind != Kind::Exclusive && keys.len() != 1 {
        return Err(LockError::Config(
            "a semaphore, a read lock or a fair lock is named by exactly one key".into(),
        ));
    }
    let mut request = LockRequest::new(client.inner.clone(), kind, keys);
    if options.write {
        request = request.writing();
    }
    if let Some(lease) = options.lease {
        request = request.lease(lease);
    }
    if let Some(wait) = options.wait {
        request = request.wait(wait);
    }
    if let Some(replicas) = options.min_replicas {
        request = request.min_replicas(replicas);
    }
    if let Some(max_hold) = options.max_hold {
        request = request.max_hold(max_hold);
    }
    if let Some(at_least) = options.at_least {
        request = request.lock_at_least(at_least);
    }
    if options.fixed_lease
        && let Some(at_most) = options.lease
    {
        request = request.lock_at_most(at_most);
    }
    request.acquire().await
}

/// What `on_busy = "skip"` returns when the lock stays busy: `Ok(None)`,
/// which takes a function returning `Result<Option<T>, E>`.
#[diagnostic::on_unimplemented(
    message = "`on_busy = \"skip\"` needs the function to return `Result<Option<T>, E>`, not `Result<{Self}, E>`",
    label = "when the lock is busy, the function returns `Ok(None)` here",
    note = "return `Ok(Some(value))` from the body, and handle `None` (someone else holds the lock) at the call"
)]
pub trait OnBusySkip {
    /// The value for "skipped".
    fn skipped() -> Self;
}

impl<T> OnBusySkip for Option<T> {
    fn skipped() -> Self {
        None
    }
}

/// Runs a locked function's body as the lock's critical section and releases
/// the lock after it.
///
/// The body is dropped at its next await point if the lock is lost, and the
/// result is `Lost`; a release that finds the lock already gone also turns
/// the result into `Lost`, since the body may have run unprotected at its
/// end. A release that cannot reach Redis keeps the body's result: it is
/// sent again in the background until Redis answers (the lock expires after
/// its lease if Redis never does).
pub async fn run<T, E, F>(guard: LockGuard, body: F) -> Result<T, E>
where
    F: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    // The release runs after the span's scope ends; the warning below still
    // belongs to the lock, and names it itself for filters that drop the
    // INFO span.
    let span = guard.span().clone();
    let key = guard.name().to_owned();
    let result = match guard.scope(body).await {
        Ok(result) => result,
        Err(lost) => return Err(E::from(lost)),
    };
    match guard.release().await {
        Ok(()) => result,
        Err(err) if err.is_lost() => Err(E::from(err)),
        Err(err) => {
            tracing::warn!(
                parent: &span,
                %key,
                error = %Chain(&err),
                "release failed; sent again in the background"
            );
            result
        }
    }
}
