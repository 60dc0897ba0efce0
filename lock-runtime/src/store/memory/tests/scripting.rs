//! Scripting: the restart quarantine (read from INFO), errors from the lock
//! scripts, unknown scripts loaded and retried, and Lua values and errors
//! converted as Redis converts them.

use std::time::Duration;

use redis::{Script, ServerErrorKind, Value};

use super::{bulk, error, int, keys, try_acquire};
use crate::store::memory::MemoryServer;
use crate::store::memory::lua::sha1_hex;
use crate::store::scripts::Quarantine;

#[tokio::test]
async fn the_restart_quarantine_reads_info() {
    let server = MemoryServer::new();
    let lock = keys("quarantined");
    let lease = Duration::from_millis(30_000);
    let quarantine = |seen: &str, strict| Quarantine {
        seen: seen.into(),
        length: Duration::from_millis(60_000),
        strict,
    };
    // Strict: a new counter on a server up for less than the quarantine
    // keeps the slot closed for the rest of it.
    let strict = quarantine("", true);
    let closed = try_acquire(&server, &lock, "a:1", lease, Duration::ZERO, &strict)
        .await
        .unwrap();
    assert_eq!(closed[0], 0);
    assert!((59_000..=60_000).contains(&closed[1]), "{closed:?}");
    assert_eq!(int(&server.command(&["EXISTS", &lock.fence])), 0);
    // Not strict, and this is the server seen at connect: open.
    let run_id = server.run_id();
    let seen = quarantine(&run_id, false);
    let open = try_acquire(&server, &lock, "a:1", lease, Duration::ZERO, &seen)
        .await
        .unwrap();
    assert_eq!(open[0], 1);
    // After a restart, the client's run id is another server's: closed.
    server.restart();
    assert_ne!(server.run_id(), run_id);
    let closed = try_acquire(&server, &lock, "b:1", lease, Duration::ZERO, &seen)
        .await
        .unwrap();
    assert_eq!(closed[0], 0);
}

#[tokio::test]
async fn a_string_at_a_lock_key_is_wrongtype() {
    let server = MemoryServer::new();
    let lock = keys("clobbered");
    server.command(&["SET", &lock.lock, "not a hash"]);
    let err = try_acquire(
        &server,
        &lock,
        "a:1",
        Duration::from_millis(30_000),
        Duration::ZERO,
        &Quarantine::none(),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), Some("WRONGTYPE"));
    let detail = err.detail().unwrap_or_default();
    assert!(
        detail.starts_with("Operation against a key holding the wrong kind of value script: "),
        "{detail}"
    );
    assert!(
        detail.ends_with(".") && detail.contains(", on @user_script:"),
        "{detail}"
    );
    assert_eq!(server.command(&["GET", &lock.lock]), bulk("not a hash"));
}

#[tokio::test]
async fn unknown_scripts_are_loaded_and_retried() {
    let server = MemoryServer::new();
    let script = Script::new("return {KEYS[1], ARGV[1], #KEYS, #ARGV}");
    let unknown = server.command(&["EVALSHA", script.get_hash(), "0"]);
    let Value::ServerError(err) = &unknown else {
        panic!("{unknown:?}");
    };
    assert_eq!(err.kind(), Some(ServerErrorKind::NoScript));
    assert_eq!(
        error(&unknown),
        "NOSCRIPT No matching script. Please use EVAL."
    );

    let reply: (String, String, i64, i64) = script
        .key("k")
        .arg("v")
        .invoke_async(&mut server.clone())
        .await
        .unwrap();
    assert_eq!(reply, ("k".to_owned(), "v".to_owned(), 1, 1));
    assert_eq!(
        server.command(&["SCRIPT", "EXISTS", &script.get_hash().to_uppercase(), "0"]),
        Value::Array(vec![Value::Int(1), Value::Int(0)])
    );
    // EVAL caches the script too, under the hash redis-rs computes.
    let other = Script::new("return 7");
    assert_eq!(int(&server.command(&["EVAL", "return 7", "0"])), 7);
    assert_eq!(int(&server.command(&["EVALSHA", other.get_hash(), "0"])), 7);

    // A restart forgets scripts; invoking loads them again.
    server.restart();
    assert_eq!(
        server.command(&["SCRIPT", "EXISTS", script.get_hash()]),
        Value::Array(vec![Value::Int(0)])
    );
    let again: (String, String, i64, i64) = script
        .key("k")
        .arg("v")
        .invoke_async(&mut server.clone())
        .await
        .unwrap();
    assert_eq!(again.2, 1);
}

