//! Argument objects of the SQL API and their `invalid_argument` / `not_found` answers.
//!
//! Every SQL function takes one JSON object, the MCP tool's arguments. A malformed argument is
//! answered with `status: "invalid_argument"`, a stable `code` and a `failure_detail`; nothing
//! is written for it.

use crate::contract::json::{TooComplex, as_int, is_big_int, shape_within, type_name};
use crate::contract::limits::{ARGUMENT_OBJECTS_MAX, ARGUMENT_VALUES_MAX};
use crate::contract::utf8;
use crate::contract::uuid::canonical_uuid;
use crate::contract::words::Status;
use serde_json::{Map, Value, json};

/// An `invalid_argument` answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ArgError {
    pub code: &'static str,
    pub detail: String,
    /// Extra fields appended after `failure_detail` (e.g. `unknown_arguments`).
    pub extra: Map<String, Value>,
    /// A submission's or preview's `target_file_id` that is not a UUID string: the driver
    /// answers it as the contract's target-identity rejection
    /// (`crate::submission::identity`), not with [`ArgError::to_json`].
    pub malformed_target: Option<Box<MalformedTarget>>,
}

/// What the answer to a malformed submission or preview target needs of the arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct MalformedTarget {
    /// `target_file_id` as sent.
    pub sent: Value,
    /// The tool's protocol.
    pub format: &'static str,
    /// The runtime the record would run under (previews report it).
    pub runtime_version: &'static str,
    /// `client_request_id` as sent (null when omitted).
    pub client_request_id: Value,
    /// `include_correlation_id: true` was sent.
    pub include_correlation_id: bool,
}

impl ArgError {
    /// A detail that quotes a caller's value is bounded: an answer never grows with the junk it
    /// refuses.
    pub fn new(code: &'static str, detail: impl Into<String>) -> Self {
        let mut detail = detail.into();
        if let Some((cut, _)) = detail.char_indices().nth(DETAIL_MAX_CHARS) {
            detail.truncate(cut);
            detail.push_str("... (truncated)");
        }
        ArgError {
            code,
            detail,
            extra: Map::new(),
            malformed_target: None,
        }
    }

    pub fn with(mut self, key: &str, v: Value) -> Self {
        self.extra.insert(key.to_owned(), v);
        self
    }

    pub fn to_json(&self, tool: &str) -> Value {
        let mut m = Map::new();
        m.insert("status".into(), json!(Status::InvalidArgument.as_str()));
        m.insert("code".into(), json!(self.code));
        if matches!(self.code, "unknown_argument" | "missing_argument") {
            m.insert("tool".into(), json!(tool));
        }
        m.insert("failure_detail".into(), json!(self.detail));
        for (k, v) in &self.extra {
            m.insert(k.clone(), v.clone());
        }
        Value::Object(m)
    }
}

/// Longest `failure_detail` of an argument error, in code points.
pub const DETAIL_MAX_CHARS: usize = 1_024;
/// Longest argument name quoted in `unknown_arguments`, in code points; at most this many names.
pub const UNKNOWN_NAME_MAX_CHARS: usize = 128;
pub const UNKNOWN_NAMES_MAX: usize = 32;

/// Argument names as an answer may quote them: at most `UNKNOWN_NAMES_MAX`, each at most
/// `UNKNOWN_NAME_MAX_CHARS` code points; `true` when anything was cut.
pub fn quoted_names<'a>(names: impl ExactSizeIterator<Item = &'a str>) -> (Vec<String>, bool) {
    let total = names.len();
    let mut cut = false;
    let quoted: Vec<String> = names
        .take(UNKNOWN_NAMES_MAX)
        .map(|k| {
            let (q, c) = quoted_name(k);
            cut |= c;
            q.into_owned()
        })
        .collect();
    let truncated = cut || total > quoted.len();
    (quoted, truncated)
}

/// One name as an answer or a stored diagnostic may quote it: at most `UNKNOWN_NAME_MAX_CHARS`
/// code points, then `...`; `true` when it was cut. Every name the contract defines is far
/// shorter; an unknown field's name can be megabytes, and was quoted whole in `failure_detail`
/// and again in the diagnostic, stored and shown on every log page (helper-77).
pub fn quoted_name(k: &str) -> (std::borrow::Cow<'_, str>, bool) {
    let quoted = utf8::cut_chars(k, UNKNOWN_NAME_MAX_CHARS);
    let cut = matches!(quoted, std::borrow::Cow::Owned(_));
    (quoted, cut)
}

