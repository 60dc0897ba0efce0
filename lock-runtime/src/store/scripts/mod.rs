//! The Lua scripts, and calls to them as values.
//!
//! Every script is a function of one library ([`Library`], composed with
//! `library.lua`), which a server with Redis Functions (7.0 and later,
//! Valkey) loads once and runs by FCALL: its helpers are made once, when it
//! is loaded, not at every call, and what the scripts learn of the server
//! (when it started, for the restart check) is kept between calls. A server
//! without functions, or that refuses them, runs each script by EVALSHA,
//! hashed once per process ([`redis::Script`] in a static). A server that
//! lost the library or a script (a restart, a flush) says so, and the node
//! loads it and sends the call again; a call whose library cannot be loaded
//! (a server out of memory) runs by EVALSHA (see `node::run_script`).
//!
//! A [`Call`] is one script with its keys and arguments: built by one
//! function per script in [`calls`], cloned freely (a Redlock acquisition
//! sends the same call to every master), and run on any
//! [`Node`](crate::store::node::Node). The scripts' KEYS and ARGV layouts
//! are written down once, there and in each script's header.

pub(crate) mod calls;
mod items;
mod replies;

use std::sync::{Arc, LazyLock, OnceLock};
use std::time::Duration;

#[cfg(test)]
use redis::ScriptInvocation;
use redis::{Cmd, Script};

use crate::base::keys::LockKeys;
use crate::base::kind::Kind;

use items::Items;
pub(crate) use replies::{Acquired, HandedOn, Released, Taken, acquired, released, unexpected};

/// One script in its four forms: release messages sent with PUBLISH, or
/// with SPUBLISH (sharded pub/sub, for a Cluster); run alone, or several
/// calls of it as one (`batch.lua`, see [`crate::store::coalesce`]). Each
/// form is also a function of the [`Library`], which servers that have
/// Redis Functions run instead (see [`Form`]).
pub(crate) struct ScriptPair {
    /// The script's file name, for messages.
    pub(crate) name: &'static str,
    plain: Script,
    sharded: Script,
    plain_batch: Script,
    sharded_batch: Script,
    /// Its body as the library holds it: `run` (and what `run` calls),
    /// a function of KEYS and ARGV.
    body: &'static str,
    /// Its Redis function flags, as a Lua table (see `library.lua`).
    flags: &'static str,
    /// Its functions' names in the plain and sharded libraries, alone and
    /// batched, made at first use (they name the library, which is made
    /// of every script).
    functions: OnceLock<[String; 4]>,
}

impl ScriptPair {
    pub(crate) fn get(&self, sharded: bool) -> &Script {
        if sharded { &self.sharded } else { &self.plain }
    }

    /// The form that runs several calls at once (see `batch.lua`).
    pub(crate) fn batch(&self, sharded: bool) -> &Script {
        if sharded {
            &self.sharded_batch
        } else {
            &self.plain_batch
        }
    }

    /// The script's stem, which names its functions: `acquire`.
    fn stem(&self) -> &'static str {
        self.name.trim_end_matches(".lua")
    }

    /// The name of its function in the library for `sharded`, the one that
    /// runs several calls at once when `batch`.
    fn function(&self, sharded: bool, batch: bool) -> &str {
        let names = self.functions.get_or_init(|| {
            let (plain, sharded) = (&Library::get(false).name, &Library::get(true).name);
            let stem = self.stem();
            [
                format!("{plain}_{stem}"),
                format!("{plain}_{stem}_batch"),
                format!("{sharded}_{stem}"),
                format!("{sharded}_{stem}_batch"),
            ]
        });
        &names[2 * usize::from(sharded) + usize::from(batch)]
    }
}

