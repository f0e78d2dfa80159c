//! Who may touch what (issue 15, "Who may touch what", items 1 and 2; docs/security.md), against
//! a real PostgreSQL with two tenants set up by the least-privilege recipe of
//! docs/reliability.md:
//!
//! 1. every API function, called by one tenant on the other's target (or naming the other's
//!    attempts and observations from its own target), answers exactly as for an unknown ID and
//!    writes nothing ([`every_function_answers_as_for_an_unknown_target`]);
//! 2. `patchdiff_list_targets` shows each tenant exactly its own targets, the administrators
//!    every target, newest first, filtered by prefix, in pages that walk without repeats
//!    ([`list_targets_shows_each_role_exactly_its_own`]);
//! 3. `patchdiff_grant` / `patchdiff_revoke` allow exactly what they say and take it back, also
//!    through a group role ([`grants_allow_exactly_what_they_say`]);
//! 4. the owner is the role in effect (`SET ROLE` honoured), and a single-role install works as
//!    before ([`set_role_is_honoured_and_a_single_role_install_is_unchanged`]);
//! 5. the real `patchdiff-mcp`, connected as a tenant, answers the other tenant's target as an
//!    unknown one ([`front_end_answers_as_for_an_unknown_target`]);
//! 6. every attempt and snapshot records the role it was made as, so a grantee's edits are not
//!    the owner's ([`the_log_and_the_snapshots_name_the_acting_role`]);
//! 7. a call acts for the role PostgreSQL runs it as: a SECURITY DEFINER function of one tenant,
//!    called by the other, and an index expression run by a superuser's `ANALYZE` act as their
//!    owner ([`a_call_acts_as_the_role_postgresql_runs_it_as`]);
//! 8. a reader cannot hold up the owner: a replay inside the reader's open transaction that has
//!    written takes no lock the owner's edit waits for
//!    ([`a_readers_replay_never_holds_up_the_owner`]), and neither does an observation of the
//!    owner's target sent with a submission on another target
//!    ([`a_readers_mismatched_observation_never_holds_up_the_owner`]);
//! 9. once a revoke has returned no write of the revoked role commits, whatever its transaction's
//!    isolation ([`a_revoke_stops_writes_of_transactions_that_began_before_it`]).
//!
//! The test works in a database of its own (created, given the extension, and dropped again
//! WITH (FORCE)) with login roles of its own (dropped again). The cluster-wide role
//! `patchdiff_admin` is created when it does not exist, and then dropped again.
//!
//! Environment: `PATCHDIFF_TEST_DSN` (required): a superuser connection string; its host, port
//! and credentials are reused for the test database and the roles. `PATCHDIFF_MCP_BIN`: the
//! front end (default: the workspace's debug build; proof 5 is skipped, and says so, without it).

use patchdiff_tests::call;
use patchdiff_tests::roles::{config_for, dsn, open, recipe, unique};
use patchdiff_tests::stdio::{Session, mcp_bin};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Write;
use std::str::FromStr;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Config};

const ADMIN_ROLE: &str = "patchdiff_admin";

/// The names of this run's database and roles.
#[derive(Clone)]
struct Setup {
    db: String,
    /// Tenant A and tenant B: login roles by the recipe (NOINHERIT).
    a: String,
    b: String,
    /// A login role by the recipe, made INHERIT and a member of `patchdiff_admin`.
    admin: String,
    /// A login role by the recipe (NOINHERIT) that is a member of tenant A.
    member: String,
    /// A NOLOGIN group role tenant B is a member of.
    group: String,
    password: String,
    /// Whether this run created `patchdiff_admin` (and so drops it again).
    created_admin_role: bool,
}

/// Creates `patchdiff_admin` unless it exists; true when this call created it.
async fn ensure_admin_role(server: &Client) -> bool {
    let exists: bool = server
        .query_one(
            "SELECT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = $1)",
            &[&ADMIN_ROLE],
        )
        .await
        .expect("looking up patchdiff_admin")
        .get(0);
    if exists {
        return false;
    }
    match server
        .batch_execute(&format!("CREATE ROLE {ADMIN_ROLE} NOLOGIN"))
        .await
    {
        Ok(()) => true,
        // Created concurrently by someone else: theirs to drop.
        Err(e) if e.code() == Some(&SqlState::DUPLICATE_OBJECT) => false,
        Err(e) => panic!("CREATE ROLE {ADMIN_ROLE}: {e}"),
    }
}

/// Creates the database, the extension and the roles. Runs inside the proofs' task, so that a
/// failure here is still followed by [`tear_down`].
async fn set_up(server: &Client, s: &Setup) {
    server
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
    for role in [&s.a, &s.b, &s.admin, &s.member] {
        su.batch_execute(&recipe(&s.db, role, &s.password))
            .await
            .unwrap_or_else(|e| panic!("the least-privilege recipe for {role}: {e}"));
    }
    // The group is also used under SET ROLE, where EXECUTE is checked for the group itself.
    su.batch_execute(&format!(
        "ALTER ROLE {admin} INHERIT; GRANT {ADMIN_ROLE} TO {admin}; \
         GRANT {a} TO {member}; \
         CREATE ROLE {group} NOLOGIN; GRANT {group} TO {b}; \
         DO $g$ DECLARE f regprocedure; BEGIN \
           FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p \
             JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e' \
             JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid \
             WHERE e.extname = 'pg_patchdiff' AND p.proname LIKE 'patchdiff\\_%' \
           LOOP EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO {group}', f); END LOOP; END $g$;",
        admin = s.admin,
        a = s.a,
        b = s.b,
        member = s.member,
        group = s.group,
    ))
    .await
    .expect("the administrator, member and group roles");
}

async fn tear_down(server: &Client, s: &Setup) {
    let _ = server
        .batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", s.db))
        .await;
    for r in [&s.a, &s.b, &s.admin, &s.member, &s.group] {
        let _ = server
            .batch_execute(&format!("DROP ROLE IF EXISTS {r}"))
            .await;
    }
    if s.created_admin_role {
        let _ = server
            .batch_execute(&format!("DROP ROLE IF EXISTS {ADMIN_ROLE}"))
            .await;
    }
}

