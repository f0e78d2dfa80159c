//! TOML: `[table]` and `[[array]]` headers (`object`), key/value pairs (`config_item`,
//! `object` for inline tables, `array` for arrays) and keyed inline-array elements.

use std::collections::{BTreeMap, HashMap};

use crate::common::{
    ARRAY, CONFIG_ITEM, Collector, IdPicker, MAX_DEPTH, OBJECT, children, join_path, keyed_name,
    strip_quotes, unescape,
};
use tree_sitter::{Node, TreeCursor};

enum Task<'t> {
    /// The pairs of an inline table.
    Pairs {
        node: Node<'t>,
        parent: Option<String>,
        depth: usize,
    },
    /// The elements of an inline array named `key`.
    Array {
        node: Node<'t>,
        key: String,
        parent: Option<String>,
        depth: usize,
    },
}

/// One `key = value` pair.
struct Member<'t> {
    pair: Node<'t>,
    name: String,
    value: Option<Node<'t>>,
}

struct Walk<'c, 'a, 't> {
    out: &'c mut Collector<'a>,
    cursor: TreeCursor<'t>,
    kids: Vec<(Node<'t>, Option<&'t str>)>,
    stack: Vec<Task<'t>>,
}

fn is_key(kind: &str) -> bool {
    matches!(kind, "bare_key" | "quoted_key" | "dotted_key")
}

pub(crate) fn extract(out: &mut Collector<'_>, root: Node<'_>) {
    let mut walk = Walk {
        out,
        cursor: root.walk(),
        kids: Vec::new(),
        stack: Vec::new(),
    };
    children(&mut walk.cursor, root, &mut walk.kids);
    let top: Vec<Node<'_>> = walk.kids.iter().map(|k| k.0).collect();
    // Array-of-tables key (segments joined by NUL) -> the path of its current element.
    let mut current: BTreeMap<String, String> = BTreeMap::new();
    // (resolved parent path, array name) -> tables seen so far.
    let mut counts: HashMap<(Option<String>, String), usize> = HashMap::new();
    let mut top_pairs = Vec::new();
    for child in top {
        match child.kind() {
            "pair" => {
                top_pairs.clear();
                top_pairs.push(child);
                let members = walk.members_of(&top_pairs);
                walk.emit(members, None, 0);
            }
            "table" | "table_array_element" => {
                let is_array = child.kind() == "table_array_element";
                // Header key, closing bracket, pairs.
                children(&mut walk.cursor, child, &mut walk.kids);
                let key = walk.kids.iter().map(|k| k.0).find(|n| is_key(n.kind()));
                let Some(key) = key else { continue };
                let header_end = walk
                    .kids
                    .iter()
                    .map(|k| k.0)
                    .find(|n| matches!(n.kind(), "]" | "]]"))
                    .map_or(child.start_byte(), |n| n.end_byte());
                let pairs: Vec<Node<'_>> = walk
                    .kids
                    .iter()
                    .map(|k| k.0)
                    .filter(|n| n.kind() == "pair")
                    .collect();
                let segments = key_segments(walk.out, key);
                let Some((last, prefix)) = segments.split_last() else {
                    continue;
                };
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
                let members = walk.members_of(&pairs);
                let name = if is_array {
                    let counter = counts.entry((parent.clone(), last.clone())).or_insert(0);
                    let index = *counter;
                    *counter += 1;
                    keyed_name(last, element_id(walk.out, &members).as_deref(), index)
                } else {
                    last.clone()
                };
                // Header through the last pair (not trailing comments or blank lines).
                let end = pairs
                    .iter()
                    .map(|p| p.end_byte())
                    .fold(header_end, usize::max);
                let index = walk.out.push(OBJECT, name, parent, child.start_byte(), end);
                let path = walk.out.path(index);
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
                walk.emit(members, Some(path), 1);
            }
            _ => {}
        }
        walk.drain();
    }
}