impl std::fmt::Debug for ScriptPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// A script's body: the scripts it runs as functions of their KEYS and
/// ARGV (the handoff runs the release), then its own body as `run`, a
/// function of KEYS and ARGV (so that `batch.lua` can run it once per call
/// of a batch).
macro_rules! script_body {
    ($file:literal, [$($func:literal = $body:literal),*]) => {
        concat!(
            $("local function ", $func, "(KEYS, ARGV)\n", include_str!($body), "\nend\n",)*
            "local function run(KEYS, ARGV)\n",
            include_str!($file),
            "\nend\n",
        )
    };
}

/// A script with the shared helpers of `prelude.lua` in front of it, then
/// the helper files it names (`fence.lua`, `places.lua`, `line.lua`: only
/// those it uses, as Redis makes each helper's closure anew at every call),
/// then its body (see `script_body!`), and what runs it after.
macro_rules! script_text {
    ($publish:literal, $file:literal, [$($part:literal),*], [$($func:literal = $body:literal),*], $run:expr) => {
        concat!(
            "local PUBLISH = '",
            $publish,
            "'\n",
            include_str!("prelude.lua"),
            $(include_str!($part),)*
            script_body!($file, [$($func = $body),*]),
            $run
        )
    };
}

/// A script in its four forms (see [`ScriptPair`]), with its Redis function
/// flags after `@` (a Lua table), the helper files it uses besides
/// `prelude.lua`, and after `;` the scripts it runs as functions
/// (`name = "file.lua"`).
macro_rules! script {
    ($file:literal @ $flags:expr $(, $part:literal)* $(; $($func:literal = $body:literal),*)?) => {
        LazyLock::new(|| ScriptPair {
            name: $file,
            plain: Script::new(script_text!(
                "PUBLISH",
                $file,
                [$($part),*],
                [$($($func = $body),*)?],
                "return run(KEYS, ARGV)\n"
            )),
            sharded: Script::new(script_text!(
                "SPUBLISH",
                $file,
                [$($part),*],
                [$($($func = $body),*)?],
                "return run(KEYS, ARGV)\n"
            )),
            plain_batch: Script::new(script_text!(
                "PUBLISH",
                $file,
                [$($part),*],
                [$($($func = $body),*)?],
                include_str!("batch.lua")
            )),
            sharded_batch: Script::new(script_text!(
                "SPUBLISH",
                $file,
                [$($part),*],
                [$($($func = $body),*)?],
                include_str!("batch.lua")
            )),
            body: script_body!($file, [$($($func = $body),*)?]),
            flags: $flags,
            functions: OnceLock::new(),
        })
    };
}

/// Gives back or keeps what is held: runs on a server out of memory too.
const KEEPS: &str = "{'allow-oom'}";
/// Grants: refused by a server out of memory.
const GRANTS: &str = "{}";

static ACQUIRE: LazyLock<ScriptPair> =
    script!("acquire.lua" @ GRANTS, "fence.lua", "places.lua", "line.lua");
static RELEASE: LazyLock<ScriptPair> = script!("release.lua" @ KEEPS, "line.lua");
static HANDOFF: LazyLock<ScriptPair> =
    script!("handoff.lua" @ KEEPS, "fence.lua", "line.lua"; "give_back" = "release.lua");
static RENEW: LazyLock<ScriptPair> = script!("renew.lua" @ KEEPS);
static PERMIT_ACQUIRE: LazyLock<ScriptPair> = script!("permit_acquire.lua" @ GRANTS, "fence.lua");
static READ_ACQUIRE: LazyLock<ScriptPair> =
    script!("read_acquire.lua" @ GRANTS, "fence.lua", "places.lua");
static PLACE_RELEASE: LazyLock<ScriptPair> = script!("place_release.lua" @ KEEPS, "line.lua");
static FAIR_ACQUIRE: LazyLock<ScriptPair> =
    script!("fair_acquire.lua" @ GRANTS, "fence.lua", "line.lua");
