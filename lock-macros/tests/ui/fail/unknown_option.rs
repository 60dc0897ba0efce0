#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "a", timeout = "5s")]
async fn unknown(id: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", leese = "5s")]
async fn misspelt(id: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", min_replica = 1)]
async fn misspelt_replicas(id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
