//! Outline throughput on ~1 MiB inputs: prints the median of 5 `outline()` runs per language
//! (and of as many parses alone).
//!
//! Run: `cargo run --release -p patchdiff-waymark --example outline_bench [language]`
//!
//! `OUTLINE_BENCH_RUNS` (default 5) sets the runs per median; a language that is not one of the
//! eight, or a count below 1, is refused (exit 2).

mod common;

use std::time::{Duration, Instant};

use patchdiff_waymark::{Language, outline};

const TARGET: usize = 1 << 20;

fn repeat_until(mut unit: impl FnMut(usize) -> String, header: &str, footer: &str) -> String {
    let mut text = String::from(header);
    let mut i = 0;
    while text.len() + footer.len() < TARGET {
        text.push_str(&unit(i));
        i += 1;
    }
    text.push_str(footer);
    text
}

fn python() -> String {
    repeat_until(
        |i| {
            format!(
                "# 🌟 section {i}\nRETRY_COUNT_{i} = {i}\n\n\
                 @decorator\nclass Service{i}(Base):\n    timeout: int = 30\n    retry_count = 3\n\n\
                 \x20   def handle(self, request, retry_count=3):\n        if request is None:\n\
                 \x20           return None\n        for n in range(retry_count):\n\
                 \x20           self.log(\"attempt %d\" % n)\n        return request\n\n\
                 async def worker_{i}(queue):\n    def inner(x):\n        return x * 2\n\
                 \x20   return [inner(v) for v in queue]\n\n"
            )
        },
        "\"\"\"Benchmark module.\"\"\"\nimport os\n\n",
        "",
    )
}

fn typescript() -> String {
    repeat_until(
        |i| {
            format!(
                "// 🌟 block {i}\nexport const RETRY_COUNT_{i} = {i};\n\
                 export interface Options{i} {{ retryCount: number; timeout?: number }}\n\
                 type Handler{i} = (o: Options{i}) => Promise<void>;\n\
                 export class Service{i} extends Base {{\n  private timeout = 30;\n\
                 \x20 constructor(private readonly opts: Options{i}) {{ super(); }}\n\
                 \x20 async handle(req: Request): Promise<Response> {{\n\
                 \x20   for (let n = 0; n < this.opts.retryCount; n++) {{ await this.log(`attempt ${{n}}`); }}\n\
                 \x20   return new Response(req.body);\n  }}\n  get retries(): number {{ return this.opts.retryCount; }}\n}}\n\
                 export const make{i} = (o: Options{i}): Service{i} => new Service{i}(o);\n\n"
            )
        },
        "import { Base } from './base';\n\n",
        "",
    )
}

fn javascript() -> String {
    repeat_until(
        |i| {
            format!(
                "// 🌟 block {i}\nexport const RETRY_COUNT_{i} = {i};\n\
                 export class Service{i} extends Base {{\n  timeout = 30;\n\
                 \x20 constructor(opts) {{ super(); this.opts = opts; }}\n\
                 \x20 async handle(req) {{\n\
                 \x20   for (let n = 0; n < this.opts.retryCount; n++) {{ await this.log(`attempt ${{n}}`); }}\n\
                 \x20   return new Response(req.body);\n  }}\n  get retries() {{ return this.opts.retryCount; }}\n}}\n\
                 export const make{i} = (o) => new Service{i}(o);\nfunction helper{i}(a, b) {{ return a + b; }}\n\n"
            )
        },
        "import { Base } from './base.js';\n\n",
        "",
    )
}

fn json() -> String {
    let mut text = repeat_until(
        |i| {
            format!(
                "    {{\"id\": \"ten_{i:05}\", \"name\": \"Tenant {i} 🌟\", \"retry_count\": 3, \
                 \"limits\": {{\"timeout\": 30, \"burst\": [1, 2, 3]}}, \
                 \"tags\": [\"a\", \"b\"], \"owners\": [{{\"name\": \"o{i}\", \"role\": \"admin\"}}]}},\n"
            )
        },
        "{\"config\": {\"version\": 2, \"tenants\": [\n",
        "",
    );
    text.truncate(text.trim_end_matches([',', '\n']).len());
    text.push_str("\n]}}\n");
    text
}