static FAIR_LEAVE: LazyLock<ScriptPair> = script!("fair_leave.lua" @ KEEPS, "line.lua");
static FENCE_RAISE: LazyLock<ScriptPair> = script!("fence_raise.lua" @ GRANTS);
static TURN_LEAVE: LazyLock<ScriptPair> = script!("turn_leave.lua" @ KEEPS, "line.lua");
static INSPECT: LazyLock<ScriptPair> = script!("inspect.lua" @ "{'no-writes'}");
static FORCE_RELEASE: LazyLock<ScriptPair> = script!("force_release.lua" @ KEEPS, "line.lua");

/// Every script, in the library's order.
static SCRIPTS: [&LazyLock<ScriptPair>; 13] = [
    &ACQUIRE,
    &RELEASE,
    &HANDOFF,
    &RENEW,
    &PERMIT_ACQUIRE,
    &READ_ACQUIRE,
    &PLACE_RELEASE,
    &FAIR_ACQUIRE,
    &FAIR_LEAVE,
    &FENCE_RAISE,
    &TURN_LEAVE,
    &INSPECT,
    &FORCE_RELEASE,
];

/// Every script as one library of Redis Functions (see `library.lua`),
/// with PUBLISH or SPUBLISH: loaded once per server by `FUNCTION LOAD`,
/// and run by `FCALL`, where the server has them (Redis 7.0 and later,
/// Valkey).
///
/// Its name carries a hash of its text, as a script's SHA1 does: clients of
/// different versions of this crate load libraries of different names, and
/// never run each other's functions.
#[derive(Debug)]
pub(crate) struct Library {
    /// `lockrt_` and the first 16 hex digits of the SHA1 of its text.
    pub(crate) name: String,
    /// What `FUNCTION LOAD` is sent.
    pub(crate) text: String,
}

static LIBRARIES: LazyLock<[Library; 2]> =
    LazyLock::new(|| [Library::new("PUBLISH"), Library::new("SPUBLISH")]);

impl Library {
    /// The library with PUBLISH, or with SPUBLISH when `sharded`.
    pub(crate) fn get(sharded: bool) -> &'static Library {
        &LIBRARIES[usize::from(sharded)]
    }

    fn new(publish: &str) -> Library {
        let mut body = format!("local PUBLISH = '{publish}'\n");
        for part in [
            include_str!("prelude.lua"),
            include_str!("fence.lua"),
            include_str!("places.lua"),
            include_str!("line.lua"),
            include_str!("library.lua"),
        ] {
            body.push_str(part);
        }
        for script in &SCRIPTS {
            body.push_str("do\n");
            body.push_str(script.body);
            body.push_str("local function batch(KEYS, ARGV)\n");
            body.push_str(include_str!("batch.lua"));
            body.push_str("\nend\n");
            body.push_str(&format!(
                "register('{}', run, batch, {})\nend\n",
                script.stem(),
                script.flags
            ));
        }
        let hash = Script::new(&body).get_hash().to_owned();
        let name = format!("lockrt_{}", &hash[..16]);
        let text = format!("#!lua name={name}\nlocal LIBRARY = '{name}'\n{body}");
        Library { name, text }
    }
}

/// How a server runs the scripts: as functions of the [`Library`] (`FCALL`)
/// or as scripts (`EVALSHA`), where it has no functions (before Redis 7.0),
/// refuses them (an ACL, a renamed command) or cannot load the library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    Function,
    Script,
}

/// What a command runs: the script, and the library holding it as a
/// function, one of which a server that does not know it (restarted, its
/// script cache or its functions flushed) must be sent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Runs {
    pub(crate) script: &'static Script,
    pub(crate) library: &'static Library,
}

/// One call of one lock script: the script, its keys and arguments, and
/// what running it twice would do. Cheap to clone; runs on any node (see
/// `Node::run`), which adds what depends on the node: PUBLISH or SPUBLISH,
/// and the restart quarantine's arguments of the acquire scripts.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    script: &'static ScriptPair,
    items: Arc<Items>,
    /// An acquire script: the node appends its restart quarantine
    /// arguments (see `next_fence` in fence.lua).
    quarantined: bool,
    /// Running it twice for one request does what running it once does, so
    /// that it may be sent again after a failure that leaves open whether
    /// it ran (see `node::retried`).
    idempotent: bool,
}

