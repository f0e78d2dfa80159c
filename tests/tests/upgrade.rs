//! Issue 16 item 5, release gates: upgrade paths, and patchdiff-mcp's advice about them.
//!
//! 1. From every released version (sql/releases), `CREATE EXTENSION pg_patchdiff VERSION '<it>'`
//!    works with the installed library, and `ALTER EXTENSION pg_patchdiff UPDATE` then leaves the
//!    database at the default version with the catalog of a fresh `CREATE EXTENSION
//!    pg_patchdiff` ([`update_from_every_release_equals_a_fresh_install`]).
//! 2. patchdiff-mcp refuses an outdated release with advice naming `ALTER EXTENSION pg_patchdiff
//!    UPDATE`, and following it makes start-up succeed
//!    ([`outdated_release_is_refused_until_updated_as_advised`]).
//! 3. Objects from before release 0.1.0 (still numbered 0.1.0) have no upgrade path, and the
//!    advice says so instead of naming ALTER EXTENSION
//!    ([`storage_from_before_0_1_0_is_told_there_is_no_upgrade_path`]).
//! 4. The embedded database, the server's own, is updated at start-up instead
//!    ([`embedded_database_updates_its_extension_at_start_up`]).
//! 5. Functions and operators a role planted in the extension's schema (`public`, where every
//!    role may create in a database made before PostgreSQL 15) never run: not during `CREATE
//!    EXTENSION`, nor `ALTER EXTENSION pg_patchdiff UPDATE`, nor patchdiff-mcp's start-up and
//!    calls, as a superuser or as a tenant whose search_path puts `public` first
//!    ([`objects_planted_in_the_extensions_schema_never_run`]; docs/security.md, "Objects
//!    planted in a schema").
//! 6. A `pg_dump` restored in one transaction gives back every row and the same documents
//!    ([`a_dump_restores_whole_in_one_transaction`]; docs/sql-api.md, "Backup and restore").
//! 7. The update gives the directory each target's owner, which a role's listing reads, and it
//!    follows a reassignment ([`an_update_gives_the_directory_each_targets_owner`]); a creation
//!    time it cannot keep is named, with advice ([`an_update_names_a_creation_time_it_cannot_keep`]).
//!
//! Environment: `PATCHDIFF_TEST_DSN` (a superuser connection string; the cluster's server runs
//! on this machine, with pg_patchdiff installed by `install_extension` of scripts/lib.sh) and
//! `PATCHDIFF_MCP_BIN`. Each test works in databases of its own.

use patchdiff_tests::roles::{config_for, dsn, open, unique};
use patchdiff_tests::stdio::{Session, mcp_bin};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use tokio_postgres::Client;

fn sql_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../sql")
}

/// The released versions: the names of sql/releases/pg_patchdiff--X.Y.Z.sql.
fn released_versions() -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(sql_dir().join("releases"))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            Some(
                name.strip_prefix("pg_patchdiff--")?
                    .strip_suffix(".sql")?
                    .to_owned(),
            )
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no release in sql/releases");
    out
}

/// The server reads the extension's scripts from its share directory, so a test of this tree
/// needs this tree's scripts there, not another build's.
fn installed_scripts_are_this_trees() {
    let pg_config = std::env::var("PG_CONFIG")
        .unwrap_or_else(|_| "/usr/lib/postgresql/15/bin/pg_config".to_owned());
    let out = Command::new(&pg_config)
        .arg("--sharedir")
        .output()
        .unwrap_or_else(|e| panic!("{pg_config}: {e}"));
    let share = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()).join("extension");
    for dir in ["releases", "upgrades"] {
        for entry in std::fs::read_dir(sql_dir().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "sql") {
                continue;
            }
            let installed = share.join(path.file_name().unwrap());
            assert!(
                std::fs::read(&installed).ok() == Some(std::fs::read(&path).unwrap()),
                "{} is not {}: install this tree's extension first \
                 (bash -c 'source scripts/lib.sh; install_extension')",
                installed.display(),
                path.display()
            );
        }
    }
}

/// A database of its own, dropped when the test is done with it.
struct Database {
    name: String,
    admin: Client,
}

impl Database {
    async fn create(prefix: &str) -> Database {
        let admin = open(&config_for("postgres", None)).await.unwrap();
        let name = unique(prefix);
        admin
            .batch_execute(&format!(
                "CREATE DATABASE {name} ENCODING 'UTF8' TEMPLATE template0"
            ))
            .await
            .unwrap();
        Database { name, admin }
    }

    async fn connect(&self) -> Client {
        open(&config_for(&self.name, None)).await.unwrap()
    }

    /// libpq's form, for patchdiff-mcp.
    fn dsn(&self) -> String {
        format!("{} dbname={}", dsn(), self.name)
    }

    async fn drop(self) {
        self.admin
            .batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", self.name))
            .await
            .unwrap();
    }
}

