-- pg_patchdiff 0.1.0 -> 0.2.0 (ALTER EXTENSION pg_patchdiff UPDATE).
\echo Use "ALTER EXTENSION pg_patchdiff UPDATE" to load this file. \quit

-- Apart from what follows, 0.2.0's install script, as pgrx generates it from this tree, differs
-- from the frozen 0.1.0 one (sql/releases/pg_patchdiff--0.1.0.sql) only in the source locations
-- pgrx writes as comments (`-- pg_patchdiff/src/lib.rs:109`). The library's C symbols that
-- 0.1.0's functions name are those of 0.2.0, so the objects of an updated database and of a
-- fresh 0.2.0 install are the same (tests/tests/upgrade.rs compares their catalogs).

-- Issue 21, item 1: what each acceptance writes and indexes (sql/schema.sql says why each
-- guarantee still holds). No stored value changes.

-- Targets and editing cycles are never removed and never renumbered.
CREATE FUNCTION patchdiff.refuse_removal() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
    RAISE EXCEPTION 'rows of patchdiff.% are never removed or renumbered: % is not allowed', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER keep_rows BEFORE DELETE ON patchdiff.targets
    FOR EACH ROW EXECUTE FUNCTION patchdiff.refuse_removal();
CREATE TRIGGER keep_ids AFTER UPDATE OF target_file_id ON patchdiff.targets
    FOR EACH ROW EXECUTE FUNCTION patchdiff.refuse_removal();
CREATE TRIGGER keep_rows_truncate BEFORE TRUNCATE ON patchdiff.targets
    FOR EACH STATEMENT EXECUTE FUNCTION patchdiff.refuse_removal();
CREATE TRIGGER keep_rows BEFORE DELETE ON patchdiff.editing_cycles
    FOR EACH ROW EXECUTE FUNCTION patchdiff.refuse_removal();
CREATE TRIGGER keep_ids AFTER UPDATE OF editing_cycle_id ON patchdiff.editing_cycles
    FOR EACH ROW EXECUTE FUNCTION patchdiff.refuse_removal();
CREATE TRIGGER keep_rows_truncate BEFORE TRUNCATE ON patchdiff.editing_cycles
    FOR EACH STATEMENT EXECUTE FUNCTION patchdiff.refuse_removal();
ALTER TABLE patchdiff.targets ENABLE ALWAYS TRIGGER keep_rows, ENABLE ALWAYS TRIGGER keep_ids, ENABLE ALWAYS TRIGGER keep_rows_truncate;
ALTER TABLE patchdiff.editing_cycles ENABLE ALWAYS TRIGGER keep_rows, ENABLE ALWAYS TRIGGER keep_ids, ENABLE ALWAYS TRIGGER keep_rows_truncate;

-- The attempt log: no foreign keys to the target and the cycle, no index on log_sequence alone,
-- (target_file_id, log_sequence) unique.
ALTER TABLE patchdiff.pdcp_logs
    DROP CONSTRAINT pdcp_logs_target_file_id_fkey,
    DROP CONSTRAINT pdcp_logs_editing_cycle_id_fkey,
    DROP CONSTRAINT pdcp_logs_log_sequence_key;
DROP INDEX patchdiff.pdcp_logs_target_file_id_log_sequence_idx;
CREATE UNIQUE INDEX ON patchdiff.pdcp_logs (target_file_id, log_sequence);

-- The ledger: keyed by (pdcp_log_id, change_index), no foreign key to its attempt, no index on
-- ledger_entry_id or ledger_sequence alone, (target_file_id, ledger_sequence) unique.
ALTER TABLE patchdiff.manifest_ledger
    DROP CONSTRAINT manifest_ledger_pdcp_log_id_fkey,
    DROP CONSTRAINT manifest_ledger_pkey,
    DROP CONSTRAINT manifest_ledger_ledger_sequence_key,
    DROP CONSTRAINT manifest_ledger_pdcp_log_id_change_index_key,
    ADD PRIMARY KEY (pdcp_log_id, change_index);
DROP INDEX patchdiff.manifest_ledger_target_file_id_ledger_sequence_idx;
CREATE UNIQUE INDEX ON patchdiff.manifest_ledger (target_file_id, ledger_sequence);

