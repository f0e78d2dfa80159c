//! Near misses for `match_absent` rejections (contract "Exact candidates, consumed matches and
//! near misses").
//!
//! A window is a code-point slice `[start, end)` of the scanned text whose length is the query
//! length minus one, the query length or the query length plus one (positive lengths only). It
//! qualifies when its code-point Levenshtein distance to the query is nonzero and at most
//! `min(4, max(1, len(query) // 4))`. Qualifying windows are ranked by `(distance, start, end)`
//! and picked greedily, skipping any window that overlaps one already picked, until three are
//! picked. The ranking is exact and complete: the whole scanned text is always searched, there is
//! no work cap.
//!
//! How, in three steps, each exact:
//!
//! 1. Filter. One pass of Myers' bit-parallel approximate matching (Hyyrö's formulation, one
//!    64-bit word because the query has at most 64 code points) with the query as pattern and the
//!    text as text, semi-global (a match may start anywhere), yields for every end position `e`
//!    the value `D[e]`: the least distance from the query to *any* substring ending at `e`. Every
//!    window ending at `e` is such a substring, so its distance is at least `D[e]`. A window whose
//!    `D[end]` exceeds the threshold (or the level being ranked) cannot qualify (at that level);
//!    nothing else is skipped. The pass runs as four independent lanes over the four quarters of
//!    the text, each started fresh `m + k + 1` code points before its quarter: a fresh start can
//!    only raise `D[e]`, and not where `D[e] <= k`, because a substring within distance `k` of
//!    the query is at most `m + k` long and so lies wholly inside the lane's reach.
//! 2. Verification. For a start `s` that some surviving end names, one global Myers run over
//!    the `len(query) + 1` code points from `s` gives the exact distance of every prefix of that
//!    span, hence of its three windows at once. Verification is lazy (a start is verified when
//!    the ranking first needs it), four starts at a time, and cached.
//! 3. Ranking. Level by level, distance 1 up to the threshold, starts ascending, ends
//!    ascending: a window whose exact distance equals the level and that overlaps no picked window
//!    is picked. That is exactly the greedy walk over all qualifying windows sorted by
//!    `(distance, start, end)`. After the third pick, `candidates_truncated` asks whether any
//!    qualifying window overlaps none of the three, which is exactly whether the unbounded greedy
//!    walk would have picked a fourth distinct location.
//!
//! The text is decoded once into one byte per code point (the query-alphabet index of the code
//! point, 0 when the query lacks it); offsets are code points throughout, and the few byte offsets
//! the response needs are found in one sweep at the end. On x86_64 the four lanes run two to an
//! SSE2 register (the same operations; a unit test holds both forms equal).
//!
//! `comparison_cells` (contract: "counts banded cells evaluated") counts the edit-distance
//! matrix cells this search evaluates: one Myers column step compares one code point of the
//! text with every code point of the query, `m` cells, and every column step of every lane is
//! counted (the filter's four lanes with their warm-up, each verification batch's four lanes,
//! idle ones included, and the reversed pass when it runs). So it is exactly
//! `m * 4 * ((ceil(n / 4) + m + k + 1) * passes + (m + 1) * batches)`, with `passes` 1 or 2 and
//! `batches` the verification batches. Unlike the contract's Landau–Vishkin count it includes
//! the filter, which is itself a dynamic program, and it has no cap: the search always covers
//! the whole scanned range, so on a 65,536-code-point buffer it is typically a few million.
//!
//! A search that cannot finish (an allocation over [`NEAR_MISS_SEARCH_MAX_BYTES`] or refused by
//! the allocator, or a bug that panics) never takes the rejection with it: [`contained`] answers
//! `omission_reason: "near_miss_search_failed"`. A query cancel or `statement_timeout` seen by an
//! interrupt check inside the search is not a fault of the search and still ends the statement.

use crate::contract::interrupt;
use crate::contract::json::ascii_len;
use crate::contract::limits::{
    NEAR_MISS_CONTEXT_CHARS, NEAR_MISS_DISTANCE_DIVISOR, NEAR_MISS_MAX_DISTANCE,
    NEAR_MISS_QUERY_MAX_BYTES, NEAR_MISS_QUERY_MAX_CHARS, NEAR_MISS_SCAN_MAX_CHARS,
    NEAR_MISS_SEARCH_MAX_BYTES, NEAR_MISSES_MAX, NEAR_MISSES_MAX_BYTES,
};
use crate::contract::utf8::decode_wide;
use serde_json::{Value, json};
use std::cell::Cell;

/// The hint an empty computed list carries.
pub const EMPTY_HINT: &str = "No near misses were found in the scanned range; re-read the \
    target, or use patchdiff_find_occurrences with a shorter exact fragment of MATCH text.";

/// `omission_reason` for a query of more than 64 code points.
pub const MATCH_TOO_LARGE: &str = "match_too_large";

/// `omission_reason` when the search itself failed (issue 17): its working memory would exceed
/// [`NEAR_MISS_SEARCH_MAX_BYTES`] or the allocator refused it, or it panicked (a bug). The
/// rejection, and its audited attempt row, stand.
pub const SEARCH_FAILED: &str = "near_miss_search_failed";

/// A search that stopped without a result: see [`SEARCH_FAILED`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SearchFailed;

/// What was scanned (contract: `scan_source`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanSource {
    /// A fresh rejection: a bounded in-memory copy of the failing buffer.
    FailingBuffer,
    /// Exact recovery: only the stored failure context.
    StoredFailureContext,
}

impl ScanSource {
    pub fn as_str(self) -> &'static str {
        match self {
            ScanSource::FailingBuffer => "failing_buffer",
            ScanSource::StoredFailureContext => "stored_failure_context",
        }
    }
}

/// One near miss, in failing-buffer coordinates (code points).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub start: usize,
    pub end: usize,
    pub distance: usize,
    /// The window's text.
    pub text: String,
    /// Up to 16 code points before `start` (within the scanned text).
    pub context_before: String,
    /// Up to 16 code points after `end` (within the scanned text).
    pub context_after: String,
}

/// The outcome of one search.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NearMisses {
    /// At most three, in `(distance, start, end)` order, pairwise non-overlapping.
    pub candidates: Vec<Candidate>,
    pub scan_source: ScanSource,
    /// The window-start range searched, `[scanned_start, scanned_end)`, in failing-buffer
    /// coordinates.
    pub scanned_start: usize,
    pub scanned_end: usize,
    /// The scanned range does not cover the whole failing buffer.
    pub scope_truncated: bool,
    /// More distinct locations qualified than were returned.
    pub candidates_truncated: bool,
    /// `scope_truncated || candidates_truncated`.
    pub truncated: bool,
    /// The accepted distance bound, `min(4, max(1, len(query) // 4))`.
    pub max_distance: usize,
    /// Edit-distance matrix cells the search evaluated (see the module documentation).
    pub comparison_cells: u64,
    /// Set when the query was not searched (`"match_too_large"`); everything else is then empty.
    pub omission_reason: Option<&'static str>,
}

