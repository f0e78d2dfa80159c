//! The parser helper process (`patchdiff-waymark-helper`) over real pipes, as a backend drives
//! it (issue 14): it answers request after request on one warm process, equal to the in-process
//! outline; a grammar's abort ends only the helper; a memory limit is its own exit status; an
//! outline over a cap is an answer and the helper goes on; and its peak memory on the outline
//! shapes of the issue stays bounded.

use patchdiff_engine::api::scope::{Language, ParserLimit, wire};
use patchdiff_waymark::outline;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};

const HELPER: &str = env!("CARGO_BIN_EXE_patchdiff-waymark-helper");

fn start(args: &[&str]) -> Child {
    Command::new(HELPER)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the helper starts")
}

/// Sends one request; the decoded answer, or `None` when the helper closed its output.
fn ask(
    h: &mut Child,
    language: Language,
    text: &str,
) -> Option<Result<patchdiff_engine::api::scope::Outline, ParserLimit>> {
    let stdin = h.stdin.as_mut().unwrap();
    if stdin.write_all(&wire::request(language, text)).is_err() {
        return None;
    }
    stdin.flush().ok()?;
    let out = h.stdout.as_mut().unwrap();
    let mut len = [0u8; 8];
    out.read_exact(&mut len).ok()?;
    let mut body = vec![0u8; u64::from_le_bytes(len) as usize];
    out.read_exact(&mut body).ok()?;
    Some(wire::decode(language, &body).expect("a well-formed answer"))
}

/// Peak resident memory of a process, in bytes (VmHWM).
fn peak(h: &Child) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{}/status", h.id())).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<usize>()
        .unwrap()
        * 1024
}

#[test]
fn one_warm_helper_answers_in_turn_and_equals_the_in_process_outline() {
    let mut h = start(&["--memory-bytes", "1073741824", "--cpu-seconds", "10"]);
    let files = [
        (
            Language::Python,
            "class A:\n    def b(self):\n        pass\n",
        ),
        (Language::Toml, "[a.b.c]\nx = 1\n[server]\nport = 8080\n"),
        (Language::Markdown, "# 🌟 Title\n\n## Part\n\ntext\n"),
        (
            Language::Json,
            "{\"tenants\": [{\"id\": \"t1\", \"v\": 1}]}",
        ),
    ];
    for (language, text) in files {
        let got = ask(&mut h, language, text).expect("answered");
        assert_eq!(got, outline(language, text), "{language:?}");
    }
    drop(h.stdin.take());
    assert!(h.wait().unwrap().success());
}

/// The 509-byte file that aborted the whole PostgreSQL server: only the helper ends.
#[test]
fn the_yaml_abort_ends_only_the_helper() {
    let mut h = start(&[]);
    let text = format!("{}x", "- ".repeat(254));
    assert_eq!(text.len(), 509);
    assert_eq!(ask(&mut h, Language::Yaml, &text), None);
    assert_eq!(h.wait().unwrap().signal(), Some(libc::SIGABRT));
}

/// An allocation refused under the address-space limit ends the helper with status 3, which
/// the backend reports as `parser_limit` (memory), not as a crash.
#[test]
fn a_memory_limit_is_its_own_exit_status() {
    let mut h = start(&["--memory-bytes", &(96u64 << 20).to_string()]);
    let text = format!("[{}1]", "1,".repeat(500_000));
    assert_eq!(ask(&mut h, Language::Json, &text), None);
    assert_eq!(h.wait().unwrap().code(), Some(3));
}

/// "Outline memory is bounded by the input": the outline shapes of issue 14 answer
/// `parser_limit` while the outline is built, the helper goes on serving, and its peak stays
/// under 8x the input plus 64 MiB (the code, the grammars and tree-sitter's own tree).
#[test]
fn outline_shapes_stop_at_their_caps_with_bounded_memory() {
    for (size, label) in [
        (256 * 1024, "265 KB"),
        (512 * 1024, "525 KB"),
        (1 << 20, "1 MB"),
    ] {
        let mut h = start(&["--memory-bytes", "1073741824"]);
        let text = format!("{{\"{}\": [{}[]]}}", "k".repeat(size), "[], ".repeat(1000));
        let got = ask(&mut h, Language::Json, &text).expect("answered");
        assert_eq!(got, Err(ParserLimit::NameBytes), "{label}");
        let bound = 8 * text.len() + (64 << 20);
        let p = peak(&h);
        eprintln!(
            "{label}: input {} bytes, helper peak {} bytes",
            text.len(),
            p
        );
        assert!(p <= bound, "{label}: peak {p} > {bound}");
        // Still serving.
        assert!(ask(&mut h, Language::Json, "{\"a\": 1}").unwrap().is_ok());
    }
}
