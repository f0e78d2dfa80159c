//! YAML: mapping pairs (`object` / `array` / `config_item`) and keyed sequence items, like
//! JSON. Every document's root collection is at the top level.

use crate::common::{
    ARRAY, CONFIG_ITEM, Collector, IdPicker, MAX_DEPTH, OBJECT, children, keyed_name, nodes,
    strip_quotes, unescape,
};
use tree_sitter::Node;

enum Task<'t> {
    Mapping {
        node: Node<'t>,
        parent: Option<String>,
        depth: usize,
    },
    Sequence {
        node: Node<'t>,
        key: String,
        parent: Option<String>,
        depth: usize,
    },
}

/// The collection or scalar inside a `block_node` / `flow_node` (skipping anchors, tags and
/// comments); other nodes are returned as they are.
fn content(node: Node<'_>) -> Option<Node<'_>> {
    if !matches!(node.kind(), "block_node" | "flow_node") {
        return Some(node);
    }
    let mut cursor = node.walk();
    node.named_children(&mut cursor)
        .find(|c| !matches!(c.kind(), "anchor" | "tag" | "comment"))
}

fn is_mapping(kind: &str) -> bool {
    matches!(kind, "block_mapping" | "flow_mapping")
}

fn is_sequence(kind: &str) -> bool {
    matches!(kind, "block_sequence" | "flow_sequence")
}

fn root_task<'t>(node: Node<'t>) -> Option<Task<'t>> {
    let value = content(node)?;
    if is_mapping(value.kind()) {
        Some(Task::Mapping {
            node: value,
            parent: None,
            depth: 0,
        })
    } else if is_sequence(value.kind()) {
        Some(Task::Sequence {
            node: value,
            key: String::new(),
            parent: None,
            depth: 0,
        })
    } else {
        None
    }
}

