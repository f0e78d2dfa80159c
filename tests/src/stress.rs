//! The concurrency checker of issue 9: N clients, some over SQL (tokio-postgres) and some through
//! real `patchdiff-mcp` processes over pipes, submit guarded edits, keyed retries, reads and
//! checkpoints against a few shared targets and many private ones; afterwards [`check`] proves
//! the invariants from the database itself.
//!
//! Every target is `slots` lines of 64 ASCII bytes, `slot NNNN = XXXXXXXX <filler>\n`; an edit
//! replaces the values of one to three slots, so targets keep their size. A client keeps a model
//! (version and content) of each target it has read, proposes against it with
//! `expected_target_version`, and on `target_version_mismatch` reads again and proposes anew,
//! linking the retry to the rejection with `parent_pdcp_log_id`. Only the owner edits a private
//! target, so its model is exact: reads of it must return the model, and a version conflict on it
//! is a lost or doubled write.
//!
//! With `faults` set every submission carries a `client_request_id`, and a call that fails with
//! a lost connection (or `outcome_unknown` from the front end, or a front end that died) is
//! resent, identical, until the server answers: the answer either recovers the committed outcome
//! (`deduplicated: true`) or is the one commit of the call. The crash tests inject the faults.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::task::JoinHandle;
use tokio_postgres::{Client, NoTls, Statement};

use crate::call_sql;

/// Bytes (and code points: the text is ASCII) of one slot line.
pub const LINE_BYTES: usize = 64;
/// Where a slot's value starts in its line: after `slot NNNN = `.
const VALUE_OFFSET: usize = 12;
const VALUE_LEN: usize = 8;
/// A call that takes longer than this is a hung server, not load.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// A client that meets this many version conflicts in a row on one edit gives up (a violation:
/// under any sane load some attempt wins).
const MAX_EDIT_TRIES: u32 = 200;
const FILLER: &str = "the quick brown fox jumps over the lazy dog while agents edit text ";

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// A superuser connection string (key=value or URL) to a database with pg_patchdiff.
    pub dsn: String,
    /// The `patchdiff-mcp` binary, needed when `mcp_clients > 0`.
    pub mcp_bin: Option<String>,
    pub sql_clients: usize,
    /// Clients that each drive their own `patchdiff-mcp` process over pipes.
    pub mcp_clients: usize,
    /// Targets every client edits.
    pub shared_targets: usize,
    /// Targets per client that only that client edits (everyone may read them).
    pub private_targets: usize,
    /// Size of each target, rounded down to whole 64-byte lines.
    pub target_bytes: usize,
    /// Stop after this long...
    pub duration: Option<Duration>,
    /// ...or after this many client actions (a read, or a guarded edit with its retries).
    pub operations: Option<u64>,
    /// Share of actions that are reads, in percent.
    pub read_percent: u32,
    /// Share of actions that are checkpoints (`patchdiff_save`), in percent.
    pub save_percent: u32,
    /// Share of actions on shared targets, in percent.
    pub shared_percent: u32,
    /// Share of submissions that carry a `client_request_id` (100 when `faults`).
    pub keyed_percent: u32,
    /// Share of keyed submissions resent identically once answered, in percent.
    pub resend_percent: u32,
    /// Faults are being injected: resend interrupted calls instead of reporting them.
    pub faults: bool,
    /// With `faults`: share of MCP submissions whose `patchdiff-mcp` is killed mid-call.
    pub mcp_kill_percent: u32,
    /// How long an interrupted call keeps being resent before it is a violation.
    pub reconnect_timeout: Duration,
    pub seed: u64,
    /// `application_name` of every session the load opens, so that a fault injector can find
    /// its backends in `pg_stat_activity`.
    pub application_name: String,
}

impl Config {
    pub fn new(dsn: &str) -> Config {
        Config {
            dsn: dsn.to_owned(),
            mcp_bin: None,
            sql_clients: 7,
            mcp_clients: 1,
            shared_targets: 4,
            private_targets: 8,
            target_bytes: 4096,
            duration: Some(Duration::from_secs(5)),
            operations: None,
            read_percent: 20,
            save_percent: 2,
            shared_percent: 25,
            keyed_percent: 25,
            resend_percent: 100,
            faults: false,
            mcp_kill_percent: 0,
            reconnect_timeout: Duration::from_secs(90),
            seed: 0x5eed,
            application_name: "patchdiff-stress".into(),
        }
    }

    pub fn clients(&self) -> usize {
        self.sql_clients + self.mcp_clients
    }
}

/// One target of the run.
#[derive(Clone, Debug)]
pub struct Target {
    pub id: String,
    /// The client that alone edits it; `None` for a shared target.
    pub owner: Option<usize>,
    pub slots: usize,
}

/// A client's view of a target: a version and the content at that version.
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    pub version: i64,
    pub content: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    Sql,
    Mcp,
}

/// The facts of one submission answer that the checker compares with the log.
#[derive(Clone, Debug)]
pub struct Observation {
    pub target: String,
    pub via: Via,
    pub function: &'static str,
    pub key: Option<String>,
    pub parent: Option<String>,
    /// Changes the proposal carried: the ledger rows an acceptance must have.
    pub changes: usize,
    /// The first send failed with the outcome unknown; this answer came from a resend.
    pub interrupted: bool,
    pub status: String,
    pub pdcp_log_id: String,
    pub version: Option<i64>,
    pub after_hash: Option<String>,
    pub failure_reason: Option<String>,
    pub deduplicated: bool,
    pub manifest_entries_added: Option<i64>,
}

/// A keyed submission that was answered, resent identically, and answered again.
#[derive(Clone, Debug)]
pub struct KeyedRetry {
    pub first: Observation,
    pub again: Observation,
}

/// One answered `patchdiff_save`.
#[derive(Clone, Debug)]
pub struct SaveRecord {
    pub target: String,
    /// `saved`; otherwise a stale guard rejected it.
    pub saved: bool,
    /// An earlier send failed with the outcome unknown (and may have saved too: a SAVE does not
    /// change the version its guard checks).
    pub interrupted: bool,
    pub version: i64,
    pub current_hash: String,
}

/// Counters of one run.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub actions: u64,
    pub reads: u64,
    /// Submissions answered (each is one attempt row, or the recovery of one).
    pub submissions: u64,
    pub accepted: u64,
    pub accepted_via_mcp: u64,
    pub rejected: u64,
    /// `target_version_mismatch` answers, each followed by a fresh read and a new proposal.
    pub version_conflicts: u64,
    pub keyed: u64,
    pub keyed_retries: u64,
    /// Checkpoints saved.
    pub saves: u64,
    /// Calls whose first send failed with the outcome unknown and were resent.
    pub interrupted: u64,
    /// Interrupted submissions whose resend recovered the committed outcome.
    pub recovered: u64,
    /// Interrupted submissions whose resend was their one commit.
    pub committed_on_retry: u64,
    pub mcp_kills: u64,
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.actions += o.actions;
        self.reads += o.reads;
        self.submissions += o.submissions;
        self.accepted += o.accepted;
        self.accepted_via_mcp += o.accepted_via_mcp;
        self.rejected += o.rejected;
        self.version_conflicts += o.version_conflicts;
        self.keyed += o.keyed;
        self.keyed_retries += o.keyed_retries;
        self.saves += o.saves;
        self.interrupted += o.interrupted;
        self.recovered += o.recovered;
        self.committed_on_retry += o.committed_on_retry;
        self.mcp_kills += o.mcp_kills;
    }
}

