//! Fuzz harness for the engine's entry points (issue 9, "Hostile input").
//!
//! Only stable Rust exists here (no cargo-fuzz, no nightly), so this is a property-test harness on
//! proptest. Every target feeds random and mutated inputs to the engine exactly as the extension
//! does (the same parse, prepare, evaluate, respond and page functions, in the same order) and
//! checks that nothing panics, that every answer is a documented status of its tool, and that the
//! contract's budgets hold on every answer, measured as compact ASCII JSON.
//!
//! The argument generator builds a plausible object for a tool (match texts and spans cut from
//! the target, the right guards) from a stream of random choices, then mutates it: wrong types,
//! 1e400, 2^64, negatives, booleans for integers, deep nesting, duplicate keys in the raw text,
//! escaped lone surrogates, `\u0000`, astral characters, CRLF, very long strings, unknown and
//! missing names, truncated or wrapped text. A choice of 0 is always the simplest option, so
//! proptest shrinks a failure towards a small, valid-looking call.
//!
//! - `PATCHDIFF_FUZZ_CASES`: cases per target (default [`DEFAULT_CASES`]).
//! - `PROPTEST_RNG_SEED`: replay a run (each target prints the seed it used).
//!
//! Each target prints its executions (cases plus shrink steps) and time on stderr, uncaptured:
//! `cargo test -p patchdiff-engine --test fuzz`.

use patchdiff_engine::api::args::{ArgError, Args, not_found};
use patchdiff_engine::api::checkpoint;
use patchdiff_engine::api::export::{self, ExportFormat, ExportMeta};
use patchdiff_engine::api::history::{self, LedgerRow};
use patchdiff_engine::api::limits::*;
use patchdiff_engine::api::lines;
use patchdiff_engine::api::near_miss;
use patchdiff_engine::api::preview;
use patchdiff_engine::api::read;
use patchdiff_engine::api::replay::{self, Accepted, Replay};
use patchdiff_engine::api::submit::{self, AttemptRow, KeyOutcome, Parent};
use patchdiff_engine::api::target::{self, TargetMeta, TargetView};
use patchdiff_engine::api::text::{
    SourceLineEndings, byte_offset, canonicalize, char_len, sha256_hex, slice_chars,
};
use patchdiff_engine::api::words::Status;
use patchdiff_engine::api::{identity, invalid_text, tx2, tx3};
use patchdiff_engine::wire::{ASCII, CANONICAL, ascii_len, to_string, write_str};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use serde_json::{Map, Value, json};
use std::cell::Cell;
use std::io::Write;
use std::time::Instant;

/// Cases per target when `PATCHDIFF_FUZZ_CASES` is not set: the whole file stays well under a
/// minute in a debug build on two cores.
const DEFAULT_CASES: u32 = 1_000;

/// The target every generated call is about.
const T: &str = "11111111-1111-4111-8111-111111111111";
const OTHER: &str = "22222222-2222-4222-8222-222222222222";

fn cases() -> u32 {
    std::env::var("PATCHDIFF_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

fn seed() -> u64 {
    std::env::var("PROPTEST_RNG_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

thread_local! {
    /// Answers per `status/reason` of the target running on this thread.
    static TALLY: std::cell::RefCell<std::collections::BTreeMap<String, u64>> =
        const { std::cell::RefCell::new(std::collections::BTreeMap::new()) };
}

fn tally(v: &Value) {
    let status = v["status"].as_str().unwrap_or("(page)");
    let why = v["failure_reason"]
        .as_str()
        .or(v["code"].as_str())
        .unwrap_or("-");
    TALLY.with(|t| *t.borrow_mut().entry(format!("{status}/{why}")).or_default() += 1);
}

/// Written straight to fd 2: libtest captures `eprintln!`, and the figures are the point.
fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Runs one fuzz target for `cases() * scale` cases and reports executions and time.
fn fuzz<S: Strategy>(
    name: &str,
    scale: f64,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    let cases = ((cases() as f64 * scale).ceil() as u32).max(1);
    let seed = seed();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(seed),
        max_shrink_iters: 4_000,
        ..Config::default()
    });
    let executions = Cell::new(0u64);
    let started = Instant::now();
    let slowest = Cell::new(0f64);
    let result = runner.run(&strategy, |v| {
        executions.set(executions.get() + 1);
        let t = Instant::now();
        let r = test(v);
        slowest.set(slowest.get().max(t.elapsed().as_secs_f64()));
        r
    });
    let took = started.elapsed();
    report(&format!(
        "fuzz {name}: {} executions ({cases} cases) in {:.2} s (slowest {:.0} ms), seed {seed}",
        executions.get(),
        took.as_secs_f64(),
        slowest.get() * 1e3
    ));
    let answers = TALLY.with(|t| std::mem::take(&mut *t.borrow_mut()));
    if !answers.is_empty() {
        let mut by_status: std::collections::BTreeMap<&str, u64> = Default::default();
        for (k, n) in &answers {
            *by_status
                .entry(k.split('/').next().unwrap_or(k))
                .or_default() += n;
        }
        let list: Vec<String> = by_status.iter().map(|(k, n)| format!("{k} {n}")).collect();
        report(&format!("fuzz {name} answers: {}", list.join(", ")));
        if std::env::var_os("PATCHDIFF_FUZZ_VERBOSE").is_some() {
            let list: Vec<String> = answers.iter().map(|(k, n)| format!("{k} {n}")).collect();
            report(&format!("fuzz {name} reasons: {}", list.join(", ")));
        }
    }
    if let Err(e) = result {
        panic!("fuzz {name} failed (PROPTEST_RNG_SEED={seed}): {e}");
    }
}

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(TestCaseError::fail(format!($($fmt)+)));
        }
    };
}

// ---------------------------------------------------------------------------------------------
// JSON texts that serde_json cannot build: raw tokens and duplicate keys.

/// A JSON tree rendered by hand, so that it can hold what a parsed value cannot: number and
/// escape spellings kept verbatim (`1e400`, `"\ud800"`) and duplicate keys.
#[derive(Clone, Debug)]
enum J {
    /// Verbatim JSON text (or not even JSON).
    Raw(String),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

/// How a tree is spelled: none of it may change what a valid request means.
#[derive(Clone, Copy, Default)]
struct Spelling {
    ascii: bool,
    spaces: bool,
    reverse_keys: bool,
}

impl J {
    fn render(&self, s: Spelling) -> String {
        let mut out = String::new();
        self.write(s, &mut out);
        out
    }

    fn write(&self, s: Spelling, out: &mut String) {
        let sep = if s.spaces { " \r\n\t " } else { "" };
        match self {
            J::Raw(r) => out.push_str(r),
            J::Str(x) => write_str(x, s.ascii, out),
            J::Arr(a) => {
                out.push('[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(sep);
                    x.write(s, out);
                }
                out.push_str(sep);
                out.push(']');
            }
            J::Obj(m) => {
                out.push('{');
                let mut entries: Vec<&(String, J)> = m.iter().collect();
                if s.reverse_keys {
                    entries.reverse();
                }
                for (i, (k, v)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(sep);
                    // A key starting with a backslash-u escape is sent verbatim (a lone surrogate).
                    if k.starts_with("\"") {
                        out.push_str(k);
                    } else {
                        write_str(k, s.ascii, out);
                    }
                    out.push_str(sep);
                    out.push(':');
                    v.write(s, out);
                }
                out.push_str(sep);
                out.push('}');
            }
        }
    }

    /// Whether some object in the tree names a key twice (then key order decides the value).
    fn has_duplicate_keys(&self) -> bool {
        match self {
            J::Raw(_) | J::Str(_) => false,
            J::Arr(a) => a.iter().any(J::has_duplicate_keys),
            J::Obj(m) => {
                let mut keys: Vec<&String> = m.iter().map(|(k, _)| k).collect();
                keys.sort();
                let n = keys.len();
                keys.dedup();
                keys.len() != n || m.iter().any(|(_, v)| v.has_duplicate_keys())
            }
        }
    }

    fn nodes(&self) -> usize {
        match self {
            J::Raw(_) | J::Str(_) => 1,
            J::Arr(a) => 1 + a.iter().map(J::nodes).sum::<usize>(),
            J::Obj(m) => 1 + m.iter().map(|(_, v)| v.nodes()).sum::<usize>(),
        }
    }

