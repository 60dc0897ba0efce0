#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "order:id>")]
async fn settle(id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
