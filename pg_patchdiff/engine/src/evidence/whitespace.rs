//! Whitespace-insensitive candidates for `match_absent` rejections (issue 17, "Evidence an
//! agent can act on"): where the MATCH text exists once whitespace is normalized, the exact
//! current text of each such region, its code-point span and what differed.
//!
//! Normalization, the one definition everything here rests on: split at LF; in each line drop
//! leading and trailing spaces and tabs and collapse every inner run of them to one space; drop
//! the lines left empty (blank lines); join what is left with LF. A region qualifies when its
//! normalized text equals the normalized MATCH text. Like an exact match, the MATCH text may
//! start inside a line and end inside one: its first line may match the end of a buffer line and
//! its last line the start of one, unless the MATCH text has a line break before its first (after
//! its last) non-blank line, which then must be a whole line. So the search is one substring
//! search of the normalized MATCH text in the normalized buffer, with those two boundary rules,
//! and a byte map back to the buffer.
//!
//! A region is widened over the indentation in front of it (when only spaces and tabs precede it
//! on its line), so that a uniform indentation delta covers its first line too, and over the
//! trailing spaces after it when the MATCH text's last line ends with some. Widening only adds
//! whitespace, so the region still normalizes to the MATCH text.
//!
//! A region that holds the MATCH text itself is never a candidate (that happens only when the
//! MATCH text was searched in a narrower scope than the scanned text).
//!
//! Nothing is ever applied: these are evidence, the agent resends the exact text.

use crate::contract::interrupt;
use crate::text::occurrence;

/// At most this many normalized occurrences are collected and ranked; more set
/// `candidates_truncated` (the list is then a ranking of the first ones in buffer order).
pub const WHITESPACE_OCCURRENCES_MAX: usize = 64;

/// At most this many candidates are returned (as many as near misses).
pub const WHITESPACE_CANDIDATES_MAX: usize = 3;

/// Tab widths tried, in order, for a uniform indentation delta when tabs are involved.
pub const TAB_WIDTHS: [usize; 3] = [4, 8, 2];

#[inline]
pub(crate) fn is_ws(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// One line of the scanned text.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Line {
    /// Byte range of the line, without its LF.
    pub start: usize,
    pub end: usize,
    /// Code-point offset of `start` in the scanned text.
    pub cp: usize,
    /// Byte range of the line's normalized text in `Normalized::text`; empty for a blank line.
    pub norm_start: usize,
    pub norm_end: usize,
}

/// The scanned text, normalized, with the way back.
pub(crate) struct Normalized<'a> {
    pub src: &'a str,
    pub lines: Vec<Line>,
    /// The normalized text: non-blank lines, normalized, joined with LF.
    pub text: String,
    /// For each byte of `text`, the byte of `src` it came from (a collapsed run maps to its
    /// first byte, a joining LF to the LF that ends the line before it).
    pub map: Vec<u32>,
    /// Indexes into `lines` of the non-blank lines, in order.
    pub content: Vec<u32>,
}

impl<'a> Normalized<'a> {
    pub fn new(src: &'a str) -> Self {
        let bytes = src.as_bytes();
        let mut lines = Vec::new();
        let mut text = String::with_capacity(src.len());
        let mut map: Vec<u32> = Vec::with_capacity(src.len());
        let mut content = Vec::new();
        let mut ticks = interrupt::Every::new(interrupt::SEARCH_INTERVAL);
        let mut start = 0usize;
        let mut cp = 0usize;
        loop {
            let end = memchr::memchr(b'\n', &bytes[start..]).map_or(bytes.len(), |i| start + i);
            let line = &bytes[start..end];
            ticks.advance(line.len() + 1);
            let mut norm_start = text.len();
            let mut emitted = false;
            let mut pending: Option<usize> = None;
            let mut i = line.iter().position(|&b| !is_ws(b)).unwrap_or(line.len());
            while i < line.len() {
                // A run of non-blank bytes (cut only at ASCII spaces and tabs, so at code-point
                // boundaries), then the blank run after it.
                let run = line[i..]
                    .iter()
                    .position(|&b| is_ws(b))
                    .map_or(line.len(), |k| i + k);
                if !emitted {
                    if !content.is_empty() {
                        // The LF joining this line to the previous non-blank one.
                        text.push('\n');
                        map.push((start - 1) as u32);
                    }
                    norm_start = text.len();
                    emitted = true;
                }
                if let Some(p) = pending.take() {
                    text.push(' ');
                    map.push(p as u32);
                }
                text.push_str(&src[start + i..start + run]);
                map.extend((start + i..start + run).map(|k| k as u32));
                let blank = line[run..]
                    .iter()
                    .position(|&b| !is_ws(b))
                    .map_or(line.len(), |k| run + k);
                if blank < line.len() {
                    pending = Some(start + run);
                }
                i = blank;
            }
            let norm_end = if emitted { text.len() } else { norm_start };
            if emitted {
                content.push(lines.len() as u32);
            }
            let chars = line.iter().filter(|&&b| (b as i8) >= -0x40).count();
            lines.push(Line {
                start,
                end,
                cp,
                norm_start: if emitted { norm_start } else { 0 },
                norm_end: if emitted { norm_end } else { 0 },
            });
            cp += chars + 1;
            if end == bytes.len() {
                break;
            }
            start = end + 1;
        }
        Normalized {
            src,
            lines,
            text,
            map,
            content,
        }
    }