impl Call {
    fn new(script: &'static LazyLock<ScriptPair>, keys: Vec<String>, args: Vec<String>) -> Call {
        let bytes = keys.iter().chain(&args).map(String::len).sum();
        let mut items = Items::with_capacity(keys.len() + args.len(), bytes);
        for key in &keys {
            items.key(&[key]);
        }
        for arg in &args {
            items.arg(&[arg]);
        }
        Call::of(script, items)
    }

    /// A call of `script` with `items`, its keys and arguments.
    fn of(script: &'static LazyLock<ScriptPair>, items: Items) -> Call {
        Call {
            script,
            items: Arc::new(items),
            quarantined: false,
            idempotent: false,
        }
    }

    fn quarantined(mut self) -> Call {
        self.quarantined = true;
        self
    }

    fn idempotent(mut self, idempotent: bool) -> Call {
        self.idempotent = idempotent;
        self
    }

    /// Whether running it twice does what running it once does.
    pub(crate) fn is_idempotent(&self) -> bool {
        self.idempotent
    }

    /// The script's file name, for messages.
    pub(crate) fn script_name(&self) -> &'static str {
        self.script.name
    }

    /// The first key, which decides where a Cluster routes the call.
    pub(crate) fn first_key(&self) -> Option<&str> {
        self.items.keys().next()
    }

    /// The keys, in KEYS order.
    pub(crate) fn keys(&self) -> impl ExactSizeIterator<Item = &str> + Clone {
        self.items.keys()
    }

    /// The arguments, in ARGV order (without the quarantine's).
    pub(crate) fn args(&self) -> impl ExactSizeIterator<Item = &str> + Clone {
        self.items.args()
    }

    /// What this call runs (`sharded`: with SPUBLISH), for loading it where
    /// the server does not know it.
    pub(crate) fn runs(&self, sharded: bool) -> Runs {
        Runs {
            script: self.script.get(sharded),
            library: Library::get(sharded),
        }
    }

    /// The invocation to send: with SPUBLISH when `sharded`, and the
    /// restart quarantine's arguments last for an acquire script.
    #[cfg(test)]
    pub(crate) fn invocation(
        &self,
        sharded: bool,
        quarantine: &Quarantine,
    ) -> ScriptInvocation<'static> {
        let mut call = self.script.get(sharded).prepare_invoke();
        for key in self.keys() {
            call.key(key);
        }
        for arg in self.quarantined_args(quarantine).iter() {
            call.arg(arg.as_str());
        }
        call
    }

    /// The command that runs it (`FCALL` or `EVALSHA`, as `form` says),
    /// with SPUBLISH when `sharded`, and the restart quarantine's arguments
    /// last for an acquire script. Written straight into one command buffer
    /// (redis-rs's `ScriptInvocation` copies each key and argument into a
    /// buffer of its own first, then into the command).
    pub(crate) fn command(&self, sharded: bool, quarantine: &Quarantine, form: Form) -> Cmd {
        let keys = self.keys();
        let args = 1 + keys.len() + self.arg_count();
        let mut cmd = head(self.script, sharded, false, form, args, self.size());
        cmd.arg(keys.len());
        for key in keys {
            cmd.arg(key);
        }
        self.push_args(&mut cmd, quarantine);
        cmd
    }

    /// One command that runs every call of `calls` (all of one script)
    /// in order, each as it would run alone, and replies with one reply
    /// per call (see `batch.lua`); and what it runs.
    pub(crate) fn batch<'a>(
        calls: impl ExactSizeIterator<Item = &'a Call> + Clone,
        sharded: bool,
        quarantine: &Quarantine,
        form: Form,
    ) -> Option<(Cmd, Runs)> {
        let first = calls.clone().next()?;
        let runs = Runs {
            script: first.script.batch(sharded),
            library: Library::get(sharded),
        };
        let (mut keys, mut args, mut size) = (0, 1 + 2 * calls.len(), 0);
        for call in calls.clone() {
            keys += call.keys().len();
            args += call.arg_count();
            size += call.size();
        }
        let mut batch = head(
            first.script,
            sharded,
            true,
            form,
            1 + keys + args,
            size + 8 * args,
        );
        // FCALL function (or EVALSHA sha) numkeys KEYS... ARGV...: every
        // call's keys, then the number of calls, each one's numbers of keys
        // and of arguments, and every call's arguments.
        batch.arg(keys);
        for call in calls.clone() {
            for key in call.keys() {
                batch.arg(key);
            }
        }
        batch.arg(calls.len());
        for call in calls.clone() {
            batch.arg(call.keys().len()).arg(call.arg_count());
        }
        for call in calls {
            call.push_args(&mut batch, quarantine);
        }
        Some((batch, runs))
    }

    /// About how many bytes its keys and arguments take.
    fn size(&self) -> usize {
        self.items.bytes() + if self.quarantined { 64 } else { 0 }
    }

    /// How many arguments the script gets (with the quarantine's).
    fn arg_count(&self) -> usize {
        self.args().len() + if self.quarantined { 3 } else { 0 }
    }

    fn push_args(&self, cmd: &mut Cmd, quarantine: &Quarantine) {
        for arg in self.args() {
            cmd.arg(arg);
        }
        if self.quarantined {
            let (seen, length, strict) = quarantine.args();
            cmd.arg(seen).arg(length).arg(strict);
        }
    }

    /// Its arguments with the quarantine's, as the script gets them.
    #[cfg(test)]
    fn quarantined_args(&self, quarantine: &Quarantine) -> Vec<String> {
        let mut args: Vec<String> = self.args().map(str::to_owned).collect();
        if self.quarantined {
            let (seen, length, strict) = quarantine.args();
            args.extend([seen.to_owned(), length.to_string(), strict.to_owned()]);
        }
        args
    }
}