    /// The `n`-th node in pre-order.
    fn node_mut(&mut self, n: usize) -> Option<&mut J> {
        if n == 0 {
            return Some(self);
        }
        let mut n = n - 1;
        let children: Vec<&mut J> = match self {
            J::Raw(_) | J::Str(_) => return None,
            J::Arr(a) => a.iter_mut().collect(),
            J::Obj(m) => m.iter_mut().map(|(_, v)| v).collect(),
        };
        for c in children {
            let size = c.nodes();
            if n < size {
                return c.node_mut(n);
            }
            n -= size;
        }
        None
    }
}

fn int(n: i64) -> J {
    J::Raw(n.to_string())
}

fn s(x: &str) -> J {
    J::Str(x.to_owned())
}

// ---------------------------------------------------------------------------------------------
// The choice stream and the generator.

/// Pieces of text: ASCII, astral, combining, ZWJ, flags, BOM, bidi controls, line breaks,
/// quoting and SQL, noncharacters (the lone-surrogate sentinel range).
const PIECES: &[&str] = &[
    "a",
    "alpha",
    " ",
    "\n",
    "beta",
    "b",
    "🌍",
    "e\u{301}",
    "中",
    "👍🏽",
    "\u{200d}",
    "🇫🇷",
    "\r\n",
    "\r",
    "\u{feff}",
    "\t",
    "\"",
    "\\",
    "$$",
    "'",
    "\u{202e}",
    "\u{2028}",
    "%s",
    "'; DROP TABLE patchdiff.targets; --",
    "SELECT",
    "\u{1}",
    "\u{7f}",
    "\u{fdd0}",
    "\u{10ffff}",
    "\u{ad}",
    "\u{85}",
    "\u{1100}\u{1161}",
    "\\ud800",
    "\0",
];

/// Hostile JSON tokens, verbatim.
const HOSTILE: &[&str] = &[
    "1e400",
    "-1e400",
    "18446744073709551616",
    "18446744073709551615",
    "9223372036854775808",
    "9223372036854775807",
    "-9223372036854775808",
    "-9223372036854775809",
    "-1",
    "0",
    "-0",
    "1.0",
    "0.5",
    "1e2",
    "123456789012345678901234567890",
    "true",
    "false",
    "null",
    "\"\"",
    "\" \"",
    "[]",
    "{}",
    "[null]",
    "{\"\":null}",
    "\"\\ud800\"",
    "\"\\udc00\"",
    "\"a\\ud800b\"",
    "\"\\ude00\\ud83d\"",
    "\"\\u0000\"",
    "\"a\\u0000b\"",
    "\"\\ud83d\\ude00\"",
    "\"😀\"",
    "\"\\r\\n\"",
    "\"\\r\"",
    "\"\\u2028\\u2029\\u0085\"",
    "\"\\u202e\\u200f\"",
    "\"'; DROP TABLE patchdiff.targets; --\"",
    "\"$$\"",
    "\"%s%n\"",
    "\"\\\\\"",
    "\"\\\"\"",
    "\"\\ufdd0\\ufdd1\"",
    "\"11111111-1111-4111-8111-111111111111\"",
    "\"11111111111141118111111111111111\"",
    "\"{11111111-1111-4111-8111-111111111111}\"",
    "\"b22ebf774cb2d9b12dc23d13ac860581d994ab579f4fb470b6f79d0b43a15ff2\"",
    "\"patchdiff-tx/1\"",
    "\"patchdiff-tx/2\"",
    "\"patchdiff-tx/3\"",
    "\"span\"",
    "\"match\"",
    "\"accepted\"",
    "\"crlf\"",
    "\"original_eol\"",
];

/// An unknown argument name of 40,000 bytes: answers that list unknown names echo it.
static LONG_KEY: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| "k".repeat(40_000));

/// Random choices; past the end every choice is 0, the simplest.
struct Gen<'a> {
    choices: &'a [u32],
    next: usize,
    /// The target text, as code points, for match texts and spans that exist.
    content: Vec<char>,
    version: i64,
    hash: String,
}

