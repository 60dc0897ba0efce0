//! [`RedisServer`]: one private `redis-server` child process.

use std::collections::BTreeSet;
use std::fs::OpenOptions;
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;

use crate::resp::{Reply, command};

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
/// How many ports [`free_port`] asks the OS for before giving up on finding
/// one it has not returned before.
const FREE_PORT_ATTEMPTS: usize = 100;
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
    /// The binary given to [`RedisServer::start_binary`] (`None`: the one
    /// named by `LOCK_TESTKIT_REDIS_SERVER`, or `redis-server` on `PATH`).
    bin: Option<PathBuf>,
    /// Extra arguments given to [`RedisServer::start_with`].
    extra_args: Vec<String>,
    /// Password from `--requirepass`, sent with `AUTH` by [`RedisServer::cli`].
    password: Option<String>,
    /// Config file given as the first argument (sentinels need one they can
    /// rewrite); it lives in `dir`, so it survives restarts.
    config: Option<PathBuf>,
    /// Whether [`RedisServer::pause`] stopped the process and no
    /// [`RedisServer::resume`], `kill` or `restart` has continued it since.
    /// Atomic rather than `Cell` so that the server stays `Sync`.
    paused: AtomicBool,
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
    /// [`RedisServer::cli`] can authenticate. Before Redis 7.0, an
    /// `--enable-debug-command` pair is left out (`DEBUG` is always allowed).
    ///
    /// # Panics
    ///
    /// If the server cannot be started or does not become ready within 10 s;
    /// the panic message includes the server's log.
    pub fn start_with(args: &[&str]) -> RedisServer {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        Self::start_custom(None, &mut || args.clone())
    }

    /// Like [`RedisServer::start_with`], running the `redis-server` binary
    /// at `bin` rather than the default one (e.g. an older Redis, to test
    /// what a client does with it); restarts run it too.
    ///
    /// # Panics
    ///
    /// Like [`RedisServer::start`].
    pub fn start_binary(bin: impl AsRef<Path>, args: &[&str]) -> RedisServer {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        Self::start_custom_binary(Some(bin.as_ref()), None, &mut || args.clone())
    }

    /// Start `n` independent servers with [`RedisServer::start`], e.g. the
    /// masters of a Redlock setup.
    ///
    /// # Panics
    ///
    /// Like [`RedisServer::start`]; the servers already started are killed.
    pub fn start_many(n: usize) -> Vec<RedisServer> {
        (0..n).map(|_| RedisServer::start()).collect()
    }

    /// Start a server, optionally from a config file, with the extra
    /// arguments that `args_for_attempt` returns.
    ///
    /// If `config` is given, it is written to `<tmp>/redis.conf`, which is
    /// passed as the first argument (before the arguments described in
    /// [`RedisServer::start_with`]); the file survives restarts. The closure
    /// is called once per attempt to bind a port, so arguments that name
    /// ports of their own (e.g. `--cluster-port`) can take fresh ones too; the
    /// arguments of the successful attempt are kept for restarts.
    pub(crate) fn start_custom(
        config: Option<&str>,
        args_for_attempt: &mut dyn FnMut() -> Vec<String>,
    ) -> RedisServer {
        Self::start_custom_binary(None, config, args_for_attempt)
    }

    /// Like [`RedisServer::start_custom`], running the binary `bin` if given
    /// (see [`RedisServer::start_binary`]).
    pub(crate) fn start_custom_binary(
        bin: Option<&Path>,
        config: Option<&str>,
        args_for_attempt: &mut dyn FnMut() -> Vec<String>,
    ) -> RedisServer {
        let dir = tempfile::Builder::new()
            .prefix("lock-testkit-redis-")
            .tempdir()
            .unwrap_or_else(|e| panic!("lock-testkit: cannot create a temporary directory: {e}"));
        let config = config.map(|contents| {
            let path = dir.path().join("redis.conf");
            std::fs::write(&path, contents).unwrap_or_else(|e| {
                panic!(
                    "lock-testkit: cannot write the config file {}: {e}",
                    path.display()
                )
            });
            path
        });

        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let port = free_port();
            let extra_args = for_version(bin, args_for_attempt());
            let password = requirepass(&extra_args);
            match launch(
                bin,
                dir.path(),
                config.as_deref(),
                port,
                &extra_args,
                password.as_deref(),
            ) {
                Ok(child) => {
                    return RedisServer {
                        pid: child.id(),
                        child: Some(child),
                        port,
                        bin: bin.map(Path::to_path_buf),
                        extra_args,
                        password,
                        config,
                        paused: AtomicBool::new(false),
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

    /// The server's working directory (`--dir`), a temporary directory that
    /// lives as long as this value and is kept across restarts. A `SAVE` or
    /// `BGSAVE` writes its snapshot there as `dump.rdb`.
    pub fn dir(&self) -> &Path {
        self.dir.path()
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
        self.paused.store(true, Ordering::SeqCst);
    }

    /// Continue a server suspended by [`RedisServer::pause`] (`SIGCONT`).
    ///
    /// # Panics
    ///
    /// If the server is not running (after [`RedisServer::kill`]) or the
    /// signal cannot be sent.
    pub fn resume(&self) {
        self.signal(Signal::SIGCONT);
        self.paused.store(false, Ordering::SeqCst);
    }

    /// Whether the server process is running: started, and not killed by
    /// [`RedisServer::kill`] since. A paused server is running. (A process
    /// that died by itself is only noticed by the next command to it.)
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Whether the server is suspended by [`RedisServer::pause`] and has not
    /// been resumed, killed or restarted since.
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::SeqCst)
    }

    /// Kill the server with `SIGKILL` (a crash: nothing is saved) and reap
    /// the process. Calling it again does nothing.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // `stop_child` continues a paused process before killing it.
            stop_child(&mut child);
        }
        self.paused.store(false, Ordering::SeqCst);
    }

    /// Kill the server if it is running, then start it again on the same
    /// port with the same arguments, and wait until it is ready.
    ///
    /// Since nothing is persisted automatically, the restarted server is
    /// empty, unless a `SAVE` or `BGSAVE` sent to it wrote a snapshot
    /// (`dump.rdb` in [`RedisServer::dir`]): it then loads that snapshot, as
    /// it was when taken (a restart that goes back in time; delete the file
    /// to start empty again). If the port cannot be bound yet, binding is
    /// retried for up to 10 s.
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
                self.bin.as_deref(),
                self.dir.path(),
                self.config.as_deref(),
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
        self.query(args, timeout).map(|r| r.render())
    }

    /// Like [`RedisServer::try_cli`], but returning the parsed reply, for
    /// the topologies that need its structure.
    pub(crate) fn query(&self, args: &[&str], timeout: Duration) -> io::Result<Reply> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        command(self.port, self.password.as_deref(), &args, timeout)
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
/// Within one process, a port is never returned twice. A killed server's
/// port must not go to another server while something still tries to reach
/// the killed one: its replicas, for instance, reconnect every second, and
/// would wipe their data to resync from whatever server answers there.
///
/// # Panics
///
/// If no port can be bound, or no port that was not returned before is
/// found in 100 tries.
pub fn free_port() -> u16 {
    static RETURNED: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    for _ in 0..FREE_PORT_ATTEMPTS {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("lock-testkit: cannot bind 127.0.0.1:0: {e}"));
        // Nothing panics while holding the lock, so poison cannot happen.
        let mut returned = RETURNED.lock().unwrap_or_else(PoisonError::into_inner);
        if returned.insert(port) {
            return port;
        }
    }
    panic!("lock-testkit: found no port that was not used before in {FREE_PORT_ATTEMPTS} tries");
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

