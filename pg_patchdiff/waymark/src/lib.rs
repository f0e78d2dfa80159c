//! patchdiff-waymark: the structural scope engine ("Waymark" in the contract).
//!
//! Parses canonical (LF) target text with a tree-sitter grammar chosen by filename and content
//! type, and returns its symbols as a [`patchdiff_engine::scope::Outline`]. Pure computation:
//! no I/O, no clock, no global state.
//!
//! Every extractor walks the syntax tree with an explicit work stack (never recursion), so
//! deeply nested input cannot overflow the thread's stack; symbols nested more than
//! `MAX_DEPTH` (128) levels deep are not listed. The naming rules per language are documented
//! in `docs/structural-names.md`.

use patchdiff_engine::scope::Outline;

mod common;
mod ecma;
mod json;
mod markdown;
mod python;
mod shell;
mod toml;
mod yaml;

/// The engine's name and version, recorded with every observation.
pub const ENGINE: &str = concat!("patchdiff-waymark@", env!("CARGO_PKG_VERSION"));

/// The grammars and their exact versions (pinned with `=` in Cargo.toml).
pub const GRAMMAR_PYTHON: &str = "tree-sitter-python@0.25.0";
pub const GRAMMAR_TYPESCRIPT: &str = "tree-sitter-typescript@0.23.2";
pub const GRAMMAR_JAVASCRIPT: &str = "tree-sitter-javascript@0.25.0";
pub const GRAMMAR_JSON: &str = "tree-sitter-json@0.24.8";
pub const GRAMMAR_MARKDOWN: &str = "tree-sitter-md@0.5.4";
pub const GRAMMAR_YAML: &str = "tree-sitter-yaml@0.7.2";
pub const GRAMMAR_TOML: &str = "tree-sitter-toml-ng@0.7.0";
pub const GRAMMAR_SHELL: &str = "tree-sitter-bash@0.25.1";

/// The languages Waymark parses.
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

    fn ts_language(self) -> tree_sitter::Language {
        match self {
            Language::Python => tree_sitter_python::LANGUAGE.into(),
            Language::TypeScript => tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
            Language::JavaScript => tree_sitter_javascript::LANGUAGE.into(),
            Language::Json => tree_sitter_json::LANGUAGE.into(),
            Language::Markdown => tree_sitter_md::LANGUAGE.into(),
            Language::Yaml => tree_sitter_yaml::LANGUAGE.into(),
            Language::Toml => tree_sitter_toml_ng::LANGUAGE.into(),
            Language::Shell => tree_sitter_bash::LANGUAGE.into(),
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

/// Why a parse produced no tree.
enum NoTree {
    /// The grammar could not be loaded, or the parser gave up.
    Failed,
    /// `cancel` asked to stop.
    Cancelled,
}

fn parse(
    language: tree_sitter::Language,
    text: &str,
    cancel: &dyn Fn() -> bool,
) -> Result<tree_sitter::Tree, NoTree> {
    let mut parser = tree_sitter::Parser::new();
    parser.set_language(&language).map_err(|_| NoTree::Failed)?;
    let bytes = text.as_bytes();
    let mut cancelled = false;
    // Called from C by tree-sitter while it parses: it must not panic.
    let mut progress = |_: &tree_sitter::ParseState| {
        if cancel() {
            cancelled = true;
            std::ops::ControlFlow::Break(())
        } else {
            std::ops::ControlFlow::Continue(())
        }
    };
    let options = tree_sitter::ParseOptions::new().progress_callback(&mut progress);
    let tree = parser.parse_with_options(
        &mut |at: usize, _| bytes.get(at..).unwrap_or_default(),
        None,
        Some(options),
    );
    match tree {
        Some(t) => Ok(t),
        None if cancelled => Err(NoTree::Cancelled),
        None => Err(NoTree::Failed),
    }
}

/// The outline of `text` in `language`.
///
/// TypeScript is parsed with the `typescript` dialect; when that reports syntax errors and the
/// `tsx` dialect of the same grammar parses the text without errors, the `tsx` tree is used
/// (the outline has no filename, and `.tsx` targets contain JSX).
pub fn outline(language: Language, text: &str) -> Outline {
    outline_cancellable(language, text, &|| false).expect("never cancelled")
}

/// [`outline`], asking `cancel` now and then while tree-sitter parses (a 1 MiB file takes a few
/// hundred milliseconds); `None` as soon as it answers `true`. `cancel` is called from inside the
/// C parser and must not panic or unwind.
pub fn outline_cancellable(
    language: Language,
    text: &str,
    cancel: &dyn Fn() -> bool,
) -> Option<Outline> {
    let empty = |has_errors| Outline {
        language: language.name(),
        engine: ENGINE,
        grammar: language.grammar(),
        has_errors,
        symbols: Vec::new(),
    };
    // tree-sitter addresses bytes with u32.
    if u32::try_from(text.len()).is_err() {
        return Some(empty(true));
    }
    let mut tree = match parse(language.ts_language(), text, cancel) {
        Err(NoTree::Cancelled) => return None,
        Err(NoTree::Failed) => None,
        Ok(t) => Some(t),
    };
    if language == Language::TypeScript && tree.as_ref().is_none_or(|t| t.root_node().has_error()) {
        match parse(tree_sitter_typescript::LANGUAGE_TSX.into(), text, cancel) {
            Err(NoTree::Cancelled) => return None,
            Ok(tsx) if !tsx.root_node().has_error() => tree = Some(tsx),
            _ => {}
        }
    }
    let Some(tree) = tree else {
        return Some(empty(true));
    };
    let root = tree.root_node();
    let mut out = common::Collector::new(text);
    match language {
        Language::Python => python::extract(&mut out, root),
        Language::TypeScript | Language::JavaScript => ecma::extract(&mut out, root),
        Language::Json => json::extract(&mut out, root),
        Language::Markdown => markdown::extract(&mut out, root),
        Language::Yaml => yaml::extract(&mut out, root),
        Language::Toml => toml::extract(&mut out, root),
        Language::Shell => shell::extract(&mut out, root),
    }
    Some(Outline {
        language: language.name(),
        engine: ENGINE,
        grammar: language.grammar(),
        has_errors: root.has_error(),
        symbols: out.finish(),
    })
}
