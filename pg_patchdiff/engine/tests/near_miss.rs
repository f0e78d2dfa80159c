//! Near misses for `match_absent` (contract "Exact candidates, consumed matches and near
//! misses"): the bit-parallel search agrees exactly with a brute-force reference (every window of
//! lengths m-1, m, m+1, full Levenshtein DP, sorted by (distance, start, end), greedy
//! non-overlap), and every budget edge holds.

use patchdiff_engine::api::near_miss::{
    self, Candidate, NearMisses, ScanSource, near_miss_query, search, search_in, threshold,
};
use patchdiff_engine::wire::ascii_len;
use proptest::prelude::*;
use serde_json::json;

/// Full-matrix code-point Levenshtein distance.
fn lev(a: &[char], b: &[char]) -> usize {
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, &ca) in a.iter().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// The contract's ranking, literally: all qualifying windows, sorted, greedy without a bound.
/// Returns the first three picks and whether the greedy walk picked more than three.
fn reference(buf: &[char], q: &[char]) -> (Vec<(usize, usize, usize)>, bool) {
    let m = q.len();
    let k = 4.min((m / 4).max(1));
    let n = buf.len();
    let mut all = Vec::new();
    for len in [m as isize - 1, m as isize, m as isize + 1] {
        if len <= 0 || len as usize > n {
            continue;
        }
        let len = len as usize;
        for s in 0..=n - len {
            let d = lev(q, &buf[s..s + len]);
            if d >= 1 && d <= k {
                all.push((d, s, s + len));
            }
        }
    }
    all.sort();
    let mut picked: Vec<(usize, usize, usize)> = Vec::new();
    for (d, s, e) in all {
        if picked.iter().all(|&(ps, pe, _)| e <= ps || pe <= s) {
            picked.push((s, e, d));
        }
    }
    let more = picked.len() > 3;
    picked.truncate(3);
    (picked, more)
}

fn chars(s: &str) -> Vec<char> {
    s.chars().collect()
}

fn check_against_reference(buf: &str, q: &str) -> Result<(), TestCaseError> {
    let b = chars(buf);
    let qc = chars(q);
    let (want, more) = reference(&b, &qc);
    let got = search(buf, q);
    let spans: Vec<(usize, usize, usize)> = got
        .candidates
        .iter()
        .map(|c| (c.start, c.end, c.distance))
        .collect();
    prop_assert_eq!(&spans, &want, "buffer {:?} query {:?}", buf, q);
    prop_assert_eq!(
        got.candidates_truncated,
        more,
        "buffer {:?} query {:?}",
        buf,
        q
    );
    prop_assert!(!got.scope_truncated);
    prop_assert_eq!(got.truncated, more);
    prop_assert_eq!((got.scanned_start, got.scanned_end), (0, b.len()));
    for c in &got.candidates {
        let from = c.start.saturating_sub(16);
        let to = (c.end + 16).min(b.len());
        prop_assert_eq!(&c.text, &b[c.start..c.end].iter().collect::<String>());
        prop_assert_eq!(
            &c.context_before,
            &b[from..c.start].iter().collect::<String>()
        );
        prop_assert_eq!(&c.context_after, &b[c.end..to].iter().collect::<String>());
    }
    Ok(())
}

/// A small deterministic generator, so that one proptest seed builds a whole case.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick(&mut self, from: &[char]) -> char {
        from[self.below(from.len())]
    }
}

