//! `patchdiff_observe_scope` (contract "Structural Observation and Scoped Submission"):
//! candidate discovery, exact selection, observation pages and bundles over a target's
//! structural outline. The extension parses (crate `patchdiff-waymark`), persists the issued
//! observations and calls these functions for every decision and every answer.

use crate::contract::args::{ArgError, Args};
use crate::contract::interrupt;
use crate::contract::json::type_name;
use crate::contract::limits::{OBSERVE_QUERY_MAX_BYTES, READ_DEFAULT_CHARS, READ_MAX_CHARS};
use crate::contract::uuid::canonical_uuid;
use crate::contract::words::Status;
use crate::scope::{Outline, Symbol};
use crate::target::TargetView;
use crate::text::{char_len, sha256_hex};
use serde_json::{Map, Value, json};

pub const OBSERVE_ARGS: &[&str] = &[
    "target_file_id",
    "query",
    "symbol_name",
    "kind",
    "observation_id",
    "offset",
    "max_chars",
    "include_line_starts",
    "selections",
];
/// The fields of one bundle selection.
pub const SELECTION_FIELDS: &[&str] = &["symbol_name", "kind"];
/// "at most 200 matching candidates" (ambiguity); discovery lists are bounded the same way.
pub const SCOPE_CANDIDATES_MAX: usize = 200;
/// "selections: [...] (1–32 exact, unique, nonempty, disjoint scopes)".
pub const BUNDLE_SELECTIONS_MAX: usize = 32;
/// "Total scope contents cap at 65,536 code points".
pub const BUNDLE_SCOPE_MAX_CHARS: usize = 65_536;
/// "initial text totals cap at 32,768 (BUNDLE_RESPONSE_TOO_LARGE)".
pub const BUNDLE_TEXT_MAX_CHARS: usize = 32_768;

/// A page of an observed scope: `offset` within the scope, at most `max_chars` code points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    pub offset: usize,
    pub max_chars: usize,
    pub include_line_starts: bool,
}

/// One exact selection: a symbol's path or name, optionally narrowed by kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    pub symbol_name: String,
    pub kind: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObserveRequest {
    /// Candidate discovery: no observation is issued.
    Candidates {
        query: Option<String>,
        kind: Option<String>,
    },
    /// Exact selection of one symbol, persisted as an observation.
    Select { selection: Selection, page: Page },
    /// A page of an issued observation (`mode: "scope_page"`).
    Page { observation_id: String, page: Page },
    /// 1..32 selections issued together from one snapshot and one outline.
    Bundle {
        selections: Vec<Selection>,
        page: Page,
    },
}

/// Contract: "must be nonblank when supplied ... rejects whitespace-only strings, including
/// Unicode whitespace. Nonblank strings are not implicitly trimmed." Omission and null mean
/// absent.
fn nonblank(v: Option<&Value>, what: &str, code: &'static str) -> Result<Option<String>, ArgError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.chars().all(char::is_whitespace) => Err(ArgError::new(
            code,
            format!(
                "{what} must be a nonblank string (whitespace-only strings, including Unicode whitespace, are blank)"
            ),
        )),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(ArgError::new(
            code,
            format!("{what} must be a string or null, not {}", type_name(v)),
        )),
    }
}

fn conflict(detail: &str) -> ArgError {
    ArgError::new("observe_mode_conflict", detail.to_owned())
}

/// Parses `patchdiff_observe_scope` arguments (`target_file_id` is read by the caller).
pub fn parse_observe(a: &Args) -> Result<ObserveRequest, ArgError> {
    let query = nonblank(a.get("query"), "query", "invalid_query")?;
    if let Some(q) = query
        .as_deref()
        .filter(|q| q.len() > OBSERVE_QUERY_MAX_BYTES)
    {
        return Err(ArgError::new(
            "query_too_large",
            format!(
                "query is {} UTF-8 bytes, over the limit of {OBSERVE_QUERY_MAX_BYTES}; it filters symbol paths, send a shorter one",
                q.len()
            ),
        )
        .with("limit", json!(OBSERVE_QUERY_MAX_BYTES))
        .with("actual", json!(q.len())));
    }
    let symbol_name = nonblank(a.get("symbol_name"), "symbol_name", "invalid_symbol_name")?;
    let kind = nonblank(a.get("kind"), "kind", "invalid_kind")?;
    let observation_id = match a.get("observation_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(canonical_uuid(s).ok_or_else(|| {
            ArgError::new(
                "invalid_observation_id",
                "observation_id must be a hyphenated UUID string issued by patchdiff_observe_scope",
            )
        })?),
        Some(v) => {
            return Err(ArgError::new(
                "invalid_observation_id",
                format!(
                    "observation_id must be a UUID string or null, not {}",
                    type_name(v)
                ),
            ));
        }
    };
    let offset = a
        .opt_int("offset", 0, false, "invalid_offset")?
        .unwrap_or(0);
    let offset = usize::try_from(offset).unwrap_or(usize::MAX);
    let max_chars = a
        .opt_int("max_chars", 1, true, "invalid_max_chars")?
        .map_or(READ_DEFAULT_CHARS, |n| {
            (n as u64).min(READ_MAX_CHARS as u64) as usize
        });
    let include_line_starts =
        a.bool_or("include_line_starts", false, "invalid_include_line_starts")?;
    let page = Page {
        offset,
        max_chars,
        include_line_starts,
    };
    if let Some(raw) = a.get("selections").filter(|v| !v.is_null()) {
        let mut given = Vec::new();
        for (k, v) in [
            ("symbol_name", symbol_name.is_some()),
            ("query", query.is_some()),
            ("observation_id", observation_id.is_some()),
            ("kind", kind.is_some()),
            ("offset", offset != 0),
        ] {
            if v {
                given.push(k);
            }
        }
        if !given.is_empty() {
            return Err(conflict(&format!(
                "selections is exclusive with {}; give each selection's kind inside it",
                given.join(", ")
            ))
            .with("conflicting_arguments", json!(given)));
        }
        return Ok(ObserveRequest::Bundle {
            selections: parse_selections(raw)?,
            page,
        });
    }
    if let Some(observation_id) = observation_id {
        if symbol_name.is_some() || query.is_some() || kind.is_some() {
            return Err(conflict(
                "observation_id pages an issued observation; it is exclusive with symbol_name, query and kind",
            ));
        }
        return Ok(ObserveRequest::Page {
            observation_id,
            page,
        });
    }
    if let Some(symbol_name) = symbol_name {
        if query.is_some() {
            return Err(conflict(
                "query filters candidate discovery; it is exclusive with symbol_name",
            ));
        }
        return Ok(ObserveRequest::Select {
            selection: Selection { symbol_name, kind },
            page,
        });
    }
    if offset != 0 {
        return Err(conflict(
            "offset pages an observed scope; candidate discovery takes none",
        ));
    }
    Ok(ObserveRequest::Candidates { query, kind })
}

