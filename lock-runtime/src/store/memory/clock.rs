//! The in-memory server's clock.
//!
//! Wall-clock time read once, when the server is created, then advanced by
//! [`std::time::Instant`]: it never jumps when the system clock is set, and
//! it ignores tokio's clock, so a test with paused tokio time still sees
//! leases run out in real time (as a real Redis server would).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(Debug)]
pub(crate) struct Clock {
    started: Instant,
    /// Unix time in microseconds at `started`.
    started_unix_us: u64,
}

impl Clock {
    pub(crate) fn new() -> Clock {
        let started = Instant::now();
        let started_unix_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_micros() as u64);
        Clock {
            started,
            started_unix_us,
        }
    }

    /// Unix time in microseconds (what TIME reports).
    pub(crate) fn now_us(&self) -> u64 {
        self.started_unix_us + self.started.elapsed().as_micros() as u64
    }

    /// Unix time in milliseconds (what expiry is measured in).
    pub(crate) fn now_ms(&self) -> i64 {
        (self.now_us() / 1000) as i64
    }

    /// How long ago `since` (an earlier [`Clock::now_us`]) was.
    pub(crate) fn since(&self, since_us: u64) -> Duration {
        Duration::from_micros(self.now_us().saturating_sub(since_us))
    }
}
