//! The one database connection: one SQL function call per tool call.

use crate::config::Database;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type, to_sql_checked};
use tokio_postgres::{CancelToken, Client, NoTls, Statement};

pub struct Db {
    conninfo: String,
    client: Client,
    /// The extension's schema, quoted, so calls do not depend on the role's search_path.
    schema: String,
    /// pg_patchdiff functions present in the database: tools are advertised only when their
    /// function exists, so a front end newer than the installed extension never lists a tool
    /// it cannot serve.
    pub functions: BTreeSet<String>,
    /// The extension's version in this database and the one its server would install.
    pub versions: Versions,
    statements: HashMap<String, Statement>,
    /// Set when a call failed in a way that ends the session (a FATAL from the server, a lost
    /// socket): the next call opens a new connection even if the old one has not been seen to
    /// close yet, instead of failing a second time on it.
    broken: bool,
    /// `SET ROLE ...` of the role this connection calls as (the HTTP endpoint's token role),
    /// run after the session settings on every reconnection, so no call runs as the login role.
    role_sql: String,
    /// When `role_sql` was last run and succeeded ([`Db::assume_role`]).
    role_set: Option<std::time::Instant>,
    /// `SET ...` statements every session carries (strict observation mode), run right after
    /// connecting and after every reconnect, before any call.
    session: String,
    /// The database is a sharded deployment's PL/Proxy router (sql/router), not one database.
    router: bool,
    /// Through a router, the open publication's own session on the target's partition, the
    /// extension's schema there, and the partition's number and the count of partitions: the
    /// SAVE must stay in the publisher's transaction while the file is installed, which a call
    /// through PL/Proxy cannot do (docs/scale-out.md).
    publication: Option<(Client, String, (i32, i32))>,
    /// What a client's `notifications/cancelled` reaches while a call holds this connection.
    cancellation: Arc<Cancellation>,
}

/// The cancellation of the running call (`notifications/cancelled` over stdio, crate::server),
/// shared with the server's loop while the call holds the [`Db`]: whether it was asked for, and
/// the cancel tokens of the sessions the call may be running a statement on (the connection's
/// own, and through a router a publication's session on its partition).
///
/// A cancel request is sent as tokio-postgres sends it, to the address each session connected
/// to; PostgreSQL acts on it a moment later, on whatever statement the session runs by then
/// (helper-64 saw the next request cancelled instead in 19 of 100 rounds, when the session was
/// kept). So a session that was sent a cancel request is never used again: the next call
/// reconnects first (`spent`), and a request that lands late finds a session nobody uses. A
/// cancel that finds the session between two statements is dropped, so every statement the call
/// would send afterwards is refused instead (`refused`, checked again right before each statement
/// is sent: helper-66 F1 saw a cancel dropped while the call prepared its statement, which then
/// ran), and the server's loop sends the requests again while the call still runs. COMMIT and
/// ROLLBACK are not refused, and no request is sent while one runs (the sessions are withdrawn):
/// a publication that has installed its file commits, so that the database agrees with the disk.
/// (A first version read each request's socket until the server closed it, as libpq's `PQcancel`
/// does, to know it had acted and keep the session: helper-67 and helper-68 showed that a proxy
/// may close that socket first, that a host name's addresses may lead to other servers, and that
/// a down address held the loop 5 s; replacing the session needs none of it.)
#[derive(Default)]
pub struct Cancellation {
    requested: AtomicBool,
    /// Why: the client's `notifications/cancelled` (false) or, over HTTP, its hang-up (true).
    hung_up: AtomicBool,
    tokens: std::sync::Mutex<Vec<CancelToken>>,
    /// A cancel request was sent: the session must be replaced before the next call.
    spent: AtomicBool,
}

/// How long sending one cancel request may take (connecting to the server included).
const CANCEL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

impl Cancellation {
    /// Whether the running call was cancelled.
    pub fn requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }

    /// Before the next call.
    pub fn clear(&self) {
        self.requested.store(false, Ordering::SeqCst);
    }

    /// What cancelled the call, as its messages and log lines say it.
    fn why(&self) -> &'static str {
        if self.hung_up.load(Ordering::SeqCst) {
            "the client hung up"
        } else {
            "notifications/cancelled"
        }
    }

    /// Marks the running call cancelled and sends a cancel request for the statement each of its
    /// sessions runs; each of those sessions is replaced before the next call. `hung_up`: the
    /// client closed its HTTP connection (2026-07-28), rather than sending `notifications/cancelled`.
    pub async fn cancel(&self, hung_up: bool) {
        self.hung_up.store(hung_up, Ordering::SeqCst);
        self.requested.store(true, Ordering::SeqCst);
        self.spent.store(true, Ordering::SeqCst);
        let tokens = self
            .tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for token in tokens {
            match tokio::time::timeout(CANCEL_TIMEOUT, token.cancel_query(NoTls)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!("{}: the cancel request failed: {e}", self.why())
                }
                Err(_) => tracing::warn!(
                    "{}: the cancel request was not sent within {CANCEL_TIMEOUT:?}",
                    self.why()
                ),
            }
        }
    }

    /// Whether the session must be replaced before the next call (and that is now known).
    fn take_spent(&self) -> bool {
        self.spent.swap(false, Ordering::SeqCst)
    }

    fn set_tokens(&self, tokens: Vec<CancelToken>) {
        *self.tokens.lock().unwrap_or_else(|e| e.into_inner()) = tokens;
    }

    /// The error of a statement the call would send after it was cancelled.
    fn refused(&self) -> Result<(), CallError> {
        if !self.requested() {
            return Ok(());
        }
        Err(CallError {
            message: format!(
                "the client cancelled this call ({}): the rest of it was not run",
                self.why()
            ),
            cancelled: Some(Cancelled::QueryCanceled),
            unavailable: false,
            login_refused: false,
        })
    }
}

/// The failure of a call. Its outcome is unknown unless `cancelled` says PostgreSQL cancelled
/// the statement, which rolled it back.
#[derive(Debug)]
pub struct CallError {
    pub message: String,
    pub cancelled: Option<Cancelled>,
    /// A sharded deployment's router could not reach the target's partition (SQLSTATE 08001 from
    /// its functions, sql/router/patchdiff_router.sql): the call never started there.
    pub unavailable: bool,
    /// The partition's shard refused the calling role's login (SQLSTATE 28000 from the router's
    /// functions): the call never started there, and will not until a DBA lets the role in.
    pub login_refused: bool,
}

/// Why PostgreSQL cancelled a statement (SQLSTATE 57014 query_canceled). The ERROR aborted the
/// statement's transaction: in autocommit nothing was written; inside the front end's own
/// publication transaction, the ROLLBACK that follows discards the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancelled {
    /// `statement_timeout` (PATCHDIFF_MCP_STATEMENT_TIMEOUT) expired.
    StatementTimeout,
    /// Any other cancel: `pg_cancel_backend`, a cancel request.
    QueryCanceled,
}