/// The accepted distance bound for a query of `query_chars` code points:
/// `min(4, max(1, query_chars // 4))`.
pub fn threshold(query_chars: usize) -> usize {
    NEAR_MISS_MAX_DISTANCE.min((query_chars / NEAR_MISS_DISTANCE_DIVISOR).max(1))
}

/// Near misses of `query` (canonical match text) in `buffer` (the canonical failing buffer) for
/// a fresh rejection: scans at most the first 65,536 code points (`scan_source:
/// "failing_buffer"`).
pub fn search(buffer: &str, query: &str) -> NearMisses {
    search_in(buffer, query, ScanSource::FailingBuffer, 0, None)
}

/// Near misses of `query` in `text`, a slice of the failing buffer that starts at code point
/// `offset` of it: start/end are reported as `offset +` the position in `text`. `total_chars`
/// is the failing buffer's length when known (the stored failure context records it); with
/// `None`, `text` is taken to run to the end of the failing buffer. At most the first 65,536
/// code points of `text` are scanned. Panics only if the search fails (see [`try_search_in`]).
pub fn search_in(
    text: &str,
    query: &str,
    source: ScanSource,
    offset: usize,
    total_chars: Option<usize>,
) -> NearMisses {
    try_search_in(text, query, source, offset, (0, total_chars))
        .expect("a near-miss search within its allocation budget")
}

/// [`search_in`] over a region of the failing buffer: `region` is `(start, end)` of the part a
/// complete search covers (the whole buffer `(0, total_chars)`, or an observed running scope),
/// and `scope_truncated` says whether the scanned range falls short of it. `Err` when the
/// search's working memory would exceed [`NEAR_MISS_SEARCH_MAX_BYTES`] or the allocator
/// refuses it.
pub fn try_search_in(
    text: &str,
    query: &str,
    source: ScanSource,
    offset: usize,
    region: (usize, Option<usize>),
) -> Result<NearMisses, SearchFailed> {
    fault::at_search();
    let q: Vec<char> = query.chars().collect();
    let m = q.len();
    let k = threshold(m);
    if m > NEAR_MISS_QUERY_MAX_CHARS {
        return Ok(NearMisses {
            candidates: Vec::new(),
            scan_source: source,
            scanned_start: offset,
            scanned_end: offset,
            scope_truncated: false,
            candidates_truncated: false,
            truncated: false,
            max_distance: k,
            comparison_cells: 0,
            omission_reason: Some(MATCH_TOO_LARGE),
        });
    }
    let scan = Scan::new(text, &q, k)?;
    let n = scan.n;
    let (picked, candidates_truncated) = scan.rank()?;
    let mut cps: Vec<usize> = picked
        .iter()
        .flat_map(|&(s, e, _)| {
            [
                s.saturating_sub(NEAR_MISS_CONTEXT_CHARS),
                s,
                e,
                (e + NEAR_MISS_CONTEXT_CHARS).min(n),
            ]
        })
        .collect();
    cps.sort_unstable();
    let offsets = scan.byte_offsets(&cps);
    let at = |cp: usize| offsets[cps.partition_point(|&x| x < cp)];
    let candidates = picked
        .iter()
        .map(|&(s, e, d)| {
            let from = at(s.saturating_sub(NEAR_MISS_CONTEXT_CHARS));
            let (bs, be) = (at(s), at(e));
            let to = at((e + NEAR_MISS_CONTEXT_CHARS).min(n));
            Candidate {
                start: offset + s,
                end: offset + e,
                distance: d as usize,
                text: text[bs..be].to_owned(),
                context_before: text[from..bs].to_owned(),
                context_after: text[be..to].to_owned(),
            }
        })
        .collect();
    let scanned_end = offset + n;
    let scope_truncated =
        offset > region.0 || scan.cut || region.1.is_some_and(|t| scanned_end < t);
    Ok(NearMisses {
        candidates,
        scan_source: source,
        scanned_start: offset,
        scanned_end,
        scope_truncated,
        candidates_truncated,
        truncated: scope_truncated || candidates_truncated,
        max_distance: k,
        comparison_cells: scan.cells.get(),
        omission_reason: None,
    })
}

/// Runs a near-miss search whose failure must not change the answer it decorates (issue 17): its
/// JSON, or `{omission_reason: "near_miss_search_failed"}` when it returns [`SearchFailed`] or
/// panics. An ERROR raised by the interrupt hook inside it (a query cancel, `statement_timeout`)
/// is not the search's fault: it unwinds on, and the statement ends as any cancelled one does.
pub fn contained(search: impl FnOnce() -> Result<Value, SearchFailed>) -> Value {
    interrupt::clear_unwound();
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(search)) {
        Ok(Ok(v)) => v,
        Ok(Err(SearchFailed)) => {
            record_fault("its working memory was over its budget or refused".into());
            omitted(SEARCH_FAILED)
        }
        Err(payload) if interrupt::unwound() => std::panic::resume_unwind(payload),
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            record_fault(format!(
                "it panicked: {}",
                crate::text::head_chars(&message, 200)
            ));
            omitted(SEARCH_FAILED)
        }
    }
}

