//! The attribute's options: the lock's name (`key` or `keys`), its kind
//! (`permits`, `mode`, `fair`), `lease`, `wait`, the scheduled-job options
//! (`lock_at_most`, `lock_at_least`, `on_busy`), `min_replicas`, `client`
//! and `crate`.
//!
//! Every option is parsed by one setter that rejects a repeat and checks the
//! value, so a misspelt, repeated or malformed option is reported on its own
//! tokens. Options that contradict each other are reported once all are
//! read, on the later of the two. All errors are reported together.

use proc_macro2::{Span, TokenStream};
use syn::ext::IdentExt as _;
use syn::parse::{ParseStream, Parser as _};
use syn::spanned::Spanned as _;
use syn::{Expr, ExprArray, ExprLit, ExprUnary, Ident, Lit, LitInt, LitStr, Path, Token, UnOp};

use crate::duration::{self, MAX_LEASE_MS, MIN_LEASE_MS};
use crate::key::{self, Template};

/// Sets one option from its value.
type Setter = fn(&mut Setters, Expr) -> syn::Result<()>;

/// Every option, in the order the docs list them, with its setter: the one
/// place an option is named.
const OPTIONS: [(&str, Setter); 14] = [
    ("key", Setters::set_key),
    ("keys", Setters::set_keys),
    ("permits", Setters::set_permits),
    ("mode", Setters::set_mode),
    ("fair", Setters::set_fair),
    ("lease", Setters::set_lease),
    ("wait", Setters::set_wait),
    ("lock_at_most", Setters::set_lock_at_most),
    ("lock_at_least", Setters::set_lock_at_least),
    ("max_hold", Setters::set_max_hold),
    ("on_busy", Setters::set_on_busy),
    ("min_replicas", Setters::set_min_replicas),
    ("client", Setters::set_client),
    ("crate", Setters::set_crate),
];

/// The options' names.
fn names() -> impl Iterator<Item = &'static str> {
    OPTIONS.iter().map(|(name, _)| *name)
}

/// The options' names for messages: "`key`, `keys`, ... or `crate`".
fn known() -> String {
    let quoted: Vec<String> = names().map(|name| format!("`{name}`")).collect();
    let (last, rest) = quoted.split_last().expect("options");
    format!("{} or {last}", rest.join(", "))
}

const KEYS_EXAMPLE: &str = "`keys = [\"account:<from>\", \"account:<to>\"]`";

/// Several errors, reported as one.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(errors) => errors.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// Keeps the value of `result`, recording its error.
    pub(crate) fn take<T>(&mut self, result: syn::Result<T>) -> Option<T> {
        result.map_err(|error| self.push(error)).ok()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

/// What kind of lock the function takes: the variants of the runtime's
/// `__private::Kind` (`lock_runtime`'s one vocabulary of lock kinds), which
/// the expansion names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `key` or `keys`, alone or with `mode = "write"`: one holder at a time.
    Exclusive,
    /// `permits = N`: one of N permits of a semaphore.
    Permits(u32),
    /// `mode = "read"`: shared with other readers, excluded by writers.
    Read,
    /// `fair = true`: waiters take the lock in arrival order.
    Fair,
}

/// `mode = "..."`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Read,
    Write,
}

/// `on_busy = "..."`: what the function returns when the lock stays busy
/// for the whole wait.
#[derive(Debug, Clone, Copy)]
pub(crate) enum OnBusy {
    /// `"error"`, the default: `Err(LockError::Timeout { .. }.into())`.
    Error,
    /// `"skip"`: `Ok(None)`, without running the body. The span is the
    /// value's, where a return type without `Option` is reported.
    Skip(Span),
}

/// The options of one attribute.
pub(crate) struct Options {
    /// `key`'s template, or `keys`'s (at least one).
    pub(crate) keys: Vec<Template>,
    pub(crate) kind: Kind,
    /// `mode = "write"`: the write side of a read-write lock, an exclusive
    /// lock whose metrics say so.
    pub(crate) write: bool,
    /// Milliseconds; `None` leaves the client's default.
    pub(crate) lease: Option<u64>,
    /// Milliseconds; `None` leaves the client's default.
    pub(crate) wait: Option<u64>,
    /// `lock_at_most`, in milliseconds: the lease, never renewed. Never
    /// given together with `lease`.
    pub(crate) lock_at_most: Option<u64>,
    /// `lock_at_least`, in milliseconds: how long after it was taken the
    /// lock stays taken, even when the body ends sooner.
    pub(crate) lock_at_least: Option<u64>,
    /// `max_hold`, in milliseconds: how long the lock is renewed at most.
    pub(crate) max_hold: Option<u64>,
    pub(crate) on_busy: OnBusy,
    /// Replicas that must confirm the lock; `None` leaves the client's
    /// setting, `Some(0)` turns it off for this lock.
    pub(crate) min_replicas: Option<u32>,
    pub(crate) client: Option<Expr>,
    /// `crate = "..."`: where `lock_runtime` is.
    pub(crate) krate: Option<Path>,
}

