#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

struct Db;

#[distributed_lock(key = "order:<order>")]
async fn settle(order_id: u64, db: &Db) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "tenant:<tenant>:<self.id>")]
async fn no_receiver(region: &str) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
