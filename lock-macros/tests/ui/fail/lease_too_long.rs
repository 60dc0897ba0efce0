#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

// A year is the longest lease (`lock_runtime::MAX_LEASE`): past it, every
// call would fail, so it does not compile.
#[distributed_lock(key = "a", lease = "8761h")]
async fn lease(id: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job:a", lock_at_most = "8760h1ms")]
async fn at_most(id: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job:b", lock_at_least = "8761h")]
async fn at_least(id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
