//! `patchdiff-mcp`: serves MCP on stdin/stdout; logs go to stderr. Configuration: README.md.

#[tokio::main(flavor = "current_thread")]
async fn main() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("PATCHDIFF_LOG"))
        .with_ansi(false)
        .init();
    let started = async {
        let config = patchdiff_mcp::config::Config::from_env(|k| std::env::var(k).ok())?;
        let db = patchdiff_mcp::database::Db::connect(&config.database).await?;
        Ok::<_, String>(patchdiff_mcp::server::Server::new(config, db))
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
