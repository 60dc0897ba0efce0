//! Everything that can go wrong, as one error type.

use std::fmt;
use std::time::Duration;

/// An error from taking, holding or releasing a lock.
///
/// Every variant that concerns one lock names its key. Match on the variants,
/// or ask the predicates, which keep working as variants are added. The
/// message says what happened to the lock; what Redis answered is the
/// error's [`source`](std::error::Error::source), which error reporters
/// (`anyhow`'s `{:#}`, `eyre`, `tracing`'s error fields) print after it,
/// once:
///
/// ```
/// use lock_runtime::LockError;
/// use std::time::Duration;
///
/// let err = LockError::Timeout { key: "order:42".into(), waited: Duration::from_secs(5) };
/// assert!(err.is_timeout());
/// assert_eq!(err.key(), Some("order:42"));
/// assert_eq!(err.to_string(), "timed out after 5s waiting for lock `order:42`");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another owner held the lock for the whole wait.
    #[error("timed out after {waited:?} waiting for lock `{key}`")]
    Timeout {
        /// The lock's name.
        key: String,
        /// How long the caller waited.
        waited: Duration,
    },
    /// The wait ended while the restart quarantine held the lock back: the
    /// server (or its lock's hash slot) restarted less than
    /// [`restart_quarantine`](crate::LockClientBuilder::restart_quarantine)
    /// ago, maybe from an older snapshot, so no fencing token is drawn
    /// there until the quarantine ends, even for a lock nobody holds.
    /// [`is_timeout`](LockError::is_timeout) is true for it too: trying
    /// again after `left` succeeds if nobody else took the lock.
    #[error(
        "timed out after {waited:?} waiting for lock `{key}`: held back by the restart quarantine \
         for {left:?} more (the server restarted recently; no fencing token is drawn until then)"
    )]
    Quarantined {
        /// The lock's name.
        key: String,
        /// How long the caller waited.
        waited: Duration,
        /// How much longer the quarantine lasts, as the server last said.
        left: Duration,
    },
    /// The lock was held and is not any more, or may not be.
    #[error("lost lock `{key}`: {reason}")]
    Lost {
        /// The lock's name.
        key: String,
        /// What was observed.
        reason: LossReason,
    },
    /// No default client was installed with [`install`](crate::install).
    #[error(
        "no lock client installed: call lock_runtime::install(client) first, or name one with `client = ...`"
    )]
    NotInstalled,
    /// The lock key exists in Redis but is not a lock (for example a string).
    #[error("key `{key}` holds a value that is not a lock (WRONGTYPE)")]
    WrongType {
        /// The lock's name.
        key: String,
        /// Redis's answer.
        source: redis::RedisError,
    },
    /// Redis refused the credentials (or none were given where needed).
    #[error("Redis refused authentication")]
    Auth {
        /// Redis's answer.
        source: redis::RedisError,
    },
    /// The server is a read-only replica.
    #[error("Redis is read-only (a replica?) for lock `{key}`")]
    ReadOnly {
        /// The lock's name.
        key: String,
        /// Redis's answer.
        source: redis::RedisError,
    },
    /// Redis could not be reached: refused, reset, or not answering in time;
    /// or a deployment between masters (a Cluster slot down or moving, a
    /// master down, a server still loading its data).
    #[error("Redis unavailable{}", for_key(key))]
    Unavailable {
        /// The lock's name, when the failure concerned one lock.
        key: Option<String>,
        /// The underlying failure.
        source: redis::RedisError,
    },
    /// Redis did not answer within the command timeout.
    #[error("Redis did not answer within {after:?}{}", for_key(key))]
    CommandTimeout {
        /// The lock's name, when the command concerned one lock.
        key: Option<String>,
        /// The command timeout that ran out.
        after: Duration,
    },
    /// Fewer replicas than the lock's `min_replicas` confirmed having it
    /// within the replica timeout; the lock was given back (or, for a
    /// renewal, the renewal does not count). Retried within the wait.
    #[error(
        "{acked} of {wanted} replicas confirmed{} within {after:?}",
        for_key(key)
    )]
    NotReplicated {
        /// The lock, if the write was an acquisition.
        key: Option<String>,
        /// Replicas asked for.
        wanted: u32,
        /// Replicas that confirmed.
        acked: u32,
        /// The replica timeout.
        after: Duration,
    },
    /// Redlock: too few masters answered for the lock to be granted by the
    /// quorum it needs. Retried within the wait.
    #[error(
        "no quorum for lock `{key}`: {unreachable} of {nodes} masters failed, {needed} must agree"
    )]
    NoQuorum {
        /// The lock.
        key: String,
        /// Masters that must agree.
        needed: usize,
        /// Masters in the deployment.
        nodes: usize,
        /// Masters that failed to answer.
        unreachable: usize,
        /// The last failure seen (also the error's
        /// [`source`](std::error::Error::source)).
        #[source]
        last: Box<LockError>,
    },
    /// The client was shut down ([`LockClient::shutdown`](crate::LockClient::shutdown)):
    /// it takes no more locks, and waits that were under way ended.
    #[error("the lock client was shut down")]
    ShutDown,
    /// A lock name or option that cannot be used.
    #[error("invalid lock configuration: {0}")]
    Config(String),
    /// Any other error reported by Redis.
    #[error("Redis error{}", for_key(key))]
    Redis {
        /// The lock's name, when the error concerned one lock.
        key: Option<String>,
        /// Redis's answer.
        source: redis::RedisError,
    },
}

