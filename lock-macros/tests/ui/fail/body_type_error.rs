#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

// Type errors in the body point at the user's code, not at the macro.
#[distributed_lock(key = "order:<id>")]
async fn settle(id: u64) -> Result<u64, LockError> {
    if id == 0 {
        return Ok("zero");
    }
    Ok(id)
}

#[distributed_lock(key = "order:<id>")]
async fn question_mark(id: &str) -> Result<u64, LockError> {
    let parsed: u64 = id.parse()?;
    Ok(parsed)
}

fn main() {}
