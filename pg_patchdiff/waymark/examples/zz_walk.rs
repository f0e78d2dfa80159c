use std::time::{Duration, Instant};
fn main() {
    let lang = std::env::args().nth(1).unwrap_or("json".into());
    let file = std::env::args().nth(2).unwrap();
    let text = std::fs::read_to_string(file).unwrap();
    let l = patchdiff_waymark::language_for(&format!("x.{lang}"), "").unwrap();
    let g: tree_sitter::Language = match lang.as_str() {
        "json" => tree_sitter_json::LANGUAGE.into(),
        "toml" => tree_sitter_toml_ng::LANGUAGE.into(),
        "md" => tree_sitter_md::LANGUAGE.into(),
        "sh" => tree_sitter_bash::LANGUAGE.into(),
        "ts" => tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
        _ => tree_sitter_python::LANGUAGE.into(),
    };
    let mut p = tree_sitter::Parser::new();
    p.set_language(&g).unwrap();
    let (mut a, mut b, mut w) = (Duration::MAX, Duration::MAX, Duration::MAX);
    for _ in 0..9 {
        let t = Instant::now();
        let tree = p.parse(&text, None).unwrap();
        b = b.min(t.elapsed());
        let t = Instant::now();
        let mut c = tree.walk();
        'w: loop {
            if c.goto_first_child() { continue; }
            loop {
                if c.goto_next_sibling() { break; }
                if !c.goto_parent() { break 'w; }
            }
        }
        w = w.min(t.elapsed());
        drop(c);
        let t = Instant::now();
        drop(tree);
        eprintln!("drop {:?}", t.elapsed());
        let t = Instant::now();
        let o = patchdiff_waymark::outline(l, &text);
        a = a.min(t.elapsed());
        drop(o);
    }
    println!("min outline {a:?}  min parse {b:?}  full cursor walk {w:?}");
}
