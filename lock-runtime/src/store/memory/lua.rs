//! EVAL, EVALSHA and SCRIPT: Lua 5.1 scripts run as Redis 7.0 runs them.
//!
//! * `redis.call` / `redis.pcall` run commands on the store, converting
//!   arguments and replies with Redis's rules: a Lua number argument becomes
//!   `%.17g`; an integer reply becomes a number, a bulk string a string, a
//!   nil `false`, an array a table, a status `{ok = ...}` and an error
//!   `{err = ...}`, which `redis.call` raises and `redis.pcall` returns.
//! * A script's return value becomes the reply: a number is truncated to an
//!   integer, a string is a bulk string, a table is an array up to its first
//!   nil unless it has an `err` (error) or `ok` (status) string field,
//!   `true` is 1, `false` and nil are nil.
//! * A script that fails replies
//!   `<error> script: <sha>, on @user_script:<line>.`, as Redis 7.0 does.
//! * Globals are read-only, and reading a missing one is an error (Redis's
//!   messages); `pcall` turns error tables into their message (Redis's
//!   `pcall`); `print`, `dofile`, `loadfile`, `require`, `module`, `setfenv`,
//!   `getfenv`, `newproxy`, `os` and `io` are absent.
//! * The whole script runs under the store's lock: atomically.

use std::cell::RefCell;
use std::collections::HashMap;

use mlua::{Function, Lua, LuaOptions, MultiValue, StdLib, Table, Value};

use super::commands::{self, Ctx, unknown_subcommand};
use super::reply::{NOT_INTEGER, Reply, format_double, parse_i64, single_line};

/// The chunk name of every script, as Redis names it.
const CHUNK_NAME: &str = "@user_script";

/// Set up once per Lua state: `redis.*`, Redis's `pcall`, read-only
/// globals, and the function that runs a script with Redis's error handler.
const BOOTSTRAP: &str = r#"
local natives, handler = ...
local error, type, select, tostring, rawget, setmetatable, xpcall =
  error, type, select, tostring, rawget, setmetatable, xpcall

local redis = {}
redis.REDIS_VERSION = '7.0.15'
redis.REDIS_VERSION_NUM = 0x07000f
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
redis.REPL_NONE, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA, redis.REPL_ALL =
  0, 1, 2, 2, 3

-- redis.call and redis.pcall are set for each script (they run commands
-- on the store it runs on); they are C functions, as in Redis, so that a
-- script's `return redis.call(...)` keeps its line in error messages.

local function wrong_arguments(...)
  return select('#', ...) ~= 1 or type((...)) ~= 'string'
end

function redis.status_reply(...)
  if wrong_arguments(...) then
    return {err = 'ERR wrong number or type of arguments'}
  end
  return {ok = (...)}
end

function redis.error_reply(...)
  if wrong_arguments(...) then
    return {err = 'ERR wrong number or type of arguments'}
  end
  local message = ...
  if message:sub(1, 1) ~= '-' then
    message = '-' .. message
  end
  local code, text
  local space = message:find(' ', 1, true)
  if space then
    code, text = message:sub(2, space - 1), message:sub(space + 1)
  else
    code, text = 'ERR', message:sub(2)
  end
  return {err = code .. ' ' .. text:match('^[\r\n]*(.-)[\r\n]*$')}
end

-- C functions, so that their errors point at the script's line.
redis.log, redis.sha1hex, redis.setresp = natives.log, natives.sha1hex, natives.setresp

function redis.replicate_commands() return true end
function redis.set_repl() end
function redis.breakpoint() return false end
function redis.debug() end

_G.redis = redis

-- Redis's pcall: an error table becomes its message.
local lua_pcall = pcall
local function pcall_result(ok, ...)
  if ok then
    return true, ...
  end
  return false, natives.message_of((...))
end
_G.pcall = function(...)
  return pcall_result(lua_pcall(...))
end

-- xpcall's handler gets `redis.call`'s errors as Redis raises them: tables.
local lua_xpcall = xpcall
_G.xpcall = function(f, h)
  return lua_xpcall(f, function(e)
    return h(natives.raised_table(e))
  end)
end

