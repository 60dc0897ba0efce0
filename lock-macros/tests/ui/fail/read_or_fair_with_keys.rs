#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(keys = ["account:<from>", "account:<to>"], mode = "read")]
async fn balances(from: u64, to: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(fair = true, keys = ["account:<from>", "account:<to>"])]
async fn transfer(from: u64, to: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
