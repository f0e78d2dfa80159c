//! Shell (bash): `function` definitions anywhere, `variable` assignments at the top level.

use crate::common::{Collector, FUNCTION, MAX_DEPTH, VARIABLE, children, field};
use tree_sitter::Node;

struct Task<'t> {
    node: Node<'t>,
    top_level: bool,
    parent: Option<usize>,
    depth: usize,
}

pub(crate) fn extract(out: &mut Collector<'_>, root: Node<'_>) {
    let mut cursor = root.walk();
    let mut kids = Vec::new();
    let mut stack = vec![Task {
        node: root,
        top_level: true,
        parent: None,
        depth: 0,
    }];
    while let Some(task) = stack.pop() {
        if out.full() {
            break;
        }
        children(&mut cursor, task.node, &mut kids);
        for &(child, _) in kids.iter() {
            match child.kind() {
                "function_definition" => {
                    let Some(name) = field(child, "name") else {
                        continue;
                    };
                    let name = out.text_of(name).to_owned();
                    let parent = task.parent.map(|p| out.path(p));
                    let index =
                        out.push(FUNCTION, name, parent, child.start_byte(), child.end_byte());
                    if task.depth + 1 < MAX_DEPTH {
                        stack.push(Task {
                            node: child,
                            top_level: false,
                            parent: Some(index),
                            depth: task.depth + 1,
                        });
                    }
                }
                "variable_assignment" if task.top_level => {
                    assignment(out, child, child);
                }
                "variable_assignments" | "declaration_command" if task.top_level => {
                    let mut c = child.walk();
                    let assignments: Vec<Node<'_>> = child
                        .named_children(&mut c)
                        .filter(|n| n.kind() == "variable_assignment")
                        .collect();
                    let single = assignments.len() == 1 && child.kind() == "declaration_command";
                    for a in assignments {
                        assignment(out, a, if single { child } else { a });
                    }
                }
                "ERROR" if task.top_level => stack.push(Task {
                    node: child,
                    ..task
                }),
                _ if child.child_count() > 0 => {
                    stack.push(Task {
                        node: child,
                        top_level: false,
                        ..task
                    });
                }
                _ => {}
            }
        }
    }
}

fn assignment(out: &mut Collector<'_>, assignment: Node<'_>, scope: Node<'_>) {
    let Some(name) = field(assignment, "name") else {
        return;
    };
    let name = out.text_of(name).to_owned();
    out.push(VARIABLE, name, None, scope.start_byte(), scope.end_byte());
}
