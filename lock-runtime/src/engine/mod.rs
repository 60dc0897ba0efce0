//! The machinery under the public types: lock operations over a whole
//! deployment (one store, Cluster slots, a Redlock quorum), the watchdog
//! that renews held locks, the subscriber that wakes waiters, and the
//! offers of waiters that a release may hand a lock to. It is
//! handed what it needs (callbacks, plain data) and never imports the
//! public front.

pub(crate) mod backend;
pub(crate) mod handoffs;
pub(crate) mod wakeups;
pub(crate) mod watchdog;