/// What the clients saw.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub elapsed: Duration,
    pub targets: Vec<Target>,
    pub observations: Vec<Observation>,
    pub keyed_retries: Vec<KeyedRetry>,
    pub saves: Vec<SaveRecord>,
    /// Broken expectations seen by the clients themselves (a read that disagrees with the
    /// model, a version going backwards, an error with no fault injected, ...).
    pub violations: Vec<String>,
    pub stats: Stats,
    /// The owners' final models of the private targets, by target ID.
    pub models: BTreeMap<String, Model>,
}

impl Outcome {
    pub fn accepted_per_second(&self) -> f64 {
        self.stats.accepted as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn summary(&self) -> String {
        let s = &self.stats;
        format!(
            "{:.1} s: {} actions, {} reads, {} submissions answered ({} accepted, {} through MCP; {} rejected, \
             {} of them version conflicts), {} keyed, {} keyed resends, {} saves; {} interrupted calls \
             ({} recovered, {} committed on retry), {} patchdiff-mcp kills; {:.1} accepted/s",
            self.elapsed.as_secs_f64(),
            s.actions,
            s.reads,
            s.submissions,
            s.accepted,
            s.accepted_via_mcp,
            s.rejected,
            s.version_conflicts,
            s.keyed,
            s.keyed_retries,
            s.saves,
            s.interrupted,
            s.recovered,
            s.committed_on_retry,
            s.mcp_kills,
            self.accepted_per_second()
        )
    }
}

/// `dsn` with an `application_name`, in either connection-string form.
pub fn with_application_name(dsn: &str, name: &str) -> String {
    if dsn.starts_with("postgres://") || dsn.starts_with("postgresql://") {
        let sep = if dsn.contains('?') { '&' } else { '?' };
        format!("{dsn}{sep}application_name={name}")
    } else {
        format!("{dsn} application_name={name}")
    }
}

/// The initial content of a target: `slots` lines, every value zero.
pub fn initial_content(slots: usize) -> String {
    (0..slots).map(|i| slot_line(i, "00000000")).collect()
}

fn slot_line(slot: usize, value: &str) -> String {
    let mut line = format!("slot {slot:04} = {value} ");
    let fill = LINE_BYTES - 1 - line.len();
    let start = (slot * 7) % FILLER.len();
    line.extend(FILLER.chars().cycle().skip(start).take(fill));
    line.push('\n');
    line
}

fn value_range(slot: usize) -> std::ops::Range<usize> {
    let start = slot * LINE_BYTES + VALUE_OFFSET;
    start..start + VALUE_LEN
}

/// SplitMix64: deterministic per client, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn percent(&mut self, p: u32) -> bool {
        self.next() % 100 < u64::from(p)
    }
}

/// A failed call.
#[derive(Debug)]
pub enum CallError {
    /// The connection (or the front end) was lost: whether the call committed is unknown.
    Interrupted(String),
    /// The server answered with an error that is not a lost connection, or the answer was not
    /// what the API promises.
    Failed(String),
}

async fn connect_quietly(config: &tokio_postgres::Config) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = config.connect(NoTls).await?;
    // The load kills connections on purpose; their endings are not news.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// Whether an error ends the session (and so leaves the outcome of the call unknown): not a
/// server error at all, FATAL or PANIC, or SQLSTATE class 08 or 57P.
fn ends_session(e: &tokio_postgres::Error) -> bool {
    match e.as_db_error() {
        None => true,
        Some(db) => {
            let code = db.code().code();
            matches!(db.severity(), "FATAL" | "PANIC")
                || code.starts_with("08")
                || code.starts_with("57P")
        }
    }
}

fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {} ({})", db.severity(), db.message(), db.code().code()),
        None => e.to_string(),
    }
}

/// One SQL session with a prepared statement per function; reconnects after a lost session.
struct SqlConn {
    config: tokio_postgres::Config,
    client: Option<Client>,
    statements: HashMap<&'static str, Statement>,
}

impl SqlConn {
    fn new(dsn: &str, application_name: &str) -> Result<SqlConn, String> {
        let mut config: tokio_postgres::Config = dsn
            .parse()
            .map_err(|e| format!("not a connection string: {e}"))?;
        config.application_name(application_name);
        Ok(SqlConn {
            config,
            client: None,
            statements: HashMap::new(),
        })
    }

    async fn call(&mut self, function: &'static str, args: &Value) -> Result<Value, CallError> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            self.client = None;
            self.statements.clear();
            let c = connect_quietly(&self.config)
                .await
                .map_err(|e| CallError::Interrupted(format!("connecting: {}", describe(&e))))?;
            self.client = Some(c);
        }
        let result = self.query(function, args).await;
        result.map_err(|e| {
            if ends_session(&e) {
                self.client = None;
                CallError::Interrupted(describe(&e))
            } else {
                CallError::Failed(format!("{function}: {}", describe(&e)))
            }
        })?
    }

    async fn query(
        &mut self,
        function: &'static str,
        args: &Value,
    ) -> Result<Result<Value, CallError>, tokio_postgres::Error> {
        let client = self.client.as_ref().expect("connected above");
        let statement = match self.statements.get(function) {
            Some(s) => s.clone(),
            None => {
                let s = client.prepare(&call_sql(function)).await?;
                self.statements.insert(function, s.clone());
                s
            }
        };
        let args = args.to_string();
        let row = match tokio::time::timeout(CALL_TIMEOUT, client.query_one(&statement, &[&args]))
            .await
        {
            Ok(r) => r?,
            Err(_) => {
                return Ok(Err(CallError::Failed(format!(
                    "{function}: no answer within {CALL_TIMEOUT:?}"
                ))));
            }
        };
        let text: Option<String> = row.try_get(0)?;
        Ok(match text {
            None => Err(CallError::Failed(format!("{function} returned NULL"))),
            Some(t) => serde_json::from_str(&t)
                .map_err(|e| CallError::Failed(format!("{function} returned invalid JSON: {e}"))),
        })
    }
}

/// A running `patchdiff-mcp` with its pipes.
struct McpProc {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl McpProc {
    async fn start(bin: &str, dsn: &str) -> Result<McpProc, String> {
        let mut child = Command::new(bin)
            .env("PATCHDIFF_DATABASE_URL", dsn)
            .env("PATCHDIFF_MCP_PROFILE", "full")
            .env_remove("PATCHDIFF_MCP_RESPONSE_MODE")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("spawning {bin}: {e}"))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut p = McpProc {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
        };
        let params = json!({"protocolVersion": "2025-11-25", "capabilities": {},
                            "clientInfo": {"name": "patchdiff-stress", "version": "1"}});
        let r = p.request(0, "initialize", params).await?;
        if r.get("result").is_none() {
            return Err(format!("initialize failed: {r}"));
        }
        p.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await?;
        Ok(p)
    }

