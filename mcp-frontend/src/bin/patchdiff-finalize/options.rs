//! The command line: `--manifest FILE --out DIR [--call-timeout SECONDS]`.

use std::path::PathBuf;
use std::time::Duration;

pub const USAGE: &str = "\
usage: patchdiff-mcp finalize --manifest FILE --out DIR [--call-timeout SECONDS]

Trusted host finalization (docs/finalize.md): for each target of FILE, SAVE with both accepted
guards, replay (all four materialized-state checks), export as canonical LF and write the
independently hashed bytes under DIR/exports/, with DIR/manifest.json, DIR/events.jsonl and
DIR/results.json. DIR must not exist. Run it only after editing has ended.

  --manifest FILE          JSON: an array of {filename, target_file_id, expected_target_version,
                           expected_current_hash, accepted_pdcp_log_id} (or {\"targets\": [...]})
  --out DIR                the output directory to create (refused if it exists)
  --call-timeout SECONDS   bound on each database call (default 60); a SAVE that runs out of
                           time is uncertain and stops the run

The database is the MCP server's: PATCHDIFF_DATABASE_URL, else the embedded cluster.
Prints the outcome as JSON on stdout. Exit status: 0 complete; 1 incomplete (read results.json
and the outcome: some targets may be saved, a SAVE may be pending); 2 refused before any SAVE
(usage, manifest, output directory, database or target identity), with nothing written.";

pub(crate) const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub manifest: PathBuf,
    pub out: PathBuf,
    pub call_timeout: Duration,
}

/// Parses the arguments after `finalize`; `Ok(None)` asks for the help text.
pub fn parse_args(args: &[String]) -> Result<Option<Options>, String> {
    let (mut manifest, mut out, mut timeout) = (None, None, None);
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let slot = match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--manifest" => &mut manifest,
            "--out" => &mut out,
            "--call-timeout" => &mut timeout,
            other => return Err(format!("unknown argument {other:?}")),
        };
        let value = it.next().ok_or_else(|| format!("{arg} needs a value"))?;
        if slot.replace(value.clone()).is_some() {
            return Err(format!("{arg} given twice"));
        }
    }
    let call_timeout = match timeout {
        None => DEFAULT_CALL_TIMEOUT,
        Some(s) => s
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0)
            .map(Duration::from_secs_f64)
            .ok_or_else(|| {
                format!("--call-timeout {s:?} is not a number of seconds in (0, 86400]")
            })?,
    };
    match (manifest, out) {
        (Some(m), Some(o)) if !m.is_empty() && !o.is_empty() => Ok(Some(Options {
            manifest: m.into(),
            out: o.into(),
            call_timeout,
        })),
        _ => Err("--manifest FILE and --out DIR are required".into()),
    }
}