impl Cancelled {
    /// The `failure_reason` a host sees.
    pub fn reason(self) -> &'static str {
        match self {
            Cancelled::StatementTimeout => "statement_timeout",
            Cancelled::QueryCanceled => "query_canceled",
        }
    }
}

impl CallError {
    /// An error whose outcome is unknown.
    pub fn unknown(message: impl Into<String>) -> CallError {
        CallError {
            message: message.into(),
            cancelled: None,
            unavailable: false,
            login_refused: false,
        }
    }
}

async fn open(conninfo: &str) -> Result<Client, String> {
    pinned(spawned(connect(conninfo).await?)?).await
}

/// A new session on `config` (a router's partition), driven in the background.
async fn connect_config(config: tokio_postgres::Config) -> Result<Client, String> {
    pinned(spawned(connect_with(config).await?)?).await
}

/// Run first on every session of this front end, before anything else: names resolve in
/// pg_catalog, and relations then in pg_temp, never in a schema of the login role's search_path.
/// Otherwise a function or operator of exactly the argument types a statement uses, which
/// pg_catalog lacks (`=` of `oid` and `regclass`; `quote_ident` of `name`), created in `public`
/// by any role that may create there (every role, in a database made before PostgreSQL 15),
/// would run as the role this front end logs in as, at every start-up: a superuser's rights, or
/// the tenant's documents and the power to forge every answer (helper-49). The statements below
/// name pg_catalog's objects as well, for a session this setting cannot reach (a transaction
/// pooler that hands each transaction another server session).
///
/// The same statement sets `client_connection_check_interval`: while a statement runs, the
/// server checks every second that this front end is still connected, and cancels the statement
/// if not. A front end that was killed (SIGKILL, a crash, the machine) otherwise left its call
/// running, and a write waiting for a row lock committed when the lock was released, though
/// nobody would ever hear of it (helper-64).
pub(crate) const PIN_SEARCH_PATH: &str = "SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', false), \
     pg_catalog.set_config('client_connection_check_interval', '1s', false)";

async fn pinned(client: Client) -> Result<Client, String> {
    client
        .batch_execute(PIN_SEARCH_PATH)
        .await
        .map_err(|e| format!("cannot set the session's search_path: {}", describe(&e)))?;
    Ok(client)
}

type Connection =
    tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>;

/// The client of a connection now driven by a task of its own.
fn spawned((client, connection): (Client, Connection)) -> Result<Client, String> {
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!("database connection ended: {e}");
        }
    });
    Ok(client)
}

/// A new session and its connection.
async fn connect(conninfo: &str) -> Result<(Client, Connection), String> {
    connect_with(own_config(conninfo)?).await
}

/// The configuration of this front end's sessions of `conninfo`.
fn own_config(conninfo: &str) -> Result<tokio_postgres::Config, String> {
    let mut config: tokio_postgres::Config = conninfo
        .parse()
        .map_err(|e| format!("PATCHDIFF_DATABASE_URL is not a connection string: {e}"))?;
    if config.get_application_name().is_none() {
        // Names this server's sessions in pg_stat_activity.
        config.application_name("patchdiff-mcp");
    }
    Ok(config)
}

/// A new session of `config` and its connection, which the caller drives (a listener polls
/// its messages for notifications: [`crate::feed`]).
pub(crate) async fn connect_with(
    config: tokio_postgres::Config,
) -> Result<(Client, Connection), String> {
    config
        .connect(NoTls)
        .await
        // describe: a refusal from the server (57P03 "the database system is starting up",
        // 28P01, 3D000) names itself, where tokio-postgres's Display says only "db error".
        .map_err(|e| format!("cannot connect to the database: {}", describe(&e)))
}

impl Db {
    pub async fn connect(database: &Database) -> Result<Db, String> {
        let conninfo = match database {
            Database::Url(url) => url.clone(),
            Database::Embedded { data_dir } => {
                let dir = data_dir.clone();
                let (conninfo, lock) =
                    tokio::task::spawn_blocking(move || crate::embedded::ensure_cluster(&dir))
                        .await
                        .map_err(|e| e.to_string())??;
                prepare_embedded(&conninfo, data_dir).await?;
                drop(lock);
                conninfo
            }
        };
        let client = open(&conninfo).await?;
        let facts = router_facts(&client).await?;
        let router = facts.is_some();
        let (schema, functions, versions) = match facts {
            Some(facts) => facts,
            None => {
                let (schema, functions) = inspect(&client).await?;
                let versions = versions(&client, &functions).await?;
                (schema, functions, versions)
            }
        };
        let db = Db {
            conninfo,
            client,
            schema,
            functions,
            versions,
            statements: HashMap::new(),
            broken: false,
            role_sql: String::new(),
            role_set: None,
            session: String::new(),
            router,
            publication: None,
            cancellation: Arc::default(),
        };
        db.sessions_changed();
        Ok(db)
    }

    /// The running call's cancellation, for the server's loop.
    pub fn cancellation(&self) -> Arc<Cancellation> {
        self.cancellation.clone()
    }

    /// The error a cancelled call stops with before work the database cannot undo (installing a
    /// publication's file), or nothing.
    pub fn refuse_if_cancelled(&self) -> Result<(), CallError> {
        self.cancellation.refused()
    }

    /// Tells the cancellation which sessions a call may now run statements on.
    fn sessions_changed(&self) {
        let mut tokens = vec![self.client.cancel_token()];
        if let Some((client, _, _)) = &self.publication {
            tokens.push(client.cancel_token());
        }
        self.cancellation.set_tokens(tokens);
    }

    /// Makes every later call of this connection run as `role` (`SET ROLE`), now and after any
    /// reconnection. Sent again when the connection has run as `role` for [`ROLE_RECHECK`] or
    /// longer: PostgreSQL checks the login role's membership only when a role is set, so a
    /// connection kept as `role` went on serving its token after `REVOKE role FROM login` for
    /// as long as it lived (helper-78). (Sending it on every call cost an HTTP call 0.12 to 0.23
    /// ms more and a fifth of the endpoint's throughput: docs/benchmarks.md.)
    /// After [`RoleError::Refused`] the session is as it was and may be used again (with this
    /// method first); after [`RoleError::Unreachable`] it must not be.
    pub async fn assume_role(&mut self, role: &str) -> Result<(), RoleError> {
        let sql = format!("SET ROLE {}", quote_ident(role));
        if sql == self.role_sql
            && self.role_set.is_some_and(|t| t.elapsed() < ROLE_RECHECK)
            && !(self.broken || self.client.is_closed())
        {
            return Ok(());
        }
        self.role_sql.clear();
        self.role_set = None;
        self.reconnect_if_lost().await.map_err(|e| {
            RoleError::Unreachable(format!("cannot reach the database: {}", e.message))
        })?;
        self.client.batch_execute(&sql).await.map_err(|e| {
            let why = format!("cannot SET ROLE {role}: {}", describe(&e));
            // The role does not exist (22023) or the login role may not become it (42501):
            // asking again changes nothing until the DBA or the token file does.
            let refused = e.code().is_some_and(|c| {
                *c == SqlState::INVALID_PARAMETER_VALUE || *c == SqlState::INSUFFICIENT_PRIVILEGE
            });
            if refused {
                RoleError::Refused(why)
            } else {
                RoleError::Unreachable(why)
            }
        })?;
        self.role_sql = sql;
        self.role_set = Some(std::time::Instant::now());
        Ok(())
    }

