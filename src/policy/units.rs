//! Sizes (`64m`, `1g`, `512k`, `1024`), durations (`10s`, `500ms`, `2m`),
//! counts, CPU quotas and host id ranges, read from text.

#![deny(unsafe_code)]

use std::time::Duration;

/// A value that does not read as what it should be; the text given is kept
/// as it was (`"12q" is not a size …`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnitError {
    #[error("{0:?} is not a size (examples: 4096, 512k, 64m, 1g)")]
    NotASize(String),
    #[error("{0:?} is too large")]
    TooLarge(String),
    #[error("{0:?} is not a duration (examples: 500ms, 10s, 1.5s, 2m)")]
    NotADuration(String),
    /// A limit of 0, which would stop the command before it starts.
    #[error("{0:?}: must be greater than 0 (leave the limit out for none)")]
    Zero(String),
    #[error("{0:?} is not a count (a whole number above 0)")]
    NotACount(String),
    #[error("{0:?} is not a number of CPUs above 0 (examples: 0.5, 1, 2)")]
    NotCpus(String),
    #[error("{0}: expected START:COUNT (e.g. 2147418112:65536)")]
    NotARange(String),
    #[error("{0}: the range may not hold uid 0")]
    RangeHoldsRoot(String),
    #[error("{0}: COUNT must be at least 1")]
    EmptyRange(String),
    #[error("{0}: the range runs past 4294967294")]
    RangePastMax(String),
}

/// Parse a byte size: a number with an optional k/m/g/t suffix (powers of
/// 1024, case-insensitive, an optional trailing `b` or `ib`).
pub fn parse_size(s: &str) -> Result<u64, UnitError> {
    let t = s.trim().to_ascii_lowercase();
    let t = t
        .strip_suffix("ib")
        .or_else(|| t.strip_suffix('b'))
        .unwrap_or(&t);
    let (num, mult) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m') => (&t[..t.len() - 1], 1 << 20),
        Some('g') => (&t[..t.len() - 1], 1 << 30),
        Some('t') => (&t[..t.len() - 1], 1 << 40),
        _ => (t, 1),
    };
    let n: u64 = num
        .trim()
        .parse()
        .map_err(|_| UnitError::NotASize(s.to_string()))?;
    n.checked_mul(mult)
        .ok_or_else(|| UnitError::TooLarge(s.to_string()))
}

/// Parse a duration: a number (may have a fraction) with ms, s, m or h
/// (seconds when bare).
pub fn parse_duration(s: &str) -> Result<Duration, UnitError> {
    let t = s.trim().to_ascii_lowercase();
    let bad = || UnitError::NotADuration(s.to_string());
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t.as_str(), 1.0)
    };
    let v: f64 = num.trim().parse().map_err(|_| bad())?;
    if !v.is_finite() || v < 0.0 || v * scale > 1e9 {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(v * scale))
}

/// What a zero limit gets: it would stop the command before it starts (or
/// at once), so it is refused rather than applied.
fn zero(s: &str) -> UnitError {
    UnitError::Zero(s.to_string())
}

/// A size limit: [`parse_size`], and above 0.
pub fn parse_limit_size(s: &str) -> Result<u64, UnitError> {
    match parse_size(s)? {
        0 => Err(zero(s)),
        n => Ok(n),
    }
}

/// A time limit: [`parse_duration`], and above 0.
pub fn parse_limit_duration(s: &str) -> Result<Duration, UnitError> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(zero(s));
    }
    Ok(d)
}

/// A count limit (processes, open files): a whole number above 0.
pub fn parse_count(s: &str) -> Result<u64, UnitError> {
    match s.trim().parse::<u64>() {
        Ok(0) => Err(zero(s)),
        Ok(n) => Ok(n),
        Err(_) => Err(UnitError::NotACount(s.to_string())),
    }
}

/// A CPU quota: a number of CPUs above 0 (fractions allowed), at most 4096.
pub fn parse_cpus(s: &str) -> Result<f64, UnitError> {
    match s.trim().parse::<f64>() {
        Ok(c) if c.is_finite() && c > 0.0 && c <= 4096.0 => Ok(c),
        _ => Err(UnitError::NotCpus(s.to_string())),
    }
}

/// Parse `START:COUNT` for `--uid-range`: a range of host ids that holds
/// neither 0 nor 4294967295.
pub fn parse_uid_range(v: &str) -> Result<(u32, u32), UnitError> {
    let bad = || UnitError::NotARange(v.to_string());
    let (a, b) = v.split_once(':').ok_or_else(bad)?;
    let start: u32 = a.parse().map_err(|_| bad())?;
    let count: u32 = b.parse().map_err(|_| bad())?;
    if start == 0 {
        return Err(UnitError::RangeHoldsRoot(v.to_string()));
    }
    if count == 0 {
        return Err(UnitError::EmptyRange(v.to_string()));
    }
    if u64::from(start) + u64::from(count) > u64::from(u32::MAX) {
        return Err(UnitError::RangePastMax(v.to_string()));
    }
    Ok((start, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64m"), Ok(64 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("512KiB"), Ok(512 << 10));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("-1m").is_err());
        assert!(parse_size("99999999999t").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn limits_refuse_zero_and_negative() {
        assert_eq!(parse_limit_size("1k"), Ok(1024));
        assert_eq!(
            parse_limit_size("0").unwrap_err().to_string(),
            "\"0\": must be greater than 0 (leave the limit out for none)"
        );
        assert!(parse_limit_size("0m").is_err());
        assert!(parse_limit_size("-5m")
            .unwrap_err()
            .to_string()
            .contains("is not a size"));
        assert!(parse_limit_duration("0s").is_err());
        assert!(parse_limit_duration("0.0001ms").is_ok());
        assert_eq!(parse_count("64"), Ok(64));
        assert!(parse_count("0").is_err());
        assert!(parse_count("-1")
            .unwrap_err()
            .to_string()
            .contains("is not a count"));
        assert_eq!(parse_cpus("0.5"), Ok(0.5));
        for bad in ["0", "-1", "inf", "NaN", "x", "5000"] {
            assert!(parse_cpus(bad).is_err(), "{bad}");
        }
    }
}
