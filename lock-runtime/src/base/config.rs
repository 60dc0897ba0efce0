//! Client-wide settings as plain data, with the checks they must pass
//! (`LockClientBuilder` sets them).

use std::time::Duration;

use crate::base::error::LockError;

/// The shortest lease the library accepts. Renewal runs every lease/3, and a
/// renewal must make a round trip and be confirmed well within that time.
pub const MIN_LEASE: Duration = Duration::from_millis(100);

/// The longest lease (and `lock_at_least`) the library accepts, a year: a
/// lock is always meant to run out, and longer durations would not fit the
/// milliseconds Redis keeps expiries in (or the clock, for
/// `Duration::MAX`).
pub const MAX_LEASE: Duration = Duration::from_secs(365 * 24 * 3600);

/// The longest connect, command and replica timeout, a year: longer ones
/// (`Duration::MAX` for "no limit") are taken as this, which is as good as
/// no limit, while deadlines computed from it still fit the clock and
/// `WAIT`'s milliseconds.
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

/// Replicas that must have a write before it counts (`WAIT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Replicas {
    pub(crate) count: u32,
    pub(crate) timeout: Duration,
}

/// Settings shared by every lock taken through one [`LockClient`](crate::LockClient).
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) prefix: String,
    /// The client's readable name in owner ids (None: the program's name).
    pub(crate) name: Option<String>,
    pub(crate) default_lease: Duration,
    pub(crate) default_wait: Duration,
    pub(crate) drift: Option<Duration>,
    pub(crate) connect_timeout: Duration,
    pub(crate) command_timeout: Duration,
    /// PEM root certificates trusted for `rediss://` instead of the system's.
    pub(crate) tls_roots: Option<Vec<u8>>,
    pub(crate) restart_quarantine: Duration,
    pub(crate) strict_restart_quarantine: bool,
    /// Replicas that must confirm each acquisition and renewal (0: none).
    pub(crate) min_replicas: u32,
    pub(crate) replica_timeout: Duration,
    /// Refuse to connect when `min_replicas` does not cover every replica
    /// a failover may promote (see `strict_min_replicas`).
    pub(crate) strict_min_replicas: bool,
    /// Connect to servers that may evict keys (see `allow_eviction`).
    pub(crate) allow_eviction: bool,
    /// The level of each lock's `tracing` span.
    pub(crate) span_level: tracing::Level,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            prefix: "lock:".to_owned(),
            name: None,
            default_lease: Duration::from_secs(30),
            default_wait: Duration::from_secs(10),
            drift: None,
            connect_timeout: Duration::from_secs(5),
            command_timeout: Duration::from_secs(3),
            tls_roots: None,
            restart_quarantine: Duration::from_secs(30),
            strict_restart_quarantine: false,
            min_replicas: 0,
            replica_timeout: Duration::from_millis(500),
            strict_min_replicas: false,
            allow_eviction: false,
            span_level: tracing::Level::INFO,
        }
    }
}

impl Config {
    /// The safety margin subtracted from a lease when computing how long a
    /// lock is surely still ours: the fixed margin if one was set, otherwise
    /// 1 % of the lease plus 2 ms (the clock-drift allowance of the Redlock paper).
    pub(crate) fn drift_for(&self, lease: Duration) -> Duration {
        self.drift
            .unwrap_or_else(|| lease / 100 + Duration::from_millis(2))
    }

    /// The replication a lock asks for: `count` replicas (the client's
    /// `min_replicas` unless the request names its own).
    pub(crate) fn replicas(&self, count: Option<u32>) -> Option<Replicas> {
        let count = count.unwrap_or(self.min_replicas);
        (count > 0).then_some(Replicas {
            count,
            timeout: self.replica_timeout,
        })
    }

    /// How long a call may take that asks for `count` replicas (see
    /// [`replicas`](Self::replicas)): the command timeout, and the replica
    /// timeout its `WAIT` is given on top, if it waits.
    pub(crate) fn call_timeout(&self, count: Option<u32>) -> Duration {
        match self.replicas(count) {
            Some(_) => self.replicated_timeout(),
            None => self.command_timeout,
        }
    }

    /// How long a call followed by `WAIT` may take (on the connection kept
    /// for such calls): the command timeout, and the replica timeout `WAIT`
    /// is given on top. (Cut at the command timeout, a `WAIT` for replicas
    /// that confirm late would read as an unanswered call, not as too few
    /// replicas.)
    pub(crate) fn replicated_timeout(&self) -> Duration {
        self.command_timeout + self.replica_timeout
    }

    /// Rejects settings no client can work with.
    pub(crate) fn check(&self) -> Result<(), LockError> {
        if self.prefix.contains(['{', '}']) {
            return Err(LockError::Config(format!(
                "prefix `{}` may not contain `{{` or `}}`",
                self.prefix
            )));
        }
        if self.connect_timeout.is_zero() || self.command_timeout.is_zero() {
            return Err(LockError::Config(
                "timeouts must be longer than zero".into(),
            ));
        }
        // Checked whatever `min_replicas` is: a request may ask for
        // replicas of its own. `WAIT` counts whole milliseconds, and waits
        // without end when given 0.
        if self.replica_timeout < Duration::from_millis(1) {
            return Err(LockError::Config(format!(
                "replica_timeout must be at least 1ms, not {:?}",
                self.replica_timeout
            )));
        }
        self.check_lease("(default)", self.default_lease)
    }

    /// Rejects a lease that cannot be renewed safely.
    pub(crate) fn check_lease(&self, key: &str, lease: Duration) -> Result<(), LockError> {
        if lease < MIN_LEASE {
            return Err(LockError::Config(format!(
                "lease {lease:?} for lock `{key}` is shorter than the minimum {MIN_LEASE:?}"
            )));
        }
        if lease > MAX_LEASE {
            return Err(LockError::Config(format!(
                "lease {lease:?} for lock `{key}` is longer than the maximum {MAX_LEASE:?}"
            )));
        }
        if self.drift_for(lease) >= lease / 3 {
            return Err(LockError::Config(format!(
                "drift margin {:?} leaves no safe window in the {lease:?} lease of lock `{key}`",
                self.drift_for(lease)
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_drift_is_one_percent_plus_two_ms() {
        let config = Config::default();
        assert_eq!(
            config.drift_for(Duration::from_secs(30)),
            Duration::from_millis(302)
        );
    }

    #[test]
    fn short_leases_are_rejected() {
        let config = Config::default();
        assert!(config.check_lease("k", Duration::from_millis(99)).is_err());
        assert!(config.check_lease("k", MIN_LEASE).is_ok());
        assert!(config.check_lease("k", MAX_LEASE).is_ok());
        assert!(config.check_lease("k", Duration::MAX).is_err());
        let wide = Config {
            drift: Some(Duration::from_secs(1)),
            ..Config::default()
        };
        assert!(wide.check_lease("k", Duration::from_secs(2)).is_err());
        assert!(wide.check_lease("k", Duration::from_secs(4)).is_ok());
    }
}
