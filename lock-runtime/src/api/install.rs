//! The process-wide default client used by `#[distributed_lock]`.

use std::sync::OnceLock;

use crate::api::client::LockClient;
use crate::base::error::LockError;

static DEFAULT: OnceLock<LockClient> = OnceLock::new();

/// Makes `client` the default for `#[distributed_lock]` functions that name
/// no `client = ...`.
///
/// The default is set once per process, like
/// `tracing::subscriber::set_global_default`: a second call is refused with
/// [`LockError::Config`], drops the `client` it was given and leaves the
/// first default in place, so a library cannot swap the client from under
/// the program (call it in `main`, not in library code). Locks are not
/// affected either way. A program that needs another client for some
/// functions names it there with `client = ...`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_runtime::LockError> {
/// use lock_runtime::{LockClient, LockError};
///
/// // In a real program: LockClient::connect("redis://127.0.0.1:6379").await?
/// let locks = LockClient::in_memory().await?;
/// lock_runtime::install(locks.clone())?;
/// assert_eq!(lock_runtime::installed()?.id(), locks.id());
///
/// // Installing again is refused; the first client stays the default.
/// let other = LockClient::in_memory().await?;
/// let again = lock_runtime::install(other);
/// assert!(matches!(again, Err(LockError::Config(_))));
/// assert_eq!(lock_runtime::installed()?.id(), locks.id());
/// # Ok(())
/// # }
/// ```
#[must_use = "a second install is refused with an error, and the first client stays the default"]
pub fn install(client: LockClient) -> Result<(), LockError> {
    DEFAULT.set(client).map_err(|_refused| {
        LockError::Config(
            "a default client is installed already (lock_runtime::install works once per process)"
                .into(),
        )
    })
}

/// The default client, or [`LockError::NotInstalled`] if none was installed.
pub fn installed() -> Result<LockClient, LockError> {
    DEFAULT.get().cloned().ok_or(LockError::NotInstalled)
}
