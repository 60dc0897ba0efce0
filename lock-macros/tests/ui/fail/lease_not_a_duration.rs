#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "a", lease = 30)]
async fn number(id: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", lease = "thirty seconds")]
async fn words(id: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", wait = "5")]
async fn no_unit(id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
