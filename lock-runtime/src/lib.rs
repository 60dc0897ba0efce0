//! Redis distributed locks for async Rust.
//!
//! A lock is named by a string, held by a *task scope* (not a thread),
//! renewed by one watchdog per client while it is held, and released by its
//! holder or, if the holder dies, by its lease running out. Waiters sleep
//! until a release is published instead of polling. Every acquisition gets a
//! fencing token that only ever grows, for storage that must reject writes
//! from a holder whose lock has passed on.
//!
//! ```no_run
//! use std::time::Duration;
//! use lock_runtime::{LockClient, LockError};
//!
//! # async fn run() -> Result<(), LockError> {
//! let locks = LockClient::connect("redis://127.0.0.1:6379").await?;
//! let guard = locks
//!     .lock("order:42")
//!     .lease(Duration::from_secs(30))
//!     .wait(Duration::from_secs(5))
//!     .acquire()
//!     .await?;
//! let token = guard.fence(); // strictly increasing per lock across holders
//! tokio::select! {
//!     _ = guard.lost() => return Err(guard.lost_error()),
//!     _ = settle(42, token) => {}
//! }
//! guard.release().await?;
//! # Ok(())
//! # }
//! # async fn settle(_order: u64, _token: u64) {}
//! ```
//!
//! # What holds, and how
//!
//! * **Atomic scripts.** Acquire, release and renew are Lua scripts: a lock
//!   is taken only when free (or re-entered by its owner), and only its
//!   owner can renew or release it.
//! * **Ownership by task scope.** See [`LockGuard::scope`]: inside a
//!   critical section, taking the same lock again re-enters it; a spawned
//!   task is another owner.
//! * **Renewal.** One background task per client renews every held lock at
//!   a third of its lease, up to 250 locks per round trip.
//! * **Loss.** [`LockGuard::lost`] resolves when a renewal finds the lock
//!   gone or when Redis stays silent until the lock's validity deadline,
//!   which falls before the lease could run out in Redis.
//! * **Waiting.** A waiter subscribes to the lock's release channel before
//!   retrying and sleeps until a release, the holder's lease, or its deadline.
//! * **Fencing.** [`LockGuard::fence`]; the counters behind it are bounded
//!   (one per Redis Cluster slot at most), however many lock names are used.
//!
//! Every acquire, wait, renewal, release and loss is logged with `tracing`,
//! with the lock's key.
//!
//! # Features
//!
//! * `tls-rustls`: `rediss://` URLs, through rustls, with the crypto
//!   provider the application installs for the process (rustls needs one;
//!   without it, connecting over TLS fails with [`LockError::Config`]).
//! * `tls-rustls-ring`: `tls-rustls` with rustls's ring provider, which a
//!   client installs as the process's default when it first connects over
//!   TLS and the application installed none.
//! * `metrics` (default): counters and histograms through the `metrics`
//!   facade (see [`metric_names`]).
//! * `memory`: `LockClient::in_memory` and `MemoryStore`, locks kept in
//!   this process by the same Lua scripts in an embedded Lua VM, for unit
//!   tests without a Redis server. It compiles and links Lua, so turn it on
//!   where tests need it:
//!
//!   ```toml
//!   [dev-dependencies]
//!   lock-runtime = { version = "0.1", features = ["memory"] }
//!   ```
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

// Four layers, each importing only from the ones listed before it:
// plain types, the store (connections, scripts, the in-memory server), the
// engine (the operations over a deployment, renewal and wake-ups), and the
// public front.
mod api;
mod base;
mod engine;
pub mod guide;
mod store;

#[doc(hidden)]
pub use api::private as __private;

pub use api::admin::{Holder, LockInfo, LockWatch, Waiters};
pub use api::builder::LockClientBuilder;
pub use api::client::LockClient;
pub use api::guard::LockGuard;
pub use api::install::{install, installed};
pub use api::leader::{Election, LeaderInfo, Leadership};
pub use api::lifecycle::{Health, WATCHDOG_LAG_LIMIT};
pub use api::request::LockRequest;
pub use api::scope::{CurrentLock, current, current_cancellation_token, current_locks};
pub use base::config::{MAX_LEASE, MIN_LEASE};
pub use base::error::{LockError, LossReason};
pub use base::kind::{HoldMode, LockKind};
pub use base::owner::{BadOwnerId, OwnerId};
pub use base::telemetry::{describe_metrics, metric_names};
pub use lock_macros::distributed_lock;
/// The redis-rs crate this one is built on, whose types (`redis::Client`,
/// `ConnectionInfo`, `ConnectionManager`, `RedisError`) appear in its API:
/// use it rather than a `redis` dependency of your own, so that the two
/// always match.
pub use redis;
pub use store::deployment::Deployment;
#[cfg(feature = "memory")]
#[cfg_attr(docsrs, doc(cfg(feature = "memory")))]
pub use store::memory::MemoryStore;
/// The token [`LockGuard::cancellation_token`] and
/// [`current_cancellation_token`] hand out (tokio-util's), re-exported so
/// that naming it needs no dependency of your own.
pub use tokio_util::sync::CancellationToken;

/// The README's examples, compiled as doctests so that it stays true.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
