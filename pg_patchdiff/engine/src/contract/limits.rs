//! Every limit of the contract, as a named constant beside the clause it implements.

/// "Authoritative Reads": 4,000 default / 8,000 max code points per call.
pub const READ_DEFAULT_CHARS: usize = 4_000;
pub const READ_MAX_CHARS: usize = 8_000;

/// "Exact Search": context_chars default 40 / cap 400; max_results cap 200.
pub const SEARCH_CONTEXT_DEFAULT: usize = 40;
pub const SEARCH_CONTEXT_MAX: usize = 400;
pub const SEARCH_MAX_RESULTS: usize = 200;

/// "Bounded rejection context": at most 256 code points, 4,096 bytes each, 8,192 combined;
/// a failure window replaces the prefix when fewer than 64 code points of the location show.
pub const CONTEXT_MAX_CHARS: usize = 256;
pub const CONTEXT_MAX_BYTES: usize = 4_096;
pub const CONTEXTS_MAX_BYTES: usize = 8_192;
pub const CONTEXT_MIN_VISIBLE: usize = 64;

/// "Exact candidates": five candidates, 20 code points per side, 64-code-point match preview,
/// 8,192 bytes including the wrapper.
pub const CANDIDATES_MAX: usize = 5;
pub const CANDIDATE_CONTEXT_CHARS: usize = 20;
pub const CANDIDATE_PREVIEW_CHARS: usize = 64;
pub const CANDIDATES_MAX_BYTES: usize = 8_192;

/// "Common input and request-key rules": client_request_id is 1..128 printable ASCII.
pub const CLIENT_REQUEST_ID_MAX: usize = 128;

/// change_id: an identifier, bounded so that it stays a short label in evidence.
pub const CHANGE_ID_MAX: usize = 64;

/// Filenames are labels, not paths to open; bounded like a POSIX PATH_MAX.
pub const FILENAME_MAX_BYTES: usize = 4_096;

/// The default of the extension's `patchdiff.max_argument_bytes` (its GUC), which the front end
/// sizes its own limits by: 16 MiB holds a 1 MiB document even when every character arrives
/// `\u`-escaped, with room for the rest of the request.
pub const DEFAULT_MAX_ARGUMENT_BYTES: usize = 16 * 1024 * 1024;

/// The most JSON values one call's arguments may hold (counted from the text before it is
/// parsed: every array element, object member name and member value, and the top value), and
/// the most objects. A parsed value costs far more than its text: 16 MiB of `{"a":0},` (two
/// million one-member objects, each its own hash map) took a backend about 930 MB, 16 MiB of
/// `0,` about 550 MB, so a few such calls at once could make the kernel's OOM killer end a
/// backend, and with it every session of the server. The largest request the caps allow (10,000
/// edits or operations, each an object with every optional member, or a changeset of the same
/// total) holds under a fifth of each (about 150,000 values and 10,000 objects). Under both
/// limits the worst measured was 180 MB of the backend for a 15 MB argument (99,990 objects of
/// four 30-byte strings; helper-93), where any argument that size costs about 90 MB. Code
/// `arguments_too_complex`.
pub const ARGUMENT_VALUES_MAX: usize = 1_000_000;
pub const ARGUMENT_OBJECTS_MAX: usize = 100_000;

/// "patchdiff_submit_replacement": fresh admission of the raw replacement and of its canonical
/// result, at most 1,000,000 code points and 1,048,576 UTF-8 bytes each, inclusive.
pub const REPLACEMENT_MAX_CODE_POINTS: usize = 1_000_000;
pub const REPLACEMENT_MAX_UTF8_BYTES: usize = 1_048_576;

/// "patchdiff_submit_operations": a span text check shows at most 64 code points of what is
/// actually there (`actual_text`).
pub const SPAN_ACTUAL_TEXT_CHARS: usize = 64;

/// "Accepted responses, current state and warnings": at most 16 warning_details (and warnings).
pub const WARNINGS_MAX: usize = 16;

