//! The commands the in-memory server understands, with Redis 7.0's replies
//! and error messages.
//!
//! EVAL, EVALSHA and SCRIPT are listed here (for their arity and so that
//! scripts may not call them) but run in [`super::lua`].

use std::collections::BTreeMap;

use super::clock::Clock;
use super::pubsub::PubSub;
use super::reply::{
    NOT_FLOAT, NOT_INTEGER, OVERFLOW, Reply, SYNTAX, WRONGTYPE, format_double, parse_bound,
    parse_f64, parse_i64,
};
use super::store::{Data, ScoreRange, Store, ZSet, glob_match};

/// What every command may read or change.
pub(crate) struct Ctx<'a> {
    pub(crate) store: &'a mut Store,
    /// The time keys expire by, in Unix ms: the start of the command, or of
    /// the whole script for commands a script calls (as in Redis 7).
    pub(crate) now: i64,
    pub(crate) clock: &'a Clock,
    pub(crate) server: &'a ServerInfo,
    pub(crate) pubsub: &'a PubSub,
}

/// What INFO server reports.
#[derive(Debug)]
pub(crate) struct ServerInfo {
    pub(crate) run_id: String,
    /// When the server (last) started, per [`Clock::now_us`].
    pub(crate) started_us: u64,
}

/// An error reply is the `Err` side, so that handlers can use `?`.
type Result<T = Reply> = std::result::Result<T, Reply>;
type Handler = fn(&mut Ctx<'_>, &[Vec<u8>]) -> Result;

/// One command: its name, Redis's arity (counting the name; negative for
/// "at least"), whether scripts may call it, and what it does.
pub(crate) struct Command {
    pub(crate) name: &'static str,
    arity: i32,
    pub(crate) noscript: bool,
    run: Handler,
}

impl Command {
    pub(crate) fn arity_ok(&self, argc: usize) -> bool {
        let argc = argc as i64;
        let arity = i64::from(self.arity);
        if arity >= 0 {
            argc == arity
        } else {
            argc >= -arity
        }
    }

    /// Runs the command; `args[0]` is its name. The arity must be checked.
    pub(crate) fn run(&self, ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
        (self.run)(ctx, args).unwrap_or_else(|error| error)
    }
}

macro_rules! commands {
    ($($name:literal $arity:literal $noscript:literal $run:expr;)*) => {
        &[$(Command { name: $name, arity: $arity, noscript: $noscript, run: $run }),*]
    };
}

static COMMANDS: &[Command] = commands! {
    "ping" -1 false ping;
    "echo" 2 false echo;
    "time" 1 false time;
    "info" -1 false info;
    "lastsave" 1 false lastsave;
    "dbsize" 1 false dbsize;
    "flushall" -1 false flush;
    "flushdb" -1 false flush;
    "select" 2 false select;
    "wait" 3 true wait;
    "del" -2 false del;
    "unlink" -2 false del;
    "exists" -2 false exists;
    "type" 2 false type_;
    "keys" 2 false keys;
    "scan" -2 false scan;
    "pexpire" -3 false pexpire;
    "expire" -3 false expire;
    "persist" 2 false persist;
    "pttl" 2 false pttl;
    "ttl" 2 false ttl;
    "get" 2 false get;
    "set" -3 false set;
    "incr" 2 false incr;
    "decr" 2 false decr;
    "incrby" 3 false incrby;
    "decrby" 3 false decrby;
    "hdel" -3 false hdel;
    "hexists" 3 false hexists;
    "hget" 3 false hget;
    "hgetall" 2 false hgetall;
    "hincrby" 4 false hincrby;
    "hlen" 2 false hlen;
    "hmget" -3 false hmget;
    "hset" -4 false hset;
    "zadd" -4 false zadd;
    "zcard" 2 false zcard;
    "zcount" 4 false zcount;
    "zrange" -4 false zrange;
    "zrangebyscore" -4 false zrangebyscore;
    "zrem" -3 false zrem;
    "zremrangebyscore" 4 false zremrangebyscore;
    "zscore" 3 false zscore;
    "publish" 3 false publish;
    "spublish" 3 false spublish;
    "pubsub" -2 false pubsub;
    // Run by the server itself (scripting) or not at all on this
    // connection (subscriptions, transactions): listed so that scripts get
    // Redis's refusal and arity errors come out right.
    "eval" -3 true not_here;
    "evalsha" -3 true not_here;
    "script" -2 true not_here;
    "subscribe" -2 true not_here;
    "ssubscribe" -2 true not_here;
    "psubscribe" -2 true not_here;
    "unsubscribe" -1 true not_here;
    "sunsubscribe" -1 true not_here;
    "punsubscribe" -1 true not_here;
    "multi" 1 true not_here;
    "exec" 1 true not_here;
    "discard" 1 true not_here;
    "watch" -2 true not_here;
};

/// The command named `name` (any case).
pub(crate) fn lookup(name: &[u8]) -> Option<&'static Command> {
    COMMANDS
        .iter()
        .find(|command| command.name.as_bytes().eq_ignore_ascii_case(name))
}