    async fn send(&mut self, message: &Value) -> Result<(), String> {
        let line = format!("{message}\n");
        self.stdin
            .write_all(line.as_bytes())
            .await
            .map_err(|e| format!("writing to patchdiff-mcp: {e}"))?;
        self.stdin
            .flush()
            .await
            .map_err(|e| format!("writing to patchdiff-mcp: {e}"))
    }

    async fn receive(&mut self, id: u64) -> Result<Value, String> {
        let line = match tokio::time::timeout(CALL_TIMEOUT, self.lines.next_line()).await {
            Err(_) => return Err(format!("no reply within {CALL_TIMEOUT:?}")),
            Ok(Err(e)) => return Err(format!("reading from patchdiff-mcp: {e}")),
            Ok(Ok(None)) => return Err("patchdiff-mcp closed its stdout".into()),
            Ok(Ok(Some(l))) => l,
        };
        let v: Value =
            serde_json::from_str(&line).map_err(|e| format!("reply is not JSON ({e}): {line}"))?;
        if v["id"] != json!(id) {
            return Err(format!("reply to another request (wanted id {id}): {line}"));
        }
        Ok(v)
    }

    async fn request(&mut self, id: u64, method: &str, params: Value) -> Result<Value, String> {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        self.receive(id).await
    }
}

/// A client of `patchdiff-mcp`: restarts the process when it died.
struct McpConn {
    bin: String,
    dsn: String,
    proc: Option<McpProc>,
    next_id: u64,
}

impl McpConn {
    async fn ensure(&mut self) -> Result<&mut McpProc, CallError> {
        if self.proc.is_none() {
            let p = McpProc::start(&self.bin, &self.dsn)
                .await
                .map_err(|e| CallError::Interrupted(format!("starting patchdiff-mcp: {e}")))?;
            self.proc = Some(p);
        }
        Ok(self.proc.as_mut().expect("started above"))
    }

    async fn call(&mut self, tool: &str, args: &Value) -> Result<Value, CallError> {
        self.next_id += 1;
        let id = self.next_id;
        let p = self.ensure().await?;
        match p
            .request(id, "tools/call", json!({"name": tool, "arguments": args}))
            .await
        {
            Ok(r) => tool_result(tool, &r),
            Err(e) => {
                // Whatever state the process is in, it is no longer trusted.
                self.proc = None;
                Err(CallError::Interrupted(format!("patchdiff-mcp: {e}")))
            }
        }
    }

    /// Sends the call, waits `delay`, and kills the process: the client never sees an answer.
    async fn call_and_kill(&mut self, tool: &str, args: &Value, delay: Duration) -> CallError {
        self.next_id += 1;
        let id = self.next_id;
        let p = match self.ensure().await {
            Ok(p) => p,
            Err(e) => return e,
        };
        let _ = p
            .send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                           "params": {"name": tool, "arguments": args}}))
            .await;
        tokio::time::sleep(delay).await;
        let _ = p.child.start_kill();
        let _ = p.child.wait().await;
        self.proc = None;
        CallError::Interrupted("patchdiff-mcp killed mid-call".into())
    }
}

/// The tool's answer: the parsed text, or why there is none.
fn tool_result(tool: &str, r: &Value) -> Result<Value, CallError> {
    if let Some(e) = r.get("error") {
        return Err(CallError::Failed(format!("{tool}: JSON-RPC error {e}")));
    }
    let Some(text) = r["result"]["content"][0]["text"].as_str() else {
        return Err(CallError::Failed(format!("{tool}: no text content in {r}")));
    };
    let v: Value = serde_json::from_str(text)
        .map_err(|e| CallError::Failed(format!("{tool}: text is not JSON ({e})")))?;
    if v["status"] == "outcome_unknown" {
        return Err(CallError::Interrupted(format!(
            "outcome_unknown: {}",
            v["failure_detail"]
        )));
    }
    Ok(v)
}

enum Conn {
    Sql(SqlConn),
    Mcp(McpConn),
}

impl Conn {
    fn via(&self) -> Via {
        match self {
            Conn::Sql(_) => Via::Sql,
            Conn::Mcp(_) => Via::Mcp,
        }
    }

    async fn call(&mut self, function: &'static str, args: &Value) -> Result<Value, CallError> {
        match self {
            Conn::Sql(c) => c.call(function, args).await,
            Conn::Mcp(c) => c.call(function, args).await,
        }
    }
}

struct Shared {
    config: Config,
    targets: Vec<Target>,
    stop: AtomicBool,
    deadline: Option<Instant>,
    actions: AtomicU64,
    accepted: AtomicU64,
}

impl Shared {
    /// Whether to stop; otherwise claims one action of the operation budget.
    fn should_stop(&self) -> bool {
        if self.stop.load(Ordering::Relaxed) || self.deadline.is_some_and(|d| Instant::now() >= d) {
            return true;
        }
        match self.config.operations {
            Some(n) => self.actions.fetch_add(1, Ordering::Relaxed) >= n,
            None => false,
        }
    }
}

/// A proposal ready to send.
struct Proposal {
    function: &'static str,
    args: Value,
    key: Option<String>,
    parent: Option<String>,
    changes: usize,
    after: Model,
}

#[derive(Default)]
struct WorkerOut {
    observations: Vec<Observation>,
    keyed_retries: Vec<KeyedRetry>,
    saves: Vec<SaveRecord>,
    violations: Vec<String>,
    stats: Stats,
    models: Vec<(String, Model)>,
}

struct Worker {
    id: usize,
    shared: Arc<Shared>,
    conn: Conn,
    rng: Rng,
    private: Vec<usize>,
    public: Vec<usize>,
    models: HashMap<usize, Model>,
    /// The newest version this client has seen of each target: reads must never go back.
    seen: HashMap<usize, i64>,
    seq: u32,
    out: WorkerOut,
}

impl Worker {
    fn violation(&mut self, what: String) {
        self.out.violations.push(format!(
            "client {} ({:?}): {what}",
            self.id,
            self.conn.via()
        ));
    }

    fn target(&self, t: usize) -> &Target {
        &self.shared.targets[t]
    }

    fn is_mine(&self, t: usize) -> bool {
        self.target(t).owner == Some(self.id)
    }

    async fn run(mut self) -> WorkerOut {
        while !self.shared.should_stop() {
            let t = if self.public.is_empty()
                || (!self.private.is_empty()
                    && !self.rng.percent(self.shared.config.shared_percent))
            {
                self.private[self.rng.below(self.private.len())]
            } else {
                self.public[self.rng.below(self.public.len())]
            };
            let (reads, saves) = (
                self.shared.config.read_percent,
                self.shared.config.save_percent,
            );
            match self.rng.below(100) as u32 {
                n if n < reads => self.read(t).await,
                n if n < reads + saves => self.save(t).await,
                _ => self.edit(t).await,
            }
            self.out.stats.actions += 1;
        }
        for t in self.private.clone() {
            if let Some(m) = self.models.get(&t) {
                let id = self.target(t).id.clone();
                self.out.models.push((id, m.clone()));
            }
        }
        self.out
    }

