#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

// Every template in `keys` is checked against the parameters.
#[distributed_lock(keys = ["account:<from>", "account:<target>", "audit:<day>"])]
async fn transfer(from: u64, to: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
