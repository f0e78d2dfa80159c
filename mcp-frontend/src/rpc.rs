//! Newline-delimited JSON-RPC 2.0: strict UTF-8 in, pure ASCII out.

use patchdiff_engine::wire::{ASCII, to_string};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;

/// One message from the client.
#[derive(Debug)]
pub enum Incoming {
    Request {
        id: Value,
        method: String,
        params: Option<Box<RawValue>>,
    },
    Notification {
        method: String,
        params: Option<Box<RawValue>>,
    },
    /// A response (`result` or `error`, no `method`). This server sends no requests, so every
    /// response is unsolicited: it is ignored, never answered (an error reusing its `id` would be
    /// a second response to one of the client's own requests).
    Response,
}

/// The wire shape; `params` stays raw so that argument strings reach SQL exactly as sent
/// (an escaped lone surrogate must become an audited rejection there, not a parse error here).
/// The other members stay raw too, and only a string or number is ever built into a value: a
/// 32 MiB line whose `id` was an array of zeros took 2.4 GB as `serde_json::Value`s, to be
/// refused anyway (helper-44). `result` and `error` are only looked at for being there.
#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    jsonrpc: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    method: Option<&'a RawValue>,
    params: Option<Box<RawValue>>,
    /// Present (even `null`) when the message is a response.
    #[serde(default, deserialize_with = "present_only")]
    result: bool,
    #[serde(default, deserialize_with = "present_only")]
    error: bool,
}

/// Distinguishes `"id": null` (present) from no `id` at all.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// Whether a member is there (even `null`), its value skipped without being built.
fn present_only<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    serde::de::IgnoredAny::deserialize(d).map(|_| true)
}

/// A member's value when it is a string or a number (or `null`), parsed; `None` for an array,
/// an object or a boolean, which no member read here may be, without building it.
fn scalar(raw: &RawValue) -> Option<Value> {
    match raw.get().as_bytes().first() {
        Some(b'"' | b'-' | b'0'..=b'9' | b'n') => serde_json::from_str(raw.get()).ok(),
        _ => None,
    }
}

const NUMERIC_ID: &str = "Invalid Request: a numeric id must be an integer from -2^63 to 2^64 - 1, written without a fraction or exponent";

/// An error answer to send back: `(id, code, message)`.
pub type Reject = (Value, i64, String);

/// Parses one line. Malformed UTF-8 is a parse error and is never repaired.
pub fn parse_line(line: &[u8]) -> Result<Incoming, Reject> {
    let text = std::str::from_utf8(line).map_err(|e| {
        (
            Value::Null,
            PARSE_ERROR,
            format!("Parse error: invalid UTF-8 ({e})"),
        )
    })?;
    if text.trim_start().starts_with('[') {
        return Err((
            Value::Null,
            INVALID_REQUEST,
            "Invalid Request: batches are not supported".into(),
        ));
    }
    let wire: Wire = serde_json::from_str(text).map_err(|e| {
        let code = if e.is_data() {
            INVALID_REQUEST
        } else {
            PARSE_ERROR
        };
        (
            Value::Null,
            code,
            format!(
                "{}: {e}",
                if code == PARSE_ERROR {
                    "Parse error"
                } else {
                    "Invalid Request"
                }
            ),
        )
    })?;
    // An id that is not a string, a number or null is refused below; it is never echoed.
    let id = wire.id.and_then(scalar).unwrap_or(Value::Null);
    let invalid = |why: &str| {
        (
            id.clone(),
            INVALID_REQUEST,
            format!("Invalid Request: {why}"),
        )
    };
    if wire.method.is_none() && (wire.result || wire.error) {
        return Ok(Incoming::Response);
    }
    if wire.jsonrpc.and_then(scalar) != Some(json!("2.0")) {
        return Err(invalid("jsonrpc must be \"2.0\""));
    }
    let method = match wire.method.and_then(scalar) {
        Some(Value::String(m)) => m,
        _ => return Err(invalid("method must be a string")),
    };
    // An id that is not a string, a number or null is refused below, with what it looked like
    // (helper-62: `1e400`, an escaped lone surrogate and `{}` were all told "not null").
    let id = wire.id.map(|raw| {
        scalar(raw).ok_or(match raw.get().as_bytes().first() {
            Some(b'-' | b'0'..=b'9') => NUMERIC_ID,
            Some(b'"') => "Invalid Request: a string id must be text that JSON can carry (no lone surrogate)",
            _ => "Invalid Request: id must be a string or a number, not an object, an array or a boolean",
        })
    });
    let id = match id {
        Some(Err(why)) => return Err((Value::Null, INVALID_REQUEST, why.into())),
        Some(Ok(id)) => Some(id),
        None => None,
    };
    match id {
        None => Ok(Incoming::Notification {
            method,
            params: wire.params,
        }),
        // A number is echoed as it was read: an integer of at most 64 bits. Any other number
        // (`1E2`, `-0`, `1.5`, 2^64) would come back as a float, a different `id`
        // (`100.0`, `1.8446744073709552e+19`), so it is refused rather than answered under an
        // `id` the client never sent.
        Some(Value::Number(n)) if !(n.is_i64() || n.is_u64()) => {
            Err((Value::Null, INVALID_REQUEST, NUMERIC_ID.into()))
        }
        Some(id @ (Value::String(_) | Value::Number(_))) => Ok(Incoming::Request {
            id,
            method,
            params: wire.params,
        }),
        Some(_) => Err((
            Value::Null,
            INVALID_REQUEST,
            "Invalid Request: id must be a string or a number, not null".into(),
        )),
    }
}