impl Options {
    /// Parses the attribute's arguments. Errors in several options are
    /// combined; a syntax error stops parsing (the rest cannot be trusted).
    pub(crate) fn parse(args: TokenStream) -> syn::Result<Options> {
        let mut setters = Setters::default();
        let mut errors = Errors::default();
        let parsed = (|input: ParseStream| {
            while !input.is_empty() {
                let name = input.call(Ident::parse_any)?;
                if !input.peek(Token![=]) {
                    return Err(syn::Error::new(
                        name.span(),
                        format!(
                            "expected `{name} = ...`; the options are {}, each written as `name = value`",
                            known()
                        ),
                    ));
                }
                input.parse::<Token![=]>()?;
                let value: Expr = input.parse()?;
                errors.take(setters.set(&name, value));
                if input.is_empty() {
                    break;
                }
                input.parse::<Token![,]>()?;
            }
            Ok(())
        })
        .parse2(args);
        // After a syntax error the key may well be further on.
        let complete = errors.take(parsed).is_some();
        let missing = || {
            syn::Error::new(
                Span::call_site(),
                format!(
                    "missing `key`: name the lock, like `#[distributed_lock(key = \"order:<order_id>\")]`, \
                     or the locks to take together, like {KEYS_EXAMPLE}"
                ),
            )
        };
        if complete && setters.given("key").is_none() && setters.given("keys").is_none() {
            errors.push(missing());
        }
        setters.check_combinations(&mut errors);
        errors.finish()?;
        // Without errors, exactly one of `key` and `keys` was given, and valid.
        let keys = match (setters.key, setters.keys) {
            (Some(key), _) => vec![key],
            (None, Some(keys)) => keys,
            (None, None) => return Err(missing()),
        };
        let kind = match (setters.permits, setters.mode, setters.fair) {
            (Some(permits), _, _) => Kind::Permits(permits),
            (None, Some(Mode::Read), _) => Kind::Read,
            (None, _, Some(true)) => Kind::Fair,
            _ => Kind::Exclusive,
        };
        Ok(Options {
            keys,
            kind,
            write: setters.mode == Some(Mode::Write),
            lease: setters.lease,
            wait: setters.wait,
            lock_at_most: setters.lock_at_most,
            lock_at_least: setters.lock_at_least,
            max_hold: setters.max_hold,
            on_busy: setters.on_busy.unwrap_or(OnBusy::Error),
            min_replicas: setters.min_replicas,
            client: setters.client,
            krate: setters.krate,
        })
    }
}

/// One setter per option, each rejecting a repeat.
#[derive(Default)]
struct Setters {
    key: Option<Template>,
    keys: Option<Vec<Template>>,
    permits: Option<u32>,
    mode: Option<Mode>,
    fair: Option<bool>,
    lease: Option<u64>,
    wait: Option<u64>,
    lock_at_most: Option<u64>,
    lock_at_least: Option<u64>,
    max_hold: Option<u64>,
    on_busy: Option<OnBusy>,
    min_replicas: Option<u32>,
    client: Option<Expr>,
    krate: Option<Path>,
    /// The options given, in order, with the spans of their names; an
    /// option is here even when its value was rejected, so that no error
    /// follows from its absence (such as "missing `key`").
    seen: Vec<(String, Span)>,
}

impl Setters {
    fn set(&mut self, name: &Ident, value: Expr) -> syn::Result<()> {
        let text = name.unraw().to_string();
        let setter = match OPTIONS.iter().find(|(known, _)| *known == text) {
            Some(&(_, setter)) => setter,
            None => {
                let hint = did_you_mean(&text, names())
                    .map(|known| format!("did you mean `{known}`? "))
                    .unwrap_or_default();
                return Err(syn::Error::new(
                    name.span(),
                    format!("unknown option `{text}`; {hint}the options are {}", known()),
                ));
            }
        };
        if self.given(&text).is_some() {
            return Err(syn::Error::new(
                name.span(),
                format!("`{text}` is given more than once; keep one"),
            ));
        }
        self.seen.push((text, name.span()));
        setter(self, value)
    }

    /// Where the option `name` was given, if it was.
    fn given(&self, name: &str) -> Option<Span> {
        self.seen
            .iter()
            .find(|(seen, _)| seen == name)
            .map(|&(_, span)| span)
    }

    /// Reports options that contradict each other, each pair once, on the
    /// option written later.
    fn check_combinations(&self, errors: &mut Errors) {
        let read = self.mode == Some(Mode::Read);
        let fair = self.fair == Some(true);
        let (at_least, at_most) = (self.lock_at_least, self.lock_at_most);
        let longer = at_least
            .zip(at_most)
            .filter(|(at_least, at_most)| at_least > at_most);
        let longer_message = longer.map(|(at_least, at_most)| {
            let (at_least, at_most) = (duration::display(at_least), duration::display(at_most));
            format!(
                "`lock_at_least = \"{at_least}\"` is longer than `lock_at_most = \"{at_most}\"`: \
                 the lock cannot stay taken for {at_least} when it is held for {at_most} at most; \
                 make `lock_at_least` shorter, or `lock_at_most` longer"
            )
        });
        let capped = self
            .max_hold
            .zip(self.lease)
            .filter(|(max_hold, lease)| max_hold < lease);
        let capped_message = capped.map(|(max_hold, lease)| {
            let (max_hold, lease) = (duration::display(max_hold), duration::display(lease));
            format!(
                "`max_hold = \"{max_hold}\"` is shorter than `lease = \"{lease}\"`: the lock would \
                 never be renewed; make `lease` shorter than `max_hold` (it is renewed every third \
                 of it), or `max_hold` longer"
            )
        });
        let rules: [(bool, &str, &str, &str); 14] = [
            (
                true,
                "key",
                "keys",
                "`key` and `keys` cannot be used together: `key` names one lock, `keys` several \
                 taken together; put every template in `keys`, or keep only `key`",
            ),
            (
                true,
                "permits",
                "keys",
                "`permits` cannot be used with `keys`: a semaphore has one name; \
                 write it with `key`, like `key = \"exports\", permits = 3`",
            ),
            (
                true,
                "mode",
                "permits",
                "`mode` cannot be used with `permits`: a semaphore has no readers or writers, \
                 only up to `permits` holders; remove `mode`, or `permits` for a read-write lock",
            ),
            (
                fair,
                "fair",
                "permits",
                "`fair = true` cannot be used with `permits`: semaphores are not fair; \
                 remove `fair`, or `permits` for a fair lock",
            ),
            (
                fair && read,
                "fair",
                "mode",
                "`fair = true` cannot be used with `mode = \"read\"`: read-write locks are not fair, \
                 though a waiting writer is not starved by new readers; remove `fair`, or `mode`",
            ),
            (
                fair && self.mode == Some(Mode::Write),
                "fair",
                "mode",
                "`fair = true` cannot be used with `mode = \"write\"`: a fair lock is a kind of lock of \
                 its own, not the write side of a read-write lock (it is exclusive already); \
                 remove `mode`, or `fair`",
            ),
            (
                fair,
                "fair",
                "keys",
                "`fair = true` cannot be used with `keys`: several locks taken together are not fair; \
                 remove `fair`, or lock one `key`",
            ),
            (
                read,
                "mode",
                "keys",
                "`mode = \"read\"` cannot be used with `keys`: several locks are taken together \
                 exclusively only; remove `mode`, or lock one `key`",
            ),
            (
                true,
                "lock_at_most",
                "lease",
                "`lock_at_most` and `lease` cannot be used together: both set the lock's lease; \
                 keep `lock_at_most` for a lease that is never renewed (the body is stopped when it \
                 runs out), or `lease` for one that is renewed while the body runs",
            ),
            (
                longer.is_some(),
                "lock_at_least",
                "lock_at_most",
                longer_message.as_deref().unwrap_or_default(),
            ),
            (
                true,
                "lock_at_least",
                "permits",
                "`lock_at_least` cannot be used with `permits`: it keeps an exclusive or fair lock \
                 taken after a body that ends early, and a semaphore gives its permit back when the \
                 body ends; remove `lock_at_least`, or `permits` for a lock",
            ),
            (
                true,
                "max_hold",
                "lock_at_most",
                "`max_hold` cannot be used with `lock_at_most`: a `lock_at_most` lease is never \
                 renewed, so it is its own cap; keep `lock_at_most` alone, or give `lease` (renewed) \
                 with `max_hold`",
            ),
            (
                capped.is_some(),
                "max_hold",
                "lease",
                capped_message.as_deref().unwrap_or_default(),
            ),
            (
                read,
                "lock_at_least",
                "mode",
                "`lock_at_least` cannot be used with `mode = \"read\"`: it keeps an exclusive or \
                 fair lock taken after a body that ends early, and readers share theirs; \
                 remove `lock_at_least`, or use `mode = \"write\"`",
            ),
        ];
        for (applies, a, b, message) in rules {
            if !applies {
                continue;
            }
            let (Some(a), Some(b)) = (self.position(a), self.position(b)) else {
                continue;
            };
            let (_, span) = self.seen[a.max(b)];
            errors.push(syn::Error::new(span, message));
        }
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.seen.iter().position(|(seen, _)| seen == name)
    }