fn parse_selections(raw: &Value) -> Result<Vec<Selection>, ArgError> {
    let bad = |i: Option<usize>, detail: String| {
        let e = ArgError::new("invalid_selections", detail);
        match i {
            Some(i) => e.with("selection_index", json!(i)),
            None => e,
        }
    };
    let Value::Array(items) = raw else {
        return Err(bad(
            None,
            format!("selections must be an array, not {}", type_name(raw)),
        ));
    };
    if items.is_empty() || items.len() > BUNDLE_SELECTIONS_MAX {
        return Err(bad(
            None,
            format!(
                "selections must hold 1 to {BUNDLE_SELECTIONS_MAX} selections, not {}",
                items.len()
            ),
        ));
    }
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Value::Object(o) = item else {
            return Err(bad(
                Some(i),
                format!(
                    "selections[{i}] must be an object {{symbol_name, kind?}}, not {}",
                    type_name(item)
                ),
            ));
        };
        let mut unknown: Vec<&str> = o
            .keys()
            .map(String::as_str)
            .filter(|k| !SELECTION_FIELDS.contains(k))
            .collect();
        unknown.sort_unstable();
        if !unknown.is_empty() {
            let (names, _) = crate::contract::args::quoted_names(unknown.into_iter());
            return Err(bad(
                Some(i),
                format!("selections[{i}] has unknown field(s): {}", names.join(", ")),
            )
            .with("unknown_fields", json!(names)));
        }
        let name = nonblank(o.get("symbol_name"), "symbol_name", "invalid_selections")
            .map_err(|e| bad(Some(i), format!("selections[{i}].{}", e.detail)))?;
        let Some(symbol_name) = name else {
            return Err(bad(
                Some(i),
                format!("selections[{i}].symbol_name is required"),
            ));
        };
        let kind = nonblank(o.get("kind"), "kind", "invalid_selections")
            .map_err(|e| bad(Some(i), format!("selections[{i}].{}", e.detail)))?;
        out.push(Selection { symbol_name, kind });
    }
    Ok(out)
}

/// The outline's facts every answer repeats.
fn outline_fields(m: &mut Map<String, Value>, t: &TargetView, o: &Outline) {
    m.insert("target_file_id".into(), json!(t.target_file_id));
    m.insert("target_version".into(), json!(t.version));
    m.insert("target_current_hash".into(), json!(t.current_hash));
    m.insert("language".into(), json!(o.language));
    m.insert("engine".into(), json!(o.engine));
    m.insert("grammar".into(), json!(o.grammar));
    m.insert("has_parse_errors".into(), json!(o.has_errors));
}

fn candidate(s: &Symbol) -> Value {
    json!({
        "name": s.path,
        "kind": s.kind,
        "parent": s.parent,
        "local_name": s.name,
        "start": s.start,
        "end": s.end,
        "start_line": s.start_line,
        "end_line": s.end_line,
    })
}

fn candidate_list(m: &mut Map<String, Value>, found: &[&Symbol]) {
    let listed: Vec<Value> = found
        .iter()
        .take(SCOPE_CANDIDATES_MAX)
        .map(|s| candidate(s))
        .collect();
    m.insert("candidates".into(), Value::Array(listed));
    m.insert("total_candidates".into(), json!(found.len()));
    m.insert(
        "candidates_truncated".into(),
        json!(found.len() > SCOPE_CANDIDATES_MAX),
    );
}

/// Candidate discovery: symbols whose path contains `query` (case-insensitively) and whose
/// kind is `kind`, in document order. Issues nothing.
pub fn candidates(t: &TargetView, o: &Outline, query: Option<&str>, kind: Option<&str>) -> Value {
    let needle = query.map(str::to_lowercase);
    let finder = needle
        .as_deref()
        .map(|q| memchr::memmem::Finder::new(q.as_bytes()));
    // Paths are lowercased into one reused buffer and searched with memmem: linear in path and
    // query, where comparing every window was their product.
    let mut lowered = Vec::new();
    let mut ticks = interrupt::Every::new(64);
    let found: Vec<&Symbol> = o
        .symbols
        .iter()
        .filter(|s| kind.is_none_or(|k| s.kind == k))
        .filter(|s| {
            ticks.tick();
            let (Some(q), Some(f)) = (needle.as_deref(), finder.as_ref()) else {
                return true;
            };
            if s.path.is_ascii() && q.is_ascii() {
                lowered.clear();
                lowered.extend(s.path.bytes().map(|b| b.to_ascii_lowercase()));
                f.find(&lowered).is_some()
            } else {
                s.path.to_lowercase().contains(q)
            }
        })
        .collect();
    let mut m = Map::new();
    m.insert("status".into(), json!(Status::Candidates.as_str()));
    outline_fields(&mut m, t, o);
    m.insert("observation_id".into(), Value::Null);
    m.insert("query".into(), json!(query));
    m.insert("kind".into(), json!(kind));
    candidate_list(&mut m, &found);
    Value::Object(m)
}

/// The symbols an exact selection names: by path or by name, and by kind when given.
pub fn matching<'a>(o: &'a Outline, sel: &Selection) -> Vec<&'a Symbol> {
    o.symbols
        .iter()
        .filter(|s| s.path == sel.symbol_name || s.name == sel.symbol_name)
        .filter(|s| sel.kind.as_deref().is_none_or(|k| s.kind == k))
        .collect()
}

/// [`matching`] of each of `sels`, in one pass over the outline: the symbols whose path or name
/// is a selection's `symbol_name` (and whose kind its `kind`, if given), in document order.
pub fn matching_all<'a>(o: &'a Outline, sels: &[Selection]) -> Vec<Vec<&'a Symbol>> {
    let mut by_name: std::collections::BTreeMap<&str, Vec<usize>> = Default::default();
    for (i, sel) in sels.iter().enumerate() {
        by_name.entry(sel.symbol_name.as_str()).or_default().push(i);
    }
    let mut found: Vec<Vec<&Symbol>> = vec![Vec::new(); sels.len()];
    let mut ticks = interrupt::Every::new(interrupt::SEARCH_INTERVAL);
    for s in &o.symbols {
        ticks.tick();
        let by_path = by_name.get(s.path.as_str());
        let by_own = if s.name == s.path {
            None
        } else {
            by_name.get(s.name.as_str())
        };
        for &i in by_path.into_iter().chain(by_own).flatten() {
            // A selection matched by both path and name still lists the symbol once.
            if sels[i].kind.as_deref().is_none_or(|k| s.kind == k)
                && !found[i].last().is_some_and(|l| std::ptr::eq(*l, s))
            {
                found[i].push(s);
            }
        }
    }
    found
}

