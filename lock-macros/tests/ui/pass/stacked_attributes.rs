// Other attributes above and below: `#[tracing::instrument]` either way round,
// `#[allow]`, `#[cfg_attr]`.
use lock_runtime::{LockClient, LockError, distributed_lock};

#[tracing::instrument(skip(locks), err)]
#[distributed_lock(key = "job:<name>", client = locks)]
async fn instrument_outside(locks: &LockClient, name: &str) -> Result<(), LockError> {
    tracing::info!("running");
    Ok(())
}

#[distributed_lock(key = "job:<name>", client = locks)]
#[tracing::instrument(skip(locks))]
async fn instrument_inside(locks: &LockClient, name: &str) -> Result<u8, LockError> {
    Ok(1)
}

struct Worker {
    locks: LockClient,
    done: u32,
}

impl Worker {
    #[tracing::instrument(skip(self))]
    #[distributed_lock(key = "worker:<n>", client = self.locks)]
    async fn step(&mut self, n: u32) -> Result<u32, LockError> {
        self.done += n;
        Ok(self.done)
    }
}

#[allow(clippy::unused_async)]
#[cfg_attr(all(), distributed_lock(key = "cfg"))]
async fn through_cfg_attr() -> Result<(), LockError> {
    Ok(())
}

fn main() {
    let _ = |locks: LockClient, mut worker: Worker| async move {
        instrument_outside(&locks, "a").await?;
        instrument_inside(&locks, "b").await?;
        worker.step(1).await?;
        through_cfg_attr().await?;
        Ok::<(), LockError>(())
    };
}