    /// Where the change feed listens, and what its sessions run after connecting: the session
    /// settings of this one, and its `SET ROLE` if `as_role`. One database: its own connection.
    /// Through a router, every partition's database as this front end's user (as a publication
    /// reaches one), since each shard announces its own commits and the router none
    /// (docs/scale-out.md).
    pub async fn listen_sessions(
        &mut self,
        as_role: bool,
    ) -> Result<(Vec<tokio_postgres::Config>, String), String> {
        let role = if as_role { self.role_sql.as_str() } else { "" };
        let setup = [PIN_SEARCH_PATH, self.session.as_str(), role]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        if !self.router {
            return Ok((vec![own_config(&self.conninfo)?], setup));
        }
        self.reconnect_if_lost().await.map_err(|e| e.message)?;
        let rows = self
            .client
            .query(
                "SELECT conninfo FROM patchdiff_router.partition_conninfos() AS conninfo",
                &[],
            )
            .await
            .map_err(|e| {
                format!(
                    "cannot read the router's partitions: {}",
                    self.failed(&e).message
                )
            })?;
        let configs = rows
            .iter()
            .map(|r| partition_config(&self.conninfo, r.get(0)))
            .collect::<Result<Vec<_>, _>>()?;
        if configs.is_empty() {
            return Err("the router names no partition".into());
        }
        Ok((configs, setup))
    }

    /// Through a router, a probe that reads the partitions' connection strings again on a
    /// session of its own (as this front end's user, as its listening sessions connect), for
    /// the change feed to follow a partition that moved ([`crate::feed::LayoutProbe`]).
    pub fn layout_probe(&self) -> Option<crate::feed::LayoutProbe> {
        if !self.router {
            return None;
        }
        let own = self.conninfo.clone();
        Some(std::sync::Arc::new(move || {
            let own = own.clone();
            Box::pin(async move {
                let (client, connection) = connect_with(own_config(&own)?).await?;
                let driven = tokio::spawn(connection);
                let rows = client
                    .query(
                        "SELECT conninfo FROM patchdiff_router.partition_conninfos() AS conninfo",
                        &[],
                    )
                    .await
                    .map_err(|e| format!("cannot read the router's partitions: {}", describe(&e)));
                drop(client);
                let _ = driven.await;
                rows?
                    .iter()
                    .map(|r| partition_config(&own, r.get(0)))
                    .collect()
            })
        }))
    }

    /// Fixes the session settings of this connection and of every later reconnection, and
    /// applies them now. Values are the front end's own constants, quoted as literals anyway.
    pub async fn set_session<V: AsRef<str>>(
        &mut self,
        settings: &[(&str, V)],
    ) -> Result<(), String> {
        self.session = session_sql(settings);
        if self.session.is_empty() {
            return Ok(());
        }
        self.client.batch_execute(&self.session).await.map_err(|e| {
            format!(
                "cannot apply the session settings ({}): {}",
                self.session,
                describe(&e)
            )
        })
    }

    /// A new session when the previous one was lost, with the session settings applied; a
    /// failure to apply them fails the call, so no call runs without them.
    pub async fn reconnect_if_lost(&mut self) -> Result<(), CallError> {
        if self.cancellation.take_spent() {
            // A cancel request may still land on this session (Cancellation::cancel).
            self.broken = true;
        }
        if !(self.broken || self.client.is_closed()) {
            return Ok(());
        }
        let client = open(&self.conninfo).await.map_err(CallError::unknown)?;
        for sql in [&self.session, &self.role_sql] {
            if sql.is_empty() {
                continue;
            }
            client.batch_execute(sql).await.map_err(|e| {
                CallError::unknown(format!(
                    "the session settings failed on reconnection: {}",
                    describe(&e)
                ))
            })?;
        }
        self.client = client;
        self.statements.clear();
        self.broken = false;
        self.sessions_changed();
        Ok(())
    }

    /// The role calls of this connection act as, as the API names owners (an identifier,
    /// quoted where it needs to be).
    pub async fn current_role(&mut self) -> Result<String, CallError> {
        self.cancellation.refused()?;
        self.reconnect_if_lost().await?;
        let row = self
            .client
            .query_one("SELECT pg_catalog.quote_ident(CURRENT_USER)", &[])
            .await
            .map_err(|e| self.failed(&e))?;
        Ok(row.get(0))
    }

    /// Tries to take the session-level advisory lock `(class, key)` for up to `wait`, in steps of
    /// 10 ms, serving cancellation between them: whether it was taken. Released by
    /// [`Db::advisory_unlock`], or with the session.
    pub async fn try_advisory_lock(
        &mut self,
        class: i32,
        key: i32,
        wait: std::time::Duration,
    ) -> Result<bool, CallError> {
        let deadline = std::time::Instant::now() + wait;
        loop {
            self.cancellation.refused()?;
            self.reconnect_if_lost().await?;
            let row = self
                .client
                .query_one(
                    "SELECT pg_catalog.pg_try_advisory_lock($1, $2)",
                    &[&class, &key],
                )
                .await
                .map_err(|e| self.failed(&e))?;
            if row.get::<_, bool>(0) {
                return Ok(true);
            }
            if std::time::Instant::now() >= deadline {
                return Ok(false);
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// Releases the advisory lock [`Db::try_advisory_lock`] took. A session where that fails
    /// (lost, or its statement cancelled) is not used again: the next call reconnects, and the
    /// lock ends with the old session.
    pub async fn advisory_unlock(&mut self, class: i32, key: i32) {
        let released = self
            .client
            .query_one(
                "SELECT pg_catalog.pg_advisory_unlock($1, $2)",
                &[&class, &key],
            )
            .await
            .is_ok_and(|row| row.get::<_, bool>(0));
        if !released {
            self.broken = true;
        }
    }

    /// What cancels the statement the session runs now (PostgreSQL's cancel request, sent on a
    /// connection of its own).
    pub fn cancel_token(&self) -> tokio_postgres::CancelToken {
        self.client.cancel_token()
    }

    /// Calls `function(args::json)` and returns its JSON text. Reconnects first when the
    /// previous connection was lost; an error during the call is reported, never retried.
    pub async fn call(&mut self, function: &str, args: &str) -> Result<String, CallError> {
        self.cancellation.refused()?;
        self.reconnect_if_lost().await?;
        let statement = match self.statements.get(function) {
            Some(s) => s.clone(),
            None => {
                let sql = format!("SELECT {}.{function}($1::json)", self.schema);
                let s = self
                    .client
                    .prepare(&sql)
                    .await
                    .map_err(|e| self.failed(&e))?;
                self.statements.insert(function.to_owned(), s.clone());
                s
            }
        };
        // Reconnecting and preparing took turns in which a cancellation may have come.
        self.cancellation.refused()?;
        let row = self
            .client
            .query_one(&statement, &[&JsonArg(args)])
            .await
            .map_err(|e| self.failed(&e))?;
        answer_of(&row, function)
    }
}

/// JSON text as a `json` parameter, sent as PostgreSQL receives one (its text; `json_recv`
/// validates it as `json_in` does). Sent as `text` and cast (`$1::text::json`), the argument was
/// copied twice more in the backend: text's output, then `json`'s input.
struct JsonArg<'a>(&'a str);

impl std::fmt::Debug for JsonArg<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JsonArg({} bytes)", self.0.len())
    }
}

