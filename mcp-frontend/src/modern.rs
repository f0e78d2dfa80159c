//! MCP 2026-07-28, the stateless ("modern") era: no `initialize`; every request carries its
//! protocol version and client capabilities in `_meta`; `server/discover` describes the server;
//! every result has `resultType`; list results carry caching hints (docs/eras.md).
//!
//! A connection's era is chosen by its first request, as the official SDKs' dual-era servers
//! choose it: a request other than `initialize` that carries
//! `_meta["io.modelcontextprotocol/protocolVersion"]` opens a modern connection; anything else
//! opens a legacy one, which is served exactly as before this era existed (the contract's three
//! revisions, byte for byte).

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

/// The modern revision this server speaks.
pub const MODERN: &str = "2026-07-28";
/// The versions a modern request may name (`supported` of -32022, `supportedVersions`).
pub const MODERN_VERSIONS: [&str; 1] = [MODERN];

pub const PROTOCOL_VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
pub const CLIENT_CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";
pub const CLIENT_INFO_KEY: &str = "io.modelcontextprotocol/clientInfo";
pub const SERVER_INFO_KEY: &str = "io.modelcontextprotocol/serverInfo";

/// `UnsupportedProtocolVersion` (2026-07-28 schema).
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
/// `HeaderMismatch` (2026-07-28 schema; Streamable HTTP only).
pub const HEADER_MISMATCH: i64 = -32020;

/// How long a client may keep `server/discover` and `tools/list` (milliseconds): the tool list
/// is fixed for the life of the process (it changes only when the server restarts on an
/// upgraded extension), so ten minutes of caching costs a host at most one stale list after
/// such a restart, and a failing call is the spec's reason to re-fetch early.
pub const LIST_TTL_MS: u64 = 600_000;
/// The tool list is the same for every caller of this server: a profile and an installed
/// extension decide it, never the caller.
pub const LIST_CACHE_SCOPE: &str = "public";

/// The parts of a request's params this module reads; everything else (a tool's arguments
/// above all) is skipped unparsed, so a huge or deeply nested argument costs no more here than
/// on a legacy connection and is judged where it always was.
#[derive(Deserialize)]
struct Params<'a> {
    #[serde(rename = "_meta", borrow, default)]
    meta: Option<&'a RawValue>,
    #[serde(rename = "protocolVersion", borrow, default)]
    protocol_version: Option<&'a RawValue>,
}

fn params(params: Option<&RawValue>) -> Option<Params<'_>> {
    serde_json::from_str::<Params>(params?.get()).ok()
}

/// The `_meta` object of a request, when it has one.
fn meta(p: Option<&RawValue>) -> Option<Map<String, Value>> {
    serde_json::from_str::<Map<String, Value>>(params(p)?.meta?.get()).ok()
}

/// The version a request's `_meta` names, when it names one as a string.
pub fn requested_version(p: Option<&RawValue>) -> Option<String> {
    match meta(p)?.remove(PROTOCOL_VERSION_KEY)? {
        Value::String(v) => Some(v),
        _ => None,
    }
}

/// Whether a request's params carry the modern envelope's version key (the only signal: legacy
/// requests may carry `_meta` too, with `progressToken`).
pub fn has_envelope(p: Option<&RawValue>) -> bool {
    meta(p).is_some_and(|m| m.contains_key(PROTOCOL_VERSION_KEY))
}

