#![allow(unused_variables)]

use lock_runtime::distributed_lock;

#[distributed_lock(key = "order")]
struct Order {
    id: u64,
}

fn main() {
    let _ = Order { id: 1 };
}
