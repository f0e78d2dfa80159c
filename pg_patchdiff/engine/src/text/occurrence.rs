//! Overlapping exact occurrences of a needle in a text, in O(n + m + k) for a text of `n` bytes,
//! a needle of `m` bytes and `k` occurrences.
//!
//! The contract counts overlapping occurrences (`aa` occurs three times in `aaaa`), so a search
//! cannot skip past a match. Restarting a substring search one code point after each match is
//! quadratic on periodic input (`a` x N/2 in `a` x N re-reads N/2 bytes per match). Instead the
//! search runs in two modes:
//!
//! - SIMD `memmem` from a position where no partial match is in progress, up to the next match;
//! - after a match, Knuth–Morris–Pratt from the needle's longest proper border (the longest
//!   prefix that is also a suffix), one byte at a time, for as long as a partial match is in
//!   progress. When the KMP state falls back to zero, no occurrence can start before the current
//!   position, and the search hands back to `memmem` from there.
//!
//! Every text byte is read once by one of the two modes (plus KMP's amortized fallbacks), so the
//! total is linear. The border table (O(m)) is built once, at the first match; after a match of a
//! needle without a border (most identifiers) the KMP state is already zero and the search goes
//! straight back to `memmem` one needle length on.
//!
//! UTF-8 is self-synchronizing, so a byte-level match of valid UTF-8 in valid UTF-8 starts and
//! ends on code-point boundaries; code-point offsets are counted incrementally between matches.

use crate::contract::interrupt;
use crate::text::char_len;
use memchr::memmem;

/// One occurrence, in code points and in bytes of the text searched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Occurrence {
    pub start: usize,
    pub end: usize,
    pub byte_start: usize,
    pub byte_end: usize,
}

/// Calls `f` for each overlapping occurrence of `needle` in `hay`, in ascending order, until it
/// returns false. Returns the number of occurrences visited (the one `f` stopped at included).
/// An empty needle has no occurrences.
pub fn for_each(hay: &str, needle: &str, mut f: impl FnMut(Occurrence) -> bool) -> usize {
    let (h, p) = (hay.as_bytes(), needle.as_bytes());
    let m = p.len();
    if m == 0 || m > h.len() {
        return 0;
    }
    let finder = memmem::Finder::new(p);
    let needle_chars = char_len(needle);
    // Code points are counted from (`counted_b`, `counted_cp`) forward to each match start.
    let (mut counted_b, mut counted_cp) = (0usize, 0usize);
    let mut border: Option<Vec<usize>> = None;
    let mut ticks = interrupt::Every::new(interrupt::SEARCH_INTERVAL);
    let mut found = 0usize;
    let mut report = |at: usize, found: &mut usize| -> bool {
        counted_cp += char_len(&hay[counted_b..at]);
        counted_b = at;
        *found += 1;
        f(Occurrence {
            start: counted_cp,
            end: counted_cp + needle_chars,
            byte_start: at,
            byte_end: at + m,
        })
    };
    let mut pos = 0usize;
    'search: while let Some(rel) = finder.find(&h[pos..]) {
        interrupt::check();
        let mut at = pos + rel;
        if !report(at, &mut found) {
            break;
        }
        // KMP from the needle's border, while a partial match is in progress.
        let table = border.get_or_insert_with(|| prefix_function(p));
        let mut q = table[m - 1];
        let mut i = at + m;
        while q > 0 {
            if i == h.len() {
                break 'search;
            }
            ticks.tick();
            let b = h[i];
            while q > 0 && p[q] != b {
                q = table[q - 1];
            }
            if p[q] == b {
                q += 1;
            }
            i += 1;
            if q == m {
                at = i - m;
                if !report(at, &mut found) {
                    break 'search;
                }
                q = table[m - 1];
            }
        }
        pos = i;
        if pos >= h.len() {
            break;
        }
    }
    found
}

/// The KMP prefix function: `pi[i]` is the length of the longest proper border of `p[..=i]`.
fn prefix_function(p: &[u8]) -> Vec<usize> {
    let mut pi = vec![0usize; p.len()];
    let mut ticks = interrupt::Every::new(interrupt::SEARCH_INTERVAL);
    let mut q = 0usize;
    for i in 1..p.len() {
        ticks.tick();
        while q > 0 && p[i] != p[q] {
            q = pi[q - 1];
        }
        if p[i] == p[q] {
            q += 1;
        }
        pi[i] = q;
    }
    pi
}

/// All occurrences, in ascending order.
pub fn all(hay: &str, needle: &str) -> Vec<Occurrence> {
    let mut out = Vec::new();
    for_each(hay, needle, |o| {
        out.push(o);
        true
    });
    out
}

