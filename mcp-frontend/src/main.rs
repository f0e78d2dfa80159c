//! `patchdiff-mcp`: serves MCP on stdin/stdout; logs go to stderr. Configuration: README.md.
//! `patchdiff-mcp finalize ...` runs the trusted host finalizer instead (docs/finalize.md): the
//! program `patchdiff-finalize` installed beside this one.

const HELP: &str = "\
usage: patchdiff-mcp                 serve MCP (JSON-RPC over stdin/stdout)
       patchdiff-mcp finalize ...    trusted host finalization (patchdiff-mcp finalize --help)

Configured by the environment: PATCHDIFF_DATABASE_URL (else the embedded cluster in
PATCHDIFF_DATA_DIR), PATCHDIFF_MCP_PROFILE, PATCHDIFF_MCP_RESPONSE_MODE, PATCHDIFF_LOG,
PATCHDIFF_WORKSPACE_ROOT (required by the workspace profiles), PATCHDIFF_WORKSPACE_SYNC_ON_SAVE,
PATCHDIFF_WORKSPACE_KEY_FILE (the binding key; default workspace.key in the data directory),
PATCHDIFF_WORKSPACE_RESERVED (path components never imported or published; default .git,.hg,.svn),
PATCHDIFF_STRICT_OBSERVATION_MODE (1/true or 0/false), PATCHDIFF_WAYMARK_MODE (resident),
PATCHDIFF_MCP_STATEMENT_TIMEOUT (statement_timeout of every call: 30s default, 500ms, 2min, 0 = unset).";

#[tokio::main(flavor = "current_thread")]
async fn main() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("PATCHDIFF_LOG"))
        .with_ansi(false)
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        None => serve().await,
        Some("finalize") => finalize(&args[1..]),
        Some("-h" | "--help" | "help") => println!("{HELP}"),
        Some("-V" | "--version") => println!("patchdiff-mcp {}", env!("CARGO_PKG_VERSION")),
        Some(other) => {
            eprintln!("patchdiff-mcp: unknown argument {other:?}\n\n{HELP}");
            std::process::exit(2);
        }
    }
}

/// Replaces this process with `patchdiff-finalize`, found beside this executable, given the same
/// arguments: its stdio and exit status are the command's own.
fn finalize(args: &[String]) -> ! {
    use std::os::unix::process::CommandExt;
    const FINALIZER: &str = "patchdiff-finalize";
    let path = std::env::current_exe()
        .map(|exe| exe.with_file_name(FINALIZER))
        .unwrap_or_else(|_| FINALIZER.into());
    let e = std::process::Command::new(&path).args(args).exec();
    // Exit status 2: refused before any SAVE, nothing written (docs/finalize.md).
    eprintln!(
        "patchdiff-mcp finalize: cannot run {}: {e}; {FINALIZER} is installed beside patchdiff-mcp (scripts/run.sh installs both)",
        path.display()
    );
    std::process::exit(2)
}

async fn serve() {
    let started = async {
        let config = patchdiff_mcp::config::Config::from_env(|k| std::env::var(k).ok())?;
        // The root is opened before the database, so a bad root fails start-up at once.
        if config.workspace_root.is_some() {
            config.prepare_key_dir()?;
        }
        let workspace = match &config.workspace_root {
            Some(root) => Some(patchdiff_mcp::workspace::Workspace::open(
                root,
                patchdiff_mcp::binding::BindingKey::load_or_create(&config.workspace_key_file)?,
                config.workspace_reserved.clone(),
                config.workspace_hook.clone(),
            )?),
            None => None,
        };
        let mut db = patchdiff_mcp::database::Db::connect(&config.database).await?;
        // Strict mode is enforced by the extension's patchdiff.strict_observation_mode, which
        // an extension without observed submissions does not know: a placeholder setting would
        // be silently ignored, so such a database refuses start-up instead.
        if config.strict_observation_mode
            && !db
                .functions
                .contains("patchdiff_submit_observed_operations")
        {
            return Err(format!(
                "PATCHDIFF_STRICT_OBSERVATION_MODE is on, but the installed pg_patchdiff has no observed submissions (patchdiff_submit_observed_operations): {}",
                db.versions.upgrade_advice()
            ));
        }
        if let Some(why) = db.refusal() {
            return Err(why);
        }
        db.set_session(&config.session_settings()).await?;
        Ok::<_, String>(patchdiff_mcp::server::Server::new(config, db).with_workspace(workspace))
    };
    match started.await {
        Ok(server) => server
            .serve(
                tokio::io::BufReader::new(tokio::io::stdin()),
                tokio::io::stdout(),
            )
            .await
            .unwrap_or_else(|e| tracing::error!("stdio: {e}")),
        Err(why) => {
            eprintln!("patchdiff-mcp: {why}");
            std::process::exit(1);
        }
    }
}
