// `lock_at_most`, `lock_at_least` and `on_busy`: on the kinds of lock they
// apply to, with the other options, in methods, generic functions, traits,
// aliases of `Result` and of `Option`, futures that stay `Send`, and a
// module without the prelude.
use std::fmt::Display;

use lock_runtime::{LockClient, LockError, distributed_lock};

#[distributed_lock(key = "job:report", lock_at_most = "10m", lock_at_least = "30s", on_busy = "skip", wait = "0s")]
async fn nightly_report() -> Result<Option<u32>, LockError> {
    tokio::task::yield_now().await;
    Ok(Some(7))
}

// The body may return early, and decide itself not to run.
#[distributed_lock(key = "job:cleanup:<day>", on_busy = "skip")]
async fn cleanup(day: u32) -> Result<Option<()>, LockError> {
    if day == 0 {
        return Ok(None);
    }
    Ok(Some(()))
}

#[distributed_lock(key = "job:plain", on_busy = "error", lock_at_most = "1m")]
async fn explicit_error() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(keys = ["account:<from>", "account:<to>"], lock_at_least = "1s", on_busy = "skip")]
async fn transfer(from: u64, to: u64) -> Result<Option<u64>, LockError> {
    Ok(Some(from + to))
}

#[distributed_lock(key = "printer", fair = true, lock_at_least = "1s", lock_at_most = "1s")]
async fn print() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "catalog", mode = "write", lock_at_least = "100ms", min_replicas = 0)]
async fn reprice() -> Result<(), LockError> {
    Ok(())
}

// `lock_at_most` and `on_busy` apply to every kind of lock.
#[distributed_lock(key = "exports", permits = 3, lock_at_most = "100ms", on_busy = "skip")]
async fn export() -> Result<Option<()>, LockError> {
    Ok(Some(()))
}

#[distributed_lock(key = "catalog", mode = "read", lock_at_most = "5s", on_busy = "skip")]
async fn browse() -> Result<Option<String>, LockError> {
    Ok(Some(String::new()))
}

// Aliases: the compiler sees through them.
#[derive(Debug)]
enum AppError {
    Lock(LockError),
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        AppError::Lock(err)
    }
}

type AppResult<T> = Result<T, AppError>;
type Maybe<T> = Option<T>;

#[distributed_lock(key = "job:alias", on_busy = "skip")]
async fn aliased() -> AppResult<Maybe<u8>> {
    Ok(Some(1))
}

#[distributed_lock(key = "job:<name>", on_busy = "skip")]
async fn generic<T: Display + Send + Default>(name: T) -> Result<Option<T>, AppError> {
    Ok(Some(T::default()))
}

struct Scheduler {
    locks: LockClient,
}

impl Scheduler {
    #[distributed_lock(key = "job:<name>", client = self.locks, on_busy = "skip", lock_at_least = "1m")]
    async fn tick(&mut self, name: &str) -> Result<Option<()>, LockError> {
        Ok(Some(()))
    }
}

trait Job {
    #[distributed_lock(key = "job:trait", on_busy = "skip", lock_at_most = "1m")]
    async fn run(&self) -> Result<Option<()>, LockError> {
        Ok(Some(()))
    }
}

mod platform {
    pub use lock_runtime as locks;
}

// The expansion names no tool attribute that a module could shadow.
#[allow(dead_code)]
mod diagnostic {}

mod bare {
    #![no_implicit_prelude]

    use ::lock_runtime::{LockError, distributed_lock};

    #[distributed_lock(key = "bare", on_busy = "skip", lock_at_most = "1s", lock_at_least = "1s", crate = "super::platform::locks")]
    pub async fn bare() -> ::core::result::Result<::core::option::Option<u8>, LockError> {
        ::core::result::Result::Ok(::core::option::Option::Some(1))
    }
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    let _ = async move {
        let _: Option<u32> = nightly_report().await?;
        cleanup(1).await?;
        explicit_error().await?;
        transfer(1, 2).await?;
        print().await?;
        reprice().await?;
        export().await?;
        browse().await?;
        bare::bare().await?;
        Ok::<(), LockError>(())
    };
    assert_send(nightly_report());
    assert_send(transfer(1, 2));
    assert_send(aliased());
    assert_send(generic(5u8));
    let _ = |mut scheduler: Scheduler| async move { scheduler.tick("x").await };
}
