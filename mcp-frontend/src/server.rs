//! The MCP session: lifecycle, discovery and one SQL call per tool call.

use crate::catalog::{Declaration, REVISIONS, profile_tools};
use crate::compact;
use crate::config::{Config, Profile, ResponseMode};
use crate::database::{CallError, Db};
use crate::feed;
use crate::modern::{self, MODERN};
use crate::observed_v2;
use crate::rpc::{self, INVALID_PARAMS, INVALID_REQUEST, Incoming, METHOD_NOT_FOUND};
use crate::tool::{Family, Tool};
use crate::workspace::{self, Outcome, Workspace};
use patchdiff_engine::wire::{LITERAL, collapse_current_context, quoted_names, to_string};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};

mod resources;
pub(crate) use resources::{Subscriptions, is_acknowledgment, listen_ended};

/// What the server tells a host about using it, once, at initialization.
const INSTRUCTIONS: &str = "PatchDIFF edits documents as guarded transactions. Read first (read_target, read_lines, find_occurrences) and pass the version (or hash) you read as a guard; on a rejection, re-read before proposing again and link the retry with parent_pdcp_log_id. Offsets are Unicode code points. Use client_request_id to recover a lost response by resending the identical call.";

/// A connection's era: undecided until its first request; then legacy (the `initialize`
/// handshake and the contract's three revisions, exactly as before 2026-07-28) or modern
/// (2026-07-28, every request carrying its own `_meta`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Era {
    Undecided,
    Legacy,
    Modern,
}

pub struct Server {
    pub(crate) config: Config,
    pub(crate) db: Db,
    /// The tools of this profile whose SQL functions exist, in catalog order.
    tools: std::sync::Arc<Vec<Declaration>>,
    revision: Option<&'static str>,
    /// Chosen by the connection's first request (docs/eras.md).
    era: Era,
    /// The opened `PATCHDIFF_WORKSPACE_ROOT`, when configured.
    pub(crate) workspace: Option<Workspace>,
    /// The files profile's knowledge of the files it served (docs/files.md).
    pub(crate) files: crate::files::Files,
    /// Whether the connection stays open so the server can send notifications on it (stdio,
    /// [`Server::serve`], or one HTTP `subscriptions/listen` stream: [`Server::for_stream`]).
    streaming: bool,
    /// An HTTP request of an endpoint that answers 2026-07-28 `subscriptions/listen` with an SSE
    /// stream: `server/discover` says so, though this one request is no stream.
    listens_over_http: bool,
    /// Resource subscriptions (the `extended` profile: issue 19 item 2).
    subs: resources::Subscriptions,
    /// An HTTP stream's endpoint-wide listening sessions, shared by all its streams.
    feed_hub: Option<feed::HubSlot>,
}

/// The catalog as a profile and an installed extension allow it: a tool is listed when the SQL
/// function it calls exists.
pub fn active_tools(config: &Config, installed: &dyn Fn(&str) -> bool) -> Vec<Declaration> {
    let mut tools: Vec<Declaration> = profile_tools(config.profile)
        .into_iter()
        .filter(|t| installed(t.function()))
        .collect();
    if config.response_mode == ResponseMode::Compact {
        for t in tools.iter_mut().filter(|t| t.tool.compact_projected()) {
            t.description.push_str(compact::ANNOUNCEMENT);
        }
    }
    tools
}

/// The `tools/list` result for a revision.
pub fn list(tools: &[Declaration], revision: &str) -> Value {
    json!({"tools": tools.iter().map(|t| t.declaration(revision)).collect::<Vec<_>>()})
}

/// Negotiates the revision: a supported request is echoed, an unsupported one is offered the
/// newest, an omitted one gets the oldest. Anything else is an invalid initialize.
pub fn negotiate(params: Option<&RawValue>) -> Result<&'static str, String> {
    let params: Value = match params {
        None => return Ok(REVISIONS[0]),
        Some(p) => serde_json::from_str(p.get()).map_err(|e| format!("initialize params: {e}"))?,
    };
    let Value::Object(p) = params else {
        return Err("initialize params must be an object".into());
    };
    match p.get("protocolVersion") {
        None => Ok(REVISIONS[0]),
        Some(Value::String(v)) => Ok(REVISIONS
            .iter()
            .find(|r| **r == v)
            .copied()
            .unwrap_or(REVISIONS[2])),
        Some(_) => Err("protocolVersion must be a string".into()),
    }
}

#[derive(Deserialize)]
struct CallParams<'a> {
    name: Value,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
}

fn is_error_status(status: Option<&str>) -> bool {
    matches!(
        status,
        Some(
            "invalid_argument"
                | "not_found"
                | "outcome_unknown"
                | CANCELLED
                | PERMISSION_DENIED
                | UNAVAILABLE
                | REFUSED
        )
    )
}

/// The status of a call on a target the connection's role may read but not change as asked
/// (issue 15; docs/security.md): nothing was written. Not in the contract, whose single-role
/// world has no such answer.
pub const PERMISSION_DENIED: &str = "permission_denied";

/// The status of a call PostgreSQL cancelled (SQLSTATE 57014: statement_timeout, a cancel
/// request), which rolled it back. Not in the contract, which knows only `outcome_unknown` for
/// failures of the database call; this one is certain, so a host may simply resend (docs/profiles.md).
pub const CANCELLED: &str = "cancelled";

/// The status of a call a sharded deployment's router could not take to its target's partition
/// (issue 20; docs/scale-out.md): it never started there, nothing was written, and resending it
/// is safe. Not in the contract, whose single database has no partitions.
pub const UNAVAILABLE: &str = "unavailable";

/// The status of a call whose partition's shard refused the front end's database role (issue 20;
/// docs/scale-out.md "Roles"): it never started there, nothing was written, and resending fails
/// the same way until a DBA lets the role in. Not in the contract.
pub const REFUSED: &str = "refused";

/// The answer to a failed database call (issue 14 item 5): `cancelled` when PostgreSQL cancelled
/// the statement (nothing was written: retryable), else `outcome_unknown`. `after` tells a host
/// what else is true of this call (for a publishing SAVE: no file was installed).
pub fn call_failure(tool: &str, e: &CallError, unknown_advice: &str, after: &str) -> Value {
    if e.unavailable {
        return json!({
            "status": UNAVAILABLE, "code": "partition_unavailable", "tool": tool,
            "failure_reason": "partition_unavailable", "retryable": true, "nothing_written": true,
            "failure_detail": format!("The target's partition could not be reached ({}); the call never started there, so nothing was written{after}. Resending the call is safe once the partition is back; targets on other partitions are unaffected.", e.message),
        });
    }
    if e.login_refused {
        return json!({
            "status": REFUSED, "code": "login_refused", "tool": tool,
            "failure_reason": "login_refused", "retryable": false, "nothing_written": true,
            "failure_detail": format!("The target's partition refused this server's database role ({}); the call never started there, so nothing was written{after}. Resending fails the same way until a DBA lets the role log in on every shard (docs/scale-out.md, \"Roles\").", e.message),
        });
    }
    match e.cancelled {
        Some(c) => json!({
            "status": CANCELLED, "code": c.reason(), "tool": tool,
            "failure_reason": c.reason(), "retryable": true, "nothing_written": true,
            "failure_detail": format!("PostgreSQL cancelled the call ({}) and rolled it back: nothing was written{after}. Resending the call is safe; if it keeps timing out, the target may be locked by another transaction, or PATCHDIFF_MCP_STATEMENT_TIMEOUT is too short for it.", e.message),
        }),
        None => json!({
            "status": "outcome_unknown", "tool": tool,
            "failure_detail": format!("The database call failed ({}); whether it committed is unknown. {unknown_advice}", e.message),
        }),
    }
}

