//! Commands sent directly, pipelines and transactions, and many clients at
//! once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use redis::{RedisResult, Value};

use super::{acquire, bulk, error, int, keys, release};
use crate::store::memory::{MemoryServer, MemorySubscriber};

#[tokio::test]
async fn commands_reply_as_redis_does() {
    let server = MemoryServer::new();
    let cmd = |args: &[&str]| server.command(args);
    assert_eq!(cmd(&["PING"]), Value::SimpleString("PONG".to_owned()));
    assert_eq!(
        error(&cmd(&["FOO", "a", "b"])),
        "ERR unknown command 'FOO', with args beginning with: 'a' 'b' "
    );
    assert_eq!(
        error(&cmd(&["GET"])),
        "ERR wrong number of arguments for 'get' command"
    );
    assert_eq!(cmd(&["HSET", "h", "a", "1", "b", "2"]), Value::Int(2));
    assert_eq!(
        error(&cmd(&["GET", "h"])),
        "WRONGTYPE Operation against a key holding the wrong kind of value"
    );
    assert_eq!(cmd(&["TYPE", "h"]), Value::SimpleString("hash".to_owned()));
    assert_eq!(cmd(&["HDEL", "h", "a", "b"]), Value::Int(2));
    assert_eq!(cmd(&["EXISTS", "h"]), Value::Int(0), "empty hashes vanish");
    assert_eq!(cmd(&["PTTL", "h"]), Value::Int(-2));
    cmd(&["SET", "k", "v"]);
    assert_eq!(cmd(&["PTTL", "k"]), Value::Int(-1));
    assert_eq!(cmd(&["PEXPIRE", "k", "0"]), Value::Int(1));
    assert_eq!(cmd(&["EXISTS", "k"]), Value::Int(0), "PEXPIRE 0 deletes");
    cmd(&["SET", "k", "v", "PX", "100000"]);
    assert!((99_000..=100_000).contains(&int(&cmd(&["PTTL", "k"]))));
    assert_eq!(
        cmd(&["INCR", "k"]),
        Value::ServerError(
            match redis::parse_redis_value(b"-ERR value is not an integer or out of range\r\n")
                .unwrap()
            {
                Value::ServerError(err) => err,
                _ => unreachable!(),
            }
        )
    );
    assert_eq!(cmd(&["ZADD", "z", "1", "a", "2", "b"]), Value::Int(2));
    assert_eq!(cmd(&["ZADD", "z", "GT", "0", "a"]), Value::Int(0));
    assert_eq!(cmd(&["ZSCORE", "z", "a"]), bulk("1"));
    assert_eq!(
        cmd(&["ZRANGE", "z", "-1", "-1", "WITHSCORES"]),
        Value::Array(vec![bulk("b"), bulk("2")])
    );
    assert_eq!(
        cmd(&["KEYS", "*"]),
        Value::Array(vec![bulk("k"), bulk("z")])
    );
    let Value::Array(time) = cmd(&["TIME"]) else {
        panic!("TIME is an array");
    };
    assert_eq!(time.len(), 2);
    let Value::BulkString(info) = cmd(&["INFO", "server"]) else {
        panic!("INFO is a bulk string");
    };
    let info = String::from_utf8(info).unwrap();
    assert!(
        info.contains(&format!("\r\nrun_id:{}\r\n", server.run_id())),
        "{info}"
    );
    assert!(info.contains("\r\nuptime_in_seconds:0\r\n"), "{info}");
}

#[tokio::test]
async fn pipelines_and_transactions_run_every_command() {
    let server = MemoryServer::new();
    let (a, b): (i64, i64) = redis::pipe()
        .cmd("INCR")
        .arg("n")
        .cmd("INCR")
        .arg("n")
        .query_async(&mut server.clone())
        .await
        .unwrap();
    assert_eq!((a, b), (1, 2));
    let (c, d): (i64, i64) = redis::pipe()
        .atomic()
        .cmd("INCR")
        .arg("n")
        .cmd("GET")
        .arg("n")
        .query_async(&mut server.clone())
        .await
        .unwrap();
    assert_eq!((c, d), (3, 3));
    let aborted: RedisResult<(i64,)> = redis::pipe()
        .atomic()
        .cmd("NOPE")
        .query_async(&mut server.clone())
        .await;
    assert!(aborted.is_err());
    assert_eq!(server.command(&["GET", "n"]), bulk("3"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_holder_at_a_time_across_threads() {
    let server = MemoryServer::new();
    let lock = keys("contended");
    let inside = Arc::new(AtomicBool::new(false));
    let granted = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for worker in 0..4 {
        let (server, lock, inside, granted) = (
            server.clone(),
            lock.clone(),
            inside.clone(),
            granted.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let owner = format!("w:{worker}");
            let mut fences = Vec::new();
            for _ in 0..50 {
                let reply = acquire(&server, &lock, &owner, Duration::from_millis(30_000)).await;
                if reply[0] == 1 {
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders");
                    fences.push(reply[1]);
                    granted.fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    inside.store(false, Ordering::SeqCst);
                    assert_eq!(release(&server, &lock, &owner, false).await, [0]);
                }
                tokio::task::yield_now().await;
            }
            fences
        }));
    }
    let mut fences = Vec::new();
    for task in tasks {
        fences.extend(task.await.unwrap());
    }
    assert!(granted.load(Ordering::SeqCst) > 0);
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(
        fences.len(),
        granted.load(Ordering::SeqCst),
        "every fence is new"
    );
}

#[test]
fn the_server_is_send_and_sync() {
    fn check<T: Send + Sync + Clone + 'static>() {}
    check::<MemoryServer>();
    fn check_subscriber<T: Send + Sync>() {}
    check_subscriber::<MemorySubscriber>();
}
