//! One clock for every process of a run.
//!
//! `std::time::Instant` cannot be compared across processes, so every
//! timestamp the suite records is `CLOCK_MONOTONIC` in microseconds: the
//! same clock in the orchestrator and in every worker on this machine.

use std::time::{Duration, Instant};

use nix::time::{ClockId, clock_gettime};

/// Microseconds on `CLOCK_MONOTONIC`, comparable across processes.
pub fn now_us() -> i64 {
    let ts = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is always available");
    ts.tv_sec() * 1_000_000 + ts.tv_nsec() / 1_000
}

/// Converts a `std::time::Instant` of this process to [`now_us`] time.
pub fn instant_us(at: Instant) -> i64 {
    let (now, mono) = (Instant::now(), now_us());
    if at >= now {
        mono + micros(at - now)
    } else {
        mono - micros(now - at)
    }
}

/// A duration in whole microseconds.
pub fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}
