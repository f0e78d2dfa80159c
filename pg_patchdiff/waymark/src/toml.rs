//! TOML: `[table]` and `[[array]]` headers (`object`), key/value pairs (`config_item`,
//! `object` for inline tables, `array` for arrays) and keyed inline-array elements.

use std::collections::{BTreeMap, HashMap};

use crate::common::{
    ARRAY, CONFIG_ITEM, Collector, IdPicker, MAX_DEPTH, OBJECT, children, join_path, keyed_name,
    strip_quotes, unescape,
};
use tree_sitter::Node;

enum Task<'t> {
    /// The pairs of a table body or an inline table.
    Pairs { node: Node<'t>, parent: Option<String>, depth: usize },
    /// The elements of an inline array named `key`.
    Array { node: Node<'t>, key: String, parent: Option<String>, depth: usize },
}

pub(crate) fn extract(out: &mut Collector<'_>, root: Node<'_>) {
    let mut cursor = root.walk();
    let mut kids = Vec::new();
    children(&mut cursor, root, &mut kids);
    // Array-of-tables key (segments joined by NUL) -> the path of its current element.
    let mut current: BTreeMap<String, String> = BTreeMap::new();
    // (resolved parent path, array name) -> tables seen so far.
    let mut counts: HashMap<(Option<String>, String), usize> = HashMap::new();
    let mut stack = Vec::new();
    for &(child, _) in kids.iter() {
        match child.kind() {
            "pair" => pair(out, &mut stack, child, None, 0),
            "table" | "table_array_element" => {
                let is_array = child.kind() == "table_array_element";
                let mut c = child.walk();
                let Some(key) = child
                    .named_children(&mut c)
                    .find(|n| matches!(n.kind(), "bare_key" | "quoted_key" | "dotted_key"))
                else {
                    continue;
                };
                let segments = key_segments(out, key);
                let Some((last, prefix)) = segments.split_last() else { continue };
                // Resolve the prefix through arrays of tables: `[a.b]` after `[[a]]` lives in
                // the current element of `a`.
                let mut parent: Option<String> = None;
                let mut raw_key = String::new();
                for segment in prefix {
                    if !raw_key.is_empty() {
                        raw_key.push('\0');
                    }
                    raw_key.push_str(segment);
                    parent = match current.get(&raw_key) {
                        Some(element) => Some(element.clone()),
                        None => Some(join_path(parent.as_deref(), segment)),
                    };
                }
                let name = if is_array {
                    let counter = counts.entry((parent.clone(), last.clone())).or_insert(0);
                    let index = *counter;
                    *counter += 1;
                    keyed_name(last, table_id(out, child).as_deref(), index)
                } else {
                    last.clone()
                };
                // Header through the last pair (not trailing comments or blank lines).
                let mut end = header_end(child);
                let mut c = child.walk();
                for n in child.named_children(&mut c) {
                    if n.kind() == "pair" {
                        end = end.max(n.end_byte());
                    }
                }
                let index = out.push(OBJECT, name, parent, child.start_byte(), end);
                let path = out.path(index);
                if is_array {
                    if !raw_key.is_empty() {
                        raw_key.push('\0');
                    }
                    raw_key.push_str(last);
                    // A new element: arrays of tables below the previous element are gone.
                    let below = format!("{raw_key}\0");
                    let stale: Vec<String> = current
                        .range(below.clone()..)
                        .take_while(|(k, _)| k.starts_with(&below))
                        .map(|(k, _)| k.clone())
                        .collect();
                    for k in stale {
                        current.remove(&k);
                    }
                    current.insert(raw_key, path.clone());
                }
                stack.push(Task::Pairs { node: child, parent: Some(path), depth: 1 });
            }
            _ => {}
        }
        drain(out, &mut stack);
    }
}

fn drain<'t>(out: &mut Collector<'_>, stack: &mut Vec<Task<'t>>) {
    let mut kids = Vec::new();
    while let Some(task) = stack.pop() {
        match task {
            Task::Pairs { node, parent, depth } => {
                let mut c = node.walk();
                kids.clear();
                kids.extend(node.named_children(&mut c).filter(|n| n.kind() == "pair"));
                for &p in kids.iter() {
                    pair(out, stack, p, parent.clone(), depth);
                }
            }
            Task::Array { node, key, parent, depth } => {
                let mut c = node.walk();
                let elements: Vec<Node<'t>> = node
                    .named_children(&mut c)
                    .filter(|n| !matches!(n.kind(), "comment" | "ERROR"))
                    .collect();
                for (index, element) in elements.into_iter().enumerate() {
                    let (s, e) = (element.start_byte(), element.end_byte());
                    match element.kind() {
                        "inline_table" => {
                            let id = table_id(out, element);
                            let name = keyed_name(&key, id.as_deref(), index);
                            let i = out.push(OBJECT, name, parent.clone(), s, e);
                            if depth + 1 < MAX_DEPTH {
                                let path = Some(out.path(i));
                                stack.push(Task::Pairs { node: element, parent: path, depth: depth + 1 });
                            }
                        }
                        "array" => {
                            let name = keyed_name(&key, None, index);
                            out.push(ARRAY, name.clone(), parent.clone(), s, e);
                            if depth + 1 < MAX_DEPTH {
                                stack.push(Task::Array {
                                    node: element,
                                    key: name,
                                    parent: parent.clone(),
                                    depth: depth + 1,
                                });
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
    }
}

/// One `key = value` pair: the symbol, and tasks for inline tables and arrays.
fn pair<'t>(
    out: &mut Collector<'_>,
    stack: &mut Vec<Task<'t>>,
    node: Node<'t>,
    parent: Option<String>,
    depth: usize,
) {
    let mut c = node.walk();
    let mut named = node.named_children(&mut c).filter(|n| n.kind() != "comment");
    let Some(key) = named.next() else { return };
    let value = named.next();
    let name = key_segments(out, key).join(".");
    let kind = match value.map(|v| v.kind()) {
        Some("inline_table") => OBJECT,
        Some("array") => ARRAY,
        _ => CONFIG_ITEM,
    };
    let index = out.push(kind, name.clone(), parent.clone(), node.start_byte(), node.end_byte());
    let Some(value) = value else { return };
    if depth + 1 >= MAX_DEPTH {
        return;
    }
    if kind == OBJECT {
        let path = Some(out.path(index));
        stack.push(Task::Pairs { node: value, parent: path, depth: depth + 1 });
    } else if kind == ARRAY {
        stack.push(Task::Array { node: value, key: name, parent, depth: depth + 1 });
    }
}

/// The end of a table header (`]` / `]]`), or the node's start if there is none.
fn header_end(table: Node<'_>) -> usize {
    let mut c = table.walk();
    let close = table.children(&mut c).find(|n| matches!(n.kind(), "]" | "]]"));
    close.map_or(table.start_byte(), |n| n.end_byte())
}

/// The decoded segments of a bare, quoted or dotted key.
fn key_segments(out: &Collector<'_>, key: Node<'_>) -> Vec<String> {
    let mut segments = Vec::new();
    // Dotted keys nest (`a.b.c` is dotted_key(dotted_key(a, b), c) in some grammars), so
    // flatten with an explicit stack.
    let mut stack = vec![key];
    while let Some(node) = stack.pop() {
        match node.kind() {
            "dotted_key" => {
                let mut c = node.walk();
                let parts: Vec<Node<'_>> = node.named_children(&mut c).collect();
                stack.extend(parts.into_iter().rev());
            }
            "quoted_key" => segments.push(string_text(out.text_of(node))),
            _ => segments.push(out.text_of(node).to_owned()),
        }
    }
    segments
}

/// The value of a TOML string token: basic strings decoded, literal strings as written.
fn string_text(raw: &str) -> String {
    if raw.starts_with("\"\"\"") {
        unescape(strip_quotes(raw, "\"\"\"").strip_prefix('\n').unwrap_or(strip_quotes(raw, "\"\"\"")))
    } else if raw.starts_with("'''") {
        let inner = strip_quotes(raw, "'''");
        inner.strip_prefix('\n').unwrap_or(inner).to_owned()
    } else if raw.starts_with('"') {
        unescape(strip_quotes(raw, "\""))
    } else {
        strip_quotes(raw, "'").to_owned()
    }
}

/// The id of a table or inline table: its highest-priority id pair with a string or number.
fn table_id(out: &Collector<'_>, table: Node<'_>) -> Option<String> {
    let mut picker = IdPicker::default();
    let mut c = table.walk();
    for pair in table.named_children(&mut c) {
        if pair.kind() != "pair" {
            continue;
        }
        let mut pc = pair.walk();
        let mut named = pair.named_children(&mut pc).filter(|n| n.kind() != "comment");
        let (Some(key), Some(value)) = (named.next(), named.next()) else { continue };
        if key.kind() == "dotted_key" {
            continue;
        }
        let key = key_segments(out, key).join(".");
        let Some(rank) = picker.wants(&key) else { continue };
        let raw = out.text_of(value);
        match value.kind() {
            "string" => picker.offer(rank, string_text(raw)),
            "integer" | "float" => picker.offer(rank, raw.to_owned()),
            _ => continue,
        }
        if picker.done() {
            break;
        }
    }
    picker.take()
}
