//! Markdown: ATX and setext headings (`section`), table rows (`table_row`) and fenced code
//! blocks (`code_block`).
//!
//! tree-sitter-md nests only ATX headings into `section` nodes, so sections are computed
//! here: a heading's section ends where the next heading of the same or a higher level (a
//! lower or equal number) in the same container (document, list item or block quote) starts,
//! or where its container ends. Its end is the end of the last block's content before that
//! point (block-continuation markers such as `> ` and trailing whitespace excluded).

use crate::common::{CODE_BLOCK, Collector, SECTION, TABLE_ROW, field, trim_end};
use tree_sitter::Node;

struct Open {
    level: u8,
    index: usize,
    container: usize,
}

fn is_container(kind: &str) -> bool {
    matches!(kind, "list_item" | "block_quote")
}

fn is_block(kind: &str) -> bool {
    matches!(
        kind,
        "paragraph"
            | "atx_heading"
            | "setext_heading"
            | "fenced_code_block"
            | "indented_code_block"
            | "pipe_table"
            | "list"
            | "block_quote"
            | "thematic_break"
            | "html_block"
            | "link_reference_definition"
            | "minus_metadata"
            | "plus_metadata"
    )
}

/// Nodes whose children hold no headings, rows or fences.
fn is_opaque(kind: &str) -> bool {
    matches!(
        kind,
        "paragraph"
            | "inline"
            | "atx_heading"
            | "setext_heading"
            | "fenced_code_block"
            | "indented_code_block"
            | "pipe_table_row"
            | "pipe_table_header"
            | "pipe_table_delimiter_row"
            | "html_block"
            | "link_reference_definition"
            | "minus_metadata"
            | "plus_metadata"
    )
}

struct State<'t> {
    open: Vec<Open>,
    containers: Vec<usize>,
    last_block: Option<Node<'t>>,
}

impl State<'_> {
    /// Ends the innermost open section at the content end of the last finished block.
    fn close_top(&mut self, out: &mut Collector<'_>) {
        let Some(top) = self.open.pop() else { return };
        let sym = &out.syms[top.index];
        let end = self.last_block.map_or(sym.end, content_end).max(sym.start);
        let end = trim_end(out.text.as_bytes(), sym.start, end);
        out.syms[top.index].end = end;
    }

    fn parent(&self, out: &Collector<'_>) -> Option<String> {
        self.open.last().map(|o| out.path(o.index))
    }
}

pub(crate) fn extract(out: &mut Collector<'_>, root: Node<'_>) {
    let mut state = State {
        open: Vec::new(),
        containers: vec![root.id()],
        last_block: None,
    };
    let mut cursor = root.walk();
    'walk: loop {
        if out.full() {
            break;
        }
        let node = cursor.node();
        enter(out, &mut state, node);
        if !is_opaque(node.kind()) && cursor.goto_first_child() {
            continue;
        }
        loop {
            leave(out, &mut state, cursor.node());
            if cursor.goto_next_sibling() {
                break;
            }
            if !cursor.goto_parent() {
                break 'walk;
            }
        }
    }
    while !state.open.is_empty() {
        state.close_top(out);
    }
}

fn enter<'t>(out: &mut Collector<'_>, state: &mut State<'t>, node: Node<'t>) {
    match node.kind() {
        kind if is_container(kind) => state.containers.push(node.id()),
        "atx_heading" | "setext_heading" => {
            let level = heading_level(node);
            let container = state.containers.last().copied().unwrap_or(0);
            while state
                .open
                .last()
                .is_some_and(|o| o.container == container && o.level >= level)
            {
                state.close_top(out);
            }
            let name = heading_name(out, node);
            let parent = state.parent(out);
            // The end is set when the section closes.
            let index = out.push(SECTION, name, parent, node.start_byte(), node.end_byte());
            state.open.push(Open {
                level,
                index,
                container,
            });
        }
        "pipe_table_row" => {
            let mut c = node.walk();
            let first = node
                .named_children(&mut c)
                .find(|n| n.kind() == "pipe_table_cell");
            let cell = first.map_or("", |n| out.text_of(n).trim_matches([' ', '\t']));
            let name = format!("row:{cell}");
            let parent = state.parent(out);
            out.push(
                TABLE_ROW,
                name,
                parent,
                node.start_byte(),
                content_end(node),
            );
        }
        "fenced_code_block" => {
            let name = format!("fence:L{}", node.start_position().row + 1);
            let parent = state.parent(out);
            out.push(
                CODE_BLOCK,
                name,
                parent,
                node.start_byte(),
                content_end(node),
            );
        }
        _ => {}
    }
}

fn leave<'t>(out: &mut Collector<'_>, state: &mut State<'t>, node: Node<'t>) {
    let kind = node.kind();
    if is_container(kind) {
        let id = node.id();
        while state.open.last().is_some_and(|o| o.container == id) {
            state.close_top(out);
        }
        state.containers.pop();
    }
    if is_block(kind) {
        state.last_block = Some(node);
    }
}

fn heading_level(node: Node<'_>) -> u8 {
    let mut c = node.walk();
    for child in node.children(&mut c) {
        match child.kind() {
            "atx_h1_marker" | "setext_h1_underline" => return 1,
            "atx_h2_marker" | "setext_h2_underline" => return 2,
            "atx_h3_marker" => return 3,
            "atx_h4_marker" => return 4,
            "atx_h5_marker" => return 5,
            "atx_h6_marker" => return 6,
            _ => {}
        }
    }
    1
}

/// The heading's text as written: without the `#` marker, an ATX closing sequence
/// (`#`s preceded by a space or tab) and surrounding spaces and tabs; a setext heading's
/// text without its underline.
fn heading_name(out: &Collector<'_>, node: Node<'_>) -> String {
    let Some(content) = field(node, "heading_content") else {
        return String::new();
    };
    let text = out.slice(content.start_byte(), content_end(content));
    let text = text.trim_matches([' ', '\t', '\n']);
    if node.kind() == "setext_heading" {
        return text.to_owned();
    }
    let without = text.trim_end_matches('#');
    if without.len() < text.len() && (without.is_empty() || without.ends_with([' ', '\t'])) {
        without.trim_matches([' ', '\t']).to_owned()
    } else {
        text.to_owned()
    }
}

/// The end of a node's content: descends into last children and stops before trailing
/// block-continuation markers (`> `, indentation), which belong to the next line. `inline`
/// nodes (text, whose inner tokens such as `_` or `*` are not blocks) end where they end.
fn content_end(node: Node<'_>) -> usize {
    let mut n = node;
    let mut kids = Vec::new();
    loop {
        if n.kind() == "inline" {
            return n.end_byte();
        }
        let mut c = n.walk();
        kids.clear();
        kids.extend(n.children(&mut c));
        let Some(&last) = kids.last() else {
            return n.end_byte();
        };
        if last.kind() != "block_continuation" {
            n = last;
            continue;
        }
        let mut i = kids.len() - 1;
        while i > 0 && kids[i - 1].kind() == "block_continuation" {
            i -= 1;
        }
        return kids[i].start_byte();
    }
}