/// The answer for a well-formed target ID that names no target.
pub fn not_found(target_file_id: &str) -> Value {
    json!({
        "status": Status::NotFound.as_str(),
        "code": "target_not_found",
        "target_file_id": target_file_id,
        "failure_detail": format!("No target with target_file_id {target_file_id}."),
    })
}

/// Arguments over the server's size limit never reach the JSON parser. The extension checks the
/// raw size of the `json` datum before it is even detoasted and, when it is too large, hands the
/// engine this marker instead of the text. Valid `json` can never begin with NUL, so the marker
/// cannot be confused with a request.
const OVERSIZED_PREFIX: &str = "\0patchdiff-oversized:";

/// The marker for an argument of `size` bytes refused under a limit of `max` bytes.
pub fn oversized_marker(size: usize, max: usize) -> String {
    format!("{OVERSIZED_PREFIX}{size}:{max}")
}

/// `invalid_argument` / `arguments_too_large` for the marker, nothing otherwise.
pub fn oversized(text: &str) -> Result<(), ArgError> {
    let Some(rest) = text.strip_prefix(OVERSIZED_PREFIX) else {
        return Ok(());
    };
    let (size, max) = rest.split_once(':').unwrap_or((rest, "?"));
    Err(too_large(size, max))
}

/// `invalid_argument` / `arguments_too_complex` when `text` (arguments, or the `edits` of the
/// typed submission) holds more JSON values or objects than [`ARGUMENT_VALUES_MAX`] and
/// [`ARGUMENT_OBJECTS_MAX`] allow: checked on the text, before anything is parsed, read or
/// written (helper-89's 7.5 MB argument took 212 MB to parse; 16 MiB of small objects, 930 MB).
pub fn too_complex(text: &str) -> Result<(), ArgError> {
    let (what, limit) = match shape_within(text, ARGUMENT_VALUES_MAX, ARGUMENT_OBJECTS_MAX) {
        Ok(()) => return Ok(()),
        Err(TooComplex::Values) => ("values", ARGUMENT_VALUES_MAX),
        Err(TooComplex::Objects) => ("objects", ARGUMENT_OBJECTS_MAX),
    };
    Err(ArgError::new(
        "arguments_too_complex",
        format!(
            "the arguments hold more than {limit} JSON {what}, more than any request needs; nothing was read or written"
        ),
    )
    .with("limit", json!(limit))
    .with("counted", json!(what)))
}

/// `invalid_argument` / `arguments_too_large`: arguments of `size` bytes under a limit of `max`.
pub fn too_large(size: impl std::fmt::Display, max: impl std::fmt::Display) -> ArgError {
    ArgError::new(
        "arguments_too_large",
        format!(
            "the arguments are {size} bytes, over this server's limit of {max} bytes (patchdiff.max_argument_bytes); nothing was read or written"
        ),
    )
}

/// `invalid_argument` / `target_too_large` (`patchdiff.max_target_bytes`, ours), with `limit`
/// and `actual`, when a target's text would be `after` bytes, over `limit` and larger than it
/// was (`before`; 0 for a new target): a target already over a lowered limit may still shrink.
pub fn target_too_large(after: usize, before: usize, limit: usize) -> Option<ArgError> {
    (after > limit && after > before).then(|| {
        ArgError::new(
            "target_too_large",
            format!(
                "the target's text would be {after} bytes (LF line endings), over patchdiff.max_target_bytes ({limit} bytes); nothing was written. Make the change smaller, or split the document into several targets"
            ),
        )
        .with("limit", json!(limit))
        .with("actual", json!(after))
    })
}

/// A parsed argument object: checked for unknown names, with typed accessors.
pub struct Args {
    map: Map<String, Value>,
    /// Set by [`Args::parse_proposal`] when the request escaped a lone surrogate: strings carry
    /// this character, then the surrogate's hex digits (see [`crate::contract::invalid_text`]).
    pub sentinel: Option<char>,
}

impl Args {
    /// Parses `text` as a JSON object whose keys are all in `allowed` and include `required`.
    /// An escaped lone surrogate is `invalid_text`: for reads and other calls that write no
    /// attempt, invalid text is an argument error.
    pub fn parse(text: &str, allowed: &[&str], required: &[&str]) -> Result<Args, ArgError> {
        oversized(text)?;
        too_complex(text)?;
        let value: Value = serde_json::from_str(text).map_err(|e| {
            if crate::contract::invalid_text::mark_lone_surrogates(text).is_some() {
                ArgError::new(
                    "invalid_text",
                    "arguments contain an escaped lone surrogate, which is not Unicode text; send valid UTF-16 pairs or the character itself",
                )
            } else {
                ArgError::new("invalid_json", format!("arguments are not valid JSON: {e}"))
            }
        })?;
        Self::from_value(value, allowed, required, None)
    }

