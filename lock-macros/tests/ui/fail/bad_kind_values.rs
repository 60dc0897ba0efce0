#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(keys = "account:<id>")]
async fn keys_not_a_list(id: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(keys = ["account:<id>", id])]
async fn keys_not_strings(id: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = ["account:<from>", "account:<to>"])]
async fn key_a_list(from: u64, to: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "exports", permits = "3")]
async fn permits_a_string() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "exports", permits = -1)]
async fn permits_negative() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "queue", fair = "true")]
async fn fair_a_string() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
