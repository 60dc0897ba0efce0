#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "config:<name>", mode = "read", fair = true)]
async fn read_config(name: &str) -> Result<(), LockError> {
    Ok(())
}

// A fair lock is not the write side of a read-write lock either.
#[distributed_lock(key = "config:<name>", fair = true, mode = "write")]
async fn write_config(name: &str) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
