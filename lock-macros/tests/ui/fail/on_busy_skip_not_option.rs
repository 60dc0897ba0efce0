#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

// `on_busy = "skip"` returns `Ok(None)` when the lock is busy: the function
// must return `Result<Option<T>, E>`.
#[distributed_lock(key = "job:report", on_busy = "skip", wait = "0s")]
async fn nightly_report() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job:count", on_busy = "skip")]
async fn count() -> Result<u64, LockError> {
    Ok(1)
}

fn main() {}
