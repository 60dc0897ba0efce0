//! Fault suite for `lock-runtime`.
//!
//! An orchestrator starts a private `redis-server`, a TCP proxy that can
//! delay and cut traffic, a fenced resource, and several client processes
//! (this binary in worker mode) whose tasks take a few locks over and over.
//! While they run, it injects faults at random (seeded): Redis paused,
//! killed and restarted, connections killed or paused, traffic delayed or
//! cut, client runtimes stalled, client processes killed inside a critical
//! section. The [`checker`] then counts what must never happen.
//!
//! Run it with `cargo run --release -p lock-chaos -- --help`.

pub mod checker;
pub mod clock;
pub mod options;
pub mod orchestrator;
pub mod proxy;
pub mod record;
pub mod report;
pub mod resource;
pub mod rng;
pub mod worker;
