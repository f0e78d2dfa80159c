//! Incremental outlines (issue 21, item 2): the parser helper keeps the syntax tree of the last
//! texts it parsed, each under an opaque lineage (the backend sends the target's id), and parses
//! the next text of the same lineage by editing the kept tree and reparsing with it, so an
//! observation right after a commit does not parse the whole file again.
//!
//! The edits are not trusted from anyone: they are computed here, from the kept text and the new
//! one ([`diff`]), and any list of edits that turns the one into the other is correct; a poor
//! list only costs time. So a rolled-back commit, a version made by another backend, or an
//! older version asked for again can cost a fresh parse's time at worst, never a wrong outline.
//!
//! The result equals [`crate::outline`] of the same text (property tests in
//! `tests/incremental.rs`). To keep it so, only trees without syntax errors are kept and
//! reused, and an incremental tree with errors is thrown away for a fresh parse: error recovery
//! is where an incremental parse may choose differently from a fresh one. TypeScript's `tsx`
//! fallback is never kept (deciding it needs a fresh `typescript` parse anyway).

use crate::common::{Collector, Raw};
use crate::{Language, ParserLimit, fresh_tree, parse, tree_sitter_language};
use patchdiff_engine::api::scope::Outline;
use tree_sitter::{InputEdit, Point, Tree};

/// One changed range: old bytes `old.0..old.1` became new bytes `new.0..new.1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    pub old: (usize, usize),
    pub new: (usize, usize),
}

/// Bytes compared by [`diff`]'s anchor matching, and how far apart the two sides of one change
/// may differ in length before the search window has to grow to find them.
const ANCHOR: usize = 32;
const SLACK: usize = 64;
/// At most this many changes, and anchor searches over at most this many bytes per byte of text;
/// past either, the rest of the text is one change (still correct, just less to reuse).
const MAX_CHANGES: usize = 20_000;
const SEARCH_PER_BYTE: usize = 8;

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    const C: usize = 64;
    let n = a.len().min(b.len());
    let mut k = 0;
    while k + C <= n && a[k..k + C] == b[k..k + C] {
        k += C;
    }
    while k < n && a[k] == b[k] {
        k += 1;
    }
    k
}

fn common_suffix(a: &[u8], b: &[u8]) -> usize {
    const C: usize = 64;
    let n = a.len().min(b.len());
    let (la, lb) = (a.len(), b.len());
    let mut k = 0;
    while k + C <= n && a[la - k - C..la - k] == b[lb - k - C..lb - k] {
        k += C;
    }
    while k < n && a[la - k - 1] == b[lb - k - 1] {
        k += 1;
    }
    k
}

/// Changes, in ascending order and not overlapping, that turn `old` into `new`: everything
/// between two changes is equal in both. Every boundary is a UTF-8 character boundary of both.
/// Linear time: the common parts are compared in blocks, and after a difference a 32-byte
/// anchor of one side is looked for in a doubling window of the other.
pub fn diff(old: &str, new: &str) -> Vec<Change> {
    let (a, b) = (old.as_bytes(), new.as_bytes());
    let suffix = common_suffix(a, b);
    let (mut a_end, mut b_end) = (a.len() - suffix, b.len() - suffix);
    // The common tail begins at a character boundary of both (its bytes are equal in both).
    while !old.is_char_boundary(a_end) {
        a_end += 1;
        b_end += 1;
    }
    let mut budget = SEARCH_PER_BYTE * (a.len() + b.len()) + (1 << 20);
    let mut changes = Vec::new();
    let (mut i, mut j) = (0usize, 0usize);
    loop {
        let k = common_prefix(&a[i..a_end], &b[j..b_end]);
        i += k;
        j += k;
        // Back to a character boundary (the bytes before are equal in both, so the boundary is
        // at the same distance in both).
        while !old.is_char_boundary(i) {
            i -= 1;
            j -= 1;
        }
        if i == a_end && j == b_end {
            break;
        }
        let rest = Change {
            old: (i, a_end),
            new: (j, b_end),
        };
        if i == a_end || j == b_end || changes.len() + 1 >= MAX_CHANGES {
            changes.push(rest);
            break;
        }
        let Some((mut i2, mut j2)) = resync(a, b, (i, a_end), (j, b_end), &mut budget) else {
            changes.push(rest);
            break;
        };
        // The match may begin earlier than the anchor: give back what is equal.
        while i2 > i && j2 > j && a[i2 - 1] == b[j2 - 1] {
            i2 -= 1;
            j2 -= 1;
        }
        // Forward to a character boundary (bytes from i2 on are equal in both).
        while !old.is_char_boundary(i2) || !new.is_char_boundary(j2) {
            i2 += 1;
            j2 += 1;
        }
        changes.push(Change {
            old: (i, i2),
            new: (j, j2),
        });
        i = i2;
        j = j2;
    }
    changes
}

