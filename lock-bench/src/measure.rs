//! Measuring instruments: percentiles, process CPU and memory, a heap
//! counter, and Redis's own command statistics.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// Latency samples in nanoseconds, summarised by percentiles.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    sorted: bool,
    ns: Vec<u64>,
}

impl Samples {
    /// An empty set with room for `n` samples.
    pub fn with_capacity(n: usize) -> Self {
        Samples {
            sorted: true,
            ns: Vec::with_capacity(n),
        }
    }

    /// Records one duration.
    pub fn push(&mut self, d: Duration) {
        self.ns
            .push(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        self.sorted = false;
    }

    /// Adds every sample of `other`.
    pub fn extend(&mut self, other: &Samples) {
        self.ns.extend_from_slice(&other.ns);
        self.sorted = false;
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.ns.len()
    }

    fn sort(&mut self) {
        if !self.sorted {
            self.ns.sort_unstable();
            self.sorted = true;
        }
    }

    /// The `q`-quantile (0.0–1.0) by the nearest-rank method.
    pub fn quantile(&mut self, q: f64) -> Duration {
        self.sort();
        if self.ns.is_empty() {
            return Duration::ZERO;
        }
        let rank = (q * self.ns.len() as f64).ceil() as usize;
        let index = rank.clamp(1, self.ns.len()) - 1;
        Duration::from_nanos(self.ns[index])
    }

    /// The median.
    pub fn p50(&mut self) -> Duration {
        self.quantile(0.50)
    }

    /// The 99th percentile.
    pub fn p99(&mut self) -> Duration {
        self.quantile(0.99)
    }

    /// The largest sample.
    pub fn max(&mut self) -> Duration {
        self.quantile(1.0)
    }

    /// The percentile curve from p1 to p99 in steps of one, then p99.9,
    /// in microseconds, for charts.
    pub fn curve(&mut self) -> Vec<(f64, f64)> {
        let mut points: Vec<(f64, f64)> = (1..=99)
            .map(|p| (f64::from(p), us(self.quantile(f64::from(p) / 100.0))))
            .collect();
        points.push((99.9, us(self.quantile(0.999))));
        points
    }
}

/// A duration in microseconds.
pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The median of a few values (e.g. one per round).
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// `a / b` over `parts` consecutive segments of two equally long series of
/// per-block medians: the median of each segment's `a` over that of its `b`.
/// Shows whether a ratio holds over the whole run or drifts.
pub fn segment_ratios(a: &[f64], b: &[f64], parts: usize) -> Vec<f64> {
    let n = a.len().min(b.len());
    let parts = parts.clamp(1, n.max(1));
    (0..parts)
        .filter_map(|k| {
            let (lo, hi) = (k * n / parts, (k + 1) * n / parts);
            (hi > lo).then(|| median(&a[lo..hi]) / median(&b[lo..hi]))
        })
        .collect()
}

/// Smallest and largest of a few values.
pub fn range(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        })
}

// ---------------------------------------------------------------------------
// The heap counter
// ---------------------------------------------------------------------------

/// The system allocator, counting the bytes currently allocated.
///
/// One relaxed atomic add per allocation and per free: a few nanoseconds,
/// next to round trips of tens of microseconds.
pub struct CountingAlloc;

static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);

// SAFETY: every call is forwarded unchanged to `System`; only a counter is added.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            LIVE_BYTES.fetch_add(layout.size() as i64, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            LIVE_BYTES.fetch_add(layout.size() as i64, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        LIVE_BYTES.fetch_sub(layout.size() as i64, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            LIVE_BYTES.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        }
        new
    }
}

/// Bytes the process has allocated on the heap and not yet freed.
pub fn live_heap() -> i64 {
    LIVE_BYTES.load(Ordering::Relaxed)
}

// ---------------------------------------------------------------------------
// Process CPU and memory
// ---------------------------------------------------------------------------

/// CPU time (user + system) used by this process so far, all threads.
pub fn process_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