/// An `FCALL` of `script`'s function (its batched form when `batch`), or
/// an `EVALSHA` of it, as `form` says, with room for `args` more arguments
/// (the key count, the keys and the script's arguments) of about `size`
/// bytes.
fn head(
    script: &ScriptPair,
    sharded: bool,
    batch: bool,
    form: Form,
    args: usize,
    size: usize,
) -> Cmd {
    let mut cmd = Cmd::with_capacity(2 + args, 64 + size + 4 * args);
    match form {
        Form::Function => cmd.arg("FCALL").arg(script.function(sharded, batch)),
        Form::Script => {
            let script = if batch {
                script.batch(sharded)
            } else {
                script.get(sharded)
            };
            cmd.arg("EVALSHA").arg(script.get_hash())
        }
    };
    cmd
}

/// `cmd`, an `FCALL`, as the `EVALSHA` of `script` that does the same.
pub(crate) fn as_script(cmd: &Cmd, script: &Script) -> Cmd {
    let mut again = Cmd::with_capacity(cmd.args_iter().len(), 64);
    again.arg("EVALSHA").arg(script.get_hash());
    for arg in cmd.args_iter().skip(2) {
        if let redis::Arg::Simple(bytes) = arg {
            again.arg(bytes);
        }
    }
    again
}

/// Whether `cmd` is an `FCALL`.
pub(crate) fn is_function_call(cmd: &Cmd) -> bool {
    matches!(cmd.args_iter().next(), Some(redis::Arg::Simple(b"FCALL")))
}

