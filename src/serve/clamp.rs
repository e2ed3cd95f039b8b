//! Every number a request may give, read and clamped in one place: a run's
//! `limits`, a session's `limits` and `idle_timeout`, a session command's
//! `timeout` and `max_output`.
//!
//! Whatever its JSON type, a value is either read or refused with 400
//! naming the field: absent or `null` means "the default" (the profile's,
//! else the operator's ceiling — never more); a number or a string with
//! a unit (`"64m"`, `"1.5s"`) is read by the same parsers as the command
//! line; zero, negative, fractional counts, sizes and durations past what
//! the parsers accept, booleans, arrays and objects are refused. What is
//! read is then cut to the operator's ceiling, and the cut is reported.

use std::time::Duration;

use serde_json::Value;

use super::error::ApiError;
use crate::policy::units;

/// What kind of amount a field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Bytes: `4096`, `"64m"`.
    Size,
    /// A whole number above 0.
    Count,
    /// CPUs, fractions allowed.
    Cpus,
    /// Seconds as a number, or a duration with a unit.
    Duration,
}

/// An amount read from a request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Amount {
    Bytes(u64),
    Count(u64),
    Cpus(f64),
    Time(Duration),
}

impl Amount {
    pub fn bytes(self) -> u64 {
        match self {
            Amount::Bytes(n) | Amount::Count(n) => n,
            _ => unreachable!("not a size"),
        }
    }

    pub fn cpus(self) -> f64 {
        match self {
            Amount::Cpus(c) => c,
            _ => unreachable!("not a CPU amount"),
        }
    }

    pub fn time(self) -> Duration {
        match self {
            Amount::Time(d) => d,
            _ => unreachable!("not a duration"),
        }
    }
}

/// Read `v` (the field named `field`) as `kind`: `None` when absent or
/// `null`, else the amount or a 400 naming the field.
pub fn read(field: &str, kind: Kind, v: Option<&Value>) -> Result<Option<Amount>, ApiError> {
    let text = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(s)) if s.contains('\0') => {
            return Err(ApiError::field(field, "contains a NUL byte"))
        }
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(ApiError::field(field, "must be a number or a string")),
    };
    let bad = |e: units::UnitError| ApiError::field(field, e.to_string());
    Ok(Some(match kind {
        Kind::Size => Amount::Bytes(units::parse_limit_size(&text).map_err(bad)?),
        Kind::Count => Amount::Count(units::parse_count(&text).map_err(bad)?),
        Kind::Cpus => Amount::Cpus(units::parse_cpus(&text).map_err(bad)?),
        Kind::Duration => Amount::Time(units::parse_limit_duration(&text).map_err(bad)?),
    }))
}

/// What applies: the amount asked for, else `default` (when given), else
/// the ceiling; never more than the ceiling. `cut` is true when the ask
/// was above the ceiling.
pub fn clamp<T: PartialOrd + Copy>(asked: Option<T>, default: Option<T>, max: T) -> (T, bool) {
    let want = asked.or(default).unwrap_or(max);
    if want > max {
        (max, asked.is_some_and(|a| a > max))
    } else {
        (want, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Every kind × every JSON type: read, refused (400 naming the
    /// field) or the default.
    #[test]
    fn every_kind_against_every_json_type() {
        enum Want {
            Default,
            Refused,
            Read(Amount),
        }
        use Amount::*;
        use Want::*;
        let big = json!(18446744073709551615u64);
        let past_u64 = serde_json::from_str::<Value>("18446744073709551616").unwrap();
        let cases: Vec<(Kind, Value, Want)> = vec![
            (Kind::Size, Value::Null, Default),
            (Kind::Size, json!(true), Refused),
            (Kind::Size, json!([1]), Refused),
            (Kind::Size, json!({"a": 1}), Refused),
            (Kind::Size, json!(""), Refused),
            (Kind::Size, json!("1\u{0}"), Refused),
            (Kind::Size, json!(0), Refused),
            (Kind::Size, json!(-1), Refused),
            (Kind::Size, json!(1.5), Refused),
            (Kind::Size, json!(1e300), Refused),
            (Kind::Size, past_u64.clone(), Refused),
            (Kind::Size, big.clone(), Read(Bytes(u64::MAX))),
            (Kind::Size, json!(4096), Read(Bytes(4096))),
            (Kind::Size, json!("64m"), Read(Bytes(64 << 20))),
            (Kind::Size, json!("-64m"), Refused),
            (Kind::Count, Value::Null, Default),
            (Kind::Count, json!(false), Refused),
            (Kind::Count, json!(0), Refused),
            (Kind::Count, json!(-3), Refused),
            (Kind::Count, json!(2.5), Refused),
            (Kind::Count, json!("12"), Read(Count(12))),
            (Kind::Count, json!("12k"), Refused),
            (Kind::Count, big.clone(), Read(Count(u64::MAX))),
            (Kind::Count, past_u64.clone(), Refused),
            (Kind::Cpus, Value::Null, Default),
            (Kind::Cpus, json!(true), Refused),
            (Kind::Cpus, json!(0), Refused),
            (Kind::Cpus, json!(-0.5), Refused),
            (Kind::Cpus, json!(0.5), Read(Cpus(0.5))),
            (Kind::Cpus, json!("2"), Read(Cpus(2.0))),
            (Kind::Cpus, json!(1e300), Refused),
            (Kind::Cpus, json!("nan"), Refused),
            (Kind::Cpus, json!("inf"), Refused),
            (Kind::Duration, Value::Null, Default),
            (Kind::Duration, json!([]), Refused),
            (Kind::Duration, json!(0), Refused),
            (Kind::Duration, json!(-1), Refused),
            (Kind::Duration, json!(1e300), Refused),
            (Kind::Duration, json!("nan"), Refused),
            (Kind::Duration, json!("inf"), Refused),
            (
                Kind::Duration,
                json!(2.5),
                Read(Time(Duration::from_millis(2500))),
            ),
            (
                Kind::Duration,
                json!("500ms"),
                Read(Time(Duration::from_millis(500))),
            ),
            (Kind::Duration, big, Refused),
        ];
        for (kind, v, want) in cases {
            let got = read("limits.x", kind, Some(&v));
            match (want, got) {
                (Default, Ok(None)) => {}
                (Read(a), Ok(Some(b))) if a == b => {}
                (Refused, Err(e)) => {
                    assert_eq!(e.status, 400, "{kind:?} {v}");
                    assert_eq!(e.field.as_deref(), Some("limits.x"), "{kind:?} {v}");
                }
                (_, got) => panic!("{kind:?} {v}: {got:?}"),
            }
        }
        assert_eq!(read("x", Kind::Size, None).unwrap(), None);
    }

    #[test]
    fn clamp_never_exceeds_the_ceiling_and_says_when_it_cut() {
        assert_eq!(clamp(Some(5), Some(3), 10), (5, false));
        assert_eq!(clamp(Some(50), Some(3), 10), (10, true));
        assert_eq!(clamp(None, Some(3), 10), (3, false));
        assert_eq!(clamp(None, Some(30), 10), (10, false));
        assert_eq!(clamp::<u64>(None, None, 10), (10, false));
    }
}
