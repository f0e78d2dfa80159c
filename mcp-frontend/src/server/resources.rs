//! Targets as MCP resources and their change feed, in the `extended` profile only (issue 19,
//! item 2; docs/profiles.md, docs/eras.md). The contract's six profiles never see any of it:
//! their handshake, `server/discover` and method table are unchanged.
//!
//! - `resources/list` pages through `patchdiff_list_targets`, `resources/read` reads through
//!   `patchdiff_get_target`, so a role sees exactly the targets the API lets it see.
//! - Subscriptions need a stream to send notifications on: over stdio, legacy
//!   `resources/subscribe` / `resources/unsubscribe` and the 2026-07-28 era's
//!   `subscriptions/listen` (ended by `notifications/cancelled`); over HTTP only
//!   `subscriptions/listen`, whose response is an SSE stream (crate::http, docs/http.md). The
//!   legacy ways need an HTTP session, which the endpoint does not keep: refused there.
//! - A change is announced to a subscriber only after a read through the API as the
//!   connection's role says it may still see the target.

use super::Server;
use crate::catalog::REVISIONS;
use crate::config::Profile;
use crate::feed::{self, Hub, Listener, Signal};
use crate::modern;
use crate::rpc::{self, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND};
use patchdiff_engine::wire::{ASCII, to_string};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::Arc;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// `resources/read` of an unknown target (or one the role may not read) before 2026-07-28.
const RESOURCE_NOT_FOUND: i64 = -32002;
/// `resources/list` pages: patchdiff_list_targets' own largest page.
const PAGE: u32 = 100;
/// The subscription ID key of 2026-07-28 notifications.
const SUBSCRIPTION_ID_KEY: &str = "io.modelcontextprotocol/subscriptionId";

/// A connection's subscriptions: legacy `resources/subscribe` targets, 2026-07-28 listen
/// streams (their request ID and targets), and the listening session once anything is watched.
#[derive(Default)]
pub struct Subscriptions {
    legacy: BTreeSet<String>,
    listens: Vec<(Value, BTreeSet<String>)>,
    listener: Option<Listener>,
}

impl Subscriptions {
    fn watched(&self) -> BTreeSet<String> {
        let mut all = self.legacy.clone();
        for (_, targets) in &self.listens {
            all.extend(targets.iter().cloned());
        }
        all
    }

    /// The listener, while one runs.
    pub fn listener(&mut self) -> Option<&mut Listener> {
        self.listener.as_mut()
    }
}

type Refusal = (i64, String, Option<Value>);

fn invalid(message: impl Into<String>) -> Refusal {
    (
        INVALID_PARAMS,
        format!("Invalid params: {}", message.into()),
        None,
    )
}

/// The `uri` of a request's params.
fn uri_param(params: Option<&RawValue>) -> Result<String, Refusal> {
    let p: Value = params
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or(Value::Null);
    match p.get("uri") {
        Some(Value::String(u)) => Ok(u.clone()),
        _ => Err(invalid("params.uri must be a string")),
    }
}

impl Server {
    /// Whether this connection serves targets as resources.
    pub(super) fn serves_resources(&self) -> bool {
        self.config.profile == Profile::Extended
    }

    /// The `resources` capability: subscriptions only where a stream can carry them (stdio; in
    /// 2026-07-28 also HTTP, which answers `subscriptions/listen` with an SSE stream).
    pub(super) fn resources_capability(&self) -> Value {
        if self.era == super::Era::Modern {
            if self.streaming || self.listens_over_http {
                json!({"subscribe": true})
            } else {
                json!({})
            }
        } else {
            json!({"subscribe": self.streaming, "listChanged": false})
        }
    }

    fn not_found(&self, uri: &str) -> Refusal {
        let code = if self.era == super::Era::Modern {
            INVALID_PARAMS
        } else {
            RESOURCE_NOT_FOUND
        };
        // At most 256 code points of it: a URI of this server is 56 bytes, and the whole of
        // any other was echoed, a 10 MB line for a 10 MB URI (helper-106).
        let uri = patchdiff_engine::api::utf8::cut_chars(uri, 256);
        (code, "Resource not found".into(), Some(json!({"uri": uri})))
    }

