//! Concurrency under load (issue 9): N clients, some over SQL and some through real
//! `patchdiff-mcp` processes, submit guarded edits, keyed retries and reads against a few shared
//! targets and many private ones; then every invariant is checked against the database
//! (`patchdiff_tests::stress::check`), and pgbench's built-in simple-update script runs on the
//! same server with the same number of clients, for the ratio. Exits 1 if any invariant broke.
//!
//! cargo run --release -p patchdiff-tests --bin patchdiff-stress -- \
//!     --dsn 'host=127.0.0.1 port=54345 user=postgres dbname=patchdiff_test' \
//!     --mcp-bin target/release/patchdiff-mcp [--connections 8] [--mcp-connections 1] \
//!     [--seconds 30 | --operations N] [--target-bytes 4096] [--shared-targets 4] \
//!     [--private-targets 8] [--read-percent 20] [--save-percent 2] [--shared-percent 25] \
//!     [--keyed-percent 25] [--pgbench-seconds S] [--no-pgbench] \
//!     [--pg-bin /usr/lib/postgresql/15/bin] [--seed N] [--router]
//!
//! `--router`: the DSN is a PL/Proxy router over shards (scripts/shards.sh; docs/scale-out.md):
//! the load runs through it, the invariants are checked on every partition's database, and
//! pgbench does not run.

use patchdiff_tests::connect;
use patchdiff_tests::stress::{self, Config};
use std::process::Command;
use std::time::Duration;

type Err = Box<dyn std::error::Error>;

const USAGE: &str = "usage: patchdiff-stress [--dsn CONNSTR] [--mcp-bin PATH] [--connections N] [--mcp-connections M] \
[--seconds S | --operations N] [--target-bytes B] [--shared-targets N] [--private-targets N] [--read-percent P] \
[--save-percent P] [--shared-percent P] [--keyed-percent P] [--pgbench-seconds S] [--no-pgbench] [--pg-bin DIR] [--seed N] [--router]";

/// The database pgbench initializes and drops.
const PGBENCH_DB: &str = "patchdiff_stress_pgbench";

struct Options {
    config: Config,
    connections: usize,
    pgbench: bool,
    pgbench_seconds: Option<u64>,
    pg_bin: String,
    router: bool,
}

fn parse() -> Result<Options, Err> {
    let mut config = Config::new(&std::env::var("PATCHDIFF_TEST_DSN").unwrap_or_default());
    config.mcp_bin = std::env::var("PATCHDIFF_MCP_BIN").ok();
    config.duration = Some(Duration::from_secs(30));
    let mut o = Options {
        config,
        connections: 8,
        pgbench: true,
        pgbench_seconds: None,
        pg_bin: "/usr/lib/postgresql/15/bin".into(),
        router: false,
    };
    let mut mcp = 1usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--no-pgbench" {
            o.pgbench = false;
            continue;
        }
        if a == "--router" {
            o.router = true;
            o.pgbench = false;
            continue;
        }
        if a == "--help" || a == "-h" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let value = args
            .next()
            .ok_or_else(|| format!("{a} needs a value\n{USAGE}"))?;
        let c = &mut o.config;
        match a.as_str() {
            "--dsn" => c.dsn = value,
            "--mcp-bin" => c.mcp_bin = Some(value),
            "--connections" => o.connections = value.parse()?,
            "--mcp-connections" => mcp = value.parse()?,
            "--seconds" => {
                c.duration = Some(Duration::from_secs_f64(value.parse()?));
                c.operations = None;
            }
            "--operations" => {
                c.operations = Some(value.parse()?);
                c.duration = None;
            }
            "--target-bytes" => c.target_bytes = value.parse()?,
            "--shared-targets" => c.shared_targets = value.parse()?,
            "--private-targets" => c.private_targets = value.parse()?,
            "--read-percent" => c.read_percent = value.parse()?,
            "--save-percent" => c.save_percent = value.parse()?,
            "--shared-percent" => c.shared_percent = value.parse()?,
            "--keyed-percent" => c.keyed_percent = value.parse()?,
            "--pgbench-seconds" => o.pgbench_seconds = Some(value.parse()?),
            "--pg-bin" => o.pg_bin = value,
            "--seed" => c.seed = value.parse()?,
            _ => return Err(format!("unknown option {a}\n{USAGE}").into()),
        }
    }
    if o.config.dsn.is_empty() {
        return Err(format!("--dsn (or PATCHDIFF_TEST_DSN) is required\n{USAGE}").into());
    }
    if mcp > o.connections || o.connections == 0 {
        return Err(
            "--mcp-connections must be at most --connections, which must be positive".into(),
        );
    }
    o.config.mcp_clients = mcp;
    o.config.sql_clients = o.connections - mcp;
    Ok(o)
}

