//! Fault suite for `lock-runtime`.
//!
//! An orchestrator starts a private `redis-server` (or a Cluster, a
//! Sentinel group or Redlock masters), a TCP proxy
//! ([`lock_testkit::Proxy`]) that can delay, cut and black-hole traffic, a
//! fenced resource, and several client processes (this binary in worker
//! mode) whose tasks take a few locks over and over, cancel some
//! acquisitions, and make nested and joined locked calls. While they run,
//! it injects faults at random (seeded): Redis paused, killed and restarted
//! (empty, or from an older snapshot), made to evict keys, connections
//! killed or paused, traffic delayed, cut or black-holed, client runtimes
//! stalled, client processes killed inside a critical section, held locks
//! force-released or deleted while their holders re-enter them, releases
//! and try-locks cut short during server stalls. The [`checker`] then
//! counts what must never happen.
//!
//! Run it with `cargo run --release -p lock-chaos -- --help`.

pub mod checker;
pub mod clock;
pub mod options;
pub mod orchestrator;
pub mod record;
pub mod report;
pub mod resource;
pub mod rng;
pub mod worker;
