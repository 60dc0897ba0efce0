//! Test support that starts real, private `redis-server` processes.
//!
//! Every [`RedisServer`] is a child process of the test binary, listening on
//! its own free port on `127.0.0.1`, with its own temporary working directory
//! and log file, and no persistence (`--save "" --appendonly no`). Tests never
//! depend on a server that is already running or on a fixed port.
//!
//! The API is plain synchronous `std` code, so it can be used from both sync
//! and async (e.g. `#[tokio::test]`) tests. Failures to start a server are
//! test failures and therefore panic, with the server's log in the message.
//!
//! The `redis-server` binary is looked up on `PATH`; set the environment
//! variable `LOCK_TESTKIT_REDIS_SERVER` to use another binary.
//!
//! # Example
//!
//! ```
//! use lock_testkit::{RedisServer, unique_key};
//!
//! let mut server = RedisServer::start();
//! let key = unique_key("lock");
//!
//! assert_eq!(server.cli(&["PING"]), "PONG");
//! assert_eq!(server.cli(&["SET", &key, "owner-1"]), "OK");
//! assert_eq!(server.cli(&["GET", &key]), "owner-1");
//!
//! // Simulate a hung server, then a crash and a restart (data is lost).
//! server.pause();
//! server.resume();
//! server.restart();
//! assert_eq!(server.cli(&["GET", &key]), "(nil)");
//!
//! // Connect a real client with `server.url()`, e.g. "redis://127.0.0.1:PORT/".
//! println!("{}", server.url());
//! ```
//!
//! # Caveats
//!
//! A server is killed when its [`RedisServer`] is dropped. A server stored in
//! a `static` is never dropped, and a test binary that is killed (or aborts)
//! cannot clean up, so such servers outlive the test run.

use std::fs::OpenOptions;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;

/// Environment variable naming the `redis-server` binary to run.
const SERVER_BIN_ENV: &str = "LOCK_TESTKIT_REDIS_SERVER";
/// How long a server may take to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Interval between readiness probes.
const READY_POLL: Duration = Duration::from_millis(10);
/// Read/write timeout of one readiness probe.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// Timeout used by [`RedisServer::cli`].
const CLI_TIMEOUT: Duration = Duration::from_secs(5);
/// How many fresh ports [`RedisServer::start_with`] tries.
const START_ATTEMPTS: usize = 5;
/// How long [`RedisServer::restart`] keeps retrying to bind the same port.
const RESTART_BIND_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between two attempts to bind the same port in `restart`.
const RESTART_BIND_RETRY: Duration = Duration::from_millis(100);

/// A private `redis-server` child process, killed when dropped.
///
/// Created with [`RedisServer::start`] or [`RedisServer::start_with`]. The
/// server listens on `127.0.0.1` on a port chosen when it is first started;
/// [`RedisServer::restart`] keeps that port.
#[derive(Debug)]
pub struct RedisServer {
    /// The running child, `None` after [`RedisServer::kill`].
    child: Option<Child>,
    /// PID of the most recently spawned child.
    pid: u32,
    /// The TCP port the server listens on.
    port: u16,
    /// Extra arguments given to [`RedisServer::start_with`].
    extra_args: Vec<String>,
    /// Password from `--requirepass`, sent with `AUTH` by [`RedisServer::cli`].
    password: Option<String>,
    /// Working directory and log location; lives as long as the server.
    dir: TempDir,
}