/// A success line, ASCII-escaped so that no character of any document can split or corrupt it.
pub fn result_line(id: &Value, result: Value) -> String {
    to_string(
        &json!({"jsonrpc": "2.0", "id": id, "result": result}),
        ASCII,
    )
}

pub fn error_line(id: &Value, code: i64, message: &str) -> String {
    to_string(
        &json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}),
        ASCII,
    )
}

/// An error line with `data` (the 2026-07-28 era's typed errors); without data it is
/// [`error_line`] byte for byte.
pub fn error_line_with_data(id: &Value, code: i64, message: &str, data: Option<Value>) -> String {
    match data {
        None => error_line(id, code, message),
        Some(data) => to_string(
            &json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message, "data": data}}),
            ASCII,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_notifications_and_errors() {
        assert!(
            matches!(parse_line(br#"{"jsonrpc":"2.0","id":0,"method":"ping"}"#), Ok(Incoming::Request { id, .. }) if id == json!(0))
        );
        assert!(matches!(
            parse_line(br#"{"jsonrpc":"2.0","id":"a","method":"ping"}"#),
            Ok(Incoming::Request { .. })
        ));
        assert!(matches!(
            parse_line(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Ok(Incoming::Notification { .. })
        ));
        assert_eq!(
            parse_line(br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#)
                .unwrap_err()
                .1,
            INVALID_REQUEST
        );
        assert_eq!(
            parse_line(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}")
                .unwrap_err()
                .1,
            PARSE_ERROR
        );
        assert_eq!(parse_line(b"{nope").unwrap_err().1, PARSE_ERROR);
        // A response (result or error, even null, and no method) is never answered.
        for line in [
            br#"{"jsonrpc":"2.0","id":77,"result":{}}"#.as_slice(),
            br#"{"jsonrpc":"2.0","id":77,"result":null}"#,
            br#"{"jsonrpc":"2.0","id":"x","error":{"code":-1,"message":"no"}}"#,
            br#"{"id":3,"result":1}"#,
        ] {
            assert!(
                matches!(parse_line(line), Ok(Incoming::Response)),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        // Numeric ids are echoed as read, so only 64-bit integers are taken.
        for id in ["-9223372036854775808", "18446744073709551615", "0", "-1"] {
            let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
            let Ok(Incoming::Request { id: got, .. }) = parse_line(line.as_bytes()) else {
                panic!("{line}");
            };
            assert_eq!(to_string(&got, ASCII), id);
        }
        for id in [
            "1E2",
            "-0",
            "1.5",
            "1.0",
            "18446744073709551616",
            "-9223372036854775809",
            "1e400",
        ] {
            let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
            let e = parse_line(line.as_bytes()).unwrap_err();
            assert_eq!(
                (&e.0, e.1 == INVALID_REQUEST || e.1 == PARSE_ERROR),
                (&Value::Null, true),
                "{line}: {e:?}"
            );
        }
        // Each refused id is told what it is (helper-62: all were told "not null").
        for (id, says) in [
            ("null", "not null"),
            ("1e400", "numeric id must be an integer"),
            ("1.5", "numeric id must be an integer"),
            (r#""\ud800""#, "string id"),
            (r#"{"a":1}"#, "not an object"),
            ("true", "not an object, an array or a boolean"),
            ("[1]", "not an object"),
        ] {
            let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
            let e = parse_line(line.as_bytes()).unwrap_err();
            assert_eq!((&e.0, e.1), (&Value::Null, INVALID_REQUEST), "{line}");
            assert!(e.2.contains(says), "{line}: {}", e.2);
        }
        assert_eq!(parse_line(b"[]").unwrap_err().1, INVALID_REQUEST);
        assert_eq!(
            parse_line(br#"{"id":1,"method":"ping"}"#).unwrap_err(),
            (
                json!(1),
                INVALID_REQUEST,
                "Invalid Request: jsonrpc must be \"2.0\"".into()
            )
        );
    }

    /// Raw params keep escaped lone surrogates for the SQL side to judge.
    #[test]
    fn params_stay_raw() {
        let Ok(Incoming::Request { params, .. }) = parse_line(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"a":"\ud800"}}"#,
        ) else {
            panic!()
        };
        assert_eq!(params.unwrap().get(), r#"{"a":"\ud800"}"#);
    }

    #[test]
    fn output_is_ascii() {
        let line = result_line(&json!(1), json!({"text": "🌍 中\u{2028}\u{2029}\u{85}"}));
        assert!(line.is_ascii() && !line.contains('\n'));
        let back: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back["result"]["text"], "🌍 中\u{2028}\u{2029}\u{85}");
    }
}