    /// Calls, resending after a lost connection when faults are expected. Returns the answer
    /// and whether a send was interrupted first.
    async fn call(
        &mut self,
        function: &'static str,
        args: &Value,
        kill_first: bool,
    ) -> Option<(Value, bool)> {
        let started = Instant::now();
        let mut interrupted = false;
        let mut kill = kill_first;
        let mut pause = Duration::from_millis(10);
        loop {
            let r = match (&mut self.conn, kill) {
                (Conn::Mcp(m), true) => {
                    kill = false;
                    self.out.stats.mcp_kills += 1;
                    let delay = Duration::from_micros(self.rng.below(3000) as u64);
                    Err(m.call_and_kill(function, args, delay).await)
                }
                _ => self.conn.call(function, args).await,
            };
            match r {
                Ok(v) => return Some((v, interrupted)),
                Err(CallError::Interrupted(e)) => {
                    if !self.shared.config.faults {
                        self.violation(format!("{function} failed with no fault injected: {e}"));
                        return None;
                    }
                    if !interrupted {
                        self.out.stats.interrupted += 1;
                    }
                    interrupted = true;
                    if started.elapsed() > self.shared.config.reconnect_timeout {
                        self.violation(format!(
                            "{function}: still failing after {:?}: {e}",
                            self.shared.config.reconnect_timeout
                        ));
                        return None;
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(250));
                }
                Err(CallError::Failed(e)) => {
                    self.violation(e);
                    return None;
                }
            }
        }
    }

    /// Records a version this client was told; a lower one than before is a violation.
    fn saw_version(&mut self, t: usize, version: i64, what: &str) {
        let seen = self.seen.entry(t).or_insert(0);
        if version < *seen {
            let before = *seen;
            let id = self.target(t).id.clone();
            self.violation(format!(
                "{what} on {id} returned version {version} after this client saw {before}"
            ));
        } else {
            *seen = version;
        }
    }

    /// The model of a target, reading it when there is none.
    async fn model(&mut self, t: usize) -> Option<Model> {
        if let Some(m) = self.models.get(&t) {
            return Some(m.clone());
        }
        let args = json!({"target_file_id": self.target(t).id});
        let (r, _) = self.call("patchdiff_get_target", &args, false).await?;
        let (Some(version), Some(content)) = (r["version"].as_i64(), r["current_content"].as_str())
        else {
            self.violation(format!("patchdiff_get_target answered {r}"));
            return None;
        };
        self.out.stats.reads += 1;
        self.saw_version(t, version, "patchdiff_get_target");
        let m = Model {
            version,
            content: content.to_owned(),
        };
        self.models.insert(t, m.clone());
        Some(m)
    }

    fn next_value(&mut self) -> String {
        self.seq += 1;
        // Client in the top byte: values are unique across clients and never the initial zero.
        format!(
            "{:08x}",
            ((self.id as u32 + 1) << 24) | (self.seq & 0x00ff_ffff)
        )
    }

    fn propose(&mut self, t: usize, model: &Model, parent: Option<&str>, attempt: u32) -> Proposal {
        let slots = self.target(t).slots;
        let n = (1 + self.rng.below(3)).min(slots);
        let mut chosen = BTreeSet::new();
        while chosen.len() < n {
            chosen.insert(self.rng.below(slots));
        }
        let mut after = model.content.clone();
        let mut changes = Vec::new();
        for &slot in chosen.iter().rev() {
            let range = value_range(slot);
            let old = model.content[range.clone()].to_owned();
            let new = self.next_value();
            after.replace_range(range.clone(), &new);
            changes.push((slot, range, old, new));
        }
        let operations = self.rng.percent(50);
        let list: Vec<Value> = changes
            .iter()
            .map(|(slot, range, old, new)| {
                if operations && !self.rng.percent(20) {
                    // Descending starts: each span leaves the next one's offsets unchanged.
                    json!({"op": "span", "start": range.start, "end": range.end,
                           "expected_text": old, "replace": new})
                } else {
                    let edit = json!({"match": format!("slot {slot:04} = {old}"),
                                      "replace": format!("slot {slot:04} = {new}")});
                    if operations {
                        let mut e = edit;
                        e["op"] = json!("match");
                        e
                    } else {
                        edit
                    }
                }
            })
            .collect();
        let (function, field) = if operations {
            ("patchdiff_submit_operations", "operations")
        } else {
            ("patchdiff_submit_edits", "edits")
        };
        let mut args = json!({
            "target_file_id": self.target(t).id,
            "expected_target_version": model.version,
            "intent": format!("stress client {} edit {}", self.id, self.seq),
            field: list,
        });
        if let Some(p) = parent {
            args["parent_pdcp_log_id"] = json!(p);
            args["attempt"] = json!(attempt);
        }
        let keyed = self.shared.config.faults || self.rng.percent(self.shared.config.keyed_percent);
        let key = keyed.then(|| {
            format!(
                "{}-c{}-{}",
                self.shared.config.application_name, self.id, self.seq
            )
        });
        if let Some(k) = &key {
            args["client_request_id"] = json!(k);
        }
        Proposal {
            function,
            args,
            key,
            parent: parent.map(str::to_owned),
            changes: n,
            after: Model {
                version: model.version + 1,
                content: after,
            },
        }
    }

    /// The observation of a submission answer, or a violation when it is not a well-formed
    /// acceptance or rejection.
    fn observe(
        &mut self,
        t: usize,
        p: &Proposal,
        r: &Value,
        interrupted: bool,
    ) -> Option<Observation> {
        let status = r["status"].as_str().unwrap_or_default().to_owned();
        let pdcp_log_id = r["pdcp_log_id"].as_str().map(str::to_owned);
        let well_formed = match status.as_str() {
            "accepted" => r["version"].is_i64() && r["after_hash"].is_string(),
            "rejected" => r["failure_reason"].is_string(),
            _ => false,
        };
        let (Some(pdcp_log_id), true, Some(deduplicated)) =
            (pdcp_log_id, well_formed, r["deduplicated"].as_bool())
        else {
            self.violation(format!("{} answered {r}", p.function));
            return None;
        };
        Some(Observation {
            target: self.target(t).id.clone(),
            via: self.conn.via(),
            function: p.function,
            key: p.key.clone(),
            parent: p.parent.clone(),
            changes: p.changes,
            interrupted,
            status,
            pdcp_log_id,
            version: r["version"].as_i64(),
            after_hash: r["after_hash"].as_str().map(str::to_owned),
            failure_reason: r["failure_reason"].as_str().map(str::to_owned),
            deduplicated,
            manifest_entries_added: r["manifest_entries_added"].as_i64(),
        })
    }