/// The one test: set up, run every proof, and always clean up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_see_and_touch_only_what_they_may() {
    let server = open(&Config::from_str(&dsn()).expect("PATCHDIFF_TEST_DSN"))
        .await
        .expect("connecting with PATCHDIFF_TEST_DSN");
    let created_admin_role = ensure_admin_role(&server).await;
    let s = Setup {
        db: unique("patchdiff_tenancy"),
        a: unique("patchdiff_tenant_a"),
        b: unique("patchdiff_tenant_b"),
        admin: unique("patchdiff_tenancy_admin"),
        member: unique("patchdiff_tenant_a_member"),
        group: unique("patchdiff_tenant_group"),
        password: unique("pw"),
        created_admin_role,
    };
    let setup = s.clone();
    let proofs = tokio::spawn(async move {
        let s = setup;
        let server = open(&Config::from_str(&dsn()).unwrap()).await.unwrap();
        set_up(&server, &s).await;
        let su = open(&config_for(&s.db, None)).await.unwrap();
        let login = |role: &str| config_for(&s.db, Some((role, &s.password)));
        let a = open(&login(&s.a)).await.expect("tenant A connects");
        let b = open(&login(&s.b)).await.expect("tenant B connects");
        let adm = open(&login(&s.admin))
            .await
            .expect("the administrator connects");

        let world = populate(&su, &a, &b, &s).await;
        let sweep = every_function_answers_as_for_an_unknown_target(&su, &a, &b, &s, &world).await;
        let listed = list_targets_shows_each_role_exactly_its_own(&su, &a, &b, &adm, &s).await;
        let grants = grants_allow_exactly_what_they_say(&su, &a, &b, &adm, &s, &world).await;
        let member = open(&login(&s.member))
            .await
            .expect("the member of tenant A connects");
        set_role_is_honoured_and_a_single_role_install_is_unchanged(&su, &a, &member, &s).await;
        the_log_and_the_snapshots_name_the_acting_role(&su, &a, &b, &member, &s).await;
        a_call_acts_as_the_role_postgresql_runs_it_as(&su, &a, &b, &s).await;
        a_readers_replay_never_holds_up_the_owner(&su, &a, &b, &s).await;
        a_readers_mismatched_observation_never_holds_up_the_owner(&su, &a, &b, &s).await;
        a_revoke_stops_writes_of_transactions_that_began_before_it(&su, &a, &b, &s).await;
        grants_and_roles_newer_than_a_snapshot_are_seen(&su, &a, &b, &s).await;
        let served = front_end_answers_as_for_an_unknown_target(&su, &s, &world).await;
        let _ = writeln!(
            std::io::stderr(),
            "tenancy: {sweep}; {listed}; {grants}; SET ROLE honoured (owner = the role in effect), single-role install unchanged; attempts and snapshots name the acting role; SECURITY DEFINER wrappers and ANALYZE's index expressions act as their owner; a reader's replay and a reader's mismatched observation hold up no edit; a revoke stops every later write; {served}"
        );
    })
    .await;
    tear_down(&server, &s).await;
    if let Err(e) = proofs {
        std::panic::resume_unwind(e.into_panic());
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// The API functions of the extension, by name.
async fn api_functions(c: &Client) -> Vec<String> {
    c.query(
        "SELECT DISTINCT p.proname::text FROM pg_catalog.pg_proc p \
         JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e' \
         JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid \
         WHERE e.extname = 'pg_patchdiff' AND p.proname LIKE 'patchdiff\\_%' ORDER BY 1",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// A UUID no row has.
async fn fresh_uuid(su: &Client) -> String {
    su.query_one("SELECT pg_catalog.gen_random_uuid()::text", &[])
        .await
        .unwrap()
        .get(0)
}

/// Rows of every table of schema `patchdiff`, counted by the superuser.
async fn counts(su: &Client) -> BTreeMap<String, i64> {
    let tables: Vec<String> = su
        .query(
            "SELECT c.relname::text FROM pg_catalog.pg_class c \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = 'patchdiff' AND c.relkind IN ('r', 'p') ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(tables.len() >= 8, "tables of schema patchdiff: {tables:?}");
    let mut out = BTreeMap::new();
    for t in tables {
        let n: i64 = su
            .query_one(&format!("SELECT count(*) FROM patchdiff.{t}"), &[])
            .await
            .unwrap()
            .get(0);
        out.insert(t, n);
    }
    out
}

/// Rows that belong to one target, table by table: those of every table with a
/// `target_file_id`, and its observations' consumptions.
async fn counts_of_target(su: &Client, id: &str) -> BTreeMap<String, i64> {
    let tables: Vec<String> = su
        .query(
            "SELECT c.relname::text FROM pg_catalog.pg_class c \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attname = 'target_file_id' AND NOT a.attisdropped \
             WHERE n.nspname = 'patchdiff' AND c.relkind IN ('r', 'p') ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut out = BTreeMap::new();
    for t in tables {
        let n: i64 = su
            .query_one(
                &format!(
                    "SELECT count(*) FROM patchdiff.{t} WHERE target_file_id = $1::text::uuid"
                ),
                &[&id],
            )
            .await
            .unwrap()
            .get(0);
        out.insert(t, n);
    }
    let consumed: i64 = su
        .query_one(
            "SELECT count(*) FROM patchdiff.observation_consumptions c \
             JOIN patchdiff.target_scope_observations o USING (observation_id) \
             WHERE o.target_file_id = $1::text::uuid",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    out.insert("observation_consumptions".into(), consumed);
    out
}

/// `v` with every occurrence of each `from` replaced by its `to`, in every string and key.
fn replaced(v: &Value, pairs: &[(String, String)]) -> Value {
    let mut text = v.to_string();
    for (from, to) in pairs {
        text = text.replace(from.as_str(), to.as_str());
    }
    serde_json::from_str(&text).unwrap()
}

/// The fields that name one attempt (its own ID, sequence number, time and correlation): two
/// separate attempts differ in them and in nothing else when they are judged alike.
const ATTEMPT_IDENTITY: &[&str] = &[
    "pdcp_log_id",
    "log_sequence",
    "created_at",
    "correlation_id",
];

fn masked(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| {
                    let x = if ATTEMPT_IDENTITY.contains(&k.as_str()) && !x.is_null() {
                        json!("(attempt identity)")
                    } else {
                        masked(x)
                    };
                    (k.clone(), x)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(masked).collect()),
        x => x.clone(),
    }
}

/// Calls one function: the JSON form, or `patchdiff_submit` (the typed form) with named
/// arguments taken from `args`.
async fn invoke(c: &Client, function: &str, args: &Value) -> Value {
    if function != "patchdiff_submit" {
        return call(c, function, args)
            .await
            .unwrap_or_else(|e| panic!("{function}({args}): {e}"));
    }
    let s = |k: &str| args[k].as_str().map(str::to_owned);
    let edits = args["edits"].to_string();
    let row = c
        .query_one(
            "SELECT patchdiff_submit(target_file_id => $1::text::uuid, intent => $2, edits => $3::text::json, \
             expected_target_version => $4, expected_current_hash => $5, parent_pdcp_log_id => $6::text::uuid, \
             client_request_id => $7)::text",
            &[
                &s("target_file_id"),
                &s("intent"),
                &edits,
                &args["expected_target_version"].as_i64(),
                &s("expected_current_hash"),
                &s("parent_pdcp_log_id"),
                &s("client_request_id"),
            ],
        )
        .await
        .unwrap_or_else(|e| panic!("patchdiff_submit({args}): {e}"));
    serde_json::from_str(&row.get::<_, String>(0)).unwrap()
}

fn ok(v: &Value, what: &str) {
    assert_eq!(v["status"], "ok", "{what}: {v}");
}

fn id_of(v: &Value, key: &str) -> String {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("no {key} in {v}"))
        .to_owned()
}

/// The target as its owner sees it, for before/after comparisons.
async fn state(c: &Client, id: &str) -> (Value, Value, Value) {
    let t = call(c, "patchdiff_get_target", &json!({"target_file_id": id}))
        .await
        .unwrap();
    ok(&t, "get_target by its owner");
    (
        t["version"].clone(),
        t["current_hash"].clone(),
        t["current_content"].clone(),
    )
}

// ---------------------------------------------------------------------------------------------
// The tenants' objects

const A_CONTENT: &str = "def alpha():\n    return 1\n\n\ndef beta():\n    return 2\n";
const B_CONTENT: &str = "def gamma():\n    return 3\n\n\ndef delta():\n    return 4\n";

/// A target's IDs that a caller may name: the target, a rejected and an accepted attempt, an
/// observation, a bundle and one of the bundle's observations, and a request key unique to the
/// call (for calls that must not recover one another).
#[derive(Clone, Debug)]
struct Ids {
    target: String,
    rejected: String,
    accepted: String,
    observation: String,
    bundle: String,
    bundle_observation: String,
    key: String,
}

impl Ids {
    /// The same shape with a fresh random UUID in place of every ID.
    async fn random(su: &Client) -> Ids {
        Ids {
            target: fresh_uuid(su).await,
            rejected: fresh_uuid(su).await,
            accepted: fresh_uuid(su).await,
            observation: fresh_uuid(su).await,
            bundle: fresh_uuid(su).await,
            bundle_observation: fresh_uuid(su).await,
            key: format!("tenancy-{}", fresh_uuid(su).await),
        }
    }

    /// `self` with a fresh request key.
    async fn rekeyed(&self, su: &Client) -> Ids {
        Ids {
            key: format!("tenancy-{}", fresh_uuid(su).await),
            ..self.clone()
        }
    }

    fn pairs(&self, to: &Ids) -> Vec<(String, String)> {
        vec![
            (self.target.clone(), to.target.clone()),
            (self.rejected.clone(), to.rejected.clone()),
            (self.accepted.clone(), to.accepted.clone()),
            (self.observation.clone(), to.observation.clone()),
            (self.bundle.clone(), to.bundle.clone()),
            (
                self.bundle_observation.clone(),
                to.bundle_observation.clone(),
            ),
            (self.key.clone(), to.key.clone()),
        ]
    }
}

/// What the calls of a sweep need besides the IDs: the victim's current guards, the request its
/// owner keyed, and the caller's own target with its guards.
#[derive(Clone, Debug)]
struct Facts {
    version: i64,
    hash: String,
    owner_key: String,
    owner_intent: String,
    owner_edits: Value,
    own: String,
    own_version: i64,
    own_hash: String,
    /// The calling role's name.
    caller_role: String,
}

struct World {
    /// Tenant A's target and objects.
    a_ids: Ids,
    a_facts: Facts,
    /// Tenant B's target (no attempts), as a victim of tenant A.
    b_ids: Ids,
    b_facts: Facts,
}

const A_KEY: &str = "tenant-a-request-1";
const A_INTENT: &str = "A bumps alpha";

/// Tenant A's Python target with an accepted (keyed) edit, a rejected attempt, a SAVE, an
/// observation and a bundle; tenant B's own Python target.
async fn populate(su: &Client, a: &Client, b: &Client, s: &Setup) -> World {
    let init = call(
        a,
        "patchdiff_initialize_target",
        &json!({"filename": "a.py", "content": A_CONTENT}),
    )
    .await
    .unwrap();
    ok(&init, "A initializes a.py");
    let t = id_of(&init, "target_file_id");
    let edits = json!([{"match": "return 1", "replace": "return 10"}]);
    let accepted = call(
        a,
        "patchdiff_submit_edits",
        &json!({"target_file_id": t, "expected_target_version": 0, "intent": A_INTENT,
                "client_request_id": A_KEY, "edits": edits}),
    )
    .await
    .unwrap();
    assert_eq!(accepted["status"], "accepted", "{accepted}");
    let rejected = call(
        a,
        "patchdiff_submit_edits",
        &json!({"target_file_id": t, "expected_target_version": 1, "intent": "A misses",
                "edits": [{"match": "return 99", "replace": "return 100"}]}),
    )
    .await
    .unwrap();
    assert_eq!(rejected["status"], "rejected", "{rejected}");
    let saved = call(
        a,
        "patchdiff_save",
        &json!({"target_file_id": t, "expected_target_version": 1}),
    )
    .await
    .unwrap();
    assert_eq!(saved["status"], "saved", "{saved}");
    let observed = call(
        a,
        "patchdiff_observe_scope",
        &json!({"target_file_id": t, "symbol_name": "alpha"}),
    )
    .await
    .unwrap();
    assert_eq!(observed["status"], "observed", "{observed}");
    let bundle = call(
        a,
        "patchdiff_observe_scope",
        &json!({"target_file_id": t, "selections": [{"symbol_name": "beta"}]}),
    )
    .await
    .unwrap();
    assert_eq!(bundle["status"], "observed_batch", "{bundle}");
    let (version, hash, _) = state(a, &t).await;

    let init_b = call(
        b,
        "patchdiff_initialize_target",
        &json!({"filename": "b.py", "content": B_CONTENT}),
    )
    .await
    .unwrap();
    ok(&init_b, "B initializes b.py");
    let own = id_of(&init_b, "target_file_id");
    let (b_version, b_hash, _) = state(b, &own).await;

    let a_ids = Ids {
        target: t.clone(),
        rejected: id_of(&rejected, "pdcp_log_id"),
        accepted: id_of(&accepted, "pdcp_log_id"),
        observation: id_of(&observed, "observation_id"),
        bundle: id_of(&bundle, "observation_bundle_id"),
        bundle_observation: id_of(&bundle["scopes"][0], "observation_id"),
        key: format!("tenancy-{}", fresh_uuid(su).await),
    };
    let a_facts = Facts {
        version: version.as_i64().unwrap(),
        hash: hash.as_str().unwrap().to_owned(),
        owner_key: A_KEY.into(),
        owner_intent: A_INTENT.into(),
        owner_edits: edits,
        own: own.clone(),
        own_version: b_version.as_i64().unwrap(),
        own_hash: b_hash.as_str().unwrap().to_owned(),
        caller_role: s.b.clone(),
    };
    // B's target as tenant A's victim: only the target ID is real.
    let mut b_ids = Ids::random(su).await;
    b_ids.target = own;
    let b_facts = Facts {
        version: a_facts.own_version,
        hash: a_facts.own_hash.clone(),
        owner_key: "tenant-b-no-such-request".into(),
        owner_intent: "B".into(),
        owner_edits: json!([{"match": "return 3", "replace": "return 30"}]),
        own: t,
        own_version: a_facts.version,
        own_hash: a_facts.hash.clone(),
        caller_role: s.a.clone(),
    };
    World {
        a_ids,
        a_facts,
        b_ids,
        b_facts,
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Every function answers as for an unknown target and writes nothing

/// One call of a sweep. `own`: made on the caller's own target, naming the victim's attempts or
/// observations (it may write an audited rejection there); otherwise made on the victim's
/// target, and it must write nothing.
struct Probe {
    what: &'static str,
    function: &'static str,
    own: bool,
    args: fn(&Ids, &Facts) -> Value,
}

fn probes() -> Vec<Probe> {
    fn p(
        what: &'static str,
        function: &'static str,
        own: bool,
        args: fn(&Ids, &Facts) -> Value,
    ) -> Probe {
        Probe {
            what,
            function,
            own,
            args,
        }
    }
    vec![
        p(
            "get_target",
            "patchdiff_get_target",
            false,
            |i, _| json!({"target_file_id": i.target}),
        ),
        p(
            "read_target",
            "patchdiff_read_target",
            false,
            |i, _| json!({"target_file_id": i.target, "start": 0, "length": 10}),
        ),
        p(
            "find_occurrences",
            "patchdiff_find_occurrences",
            false,
            |i, _| json!({"target_file_id": i.target, "text": "return"}),
        ),
        p(
            "read_lines",
            "patchdiff_read_lines",
            false,
            |i, _| json!({"target_file_id": i.target, "start_line": 1, "end_line": 2}),
        ),
        p(
            "export_target",
            "patchdiff_export_target",
            false,
            |i, _| json!({"target_file_id": i.target, "format": "original_eol"}),
        ),
        p("preview", "patchdiff_preview", false, |i, f| {
            json!({"target_file_id": i.target, "format": "patchdiff-tx/1",
                   "expected_target_version": f.version, "intent": "peek",
                   "edits": [{"match": "return", "replace": "yield", "occurrence_index": 1}]})
        }),
        p("submit_edits", "patchdiff_submit_edits", false, |i, f| {
            json!({"target_file_id": i.target, "expected_target_version": f.version,
                   "expected_current_hash": f.hash, "intent": "B writes A",
                   "parent_pdcp_log_id": i.rejected, "client_request_id": i.key,
                   "edits": [{"match": "return", "replace": "yield", "occurrence_index": 1}]})
        }),
        p(
            "submit_edits resending the owner's keyed request",
            "patchdiff_submit_edits",
            false,
            |i, f| {
                json!({"target_file_id": i.target, "expected_target_version": 0,
                       "intent": f.owner_intent, "client_request_id": f.owner_key,
                       "edits": f.owner_edits})
            },
        ),
        p("submit (typed)", "patchdiff_submit", false, |i, f| {
            json!({"target_file_id": i.target, "expected_target_version": f.version,
                   "expected_current_hash": f.hash, "intent": "B types into A",
                   "parent_pdcp_log_id": i.rejected,
                   "edits": [{"match": "return", "replace": "yield", "occurrence_index": 1}]})
        }),
        p(
            "submit (typed) resending the owner's keyed request",
            "patchdiff_submit",
            false,
            |i, f| {
                json!({"target_file_id": i.target, "expected_target_version": 0,
                       "intent": f.owner_intent, "client_request_id": f.owner_key,
                       "edits": f.owner_edits})
            },
        ),
        p(
            "submit_operations",
            "patchdiff_submit_operations",
            false,
            |i, f| {
                json!({"target_file_id": i.target, "expected_target_version": f.version,
                       "intent": "B operates on A",
                       "operations": [{"op": "span", "start": 0, "end": 3, "expected_text": "def", "replace": "DEF"}]})
            },
        ),
        // Issue 19 item 1: a changeset naming the caller's own target and the victim's ends at
        // the victim's member, as for an unknown target, and writes nothing on either.
        p(
            "submit_changeset",
            "patchdiff_submit_changeset",
            false,
            |i, f| {
                json!({"members": [
                    {"target_file_id": f.own, "expected_target_version": f.own_version,
                     "intent": "B's own member", "edits": [{"match": "b", "replace": "B"}]},
                    {"target_file_id": i.target, "expected_target_version": f.version,
                     "intent": "B's member on A", "edits": [{"match": "return", "replace": "yield"}]}]})
            },
        ),
        p(
            "submit_replacement",
            "patchdiff_submit_replacement",
            false,
            |i, f| {
                json!({"target_file_id": i.target, "expected_target_version": f.version,
                       "intent": "B replaces A", "replacement": "pass\n"})
            },
        ),
        p(
            "submit_observed_operations (single, the owner's observation)",
            "patchdiff_submit_observed_operations",
            false,
            |i, f| {
                json!({"target_file_id": i.target, "observation_id": i.observation,
                       "expected_target_version": f.version, "expected_current_hash": f.hash,
                       "intent": "B observes A", "operations": [{"op": "match", "match": "return", "replace": "yield"}]})
            },
        ),
        p(
            "submit_observed_operations (batch, the owner's bundle)",
            "patchdiff_submit_observed_operations",
            false,
            |i, f| {
                json!({"target_file_id": i.target, "observation_bundle_id": i.bundle,
                       "expected_target_version": f.version, "expected_current_hash": f.hash,
                       "intent": "B commits A's bundle", "client_request_id": i.key,
                       "groups": [{"observation_id": i.bundle_observation,
                                   "operations": [{"op": "match", "match": "return", "replace": "yield"}]}]})
            },
        ),
        p(
            "observe_scope (candidates)",
            "patchdiff_observe_scope",
            false,
            |i, _| json!({"target_file_id": i.target}),
        ),
        p(
            "observe_scope (selection)",
            "patchdiff_observe_scope",
            false,
            |i, _| json!({"target_file_id": i.target, "symbol_name": "alpha"}),
        ),
        p(
            "observe_scope (bundle)",
            "patchdiff_observe_scope",
            false,
            |i, _| json!({"target_file_id": i.target, "selections": [{"symbol_name": "alpha"}, {"symbol_name": "beta"}]}),
        ),
        p(
            "observe_scope (page of the owner's observation)",
            "patchdiff_observe_scope",
            false,
            |i, _| json!({"target_file_id": i.target, "observation_id": i.observation}),
        ),
        p(
            "save",
            "patchdiff_save",
            false,
            |i, f| json!({"target_file_id": i.target, "expected_target_version": f.version}),
        ),
        p(
            "replay",
            "patchdiff_replay",
            false,
            |i, _| json!({"target_file_id": i.target}),
        ),
        p(
            "diff (issue 19)",
            "patchdiff_diff",
            false,
            |i, _| json!({"target_file_id": i.target, "from_version": 0}),
        ),
        p(
            "get_pdcp_log",
            "patchdiff_get_pdcp_log",
            false,
            |i, _| json!({"target_file_id": i.target, "include_content": true}),
        ),
        p(
            "get_pdcp_log (by the owner's client_request_id)",
            "patchdiff_get_pdcp_log",
            false,
            |i, f| json!({"target_file_id": i.target, "client_request_id": f.owner_key, "include_content": true}),
        ),
        p(
            "get_manifest_ledger",
            "patchdiff_get_manifest_ledger",
            false,
            |i, _| json!({"target_file_id": i.target, "include_previous_cycles": true}),
        ),
        p(
            "grant (write, to the caller)",
            "patchdiff_grant",
            false,
            |i, f| json!({"target_file_id": i.target, "role": f.caller_role, "privilege": "write"}),
        ),
        p(
            "grant (to an unknown role)",
            "patchdiff_grant",
            false,
            |i, _| json!({"target_file_id": i.target, "role": "no_such_role_tenancy", "privilege": "read"}),
        ),
        p(
            "revoke",
            "patchdiff_revoke",
            false,
            |i, f| json!({"target_file_id": i.target, "role": f.caller_role}),
        ),
        // On the caller's own target, naming the victim's objects.
        p(
            "submit_edits on own target, parent = the victim's rejected attempt",
            "patchdiff_submit_edits",
            true,
            |i, f| {
                json!({"target_file_id": f.own, "expected_target_version": f.own_version,
                       "expected_current_hash": f.own_hash, "intent": "own, foreign parent",
                       "parent_pdcp_log_id": i.rejected,
                       "edits": [{"match": "return", "replace": "yield", "occurrence_index": 1}]})
            },
        ),
        p(
            "submit_edits on own target, parent = the victim's accepted attempt",
            "patchdiff_submit_edits",
            true,
            |i, f| {
                json!({"target_file_id": f.own, "expected_target_version": f.own_version,
                       "intent": "own, foreign parent", "parent_pdcp_log_id": i.accepted,
                       "edits": [{"match": "return", "replace": "yield", "occurrence_index": 1}]})
            },
        ),
        p(
            "submit (typed) on own target, parent = the victim's rejected attempt",
            "patchdiff_submit",
            true,
            |i, f| {
                json!({"target_file_id": f.own, "expected_target_version": f.own_version,
                       "intent": "own, foreign parent", "parent_pdcp_log_id": i.rejected,
                       "edits": [{"match": "return", "replace": "yield", "occurrence_index": 1}]})
            },
        ),
        p(
            "submit_operations on own target, parent = the victim's rejected attempt",
            "patchdiff_submit_operations",
            true,
            |i, f| {
                json!({"target_file_id": f.own, "expected_target_version": f.own_version,
                       "intent": "own, foreign parent", "parent_pdcp_log_id": i.rejected,
                       "operations": [{"op": "span", "start": 0, "end": 3, "expected_text": "def", "replace": "DEF"}]})
            },
        ),
        p(
            "submit_observed_operations on own target, the victim's observation",
            "patchdiff_submit_observed_operations",
            true,
            |i, f| {
                json!({"target_file_id": f.own, "observation_id": i.observation,
                       "expected_target_version": f.own_version, "expected_current_hash": f.own_hash,
                       "intent": "own, foreign observation",
                       "operations": [{"op": "match", "match": "return", "replace": "yield"}]})
            },
        ),
        p(
            "submit_observed_operations on own target, the victim's bundle",
            "patchdiff_submit_observed_operations",
            true,
            |i, f| {
                json!({"target_file_id": f.own, "observation_bundle_id": i.bundle,
                       "expected_target_version": f.own_version, "expected_current_hash": f.own_hash,
                       "intent": "own, foreign bundle", "client_request_id": i.key,
                       "groups": [{"observation_id": i.bundle_observation,
                                   "operations": [{"op": "match", "match": "return", "replace": "yield"}]}]})
            },
        ),
        p(
            "observe_scope page on own target, the victim's observation",
            "patchdiff_observe_scope",
            true,
            |i, f| json!({"target_file_id": f.own, "observation_id": i.observation}),
        ),
    ]
}

/// Runs `probes` as `caller` against the victim's `ids` and against random IDs in their place;
/// the answers must be equal once the victim's IDs are replaced by the random ones (attempt
/// identity masked for the calls on the caller's own target), and calls on the victim's target
/// must leave every table as it was. Returns the names of the functions called.
async fn sweep(
    su: &Client,
    caller: &Client,
    ids: &Ids,
    facts: &Facts,
    probes: &[Probe],
) -> Vec<&'static str> {
    let mut called = Vec::new();
    for p in probes {
        let ids = ids.rekeyed(su).await;
        let random = Ids::random(su).await;
        let pairs = ids.pairs(&random);
        let before = counts(su).await;
        let theirs = invoke(caller, p.function, &(p.args)(&ids, facts)).await;
        let after = counts(su).await;
        let unknown = invoke(caller, p.function, &(p.args)(&random, facts)).await;
        let after_unknown = counts(su).await;
        if p.own {
            assert_eq!(
                masked(&replaced(&theirs, &pairs)),
                masked(&unknown),
                "{}: the victim's IDs are not answered as unknown ones",
                p.what
            );
            assert_ne!(
                unknown["status"], "accepted",
                "{}: accepted with unknown IDs: {unknown}",
                p.what
            );
        } else {
            assert_eq!(
                replaced(&theirs, &pairs),
                unknown,
                "{}: the victim's target is not answered as an unknown one",
                p.what
            );
            // A read answers not_found; a submission or preview the contract's target_not_found
            // rejection (issue 17): both carry code target_not_found.
            assert!(
                matches!(unknown["status"].as_str(), Some("not_found" | "rejected"))
                    && unknown["code"] == "target_not_found",
                "{}: an unknown target: {unknown}",
                p.what
            );
            assert_eq!(
                before, after,
                "{}: the call on the victim's target wrote",
                p.what
            );
            assert_eq!(
                after, after_unknown,
                "{}: the call on an unknown target wrote",
                p.what
            );
        }
        called.push(p.function);
    }
    called
}

/// Issue 15 item 1: tenant B, calling every API function on tenant A's target (and naming A's
/// attempts, observations and bundle from its own target), gets the answer of an unknown ID,
/// byte for byte after the IDs are swapped, and nothing of A's changes; and the same with the
/// roles swapped, for reads and writes.
async fn every_function_answers_as_for_an_unknown_target(
    su: &Client,
    a: &Client,
    b: &Client,
    s: &Setup,
    w: &World,
) -> String {
    let all = probes();
    let a_state = state(a, &w.a_ids.target).await;
    let a_rows = counts_of_target(su, &w.a_ids.target).await;
    let all_rows = counts(su).await;
    let own_rows = counts_of_target(su, &w.a_facts.own).await;
    let called = sweep(su, b, &w.a_ids, &w.a_facts, &all).await;
    // Across the whole sweep, every table grew by exactly the rows B wrote on its own target.
    let (all_after, own_after) = (counts(su).await, counts_of_target(su, &w.a_facts.own).await);
    for (table, n) in &all_after {
        let own_growth =
            own_after.get(table).copied().unwrap_or(0) - own_rows.get(table).copied().unwrap_or(0);
        assert_eq!(
            n - all_rows[table],
            own_growth,
            "patchdiff.{table}: rows written during B's sweep beyond those on B's own target"
        );
    }
    assert_eq!(
        counts_of_target(su, &w.a_ids.target).await,
        a_rows,
        "rows of A's target changed during B's sweep"
    );
    assert_eq!(
        state(a, &w.a_ids.target).await,
        a_state,
        "A's target changed during B's sweep"
    );
    // B's own target: only audited rejections were written, its content did not move.
    let (v, h, _) = state(b, &w.a_facts.own).await;
    assert_eq!(
        (v, h),
        (json!(w.a_facts.own_version), json!(w.a_facts.own_hash)),
        "B's own target moved"
    );

    // The functions that take no target: they act on the caller's own objects only.
    let mut covered: Vec<&str> = called.clone();
    for (function, args) in [
        (
            "patchdiff_initialize_target",
            json!({"filename": "b-init.md", "content": "b\n"}),
        ),
        (
            "patchdiff_handle_upload",
            json!({"filename": "b-upload.md", "content": "b\n", "content_type": "text/markdown"}),
        ),
    ] {
        let v = call(b, function, &args).await.unwrap();
        ok(&v, function);
        let owner: String = su
            .query_one(
                "SELECT owner_role::text FROM patchdiff.targets WHERE target_file_id = $1::text::uuid",
                &[&id_of(&v, "target_file_id")],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(owner, s.b, "{function} by B: owner");
        covered.push(function);
    }
    let listed = call(b, "patchdiff_list_targets", &json!({"limit": 500}))
        .await
        .unwrap();
    ok(&listed, "list_targets by B");
    for t in listed["targets"].as_array().unwrap() {
        assert_eq!(t["owner"], s.b.as_str(), "B lists another's target: {t}");
        assert_ne!(t["target_file_id"], w.a_ids.target.as_str());
    }
    covered.push("patchdiff_list_targets");
    let functions = api_functions(su).await;
    let missing: Vec<&String> = functions
        .iter()
        .filter(|f| !covered.contains(&f.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "API functions the sweep does not cover: {missing:?}"
    );

    // Roles swapped: A on B's target, for reads and writes.
    let b_state = state(b, &w.b_ids.target).await;
    let swapped: Vec<Probe> = all
        .into_iter()
        .filter(|p| {
            !p.own
                && [
                    "get_target",
                    "read_target",
                    "read_lines",
                    "get_pdcp_log",
                    "submit_edits",
                    "submit_replacement",
                    "save",
                    "grant (write, to the caller)",
                ]
                .contains(&p.what)
        })
        .collect();
    let swapped_calls = sweep(su, a, &w.b_ids, &w.b_facts, &swapped).await;
    assert_eq!(
        state(b, &w.b_ids.target).await,
        b_state,
        "B's target changed during A's calls"
    );
    format!(
        "{} API functions swept ({} calls by B on A's target or objects, {} by A on B's target)",
        functions.len(),
        called.len(),
        swapped_calls.len()
    )
}

// ---------------------------------------------------------------------------------------------
// 2. list_targets

/// Every page of `c`'s list with `limit` 1, checked to repeat nothing and to end with a null
/// cursor; and the same list in one page.
async fn walk(c: &Client, prefix: Option<&str>) -> Vec<Value> {
    let mut all: Vec<Value> = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut args = json!({"limit": 1});
        if let Some(p) = prefix {
            args["filename_prefix"] = json!(p);
        }
        if let Some(k) = &cursor {
            args["cursor"] = json!(k);
        }
        let page = call(c, "patchdiff_list_targets", &args).await.unwrap();
        ok(&page, "list_targets page");
        let rows = page["targets"].as_array().unwrap();
        assert_eq!(page["count"], rows.len(), "{page}");
        assert!(rows.len() <= 1, "limit 1: {page}");
        for r in rows {
            assert!(
                !all.iter()
                    .any(|x| x["target_file_id"] == r["target_file_id"]),
                "a page repeats {r}"
            );
            all.push(r.clone());
        }
        match page["next_cursor"].as_str() {
            None => {
                assert!(page["next_cursor"].is_null(), "{page}");
                break;
            }
            Some(next) => {
                assert_eq!(rows.len(), 1, "a cursor after an empty page: {page}");
                cursor = Some(next.to_owned());
            }
        }
        assert!(all.len() <= 500, "the walk does not end");
    }
    let mut args = json!({"limit": 500});
    if let Some(p) = prefix {
        args["filename_prefix"] = json!(p);
    }
    let whole = call(c, "patchdiff_list_targets", &args).await.unwrap();
    ok(&whole, "list_targets");
    assert_eq!(whole["next_cursor"], Value::Null, "{whole}");
    assert_eq!(
        whole["targets"],
        Value::Array(all.clone()),
        "the pages are not the list"
    );
    all
}

/// Issue 15 item 2: each tenant lists exactly its own targets, the administrator and the
/// superuser every target (`access: "admin"` on others'), newest first, with the stored facts;
/// a filename prefix filters; pages of one walk the list without repeats.
async fn list_targets_shows_each_role_exactly_its_own(
    su: &Client,
    a: &Client,
    b: &Client,
    adm: &Client,
    s: &Setup,
) -> String {
    for (c, name) in [(a, "zz-a-notes.md"), (b, "zz-b-notes.md"), (a, "a-more.py")] {
        let v = call(
            c,
            "patchdiff_initialize_target",
            &json!({"filename": name, "content": format!("{name}\n")}),
        )
        .await
        .unwrap();
        ok(&v, name);
    }
    let grants: i64 = su
        .query_one("SELECT count(*) FROM patchdiff.target_grants", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(grants, 0, "no grants exist yet");
    let superuser: String = su
        .query_one("SELECT current_user::text", &[])
        .await
        .unwrap()
        .get(0);
    // The truth, newest first.
    let rows = su
        .query(
            "SELECT target_file_id::text, filename, target_type, version, current_hash, \
                    pg_catalog.octet_length(current_content)::int8, owner_role::text \
             FROM patchdiff.targets ORDER BY created_at DESC, target_file_id DESC",
            &[],
        )
        .await
        .unwrap();
    let truth: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                "target_file_id": r.get::<_, String>(0),
                "filename": r.get::<_, String>(1),
                "target_type": r.get::<_, String>(2),
                "version": r.get::<_, i64>(3),
                "current_hash": r.get::<_, String>(4),
                "size_bytes": r.get::<_, i64>(5),
                "owner": r.get::<_, String>(6),
            })
        })
        .collect();
    assert!(truth.len() >= 7, "{truth:?}");
    let mut pages = 0;
    for (c, viewer, sees_all) in [
        (a, s.a.as_str(), false),
        (b, s.b.as_str(), false),
        (adm, s.admin.as_str(), true),
        (su, superuser.as_str(), true),
    ] {
        for prefix in [
            None,
            Some("zz-"),
            Some("a"),
            Some("b"),
            Some("no-such-file"),
        ] {
            let want: Vec<&Value> = truth
                .iter()
                .filter(|t| sees_all || t["owner"] == viewer)
                .filter(|t| prefix.is_none_or(|p| t["filename"].as_str().unwrap().starts_with(p)))
                .collect();
            let got = walk(c, prefix).await;
            pages += got.len() + 1;
            let ids = |v: &[&Value]| -> Vec<Value> {
                v.iter().map(|t| t["target_file_id"].clone()).collect()
            };
            assert_eq!(
                ids(&got.iter().collect::<Vec<_>>()),
                ids(&want),
                "{viewer} with prefix {prefix:?}: not exactly its targets, newest first"
            );
            for (g, t) in got.iter().zip(&want) {
                for k in [
                    "filename",
                    "target_type",
                    "version",
                    "current_hash",
                    "size_bytes",
                    "owner",
                ] {
                    assert_eq!(g[k], t[k], "{viewer}: {k} of {g}");
                }
                assert!(
                    g["created_at"].is_string() && g["last_changed_at"].is_string(),
                    "{g}"
                );
                let access = if t["owner"] == viewer {
                    "owner"
                } else {
                    "admin"
                };
                assert_eq!(g["access"], access, "{viewer}: access of {g}");
            }
        }
    }
    format!(
        "list_targets: {} targets listed exactly to each of 4 roles under 5 prefixes in {pages} pages of one",
        truth.len()
    )
}

// ---------------------------------------------------------------------------------------------
// 3. Grants

async fn grant(c: &Client, function: &str, id: &str, role: &str, privilege: Option<&str>) -> Value {
    let mut args = json!({"target_file_id": id, "role": role});
    if let Some(p) = privilege {
        args["privilege"] = json!(p);
    }
    call(c, function, &args).await.unwrap()
}

fn granted(v: &Value, id: &str, role: &str, privilege: Option<&str>) {
    assert_eq!(
        *v,
        json!({"status": "ok", "target_file_id": id, "role": role, "privilege": privilege}),
        "grant answer"
    );
}

/// `owner` grants `role` `privilege` on `id`, and the answer says so.
async fn grant_checked(owner: &Client, id: &str, role: &str, privilege: &str) {
    let v = grant(owner, "patchdiff_grant", id, role, Some(privilege)).await;
    granted(&v, id, role, Some(privilege));
}

/// `c`'s access to `id` as its list says: None when not listed.
async fn listed_access(c: &Client, id: &str) -> Option<Value> {
    let l = call(c, "patchdiff_list_targets", &json!({"limit": 500}))
        .await
        .unwrap();
    ok(&l, "list_targets");
    l["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["target_file_id"] == id)
        .map(|t| t["access"].clone())
}

/// An edit of target `id` at its current version (read by the superuser), by `c`.
async fn edit(c: &Client, su: &Client, id: &str, from: &str, to: &str) -> Value {
    let version = patchdiff_tests::stored_version(su, id).await;
    call(
        c,
        "patchdiff_submit_edits",
        &json!({"target_file_id": id, "expected_target_version": version, "intent": "granted edit",
                "edits": [{"match": from, "replace": to}]}),
    )
    .await
    .unwrap()
}

/// A write by a reader: `permission_denied` / `write_not_granted`, and no row anywhere.
async fn write_refused(su: &Client, c: &Client, what: &str, function: &str, args: Value) {
    let id = args["target_file_id"].as_str().unwrap().to_owned();
    let before = counts(su).await;
    let v = invoke(c, function, &args).await;
    assert_eq!(
        (&v["status"], &v["code"], &v["target_file_id"]),
        (
            &json!("permission_denied"),
            &json!("write_not_granted"),
            &json!(id)
        ),
        "{what} by a reader: {v}"
    );
    assert_eq!(counts(su).await, before, "{what} by a reader wrote");
}

/// `c`'s answer for `id` equals its answer for a random ID, after replacement.
async fn unknown_to(su: &Client, c: &Client, id: &str, what: &str) {
    let r = fresh_uuid(su).await;
    let theirs = call(c, "patchdiff_get_target", &json!({"target_file_id": id}))
        .await
        .unwrap();
    let unknown = call(c, "patchdiff_get_target", &json!({"target_file_id": r}))
        .await
        .unwrap();
    assert_eq!(unknown["status"], "not_found", "{unknown}");
    assert_eq!(
        replaced(&theirs, &[(id.to_owned(), r)]),
        unknown,
        "{what}: not answered as an unknown target"
    );
}

/// Issue 15 (grants): read lets B read and nothing more; write lets B write; revoking write
/// leaves read; revoking removes it; a grant to a group reaches its INHERIT members; unknown
/// roles are refused.
async fn grants_allow_exactly_what_they_say(
    su: &Client,
    a: &Client,
    b: &Client,
    adm: &Client,
    s: &Setup,
    w: &World,
) -> String {
    let t = w.a_ids.target.as_str();
    unknown_to(su, b, t, "before any grant").await;

    let v = grant(a, "patchdiff_grant", t, &s.b, Some("read")).await;
    granted(&v, t, &s.b, Some("read"));
    let got = call(b, "patchdiff_get_target", &json!({"target_file_id": t}))
        .await
        .unwrap();
    ok(&got, "get_target by a reader");
    assert_eq!(got["current_content"], state(a, t).await.2, "{got}");
    ok(
        &call(
            b,
            "patchdiff_read_target",
            &json!({"target_file_id": t, "start": 0, "length": 5}),
        )
        .await
        .unwrap(),
        "read_target by a reader",
    );
    let log = call(b, "patchdiff_get_pdcp_log", &json!({"target_file_id": t}))
        .await
        .unwrap();
    assert!(
        log["entries"].as_array().is_some_and(|e| e.len() >= 2),
        "a reader reads the log: {log}"
    );
    assert_eq!(listed_access(b, t).await, Some(json!("read")));
    let version: i64 = state(a, t).await.0.as_i64().unwrap();
    let hash = state(a, t).await.1;
    let e = json!([{"match": "return 2", "replace": "return 20"}]);
    for (what, function, args) in [
        (
            "submit_edits",
            "patchdiff_submit_edits",
            json!({"target_file_id": t, "expected_target_version": version, "intent": "reader", "edits": e}),
        ),
        (
            "submit (typed)",
            "patchdiff_submit",
            json!({"target_file_id": t, "expected_target_version": version, "intent": "reader", "edits": e}),
        ),
        (
            "submit_operations",
            "patchdiff_submit_operations",
            json!({"target_file_id": t, "expected_target_version": version, "intent": "reader",
                   "operations": [{"op": "span", "start": 0, "end": 3, "expected_text": "def", "replace": "DEF"}]}),
        ),
        (
            "submit_replacement",
            "patchdiff_submit_replacement",
            json!({"target_file_id": t, "expected_target_version": version, "intent": "reader", "replacement": "x\n"}),
        ),
        (
            "submit_observed_operations",
            "patchdiff_submit_observed_operations",
            json!({"target_file_id": t, "observation_id": w.a_ids.observation,
                   "expected_target_version": version, "expected_current_hash": hash,
                   "intent": "reader", "operations": [{"op": "match", "match": "return", "replace": "yield"}]}),
        ),
        (
            "observe_scope selection",
            "patchdiff_observe_scope",
            json!({"target_file_id": t, "symbol_name": "alpha"}),
        ),
        (
            "observe_scope bundle",
            "patchdiff_observe_scope",
            json!({"target_file_id": t, "selections": [{"symbol_name": "beta"}]}),
        ),
        (
            "save",
            "patchdiff_save",
            json!({"target_file_id": t, "expected_target_version": version}),
        ),
    ] {
        write_refused(su, b, what, function, args).await;
    }
    for function in ["patchdiff_grant", "patchdiff_revoke"] {
        let before = counts(su).await;
        let v = grant(b, function, t, &s.b, Some("write")).await;
        assert_eq!(
            (&v["status"], &v["code"], &v["target_file_id"]),
            (
                &json!("permission_denied"),
                &json!("not_target_owner"),
                &json!(t)
            ),
            "{function} by a reader: {v}"
        );
        assert_eq!(counts(su).await, before, "{function} by a reader wrote");
    }

    let v = grant(a, "patchdiff_grant", t, &s.b, Some("write")).await;
    granted(&v, t, &s.b, Some("write"));
    assert_eq!(listed_access(b, t).await, Some(json!("write")));
    let v = edit(b, su, t, "return 2", "return 20").await;
    assert_eq!(v["status"], "accepted", "a writer's edit: {v}");

    let v = grant(a, "patchdiff_revoke", t, &s.b, Some("write")).await;
    granted(&v, t, &s.b, Some("read"));
    assert_eq!(listed_access(b, t).await, Some(json!("read")));
    let version: i64 = state(a, t).await.0.as_i64().unwrap();
    write_refused(
        su,
        b,
        "submit_edits after revoking write",
        "patchdiff_submit_edits",
        json!({"target_file_id": t, "expected_target_version": version, "intent": "reader",
               "edits": [{"match": "return 20", "replace": "return 2"}]}),
    )
    .await;

    let v = grant(a, "patchdiff_revoke", t, &s.b, None).await;
    granted(&v, t, &s.b, None);
    assert_eq!(listed_access(b, t).await, None);
    unknown_to(su, b, t, "after revoking").await;

    // A group role tenant B is a member of. B is NOINHERIT (the recipe): it has the group's
    // privileges only under SET ROLE; made INHERIT, it has them directly.
    let v = grant(a, "patchdiff_grant", t, &s.group, Some("read")).await;
    granted(&v, t, &s.group, Some("read"));
    unknown_to(
        su,
        b,
        t,
        "a grant to a group a NOINHERIT member does not inherit",
    )
    .await;
    b.batch_execute(&format!("SET ROLE {}", s.group))
        .await
        .unwrap();
    ok(
        &call(b, "patchdiff_get_target", &json!({"target_file_id": t}))
            .await
            .unwrap(),
        "get_target under SET ROLE to the grantee group",
    );
    b.batch_execute("RESET ROLE").await.unwrap();
    su.batch_execute(&format!("ALTER ROLE {} INHERIT", s.b))
        .await
        .unwrap();
    ok(
        &call(b, "patchdiff_get_target", &json!({"target_file_id": t}))
            .await
            .unwrap(),
        "get_target by an INHERIT member of the grantee group",
    );
    assert_eq!(listed_access(b, t).await, Some(json!("read")));
    write_refused(
        su,
        b,
        "submit_edits through a group's read",
        "patchdiff_submit_edits",
        json!({"target_file_id": t, "expected_target_version": version, "intent": "group reader",
               "edits": [{"match": "return 20", "replace": "return 2"}]}),
    )
    .await;
    let v = grant(a, "patchdiff_grant", t, &s.group, Some("write")).await;
    granted(&v, t, &s.group, Some("write"));
    let v = edit(b, su, t, "return 20", "return 2").await;
    assert_eq!(
        v["status"], "accepted",
        "an edit through a group's write: {v}"
    );
    // An administrator may grant and revoke on a target it does not own.
    let v = grant(adm, "patchdiff_revoke", t, &s.group, None).await;
    granted(&v, t, &s.group, None);
    unknown_to(
        su,
        b,
        t,
        "after the administrator revoked the group's grant",
    )
    .await;
    su.batch_execute(&format!("ALTER ROLE {} NOINHERIT", s.b))
        .await
        .unwrap();

    // Unknown roles.
    for function in ["patchdiff_grant", "patchdiff_revoke"] {
        let before = counts(su).await;
        let v = grant(a, function, t, "no_such_role_tenancy", Some("read")).await;
        assert_eq!(
            (&v["status"], &v["code"]),
            (&json!("invalid_argument"), &json!("unknown_role")),
            "{function} to an unknown role: {v}"
        );
        assert_eq!(
            counts(su).await,
            before,
            "{function} to an unknown role wrote"
        );
    }
    let left: i64 = su
        .query_one("SELECT count(*) FROM patchdiff.target_grants", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "grants left behind");
    "grants: read, write, revoke write, revoke, group (NOINHERIT, SET ROLE, INHERIT), administrator, unknown role".into()
}

// ---------------------------------------------------------------------------------------------
// 4. SET ROLE and the single-role install

/// Issue 15: the owner is the role in effect (`SET ROLE` honoured), not the login; a NOINHERIT
/// login without SET ROLE does not see it. A superuser alone works as before.
async fn set_role_is_honoured_and_a_single_role_install_is_unchanged(
    su: &Client,
    a: &Client,
    member: &Client,
    s: &Setup,
) {
    member
        .batch_execute(&format!("SET ROLE {}", s.a))
        .await
        .unwrap();
    let v = call(
        member,
        "patchdiff_initialize_target",
        &json!({"filename": "set-role.py", "content": "def f():\n    return 0\n"}),
    )
    .await
    .unwrap();
    ok(&v, "initialize under SET ROLE");
    let m1 = id_of(&v, "target_file_id");
    assert_eq!(owner_of(su, &m1).await, s.a, "owner_role under SET ROLE");
    let l = call(
        member,
        "patchdiff_list_targets",
        &json!({"filename_prefix": "set-role"}),
    )
    .await
    .unwrap();
    assert_eq!(
        (
            &l["count"],
            &l["targets"][0]["target_file_id"],
            &l["targets"][0]["owner"],
            &l["targets"][0]["access"]
        ),
        (&json!(1), &json!(m1), &json!(s.a), &json!("owner")),
        "list under SET ROLE: {l}"
    );
    // Tenant A's own login owns it too.
    assert_eq!(listed_access(a, &m1).await, Some(json!("owner")));
    let e = edit(a, su, &m1, "return 0", "return 1").await;
    assert_eq!(e["status"], "accepted", "{e}");

    member.batch_execute("RESET ROLE").await.unwrap();
    unknown_to(su, member, &m1, "a NOINHERIT member without SET ROLE").await;
    assert_eq!(listed_access(member, &m1).await, None);
    let v = call(
        member,
        "patchdiff_initialize_target",
        &json!({"filename": "member.py", "content": "x = 1\n"}),
    )
    .await
    .unwrap();
    ok(&v, "initialize by the member's own login");
    let m2 = id_of(&v, "target_file_id");
    assert_eq!(
        owner_of(su, &m2).await,
        s.member,
        "owner_role without SET ROLE"
    );
    assert_eq!(listed_access(member, &m2).await, Some(json!("owner")));
    unknown_to(su, a, &m2, "the member's own target, to tenant A").await;

    // A single-role install: the superuser alone.
    let superuser: String = su
        .query_one("SELECT current_user::text", &[])
        .await
        .unwrap()
        .get(0);
    let v = call(
        su,
        "patchdiff_initialize_target",
        &json!({"filename": "solo.md", "content": "solo one\n"}),
    )
    .await
    .unwrap();
    ok(&v, "initialize by the superuser");
    let solo = id_of(&v, "target_file_id");
    assert_eq!(owner_of(su, &solo).await, superuser);
    let e = edit(su, su, &solo, "one", "two").await;
    assert_eq!(e["status"], "accepted", "{e}");
    let saved = call(
        su,
        "patchdiff_save",
        &json!({"target_file_id": solo, "expected_target_version": 1}),
    )
    .await
    .unwrap();
    assert_eq!(saved["status"], "saved", "{saved}");
    let replay = call(su, "patchdiff_replay", &json!({"target_file_id": solo}))
        .await
        .unwrap();
    assert_eq!(replay["materialized_state_matches"], true, "{replay}");
    assert_eq!(listed_access(su, &solo).await, Some(json!("owner")));
    unknown_to(su, a, &solo, "the superuser's target, to tenant A").await;
}

// ---------------------------------------------------------------------------------------------
// 6. Who did it

/// docs/security.md, "Who did what": `pdcp_logs.acting_role` and `snapshots.acting_role` name the
/// role in effect (SET ROLE honoured) for every attempt, accepted or rejected, and every
/// snapshot, so the writes of a grantee and of the owner's members are told apart.
async fn the_log_and_the_snapshots_name_the_acting_role(
    su: &Client,
    a: &Client,
    b: &Client,
    member: &Client,
    s: &Setup,
) {
    let v = call(
        a,
        "patchdiff_initialize_target",
        &json!({"filename": "who.md", "content": "one two three\n"}),
    )
    .await
    .unwrap();
    ok(&v, "initialize by tenant A");
    let t = id_of(&v, "target_file_id");
    grant_checked(a, &t, &s.b, "write").await;
    // Accepted: B (the grantee), A (the owner), the member under SET ROLE A.
    assert_eq!(edit(b, su, &t, "one", "1").await["status"], "accepted");
    assert_eq!(edit(a, su, &t, "two", "2").await["status"], "accepted");
    member
        .batch_execute(&format!("SET ROLE {}", s.a))
        .await
        .unwrap();
    assert_eq!(
        edit(member, su, &t, "three", "3").await["status"],
        "accepted"
    );
    member.batch_execute("RESET ROLE").await.unwrap();
    // Rejected (no match): B.
    let r = edit(b, su, &t, "absent", "x").await;
    assert_eq!(r["status"], "rejected", "{r}");
    // A SAVE by B.
    let saved = call(
        b,
        "patchdiff_save",
        &json!({"target_file_id": t, "expected_target_version": 3}),
    )
    .await
    .unwrap();
    assert_eq!(saved["status"], "saved", "{saved}");

    // (what, acting_role) of the target's rows of one table, in order.
    let rows = |sql: &'static str| {
        let t = t.clone();
        async move {
            su.query(sql, &[&t])
                .await
                .unwrap()
                .iter()
                .map(|r| (r.get::<_, String>(0), r.get::<_, Option<String>>(1)))
                .collect::<Vec<_>>()
        }
    };
    let who = |status: &str, role: &str| (status.to_owned(), Some(role.to_owned()));
    assert_eq!(
        rows(
            "SELECT status, acting_role FROM patchdiff.pdcp_logs \
              WHERE target_file_id = $1::text::uuid ORDER BY log_sequence"
        )
        .await,
        vec![
            who("accepted", &s.b),
            who("accepted", &s.a),
            who("accepted", &s.a),
            who("rejected", &s.b),
        ],
        "pdcp_logs.acting_role"
    );
    assert_eq!(
        rows(
            "SELECT snapshot_reason, acting_role FROM patchdiff.snapshots \
              WHERE target_file_id = $1::text::uuid ORDER BY version"
        )
        .await,
        vec![who("initial", &s.a), who("save_checkpoint", &s.b)],
        "snapshots.acting_role"
    );
    grant(a, "patchdiff_revoke", &t, &s.b, None).await;
}

// ---------------------------------------------------------------------------------------------
// 7. Who a call acts for

/// docs/security.md, "Locks": an observed submission locks only the observations of the target
/// it writes. Tenant B may read a target of A's and so learn an observation of it that A has not
/// spent yet (its ID is in A's rejected attempt's record). B sends it with a submission on B's
/// own target and keeps that transaction open: B's answer is `OBSERVATION_TARGET_MISMATCH`, and
/// A's observed submission with it goes through at once. (That observation used to be locked
/// `FOR UPDATE` by B's statement until B's transaction ended: A's submission waited until its
/// `statement_timeout`, holding A's target's row lock, so every other edit of the target waited
/// too; helper-58.)
async fn a_readers_mismatched_observation_never_holds_up_the_owner(
    su: &Client,
    a: &Client,
    b: &Client,
    s: &Setup,
) {
    let t = read_by_b(a, s, "observed.py", "def top():\n    return 1\n").await;
    let observed = call(
        a,
        "patchdiff_observe_scope",
        &json!({"target_file_id": t, "symbol_name": "top"}),
    )
    .await
    .unwrap();
    assert_eq!(observed["status"], "observed", "A observes: {observed}");
    let o = id_of(&observed, "observation_id");
    let theirs = call(
        b,
        "patchdiff_initialize_target",
        &json!({"filename": "own.txt", "content": "x 1\n"}),
    )
    .await
    .unwrap();
    let tb = id_of(&theirs, "target_file_id");
    let submit = |target: &str, version: &Value, hash: &Value| {
        json!({"target_file_id": target, "observation_id": o, "intent": "observed edit",
               "expected_target_version": version, "expected_current_hash": hash,
               "operations": [{"op": "match", "match": "1", "replace": "2"}]})
    };

    b.batch_execute("BEGIN").await.unwrap();
    let r = call(
        b,
        "patchdiff_submit_observed_operations",
        &submit(&tb, &theirs["version"], &theirs["current_hash"]),
    )
    .await
    .unwrap();
    assert_eq!(r["status"], "rejected", "B's submission: {r}");
    assert_eq!(
        r["diagnostic"]["code"], "OBSERVATION_TARGET_MISMATCH",
        "B's submission: {r}"
    );

    a.batch_execute("SET statement_timeout = '5s'")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let v = call(
        a,
        "patchdiff_submit_observed_operations",
        &submit(
            &t,
            &observed["target_version"],
            &observed["target_current_hash"],
        ),
    )
    .await;
    let waited = started.elapsed();
    a.batch_execute("RESET statement_timeout").await.unwrap();
    let v = v.unwrap_or_else(|e| panic!("A's observed submission after {waited:?}: {e}"));
    assert_eq!(v["status"], "accepted", "A's observed submission: {v}");
    assert!(
        waited < std::time::Duration::from_secs(2),
        "A's observed submission waited {waited:?} for the reader"
    );
    b.batch_execute("ROLLBACK").await.unwrap();
    let version: i64 = su
        .query_one(
            "SELECT version FROM patchdiff.targets WHERE target_file_id = $1::text::uuid",
            &[&t],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, 1, "A's edit is committed");
}

/// docs/security.md, "A revoke": the other direction, and the roles a grant names (helper-101).
/// A grant that lets B write, given after the snapshot of B's REPEATABLE READ or SERIALIZABLE
/// transaction, is 40001 at B's write, nothing written, and the retried write is accepted: it was
/// `target_not_found` (no grant before) or `write_not_granted` (a read grant before), answers a
/// retry loop gives up on. And `patchdiff_grant` names the role that holds the name now, as
/// `GRANT` does: in such a transaction of the owner it found a role created since as
/// `unknown_role`, granted a role dropped since (a row for no role), and granted the old holder
/// of a name renamed and taken since. And a grant naming a role whose `DROP ROLE` is still open
/// waits for it, as `GRANT` does, then answers `unknown_role` (it wrote a row for no role).
async fn grants_and_roles_newer_than_a_snapshot_are_seen(
    su: &Client,
    a: &Client,
    b: &Client,
    s: &Setup,
) {
    let t = patchdiff_tests::initialize_target(a, "granted-late.md", "# Title\n\nalpha beta\n")
        .await
        .unwrap();
    let edit = |version: i64| {
        json!({"target_file_id": t, "expected_target_version": version,
            "intent": "granted late", "edits": [{"match": "beta", "replace": "gamma"}]})
    };
    // Every call that needs write: a submission, a SAVE, an observation to edit with.
    let cases = [
        ("REPEATABLE READ", None, "patchdiff_submit_edits"),
        ("SERIALIZABLE", Some("read"), "patchdiff_submit_edits"),
        ("REPEATABLE READ", Some("read"), "patchdiff_save"),
        ("SERIALIZABLE", None, "patchdiff_observe_scope"),
    ];
    for (isolation, before, function) in cases {
        if let Some(p) = before {
            grant_checked(a, &t, &s.b, p).await;
        }
        b.batch_execute(&format!("BEGIN ISOLATION LEVEL {isolation}; SELECT 1"))
            .await
            .unwrap();
        grant_checked(a, &t, &s.b, "write").await;
        let version = state_version(su, &t).await;
        let args = match function {
            "patchdiff_save" => json!({"target_file_id": t}),
            "patchdiff_observe_scope" => json!({"target_file_id": t, "symbol_name": "Title"}),
            _ => edit(version),
        };
        let err = call(b, function, &args)
            .await
            .expect_err("a write the snapshot does not allow yet");
        assert_eq!(
            err.code(),
            Some(&SqlState::T_R_SERIALIZATION_FAILURE),
            "{function} in {isolation}, {before:?} before: {err}"
        );
        b.batch_execute("ROLLBACK").await.unwrap();
        assert_eq!(state_version(su, &t).await, version);
        let r = call(b, function, &args).await.unwrap();
        assert!(
            ["accepted", "saved", "observed"].contains(&r["status"].as_str().unwrap_or("")),
            "{function}: {r}"
        );
        grant(a, "patchdiff_revoke", &t, &s.b, None).await;
        if function == "patchdiff_submit_edits" {
            // Back to beta for the next round.
            let back = json!({"target_file_id": t, "expected_target_version": version + 1,
                "intent": "back", "edits": [{"match": "gamma", "replace": "beta"}]});
            assert_eq!(
                call(a, "patchdiff_submit_edits", &back).await.unwrap()["status"],
                "accepted"
            );
        }
    }
    // A target of its own made after the snapshot, from another session: granting on it is
    // 40001 too, not `target_not_found`.
    let other_b = open(&config_for(&s.db, Some((&s.b, &s.password))))
        .await
        .unwrap();
    b.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1")
        .await
        .unwrap();
    let own = patchdiff_tests::initialize_target(&other_b, "made-late.txt", "x\n")
        .await
        .unwrap();
    let err = call(
        b,
        "patchdiff_grant",
        &json!({"target_file_id": own, "role": s.a, "privilege": "read"}),
    )
    .await
    .expect_err("a target made after the snapshot");
    assert_eq!(
        err.code(),
        Some(&SqlState::T_R_SERIALIZATION_FAILURE),
        "{err}"
    );
    b.batch_execute("ROLLBACK").await.unwrap();

    let (created, renamed, dropped) = (unique("pd_late"), unique("pd_renamed"), unique("pd_gone"));
    let old = format!("{renamed}_old");
    for role in [&renamed, &dropped] {
        su.batch_execute(&format!("CREATE ROLE {role}"))
            .await
            .unwrap();
    }
    a.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1")
        .await
        .unwrap();
    su.batch_execute(&format!(
        "CREATE ROLE {created}; ALTER ROLE {renamed} RENAME TO {old}; CREATE ROLE {renamed}; DROP ROLE {dropped}"
    ))
    .await
    .unwrap();
    grant_checked(a, &t, &created, "read").await;
    grant_checked(a, &t, &renamed, "write").await;
    let gone = grant(a, "patchdiff_grant", &t, &dropped, Some("write")).await;
    assert_eq!(gone["code"], "unknown_role", "{gone}");
    a.batch_execute("COMMIT").await.unwrap();
    let grantees: Vec<(String, String)> = su
        .query(
            "SELECT grantee::regrole::text, privilege FROM patchdiff.target_grants \
             WHERE target_file_id = $1::text::uuid ORDER BY 1",
            &[&t],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut want = vec![
        (created.clone(), "read".to_owned()),
        (renamed.clone(), "write".to_owned()),
    ];
    want.sort();
    assert_eq!(
        grantees, want,
        "grants name the roles that hold the names now"
    );
    for role in [&created, &renamed] {
        grant(a, "patchdiff_revoke", &t, role, None).await;
    }
    su.batch_execute(&format!(
        "DROP ROLE {created}; DROP ROLE {renamed}; DROP ROLE {old}"
    ))
    .await
    .unwrap();

    // A DROP ROLE not yet committed when the grant looks the role up: the grant waits for it, as
    // GRANT does, and then finds no such role. It used to write a grant row for a role that was
    // gone once the drop committed (helper-105).
    let racing = unique("pd_racing");
    su.batch_execute(&format!("CREATE ROLE {racing}"))
        .await
        .unwrap();
    su.batch_execute(&format!("BEGIN; DROP ROLE {racing}"))
        .await
        .unwrap();
    let dropper: i32 = su
        .query_one("SELECT pg_catalog.pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let (answer, ()) = tokio::join!(
        grant(a, "patchdiff_grant", &t, &racing, Some("write")),
        async {
            patchdiff_tests::wait_until_blocked_by(
                su,
                dropper,
                "the grant waits for the DROP ROLE",
            )
            .await;
            su.batch_execute("COMMIT").await.unwrap();
        }
    );
    assert_eq!(answer["code"], "unknown_role", "{answer}");
    let rows: i64 = su
        .query_one(
            "SELECT count(*) FROM patchdiff.target_grants g \
             WHERE g.target_file_id = $1::text::uuid \
               AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = g.grantee)",
            &[&t],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 0, "no grant row names a role that is gone");
}

/// docs/security.md, "A revoke": once `patchdiff_revoke` has returned, no write of the revoked
/// role commits. A transaction under REPEATABLE READ or SERIALIZABLE whose snapshot predates the
/// revoke is refused with a serialization failure (40001) at its next write, SAVE or changeset,
/// writing nothing (helper-71: its snapshot still showed the grant, and it wrote); a write taken
/// down to read the same way. Under READ COMMITTED a writer that holds the target's row lock
/// makes the revoke wait until its transaction ends, so its write commits before the revoke,
/// never after, and one that waited for the lock while the revoke committed finds its grant
/// gone. A revoke inside the owner's transaction that holds the target does not deadlock with
/// a grantee waiting for it, and grantees that keep writing do not hold a revoke off.
async fn a_revoke_stops_writes_of_transactions_that_began_before_it(
    su: &Client,
    a: &Client,
    b: &Client,
    s: &Setup,
) {
    let t = patchdiff_tests::initialize_target(a, "revoked.txt", "alpha beta\n")
        .await
        .unwrap();
    let attempts = || async {
        let n: i64 = su
            .query_one(
                "SELECT count(*) FROM patchdiff.pdcp_logs WHERE target_file_id = $1::text::uuid",
                &[&t],
            )
            .await
            .unwrap()
            .get(0);
        (n, state_version(su, &t).await)
    };
    let submit = |version: i64, to: &str| {
        json!({"target_file_id": t, "expected_target_version": version, "intent": "after revoke",
               "edits": [{"match": "beta", "replace": to}]})
    };
    let cases: [(&str, &str, Option<&str>); 4] = [
        ("REPEATABLE READ", "patchdiff_submit_edits", None),
        ("SERIALIZABLE", "patchdiff_save", None),
        ("SERIALIZABLE", "patchdiff_submit_changeset", None),
        ("REPEATABLE READ", "patchdiff_submit_edits", Some("write")),
    ];
    for (isolation, function, revoked) in cases {
        grant_checked(a, &t, &s.b, "write").await;
        let before = attempts().await;
        b.batch_execute(&format!("BEGIN ISOLATION LEVEL {isolation}; SELECT 1"))
            .await
            .unwrap();
        let left = grant(a, "patchdiff_revoke", &t, &s.b, revoked).await;
        assert_eq!(left["privilege"], json!(revoked.map(|_| "read")), "{left}");
        let args = match function {
            "patchdiff_save" => json!({"target_file_id": t}),
            "patchdiff_submit_changeset" => {
                json!({"client_request_id": unique("k"), "members": [submit(before.1, "gamma")]})
            }
            _ => submit(before.1, "gamma"),
        };
        let err = call(b, function, &args)
            .await
            .expect_err(&format!("{function} in {isolation} after the revoke"));
        assert_eq!(
            err.code(),
            Some(&SqlState::T_R_SERIALIZATION_FAILURE),
            "{function} in {isolation} after the revoke: {err}"
        );
        b.batch_execute("ROLLBACK").await.unwrap();
        assert_eq!(
            attempts().await,
            before,
            "{function} wrote after the revoke"
        );
        if revoked.is_some() {
            grant(a, "patchdiff_revoke", &t, &s.b, None).await;
        }
    }

    // READ COMMITTED: A holds the target's row lock (a rejected submission in an open
    // transaction); B's write waits for it, and so does A's revoke, from another session, after
    // B: B's write goes first, with its grant, and the revoke after it.
    grant_checked(a, &t, &s.b, "write").await;
    let (_, version) = attempts().await;
    a.batch_execute("BEGIN").await.unwrap();
    let stale = call(a, "patchdiff_submit_edits", &submit(version + 7, "delta"))
        .await
        .unwrap();
    assert_eq!(stale["status"], "rejected", "{stale}");
    let login = |role: &str| config_for(&s.db, Some((role, &s.password)));
    let writer = open(&login(&s.b)).await.unwrap();
    let writer_pid = patchdiff_tests::backend_pid(&writer).await;
    let write = {
        let args = submit(version, "gamma");
        tokio::spawn(async move { call(&writer, "patchdiff_submit_edits", &args).await })
    };
    let waits = |pid: i32| async move {
        for _ in 0..200 {
            let waiting: bool = su
                .query_one(
                    "SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_activity \
                       WHERE pid = $1 AND wait_event_type = 'Lock')",
                    &[&pid],
                )
                .await
                .unwrap()
                .get(0);
            if waiting {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        panic!("backend {pid} never waited for a lock");
    };
    waits(writer_pid).await;
    let owner = open(&login(&s.a)).await.unwrap();
    let owner_pid = patchdiff_tests::backend_pid(&owner).await;
    let revoke = {
        let (t, b) = (t.clone(), s.b.clone());
        tokio::spawn(async move { grant(&owner, "patchdiff_revoke", &t, &b, None).await })
    };
    waits(owner_pid).await;
    assert!(
        !revoke.is_finished(),
        "the revoke did not wait for the writer"
    );
    a.batch_execute("COMMIT").await.unwrap();
    let written = write.await.unwrap().unwrap();
    assert_eq!(
        written["status"], "accepted",
        "B's write, granted when it began: {written}"
    );
    let left = revoke.await.unwrap();
    assert_eq!(left["privilege"], Value::Null, "{left}");
    // And after it, B may neither write nor read the target.
    unknown_to(su, b, &t, "a revoked target").await;

    // The owner's transaction holds the target (an accepted edit) while B's write waits for
    // it; the owner then revokes in the same transaction. No deadlock (a lock on the grant row,
    // taken by the waiting writer, made one: helper-72), and B's write, let through once the
    // owner commits, finds its grant gone and writes nothing.
    grant_checked(a, &t, &s.b, "write").await;
    let (logged, version) = attempts().await;
    a.batch_execute("BEGIN").await.unwrap();
    let own = call(
        a,
        "patchdiff_submit_edits",
        &json!({"target_file_id": t, "expected_target_version": version, "intent": "own",
                "edits": [{"match": "alpha", "replace": "ALPHA"}]}),
    )
    .await
    .unwrap();
    assert_eq!(own["status"], "accepted", "{own}");
    let writer = open(&login(&s.b)).await.unwrap();
    let writer_pid = patchdiff_tests::backend_pid(&writer).await;
    let write = {
        let args = submit(version + 1, "epsilon");
        tokio::spawn(async move { call(&writer, "patchdiff_submit_edits", &args).await })
    };
    waits(writer_pid).await;
    a.batch_execute("SET lock_timeout = '5s'").await.unwrap();
    let left = grant(a, "patchdiff_revoke", &t, &s.b, None).await;
    assert_eq!(left["privilege"], Value::Null, "{left}");
    a.batch_execute("COMMIT; RESET lock_timeout").await.unwrap();
    let refused = write.await.unwrap().unwrap();
    assert_eq!(
        refused["code"], "target_not_found",
        "B's write after the revoke: {refused}"
    );
    assert_eq!(
        attempts().await,
        (logged + 1, version + 1),
        "only the owner's edit"
    );

    // Grantees that keep writing do not hold a revoke off: it waits for one writer's
    // transaction at most (a lock on the grant row, taken before each writer waited for the
    // target, kept the revoke waiting as long as the writers went on: 11 minutes, helper-72).
    grant_checked(a, &t, &s.b, "write").await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut loops = Vec::new();
    for _ in 0..2 {
        let writer = open(&login(&s.b)).await.unwrap();
        let (stop, stale) = (stop.clone(), submit(1_000_000_000, "zeta"));
        loops.push(tokio::spawn(async move {
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = call(&writer, "patchdiff_submit_edits", &stale).await;
                n += 1;
            }
            n
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    a.batch_execute("SET statement_timeout = '10s'")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let left = call(
        a,
        "patchdiff_revoke",
        &json!({"target_file_id": t, "role": s.b}),
    )
    .await;
    let waited = started.elapsed();
    a.batch_execute("RESET statement_timeout").await.unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut calls = 0;
    for l in loops {
        calls += l.await.unwrap();
    }
    let left = left.unwrap_or_else(|e| panic!("the revoke among writers, after {waited:?}: {e}"));
    assert_eq!(left["privilege"], Value::Null, "{left}");
    assert!(calls > 2, "the writers wrote {calls} times");
}

/// The `json` value of a SQL expression.
/// A new target of A's (`a`) that B may read.
async fn read_by_b(a: &Client, s: &Setup, filename: &str, content: &str) -> String {
    let made = call(
        a,
        "patchdiff_initialize_target",
        &json!({"filename": filename, "content": content}),
    )
    .await
    .unwrap();
    let t = id_of(&made, "target_file_id");
    grant_checked(a, &t, &s.b, "read").await;
    t
}

/// docs/history.md, "Replay ... takes no lock": tenant B may read a target of A's. B's
/// transaction has written (`txid_current()`), so its statements read fresh snapshots, and B
/// replays A's target and keeps the transaction open. A's edit of the target goes through at
/// once, and B's next replay in the same transaction reconstructs the new version. (Replay used to
/// take a share lock on the target row there, held until B's transaction ended: A's edit waited
/// until its `statement_timeout`.)
async fn a_readers_replay_never_holds_up_the_owner(su: &Client, a: &Client, b: &Client, s: &Setup) {
    let t = read_by_b(a, s, "replayed.txt", "one two three\n").await;
    let accepted = |v: &Value, what: &str| assert_eq!(v["status"], "accepted", "{what}: {v}");
    accepted(
        &edit(a, su, &t, "one", "ONE").await,
        "the owner's first edit",
    );

    b.batch_execute("BEGIN; SELECT pg_catalog.txid_current()")
        .await
        .unwrap();
    let replayed = json!({"target_file_id": t});
    let r = call(b, "patchdiff_replay", &replayed).await.unwrap();
    assert_eq!(r["status"], "success", "the reader's replay: {r}");
    assert_eq!(r["materialized_state_matches"], true, "{r}");
    assert_eq!(r["current_version"], 1, "{r}");

    a.batch_execute("SET statement_timeout = '5s'")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let v = edit(a, su, &t, "two", "TWO").await;
    let waited = started.elapsed();
    a.batch_execute("RESET statement_timeout").await.unwrap();
    accepted(
        &v,
        "the owner's edit while the reader's transaction is open",
    );
    assert!(
        waited < std::time::Duration::from_secs(2),
        "the owner's edit waited {waited:?} for the reader"
    );

    let r = call(b, "patchdiff_replay", &replayed).await.unwrap();
    assert_eq!(r["status"], "success", "the reader's second replay: {r}");
    assert_eq!(
        r["current_version"], 2,
        "a fresh snapshot sees the edit: {r}"
    );
    assert_eq!(r["accepted_transactions_replayed"], 2, "{r}");
    assert_eq!(r["materialized_state_matches"], true, "{r}");
    b.batch_execute("ROLLBACK").await.unwrap();
}

async fn answer_of(c: &Client, expression: &str) -> Value {
    let sql = format!("SELECT ({expression})::text");
    let text: String = c
        .query_one(&sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .get(0);
    serde_json::from_str(&text).unwrap()
}

/// docs/security.md, "Who a call acts for": a call acts for the role PostgreSQL runs it as.
/// - A SECURITY DEFINER function of tenant B, called by tenant A, acts as B: it cannot read or
///   edit A's target (answered as unknown, nothing written), and its edit of B's own target is
///   recorded as B's. (It used to act with A's targets, and its edits were recorded as A's.)
/// - An index expression of B's table, run by a superuser's `ANALYZE` as the table's owner in a
///   security-restricted operation, acts as B: its grant of A's target to B is answered as for an
///   unknown target, and it lists B's targets only. (It used to act as the superuser: any role
///   could grant itself every target, and autovacuum would run it unasked.)
async fn a_call_acts_as_the_role_postgresql_runs_it_as(
    su: &Client,
    a: &Client,
    b: &Client,
    s: &Setup,
) {
    let secret = call(
        a,
        "patchdiff_initialize_target",
        &json!({"filename": "acts-as.md", "content": "A's secret\n"}),
    )
    .await
    .unwrap();
    ok(&secret, "initialize by tenant A");
    let ta = id_of(&secret, "target_file_id");
    let own = call(
        b,
        "patchdiff_initialize_target",
        &json!({"filename": "acts-as-b.md", "content": "B's own\n"}),
    )
    .await
    .unwrap();
    ok(&own, "initialize by tenant B");
    let tb = id_of(&own, "target_file_id");
    let schema = format!("{}_s", s.b);
    su.batch_execute(&format!(
        "CREATE SCHEMA {schema} AUTHORIZATION {b}; GRANT USAGE ON SCHEMA {schema} TO {a}",
        b = s.b,
        a = s.a
    ))
    .await
    .unwrap();
    b.batch_execute(&format!(
        "CREATE FUNCTION {schema}.read_as_owner(t text) RETURNS json LANGUAGE sql SECURITY DEFINER \
           SET search_path = pg_catalog AS $f$ \
           SELECT public.patchdiff_get_target(json_build_object('target_file_id', t)) $f$; \
         CREATE FUNCTION {schema}.edit_as_owner(t text, v bigint, m text, r text) RETURNS json \
           LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog AS $f$ \
           SELECT public.patchdiff_submit_edits(json_build_object('target_file_id', t, \
             'expected_target_version', v, 'intent', 'through a wrapper', \
             'edits', json_build_array(json_build_object('match', m, 'replace', r)))) $f$;"
    ))
    .await
    .unwrap();

    // Tenant A calls B's wrappers: they act as B.
    let before = counts_of_target(su, &ta).await;
    let read = answer_of(a, &format!("{schema}.read_as_owner('{ta}')")).await;
    assert_eq!(
        read["status"], "not_found",
        "A's target through B's wrapper: {read}"
    );
    let edit = answer_of(
        a,
        &format!("{schema}.edit_as_owner('{ta}', 0, 'secret', 'leaked')"),
    )
    .await;
    assert_eq!(
        (&edit["status"], &edit["code"], &edit["pdcp_log_id"]),
        (&json!("rejected"), &json!("target_not_found"), &Value::Null),
        "an edit of A's target through B's wrapper: {edit}"
    );
    assert_eq!(
        counts_of_target(su, &ta).await,
        before,
        "A's target unchanged"
    );
    let edit = answer_of(
        a,
        &format!("{schema}.edit_as_owner('{tb}', 0, 'own', 'edited')"),
    )
    .await;
    assert_eq!(
        edit["status"], "accepted",
        "B's target through B's wrapper: {edit}"
    );
    let who: Option<String> = su
        .query_one(
            "SELECT acting_role FROM patchdiff.pdcp_logs WHERE target_file_id = $1::text::uuid",
            &[&tb],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        who.as_deref(),
        Some(s.b.as_str()),
        "the wrapper's edit is B's"
    );

    // An index expression of B's table, run by a superuser's ANALYZE as B. It keeps what the
    // API answered it in a table of B's (a security-restricted operation fires no deferred
    // trigger, so it cannot create a target there).
    b.batch_execute(&format!(
        "CREATE TABLE {schema}.seen (n serial, answer json); \
         CREATE FUNCTION {schema}.keep(answer json) RETURNS void LANGUAGE sql VOLATILE \
           AS $f$ INSERT INTO {schema}.seen (answer) VALUES (answer) $f$; \
         CREATE FUNCTION {schema}.probe(i int) RETURNS int LANGUAGE plpgsql IMMUTABLE \
           SET search_path = pg_catalog AS $f$ \
         BEGIN \
           IF current_user <> session_user THEN \
             PERFORM {schema}.keep(public.patchdiff_grant(json_build_object( \
               'target_file_id', '{ta}', 'role', '{b}', 'privilege', 'write'))); \
             PERFORM {schema}.keep(public.patchdiff_list_targets('{{}}')); \
           END IF; \
           RETURN i; \
         END $f$; \
         CREATE TABLE {schema}.t (i int); \
         INSERT INTO {schema}.t VALUES (1); \
         CREATE INDEX ON {schema}.t ({schema}.probe(i));",
        b = s.b
    ))
    .await
    .unwrap();
    let before = counts(su).await;
    su.batch_execute(&format!("ANALYZE {schema}.t"))
        .await
        .unwrap();
    let seen: Vec<Value> = su
        .query(
            &format!("SELECT answer::text FROM {schema}.seen ORDER BY n"),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| serde_json::from_str(r.get::<_, &str>(0)).unwrap())
        .collect();
    assert!(!seen.is_empty(), "ANALYZE did not run the index expression");
    for pair in seen.chunks(2) {
        let (granted, listed) = (&pair[0], &pair[1]);
        assert_eq!(
            granted["status"], "not_found",
            "a grant run by ANALYZE: {granted}"
        );
        let owners: Vec<&Value> = listed["targets"]
            .as_array()
            .unwrap_or_else(|| panic!("a list run by ANALYZE: {listed}"))
            .iter()
            .map(|t| &t["owner"])
            .collect();
        assert!(!owners.is_empty(), "B's own targets are listed: {listed}");
        assert!(
            owners.iter().all(|o| **o == json!(s.b)),
            "a list run by ANALYZE shows B's targets only: {listed}"
        );
    }
    assert_eq!(
        listed_access(b, &ta).await,
        None,
        "B granted itself A's target"
    );
    unknown_to(su, b, &ta, "A's target, to B, after ANALYZE").await;
    assert_eq!(
        counts(su).await,
        before,
        "nothing written by ANALYZE's calls"
    );
    su.batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .unwrap();
}

// ---------------------------------------------------------------------------------------------
// 5. Over MCP

/// Issue 15 item 1 through the real front end: `patchdiff-mcp` connected as tenant B answers
/// tenant A's target exactly as an unknown one (the whole tool result, after the IDs are
/// swapped), and writes nothing.
async fn front_end_answers_as_for_an_unknown_target(su: &Client, s: &Setup, w: &World) -> String {
    let bin = mcp_bin();
    let base = dsn();
    if !std::path::Path::new(&bin).exists() || base.contains("://") {
        return "patchdiff-mcp: skipped (no binary, or a URL DSN)".into();
    }
    // Later keys win in a key=value connection string.
    let conninfo = format!(
        "{base} dbname={} user={} password={}",
        s.db, s.b, s.password
    );
    let t = w.a_ids.target.clone();
    let r = fresh_uuid(su).await;
    let version = state_version(su, &t).await;
    let before = counts(su).await;
    let results = {
        let t = t.clone();
        let r = r.clone();
        tokio::task::spawn_blocking(move || {
            let mut session = Session::start(
                &conninfo,
                &[("PATCHDIFF_MCP_PROFILE", "full")],
                "2025-06-18",
            );
            let mut out = Vec::new();
            for (tool, args) in [
                (
                    "patchdiff_read_target",
                    (|id: &str, _: i64| json!({"target_file_id": id})) as fn(&str, i64) -> Value,
                ),
                ("patchdiff_submit_edits", |id: &str, v: i64| {
                    json!({"target_file_id": id, "expected_target_version": v, "intent": "B over MCP",
                           "edits": [{"match": "return", "replace": "yield", "occurrence_index": 1}]})
                }),
            ] {
                let (tool_a, result_a) = session.call(tool, args(&t, version));
                let (tool_r, result_r) = session.call(tool, args(&r, version));
                out.push((tool, tool_a, result_a, tool_r, result_r));
            }
            out
        })
        .await
        .unwrap()
    };
    for (tool, tool_a, result_a, tool_r, result_r) in &results {
        assert!(
            matches!(tool_r["status"].as_str(), Some("not_found" | "rejected"))
                && tool_r["code"] == "target_not_found",
            "{tool} on an unknown target: {result_r}"
        );
        let pairs = [(t.clone(), r.clone())];
        assert_eq!(
            replaced(tool_a, &pairs),
            *tool_r,
            "{tool} over MCP: A's target is not answered as an unknown one"
        );
        assert_eq!(
            replaced(result_a, &pairs).to_string(),
            result_r.to_string(),
            "{tool} over MCP: the tool result differs from an unknown target's"
        );
    }
    assert_eq!(counts(su).await, before, "calls over MCP wrote");
    format!(
        "patchdiff-mcp as tenant B answers {} tools on A's target as on an unknown one",
        results.len()
    )
}

async fn owner_of(su: &Client, id: &str) -> String {
    su.query_one(
        "SELECT owner_role::text FROM patchdiff.targets WHERE target_file_id = $1::text::uuid",
        &[&id],
    )
    .await
    .unwrap()
    .get(0)
}

async fn state_version(su: &Client, id: &str) -> i64 {
    su.query_one(
        "SELECT version FROM patchdiff.targets WHERE target_file_id = $1::text::uuid",
        &[&id],
    )
    .await
    .unwrap()
    .get(0)
}