impl ToSql for JsonArg<'_> {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.extend_from_slice(self.0.as_bytes());
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::JSON
    }

    to_sql_checked!();
}

/// A function's `json` answer, as PostgreSQL sends it: its text. Cast to `text` in the statement
/// (`::text`; PostgreSQL has no cast between the two but through text's output and input), each
/// answer was copied twice more in the backend: helper-106 measured `resources/read` of a 64 MiB
/// target of control characters (a 402 MB answer) at 1,997 MB of its backend, against 1,206 MB
/// for the same call in SQL.
struct JsonAnswer(String);

impl<'a> FromSql<'a> for JsonAnswer {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(JsonAnswer(std::str::from_utf8(raw)?.to_owned()))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::JSON
    }
}

/// The JSON text of `function`'s answer in `row`.
fn answer_of(row: &tokio_postgres::Row, function: &str) -> Result<String, CallError> {
    row.try_get::<_, Option<JsonAnswer>>(0)
        .map_err(|e| CallError::unknown(e.to_string()))?
        .map(|a| a.0)
        .ok_or_else(|| CallError::unknown(format!("{function} returned NULL")))
}

/// The transaction of a publishing SAVE, which the front end owns: BEGIN and the session
/// setting through which the extension accepts `sync_workspace: true`, one SAVE call, then
/// COMMIT or ROLLBACK once the file is installed or refused.
impl Db {
    /// Opens the publication's transaction for the calls of `args` (the JSON text of its first
    /// call: the target's, or a new target's with its workspace binding). Through a router, on a
    /// session of its own on that partition (the router names it and its connection string), as
    /// this front end's user, with the same session settings and role.
    pub async fn begin_publication(&mut self, args: &str) -> Result<(), CallError> {
        const BEGIN: &str = "BEGIN; SET LOCAL patchdiff.workspace_owned_transaction = on";
        self.cancellation.refused()?;
        self.reconnect_if_lost().await?;
        if !self.router {
            return self
                .client
                .batch_execute(BEGIN)
                .await
                .map_err(|e| self.failed(&e));
        }
        let row = self
            .client
            .query_one(
                "SELECT conninfo, partition, partitions \
                   FROM patchdiff_router.publication_partition($1::json)",
                &[&JsonArg(args)],
            )
            .await
            .map_err(|e| self.failed(&e))?;
        let (partition, number, count): (Option<String>, i32, i32) =
            (row.get(0), row.get(1), row.get(2));
        let partition = partition.ok_or_else(|| {
            CallError::unknown("the router names no partition for the publication")
        })?;
        let config = partition_config(&self.conninfo, &partition).map_err(CallError::unknown)?;
        let database = config.get_dbname().unwrap_or("?").to_owned();
        let client = connect_config(config).await.map_err(|why| CallError {
            message: format!(
                "patchdiff: partition database {database} is unavailable for the publication; \
                 nothing was written: {why}"
            ),
            cancelled: None,
            unavailable: true,
            login_refused: false,
        })?;
        for sql in [&self.session, &self.role_sql] {
            if !sql.is_empty() {
                client.batch_execute(sql).await.map_err(|e| {
                    CallError::unknown(format!(
                        "the session settings failed on the partition: {}",
                        describe(&e)
                    ))
                })?;
            }
        }
        let (schema, _) = inspect(&client).await.map_err(CallError::unknown)?;
        // A target created in this transaction gets an ID of this partition, as the router's
        // own creations do.
        let begin = format!(
            "{BEGIN}; SET LOCAL patchdiff.target_partition = {number}; \
             SET LOCAL patchdiff.target_partitions = {count}"
        );
        client.batch_execute(&begin).await.map_err(|e| CallError {
            message: describe(&e),
            cancelled: cancelled(&e),
            unavailable: false,
            login_refused: false,
        })?;
        self.publication = Some((client, schema, (number, count)));
        self.sessions_changed();
        Ok(())
    }

    /// Whether a workspace binding's `nonce` chooses the partition the open publication runs on
    /// (`patchdiff_router.binding_partition`'s rule); always on one database. A shard refuses a
    /// nonce that already binds another of its targets, so that one proof serves one target, but
    /// it sees only its own database: a real import's nonce and proof copied to a target made on
    /// another partition (by the router's internal creation function, which every role may call,
    /// or over a direct connection to that partition) would bind there too (helper-45). Every
    /// binding the front end makes lives on its nonce's partition, so no other is published.
    pub async fn binding_on_its_partition(&self, nonce: &str) -> Result<bool, CallError> {
        let Some((client, _, (number, count))) = &self.publication else {
            return Ok(true);
        };
        client
            .query_one(
                "SELECT (pg_catalog.hashtext($1::text) & 2147483647) % $2::int4 = $3::int4",
                &[&nonce, count, number],
            )
            .await
            .map(|row| row.get(0))
            .map_err(|e| CallError {
                message: describe(&e),
                cancelled: cancelled(&e),
                unavailable: false,
                login_refused: false,
            })
    }

    /// A call inside the open transaction: never reconnects (a new session would run outside it).
    pub async fn call_in_transaction(
        &mut self,
        function: &str,
        args: &str,
    ) -> Result<String, CallError> {
        self.cancellation.refused()?;
        if let Some((client, schema, _)) = &self.publication {
            let sql = format!("SELECT {schema}.{function}($1::json)");
            let row = client
                .query_one(&sql, &[&JsonArg(args)])
                .await
                .map_err(|e| CallError {
                    message: describe(&e),
                    cancelled: cancelled(&e),
                    unavailable: false,
                    login_refused: false,
                })?;
            return answer_of(&row, function);
        }
        if self.broken || self.client.is_closed() {
            return Err(CallError::unknown(
                "the connection was lost inside the transaction",
            ));
        }
        self.call(function, args).await
    }

