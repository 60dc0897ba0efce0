#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(keys = ["account:<from>", "account:<from>"])]
async fn transfer(from: u64, to: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
