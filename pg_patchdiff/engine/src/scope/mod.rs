//! Structural scopes (contract "Structural Observation and Scoped Submission"): the symbols a
//! structural parser (crate `patchdiff-waymark`) finds in a target, as plain values. The engine
//! selects, pages and confines edits to them; it never parses source code itself.

pub mod observation;

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

/// A symbol's path: `parent.name`, or `name` at the top level.
pub fn join_path(parent: Option<&str>, name: &str) -> String {
    match parent {
        Some(p) => {
            let mut s = String::with_capacity(p.len() + 1 + name.len());
            s.push_str(p);
            s.push('.');
            s.push_str(name);
            s
        }
        None => name.to_owned(),
    }
}

/// The structural engine's name and version, recorded with every observation.
pub const ENGINE: &str = concat!("patchdiff-waymark@", env!("CARGO_PKG_VERSION"));

/// The grammars and their exact versions (pinned with `=` in patchdiff-waymark's Cargo.toml).
pub const GRAMMAR_PYTHON: &str = "tree-sitter-python@0.25.0";
pub const GRAMMAR_TYPESCRIPT: &str = "tree-sitter-typescript@0.23.2";
pub const GRAMMAR_JAVASCRIPT: &str = "tree-sitter-javascript@0.25.0";
pub const GRAMMAR_JSON: &str = "tree-sitter-json@0.24.8";
pub const GRAMMAR_MARKDOWN: &str = "tree-sitter-md@0.5.4";
pub const GRAMMAR_YAML: &str = "tree-sitter-yaml@0.7.2";
pub const GRAMMAR_TOML: &str = "tree-sitter-toml-ng@0.7.0";
pub const GRAMMAR_SHELL: &str = "tree-sitter-bash@0.25.1";

/// The languages Waymark parses. The choice is made here, in pure Rust, so that the extension
/// can answer `unsupported` without starting the parser helper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    Python,
    TypeScript,
    JavaScript,
    Json,
    Markdown,
    Yaml,
    Toml,
    Shell,
}

impl Language {
    /// Every language, in the order of their wire codes.
    pub const ALL: [Language; 8] = [
        Language::Python,
        Language::TypeScript,
        Language::JavaScript,
        Language::Json,
        Language::Markdown,
        Language::Yaml,
        Language::Toml,
        Language::Shell,
    ];

    /// The language's name in an [`Outline`]: `python`, `typescript`, ...
    pub fn name(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::TypeScript => "typescript",
            Language::JavaScript => "javascript",
            Language::Json => "json",
            Language::Markdown => "markdown",
            Language::Yaml => "yaml",
            Language::Toml => "toml",
            Language::Shell => "shell",
        }
    }

    /// The grammar and its version, e.g. `tree-sitter-python@0.25.0`.
    pub fn grammar(self) -> &'static str {
        match self {
            Language::Python => GRAMMAR_PYTHON,
            Language::TypeScript => GRAMMAR_TYPESCRIPT,
            Language::JavaScript => GRAMMAR_JAVASCRIPT,
            Language::Json => GRAMMAR_JSON,
            Language::Markdown => GRAMMAR_MARKDOWN,
            Language::Yaml => GRAMMAR_YAML,
            Language::Toml => GRAMMAR_TOML,
            Language::Shell => GRAMMAR_SHELL,
        }
    }

    /// The language's one-byte code on the helper's wire.
    pub fn code(self) -> u8 {
        Language::ALL.iter().position(|l| *l == self).unwrap_or(0) as u8
    }

    pub fn from_code(code: u8) -> Option<Language> {
        Language::ALL.get(usize::from(code)).copied()
    }

    /// An outline of this language with no symbols.
    pub fn empty_outline(self, has_errors: bool) -> Outline {
        Outline {
            language: self.name(),
            engine: ENGINE,
            grammar: self.grammar(),
            has_errors,
            symbols: Vec::new(),
        }
    }
}

