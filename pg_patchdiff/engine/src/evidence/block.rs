//! Block near misses for `match_absent` rejections (issue 17, "Evidence an agent can act on"):
//! for a MATCH text of at least two non-blank lines and at most 4,096 code points, the closest
//! region of the scanned text by a line-level alignment, with its per-line differences.
//!
//! Lines are compared by their normalized text (`whitespace.rs`: spaces and tabs at the ends
//! dropped, inner runs collapsed), so indentation, tab and trailing-space drift never count as a
//! difference; it is reported as the region's whitespace `kinds` instead. Blank lines take no
//! part in the alignment. The first MATCH line also matches a buffer line that ends with it and
//! the last one a line that starts with it, unless a line break precedes (follows) it, as for
//! an exact match.
//!
//! How, in two steps, each bounded:
//!
//! 1. Anchors. Every non-blank MATCH line whose normalized text occurs at most
//!    [`ANCHOR_MAX_OCCURRENCES`] times among the scanned text's lines votes, for each such
//!    occurrence, for the diagonal `buffer line - MATCH line`. (Lines like `}` that occur
//!    everywhere carry no information about where the block is; when every MATCH line is that
//!    common, the least common ones vote, at most [`FALLBACK_VOTES_MAX`] votes.) The diagonal
//!    with the most votes, the first on a tie, is where the block most likely is. No vote at
//!    all: no region.
//! 2. Alignment. A banded edit distance over lines (equal 0, changed 3 when alike and 6 when
//!    not, missing or extra 4), free to start and end anywhere in the band, [`BAND_RADIUS`]
//!    lines either side of that diagonal, at most [`BLOCK_CELLS_MAX`] cells. The region runs
//!    from the first to the last buffer line the alignment uses, whole lines; it is returned
//!    when at least half of the MATCH lines are equal to their line in it.
//!
//! Work is linear in the scanned text (one normalization pass and one hash per line) plus the
//! band, with an interrupt check per line batch and per alignment row.

use super::whitespace::{Drift, Normalized, drift};
use crate::contract::interrupt;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The keys are FNV-1a hashes already: hashing them again (SipHash) would cost more than the
/// per-line work it serves.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type ByHash<V> = HashMap<u64, V, BuildHasherDefault<PassThrough>>;

/// MATCH texts of more code points get no block near miss (`omission_reason:
/// "match_too_large"`).
pub const BLOCK_QUERY_MAX_CHARS: usize = 4_096;

/// A MATCH line that occurs more often than this among the scanned lines casts no vote.
pub const ANCHOR_MAX_OCCURRENCES: usize = 16;

/// When every MATCH line occurs more than [`ANCHOR_MAX_OCCURRENCES`] times, the least common
/// ones still vote if that costs at most this many votes.
pub const FALLBACK_VOTES_MAX: usize = 65_536;

/// Lines either side of the chosen diagonal the alignment may use.
pub const BAND_RADIUS: usize = 32;

/// At most this many alignment cells (MATCH lines times band width); a MATCH text of 4,096
/// code points has at most 2,049 non-blank lines, 133,185 cells.
pub const BLOCK_CELLS_MAX: usize = 1_000_000;

/// One line-level difference between the MATCH text and the region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineDifference {
    /// 1-based line of the MATCH text, or `None` for a region line the MATCH text lacks.
    pub match_line: Option<usize>,
    /// 0-based line of the scanned text, or `None` for a MATCH line the region lacks.
    pub line: Option<usize>,
}

/// The closest region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockRegion {
    /// Byte range in the scanned text: whole lines, with the last line's LF only when the MATCH
    /// text ends with one.
    pub byte_start: usize,
    pub byte_end: usize,
    /// 0-based first and last line in the scanned text.
    pub first_line: usize,
    pub last_line: usize,
    /// Non-blank MATCH lines, and how many of them equal (normalized) their region line.
    pub match_lines: usize,
    pub equal_lines: usize,
    pub changed_lines: usize,
    pub missing_lines: usize,
    pub extra_lines: usize,
    /// Every line difference, in alignment order.
    pub differences: Vec<LineDifference>,
    /// The whitespace drift of the equal lines.
    pub drift: Drift,
}

/// The outcome of one block search.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockSearch {
    pub region: Option<BlockRegion>,
    /// Alignment cells evaluated.
    pub comparison_cells: usize,
}

