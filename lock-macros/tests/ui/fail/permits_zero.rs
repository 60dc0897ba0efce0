#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "exports", permits = 0)]
async fn export() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