    /// Commits. No cancel request is sent while the COMMIT runs: a publication's COMMIT comes
    /// after its file is installed, and the database must then record it.
    pub async fn commit(&mut self) -> Result<(), CallError> {
        self.cancellation.set_tokens(Vec::new());
        let done = if let Some((client, _, _)) = self.publication.take() {
            client.batch_execute("COMMIT").await.map_err(|e| CallError {
                message: describe(&e),
                cancelled: cancelled(&e),
                unavailable: false,
                login_refused: false,
            })
        } else {
            let done = self.client.batch_execute("COMMIT").await;
            done.map_err(|e| self.failed(&e))
        };
        self.sessions_changed();
        done
    }

    /// Rolls back; a lost connection rolls back by itself, so its error is only logged. No
    /// cancel request is sent while it runs: a ROLLBACK cancelled would leave the session in a
    /// failed transaction for the next call.
    pub async fn rollback(&mut self) {
        self.cancellation.set_tokens(Vec::new());
        if let Some((client, _, _)) = self.publication.take() {
            if let Err(e) = client.batch_execute("ROLLBACK").await {
                tracing::warn!("rollback on the partition: {}", describe(&e));
            }
        } else if let Err(e) = self.client.batch_execute("ROLLBACK").await {
            let e = self.failed(&e);
            tracing::warn!("rollback: {}", e.message);
        }
        self.sessions_changed();
    }
}

/// The connection of a router's partition for this front end: the partition's hosts, ports and
/// database (its SQL/MED option), with this front end's user, password, application name and
/// connect timeout (PL/Proxy's public user mapping connects as the calling user too).
fn partition_config(own: &str, partition: &str) -> Result<tokio_postgres::Config, String> {
    let own: tokio_postgres::Config = own
        .parse()
        .map_err(|e| format!("PATCHDIFF_DATABASE_URL is not a connection string: {e}"))?;
    let mut config: tokio_postgres::Config = partition
        .parse()
        .map_err(|e| format!("the router's partition connection string is invalid: {e}"))?;
    if let Some(user) = own.get_user() {
        config.user(user);
    }
    if let Some(password) = own.get_password() {
        config.password(password);
    }
    // A partition that does not answer is unavailable, not a hung publication.
    config.connect_timeout(
        own.get_connect_timeout()
            .copied()
            .unwrap_or(std::time::Duration::from_secs(10)),
    );
    config.application_name(own.get_application_name().unwrap_or("patchdiff-mcp"));
    Ok(config)
}

impl Db {
    fn failed(&mut self, e: &tokio_postgres::Error) -> CallError {
        self.broken |= ends_session(e);
        CallError {
            message: describe(e),
            cancelled: cancelled(e),
            unavailable: unavailable(e),
            login_refused: login_refused(e),
        }
    }
}

/// SQLSTATE 57014 (query_canceled) as an ERROR: the statement was cancelled and its transaction
/// rolled back, the session lives on. PostgreSQL gives timeouts and cancel requests the same
/// code; only the message ("canceling statement due to statement timeout") tells them apart.
fn cancelled(e: &tokio_postgres::Error) -> Option<Cancelled> {
    let db = e.as_db_error()?;
    if db.code().code() != "57014" || db.severity() != "ERROR" {
        return None;
    }
    Some(if db.message().contains("statement timeout") {
        Cancelled::StatementTimeout
    } else {
        Cancelled::QueryCanceled
    })
}

/// The ERROR a sharded deployment's router raises when it cannot reach a target's partition
/// (docs/scale-out.md "When a shard is down"): SQLSTATE 08001, its message naming the partition.
/// The router's own session is fine.
fn unavailable(e: &tokio_postgres::Error) -> bool {
    e.as_db_error().is_some_and(|db| {
        db.code().code() == "08001"
            && db.severity() == "ERROR"
            && db.message().starts_with("patchdiff: partition ")
    })
}

/// The ERROR a sharded deployment's router raises when a partition's shard refused the calling
/// role (docs/scale-out.md "Roles"): SQLSTATE 28000, its message naming the role and partition.
fn login_refused(e: &tokio_postgres::Error) -> bool {
    e.as_db_error().is_some_and(|db| {
        db.code().code() == "28000"
            && db.severity() == "ERROR"
            && db.message().starts_with("patchdiff: role ")
    })
}