impl Server {
    pub fn new(config: Config, db: Db) -> Server {
        let tools = std::sync::Arc::new(active_tools(&config, &|name| db.functions.contains(name)));
        Server::with_tools(config, db, tools)
    }

    /// A server for one request over a pooled connection, with the tool list its endpoint
    /// computed once (the same for every connection of one database).
    pub fn with_tools(config: Config, db: Db, tools: std::sync::Arc<Vec<Declaration>>) -> Server {
        Server {
            config,
            db,
            tools,
            revision: None,
            era: Era::Undecided,
            workspace: None,
            files: crate::files::Files::default(),
            streaming: false,
            listens_over_http: false,
            subs: resources::Subscriptions::default(),
            feed_hub: None,
        }
    }

    /// An HTTP request of the 2026-07-28 era on an endpoint that serves `subscriptions/listen`
    /// as an SSE stream (crate::http).
    pub fn listening_over_http(mut self) -> Server {
        self.listens_over_http = true;
        self
    }

    /// One HTTP `subscriptions/listen` stream's turn on a pooled connection: its subscriptions
    /// (and their listening session) carried in, to be taken out again with
    /// [`Server::take_subscriptions`] before the connection goes back to the pool.
    /// Its listener comes from the endpoint's `hub`, whose sessions all its streams share.
    pub(crate) fn for_stream(mut self, subs: Subscriptions, hub: feed::HubSlot) -> Server {
        self.streaming = true;
        self.subs = subs;
        self.feed_hub = Some(hub);
        self
    }

    /// The subscriptions, out of this server (see [`Server::for_stream`]).
    pub(crate) fn take_subscriptions(&mut self) -> Subscriptions {
        std::mem::take(&mut self.subs)
    }

    /// A legacy connection already on `revision`: what a transport without a connection of its
    /// own (one HTTP request, whose `MCP-Protocol-Version` header names the revision) serves.
    pub fn on_legacy_revision(mut self, revision: &'static str) -> Server {
        self.era = Era::Legacy;
        self.revision = Some(revision);
        self
    }

    /// A connection already in the 2026-07-28 era: an HTTP request whose
    /// `MCP-Protocol-Version` header names it (each request then carries its own `_meta`).
    pub fn on_modern(mut self) -> Server {
        self.era = Era::Modern;
        self.revision = Some(MODERN);
        self
    }

    /// The database connection back, for the next request (the HTTP endpoint's pool).
    pub fn into_db(self) -> Db {
        self.db
    }

    pub fn with_workspace(mut self, workspace: Option<Workspace>) -> Server {
        self.workspace = workspace;
        self
    }

    /// Serves newline-delimited JSON-RPC until the input ends. Requests are answered one at a
    /// time, in order; while a call runs, the lines after it are read ahead (at most
    /// [`AHEAD_LINES`] lines or [`AHEAD_BYTES`] bytes, then the pipe holds the rest), so that a
    /// `notifications/cancelled` naming the running tool call cancels it: its statements are
    /// cancelled and the rest of it is not run ([`crate::database::Cancellation`]), and it is
    /// not answered, as the MCP specification asks. Any other request runs to its end and is
    /// answered, and the notification is then handled in its turn. One naming a request read ahead and not yet
    /// started removes that request unanswered. Every other line is handled after the call, in
    /// the order it came.
    ///
    /// `reader_gone` tells whether nobody can read `output` any more (the host died): asked
    /// every [`HOST_CHECK`] while a call runs. If so, the call's answer can never be read
    /// (helper-62: a call waiting for a row lock after its host had died committed when the lock
    /// was released, an edit nobody would ever hear of), so its statement is cancelled (as
    /// `pg_cancel_backend` would: a write cancelled before its COMMIT rolls back) and serving
    /// ends at once with an error, on which the process exits 1 without waiting for the call.
    /// Exiting closes every session the call may be using, also those the cancel does not reach
    /// (one it reconnected, a publication's session on its partition through a router): each
    /// sets `client_connection_check_interval` (`database::PIN_SEARCH_PATH`), so PostgreSQL ends
    /// a statement still running or waiting there within a second and rolls its transaction
    /// back. An input that merely ends lets the call finish and be answered (`printf ... |
    /// patchdiff-mcp` reads its answers).
    pub async fn serve<R: AsyncBufRead + Unpin, W: AsyncWrite + Unpin>(
        mut self,
        mut input: R,
        mut output: W,
        reader_gone: fn() -> bool,
    ) -> std::io::Result<()> {
        // `buf` is where lines are read (a line half read stays there and in `seen`); `line` is
        // the message being handled.
        let mut buf = Vec::with_capacity(8192);
        let mut line = Vec::with_capacity(8192);
        let max = self.config.max_line_bytes;
        self.streaming = true;
        let mut seen = 0usize;
        let mut ahead: std::collections::VecDeque<Ahead> = std::collections::VecDeque::new();
        let mut input_ended = false;
        let cancellation = self.db.cancellation();
        loop {
            let read = match ahead.pop_front() {
                Some(Ahead::Line(l)) => {
                    line = l;
                    Line::Read
                }
                Some(Ahead::TooLong(n)) => Line::TooLong(n),
                Some(Ahead::End) => Line::End,
                None => {
                    // The change feed's notifications are written here, between responses, by
                    // the one writer of the output. The client's input goes first when both are
                    // ready: a `notifications/cancelled` the client sent before a change was
                    // announced ends its stream before that change is delivered, however busy
                    // the machine (a fair choice delivered it half the time). Only this client
                    // waits on its own input.
                    let read = tokio::select! {
                        biased;
                        read = read_bounded_line(&mut input, &mut buf, &mut seen, max) => read?,
                        signal = next_signal(&mut self.subs) => {
                            self.deliver(signal, &mut output).await?;
                            continue;
                        }
                    };
                    if matches!(read, Line::Read) {
                        std::mem::swap(&mut line, &mut buf);
                        buf.clear();
                    }
                    read
                }
            };
            let oversized = match read {
                Line::End => return Ok(()),
                Line::Read => None,
                Line::TooLong(n) => Some(n),
            };
            while matches!(line.last(), Some(b'\n' | b'\r')) {
                line.pop();
            }
            if oversized.is_none() && line.iter().all(u8::is_ascii_whitespace) {
                line.clear();
                continue;
            }
            let reply = match oversized {
                Some(n) => Some(rpc::error_line(
                    &Value::Null,
                    rpc::INVALID_REQUEST,
                    &format!(
                        "Invalid Request: a line of {n} bytes or more is over this server's limit of {max} bytes (PATCHDIFF_MCP_MAX_LINE_BYTES); it was discarded unread"
                    ),
                )),
                None => {
                    let cancel = self.db.cancel_token();
                    cancellation.clear();
                    let call = self.handle_message(&line);
                    tokio::pin!(call);
                    let mut check = tokio::time::interval(HOST_CHECK);
                    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    // The running request's id when a cancellation stops it (a tool call or a
                    // resource read: [`cancellable_id`]; any other request finishes and is
                    // answered, and the cancellation is then handled in its turn, which ends a
                    // listen stream it opened: helper-66 F2), read from its line when a
                    // cancellation comes.
                    let mut running: Option<Option<Value>> = None;
                    // Whether the call was cancelled; its cancel requests are sent again while it
                    // still runs: a statement sent after one reached an idle session (or whose
                    // request was lost) is cancelled by the next.
                    let mut cancelled = false;
                    let mut again = tokio::time::interval(CANCEL_AGAIN);
                    again.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    let reply = loop {
                        let room = !input_ended
                            && ahead.len() < AHEAD_LINES
                            && ahead.iter().map(Ahead::len).sum::<usize>() < AHEAD_BYTES;
                        tokio::select! {
                            biased;
                            reply = &mut call => break reply,
                            _ = check.tick() => {
                                if reader_gone() {
                                    tracing::warn!("stdout has no reader any more: cancelling the running call and exiting");
                                    if let Err(e) = cancel.cancel_query(tokio_postgres::NoTls).await {
                                        tracing::warn!("the request to cancel the running call failed: {e}");
                                    }
                                    return Err(std::io::Error::new(
                                        std::io::ErrorKind::BrokenPipe,
                                        "stdout has no reader any more: the running call was cancelled and its answer cannot be written",
                                    ));
                                }
                            }
                            _ = again.tick(), if cancelled => {
                                cancellation.cancel(false).await;
                            }
                            read = read_bounded_line(&mut input, &mut buf, &mut seen, max), if room => {
                                let read = read?;
                                if read_ahead(read, &mut buf, &mut ahead, &mut input_ended, &mut running, &line)
                                    && !cancelled
                                {
                                    cancelled = true;
                                    tracing::info!("notifications/cancelled: cancelling the running call");
                                    cancellation.cancel(false).await;
                                    again.reset();
                                }
                            }
                        }
                    };
                    // The answer was decoded and made without reading input, which takes a while
                    // for a large one (helper-108: 0.35 s for a 64 MiB target's read, and the
                    // cancellation sent meanwhile was read only once the answer was written). What
                    // the client has sent by now is read before the answer is written: a
                    // cancellation of this request among it drops the answer. Input that arrived
                    // while the answer was made is seen only once the runtime has polled for it,
                    // so a large answer waits a moment for it; any other takes only what is
                    // already known to be there.
                    let patient = reply
                        .as_ref()
                        .is_some_and(|r| r.len() > PATIENT_ANSWER_BYTES);
                    while !cancelled
                        && !input_ended
                        && ahead.len() < AHEAD_LINES
                        && ahead.iter().map(Ahead::len).sum::<usize>() < AHEAD_BYTES
                    {
                        let next = read_bounded_line(&mut input, &mut buf, &mut seen, max);
                        let read = if patient {
                            match tokio::time::timeout(PATIENT_WAIT, next).await {
                                Ok(read) => read?,
                                Err(_) => break,
                            }
                        } else {
                            tokio::select! {
                                biased;
                                read = next => read?,
                                () = std::future::ready(()) => break,
                            }
                        };
                        cancelled = read_ahead(
                            read,
                            &mut buf,
                            &mut ahead,
                            &mut input_ended,
                            &mut running,
                            &line,
                        );
                    }
                    cancellation.clear();
                    if cancelled {
                        tracing::info!("the cancelled call ended; it is not answered");
                        None
                    } else {
                        reply
                    }
                }
            };
            if let Some(mut reply) = reply {
                reply.push('\n');
                output.write_all(reply.as_bytes()).await?;
                output.flush().await?;
            }
            line.clear();
        }
    }

