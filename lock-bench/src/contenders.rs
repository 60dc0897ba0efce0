//! The alternatives our library is measured against, written the way a
//! careful user would write them.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::Script;
use redis::aio::ConnectionManager;

/// Errors of the benchmark itself.
pub type BenchError = Box<dyn std::error::Error + Send + Sync>;

/// The usual compare-and-delete release: delete the key only if it still
/// holds our token.
static COMPARE_AND_DELETE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('get', KEYS[1]) == ARGV[1] then \
           return redis.call('del', KEYS[1]) \
         else \
           return 0 \
         end",
    )
});

/// The cheapest script there is, for the round-trip floor.
static TRIVIAL: LazyLock<Script> = LazyLock::new(|| Script::new("return 1"));

/// A lock written by hand on redis-rs: `SET key token NX PX lease` to take
/// it, the compare-and-delete script (EVALSHA, hashed once) to give it back,
/// on the same kind of connection the runtime uses (a `ConnectionManager`,
/// i.e. a multiplexed connection that reconnects).
#[derive(Clone)]
pub struct HandLock {
    conn: ConnectionManager,
    prefix: String,
    id: String,
}

static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

impl HandLock {
    /// Connects to `url`; keys get `prefix` in front.
    pub async fn connect(url: &str, prefix: &str) -> Result<HandLock, BenchError> {
        let client = redis::Client::open(url)?;
        let conn = ConnectionManager::new(client).await?;
        Ok(HandLock {
            conn,
            prefix: prefix.to_owned(),
            // A random process id plus a counter: unique like a random token,
            // without a system call per lock.
            id: format!("{:032x}", uuid::Uuid::new_v4().as_u128()),
        })
    }

    /// One attempt: the token when the lock was taken, `None` when it is held.
    pub async fn try_lock(
        &self,
        name: &str,
        lease: Duration,
    ) -> Result<Option<HandGuard>, BenchError> {
        let key = format!("{}{name}", self.prefix);
        let token = format!("{}:{}", self.id, NEXT_TOKEN.fetch_add(1, Ordering::Relaxed));
        let mut conn = self.conn.clone();
        let taken: Option<String> = redis::cmd("SET")
            .arg(&key)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(lease.as_millis() as u64)
            .query_async(&mut conn)
            .await?;
        Ok(taken.map(|_| HandGuard { key, token }))
    }

    /// Takes the lock, polling every `retry` until it is free.
    pub async fn lock_polling(
        &self,
        name: &str,
        lease: Duration,
        retry: Duration,
    ) -> Result<HandGuard, BenchError> {
        loop {
            if let Some(guard) = self.try_lock(name, lease).await? {
                return Ok(guard);
            }
            tokio::time::sleep(retry).await;
        }
    }

    /// Gives the lock back; false if it was not ours any more.
    pub async fn unlock(&self, guard: HandGuard) -> Result<bool, BenchError> {
        let mut conn = self.conn.clone();
        let deleted: i64 = COMPARE_AND_DELETE
            .key(&guard.key)
            .arg(&guard.token)
            .invoke_async(&mut conn)
            .await?;
        Ok(deleted == 1)
    }
}

/// A lock taken by [`HandLock`].
#[derive(Debug)]
pub struct HandGuard {
    key: String,
    token: String,
}

/// The floor: two bare round trips on the same kind of connection, a `SET`
/// and an EVALSHA of a script that does nothing.
#[derive(Clone)]
pub struct Floor {
    conn: ConnectionManager,
}

impl Floor {
    /// Connects to `url`.
    pub async fn connect(url: &str) -> Result<Floor, BenchError> {
        let client = redis::Client::open(url)?;
        Ok(Floor {
            conn: ConnectionManager::new(client).await?,
        })
    }