/// The buffer families: random over a small alphabet, homogeneous, periodic, astral/CJK-heavy,
/// and mostly periodic with a few planted defects.
fn buffer(kind: u8, n: usize, rng: &mut Rng) -> (Vec<char>, Vec<char>) {
    let small = ['a', 'b', 'c'];
    let astral = ['🌍', '中', '文', 'a', '\n', '😀', 'é'];
    match kind {
        0 => {
            let alpha: Vec<char> = small[..1 + rng.below(3)].to_vec();
            ((0..n).map(|_| rng.pick(&alpha)).collect(), alpha)
        }
        1 => {
            let c = rng.pick(&['a', '中', '😀']);
            (vec![c; n], vec![c, 'b', '🌍'])
        }
        2 | 4 => {
            let p = 1 + rng.below(8);
            let period: Vec<char> = (0..p).map(|_| rng.pick(&astral[..4])).collect();
            let mut b: Vec<char> = (0..n).map(|i| period[i % p]).collect();
            if kind == 4 {
                for _ in 0..1 + rng.below(3) {
                    if n > 0 {
                        let at = rng.below(n);
                        b[at] = rng.pick(&astral);
                    }
                }
            }
            (b, astral.to_vec())
        }
        _ => ((0..n).map(|_| rng.pick(&astral)).collect(), astral.to_vec()),
    }
}

/// A query of `m` code points taken from the buffer (or random when the buffer is short) with
/// `edits` random substitutions, insertions and deletions; kept within 1..=64 code points.
fn query(buf: &[char], alpha: &[char], m: usize, edits: usize, rng: &mut Rng) -> Vec<char> {
    let mut q: Vec<char> = if buf.len() >= m && rng.below(8) != 0 {
        let s = rng.below(buf.len() - m + 1);
        buf[s..s + m].to_vec()
    } else {
        (0..m).map(|_| rng.pick(alpha)).collect()
    };
    let mut edit_alpha = alpha.to_vec();
    edit_alpha.push('#');
    for _ in 0..edits {
        let at = rng.below(q.len() + 1);
        match rng.below(3) {
            0 if at < q.len() => q[at] = rng.pick(&edit_alpha),
            1 => q.insert(at, rng.pick(&edit_alpha)),
            _ if at < q.len() && q.len() > 1 => {
                q.remove(at);
            }
            _ => q.insert(at, rng.pick(&edit_alpha)),
        }
    }
    q.truncate(64);
    if q.is_empty() {
        q.push(rng.pick(alpha));
    }
    q
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(384))]

    /// Clause "Windows have the query length minus one, the query length and the query length
    /// plus one ... Candidates are chosen in (distance, start, end) order, skipping any window
    /// that overlaps one already chosen", and "candidates_truncated when more distinct locations
    /// qualified than were returned": on random, homogeneous, periodic, astral and planted-defect
    /// buffers with queries of 1..=64 code points derived from them with 0-3 edits, the search
    /// returns exactly the brute-force reference's candidates and truncation.
    #[test]
    fn search_equals_brute_force_reference(
        seed in 1u64..u64::MAX,
        kind in 0u8..5,
        n in 0usize..260,
        m in 1usize..=64,
        edits in 0usize..=3,
    ) {
        let mut rng = Rng(seed);
        let (buf, alpha) = buffer(kind, n, &mut rng);
        let q = query(&buf, &alpha, m, edits, &mut rng);
        let buf: String = buf.into_iter().collect();
        let q: String = q.into_iter().collect();
        check_against_reference(&buf, &q)?;
    }

    /// Same clause, short queries over tiny alphabets, where nearly every window qualifies and
    /// overlaps decide the picks.
    #[test]
    fn short_queries_on_tiny_alphabets_equal_reference(
        buf in proptest::collection::vec(prop_oneof![Just('a'), Just('b'), Just('😀'), Just('\0')], 0..80),
        q in proptest::collection::vec(prop_oneof![Just('a'), Just('b'), Just('😀'), Just('x'), Just('\0')], 1..12),
    ) {
        let buf: String = buf.into_iter().collect();
        let q: String = q.into_iter().collect();
        check_against_reference(&buf, &q)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Same clause on buffers of 300-2,000 code points, long enough that the filter's four lanes
    /// each start well past the others' warm-up: lane boundaries hide and invent nothing.
    #[test]
    fn long_buffers_equal_reference(
        seed in 1u64..u64::MAX,
        kind in 0u8..5,
        n in 300usize..2_000,
        m in 1usize..=20,
        edits in 0usize..=3,
    ) {
        let mut rng = Rng(seed);
        let (buf, alpha) = buffer(kind, n, &mut rng);
        let q = query(&buf, &alpha, m, edits, &mut rng);
        let buf: String = buf.into_iter().collect();
        let q: String = q.into_iter().collect();
        check_against_reference(&buf, &q)?;
    }
}

