//! The results as Markdown: the tables printed by the run and written to
//! `BENCHMARKS.md`.

use std::fmt::Write as _;
use std::time::Duration;

use crate::measure::{median, range, segment_ratios, us};
use crate::scenarios::attribute::Attribute;
use crate::scenarios::contention::Contention;
use crate::scenarios::handoff::Handoff;
use crate::scenarios::remote::Remote;
use crate::scenarios::renewal::Renewal;
use crate::scenarios::rw::{self, Mode, Rw};
use crate::scenarios::throughput::{self, Throughput};
use crate::scenarios::uncontended::Uncontended;
use crate::scenarios::{Persistence, contention, renewal};

/// Where and with what the run happened.
pub struct Machine {
    /// Logical CPUs.
    pub cpus: usize,
    /// CPU model from /proc/cpuinfo.
    pub cpu_model: String,
    /// Total memory.
    pub memory: String,
    /// Kernel release.
    pub kernel: String,
    /// The compiler that built the benchmark.
    pub rustc: String,
    /// The server's version.
    pub redis: String,
    /// The date of the run (UTC).
    pub date: String,
    /// CPU used by other processes during the run.
    pub other_load: String,
    /// The commit measured.
    pub commit: String,
}

/// Everything one run measured.
#[derive(Default)]
pub struct Results {
    /// Uncontended latency.
    pub uncontended: Option<Uncontended>,
    /// Throughput on distinct keys.
    pub throughput: Option<Throughput>,
    /// Contention on one key.
    pub contention: Option<Contention>,
    /// The read-write lock under contention.
    pub rw: Option<Rw>,
    /// Release-to-acquire handoff.
    pub handoff: Option<Handoff>,
    /// Renewal at scale.
    pub renewal: Option<Renewal>,
    /// Attribute against hand-written calls.
    pub attribute: Option<Attribute>,
}

/// A goal from the issue and how the run did against it.
pub struct Target {
    scenario: &'static str,
    goal: &'static str,
    measured: String,
    met: bool,
}