/// "patchdiff_preview": the complete payload is at most 32,768 bytes; accepted evidence is a
/// prefix of at most 32 whole facts, each at most 2,048 bytes, at most 16,384 bytes with the
/// change_facts wrapper; each textual evidence field at most 1,024 code points and 8,192
/// wrapper bytes; the diagnostic wrapper at most 16,384 bytes.
pub const PREVIEW_MAX_BYTES: usize = 32_768;
pub const PREVIEW_FACTS_MAX: usize = 32;
pub const PREVIEW_FACT_MAX_BYTES: usize = 2_048;
pub const PREVIEW_FACTS_MAX_BYTES: usize = 16_384;
pub const PREVIEW_TEXT_MAX_CHARS: usize = 1_024;
pub const PREVIEW_TEXT_MAX_BYTES: usize = 8_192;
pub const PREVIEW_DIAGNOSTIC_MAX_BYTES: usize = 16_384;

/// "Bounded Wire & Context Budgets", history and ledger paging: limit default 50 / cap 200.
pub const HISTORY_DEFAULT_LIMIT: usize = 50;
pub const HISTORY_MAX_LIMIT: usize = 200;

/// "patchdiff_get_pdcp_log": with include_content, at most 1,048,576 UTF-8 bytes of records
/// per page (the first record with content is returned whole).
pub const LOG_CONTENT_PAGE_BYTES: usize = 1_048_576;

/// The stored text (not counting records) a log or ledger page reads: its rows' text columns
/// that it shows whole (a log row's `failure_detail`, `diagnostic`, `source`, ...; a ledger row's
/// `intent`, `rationale`, `derived`, ...), as PostgreSQL stores them. A page stops before the row
/// that would take it over this (always keeping its first row), answers `has_more: true`, and its
/// `next_sequence` continues from there. The contract bounds pages by rows only; caps at write
/// time (`RATIONALE_MAX_BYTES`, `INTENT_MAX_BYTES`, the quoting of unknown names) keep every page
/// written by this version far below it, but rows written before those caps could be megabytes
/// each: 50 such ledger rows made a 700 MB page and a 3.4 GB backend (helper-77). At most six
/// times this (every byte escaped) is written out, plus one row.
pub const HISTORY_PAGE_TEXT_BYTES: usize = 16 * 1_048_576;

/// "patchdiff_get_pdcp_log": an entry's transaction intent, at most 256 code points.
pub const LOG_INTENT_MAX_CHARS: usize = 256;

/// "Exact candidates, consumed matches and near misses": a fresh rejection scans a bounded copy
/// of the failing buffer, at most its first 65,536 code points.
pub const NEAR_MISS_SCAN_MAX_CHARS: usize = 65_536;

/// "Exact candidates, consumed matches and near misses": queries (and the persisted
/// `near_miss_query`) of at most 64 raw code points; longer ones record "match_too_large".
pub const NEAR_MISS_QUERY_MAX_CHARS: usize = 64;

/// "Exact candidates, consumed matches and near misses": distance is accepted when nonzero and
/// at most min(4, max(1, len(query) // 4)); this is the 4 ...
pub const NEAR_MISS_MAX_DISTANCE: usize = 4;
/// ... and this the divisor of len(query).
pub const NEAR_MISS_DISTANCE_DIVISOR: usize = 4;

/// "Exact candidates, consumed matches and near misses": up to three candidates at up to three
/// distinct locations.
pub const NEAR_MISSES_MAX: usize = 3;

/// "Exact candidates, consumed matches and near misses": 16 code points of context per side.
pub const NEAR_MISS_CONTEXT_CHARS: usize = 16;

/// "Exact candidates, consumed matches and near misses": the near misses fit 8,192 wrapper
/// bytes (compact ASCII-escaped JSON).
pub const NEAR_MISSES_MAX_BYTES: usize = 8_192;

