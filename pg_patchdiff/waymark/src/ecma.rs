//! TypeScript and JavaScript: `function`, `class`, `method`, `variable`, `interface`, `type`,
//! `enum`.

use crate::common::{
    CLASS, Collector, ENUM, FUNCTION, INTERFACE, MAX_DEPTH, METHOD, TYPE, VARIABLE, children, field,
};
use tree_sitter::Node;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// Statements of the program (and of an `ERROR` node at top level).
    Program,
    /// Members of a class body.
    Class,
    /// Anything inside a function or method body: only nested function and class
    /// declarations are symbols.
    Body,
}

struct Task<'t> {
    node: Node<'t>,
    scope: Scope,
    parent: Option<usize>,
    depth: usize,
}

/// The symbol of the overload signature(s) just emitted, waiting for the next declaration
/// of the same name: `(symbol index, name)`.
type Pending = Option<(usize, String)>;

struct Walk<'c, 'a, 't> {
    out: &'c mut Collector<'a>,
    stack: Vec<Task<'t>>,
}

pub(crate) fn extract(out: &mut Collector<'_>, root: Node<'_>) {
    let mut cursor = root.walk();
    let mut kids = Vec::new();
    let mut walk = Walk {
        out,
        stack: vec![Task {
            node: root,
            scope: Scope::Program,
            parent: None,
            depth: 0,
        }],
    };
    while let Some(task) = walk.stack.pop() {
        if walk.out.full() {
            break;
        }
        children(&mut cursor, task.node, &mut kids);
        match task.scope {
            Scope::Program => {
                let mut pending: Pending = None;
                for &(child, _) in kids.iter() {
                    if child.kind() == "comment" {
                        continue;
                    }
                    if !walk.declaration(&task, child, child, &mut pending) {
                        pending = None;
                    }
                }
            }
            Scope::Class => walk.class_members(&task, &kids),
            Scope::Body => {
                for &(child, _) in kids.iter() {
                    match child.kind() {
                        "function_declaration"
                        | "generator_function_declaration"
                        | "class_declaration"
                        | "abstract_class_declaration" => {
                            walk.declaration(&task, child, child, &mut None);
                        }
                        _ if child.child_count() > 0 => {
                            walk.stack.push(Task {
                                node: child,
                                ..task
                            });
                        }
                        _ => {}
                    }
                }
            }
        }
    }
}

fn is_function_value(kind: &str) -> bool {
    matches!(
        kind,
        "arrow_function" | "function_expression" | "function" | "generator_function"
    )
}

impl<'t> Walk<'_, '_, 't> {
    fn parent_path(&self, task: &Task<'t>) -> Option<String> {
        task.parent.map(|p| self.out.path(p))
    }

    fn push_body(&mut self, task: &Task<'t>, body: Option<Node<'t>>, scope: Scope, index: usize) {
        if let Some(body) = body
            && task.depth + 1 < MAX_DEPTH
        {
            self.stack.push(Task {
                node: body,
                scope,
                parent: Some(index),
                depth: task.depth + 1,
            });
        }
    }

