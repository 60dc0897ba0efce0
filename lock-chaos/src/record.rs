//! What workers tell the orchestrator, as one compact text line each.
//!
//! Workers print these lines on stdout; the orchestrator reads them, tags
//! them with the worker's id and hands them to the checker. Every time is
//! [`clock::now_us`](crate::clock::now_us). A missing value is `-`.

use std::fmt;
use std::str::SplitWhitespace;

/// Why a holder was told its lock was lost (from `lock_runtime::LossReason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LossKind {
    /// A renewal found the lock gone or held by another owner.
    NotHeld,
    /// No renewal was confirmed before the validity deadline.
    Expired,
    /// Releasing found the lock already gone.
    AtRelease,
    /// Re-entering it from inside its critical section found it gone or
    /// held by another owner.
    AtReentry,
    /// A reason this suite does not know.
    Other,
}

impl LossKind {
    fn code(self) -> &'static str {
        match self {
            LossKind::NotHeld => "nh",
            LossKind::Expired => "ex",
            LossKind::AtRelease => "ar",
            LossKind::AtReentry => "re",
            LossKind::Other => "ot",
        }
    }

    fn from_code(code: &str) -> Option<LossKind> {
        Some(match code {
            "nh" => LossKind::NotHeld,
            "ex" => LossKind::Expired,
            "ar" => LossKind::AtRelease,
            "re" => LossKind::AtReentry,
            "ot" => LossKind::Other,
            _ => return None,
        })
    }

    /// A name for reports.
    pub fn name(self) -> &'static str {
        match self {
            LossKind::NotHeld => "renewal found it gone (NotHeld)",
            LossKind::Expired => "validity deadline passed (Expired)",
            LossKind::AtRelease => "gone at release (NotHeldAtRelease)",
            LossKind::AtReentry => "gone at a re-entry (NotHeldAtReentry)",
            LossKind::Other => "other",
        }
    }
}

/// What a holder may share its lock with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// Alone: a plain, fair or multi-key lock, or the write side of a
    /// read-write lock. Its writes are fenced.
    Exclusive,
    /// The read side of a read-write lock: with other readers, never with
    /// a writer. Its writes are logged, not fenced.
    Read,
    /// A semaphore permit: with up to N − 1 other permit holders. Its
    /// writes are logged, not fenced.
    Permit,
}

impl Role {
    /// Its one-letter code on a worker line.
    pub fn code(self) -> &'static str {
        match self {
            Role::Exclusive => "x",
            Role::Read => "r",
            Role::Permit => "p",
        }
    }

    /// Parses a code printed by [`Role::code`].
    pub fn from_code(code: &str) -> Option<Role> {
        Some(match code {
            "x" => Role::Exclusive,
            "r" => Role::Read,
            "p" => Role::Permit,
            _ => return None,
        })
    }
}

/// One critical section as its holder saw it, printed when the holder stops
/// (before it sends the release, so that a crash right after loses nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionLine {
    /// Task number within the worker.
    pub task: u32,
    /// Critical-section number within the task, from 1.
    pub seq: u64,
    /// Index of the lock name (`k<index>`). A multi-key section prints one
    /// line per key, each with that key's token.
    pub key: u32,
    /// What the holder may share the lock with.
    pub role: Role,
    /// The fencing token.
    pub token: u64,
    /// When `acquire()` was called.
    pub start: i64,
    /// When `acquire()` returned the guard.
    pub acquired: i64,
    /// When the holder stopped: it is about to send the release.
    pub release: i64,
    /// When the holder noticed `lost()`, if it did.
    pub told: Option<i64>,
    /// Why, if it was told.
    pub reason: Option<LossKind>,
    /// `guard.valid_until()` when it was told.
    pub valid_at_told: Option<i64>,
    /// `guard.valid_until()` when it stopped; unknown for a locked call
    /// (a `#[distributed_lock]` function's body sees no guard).
    pub valid_end: Option<i64>,
    /// For a locked call made inside another critical section of the same
    /// task: that section's number. A call on the same key re-enters it (the
    /// two are one holder); a call on another key is a holder of its own.
    pub parent: Option<u64>,
}

/// How an acquire ended without a guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FailKind {
    /// `LockError::Timeout`: the lock stayed held for the whole wait.
    Timeout,
    /// Redis unreachable or too slow (`is_unavailable()`).
    Unavailable,
    /// Any other error.
    Other,
}

impl FailKind {
    fn code(self) -> &'static str {
        match self {
            FailKind::Timeout => "to",
            FailKind::Unavailable => "un",
            FailKind::Other => "ot",
        }
    }

    fn from_code(code: &str) -> Option<FailKind> {
        Some(match code {
            "to" => FailKind::Timeout,
            "un" => FailKind::Unavailable,
            "ot" => FailKind::Other,
            _ => return None,
        })
    }
}