/// An acquisition's calls: the acquire script for some locks, and what
/// gives back what it granted (when replicas do not confirm the grant, a
/// Redlock quorum is not reached, or the caller is gone by the reply). The
/// give-back is built only when it is needed ([`Undo::call`]): almost every
/// grant is kept, and the release call costs a dozen strings to build.
#[derive(Debug, Clone)]
pub(crate) struct Acquire {
    undo: Undo,
}

impl Acquire {
    /// The acquire call `take` for `locks` locks, stored as `stored` once
    /// taken, given back with `giving` if need be.
    pub(crate) fn new(take: Call, locks: usize, stored: Stored, giving: Giving) -> Acquire {
        Acquire {
            undo: Undo {
                take,
                locks,
                stored,
                giving,
            },
        }
    }

    /// The acquire call.
    pub(crate) fn take(&self) -> &Call {
        &self.undo.take
    }

    /// How many locks it takes.
    pub(crate) fn locks(&self) -> usize {
        self.undo.locks
    }

    /// What gives back what it granted.
    pub(crate) fn undo(&self) -> &Undo {
        &self.undo
    }
}

/// The release that gives back what an acquire call granted, made from
/// the acquire call itself, whose first keys are its locks' keys and whose
/// first argument is the owner id (see `calls::undo`).
#[derive(Debug, Clone)]
pub(crate) struct Undo {
    take: Call,
    locks: usize,
    stored: Stored,
    giving: Giving,
}

impl Undo {
    /// The release call for a grant with the tokens `granted` (one per
    /// lock), which frees only what is still held under them (see
    /// `calls::undo`).
    pub(crate) fn call(&self, granted: &[Taken]) -> Call {
        calls::undo(&self.take, self.locks, &self.stored, self.giving, granted)
    }

    /// The release call for the grant an acquire call replied, if it
    /// granted (see [`replies::granted`]).
    pub(crate) fn call_for(&self, reply: &[i64]) -> Option<Call> {
        replies::granted(self.locks, reply).map(|granted| self.call(&granted))
    }
}

/// How much of a hold a release gives back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Giving {
    /// Every re-entry level at once, not one.
    pub(crate) all: bool,
    /// A lock hash that becomes free stays taken this much longer (zero:
    /// freed at once); see `LockRequest::lock_at_least`.
    pub(crate) keep: Duration,
    /// The releasing client has waiters of its own for the locks: announce
    /// a lock that becomes free even when no waiter marked it (a waiter
    /// queued behind another of its client does not try, so does not mark
    /// it; see `release.lua`).
    pub(crate) announce: bool,
    /// Retire the owner id from the locks for this long (zero: not at
    /// all): an acquire call of its may still run after the give-back, and
    /// is refused (see `gone_key` in `prelude.lua`).
    pub(crate) retire: Duration,
}

impl Giving {
    /// One re-entry level.
    pub(crate) const ONE: Giving = Giving {
        all: false,
        keep: Duration::ZERO,
        announce: false,
        retire: Duration::ZERO,
    };
    /// Every level at once, freed at once.
    #[cfg(test)]
    pub(crate) const ALL: Giving = Giving {
        all: true,
        keep: Duration::ZERO,
        announce: false,
        retire: Duration::ZERO,
    };
    /// What an owner id that stopped may hold (an acquisition whose answer
    /// was lost, a waiter gone when a lock was handed to it): every level,
    /// announced, since others may wait for a lock it did take.
    pub(crate) const ABANDONED: Giving = Giving {
        all: true,
        keep: Duration::ZERO,
        announce: true,
        retire: Duration::ZERO,
    };
}

/// How a held item is stored, which decides how it is released and renewed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stored {
    /// A lock hash whose `owner` field names the holder.
    Hash,
    /// A place in a sorted set (boxed: a client holding many locks keeps
    /// one `Stored` per lock, most of them hashes).
    Place(Box<Place>),
}