impl Gen<'_> {
    fn pick(&mut self) -> u32 {
        let x = self.choices.get(self.next).copied().unwrap_or(0);
        self.next += 1;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { self.pick() as usize % n }
    }

    /// True with `percent` % probability; a 0 choice is false.
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) + percent >= 100
    }

    fn text(&mut self, max_pieces: usize) -> String {
        let n = self.below(max_pieces + 1);
        (0..n).map(|_| PIECES[self.below(PIECES.len())]).collect()
    }

    /// A code-point slice of the target, usually a short one.
    fn fragment(&mut self) -> String {
        let n = self.content.len();
        if n == 0 {
            return self.text(2);
        }
        let start = self.below(n);
        let max = if self.chance(10) { 64 } else { 8 };
        let len = 1 + self.below(max);
        self.content[start..(start + len).min(n)].iter().collect()
    }

    fn span(&mut self) -> (usize, usize) {
        let n = self.content.len();
        let start = self.below(n + 2);
        let end = start + self.below(6);
        (start, end)
    }

    fn long_string(&mut self) -> J {
        let n = [129, 257, 4_097, 65_537, 70_000][self.below(5)];
        let n = if self.chance(1) { 1_100_000 } else { n };
        let piece = ["x", "\r\n", "🌍", "\"", "\u{1}"][self.below(5)];
        J::Str(piece.repeat(n))
    }

    fn nested(&mut self) -> J {
        let depth = [2, 126, 127, 128, 129, 5_000, 100_000][self.below(7)];
        let (open, close) = if self.chance(50) {
            ("{\"a\":", "}")
        } else {
            ("[", "]")
        };
        J::Raw(format!("{}1{}", open.repeat(depth), close.repeat(depth)))
    }

    fn hostile(&mut self) -> J {
        match self.below(10) {
            0 => self.long_string(),
            1 => self.nested(),
            2 => J::Str(self.text(6)),
            _ => J::Raw(HOSTILE[self.below(HOSTILE.len())].to_owned()),
        }
    }

    /// Usually the target; sometimes another spelling of it, another target, or garbage.
    fn target_id(&mut self) -> J {
        match self.below(20) {
            0..=15 => s(T),
            16 => s(&T.to_uppercase()),
            17 => s(OTHER),
            18 => s(&T.replace('-', "")),
            _ => self.hostile(),
        }
    }

    fn version_guard(&mut self) -> J {
        match self.below(10) {
            0..=6 => int(self.version),
            7 => int(self.version + 1),
            8 => int((self.version - 1).max(0)),
            _ => self.hostile(),
        }
    }

    fn hash_guard(&mut self) -> J {
        match self.below(4) {
            0 | 1 => J::Str(self.hash.clone()),
            2 => s(&sha256_hex("another text")),
            _ => self.hostile(),
        }
    }

    fn small_int(&mut self, max: i64) -> J {
        if self.chance(6) {
            self.hostile()
        } else {
            int(self.below(max as usize + 1) as i64)
        }
    }

    /// Optional members: each present with `percent` % probability.
    fn maybe(
        &mut self,
        m: &mut Vec<(String, J)>,
        percent: usize,
        k: &str,
        v: impl FnOnce(&mut Self) -> J,
    ) {
        if self.chance(percent) {
            let v = v(self);
            m.push((k.to_owned(), v));
        }
    }

    fn intent(&mut self) -> J {
        if self.chance(10) {
            self.hostile()
        } else {
            J::Str(format!("intent {}", self.text(4)))
        }
    }

    fn replace_text(&mut self) -> J {
        if self.chance(3) {
            self.hostile()
        } else {
            J::Str(self.text(4))
        }
    }

    fn advisory(&mut self, m: &mut Vec<(String, J)>, i: usize) {
        self.maybe(m, 40, "change_id", |g| {
            if g.chance(5) {
                g.hostile()
            } else {
                J::Str(format!("chg_{}", g.below(i + 2)))
            }
        });
        self.maybe(m, 30, "rationale", |g| J::Str(g.text(5)));
        self.maybe(m, 20, "risk", |g| {
            if g.chance(10) {
                g.hostile()
            } else {
                s(["low", "medium", "high"][g.below(3)])
            }
        });
    }

    fn edit(&mut self, i: usize, with_op: bool) -> J {
        let mut m = Vec::new();
        if with_op {
            m.push(("op".to_owned(), s("match")));
        }
        let f = if self.chance(96) {
            J::Str(self.fragment())
        } else {
            self.replace_text()
        };
        m.push(("match".into(), f));
        let r = self.replace_text();
        m.push(("replace".into(), r));
        self.maybe(&mut m, 30, "occurrence_index", |g| g.small_int(4));
        self.maybe(&mut m, 15, "anchor_before", |g| J::Str(g.fragment()));
        self.maybe(&mut m, 15, "anchor_after", |g| J::Str(g.fragment()));
        self.advisory(&mut m, i);
        J::Obj(m)
    }

    fn span_op(&mut self, i: usize) -> J {
        let (start, end) = self.span();
        let n = self.content.len();
        let expected: String = if self.chance(85) {
            self.content[start.min(n)..end.min(n)].iter().collect()
        } else {
            self.text(2)
        };
        let start_value = if self.chance(10) {
            self.hostile()
        } else {
            int(start as i64)
        };
        let mut m = vec![
            ("op".to_owned(), s("span")),
            ("start".to_owned(), start_value),
            ("end".to_owned(), int(end as i64)),
            ("expected_text".to_owned(), J::Str(expected)),
        ];
        let r = self.replace_text();
        m.push(("replace".into(), r));
        let before: String = self.content[start.saturating_sub(3).min(n)..start.min(n)]
            .iter()
            .collect();
        let after: String = self.content[end.min(n)..(end + 3).min(n)].iter().collect();
        self.maybe(&mut m, 20, "expected_before", |g| {
            if g.chance(20) {
                J::Raw("null".into())
            } else {
                J::Str(before)
            }
        });
        self.maybe(&mut m, 20, "expected_after", |g| {
            if g.chance(20) {
                J::Raw("null".into())
            } else {
                J::Str(after)
            }
        });
        self.advisory(&mut m, i);
        J::Obj(m)
    }

    fn list(&mut self, item: impl Fn(&mut Self, usize) -> J) -> J {
        if self.chance(5) {
            return self.hostile();
        }
        let n = 1 + self.below(4);
        J::Arr((0..n).map(|i| item(self, i)).collect())
    }

    fn replacement(&mut self) -> J {
        if self.chance(10) {
            self.hostile()
        } else {
            J::Str(self.text(12))
        }
    }

    /// The envelope every submission shares: guards, key, lineage, source, correlation.
    fn submission(&mut self, m: &mut Vec<(String, J)>) {
        if !self.chance(5) {
            let v = self.version_guard();
            m.push(("expected_target_version".into(), v));
        }
        self.maybe(m, 30, "expected_current_hash", Self::hash_guard);
        self.maybe(m, 40, "client_request_id", |g| {
            if g.chance(20) {
                g.hostile()
            } else {
                J::Str(format!("req-{}", g.below(3)))
            }
        });
        self.maybe(m, 15, "parent_pdcp_log_id", |g| {
            if g.chance(30) { g.hostile() } else { s(OTHER) }
        });
        self.maybe(m, 15, "attempt", |g| g.small_int(3));
        self.maybe(m, 15, "source", |g| {
            if g.chance(40) { g.hostile() } else { s("sql") }
        });
        self.maybe(m, 15, "include_correlation_id", |g| {
            if g.chance(30) {
                g.hostile()
            } else {
                J::Raw("true".into())
            }
        });
    }

    /// A plausible argument object for `tool`.
    fn args(&mut self, tool: Tool) -> J {
        let mut m: Vec<(String, J)> = Vec::new();
        let id = self.target_id();
        match tool {
            Tool::InitializeTarget | Tool::HandleUpload => {
                let f = if self.chance(10) {
                    self.hostile()
                } else {
                    J::Str(format!("doc{}.md", self.text(2)))
                };
                m.push(("filename".into(), f));
                let c = if self.chance(10) {
                    self.hostile()
                } else {
                    J::Str(self.text(30))
                };
                m.push(("content".into(), c));
                let upload = tool == Tool::HandleUpload;
                self.maybe(&mut m, if upload { 95 } else { 30 }, "content_type", |g| {
                    if g.chance(20) {
                        g.hostile()
                    } else {
                        s("text/markdown")
                    }
                });
                self.maybe(&mut m, 15, "project_id", |g| {
                    if g.chance(40) { g.hostile() } else { s(OTHER) }
                });
                if !upload {
                    self.maybe(&mut m, 10, "from_workspace", |g| g.hostile());
                }
                return J::Obj(m);
            }
            _ => m.push(("target_file_id".into(), id)),
        }
        match tool {
            Tool::InitializeTarget | Tool::HandleUpload | Tool::GetTarget | Tool::Replay => {}
            Tool::ReadTarget => {
                let n = self.content.len() as i64;
                self.maybe(&mut m, 60, "start", |g| g.small_int(n + 2));
                self.maybe(&mut m, 60, "length", |g| g.small_int(9_000));
            }
            Tool::FindOccurrences => {
                let t = if self.chance(85) {
                    J::Str(self.fragment())
                } else {
                    self.hostile()
                };
                m.push(("text".into(), t));
                self.maybe(&mut m, 40, "context_chars", |g| g.small_int(500));
                self.maybe(&mut m, 40, "start_occurrence", |g| g.small_int(5));
                self.maybe(&mut m, 40, "max_results", |g| g.small_int(300));
            }
            Tool::ReadLines => {
                let lines = self.content.iter().filter(|c| **c == '\n').count() as i64 + 1;
                self.maybe(&mut m, 60, "start_line", |g| g.small_int(lines + 1));
                self.maybe(&mut m, 50, "end_line", |g| g.small_int(lines + 1));
                self.maybe(&mut m, 30, "offset", |g| g.small_int(20));
                self.maybe(&mut m, 40, "max_chars", |g| g.small_int(9_000));
                self.maybe(&mut m, 30, "include_line_starts", |g| {
                    if g.chance(30) {
                        g.hostile()
                    } else {
                        J::Raw("true".into())
                    }
                });
            }
            Tool::ExportTarget => {
                self.maybe(&mut m, 70, "format", |g| {
                    if g.chance(20) {
                        g.hostile()
                    } else {
                        s(export::ALLOWED_FORMATS[g.below(4)])
                    }
                });
            }
            Tool::SubmitEdits => {
                m.push(("intent".into(), self.intent()));
                let e = self.list(|g, i| g.edit(i, false));
                m.push(("edits".into(), e));
                self.submission(&mut m);
            }
            Tool::SubmitOperations => {
                m.push(("intent".into(), self.intent()));
                let e = self.list(|g, i| {
                    if g.chance(50) {
                        g.span_op(i)
                    } else {
                        g.edit(i, true)
                    }
                });
                m.push(("operations".into(), e));
                self.submission(&mut m);
            }
            Tool::SubmitReplacement => {
                m.push(("intent".into(), self.intent()));
                let r = self.replacement();
                m.push(("replacement".into(), r));
                self.submission(&mut m);
            }
            Tool::Preview => {
                let k = self.below(3);
                let f = if self.chance(10) {
                    self.hostile()
                } else {
                    s(preview::FORMATS[k].0)
                };
                m.push(("format".into(), f));
                m.push(("intent".into(), self.intent()));
                // Usually the format's own field; sometimes another format's.
                let field = if self.chance(8) { self.below(3) } else { k };
                let v = match field {
                    0 => self.list(|g, i| g.edit(i, false)),
                    1 => self.list(|g, i| {
                        if g.chance(50) {
                            g.span_op(i)
                        } else {
                            g.edit(i, true)
                        }
                    }),
                    _ => self.replacement(),
                };
                m.push((preview::FORMATS[field].1.into(), v));
                if !self.chance(5) {
                    let v = self.version_guard();
                    m.push(("expected_target_version".into(), v));
                }
                self.maybe(&mut m, 30, "expected_current_hash", Self::hash_guard);
            }
            Tool::Save => {
                self.maybe(&mut m, 60, "expected_target_version", Self::version_guard);
                self.maybe(&mut m, 30, "expected_current_hash", Self::hash_guard);
                self.maybe(&mut m, 30, "export_after_save", |g| {
                    if g.chance(30) {
                        g.hostile()
                    } else {
                        J::Raw("true".into())
                    }
                });
                self.maybe(&mut m, 15, "sync_workspace", |g| g.hostile());
                self.maybe(&mut m, 15, "workspace_eol_format", |g| g.hostile());
            }
            Tool::GetPdcpLog | Tool::GetManifestLedger => {
                self.maybe(&mut m, 50, "limit", |g| g.small_int(250));
                self.maybe(&mut m, 40, "before_sequence", |g| g.small_int(40));
                if tool == Tool::GetPdcpLog {
                    self.maybe(&mut m, 20, "status", |g| {
                        if g.chance(30) {
                            g.hostile()
                        } else {
                            s("rejected")
                        }
                    });
                    self.maybe(&mut m, 15, "content_hash", Self::hash_guard);
                    self.maybe(&mut m, 15, "client_request_id", |g| g.hostile());
                    self.maybe(&mut m, 40, "include_content", |g| {
                        if g.chance(30) {
                            g.hostile()
                        } else {
                            J::Raw("true".into())
                        }
                    });
                } else {
                    self.maybe(&mut m, 40, "include_previous_cycles", |g| {
                        if g.chance(30) {
                            g.hostile()
                        } else {
                            J::Raw("true".into())
                        }
                    });
                }
            }
        }
        J::Obj(m)
    }

    /// Structural mutations of the tree; returns whether any happened.
    fn mutate(&mut self, j: &mut J) -> bool {
        let rounds = if self.chance(45) {
            1 + self.below(3)
        } else {
            0
        };
        for _ in 0..rounds {
            match self.below(8) {
                // Any node, the edits inside included, becomes something hostile.
                0..=2 => {
                    let n = self.below(j.nodes());
                    let h = self.hostile();
                    if let Some(node) = j.node_mut(n) {
                        *node = h;
                    }
                }
                // A member removed.
                3 => {
                    if let J::Obj(m) = j
                        && !m.is_empty()
                    {
                        let i = self.below(m.len());
                        m.remove(i);
                    }
                }
                // An unknown or misspelt member.
                4 => {
                    let k = [
                        "Target_file_id",
                        "unknown",
                        "",
                        "\"\\ud800\"",
                        "\u{0}",
                        "target_file_id ",
                        LONG_KEY.as_str(),
                    ][self.below(7)];
                    let h = self.hostile();
                    if let J::Obj(m) = j {
                        m.push((k.to_owned(), h));
                    }
                }
                // A member named twice in the raw text.
                5 | 6 => {
                    if let J::Obj(m) = j
                        && !m.is_empty()
                    {
                        let i = self.below(m.len());
                        let k = m[i].0.clone();
                        let v = self.hostile();
                        let at = self.below(m.len() + 1);
                        m.insert(at, (k, v));
                    }
                }
                // Deep nesting around one member.
                _ => {
                    let n = self.below(j.nodes());
                    let depth = [3, 127, 128, 100_000][self.below(4)];
                    if let Some(node) = j.node_mut(n) {
                        let inner = node.render(Spelling::default());
                        *node =
                            J::Raw(format!("{}{inner}{}", "[".repeat(depth), "]".repeat(depth)));
                    }
                }
            }
        }
        rounds > 0
    }

    /// Text-level damage: truncation, insertion, wrapping. Returns the text and whether it changed.
    fn damage(&mut self, text: String) -> (String, bool) {
        if !self.chance(12) {
            return (text, false);
        }
        let at = |g: &mut Self, t: &str| {
            let cut = g.below(t.len() + 1);
            (0..=cut)
                .rev()
                .find(|i| t.is_char_boundary(*i))
                .unwrap_or(0)
        };
        let out = match self.below(7) {
            0 => {
                let i = at(self, &text);
                text[..i].to_owned()
            }
            1 => {
                let i = at(self, &text);
                let piece = [
                    "\"", "\\", "\\u", "\\ud800", "}", ",", "\u{0}", "😀", "\u{feff}",
                ][self.below(9)];
                format!("{}{piece}{}", &text[..i], &text[i..])
            }
            2 => format!("[{text}]"),
            3 => format!("\u{feff}{text}"),
            4 => format!("{text} trailing"),
            5 => ["", " ", "null", "1", "\"x\"", "[]", "{}{}", "{\"a\":1,}"][self.below(8)]
                .to_owned(),
            _ => format!(" \t\r\n{text}\n"),
        };
        (out, true)
    }
}

// ---------------------------------------------------------------------------------------------
// The tools and their documented answers.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tool {
    InitializeTarget,
    HandleUpload,
    GetTarget,
    ReadTarget,
    FindOccurrences,
    ReadLines,
    ExportTarget,
    SubmitEdits,
    SubmitOperations,
    SubmitReplacement,
    Preview,
    Save,
    Replay,
    GetPdcpLog,
    GetManifestLedger,
}