/// A duration in the unit that suits it.
pub fn dur(d: Duration) -> String {
    let us = us(d);
    if us < 1000.0 {
        format!("{us:.1} µs")
    } else if us < 1_000_000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

fn ratio(r: f64) -> String {
    format!("{r:.2}×")
}

/// A ratio that may be far below 1, with enough digits to tell it from 0.
fn small_ratio(r: f64) -> String {
    if r < 0.1 {
        format!("{r:.3}×")
    } else {
        ratio(r)
    }
}

fn bytes(b: f64) -> String {
    if b.abs() >= 1024.0 * 1024.0 {
        format!("{:.1} MiB", b / 1024.0 / 1024.0)
    } else if b.abs() >= 1024.0 {
        format!("{:.2} KiB", b / 1024.0)
    } else {
        format!("{b:.0} B")
    }
}

/// A Markdown table; columns are right-aligned (numbers) except the first.
fn table(out: &mut String, headers: &[&str], rows: &[Vec<String>]) {
    aligned_table(out, headers, rows, 1);
}

/// A Markdown table whose first `left` columns are left-aligned.
fn aligned_table(out: &mut String, headers: &[&str], rows: &[Vec<String>], left: usize) {
    let _ = writeln!(out, "| {} |", headers.join(" | "));
    let _ = writeln!(
        out,
        "|{}|",
        headers
            .iter()
            .enumerate()
            .map(|(i, _)| if i < left { "---" } else { "---:" })
            .collect::<Vec<_>>()
            .join("|")
    );
    for row in rows {
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
    out.push('\n');
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "**missed**" }
}

/// The bound on the runtime's redis-server CPU per lock + unlock,
/// as a multiple of the hand-written lock's.
const SERVER_CPU_RATIO: f64 = 1.5;

/// The target on redis-server CPU per pair in `scenario`: the runtime's
/// `ours` µs against the hand-written lock's `hand`.
fn server_cpu_target(scenario: &'static str, ours: f64, hand: f64) -> Target {
    Target {
        scenario,
        goal: "redis-server CPU per pair ≤ 1.5 × hand-written",
        measured: format!("{ours:.1} µs vs {hand:.1} µs ({})", ratio(ours / hand)),
        met: ours <= SERVER_CPU_RATIO * hand,
    }
}
/// The bound on the runtime's client CPU per uncontended lock +
/// unlock beyond the hand-written lock's, in microseconds.
const CLIENT_CPU_EXTRA_US: f64 = 15.0;

/// The server a scenario ran against, and its snapshots during the
/// measured rounds: one sentence for the section's text.
pub fn persistence(p: &Persistence) -> String {
    if p.save.is_empty() {
        return "The server runs without persistence (`--save \"\"`).".to_owned();
    }
    format!(
        "The server runs with Redis's default save policy (`save {}`) and made a snapshot \
         (`BGSAVE`) right before the warm-up: the measured rounds ran from {} s to {} s after \
         its last snapshot, and it made {} snapshot(s) during them.",
        p.save, p.since_save.0, p.since_save.1, p.saves_during
    )
}

/// The runtime's CPU per pair next to the hand-written lock's: redis-server
/// CPU as a ratio, client CPU as a difference.
fn cpu_cells(server: (f64, f64), client: (f64, f64), is_hand: bool) -> (String, String) {
    if is_hand {
        return (format!("{:.1} µs", server.0), format!("{:.1} µs", client.0));
    }
    (
        format!("{:.1} µs ({})", server.0, ratio(server.0 / server.1)),
        format!("{:.1} µs ({:+.1} µs)", client.0, client.0 - client.1),
    )
}

/// The uncontended section, and its targets.
/// The remote scenario's section and target.
pub fn remote(r: &mut Remote, targets: &mut Vec<Target>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "As the uncontended scenario (against the server without persistence: the runtime's \
         restart check reads nothing there either, see above), with every contender connected \
         through the testkit's \
         proxy, which holds each chunk back by {} in each direction (to within tens of \
         microseconds; the proxy's own relaying adds to it), as a Redis on another host would. \
         One PING round trip through the proxy in the same run: p50 {}, p99 {}. {} rounds of \
         one block of {} pairs per contender, in rotating order.\n",
        dur(crate::scenarios::remote::ADDED),
        dur(r.rtt.p50()),
        dur(r.rtt.p99()),
        r.rounds,
        r.per_round,
    );
    let hand_p50 = us(r.rows[1].1.p50());
    let rows: Vec<Vec<String>> = r
        .rows
        .iter_mut()
        .map(|(name, samples)| {
            vec![
                (*name).to_owned(),
                dur(samples.p50()),
                dur(samples.p99()),
                ratio(us(samples.p50()) / hand_p50),
            ]
        })
        .collect();
    table(
        &mut out,
        &["lock + unlock", "p50", "p99", "p50 vs hand-written"],
        &rows,
    );
    let ours = us(r.rows[0].1.p50()) / hand_p50;
    targets.push(Target {
        scenario: "Uncontended, network",
        goal: "p50 ≤ 1.05 × hand-written, ≥ 250 µs added each way",
        measured: format!("{} (PING {})", ratio(ours), dur(r.rtt.p50())),
        met: ours <= 1.05,
    });
    out
}

