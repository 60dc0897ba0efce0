// Generic functions, `impl Trait` arguments and returns, lifetimes, where
// clauses; `async fn` in traits (default bodies) and in trait impls.
use std::fmt::Display;

use lock_runtime::{LockClient, LockError, distributed_lock};

#[distributed_lock(key = "item:<id>")]
async fn generic<T: Display + Send, U>(id: T, extra: U) -> Result<U, LockError>
where
    U: Send,
{
    Ok(extra)
}

#[distributed_lock(key = "text:<text>")]
async fn borrowed<'a>(text: &'a str) -> Result<&'a str, LockError> {
    Ok(text)
}

#[distributed_lock(key = "elided:<text>")]
async fn elided(text: &str) -> Result<&str, LockError> {
    Ok(&text[..1])
}

#[distributed_lock(key = "opaque:<n>")]
async fn opaque(n: impl Display + Clone) -> Result<impl Display, LockError> {
    Ok(n.clone())
}

trait Repository {
    fn locks(&self) -> &LockClient;

    #[distributed_lock(key = "repo:<id>")]
    async fn default_body(&self, id: u64) -> Result<u64, LockError> {
        Ok(id)
    }

    async fn required(&self, id: u64) -> Result<Self::Row, LockError>;

    type Row;
}

struct Rows {
    locks: LockClient,
}

impl Repository for Rows {
    type Row = String;

    fn locks(&self) -> &LockClient {
        &self.locks
    }

    #[distributed_lock(key = "rows:<id>", client = self.locks())]
    async fn required(&self, id: u64) -> Result<Self::Row, LockError> {
        Ok(id.to_string())
    }
}

fn main() {
    let _ = |rows: Rows| async move {
        let _: u8 = generic(1, 2u8).await?;
        borrowed("x").await?;
        elided("xy").await?;
        opaque(3).await?.to_string();
        rows.default_body(1).await?;
        let _: String = rows.required(2).await?;
        Ok::<(), LockError>(())
    };
}
