//! Prints a tree-sitter syntax tree (debug aid): `dump_tree <lang> <file>`.
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let lang: tree_sitter::Language = match args[1].as_str() {
        "python" => tree_sitter_python::LANGUAGE.into(),
        "ts" => tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
        "js" => tree_sitter_javascript::LANGUAGE.into(),
        "json" => tree_sitter_json::LANGUAGE.into(),
        "md" => tree_sitter_md::LANGUAGE.into(),
        "yaml" => tree_sitter_yaml::LANGUAGE.into(),
        "toml" => tree_sitter_toml_ng::LANGUAGE.into(),
        _ => tree_sitter_bash::LANGUAGE.into(),
    };
    let text = std::fs::read_to_string(&args[2]).unwrap();
    let mut p = tree_sitter::Parser::new();
    p.set_language(&lang).unwrap();
    let t = p.parse(&text, None).unwrap();
    let mut c = t.walk();
    let mut depth = 0usize;
    loop {
        let n = c.node();
        let f = c.field_name().map(|f| format!("{f}: ")).unwrap_or_default();
        if n.is_named() {
            println!("{}{}{} [{}-{}] {:?}", "  ".repeat(depth), f, n.kind(), n.start_byte(), n.end_byte(),
                &text[n.start_byte()..n.end_byte()].chars().take(30).collect::<String>());
        }
        if c.goto_first_child() { depth += 1; continue; }
        loop {
            if c.goto_next_sibling() { break; }
            if !c.goto_parent() { return; }
            depth -= 1;
        }
    }
}
