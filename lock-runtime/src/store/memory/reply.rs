//! Replies as Redis builds them (RESP2 shapes), and the number formats and
//! parsers Redis uses, so that strings written and read back match byte for
//! byte.

use redis::Value;

/// One reply, before it becomes a [`redis::Value`] or a Lua value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reply {
    /// A null bulk string (`$-1`).
    Nil,
    /// An integer (`:`).
    Int(i64),
    /// A bulk string (`$`).
    Bulk(Vec<u8>),
    /// A status (`+`), without the `+`.
    Status(String),
    /// An error (`-`), without the `-`: the code, a space, the message.
    Error(String),
    /// An array (`*`).
    Array(Vec<Reply>),
}

/// The reply to a command against a key of another type.
pub(crate) const WRONGTYPE: &str =
    "WRONGTYPE Operation against a key holding the wrong kind of value";
pub(crate) const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
pub(crate) const NOT_FLOAT: &str = "ERR value is not a valid float";
pub(crate) const SYNTAX: &str = "ERR syntax error";
pub(crate) const OVERFLOW: &str = "ERR increment or decrement would overflow";

impl Reply {
    /// An error reply from a message that starts with its code.
    pub(crate) fn error(message: impl Into<String>) -> Reply {
        Reply::Error(message.into())
    }

    /// `+OK`.
    pub(crate) fn ok() -> Reply {
        Reply::Status("OK".to_owned())
    }

    pub(crate) fn bulk(bytes: impl Into<Vec<u8>>) -> Reply {
        Reply::Bulk(bytes.into())
    }

    /// A score or other double, formatted as Redis 7.0 does (`%.17g`).
    pub(crate) fn double(value: f64) -> Reply {
        Reply::Bulk(format_double(value).into_bytes())
    }

    pub(crate) fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// The value redis-rs would have parsed from this reply on the wire.
    pub(crate) fn into_value(self) -> Value {
        match self {
            Reply::Nil => Value::Nil,
            Reply::Int(n) => Value::Int(n),
            Reply::Bulk(bytes) => Value::BulkString(bytes),
            Reply::Status(status) if status == "OK" => Value::Okay,
            Reply::Status(status) => Value::SimpleString(status),
            Reply::Error(message) => error_value(&message),
            Reply::Array(items) => Value::Array(items.into_iter().map(Reply::into_value).collect()),
        }
    }
}

/// A `Value::ServerError` with the code and detail redis-rs's own parser
/// would give it (its constructors are private, its parser is not).
pub(crate) fn error_value(message: &str) -> Value {
    let line = format!("-{}\r\n", single_line(message));
    match redis::parse_redis_value(line.as_bytes()) {
        Ok(value) => value,
        // Unreachable: an error line always parses.
        Err(_) => Value::SimpleString(message.to_owned()),
    }
}

/// Redis turns CR and LF into spaces in status and error replies.
pub(crate) fn single_line(text: &str) -> String {
    text.replace(['\r', '\n'], " ")
}