impl<'t> Walk<'_, '_, 't> {
    /// Key names and values of `pairs`.
    fn members_of(&mut self, pairs: &[Node<'t>]) -> Vec<Member<'t>> {
        let mut members = Vec::with_capacity(pairs.len());
        for &pair in pairs {
            // `key = value`: no comment can stand between them.
            let Some(key) = pair.named_child(0) else {
                continue;
            };
            let value = pair.named_child(1).filter(|v| v.kind() != "comment");
            let name = key_segments(self.out, key).join(".");
            members.push(Member { pair, name, value });
        }
        members
    }

    /// The pairs of a table or inline table as symbols under `parent`.
    fn emit(&mut self, members: Vec<Member<'t>>, parent: Option<String>, depth: usize) {
        for Member { pair, name, value } in members {
            if self.out.full() {
                return;
            }
            let kind = match value.map(|v| v.kind()) {
                Some("inline_table") => OBJECT,
                Some("array") => ARRAY,
                _ => CONFIG_ITEM,
            };
            let (s, e) = (pair.start_byte(), pair.end_byte());
            let index = self.out.push(kind, name, parent.clone(), s, e);
            let Some(value) = value else { continue };
            if depth + 1 >= MAX_DEPTH {
                continue;
            }
            if kind == OBJECT {
                let path = Some(self.out.path(index));
                self.stack.push(Task::Pairs {
                    node: value,
                    parent: path,
                    depth: depth + 1,
                });
            } else if kind == ARRAY {
                let key = self.out.syms[index].name.clone();
                let parent = parent.clone();
                self.stack.push(Task::Array {
                    node: value,
                    key,
                    parent,
                    depth: depth + 1,
                });
            }
        }
    }

    fn pairs_of(&mut self, node: Node<'t>) -> Vec<Node<'t>> {
        children(&mut self.cursor, node, &mut self.kids);
        self.kids
            .iter()
            .map(|k| k.0)
            .filter(|n| n.kind() == "pair")
            .collect()
    }

    fn drain(&mut self) {
        while let Some(task) = self.stack.pop() {
            if self.out.full() {
                break;
            }
            match task {
                Task::Pairs {
                    node,
                    parent,
                    depth,
                } => {
                    let pairs = self.pairs_of(node);
                    let members = self.members_of(&pairs);
                    self.emit(members, parent, depth);
                }
                Task::Array {
                    node,
                    key,
                    parent,
                    depth,
                } => {
                    children(&mut self.cursor, node, &mut self.kids);
                    let elements: Vec<Node<'t>> = self
                        .kids
                        .iter()
                        .map(|k| k.0)
                        .filter(|n| n.is_named() && !matches!(n.kind(), "comment" | "ERROR"))
                        .collect();
                    for (index, element) in elements.into_iter().enumerate() {
                        if self.out.full() {
                            break;
                        }
                        let (s, e) = (element.start_byte(), element.end_byte());
                        match element.kind() {
                            "inline_table" => {
                                let pairs = self.pairs_of(element);
                                let members = self.members_of(&pairs);
                                let id = element_id(self.out, &members);
                                let name = keyed_name(&key, id.as_deref(), index);
                                let i = self.out.push(OBJECT, name, parent.clone(), s, e);
                                if depth + 1 < MAX_DEPTH {
                                    let path = Some(self.out.path(i));
                                    self.emit(members, path, depth + 1);
                                }
                            }
                            "array" => {
                                let name = keyed_name(&key, None, index);
                                self.out.push(ARRAY, name.clone(), parent.clone(), s, e);
                                if depth + 1 < MAX_DEPTH {
                                    self.stack.push(Task::Array {
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
}

/// The decoded segments of a bare, quoted or dotted key.
fn key_segments(out: &Collector<'_>, key: Node<'_>) -> Vec<String> {
    if key.kind() == "bare_key" {
        return vec![out.text_of(key).to_owned()];
    }
    let mut segments = Vec::new();
    // Flatten nested dotted keys with an explicit stack.
    let mut stack = vec![key];
    while let Some(node) = stack.pop() {
        match node.kind() {
            "dotted_key" => {
                let mut c = node.walk();
                let parts: Vec<Node<'_>> = node.named_children(&mut c).collect();
                stack.extend(parts.into_iter().rev());
            }
            "quoted_key" => segments.push(string_text(out.text_of(node))),
            "comment" => {}
            _ => segments.push(out.text_of(node).to_owned()),
        }
    }
    segments
}

/// The value of a TOML string token: basic strings decoded, literal strings as written
/// (a multi-line string's first newline removed).
fn string_text(raw: &str) -> String {
    if raw.starts_with("\"\"\"") {
        let inner = strip_quotes(raw, "\"\"\"");
        unescape(inner.strip_prefix('\n').unwrap_or(inner))
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
fn element_id(out: &Collector<'_>, members: &[Member<'_>]) -> Option<String> {
    let mut picker = IdPicker::default();
    for member in members {
        let Some(rank) = picker.wants(&member.name) else {
            continue;
        };
        let Some(value) = member.value else { continue };
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
