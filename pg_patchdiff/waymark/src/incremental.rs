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
    /// A tree of `tree_sitter_language(language)` without syntax errors: the tree of `text`
    /// when `current`, otherwise the tree of an earlier text edited (`Tree::edit`, not
    /// reparsed) to `text`, which a later incremental parse may still start from (tree-sitter
    /// takes any number of edits before a reparse), but which no outline is read from.
    tree: Tree,
    /// Whether `tree` was parsed from `text` (false after a region outline, [`regions`]).
    current: bool,
    /// The outline's symbols before conversion, in document order, and the byte ranges of the
    /// root's children, for the languages whose outline is reused per root child (Python).
    reuse: Option<Reuse>,
    /// Whether the last text asked for under this lineage had syntax errors (this entry was kept
    /// through it): the next other text is parsed afresh, not first from this tree.
    broken_since: bool,
}

/// Whether tree-sitter's incremental reparse of `language` is known to choose the tree a fresh
/// parse chooses. Not for JavaScript and shell: their external scanners decide by what follows
/// a statement (an automatic semicolon before a `//` comment, a line continuation), and
/// helper-113 found incremental trees without errors that differ from fresh ones (282 of 34,990
/// JavaScript commits, 1 of 36,333 shell ones; `helper_113s_texts_outline_as_a_fresh_parse_does`
/// in tests/incremental.rs). Their texts are parsed afresh each time; a text asked for again is
/// still answered from its kept tree. The other grammars: 0 differences in 21,000 to 32,000
/// random commits each (TypeScript and TSX 47,739).
fn reparses_as_fresh(language: Language) -> bool {
    !matches!(language, Language::JavaScript | Language::Shell)
}

/// Past this many changed ranges between the kept text and the new one, a text is parsed
/// afresh: an incremental parse of so many edits took longer than a fresh parse (helper-113: 1.15x
/// with 4,613 changes, 1.24x with 9,226, 1.5-1.9x with 18,453, in a 950 KB Python module).
const INCREMENTAL_MAX_CHANGES: usize = 2_048;

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
    /// The kept outline of an earlier text, with the changed top-level regions parsed alone
    /// and spliced in ([`regions`]; Python only).
    Region,
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
        // No outline, as `crate::outline` answers; the kept tree stays for the text after a fix.
        if crate::counters::past_the_counters(language, &text) {
            if let Some(h) = prior {
                self.held.insert(0, h);
            }
            self.bound();
            return (Ok(language.empty_outline(true)), Made::Fresh);
        }
        let mut made = Made::Fresh;
        let mut tree = None;
        let mut reused: Option<(Collector<'_>, Vec<(usize, usize)>)> = None;
        // The kept entry stays kept when this text's tree is not kept (it has syntax errors,
        // or is too large): the text after a fix is then reparsed from it.
        let mut prior = prior.filter(|h| h.language == language);
        if let Some(h) = prior.as_mut() {
            if h.text == text && h.current {
                made = Made::Kept;
                tree = Some((h.tree.clone(), true));
            } else if h.text == text
                && let Some((raws, roots)) = h.reuse.as_ref()
            {
                // The outline kept of this very text (its tree is not current).
                let mut out = Collector::new(&text);
                for r in raws {
                    out.push_raw(r.clone());
                }
                if let Ok((symbols, raws)) = out.finish_keeping() {
                    let roots = roots.clone();
                    let edited = h.tree.clone();
                    return self.region_done(
                        lineage,
                        language,
                        text,
                        edited,
                        symbols,
                        raws,
                        roots,
                        prior,
                        Made::Kept,
                    );
                }
            } else if h.text != text
                && !h.broken_since
                && reparses_as_fresh(language)
                && let changes = diff(&h.text, &text)
                && changes.len() <= INCREMENTAL_MAX_CHANGES
            {
                // A copy shares the kept tree's nodes; editing it copies only the edited paths.
                let mut old_tree = h.tree.clone();
                for e in input_edits(&h.text, &text, &changes) {
                    old_tree.edit(&e);
                }
                // Python: the changed top-level regions parsed alone, spliced into the kept
                // outline; the edited tree is kept, not reparsed (see `regions`).
                // The kept outline is taken apart only once every region parsed as it must; a
                // splice that fails after that (a cap) leaves no outline to reuse below.
                if language == Language::Python
                    && let Some((_, roots)) = h.reuse.as_ref()
                    && let Some(regions) = regions::outline(&h.text, &text, &changes, roots)
                    && let Some(reuse) = h.reuse.take()
                    && let Some((out, roots)) = regions.splice(&text, reuse)
                    && let Ok((symbols, raws)) = out.finish_keeping()
                {
                    return self.region_done(
                        lineage,
                        language,
                        text,
                        old_tree,
                        symbols,
                        raws,
                        roots,
                        prior,
                        Made::Region,
                    );
                }
                let reparsed = parse(tree_sitter_language(language), &text, Some(&old_tree))
                    .filter(|t| !t.root_node().has_error());
                if let Some(t) = reparsed {
                    made = Made::Incremental;
                    // The reuse of the previous outline needs tree-sitter's changed ranges
                    // between the tree of the previous text and this one: only with a
                    // current tree.
                    if h.current
                        && let Some(reuse) = h.reuse.as_ref()
                    {
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
        if let Some(h) = prior.as_mut() {
            // A text with errors keeps the entry (below) and has it parse the next text afresh:
            // with an error that stays, each version was parsed twice, incrementally from the last
            // error-free tree (thrown away) and afresh (helper-113: 600 ms against a fresh 380 ms on
            // 1 MiB of Python). So does a TypeScript text that needed the `tsx` dialect, whose
            // reparse in the language's own grammar has errors as well. A text without errors
            // replaces the entry when it is kept.
            h.broken_since = has_errors || !primary;
        }
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
                    current: true,
                    reuse,
                    broken_since: false,
                },
            );
        } else {
            drop((text, tree));
        }
        if let Some(h) = prior {
            self.held.insert(0, h);
        }
        self.bound();
        (outline, made)
    }

    /// The oldest go first until the bounds hold (the newest too, if it alone is over).
    fn bound(&mut self) {
        while !self.held.is_empty()
            && (self.held.len() > self.max_entries
                || self.held.iter().map(|h| h.text.len()).sum::<usize>() + (self.measure)()
                    > self.max_bytes)
        {
            self.held.pop();
        }
    }

    /// Answers an outline made from the kept outline (a region outline, or the kept outline of
    /// the same text), and keeps it with `tree`, the kept tree edited to `text` but not
    /// reparsed. Python texts without syntax errors only.
    #[allow(clippy::too_many_arguments)]
    fn region_done(
        &mut self,
        lineage: &[u8],
        language: Language,
        text: String,
        tree: Tree,
        symbols: Vec<patchdiff_engine::api::scope::Symbol>,
        raws: Vec<Raw>,
        roots: Vec<(usize, usize)>,
        prior: Option<Held>,
        made: Made,
    ) -> (Result<Outline, ParserLimit>, Made) {
        let mut o = language.empty_outline(false);
        o.symbols = symbols;
        if text.len() <= self.max_bytes && self.max_entries > 0 {
            drop(prior);
            self.held.insert(
                0,
                Held {
                    lineage: lineage.to_vec(),
                    language,
                    text,
                    tree,
                    current: false,
                    reuse: Some((raws, roots)),
                    broken_since: false,
                },
            );
        } else if let Some(h) = prior {
            self.held.insert(0, h);
        }
        self.bound();
        (Ok(o), made)
    }
}