    /// One JSON-RPC message (a line without its newline): the answer line, or `None` for a
    /// notification.
    pub async fn handle_message(&mut self, message: &[u8]) -> Option<String> {
        match rpc::parse_line(message) {
            Err((id, code, message)) => Some(rpc::error_line(&id, code, &message)),
            Ok(Incoming::Notification { method, params }) => {
                tracing::debug!(method, "notification");
                if method == "notifications/cancelled" && self.serves_resources() {
                    self.cancelled(params.as_deref()).await;
                }
                None
            }
            Ok(Incoming::Request { id, method, params }) => {
                Some(self.request(&id, &method, params.as_deref()).await)
            }
            Ok(Incoming::Response) => {
                tracing::debug!("an unsolicited response was ignored");
                None
            }
        }
    }

    async fn request(&mut self, id: &Value, method: &str, params: Option<&RawValue>) -> String {
        if self.era == Era::Undecided {
            self.era = if method != "initialize" && modern::has_envelope(params) {
                self.revision = Some(MODERN);
                tracing::info!(
                    revision = MODERN,
                    profile = self.config.profile.name(),
                    "modern connection"
                );
                Era::Modern
            } else {
                Era::Legacy
            };
        }
        if self.era == Era::Modern {
            return self.modern_request(id, method, params).await;
        }
        match method {
            "initialize" => {
                if self.revision.is_some() {
                    return rpc::error_line(
                        id,
                        INVALID_REQUEST,
                        "Invalid Request: already initialized; the connection keeps its revision",
                    );
                }
                match negotiate(params) {
                    Ok(revision) => {
                        self.revision = Some(revision);
                        tracing::info!(
                            revision,
                            profile = self.config.profile.name(),
                            "initialized"
                        );
                        let mut capabilities = json!({"tools": {"listChanged": false}});
                        if self.serves_resources() {
                            capabilities["resources"] = self.resources_capability();
                        }
                        rpc::result_line(
                            id,
                            json!({
                                "protocolVersion": revision,
                                "capabilities": capabilities,
                                "serverInfo": {"name": "patchdiff-mcp", "version": env!("CARGO_PKG_VERSION")},
                                "instructions": INSTRUCTIONS,
                            }),
                        )
                    }
                    Err(why) => {
                        rpc::error_line(id, INVALID_PARAMS, &format!("Invalid params: {why}"))
                    }
                }
            }
            "ping" => rpc::result_line(id, json!({})),
            "tools/list" => rpc::result_line(id, list(&self.tools, self.revision())),
            _ if method.starts_with("resources/") && self.serves_resources() => {
                match self.resource_request(id, method, params).await {
                    Some(line) => line,
                    None => rpc::error_line(
                        id,
                        METHOD_NOT_FOUND,
                        &format!("Method not found: {method}"),
                    ),
                }
            }
            "tools/call" => match self.call(params).await {
                Ok(result) => rpc::result_line(id, result),
                Err(message) => rpc::error_line(id, INVALID_PARAMS, &message),
            },
            _ => rpc::error_line(id, METHOD_NOT_FOUND, &format!("Method not found: {method}")),
        }
    }

    /// A request on a modern connection (docs/eras.md): its own `_meta` is checked first; then
    /// `server/discover`, `tools/list` and `tools/call` are served with `resultType` and the
    /// server's identity, the lists with caching hints. Everything else, `ping` and
    /// `initialize` included, does not exist in this era.
    async fn modern_request(
        &mut self,
        id: &Value,
        method: &str,
        params: Option<&RawValue>,
    ) -> String {
        let refuse = |r: modern::Refusal| rpc::error_line_with_data(id, r.code, &r.message, r.data);
        if method == "initialize" {
            return refuse(modern::initialize_refused(params));
        }
        if let Err(r) = modern::envelope(params) {
            return refuse(r);
        }
        match method {
            "server/discover" => {
                let mut d = modern::discover(INSTRUCTIONS);
                if self.serves_resources() {
                    d["capabilities"]["resources"] = self.resources_capability();
                }
                rpc::result_line(id, d)
            }
            _ if (method.starts_with("resources/") || method == "subscriptions/listen")
                && self.serves_resources()
                && let Some(line) = self.resource_request(id, method, params).await =>
            {
                line
            }
            "tools/list" => rpc::result_line(id, modern::cacheable(list(&self.tools, MODERN))),
            "tools/call" => match self.call(params).await {
                Ok(result) => rpc::result_line(id, modern::complete(result)),
                Err(message) => rpc::error_line(id, INVALID_PARAMS, &message),
            },
            _ => rpc::error_line(
                id,
                METHOD_NOT_FOUND,
                &format!("Method not found: {method} (this connection serves MCP {MODERN})"),
            ),
        }
    }

