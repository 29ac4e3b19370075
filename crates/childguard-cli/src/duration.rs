//! `--timeout` values: coreutils forms (`5`, `1.5`, `0.5s`, `2m`, `1h`, `1d`) and humantime
//! forms (`200ms`, `1min 30s`).

use std::time::Duration;

/// Parses a duration; `Ok(None)` for zero, which (as in `timeout(1)`) means "no timeout".
pub fn parse_timeout(text: &str) -> Result<Option<Duration>, String> {
    let text = text.trim();
    let duration = coreutils_form(text)
        .map(Ok)
        .unwrap_or_else(|| humantime::parse_duration(text).map_err(|e| e.to_string()))
        .map_err(|why| {
            format!("{why} (expected e.g. 200ms, 1.5s, 2min, or a number of seconds)")
        })?;
    Ok((!duration.is_zero()).then_some(duration))
}

/// A decimal number of seconds, optionally with a one-letter unit `s`, `m`, `h` or `d`.
fn coreutils_form(text: &str) -> Option<Duration> {
    let (number, per_unit) = match text.as_bytes().last()? {
        b's' => (&text[..text.len() - 1], 1.0),
        b'm' => (&text[..text.len() - 1], 60.0),
        b'h' => (&text[..text.len() - 1], 3600.0),
        b'd' => (&text[..text.len() - 1], 86400.0),
        _ => (text, 1.0),
    };
    // Only plain decimals: "inf", "nan", "1e3" and signs are left to humantime (and rejected).
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    let seconds: f64 = number.parse().ok()?;
    Duration::try_from_secs_f64(seconds * per_unit).ok()
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
        assert_eq!(parse_timeout("200ms"), ms(200));
        assert_eq!(parse_timeout("1min 30s"), ms(90_000));
    }

    #[test]
    fn zero_disables() {
        assert_eq!(parse_timeout("0"), Ok(None));
        assert_eq!(parse_timeout("0s"), Ok(None));
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "soon", "-1", "1x", "nan", "1e3"] {
            let err = parse_timeout(bad).unwrap_err();
            assert!(err.contains("expected e.g."), "{bad:?}: {err}");
        }
    }
}
