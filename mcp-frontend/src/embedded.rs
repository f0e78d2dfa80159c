//! The embedded default database: a private PostgreSQL 15 cluster in a data folder, created on
//! first use and reused after, reachable through a unix socket only, with pg_patchdiff created.
//!
//! Started as root, PostgreSQL runs as the unprivileged `postgres` user (initdb refuses root).
//! The cluster is left running when the server exits, so the next session starts at once; stop
//! it with `pg_ctl -D <data dir> stop`.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The database the embedded cluster serves.
pub const DATABASE: &str = "patchdiff";
/// The socket's port number: only names the socket file, nothing listens on TCP.
pub const PORT: u16 = 5432;

pub fn running_as_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

/// Where the PostgreSQL 15 server programs are: `PATCHDIFF_PG_BINDIR`, Debian's folder, or
/// the `pg_config` on PATH.
fn bin_dir() -> Result<PathBuf, String> {
    let candidates: Vec<PathBuf> = std::env::var_os("PATCHDIFF_PG_BINDIR")
        .map(PathBuf::from)
        .into_iter()
        .chain([PathBuf::from("/usr/lib/postgresql/15/bin")])
        .chain(
            Command::new("pg_config")
                .arg("--bindir")
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim())),
        )
        .collect();
    candidates.iter().find(|d| d.join("initdb").exists() && d.join("pg_ctl").exists()).cloned().ok_or_else(|| {
        format!(
            "PostgreSQL 15 server programs (initdb, pg_ctl) not found in {}; install postgresql-15 \
             (bash scripts/run.sh does it), set PATCHDIFF_PG_BINDIR, or set PATCHDIFF_DATABASE_URL to use another server",
            candidates.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
        )
    })
}

/// Checks that pg_patchdiff is installed into that PostgreSQL before creating anything.
fn check_extension_installed(bin: &Path) -> Result<(), String> {
    let share = Command::new(bin.join("pg_config"))
        .arg("--sharedir")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    match share {
        Some(dir) if dir.join("extension/pg_patchdiff.control").exists() => Ok(()),
        Some(dir) => Err(format!(
            "the pg_patchdiff extension is not installed in this PostgreSQL (no {}); \
             install it with `cargo pgrx install --release -p pg_patchdiff` (bash scripts/run.sh does it)",
            dir.join("extension/pg_patchdiff.control").display()
        )),
        None => Ok(()), // No pg_config to ask: CREATE EXTENSION will say it precisely.
    }
}

/// Runs a PostgreSQL program, as `postgres` when this process is root.
fn run(bin: &Path, program: &str, args: &[&str]) -> Result<std::process::Output, String> {
    let path = bin.join(program);
    let mut cmd = if running_as_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(&path);
        c
    } else {
        Command::new(&path)
    };
    cmd.args(args).stdin(std::process::Stdio::null());
    cmd.output()
        .map_err(|e| format!("cannot run {}: {e}", path.display()))
}

fn chown_to_postgres(path: &Path) -> Result<(), String> {
    let out = Command::new("id")
        .args(["-u", "postgres"])
        .output()
        .map_err(|e| e.to_string())?;
    let uid: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().map_err(|_| {
        "running as root needs an unprivileged `postgres` user to run PostgreSQL (install postgresql-15)".to_string()
    })?;
    let out = Command::new("id")
        .args(["-g", "postgres"])
        .output()
        .map_err(|e| e.to_string())?;
    let gid: u32 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(uid);
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
        .map_err(|e| format!("cannot hand {} to postgres: {e}", path.display()))
}

/// Creates (first use) and starts (if stopped) the cluster in `data_dir`; returns the
/// connection string of its `patchdiff` database.
pub fn ensure_cluster(data_dir: &Path) -> Result<String, String> {
    let bin = bin_dir()?;
    check_extension_installed(&bin)?;
    let parent = data_dir.parent().unwrap_or(Path::new("/"));
    fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    // Two servers starting at once must not both run initdb or pg_ctl start.
    let lock_path = parent.join(format!(
        ".{}.lock",
        data_dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("cluster")
    ));
    let lock = File::create(&lock_path)
        .map_err(|e| format!("cannot create {}: {e}", lock_path.display()))?;
    lock.lock()
        .map_err(|e| format!("cannot lock {}: {e}", lock_path.display()))?;
    let dir = data_dir
        .to_str()
        .ok_or("the data folder's path must be UTF-8")?;
    if !data_dir.join("PG_VERSION").exists() {
        tracing::info!(data_dir = dir, "creating the embedded PostgreSQL cluster");
        fs::create_dir_all(data_dir).map_err(|e| format!("cannot create {dir}: {e}"))?;
        if running_as_root() {
            chown_to_postgres(data_dir)?;
        }
        let user = if running_as_root() {
            "postgres".to_string()
        } else {
            current_user()
        };
        let out = run(
            &bin,
            "initdb",
            &[
                "-D",
                dir,
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
                "-U",
                &user,
                "--auth=trust",
            ],
        )?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    let running = run(&bin, "pg_ctl", &["-D", dir, "status"])?
        .status
        .success();
    if !running {
        tracing::info!(data_dir = dir, "starting the embedded PostgreSQL cluster");
        // A socket inside the data folder (mode 0700) and no TCP listener: only this user
        // (and root) can connect, which is what makes trust authentication safe here.
        let opts = format!(
            "-c listen_addresses='' -c unix_socket_directories='{dir}' -c unix_socket_permissions=0700 -p {PORT}"
        );
        let log = format!("{dir}/server.log");
        let out = run(
            &bin,
            "pg_ctl",
            &[
                "-D", dir, "-l", &log, "-w", "-t", "60", "-o", &opts, "start",
            ],
        )?;
        if !out.status.success() {
            return Err(format!(
                "PostgreSQL did not start ({}); see {log}",
                String::from_utf8_lossy(&out.stdout).trim()
            ));
        }
    }
    drop(lock);
    let user = if running_as_root() {
        "postgres".to_string()
    } else {
        current_user()
    };
    Ok(format!(
        "host={dir} port={PORT} user={user} dbname={DATABASE}"
    ))
}

fn current_user() -> String {
    std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| {
            Command::new("id")
                .arg("-un")
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_default()
        })
}
