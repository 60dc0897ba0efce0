#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

struct AccountId(u64);

#[distributed_lock(keys = ["account:<from>", "account:<to>"])]
async fn transfer(from: u64, to: AccountId) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
