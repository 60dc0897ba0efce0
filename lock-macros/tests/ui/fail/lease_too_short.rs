#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "a", lease = "99ms")]
async fn settle(id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