/// The binary a server is run from: `bin`, or the default one.
pub(crate) fn binary(bin: Option<&Path>) -> PathBuf {
    bin.map_or_else(|| PathBuf::from(server_bin()), Path::to_path_buf)
}

/// `args` without what the binary `bin` (or the default one) would refuse:
/// before Redis 7.0, `--enable-debug-command` did not exist (`DEBUG` was
/// always allowed), so it is left out with its value.
fn for_version(bin: Option<&Path>, args: Vec<String>) -> Vec<String> {
    if !args.iter().any(|arg| is_debug_option(arg)) || major_version(&binary(bin)) >= 7 {
        return args;
    }
    without_debug_option(args)
}

fn is_debug_option(arg: &str) -> bool {
    arg.eq_ignore_ascii_case("--enable-debug-command")
}

/// `args` without any `--enable-debug-command` and the value after it.
fn without_debug_option(args: Vec<String>) -> Vec<String> {
    let mut kept = Vec::with_capacity(args.len());
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if is_debug_option(&arg) {
            args.next();
        } else {
            kept.push(arg);
        }
    }
    kept
}

/// The major version of the server binary `bin` (`bin --version` prints
/// `Redis server v=6.2.14 ...`, or `Valkey server v=9.1.2 ...`).
///
/// # Panics
///
/// If `bin --version` cannot be run or names no version.
pub(crate) fn major_version(bin: &Path) -> u32 {
    let out = Command::new(bin)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "lock-testkit: cannot run `{} --version`: {e}",
                bin.display()
            )
        });
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .find_map(|word| word.strip_prefix("v="))
        .and_then(|version| version.split('.').next()?.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "lock-testkit: no version in `{} --version`: {text}",
                bin.display()
            )
        })
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

/// Spawn a server on `port` (from the config file `config`, if given) and
/// wait until it is ready. On failure the child is killed and reaped.
fn launch(
    bin: Option<&Path>,
    dir: &Path,
    config: Option<&Path>,
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

    let mut cmd = match bin {
        Some(bin) => Command::new(bin),
        None => Command::new(server_bin()),
    };
    // redis-server only reads a config file given as the first argument.
    if let Some(config) = config {
        cmd.arg(config);
    }
    let mut child = cmd
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
        .map_err(|e| match bin {
            Some(bin) => {
                StartError::Spawn(io::Error::new(e.kind(), format!("{}: {e}", bin.display())))
            }
            None => StartError::Spawn(e),
        })?;

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
            // Before 7.0, the cluster bus listens on the port + 10000,
            // which a port above 55535 cannot have: another port will do.
            let port_taken = new_log.contains("Address already in use")
                || new_log.contains("Redis port number too high");
            return Err(if port_taken {
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn leaves_out_the_debug_option() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            without_debug_option(args(&[
                "--enable-debug-command",
                "local",
                "--maxmemory",
                "1mb"
            ])),
            args(&["--maxmemory", "1mb"])
        );
        assert_eq!(
            without_debug_option(args(&["--save", "", "--enable-debug-command", "yes"])),
            args(&["--save", ""])
        );
        assert_eq!(without_debug_option(args(&["--port"])), args(&["--port"]));
    }

    #[test]
    fn free_ports_are_never_repeated() {
        let ports: BTreeSet<u16> = (0..200).map(|_| free_port()).collect();
        assert_eq!(ports.len(), 200);
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
