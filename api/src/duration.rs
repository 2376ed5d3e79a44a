//! Go-style durations (`30s`, `1m30s`, `500ms`, `1.5h`), as Kubernetes configuration writes them.
//!
//! Parsed in whole nanoseconds with checked arithmetic, like Go's `time.ParseDuration`: a value
//! too long for Go (more than about 2,562,047 hours) is an error, never a panic.

use std::time::Duration;

/// A duration that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Nothing was given.
    #[error("empty duration")]
    Empty,
    /// Not a Go duration.
    #[error("invalid duration {0:?} (e.g. 30s, 1m30s, 500ms)")]
    Invalid(String),
    /// A unit Go does not know.
    #[error("invalid duration {0:?} (units: ns, us, ms, s, m, h)")]
    Unit(String),
    /// Longer than Go's durations go (an int64 of nanoseconds).
    #[error("duration {0:?} is too long")]
    TooLong(String),
}

/// The longest duration Go represents: `i64::MAX` nanoseconds.
const MAX_NANOS: u128 = i64::MAX as u128;

/// Nanoseconds in one `unit`.
fn unit_nanos(unit: &str) -> Option<u128> {
    Some(match unit {
        "ns" => 1,
        // U+00B5 micro sign and U+03BC Greek small mu, as Go accepts both.
        "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    })
}

/// Parses a Go duration string: `0`, or one or more `<number><unit>` with a decimal number
/// (`1`, `1.5`, `.5`) and a unit of `ns`, `us`, `µs`, `ms`, `s`, `m` or `h`. No sign, no spaces.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    let invalid = || DurationError::Invalid(s.to_string());
    let too_long = || DurationError::TooLong(s.to_string());
    let mut total: u128 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = |r: &str| r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
        let whole_len = digits(rest);
        let (whole, after) = rest.split_at(whole_len);
        let (fraction, after) = match after.strip_prefix('.') {
            Some(f) => f.split_at(digits(f)),
            None => ("", after),
        };
        if whole.is_empty() && fraction.is_empty() {
            return Err(invalid());
        }
        let unit_len = after.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        if unit.is_empty() {
            return Err(invalid());
        }
        let scale = unit_nanos(unit).ok_or_else(|| DurationError::Unit(s.to_string()))?;
        let mut nanos: u128 = 0;
        for d in whole.bytes() {
            nanos = nanos
                .checked_mul(10)
                .and_then(|n| n.checked_add(u128::from(d - b'0')))
                .filter(|n| *n <= MAX_NANOS)
                .ok_or_else(too_long)?;
        }
        nanos = nanos.checked_mul(scale).filter(|n| *n <= MAX_NANOS).ok_or_else(too_long)?;
        // Digits past the 20th cannot add a nanosecond to any unit (an hour is < 10^13 ns).
        let (mut numerator, mut denominator) = (0u128, 1u128);
        for d in fraction.bytes().take(20) {
            numerator = numerator * 10 + u128::from(d - b'0');
            denominator *= 10;
        }
        nanos += numerator * scale / denominator;
        total = total.checked_add(nanos).filter(|n| *n <= MAX_NANOS).ok_or_else(too_long)?;
        rest = after;
    }
    // Fits: `total` is at most i64::MAX.
    Ok(Duration::from_nanos(u64::try_from(total).map_err(|_| too_long())?))
}

/// Formats a duration the way Go prints simple ones (`30s`; `1m0s` is written `60s`), exact to
/// the nanosecond so that it parses back to the same value.
pub fn format_duration(d: Duration) -> String {
    let nanos = d.subsec_nanos();
    if nanos == 0 {
        format!("{}s", d.as_secs())
    } else if nanos.is_multiple_of(1_000_000) {
        format!("{}ms", d.as_millis())
    } else if nanos.is_multiple_of(1_000) {
        format!("{}us", d.as_micros())
    } else {
        format!("{}ns", d.as_nanos())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration(".5s").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1.s").unwrap(), Duration::from_secs(1));
        assert_eq!(parse_duration("2us").unwrap(), Duration::from_micros(2));
        assert_eq!(parse_duration("2µs").unwrap(), Duration::from_micros(2));
        assert_eq!(parse_duration("0.000000001s").unwrap(), Duration::from_nanos(1));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("0s").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("2562047h").unwrap(), Duration::from_secs(2_562_047 * 3600));
        for bad in ["5 minutes", "s", "", ".s", "1", "1.5", "-1s", "+1s", " 1s", "1s ", "1x", "1..5s", "1sm"]
        {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn too_long_is_an_error_not_a_panic() {
        for long in [
            "9999999999999999999999h",
            "2562048h",
            "9223372036.854775808s",
            "99999999999999999999999999999999999999999999ns",
            "2562047h2562047h",
        ] {
            assert_eq!(parse_duration(long), Err(DurationError::TooLong(long.into())), "{long}");
        }
        assert!(parse_duration("9223372036.854775807s").is_ok());
    }

    #[test]
    fn formatted_durations_parse_back() {
        for d in
            [Duration::ZERO, Duration::from_secs(90), Duration::from_millis(250), Duration::from_nanos(1500)]
        {
            assert_eq!(parse_duration(&format_duration(d)).unwrap(), d);
        }
    }
}
