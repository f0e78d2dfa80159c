//! Markdown naming rules (docs/structural-names.md "Markdown").

mod support;

use patchdiff_waymark::Language;
use support::{assert_scope, checked, rows};

const FIXTURE: &str = "# 🌟 Retry guide: timeouts & retry_count!

Intro about retry_count.

## Checks (v2) ##

```sh
retry_count=3
```

| id | check | timeout |
|----|-------|---------|
| CHK-14-C | retry_count | 30 |
|  CHK-15  | timeout | 10 |

### Deep dive: `retry_count`

Text.

Setext title?
-------------

More text.  \n
# Appendix

> ## Quoted retry_count
> body
";

const GUIDE: &str = "# 🌟 Retry guide: timeouts & retry_count!";
const CHECKS: &str = "# 🌟 Retry guide: timeouts & retry_count!.Checks (v2)";

#[test]
fn markdown_sections_rows_and_fences_have_exact_names_parents_and_paths() {
    let o = checked(Language::Markdown, FIXTURE);
    assert!(!o.has_errors);
    let guide = &GUIDE[2..];
    let checks = &CHECKS[2..];
    let row14 = format!("{checks}.row:CHK-14-C");
    let row15 = format!("{checks}.row:CHK-15");
    let fence = format!("{checks}.fence:L7");
    let deep = format!("{checks}.Deep dive: `retry_count`");
    let setext = format!("{guide}.Setext title?");
    assert_eq!(
        rows(&o),
        vec![
            ("section", guide, None, guide),
            ("section", "Checks (v2)", Some(guide), checks),
            ("code_block", "fence:L7", Some(checks), fence.as_str()),
            ("table_row", "row:CHK-14-C", Some(checks), row14.as_str()),
            ("table_row", "row:CHK-15", Some(checks), row15.as_str()),
            (
                "section",
                "Deep dive: `retry_count`",
                Some(checks),
                deep.as_str()
            ),
            ("section", "Setext title?", Some(guide), setext.as_str()),
            ("section", "Appendix", None, "Appendix"),
            (
                "section",
                "Quoted retry_count",
                Some("Appendix"),
                "Appendix.Quoted retry_count"
            ),
        ]
    );
}

#[test]
fn markdown_section_scope_runs_to_the_next_heading_of_same_or_higher_level() {
    let o = checked(Language::Markdown, FIXTURE);
    let guide = &GUIDE[2..];
    let checks = &CHECKS[2..];
    let s = o.symbols.iter().find(|s| s.path == guide).unwrap();
    assert_eq!((s.start, s.start_line, s.end_line), (0, 1, 23));
    assert!(support::scope_text(FIXTURE, s).ends_with("-------------\n\nMore text."));
    let s = o.symbols.iter().find(|s| s.path == checks).unwrap();
    assert_eq!((s.start_line, s.end_line), (5, 18));
    assert_scope(
        FIXTURE,
        &o,
        &format!("{checks}.Deep dive: `retry_count`"),
        16,
        18,
        "### Deep dive: `retry_count`\n\nText.",
    );
    assert_scope(
        FIXTURE,
        &o,
        &format!("{guide}.Setext title?"),
        20,
        23,
        "Setext title?\n-------------\n\nMore text.",
    );
    // Inside a block quote the section stops before the next line's `> ` marker.
    assert_scope(
        FIXTURE,
        &o,
        "Appendix.Quoted retry_count",
        27,
        28,
        "## Quoted retry_count\n> body",
    );
    assert_scope(
        FIXTURE,
        &o,
        "Appendix",
        25,
        28,
        "# Appendix\n\n> ## Quoted retry_count\n> body",
    );
}

#[test]
fn markdown_table_rows_and_fences_have_exact_scopes() {
    let o = checked(Language::Markdown, FIXTURE);
    let checks = &CHECKS[2..];
    assert_scope(
        FIXTURE,
        &o,
        &format!("{checks}.row:CHK-14-C"),
        13,
        13,
        "| CHK-14-C | retry_count | 30 |",
    );
    assert_scope(
        FIXTURE,
        &o,
        &format!("{checks}.row:CHK-15"),
        14,
        14,
        "|  CHK-15  | timeout | 10 |",
    );
    assert_scope(
        FIXTURE,
        &o,
        &format!("{checks}.fence:L7"),
        7,
        9,
        "```sh\nretry_count=3\n```",
    );
}

#[test]
fn markdown_heading_names_keep_punctuation_and_drop_closing_hashes() {
    let text = "#   Spaced  #\n## C# & F#\n### Ends with \\#\n#### Hash#tag ##\n##### #\n";
    let o = checked(Language::Markdown, text);
    let names: Vec<&str> = o.symbols.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["Spaced", "C# & F#", "Ends with \\#", "Hash#tag", ""]
    );
}

#[test]
fn markdown_headings_in_list_items_nest_under_the_enclosing_section() {
    let text = "# Top\n\n- item\n\n  ## In list\n  text\n\n- next\n\n## After\n";
    let o = checked(Language::Markdown, text);
    assert_eq!(
        rows(&o),
        vec![
            ("section", "Top", None, "Top"),
            ("section", "In list", Some("Top"), "Top.In list"),
            ("section", "After", Some("Top"), "Top.After"),
        ]
    );
    assert_scope(text, &o, "Top.In list", 5, 6, "## In list\n  text");
}
