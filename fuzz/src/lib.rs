//! The fuzz targets, as plain functions of the input bytes, so that the AFL++ binaries
//! (`src/bin/*.rs`, built with `cargo afl build`) and the corpus smoke test (`tests/corpus.rs`,
//! plain `cargo test`) run exactly the same code.
//!
//! Every target feeds the engine the way the extension does (the same parse, prepare, evaluate,
//! respond and replay functions, in the same order). A panic, an abort or an `assert!` failing
//! here is a defect: AFL++ records it as a crash. The assertions are the cheap invariants of the
//! contract (an accepted attempt replays to its own text, canonical text has no CR, budgets).
//!
//! Input layout: the first byte (or two) choose a variant (tool, language, format, target
//! text); the rest is the argument text, lossily decoded as UTF-8 (the extension only ever sees
//! valid UTF-8 from PostgreSQL, so lossy decoding loses nothing reachable).

use patchdiff_engine::api::args::{Args, not_found};
use patchdiff_engine::api::checkpoint;
use patchdiff_engine::api::export::{self, ExportFormat, ExportMeta};
use patchdiff_engine::api::history;
use patchdiff_engine::api::invalid_text;
use patchdiff_engine::api::limits::NEAR_MISSES_MAX_BYTES;
use patchdiff_engine::api::lines;
use patchdiff_engine::api::near_miss;
use patchdiff_engine::api::observation;
use patchdiff_engine::api::preview;
use patchdiff_engine::api::read;
use patchdiff_engine::api::replay::{self, Accepted, Replay};
use patchdiff_engine::api::scope::wire;
use patchdiff_engine::api::scoped;
use patchdiff_engine::api::submit::{self, AttemptRow, KeyOutcome, Parent};
use patchdiff_engine::api::target::{self, TargetMeta, TargetView};
use patchdiff_engine::api::text::{
    SourceLineEndings, byte_offset, canonicalize, char_len, sha256_hex, slice_chars,
};
use patchdiff_engine::api::unified;
use patchdiff_engine::api::words::Status;
use patchdiff_engine::wire::{CANONICAL, ascii_len, to_string};
use patchdiff_waymark::Language;
use serde_json::Value;

/// The target every generated call is about (the UUID the corpus uses).
pub const T: &str = "11111111-1111-4111-8111-111111111111";
const OTHER: &str = "22222222-2222-4222-8222-222222222222";

/// Canonical target texts a call can be about, chosen by an input byte: empty, ASCII lines,
/// repeated words (ambiguous matches), astral and combining characters, a long line.
pub const TEXTS: [&str; 5] = [
    "",
    "alpha beta\ngamma alpha\nend\n",
    "one one one\ntwo two\n",
    "🌍 é\u{301} \"q\" \\ \u{1}\n\u{2028}x\n",
    "fn main() {\n    let x = 1;\n    x + 1\n}\n",
];

/// An `ok` page (read_target, read_lines) carries exactly the code points it names.
fn assert_page_is_slice(out: &Value, content: &str, what: &str) {
    if out["status"] == "ok" {
        let (s, e) = (
            out["start"].as_u64().unwrap() as usize,
            out["end"].as_u64().unwrap() as usize,
        );
        assert_eq!(
            out["text"],
            slice_chars(content, s, e),
            "{what} text is not its slice"
        );
    }
}

/// A history page's text (written straight into a string) as a value; it is always JSON.
fn page_value(text: String) -> Value {
    serde_json::from_str(&text).expect("a history page is JSON")
}

fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

fn view<'a>(content: &'a str, hash: &'a str) -> TargetView<'a> {
    TargetView {
        target_file_id: T,
        version: 3,
        current_hash: hash,
        content,
    }
}

/// Every answer must serialize; the serialization must be ASCII-escapable.
fn emit(v: &Value) {
    let n = ascii_len(v);
    assert!(n > 0);
}

