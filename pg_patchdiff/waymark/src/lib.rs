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
mod counters;
mod ecma;
pub mod incremental;
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
/// With `old` (an earlier tree of this grammar, already edited to this text with
/// `Tree::edit`), tree-sitter reuses its unchanged subtrees: an incremental parse.
fn parse(
    language: tree_sitter::Language,
    text: &str,
    old: Option<&tree_sitter::Tree>,
) -> Option<tree_sitter::Tree> {
    let mut parser = tree_sitter::Parser::new();
    parser.set_language(&language).ok()?;
    parser.parse(text, old)
}

/// The tree a fresh outline of `text` walks, and whether it is the primary grammar's
/// ([`tree_sitter_language`]) rather than the `tsx` dialect of TypeScript.
///
/// TypeScript is parsed with the `typescript` dialect; when that reports syntax errors and the
/// `tsx` dialect of the same grammar parses the text without errors, the `tsx` tree is used
/// (the outline has no filename, and `.tsx` targets contain JSX).
fn fresh_tree(language: Language, text: &str) -> Option<(tree_sitter::Tree, bool)> {
    let tree = parse(tree_sitter_language(language), text, None);
    if language == Language::TypeScript
        && tree.as_ref().is_none_or(|t| t.root_node().has_error())
        && let Some(tsx) = parse(tree_sitter_typescript::LANGUAGE_TSX.into(), text, None)
        && !tsx.root_node().has_error()
    {
        return Some((tsx, false));
    }
    tree.map(|t| (t, true))
}

/// The outline of `text` in `language`.
///
/// See [`fresh_tree`] for the TypeScript dialects.
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
    if counters::past_the_counters(language, text) {
        return Ok(language.empty_outline(true));
    }
    let Some((tree, _)) = fresh_tree(language, text) else {
        return Ok(language.empty_outline(true));
    };
    // The tree is freed before the symbols are converted: the two are never held at once.
    extract(language, text, tree)
}

/// The outline of `text` from its syntax `tree`, which is dropped before the symbols are
/// converted.
fn extract(
    language: Language,
    text: &str,
    tree: tree_sitter::Tree,
) -> Result<Outline, ParserLimit> {
    let (symbols, has_errors) = collect(language, text, &tree);
    drop(tree);
    finish(language, symbols, has_errors)
}

/// The symbols of `tree` before conversion, and whether the tree has syntax errors.
fn collect<'a>(
    language: Language,
    text: &'a str,
    tree: &tree_sitter::Tree,
) -> (common::Collector<'a>, bool) {
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
    (out, root.has_error())
}

fn finish(
    language: Language,
    out: common::Collector<'_>,
    has_errors: bool,
) -> Result<Outline, ParserLimit> {
    out.finish().map(|symbols| {
        let mut o = language.empty_outline(has_errors);
        o.symbols = symbols;
        o
    })
}
