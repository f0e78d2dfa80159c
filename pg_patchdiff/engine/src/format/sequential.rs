//! The sequential canonical buffer: ordered `match` and `span` operations applied one after
//! another, all or nothing, with the facts and warnings of an accepted transaction.
//!
//! tx/1 edits are match operations only; tx/2 mixes both. Each operation sees the text after
//! every earlier operation of the same transaction, and its recorded span is in that buffer's
//! coordinates. The earlier changes' spans are kept so that a later selection can be mapped back
//! to transaction-start coordinates (for `sequential_match_invalid` and
//! `occurrence_index_basis_shift`).
//!
//! Observed submissions ([`crate::submission::scoped`]) confine the same application to one scope of the
//! buffer ([`apply_in`] with a [`Confinement`]): matches and their anchors see only the running
//! scope, spans must lie inside it, and insertions must be strictly inside it with both adjacent
//! guards, which must not reach past it. Without a confinement nothing changes.

use crate::contract::interrupt;
use crate::contract::limits::{CANDIDATES_MAX, NEAR_MISS_SCAN_MAX_CHARS, SPAN_ACTUAL_TEXT_CHARS};
use crate::contract::words::{DiagnosticCode, FailureReason};
use crate::evidence::near_miss;
use crate::evidence::rejection::{NearMissInput, Rejection, Stage, exact_candidates};
use crate::format::common::{ChangeFact, Edit, SpanOp};
use crate::target::TargetView;
use crate::text::occurrence;
use crate::text::warnings::{self, Warning, grapheme_split};
use crate::text::{byte_offset, byte_range, char_len, head_chars, sha256_hex, tail_chars};
use memchr::memmem;
use serde_json::{Value, json};

/// One operation of a transaction.
#[derive(Debug, Clone, Copy)]
pub enum Op<'a> {
    Match(&'a Edit),
    Span(&'a SpanOp),
}

impl Op<'_> {
    pub fn change_id(&self) -> &str {
        match self {
            Op::Match(e) => &e.change_id,
            Op::Span(s) => &s.change_id,
        }
    }
}

/// An accepted application: the new content, one fact per change, and the advisory warnings.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    pub content: String,
    pub changes: Vec<ChangeFact>,
    pub warnings: Vec<Warning>,
    /// SHA-256 of `content` when the format already computed it (a sole replacement hashes its
    /// replacement for its change fact, and the new content is that same text).
    pub content_sha256: Option<String>,
}

impl Applied {
    /// SHA-256 (hex) of the new content, computed once.
    pub fn content_sha256(&self) -> String {
        self.content_sha256
            .clone()
            .unwrap_or_else(|| crate::text::sha256_hex(&self.content))
    }
}

/// Code points between kept byte offsets of the buffer.
const STRIDE: usize = 1024;

/// The working text with a sampled code-point index, so that a span's offsets resolve in
/// O(STRIDE) rather than O(n). An edit at code point `s` leaves every sample at or before `s`
/// valid; later samples are rebuilt on demand, so descending spans never rescan.
struct Buffer {
    text: String,
    chars: usize,
    /// `marks[k]` is the byte offset of code point `k * STRIDE`.
    marks: Vec<usize>,
}

impl Buffer {
    fn new(s: &str) -> Self {
        Buffer {
            text: s.to_owned(),
            chars: char_len(s),
            marks: vec![0],
        }
    }

    /// The byte offset of code point `cp <= chars`.
    fn byte_at(&mut self, cp: usize) -> usize {
        let k = cp / STRIDE;
        while self.marks.len() <= k {
            // Each mark scans STRIDE code points.
            interrupt::check();
            let last = self.marks[self.marks.len() - 1];
            match byte_offset(&self.text[last..], STRIDE) {
                Some(b) => self.marks.push(last + b),
                None => break,
            }
        }
        let k = k.min(self.marks.len() - 1);
        let base = self.marks[k];
        base + byte_offset(&self.text[base..], cp - k * STRIDE).unwrap_or(self.text.len() - base)
    }

    fn replace(&mut self, sel: &Sel, new: &str, new_chars: usize) {
        self.text.replace_range(sel.bs..sel.be, new);
        self.chars = self.chars - (sel.e - sel.s) + new_chars;
        self.marks.truncate(sel.s / STRIDE + 1);
    }
}

/// A selected span of the current buffer: code points and bytes.
#[derive(Debug, Clone, Copy)]
struct Sel {
    s: usize,
    e: usize,
    bs: usize,
    be: usize,
}

/// Calls `f` for the occurrences of `needle` in `hay[b0..b1]`, in the coordinates of `hay`
/// (`b0` is code point `cp0`), until it returns false ([`crate::text::occurrence`]: linear).
fn each_occurrence(
    hay: &str,
    needle: &str,
    (cp0, b0, b1): (usize, usize, usize),
    mut f: impl FnMut(Sel) -> bool,
) {
    occurrence::for_each(&hay[b0..b1], needle, |o| {
        f(Sel {
            s: cp0 + o.start,
            e: cp0 + o.end,
            bs: b0 + o.byte_start,
            be: b0 + o.byte_end,
        })
    });
}

/// One applied change, kept to map later spans back to transaction-start coordinates.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Step {
    pub start: usize,
    pub old_end: usize,
    pub new_len: usize,
}

/// Maps a position of the buffer after `steps` back to transaction-start coordinates.
/// A position inside text an earlier change produced maps to that change's original start
/// (`right == false`) or end (`right == true`).
pub(crate) fn to_original(steps: &[Step], mut p: usize, right: bool) -> usize {
    for st in steps.iter().rev() {
        if p < st.start {
            continue;
        }
        if p >= st.start + st.new_len && !(st.new_len == 0 && p == st.start && !right) {
            p = p - st.new_len + (st.old_end - st.start);
        } else {
            p = if right { st.old_end } else { st.start };
        }
    }
    p
}

