//! Structural scopes (contract "Structural Observation and Scoped Submission"): the symbols a
//! structural parser (crate `patchdiff-waymark`) finds in a target, as plain values. The engine
//! selects, pages and confines edits to them; it never parses source code itself.

/// One structural symbol of a target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    /// `function`, `class`, `method`, `variable`, `interface`, `type`, `enum`, `config_item`,
    /// `object`, `array`, `section`, `table_row`, `code_block` (docs/structural.md).
    pub kind: &'static str,
    /// The symbol's own name as written: `greet`, `port`, `tenants[ten_013]`, a Markdown heading
    /// with its punctuation, `row:CHK-14-C`, `fence:L7`.
    pub name: String,
    /// The parent's `path`, or `None` at the top level.
    pub parent: Option<String>,
    /// `parent.name` (`Greeter.greet`, `server.port`, `config.tenants[ten_013]`), or `name` at
    /// the top level. A selection matches a symbol by its `path` or by its `name`.
    pub path: String,
    /// Code points of the canonical (LF) text, end exclusive.
    pub start: usize,
    pub end: usize,
    /// 1-based lines of `start` and of the last code point of the scope.
    pub start_line: usize,
    pub end_line: usize,
}

/// The symbols of one target version, in document order (`start` ascending, then `end`
/// descending: a parent before its children).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outline {
    /// `python`, `typescript`, `javascript`, `json`, `markdown`, `yaml`, `toml`, `shell`.
    pub language: &'static str,
    /// The structural engine and its version, e.g. `patchdiff-waymark@0.1.0`.
    pub engine: &'static str,
    /// The grammar that parsed this language, e.g. `tree-sitter-python@0.25.0`.
    pub grammar: &'static str,
    /// Whether the parser recovered from syntax errors (the symbols are still exact spans of
    /// the text, but the structure may not be what the author meant).
    pub has_errors: bool,
    pub symbols: Vec<Symbol>,
}
