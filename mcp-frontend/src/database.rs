//! The one database connection: one SQL function call per tool call.

use crate::config::Database;
use std::collections::{BTreeSet, HashMap};
use tokio_postgres::{Client, NoTls, Statement};

pub struct Db {
    conninfo: String,
    client: Client,
    /// The extension's schema, quoted, so calls do not depend on the role's search_path.
    schema: String,
    /// pg_patchdiff functions present in the database: tools are advertised only when their
    /// function exists, so a front end newer than the installed extension never lists a tool
    /// it cannot serve.
    pub functions: BTreeSet<String>,
    statements: HashMap<String, Statement>,
    /// Set when a call failed in a way that ends the session (a FATAL from the server, a lost
    /// socket): the next call opens a new connection even if the old one has not been seen to
    /// close yet, instead of failing a second time on it.
    broken: bool,
    /// `SET ...` statements every session carries (strict observation mode), run right after
    /// connecting and after every reconnect, before any call.
    session: String,
}

/// The failure of a call. Its outcome is unknown unless `cancelled` says PostgreSQL cancelled
/// the statement, which rolled it back.
#[derive(Debug)]
pub struct CallError {
    pub message: String,
    pub cancelled: Option<Cancelled>,
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
        }
    }
}

async fn open(conninfo: &str) -> Result<Client, String> {
    let mut config: tokio_postgres::Config = conninfo
        .parse()
        .map_err(|e| format!("PATCHDIFF_DATABASE_URL is not a connection string: {e}"))?;
    if config.get_application_name().is_none() {
        // Names this server's sessions in pg_stat_activity.
        config.application_name("patchdiff-mcp");
    }
    let (client, connection) = config
        .connect(NoTls)
        .await
        .map_err(|e| format!("cannot connect to the database: {e}"))?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!("database connection ended: {e}");
        }
    });
    Ok(client)
}

impl Db {
    pub async fn connect(database: &Database) -> Result<Db, String> {
        let conninfo = match database {
            Database::Url(url) => url.clone(),
            Database::Embedded { data_dir } => {
                let dir = data_dir.clone();
                let conninfo =
                    tokio::task::spawn_blocking(move || crate::embedded::ensure_cluster(&dir))
                        .await
                        .map_err(|e| e.to_string())??;
                prepare_embedded(&conninfo).await?;
                conninfo
            }
        };
        let client = open(&conninfo).await?;
        let (schema, functions) = inspect(&client).await?;
        Ok(Db {
            conninfo,
            client,
            schema,
            functions,
            statements: HashMap::new(),
            broken: false,
            session: String::new(),
        })
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
    async fn reconnect_if_lost(&mut self) -> Result<(), CallError> {
        if !(self.broken || self.client.is_closed()) {
            return Ok(());
        }
        let client = open(&self.conninfo).await.map_err(CallError::unknown)?;
        if !self.session.is_empty() {
            client.batch_execute(&self.session).await.map_err(|e| {
                CallError::unknown(format!(
                    "the session settings failed on reconnection: {}",
                    describe(&e)
                ))
            })?;
        }
        self.client = client;
        self.statements.clear();
        self.broken = false;
        Ok(())
    }

    /// Calls `function(args::json)` and returns its JSON text. Reconnects first when the
    /// previous connection was lost; an error during the call is reported, never retried.
    pub async fn call(&mut self, function: &str, args: &str) -> Result<String, CallError> {
        self.reconnect_if_lost().await?;
        let statement = match self.statements.get(function) {
            Some(s) => s.clone(),
            None => {
                let sql = format!("SELECT {}.{function}($1::text::json)::text", self.schema);
                let s = self
                    .client
                    .prepare(&sql)
                    .await
                    .map_err(|e| self.failed(&e))?;
                self.statements.insert(function.to_owned(), s.clone());
                s
            }
        };
        let row = self
            .client
            .query_one(&statement, &[&args])
            .await
            .map_err(|e| self.failed(&e))?;
        row.try_get::<_, Option<String>>(0)
            .map_err(|e| CallError::unknown(e.to_string()))?
            .ok_or_else(|| CallError::unknown(format!("{function} returned NULL")))
    }
}

/// The transaction of a publishing SAVE, which the front end owns: BEGIN and the session
/// setting through which the extension accepts `sync_workspace: true`, one SAVE call, then
/// COMMIT or ROLLBACK once the file is installed or refused.
impl Db {
    pub async fn begin_publication(&mut self) -> Result<(), CallError> {
        self.reconnect_if_lost().await?;
        self.client
            .batch_execute("BEGIN; SET LOCAL patchdiff.workspace_owned_transaction = on")
            .await
            .map_err(|e| self.failed(&e))
    }