/// `not_found` / `ambiguous` for a selection that does not name exactly one symbol.
fn selection_failure(
    t: &TargetView,
    o: &Outline,
    sel: &Selection,
    found: &[&Symbol],
    index: Option<usize>,
) -> Value {
    let mut m = Map::new();
    let ambiguous = !found.is_empty();
    m.insert(
        "status".into(),
        json!(
            if ambiguous {
                Status::Ambiguous
            } else {
                Status::NotFound
            }
            .as_str()
        ),
    );
    m.insert(
        "code".into(),
        json!(if ambiguous {
            "AMBIGUOUS_SCOPE_SELECTION"
        } else {
            "SCOPE_NOT_FOUND"
        }),
    );
    let detail = if ambiguous {
        format!(
            "{} symbols match symbol_name {:?}{}; select one by its exact path (the candidates' name) or narrow it with kind",
            found.len(),
            sel.symbol_name,
            sel.kind
                .as_deref()
                .map(|k| format!(" and kind {k:?}"))
                .unwrap_or_default()
        )
    } else {
        format!(
            "no symbol is named {:?}{}; list candidates with query or kind",
            sel.symbol_name,
            sel.kind
                .as_deref()
                .map(|k| format!(" with kind {k:?}"))
                .unwrap_or_default()
        )
    };
    m.insert("failure_detail".into(), json!(detail));
    if let Some(i) = index {
        m.insert("selection_index".into(), json!(i));
    }
    outline_fields(&mut m, t, o);
    m.insert("observation_id".into(), Value::Null);
    m.insert("symbol_name".into(), json!(sel.symbol_name));
    m.insert("kind".into(), json!(sel.kind));
    if ambiguous {
        candidate_list(&mut m, found);
    }
    Value::Object(m)
}

/// The one symbol `sel` names, or the `not_found` / `ambiguous` answer.
pub fn select_one<'a>(
    t: &TargetView,
    o: &'a Outline,
    sel: &Selection,
) -> Result<&'a Symbol, Value> {
    let found = matching(o, sel);
    match found.as_slice() {
        [one] => Ok(one),
        _ => Err(selection_failure(t, o, sel, &found, None)),
    }
}

/// The symbols a bundle names, one per selection, unique and pairwise disjoint, within the
/// bundle's limits; or the answer that refuses the whole bundle (nothing is issued).
pub fn select_bundle<'a>(
    t: &TargetView,
    o: &'a Outline,
    sels: &[Selection],
    page: Page,
) -> Result<Vec<&'a Symbol>, Value> {
    let mut picked: Vec<&Symbol> = Vec::with_capacity(sels.len());
    for (i, (sel, found)) in sels.iter().zip(matching_all(o, sels)).enumerate() {
        let [one] = found.as_slice() else {
            return Err(selection_failure(t, o, sel, &found, Some(i)));
        };
        picked.push(one);
    }
    let refuse = |code: &'static str, detail: String, extra: Value| {
        let mut e = ArgError::new(code, detail);
        if let Value::Object(m) = extra {
            for (k, v) in m {
                e = e.with(&k, v);
            }
        }
        e.to_json("patchdiff_observe_scope")
    };
    for i in 0..picked.len() {
        for j in 0..i {
            let (a, b) = (picked[j], picked[i]);
            if std::ptr::eq(a, b) {
                return Err(refuse(
                    "DUPLICATE_SELECTION",
                    format!("selections {j} and {i} name the same symbol {:?}", a.path),
                    json!({"selection_index": i, "duplicate_of_selection_index": j}),
                ));
            }
            if a.start < b.end && b.start < a.end {
                return Err(refuse(
                    "OVERLAPPING_SELECTIONS",
                    format!(
                        "the scopes of selections {j} ({:?}, [{}, {})) and {i} ({:?}, [{}, {})) overlap; a bundle's scopes must be disjoint",
                        a.path, a.start, a.end, b.path, b.start, b.end
                    ),
                    json!({"selection_index": i, "overlaps_selection_index": j}),
                ));
            }
        }
    }
    let total: usize = picked.iter().map(|s| s.end - s.start).sum();
    if total > BUNDLE_SCOPE_MAX_CHARS {
        return Err(refuse(
            "BUNDLE_SCOPE_TOO_LARGE",
            format!(
                "the selected scopes total {total} code points, over the bundle limit of {BUNDLE_SCOPE_MAX_CHARS}; observe large scopes alone and page them"
            ),
            json!({"total_scope_chars": total, "limit": BUNDLE_SCOPE_MAX_CHARS}),
        ));
    }
    let text: usize = picked
        .iter()
        .map(|s| (s.end - s.start).min(page.max_chars))
        .sum();
    if text > BUNDLE_TEXT_MAX_CHARS {
        return Err(refuse(
            "BUNDLE_RESPONSE_TOO_LARGE",
            format!(
                "the first pages of the selected scopes total {text} code points, over the bundle response limit of {BUNDLE_TEXT_MAX_CHARS}; pass a smaller max_chars or fewer selections"
            ),
            json!({"total_text_chars": text, "limit": BUNDLE_TEXT_MAX_CHARS}),
        ));
    }
    Ok(picked)
}

/// Bytes [`byte_offsets`] checks for ASCII at once.
const ASCII_CHUNK: usize = 4_096;

/// Byte offsets of the ascending code-point offsets `cps` in `text`, in one forward pass.
pub fn byte_offsets(text: &str, cps: &[usize]) -> Vec<usize> {
    let mut out = Vec::with_capacity(cps.len());
    let (mut cp, mut byte) = (0usize, 0usize);
    let bytes = text.as_bytes();
    let mut ticks = interrupt::Every::new(interrupt::SEARCH_INTERVAL);
    for &want in cps {
        debug_assert!(want >= cp, "offsets must ascend");
        while cp < want && byte < bytes.len() {
            // An all-ASCII run advances one code point per byte: skip it a chunk at a time (a
            // bundle of a 1 MiB text would otherwise walk it byte by byte, twice).
            let run = (want - cp).min(bytes.len() - byte).min(ASCII_CHUNK);
            if run >= 16 && bytes[byte..byte + run].is_ascii() {
                ticks.advance(run);
                byte += run;
                cp += run;
                continue;
            }
            ticks.tick();
            // ASCII runs advance one byte per code point.
            let b = bytes[byte];
            byte += if b < 0x80 {
                1
            } else if b >= 0xF0 {
                4
            } else if b >= 0xE0 {
                3
            } else {
                2
            };
            cp += 1;
        }
        out.push(byte);
    }
    out
}

/// Where a page lies in the text: its byte range and the 1-based line of its first code point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Located {
    b0: usize,
    b1: usize,
    line: usize,
}

