//! Benchmarks of `lock-runtime` against a hand-written redis-rs lock, the
//! `rslock` crate and the round-trip floor, against private `redis-server`s
//! started for the run: the uncontended and throughput scenarios against
//! one with Redis's default save policy (RDB snapshots, as users' servers
//! have), the others against one without persistence.
//!
//! ```text
//! cargo run --release -p lock-bench                      # everything; writes BENCHMARKS.md and docs/bench-*.svg
//! cargo run --release -p lock-bench -- --quick           # smoke run (< 60 s), writes nothing
//! cargo run --release -p lock-bench -- --scenario NAME   # one scenario (repeatable), writes nothing
//! ```
//!
//! Scenarios: `uncontended`, `remote`, `throughput`, `contention`, `rw`, `handoff`,
//! `renewal`, `attribute`. `--write` writes the report after a partial or
//! quick run too, `--no-write` never writes, `--out DIR` writes into `DIR`
//! instead of the repository root.
//!
//! The run exits with an error when a safety check fails (two holders at
//! once in the contention scenario, a reader beside the writer in the rw
//! scenario, or a lock lost while held in the renewal scenario); missing a performance target is reported, not an error.

mod chart;
mod contenders;
mod measure;
mod report;
mod scenarios;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lock_testkit::Revision;

use crate::contenders::BenchError;
use crate::report::{Machine, Results};
use crate::scenarios::{Ctx, DEFAULT_SAVE};

#[global_allocator]
static ALLOC: measure::CountingAlloc = measure::CountingAlloc;

const SCENARIOS: [&str; 8] = [
    "uncontended",
    "remote",
    "throughput",
    "contention",
    "rw",
    "handoff",
    "renewal",
    "attribute",
];

/// Command-line options.
struct Options {
    quick: bool,
    scenarios: Vec<String>,
    write: Option<bool>,
    out: Option<PathBuf>,
}

const USAGE: &str = "usage: cargo run --release -p lock-bench [-- [--quick] [--scenario NAME]... [--write | --no-write] [--out DIR]]
scenarios: uncontended, remote, throughput, contention, rw, handoff, renewal, attribute";

fn parse_args() -> Result<Options, String> {
    let mut options = Options {
        quick: false,
        scenarios: Vec::new(),
        write: None,
        out: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => options.quick = true,
            "--write" => options.write = Some(true),
            "--no-write" => options.write = Some(false),
            "--scenario" => {
                let name = args.next().ok_or("--scenario needs a name")?;
                if !SCENARIOS.contains(&name.as_str()) {
                    return Err(format!("unknown scenario `{name}`"));
                }
                options.scenarios.push(name);
            }
            "--out" => options.out = Some(args.next().ok_or("--out needs a directory")?.into()),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(options)
}

fn main() -> ExitCode {
    let options = match parse_args() {
        Ok(options) => options,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("lock-bench: {message}");
            }
            eprintln!("{USAGE}");
            return if message.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            };
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("lock-bench: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(options)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("lock-bench: a safety check failed (see above)");
            ExitCode::FAILURE
        }
        Err(err) => {
            eprintln!("lock-bench: {err}");
            ExitCode::FAILURE
        }
    }
}

/// How long the runtime's restart quarantine lasts by default, plus the
/// second `LASTSAVE` rounds away and one more: a server up for less makes
/// each acquisition also read `INFO server` (see the runtime's guide,
/// "Lua scripting and INFO").
const QUARANTINE_PASSED: Duration = Duration::from_secs(32);

/// Waits until the benchmark's server has been up for longer than the
/// runtime's restart quarantine, as a production server has: the figures
/// are the steady state, not the first half minute of a server's life.
async fn settle(server_started: Instant) {
    let up = server_started.elapsed();
    if up < QUARANTINE_PASSED {
        println!(
            "lock-bench: waiting {:.0?} until redis-server has been up for longer than the restart quarantine",
            QUARANTINE_PASSED - up
        );
        tokio::time::sleep(QUARANTINE_PASSED - up).await;
    }
}

fn wanted(options: &Options, name: &str) -> bool {
    options.scenarios.is_empty() || options.scenarios.iter().any(|s| s == name)
}