    /// A call inside the open transaction: never reconnects (a new session would run outside it).
    pub async fn call_in_transaction(
        &mut self,
        function: &str,
        args: &str,
    ) -> Result<String, CallError> {
        if self.broken || self.client.is_closed() {
            return Err(CallError::unknown(
                "the connection was lost inside the transaction",
            ));
        }
        self.call(function, args).await
    }

    pub async fn commit(&mut self) -> Result<(), CallError> {
        self.client
            .batch_execute("COMMIT")
            .await
            .map_err(|e| self.failed(&e))
    }

    /// Rolls back; a lost connection rolls back by itself, so its error is only logged.
    pub async fn rollback(&mut self) {
        if let Err(e) = self.client.batch_execute("ROLLBACK").await {
            let e = self.failed(&e);
            tracing::warn!("rollback: {}", e.message);
        }
    }
}

impl Db {
    fn failed(&mut self, e: &tokio_postgres::Error) -> CallError {
        self.broken |= ends_session(e);
        CallError {
            message: describe(e),
            cancelled: cancelled(e),
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

/// Whether an error leaves the session unusable: not a server error at all (I/O, protocol),
/// a FATAL or PANIC, or SQLSTATE class 08 (connection exception) or 57 (operator
/// intervention that ends sessions, 57P01-57P05: pg_terminate_backend, shutdown, crash).
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

/// `SET name = 'value'; ...` for the settings, in order.
fn session_sql<V: AsRef<str>>(settings: &[(&str, V)]) -> String {
    settings
        .iter()
        .map(|(name, value)| format!("SET {name} = '{}'", value.as_ref().replace('\'', "''")))
        .collect::<Vec<_>>()
        .join("; ")
}

fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {} ({})", db.severity(), db.message(), db.code().code()),
        None => e.to_string(),
    }
}

/// Creates the `patchdiff` database and the extension in a fresh embedded cluster.
async fn prepare_embedded(conninfo: &str) -> Result<(), String> {
    let admin = conninfo.replace(
        &format!("dbname={}", crate::embedded::DATABASE),
        "dbname=postgres",
    );
    let client = open(&admin).await?;
    let exists = client
        .query_opt(
            "SELECT 1 FROM pg_database WHERE datname = $1",
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
        .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_patchdiff")
        .await
        .map_err(|e| format!("cannot create the pg_patchdiff extension: {}", describe(&e)))
}

async fn inspect(client: &Client) -> Result<(String, BTreeSet<String>), String> {
    let row = client
        .query_opt("SELECT quote_ident(n.nspname) FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_patchdiff'", &[])
        .await
        .map_err(|e| describe(&e))?
        .ok_or("the database has no pg_patchdiff extension: run CREATE EXTENSION pg_patchdiff in it (as a superuser)")?;
    let schema: String = row.get(0);
    let rows = client
        .query(
            "SELECT p.proname::text FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid \
             AND d.deptype = 'e' JOIN pg_extension e ON e.oid = d.refobjid WHERE e.extname = 'pg_patchdiff'",
            &[],
        )
        .await
        .map_err(|e| describe(&e))?;
    Ok((schema, rows.iter().map(|r| r.get(0)).collect()))
}

#[cfg(test)]
mod tests {
    use super::session_sql;

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