/// An error followed by each of its sources, joined by `: ` (as `anyhow`
/// prints a chain with `{:#}`): for this crate's logs and for `lockctl`,
/// since [`LockError`]'s message leaves Redis's answer to its source.
pub(crate) struct Chain<'a>(pub(crate) &'a (dyn std::error::Error + 'a));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(err) = source {
            write!(f, ": {err}")?;
            source = err.source();
        }
        Ok(())
    }
}

fn for_key(key: &Option<String>) -> String {
    key.as_ref()
        .map(|key| format!(" for lock `{key}`"))
        .unwrap_or_default()
}

/// Why a held lock counts as lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// A renewal found the lock gone or held by another owner.
    NotHeld,
    /// No renewal was confirmed before the local validity deadline: Redis was
    /// unreachable or slow for long enough that the lease may have run out.
    Expired,
    /// Releasing found the lock already gone or taken over.
    NotHeldAtRelease,
    /// Taking it again from inside its critical section (a nested locked
    /// call on the same lock) found it gone or held by another owner: it
    /// was deleted (an operator's force-release, an eviction, a failover
    /// that lost it) while the enclosing holder thought it held it.
    NotHeldAtReentry,
    /// Its fixed lease ran out: it was taken with
    /// [`lock_at_most`](crate::LockRequest::lock_at_most) (`lock_at_most` of
    /// the attribute) and held to the end of it.
    LeaseEnded,
    /// Its client was shut down ([`LockClient::shutdown`](crate::LockClient::shutdown)),
    /// which gave the lock back.
    ShutDown,
    /// It was held as long as its
    /// [`max_hold`](crate::LockRequest::max_hold) allows (`max_hold` of the
    /// attribute): renewed up to that cap and no further.
    MaxHold,
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LossReason::NotHeld => "renewal found it deleted or held by another owner",
            LossReason::Expired => "no renewal confirmed before its lease could run out",
            LossReason::NotHeldAtRelease => "it was no longer held when released",
            LossReason::NotHeldAtReentry => {
                "taking it again inside its critical section found it deleted or held by another owner"
            }
            LossReason::LeaseEnded => "its fixed lease ran out",
            LossReason::ShutDown => "its client was shut down",
            LossReason::MaxHold => "it was held as long as its max_hold allows",
        })
    }
}

