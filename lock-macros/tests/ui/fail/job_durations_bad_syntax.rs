#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "job:report", lock_at_most = "10min")]
async fn nightly_report() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job:cleanup", lock_at_least = 30)]
async fn cleanup() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job:archive", lock_at_least = "99999999999999999999s")]
async fn archive() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