/// Clause "scans a bounded copy of the failing buffer": the scan is split into four lanes
/// internally; near misses planted across each lane boundary of a 4,096-code-point buffer (1,024,
/// 2,048 and 3,072) are all found, exactly as the reference finds them.
#[test]
fn lane_boundaries_do_not_hide_near_misses() {
    let q = distinct_query(8);
    let qs: String = q.iter().collect();
    let mut buf = vec!['.'; 4_096];
    for (at, sub) in [(1_020, 2), (2_045, 5), (3_070, 6)] {
        buf[at..at + 8].copy_from_slice(&q);
        buf[at + sub] = '#';
    }
    let b: String = buf.iter().collect();
    let r = search(&b, &qs);
    let spans: Vec<_> = r
        .candidates
        .iter()
        .map(|c| (c.start, c.end, c.distance))
        .collect();
    assert_eq!(
        spans,
        [(1_020, 1_028, 1), (2_045, 2_053, 1), (3_070, 3_078, 1)]
    );
    check_against_reference(&b, &qs).unwrap();
}

/// Clause "Candidates are chosen in (distance, start, end) order": periodic buffers where every
/// end passes the filter and whole distance levels hold no window at all (the search then also
/// bounds each start from the reversed text) still rank exactly as the reference does.
#[test]
fn periodic_buffers_with_empty_levels_equal_reference() {
    let cases = [
        (
            "abcabd",
            "bdabcabdabcabdabcabdabcabdabcabdcabcabdabcabdabacabdabcabdabca",
        ),
        ("aba", "abaabbaabaabaabaabaabaabaabaabbaabaabaabadb"),
        (
            "abca",
            "aabcaabcaabcaabcaabcaabcababcababcaabcaabcaabcdaabcaabca",
        ),
        ("aabbbb", "aabbbbacabbbbaababbbaabbbabaabbbba"),
    ];
    for (period, q) in cases {
        let buf: String = period.chars().cycle().take(2_500).collect();
        check_against_reference(&buf, q).unwrap();
    }
}

/// Clause "Windows have ... the query length plus one (positive lengths only)": an empty query
/// has only windows of length 1, each at distance 1.
#[test]
fn empty_query_has_only_length_one_windows() {
    let r = search("ab😀cd", "");
    let spans: Vec<_> = r
        .candidates
        .iter()
        .map(|c| (c.start, c.end, c.distance))
        .collect();
    assert_eq!(spans, [(0, 1, 1), (1, 2, 1), (2, 3, 1)]);
    assert_eq!(r.candidates[2].text, "😀");
    assert!(r.candidates_truncated);
    assert!(search("", "").candidates.is_empty());
}

/// Clause "accepted when nonzero and at most min(4, max(1, len(query) // 4))": the bound for
/// m = 1, 3, 4, 7, 8, 16, 17 and 64.
#[test]
fn threshold_formula_at_each_edge() {
    let want = [
        (1, 1),
        (3, 1),
        (4, 1),
        (7, 1),
        (8, 2),
        (16, 4),
        (17, 4),
        (64, 4),
    ];
    for (m, k) in want {
        assert_eq!(threshold(m), k, "m = {m}");
    }
}

/// A query of `m` distinct code points, none of them '.', '#' or '%'.
fn distinct_query(m: usize) -> Vec<char> {
    (0..m)
        .map(|i| char::from_u32(0x4E00 + i as u32).unwrap())
        .collect()
}

