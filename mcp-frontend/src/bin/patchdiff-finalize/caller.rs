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

/// How long a call that ran out of time is given to end once PostgreSQL was asked to cancel it.
const CANCEL_WAIT: Duration = Duration::from_secs(10);

impl Caller<'_> {
    /// `Err` when the call's outcome is unknown: the connection failed or the time ran out.
    ///
    /// A call that runs out of time is cancelled on the server and given [`CANCEL_WAIT`] to end,
    /// so that it does not go on there after the finalizer has reported it and exited: a SAVE
    /// left waiting for a lock committed seconds after the run had stopped, where an operator
    /// reconciling at once would have found no checkpoint (helper-46). If it answers after all,
    /// that answer is the outcome.
    pub(crate) async fn call(&mut self, function: &str, args: &Value) -> Result<Answer, String> {
        let args = to_string(args, LITERAL);
        // The session the call will run on: a lost one is replaced first, so that the cancel
        // below reaches the backend that runs it (helper-47).
        if let Err(CallError { message, .. }) = self.db.reconnect_if_lost().await {
            return Err(format!("{function} failed: {message}"));
        }
        let cancel = self.db.cancel_token();
        let call = self.db.call(function, &args);
        tokio::pin!(call);
        let answered = match tokio::time::timeout(self.timeout, &mut call).await {
            Ok(answered) => answered,
            Err(_) => {
                let late = format!(
                    "{function} did not answer within {} s",
                    self.timeout.as_secs_f64()
                );
                if let Err(e) = cancel.cancel_query(tokio_postgres::NoTls).await {
                    return Err(format!(
                        "{late}, and the request to cancel it failed ({e}): it may still be running on the server"
                    ));
                }
                match tokio::time::timeout(CANCEL_WAIT, &mut call).await {
                    Ok(Err(CallError {
                        message,
                        cancelled: Some(_),
                        ..
                    })) => {
                        return Err(format!(
                            "{late}; it was cancelled on the server and ended ({message})"
                        ));
                    }
                    Ok(Err(CallError { message, .. })) => {
                        return Err(format!(
                            "{late}; after a request to cancel it, it ended with another error ({message})"
                        ));
                    }
                    Ok(answered) => answered,
                    Err(_) => {
                        return Err(format!(
                            "{late}, nor within {} s of a request to cancel it: it may still be running on the server",
                            CANCEL_WAIT.as_secs()
                        ));
                    }
                }
            }
        };
        match answered {
            Err(CallError { message, .. }) => Err(format!("{function} failed: {message}")),
            Ok(text) => Ok(match serde_json::from_str::<Value>(&text) {
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
