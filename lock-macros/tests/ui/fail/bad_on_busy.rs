#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "job:report", on_busy = "skp")]
async fn misspelt() -> Result<Option<()>, LockError> {
    Ok(Some(()))
}

#[distributed_lock(key = "job:report", on_busy = "ignore")]
async fn unknown() -> Result<Option<()>, LockError> {
    Ok(Some(()))
}

#[distributed_lock(key = "job:report", on_busy = skip)]
async fn unquoted() -> Result<Option<()>, LockError> {
    Ok(Some(()))
}

fn main() {}
