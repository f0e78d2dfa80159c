//! Contract clauses shared by all languages: language selection, outline metadata, the host
//! guide's example identities and robustness.

mod support;

use patchdiff_waymark::{ENGINE, Language, language_for, outline};
use support::{checked, rows};

const ALL: [Language; 8] = Language::ALL;

#[test]
fn language_for_maps_every_documented_extension() {
    let table = [
        ("py", Language::Python),
        ("pyi", Language::Python),
        ("ts", Language::TypeScript),
        ("tsx", Language::TypeScript),
        ("mts", Language::TypeScript),
        ("cts", Language::TypeScript),
        ("js", Language::JavaScript),
        ("jsx", Language::JavaScript),
        ("mjs", Language::JavaScript),
        ("cjs", Language::JavaScript),
        ("json", Language::Json),
        ("md", Language::Markdown),
        ("markdown", Language::Markdown),
        ("yaml", Language::Yaml),
        ("yml", Language::Yaml),
        ("toml", Language::Toml),
        ("sh", Language::Shell),
        ("bash", Language::Shell),
    ];
    for (ext, language) in table {
        assert_eq!(
            language_for(&format!("src/app.{ext}"), ""),
            Some(language),
            "{ext}"
        );
        assert_eq!(
            language_for(&format!("APP.{}", ext.to_uppercase()), ""),
            Some(language),
            "{ext}"
        );
    }
    assert_eq!(
        language_for("types/index.d.ts", ""),
        Some(Language::TypeScript)
    );
    assert_eq!(
        language_for(r"C:\repo\setup.py", ""),
        Some(Language::Python)
    );
}

#[test]
fn language_for_maps_every_documented_content_type_when_the_extension_is_unknown() {
    let table = [
        ("text/x-python", Language::Python),
        ("application/x-python", Language::Python),
        ("application/typescript", Language::TypeScript),
        ("text/typescript", Language::TypeScript),
        ("text/javascript", Language::JavaScript),
        ("application/javascript", Language::JavaScript),
        ("application/json", Language::Json),
        ("text/markdown", Language::Markdown),
        ("application/yaml", Language::Yaml),
        ("text/yaml", Language::Yaml),
        ("application/x-yaml", Language::Yaml),
        ("application/toml", Language::Toml),
        ("application/x-sh", Language::Shell),
        ("text/x-shellscript", Language::Shell),
    ];
    for (content_type, language) in table {
        assert_eq!(
            language_for("notes.txt", content_type),
            Some(language),
            "{content_type}"
        );
        assert_eq!(
            language_for("Makefile", content_type),
            Some(language),
            "{content_type}"
        );
        let with_params = format!("{}; charset=utf-8", content_type.to_uppercase());
        assert_eq!(
            language_for("", &with_params),
            Some(language),
            "{with_params}"
        );
    }
}

#[test]
fn language_for_extension_decides_before_content_type() {
    assert_eq!(
        language_for("a.py", "application/json"),
        Some(Language::Python)
    );
    assert_eq!(
        language_for("a.json", "text/markdown"),
        Some(Language::Json)
    );
}

#[test]
fn language_for_unknown_targets_is_none() {
    for (name, content_type) in [
        ("a.txt", "text/plain"),
        ("a.rs", ""),
        ("a.py.bak", "application/octet-stream"),
        ("Makefile", ""),
        (".bashrc", ""),
        ("dir.py/file", ""),
        ("a.", ""),
        ("", ""),
        ("a.jsonl", "application/x-ndjson"),
        ("a.html", "text/html"),
    ] {
        assert_eq!(
            language_for(name, content_type),
            None,
            "{name} {content_type}"
        );
    }
}

#[test]
fn outline_records_language_engine_and_exact_grammar_version() {
    let expected = [
        (Language::Python, "python", "tree-sitter-python@0.25.0"),
        (
            Language::TypeScript,
            "typescript",
            "tree-sitter-typescript@0.23.2",
        ),
        (
            Language::JavaScript,
            "javascript",
            "tree-sitter-javascript@0.25.0",
        ),
        (Language::Json, "json", "tree-sitter-json@0.24.8"),
        (Language::Markdown, "markdown", "tree-sitter-md@0.5.4"),
        (Language::Yaml, "yaml", "tree-sitter-yaml@0.7.2"),
        (Language::Toml, "toml", "tree-sitter-toml-ng@0.7.0"),
        (Language::Shell, "shell", "tree-sitter-bash@0.25.1"),
    ];
    assert_eq!(
        ENGINE,
        concat!("patchdiff-waymark@", env!("CARGO_PKG_VERSION"))
    );
    let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.lock"))
        .expect("workspace Cargo.lock");
    for (language, name, grammar) in expected {
        let o = outline(language, "").unwrap();
        assert_eq!((o.language, o.engine, o.grammar), (name, ENGINE, grammar));
        // The recorded version is the one actually built.
        let (krate, version) = grammar.split_once('@').unwrap();
        let entry = format!("name = \"{krate}\"\nversion = \"{version}\"\n");
        assert!(lock.contains(&entry), "Cargo.lock does not pin {grammar}");
    }
}