for _, name in ipairs({'print', 'dofile', 'loadfile', 'require', 'module', 'setfenv',
                       'getfenv', 'newproxy', 'os', 'io', 'package', 'debug'}) do
  _G[name] = nil
end

-- Scripts see the globals through a read-only view.
local real = _G
local globals = setmetatable({}, {
  __index = function(_, name)
    local value = rawget(real, name)
    if value == nil then
      error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
    end
    return value
  end,
  __newindex = function()
    error('Attempt to modify a readonly table', 2)
  end,
  __metatable = false,
})
real._G = globals

local function run(script)
  return xpcall(script, handler)
end

return run, globals, redis
"#;

/// The Lua state, and every script loaded into it by SHA1.
pub(crate) struct LuaEngine {
    lua: Lua,
    scripts: HashMap<String, Function>,
    /// The `redis` table, whose `call` and `pcall` are set per script.
    redis: Table,
    runner: Function,
    /// The read-only globals scripts run in.
    env: Table,
}

impl std::fmt::Debug for LuaEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LuaEngine")
            .field("scripts", &self.scripts.len())
            .finish_non_exhaustive()
    }
}

/// The SHA1 of `body` in lowercase hex, as Redis and redis-rs compute it.
pub(crate) fn sha1_hex(body: &[u8]) -> String {
    sha1_smol::Sha1::from(body).digest().to_string()
}

impl LuaEngine {
    pub(crate) fn new() -> mlua::Result<LuaEngine> {
        let lua = Lua::new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH,
            LuaOptions::new(),
        )?;
        let tostring: Function = lua.globals().get("tostring")?;
        let handler =
            lua.create_function(move |lua, error: Value| error_handler(lua, &tostring, error))?;
        let natives = natives(&lua)?;
        let (runner, env, redis): (Function, Table, Table) = lua
            .load(BOOTSTRAP)
            .set_name("=memory")
            .call((natives, handler))?;
        Ok(LuaEngine {
            lua,
            scripts: HashMap::new(),
            redis,
            runner,
            env,
        })
    }

    /// Compiles and caches `body`; its SHA1.
    fn load(&mut self, body: &[u8]) -> Result<String, Reply> {
        let sha = sha1_hex(body);
        if !self.scripts.contains_key(&sha) {
            let function = self
                .lua
                .load(body)
                .set_name(CHUNK_NAME)
                .set_environment(self.env.clone())
                .into_function()
                .map_err(|error| {
                    let message = match error {
                        mlua::Error::SyntaxError { message, .. } => message,
                        other => other.to_string(),
                    };
                    Reply::error(format!(
                        "ERR Error compiling script (new function): {}",
                        single_line(&message)
                    ))
                })?;
            self.scripts.insert(sha.clone(), function);
        }
        Ok(sha)
    }

    /// Runs EVAL, EVALSHA or SCRIPT (`args[0]`), arity already checked.
    pub(crate) fn execute(&mut self, ctx: Ctx<'_>, args: &[Vec<u8>]) -> Reply {
        let name = &args[0];
        if name.eq_ignore_ascii_case(b"script") {
            return self.script_command(args);
        }
        let numkeys = match parse_i64(&args[2]) {
            None => return Reply::error(NOT_INTEGER),
            Some(n) if n < 0 => return Reply::error("ERR Number of keys can't be negative"),
            Some(n) if n as u64 > (args.len() - 3) as u64 => {
                return Reply::error("ERR Number of keys can't be greater than number of args");
            }
            Some(n) => n as usize,
        };
        let sha = if name.eq_ignore_ascii_case(b"evalsha") {
            let sha = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
            if !self.scripts.contains_key(&sha) {
                return Reply::error("NOSCRIPT No matching script. Please use EVAL.");
            }
            sha
        } else {
            match self.load(&args[1]) {
                Ok(sha) => sha,
                Err(error) => return error,
            }
        };
        let (keys, argv) = args[3..].split_at(numkeys);
        self.run(ctx, &sha, keys, argv).unwrap_or_else(|error| {
            Reply::error(format!(
                "ERR Error running script {sha}: {}",
                single_line(&error.to_string())
            ))
        })
    }

    fn script_command(&mut self, args: &[Vec<u8>]) -> Reply {
        let sub = &args[1];
        let rest = &args[2..];
        if sub.eq_ignore_ascii_case(b"load") && rest.len() == 1 {
            match self.load(&rest[0]) {
                Ok(sha) => Reply::bulk(sha),
                Err(error) => error,
            }
        } else if sub.eq_ignore_ascii_case(b"exists") && !rest.is_empty() {
            Reply::Array(
                rest.iter()
                    .map(|sha| {
                        let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
                        Reply::Int(i64::from(self.scripts.contains_key(&sha)))
                    })
                    .collect(),
            )
        } else if sub.eq_ignore_ascii_case(b"flush") && rest.len() <= 1 {
            match rest.first() {
                Some(mode)
                    if !mode.eq_ignore_ascii_case(b"sync")
                        && !mode.eq_ignore_ascii_case(b"async") =>
                {
                    Reply::error("ERR SCRIPT FLUSH only support SYNC|ASYNC option")
                }
                _ => {
                    self.flush();
                    Reply::ok()
                }
            }
        } else {
            unknown_subcommand(sub, "SCRIPT")
        }
    }

    /// Forgets every script (SCRIPT FLUSH, a restart).
    pub(crate) fn flush(&mut self) {
        self.scripts.clear();
        self.lua.gc_collect().ok();
    }

    fn run(
        &self,
        ctx: Ctx<'_>,
        sha: &str,
        keys: &[Vec<u8>],
        argv: &[Vec<u8>],
    ) -> mlua::Result<Reply> {
        let lua = &self.lua;
        let script = self.scripts[sha].clone();
        let globals = lua.globals();
        globals.raw_set("KEYS", string_table(lua, keys)?)?;
        globals.raw_set("ARGV", string_table(lua, argv)?)?;
        let ctx = RefCell::new(ctx);
        let reply = lua.scope(|scope| {
            let call = scope.create_function(|lua, args: MultiValue| {
                match call_from_script(&mut ctx.borrow_mut(), args) {
                    Reply::Error(message) => Err(mlua::Error::external(Raised(message))),
                    reply => reply_to_lua(lua, reply),
                }
            })?;
            let pcall = scope.create_function(|lua, args: MultiValue| {
                reply_to_lua(lua, call_from_script(&mut ctx.borrow_mut(), args))
            })?;
            self.redis.raw_set("call", call)?;
            self.redis.raw_set("pcall", pcall)?;
            let (ok, value): (bool, Value) = self.runner.call(script)?;
            Ok(if ok {
                lua_to_reply(&value, 0)
            } else {
                script_error(&value, sha)
            })
        });
        self.redis.raw_set("call", Value::Nil)?;
        self.redis.raw_set("pcall", Value::Nil)?;
        reply
    }
}

