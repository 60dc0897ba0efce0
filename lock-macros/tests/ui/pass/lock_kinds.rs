// Kinds of lock: several keys taken together, semaphores, both sides of a
// read-write lock, fair locks, and `fair = false` (the default) written out.
use lock_runtime::{LockClient, LockError, distributed_lock};

struct Account {
    id: u64,
}

#[distributed_lock(keys = ["account:<from.id>", "account:<to.id>"], lease = "10s", wait = "5s")]
async fn transfer(from: &Account, to: &Account, cents: u64) -> Result<u64, LockError> {
    let both = lock_runtime::current_locks();
    Ok(cents + both.len() as u64)
}

// Fixed and templated keys mixed, in Redis Cluster hash tags.
#[distributed_lock(keys = ["{bank}:ledger", "{bank}:account:<id>"])]
async fn post(id: u64) -> Result<(), LockError> {
    Ok(())
}

// Only fixed keys.
#[distributed_lock(keys = ["jobs:import", "jobs:export"])]
async fn maintenance() -> Result<(), LockError> {
    Ok(())
}

// One template in `keys` is the same as `key`.
#[distributed_lock(keys = ["single:<n>"], mode = "write")]
async fn single(n: u8) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "exports:<region>", permits = 3, lease = "1m")]
async fn export(region: &str) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "one-at-a-time", permits = 1u32, fair = false)]
async fn one_permit() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "config:<name>", mode = "read", wait = "1s")]
async fn read_config(name: &str) -> Result<String, LockError> {
    Ok(name.to_owned())
}

#[distributed_lock(key = "config:<name>", mode = "write")]
async fn write_config(name: &str) -> Result<(), LockError> {
    // A writer may read, too (a downgrade when the write lock ends first).
    read_config(name).await?;
    Ok(())
}

#[distributed_lock(key = "printer:<id>", fair = true, wait = "1m")]
async fn print(id: u32) -> Result<(), LockError> {
    Ok(())
}

struct Bank {
    locks: LockClient,
}

impl Bank {
    #[distributed_lock(keys = ["account:<from>", "account:<to>"], client = self.locks)]
    async fn transfer(&mut self, from: u64, to: u64) -> Result<(), LockError> {
        Ok(())
    }

    #[distributed_lock(key = "reports", permits = 2, client = self.locks)]
    async fn report(&self) -> Result<(), LockError> {
        Ok(())
    }

    #[distributed_lock(key = "account:<id>", mode = "read", client = self.locks)]
    async fn balance(&self, id: u64) -> Result<u64, LockError> {
        Ok(id)
    }
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    let (a, b) = (Account { id: 1 }, Account { id: 2 });
    let _ = async move {
        transfer(&a, &b, 5).await?;
        post(1).await?;
        maintenance().await?;
        single(1).await?;
        export("eu").await?;
        one_permit().await?;
        read_config("x").await?;
        write_config("x").await?;
        print(1).await?;
        Ok::<(), LockError>(())
    };
    assert_send(post(1));
    assert_send(export("eu"));
    assert_send(maintenance());
    assert_send(read_config("x"));
    assert_send(print(1));
    let _ = |mut bank: Bank| async move {
        bank.transfer(1, 2).await?;
        bank.balance(1).await?;
        bank.report().await
    };
}