    /// The index of the line holding byte `b` of `src`.
    pub fn line_of(&self, b: usize) -> usize {
        self.lines.partition_point(|l| l.start <= b) - 1
    }

    /// The code-point offset of byte `b` of `src` (a char boundary).
    pub fn cp_of(&self, b: usize) -> usize {
        let l = &self.lines[self.line_of(b)];
        l.cp + self.src[l.start..b].chars().count()
    }

    /// The normalized text of line `i` (empty for a blank line).
    pub fn norm(&self, i: usize) -> &str {
        let l = &self.lines[i];
        &self.text[l.norm_start..l.norm_end]
    }
}

/// `s` normalized: the definition in the module comment.
pub fn normalize(s: &str) -> String {
    Normalized::new(s).text
}

/// Leading spaces and tabs of a line, the rest trimmed, and its trailing spaces and tabs.
pub(crate) fn split_ws(line: &str) -> (&str, &str, &str) {
    let lead = line.len() - line.trim_start_matches([' ', '\t']).len();
    let body = &line[lead..];
    let core = body.trim_end_matches([' ', '\t']);
    (&line[..lead], core, &body[core.len()..])
}

/// What differs between `expected` (MATCH text) and `current` (buffer text) that both normalize
/// to the same text: the `kinds` of difference and, where every compared line's indentation
/// moved by the same number of columns, that delta.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Drift {
    /// In this order, those present: `indentation`, `tabs_spaces`, `trailing_space`,
    /// `inner_whitespace`, `blank_lines`.
    pub kinds: Vec<&'static str>,
    /// Current minus expected indentation, in columns, when the same for every compared line.
    pub indentation_delta: Option<i64>,
    /// The tab width the delta was counted with, when a tab is involved.
    pub tab_width: Option<usize>,
}

/// Indentation width in columns, a tab advancing to the next multiple of `tab`.
fn width(indent: &str, tab: usize) -> usize {
    indent.bytes().fold(0, |col, b| {
        if b == b'\t' {
            (col / tab + 1) * tab
        } else {
            col + 1
        }
    })
}

/// The drift over aligned line pairs `(expected, current)` whose normalized texts are equal,
/// plus whether the blank-line structure differed.
pub(crate) fn drift<'x>(pairs: &[(&'x str, &'x str)], blank_lines_differ: bool) -> Drift {
    let mut kinds = Vec::new();
    let indents: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(a, b)| (split_ws(a).0, split_ws(b).0))
        .collect();
    let moved = indents.iter().any(|(a, b)| a != b);
    let has_tab = indents
        .iter()
        .any(|(a, b)| a.contains('\t') || b.contains('\t'));
    // Tabs where the other side has spaces: both indented, with different numbers of tabs.
    let tabs = |s: &str| s.bytes().filter(|&b| b == b'\t').count();
    let tabs_spaces = indents
        .iter()
        .any(|(a, b)| !a.is_empty() && !b.is_empty() && tabs(a) != tabs(b));
    let mut delta = None;
    let mut tab_width = None;
    let widths: &[usize] = if has_tab { &TAB_WIDTHS } else { &[1] };
    for &w in widths {
        let mut ds = indents
            .iter()
            .map(|(a, b)| width(b, w) as i64 - width(a, w) as i64);
        let first = ds.next().unwrap_or(0);
        if ds.all(|d| d == first) {
            delta = Some(first);
            tab_width = has_tab.then_some(w);
            break;
        }
    }
    // Moved, and not only by writing the same width with tabs instead of spaces.
    if moved && (delta != Some(0) || !tabs_spaces) {
        kinds.push("indentation");
    }
    if tabs_spaces {
        kinds.push("tabs_spaces");
    }
    if pairs.iter().any(|(a, b)| split_ws(a).2 != split_ws(b).2) {
        kinds.push("trailing_space");
    }
    if pairs.iter().any(|(a, b)| split_ws(a).1 != split_ws(b).1) {
        kinds.push("inner_whitespace");
    }
    if blank_lines_differ {
        kinds.push("blank_lines");
    }
    Drift {
        kinds,
        indentation_delta: delta,
        tab_width,
    }
}

