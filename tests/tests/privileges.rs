//! Least privilege (issue 9, "Least privilege"), against a real PostgreSQL: the front-end role of
//! docs/reliability.md can EXECUTE the API and nothing else, the API cannot be hijacked through
//! the caller's search_path, and hostile strings in every field are stored and returned byte
//! for byte.
//!
//! The test works in a database of its own (created, given the extension, and dropped again), so
//! that it can apply the whole recipe, `REVOKE EXECUTE ... FROM PUBLIC` included, without
//! touching the database other tests share. That the attempt log and the ledger refuse UPDATE,
//! DELETE and TRUNCATE even for their owner (a superuser, in replica mode too) is proved by
//! `log_and_ledger_refuse_update_delete_truncate_even_for_owner` in sql_concurrency.rs; here the
//! front-end role is shown to have no privilege on them at all.
//!
//! Environment: `PATCHDIFF_TEST_DSN` (required): a superuser connection string; its host, port
//! and credentials are reused for the test database and the roles.

use patchdiff_engine::api::text::{canonicalize, sha256_hex};
use patchdiff_tests::call;
use patchdiff_tests::roles::{config_for, dsn, open, recipe, unique};
use serde_json::{Value, json};
use std::io::Write;
use std::str::FromStr;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Config};

struct Setup {
    db: String,
    role: String,
    password: String,
    bystander: String,
}

/// Creates the database, the extension, the front-end role by the recipe and a bystander role
/// that gets nothing.
async fn set_up(admin: &Client) -> Setup {
    let s = Setup {
        db: unique("patchdiff_priv"),
        role: unique("patchdiff_frontend"),
        password: unique("pw"),
        bystander: unique("patchdiff_bystander"),
    };
    admin
        .batch_execute(&format!(
            "CREATE DATABASE {} ENCODING 'UTF8' TEMPLATE template0",
            s.db
        ))
        .await
        .expect("CREATE DATABASE");
    let su = open(&config_for(&s.db, None))
        .await
        .expect("connecting to the test database");
    su.batch_execute("CREATE EXTENSION pg_patchdiff")
        .await
        .expect("CREATE EXTENSION pg_patchdiff");
    su.batch_execute(&recipe(&s.db, &s.role, &s.password))
        .await
        .expect("the least-privilege recipe");
    su.batch_execute(&format!(
        "CREATE ROLE {b} LOGIN PASSWORD '{p}'; GRANT CONNECT ON DATABASE {db} TO {b};",
        b = s.bystander,
        p = s.password,
        db = s.db
    ))
    .await
    .expect("the bystander role");
    s
}

async fn tear_down(admin: &Client, s: &Setup) {
    let _ = admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", s.db))
        .await;
    for r in [&s.role, &s.bystander] {
        let _ = admin
            .batch_execute(&format!("DROP ROLE IF EXISTS {r}"))
            .await;
    }
}

