//! Python: `function`, `class`, `method`, `variable`, `type`.

use crate::common::{
    CLASS, Collector, FUNCTION, MAX_DEPTH, METHOD, TYPE, VARIABLE, children, field,
};
use tree_sitter::Node;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Scope {
    Module,
    Class,
    Function,
}

struct Task<'t> {
    node: Node<'t>,
    scope: Scope,
    parent: Option<usize>,
    depth: usize,
}

pub(crate) fn extract(out: &mut Collector<'_>, root: Node<'_>) {
    extract_some(out, root, &|_| true);
}

/// [`extract`] of the root's children whose index `keep` accepts (an incremental outline takes
/// the others' symbols from the previous outline, crate::incremental). Each child's symbols
/// depend on that child's subtree alone: its scope is the module's, with no parent.
pub(crate) fn extract_some(out: &mut Collector<'_>, root: Node<'_>, keep: &dyn Fn(usize) -> bool) {
    let mut cursor = root.walk();
    let mut kids = Vec::new();
    let mut stack = vec![Task {
        node: root,
        scope: Scope::Module,
        parent: None,
        depth: 0,
    }];
    while let Some(task) = stack.pop() {
        if out.full() {
            break;
        }
        children(&mut cursor, task.node, &mut kids);
        let at_root = task.node == root;
        for (n, &(child, _)) in kids.iter().enumerate() {
            if at_root && !keep(n) {
                continue;
            }
            match child.kind() {
                "function_definition" | "class_definition" => {
                    definition(out, &mut stack, &task, child, child);
                }
                "decorated_definition" => {
                    if let Some(def) = field(child, "definition") {
                        definition(out, &mut stack, &task, def, child);
                    }
                }
                "expression_statement" if task.scope != Scope::Function => {
                    assignment(out, &task, child);
                }
                "type_alias_statement" if task.scope != Scope::Function => {
                    if let Some(left) = field(child, "left") {
                        let name = out.text_of(left).to_owned();
                        let parent = task.parent.map(|p| out.path(p));
                        out.push(TYPE, name, parent, child.start_byte(), child.end_byte());
                    }
                }
                // Compound statements keep the enclosing scope: a `def` under `if` at module
                // level is a module-level function.
                "block"
                | "if_statement"
                | "elif_clause"
                | "else_clause"
                | "try_statement"
                | "except_clause"
                | "except_group_clause"
                | "finally_clause"
                | "with_statement"
                | "for_statement"
                | "while_statement"
                | "match_statement"
                | "case_clause"
                | "ERROR" => stack.push(Task {
                    node: child,
                    ..task
                }),
                _ => {}
            }
        }
    }
}

fn definition<'t>(
    out: &mut Collector<'_>,
    stack: &mut Vec<Task<'t>>,
    task: &Task<'t>,
    def: Node<'t>,
    scope_node: Node<'t>,
) {
    let Some(name) = field(def, "name") else {
        return;
    };
    let is_class = def.kind() == "class_definition";
    let kind = match (is_class, task.scope) {
        (true, _) => CLASS,
        (false, Scope::Class) => METHOD,
        (false, _) => FUNCTION,
    };
    let parent = task.parent.map(|p| out.path(p));
    let name = out.text_of(name).to_owned();
    let index = out.push(
        kind,
        name,
        parent,
        scope_node.start_byte(),
        scope_node.end_byte(),
    );
    if task.depth + 1 < MAX_DEPTH
        && let Some(body) = field(def, "body")
    {
        stack.push(Task {
            node: body,
            scope: if is_class {
                Scope::Class
            } else {
                Scope::Function
            },
            parent: Some(index),
            depth: task.depth + 1,
        });
    }
}

/// `NAME = ...`, `NAME: T = ...`, `NAME: T` (the outermost target of a chained assignment).
fn assignment(out: &mut Collector<'_>, task: &Task<'_>, statement: Node<'_>) {
    let Some(assign) = statement.named_child(0) else {
        return;
    };
    if assign.kind() != "assignment" {
        return;
    }
    let Some(left) = field(assign, "left") else {
        return;
    };
    if left.kind() != "identifier" {
        return;
    }
    let parent = task.parent.map(|p| out.path(p));
    let name = out.text_of(left).to_owned();
    out.push(
        VARIABLE,
        name,
        parent,
        statement.start_byte(),
        statement.end_byte(),
    );
}
