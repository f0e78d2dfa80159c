//! Shared machinery: the symbol collector, child iteration without recursion, offset
//! conversion (bytes -> code points and lines) and the string decoders of the data formats.

use patchdiff_engine::api::scope::{
    OUTLINE_MAX_SYMBOLS, ParserLimit, Symbol, outline_max_name_bytes,
};
use tree_sitter::{Node, TreeCursor};

/// Symbols nested deeper than this (counted in symbol levels, not syntax nodes) are not
/// listed: they stay inside their ancestors' scopes. Bounds work and name length on
/// pathological input such as 10,000-deep `[[[[...`.
pub(crate) const MAX_DEPTH: usize = 128;

pub(crate) const FUNCTION: &str = "function";
pub(crate) const CLASS: &str = "class";
pub(crate) const METHOD: &str = "method";
pub(crate) const VARIABLE: &str = "variable";
pub(crate) const INTERFACE: &str = "interface";
pub(crate) const TYPE: &str = "type";
pub(crate) const ENUM: &str = "enum";
pub(crate) const CONFIG_ITEM: &str = "config_item";
pub(crate) const OBJECT: &str = "object";
pub(crate) const ARRAY: &str = "array";
pub(crate) const SECTION: &str = "section";
pub(crate) const TABLE_ROW: &str = "table_row";
pub(crate) const CODE_BLOCK: &str = "code_block";

/// The members whose value keys an array element, in priority order.
pub(crate) const ID_KEYS: [&str; 5] = ["id", "name", "key", "slug", "code"];

/// A symbol with byte offsets, before conversion.
#[derive(Debug, Clone)]
pub(crate) struct Raw {
    pub kind: &'static str,
    pub name: String,
    pub parent: Option<String>,
    pub path: String,
    pub start: usize,
    pub end: usize,
}

/// Collects symbols of one text.
pub(crate) struct Collector<'a> {
    pub text: &'a str,
    pub syms: Vec<Raw>,
    /// Bytes of names, paths and parent paths collected so far, and their cap.
    name_bytes: usize,
    max_name_bytes: usize,
    /// Set by the first symbol over a cap; later symbols keep no names, and `finish` refuses.
    over: Option<ParserLimit>,
}

impl<'a> Collector<'a> {
    pub fn new(text: &'a str) -> Self {
        Collector {
            text,
            syms: Vec::new(),
            name_bytes: 0,
            max_name_bytes: outline_max_name_bytes(text.len()),
            over: None,
        }
    }

    /// The source text of a node (empty if the node's range is not a valid slice).
    pub fn text_of(&self, node: Node<'_>) -> &'a str {
        self.slice(node.start_byte(), node.end_byte())
    }

    pub fn slice(&self, start: usize, end: usize) -> &'a str {
        self.text.get(start..end).unwrap_or("")
    }

    /// Adds a symbol spanning bytes `[start, end)` minus trailing whitespace; returns its index.
    pub fn push(
        &mut self,
        kind: &'static str,
        name: String,
        parent: Option<String>,
        start: usize,
        end: usize,
    ) -> usize {
        let end = trim_end(self.text.as_bytes(), start, end);
        // The caps apply while the outline is built: past one, names are no longer kept (an
        // empty placeholder keeps the extractors' indices valid), so the memory of a hostile
        // shape stops growing by its names at the cap, and `finish` refuses.
        let bytes = name.len() * 2 + 2 * parent.as_ref().map_or(0, |p| p.len() + 1);
        if self.over.is_none() && self.syms.len() >= OUTLINE_MAX_SYMBOLS {
            self.over = Some(ParserLimit::Symbols);
        }
        if self.over.is_none() && self.name_bytes + bytes > self.max_name_bytes {
            self.over = Some(ParserLimit::NameBytes);
        }
        let (name, parent) = if self.over.is_some() {
            (String::new(), None)
        } else {
            self.name_bytes += bytes;
            (name, parent)
        };
        let path = join_path(parent.as_deref(), &name);
        self.syms.push(Raw {
            kind,
            name,
            parent,
            path,
            start,
            end,
        });
        self.syms.len() - 1
    }