/// The number of overlapping occurrences.
pub fn count(hay: &str, needle: &str) -> usize {
    for_each(hay, needle, |_| true)
}

/// Char offsets of all (overlapping) exact occurrences of `needle` in `hay`, as
/// `(start, end)` code-point pairs in ascending order. `needle` must not be empty.
pub fn find_all(hay: &str, needle: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for_each_occurrence(hay, needle, |s, e| {
        out.push((s, e));
        true
    });
    out
}

/// Calls `f(start, end)` in code points for each overlapping occurrence until it returns false.
/// Returns the number of occurrences visited. Linear in text, needle and occurrences
/// ([`for_each`]).
pub fn for_each_occurrence(
    hay: &str,
    needle: &str,
    mut f: impl FnMut(usize, usize) -> bool,
) -> usize {
    for_each(hay, needle, |o| f(o.start, o.end))
}

/// Counts overlapping occurrences of `needle` in `hay`.
pub fn count_occurrences(hay: &str, needle: &str) -> usize {
    for_each_occurrence(hay, needle, |_, _| true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::{Duration, Instant};

    /// Every code-point position where `needle` starts, by comparing chars.
    fn naive(hay: &str, needle: &str) -> Vec<Occurrence> {
        let h: Vec<(usize, char)> = hay.char_indices().collect();
        let n: Vec<char> = needle.chars().collect();
        if n.is_empty() {
            return Vec::new();
        }
        (0..h.len())
            .filter(|&s| s + n.len() <= h.len() && (0..n.len()).all(|j| h[s + j].1 == n[j]))
            .map(|s| Occurrence {
                start: s,
                end: s + n.len(),
                byte_start: h[s].0,
                byte_end: h.get(s + n.len()).map_or(hay.len(), |x| x.0),
            })
            .collect()
    }

    /// A tiny alphabet, multi-byte characters included, so that overlaps and near-overlaps are
    /// frequent and offsets differ between bytes and code points.
    fn tiny(max: usize) -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![Just('a'), Just('b'), Just('é'), Just('🌍')],
            0..max,
        )
        .prop_map(|v| v.into_iter().collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn equals_naive_reference(hay in tiny(48), needle in tiny(6)) {
            prop_assert_eq!(all(&hay, &needle), naive(&hay, &needle));
            prop_assert_eq!(count(&hay, &needle), naive(&hay, &needle).len());
        }

        /// Stopping early visits a prefix of the occurrences.
        #[test]
        fn stops_when_told(hay in tiny(48), needle in tiny(4), stop in 1usize..6) {
            let want = naive(&hay, &needle);
            let mut seen = Vec::new();
            let n = for_each(&hay, &needle, |o| { seen.push(o); seen.len() < stop });
            prop_assert_eq!(n, want.len().min(stop));
            prop_assert_eq!(&seen[..], &want[..n]);
        }
    }

    #[test]
    fn overlapping_and_periodic_needles() {
        let starts = |h: &str, n: &str| all(h, n).iter().map(|o| o.start).collect::<Vec<_>>();
        assert_eq!(starts("aaaa", "aa"), [0, 1, 2]);
        assert_eq!(starts("abababa", "aba"), [0, 2, 4]);
        assert_eq!(starts("aabaabaab", "aabaab"), [0, 3]);
        assert_eq!(starts("🌍🌍🌍", "🌍🌍"), [0, 1]);
        assert_eq!(starts("xaaay", "aa"), [1, 2]);
        assert_eq!(starts("abc", ""), Vec::<usize>::new());
        assert_eq!(starts("ab", "abc"), Vec::<usize>::new());
    }

    /// Issue 14: `a` x N/2 in `a` x N took 16.8 s at N = 512K; linear, it takes milliseconds.
    /// Generous bounds keep this meaningful in debug builds on a loaded machine.
    #[test]
    fn overlapping_search_is_linear() {
        let n = 512 * 1024;
        let hay = "a".repeat(n);
        let time = |needle: &str| {
            let t0 = Instant::now();
            let c = count(&hay, needle);
            (c, t0.elapsed())
        };
        let (c, t) = time(&"a".repeat(n / 2));
        assert_eq!(c, n / 2 + 1);
        assert!(t < Duration::from_secs(2), "{t:?}");
        // A periodic needle with a long border, and one that almost matches everywhere.
        let (c, t) = time(&"ab".repeat(1000));
        assert_eq!(c, 0);
        assert!(t < Duration::from_secs(2), "{t:?}");
        let hay2 = "ab".repeat(n / 2);
        let t0 = Instant::now();
        assert_eq!(count(&hay2, &"ab".repeat(n / 8)), n / 2 - n / 8 + 1);
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    }
}