    fn set_key(&mut self, value: Expr) -> syn::Result<()> {
        if let Expr::Array(_) = value {
            return Err(syn::Error::new_spanned(
                value,
                "`key` takes one template string; for several locks taken together, \
                 write `keys = [...]`",
            ));
        }
        let lit = string(
            &value,
            "key",
            "a template string, like `key = \"order:<order_id>\"`",
        )?;
        self.key = Some(key::parse(&lit)?);
        Ok(())
    }

    fn set_keys(&mut self, value: Expr) -> syn::Result<()> {
        let elems = match &value {
            Expr::Array(ExprArray { elems, .. }) if elems.is_empty() => {
                return Err(syn::Error::new(
                    value.span(),
                    format!(
                        "`keys` is empty: list the locks to take together, like {KEYS_EXAMPLE}"
                    ),
                ));
            }
            Expr::Array(ExprArray { elems, .. }) => elems,
            Expr::Lit(ExprLit {
                lit: Lit::Str(lit), ..
            }) => {
                return Err(syn::Error::new(
                    lit.span(),
                    format!(
                        "`keys` takes a list of templates, like {KEYS_EXAMPLE}; \
                         for one lock, write `key = {}`",
                        lit.token()
                    ),
                ));
            }
            value => {
                return Err(syn::Error::new_spanned(
                    value,
                    format!("`keys` takes a list of templates, like {KEYS_EXAMPLE}"),
                ));
            }
        };
        let mut errors = Errors::default();
        let mut templates = Vec::new();
        let mut texts: Vec<String> = Vec::new();
        for elem in elems {
            let Some(lit) = errors.take(string(
                elem,
                "keys",
                &format!("template strings, like {KEYS_EXAMPLE}"),
            )) else {
                continue;
            };
            if texts.contains(&lit.value()) {
                errors.push(syn::Error::new(
                    lit.span(),
                    format!(
                        "{} is listed twice in `keys`; keep one (two templates that give the \
                         same key at run time are taken as one lock)",
                        lit.token()
                    ),
                ));
                continue;
            }
            texts.push(lit.value());
            if let Some(template) = errors.take(key::parse(&lit)) {
                templates.push(template);
            }
        }
        errors.finish()?;
        self.keys = Some(templates);
        Ok(())
    }

    fn set_permits(&mut self, value: Expr) -> syn::Result<()> {
        let (int, permits) = whole_number(
            &value,
            "permits",
            "how many holders the semaphore lets in at once, a whole number like `permits = 3`",
            "`permits` is at least 1: it is how many holders the semaphore lets in at once",
        )?;
        if permits == 0 {
            return Err(syn::Error::new(
                int.span(),
                "`permits = 0` would let nobody in: a semaphore needs at least 1 permit",
            ));
        }
        self.permits = Some(permits);
        Ok(())
    }

    fn set_min_replicas(&mut self, value: Expr) -> syn::Result<()> {
        let (_, replicas) = whole_number(
            &value,
            "min_replicas",
            "how many replicas must confirm the lock, a whole number like `min_replicas = 1` \
             (0 turns the client's `min_replicas` off for this lock)",
            "`min_replicas` cannot be negative: it is how many replicas must confirm the lock; \
             0 turns the client's `min_replicas` off for this lock",
        )?;
        self.min_replicas = Some(replicas);
        Ok(())
    }

