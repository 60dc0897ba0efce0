//! The password from the environment: written into every URL of the
//! deployment, and kept out of everything lockctl prints.

/// What replaces a password in messages.
const HIDDEN: &str = "***";

/// `url` with `password` in it, unless the URL has a password of its own,
/// which wins.
///
/// `redis://`, `rediss://` and the `valkey` spellings take it in the user
/// part (`redis://:PASSWORD@host`, or `redis://USER:PASSWORD@host` after a
/// user name), `unix://` and `redis+unix://` in the `pass` query parameter,
/// percent-encoded either way. A URL of another scheme is returned as it is
/// (lock-runtime refuses it with its own message).
pub(crate) fn with_password(url: &str, password: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match scheme.to_ascii_lowercase().as_str() {
        "redis" | "rediss" | "valkey" | "valkeys" => {
            let (authority, path) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
            let (user, host) = match authority.rsplit_once('@') {
                Some((userinfo, host)) => match userinfo.split_once(':') {
                    Some((_, own)) if !own.is_empty() => return url.to_owned(),
                    Some((user, _)) => (user, host),
                    None => (userinfo, host),
                },
                None => ("", authority),
            };
            format!("{scheme}://{user}:{}@{host}{path}", encode(password))
        }
        "unix" | "redis+unix" | "valkey+unix" => {
            let (base, fragment) = url.split_at(url.find('#').unwrap_or(url.len()));
            let query = base.split_once('?').map_or("", |(_, query)| query);
            let has_own = query.split('&').any(|pair| {
                pair.split_once('=')
                    .is_some_and(|(k, v)| k == "pass" && !v.is_empty())
            });
            if has_own {
                return url.to_owned();
            }
            let joint = match base.chars().last() {
                _ if !base.contains('?') => "?",
                Some('?' | '&') => "",
                _ => "&",
            };
            format!("{base}{joint}pass={}{fragment}", encode(password))
        }
        _ => url.to_owned(),
    }
}

/// Percent-encodes everything but the unreserved characters of RFC 3986,
/// which is right in a URL's user part and in a query value.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Decodes `%XX` sequences; anything else is kept as it is.
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .filter(|_| bytes[i] == b'%')
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The passwords a URL carries, as written in it (percent-encoded or not),
/// found as lock-runtime's messages find them to hide them: the password
/// of the user part, which ends at the last `@` (a password with a `/`,
/// `?`, `#` or `@` in it, not percent-encoded, is found whole), and every
/// `pass` or `password` parameter of the query read from the first `?`,
/// whatever the scheme and its case (redis-rs reads `UNIX://` as
/// `unix://`); where the text reads both ways (an `@` in a query's
/// password, a `?` in the user part's), both are found. A text that does
/// not parse as a URL is read the same way: it is quoted in the message
/// that says so.
fn passwords_in(url: &str) -> Vec<&str> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let in_user = rest
        .rfind('@')
        .and_then(|at| rest[..at].split_once(':'))
        .map(|(_, password)| password);
    let query = rest.split_once('?').map_or("", |(_, query)| query);
    let in_query = query
        .split(['&', '#'])
        .filter_map(|pair| pair.split_once('='))
        .filter(|(key, _)| key.eq_ignore_ascii_case("pass") || key.eq_ignore_ascii_case("password"))
        .map(|(_, value)| value);
    in_user
        .into_iter()
        .chain(in_query)
        .filter(|password| !password.is_empty())
        .collect()
}

/// Hides passwords in the text lockctl prints (no `Debug`: it holds them).
#[derive(Default)]
pub(crate) struct Redactor {
    /// Every spelling of every password, longest first.
    secrets: Vec<String>,
}

