//! What the SQL and stdio fuzz suites share: run size, seed, reporting and a reproducible
//! random source.

use std::io::Write;

/// `PATCHDIFF_FUZZ_CASES`, else `default`.
pub fn cases(default: usize) -> usize {
    std::env::var("PATCHDIFF_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// `PATCHDIFF_FUZZ_SEED`, else the clock: print it so that a failing run can be replayed.
pub fn seed() -> u64 {
    std::env::var("PATCHDIFF_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

/// Written straight to fd 2: libtest captures `eprintln!`, and the figures are the point.
pub fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// SplitMix64: small, fast, and reproducible from the printed seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }

    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

/// The statuses each SQL function (and MCP tool of the same name) documents; `None` is a
/// history page. `outcome_unknown` is not among them: it would mean the SQL call raised.
pub fn documented_statuses(function: &str) -> &'static [Option<&'static str>] {
    match function {
        "patchdiff_initialize_target" | "patchdiff_handle_upload" => {
            &[Some("ok"), Some("invalid_argument")]
        }
        "patchdiff_get_target"
        | "patchdiff_read_target"
        | "patchdiff_find_occurrences"
        | "patchdiff_read_lines"
        | "patchdiff_export_target" => &[Some("ok"), Some("invalid_argument"), Some("not_found")],
        "patchdiff_observe_scope" => &[
            Some("candidates"),
            Some("observed"),
            Some("observed_batch"),
            Some("ambiguous"),
            Some("unsupported"),
            Some("rejected"),
            Some("invalid_argument"),
            Some("not_found"),
        ],
        "patchdiff_submit_edits"
        | "patchdiff_submit_operations"
        | "patchdiff_submit_replacement"
        | "patchdiff_submit_observed_operations"
        | "patchdiff_submit"
        | "patchdiff_preview" => &[
            Some("accepted"),
            Some("rejected"),
            Some("invalid_argument"),
            Some("not_found"),
        ],
        // `partial`: a workspace publication whose checkpoint committed but whose file did not.
        "patchdiff_save" => &[
            Some("saved"),
            Some("rejected"),
            Some("partial"),
            Some("invalid_argument"),
            Some("not_found"),
        ],
        "patchdiff_diff" => &[
            Some("ok"),
            Some("failed"),
            Some("invalid_argument"),
            Some("not_found"),
        ],
        "patchdiff_replay" => &[
            Some("success"),
            Some("failed"),
            Some("invalid_argument"),
            Some("not_found"),
        ],
        "patchdiff_get_pdcp_log" | "patchdiff_get_manifest_ledger" => {
            &[None, Some("invalid_argument"), Some("not_found")]
        }
        // A function added after this list: any of the statuses the API uses anywhere.
        _ => &[
            Some("ok"),
            Some("accepted"),
            Some("rejected"),
            Some("saved"),
            Some("success"),
            Some("failed"),
            Some("partial"),
            Some("invalid_argument"),
            Some("not_found"),
        ],
    }
}
