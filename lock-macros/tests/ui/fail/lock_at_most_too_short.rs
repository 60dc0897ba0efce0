#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "job:ping", lock_at_most = "50ms")]
async fn ping() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
