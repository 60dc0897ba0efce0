#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = order_id)]
async fn key_not_a_string(order_id: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", client = "redis://127.0.0.1")]
async fn client_a_string() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", crate = "not a path")]
async fn crate_not_a_path() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key "a")]
async fn missing_equals() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