impl RedisServer {
    /// Start a private `redis-server` on a free `127.0.0.1` port and wait
    /// until it answers.
    ///
    /// If another process races for the chosen port, a new port is tried
    /// (a few times).
    ///
    /// # Panics
    ///
    /// If the server cannot be started or does not become ready within 10 s;
    /// the panic message includes the server's log.
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// Like [`RedisServer::start`], with extra `redis-server` arguments,
    /// e.g. `&["--requirepass", "secret"]`.
    ///
    /// The server always gets `--port P --bind 127.0.0.1 --save ""
    /// --appendonly no --daemonize no --logfile <tmp>/redis.log --dir <tmp>`
    /// first, followed by `args` (later arguments override earlier ones).
    /// A `--requirepass PASSWORD` pair in `args` is remembered so that
    /// [`RedisServer::cli`] can authenticate.
    ///
    /// # Panics
    ///
    /// If the server cannot be started or does not become ready within 10 s;
    /// the panic message includes the server's log.
    pub fn start_with(args: &[&str]) -> RedisServer {
        let dir = tempfile::Builder::new()
            .prefix("lock-testkit-redis-")
            .tempdir()
            .unwrap_or_else(|e| panic!("lock-testkit: cannot create a temporary directory: {e}"));
        let extra_args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        let password = requirepass(&extra_args);

        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let port = free_port();
            match launch(dir.path(), port, &extra_args, password.as_deref()) {
                Ok(child) => {
                    return RedisServer {
                        pid: child.id(),
                        child: Some(child),
                        port,
                        extra_args,
                        password,
                        dir,
                    };
                }
                Err(StartError::AddrInUse) => failures.push(port),
                Err(e) => panic!(
                    "lock-testkit: redis-server on port {port} failed to start: {e}\n{}",
                    read_logs(dir.path())
                ),
            }
        }
        panic!(
            "lock-testkit: redis-server could not bind a port after {START_ATTEMPTS} attempts \
             (ports tried: {failures:?})\n{}",
            read_logs(dir.path())
        );
    }

    /// The TCP port the server listens on (on `127.0.0.1`).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The connection URL, `"redis://127.0.0.1:PORT/"`.
    ///
    /// It carries no password, even if the server was started with
    /// `--requirepass`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The process id of the server (of the most recently started process,
    /// also after [`RedisServer::kill`]).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The contents of the server's log file, for failure messages.
    ///
    /// The log accumulates over restarts. Anything the process wrote to its
    /// stdout/stderr (e.g. errors in its arguments) is appended after a
    /// separator line.
    pub fn log(&self) -> String {
        read_logs(self.dir.path())
    }

    /// Suspend the server with `SIGSTOP`: it keeps its connections but stops
    /// answering, like a hung or partitioned server.
    ///
    /// # Panics
    ///
    /// If the server is not running (after [`RedisServer::kill`]) or the
    /// signal cannot be sent.
    pub fn pause(&self) {
        self.signal(Signal::SIGSTOP);
    }

    /// Continue a server suspended by [`RedisServer::pause`] (`SIGCONT`).
    ///
    /// # Panics
    ///
    /// If the server is not running (after [`RedisServer::kill`]) or the
    /// signal cannot be sent.
    pub fn resume(&self) {
        self.signal(Signal::SIGCONT);
    }

    /// Kill the server with `SIGKILL` (a crash: nothing is saved) and reap
    /// the process. Calling it again does nothing.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            stop_child(&mut child);
        }
    }

    /// Kill the server if it is running, then start it again on the same
    /// port with the same arguments, and wait until it is ready.
    ///
    /// Since nothing is persisted, the restarted server is empty. If the port
    /// cannot be bound yet, binding is retried for up to 10 s.
    ///
    /// # Panics
    ///
    /// If the server cannot be started again; the panic message includes the
    /// server's log.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + RESTART_BIND_TIMEOUT;
        loop {
            match launch(
                self.dir.path(),
                self.port,
                &self.extra_args,
                self.password.as_deref(),
            ) {
                Ok(child) => {
                    self.pid = child.id();
                    self.child = Some(child);
                    return;
                }
                Err(StartError::AddrInUse) if Instant::now() < deadline => {
                    thread::sleep(RESTART_BIND_RETRY);
                }
                Err(e) => panic!(
                    "lock-testkit: redis-server failed to restart on port {}: {e}\n{}",
                    self.port,
                    self.log()
                ),
            }
        }
    }

    /// Send one command over a raw RESP connection (not `redis-cli`) and
    /// return the reply rendered as text.
    ///
    /// If the server was started with `--requirepass`, `AUTH` is sent first.
    /// Rendering: simple strings and bulk strings as their text (bulk strings
    /// decoded as lossy UTF-8), integers in decimal, errors as their message
    /// without the leading `-` (e.g. `"ERR unknown command ..."`; a failed
    /// `AUTH` returns its error), nil as `"(nil)"`, and arrays as their
    /// rendered elements joined by `'\n'` (an empty array is `""`).
    ///
    /// # Panics
    ///
    /// On I/O errors, including no reply within 5 s (e.g. the server is
    /// paused or killed). Use [`RedisServer::try_cli`] to handle those.
    pub fn cli(&self, args: &[&str]) -> String {
        self.try_cli(args, CLI_TIMEOUT).unwrap_or_else(|e| {
            panic!(
                "lock-testkit: command {args:?} to redis-server on port {} failed: {e}\n{}",
                self.port,
                self.log()
            )
        })
    }

    /// Like [`RedisServer::cli`], but with the given connect/read/write
    /// timeout, and returning I/O errors (a timeout is an error of kind
    /// [`io::ErrorKind::WouldBlock`] or [`io::ErrorKind::TimedOut`]) instead of
    /// panicking. Useful to check that a paused server does not answer.
    pub fn try_cli(&self, args: &[&str], timeout: Duration) -> io::Result<String> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        command(self.port, self.password.as_deref(), &args, timeout).map(|r| r.render())
    }

    /// Send `sig` to the running child.
    fn signal(&self, sig: Signal) {
        let child = self.child.as_ref().unwrap_or_else(|| {
            panic!(
                "lock-testkit: cannot send {sig} to redis-server on port {}: it is not running",
                self.port
            )
        });
        if let Err(e) = signal::kill(pid_of(child), sig) {
            panic!(
                "lock-testkit: cannot send {sig} to redis-server (pid {}): {e}",
                child.id()
            );
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // `kill` never panics: signal and wait errors are ignored.
        self.kill();
    }
}