    /// The "acquire": one SET.
    pub async fn set(&self, name: &str) -> Result<(), BenchError> {
        let mut conn = self.conn.clone();
        let _: () = redis::cmd("SET")
            .arg(format!("floor:{name}"))
            .arg("1")
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    /// The "release": one EVALSHA of `return 1`.
    pub async fn script(&self) -> Result<(), BenchError> {
        let mut conn = self.conn.clone();
        let _: i64 = TRIVIAL.invoke_async(&mut conn).await?;
        Ok(())
    }

    /// One PING.
    pub async fn ping(&self) -> Result<(), BenchError> {
        let mut conn = self.conn.clone();
        let _: String = redis::cmd("PING").query_async(&mut conn).await?;
        Ok(())
    }
}

/// A `rslock` lock manager on one server, with its default retries
/// (3 attempts, random pauses up to 200 ms) or others.
pub fn rslock_manager(url: &str, retry: Option<(u32, Duration)>) -> rslock::LockManager {
    let mut manager = rslock::LockManager::new(vec![url.to_owned()]);
    if let Some((count, delay)) = retry {
        manager.set_retry(count, delay);
    }
    manager
}

/// Compare-and-delete that also announces the release on a channel.
static COMPARE_DELETE_PUBLISH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('get', KEYS[1]) == ARGV[1] then \
           redis.call('del', KEYS[1]) \
           redis.call('publish', KEYS[2], 'released') \
           return 1 \
         else \
           return 0 \
         end",
    )
});

/// The floor for a pub/sub wake-up, by hand on redis-rs: the hand-written
/// lock whose release also publishes, and a waiter that listens on a RESP3
/// connection and tries once per message, with nothing else around it.
#[derive(Clone)]
pub struct PubSubFloor {
    lock: HandLock,
    woken: std::sync::Arc<tokio::sync::Notify>,
    channel: String,
}

impl PubSubFloor {
    /// Connects, and subscribes to `channel`.
    pub async fn connect(url: &str, channel: &str) -> Result<PubSubFloor, BenchError> {
        let lock = HandLock::connect(url, "psfloor:").await?;
        let woken = std::sync::Arc::new(tokio::sync::Notify::new());
        let on_push = {
            let woken = woken.clone();
            move |push: redis::PushInfo| {
                if push.kind == redis::PushKind::Message {
                    woken.notify_one();
                }
                Ok::<(), redis::aio::SendError>(())
            }
        };
        let separator = if url.contains('?') { '&' } else { '?' };
        let client = redis::Client::open(format!("{url}{separator}protocol=resp3"))?;
        let config = redis::aio::ConnectionManagerConfig::new().set_push_sender(on_push);
        let mut subscriber = ConnectionManager::new_with_config(client, config).await?;
        subscriber.subscribe(channel).await?;
        // The connection lives as long as the process: leak one handle to it.
        std::mem::forget(subscriber);
        Ok(PubSubFloor {
            lock,
            woken,
            channel: channel.to_owned(),
        })
    }

    /// One attempt, without waiting.
    pub async fn try_lock(
        &self,
        name: &str,
        lease: Duration,
    ) -> Result<Option<HandGuard>, BenchError> {
        self.lock.try_lock(name, lease).await
    }

    /// Takes the lock: try, and when it is busy sleep until a release message.
    pub async fn lock(&self, name: &str, lease: Duration) -> Result<HandGuard, BenchError> {
        loop {
            let woken = self.woken.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if let Some(guard) = self.lock.try_lock(name, lease).await? {
                return Ok(guard);
            }
            woken.await;
        }
    }

    /// Releases and publishes.
    pub async fn unlock(&self, guard: HandGuard) -> Result<bool, BenchError> {
        let mut conn = self.lock.conn.clone();
        let deleted: i64 = COMPARE_DELETE_PUBLISH
            .key(&guard.key)
            .key(&self.channel)
            .arg(&guard.token)
            .invoke_async(&mut conn)
            .await?;
        Ok(deleted == 1)
    }
}
