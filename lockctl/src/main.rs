//! `lockctl`: see and manage the locks of lock-runtime from a shell.
//!
//! ```text
//! lockctl [--url URL | --cluster URL,.. | --sentinel URL,.. --service NAME | --redlock URL,..]
//!         [--tls-ca PEM_FILE] [--prefix P] [--json]
//!         <list [PATTERN] | inspect NAME | watch NAME | release NAME --force | doctor>
//! ```
//!
//! The password comes from the URLs or `LOCKCTL_PASSWORD`, the server from
//! `--url` or `LOCKCTL_URL` or `REDIS_URL`.
//!
//! Everything goes through [`lock_runtime::LockClient`]'s operator API
//! (`list`, `inspect`, `watch`, `force_release`), so lockctl reads the keys
//! exactly as the library writes them. See `lockctl --help` and README.md.

mod cli;
mod doctor;
mod render;
mod secret;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use lock_runtime::{LockClient, LockClientBuilder, LockError, LockInfo};

use cli::{Cli, Command, Connection, Env, Shape};
use render::Paint;
use secret::Redactor;

/// Exit codes, as `--help` lists them.
const FAILED: u8 = 1;
const USAGE: u8 = 2;
const NOT_HELD: u8 = 3;
const DECLINED: u8 = 4;
const UNFIT: u8 = 5;

/// What a command ends with: an exit code, and a message for stderr.
struct Outcome {
    code: u8,
    message: Option<String>,
}

impl Outcome {
    fn ok() -> Outcome {
        Outcome {
            code: 0,
            message: None,
        }
    }

    fn fail(code: u8, message: impl Into<String>) -> Outcome {
        Outcome {
            code,
            message: Some(message.into()),
        }
    }
}