pub fn uncontended(u: &mut Uncontended, targets: &mut Vec<Target>) -> String {
    let mut out = String::new();
    let pairs = (u.rounds * u.per_round) as u64;
    let hand_p50 = us(u.rows[1].samples.p50());
    let hand_p99 = us(u.rows[1].samples.p99());
    let hand_rounds = u.rows[1].round_p50.clone();
    let rtt = us(u.rtt.p50());
    let _ = writeln!(
        out,
        "One task locks and unlocks a free key: {} rounds of one block of {} pairs per \
         contender, in an order that rotates every round. \"p50 ratio over time\" splits the \
         run into five consecutive parts and gives the lowest and highest ratio of the parts' \
         medians. Keys are drawn at random from {} names, each used \
         once in a warm-up pass (so the runtime's per-slot fencing counters exist, as in a \
         service that has been running). One PING round trip in the same run: \
         p50 {}, p99 {}. {}\n",
        u.rounds,
        u.per_round,
        u.pool,
        dur(u.rtt.p50()),
        dur(u.rtt.p99()),
        persistence(&u.persistence)
    );
    let per_pair = |d: Duration| us(d) / pairs as f64;
    let hand_cpu = (
        per_pair(u.rows[1].server_cpu),
        per_pair(u.rows[1].client_cpu),
    );
    let mut rows = Vec::new();
    let mut ours_ratio = (0.0, 0.0, 0.0);
    for (i, row) in u.rows.iter_mut().enumerate() {
        let p50 = us(row.samples.p50());
        let (lo, hi) = range(&segment_ratios(&row.round_p50, &hand_rounds, 5));
        if row.name == "lock-runtime" {
            ours_ratio = (p50 / hand_p50, lo, hi);
        }
        let (server_cpu, client_cpu) = cpu_cells(
            (per_pair(row.server_cpu), hand_cpu.0),
            (per_pair(row.client_cpu), hand_cpu.1),
            i == 1,
        );
        rows.push(vec![
            row.name.to_owned(),
            dur(row.samples.p50()),
            dur(row.samples.quantile(0.9)),
            dur(row.samples.p99()),
            dur(row.samples.quantile(0.999)),
            ratio(p50 / hand_p50),
            format!("{}–{}", ratio(lo), ratio(hi)),
            ratio(us(row.samples.p99()) / hand_p99),
            format!("{:.1}", p50 / rtt),
            format!("{:.2}", row.stats.client_calls() as f64 / pairs as f64),
            format!("{:.2}", row.stats.all_calls() as f64 / pairs as f64),
            format!("{:.1} µs", row.stats.client_usec() as f64 / pairs as f64),
            server_cpu,
            client_cpu,
        ]);
    }
    table(
        &mut out,
        &[
            "lock + unlock",
            "p50",
            "p90",
            "p99",
            "p99.9",
            "p50 vs hand-written",
            "p50 ratio over time",
            "p99 vs hand-written",
            "p50 in PING RTTs",
            "commands sent",
            "Redis calls (incl. in scripts)",
            "Redis time in commands",
            "redis-server CPU (vs hand-written)",
            "client CPU (vs hand-written)",
        ],
        &rows,
    );
    out.push_str(
        "The last five columns are per lock + unlock pair. Commands, calls and time in commands \
         come from `INFO commandstats` (the server's own time in the commands clients sent; a \
         script's includes the calls it makes). redis-server CPU is the server process's CPU \
         time over each block (all its threads, including its network I/O and its background \
         work in that time; not a snapshot child's), client CPU this process's (all threads), \
         both read to the nanosecond right before and after each block and divided by the \
         block's pairs; during a block only the contender measured runs, the others' clients \
         stay connected and idle.\n\n",
    );
    {
        let (ours, hand) = (&u.rows[0], &u.rows[1]);
        let per = |x: u64| x as f64 / pairs as f64;
        let _ = writeln!(
            out,
            "Where the difference comes from, in this run: per pair, Redis spent {:.1} µs in the \
             runtime's two scripts ({:.1} calls made inside them) against {:.1} µs for the \
             hand-written lock ({:.1} calls); redis-server used {:.1} µs of CPU against {:.1} µs, \
             and this process {:.1} µs against {:.1} µs. The p50 difference is {:.1} µs.\n",
            per(ours.stats.client_usec()),
            per(ours.stats.all_calls() - ours.stats.client_calls()),
            per(hand.stats.client_usec()),
            per(hand.stats.all_calls() - hand.stats.client_calls()),
            us(ours.server_cpu) / pairs as f64,
            us(hand.server_cpu) / pairs as f64,
            us(ours.client_cpu) / pairs as f64,
            us(hand.client_cpu) / pairs as f64,
            ours_ratio.0 * hand_p50 - hand_p50,
        );
    }
    targets.push(Target {
        scenario: "Uncontended",
        goal: "p50 ≤ 1.20 × hand-written",
        measured: format!(
            "{} (over time {}–{})",
            ratio(ours_ratio.0),
            ratio(ours_ratio.1),
            ratio(ours_ratio.2)
        ),
        met: ours_ratio.0 <= 1.20,
    });
    let ours_cpu = (
        per_pair(u.rows[0].server_cpu),
        per_pair(u.rows[0].client_cpu),
    );
    targets.push(server_cpu_target("Uncontended", ours_cpu.0, hand_cpu.0));
    targets.push(Target {
        scenario: "Uncontended",
        goal: "client CPU per pair ≤ hand-written + 15 µs",
        measured: format!(
            "{:.1} µs vs {:.1} µs ({:+.1} µs)",
            ours_cpu.1,
            hand_cpu.1,
            ours_cpu.1 - hand_cpu.1
        ),
        met: ours_cpu.1 <= hand_cpu.1 + CLIENT_CPU_EXTRA_US,
    });
    out
}