/// Clause "accepted when nonzero and at most min(4, max(1, len(query) // 4))": for m = 3, 4, 7,
/// 8, 16, 17 and 64, a window k substitutions away is found at distance k, and one k + 1
/// substitutions away is not found at all.
#[test]
fn threshold_accepts_k_and_rejects_k_plus_one() {
    for m in [3, 4, 7, 8, 16, 17, 64] {
        let k = threshold(m);
        let q = distinct_query(m);
        let qs: String = q.iter().collect();
        for subs in [k, k + 1] {
            let mut w = q.clone();
            for slot in w.iter_mut().take(subs) {
                *slot = '#';
            }
            let buf = format!(
                "{}{}{}",
                ".".repeat(40),
                w.iter().collect::<String>(),
                ".".repeat(40)
            );
            let r = search(&buf, &qs);
            if subs == k {
                let c = &r.candidates[0];
                assert_eq!((c.start, c.end, c.distance), (40, 40 + m, k), "m = {m}");
            } else {
                assert!(r.candidates.is_empty(), "m = {m}: {:?}", r.candidates);
            }
        }
    }
    // m = 1: every other single code point is one substitution away.
    let r = search("xy", "a");
    let spans: Vec<_> = r
        .candidates
        .iter()
        .map(|c| (c.start, c.end, c.distance))
        .collect();
    assert_eq!(spans, [(0, 1, 1), (1, 2, 1)]);
}

/// Clause "Distance is code-point Levenshtein, accepted when nonzero": an exact occurrence is
/// never a near miss, but the one-longer window around it is.
#[test]
fn exact_match_is_excluded_but_its_neighbours_are_not() {
    let r = search("xxabcdefghyy", "abcdefgh");
    let first = &r.candidates[0];
    assert_eq!((first.start, first.end, first.distance), (1, 10, 1));
    assert!(r.candidates.iter().all(|c| c.distance >= 1));
}

/// Clause "Queries longer than 64 code points are not searched" and "match_absent failures
/// persist diagnostic.near_miss_query: the canonical query when its raw length is at most 64
/// code points, otherwise omission_reason: "match_too_large", within 1,024 wrapper bytes".
#[test]
fn query_of_64_is_searched_and_65_is_not() {
    let q64: String = distinct_query(64).into_iter().collect();
    let q65: String = distinct_query(65).into_iter().collect();
    let mut near: Vec<char> = distinct_query(64);
    near[10] = '#';
    let buf: String = near.into_iter().collect();

    let r = search(&buf, &q64);
    assert_eq!(r.omission_reason, None);
    assert_eq!(r.candidates.len(), 1);
    assert_eq!(near_miss_query(64, &q64), json!({ "query": q64 }));

    let r = search(&buf, &q65);
    assert_eq!(r.omission_reason, Some("match_too_large"));
    assert!(r.candidates.is_empty());
    assert_eq!(r.to_json(), json!({ "omission_reason": "match_too_large" }));
    assert_eq!(
        near_miss_query(65, &q65),
        json!({ "omission_reason": "match_too_large" })
    );
    // The raw length decides: 65 raw code points canonicalised to 64 are still too large.
    assert_eq!(
        near_miss_query(65, &q64),
        json!({ "omission_reason": "match_too_large" })
    );
    // 64 astral code points escape to 12 bytes each and still fit 1,024 bytes.
    let astral = "😀".repeat(64);
    let v = near_miss_query(64, &astral);
    assert_eq!(v, json!({ "query": astral }));
    assert!(ascii_len(&v) <= 1_024);
}

