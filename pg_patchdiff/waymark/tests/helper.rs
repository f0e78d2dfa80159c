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
    send(h, language, &wire::request(language, text))
}

/// Sends the framed `request` (in `language`); the decoded answer, or `None` as for [`ask`].
fn send(
    h: &mut Child,
    language: Language,
    request: &[u8],
) -> Option<Result<patchdiff_engine::api::scope::Outline, ParserLimit>> {
    let stdin = h.stdin.as_mut().unwrap();
    if stdin.write_all(request).is_err() {
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

/// A memory figure of a process from /proc/PID/status (`field`, e.g. `VmHWM:`), in bytes.
fn status_bytes(h: &Child, field: &str) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{}/status", h.id())).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<usize>()
        .unwrap()
        * 1024
}

/// Peak resident memory of a process, in bytes (VmHWM).
fn peak(h: &Child) -> usize {
    status_bytes(h, "VmHWM:")
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
/// Should the host run out of memory, the kernel's OOM killer takes a helper before any backend
/// (helper-55): every helper sets its `oom_score_adj` to the maximum before it reads input.
#[test]
fn a_helper_is_the_oom_killers_first_choice() {
    let mut h = start(&["--memory-bytes", "1073741824"]);
    // One answered request: the helper has confined itself by then.
    assert!(ask(&mut h, Language::Json, "{}").is_some());
    let adj = std::fs::read_to_string(format!("/proc/{}/oom_score_adj", h.id())).unwrap();
    assert_eq!(adj.trim(), "1000");
    h.kill().unwrap();
    h.wait().unwrap();
}

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

/// Resident memory of a process now, in bytes (VmRSS).
fn resident(h: &Child) -> usize {
    status_bytes(h, "VmRSS:")
}

/// docs/structural.md, the helper's memory: what one large parse took is given back once it
/// is answered. A helper lives as long as its backend, one per backend; it used to stay at its
/// peak (about 950 MB after one hostile 8 MB TOML text) for good, freed but kept by malloc.
#[test]
fn a_large_parse_gives_its_memory_back() {
    let mut h = start(&["--memory-bytes", "1073741824", "--kept-bytes", "0"]);
    let text = format!("x = {}1{}\n", "[".repeat(400_000), "]".repeat(400_000));
    assert!(ask(&mut h, Language::Python, &text).is_some());
    // The answer to a second request comes after the first one's memory was released.
    assert!(ask(&mut h, Language::Python, "x = 1\n").unwrap().is_ok());
    let (p, r) = (peak(&h), resident(&h));
    eprintln!("peak {p} bytes, resident after {r} bytes");
    assert!(
        p > 100 << 20,
        "the parse took {p} bytes: too little to show anything"
    );
    assert!(r < 64 << 20, "{r} bytes still resident after a peak of {p}");
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

/// Sends one request in a lineage (issue 21); the decoded answer, or `None` as for [`ask`].
fn ask_in(
    h: &mut Child,
    lineage: &str,
    language: Language,
    text: &str,
) -> Option<Result<patchdiff_engine::api::scope::Outline, ParserLimit>> {
    send(
        h,
        language,
        &wire::request_in_lineage(language, lineage.as_bytes(), text),
    )
}

/// Issue 21, item 2, through the helper process: versions of two targets asked for in turn,
/// each in its target's lineage (so the helper reparses from the tree it kept), answer what a
/// fresh parse in this process gives; plain requests in between are unaffected; and the
/// hostile input still ends only the helper when it comes in a lineage.
#[test]
fn lineage_requests_equal_fresh_outlines_and_keep_the_limits() {
    let mut h = start(&["--memory-bytes", "1073741824", "--cpu-seconds", "10"]);
    let mut py: String = (0..300)
        .map(|i| format!("class Handler{i}:\n    def handle(self, e):\n        retries = 0\n        return e\n\n\ndef handler_{i}(e):\n    return e\n\n\n"))
        .collect();
    let mut toml: String = (0..200)
        .map(|i| format!("[[tenants]]\nid = \"t{i}\"\nretry = 3\n\n"))
        .collect();
    for round in 0..6 {
        for (lineage, language, text) in [
            ("target-py", Language::Python, &py),
            ("target-toml", Language::Toml, &toml),
        ] {
            let got = ask_in(&mut h, lineage, language, text).expect("answered");
            assert_eq!(got, outline(language, text), "{lineage} round {round}");
        }
        let plain = "[a]\nb = 1\n";
        assert_eq!(
            ask(&mut h, Language::Toml, plain).expect("answered"),
            outline(Language::Toml, plain)
        );
        // A commit on each: 32 spread groups on the Python file, a table added to the TOML.
        for k in 0..32 {
            let f = format!(
                "class Handler{}:\n    def handle(self, e):\n        retries = ",
                k * 9 + round
            );
            let at = py.find(&f).unwrap() + f.len();
            let end = at + py[at..].find('\n').unwrap();
            py.replace_range(at..end, &(round + 1).to_string());
        }
        toml.insert_str(toml.len() / 2, &format!("[extra{round}]\nx = {round}\n\n"));
    }
    let text = format!("{}x", "- ".repeat(254));
    assert_eq!(ask_in(&mut h, "target-yaml", Language::Yaml, &text), None);
    assert_eq!(h.wait().unwrap().signal(), Some(libc::SIGABRT));
}

/// Issue 21: what a helper keeps for incremental parsing stays under an eighth of its memory
/// limit, so requests that fit a helper with nothing kept still fit. Under 128 MiB, four
/// targets of 600 KB (about 27 MB of tree each) in turn, twice: kept without a bound, their trees
/// alone would pass the limit, and the helper would exit with status 3.
#[test]
fn kept_trees_stay_under_an_eighth_of_the_memory_limit() {
    let mut h = start(&["--memory-bytes", &(128u64 << 20).to_string()]);
    let text: String = (0..5_600)
        .map(|i| format!("class Handler{i}:\n    def handle(self, e):\n        retries = 0\n        return e\n\n\ndef handler_{i}(e):\n    return e\n\n\n"))
        .collect();
    assert!(text.len() > 600_000);
    let want = outline(Language::Python, &text);
    for round in 0..2 {
        for lineage in ["t1", "t2", "t3", "t4"] {
            let got = ask_in(&mut h, lineage, Language::Python, &text);
            assert!(
                got.as_ref() == Some(&want),
                "{lineage} round {round}: the helper ended (None) or answered otherwise: {:?}",
                got.map(|g| g.map(|o| o.symbols.len()))
            );
        }
    }
    drop(h.stdin.take());
    assert!(h.wait().unwrap().success());
}

/// `patchdiff.parser_kept_memory` (issue 21): the helper's `--kept-bytes` bounds what it keeps
/// between calls, never above an eighth of its memory limit; 0 keeps nothing, and its answers
/// in a lineage are still those of a fresh parse.
#[test]
fn kept_memory_zero_keeps_nothing() {
    use patchdiff_waymark::helper::{Limits, kept_bytes};
    use patchdiff_waymark::incremental::{Made, Trees};
    let limits = |args: &[&str]| {
        Limits::from_args(args.iter().map(|s| s.to_string())).expect("valid arguments")
    };
    let gib = "1073741824";
    assert_eq!(kept_bytes(&limits(&["--memory-bytes", gib])), 128 << 20);
    assert_eq!(
        kept_bytes(&limits(&["--memory-bytes", gib, "--kept-bytes", "1048576"])),
        1 << 20
    );
    assert_eq!(
        kept_bytes(&limits(&[
            "--memory-bytes",
            gib,
            "--kept-bytes",
            "4294967296"
        ])),
        128 << 20,
        "never more than an eighth of the memory limit"
    );
    assert_eq!(kept_bytes(&limits(&["--kept-bytes", "0"])), 0);
    assert!(Limits::from_args(["--kept-bytes".to_string(), "-1".to_string()].into_iter()).is_err());

    // Nothing is kept under a budget of 0: the same text twice is parsed afresh both times.
    let py: String = (0..50)
        .map(|i| format!("def handler_{i}(e):\n    return e\n\n\n"))
        .collect();
    let mut none = Trees::new(4, 0);
    for _ in 0..2 {
        let (got, how) = none.outline_made(b"t1", Language::Python, py.clone());
        assert_eq!(how, Made::Fresh);
        assert_eq!(got, outline(Language::Python, &py));
        assert!(none.is_empty());
    }

    // Through the process: answers in a lineage equal a fresh parse.
    let mut h = start(&["--memory-bytes", gib, "--kept-bytes", "0"]);
    let edited = py.replace("handler_7", "handler_seven");
    for text in [&py, &edited, &py] {
        assert_eq!(
            ask_in(&mut h, "t1", Language::Python, text),
            Some(outline(Language::Python, text))
        );
    }
    drop(h.stdin.take());
    assert!(h.wait().unwrap().success());
}

/// The helper started with `args` under hard (and soft) `limits`, as a backend of a server
/// started under them (`ulimit`, systemd's `LimitAS=`/`LimitCPU=`) starts it.
fn start_under_hard_limits(args: &[&str], limits: &[(libc::__rlimit_resource_t, u64)]) -> Child {
    use std::os::unix::process::CommandExt;
    let limits = limits.to_vec();
    let mut command = Command::new(HELPER);
    command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // SAFETY: only setrlimit, which is async-signal-safe, between fork and exec.
    unsafe {
        command.pre_exec(move || {
            for &(resource, value) in &limits {
                let r = libc::rlimit {
                    rlim_cur: value as libc::rlim_t,
                    rlim_max: value as libc::rlim_t,
                };
                if libc::setrlimit(resource, &r) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    command.spawn().expect("the helper starts")
}

/// helper-84: a server started under hard resource limits (`ulimit -v`, `ulimit -t`, systemd's
/// LimitAS= or LimitCPU=) passes them to every backend and so to every helper. The helper asked
/// for its own limits above them, which only a privileged process may, failed, and exited before
/// reading anything: every outline of every text was answered as a crash the text caused. Now it
/// takes the inherited hard limits as its ceilings, and answers.
#[test]
fn a_helper_under_inherited_hard_limits_still_answers() {
    let mut h = start_under_hard_limits(
        &[
            "--memory-bytes",
            &(1u64 << 30).to_string(),
            "--cpu-seconds",
            "10",
        ],
        &[(libc::RLIMIT_AS, 512 << 20), (libc::RLIMIT_CPU, 3_600)],
    );
    let text = "# Title\n\nText.\n";
    for _ in 0..2 {
        let answer = ask(&mut h, Language::Markdown, text).expect("an answer, not an exit");
        assert_eq!(answer.unwrap(), outline(Language::Markdown, text).unwrap());
    }
    drop(h.stdin.take());
    assert_eq!(h.wait().unwrap().code(), Some(0));
}

/// helper-85: under an inherited hard CPU limit, the per-request soft limit stays a second under
/// it, so a text that needs more CPU ends the helper with SIGXCPU, the backend's `cpu` answer,
/// not with the SIGKILL the kernel sends at the hard limit (read as a helper stopped from
/// outside, never kept, and spent again on every call).
#[test]
fn a_cpu_limit_under_an_inherited_hard_one_is_still_sigxcpu() {
    let mut h = start_under_hard_limits(&["--cpu-seconds", "10"], &[(libc::RLIMIT_CPU, 2)]);
    // Markdown of newlines: seconds of CPU for tree-sitter-md.
    let text = "\n".repeat(4_000_000);
    assert_eq!(ask(&mut h, Language::Markdown, &text), None);
    assert_eq!(h.wait().unwrap().signal(), Some(libc::SIGXCPU));
}
