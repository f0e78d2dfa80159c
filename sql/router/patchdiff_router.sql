-- The PL/Proxy router of a sharded pg_patchdiff (issue 20; docs/scale-out.md).
--
-- Installed into the router database by scripts/shards.sh, after `CREATE EXTENSION plproxy` and
-- the cluster's configuration: the SQL/MED server `patchdiff` with one connection string per
-- partition (p0 .. p<n-1>, n a power of two), and a user mapping FOR PUBLIC without a user, so
-- that every call reaches its shard as the calling role and the shard's tenancy rules hold.
--
-- Every function of the API keeps its name, arguments and answer: `patchdiff_X(args json)
-- RETURNS json` runs on the partition that owns `args->>'target_file_id'`; a new target is
-- created on a partition the router chooses, with an ID that routes back to it; the list of
-- targets is merged from every partition. The shards answer; the router decides only where.

-- The whole script is one transaction: a role that creates one of the router's names while it
-- runs (it can watch the schema appear) waits for the script's own object of that name and then
-- fails, or its object is found by the last check below and the script rolls back (helper-51).
BEGIN;

-- Names resolve in pg_catalog only, while this script runs and in every function it makes that
-- is not inlined into its caller's query (those name pg_catalog's objects themselves): PostgreSQL
-- prefers a function or operator of exactly the argument types a call uses over pg_catalog's
-- polymorphic or variadic one (unnest, array ||, format, to_json, a float8 * int4), so one
-- created in `public` by any role that may create there (every role, in a database made before
-- PostgreSQL 15) would run as the superuser running this script, or as every tenant calling
-- through the router (helper-49).
SET LOCAL search_path = pg_catalog, pg_temp;

-- CREATE OR REPLACE keeps the owner of a function that exists, and CREATE SCHEMA IF NOT EXISTS
-- takes a schema as it is: a role that made `public.patchdiff_read_target(json)` or the schema
-- `patchdiff_router` first would own what every tenant's call runs (helper-49). So the script
-- refuses to run over any such object that a role other than a superuser owns, before it
-- changes anything and again as its last step.
CREATE OR REPLACE FUNCTION pg_temp.refuse_planted() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  planted text;
BEGIN
  SELECT string_agg(what, '; ' ORDER BY what) INTO planted FROM (
    SELECT 'schema ' || quote_ident(n.nspname) || ' (owner ' || quote_ident(r.rolname) || ')' AS what
      FROM pg_namespace n JOIN pg_roles r ON r.oid = n.nspowner
     WHERE n.nspname = 'patchdiff_router' AND NOT r.rolsuper
    UNION ALL
    -- Every function of the router's schema, whatever its name (patchdiff-mcp calls
    -- partition_conninfos and publication_partition; refuse_user_mappings guards the mappings:
    -- helper-52), and those of the API's names in public.
    SELECT 'function ' || p.oid::regprocedure::text || ' (owner ' || quote_ident(r.rolname) || ')'
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
      JOIN pg_roles r ON r.oid = p.proowner
     WHERE (n.nspname = 'patchdiff_router' OR (n.nspname = 'public' AND p.proname LIKE 'patchdiff%'))
       AND NOT r.rolsuper
    UNION ALL
    SELECT 'relation ' || c.oid::regclass::text || ' (owner ' || quote_ident(r.rolname) || ')'
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      JOIN pg_roles r ON r.oid = c.relowner
     WHERE n.nspname = 'patchdiff_router' AND NOT r.rolsuper
    UNION ALL
    SELECT 'type ' || t.oid::regtype::text || ' (owner ' || quote_ident(r.rolname) || ')'
      FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
      JOIN pg_roles r ON r.oid = t.typowner
     WHERE n.nspname = 'patchdiff_router' AND NOT r.rolsuper
    UNION ALL
    SELECT 'operator ' || o.oid::regoperator::text || ' (owner ' || quote_ident(r.rolname) || ')'
      FROM pg_operator o JOIN pg_namespace n ON n.oid = o.oprnamespace
      JOIN pg_roles r ON r.oid = o.oprowner
     WHERE n.nspname = 'patchdiff_router' AND NOT r.rolsuper
    UNION ALL
    -- Its owner may change the partitions' connection strings: send calls anywhere, or drop
    -- the pinned search path (helper-53).
    SELECT 'foreign server ' || quote_ident(f.srvname) || ' (owner ' || quote_ident(r.rolname) || ')'
      FROM pg_foreign_server f JOIN pg_roles r ON r.oid = f.srvowner
     WHERE f.srvname = 'patchdiff' AND NOT r.rolsuper) o;
  IF planted IS NOT NULL THEN
    RAISE EXCEPTION 'patchdiff: the router''s objects exist already, owned by a role that is not a superuser: %', planted
      USING ERRCODE = '42501',
            DETAIL = 'Installing over them would leave that role the owner of what every call through the router runs.',
            HINT = 'Drop them (and find out who made them), then run this script again; an object given to a superuser with ALTER ... OWNER keeps what its maker set on it.';
  END IF;
END $$;
DO $$ BEGIN PERFORM pg_temp.refuse_planted(); END $$;

-- The database's owner owns its schema `public` (PostgreSQL 15): it may drop the API's functions
-- there and make its own, which patchdiff-mcp then refuses or leaves out (helper-53).
DO $$
DECLARE
  owner name;
BEGIN
  SELECT r.rolname INTO owner FROM pg_database d JOIN pg_roles r ON r.oid = d.datdba
   WHERE d.datname = current_database() AND NOT r.rolsuper;
  IF owner IS NOT NULL THEN
    RAISE WARNING 'patchdiff: the router database belongs to role %, which is not a superuser', owner
      USING HINT = 'It may replace the router''s functions in public. ALTER DATABASE ... OWNER TO a superuser (docs/scale-out.md, "Roles").';
  END IF;
END $$;

CREATE SCHEMA IF NOT EXISTS patchdiff_router;
-- Every role calls through the router as itself; the shards decide what it may touch.
GRANT USAGE ON SCHEMA patchdiff_router TO PUBLIC;

-- Who a call reaches its shard as. PL/Proxy connects with the user (and password) of the
-- caller's user mapping of the server `patchdiff`, and PostgreSQL lets every role that may use a
-- foreign server create, alter and drop its own mapping: any role could give itself
-- `OPTIONS (user 'postgres')` and reach every shard as the superuser, or as another tenant
-- (helper-45). So in the router database only superusers may change user mappings; a role's own
-- mapping, with its own password, is a DBA's to make (docs/scale-out.md, "Roles"). DROP OWNED
-- drops the role's mappings too (helper-47): a role could have shed the one a DBA gave it.
CREATE OR REPLACE FUNCTION patchdiff_router.refuse_user_mappings() RETURNS event_trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF NOT COALESCE((SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user), false) THEN
    RAISE EXCEPTION 'patchdiff: only a superuser may % in the router database (role %)',
      lower(tg_tag), current_user
      USING ERRCODE = '42501',
            DETAIL = 'PL/Proxy reaches each shard as the user a role''s user mapping names, so a mapping a role makes for itself could name any role.',
            HINT = 'A superuser makes each role''s mapping, with that role''s own user name and password (docs/scale-out.md, "Roles").';
  END IF;