/// Clause "A fresh rejection scans a bounded copy of the failing buffer, at most its first
/// 65,536 code points" and "scope_truncated is true when that range does not cover the whole
/// failing buffer": a buffer of exactly 65,536 code points is scanned whole (a near miss ending
/// at its last code point is found); at 65,537 the scan stops at 65,536, scope_truncated and
/// truncated are set, and a near miss ending past 65,536 is not reported.
#[test]
fn buffer_of_65536_is_whole_and_65537_is_scope_truncated() {
    let q: Vec<char> = distinct_query(8);
    let qs: String = q.iter().collect();
    let mut near = q.clone();
    near[3] = '#';
    let near: String = near.into_iter().collect();

    let filler = |n: usize| "中".repeat(n);
    let exact = format!("{}{}", filler(65_536 - 8), near);
    assert_eq!(exact.chars().count(), 65_536);
    let r = search(&exact, &qs);
    assert_eq!((r.scanned_start, r.scanned_end), (0, 65_536));
    assert!(!r.scope_truncated && !r.truncated);
    let spans: Vec<_> = r
        .candidates
        .iter()
        .map(|c| (c.start, c.end, c.distance))
        .collect();
    assert_eq!(spans[0], (65_528, 65_536, 1));
    assert_eq!(r.candidates[0].context_after, "");
    assert_eq!(r.candidates[0].context_before, filler(16));

    let over = format!("{}{}", filler(65_536 - 7), near);
    assert_eq!(over.chars().count(), 65_537);
    let r = search(&over, &qs);
    assert_eq!((r.scanned_start, r.scanned_end), (0, 65_536));
    assert!(r.scope_truncated && r.truncated && !r.candidates_truncated);
    assert!(r.candidates.iter().all(|c| c.end <= 65_536));
    assert!(r.candidates.iter().all(|c| c.distance > 1));
    let j = r.to_json();
    assert_eq!(j["scope_truncated"], json!(true));
    assert_eq!(j["truncated"], json!(true));
}

/// Clause "Each has absolute start/end in failing-buffer coordinates" and "Exact recovery scans
/// only the stored failure context (scan_source: "stored_failure_context")": a context that
/// starts at code point 1,000 of a 5,000-code-point buffer reports absolute offsets and a
/// truncated scope.
#[test]
fn stored_failure_context_reports_absolute_offsets() {
    let ctx = "xxxx abcdXfgh yyyy";
    let r = search_in(
        ctx,
        "abcdefgh",
        ScanSource::StoredFailureContext,
        1_000,
        Some(5_000),
    );
    assert_eq!(r.candidates[0].start, 1_005);
    assert_eq!(r.candidates[0].end, 1_013);
    assert_eq!((r.scanned_start, r.scanned_end), (1_000, 1_018));
    assert!(r.scope_truncated && r.truncated);
    let j = r.to_json();
    assert_eq!(j["scan_source"], json!("stored_failure_context"));
    assert_eq!(j["candidates"][0]["start"], json!(1_005));
    // A context that is the whole buffer is not a truncated scope.
    let r = search_in(
        ctx,
        "abcdefgh",
        ScanSource::StoredFailureContext,
        0,
        Some(18),
    );
    assert!(!r.scope_truncated);
}

/// Clause "An empty computed list includes a hint naming patchdiff_find_occurrences" and the
/// response shape (with issue 17's comparison_cells after scan_source).
#[test]
fn empty_list_carries_the_hint_and_the_shape_is_fixed() {
    let r = search("nothing similar here", "ZZZZZZZZ");
    assert!(r.candidates.is_empty());
    let j = r.to_json();
    assert!(
        j["hint"]
            .as_str()
            .unwrap()
            .contains("patchdiff_find_occurrences")
    );
    let keys: Vec<&str> = j.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "candidates",
            "scan_source",
            "comparison_cells",
            "scanned_start",
            "scanned_end",
            "scope_truncated",
            "candidates_truncated",
            "truncated",
            "hint"
        ]
    );
    assert_eq!(j["scan_source"], json!("failing_buffer"));
    let r = search("abcdeXgh", "abcdefgh");
    let j = r.to_json();
    assert!(j.get("hint").is_none());
    let keys: Vec<&str> = j["candidates"][0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "start",
            "end",
            "distance",
            "text",
            "context_before",
            "context_after"
        ]
    );
}