fn markdown() -> String {
    repeat_until(
        |i| {
            format!(
                "## Check group {i}: retries & timeouts 🌟\n\nSome *prose* about `retry_count` and \
                 [links](http://example.com/{i}).\n\n\
                 | id | description | timeout |\n| --- | --- | --- |\n| CHK-{i}-A | first | 10 |\n\
                 | CHK-{i}-B | second | 20 |\n\n### Details {i}\n\n```python\nretry_count = {i}\n```\n\n\
                 - item one\n- item two\n\n"
            )
        },
        "# Benchmark document\n\n",
        "",
    )
}

fn yaml() -> String {
    // Lines average ~40 bytes: tree-sitter-yaml 0.7.2 cannot parse documents of more than
    // 32,768 lines (scanner rows are int16_t), so a 1 MiB block-style file with short lines
    // would only measure error recovery.
    repeat_until(
        |i| {
            format!(
                "  - id: ten_{i:05}\n    name: \"Tenant {i} with a longer description 🌟\"\n\
                 \x20   limits: {{timeout: 30, burst: [1, 2, 3], retry_count: 3}}\n"
            )
        },
        "config:\n  version: 2\n  tenants:\n",
        "",
    )
}

fn toml() -> String {
    repeat_until(
        |i| {
            format!(
                "[[tenants]]\nid = \"ten_{i:05}\"\nretry_count = 3\nlimits = {{ timeout = 30, burst = [1, 2] }}\n\n\
                 [tenants.options]\ntimeout = 30\n\n"
            )
        },
        "title = \"bench\"\n\n",
        "",
    )
}

fn shell() -> String {
    repeat_until(
        |i| {
            format!(
                "RETRY_COUNT_{i}=3\nexport TIMEOUT_{i}=30\nretry_{i}() {{\n  local n=0\n\
                 \x20 while [ \"$n\" -lt \"$RETRY_COUNT_{i}\" ]; do\n    n=$((n+1))\n    echo \"attempt $n\"\n  done\n}}\n\n"
            )
        },
        "#!/bin/bash\nset -eu\n\n",
        "",
    )
}

/// The grammar's parse alone (and dropping the tree), for comparison (the extraction's cost is the difference).
fn parse_only(language: Language, text: &str) -> Duration {
    let grammar = patchdiff_waymark::tree_sitter_language(language);
    let mut parser = tree_sitter::Parser::new();
    parser.set_language(&grammar).expect("grammar loads");
    let t = Instant::now();
    let tree = parser.parse(text, None);
    drop(tree);
    t.elapsed()
}

fn median(mut runs: Vec<Duration>) -> Duration {
    runs.sort();
    runs[runs.len() / 2]
}

fn main() {
    // An optional argument restricts the run to one language (`outline_bench json`).
    let only = std::env::args().nth(1);
    if let Some(o) = only
        .as_deref()
        .filter(|o| !Language::ALL.iter().any(|l| l.name() == *o))
    {
        let names: Vec<&str> = Language::ALL.iter().map(|l| l.name()).collect();
        eprintln!("no language {o:?}: one of {}", names.join(", "));
        std::process::exit(2);
    }
    let rounds = common::count_from_env("OUTLINE_BENCH_RUNS", 5);
    let inputs: [(Language, String); 8] = [
        (Language::Python, python()),
        (Language::TypeScript, typescript()),
        (Language::Json, json()),
        (Language::Markdown, markdown()),
        (Language::Yaml, yaml()),
        (Language::Toml, toml()),
        (Language::Shell, shell()),
        (Language::JavaScript, javascript()),
    ];
    println!(
        "{:<11} {:>9} {:>7} {:>9} {:>7} {:>14} {:>15}",
        "language", "bytes", "lines", "symbols", "errors", "outline median", "parse-only med."
    );
    for (language, text) in inputs {
        if only.as_deref().is_some_and(|o| o != language.name()) {
            continue;
        }
        let mut runs = Vec::new();
        let mut parses = Vec::new();
        let mut symbols = 0;
        let mut errors = false;
        // Interleaved, so that machine load affects both columns alike.
        for _ in 0..rounds {
            let t = Instant::now();
            let o = outline(language, &text).expect("under the outline caps");
            runs.push(t.elapsed());
            symbols = o.symbols.len();
            errors = o.has_errors;
            drop(o);
            parses.push(parse_only(language, &text));
        }
        let parse_only = median(parses);
        println!(
            "{:<11} {:>9} {:>7} {:>9} {:>7} {:>11.1} ms {:>12.1} ms",
            language.name(),
            text.len(),
            text.lines().count(),
            symbols,
            errors,
            median(runs).as_secs_f64() * 1000.0,
            parse_only.as_secs_f64() * 1000.0
        );
    }
}