/// The functions of `redis` written in Rust (C functions, as in Redis),
/// and helpers of the bootstrap script.
fn natives(lua: &Lua) -> mlua::Result<Table> {
    let natives = lua.create_table()?;
    natives.raw_set(
        "message_of",
        lua.create_function(|lua, error: Value| message_of(lua, error))?,
    )?;
    natives.raw_set(
        "raised_table",
        lua.create_function(|lua, error: Value| match &error {
            Value::Error(inner) => match inner.downcast_ref::<Raised>() {
                Some(Raised(message)) => {
                    let table = lua.create_table()?;
                    table.raw_set("err", message.as_str())?;
                    Ok(Value::Table(table))
                }
                None => Ok(error),
            },
            _ => Ok(error),
        })?,
    )?;
    natives.raw_set(
        "log",
        lua.create_function(|_, args: MultiValue| {
            if args.len() < 2 {
                return raise("ERR redis.log() requires two arguments or more.");
            }
            match args.front() {
                Some(Value::Integer(level)) if (0..=3).contains(level) => Ok(()),
                Some(Value::Number(level)) if (0.0..4.0).contains(level) => Ok(()),
                Some(Value::Integer(_) | Value::Number(_)) => raise("ERR Invalid debug level."),
                _ => raise("ERR First argument must be a number (log level)."),
            }
        })?,
    )?;
    natives.raw_set(
        "sha1hex",
        lua.create_function(|lua, args: MultiValue| {
            if args.len() != 1 {
                return raise("ERR wrong number of arguments");
            }
            let body = match args.into_iter().next() {
                Some(value) => lua.coerce_string(value)?,
                None => None,
            };
            Ok(sha1_hex(
                &body
                    .map(|body| body.as_bytes().to_vec())
                    .unwrap_or_default(),
            ))
        })?,
    )?;
    natives.raw_set(
        "setresp",
        lua.create_function(|_, args: MultiValue| {
            if args.len() != 1 {
                return raise("ERR redis.setresp() requires one argument.");
            }
            match args.front() {
                Some(Value::Integer(2)) => Ok(()),
                Some(Value::Number(n)) if *n == 2.0 => Ok(()),
                Some(Value::Integer(3)) => {
                    raise("ERR RESP3 is not supported by the in-memory server")
                }
                Some(Value::Number(n)) if *n == 3.0 => {
                    raise("ERR RESP3 is not supported by the in-memory server")
                }
                _ => raise("ERR RESP version must be 2 or 3."),
            }
        })?,
    )?;
    Ok(natives)
}