/// `args`: every read, export, save, history, initialize, preview and observe argument parser,
/// and the answer built from it over a small target. Byte 0: the tool; byte 1: the target text.
pub fn args(data: &[u8]) {
    let [tool, t, rest @ ..] = data else { return };
    let content = TEXTS[*t as usize % TEXTS.len()];
    let hash = sha256_hex(content);
    let v = view(content, &hash);
    let raw = text(rest);
    let facts = SourceLineEndings::of(content).to_json();
    let meta_export = ExportMeta {
        filename: "doc.md",
        target_type: "text/plain",
        source_line_endings: &facts,
    };
    let with = |allowed: &[&str], f: &dyn Fn(&Args) -> Value| -> Value {
        match Args::parse(&raw, allowed, &["target_file_id"]) {
            Err(e) => e.to_json("tool"),
            Ok(a) => match a.target_file_id() {
                Err(e) => e.to_json("tool"),
                Ok(id) if id != T => not_found(&id),
                Ok(_) => f(&a),
            },
        }
    };
    let answer = match tool % 12 {
        0 | 1 => match target::parse_initialize(&raw, tool % 12 == 1) {
            Err(e) => e.to_json("patchdiff_initialize_target"),
            Ok(n) => {
                assert!(
                    !n.canonical.contains('\r'),
                    "initialized content is not canonical"
                );
                assert_eq!(n.current_hash, sha256_hex(&n.canonical));
                target::initialized_response(&n, T, OTHER)
            }
        },
        2 => with(&["target_file_id"], &|_| {
            let meta = TargetMeta {
                filename: "doc.md",
                target_type: "text/plain",
                active_editing_cycle_id: OTHER,
                source_line_endings: facts.clone(),
            };
            target::get_target_response(&v, &meta)
        }),
        3 => with(
            read::READ_TARGET_ARGS,
            &|a| match read::parse_read_target(a) {
                Err(e) => e.to_json("patchdiff_read_target"),
                Ok(r) => {
                    let out = read::read_target(&v, r)
                        .unwrap_or_else(|e| e.to_json("patchdiff_read_target"));
                    assert_page_is_slice(&out, content, "read_target");
                    out
                }
            },
        ),
        4 => with(read::FIND_ARGS, &|a| match read::parse_find(a) {
            Err(e) => e.to_json("patchdiff_find_occurrences"),
            Ok(r) => {
                let out = read::find_occurrences(&v, &r);
                for o in out["occurrences"].as_array().into_iter().flatten() {
                    assert!(
                        o["end"].as_u64() > o["start"].as_u64(),
                        "an empty occurrence"
                    );
                }
                out
            }
        }),
        5 => with(
            lines::READ_LINES_ARGS,
            &|a| match lines::parse_read_lines(a) {
                Err(e) => e.to_json("patchdiff_read_lines"),
                Ok(r) => {
                    let out = lines::read_lines(&v, r)
                        .unwrap_or_else(|e| e.to_json("patchdiff_read_lines"));
                    assert_page_is_slice(&out, content, "read_lines");
                    out
                }
            },
        ),
        6 => with(export::EXPORT_ARGS, &|a| match export::parse_format(a) {
            Err(e) => e.to_json("patchdiff_export_target"),
            Ok(f) => {
                let out = export::export(&v, &meta_export, f)
                    .unwrap_or_else(|e| e.to_json("patchdiff_export_target"));
                if out["status"] == "ok" {
                    let c = out["content"].as_str().unwrap();
                    assert_eq!(out["content_sha256"], sha256_hex(c));
                    assert_eq!(canonicalize(c), content, "an export is not the text");
                }
                out
            }
        }),
        7 => match preview::parse_preview(&raw) {
            Err(e) => preview::arg_error(&e),
            Ok(sub) if sub.target_file_id != T => not_found(&sub.target_file_id),
            Ok(sub) => preview::preview(&sub, &v),
        },
        8 => match checkpoint::parse_save(&raw) {
            Err(e) => e.to_json("patchdiff_save"),
            Ok(r) if r.target_file_id != T => not_found(&r.target_file_id),
            Ok(r) => match checkpoint::check_guards(&r, &v) {
                Some(rejected) => rejected,
                None => {
                    let e = r.export_after_save.then(|| {
                        export::export(&v, &meta_export, ExportFormat::OriginalText)
                            .unwrap_or_else(|e| e.to_json("patchdiff_export_target"))
                    });
                    checkpoint::saved_response(&v, "s", OTHER, T, e)
                }
            },
        },
        9 => match history::parse_log(&raw) {
            Err(e) => history::invalid(&e, "patchdiff_get_pdcp_log"),
            Ok(q) => {
                assert!(q.page.limit >= 1, "limit {}", q.page.limit);
                page_value(history::log_page(
                    &q.page,
                    Vec::new(),
                    false,
                    q.include_content,
                    Vec::new(),
                ))
            }
        },
        10 => match history::parse_ledger(&raw) {
            Err(e) => history::invalid(&e, "patchdiff_get_manifest_ledger"),
            Ok(q) => page_value(history::ledger_page(&q.page, Vec::new(), false)),
        },
        _ => {
            // patchdiff_observe_scope's and patchdiff_submit_observed_operations' parsers.
            let a = with(
                observation::OBSERVE_ARGS,
                &|a| match observation::parse_observe(a) {
                    Err(e) => e.to_json("patchdiff_observe_scope"),
                    Ok(_) => serde_json::json!({"status": "parsed"}),
                },
            );
            emit(&a);
            match scoped::parse_submit_observed_operations(&raw) {
                Err(e) => e.to_json("patchdiff_submit_observed_operations"),
                Ok(sub) => {
                    let _ = scoped::requested_observations(&sub);
                    serde_json::json!({"status": "parsed"})
                }
            }
        }
    };
    emit(&answer);
}