const TOOLS: &[Tool] = &[
    Tool::InitializeTarget,
    Tool::HandleUpload,
    Tool::GetTarget,
    Tool::ReadTarget,
    Tool::FindOccurrences,
    Tool::ReadLines,
    Tool::ExportTarget,
    Tool::SubmitEdits,
    Tool::SubmitOperations,
    Tool::SubmitReplacement,
    Tool::Preview,
    Tool::Save,
    Tool::Replay,
    Tool::GetPdcpLog,
    Tool::GetManifestLedger,
];

impl Tool {
    fn name(self) -> &'static str {
        match self {
            Tool::InitializeTarget => "patchdiff_initialize_target",
            Tool::HandleUpload => "patchdiff_handle_upload",
            Tool::GetTarget => "patchdiff_get_target",
            Tool::ReadTarget => "patchdiff_read_target",
            Tool::FindOccurrences => "patchdiff_find_occurrences",
            Tool::ReadLines => "patchdiff_read_lines",
            Tool::ExportTarget => "patchdiff_export_target",
            Tool::SubmitEdits => "patchdiff_submit_edits",
            Tool::SubmitOperations => "patchdiff_submit_operations",
            Tool::SubmitReplacement => "patchdiff_submit_replacement",
            Tool::Preview => "patchdiff_preview",
            Tool::Save => "patchdiff_save",
            Tool::Replay => "patchdiff_replay",
            Tool::GetPdcpLog => "patchdiff_get_pdcp_log",
            Tool::GetManifestLedger => "patchdiff_get_manifest_ledger",
        }
    }

    /// The statuses the contract and docs/ document for this tool (`None`: a history page,
    /// which has no status member).
    fn statuses(self) -> &'static [Option<&'static str>] {
        match self {
            Tool::InitializeTarget | Tool::HandleUpload => &[Some("ok"), Some("invalid_argument")],
            Tool::GetTarget
            | Tool::ReadTarget
            | Tool::FindOccurrences
            | Tool::ReadLines
            | Tool::ExportTarget => &[Some("ok"), Some("invalid_argument"), Some("not_found")],
            Tool::SubmitEdits
            | Tool::SubmitOperations
            | Tool::SubmitReplacement
            | Tool::Preview => &[
                Some("accepted"),
                Some("rejected"),
                Some("invalid_argument"),
                Some("not_found"),
            ],
            Tool::Save => &[
                Some("saved"),
                Some("rejected"),
                Some("invalid_argument"),
                Some("not_found"),
            ],
            Tool::Replay => &[
                Some("success"),
                Some("failed"),
                Some("invalid_argument"),
                Some("not_found"),
            ],
            Tool::GetPdcpLog | Tool::GetManifestLedger => {
                &[None, Some("invalid_argument"), Some("not_found")]
            }
        }
    }
}

/// The state a call meets: the target row and its upload facts.
struct World<'a> {
    view: TargetView<'a>,
    source_line_endings: Value,
}

/// One response, checked against its tool's documented shape and every budget that applies.
fn check_answer(tool: Tool, v: &Value) -> Result<(), TestCaseError> {
    let Value::Object(m) = v else {
        return Err(TestCaseError::fail(format!(
            "{} answered a non-object: {v}",
            tool.name()
        )));
    };
    let status = m.get("status").map(|s| s.as_str());
    ensure!(
        status != Some(None),
        "{}: status is not a string: {v}",
        tool.name()
    );
    let status = status.flatten();
    ensure!(
        tool.statuses().contains(&status),
        "{}: undocumented status {status:?}: {}",
        tool.name(),
        head(v)
    );
    let wire = to_string(v, ASCII);
    ensure!(wire.is_ascii(), "ASCII spelling is not ASCII");
    let back: Value = serde_json::from_str(&wire)
        .map_err(|e| TestCaseError::fail(format!("answer does not re-parse: {e}")))?;
    ensure!(&back == v, "answer does not round-trip");
    match status {
        Some("invalid_argument") => {
            ensure!(
                m.get("code")
                    .and_then(Value::as_str)
                    .is_some_and(|c| !c.is_empty()),
                "{}: invalid_argument without a code: {v}",
                tool.name()
            );
            ensure!(
                m.get("failure_detail").and_then(Value::as_str).is_some(),
                "{}: invalid_argument without failure_detail: {v}",
                tool.name()
            );
            let code = m["code"].as_str().unwrap_or_default();
            if code == "unknown_argument" {
                ensure!(m["tool"] == tool.name(), "unknown_argument names the tool");
                ensure!(
                    m["unknown_arguments"].is_array(),
                    "unknown_arguments listed"
                );
            }
            if code == "missing_argument" {
                ensure!(m["tool"] == tool.name(), "missing_argument names the tool");
                ensure!(
                    m["missing_arguments"].is_array(),
                    "missing_arguments listed"
                );
            }
            if tool == Tool::Preview {
                ensure!(
                    m.get("detail").is_some(),
                    "preview invalid_argument has detail"
                );
            }
        }
        Some("not_found") => {
            ensure!(m["code"] == "target_not_found", "not_found code: {v}");
        }
        _ => {}
    }
    if matches!(tool, Tool::GetPdcpLog | Tool::GetManifestLedger) {
        ensure!(
            m["entries"].is_array(),
            "history answer without entries: {v}"
        );
        ensure!(
            m["has_more"].is_boolean(),
            "history answer without has_more"
        );
        ensure!(
            m["next_sequence"].is_null() || m["next_sequence"].is_i64(),
            "next_sequence"
        );
        if status.is_some() {
            ensure!(
                m["entries"] == json!([]) && m["has_more"] == false && m["next_sequence"].is_null(),
                "an invalid or not-found page is empty: {v}"
            );
        }
    }
    budgets(tool, m)
}

fn head(v: &Value) -> String {
    let t = v.to_string();
    t.chars().take(600).collect()
}

/// Contract "Bounded rejection context", "Exact candidates", warnings and the preview budgets.
fn budgets(tool: Tool, m: &Map<String, Value>) -> Result<(), TestCaseError> {
    let context = |c: &Value, what: &str| -> Result<(), TestCaseError> {
        if c.is_null() {
            return Ok(());
        }
        ensure!(
            ascii_len(c) <= CONTEXT_MAX_BYTES,
            "{what}: {} bytes > {CONTEXT_MAX_BYTES}",
            ascii_len(c)
        );
        if let Some(t) = c.get("text").and_then(Value::as_str) {
            ensure!(
                char_len(t) <= CONTEXT_MAX_CHARS,
                "{what}: text over 256 code points"
            );
        }
        Ok(())
    };
    let mut contexts = 0;
    if let Some(d) = m.get("diagnostic").filter(|d| d.is_object()) {
        if let Some(fc) = d.get("failure_context") {
            context(fc, "failure_context")?;
            contexts += ascii_len(fc);
        }
        if let Some(c) = d.get("exact_candidates") {
            ensure!(
                ascii_len(c) <= CANDIDATES_MAX_BYTES,
                "exact_candidates {} bytes",
                ascii_len(c)
            );
            ensure!(
                c["candidates"]
                    .as_array()
                    .is_some_and(|a| a.len() <= CANDIDATES_MAX),
                "more than five candidates"
            );
        }
        if let Some(n) = d.get("near_misses") {
            ensure!(
                ascii_len(n) <= NEAR_MISSES_MAX_BYTES,
                "near_misses over budget"
            );
        }
        if let Some(q) = d.get("near_miss_query") {
            ensure!(
                ascii_len(q) <= NEAR_MISS_QUERY_MAX_BYTES,
                "near_miss_query over budget"
            );
        }
        if let Some(w) = d.get("warnings") {
            ensure!(
                w.as_array().is_some_and(|a| a.len() <= WARNINGS_MAX),
                "stored warnings over 16"
            );
        }
    }
    if let Some(cc) = m.get("current_context") {
        context(cc, "current_context")?;
        contexts += ascii_len(cc);
    }
    ensure!(
        contexts <= CONTEXTS_MAX_BYTES || tool == Tool::Preview,
        "contexts together {contexts} bytes > {CONTEXTS_MAX_BYTES}"
    );
    // "Rejection Enrichment": at most 18,432 bytes across the enrichment fields together.
    let enrichment = contexts
        + ["exact_candidates", "near_misses"]
            .iter()
            .filter_map(|k| m.get("diagnostic").and_then(|d| d.get(*k)))
            .map(ascii_len)
            .sum::<usize>();
    ensure!(
        enrichment <= 18_432 || tool == Tool::Preview,
        "enrichment fields together {enrichment} bytes > 18,432"
    );
    for k in ["warnings", "warning_details"] {
        if let Some(w) = m.get(k) {
            ensure!(
                w.as_array().is_some_and(|a| a.len() <= WARNINGS_MAX),
                "{k} over 16"
            );
        }
    }
    match tool {
        Tool::ReadTarget | Tool::ReadLines => {
            if let Some(t) = m.get("text").and_then(Value::as_str) {
                ensure!(
                    char_len(t) <= READ_MAX_CHARS,
                    "a read page over 8,000 code points"
                );
            }
        }
        Tool::FindOccurrences => {
            if let Some(o) = m.get("occurrences").and_then(Value::as_array) {
                ensure!(o.len() <= SEARCH_MAX_RESULTS, "more than 200 occurrences");
                for x in o {
                    for k in ["before", "after"] {
                        let t = x[k].as_str().unwrap_or_default();
                        ensure!(
                            char_len(t) <= SEARCH_CONTEXT_MAX,
                            "occurrence context over 400"
                        );
                    }
                }
            }
        }
        // The preview's own invalid_argument answers echo the offending value unbounded, a
        // known bug reproduced by `preview_invalid_format_echo_exceeds_the_payload_budget`.
        Tool::Preview if m["status"] != "invalid_argument" => {
            let whole = ascii_len(&Value::Object(m.clone()));
            ensure!(
                whole <= PREVIEW_MAX_BYTES,
                "preview {whole} bytes > {PREVIEW_MAX_BYTES}: {}",
                head(&Value::Object(m.clone()))
            );
            if let Some(f) = m.get("change_facts").and_then(Value::as_array) {
                ensure!(f.len() <= PREVIEW_FACTS_MAX, "more than 32 facts");
                for x in f {
                    ensure!(
                        ascii_len(x) <= PREVIEW_FACT_MAX_BYTES,
                        "a fact over 2,048 bytes"
                    );
                }
                ensure!(
                    ascii_len(&json!({"change_facts": f})) <= PREVIEW_FACTS_MAX_BYTES,
                    "facts over 16,384 bytes"
                );
            }
            if let Some(d) = m.get("diagnostic") {
                ensure!(
                    ascii_len(&json!({"diagnostic": d})) <= PREVIEW_DIAGNOSTIC_MAX_BYTES,
                    "preview diagnostic over 16,384 bytes"
                );
            }
            ensure!(
                m.get("evidence_omissions").is_none_or(Value::is_array),
                "evidence_omissions"
            );
        }
        _ => {}
    }
    Ok(())
}

