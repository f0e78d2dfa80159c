-- pg_patchdiff 0.1.0 -> 0.2.0 (ALTER EXTENSION pg_patchdiff UPDATE).
\echo Use "ALTER EXTENSION pg_patchdiff UPDATE" to load this file. \quit

-- Nothing to change. 0.2.0's install script, as pgrx generates it from this tree, differs from
-- the frozen 0.1.0 one (sql/releases/pg_patchdiff--0.1.0.sql) only in the source locations pgrx
-- writes as comments (`-- pg_patchdiff/src/lib.rs:109`): 0.2.0 is the first version
-- with an upgrade path, and the version is all that this update changes. The library's C
-- symbols that 0.1.0's functions name are those of 0.2.0, so the objects of an updated database
-- and of a fresh 0.2.0 install are the same (tests/tests/upgrade.rs compares their catalogs).
