//! The same commands and lock scripts on this server and on a real
//! `redis-server` 7.0 (started through lock-testkit when one is installed),
//! compared reply by reply.

use std::slice;
use std::sync::LazyLock;
use std::time::Duration;

use redis::{RedisResult, Script, ScriptInvocation, Value};

use super::{invocation, keys, real_redis};
use crate::base::keys::LockKeys;
use crate::base::kind::Kind;
use crate::store::memory::MemoryServer;
use crate::store::scripts::{Giving, Quarantine, Renewing, Stored, calls};

/// The same commands and scripts, on this server and on a real Redis 7.0:
/// every reply must be the same.
#[tokio::test]
async fn replies_match_a_real_redis_server() {
    let Some((_real, mut conn)) = real_redis().await else {
        return;
    };
    let mut memory = MemoryServer::new();
    let mut mismatches = Vec::new();
    for args in differential_commands() {
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        // Both through redis-rs's error extraction, so that an error nested
        // in an array compares as the error it becomes for a caller.
        let expected = comparable(cmd.query_async::<Value>(&mut conn).await);
        let actual = comparable(
            redis::aio::ConnectionLike::req_packed_command(&mut memory, &cmd)
                .await
                .and_then(Value::extract_error),
        );
        if actual != expected {
            mismatches.push(format!(
                "{args:?}\n  redis:  {expected:?}\n  memory: {actual:?}"
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

/// The lock scripts through the same scenario on this server and on a
/// real Redis 7.0: the same replies, up to the clock (fencing tokens are
/// compared by when each first appeared, times to the nearest second).
#[tokio::test]
async fn lock_scripts_match_a_real_redis_server() {
    let Some((_real, mut conn)) = real_redis().await else {
        return;
    };
    let mut memory = MemoryServer::new();
    let scenario = lock_scenario();
    let mut expected = Normalizer::default();
    let mut actual = Normalizer::default();
    let mut mismatches = Vec::new();
    for (step, (what, call)) in scenario.iter().enumerate() {
        let real_reply =
            expected.normalize(comparable(call.invoke_async::<Value>(&mut conn).await));
        let memory_reply =
            actual.normalize(comparable(call.invoke_async::<Value>(&mut memory).await));
        if real_reply != memory_reply {
            mismatches.push(format!(
                "step {step} ({what})\n  redis:  {real_reply}\n  memory: {memory_reply}"
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

/// Replies made comparable across servers whose clocks differ.
#[derive(Default)]
struct Normalizer {
    fences: Vec<i64>,
}

impl Normalizer {
    fn normalize(&mut self, value: Value) -> String {
        match value {
            Value::Array(items) => {
                let items: Vec<String> =
                    items.into_iter().map(|item| self.normalize(item)).collect();
                format!("[{}]", items.join(", "))
            }
            // Fencing tokens start at the server clock in microseconds.
            Value::Int(n) if n > 1_000_000_000_000_000 => {
                let index = self.fences.iter().position(|f| *f == n).unwrap_or_else(|| {
                    self.fences.push(n);
                    self.fences.len() - 1
                });
                format!("fence#{index}")
            }
            // Times left, to the nearest second.
            Value::Int(n) if n > 100 => format!("~{}s", (n + 500) / 1000),
            other => format!("{other:?}"),
        }
    }
}

/// A string at a key, set by a hand-made script (the scenario is a list of
/// script invocations).
static SET_STRING: LazyLock<Script> =
    LazyLock::new(|| Script::new("return redis.call('SET', KEYS[1], 'x')"));

/// Every lock script, each call built by `calls` as the client builds it.
fn lock_scenario() -> Vec<(&'static str, ScriptInvocation<'static>)> {
    let (plain, sem, rw, fair, other) = (
        keys("diff:plain"),
        keys("diff:sem"),
        keys("diff:rw"),
        keys("diff:fair"),
        keys("diff:other"),
    );
    let lease = Duration::from_millis(60_000);
    let mark = Duration::from_millis(5_000);
    let acquire = |lock: &LockKeys, owner: &str, mark: Duration| {
        invocation(&calls::acquire(
            slice::from_ref(lock),
            calls::Asker::fresh(owner),
            lease,
            mark,
            true,
        ))
    };
    let release = |lock: &LockKeys, owner: &str, all: bool| {
        invocation(&calls::release(
            slice::from_ref(lock),
            &Stored::Hash,
            owner,
            if all { Giving::ALL } else { Giving::ONE },
        ))
    };
    let place_release = |kind: Kind, lock: &LockKeys, owner: &str| {
        let stored = Stored::for_kind(kind, lock);
        invocation(&calls::release(
            slice::from_ref(lock),
            &stored,
            owner,
            Giving::ONE,
        ))
    };
    let permit = |owner: &str| {
        invocation(&calls::permit_acquire(
            &sem,
            calls::Asker::fresh(owner),
            lease,
            2,
        ))
    };
    let read = |owner: &str| {
        invocation(&calls::read_acquire(
            &rw,
            calls::Asker::fresh(owner),
            lease,
            mark,
        ))
    };
    let fair_acquire = |owner: &str| {
        let stay = Duration::from_millis(10_000);
        invocation(&calls::fair_acquire(
            &fair,
            calls::Asker::fresh(owner),
            lease,
            stay,
            true,
        ))
    };
    let renew = |items: &[(&LockKeys, &str)]| {
        let items: Vec<Renewing<'_>> = items
            .iter()
            .map(|(lock, owner)| Renewing {
                key: &lock.lock,
                stored: &Stored::Hash,
                owner,
                lease,
            })
            .collect();
        invocation(&calls::renew(&items))
    };
    // A server up for less than the quarantine, and strict: closed.
    let strict = Quarantine {
        seen: "".into(),
        length: Duration::from_millis(60_000),
        strict: true,
    };
    let quarantined = calls::acquire(
        slice::from_ref(&other),
        calls::Asker::fresh("a"),
        lease,
        Duration::ZERO,
        true,
    )
    .invocation(false, &strict);
    // Not a lock script: a string where acquire.lua expects a lock hash.
    let mut set_string = SET_STRING.prepare_invoke();
    set_string.key(&other.lock);
    vec![
        ("acquire", acquire(&plain, "a", Duration::ZERO)),
        ("re-enter", acquire(&plain, "a", Duration::ZERO)),
        ("busy", acquire(&plain, "b", Duration::ZERO)),
        ("release by another", release(&plain, "b", false)),
        ("release one level", release(&plain, "a", false)),
        ("release", release(&plain, "a", false)),
        ("acquire again", acquire(&plain, "b", Duration::ZERO)),
        (
            "renew",
            renew(&[(&plain, "b"), (&other, "b"), (&plain, "a")]),
        ),
        (
            "re-enter, to release all",
            acquire(&plain, "b", Duration::ZERO),
        ),
        ("release all levels", release(&plain, "b", true)),
        ("permit a", permit("a")),
        ("permit b", permit("b")),
        ("permit a again", permit("a")),
        ("permit c, busy", permit("c")),
        (
            "permit release",
            place_release(Kind::Permits(2.into()), &sem, "b"),
        ),
        ("permit c", permit("c")),
        ("read r1", read("r1")),
        ("writer waits", acquire(&rw, "w", mark)),
        ("read r2 held back", read("r2")),
        ("read r1 again", read("r1")),
        ("reader leaves", place_release(Kind::Read, &rw, "r1")),
        ("reader leaves", place_release(Kind::Read, &rw, "r1")),
        ("writer in", acquire(&rw, "w", mark)),
        ("read r2 waits", read("r2")),
        ("writer out", release(&rw, "w", false)),
        ("writer back, readers first", acquire(&rw, "w", mark)),
        ("read r2", read("r2")),
        ("fair a", fair_acquire("a")),
        ("fair b", fair_acquire("b")),
        ("fair c", fair_acquire("c")),
        ("fair a out", release(&fair, "a", false)),
        ("fair c, not its turn", fair_acquire("c")),
        ("fair b", fair_acquire("b")),
        ("fair c leaves", invocation(&calls::fair_leave(&fair, "c"))),
        ("quarantined", quarantined),
        ("a string", set_string),
        ("wrong type", acquire(&other, "a", Duration::ZERO)),
    ]
}

/// A reply, or the error a caller gets, as a comparable value.
fn comparable(result: RedisResult<Value>) -> Value {
    result.unwrap_or_else(|err| {
        let message = format!(
            "-{} {}\r\n",
            err.code().unwrap_or("?"),
            err.detail().unwrap_or("")
        );
        redis::parse_redis_value(message.as_bytes()).unwrap()
    })
}

fn differential_commands() -> Vec<Vec<&'static str>> {
    let script_bodies = [
        "return {1, 'a', false, true, 2.9, -2.9, {ok='fine'}, nil, 5}",
        "return {1, 2, {err='inner'}}",
        "return {ok='a', err='b'}",
        "return {ok=1}",
        "return 3.99",
        "return -3.99",
        "return 2^63",
        "return",
        "return redis.error_reply('My Error')",
        "return redis.error_reply('Oops')",
        "return redis.status_reply('FINE')",
        "return redis.status_reply(1)",
        "return redis.call('NOPE')",
        "return redis.call('GET')",
        "return redis.call()",
        "return redis.call('GET', {})",
        "return redis.call('EVAL', 'return 1', '0')",
        "return redis.pcall('NOPE')",
        "x = 1",
        "return y",
        "\n\nerror('third line')",
        "error({err='My Error'})",
        "error({err=5})",
        "error()",
        "error('x', 0)",
        "return 1 +",
        "return tostring(rawget(_G, 'os'))",
        "local ok, e = pcall(redis.call, 'HGET', 's', 'f') return {tostring(ok), e}",
        "return redis.pcall('HGET', 's', 'f')",
        "return {type(redis.call('GET', 'missing')), redis.call('PING').ok, redis.call('TYPE', 's').ok}",
        "redis.call('SET', 'f', 0.1) redis.call('SET', 'g', 1e20) redis.call('SET', 'h2', 123456789012345678) return {redis.call('GET', 'f'), redis.call('GET', 'g'), redis.call('GET', 'h2')}",
        "return redis.call('HMGET', 'nokey', 'a', 'b')",
        "return redis.call('ZRANGE', 'z', 0, -1, 'WITHSCORES')",
        "return redis.sha1hex('a')",
        "return tostring(1e15)",
        "return string.format('%d', 1700000000123456)",
        "KEYS[1] = 'changed' return KEYS",
        "return redis.log('a', 'b')",
        "return redis.log(9, 'b')",
        "return redis.log(redis.LOG_WARNING, 'b')",
        "redis.log(redis.LOG_WARNING)",
        "return redis.setresp(4)",
        "return redis.setresp()",
        "return redis.setresp(2)",
        "return redis.sha1hex(5)",
        "return redis.sha1hex()",
        "local ok, e = xpcall(function() return redis.call('NOPE') end, \
         function(e) return type(e) .. ':' .. tostring(e.err) end) return {tostring(ok), e}",
        "local ok, e = pcall(error, {err = 'x'}) return e",
        "local ok, e = pcall(error, 'x') return e",
    ];
    let mut commands: Vec<Vec<&'static str>> = vec![
        vec!["PING"],
        vec!["PING", "hi"],
        vec!["PING", "a", "b"],
        vec!["ECHO", "x"],
        vec!["FOO", "a", "b"],
        vec!["GET"],
        vec!["SET", "s", "1"],
        vec!["GET", "s"],
        vec!["INCR", "s"],
        vec!["INCRBY", "s", "10"],
        vec!["INCRBY", "s", "x"],
        vec!["DECR", "s"],
        vec!["SET", "big", "9223372036854775807"],
        vec!["INCR", "big"],
        vec!["SET", "lead", "01"],
        vec!["INCR", "lead"],
        vec!["HSET", "h", "a", "1", "b", "2"],
        vec!["HSET", "h", "a"],
        vec!["HGET", "h", "a"],
        vec!["HMGET", "h", "a", "x", "b"],
        vec!["HINCRBY", "h", "a", "5"],
        vec!["HINCRBY", "h", "a", "x"],
        vec!["HSET", "h", "c", "x"],
        vec!["HINCRBY", "h", "c", "1"],
        vec!["HDEL", "h", "a", "x"],
        vec!["HLEN", "h"],
        vec!["HEXISTS", "h", "b"],
        vec!["HGETALL", "h"],
        vec!["GET", "h"],
        vec!["HGET", "s", "a"],
        vec!["ZADD", "s", "1", "a"],
        vec!["INCR", "h"],
        vec!["ZADD", "z", "1", "a", "2", "b", "3", "c"],
        vec!["ZADD", "z", "GT", "0", "a"],
        vec!["ZADD", "z", "GT", "CH", "5", "a", "1", "d"],
        vec!["ZADD", "z", "NX", "9", "a", "9", "e"],
        vec!["ZADD", "z", "XX", "7", "zz"],
        vec!["ZADD", "z", "LT", "CH", "0.5", "b"],
        vec!["ZADD", "z", "INCR", "1.5", "a"],
        vec!["ZADD", "z", "XX", "INCR", "1", "nope"],
        vec!["ZADD", "z", "NX", "GT", "1", "a"],
        vec!["ZADD", "z", "XX", "NX", "1", "a"],
        vec!["ZADD", "z", "INCR", "1", "a", "2", "b"],
        vec!["ZADD", "z", "1"],
        vec!["ZADD", "z", "1", "a", "2"],
        vec!["ZADD", "z", "abc", "a"],
        vec!["ZADD", "z", "nan", "a"],
        vec!["ZADD", "z", "inf", "i"],
        vec!["ZADD", "z", "INCR", "-inf", "i"],
        vec!["ZADD", "z", "0.1", "f"],
        vec!["ZSCORE", "z", "a"],
        vec!["ZSCORE", "z", "f"],
        vec!["ZSCORE", "z", "i"],
        vec!["ZSCORE", "z", "nope"],
        vec!["ZCARD", "z"],
        vec!["ZCOUNT", "z", "(1", "+inf"],
        vec!["ZCOUNT", "z", "-inf", "2"],
        vec!["ZCOUNT", "z", "x", "1"],
        vec!["ZRANGE", "z", "0", "-1"],
        vec!["ZRANGE", "z", "0", "-1", "WITHSCORES"],
        vec!["ZRANGE", "z", "-1", "-1", "WITHSCORES"],
        vec!["ZRANGE", "z", "-100", "1"],
        vec!["ZRANGE", "z", "1", "0"],
        vec!["ZRANGE", "z", "0", "1", "REV"],
        vec![
            "ZRANGE",
            "z",
            "(1",
            "5",
            "BYSCORE",
            "LIMIT",
            "1",
            "2",
            "WITHSCORES",
        ],
        vec!["ZRANGE", "z", "5", "(1", "BYSCORE", "REV"],
        vec!["ZRANGE", "z", "0", "-1", "LIMIT", "0", "1"],
        vec!["ZRANGE", "z", "x", "1"],
        vec!["ZRANGEBYSCORE", "z", "-inf", "+inf"],
        vec![
            "ZRANGEBYSCORE",
            "z",
            "(1",
            "3",
            "WITHSCORES",
            "LIMIT",
            "0",
            "1",
        ],
        vec!["ZRANGEBYSCORE", "z", "1", "3", "LIMIT", "1"],
        vec!["ZRANGEBYSCORE", "z", "-inf", "+inf", "LIMIT", "1", "-1"],
        vec!["ZRANGEBYSCORE", "z", "a", "b"],
        vec!["ZREM", "z", "a", "nope"],
        vec!["ZREMRANGEBYSCORE", "z", "-inf", "(2"],
        vec!["ZRANGE", "z", "0", "-1", "WITHSCORES"],
        vec!["ZRANGE", "h", "0", "-1"],
        vec!["DEL", "z", "z"],
        vec!["EXISTS", "z", "h", "h", "nope"],
        vec!["TYPE", "h"],
        vec!["TYPE", "nope"],
        vec!["TYPE", "s"],
        vec!["PTTL", "nope"],
        vec!["PTTL", "s"],
        vec!["PEXPIRE", "nope", "100"],
        vec!["PEXPIRE", "s", "x"],
        vec!["PEXPIRE", "s", "100000", "XX"],
        vec!["PEXPIRE", "s", "100000", "NX", "XX"],
        vec!["PEXPIRE", "s", "100000", "GT", "LT"],
        vec!["PEXPIRE", "s", "100000", "FOO"],
        vec!["PEXPIRE", "s", "100000", "GT"],
        vec!["PEXPIRE", "s", "100000", "NX"],
        vec!["PEXPIRE", "s", "100000", "NX"],
        vec!["PERSIST", "s"],
        vec!["PTTL", "s"],
        vec!["PEXPIRE", "s", "-5"],
        vec!["EXISTS", "s"],
        vec!["SET", "k", "v", "NX"],
        vec!["SET", "k", "v2", "NX"],
        vec!["SET", "k", "v3", "XX", "GET"],
        vec!["SET", "k", "v", "NX", "GET"],
        vec!["SET", "k", "v", "PX", "0"],
        vec!["SET", "k", "v", "EX", "-1"],
        vec!["SET", "k", "v", "PX", "abc"],
        vec!["SET", "k", "v", "NX", "XX"],
        vec!["SET", "k", "v", "KEEPTTL", "PX", "10"],
        vec!["SET", "k", "v", "FOO"],
        vec!["SET", "h", "v", "GET"],
        vec!["HSET", "hh", "f", "v"],
        vec!["SET", "hh", "v"],
        vec!["TYPE", "hh"],
        vec!["GET", "k"],
        vec!["DEL"],
        vec!["PUBLISH", "ch", "msg"],
        vec!["SCRIPT", "FOO"],
        vec!["SCRIPT", "LOAD", "return 1"],
        vec![
            "SCRIPT",
            "EXISTS",
            "e0e1f9fabfc9d4800c877a703b823ac0578ff8db",
            "abc",
        ],
        vec!["EVALSHA", "E0E1F9FABFC9D4800C877A703B823AC0578FF8DB", "0"],
        vec!["EVALSHA", "0123456789012345678901234567890123456789", "0"],
        vec!["EVAL", "return KEYS[1]", "2", "a"],
        vec!["EVAL", "return KEYS[1]", "-1"],
        vec!["EVAL", "return KEYS[1]", "x"],
        vec!["EVAL", "return 1"],
        vec![
            "EVAL",
            "return {KEYS[1], ARGV[1], ARGV[2]}",
            "1",
            "k",
            "a",
            "b",
        ],
        vec!["SET", "s", "x"],
        vec!["ZADD", "z", "1", "a", "2", "b"],
    ];
    for body in script_bodies {
        commands.push(vec!["EVAL", body, "0"]);
    }
    commands.push(vec![
        "EVAL",
        "return redis.call('HGETALL', KEYS[1])",
        "1",
        "h",
    ]);
    commands
}