/// Runs a read tool's argument parse and body as the extension's `with_target` does.
fn with_target<R>(
    tool: Tool,
    text: &str,
    allowed: &[&str],
    w: &World,
    parse: impl FnOnce(&Args) -> Result<R, ArgError>,
    f: impl FnOnce(R, &TargetView) -> Result<Value, ArgError>,
) -> Value {
    let parsed = Args::parse(text, allowed, &["target_file_id"])
        .and_then(|a| Ok((a.target_file_id()?, parse(&a)?)));
    match parsed {
        Err(e) => e.to_json(tool.name()),
        Ok((id, _)) if id != T => not_found(&id),
        Ok((_, r)) => f(r, &w.view).unwrap_or_else(|e| e.to_json(tool.name())),
    }
}

/// A submission through the pipeline of `run_submission`, with every invariant of the row.
fn submission(
    tool: Tool,
    parsed: Result<submit::Submission, ArgError>,
    w: &World,
    parent: &Parent,
    answers: &mut Vec<Value>,
) -> Result<(), TestCaseError> {
    let sub = match parsed {
        // As `drive::run` answers them: a malformed target ID is the target-identity rejection.
        Err(e) => {
            answers.push(match &e.malformed_target {
                Some(m) => identity::rejection(&identity::malformed(m, None)),
                None => e.to_json(tool.name()),
            });
            return Ok(());
        }
        Ok(s) => s,
    };
    ensure!(sub.pdcp_content.is_ascii(), "pdcp_content is not ASCII");
    ensure!(
        sha256_hex(&sub.pdcp_content) == sub.pdcp_content_hash,
        "pdcp_content_hash is not the SHA-256 of pdcp_content"
    );
    // Contract `source (string, default "model_response")`: any storable string within the
    // documented bound (docs/sql-api.md), never NUL, which PostgreSQL text cannot hold.
    ensure!(
        sub.source.chars().count() <= SOURCE_MAX_CHARS && !sub.source.contains('\0'),
        "stored source {:?}",
        sub.source
    );
    if sub.target_file_id != T {
        answers.push(identity::rejection(&identity::Call {
            failure: identity::Failure::TargetNotFound,
            target_file_id: &json!(sub.target_file_id),
            format: sub.protocol_version,
            client_request_id: &sub.client_request_id,
            correlation_id: None,
        }));
        return Ok(());
    }
    let identity = submit::prepare(&sub, parent);
    ensure!(
        identity.fingerprint == sha256_hex(&to_string(&identity.envelope, CANONICAL)),
        "the fingerprint is not the SHA-256 of the canonical envelope"
    );
    ensure!(
        submit::prepare(&sub, parent) == identity,
        "prepare is not deterministic"
    );
    let start = w.view;
    if let Some(too_large) = submit::admission(&sub, None) {
        ensure!(
            too_large["code"] == "replacement_too_large" && too_large["pdcp_log_id"].is_null(),
            "admission answer: {}",
            head(&too_large)
        );
        answers.push(too_large);
        return Ok(());
    }
    let a = submit::evaluate(&sub, &identity, parent, &start);
    ensure!(
        submit::evaluate(&sub, &identity, parent, &start) == a,
        "evaluate is not deterministic"
    );
    ensure!(
        a.request_fingerprint == identity.fingerprint,
        "row fingerprint"
    );
    ensure!(
        a.before_version == start.version && a.before_hash == start.current_hash,
        "before"
    );
    ensure!(a.attempt.is_none_or(|n| n >= 1), "attempt < 1 stored");
    if let Some(k) = &a.client_request_id {
        ensure!(
            (1..=CLIENT_REQUEST_ID_MAX).contains(&k.len())
                && k.bytes().all(|b| b.is_ascii_graphic()),
            "an invalid request key stored: {k:?}"
        );
    }
    let stages = [
        "PROTOCOL_VALIDATION",
        "PRECONDITION_GUARD",
        "TRANSACTION_APPLICABILITY",
    ];
    match a.status.as_str() {
        "accepted" => {
            let content = a.new_content.as_deref().unwrap_or_default();
            ensure!(!content.contains('\r'), "accepted content is not canonical");
            ensure!(a.after_version == Some(start.version + 1), "after_version");
            ensure!(
                a.after_hash.as_deref() == Some(sha256_hex(content).as_str()),
                "after_hash"
            );
            ensure!(
                a.failure_reason.is_none() && a.failure_stage.is_none(),
                "accepted with a failure"
            );
            ensure!(!a.changes.is_empty(), "accepted without changes");
            ensure!(sub.invalid_text.is_empty(), "accepted invalid text");
            // Replay reproduces the acceptance from the stored row alone.
            let mut r = Replay::start(
                T,
                start.version,
                start.current_hash,
                start.content.to_owned(),
            )
            .map_err(|f| TestCaseError::fail(format!("replay start: {}", f.detail)))?;
            let row = Accepted::of(&a, 1, "p");
            r.step(&row).map_err(|f| {
                TestCaseError::fail(format!(
                    "replay does not reproduce an accepted {} attempt: {} {}",
                    a.protocol_version, f.reason, f.detail
                ))
            })?;
            ensure!(r.content() == content, "replay reconstructs other text");
        }
        "rejected" => {
            ensure!(
                a.failure_reason.is_some(),
                "rejected without failure_reason"
            );
            ensure!(
                a.failure_stage
                    .is_some_and(|s| stages.contains(&s.as_str())),
                "failure_stage {:?}",
                a.failure_stage
            );
            ensure!(
                a.new_content.is_none() && a.changes.is_empty(),
                "rejected with changes"
            );
            let d = a.diagnostic.as_ref();
            ensure!(
                d.is_some_and(|d| d["validation_stage"].is_string() && d["retryable"].is_boolean()),
                "rejected without a diagnostic"
            );
            if !sub.invalid_text.is_empty() {
                ensure!(
                    a.failure_reason.map(|r| r.as_str()) == Some("target_encoding_invalid"),
                    "invalid text judged as {:?}",
                    a.failure_reason
                );
                ensure!(a.intent.is_none(), "an intent stored from invalid text");
            }
        }
        other => return Err(TestCaseError::fail(format!("attempt status {other}"))),
    }
    let now = match (&a.new_content, &a.after_hash, a.after_version) {
        (Some(c), Some(h), Some(v)) => TargetView {
            target_file_id: T,
            version: v,
            current_hash: h,
            content: c,
        },
        _ => start,
    };
    let answer = submit::respond(&a, &sub, "log-1", &now, Some("corr"));
    ensure!(
        answer["status"] == a.status.as_str(),
        "respond changes the status"
    );
    // Exact keyed recovery returns the recorded outcome; another fingerprint is a conflict.
    if sub.request_key().is_some() {
        let s = AttemptRow::of(&a, "log-1");
        match submit::recover_or_conflict(&sub, &identity, &s, &now, None) {
            KeyOutcome::Recovered(r) => {
                let v = r.to_value();
                ensure!(
                    v["status"] == a.status.as_str() && v["deduplicated"] == true,
                    "recovery: {}",
                    head(&v)
                );
                answers.push(v);
            }
            KeyOutcome::Conflict(_) => {
                return Err(TestCaseError::fail(
                    "the same request conflicts with itself",
                ));
            }
        }
        let mut other = s.clone();
        other.request_fingerprint = sha256_hex("another request");
        match submit::recover_or_conflict(&sub, &identity, &other, &now, None) {
            KeyOutcome::Conflict(c) => {
                ensure!(
                    c.status.as_str() == "rejected",
                    "a conflict is a rejected row"
                );
                ensure!(
                    c.diagnostic
                        .as_ref()
                        .is_some_and(|d| d["code"] == "request_key_conflict"),
                    "conflict diagnostic"
                );
                ensure!(
                    c.client_request_id.is_none(),
                    "a conflict row takes the key"
                );
                answers.push(submit::respond(&c, &sub, "log-2", &now, None));
            }
            KeyOutcome::Recovered(_) => {
                return Err(TestCaseError::fail("another fingerprint recovered"));
            }
        }
    }
    answers.push(answer);
    Ok(())
}

