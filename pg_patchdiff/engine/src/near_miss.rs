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
//!    nothing else is skipped.
//! 2. Verification. For a start `s` that some surviving end names, one global Myers run over
//!    the `len(query) + 1` code points from `s` gives the exact distance of every prefix of that
//!    span, hence of its three windows at once. Verification is lazy (a start is verified when
//!    the ranking first needs it) and cached.
//! 3. Ranking. Level by level, distance 1 up to the threshold, starts ascending, ends
//!    ascending: a window whose exact distance equals the level and that overlaps no picked window
//!    is picked. That is exactly the greedy walk over all qualifying windows sorted by
//!    `(distance, start, end)`. After the third pick, `candidates_truncated` asks whether any
//!    qualifying window overlaps none of the three, which is exactly whether the unbounded greedy
//!    walk would have picked a fourth distinct location.
//!
//! The text is decoded once into code points and query-alphabet bit masks; offsets stay code
//! points throughout and the JSON is built from the decoded code points.

use crate::json::ascii_len;
use crate::limits::{
    NEAR_MISS_CONTEXT_CHARS, NEAR_MISS_DISTANCE_DIVISOR, NEAR_MISS_MAX_DISTANCE,
    NEAR_MISS_QUERY_MAX_BYTES, NEAR_MISS_QUERY_MAX_CHARS, NEAR_MISS_SCAN_MAX_CHARS,
    NEAR_MISSES_MAX, NEAR_MISSES_MAX_BYTES,
};
use serde_json::{Value, json};

/// The hint an empty computed list carries.
pub const EMPTY_HINT: &str = "No near misses were found in the scanned range; re-read the \
    target, or use patchdiff_find_occurrences with a shorter exact fragment of MATCH text.";

