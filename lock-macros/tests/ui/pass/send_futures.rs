// The futures are `Send` when the body's are, so they can be spawned and
// used as axum handlers.
use std::sync::Arc;

use lock_runtime::{LockClient, LockError, distributed_lock};

struct State {
    locks: LockClient,
}

#[distributed_lock(key = "order:<order_id>", client = state.locks, lease = "10s", wait = "1s")]
async fn handler(state: Arc<State>, order_id: u64) -> Result<String, LockError> {
    tokio::task::yield_now().await;
    Ok(format!("settled {order_id}"))
}

#[distributed_lock(key = "order:<order_id>:<note>")]
async fn with_default_client(order_id: u64, note: String) -> Result<(), LockError> {
    tokio::task::yield_now().await;
    Ok(())
}

fn main() {
    let _ = |state: Arc<State>| {
        tokio::spawn(handler(state, 1));
        tokio::spawn(with_default_client(1, "x".into()));
    };
}