/// Locates code-point ranges in one forward pass over `content` (a bundle's 32 pages of a 1 MiB
/// text would otherwise scan it 32 times).
fn locate(content: &str, ranges: &[(usize, usize)]) -> Vec<Located> {
    let mut points: Vec<usize> = ranges.iter().flat_map(|&(s, e)| [s, e]).collect();
    points.sort_unstable();
    points.dedup();
    let bytes = byte_offsets(content, &points);
    // Lines before each point, counted between consecutive points.
    let mut lines = Vec::with_capacity(points.len());
    let (mut from, mut seen) = (0usize, 0usize);
    for &b in &bytes {
        seen += memchr::memchr_iter(b'\n', &content.as_bytes()[from..b]).count();
        from = b;
        lines.push(seen);
    }
    let at = |cp: usize| points.binary_search(&cp).unwrap_or(0);
    ranges
        .iter()
        .map(|&(s, e)| Located {
            b0: bytes[at(s)],
            b1: bytes[at(e)],
            line: 1 + lines[at(s)],
        })
        .collect()
}

/// One observed scope as an answer describes it: a fresh selection's symbol or a stored row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeView {
    pub observation_id: String,
    pub ordinal: Option<usize>,
    pub symbol_name: String,
    pub kind: String,
    pub parent: Option<String>,
    pub scope_start: usize,
    pub scope_end: usize,
    pub scope_start_line: usize,
    pub scope_end_line: usize,
    pub observed_scope_hash: String,
}

impl ScopeView {
    pub fn of(s: &Symbol, observation_id: String, ordinal: Option<usize>, hash: String) -> Self {
        ScopeView {
            observation_id,
            ordinal,
            symbol_name: s.path.clone(),
            kind: s.kind.to_owned(),
            parent: s.parent.clone(),
            scope_start: s.start,
            scope_end: s.end,
            scope_start_line: s.start_line,
            scope_end_line: s.end_line,
            observed_scope_hash: hash,
        }
    }
}

/// SHA-256 of each symbol's scope text, in one pass over `content`.
pub fn scope_hashes(content: &str, symbols: &[&Symbol]) -> Vec<String> {
    let mut order: Vec<usize> = (0..symbols.len()).collect();
    order.sort_by_key(|&i| symbols[i].start);
    let mut cps: Vec<usize> = Vec::with_capacity(symbols.len() * 2);
    for &i in &order {
        cps.push(symbols[i].start);
    }
    let starts = byte_offsets(content, &cps);
    let mut out = vec![String::new(); symbols.len()];
    for (k, &i) in order.iter().enumerate() {
        let s = symbols[i];
        let b0 = starts[k];
        let len =
            crate::text::byte_offset(&content[b0..], s.end - s.start).unwrap_or(content.len() - b0);
        out[i] = sha256_hex(&content[b0..b0 + len]);
    }
    out
}

/// The page fields of one scope: `offset` within it, absolute `start`/`end`, the text, lines.
fn page_fields(
    m: &mut Map<String, Value>,
    content: &str,
    s: &ScopeView,
    page: Page,
    located: Option<Located>,
) -> Result<(), ArgError> {
    let len = s.scope_end - s.scope_start;
    if page.offset > len {
        return Err(ArgError::new(
            "offset_out_of_range",
            format!(
                "offset {} is past the end of the observed scope ({len} code points)",
                page.offset
            ),
        )
        .with("scope_length", json!(len)));
    }
    let start = s.scope_start + page.offset;
    let end = start + page.max_chars.min(len - page.offset);
    let Located {
        b0,
        b1,
        line: start_line,
    } = located.unwrap_or_else(|| locate(content, &[(start, end)])[0]);
    let b = [b0, b1];
    let text = &content[b[0]..b[1]];
    let truncated = end < s.scope_end;
    let end_line =
        start_line + memchr::memchr_iter(b'\n', text.trim_end_matches('\n').as_bytes()).count();
    m.insert("offset".into(), json!(page.offset));
    m.insert("start".into(), json!(start));
    m.insert("end".into(), json!(end));
    m.insert("max_chars".into(), json!(page.max_chars));
    m.insert("text".into(), json!(text));
    m.insert("truncated".into(), json!(truncated));
    m.insert(
        "next_offset".into(),
        if truncated {
            json!(end - s.scope_start)
        } else {
            Value::Null
        },
    );
    m.insert(
        "next_start".into(),
        if truncated { json!(end) } else { Value::Null },
    );
    m.insert("start_line".into(), json!(start_line));
    m.insert("end_line".into(), json!(end_line));
    if page.include_line_starts {
        // Absolute starts of the lines that begin on the page: its first position when a line
        // begins there, then every position after an LF that is still inside the page.
        let mut starts = Vec::new();
        let mut line = start_line;
        if start < end && (b[0] == 0 || content.as_bytes()[b[0] - 1] == b'\n') {
            starts.push(json!({"line": line, "start": start}));
        }
        let (mut cp, mut from) = (start, 0);
        for at in memchr::memchr_iter(b'\n', text.as_bytes()) {
            cp += char_len(&text[from..at]) + 1;
            from = at + 1;
            line += 1;
            if cp < end {
                starts.push(json!({"line": line, "start": cp}));
            }
        }
        m.insert("line_starts".into(), Value::Array(starts));
    }
    Ok(())
}

fn scope_fields(m: &mut Map<String, Value>, s: &ScopeView) {
    m.insert("observation_id".into(), json!(s.observation_id));
    m.insert("symbol_name".into(), json!(s.symbol_name));
    m.insert("kind".into(), json!(s.kind));
    m.insert("parent".into(), json!(s.parent));
    m.insert("scope_start".into(), json!(s.scope_start));
    m.insert("scope_end".into(), json!(s.scope_end));
    m.insert("scope_length".into(), json!(s.scope_end - s.scope_start));
    m.insert("scope_start_line".into(), json!(s.scope_start_line));
    m.insert("scope_end_line".into(), json!(s.scope_end_line));
    m.insert("observed_scope_hash".into(), json!(s.observed_scope_hash));
}

/// The engine facts of an observation, from a fresh outline or a stored row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineFacts<'a> {
    pub language: &'a str,
    pub engine: &'a str,
    pub grammar: &'a str,
}

/// `status: "observed"`: one observation and its first (or requested) page. `mode` is
/// `selection` for a fresh selection and `scope_page` for a page of an issued observation.
pub fn observed(
    t: &TargetView,
    facts: EngineFacts,
    editing_cycle_id: &str,
    s: &ScopeView,
    page: Page,
    mode: &str,
) -> Result<Value, ArgError> {
    let mut m = Map::new();
    m.insert("status".into(), json!(Status::Observed.as_str()));
    m.insert("mode".into(), json!(mode));
    m.insert("target_file_id".into(), json!(t.target_file_id));
    scope_fields(&mut m, s);
    m.insert("editing_cycle_id".into(), json!(editing_cycle_id));
    m.insert("target_version".into(), json!(t.version));
    m.insert("target_current_hash".into(), json!(t.current_hash));
    m.insert("language".into(), json!(facts.language));
    m.insert("engine".into(), json!(facts.engine));
    m.insert("grammar".into(), json!(facts.grammar));
    page_fields(&mut m, t.content, s, page, None)?;
    Ok(Value::Object(m))
}