/// `omission_reason` for a query of more than 64 code points.
pub const MATCH_TOO_LARGE: &str = "match_too_large";

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
/// code points of `text` are scanned.
pub fn search_in(
    text: &str,
    query: &str,
    source: ScanSource,
    offset: usize,
    total_chars: Option<usize>,
) -> NearMisses {
    let q: Vec<char> = query.chars().collect();
    let m = q.len();
    let k = threshold(m);
    if m > NEAR_MISS_QUERY_MAX_CHARS {
        return NearMisses {
            candidates: Vec::new(),
            scan_source: source,
            scanned_start: offset,
            scanned_end: offset,
            scope_truncated: false,
            candidates_truncated: false,
            truncated: false,
            max_distance: k,
            omission_reason: Some(MATCH_TOO_LARGE),
        };
    }
    let scan = Scan::new(text, &q, k);
    let n = scan.n;
    let (picked, candidates_truncated) = scan.rank();
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
    let scope_truncated = offset > 0 || scan.cut || total_chars.is_some_and(|t| scanned_end < t);
    NearMisses {
        candidates,
        scan_source: source,
        scanned_start: offset,
        scanned_end,
        scope_truncated,
        candidates_truncated,
        truncated: scope_truncated || candidates_truncated,
        max_distance: k,
        omission_reason: None,
    }
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
/// `"sequential_match_consumed"`, `"caller_transaction"`).
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

/// The query as a bit-parallel pattern. Every distinct query code point has an index in
/// `1..=64` (0: not in the query). The pattern sits in the top `m` bits of a word, query code
/// point `i` at bit `64 - m + i`, so that the last row is always bit 63; the `64 - m` bits below
/// are virtual rows that match every code point and start with zero vertical deltas, which keeps
/// them all-zero and carry-free forever, so the real rows compute exactly what a pattern in the
/// low bits would.
struct Pattern {
    m: usize,
    ascii: [u8; 128],
    keys: [u32; Self::SLOTS],
    ids: [u8; Self::SLOTS],
    /// `eq[index]`: the real rows equal to that code point, plus every virtual row.
    eq: [u64; 256],
    /// Initial vertical deltas: +1 on every real row, 0 on the virtual ones.
    pv0: u64,
    /// The horizontal delta entering the first real row in a global alignment (`D[0][j] = j`).
    top: u64,
}

impl Pattern {
    /// Open addressing for non-ASCII code points: at most 64 keys in 128 slots.
    const SLOTS: usize = 128;
    const EMPTY: u32 = u32::MAX;

    /// `q` has 1 to 64 code points.
    fn new(q: &[char]) -> Self {
        let m = q.len();
        let mut p = Pattern {
            m,
            ascii: [0; 128],
            keys: [Self::EMPTY; Self::SLOTS],
            ids: [0; Self::SLOTS],
            eq: [0; 256],
            pv0: !0u64 << (64 - m),
            top: 1u64 << (64 - m),
        };
        let mut next = 1u8;
        for (i, &c) in q.iter().enumerate() {
            let c = c as u32;
            let id = if c < 128 {
                if p.ascii[c as usize] == 0 {
                    p.ascii[c as usize] = next;
                    next += 1;
                }
                p.ascii[c as usize]
            } else {
                let mut h = Self::slot(c);
                while p.keys[h] != Self::EMPTY && p.keys[h] != c {
                    h = (h + 1) % Self::SLOTS;
                }
                if p.keys[h] == Self::EMPTY {
                    p.keys[h] = c;
                    p.ids[h] = next;
                    next += 1;
                }
                p.ids[h]
            };
            p.eq[id as usize] |= 1 << (64 - m + i);
        }
        let virtual_rows = !p.pv0;
        for eq in &mut p.eq {
            *eq |= virtual_rows;
        }
        p
    }

    #[inline(always)]
    fn slot(c: u32) -> usize {
        (c.wrapping_mul(0x9E37_79B1) >> 25) as usize
    }

    /// The index of a non-ASCII code point.
    #[inline(always)]
    fn id(&self, c: u32) -> u8 {
        let mut h = Self::slot(c);
        loop {
            let key = self.keys[h];
            if key == c {
                return self.ids[h];
            }
            if key == Self::EMPTY {
                return 0;
            }
            h = (h + 1) % Self::SLOTS;
        }
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
    let [i0, i1, i2, i3] = inputs;
    let [o0, o1, o2, o3] = outputs;
    let len = o0.len();
    let top = if GLOBAL { p.top } else { 0 };
    let (mut pv0, mut pv1, mut pv2, mut pv3) = (p.pv0, p.pv0, p.pv0, p.pv0);
    let (mut mv0, mut mv1, mut mv2, mut mv3) = (0u64, 0u64, 0u64, 0u64);
    let m = p.m as u64;
    let (mut s0, mut s1, mut s2, mut s3) = (m, m, m, m);
    let eq = &p.eq;
    for t in 0..record {
        myers_step!(pv0, mv0, s0, eq[i0[t] as usize], top);
        myers_step!(pv1, mv1, s1, eq[i1[t] as usize], top);
        myers_step!(pv2, mv2, s2, eq[i2[t] as usize], top);
        myers_step!(pv3, mv3, s3, eq[i3[t] as usize], top);
    }
    let (i0, i1, i2, i3) = (
        &i0[record..record + len],
        &i1[record..record + len],
        &i2[record..record + len],
        &i3[record..record + len],
    );
    let (o1, o2, o3) = (&mut o1[..len], &mut o2[..len], &mut o3[..len]);
    let cap = cap as u64;
    for t in 0..len {
        myers_step!(pv0, mv0, s0, eq[i0[t] as usize], top);
        myers_step!(pv1, mv1, s1, eq[i1[t] as usize], top);
        myers_step!(pv2, mv2, s2, eq[i2[t] as usize], top);
        myers_step!(pv3, mv3, s3, eq[i3[t] as usize], top);
        o0[t] = s0.min(cap) as u8;
        o1[t] = s1.min(cap) as u8;
        o2[t] = s2.min(cap) as u8;
        o3[t] = s3.min(cap) as u8;
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
        __m128i, _mm_add_epi64, _mm_and_si128, _mm_andnot_si128, _mm_cvtsi128_si64, _mm_or_si128,
        _mm_set_epi64x, _mm_set1_epi64x, _mm_setzero_si128, _mm_slli_epi64, _mm_srli_epi64,
        _mm_sub_epi64, _mm_unpackhi_epi64, _mm_xor_si128,
    };
    let [i0, i1, i2, i3] = inputs;
    let [o0, o1, o2, o3] = outputs;
    let len = o0.len();
    let eq = &p.eq;
    let ones = _mm_set1_epi64x(-1);
    let top = _mm_set1_epi64x(p.top as i64);
    let (mut pva, mut pvb) = (_mm_set1_epi64x(p.pv0 as i64), _mm_set1_epi64x(p.pv0 as i64));
    let (mut mva, mut mvb) = (_mm_setzero_si128(), _mm_setzero_si128());
    let m = p.m as i64;
    let (mut sa, mut sb) = (_mm_set1_epi64x(m), _mm_set1_epi64x(m));
    macro_rules! step {
        ($pv:ident, $mv:ident, $sc:ident, $eq:expr) => {{
            let eq: __m128i = $eq;
            let xv = _mm_or_si128(eq, $mv);
            let sum = _mm_add_epi64(_mm_and_si128(eq, $pv), $pv);
            let xh = _mm_or_si128(_mm_xor_si128(sum, $pv), eq);
            let ph = _mm_or_si128($mv, _mm_andnot_si128(_mm_or_si128(xh, $pv), ones));
            let mh = _mm_and_si128($pv, xh);
            $sc = _mm_sub_epi64(
                _mm_add_epi64($sc, _mm_srli_epi64(ph, 63)),
                _mm_srli_epi64(mh, 63),
            );
            let ph = if GLOBAL {
                _mm_or_si128(_mm_slli_epi64(ph, 1), top)
            } else {
                _mm_slli_epi64(ph, 1)
            };
            let mh = _mm_slli_epi64(mh, 1);
            $pv = _mm_or_si128(mh, _mm_andnot_si128(_mm_or_si128(xv, ph), ones));
            $mv = _mm_and_si128(ph, xv);
        }};
    }
    let pair = |a: u8, b: u8| _mm_set_epi64x(eq[b as usize] as i64, eq[a as usize] as i64);
    for t in 0..record {
        step!(pva, mva, sa, pair(i0[t], i1[t]));
        step!(pvb, mvb, sb, pair(i2[t], i3[t]));
    }
    let (i0, i1, i2, i3) = (
        &i0[record..record + len],
        &i1[record..record + len],
        &i2[record..record + len],
        &i3[record..record + len],
    );
    let (o1, o2, o3) = (&mut o1[..len], &mut o2[..len], &mut o3[..len]);
    let cap = cap as u64;
    let lo = |v: __m128i| _mm_cvtsi128_si64(v) as u64;
    let hi = |v: __m128i| _mm_cvtsi128_si64(_mm_unpackhi_epi64(v, v)) as u64;
    for t in 0..len {
        step!(pva, mva, sa, pair(i0[t], i1[t]));
        step!(pvb, mvb, sb, pair(i2[t], i3[t]));
        o0[t] = lo(sa).min(cap) as u8;
        o1[t] = hi(sa).min(cap) as u8;
        o2[t] = lo(sb).min(cap) as u8;
        o3[t] = hi(sb).min(cap) as u8;
    }
}

/// The code point at byte `i` of valid UTF-8 whose lead byte is not ASCII, and its width.
#[inline(always)]
fn decode_wide(bytes: &[u8], i: usize) -> (u32, usize) {
    let b = bytes[i] as u32;
    let cont = |j: usize| (bytes[i + j] & 0x3F) as u32;
    if b < 0xE0 {
        (((b & 0x1F) << 6) | cont(1), 2)
    } else if b < 0xF0 {
        (((b & 0x0F) << 12) | (cont(1) << 6) | cont(2), 3)
    } else {
        (
            ((b & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3),
            4,
        )
    }
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
    /// `pad` zeros, the query index of each scanned code point, then zeros: reads before the
    /// start and past the end see code points that occur nowhere in the query.
    idx: Vec<u8>,
    pad: usize,
    /// `dmin[e]`, `e` in `0..=n`: `min(k + 1, D[e])`, where `D[e]` is the least distance from the
    /// query to any substring ending at `e`; `k + 1` past `n`.
    dmin: Vec<u8>,
    /// The least `dmin[e]` over the ends of all windows.
    floor: u8,
    /// Bitmap of window starts with at least one surviving end.
    starts: Vec<u64>,
}

impl<'a> Scan<'a> {
    fn new(text: &'a str, q: &[char], k: usize) -> Scan<'a> {
        let m = q.len();
        let pattern = (m > 0).then(|| Pattern::new(q));
        let bytes = text.as_bytes();
        let cap = bytes.len().min(NEAR_MISS_SCAN_MAX_CHARS);
        // The filter warms each lane up on the m + k code points before its first end: no
        // substring within distance k of the query is longer than m + k.
        let pad = m + k + 1;
        let mut idx = vec![0u8; pad + cap + LANES + m + 2];
        let (mut n, mut i) = (0usize, 0usize);
        if let Some(p) = &pattern {
            let codes = &mut idx[pad..pad + cap];
            while i < bytes.len() && n < NEAR_MISS_SCAN_MAX_CHARS {
                // Eight ASCII bytes at a time while they last.
                if let (Some(run), Some(out)) = (bytes.get(i..i + 8), codes.get_mut(n..n + 8))
                    && u64::from_le_bytes(run.try_into().unwrap()) & 0x8080_8080_8080_8080 == 0
                {
                    for (o, &b) in out.iter_mut().zip(run) {
                        *o = p.ascii[b as usize];
                    }
                    i += 8;
                    n += 8;
                    continue;
                }
                let b = bytes[i];
                if b < 0x80 {
                    codes[n] = p.ascii[b as usize];
                    i += 1;
                } else {
                    let (c, w) = decode_wide(bytes, i);
                    codes[n] = p.id(c);
                    i += w;
                }
                n += 1;
            }
        } else {
            for (at, _) in text.char_indices().take(NEAR_MISS_SCAN_MAX_CHARS) {
                n += 1;
                i = at;
            }
            i += text[i..].chars().next().map_or(0, char::len_utf8);
        }
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
            starts: vec![0u64; n / 64 + 1],
        };
        scan.filter();
        scan
    }

    /// The semi-global Myers pass: `dmin`, `floor` and the surviving starts.
    fn filter(&mut self) {
        let (m, k, n) = (self.m, self.k, self.n);
        let over = (k + 1) as u8;
        let chunk = n.div_ceil(LANES).max(1);
        let mut dmin = vec![over; (LANES * chunk + m + 2).max(n + 66)];
        match &self.pattern {
            // Every length-1 window is one insertion away from the empty query.
            None => dmin[1..=n].fill(1),
            Some(p) => {
                dmin[0] = m.min(k + 1) as u8;
                // Lane l ends at l * chunk + 1 ..= (l + 1) * chunk; it starts `pad` code points
                // before, fresh (lane 0 on the zero padding, which matches nothing and so changes
                // no D[e]). Starting fresh can only raise D[e], and not when D[e] <= k: such a
                // substring is at most m + k long and lies inside the lane's reach.
                let warm = self.pad;
                let inputs: [&[u8]; LANES] =
                    std::array::from_fn(|l| &self.idx[l * chunk..l * chunk + warm + chunk]);
                let mut outs = dmin[1..].chunks_mut(chunk);
                let outputs: [&mut [u8]; LANES] = std::array::from_fn(|_| outs.next().unwrap());
                lanes::<false>(p, inputs, warm, over, outputs);
                // Past the end nothing survives.
                dmin[n + 1..].fill(over);
            }
        }
        // Ends that survive (dmin below k + 1), as a bitmap over e - 1, eight at a time: a
        // byte of `v ^ (k + 1)` is nonzero exactly when v < k + 1, and all values are below 8.
        let mut ends = vec![0u64; n / 64 + 3];
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

    /// The exact distance of window slot `i` at start `s`, verifying `s` (and the next three
    /// unverified candidate starts close after it, which the ranking usually needs next) on
    /// first use.
    fn distance(&self, cache: &mut [u16], s: usize, i: usize) -> u8 {
        if cache[s] == UNVERIFIED {
            let mut batch = [self.n; LANES];
            batch[0] = s;
            let mut filled = 1;
            let mut from = s + 1;
            while filled < LANES {
                match self.next_start(from) {
                    Some(t) if t < s + 256 => {
                        if cache[t] == UNVERIFIED {
                            batch[filled] = t;
                            filled += 1;
                        }
                        from = t + 1;
                    }
                    _ => break,
                }
            }
            let got = self.verify(batch);
            for (&t, &v) in batch[..filled].iter().zip(&got) {
                cache[t] = v;
            }
        }
        ((cache[s] >> (5 * i)) & 31) as u8
    }

    /// The greedy pick over all qualifying windows in `(distance, start, end)` order, at most
    /// three, and whether a fourth distinct location qualified.
    fn rank(&self) -> (Vec<(usize, usize, u8)>, bool) {
        let (k, n) = (self.k, self.n);
        let (lens, first) = window_lens(self.m);
        let mut cache = vec![UNVERIFIED; n];
        let mut picked: Vec<(usize, usize, u8)> = Vec::with_capacity(NEAR_MISSES_MAX);
        let overlaps = |picked: &[(usize, usize, u8)], s: usize, e: usize| {
            picked.iter().any(|&(ps, pe, _)| s < pe && ps < e)
        };
        // Levels below the least D[e] of any window end hold no window at all.
        'levels: for d in self.floor.max(1)..=k as u8 {
            let mut next = self.next_start(0);
            while let Some(s) = next {
                for i in first..3 {
                    let e = s + lens[i];
                    if e > n {
                        break;
                    }
                    if self.dmin[e] > d || overlaps(&picked, s, e) {
                        continue;
                    }
                    if self.distance(&mut cache, s, i) == d {
                        picked.push((s, e, d));
                        if picked.len() == NEAR_MISSES_MAX {
                            break 'levels;
                        }
                        break;
                    }
                }
                next = self.next_start(s + 1);
            }
        }
        if picked.len() < NEAR_MISSES_MAX {
            // The greedy walk ran out of qualifying windows: nothing was left behind.
            return (picked, false);
        }
        let mut next = self.next_start(0);
        while let Some(s) = next {
            for i in first..3 {
                let e = s + lens[i];
                if e > n {
                    break;
                }
                if self.dmin[e] as usize > k || overlaps(&picked, s, e) {
                    continue;
                }
                let d = self.distance(&mut cache, s, i);
                if d >= 1 && d as usize <= k {
                    return (picked, true);
                }
            }
            next = self.next_start(s + 1);
        }
        (picked, false)
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
            let p = Pattern::new(&q);
            let text: Vec<u8> = (0..4 * 300)
                .map(|_| p.ascii[(b'a' + (rnd() % 6) as u8) as usize])
                .collect();
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
}
