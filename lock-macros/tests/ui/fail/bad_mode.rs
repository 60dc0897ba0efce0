#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "config", mode = "raed")]
async fn misspelt() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "config", mode = "exclusive")]
async fn unknown() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "config", mode = read)]
async fn unquoted() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
