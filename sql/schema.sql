-- pg_patchdiff storage. Embedded by the extension (extension_sql_file!); released upgrade
-- scripts in this folder are never edited.
--
-- Tables live in schema "patchdiff", which only the extension owner can write. The SQL API
-- functions are the only way ordinary roles change anything: each acts for the role it is called
-- as and runs its own statements as the extension owner (pg_patchdiff/src/storage/access.rs).

DO $$
BEGIN
    IF pg_catalog.current_setting('server_encoding') <> 'UTF8' THEN
        RAISE EXCEPTION 'pg_patchdiff requires a UTF8 database, not %',
            pg_catalog.current_setting('server_encoding')
            USING HINT = 'Create the database with ENCODING ''UTF8''.';
    END IF;
END
$$;

CREATE SCHEMA patchdiff;
REVOKE ALL ON SCHEMA patchdiff FROM PUBLIC;
COMMENT ON SCHEMA patchdiff IS 'pg_patchdiff storage: targets, editing cycles, snapshots, the append-only attempt log and manifest ledger. Write through the patchdiff_* functions only.';

CREATE TABLE patchdiff.targets (
    target_file_id          uuid PRIMARY KEY,
    project_id              uuid,
    filename                text NOT NULL,
    target_type             text NOT NULL,
    current_content         text COMPRESSION lz4 NOT NULL,
    current_hash            text NOT NULL,
    version                 bigint NOT NULL,
    active_editing_cycle_id uuid NOT NULL,
    source_line_endings     json,
    created_at              timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    updated_at              timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    workspace_root_device     bigint,
    workspace_root_inode      bigint,
    workspace_relative_path   text,
    workspace_baseline_sha256 text,
    workspace_baseline_bytes  bigint,
    workspace_binding_nonce   text,
    workspace_binding_proof   text,
    -- regrole: stable across ALTER ROLE ... RENAME, dumped as the role's name and restored to
    -- the new cluster's OID, and kept by pg_upgrade (which preserves role OIDs).
    owner_role              regrole NOT NULL
    -- Row rules (patchdiff.check_row(), below): current_hash and the workspace hashes are
    -- lowercase hex of their length, the counts are >= 0, and the workspace binding's columns
    -- are all set or all NULL, its nonce and proof too, a nonce only with a binding.
);
-- Every accepted edit updates its target's row, and an UPDATE opens every index of the table even
-- when it is a HOT update that changes none: measured, each further index on patchdiff.targets
-- cost a one-edit submission about 1.5% of its server time. So the indexes that only creation
-- and listing need live in patchdiff.target_directory below, and this table keeps its one.
COMMENT ON TABLE patchdiff.targets IS 'One managed document: canonical LF content, its SHA-256 and version.';
COMMENT ON COLUMN patchdiff.targets.current_content IS 'Canonical text: LF line endings only.';
COMMENT ON COLUMN patchdiff.targets.source_line_endings IS 'Line-ending facts of the raw upload, recorded before normalization; NULL when unknown.';
COMMENT ON COLUMN patchdiff.targets.workspace_root_device IS 'Workspace binding: st_dev of the workspace root a target was imported from (NULL: not imported from a workspace).';
COMMENT ON COLUMN patchdiff.targets.workspace_root_inode IS 'Workspace binding: st_ino of the workspace root; a different directory needs a new target.';
COMMENT ON COLUMN patchdiff.targets.workspace_relative_path IS 'Workspace binding: the file''s path relative to the root.';
COMMENT ON COLUMN patchdiff.targets.owner_role IS 'The role in effect (SET ROLE honoured) when the target was created. Members of it may read and write the target and grant others access (patchdiff.target_grants); superusers and members of patchdiff_admin see every target.';
COMMENT ON COLUMN patchdiff.targets.workspace_baseline_bytes IS 'Length of the bytes workspace_baseline_sha256 hashes, so that the publisher reads at most that much (or the new content''s length) of the disk file to check drift.';
COMMENT ON COLUMN patchdiff.targets.workspace_binding_nonce IS 'Workspace binding: the importing front end''s nonce; unique across targets (patchdiff.target_directory), so a binding''s proof serves exactly one target.';
COMMENT ON COLUMN patchdiff.targets.workspace_binding_proof IS 'Workspace binding: HMAC-SHA256 over the root, the path and the nonce under a key only the importing front end holds. The database cannot check it; the front end does before it publishes. NULL: never published.';
COMMENT ON COLUMN patchdiff.targets.workspace_baseline_sha256 IS 'SHA-256 of the bytes the workspace file is expected to hold: the imported bytes, then the last published bytes. A publication refuses any other disk content as external_disk_drift.';