    /// One program statement (or a nested declaration); `outer` is the node whose span is the
    /// scope (an enclosing `export` / `declare`). Returns whether it was an overload signature
    /// (which keeps `pending` alive for the next statement).
    fn declaration(
        &mut self,
        task: &Task<'t>,
        node: Node<'t>,
        outer: Node<'t>,
        pending: &mut Pending,
    ) -> bool {
        let (start, end) = (outer.start_byte(), outer.end_byte());
        match node.kind() {
            "export_statement" => {
                let inner = field(node, "declaration").or_else(|| field(node, "value"));
                if let Some(inner) = inner {
                    return self.declaration(task, inner, outer, pending);
                }
            }
            "ambient_declaration" => {
                let mut cursor = node.walk();
                let inner = node
                    .named_children(&mut cursor)
                    .find(|c| c.kind() != "comment");
                if let Some(inner) = inner {
                    return self.declaration(task, inner, outer, pending);
                }
            }
            "function_declaration"
            | "generator_function_declaration"
            | "function_signature"
            | "function_expression"
            | "generator_function" => {
                let Some(name) = field(node, "name") else {
                    return false;
                };
                let name = self.out.text_of(name).to_owned();
                let signature = node.kind() == "function_signature";
                // Overload signatures and the implementation form one function.
                let start = self.merge_overload(pending.take(), &name).unwrap_or(start);
                let parent = self.parent_path(task);
                let index = self.out.push(FUNCTION, name, parent, start, end);
                if signature {
                    *pending = Some((index, self.out.syms[index].name.clone()));
                }
                self.push_body(task, field(node, "body"), Scope::Body, index);
                return signature;
            }
            "class_declaration" | "abstract_class_declaration" | "class" => {
                let Some(name) = field(node, "name") else {
                    return false;
                };
                let name = self.out.text_of(name).to_owned();
                let parent = self.parent_path(task);
                let index = self.out.push(CLASS, name, parent, start, end);
                self.push_body(task, field(node, "body"), Scope::Class, index);
            }
            "interface_declaration" | "type_alias_declaration" | "enum_declaration" => {
                let kind = match node.kind() {
                    "interface_declaration" => INTERFACE,
                    "type_alias_declaration" => TYPE,
                    _ => ENUM,
                };
                if let Some(name) = field(node, "name") {
                    let name = self.out.text_of(name).to_owned();
                    let parent = self.parent_path(task);
                    self.out.push(kind, name, parent, start, end);
                }
            }
            "lexical_declaration" | "variable_declaration" if task.scope == Scope::Program => {
                let mut cursor = node.walk();
                let declarators: Vec<Node<'t>> = node
                    .named_children(&mut cursor)
                    .filter(|c| c.kind() == "variable_declarator")
                    .collect();
                let single = declarators.len() == 1;
                for declarator in declarators {
                    let Some(name) = field(declarator, "name") else {
                        continue;
                    };
                    if name.kind() != "identifier" {
                        continue; // destructuring patterns are not symbols
                    }
                    let (s, e) = if single {
                        (start, end)
                    } else {
                        (declarator.start_byte(), declarator.end_byte())
                    };
                    let name = self.out.text_of(name).to_owned();
                    let parent = self.parent_path(task);
                    let value = field(declarator, "value");
                    match value.map(|v| v.kind()) {
                        Some(k) if is_function_value(k) => {
                            let index = self.out.push(FUNCTION, name, parent, s, e);
                            self.push_body(task, value, Scope::Body, index);
                        }
                        Some("class") => {
                            let index = self.out.push(CLASS, name, parent, s, e);
                            let body = value.and_then(|v| field(v, "body"));
                            self.push_body(task, body, Scope::Class, index);
                        }
                        _ => {
                            self.out.push(VARIABLE, name, parent, s, e);
                        }
                    }
                }
            }
            "ERROR" if task.scope == Scope::Program => {
                self.stack.push(Task { node, ..*task });
            }
            _ => {}
        }
        false
    }

    /// When the previous statement was an overload signature of `name` (the last symbol),
    /// removes it and returns its start: the next declaration's scope begins there.
    fn merge_overload(&mut self, pending: Pending, name: &str) -> Option<usize> {
        let (index, pending_name) = pending?;
        if pending_name != name || self.out.syms.len() != index + 1 {
            return None;
        }
        self.out.syms.pop().map(|sym| sym.start)
    }

    fn class_members(&mut self, task: &Task<'t>, kids: &[(Node<'t>, Option<&'t str>)]) {
        // Decorators of a member precede it as siblings in the class body.
        let mut decorated_from: Option<usize> = None;
        let mut pending: Pending = None;
        for (i, &(member, _)) in kids.iter().enumerate() {
            let kind = member.kind();
            if !member.is_named() || kind == "comment" {
                continue;
            }
            if kind == "decorator" {
                decorated_from.get_or_insert(member.start_byte());
                continue;
            }
            let start = decorated_from.take().unwrap_or(member.start_byte());
            // A member's terminating `;` is a sibling in the class body.
            let end = match kids.get(i + 1) {
                Some((semi, _)) if semi.kind() == ";" && semi.start_byte() == member.end_byte() => {
                    semi.end_byte()
                }
                _ => member.end_byte(),
            };
            let is_signature = kind == "method_signature";
            match kind {
                "method_definition" | "method_signature" | "abstract_method_signature" => {
                    let Some(name) = field(member, "name") else {
                        pending = None;
                        continue;
                    };
                    let name = self.out.text_of(name).to_owned();
                    let start = self.merge_overload(pending.take(), &name).unwrap_or(start);
                    let parent = self.parent_path(task);
                    let index = self.out.push(METHOD, name, parent, start, end);
                    if is_signature {
                        pending = Some((index, self.out.syms[index].name.clone()));
                    }
                    self.push_body(task, field(member, "body"), Scope::Body, index);
                    continue;
                }
                "public_field_definition" | "field_definition" => {
                    let name = field(member, "name").or_else(|| field(member, "property"));
                    if let Some(name) = name {
                        let name = self.out.text_of(name).to_owned();
                        let parent = self.parent_path(task);
                        self.out.push(VARIABLE, name, parent, start, end);
                    }
                }
                _ => {}
            }
            pending = None;
        }
    }
}
