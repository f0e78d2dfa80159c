//! One database function call at a time, each bounded in time and never resent.

use patchdiff_engine::wire::{LITERAL, to_string};
use patchdiff_mcp::database::{CallError, Db};
use serde_json::{Map, Value};
use std::time::Duration;

/// One function call at a time, each bounded in time and never resent.
pub(crate) struct Caller<'a> {
    pub(crate) db: &'a mut Db,
    pub(crate) timeout: Duration,
}

/// A call's answer, as far as it is known.
pub(crate) enum Answer {
    /// A JSON object with a string `status`.
    Object(Map<String, Value>),
    /// A response that is not such an object: the outcome is unknown.
    Malformed(String),
}

impl Caller<'_> {
    /// `Err` when the call's outcome is unknown: the connection failed or the time ran out.
    pub(crate) async fn call(&mut self, function: &str, args: &Value) -> Result<Answer, String> {
        let args = to_string(args, LITERAL);
        match tokio::time::timeout(self.timeout, self.db.call(function, &args)).await {
            Err(_) => Err(format!(
                "{function} did not answer within {} s",
                self.timeout.as_secs_f64()
            )),
            Ok(Err(CallError { message, .. })) => Err(format!("{function} failed: {message}")),
            Ok(Ok(text)) => Ok(match serde_json::from_str::<Value>(&text) {
                Ok(Value::Object(o)) if o.get("status").is_some_and(Value::is_string) => {
                    Answer::Object(o)
                }
                Ok(_) => Answer::Malformed(text),
                Err(_) if text.len() > 4096 => {
                    Answer::Malformed(format!("{}... (not JSON)", truncate(&text, 4096)))
                }
                Err(_) => Answer::Malformed(text),
            }),
        }
    }
}

pub(crate) fn truncate(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

pub(crate) fn status(o: &Map<String, Value>) -> &str {
    o.get("status").and_then(Value::as_str).unwrap_or_default()
}
