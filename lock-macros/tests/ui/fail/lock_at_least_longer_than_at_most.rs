#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "job:report", lock_at_most = "30s", lock_at_least = "1m")]
async fn nightly_report() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