    /// Like [`Args::parse`], but a proposal against a known target must be audited even when
    /// its text is invalid: lone surrogates are kept, marked by [`Args::sentinel`].
    pub fn parse_proposal(
        text: &str,
        allowed: &[&str],
        required: &[&str],
    ) -> Result<Args, ArgError> {
        oversized(text)?;
        too_complex(text)?;
        match crate::contract::invalid_text::mark_lone_surrogates(text) {
            Some((marked, sentinel)) => match serde_json::from_str(&marked) {
                Ok(value) => Self::from_value(value, allowed, required, Some(sentinel)),
                Err(e) => Err(ArgError::new(
                    "invalid_json",
                    format!("arguments are not valid JSON: {e}"),
                )),
            },
            None => Self::parse(text, allowed, required),
        }
    }

    fn from_value(
        value: Value,
        allowed: &[&str],
        required: &[&str],
        sentinel: Option<char>,
    ) -> Result<Args, ArgError> {
        let Value::Object(map) = value else {
            return Err(ArgError::new(
                "invalid_arguments",
                format!("arguments must be a JSON object, not {}", type_name(&value)),
            ));
        };
        let mut unknown: Vec<&String> = map
            .keys()
            .filter(|k| !allowed.contains(&k.as_str()))
            .collect();
        if !unknown.is_empty() {
            unknown.sort();
            let (names, truncated) = quoted_names(unknown.iter().map(|k| k.as_str()));
            let mut e = ArgError::new(
                "unknown_argument",
                format!("unknown argument(s): {}", names.join(", ")),
            )
            .with("unknown_arguments", json!(names));
            if truncated {
                e = e.with("unknown_arguments_truncated", json!(true));
            }
            return Err(e);
        }
        let missing: Vec<&str> = required
            .iter()
            .copied()
            .filter(|k| !map.contains_key(*k))
            .collect();
        if !missing.is_empty() {
            return Err(ArgError::new(
                "missing_argument",
                format!("missing required argument(s): {}", missing.join(", ")),
            )
            .with("missing_arguments", json!(missing)));
        }
        Ok(Args { map, sentinel })
    }

    pub fn get(&self, k: &str) -> Option<&Value> {
        self.map.get(k)
    }

    /// Moves an argument out (a proposal's megabyte is not copied into its record). Later
    /// lookups of `k` see it absent.
    pub fn take(&mut self, k: &str) -> Option<Value> {
        self.map.shift_remove(k)
    }

    /// Present and not null.
    pub fn given(&self, k: &str) -> Option<&Value> {
        self.map.get(k).filter(|v| !v.is_null())
    }

    pub fn has(&self, k: &str) -> bool {
        self.map.contains_key(k)
    }

    /// The required `target_file_id` of a submission or preview: [`Args::target_file_id`], with
    /// a malformed one marked as the target-identity failure it is answered as.
    pub fn proposal_target_file_id(
        &self,
        format: &'static str,
        runtime_version: &'static str,
    ) -> Result<String, ArgError> {
        self.target_file_id().map_err(|mut e| {
            if let Some(sent) = self.map.get("target_file_id") {
                e.malformed_target = Some(Box::new(MalformedTarget {
                    sent: sent.clone(),
                    format,
                    runtime_version,
                    client_request_id: self
                        .map
                        .get("client_request_id")
                        .cloned()
                        .unwrap_or(Value::Null),
                    include_correlation_id: self.map.get("include_correlation_id")
                        == Some(&Value::Bool(true)),
                }));
            }
            e
        })
    }

    /// The required `target_file_id`, in lowercase hyphenated form.
    pub fn target_file_id(&self) -> Result<String, ArgError> {
        match self.map.get("target_file_id") {
            Some(Value::String(s)) => canonical_uuid(s).ok_or_else(|| {
                ArgError::new(
                    "invalid_target_file_id",
                    "target_file_id must be a hyphenated UUID string",
                )
            }),
            Some(v) => Err(ArgError::new(
                "invalid_target_file_id",
                format!("target_file_id must be a UUID string, not {}", type_name(v)),
            )),
            None => Err(ArgError::new(
                "missing_argument",
                "missing required argument(s): target_file_id",
            )
            .with("missing_arguments", json!(["target_file_id"]))),
        }
    }