    /// One guarded edit: propose against the model; on a version conflict read again and
    /// propose anew, as a retry of the rejected attempt.
    async fn edit(&mut self, t: usize) {
        let mut parent: Option<String> = None;
        for attempt in 1..=MAX_EDIT_TRIES {
            let Some(model) = self.model(t).await else {
                return;
            };
            let p = self.propose(t, &model, parent.as_deref(), attempt);
            let kill = matches!(self.conn, Conn::Mcp(_))
                && self.shared.config.faults
                && self.rng.percent(self.shared.config.mcp_kill_percent);
            let Some((r, interrupted)) = self.call(p.function, &p.args, kill).await else {
                self.models.remove(&t);
                return;
            };
            let Some(obs) = self.observe(t, &p, &r, interrupted) else {
                self.models.remove(&t);
                return;
            };
            let stats = &mut self.out.stats;
            stats.submissions += 1;
            stats.keyed += u64::from(p.key.is_some());
            if interrupted {
                if obs.deduplicated {
                    stats.recovered += 1;
                } else {
                    stats.committed_on_retry += 1;
                }
            } else if obs.deduplicated {
                self.violation(format!(
                    "a first send of key {:?} was deduplicated: {r}",
                    p.key
                ));
            }
            if let Some(v) = r["current_version"].as_i64() {
                self.saw_version(t, v, p.function);
            }
            if p.key.is_some()
                && !interrupted
                && self.rng.percent(self.shared.config.resend_percent)
                && let Some((again, _)) = self.call(p.function, &p.args, false).await
                && let Some(again) = self.observe(t, &p, &again, false)
            {
                self.out.stats.keyed_retries += 1;
                self.out.keyed_retries.push(KeyedRetry {
                    first: obs.clone(),
                    again,
                });
            }
            self.out.observations.push(obs.clone());
            match (obs.status.as_str(), obs.failure_reason.as_deref()) {
                ("accepted", _) => {
                    self.out.stats.accepted += 1;
                    if obs.via == Via::Mcp {
                        self.out.stats.accepted_via_mcp += 1;
                    }
                    self.shared.accepted.fetch_add(1, Ordering::Relaxed);
                    let mut after = p.after;
                    after.version = obs.version.unwrap_or(after.version);
                    self.models.insert(t, after);
                    return;
                }
                ("rejected", Some("target_version_mismatch")) => {
                    self.out.stats.rejected += 1;
                    self.out.stats.version_conflicts += 1;
                    self.models.remove(&t);
                    if self.is_mine(t) {
                        let id = self.target(t).id.clone();
                        self.violation(format!(
                            "version conflict on private target {id}, which only this client edits: {r}"
                        ));
                        return;
                    }
                    parent = Some(obs.pdcp_log_id.clone());
                }
                _ => {
                    self.out.stats.rejected += 1;
                    self.models.remove(&t);
                    self.violation(format!("{} rejected a valid proposal: {r}", p.function));
                    return;
                }
            }
        }
        let id = self.target(t).id.clone();
        self.violation(format!(
            "gave up on {id} after {MAX_EDIT_TRIES} version conflicts"
        ));
    }

    /// A checkpoint guarded by the model's version.
    async fn save(&mut self, t: usize) {
        let Some(model) = self.model(t).await else {
            return;
        };
        let id = self.target(t).id.clone();
        let args = json!({"target_file_id": id, "expected_target_version": model.version});
        let Some((r, interrupted)) = self.call("patchdiff_save", &args, false).await else {
            return;
        };
        if let Some(v) = r["current_version"].as_i64().or(r["version"].as_i64()) {
            self.saw_version(t, v, "patchdiff_save");
        }
        let saved = match (r["status"].as_str(), r["failure_reason"].as_str()) {
            (Some("saved"), _) if r["version"] == model.version => true,
            (Some("rejected"), Some("target_version_mismatch")) if !self.is_mine(t) => {
                self.models.remove(&t);
                false
            }
            _ => {
                self.models.remove(&t);
                self.violation(format!(
                    "patchdiff_save at version {} answered {r}",
                    model.version
                ));
                return;
            }
        };
        self.out.stats.saves += u64::from(saved);
        self.out.saves.push(SaveRecord {
            target: id,
            saved,
            interrupted,
            version: model.version,
            current_hash: r["current_hash"].as_str().unwrap_or_default().to_owned(),
        });
    }

    /// One read of a random kind; on a private target it must agree with the owner's model.
    async fn read(&mut self, t: usize) {
        let slots = self.target(t).slots;
        let slot = self.rng.below(slots);
        let id = self.target(t).id.clone();
        let (function, args) = match self.rng.below(4) {
            0 => ("patchdiff_get_target", json!({"target_file_id": id})),
            1 => (
                "patchdiff_read_target",
                json!({"target_file_id": id, "start": slot * LINE_BYTES, "length": 2 * LINE_BYTES}),
            ),
            2 => (
                "patchdiff_find_occurrences",
                json!({"target_file_id": id, "text": format!("slot {slot:04} = "), "context_chars": 8}),
            ),
            _ => (
                "patchdiff_read_lines",
                json!({"target_file_id": id, "start_line": slot + 1, "end_line": slot + 1}),
            ),
        };
        let Some((r, _)) = self.call(function, &args, false).await else {
            return;
        };
        self.out.stats.reads += 1;
        let Some(version) = r["version"].as_i64().filter(|_| r["status"] == "ok") else {
            self.violation(format!("{function} answered {r}"));
            return;
        };
        self.saw_version(t, version, function);
        let start = slot * LINE_BYTES;
        // What the answer must contain, given a content at its version.
        let expect = |content: &str| -> Value {
            match function {
                "patchdiff_get_target" => json!(content),
                "patchdiff_read_target" => {
                    json!(content[start..(start + 2 * LINE_BYTES).min(content.len())])
                }
                "patchdiff_find_occurrences" => json!(start),
                _ => json!(content[start..start + LINE_BYTES]),
            }
        };
        let got = match function {
            "patchdiff_get_target" => r["current_content"].clone(),
            "patchdiff_find_occurrences" => {
                if r["occurrence_count"] != 1 {
                    self.violation(format!("{function} on {id}: {r}"));
                    return;
                }
                r["occurrences"][0]["start"].clone()
            }
            _ => r["text"].clone(),
        };
        if self.is_mine(t) {
            if let Some(m) = self.models.get(&t).cloned()
                && (m.version != version || got != expect(&m.content))
            {
                self.violation(format!(
                    "{function} on private target {id} returned version {version} and {got}, \
                     but this client's last write made version {} with {}",
                    m.version,
                    expect(&m.content)
                ));
            }
        } else if function == "patchdiff_get_target" {
            if let Some(content) = got.as_str() {
                let m = Model {
                    version,
                    content: content.to_owned(),
                };
                self.models.insert(t, m);
            }
        } else if function != "patchdiff_find_occurrences"
            && !got
                .as_str()
                .is_some_and(|s| s.starts_with(&format!("slot {slot:04} = ")))
        {
            self.violation(format!("{function} on {id} returned {got}"));
        }
    }
}