/// The command `args` call, or the error Redis replies to a client when it
/// is unknown or given a wrong number of arguments.
pub(crate) fn check(args: &[Vec<u8>]) -> Result<&'static Command> {
    let Some(name) = args.first() else {
        return Err(Reply::error("ERR empty command"));
    };
    let Some(command) = lookup(name) else {
        let mut listed = String::new();
        for arg in &args[1..] {
            if listed.len() >= 128 {
                break;
            }
            let room = 128 - listed.len();
            let arg = String::from_utf8_lossy(arg);
            let arg: String = arg.chars().take(room).collect();
            listed.push_str(&format!("'{arg}' "));
        }
        let name: String = String::from_utf8_lossy(name).chars().take(128).collect();
        return Err(Reply::error(format!(
            "ERR unknown command '{name}', with args beginning with: {listed}"
        )));
    };
    if !command.arity_ok(args.len()) {
        return Err(arity_error(command.name));
    }
    Ok(command)
}

fn arity_error(name: &str) -> Reply {
    Reply::error(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

fn not_here(_: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    Err(Reply::error(format!(
        "ERR '{}' is not supported by the in-memory server on this connection",
        String::from_utf8_lossy(&args[0]).to_lowercase()
    )))
}

fn int_arg(arg: &[u8]) -> Result<i64> {
    parse_i64(arg).ok_or_else(|| Reply::error(NOT_INTEGER))
}

fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

// Typed access: WRONGTYPE when the key holds another type.

fn string<'s>(ctx: &'s mut Ctx<'_>, key: &[u8]) -> Result<Option<&'s mut Vec<u8>>> {
    match ctx.store.get_mut(key, ctx.now) {
        None => Ok(None),
        Some(Data::Str(value)) => Ok(Some(value)),
        Some(_) => Err(Reply::error(WRONGTYPE)),
    }
}

fn hash<'s>(
    ctx: &'s mut Ctx<'_>,
    key: &[u8],
) -> Result<Option<&'s mut BTreeMap<Vec<u8>, Vec<u8>>>> {
    match ctx.store.get_mut(key, ctx.now) {
        None => Ok(None),
        Some(Data::Hash(hash)) => Ok(Some(hash)),
        Some(_) => Err(Reply::error(WRONGTYPE)),
    }
}

fn hash_or_new<'s>(ctx: &'s mut Ctx<'_>, key: &[u8]) -> Result<&'s mut BTreeMap<Vec<u8>, Vec<u8>>> {
    match ctx
        .store
        .get_or_insert(key, ctx.now, || Data::Hash(BTreeMap::new()))
    {
        Data::Hash(hash) => Ok(hash),
        _ => Err(Reply::error(WRONGTYPE)),
    }
}

fn zset<'s>(ctx: &'s mut Ctx<'_>, key: &[u8]) -> Result<Option<&'s mut ZSet>> {
    match ctx.store.get_mut(key, ctx.now) {
        None => Ok(None),
        Some(Data::ZSet(set)) => Ok(Some(set)),
        Some(_) => Err(Reply::error(WRONGTYPE)),
    }
}

// Server.

fn ping(_: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    match args {
        [_] => Ok(Reply::Status("PONG".to_owned())),
        [_, message] => Ok(Reply::bulk(message.clone())),
        _ => Err(arity_error("ping")),
    }
}