/// pgbench's connection options, taken from the DSN.
fn pgbench_connection(dsn: &str) -> Result<(Vec<String>, Option<String>), Err> {
    let config: tokio_postgres::Config = dsn.parse()?;
    let mut args = Vec::new();
    match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => args.extend(["-h".into(), h.clone()]),
        Some(tokio_postgres::config::Host::Unix(p)) => {
            args.extend(["-h".into(), p.display().to_string()])
        }
        None => {}
    }
    if let Some(port) = config.get_ports().first() {
        args.extend(["-p".into(), port.to_string()]);
    }
    if let Some(user) = config.get_user() {
        args.extend(["-U".into(), user.to_owned()]);
    }
    let password = config
        .get_password()
        .map(|p| String::from_utf8_lossy(p).into_owned());
    Ok((args, password))
}

fn pgbench(o: &Options, args: &[String]) -> Result<String, Err> {
    let (conn, password) = pgbench_connection(&o.config.dsn)?;
    let mut cmd = Command::new(format!("{}/pgbench", o.pg_bin));
    cmd.args(&conn).args(args).arg(PGBENCH_DB);
    if let Some(p) = password {
        cmd.env("PGPASSWORD", p);
    }
    let out = cmd.output()?;
    if !out.status.success() {
        return Err(format!(
            "pgbench {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs pgbench's simple-update script; returns (command line, transactions, tps).
async fn run_pgbench(o: &Options, seconds: u64) -> Result<(String, u64, f64), Err> {
    let admin = connect(&o.config.dsn).await?;
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {PGBENCH_DB}"))
        .await?;
    admin
        .batch_execute(&format!("CREATE DATABASE {PGBENCH_DB}"))
        .await?;
    pgbench(o, &["-i".into(), "-q".into()])?;
    admin.batch_execute("CHECKPOINT").await?;
    let jobs = o.connections.min(2);
    let args: Vec<String> = [
        "-N".into(),
        "-c".into(),
        o.connections.to_string(),
        "-j".into(),
        jobs.to_string(),
        "-T".into(),
        seconds.to_string(),
    ]
    .into();
    let text = pgbench(o, &args)?;
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {PGBENCH_DB}"))
        .await?;
    let find = |prefix: &str| -> Option<String> {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(prefix).map(str::to_owned))
    };
    let tps: f64 = find("tps = ")
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("no tps in pgbench output:\n{text}"))?;
    let transactions: u64 = find("number of transactions actually processed: ")
        .and_then(|s| s.split('/').next()?.trim().parse().ok())
        .unwrap_or(0);
    let line = format!("pgbench {} {PGBENCH_DB}", args.join(" "));
    Ok((line, transactions, tps))
}

#[tokio::main]
async fn main() -> Result<(), Err> {
    let o = parse()?;
    let c = &o.config;
    eprintln!(
        "patchdiff-stress: {} clients ({} SQL, {} patchdiff-mcp), {} shared + {} private targets of {} bytes, {}",
        c.clients(),
        c.sql_clients,
        c.mcp_clients,
        c.shared_targets,
        c.clients() * c.private_targets,
        c.target_bytes / stress::LINE_BYTES * stress::LINE_BYTES,
        match (c.duration, c.operations) {
            (Some(d), _) => format!("{:.0} s", d.as_secs_f64()),
            (None, Some(n)) => format!("{n} operations"),
            _ => "until stopped".into(),
        }
    );
    let admin = connect(&c.dsn).await?;
    let server = patchdiff_tests::server_settings(&admin).await?;
    eprintln!("server: {server}");
    admin.batch_execute("CHECKPOINT").await?;
    let outcome = stress::run(c.clone()).await?;
    eprintln!("load: {}", outcome.summary());
    let bench = if o.pgbench {
        let seconds = o
            .pgbench_seconds
            .unwrap_or_else(|| outcome.elapsed.as_secs_f64().round().max(1.0) as u64);
        Some(run_pgbench(&o, seconds).await?)
    } else {
        None
    };
    let checked = if o.router {
        // Every partition's database, from the router's own configuration.
        let options: Vec<String> = admin
            .query_one(
                "SELECT srvoptions FROM pg_foreign_server WHERE srvname = 'patchdiff'",
                &[],
            )
            .await?
            .get(0);
        let user = c
            .dsn
            .parse::<tokio_postgres::Config>()?
            .get_user()
            .unwrap_or("postgres")
            .to_owned();
        let mut partitions = Vec::new();
        for o in options.iter().filter(|o| o.starts_with('p')) {
            if let Some((_, dsn)) = o.split_once('=') {
                let dsn = patchdiff_tests::direct(dsn);
                partitions.push(connect(&format!("{dsn} user={user}")).await?);
            }
        }
        let refs: Vec<&tokio_postgres::Client> = partitions.iter().collect();
        eprintln!("checking the invariants on {} partitions", refs.len());
        stress::check_across(&refs, &admin, &outcome).await?
    } else {
        stress::check(&admin, &outcome).await?
    };
    eprintln!("{}", checked.summary());

    let tps = outcome.accepted_per_second();
    println!("server: {server}");
    println!("\n| run | clients | seconds | transactions | per second |\n|---|---|---|---|---|");
    println!(
        "| patchdiff-stress: accepted guarded submissions, {}-byte targets | {} ({} SQL + {} MCP) | {:.1} | {} | {:.1} |",
        c.target_bytes / stress::LINE_BYTES * stress::LINE_BYTES,
        c.clients(),
        c.sql_clients,
        c.mcp_clients,
        outcome.elapsed.as_secs_f64(),
        outcome.stats.accepted,
        tps
    );
    println!(
        "| patchdiff-stress: every call (submissions, keyed resends, reads) | | | {} | {:.1} |",
        outcome.stats.submissions + outcome.stats.keyed_retries + outcome.stats.reads,
        (outcome.stats.submissions + outcome.stats.keyed_retries + outcome.stats.reads) as f64
            / outcome.elapsed.as_secs_f64()
    );
    if let Some((line, n, pgtps)) = &bench {
        println!(
            "| `{line}` (built-in simple-update) | {} | | {n} | {pgtps:.1} |",
            o.connections
        );
        println!(
            "\naccepted submissions / pgbench tps = {:.2} (issue 21's goals: at least 0.80 edits only, 0.50 on the default mix)",
            tps / pgtps
        );
    }
    let violations: Vec<&String> = outcome
        .violations
        .iter()
        .chain(&checked.violations)
        .collect();
    if violations.is_empty() {
        println!("invariants: all held ({})", checked.summary());
        Ok(())
    } else {
        println!("invariants: {} BROKEN", violations.len());
        for v in violations.iter().take(50) {
            println!("  {v}");
        }
        if violations.len() > 50 {
            println!("  ... and {} more", violations.len() - 50);
        }
        std::process::exit(1);
    }
}
