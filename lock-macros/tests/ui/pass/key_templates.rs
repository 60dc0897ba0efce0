// Key templates: fields, nested fields, tuple indices, several placeholders,
// Redis Cluster hash tags, escaped angle brackets, patterns in parameters,
// keyword names and any `Display` type.
use std::fmt;

use lock_runtime::{LockError, distributed_lock};

struct Tenant {
    id: u32,
}

struct Order {
    tenant: Tenant,
    id: u64,
    r#type: &'static str,
}

struct Sku(String);

impl fmt::Display for Sku {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[distributed_lock(key = "{tenant:<order.tenant.id>}:order:<order.id>:<order.type>")]
async fn fields(order: &Order) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "pair:<pair.0>/<pair.1>")]
async fn tuple_fields(pair: (u8, String)) -> Result<(), LockError> {
    let _moved: String = pair.1;
    Ok(())
}

#[distributed_lock(key = "<a><b>:<c>-<<literal>>")]
async fn several(a: u8, b: &str, c: Sku) -> Result<(), LockError> {
    Ok(())
}

struct Wrapper(u64);

#[distributed_lock(key = "patterns:<x>:<y>:<inner>")]
async fn patterns((x, y): (u8, u8), Wrapper(inner): Wrapper) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "kind:<type>:<r#match>")]
async fn keywords(r#type: &str, r#match: u8) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "{braces {are} text}")]
async fn braces() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "<n>")]
async fn impl_display(n: impl fmt::Display + Send) -> Result<(), LockError> {
    Ok(())
}

fn main() {
    let order = Order {
        tenant: Tenant { id: 7 },
        id: 42,
        r#type: "retail",
    };
    let _ = async move {
        fields(&order).await?;
        tuple_fields((1, "x".into())).await?;
        several(1, "b", Sku("c".into())).await?;
        patterns((1, 2), Wrapper(3)).await?;
        keywords("t", 1).await?;
        braces().await?;
        impl_display(5).await?;
        Ok::<(), LockError>(())
    };
}