-- One row per target, written in the statement that creates it; only its owner_role changes,
-- with the target's (trigger follow_owner below).
CREATE TABLE patchdiff.target_directory (
    target_file_id          uuid PRIMARY KEY REFERENCES patchdiff.targets,
    -- Finite: a listing's cursor holds it in microseconds (helper-81: 'infinity' set by hand
    -- ended every listing that reached the row).
    created_at              timestamptz NOT NULL CHECK (pg_catalog.isfinite(created_at)),
    -- A binding's proof is tied to the one target it was made for: a copied nonce is refused.
    workspace_binding_nonce text UNIQUE,
    -- patchdiff.targets.owner_role, copied so that a role's listing reads its own targets only.
    owner_role              regrole NOT NULL
);
-- patchdiff_list_targets: newest first, keyset pages; administrators read the first index,
-- every other role the second, one range per role whose privileges it has.
CREATE INDEX ON patchdiff.target_directory (created_at DESC, target_file_id DESC);
CREATE INDEX ON patchdiff.target_directory (owner_role, created_at DESC, target_file_id DESC);
COMMENT ON TABLE patchdiff.target_directory IS 'Each target''s creation time, owner and workspace binding nonce: the listing order, the listing by owner and the one-target-per-nonce rule, kept off patchdiff.targets so that edits do not maintain their indexes.';
COMMENT ON COLUMN patchdiff.target_directory.owner_role IS 'patchdiff.targets.owner_role, kept equal by the trigger follow_owner: the index a role''s listing reads.';

-- Access given by a target's owner to another role (patchdiff_grant / patchdiff_revoke). A
-- grant to a role applies to every role that has its privileges (pg_has_role ... 'USAGE').
CREATE TABLE patchdiff.target_grants (
    target_file_id uuid NOT NULL REFERENCES patchdiff.targets,
    grantee        regrole NOT NULL,
    privilege      text NOT NULL CHECK (privilege IN ('read', 'write')),
    granted_by     regrole NOT NULL,
    granted_at     timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    PRIMARY KEY (target_file_id, grantee),
    -- The target's patchdiff.target_directory.created_at (kept equal by the triggers
    -- grant_creation and follow_creation), so that a grantee's listing reads its grants newest
    -- first, one page at a time, however many it was given.
    target_created_at timestamptz NOT NULL
);
CREATE INDEX ON patchdiff.target_grants (grantee, target_created_at DESC, target_file_id DESC);
COMMENT ON TABLE patchdiff.target_grants IS 'Per-target access for roles other than the owner: read, or write (which includes read).';
COMMENT ON COLUMN patchdiff.target_grants.target_created_at IS 'The target''s creation time (patchdiff.target_directory.created_at): the order a grantee''s listing reads its grants in.';