/// A load running in the background.
pub struct Load {
    shared: Arc<Shared>,
    started: Instant,
    workers: Vec<JoinHandle<WorkerOut>>,
}

impl Load {
    /// Creates the targets, connects every client (starting the `patchdiff-mcp` processes),
    /// and starts the load.
    pub async fn start(mut config: Config) -> Result<Load, String> {
        if config.faults {
            config.keyed_percent = 100;
        }
        if config.clients() == 0 {
            return Err("no clients".into());
        }
        if config.shared_targets + config.private_targets == 0 {
            return Err("no targets to edit".into());
        }
        if config.mcp_clients > 0 && config.mcp_bin.is_none() {
            return Err("MCP clients need the patchdiff-mcp binary".into());
        }
        let slots = (config.target_bytes / LINE_BYTES).max(1);
        let content = initial_content(slots);
        let mut setup = SqlConn::new(&config.dsn, &format!("{}-setup", config.application_name))?;
        let mut targets = Vec::new();
        for (i, owner) in (0..config.shared_targets).map(|i| (i, None)).chain(
            (0..config.clients() * config.private_targets)
                .map(|i| (i, Some(i / config.private_targets))),
        ) {
            let filename = match owner {
                None => format!("stress-shared-{i}.txt"),
                Some(o) => format!("stress-client{o}-{i}.txt"),
            };
            let r = setup
                .call(
                    "patchdiff_initialize_target",
                    &json!({"filename": filename, "content": content}),
                )
                .await
                .map_err(|e| format!("initializing targets: {e:?}"))?;
            let id = r["target_file_id"]
                .as_str()
                .ok_or_else(|| format!("patchdiff_initialize_target answered {r}"))?;
            targets.push(Target {
                id: id.to_owned(),
                owner,
                slots,
            });
        }
        let mut conns = Vec::new();
        for c in 0..config.clients() {
            let name = format!("{}-c{c}", config.application_name);
            let conn = if c < config.sql_clients {
                let mut s = SqlConn::new(&config.dsn, &name)?;
                let c = connect_quietly(&s.config)
                    .await
                    .map_err(|e| format!("connecting: {}", describe(&e)))?;
                s.client = Some(c);
                Conn::Sql(s)
            } else {
                let mut m = McpConn {
                    bin: config.mcp_bin.clone().expect("checked above"),
                    dsn: with_application_name(&config.dsn, &name),
                    proc: None,
                    next_id: 0,
                };
                m.ensure()
                    .await
                    .map_err(|e| format!("starting patchdiff-mcp: {e:?}"))?;
                Conn::Mcp(m)
            };
            conns.push(conn);
        }
        let started = Instant::now();
        let shared = Arc::new(Shared {
            deadline: config.duration.map(|d| started + d),
            config,
            targets,
            stop: AtomicBool::new(false),
            actions: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
        });
        let workers = conns
            .into_iter()
            .enumerate()
            .map(|(id, conn)| {
                let owned_by = |t: &usize, o: Option<usize>| shared.targets[*t].owner == o;
                let private = (0..shared.targets.len())
                    .filter(|t| owned_by(t, Some(id)))
                    .collect();
                let public = (0..shared.targets.len())
                    .filter(|t| owned_by(t, None))
                    .collect();
                let worker = Worker {
                    id,
                    shared: shared.clone(),
                    conn,
                    rng: Rng(shared.config.seed ^ ((id as u64 + 1) * 0x1000_0001)),
                    private,
                    public,
                    models: HashMap::new(),
                    seen: HashMap::new(),
                    seq: 0,
                    out: WorkerOut::default(),
                };
                tokio::spawn(worker.run())
            })
            .collect();
        Ok(Load {
            shared,
            started,
            workers,
        })
    }

    /// Asks every client to stop after its current action.
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::Relaxed);
    }

    /// Acceptances so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::Relaxed)
    }

    pub fn started(&self) -> Instant {
        self.started
    }

    /// Waits for every client to finish and gathers what they saw.
    pub async fn finish(self) -> Outcome {
        let mut outcome = Outcome {
            targets: self.shared.targets.clone(),
            ..Outcome::default()
        };
        for w in self.workers {
            match w.await {
                Ok(out) => {
                    outcome.observations.extend(out.observations);
                    outcome.keyed_retries.extend(out.keyed_retries);
                    outcome.saves.extend(out.saves);
                    outcome.violations.extend(out.violations);
                    outcome.stats.add(&out.stats);
                    outcome.models.extend(out.models);
                }
                Err(e) => outcome.violations.push(format!("a client panicked: {e}")),
            }
        }
        outcome.elapsed = self.started.elapsed();
        outcome
    }
}

/// Runs a load to its end.
pub async fn run(config: Config) -> Result<Outcome, String> {
    Ok(Load::start(config).await?.finish().await)
}

/// What [`check`] looked at, and what it found.
#[derive(Debug, Default)]
pub struct Checked {
    pub violations: Vec<String>,
    pub targets: usize,
    pub attempts: usize,
    pub accepted: usize,
    pub ledger_rows: i64,
    pub replayed: usize,
}

impl Checked {
    pub fn summary(&self) -> String {
        format!(
            "checked {} targets, {} attempt rows ({} accepted), {} ledger rows, {} replays: {} violations",
            self.targets,
            self.attempts,
            self.accepted,
            self.ledger_rows,
            self.replayed,
            self.violations.len()
        )
    }
}

/// One attempt row with the facts of its ledger rows.
struct LogRow {
    target: String,
    pdcp_log_id: String,
    status: String,
    before_version: i64,
    before_hash: String,
    after_version: Option<i64>,
    after_hash: Option<String>,
    key: Option<String>,
    fingerprint: String,
    parent: Option<String>,
    record_changes: i32,
    ledger_rows: i64,
    ledger_indexes_ok: bool,
    ledger_consistent: bool,
    failure_reason: Option<String>,
    /// The attempt's editing cycle is its target's and was open at its versions.
    cycle_ok: bool,
}

const LOG_ROWS: &str = "\
SELECT p.target_file_id::text, p.pdcp_log_id::text, p.status, p.before_version, p.before_hash, \
       p.after_version, p.after_hash, p.client_request_id, p.request_fingerprint, p.parent_pdcp_log_id::text, \
       COALESCE(pg_catalog.json_array_length(p.pdcp_content::json -> 'edits'), \
                pg_catalog.json_array_length(p.pdcp_content::json -> 'operations'), 1), \
       l.n, l.n = 0 OR (l.lo = 1 AND l.hi = l.n AND l.distinct_indexes = l.n), l.consistent, p.failure_reason, \
       c.target_file_id = p.target_file_id AND p.before_version >= c.opened_version \
         AND (c.closed_version IS NULL OR COALESCE(p.after_version, p.before_version) <= c.closed_version) \
  FROM patchdiff.pdcp_logs p \
  JOIN patchdiff.editing_cycles c ON c.editing_cycle_id = p.editing_cycle_id \
  CROSS JOIN LATERAL ( \
    SELECT count(*) AS n, min(m.change_index) AS lo, max(m.change_index) AS hi, \
           count(DISTINCT m.change_index) AS distinct_indexes, \
           COALESCE(bool_and(m.target_file_id = p.target_file_id AND m.editing_cycle_id = p.editing_cycle_id \
                    AND m.log_sequence = p.log_sequence AND m.before_version = p.before_version \
                    AND m.after_version = p.after_version), true) AS consistent \
      FROM patchdiff.manifest_ledger m WHERE m.pdcp_log_id = p.pdcp_log_id) l \
 WHERE p.target_file_id = ANY($1::text[]::uuid[]) \
 ORDER BY p.log_sequence";