impl LockError {
    /// This error followed by each of its sources, joined by `: `, as
    /// `anyhow` prints a chain with `{:#}`: one line for a log or a command
    /// line tool. The error's own message leaves what Redis answered to its
    /// [`source`](std::error::Error::source), so `{}` alone does not show it.
    ///
    /// ```
    /// use lock_runtime::LockError;
    ///
    /// let refused = redis::RedisError::from((redis::ErrorKind::Io, "connection refused"));
    /// let err = LockError::Unavailable { key: Some("job".into()), source: refused };
    /// assert_eq!(err.to_string(), "Redis unavailable for lock `job`");
    /// assert!(
    ///     err.chain()
    ///         .to_string()
    ///         .starts_with("Redis unavailable for lock `job`: connection refused")
    /// );
    /// ```
    pub fn chain(&self) -> impl fmt::Display + '_ {
        Chain(self)
    }

    /// True for [`LockError::Timeout`]: the lock stayed taken for the whole
    /// wait; and for [`LockError::Quarantined`], a wait the restart
    /// quarantine ended.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// use std::time::Duration;
    /// use lock_runtime::LockClient;
    ///
    /// let locks = LockClient::in_memory().await?;
    /// let held = locks.lock("report").acquire().await?;
    /// // Outside `held`'s scope this is another owner's attempt: it waits.
    /// match locks.lock("report").wait(Duration::from_millis(50)).acquire().await {
    ///     Err(err) if err.is_timeout() => { /* someone else is on it: skip */ }
    ///     other => panic!("expected a timeout, got {other:?}"),
    /// }
    /// held.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_timeout(&self) -> bool {
        matches!(
            self,
            LockError::Timeout { .. } | LockError::Quarantined { .. }
        )
    }

    /// True for [`LockError::Lost`]: mutual exclusion can no longer be assumed.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::{LockClient, LockError, LossReason, MemoryStore};
    ///
    /// let store = MemoryStore::new();
    /// let locks = LockClient::connect(store.clone()).await?;
    /// let guard = locks.lock("order:42").acquire().await?;
    /// store.restart(); // as Redis restarting without its data
    /// guard.lost().await;
    /// let err = guard.release().await.unwrap_err();
    /// assert!(err.is_lost());
    /// assert!(matches!(err, LockError::Lost { reason: LossReason::NotHeld, .. }));
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_lost(&self) -> bool {
        matches!(self, LockError::Lost { .. })
    }

    /// True when Redis could not be reached or did not answer in time; trying
    /// again later may succeed.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_runtime::LockError;
    ///
    /// let err = LockError::CommandTimeout { key: None, after: Duration::from_secs(3) };
    /// assert!(err.is_unavailable()); // worth a retry after a pause
    /// assert!(!LockError::Config("empty lock name".into()).is_unavailable());
    /// ```
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            LockError::Unavailable { .. }
                | LockError::CommandTimeout { .. }
                | LockError::NotReplicated { .. }
                | LockError::NoQuorum { .. }
        )
    }

    /// The lock's name, for the errors that concern one lock.
    ///
    /// ```
    /// use lock_runtime::{LockError, LossReason};
    ///
    /// let lost = LockError::Lost { key: "order:42".into(), reason: LossReason::Expired };
    /// assert_eq!(lost.key(), Some("order:42"));
    /// assert_eq!(LockError::ShutDown.key(), None);
    /// ```
    pub fn key(&self) -> Option<&str> {
        match self {
            LockError::Timeout { key, .. }
            | LockError::Quarantined { key, .. }
            | LockError::Lost { key, .. }
            | LockError::WrongType { key, .. }
            | LockError::ReadOnly { key, .. }
            | LockError::NoQuorum { key, .. } => Some(key),
            LockError::Unavailable { key, .. }
            | LockError::CommandTimeout { key, .. }
            | LockError::Redis { key, .. }
            | LockError::NotReplicated { key, .. } => key.as_deref(),
            LockError::NotInstalled
            | LockError::Auth { .. }
            | LockError::ShutDown
            | LockError::Config(_) => None,
        }
    }

    /// Sorts a Redis error into the variant a caller can act on.
    pub(crate) fn from_redis(key: Option<&str>, source: redis::RedisError) -> LockError {
        use redis::{ErrorKind, ServerErrorKind};
        let key = key.map(str::to_owned);
        let code = source.code().unwrap_or_default();
        match source.kind() {
            ErrorKind::AuthenticationFailed => LockError::Auth { source },
            _ if matches!(code, "NOAUTH" | "WRONGPASS" | "NOPERM") => LockError::Auth { source },
            _ if is_read_only(&source) => LockError::ReadOnly {
                key: key.unwrap_or_default(),
                source,
            },
            _ if code == "WRONGTYPE" || source.to_string().contains("WRONGTYPE") => {
                LockError::WrongType {
                    key: key.unwrap_or_default(),
                    source,
                }
            }
            // A Cluster in the middle of a failover answers CLUSTERDOWN,
            // TRYAGAIN or keeps redirecting until the new master is known;
            // a replica promoted or a restarted server may still be loading
            // its data. Each passes once the deployment settles.
            ErrorKind::Server(ServerErrorKind::MasterDown | ServerErrorKind::BusyLoading) => {
                LockError::Unavailable { key, source }
            }
            _ if not_reached(&source) || source.is_cluster_error() => {
                LockError::Unavailable { key, source }
            }
            _ => LockError::Redis { key, source },
        }
    }
}