impl Redactor {
    /// Hides `password` and the passwords written in `urls`, in each of
    /// their spellings (as given, percent-encoded, percent-decoded, and with
    /// `+` for spaces as query strings decode them).
    pub(crate) fn new<'a>(
        password: Option<&str>,
        urls: impl IntoIterator<Item = &'a String>,
    ) -> Redactor {
        let mut secrets = Vec::new();
        let found = urls.into_iter().flat_map(|url| passwords_in(url));
        for secret in password.into_iter().chain(found) {
            for spelling in [
                secret.to_owned(),
                encode(secret),
                decode(secret),
                decode(&secret.replace('+', " ")),
            ] {
                if !spelling.is_empty() && !secrets.contains(&spelling) {
                    secrets.push(spelling);
                }
            }
        }
        // A longer spelling first, so that a shorter one inside it does not
        // leave the rest of it behind.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        Redactor { secrets }
    }

    /// `text` with every password replaced by `***`.
    pub(crate) fn hide(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for secret in &self.secrets {
            text = text.replace(secret.as_str(), HIDDEN);
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn puts_the_password_into_each_kind_of_url() {
        let cases = [
            ("redis://127.0.0.1:6379", "redis://:pw@127.0.0.1:6379"),
            ("redis://127.0.0.1:6379/2", "redis://:pw@127.0.0.1:6379/2"),
            (
                "rediss://host/?protocol=resp3",
                "rediss://:pw@host/?protocol=resp3",
            ),
            ("redis://alice@host:6379", "redis://alice:pw@host:6379"),
            ("redis://alice:@host", "redis://alice:pw@host"),
            ("redis://[::1]:6379/0", "redis://:pw@[::1]:6379/0"),
            ("valkeys://host", "valkeys://:pw@host"),
            ("unix:///run/redis.sock", "unix:///run/redis.sock?pass=pw"),
            (
                "redis+unix:///r.sock?db=1",
                "redis+unix:///r.sock?db=1&pass=pw",
            ),
            ("unix:///r.sock?pass=", "unix:///r.sock?pass=&pass=pw"),
        ];
        for (url, expected) in cases {
            assert_eq!(with_password(url, "pw"), expected, "{url}");
        }
    }

    #[test]
    fn a_password_in_the_url_wins() {
        for url in [
            "redis://:own@host:6379",
            "rediss://alice:own@host/1",
            "unix:///r.sock?pass=own",
            "unix:///r.sock?db=2&pass=own",
        ] {
            assert_eq!(with_password(url, "env"), url);
        }
    }

    #[test]
    fn other_urls_are_left_alone() {
        for url in ["host:6379", "http://host", ""] {
            assert_eq!(with_password(url, "pw"), url);
        }
    }

    #[test]
    fn special_characters_are_percent_encoded() {
        assert_eq!(
            with_password("redis://host", "p@ss:w/rd% +é"),
            "redis://:p%40ss%3Aw%2Frd%25%20%2B%C3%A9@host"
        );
        assert_eq!(decode("p%40ss%3Aw%2Frd%25%20%2B%C3%A9"), "p@ss:w/rd% +é");
        assert_eq!(decode("100%"), "100%");
    }

    #[test]
    fn finds_the_passwords_of_a_url() {
        assert_eq!(passwords_in("redis://:pw@host"), ["pw"]);
        assert_eq!(passwords_in("redis://u:p%40w@host/0?x=y"), ["p%40w"]);
        assert!(passwords_in("redis://u@host").is_empty());
        assert!(passwords_in("redis://host/a@b").is_empty());
        assert_eq!(passwords_in("unix:///s?db=1&pass=pw#x"), ["pw"]);
        assert_eq!(passwords_in("unix:///s?pass=&pass=a&pass=b"), ["a", "b"]);
        assert!(passwords_in("unix:///s?db=1").is_empty());
        // Not percent-encoded, with what ends a user part in a valid URL.
        assert_eq!(passwords_in("redis://:s3cr/et@host/"), ["s3cr/et"]);
        assert_eq!(passwords_in("redis://u:a?b#c@d@host"), ["a?b#c@d"]);
        assert_eq!(passwords_in("127.0.0.1:1"), Vec::<&str>::new());
        assert_eq!(passwords_in(":pw@127.0.0.1:1"), ["pw"]);
        // Any scheme, in any case, and either key.
        assert_eq!(passwords_in("UNIX:///s?pass=pw"), ["pw"]);
        assert_eq!(passwords_in("Redis+Unix:///s?PASSWORD=pw"), ["pw"]);
        assert_eq!(passwords_in("rediss://host/?password=pw"), ["pw"]);
        // An `@` in a query's password, or elsewhere in the query.
        assert_eq!(passwords_in("unix:///s?pass=p@ss"), ["p@ss"]);
        assert_eq!(passwords_in("unix:///s?user=a@corp&pass=pw"), ["pw"]);
        assert_eq!(passwords_in("redis://:pw@host/x?pass=a?b"), ["pw", "a?b"]);
        assert_eq!(
            passwords_in("redis://:ab?cd@host/?db=0&password=z"),
            ["ab?cd", "z"]
        );
    }

    #[test]
    fn hides_every_spelling() {
        let urls = ["redis://:from%20url@host".to_owned()];
        let redactor = Redactor::new(Some("p@ss"), &urls);
        let text = "bad Redis URL `redis://:p%40ss@h`: p@ss; from url, from%20url";
        assert_eq!(
            redactor.hide(text),
            "bad Redis URL `redis://:***@h`: ***; ***, ***"
        );
        assert_eq!(Redactor::default().hide(text), text);
    }
}