/// `status: "observed_batch"`: the bundle, its snapshot for the commit, and one receipt per
/// selection in selection order.
pub fn observed_batch(
    t: &TargetView,
    o: &Outline,
    editing_cycle_id: &str,
    bundle_id: &str,
    scopes: &[ScopeView],
    page: Page,
) -> Value {
    // The bundle's page is each scope's first: offset 0 is always inside the scope.
    let first = Page { offset: 0, ..page };
    let pages: Vec<(usize, usize)> = scopes
        .iter()
        .map(|s| {
            let end = s.scope_start + first.max_chars.min(s.scope_end - s.scope_start);
            (s.scope_start, end)
        })
        .collect();
    let located = locate(t.content, &pages);
    let receipts: Vec<Value> = scopes
        .iter()
        .zip(located)
        .map(|(s, at)| {
            let mut m = Map::new();
            m.insert("ordinal".into(), json!(s.ordinal));
            scope_fields(&mut m, s);
            page_fields(&mut m, t.content, s, first, Some(at))
                .expect("offset 0 lies in every scope");
            Value::Object(m)
        })
        .collect();
    let mut m = Map::new();
    m.insert("status".into(), json!(Status::ObservedBatch.as_str()));
    outline_fields(&mut m, t, o);
    m.insert("observation_bundle_id".into(), json!(bundle_id));
    m.insert("editing_cycle_id".into(), json!(editing_cycle_id));
    m.insert(
        "snapshot".into(),
        json!({
            "target_file_id": t.target_file_id,
            "expected_target_version": t.version,
            "expected_current_hash": t.current_hash,
            "observation_bundle_id": bundle_id,
        }),
    );
    m.insert("scope_count".into(), json!(scopes.len()));
    m.insert("scopes".into(), Value::Array(receipts));
    Value::Object(m)
}

/// Why a stored observation cannot be paged now: its cycle closed, or the target moved on.
pub fn page_refusal(
    t: &TargetView,
    observation_id: &str,
    active_cycle: &str,
    row_target: &str,
    row_cycle: &str,
    row_version: i64,
    row_hash: &str,
) -> Option<Value> {
    let (code, detail) = if row_target != t.target_file_id {
        (
            "OBSERVATION_TARGET_MISMATCH",
            "the observation was issued for another target".to_owned(),
        )
    } else if row_cycle != active_cycle {
        (
            "OBSERVATION_CYCLE_MISMATCH",
            "a SAVE closed the editing cycle this observation belongs to; observe the scope again"
                .to_owned(),
        )
    } else if row_version != t.version {
        (
            "STALE_OBSERVATION_VERSION",
            format!(
                "the observation is of version {row_version}; the target is at version {}: observe the scope again",
                t.version
            ),
        )
    } else if row_hash != t.current_hash {
        (
            "STALE_OBSERVATION_HASH",
            "the observation's target hash differs from the current hash: observe the scope again"
                .to_owned(),
        )
    } else {
        return None;
    };
    Some(json!({
        "status": Status::Rejected.as_str(),
        "code": code,
        "failure_detail": detail,
        "target_file_id": t.target_file_id,
        "observation_id": observation_id,
        "current_version": t.version,
        "current_hash": t.current_hash,
    }))
}

/// `status: "unsupported"` for a target Waymark has no grammar for.
pub fn unsupported(t: &TargetView, filename: &str, target_type: &str) -> Value {
    json!({
        "status": Status::Unsupported.as_str(),
        "code": "UNSUPPORTED_LANGUAGE",
        "target_file_id": t.target_file_id,
        "failure_detail": format!(
            "structural observation supports .py, .ts, .js, .json, .md, .yaml, .toml and .sh targets; {filename:?} ({target_type}) is none of them: use patchdiff_read_target and patchdiff_find_occurrences"
        ),
        "observation_id": Value::Null,
    })
}

/// Why the structure of a supported target is not available (issue 14: the parser runs in a
/// helper process, and its death or a limit is an answer, never an outage).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unavailable<'a> {
    /// The helper died (a grammar's assertion, a signal) or answered garbage.
    ParserCrashed,
    /// The helper was stopped from outside (the kernel's OOM killer, an operator's signal, a
    /// broken pipe): answered like a crash, but the text is not the cause.
    ParserStopped,
    /// A documented limit: outline symbols or name bytes, memory, CPU, time, input size.
    ParserLimit(crate::scope::ParserLimit),
    /// The helper program could not be started (an installation fault).
    ParserNotStarted(&'a str),
    /// Every parse slot of the server (or the login's or role's share) stayed taken: nothing
    /// was parsed.
    ParserBusy,
}

/// `structure_unavailable`: no outline of this version could be made; nothing was issued or
/// written. The same text gives the same answer (the backend keeps it for the version), so a
/// resend does not help: the agent reads and searches the target instead. Only a helper stopped
/// from outside says that a resend may succeed.
pub fn structure_unavailable(
    t: &TargetView,
    language: crate::scope::Language,
    why: Unavailable,
) -> Value {
    let (reason, code, limit, detail) = match why {
        Unavailable::ParserCrashed => (
            "parser_crashed",
            "PARSER_CRASHED",
            Value::Null,
            format!(
                "The {} parser stopped on this version of the target (its helper process ended; the database is unaffected). Structural observation is unavailable for this text: use patchdiff_read_target, patchdiff_read_lines and patchdiff_find_occurrences.",
                language.grammar()
            ),
        ),
        Unavailable::ParserStopped => (
            "parser_crashed",
            "PARSER_CRASHED",
            Value::Null,
            format!(
                "The {} parser helper was stopped from outside while it read this version of the target (for example by the kernel's OOM killer; the database is unaffected). The text is not known to be the cause: resending may succeed. Meanwhile use patchdiff_read_target, patchdiff_read_lines and patchdiff_find_occurrences.",
                language.grammar()
            ),
        ),
        Unavailable::ParserLimit(l) => (
            "parser_limit",
            "PARSER_LIMIT",
            json!(l.label()),
            format!(
                "The outline of this version of the target passes the parser's {} limit (docs/structural.md, \"Limits\"). Structural observation is unavailable for this text: use patchdiff_read_target, patchdiff_read_lines and patchdiff_find_occurrences.",
                l.label()
            ),
        ),
        Unavailable::ParserBusy => (
            "parser_busy",
            "PARSER_BUSY",
            Value::Null,
            "Every parse this server allows at once (patchdiff.parser_max_concurrent; one login at most half of them, a role it acts as half of that) stayed taken for as long as patchdiff.parser_timeout; nothing was parsed, and the text is not the cause: resending later may succeed. Meanwhile use patchdiff_read_target, patchdiff_read_lines and patchdiff_find_occurrences.".to_owned(),
        ),
        Unavailable::ParserNotStarted(why) => (
            "parser_not_started",
            "PARSER_NOT_STARTED",
            Value::Null,
            format!(
                "The structural parser helper could not be started ({why}); this is an installation fault."
            ),
        ),
    };
    json!({
        "status": Status::StructureUnavailable.as_str(),
        "code": code,
        "reason": reason,
        "limit": limit,
        "target_file_id": t.target_file_id,
        "target_version": t.version,
        "target_current_hash": t.current_hash,
        "language": language.name(),
        "grammar": language.grammar(),
        "failure_detail": detail,
        "observation_id": Value::Null,
    })
}