thread_local! {
    /// What the last contained failure was, until [`take_contained_fault`] takes it.
    static FAULT_SEEN: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

fn record_fault(what: String) {
    FAULT_SEEN.with(|f| *f.borrow_mut() = Some(what));
}

/// The last failure [`contained`] turned into `near_miss_search_failed` on this thread since the
/// previous call, if any. The client sees only the omission; the extension writes this to the
/// server log, so that an operator can find the bug (or the memory pressure) behind it.
pub fn take_contained_fault() -> Option<String> {
    FAULT_SEEN.with(|f| f.borrow_mut().take())
}

impl NearMisses {
    /// The response object: `{candidates: [{start, end, distance, text, context_before,
    /// context_after}], scan_source, scanned_start, scanned_end, scope_truncated,
    /// candidates_truncated, truncated, hint?}`, at most 8,192 compact ASCII-escaped bytes
    /// (trailing candidates are dropped, and counted as truncation, when it would not fit). An
    /// omitted search is `{omission_reason}`.
    pub fn to_json(&self) -> Value {
        if let Some(reason) = self.omission_reason {
            return omitted(reason);
        }
        let list: Vec<Value> = self
            .candidates
            .iter()
            .map(|c| {
                json!({
                    "start": c.start,
                    "end": c.end,
                    "distance": c.distance,
                    "text": c.text,
                    "context_before": c.context_before,
                    "context_after": c.context_after,
                })
            })
            .collect();
        let wrap = |list: &[Value]| {
            let cut = list.len() < self.candidates.len();
            let candidates_truncated = self.candidates_truncated || cut;
            let mut v = json!({
                "candidates": list,
                "scan_source": self.scan_source.as_str(),
                "comparison_cells": self.comparison_cells,
                "scanned_start": self.scanned_start,
                "scanned_end": self.scanned_end,
                "scope_truncated": self.scope_truncated,
                "candidates_truncated": candidates_truncated,
                "truncated": self.scope_truncated || candidates_truncated,
            });
            if list.is_empty() {
                v["hint"] = json!(EMPTY_HINT);
            }
            v
        };
        let mut keep = list.len();
        loop {
            let v = wrap(&list[..keep]);
            if keep == 0 || ascii_len(&v) <= NEAR_MISSES_MAX_BYTES {
                return v;
            }
            keep -= 1;
        }
    }
}

/// An omitted near-miss list: `{omission_reason}` (`"match_too_large"`,
/// `"sequential_match_consumed"`, `"caller_transaction"`, `"near_miss_search_failed"`).
pub fn omitted(reason: &str) -> Value {
    json!({ "omission_reason": reason })
}

/// The persisted `diagnostic.near_miss_query` of a `match_absent` failure: `{query}` with the
/// canonical query when the raw match has at most 64 code points, otherwise
/// `{omission_reason: "match_too_large"}`; at most 1,024 compact ASCII-escaped bytes (64 code
/// points escape to at most 768 bytes, so a searchable query always fits).
pub fn near_miss_query(query_raw_len_chars: usize, canonical_query: &str) -> Value {
    if query_raw_len_chars <= NEAR_MISS_QUERY_MAX_CHARS
        && canonical_query.chars().count() <= NEAR_MISS_QUERY_MAX_CHARS
    {
        let v = json!({ "query": canonical_query });
        if ascii_len(&v) <= NEAR_MISS_QUERY_MAX_BYTES {
            return v;
        }
    }
    omitted(MATCH_TOO_LARGE)
}

/// The search's working memory: every buffer whose size depends on the text is allocated here,
/// fallibly and against [`NEAR_MISS_SEARCH_MAX_BYTES`], so that a search that cannot get its
/// memory stops with [`SearchFailed`] instead of aborting the process.
struct Budget {
    left: Cell<usize>,
}

impl Budget {
    fn new() -> Self {
        Budget {
            left: Cell::new(NEAR_MISS_SEARCH_MAX_BYTES),
        }
    }

    /// An empty vector with room for `cap` elements.
    fn with_capacity<T>(&self, cap: usize) -> Result<Vec<T>, SearchFailed> {
        let bytes = cap
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(SearchFailed)?;
        if bytes > self.left.get() || fault::allocation_refused() {
            return Err(SearchFailed);
        }
        self.left.set(self.left.get() - bytes);
        let mut v = Vec::new();
        crate::contract::memory::fallibly(|| v.try_reserve_exact(cap)).map_err(|_| SearchFailed)?;
        Ok(v)
    }

    /// `len` copies of `fill`.
    fn filled<T: Clone>(&self, len: usize, fill: T) -> Result<Vec<T>, SearchFailed> {
        let mut v = self.with_capacity(len)?;
        v.resize(len, fill);
        Ok(v)
    }
}

/// Every code point as one byte, its code: an ASCII code point is its own code, a non-ASCII
/// code point of the query is 128 plus its rank among the query's distinct non-ASCII code points
/// (at most 64 of them), and every other code point is `OTHER`.
struct Alphabet {
    /// Codes below U+10000 when the query has a non-ASCII code point there (else empty).
    bmp: Vec<u8>,
    /// Open addressing for the query's code points above U+FFFF: at most 64 keys in 128 slots.
    keys: [u32; Self::SLOTS],
    codes: [u8; Self::SLOTS],
}

/// The code of every non-ASCII code point the query lacks, and of the padding around the text.
const OTHER: u8 = 0xFF;

impl Alphabet {
    const SLOTS: usize = 128;
    const EMPTY: u32 = u32::MAX;

    /// The alphabet and the query's codes.
    fn new(q: &[char], budget: &Budget) -> Result<(Alphabet, Vec<u8>), SearchFailed> {
        let wide_bmp = q.iter().any(|&c| (128..0x10000).contains(&(c as u32)));
        let mut a = Alphabet {
            bmp: if wide_bmp {
                budget.filled(0x10000, OTHER)?
            } else {
                Vec::new()
            },
            keys: [Self::EMPTY; Self::SLOTS],
            codes: [OTHER; Self::SLOTS],
        };
        let mut next = 128u8;
        let mut fresh = || {
            next += 1;
            next - 1
        };
        let codes = q
            .iter()
            .map(|&c| {
                let c = c as u32;
                if c < 128 {
                    c as u8
                } else if c < 0x10000 {
                    let slot = &mut a.bmp[c as usize];
                    if *slot == OTHER {
                        *slot = fresh();
                    }
                    *slot
                } else {
                    let mut h = Self::slot(c);
                    while a.keys[h] != Self::EMPTY && a.keys[h] != c {
                        h = (h + 1) % Self::SLOTS;
                    }
                    if a.keys[h] == Self::EMPTY {
                        a.keys[h] = c;
                        a.codes[h] = fresh();
                    }
                    a.codes[h]
                }
            })
            .collect();
        Ok((a, codes))
    }

    #[inline(always)]
    fn slot(c: u32) -> usize {
        (c.wrapping_mul(0x9E37_79B1) >> 25) as usize
    }

    /// The code of a non-ASCII code point.
    #[inline(always)]
    fn code(&self, c: u32) -> u8 {
        if c < 0x10000 {
            return self.bmp.get(c as usize).copied().unwrap_or(OTHER);
        }
        let mut h = Self::slot(c);
        loop {
            let key = self.keys[h];
            if key == c {
                return self.codes[h];
            }
            if key == Self::EMPTY {
                return OTHER;
            }
            h = (h + 1) % Self::SLOTS;
        }
    }
}

/// The query as a bit-parallel pattern over alphabet codes. The pattern sits in the top `m`
/// bits of a word, query code point `i` at bit `64 - m + i`, so that the last row is always bit
/// 63; the `64 - m` bits below are virtual rows that match every code point and start with zero
/// vertical deltas, which keeps their deltas zero and their carries nil forever, so the real rows
/// compute exactly what a pattern in the low bits would.
struct Pattern {
    m: usize,
    /// `eq[index]`: the real rows equal to that code point, plus every virtual row.
    eq: [u64; 256],
    /// Initial vertical deltas: +1 on every real row, 0 on the virtual ones.
    pv0: u64,
    /// The horizontal delta entering the first real row in a global alignment (`D[0][j] = j`).
    top: u64,
}

impl Pattern {
    /// `codes` are the alphabet codes of the query's 1 to 64 code points.
    fn new(codes: &[u8]) -> Self {
        let m = codes.len();
        let pv0 = !0u64 << (64 - m);
        let mut eq = [!pv0; 256];
        for (i, &code) in codes.iter().enumerate() {
            eq[code as usize] |= 1 << (64 - m + i);
        }
        Pattern {
            m,
            eq,
            pv0,
            top: 1u64 << (64 - m),
        }
    }

    /// The reversed query: query code point `i` becomes `m - 1 - i`.
    fn reversed(&self) -> Pattern {
        let m = self.m;
        let mut eq = [!self.pv0; 256];
        for (r, &f) in eq.iter_mut().zip(&self.eq) {
            // Real row i sits at bit 64 - m + i; reversed it is row m - 1 - i, bit 63 - i.
            *r |= ((f & self.pv0) >> (64 - m)).reverse_bits();
        }
        Pattern { eq, ..*self }
    }
}

/// One step of Myers' algorithm in Hyyrö's formulation on locals `$pv`, `$mv` (vertical deltas
/// of the current column) and `$sc` (the last row's value), for a text code point whose pattern
/// mask is `$eq`; `$top` is the horizontal delta entering the first real row (0 semi-global,
/// `Pattern::top` global).
macro_rules! myers_step {
    ($pv:ident, $mv:ident, $sc:ident, $eq:expr, $top:expr) => {{
        let eq: u64 = $eq;
        let xv = eq | $mv;
        let xh = ((eq & $pv).wrapping_add($pv) ^ $pv) | eq;
        let ph = $mv | !(xh | $pv);
        let mh = $pv & xh;
        $sc = $sc + (ph >> 63) - (mh >> 63);
        let ph = (ph << 1) | $top;
        let mh = mh << 1;
        $pv = mh | !(xv | ph);
        $mv = ph & xv;
    }};
}

/// Independent lanes run in lockstep, so that the processor overlaps their dependency chains.
const LANES: usize = 4;

/// Four Myers runs in lockstep. Lane `l` reads `inputs[l]` (query indices); after each of the
/// code points from `record` on, it writes `min(cap, score)` to `outputs[l]`, where `score` is
/// the last row's value: with `GLOBAL` the edit distance between the query and the code points
/// read so far, otherwise the least distance between the query and any suffix of them (a match
/// may start anywhere: no horizontal +1 enters the first real row).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
fn lanes<const GLOBAL: bool>(
    p: &Pattern,
    inputs: [&[u8]; LANES],
    record: usize,
    cap: u8,
    outputs: [&mut [u8]; LANES],
) {
    // SAFETY: `lanes_sse2` needs nothing but SSE2, which this cfg guarantees is enabled for the
    // whole target (it is part of the x86_64 baseline).
    unsafe { lanes_sse2::<GLOBAL>(p, inputs, record, cap, outputs) }
}

#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
fn lanes<const GLOBAL: bool>(
    p: &Pattern,
    inputs: [&[u8]; LANES],
    record: usize,
    cap: u8,
    outputs: [&mut [u8]; LANES],
) {
    lanes_scalar::<GLOBAL>(p, inputs, record, cap, outputs)
}

/// `lanes` in plain 64-bit arithmetic.
#[cfg_attr(
    all(target_arch = "x86_64", target_feature = "sse2", not(test)),
    allow(dead_code)
)]
fn lanes_scalar<const GLOBAL: bool>(
    p: &Pattern,
    inputs: [&[u8]; LANES],
    record: usize,
    cap: u8,
    outputs: [&mut [u8]; LANES],
) {
    let len = outputs[0].len();
    let top = if GLOBAL { p.top } else { 0 };
    let mut pv = [p.pv0; LANES];
    let mut mv = [0u64; LANES];
    let mut sc = [p.m as u64; LANES];
    let eq = &p.eq;
    for t in 0..record + len {
        for l in 0..LANES {
            let (mut pvl, mut mvl, mut scl) = (pv[l], mv[l], sc[l]);
            myers_step!(pvl, mvl, scl, eq[inputs[l][t] as usize], top);
            (pv[l], mv[l], sc[l]) = (pvl, mvl, scl);
        }
        if t >= record {
            for l in 0..LANES {
                outputs[l][t - record] = sc[l].min(cap as u64) as u8;
            }
        }
    }
}