/// Runs the chosen scenarios and reports; `Ok(false)` when a safety check failed.
async fn run(options: Options) -> Result<bool, BenchError> {
    let started = Instant::now();
    let busy = measure::machine_busy();
    let own_cpu = measure::process_cpu();
    // Users' servers snapshot by the default policy, which changes what
    // the runtime's scripts do (see `Ctx::fresh_save`): the scenarios that
    // set the targets on Redis CPU run against such a server.
    let saving = Ctx::start(DEFAULT_SAVE, options.quick);
    let ctx = Ctx::start("", options.quick);
    let server_started = Instant::now();
    if saving.save.is_empty() || !ctx.save.is_empty() {
        return Err(format!(
            "redis-server did not take the save policies asked for: `{}` and `{}`",
            saving.save, ctx.save
        )
        .into());
    }
    let machine = machine(&ctx);
    if !options.quick {
        settle(server_started).await;
    }
    let command = if options.quick {
        "cargo run --release -p lock-bench -- --quick".to_owned()
    } else if options.scenarios.is_empty() {
        "cargo run --release -p lock-bench".to_owned()
    } else {
        let mut c = "cargo run --release -p lock-bench --".to_owned();
        for s in &options.scenarios {
            let _ = write!(c, " --scenario {s}");
        }
        c
    };
    println!(
        "lock-bench: {} on {} × {}, {}, redis-server {}",
        if options.quick {
            "quick run"
        } else {
            "full run"
        },
        machine.cpus,
        machine.cpu_model,
        machine.rustc,
        machine.redis
    );

    let mut results = Results::default();
    let mut targets = Vec::new();
    let mut sections: Vec<(&str, String)> = Vec::new();
    let mut safe = true;
    let announce = |name: &str| {
        println!("\n== {name}");
        Instant::now()
    };

    if wanted(&options, "uncontended") {
        let t = announce("uncontended");
        let mut u = scenarios::uncontended::run(&saving).await?;
        let text = report::uncontended(&mut u, &mut targets);
        println!("{text}({})", report::dur(t.elapsed()));
        sections.push(("Uncontended: lock + unlock latency", text));
        results.uncontended = Some(u);
    }
    if wanted(&options, "remote") {
        let t = announce("remote");
        let mut r = scenarios::remote::run(&ctx).await?;
        let text = report::remote(&mut r, &mut targets);
        println!("{text}({})", report::dur(t.elapsed()));
        sections.push((
            "Uncontended over a network: lock + unlock through a delaying proxy",
            text,
        ));
    }
    if wanted(&options, "throughput") {
        let t = announce("throughput");
        let r = scenarios::throughput::run(&saving).await?;
        let text = report::throughput(&r, &mut targets);
        println!("{text}({})", report::dur(t.elapsed()));
        sections.push(("Throughput: 64 tasks on distinct keys", text));
        results.throughput = Some(r);
    }
    if wanted(&options, "contention") {
        let t = announce("contention");
        let mut c = scenarios::contention::run(&ctx).await?;
        let text = report::contention(&mut c, &mut targets);
        println!("{text}({})", report::dur(t.elapsed()));
        for row in &c.rows {
            if row.overlaps > 0 {
                eprintln!(
                    "SAFETY: {}: {} overlapping critical sections",
                    row.name, row.overlaps
                );
                safe &= !row.name.starts_with("lock-runtime");
            }
        }
        sections.push(("Contention: 16 tasks on one key", text));
        results.contention = Some(c);
    }
    if wanted(&options, "rw") {
        let t = announce("rw");
        let mut r = scenarios::rw::run(&ctx).await?;
        let text = report::rw(&mut r, &mut targets);
        println!("{text}({})", report::dur(t.elapsed()));
        for p in &r.phases {
            if p.violations > 0 {
                eprintln!("SAFETY: {}: {} overlapping holders", p.name, p.violations);
                safe = false;
            }
        }
        sections.push(("Read-write lock: 15 readers and a writer on one key", text));
        results.rw = Some(r);
    }
    if wanted(&options, "handoff") {
        let t = announce("handoff");
        let mut h = scenarios::handoff::run(&ctx).await?;
        let text = report::handoff(&mut h);
        println!("{text}({})", report::dur(t.elapsed()));
        sections.push(("Handoff: release to the waiter's acquisition", text));
        results.handoff = Some(h);
    }
    if wanted(&options, "renewal") {
        let t = announce("renewal");
        let r = scenarios::renewal::run(&ctx).await?;
        let text = report::renewal(&r, &mut targets);
        println!("{text}({})", report::dur(t.elapsed()));
        for row in &r.rows {
            if row.lost > 0 || row.renewing != row.locks {
                eprintln!(
                    "SAFETY: {} of {} held locks lost, {} still renewed",
                    row.lost, row.locks, row.renewing
                );
                safe = false;
            }
        }
        sections.push(("Renewal at scale", text));
        results.renewal = Some(r);
    }
    if wanted(&options, "attribute") {
        let t = announce("attribute");
        let mut a = scenarios::attribute::run(&ctx).await?;
        let text = report::attribute(&mut a, &mut targets);
        println!("{text}({})", report::dur(t.elapsed()));
        sections.push((
            "Attribute cost: `#[distributed_lock]` against the same calls by hand",
            text,
        ));
        results.attribute = Some(a);
    }

    let summary = report::summary(&targets);
    println!("\n== targets\n{summary}");
    let took = started.elapsed();
    let others = measure::machine_busy()
        .saturating_sub(busy)
        .saturating_sub(measure::process_cpu() - own_cpu)
        .saturating_sub(measure::other_process_cpu(ctx.server.pid()))
        .saturating_sub(measure::other_process_cpu(saving.server.pid()));
    let mut machine = machine;
    machine.other_load = format!(
        "{:.0} % of one core on average (CPU time of other processes / run time)",
        others.as_secs_f64() / took.as_secs_f64() * 100.0
    );
    println!("lock-bench: other processes used {}", machine.other_load);
    println!("lock-bench: done in {}", report::dur(took));

    let full = !options.quick && options.scenarios.is_empty();
    let write = options.write.unwrap_or(full || options.out.is_some());
    if write {
        let root = options
            .out
            .clone()
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".."));
        write_report(
            &root,
            &saving.save,
            &machine,
            &command,
            took,
            &summary,
            &sections,
            &mut results,
        )?;
    } else {
        println!("lock-bench: nothing written (a full run writes BENCHMARKS.md; or pass --write)");
    }
    Ok(safe)
}