CREATE TABLE patchdiff.editing_cycles (
    editing_cycle_id uuid PRIMARY KEY,
    target_file_id   uuid NOT NULL REFERENCES patchdiff.targets,
    opened_version   bigint NOT NULL,
    opened_at        timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    closed_version   bigint,
    closed_at        timestamptz,
    -- The largest ledger_sequence of the target when the cycle opened (0 for its first): the
    -- cycle's ledger rows are exactly the target's rows above it, since every acceptance and
    -- every SAVE of a target holds the target's row lock and the sequence only grows. The
    -- active cycle's ledger page reads that range of (target_file_id, ledger_sequence), so the
    -- ledger needs no index by cycle (issue 21, item 1: two index entries fewer per
    -- acceptance of two changes).
    ledger_floor     bigint NOT NULL
);
CREATE INDEX ON patchdiff.editing_cycles (target_file_id);
ALTER TABLE patchdiff.targets
    ADD FOREIGN KEY (active_editing_cycle_id) REFERENCES patchdiff.editing_cycles DEFERRABLE INITIALLY DEFERRED;
COMMENT ON TABLE patchdiff.editing_cycles IS 'Editing cycles: a save closes the active cycle and opens the next.';
COMMENT ON COLUMN patchdiff.editing_cycles.ledger_floor IS 'The largest manifest_ledger.ledger_sequence of the target when the cycle opened (0 for its first cycle): the cycle''s ledger rows are the target''s rows above it.';

CREATE TABLE patchdiff.snapshots (
    snapshot_id      uuid PRIMARY KEY,
    target_file_id   uuid NOT NULL REFERENCES patchdiff.targets,
    editing_cycle_id uuid NOT NULL REFERENCES patchdiff.editing_cycles,
    snapshot_reason  text NOT NULL CHECK (snapshot_reason IN ('initial', 'save_checkpoint')),
    version          bigint NOT NULL,
    content_hash     text NOT NULL,
    content          text COMPRESSION lz4 NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    acting_role      text
);
CREATE UNIQUE INDEX ON patchdiff.snapshots (target_file_id) WHERE snapshot_reason = 'initial';
-- patchdiff_diff (issue 19): the newest snapshot at or below a version, one index range.
CREATE INDEX ON patchdiff.snapshots (target_file_id, version);
COMMENT ON TABLE patchdiff.snapshots IS 'Target content at initialization (the replay base) and at each save checkpoint.';
COMMENT ON COLUMN patchdiff.snapshots.acting_role IS 'The role that initialized the target or saved the checkpoint (as pdcp_logs.acting_role). NULL on snapshots written before 0.2.0 recorded it.';

