//! Texts past the counters of a grammar's scanner, which parse wrong without reporting an error.
//!
//! Some external scanners keep what they count in narrow integers, and wrap: tree-sitter-python
//! 0.25.0 keeps indentation widths in `uint16_t`, tree-sitter-md 0.5.4 its columns, indentation
//! and fence lengths in `uint8_t`, tree-sitter-yaml 0.7.2 its rows and columns in `int16_t`.
//! Past them the tree is wrong, often without an error node (helper-102: a method indented by
//! 8,192 tabs listed as a top-level function, a fence of 259 backticks closed by three, a
//! heading made of 256 spaces and `# Fake`; helper-98: YAML past line 32,768). Such a text has
//! no outline: no symbols, and syntax errors, so a caller reads and searches it instead
//! (docs/structural.md, "Limits"). The checks below look at each line's indentation only, so
//! they cost a pass over the line starts.

use crate::Language;

/// Indentation a Python line may have: the scanner's widths are `uint16_t`, a tab counting 8.
const PYTHON_MAX_INDENT: usize = u16::MAX as usize;
/// Columns of container markers and white space a Markdown line may start with, and the
/// length of a fence: `uint8_t` in the block scanner.
const MARKDOWN_MAX_PREFIX: usize = u8::MAX as usize;
/// Columns of indentation a YAML line may have: `int16_t` in the scanner.
const YAML_MAX_INDENT: usize = i16::MAX as usize;
/// The lines tree-sitter-yaml parses for sure ([`past_the_yaml_lines`]).
const YAML_MAX_LINES: usize = 32_768;

/// Whether some line of `text` holds more than the scanner of `language` counts: its tree
/// would be wrong whether or not it has errors.
pub(crate) fn past_the_counters(language: Language, text: &str) -> bool {
    let over: fn(&[u8]) -> bool = match language {
        Language::Python => python_line,
        Language::Markdown => markdown_line,
        Language::Yaml => yaml_line,
        _ => return false,
    };
    let bytes = text.as_bytes();
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

/// Whether a YAML text whose tree has errors has anything but white space after its line
/// 32,768: the rows are `int16_t`, and such a tree went wrong, not only incomplete (the lines
/// before went into error nodes, the pairs after were listed as if at the top level: a key that
/// exists was not found, `top.k39999` was `k39999`; helper-98). Streams that parse without
/// errors past that line (documents of plain pairs, flow mappings) were found right (every
/// symbol's path, kind and line equal to its document's parsed alone) and keep their outline.
pub(crate) fn past_the_yaml_lines(language: Language, text: &str) -> bool {
    language == Language::Yaml
        && memchr::memchr_iter(b'\n', text.as_bytes())
            .nth(YAML_MAX_LINES - 1)
            .is_some_and(|end| {
                text.as_bytes()[end + 1..]
                    .iter()
                    .any(|b| !b.is_ascii_whitespace())
            })
}

/// The scanner's indentation of a Python line: spaces count 1, tabs 8, a form feed or carriage
/// return starts again from 0.
fn python_line(line: &[u8]) -> bool {
    let mut width = 0usize;
    for &b in line {
        match b {
            b' ' => width += 1,
            b'\t' => width += 8,
            b'\x0c' | b'\r' => width = 0,
            _ => break,
        }
        if width > PYTHON_MAX_INDENT {
            return true;
        }
    }
    false
}

/// A Markdown line's prefix of white space and container markers (`>`, and list markers `-`,
/// `+`, `*`, `1.`, `1)` followed by a space or tab), in columns (tabs to the next multiple of 4),
/// then a fence's length.
fn markdown_line(line: &[u8]) -> bool {
    let mut column = 0usize;
    let mut i = 0;
    while i < line.len() {
        let spaced = |at: usize| matches!(line.get(at), Some(b' ' | b'\t'));
        let marker = match line[i] {
            b' ' => {
                column += 1;
                1
            }
            b'\t' => {
                column += 4 - column % 4;
                1
            }
            b'>' => {
                column += 1;
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

/// A YAML line's indentation in spaces (the only indentation YAML has).
fn yaml_line(line: &[u8]) -> bool {
    line.iter().take_while(|&&b| b == b' ').count() > YAML_MAX_INDENT
}