/// After a difference at `a[i]` / `b[j]`: the nearest pair of positions from which the two
/// sides agree for [`ANCHOR`] bytes, or `None` when there is none or the search budget is spent.
fn resync(
    a: &[u8],
    b: &[u8],
    (i, a_end): (usize, usize),
    (j, b_end): (usize, usize),
    budget: &mut usize,
) -> Option<(usize, usize)> {
    let finder = |hay: &[u8], needle: &[u8]| memchr::memmem::find(hay, needle);
    let mut s = 1usize;
    loop {
        let mut best: Option<(usize, usize)> = None;
        let mut tried = false;
        // An anchor of the old side, looked for in the new one, and the reverse.
        if i + s + ANCHOR <= a_end {
            tried = true;
            let hay = &b[j..b_end.min(j + s + SLACK + ANCHOR)];
            *budget = budget.checked_sub(hay.len())?;
            if let Some(at) = finder(hay, &a[i + s..i + s + ANCHOR]) {
                best = Some((i + s, j + at));
            }
        }
        if j + s + ANCHOR <= b_end {
            tried = true;
            let hay = &a[i..a_end.min(i + s + SLACK + ANCHOR)];
            *budget = budget.checked_sub(hay.len())?;
            if let Some(at) = finder(hay, &b[j + s..j + s + ANCHOR])
                && best.is_none_or(|(bi, bj)| (i + at) + (j + s) < bi + bj)
            {
                best = Some((i + at, j + s));
            }
        }
        if best.is_some() || !tried {
            return best;
        }
        s *= 2;
    }
}

/// Row and column (in bytes) of ascending positions of one text.
struct Points<'a> {
    text: &'a [u8],
    at: usize,
    row: usize,
    line_start: usize,
}

impl Points<'_> {
    fn of(&mut self, pos: usize) -> Point {
        debug_assert!(pos >= self.at);
        let seg = &self.text[self.at..pos];
        self.row += memchr::memchr_iter(b'\n', seg).count();
        if let Some(nl) = memchr::memrchr(b'\n', seg) {
            self.line_start = self.at + nl + 1;
        }
        self.at = pos;
        Point::new(self.row, pos - self.line_start)
    }
}

/// The point `bytes` past `start`.
fn advance(start: Point, bytes: &[u8]) -> Point {
    match memchr::memrchr(b'\n', bytes) {
        None => Point::new(start.row, start.column + bytes.len()),
        Some(nl) => Point::new(
            start.row + memchr::memchr_iter(b'\n', bytes).count(),
            bytes.len() - nl - 1,
        ),
    }
}

/// The `Tree::edit` calls for `changes`, applied in order: each in the coordinates of the text
/// after the ones before it.
pub fn input_edits(old: &str, new: &str, changes: &[Change]) -> Vec<InputEdit> {
    let mut points = Points {
        text: new.as_bytes(),
        at: 0,
        row: 0,
        line_start: 0,
    };
    changes
        .iter()
        .map(|c| {
            let start_position = points.of(c.new.0);
            InputEdit {
                start_byte: c.new.0,
                old_end_byte: c.new.0 + (c.old.1 - c.old.0),
                new_end_byte: c.new.1,
                start_position,
                old_end_position: advance(start_position, &old.as_bytes()[c.old.0..c.old.1]),
                new_end_position: points.of(c.new.1),
            }
        })
        .collect()
}