// In glibc (and musl), not declared by the `libc` crate for Linux.
unsafe extern "C" {
    fn clock_getcpuclockid(pid: libc::pid_t, clock_id: *mut libc::clockid_t) -> libc::c_int;
}

/// CPU time (user + system, all threads) used so far by another process,
/// to the nanosecond: its process CPU-time clock (`clock_getcpuclockid`,
/// which Linux lets any process read). Not that of its children (a
/// redis-server's snapshot child). Falls back to `/proc/PID/stat`'s clock
/// ticks (usually 10 ms, too coarse for a block of a few milliseconds)
/// where the clock cannot be read.
pub fn process_cpu_of(pid: u32) -> Duration {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return Duration::ZERO;
    };
    let mut clock: libc::clockid_t = 0;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock` and `ts` are valid and writable; both functions only
    // write through the pointers they are given.
    let rc = unsafe {
        let rc = clock_getcpuclockid(pid, &mut clock);
        if rc == 0 {
            libc::clock_gettime(clock, &mut ts)
        } else {
            rc
        }
    };
    if rc != 0 {
        return stat_cpu(pid as u32, false);
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// CPU time (user + system) used so far by another process and the
/// children it has waited for (a redis-server's snapshot children), from
/// `/proc/PID/stat` (clock-tick resolution, usually 10 ms): for totals over
/// a whole run.
pub fn other_process_cpu(pid: u32) -> Duration {
    stat_cpu(pid, true)
}

/// utime + stime (and cutime + cstime when `children`) of `/proc/PID/stat`.
fn stat_cpu(pid: u32, children: bool) -> Duration {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Duration::ZERO;
    };
    // The command name may contain spaces; fields are counted after its `)`.
    let Some(rest) = stat.rsplit_once(')').map(|(_, rest)| rest) else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime, stime, cutime and cstime are fields 14 to 17 of the whole
    // line, 12 to 15 here.
    let fields_wanted: &[usize] = if children {
        &[11, 12, 13, 14]
    } else {
        &[11, 12]
    };
    let ticks: u64 = fields_wanted
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as u64 } else { 100 };
    Duration::from_nanos(ticks * 1_000_000_000 / hz)
}

/// Resident set size of this process in bytes, from `/proc/self/statm`.
pub fn rss() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * if page > 0 { page as u64 } else { 4096 }
}

/// Gives freed memory back to the system where the allocator can (glibc),
/// so that a resident-size reading is not inflated by earlier work.
pub fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

// ---------------------------------------------------------------------------
// Redis command statistics
// ---------------------------------------------------------------------------

/// Calls and server time per command, from `INFO commandstats`.
#[derive(Debug, Clone, Default)]
pub struct CommandStats {
    /// Command name (`evalsha`, `client|setinfo`) to (calls, microseconds).
    pub by_command: BTreeMap<String, (u64, u64)>,
    /// `SET` ran only inside scripts: the runtime's readings (its scripts
    /// write fencing counters and markers with `SET`, and its client never
    /// sends one), not the hand-written lock's, whose `SET NX` is sent.
    pub set_in_scripts: bool,
}

/// Commands that the clients in this benchmark never send themselves: they
/// only run inside Lua scripts (the runtime's, the hand-written
/// compare-and-delete, rslock's unlock). Redis counts calls made from a
/// script in `INFO commandstats` like any other, so they are told apart by
/// name.
const ONLY_IN_SCRIPTS: &[&str] = &[
    "hget",
    "hmget",
    "hset",
    "hdel",
    "hincrby",
    "incr",
    "pexpire",
    "pttl",
    "del",
    "publish",
    "type",
    "get",
    "time",
    "lastsave",
    "info",
    "exists",
    "zadd",
    "zrem",
    "zscore",
    "zcard",
    "zcount",
    "zrange",
    "zrangebyscore",
    "zremrangebyscore",
];

impl CommandStats {
    /// Parses the text of `INFO commandstats`.
    pub fn parse(info: &str) -> CommandStats {
        let mut by_command = BTreeMap::new();
        for line in info.lines() {
            let Some((name, fields)) = line
                .strip_prefix("cmdstat_")
                .and_then(|rest| rest.split_once(':'))
            else {
                continue;
            };
            let field = |key: &str| {
                fields
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            by_command.insert(name.to_owned(), (field("calls"), field("usec")));
        }
        CommandStats {
            by_command,
            set_in_scripts: false,
        }
    }

    /// What happened between `self` (before) and `after`, without the
    /// `INFO` calls that took the readings.
    pub fn delta(&self, after: &CommandStats) -> CommandStats {
        let by_command = after
            .by_command
            .iter()
            .filter(|(name, _)| name.as_str() != "info")
            .filter_map(|(name, &(calls, usec))| {
                let (c0, u0) = self.by_command.get(name).copied().unwrap_or((0, 0));
                let calls = calls.saturating_sub(c0);
                (calls > 0).then(|| (name.clone(), (calls, usec.saturating_sub(u0))))
            })
            .collect();
        CommandStats {
            by_command,
            set_in_scripts: self.set_in_scripts || after.set_in_scripts,
        }
    }

    /// The same readings, taken of the runtime's client alone when
    /// `runtime`: its `SET` calls ran inside its scripts.
    pub fn of_runtime(mut self, runtime: bool) -> CommandStats {
        self.set_in_scripts |= runtime;
        self
    }

    /// Whether calls of `name` ran inside scripts.
    fn inner(&self, name: &str) -> bool {
        ONLY_IN_SCRIPTS.contains(&name) || (self.set_in_scripts && name == "set")
    }

    /// Calls of one command.
    pub fn calls(&self, name: &str) -> u64 {
        self.by_command.get(name).map_or(0, |&(calls, _)| calls)
    }

    /// Script calls: `EVALSHA`s, and `FCALL`s of a library's functions (the
    /// runtime runs its scripts as functions where the server has them).
    pub fn script_calls(&self) -> u64 {
        self.calls("evalsha") + self.calls("fcall")
    }

    /// Microseconds Redis spent in script calls (see [`script_calls`]).
    ///
    /// [`script_calls`]: CommandStats::script_calls
    pub fn script_time_us(&self) -> u64 {
        ["evalsha", "fcall"]
            .iter()
            .map(|name| self.by_command.get(*name).map_or(0, |&(_, us)| us))
            .sum()
    }

    /// Every call Redis executed, including those made inside scripts.
    pub fn all_calls(&self) -> u64 {
        self.by_command.values().map(|&(calls, _)| calls).sum()
    }

    /// Commands sent by clients (one round trip each, or part of one when
    /// pipelined): everything but the calls made inside scripts.
    pub fn client_calls(&self) -> u64 {
        self.by_command
            .iter()
            .filter(|(name, _)| !self.inner(name))
            .map(|(_, &(calls, _))| calls)
            .sum()
    }

    /// Server time spent in commands sent by clients (a script's time
    /// includes the commands it calls), in microseconds.
    pub fn client_usec(&self) -> u64 {
        self.by_command
            .iter()
            .filter(|(name, _)| !self.inner(name))
            .map(|(_, &(_, usec))| usec)
            .sum()
    }

    /// Adds `other` to `self`.
    pub fn add(&mut self, other: &CommandStats) {
        self.set_in_scripts |= other.set_in_scripts;
        for (name, &(calls, usec)) in &other.by_command {
            let entry = self.by_command.entry(name.clone()).or_default();
            entry.0 += calls;
            entry.1 += usec;
        }
    }

    /// `name×calls` per operation, for the report: `evalsha 2.00, subscribe 0.01`.
    pub fn breakdown(&self, per: u64) -> String {
        let per = per.max(1) as f64;
        let mut parts: Vec<(u64, String)> = self
            .by_command
            .iter()
            .map(|(name, &(calls, _))| {
                let inner = self.inner(name);
                let label = if inner {
                    format!("{name}* {:.2}", calls as f64 / per)
                } else {
                    format!("{name} {:.2}", calls as f64 / per)
                };
                (calls, label)
            })
            .collect();
        parts.sort_by_key(|part| std::cmp::Reverse(part.0));
        parts
            .into_iter()
            .map(|(_, label)| label)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// CPU time all processes on the machine have used (user, nice, system,
/// irq, softirq, steal), from the first line of `/proc/stat`.
pub fn machine_busy() -> Duration {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: u64 = stat
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("cpu "))
        .map(|fields| {
            fields
                .split_whitespace()
                .enumerate()
                .filter(|(i, _)| matches!(i, 0 | 1 | 2 | 5 | 6 | 7))
                .filter_map(|(_, v)| v.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as u64 } else { 100 };
    Duration::from_nanos(ticks * 1_000_000_000 / hz)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_use_the_nearest_rank() {
        let mut s = Samples::default();
        for ns in 1..=100 {
            s.push(Duration::from_nanos(ns));
        }
        assert_eq!(s.p50(), Duration::from_nanos(50));
        assert_eq!(s.p99(), Duration::from_nanos(99));
        assert_eq!(s.max(), Duration::from_nanos(100));
        assert_eq!(s.quantile(0.0), Duration::from_nanos(1));
    }

    #[test]
    fn another_process_cpu_clock_reads_to_the_nanosecond() {
        let pid = std::process::id();
        let mut x = 0u64;
        for i in 0..1_000_000u64 {
            x = std::hint::black_box(x.wrapping_add(i));
        }
        // The same clock as this process's own, read through its pid: in
        // order, close together, and not in whole clock ticks (10 ms).
        let a = process_cpu_of(pid);
        let b = process_cpu();
        let c = process_cpu_of(pid);
        assert!(a <= b && b <= c, "{a:?} {b:?} {c:?}");
        assert!(c - a < Duration::from_millis(1), "{a:?} {c:?}");
        assert_ne!(a.subsec_nanos() % 10_000_000, 0, "{a:?}");
    }

    #[test]
    fn medians_of_even_and_odd_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn command_stats_tell_client_commands_from_script_calls() {
        let before = CommandStats::parse(
            "# Commandstats\r\ncmdstat_evalsha:calls=10,usec=100,usec_per_call=10.00\r\n\
             cmdstat_info:calls=1,usec=5,usec_per_call=5.00\r\n",
        );
        let after = CommandStats::parse(
            "cmdstat_evalsha:calls=14,usec=150,usec_per_call=10.00\r\n\
             cmdstat_hget:calls=4,usec=4,usec_per_call=1.00\r\n\
             cmdstat_set:calls=3,usec=9,usec_per_call=3.00\r\n\
             cmdstat_time:calls=1,usec=1,usec_per_call=1.00\r\n\
             cmdstat_info:calls=3,usec=15,usec_per_call=5.00\r\n",
        );
        let d = before.delta(&after);
        assert_eq!(d.calls("evalsha"), 4);
        assert_eq!(d.calls("info"), 0);
        assert_eq!(d.all_calls(), 4 + 4 + 3 + 1);
        // Another client's SETs (the hand-written lock's SET NX) were sent.
        assert_eq!(d.client_calls(), 4 + 3);
        assert_eq!(d.client_usec(), 50 + 9);
        assert_eq!(
            d.breakdown(1),
            "evalsha 4.00, hget* 4.00, set 3.00, time* 1.00"
        );
        // The runtime's SETs ran inside its scripts, however many a script
        // call made (a batch of acquisitions reads the clock once).
        let ours = d.of_runtime(true);
        assert_eq!(ours.client_calls(), 4);
        assert_eq!(ours.client_usec(), 50);
        assert_eq!(
            ours.breakdown(1),
            "evalsha 4.00, hget* 4.00, set* 3.00, time* 1.00"
        );
        let mut total = CommandStats::default();
        total.add(&ours);
        assert_eq!(total.client_calls(), 4);
    }
}