/// `not_found` for an observation ID that names no observation.
pub fn unknown_observation(observation_id: &str) -> Value {
    json!({
        "status": Status::NotFound.as_str(),
        "code": "UNKNOWN_OBSERVATION_ID",
        "observation_id": observation_id,
        "failure_detail": format!("No observation with observation_id {observation_id}."),
    })
}

/// An observation row as stored in `patchdiff.target_scope_observations`, with its consumption.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservationRow {
    pub observation_id: String,
    pub target_file_id: String,
    pub editing_cycle_id: String,
    /// Set for observations issued by a bundle (`selections`), with their 1-based ordinal.
    pub observation_bundle_id: Option<String>,
    pub bundle_ordinal: Option<i64>,
    /// The selected symbol's path and kind.
    pub symbol_path: String,
    pub kind: String,
    /// The target state the observation was issued against.
    pub target_version: i64,
    pub target_current_hash: String,
    /// Code points of that state's canonical text, end exclusive.
    pub scope_start: usize,
    pub scope_end: usize,
    /// SHA-256 of the scope's text.
    pub observed_scope_hash: String,
    /// The accepted attempt that consumed it, if any.
    pub consumed_by_pdcp_log_id: Option<String>,
}

/// An observation an accepted attempt consumes: written with the attempt, in group order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservationLink {
    pub observation_id: String,
    /// 1-based group of a batch; `None` for the single form.
    pub group_index: Option<usize>,
}