    /// Before `initialize` a client gets the oldest revision's shapes.
    fn revision(&self) -> &'static str {
        self.revision.unwrap_or(REVISIONS[0])
    }

    /// One tool call: argument names checked against the schema, then exactly one SQL call.
    async fn call(&mut self, params: Option<&RawValue>) -> Result<Value, String> {
        let params = params.ok_or("Invalid params: tools/call needs params {name, arguments}")?;
        let p: CallParams =
            serde_json::from_str(params.get()).map_err(|e| format!("Invalid params: {e}"))?;
        let Value::String(name) = p.name else {
            return Err("Invalid params: name must be a string".into());
        };
        let Some(tool) = Tool::parse(&name) else {
            return Err(format!("Invalid params: unknown tool {name}"));
        };
        // A tool of another profile, or one whose SQL function is not installed.
        let Some(declaration) = self.tools.iter().find(|t| t.tool == tool) else {
            return Err(format!(
                "Invalid params: tool {name} is not available in profile {}",
                self.config.profile.name()
            ));
        };
        let raw = match p.arguments.map(RawValue::get) {
            None | Some("null") => "{}",
            Some(a) => a,
        };
        // PostgreSQL's json cast recurses per level and fails (54001) on deep nesting before the
        // function runs; the extension's parser stops at the same depth as this check. Either
        // way nothing can have been written, so it is an argument error, not outcome_unknown.
        if nesting_depth(raw) > MAX_ARGUMENT_DEPTH {
            return Ok(self.refuse(tool, raw, json!({"status": "invalid_argument", "code": "invalid_json", "tool": name,
                "failure_detail": format!("arguments nest deeper than {MAX_ARGUMENT_DEPTH} levels")})));
        }
        // Names only: values reach SQL untouched (IgnoredAny decodes no string).
        let names = match serde_json::from_str::<BTreeMap<String, IgnoredAny>>(raw) {
            Ok(n) => n,
            Err(_) => return Ok(self.refuse(tool, raw, json!({"status": "invalid_argument", "code": "invalid_arguments", "tool": name, "failure_detail": "arguments must be a JSON object"}))),
        };
        let unknown: Vec<&String> = names
            .keys()
            .filter(|k| !declaration.allowed().any(|a| a == k.as_str()))
            .collect();
        if !unknown.is_empty() {
            // Quoted names are bounded: an answer never grows with the junk it refuses.
            let (unknown, truncated) = quoted_names(unknown.iter().map(|k| k.as_str()));
            let list = unknown.join(", ");
            let mut refusal = json!({
                "status": "invalid_argument", "code": "unknown_argument", "tool": name,
                "failure_detail": format!("unknown argument(s) for {name}: {list}"), "unknown_arguments": unknown,
            });
            // As the SQL functions say it (docs/codes.md): the list above was cut.
            if truncated {
                refusal["unknown_arguments_truncated"] = json!(true);
            }
            return Ok(self.refuse(tool, raw, refusal));
        }
        let missing = declaration.missing(|n| names.contains_key(n));
        if !missing.is_empty() {
            return Ok(self.refuse(tool, raw, json!({
                "status": "invalid_argument", "code": "missing_argument", "tool": name,
                "failure_detail": format!("missing required argument(s) for {name}: {}", missing.join(", ")), "missing_arguments": missing,
            })));
        }
        // The files profile (docs/files.md): each file tool is an import on first use, then one
        // transaction of a submission and a publishing SAVE.
        if tool.family() == Family::Files {
            let (text, value, is_error) = self.files_call(tool, raw).await;
            return Ok(tool_result(
                text,
                Some(value),
                is_error,
                self.revision(),
                true,
            ));
        }
        // The workspace: an import reads the file and passes its content; a publishing SAVE runs
        // in a transaction this front end owns (docs/workspace.md).
        let owned;
        let mut raw = raw;
        match tool {
            Tool::InitializeTarget => match self.workspace_import(&name, raw) {
                Ok(Some(args)) => {
                    owned = args;
                    raw = &owned;
                }
                Ok(None) => {}
                Err(answer) => return Ok(answer),
            },
            Tool::Save => match self.save_mode(&name, raw) {
                Ok(SaveMode::Plain(args)) => {
                    owned = args;
                    raw = &owned;
                }
                Ok(SaveMode::Publish(args)) => return Ok(self.publishing_save(&name, &args).await),
                Err(answer) => return Ok(answer),
            },
            // observed_v2 (observed-editor-v2.txt): the snapshot is unwrapped into the batch
            // form of patchdiff_submit_observed_operations, or refused without a SQL call.
            Tool::CommitBundle => match observed_v2::route_commit_bundle(raw) {
                Ok(args) => {
                    owned = args;
                    raw = &owned;
                }
                Err(refusal) => return Ok(self.refuse(tool, raw, refusal)),
            },
            _ => {}
        }
        let text = match self.db.call(tool.function(), raw).await {
            Ok(text) => text,
            Err(e) => {
                if let Some(why) = e.cancelled {
                    // The client's own notifications/cancelled or hang-up is routine, one line at
                    // info (a client cutting every call made a warning of each: helper-119); a
                    // statement timeout, or a cancel from elsewhere, is a warning.
                    if self.db.cancellation().requested() {
                        tracing::info!(
                            tool = tool.name(),
                            reason = why.reason(),
                            error = e.message,
                            "database call cancelled by its client"
                        );
                    } else {
                        tracing::warn!(
                            tool = tool.name(),
                            reason = why.reason(),
                            error = e.message,
                            "database call cancelled"
                        );
                    }
                } else {
                    tracing::error!(
                        tool = tool.name(),
                        error = e.message,
                        "database call failed"
                    );
                }
                return Ok(self.refuse(tool, raw, call_failure(&name, &e,
                    "Read the target, or resend the identical call with the same client_request_id, before proposing again.", "")));
            }
        };
        let Ok(mut value) = serde_json::from_str::<Value>(&text) else {
            return Ok(self.refuse(tool, raw, json!({"status": "outcome_unknown", "tool": name, "failure_detail": "the database returned a result that is not JSON"})));
        };
        // Contract "Bounded rejection context": SQL keeps the full current_context; the MCP
        // answer (preview included) names it same_as_failure_context when it repeats
        // diagnostic.failure_context key for key. Only a changed answer is written again.
        let text = if collapse_current_context(&mut value) {
            to_string(&value, LITERAL)
        } else {
            text
        };
        if self.config.profile == Profile::ObservedV2 {
            let value = observed_v2_present(tool, value, self.config.response_mode);
            return Ok(self.v2_answer(tool, value));
        }
        let status = value
            .get("status")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if is_error_status(status.as_deref()) {
            return Ok(self.result(text, None, true));
        }
        if self.config.response_mode == ResponseMode::Compact && tool.compact_projected() {
            compact::project(tool.routes_to(), &mut value);
            return Ok(self.result(to_string(&value, LITERAL), Some(value), false));
        }
        Ok(self.result(text, Some(value), false))
    }

    /// `from_workspace: true`: the file's text becomes `content`, with the binding. `None`
    /// leaves the arguments alone (an inline initialization).
    fn workspace_import(&self, name: &str, raw: &str) -> Result<Option<String>, Value> {
        let Ok(Value::Object(mut args)) = serde_json::from_str::<Value>(raw) else {
            return Ok(None);
        };
        if args.get("from_workspace") != Some(&Value::Bool(true)) {
            return Ok(None);
        }
        let invalid = |code: &str, detail: &str| {
            self.tool_error(json!({"status": "invalid_argument", "code": code, "tool": name, "failure_detail": detail}))
        };
        if !matches!(args.get("content"), None | Some(Value::Null)) {
            return Err(invalid(
                "workspace_content_conflict",
                "from_workspace: true reads the content from the file; omit content or pass null",
            ));
        }
        let Some(ws) = &self.workspace else {
            return Err(invalid(
                "workspace_not_configured",
                "from_workspace needs PATCHDIFF_WORKSPACE_ROOT, which this server was not started with",
            ));
        };
        let Some(rel) = args
            .get("filename")
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            return Err(invalid(
                "invalid_filename",
                "filename must be a path relative to the workspace root",
            ));
        };
        let rejected = |r: workspace::Refusal| {
            self.tool_answer(json!({"status": "rejected", "failure_reason": r.code, "filename": rel, "failure_detail": r.detail}))
        };
        let text = ws.import(&rel).map_err(rejected)?;
        let binding = ws.binding(&rel).map_err(rejected)?;
        args.remove("from_workspace");
        args.insert("content".into(), Value::String(text));
        args.insert("workspace_binding".into(), binding);
        let raw = to_string(&Value::Object(args), LITERAL);
        if raw.len() > workspace::IMPORT_MAX_ARGUMENT_BYTES {
            return Err(rejected(workspace::Refusal {
                code: "workspace_file_too_large",
                detail: format!(
                    "the file's text is {} bytes once JSON-escaped for the database (control characters take six bytes each, quotes and backslashes two); the limit is {} bytes; nothing was written",
                    raw.len(),
                    workspace::IMPORT_MAX_ARGUMENT_BYTES
                ),
            }));
        }
        Ok(Some(raw))
    }

    /// Whether a SAVE publishes: `sync_workspace` true, or omitted/null with
    /// PATCHDIFF_WORKSPACE_SYNC_ON_SAVE. A non-publishing SAVE drops the workspace arguments
    /// the SQL function would refuse.
    fn save_mode(&self, name: &str, raw: &str) -> Result<SaveMode, Value> {
        let Ok(Value::Object(mut args)) = serde_json::from_str::<Value>(raw) else {
            return Ok(SaveMode::Plain(raw.to_owned()));
        };
        let sync = match args.get("sync_workspace") {
            None | Some(Value::Null) => self.config.workspace_sync_on_save,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Ok(SaveMode::Plain(raw.to_owned())),
        };
        let eol_ok = matches!(args.get("workspace_eol_format"), None | Some(Value::Null))
            || args
                .get("workspace_eol_format")
                .and_then(Value::as_str)
                .is_some_and(|f| patchdiff_engine::wire::WORKSPACE_EOL_FORMATS.contains(&f));
        if !sync {
            if eol_ok {
                args.remove("workspace_eol_format");
            }
            args.remove("sync_workspace");
            return Ok(SaveMode::Plain(to_string(&Value::Object(args), LITERAL)));
        }
        if self.workspace.is_none() {
            return Err(self.tool_error(json!({"status": "invalid_argument", "code": "workspace_not_configured", "tool": name,
                "failure_detail": "sync_workspace needs PATCHDIFF_WORKSPACE_ROOT, which this server was not started with"})));
        }
        args.insert("sync_workspace".into(), Value::Bool(true));
        Ok(SaveMode::Publish(to_string(&Value::Object(args), LITERAL)))
    }

    /// A publishing SAVE (contract, "Publication outcomes"): BEGIN; the checkpoint; the file
    /// installed; COMMIT. `saved` only when both happened, `rejected` when nothing was
    /// installed (rolled back: no checkpoint), `partial` when the file was installed but the
    /// checkpoint or the directory's durability is not confirmed.
    async fn publishing_save(&mut self, name: &str, args: &str) -> Value {
        if let Err(e) = self.db.begin_publication(args).await {
            // The BEGIN may have opened the block before its SET LOCAL failed.
            self.db.rollback().await;
            return self.tool_error(call_failure(
                name,
                &e,
                "Read the target before saving again.",
                ", no file was installed and no checkpoint was created",
            ));
        }
        let ws = self
            .workspace
            .as_ref()
            .expect("save_mode checked the workspace");
        // A workspace target was imported from a file: a missing one is never re-created.
        let a = publish_in_transaction(&mut self.db, ws, name, args, false).await;
        self.result(a.text, a.value, a.is_error)
    }

    /// A successful (non-error) tool answer built by the front end.
    fn tool_answer(&self, v: Value) -> Value {
        self.result(to_string(&v, LITERAL), Some(v), false)
    }

    fn tool_error(&self, payload: Value) -> Value {
        self.result(to_string(&payload, LITERAL), None, true)
    }

    /// A front-end refusal of a call to `tool` whose arguments are `raw`: the profile's error
    /// envelope (the files profile's `Error: ...` text and its structured record, as for every
    /// other failure of a file tool).
    fn refuse(&self, tool: Tool, raw: &str, payload: Value) -> Value {
        if self.config.profile == Profile::ObservedV2 {
            self.v2_answer(tool, payload)
        } else if tool.family() == Family::Files {
            let (text, value, is_error) = crate::files::refusal(raw, payload);
            tool_result(text, Some(value), is_error, self.revision(), true)
        } else {
            self.tool_error(payload)
        }
    }

    fn v2_answer(&self, tool: Tool, value: Value) -> Value {
        observed_v2_result(tool, value, self.revision())
    }

    fn result(&self, text: String, value: Option<Value>, is_error: bool) -> Value {
        tool_result(
            text,
            value,
            is_error,
            self.revision(),
            self.config.profile == Profile::ObservedV2,
        )
    }
}