/// The throughput section, and its target.
pub fn throughput(t: &Throughput, targets: &mut Vec<Target>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} tasks, each locking and unlocking random names from its own 64 (each used once in a \
         warm-up pass), for {} per round; \
         {} round(s) per contender in rotating order. Pairs per second is the median over rounds. \
         {}\n",
        throughput::TASKS,
        dur(t.duration),
        t.rows[0].rounds.len(),
        persistence(&t.persistence)
    );
    let hand = median(&t.rows[1].rounds);
    let per_pair = |d: Duration, pairs: u64| us(d) / pairs.max(1) as f64;
    let hand_row = &t.rows[1];
    let hand_cpu = (
        per_pair(hand_row.server_cpu, hand_row.pairs),
        per_pair(hand_row.client_cpu, hand_row.pairs),
    );
    let mut rows = Vec::new();
    let mut ours = 0.0;
    let mut rslock = f64::NAN;
    let mut ours_cpu = (f64::NAN, f64::NAN);
    for (i, row) in t.rows.iter().enumerate() {
        let rate = median(&row.rounds);
        let (lo, hi) = range(&row.rounds);
        let cpu = (
            per_pair(row.server_cpu, row.pairs),
            per_pair(row.client_cpu, row.pairs),
        );
        if row.name == "lock-runtime" {
            ours = rate / hand;
            ours_cpu = cpu;
        }
        if row.name == "rslock" {
            rslock = rate / hand;
        }
        let (server_cpu, client_cpu) = cpu_cells((cpu.0, hand_cpu.0), (cpu.1, hand_cpu.1), i == 1);
        rows.push(vec![
            row.name.to_owned(),
            format!("{rate:.0}"),
            format!("{lo:.0}–{hi:.0}"),
            ratio(rate / hand),
            format!(
                "{:.2}",
                row.stats.client_calls() as f64 / row.pairs.max(1) as f64
            ),
            format!(
                "{:.1} µs",
                row.stats.client_usec() as f64 / row.pairs.max(1) as f64
            ),
            server_cpu,
            client_cpu,
            format!(
                "{:.0} % + {:.0} %",
                row.client_cpu.as_secs_f64() / row.elapsed.as_secs_f64() * 100.0,
                row.server_cpu.as_secs_f64() / row.elapsed.as_secs_f64() * 100.0
            ),
        ]);
    }
    table(
        &mut out,
        &[
            "64 tasks, distinct keys",
            "pairs/s",
            "rounds min–max",
            "vs hand-written",
            "commands sent / pair",
            "Redis time in commands / pair",
            "redis-server CPU / pair (vs hand-written)",
            "client CPU / pair (vs hand-written)",
            "CPU busy: client + server (100 % = one core)",
        ],
        &rows,
    );
    out.push_str(
        "CPU per pair is each process's CPU time over a contender's rounds (read as in the \
         uncontended scenario) divided by the pairs completed in them.\n\n",
    );
    targets.push(Target {
        scenario: "Throughput",
        goal: "≥ 0.9 × hand-written, and above rslock",
        measured: format!("{} (rslock {})", ratio(ours), ratio(rslock)),
        met: ours >= 0.9 && ours > rslock,
    });
    targets.push(server_cpu_target("Throughput", ours_cpu.0, hand_cpu.0));
    out
}