CREATE TABLE patchdiff.pdcp_logs (
    pdcp_log_id                uuid PRIMARY KEY,
    log_sequence               bigint GENERATED ALWAYS AS IDENTITY,
    -- No foreign keys on target_file_id and editing_cycle_id (issue 21): the only writer
    -- (store::write_attempt) writes them from the target row its own transaction has locked,
    -- and targets and editing cycles are never removed or renumbered (triggers keep_rows and
    -- keep_ids below). Each key was a lookup, a row lock and a WAL record per attempt.
    target_file_id             uuid NOT NULL,
    editing_cycle_id           uuid NOT NULL,
    status                     text NOT NULL,
    protocol_version           text NOT NULL,
    runtime_version            text NOT NULL,
    pdcp_content               text COMPRESSION lz4 NOT NULL,
    pdcp_content_hash          text NOT NULL,
    request_fingerprint        text NOT NULL,
    request_envelope           json NOT NULL,
    client_request_id          text,
    conflicts_with_pdcp_log_id uuid REFERENCES patchdiff.pdcp_logs,
    before_version             bigint NOT NULL,
    before_hash                text NOT NULL,
    after_version              bigint,
    after_hash                 text,
    failure_reason             text,
    failure_detail             text,
    failure_stage              text,
    failed_change_id           text,
    diagnostic                 json,
    validity                   json NOT NULL,
    parent_pdcp_log_id         uuid REFERENCES patchdiff.pdcp_logs,
    attempt                    bigint,
    source                     text NOT NULL,
    intent                     text,
    created_at                 timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    -- patchdiff_submit_changeset (issue 19): the changeset every member's attempt belongs to;
    -- NULL for a single submission. No foreign key: a changeset is only this shared ID.
    changeset_id               uuid,
    -- The role the attempt was made as (see the column's comment); NULL on rows written before
    -- 0.2.0 recorded it.
    acting_role                text
    -- Row rules (patchdiff.check_row(), below): status is accepted or rejected, accepted exactly
    -- when after_version is set and failure_reason is not; failure_stage is one of the three
    -- stages; attempt >= 1.
);
CREATE UNIQUE INDEX ON patchdiff.pdcp_logs (target_file_id, client_request_id) WHERE client_request_id IS NOT NULL;
-- Unique: log pages are keyset pages over (target, log_sequence). log_sequence itself has no
-- index of its own: it is an identity GENERATED ALWAYS, so only the sequence writes it, and no
-- statement reads the log in global sequence order.
CREATE UNIQUE INDEX ON patchdiff.pdcp_logs (target_file_id, log_sequence);
-- History pages filtered by status or record hash, and replay's accepted rows, read one index
-- range whose cost does not grow with the target's history.
CREATE INDEX ON patchdiff.pdcp_logs (target_file_id, status, log_sequence);
CREATE INDEX ON patchdiff.pdcp_logs (target_file_id, pdcp_content_hash, log_sequence);
COMMENT ON TABLE patchdiff.pdcp_logs IS 'Append-only log of every submission attempt, accepted or rejected. UPDATE, DELETE and TRUNCATE are refused.';
COMMENT ON COLUMN patchdiff.pdcp_logs.pdcp_content IS 'The stored record: the proposal as compact ASCII-escaped JSON with sorted keys.';
COMMENT ON COLUMN patchdiff.pdcp_logs.intent IS 'The stored record''s transaction intent (NULL when it has none), written with the attempt so that history pages never decode pdcp_content.';
-- A changeset's members, for the DBA's `WHERE changeset_id = ...`; single submissions (NULL)
-- add no index entry.
CREATE INDEX ON patchdiff.pdcp_logs (changeset_id) WHERE changeset_id IS NOT NULL;
COMMENT ON COLUMN patchdiff.pdcp_logs.changeset_id IS 'The changeset (patchdiff_submit_changeset) whose member this attempt is: every member of one changeset shares it, all accepted or all rejected. NULL for a single submission.';
COMMENT ON COLUMN patchdiff.pdcp_logs.acting_role IS 'The role the attempt was made as: the current role of the statement that called the API (SET ROLE honoured; a SECURITY DEFINER function or a maintenance operation calls as its owner), as for targets.owner_role, by its name at that moment. It tells a grantee''s attempts from the owner''s. NULL on attempts written before 0.2.0 recorded it.';
COMMENT ON COLUMN patchdiff.pdcp_logs.request_fingerprint IS 'SHA-256 of the request envelope (protocol, target, record hash, guards, parent).';

CREATE TABLE patchdiff.manifest_ledger (
    -- A random (v4) ID that no statement looks up: a row is named by its attempt and its
    -- change_index (the primary key).
    ledger_entry_id  uuid NOT NULL,
    ledger_sequence  bigint GENERATED ALWAYS AS IDENTITY,
    -- No foreign key: each ledger row is inserted by the statement that inserts its attempt,
    -- from that insert's RETURNING (store::write_attempt), and patchdiff.pdcp_logs is
    -- append-only, so the attempt exists when the row is written and stays.
    pdcp_log_id      uuid NOT NULL,
    -- Copies of the attempt's own columns, written in the same statement as the attempt row
    -- (store::write_attempt), so that ledger pages read one index range. They carry no foreign
    -- keys either, for the same reasons as the attempt's columns.
    log_sequence     bigint NOT NULL,
    target_file_id   uuid NOT NULL,
    editing_cycle_id uuid NOT NULL,
    before_version   bigint NOT NULL,
    after_version    bigint NOT NULL,
    change_index     integer NOT NULL, -- >= 1 (patchdiff.check_row(), below)
    change_id        text NOT NULL,
    origin           text NOT NULL,
    intent           text,
    rationale        text,
    risk             text,
    derived          json NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    PRIMARY KEY (pdcp_log_id, change_index)
);
-- Unique: ledger pages are keyset pages over (target, ledger_sequence); ledger_sequence is an
-- identity GENERATED ALWAYS and has no index of its own, like pdcp_logs.log_sequence.
CREATE UNIQUE INDEX ON patchdiff.manifest_ledger (target_file_id, ledger_sequence);
-- The default ledger page, the active cycle only (even when it is empty after a SAVE), reads
-- the range of this index above the cycle's ledger_floor (editing_cycles, above).
COMMENT ON TABLE patchdiff.manifest_ledger IS 'Append-only ledger of accepted changes, one row per change, linked to its attempt. UPDATE, DELETE and TRUNCATE are refused.';

-- Append-only, enforced by the database for every role, the owner included.
CREATE FUNCTION patchdiff.refuse_mutation() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
    RAISE EXCEPTION 'patchdiff.% is append-only: % is not allowed', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER append_only BEFORE UPDATE OR DELETE ON patchdiff.pdcp_logs
    FOR EACH ROW EXECUTE FUNCTION patchdiff.refuse_mutation();
CREATE TRIGGER append_only_truncate BEFORE TRUNCATE ON patchdiff.pdcp_logs
    FOR EACH STATEMENT EXECUTE FUNCTION patchdiff.refuse_mutation();
CREATE TRIGGER append_only BEFORE UPDATE OR DELETE ON patchdiff.manifest_ledger
    FOR EACH ROW EXECUTE FUNCTION patchdiff.refuse_mutation();
CREATE TRIGGER append_only_truncate BEFORE TRUNCATE ON patchdiff.manifest_ledger
    FOR EACH STATEMENT EXECUTE FUNCTION patchdiff.refuse_mutation();

-- ALWAYS: session_replication_role = replica (logical replication, pg_restore) must not turn
-- the log into a mutable table either.
ALTER TABLE patchdiff.pdcp_logs ENABLE ALWAYS TRIGGER append_only, ENABLE ALWAYS TRIGGER append_only_truncate;
ALTER TABLE patchdiff.manifest_ledger ENABLE ALWAYS TRIGGER append_only, ENABLE ALWAYS TRIGGER append_only_truncate;

-- The row rules of the three tables every acceptance writes, as one C trigger function
-- (pg_patchdiff/src/storage/rules.rs) rather than CHECK constraints: PostgreSQL 15 rebuilds each
-- CHECK constraint from its stored text in every statement that writes the table, and checks all
-- of a table's on every UPDATE whatever it sets; 16 of them were 8% of the CPU of the edit load
-- (issue 21, item 1; docs/benchmarks.md). The rules and their names are the former constraints';
-- a violation is check_violation (23514). targets' is an AFTER trigger: a BEFORE UPDATE row
-- trigger would lock every edited target row a second time. ENABLE ALWAYS, like the triggers
-- above: replica mode does not skip them.
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

-- Targets and editing cycles are never removed and never change their IDs: no function does,
-- and the attempt log and the ledger, which name them without foreign keys, rely on it. Enforced
-- like append-only, for every role and in replica mode. The key check is an AFTER trigger on the
-- key column only: a BEFORE UPDATE row trigger would make every accepted edit lock its target
-- row a second time, and PostgreSQL skips an UPDATE OF trigger whose column is not set.
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

-- The directory's copy of a target's owner follows the target's: a superuser reassigning
-- targets by UPDATE (docs/security.md) keeps them listed to their new owner. The WHEN clause
-- skips the grants' row-lock UPDATE, which sets owner_role to itself.
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

-- Each grant's copy of its target's creation time is the directory's, whatever writes the grant
-- (the API, a superuser's INSERT or UPDATE, a restore's COPY: helper-81 listed a target twice
-- after a hand-written one), and follows the directory's should a superuser change that by
-- UPDATE (no function does). The grant reads the directory row FOR SHARE, so that a grant and
-- such an UPDATE running at once wait for each other instead of each missing the other's
-- (helper-82); the order of locks stays the target's row, its directory row, the grant.
CREATE FUNCTION patchdiff.grant_creation() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
    NEW.target_created_at := (SELECT d.created_at FROM patchdiff.target_directory d
                               WHERE d.target_file_id = NEW.target_file_id FOR SHARE);
    RETURN NEW;
END
$$;
CREATE TRIGGER grant_creation BEFORE INSERT OR UPDATE ON patchdiff.target_grants
    FOR EACH ROW EXECUTE FUNCTION patchdiff.grant_creation();
ALTER TABLE patchdiff.target_grants ENABLE ALWAYS TRIGGER grant_creation;
CREATE FUNCTION patchdiff.follow_creation() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
    UPDATE patchdiff.target_grants SET target_created_at = NEW.created_at
     WHERE target_file_id = NEW.target_file_id;
    RETURN NULL;
END
$$;
CREATE TRIGGER follow_creation AFTER UPDATE OF created_at ON patchdiff.target_directory
    FOR EACH ROW WHEN (OLD.created_at IS DISTINCT FROM NEW.created_at)
    EXECUTE FUNCTION patchdiff.follow_creation();
ALTER TABLE patchdiff.target_directory ENABLE ALWAYS TRIGGER follow_creation;

-- pg_dump keeps the data of extension tables only when they are registered.
SELECT pg_catalog.pg_extension_config_dump('patchdiff.targets', '');
SELECT pg_catalog.pg_extension_config_dump('patchdiff.editing_cycles', '');
SELECT pg_catalog.pg_extension_config_dump('patchdiff.target_grants', '');
SELECT pg_catalog.pg_extension_config_dump('patchdiff.target_directory', '');
SELECT pg_catalog.pg_extension_config_dump('patchdiff.snapshots', '');
SELECT pg_catalog.pg_extension_config_dump('patchdiff.pdcp_logs', '');
SELECT pg_catalog.pg_extension_config_dump('patchdiff.manifest_ledger', '');

-- Structural observations (contract "Structural Observation and Scoped Submission"): the scope
-- of one symbol at one target version, issued by patchdiff_observe_scope. An observation is an
-- authority row: an observed submission needs one, and consumes it once.
CREATE TABLE patchdiff.target_scope_observations (
    observation_id        uuid PRIMARY KEY,
    target_file_id        uuid NOT NULL REFERENCES patchdiff.targets,
    editing_cycle_id      uuid NOT NULL REFERENCES patchdiff.editing_cycles,
    observation_bundle_id uuid,
    bundle_ordinal        integer CHECK (bundle_ordinal BETWEEN 1 AND 32),
    target_version        bigint NOT NULL CHECK (target_version >= 0),
    target_current_hash   text NOT NULL CHECK (target_current_hash ~ '^[0-9a-f]{64}$'),
    symbol_name           text NOT NULL,
    symbol_kind           text NOT NULL,
    parent                text,
    requested_name        text NOT NULL,
    requested_kind        text,
    language              text NOT NULL,
    engine                text NOT NULL,
    grammar               text NOT NULL,
    scope_start           bigint NOT NULL CHECK (scope_start >= 0),
    scope_end             bigint NOT NULL,
    scope_start_line      integer NOT NULL CHECK (scope_start_line >= 1),
    scope_end_line        integer NOT NULL,
    observed_scope_hash   text NOT NULL CHECK (observed_scope_hash ~ '^[0-9a-f]{64}$'),
    created_at            timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CHECK (scope_start <= scope_end),
    CHECK (scope_start_line <= scope_end_line),
    CHECK ((observation_bundle_id IS NULL) = (bundle_ordinal IS NULL))
);
CREATE UNIQUE INDEX ON patchdiff.target_scope_observations (observation_bundle_id, bundle_ordinal)
    WHERE observation_bundle_id IS NOT NULL;
CREATE INDEX ON patchdiff.target_scope_observations (target_file_id);
COMMENT ON TABLE patchdiff.target_scope_observations IS 'Append-only structural observations: one symbol''s scope (code points of the canonical text) and its SHA-256 at one target version and editing cycle. UPDATE, DELETE and TRUNCATE are refused.';
COMMENT ON COLUMN patchdiff.target_scope_observations.symbol_name IS 'The selected symbol''s path (parent.name), whatever spelling selected it (requested_name).';
COMMENT ON COLUMN patchdiff.target_scope_observations.engine IS 'The structural engine and version that found the scope (patchdiff-waymark@x.y.z); grammar names the tree-sitter grammar.';

-- Consumption: the accepted attempt that used an observation. The primary key is what makes
-- an observation single-use, whatever the code above it does.
CREATE TABLE patchdiff.observation_consumptions (
    observation_id uuid PRIMARY KEY REFERENCES patchdiff.target_scope_observations,
    pdcp_log_id    uuid NOT NULL REFERENCES patchdiff.pdcp_logs,
    group_index    integer CHECK (group_index BETWEEN 1 AND 32),
    created_at     timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    UNIQUE (pdcp_log_id, group_index)
);
CREATE INDEX ON patchdiff.observation_consumptions (pdcp_log_id);
COMMENT ON TABLE patchdiff.observation_consumptions IS 'Append-only links from an accepted observed attempt to the observations it consumed (group_index: its batch group, NULL for the single form).';

CREATE TRIGGER append_only BEFORE UPDATE OR DELETE ON patchdiff.target_scope_observations
    FOR EACH ROW EXECUTE FUNCTION patchdiff.refuse_mutation();
CREATE TRIGGER append_only_truncate BEFORE TRUNCATE ON patchdiff.target_scope_observations
    FOR EACH STATEMENT EXECUTE FUNCTION patchdiff.refuse_mutation();
CREATE TRIGGER append_only BEFORE UPDATE OR DELETE ON patchdiff.observation_consumptions
    FOR EACH ROW EXECUTE FUNCTION patchdiff.refuse_mutation();
CREATE TRIGGER append_only_truncate BEFORE TRUNCATE ON patchdiff.observation_consumptions
    FOR EACH STATEMENT EXECUTE FUNCTION patchdiff.refuse_mutation();
ALTER TABLE patchdiff.target_scope_observations ENABLE ALWAYS TRIGGER append_only, ENABLE ALWAYS TRIGGER append_only_truncate;
ALTER TABLE patchdiff.observation_consumptions ENABLE ALWAYS TRIGGER append_only, ENABLE ALWAYS TRIGGER append_only_truncate;
SELECT pg_catalog.pg_extension_config_dump('patchdiff.target_scope_observations', '');
SELECT pg_catalog.pg_extension_config_dump('patchdiff.observation_consumptions', '');

-- The change feed's silences (pg_patchdiff/src/storage/feed.rs): a change committed without its
-- announcement, because PostgreSQL's notification queue was at or over
-- patchdiff.notify_queue_limit, first takes a number here. Listeners read the last one
-- (pg_sequence_last_value, which needs no access to the schema) to learn that they may have
-- missed changes, and tell their subscribers so, again as those writers end. The number says
-- how many changes went unannounced, never whose.
CREATE SEQUENCE patchdiff.feed_silences;
GRANT SELECT ON SEQUENCE patchdiff.feed_silences TO PUBLIC;
COMMENT ON SEQUENCE patchdiff.feed_silences IS 'Changes committed without their announcement because the notification queue was at or over patchdiff.notify_queue_limit: listeners watch pg_sequence_last_value of it to learn that they may have missed changes.';