const SAVE_SNAPSHOTS: &str = "\
SELECT target_file_id::text, version, content_hash FROM patchdiff.snapshots \
 WHERE target_file_id = ANY($1::text[]::uuid[]) AND snapshot_reason = 'save_checkpoint'";

/// A target as stored.
struct Stored {
    version: i64,
    hash: String,
    content: String,
    initial_hash: String,
    cycles: i64,
    open_cycles: i64,
    active_cycle_open: Option<bool>,
}

const TARGET_ROWS: &str = "\
SELECT t.target_file_id::text, t.version, t.current_hash, t.current_content, s.content_hash, \
       (SELECT count(*) FROM patchdiff.editing_cycles c WHERE c.target_file_id = t.target_file_id), \
       (SELECT count(*) FROM patchdiff.editing_cycles c \
         WHERE c.target_file_id = t.target_file_id AND c.closed_version IS NULL), \
       (SELECT c.closed_version IS NULL AND c.target_file_id = t.target_file_id \
          FROM patchdiff.editing_cycles c WHERE c.editing_cycle_id = t.active_editing_cycle_id) \
  FROM patchdiff.targets t \
  JOIN patchdiff.snapshots s ON s.target_file_id = t.target_file_id AND s.snapshot_reason = 'initial' \
 WHERE t.target_file_id = ANY($1::text[]::uuid[])";

/// Checks the invariants of a run against the database, through `client` (a superuser
/// session: it reads `patchdiff.pdcp_logs`, `patchdiff.manifest_ledger` and the targets).
///
/// Per target: accepted attempts, in log order, have versions 1..=current, each starting from
/// the previous one's hash; the target's version and hash are the last acceptance's; every
/// accepted attempt has one ledger row per change of its record (indexes 1..=n, same versions),
/// a rejected one none; no request was logged twice. Against the clients: every answer names its
/// row with the same status, version and hash; every row was answered to some client, once;
/// every keyed resend was `deduplicated` with the recorded outcome and every key names one row;
/// private targets hold their owner's model. Finally `patchdiff_replay` of every target
/// reproduces it (`materialized_state_matches`).
pub async fn check(client: &Client, outcome: &Outcome) -> Result<Checked, tokio_postgres::Error> {
    check_across(&[client], client, outcome).await
}