/// A text's non-blank lines, the counts of blank lines before, between and after them, and the
/// blank lines themselves.
type Shape<'s> = (Vec<&'s str>, Vec<usize>, Vec<&'s str>);

fn shape(s: &str) -> Shape<'_> {
    let mut content = Vec::new();
    let mut blanks = vec![0usize];
    let mut blank_text = Vec::new();
    for l in s.split('\n') {
        if l.bytes().all(is_ws) {
            *blanks.last_mut().expect("never empty") += 1;
            blank_text.push(l);
        } else {
            content.push(l);
            blanks.push(0);
        }
    }
    (content, blanks, blank_text)
}

/// The drift between two texts that normalize alike: their non-blank lines pair up in order;
/// blank lines (whitespace only) differ when their counts between, before or after the
/// non-blank lines differ, and count as `trailing_space` when only their spaces differ.
pub fn text_drift(expected: &str, current: &str) -> Drift {
    let (qc, qb, qt) = shape(expected);
    let (rc, rb, rt) = shape(current);
    let pairs: Vec<(&str, &str)> = qc.iter().copied().zip(rc.iter().copied()).collect();
    let mut d = drift(&pairs, qb != rb);
    if qb == rb && qt != rt && !d.kinds.contains(&"trailing_space") {
        d.kinds.insert(
            d.kinds
                .iter()
                .position(|k| *k == "inner_whitespace" || *k == "blank_lines")
                .unwrap_or(d.kinds.len()),
            "trailing_space",
        );
    }
    d
}

/// One whitespace-insensitive candidate, in coordinates of the scanned text (code points).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WsCandidate {
    pub start: usize,
    pub end: usize,
    /// Byte range in the scanned text.
    pub byte_start: usize,
    pub byte_end: usize,
    /// 0-based line indexes of the region's first and last line in the scanned text.
    pub first_line: usize,
    pub last_line: usize,
    pub drift: Drift,
}

/// The candidates: at most three, ranked by how many MATCH lines differ from their region
/// (then by start), pairwise non-overlapping; and whether more qualified.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WsCandidates {
    pub candidates: Vec<WsCandidate>,
    pub candidates_truncated: bool,
}