/// `submit`: `patchdiff_submit_edits` / `_operations` / `_replacement` through the pipeline of
/// the extension's run_submission: parse, prepare, admission, evaluate (selectors, sequential
/// application, warnings, near misses, rejection evidence), respond, keyed recovery and
/// conflict. An accepted attempt must replay from its stored record to the same text.
/// Byte 0: the tool and the parent; byte 1: the target text.
pub fn submit(data: &[u8]) {
    let [tool, t, rest @ ..] = data else { return };
    let content = TEXTS[*t as usize % TEXTS.len()];
    let hash = sha256_hex(content);
    let start = view(content, &hash);
    let raw = text(rest);
    let parsed = match tool % 3 {
        0 => submit::parse_submit_edits(&raw),
        1 => submit::parse_submit_operations(&raw),
        _ => submit::parse_submit_replacement(&raw),
    };
    let sub = match parsed {
        Err(e) => return emit(&e.to_json("patchdiff_submit_edits")),
        Ok(s) => s,
    };
    assert!(sub.pdcp_content.is_ascii(), "pdcp_content is not ASCII");
    assert_eq!(sha256_hex(&sub.pdcp_content), sub.pdcp_content_hash);
    if sub.target_file_id != T {
        return emit(&not_found(&sub.target_file_id));
    }
    let parent = match (tool / 3) % 4 {
        0 => Parent::NotLookedUp,
        1 => Parent::NotFound,
        2 => Parent::Found {
            target_file_id: T.into(),
            status: Some(Status::Rejected),
        },
        _ => Parent::Found {
            target_file_id: OTHER.into(),
            status: Some(Status::Accepted),
        },
    };
    let identity = submit::prepare(&sub, &parent);
    assert_eq!(
        identity.fingerprint,
        sha256_hex(&to_string(&identity.envelope, CANONICAL))
    );
    if let Some(too_large) = submit::admission(&sub, None) {
        return emit(&too_large);
    }
    let a = submit::evaluate(&sub, &identity, &parent, &start);
    assert_eq!(a.before_hash, hash);
    let now_hash;
    let now = match a.status.as_str() {
        "accepted" => {
            let c = a.new_content.as_deref().expect("accepted without content");
            assert!(!c.contains('\r'), "accepted content is not canonical");
            assert_eq!(a.after_hash.as_deref(), Some(sha256_hex(c).as_str()));
            assert!(!a.changes.is_empty(), "accepted without changes");
            let mut r =
                Replay::start(T, start.version, &hash, content.to_owned()).expect("replay start");
            let row = Accepted::of(&a, 1, "p");
            if let Err(f) = r.step(&row) {
                panic!(
                    "replay does not reproduce an accepted attempt: {} {}",
                    f.reason, f.detail
                );
            }
            assert_eq!(r.content(), c, "replay reconstructs other text");
            now_hash = a.after_hash.clone().unwrap();
            TargetView {
                target_file_id: T,
                version: start.version + 1,
                current_hash: &now_hash,
                content: c,
            }
        }
        "rejected" => {
            assert!(
                a.failure_reason.is_some(),
                "rejected without failure_reason"
            );
            assert!(
                a.new_content.is_none() && a.changes.is_empty(),
                "rejected with changes"
            );
            start
        }
        other => panic!("attempt status {other}"),
    };
    emit(&submit::respond(&a, &sub, "log-1", &now, Some("corr")));
    if sub.request_key().is_some() {
        let stored = AttemptRow::of(&a, "log-1");
        match submit::recover_or_conflict(&sub, &identity, &stored, &now, None) {
            KeyOutcome::Recovered(r) => {
                let v = r.to_value();
                assert!(
                    v["status"] == a.status.as_str() && v["deduplicated"] == true,
                    "recovery"
                );
                emit(&v);
            }
            KeyOutcome::Conflict(_) => panic!("the same request conflicts with itself"),
        }
    }
}