fn hash(s: &str) -> u64 {
    // FNV-1a: deterministic, and only ever compared, never returned.
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

const DIAG: u8 = 0;
const UP: u8 = 1; // a MATCH line the region lacks
const LEFT: u8 = 2; // a region line the MATCH text lacks

/// Alignment costs. A changed line costs less than a missing plus an extra line, so that one
/// changed line is reported as changed; an unlike changed line costs more than one missing or
/// extra line, so that lines shifted by an insertion are reported as inserted, not as a run of
/// changed lines; a like one (see [`alike`]) costs less, so that a changed first or last line
/// is reported as changed, not as missing, but not so little that a like line plus a missing
/// one beats an unlike changed line in place.
const CHANGED: u32 = 6;
const CHANGED_ALIKE: u32 = 3;
const INDEL: u32 = 4;

/// Two lines are alike when their common prefix and suffix cover at least half of the longer.
fn alike(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let rest = a.len().min(b.len()) - prefix;
    let suffix = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take(rest)
        .take_while(|(x, y)| x == y)
        .count();
    2 * (prefix + suffix) >= a.len().max(b.len())
}

/// The block near miss of `query` (at most [`BLOCK_QUERY_MAX_CHARS`] code points, at least two
/// non-blank lines: the caller checks) in the normalized scanned text `n`.
pub(crate) fn search(n: &Normalized<'_>, query: &str) -> BlockSearch {
    let none = |cells| BlockSearch {
        region: None,
        comparison_cells: cells,
    };
    let q = Normalized::new(query);
    let ql: Vec<usize> = q.content.iter().map(|&i| i as usize).collect();
    let m = ql.len();
    if m == 0 || n.content.is_empty() {
        return none(0);
    }
    let free_first = ql[0] == 0;
    let free_last = ql[m - 1] + 1 == q.lines.len();
    let qnorm: Vec<&str> = ql.iter().map(|&i| q.norm(i)).collect();
    let bl: Vec<usize> = n.content.iter().map(|&i| i as usize).collect();
    let nb = bl.len();
    let bnorm: Vec<&str> = bl.iter().map(|&i| n.norm(i)).collect();

    // 1. Anchors.
    let mut by_hash: ByHash<Vec<usize>> = ByHash::default();
    let qhashes: Vec<u64> = qnorm.iter().map(|s| hash(s)).collect();
    for (i, &h) in qhashes.iter().enumerate() {
        by_hash.entry(h).or_default().push(i);
    }
    let mut occurrences: ByHash<usize> = ByHash::default();
    let mut hashes = Vec::with_capacity(nb);
    let mut ticks = interrupt::Every::new(interrupt::SEARCH_INTERVAL);
    for s in &bnorm {
        ticks.advance(s.len() + 1);
        let h = hash(s);
        if by_hash.contains_key(&h) {
            *occurrences.entry(h).or_default() += 1;
        }
        hashes.push(h);
    }
    // In a text where every MATCH line is common, the least common ones vote, within a bound.
    let limit = match occurrences.values().min() {
        None => return none(0),
        Some(&c) if c <= ANCHOR_MAX_OCCURRENCES => ANCHOR_MAX_OCCURRENCES,
        Some(&c) if c.saturating_mul(m) <= FALLBACK_VOTES_MAX => c,
        Some(_) => return none(0),
    };
    // votes[d + m] for diagonal d = buffer line - MATCH line.
    let mut votes = vec![0u32; nb + m];
    for (j, h) in hashes.iter().enumerate() {
        ticks.tick();
        if occurrences.get(h).is_some_and(|&c| c <= limit)
            && let Some(is) = by_hash.get(h)
        {
            for &i in is {
                if qnorm[i] == bnorm[j] {
                    votes[j + m - i] += 1;
                }
            }
        }
    }
    let Some((best, _)) = votes
        .iter()
        .enumerate()
        .filter(|(_, v)| **v > 0)
        .max_by_key(|&(d, v)| (*v, std::cmp::Reverse(d)))
    else {
        return none(0);
    };
    let diag = best as i64 - m as i64;

    // 2. Banded alignment: row i (MATCH lines consumed), column c in 0..w for buffer line
    //    j = i + diag - r + c (lines consumed).
    let r = BAND_RADIUS as i64;
    let w = (2 * BAND_RADIUS + 1).min(BLOCK_CELLS_MAX / (m + 1)).max(1);
    let r = r.min((w / 2) as i64);
    let col_j = |i: usize, c: usize| i as i64 + diag - r + c as i64;
    let equal = |i: usize, j: usize| {
        let (a, b) = (qnorm[i], bnorm[j]);
        // Unequal hashes are unequal lines: most cells never compare text.
        (qhashes[i] == hashes[j] && a == b)
            || (i == 0 && free_first && b.ends_with(a))
            || (i == m - 1 && free_last && b.starts_with(a))
    };
    const INF: u32 = u32::MAX / 2;
    let mut prev = vec![INF; w];
    let mut cur = vec![INF; w];
    let mut from = vec![0u8; (m + 1) * w];
    let mut cells = 0usize;
    // Row 0: the region may start at any line of the band.
    for (c, p) in prev.iter_mut().enumerate() {
        let j = col_j(0, c);
        if (0..=nb as i64).contains(&j) {
            *p = 0;
        }
    }
    for i in 1..=m {
        interrupt::check();
        for c in 0..w {
            cur[c] = INF;
            let j = col_j(i, c);
            if !(0..=nb as i64).contains(&j) {
                continue;
            }
            let j = j as usize;
            cells += 1;
            // Same column on the row above is the diagonal (j - 1 there is j - 1 here).
            let mut best = (INF, DIAG);
            if j >= 1 && prev[c] < INF {
                let cost = if equal(i - 1, j - 1) {
                    0
                } else if alike(qnorm[i - 1], bnorm[j - 1]) {
                    CHANGED_ALIKE
                } else {
                    CHANGED
                };
                best = (prev[c] + cost, DIAG);
            }
            // One column right on the row above is the same j: a MATCH line the region lacks.
            if c + 1 < w && prev[c + 1] + INDEL < best.0 {
                best = (prev[c + 1] + INDEL, UP);
            }
            // One column left on this row is j - 1: a region line the MATCH text lacks.
            if c >= 1 && cur[c - 1] + INDEL < best.0 {
                best = (cur[c - 1] + INDEL, LEFT);
            }
            cur[c] = best.0;
            from[i * w + c] = best.1;
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    let Some((end_c, _)) = prev
        .iter()
        .enumerate()
        .filter(|(_, d)| **d < INF)
        .min_by_key(|&(c, d)| (*d, c))
    else {
        return none(cells);
    };

    // Traceback.
    let (mut i, mut c) = (m, end_c);
    let mut ops: Vec<(u8, usize, usize)> = Vec::new(); // (op, MATCH line, buffer line)
    while i > 0 {
        let j = col_j(i, c) as usize;
        match from[i * w + c] {
            DIAG => {
                ops.push((DIAG, i - 1, j - 1));
                i -= 1;
            }
            UP => {
                ops.push((UP, i - 1, j));
                i -= 1;
                c += 1;
            }
            _ => {
                ops.push((LEFT, i, j - 1));
                c -= 1;
            }
        }
    }
    ops.reverse();
    // Extra region lines before the first or after the last MATCH line are not part of it.
    let lo = ops.iter().position(|o| o.0 != LEFT).unwrap_or(0);
    let hi = ops.iter().rposition(|o| o.0 != LEFT).map_or(0, |h| h + 1);
    let ops = &ops[lo..hi.max(lo)];
    let mut region = BlockRegion {
        byte_start: 0,
        byte_end: 0,
        first_line: 0,
        last_line: 0,
        match_lines: m,
        equal_lines: 0,
        changed_lines: 0,
        missing_lines: 0,
        extra_lines: 0,
        differences: Vec::new(),
        drift: Drift::default(),
    };
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    let qline = |i: usize| {
        let l = &q.lines[ql[i]];
        &query[l.start..l.end]
    };
    let bline = |j: usize| {
        let l = &n.lines[bl[j]];
        &n.src[l.start..l.end]
    };
    let mut first_used = None;
    let mut last_used = None;
    for &(op, i, j) in ops {
        match op {
            DIAG if equal(i, j) => {
                region.equal_lines += 1;
                pairs.push((qline(i), bline(j)));
            }
            DIAG => {
                region.changed_lines += 1;
                region.differences.push(LineDifference {
                    match_line: Some(ql[i] + 1),
                    line: Some(bl[j]),
                });
            }
            UP => {
                region.missing_lines += 1;
                region.differences.push(LineDifference {
                    match_line: Some(ql[i] + 1),
                    line: None,
                });
            }
            _ => {
                region.extra_lines += 1;
                region.differences.push(LineDifference {
                    match_line: None,
                    line: Some(bl[j]),
                });
            }
        }
        if op != UP {
            first_used.get_or_insert(j);
            last_used = Some(j);
        }
    }
    if region.equal_lines * 2 < m {
        return none(cells);
    }
    let (Some(first), Some(last)) = (first_used, last_used) else {
        return none(cells);
    };
    region.first_line = bl[first];
    region.last_line = bl[last];
    // Blank lines inside the region against the MATCH text's inside its non-blank lines.
    let inner_blank = |lines: &[super::whitespace::Line], from: usize, to: usize| {
        (from..=to)
            .filter(|&k| lines[k].norm_end == lines[k].norm_start)
            .count()
    };
    let blank_differ = region.missing_lines == 0
        && region.extra_lines == 0
        && inner_blank(&q.lines, ql[0], ql[m - 1])
            != inner_blank(&n.lines, region.first_line, region.last_line);
    region.drift = drift(&pairs, blank_differ);
    region.byte_start = n.lines[region.first_line].start;
    let end_line = &n.lines[region.last_line];
    region.byte_end = if !free_last && end_line.end < n.src.len() {
        end_line.end + 1
    } else {
        end_line.end
    };
    if n.src[region.byte_start..region.byte_end].contains(query) {
        // The MATCH text itself (refused in a narrower scope than this text) is not a near miss.
        return none(cells);
    }
    BlockSearch {
        region: Some(region),
        comparison_cells: cells,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(buf: &str, q: &str) -> Option<(String, BlockRegion)> {
        let n = Normalized::new(buf);
        search(&n, q)
            .region
            .map(|r| (buf[r.byte_start..r.byte_end].to_owned(), r))
    }

    fn code(lines: usize) -> String {
        (0..lines)
            .map(|i| format!("    let value_{i} = compute({i}, \"item {i}\");\n"))
            .collect()
    }

    /// A 30-line block with one changed line and indentation drift: the closest region, whole
    /// lines, with that one line as the only difference.
    #[test]
    fn one_changed_line_in_a_drifted_block() {
        let buf = format!("fn main() {{\n{}}}\n", code(200));
        let want: String = code(200)
            .lines()
            .skip(50)
            .take(30)
            .map(|l| format!("{l}\n"))
            .collect();
        let sent = want
            .lines()
            .map(|l| l.trim_start().to_owned())
            .map(|l| l.replace("value_60 ", "value_sixty "))
            .collect::<Vec<_>>()
            .join("\n");
        let (text, r) = region(&buf, &sent).expect("a region");
        assert_eq!(text, want.trim_end_matches('\n'));
        assert_eq!(
            (
                r.equal_lines,
                r.changed_lines,
                r.missing_lines,
                r.extra_lines
            ),
            (29, 1, 0, 0)
        );
        assert_eq!(
            r.differences,
            vec![LineDifference {
                match_line: Some(11),
                line: Some(61)
            }]
        );
        assert_eq!(r.drift.kinds, vec!["indentation"]);
        assert_eq!(r.drift.indentation_delta, Some(4));
    }

    #[test]
    fn missing_and_extra_lines() {
        let buf = "a1\nb2\nc3\nX\nd4\ne5\n";
        let (text, r) = region(buf, "a1\nb2\nc3\nd4\nQ\ne5\n").unwrap();
        assert_eq!(text, "a1\nb2\nc3\nX\nd4\ne5\n");
        assert_eq!((r.equal_lines, r.extra_lines, r.missing_lines), (5, 1, 1));
    }

    /// A changed last line like the one in the text is reported as changed, not as missing.
    #[test]
    fn a_changed_last_line_is_changed() {
        let buf = "class A:\n    def f(self):\n        return 1\n        x = 2\n";
        let (text, r) = region(buf, "def f(self):\n    return 1\n    x = 3").unwrap();
        assert_eq!(text, "    def f(self):\n        return 1\n        x = 2");
        assert_eq!((r.equal_lines, r.changed_lines, r.missing_lines), (2, 1, 0));
    }

    #[test]
    fn nothing_close_is_no_region() {
        assert!(region("a\nb\nc\n", "x\ny\nz").is_none());
        assert!(region("a\nb\nc\nd\n", "a\nx\ny\nz").is_none());
    }
}