/// `lanes` with two lanes per SSE2 register: the same operations, lane-wise.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[target_feature(enable = "sse2")]
fn lanes_sse2<const GLOBAL: bool>(
    p: &Pattern,
    inputs: [&[u8]; LANES],
    record: usize,
    cap: u8,
    outputs: [&mut [u8]; LANES],
) {
    use std::arch::x86_64::{
        _mm_add_epi64, _mm_and_si128, _mm_andnot_si128, _mm_cvtsi128_si64, _mm_or_si128,
        _mm_set_epi64x, _mm_set1_epi64x, _mm_setzero_si128, _mm_slli_epi64, _mm_srli_epi64,
        _mm_sub_epi64, _mm_unpackhi_epi64, _mm_xor_si128,
    };
    const PAIRS: usize = LANES / 2;
    let len = outputs[0].len();
    let inputs: [&[u8]; LANES] = inputs.map(|i| &i[..record + len]);
    let outputs: [&mut [u8]; LANES] = outputs.map(|o| &mut o[..len]);
    let eq = &p.eq;
    let ones = _mm_set1_epi64x(-1);
    let top = _mm_set1_epi64x(p.top as i64);
    let mut pv = [_mm_set1_epi64x(p.pv0 as i64); PAIRS];
    let mut mv = [_mm_setzero_si128(); PAIRS];
    let mut sc = [_mm_set1_epi64x(p.m as i64); PAIRS];
    let cap = cap as u64;
    for t in 0..record + len {
        for r in 0..PAIRS {
            let (a, b) = (inputs[2 * r][t] as usize, inputs[2 * r + 1][t] as usize);
            let eq = _mm_set_epi64x(eq[b] as i64, eq[a] as i64);
            let (pvr, mvr) = (pv[r], mv[r]);
            let xv = _mm_or_si128(eq, mvr);
            let sum = _mm_add_epi64(_mm_and_si128(eq, pvr), pvr);
            let xh = _mm_or_si128(_mm_xor_si128(sum, pvr), eq);
            let ph = _mm_or_si128(mvr, _mm_andnot_si128(_mm_or_si128(xh, pvr), ones));
            let mh = _mm_and_si128(pvr, xh);
            let up = _mm_add_epi64(sc[r], _mm_srli_epi64(ph, 63));
            sc[r] = _mm_sub_epi64(up, _mm_srli_epi64(mh, 63));
            let ph = if GLOBAL {
                _mm_or_si128(_mm_slli_epi64(ph, 1), top)
            } else {
                _mm_slli_epi64(ph, 1)
            };
            let mh = _mm_slli_epi64(mh, 1);
            pv[r] = _mm_or_si128(mh, _mm_andnot_si128(_mm_or_si128(xv, ph), ones));
            mv[r] = _mm_and_si128(ph, xv);
        }
        if t >= record {
            for r in 0..PAIRS {
                let lo = _mm_cvtsi128_si64(sc[r]) as u64;
                let hi = _mm_cvtsi128_si64(_mm_unpackhi_epi64(sc[r], sc[r])) as u64;
                outputs[2 * r][t - record] = lo.min(cap) as u8;
                outputs[2 * r + 1][t - record] = hi.min(cap) as u8;
            }
        }
    }
}

