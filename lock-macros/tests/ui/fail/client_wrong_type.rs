#![allow(unused_variables)]

use lock_runtime::{LockError, distributed_lock};

struct Service {
    locks: String,
}

impl Service {
    #[distributed_lock(key = "a", client = self.locks)]
    async fn settle(&self) -> Result<(), LockError> {
        Ok(())
    }
}

fn main() {}
