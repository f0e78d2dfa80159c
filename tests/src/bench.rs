//! Shared pieces of the benchmark commands in `src/bin/` (docs/benchmarks.md).

/// xorshift64: deterministic corpora and queries. The recorded figures of the near-miss and
/// drift benchmarks were taken over its sequence, so it stays exactly this generator.
pub struct XorShift(pub u64);

impl XorShift {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// The count after `name` on the command line (`--queries 50`), or `default` when `name` is
/// absent. A missing, unreadable or zero count ends the command with a message and status 2:
/// every figure is a median over that many samples, and none can be taken of none.
pub fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == name) {
        None => default,
        Some(i) => count(name, args.get(i + 1).cloned()).unwrap_or_else(|e| {
            eprintln!("{e}");
            std::process::exit(2)
        }),
    }
}

/// `value`, the count given for option `name`, as at least 1; otherwise an error that says so.
pub fn count(name: &str, value: Option<String>) -> Result<usize, String> {
    let value = value.ok_or_else(|| format!("{name} needs a value"))?;
    match value.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "{name} must be a whole number of at least 1, not {value:?}"
        )),
    }
}

/// The `p` quantile (0..=1) of ascending, non-empty `sorted`, nearest rank.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// The 4,104-byte text of the front-end benchmarks: 152 lines, each with a `marker-NNNNN`.
pub fn marker_text() -> String {
    (0..152)
        .map(|i| format!("line {i:05} marker-{i:05} ok\n"))
        .collect()
}

/// The one-edit submission that moves a [`marker_text`] target from `version` to `version + 1`:
/// one marker's case swapped, so every call is accepted and the size holds.
pub fn marker_edit(target: &str, version: i64) -> serde_json::Value {
    let k = (version as usize) % 128;
    let (from, to) = if (version as usize / 128).is_multiple_of(2) {
        (format!("marker-{k:05}"), format!("MARKER-{k:05}"))
    } else {
        (format!("MARKER-{k:05}"), format!("marker-{k:05}"))
    };
    serde_json::json!({"target_file_id": target, "expected_target_version": version,
        "intent": "bench", "edits": [{"match": from, "replace": to}]})
}