/// `min(over, D[e])` for every end `e` in `0..=n`, and `over` past `n` (at least 65 more):
/// `D[e]` is the least distance between the pattern and any substring ending at `e` of the text
/// whose query indices are `codes[pad..pad + n]` (zeros around them). Four lanes take a quarter
/// of the ends each; lane `l` ends at `l * chunk + 1 ..= (l + 1) * chunk` and starts fresh `pad`
/// (that is `m + k + 1`) code points before its first end, lane 0 on the zero padding, which
/// matches nothing and so changes no `D[e]`. A fresh start can only raise `D[e]`, and not when
/// `D[e] <= k`: such a substring is at most `m + k` long and lies wholly inside the lane's reach.
fn semi_global(
    p: &Pattern,
    codes: &[u8],
    pad: usize,
    n: usize,
    over: u8,
    budget: &Budget,
    cells: &Cell<u64>,
) -> Result<Vec<u8>, SearchFailed> {
    let chunk = n.div_ceil(LANES).max(1);
    let mut d = budget.filled((LANES * chunk + 1).max(n + 66), over)?;
    d[0] = p.m.min(over as usize) as u8;
    let inputs: [&[u8]; LANES] =
        std::array::from_fn(|l| &codes[l * chunk..l * chunk + pad + chunk]);
    let mut outs = d[1..].chunks_mut(chunk);
    let outputs: [&mut [u8]; LANES] = std::array::from_fn(|_| outs.next().unwrap());
    lanes::<false>(p, inputs, pad, over, outputs);
    // Each lane ran pad + chunk columns of m cells.
    cells.set(cells.get() + (p.m * LANES * (pad + chunk)) as u64);
    d[n + 1..].fill(over);
    Ok(d)
}

/// Distance "not computed yet" in the verification cache (verified entries have bit 15 set).
const UNVERIFIED: u16 = 0;
/// A verified entry: three 5-bit distances (windows m-1, m, m+1), 31 for "none or above 30".
const VERIFIED: u16 = 1 << 15;
const NO_WINDOW: u16 = 31;

/// The decoded scan: query indices per code point, `D[e]` per end, and the candidate starts.
struct Scan<'a> {
    /// The scanned text (the whole argument; only its first `n` code points are read).
    bytes: &'a [u8],
    /// Code points scanned: at most 65,536.
    n: usize,
    /// The text had more than 65,536 code points.
    cut: bool,
    m: usize,
    k: usize,
    /// `None` for an empty query.
    pattern: Option<Pattern>,
    /// `pad` times `OTHER`, the alphabet code of each scanned code point, then `OTHER` again:
    /// reads before the start and past the end see code points that occur nowhere in the query.
    idx: Vec<u8>,
    pad: usize,
    /// `dmin[e]`, `e` in `0..=n`: `min(k + 1, D[e])`, where `D[e]` is the least distance from the
    /// query to any substring ending at `e`; `k + 1` past `n`.
    dmin: Vec<u8>,
    /// The least `dmin[e]` over the ends of all windows.
    floor: u8,
    /// Bitmap of window starts with at least one surviving end.
    starts: Vec<u64>,
    budget: Budget,
    /// `comparison_cells` so far.
    cells: Cell<u64>,
}