/// Raises `message` as an error reply (Redis raises `{err = message}`).
fn raise<T>(message: &str) -> mlua::Result<T> {
    Err(mlua::Error::external(Raised(message.to_owned())))
}

/// The error reply `redis.call` raises, as the Lua error it travels in.
#[derive(Debug)]
struct Raised(String);

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

/// What Redis's `pcall` gives a script for a caught error: the message of
/// an error reply (from `redis.call` or a table with `err`), else the error.
fn message_of(lua: &Lua, error: Value) -> mlua::Result<Value> {
    match error {
        Value::Error(error) => match error.downcast_ref::<Raised>() {
            Some(Raised(message)) => Ok(Value::String(lua.create_string(message)?)),
            None => Ok(Value::Error(error)),
        },
        Value::Table(table) => match table.get::<Value>("err")? {
            message @ (Value::String(_) | Value::Integer(_) | Value::Number(_)) => Ok(message),
            _ => Ok(Value::Table(table)),
        },
        other => Ok(other),
    }
}

/// A Lua array of strings (KEYS, ARGV).
fn string_table(lua: &Lua, items: &[Vec<u8>]) -> mlua::Result<Table> {
    let table = lua.create_table_with_capacity(items.len(), 0)?;
    for (i, item) in items.iter().enumerate() {
        table.raw_set(i + 1, lua.create_string(item)?)?;
    }
    Ok(table)
}

/// One `redis.call` / `redis.pcall`: the reply, errors included.
fn call_from_script(ctx: &mut Ctx<'_>, args: MultiValue) -> Reply {
    if args.is_empty() {
        return Reply::error("ERR Please specify at least one argument for this redis lib call");
    }
    let mut argv = Vec::with_capacity(args.len());
    for arg in args {
        argv.push(match arg {
            Value::String(s) => s.as_bytes().to_vec(),
            Value::Integer(n) => format_double(n as f64).into_bytes(),
            Value::Number(n) => format_double(n).into_bytes(),
            _ => {
                return Reply::error(
                    "ERR Lua redis lib command arguments must be strings or integers",
                );
            }
        });
    }
    let Some(command) = commands::lookup(&argv[0]) else {
        return Reply::error("ERR Unknown Redis command called from script");
    };
    if !command.arity_ok(argv.len()) {
        return Reply::error("ERR Wrong number of args calling Redis command from script");
    }
    if command.noscript {
        return Reply::error("ERR This Redis command is not allowed from script");
    }
    command.run(ctx, &argv)
}

/// A reply as Redis hands it to Lua.
fn reply_to_lua(lua: &Lua, reply: Reply) -> mlua::Result<Value> {
    Ok(match reply {
        Reply::Nil => Value::Boolean(false),
        Reply::Int(n) => Value::Number(n as f64),
        Reply::Bulk(bytes) => Value::String(lua.create_string(bytes)?),
        Reply::Status(status) => {
            let table = lua.create_table()?;
            table.raw_set("ok", status)?;
            Value::Table(table)
        }
        Reply::Error(message) => {
            let table = lua.create_table()?;
            table.raw_set("err", message)?;
            Value::Table(table)
        }
        Reply::Array(items) => {
            let table = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.into_iter().enumerate() {
                table.raw_set(i + 1, reply_to_lua(lua, item)?)?;
            }
            Value::Table(table)
        }
    })
}

