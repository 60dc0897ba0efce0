//! The process-wide default client used by `#[distributed_lock]`.

use std::sync::RwLock;

use crate::api::client::LockClient;
use crate::base::error::LockError;

static DEFAULT: RwLock<Option<LockClient>> = RwLock::new(None);

/// Makes `client` the default for `#[distributed_lock]` functions that name
/// no `client = ...`. Installing again replaces the previous default; locks
/// taken through the old one stay valid.
///
/// ```no_run
/// # async fn run() -> Result<(), lock_runtime::LockError> {
/// let locks = lock_runtime::LockClient::connect("redis://127.0.0.1:6379").await?;
/// lock_runtime::install(locks.clone());
/// assert!(lock_runtime::installed().is_ok());
/// # Ok(())
/// # }
/// ```
pub fn install(client: LockClient) {
    // A poisoned lock still holds a valid Option; replacing it is safe.
    *DEFAULT.write().unwrap_or_else(|e| e.into_inner()) = Some(client);
}

/// The default client, or [`LockError::NotInstalled`] if none was installed.
pub fn installed() -> Result<LockClient, LockError> {
    DEFAULT
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .ok_or(LockError::NotInstalled)
}
