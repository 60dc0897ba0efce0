// The expansion's own names cannot clash with the user's, and it names
// everything by absolute path: parameters called like its locals, a module
// without the prelude, shadowed `Result`, `Ok`, `String` and `core`.
mod core {}
mod std {}

#[allow(dead_code)]
struct String;

mod bare {
    #![no_implicit_prelude]

    use ::lock_runtime::{LockClient, LockError, distributed_lock};

    #[distributed_lock(key = "<__lock_key>:<__lock_client>:<__lock_guard>", client = locks)]
    pub async fn clashing_names(
        locks: &LockClient,
        __lock_key: u8,
        __lock_client: u8,
        __lock_guard: u8,
    ) -> ::core::result::Result<u8, LockError> {
        let __lock_result = __lock_key + __lock_client + __lock_guard;
        let __lock_error = __lock_result;
        ::core::result::Result::Ok(__lock_error)
    }
}

mod shadowed {
    use lock_runtime::{LockError, distributed_lock};

    #[allow(dead_code)]
    enum Never {}

    #[allow(dead_code)]
    fn Ok(_: Never) {}

    type Result<T> = ::std::result::Result<T, LockError>;

    #[distributed_lock(key = "shadowed:<n>")]
    pub async fn with_shadowed_names(n: u32) -> Result<u32> {
        ::std::result::Result::Ok(n)
    }
}

fn main() {
    let _ = |locks: lock_runtime::LockClient| async move {
        bare::clashing_names(&locks, 1, 2, 3).await?;
        shadowed::with_shadowed_names(4).await
    };
}