/// Deeper tables than this (a table that contains itself) end the reply.
const MAX_DEPTH: usize = 1000;

/// A script's return value as Redis turns it into a reply.
fn lua_to_reply(value: &Value, depth: usize) -> Reply {
    match value {
        Value::Boolean(true) => Reply::Int(1),
        Value::Integer(n) => Reply::Int(*n),
        Value::Number(n) => Reply::Int(truncate(*n)),
        Value::String(s) => Reply::Bulk(s.as_bytes().to_vec()),
        Value::Table(table) => {
            if depth >= MAX_DEPTH {
                return Reply::error("ERR reached lua stack limit");
            }
            if let Ok(Value::String(err)) = table.raw_get::<Value>("err") {
                return Reply::Error(single_line(&err.to_string_lossy()));
            }
            if let Ok(Value::String(ok)) = table.raw_get::<Value>("ok") {
                return Reply::Status(single_line(&ok.to_string_lossy()));
            }
            let mut items = Vec::new();
            for i in 1.. {
                match table.raw_get::<Value>(i) {
                    Ok(Value::Nil) | Err(_) => break,
                    Ok(item) => items.push(lua_to_reply(&item, depth + 1)),
                }
            }
            Reply::Array(items)
        }
        _ => Reply::Nil,
    }
}

/// C's `(long long)` of a double on x86-64: out of range (and NaN) gives
/// `i64::MIN`, as Redis does for `return 1/0`.
fn truncate(n: f64) -> i64 {
    if n.is_nan() || !(-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&n) {
        i64::MIN
    } else {
        n as i64
    }
}

/// Redis's `__redis__err__handler`: the error as a table `{err = ...}`
/// (strings get the `ERR` code), with where in the script it was raised.
fn error_handler(lua: &Lua, tostring: &Function, error: Value) -> mlua::Result<Table> {
    let table = match error {
        Value::Table(table) => table,
        Value::Error(error) if error.downcast_ref::<Raised>().is_some() => {
            let table = lua.create_table()?;
            if let Some(Raised(message)) = error.downcast_ref::<Raised>() {
                table.raw_set("err", message.as_str())?;
            }
            table
        }
        Value::Error(error) => {
            let table = lua.create_table()?;
            table.raw_set("err", format!("ERR {error}"))?;
            table
        }
        other => {
            let text: mlua::LuaString = tostring.call(other)?;
            let table = lua.create_table()?;
            table.raw_set("err", format!("ERR {}", text.to_string_lossy()))?;
            table
        }
    };
    // Level 0 is this handler, then what raised the error (a C function such
    // as `error` or `redis.call`, or the script itself); walk out to the
    // script's own frame.
    for level in 1.. {
        let Some((source, line)) = lua.inspect_stack(level, |debug| {
            (
                debug.source().source.map(|source| source.into_owned()),
                debug.current_line(),
            )
        }) else {
            break;
        };
        if source.as_deref() == Some(CHUNK_NAME) {
            table.raw_set("source", CHUNK_NAME)?;
            if let Some(line) = line {
                table.raw_set("line", line)?;
            }
            break;
        }
    }
    Ok(table)
}

/// The reply to a script that raised `error` (a table from the handler).
fn script_error(error: &Value, sha: &str) -> Reply {
    let Value::Table(table) = error else {
        return Reply::error(format!("ERR Error running script {sha}: execution failure"));
    };
    let message = match table.raw_get::<Value>("err") {
        Ok(Value::String(s)) => s.to_string_lossy(),
        Ok(Value::Integer(n)) => n.to_string(),
        Ok(Value::Number(n)) => format_double(n),
        _ => "ERR unknown error".to_owned(),
    };
    let source = table.raw_get::<Option<String>>("source").ok().flatten();
    let line = table.raw_get::<Option<i64>>("line").ok().flatten();
    Reply::Error(single_line(&match (source, line) {
        (Some(source), Some(line)) => format!("{message} script: {sha}, on {source}:{line}."),
        _ => message,
    }))
}
