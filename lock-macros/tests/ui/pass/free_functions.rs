// Free functions: a key from a parameter, lease and wait, the default client,
// early `return` and `?` with conversions into the function's error type.
use lock_runtime::{LockError, distributed_lock};

#[derive(Debug)]
enum AppError {
    Lock(LockError),
    Parse(std::num::ParseIntError),
    NotFound,
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        AppError::Lock(err)
    }
}

impl From<std::num::ParseIntError> for AppError {
    fn from(err: std::num::ParseIntError) -> Self {
        AppError::Parse(err)
    }
}

#[distributed_lock(key = "order:<order_id>", lease = "30s", wait = "5s")]
async fn settle(order_id: u64, amount: &str) -> Result<u64, AppError> {
    if order_id == 0 {
        return Err(AppError::NotFound);
    }
    let amount: u64 = amount.parse()?;
    Ok(order_id + amount)
}

#[distributed_lock(key = "fixed-name")]
async fn no_parameters() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", lease = "100ms", wait = "0s")]
async fn shortest_lease_and_no_wait() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", lease = "1h1m1s1ms", wait = "2m")]
async fn combined_durations() -> Result<(), LockError> {
    Ok(())
}

/// Doc comments, `#[must_use]`, inner attributes and `pub` stay on the function.
#[must_use = "it does nothing unless awaited"]
#[distributed_lock(key = "documented")]
pub async fn documented() -> Result<(), LockError> {
    #![allow(clippy::needless_return)]
    return Ok(());
}

#[distributed_lock(key = "mut:<n>")]
async fn mutable_parameter(mut n: u32) -> Result<u32, LockError> {
    n += 1;
    Ok(n)
}

#[distributed_lock(key = "unit")]
async fn returns_unit_result() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    Ok(())
}

fn main() {
    // Type-check the calls without running them.
    let _ = async {
        let _: Result<u64, AppError> = settle(1, "2").await;
        let _: Result<(), LockError> = no_parameters().await;
        shortest_lease_and_no_wait().await?;
        combined_durations().await?;
        documented().await?;
        let _: u32 = mutable_parameter(1).await?;
        Ok::<(), LockError>(())
    };
    let _ = returns_unit_result();
}
