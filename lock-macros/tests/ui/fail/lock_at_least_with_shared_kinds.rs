#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

// `lock_at_least` keeps an exclusive or fair lock taken; semaphores and
// readers give theirs back when the body ends.
#[distributed_lock(key = "exports", permits = 3, lock_at_least = "30s")]
async fn export() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "catalog", lock_at_least = "30s", mode = "read")]
async fn browse() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