    fn set_mode(&mut self, value: Expr) -> syn::Result<()> {
        const EXPECTED: &str = "`\"read\"` (shared with other readers) or `\"write\"` (alone), \
                                like `mode = \"read\"`";
        let lit = match &value {
            // `mode = read`: say which string would work.
            Expr::Path(path) if path.path.is_ident("read") || path.path.is_ident("write") => {
                let word = path.path.segments[0].ident.to_string();
                return Err(syn::Error::new_spanned(
                    path,
                    format!("`mode` takes a string: write `mode = \"{word}\"`"),
                ));
            }
            value => string(value, "mode", EXPECTED)?,
        };
        self.mode = Some(match lit.value().as_str() {
            "read" => Mode::Read,
            "write" => Mode::Write,
            other => {
                let hint = did_you_mean(other, ["read", "write"])
                    .map(|known| format!("did you mean `\"{known}\"`? "))
                    .unwrap_or_default();
                return Err(syn::Error::new(
                    lit.span(),
                    format!("unknown mode `{other}`; {hint}`mode` takes {EXPECTED}"),
                ));
            }
        });
        Ok(())
    }

    fn set_fair(&mut self, value: Expr) -> syn::Result<()> {
        match &value {
            Expr::Lit(ExprLit {
                lit: Lit::Bool(fair),
                ..
            }) => {
                self.fair = Some(fair.value);
                Ok(())
            }
            Expr::Lit(ExprLit {
                lit: Lit::Str(lit), ..
            }) if matches!(lit.value().as_str(), "true" | "false") => Err(syn::Error::new(
                lit.span(),
                format!(
                    "`fair` takes `true` or `false` without quotes: write `fair = {}`",
                    lit.value()
                ),
            )),
            value => Err(syn::Error::new_spanned(
                value,
                "`fair` takes `true` (waiters take the lock in arrival order) or `false`, like `fair = true`",
            )),
        }
    }

    fn set_lease(&mut self, value: Expr) -> syn::Result<()> {
        let (lit, ms) = duration_option(&value, "lease", "30s")?;
        if ms == 0 {
            return Err(syn::Error::new(
                lit.span(),
                "`lease` must be longer than zero: it is how long the lock outlives a holder that stops renewing it",
            ));
        }
        if ms < MIN_LEASE_MS {
            return Err(syn::Error::new(
                lit.span(),
                format!(
                    "a lease of {} is too short to renew safely: the lock is renewed every third of its lease, \
                     which must leave time for a round trip to Redis; use at least {}",
                    duration::display(ms),
                    duration::display(MIN_LEASE_MS)
                ),
            ));
        }
        at_most_a_year(&lit, "lease", ms)?;
        self.lease = Some(ms);
        Ok(())
    }

    fn set_wait(&mut self, value: Expr) -> syn::Result<()> {
        let (_, ms) = duration_option(&value, "wait", "5s")?;
        self.wait = Some(ms);
        Ok(())
    }

    fn set_lock_at_most(&mut self, value: Expr) -> syn::Result<()> {
        let (lit, ms) = duration_option(&value, "lock_at_most", "10m")?;
        if ms == 0 {
            return Err(syn::Error::new(
                lit.span(),
                "`lock_at_most` must be longer than zero: it is the longest the lock is held, \
                 and the body is stopped when it runs out",
            ));
        }
        if ms < MIN_LEASE_MS {
            return Err(syn::Error::new(
                lit.span(),
                format!(
                    "`lock_at_most = \"{}\"` is too short: it is the lock's lease, and a lease must \
                     leave time for the round trips to Redis; use at least {}",
                    duration::display(ms),
                    duration::display(MIN_LEASE_MS)
                ),
            ));
        }
        at_most_a_year(&lit, "lock_at_most", ms)?;
        self.lock_at_most = Some(ms);
        Ok(())
    }

    fn set_lock_at_least(&mut self, value: Expr) -> syn::Result<()> {
        let (lit, ms) = duration_option(&value, "lock_at_least", "30s")?;
        if ms == 0 {
            return Err(syn::Error::new(
                lit.span(),
                "`lock_at_least` must be longer than zero: it is how long after it was taken the lock \
                 stays taken when the body ends sooner; remove it to release the lock when the body ends",
            ));
        }
        at_most_a_year(&lit, "lock_at_least", ms)?;
        self.lock_at_least = Some(ms);
        Ok(())
    }

    fn set_max_hold(&mut self, value: Expr) -> syn::Result<()> {
        let (lit, ms) = duration_option(&value, "max_hold", "15m")?;
        if ms < MIN_LEASE_MS {
            return Err(syn::Error::new(
                lit.span(),
                format!(
                    "`max_hold = \"{}\"` is too short: it is how long the lock is renewed at most, \
                     and no lease is shorter than {}; remove it, or give a longer one",
                    duration::display(ms),
                    duration::display(MIN_LEASE_MS)
                ),
            ));
        }
        self.max_hold = Some(ms);
        Ok(())
    }

    fn set_on_busy(&mut self, value: Expr) -> syn::Result<()> {
        const EXPECTED: &str = "`\"error\"` (return `LockError::Timeout` as an error, the default) \
                                or `\"skip\"` (return `Ok(None)` without running the body), \
                                like `on_busy = \"skip\"`";
        let lit = match &value {
            // `on_busy = skip`: say which string would work.
            Expr::Path(path) if path.path.is_ident("skip") || path.path.is_ident("error") => {
                let word = path.path.segments[0].ident.to_string();
                return Err(syn::Error::new_spanned(
                    path,
                    format!("`on_busy` takes a string: write `on_busy = \"{word}\"`"),
                ));
            }
            value => string(value, "on_busy", EXPECTED)?,
        };
        self.on_busy = Some(match lit.value().as_str() {
            "error" => OnBusy::Error,
            "skip" => OnBusy::Skip(lit.span()),
            other => {
                let hint = did_you_mean(other, ["error", "skip"])
                    .map(|known| format!("did you mean `\"{known}\"`? "))
                    .unwrap_or_default();
                return Err(syn::Error::new(
                    lit.span(),
                    format!("unknown `on_busy` value `{other}`; {hint}`on_busy` takes {EXPECTED}"),
                ));
            }
        });
        Ok(())
    }

    fn set_client(&mut self, value: Expr) -> syn::Result<()> {
        if let Expr::Lit(_) = value {
            return Err(syn::Error::new(
                value.span(),
                "`client` takes an expression that gives a `LockClient`, like `client = self.locks` \
                 or `client = state.locks`, not a literal",
            ));
        }
        self.client = Some(value);
        Ok(())
    }

