#![allow(unused_variables)]

use lock_runtime::distributed_lock;

#[distributed_lock(key = "a")]
async fn returns_number() -> u32 {
    1
}

#[distributed_lock(key = "a")]
async fn returns_nothing() {}

#[distributed_lock(key = "a")]
async fn returns_option() -> Option<u32> {
    None
}

fn main() {
    // Still emitted unchanged: callers type-check against the original.
    let _ = async {
        let _: u32 = returns_number().await;
        returns_nothing().await;
        let _: Option<u32> = returns_option().await;
    };
}
