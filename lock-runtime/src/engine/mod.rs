//! The machinery under the public types: lock operations over a whole
//! deployment (one store, Cluster slots, a Redlock quorum), the watchdog
//! that renews held locks, and the subscriber that wakes waiters. It is
//! handed what it needs (callbacks, plain data) and never imports the
//! public front.

pub(crate) mod backend;
pub(crate) mod wakeups;
pub(crate) mod watchdog;
