//! The public handle of the in-memory server, for users' unit tests.

use std::fmt;

use super::MemoryServer;

/// A lock store in this process's memory: what [`LockClient::in_memory`](crate::LockClient::in_memory)
/// keeps its locks in, shared by its clones.
///
/// It runs the very Lua scripts a Redis server runs (in an embedded Lua
/// 5.1, as Redis does), so leases, re-entry, fairness, fencing, waiting and
/// loss behave as on Redis; the same conformance tests run against both.
/// It is **single-process only**: two processes, or two test binaries,
/// never see each other's locks. Use it to unit-test code that takes locks,
/// not to coordinate anything.
///
/// Several clients on clones of one store exclude each other, like
/// several services sharing one Redis:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_runtime::LockError> {
/// use std::time::Duration;
/// use lock_runtime::{LockClient, MemoryStore};
///
/// let store = MemoryStore::new();
/// let first = LockClient::connect(store.clone()).await?;
/// let second = LockClient::connect(store.clone()).await?;
///
/// let held = first.lock("report").acquire().await?;
/// let busy = second.lock("report").wait(Duration::ZERO).acquire().await;
/// assert!(busy.unwrap_err().is_timeout());
///
/// // A store that loses its data, as a Redis restart without persistence:
/// // the holder is told its lock is lost.
/// store.restart();
/// held.lost().await;
/// # Ok(())
/// # }
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "memory")))]
#[derive(Clone, Default)]
pub struct MemoryStore {
    pub(crate) server: MemoryServer,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// Forgets every lock and fencing counter at once, as a Redis server
    /// restarted without persistence does. Holders find their locks gone at
    /// their next renewal (or at once, through the subscriber's dropped
    /// connection) and are told of loss; new locks are refused during the
    /// clients' restart quarantine, as on Redis.
    pub fn restart(&self) {
        self.server.restart();
    }

    /// How many keys the store holds (locks and their companions, such as
    /// fencing counters), for tests that check nothing was left behind.
    pub fn key_count(&self) -> usize {
        match self.server.command(&["DBSIZE"]) {
            redis::Value::Int(count) => usize::try_from(count).unwrap_or(0),
            _ => 0,
        }
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("MemoryStore").field(&self.server).finish()
    }
}

/// Clones of one store are equal: they hold the same locks.
impl PartialEq for MemoryStore {
    fn eq(&self, other: &MemoryStore) -> bool {
        self.server.same_as(&other.server)
    }
}

impl Eq for MemoryStore {}