/// The contention section, and its targets.
pub fn contention(c: &mut Contention, targets: &mut Vec<Target>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} tasks take one key over and over (the body is one scheduling point), for {} per \
         round, {} round(s) per contender. A wait runs from calling acquire to holding the \
         lock; \"longest\" includes waits still unfinished when a round ended. \"Busiest \
         task's share\" is the part of all acquisitions made by the task that made the most \
         (1/16 = 6 % is perfectly fair): a task that releases and at once takes the lock again \
         while the others sleep makes many acquisitions per second and long waits. The \
         hand-written lock and rslock are each one client shared by the tasks. lock-runtime runs \
         twice: with a client per task, as processes of their own would be, where the waiter a \
         release names is woken by its message (the targets are judged on these rows); and with one \
         client shared by the tasks, whose releases hand the lock straight to a waiting task of \
         that client in the release's own call.\n",
        contention::TASKS,
        dur(c.duration),
        c.rounds
    );
    let rslock_rate = c
        .rows
        .iter()
        .find(|r| r.short_name == "rslock")
        .map_or(f64::NAN, |r| r.rate());
    let mut rows = Vec::new();
    let mut breakdowns = String::new();
    for row in &mut c.rows {
        let acq = row.acquisitions.max(1);
        let longest = row.longest_wait();
        rows.push(vec![
            row.name.clone(),
            format!("{:.0}", row.rate()),
            ratio(row.rate() / rslock_rate),
            dur(row.waits.p50()),
            dur(row.waits.p99()),
            dur(longest),
            format!("{:.2}", row.stats.client_calls() as f64 / acq as f64),
            format!("{:.2}", row.stats.all_calls() as f64 / acq as f64),
            format!("{:.1} µs", us(row.server_cpu) / acq as f64),
            format!("{:.0} %", row.busiest as f64 / acq as f64 * 100.0),
            row.overlaps.to_string(),
        ]);
        let _ = writeln!(breakdowns, "- {}: {}", row.name, row.stats.breakdown(acq));
    }
    table(
        &mut out,
        &[
            "16 tasks, 1 key",
            "acquisitions/s",
            "vs rslock (defaults)",
            "wait p50",
            "wait p99",
            "longest wait",
            "commands sent / acq.",
            "Redis calls / acq. (incl. in scripts)",
            "redis-server CPU / acq.",
            "busiest task's share",
            "overlapping holders",
        ],
        &rows,
    );
    let _ = writeln!(
        out,
        "Calls per acquisition by command (`*`: only ever called inside scripts):\n\n{breakdowns}"
    );
    for (short, scenario) in [
        ("lock-runtime", "Contention (`lock`)"),
        ("lock-runtime fair", "Contention (`fair_lock`)"),
    ] {
        let Some(ours) = c.rows.iter_mut().find(|r| r.short_name == short) else {
            continue;
        };
        let rate = ours.rate();
        let longest = ours.longest_wait();
        let commands = ours.stats.client_calls() as f64 / ours.acquisitions.max(1) as f64;
        targets.push(Target {
            scenario,
            goal: "more acquisitions/s than rslock",
            measured: format!(
                "{rate:.0}/s vs {rslock_rate:.0}/s ({})",
                ratio(rate / rslock_rate)
            ),
            met: rate > rslock_rate,
        });
        targets.push(Target {
            scenario,
            goal: "longest wait < 50 ms",
            measured: dur(longest),
            met: longest < Duration::from_millis(50),
        });
        targets.push(Target {
            scenario,
            goal: "≤ 3 commands per acquisition",
            measured: format!(
                "{commands:.2} sent ({:.2} Redis calls incl. inside scripts)",
                ours.stats.all_calls() as f64 / ours.acquisitions.max(1) as f64
            ),
            met: commands <= 3.0,
        });
    }
    out
}

