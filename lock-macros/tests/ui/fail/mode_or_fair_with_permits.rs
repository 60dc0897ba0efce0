#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "exports", permits = 2, mode = "write")]
async fn mode_with_permits() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "exports", fair = true, permits = 2)]
async fn fair_with_permits() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
