//! A request's body as JSON, every object's keys once: serde_json's own
//! value keeps the last of a key given twice, so `{"profile": "python",
//! "profile": "shell"}` would be read one way by a proxy or client
//! library that keeps the first and another here. Such a body is a bad
//! request (400, `body: not JSON: duplicate key "profile" at line 1
//! column 38`), as is any body that is not JSON. serde_json's nesting
//! limit still holds (a body nested deeper than 128 is refused).

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use super::error::ApiError;

/// `body` as a JSON value, or the 400 that says why it is not one.
pub fn json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice::<Strict>(body)
        .map(|s| s.0)
        .map_err(|e| ApiError::bad_request(format!("body: not JSON: {e}")))
}

/// A JSON value whose objects had no key twice.
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            if out.contains_key(&k) {
                return Err(de::Error::custom(format_args!("duplicate key {k:?}")));
            }
            let Strict(v) = map.next_value()?;
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(body: &str) -> String {
        json(body.as_bytes()).unwrap_err().message
    }

    #[test]
    fn a_key_twice_at_any_depth_is_refused_and_named() {
        let e = said(r#"{"profile": "python", "profile": "shell"}"#);
        assert!(
            e.contains(r#"duplicate key "profile" at line 1 column"#),
            "{e}"
        );
        let e = said(r#"{"limits": {"memory": "1g", "memory": "64m"}}"#);
        assert!(e.contains(r#"duplicate key "memory""#), "{e}");
        let e = said(r#"{"files": [{"a": 1, "a": 2}]}"#);
        assert!(e.contains(r#"duplicate key "a""#), "{e}");
        // Escaped or not, the same key.
        let e = said(r#"{"argv": [], "\u0061rgv": []}"#);
        assert!(e.contains(r#"duplicate key "argv""#), "{e}");
    }

    #[test]
    fn a_body_without_one_reads_as_serde_json_reads_it() {
        for body in [
            r#"{"profile": "python", "argv": ["python3", "-c", "print(1)"], "limits": {"memory": 1e3, "pids": -1, "cpus": 0.5}, "env": {}, "stdin": null, "x": [true, false, {"y": "\u0000"}]}"#,
            "[]",
            "\"s\"",
            "18446744073709551615",
            "-9223372036854775808",
        ] {
            let want: Value = serde_json::from_str(body).unwrap();
            assert_eq!(json(body.as_bytes()).unwrap(), want, "{body}");
        }
    }

    #[test]
    fn what_is_not_json_is_refused_as_before() {
        for body in ["", "{", "{\"a\": 1e400}", "nul", "{\"a\" 1}"] {
            assert!(said(body).starts_with("body: not JSON: "), "{body}");
        }
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(said(&deep).contains("recursion limit"), "deep");
    }
}