/// A place in a sorted set scored by lease expiry, with a companion hash
/// of re-entry counts and tokens (a semaphore's permits, a read-write
/// lock's readers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Place {
    pub(crate) set: String,
    pub(crate) holders: String,
    /// The lock has a line of fair waiters to name the next of at a
    /// release (read locks).
    pub(crate) queued: bool,
    /// How many may hold places at once (a semaphore's permits; 0 for
    /// readers, who have no limit of their own).
    pub(crate) limit: u32,
}

impl Stored {
    /// How the other side of the read-write lock `lock` is stored, for a
    /// request or hold of `kind`: the readers' places for a writer, the
    /// lock hash for a reader. A semaphore has no other side.
    pub(crate) fn other_side(kind: Kind, lock: &LockKeys) -> Option<Stored> {
        match kind {
            Kind::Read => Some(Stored::Hash),
            Kind::Exclusive | Kind::Fair => Some(Stored::for_kind(Kind::Read, lock)),
            Kind::Permits(_) => None,
        }
    }

    /// How a lock of `kind` named by `lock` is stored.
    pub(crate) fn for_kind(kind: Kind, lock: &LockKeys) -> Stored {
        match kind {
            Kind::Exclusive | Kind::Fair => Stored::Hash,
            Kind::Permits(permits) => Stored::Place(Box::new(Place {
                set: lock.lock.clone(),
                holders: lock.holders(),
                queued: false,
                limit: permits.limit,
            })),
            Kind::Read => Stored::Place(Box::new(Place {
                set: lock.readers(),
                holders: lock.readers_holders(),
                queued: true,
                limit: 0,
            })),
        }
    }

    /// How many holders it may have at once, which decides how many
    /// Redlock masters must agree on a grant (see `backend::needed`).
    pub(crate) fn holders_at_once(&self) -> u32 {
        match self {
            Stored::Place(place) if place.limit > 1 => place.limit,
            _ => 1,
        }
    }
}

/// One held item to renew.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Renewing<'a> {
    /// The lock's key (its hash; for a place, the lock it is a place of).
    pub(crate) key: &'a str,
    pub(crate) stored: &'a Stored,
    pub(crate) owner: &'a str,
    pub(crate) lease: Duration,
}

/// The restart quarantine every acquire script applies (see
/// `next_fence` in fence.lua and `LockClientBuilder::restart_quarantine`).
#[derive(Debug, Clone)]
pub(crate) struct Quarantine {
    /// The run ids of the servers behind the connection when this client
    /// connected, comma-separated.
    pub(crate) seen: Arc<str>,
    pub(crate) length: Duration,
    pub(crate) strict: bool,
}

impl Quarantine {
    /// The three arguments an acquire script gets last, in order: the run
    /// ids seen, the length in milliseconds, and `1` when strict.
    fn args(&self) -> (&str, u64, &'static str) {
        let length = u64::try_from(self.length.as_millis()).unwrap_or(u64::MAX);
        (&self.seen, length, if self.strict { "1" } else { "0" })
    }