/// Whether an error leaves the session unusable: not a server error at all (I/O, protocol),
/// a FATAL or PANIC, or SQLSTATE class 08 (connection exception) or 57 (operator
/// intervention that ends sessions, 57P01-57P05: pg_terminate_backend, shutdown, crash); not
/// a router's [`unavailable`] partition.
fn ends_session(e: &tokio_postgres::Error) -> bool {
    if unavailable(e) {
        return false;
    }
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

/// An SQL identifier, double-quoted.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `SET name = 'value'; ...` for the settings, in order.
fn session_sql<V: AsRef<str>>(settings: &[(&str, V)]) -> String {
    settings
        .iter()
        .map(|(name, value)| format!("SET {name} = '{}'", value.as_ref().replace('\'', "''")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// How long [`Db::assume_role`] trusts a connection's role before setting it again: the most a
/// membership revoked from the login role (or a role dropped) goes on serving its token.
pub const ROLE_RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// Why [`Db::assume_role`] failed.
#[derive(Debug)]
pub enum RoleError {
    /// The database refused the role itself: it does not exist, or the login role may not
    /// become it. Permanent until the DBA or the token file changes.
    Refused(String),
    /// The database could not be reached, or failed otherwise: worth a retry.
    Unreachable(String),
}

pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {} ({})", db.severity(), db.message(), db.code().code()),
        None => e.to_string(),
    }
}

/// Creates the `patchdiff` database and the extension in a fresh embedded cluster, and updates
/// the extension of an existing one.
async fn prepare_embedded(conninfo: &str, data_dir: &std::path::Path) -> Result<(), String> {
    let admin = conninfo.replace(
        &format!("dbname={}", crate::embedded::DATABASE),
        "dbname=postgres",
    );
    let client = open(&admin).await?;
    // One statement each: ALTER SYSTEM runs outside any transaction block.
    for setting in crate::embedded::closed_settings(data_dir)? {
        client
            .batch_execute(&setting)
            .await
            .map_err(|e| format!("cannot configure the embedded cluster: {}", describe(&e)))?;
    }
    let exists = client
        .query_opt(
            "SELECT 1 FROM pg_catalog.pg_database \
              WHERE datname OPERATOR(pg_catalog.=) $1::pg_catalog.text::pg_catalog.name",
            &[&crate::embedded::DATABASE],
        )
        .await
        .map_err(|e| e.to_string())?
        .is_some();
    if !exists {
        client
            .batch_execute(&format!(
                "CREATE DATABASE {} ENCODING 'UTF8' TEMPLATE template0",
                crate::embedded::DATABASE
            ))
            .await
            .map_err(|e| format!("cannot create the patchdiff database: {}", describe(&e)))?;
    }
    let client = open(conninfo).await?;
    client
        // Named: the session's search_path (pinned) would put it in pg_catalog.
        .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_patchdiff SCHEMA public")
        .await
        .map_err(|e| format!("cannot create the pg_patchdiff extension: {}", describe(&e)))?;
    // The server made this database and is its one user, so it also brings the extension up to
    // the installed library's version, as an administrator would with the advice Db::refusal
    // gives for any other database (never from before 0.1.0, which has no upgrade path).
    let (_, functions) = inspect(&client).await?;
    if versions(&client, &functions).await?.outdated() {
        client
            .batch_execute("ALTER EXTENSION pg_patchdiff UPDATE")
            .await
            .map_err(|e| format!("cannot update the pg_patchdiff extension: {}", describe(&e)))?;
    }
    // A database made by an earlier build of this same version may still hold SECURITY DEFINER
    // API functions, which the library refuses to run (docs/security.md, "Who a call acts for")
    // and no update touches; the server's own database is brought in line here too.
    client
        .batch_execute(INVOKER_FUNCTIONS)
        .await
        .map_err(|e| format!("cannot update the pg_patchdiff functions: {}", describe(&e)))?;
    // Nor does an update give such a database's functions their generic plans (a memory bound
    // of every call on a large target: docs/reliability.md, "Resource bounds").
    client
        .batch_execute(GENERIC_PLANS)
        .await
        .map_err(|e| format!("cannot update the pg_patchdiff functions: {}", describe(&e)))?;
    Ok(())
}

/// Makes every SECURITY DEFINER function of pg_patchdiff SECURITY INVOKER (as the 0.1.0 to 0.2.0
/// upgrade script does).
const INVOKER_FUNCTIONS: &str = "DO $invoker$ DECLARE f regprocedure; BEGIN \
    FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p \
      JOIN pg_catalog.pg_depend d ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass \
           AND d.objid = p.oid AND d.deptype = 'e' \
      JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid \
     WHERE e.extname = 'pg_patchdiff' AND p.prosecdef \
    LOOP EXECUTE pg_catalog.format('ALTER FUNCTION %s SECURITY INVOKER', f); END LOOP; END $invoker$";

/// Gives every API function of pg_patchdiff that lacks it `plan_cache_mode =
/// force_generic_plan` (as a fresh install and the 0.1.0 to 0.2.0 upgrade script do); a function
/// that has it is not touched, so a start-up rewrites no catalog row once it is in line.
const GENERIC_PLANS: &str = "DO $generic$ DECLARE f regprocedure; BEGIN \
    FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p \
      JOIN pg_catalog.pg_depend d ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass \
           AND d.objid = p.oid AND d.deptype = 'e' \
      JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid \
      JOIN pg_catalog.pg_language l ON l.oid = p.prolang \
     WHERE e.extname = 'pg_patchdiff' AND l.lanname = 'c' \
       AND p.prorettype OPERATOR(pg_catalog.<>) 'pg_catalog.trigger'::pg_catalog.regtype \
       AND NOT COALESCE('plan_cache_mode=force_generic_plan' = ANY (p.proconfig), false) \
    LOOP EXECUTE pg_catalog.format('ALTER FUNCTION %s SET plan_cache_mode = force_generic_plan', f); \
    END LOOP; END $generic$";

/// The extension's schema, quoted here (its name is pasted into every call's statement), and
/// the names of its functions.
async fn inspect(client: &Client) -> Result<(String, BTreeSet<String>), String> {
    let row = client
        .query_opt(
            "SELECT n.nspname::pg_catalog.text FROM pg_catalog.pg_extension e \
             JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace \
             WHERE e.extname OPERATOR(pg_catalog.=) 'pg_patchdiff'::pg_catalog.name",
            &[],
        )
        .await
        .map_err(|e| describe(&e))?
        .ok_or("the database has no pg_patchdiff extension: run CREATE EXTENSION pg_patchdiff in it (as a superuser)")?;
    let schema = quote_ident(row.get::<_, &str>(0));
    let rows = client
        .query(
            "SELECT p.proname::pg_catalog.text FROM pg_catalog.pg_proc p \
             JOIN pg_catalog.pg_depend d \
               ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass \
              AND d.objid OPERATOR(pg_catalog.=) p.oid \
              AND d.deptype OPERATOR(pg_catalog.=) 'e'::pg_catalog.char \
             JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid \
             WHERE e.extname OPERATOR(pg_catalog.=) 'pg_patchdiff'::pg_catalog.name",
            &[],
        )
        .await
        .map_err(|e| describe(&e))?;
    Ok((schema, rows.iter().map(|r| r.get(0)).collect()))
}

/// pg_patchdiff's version in the database (`pg_extension.extversion`) and on its server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versions {
    pub installed: String,
    /// The server's `default_version` (`pg_available_extensions`), the version of the library
    /// every backend loads; `None` when the server has no pg_patchdiff.control.
    pub available: Option<String>,
    /// Whether the server's scripts lead from `installed` to `available`, that is whether
    /// `ALTER EXTENSION pg_patchdiff UPDATE` would update the database.
    pub update_path: bool,
    /// Whether the objects are at least those of release 0.1.0 (sql/releases), the first with an
    /// upgrade path. Storage changed in place under the version number 0.1.0 before that
    /// release, so the version says nothing here: its two last in-place changes do, target
    /// ownership (`patchdiff_list_targets`) and then `patchdiff.target_directory`.
    pub since_0_1_0: bool,
}

/// What to do with pg_patchdiff objects from before release 0.1.0.
const NO_UPGRADE_PATH: &str = "there is no upgrade path from objects older than release 0.1.0 \
     (ALTER EXTENSION pg_patchdiff UPDATE cannot update them): dump the targets, DROP EXTENSION \
     pg_patchdiff CASCADE, CREATE EXTENSION pg_patchdiff, and restore them with an owner \
     (docs/sql-api.md, \"Storage from before 0.1.0\")";

impl Versions {
    /// Whether the database's objects are an older release than the library every backend
    /// loads, with an update path to it: objects older than the library may lack what it uses
    /// (a column, a table), so this build refuses them until they are updated.
    pub fn outdated(&self) -> bool {
        self.since_0_1_0 && self.update_path
    }

    /// What makes the database's pg_patchdiff that of this release. It ends start-up messages,
    /// so it names only what works: ALTER EXTENSION ... UPDATE where the server's scripts lead
    /// from the installed version to the library's, never from before 0.1.0.
    pub fn upgrade_advice(&self) -> String {
        match &self.available {
            _ if !self.since_0_1_0 => NO_UPGRADE_PATH.to_owned(),
            Some(available) if self.update_path => format!(
                "run ALTER EXTENSION pg_patchdiff UPDATE in this database (as a superuser), which \
                 updates it from {} to {available}",
                self.installed
            ),
            _ => "install this release's pg_patchdiff into the database's PostgreSQL (bash \
                  scripts/run.sh does it), then run ALTER EXTENSION pg_patchdiff UPDATE in the \
                  database (as a superuser)"
                .to_owned(),
        }
    }
}

impl Db {
    /// Why this build cannot serve the database's pg_patchdiff objects as they are, if it cannot:
    /// its library would fail every call there with outcome_unknown, so start-up stops instead.
    pub fn refusal(&self) -> Option<String> {
        if !self.functions.contains("patchdiff_list_targets") {
            // Targets got owners (issue 15) in storage that changed in place under 0.1.0.
            return Some(format!(
                "the database's pg_patchdiff objects predate target ownership (it has no \
                 patchdiff_list_targets), and this build cannot serve them: {NO_UPGRADE_PATH}"
            ));
        }
        if !self.versions.since_0_1_0 {
            return Some(format!(
                "the database's pg_patchdiff objects predate release 0.1.0 (they have no \
                 patchdiff.target_directory), and this build cannot serve them: {NO_UPGRADE_PATH}"
            ));
        }
        if self.versions.outdated() {
            return Some(format!(
                "the database's pg_patchdiff is version {}, older than the pg_patchdiff library of \
                 its PostgreSQL ({}), and this build serves it only once it is updated: {}",
                self.versions.installed,
                self.versions.available.as_deref().unwrap_or_default(),
                self.versions.upgrade_advice()
            ));
        }
        None
    }
}

/// A sharded deployment's router (docs/scale-out.md): no pg_patchdiff of its own, but the
/// `patchdiff_router` schema, whose functions of the API call the shards. Its facts are those of
/// the shards' pg_patchdiff (`patchdiff_router.shard_facts`, from partition 0), and it serves the
/// functions that both it and the shards have. `None` for any other database.
async fn router_facts(
    client: &Client,
) -> Result<Option<(String, BTreeSet<String>, Versions)>, String> {
    let is_router = client
        .query_one(
            "SELECT pg_catalog.to_regprocedure('patchdiff_router.shard_facts()'::pg_catalog.text) \
               IS NOT NULL \
             AND NOT EXISTS (SELECT FROM pg_catalog.pg_extension \
                              WHERE extname OPERATOR(pg_catalog.=) 'pg_patchdiff'::pg_catalog.name)",
            &[],
        )
        .await
        .map_err(|e| describe(&e))?
        .get::<_, bool>(0);
    if !is_router {
        return Ok(None);
    }
    // What start-up calls, and every routed call runs, must be a superuser's, as
    // sql/router/patchdiff_router.sql makes them: a database another role owns, or a schema it
    // made first, would otherwise run its code as this front end's login role (helper-51).
    let foreign: Option<String> = client
        .query_one(
            "SELECT pg_catalog.string_agg(o.what, '; ') FROM ( \
               SELECT 'schema patchdiff_router'::pg_catalog.text AS what \
                 FROM pg_catalog.pg_namespace n JOIN pg_catalog.pg_roles r \
                   ON r.oid OPERATOR(pg_catalog.=) n.nspowner \
                WHERE n.nspname OPERATOR(pg_catalog.=) 'patchdiff_router'::pg_catalog.name \
                  AND NOT r.rolsuper \
               UNION ALL \
               SELECT 'foreign server patchdiff'::pg_catalog.text \
                 FROM pg_catalog.pg_foreign_server f JOIN pg_catalog.pg_roles r \
                   ON r.oid OPERATOR(pg_catalog.=) f.srvowner \
                WHERE f.srvname OPERATOR(pg_catalog.=) 'patchdiff'::pg_catalog.name \
                  AND NOT r.rolsuper \
               UNION ALL \
               SELECT 'function ' OPERATOR(pg_catalog.||) p.oid::pg_catalog.regprocedure::pg_catalog.text \
                 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_roles r \
                   ON r.oid OPERATOR(pg_catalog.=) p.proowner \
                WHERE p.pronamespace OPERATOR(pg_catalog.=) \
                      'patchdiff_router'::pg_catalog.regnamespace \
                  AND NOT r.rolsuper) o",
            &[],
        )
        .await
        .map_err(|e| describe(&e))?
        .get(0);
    if let Some(foreign) = foreign {
        return Err(format!(
            "the database has a pg_patchdiff router's objects, but these are owned by a role that \
             is not a superuser: {foreign}; this front end calls none of them. Drop them, and \
             install the router as a superuser (sql/router/patchdiff_router.sql, docs/scale-out.md)"
        ));
    }
    let facts: serde_json::Value = client
        .query_one("SELECT patchdiff_router.shard_facts()::text", &[])
        .await
        .map_err(|e| {
            format!(
                "the router cannot read its shards' pg_patchdiff: {}",
                describe(&e)
            )
        })?
        .get::<_, Option<String>>(0)
        .and_then(|t| serde_json::from_str(&t).ok())
        .ok_or("the router's partition 0 has no pg_patchdiff extension")?;
    // Only the router's own functions (a superuser's): a function of one of these names that
    // another role made is never taken for the router's. (An overload another role adds to a
    // name does not remove the name: the front end's typed call still reaches the router's
    // function, unless the overload makes it ambiguous, which fails that call with 42725 and
    // is the DBA's to drop: docs/security.md. Removing the name instead let any such overload
    // take a tool away, or stop start-up: helper-53.)
    let routed: BTreeSet<String> = client
        .query(
            "SELECT p.proname::pg_catalog.text FROM pg_catalog.pg_proc p \
               JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) p.proowner \
             WHERE p.pronamespace OPERATOR(pg_catalog.=) 'public'::pg_catalog.regnamespace \
               AND pg_catalog.starts_with(p.proname::pg_catalog.text, 'patchdiff_'::pg_catalog.text) \
               AND r.rolsuper",
            &[],
        )
        .await
        .map_err(|e| describe(&e))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let functions: BTreeSet<String> = facts["functions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str())
        .filter(|f| routed.contains(*f))
        .map(str::to_owned)
        .collect();
    let text = |k: &str| facts[k].as_str().map(str::to_owned);
    let versions = Versions {
        installed: text("installed").unwrap_or_default(),
        available: text("available"),
        update_path: facts["update_path"] == true,
        since_0_1_0: facts["since_0_1_0"] == true && functions.contains("patchdiff_list_targets"),
    };
    Ok(Some(("public".to_owned(), functions, versions)))
}

async fn versions(client: &Client, functions: &BTreeSet<String>) -> Result<Versions, String> {
    let row = client
        .query_one(
            "SELECT e.extversion, a.default_version, EXISTS (SELECT FROM pg_catalog.pg_depend d \
             JOIN pg_catalog.pg_class c \
               ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass \
              AND d.objid OPERATOR(pg_catalog.=) c.oid \
             JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
             WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass \
               AND d.refobjid OPERATOR(pg_catalog.=) e.oid \
               AND d.deptype OPERATOR(pg_catalog.=) 'e'::pg_catalog.char \
               AND n.nspname OPERATOR(pg_catalog.=) 'patchdiff'::pg_catalog.name \
               AND c.relname OPERATOR(pg_catalog.=) 'target_directory'::pg_catalog.name) \
             FROM pg_catalog.pg_extension e LEFT JOIN pg_catalog.pg_available_extensions a \
               ON a.name OPERATOR(pg_catalog.=) e.extname \
             WHERE e.extname OPERATOR(pg_catalog.=) 'pg_patchdiff'::pg_catalog.name",
            &[],
        )
        .await
        .map_err(|e| describe(&e))?;
    let installed: String = row.get(0);
    let available: Option<String> = row.get(1);
    let since_0_1_0 = row.get::<_, bool>(2) && functions.contains("patchdiff_list_targets");
    // pg_extension_update_paths reads the server's scripts, and fails without a control file.
    let update_path = match &available {
        Some(available) if *available != installed => client
            .query_one(
                "SELECT EXISTS (SELECT \
                   FROM pg_catalog.pg_extension_update_paths('pg_patchdiff'::pg_catalog.name) \
                  WHERE source OPERATOR(pg_catalog.=) $1::pg_catalog.text \
                    AND target OPERATOR(pg_catalog.=) $2::pg_catalog.text AND path IS NOT NULL)",
                &[&installed, available],
            )
            .await
            .map_err(|e| describe(&e))?
            .get(0),
        _ => false,
    };
    Ok(Versions {
        installed,
        available,
        update_path,
        since_0_1_0,
    })
}

#[cfg(test)]
mod tests {
    use super::{Cancellation, Versions, partition_config, session_sql};

    /// docs/http.md, cancellation: a call cut by its client's hang-up says so (its refusal and the
    /// log lines of its cancel requests), not `notifications/cancelled`, which only stdio and a
    /// client's own notification send; a call cancelled after it, on the same connection, names
    /// its own cause.
    #[tokio::test]
    async fn a_cancelled_call_names_what_cancelled_it() {
        let c = Cancellation::default();
        assert!(c.refused().is_ok(), "nothing cancelled yet");
        c.cancel(true).await;
        let m = c.refused().unwrap_err().message;
        assert!(m.contains("(the client hung up)"), "{m}");
        c.clear();
        assert!(c.refused().is_ok());
        c.cancel(false).await;
        let m = c.refused().unwrap_err().message;
        assert!(m.contains("(notifications/cancelled)"), "{m}");
    }

    /// docs/scale-out.md: a publication through a router connects to the partition's host, port
    /// and database as this front end's user, with its password and application name, and never
    /// waits on a silent partition without end.
    #[test]
    fn a_partition_is_reached_as_the_front_ends_user() {
        let own = "host=router.example port=6432 dbname=patchdiff user=agent password=s3cret \
                   application_name=my-host";
        let c = partition_config(own, "host=10.0.0.7 port=5433 dbname=patchdiff_p3").unwrap();
        assert_eq!(c.get_dbname(), Some("patchdiff_p3"));
        assert_eq!(c.get_ports(), [5433]);
        assert_eq!(
            format!("{:?}", c.get_hosts()),
            r#"[Tcp("10.0.0.7")]"#,
            "only the partition's host"
        );
        assert_eq!(c.get_user(), Some("agent"));
        assert_eq!(c.get_password(), Some(&b"s3cret"[..]));
        assert_eq!(c.get_application_name(), Some("my-host"));
        assert_eq!(
            c.get_connect_timeout(),
            Some(&std::time::Duration::from_secs(10))
        );
        let c = partition_config(
            "postgresql://agent@router/patchdiff?connect_timeout=3",
            "host=10.0.0.7 dbname=patchdiff_p0",
        )
        .unwrap();
        assert_eq!(c.get_application_name(), Some("patchdiff-mcp"));
        assert_eq!(
            c.get_connect_timeout(),
            Some(&std::time::Duration::from_secs(3))
        );
        assert!(partition_config(own, "host='unterminated").is_err());
    }

    fn versions(installed: &str, available: Option<&str>, update_path: bool) -> Versions {
        Versions {
            installed: installed.to_owned(),
            available: available.map(str::to_owned),
            update_path,
            since_0_1_0: true,
        }
    }

    /// Issue 16 item 5: the advice names ALTER EXTENSION ... UPDATE only where the server's
    /// scripts make it work, and says there is no upgrade path from before release 0.1.0, even
    /// where the version number (0.1.0 too) has one.
    #[test]
    fn upgrade_advice_names_what_works() {
        let older = versions("0.1.0", Some("0.2.0"), true);
        assert!(older.outdated());
        assert!(
            older
                .upgrade_advice()
                .starts_with("run ALTER EXTENSION pg_patchdiff UPDATE in this database"),
            "{}",
            older.upgrade_advice()
        );
        assert!(older.upgrade_advice().ends_with("from 0.1.0 to 0.2.0"));
        let before = Versions {
            since_0_1_0: false,
            ..older
        };
        assert!(!before.outdated());
        let advice = before.upgrade_advice();
        assert!(advice.starts_with("there is no upgrade path"), "{advice}");
        assert!(
            advice.contains("dump the targets, DROP EXTENSION"),
            "{advice}"
        );
        // A library older than the database's objects, or a version no script leads from.
        for v in [
            versions("0.2.0", Some("0.1.0"), false),
            versions("0.2.0", Some("0.2.0"), false),
            versions("0.2.0", None, false),
        ] {
            assert!(!v.outdated(), "{v:?}");
            assert!(
                v.upgrade_advice()
                    .starts_with("install this release's pg_patchdiff"),
                "{v:?}"
            );
        }
    }

    /// docs/structural.md "Strict observation mode": patchdiff-mcp sets the session setting.
    #[test]
    fn session_settings_become_set_statements() {
        assert_eq!(session_sql::<&str>(&[]), "");
        assert_eq!(
            session_sql(&[
                ("statement_timeout", "200ms".to_owned()),
                ("patchdiff.strict_observation_mode", "on".to_owned())
            ]),
            "SET statement_timeout = '200ms'; SET patchdiff.strict_observation_mode = 'on'"
        );
        assert_eq!(
            session_sql(&[("patchdiff.strict_observation_mode", "on")]),
            "SET patchdiff.strict_observation_mode = 'on'"
        );
    }
}