-- The active cycle's ledger page reads the target's range above the cycle's ledger_floor
-- instead of an index by cycle. Each cycle's floor is the largest ledger_sequence among the
-- target's rows of earlier cycles (versions and sequences only grow, under the target's row
-- lock): what a SAVE of 0.2.0 writes (storage::targets, SAVE_SQL; pg_patchdiff/src/
-- tests_history.rs and tests/tests/upgrade.rs check the two agree). Each cycle's own largest
-- sequence is read through the index by cycle, before it is dropped, and the floor is the
-- largest of those of the cycles opened before it: one index probe per cycle (helper-64: a
-- probe per cycle that walked the target's rows took 48 s for 20,000 cycles of one target).
ALTER TABLE patchdiff.editing_cycles ADD COLUMN ledger_floor bigint;
UPDATE patchdiff.editing_cycles c SET ledger_floor = f.floor
  FROM (SELECT e.editing_cycle_id,
               COALESCE(max(top.seq) OVER (PARTITION BY e.target_file_id
                                           ORDER BY e.opened_version, e.opened_at, e.editing_cycle_id
                                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS floor
          FROM patchdiff.editing_cycles e
          LEFT JOIN LATERAL (SELECT max(l.ledger_sequence) AS seq FROM patchdiff.manifest_ledger l
                              WHERE l.editing_cycle_id = e.editing_cycle_id) top ON true) f
 WHERE f.editing_cycle_id = c.editing_cycle_id;
ALTER TABLE patchdiff.editing_cycles ALTER COLUMN ledger_floor SET NOT NULL;
COMMENT ON COLUMN patchdiff.editing_cycles.ledger_floor IS 'The largest manifest_ledger.ledger_sequence of the target when the cycle opened (0 for its first cycle): the cycle''s ledger rows are the target''s rows above it.';
DROP INDEX patchdiff.manifest_ledger_editing_cycle_id_ledger_sequence_idx;

-- Issue 19 item 1: changesets. Every member's attempt names its changeset; a single
-- submission's is NULL (sql/schema.sql).
ALTER TABLE patchdiff.pdcp_logs ADD COLUMN changeset_id uuid;
CREATE INDEX ON patchdiff.pdcp_logs (changeset_id) WHERE changeset_id IS NOT NULL;
COMMENT ON COLUMN patchdiff.pdcp_logs.changeset_id IS 'The changeset (patchdiff_submit_changeset) whose member this attempt is: every member of one changeset shares it, all accepted or all rejected. NULL for a single submission.';

CREATE FUNCTION "patchdiff_submit_changeset"(
	"args" json /* JsonText */
) RETURNS json /* JsonText */
STRICT
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'patchdiff_submit_changeset_wrapper';
COMMENT ON FUNCTION @extschema@.patchdiff_submit_changeset(json) IS
'Several guarded proposals on different targets, all or nothing (issue 19). args: members (1-32, each exactly the arguments of patchdiff_submit_edits, with edits, or of patchdiff_submit_operations, with operations, without client_request_id; no target twice), client_request_id (one key for the whole changeset). Caps: 32 members, 4 MiB of arguments, refused before any lock; the texts of the targets together at most patchdiff.max_changeset_target_bytes (changeset_targets_too_large). Targets are locked by target ID, so changesets cannot deadlock. Either every member is accepted and applied, or every member is logged rejected (a member that passed gets context_invalid / changeset_member_rejected naming the failing member) and nothing changes; every attempt carries the changeset_id. A target the caller may not write ends the call with nothing written. Works in the caller''s transaction. Returns status, changeset_id, member_count, failing_member, members (each member''s own answer), deduplicated, client_request_id.';
-- Issue 19, item 3: patchdiff_diff, the unified diff between two versions of one target, and
-- the snapshot index it reads the newest snapshot at or below a version from.
CREATE INDEX ON patchdiff.snapshots (target_file_id, version);
CREATE  FUNCTION "patchdiff_diff"(
	"args" json /* JsonText */
) RETURNS json /* JsonText */
STRICT STABLE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'patchdiff_diff_wrapper';
ALTER FUNCTION @extschema@.patchdiff_diff(json) SET enable_sort = off SET enable_incremental_sort = off;
COMMENT ON FUNCTION @extschema@.patchdiff_diff(json) IS
'Unified diff between two versions of one target (issue 19), rebuilt from the newest snapshot at or below each version plus the accepted log; never writes. args: target_file_id, from_version (required), to_version (default current; any two versions, either order, across SAVEs), context (lines, default 3, 0..1000), max_page_bytes (default 65536, 1024..1048576), cursor (a next_cursor). The hunks of the canonical LF texts are byte-identical to GNU diff -U<context>; header is ours (--- filename<TAB>version N). Returns one page of hunks (cut at a line end, or inside a longer line at a code point boundary), offset, total_bytes, hunk_count, lines_removed, lines_added, identical, has_more, next_cursor. unknown_version names first_version and current_version; texts over 8 MiB or 200,000 lines are diff_input_too_large, a search over 1,000,000,000 steps diff_too_expensive. See docs/history.md, "Diffs".';

-- Issue 21, item 1: the row rules of targets, pdcp_logs and manifest_ledger move from CHECK
-- constraints to one C trigger function (sql/schema.sql says why). The same rules under the same
-- names; the rows already stored satisfied them as constraints.
ALTER TABLE patchdiff.targets
    DROP CONSTRAINT targets_current_hash_check,
    DROP CONSTRAINT targets_version_check,
    DROP CONSTRAINT targets_workspace_root_device_check,
    DROP CONSTRAINT targets_workspace_root_inode_check,
    DROP CONSTRAINT targets_workspace_baseline_sha256_check,
    DROP CONSTRAINT targets_workspace_baseline_bytes_check,
    DROP CONSTRAINT targets_workspace_binding_nonce_check,
    DROP CONSTRAINT targets_workspace_binding_proof_check,
    DROP CONSTRAINT targets_check,
    DROP CONSTRAINT targets_check1,
    DROP CONSTRAINT targets_check2;
ALTER TABLE patchdiff.pdcp_logs
    DROP CONSTRAINT pdcp_logs_status_check,
    DROP CONSTRAINT pdcp_logs_failure_stage_check,
    DROP CONSTRAINT pdcp_logs_attempt_check,
    DROP CONSTRAINT pdcp_logs_check;
ALTER TABLE patchdiff.manifest_ledger DROP CONSTRAINT manifest_ledger_change_index_check;
CREATE FUNCTION patchdiff.check_row() RETURNS trigger
LANGUAGE c AS 'MODULE_PATHNAME', 'patchdiff_check_row';
CREATE TRIGGER row_rules AFTER INSERT OR UPDATE ON patchdiff.targets
    FOR EACH ROW EXECUTE FUNCTION patchdiff.check_row();
CREATE TRIGGER row_rules BEFORE INSERT ON patchdiff.pdcp_logs
    FOR EACH ROW EXECUTE FUNCTION patchdiff.check_row();
CREATE TRIGGER row_rules BEFORE INSERT ON patchdiff.manifest_ledger
    FOR EACH ROW EXECUTE FUNCTION patchdiff.check_row();
ALTER TABLE patchdiff.targets ENABLE ALWAYS TRIGGER row_rules;
ALTER TABLE patchdiff.pdcp_logs ENABLE ALWAYS TRIGGER row_rules;
ALTER TABLE patchdiff.manifest_ledger ENABLE ALWAYS TRIGGER row_rules;

-- Who made each attempt and each snapshot: the role the API was called as, by name
-- (sql/schema.sql). Rows written before this version keep NULL.
ALTER TABLE patchdiff.snapshots ADD COLUMN acting_role text;
COMMENT ON COLUMN patchdiff.snapshots.acting_role IS 'The role that initialized the target or saved the checkpoint (as pdcp_logs.acting_role). NULL on snapshots written before 0.2.0 recorded it.';
ALTER TABLE patchdiff.pdcp_logs ADD COLUMN acting_role text;
COMMENT ON COLUMN patchdiff.pdcp_logs.acting_role IS 'The role the attempt was made as: the current role of the statement that called the API (SET ROLE honoured; a SECURITY DEFINER function or a maintenance operation calls as its owner), as for targets.owner_role, by its name at that moment. It tells a grantee''s attempts from the owner''s. NULL on attempts written before 0.2.0 recorded it.';

-- The API functions are SECURITY INVOKER: a call acts for the role PostgreSQL runs it as
-- (current_user), and the library itself switches to the extension's owner for its statements
-- (pg_patchdiff/src/storage/access.rs, Caller::enter). As SECURITY DEFINER functions that took
-- their caller from GetOuterUserId, a call from another role's SECURITY DEFINER function acted
-- with the outer role's targets, and one from an index expression that autovacuum or a
-- superuser's ANALYZE ran acted as the superuser (docs/security.md, "Who a call acts for").
-- Every function of the extension that 0.1.0 made SECURITY DEFINER (all of its API; a database
-- whose objects predate 0.1.0 may lack some, which tests/tests/upgrade.rs updates too).
DO $invoker$
DECLARE f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
               JOIN pg_catalog.pg_depend d ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
                    AND d.objid = p.oid AND d.deptype = 'e'
               JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid
              WHERE e.extname = 'pg_patchdiff' AND p.prosecdef
    LOOP
        EXECUTE pg_catalog.format('ALTER FUNCTION %s SECURITY INVOKER', f);
    END LOOP;
END
$invoker$;

-- patchdiff_list_targets is never compiled by JIT (pg_patchdiff/src/grants.rs, as a fresh
-- install sets it; before plan_cache_mode below, in the order a fresh install has them).
-- Objects from before 0.1.0 may lack the function (docs/sql-api.md).
DO $list$
BEGIN
    IF pg_catalog.to_regprocedure('@extschema@.patchdiff_list_targets(json)') IS NOT NULL THEN
        ALTER FUNCTION @extschema@.patchdiff_list_targets(json) SET jit = off;
    END IF;
END
$list$;

-- Every API function runs its statements on generic plans from its first call (as a fresh
-- install sets in pg_patchdiff/src/lib.rs, generic_plans): custom plans of the attempt-writing
-- statement folded its parameters into constants, copying an acceptance's new text twice more.
DO $generic$
DECLARE f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
               JOIN pg_catalog.pg_depend d ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
                    AND d.objid = p.oid AND d.deptype = 'e'
               JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid
               JOIN pg_catalog.pg_language l ON l.oid = p.prolang
              WHERE e.extname = 'pg_patchdiff' AND l.lanname = 'c'
                AND p.prorettype OPERATOR(pg_catalog.<>) 'pg_catalog.trigger'::pg_catalog.regtype
    LOOP
        EXECUTE pg_catalog.format('ALTER FUNCTION %s SET plan_cache_mode = force_generic_plan', f);
    END LOOP;
END
$generic$;

-- The change feed's silences, as a fresh install has them (sql/schema.sql;
-- pg_patchdiff/src/storage/feed.rs): a change committed without its
-- announcement, because PostgreSQL's notification queue was at or over
-- patchdiff.notify_queue_limit, first takes a number here. Listeners read the last one
-- (pg_sequence_last_value, which needs no access to the schema) to learn that they may have
-- missed changes, and tell their subscribers so, again as those writers end. The number says
-- how many changes went unannounced, never whose.
CREATE SEQUENCE patchdiff.feed_silences;
GRANT SELECT ON SEQUENCE patchdiff.feed_silences TO PUBLIC;
COMMENT ON SEQUENCE patchdiff.feed_silences IS 'Changes committed without their announcement because the notification queue was at or over patchdiff.notify_queue_limit: listeners watch pg_sequence_last_value of it to learn that they may have missed changes.';

-- A role's listing reads its own targets only (sql/schema.sql; pg_patchdiff/src/storage/grants.rs,
-- list_mine_sql): the directory keeps each target's owner, indexed, and follows it when a
-- superuser reassigns a target by UPDATE. Objects from before 0.1.0 may lack the directory: the
-- update then leaves it to the advice patchdiff-mcp gives for them (docs/sql-api.md).
CREATE FUNCTION patchdiff.grant_creation() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
    NEW.target_created_at := (SELECT d.created_at FROM patchdiff.target_directory d
                               WHERE d.target_file_id = NEW.target_file_id FOR SHARE);
    RETURN NEW;
END
$$;
CREATE FUNCTION patchdiff.follow_creation() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
    UPDATE patchdiff.target_grants SET target_created_at = NEW.created_at
     WHERE target_file_id = NEW.target_file_id;
    RETURN NULL;
END
$$;
DO $directory$
BEGIN
    IF pg_catalog.to_regclass('patchdiff.target_directory') IS NULL THEN
        RETURN;
    END IF;
    ALTER TABLE patchdiff.target_directory ADD COLUMN owner_role regrole;
    UPDATE patchdiff.target_directory d SET owner_role = t.owner_role
      FROM patchdiff.targets t WHERE t.target_file_id = d.target_file_id;
    -- A target without a directory row (made by hand; 0.1.0's functions always wrote both) gets
    -- one, from its own row, so that every listing and grant finds it alike.
    INSERT INTO patchdiff.target_directory (target_file_id, created_at, owner_role)
    SELECT t.target_file_id, t.created_at, t.owner_role FROM patchdiff.targets t
     WHERE NOT EXISTS (SELECT FROM patchdiff.target_directory d WHERE d.target_file_id = t.target_file_id);
    ALTER TABLE patchdiff.target_directory ALTER COLUMN owner_role SET NOT NULL;
    CREATE INDEX ON patchdiff.target_directory (owner_role, created_at DESC, target_file_id DESC);
    COMMENT ON TABLE patchdiff.target_directory IS 'Each target''s creation time, owner and workspace binding nonce: the listing order, the listing by owner and the one-target-per-nonce rule, kept off patchdiff.targets so that edits do not maintain their indexes.';
    COMMENT ON COLUMN patchdiff.target_directory.owner_role IS 'patchdiff.targets.owner_role, kept equal by the trigger follow_owner: the index a role''s listing reads.';
    -- Each grant keeps its target's creation time, the directory's, so that a grantee reads
    -- its grants newest first, a page at a time.
    ALTER TABLE patchdiff.target_grants ADD COLUMN target_created_at timestamptz;
    UPDATE patchdiff.target_grants g SET target_created_at = d.created_at
      FROM patchdiff.target_directory d WHERE d.target_file_id = g.target_file_id;
    ALTER TABLE patchdiff.target_grants ALTER COLUMN target_created_at SET NOT NULL;
    DROP INDEX patchdiff.target_grants_grantee_idx;
    CREATE INDEX ON patchdiff.target_grants (grantee, target_created_at DESC, target_file_id DESC);
    IF EXISTS (SELECT FROM patchdiff.target_directory WHERE NOT pg_catalog.isfinite(created_at)) THEN
        RAISE EXCEPTION 'pg_patchdiff: targets % have a creation time that is not finite (set by hand), which a listing cannot page by; nothing was updated',
            (SELECT pg_catalog.string_agg(target_file_id::text, ', ') FROM patchdiff.target_directory
              WHERE NOT pg_catalog.isfinite(created_at))
            USING HINT = 'As a superuser, give each a finite time (UPDATE patchdiff.target_directory SET created_at = ... WHERE target_file_id = ...; and the same in patchdiff.targets), then run ALTER EXTENSION pg_patchdiff UPDATE again.';
    END IF;
    ALTER TABLE patchdiff.target_directory ADD CHECK (pg_catalog.isfinite(created_at));
    CREATE TRIGGER grant_creation BEFORE INSERT OR UPDATE ON patchdiff.target_grants
        FOR EACH ROW EXECUTE FUNCTION patchdiff.grant_creation();
    ALTER TABLE patchdiff.target_grants ENABLE ALWAYS TRIGGER grant_creation;
    CREATE TRIGGER follow_creation AFTER UPDATE OF created_at ON patchdiff.target_directory
        FOR EACH ROW WHEN (OLD.created_at IS DISTINCT FROM NEW.created_at)
        EXECUTE FUNCTION patchdiff.follow_creation();
    ALTER TABLE patchdiff.target_directory ENABLE ALWAYS TRIGGER follow_creation;
    COMMENT ON COLUMN patchdiff.target_grants.target_created_at IS 'The target''s creation time (patchdiff.target_directory.created_at): the order a grantee''s listing reads its grants in.';
END
$directory$;
CREATE FUNCTION patchdiff.follow_owner() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
    UPDATE patchdiff.target_directory SET owner_role = NEW.owner_role
     WHERE target_file_id = NEW.target_file_id;
    RETURN NULL;
END
$$;
CREATE TRIGGER follow_owner AFTER UPDATE OF owner_role ON patchdiff.targets
    FOR EACH ROW WHEN (OLD.owner_role IS DISTINCT FROM NEW.owner_role)
    EXECUTE FUNCTION patchdiff.follow_owner();
ALTER TABLE patchdiff.targets ENABLE ALWAYS TRIGGER follow_owner;
