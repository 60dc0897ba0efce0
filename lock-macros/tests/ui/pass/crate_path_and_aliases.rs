// `crate = "..."` when the runtime is re-exported under another path, and
// `Result` aliases whose error type converts from `LockError`.
mod platform {
    pub mod locks {
        pub use lock_runtime::*;
    }
    pub type Result<T> = std::result::Result<T, Error>;

    #[derive(Debug)]
    pub struct Error(pub String);

    impl From<locks::LockError> for Error {
        fn from(err: locks::LockError) -> Self {
            Error(err.to_string())
        }
    }
}

use platform::locks::distributed_lock;

#[distributed_lock(key = "renamed:<id>", crate = "platform::locks")]
async fn renamed(id: u32) -> platform::Result<u32> {
    Ok(id)
}

#[distributed_lock(key = "path", crate = crate::platform::locks)]
async fn bare_path() -> platform::Result<()> {
    Ok(())
}

#[distributed_lock(key = "std")]
async fn std_result() -> std::result::Result<(), Box<dyn std::error::Error>> {
    Ok(())
}

type BoxResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

#[distributed_lock(key = "boxed")]
async fn boxed_result() -> BoxResult<()> {
    Ok(())
}

fn main() {
    let _ = async {
        renamed(1).await?;
        bare_path().await?;
        Ok::<(), platform::Error>(())
    };
    let _ = std_result();
    let _ = boxed_result();
}