#[allow(clippy::too_many_arguments)]
fn write_report(
    root: &std::path::Path,
    saving: &str,
    machine: &Machine,
    command: &str,
    took: Duration,
    summary: &str,
    sections: &[(&str, String)],
    results: &mut Results,
) -> Result<(), BenchError> {
    let docs = root.join("docs");
    std::fs::create_dir_all(&docs)?;
    let mut charts = Vec::new();
    if let Some(u) = results.uncontended.as_mut() {
        chart::latency(&docs.join("bench-latency.svg"), u, results.handoff.as_mut())?;
        charts.push((
            "Uncontended latency and handoff latency by percentile",
            "docs/bench-latency.svg",
        ));
    }
    if let Some(c) = results.contention.as_mut() {
        chart::contention(&docs.join("bench-contention.svg"), c)?;
        charts.push(("Contention on one key", "docs/bench-contention.svg"));
    }

    let mut md = String::new();
    md.push_str("# Benchmarks\n\n");
    md.push_str(
        "<!-- Generated by lock-bench; every number below comes from one run of the command \
         shown. Do not edit by hand: run it again. -->\n\n",
    );
    md.push_str(
        "`lock-runtime` against the same lock written by hand on redis-rs (`SET key token NX PX` \
         + a compare-and-delete script by EVALSHA, on a `ConnectionManager` like the runtime's), \
         the `rslock` crate (0.10) and the floor (two bare round trips: a `SET` and an EVALSHA of \
         `return 1`). Every scenario runs all of them in the same run against a private \
         `redis-server` the benchmark starts on a free loopback port, with client and server \
         sharing the machine, once that server has been up for longer than the runtime's \
         restart quarantine (30 s), as a production server has. The runtime runs its scripts \
         as functions of one library (`FCALL`; Redis 7.0 and later), which read `INFO server` \
         at most once and `LASTSAVE` (after a recent save, also a mark the runtime leaves) until they \
         have seen the server up for the quarantine, then nothing more. **Ratios are the result; \
         absolute times are for context** and depend on the machine.\n\n",
    );
    let _ = writeln!(
        md,
        "**Persistence.** The uncontended and throughput scenarios run against a server with \
         Redis's default save policy (`save {saving}`: RDB snapshots, written by a forked \
         child into the server's own directory), as users' servers have. Each of the two \
         makes a snapshot (`BGSAVE`) before its warm-up (the policy itself makes one a minute \
         after the last once 10 000 keys have changed, which the benchmark's writes reach in \
         seconds), so that its measured rounds see a server that has just saved, as a server \
         under steady writes is for half of each minute (for 30 s after a snapshot, the \
         runtime's restart check, run by EVALSHA on a server without functions, reads its \
         slot's `:up` mark besides `LASTSAVE` at every acquisition). Each section \
         says how long after the snapshot its rounds ran. The contention, read-write, \
         handoff, renewal and attribute scenarios run against a second server without \
         persistence (`--save \"\"`).\n"
    );
    let _ = writeln!(md, "Reproduce with:\n\n```sh\n{command}\n```\n");
    md.push_str(
        "(`-- --quick` is a smoke run of under a minute; `-- --scenario NAME` runs one scenario. \
         Neither writes this file unless given `--write`.)\n\n",
    );
    md.push_str("## Machine\n\n");
    md.push_str(&report::machine(machine, command, took));
    md.push_str("## Targets\n\n");
    md.push_str(summary);
    for (title, path) in &charts {
        let _ = writeln!(md, "![{title}]({path})\n");
    }
    for (title, text) in sections {
        let _ = writeln!(md, "## {title}\n\n{text}");
    }
    md.push_str(METHOD);
    let path = root.join("BENCHMARKS.md");
    std::fs::write(&path, md)?;
    println!("lock-bench: wrote {}", path.display());
    for (_, chart) in &charts {
        println!("lock-bench: wrote {}", root.join(chart).display());
    }
    Ok(())
}