async fn extversion(c: &Client) -> String {
    c.query_one(
        "SELECT extversion FROM pg_extension WHERE extname = 'pg_patchdiff'",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

async fn default_version(c: &Client) -> String {
    c.query_one(
        "SELECT default_version FROM pg_available_extensions WHERE name = 'pg_patchdiff'",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

/// Schemas that are not PostgreSQL's own: in a fresh database, `public` and the extension's.
const USER_NS: &str = "n.nspname <> 'information_schema' AND n.nspname !~ '^pg_'";

/// The catalog facts compared, one query each: every row one JSON line. Owners are left out
/// (whoever runs CREATE EXTENSION owns its objects); ACLs, which name the grantor, are kept,
/// and both databases are made by the same role. Column options leave out `pg_attver=N`, which
/// this machine's PostgreSQL 15 build adds to every column it creates with N the WAL position
/// at the time (stock PostgreSQL sets no column option): it dates a column, it does not
/// describe it.
fn catalog_queries() -> Vec<(&'static str, String)> {
    let ns = USER_NS;
    vec![
        ("extension", "SELECT e.extname, e.extrelocatable, n.nspname, obj_description(e.oid, 'pg_extension') AS comment, \
            (SELECT array_agg(format('%s WHERE %s', u.c::regclass, u.cond) ORDER BY u.c::regclass::text) \
               FROM unnest(e.extconfig, e.extcondition) AS u(c, cond)) AS dumped_tables \
           FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_patchdiff'".to_owned()),
        ("extension members", "SELECT pg_describe_object(d.classid, d.objid, d.objsubid) AS member FROM pg_depend d \
           JOIN pg_extension e ON d.refclassid = 'pg_extension'::regclass AND d.refobjid = e.oid \
           WHERE e.extname = 'pg_patchdiff' AND d.deptype = 'e'".to_owned()),
        ("schemas", format!("SELECT n.nspname, n.nspacl, obj_description(n.oid, 'pg_namespace') AS comment \
           FROM pg_namespace n WHERE {ns}")),
        ("relations", format!("SELECT n.nspname, c.relname, c.relkind, c.relpersistence, c.relreplident, \
             c.relrowsecurity, c.relforcerowsecurity, c.reloptions, c.relacl, am.amname, c.relispartition, \
             pg_get_partkeydef(c.oid) AS partition_key, pg_get_expr(c.relpartbound, c.oid) AS partition_bound, \
             CASE WHEN c.relkind IN ('v', 'm') THEN pg_get_viewdef(c.oid) END AS view, \
             (SELECT array_agg(i.inhparent::regclass::text ORDER BY i.inhseqno) FROM pg_inherits i WHERE i.inhrelid = c.oid) AS parents, \
             obj_description(c.oid, 'pg_class') AS comment \
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace LEFT JOIN pg_am am ON am.oid = c.relam WHERE {ns}")),
        ("columns", format!("SELECT n.nspname, c.relname, \
             row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum) AS position, a.attname, \
             format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull, pg_get_expr(d.adbin, d.adrelid) AS default, \
             a.attidentity, a.attgenerated, co.collname, a.attcompression, a.attstorage, a.attstattarget, \
             (SELECT array_agg(o ORDER BY o) FROM unnest(a.attoptions) o WHERE o NOT LIKE 'pg\\_attver=%') AS attoptions, \
             a.attacl, col_description(c.oid, a.attnum) AS comment \
           FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace \
           LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
           LEFT JOIN pg_collation co ON co.oid = a.attcollation \
           WHERE a.attnum > 0 AND NOT a.attisdropped AND {ns}")),
        ("indexes", format!("SELECT n.nspname, ic.relname AS index, pg_get_indexdef(i.indexrelid) AS definition, \
             i.indisprimary, i.indisunique, i.indimmediate, i.indisclustered, i.indisvalid, i.indisreplident \
           FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_namespace n ON n.oid = ic.relnamespace WHERE {ns}")),
        ("constraints", format!("SELECT n.nspname, coalesce(c.relname, t.typname) AS of, con.conname, con.contype, \
             pg_get_constraintdef(con.oid) AS definition, con.condeferrable, con.condeferred, con.convalidated, \
             con.connoinherit, ci.relname AS index, obj_description(con.oid, 'pg_constraint') AS comment \
           FROM pg_constraint con JOIN pg_namespace n ON n.oid = con.connamespace \
           LEFT JOIN pg_class c ON c.oid = con.conrelid LEFT JOIN pg_type t ON t.oid = con.contypid \
           LEFT JOIN pg_class ci ON ci.oid = con.conindid WHERE {ns}")),
        ("triggers", format!("SELECT n.nspname, c.relname, t.tgname, pg_get_triggerdef(t.oid) AS definition, t.tgenabled, \
             obj_description(t.oid, 'pg_trigger') AS comment \
           FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace \
           WHERE NOT t.tgisinternal AND {ns}")),
        ("functions", format!("SELECT n.nspname, p.proname, pg_get_function_identity_arguments(p.oid) AS identity, \
             pg_get_function_arguments(p.oid) AS arguments, pg_get_function_result(p.oid) AS result, p.prokind, \
             l.lanname, p.provolatile, p.proparallel, p.prosecdef, p.proisstrict, p.proleakproof, p.proretset, \
             p.procost, p.prorows, p.prosupport::text AS support, p.proconfig, p.prosrc, p.probin, p.proacl, \
             obj_description(p.oid, 'pg_proc') AS comment \
           FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace JOIN pg_language l ON l.oid = p.prolang WHERE {ns}")),
        ("sequences", format!("SELECT n.nspname, c.relname, format_type(s.seqtypid, NULL) AS type, s.seqstart, \
             s.seqincrement, s.seqmax, s.seqmin, s.seqcache, s.seqcycle, pg_sequence_last_value(c.oid) AS last_value, \
             (SELECT d.refobjid::regclass::text || '.' || a.attname FROM pg_depend d \
                JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid \
               WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.refclassid = 'pg_class'::regclass \
                 AND d.deptype IN ('a', 'i')) AS owned_by \
           FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE {ns}")),
        ("types", format!("SELECT n.nspname, t.typname, t.typtype, format_type(t.typbasetype, t.typtypmod) AS base, \
             t.typnotnull, t.typdefault, t.typacl, \
             (SELECT array_agg(e.enumlabel ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = t.oid) AS labels, \
             obj_description(t.oid, 'pg_type') AS comment \
           FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace LEFT JOIN pg_class c ON c.oid = t.typrelid \
           WHERE (t.typrelid = 0 OR c.relkind = 'c') AND {ns}")),
        ("policies", format!("SELECT n.nspname, c.relname, p.polname, p.polcmd, p.polpermissive, \
             (SELECT array_agg(CASE WHEN r = 0 THEN 'public' ELSE r::regrole::text END ORDER BY r) FROM unnest(p.polroles) r) AS roles, \
             pg_get_expr(p.polqual, p.polrelid) AS using, pg_get_expr(p.polwithcheck, p.polrelid) AS with_check \
           FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE {ns}")),
        ("rules", "SELECT schemaname, tablename, rulename, definition FROM pg_rules \
           WHERE schemaname <> 'information_schema' AND schemaname !~ '^pg_'".to_owned()),
        ("event triggers", "SELECT evtname, evtevent, evtfoid::regprocedure::text AS function, evtenabled, evttags \
           FROM pg_event_trigger".to_owned()),
        ("default privileges", "SELECT d.defaclrole::regrole::text AS role, n.nspname, d.defaclobjtype, d.defaclacl \
           FROM pg_default_acl d LEFT JOIN pg_namespace n ON n.oid = d.defaclnamespace".to_owned()),
    ]
}

/// The catalog of the database `c` is connected to: category -> sorted JSON lines, plus the row
/// count of every table (an upgrade script may write rows as well as objects).
async fn catalog(c: &Client) -> BTreeMap<&'static str, Vec<String>> {
    let mut out = BTreeMap::new();
    for (category, sql) in catalog_queries() {
        let rows = c
            .query(
                &format!("SELECT row_to_json(x)::text FROM ({sql}) x ORDER BY 1"),
                &[],
            )
            .await
            .unwrap_or_else(|e| panic!("catalog query {category}: {e:?}"));
        out.insert(category, rows.iter().map(|r| r.get(0)).collect());
    }
    let tables = c
        .query(
            &format!(
                "SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c \
                 JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'p') AND {USER_NS} ORDER BY 1"
            ),
            &[],
        )
        .await
        .unwrap();
    let mut counts = Vec::new();
    for t in tables {
        let table: String = t.get(0);
        let n: i64 = c
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await
            .unwrap()
            .get(0);
        counts.push(format!("{table}: {n}"));
    }
    out.insert("table rows", counts);
    out
}

/// Every line one catalog has and the other lacks, by category; empty when they are the same.
fn differences(
    updated: &BTreeMap<&'static str, Vec<String>>,
    fresh: &BTreeMap<&'static str, Vec<String>>,
) -> String {
    let mut report = String::new();
    for (category, lines) in updated {
        let other = &fresh[category];
        for l in lines.iter().filter(|l| !other.contains(l)) {
            report.push_str(&format!("{category}, only after the update: {l}\n"));
        }
        for l in other.iter().filter(|l| !lines.contains(l)) {
            report.push_str(&format!("{category}, only in a fresh install: {l}\n"));
        }
    }
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_from_every_release_equals_a_fresh_install() {
    installed_scripts_are_this_trees();
    let fresh_db = Database::create("patchdiff_fresh").await;
    let fresh = fresh_db.connect().await;
    fresh
        .batch_execute("CREATE EXTENSION pg_patchdiff")
        .await
        .unwrap();
    let default = default_version(&fresh).await;
    assert_eq!(extversion(&fresh).await, default);
    let fresh_catalog = catalog(&fresh).await;
    // Not a vacuous comparison: the fresh install has the objects being compared.
    for category in [
        "relations",
        "columns",
        "indexes",
        "constraints",
        "triggers",
        "functions",
    ] {
        assert!(
            !fresh_catalog[category].is_empty(),
            "a fresh install has no {category}"
        );
    }
    for release in released_versions() {
        assert_ne!(
            release, default,
            "the default version is never a released one"
        );
        let db = Database::create("patchdiff_updated").await;
        let c = db.connect().await;
        // Resolving every C symbol the release's script names: the library serves it.
        c.batch_execute(&format!(
            "CREATE EXTENSION pg_patchdiff VERSION '{release}'"
        ))
        .await
        .unwrap_or_else(|e| panic!("CREATE EXTENSION pg_patchdiff VERSION '{release}': {e:?}"));
        assert_eq!(extversion(&c).await, release);
        c.batch_execute("ALTER EXTENSION pg_patchdiff UPDATE")
            .await
            .unwrap_or_else(|e| {
                panic!("ALTER EXTENSION pg_patchdiff UPDATE from {release}: {e:?}")
            });
        assert_eq!(
            extversion(&c).await,
            default,
            "ALTER EXTENSION pg_patchdiff UPDATE from {release} stops short of the default version"
        );
        let report = differences(&catalog(&c).await, &fresh_catalog);
        assert!(
            report.is_empty(),
            "{release} updated to {default} differs from a fresh {default} install:\n{report}"
        );
        // And the updated objects serve calls with this library.
        let target = patchdiff_tests::initialize_target(&c, "upgraded.md", "one\n")
            .await
            .unwrap();
        let read = patchdiff_tests::call(
            &c,
            "patchdiff_read_target",
            &json!({"target_file_id": target}),
        )
        .await
        .unwrap();
        assert_eq!(read["text"], "one\n", "{read}");
        drop(c);
        db.drop().await;
    }
    drop(fresh);
    fresh_db.drop().await;
}

/// docs/security.md, "Finding your documents": a role's listing reads the directory's copy of each
/// target's owner. The update gives every directory row of a 0.1.0 database its target's owner
/// (here one reassigned by a superuser's UPDATE before the update, as docs/security.md advises
/// before a role is dropped), and a reassignment after it is followed; each grant gets its target's
/// creation time (and follows it); a target without a directory row gets one; each role then
/// lists exactly its own targets and those granted to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_gives_the_directory_each_targets_owner() {
    let db = Database::create("patchdiff_owner").await;
    let c = db.connect().await;
    let role = unique("patchdiff_owner_role");
    c.batch_execute(&format!(
        "CREATE EXTENSION pg_patchdiff VERSION '0.1.0'; CREATE ROLE {role} NOLOGIN"
    ))
    .await
    .unwrap();
    // Rows of 0.1.0 made by hand (its functions do not run with this library), created in the
    // order a, b, c.
    let ids: Vec<String> = (1..=3)
        .map(|n| format!("{n:08x}-1111-4111-8111-111111111111"))
        .collect();
    let mut sql = String::from("BEGIN;");
    for (n, id) in ids.iter().enumerate() {
        sql.push_str(&format!(
            "INSERT INTO patchdiff.targets (target_file_id, filename, target_type, current_content, current_hash,
                                            version, active_editing_cycle_id, owner_role)
               VALUES ('{id}', 't{n}.md', 'text/markdown', 'x', repeat('0', 64), 0, '{id}', 'postgres');
             INSERT INTO patchdiff.editing_cycles (editing_cycle_id, target_file_id, opened_version)
               VALUES ('{id}', '{id}', 0);
             INSERT INTO patchdiff.target_directory (target_file_id, created_at)
               VALUES ('{id}', '2026-12-01'::timestamptz + {n} * interval '1 minute');"
        ));
    }
    // A grant of the third to the role, made by hand as well, and a fourth target of the role
    // without a directory row (0.1.0's functions always wrote one; by hand it can be missing).
    let lone = "00000004-1111-4111-8111-111111111111";
    sql.push_str(&format!(
        "INSERT INTO patchdiff.target_grants (target_file_id, grantee, privilege, granted_by)
           VALUES ('{}', '{role}', 'read', 'postgres');
         INSERT INTO patchdiff.targets (target_file_id, filename, target_type, current_content, current_hash,
                                        version, active_editing_cycle_id, owner_role)
           VALUES ('{lone}', 'lone.md', 'text/markdown', 'x', repeat('0', 64), 0, '{lone}', '{role}');
         INSERT INTO patchdiff.editing_cycles (editing_cycle_id, target_file_id, opened_version)
           VALUES ('{lone}', '{lone}', 0);
         COMMIT;",
        ids[2]
    ));
    c.batch_execute(&sql).await.unwrap();
    let reassign = |id: &str| {
        format!("UPDATE patchdiff.targets SET owner_role = '{role}' WHERE target_file_id = '{id}'")
    };
    c.batch_execute(&reassign(&ids[0])).await.unwrap();
    c.batch_execute("ALTER EXTENSION pg_patchdiff UPDATE")
        .await
        .unwrap();
    // Every directory row names its target's owner: none differs, one is the role's.
    let directory = async |c: &Client| -> (i64, i64) {
        let r = c
            .query_one(
                &format!(
                    "SELECT count(*) FILTER (WHERE d.owner_role::oid <> t.owner_role::oid), \
                            count(*) FILTER (WHERE d.owner_role = '{role}'::regrole) \
                     FROM patchdiff.target_directory d JOIN patchdiff.targets t USING (target_file_id)"
                ),
                &[],
            )
            .await
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(
        directory(&c).await,
        (0, 2),
        "the reassigned one and the lone one"
    );
    // The grant keeps its target's creation time, the directory's.
    let grant_has_its_targets_time = async |c: &Client| -> bool {
        c.query_one(
            "SELECT g.target_created_at = d.created_at FROM patchdiff.target_grants g \
             JOIN patchdiff.target_directory d USING (target_file_id)",
            &[],
        )
        .await
        .unwrap()
        .get(0)
    };
    assert!(
        grant_has_its_targets_time(&c).await,
        "the grant's target_created_at"
    );
    c.batch_execute(&reassign(&ids[1])).await.unwrap();
    assert_eq!(
        directory(&c).await,
        (0, 3),
        "a reassignment after the update"
    );
    let listed = async |c: &Client| -> Vec<String> {
        patchdiff_tests::call(c, "patchdiff_list_targets", &json!({}))
            .await
            .unwrap()["targets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["target_file_id"].as_str().unwrap().to_owned())
            .collect()
    };
    let all = [
        lone.to_owned(),
        ids[2].clone(),
        ids[1].clone(),
        ids[0].clone(),
    ];
    assert_eq!(listed(&c).await, all);
    // A superuser's change of a directory row's creation time reaches the grant's copy.
    c.batch_execute(&format!(
        "UPDATE patchdiff.target_directory SET created_at = created_at - interval '1 hour' \
         WHERE target_file_id = '{}'",
        ids[2]
    ))
    .await
    .unwrap();
    assert!(
        grant_has_its_targets_time(&c).await,
        "the grant's copy follows the directory"
    );
    let moved = [
        lone.to_owned(),
        ids[1].clone(),
        ids[0].clone(),
        ids[2].clone(),
    ];
    assert_eq!(listed(&c).await, moved);
    c.batch_execute(&format!("SET ROLE {role}")).await.unwrap();
    assert_eq!(
        listed(&c).await,
        moved,
        "its three, and the one granted to it, once each"
    );
    drop(c);
    db.drop().await;
    db_admin_drop_role(&role).await;
}

/// docs/sql-api.md: an update that cannot take a database's rows says which and how to fix them,
/// and changes nothing. A 0.1.0 directory row whose creation time is not finite (set by hand; a
/// listing's cursor holds the time in microseconds) is named, with the advice, and the database
/// stays at 0.1.0 until it is fixed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_names_a_creation_time_it_cannot_keep() {
    let db = Database::create("patchdiff_infinite").await;
    let c = db.connect().await;
    let id = "00000001-2222-4222-8222-222222222222";
    c.batch_execute(&format!(
        "CREATE EXTENSION pg_patchdiff VERSION '0.1.0';
         BEGIN;
         INSERT INTO patchdiff.targets (target_file_id, filename, target_type, current_content, current_hash,
                                        version, active_editing_cycle_id, owner_role)
           VALUES ('{id}', 'i.md', 'text/markdown', 'x', repeat('0', 64), 0, '{id}', 'postgres');
         INSERT INTO patchdiff.editing_cycles (editing_cycle_id, target_file_id, opened_version)
           VALUES ('{id}', '{id}', 0);
         INSERT INTO patchdiff.target_directory (target_file_id, created_at) VALUES ('{id}', '-infinity');
         COMMIT;"
    ))
    .await
    .unwrap();
    let err = c
        .batch_execute("ALTER EXTENSION pg_patchdiff UPDATE")
        .await
        .expect_err("an update past a creation time that is not finite");
    let db_err = err.as_db_error().expect("a database error");
    assert!(
        db_err.message().contains(id) && db_err.message().contains("not finite"),
        "{db_err:?}"
    );
    assert!(
        db_err
            .hint()
            .is_some_and(|h| h.contains("ALTER EXTENSION pg_patchdiff UPDATE")),
        "{db_err:?}"
    );
    assert_eq!(extversion(&c).await, "0.1.0");
    c.batch_execute(&format!(
        "UPDATE patchdiff.target_directory SET created_at = '2026-12-01' WHERE target_file_id = '{id}';
         ALTER EXTENSION pg_patchdiff UPDATE"
    ))
    .await
    .unwrap();
    assert_eq!(extversion(&c).await, default_version(&c).await);
    drop(c);
    db.drop().await;
}

async fn db_admin_drop_role(role: &str) {
    let admin = open(&config_for("postgres", None)).await.unwrap();
    admin
        .batch_execute(&format!("DROP ROLE {role}"))
        .await
        .unwrap();
}

/// Issue 21, item 1 (2026-12-06): the update gives every editing cycle of a 0.1.0 database its
/// `ledger_floor`, the largest ledger sequence its target had when the cycle opened, so that the
/// active cycle's ledger page, which now reads the target's rows above it, shows exactly the rows
/// the dropped index by cycle showed. Rows of 0.1.0 made by hand: a target whose three cycles
/// hold two, two and no ledger rows, with another target's rows in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_gives_each_cycle_of_a_release_its_ledger_floor() {
    let db = Database::create("patchdiff_floor").await;
    let c = db.connect().await;
    c.batch_execute("CREATE EXTENSION pg_patchdiff VERSION '0.1.0'")
        .await
        .unwrap();
    let (t, u) = (
        "11111111-1111-4111-8111-111111111111",
        "22222222-2222-4222-8222-222222222222",
    );
    let cycle = |n: u32| format!("{n:08x}-0000-4000-8000-000000000000");
    let mut sql = format!(
        "BEGIN;
         INSERT INTO patchdiff.targets (target_file_id, filename, target_type, current_content, current_hash,
                                        version, active_editing_cycle_id, owner_role)
           VALUES ('{t}', 't.md', 'text/markdown', 'x', repeat('0', 64), 4, '{c3}', 'postgres'),
                  ('{u}', 'u.md', 'text/markdown', 'x', repeat('0', 64), 2, '{u1}', 'postgres');
         INSERT INTO patchdiff.editing_cycles (editing_cycle_id, target_file_id, opened_version, closed_version)
           VALUES ('{c1}', '{t}', 0, 2), ('{c2}', '{t}', 2, 4), ('{c3}', '{t}', 4, NULL), ('{u1}', '{u}', 0, NULL);",
        c1 = cycle(1),
        c2 = cycle(2),
        c3 = cycle(3),
        u1 = cycle(9),
    );
    // Accepted attempts, each with one ledger row, in this order: t 0->1, u 0->1, t 1->2,
    // t 2->3, u 1->2, t 3->4.
    for (k, (target, cyc, before)) in [
        (t, cycle(1), 0),
        (u, cycle(9), 0),
        (t, cycle(1), 1),
        (t, cycle(2), 2),
        (u, cycle(9), 1),
        (t, cycle(2), 3),
    ]
    .into_iter()
    .enumerate()
    {
        let log = format!("{:08x}-0000-4000-8000-00000000000{k}", 0xabc);
        sql.push_str(&format!(
            "INSERT INTO patchdiff.pdcp_logs (pdcp_log_id, target_file_id, editing_cycle_id, status,
               protocol_version, runtime_version, pdcp_content, pdcp_content_hash, request_fingerprint,
               request_envelope, before_version, before_hash, after_version, after_hash, validity, source)
             VALUES ('{log}', '{target}', '{cyc}', 'accepted', 'p', 'r', '{{}}', 'h', 'f', '{{}}',
                     {before}, 'h', {after}, 'h', '{{}}', 'mcp');
             INSERT INTO patchdiff.manifest_ledger (ledger_entry_id, pdcp_log_id, log_sequence, target_file_id,
               editing_cycle_id, before_version, after_version, change_index, change_id, origin, derived)
             SELECT gen_random_uuid(), '{log}', log_sequence, '{target}', '{cyc}', {before}, {after}, 1,
                    'chg_001', 'patchdiff-tx/1', '{{}}'
             FROM patchdiff.pdcp_logs WHERE pdcp_log_id = '{log}';",
            after = before + 1
        ));
    }
    sql.push_str("COMMIT;");
    c.batch_execute(&sql).await.unwrap();
    let seqs =
        |rows: Vec<tokio_postgres::Row>| -> Vec<i64> { rows.iter().map(|r| r.get(0)).collect() };
    let t_rows = seqs(
        c.query(
            "SELECT ledger_sequence FROM patchdiff.manifest_ledger WHERE target_file_id = $1::text::uuid ORDER BY 1",
            &[&t],
        )
        .await
        .unwrap(),
    );
    assert_eq!(t_rows.len(), 4);
    c.batch_execute("ALTER EXTENSION pg_patchdiff UPDATE")
        .await
        .unwrap();
    let floors = seqs(
        c.query(
            "SELECT ledger_floor FROM patchdiff.editing_cycles ORDER BY editing_cycle_id",
            &[],
        )
        .await
        .unwrap(),
    );
    // Cycles 1, 2, 3 of t, then u's only cycle.
    assert_eq!(floors, [0, t_rows[1], t_rows[3], 0]);
    // The active cycle of t is empty; its previous cycles hold the four rows, in order.
    let page = |previous: bool| {
        let c = &c;
        async move {
            patchdiff_tests::call(
                c,
                "patchdiff_get_manifest_ledger",
                &json!({"target_file_id": t, "include_previous_cycles": previous}),
            )
            .await
            .unwrap()
        }
    };
    assert_eq!(page(false).await["entries"], json!([]));
    let all: Vec<i64> = page(true).await["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["ledger_sequence"].as_i64().unwrap())
        .collect();
    assert_eq!(all, t_rows);
    let u_page = patchdiff_tests::call(
        &c,
        "patchdiff_get_manifest_ledger",
        &json!({"target_file_id": u}),
    )
    .await
    .unwrap();
    assert_eq!(u_page["entries"].as_array().unwrap().len(), 2, "{u_page}");
    drop(c);
    db.drop().await;
}

/// patchdiff-mcp on `dsn` with `env`, expected to stop at start-up: its stderr.
fn refused_start(dsn: &str, env: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(mcp_bin());
    cmd.env("PATCHDIFF_DATABASE_URL", dsn).stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(out.stdout.is_empty(), "nothing but MCP may go to stdout");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(!out.status.success(), "start-up did not stop: {err}");
    err
}

/// A session that starts and serves one call.
fn serves(dsn: &str, env: &[(&str, &str)]) {
    let mut s = Session::start(dsn, env, "2025-11-25");
    let (t, _) = s.call(
        "patchdiff_initialize_target",
        json!({"filename": "served.md", "content": "served\n"}),
    );
    assert_eq!(t["status"], "ok", "{t}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outdated_release_is_refused_until_updated_as_advised() {
    installed_scripts_are_this_trees();
    let oldest = released_versions().remove(0);
    let db = Database::create("patchdiff_outdated").await;
    let c = db.connect().await;
    c.batch_execute(&format!("CREATE EXTENSION pg_patchdiff VERSION '{oldest}'"))
        .await
        .unwrap();
    let default = default_version(&c).await;
    let dsn = db.dsn();
    for env in [&[][..], &[("PATCHDIFF_STRICT_OBSERVATION_MODE", "1")][..]] {
        let err = refused_start(&dsn, env);
        assert!(
            err.contains(&format!("the database's pg_patchdiff is version {oldest}, older than the pg_patchdiff library of its PostgreSQL ({default})")),
            "{err}"
        );
        assert!(
            err.contains(&format!("run ALTER EXTENSION pg_patchdiff UPDATE in this database (as a superuser), which updates it from {oldest} to {default}")),
            "{err}"
        );
    }
    // Following the advice.
    c.batch_execute("ALTER EXTENSION pg_patchdiff UPDATE")
        .await
        .unwrap();
    serves(&dsn, &[]);
    serves(&dsn, &[("PATCHDIFF_STRICT_OBSERVATION_MODE", "1")]);
    drop(c);
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_from_before_0_1_0_is_told_there_is_no_upgrade_path() {
    installed_scripts_are_this_trees();
    // Storage changed in place under the number 0.1.0 until its release. Its last change added
    // patchdiff.target_directory; target ownership (patchdiff_list_targets) came before it, and
    // observed submissions before that. Each older state is made from a 0.1.0 install.
    let states: [(&str, &str, &str); 3] = [
        (
            "ALTER EXTENSION pg_patchdiff DROP TABLE patchdiff.target_directory; \
             DROP TABLE patchdiff.target_directory",
            "the database's pg_patchdiff objects predate release 0.1.0 (they have no patchdiff.target_directory)",
            "",
        ),
        (
            "ALTER EXTENSION pg_patchdiff DROP FUNCTION patchdiff_list_targets(json); \
             DROP FUNCTION patchdiff_list_targets(json)",
            "the database's pg_patchdiff objects predate target ownership (it has no patchdiff_list_targets)",
            "",
        ),
        (
            "ALTER EXTENSION pg_patchdiff DROP FUNCTION patchdiff_list_targets(json); \
             DROP FUNCTION patchdiff_list_targets(json); \
             ALTER EXTENSION pg_patchdiff DROP FUNCTION patchdiff_submit_observed_operations(json); \
             DROP FUNCTION patchdiff_submit_observed_operations(json)",
            "PATCHDIFF_STRICT_OBSERVATION_MODE is on, but the installed pg_patchdiff has no observed submissions (patchdiff_submit_observed_operations)",
            "1",
        ),
    ];
    let oldest = released_versions().remove(0);
    for (make_older, refused, strict) in states {
        let db = Database::create("patchdiff_before").await;
        let c = db.connect().await;
        c.batch_execute(&format!(
            "CREATE EXTENSION pg_patchdiff VERSION '{oldest}'; {make_older}"
        ))
        .await
        .unwrap();
        let env: &[(&str, &str)] = if strict.is_empty() {
            &[]
        } else {
            &[("PATCHDIFF_STRICT_OBSERVATION_MODE", strict)]
        };
        let check = |err: &str| {
            assert!(err.contains(refused), "{err}");
            assert!(
                err.contains(": there is no upgrade path from objects older than release 0.1.0 (ALTER EXTENSION pg_patchdiff UPDATE cannot update them): dump the targets, DROP EXTENSION pg_patchdiff CASCADE, CREATE EXTENSION pg_patchdiff, and restore them with an owner"),
                "{err}"
            );
            assert!(!err.contains("run ALTER EXTENSION"), "{err}");
        };
        check(&refused_start(&db.dsn(), env));
        // The version number has an update path, and the update runs, but it cannot add what
        // the objects lack: still refused, still without advice to update.
        c.batch_execute("ALTER EXTENSION pg_patchdiff UPDATE")
            .await
            .unwrap();
        check(&refused_start(&db.dsn(), env));
        drop(c);
        db.drop().await;
    }
}

/// The embedded database is the server's own (README, "Set up and run"): an outdated release
/// there is updated at start-up instead of refused, so `bash scripts/run.sh` keeps serving it
/// after a newer build is installed.
#[test]
fn embedded_database_updates_its_extension_at_start_up() {
    installed_scripts_are_this_trees();
    let root = std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false);
    let base =
        std::env::temp_dir().join(format!("patchdiff-embedded-upgrade-{}", std::process::id()));
    let data = base.join("pg15");
    let _ = std::fs::remove_dir_all(&base);
    let start = || {
        let out = Command::new(mcp_bin())
            .env_remove("PATCHDIFF_DATABASE_URL")
            .env("PATCHDIFF_DATA_DIR", &data)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "start-up failed: {err}");
        assert!(!err.contains("patchdiff-mcp:"), "{err}");
    };
    // First start: the cluster and a fresh install. Then the database goes back to the oldest
    // release, as if made before the current build was installed.
    start();
    let dir = data.to_str().unwrap().to_owned();
    let user = if root {
        "postgres".to_owned()
    } else {
        std::env::var("USER").unwrap()
    };
    let conninfo = format!("host={dir} port=5432 user={user} dbname=patchdiff");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let oldest = released_versions().remove(0);
    let (default, downgraded) = rt.block_on(async {
        let c = patchdiff_tests::connect(&conninfo).await.unwrap();
        // In `public`, where the API's documentation calls it, never in pg_catalog.
        let schema: String = c
            .query_one(
                "SELECT extnamespace::regnamespace::text FROM pg_catalog.pg_extension \
                  WHERE extname = 'pg_patchdiff'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(schema, "public");
        c.batch_execute(&format!(
            "DROP EXTENSION pg_patchdiff CASCADE; CREATE EXTENSION pg_patchdiff VERSION '{oldest}'"
        ))
        .await
        .unwrap();
        (default_version(&c).await, extversion(&c).await)
    });
    assert_eq!(downgraded, oldest);
    start();
    let updated = rt.block_on(async {
        let c = patchdiff_tests::connect(&conninfo).await.unwrap();
        extversion(&c).await
    });
    assert_eq!(updated, default);
    // An earlier build of this version left an API function SECURITY DEFINER, which the library
    // refuses to run (docs/security.md, "Who a call acts for"): the start-up makes it invoker.
    let definers = || {
        rt.block_on(async {
            let c = patchdiff_tests::connect(&conninfo).await.unwrap();
            c.query_one(
                "SELECT count(*) FROM pg_catalog.pg_proc WHERE proname LIKE 'patchdiff\\_%' AND prosecdef",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
        })
    };
    rt.block_on(async {
        let c = patchdiff_tests::connect(&conninfo).await.unwrap();
        c.batch_execute("ALTER FUNCTION patchdiff_get_target(json) SECURITY DEFINER")
            .await
            .unwrap();
    });
    assert_eq!(definers(), 1);
    start();
    assert_eq!(
        definers(),
        0,
        "the start-up left a SECURITY DEFINER function"
    );
    // Nor did such a build give the functions generic plans: the start-up does, and leaves
    // the functions that have them as they are.
    let generic = || {
        rt.block_on(async {
            let c = patchdiff_tests::connect(&conninfo).await.unwrap();
            c.query_one(
                "SELECT count(*) FILTER (WHERE 'plan_cache_mode=force_generic_plan' = ANY (proconfig)), \
                        count(*), pg_catalog.max(xmin::text::int8) \
                 FROM pg_catalog.pg_proc WHERE proname LIKE 'patchdiff\\_%' AND prolang = \
                   (SELECT oid FROM pg_catalog.pg_language WHERE lanname = 'c') \
                   AND prorettype <> 'pg_catalog.trigger'::pg_catalog.regtype",
                &[],
            )
            .await
            .map(|r| (r.get::<_, i64>(0), r.get::<_, i64>(1), r.get::<_, i64>(2)))
            .unwrap()
        })
    };
    rt.block_on(async {
        let c = patchdiff_tests::connect(&conninfo).await.unwrap();
        c.batch_execute("ALTER FUNCTION patchdiff_get_target(json) RESET plan_cache_mode")
            .await
            .unwrap();
    });
    let (with, all, _) = generic();
    assert_eq!(with, all - 1);
    start();
    let (with, all, rewritten) = generic();
    assert_eq!(
        with, all,
        "the start-up left a function without generic plans"
    );
    start();
    assert_eq!(
        generic().2,
        rewritten,
        "a start-up rewrote functions that were already in line"
    );
    let pg_ctl = "/usr/lib/postgresql/15/bin/pg_ctl";
    let stopped = if root {
        Command::new("runuser")
            .args([
                "-u", "postgres", "--", pg_ctl, "-D", &dir, "-m", "fast", "stop",
            ])
            .status()
    } else {
        Command::new(pg_ctl)
            .args(["-D", &dir, "-m", "fast", "stop"])
            .status()
    };
    assert!(stopped.unwrap().success());
    let _ = std::fs::remove_dir_all(&base);
}

/// What a hostile role plants in `public` (helper-49): an operator or function of exactly the
/// argument types a statement of the install or update scripts, or of patchdiff-mcp's start-up,
/// passes, where pg_catalog has only one that needs a coercion (`=` of `oid` and `regclass`,
/// `quote_ident` of `name`) or is polymorphic (`unnest`). Each records who ran it, and then does
/// what pg_catalog's would.
const PLANTED: &str = r#"
CREATE TABLE public.planted_ran (who text, what text);
GRANT INSERT ON public.planted_ran TO PUBLIC;
CREATE FUNCTION public.planted_eq_regclass(oid, regclass) RETURNS bool LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.planted_ran VALUES (current_user, '=(oid,regclass)');
      RETURN $1 OPERATOR(pg_catalog.=) $2::oid; END $$;
CREATE OPERATOR public.= (LEFTARG = oid, RIGHTARG = regclass, FUNCTION = public.planted_eq_regclass);
CREATE FUNCTION public.planted_ne_regtype(oid, regtype) RETURNS bool LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.planted_ran VALUES (current_user, '<>(oid,regtype)');
      RETURN $1 OPERATOR(pg_catalog.<>) $2::oid; END $$;
CREATE OPERATOR public.<> (LEFTARG = oid, RIGHTARG = regtype, FUNCTION = public.planted_ne_regtype);
CREATE FUNCTION public.planted_eq_regnamespace(oid, regnamespace) RETURNS bool LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.planted_ran VALUES (current_user, '=(oid,regnamespace)');
      RETURN $1 OPERATOR(pg_catalog.=) $2::oid; END $$;
CREATE OPERATOR public.= (LEFTARG = oid, RIGHTARG = regnamespace, FUNCTION = public.planted_eq_regnamespace);
CREATE FUNCTION public.quote_ident(name) RETURNS text LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.planted_ran VALUES (current_user, 'quote_ident(name)');
      RETURN pg_catalog.quote_ident($1::text); END $$;
CREATE FUNCTION public.pg_extension_update_paths(text)
RETURNS TABLE (source text, target text, path text) LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.planted_ran VALUES (current_user, 'pg_extension_update_paths(text)');
      RETURN QUERY SELECT * FROM pg_catalog.pg_extension_update_paths($1::name); END $$;
CREATE FUNCTION public.unnest(text[]) RETURNS SETOF text LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.planted_ran VALUES (current_user, 'unnest(text[])');
      RETURN QUERY SELECT * FROM pg_catalog.unnest($1); END $$;
"#;

/// Clause 5 of this file's list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_planted_in_the_extensions_schema_never_run() {
    installed_scripts_are_this_trees();
    let oldest = released_versions().remove(0);
    let evil = unique("planter");
    let tenant = unique("planted_tenant");
    let admin = open(&config_for("postgres", None)).await.unwrap();
    admin
        .batch_execute(&format!("CREATE ROLE {evil} LOGIN PASSWORD 'planter'"))
        .await
        .unwrap();
    let mut tenants = Vec::new();
    // `fresh`: planted, then CREATE EXTENSION. `updated`: the oldest release installed (before
    // the role could plant: its frozen script is not this build's), planted, then updated.
    let fresh = Database::create("patchdiff_planted_fresh").await;
    let updated = Database::create("patchdiff_planted_updated").await;
    for db in [&fresh, &updated] {
        let c = db.connect().await;
        if std::ptr::eq(db, &updated) {
            c.batch_execute(&format!("CREATE EXTENSION pg_patchdiff VERSION '{oldest}'"))
                .await
                .unwrap();
        }
        // As in every database made before PostgreSQL 15.
        c.batch_execute("GRANT CREATE ON SCHEMA public TO PUBLIC")
            .await
            .unwrap();
        let planter = open(&config_for(&db.name, Some((&evil, "planter"))))
            .await
            .unwrap();
        planter.batch_execute(PLANTED).await.unwrap();
        // The planted objects are reached where nothing guards against them: not a vacuous test.
        c.batch_execute(
            "SELECT count(*) FROM pg_catalog.pg_depend d \
              WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass",
        )
        .await
        .unwrap();
        let ran: i64 = c
            .query_one(
                "SELECT count(*) FROM public.planted_ran WHERE what = '=(oid,regclass)'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert!(
            ran > 0,
            "the planted operator is not chosen over pg_catalog's"
        );
        c.batch_execute("TRUNCATE public.planted_ran")
            .await
            .unwrap();
        let ddl = if std::ptr::eq(db, &updated) {
            "ALTER EXTENSION pg_patchdiff UPDATE"
        } else {
            "CREATE EXTENSION pg_patchdiff"
        };
        c.batch_execute(ddl)
            .await
            .unwrap_or_else(|e| panic!("{ddl}: {e:?}"));
        assert_eq!(
            extversion(&c).await,
            default_version(&c).await,
            "after {ddl}"
        );
        // A tenant by the documented recipe, whose search_path a DBA set to put public first.
        let tenant = format!("{tenant}_{}", tenants.len());
        c.batch_execute(&patchdiff_tests::roles::recipe(&db.name, &tenant, "tenant"))
            .await
            .unwrap();
        tenants.push(tenant.clone());
        c.batch_execute(&format!(
            "ALTER ROLE {tenant} IN DATABASE {} SET search_path = public, pg_catalog",
            db.name
        ))
        .await
        .unwrap();
        let as_tenant = format!("{} user={tenant} password=tenant", db.dsn());
        for dsn in [db.dsn(), as_tenant] {
            serves(&dsn, &[]);
        }
        let ran: Vec<(String, String)> = c
            .query("SELECT who, what FROM public.planted_ran", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        assert!(
            ran.is_empty(),
            "{ddl} and patchdiff-mcp ran planted objects: {ran:?}"
        );
        let evil_super: bool = c
            .query_one(
                "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = $1",
                &[&evil],
            )
            .await
            .unwrap()
            .get(0);
        assert!(!evil_super);
        drop((c, planter));
    }
    fresh.drop().await;
    updated.drop().await;
    for role in tenants.iter().chain([&evil]) {
        admin
            .batch_execute(&format!("DROP ROLE {role}"))
            .await
            .unwrap();
    }
}

/// docs/sql-api.md, "Backup and restore": `pg_dump` of a database with targets, restored into a
/// new database in one transaction, gives back every row and the same documents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dump_restores_whole_in_one_transaction() {
    let source = Database::create("patchdiff_dumped").await;
    let c = source.connect().await;
    c.batch_execute("CREATE EXTENSION pg_patchdiff")
        .await
        .unwrap();
    let target = patchdiff_tests::initialize_target(&c, "dumped.md", "alpha beta alpha\r\n")
        .await
        .unwrap();
    let edited = patchdiff_tests::call(
        &c,
        "patchdiff_submit_edits",
        &json!({"target_file_id": target, "expected_target_version": 0, "intent": "dump",
                "edits": [{"match": "beta", "replace": "gamma"}]}),
    )
    .await
    .unwrap();
    assert_eq!(edited["status"], "accepted", "{edited}");
    let saved = patchdiff_tests::call(
        &c,
        "patchdiff_save",
        &json!({"target_file_id": target, "expected_target_version": 1}),
    )
    .await
    .unwrap();
    assert_eq!(saved["status"], "saved", "{saved}");
    const COUNTS: &str = "SELECT (SELECT count(*) FROM patchdiff.targets), \
        (SELECT count(*) FROM patchdiff.editing_cycles), (SELECT count(*) FROM patchdiff.snapshots), \
        (SELECT count(*) FROM patchdiff.pdcp_logs), (SELECT count(*) FROM patchdiff.manifest_ledger)";
    let before: Vec<i64> = {
        let row = c.query_one(COUNTS, &[]).await.unwrap();
        (0..5).map(|i| row.get(i)).collect()
    };
    assert_eq!(before, [1, 2, 2, 1, 1]);
    let dump = Command::new("pg_dump")
        .args(["--dbname", &source.dsn()])
        .output()
        .unwrap();
    assert!(
        dump.status.success(),
        "{}",
        String::from_utf8_lossy(&dump.stderr)
    );
    let restored = Database::create("patchdiff_restored").await;
    let mut psql = Command::new("psql")
        .args([
            "-X",
            "-q",
            "--single-transaction",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            &restored.dsn(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        psql.stdin.take().unwrap().write_all(&dump.stdout).unwrap();
    }
    let out = psql.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = restored.connect().await;
    let row = r.query_one(COUNTS, &[]).await.unwrap();
    let after: Vec<i64> = (0..5).map(|i| row.get(i)).collect();
    assert_eq!(after, before);
    let args = json!({"target_file_id": target, "format": "original_eol"});
    let from_source = patchdiff_tests::call(&c, "patchdiff_export_target", &args)
        .await
        .unwrap();
    let from_restored = patchdiff_tests::call(&r, "patchdiff_export_target", &args)
        .await
        .unwrap();
    assert_eq!(from_source["status"], "ok", "{from_source}");
    assert_eq!(from_restored, from_source);
    drop((c, r));
    source.drop().await;
    restored.drop().await;
}