fn echo(_: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    Ok(Reply::bulk(args[1].clone()))
}

fn time(ctx: &mut Ctx<'_>, _: &[Vec<u8>]) -> Result {
    let now = ctx.clock.now_us();
    Ok(Reply::Array(vec![
        Reply::bulk((now / 1_000_000).to_string()),
        Reply::bulk((now % 1_000_000).to_string()),
    ]))
}

/// No saves happen here, so the last one is the start (as Redis counts it).
fn lastsave(ctx: &mut Ctx<'_>, _: &[Vec<u8>]) -> Result {
    Ok(Reply::Int((ctx.server.started_us / 1_000_000) as i64))
}

fn info(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    let sections: Vec<String> = args[1..]
        .iter()
        .map(|section| String::from_utf8_lossy(section).to_lowercase())
        .collect();
    let wants = |name: &str| {
        sections.is_empty()
            || sections.iter().any(|section| {
                matches!(section.as_str(), "all" | "everything" | "default") || section == name
            })
    };
    let mut text = String::new();
    if wants("server") {
        let uptime = ctx.clock.since(ctx.server.started_us).as_secs();
        text.push_str(&format!(
            "# Server\r\n\
             redis_version:7.0.15\r\n\
             redis_mode:standalone\r\n\
             executable:lock-runtime in-memory server\r\n\
             process_id:{}\r\n\
             run_id:{}\r\n\
             tcp_port:0\r\n\
             server_time_usec:{}\r\n\
             uptime_in_seconds:{uptime}\r\n\
             uptime_in_days:{}\r\n",
            std::process::id(),
            ctx.server.run_id,
            ctx.clock.now_us(),
            uptime / 86_400,
        ));
    }
    if wants("keyspace") {
        if !text.is_empty() {
            text.push_str("\r\n");
        }
        text.push_str("# Keyspace\r\n");
        ctx.store.sweep(ctx.now);
        if ctx.store.len() > 0 {
            text.push_str(&format!(
                "db0:keys={},expires={},avg_ttl=0\r\n",
                ctx.store.len(),
                ctx.store.expiring()
            ));
        }
    }
    Ok(Reply::bulk(text))
}

fn dbsize(ctx: &mut Ctx<'_>, _: &[Vec<u8>]) -> Result {
    ctx.store.sweep(ctx.now);
    Ok(Reply::Int(ctx.store.len() as i64))
}

fn flush(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    match &args[1..] {
        [] => {}
        [mode] if is(mode, "sync") || is(mode, "async") => {}
        _ => return Err(Reply::error(SYNTAX)),
    }
    ctx.store.clear();
    Ok(Reply::ok())
}

fn select(_: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    match parse_i64(&args[1]) {
        Some(0) => Ok(Reply::ok()),
        Some(_) => Err(Reply::error("ERR DB index is out of range")),
        None => Err(Reply::error(NOT_INTEGER)),
    }
}

/// No replicas: none ever acknowledges, and nobody waits for one.
fn wait(_: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    int_arg(&args[1])?;
    let timeout = int_arg(&args[2])
        .map_err(|_| Reply::error("ERR timeout is not an integer or out of range"))?;
    if timeout < 0 {
        return Err(Reply::error("ERR timeout is negative"));
    }
    Ok(Reply::Int(0))
}

// Keys.

fn del(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    let mut deleted = 0;
    for key in &args[1..] {
        if ctx.store.exists(key, ctx.now) && ctx.store.remove(key) {
            deleted += 1;
        }
    }
    Ok(Reply::Int(deleted))
}

fn exists(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    let count = args[1..]
        .iter()
        .filter(|key| ctx.store.exists(key, ctx.now))
        .count();
    Ok(Reply::Int(count as i64))
}

fn type_(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    let name = ctx
        .store
        .get(&args[1], ctx.now)
        .map_or("none", Data::type_name);
    Ok(Reply::Status(name.to_owned()))
}

fn keys(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    let pattern = &args[1];
    Ok(Reply::Array(
        ctx.store
            .keys(ctx.now)
            .into_iter()
            .filter(|key| glob_match(pattern, key))
            .map(Reply::Bulk)
            .collect(),
    ))
}

