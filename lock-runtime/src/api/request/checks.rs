//! What an acquisition refuses before it sends anything: settings that
//! cannot apply to the request.

use crate::base::config::{MAX_LEASE, MIN_LEASE};
use crate::base::error::LockError;
use crate::base::kind::Kind;

use super::LockRequest;

impl LockRequest {
    /// Refuses the request with [`LockError::Config`] when a builder
    /// method does not apply to its kind, a name is empty, or a lease,
    /// `max_hold` or `lock_at_least` is out of bounds; the first grant
    /// never outlives `max_hold` either (the lease is cut to it).
    pub(super) fn check(&mut self) -> Result<(), LockError> {
        let inner = &self.client;
        if let Some(misuse) = &self.misuse {
            return Err(LockError::Config(misuse.clone()));
        }
        if self.names.is_empty() || self.names.iter().any(String::is_empty) {
            return Err(LockError::Config(format!(
                "empty lock name in `{}`",
                self.label()
            )));
        }
        if let Some(max_hold) = self.max_hold {
            if max_hold < MIN_LEASE {
                return Err(LockError::Config(format!(
                    "`max_hold` {max_hold:?} for lock `{}` is shorter than the minimum lease {MIN_LEASE:?}",
                    self.label()
                )));
            }
            // The first grant never outlives the cap either.
            self.lease = self.lease.min(max_hold);
        }
        inner.config.check_lease(self.label(), self.lease)?;
        if let Kind::Permits(permits) = self.kind {
            permits.check(self.label())?;
        }
        if let Some(at_least) = self.at_least
            && at_least > MAX_LEASE
        {
            return Err(LockError::Config(format!(
                "`lock_at_least` {at_least:?} for lock `{}` is longer than the maximum {MAX_LEASE:?}",
                self.label()
            )));
        }
        if self.at_least.is_some() && matches!(self.kind, Kind::Permits(_) | Kind::Read) {
            return Err(LockError::Config(format!(
                "`lock_at_least` applies to exclusive and fair locks, not to the {} lock `{}`",
                self.kind.lock_kind(),
                self.label()
            )));
        }
        Ok(())
    }
}
