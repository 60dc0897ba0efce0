#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "job:report", lock_at_most = "0s")]
async fn nightly_report() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job:cleanup", lock_at_least = "0ms")]
async fn cleanup() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