/// The read-write section, and its target.
pub fn rw(r: &mut Rw, targets: &mut Vec<Target>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} reader tasks take `read_lock` on one key over and over, the body a sleep of {:?}, \
         for {} per phase; in the second phase one more task (on its own client, as another \
         process would be) takes `write_lock` on the same key in the same loop. The baseline \
         (readers only) runs in the same run, right before. For context, the third phase runs \
         the same 16 tasks on the plain exclusive `lock`, which is what a service without a \
         read-write lock would use. A wait runs from calling acquire to holding the lock; the \
         writer's longest wait includes one still unfinished when the phase ended. \
         \"Overlapping holders\" counts a reader inside together with the writer (or, on \
         `lock`, any two holders together) and must be 0.\n",
        rw::READERS,
        rw::BODY,
        dur(r.duration),
    );
    let baseline = r.phase(Mode::ReadersOnly).reader_rate();
    let mut rows = Vec::new();
    for p in &mut r.phases {
        let has_writer = p.has_writer;
        let writer = |s: String| if has_writer { s } else { "–".to_owned() };
        let longest = p.writer_longest();
        rows.push(vec![
            p.name.to_owned(),
            format!("{:.0}", p.reader_rate()),
            small_ratio(p.reader_rate() / baseline),
            dur(p.reader_waits.p50()),
            dur(p.reader_waits.p99()),
            if p.exclusive {
                "–".to_owned()
            } else {
                p.max_readers_inside.to_string()
            },
            writer(format!("{:.1}", p.writer_rate())),
            writer(dur(p.writer_waits.p50())),
            writer(dur(p.writer_waits.p99())),
            writer(dur(longest)),
            format!("{:.2}", p.commands_per_acq()),
            p.violations.to_string(),
        ]);
    }
    table(
        &mut out,
        &[
            "one key, body 1 ms",
            "reader acq./s",
            "vs readers only",
            "reader wait p50",
            "reader wait p99",
            "most readers inside at once",
            "writer acq./s",
            "writer wait p50",
            "writer wait p99",
            "writer's longest wait",
            "commands sent / acq.",
            "overlapping holders",
        ],
        &rows,
    );
    let rw_phase = r.phase(Mode::ReadWrite);
    let longest = rw_phase.writer_longest();
    let writer_acqs = rw_phase.writer_acqs;
    let with_writer = rw_phase.reader_rate();
    let reader_p99 = rw_phase.reader_waits.p99();
    let exclusive = r.phase(Mode::Exclusive).reader_rate();
    let alone_p99 = r.phase(Mode::ReadersOnly).reader_waits.p99();
    let _ = writeln!(
        out,
        "With a writer in the loop, readers kept {} of their rate alone (reader wait p99 {} \
         against {} without the writer), and got through at {} the rate the same tasks reach \
         on the exclusive `lock`; the writer took the lock {:.1} times a second.\n",
        small_ratio(with_writer / baseline),
        dur(reader_p99),
        dur(alone_p99),
        small_ratio(with_writer / exclusive),
        r.phase(Mode::ReadWrite).writer_rate(),
    );
    targets.push(Target {
        scenario: "Read-write lock",
        goal: "writer not starved: max wait < 1 s",
        measured: format!(
            "{} ({writer_acqs} writer acquisitions; readers at {} of readers only)",
            dur(longest),
            small_ratio(with_writer / baseline)
        ),
        met: writer_acqs > 0 && longest < Duration::from_secs(1),
    });
    out
}

/// The handoff section.
pub fn handoff(h: &mut Handoff) -> String {
    let mut out = String::new();
    let rtt = us(h.rtt.p50());
    let _ = writeln!(
        out,
        "A holder releases while one waiter (its own client, as another process would have) \
         waits; measured from the start of the release call to the waiter's acquire returning, \
         {} times per contender. One PING round trip in the same run: p50 {}, p99 {}. \
         A release that wakes a waiter through pub/sub needs at least two round trips \
         (the release, then the waiter's acquire) plus the message's way to the waiter.\n",
        h.rows[0].samples.len(),
        dur(h.rtt.p50()),
        dur(h.rtt.p99())
    );
    let rows: Vec<Vec<String>> = h
        .rows
        .iter_mut()
        .map(|row| {
            vec![
                row.name.clone(),
                dur(row.samples.p50()),
                dur(row.samples.p99()),
                dur(row.samples.max()),
                format!("{:.1}", us(row.samples.p50()) / rtt),
                format!("{:.1}", us(row.samples.p99()) / rtt),
            ]
        })
        .collect();
    table(
        &mut out,
        &["handoff", "p50", "p99", "max", "p50 in RTTs", "p99 in RTTs"],
        &rows,
    );
    out
}

