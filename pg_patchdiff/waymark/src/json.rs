//! JSON: `object`, `array`, `config_item` members; keyed array elements.

use crate::common::{
    ARRAY, CONFIG_ITEM, Collector, IdPicker, MAX_DEPTH, OBJECT, children, keyed_name, strip_quotes,
    unescape,
};
use tree_sitter::{Node, TreeCursor};

enum Task<'t> {
    /// The members of an object, whose parent path is `parent`.
    Object {
        node: Node<'t>,
        parent: Option<String>,
        depth: usize,
    },
    /// The elements of an array named `key`, whose elements' parent is `parent`.
    Array {
        node: Node<'t>,
        key: String,
        parent: Option<String>,
        depth: usize,
    },
}

/// One `"key": value` member of an object.
struct Member<'t> {
    pair: Node<'t>,
    key: String,
    value: Option<Node<'t>>,
}

struct Walk<'c, 'a, 't> {
    out: &'c mut Collector<'a>,
    cursor: TreeCursor<'t>,
    kids: Vec<(Node<'t>, Option<&'t str>)>,
    stack: Vec<Task<'t>>,
}

pub(crate) fn extract(out: &mut Collector<'_>, root: Node<'_>) {
    let mut walk = Walk {
        out,
        cursor: root.walk(),
        kids: Vec::new(),
        stack: Vec::new(),
    };
    let mut roots = Vec::new();
    children(&mut walk.cursor, root, &mut walk.kids);
    for &(child, _) in walk.kids.iter() {
        match child.kind() {
            "object" | "ERROR" => roots.push(Task::Object {
                node: child,
                parent: None,
                depth: 0,
            }),
            "array" => roots.push(Task::Array {
                node: child,
                key: String::new(),
                parent: None,
                depth: 0,
            }),
            _ => {}
        }
    }
    roots.reverse();
    walk.stack = roots;
    while let Some(task) = walk.stack.pop() {
        if walk.out.full() {
            break;
        }
        match task {
            Task::Object {
                node,
                parent,
                depth,
            } => {
                let members = walk.members(node);
                walk.emit_members(members, parent, depth);
            }
            Task::Array {
                node,
                key,
                parent,
                depth,
            } => walk.array(node, &key, parent, depth),
        }
    }
}

impl<'t> Walk<'_, '_, 't> {
    /// The members of an object (including those inside `ERROR` nodes within it).
    fn members(&mut self, object: Node<'t>) -> Vec<Member<'t>> {
        let mut members = Vec::new();
        let mut pending = vec![object];
        let mut pairs = Vec::new();
        while let Some(node) = pending.pop() {
            children(&mut self.cursor, node, &mut self.kids);
            for &(child, _) in self.kids.iter() {
                match child.kind() {
                    "pair" => pairs.push(child),
                    "ERROR" => pending.push(child),
                    _ => {}
                }
            }
        }
        pairs.sort_by_key(|p| p.start_byte());
        for pair in pairs {
            children(&mut self.cursor, pair, &mut self.kids);
            let key = self.kids.iter().find(|(_, f)| *f == Some("key"));
            let value = self
                .kids
                .iter()
                .find(|(_, f)| *f == Some("value"))
                .map(|v| v.0);
            let Some(&(key, _)) = key else { continue };
            members.push(Member {
                pair,
                key: string_value(self.out, key),
                value,
            });
        }
        members
    }

    fn emit_members(&mut self, members: Vec<Member<'t>>, parent: Option<String>, depth: usize) {
        for Member { pair, key, value } in members {
            if self.out.full() {
                return;
            }
            let kind = match value.map(|v| v.kind()) {
                Some("object") => OBJECT,
                Some("array") => ARRAY,
                _ => CONFIG_ITEM,
            };
            let (s, e) = (pair.start_byte(), pair.end_byte());
            let index = self.out.push(kind, key, parent.clone(), s, e);
            let Some(value) = value else { continue };
            if depth + 1 >= MAX_DEPTH {
                continue;
            }
            if kind == OBJECT {
                let path = Some(self.out.path(index));
                self.stack.push(Task::Object {
                    node: value,
                    parent: path,
                    depth: depth + 1,
                });
            } else if kind == ARRAY {
                self.stack.push(Task::Array {
                    node: value,
                    key: self.out.syms[index].name.clone(),
                    parent: parent.clone(),
                    depth: depth + 1,
                });
            }
        }
    }

    fn array(&mut self, node: Node<'t>, key: &str, parent: Option<String>, depth: usize) {
        children(&mut self.cursor, node, &mut self.kids);
        let elements: Vec<Node<'t>> = self
            .kids
            .iter()
            .map(|k| k.0)
            .filter(|c| c.is_named() && !matches!(c.kind(), "comment" | "ERROR"))
            .collect();
        for (index, element) in elements.into_iter().enumerate() {
            if self.out.full() {
                return;
            }
            let (s, e) = (element.start_byte(), element.end_byte());
            match element.kind() {
                "object" => {
                    let members = self.members(element);
                    let id = self.element_id(&members);
                    let name = keyed_name(key, id.as_deref(), index);
                    let i = self.out.push(OBJECT, name, parent.clone(), s, e);
                    if depth + 1 < MAX_DEPTH {
                        let path = Some(self.out.path(i));
                        self.emit_members(members, path, depth + 1);
                    }
                }
                "array" => {
                    let name = keyed_name(key, None, index);
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

    /// The value of the element's highest-priority id member (string or number).
    fn element_id(&self, members: &[Member<'t>]) -> Option<String> {
        let mut picker = IdPicker::default();
        for member in members {
            let Some(rank) = picker.wants(&member.key) else {
                continue;
            };
            let Some(value) = member.value else { continue };
            match value.kind() {
                "string" => picker.offer(rank, string_value(self.out, value)),
                "number" => picker.offer(rank, self.out.text_of(value).to_owned()),
                _ => continue,
            }
            if picker.done() {
                break;
            }
        }
        picker.take()
    }
}

/// The decoded text of a JSON string token (`"..."` without quotes, escapes decoded).
fn string_value(out: &Collector<'_>, node: Node<'_>) -> String {
    unescape(strip_quotes(out.text_of(node), "\""))
}