    fn set_crate(&mut self, value: Expr) -> syn::Result<()> {
        const EXPECTED: &str =
            "the path of the `lock_runtime` crate, like `crate = \"::my_app::locks\"`";
        let path = match value {
            Expr::Path(path) if path.qself.is_none() && path.attrs.is_empty() => path.path,
            value => {
                let lit = string(&value, "crate", EXPECTED)?;
                lit.parse::<Path>().map_err(|_| {
                    syn::Error::new(
                        lit.span(),
                        format!("`{}` is not a path; `crate` takes {EXPECTED}", lit.value()),
                    )
                })?
            }
        };
        self.krate = Some(path);
        Ok(())
    }
}

/// The string literal of `option`, or an error saying what it takes.
fn string(value: &Expr, option: &str, expected: &str) -> syn::Result<LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Ok(lit.clone()),
        _ => Err(syn::Error::new_spanned(
            value,
            format!("`{option}` takes {expected}"),
        )),
    }
}

/// A whole-number option's literal and value, a `u32` written without a
/// suffix or with `u32`; `expected` says what the option takes, `negative`
/// why it is not negative.
fn whole_number(
    value: &Expr,
    option: &str,
    expected: &str,
    negative: &str,
) -> syn::Result<(LitInt, u32)> {
    let int = match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) if matches!(int.suffix(), "" | "u32") => int,
        // `permits = "3"`: say which number would work.
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) if lit.value().parse::<u32>().is_ok() => {
            return Err(syn::Error::new(
                lit.span(),
                format!(
                    "`{option}` takes a number, not a string: write `{option} = {}`",
                    lit.value()
                ),
            ));
        }
        Expr::Unary(ExprUnary {
            op: UnOp::Neg(_),
            expr,
            ..
        }) if matches!(
            **expr,
            Expr::Lit(ExprLit {
                lit: Lit::Int(_),
                ..
            })
        ) =>
        {
            return Err(syn::Error::new_spanned(value, negative));
        }
        value => {
            return Err(syn::Error::new_spanned(
                value,
                format!("`{option}` takes {expected}"),
            ));
        }
    };
    let number = int
        .base10_parse::<u32>()
        .map_err(|_| syn::Error::new(int.span(), format!("`{option}` is at most {}", u32::MAX)))?;
    Ok((int.clone(), number))
}

/// A duration option's literal and milliseconds.
fn duration_option(value: &Expr, option: &str, example: &str) -> syn::Result<(LitStr, u64)> {
    let lit = match value {
        // `lease = 30`: say which string would work.
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) => {
            let n = int.base10_digits();
            return Err(syn::Error::new(
                int.span(),
                format!(
                    "`{option}` takes a duration string with a unit, like `{option} = \"{n}s\"` or `\"{n}ms\"`"
                ),
            ));
        }
        value => string(
            value,
            option,
            &format!("a duration string, like `{option} = \"{example}\"`"),
        )?,
    };
    let ms = duration::parse(&lit.value())
        .map_err(|message| syn::Error::new(lit.span(), format!("`{option}`: {message}")))?;
    Ok((lit, ms))
}

/// Refuses a lease-like duration (`option`) longer than the runtime's
/// longest lease, which no acquisition could ask for.
fn at_most_a_year(lit: &LitStr, option: &str, ms: u64) -> syn::Result<()> {
    if ms <= MAX_LEASE_MS {
        return Ok(());
    }
    Err(syn::Error::new(
        lit.span(),
        format!(
            "`{option} = \"{}\"` is longer than the longest lease the runtime takes, {} \
             (a year, `lock_runtime::MAX_LEASE`): no call could take the lock; use at most that",
            duration::display(ms),
            duration::display(MAX_LEASE_MS)
        ),
    ))
}

/// The known name closest to `given`, if it looks like a typo of it or a
/// shortening (`order` for `order_id`).
pub(crate) fn did_you_mean<'a>(
    given: &str,
    known: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let limit = (given.chars().count() / 3).max(1);
    known
        .into_iter()
        .filter_map(|name| {
            let distance = distance(given, name);
            let shortened =
                given.len() >= 2 && (name.starts_with(given) || given.starts_with(name));
            (distance <= limit || shortened).then_some((distance, name))
        })
        .min_by_key(|&(distance, _)| distance)
        .map(|(_, name)| name)
}

