#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

// Never renewed: a cap below the lease.
#[distributed_lock(key = "sync:<tenant>", lease = "30s", max_hold = "10s")]
async fn sync_tenant(tenant: u64) -> Result<(), LockError> {
    Ok(())
}

// A lease that is never renewed is its own cap.
#[distributed_lock(key = "job:report", lock_at_most = "10m", max_hold = "15m")]
async fn nightly_report() -> Result<(), LockError> {
    Ok(())
}

// Shorter than any lease.
#[distributed_lock(key = "job:tick", max_hold = "20ms")]
async fn tick() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