    /// A symbol of an earlier outline of the same text (crate::incremental), under the same
    /// caps as [`Collector::push`]; its end is already trimmed and its path joined.
    pub fn push_raw(&mut self, r: Raw) {
        let bytes = r.name.len() * 2 + 2 * r.parent.as_ref().map_or(0, |p| p.len() + 1);
        if self.over.is_none() && self.syms.len() >= OUTLINE_MAX_SYMBOLS {
            self.over = Some(ParserLimit::Symbols);
        }
        if self.over.is_none() && self.name_bytes + bytes > self.max_name_bytes {
            self.over = Some(ParserLimit::NameBytes);
        }
        self.name_bytes += bytes;
        self.syms.push(r);
    }

    /// Room for `n` more symbols.
    pub fn reserve(&mut self, n: usize) {
        self.syms.reserve(n);
    }

    /// Symbols in the order [`Collector::finish`] lists them (stable by start ascending, then
    /// end descending), for a part of an outline spliced into another (crate::incremental).
    pub fn sort_in_place(syms: &mut [Raw]) {
        syms.sort_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));
    }

    /// Whether a cap was passed: extractors stop walking then, since nothing more is kept.
    pub fn full(&self) -> bool {
        self.over.is_some()
    }

    pub fn path(&self, index: usize) -> String {
        self.syms[index].path.clone()
    }

    /// The symbols in document order with code-point spans and lines.
    pub fn finish(self) -> Result<Vec<Symbol>, ParserLimit> {
        let (raws, map) = self.sorted()?;
        Ok(raws.into_iter().map(|r| map.symbol(r)).collect())
    }

    /// [`Collector::finish`], and the symbols before conversion (in document order), which an
    /// incremental outline reuses (crate::incremental).
    pub fn finish_keeping(self) -> Result<(Vec<Symbol>, Vec<Raw>), ParserLimit> {
        let (raws, map) = self.sorted()?;
        let symbols = raws.iter().map(|r| map.symbol(r.clone())).collect();
        Ok((symbols, raws))
    }

    fn sorted(self) -> Result<(Vec<Raw>, Offsets<'a>), ParserLimit> {
        if let Some(limit) = self.over {
            return Err(limit);
        }
        let mut raws = self.syms;
        // Stable: equal spans keep emission order (a parent is emitted before its children).
        // Symbols pushed in order already (an incremental outline's) are left as they are,
        // which is what the stable sort would leave.
        let order = |a: &Raw, b: &Raw| a.start.cmp(&b.start).then(b.end.cmp(&a.end));
        if !raws.is_sorted_by(|a, b| order(a, b) != std::cmp::Ordering::Greater) {
            raws.sort_by(order);
        }
        Ok((raws, Offsets::new(self.text)))
    }
}

impl Offsets<'_> {
    /// A symbol with code-point spans and lines.
    fn symbol(&self, r: Raw) -> Symbol {
        let start_line = self.line(r.start);
        let end_line = if r.end > r.start {
            self.line(r.end - 1)
        } else {
            start_line
        };
        Symbol {
            kind: r.kind,
            name: r.name,
            parent: r.parent,
            path: r.path,
            start: self.code_point(r.start),
            end: self.code_point(r.end),
            start_line,
            end_line,
        }
    }
}

pub(crate) use patchdiff_engine::api::scope::join_path;

/// `key[id]` or `key[index]`: the name of a keyed array element.
pub(crate) fn keyed_name(array_name: &str, id: Option<&str>, index: usize) -> String {
    match id {
        Some(id) => format!("{array_name}[{id}]"),
        None => format!("{array_name}[{index}]"),
    }
}

/// Picks the element key by [`ID_KEYS`] priority from `(key, value)` candidates.
#[derive(Default)]
pub(crate) struct IdPicker {
    best: Option<(usize, String)>,
}