/// The renewal section, and its targets.
pub fn renewal(r: &Renewal, targets: &mut Vec<Target>) -> String {
    let mut out = String::new();
    let lease = r.rows.first().map_or(Duration::ZERO, |row| row.lease);
    let short = lease < Duration::from_secs(30);
    let _ = writeln!(
        out,
        "The client holds N locks (acquired {} at a time) with a {} lease{}: renewal falls due \
         every lease/3 = {}. Redis's `INFO commandstats` and the CPU times of both processes \
         are read around a window of {} while the locks are held. Each renewal call is one \
         script call (an `FCALL` of the runtime's library); each lock renewed in it is one \
         PEXPIRE inside it, so locks per call = PEXPIRE calls / script calls. Memory per lock: the difference between before \
         acquiring and right after, divided by N (heap: bytes allocated and not freed, counted \
         by the benchmark's allocator; RSS: `/proc/self/statm`, after `malloc_trim`).\n",
        renewal::IN_FLIGHT,
        dur(lease),
        if short {
            " (**shorter than 30 s to keep the run short**; with a 30 s lease the same calls \
             come less often, so the per-interval figures carry over and the per-second ones \
             scale down)"
        } else {
            ""
        },
        dur(lease / 3),
        r.rows.first().map_or("-".to_owned(), |row| dur(row.window)),
    );
    let mut headers = vec!["held locks".to_owned()];
    headers.extend(r.rows.iter().map(|row| format!("{}", row.locks)));
    let metric = |name: &str, f: &dyn Fn(&renewal::RenewalRow) -> String| {
        let mut v = vec![name.to_owned()];
        v.extend(r.rows.iter().map(f));
        v
    };
    let rows = vec![
        metric("renewal calls/s Redis sees", &|x| {
            format!("{:.2}", x.calls_per_sec())
        }),
        metric("renewal calls per renewal interval (lease/3)", &|x| {
            format!("{:.1}", x.calls_per_interval())
        }),
        metric("locks per renewal call", &|x| {
            format!("{:.0}", x.locks_per_call())
        }),
        metric("lock renewals in the window", &|x| {
            x.stats.calls("pexpire").to_string()
        }),
        metric("Redis time per renewal call", &|x| {
            let calls = x.stats.script_calls().max(1);
            dur(Duration::from_micros(x.stats.script_time_us() / calls))
        }),
        metric("Redis CPU (share of one core)", &|x| {
            format!(
                "{:.1} %",
                x.server_cpu.as_secs_f64() / x.window.as_secs_f64() * 100.0
            )
        }),
        metric("client CPU (share of one core)", &|x| {
            format!("{:.2} %", x.client_cpu_share() * 100.0)
        }),
        metric("client CPU per lock renewal", &|x| {
            format!("{:.2} µs", x.cpu_per_renewal_us())
        }),
        metric("client heap per held lock", &|x| bytes(x.heap_per_lock())),
        metric("client RSS per held lock", &|x| bytes(x.rss_per_lock())),
        metric("Redis memory per held lock", &|x| {
            bytes((x.server_memory.1 as f64 - x.server_memory.0 as f64) / x.locks as f64)
        }),
        metric("time to acquire all (rate)", &|x| {
            format!(
                "{} ({:.0}/s)",
                dur(x.acquire_time),
                x.locks as f64 / x.acquire_time.as_secs_f64()
            )
        }),
        metric("client CPU per acquisition", &|x| {
            format!(
                "{:.1} µs",
                x.acquire_cpu.as_secs_f64() * 1e6 / x.locks as f64
            )
        }),
        metric("time to release all", &|x| dur(x.release_time)),
        metric("locks lost while held (must be 0)", &|x| x.lost.to_string()),
        metric("locks still renewed at the end", &|x| {
            x.renewing.to_string()
        }),
    ];
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    table(&mut out, &headers, &rows);
    if !r.rows.is_empty() {
        let worst_call = r
            .rows
            .iter()
            .map(|x| x.locks_per_call())
            .fold(f64::INFINITY, f64::min);
        targets.push(Target {
            scenario: "Renewal",
            goal: "≥ 100 locks per renewal call",
            measured: r
                .rows
                .iter()
                .map(|x| format!("{:.0} ({} locks)", x.locks_per_call(), x.locks))
                .collect::<Vec<_>>()
                .join(", "),
            met: worst_call >= 100.0,
        });
        let worst_mem = r
            .rows
            .iter()
            .map(|x| x.rss_per_lock().max(x.heap_per_lock()))
            .fold(0.0, f64::max);
        targets.push(Target {
            scenario: "Renewal",
            goal: "< 1 KiB client memory per held lock",
            measured: r
                .rows
                .iter()
                .map(|x| {
                    format!(
                        "{} RSS, {} heap ({} locks)",
                        bytes(x.rss_per_lock()),
                        bytes(x.heap_per_lock()),
                        x.locks
                    )
                })
                .collect::<Vec<_>>()
                .join("; "),
            met: worst_mem < 1024.0,
        });
    }
    out
}