END $$;
DROP EVENT TRIGGER IF EXISTS patchdiff_router_user_mappings;
CREATE EVENT TRIGGER patchdiff_router_user_mappings ON ddl_command_start
  WHEN TAG IN ('CREATE USER MAPPING', 'ALTER USER MAPPING', 'DROP USER MAPPING', 'DROP OWNED')
  EXECUTE FUNCTION patchdiff_router.refuse_user_mappings();

-- A mapping made before that (by the role itself, or by a DBA) that names another user than its
-- role is reported each time this script runs: it decides who that role is on every shard.
DO $$
DECLARE
  m record;
BEGIN
  FOR m IN SELECT u.usename::text AS role, substr(o, 6) AS named
             FROM pg_catalog.pg_user_mappings u, pg_catalog.unnest(u.umoptions) o
            WHERE u.srvname = 'patchdiff' AND u.usename <> 'public' AND o LIKE 'user=%'
              AND substr(o, 6) <> u.usename::text
  LOOP
    RAISE WARNING 'patchdiff: the user mapping of role % on server patchdiff connects to the shards as %',
      m.role, m.named
      USING HINT = 'Unless a superuser meant that, drop it: DROP USER MAPPING FOR ' || quote_ident(m.role) || ' SERVER patchdiff (docs/scale-out.md, "Roles").';
  END LOOP;
END $$;

-- The partition of a target ID (before PL/Proxy masks it with n - 1): the ID's first 32 bits,
-- its first eight hex digits as a big-endian integer (pg_patchdiff's target::partition rule).
-- An argument that names no such ID goes to partition 0, whose shard answers it as any shard
-- would (invalid_target_id, not_found).
CREATE OR REPLACE FUNCTION patchdiff_router.partition_of_id(id text) RETURNS int4
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN id OPERATOR(pg_catalog.~) '^[0-9A-Fa-f]{8}'::pg_catalog.text
              THEN ('x'::pg_catalog.text OPERATOR(pg_catalog.||) pg_catalog.substr(id, 1, 8))
                   ::pg_catalog.bit(32)::pg_catalog.int4
              ELSE 0 END
$$;

-- The router's limit on the arguments' size (helper-88). Every shard refuses arguments over its
-- patchdiff.max_argument_bytes (default 16 MiB) before it reads them, but the router used to
-- parse and copy them first, to route them: a 64 MiB argument took a router backend to 597 MB,
-- and a 64 MiB list_targets argument to 855 MB, with 8 shard backends of 271 MB each. So every
-- public function of the router refuses arguments over its own limit before anything else, with
-- the shard's answer, byte for byte.
--
-- The limit is the placeholder patchdiff.max_argument_bytes on the router (the same units as the
-- shard's setting: '16MB', '16777216'), else the extension's default, 16 MiB; a DBA who changes
-- the shards' limit sets the router's too (docs/scale-out.md). The router has no pg_patchdiff, so
-- its setting is a placeholder that any role may SET in its own session: lowering it there is
-- honoured (the role only refuses its own calls sooner), but a value above 16 MiB counts only
-- when it is the one ALTER DATABASE or ALTER ROLE ... SET gave (pg_db_role_setting, which only a
-- superuser may write for a placeholder), or in a superuser's session: any other session is held
-- at 16 MiB (PostgreSQL does not say where a placeholder's value came from, so postgresql.conf
-- cannot raise it either).
--
-- The arguments' size: their text's byte length, read from the value's header as the shard reads
-- it (toast_raw_datum_size), never copied or decompressed: PostgreSQL's own textoctetlen, which
-- reads only the varlena header and so applies to json, whose datum is text's. (`args::text` is
-- an I/O conversion for json: two copies of the arguments.)
CREATE OR REPLACE FUNCTION patchdiff_router.octets(args json) RETURNS int4
LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE AS 'textoctetlen';

-- The limit as this session states it, within the shard setting's range. Inlined into its
-- callers' expressions, so every name is qualified.
CREATE OR REPLACE FUNCTION patchdiff_router.stated_limit() RETURNS int8
LANGUAGE sql STABLE AS $$
  SELECT pg_catalog.int8larger(1024::pg_catalog.int8, pg_catalog.int8smaller(2147483647::pg_catalog.int8,
    CASE WHEN pg_catalog.current_setting('patchdiff.max_argument_bytes'::pg_catalog.text, true) IS NULL
           OR pg_catalog.current_setting('patchdiff.max_argument_bytes'::pg_catalog.text, true)
              OPERATOR(pg_catalog.=) ''::pg_catalog.text
         THEN 16777216::pg_catalog.int8
         ELSE pg_catalog.pg_size_bytes(pg_catalog.current_setting('patchdiff.max_argument_bytes'::pg_catalog.text, true))
    END))
$$;

-- The answer to arguments of `size` bytes when they are over the router's limit, else NULL: the
-- shard's answer (pg_patchdiff's args::too_large), written as compactly as the shard writes it,
-- in the `form` of the function's answers: '' (most), 'page' (the history pages add an empty
-- page) or 'preview' (which repeats the detail as `detail` first).
-- Called only for arguments over min(stated limit, 16 MiB) (patchdiff_router.args_refusal), so the
-- look at where a larger limit came from costs nothing on ordinary calls.
CREATE OR REPLACE FUNCTION patchdiff_router.too_large(size int8, form text) RETURNS json
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  lim int8 := patchdiff_router.stated_limit();
  detail text;
BEGIN
  IF lim > 16777216
     AND NOT COALESCE((SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = session_user), false)
     AND NOT EXISTS (
       SELECT FROM pg_catalog.pg_db_role_setting s, unnest(s.setconfig) c
        WHERE s.setdatabase IN (0, (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = current_database()))
          AND s.setrole IN (0, (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = session_user))
          AND c = 'patchdiff.max_argument_bytes=' || current_setting('patchdiff.max_argument_bytes')) THEN
    lim := 16777216;
  END IF;
  IF size <= lim THEN
    RETURN NULL;
  END IF;
  detail := format('the arguments are %s bytes, over this server''s limit of %s bytes (patchdiff.max_argument_bytes); nothing was read or written',
                   size, lim);
  RETURN ('{"status":"invalid_argument","code":"arguments_too_large",'
          || CASE WHEN form = 'preview' THEN '"detail":"' || detail || '",' ELSE '' END
          || '"failure_detail":"' || detail || '"'
          || CASE WHEN form = 'page' THEN ',"entries":[],"has_more":false,"next_sequence":null' ELSE '' END
          || '}')::json;
END $$;

-- The refusal of arguments too large for the router, or NULL. Inlined into every public
-- function's first statement.
CREATE OR REPLACE FUNCTION patchdiff_router.args_refusal(args json, form text) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN patchdiff_router.octets(args)
                   OPERATOR(pg_catalog.>) pg_catalog.int8smaller(patchdiff_router.stated_limit(), 16777216::pg_catalog.int8)
              THEN patchdiff_router.too_large(patchdiff_router.octets(args), form) END
$$;

