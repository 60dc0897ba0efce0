#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(keys = ["exports:eu", "exports:us"], permits = 2)]
async fn export() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
