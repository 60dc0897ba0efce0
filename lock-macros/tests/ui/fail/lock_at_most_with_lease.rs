#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

// Both set the lock's lease: one renewed, the other a hard bound.
#[distributed_lock(key = "job:report", lease = "30s", lock_at_most = "10m")]
async fn nightly_report() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job:cleanup", lock_at_most = "10m", lease = "30s")]
async fn cleanup() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
