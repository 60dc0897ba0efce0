#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

struct OrderId(u64);

#[distributed_lock(key = "order:<id>")]
async fn settle(id: OrderId) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