/// Maps a non-empty span of the buffer after `steps` back to transaction-start coordinates, or
/// `None` when it overlaps text an earlier change produced or spans a deletion (the selected
/// text did not exist at transaction start).
pub(crate) fn span_to_original(
    steps: &[Step],
    mut s: usize,
    mut e: usize,
) -> Option<(usize, usize)> {
    for st in steps.iter().rev() {
        let produced_end = st.start + st.new_len;
        let shift = |p: usize| p - st.new_len + (st.old_end - st.start);
        if e <= st.start {
            continue;
        }
        if s >= produced_end {
            (s, e) = (shift(s), shift(e));
            continue;
        }
        return None;
    }
    Some((s, e))
}

/// The observed scope an application is confined to: code points `[start, end)` of the
/// transaction-start buffer. Its end moves with every change (the running scope end); its start
/// never does, since every change lies inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Confinement {
    pub start: usize,
    pub end: usize,
}

/// The running scope in the current buffer: code points and bytes.
#[derive(Debug, Clone, Copy)]
struct Window {
    lo: usize,
    hi: usize,
    lo_b: usize,
    hi_b: usize,
}

/// Applies `ops` to the target sequentially, all or nothing.
pub fn apply(start: &TargetView, ops: &[Op]) -> Result<Applied, Rejection> {
    apply_in(start, ops, None)
}

/// [`apply`], optionally confined to an observed scope of `start.content`. Facts, warnings and
/// rejections keep the coordinates of `start.content` (the sequential buffer), whatever the
/// scope. A scope past the end of the text is clamped to it.
pub(crate) fn apply_in(
    start: &TargetView,
    ops: &[Op],
    scope: Option<Confinement>,
) -> Result<Applied, Rejection> {
    let original = start.content;
    let mut buf = Buffer::new(original);
    let scope = scope.map(|c| {
        let s = c.start.min(buf.chars);
        Confinement {
            start: s,
            end: c.end.clamp(s, buf.chars),
        }
    });
    // The scope's bytes in the transaction-start text, and the running scope end.
    let original_scope = scope.map(|c| (c, byte_range(original, c.start, c.end)));
    let mut running_end = scope.map_or(0, |c| c.end);
    let mut steps: Vec<Step> = Vec::with_capacity(ops.len());
    let mut changes = Vec::with_capacity(ops.len());
    let mut warnings = Vec::new();
    let mut basis = StartIndex::default();
    for (k, op) in ops.iter().enumerate() {
        // One check per operation: each does at least a hash of its texts and a splice.
        interrupt::check();
        let win = scope.map(|c| Window {
            lo: c.start,
            hi: running_end,
            lo_b: buf.byte_at(c.start),
            hi_b: buf.byte_at(running_end),
        });
        let (sel, matched, replace, operation) = match op {
            Op::Match(edit) => {
                let at = Scoped {
                    win,
                    original: original_scope,
                };
                let sel = select_match(&buf.text, edit, k, &steps, ops, start, at)?;
                (sel, edit.match_text.as_str(), edit.replace.as_str(), None)
            }
            Op::Span(sp) => {
                let sel = check_span(&mut buf, sp, k, win)?;
                (
                    sel,
                    sp.expected_text.as_str(),
                    sp.replace.as_str(),
                    Some("span"),
                )
            }
        };
        let change_id = op.change_id();
        let (rationale, risk) = match op {
            Op::Match(e) => (&e.rationale, &e.risk),
            Op::Span(s) => (&s.rationale, &s.risk),
        };
        // Warnings look at the buffer this change sees, before it applies.
        let mark = |w: Warning| {
            w.field("change_id", json!(change_id))
                .field("change_index", json!(k + 1))
        };
        if matched == replace {
            warnings.push(mark(Warning::new(
                warnings::NO_OP_CHANGE,
                format!("{change_id} replaces its matched text with identical text"),
            )));
        }
        if let (Op::Match(edit), Some(n)) = (op, op_index(op))
            && k > 0
        {
            let was = span_to_original(&steps, sel.s, sel.e).map(|(os, _)| match original_scope {
                None => basis.index(original, &edit.match_text, os),
                // Inside a scope, indexes count the scope only.
                Some((c, (b0, b1))) => basis.index(
                    &original[b0..b1],
                    &edit.match_text,
                    os.saturating_sub(c.start),
                ),
            });
            if was != Some(n) {
                let detail = match was {
                    Some(m) => format!(
                        "{change_id} occurrence_index {n} selected the occurrence that was index {m} at transaction start"
                    ),
                    None => format!(
                        "{change_id} occurrence_index {n} selected text that earlier changes in this transaction produced"
                    ),
                };
                warnings.push(
                    mark(Warning::new(warnings::OCCURRENCE_INDEX_BASIS_SHIFT, detail))
                        .field("occurrence_index", json!(n))
                        .field("transaction_start_occurrence_index", json!(was)),
                );
            }
        }
        let boundaries: &[(&str, usize, usize)] = if sel.s == sel.e {
            &[("insertion", sel.s, sel.bs)]
        } else {
            &[("start", sel.s, sel.bs), ("end", sel.e, sel.be)]
        };
        for &(which, at, b) in boundaries {
            if let Some(why) = grapheme_split(&buf.text, b) {
                warnings.push(
                    mark(Warning::new(
                        warnings::GRAPHEME_BOUNDARY_SPLIT,
                        format!(
                            "{change_id} span {which} at sequential offset {at} falls inside a likely grapheme cluster ({why})"
                        ),
                    ))
                    .field("boundary", json!(which))
                    .field("offset", json!(at))
                    .field("reason", json!(why)),
                );
            }
        }
        let new_len = char_len(replace);
        changes.push(ChangeFact {
            change_id: change_id.to_owned(),
            change_index: k + 1,
            span_start: sel.s,
            span_end: sel.e,
            matched_chars: sel.e - sel.s,
            replacement_chars: new_len,
            matched_sha256: sha256_hex(matched),
            replacement_sha256: sha256_hex(replace),
            rationale: rationale.clone(),
            risk: risk.clone(),
            operation,
            observed: None,
        });
        if scope.is_some() {
            running_end = running_end + new_len - (sel.e - sel.s);
        }
        steps.push(Step {
            start: sel.s,
            old_end: sel.e,
            new_len,
        });
        buf.replace(&sel, replace, new_len);
    }
    if buf.text == original {
        warnings.push(no_op_transaction());
    }
    Ok(Applied {
        content: buf.text,
        changes,
        warnings,
        content_sha256: None,
    })
}