/// A publishing SAVE's answer before presentation: its text, its structured value (none for
/// an error) and whether it is an error.
pub(crate) struct PublishAnswer {
    pub text: String,
    pub value: Option<Value>,
    pub is_error: bool,
}

impl PublishAnswer {
    fn answer(v: Value) -> PublishAnswer {
        PublishAnswer {
            text: to_string(&v, LITERAL),
            value: Some(v),
            is_error: false,
        }
    }

    fn error(v: Value) -> PublishAnswer {
        PublishAnswer {
            text: to_string(&v, LITERAL),
            value: None,
            is_error: true,
        }
    }
}

/// The publishing SAVE of a transaction the caller opened with `begin_publication` (contract,
/// "Publication outcomes"): the checkpoint; the file installed; COMMIT. `saved` only when both
/// happened, `rejected` when nothing was installed (rolled back: no checkpoint), `partial`
/// when the file was installed but the checkpoint or the directory's durability is not
/// confirmed. The workspace profile's SAVE and the files profile's tools share it.
pub(crate) async fn publish_in_transaction(
    db: &mut Db,
    ws: &Workspace,
    name: &str,
    args: &str,
    may_create: bool,
) -> PublishAnswer {
    let unknown = |why: String| {
        PublishAnswer::error(json!({"status": "outcome_unknown", "tool": name,
            "failure_detail": format!("The database call failed ({why}); whether it committed is unknown. Read the target before saving again.")}))
    };
    // Before installation a failed statement leaves the transaction to roll back: a cancelled
    // one (57014) certainly wrote nothing and installed nothing.
    let failed_before_installing = |e: &CallError| {
        PublishAnswer::error(call_failure(
            name,
            e,
            "Read the target before saving again.",
            ", no file was installed and no checkpoint was created",
        ))
    };
    let text = match db.call_in_transaction("patchdiff_save", args).await {
        Ok(t) => t,
        Err(e) => {
            db.rollback().await;
            return failed_before_installing(&e);
        }
    };
    let mut value: Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(_) => {
            db.rollback().await;
            return unknown("the database returned a result that is not JSON".into());
        }
    };
    let publication = match value
        .as_object_mut()
        .and_then(|m| m.remove("workspace_publication"))
    {
        Some(p) => p,
        None => {
            // Rejected, invalid or not found: nothing was written; end the transaction.
            db.rollback().await;
            let status = value.get("status").and_then(Value::as_str);
            return if is_error_status(status) {
                PublishAnswer {
                    text,
                    value: None,
                    is_error: true,
                }
            } else {
                PublishAnswer {
                    text,
                    value: Some(value),
                    is_error: false,
                }
            };
        }
    };
    let Some(mut p) = parse_publication(&publication) else {
        db.rollback().await;
        return unknown("the SAVE result carried a malformed workspace_publication".into());
    };
    p.may_create = may_create;
    let target_file_id = value["target_file_id"].clone();
    let rejected = |code: &str, detail: &str| {
        PublishAnswer::answer(json!({
            "status": "rejected", "target_file_id": value["target_file_id"], "failure_reason": code,
            "failure_detail": format!(
                "{detail}{} No checkpoint was created.",
                if detail.ends_with('.') { "" } else { "." }
            ),
            "current_version": value["version"], "current_hash": value["current_hash"],
        }))
    };
    if let Some(nonce) = &p.binding_nonce {
        match db.binding_on_its_partition(nonce).await {
            Ok(true) => {}
            Ok(false) => {
                db.rollback().await;
                return rejected(
                    "workspace_binding_unverified",
                    "the target's workspace binding was made on a partition its nonce does not choose, which no import of this front end does (its nonce and proof were copied from another target's); nothing was written. Initialize a new target from the file (from_workspace: true) and redo the edits there.",
                );
            }
            Err(e) => {
                db.rollback().await;
                return failed_before_installing(&e);
            }
        }
    }
    let partial = |code: &str, receipt: Value, detail: String| {
        PublishAnswer::answer(json!({
            "status": "partial", "target_file_id": target_file_id, "code": code,
            "snapshot_id": null, "closed_editing_cycle_id": null, "new_editing_cycle_id": null,
            "workspace_sync": receipt, "failure_detail": detail,
        }))
    };
    // A call the client cancelled (notifications/cancelled) installs nothing.
    if let Err(e) = db.refuse_if_cancelled() {
        db.rollback().await;
        return failed_before_installing(&e);
    }
    let installed = match ws.publish(&p) {
        Outcome::Rejected(r) => {
            db.rollback().await;
            return rejected(r.code, &r.detail);
        }
        Outcome::DurabilityUncertain(receipt, why) => {
            db.rollback().await;
            return partial(
                "workspace_durability_uncertain",
                receipt.to_json("uncertain"),
                format!(
                    "The file was installed but fsync of its directory failed ({why}); no checkpoint was created. Inspect the file, then SAVE again (docs/workspace.md)."
                ),
            );
        }
        Outcome::Installed(i) => i,
    };
    ws.before_commit();
    let receipt = installed.receipt.to_json("confirmed");
    if let Err(e) = db.commit().await {
        // A COMMIT that PostgreSQL cancelled (57014) rolled back: the checkpoint is certainly
        // missing. The contract's code stays; the detail says what is known.
        let detail = if e.cancelled.is_some() {
            format!(
                "The file was installed; PostgreSQL cancelled the checkpoint's COMMIT ({}) and rolled it back, so no checkpoint was recorded. SAVE again with sync_workspace: true to record it (docs/workspace.md).",
                e.message
            )
        } else {
            format!(
                "The file was installed; the checkpoint's COMMIT failed ({}), so whether it was recorded is unknown. Inspect the target before saving again (docs/workspace.md).",
                e.message
            )
        };
        return partial("workspace_checkpoint_uncertain", receipt, detail);
    }
    if let Err(why) = installed.finish() {
        return partial(
            "workspace_post_install_error",
            receipt,
            format!(
                "The file was installed and the checkpoint committed, but closing the directory handle failed ({why})."
            ),
        );
    }
    if let Value::Object(m) = &mut value {
        m.insert("workspace_sync".into(), receipt);
    }
    PublishAnswer::answer(value)
}