/// `printf("%.17g", value)`: how Redis 7.0 formats doubles in replies (scores)
/// and Lua numbers passed to `redis.call`.
pub(crate) fn format_double(value: f64) -> String {
    if value.is_nan() {
        return if value.is_sign_negative() {
            "-nan"
        } else {
            "nan"
        }
        .to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    if value == 0.0 {
        return if value.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    const PRECISION: i32 = 17;
    let scientific = format!("{:.*e}", (PRECISION - 1) as usize, value);
    let (mantissa, exponent) = scientific
        .split_once('e')
        .expect("`{:e}` always writes an exponent");
    let exponent: i32 = exponent.parse().expect("`{:e}` writes an integer exponent");
    if !(-4..PRECISION).contains(&exponent) {
        let mantissa = trim_fraction(mantissa);
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    } else {
        let decimals = (PRECISION - 1 - exponent) as usize;
        trim_fraction(&format!("{value:.decimals$}")).to_owned()
    }
}

/// `%g` drops trailing zeros of the fraction, and the point if nothing is left.
fn trim_fraction(number: &str) -> &str {
    if number.contains('.') {
        number.trim_end_matches('0').trim_end_matches('.')
    } else {
        number
    }
}

/// Redis's `string2ll`: an optional `-`, then digits with no leading zero
/// (or just `0`), no sign `+`, no spaces, within `i64`.
pub(crate) fn parse_i64(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, bytes),
    };
    match digits {
        [] => return None,
        [b'0'] => return (!negative).then_some(0),
        [b'1'..=b'9', ..] => {}
        _ => return None,
    }
    let mut magnitude: u64 = 0;
    for &digit in digits {
        if !digit.is_ascii_digit() {
            return None;
        }
        magnitude = magnitude
            .checked_mul(10)?
            .checked_add(u64::from(digit - b'0'))?;
    }
    if negative {
        if magnitude == i64::MIN.unsigned_abs() {
            Some(i64::MIN)
        } else {
            i64::try_from(magnitude).ok().map(|n| -n)
        }
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// Redis's `getDoubleFromObject`: `strtod` over the whole string, no leading
/// space, no NaN, no overflow to infinity and no underflow to zero.
/// (Hexadecimal floats, which `strtod` reads, are not accepted here.)
pub(crate) fn parse_f64(bytes: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(bytes).ok()?;
    let value = parse_strtod(text)?;
    if value.is_infinite() && !is_infinity_literal(text) {
        return None; // ERANGE overflow
    }
    if value == 0.0 && has_nonzero_digit(text) {
        return None; // ERANGE underflow
    }
    Some(value)
}

/// A score bound of ZRANGEBYSCORE and friends: `(` for exclusive, then a
/// number as `strtod` reads it (here overflow and underflow are allowed).
pub(crate) fn parse_bound(bytes: &[u8]) -> Option<(f64, bool)> {
    let (exclusive, number) = match bytes {
        [b'(', rest @ ..] => (true, rest),
        _ => (false, bytes),
    };
    let value = parse_strtod(std::str::from_utf8(number).ok()?)?;
    Some((value, exclusive))
}

fn parse_strtod(text: &str) -> Option<f64> {
    if text.is_empty() || text.starts_with(|c: char| c.is_ascii_whitespace()) {
        return None;
    }
    let value: f64 = text.parse().ok()?;
    (!value.is_nan()).then_some(value)
}

fn is_infinity_literal(text: &str) -> bool {
    let unsigned = text.trim_start_matches(['+', '-']);
    unsigned.eq_ignore_ascii_case("inf") || unsigned.eq_ignore_ascii_case("infinity")
}

fn has_nonzero_digit(text: &str) -> bool {
    let mantissa = text.split(['e', 'E']).next().unwrap_or_default();
    mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_format_like_printf_g17() {
        // Values checked against `printf '%.17g'` and Redis 7.0 replies.
        for (value, expected) in [
            (0.1, "0.10000000000000001"),
            (1.5, "1.5"),
            (1700000000000000.0, "1700000000000000"),
            (1e20, "1e+20"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (1e16, "10000000000000000"),
            (0.0001, "0.0001"),
            (0.00001, "1.0000000000000001e-05"),
            (-2.5, "-2.5"),
            (3.0, "3"),
            (-0.0, "-0"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
        ] {
            assert_eq!(format_double(value), expected, "{value}");
        }
    }

    #[test]
    fn integers_parse_like_string2ll() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"-0",
            b"01",
            b"+1",
            b" 1",
            b"1 ",
            b"1.0",
            b"9223372036854775808",
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn floats_parse_like_get_double_from_object() {
        assert_eq!(parse_f64(b"1.5"), Some(1.5));
        assert_eq!(parse_f64(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_f64(b"+Infinity"), Some(f64::INFINITY));
        assert_eq!(parse_f64(b"1e3"), Some(1000.0));
        assert_eq!(parse_f64(b"0"), Some(0.0));
        assert_eq!(parse_f64(b"0.000e5"), Some(0.0));
        for bad in [&b""[..], b"nan", b" 1", b"1 ", b"abc", b"1e400", b"1e-400"] {
            assert_eq!(parse_f64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(parse_bound(b"(5"), Some((5.0, true)));
        assert_eq!(parse_bound(b"-inf"), Some((f64::NEG_INFINITY, false)));
        assert_eq!(parse_bound(b"(x"), None);
    }

    #[test]
    fn errors_become_server_errors_with_their_code() {
        let Value::ServerError(err) = Reply::error(WRONGTYPE).into_value() else {
            panic!("not a server error");
        };
        assert_eq!(err.code(), "WRONGTYPE");
        let Value::ServerError(err) =
            Reply::error("NOSCRIPT No matching script. Please use EVAL.").into_value()
        else {
            panic!("not a server error");
        };
        assert_eq!(err.kind(), Some(redis::ServerErrorKind::NoScript));
        assert_eq!(Reply::ok().into_value(), Value::Okay);
    }
}