/// Clause "up to three candidates name up to three distinct locations ... within 8,192 wrapper
/// bytes (compact ASCII-escaped JSON)": the largest possible real answer (three 65-code-point
/// astral windows with full astral contexts) fits whole; an oversized list loses trailing
/// candidates, down to none, and says so.
#[test]
fn wrapper_stays_within_8192_bytes() {
    let q = "😀".repeat(63) + "🌍";
    let buf = "😀".repeat(2_000);
    let r = search(&buf, &q);
    assert_eq!(r.candidates.len(), 3);
    assert!(r.candidates_truncated);
    let j = r.to_json();
    assert_eq!(j["candidates"].as_array().unwrap().len(), 3);
    assert!(ascii_len(&j) <= 8_192, "{}", ascii_len(&j));

    let big = |start: usize, chars: usize| Candidate {
        start,
        end: start + 1,
        distance: 1,
        text: "😀".repeat(chars),
        context_before: String::new(),
        context_after: String::new(),
    };
    let mut made = NearMisses {
        candidates: vec![big(0, 300), big(10, 300), big(20, 300)],
        scan_source: ScanSource::FailingBuffer,
        scanned_start: 0,
        scanned_end: 100,
        scope_truncated: false,
        candidates_truncated: false,
        truncated: false,
        max_distance: 4,
        // The widest count: comparison_cells is inside the 8,192-byte wrapper too.
        comparison_cells: u64::MAX,
        omission_reason: None,
    };
    let j = made.to_json();
    assert_eq!(j["candidates"].as_array().unwrap().len(), 2);
    assert_eq!(j["candidates_truncated"], json!(true));
    assert_eq!(j["truncated"], json!(true));
    assert!(ascii_len(&j) <= 8_192);
    made.candidates = vec![big(0, 700)];
    let j = made.to_json();
    assert_eq!(j["candidates"], json!([]));
    assert!(j["hint"].is_string());
    assert_eq!(j["candidates_truncated"], json!(true));
    assert!(ascii_len(&j) <= 8_192);
}

/// Clause "their near_misses are omitted with omission_reason: "sequential_match_consumed"" and
/// "Caller-owned transactions return omission_reason: "caller_transaction"": the omitted form.
#[test]
fn omitted_forms() {
    for reason in ["sequential_match_consumed", "caller_transaction"] {
        assert_eq!(
            near_miss::omitted(reason),
            json!({ "omission_reason": reason })
        );
    }
}

/// Clauses "scope_truncated is true when that range does not cover the whole failing buffer, and
/// candidates_truncated when more distinct locations qualified than were returned": on a
/// homogeneous 65,536-code-point buffer, where every window qualifies, the search still covers the
/// whole buffer, picks the three leftmost non-overlapping best windows and reports the rest.
#[test]
fn homogeneous_full_buffer_picks_leftmost() {
    let buf = "a".repeat(65_536);
    let q = "a".repeat(31) + "b";
    let r = search(&buf, &q);
    let spans: Vec<_> = r
        .candidates
        .iter()
        .map(|c| (c.start, c.end, c.distance))
        .collect();
    // Distance 1 at start 0 with the shortest window (31 a's: delete the b).
    assert_eq!(spans, [(0, 31, 1), (31, 62, 1), (62, 93, 1)]);
    assert!(r.candidates_truncated && r.truncated && !r.scope_truncated);
}

/// Clause "Each has absolute start/end in failing-buffer coordinates": coordinates are code
/// points, also where every code point takes four UTF-8 bytes.
#[test]
fn astral_offsets_are_code_points() {
    let buf = "😀😀😀🌍🌍🌍🌍X🌍🌍😀😀";
    let r = search(buf, "🌍🌍🌍🌍🌍");
    let c = &r.candidates[0];
    // "😀🌍🌍🌍🌍" (one substitution) at code points 2..7, bytes 8..24.
    assert_eq!((c.start, c.end, c.distance), (2, 7, 1));
    assert_eq!(c.text, "😀🌍🌍🌍🌍");
    check_against_reference(buf, "🌍🌍🌍🌍🌍").unwrap();
}