fn log_row(seq: i64, bytes: i64, intent: Option<String>) -> AttemptRow {
    AttemptRow {
        log_sequence: seq,
        pdcp_log_id: format!("log-{seq}"),
        target_file_id: T.into(),
        editing_cycle_id: OTHER.into(),
        status: "rejected".into(),
        protocol_version: "patchdiff-tx/1".into(),
        runtime_version: "patchdiff-mvp-0.2.2".into(),
        pdcp_content_hash: sha256_hex("x"),
        request_fingerprint: sha256_hex("y"),
        client_request_id: None,
        conflicts_with_pdcp_log_id: None,
        before_version: 0,
        before_hash: sha256_hex(""),
        after_version: None,
        after_hash: None,
        failure_reason: Some("match_absent".into()),
        failure_detail: Some("MATCH text not found in target.".into()),
        failure_stage: Some("TRANSACTION_APPLICABILITY".into()),
        failed_change_id: Some("chg_001".into()),
        parent_pdcp_log_id: None,
        attempt: None,
        source: "sql".into(),
        diagnostic: None,
        intent_head: intent,
        pdcp_content_bytes: bytes,
        created_at_us: seq.wrapping_mul(7_919_000_003),
        ..AttemptRow::default()
    }
}

/// Every tool's answer(s) to `text`, as the extension computes them.
fn answers(tool: Tool, text: &str, w: &World, g: &mut Gen) -> Result<Vec<Value>, TestCaseError> {
    let name = tool.name();
    let mut out = Vec::new();
    let meta_facts = w.source_line_endings.clone();
    match tool {
        Tool::InitializeTarget | Tool::HandleUpload => {
            match target::parse_initialize(text, tool == Tool::HandleUpload) {
                Err(e) => out.push(e.to_json(name)),
                Ok(t) => {
                    ensure!(
                        !t.canonical.contains('\r'),
                        "initialized content is not canonical"
                    );
                    ensure!(
                        t.current_hash == sha256_hex(&t.canonical),
                        "initialized hash"
                    );
                    ensure!(!t.filename.contains(['\n', '\r', '\0']), "filename");
                    out.push(target::initialized_response(&t, T, OTHER));
                }
            }
        }
        Tool::GetTarget => out.push(with_target(
            tool,
            text,
            &["target_file_id"],
            w,
            |_| Ok(()),
            |(), v| {
                let meta = TargetMeta {
                    filename: "doc.md",
                    target_type: "text/plain",
                    active_editing_cycle_id: OTHER,
                    source_line_endings: meta_facts,
                };
                Ok(target::get_target_response(v, &meta))
            },
        )),
        Tool::ReadTarget => {
            let v = with_target(
                tool,
                text,
                read::READ_TARGET_ARGS,
                w,
                read::parse_read_target,
                |r, v| read::read_target(v, r),
            );
            if v["status"] == "ok" {
                let (s, e) = (
                    v["start"].as_u64().unwrap_or(0) as usize,
                    v["end"].as_u64().unwrap_or(0) as usize,
                );
                ensure!(
                    v["text"] == slice_chars(w.view.content, s, e),
                    "read_target text is not its slice"
                );
            }
            out.push(v);
        }
        Tool::FindOccurrences => {
            let v = with_target(tool, text, read::FIND_ARGS, w, read::parse_find, |r, v| {
                Ok(read::find_occurrences(v, &r))
            });
            if v["status"] == "ok" {
                for o in v["occurrences"].as_array().into_iter().flatten() {
                    let (s, e) = (
                        o["start"].as_u64().unwrap_or(0) as usize,
                        o["end"].as_u64().unwrap_or(0) as usize,
                    );
                    ensure!(e > s, "an empty occurrence");
                }
            }
            out.push(v);
        }
        Tool::ReadLines => {
            let v = with_target(
                tool,
                text,
                lines::READ_LINES_ARGS,
                w,
                lines::parse_read_lines,
                |r, v| lines::read_lines(v, r),
            );
            if v["status"] == "ok" {
                let (s, e) = (
                    v["start"].as_u64().unwrap_or(0) as usize,
                    v["end"].as_u64().unwrap_or(0) as usize,
                );
                ensure!(
                    v["text"] == slice_chars(w.view.content, s, e),
                    "read_lines text is not its slice"
                );
            }
            out.push(v);
        }
        Tool::ExportTarget => {
            let v = with_target(
                tool,
                text,
                export::EXPORT_ARGS,
                w,
                export::parse_format,
                |f, v| {
                    let meta = ExportMeta {
                        filename: "doc.md",
                        target_type: "text/plain",
                        source_line_endings: &w.source_line_endings,
                    };
                    export::export(v, &meta, f)
                },
            );
            if v["status"] == "ok" {
                let c = v["content"].as_str().unwrap_or_default();
                ensure!(v["content_sha256"] == sha256_hex(c), "content_sha256");
                ensure!(
                    canonicalize(c) == w.view.content,
                    "an export is not the text"
                );
            }
            out.push(v);
        }
        Tool::SubmitEdits | Tool::SubmitOperations | Tool::SubmitReplacement => {
            let parsed = match tool {
                Tool::SubmitEdits => submit::parse_submit_edits(text),
                Tool::SubmitOperations => submit::parse_submit_operations(text),
                _ => submit::parse_submit_replacement(text),
            };
            let parent = match g.below(5) {
                0 | 1 => Parent::NotLookedUp,
                2 => Parent::NotFound,
                3 => Parent::Found {
                    target_file_id: T.into(),
                    status: Some(Status::Rejected),
                },
                _ => Parent::Found {
                    target_file_id: OTHER.into(),
                    status: Some(Status::Accepted),
                },
            };
            submission(tool, parsed, w, &parent, &mut out)?;
        }
        Tool::Preview => match preview::parse_preview(text) {
            Err(e) => out.push(match &e.malformed_target {
                Some(m) => preview::bound(identity::preview_rejection(
                    &identity::malformed(m, None),
                    m.runtime_version,
                )),
                None => preview::arg_error(&e),
            }),
            Ok(sub) if sub.target_file_id != T => {
                let call = identity::Call {
                    failure: identity::Failure::TargetNotFound,
                    target_file_id: &json!(sub.target_file_id),
                    format: sub.protocol_version,
                    client_request_id: &Value::Null,
                    correlation_id: None,
                };
                out.push(preview::bound(identity::preview_rejection(
                    &call,
                    sub.runtime_version,
                )))
            }
            Ok(sub) => {
                let v = preview::preview(&sub, &w.view);
                ensure!(
                    v["status"] == "invalid_argument"
                        || (v["preview"] == true && v["advisory"] == true),
                    "a preview verdict without preview/advisory"
                );
                out.push(v);
            }
        },
        Tool::Save => match checkpoint::parse_save(text) {
            Err(e) => out.push(e.to_json(name)),
            Ok(r) if r.target_file_id != T => out.push(not_found(&r.target_file_id)),
            Ok(r) => match checkpoint::check_guards(&r, &w.view) {
                Some(rejected) => out.push(rejected),
                None => {
                    let e = r.export_after_save.then(|| {
                        let meta = ExportMeta {
                            filename: "doc.md",
                            target_type: "text/plain",
                            source_line_endings: &w.source_line_endings,
                        };
                        export::export(&w.view, &meta, ExportFormat::OriginalText)
                            .unwrap_or_else(|e| e.to_json("patchdiff_export_target"))
                    });
                    out.push(checkpoint::saved_response(&w.view, "s", OTHER, T, e));
                }
            },
        },
        Tool::Replay => {
            let id = Args::parse(text, replay::REPLAY_ARGS, &["target_file_id"])
                .and_then(|a| a.target_file_id());
            match id {
                Err(e) => out.push(e.to_json(name)),
                Ok(id) if id != T => out.push(not_found(&id)),
                Ok(_) => {
                    let v = w.view;
                    let r = Replay::start(T, v.version, v.current_hash, v.content.to_owned());
                    out.push(match r {
                        Ok(r) => r.finish(&v),
                        Err(f) => f.to_json(&v, 0),
                    });
                }
            }
        }
        Tool::GetPdcpLog => match history::parse_log(text) {
            Err(e) => out.push(history::invalid(&e, name)),
            Ok(q) if q.target_file_id != T => out.push(history::not_found(&q.target_file_id)),
            Ok(q) => {
                ensure!(
                    (1..=HISTORY_MAX_LIMIT).contains(&q.page.limit),
                    "limit {}",
                    q.page.limit
                );
                ensure!(q.page.max_sequence >= 0, "a negative bound");
                let n = g.below(q.page.fetch() as usize + 1);
                let rows: Vec<AttemptRow> = (0..n)
                    .map(|i| {
                        let bytes = [10, 700_000, 1_048_576, 2_000_000][g.below(4)];
                        let intent = g.chance(70).then(|| g.text(80));
                        log_row(1_000 - i as i64, bytes, intent)
                    })
                    .collect();
                let plan = history::content_plan(&rows);
                let mut used = 0;
                for (i, (keep, r)) in plan.iter().zip(&rows).enumerate() {
                    ensure!(i > 0 || *keep, "the first record is always returned");
                    if *keep && i > 0 {
                        used += r.pdcp_content_bytes;
                    }
                }
                ensure!(
                    used <= LOG_CONTENT_PAGE_BYTES as i64,
                    "records past the page budget"
                );
                let contents = plan.iter().map(|k| k.then(|| "{}".to_owned())).collect();
                let v: Value = serde_json::from_str(&history::log_page(
                    &q.page,
                    rows,
                    false,
                    q.include_content,
                    contents,
                ))
                .expect("a log page is JSON");
                let entries = v["entries"].as_array().map_or(0, Vec::len);
                ensure!(
                    entries <= q.page.limit && entries == n.min(q.page.limit),
                    "page size"
                );
                ensure!(v["has_more"] == (n > q.page.limit), "has_more");
                for e in v["entries"].as_array().into_iter().flatten() {
                    let intent = e["intent"].as_str().unwrap_or_default();
                    ensure!(
                        char_len(intent) <= LOG_INTENT_MAX_CHARS,
                        "an intent over 256"
                    );
                    ensure!(
                        e["created_at"].as_str().is_some_and(|s| s.ends_with('Z')),
                        "created_at"
                    );
                }
                out.push(v);
            }
        },
        Tool::GetManifestLedger => match history::parse_ledger(text) {
            Err(e) => out.push(history::invalid(&e, name)),
            Ok(q) if q.target_file_id != T => out.push(history::not_found(&q.target_file_id)),
            Ok(q) => {
                let n = g.below(q.page.fetch() as usize + 1);
                let rows: Vec<LedgerRow> = (0..n)
                    .map(|i| LedgerRow {
                        ledger_sequence: 500 - i as i64,
                        pdcp_log_id: "p".into(),
                        log_sequence: 9,
                        before_version: 0,
                        after_version: 1,
                        editing_cycle_id: OTHER.into(),
                        change_index: 1,
                        change_id: "chg_001".into(),
                        intent: None,
                        transaction_intent: Some("t".into()),
                        rationale: None,
                        risk: None,
                        origin: "typed".into(),
                        derived: Some("{}".into()),
                        created_at_us: i as i64 * 1_000_003,
                    })
                    .collect();
                let v: Value = serde_json::from_str(&history::ledger_page(&q.page, rows, false))
                    .expect("a ledger page is JSON");
                let seqs: Vec<i64> = v["entries"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|e| e["ledger_sequence"].as_i64())
                    .collect();
                ensure!(
                    seqs.windows(2).all(|w| w[0] < w[1]),
                    "a ledger page is oldest first"
                );
                if v["has_more"] == true {
                    ensure!(
                        v["next_sequence"] == json!(seqs.first()),
                        "next_sequence is the first row"
                    );
                }
                out.push(v);
            }
        },
    }
    Ok(out)
}