fn op_index(op: &Op) -> Option<usize> {
    match op {
        Op::Match(e) => e.occurrence_index,
        Op::Span(_) => None,
    }
}

pub(crate) fn no_op_transaction() -> Warning {
    Warning::new(
        warnings::NO_OP_TRANSACTION,
        "the transaction leaves the text unchanged (before_hash == after_hash) while the version still advances; a hash-only guard cannot detect this, prefer a version guard".into(),
    )
}

/// Transaction-start occurrence indexes (for `occurrence_index_basis_shift`), with every
/// [`SAMPLE`]-th start of the last needle asked about kept (in code points and bytes): a run of
/// same-string edits, the shape the warning is for, then costs one search of the
/// transaction-start text, and each index a search of at most [`SAMPLE`] occurrences from the
/// sample before it. It kept every start (8 bytes an occurrence: 500 MB for a one-letter needle
/// in 64 MB of that letter, helper-73); now 16 bytes every [`SAMPLE`] occurrences.
#[derive(Default)]
struct StartIndex {
    needle: Option<String>,
    samples: Vec<(usize, usize)>,
}

/// One sampled start every `SAMPLE` occurrences.
const SAMPLE: usize = 64;

impl StartIndex {
    /// The 1-based index, among the overlapping occurrences of `needle` in `original`, of the
    /// one that starts at `at` (or of the first after it). `original` is the same text for every
    /// call on one value.
    fn index(&mut self, original: &str, needle: &str, at: usize) -> usize {
        if self.needle.as_deref() != Some(needle) {
            self.needle = Some(needle.to_owned());
            self.samples.clear();
            let mut n = 0usize;
            occurrence::for_each(original, needle, |o| {
                if n.is_multiple_of(SAMPLE) {
                    self.samples.push((o.start, o.byte_start));
                }
                n += 1;
                true
            });
        }
        // The last sample that starts before `at`: every occurrence before it does too.
        let k = self.samples.partition_point(|&(s, _)| s < at);
        let Some(&(cp0, b0)) = k.checked_sub(1).and_then(|i| self.samples.get(i)) else {
            return 1;
        };
        let mut before = (k - 1) * SAMPLE;
        occurrence::for_each(&original[b0..], needle, |o| {
            let starts_before = cp0 + o.start < at;
            before += usize::from(starts_before);
            starts_before
        });
        before + 1
    }
}

/// The transaction-start interval each change consumed (for `sequential_match_invalid`):
/// quadratic in the number of changes, so computed only for that rejection, once.
fn consumed_intervals(steps: &[Step]) -> Vec<(usize, usize)> {
    let mut ticks = interrupt::Every::new(64);
    (0..steps.len())
        .map(|j| {
            ticks.tick();
            let st = &steps[j];
            (
                to_original(&steps[..j], st.start, false),
                to_original(&steps[..j], st.old_end, true),
            )
        })
        .collect()
}

/// Where a confined match looks: the running scope of the current buffer and the scope of the
/// transaction-start text (with its byte range). Both `None` without a confinement.
#[derive(Clone, Copy)]
struct Scoped {
    win: Option<Window>,
    original: Option<(Confinement, (usize, usize))>,
}

/// What a rejection needs of the occurrences of a match in its region, from one pass over
/// them: how many there are, the first [`CANDIDATES_MAX`] (the candidates an answer lists), the
/// one `occurrence_index` names, and how many the anchors hold for, with the first of those.
/// Counted, not collected: a one-character match in a 64 MB text has 64 million occurrences,
/// and a list of them took 3 GB of the backend (helper-70).
struct Found {
    count: usize,
    first: Vec<Sel>,
    nth: Option<Sel>,
    held: usize,
    first_held: Option<Sel>,
}

impl Found {
    fn of(
        buf: &str,
        needle: &str,
        region: (usize, usize, usize),
        nth: Option<usize>,
        holds: Option<&dyn Fn(&Sel) -> bool>,
    ) -> Found {
        let mut f = Found {
            count: 0,
            first: Vec::new(),
            nth: None,
            held: 0,
            first_held: None,
        };
        each_occurrence(buf, needle, region, |o| {
            f.count += 1;
            if f.first.len() < CANDIDATES_MAX {
                f.first.push(o);
            }
            if nth == Some(f.count) {
                f.nth = Some(o);
            }
            if holds.is_some_and(|h| h(&o)) {
                f.held += 1;
                f.first_held.get_or_insert(o);
            }
            true
        });
        f
    }
}

