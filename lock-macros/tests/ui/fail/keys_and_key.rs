#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "account:<from>", keys = ["account:<from>", "account:<to>"])]
async fn transfer(from: u64, to: u64) -> Result<(), LockError> {
    Ok(())
}

// Reported on whichever comes second.
#[distributed_lock(keys = ["account:<from>", "account:<to>"], key = "account:<from>")]
async fn reversed(from: u64, to: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
