//! The `#[distributed_lock]` attribute. Use it through `lock-runtime`, which re-exports it.
