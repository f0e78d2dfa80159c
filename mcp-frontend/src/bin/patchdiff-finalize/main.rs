//! `patchdiff-finalize`, run as `patchdiff-mcp finalize`: the trusted host finalizer (host
//! guide, "Trusted scalar finalization"; docs/finalize.md).
//!
//! Given a manifest of targets with the guards of their last accepted receipts, it checkpoints
//! each target with both guards (`patchdiff_save`), proves the accepted history reproduces the
//! guarded state (`patchdiff_replay`), exports it as canonical LF (`patchdiff_export_target`),
//! hashes the exported bytes itself and writes them, with its evidence, into a fresh output
//! directory, fsyncing everything before it reports success. Each call is one SQL function
//! call in autocommit, one at a time, never resent. An uncertain SAVE stops the run.
//!
//! A program of its own, beside the MCP server: `patchdiff-mcp finalize ...` executes it with
//! the same arguments. It shares the server's configuration and database code through the
//! `patchdiff_mcp` library, and speaks as `patchdiff-mcp finalize`, the documented command.

mod caller;
mod evidence;
mod finalizer;
mod manifest;
mod options;
mod run;
#[cfg(test)]
mod tests;

use options::{USAGE, parse_args};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("PATCHDIFF_LOG"))
        .with_ansi(false)
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(command(&args).await)
}

/// `finalize` as a command: parses `args`, runs, prints the outcome; returns the exit status.
async fn command(args: &[String]) -> i32 {
    let options = match parse_args(args) {
        Ok(Some(o)) => o,
        Ok(None) => {
            println!("{USAGE}");
            return 0;
        }
        Err(why) => {
            eprintln!("patchdiff-mcp finalize: {why}\n\n{USAGE}");
            return 2;
        }
    };
    let outcome = run::run(&options, |k| std::env::var(k).ok()).await;
    println!(
        "{}",
        serde_json::to_string_pretty(&outcome.json).unwrap_or_default()
    );
    outcome.exit_code
}
