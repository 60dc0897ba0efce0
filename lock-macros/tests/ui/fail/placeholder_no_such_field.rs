#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

struct Order {
    id: u64,
}

#[distributed_lock(key = "order:<order.number>")]
async fn settle(order: &Order) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