/// What a release returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReleaseOutcome {
    /// `Ok(())`.
    Ok,
    /// `LockError::Lost`.
    Lost,
    /// Any other error (Redis unreachable: the client sends the release
    /// again until Redis answers).
    Error,
}

impl ReleaseOutcome {
    fn code(self) -> &'static str {
        match self {
            ReleaseOutcome::Ok => "ok",
            ReleaseOutcome::Lost => "lost",
            ReleaseOutcome::Error => "err",
        }
    }

    fn from_code(code: &str) -> Option<ReleaseOutcome> {
        Some(match code {
            "ok" => ReleaseOutcome::Ok,
            "lost" => ReleaseOutcome::Lost,
            "err" => ReleaseOutcome::Error,
            _ => return None,
        })
    }
}

/// How an acquisition was cancelled while it waited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CancelHow {
    /// A `tokio::time::timeout` around `acquire()` ran out and dropped it.
    Timeout,
    /// The task running `acquire()` was aborted.
    Abort,
}

impl CancelHow {
    fn code(self) -> &'static str {
        match self {
            CancelHow::Timeout => "timeout",
            CancelHow::Abort => "abort",
        }
    }

    fn from_code(code: &str) -> Option<CancelHow> {
        Some(match code {
            "timeout" => CancelHow::Timeout,
            "abort" => CancelHow::Abort,
            _ => return None,
        })
    }

    /// A name for reports.
    pub fn name(self) -> &'static str {
        match self {
            CancelHow::Timeout => "dropped by a `tokio::time::timeout`",
            CancelHow::Abort => "its task aborted",
        }
    }
}

/// How a try-lock (`try_acquire()`, wait 0) made during a stall ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TryOutcome {
    /// It returned a guard.
    Acquired,
    /// It returned `None`: someone else held the lock.
    Busy,
    /// It returned an error (the command timed out on the stall).
    Failed,
    /// Its future was dropped by a `tokio::time::timeout` before it returned.
    Dropped,
}

impl TryOutcome {
    fn code(self) -> &'static str {
        match self {
            TryOutcome::Acquired => "acq",
            TryOutcome::Busy => "busy",
            TryOutcome::Failed => "err",
            TryOutcome::Dropped => "drop",
        }
    }

    fn from_code(code: &str) -> Option<TryOutcome> {
        Some(match code {
            "acq" => TryOutcome::Acquired,
            "busy" => TryOutcome::Busy,
            "err" => TryOutcome::Failed,
            "drop" => TryOutcome::Dropped,
            _ => return None,
        })
    }

    /// Whether the try-lock gave up without knowing what the server did
    /// with it: the lock may have been taken for nobody.
    pub fn gave_up(self) -> bool {
        matches!(self, TryOutcome::Failed | TryOutcome::Dropped)
    }
}

/// A call the worker's watchdog gave up on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Call {
    /// `acquire()`.
    Acquire,
    /// `release()`.
    Release,
}