/// The language of a target, by its filename's extension first, then its content type; `None`
/// when Waymark has no grammar for it.
///
/// The extension is the part of the last path component after its last `.` (compared
/// ASCII-case-insensitively; a leading-dot name such as `.bashrc` has no extension). The content
/// type is compared case-insensitively without its parameters (`; charset=utf-8`).
pub fn language_for(filename: &str, content_type: &str) -> Option<Language> {
    let base = filename.rsplit(['/', '\\']).next().unwrap_or(filename);
    let ext = match base.rfind('.') {
        Some(i) if i > 0 => &base[i + 1..],
        _ => "",
    };
    let by_ext = match ext.to_ascii_lowercase().as_str() {
        "py" | "pyi" => Some(Language::Python),
        "ts" | "tsx" | "mts" | "cts" => Some(Language::TypeScript),
        "js" | "jsx" | "mjs" | "cjs" => Some(Language::JavaScript),
        "json" => Some(Language::Json),
        "md" | "markdown" => Some(Language::Markdown),
        "yaml" | "yml" => Some(Language::Yaml),
        "toml" => Some(Language::Toml),
        "sh" | "bash" => Some(Language::Shell),
        _ => None,
    };
    if by_ext.is_some() {
        return by_ext;
    }
    let media = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match media.as_str() {
        "text/x-python" | "application/x-python" => Some(Language::Python),
        "application/typescript" | "text/typescript" => Some(Language::TypeScript),
        "text/javascript" | "application/javascript" => Some(Language::JavaScript),
        "application/json" => Some(Language::Json),
        "text/markdown" => Some(Language::Markdown),
        "application/yaml" | "text/yaml" | "application/x-yaml" => Some(Language::Yaml),
        "application/toml" => Some(Language::Toml),
        "application/x-sh" | "text/x-shellscript" => Some(Language::Shell),
        _ => None,
    }
}

/// Every symbol kind Waymark emits (docs/structural.md), in the order of their wire codes.
pub const KINDS: [&str; 13] = [
    "function",
    "class",
    "method",
    "variable",
    "interface",
    "type",
    "enum",
    "config_item",
    "object",
    "array",
    "section",
    "table_row",
    "code_block",
];

/// "Outline memory is bounded by the input" (issue 14): an outline lists at most this many
/// symbols. A 1 MiB source file of real code has a few thousand; 100,000 is reached only by
/// machine-made shapes (a million-element array), whose outline would cost more than the text.
pub const OUTLINE_MAX_SYMBOLS: usize = 100_000;

/// ... and its names and paths (each symbol's name, path and parent path) add up to at most
/// this many bytes, and at most [`outline_max_name_bytes`] of the text's length. Each symbol
/// repeats its parent's path, so a long key above many children (`{"<256 KiB key>": [[], [],
/// ...]}`) would otherwise grow the outline by the key's length per child: gigabytes from a few
/// hundred kilobytes.
pub const OUTLINE_MAX_NAME_BYTES: usize = 32 << 20;

/// The name-byte cap of the outline of a text of `text_bytes`: eight times the text plus 4 MiB,
/// at most [`OUTLINE_MAX_NAME_BYTES`]. Real files use far less (measured on the benchmark's
/// 1 MiB files: 1.4x for nested YAML, 2.5x for Python, 5x for a Markdown file of 60,000
/// headings), so only machine-made shapes reach it.
pub fn outline_max_name_bytes(text_bytes: usize) -> usize {
    text_bytes
        .saturating_mul(8)
        .saturating_add(4 << 20)
        .min(OUTLINE_MAX_NAME_BYTES)
}