impl IdPicker {
    /// Whether `key` is an id key that would beat the current choice.
    pub fn wants(&self, key: &str) -> Option<usize> {
        let rank = ID_KEYS.iter().position(|k| *k == key)?;
        match &self.best {
            Some((best, _)) if *best <= rank => None,
            _ => Some(rank),
        }
    }

    pub fn offer(&mut self, rank: usize, value: String) {
        self.best = Some((rank, value));
    }

    pub fn done(&self) -> bool {
        matches!(self.best, Some((0, _)))
    }

    pub fn take(self) -> Option<String> {
        self.best.map(|(_, v)| v)
    }
}

pub(crate) fn trim_end(bytes: &[u8], start: usize, mut end: usize) -> usize {
    while end > start && matches!(bytes.get(end - 1), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        end -= 1;
    }
    end
}

/// The children of `node` (named and anonymous) with their field names, into `out`.
pub(crate) fn children<'t>(
    cursor: &mut TreeCursor<'t>,
    node: Node<'t>,
    out: &mut Vec<(Node<'t>, Option<&'t str>)>,
) {
    walk_children(cursor, node, out, true);
}

/// The children of `node` (named and anonymous) into `out`, without their field names, which
/// [`children`] reads for each child: the cursor finds a field name by walking back over the
/// node's earlier children, so naming every child of a node with many (a YAML stream of 20,000
/// documents) cost time quadratic in their number (helper-98).
pub(crate) fn nodes<'t>(
    cursor: &mut TreeCursor<'t>,
    node: Node<'t>,
    out: &mut Vec<(Node<'t>, Option<&'t str>)>,
) {
    walk_children(cursor, node, out, false);
}

fn walk_children<'t>(
    cursor: &mut TreeCursor<'t>,
    node: Node<'t>,
    out: &mut Vec<(Node<'t>, Option<&'t str>)>,
    fields: bool,
) {
    out.clear();
    cursor.reset(node);
    if cursor.goto_first_child() {
        loop {
            let field = if fields { cursor.field_name() } else { None };
            out.push((cursor.node(), field));
            if !cursor.goto_next_sibling() {
                break;
            }
        }
    }
}

/// The first child of `node` with the field `field` (for small nodes).
pub(crate) fn field<'t>(node: Node<'t>, field: &str) -> Option<Node<'t>> {
    node.child_by_field_name(field)
}

/// Byte offset -> code point and line, in O(1) / O(log n) per query after one linear pass.
pub(crate) struct Offsets<'a> {
    ascii: bool,
    /// Code points before each 64-byte block (non-ASCII text only).
    blocks: Vec<usize>,
    bytes: &'a [u8],
    /// Byte offsets at which lines start (line 1 starts at 0).
    line_starts: Vec<usize>,
}

const BLOCK: usize = 64;