/// For `sequential_match_invalid`: the occurrences of `needle` in the transaction-start text
/// `original[b0..b1]` (code point `cp0` at `b0`), and the first [`CANDIDATES_MAX`] of them that
/// an earlier change consumed, each with the index of the first change whose consumed interval
/// (`consumed`, transaction-start coordinates) overlaps it: `cs < o.e && o.s < ce` (for an
/// insertion, `cs == ce`, strictly inside). One pass over the occurrences, which all have the
/// needle's length and so come with rising starts and ends, sweeping the intervals sorted by
/// start through a heap of the entered ones by change index: an interval that ends at or before
/// an occurrence's start ends before every later one's too. (It compared every occurrence with
/// every change: 150 s that no cancel could stop for 10,000 changes on 7.5 MB, helper-70.)
fn consumed_originals(
    original: &str,
    needle: &str,
    region: (usize, usize, usize),
    consumed: &[(usize, usize)],
) -> (usize, Vec<(Sel, usize)>) {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut by_start: Vec<usize> = (0..consumed.len()).collect();
    by_start.sort_unstable_by_key(|&j| consumed[j].0);
    let mut next = 0;
    let mut entered: BinaryHeap<Reverse<usize>> = BinaryHeap::new();
    let (mut count, mut hit) = (0usize, Vec::new());
    each_occurrence(original, needle, region, |o| {
        count += 1;
        if hit.len() == CANDIDATES_MAX {
            return true;
        }
        while next < by_start.len() && consumed[by_start[next]].0 < o.e {
            entered.push(Reverse(by_start[next]));
            next += 1;
        }
        while entered
            .peek()
            .is_some_and(|&Reverse(j)| consumed[j].1 <= o.s)
        {
            entered.pop();
        }
        if let Some(&Reverse(j)) = entered.peek() {
            hit.push((o, j));
        }
        true
    });
    (count, hit)
}

/// Selects the one occurrence a typed match names in the current buffer (contract
/// "patchdiff_submit_edits": every supplied selector must hold). Confined, the match and its
/// anchors see only the running scope.
fn select_match(
    buf: &str,
    edit: &Edit,
    k: usize,
    steps: &[Step],
    ops: &[Op],
    start: &TargetView,
    at: Scoped,
) -> Result<Sel, Rejection> {
    let original = start.content;
    let prior = k;
    let region = at.win.map_or((0, 0, buf.len()), |w| (w.lo, w.lo_b, w.hi_b));
    let (lo_b, hi_b) = (region.1, region.2);
    // An anchor holds for an occurrence when it occurs anywhere before (after) it in the region:
    // exactly when its first occurrence ends (its last one starts) on the right side of it. Two
    // searches per edit instead of two per occurrence.
    let region_bytes = &buf.as_bytes()[lo_b..hi_b];
    let before_end = edit
        .anchor_before
        .as_deref()
        .map(|a| memmem::find(region_bytes, a.as_bytes()).map(|x| lo_b + x + a.len()));
    let after_start = edit
        .anchor_after
        .as_deref()
        .map(|a| memmem::rfind(region_bytes, a.as_bytes()).map(|x| lo_b + x));
    let holds = |o: &Sel| {
        before_end.is_none_or(|e| e.is_some_and(|e| e <= o.bs))
            && after_start.is_none_or(|s| s.is_some_and(|s| s >= o.be))
    };
    let anchored = edit.anchor_before.is_some() || edit.anchor_after.is_some();
    // The accepting paths need at most the n-th occurrence, or the first two: stop there. Every
    // other outcome is a rejection, answered from the full list below.
    let wanted = match edit.occurrence_index {
        Some(n) => Some(n),
        None if !anchored => Some(2),
        None => None,
    };
    if let Some(want) = wanted {
        let mut seen: Vec<Sel> = Vec::with_capacity(2);
        let mut nth = None;
        let mut count = 0usize;
        each_occurrence(buf, &edit.match_text, region, |o| {
            count += 1;
            if count <= 2 {
                seen.push(o);
            }
            if count == want {
                nth = Some(o);
            }
            count < want
        });
        match edit.occurrence_index {
            Some(_) => {
                if let Some(o) = nth.filter(|o| holds(o)) {
                    return Ok(o);
                }
            }
            None if count == 1 => return Ok(seen[0]),
            None => {}
        }
    }
    let found = Found::of(
        buf,
        &edit.match_text,
        region,
        edit.occurrence_index,
        anchored.then_some(&holds as &dyn Fn(&Sel) -> bool),
    );
    let fail = |reason: FailureReason, detail: String| {
        let mut r = Rejection::new(reason, Stage::TransactionApplicability, detail);
        r.failed_change_id = Some(edit.change_id.clone());
        if prior > 0 {
            r.intermediate = Some((buf.to_owned(), prior));
        }
        r
    };
    let stage = if prior > 0 {
        "intermediate_buffer"
    } else {
        "canonical_target"
    };
    let with_candidates = |mut r: Rejection| {
        let spans: Vec<(usize, usize)> = found.first.iter().map(|o| (o.s, o.e)).collect();
        if prior > 0 {
            r.detail.push_str(&format!(
                " Selectors count the sequential buffer after {prior} simulated change{}.",
                if prior == 1 { "" } else { "s" }
            ));
        }
        r.location = spans.first().map(|s| s.0);
        r.fields
            .insert("occurrence_count".into(), json!(found.count));
        r.fields.insert(
            "exact_candidates".into(),
            exact_candidates(
                buf,
                &edit.match_text,
                &spans,
                found.count,
                stage,
                prior,
                start,
            ),
        );
        r
    };
    if found.count == 0 {
        if prior > 0 {
            let region = match at.original {
                None => (0, 0, original.len()),
                Some((c, (b0, b1))) => (c.start, b0, b1),
            };
            let consumed = consumed_intervals(steps);
            let (originals, hit) =
                consumed_originals(original, &edit.match_text, region, &consumed);
            if !hit.is_empty() {
                let listed: Vec<Value> = hit
                    .iter()
                    .map(|(o, j)| {
                        json!({
                            "start": o.s, "end": o.e,
                            "consumed_by_change_id": ops[*j].change_id(),
                            "consumed_by_change_index": j + 1,
                        })
                    })
                    .collect();
                let mut r = fail(
                    FailureReason::SequentialMatchInvalid,
                    "MATCH text was consumed by earlier change in this transaction.".into(),
                );
                r.fields
                    .insert("original_occurrence_count".into(), json!(originals));
                r.fields
                    .insert("original_occurrences".into(), json!(listed));
                return Err(r);
            }
        }
        let detail = if at.win.is_some() {
            "MATCH text not found in the observed scope."
        } else {
            "MATCH text not found in target."
        };
        let mut r = fail(FailureReason::MatchAbsent, detail.into());
        let query = near_miss::near_miss_query(edit.match_raw_chars, &edit.match_text);
        // Every size: the near misses themselves stop at 64 code points, the drift evidence
        // (issue 17) does not. Confined, the match could only have matched inside the running
        // scope: search that, not the head of the whole text (issue 17).
        let (lo, hi) = at.win.map_or((0, char_len(buf)), |w| (w.lo, w.hi));
        r.near_miss_input = Some(NearMissInput {
            query: edit.match_text.clone(),
            buffer: head_chars(&buf[lo_b..hi_b], NEAR_MISS_SCAN_MAX_CHARS).to_owned(),
            offset: lo,
            region_end: hi,
        });
        r.fields.insert("near_miss_query".into(), query);
        return Err(r);
    }
    match (edit.occurrence_index, found.nth) {
        (Some(n), None) => Err(with_candidates(fail(
            FailureReason::DisambiguationInvalid,
            format!(
                "occurrence_index {n} exceeds the {} exact occurrence(s) of MATCH text in the buffer this edit sees.",
                found.count
            ),
        ))),
        (Some(n), Some(o)) if !holds(&o) => Err(with_candidates(fail(
            FailureReason::DisambiguationInvalid,
            format!(
                "occurrence_index {n} selects an occurrence that does not satisfy the anchors."
            ),
        ))),
        (Some(_), Some(o)) => Ok(o),
        (None, _) if anchored => match found.first_held {
            Some(o) if found.held == 1 => Ok(o),
            _ => Err(with_candidates(fail(
                FailureReason::DisambiguationInvalid,
                format!(
                    "Anchors select {} of {} exact occurrences of MATCH text; they must select exactly one.",
                    found.held, found.count
                ),
            ))),
        },
        (None, _) if found.count > 1 => Err(with_candidates(fail(
            FailureReason::MatchAmbiguous,
            "MATCH text appears multiple times without disambiguation.".into(),
        ))),
        (None, _) => Ok(found.first[0]),
    }
}