/// Why the parser helper produced no outline. The wire and the SQL answer name these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParserLimit {
    /// More than [`OUTLINE_MAX_SYMBOLS`] symbols.
    Symbols,
    /// More than [`OUTLINE_MAX_NAME_BYTES`] bytes of names and paths.
    NameBytes,
    /// The helper's address-space limit (`patchdiff.parser_memory_limit`).
    Memory,
    /// The helper's CPU limit (`patchdiff.parser_cpu_limit`).
    Cpu,
    /// The wall-clock limit: `patchdiff.parser_timeout` or the statement's remaining time.
    Time,
    /// The text is larger than tree-sitter can address (4 GiB) or than the helper accepts.
    Input,
}

impl ParserLimit {
    pub const ALL: [ParserLimit; 6] = [
        ParserLimit::Symbols,
        ParserLimit::NameBytes,
        ParserLimit::Memory,
        ParserLimit::Cpu,
        ParserLimit::Time,
        ParserLimit::Input,
    ];

    /// The limit's label in `parser_limit` answers.
    pub fn label(self) -> &'static str {
        match self {
            ParserLimit::Symbols => "outline_symbols",
            ParserLimit::NameBytes => "outline_name_bytes",
            ParserLimit::Memory => "memory",
            ParserLimit::Cpu => "cpu",
            ParserLimit::Time => "time",
            ParserLimit::Input => "input_size",
        }
    }

    fn code(self) -> u8 {
        ParserLimit::ALL
            .iter()
            .position(|l| *l == self)
            .unwrap_or(0) as u8
    }
}

/// The parser helper's wire (`patchdiff-waymark-helper`, spoken over its stdin and stdout).
///
/// A request is `[language code: u8][text length: u64 LE][text: UTF-8]`. A response is
/// `[length: u64 LE][body]`, the body being `0` followed by an outline, or `1` followed by a
/// [`ParserLimit`] code. An outline is `[has_errors: u8][count: u32]` and per symbol
/// `[kind: u8][parent][start, end, start_line, end_line: u64][name: string]`, a string being
/// `[length: u32][UTF-8]` and a parent `u32::MAX` (none), `u32::MAX - 1` followed by a string,
/// or the index of an earlier symbol whose path it is. The path is rebuilt as
/// `parent + "." + name`, so the wire carries each name once. Decoding checks every
/// length and index: a helper that answers garbage is reported, never trusted.
pub mod wire {
    use super::{
        KINDS, Language, OUTLINE_MAX_NAME_BYTES, OUTLINE_MAX_SYMBOLS, Outline, ParserLimit, Symbol,
    };

    /// The helper's exit status when an allocation failed under its memory limit, which the
    /// backend reports as `parser_limit` (`memory`), not as a crash.
    pub const EXIT_MEMORY: i32 = 3;

    /// The helper's exit status when it could not set itself up or go on (bad arguments, a
    /// parent gone, a limit it may not set, a broken pipe): never the text's doing, so the
    /// backend answers `parser_not_started` and keeps nothing with the version.
    pub const EXIT_USAGE: i32 = 2;

    /// The largest request text the helper accepts (tree-sitter addresses bytes with u32).
    pub const MAX_TEXT_BYTES: u64 = u32::MAX as u64;

    pub fn request(language: Language, text: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(9 + text.len());
        out.push(language.code());
        out.extend_from_slice(&(text.len() as u64).to_le_bytes());
        out.extend_from_slice(text.as_bytes());
        out
    }

    /// The flag on a request's language code that says a lineage follows the header.
    const LINEAGE: u8 = 0x80;

    /// The longest lineage a request carries.
    pub const MAX_LINEAGE_BYTES: usize = u8::MAX as usize;

    /// A request for the outline of `text`, the next text of `lineage` (an opaque key, the
    /// target's id): the helper may reparse it from the tree it kept of the lineage's last text
    /// (issue 21). The answer is the same as for [`request`]. A lineage longer than
    /// [`MAX_LINEAGE_BYTES`] is not sent (a plain request).
    pub fn request_in_lineage(language: Language, lineage: &[u8], text: &str) -> Vec<u8> {
        if lineage.len() > MAX_LINEAGE_BYTES {
            return request(language, text);
        }
        let mut out = Vec::with_capacity(10 + lineage.len() + text.len());
        out.push(language.code() | LINEAGE);
        out.extend_from_slice(&(text.len() as u64).to_le_bytes());
        out.push(lineage.len() as u8);
        out.extend_from_slice(lineage);
        out.extend_from_slice(text.as_bytes());
        out
    }