    /// A resource method of this profile, answered; `None` when `method` is none of them.
    pub(super) async fn resource_request(
        &mut self,
        id: &Value,
        method: &str,
        params: Option<&RawValue>,
    ) -> Option<String> {
        let modern = self.era == super::Era::Modern;
        let answer = match (method, modern) {
            ("resources/list", _) => self.list_resources(params).await.map(|r| {
                if modern {
                    with_ttl(modern::complete(r), 0, "private")
                } else {
                    r
                }
            }),
            ("resources/templates/list", _) => {
                let r = json!({"resourceTemplates": [{
                    "uriTemplate": feed::URI_TEMPLATE,
                    "name": "target",
                    "title": "PatchDIFF target",
                    "description": "The current text of a target (patchdiff_get_target), by its target_file_id. Subscribe to hear of every accepted change and SAVE.",
                    "mimeType": "text/plain",
                }]});
                Ok(if modern { modern::cacheable(r) } else { r })
            }
            ("resources/read", _) => self.read_resource(params).await.map(|r| {
                if modern {
                    with_ttl(modern::complete(r), 0, "private")
                } else {
                    r
                }
            }),
            ("resources/subscribe" | "resources/unsubscribe", false) => {
                self.legacy_subscription(method == "resources/subscribe", params)
                    .await
            }
            ("subscriptions/listen", true) => {
                return Some(match self.listen(id, params).await {
                    Ok(ack) => ack,
                    Err((code, message, data)) => {
                        rpc::error_line_with_data(id, code, &message, data)
                    }
                });
            }
            _ => return None,
        };
        Some(match answer {
            Ok(result) => rpc::result_line(id, result),
            Err((code, message, data)) => rpc::error_line_with_data(id, code, &message, data),
        })
    }