struct Held {
    lineage: Vec<u8>,
    language: Language,
    text: String,
    /// A tree of `tree_sitter_language(language)` without syntax errors.
    tree: Tree,
    /// The outline's symbols before conversion, in document order, and the byte ranges of the
    /// root's children, for the languages whose outline is reused per root child (Python).
    reuse: Option<Reuse>,
}

/// An outline's symbols before conversion, in document order, and the byte ranges of the root's
/// children.
type Reuse = (Vec<Raw>, Vec<(usize, usize)>);

/// The byte ranges of the root's children.
fn root_ranges(tree: &Tree) -> Vec<(usize, usize)> {
    let root = tree.root_node();
    let mut cursor = root.walk();
    root.children(&mut cursor)
        .map(|c| (c.start_byte(), c.end_byte()))
        .collect()
}

/// Whether any of the sorted, disjoint `ranges` touches `[s, e]`.
fn touches(ranges: &[(usize, usize)], s: usize, e: usize) -> bool {
    let at = ranges.partition_point(|r| r.1 < s);
    ranges.get(at).is_some_and(|r| r.0 <= e)
}

/// The symbols of `tree` (the reparse of `text` from `old_tree`, edited by `changes`), taking the
/// symbols of each root child that is the same as before (the same text, unchanged around it,
/// the same structure by tree-sitter's `changed_ranges`, and a root child of the old tree at the
/// same place) from the old outline `raws`, shifted. Python only.
fn collect_reusing<'a>(
    text: &'a str,
    tree: &Tree,
    old_tree: &Tree,
    changes: &[Change],
    (raws, old_roots): &Reuse,
) -> (Collector<'a>, Vec<(usize, usize)>) {
    let edited: Vec<(usize, usize)> = changes.iter().map(|c| c.new).collect();
    let structural: Vec<(usize, usize)> = old_tree
        .changed_ranges(tree)
        .map(|r| (r.start_byte, r.end_byte))
        .collect();
    let shift_at = |s: usize| -> isize {
        let before = changes.partition_point(|c| c.new.1 <= s);
        before
            .checked_sub(1)
            .map_or(0, |k| changes[k].new.1 as isize - changes[k].old.1 as isize)
    };
    let roots = root_ranges(tree);
    let reuse: Vec<Option<(usize, usize, isize)>> = roots
        .iter()
        .map(|&(s, e)| {
            if touches(&edited, s, e) || touches(&structural, s, e) {
                return None;
            }
            let d = shift_at(s);
            let (os, oe) = (s.checked_add_signed(-d)?, e.checked_add_signed(-d)?);
            old_roots.binary_search(&(os, oe)).ok().map(|_| (os, oe, d))
        })
        .collect();
    let mut out = Collector::new(text);
    crate::python::extract_some(&mut out, tree.root_node(), &|n| {
        reuse.get(n).is_none_or(Option::is_none)
    });
    for &(os, oe, d) in reuse.iter().flatten() {
        let from = raws.partition_point(|r| r.start < os);
        for r in raws[from..].iter().take_while(|r| r.start < oe) {
            out.push_raw(Raw {
                start: r.start.saturating_add_signed(d),
                end: r.end.saturating_add_signed(d),
                ..r.clone()
            });
        }
    }
    (out, roots)
}

/// How an outline was made, for tests and benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Made {
    /// Parsed from scratch.
    Fresh,
    /// The kept tree of the same text.
    Kept,
    /// The kept tree of an earlier text, edited and reparsed.
    Incremental,
}

/// The trees a parser helper keeps: at most `max_entries`, holding at most `max_bytes` (their
/// texts, plus what `measure` reports: in the helper, the bytes tree-sitter holds, which
/// between requests are the kept trees'), the most recently used first.
pub struct Trees {
    held: Vec<Held>,
    max_entries: usize,
    max_bytes: usize,
    measure: fn() -> usize,
}

impl Trees {
    /// With no measure of the trees: only their texts count towards `max_bytes`.
    pub fn new(max_entries: usize, max_bytes: usize) -> Trees {
        Trees {
            held: Vec::new(),
            max_entries,
            max_bytes,
            measure: || 0,
        }
    }

