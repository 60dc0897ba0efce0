#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "payout:<id>", min_replicas = 1, lease = "5s", min_replicas = 2)]
async fn pay_out(id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