    /// `resources/list`: one page of the targets the role may read, newest first.
    async fn list_resources(&mut self, params: Option<&RawValue>) -> Result<Value, Refusal> {
        let p: Value = params
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or(Value::Null);
        let cursor = match p.get("cursor") {
            None | Some(Value::Null) => None,
            Some(Value::String(c)) => Some(c.clone()),
            Some(_) => return Err(invalid("cursor must be a string")),
        };
        let args = json!({"limit": PAGE, "cursor": cursor});
        let page = self.api("patchdiff_list_targets", &args).await?;
        if page.get("status").and_then(Value::as_str) != Some("ok") {
            return Err(invalid(format!(
                "cursor must be a nextCursor from an earlier resources/list page ({})",
                page.get("failure_detail")
                    .and_then(Value::as_str)
                    .unwrap_or("refused")
            )));
        }
        let resources: Vec<Value> = page["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| {
                let id = t.get("target_file_id")?.as_str()?;
                let mut r = json!({
                    "uri": feed::uri(id),
                    "name": t.get("filename").cloned().unwrap_or(Value::Null),
                    "mimeType": t.get("target_type").cloned().unwrap_or(Value::Null),
                    "size": t.get("size_bytes").cloned().unwrap_or(Value::Null),
                });
                // Any role may grant its targets to another, unasked: a host must be able to
                // tell a document another role wrote (and shared, perhaps to steer the agent)
                // from the role's own (helper-48).
                if let (Some(access), Some(owner)) = (
                    t.get("access").and_then(Value::as_str),
                    t.get("owner").and_then(Value::as_str),
                ) && access != "owner"
                {
                    r["description"] = json!(format!(
                        "Another role's target: owned by role {owner}; this role has {access} access to it."
                    ));
                }
                Some(r)
            })
            .collect();
        let mut r = json!({"resources": resources});
        if let Some(next) = page.get("next_cursor").and_then(Value::as_str) {
            r["nextCursor"] = json!(next);
        }
        Ok(r)
    }

    /// `resources/read`: the target's current text, with its version and hash in `_meta`.
    async fn read_resource(&mut self, params: Option<&RawValue>) -> Result<Value, Refusal> {
        let uri = uri_param(params)?;
        let Some(id) = feed::target_of(&uri) else {
            return Err(self.not_found(&uri));
        };
        let t = self
            .api("patchdiff_get_target", &json!({"target_file_id": id}))
            .await?;
        if t.get("status").and_then(Value::as_str) != Some("ok") {
            return Err(self.not_found(&uri));
        }
        let mut content = json!({
            "uri": uri,
            "mimeType": t.get("target_type").cloned().unwrap_or(json!("text/plain")),
            "text": t.get("current_content").cloned().unwrap_or(json!("")),
        });
        if self.revision() != REVISIONS[0] {
            content["_meta"] = json!({
                "patchdiff/version": t.get("version").cloned().unwrap_or(Value::Null),
                "patchdiff/current_hash": t.get("current_hash").cloned().unwrap_or(Value::Null),
            });
        }
        Ok(json!({"contents": [content]}))
    }

    /// One SQL function call, its answer as JSON; a failed call is an internal error.
    async fn api(&mut self, function: &str, args: &Value) -> Result<Value, Refusal> {
        let text = self
            .db
            .call(function, &to_string(args, ASCII))
            .await
            .map_err(|e| {
                (
                    rpc::INTERNAL_ERROR,
                    format!("Internal error: the database call failed ({})", e.message),
                    None,
                )
            })?;
        serde_json::from_str(&text).map_err(|_| {
            (
                rpc::INTERNAL_ERROR,
                "Internal error: the database returned a result that is not JSON".into(),
                None,
            )
        })
    }

    /// Whether this connection's role may read the target now: a read through the API.
    async fn readable(&mut self, id: &str) -> bool {
        let args = json!({"target_file_id": id, "start": 0, "length": 1});
        matches!(
            self.api("patchdiff_read_target", &args).await,
            Ok(v) if v.get("status").and_then(Value::as_str) == Some("ok")
        )
    }

    fn refuse_without_stream(&self, method: &str) -> Refusal {
        let message = if self.era == super::Era::Modern {
            format!(
                "Method not found: {method} is answered with a stream of notifications, which this request cannot carry (docs/http.md)."
            )
        } else {
            format!(
                "Method not found: {method} needs an HTTP session (Mcp-Session-Id and a GET stream) to send notifications on, and this Streamable HTTP endpoint keeps no sessions. Subscribe over stdio, or with MCP {} subscriptions/listen over HTTP (docs/http.md).",
                modern::MODERN
            )
        };
        (METHOD_NOT_FOUND, message, None)
    }

    /// Starts the listening session if none runs, and tells it what is watched now.
    async fn watch(&mut self) -> Result<(), Refusal> {
        let watched = self.subs.watched();
        if watched.is_empty() {
            self.subs.listener = None;
            return Ok(());
        }
        if self.subs.listener.is_none() {
            let failed = |why: String| {
                (
                    rpc::INTERNAL_ERROR,
                    format!("Internal error: cannot listen for changes ({why})"),
                    None,
                )
            };
            let listener = match self.feed_hub.clone() {
                // An HTTP stream: the endpoint's shared sessions, started by the first stream.
                // They run as the login role (LISTEN needs no privilege; what a stream hears
                // is checked as its own role before it is sent).
                Some(slot) => {
                    let mut held = slot.lock().await;
                    let hub = match held.upgrade().filter(|h| h.is_running()) {
                        Some(hub) => hub,
                        None => {
                            let (databases, setup) =
                                self.db.listen_sessions(false).await.map_err(failed)?;
                            let hub = Hub::start(databases, setup, self.db.layout_probe())
                                .await
                                .map_err(failed)?;
                            *held = Arc::downgrade(&hub);
                            hub
                        }
                    };
                    hub.subscribe()
                }
                None => {
                    let (databases, setup) = self.db.listen_sessions(true).await.map_err(failed)?;
                    Listener::start(databases, setup, self.db.layout_probe())
                        .await
                        .map_err(failed)?
                }
            };
            self.subs.listener = Some(listener);
        }
        if let Some(l) = &self.subs.listener {
            l.watch(watched);
        }
        Ok(())
    }

    /// Legacy `resources/subscribe` and `resources/unsubscribe`.
    async fn legacy_subscription(
        &mut self,
        subscribe: bool,
        params: Option<&RawValue>,
    ) -> Result<Value, Refusal> {
        let method = if subscribe {
            "resources/subscribe"
        } else {
            "resources/unsubscribe"
        };
        if !self.streaming {
            return Err(self.refuse_without_stream(method));
        }
        let uri = uri_param(params)?;
        let Some(id) = feed::target_of(&uri).map(str::to_owned) else {
            return Err(self.not_found(&uri));
        };
        if !subscribe {
            self.subs.legacy.remove(&id);
            self.watch().await?;
            return Ok(json!({}));
        }
        if !self.readable(&id).await {
            return Err(self.not_found(&uri));
        }
        if !self.subs.legacy.contains(&id) && self.subs.watched().len() >= feed::MAX_WATCHED {
            return Err(invalid(format!(
                "this connection already watches {} targets, the most it may",
                feed::MAX_WATCHED
            )));
        }
        self.subs.legacy.insert(id);
        if let Err(e) = self.watch().await {
            self.subs
                .legacy
                .remove(feed::target_of(&uri).unwrap_or_default());
            return Err(e);
        }
        Ok(json!({}))
    }

    /// 2026-07-28 `subscriptions/listen`: the acknowledgment line (the request itself is
    /// answered only when the stream ends). Only `resourceSubscriptions` is honored, and only
    /// for URIs of targets the role may read; the others are left out of the acknowledgment,
    /// as an unknown target would be.
    async fn listen(&mut self, id: &Value, params: Option<&RawValue>) -> Result<String, Refusal> {
        if !self.streaming {
            return Err(self.refuse_without_stream("subscriptions/listen"));
        }
        if self.subs.listens.iter().any(|(l, _)| l == id) {
            return Err((
                INVALID_REQUEST,
                "Invalid Request: a subscriptions/listen stream with this id is open".into(),
                None,
            ));
        }
        let id_bytes = to_string(id, ASCII).len();
        if id_bytes > feed::LISTEN_ID_MAX_BYTES {
            return Err((
                INVALID_REQUEST,
                format!(
                    "Invalid Request: a subscriptions/listen id is echoed in every notification of its stream; this one is {id_bytes} bytes of JSON, over {}",
                    feed::LISTEN_ID_MAX_BYTES
                ),
                None,
            ));
        }
        if self.subs.listens.len() >= feed::MAX_LISTENS {
            return Err((
                INTERNAL_ERROR,
                format!(
                    "Subscription limit reached: this connection has {} subscriptions/listen streams open, the most one connection may; nothing was subscribed: end one first (notifications/cancelled)",
                    self.subs.listens.len()
                ),
                None,
            ));
        }
        let p: Value = params
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or(Value::Null);
        let Some(filter) = p.get("notifications").filter(|f| f.is_object()) else {
            return Err(invalid(
                "subscriptions/listen needs params.notifications, an object",
            ));
        };
        let uris: Vec<String> = match filter.get("resourceSubscriptions") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => {
                let mut uris = Vec::new();
                for u in a {
                    let Value::String(u) = u else {
                        return Err(invalid("resourceSubscriptions must be an array of strings"));
                    };
                    uris.push(u.clone());
                }
                uris
            }
            Some(_) => return Err(invalid("resourceSubscriptions must be an array of strings")),
        };
        if uris.len() > feed::MAX_WATCHED {
            return Err(invalid(format!(
                "resourceSubscriptions names {} URIs; at most {} are watched per connection",
                uris.len(),
                feed::MAX_WATCHED
            )));
        }
        let mut honored = Vec::new();
        let mut targets = BTreeSet::new();
        for u in uris {
            let Some(t) = feed::target_of(&u).map(str::to_owned) else {
                continue;
            };
            if targets.contains(&t) || self.readable(&t).await {
                targets.insert(t);
                honored.push(u);
            }
        }
        let mut all = self.subs.watched();
        all.extend(targets.iter().cloned());
        if all.len() > feed::MAX_WATCHED {
            return Err(invalid(format!(
                "this connection would watch {} targets; at most {} are watched per connection",
                all.len(),
                feed::MAX_WATCHED
            )));
        }
        self.subs.listens.push((id.clone(), targets));
        if let Err(e) = self.watch().await {
            self.subs.listens.pop();
            return Err(e);
        }
        let mut acknowledged = json!({});
        if !honored.is_empty() {
            acknowledged["resourceSubscriptions"] = json!(honored);
        }
        Ok(notification_line(
            "notifications/subscriptions/acknowledged",
            json!({"_meta": {SUBSCRIPTION_ID_KEY: id}, "notifications": acknowledged}),
        ))
    }

    /// `notifications/cancelled` naming an open listen stream ends it; nothing is answered.
    pub(super) async fn cancelled(&mut self, params: Option<&RawValue>) {
        let p: Value = params
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or(Value::Null);
        let Some(request) = p.get("requestId") else {
            return;
        };
        let before = self.subs.listens.len();
        self.subs.listens.retain(|(id, _)| id != request);
        if self.subs.listens.len() != before
            && let Err((_, why, _)) = self.watch().await
        {
            tracing::warn!("change feed: {why}");
        }
    }

    /// Tells every subscriber of a changed target (or, on a resync, of every watched target)
    /// that may still read it: one line per subscription, written between responses (stdio) or
    /// as one SSE event each (crate::http).
    pub(crate) async fn deliver<W: AsyncWrite + Unpin>(
        &mut self,
        first: Option<Signal>,
        output: &mut W,
    ) -> std::io::Result<()> {
        let mut changed = BTreeSet::new();
        let mut signal = first;
        let listener_gone = signal.is_none();
        // Everything already waiting is handled together: a burst of edits to one target is
        // one notification per subscriber.
        while let Some(s) = signal {
            match s {
                Signal::Changed(t) => {
                    changed.insert(t);
                }
                Signal::Resync => changed.extend(self.subs.watched()),
            }
            signal = self.subs.listener().and_then(Listener::try_recv);
        }
        if listener_gone {
            // The listener ended (it retries lost sessions itself, so this is a router's
            // partitions that moved): listen afresh at once, and tell every subscriber that its
            // targets may have changed, since what happened meanwhile may not have been heard.
            self.subs.listener = None;
            match self.watch().await {
                Ok(()) => changed = self.subs.watched(),
                Err((_, why, _)) => {
                    tracing::warn!("change feed: the listener stopped ({why})");
                    return Ok(());
                }
            }
        }
        for target in changed {
            let legacy = self.subs.legacy.contains(&target);
            let streams: Vec<Value> = self
                .subs
                .listens
                .iter()
                .filter(|(_, t)| t.contains(&target))
                .map(|(id, _)| id.clone())
                .collect();
            if !legacy && streams.is_empty() {
                continue;
            }
            if !self.readable(&target).await {
                continue;
            }
            let uri = feed::uri(&target);
            let mut lines = String::new();
            if legacy {
                lines.push_str(&notification_line(
                    "notifications/resources/updated",
                    json!({"uri": uri}),
                ));
                lines.push('\n');
            }
            for id in streams {
                lines.push_str(&notification_line(
                    "notifications/resources/updated",
                    json!({"_meta": {SUBSCRIPTION_ID_KEY: id}, "uri": uri}),
                ));
                lines.push('\n');
            }
            output.write_all(lines.as_bytes()).await?;
            output.flush().await?;
        }
        Ok(())
    }
}

/// Whether an answer line of `subscriptions/listen` is its acknowledgment (the stream goes on)
/// rather than an error (the request is over).
pub(crate) fn is_acknowledgment(line: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Line<'a> {
        #[serde(borrow, default)]
        method: Option<&'a str>,
    }
    serde_json::from_str::<Line>(line)
        .is_ok_and(|l| l.method == Some("notifications/subscriptions/acknowledged"))
}

/// The response that ends a 2026-07-28 listen stream on purpose (the server is stopping): the
/// subscription's result, stamped with its ID, so a client knows the end was deliberate.
pub(crate) fn listen_ended(id: &Value) -> String {
    rpc::result_line(
        id,
        modern::complete(json!({"_meta": {SUBSCRIPTION_ID_KEY: id}})),
    )
}

/// A 2026-07-28 result with its caching hints.
fn with_ttl(mut r: Value, ttl_ms: u64, scope: &str) -> Value {
    r["ttlMs"] = json!(ttl_ms);
    r["cacheScope"] = json!(scope);
    r
}

/// A server notification line (ASCII, like every line this server writes).
fn notification_line(method: &str, params: Value) -> String {
    to_string(
        &json!({"jsonrpc": "2.0", "method": method, "params": params}),
        ASCII,
    )
}