/// Edit distance counting a swap of neighbours as one edit (optimal string
/// alignment), so `wiat` is one edit from `wait`.
fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    d[0] = (0..=b.len()).collect();
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn error(args: TokenStream) -> String {
        match Options::parse(args) {
            Ok(_) => panic!("should be rejected"),
            Err(err) => crate::messages(err),
        }
    }

    #[test]
    fn parses_every_option() {
        let options = Options::parse(quote!(
            key = "order:<id>",
            lease = "1m30s",
            wait = "0s",
            min_replicas = 2,
            client = self.locks,
            crate = "::my::locks",
        ))
        .unwrap();
        assert_eq!(options.keys.len(), 1);
        assert_eq!(options.keys[0].pieces.len(), 2);
        assert_eq!(options.kind, Kind::Exclusive);
        assert_eq!(options.lease, Some(90_000));
        assert_eq!(options.wait, Some(0));
        assert_eq!(options.min_replicas, Some(2));
        assert!(options.client.is_some());
        assert!(options.krate.is_some());
    }

    #[test]
    fn lease_and_wait_default_to_none() {
        let options = Options::parse(quote!(key = "k")).unwrap();
        assert!(options.lease.is_none() && options.wait.is_none() && options.client.is_none());
        assert!(options.min_replicas.is_none());
    }

    #[test]
    fn key_is_required() {
        assert!(error(quote!()).contains("missing `key`"));
        assert!(error(quote!(lease = "1s")).contains("missing `key`"));
    }

    #[test]
    fn max_hold_is_checked_against_the_lease_and_lock_at_most() {
        let options = Options::parse(quote!(key = "k", lease = "30s", max_hold = "15m"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(options.max_hold, Some(900_000));
        let shorter = error(quote!(key = "k", lease = "30s", max_hold = "10s"));
        assert!(
            shorter.contains("`max_hold = \"10s\"` is shorter than `lease = \"30s\"`"),
            "{shorter}"
        );
        let fixed = error(quote!(key = "k", lock_at_most = "1m", max_hold = "10m"));
        assert!(
            fixed.contains("`max_hold` cannot be used with `lock_at_most`"),
            "{fixed}"
        );
        let short = error(quote!(key = "k", max_hold = "50ms"));
        assert!(
            short.contains("`max_hold = \"50ms\"` is too short"),
            "{short}"
        );
    }

    #[test]
    fn rejects_unknown_and_repeated_options() {
        let unknown = error(quote!(key = "k", leese = "1s"));
        assert!(
            unknown.contains("unknown option `leese`; did you mean `lease`?"),
            "{unknown}"
        );
        assert!(unknown.contains(
            "`key`, `keys`, `permits`, `mode`, `fair`, `lease`, `wait`, `lock_at_most`, \
             `lock_at_least`, `max_hold`, `on_busy`, `min_replicas`, `client` or `crate`"
        ));
        assert!(!error(quote!(key = "k", bogus = 1)).contains("did you mean"));
        assert!(error(quote!(key = "a", key = "b")).contains("`key` is given more than once"));
        assert!(
            error(quote!(keys = ["a"], fair = true, fair = false))
                .contains("`fair` is given more than once")
        );
    }

    #[test]
    fn rejects_bad_values() {
        assert!(error(quote!(key = 42)).contains("`key` takes a template string"));
        assert!(error(quote!(key = "k", lease = 30)).contains("like `lease = \"30s\"`"));
        assert!(error(quote!(key = "k", lease = "0s")).contains("longer than zero"));
        assert!(error(quote!(key = "k", lease = "99ms")).contains("too short to renew safely"));
        assert!(error(quote!(key = "k", wait = "5 s")).contains("without spaces"));
        assert!(error(quote!(key = "k", client = "locks")).contains("not a literal"));
        assert!(error(quote!(key = "k", crate = "not a path")).contains("is not a path"));
    }

    #[test]
    fn keys_name_several_locks() {
        let options = Options::parse(quote!(keys = ["account:<from>", "account:<to>"])).unwrap();
        assert_eq!(options.keys.len(), 2);
        assert_eq!(options.kind, Kind::Exclusive);
        let options =
            Options::parse(quote!(keys = ["only"], mode = "write", fair = false)).unwrap();
        assert_eq!(options.keys.len(), 1);
        assert_eq!(options.kind, Kind::Exclusive);
    }

    #[test]
    fn rejects_bad_keys() {
        assert!(error(quote!(keys = [])).contains("`keys` is empty"));
        assert!(error(quote!(key = ["a", "b"])).contains("write `keys = [...]`"));
        let one = error(quote!(keys = "account:<id>"));
        assert!(
            one.contains("for one lock, write `key = \"account:<id>\"`"),
            "{one}"
        );
        assert!(error(quote!(keys = accounts)).contains("`keys` takes a list of templates"));
        assert!(error(quote!(keys = ["a", 1])).contains("`keys` takes template strings"));
        assert!(error(quote!(keys = ["a:<x>", "a:<x>"])).contains("listed twice"));
        // Every template is checked, and every problem reported.
        let all = error(quote!(keys = ["<>", "ok", "a<b", 7]));
        assert_eq!(all.lines().count(), 3, "{all}");
        assert!(!all.contains("missing `key`"), "{all}");
    }

    #[test]
    fn permits_make_a_semaphore() {
        let options = Options::parse(quote!(key = "exports", permits = 3)).unwrap();
        assert_eq!(options.kind, Kind::Permits(3));
        let options = Options::parse(quote!(key = "exports", permits = 1u32)).unwrap();
        assert_eq!(options.kind, Kind::Permits(1));
    }

    #[test]
    fn rejects_bad_permits() {
        assert!(
            error(quote!(key = "k", permits = 0)).contains("`permits = 0` would let nobody in")
        );
        assert!(error(quote!(key = "k", permits = "3")).contains("write `permits = 3`"));
        assert!(error(quote!(key = "k", permits = -1)).contains("`permits` is at least 1"));
        assert!(
            error(quote!(key = "k", permits = 2.5)).contains("`permits` takes how many holders")
        );
        assert!(
            error(quote!(key = "k", permits = 3i64)).contains("`permits` takes how many holders")
        );
        assert!(error(quote!(key = "k", permits = n)).contains("`permits` takes how many holders"));
        assert!(error(quote!(key = "k", permits = 4294967296)).contains("at most 4294967295"));
    }

    #[test]
    fn min_replicas_is_a_whole_number() {
        for (args, replicas) in [
            (quote!(key = "k", min_replicas = 1), 1),
            (quote!(key = "k", min_replicas = 0), 0),
            (quote!(key = "k", min_replicas = 2u32), 2),
            (quote!(key = "k", min_replicas = 4294967295), u32::MAX),
            (quote!(keys = ["a", "b"], min_replicas = 1), 1),
            (quote!(key = "k", permits = 3, min_replicas = 1), 1),
            (quote!(key = "k", mode = "read", min_replicas = 1), 1),
            (quote!(key = "k", fair = true, min_replicas = 1), 1),
        ] {
            let options = Options::parse(args.clone()).unwrap_or_else(|e| panic!("{args}: {e}"));
            assert_eq!(options.min_replicas, Some(replicas), "{args}");
        }
        // The kind of lock is not changed by it.
        let options = Options::parse(quote!(key = "k", permits = 3, min_replicas = 1)).unwrap();
        assert_eq!(options.kind, Kind::Permits(3));
    }

    #[test]
    fn rejects_bad_min_replicas() {
        assert!(error(quote!(key = "k", min_replicas = "1")).contains("write `min_replicas = 1`"));
        assert!(
            error(quote!(key = "k", min_replicas = -1))
                .contains("`min_replicas` cannot be negative")
        );
        assert!(
            error(quote!(key = "k", min_replicas = 4294967296))
                .contains("`min_replicas` is at most 4294967295")
        );
        for args in [
            quote!(key = "k", min_replicas = 1.5),
            quote!(key = "k", min_replicas = 1u8),
            quote!(key = "k", min_replicas = true),
            quote!(key = "k", min_replicas = replicas),
            quote!(key = "k", min_replicas = "one"),
        ] {
            let message = error(args.clone());
            assert!(
                message.contains("`min_replicas` takes how many replicas must confirm the lock"),
                "{args}: {message}"
            );
        }
        assert!(
            error(quote!(key = "k", min_replicas = 1, min_replicas = 2))
                .contains("`min_replicas` is given more than once")
        );
        assert_eq!(did_you_mean("min_replica", names()), Some("min_replicas"));
    }

    #[test]
    fn modes_pick_a_side_of_a_read_write_lock() {
        let read = Options::parse(quote!(key = "k", mode = "read")).unwrap();
        assert_eq!(read.kind, Kind::Read);
        // The write side is the plain lock.
        let write = Options::parse(quote!(key = "k", mode = "write")).unwrap();
        assert_eq!(write.kind, Kind::Exclusive);
        let read = Options::parse(quote!(key = "k", mode = "read", fair = false)).unwrap();
        assert_eq!(read.kind, Kind::Read);
    }

    #[test]
    fn fair_makes_a_fair_lock() {
        let fair = Options::parse(quote!(key = "k", fair = true)).unwrap();
        assert_eq!(fair.kind, Kind::Fair);
        let unfair = Options::parse(quote!(key = "k", fair = false)).unwrap();
        assert_eq!(unfair.kind, Kind::Exclusive);
    }

    #[test]
    fn rejects_bad_modes_and_fairness() {
        let unknown = error(quote!(key = "k", mode = "raed"));
        assert!(
            unknown.contains("unknown mode `raed`; did you mean `\"read\"`?"),
            "{unknown}"
        );
        assert!(
            error(quote!(key = "k", mode = "shared"))
                .contains("`\"read\"` (shared with other readers) or `\"write\"`")
        );
        assert!(error(quote!(key = "k", mode = write)).contains("write `mode = \"write\"`"));
        assert!(error(quote!(key = "k", mode = 1)).contains("`mode` takes `\"read\"`"));
        assert!(error(quote!(key = "k", fair = "true")).contains("write `fair = true`"));
        assert!(error(quote!(key = "k", fair = 1)).contains("`fair` takes `true`"));
    }

    #[test]
    fn rejects_contradictions_on_the_later_option() {
        let cases = [
            (
                quote!(key = "a", keys = ["b"]),
                "`key` and `keys` cannot be used together",
            ),
            (
                quote!(keys = ["b"], key = "a"),
                "`key` and `keys` cannot be used together",
            ),
            (
                quote!(keys = ["a"], permits = 2),
                "`permits` cannot be used with `keys`",
            ),
            (
                quote!(key = "a", permits = 2, mode = "write"),
                "`mode` cannot be used with `permits`",
            ),
            (
                quote!(key = "a", mode = "read", permits = 2),
                "`mode` cannot be used with `permits`",
            ),
            (
                quote!(key = "a", permits = 2, fair = true),
                "`fair = true` cannot be used with `permits`",
            ),
            (
                quote!(key = "a", mode = "read", fair = true),
                "`fair = true` cannot be used with `mode = \"read\"`",
            ),
            (
                quote!(key = "a", fair = true, mode = "write"),
                "`fair = true` cannot be used with `mode = \"write\"`",
            ),
            (
                quote!(keys = ["a"], fair = true),
                "`fair = true` cannot be used with `keys`",
            ),
            (
                quote!(keys = ["a"], mode = "read"),
                "`mode = \"read\"` cannot be used with `keys`",
            ),
        ];
        for (args, expected) in cases {
            let message = error(args.clone());
            assert!(message.contains(expected), "{args}: {message}");
        }
        // `fair = false` is the default, and contradicts nothing.
        assert!(Options::parse(quote!(key = "a", permits = 2, fair = false)).is_ok());
        assert!(Options::parse(quote!(keys = ["a", "b"], fair = false)).is_ok());
    }

    #[test]
    fn contradictions_are_reported_with_other_errors() {
        // Invalid values still count as given: no "missing `key`", and the
        // contradiction is reported next to the value's own error.
        let all = error(quote!(key = "<>", keys = [], permits = 0));
        assert!(!all.contains("missing `key`"), "{all}");
        assert!(
            all.contains("`key` and `keys` cannot be used together"),
            "{all}"
        );
        assert!(
            all.contains("`permits` cannot be used with `keys`"),
            "{all}"
        );
        assert_eq!(all.lines().count(), 5, "{all}");
    }

    #[test]
    fn scheduled_job_options() {
        let options = Options::parse(quote!(
            key = "job:report",
            lock_at_most = "10m",
            lock_at_least = "30s",
            on_busy = "skip",
            wait = "0s",
        ))
        .unwrap();
        assert_eq!(options.lock_at_most, Some(600_000));
        assert_eq!(options.lock_at_least, Some(30_000));
        assert!(matches!(options.on_busy, OnBusy::Skip(_)));
        assert_eq!(options.lease, None);

        let options = Options::parse(quote!(key = "k")).unwrap();
        assert!(options.lock_at_most.is_none() && options.lock_at_least.is_none());
        assert!(matches!(options.on_busy, OnBusy::Error));
        let options = Options::parse(quote!(key = "k", on_busy = "error")).unwrap();
        assert!(matches!(options.on_busy, OnBusy::Error));

        // `lock_at_least` may exceed a renewed lease, and equal `lock_at_most`.
        for args in [
            quote!(key = "k", lease = "1s", lock_at_least = "1m"),
            quote!(key = "k", lock_at_most = "1m", lock_at_least = "1m"),
            quote!(key = "k", lock_at_most = "100ms"),
            quote!(key = "k", lock_at_least = "1ms"),
            quote!(keys = ["a", "b"], lock_at_least = "1s"),
            quote!(key = "k", fair = true, lock_at_least = "1s"),
            quote!(key = "k", mode = "write", lock_at_least = "1s"),
            quote!(
                key = "k",
                permits = 2,
                lock_at_most = "1s",
                on_busy = "skip"
            ),
            quote!(
                key = "k",
                mode = "read",
                lock_at_most = "1s",
                on_busy = "skip"
            ),
        ] {
            assert!(Options::parse(args.clone()).is_ok(), "{args}");
        }
    }

    #[test]
    fn rejects_bad_scheduled_job_options() {
        let cases = [
            (
                quote!(key = "k", lock_at_most = 10),
                "`lock_at_most` takes a duration string with a unit, like `lock_at_most = \"10s\"`",
            ),
            (
                quote!(key = "k", lock_at_most = "0s"),
                "`lock_at_most` must be longer than zero",
            ),
            (
                quote!(key = "k", lock_at_most = "99ms"),
                "`lock_at_most = \"99ms\"` is too short",
            ),
            (
                quote!(key = "k", lock_at_most = "10min"),
                "`lock_at_most`: `10min`: unknown unit `min`",
            ),
            (
                quote!(key = "k", lock_at_least = "9223372036854775808ms"),
                "`lock_at_least`: `9223372036854775808ms` is too long",
            ),
            (
                quote!(key = "k", lock_at_least = "0ms"),
                "`lock_at_least` must be longer than zero",
            ),
            (
                quote!(key = "k", lock_at_least = 30),
                "like `lock_at_least = \"30s\"`",
            ),
            (
                quote!(key = "k", on_busy = "skp"),
                "unknown `on_busy` value `skp`; did you mean `\"skip\"`? `on_busy` takes `\"error\"`",
            ),
            (
                quote!(key = "k", on_busy = "ignore"),
                "unknown `on_busy` value `ignore`; `on_busy` takes `\"error\"` (return `LockError::Timeout` \
                 as an error, the default) or `\"skip\"`",
            ),
            (
                quote!(key = "k", on_busy = skip),
                "`on_busy` takes a string: write `on_busy = \"skip\"`",
            ),
            (
                quote!(key = "k", on_busy = true),
                "`on_busy` takes `\"error\"`",
            ),
            (
                quote!(key = "k", on_busy = "skip", on_busy = "skip"),
                "`on_busy` is given more than once",
            ),
            (
                quote!(key = "k", lock_at_most = "1m", lock_at_most = "2m"),
                "`lock_at_most` is given more than once",
            ),
        ];
        for (args, expected) in cases {
            let message = error(args.clone());
            assert!(message.contains(expected), "{args}: {message}");
        }
        assert_eq!(
            did_you_mean("lock_at_most_for", names()),
            Some("lock_at_most")
        );
        assert_eq!(did_you_mean("lock_at_lest", names()), Some("lock_at_least"));
        assert_eq!(did_you_mean("on_bussy", names()), Some("on_busy"));
    }

    #[test]
    fn rejects_scheduled_job_contradictions_on_the_later_option() {
        let cases = [
            (
                quote!(key = "k", lease = "1m", lock_at_most = "10m"),
                "`lock_at_most` and `lease` cannot be used together: both set the lock's lease",
            ),
            (
                quote!(key = "k", lock_at_most = "10m", lease = "1m"),
                "keep `lock_at_most` for a lease that is never renewed",
            ),
            (
                quote!(key = "k", lock_at_most = "30s", lock_at_least = "1m"),
                "`lock_at_least = \"1m\"` is longer than `lock_at_most = \"30s\"`",
            ),
            (
                quote!(key = "k", lock_at_least = "1m30s", lock_at_most = "1m"),
                "make `lock_at_least` shorter, or `lock_at_most` longer",
            ),
            (
                quote!(key = "k", permits = 2, lock_at_least = "1s"),
                "`lock_at_least` cannot be used with `permits`",
            ),
            (
                quote!(key = "k", lock_at_least = "1s", mode = "read"),
                "`lock_at_least` cannot be used with `mode = \"read\"`",
            ),
        ];
        for (args, expected) in cases {
            let message = error(args.clone());
            assert!(message.contains(expected), "{args}: {message}");
            assert_eq!(message.lines().count(), 1, "{args}: {message}");
        }
    }

    #[test]
    fn lease_at_the_minimum_is_accepted() {
        assert!(Options::parse(quote!(key = "k", lease = "100ms")).is_ok());
    }

    #[test]
    fn reports_all_errors_together() {
        let all = error(quote!(
            key = "<>",
            lease = "0s",
            wait = "1x",
            nope = 1,
            key = "again"
        ));
        assert_eq!(all.lines().count(), 5, "{all}");
        assert!(!all.contains("missing `key`"));
    }

    #[test]
    fn syntax_errors_stop_parsing() {
        assert!(error(quote!(key "k")).contains("expected `key = ...`"));
        assert!(error(quote!(key = "k" lease = "1s")).contains("expected `,`"));
    }

    #[test]
    fn suggestions() {
        assert_eq!(did_you_mean("leese", names()), Some("lease"));
        assert_eq!(did_you_mean("wiat", names()), Some("wait"));
        assert_eq!(did_you_mean("kyes", names()), Some("keys"));
        assert_eq!(did_you_mean("permit", names()), Some("permits"));
        assert_eq!(did_you_mean("fiar", names()), Some("fair"));
        assert_eq!(did_you_mean("mod", names()), Some("mode"));
        assert_eq!(did_you_mean("timeout", names()), None);
        assert_eq!(did_you_mean("order", ["order_id", "db"]), Some("order_id"));
        assert_eq!(did_you_mean("db_pool", ["order_id", "db"]), Some("db"));
        assert_eq!(did_you_mean("o", ["order_id"]), None);
        assert_eq!(distance("kitten", "sitting"), 3);
    }
}
