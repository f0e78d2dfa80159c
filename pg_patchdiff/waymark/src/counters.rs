//! Texts past the counters of a grammar's scanner, which parse wrong without reporting an error.
//!
//! Some external scanners keep what they count in narrow integers, and wrap: tree-sitter-python
//! 0.25.0 keeps indentation widths in `uint16_t`, tree-sitter-md 0.5.4 its columns, indentation
//! and fence lengths in `uint8_t`, tree-sitter-yaml 0.7.2 its rows and columns in `int16_t`.
//! Past them the tree is wrong, often without an error node (helper-102: a method indented by
//! 8,192 tabs listed as a top-level function, a fence of 259 backticks closed by three, a
//! heading made of 256 spaces and `# Fake`; helper-98 and helper-104: YAML past line 32,768).
//! Such a text has no outline: no symbols, and syntax errors, so a caller reads and searches it
//! instead (docs/structural.md, "Limits"). The checks look at white space and line starts, in
//! one pass over the text.

use crate::Language;

/// Indentation a Python line may have: the scanner's widths are `uint16_t`, a tab counting 8.
const PYTHON_MAX_INDENT: usize = u16::MAX as usize;
/// Backslash-newline joins in one run of Python white space: the scanner skips the rest of such
/// a run at every token, so its time grows with the square of their number (helper-104: 16,384
/// took 3.3 s, 32,768 the whole 10 s of the helper's CPU limit; 4,096 took 0.2 s). At 256, a
/// text made of such runs costs about 1.5 µs a byte, 1.6 s for 1 MiB (at 4,096, 25 s).
const PYTHON_MAX_JOINS: usize = 256;
/// Columns of container markers and white space a Markdown line may start with, and the
/// length of a fence: `uint8_t` in the block scanner.
const MARKDOWN_MAX_PREFIX: usize = u8::MAX as usize;
/// Spaces in a row a YAML line may hold: columns are `int16_t` in the scanner.
const YAML_MAX_SPACES: usize = i16::MAX as usize;
/// The lines a YAML text may have, white space after them aside: rows are `int16_t`.
const YAML_MAX_LINES: usize = 32_768;

/// Whether `text` holds more than the scanner of `language` counts: its tree would be wrong
/// whether or not it has errors.
pub(crate) fn past_the_counters(language: Language, text: &str) -> bool {
    let bytes = text.as_bytes();
    match language {
        Language::Python => python_past(bytes),
        Language::Markdown => any_line(bytes, markdown_line),
        Language::Yaml => yaml_past_lines(bytes) || any_line(bytes, yaml_line),
        _ => false,
    }
}

fn any_line(bytes: &[u8], over: fn(&[u8]) -> bool) -> bool {
    let mut start = 0;
    loop {
        let end = memchr::memchr(b'\n', &bytes[start..]).map_or(bytes.len(), |i| start + i);
        if over(&bytes[start..end]) {
            return true;
        }
        if end == bytes.len() {
            return false;
        }
        start = end + 1;
    }
}

/// Whether a run of Python white space the scanner measures as indentation passes its count:
/// spaces count 1, tabs 8, a form feed or carriage return starts again from 0, and a backslash
/// before a line feed joins the next line to the run, whose width goes on adding up (helper-104:
/// 8,192 lines of a tab and a backslash made the nested `A.m.n` the method `A.n`). A run ends
/// at the first other byte, whose indentation it is; the rest of that line is not indentation,
/// and a line of white space alone indents nothing (helper-107: a blank line of 70,000 spaces
/// took a correct outline away). Also more joins in one run than [`PYTHON_MAX_JOINS`].
fn python_past(text: &[u8]) -> bool {
    let (mut width, mut joins, mut i) = (0usize, 0usize, 0usize);
    while i < text.len() {
        match text[i] {
            b' ' => width += 1,
            b'\t' => width += 8,
            b'\x0c' | b'\r' => width = 0,
            b'\n' => (width, joins) = (0, 0),
            b'\\' if text.get(i + 1) == Some(&b'\n') => {
                joins += 1;
                if joins > PYTHON_MAX_JOINS {
                    return true;
                }
                i += 1;
            }
            _ => {
                if width > PYTHON_MAX_INDENT {
                    return true;
                }
                // Not indentation: on to the line feed that ends this line.
                match memchr::memchr(b'\n', &text[i..]) {
                    Some(at) => i += at,
                    None => return false,
                }
                continue;
            }
        }
        i += 1;
    }
    false
}

/// A Markdown line's prefix of white space and container markers (`>`, and list markers `-`,
/// `+`, `*`, `1.`, `1)` followed by a space or tab), in columns (tabs to the next multiple of 4),
/// then a fence's length. A line of white space alone is a blank line, whatever its width
/// (helper-107: blank lines of 267 spaces in a real file's fences took its outline away).
fn markdown_line(line: &[u8]) -> bool {
    if line.iter().all(u8::is_ascii_whitespace) {
        return false;
    }
    let mut column = 0usize;
    let mut i = 0;
    while i < line.len() {
        let spaced = |at: usize| matches!(line.get(at), Some(b' ' | b'\t'));
        let marker = match line[i] {
            b' ' | b'>' => {
                column += 1;
                1
            }
            b'\t' => {
                column += 4 - column % 4;
                1
            }
            b'-' | b'+' | b'*' if spaced(i + 1) => {
                column += 1;
                1
            }
            b'0'..=b'9' => {
                let digits = line[i..].iter().take_while(|b| b.is_ascii_digit()).count();
                if digits <= 9
                    && matches!(line.get(i + digits), Some(b'.' | b')'))
                    && spaced(i + digits + 1)
                {
                    column += digits + 1;
                    digits + 1
                } else {
                    break;
                }
            }
            _ => break,
        };
        i += marker;
        if column > MARKDOWN_MAX_PREFIX {
            return true;
        }
    }
    let fence = match line.get(i) {
        Some(&c @ (b'`' | b'~')) => line[i..].iter().take_while(|&&b| b == c).count(),
        _ => 0,
    };
    fence > MARKDOWN_MAX_PREFIX
}

/// Whether a YAML text has anything but white space after its line 32,768. Past it the rows
/// wrap: trees with errors listed the pairs after that line as if at the top level and left out
/// the keys before it (helper-98: `top.k39999` as `k39999`), and a plain scalar of 65,536 lines
/// put the next key on the row it began on, so `d.e` was listed as a top-level `e` in a tree
/// without errors (helper-104).
fn yaml_past_lines(text: &[u8]) -> bool {
    memchr::memchr_iter(b'\n', text)
        .nth(YAML_MAX_LINES - 1)
        .is_some_and(|end| text[end + 1..].iter().any(|b| !b.is_ascii_whitespace()))
}

/// Whether a YAML line holds more spaces in a row than a column counts, before something else:
/// indentation (the only one YAML has, helper-102), or the space after an indicator such as
/// `- ` or `? `, which sets the column of what follows (helper-104: `-`, 65,537 spaces and
/// `a: 1` listed an invalid text without errors). Spaces that end a line set no column
/// (helper-107: a blank line of 33,000 spaces).
fn yaml_line(line: &[u8]) -> bool {
    let end = line
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(0, |last| last + 1);
    line[..end]
        .split(|&b| b != b' ')
        .any(|run| run.len() > YAML_MAX_SPACES)
}