/// One generated call: build, mutate, spell, answer, check; then, for an undamaged text, the
/// same request spelt differently must get the same answer.
fn call_once(
    tool: Tool,
    content: &str,
    raw_upload: Option<&str>,
    version: i64,
    choices: &[u32],
) -> Result<(), TestCaseError> {
    let hash = sha256_hex(content);
    let w = World {
        view: TargetView {
            target_file_id: T,
            version,
            current_hash: &hash,
            content,
        },
        source_line_endings: raw_upload.map_or(Value::Null, |r| SourceLineEndings::of(r).to_json()),
    };
    let mut g = Gen {
        choices,
        next: 0,
        content: content.chars().collect(),
        version,
        hash: hash.clone(),
    };
    let mut tree = g.args(tool);
    g.mutate(&mut tree);
    let spelling = Spelling {
        ascii: g.chance(30),
        spaces: g.chance(20),
        reverse_keys: false,
    };
    let text = tree.render(spelling);
    let (text, damaged) = g.damage(text);
    // The generator's remaining choices feed the body (parents, page rows) identically twice.
    let body_at = g.next;
    let first = answers(tool, &text, &w, &mut g)?;
    for v in &first {
        check_answer(tool, v)?;
        tally(v);
    }
    if damaged || first.iter().any(|v| v["code"] == "invalid_json") {
        return Ok(());
    }
    // Contract: wire whitespace, key order and escape spelling never change an identity.
    // Key order is not varied for invalid text: its identity depends on key order, a known bug
    // reproduced by `invalid_text_identity_depends_on_key_order` below.
    let invalid_text = first
        .iter()
        .any(|v| v["failure_reason"] == "target_encoding_invalid");
    let respelt = tree.render(Spelling {
        ascii: !spelling.ascii,
        spaces: !spelling.spaces,
        reverse_keys: !tree.has_duplicate_keys() && !invalid_text,
    });
    g.next = body_at;
    let second = answers(tool, &respelt, &w, &mut g)?;
    ensure!(
        first == second,
        "{}: another spelling of the same request is answered differently\n  {}\n  {}\n first: {}\nsecond: {}",
        tool.name(),
        text.chars().take(400).collect::<String>(),
        respelt.chars().take(400).collect::<String>(),
        first.iter().map(head).collect::<Vec<_>>().join(" | "),
        second.iter().map(head).collect::<Vec<_>>().join(" | ")
    );
    Ok(())
}

fn content_strategy() -> impl Strategy<Value = (Vec<usize>, u8)> {
    (
        proptest::collection::vec(0..PIECES.len() - 2, 0..60),
        any::<u8>(),
    )
}

/// The raw upload (with CR) and its canonical text; one case in 64 is large enough to pass
/// the near-miss scan bound (65,536 code points) and the context budgets.
fn build_content(pieces: &[usize], big: u8) -> (String, String) {
    let mut raw: String = pieces.iter().map(|i| PIECES[*i]).collect();
    if big == 255 {
        raw = raw.repeat(70_000 / raw.len().max(1) + 1);
    } else if big == 254 {
        raw.push_str(&"\"\\\u{1}🌍".repeat(2_000));
    }
    let canonical = canonicalize(&raw).into_owned();
    (raw, canonical)
}

// ---------------------------------------------------------------------------------------------
// The targets.

/// Every SQL function's arguments, random and mutated, through the engine functions that
/// function calls: no panic, a documented status, budgets, and the same answer for every
/// spelling of one request.
#[test]
fn fuzz_every_tool_argument_object() {
    let strategy = (
        0..TOOLS.len(),
        content_strategy(),
        0i64..4,
        proptest::collection::vec(any::<u32>(), 0..200),
    );
    fuzz(
        "arguments",
        4.0,
        strategy,
        |(tool, (pieces, big), version, choices)| {
            let (raw, canonical) = build_content(&pieces, big);
            let upload = (big % 3 != 0).then_some(raw.as_str());
            call_once(TOOLS[tool], &canonical, upload, version, &choices)
        },
    );
}

/// Submissions only, where acceptance is likely: application, replay of the accepted row,
/// keyed recovery and conflict, fingerprints and evidence budgets.
#[test]
fn fuzz_submissions_apply_replay_and_recover() {
    let strategy = (
        0..4usize,
        content_strategy(),
        0i64..3,
        proptest::collection::vec(any::<u32>(), 0..300),
    );
    fuzz(
        "submissions",
        2.0,
        strategy,
        |(k, (pieces, big), version, choices)| {
            let (_, canonical) = build_content(&pieces, big);
            let tool = [
                Tool::SubmitEdits,
                Tool::SubmitOperations,
                Tool::SubmitReplacement,
                Tool::Preview,
            ][k];
            call_once(tool, &canonical, None, version, &choices)
        },
    );
}

/// Arbitrary text, mostly JSON-shaped, to every argument parser.
#[test]
fn fuzz_raw_argument_text() {
    const TOKENS: &[&str] = &[
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        "\"",
        "\\",
        "\\u",
        "\"target_file_id\":",
        "\"11111111-1111-4111-8111-111111111111\"",
        "\"edits\":",
        "\"match\":",
        "\"intent\":",
        "\"operations\":",
        "d800",
        "dc00",
        "\\ud800",
        "\\udfff",
        "1e400",
        "-",
        "0",
        "true",
        "null",
        "\u{fdd0}",
        "\\ufdd0",
        " ",
    ];
    // Plain integers pick the tokens: proptest's per-element union trees are slow in debug.
    let jsonish = proptest::collection::vec(any::<u32>(), 0..40).prop_map(|v| {
        v.into_iter()
            .map(|x| match x as usize % (TOKENS.len() + 1) {
                k if k < TOKENS.len() => TOKENS[k].to_owned(),
                _ => char::from_u32((x >> 8) % 0x11_0000).map_or_else(String::new, String::from),
            })
            .collect::<String>()
    });
    let strategy = (
        0..TOOLS.len(),
        prop_oneof![3 => jsonish, 1 => any::<String>()],
    );
    fuzz("raw text", 4.0, strategy, |(tool, text)| {
        let content = "alpha beta alpha\n🌍\n";
        let hash = sha256_hex(content);
        let w = World {
            view: TargetView {
                target_file_id: T,
                version: 1,
                current_hash: &hash,
                content,
            },
            source_line_endings: Value::Null,
        };
        let mut g = Gen {
            choices: &[],
            next: 0,
            content: content.chars().collect(),
            version: 1,
            hash: hash.clone(),
        };
        for v in answers(TOOLS[tool], &text, &w, &mut g)? {
            check_answer(TOOLS[tool], &v)?;
        }
        // The lone-surrogate marker must keep every other byte of the text.
        if let Some((marked, sentinel)) = invalid_text::mark_lone_surrogates(&text) {
            ensure!(!text.contains(sentinel), "the sentinel occurs in the text");
            ensure!(marked.len() >= text.len(), "marking lost text");
        }
        Ok(())
    });
}

/// Strings of up to `max` code points, mostly from `alphabet`, one in eight any scalar value.
/// Built from plain integers: proptest's per-element union trees are slow in a debug build.
fn chars(alphabet: &'static [char], max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(any::<u32>(), 0..max).prop_map(move |v| {
        v.into_iter()
            .map(|x| match x % 8 {
                7 => char::from_u32((x >> 3) % 0x11_0000).unwrap_or('\u{fffd}'),
                k => alphabet[k as usize % alphabet.len()],
            })
            .collect()
    })
}

