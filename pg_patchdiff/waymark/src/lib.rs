//! patchdiff-waymark: the structural scope engine ("Waymark" in the contract).
//!
//! Parses canonical (LF) target text with a tree-sitter grammar chosen by filename and content
//! type, and returns its symbols as a [`patchdiff_engine::api::scope::Outline`]. Pure computation:
//! no I/O, no clock, no global state.
//!
//! Every extractor walks the syntax tree with an explicit work stack (never recursion), so
//! deeply nested input cannot overflow the thread's stack; symbols nested more than
//! `MAX_DEPTH` (128) levels deep are not listed. The naming rules per language are documented
//! in `docs/structural-names.md`.

use patchdiff_engine::api::scope::Outline;

mod common;
mod ecma;
mod json;
mod markdown;
mod python;
mod shell;
mod toml;
mod yaml;

pub mod helper;

pub use patchdiff_engine::api::scope::{
    ENGINE, GRAMMAR_JAVASCRIPT, GRAMMAR_JSON, GRAMMAR_MARKDOWN, GRAMMAR_PYTHON, GRAMMAR_SHELL,
    GRAMMAR_TOML, GRAMMAR_TYPESCRIPT, GRAMMAR_YAML, Language, ParserLimit, language_for,
};

/// The tree-sitter grammar of `language` (the TypeScript dialect for TypeScript).
pub fn tree_sitter_language(language: Language) -> tree_sitter::Language {
    match language {
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

/// The syntax tree of `text`, or `None` when the grammar cannot be loaded or the parser gives up.
fn parse(language: tree_sitter::Language, text: &str) -> Option<tree_sitter::Tree> {
    let mut parser = tree_sitter::Parser::new();
    parser.set_language(&language).ok()?;
    parser.parse(text, None)
}

/// The outline of `text` in `language`.
///
/// TypeScript is parsed with the `typescript` dialect; when that reports syntax errors and the
/// `tsx` dialect of the same grammar parses the text without errors, the `tsx` tree is used
/// (the outline has no filename, and `.tsx` targets contain JSX).
///
/// An outline over the caps of [`patchdiff_engine::api::scope::OUTLINE_MAX_SYMBOLS`] and
/// [`patchdiff_engine::api::scope::OUTLINE_MAX_NAME_BYTES`] is refused while it is built, not after.
///
/// This runs third-party C code (tree-sitter and its grammars, some of which abort the process
/// on pathological input): call it only in a process that may die, the parser helper
/// `patchdiff-waymark-helper`, never inside a PostgreSQL backend.
pub fn outline(language: Language, text: &str) -> Result<Outline, ParserLimit> {
    // tree-sitter addresses bytes with u32.
    if u32::try_from(text.len()).is_err() {
        return Err(ParserLimit::Input);
    }
    let mut tree = parse(tree_sitter_language(language), text);
    if language == Language::TypeScript
        && tree.as_ref().is_none_or(|t| t.root_node().has_error())
        && let Some(tsx) = parse(tree_sitter_typescript::LANGUAGE_TSX.into(), text)
        && !tsx.root_node().has_error()
    {
        tree = Some(tsx);
    }
    let Some(tree) = tree else {
        return Ok(language.empty_outline(true));
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
    let has_errors = root.has_error();
    // The tree is freed before the symbols are converted: the two are never held at once.
    drop(tree);
    out.finish().map(|symbols| {
        let mut o = language.empty_outline(has_errors);
        o.symbols = symbols;
        o
    })
}