impl<'a> Scan<'a> {
    fn new(text: &'a str, q: &[char], k: usize) -> Result<Scan<'a>, SearchFailed> {
        let m = q.len();
        let budget = Budget::new();
        let (alphabet, codes) = Alphabet::new(q, &budget)?;
        let pattern = (m > 0).then(|| Pattern::new(&codes));
        let bytes = text.as_bytes();
        let cap = bytes.len().min(NEAR_MISS_SCAN_MAX_CHARS);
        // The filter warms each lane up on the m + k code points before its first end: no
        // substring within distance k of the query is longer than m + k.
        let pad = m + k + 1;
        let mut idx = budget.with_capacity(pad + cap + LANES + m + 2)?;
        idx.resize(pad, OTHER);
        let mut i = 0;
        while i < bytes.len() && idx.len() - pad < NEAR_MISS_SCAN_MAX_CHARS {
            // A run of ASCII, which is its own code, found sixteen bytes at a time.
            let room = NEAR_MISS_SCAN_MAX_CHARS - (idx.len() - pad);
            let limit = bytes.len().min(i + room);
            let mut j = i;
            while let Some(block) = bytes.get(j..j + 16).filter(|_| j + 16 <= limit) {
                let high =
                    u128::from_le_bytes(block.try_into().unwrap()) & (u128::MAX / 255 * 0x80);
                if high != 0 {
                    j += high.trailing_zeros() as usize / 8;
                    break;
                }
                j += 16;
            }
            while j < limit && bytes[j] < 0x80 {
                j += 1;
            }
            idx.extend_from_slice(&bytes[i..j]);
            i = j;
            // A run of non-ASCII code points.
            while i < bytes.len() && bytes[i] >= 0x80 && idx.len() - pad < NEAR_MISS_SCAN_MAX_CHARS
            {
                let (c, w) = decode_wide(bytes, i);
                idx.push(alphabet.code(c));
                i += w;
            }
        }
        let n = idx.len() - pad;
        idx.resize(pad + cap + LANES + m + 2, OTHER);
        let starts = budget.filled(n / 64 + 1, 0u64)?;
        let mut scan = Scan {
            bytes,
            n,
            cut: i < bytes.len(),
            m,
            k,
            pattern,
            idx,
            pad,
            dmin: Vec::new(),
            floor: (k + 1) as u8,
            starts,
            budget,
            cells: Cell::new(0),
        };
        interrupt::check();
        scan.filter()?;
        interrupt::check();
        Ok(scan)
    }

    /// The semi-global Myers pass: `dmin`, `floor` and the surviving starts.
    fn filter(&mut self) -> Result<(), SearchFailed> {
        let (m, k, n) = (self.m, self.k, self.n);
        let over = (k + 1) as u8;
        let dmin = match &self.pattern {
            Some(p) => semi_global(p, &self.idx, self.pad, n, over, &self.budget, &self.cells)?,
            // Every length-1 window is one insertion away from the empty query.
            None => {
                let mut dmin = self.budget.filled(n + 66, over)?;
                dmin[1..=n].fill(1);
                dmin
            }
        };
        // Ends that survive (dmin below k + 1), as a bitmap over e - 1, eight at a time: a
        // byte of `v ^ (k + 1)` is nonzero exactly when v < k + 1, and all values are below 8.
        let mut ends = self.budget.filled(n / 64 + 3, 0u64)?;
        for (word, block) in ends.iter_mut().zip(dmin[1..].chunks_exact(64)) {
            let mut bits = 0u64;
            for (g, group) in block.chunks_exact(8).enumerate() {
                let x = u64::from_le_bytes(group.try_into().unwrap())
                    ^ (0x0101_0101_0101_0101 * over as u64);
                let nonzero = (x | (x >> 1) | (x >> 2)) & 0x0101_0101_0101_0101;
                bits |= (nonzero.wrapping_mul(0x0102_0408_1020_4080) >> 56) << (8 * g);
            }
            *word = bits;
        }
        // ... and the starts they name: start s survives when end s + len does for one of the
        // window lengths, that is bit s + len - 1 of `ends`.
        let (lens, first) = window_lens(m);
        for &len in &lens[first..] {
            let (w0, b0) = ((len - 1) / 64, (len - 1) % 64);
            for (w, word) in self.starts.iter_mut().enumerate() {
                let lo = ends.get(w + w0).map_or(0, |&x| x >> b0);
                let hi = match b0 {
                    0 => 0,
                    _ => ends.get(w + w0 + 1).map_or(0, |&x| x << (64 - b0)),
                };
                *word |= lo | hi;
            }
        }
        let shortest = lens[first].min(n + 1);
        self.floor = dmin[shortest..=n].iter().copied().min().unwrap_or(over);
        self.dmin = dmin;
        Ok(())
    }

    /// Exact distances of the three windows at each of `ss` (starts in `0..=n`): one global
    /// Myers run per start over the `m + 1` code points from it, four in lockstep.
    fn verify(&self, ss: [usize; LANES]) -> [u16; LANES] {
        let (m, n) = (self.m, self.n);
        let (lens, first) = window_lens(m);
        // Slot i holds the distance after m - 1 + i code points; for m = 1 only slots 1 and 2.
        let mut at = [[NO_WINDOW as u8; 3]; LANES];
        match &self.pattern {
            // Every length-1 window is one insertion away from the empty query.
            None => at.iter_mut().for_each(|a| a[2] = 1),
            Some(p) => {
                let inputs: [&[u8]; LANES] =
                    std::array::from_fn(|l| &self.idx[self.pad + ss[l]..self.pad + ss[l] + m + 1]);
                let record = (m + first).saturating_sub(2);
                let mut slots = at.iter_mut();
                let outputs: [&mut [u8]; LANES] =
                    std::array::from_fn(|_| &mut slots.next().unwrap()[first..]);
                lanes::<true>(p, inputs, record, NO_WINDOW as u8, outputs);
                // Each lane, idle ones included, ran record + (3 - first) = m + 1 columns.
                let columns = record + (3 - first);
                self.cells
                    .set(self.cells.get() + (p.m * LANES * columns) as u64);
            }
        }
        let mut out = [VERIFIED; LANES];
        for l in 0..LANES {
            for (i, &len) in lens.iter().enumerate() {
                let d = if i >= first && ss[l] + len <= n {
                    at[l][i] as u16
                } else {
                    NO_WINDOW
                };
                out[l] |= d << (5 * i);
            }
        }
        out
    }

    /// The first candidate start at or after `from`.
    fn next_start(&self, from: usize) -> Option<usize> {
        let mut w = from / 64;
        let mut bits = *self.starts.get(w)? & (!0u64 << (from % 64));
        loop {
            if bits != 0 {
                return Some(w * 64 + bits.trailing_zeros() as usize);
            }
            w += 1;
            bits = *self.starts.get(w)?;
        }
    }

    /// Per-start lower bounds from the reversed text and query, indexed by `n - s`:
    /// `min(k + 1, R[s])`, where `R[s]`, the least distance between the query and any substring
    /// starting at `s`, is at most the distance of every window starting at `s`.
    fn reverse_bounds(&self) -> Result<Vec<u8>, SearchFailed> {
        let (n, pad) = (self.n, self.pad);
        match &self.pattern {
            // The empty query: nothing to bound.
            None => self.budget.filled(n + 1, 0),
            Some(p) => {
                let mut reversed = self.budget.filled(self.idx.len(), OTHER)?;
                let codes = self.idx[pad..pad + n].iter().rev();
                for (r, &c) in reversed[pad..pad + n].iter_mut().zip(codes) {
                    *r = c;
                }
                let over = (self.k + 1) as u8;
                semi_global(
                    &p.reversed(),
                    &reversed,
                    pad,
                    n,
                    over,
                    &self.budget,
                    &self.cells,
                )
            }
        }
    }

    /// The greedy pick over all qualifying windows in `(distance, start, end)` order, at most
    /// three, and whether a fourth distinct location qualified.
    fn rank(&self) -> Result<Ranked, SearchFailed> {
        let mut r = Ranker {
            scan: self,
            cache: self.budget.filled(self.n, UNVERIFIED)?,
            reverse: None,
            batches: 0,
        };
        let (k, n) = (self.k, self.n);
        let (lens, first) = window_lens(self.m);
        let mut picked: Vec<(usize, usize, u8)> = Vec::with_capacity(NEAR_MISSES_MAX);
        let overlaps = |picked: &[(usize, usize, u8)], s: usize, e: usize| {
            picked.iter().any(|&(ps, pe, _)| s < pe && ps < e)
        };
        // Levels below the least D[e] of any window end hold no window at all.
        let mut ticks = interrupt::Every::new(interrupt::SEARCH_INTERVAL);
        'levels: for d in self.floor.max(1)..=k as u8 {
            let mut next = self.next_start(0);
            while let Some(s) = next {
                ticks.tick();
                next = self.next_start(s + 1);
                if r.start_beyond(s, d)? {
                    continue;
                }
                for (i, &len) in lens.iter().enumerate().skip(first) {
                    let e = s + len;
                    if e > n {
                        break;
                    }
                    if self.dmin[e] > d || overlaps(&picked, s, e) {
                        continue;
                    }
                    if r.distance(s, i, d) == d {
                        picked.push((s, e, d));
                        if picked.len() == NEAR_MISSES_MAX {
                            break 'levels;
                        }
                        break;
                    }
                }
            }
        }
        if picked.len() < NEAR_MISSES_MAX {
            // The greedy walk ran out of qualifying windows: nothing was left behind.
            return Ok((picked, false));
        }
        let mut next = self.next_start(0);
        let k = k as u8;
        while let Some(s) = next {
            ticks.tick();
            next = self.next_start(s + 1);
            if r.start_beyond(s, k)? {
                continue;
            }
            for (i, &len) in lens.iter().enumerate().skip(first) {
                let e = s + len;
                if e > n {
                    break;
                }
                if self.dmin[e] > k || overlaps(&picked, s, e) {
                    continue;
                }
                let d = r.distance(s, i, k);
                if d >= 1 && d <= k {
                    return Ok((picked, true));
                }
            }
        }
        Ok((picked, false))
    }

    /// Byte offsets of the code points `cps` (ascending, each at most `n`): one sweep that
    /// skips 64-byte blocks by counting their lead bytes.
    fn byte_offsets(&self, cps: &[usize]) -> Vec<usize> {
        let bytes = self.bytes;
        let is_lead = |x: u8| (x as i8) >= -0x40;
        let (mut b, mut c) = (0usize, 0usize);
        cps.iter()
            .map(|&target| {
                while let Some(block) = bytes.get(b..b + 64) {
                    let leads = block.iter().filter(|&&x| is_lead(x)).count();
                    if c + leads > target {
                        break;
                    }
                    b += 64;
                    c += leads;
                }
                // Invariant: c counts the lead bytes of bytes[..b].
                while b < bytes.len() && !(is_lead(bytes[b]) && c == target) {
                    c += usize::from(is_lead(bytes[b]));
                    b += 1;
                }
                b
            })
            .collect()
    }
}

/// The picked windows `(start, end, distance)` and whether a fourth distinct location qualified.
type Ranked = (Vec<(usize, usize, u8)>, bool);

/// How many verification batches run before the ranking also computes the per-start bounds
/// of the reversed text (one more pass, worth it only when the filter alone leaves a lot to
/// verify: homogeneous and periodic texts).
const REVERSE_AFTER_BATCHES: usize = 64;

/// The ranking's state: verified distances and, once verification gets busy, reverse bounds.
struct Ranker<'s, 'a> {
    scan: &'s Scan<'a>,
    /// Per start: `UNVERIFIED`, or `VERIFIED` with the three window distances.
    cache: Vec<u16>,
    /// `Scan::reverse_bounds`, once computed.
    reverse: Option<Vec<u8>>,
    batches: usize,
}

