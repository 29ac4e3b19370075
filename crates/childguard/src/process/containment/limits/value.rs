//! The values of the limits, in systemd's spelling (`systemd.resource-control(5)`): sizes with
//! the base-1024 suffixes `K`, `M`, `G`, `T` (`512M`), task counts, `infinity`, and a CPU
//! quota as a percentage of one CPU (`50%`, `200%` for two CPUs).
//!
//! Refused with the value and why: an empty value, a negative or fractional count, a suffix
//! we do not know, a size that overflows 64 bits, a quota of 0% or one without `%`.
//! Where we differ from systemd: a percentage for `MemoryMax=`/`TasksMax=` (a share of the
//! machine's memory or task limit) is refused rather than resolved.

use std::fmt;

/// A limit's value: a number, or no limit at all (`infinity`, the kernel's `max`). In JSON: the
/// number, or `"infinity"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Amount {
    /// This many bytes (memory) or tasks.
    Some(u64),
    /// No limit (`infinity`; written as `max` in cgroup v2, `-1` in v1).
    Infinity,
}

impl Amount {
    /// The number, or `None` for no limit.
    pub fn get(self) -> Option<u64> {
        match self {
            Amount::Some(n) => Some(n),
            Amount::Infinity => None,
        }
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for Amount {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Amount::Some(n) => s.serialize_u64(*n),
            Amount::Infinity => s.serialize_str("infinity"),
        }
    }
}

/// Parses a size: `1024`, `512K`, `512M`, `2G`, `1T` (base 1024, as systemd), or `infinity`.
pub(crate) fn parse_bytes(text: &str) -> Result<Amount, String> {
    let t = text.trim();
    if t == "infinity" {
        return Ok(Amount::Infinity);
    }
    let (digits, shift) = match t.char_indices().last() {
        None => return Err("an empty size".into()),
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'B' => 0,
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => {
                    return Err(format!(
                        "unknown suffix {c:?} (a size is a number of bytes with K, M, G or T, \
                         or infinity)"
                    ))
                }
            };
            (&t[..i], shift)
        }
        Some(_) if t.ends_with('%') => {
            return Err("a percentage of the machine's memory is not supported: give a size".into())
        }
        Some(_) => (t, 0),
    };
    let n = parse_count(digits)?;
    n.checked_mul(1u64 << shift)
        .map(Amount::Some)
        .ok_or_else(|| "too large (over 2^64 bytes)".to_string())
}

/// Parses a task count: `100`, or `infinity`.
pub(crate) fn parse_tasks(text: &str) -> Result<Amount, String> {
    let t = text.trim();
    if t == "infinity" {
        return Ok(Amount::Infinity);
    }
    if t.ends_with('%') {
        return Err(
            "a percentage of the machine's task limit is not supported: give a count".into(),
        );
    }
    parse_count(t).map(Amount::Some)
}

/// Parses a CPU quota: `50%` of one CPU, `200%` for two; at least 1%.
pub(crate) fn parse_cpu_quota(text: &str) -> Result<u32, String> {
    let t = text.trim();
    let Some(digits) = t.strip_suffix('%') else {
        return Err("a CPU quota is a percentage of one CPU, such as 50% or 200%".into());
    };
    let n = parse_count(digits)?;
    match u32::try_from(n) {
        Ok(0) => Err("0% would stop the server: give at least 1%".into()),
        // 100,000% (1,000 CPUs) keeps quota × period within the kernel's bounds.
        Ok(p) if p <= 100_000 => Ok(p),
        _ => Err("too large (at most 100000%, a thousand CPUs)".into()),
    }
}

/// A plain decimal count: digits only (no sign, no fraction), within 64 bits.
fn parse_count(digits: &str) -> Result<u64, String> {
    if digits.is_empty() {
        return Err("no number".into());
    }
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{digits:?} is not a whole number (digits only: no sign, no fraction)"
        ));
    }
    digits
        .parse()
        .map_err(|_| format!("{digits} is too large (over 2^64)"))
}

/// A size as systemd prints it: the largest exact unit (`64M`, `1536K`), else bytes.
pub(crate) struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        for (shift, suffix) in [(40, 'T'), (30, 'G'), (20, 'M'), (10, 'K')] {
            if n != 0 && n % (1u64 << shift) == 0 {
                return write!(f, "{}{suffix}", n >> shift);
            }
        }
        if n >= 1 << 20 {
            // Not a whole unit (a peak usage): one decimal of the largest unit below it.
            let (shift, suffix) = if n >= 1 << 30 { (30, 'G') } else { (20, 'M') };
            return write!(f, "{:.1}{suffix}", n as f64 / (1u64 << shift) as f64);
        }
        write!(f, "{n}")
    }
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Amount::Some(n) => write!(f, "{n}"),
            Amount::Infinity => f.write_str("infinity"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_systemd_spelling() {
        assert_eq!(parse_bytes("512M"), Ok(Amount::Some(512 << 20)));
        assert_eq!(parse_bytes("64m"), Ok(Amount::Some(64 << 20)));
        assert_eq!(parse_bytes("1G"), Ok(Amount::Some(1 << 30)));
        assert_eq!(parse_bytes("4096"), Ok(Amount::Some(4096)));
        assert_eq!(parse_bytes("2T"), Ok(Amount::Some(2 << 40)));
        assert_eq!(parse_bytes("infinity"), Ok(Amount::Infinity));
    }

    #[test]
    fn bad_sizes_say_why() {
        assert!(parse_bytes("").unwrap_err().contains("empty"));
        assert!(parse_bytes("12Q").unwrap_err().contains("unknown suffix"));
        assert!(parse_bytes("-1").unwrap_err().contains("whole number"));
        assert!(parse_bytes("1.5G").unwrap_err().contains("whole number"));
        assert!(parse_bytes("50%").unwrap_err().contains("percentage"));
        assert!(parse_bytes("99999999999999T")
            .unwrap_err()
            .contains("too large"));
        assert!(parse_bytes("99999999999999999999999")
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn tasks_and_quota() {
        assert_eq!(parse_tasks("50"), Ok(Amount::Some(50)));
        assert_eq!(parse_tasks("infinity"), Ok(Amount::Infinity));
        assert!(parse_tasks("10%").is_err());
        assert!(parse_tasks("ten").is_err());
        assert_eq!(parse_cpu_quota("50%"), Ok(50));
        assert_eq!(parse_cpu_quota("250%"), Ok(250));
        assert!(parse_cpu_quota("50").unwrap_err().contains("percentage"));
        assert!(parse_cpu_quota("0%").unwrap_err().contains("at least 1%"));
        assert!(parse_cpu_quota("100001%")
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn sizes_print_in_the_largest_exact_unit() {
        assert_eq!(Bytes(64 << 20).to_string(), "64M");
        assert_eq!(Bytes(1536 << 10).to_string(), "1536K");
        assert_eq!(Bytes(1 << 30).to_string(), "1G");
        assert_eq!(Bytes(67_000_000).to_string(), "63.9M");
        assert_eq!(Bytes(1000).to_string(), "1000");
    }
}