/// SCAN returns every matching key at once, with cursor 0.
fn scan(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    if parse_u64(&args[1]).is_none() {
        return Err(Reply::error("ERR invalid cursor"));
    }
    let mut pattern: Option<&[u8]> = None;
    let mut type_name: Option<String> = None;
    let mut options = args[2..].iter();
    while let Some(option) = options.next() {
        let value = options.next().ok_or_else(|| Reply::error(SYNTAX))?;
        if is(option, "match") {
            pattern = Some(value);
        } else if is(option, "count") {
            if int_arg(value)? < 1 {
                return Err(Reply::error(SYNTAX));
            }
        } else if is(option, "type") {
            type_name = Some(String::from_utf8_lossy(value).to_lowercase());
        } else {
            return Err(Reply::error(SYNTAX));
        }
    }
    let mut found = Vec::new();
    for key in ctx.store.keys(ctx.now) {
        if pattern.is_some_and(|pattern| !glob_match(pattern, &key)) {
            continue;
        }
        if let Some(wanted) = &type_name {
            let actual = ctx.store.get(&key, ctx.now).map_or("none", Data::type_name);
            if actual != wanted {
                continue;
            }
        }
        found.push(Reply::Bulk(key));
    }
    Ok(Reply::Array(vec![Reply::bulk("0"), Reply::Array(found)]))
}

fn parse_u64(arg: &[u8]) -> Option<u64> {
    std::str::from_utf8(arg).ok()?.parse().ok()
}

// Expiry.

fn pexpire(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    expire_generic(ctx, args, 1, "pexpire")
}

fn expire(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    expire_generic(ctx, args, 1000, "expire")
}