/// A refusal of a modern request: JSON-RPC error code, message and `data`.
#[derive(Debug, PartialEq)]
pub struct Refusal {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

/// What a valid envelope says.
#[derive(Debug, PartialEq)]
pub struct Envelope {
    pub version: &'static str,
    pub client_name: Option<String>,
}

fn invalid(why: String) -> Refusal {
    Refusal {
        code: crate::rpc::INVALID_PARAMS,
        message: format!("Invalid params: {why}"),
        data: None,
    }
}

/// Checks a modern request's `_meta`: the version must be present and one this server speaks
/// (else -32022 naming the supported versions), the client capabilities present and an object
/// (else -32602). Other `_meta` keys are the client's own and are ignored.
pub fn envelope(params: Option<&RawValue>) -> Result<Envelope, Refusal> {
    let Some(meta) = meta(params) else {
        return Err(invalid(format!(
            "a {MODERN} request carries params._meta with {PROTOCOL_VERSION_KEY} and {CLIENT_CAPABILITIES_KEY}"
        )));
    };
    let version = match meta.get(PROTOCOL_VERSION_KEY) {
        Some(Value::String(v)) => v,
        Some(_) => {
            return Err(invalid(format!(
                "_meta.{PROTOCOL_VERSION_KEY} must be a string"
            )));
        }
        None => return Err(invalid(format!("_meta.{PROTOCOL_VERSION_KEY} is required"))),
    };
    let Some(version) = MODERN_VERSIONS.iter().find(|m| *m == version).copied() else {
        return Err(unsupported(Some(version)));
    };
    match meta.get(CLIENT_CAPABILITIES_KEY) {
        Some(Value::Object(_)) => {}
        Some(_) => {
            return Err(invalid(format!(
                "_meta.{CLIENT_CAPABILITIES_KEY} must be an object"
            )));
        }
        None => {
            return Err(invalid(format!(
                "_meta.{CLIENT_CAPABILITIES_KEY} is required"
            )));
        }
    }
    let client_name = meta
        .get(CLIENT_INFO_KEY)
        .and_then(|i| i.get("name"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok(Envelope {
        version,
        client_name,
    })
}

/// -32022 with the versions a modern request may name.
pub fn unsupported(requested: Option<&str>) -> Refusal {
    let mut data = json!({"supported": MODERN_VERSIONS});
    if let Some(r) = requested {
        data["requested"] = json!(r);
    }
    Refusal {
        code: UNSUPPORTED_PROTOCOL_VERSION,
        message: "Unsupported protocol version".into(),
        data: Some(data),
    }
}

/// `initialize` on a modern connection: the handshake does not exist in this era, and the
/// connection keeps the era of its first request.
pub fn initialize_refused(params: Option<&RawValue>) -> Refusal {
    let requested = self::params(params)
        .and_then(|p| p.protocol_version)
        .and_then(|v| serde_json::from_str::<String>(v.get()).ok());
    let mut r = unsupported(requested.as_deref());
    r.message = format!(
        "Unsupported protocol version: this connection serves MCP {MODERN} (its first request carried _meta.{PROTOCOL_VERSION_KEY}), which has no initialize handshake; start a new connection to use an earlier revision"
    );
    r
}

/// The server's identity, in every modern result's `_meta`.
pub fn server_info() -> Value {
    json!({"name": "patchdiff-mcp", "version": env!("CARGO_PKG_VERSION")})
}

/// A complete modern result: `resultType` first, then the result's own keys, then `_meta`
/// with the server's identity (merged into a `_meta` the result already has).
pub fn complete(result: Value) -> Value {
    let mut out = Map::new();
    out.insert("resultType".into(), json!("complete"));
    let mut meta = Map::new();
    if let Value::Object(fields) = result {
        for (k, v) in fields {
            match (k.as_str(), v) {
                ("_meta", Value::Object(m)) => meta.extend(m),
                (_, v) => {
                    out.insert(k, v);
                }
            }
        }
    }
    meta.insert(SERVER_INFO_KEY.into(), server_info());
    out.insert("_meta".into(), Value::Object(meta));
    Value::Object(out)
}

/// A cacheable complete result (`server/discover`, `tools/list`).
pub fn cacheable(result: Value) -> Value {
    let mut r = complete(result);
    r["ttlMs"] = json!(LIST_TTL_MS);
    r["cacheScope"] = json!(LIST_CACHE_SCOPE);
    r
}

/// The `server/discover` result.
pub fn discover(instructions: &str) -> Value {
    cacheable(json!({
        "supportedVersions": MODERN_VERSIONS,
        "capabilities": {"tools": {}},
        "instructions": instructions,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    /// Versioning "Protocol Version Negotiation": only the version key marks a modern request;
    /// a legacy `_meta` (progressToken) does not.
    #[test]
    fn the_version_key_alone_marks_a_modern_request() {
        assert!(!has_envelope(None));
        assert!(!has_envelope(Some(&raw(
            r#"{"_meta":{"progressToken":1}}"#
        ))));
        assert!(!has_envelope(Some(&raw(r#"{"name":"x"}"#))));
        assert!(!has_envelope(Some(&raw(r#"{"_meta":null}"#))));
        assert!(has_envelope(Some(&raw(
            r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#
        ))));
        assert!(has_envelope(Some(&raw(
            r#"{"name":"x","_meta":{"io.modelcontextprotocol/protocolVersion":7}}"#
        ))));
    }

    /// Basic "Per-request protocol fields": a missing required field is -32602; an unknown
    /// version is -32022 with `supported` and `requested`.
    #[test]
    fn envelope_rules() {
        let ok = raw(
            r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"}}}"#,
        );
        assert_eq!(
            envelope(Some(&ok)),
            Ok(Envelope {
                version: MODERN,
                client_name: Some("c".into())
            })
        );
        let no_caps = raw(r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#);
        assert_eq!(envelope(Some(&no_caps)).unwrap_err().code, -32602);
        let caps_not_object = raw(
            r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":[]}}"#,
        );
        assert_eq!(envelope(Some(&caps_not_object)).unwrap_err().code, -32602);
        assert_eq!(envelope(None).unwrap_err().code, -32602);
        assert_eq!(
            envelope(Some(&raw(
                r#"{"_meta":{"io.modelcontextprotocol/clientCapabilities":{}}}"#
            )))
            .unwrap_err()
            .code,
            -32602
        );
        let old = raw(
            r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"1900-01-01","io.modelcontextprotocol/clientCapabilities":{}}}"#,
        );
        let r = envelope(Some(&old)).unwrap_err();
        assert_eq!(r.code, -32022);
        assert_eq!(
            r.data,
            Some(json!({"supported": ["2026-07-28"], "requested": "1900-01-01"}))
        );
    }

    /// Caching "Cacheable Results" and Basic "ResultType": resultType, serverInfo, ttlMs >= 0 and
    /// cacheScope on discover.
    #[test]
    fn discover_is_complete_and_cacheable() {
        let d = discover("use it");
        assert_eq!(d["resultType"], "complete");
        assert_eq!(d["supportedVersions"], json!(["2026-07-28"]));
        assert_eq!(d["capabilities"], json!({"tools": {}}));
        assert_eq!(d["_meta"][SERVER_INFO_KEY]["name"], "patchdiff-mcp");
        assert_eq!(d["ttlMs"], json!(LIST_TTL_MS));
        assert_eq!(d["cacheScope"], "public");
        let merged = complete(json!({"content": [], "_meta": {"a/b": 1}}));
        assert_eq!(merged["_meta"]["a/b"], 1);
        assert_eq!(merged["resultType"], "complete");
    }
}