/// Region outlines (issue 21, item 2), Python only: the top-level statements a change touches,
/// widened to whole statements with an unchanged statement on each side, are parsed alone, and
/// their symbols spliced into the kept outline, the symbols of every other top-level statement
/// taken from it, shifted. No tree of the whole text is made.
///
/// Why the result equals a fresh parse's outline. Python's module is a sequence of top-level
/// statements; tree-sitter's Python parser at a *canonical* point (column 0, outside any
/// statement, the scanner's indent stack at 0 and no open bracket or string) is in the same
/// state as at the start of a file. A cut is only made at the start of an old top-level
/// statement (a root child of the kept, error-free tree) that begins at column 0 after an LF,
/// with a plain first byte (an ASCII letter, `_` or `@`: not a comment, string, bracket,
/// continuation or anything the scanner reads past), whose previous top-level node is not a
/// comment and whose previous line does not end in a backslash; and the unit of text just inside
/// each cut of a region is unchanged (at least one untouched statement of padding each side).
/// Then, by induction from the start of the text, every cut is canonical in a fresh parse of the
/// new text too:
///
/// - an unchanged run between two cuts starts canonical, is the same text as before, and is
///   followed by the same plain first line as before (the next cut's padding statement, or the
///   end), so it is lexed and parsed as in the old tree, and ends canonical: its old symbols,
///   shifted, are its new ones;
/// - a region starts canonical, like a parse of its text alone, which is accepted only when it
///   has no ERROR or MISSING node and its root children tile it (nothing but whitespace outside
///   them); the scanner, at the end of the region's last line, sees a plain line at column 0 in
///   the whole text and the end of the text in the region alone: both give indentation 0 and a
///   found end of line, so the same NEWLINE and DEDENT tokens, and a token that cannot continue
///   a statement (no `else`, `elif`, `except` or `finally` begins a top-level statement of an
///   error-free tree); so the region's statements are the same nodes in both, and the cut after
///   it is canonical.
///
/// Anything else (a cut that cannot be placed within a few statements, a region with errors,
/// regions covering much of the text) returns `None`, and the caller reparses with tree-sitter.
/// `tests/incremental.rs` checks the result against a fresh parse on hostile random edits.
mod regions {
    use super::{Change, Reuse};
    use crate::common::{Collector, Raw};
    use crate::{Language, tree_sitter_language};