/// One line from a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerLine {
    /// `I <uuid>`: the worker is connected; its lock owner ids start with this uuid.
    Hello {
        /// The `LockClient::id()`.
        client: String,
    },
    /// `C ...`: a critical section.
    Section(SectionLine),
    /// `D <task> <seq> <ok|lost|err>`: what its release returned.
    Released {
        /// Task number.
        task: u32,
        /// Section number.
        seq: u64,
        /// The outcome.
        outcome: ReleaseOutcome,
    },
    /// `F <task> <key> <kind> <start> <end>`: an acquire that returned an error.
    Failed {
        /// Task number.
        task: u32,
        /// Key index.
        key: u32,
        /// What kind of error.
        kind: FailKind,
        /// When it was called.
        start: i64,
        /// When it returned.
        end: i64,
    },
    /// `H <task> <key> <acquire|release> <start> <limit_ms>`: a call that did
    /// not return within its limit (its wait plus slack) and was abandoned.
    Hung {
        /// Task number.
        task: u32,
        /// Key index.
        key: u32,
        /// Which call.
        call: Call,
        /// When it was called.
        start: i64,
        /// The limit it exceeded, in milliseconds.
        limit_ms: u64,
    },
    /// `S <start> <end>`: the worker blocked its runtime (a stall fault).
    Stalled {
        /// When the blocking sleep began.
        start: i64,
        /// When it ended.
        end: i64,
    },
    /// `P <task> <key> <token>`: a task is parked inside a critical section,
    /// ready to be killed.
    Parked {
        /// Task number.
        task: u32,
        /// Key index.
        key: u32,
        /// The fencing token it holds.
        token: u64,
    },
    /// `X <task> <key> <timeout|abort> <start> <end>`: an acquisition
    /// cancelled while it waited (its future dropped).
    Cancelled {
        /// Task number.
        task: u32,
        /// Key index.
        key: u32,
        /// How it was cancelled.
        how: CancelHow,
        /// When it was called.
        start: i64,
        /// When it was cancelled.
        end: i64,
    },
    /// `Q <task> <seq> <key> <token>`: a critical section waits, as ordered,
    /// for its lock to be removed from Redis, then re-enters it (a nested
    /// acquisition in its scope).
    Reentering {
        /// Task number.
        task: u32,
        /// Section number.
        seq: u64,
        /// Key index.
        key: u32,
        /// The fencing token it holds.
        token: u64,
    },
    /// `L <task> <seq> <key>`: a holder is about to release, as ordered,
    /// under a short timeout; it waits for the orchestrator's `GO` (up to
    /// two seconds) so that the release meets the stall.
    Releasing {
        /// Task number.
        task: u32,
        /// Section number.
        seq: u64,
        /// Key index.
        key: u32,
    },
    /// `R <task> <seq> <key> <at> <ok|lost|err|cut>`: a release run under a
    /// short `tokio::time::timeout`, as ordered; `cut`: the future was
    /// dropped before it returned (at `at`).
    ReleaseCut {
        /// Task number.
        task: u32,
        /// Section number.
        seq: u64,
        /// Key index.
        key: u32,
        /// When it returned or was dropped.
        at: i64,
        /// What it returned; `None` if it was dropped.
        outcome: Option<ReleaseOutcome>,
    },
    /// `T <key> <at> <acq|busy|err|drop>`: a try-lock made during a stall, as
    /// ordered, and how it ended (at `at`).
    TryLock {
        /// Key index.
        key: u32,
        /// When it ended.
        at: i64,
        /// How.
        outcome: TryOutcome,
    },
    /// `E <held>`: the worker's tasks have stopped; `LockClient::held()`
    /// then (locks its watchdog still renews: 0 unless a guard leaked).
    Exit {
        /// Locks still held by the client.
        held: u64,
    },
}

struct Opt<T>(Option<T>);

impl<T: fmt::Display> fmt::Display for Opt<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(v) => v.fmt(f),
            None => f.write_str("-"),
        }
    }
}

impl fmt::Display for WorkerLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkerLine::Hello { client } => write!(f, "I {client}"),
            WorkerLine::Section(s) => write!(
                f,
                "C {} {} {} {} {} {} {} {} {} {} {} {} {}",
                s.task,
                s.seq,
                s.key,
                s.role.code(),
                s.token,
                s.start,
                s.acquired,
                s.release,
                Opt(s.told),
                Opt(s.reason.map(LossKind::code)),
                Opt(s.valid_at_told),
                Opt(s.valid_end),
                Opt(s.parent)
            ),
            WorkerLine::Released { task, seq, outcome } => {
                write!(f, "D {task} {seq} {}", outcome.code())
            }
            WorkerLine::Failed {
                task,
                key,
                kind,
                start,
                end,
            } => write!(f, "F {task} {key} {} {start} {end}", kind.code()),
            WorkerLine::Hung {
                task,
                key,
                call,
                start,
                limit_ms,
            } => {
                let call = match call {
                    Call::Acquire => "acquire",
                    Call::Release => "release",
                };
                write!(f, "H {task} {key} {call} {start} {limit_ms}")
            }
            WorkerLine::Stalled { start, end } => write!(f, "S {start} {end}"),
            WorkerLine::Parked { task, key, token } => write!(f, "P {task} {key} {token}"),
            WorkerLine::Cancelled {
                task,
                key,
                how,
                start,
                end,
            } => write!(f, "X {task} {key} {} {start} {end}", how.code()),
            WorkerLine::Reentering {
                task,
                seq,
                key,
                token,
            } => write!(f, "Q {task} {seq} {key} {token}"),
            WorkerLine::Releasing { task, seq, key } => write!(f, "L {task} {seq} {key}"),
            WorkerLine::ReleaseCut {
                task,
                seq,
                key,
                at,
                outcome,
            } => {
                let outcome = match outcome {
                    Some(outcome) => outcome.code(),
                    None => "cut",
                };
                write!(f, "R {task} {seq} {key} {at} {outcome}")
            }
            WorkerLine::TryLock { key, at, outcome } => {
                write!(f, "T {key} {at} {}", outcome.code())
            }
            WorkerLine::Exit { held } => write!(f, "E {held}"),
        }
    }
}

struct Fields<'a>(SplitWhitespace<'a>);

