#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "a", lease = "99999999999999999999h")]
async fn lease(id: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", wait = "2562047788016h")]
async fn wait(id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