/// PEXPIRE and EXPIRE with NX, XX, GT, LT; a time not in the future deletes
/// the key.
fn expire_generic(ctx: &mut Ctx<'_>, args: &[Vec<u8>], unit: i64, name: &str) -> Result {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for option in &args[3..] {
        if is(option, "nx") {
            nx = true;
        } else if is(option, "xx") {
            xx = true;
        } else if is(option, "gt") {
            gt = true;
        } else if is(option, "lt") {
            lt = true;
        } else {
            return Err(Reply::error(format!(
                "ERR Unsupported option {}",
                String::from_utf8_lossy(option)
            )));
        }
    }
    if nx && (xx || gt || lt) {
        return Err(Reply::error(
            "ERR NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if gt && lt {
        return Err(Reply::error(
            "ERR GT and LT options at the same time are not compatible",
        ));
    }
    let amount = int_arg(&args[2])?;
    let invalid = || Reply::error(format!("ERR invalid expire time in '{name}' command"));
    let at = amount
        .checked_mul(unit)
        .and_then(|ms| ms.checked_add(ctx.now))
        .ok_or_else(invalid)?;
    let key = &args[1];
    let Some(current) = ctx.store.expiry(key, ctx.now) else {
        return Ok(Reply::Int(0));
    };
    let allowed = match current {
        None => !xx && !gt,
        Some(current) => !nx && (!gt || at > current) && (!lt || at < current),
    };
    if !allowed {
        return Ok(Reply::Int(0));
    }
    if at <= ctx.now {
        ctx.store.remove(key);
    } else {
        ctx.store.set_expiry(key, Some(at));
    }
    Ok(Reply::Int(1))
}

fn persist(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    match ctx.store.expiry(&args[1], ctx.now) {
        Some(Some(_)) => {
            ctx.store.set_expiry(&args[1], None);
            Ok(Reply::Int(1))
        }
        _ => Ok(Reply::Int(0)),
    }
}

/// Milliseconds left: -2 for a missing key, -1 for one that never expires.
fn ttl_ms(ctx: &mut Ctx<'_>, key: &[u8]) -> i64 {
    match ctx.store.expiry(key, ctx.now) {
        None => -2,
        Some(None) => -1,
        Some(Some(at)) => (at - ctx.now).max(0),
    }
}

fn pttl(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    Ok(Reply::Int(ttl_ms(ctx, &args[1])))
}

fn ttl(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    Ok(Reply::Int(match ttl_ms(ctx, &args[1]) {
        ms if ms < 0 => ms,
        ms => (ms + 500) / 1000,
    }))
}

// Strings.

fn get(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    Ok(string(ctx, &args[1])?.map_or(Reply::Nil, |value| Reply::bulk(value.clone())))
}

/// `SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]`.
fn set(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    let (key, value) = (&args[1], &args[2]);
    let (mut nx, mut xx, mut get, mut keepttl) = (false, false, false, false);
    let mut expire: Option<(&[u8], i64, bool)> = None; // (option, unit ms, absolute)
    let mut options = args[3..].iter();
    while let Some(option) = options.next() {
        let unit = if is(option, "ex") {
            Some((1000, false))
        } else if is(option, "px") {
            Some((1, false))
        } else if is(option, "exat") {
            Some((1000, true))
        } else if is(option, "pxat") {
            Some((1, true))
        } else {
            None
        };
        if let Some((unit, absolute)) = unit {
            if expire.is_some() || keepttl {
                return Err(Reply::error(SYNTAX));
            }
            let amount = options.next().ok_or_else(|| Reply::error(SYNTAX))?;
            expire = Some((amount, unit, absolute));
        } else if is(option, "nx") && !xx {
            nx = true;
        } else if is(option, "xx") && !nx {
            xx = true;
        } else if is(option, "get") {
            get = true;
        } else if is(option, "keepttl") && expire.is_none() {
            keepttl = true;
        } else {
            return Err(Reply::error(SYNTAX));
        }
    }
    let at = match expire {
        None => None,
        Some((amount, unit, absolute)) => {
            let amount = int_arg(amount)?;
            let invalid = || Reply::error("ERR invalid expire time in 'set' command");
            if amount <= 0 {
                return Err(invalid());
            }
            let ms = amount.checked_mul(unit).ok_or_else(invalid)?;
            Some(if absolute {
                ms
            } else {
                ms.checked_add(ctx.now).ok_or_else(invalid)?
            })
        }
    };
    // Only SET ... GET minds the type of what it replaces.
    let old = if get {
        string(ctx, key)?.cloned()
    } else {
        None
    };
    let exists = ctx.store.exists(key, ctx.now);
    let reply_old = || old.clone().map_or(Reply::Nil, Reply::Bulk);
    if (nx && exists) || (xx && !exists) {
        return Ok(if get { reply_old() } else { Reply::Nil });
    }
    let kept = if keepttl {
        ctx.store.expiry(key, ctx.now).flatten()
    } else {
        None
    };
    ctx.store.insert(key, Data::Str(value.clone()));
    match at {
        Some(at) if at <= ctx.now => {
            // An absolute time already past: the key is set and gone.
            ctx.store.remove(key);
        }
        Some(at) => {
            ctx.store.set_expiry(key, Some(at));
        }
        None => {
            ctx.store.set_expiry(key, kept);
        }
    }
    Ok(if get { reply_old() } else { Reply::ok() })
}

fn incr(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    incr_by(ctx, &args[1], 1)
}

fn decr(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    incr_by(ctx, &args[1], -1)
}

fn incrby(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    let by = int_arg(&args[2])?;
    incr_by(ctx, &args[1], by)
}

fn decrby(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    let by = int_arg(&args[2])?;
    if by == i64::MIN {
        return Err(Reply::error("ERR decrement would overflow"));
    }
    incr_by(ctx, &args[1], -by)
}

/// INCR and friends keep the key's expiry.
fn incr_by(ctx: &mut Ctx<'_>, key: &[u8], by: i64) -> Result {
    let current = match string(ctx, key)? {
        None => 0,
        Some(value) => parse_i64(value).ok_or_else(|| Reply::error(NOT_INTEGER))?,
    };
    let next = current
        .checked_add(by)
        .ok_or_else(|| Reply::error(OVERFLOW))?;
    let value = ctx
        .store
        .get_or_insert(key, ctx.now, || Data::Str(Vec::new()));
    *value = Data::Str(next.to_string().into_bytes());
    Ok(Reply::Int(next))
}

// Hashes.

fn hdel(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    let key = &args[1];
    let Some(hash) = hash(ctx, key)? else {
        return Ok(Reply::Int(0));
    };
    let removed = args[2..]
        .iter()
        .filter(|field| hash.remove(*field).is_some())
        .count();
    ctx.store.remove_if_empty(key);
    Ok(Reply::Int(removed as i64))
}

fn hexists(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    let found = hash(ctx, &args[1])?.is_some_and(|hash| hash.contains_key(&args[2]));
    Ok(Reply::Int(i64::from(found)))
}

fn hget(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    Ok(hash(ctx, &args[1])?
        .and_then(|hash| hash.get(&args[2]))
        .map_or(Reply::Nil, |value| Reply::bulk(value.clone())))
}

fn hgetall(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    let items = hash(ctx, &args[1])?
        .map(|hash| {
            hash.iter()
                .flat_map(|(field, value)| [Reply::bulk(field.clone()), Reply::bulk(value.clone())])
                .collect()
        })
        .unwrap_or_default();
    Ok(Reply::Array(items))
}

fn hincrby(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    let by = int_arg(&args[3])?;
    let hash = hash_or_new(ctx, &args[1])?;
    let current = match hash.get(&args[2]) {
        None => 0,
        Some(value) => {
            parse_i64(value).ok_or_else(|| Reply::error("ERR hash value is not an integer"))?
        }
    };
    let next = current
        .checked_add(by)
        .ok_or_else(|| Reply::error(OVERFLOW))?;
    hash.insert(args[2].clone(), next.to_string().into_bytes());
    Ok(Reply::Int(next))
}

fn hlen(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    Ok(Reply::Int(
        hash(ctx, &args[1])?.map_or(0, |hash| hash.len()) as i64,
    ))
}

fn hmget(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    let hash = hash(ctx, &args[1])?;
    Ok(Reply::Array(
        args[2..]
            .iter()
            .map(|field| {
                hash.as_ref()
                    .and_then(|hash| hash.get(field))
                    .map_or(Reply::Nil, |value| Reply::bulk(value.clone()))
            })
            .collect(),
    ))
}

fn hset(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    if args.len() % 2 == 1 {
        return Err(arity_error("hset"));
    }
    let hash = hash_or_new(ctx, &args[1])?;
    let added = args[2..]
        .chunks_exact(2)
        .filter(|pair| hash.insert(pair[0].clone(), pair[1].clone()).is_none())
        .count();
    Ok(Reply::Int(added as i64))
}

// Sorted sets.

/// `ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...]`.
fn zadd(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    let key = &args[1];
    let (mut nx, mut xx, mut gt, mut lt, mut ch, mut incr) =
        (false, false, false, false, false, false);
    let mut at = 2;
    while let Some(option) = args.get(at) {
        if is(option, "nx") {
            nx = true;
        } else if is(option, "xx") {
            xx = true;
        } else if is(option, "gt") {
            gt = true;
        } else if is(option, "lt") {
            lt = true;
        } else if is(option, "ch") {
            ch = true;
        } else if is(option, "incr") {
            incr = true;
        } else {
            break;
        }
        at += 1;
    }
    let pairs = &args[at..];
    if pairs.is_empty() || pairs.len() % 2 == 1 {
        return Err(Reply::error(SYNTAX));
    }
    if nx && xx {
        return Err(Reply::error(
            "ERR XX and NX options at the same time are not compatible",
        ));
    }
    if (nx && (gt || lt)) || (gt && lt) {
        return Err(Reply::error(
            "ERR GT, LT, and/or NX options at the same time are not compatible",
        ));
    }
    if incr && pairs.len() > 2 {
        return Err(Reply::error(
            "ERR INCR option supports a single increment-element pair",
        ));
    }
    let mut scores = Vec::with_capacity(pairs.len() / 2);
    for pair in pairs.chunks_exact(2) {
        scores.push(parse_f64(&pair[0]).ok_or_else(|| Reply::error(NOT_FLOAT))?);
    }
    let no_result = if incr { Reply::Nil } else { Reply::Int(0) };
    let set = match ctx.store.get_mut(key, ctx.now) {
        Some(Data::ZSet(set)) => set,
        Some(_) => return Err(Reply::error(WRONGTYPE)),
        None if xx => return Ok(no_result),
        None => match ctx
            .store
            .get_or_insert(key, ctx.now, || Data::ZSet(ZSet::default()))
        {
            Data::ZSet(set) => set,
            _ => return Err(Reply::error(WRONGTYPE)),
        },
    };
    let (mut added, mut updated, mut processed) = (0, 0, 0);
    let mut last_score = 0.0;
    for (pair, mut score) in pairs.chunks_exact(2).zip(scores) {
        let member = &pair[1];
        match set.score(member) {
            Some(current) => {
                if nx {
                    continue;
                }
                if incr {
                    score += current;
                    if score.is_nan() {
                        ctx.store.remove_if_empty(key);
                        return Err(Reply::error("ERR resulting score is not a number (NaN)"));
                    }
                }
                if (lt && score >= current) || (gt && score <= current) {
                    continue;
                }
                processed += 1;
                last_score = score;
                if score != current {
                    set.insert(member, score);
                    updated += 1;
                }
            }
            None => {
                if xx {
                    continue;
                }
                set.insert(member, score);
                added += 1;
                processed += 1;
                last_score = score;
            }
        }
    }
    ctx.store.remove_if_empty(key);
    Ok(if incr {
        if processed > 0 {
            Reply::double(last_score)
        } else {
            Reply::Nil
        }
    } else if ch {
        Reply::Int(added + updated)
    } else {
        Reply::Int(added)
    })
}

fn zcard(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    Ok(Reply::Int(
        zset(ctx, &args[1])?.map_or(0, |set| set.len()) as i64
    ))
}

fn score_range(min: &[u8], max: &[u8]) -> Result<ScoreRange> {
    let error = || Reply::error("ERR min or max is not a float");
    Ok(ScoreRange {
        min: parse_bound(min).ok_or_else(error)?,
        max: parse_bound(max).ok_or_else(error)?,
    })
}

fn zcount(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    let range = score_range(&args[2], &args[3])?;
    Ok(Reply::Int(
        zset(ctx, &args[1])?.map_or(0, |set| set.count(range)) as i64,
    ))
}

fn scored(items: Vec<(Vec<u8>, f64)>, with_scores: bool) -> Reply {
    Reply::Array(
        items
            .into_iter()
            .flat_map(|(member, score)| {
                let score = with_scores.then(|| Reply::bulk(format_double(score)));
                std::iter::once(Reply::Bulk(member)).chain(score)
            })
            .collect(),
    )
}

/// `ZRANGE key start stop [BYSCORE] [REV] [LIMIT offset count] [WITHSCORES]`
/// (BYLEX is not supported).
fn zrange(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    let (mut by_score, mut by_lex, mut rev, mut with_scores) = (false, false, false, false);
    let mut limit = None;
    let mut at = 4;
    while let Some(option) = args.get(at) {
        if is(option, "withscores") {
            with_scores = true;
        } else if is(option, "byscore") {
            by_score = true;
        } else if is(option, "bylex") {
            by_lex = true;
        } else if is(option, "rev") {
            rev = true;
        } else if is(option, "limit") && args.len() > at + 2 {
            limit = Some((int_arg(&args[at + 1])?, int_arg(&args[at + 2])?));
            at += 2;
        } else {
            return Err(Reply::error(SYNTAX));
        }
        at += 1;
    }
    if limit.is_some() && !by_score && !by_lex {
        return Err(Reply::error(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if with_scores && by_lex {
        return Err(Reply::error(
            "ERR syntax error, WITHSCORES not supported in combination with BYLEX",
        ));
    }
    if by_lex {
        return Err(Reply::error(
            "ERR BYLEX is not supported by the in-memory server",
        ));
    }
    if by_score {
        let (min, max) = if rev {
            (&args[3], &args[2])
        } else {
            (&args[2], &args[3])
        };
        return range_by_score(ctx, &args[1], min, max, rev, limit, with_scores);
    }
    let start = int_arg(&args[2])?;
    let stop = int_arg(&args[3])?;
    let Some(set) = zset(ctx, &args[1])? else {
        return Ok(Reply::Array(vec![]));
    };
    let len = set.len() as i64;
    let start = if start < 0 {
        (start + len).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        stop + len
    } else {
        stop.min(len - 1)
    };
    if start > stop || start >= len {
        return Ok(Reply::Array(vec![]));
    }
    Ok(scored(
        set.by_rank(start as usize, stop as usize, rev),
        with_scores,
    ))
}

/// `ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT offset count]`.
fn zrangebyscore(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    let (mut with_scores, mut limit) = (false, None);
    let mut at = 4;
    while let Some(option) = args.get(at) {
        if is(option, "withscores") {
            with_scores = true;
        } else if is(option, "limit") && args.len() > at + 2 {
            limit = Some((int_arg(&args[at + 1])?, int_arg(&args[at + 2])?));
            at += 2;
        } else {
            return Err(Reply::error(SYNTAX));
        }
        at += 1;
    }
    range_by_score(ctx, &args[1], &args[2], &args[3], false, limit, with_scores)
}

fn range_by_score(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    min: &[u8],
    max: &[u8],
    rev: bool,
    limit: Option<(i64, i64)>,
    with_scores: bool,
) -> Result {
    let range = score_range(min, max)?;
    let Some(set) = zset(ctx, key)? else {
        return Ok(Reply::Array(vec![]));
    };
    let mut items = set.by_score(range, rev);
    if let Some((offset, count)) = limit {
        if offset < 0 {
            items.clear();
        } else {
            items = items
                .into_iter()
                .skip(offset as usize)
                .take(if count < 0 {
                    usize::MAX
                } else {
                    count as usize
                })
                .collect();
        }
    }
    Ok(scored(items, with_scores))
}

fn zrem(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    let key = &args[1];
    let Some(set) = zset(ctx, key)? else {
        return Ok(Reply::Int(0));
    };
    let removed = args[2..].iter().filter(|member| set.remove(member)).count();
    ctx.store.remove_if_empty(key);
    Ok(Reply::Int(removed as i64))
}

fn zremrangebyscore(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    let key = &args[1];
    let range = score_range(&args[2], &args[3])?;
    let Some(set) = zset(ctx, key)? else {
        return Ok(Reply::Int(0));
    };
    let doomed = set.by_score(range, false);
    for (member, _) in &doomed {
        set.remove(member);
    }
    ctx.store.remove_if_empty(key);
    Ok(Reply::Int(doomed.len() as i64))
}

fn zscore(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    Ok(zset(ctx, &args[1])?
        .and_then(|set| set.score(&args[2]))
        .map_or(Reply::Nil, Reply::double))
}

// Pub/sub.

fn publish(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    Ok(Reply::Int(
        ctx.pubsub.publish(&args[1], &args[2], false) as i64
    ))
}

fn spublish(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    Ok(Reply::Int(
        ctx.pubsub.publish(&args[1], &args[2], true) as i64
    ))
}

/// `PUBSUB CHANNELS [pattern]`, `NUMSUB [channel ...]`, `SHARDCHANNELS
/// [pattern]`, `SHARDNUMSUB [channel ...]`, `NUMPAT`.
fn pubsub(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result {
    let sub = &args[1];
    let rest = &args[2..];
    let shard = is(sub, "shardchannels") || is(sub, "shardnumsub");
    if is(sub, "channels") || is(sub, "shardchannels") {
        if rest.len() > 1 {
            return Err(unknown_subcommand(sub, "PUBSUB"));
        }
        let channels = ctx.pubsub.channels(shard);
        Ok(Reply::Array(
            channels
                .into_iter()
                .filter(|channel| {
                    rest.first()
                        .is_none_or(|pattern| glob_match(pattern, channel))
                })
                .map(Reply::Bulk)
                .collect(),
        ))
    } else if is(sub, "numsub") || is(sub, "shardnumsub") {
        Ok(Reply::Array(
            rest.iter()
                .flat_map(|channel| {
                    [
                        Reply::bulk(channel.clone()),
                        Reply::Int(ctx.pubsub.subscribers(channel, shard) as i64),
                    ]
                })
                .collect(),
        ))
    } else if is(sub, "numpat") && rest.is_empty() {
        Ok(Reply::Int(0))
    } else {
        Err(unknown_subcommand(sub, "PUBSUB"))
    }
}

pub(crate) fn unknown_subcommand(sub: &[u8], command: &str) -> Reply {
    let sub: String = String::from_utf8_lossy(sub).chars().take(128).collect();
    Reply::error(format!(
        "ERR unknown subcommand '{sub}'. Try {command} HELP."
    ))
}
