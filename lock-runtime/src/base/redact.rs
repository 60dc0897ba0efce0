//! Connection URLs as they may be shown: in `Debug` output, error messages
//! and `tracing` fields, with their passwords replaced by `***`.

use std::borrow::Cow;
use std::fmt;

/// What a password is shown as.
const HIDDEN: &str = "***";

/// `url` with its password replaced by `***`, for messages.
///
/// The password of the user part (`redis://user:PASSWORD@host`,
/// `rediss://:PASSWORD@host`) and that of a `pass` query parameter
/// (`redis+unix:///run/redis.sock?pass=PASSWORD`) are hidden; the user name,
/// host, port, database and everything else stay. It works on text that is
/// not a valid URL too (that is when a bad URL is reported): the user part
/// is taken to end at the last `@`, so that a password with a `/`, `?`, `#`
/// or `@` in it, not percent-encoded, is hidden whole. And the value of a
/// `pass` parameter of the query read from the first `?` is hidden too,
/// wherever it shows: an `@` in it, not percent-encoded, would otherwise
/// have been read as the end of the user part. A text without `://` is
/// read the same way, as a URL with its scheme left out.
pub(crate) fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    // Both readings' passwords first (see above), each where it stands.
    let masked = hide_ranges(rest, &password_ranges(rest));
    let rest = &*masked;
    let mut out = String::with_capacity(url.len());
    if let Some(scheme) = scheme {
        out.push_str(scheme);
        out.push_str("://");
    }
    let after_user = match rest.rfind('@') {
        Some(at) => {
            let (user, password) = rest[..at].split_once(':').unwrap_or((&rest[..at], ""));
            out.push_str(user);
            if !password.is_empty() {
                out.push(':');
                out.push_str(HIDDEN);
            } else if rest[..at].contains(':') {
                out.push(':');
            }
            out.push('@');
            &rest[at + 1..]
        }
        None => rest,
    };
    match after_user.split_once('?') {
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            out.push_str(&redact_query(query));
        }
        None => out.push_str(after_user),
    }
    out
}

/// Where `rest` (a URL after its `://`) has passwords, in either reading:
/// the user part's, to the last `@`, and each `pass` or `password` value of
/// the query read from the first `?` (byte ranges).
fn password_ranges(rest: &str) -> Vec<std::ops::Range<usize>> {
    let offset = |part: &str| part.as_ptr() as usize - rest.as_ptr() as usize;
    let mut ranges = Vec::new();
    if let Some(at) = rest.rfind('@')
        && let Some(colon) = rest[..at].find(':')
        && colon + 1 < at
    {
        ranges.push(colon + 1..at);
    }
    if let Some((_, query)) = rest.split_once('?') {
        for pair in query
            .split(['&', '#'])
            .filter(|pair| is_password_param(pair))
        {
            if let Some((_, value)) = pair.split_once('=') {
                let start = offset(value);
                ranges.push(start..start + value.len());
            }
        }
    }
    ranges
}

/// `text` with each of `ranges` (merged where they overlap) replaced by
/// `***`.
fn hide_ranges<'a>(text: &'a str, ranges: &[std::ops::Range<usize>]) -> Cow<'a, str> {
    if ranges.is_empty() {
        return Cow::Borrowed(text);
    }
    let mut ranges = ranges.to_vec();
    ranges.sort_by_key(|range| range.start);
    let mut out = String::with_capacity(text.len());
    let mut shown = 0;
    for range in ranges {
        if range.end <= shown {
            continue;
        }
        out.push_str(&text[shown..range.start.max(shown)]);
        if range.start >= shown {
            out.push_str(HIDDEN);
        }
        shown = range.end;
    }
    out.push_str(&text[shown..]);
    Cow::Owned(out)
}

/// Whether `pair` (`key=value` of a query) gives a password: a `pass` or
/// `password` key, any case, with a value.
fn is_password_param(pair: &str) -> bool {
    pair.split_once('=').is_some_and(|(key, value)| {
        !value.is_empty()
            && (key.eq_ignore_ascii_case("pass") || key.eq_ignore_ascii_case("password"))
    })
}