    /// How far a cut may move outwards, in top-level statements, before giving up, and how
    /// many blank bytes before a cut are looked through.
    const MAX_WIDEN: usize = 16;
    const MAX_BLANK: usize = 256;
    /// Past this many regions, or regions totalling more than this fraction of the text, a
    /// reparse of the whole tree is as cheap.
    const MAX_REGIONS: usize = 4096;
    const MAX_SHARE: usize = 4;

    fn plain(b: u8) -> bool {
        b.is_ascii_alphabetic() || b == b'_' || b == b'@'
    }

    fn blank(b: u8) -> bool {
        matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0c')
    }

    /// Whether a cut before the old top-level statement `k` (k >= 1) is canonical.
    fn cut_ok(old: &[u8], roots: &[(usize, usize)], k: usize) -> bool {
        let at = roots[k].0;
        if at == 0 || old[at - 1] != b'\n' || !old.get(at).copied().is_some_and(plain) {
            return false;
        }
        if old[roots[k - 1].0] == b'#' {
            return false;
        }
        // The last byte before the blank run must not be a backslash; a run longer than
        // MAX_BLANK is not looked through (the cut moves on instead), so every check is short.
        let mut i = at;
        while i > 0 && blank(old[i - 1]) {
            if at - i >= MAX_BLANK {
                return false;
            }
            i -= 1;
        }
        i == 0 || old[i - 1] != b'\\'
    }

    /// The regions of `new` (which `changes` made from `old`, whose root children's byte
    /// ranges are `roots`), parsed and checked; `None` when a region cannot be cut or parsed
    /// as argued above. [`Regions::splice`] then makes the outline.
    pub(super) fn outline(
        old: &str,
        new: &str,
        changes: &[Change],
        roots: &[(usize, usize)],
    ) -> Option<Regions> {
        let n = roots.len();
        if n == 0 || changes.is_empty() || changes.len() > MAX_REGIONS {
            return None;
        }
        let ob = old.as_bytes();
        // Unit k is [start(k), start(k + 1)): top-level statement k and the blank or comment
        // text after it; unit 0 starts at 0 and the last ends at the end of the text.
        let start = |k: usize| if k == 0 { 0 } else { roots[k].0 };
        let end = |k: usize| if k + 1 >= n { ob.len() } else { roots[k + 1].0 };
        // Units touched by each change (inclusively: a change at a unit's edge touches it),
        // widened by one each side and to canonical cuts; overlapping ones merged.
        let mut spans: Vec<(usize, usize)> = Vec::new();
        for c in changes {
            let (a, b) = c.old;
            // The first unit that ends at or after a, and the last that starts at or before b.
            let t0 = roots[1..].partition_point(|r| r.0 < a).min(n - 1);
            let t1 = roots[1..].partition_point(|r| r.0 <= b).max(t0);
            let mut lo = t0.saturating_sub(1);
            let mut hi = (t1 + 1).min(n - 1);
            let mut widen = 0;
            while lo > 0 && !cut_ok(ob, roots, lo) {
                lo -= 1;
                widen += 1;
                if widen > MAX_WIDEN {
                    return None;
                }
            }
            while hi + 1 < n && !cut_ok(ob, roots, hi + 1) {
                hi += 1;
                widen += 1;
                if widen > MAX_WIDEN {
                    return None;
                }
            }
            while let Some(&(plo, phi)) = spans.last()
                && lo <= phi
            {
                spans.pop();
                lo = lo.min(plo);
                hi = hi.max(phi);
            }
            spans.push((lo, hi));
        }
        let total: usize = spans.iter().map(|&(lo, hi)| end(hi) - start(lo)).sum();
        if total * MAX_SHARE > ob.len() {
            return None;
        }
        let mut parser = tree_sitter::Parser::new();
        parser
            .set_language(&tree_sitter_language(Language::Python))
            .ok()?;
        // First every region is parsed and checked; only then is the kept outline taken apart.
        let mut parsed: Vec<Parsed> = Vec::with_capacity(spans.len());
        let mut delta: isize = 0;
        let mut ci = 0usize;
        for &(lo, hi) in &spans {
            let (r0, r1) = (start(lo), end(hi));
            let n0 = r0.checked_add_signed(delta)?;
            while ci < changes.len() && changes[ci].old.1 <= r1 {
                let c = changes[ci];
                debug_assert!(c.old.0 >= r0);
                delta += (c.new.1 - c.new.0) as isize - (c.old.1 - c.old.0) as isize;
                ci += 1;
            }
            let n1 = r1.checked_add_signed(delta)?;
            let region = new.get(n0..n1)?;
            let tree = parser.parse(region, None)?;
            let root = tree.root_node();
            if root.has_error() {
                return None;
            }
            // The root's children tile the region: only whitespace outside them.
            let mut kids = Vec::new();
            crate::common::children(&mut root.walk(), root, &mut kids);
            let mut roots_here = Vec::with_capacity(kids.len());
            let mut at = 0;
            for &(child, _) in &kids {
                let (s, e) = (child.start_byte(), child.end_byte());
                if s < at || !region.as_bytes()[at..s].iter().all(|&b| blank(b)) {
                    return None;
                }
                roots_here.push((n0 + s, n0 + e));
                at = e;
            }
            if at > region.len() || !region.as_bytes()[at..].iter().all(|&b| blank(b)) {
                return None;
            }
            let mut part = Collector::new(region);
            crate::python::extract(&mut part, root);
            if part.full() {
                return None;
            }
            // In the order a whole outline lists them (ties only within one statement, whose
            // symbols the extractor pushes in the same order in a region as in the whole).
            Collector::sort_in_place(&mut part.syms);
            parsed.push(Parsed {
                old: (r0, r1),
                n0,
                delta_after: delta,
                syms: part.syms,
                roots: roots_here,
            });
        }
        if ci != changes.len() {
            return None;
        }
        Some(Regions { parsed })
    }