    /// No quarantine: a restart is not waited out.
    #[cfg(test)]
    pub(crate) fn none() -> Quarantine {
        Quarantine {
            seen: "".into(),
            length: Duration::ZERO,
            strict: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::keys::LockKeys;
    use crate::store::scripts::calls::{self, Asker};

    /// An undo, built from its acquire call, is the release that call's
    /// locks and owner id would get.
    #[test]
    fn an_undo_builds_the_release_of_what_its_acquire_call_names() {
        let locks = [LockKeys::new("lock:", "a"), LockKeys::new("lock:", "{t}b")];
        let owner = "client:7:3";
        let (lease, mark) = (Duration::from_secs(30), Duration::from_secs(5));
        let asker = Asker::fresh(owner);
        let (both, a, b) = (&locks[..], &locks[..1], &locks[1..]);
        let takes = [
            (
                Kind::Exclusive,
                both,
                calls::acquire(both, asker, lease, mark, false),
            ),
            (
                Kind::Exclusive,
                b,
                calls::acquire(b, asker, lease, mark, true),
            ),
            (
                Kind::Fair,
                a,
                calls::fair_acquire(&a[0], asker, lease, mark, true),
            ),
            (
                Kind::Read,
                b,
                calls::read_acquire(&b[0], asker, lease, mark),
            ),
            (
                Kind::Permits(3.into()),
                a,
                calls::permit_acquire(&a[0], asker, lease, 3),
            ),
        ];
        let givings = [
            Giving::ONE,
            Giving::ABANDONED,
            Giving {
                keep: Duration::from_millis(250),
                retire: Duration::from_secs(9),
                ..Giving::ALL
            },
        ];
        for (kind, named, take) in takes {
            let stored = Stored::for_kind(kind, &named[0]);
            for giving in givings {
                let acquire = Acquire::new(take.clone(), named.len(), stored.clone(), giving);
                let undo = acquire.undo().call(&[]);
                let release = calls::release(named, &stored, owner, giving);
                let context = format!("{kind:?} {giving:?}");
                assert_eq!(undo.script_name(), release.script_name(), "{context}");
                assert_eq!(undo.items, release.items, "{context}");
                assert_eq!(undo.is_idempotent(), release.is_idempotent(), "{context}");
            }
        }
    }

    /// Every script declared here is in [`SCRIPTS`], the library's list: a
    /// script left out would be no function of the library, and each of its
    /// calls would miss, load the library, miss again and run by EVALSHA.
    #[test]
    fn every_script_is_a_function_of_the_library() {
        let declared = include_str!("mod.rs")
            .lines()
            .filter(|line| line.starts_with("static ") && line.contains(": LazyLock<ScriptPair>"))
            .count();
        assert_eq!(declared, SCRIPTS.len());
        let mut stems: Vec<&str> = SCRIPTS.iter().map(|script| script.stem()).collect();
        stems.sort_unstable();
        stems.dedup();
        assert_eq!(stems.len(), SCRIPTS.len(), "a script is listed twice");
        let library = &Library::get(false).text;
        for stem in stems {
            assert!(
                library.contains(&format!("register('{stem}', run, batch,")),
                "{stem}"
            );
        }
    }

    /// A call's command is byte for byte the one redis-rs's
    /// `ScriptInvocation` sends for the same script, keys and arguments.
    #[test]
    fn a_command_is_what_a_script_invocation_sends() {
        let locks = [LockKeys::new("lock:", "a"), LockKeys::new("lock:", "b")];
        let quarantine = Quarantine {
            seen: "0123abcd".into(),
            length: Duration::from_secs(30),
            strict: true,
        };
        let owner = "client:7";
        let acquire = calls::acquire(
            &locks,
            Asker::fresh(owner),
            Duration::from_secs(30),
            Duration::ZERO,
            false,
        );
        let stored = Stored::for_kind(Kind::Exclusive, &locks[0]);
        let release = calls::release(&locks, &stored, owner, Giving::ONE);
        for call in [acquire, release] {
            for sharded in [false, true] {
                let mut by_redis = redis::pipe();
                by_redis.invoke_script(&call.invocation(sharded, &quarantine));
                let script = call.command(sharded, &quarantine, Form::Script);
                assert_eq!(
                    script.get_packed_command(),
                    by_redis.get_packed_pipeline(),
                    "{} (sharded: {sharded})",
                    call.script_name()
                );
                // The function's call is the same after its name, and
                // becomes the script's where the server refuses functions.
                let function = call.command(sharded, &quarantine, Form::Function);
                assert!(is_function_call(&function) && !is_function_call(&script));
                let name = function.args_iter().nth(1);
                let expected = format!("{}_{}", Library::get(sharded).name, call.script.stem());
                assert!(matches!(name, Some(redis::Arg::Simple(n)) if n == expected.as_bytes()));
                assert_eq!(
                    as_script(&function, call.runs(sharded).script).get_packed_command(),
                    script.get_packed_command()
                );
            }
        }
    }
}