/// Whether a call failed on its way: the connection was refused, dropped or
/// broken, or no answer came in time. Redis may never have seen the call,
/// or run it and lost the answer; it did not refuse it.
pub(crate) fn not_reached(err: &redis::RedisError) -> bool {
    err.is_io_error()
        || err.is_connection_refusal()
        || err.is_connection_dropped()
        || err.is_timeout()
}

/// Whether Redis refused a write because the server is a read-only
/// replica, so that nothing was written. Redis 7 answers a script's refused
/// write with the `READONLY` code itself; before 7.0 the script fails with
/// `ERR Error running script (...): @user_script:1: @user_script: 1:
/// -READONLY You can't write against a read only replica.`, and inside a
/// batch (`batch.lua`), with the part from `@user_script: 1:` on.
pub(crate) fn is_read_only(err: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    err.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
        || err.code() == Some("READONLY")
        || err
            .detail()
            .is_some_and(|detail| detail.contains("-READONLY "))
}

#[cfg(test)]
mod tests {
    use super::LockError;
    use redis::{ErrorKind, RedisError, ServerErrorKind};

    fn server(kind: ServerErrorKind) -> RedisError {
        RedisError::from((ErrorKind::Server(kind), "from the test"))
    }

    #[test]
    fn a_deployment_between_masters_is_unavailable() {
        for kind in [
            ServerErrorKind::ClusterDown,
            ServerErrorKind::TryAgain,
            ServerErrorKind::Moved,
            ServerErrorKind::Ask,
            ServerErrorKind::MasterDown,
            ServerErrorKind::BusyLoading,
        ] {
            let err = LockError::from_redis(Some("k"), server(kind));
            assert!(err.is_unavailable(), "{kind:?}: {err:?}");
        }
    }

    #[test]
    fn a_message_leaves_redis_s_answer_to_its_source() {
        use std::error::Error;
        let answer = "from the test";
        let redis = LockError::from_redis(Some("k"), server(ServerErrorKind::ResponseError));
        let quorum = LockError::NoQuorum {
            key: "k".into(),
            needed: 3,
            nodes: 5,
            unreachable: 3,
            last: Box::new(LockError::from_redis(
                Some("k"),
                server(ServerErrorKind::ResponseError),
            )),
        };
        for err in [redis, quorum] {
            assert!(!err.to_string().contains(answer), "{err}");
            assert!(err.source().is_some(), "{err:?}");
            // Printed as a chain, Redis's answer shows once.
            let chain = super::Chain(&err).to_string();
            assert_eq!(chain.matches(answer).count(), 1, "{chain}");
        }
    }

    #[test]
    fn script_errors_are_not_unavailable() {
        let err = LockError::from_redis(Some("k"), server(ServerErrorKind::ResponseError));
        assert!(!err.is_unavailable(), "{err:?}");
        assert!(matches!(err, LockError::Redis { .. }));
    }

    /// Parses one error line as Redis sends it.
    fn reply(line: &str) -> RedisError {
        match redis::parse_redis_value(format!("-{line}\r\n").as_bytes()) {
            Ok(redis::Value::ServerError(err)) => err.into(),
            other => panic!("not an error reply: {other:?}"),
        }
    }

    #[test]
    fn a_read_only_replica_is_read_only_in_every_version() {
        for line in [
            // A command, and a script call from 7.0 on.
            "READONLY You can't write against a read only replica.",
            "READONLY You can't write against a read only replica. script: \
             8b2ff3a1a2ea9c87c9ffe4a8ed8d02ef2b79c10a, on @user_script:3.",
            // A script call before 7.0 (6.2.14's words).
            "ERR Error running script (call to f_bd6f3018b28bbdb36260f19d3c44afed740db987): \
             @user_script:1: @user_script: 1: -READONLY You can't write against a read \
             only replica.",
            // One call of a batch before 7.0 (see `batch.lua`).
            "@user_script: 1: -READONLY You can't write against a read only replica.",
        ] {
            let err = reply(line);
            assert!(super::is_read_only(&err), "{line}: {err:?}");
            let err = LockError::from_redis(Some("k"), err);
            assert!(matches!(err, LockError::ReadOnly { .. }), "{line}: {err:?}");
        }
        for line in [
            "ERR Error running script (call to f_0): @user_script:1: WRONGTYPE Operation \
             against a key holding the wrong kind of value",
            "ERR unknown command 'READONLY'",
            "NOSCRIPT No matching script. Please use EVAL.",
        ] {
            assert!(!super::is_read_only(&reply(line)), "{line}");
        }
    }
}
