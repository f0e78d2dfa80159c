//! `patchdiff-mcp`: serves MCP on stdin/stdout; logs go to stderr. Configuration: README.md.
//! `patchdiff-mcp finalize ...` runs the trusted host finalizer instead (docs/finalize.md): the
//! program `patchdiff-finalize` installed beside this one.

const HELP: &str = "\
usage: patchdiff-mcp                 serve MCP (JSON-RPC over stdin/stdout)
       patchdiff-mcp serve --listen ADDR [--tokens FILE] [--connections N] [--queue-ms MS]
                           [--max-streams N] [--max-streams-per-role N]
                           [--shutdown-grace SECONDS] [--max-http-connections N]
                           [--max-http-connections-per-peer N] [--request-timeout SECONDS]
                                     serve MCP over Streamable HTTP at http://ADDR/mcp
                                     (docs/http.md: bearer tokens from FILE, or
                                     PATCHDIFF_MCP_TOKENS_FILE, each naming a PostgreSQL role)
       patchdiff-mcp finalize ...    trusted host finalization (patchdiff-mcp finalize --help)

Configured by the environment: PATCHDIFF_DATABASE_URL (else the embedded cluster in
PATCHDIFF_DATA_DIR), PATCHDIFF_MCP_PROFILE, PATCHDIFF_MCP_RESPONSE_MODE, PATCHDIFF_LOG,
PATCHDIFF_WORKSPACE_ROOT (required by the workspace profiles), PATCHDIFF_WORKSPACE_SYNC_ON_SAVE,
PATCHDIFF_WORKSPACE_KEY_FILE (the binding key; default workspace.key in the data directory),
PATCHDIFF_WORKSPACE_RESERVED (path components never imported or published; default .git,.hg,.svn),
PATCHDIFF_STRICT_OBSERVATION_MODE (1/true or 0/false), PATCHDIFF_WAYMARK_MODE (resident),
PATCHDIFF_MCP_STATEMENT_TIMEOUT (statement_timeout of every call: 30s default, 500ms, 2min, 0 = unset).
Over HTTP also: PATCHDIFF_MCP_ALLOWED_ORIGINS (Origin values allowed besides loopback ones,
comma-separated).";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // Over HTTP, one line per call at info unless PATCHDIFF_LOG says otherwise (docs/http.md);
    // over stdio, warnings and errors unless it says otherwise (docs/profiles.md). Over stdio
    // the default was errors only, and the warnings the docs promise (a file imported anew, a
    // cancel request that failed) were never written (helper-118).
    let default = if args.first().map(String::as_str) == Some("serve") {
        "info"
    } else {
        "warn"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("PATCHDIFF_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .with_ansi(false)
        .init();
    // One thread serves one stdio client; the HTTP endpoint serves many at once on every core.
    let runtime = if args.first().map(String::as_str) == Some("serve") {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    }
    .expect("starting the tokio runtime");
    runtime.block_on(run(args));
}

async fn run(args: Vec<String>) {
    match args.first().map(String::as_str) {
        None => serve().await,
        Some("serve") => serve_http(&args[1..]).await,
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
        let config = patchdiff_mcp::config::Config::from_process_env()?;
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
        Ok(server) => {
            let (input, output) = stdio();
            // The end of input is a clean end (status 0). A failed read or write is not: a
            // response may be lost (its call may have committed), so the host must be able to
            // tell, and resend keyed calls to recover their outcome (docs/profiles.md, "Exit status").
            if let Err(e) = server.serve(input, output, stdout_reader_gone).await {
                tracing::error!("stdio: {e}");
                eprintln!("patchdiff-mcp: stdio failed ({e}); a response may have been lost");
                std::process::exit(1);
            }
        }
        Err(why) => {
            eprintln!("patchdiff-mcp: {why}");
            std::process::exit(1);
        }
    }
}

/// The client's end of stdio. An MCP host connects pipes: they are read and written on the
/// runtime's own thread, made non-blocking (`tokio::net::unix::pipe`). `tokio::io::stdin()` and
/// `stdout()` hand every read and every flush to a thread of the blocking pool instead, and those
/// thread switches were most of what this process spent per call (docs/benchmarks.md, "The
/// stdio front end's own time"). Anything else (a terminal, a file, /dev/null) keeps tokio's
/// blocking stdio; so does stdout when stderr is the same pipe (`2>&1`), whose writes, the logs,
/// must stay blocking.
fn stdio() -> (
    Box<dyn tokio::io::AsyncBufRead + Unpin>,
    Box<dyn tokio::io::AsyncWrite + Unpin>,
) {
    use std::os::fd::AsFd;
    use tokio::net::unix::pipe;
    let input: Box<dyn tokio::io::AsyncBufRead + Unpin> = match std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .and_then(pipe::Receiver::from_owned_fd)
    {
        Ok(pipe) => Box::new(tokio::io::BufReader::new(pipe)),
        Err(_) => Box::new(tokio::io::BufReader::new(tokio::io::stdin())),
    };
    let shared_with_stderr = match (
        std::fs::metadata("/dev/fd/1"),
        std::fs::metadata("/dev/fd/2"),
    ) {
        (Ok(out), Ok(err)) => {
            use std::os::unix::fs::MetadataExt;
            (out.dev(), out.ino()) == (err.dev(), err.ino())
        }
        _ => true,
    };
    let output: Box<dyn tokio::io::AsyncWrite + Unpin> = match (!shared_with_stderr)
        .then(|| std::io::stdout().as_fd().try_clone_to_owned())
        .and_then(Result::ok)
        .map(pipe::Sender::from_owned_fd)
    {
        Some(Ok(pipe)) => Box::new(pipe),
        _ => Box::new(tokio::io::stdout()),
    };
    (input, output)
}

/// The value of a count option: a positive number.
fn positive(option: &str, value: &str) -> Result<usize, String> {
    value
        .parse()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| format!("{option} must be a positive number"))
}

