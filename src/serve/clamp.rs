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

/// How a field's text is read: the command line's own parsers.
pub type Parse<T> = fn(&str) -> Result<T, units::UnitError>;
/// Bytes: `4096`, `"64m"`, above 0.
pub const SIZE: Parse<u64> = units::parse_limit_size;
/// A whole number above 0.
pub const COUNT: Parse<u64> = units::parse_count;
/// CPUs, fractions allowed.
pub const CPUS: Parse<f64> = units::parse_cpus;
/// Seconds as a number, or a duration with a unit, above 0.
pub const DURATION: Parse<Duration> = units::parse_limit_duration;

/// Read `v` (the field named `field`) with `parse`: `None` when absent or
/// `null`, else the amount or a 400 naming the field.
pub fn read<T>(field: &str, parse: Parse<T>, v: Option<&Value>) -> Result<Option<T>, ApiError> {
    let text = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(s)) if s.contains('\0') => {
            return Err(ApiError::field(field, "contains a NUL byte"))
        }
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(ApiError::field(field, "must be a number or a string")),
    };
    parse(&text)
        .map(Some)
        .map_err(|e| ApiError::field(field, e.to_string()))
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

    /// `None`: refused (400 naming the field); `Some(None)`: the default;
    /// `Some(Some(x))`: read as `x`.
    type Want<T> = Option<Option<T>>;

    fn check<T: PartialEq + std::fmt::Debug>(parse: Parse<T>, cases: Vec<(Value, Want<T>)>) {
        for (v, want) in cases {
            match (want, read("limits.x", parse, Some(&v))) {
                (Some(a), Ok(b)) if a == b => {}
                (None, Err(e)) => {
                    assert_eq!(e.status, 400, "{v}");
                    assert_eq!(e.field.as_deref(), Some("limits.x"), "{v}");
                }
                (want, got) => panic!("{v}: want {want:?}, got {got:?}"),
            }
        }
    }

    /// Every kind × every JSON type: read, refused (400 naming the
    /// field) or the default.
    #[test]
    fn every_kind_against_every_json_type() {
        let big = json!(18446744073709551615u64);
        let past_u64 = serde_json::from_str::<Value>("18446744073709551616").unwrap();
        check(
            SIZE,
            vec![
                (Value::Null, Some(None)),
                (json!(true), None),
                (json!([1]), None),
                (json!({"a": 1}), None),
                (json!(""), None),
                (json!("1\u{0}"), None),
                (json!(0), None),
                (json!(-1), None),
                (json!(1.5), None),
                (json!(1e300), None),
                (past_u64.clone(), None),
                (big.clone(), Some(Some(u64::MAX))),
                (json!(4096), Some(Some(4096))),
                (json!("64m"), Some(Some(64 << 20))),
                (json!("-64m"), None),
            ],
        );
        check(
            COUNT,
            vec![
                (Value::Null, Some(None)),
                (json!(false), None),
                (json!(0), None),
                (json!(-3), None),
                (json!(2.5), None),
                (json!("12"), Some(Some(12))),
                (json!("12k"), None),
                (big.clone(), Some(Some(u64::MAX))),
                (past_u64, None),
            ],
        );
        check(
            CPUS,
            vec![
                (Value::Null, Some(None)),
                (json!(true), None),
                (json!(0), None),
                (json!(-0.5), None),
                (json!(0.5), Some(Some(0.5))),
                (json!("2"), Some(Some(2.0))),
                (json!(1e300), None),
                (json!("nan"), None),
                (json!("inf"), None),
            ],
        );
        check(
            DURATION,
            vec![
                (Value::Null, Some(None)),
                (json!([]), None),
                (json!(0), None),
                (json!(-1), None),
                (json!(1e300), None),
                (json!("nan"), None),
                (json!("inf"), None),
                (json!(2.5), Some(Some(Duration::from_millis(2500)))),
                (json!("500ms"), Some(Some(Duration::from_millis(500)))),
                (big, None),
            ],
        );
        assert_eq!(read("x", SIZE, None).unwrap(), None);
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