/// A tool result: literal JSON text always, the same value as structuredContent on revisions
/// that have it. Errors carry structuredContent only when `both_channels_on_error`
/// (observed_v2, whose results carry the same logical JSON in both channels); every other
/// profile keeps its error results text-only.
pub fn tool_result(
    text: String,
    value: Option<Value>,
    is_error: bool,
    revision: &str,
    both_channels_on_error: bool,
) -> Value {
    let mut r = json!({"content": [{"type": "text", "text": text}]});
    let structured = revision != REVISIONS[0] && (!is_error || both_channels_on_error);
    if let (Some(v), true) = (value, structured) {
        r["structuredContent"] = v;
    }
    r["isError"] = json!(is_error);
    r
}

/// An observed_v2 tool's SQL result as the profile presents it: a selection carries its
/// snapshot; compact mode projects the selection tools' results like those of the tool they
/// route to; the commit's receipt is the same in both modes (it is built in
/// [`observed_v2_result`]).
pub fn observed_v2_present(tool: Tool, mut value: Value, mode: ResponseMode) -> Value {
    if tool.returns_snapshot() {
        observed_v2::add_snapshot(&mut value);
    }
    if mode == ResponseMode::Compact && tool.compact_projected() {
        compact::project(tool.routes_to(), &mut value);
    }
    value
}

/// An observed_v2 answer (observed-editor-v2.txt): a commit becomes its bounded receipt;
/// definitive failures and outcome_unknown set isError; text and structuredContent carry the
/// same logical JSON, errors included.
pub fn observed_v2_result(tool: Tool, value: Value, revision: &str) -> Value {
    let value = if tool.answers_with_receipt() {
        observed_v2::commit_receipt(&value)
    } else {
        value
    };
    let is_error = observed_v2::is_definitive_failure(value.get("status").and_then(Value::as_str));
    tool_result(
        to_string(&value, LITERAL),
        Some(value),
        is_error,
        revision,
        true,
    )
}

enum SaveMode {
    Plain(String),
    Publish(String),
}