#[test]
fn host_guide_identities_are_listed() {
    let py = checked(
        Language::Python,
        "# 🌟\nFRAME_SYNC_STREAM = \"frame-sync\"\n",
    );
    assert_eq!(
        rows(&py),
        vec![("variable", "FRAME_SYNC_STREAM", None, "FRAME_SYNC_STREAM")]
    );
    let ts = checked(
        Language::TypeScript,
        "export const FRAME_SYNC_STREAM = \"frame-sync\";\n",
    );
    assert_eq!(
        rows(&ts),
        vec![("variable", "FRAME_SYNC_STREAM", None, "FRAME_SYNC_STREAM")]
    );
    let json = checked(
        Language::Json,
        r#"{"config": {"tenants": [{"id": "ten_013", "plan": "pro"}]}}"#,
    );
    assert!(rows(&json).contains(&(
        "object",
        "tenants[ten_013]",
        Some("config"),
        "config.tenants[ten_013]"
    )));
    let yaml = checked(
        Language::Yaml,
        "config:\n  tenants:\n    - id: ten_013\n      plan: pro\n",
    );
    assert!(rows(&yaml).contains(&(
        "object",
        "tenants[ten_013]",
        Some("config"),
        "config.tenants[ten_013]"
    )));
    let toml = checked(
        Language::Toml,
        "[[tenants]]\nid = \"ten_013\"\nplan = \"pro\"\n",
    );
    assert!(rows(&toml).contains(&("object", "tenants[ten_013]", None, "tenants[ten_013]")));
    let md = "# Checks\n\n| id | what |\n|---|---|\n| CHK-14-C | retry |\n\n```sh\necho\n```\n";
    let md = checked(Language::Markdown, md);
    assert_eq!(
        rows(&md),
        vec![
            ("section", "Checks", None, "Checks"),
            (
                "table_row",
                "row:CHK-14-C",
                Some("Checks"),
                "Checks.row:CHK-14-C"
            ),
            ("code_block", "fence:L7", Some("Checks"), "Checks.fence:L7"),
        ]
    );
}

#[test]
fn empty_and_blank_text_outline_without_symbols() {
    for language in ALL {
        for text in ["", "\n", "   \n\t\n", "\u{feff}"] {
            let o = checked(language, text);
            assert!(
                o.symbols.is_empty(),
                "{language:?} {text:?}: {:?}",
                o.symbols
            );
        }
    }
}

/// A deterministic pseudo-random generator (no dependency, reproducible failures).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

#[test]
fn arbitrary_text_never_panics_and_keeps_invariants() {
    let pieces = [
        "def ",
        "class ",
        "x = 1",
        "\n",
        "    ",
        "{",
        "}",
        "[",
        "]",
        "(",
        ")",
        ":",
        ",",
        "\"",
        "'",
        "#",
        "## ",
        "- ",
        "| a | b |",
        "|---|",
        "```",
        "~~~",
        "key: ",
        "[[t]]",
        "[t]",
        " = ",
        "function ",
        "=>",
        "export ",
        "@d\n",
        "🌟",
        "中",
        "é",
        "\t",
        "\\",
        "---\n",
        "> ",
        "*",
        "id",
        "name",
        "f() { ",
        "}\n",
        "$(",
        "<<EOF\n",
        "EOF\n",
        "\r\n",
        "\u{0}",
    ];
    let mut rng = Lcg(0x5eed);
    for round in 0..300 {
        let len = (rng.next() % 80) as usize;
        let text: String = (0..len)
            .map(|_| pieces[(rng.next() as usize) % pieces.len()])
            .collect();
        for language in ALL {
            let o = checked(language, &text);
            assert!(o.symbols.len() <= text.len() + 1, "round {round}");
        }
    }
}

#[test]
fn deeply_nested_input_never_overflows_the_stack() {
    let depth = 10_000;
    let cases = [
        (
            Language::Json,
            format!("{}{}", "[".repeat(depth), "]".repeat(depth)),
        ),
        (Language::Json, format!("{}{}", "[".repeat(depth), "")),
        (
            Language::Yaml,
            format!("{}{}", "[".repeat(depth), "]".repeat(depth)),
        ),
        (
            Language::Yaml,
            (0..200)
                .map(|i| format!("{}k{i}:\n", " ".repeat(i)))
                .collect(),
        ),
        (
            Language::Toml,
            format!("a = {}{}", "[".repeat(depth), "]".repeat(depth)),
        ),
        (
            Language::Toml,
            format!("a = {}{}", "{b = ".repeat(2_000), "1}".repeat(2_000)),
        ),
        (
            Language::JavaScript,
            format!("x = {}1{};", "(".repeat(depth), ")".repeat(depth)),
        ),
        (
            Language::TypeScript,
            format!("{}{}", "function f() {".repeat(2_000), "}".repeat(2_000)),
        ),
        (
            Language::Python,
            format!("x = {}1{}\n", "(".repeat(depth), ")".repeat(depth)),
        ),
        (Language::Markdown, format!("{}text\n", "> ".repeat(depth))),
        (Language::Markdown, format!("{}text\n", "- ".repeat(2_000))),
        (
            Language::Shell,
            format!("{}{}", "f() { ".repeat(2_000), "}; ".repeat(2_000)),
        ),
    ];
    for (language, text) in cases {
        let o = checked(language, &text);
        let max_depth = o
            .symbols
            .iter()
            .map(|s| s.path.matches('.').count())
            .max()
            .unwrap_or(0);
        assert!(max_depth < 128, "{language:?}: depth {max_depth}");
    }
}

#[test]
fn outline_is_deterministic_across_calls_and_threads() {
    let text = "# 🌟\nclass A:\n    def b(self):\n        pass\nX = 1\n";
    let first = outline(Language::Python, text).unwrap();
    let handles: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(move || outline(Language::Python, text).unwrap()))
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), first);
    }
}
