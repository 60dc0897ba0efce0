#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

struct Order {
    id: u64,
}

impl Order {
    fn id(&self) -> u64 {
        self.id
    }
}

#[distributed_lock(key = "order:<order.id()>")]
async fn method_call(order: &Order) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "order:<order.>")]
async fn trailing_dot(order: &Order) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "order:< order >")]
async fn spaces(order: &Order) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