-- The same for arguments of `size` bytes (the typed patchdiff_submit's texts together).
CREATE OR REPLACE FUNCTION patchdiff_router.size_refusal(size int8) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN size OPERATOR(pg_catalog.>)
                   pg_catalog.int8smaller(patchdiff_router.stated_limit(), 16777216::pg_catalog.int8)
              THEN patchdiff_router.too_large(size, ''::pg_catalog.text) END
$$;

-- Whether arguments are over the limit this session states: the router's own functions (which
-- every role may call directly) route them to partition 0 without reading them, whose shard
-- refuses them.
CREATE OR REPLACE FUNCTION patchdiff_router.oversized(args json) RETURNS bool
LANGUAGE sql STABLE AS $$
  SELECT COALESCE(patchdiff_router.octets(args) OPERATOR(pg_catalog.>) patchdiff_router.stated_limit(), false)
$$;

-- The arguments as the router reads them. PostgreSQL's json operators decode every string of
-- the object they walk and fail on the escapes text cannot hold (\u0000 and the surrogates
-- \ud800-\udfff, which a shard answers with an audited rejection or invalid_argument): the
-- router must still find the target of such a call, so it reads a copy in which no escape is
-- left that could fail. The copy is only read; the shard gets the arguments as sent.
--
-- Four plain replacements, each one pass over the text, none of which makes it longer (the
-- regular expression this replaced took 1.3-1.9 µs an escape: 0.9-1.2 s of the router's CPU for
-- 4 MB of \u0000; docs/benchmarks.md, "The router's copy of the arguments"). First every escaped
-- backslash becomes two slashes, so that every backslash left begins another escape; then
-- \u0000 becomes \u0020, and every escape \ud... or \uD... (the surrogates, and U+D000-U+D7FF)
-- becomes an escaped backslash followed by the rest of its letters. No string of the copy holds
-- an escape text cannot, and what routing reads keeps its value: a target ID's leading hex
-- digits, a workspace binding's nonce (32 lowercase hex digits, or the shard refuses it), a
-- changeset's members' IDs, `limit`, whether client_request_id is present. (An escaped
-- backslash used to become \u005c: the copy of 342 MiB of them passed PostgreSQL's 1 GB limit,
-- and the routed call failed with "out of memory", helper-69.) The literals are E'' strings,
-- which a session with standard_conforming_strings = off reads the same way.
CREATE OR REPLACE FUNCTION patchdiff_router.readable(args json) RETURNS json
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  t text := args::text;
BEGIN
  IF strpos(t, E'\\u') = 0 THEN
    RETURN args;
  END IF;
  t := replace(t, E'\\\\', '//');
  t := replace(t, E'\\u0000', E'\\u0020');
  t := replace(t, E'\\ud', E'\\\\d');
  t := replace(t, E'\\uD', E'\\\\D');
  RETURN t::json;
END $$;