impl Ranker<'_, '_> {
    /// Whether every window at `s` is proven farther than `d` by the reverse bound.
    fn start_beyond(&mut self, s: usize, d: u8) -> Result<bool, SearchFailed> {
        if self.reverse.is_none() && self.batches >= REVERSE_AFTER_BATCHES {
            self.reverse = Some(self.scan.reverse_bounds()?);
        }
        Ok(self
            .reverse
            .as_ref()
            .is_some_and(|r| r[self.scan.n - s] > d))
    }

    /// Whether start `t` may hold a window at distance `d` or less, as far as the bounds know.
    fn may_hold(&self, t: usize, d: u8) -> bool {
        let scan = self.scan;
        let (lens, first) = window_lens(scan.m);
        self.reverse.as_ref().is_none_or(|r| r[scan.n - t] <= d)
            && lens[first..]
                .iter()
                .any(|&len| t + len <= scan.n && scan.dmin[t + len] <= d)
    }

    /// The exact distance of window slot `i` at start `s`, verifying `s` on first use together
    /// with the next three unverified candidate starts close after it that the ranking at level
    /// `d` will ask about.
    fn distance(&mut self, s: usize, i: usize, d: u8) -> u8 {
        if self.cache[s] == UNVERIFIED {
            let scan = self.scan;
            let mut batch = [scan.n; LANES];
            batch[0] = s;
            let mut filled = 1;
            let mut from = s + 1;
            while filled < LANES {
                match scan.next_start(from) {
                    Some(t) if t < s + 256 => {
                        if self.cache[t] == UNVERIFIED && self.may_hold(t, d) {
                            batch[filled] = t;
                            filled += 1;
                        }
                        from = t + 1;
                    }
                    _ => break,
                }
            }
            let got = scan.verify(batch);
            for (&t, &v) in batch[..filled].iter().zip(&got) {
                self.cache[t] = v;
            }
            self.batches += 1;
        }
        ((self.cache[s] >> (5 * i)) & 31) as u8
    }
}

/// Fault injection for tests only (issue 17): compiled into the engine's own unit tests and into
/// builds with the `fault-injection` feature, which only the extension's `pg_test` feature (its
/// `cargo pgrx test` build) turns on. A release build has no such code, so no argument, setting
/// or session can reach it.
#[cfg(any(test, feature = "fault-injection"))]
pub mod fault {
    use std::cell::Cell;

    /// What the next searches on this thread do wrong.
    #[derive(Clone, Copy, Debug)]
    pub enum Fault {
        /// Panic as a bug would, right at the start of the search.
        Panic,
        /// Every allocation of the search's working memory is refused.
        Allocation,
        /// Call the function, which requests an interrupt (the extension: a pending query
        /// cancel), then run the search's interrupt check.
        Interrupt(fn()),
        /// Panic as a bug would, at the start of the drift evidence (`evidence/drift.rs`),
        /// leaving the near-miss search itself alone.
        DriftPanic,
    }

    thread_local! {
        static FAULT: Cell<Option<Fault>> = const { Cell::new(None) };
    }

    /// Arms (or, with `None`, disarms) a fault for the searches that follow on this thread.
    pub fn inject(fault: Option<Fault>) {
        FAULT.set(fault);
    }

    pub(super) fn at_search() {
        match FAULT.get() {
            Some(Fault::Panic) => panic!("injected near-miss search fault"),
            Some(Fault::Interrupt(request)) => {
                request();
                crate::contract::interrupt::check();
            }
            Some(Fault::Allocation | Fault::DriftPanic) | None => {}
        }
    }

    pub(super) fn allocation_refused() -> bool {
        matches!(FAULT.get(), Some(Fault::Allocation))
    }

    pub(crate) fn at_drift() {
        if matches!(FAULT.get(), Some(Fault::DriftPanic)) {
            panic!("injected drift evidence fault");
        }
    }
}

#[cfg(not(any(test, feature = "fault-injection")))]
pub(crate) mod fault {
    #[inline(always)]
    pub(super) fn at_search() {}

    #[inline(always)]
    pub(super) fn allocation_refused() -> bool {
        false
    }

    #[inline(always)]
    pub(crate) fn at_drift() {}
}

