//! The attribute's options: `key`, `lease`, `wait`, `client`, `crate`.
//!
//! Every option is parsed by one setter that rejects a repeat and checks the
//! value, so a misspelt, repeated or malformed option is reported on its own
//! tokens, and all of them are reported together.

use proc_macro2::{Span, TokenStream};
use syn::ext::IdentExt as _;
use syn::parse::{ParseStream, Parser as _};
use syn::spanned::Spanned as _;
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Path, Token};

use crate::duration::{self, MIN_LEASE_MS};
use crate::key::{self, Template};

/// The options, in the order the docs list them.
const KNOWN: &str = "`key`, `lease`, `wait`, `client` or `crate`";
const NAMES: [&str; 5] = ["key", "lease", "wait", "client", "crate"];

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

/// The options of one attribute.
pub(crate) struct Options {
    pub(crate) key: Template,
    /// Milliseconds; `None` leaves the client's default.
    pub(crate) lease: Option<u64>,
    /// Milliseconds; `None` leaves the client's default.
    pub(crate) wait: Option<u64>,
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
                        format!("expected `{name} = ...`; the options are {KNOWN}, each written as `name = value`"),
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
                "missing `key`: name the lock, like `#[distributed_lock(key = \"order:<order_id>\")]`",
            )
        };
        if complete && !setters.key_given {
            errors.push(missing());
        }
        errors.finish()?;
        Ok(Options {
            // Without errors, the key was given and valid.
            key: setters.key.ok_or_else(missing)?,
            lease: setters.lease,
            wait: setters.wait,
            client: setters.client,
            krate: setters.krate,
        })
    }
}

/// One setter per option, each rejecting a repeat.
#[derive(Default)]
struct Setters {
    key: Option<Template>,
    /// Set even when the template is invalid, so that "missing `key`" is
    /// not reported on top of the template's own errors.
    key_given: bool,
    lease: Option<u64>,
    wait: Option<u64>,
    client: Option<Expr>,
    krate: Option<Path>,
    /// The option names seen.
    seen: Vec<String>,
}

impl Setters {
    fn set(&mut self, name: &Ident, value: Expr) -> syn::Result<()> {
        let text = name.unraw().to_string();
        if !NAMES.contains(&text.as_str()) {
            let hint = did_you_mean(&text, NAMES)
                .map(|known| format!("did you mean `{known}`? "))
                .unwrap_or_default();
            return Err(syn::Error::new(
                name.span(),
                format!("unknown option `{text}`; {hint}the options are {KNOWN}"),
            ));
        }
        if self.seen.contains(&text) {
            return Err(syn::Error::new(
                name.span(),
                format!("`{text}` is given more than once; keep one"),
            ));
        }
        self.seen.push(text.clone());
        match text.as_str() {
            "key" => self.set_key(value),
            "lease" => self.set_lease(value),
            "wait" => self.set_wait(value),
            "client" => self.set_client(value),
            _ => self.set_crate(value),
        }
    }

    fn set_key(&mut self, value: Expr) -> syn::Result<()> {
        self.key_given = true;
        let lit = string(
            &value,
            "key",
            "a template string, like `key = \"order:<order_id>\"`",
        )?;
        self.key = Some(key::parse(&lit)?);
        Ok(())
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
        self.lease = Some(ms);
        Ok(())
    }

    fn set_wait(&mut self, value: Expr) -> syn::Result<()> {
        let (_, ms) = duration_option(&value, "wait", "5s")?;
        self.wait = Some(ms);
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
        _ => Err(syn::Error::new(
            value.span(),
            format!("`{option}` takes {expected}"),
        )),
    }
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
            Err(err) => err
                .into_iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    #[test]
    fn parses_every_option() {
        let options = Options::parse(quote!(
            key = "order:<id>",
            lease = "1m30s",
            wait = "0s",
            client = self.locks,
            crate = "::my::locks",
        ))
        .unwrap();
        assert_eq!(options.key.pieces.len(), 2);
        assert_eq!(options.lease, Some(90_000));
        assert_eq!(options.wait, Some(0));
        assert!(options.client.is_some());
        assert!(options.krate.is_some());
    }

    #[test]
    fn lease_and_wait_default_to_none() {
        let options = Options::parse(quote!(key = "k")).unwrap();
        assert!(options.lease.is_none() && options.wait.is_none() && options.client.is_none());
    }

    #[test]
    fn key_is_required() {
        assert!(error(quote!()).contains("missing `key`"));
        assert!(error(quote!(lease = "1s")).contains("missing `key`"));
    }

    #[test]
    fn rejects_unknown_and_repeated_options() {
        let unknown = error(quote!(key = "k", leese = "1s"));
        assert!(
            unknown.contains("unknown option `leese`; did you mean `lease`?"),
            "{unknown}"
        );
        assert!(unknown.contains("`key`, `lease`, `wait`, `client` or `crate`"));
        assert!(!error(quote!(key = "k", bogus = 1)).contains("did you mean"));
        assert!(error(quote!(key = "a", key = "b")).contains("`key` is given more than once"));
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
        assert_eq!(did_you_mean("leese", NAMES), Some("lease"));
        assert_eq!(did_you_mean("wiat", NAMES), Some("wait"));
        assert_eq!(did_you_mean("keys", NAMES), Some("key"));
        assert_eq!(did_you_mean("timeout", NAMES), None);
        assert_eq!(did_you_mean("order", ["order_id", "db"]), Some("order_id"));
        assert_eq!(did_you_mean("db_pool", ["order_id", "db"]), Some("db"));
        assert_eq!(did_you_mean("o", ["order_id"]), None);
        assert_eq!(distance("kitten", "sitting"), 3);
    }
}