/// An observation linked to an accepted log, as replay reads it: the observation row (its
/// `consumed_by_pdcp_log_id` from `observation_consumptions`) and the consumption's
/// `group_index` (`None` for the single form).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkedObservation {
    pub row: ObservationRow,
    pub group_index: Option<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chunked ASCII skip of `byte_offsets` against a plain walk over `char_indices`, on
    /// texts that mix long ASCII runs with multi-byte characters at every chunk edge.
    #[test]
    fn byte_offsets_equal_a_plain_walk() {
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for round in 0..200 {
            let mut text = String::new();
            for _ in 0..next(40) {
                match next(4) {
                    0 => text.push_str(&"a".repeat(next(9000))),
                    1 => text.push('é'),
                    2 => text.push('🌟'),
                    _ => text.push_str(&"x\n".repeat(next(20))),
                }
            }
            let walk: Vec<usize> = text
                .char_indices()
                .map(|(b, _)| b)
                .chain([text.len()])
                .collect();
            let total = walk.len() - 1;
            let mut cps: Vec<usize> = (0..next(50)).map(|_| next(total + 3)).collect();
            cps.sort_unstable();
            let got = byte_offsets(&text, &cps);
            for (cp, b) in cps.iter().zip(got) {
                assert_eq!(b, walk[(*cp).min(total)], "round {round}, code point {cp}");
            }
        }
    }

    /// One pass for a bundle's selections finds what one pass per selection finds.
    #[test]
    fn matching_all_equals_matching_per_selection() {
        let mut o = outline();
        o.symbols.push(sym("method", "a", Some("K"), 30, 31));
        o.symbols.push(sym("function", "K.a", None, 32, 33));
        let sels: Vec<Selection> = [
            ("a", None),
            ("a", Some("function")),
            ("K.a", None),
            ("b", Some("class")),
            ("a", Some("method")),
            ("zz", None),
            ("a", None),
        ]
        .iter()
        .map(|(n, k)| Selection {
            symbol_name: (*n).to_owned(),
            kind: k.map(str::to_owned),
        })
        .collect();
        let all = matching_all(&o, &sels);
        for (sel, found) in sels.iter().zip(&all) {
            let want = matching(&o, sel);
            assert_eq!(found.len(), want.len(), "{sel:?}");
            assert!(
                found.iter().zip(&want).all(|(a, b)| std::ptr::eq(*a, *b)),
                "{sel:?}"
            );
        }
        assert!(
            all.iter().any(|f| f.len() > 1),
            "one selection is ambiguous"
        );
    }

    const TEXT: &str = "# 🌟 中\ndef a():\n    x = 1\n\ndef b():\n    x = 1\n";

    fn sym(
        kind: &'static str,
        name: &str,
        parent: Option<&str>,
        start: usize,
        end: usize,
    ) -> Symbol {
        let path = parent.map_or(name.to_owned(), |p| format!("{p}.{name}"));
        let line = |cp: usize| 1 + TEXT.chars().take(cp).filter(|&c| c == '\n').count();
        Symbol {
            kind,
            name: name.into(),
            parent: parent.map(str::to_owned),
            path,
            start,
            end,
            start_line: line(start),
            end_line: line(end.max(start + 1) - 1),
        }
    }

    fn outline() -> Outline {
        // "def a():\n    x = 1" starts at code point 6 (after "# 🌟 中\n").
        Outline {
            language: "python",
            engine: "patchdiff-waymark@test",
            grammar: "tree-sitter-python@test",
            has_errors: false,
            symbols: vec![
                sym("function", "a", None, 6, 24),
                sym("variable", "x", Some("a"), 19, 24),
                sym("function", "b", None, 26, 44),
                sym("variable", "x", Some("b"), 39, 44),
            ],
        }
    }

    fn view() -> TargetView<'static> {
        TargetView {
            target_file_id: "t",
            version: 4,
            current_hash: "h",
            content: TEXT,
        }
    }

    fn parse(args: &str) -> Result<ObserveRequest, ArgError> {
        let a = Args::parse(args, OBSERVE_ARGS, &[]).unwrap();
        parse_observe(&a)
    }

    fn page(max_chars: usize) -> Page {
        Page {
            offset: 0,
            max_chars,
            include_line_starts: false,
        }
    }

    /// limits::OBSERVE_QUERY_MAX_BYTES: at the cap accepted, one byte over refused.
    #[test]
    fn query_at_its_cap() {
        let q = |n: usize| parse(&json!({"query": "q".repeat(n)}).to_string());
        assert!(q(OBSERVE_QUERY_MAX_BYTES).is_ok());
        let e = q(OBSERVE_QUERY_MAX_BYTES + 1).unwrap_err();
        assert_eq!(e.code, "query_too_large");
        assert_eq!(e.extra["limit"], OBSERVE_QUERY_MAX_BYTES);
    }

    /// "The optional top-level query, symbol_name and kind values must be nonblank when
    /// supplied ... rejects whitespace-only strings, including Unicode whitespace. Nonblank
    /// strings are not implicitly trimmed."
    #[test]
    fn selectors_must_be_nonblank_and_are_not_trimmed() {
        for (k, code) in [
            ("query", "invalid_query"),
            ("symbol_name", "invalid_symbol_name"),
            ("kind", "invalid_kind"),
        ] {
            for blank in ["", " ", "\\u3000", "\\u2003\\n"] {
                let e = parse(&format!(r#"{{"{k}":"{blank}"}}"#)).unwrap_err();
                assert_eq!(e.code, code, "{k} {blank:?}");
            }
            assert_eq!(parse(&format!(r#"{{"{k}":7}}"#)).unwrap_err().code, code);
        }
        assert_eq!(
            parse(r#"{"symbol_name":" a "}"#).unwrap(),
            ObserveRequest::Select {
                selection: Selection {
                    symbol_name: " a ".into(),
                    kind: None
                },
                page: page(4000)
            }
        );
        // Omission and null mean absent.
        assert_eq!(
            parse(r#"{"query":null,"kind":null}"#).unwrap(),
            ObserveRequest::Candidates {
                query: None,
                kind: None
            }
        );
    }

    /// "single/batch fields cannot be mixed": selections are exclusive with single selectors,
    /// query, observation ID, top-level kind and nonzero offset.
    #[test]
    fn modes_are_exclusive() {
        let id = "00000000-0000-4000-8000-000000000001";
        for args in [
            r#"{"selections":[{"symbol_name":"a"}],"symbol_name":"a"}"#.to_owned(),
            r#"{"selections":[{"symbol_name":"a"}],"query":"a"}"#.to_owned(),
            r#"{"selections":[{"symbol_name":"a"}],"kind":"function"}"#.to_owned(),
            r#"{"selections":[{"symbol_name":"a"}],"offset":1}"#.to_owned(),
            format!(r#"{{"selections":[{{"symbol_name":"a"}}],"observation_id":"{id}"}}"#),
            format!(r#"{{"observation_id":"{id}","symbol_name":"a"}}"#),
            r#"{"symbol_name":"a","query":"a"}"#.to_owned(),
            r#"{"offset":3}"#.to_owned(),
        ] {
            assert_eq!(
                parse(&args).unwrap_err().code,
                "observe_mode_conflict",
                "{args}"
            );
        }
        // offset 0 is no offset; max_chars is clamped to 8,000.
        assert!(matches!(
            parse(r#"{"selections":[{"symbol_name":"a"}],"offset":0,"max_chars":9000}"#).unwrap(),
            ObserveRequest::Bundle {
                page: Page {
                    max_chars: 8000,
                    ..
                },
                ..
            }
        ));
        assert_eq!(
            parse(r#"{"observation_id":"nope"}"#).unwrap_err().code,
            "invalid_observation_id"
        );
    }

    /// "selections: [{symbol_name, kind?}, ...] (1–32 exact, unique, nonempty ...)".
    #[test]
    fn selections_are_validated_with_their_index() {
        let many = format!(
            r#"{{"selections":[{}]}}"#,
            vec![r#"{"symbol_name":"a"}"#; 33].join(",")
        );
        for (args, index) in [
            (r#"{"selections":[]}"#.to_owned(), None),
            (many, None),
            (r#"{"selections":{}}"#.to_owned(), None),
            (
                r#"{"selections":[{"symbol_name":"a"},"b"]}"#.to_owned(),
                Some(1),
            ),
            (
                r#"{"selections":[{"symbol_name":"a","x":1}]}"#.to_owned(),
                Some(0),
            ),
            (
                r#"{"selections":[{"kind":"function"}]}"#.to_owned(),
                Some(0),
            ),
            (
                r#"{"selections":[{"symbol_name":"a"},{"symbol_name":"\u2028"}]}"#.to_owned(),
                Some(1),
            ),
            (
                r#"{"selections":[{"symbol_name":"a","kind":" "}]}"#.to_owned(),
                Some(0),
            ),
        ] {
            let e = parse(&args).unwrap_err();
            assert_eq!(e.code, "invalid_selections", "{args}");
            assert_eq!(
                e.extra.get("selection_index").cloned(),
                index.map(|i| json!(i)),
                "{args}"
            );
        }
    }

    /// Candidate discovery: "case-insensitive substring filter", kind filter, observation_id null.
    #[test]
    fn candidates_filter_by_query_and_kind() {
        let v = candidates(&view(), &outline(), Some("B.X"), None);
        assert_eq!(v["status"], "candidates");
        assert_eq!(v["observation_id"], Value::Null);
        assert_eq!(v["total_candidates"], 1);
        assert_eq!(v["candidates"][0]["name"], "b.x");
        assert_eq!(v["candidates"][0]["parent"], "b");
        let v = candidates(&view(), &outline(), None, Some("function"));
        assert_eq!(v["total_candidates"], 2);
        assert_eq!(v["candidates_truncated"], false);
    }

    /// "> 1 matches -> status: ambiguous, code: AMBIGUOUS_SCOPE_SELECTION, observation_id:
    /// null ... (never silently picks the smallest span)"; "0 matches -> not_found".
    #[test]
    fn selection_is_exact_or_refused() {
        let o = outline();
        let sel = |n: &str, k: Option<&str>| Selection {
            symbol_name: n.into(),
            kind: k.map(str::to_owned),
        };
        let e = select_one(&view(), &o, &sel("x", None)).unwrap_err();
        assert_eq!(e["status"], "ambiguous");
        assert_eq!(e["code"], "AMBIGUOUS_SCOPE_SELECTION");
        assert_eq!(e["observation_id"], Value::Null);
        assert_eq!(e["total_candidates"], 2);
        let e = select_one(&view(), &o, &sel("c", None)).unwrap_err();
        assert_eq!(
            (e["status"].as_str(), e["code"].as_str()),
            (Some("not_found"), Some("SCOPE_NOT_FOUND"))
        );
        assert_eq!(
            select_one(&view(), &o, &sel("b.x", None)).unwrap().start,
            39
        );
        assert_eq!(
            select_one(&view(), &o, &sel("a", Some("function")))
                .unwrap()
                .start,
            6
        );
        let e = select_one(&view(), &o, &sel("a", Some("class"))).unwrap_err();
        assert_eq!(e["code"], "SCOPE_NOT_FOUND");
    }

    /// Bundles: unique, disjoint, within 65,536 scope and 32,768 text code points; a failing
    /// selection names its selection_index.
    #[test]
    fn bundles_are_unique_disjoint_and_bounded() {
        let o = outline();
        let sels = |names: &[&str]| -> Vec<Selection> {
            names
                .iter()
                .map(|n| Selection {
                    symbol_name: (*n).into(),
                    kind: None,
                })
                .collect()
        };
        let ok = select_bundle(&view(), &o, &sels(&["b", "a"]), page(4000)).unwrap();
        assert_eq!((ok[0].path.as_str(), ok[1].path.as_str()), ("b", "a"));
        let e = select_bundle(&view(), &o, &sels(&["a", "b", "a"]), page(4000)).unwrap_err();
        assert_eq!(
            (
                e["code"].clone(),
                e["selection_index"].clone(),
                e["duplicate_of_selection_index"].clone()
            ),
            (json!("DUPLICATE_SELECTION"), json!(2), json!(0))
        );
        let e = select_bundle(&view(), &o, &sels(&["a", "a.x"]), page(4000)).unwrap_err();
        assert_eq!(e["code"], "OVERLAPPING_SELECTIONS");
        let e = select_bundle(&view(), &o, &sels(&["a", "x"]), page(4000)).unwrap_err();
        assert_eq!(
            (e["status"].clone(), e["selection_index"].clone()),
            (json!("ambiguous"), json!(1))
        );
        // Limits at their edges, on a synthetic outline of 32 scopes of 2,048 code points.
        let big = "y".repeat(32 * 2049);
        let symbols: Vec<Symbol> = (0..32)
            .map(|i| Symbol {
                kind: "function",
                name: format!("f{i}"),
                parent: None,
                path: format!("f{i}"),
                start: i * 2049,
                end: i * 2049 + 2048,
                start_line: 1,
                end_line: 1,
            })
            .collect();
        let o = Outline {
            symbols,
            ..outline()
        };
        let t = TargetView {
            content: &big,
            ..view()
        };
        let names: Vec<String> = (0..32).map(|i| format!("f{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        // 32 x 2,048 = 65,536 scope code points: at the limit. 32 x 1,024 = 32,768 text: at it.
        assert!(select_bundle(&t, &o, &sels(&names), page(1024)).is_ok());
        let e = select_bundle(&t, &o, &sels(&names), page(1025)).unwrap_err();
        assert_eq!(e["code"], "BUNDLE_RESPONSE_TOO_LARGE");
        let mut wide = o.clone();
        wide.symbols[31].end += 1;
        let e = select_bundle(&t, &wide, &sels(&names), page(1)).unwrap_err();
        assert_eq!(e["code"], "BUNDLE_SCOPE_TOO_LARGE");
        assert_eq!(e["total_scope_chars"], 65_537);
    }

    /// An observed page: bounded canonical slice text, offset within the scope, absolute
    /// start/end/next_start and line starts, code points throughout.
    #[test]
    fn observed_pages_count_code_points_within_the_scope() {
        let o = outline();
        let s = &o.symbols[0];
        let hash = scope_hashes(TEXT, &[s]).remove(0);
        assert_eq!(hash, sha256_hex("def a():\n    x = 1"));
        let scope = ScopeView::of(s, "obs".into(), None, hash);
        let p = Page {
            offset: 0,
            max_chars: 9,
            include_line_starts: true,
        };
        let v = observed(&view(), facts(&o), "cyc", &scope, p, "selection").unwrap();
        assert_eq!(v["text"], "def a():\n");
        assert_eq!(
            (v["start"].clone(), v["end"].clone()),
            (json!(6), json!(15))
        );
        assert_eq!(
            (
                v["truncated"].clone(),
                v["next_offset"].clone(),
                v["next_start"].clone()
            ),
            (json!(true), json!(9), json!(15))
        );
        assert_eq!(v["line_starts"], json!([{"line": 2, "start": 6}]));
        let p = Page {
            offset: 9,
            max_chars: 100,
            include_line_starts: true,
        };
        let v = observed(&view(), facts(&o), "cyc", &scope, p, "scope_page").unwrap();
        assert_eq!(v["text"], "    x = 1");
        assert_eq!(v["line_starts"], json!([{"line": 3, "start": 15}]));
        assert_eq!(
            (v["truncated"].clone(), v["next_offset"].clone()),
            (json!(false), Value::Null)
        );
        assert_eq!(
            (v["start_line"].clone(), v["end_line"].clone()),
            (json!(3), json!(3))
        );
        let p = Page {
            offset: 19,
            max_chars: 1,
            include_line_starts: false,
        };
        assert_eq!(
            observed(&view(), facts(&o), "c", &scope, p, "scope_page")
                .unwrap_err()
                .code,
            "offset_out_of_range"
        );
    }

    fn facts(o: &Outline) -> EngineFacts<'_> {
        EngineFacts {
            language: o.language,
            engine: o.engine,
            grammar: o.grammar,
        }
    }

    /// "Selection returns snapshot with exactly target_file_id, expected_target_version,
    /// expected_current_hash, and observation_bundle_id."
    #[test]
    fn a_bundle_returns_the_commit_snapshot() {
        let o = outline();
        let picked = [&o.symbols[2], &o.symbols[0]];
        let hashes = scope_hashes(TEXT, &picked);
        let scopes: Vec<ScopeView> = picked
            .iter()
            .zip(hashes)
            .enumerate()
            .map(|(i, (s, h))| ScopeView::of(s, format!("o{i}"), Some(i + 1), h))
            .collect();
        let v = observed_batch(&view(), &o, "cyc", "bun", &scopes, page(4000));
        assert_eq!(
            v["snapshot"],
            json!({"target_file_id": "t", "expected_target_version": 4, "expected_current_hash": "h", "observation_bundle_id": "bun"})
        );
        assert_eq!(v["scopes"][0]["symbol_name"], "b");
        assert_eq!(v["scopes"][1]["ordinal"], 2);
        assert_eq!(
            v["scopes"][1]["observed_scope_hash"],
            sha256_hex("def a():\n    x = 1")
        );
    }

    /// "Observation pagination rejects a closed cycle after SAVE with OBSERVATION_CYCLE_MISMATCH,
    /// even when content, hash and version are unchanged."
    #[test]
    fn pages_refuse_closed_cycles_and_stale_versions() {
        let t = view();
        let code = |row_cycle: &str, version: i64, hash: &str| {
            page_refusal(&t, "o", "active", "t", row_cycle, version, hash)
                .map(|v| v["code"].clone())
        };
        assert_eq!(
            code("old", 4, "h"),
            Some(json!("OBSERVATION_CYCLE_MISMATCH"))
        );
        assert_eq!(
            code("active", 3, "h"),
            Some(json!("STALE_OBSERVATION_VERSION"))
        );
        assert_eq!(
            code("active", 4, "g"),
            Some(json!("STALE_OBSERVATION_HASH"))
        );
        assert_eq!(code("active", 4, "h"), None);
    }
}