/// The one test: set up, run every proof, and always clean up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn front_end_role_executes_the_api_and_nothing_else() {
    let admin = open(&Config::from_str(&dsn()).expect("PATCHDIFF_TEST_DSN"))
        .await
        .expect("connecting with PATCHDIFF_TEST_DSN");
    let s = set_up(&admin).await;
    let (db, role, password, bystander) = (
        s.db.clone(),
        s.role.clone(),
        s.password.clone(),
        s.bystander.clone(),
    );
    let proofs = tokio::spawn(async move {
        let su = open(&config_for(&db, None)).await.unwrap();
        let fe = open(&config_for(&db, Some((&role, &password))))
            .await
            .expect("the front-end role connects");
        functions_are_security_invoker_with_a_fixed_search_path(&su).await;
        let functions = role_calls_every_api_function(&su, &fe).await;
        let relations = role_touches_no_table(&su, &fe, &role).await;
        role_creates_nothing(&fe).await;
        let by = open(&config_for(&db, Some((&bystander, &password))))
            .await
            .expect("the bystander connects");
        bystander_cannot_execute(&by).await;
        search_path_cannot_hijack_the_api(&su, &fe).await;
        hostile_strings_round_trip(&su, &fe).await;
        let served = front_end_serves_as_the_role(&db, &role, &password).await;
        let _ = writeln!(
            std::io::stderr(),
            "privileges: {functions} API functions executed by the front-end role; {relations} relations of schema patchdiff refused to it; {} hostile strings round-tripped in every field; {served}",
            HOSTILE.len() + HOSTILE_ASCII.len()
        );
    })
    .await;
    tear_down(&admin, &s).await;
    if let Err(e) = proofs {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// The API functions of the extension, as `regprocedure` text, with their names.
async fn api_functions(c: &Client) -> Vec<(String, String)> {
    c.query(
        "SELECT p.oid::regprocedure::text, p.proname::text FROM pg_catalog.pg_proc p \
         JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e' \
         JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid \
         WHERE e.extname = 'pg_patchdiff' AND p.proname LIKE 'patchdiff\\_%' ORDER BY 2",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// Every API function is SECURITY INVOKER (it acts for the role it is called as and runs its own
/// statements as the extension's owner, docs/security.md, "Who a call acts for") with
/// `search_path = pg_catalog, pg_temp`: nothing the caller puts on its own path can be resolved
/// inside it.
async fn functions_are_security_invoker_with_a_fixed_search_path(su: &Client) {
    let rows = su
        .query(
            "SELECT p.proname::text, p.prosecdef, pg_catalog.array_to_string(p.proconfig, '|') \
             FROM pg_catalog.pg_proc p \
             JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e' \
             JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid \
             WHERE e.extname = 'pg_patchdiff' AND p.proname LIKE 'patchdiff\\_%'",
            &[],
        )
        .await
        .unwrap();
    assert!(rows.len() >= 16, "{} API functions", rows.len());
    for r in rows {
        let (name, definer, config): (String, bool, Option<String>) =
            (r.get(0), r.get(1), r.get(2));
        assert!(!definer, "{name} is SECURITY DEFINER");
        let config = config.unwrap_or_default();
        assert!(
            config
                .split('|')
                .any(|c| c == "search_path=pg_catalog, pg_temp"),
            "{name} does not fix search_path = pg_catalog, pg_temp: {config:?}"
        );
    }
}

fn expect_status(v: &Value, want: &[&str], what: &str) {
    let status = v["status"].as_str().unwrap_or("(page)");
    assert!(want.contains(&status), "{what}: {v}");
}

/// The role calls each function of the API and gets its ordinary answer.
async fn role_calls_every_api_function(su: &Client, fe: &Client) -> usize {
    let init = call(
        fe,
        "patchdiff_initialize_target",
        &json!({"filename": "fe.md", "content": "alpha beta\r\ngamma\r\n"}),
    )
    .await
    .expect("initialize as the front-end role");
    expect_status(&init, &["ok"], "initialize");
    let id = init["target_file_id"].as_str().unwrap().to_owned();
    let t = json!({"target_file_id": id});
    let calls: Vec<(&str, Value, &[&str])> = vec![
        (
            "patchdiff_handle_upload",
            json!({"filename": "up.md", "content": "x", "content_type": "text/plain"}),
            &["ok"],
        ),
        ("patchdiff_get_target", t.clone(), &["ok"]),
        ("patchdiff_read_target", t.clone(), &["ok"]),
        (
            "patchdiff_find_occurrences",
            json!({"target_file_id": id, "text": "beta"}),
            &["ok"],
        ),
        ("patchdiff_read_lines", t.clone(), &["ok"]),
        (
            "patchdiff_export_target",
            json!({"target_file_id": id, "format": "original_eol"}),
            &["ok"],
        ),
        (
            "patchdiff_preview",
            json!({"target_file_id": id, "format": "patchdiff-tx/1", "expected_target_version": 0,
                   "intent": "p", "edits": [{"match": "alpha", "replace": "ALPHA"}]}),
            &["accepted"],
        ),
        (
            "patchdiff_submit_edits",
            json!({"target_file_id": id, "expected_target_version": 0, "intent": "e",
                   "edits": [{"match": "alpha", "replace": "ALPHA"}]}),
            &["accepted"],
        ),
        (
            "patchdiff_submit_operations",
            json!({"target_file_id": id, "expected_target_version": 1, "intent": "o",
                   "operations": [{"op": "span", "start": 0, "end": 0, "expected_text": "", "replace": "> "}]}),
            &["accepted"],
        ),
        (
            "patchdiff_submit_replacement",
            json!({"target_file_id": id, "expected_target_version": 2, "intent": "r", "replacement": "one two\n"}),
            &["accepted"],
        ),
        (
            "patchdiff_save",
            json!({"target_file_id": id, "expected_target_version": 3}),
            &["saved"],
        ),
        ("patchdiff_replay", t.clone(), &["success"]),
        (
            "patchdiff_diff",
            json!({"target_file_id": id, "from_version": 0}),
            &["ok"],
        ),
        (
            "patchdiff_get_pdcp_log",
            json!({"target_file_id": id, "include_content": true}),
            &["(page)"],
        ),
        (
            "patchdiff_get_manifest_ledger",
            json!({"target_file_id": id, "include_previous_cycles": true}),
            &["(page)"],
        ),
    ];
    let mut called: Vec<&str> = vec!["patchdiff_initialize_target"];
    for (f, args, want) in calls {
        let v = call(fe, f, &args)
            .await
            .unwrap_or_else(|e| panic!("{f} as the front-end role: {e}"));
        expect_status(&v, want, f);
        called.push(f);
    }
    let typed = fe
        .query_one(
            "SELECT patchdiff_submit(target_file_id => $1::text::uuid, intent => 'typed', \
             edits => '[{\"match\": \"two\", \"replace\": \"2\"}]', expected_target_version => 3)::text",
            &[&id],
        )
        .await
        .expect("patchdiff_submit as the front-end role");
    let v: Value = serde_json::from_str(&typed.get::<_, String>(0)).unwrap();
    expect_status(&v, &["accepted"], "patchdiff_submit");
    called.push("patchdiff_submit");
    // A function added after this test was written: it must at least execute and answer JSON.
    for (signature, name) in api_functions(su).await {
        if called.contains(&name.as_str()) {
            continue;
        }
        let v = call(fe, &name, &t)
            .await
            .unwrap_or_else(|e| panic!("{signature} as the front-end role: {e}"));
        assert!(v.is_object(), "{signature}: {v}");
        called.push("(new)");
    }
    called.len()
}

fn denied(r: Result<impl Sized, tokio_postgres::Error>, what: &str) {
    match r {
        Ok(_) => panic!("{what}: allowed"),
        Err(e) => assert_eq!(
            e.code(),
            Some(&SqlState::INSUFFICIENT_PRIVILEGE),
            "{what}: {e:?}"
        ),
    }
}

/// Not one table, sequence or view of schema `patchdiff` can be read or changed by the role,
/// directly, and the catalog agrees privilege by privilege.
async fn role_touches_no_table(su: &Client, fe: &Client, role: &str) -> usize {
    let relations = su
        .query(
            "SELECT c.relname::text, c.relkind::text, \
                    (SELECT a.attname::text FROM pg_catalog.pg_attribute a \
                      WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum LIMIT 1) \
             FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = 'patchdiff' AND c.relkind IN ('r', 'p', 'S', 'v', 'm') ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    let tables: Vec<String> = relations
        .iter()
        .filter(|r| r.get::<_, String>(1) == "r")
        .map(|r| r.get(0))
        .collect();
    for t in [
        "targets",
        "editing_cycles",
        "snapshots",
        "pdcp_logs",
        "manifest_ledger",
    ] {
        assert!(
            tables.iter().any(|x| x == t),
            "patchdiff.{t} is missing: {tables:?}"
        );
    }
    for r in &relations {
        let (name, kind, first): (String, String, Option<String>) = (r.get(0), r.get(1), r.get(2));
        let q = format!("patchdiff.{name}");
        if kind == "S" {
            denied(
                fe.query_one(&format!("SELECT pg_catalog.nextval('{q}')"), &[])
                    .await,
                &format!("nextval({q})"),
            );
            denied(
                fe.query(&format!("SELECT * FROM {q}"), &[]).await,
                &format!("SELECT {q}"),
            );
            continue;
        }
        let col = first.unwrap_or_default();
        denied(
            fe.query(&format!("SELECT * FROM {q} LIMIT 1"), &[]).await,
            &format!("SELECT {q}"),
        );
        denied(
            fe.execute(&format!("INSERT INTO {q} DEFAULT VALUES"), &[])
                .await,
            &format!("INSERT {q}"),
        );
        denied(
            fe.execute(&format!("UPDATE {q} SET {col} = {col}"), &[])
                .await,
            &format!("UPDATE {q}"),
        );
        denied(
            fe.execute(&format!("DELETE FROM {q}"), &[]).await,
            &format!("DELETE {q}"),
        );
        denied(
            fe.execute(&format!("TRUNCATE {q}"), &[]).await,
            &format!("TRUNCATE {q}"),
        );
        denied(
            fe.execute(&format!("COPY {q} TO STDOUT"), &[])
                .await
                .map(|_| ()),
            &format!("COPY {q}"),
        );
        // Privilege by privilege, as the catalog sees it.
        let granted: i64 = su
            .query_one(
                "SELECT count(*) FROM pg_catalog.unnest(ARRAY['SELECT','INSERT','UPDATE','DELETE','TRUNCATE','REFERENCES','TRIGGER']) p \
                 WHERE pg_catalog.has_table_privilege($1, $2::text::regclass, p)",
                &[&role, &q],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(granted, 0, "{role} holds a privilege on {q}");
    }
    let schema: bool = su
        .query_one(
            "SELECT pg_catalog.has_schema_privilege($1, 'patchdiff', 'USAGE') \
                 OR pg_catalog.has_schema_privilege($1, 'patchdiff', 'CREATE')",
            &[&role],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!schema, "{role} has USAGE or CREATE on schema patchdiff");
    // The trigger function behind append-only is not the role's either.
    denied(
        fe.execute("SELECT patchdiff.refuse_mutation()", &[]).await,
        "calling patchdiff.refuse_mutation()",
    );
    relations.len()
}

/// The role creates nothing in schema patchdiff, nor in the API's schema.
async fn role_creates_nothing(fe: &Client) {
    for sql in [
        "CREATE TABLE patchdiff.intruder (a int)",
        "CREATE VIEW patchdiff.intruder AS SELECT 1",
        "CREATE FUNCTION patchdiff.intruder() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        "CREATE SEQUENCE patchdiff.intruder",
        "CREATE TABLE public.intruder (a int)",
        "CREATE FUNCTION public.sha256(bytea) RETURNS bytea LANGUAGE sql AS 'SELECT $1'",
        "ALTER TABLE patchdiff.pdcp_logs DISABLE TRIGGER append_only",
        "CREATE TRIGGER intruder BEFORE INSERT ON patchdiff.pdcp_logs FOR EACH ROW EXECUTE FUNCTION patchdiff.refuse_mutation()",
        "GRANT SELECT ON patchdiff.targets TO PUBLIC",
        "COMMENT ON TABLE patchdiff.targets IS 'x'",
    ] {
        denied(fe.batch_execute(sql).await, sql);
    }
}

/// After `REVOKE EXECUTE ... FROM PUBLIC`, a role the recipe did not name cannot call the API.
async fn bystander_cannot_execute(by: &Client) {
    denied(
        by.query_one(
            "SELECT patchdiff_get_target('{\"target_file_id\":\"99999999-9999-4999-8999-999999999999\"}')",
            &[],
        )
        .await,
        "patchdiff_get_target as a role without EXECUTE",
    );
}

/// Shadows of what the API's SQL uses, in `public` (by the superuser, as any role with CREATE
/// there could) and in the role's own `pg_temp`, first on its search_path: functions, operators
/// that make every comparison true, and tables named like the storage. The API answers exactly
/// as without them and writes only its own tables.
async fn search_path_cannot_hijack_the_api(su: &Client, fe: &Client) {
    // Two targets, so that a hijacked comparison would mix them up.
    let other = call(
        fe,
        "patchdiff_initialize_target",
        &json!({"filename": "b.md", "content": "bravo\n"}),
    )
    .await
    .unwrap();
    let b = other["target_file_id"].as_str().unwrap().to_owned();
    su.batch_execute(
        r#"
CREATE FUNCTION public.sha256(bytea) RETURNS bytea LANGUAGE sql AS $$SELECT '\x00'::bytea$$;
CREATE FUNCTION public.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS $$SELECT '2000-01-01'::timestamptz$$;
CREATE FUNCTION public.now() RETURNS timestamptz LANGUAGE sql AS $$SELECT '2000-01-01'::timestamptz$$;
CREATE FUNCTION public.octet_length(text) RETURNS integer LANGUAGE sql AS $$SELECT -1$$;
CREATE FUNCTION public."left"(text, integer) RETURNS text LANGUAGE sql AS $$SELECT 'hijacked'::text$$;
CREATE FUNCTION public.gen_random_uuid() RETURNS uuid LANGUAGE sql AS $$SELECT '00000000-0000-0000-0000-000000000000'::uuid$$;
CREATE FUNCTION public.always(uuid, uuid) RETURNS boolean LANGUAGE sql AS $$SELECT true$$;
CREATE OPERATOR public.= (LEFTARG = uuid, RIGHTARG = uuid, FUNCTION = public.always);
CREATE FUNCTION public.always(bigint, bigint) RETURNS boolean LANGUAGE sql AS $$SELECT true$$;
CREATE OPERATOR public.< (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = public.always);
CREATE OPERATOR public.> (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = public.always);
CREATE OPERATOR public.<= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = public.always);
CREATE TABLE public.targets (target_file_id uuid, current_content text);
CREATE TABLE public.pdcp_logs (pdcp_log_id uuid);
GRANT SELECT, INSERT, UPDATE, DELETE ON public.targets, public.pdcp_logs TO PUBLIC;
"#,
    )
    .await
    .expect("public shadows");
    fe.batch_execute(
        r#"
SET search_path = pg_temp, public, pg_catalog;
CREATE TEMP TABLE targets (target_file_id uuid, current_content text, version bigint);
CREATE TEMP TABLE pdcp_logs (pdcp_log_id uuid);
CREATE TEMP TABLE manifest_ledger (x int);
CREATE TEMP TABLE snapshots (x int);
CREATE TEMP TABLE editing_cycles (x int);
CREATE FUNCTION pg_temp.sha256(bytea) RETURNS bytea LANGUAGE sql AS $$SELECT '\x00'::bytea$$;
CREATE FUNCTION pg_temp.always(text, text) RETURNS boolean LANGUAGE sql AS $$SELECT true$$;
CREATE OPERATOR pg_temp.= (LEFTARG = text, RIGHTARG = text, FUNCTION = pg_temp.always);
CREATE FUNCTION pg_temp.always(uuid, uuid) RETURNS boolean LANGUAGE sql AS $$SELECT true$$;
CREATE OPERATOR pg_temp.= (LEFTARG = uuid, RIGHTARG = uuid, FUNCTION = pg_temp.always);
"#,
    )
    .await
    .expect("pg_temp shadows");
    // The shadows are live for the caller's own SQL ...
    let shadowed: String = fe
        .query_one("SELECT \"left\"('abc', 1)", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        shadowed, "hijacked",
        "the caller's search_path is not shadowed"
    );
    // ... and change nothing inside the API.
    let content = "alpha beta alpha\n";
    let init = call(
        fe,
        "patchdiff_initialize_target",
        &json!({"filename": "a.md", "content": content}),
    )
    .await
    .expect("initialize under hostile search_path");
    let a = init["target_file_id"].as_str().unwrap().to_owned();
    assert_ne!(a, "00000000-0000-0000-0000-000000000000");
    assert_eq!(init["current_hash"], sha256_hex(content), "{init}");
    let sub = call(
        fe,
        "patchdiff_submit_edits",
        &json!({"target_file_id": a, "expected_target_version": 0, "intent": "under hijack",
                "edits": [{"match": "alpha", "replace": "omega", "occurrence_index": 2}]}),
    )
    .await
    .expect("submit under hostile search_path");
    assert_eq!(sub["status"], "accepted", "{sub}");
    assert_eq!(sub["after_hash"], sha256_hex("alpha beta omega\n"));
    let got = call(fe, "patchdiff_get_target", &json!({"target_file_id": a}))
        .await
        .unwrap();
    assert_eq!(got["current_content"], "alpha beta omega\n");
    let got_b = call(fe, "patchdiff_get_target", &json!({"target_file_id": b}))
        .await
        .unwrap();
    assert_eq!(
        (&got_b["current_content"], &got_b["version"]),
        (&json!("bravo\n"), &json!(0))
    );
    let log = call(fe, "patchdiff_get_pdcp_log", &json!({"target_file_id": a}))
        .await
        .unwrap();
    let entries = log["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{log}");
    assert_eq!(entries[0]["intent"], "under hijack");
    assert!(
        !entries[0]["created_at"]
            .as_str()
            .unwrap()
            .starts_with("2000-"),
        "a shadowed clock_timestamp() was used: {log}"
    );
    let replay = call(fe, "patchdiff_replay", &json!({"target_file_id": a}))
        .await
        .unwrap();
    assert_eq!(replay["materialized_state_matches"], true, "{replay}");
    let ledger = call(
        fe,
        "patchdiff_get_manifest_ledger",
        &json!({"target_file_id": b}),
    )
    .await
    .unwrap();
    assert_eq!(
        ledger["entries"],
        json!([]),
        "another target's ledger leaked: {ledger}"
    );
    // Nothing went to the shadow tables; the real ones have the rows.
    for t in [
        "targets",
        "pdcp_logs",
        "manifest_ledger",
        "snapshots",
        "editing_cycles",
    ] {
        let n: i64 = fe
            .query_one(&format!("SELECT count(*) FROM pg_temp.{t}"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 0, "the API wrote pg_temp.{t}");
    }
    for t in ["targets", "pdcp_logs"] {
        let n: i64 = su
            .query_one(&format!("SELECT count(*) FROM public.{t}"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 0, "the API wrote public.{t}");
    }
    let stored: String = su
        .query_one(
            "SELECT current_content FROM patchdiff.targets WHERE target_file_id = $1::text::uuid",
            &[&a],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, "alpha beta omega\n");
    fe.batch_execute("RESET search_path").await.unwrap();
}

/// Strings that break naive quoting, escaping, formatting or display.
const HOSTILE: &[&str] = &[
    "'",
    "''",
    "\"",
    "\\",
    "\\\\",
    "\\'",
    "$$",
    "$tag$",
    "'; DROP TABLE patchdiff.targets; --",
    "\"; DROP TABLE patchdiff.pdcp_logs; --",
    "' OR '1'='1",
    "SELECT * FROM pg_authid; COMMIT; BEGIN",
    "E'\\x41'",
    ":'target' \\gset \\! id",
    "%s%d%n%x%%",
    "{}",
    "${jndi:ldap://x}",
    "`id`",
    "</script><script>",
    "\u{1}\u{7}\u{8}\u{b}\u{c}\u{e}\u{1b}[31m\u{1f}\u{7f}",
    "\t",
    "\u{200f}\u{202e}\u{2066}\u{2069}",
    "\u{feff}",
    "\u{2028}\u{2029}\u{85}",
    "🌍👩\u{200d}💻🇫🇷𝕏\u{10ffff}",
    "e\u{301}\u{fdd0}\u{fffe}\u{ffff}",
];

/// The hostile strings joined, for free-text fields.
fn hostile_text() -> String {
    HOSTILE.join(" ")
}

/// Printable-ASCII hostile strings for the field that accepts only those (the request key).
const HOSTILE_ASCII: &[&str] = &[
    "';DROP_TABLE_patchdiff.targets;--",
    "\"\\$$%s{}`",
    "$tag$'\\''",
];

/// Every field the role can write comes back exactly as sent: through the API (get_target, the
/// log with include_content, the ledger) and in the stored columns.
async fn hostile_strings_round_trip(su: &Client, fe: &Client) {
    let text = hostile_text();
    for (i, piece) in HOSTILE.iter().enumerate() {
        // Filenames may not hold line breaks; content types are at most 255 bytes.
        let filename = format!("{}{piece}.md", i);
        let filename = if filename.contains(['\n', '\r']) {
            filename.replace(['\n', '\r'], "_")
        } else {
            filename
        };
        let content_type = format!("text/{piece}");
        let content = format!("head {piece} {text} tail\n");
        let init = call(
            fe,
            "patchdiff_handle_upload",
            &json!({"filename": filename, "content": content, "content_type": content_type}),
        )
        .await
        .unwrap_or_else(|e| panic!("upload of {piece:?}: {e}"));
        assert_eq!(init["status"], "ok", "{piece:?}: {init}");
        let id = init["target_file_id"].as_str().unwrap().to_owned();
        let got = call(fe, "patchdiff_get_target", &json!({"target_file_id": id}))
            .await
            .unwrap();
        assert_eq!(got["filename"], filename.as_str(), "filename {piece:?}");
        assert_eq!(
            got["target_type"],
            content_type.as_str(),
            "content_type {piece:?}"
        );
        assert_eq!(
            got["current_content"],
            canonicalize(&content).as_ref(),
            "content {piece:?}"
        );
        assert_eq!(got["current_hash"], sha256_hex(&canonicalize(&content)));

        let key = HOSTILE_ASCII[i % HOSTILE_ASCII.len()];
        let intent = format!("intent {piece} {text}");
        let rationale = format!("why {piece}");
        let replace = format!("<{piece}>");
        let sub = call(
            fe,
            "patchdiff_submit_edits",
            &json!({
                "target_file_id": id, "expected_target_version": 0, "intent": intent,
                "client_request_id": key, "source": piece,
                "edits": [{"match": format!("head {piece} "), "replace": replace, "rationale": rationale,
                           "anchor_after": " tail", "risk": "low"}],
            }),
        )
        .await
        .unwrap();
        assert_eq!(sub["status"], "accepted", "{piece:?}: {sub}");
        let after = format!(
            "{replace}{}",
            &canonicalize(&content)[format!("head {piece} ").len()..]
        );
        assert_eq!(sub["after_hash"], sha256_hex(&after), "{piece:?}");
        // A rejected attempt carries the same strings back too.
        let rej = call(
            fe,
            "patchdiff_submit_edits",
            &json!({"target_file_id": id, "expected_target_version": 0, "intent": intent,
                    "edits": [{"match": piece, "replace": piece}]}),
        )
        .await
        .unwrap();
        assert_eq!(rej["status"], "rejected", "{piece:?}: {rej}");

        let got = call(fe, "patchdiff_get_target", &json!({"target_file_id": id}))
            .await
            .unwrap();
        assert_eq!(
            got["current_content"],
            after.as_str(),
            "content after the edit {piece:?}"
        );
        let log = call(
            fe,
            "patchdiff_get_pdcp_log",
            &json!({"target_file_id": id, "include_content": true, "client_request_id": key}),
        )
        .await
        .unwrap();
        let e = &log["entries"][0];
        assert_eq!(e["client_request_id"], key, "{log}");
        assert_eq!(e["source"], *piece, "source {piece:?}");
        let intent_shown: String = intent.chars().take(256).collect();
        assert_eq!(e["intent"], intent_shown.as_str(), "intent {piece:?}");
        let record: Value = serde_json::from_str(e["pdcp_content"].as_str().unwrap()).unwrap();
        assert_eq!(record["intent"], intent.as_str(), "stored intent {piece:?}");
        assert_eq!(record["edits"][0]["replace"], replace.as_str());
        assert_eq!(record["edits"][0]["rationale"], rationale.as_str());
        assert!(
            e["pdcp_content"].as_str().unwrap().is_ascii(),
            "the record is ASCII-escaped"
        );
        let ledger = call(
            fe,
            "patchdiff_get_manifest_ledger",
            &json!({"target_file_id": id}),
        )
        .await
        .unwrap();
        let l = &ledger["entries"][0];
        assert_eq!(l["rationale"], rationale.as_str(), "{ledger}");
        assert_eq!(l["transaction_intent"], intent.as_str());
        // And the columns themselves, read by the superuser.
        let row = su
            .query_one(
                "SELECT t.filename, t.target_type, t.current_content, l.intent, l.client_request_id, l.source, m.rationale \
                 FROM patchdiff.targets t JOIN patchdiff.pdcp_logs l USING (target_file_id) \
                 JOIN patchdiff.manifest_ledger m USING (pdcp_log_id) WHERE t.target_file_id = $1::text::uuid",
                &[&id],
            )
            .await
            .unwrap();
        let cols: [String; 7] = std::array::from_fn(|k| row.get(k));
        assert_eq!(
            cols,
            [
                filename,
                content_type,
                after,
                intent.clone(),
                key.into(),
                piece.to_string(),
                rationale
            ],
            "stored columns for {piece:?}"
        );
    }
    // The typed form binds its text arguments as values too.
    let init = call(
        fe,
        "patchdiff_initialize_target",
        &json!({"filename": "typed.md", "content": text}),
    )
    .await
    .unwrap();
    let id = init["target_file_id"].as_str().unwrap().to_owned();
    let edits =
        json!([{"match": HOSTILE[8], "replace": HOSTILE[6], "rationale": text}]).to_string();
    let row = fe
        .query_one(
            "SELECT patchdiff_submit(target_file_id => $1::text::uuid, intent => $2, edits => $3::text::json, \
             expected_target_version => 0, client_request_id => $4, source => $4)::text",
            &[&id, &text, &edits, &HOSTILE_ASCII[0]],
        )
        .await
        .unwrap();
    let v: Value = serde_json::from_str(&row.get::<_, String>(0)).unwrap();
    assert_eq!(v["status"], "accepted", "{v}");
    let got = call(fe, "patchdiff_get_target", &json!({"target_file_id": id}))
        .await
        .unwrap();
    assert_eq!(
        got["current_content"],
        text.replacen(HOSTILE[8], HOSTILE[6], 1)
    );
    let intent: String = su
        .query_one(
            "SELECT intent FROM patchdiff.pdcp_logs WHERE target_file_id = $1::text::uuid",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(intent, text);
}

/// The real `patchdiff-mcp` runs as the role: it finds the extension, lists every tool and
/// serves a call. Skipped (and said so) without a built binary or with a URL-style DSN.
async fn front_end_serves_as_the_role(db: &str, role: &str, password: &str) -> String {
    use std::io::BufRead;
    let bin = std::env::var("PATCHDIFF_MCP_BIN").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../target/debug/patchdiff-mcp").to_owned()
    });
    let base = dsn();
    if !std::path::Path::new(&bin).exists() || base.contains("://") {
        return "patchdiff-mcp as the role: skipped (no binary, or a URL DSN)".into();
    }
    // Later keys win in a key=value connection string.
    let conninfo = format!("{base} dbname={db} user={role} password={password}");
    let (mut child, mut stdin, mut out) = patchdiff_tests::stdio::spawn_unread(&[
        ("PATCHDIFF_DATABASE_URL", &conninfo),
        ("PATCHDIFF_MCP_PROFILE", "full"),
    ]);
    let lines = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"privileges","version":"1"}}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"patchdiff_initialize_target","arguments":{"filename":"mcp.md","content":"via the front end\n"}}}"#.to_owned(),
    ];
    let replies = tokio::task::spawn_blocking(move || {
        for l in lines {
            writeln!(stdin, "{l}").unwrap();
        }
        stdin.flush().unwrap();
        let mut replies = Vec::new();
        for _ in 0..3 {
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            replies.push(serde_json::from_str::<Value>(&line).unwrap_or(Value::Null));
        }
        drop(stdin);
        let _ = child.wait();
        replies
    });
    let replies = tokio::time::timeout(std::time::Duration::from_secs(60), replies)
        .await
        .expect("patchdiff-mcp answered in time")
        .unwrap();
    let tools = replies[1]["result"]["tools"].as_array().map_or(0, Vec::len);
    assert!(tools >= 15, "tools/list as the role: {}", replies[1]);
    let text: Value = serde_json::from_str(
        replies[2]["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or("null"),
    )
    .unwrap();
    assert_eq!(
        text["status"], "ok",
        "a call through patchdiff-mcp as the role: {}",
        replies[2]
    );
    format!("patchdiff-mcp as the role lists {tools} tools and serves calls")
}