/// The attribute section.
pub fn attribute(a: &mut Attribute, targets: &mut Vec<Target>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Sequential calls on free keys, as in the uncontended scenario: {} rounds of a block \
         of 100 calls per way, in rotating order. The annotated function is \
         `#[distributed_lock(key = \"bench:a:<id>\", lease = \"30s\", wait = \"0s\", client = locks)] \
         async fn annotated(locks: &LockClient, id: u64) -> Result<(), LockError> {{ Ok(()) }}`; \
         \"by hand\" makes the same calls the attribute does (acquire, run the body in \
         `guard.scope(..)`, release).\n",
        a.rows[0].round_p50.len()
    );
    let by_hand_p50 = us(a.rows[1].samples.p50());
    let by_hand_rounds = a.rows[1].round_p50.clone();
    let mut rows = Vec::new();
    let mut annotated = 0.0;
    for (i, row) in a.rows.iter_mut().enumerate() {
        let p50 = us(row.samples.p50());
        let (lo, hi) = range(&segment_ratios(&row.round_p50, &by_hand_rounds, 5));
        if i == 0 {
            annotated = p50 / by_hand_p50;
        }
        rows.push(vec![
            row.name.to_owned(),
            dur(row.samples.p50()),
            dur(row.samples.p99()),
            ratio(p50 / by_hand_p50),
            format!("{}–{}", ratio(lo), ratio(hi)),
        ]);
    }
    table(
        &mut out,
        &[
            "call",
            "p50",
            "p99",
            "p50 vs by hand",
            "p50 ratio over time",
        ],
        &rows,
    );
    targets.push(Target {
        scenario: "Attribute",
        goal: "no cost over the same calls by hand (≤ 1.05×; our bar, the issue sets none)",
        measured: ratio(annotated),
        met: annotated <= 1.05,
    });
    out
}

/// The table of targets.
pub fn summary(targets: &[Target]) -> String {
    let mut out = String::new();
    let rows: Vec<Vec<String>> = targets
        .iter()
        .map(|t| {
            vec![
                t.scenario.to_owned(),
                t.goal.to_owned(),
                t.measured.clone(),
                verdict(t.met).to_owned(),
            ]
        })
        .collect();
    aligned_table(
        &mut out,
        &["scenario", "target", "this run", "verdict"],
        &rows,
        4,
    );
    out
}

/// The machine and versions.
pub fn machine(m: &Machine, command: &str, took: Duration) -> String {
    let mut out = String::new();
    aligned_table(
        &mut out,
        &["", ""],
        &[
            vec!["date (UTC)".into(), m.date.clone()],
            vec!["CPU".into(), format!("{} × {}", m.cpus, m.cpu_model)],
            vec!["memory".into(), m.memory.clone()],
            vec!["kernel".into(), m.kernel.clone()],
            vec!["rustc".into(), m.rustc.clone()],
            vec!["redis-server".into(), m.redis.clone()],
            vec!["code measured".into(), m.commit.clone()],
            vec!["command".into(), format!("`{command}`")],
            vec!["run time".into(), dur(took)],
            vec!["other load during the run".into(), m.other_load.clone()],
        ],
        2,
    );
    out
}
