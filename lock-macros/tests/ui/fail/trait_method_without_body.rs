#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

trait Orders {
    #[distributed_lock(key = "order:<id>")]
    async fn settle(&self, id: u64) -> Result<(), LockError>;
}

fn main() {}