impl<'a> Offsets<'a> {
    pub fn new(text: &'a str) -> Offsets<'a> {
        let bytes = text.as_bytes();
        let ascii = text.is_ascii();
        let mut line_starts = vec![0];
        line_starts.extend(memchr::memchr_iter(b'\n', bytes).map(|i| i + 1));
        let mut blocks = Vec::new();
        if !ascii {
            blocks.reserve(bytes.len() / BLOCK + 1);
            let mut count = 0usize;
            for chunk in bytes.chunks(BLOCK) {
                blocks.push(count);
                count += chunk.iter().filter(|&&b| !is_continuation(b)).count();
            }
            blocks.push(count);
        }
        Offsets {
            ascii,
            blocks,
            bytes,
            line_starts,
        }
    }

    pub fn code_point(&self, byte: usize) -> usize {
        if self.ascii {
            return byte;
        }
        let block = byte / BLOCK;
        let base = self.blocks.get(block).copied().unwrap_or(0);
        let from = (block * BLOCK).min(self.bytes.len());
        let to = byte.min(self.bytes.len());
        base + self.bytes[from..to]
            .iter()
            .filter(|&&b| !is_continuation(b))
            .count()
    }

    /// The 1-based line of the byte at `byte`.
    pub fn line(&self, byte: usize) -> usize {
        self.line_starts.partition_point(|&s| s <= byte).max(1)
    }
}

fn is_continuation(b: u8) -> bool {
    (b & 0xC0) == 0x80
}

/// Decodes backslash escapes of JSON, TOML basic strings and YAML double-quoted scalars:
/// `\" \\ \/ \b \f \n \r \t \e \0 \a \v \uXXXX \UXXXXXXXX \xXX` (UTF-16 surrogate pairs
/// joined). Unknown or malformed escapes are kept as written.
pub(crate) fn unescape(s: &str) -> String {
    if !s.contains('\\') {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let Some(c) = after.chars().next() else {
            out.push('\\');
            rest = "";
            break;
        };
        let simple = match c {
            '"' => Some('"'),
            '\\' => Some('\\'),
            '/' => Some('/'),
            'b' => Some('\u{8}'),
            'f' => Some('\u{c}'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'e' => Some('\u{1b}'),
            '0' => Some('\0'),
            'a' => Some('\u{7}'),
            'v' => Some('\u{b}'),
            _ => None,
        };
        if let Some(ch) = simple {
            out.push(ch);
            rest = &after[1..];
            continue;
        }
        let width = match c {
            'x' => 2,
            'u' => 4,
            'U' => 8,
            _ => 0,
        };
        let hex = after
            .get(1..1 + width)
            .and_then(|h| u32::from_str_radix(h, 16).ok());
        match hex {
            Some(v) if width > 0 => {
                rest = &after[1 + width..];
                if (0xD800..0xDC00).contains(&v) && c == 'u' {
                    // A high surrogate: join with a following `\uDC00`-`\uDFFF`.
                    let low = rest
                        .strip_prefix("\\u")
                        .and_then(|r| r.get(..4))
                        .and_then(|h| u32::from_str_radix(h, 16).ok())
                        .filter(|l| (0xDC00..0xE000).contains(l));
                    if let Some(l) = low {
                        let cp = 0x10000 + ((v - 0xD800) << 10) + (l - 0xDC00);
                        out.push(char::from_u32(cp).unwrap_or('\u{FFFD}'));
                        rest = &rest[6..];
                        continue;
                    }
                }
                out.push(char::from_u32(v).unwrap_or('\u{FFFD}'));
            }
            _ => {
                out.push('\\');
                out.push(c);
                rest = &after[c.len_utf8()..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The content of a quoted string token: strips one leading and one trailing `quote`
/// (each only if present).
pub(crate) fn strip_quotes<'s>(s: &'s str, quote: &str) -> &'s str {
    let s = s.strip_prefix(quote).unwrap_or(s);
    s.strip_suffix(quote).unwrap_or(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescape_decodes_json_escapes_and_surrogates() {
        assert_eq!(unescape(r"a\u00e9\n"), "aé\n");
        assert_eq!(unescape(r"\ud83c\udf1f"), "🌟");
        assert_eq!(unescape(r#"\q\"x"#), "\\q\"x");
        assert_eq!(unescape(r"end\"), "end\\");
        assert_eq!(unescape(r"\u12"), "\\u12");
        assert_eq!(unescape(r"\ud83c"), "\u{FFFD}");
    }

    #[test]
    fn offsets_convert_bytes_to_code_points_and_lines() {
        let text = "# 🌟 中\nab\n".repeat(30);
        let map = Offsets::new(&text);
        for (cp, (b, _)) in text.char_indices().enumerate() {
            assert_eq!(map.code_point(b), cp);
        }
        assert_eq!(map.code_point(text.len()), text.chars().count());
        assert_eq!(map.line(0), 1);
        let second = text.find("ab").unwrap();
        assert_eq!(map.line(second), 2);
        assert_eq!(map.line(second - 1), 1);
    }
}