/// "Exact candidates, consumed matches and near misses": the persisted
/// `diagnostic.near_miss_query` fits 1,024 wrapper bytes.
pub const NEAR_MISS_QUERY_MAX_BYTES: usize = 1_024;

/// Where the contract is silent (issue 17): the working memory one near-miss search may
/// allocate, in bytes. A search of a 64-code-point query over 65,536 code points needs about
/// 480 KB (the code per code point, twice with the reversed text, the per-end bounds, the
/// 2-byte verification cache, the 64 KiB alphabet table and two bitmaps); one that would need
/// more, or whose allocation fails, stops with `omission_reason: "near_miss_search_failed"`
/// instead of aborting the backend, and the rejection it was searched for stands.
pub const NEAR_MISS_SEARCH_MAX_BYTES: usize = 1_048_576;

/// "patchdiff_submit_observed_operations": a batch has 1..32 groups ...
pub const OBSERVED_MAX_GROUPS: usize = 32;
/// ... and at most 128 operations in total.
pub const OBSERVED_MAX_BATCH_OPERATIONS: usize = 128;
/// "patchdiff_submit_observed_operations": "bounded group summaries"; a summary's
/// `symbol_name` shows at most 256 code points (`symbol_name_truncated` says when it was cut).
pub const OBSERVED_SUMMARY_SYMBOL_CHARS: usize = 256;

// Resource caps where the contract is silent (DESIGN.md: "where the contract is silent a
// documented cap refuses more"; issue 14, "hostile input never takes the database down"). Each
// is refused as `invalid_argument` by the argument parser, before the target is locked and
// before any row is written, so a refused call costs neither time under the lock nor log space.

/// "patchdiff_submit_edits" (and preview of patchdiff-tx/1) says `edits` has minItems 1 and no
/// maximum. An agent's transaction is tens of edits; 10,000 is far beyond any real one and
/// keeps the worst transaction (each match edit must scan its whole buffer to prove its match
/// unique) well under a second on a 1 MiB target. Code `too_many_edits`.
pub const TX1_MAX_EDITS: usize = 10_000;

/// "patchdiff_submit_operations" (and preview of patchdiff-tx/2, and the single observed form)
/// gives `operations` no maximum; the same reasoning and value as [`TX1_MAX_EDITS`]. The observed
/// batch keeps its own contract limit ([`OBSERVED_MAX_BATCH_OPERATIONS`]). Code
/// `too_many_operations`.
pub const TX2_MAX_OPERATIONS: usize = 10_000;

/// The transaction `intent` is "a high-level summary"; the log shows at most 256 code points of
/// it ([`LOG_INTENT_MAX_CHARS`]). 64 KiB of UTF-8 is a long essay; without a cap every rejected
/// call (a stale guard, say) stored whatever megabytes it carried. Code `intent_too_large`.
pub const INTENT_MAX_BYTES: usize = 65_536;

/// An edit's or operation's `rationale` ("per-edit explanation"): the intent's cap, for the same
/// reason and one more. Each accepted change's ledger row stores its rationale, twice (as
/// `rationale`, and as `intent` when present), and a ledger page repeats both for each of up to
/// 200 rows, with no page budget in the contract: 80 accepted edits carrying 7 MB of rationale
/// each (5 MB of table, compressed) made a default ledger page of 700 MB, 3.4 GB of backend memory
/// and a cancel that waited 12 s, and 80 rows one of over 1 GB that failed (helper-77). At this
/// cap a page's rationales are at most 200 x 2 x 64 KiB. Code `rationale_too_large`.
pub const RATIONALE_MAX_BYTES: usize = 65_536;

/// The stored record, `pdcp_content` (compact, ASCII-escaped JSON), of any submission or
/// preview: the bound on what one call can add to the append-only log. 8 MiB holds every record
/// the contract must accept: a whole-document replacement is at most 1,048,576 UTF-8 bytes,
/// which ASCII escaping grows at most six-fold (`\u0001` for one byte) to 6 MiB, plus an intent
/// of at most 64 KiB (at most 384 KiB escaped). A replacement over its own contract limit is
/// left to `replacement_too_large`, which the contract specifies. Code `record_too_large`.
pub const RECORD_MAX_BYTES: usize = 8 * 1_048_576;