/// `patchdiff-mcp serve --listen ADDR ...`: Streamable HTTP (docs/http.md).
async fn serve_http(args: &[String]) {
    let started = async {
        let mut listen = None;
        let mut tokens = std::env::var("PATCHDIFF_MCP_TOKENS_FILE").ok();
        let mut connections = 16usize;
        let mut queue_ms = 5_000u64;
        let mut max_streams = patchdiff_mcp::http::MAX_STREAMS;
        let mut max_streams_per_role = patchdiff_mcp::http::MAX_STREAMS_PER_ROLE;
        let mut shutdown_grace = patchdiff_mcp::http::SHUTDOWN_GRACE;
        let mut max_http_connections = patchdiff_mcp::http::MAX_HTTP_CONNECTIONS;
        let mut max_http_connections_per_peer = patchdiff_mcp::http::MAX_HTTP_CONNECTIONS_PER_PEER;
        let mut request_timeout = patchdiff_mcp::http::REQUEST_TIMEOUT;
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut value = || {
                it.next()
                    .cloned()
                    .ok_or_else(|| format!("{a} needs a value\n\n{HELP}"))
            };
            match a.as_str() {
                "--listen" => listen = Some(value()?),
                "--tokens" => tokens = Some(value()?),
                "--connections" => connections = positive(a, &value()?)?,
                "--max-streams" => max_streams = positive(a, &value()?)?,
                "--max-streams-per-role" => max_streams_per_role = positive(a, &value()?)?,
                "--shutdown-grace" => {
                    shutdown_grace = std::time::Duration::from_secs(positive(a, &value()?)? as u64)
                }
                "--max-http-connections" => max_http_connections = positive(a, &value()?)?,
                "--max-http-connections-per-peer" => {
                    max_http_connections_per_peer = positive(a, &value()?)?
                }
                "--request-timeout" => {
                    request_timeout = std::time::Duration::from_secs(positive(a, &value()?)? as u64)
                }
                "--queue-ms" => {
                    queue_ms = value()?
                        .parse()
                        .map_err(|_| "--queue-ms must be a number of milliseconds")?
                }
                other => return Err(format!("unknown argument {other:?}\n\n{HELP}")),
            }
        }
        let listen: std::net::SocketAddr = listen
            .ok_or_else(|| {
                format!("serve needs --listen ADDR (for example 127.0.0.1:8080)\n\n{HELP}")
            })?
            .parse()
            .map_err(|e| format!("--listen: {e}"))?;
        let tokens = tokens.ok_or(
            "serve needs a token file: --tokens FILE or PATCHDIFF_MCP_TOKENS_FILE (docs/http.md)",
        )?;
        let tokens = patchdiff_mcp::http::Tokens::load(std::path::Path::new(&tokens))?;
        let config = patchdiff_mcp::config::Config::from_process_env()?;
        if config.profile.needs_workspace() {
            return Err(format!(
                "the {} profile publishes files on the machine the server runs on, which a remote client does not see: serve it over stdio",
                config.profile.name()
            ));
        }
        let first = patchdiff_mcp::http::connect(&config).await?;
        if config.strict_observation_mode
            && !first
                .functions
                .contains("patchdiff_submit_observed_operations")
        {
            return Err("PATCHDIFF_STRICT_OBSERVATION_MODE is on, but the installed pg_patchdiff has no observed submissions".into());
        }
        let allowed_origins = std::env::var("PATCHDIFF_MCP_ALLOWED_ORIGINS")
            .map(|v| {
                v.split(',')
                    .map(|o| o.trim().to_owned())
                    .filter(|o| !o.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        Ok::<_, String>((
            config,
            first,
            patchdiff_mcp::http::Options {
                listen,
                tokens,
                connections,
                queue_wait: std::time::Duration::from_millis(queue_ms),
                allowed_origins,
                max_streams,
                max_streams_per_role,
                shutdown_grace,
                max_http_connections,
                max_http_connections_per_peer,
                request_timeout,
            },
        ))
    };
    let result = match started.await {
        Ok((config, first, options)) => patchdiff_mcp::http::serve(config, first, options).await,
        Err(why) => Err(why),
    };
    if let Err(why) = result {
        eprintln!("patchdiff-mcp serve: {why}");
        std::process::exit(1);
    }
}

/// Whether nobody can read stdout any more: a pipe whose reading end is closed reports
/// `POLLERR` on its writing end (a file or a terminal never does).
fn stdout_reader_gone() -> bool {
    let mut fd = libc::pollfd {
        fd: libc::STDOUT_FILENO,
        events: 0,
        revents: 0,
    };
    // SAFETY: one valid pollfd, a timeout of 0: poll only looks at the descriptor.
    let n = unsafe { libc::poll(&mut fd, 1, 0) };
    n == 1 && fd.revents & (libc::POLLERR | libc::POLLHUP) != 0
}