#[tokio::test]
async fn script_values_convert_as_in_redis() {
    let server = MemoryServer::new();
    let eval = |body: &str| server.command(&["EVAL", body, "0"]);
    assert_eq!(
        eval("return {1, 'a', false, true, 2.9, -2.9, {ok='fine'}, nil, 5}"),
        Value::Array(vec![
            Value::Int(1),
            bulk("a"),
            Value::Nil,
            Value::Int(1),
            Value::Int(2),
            Value::Int(-2),
            Value::SimpleString("fine".to_owned()),
        ])
    );
    assert_eq!(eval("return {ok='OK'}"), Value::Okay);
    assert_eq!(error(&eval("return {err='My Error'}")), "My Error");
    assert_eq!(error(&eval("return redis.error_reply('Oops')")), "ERR Oops");
    assert_eq!(
        eval("return redis.status_reply('FINE')"),
        Value::SimpleString("FINE".to_owned())
    );
    assert_eq!(eval("return 1/0"), Value::Int(i64::MIN));
    // Replies as Lua sees them.
    server.command(&["SET", "n", "5"]);
    assert_eq!(
        eval(
            "return {type(redis.call('GET', 'missing')), type(redis.call('INCR', 'n')), \
             redis.call('PING').ok, type(redis.call('HMGET', 'nokey', 'a')[1])}"
        ),
        Value::Array(vec![
            bulk("boolean"),
            bulk("number"),
            bulk("PONG"),
            bulk("boolean")
        ])
    );
    // Numbers passed to commands are written with 17 significant digits.
    assert_eq!(
        eval(
            "redis.call('SET', 'f', 0.1) redis.call('SET', 'g', 2^53) return {redis.call('GET', 'f'), redis.call('GET', 'g')}"
        ),
        Value::Array(vec![bulk("0.10000000000000001"), bulk("9007199254740992")])
    );
    // redis.pcall returns the error; Lua's pcall gets its message.
    server.command(&["SET", "s", "x"]);
    assert_eq!(
        eval(
            "local ok, e = pcall(redis.call, 'HGET', 's', 'f') return {tostring(ok), e, redis.pcall('HGET', 's', 'f').err}"
        ),
        Value::Array(vec![
            bulk("false"),
            bulk("WRONGTYPE Operation against a key holding the wrong kind of value"),
            bulk("WRONGTYPE Operation against a key holding the wrong kind of value"),
        ])
    );
}

#[tokio::test]
async fn script_errors_say_where_as_in_redis() {
    let server = MemoryServer::new();
    let eval = |body: &str| {
        let sha = sha1_hex(body.as_bytes());
        let reply = error(&server.command(&["EVAL", body, "0"]));
        reply.replace(&sha, "<sha>")
    };
    assert_eq!(
        eval("\nerror('foo')"),
        "ERR user_script:2: foo script: <sha>, on @user_script:2."
    );
    assert_eq!(
        eval("return redis.call('NOPE')"),
        "ERR Unknown Redis command called from script script: <sha>, on @user_script:1."
    );
    assert_eq!(
        eval("return redis.call('GET')"),
        "ERR Wrong number of args calling Redis command from script script: <sha>, on @user_script:1."
    );
    assert_eq!(
        eval("return redis.call('GET', {})"),
        "ERR Lua redis lib command arguments must be strings or integers script: <sha>, on @user_script:1."
    );
    assert_eq!(
        eval("return redis.call('EVAL', 'return 1', '0')"),
        "ERR This Redis command is not allowed from script script: <sha>, on @user_script:1."
    );
    assert_eq!(
        eval("x = 1"),
        "ERR user_script:1: Attempt to modify a readonly table script: <sha>, on @user_script:1."
    );
    assert_eq!(
        eval("return os.time()"),
        "ERR user_script:1: Script attempted to access nonexistent global variable 'os' script: <sha>, on @user_script:1."
    );
    assert_eq!(
        eval("return 1 +"),
        "ERR Error compiling script (new function): user_script:1: unexpected symbol near '<eof>'"
    );
}