/// The window lengths `m - 1, m, m + 1` for a query of `m` code points, ascending, and the
/// index of the first positive one: length `lens[i]` has cache slot `i` (`m - 1` is slot 0).
fn window_lens(m: usize) -> ([usize; 3], usize) {
    ([m.wrapping_sub(1), m, m + 1], 2usize.saturating_sub(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SSE2 lanes (where they are the ones in use) and the plain ones agree on every lane,
    /// semi-global and global, for every query length.
    #[test]
    fn lanes_scalar_agrees() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for m in 1..=64 {
            let q: Vec<char> = (0..m).map(|_| (b'a' + (rnd() % 5) as u8) as char).collect();
            let (_, codes) = Alphabet::new(&q, &Budget::new()).unwrap();
            let p = Pattern::new(&codes);
            let text: Vec<u8> = (0..4 * 300).map(|_| b'a' + (rnd() % 6) as u8).collect();
            let inputs: [&[u8]; LANES] = std::array::from_fn(|l| &text[l * 300..(l + 1) * 300]);
            let mut a = vec![0u8; 4 * 250];
            let mut b = vec![0u8; 4 * 250];
            for global in [false, true] {
                let mut oa = a.chunks_mut(250);
                let mut ob = b.chunks_mut(250);
                let oa = std::array::from_fn(|_| oa.next().unwrap());
                let ob = std::array::from_fn(|_| ob.next().unwrap());
                if global {
                    lanes::<true>(&p, inputs, 50, 70, oa);
                    lanes_scalar::<true>(&p, inputs, 50, 70, ob);
                } else {
                    lanes::<false>(&p, inputs, 50, 70, oa);
                    lanes_scalar::<false>(&p, inputs, 50, 70, ob);
                }
                assert_eq!(a, b, "m = {m}, global = {global}");
            }
        }
    }

    /// `f(q, t[..j])` for `j` in `0..=len(t)` by the textbook column DP, where `f` is the edit
    /// distance (`free_start` false) or its least value over suffixes of `t[..j]` (true).
    fn last_row(q: &[char], t: &[char], free_start: bool) -> Vec<usize> {
        let mut col: Vec<usize> = (0..=q.len()).collect();
        let mut out = vec![col[q.len()]];
        for (j, &c) in t.iter().enumerate() {
            let mut next = vec![if free_start { 0 } else { j + 1 }; q.len() + 1];
            for i in 1..=q.len() {
                next[i] = (col[i - 1] + usize::from(q[i - 1] != c))
                    .min(col[i] + 1)
                    .min(next[i - 1] + 1);
            }
            col = next;
            out.push(col[q.len()]);
        }
        out
    }

    /// Clause "comparison_cells counts banded cells evaluated", as this search defines it (module
    /// documentation): worked by hand for "abc" in "xxabdxx". m = 3, k = 1, so each filter lane
    /// warms up over pad = m + k + 1 = 5 code points before its chunk of ceil(7 / 4) = 2 ends:
    /// 4 lanes * 7 columns * 3 cells = 84. Only ends 4 ("ab") and 5 ("abd") are within
    /// distance 1, so the surviving starts are 0..=3; the first one the ranking asks about
    /// (start 0, window "xxab") verifies starts 0, 1, 2 and 3 in one batch: 4 lanes * (m + 1)
    /// columns * 3 cells = 48. "ab" at [2, 4) is the one pick, so nothing more runs: 132.
    #[test]
    fn comparison_cells_worked_by_hand() {
        let r = search("xxabdxx", "abc");
        let picked: Vec<_> = r
            .candidates
            .iter()
            .map(|c| (c.start, c.end, c.distance))
            .collect();
        assert_eq!(picked, [(2, 4, 1)]);
        assert_eq!(r.comparison_cells, 84 + 48);
        assert_eq!(r.to_json()["comparison_cells"], json!(132));
    }

    /// Clause "comparison_cells counts banded cells evaluated": the count grows with the
    /// scanned buffer (the filter's share is m * 4 * (ceil(n / 4) + m + k + 1)), and stops
    /// growing where the scan stops, at 65,536 code points.
    #[test]
    fn comparison_cells_grow_with_the_buffer() {
        let line = "The quick brown fox jumps over the lazy dog near the river bank.\n";
        let query = "lazy dgo near the";
        let (m, k) = (17u64, threshold(17) as u64);
        let mut last = 0;
        for n in [256usize, 1_024, 4_096, 16_384, 65_536, 70_000, 200_000] {
            let text: String = line.chars().cycle().take(n).collect();
            let r = search(&text, query);
            let scanned = n.min(65_536) as u64;
            let filter = m * 4 * (scanned.div_ceil(4) + m + k + 1);
            assert!(r.comparison_cells >= filter, "{n}: {}", r.comparison_cells);
            if n <= 65_536 {
                assert!(
                    r.comparison_cells > last,
                    "{n}: {} after {last}",
                    r.comparison_cells
                );
            } else {
                assert_eq!(r.comparison_cells, last, "{n}");
            }
            last = r.comparison_cells;
        }
    }

    /// Issue 17, the search's allocation budget: the largest search there is (64 non-ASCII query
    /// code points, so the 64 KiB alphabet table; 65,536 code points of homogeneous text, so
    /// the reversed pass and the most verification) fits NEAR_MISS_SEARCH_MAX_BYTES, and the
    /// budget refuses what would pass it.
    #[test]
    fn the_largest_search_fits_its_allocation_budget() {
        let text = "é".repeat(70_000);
        let query = "é".repeat(63) + "ü";
        let r = try_search_in(&text, &query, ScanSource::FailingBuffer, 0, (0, None)).unwrap();
        assert_eq!(r.candidates.len(), 3);
        let b = Budget::new();
        assert!(
            b.with_capacity::<u8>(NEAR_MISS_SEARCH_MAX_BYTES + 1)
                .is_err()
        );
        assert!(b.filled(NEAR_MISS_SEARCH_MAX_BYTES / 2, 0u8).is_ok());
        assert!(b.filled(NEAR_MISS_SEARCH_MAX_BYTES / 2 + 1, 0u8).is_err());
        assert!(b.with_capacity::<u64>(usize::MAX).is_err());
    }

    fn guarded(f: impl FnOnce() -> Value) -> Result<Value, String> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|e| {
            e.downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| e.downcast_ref::<String>().cloned())
                .unwrap_or_default()
        })
    }

    /// Issue 17: a contained fault is invisible to the client (only the omission), so it is left
    /// for the extension to write to the server log, once.
    #[test]
    fn a_contained_fault_is_left_for_the_server_log() {
        let _ = take_contained_fault();
        fault::inject(Some(fault::Fault::Panic));
        let v = contained(|| Ok(search("The old lighthouse keeper.", "lighthuose").to_json()));
        fault::inject(None);
        assert_eq!(v, omitted(SEARCH_FAILED));
        assert_eq!(
            take_contained_fault().as_deref(),
            Some("it panicked: injected near-miss search fault")
        );
        assert_eq!(take_contained_fault(), None, "taken once");
        let v = contained(|| Ok(search("The old lighthouse keeper.", "lighthuose").to_json()));
        assert!(v["candidates"].is_array());
        assert_eq!(
            take_contained_fault(),
            None,
            "a search that ran leaves nothing"
        );
    }

    /// Issue 17: "A fault inside the near-miss search must not roll back the audited attempt:
    /// return an omission_reason instead." A panic (a bug) and a refused allocation become
    /// near_miss_search_failed; an interrupt raised by the hook inside the search (a cancel,
    /// statement_timeout) still unwinds, so that it ends the statement.
    #[test]
    fn faults_are_contained_and_interrupts_are_not() {
        let run = || {
            contained(|| {
                try_search_in("xxabdxx", "abc", ScanSource::FailingBuffer, 0, (0, None))
                    .map(|n| n.to_json())
            })
        };
        let failed = json!({"omission_reason": "near_miss_search_failed"});
        fault::inject(Some(fault::Fault::Panic));
        assert_eq!(guarded(run), Ok(failed.clone()));
        fault::inject(Some(fault::Fault::Allocation));
        assert_eq!(guarded(run), Ok(failed.clone()));
        fault::inject(Some(fault::Fault::Interrupt(|| {
            interrupt::testing::arm(Some(0))
        })));
        assert_eq!(
            guarded(run),
            Err(interrupt::testing::INTERRUPTED.to_owned())
        );
        interrupt::testing::arm(None);
        fault::inject(None);
        // Disarmed, the same search answers, and a panic seen before no longer counts as an
        // interrupt.
        assert_eq!(guarded(run).unwrap()["candidates"][0]["text"], "ab");
        fault::inject(Some(fault::Fault::Panic));
        assert_eq!(guarded(run), Ok(failed));
        fault::inject(None);
    }

    /// The reverse bounds are exactly `min(k + 1, R[s])`, the least distance between the query
    /// and a substring starting at `s`, and the forward ones `min(k + 1, D[e])`.
    #[test]
    fn bounds_are_exact() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut rnd = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for _ in 0..30 {
            let n = 1 + rnd(300) as usize;
            let text: Vec<char> = (0..n).map(|_| ['a', '\0', '中'][rnd(3) as usize]).collect();
            let m = 1 + rnd(24) as usize;
            let q: Vec<char> = (0..m)
                .map(|_| ['a', '\0', '中', 'c'][rnd(4) as usize])
                .collect();
            let k = threshold(m);
            let t: String = text.iter().collect();
            let scan = Scan::new(&t, &q, k).unwrap();
            let reverse = scan.reverse_bounds().unwrap();
            let clamp = |d: usize| d.min(k + 1) as u8;
            for s in 0..n {
                let best = *last_row(&q, &text[s..], false).iter().min().unwrap();
                assert_eq!(reverse[n - s], clamp(best), "R[{s}] of {t:?} / {q:?}");
            }
            for (e, &d) in last_row(&q, &text, true).iter().enumerate().skip(1) {
                assert_eq!(scan.dmin[e], clamp(d), "D[{e}] of {t:?} / {q:?}");
            }
        }
    }
}
