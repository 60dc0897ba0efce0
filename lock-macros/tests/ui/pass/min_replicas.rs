// `min_replicas`: on every kind of lock, 0 to turn the client's setting off,
// with a `u32` suffix, and next to `client` and `crate`.
use lock_runtime::{LockClient, LockError, distributed_lock};

#[distributed_lock(key = "payout:<id>", min_replicas = 1)]
async fn pay_out(id: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "cache:<name>", min_replicas = 0, wait = "0s")]
async fn refresh(name: &str) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(keys = ["account:<from>", "account:<to>"], min_replicas = 2u32)]
async fn transfer(from: u64, to: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "exports", permits = 3, min_replicas = 1)]
async fn export() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(min_replicas = 1, key = "config", mode = "read")]
async fn read_config() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "printer", fair = true, min_replicas = 1, lease = "10s")]
async fn print() -> Result<(), LockError> {
    Ok(())
}

mod platform {
    pub use lock_runtime as locks;
}

struct Bank {
    locks: LockClient,
}

impl Bank {
    #[distributed_lock(key = "ledger", client = self.locks, min_replicas = 1, crate = "platform::locks")]
    async fn close(&self) -> Result<(), LockError> {
        Ok(())
    }
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    let _ = async move {
        pay_out(1).await?;
        refresh("x").await?;
        transfer(1, 2).await?;
        export().await?;
        read_config().await?;
        print().await?;
        Ok::<(), LockError>(())
    };
    assert_send(pay_out(1));
    assert_send(refresh("x"));
    let _ = |bank: Bank| async move { bank.close().await };
}