/// The `workspace_publication` of a SAVE's answer. A missing, null or non-string
/// `binding_nonce`/`binding_proof` is `None`: the publication is then refused as
/// `workspace_binding_unverified`, not as a malformed answer.
fn parse_publication(v: &Value) -> Option<workspace::Publication> {
    let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    Some(workspace::Publication {
        root_device: v.get("root_device")?.as_u64()?,
        root_inode: v.get("root_inode")?.as_u64()?,
        relative_path: s("relative_path")?,
        baseline_sha256: s("baseline_sha256")?,
        baseline_bytes: v.get("baseline_bytes").and_then(Value::as_u64),
        content: s("content")?,
        content_eol: s("content_eol")?,
        content_sha256: s("content_sha256")?,
        binding_nonce: s("binding_nonce"),
        binding_proof: s("binding_proof"),
        may_create: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    /// Contract "MCP negotiation and startup".
    #[test]
    fn negotiation_echoes_offers_newest_and_defaults_oldest() {
        for r in REVISIONS {
            assert_eq!(
                negotiate(Some(&raw(&format!(r#"{{"protocolVersion":"{r}"}}"#)))),
                Ok(r)
            );
        }
        assert_eq!(
            negotiate(Some(&raw(r#"{"protocolVersion":"2099-01-01"}"#))),
            Ok("2025-11-25")
        );
        assert_eq!(
            negotiate(Some(&raw(r#"{"capabilities":{}}"#))),
            Ok("2024-11-05")
        );
        assert_eq!(negotiate(None), Ok("2024-11-05"));
        assert!(negotiate(Some(&raw(r#"{"protocolVersion":5}"#))).is_err());
        assert!(negotiate(Some(&raw(r#"[1]"#))).is_err());
    }

    fn config(profile: &str, mode: &str) -> Config {
        let vars = [
            ("PATCHDIFF_MCP_PROFILE", profile),
            ("PATCHDIFF_MCP_RESPONSE_MODE", mode),
            ("PATCHDIFF_DATABASE_URL", "host=/nowhere"),
        ];
        Config::from_env(|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
        .unwrap()
    }

    /// A tool is listed when the SQL function it calls exists: the v2 aliases follow
    /// patchdiff_observe_scope and patchdiff_submit_observed_operations. Compact mode announces
    /// itself on the selection tools, not on the commit (its receipt is the same in both modes).
    #[test]
    fn observed_v2_tools_follow_their_functions() {
        let c = config("observed_v2", "detailed");
        let reads = |f: &str| matches!(f, "patchdiff_read_target" | "patchdiff_find_occurrences");
        let names = |ts: Vec<Declaration>| ts.iter().map(|t| t.name()).collect::<Vec<_>>();
        assert_eq!(
            names(active_tools(&c, &reads)),
            ["patchdiff_read_target", "patchdiff_find_occurrences"]
        );
        let everything = |_: &str| true;
        assert_eq!(names(active_tools(&c, &everything)).len(), 5);
        let compact = active_tools(&config("observed_v2", "compact"), &everything);
        for t in &compact {
            let announced = t.description.ends_with(compact::ANNOUNCEMENT);
            let expected = matches!(
                t.name(),
                "patchdiff_list_scopes" | "patchdiff_observe_scopes"
            );
            assert_eq!(announced, expected, "{}", t.name());
        }
        let listed = list(&compact, REVISIONS[2]);
        for t in listed["tools"].as_array().unwrap() {
            assert_eq!(t["_meta"]["antigravity/alwaysLoad"], true);
        }
        let full = active_tools(&config("full", "compact"), &everything);
        assert_eq!(full.len(), 17);
        assert!(full.iter().all(|t| t.meta.is_none()));
    }

    /// observed-editor-v2: "Definitive tool failures set isError: true, retaining their
    /// domain/audit data"; "Results carry the same logical JSON in text and structuredContent";
    /// "Other profiles keep their previous error-envelope behavior."
    #[test]
    fn observed_v2_results_use_both_channels() {
        let rejected = json!({"status": "rejected", "code": "STALE_OBSERVATION_HASH",
            "failure_reason": "target_hash_mismatch", "failure_detail": "stale",
            "pdcp_log_id": "e0e0e0e0-e0e0-4e0e-8e0e-e0e0e0e0e0e0", "diagnostic": {"code": "STALE_OBSERVATION_HASH"}});
        for (revision, structured) in [
            (REVISIONS[0], false),
            (REVISIONS[1], true),
            (REVISIONS[2], true),
        ] {
            let r = observed_v2_result(Tool::CommitBundle, rejected.clone(), revision);
            assert_eq!(r["isError"], true);
            let text: Value =
                serde_json::from_str(r["content"][0]["text"].as_str().unwrap()).unwrap();
            assert_eq!(text["transaction"]["pdcp_log_id"], rejected["pdcp_log_id"]);
            assert_eq!(text["diagnostics"]["code"], "STALE_OBSERVATION_HASH");
            assert!(text.get("presentation").is_some());
            assert_eq!(
                r.get("structuredContent").is_some(),
                structured,
                "{revision}"
            );
            if structured {
                assert_eq!(r["structuredContent"], text);
            }
        }
        // Accepted with warnings is a success; outcome_unknown stays outcome_unknown.
        let accepted =
            json!({"status": "accepted", "warnings": ["W: x"], "warning_count": 1, "groups": []});
        let r = observed_v2_result(Tool::CommitBundle, accepted, REVISIONS[2]);
        assert_eq!(r["isError"], false);
        assert_eq!(r["structuredContent"]["warnings"]["items"], json!(["W: x"]));
        let unknown = json!({"status": "outcome_unknown", "tool": Tool::CommitBundle.name(), "failure_detail": "lost"});
        let r = observed_v2_result(Tool::CommitBundle, unknown, REVISIONS[2]);
        assert_eq!(
            (&r["isError"], &r["structuredContent"]["status"]),
            (&json!(true), &json!("outcome_unknown"))
        );
        // Selection failures are errors too, with their data, in both channels.
        let ambiguous =
            json!({"status": "ambiguous", "code": "AMBIGUOUS_SCOPE_SELECTION", "candidates": []});
        let r = observed_v2_result(Tool::ObserveScopes, ambiguous.clone(), REVISIONS[2]);
        assert_eq!(
            (&r["isError"], &r["structuredContent"]),
            (&json!(true), &ambiguous)
        );
        // Other profiles: an error is text only.
        let r = tool_result("{}".into(), Some(json!({})), true, REVISIONS[2], false);
        assert!(r.get("structuredContent").is_none());
    }

    /// Issue 14 item 5: a call PostgreSQL cancelled (57014) answers `cancelled`, retryable,
    /// nothing written, as an error in every profile (observed_v2 receipts included); any other
    /// failure stays `outcome_unknown`.
    #[test]
    fn cancelled_calls_are_retryable_errors_not_outcome_unknown() {
        use crate::database::{CallError, Cancelled};
        let e = CallError {
            message: "ERROR: canceling statement due to statement timeout (57014)".into(),
            cancelled: Some(Cancelled::StatementTimeout),
            unavailable: false,
            login_refused: false,
        };
        let v = call_failure("patchdiff_submit_edits", &e, "Read the target.", "");
        assert_eq!(v["status"], CANCELLED);
        assert_eq!(v["failure_reason"], "statement_timeout");
        assert_eq!(
            (&v["retryable"], &v["nothing_written"]),
            (&json!(true), &json!(true))
        );
        assert!(
            v["failure_detail"]
                .as_str()
                .unwrap()
                .contains("nothing was written")
        );
        assert!(is_error_status(v["status"].as_str()));
        let r = observed_v2_result(Tool::CommitBundle, v, REVISIONS[2]);
        assert_eq!(r["isError"], true);
        assert_eq!(r["structuredContent"]["status"], CANCELLED);
        assert_eq!(
            r["structuredContent"]["failure_reason"],
            "statement_timeout"
        );
        assert_eq!(r["structuredContent"]["diagnostics"]["retryable"], true);
        let lost = CallError::unknown("connection closed");
        let v = call_failure("patchdiff_submit_edits", &lost, "Read the target.", "");
        assert_eq!(v["status"], "outcome_unknown");
        assert!(v.get("retryable").is_none());
    }

    /// Issue 15 item 3: a workspace_publication whose binding_nonce/binding_proof are null or
    /// missing (a target bound before proofs existed) parses, with no proof, so the publication
    /// is refused as workspace_binding_unverified rather than as a malformed answer.
    #[test]
    fn a_publication_without_proof_parses_to_an_unverified_binding() {
        let mut v = json!({"root_device": 1, "root_inode": 2, "relative_path": "a.txt",
            "baseline_sha256": "b", "content": "x\n", "content_eol": "lf", "content_sha256": "c",
            "binding_nonce": null, "binding_proof": null});
        let p = parse_publication(&v).unwrap();
        assert_eq!((p.binding_nonce, p.binding_proof), (None, None));
        v.as_object_mut().unwrap().remove("binding_proof");
        assert!(parse_publication(&v).unwrap().binding_proof.is_none());
        v["binding_nonce"] = json!("ab");
        v["binding_proof"] = json!("cd");
        let p = parse_publication(&v).unwrap();
        assert_eq!(
            (p.binding_nonce.as_deref(), p.binding_proof.as_deref()),
            (Some("ab"), Some("cd"))
        );
        v.as_object_mut().unwrap().remove("content");
        assert!(parse_publication(&v).is_none());
    }

    /// A selection carries its snapshot; compact mode projects the v2 selection results as it
    /// projects patchdiff_observe_scope's, and leaves the commit to its receipt.
    #[test]
    fn observed_v2_presentation() {
        let batch = json!({"status": "observed_batch", "target_file_id": "t", "observation_bundle_id": "b",
            "target_version": 2, "target_current_hash": "h", "scopes": [{"observation_id": "o", "text": "x", "start": 0, "end": 1}]});
        let v = observed_v2_present(Tool::ObserveScopes, batch.clone(), ResponseMode::Detailed);
        assert_eq!(
            v["snapshot"],
            json!({"target_file_id": "t", "expected_target_version": 2, "expected_current_hash": "h", "observation_bundle_id": "b"})
        );
        assert_eq!(v["scopes"], batch["scopes"]);
        let v = observed_v2_present(Tool::ObserveScopes, batch, ResponseMode::Compact);
        assert_eq!(v["scopes"][0], json!({"observation_id": "o", "text": "x"}));
        assert_eq!(
            v["presentation"]["omitted"],
            json!(["duplicate_page_metadata"])
        );
        assert_eq!(v["snapshot"]["expected_target_version"], 2);
        let candidates = json!({"status": "candidates", "candidates": [{"name": "f", "kind": "function", "parent": null, "path": "f", "start": 0, "end": 3, "start_line": 1, "end_line": 1}]});
        let v = observed_v2_present(Tool::ListScopes, candidates, ResponseMode::Compact);
        assert_eq!(v["presentation"]["omitted"], json!(["candidate_details"]));
        let accepted = json!({"status": "accepted", "evidence": {}, "groups": []});
        let v = observed_v2_present(Tool::CommitBundle, accepted.clone(), ResponseMode::Compact);
        assert_eq!(v, accepted);
    }
}

enum Line {
    End,
    Read,
    /// Over the limit: this many bytes were seen before the line was dropped.
    TooLong(usize),
}

/// What was read while a call ran, kept for after it ([`Server::serve`]).
enum Ahead {
    Line(Vec<u8>),
    TooLong(usize),
    End,
}

impl Ahead {
    fn len(&self) -> usize {
        match self {
            Ahead::Line(l) => l.len(),
            _ => 0,
        }
    }
}

/// How often the cancel requests of a cancelled call that still runs are sent again.
pub(crate) const CANCEL_AGAIN: std::time::Duration = std::time::Duration::from_millis(200);

/// An answer longer than this took long enough to make that input may have come meanwhile:
/// before it is written, input is awaited for up to [`PATIENT_WAIT`] ([`Server::serve`]). The
/// wait ends at the runtime's next timer tick, about 2 ms (helper-111: 1.9-2.4 ms more for an
/// answer just over 1 MiB, which took 6 ms); past 8 MiB an answer takes tens of milliseconds.
const PATIENT_ANSWER_BYTES: usize = 8 << 20;
/// See [`PATIENT_ANSWER_BYTES`].
const PATIENT_WAIT: std::time::Duration = std::time::Duration::from_millis(1);

/// At most this many lines are read ahead while a call runs.
const AHEAD_LINES: usize = 64;
/// Reading ahead stops once the lines read ahead hold this many bytes.
const AHEAD_BYTES: usize = 1 << 20;

/// Takes a line read while request `running_line` runs (or once it has returned, before its
/// answer is written) into `ahead`, the lines kept for after it; `true` when it is a cancellation
/// of that request. A cancellation of a request read ahead removes every queued request with its
/// id, as does one of the running request (JSON-RPC forbids a second request with an id still in
/// flight, so only a client that breaks that rule has one queued: helper-108).
fn read_ahead(
    read: Line,
    buf: &mut Vec<u8>,
    ahead: &mut std::collections::VecDeque<Ahead>,
    input_ended: &mut bool,
    running: &mut Option<Option<Value>>,
    running_line: &[u8],
) -> bool {
    match read {
        Line::End => {
            *input_ended = true;
            ahead.push_back(Ahead::End);
            false
        }
        Line::TooLong(n) => {
            ahead.push_back(Ahead::TooLong(n));
            false
        }
        Line::Read => {
            let next = std::mem::take(buf);
            let Some(named) = cancellation_of(&next) else {
                ahead.push_back(Ahead::Line(next));
                return false;
            };
            ahead.retain(|a| match a {
                Ahead::Line(l) => request_id(l).as_ref() != Some(&named),
                _ => true,
            });
            let id = running.get_or_insert_with(|| cancellable_id(running_line));
            if id.as_ref() == Some(&named) {
                tracing::info!(id = %named, "notifications/cancelled names the running request");
                true
            } else {
                ahead.push_back(Ahead::Line(next));
                false
            }
        }
    }
}

/// The `requestId` a `notifications/cancelled` line names, or `None` for any other line. Only a
/// line of at most 64 KiB is parsed (a cancellation is a few dozen bytes and a `reason`), since
/// every line read ahead is parsed again when its turn comes.
fn cancellation_of(line: &[u8]) -> Option<Value> {
    const SHORT: usize = 64 << 10;
    if line.len() > SHORT {
        return None;
    }
    match rpc::parse_line(line.trim_ascii_end()) {
        Ok(Incoming::Notification { method, params }) if method == "notifications/cancelled" => {
            let params: Value = serde_json::from_str(params?.get()).ok()?;
            params.get("requestId").cloned()
        }
        _ => None,
    }
}

/// The id of a request line, or `None` for any other line.
fn request_id(line: &[u8]) -> Option<Value> {
    match rpc::parse_line(line.trim_ascii_end()) {
        Ok(Incoming::Request { id, .. }) => Some(id),
        _ => None,
    }
}

/// The id of a request line that a `notifications/cancelled` stops while it runs: a tool call,
/// and the two resource requests that read the database (`resources/read` of a large target takes
/// as long as a read tool; helper-106 found it ran to its end). `None` for any other line.
fn cancellable_id(line: &[u8]) -> Option<Value> {
    match rpc::parse_line(line.trim_ascii_end()) {
        Ok(Incoming::Request { id, method, .. })
            if matches!(
                method.as_str(),
                "tools/call" | "resources/read" | "resources/list"
            ) =>
        {
            Some(id)
        }
        _ => None,
    }
}

/// How often a running call checks that its host can still read the answer ([`Server::serve`]).
const HOST_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// The change feed's next signal, or never when nothing is watched.
pub(crate) async fn next_signal(subs: &mut resources::Subscriptions) -> Option<feed::Signal> {
    match subs.listener() {
        Some(l) => l.recv().await,
        None => std::future::pending().await,
    }
}

/// Reads one line into `line`, holding at most `max` bytes of it: a longer line is consumed to
/// its end and discarded without being buffered, so one huge request cannot exhaust memory.
/// Cancel-safe: the only await is `fill_buf`, and what was consumed is in `line` and `seen`
/// (the bytes of this line seen so far), which the next call continues from.
async fn read_bounded_line<R: AsyncBufRead + Unpin>(
    input: &mut R,
    line: &mut Vec<u8>,
    seen: &mut usize,
    max: usize,
) -> std::io::Result<Line> {
    loop {
        let chunk = input.fill_buf().await?;
        if chunk.is_empty() {
            let n = std::mem::take(seen);
            return Ok(match n {
                0 => Line::End,
                n if n > max => Line::TooLong(n),
                _ => Line::Read,
            });
        }
        let (take, done) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        *seen += take;
        if *seen <= max {
            line.extend_from_slice(&chunk[..take]);
        } else {
            line.clear();
        }
        input.consume(take);
        if done {
            let n = std::mem::take(seen);
            return Ok(if n > max {
                Line::TooLong(n)
            } else {
                Line::Read
            });
        }
    }
}

/// The deepest nesting accepted in tool arguments: serde_json's recursion limit, which the
/// extension's argument parser applies too.
const MAX_ARGUMENT_DEPTH: usize = 128;

/// The deepest array/object nesting in JSON text (brackets inside strings do not count).
fn nesting_depth(json: &str) -> usize {
    let (mut depth, mut max, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for b in json.bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

#[cfg(test)]
mod depth_tests {
    use super::nesting_depth;

    #[test]
    fn nesting_ignores_brackets_in_strings() {
        assert_eq!(nesting_depth(r#"{"a":[1,{"b":"[[[{{"}]}"#), 3);
        assert_eq!(nesting_depth(r#"{"a":"\"[["}"#), 1);
        assert_eq!(nesting_depth(&"[".repeat(200)), 200);
    }
}