/// The default of `patchdiff.max_target_bytes`: the largest text, in UTF-8 bytes, that a target
/// may be created with or grow to. The contract sets no size for a target, but every call on one
/// holds a few copies of its text in the backend (a 335 MB target took 0.7 to 1 GB to read), and
/// one acceptance may add up to a record's 8 MiB, so without a cap any writer could grow its own
/// target, commit by commit, towards PostgreSQL's 1 GB value limit and make every later call on it
/// cost gigabytes. 64 MiB is eight times the largest workspace file or diff input. Code
/// `target_too_large`.
pub const TARGET_MAX_BYTES_DEFAULT: usize = 64 * 1_048_576;

/// The default of `patchdiff.max_changeset_target_bytes`: the most UTF-8 bytes of text the
/// targets of one changeset may hold together. A changeset holds every member's text at once,
/// before and after, besides PostgreSQL's own copies: one changeset of 32 members of 15 MB each
/// (487 MB) took its backend to 1.2 GB, so 32 targets of [`TARGET_MAX_BYTES_DEFAULT`] would take
/// gigabytes per call, and a few calls at once would bring the host's OOM killer, which restarts
/// every backend. At this default a changeset peaks below one submission on the largest target
/// (measured: 4 members of 15.2 MB, 61 MB in all, +345 MB; one edit on one 15.2 MB target,
/// +134 MB, so about 560 MB at 64 MiB). Code `changeset_targets_too_large`.
pub const CHANGESET_TARGETS_MAX_BYTES_DEFAULT: usize = 64 * 1_048_576;

/// Submission metadata stored with every attempt in its request envelope:
/// `expected_target_version`, `expected_current_hash`, `parent_pdcp_log_id`, `attempt` and
/// `client_request_id`, each as compact JSON. Every valid value is under 130 bytes (a 128-byte
/// request key, quoted); 1 KiB leaves room for an invalid one to be audited as such, and no room
/// to store megabytes through a field the record cap does not see. Code `metadata_too_large`.
pub const METADATA_VALUE_MAX_BYTES: usize = 1_024;

/// Contract "patchdiff_submit_edits": `source (string, default "model_response")`, stored with
/// every attempt as sent. It names who proposed the edit ("model_response", "Claude Code",
/// "user edit"); 256 code points is the log's own bound on the prose it shows
/// ([`LOG_INTENT_MAX_CHARS`]), ample for any such label, and keeps a rejected call from storing
/// megabytes through a column no other cap sees. Counted in code points, as every length the
/// contract names. Code `source_too_large`.
pub const SOURCE_MAX_CHARS: usize = 256;

/// "patchdiff_observe_scope": `query` is a case-insensitive substring filter over symbol paths.
/// A path longer than a few hundred bytes is rare; 4 KiB of UTF-8 is more than any real
/// filter. Code `query_too_large`.
pub const OBSERVE_QUERY_MAX_BYTES: usize = 4_096;

/// `patchdiff_submit_changeset` (issue 19 item 1): at most 32 member proposals, and at most
/// 4 MiB of argument text for the whole changeset, both refused before any target is locked.
pub const CHANGESET_MAX_MEMBERS: usize = 32;
pub const CHANGESET_MAX_BYTES: usize = 4 * 1024 * 1024;
/// The edits and operations of all members together: one submission's cap ([`TX1_MAX_EDITS`],
/// [`TX2_MAX_OPERATIONS`]), so that a changeset can cost no more work than one submission can.
/// Without it, 32 members of up to 10,000 each fit in the byte cap (a compact edit is about 30
/// bytes: some 150,000 of them), each match edit scanning its whole target: 16,000 edits on
/// 4 MiB targets took 14 s. Code `too_many_changes`.
pub const CHANGESET_MAX_CHANGES: usize = 10_000;
