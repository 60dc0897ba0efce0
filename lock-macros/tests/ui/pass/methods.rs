// Methods with every kind of receiver; `client = self.locks` together with a
// body that mutates other fields of `self`; a client behind a reference or an
// `Arc`; a client computed by an expression that takes a mutex.
use std::sync::{Arc, Mutex};

use lock_runtime::{LockClient, LockError, distributed_lock};

struct Account {
    locks: LockClient,
    id: u64,
    balance: i64,
    history: Vec<i64>,
}

impl Account {
    #[distributed_lock(key = "account:<self.id>", client = self.locks)]
    async fn deposit(&mut self, cents: i64) -> Result<i64, LockError> {
        self.balance += cents;
        self.history.push(cents);
        let me: &mut Self = self;
        me.balance += 0;
        Ok(self.balance)
    }

    #[distributed_lock(key = "account:<self.id>", client = self.locks)]
    async fn balance(&self) -> Result<i64, LockError> {
        Ok(self.balance)
    }

    #[distributed_lock(key = "account:<self.id>", client = self.locks)]
    async fn close(self) -> Result<Vec<i64>, LockError> {
        let Account { history, .. } = self;
        Ok(history)
    }

    #[distributed_lock(key = "account:<self.id>", client = self.locks)]
    async fn shared(self: Arc<Self>) -> Result<u64, LockError> {
        Ok(self.id)
    }

    #[distributed_lock(key = "account:<id>", client = locks)]
    async fn associated(locks: &LockClient, id: u64) -> Result<Self, LockError> {
        Ok(Account {
            locks: locks.clone(),
            id,
            balance: 0,
            history: Vec::new(),
        })
    }
}

struct Borrowed<'a> {
    locks: &'a LockClient,
    name: String,
}

impl Borrowed<'_> {
    #[distributed_lock(key = "name:<self.name>", client = self.locks)]
    async fn rename(&mut self, to: String) -> Result<(), LockError> {
        self.name = to;
        Ok(())
    }
}

struct Shared {
    locks: Arc<LockClient>,
    registry: Mutex<Option<LockClient>>,
    guarded: Mutex<LockClient>,
}

impl Shared {
    #[distributed_lock(key = "arc", client = self.locks)]
    async fn through_arc(&self) -> Result<(), LockError> {
        Ok(())
    }

    // The mutex guard is a temporary of the client expression; it is gone
    // before the lock is awaited, so the future stays `Send`.
    #[distributed_lock(key = "mutex", client = self.registry.lock().unwrap().clone().unwrap())]
    async fn through_mutex(&self) -> Result<(), LockError> {
        Ok(())
    }

    // A guard that derefs to the client, used as it is.
    #[distributed_lock(key = "guard", client = self.guarded.lock().unwrap())]
    async fn through_guard(&self) -> Result<(), LockError> {
        Ok(())
    }
}

#[distributed_lock(key = "mutable", client = locks)]
async fn through_mutable_reference(locks: &mut LockClient) -> Result<(), LockError> {
    Ok(())
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    let _ = |mut account: Account, shared: Shared| {
        assert_send(async move {
            account.deposit(5).await?;
            account.balance().await?;
            let shared = Arc::new(shared);
            shared.through_arc().await?;
            shared.through_mutex().await?;
            // The guard is gone before the lock is awaited: still `Send`.
            shared.through_guard().await?;
            let history = account.close().await?;
            Ok::<_, LockError>(history)
        });
    };
    let _ = |locks: LockClient, mut borrowed: Borrowed<'static>| async move {
        let account = Arc::new(Account::associated(&locks, 1).await?);
        account.shared().await?;
        borrowed.rename("x".into()).await?;
        let mut locks = locks;
        through_mutable_reference(&mut locks).await?;
        Ok::<_, LockError>(())
    };
}