/// `canonical`: canonical text, line-ending facts, exports in every line ending, code-point
/// slicing, and invalid-text marking of escaped lone surrogates. Bytes 0..8: two offsets.
pub fn canonical(data: &[u8]) {
    let (offsets, rest) = data.split_at(data.len().min(2));
    let raw = text(rest);
    let c = canonicalize(&raw);
    assert!(!c.contains('\r'), "CR survives canonicalization");
    assert_eq!(canonicalize(&c), c, "canonicalization is not idempotent");
    let facts = SourceLineEndings::of(&raw);
    assert_eq!(
        facts.lf + facts.crlf + facts.cr,
        c.matches('\n').count() as u64,
        "line-ending counts"
    );
    assert_eq!(
        char_len(&c) as u64,
        facts.source_code_points - facts.crlf,
        "code points"
    );
    assert_eq!(
        SourceLineEndings::from_json(&facts.to_json()),
        Some(facts.clone())
    );
    for eol in [export::Eol::Lf, export::Eol::Crlf, export::Eol::Cr] {
        assert_eq!(
            canonicalize(&export::write_eol(&c, eol)),
            c,
            "an export is not canonical text"
        );
    }
    if let Ok(eol) = export::content_eol(ExportFormat::OriginalEol, &facts.to_json()) {
        assert_eq!(
            export::write_eol(&c, eol),
            raw,
            "original_eol does not restore a uniform upload"
        );
    }
    let n = char_len(&c);
    let i = offsets.first().map_or(0, |b| *b as usize) % (n + 2);
    let j = offsets.get(1).map_or(0, |b| *b as usize) % (n + 2);
    assert_eq!(byte_offset(&c, i).is_some(), i <= n, "byte_offset range");
    let sl = slice_chars(&c, i.min(j), i.max(j));
    assert_eq!(
        char_len(sl),
        i.max(j).min(n) - i.min(j).min(n),
        "slice length"
    );
    // The raw text as JSON argument text: lone surrogates are marked, never lost.
    if let Some((marked, sentinel)) = invalid_text::mark_lone_surrogates(&raw)
        && let Ok(v) = serde_json::from_str::<Value>(&marked)
    {
        let mut defects = Vec::new();
        // Refused past its bound on the paths' bytes, which a fuzz input cannot reach.
        let _ = invalid_text::find(
            &v,
            "$",
            Some(sentinel),
            &mut defects,
            invalid_text::INVALID_TEXT_PATHS_MAX_BYTES,
        );
        emit(&invalid_text::locations(&defects));
        let _ = invalid_text::restore(&v, Some(sentinel));
    }
}

