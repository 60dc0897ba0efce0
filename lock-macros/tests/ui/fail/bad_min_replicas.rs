#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "payout", min_replicas = "1")]
async fn a_string() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "payout", min_replicas = -1)]
async fn negative() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "payout", min_replicas = 4294967296)]
async fn too_large() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "payout", min_replicas = 1.5)]
async fn not_whole() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "payout", min_replicas = 1u8)]
async fn other_integer_type() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "payout", min_replicas = REPLICAS)]
async fn a_constant() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
