#![allow(unused_variables)]

use lock_runtime::distributed_lock;

// Every problem is reported in one build.
#[distributed_lock(key = "order:<order>:<", lease = "0s", wait = "1x", retries = 3)]
fn settle(order_id: u64) -> u32 {
    1
}

fn main() {}
