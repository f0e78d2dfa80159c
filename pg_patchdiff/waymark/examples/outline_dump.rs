//! Prints the outline of a file (debug aid): `outline_dump <file> [content-type]`.
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let text = std::fs::read_to_string(&args[1]).expect("readable file");
    let ct = args.get(2).map(String::as_str).unwrap_or("");
    let Some(lang) = patchdiff_waymark::language_for(&args[1], ct) else {
        println!("unsupported");
        return;
    };
    let o = patchdiff_waymark::outline(lang, &text).expect("under the outline caps");
    println!(
        "{} {} {} errors={}",
        o.language, o.engine, o.grammar, o.has_errors
    );
    let chars: Vec<char> = text.chars().collect();
    for s in &o.symbols {
        let body: String = chars[s.start..s.end].iter().collect();
        println!(
            "{:<11} {:<22} parent={:<22} path={:<30} [{}..{}) L{}-{} {:?}",
            s.kind,
            s.name,
            format!("{:?}", s.parent),
            s.path,
            s.start,
            s.end,
            s.start_line,
            s.end_line,
            body.chars().take(40).collect::<String>()
        );
    }
}