/// The whitespace-insensitive candidates of `query` in the normalized scanned text.
pub(crate) fn candidates(n: &Normalized<'_>, query: &str) -> WsCandidates {
    let q = Normalized::new(query);
    if q.text.is_empty() {
        return WsCandidates::default();
    }
    let qfirst = q.content[0] as usize;
    let qlast = *q.content.last().expect("non-empty") as usize;
    // A line break before the first non-blank MATCH line makes it a whole line; likewise after.
    let whole_first = qfirst > 0;
    let whole_last = qlast + 1 < q.lines.len();
    let last_has_trailing = {
        let l = &q.lines[qlast];
        query.as_bytes()[l.start..l.end]
            .last()
            .is_some_and(|&b| is_ws(b))
    };
    let hay = n.text.as_bytes();
    let mut found: Vec<(usize, WsCandidate)> = Vec::new();
    let mut more = false;
    // Every occurrence, overlapping ones included, in one linear pass ([`occurrence::for_each`]):
    // restarting a substring search one byte after each hit re-read the needle per hit, which on
    // periodic text (a MATCH of a line break and 32,768 `a` in 65,536 `a`) took 1.4 s a
    // rejection (helper-73). The occurrences that are the MATCH text itself (below) count
    // against a cap of their own, since each costs a search of its region.
    let mut itself = 0usize;
    occurrence::for_each(&n.text, &q.text, |o| {
        let (s, e) = (o.byte_start, o.byte_end);
        if (whole_first && s > 0 && hay[s - 1] != b'\n')
            || (whole_last && e < hay.len() && hay[e] != b'\n')
        {
            return true;
        }
        if found.len() == WHITESPACE_OCCURRENCES_MAX || itself == WHITESPACE_OCCURRENCES_MAX {
            more = true;
            return false;
        }
        let mut bs = n.map[s] as usize;
        let mut be = n.map[e - 1] as usize + 1;
        let first_line = n.line_of(bs);
        let last_line = n.line_of(be - 1);
        let fl = &n.lines[first_line];
        if n.src.as_bytes()[fl.start..bs].iter().all(|&b| is_ws(b)) {
            bs = fl.start;
        }
        let ll = &n.lines[last_line];
        if last_has_trailing && n.src.as_bytes()[be..ll.end].iter().all(|&b| is_ws(b)) {
            be = ll.end;
        }
        let region = &n.src[bs..be];
        if region.contains(query) {
            // The MATCH text itself (possible only when it was searched in a narrower scope
            // than this text): that is not drift.
            itself += 1;
            return true;
        }
        let drift = text_drift(query, region);
        let cost = pair_cost(query, region);
        found.push((
            cost,
            WsCandidate {
                start: n.cp_of(bs),
                end: n.cp_of(be),
                byte_start: bs,
                byte_end: be,
                first_line,
                last_line,
                drift,
            },
        ));
        true
    });
    found.sort_by_key(|(cost, c)| (*cost, c.start, c.end));
    let mut picked: Vec<WsCandidate> = Vec::new();
    for (_, c) in found {
        if picked
            .iter()
            .any(|p| c.byte_start < p.byte_end && p.byte_start < c.byte_end)
        {
            continue;
        }
        if picked.len() == WHITESPACE_CANDIDATES_MAX {
            more = true;
            break;
        }
        picked.push(c);
    }
    WsCandidates {
        candidates: picked,
        candidates_truncated: more,
    }
}