    /// The header of a request: its language, text length, and whether a lineage follows (one
    /// length byte, then the lineage, then the text).
    pub fn request_header(head: &[u8; 9]) -> Result<(Language, u64, bool), String> {
        let language = Language::from_code(head[0] & !LINEAGE)
            .ok_or_else(|| format!("unknown language code {}", head[0]))?;
        let mut n = [0u8; 8];
        n.copy_from_slice(&head[1..]);
        Ok((language, u64::from_le_bytes(n), head[0] & LINEAGE != 0))
    }

    fn framed(body: Vec<u8>) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + body.len());
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        out.extend(body);
        out
    }

    pub fn limit_response(limit: ParserLimit) -> Vec<u8> {
        framed(vec![1, limit.code()])
    }

    /// No parent.
    const NO_PARENT: u32 = u32::MAX;
    /// The parent path follows inline (no earlier symbol has it as its path, e.g. the
    /// `a.b` of a TOML table `[a.b.c]` whose `a.b` is never declared).
    const INLINE_PARENT: u32 = u32::MAX - 1;

    /// Encodes an outline. A parent that is the path of an earlier symbol is sent as that
    /// symbol's index, so a long path is carried once, not once per child.
    pub fn outline_response(o: &Outline) -> Vec<u8> {
        // About 45 bytes per symbol besides its name and inline parents.
        let mut b =
            Vec::with_capacity(6 + o.symbols.iter().map(|s| 45 + s.name.len()).sum::<usize>());
        b.extend_from_slice(&[0u8, u8::from(o.has_errors)]);
        b.extend_from_slice(&(o.symbols.len() as u32).to_le_bytes());
        let mut by_path: std::collections::HashMap<&str, u32> =
            std::collections::HashMap::with_capacity(o.symbols.len());
        for (i, s) in o.symbols.iter().enumerate() {
            b.push(KINDS.iter().position(|k| *k == s.kind).unwrap_or(0) as u8);
            let parent = s.parent.as_deref();
            match parent.map(|p| (p, by_path.get(p))) {
                None => b.extend_from_slice(&NO_PARENT.to_le_bytes()),
                Some((_, Some(index))) => b.extend_from_slice(&index.to_le_bytes()),
                Some((p, None)) => {
                    b.extend_from_slice(&INLINE_PARENT.to_le_bytes());
                    b.extend_from_slice(&(p.len() as u32).to_le_bytes());
                    b.extend_from_slice(p.as_bytes());
                }
            }
            for n in [s.start, s.end, s.start_line, s.end_line] {
                b.extend_from_slice(&(n as u64).to_le_bytes());
            }
            b.extend_from_slice(&(s.name.len() as u32).to_le_bytes());
            b.extend_from_slice(s.name.as_bytes());
            by_path.entry(s.path.as_str()).or_insert(i as u32);
        }
        framed(b)
    }

    struct Reader<'a>(&'a [u8]);

    impl<'a> Reader<'a> {
        fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
            if self.0.len() < n {
                return Err("truncated response".into());
            }
            let (head, rest) = self.0.split_at(n);
            self.0 = rest;
            Ok(head)
        }
        fn u8(&mut self) -> Result<u8, String> {
            Ok(self.take(1)?[0])
        }
        fn u32(&mut self) -> Result<u32, String> {
            let mut a = [0u8; 4];
            a.copy_from_slice(self.take(4)?);
            Ok(u32::from_le_bytes(a))
        }
        fn u64(&mut self) -> Result<usize, String> {
            let mut a = [0u8; 8];
            a.copy_from_slice(self.take(8)?);
            usize::try_from(u64::from_le_bytes(a)).map_err(|_| "offset out of range".to_owned())
        }
        fn string(&mut self) -> Result<String, String> {
            let len = self.u32()? as usize;
            std::str::from_utf8(self.take(len)?)
                .map(str::to_owned)
                .map_err(|_| "a name is not UTF-8".to_owned())
        }
    }

    /// Decodes a response body (without its length frame) for a request in `language`,
    /// checking for interrupts once per symbol ([`crate::contract::interrupt`]).
    pub fn decode(language: Language, body: &[u8]) -> Result<Result<Outline, ParserLimit>, String> {
        let mut r = Reader(body);
        match r.u8()? {
            0 => {}
            1 => {
                let code = r.u8()?;
                return ParserLimit::ALL
                    .get(usize::from(code))
                    .map(|l| Err(*l))
                    .ok_or_else(|| format!("unknown limit code {code}"));
            }
            t => return Err(format!("unknown response tag {t}")),
        }
        let has_errors = r.u8()? != 0;
        let count = r.u32()? as usize;
        if count > OUTLINE_MAX_SYMBOLS {
            return Err(format!("{count} symbols is over the cap"));
        }
        let mut symbols: Vec<Symbol> = Vec::with_capacity(count);
        let mut name_bytes = 0usize;
        for i in 0..count {
            crate::contract::interrupt::check();
            let kind = *KINDS
                .get(usize::from(r.u8()?))
                .ok_or("unknown symbol kind")?;
            let parent = match r.u32()? {
                NO_PARENT => None,
                INLINE_PARENT => Some(r.string()?),
                p if (p as usize) < i => Some(symbols[p as usize].path.clone()),
                p => return Err(format!("symbol {i} names parent {p}")),
            };
            let (start, end, start_line, end_line) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
            // Checked here, once: every user of a symbol subtracts its start from its end
            // (helper-61: a helper that answered `end < start` would have wrapped in release).
            if start > end || start_line > end_line {
                return Err(format!(
                    "symbol {i} ends before it starts ({start}..{end}, lines {start_line}..{end_line})"
                ));
            }
            let name = r.string()?;
            let path = super::join_path(parent.as_deref(), &name);
            name_bytes += name.len() + path.len() + parent.as_ref().map_or(0, String::len);
            if name_bytes > OUTLINE_MAX_NAME_BYTES {
                return Err("names over the cap".into());
            }
            symbols.push(Symbol {
                kind,
                name,
                parent,
                path,
                start,
                end,
                start_line,
                end_line,
            });
        }
        if !r.0.is_empty() {
            return Err("trailing bytes after the outline".into());
        }
        let mut o = language.empty_outline(has_errors);
        o.symbols = symbols;
        Ok(Ok(o))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(kind: &'static str, name: &str, parent: Option<&str>, start: usize) -> Symbol {
        Symbol {
            kind,
            name: name.into(),
            parent: parent.map(Into::into),
            path: match parent {
                Some(p) => format!("{p}.{name}"),
                None => name.into(),
            },
            start,
            end: start + 3,
            start_line: start + 1,
            end_line: start + 2,
        }
    }

    /// The helper's wire carries an outline exactly: kinds, names, paths rebuilt from parents
    /// by index or inline (a TOML table under an undeclared `a.b`), spans and lines.
    #[test]
    fn an_outline_survives_the_wire() {
        let mut o = Language::Toml.empty_outline(true);
        o.symbols = vec![
            sym("object", "server", None, 0),
            sym("config_item", "port", Some("server"), 1),
            sym("object", "c", Some("a.b"), 2),
            sym("config_item", "🌟 x", Some("a.b.c"), 3),
            sym("code_block", "fence:L7", None, 4),
        ];
        let framed = wire::outline_response(&o);
        let (len, body) = framed.split_at(8);
        assert_eq!(
            u64::from_le_bytes(len.try_into().unwrap()) as usize,
            body.len()
        );
        let back = wire::decode(Language::Toml, body).unwrap().unwrap();
        assert_eq!(back, o);
        // Decoding checks for interrupts: a cancel pending at the first symbol ends it.
        assert!(crate::contract::interrupt::testing::interrupted_after(
            0,
            || { wire::decode(Language::Toml, body) }
        ));
    }

    /// Limits travel as their own answer, and a helper that answers garbage is reported, never
    /// trusted: truncated bodies, unknown tags, kinds or limits, forward parents, bad UTF-8.
    #[test]
    fn limits_and_malformed_answers() {
        for l in ParserLimit::ALL {
            let framed = wire::limit_response(l);
            assert_eq!(wire::decode(Language::Yaml, &framed[8..]), Ok(Err(l)));
        }
        let mut o = Language::Json.empty_outline(false);
        o.symbols = vec![sym("object", "a", None, 0), sym("array", "b", Some("a"), 1)];
        let body = wire::outline_response(&o)[8..].to_vec();
        for cut in 0..body.len() {
            assert!(wire::decode(Language::Json, &body[..cut]).is_err(), "{cut}");
        }
        let mut extra = body.clone();
        extra.push(0);
        assert!(wire::decode(Language::Json, &extra).is_err());
        for bad in [vec![2u8], vec![1, 99], vec![0, 0, 1, 0, 0, 0, 42]] {
            assert!(wire::decode(Language::Json, &bad).is_err(), "{bad:?}");
        }
        // Symbol 0 naming parent 0 (itself): refused.
        let mut fwd = body.clone();
        fwd[7..11].copy_from_slice(&0u32.to_le_bytes());
        assert!(wire::decode(Language::Json, &fwd).is_err());
        let mut utf = body;
        let last = utf.len() - 1;
        utf[last] = 0xFF;
        assert!(wire::decode(Language::Json, &utf).is_err());
        // A symbol that ends before it starts, in code points or in lines: refused, so that no
        // user of an outline subtracts its way past zero (helper-61).
        for (start, end, start_line, end_line) in
            [(5, 4, 1, 1), (4, 5, 2, 1), (usize::MAX, 0, 1, 1)]
        {
            let mut o = Language::Json.empty_outline(false);
            o.symbols = vec![Symbol {
                start,
                end,
                start_line,
                end_line,
                ..sym("object", "a", None, 0)
            }];
            let e = wire::decode(Language::Json, &wire::outline_response(&o)[8..]).unwrap_err();
            assert!(e.contains("ends before it starts"), "{e}");
        }
    }

    #[test]
    fn language_codes_round_trip_and_requests_carry_the_text() {
        for l in Language::ALL {
            assert_eq!(Language::from_code(l.code()), Some(l));
            let r = wire::request(l, "a: 1\n");
            let head: [u8; 9] = r[..9].try_into().unwrap();
            assert_eq!(wire::request_header(&head), Ok((l, 5, false)));
            assert_eq!(&r[9..], b"a: 1\n");
            let r = wire::request_in_lineage(l, b"t-1", "a: 1\n");
            let head: [u8; 9] = r[..9].try_into().unwrap();
            assert_eq!(wire::request_header(&head), Ok((l, 5, true)));
            assert_eq!(&r[9..], b"\x03t-1a: 1\n");
        }
        assert_eq!(Language::from_code(8), None);
        let mut head = [0u8; 9];
        head[0] = 8 | 0x80;
        assert!(wire::request_header(&head).is_err());
        // A lineage that does not fit its length byte is not sent.
        let long = vec![b'x'; 256];
        assert_eq!(
            wire::request_in_lineage(Language::Json, &long, "1"),
            wire::request(Language::Json, "1")
        );
    }
}
