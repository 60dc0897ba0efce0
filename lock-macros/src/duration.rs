//! Duration literals: `"500ms"`, `"30s"`, `"5m"`, `"2h"` and combinations
//! such as `"1m30s"`, parsed at compile time into milliseconds.

/// The shortest lease the runtime accepts, in milliseconds.
///
/// This is `lock_runtime::MIN_LEASE`: the watchdog renews a lock every third
/// of its lease, and a renewal must make a round trip to Redis and be
/// confirmed well within that window. The runtime depends on this crate, not
/// the other way round, so the value is repeated here; keep the two in step.
pub(crate) const MIN_LEASE_MS: u64 = 100;

/// The longest lease the runtime accepts, in milliseconds: one year, as
/// `lock_runtime::MAX_LEASE` (repeated here as [`MIN_LEASE_MS`] is; keep
/// the two in step). A lease, `lock_at_most` or `lock_at_least` past it
/// could never be taken.
pub(crate) const MAX_LEASE_MS: u64 = 365 * 24 * 3_600_000;

/// The longest duration: what fits in Redis's signed 64-bit milliseconds
/// (a lease is sent as `PX`).
const MAX_MS: u64 = i64::MAX as u64;

/// The units, largest first.
const UNITS: [(&str, u64); 4] = [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];

/// Parses a duration literal into milliseconds. The error is a message to
/// show on the literal.
pub(crate) fn parse(text: &str) -> Result<u64, String> {
    const EXAMPLES: &str = "like `500ms`, `30s`, `5m`, `2h` or `1m30s`";
    if text.is_empty() {
        return Err(format!(
            "empty duration: write a number and a unit, {EXAMPLES}"
        ));
    }
    if text.chars().any(char::is_whitespace) {
        return Err(format!(
            "`{text}`: write durations without spaces, {EXAMPLES}"
        ));
    }

    let mut total: u64 = 0;
    // Index into UNITS of the last unit used: units must get smaller.
    let mut last: Option<usize> = None;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            let found = rest.chars().next().unwrap_or_default();
            return Err(format!(
                "`{text}` is not a duration: expected a number, found `{found}`; write durations {EXAMPLES}"
            ));
        }
        let (number, after) = rest.split_at(digits);
        if after.starts_with(['.', ',']) {
            return Err(format!(
                "`{text}`: fractions are not supported; use a smaller unit, like `1500ms` for one and a half seconds"
            ));
        }
        let unit_len = after.len() - after.trim_start_matches(|c: char| c.is_alphabetic()).len();
        let (unit, after) = after.split_at(unit_len);
        if unit.is_empty() {
            return Err(format!(
                "`{text}`: missing unit after `{number}`; write `{number}ms`, `{number}s`, `{number}m` or `{number}h`"
            ));
        }
        let Some(index) = UNITS.iter().position(|(name, _)| *name == unit) else {
            return Err(format!(
                "`{text}`: unknown unit `{unit}`; use `ms`, `s`, `m` or `h`"
            ));
        };
        if last.is_some_and(|last| index <= last) {
            return Err(format!(
                "`{text}`: units go from largest to smallest, each at most once, like `1h30m` or `1m30s`"
            ));
        }
        last = Some(index);
        let too_long = || format!("`{text}` is too long: a duration must fit in {MAX_MS} ms");
        let number: u64 = number.parse().map_err(|_| too_long())?;
        total = number
            .checked_mul(UNITS[index].1)
            .and_then(|ms| total.checked_add(ms))
            .filter(|&ms| ms <= MAX_MS)
            .ok_or_else(too_long)?;
        rest = after;
    }
    Ok(total)
}

/// Formats milliseconds the way a user would write them.
pub(crate) fn display(mut ms: u64) -> String {
    if ms == 0 {
        return "0ms".to_owned();
    }
    let mut out = String::new();
    for (name, size) in UNITS {
        if ms >= size {
            out.push_str(&format!("{}{name}", ms / size));
            ms %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_units() {
        assert_eq!(parse("0s"), Ok(0));
        assert_eq!(parse("250ms"), Ok(250));
        assert_eq!(parse("30s"), Ok(30_000));
        assert_eq!(parse("5m"), Ok(300_000));
        assert_eq!(parse("2h"), Ok(7_200_000));
    }

    #[test]
    fn combinations() {
        assert_eq!(parse("1m30s"), Ok(90_000));
        assert_eq!(parse("1h1m1s1ms"), Ok(3_661_001));
        assert_eq!(parse("1s500ms"), Ok(1_500));
        assert_eq!(parse("90s"), Ok(90_000));
    }

    #[test]
    fn rejects_malformed_input() {
        for bad in [
            "", "30", "s", "-5s", "1.5s", "30 s", " 30s", "5sec", "5d", "5us", "30s1m", "1s1s",
            "1ms1s", "s30", "5S",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn messages_name_the_problem() {
        assert!(parse("30").unwrap_err().contains("missing unit after `30`"));
        assert!(parse("5sec").unwrap_err().contains("unknown unit `sec`"));
        assert!(parse("1.5s").unwrap_err().contains("`1500ms`"));
        assert!(parse("30s1m").unwrap_err().contains("largest to smallest"));
        assert!(parse("1 m").unwrap_err().contains("without spaces"));
    }

    #[test]
    fn overflow_is_an_error() {
        assert_eq!(parse("9223372036854775807ms"), Ok(i64::MAX as u64));
        assert!(
            parse("9223372036854775808ms")
                .unwrap_err()
                .contains("too long")
        );
        assert!(
            parse("18446744073709551616ms")
                .unwrap_err()
                .contains("too long")
        );
        assert!(
            parse("9223372036854775807s")
                .unwrap_err()
                .contains("too long")
        );
        assert!(parse("2562047788015h1ms").is_ok());
        assert!(parse("2562047788016h").unwrap_err().contains("too long"));
        assert!(parse("2562047788015h59m").unwrap_err().contains("too long"));
    }

    #[test]
    fn displays_like_the_input_syntax() {
        assert_eq!(display(0), "0ms");
        assert_eq!(display(50), "50ms");
        assert_eq!(display(90_000), "1m30s");
        assert_eq!(display(3_661_001), "1h1m1s1ms");
    }
}