    /// An optional boolean; null and omission both give `default`.
    pub fn bool_or(&self, k: &str, default: bool, code: &'static str) -> Result<bool, ArgError> {
        match self.map.get(k) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(ArgError::new(
                code,
                format!("{k} must be a boolean, not {}", type_name(v)),
            )),
        }
    }

    /// An optional string; omission gives `None`, null is accepted only when `nullable`.
    pub fn opt_str(
        &self,
        k: &str,
        nullable: bool,
        code: &'static str,
    ) -> Result<Option<&str>, ArgError> {
        match self.map.get(k) {
            None => Ok(None),
            Some(Value::Null) if nullable => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(ArgError::new(
                code,
                format!("{k} must be a string, not {}", type_name(v)),
            )),
        }
    }

    /// An optional non-bool integer `>= min`. Null or omission give `None` when `nullable`;
    /// a non-nullable argument rejects an explicit null.
    pub fn opt_int(
        &self,
        k: &str,
        min: i64,
        nullable: bool,
        code: &'static str,
    ) -> Result<Option<i64>, ArgError> {
        match self.map.get(k) {
            None => Ok(None),
            Some(Value::Null) if nullable => Ok(None),
            Some(v) => match as_int(v) {
                Some(n) if n >= min => Ok(Some(n)),
                Some(n) => Err(ArgError::new(
                    code,
                    format!("{k} must be an integer >= {min}, not {n}"),
                )),
                // An integer past i64 is read as i64::MAX, the largest any of these arguments
                // can mean: a cap clamps it and a position is past the end, as for any large
                // value (contract: `context_chars` "clamped to 400"). It used to be refused as
                // out of range while i64::MAX itself was clamped (helper-61).
                None if is_big_int(v) => Ok(Some(i64::MAX)),
                None => Err(ArgError::new(
                    code,
                    format!(
                        "{k} must be a non-boolean integer >= {min}, not {}",
                        type_name(v)
                    ),
                )),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resource bounds: the oversized marker is refused before any parsing, by every parser.
    #[test]
    fn oversized_arguments_are_refused() {
        let m = oversized_marker(20_000_000, 16_777_216);
        for e in [
            Args::parse(&m, &[], &[]).err().unwrap(),
            Args::parse_proposal(&m, &[], &[]).err().unwrap(),
        ] {
            assert_eq!(e.code, "arguments_too_large");
            assert!(e.detail.contains("20000000") && e.detail.contains("16777216"));
        }
    }

    #[test]
    fn unknown_and_missing_arguments_are_named() {
        let e = Args::parse(r#"{"b":1,"a":2}"#, &["x"], &[]).err().unwrap();
        assert_eq!(e.code, "unknown_argument");
        assert_eq!(e.extra["unknown_arguments"], json!(["a", "b"]));
        let e = Args::parse("{}", &["x"], &["x"]).err().unwrap();
        assert_eq!(e.code, "missing_argument");
        assert_eq!(e.to_json("t")["tool"], "t");
        assert_eq!(
            Args::parse("[1]", &[], &[]).err().unwrap().code,
            "invalid_arguments"
        );
        assert_eq!(
            Args::parse("{", &[], &[]).err().unwrap().code,
            "invalid_json"
        );
    }

    #[test]
    fn integers_reject_bools_floats_and_negatives() {
        let a = Args::parse(
            r#"{"a":true,"b":1.5,"c":-1,"d":null,"e":7}"#,
            &["a", "b", "c", "d", "e"],
            &[],
        )
        .unwrap();
        assert!(a.opt_int("a", 0, true, "x").is_err());
        assert!(a.opt_int("b", 0, true, "x").is_err());
        assert!(a.opt_int("c", 0, true, "x").is_err());
        assert_eq!(a.opt_int("d", 0, true, "x"), Ok(None));
        assert!(a.opt_int("d", 0, false, "x").is_err());
        assert_eq!(a.opt_int("e", 0, false, "x"), Ok(Some(7)));
    }

    /// Contract "patchdiff_find_occurrences": context_chars is "clamped to 400", whatever its
    /// size: an integer past i64 reads as i64::MAX, never as a refusal.
    #[test]
    fn integers_past_i64_read_as_its_largest() {
        let a = Args::parse(r#"{"a":18446744073709551615}"#, &["a"], &[]).unwrap();
        assert_eq!(a.opt_int("a", 1, true, "x"), Ok(Some(i64::MAX)));
    }
}
