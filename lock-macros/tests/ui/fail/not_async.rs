#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "order:<id>")]
fn settle(id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {
    // The function is still emitted unchanged: no follow-on errors here.
    let _: Result<(), LockError> = settle(1);
}