/// Checks a span against the current buffer (contract "patchdiff_submit_operations"): bounds,
/// then `expected_text`, then the adjacent `expected_before` and `expected_after`.
///
/// Confined to a running scope `win` (contract "patchdiff_submit_observed_operations"), the
/// scope rules come first: the span must lie inside the scope, an insertion strictly inside it
/// (`span_out_of_bounds` / `OPERATION_OUTSIDE_OBSERVED_SCOPE`); an insertion needs both
/// `expected_before` and `expected_after` (`span_expected_text_mismatch` /
/// `OBSERVED_INSERTION_GUARDS_REQUIRED`); no guard may reach past the scope (`span_out_of_bounds`
/// / `OPERATION_OUTSIDE_OBSERVED_SCOPE`, for every span). Every confined failure names the
/// running scope (`running_scope_start`, `running_scope_end`).
fn check_span(
    buf: &mut Buffer,
    sp: &SpanOp,
    prior: usize,
    win: Option<Window>,
) -> Result<Sel, Rejection> {
    let len = buf.chars;
    let fail = |buf: &Buffer, reason: FailureReason, detail: String, check: &str, at: usize| {
        let mut detail = detail;
        if prior > 0 {
            detail.push_str(&format!(
                " Span coordinates refer to the sequential buffer after {prior} simulated change{}.",
                if prior == 1 { "" } else { "s" }
            ));
        }
        let mut r = Rejection::new(reason, Stage::TransactionApplicability, detail)
            .field("span_check", json!(check))
            .field("buffer_length", json!(len));
        if let Some(w) = win {
            r.fields.insert("running_scope_start".into(), json!(w.lo));
            r.fields.insert("running_scope_end".into(), json!(w.hi));
        }
        r.failed_change_id = Some(sp.change_id.clone());
        r.location = Some(at);
        if prior > 0 {
            r.intermediate = Some((buf.text.clone(), prior));
        }
        r
    };
    if let Some(w) = win {
        let coded = |mut r: Rejection, code: DiagnosticCode| {
            r.fields
                .shift_insert(0, "code".into(), json!(code.as_str()));
            r
        };
        let insertion = sp.start == sp.end;
        let span = format!("Span [{}, {})", sp.start, sp.end);
        let scope = format!("the running observed scope [{}, {})", w.lo, w.hi);
        let outside = if sp.start < w.lo {
            Some((format!("{span} begins before {scope}."), sp.start))
        } else if sp.end > w.hi {
            Some((format!("{span} ends past {scope}."), w.hi))
        } else if insertion && (sp.start == w.lo || sp.start == w.hi) {
            Some((
                format!(
                    "{span} inserts at a boundary of {scope}; an insertion must lie strictly inside it."
                ),
                sp.start,
            ))
        } else {
            None
        };
        if let Some((detail, at)) = outside {
            let r = fail(
                buf,
                FailureReason::SpanOutOfBounds,
                detail,
                "observed_scope",
                at.min(len),
            );
            return Err(coded(r, DiagnosticCode::OperationOutsideObservedScope));
        }
        if insertion {
            let missing: Vec<&str> = [
                ("expected_before", &sp.expected_before),
                ("expected_after", &sp.expected_after),
            ]
            .into_iter()
            .filter(|(_, g)| g.is_none())
            .map(|(k, _)| k)
            .collect();
            if !missing.is_empty() {
                let r = fail(
                    buf,
                    FailureReason::SpanExpectedTextMismatch,
                    format!(
                        "An insertion into an observed scope needs both non-empty expected_before and expected_after; missing: {}.",
                        missing.join(", ")
                    ),
                    "insertion_guards",
                    sp.start,
                )
                .field("missing_guards", json!(missing));
                return Err(coded(r, DiagnosticCode::ObservedInsertionGuardsRequired));
            }
        }
        let crossing = [
            (
                "expected_before",
                sp.expected_before.as_deref().map(char_len),
                sp.start - w.lo,
            ),
            (
                "expected_after",
                sp.expected_after.as_deref().map(char_len),
                w.hi - sp.end,
            ),
        ];
        for (check, guard, room) in crossing {
            if let Some(n) = guard.filter(|n| *n > room) {
                let r = fail(
                    buf,
                    FailureReason::SpanOutOfBounds,
                    format!(
                        "{check} of {n} code point(s) reaches past {scope}: only {room} lie between the span and the scope boundary."
                    ),
                    check,
                    sp.start,
                );
                return Err(coded(r, DiagnosticCode::OperationOutsideObservedScope));
            }
        }
    }
    if sp.end > len {
        return Err(fail(
            buf,
            FailureReason::SpanOutOfBounds,
            format!(
                "Span [{}, {}) is outside the sequential buffer of {len} code points.",
                sp.start, sp.end
            ),
            "bounds",
            len,
        ));
    }
    let bs = buf.byte_at(sp.start);
    let be = buf.byte_at(sp.end);
    // `actual` is what is there; `tail` shows the end nearest the span (expected_before).
    let mismatch = |buf: &Buffer,
                    check: &str,
                    what: &str,
                    expected: &str,
                    actual: &str,
                    actual_chars: usize,
                    tail: bool,
                    at: usize| {
        let shown = if tail {
            tail_chars(actual, SPAN_ACTUAL_TEXT_CHARS)
        } else {
            head_chars(actual, SPAN_ACTUAL_TEXT_CHARS)
        };
        let mut r = fail(
            buf,
            FailureReason::SpanExpectedTextMismatch,
            format!("{what} does not equal {check}."),
            check,
            at,
        );
        r.fields.insert("actual_text".into(), json!(shown));
        r.fields.insert(
            "actual_text_truncated".into(),
            json!(actual_chars > SPAN_ACTUAL_TEXT_CHARS),
        );
        r.fields
            .insert("expected_chars".into(), json!(char_len(expected)));
        r.fields.insert("actual_chars".into(), json!(actual_chars));
        r
    };
    let actual = &buf.text[bs..be];
    if actual != sp.expected_text {
        return Err(mismatch(
            buf,
            "expected_text",
            "The span's text",
            &sp.expected_text,
            actual,
            sp.end - sp.start,
            false,
            sp.start,
        ));
    }
    if let Some(before) = &sp.expected_before {
        let from = sp.start.saturating_sub(char_len(before));
        let bf = buf.byte_at(from);
        let actual = &buf.text[bf..bs];
        if actual != before {
            return Err(mismatch(
                buf,
                "expected_before",
                "The text immediately before the span",
                before,
                actual,
                sp.start - from,
                true,
                sp.start,
            ));
        }
    }
    if let Some(after) = &sp.expected_after {
        let to = (sp.end + char_len(after)).min(len);
        let bt = buf.byte_at(to);
        let actual = &buf.text[be..bt];
        if actual != after {
            return Err(mismatch(
                buf,
                "expected_after",
                "The text immediately after the span",
                after,
                actual,
                to - sp.end,
                false,
                sp.end,
            ));
        }
    }
    Ok(Sel {
        s: sp.start,
        e: sp.end,
        bs,
        be,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(v: &[(usize, usize, usize)]) -> Vec<Step> {
        v.iter()
            .map(|&(start, old_end, new_len)| Step {
                start,
                old_end,
                new_len,
            })
            .collect()
    }

    /// Contract "occurrence_index_basis_shift": the selected span maps back through the earlier
    /// changes' recorded spans, or to null when those changes produced the text.
    #[test]
    fn spans_map_back_through_earlier_changes() {
        // "Calcly 1, Calcly 2": change 1 replaced [0, 6) with 5 code points ("Numra").
        let s = steps(&[(0, 6, 5)]);
        assert_eq!(span_to_original(&s, 9, 15), Some((10, 16)));
        assert_eq!(span_to_original(&s, 0, 5), None);
        assert_eq!(span_to_original(&s, 4, 7), None);
        assert_eq!(span_to_original(&s, 5, 7), Some((6, 8)));
        // A deletion at 3: a span across the deletion point did not exist; one ending at it did.
        let d = steps(&[(3, 5, 0)]);
        assert_eq!(span_to_original(&d, 2, 4), None);
        assert_eq!(span_to_original(&d, 1, 3), Some((1, 3)));
        assert_eq!(span_to_original(&d, 3, 4), Some((5, 6)));
        // Two steps, the second before the first.
        let two = steps(&[(10, 12, 4), (0, 0, 3)]);
        assert_eq!(span_to_original(&two, 17, 19), Some((12, 14)));
    }

    #[test]
    fn buffer_index_survives_edits_in_any_order() {
        let text: String = (0..5000)
            .map(|i| if i % 3 == 0 { '🌍' } else { 'a' })
            .collect();
        let mut b = Buffer::new(&text);
        let mut reference: Vec<char> = text.chars().collect();
        for (s, e, new) in [
            (4000, 4100, "xy"),
            (10, 20, ""),
            (1500, 1500, "中中中"),
            (4800, 4800, "end"),
        ] {
            let bs = b.byte_at(s);
            let be = b.byte_at(e);
            let n = char_len(new);
            b.replace(&Sel { s, e, bs, be }, new, n);
            reference.splice(s..e, new.chars());
            for probe in [0, 1, 999, 1024, 1025, 2048, 3000, reference.len()] {
                let want: usize = reference[..probe].iter().map(|c| c.len_utf8()).sum();
                assert_eq!(b.byte_at(probe), want, "probe {probe}");
            }
        }
        assert_eq!(b.chars, reference.len());
        assert_eq!(b.text, reference.into_iter().collect::<String>());
    }

    fn view(content: &str) -> TargetView<'_> {
        TargetView {
            target_file_id: "t",
            version: 0,
            current_hash: "h",
            content,
        }
    }

    fn edit(m: &str, r: &str, idx: Option<usize>, i: usize) -> Edit {
        Edit {
            change_id: format!("chg_{:03}", i + 1),
            match_text: m.into(),
            match_raw_chars: m.chars().count(),
            replace: r.into(),
            rationale: None,
            risk: None,
            occurrence_index: idx,
            anchor_before: None,
            anchor_after: None,
        }
    }

    fn span(start: usize, end: usize, expected: &str, replace: &str) -> SpanOp {
        SpanOp {
            change_id: "chg_001".into(),
            start,
            end,
            expected_text: expected.into(),
            replace: replace.into(),
            rationale: None,
            risk: None,
            expected_before: None,
            expected_after: None,
        }
    }

    /// Host guide "occurrence_index counts the buffer each edit sees": six Calcly, indexes
    /// 1, 2, 3 rename originals 1, 3, 5 and warn about the basis shift of changes 2 and 3.
    #[test]
    fn six_calcly_basis_shift_warnings() {
        let text = "Calcly 1, Calcly 2, Calcly 3, Calcly 4, Calcly 5, Calcly 6.";
        let edits: Vec<Edit> = (0..3)
            .map(|i| edit("Calcly", "Numra", Some(i + 1), i))
            .collect();
        let ops: Vec<Op> = edits.iter().map(Op::Match).collect();
        let a = apply(&view(text), &ops).unwrap();
        assert_eq!(
            a.content,
            "Numra 1, Calcly 2, Numra 3, Calcly 4, Numra 5, Calcly 6."
        );
        let lines: Vec<String> = a.warnings.iter().map(Warning::line).collect();
        assert_eq!(
            lines,
            [
                "occurrence_index_basis_shift: chg_002 occurrence_index 2 selected the occurrence that was index 3 at transaction start",
                "occurrence_index_basis_shift: chg_003 occurrence_index 3 selected the occurrence that was index 5 at transaction start",
            ]
        );
        assert_eq!(
            a.warnings[0].to_json(),
            json!({"code": "occurrence_index_basis_shift",
                   "detail": "chg_002 occurrence_index 2 selected the occurrence that was index 3 at transaction start",
                   "change_id": "chg_002", "change_index": 2, "occurrence_index": 2,
                   "transaction_start_occurrence_index": 3})
        );
        // Indexes that keep their basis (a later occurrence first) do not warn.
        let edits = [
            edit("Calcly", "Numra", Some(6), 0),
            edit("Calcly", "Numra", Some(1), 1),
        ];
        let ops: Vec<Op> = edits.iter().map(Op::Match).collect();
        assert!(apply(&view(text), &ops).unwrap().warnings.is_empty());
        // Text an earlier change produced: transaction_start_occurrence_index null.
        let edits = [edit("ab", "xab", None, 0), edit("xa", "Y", Some(1), 1)];
        let ops: Vec<Op> = edits.iter().map(Op::Match).collect();
        let a = apply(&view("ab"), &ops).unwrap();
        assert_eq!(
            a.warnings[0].fields["transaction_start_occurrence_index"],
            Value::Null
        );
        assert!(
            a.warnings[0]
                .detail
                .contains("earlier changes in this transaction produced")
        );
    }

    /// no_op_change and no_op_transaction.
    #[test]
    fn no_op_warnings() {
        let edits = [edit("a", "a", None, 0)];
        let ops: Vec<Op> = edits.iter().map(Op::Match).collect();
        let a = apply(&view("abc"), &ops).unwrap();
        let codes: Vec<&str> = a.warnings.iter().map(|w| w.code).collect();
        assert_eq!(codes, ["no_op_change", "no_op_transaction"]);
        // Two changes that undo each other: no no-op change, but a no-op transaction.
        let edits = [edit("a", "b", None, 0), edit("b", "a", None, 1)];
        let ops: Vec<Op> = edits.iter().map(Op::Match).collect();
        let a = apply(&view("ac"), &ops).unwrap();
        let codes: Vec<&str> = a.warnings.iter().map(|w| w.code).collect();
        assert_eq!(codes, ["no_op_transaction"]);
        // A plain edit has none.
        let edits = [edit("a", "b", None, 0)];
        let ops: Vec<Op> = edits.iter().map(Op::Match).collect();
        assert!(apply(&view("ac"), &ops).unwrap().warnings.is_empty());
    }

    /// Contract "Exact candidates, consumed matches and near misses" (`sequential_match_invalid`):
    /// the sweep finds the same consumed occurrences, each with the first change that consumed
    /// it, as comparing every occurrence with every change did, and counts every occurrence of
    /// the transaction-start text. Random texts over two letters (so needles overlap), random
    /// intervals, empty ones (insertions) among them, in random order.
    #[test]
    fn consumed_originals_equal_the_pairwise_scan() {
        let mut rng = crate::contract::rng::XorShift(0x5eed_0021);
        for case in 0..3_000 {
            let n = 1 + rng.below(60);
            let text: String = (0..n)
                .map(|_| if rng.below(3) == 0 { 'b' } else { 'a' })
                .collect();
            let needle = ["a", "aa", "ab", "aba", "b"][rng.below(5)];
            let consumed: Vec<(usize, usize)> = (0..rng.below(12))
                .map(|_| {
                    let cs = rng.below(n + 1);
                    (cs, (cs + rng.below(6)).min(n))
                })
                .collect();
            let all: Vec<Sel> = {
                let mut v = Vec::new();
                each_occurrence(&text, needle, (0, 0, text.len()), |o| {
                    v.push(o);
                    true
                });
                v
            };
            let pairwise: Vec<(usize, usize, usize)> = all
                .iter()
                .filter_map(|o| {
                    consumed
                        .iter()
                        .position(|&(cs, ce)| {
                            if cs == ce {
                                o.s < cs && cs < o.e
                            } else {
                                o.s < ce && cs < o.e
                            }
                        })
                        .map(|j| (o.s, o.e, j))
                })
                .take(CANDIDATES_MAX)
                .collect();
            let (count, hit) = consumed_originals(&text, needle, (0, 0, text.len()), &consumed);
            let swept: Vec<(usize, usize, usize)> =
                hit.iter().map(|(o, j)| (o.s, o.e, *j)).collect();
            assert_eq!(count, all.len(), "case {case}: {text:?} {needle:?}");
            assert_eq!(
                swept, pairwise,
                "case {case}: {text:?} {needle:?} {consumed:?}"
            );
        }
    }

    /// helper-73 F2: the sampled transaction-start index answers what the full list of starts
    /// answered, for needles that overlap, are absent, or change between calls, at every
    /// position (`at` between starts and past the last).
    #[test]
    fn sampled_start_index_equals_the_full_list() {
        let mut rng = crate::contract::rng::XorShift(0x5eed_0073);
        let mut index = StartIndex::default();
        for case in 0..400 {
            let n = rng.below(700);
            let text: String = (0..n).map(|_| ['a', 'a', 'b', 'é'][rng.below(4)]).collect();
            let needle = ["a", "aa", "ab", "é", "zz", "aé"][rng.below(6)];
            let starts: Vec<usize> = {
                let mut v = Vec::new();
                each_occurrence(&text, needle, (0, 0, text.len()), |o| {
                    v.push(o.s);
                    true
                });
                v
            };
            for _ in 0..20 {
                let at = rng.below(n + 2);
                let want = starts.partition_point(|&s| s < at) + 1;
                assert_eq!(
                    index.index(&text, needle, at),
                    want,
                    "case {case}: {text:?} {needle:?} at {at}"
                );
            }
            // The next case's text differs: forget it, as a new transaction's index would.
            index = StartIndex::default();
        }
    }

    /// helper-70 F1/F2: a match absent from the buffer but present many times in the
    /// transaction-start text, after many earlier changes, is answered from one pass over its
    /// occurrences (it compared each with each change: 150 s for 10,000 changes on 7.5 MB, with
    /// no interrupt check), and an ambiguous match keeps only the candidates it lists. Both
    /// answers are the contract's: the count of occurrences, the first five.
    #[test]
    fn rejections_on_many_occurrences_count_them_without_listing_them() {
        let text = format!("Z{}", "a".repeat(200_000));
        // 2,000 changes that each rewrite "Z" as itself, then one that consumes every "a", then
        // a match of "a", which the buffer no longer has.
        let mut edits: Vec<Edit> = (0..2_000).map(|i| edit("Z", "Z", Some(1), i)).collect();
        edits.push(edit(&"a".repeat(200_000), "", None, 2_000));
        edits.push(edit("a", "b", None, 2_001));
        let ops: Vec<Op> = edits.iter().map(Op::Match).collect();
        let r = apply(&view(&text), &ops).unwrap_err();
        assert_eq!(r.reason, FailureReason::SequentialMatchInvalid);
        assert_eq!(r.fields["original_occurrence_count"], json!(200_000));
        let listed = r.fields["original_occurrences"].as_array().unwrap();
        assert_eq!(listed.len(), CANDIDATES_MAX);
        assert_eq!(listed[0]["start"], json!(1));
        assert_eq!(listed[0]["consumed_by_change_index"], json!(2_001));
        // The same rejection checks for interrupts while it searches.
        assert!(crate::contract::interrupt::testing::interrupted_after(
            3,
            || apply(&view(&text), &ops)
        ));
        // Ambiguous: every occurrence counted, five listed.
        let one = [edit("a", "b", None, 0)];
        let r = apply(&view(&text), &[Op::Match(&one[0])]).unwrap_err();
        assert_eq!(r.reason, FailureReason::MatchAmbiguous);
        assert_eq!(r.fields["occurrence_count"], json!(200_000));
        let c = &r.fields["exact_candidates"];
        assert_eq!(c["occurrence_count"], json!(200_000));
        assert_eq!(c["returned_count"], json!(CANDIDATES_MAX));
        assert_eq!(c["truncated"], json!(true));
        // An occurrence_index past the count names the count.
        let past = [edit("a", "b", Some(200_001), 0)];
        let r = apply(&view(&text), &[Op::Match(&past[0])]).unwrap_err();
        assert_eq!(r.reason, FailureReason::DisambiguationInvalid);
        assert!(
            r.detail.contains("exceeds the 200000 exact"),
            "{}",
            r.detail
        );
    }

    /// Contract "grapheme_boundary_split": a UTF-16 offset sent as a code-point offset lands
    /// inside an emoji cluster.
    #[test]
    fn utf16_offset_inside_an_emoji_warns() {
        // "😀👍🏽!": a UTF-16 host means "after 😀" with offset 2, which in code points falls
        // between 👍 and its skin-tone modifier.
        let text = "\u{1F600}\u{1F44D}\u{1F3FD}!";
        let sp = span(2, 2, "", "X");
        let a = apply(&view(text), &[Op::Span(&sp)]).unwrap();
        assert_eq!(a.warnings.len(), 1);
        assert_eq!(
            a.warnings[0].to_json(),
            json!({"code": "grapheme_boundary_split",
                   "detail": "chg_001 span insertion at sequential offset 2 falls inside a likely grapheme cluster (before an emoji modifier)",
                   "change_id": "chg_001", "change_index": 1, "boundary": "insertion", "offset": 2,
                   "reason": "before an emoji modifier"})
        );
        // The code-point offset 1 (after 😀) is clean.
        let sp = span(1, 1, "", "X");
        assert!(
            apply(&view(text), &[Op::Span(&sp)])
                .unwrap()
                .warnings
                .is_empty()
        );
        // Deliberately replacing the modifier warns at its start.
        let sp = span(2, 3, "\u{1F3FD}", "\u{1F3FB}");
        let a = apply(&view(text), &[Op::Span(&sp)]).unwrap();
        let b: Vec<&Value> = a.warnings.iter().map(|w| &w.fields["boundary"]).collect();
        assert_eq!(b, [&json!("start")]);
    }
}