/// Pick a free loopback port (bind `127.0.0.1:0` and drop the listener).
///
/// # Panics
///
/// If no port can be bound.
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("lock-testkit: cannot bind 127.0.0.1:0: {e}"))
}

/// A name unique within this process run, for lock keys in tests:
/// `"{prefix}:{n}:{nanos}"`, where `n` is a per-process counter and `nanos`
/// the nanoseconds since the Unix epoch.
pub fn unique_key(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{prefix}:{n}:{nanos}")
}

// ---------------------------------------------------------------------------
// Process management
// ---------------------------------------------------------------------------

/// Why one attempt to start a server failed.
#[derive(Debug)]
enum StartError {
    /// The server exited because its port was taken.
    AddrInUse,
    /// The process could not be spawned.
    Spawn(io::Error),
    /// The server exited for another reason.
    Exited(ExitStatus),
    /// The server did not answer in time.
    Timeout,
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::AddrInUse => write!(f, "its port is already in use"),
            StartError::Spawn(e) => write!(f, "cannot run `{}`: {e}", server_bin()),
            StartError::Exited(status) => write!(f, "it exited early ({status})"),
            StartError::Timeout => write!(
                f,
                "it did not become ready within {} s",
                READY_TIMEOUT.as_secs()
            ),
        }
    }
}

fn server_bin() -> String {
    std::env::var(SERVER_BIN_ENV).unwrap_or_else(|_| "redis-server".to_owned())
}

fn log_path(dir: &Path) -> PathBuf {
    dir.join("redis.log")
}

fn stdio_path(dir: &Path) -> PathBuf {
    dir.join("redis.stdio")
}