pub(crate) fn extract(out: &mut Collector<'_>, root: Node<'_>) {
    let mut cursor = root.walk();
    let mut kids = Vec::new();
    let mut doc_kids = Vec::new();
    let mut roots = Vec::new();
    nodes(&mut cursor, root, &mut kids);
    for &(child, _) in kids.iter() {
        match child.kind() {
            "document" => {
                nodes(&mut cursor, child, &mut doc_kids);
                for &(node, _) in doc_kids.iter() {
                    if matches!(node.kind(), "block_node" | "flow_node") {
                        roots.extend(root_task(node));
                    }
                }
            }
            "block_node" | "flow_node" => roots.extend(root_task(child)),
            _ => {}
        }
    }
    roots.reverse();
    let mut stack = roots;
    let mut pair_kids = Vec::new();
    while let Some(task) = stack.pop() {
        if out.full() {
            break;
        }
        match task {
            Task::Mapping {
                node,
                parent,
                depth,
            } => {
                nodes(&mut cursor, node, &mut kids);
                for &(pair, _) in kids.iter() {
                    if out.full() {
                        break;
                    }
                    if !matches!(pair.kind(), "block_mapping_pair" | "flow_pair") {
                        continue;
                    }
                    children(&mut cursor, pair, &mut pair_kids);
                    let key = pair_kids
                        .iter()
                        .find(|(_, f)| *f == Some("key"))
                        .map(|k| k.0);
                    let value = pair_kids
                        .iter()
                        .find(|(_, f)| *f == Some("value"))
                        .map(|v| v.0);
                    let name = key.map(|k| scalar_text(out, k)).unwrap_or_default();
                    let value = value.and_then(content);
                    let vkind = value.map(|v| v.kind()).unwrap_or("");
                    let kind = if is_mapping(vkind) {
                        OBJECT
                    } else if is_sequence(vkind) {
                        ARRAY
                    } else {
                        CONFIG_ITEM
                    };
                    let (s, e) = (pair.start_byte(), pair.end_byte());
                    let index = out.push(kind, name.clone(), parent.clone(), s, e);
                    let Some(value) = value else { continue };
                    if depth + 1 >= MAX_DEPTH {
                        continue;
                    }
                    if kind == OBJECT {
                        let path = Some(out.path(index));
                        stack.push(Task::Mapping {
                            node: value,
                            parent: path,
                            depth: depth + 1,
                        });
                    } else if kind == ARRAY {
                        stack.push(Task::Sequence {
                            node: value,
                            key: name,
                            parent: parent.clone(),
                            depth: depth + 1,
                        });
                    }
                }
            }
            Task::Sequence {
                node,
                key,
                parent,
                depth,
            } => {
                nodes(&mut cursor, node, &mut kids);
                let items = kids.iter().filter(|(c, _)| {
                    matches!(c.kind(), "block_sequence_item" | "flow_node" | "flow_pair")
                });
                let mut new_tasks = Vec::new();
                for (index, &(item, _)) in items.enumerate() {
                    if out.full() {
                        break;
                    }
                    let value = if item.kind() == "block_sequence_item" {
                        let mut c = item.walk();
                        let v = item
                            .named_children(&mut c)
                            .find(|n| matches!(n.kind(), "block_node" | "flow_node"));
                        v.and_then(content)
                    } else {
                        content(item)
                    };
                    let Some(value) = value else { continue };
                    let (s, e) = (item.start_byte(), item.end_byte());
                    if is_mapping(value.kind()) {
                        let id = element_id(out, value);
                        let name = keyed_name(&key, id.as_deref(), index);
                        let i = out.push(OBJECT, name, parent.clone(), s, e);
                        if depth + 1 < MAX_DEPTH {
                            new_tasks.push(Task::Mapping {
                                node: value,
                                parent: Some(out.path(i)),
                                depth: depth + 1,
                            });
                        }
                    } else if is_sequence(value.kind()) {
                        let name = keyed_name(&key, None, index);
                        out.push(ARRAY, name.clone(), parent.clone(), s, e);
                        if depth + 1 < MAX_DEPTH {
                            new_tasks.push(Task::Sequence {
                                node: value,
                                key: name,
                                parent: parent.clone(),
                                depth: depth + 1,
                            });
                        }
                    }
                }
                stack.extend(new_tasks);
            }
        }
    }
}

/// The text of a scalar key or value: plain scalars as written, quoted scalars without their
/// quotes and with escapes decoded (`''` in single quotes is `'`).
fn scalar_text(out: &Collector<'_>, node: Node<'_>) -> String {
    let Some(node) = content(node) else {
        return String::new();
    };
    let raw = out.text_of(node);
    match node.kind() {
        "double_quote_scalar" => unescape(strip_quotes(raw, "\"")),
        "single_quote_scalar" => strip_quotes(raw, "'").replace("''", "'"),
        _ => raw.to_owned(),
    }
}

/// The value of the mapping's highest-priority id member (a string or number scalar).
fn element_id(out: &Collector<'_>, mapping: Node<'_>) -> Option<String> {
    let mut picker = IdPicker::default();
    let mut cursor = mapping.walk();
    for pair in mapping.named_children(&mut cursor) {
        if !matches!(pair.kind(), "block_mapping_pair" | "flow_pair") {
            continue;
        }
        let (Some(key), Some(value)) = (
            pair.child_by_field_name("key"),
            pair.child_by_field_name("value"),
        ) else {
            continue;
        };
        let key = scalar_text(out, key);
        let Some(rank) = picker.wants(&key) else {
            continue;
        };
        let Some(scalar) = content(value) else {
            continue;
        };
        let usable = match scalar.kind() {
            "double_quote_scalar" | "single_quote_scalar" => true,
            "plain_scalar" => scalar
                .named_child(0)
                .is_some_and(|c| !matches!(c.kind(), "null_scalar" | "boolean_scalar")),
            _ => false,
        };
        if usable {
            picker.offer(rank, scalar_text(out, scalar));
            if picker.done() {
                break;
            }
        }
    }
    picker.take()
}