/// `near_miss`: the bounded near-miss search. The input is `buffer NUL query`.
pub fn near_miss(data: &[u8]) {
    let cut = data.iter().position(|b| *b == 0).unwrap_or(data.len());
    let buffer = canonicalize(&text(&data[..cut])).into_owned();
    let query = text(data.get(cut + 1..).unwrap_or_default());
    let nm = near_miss::search(&buffer, &query);
    let v = nm.to_json();
    assert!(
        ascii_len(&v) <= NEAR_MISSES_MAX_BYTES,
        "near misses over budget"
    );
    for c in &nm.candidates {
        assert_eq!(c.text, slice_chars(&buffer, c.start, c.end), "window text");
        assert!(c.distance >= 1, "a near miss at distance 0");
    }
    emit(&near_miss::near_miss_query(
        char_len(&query),
        &canonicalize(&query),
    ));
}

/// `replay`: a stored record the engine did not write, replayed under a format pair. Byte 0:
/// the pair (one past the last is unknown); byte 1: the snapshot text and the row's guards.
pub fn replay(data: &[u8]) {
    let [f, t, rest @ ..] = data else { return };
    let content = TEXTS[*t as usize % TEXTS.len()];
    let hash = sha256_hex(content);
    let record = text(rest);
    let (protocol, runtime) = replay::FORMATS
        .get(*f as usize % (replay::FORMATS.len() + 1))
        .map_or(("patchdiff-tx/9", "patchdiff-mvp-9"), |x| {
            (x.protocol.as_str(), x.runtime.as_str())
        });
    let other = sha256_hex("other");
    let row = Accepted {
        log_sequence: 7,
        pdcp_log_id: "p",
        protocol_version: protocol,
        runtime_version: runtime,
        pdcp_content: &record,
        before_version: if t & 0x80 == 0 { 0 } else { 1 },
        before_hash: if t & 0x40 == 0 { &hash } else { "0" },
        after_version: if t & 0x20 == 0 { Some(1) } else { None },
        after_hash: if t & 0x10 == 0 { Some(&other) } else { None },
        editing_cycle_id: "",
        observations: &[],
    };
    let mut r = Replay::start(T, 0, &hash, content.to_owned()).expect("replay start");
    let stored = TargetView {
        target_file_id: T,
        version: 1,
        current_hash: &other,
        content,
    };
    let v = match r.step(&row) {
        Ok(()) => r.finish(&stored),
        Err(f) => f.to_json(&stored, r.replayed()),
    };
    emit(&v);
}

/// `waymark`: the structural outline of any text in each of the eight grammars, as the parser
/// helper makes it. Symbols must lie within the text, in code points, and the outline must
/// cross the helper's wire unchanged. Byte 0: the language.
pub fn waymark(data: &[u8]) {
    let [l, rest @ ..] = data else { return };
    let language = Language::ALL[*l as usize % Language::ALL.len()];
    let t = canonicalize(&text(rest)).into_owned();
    // A cap passed is an answer (`parser_limit`), not a defect.
    let Ok(o) = patchdiff_waymark::outline(language, &t) else {
        return;
    };
    let n = char_len(&t);
    for s in &o.symbols {
        assert!(
            s.start <= s.end && s.end <= n,
            "a symbol outside the text: {}..{} of {n}",
            s.start,
            s.end
        );
    }
    let framed = wire::outline_response(&o);
    let back = wire::decode(language, &framed[8..]);
    assert_eq!(
        back,
        Ok(Ok(o)),
        "the outline did not cross the wire unchanged"
    );
}

/// `wire`: the backend's decoder of the parser helper's answers, fed anything (a helper that
/// answers garbage must be reported, never trusted, and never panic the backend). Byte 0: the
/// language.
pub fn wire(data: &[u8]) {
    let [l, rest @ ..] = data else { return };
    let language = Language::ALL[*l as usize % Language::ALL.len()];
    if let Ok(Ok(o)) = wire::decode(language, rest) {
        // Whatever decodes is a well-formed outline: paths are parent + "." + name.
        for s in &o.symbols {
            assert!(s.path.ends_with(&s.name));
            if let Some(p) = &s.parent {
                assert_eq!(s.path.len(), p.len() + 1 + s.name.len());
            }
        }
    }
}