impl Fields<'_> {
    fn next<T: std::str::FromStr>(&mut self) -> Option<T> {
        self.0.next()?.parse().ok()
    }

    fn opt<T: std::str::FromStr>(&mut self) -> Option<Option<T>> {
        match self.0.next()? {
            "-" => Some(None),
            v => v.parse().ok().map(Some),
        }
    }

    fn word(&mut self) -> Option<&str> {
        self.0.next()
    }

    fn done(&mut self) -> Option<()> {
        self.0.next().is_none().then_some(())
    }
}

impl WorkerLine {
    /// Parses a line printed by a worker; `None` for anything else.
    pub fn parse(line: &str) -> Option<WorkerLine> {
        let mut f = Fields(line.split_whitespace());
        let line = match f.word()? {
            "I" => WorkerLine::Hello {
                client: f.word()?.to_owned(),
            },
            "C" => WorkerLine::Section(SectionLine {
                task: f.next()?,
                seq: f.next()?,
                key: f.next()?,
                role: Role::from_code(f.word()?)?,
                token: f.next()?,
                start: f.next()?,
                acquired: f.next()?,
                release: f.next()?,
                told: f.opt()?,
                reason: match f.word()? {
                    "-" => None,
                    code => Some(LossKind::from_code(code)?),
                },
                valid_at_told: f.opt()?,
                valid_end: f.opt()?,
                parent: f.opt()?,
            }),
            "D" => WorkerLine::Released {
                task: f.next()?,
                seq: f.next()?,
                outcome: ReleaseOutcome::from_code(f.word()?)?,
            },
            "Q" => WorkerLine::Reentering {
                task: f.next()?,
                seq: f.next()?,
                key: f.next()?,
                token: f.next()?,
            },
            "L" => WorkerLine::Releasing {
                task: f.next()?,
                seq: f.next()?,
                key: f.next()?,
            },
            "R" => WorkerLine::ReleaseCut {
                task: f.next()?,
                seq: f.next()?,
                key: f.next()?,
                at: f.next()?,
                outcome: match f.word()? {
                    "cut" => None,
                    code => Some(ReleaseOutcome::from_code(code)?),
                },
            },
            "T" => WorkerLine::TryLock {
                key: f.next()?,
                at: f.next()?,
                outcome: TryOutcome::from_code(f.word()?)?,
            },
            "F" => WorkerLine::Failed {
                task: f.next()?,
                key: f.next()?,
                kind: FailKind::from_code(f.word()?)?,
                start: f.next()?,
                end: f.next()?,
            },
            "H" => WorkerLine::Hung {
                task: f.next()?,
                key: f.next()?,
                call: match f.word()? {
                    "acquire" => Call::Acquire,
                    "release" => Call::Release,
                    _ => return None,
                },
                start: f.next()?,
                limit_ms: f.next()?,
            },
            "S" => WorkerLine::Stalled {
                start: f.next()?,
                end: f.next()?,
            },
            "P" => WorkerLine::Parked {
                task: f.next()?,
                key: f.next()?,
                token: f.next()?,
            },
            "X" => WorkerLine::Cancelled {
                task: f.next()?,
                key: f.next()?,
                how: CancelHow::from_code(f.word()?)?,
                start: f.next()?,
                end: f.next()?,
            },
            "E" => WorkerLine::Exit { held: f.next()? },
            _ => return None,
        };
        f.done()?;
        Some(line)
    }
}

/// A write to the fenced resource: `W <worker> <task> <seq> <key> <role>
/// <token> <B|E> <acquired>`; the answer is `OK` or `NO <highest token>`.
/// Only writes of exclusive holders are fenced; the others are logged and
/// always accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteRequest {
    /// Worker id.
    pub worker: u32,
    /// Task number.
    pub task: u32,
    /// Section number.
    pub seq: u64,
    /// Key index.
    pub key: u32,
    /// What the writer may share its lock with.
    pub role: Role,
    /// The writer's fencing token.
    pub token: u64,
    /// `true` for the begin marker, `false` for the end marker.
    pub begin: bool,
    /// When the writer's `acquire()` returned.
    pub acquired: i64,
}

impl fmt::Display for WriteRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "W {} {} {} {} {} {} {} {}",
            self.worker,
            self.task,
            self.seq,
            self.key,
            self.role.code(),
            self.token,
            if self.begin { "B" } else { "E" },
            self.acquired
        )
    }
}

impl WriteRequest {
    /// Parses a write request line.
    pub fn parse(line: &str) -> Option<WriteRequest> {
        let mut f = Fields(line.split_whitespace());
        (f.word()? == "W").then_some(())?;
        let request = WriteRequest {
            worker: f.next()?,
            task: f.next()?,
            seq: f.next()?,
            key: f.next()?,
            role: Role::from_code(f.word()?)?,
            token: f.next()?,
            begin: match f.word()? {
                "B" => true,
                "E" => false,
                _ => return None,
            },
            acquired: f.next()?,
        };
        f.done()?;
        Some(request)
    }
}
