//! Durations as coreutils `timeout(1)` reads them, plus humantime forms for `childguard run`.
//!
//! GNU form: a floating-point number as C's `strtod` reads it in the C locale — optional sign,
//! decimal digits with an optional fraction and exponent (`2.34e+5`), or `inf`/`infinity` —
//! followed by at most one unit letter `s`, `m`, `h` or `d`. Negative values and NaN are
//! refused. Values too large for the clock saturate to [`Duration::MAX`] (effectively "never");
//! a positive value too small for a nanosecond, even one that underflows to zero (`1e-10000`),
//! becomes one nanosecond, the smallest timeout there is. Hexadecimal floats (`0x1p3`), which
//! `strtod` also reads, are not accepted.

use std::time::Duration;

/// Parses a `--timeout` of `childguard run`: the GNU form, else a humantime form (`200ms`,
/// `1min 30s`). `Ok(None)` for zero, which (as in `timeout(1)`) means "no timeout".
pub fn parse_timeout(text: &str) -> Result<Option<Duration>, String> {
    let duration = match gnu_form(text) {
        Some(parsed) => parsed?,
        None => humantime::parse_duration(text.trim()).map_err(|e| {
            format!("{e} (expected e.g. 200ms, 1.5s, 2min, or a number of seconds)")
        })?,
    };
    Ok((!duration.is_zero()).then_some(duration))
}

/// Parses a duration exactly as GNU `timeout` does (no humantime forms). `Ok(None)` for zero.
pub fn parse_gnu(text: &str) -> Result<Option<Duration>, String> {
    let duration = gnu_form(text).unwrap_or_else(|| {
        Err("not a number of seconds with an optional unit s, m, h or d".into())
    })?;
    Ok((!duration.is_zero()).then_some(duration))
}

/// `None`: not a number at all (so maybe a humantime form). `Some(Err)`: a number, but not a
/// valid interval (negative, NaN).
fn gnu_form(text: &str) -> Option<Result<Duration, String>> {
    // strtod skips leading white space; nothing may follow the unit letter.
    let text = text.trim_start();
    let (number, per_unit) = match text.as_bytes().last()? {
        b's' => (&text[..text.len() - 1], 1.0),
        b'm' => (&text[..text.len() - 1], 60.0),
        b'h' => (&text[..text.len() - 1], 3600.0),
        b'd' => (&text[..text.len() - 1], 86400.0),
        _ => (text, 1.0),
    };
    // `inf` and `nan` end in letters that are no unit, so they are parsed whole.
    let seconds = number.parse::<f64>().ok()? * per_unit;
    // `-1e-10000` underflows to -0.0 but is still a negative interval; `-0` is zero.
    let negative = seconds < 0.0 || (number.starts_with('-') && has_nonzero_digit(number));
    if seconds.is_nan() || negative {
        return Some(Err("not a nonnegative interval".into()));
    }
    if seconds == 0.0 && !has_nonzero_digit(number) {
        return Some(Ok(Duration::ZERO));
    }
    Some(Ok(saturating(seconds)))
}

/// Whether the mantissa (before any exponent) has a digit other than 0: then a zero result
/// is an underflow, not a zero.
fn has_nonzero_digit(number: &str) -> bool {
    number
        .bytes()
        .take_while(|b| !matches!(b, b'e' | b'E'))
        .any(|b| (b'1'..=b'9').contains(&b))
}

/// Positive seconds as a Duration, rounded up to a whole nanosecond (at least one), and
/// saturating at [`Duration::MAX`].
fn saturating(seconds: f64) -> Duration {
    if seconds >= Duration::MAX.as_secs_f64() {
        return Duration::MAX;
    }
    let whole = seconds.trunc();
    let nanos = ((seconds - whole) * 1e9).ceil();
    let duration = match Duration::try_from_secs_f64(whole) {
        Ok(d) => d.saturating_add(Duration::from_nanos(nanos as u64)),
        Err(_) => Duration::MAX,
    };
    duration.max(Duration::from_nanos(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Result<Option<Duration>, String> {
        Ok(Some(Duration::from_millis(n)))
    }

    #[test]
    fn coreutils_and_humantime_forms() {
        assert_eq!(parse_timeout("5"), ms(5000));
        assert_eq!(parse_timeout("1.5"), ms(1500));
        assert_eq!(parse_timeout("0.5s"), ms(500));
        assert_eq!(parse_timeout("2m"), ms(120_000));
        assert_eq!(parse_timeout("1h"), ms(3_600_000));
        assert_eq!(parse_timeout("1d"), ms(86_400_000));
        assert_eq!(parse_timeout("200ms"), ms(200));
        assert_eq!(parse_timeout("1min 30s"), ms(90_000));
        assert_eq!(parse_timeout(" .5"), ms(500));
        assert_eq!(parse_timeout("+2"), ms(2000));
    }

    #[test]
    fn exponents_and_huge_values() {
        assert_eq!(
            parse_gnu("2.34e+5d"),
            Ok(Some(Duration::from_secs(234_000 * 86_400)))
        );
        assert_eq!(parse_gnu("1e3"), ms(1_000_000));
        for huge in [
            "9223372036854775808",
            "10000000000000000000",
            "9223372036854775808d",
            "1.189731495357231765e+4932",
            "inf",
            "infinity",
            "INFs",
            "1e400d",
        ] {
            let parsed = parse_gnu(huge).unwrap().unwrap();
            assert!(parsed.as_secs() >= 1 << 63, "{huge}: {parsed:?}");
        }
    }

    #[test]
    fn underflow_is_the_smallest_timeout() {
        assert_eq!(parse_gnu("1e-10000"), Ok(Some(Duration::from_nanos(1))));
        assert_eq!(parse_gnu("1e-12"), Ok(Some(Duration::from_nanos(1))));
        assert_eq!(parse_gnu("0.0000000015"), Ok(Some(Duration::from_nanos(2))));
    }

    #[test]
    fn zero_disables() {
        for zero in ["0", "0s", "0.0", "-0", "0e99", "0d"] {
            assert_eq!(parse_gnu(zero), Ok(None), "{zero}");
        }
        assert_eq!(parse_timeout("0"), Ok(None));
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "", "soon", "-1", "1x", "nan", "1e", "1ss", "0x10", "1 s", "-inf",
        ] {
            assert!(parse_gnu(bad).is_err(), "{bad:?}");
        }
        for bad in ["", "soon", "-1", "1x", "nan"] {
            assert!(parse_timeout(bad).is_err(), "{bad:?}");
        }
    }
}