/// `diff`: the line diff of `patchdiff_diff` and of the files profile's `edit_file`
/// (`unified::changes` and `print_hunks`). Input: `context NUL old NUL new` (byte 0 is the
/// context, 0 to 7 lines; a missing NUL leaves a text empty). Within a budget of 2 million
/// steps, or `TooExpensive` past it; what it answers is an edit script from `old` to `new`
/// (in order, within both texts, only equal lines left out) whose hunks apply to `old` and give
/// `new`, in both range styles.
pub fn diff(data: &[u8]) {
    let [c, rest @ ..] = data else { return };
    let context = (*c % 8) as usize;
    let mut parts = rest.splitn(2, |b| *b == 0);
    let old = text(parts.next().unwrap_or_default());
    let new = text(parts.next().unwrap_or_default());
    let mut budget = unified::Budget::new(2_000_000);
    let Ok(script) = unified::changes(&old, &new, context, &mut budget) else {
        assert!(budget.used > budget.max, "refused within its budget");
        return;
    };
    let (a, b) = (unified::lines(&old), unified::lines(&new));
    // The script rebuilds `new` from `old`: the lines between changes are equal.
    let (mut i, mut j) = (0usize, 0usize);
    for ch in &script {
        assert!(ch.deleted + ch.inserted > 0, "an empty change");
        assert!(ch.line0 >= i && ch.line1 >= j, "changes out of order");
        assert_eq!(ch.line0 - i, ch.line1 - j, "unequal runs between changes");
        assert_eq!(a[i..ch.line0], b[j..ch.line1], "a kept line differs");
        i = ch.line0 + ch.deleted;
        j = ch.line1 + ch.inserted;
        assert!(i <= a.len() && j <= b.len(), "a change past the end");
    }
    assert_eq!(a[i..], b[j..], "a kept last line differs");
    assert_eq!(script.is_empty(), old == new);
    for ranges in [unified::Ranges::Gnu, unified::Ranges::Counted] {
        let hunks = unified::print_hunks(&script, &old, &new, context, ranges);
        assert_eq!(
            apply_hunks(&old, &hunks),
            new,
            "{ranges:?} hunks do not apply"
        );
    }
}

/// Applies unified hunks to `old` as `patch` does, checking every context and removed line
/// against the line its header names.
fn apply_hunks(old: &str, hunks: &str) -> String {
    let a = unified::lines(old);
    let mut out = String::new();
    let mut at = 0usize;
    let mut rows = hunks.split_inclusive('\n').peekable();
    while let Some(h) = rows.next() {
        let start: usize = h
            .strip_prefix("@@ -")
            .and_then(|r| r.split([',', ' ']).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("not a hunk header: {h:?}"));
        // An empty range names the line before it; a non-empty one its first line.
        let first = if h
            .strip_prefix("@@ -")
            .is_some_and(|r| r.split(' ').next().is_some_and(|x| x.ends_with(",0")))
        {
            start
        } else {
            start - 1
        };
        assert!(first >= at, "hunks overlap or go backwards: {h:?}");
        a[at..first].iter().for_each(|l| out.push_str(l));
        at = first;
        let mut last_plus = false;
        while let Some(r) = rows.next_if(|r| !r.starts_with("@@ -")) {
            if r == "\\ No newline at end of file\n" {
                if last_plus {
                    out.pop();
                }
                continue;
            }
            let (sign, line) = r.split_at(1);
            last_plus = sign == "+";
            match sign {
                " " | "-" => {
                    assert_eq!(
                        a[at].trim_end_matches('\n'),
                        line.trim_end_matches('\n'),
                        "context or removed line differs"
                    );
                    if sign == " " {
                        out.push_str(a[at]);
                    }
                    at += 1;
                }
                "+" => out.push_str(line),
                _ => panic!("not a diff line: {r:?}"),
            }
        }
    }
    a[at..].iter().for_each(|l| out.push_str(l));
    out
}