/// How many lines of the MATCH text differ from the region's (the non-blank ones paired in
/// order, plus the difference in line count): fewer is closer to what the agent sent.
fn pair_cost(expected: &str, current: &str) -> usize {
    let (a, b) = (shape(expected).0, shape(current).0);
    let differing = a.iter().zip(&b).filter(|(x, y)| x != y).count();
    differing
        + expected
            .split('\n')
            .count()
            .abs_diff(current.split('\n').count())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(buf: &str, q: &str) -> Vec<(String, Vec<&'static str>, Option<i64>)> {
        let n = Normalized::new(buf);
        candidates(&n, q)
            .candidates
            .into_iter()
            .map(|c| {
                (
                    buf[c.byte_start..c.byte_end].to_owned(),
                    c.drift.kinds,
                    c.drift.indentation_delta,
                )
            })
            .collect()
    }

    #[test]
    fn normalizes_lines_runs_and_blanks() {
        assert_eq!(normalize("  a \t b  \n\n\t\n  c"), "a b\nc");
        assert_eq!(normalize(" \n\t "), "");
        assert_eq!(normalize("é  ü\n"), "é ü");
        let n = Normalized::new("x\n  ab  c\n\n d");
        assert_eq!(n.text, "x\nab c\nd");
        assert_eq!(n.content, vec![0, 1, 3]);
        // Every normalized byte maps to an equal byte, or a space/LF to a space/tab/LF.
        for (i, &b) in n.text.as_bytes().iter().enumerate() {
            let o = n.src.as_bytes()[n.map[i] as usize];
            assert!(o == b || (b == b' ' && is_ws(o)) || (b == b'\n' && o == b'\n'));
        }
    }

    /// A Python block sent one level less indented: the whole region, indentation included,
    /// with a uniform +4 delta.
    #[test]
    fn python_block_one_level_less() {
        let buf =
            "class A:\n    def f(self):\n        return 1\n\n    def g(self):\n        pass\n";
        let got = find(buf, "def f(self):\n    return 1");
        assert_eq!(
            got,
            vec![(
                "    def f(self):\n        return 1".to_owned(),
                vec!["indentation"],
                Some(4)
            )]
        );
    }

    /// A Makefile recipe sent with spaces where the file has a tab.
    #[test]
    fn makefile_spaces_for_tab() {
        let buf = "all: app\n\napp: main.o\n\t$(CC) -o app main.o\n\tstrip app\n";
        let got = find(buf, "app: main.o\n    $(CC) -o app main.o\n    strip app\n");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, "app: main.o\n\t$(CC) -o app main.o\n\tstrip app");
        assert_eq!(got[0].1, vec!["tabs_spaces", "blank_lines"]);
        assert_eq!(got[0].2, Some(0));
    }

    #[test]
    fn trailing_spaces_and_inner_runs() {
        let buf = "let x = 1;   \nlet y  =  2;\n";
        let got = find(buf, "let x = 1;\nlet y = 2;");
        assert_eq!(got[0].0, "let x = 1;   \nlet y  =  2;");
        assert_eq!(got[0].1, vec!["trailing_space", "inner_whitespace"]);
    }

    /// A MATCH that starts mid-line may match the end of a line, unless it starts with a line
    /// break; a region never comes back for text absent after normalization.
    #[test]
    fn boundaries_follow_exact_match_rules() {
        let buf = "abc = 1\n  y\n";
        assert_eq!(find(buf, "c = 1\ny").len(), 1);
        assert!(find(buf, "\nc = 1\ny").is_empty());
        assert!(find(buf, "c = 2\ny").is_empty());
        assert!(find(buf, "   ").is_empty());
    }

    /// An exact occurrence (a MATCH text refused in a narrower scope) is not drift.
    #[test]
    fn exact_occurrences_are_not_candidates() {
        assert!(find("a = 1\n    BATCH = 64\n", "BATCH = 64").is_empty());
        assert!(find("x\n  y\nz", "x\n  y").is_empty());
    }

    #[test]
    fn at_most_three_ranked_non_overlapping() {
        let buf = "  }\n}\n\t}\n    }\n";
        let n = Normalized::new(buf);
        let c = candidates(&n, " }\n  }");
        assert_eq!(c.candidates.len(), 2);
        assert!(!c.candidates_truncated);
        let c = candidates(&Normalized::new(&" x\n".repeat(10)), "x\n x  ");
        assert_eq!(c.candidates.len(), 3);
        assert!(c.candidates_truncated);
    }

    #[test]
    fn tab_width_and_uniform_delta() {
        // Rust sent with tabs where the file has four spaces per level.
        let d = text_drift(
            "\tfn a() {\n\t\tb();\n\t}",
            "    fn a() {\n        b();\n    }",
        );
        assert_eq!(d.kinds, vec!["tabs_spaces"]);
        assert_eq!((d.indentation_delta, d.tab_width), (Some(0), Some(4)));
        let d = text_drift("a:\n  b: 1\n  c: 2", "a:\n    b: 1\n   c: 2");
        assert_eq!(d.kinds, vec!["indentation"]);
        assert_eq!(d.indentation_delta, None);
    }

    /// helper-73 F3: the candidates are found in one linear pass over overlapping occurrences.
    /// Periodic text with a MATCH that must start a line: every occurrence but the first fails
    /// the line test, and the search used to restart one byte after each (1.4 s for 32,768
    /// occurrences of 32 KiB). Same answer, and the search checks for interrupts.
    #[test]
    fn periodic_text_is_searched_once() {
        let buf = "a".repeat(65_536);
        let q = format!("\n{}", "a".repeat(32_768));
        // The MATCH's leading line break makes its first line a whole line: only the occurrence
        // at the start of the text qualifies.
        let got = find(&buf, &q);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0.len(), 32_768);
        // Every occurrence is still a candidate: "x  y" twice.
        let pair = ("x  y".to_owned(), vec!["inner_whitespace"], Some(0));
        assert_eq!(find("x  y x  y\n", "x y"), [pair.clone(), pair]);
        assert!(crate::contract::interrupt::testing::interrupted_after(
            3,
            || find(&buf, &q)
        ));
    }
}