-- A top-level string field of the arguments, or NULL.
CREATE OR REPLACE FUNCTION patchdiff_router.field(args json, key text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v json;
BEGIN
  IF json_typeof(args) IS DISTINCT FROM 'object' THEN
    RETURN NULL;
  END IF;
  -- One walk of the copy: the field's value is read from itself.
  v := patchdiff_router.readable(args)->key;
  IF json_typeof(v) = 'string' THEN
    RETURN v #>> '{}';
  END IF;
  RETURN NULL;
END $$;

-- One SQL expression, inlined into PL/Proxy's RUN ON query: the quick way for arguments without
-- a \u escape (nearly all), patchdiff_router.field for the others.
-- Arguments over the router's limit are not read: partition 0, whose shard refuses them. STABLE,
-- as the limit is a setting (an IMMUTABLE function that reads one would not be inlined).
CREATE OR REPLACE FUNCTION patchdiff_router.partition_of(args json) RETURNS int4
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT patchdiff_router.partition_of_id(
    CASE WHEN patchdiff_router.oversized(args) THEN NULL
         WHEN pg_catalog.json_typeof(args) IS NULL
           OR NOT pg_catalog.json_typeof(args) OPERATOR(pg_catalog.=) 'object'::pg_catalog.text
         THEN NULL
         WHEN pg_catalog.strpos(args::pg_catalog.text, E'\\u'::pg_catalog.text) OPERATOR(pg_catalog.=) 0
         THEN
           CASE WHEN pg_catalog.json_typeof(args OPERATOR(pg_catalog.->) 'target_file_id'::pg_catalog.text)
                     OPERATOR(pg_catalog.=) 'string'::pg_catalog.text
                THEN args OPERATOR(pg_catalog.->>) 'target_file_id'::pg_catalog.text END
         ELSE patchdiff_router.field(args, 'target_file_id'::pg_catalog.text) END)
$$;

-- How many partitions the cluster has (PL/Proxy's own count of its connection strings).
CREATE OR REPLACE FUNCTION patchdiff_router.partitions() RETURNS int4
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE n int4;
BEGIN
  SELECT count(*) INTO n
    FROM pg_catalog.pg_foreign_server s, unnest(s.srvoptions) o
   WHERE s.srvname = 'patchdiff' AND o ~ '^p[0-9]+=';
  RETURN n;
END $$;

-- The partition a workspace binding's nonce chooses for a new target (patchdiff_router.
-- create_target), or NULL for arguments without one.
CREATE OR REPLACE FUNCTION patchdiff_router.binding_partition(args json) RETURNS int4
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  binding json := CASE WHEN NOT patchdiff_router.oversized(args) AND json_typeof(args) = 'object'
                       THEN patchdiff_router.readable(args)->'workspace_binding' END;
BEGIN
  IF json_typeof(binding) = 'object' AND json_typeof(binding->'nonce') = 'string' THEN
    RETURN (hashtext(binding->>'nonce') & 2147483647) % patchdiff_router.partitions();
  END IF;
  RETURN NULL;
END $$;

-- Where a workspace publication runs: the one step that cannot cross PL/Proxy, because its SAVE
-- must stay open in the publisher's own transaction while the file is installed. patchdiff-mcp
-- connects to that partition directly, as the role it calls the router as (docs/scale-out.md),
-- and sets patchdiff.target_partition/target_partitions there, so that a target it creates in
-- that transaction (the files profile's new file) gets an ID that routes back. The partition of
-- `args`' target; without one, of its workspace binding's nonce; else 0. The connection string
-- is the SQL/MED option p<k>, which holds no password (the user mapping names none).
CREATE OR REPLACE FUNCTION patchdiff_router.publication_partition(
    args json, OUT conninfo text, OUT partition int4, OUT partitions int4)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  partitions := patchdiff_router.partitions();
  -- Arguments over the router's limit are not read: partition 0's shard refuses them.
  partition := CASE WHEN patchdiff_router.oversized(args) THEN 0
                    WHEN patchdiff_router.field(args, 'target_file_id') IS NOT NULL
                    THEN patchdiff_router.partition_of(args) & (partitions - 1)
                    ELSE COALESCE(patchdiff_router.binding_partition(args), 0) END;
  SELECT substr(o, strpos(o, '=') + 1) INTO conninfo
    FROM pg_catalog.pg_foreign_server s, unnest(s.srvoptions) o
   WHERE s.srvname = 'patchdiff' AND o LIKE 'p' || partition || '=%';
END $$;

-- Every partition's connection string (the SQL/MED options p<k>, which hold no password), each
-- once, in partition order: patchdiff-mcp's change feed LISTENs on each of those databases, since
-- a shard announces its own commits (NOTIFY is per database) and the router has none.
CREATE OR REPLACE FUNCTION patchdiff_router.partition_conninfos() RETURNS SETOF text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT conninfo FROM (
    SELECT substr(o, strpos(o, '=') + 1) AS conninfo,
           min(substr(o, 2, strpos(o, '=') - 2)::int4) AS first
      FROM pg_catalog.pg_foreign_server s, unnest(s.srvoptions) o
     WHERE s.srvname = 'patchdiff' AND o ~ '^p[0-9]+='
     GROUP BY 1) c
  ORDER BY first
$$;

-- A failed call whose shard could not be reached: it never started there, so nothing was
-- written, and it may simply be sent again. SQLSTATE 08001 (sqlclient_unable_to_establish_
-- sqlconnection) with the partition in the message; patchdiff-mcp answers it as a retryable
-- `unavailable`. Any other failure (a shard that went away during the call) is raised as it came:
-- its outcome is unknown.
CREATE OR REPLACE FUNCTION patchdiff_router.unavailable(partition int4, message text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  -- A call on every partition (the list) names the one PL/Proxy could not reach.
  partition := COALESCE(partition, substring(message FROM E'\\[patchdiff_p([0-9]+)\\]')::int4);
  -- A shard that refused the calling role is not an outage.
  PERFORM patchdiff_router.login_refused(partition, message);
  RAISE EXCEPTION 'patchdiff: partition % is unavailable; the call did not start there and nothing was written: %',
    partition, message
    USING ERRCODE = '08001',
          HINT = 'Retry later; every target on other partitions is unaffected.';
END $$;

-- A connection the shard refused because of the calling role (helper-88): the role does not exist
-- there, may not log in there, fails its password or certificate check, or matches no pg_hba.conf
-- line. PL/Proxy connects to each partition as the calling role (docs/scale-out.md, "Roles"), so
-- this is the deployment's configuration, not an outage, and resending changes nothing until a
-- DBA changes it: SQLSTATE 28000 (invalid_authorization_specification), naming the role and the
-- partition, without the hint to retry (it used to be 08001, "Retry later", which patchdiff-mcp
-- answered as a retryable `unavailable` for ever). The call did not start there. Nothing is
-- raised for any other message.
CREATE OR REPLACE FUNCTION patchdiff_router.login_refused(partition int4, message text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF message ~* E'(role "[^"]*" does not exist|role "[^"]*" is not permitted to log in|authentication failed|no pg_hba\\.conf entry|pg_hba\\.conf rejects|no password supplied|password is required|permission denied for database)' THEN
    partition := COALESCE(partition, substring(message FROM E'\\[patchdiff_p([0-9]+)\\]')::int4);
    RAISE EXCEPTION 'patchdiff: role % cannot log in on partition %: its shard refused the connection, so the call did not start there and nothing was written: %',
      quote_ident(current_user), partition, message
      USING ERRCODE = '28000',
            HINT = 'Every role that calls through the router must exist on every shard cluster, with LOGIN, and pass the shards'' authentication (docs/scale-out.md, "Roles"); the call fails the same way until a DBA changes that.';
  END IF;
END $$;

-- A read that did not finish within the server's query_timeout (scripts/shards.sh sets it).
-- PL/Proxy checks that timeout whenever a connection of the call shows activity, not only after
-- a cancel: a call still reading its answer past it (an answer arriving in several reads after a
-- long wait, or another partition's activity in RUN ON ALL) is ended with "query timeout", and
-- PL/Proxy closes the connection, which rolls the shard's transaction back. A read writes
-- nothing, so it is SQLSTATE 57014 (query_canceled), which patchdiff-mcp answers `cancelled`,
-- nothing written, retryable (it used to be PL/Proxy's XX000, raised as it came). A write's is
-- 40003 (patchdiff_router.completion_unknown). A partition NULL is one of a call on every
-- partition (the list), which PL/Proxy does not name.
CREATE OR REPLACE FUNCTION patchdiff_router.read_timed_out(partition int4, message text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  seconds text;
BEGIN
  SELECT substr(o, strpos(o, '=') + 1) INTO seconds
    FROM pg_catalog.pg_foreign_server s, unnest(s.srvoptions) o
   WHERE s.srvname = 'patchdiff' AND substr(o, 1, 14) = 'query_timeout=';
  RAISE EXCEPTION 'patchdiff: % did not finish the call within the router''s query_timeout (% s), so the router ended it; it was a read, so nothing was written: %',
    COALESCE('partition ' || partition, 'a partition'), COALESCE(seconds, '?'), message
    USING ERRCODE = '57014',
          HINT = 'Send it again. A call that needs longer (a large target behind a long lock) needs a longer query_timeout on the router''s server patchdiff (docs/scale-out.md, "When a call''s outcome is unknown").';
END $$;

-- A call whose pooled connection to its shard turned out to be closed (the shard restarted or
-- ended the session while it was idle, or during the call): PL/Proxy drops that connection. Such a
-- call may or may not have run on the shard, so it is sent once more only where that is safe: a
-- read, or a write with a client_request_id (the shard recovers its recorded outcome, or runs
-- it once). The second try reconnects: it answers, or finds the shard unavailable.
CREATE OR REPLACE FUNCTION patchdiff_router.lost(state text, message text) RETURNS bool
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT state IN ('57P01', '57P02', '57P03')
      OR message ~* '(server closed the connection|connection to server was lost|could not send data|could not receive data|no connection to the server)'
$$;

CREATE OR REPLACE FUNCTION patchdiff_router.not_connected(message text) RETURNS bool
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT message ~* '(could not connect|connection refused|no such file or directory|PQconnectPoll|connect failed|timeout expired|the database system is (starting up|shutting down|in recovery mode))'
$$;

-- Whether a write whose connection was lost (patchdiff_router.lost) may have run on its shard,
-- and committed there: unless the shard ended the session with a message first (57P01-57P03,
-- an administrator's shutdown or termination: a session ended before its commit rolls back, and
-- one found ended when the call was sent never ran it) or the call could not be sent at all.
-- A connection that simply broke (it closed, or an answer never came) may have carried the call
-- to its commit.
CREATE OR REPLACE FUNCTION patchdiff_router.may_have_run(state text, message text) RETURNS bool
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT NOT (state IN ('57P01', '57P02', '57P03') OR message ~* 'could not send data')
$$;

-- A write whose outcome on its shard is unknown: it was cancelled on the router (a
-- statement_timeout, a cancel request) while its shard ran it, or its connection broke during
-- the call and the partition could not be reached again. PL/Proxy runs the call in a transaction
-- of its own on the shard, which may have committed before the cancel reached it (one waiting for
-- a synchronous standby has), so the router's cancel or a failed second try does not mean that
-- nothing was written (helper-59). SQLSTATE 40003 (statement_completion_unknown): patchdiff-mcp
-- answers it `outcome_unknown`, never `cancelled` or `unavailable`.
CREATE OR REPLACE FUNCTION patchdiff_router.completion_unknown(partition int4, message text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RAISE EXCEPTION 'patchdiff: the call on partition % may have run and committed there, so its outcome is unknown: %',
    partition, message
    USING ERRCODE = '40003',
          HINT = 'Resend it with the same client_request_id: the shard answers its recorded outcome, or runs it once. Without a key, read the target (its version, patchdiff_get_pdcp_log) before sending it again.';
END $$;

-- A changeset (issue 19: patchdiff_submit_changeset) is atomic on one database only: PL/Proxy
-- runs each call in its own transaction on one partition and cannot commit several partitions
-- together. So a changeset whose member targets all live on one partition runs there, and one
-- whose targets live on several is refused here, before any partition is called, naming them
-- (SQLSTATE 0A000, feature_not_supported); nothing is written anywhere. Arguments the shard
-- refuses anyway (no members array, over 32 members) go to partition 0, which answers them as
-- any shard would.
CREATE OR REPLACE FUNCTION patchdiff_router.changeset_partition(args json) RETURNS int4
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $b$
DECLARE
  r json;
  n int4 := patchdiff_router.partitions();
  parts int4[];
BEGIN
  IF patchdiff_router.oversized(args) OR json_typeof(args) IS DISTINCT FROM 'object' THEN
    RETURN 0;
  END IF;
  r := patchdiff_router.readable(args);
  IF json_typeof(r->'members') IS DISTINCT FROM 'array' OR json_array_length(r->'members') > 32 THEN
    RETURN 0;
  END IF;
  SELECT array_agg(DISTINCT patchdiff_router.partition_of(m) & (n - 1) ORDER BY patchdiff_router.partition_of(m) & (n - 1))
    INTO parts
    FROM json_array_elements(r->'members') m
   WHERE json_typeof(m) = 'object' AND json_typeof(m->'target_file_id') = 'string';
  IF cardinality(parts) > 1 THEN
    RAISE EXCEPTION 'patchdiff: the changeset''s targets live on partitions %; PL/Proxy cannot commit several partitions atomically, so the changeset was refused and nothing was written',
      array_to_string(parts, ', ')
      USING ERRCODE = '0A000',
            HINT = 'Send one changeset per partition, or keep the targets one change spans on one partition (docs/scale-out.md).';
  END IF;
  RETURN COALESCE(parts[1], 0);
END $b$;

-- The caller's patchdiff.strict_observation_mode as the shard is sent it: 'true' or 'false', or
-- NULL when the caller set none (or RESET it: a reset placeholder reads as ''). The router has no
-- pg_patchdiff, so any value may be SET here; a value that is not a boolean is refused here
-- (SQLSTATE 22P02) instead of reaching a shard session before the library is loaded there, where
-- it would be dropped with a WARNING and strict mode would be off (helper-45). An SQL function,
-- inlined into the caller's expression (no call of its own on every routed call), so every name
-- in it is qualified: it runs with the caller's search_path, where a type `bool` of its own
-- could come first (helper-47).
CREATE OR REPLACE FUNCTION patchdiff_router.strict_mode() RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN pg_catalog.current_setting('patchdiff.strict_observation_mode', true)
                   OPERATOR(pg_catalog.=) ''::pg_catalog.text THEN NULL
              ELSE pg_catalog.current_setting('patchdiff.strict_observation_mode', true)
                   ::pg_catalog.bool::pg_catalog.text END
$$;

-- The public functions below run on every routed call, so they carry no `SET search_path` (a
-- setting saved and restored on each call cost about 0.04 ms of the router's 0.2): every name
-- and operator in them is qualified instead, and types too (a domain `text` with a CHECK of its
-- own, first on a caller's search path, would run in a declaration).
--
-- Every function of one target: a PL/Proxy function that runs it on the target's partition, and
-- the public function of the API, which calls it and names the partition when it cannot be
-- reached. The caller's patchdiff.strict_observation_mode, when it set one on the router, holds
-- on the shard for that call (a session setting does not cross PL/Proxy by itself, and strict
-- mode must never be lost on the way). A changeset runs on the partition of all its members
-- (patchdiff_router.changeset_partition, above).
DO $do$
DECLARE
  f text;
  reads text[] := ARRAY[
    'patchdiff_export_target', 'patchdiff_find_occurrences', 'patchdiff_get_manifest_ledger',
    'patchdiff_get_pdcp_log', 'patchdiff_get_target', 'patchdiff_preview', 'patchdiff_read_lines',
    'patchdiff_read_target', 'patchdiff_replay', 'patchdiff_diff'];
  writes text[] := ARRAY[
    'patchdiff_grant', 'patchdiff_observe_scope', 'patchdiff_revoke', 'patchdiff_save',
    'patchdiff_submit_edits', 'patchdiff_submit_observed_operations',
    'patchdiff_submit_operations', 'patchdiff_submit_replacement', 'patchdiff_submit_changeset'];
  route text;
BEGIN
  FOREACH f IN ARRAY reads || writes
  LOOP
    route := CASE WHEN f = 'patchdiff_submit_changeset'
                 THEN 'patchdiff_router.changeset_partition(args)'
                 ELSE 'patchdiff_router.partition_of(args)' END;
    EXECUTE format($q$
      CREATE OR REPLACE FUNCTION patchdiff_router.%1$s(args json, strict text) RETURNS json
      LANGUAGE plproxy AS $b$
        CLUSTER 'patchdiff';
        RUN ON %2$s;
        SELECT public.%1$s(args)
         WHERE CASE WHEN strict IS NULL THEN true
                    ELSE pg_catalog.set_config('patchdiff.strict_observation_mode', strict, true) IS NOT NULL END;
      $b$$q$, f, route);
    EXECUTE format($q$
      CREATE OR REPLACE FUNCTION public.%1$s(args json) RETURNS json
      LANGUAGE plpgsql AS $b$
      DECLARE
        -- Arguments over the router's limit: the shard's answer, before anything reads them.
        refusal pg_catalog.json := patchdiff_router.args_refusal(args, %4$L::pg_catalog.text);
        strict_mode pg_catalog.text;
        -- A first try of a write that may have run before its connection broke.
        may_have_run pg_catalog.bool := false;
      BEGIN
        IF refusal IS NOT NULL THEN
          RETURN refusal;
        END IF;
        strict_mode := patchdiff_router.strict_mode();
        FOR try IN 1 .. 2 LOOP
          BEGIN
            RETURN patchdiff_router.%1$s(args, strict_mode);
          EXCEPTION
            WHEN query_canceled THEN
              -- A write cancelled here may have committed on its shard.
              IF NOT %2$L THEN
                PERFORM patchdiff_router.completion_unknown(
                  %3$s OPERATOR(pg_catalog.&)
                    (patchdiff_router.partitions() OPERATOR(pg_catalog.-) 1), SQLERRM);
              END IF;
              RAISE;
            WHEN OTHERS THEN
              -- The server's query_timeout (scripts/shards.sh): the call did not finish in
              -- time. A write may have committed; a read wrote nothing.
              IF SQLERRM OPERATOR(pg_catalog.~) 'query timeout$' THEN
                IF %2$L THEN
                  PERFORM patchdiff_router.read_timed_out(
                    %3$s OPERATOR(pg_catalog.&)
                      (patchdiff_router.partitions() OPERATOR(pg_catalog.-) 1), SQLERRM);
                END IF;
                PERFORM patchdiff_router.completion_unknown(
                  %3$s OPERATOR(pg_catalog.&)
                    (patchdiff_router.partitions() OPERATOR(pg_catalog.-) 1),
                  'its shard did not answer within the router''s query_timeout: '
                    OPERATOR(pg_catalog.||) SQLERRM);
              END IF;
              IF patchdiff_router.not_connected(SQLERRM) THEN
                IF may_have_run THEN
                  PERFORM patchdiff_router.completion_unknown(
                    %3$s OPERATOR(pg_catalog.&)
                      (patchdiff_router.partitions() OPERATOR(pg_catalog.-) 1),
                    'its connection broke during the call and the partition could not be reached again: '
                      OPERATOR(pg_catalog.||) SQLERRM);
                END IF;
                PERFORM patchdiff_router.unavailable(
                  %3$s OPERATOR(pg_catalog.&)
                    (patchdiff_router.partitions() OPERATOR(pg_catalog.-) 1), SQLERRM);
              END IF;
              -- Sent once more only where that is safe (patchdiff_router.lost).
              IF try OPERATOR(pg_catalog.=) 2 OR NOT patchdiff_router.lost(SQLSTATE, SQLERRM)
                 OR NOT (%2$L
                         OR patchdiff_router.field(args, 'client_request_id'::pg_catalog.text)
                            IS NOT NULL) THEN
                RAISE;
              END IF;
              may_have_run := NOT %2$L AND patchdiff_router.may_have_run(SQLSTATE, SQLERRM);
          END;
        END LOOP;
      END $b$$q$, f, f = ANY (reads), route,
        -- The form of the function's refusals (patchdiff_router.too_large).
        CASE WHEN f IN ('patchdiff_get_manifest_ledger', 'patchdiff_get_pdcp_log') THEN 'page'
             WHEN f = 'patchdiff_preview' THEN 'preview' ELSE '' END);
  END LOOP;
END $do$;

-- The typed submission (its target is its first argument).
CREATE OR REPLACE FUNCTION patchdiff_router.patchdiff_submit(
    target_file_id uuid, intent text, edits json, expected_target_version bigint,
    expected_current_hash text, client_request_id text, parent_pdcp_log_id uuid, attempt bigint,
    source text, include_correlation_id boolean, strict text) RETURNS json
LANGUAGE plproxy AS $b$
  CLUSTER 'patchdiff';
  RUN ON patchdiff_router.partition_of_id(target_file_id::text);
  SELECT public.patchdiff_submit(target_file_id, intent, edits, expected_target_version,
           expected_current_hash, client_request_id, parent_pdcp_log_id, attempt, source,
           include_correlation_id)
   WHERE CASE WHEN strict IS NULL THEN true
              ELSE pg_catalog.set_config('patchdiff.strict_observation_mode', strict, true) IS NOT NULL END;
$b$;

CREATE OR REPLACE FUNCTION public.patchdiff_submit(
    target_file_id uuid, intent text, edits json, expected_target_version bigint DEFAULT NULL,
    expected_current_hash text DEFAULT NULL, client_request_id text DEFAULT NULL,
    parent_pdcp_log_id uuid DEFAULT NULL, attempt bigint DEFAULT NULL, source text DEFAULT 'sql',
    include_correlation_id boolean DEFAULT false) RETURNS json
LANGUAGE plpgsql AS $b$
DECLARE
  -- Arguments over the router's limit, measured as the shard measures them (pg_patchdiff's
  -- TypedEdits::arguments): `edits` alone when it is over, else the texts together.
  refusal pg_catalog.json := COALESCE(patchdiff_router.args_refusal(edits, ''::pg_catalog.text),
    patchdiff_router.size_refusal(
      COALESCE(patchdiff_router.octets(edits), 0::pg_catalog.int4)::pg_catalog.int8
      OPERATOR(pg_catalog.+) COALESCE(pg_catalog.octet_length(intent), 0::pg_catalog.int4)
      OPERATOR(pg_catalog.+) COALESCE(pg_catalog.octet_length(expected_current_hash), 0::pg_catalog.int4)
      OPERATOR(pg_catalog.+) COALESCE(pg_catalog.octet_length(client_request_id), 0::pg_catalog.int4)
      OPERATOR(pg_catalog.+) COALESCE(pg_catalog.octet_length(source), 0::pg_catalog.int4)));
BEGIN
  IF refusal IS NOT NULL THEN
    RETURN refusal;
  END IF;
  RETURN patchdiff_router.patchdiff_submit(target_file_id, intent, edits, expected_target_version,
    expected_current_hash, client_request_id, parent_pdcp_log_id, attempt, source,
    include_correlation_id, patchdiff_router.strict_mode());
EXCEPTION
  WHEN query_canceled THEN
    -- A write cancelled here may have committed on its shard.
    PERFORM patchdiff_router.completion_unknown(
      patchdiff_router.partition_of_id(target_file_id::pg_catalog.text) OPERATOR(pg_catalog.&)
        (patchdiff_router.partitions() OPERATOR(pg_catalog.-) 1),
      SQLERRM);
    RAISE;
  WHEN OTHERS THEN
  -- The server's query_timeout: the shard never answered (helper-60).
  IF SQLERRM OPERATOR(pg_catalog.~) 'query timeout$' THEN
    PERFORM patchdiff_router.completion_unknown(
      patchdiff_router.partition_of_id(target_file_id::pg_catalog.text) OPERATOR(pg_catalog.&)
        (patchdiff_router.partitions() OPERATOR(pg_catalog.-) 1),
      'its shard did not answer within the router''s query_timeout: ' OPERATOR(pg_catalog.||) SQLERRM);
  END IF;
  IF patchdiff_router.not_connected(SQLERRM) THEN
    PERFORM patchdiff_router.unavailable(
      patchdiff_router.partition_of_id(target_file_id::pg_catalog.text) OPERATOR(pg_catalog.&)
        (patchdiff_router.partitions() OPERATOR(pg_catalog.-) 1),
      SQLERRM);
  END IF;
  RAISE;
END $b$;

-- New targets: created on partition `p` of `n` with an ID of that partition (pg_patchdiff's
-- patchdiff.target_partition and patchdiff.target_partitions, set for this call only: the filter
-- runs before the function).
CREATE OR REPLACE FUNCTION patchdiff_router.initialize_target_on(p int4, n int4, args json)
RETURNS json LANGUAGE plproxy AS $b$
  CLUSTER 'patchdiff';
  RUN ON p;
  SELECT public.patchdiff_initialize_target(args)
   WHERE pg_catalog.set_config('patchdiff.target_partition', p::text, true) IS NOT NULL
     AND pg_catalog.set_config('patchdiff.target_partitions', n::text, true) IS NOT NULL;
$b$;

CREATE OR REPLACE FUNCTION patchdiff_router.handle_upload_on(p int4, n int4, args json)
RETURNS json LANGUAGE plproxy AS $b$
  CLUSTER 'patchdiff';
  RUN ON p;
  SELECT public.patchdiff_handle_upload(args)
   WHERE pg_catalog.set_config('patchdiff.target_partition', p::text, true) IS NOT NULL
     AND pg_catalog.set_config('patchdiff.target_partitions', n::text, true) IS NOT NULL;
$b$;

-- One round trip to partition `p` on the router's connection to it.
CREATE OR REPLACE FUNCTION patchdiff_router.ping(p int4) RETURNS int4
LANGUAGE plproxy AS $b$
  CLUSTER 'patchdiff';
  RUN ON p;
  SELECT 1;
$b$;

-- Whether partition `p` answers now. A connection its shard closed while it was idle (a
-- restart) is found on the first ping and dropped by PL/Proxy; the second ping opens a new one.
-- So a creation, which has no request key and cannot be sent twice, never runs on a connection
-- already known to be dead.
CREATE OR REPLACE FUNCTION patchdiff_router.reachable(p int4) RETURNS bool
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $b$
BEGIN
  FOR try IN 1 .. 2 LOOP
    BEGIN
      PERFORM patchdiff_router.ping(p);
      RETURN true;
    EXCEPTION WHEN OTHERS THEN
      IF patchdiff_router.not_connected(SQLERRM) THEN
        -- A shard that refuses the calling role is reachable, for no call of that role.
        PERFORM patchdiff_router.login_refused(p, SQLERRM);
        RETURN false;
      END IF;
      IF try = 2 OR NOT patchdiff_router.lost(SQLSTATE, SQLERRM) THEN
        RAISE;
      END IF;
    END;
  END LOOP;
  RETURN false;
END $b$;

-- A partition for a new target: a random one; when its shard cannot be reached, the next ones in
-- turn (the creation never started there), until every partition was tried. Each is pinged
-- first (patchdiff_router.reachable).
--
-- Except for a target bound to a workspace file: its binding's nonce chooses the partition, and
-- no other is tried. A shard refuses a nonce that already binds another of its targets, so that
-- one proof serves exactly one target (docs/workspace.md, "The binding proof"); with the nonce
-- deciding where, a nonce copied from a real import always meets its original there.
CREATE OR REPLACE FUNCTION patchdiff_router.create_target(upload bool, args json) RETURNS json
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $b$
DECLARE
  n int4 := patchdiff_router.partitions();
  first int4 := floor(random() * n)::int4;
  tries int4 := n;
  bound int4 := patchdiff_router.binding_partition(args);
  p int4;
  answer json;
  last_error text;
BEGIN
  IF bound IS NOT NULL THEN
    first := bound;
    tries := 1;
  END IF;
  FOR k IN 0 .. tries - 1 LOOP
    p := (first + k) % n;
    IF NOT patchdiff_router.reachable(p) THEN
      last_error := 'partition ' || p || ' did not answer';
      CONTINUE;
    END IF;
    BEGIN
      IF upload THEN
        answer := patchdiff_router.handle_upload_on(p, n, args);
      ELSE
        answer := patchdiff_router.initialize_target_on(p, n, args);
      END IF;
    EXCEPTION
      WHEN query_canceled THEN
        -- The shard may have made the target before the cancel reached it.
        PERFORM patchdiff_router.completion_unknown(p, SQLERRM);
      WHEN OTHERS THEN
      -- The server's query_timeout: the shard may have made the target meanwhile.
      IF SQLERRM ~ 'query timeout$' THEN
        PERFORM patchdiff_router.completion_unknown(p,
          'its shard did not answer within the router''s query_timeout: ' || SQLERRM);
      END IF;
      IF NOT patchdiff_router.not_connected(SQLERRM) THEN
        RAISE;
      END IF;
      PERFORM patchdiff_router.login_refused(p, SQLERRM);
      last_error := SQLERRM;
      CONTINUE;
    END;
    -- A shard whose pg_patchdiff does not know patchdiff.target_partition makes an ordinary
    -- random ID, which routes elsewhere: never answered as a success.
    -- The answer is read through patchdiff_router.field: a refusal may quote an argument's name
    -- with an escape that PostgreSQL's json operators cannot decode (\u0000).
    IF patchdiff_router.field(answer, 'status') = 'ok'
       AND patchdiff_router.partition_of_id(answer->>'target_file_id') & (n - 1) <> p THEN
      RAISE EXCEPTION 'patchdiff: partition % created target % with an ID of partition %: its pg_patchdiff does not place new targets (patchdiff.target_partition); update it to the router''s release',
        p, answer->>'target_file_id', patchdiff_router.partition_of_id(answer->>'target_file_id') & (n - 1)
        USING ERRCODE = 'XX000';
    END IF;
    RETURN answer;
  END LOOP;
  PERFORM patchdiff_router.unavailable(p, CASE WHEN tries = 1 THEN 'the partition of the workspace binding: '
                                               ELSE 'every partition: ' END || last_error);
  RETURN NULL;
END $b$;

-- Arguments over the router's limit are refused before create_target reads them (COALESCE
-- evaluates its second argument only when the first is NULL).
CREATE OR REPLACE FUNCTION public.patchdiff_initialize_target(args json) RETURNS json
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
  SELECT COALESCE(patchdiff_router.args_refusal(args, ''), patchdiff_router.create_target(false, args))
$$;

CREATE OR REPLACE FUNCTION public.patchdiff_handle_upload(args json) RETURNS json
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
  SELECT COALESCE(patchdiff_router.args_refusal(args, ''), patchdiff_router.create_target(true, args))
$$;

-- The list of targets, from every partition: each answers its own first page after the same
-- cursor, newest first; the router keeps the newest `limit` of all (the same order: created_at,
-- then target_file_id, both descending) and writes the answer as a shard writes it, each
-- target's JSON as its shard wrote it. A refusal (a bad argument) is the same on every partition
-- and is answered as the first one wrote it.
CREATE OR REPLACE FUNCTION patchdiff_router.list_targets_all(args json) RETURNS SETOF json
LANGUAGE plproxy AS $b$
  CLUSTER 'patchdiff';
  RUN ON ALL;
  TARGET public.patchdiff_list_targets;
$b$;

CREATE OR REPLACE FUNCTION public.patchdiff_list_targets(args json) RETURNS json
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $b$
DECLARE
  pages json[];
  page json;
  lim int8;
  more bool := false;
  shown int8;
  total int8;
  last_at text;
  last_id text;
  body text;
  -- Arguments over the router's limit: the shard's answer, before they are read or sent to every
  -- partition (a 64 MiB filename_prefix took the router to 855 MB and 8 shards to 271 MB each).
  refusal json := patchdiff_router.args_refusal(args, '');
BEGIN
  IF refusal IS NOT NULL THEN
    RETURN refusal;
  END IF;
  -- A read, so safe to send again: each connection found closed (a shard restarted) is dropped
  -- by PL/Proxy, and the next try opens a new one; at most one try per partition more.
  FOR try IN 1 .. patchdiff_router.partitions() + 1 LOOP
    BEGIN
      pages := ARRAY(SELECT patchdiff_router.list_targets_all(args));
      EXIT;
    EXCEPTION WHEN OTHERS THEN
      -- The server's query_timeout: a read, nothing was written.
      IF SQLERRM ~ 'query timeout$' THEN
        PERFORM patchdiff_router.read_timed_out(NULL, 'listing needs every partition: ' || SQLERRM);
      END IF;
      IF patchdiff_router.not_connected(SQLERRM) THEN
        PERFORM patchdiff_router.unavailable(NULL, 'listing needs every partition: ' || SQLERRM);
      END IF;
      IF try > patchdiff_router.partitions() OR NOT patchdiff_router.lost(SQLSTATE, SQLERRM) THEN
        RAISE;
      END IF;
    END;
  END LOOP;
  FOREACH page IN ARRAY pages LOOP
    -- A refusal may quote an argument's name with an escape json operators cannot decode.
    IF patchdiff_router.field(page, 'status') IS DISTINCT FROM 'ok' THEN
      RETURN page;
    END IF;
    more := more OR json_typeof(page->'next_cursor') = 'string';
  END LOOP;
  -- The page size, as every shard read it from the same (valid: else it was refused above)
  -- arguments: null or absent is 50; larger than 500 is 500 (pg_patchdiff's target::tenancy).
  lim := CASE WHEN json_typeof(patchdiff_router.readable(args)->'limit') = 'number'
              THEN least((patchdiff_router.readable(args)->>'limit')::numeric, 500)::int8
              ELSE 50 END;
  SELECT count(*) INTO total FROM unnest(pages) pg, json_array_elements(pg->'targets');
  WITH t AS (
    SELECT e AS item, (e->>'created_at')::timestamptz AS at, (e->>'target_file_id')::uuid AS id
      FROM unnest(pages) pg, json_array_elements(pg->'targets') e
  ), kept AS (
    SELECT * FROM t ORDER BY at DESC, id DESC LIMIT lim
  )
  SELECT count(*), string_agg(item::text, ',' ORDER BY at DESC, id DESC),
         (array_agg((extract(epoch FROM at) * 1000000)::int8::text ORDER BY at ASC, id ASC))[1],
         (array_agg(id::text ORDER BY at ASC, id ASC))[1]
    INTO shown, body, last_at, last_id
    FROM kept;
  more := more OR total > shown;
  RETURN ('{"status":"ok","count":' || shown || ',"targets":[' || COALESCE(body, '') ||
          '],"next_cursor":' ||
          CASE WHEN more AND shown > 0 THEN to_json(last_at || '.' || last_id)::text ELSE 'null' END ||
          '}')::json;
END $b$;

-- What patchdiff-mcp reads of a database before it serves it (its Db::connect), for the router:
-- the pg_patchdiff of partition 0 (every partition runs the same release), as json: the
-- installed and available versions, whether an update path leads from one to the other, whether
-- the objects are at least release 0.1.0's, and the extension's functions. patchdiff-mcp lists
-- the tools whose functions both the shards and this router have.
-- The query runs on partition 0 as the calling role, with that role's search_path there: every
-- name in it is pg_catalog's, qualified.
CREATE OR REPLACE FUNCTION patchdiff_router.shard_facts() RETURNS json
LANGUAGE plproxy AS $b$
  CLUSTER 'patchdiff';
  RUN ON 0;
  SELECT pg_catalog.json_build_object(
      'installed'::pg_catalog.text, e.extversion,
      'available'::pg_catalog.text, a.default_version,
      'update_path'::pg_catalog.text,
      COALESCE(NOT a.default_version OPERATOR(pg_catalog.=) e.extversion, false) AND EXISTS (
          SELECT FROM pg_catalog.pg_extension_update_paths('pg_patchdiff'::pg_catalog.name) u
           WHERE u.source OPERATOR(pg_catalog.=) e.extversion
             AND u.target OPERATOR(pg_catalog.=) a.default_version AND u.path IS NOT NULL),
      -- From the catalog: to_regclass would need USAGE on the extension's private schema, which
      -- a login role that is not a superuser does not have.
      'since_0_1_0'::pg_catalog.text, EXISTS (
          SELECT FROM pg_catalog.pg_class c
            JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
           WHERE n.nspname OPERATOR(pg_catalog.=) 'patchdiff'::pg_catalog.name
             AND c.relname OPERATOR(pg_catalog.=) 'target_directory'::pg_catalog.name),
      'functions'::pg_catalog.text, (
          SELECT pg_catalog.json_agg(p.proname::pg_catalog.text ORDER BY p.proname)
            FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_depend d
              ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
             AND d.objid OPERATOR(pg_catalog.=) p.oid
             AND d.deptype OPERATOR(pg_catalog.=) 'e'::pg_catalog.char
             AND d.refobjid OPERATOR(pg_catalog.=) e.oid))
    FROM pg_catalog.pg_extension e LEFT JOIN pg_catalog.pg_available_extensions a
      ON a.name OPERATOR(pg_catalog.=) e.extname
   WHERE e.extname OPERATOR(pg_catalog.=) 'pg_patchdiff'::pg_catalog.name;
$b$;

-- The search_path each partition's session really has. PL/Proxy runs each call on its shard as
-- the calling role, in a session with that role's settings there, and names the argument types
-- unqualified (`SELECT public.patchdiff_x($1::json)`): with a search_path that puts `public`
-- first (ALTER ROLE ... SET search_path), a domain `json` and a function of that name planted
-- there would answer every routed call (helper-51). So each partition's connection string pins
-- it (`options=-csearch_path=pg_catalog,pg_temp`, which no role setting overrides;
-- scripts/shards.sh writes them so; docs/scale-out.md "Roles"). The string alone does not say
-- what a shard's session gets (a pooler may drop `options`; a later -c wins: helper-52), so the
-- script asks every partition, and warns for each one whose path does not start with
-- pg_catalog, or that it cannot ask.
-- A setting that came with the connection (source `client`) is one no role or database setting
-- overrides; the installer's own path says nothing about a tenant's role settings (helper-53).
CREATE OR REPLACE FUNCTION patchdiff_router.partition_search_paths() RETURNS SETOF text
LANGUAGE plproxy AS $b$
  CLUSTER 'patchdiff';
  RUN ON ALL;
  SELECT pg_catalog.current_database()::pg_catalog.text OPERATOR(pg_catalog.||) ': '
         OPERATOR(pg_catalog.||) s.setting OPERATOR(pg_catalog.||) ' (from '
         OPERATOR(pg_catalog.||) s.source OPERATOR(pg_catalog.||) ')'
    FROM pg_catalog.pg_settings s WHERE s.name OPERATOR(pg_catalog.=) 'search_path';
$b$;
-- Bounded: PL/Proxy waits without end for a partition that accepts and never answers, and this
-- transaction holds the router's objects meanwhile (helper-53).
SET LOCAL statement_timeout = '30s';
DO $$
DECLARE
  seen text;
BEGIN
  FOR seen IN SELECT * FROM patchdiff_router.partition_search_paths() LOOP
    IF seen !~ E': "?pg_catalog"?,.* \\(from client\\)$' THEN
      RAISE WARNING 'patchdiff: the routed sessions of %, not pinned to pg_catalog first by the connection', seen
        USING HINT = 'Add options=-csearch_path=pg_catalog,pg_temp to its connection string, and let a pooler pass options through (docs/scale-out.md, "Roles").';
    END IF;
  END LOOP;
EXCEPTION
  WHEN query_canceled THEN
    RAISE WARNING 'patchdiff: the partitions did not all answer within 30 s when asked for their search_path'
      USING HINT = 'Run this script again once every partition answers (docs/scale-out.md, "Roles").';
  WHEN OTHERS THEN
    RAISE WARNING 'patchdiff: could not ask the partitions for their search_path: %', SQLERRM
      USING HINT = 'Run this script again once every partition answers (docs/scale-out.md, "Roles").';
END $$;
SET LOCAL statement_timeout = 0;

DO $$ BEGIN PERFORM pg_temp.refuse_planted(); END $$;
COMMIT;