/// The log file, plus the captured stdout/stderr if there is any.
fn read_logs(dir: &Path) -> String {
    let mut out = match std::fs::read(log_path(dir)) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => format!("(no redis log: {e})\n"),
    };
    if let Ok(bytes) = std::fs::read(stdio_path(dir))
        && !bytes.is_empty()
    {
        out.push_str("--- redis-server stdout/stderr ---\n");
        out.push_str(&String::from_utf8_lossy(&bytes));
    }
    out
}

/// Current length of a file, 0 if it does not exist.
fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Contents of a file from byte `offset` on (lossy UTF-8).
fn read_from(path: &Path, offset: u64) -> String {
    let mut bytes = std::fs::read(path).unwrap_or_default();
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    bytes.drain(..start);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The value following `--requirepass` in the arguments (the last one wins,
/// as in redis).
fn requirepass(args: &[String]) -> Option<String> {
    args.windows(2)
        .rev()
        .find(|w| w[0].eq_ignore_ascii_case("--requirepass"))
        .map(|w| w[1].clone())
        .filter(|p| !p.is_empty())
}

fn pid_of(child: &Child) -> Pid {
    // PIDs fit in `pid_t` on every supported platform.
    Pid::from_raw(child.id() as i32)
}

/// Kill and reap a child; never panics.
fn stop_child(child: &mut Child) {
    if let Ok(None) = child.try_wait() {
        // Our own, not yet reaped child: its PID cannot have been reused.
        let pid = pid_of(child);
        let _ = signal::kill(pid, Signal::SIGCONT);
        let _ = signal::kill(pid, Signal::SIGKILL);
    }
    let _ = child.wait();
}

/// Spawn a server on `port` and wait until it is ready. On failure the child
/// is killed and reaped.
fn launch(
    dir: &Path,
    port: u16,
    extra_args: &[String],
    password: Option<&str>,
) -> Result<Child, StartError> {
    let log = log_path(dir);
    let log_offset = file_len(&log);
    let stdio = OpenOptions::new()
        .create(true)
        .append(true)
        .open(stdio_path(dir))
        .map_err(StartError::Spawn)?;
    let stderr = stdio.try_clone().map_err(StartError::Spawn)?;

    let mut child = Command::new(server_bin())
        .arg("--port")
        .arg(port.to_string())
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args(["--daemonize", "no", "--logfile"])
        .arg(&log)
        .arg("--dir")
        .arg(dir)
        .args(extra_args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(stdio)
        .stderr(stderr)
        .spawn()
        .map_err(StartError::Spawn)?;

    let result = wait_ready(&mut child, port, password, &log, log_offset);
    match result {
        Ok(()) => Ok(child),
        Err(e) => {
            stop_child(&mut child);
            Err(e)
        }
    }
}

/// Poll the server until it answers as the process we spawned.
fn wait_ready(
    child: &mut Child,
    port: u16,
    password: Option<&str>,
    log: &Path,
    log_offset: u64,
) -> Result<(), StartError> {
    let pid = child.id();
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().map_err(StartError::Spawn)? {
            let new_log = read_from(log, log_offset);
            return Err(if new_log.contains("Address already in use") {
                StartError::AddrInUse
            } else {
                StartError::Exited(status)
            });
        }
        if probe(port, password, pid) {
            // Make sure the answer did not come from someone else's server
            // while ours was failing to bind.
            if child.try_wait().map_err(StartError::Spawn)?.is_none() {
                return Ok(());
            }
            continue;
        }
        if Instant::now() >= deadline {
            return Err(StartError::Timeout);
        }
        thread::sleep(READY_POLL);
    }
}

/// One readiness probe: is a server on `port` that is (as far as can be
/// told) the process `pid` answering and done loading?
fn probe(port: u16, password: Option<&str>, pid: u32) -> bool {
    // `INFO server` rather than `PING`: its `process_id` tells whether the
    // answer comes from our process.
    match command(port, password, &[b"INFO", b"server"], PROBE_TIMEOUT) {
        Ok(Reply::Bulk(Some(info))) => {
            let info = String::from_utf8_lossy(&info);
            let field = |name: &str| {
                info.lines()
                    .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                    .map(str::trim)
            };
            field("process_id") == Some(pid.to_string().as_str())
                && field("loading").is_none_or(|l| l == "0")
        }
        // The server answers but will not say who it is (e.g. `INFO` renamed
        // or not permitted): fall back to `PING`.
        Ok(Reply::Error(e)) if !e.starts_with("LOADING") => {
            matches!(
                command(port, password, &[b"PING"], PROBE_TIMEOUT),
                Ok(Reply::Simple(_) | Reply::Error(_))
            )
        }
        _ => false,
    }
}

// ---------------------------------------------------------------------------
// Minimal RESP client
// ---------------------------------------------------------------------------

/// A parsed RESP reply.
#[derive(Debug, Clone, PartialEq)]
enum Reply {
    /// `+OK`
    Simple(String),
    /// `-ERR ...`
    Error(String),
    /// `:1`
    Integer(i64),
    /// `$3\r\nfoo`, `None` for `$-1`.
    Bulk(Option<Vec<u8>>),
    /// `*2\r\n...`, `None` for `*-1`.
    Array(Option<Vec<Reply>>),
    /// RESP3 `_` null.
    Null,
    /// Other RESP3 scalars (`,` double, `#` boolean, `(` big number) as text.
    Other(String),
}

impl Reply {
    /// Render as text (see [`RedisServer::cli`]).
    fn render(&self) -> String {
        match self {
            Reply::Simple(s) | Reply::Error(s) | Reply::Other(s) => s.clone(),
            Reply::Integer(n) => n.to_string(),
            Reply::Bulk(Some(b)) => String::from_utf8_lossy(b).into_owned(),
            Reply::Bulk(None) | Reply::Array(None) | Reply::Null => "(nil)".to_owned(),
            Reply::Array(Some(items)) => items
                .iter()
                .map(Reply::render)
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// Connect to `127.0.0.1:port`, `AUTH` if a password is given, send one
/// command and read its reply. A failed `AUTH` is returned as the reply.
fn command(
    port: u16,
    password: Option<&str>,
    args: &[&[u8]],
    timeout: Duration,
) -> io::Result<Reply> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_nodelay(true)?;
    let mut writer = &stream;
    let mut reader = BufReader::new(&stream);

    if let Some(password) = password {
        writer.write_all(&encode(&[b"AUTH", password.as_bytes()]))?;
        match read_reply(&mut reader)? {
            // The password was removed at run time: go on without it.
            Reply::Error(e) if e.contains("without any password configured") => {}
            e @ Reply::Error(_) => return Ok(e),
            _ => {}
        }
    }
    writer.write_all(&encode(args))?;
    read_reply(&mut reader)
}

/// Encode a command as a RESP array of bulk strings.
fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn protocol_error(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Read one line without its `\r\n`.
fn read_line(reader: &mut impl BufRead) -> io::Result<String> {
    let mut line = Vec::new();
    let n = reader.read_until(b'\n', &mut line)?;
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed by redis-server",
        ));
    }
    if !line.ends_with(b"\r\n") {
        return Err(protocol_error("truncated RESP line"));
    }
    line.truncate(line.len() - 2);
    Ok(String::from_utf8_lossy(&line).into_owned())
}

/// Parse a RESP length; negative means nil.
fn parse_len(s: &str) -> io::Result<Option<usize>> {
    let n: i64 = s
        .parse()
        .map_err(|_| protocol_error(format!("bad RESP length {s:?}")))?;
    Ok(usize::try_from(n).ok())
}

/// Read one RESP2 (or common RESP3) reply.
fn read_reply(reader: &mut impl BufRead) -> io::Result<Reply> {
    let line = read_line(reader)?;
    let mut chars = line.chars();
    let kind = chars
        .next()
        .ok_or_else(|| protocol_error("empty RESP line"))?;
    let rest = chars.as_str();
    Ok(match kind {
        '+' => Reply::Simple(rest.to_owned()),
        '-' => Reply::Error(rest.to_owned()),
        ':' => Reply::Integer(
            rest.parse()
                .map_err(|_| protocol_error(format!("bad RESP integer {rest:?}")))?,
        ),
        '$' | '=' | '!' => match parse_len(rest)? {
            None => Reply::Bulk(None),
            Some(len) => {
                let mut buf = vec![0; len + 2];
                reader.read_exact(&mut buf)?;
                if !buf.ends_with(b"\r\n") {
                    return Err(protocol_error("bulk string not terminated by CRLF"));
                }
                buf.truncate(len);
                if kind == '!' {
                    Reply::Error(String::from_utf8_lossy(&buf).into_owned())
                } else {
                    Reply::Bulk(Some(buf))
                }
            }
        },
        '*' | '~' | '>' | '%' | '|' => match parse_len(rest)? {
            None => Reply::Array(None),
            Some(len) => {
                let count = if matches!(kind, '%' | '|') {
                    len * 2
                } else {
                    len
                };
                let items = (0..count)
                    .map(|_| read_reply(reader))
                    .collect::<io::Result<Vec<_>>>()?;
                if kind == '|' {
                    // An attribute precedes the actual reply; skip it.
                    return read_reply(reader);
                }
                Reply::Array(Some(items))
            }
        },
        '_' => Reply::Null,
        ',' | '#' | '(' => Reply::Other(rest.to_owned()),
        other => return Err(protocol_error(format!("unknown RESP type {other:?}"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Reply {
        read_reply(&mut BufReader::new(bytes)).unwrap()
    }

    #[test]
    fn encodes_commands() {
        assert_eq!(
            encode(&[b"SET", b"k", b""]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n".to_vec()
        );
    }

    #[test]
    fn renders_replies() {
        assert_eq!(parse(b"+PONG\r\n").render(), "PONG");
        assert_eq!(parse(b"-ERR boom\r\n").render(), "ERR boom");
        assert_eq!(parse(b":-42\r\n").render(), "-42");
        assert_eq!(parse(b"$5\r\na\r\nbc\r\n").render(), "a\r\nbc");
        assert_eq!(parse(b"$0\r\n\r\n").render(), "");
        assert_eq!(parse(b"$-1\r\n").render(), "(nil)");
        assert_eq!(parse(b"*-1\r\n").render(), "(nil)");
        assert_eq!(parse(b"*0\r\n").render(), "");
        assert_eq!(
            parse(b"*4\r\n$1\r\na\r\n:1\r\n$-1\r\n*1\r\n+x\r\n").render(),
            "a\n1\n(nil)\nx"
        );
    }

    #[test]
    fn rejects_garbage() {
        assert!(read_reply(&mut BufReader::new(&b"?x\r\n"[..])).is_err());
        assert!(read_reply(&mut BufReader::new(&b"$3\r\nab"[..])).is_err());
        assert!(read_reply(&mut BufReader::new(&b""[..])).is_err());
    }

    #[test]
    fn finds_requirepass() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(requirepass(&args(&[])), None);
        assert_eq!(
            requirepass(&args(&["--requirepass", "pw", "--maxclients", "10"])),
            Some("pw".to_owned())
        );
        assert_eq!(
            requirepass(&args(&["--requirepass", "a", "--requirepass", "b"])),
            Some("b".to_owned())
        );
    }

    #[test]
    fn unique_keys_differ() {
        let a = unique_key("t");
        let b = unique_key("t");
        assert_ne!(a, b);
        assert!(a.starts_with("t:"));
        assert_eq!(a.split(':').count(), 3);
    }
}