/// Canonicalization, line-ending facts, exports and code-point arithmetic.
#[test]
fn fuzz_canonical_text() {
    let text = chars(&['\r', '\n', 'a', 'é', '🌍', '\u{0}', '\u{2028}'], 200);
    fuzz(
        "canonical text",
        4.0,
        (text, any::<usize>(), any::<usize>()),
        |(raw, i, j)| {
            let c = canonicalize(&raw);
            ensure!(!c.contains('\r'), "CR survives canonicalization");
            ensure!(canonicalize(&c) == c, "canonicalization is not idempotent");
            let facts = SourceLineEndings::of(&raw);
            let breaks = c.matches('\n').count() as u64;
            ensure!(
                facts.lf + facts.crlf + facts.cr == breaks,
                "line-ending counts"
            );
            ensure!(
                char_len(&c) as u64 == facts.source_code_points - facts.crlf,
                "code points"
            );
            ensure!(facts.source_utf8_bytes == raw.len() as u64, "bytes");
            ensure!(facts.source_sha256 == sha256_hex(&raw), "source hash");
            ensure!(
                SourceLineEndings::from_json(&facts.to_json()) == Some(facts.clone()),
                "facts round-trip"
            );
            for eol in [export::Eol::Lf, export::Eol::Crlf, export::Eol::Cr] {
                ensure!(
                    canonicalize(&export::write_eol(&c, eol)) == c,
                    "an export is not canonical text"
                );
            }
            // A uniform upload exports back to its bytes with original_eol.
            let fmt = export::content_eol(ExportFormat::OriginalEol, &facts.to_json());
            if let Ok(eol) = fmt {
                ensure!(
                    export::write_eol(&c, eol) == raw,
                    "original_eol does not restore a uniform upload"
                );
            }
            let n = char_len(&c);
            let (i, j) = (i % (n + 2), j % (n + 2));
            ensure!(
                byte_offset(&c, i).is_some() == (i <= n),
                "byte_offset range"
            );
            let sl = slice_chars(&c, i.min(j), i.max(j));
            ensure!(
                char_len(sl) == i.max(j).min(n) - i.min(j).min(n),
                "slice length"
            );
            Ok(())
        },
    );
}

/// Near misses: at most three pairwise disjoint windows, each within the threshold, its text a
/// slice of the buffer, its distance exact, within 8,192 bytes.
#[test]
fn fuzz_near_misses() {
    let text = |max| chars(&['a', 'b', '🌍', '\u{301}', '"', '\u{1}'], max);
    fuzz(
        "near misses",
        3.0,
        (text(300), text(70)),
        |(buffer, query)| {
            let nm = near_miss::search(&buffer, &query);
            let q: Vec<char> = query.chars().collect();
            let v = nm.to_json();
            ensure!(
                ascii_len(&v) <= NEAR_MISSES_MAX_BYTES,
                "near misses over budget"
            );
            if q.len() > NEAR_MISS_QUERY_MAX_CHARS {
                ensure!(nm.omission_reason.is_some(), "a long query is searched");
                return Ok(());
            }
            ensure!(
                nm.candidates.len() <= NEAR_MISSES_MAX,
                "more than three near misses"
            );
            let max = near_miss::threshold(q.len());
            for (i, c) in nm.candidates.iter().enumerate() {
                ensure!(
                    c.distance >= 1 && c.distance <= max,
                    "distance {} of {max}",
                    c.distance
                );
                ensure!(
                    c.text == slice_chars(&buffer, c.start, c.end),
                    "window text"
                );
                let w: Vec<char> = c.text.chars().collect();
                ensure!(levenshtein(&q, &w) == c.distance, "distance is not exact");
                for d in &nm.candidates[..i] {
                    ensure!(
                        c.end <= d.start || d.end <= c.start,
                        "overlapping near misses"
                    );
                }
            }
            let nq = near_miss::near_miss_query(char_len(&query), &canonicalize(&query));
            ensure!(
                ascii_len(&nq) <= NEAR_MISS_QUERY_MAX_BYTES,
                "near_miss_query over budget"
            );
            Ok(())
        },
    );
}

fn levenshtein(a: &[char], b: &[char]) -> usize {
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, x) in a.iter().enumerate() {
        let mut cur = vec![i + 1];
        for (j, y) in b.iter().enumerate() {
            cur.push(
                (prev[j] + usize::from(x != y))
                    .min(prev[j + 1] + 1)
                    .min(cur[j] + 1),
            );
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Replay of stored rows it did not write: mutated records under every pair, wrong versions
/// and hashes. It stops with `failed` or succeeds; it never panics.
#[test]
fn fuzz_replay_of_stored_rows() {
    let strategy = (
        content_strategy(),
        0..replay::FORMATS.len() + 1,
        proptest::collection::vec(any::<u32>(), 0..200),
        any::<bool>(),
    );
    fuzz(
        "replay",
        2.0,
        strategy,
        |((pieces, big), f, choices, honest)| {
            let (_, content) = build_content(&pieces, big % 254);
            let hash = sha256_hex(&content);
            let mut g = Gen {
                choices: &choices,
                next: 0,
                content: content.chars().collect(),
                version: 0,
                hash: hash.clone(),
            };
            let (protocol, runtime) = replay::FORMATS
                .get(f)
                .map_or(("patchdiff-tx/9", "patchdiff-mvp-9"), |x| {
                    (x.protocol.as_str(), x.runtime.as_str())
                });
            let field = match protocol {
                tx2::PROTOCOL => "operations",
                tx3::PROTOCOL => "replacement",
                _ => "edits",
            };
            let proposal = match field {
                "edits" => g.list(|g, i| g.edit(i, false)),
                "operations" => g.list(|g, i| {
                    if g.chance(50) {
                        g.span_op(i)
                    } else {
                        g.edit(i, true)
                    }
                }),
                _ => g.replacement(),
            };
            let mut record = J::Obj(vec![
                ("protocol_version".into(), s(protocol)),
                ("intent".into(), s("stored")),
                (field.into(), proposal),
            ]);
            g.mutate(&mut record);
            let (text, _) = g.damage(record.render(Spelling::default()));
            let after = sha256_hex(&format!("{content}!"));
            let row = Accepted {
                log_sequence: 7,
                pdcp_log_id: "p",
                protocol_version: protocol,
                runtime_version: runtime,
                pdcp_content: &text,
                before_version: if honest { 0 } else { g.below(3) as i64 },
                before_hash: if honest || g.chance(50) {
                    hash.as_str()
                } else {
                    "0"
                },
                after_version: if g.chance(90) { Some(1) } else { None },
                after_hash: Some(&after),
                editing_cycle_id: "",
                observations: &[],
            };
            let mut r = Replay::start(T, 0, &hash, content.clone())
                .map_err(|f| TestCaseError::fail(format!("start: {}", f.detail)))?;
            let stored = TargetView {
                target_file_id: T,
                version: 1,
                current_hash: &after,
                content: &content,
            };
            let v = match r.step(&row) {
                Ok(()) => r.finish(&stored),
                Err(f) => f.to_json(&stored, r.replayed()),
            };
            check_answer(Tool::Replay, &v)?;
            // The records a format cannot read are protocol failures, never application ones.
            if v["status"] == "failed" {
                ensure!(
                    [
                        "replay_protocol_invalid",
                        "replay_application_failed",
                        "replay_divergence"
                    ]
                    .contains(&v["failure_reason"].as_str().unwrap_or_default()),
                    "failure_reason {}",
                    v["failure_reason"]
                );
            }
            ensure!(
                Replay::start(T, 0, "not a hash", content.clone()).is_err(),
                "a snapshot whose hash does not match starts"
            );
            Ok(())
        },
    );
}

/// Timestamps of any stored value format as RFC 3339 UTC with six fraction digits.
#[test]
fn fuzz_timestamps() {
    fuzz("timestamps", 1.0, any::<i64>(), |us| {
        let t = patchdiff_engine::api::time::rfc3339_utc(us);
        ensure!(t.ends_with('Z') && t.contains('T'), "{t}");
        let frac = t.rsplit('.').next().unwrap_or_default();
        ensure!(frac.len() == 7, "six fraction digits: {t}");
        Ok(())
    });
}

/// Regression, found by this harness and fixed (json.rs: "stored records and fingerprints use sorted keys
/// so that wire whitespace, key order and escape spelling never change an identity"): for a
/// proposal with invalid text in two places, the evidence envelope lists the defects in the
/// order the keys were sent, so the same request with its keys in another order gets another
/// `pdcp_content_hash` and `request_fingerprint`, and a keyed retry of it is a
/// `request_key_conflict` instead of the recorded outcome.
#[test]
fn invalid_text_identity_depends_on_key_order() {
    let a = format!(
        r#"{{"target_file_id":"{T}","intent":"i","expected_target_version":0,"client_request_id":"k","edits":[{{"match":"\u0000","replace":"\ud800"}}]}}"#
    );
    let b = format!(
        r#"{{"target_file_id":"{T}","intent":"i","expected_target_version":0,"client_request_id":"k","edits":[{{"replace":"\ud800","match":"\u0000"}}]}}"#
    );
    let (a, b) = (
        submit::parse_submit_edits(&a).unwrap(),
        submit::parse_submit_edits(&b).unwrap(),
    );
    assert_eq!(a.invalid_text.len(), 2);
    let (ia, ib) = (
        submit::prepare(&a, &Parent::NotLookedUp),
        submit::prepare(&b, &Parent::NotLookedUp),
    );
    assert_eq!(
        a.pdcp_content_hash, b.pdcp_content_hash,
        "key order changed the record identity:\n{}\n{}",
        a.pdcp_content, b.pdcp_content
    );
    assert_eq!(ia.fingerprint, ib.fingerprint);
}

/// Regression, found by this harness and fixed (contract "patchdiff_preview": "The complete returned
/// payload is at most 32,768 bytes"): the preview's own `invalid_argument` answer for a bad
/// `format` quotes the whole value, twice (`detail` and `failure_detail`), so a 20,000-character
/// format string gets an answer of about 40 KB.
#[test]
fn preview_invalid_format_echo_exceeds_the_payload_budget() {
    let args = json!({
        "target_file_id": T,
        "format": "x".repeat(20_000),
        "expected_target_version": 0,
        "intent": "i",
        "edits": [],
    });
    let e = preview::parse_preview(&args.to_string()).unwrap_err();
    let v = preview::arg_error(&e);
    assert_eq!(v["code"], "invalid_format");
    assert!(
        ascii_len(&v) <= PREVIEW_MAX_BYTES,
        "a preview answer of {} bytes",
        ascii_len(&v)
    );
}