/// A query string with the value of every `pass` (and `password`)
/// parameter hidden; a fragment after it stays.
fn redact_query(query: &str) -> String {
    let (pairs, fragment) = match query.split_once('#') {
        Some((pairs, fragment)) => (pairs, Some(fragment)),
        None => (query, None),
    };
    let mut out = pairs
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if is_password_param(pair) => format!("{key}={HIDDEN}"),
            _ => pair.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&");
    if let Some(fragment) = fragment {
        out.push('#');
        out.push_str(fragment);
    }
    out
}

/// URLs joined with `,`, each redacted: the address of a deployment of
/// several servers, for messages.
pub(crate) fn redact_urls(urls: &[String]) -> String {
    urls.iter()
        .map(|url| redact_url(url))
        .collect::<Vec<_>>()
        .join(",")
}

/// A URL that shows redacted (see [`redact_url`]) with `Display` and,
/// quoted as a string, with `Debug`.
pub(crate) struct Redacted<'a>(pub(crate) &'a str);

impl fmt::Display for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact_url(self.0))
    }
}

impl fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&redact_url(self.0), f)
    }
}

/// URLs that show redacted, as a list, with `Debug`.
pub(crate) struct RedactedList<'a>(pub(crate) &'a [String]);

impl fmt::Debug for RedactedList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|url| Redacted(url)))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn hides_the_password_and_keeps_the_rest() {
        let cases = [
            ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
            (
                "redis://:pw@127.0.0.1:6379/2",
                "redis://:***@127.0.0.1:6379/2",
            ),
            (
                "rediss://alice:pw@host/0?protocol=resp3",
                "rediss://alice:***@host/0?protocol=resp3",
            ),
            (
                "valkeys://alice:p%40w@host#insecure",
                "valkeys://alice:***@host#insecure",
            ),
            ("redis://alice@host", "redis://alice@host"),
            ("redis://alice:@host", "redis://alice:@host"),
            ("redis://[::1]:6379", "redis://[::1]:6379"),
            ("redis://u:pw@[::1]:6379", "redis://u:***@[::1]:6379"),
            (
                "redis+unix:///r.sock?db=1&pass=pw",
                "redis+unix:///r.sock?db=1&pass=***",
            ),
            (
                "unix:///r.sock?pass=pw&user=u#x",
                "unix:///r.sock?pass=***&user=u#x",
            ),
            ("unix:///r.sock?pass=", "unix:///r.sock?pass="),
            // An `@` in a query's password, not percent-encoded.
            ("unix:///r.sock?pass=p@ss", "unix:///r.sock?pass=***"),
            // A `?` in a user-part password, and a password in the query.
            (
                "redis://:ab?cd@host/?db=0&password=z",
                "redis://:***@host/?db=0&password=***",
            ),
            (
                "UNIX:///r.sock?user=a@corp&PASSWORD=pw",
                "UNIX:///r.sock?user=a@corp&PASSWORD=***",
            ),
            // Read both ways, both hidden: here to the last `@`, the user
            // part's password runs into the query's.
            ("redis://:pw@host/?password=p@ss", "redis://:***"),
            (
                "unix:///run/redis/redis.sock?pass=redis",
                "unix:///run/redis/redis.sock?pass=***",
            ),
            ("redis://u:p?pass=x@host", "redis://u:***"),
            ("redis://u:pw@host?pass=w@h", "redis://u:***"),
            ("", ""),
        ];
        for (url, shown) in cases {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn hides_the_password_of_a_bad_url_whole() {
        let cases = [
            ("redis://:p/w?d#x@host:port", "redis://:***@host:port"),
            ("redis://u:p@ss@host", "redis://u:***@host"),
            ("u:pw@host:6379", "u:***@host:6379"),
            ("http://u:pw@host", "http://u:***@host"),
            (
                "redis://:pw@host/x?pass=a?b",
                "redis://:***@host/x?pass=***",
            ),
        ];
        for (url, shown) in cases {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }
}