    /// Counts what `measure` reports towards the bound, evicting trees until it holds.
    pub fn measured_by(self, measure: fn() -> usize) -> Trees {
        Trees { measure, ..self }
    }

    /// How many trees are kept.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Forgets every kept tree.
    pub fn clear(&mut self) {
        self.held.clear();
    }

    /// The outline of `text` in `language`, equal to [`crate::outline`]; reparsed from the tree
    /// kept under `lineage` when there is one, and its tree kept under `lineage` afterwards.
    pub fn outline(
        &mut self,
        lineage: &[u8],
        language: Language,
        text: String,
    ) -> Result<Outline, ParserLimit> {
        self.outline_made(lineage, language, text).0
    }

    /// [`Trees::outline`], and how it was made.
    pub fn outline_made(
        &mut self,
        lineage: &[u8],
        language: Language,
        text: String,
    ) -> (Result<Outline, ParserLimit>, Made) {
        let prior = self
            .held
            .iter()
            .position(|h| h.lineage == lineage)
            .map(|at| self.held.remove(at));
        if u32::try_from(text.len()).is_err() {
            return (Err(ParserLimit::Input), Made::Fresh);
        }
        let mut made = Made::Fresh;
        let mut tree = None;
        let mut reused: Option<(Collector<'_>, Vec<(usize, usize)>)> = None;
        // The kept entry stays kept when this text's tree is not kept (it has syntax errors,
        // or is too large): the text after a fix is then reparsed from it.
        let mut prior = prior.filter(|h| h.language == language);
        if let Some(h) = prior.as_ref() {
            if h.text == text {
                made = Made::Kept;
                tree = Some((h.tree.clone(), true));
            } else {
                let changes = diff(&h.text, &text);
                // A copy shares the kept tree's nodes; editing it copies only the edited paths.
                let mut old_tree = h.tree.clone();
                for e in input_edits(&h.text, &text, &changes) {
                    old_tree.edit(&e);
                }
                let reparsed = parse(tree_sitter_language(language), &text, Some(&old_tree))
                    .filter(|t| !t.root_node().has_error());
                if let Some(t) = reparsed {
                    made = Made::Incremental;
                    if let Some(reuse) = h.reuse.as_ref() {
                        reused = Some(collect_reusing(&text, &t, &old_tree, &changes, reuse));
                    }
                    tree = Some((t, true));
                }
            }
        }
        let Some((tree, primary)) = tree.or_else(|| fresh_tree(language, &text)) else {
            return (Ok(language.empty_outline(true)), made);
        };
        let has_errors = tree.root_node().has_error();
        let keep = primary && !has_errors && text.len() <= self.max_bytes && self.max_entries > 0;
        let reusable = language == Language::Python;
        // A reused outline that passed a cap may name another cap than a fresh one would
        // (symbols are pushed in another order): such an outline is made afresh.
        let (reused, mut roots) =
            reused.map_or((None, None), |(out, roots)| (Some(out), Some(roots)));
        let finished = reused
            .map(|out| out.finish_keeping())
            .filter(Result::is_ok)
            .unwrap_or_else(|| crate::collect(language, &text, &tree).0.finish_keeping());
        let (outline, kept_raws) = match finished {
            Ok((symbols, raws)) => {
                let mut o = language.empty_outline(has_errors);
                o.symbols = symbols;
                (Ok(o), Some(raws))
            }
            Err(limit) => (Err(limit), None),
        };
        if keep {
            prior = None;
            let reuse = kept_raws
                .filter(|_| reusable)
                .map(|raws| (raws, roots.take().unwrap_or_else(|| root_ranges(&tree))));
            self.held.insert(
                0,
                Held {
                    lineage: lineage.to_vec(),
                    language,
                    text,
                    tree,
                    reuse,
                },
            );
        } else {
            drop((text, tree));
        }
        if let Some(h) = prior {
            self.held.insert(0, h);
        }
        // The oldest go first until the bounds hold (the newest too, if it alone is over).
        while !self.held.is_empty()
            && (self.held.len() > self.max_entries
                || self.held.iter().map(|h| h.text.len()).sum::<usize>() + (self.measure)()
                    > self.max_bytes)
        {
            self.held.pop();
        }
        (outline, made)
    }
}