    /// The regions of a new text, parsed and checked ([`outline`]).
    pub(super) struct Regions {
        parsed: Vec<Parsed>,
    }

    struct Parsed {
        /// The region's old byte range, its new start, and new minus old positions after it.
        old: (usize, usize),
        n0: usize,
        delta_after: isize,
        /// Its symbols, in bytes of the region, in the order the extractor pushed them.
        syms: Vec<Raw>,
        /// Its root children, in bytes of the new text.
        roots: Vec<(usize, usize)>,
    }

    impl Regions {
        /// The outline of the new text: the kept outline's symbols and root children outside
        /// the regions, shifted, and the regions' own (taken by value: nothing is copied).
        pub(super) fn splice(
            self,
            new: &str,
            (raws, roots): Reuse,
        ) -> Option<(Collector<'_>, Vec<(usize, usize)>)> {
            let mut out = Collector::new(new);
            out.reserve(raws.len() + self.parsed.iter().map(|p| p.syms.len()).sum::<usize>());
            let mut new_roots = Vec::with_capacity(
                roots.len() + self.parsed.iter().map(|p| p.roots.len()).sum::<usize>(),
            );
            let mut raws = raws.into_iter().peekable();
            let mut roots = roots.into_iter().peekable();
            let mut delta = 0isize;
            let mut copy_until = |out: &mut Collector<'_>,
                                  new_roots: &mut Vec<(usize, usize)>,
                                  until: usize,
                                  delta: isize,
                                  keep: bool|
             -> Option<()> {
                while let Some(&(s, e)) = roots.peek()
                    && s < until
                {
                    roots.next();
                    if keep {
                        new_roots
                            .push((s.checked_add_signed(delta)?, e.checked_add_signed(delta)?));
                    }
                }
                while let Some(r) = raws.next_if(|r| r.start < until) {
                    if keep {
                        let (start, end) = (
                            r.start.checked_add_signed(delta)?,
                            r.end.checked_add_signed(delta)?,
                        );
                        out.push_raw(Raw { start, end, ..r });
                    }
                }
                Some(())
            };
            for p in self.parsed {
                copy_until(&mut out, &mut new_roots, p.old.0, delta, true)?;
                for r in p.syms {
                    out.push_raw(Raw {
                        start: r.start + p.n0,
                        end: r.end + p.n0,
                        ..r
                    });
                }
                new_roots.extend(p.roots);
                // The old statements and symbols of the region go.
                copy_until(&mut out, &mut new_roots, p.old.1, delta, false)?;
                delta = p.delta_after;
            }
            copy_until(&mut out, &mut new_roots, usize::MAX, delta, true)?;
            if out.full() {
                return None;
            }
            Some((out, new_roots))
        }
    }
}
