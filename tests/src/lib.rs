//! Shared by the end-to-end tests and the benchmark: a connection to a real PostgreSQL with
//! pg_patchdiff installed, and one call of its JSON API.

use serde_json::Value;
use tokio_postgres::{Client, GenericClient, NoTls};

pub mod bench;
pub mod fuzz;
pub mod golden;
pub mod roles;
pub mod stdio;
pub mod stress;

/// Connects and drives the connection on the current Tokio runtime.
pub async fn connect(dsn: &str) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(dsn, NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("connection error: {e}");
        }
    });
    Ok(client)
}

/// The SQL that calls one API function. Arguments cross as text and are cast to `json` in SQL
/// (not `jsonb`), as the front end sends them; the result comes back as text.
pub fn call_sql(function: &str) -> String {
    // The name is spliced into SQL, so only the API's own names are accepted.
    assert!(
        function.starts_with("patchdiff_")
            && function
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'_'),
        "not a pg_patchdiff API function: {function}"
    );
    format!("SELECT {function}($1::text::json)::text")
}

/// Calls `function(args::json)` on `client` (a connection or an open transaction).
pub async fn call(
    client: &impl GenericClient,
    function: &str,
    args: &Value,
) -> Result<Value, tokio_postgres::Error> {
    let row = client
        .query_one(&call_sql(function), &[&args.to_string()])
        .await?;
    let text: String = row.get(0);
    Ok(serde_json::from_str(&text).expect("pg_patchdiff returned invalid JSON"))
}

/// Initializes a target with `content` and returns its `target_file_id`.
pub async fn initialize_target(
    client: &impl GenericClient,
    filename: &str,
    content: &str,
) -> Result<String, tokio_postgres::Error> {
    let r = call(
        client,
        "patchdiff_initialize_target",
        &serde_json::json!({"filename": filename, "content": content}),
    )
    .await?;
    assert_eq!(r["status"], "ok", "initialize failed: {r}");
    Ok(r["target_file_id"]
        .as_str()
        .expect("target_file_id")
        .to_owned())
}
