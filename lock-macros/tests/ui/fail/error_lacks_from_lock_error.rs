#![allow(unused_variables)]

use lock_runtime::distributed_lock;

#[derive(Debug)]
enum AppError {
    NotFound,
}

#[distributed_lock(key = "order:<id>")]
async fn settle(id: u64) -> Result<(), AppError> {
    Err(AppError::NotFound)
}

fn main() {}
