//! Roles and databases of their own for the privilege suites (tests/tests/privileges.rs,
//! tests/tests/tenancy.rs): the superuser connection string, the least-privilege recipe of
//! docs/reliability.md, and connections as the roles it makes.

use std::str::FromStr;
use tokio_postgres::{Client, Config, NoTls};

pub fn dsn() -> String {
    std::env::var("PATCHDIFF_TEST_DSN")
        .expect("PATCHDIFF_TEST_DSN must be set to a superuser connection string")
}

/// The recipe of docs/reliability.md, "Least privilege", for database `db`, role `role`.
pub fn recipe(db: &str, role: &str, password: &str) -> String {
    format!(
        r#"
CREATE ROLE {role} LOGIN PASSWORD '{password}'
    NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION NOBYPASSRLS CONNECTION LIMIT 32;
GRANT CONNECT ON DATABASE {db} TO {role};
DO $recipe$
DECLARE
    f regprocedure;
    api_schema name;
BEGIN
    SELECT n.nspname INTO api_schema FROM pg_catalog.pg_extension e
      JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_patchdiff';
    EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA %I TO {role}', api_schema);
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
          JOIN pg_catalog.pg_depend d ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
           AND d.objid = p.oid AND d.deptype = 'e'
          JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid
         WHERE e.extname = 'pg_patchdiff' AND p.proname LIKE 'patchdiff\_%'
    LOOP
        EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO {role}', f);
    END LOOP;
END
$recipe$;
"#
    )
}

pub fn config_for(dbname: &str, user: Option<(&str, &str)>) -> Config {
    let mut c = Config::from_str(&dsn()).expect("PATCHDIFF_TEST_DSN is a connection string");
    c.dbname(dbname);
    if let Some((u, p)) = user {
        c.user(u);
        c.password(p);
    }
    c
}

pub async fn open(config: &Config) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// Names unique to this run, valid unquoted identifiers.
pub fn unique(prefix: &str) -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() % 1_000_000_000_000);
    format!("{prefix}_{}_{n}", std::process::id())
}