const METHOD: &str = "## How to read these numbers\n\n\
- **Round trips.** An uncontended lock + unlock is two round trips for every contender: \
acquire and release. The runtime's acquire is a Lua script (take, re-enter, or report the \
holder's TTL; draw a fencing token) and its release is one too (owner check, re-entry count, \
delete, publish a wake-up), where the hand-written lock uses a plain `SET NX PX` and a \
two-call script. The difference in server time per pair is in the uncontended table.\n\
- **Commands sent** are the commands clients sent, each a round trip or part of a pipelined \
one. Redis's `INFO commandstats` also counts every call a script makes; those are shown \
separately as \"Redis calls (incl. in scripts)\", and told apart by name (the commands marked \
`*` are only ever called from inside scripts in this benchmark; `SET` is the hand-written lock's \
own command, and runs only inside scripts for the runtime, whose client never sends one).\n\
- **Waiting.** The runtime's waiters subscribe to the lock's release channel and get in the \
lock's line, and sleep until a release names the first in line (only that waiter's client \
wakes a waiter, who tries); a plain `lock` goes to whoever asks first while it is free (often \
its last holder, asking again at once) until its first waiter was passed over 4 times in a \
row, its `fair_lock` to the next in line only. A release also hands the lock straight to a waiting task of its own \
client, in the release's own call (no wake-up, no acquire of the waiter's own): the contention \
scenario measures both, with a client per task (as processes of their own) and with one client \
shared by the tasks. The hand-written lock and rslock poll. rslock's `acquire` makes \
rounds of 3 attempts with random pauses (up to 200 ms by default) and sends an unlock script \
after every failed attempt.\n\
- **Renewal.** The runtime renews every held lock of a client from one watchdog task, many \
locks per script call; rslock and the hand-written lock have no watchdog (a Redisson-style \
watchdog makes one call per lock per renewal).\n\
- **CPU.** redis-server CPU is the server process's CPU time (all its threads, read to the \
nanosecond through its CPU-time clock around each measured block), so it includes reading \
requests and writing replies, which `INFO commandstats` leaves out, and the server's background \
work in that time; a snapshot child's CPU is not included, the fork itself is. Client CPU is \
the benchmark process's CPU time (all threads, the tokio runtime included) around the same \
block, during which only the measured contender runs.\n\
- **Noise.** Client, server and the tokio runtime share the machine's cores. The uncontended \
and attribute scenarios run the contenders in rounds of rotating order, and show the lowest and \
highest ratio of the medians of five consecutive parts of the run (ratios of single rounds \
spread wider); the throughput and contention scenarios rotate their rounds too, the handoff \
scenario runs its contenders in a fixed order. Treat differences inside that spread as noise.\n";

/// The machine and versions, for the report.
fn machine(ctx: &Ctx) -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let kb: f64 = m
                .lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))?
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()?;
            Some(format!("{:.1} GiB", kb / 1024.0 / 1024.0))
        })
        .unwrap_or_else(|| "unknown".to_owned());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| format!("Linux {}", s.trim()))
        .unwrap_or_else(|_| std::env::consts::OS.to_owned());
    Machine {
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        cpu_model,
        memory,
        kernel,
        rustc: env!("LOCK_BENCH_RUSTC").to_owned(),
        redis: ctx
            .info_field("server", "redis_version")
            .unwrap_or_else(|| "unknown".to_owned()),
        date: today(),
        other_load: String::new(),
        commit: commit(),
    }
}

/// The commit of the code measured, and whether the library, the
/// benchmark itself or the locked dependencies had changes beyond it (or
/// that git could not tell).
fn commit() -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let measured = ["lock-runtime", "lock-macros", "lock-bench", "Cargo.lock"];
    match lock_testkit::revision(&root, &measured) {
        Some(Revision {
            commit,
            changed: Some(false),
        }) => commit,
        Some(Revision {
            commit,
            changed: Some(true),
        }) => format!(
            "{commit} + uncommitted changes to lock-runtime, lock-macros, lock-bench or Cargo.lock"
        ),
        Some(Revision {
            commit,
            changed: None,
        }) => {
            format!("{commit} (git could not tell whether it had uncommitted changes)")
        }
        None => "unknown (not a git checkout)".to_owned(),
    }
}

/// Today's date (UTC) as YYYY-MM-DD.
fn today() -> String {
    let days = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400) as i64;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}