/// [`check`] of a sharded deployment (docs/scale-out.md): the rows are read from every
/// partition's database in `partitions` (each holds its own targets' rows), and replay runs
/// through `client` (the router).
pub async fn check_across(
    partitions: &[&Client],
    client: &Client,
    outcome: &Outcome,
) -> Result<Checked, tokio_postgres::Error> {
    async fn rows_of(
        partitions: &[&Client],
        sql: &str,
        ids: &[String],
    ) -> Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
        let mut all = Vec::new();
        for p in partitions {
            all.extend(p.query(sql, &[&ids]).await?);
        }
        Ok(all)
    }
    let mut c = Checked {
        targets: outcome.targets.len(),
        ..Checked::default()
    };
    let v = &mut c.violations;
    let ids: Vec<String> = outcome.targets.iter().map(|t| t.id.clone()).collect();
    let rows: Vec<LogRow> = rows_of(partitions, LOG_ROWS, &ids)
        .await?
        .iter()
        .map(|r| LogRow {
            target: r.get(0),
            pdcp_log_id: r.get(1),
            status: r.get(2),
            before_version: r.get(3),
            before_hash: r.get(4),
            after_version: r.get(5),
            after_hash: r.get(6),
            key: r.get(7),
            fingerprint: r.get(8),
            parent: r.get(9),
            record_changes: r.get(10),
            ledger_rows: r.get(11),
            ledger_indexes_ok: r.get(12),
            ledger_consistent: r.get(13),
            failure_reason: r.get(14),
            cycle_ok: r.get(15),
        })
        .collect();
    c.attempts = rows.len();
    let mut stored: BTreeMap<String, Stored> = BTreeMap::new();
    for r in rows_of(partitions, TARGET_ROWS, &ids).await? {
        let s = Stored {
            version: r.get(1),
            hash: r.get(2),
            content: r.get(3),
            initial_hash: r.get(4),
            cycles: r.get(5),
            open_cycles: r.get(6),
            active_cycle_open: r.get(7),
        };
        stored.insert(r.get(0), s);
    }
    let mut snapshots: BTreeMap<String, Vec<(i64, String)>> = BTreeMap::new();
    for r in rows_of(partitions, SAVE_SNAPSHOTS, &ids).await? {
        snapshots
            .entry(r.get(0))
            .or_default()
            .push((r.get(1), r.get(2)));
    }

    // The log on its own.
    let mut by_target: BTreeMap<&str, Vec<&LogRow>> = BTreeMap::new();
    for r in &rows {
        by_target.entry(&r.target).or_default().push(r);
    }
    let by_id: HashMap<&str, &LogRow> = rows.iter().map(|r| (r.pdcp_log_id.as_str(), r)).collect();
    for t in &outcome.targets {
        let Some(st) = stored.get(&t.id) else {
            v.push(format!("target {} is missing", t.id));
            continue;
        };
        let (version, hash) = (st.version, &st.hash);
        let log = by_target.get(t.id.as_str()).cloned().unwrap_or_default();
        let mut expected_version = 0i64;
        let mut expected_hash = st.initial_hash.clone();
        // The hash of every version, as the accepted attempts made them.
        let mut hashes = BTreeMap::from([(0i64, expected_hash.clone())]);
        let mut fingerprints = BTreeSet::new();
        let mut keys = BTreeSet::new();
        for r in &log {
            if !fingerprints.insert(&r.fingerprint) {
                v.push(format!(
                    "{}: request {} logged twice (attempt {})",
                    t.id, r.fingerprint, r.pdcp_log_id
                ));
            }
            if let Some(k) = &r.key
                && !keys.insert(k)
            {
                v.push(format!("{}: key {k} names two attempts", t.id));
            }
            if !r.cycle_ok {
                v.push(format!(
                    "{}: attempt {} is logged in an editing cycle that was not open at version {}",
                    t.id, r.pdcp_log_id, r.before_version
                ));
            }
            match r.status.as_str() {
                "accepted" => {
                    c.accepted += 1;
                    c.ledger_rows += r.ledger_rows;
                    if r.before_version != expected_version
                        || r.after_version != Some(expected_version + 1)
                        || r.before_hash != expected_hash
                    {
                        v.push(format!(
                            "{}: accepted attempt {} goes {} -> {:?} from {}, but the previous acceptance left version {} with {}",
                            t.id, r.pdcp_log_id, r.before_version, r.after_version, r.before_hash, expected_version, expected_hash
                        ));
                    }
                    expected_version = r.after_version.unwrap_or(expected_version + 1);
                    expected_hash = r.after_hash.clone().unwrap_or_default();
                    hashes.insert(expected_version, expected_hash.clone());
                    if r.ledger_rows != i64::from(r.record_changes)
                        || !r.ledger_indexes_ok
                        || !r.ledger_consistent
                    {
                        v.push(format!(
                            "{}: accepted attempt {} has {} ledger rows for {} changes (indexes 1..n: {}, same attempt facts: {})",
                            t.id, r.pdcp_log_id, r.ledger_rows, r.record_changes, r.ledger_indexes_ok, r.ledger_consistent
                        ));
                    }
                }
                _ => {
                    if r.ledger_rows != 0 || r.after_version.is_some() {
                        v.push(format!(
                            "{}: rejected attempt {} has {} ledger rows and after_version {:?}",
                            t.id, r.pdcp_log_id, r.ledger_rows, r.after_version
                        ));
                    }
                }
            }
        }
        if version != expected_version || *hash != expected_hash {
            v.push(format!(
                "{}: target is at version {version} with {hash}, but its accepted attempts end at version {expected_version} with {expected_hash}",
                t.id
            ));
        }
        // Checkpoints: each answered `saved` is one closed cycle and one snapshot of the state
        // at its version (an interrupted save may have saved once more); one cycle stays open.
        let saves = outcome.saves.iter().filter(|s| s.target == t.id);
        let (saved, unsure) = saves.fold((0i64, 0i64), |(a, b), s| {
            (a + i64::from(s.saved), b + i64::from(s.interrupted))
        });
        let snaps = snapshots.get(&t.id).map_or(&[][..], Vec::as_slice);
        if !(saved..=saved + unsure).contains(&(st.cycles - 1))
            || snaps.len() as i64 != st.cycles - 1
            || st.open_cycles != 1
            || st.active_cycle_open != Some(true)
        {
            v.push(format!(
                "{}: {saved} saves answered ({unsure} interrupted), but {} editing cycles ({} open, the active one open: {:?}) and {} save snapshots",
                t.id,
                st.cycles,
                st.open_cycles,
                st.active_cycle_open,
                snaps.len()
            ));
        }
        for (at, h) in snaps {
            if hashes.get(at) != Some(h) {
                v.push(format!(
                    "{}: the save snapshot at version {at} has {h}, but version {at} was {:?}",
                    t.id,
                    hashes.get(at)
                ));
            }
        }
        for s in outcome.saves.iter().filter(|s| s.target == t.id && s.saved) {
            if hashes.get(&s.version) != Some(&s.current_hash) {
                v.push(format!(
                    "{}: a save answered version {} with {}, but that version was {:?}",
                    t.id,
                    s.version,
                    s.current_hash,
                    hashes.get(&s.version)
                ));
            }
        }
        if let Some(m) = outcome.models.get(&t.id) {
            let content = &st.content;
            if m.version != version || m.content != *content {
                v.push(format!(
                    "{}: private target holds version {version}, but its owner's last write made version {}{}",
                    t.id,
                    m.version,
                    if m.content == *content { "" } else { " (and the content differs)" }
                ));
            }
        }
    }

    // The log against the answers.
    let mut answered: BTreeMap<&str, usize> = BTreeMap::new();
    for o in &outcome.observations {
        *answered.entry(&o.pdcp_log_id).or_default() += 1;
        let Some(r) = by_id.get(o.pdcp_log_id.as_str()) else {
            v.push(format!(
                "{}: {} answer {} names attempt {}, which the log lacks (lost)",
                o.target, o.status, o.function, o.pdcp_log_id
            ));
            continue;
        };
        if r.target != o.target || r.status != o.status {
            v.push(format!(
                "{}: answer says {} for attempt {}, the log says {} on {}",
                o.target, o.status, o.pdcp_log_id, r.status, r.target
            ));
        }
        if o.status == "accepted" {
            if r.after_version != o.version || r.after_hash != o.after_hash {
                v.push(format!(
                    "{}: attempt {} was answered as version {:?} with {:?}, logged as {:?} with {:?}",
                    o.target, o.pdcp_log_id, o.version, o.after_hash, r.after_version, r.after_hash
                ));
            }
            let changes = o.changes as i64;
            if r.ledger_rows != changes || o.manifest_entries_added != Some(changes) {
                v.push(format!(
                    "{}: attempt {} proposed {changes} changes, answered manifest_entries_added {:?}, has {} ledger rows",
                    o.target, o.pdcp_log_id, o.manifest_entries_added, r.ledger_rows
                ));
            }
        } else if r.failure_reason != o.failure_reason {
            v.push(format!(
                "{}: attempt {} was answered with {:?}, logged with {:?}",
                o.target, o.pdcp_log_id, o.failure_reason, r.failure_reason
            ));
        }
        if r.key != o.key {
            v.push(format!(
                "{}: attempt {} sent key {:?}, logged {:?}",
                o.target, o.pdcp_log_id, o.key, r.key
            ));
        }
        if o.parent.is_some() && r.parent != o.parent {
            v.push(format!(
                "{}: attempt {} named parent {:?}, logged {:?}",
                o.target, o.pdcp_log_id, o.parent, r.parent
            ));
        }
    }
    for r in &rows {
        match answered.get(r.pdcp_log_id.as_str()) {
            None => v.push(format!(
                "{}: {} attempt {} was never answered to a client",
                r.target, r.status, r.pdcp_log_id
            )),
            Some(&n) if n > 1 => v.push(format!(
                "{}: attempt {} was answered as new or recovered {n} times",
                r.target, r.pdcp_log_id
            )),
            _ => {}
        }
    }
    for k in &outcome.keyed_retries {
        let (a, b) = (&k.first, &k.again);
        if !b.deduplicated
            || a.status != b.status
            || a.pdcp_log_id != b.pdcp_log_id
            || a.version != b.version
            || a.after_hash != b.after_hash
            || a.failure_reason != b.failure_reason
        {
            v.push(format!(
                "{}: resending key {:?} answered {} {} {:?}/{:?} deduplicated={}, but the first answer was {} {} {:?}/{:?}",
                a.target, a.key, b.status, b.pdcp_log_id, b.version, b.failure_reason, b.deduplicated,
                a.status, a.pdcp_log_id, a.version, a.failure_reason
            ));
        }
    }

    // Replay.
    for t in &outcome.targets {
        let r = crate::call(client, "patchdiff_replay", &json!({"target_file_id": t.id})).await?;
        c.replayed += 1;
        let version = stored.get(&t.id).map(|s| s.version);
        if r["status"] != "success"
            || r["materialized_state_matches"] != true
            || r["reconstructed_version"].as_i64() != version
        {
            v.push(format!("{}: patchdiff_replay answered {r}", t.id));
        }
    }
    Ok(c)
}