impl From<LockError> for Outcome {
    /// The error and what Redis answered (its sources), on one line.
    fn from(err: LockError) -> Outcome {
        Outcome::fail(FAILED, err.chain().to_string())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let connection = Env::read().and_then(|env| cli.connection(&env));
    let (outcome, redactor) = match connection {
        Ok(Connection {
            tls_roots,
            redactor,
            urls,
            shape,
            ..
        }) if matches!(cli.command, Command::Doctor) => {
            let outcome = check(&cli, &urls, shape, tls_roots.as_deref(), &redactor).await;
            (outcome, redactor)
        }
        Ok(Connection {
            deployment,
            tls_roots,
            redactor,
            ..
        }) => {
            let mut builder = LockClient::builder(deployment);
            if let Some(pem) = tls_roots {
                builder = builder.tls_root_certificates(pem);
            }
            let outcome = run(cli, builder).await.unwrap_or_else(Outcome::from);
            (outcome, redactor)
        }
        Err(message) => (Outcome::fail(USAGE, message), Redactor::default()),
    };
    if let Some(message) = outcome.message {
        // Errors may quote a URL: never with its password.
        eprintln!("lockctl: {}", redactor.hide(&message));
    }
    ExitCode::from(outcome.code)
}

/// `lockctl doctor`: examines each server the URLs name (see `doctor.rs`).
async fn check(
    cli: &Cli,
    urls: &[String],
    shape: Shape,
    tls_roots: Option<&[u8]>,
    redactor: &Redactor,
) -> Outcome {
    if shape == Shape::Sentinels {
        return Outcome::fail(
            USAGE,
            "doctor examines the servers that hold locks, and sentinels hold none: give the \
             master's --url (and, to check them too, each replica's)",
        );
    }
    let needs = doctor::Needs {
        cluster: shape == Shape::Cluster,
    };
    let mut found = Vec::new();
    // The servers that could not be reached; the others are still examined.
    let mut unreachable = Vec::new();
    for url in urls {
        let shown = redactor.hide(url);
        match doctor::examine(url, &shown, tls_roots, needs).await {
            Ok(more) => found.extend(more),
            Err(message) => unreachable.push(message),
        }
    }
    let out = if cli.json {
        format!("{}\n", doctor::json(&found))
    } else {
        let paint = Paint {
            on: std::io::stdout().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        };
        doctor::text(&found, paint)
    };
    // A reader that stopped early (`| head`) is no error of the servers'.
    let _ = std::io::stdout().write_all(out.as_bytes());
    let failed = found
        .iter()
        .filter(|f| f.status == doctor::Status::Fail)
        .count();
    if !unreachable.is_empty() {
        Outcome::fail(FAILED, unreachable.join("; "))
    } else if failed > 0 {
        Outcome::fail(
            UNFIT,
            format!("{failed} check(s) failed: change what the FAIL lines say"),
        )
    } else {
        Outcome::ok()
    }
}

async fn run(cli: Cli, builder: LockClientBuilder) -> Result<Outcome, LockError> {
    // Refused before connecting: no server is needed to say no.
    if let Command::Release { name, force, .. } = &cli.command
        && !force
    {
        return Ok(Outcome::fail(
            USAGE,
            format!(
                "refusing to release `{name}` without --force: its holders are not asked; \
                 each learns of the loss at its next renewal and may still be working \
                 until then (see `lockctl release --help`)"
            ),
        ));
    }
    let terminal = std::io::stdout().is_terminal();
    let paint = Paint {
        on: terminal && !cli.json && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
    };
    let locks = builder
        .prefix(cli.prefix.clone())
        .name("lockctl")
        .connect_timeout(Duration::from_secs(3))
        .command_timeout(Duration::from_secs(3))
        .connect()
        .await?;

    match cli.command {
        Command::List { pattern } => {
            let progress = terminal && !cli.json && std::io::stderr().is_terminal();
            if progress {
                eprint!("scanning…");
            }
            let found = locks.list(pattern.as_deref()).await;
            if progress {
                // Erase the progress line before anything else is printed.
                eprint!("\r\x1b[K");
            }
            let found = found?;
            if cli.json {
                let all: Vec<_> = found.iter().map(render::json).collect();
                println!("{}", serde_json::Value::Array(all));
            } else if found.is_empty() {
                println!("no locks held");
            } else {
                print!("{}", render::table(&found, paint));
            }
            Ok(Outcome::ok())
        }
        Command::Inspect { name } => {
            let info = locks.inspect(&name).await?;
            if cli.json {
                println!(
                    "{}",
                    info.as_ref()
                        .map(render::json)
                        .unwrap_or(serde_json::Value::Null)
                );
            }
            match info {
                Some(info) => {
                    if !cli.json {
                        print!("{}", render::details(&info, paint));
                    }
                    Ok(Outcome::ok())
                }
                None => Ok(Outcome::fail(NOT_HELD, format!("`{name}` is not held"))),
            }
        }
        Command::Watch {
            name,
            count,
            interval_ms,
        } => watch(&locks, &name, count, interval_ms, cli.json, paint).await,
        // Examined in `main`, without a lock client (see `check`).
        Command::Doctor => Ok(Outcome::ok()),
        Command::Release { name, yes, .. } => {
            if std::io::stdin().is_terminal() && !yes {
                let info = locks.inspect(&name).await?;
                let Some(info) = info else {
                    return Ok(Outcome::fail(NOT_HELD, format!("`{name}` is not held")));
                };
                eprint!("{}", render::details(&info, paint));
                if !confirm(&format!(
                    "{} release `{name}` from its holders? [y/N] ",
                    paint.warn("Force")
                ))
                .await
                {
                    return Ok(Outcome::fail(DECLINED, "not released"));
                }
            }
            let released = locks.force_release(&name).await?;
            if cli.json {
                println!(
                    "{}",
                    serde_json::json!({ "name": name, "released": released })
                );
            } else if released {
                println!("released `{name}`; its holders learn of it at their next renewal");
            }
            if released {
                Ok(Outcome::ok())
            } else {
                Ok(Outcome::fail(NOT_HELD, format!("`{name}` was not held")))
            }
        }
    }
}

/// Asks on stderr, reads a line from stdin: true for `y` or `yes`.
async fn confirm(question: &str) -> bool {
    eprint!("{question}");
    let _ = std::io::stderr().flush();
    // Blocking read off the runtime, which keeps the client's tasks going.
    tokio::task::spawn_blocking(|| {
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer).map(|_| answer)
    })
    .await
    .ok()
    .and_then(Result::ok)
    .is_some_and(|answer| matches!(answer.trim().to_lowercase().as_str(), "y" | "yes"))
}

/// Prints the lock's state, then each change of holders, until Ctrl-C or
/// `count` changes.
async fn watch(
    locks: &LockClient,
    name: &str,
    count: Option<u64>,
    interval_ms: u64,
    json: bool,
    paint: Paint,
) -> Result<Outcome, LockError> {
    let started = Instant::now();
    let mut watching = locks
        .watch(name)
        .await?
        .poll_every(Duration::from_millis(interval_ms));
    let print = |event: &str, state: Option<&LockInfo>| {
        let elapsed = started.elapsed();
        if json {
            println!(
                "{}",
                serde_json::json!({
                    "event": event,
                    "elapsed_ms": elapsed.as_millis() as u64,
                    "name": name,
                    "lock": state.map(render::json),
                })
            );
        } else {
            let at = paint.dim(&format!("[{:>8.3}s]", elapsed.as_secs_f64()));
            match state {
                None => println!("{at} {} free", paint.name(name)),
                Some(info) if info.holders.is_empty() => {
                    println!(
                        "{at} {} free, {} in line",
                        paint.name(name),
                        info.waiters.queued.len()
                    )
                }
                Some(info) => {
                    for holder in &info.holders {
                        println!(
                            "{at} {} held by {}",
                            paint.name(name),
                            render::holder_line(holder, paint)
                        );
                    }
                }
            }
        }
        // Each change is printed as it happens, even into a pipe.
        let _ = std::io::stdout().flush();
    };
    print("current", watching.current());
    let mut seen = 0;
    while count.is_none_or(|count| seen < count) {
        tokio::select! {
            changed = watching.changed() => {
                print("changed", changed?.as_ref());
                seen += 1;
            }
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    Ok(Outcome::ok())
}
