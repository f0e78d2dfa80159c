//! The embedded default database: a private PostgreSQL 15 cluster in a data folder, created on
//! first use and reused after, reachable through a unix socket only, with pg_patchdiff created.
//!
//! Started as root, PostgreSQL runs as the unprivileged `postgres` user (initdb refuses root).
//! The cluster is left running when the server exits, so the next session starts at once; stop
//! it with `pg_ctl -D <data dir> stop`.

use std::fs::{self, File};
use std::os::unix::fs::FileTypeExt;
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

/// How long a start waits for another start of the same cluster (its initdb, its start and its
/// database) before it gives up and says which lock it waited for.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// The data folder's path: absolute, and of characters that need no quoting, since it goes into
/// PostgreSQL's start command (run through a shell by `pg_ctl`) and into a connection string.
/// A path with `$(...)` in it ran that command (helper-44).
fn check_path(data_dir: &Path) -> Result<&str, String> {
    let dir = data_dir
        .to_str()
        .ok_or("the data folder's path must be UTF-8")?;
    let plain = |b: u8| b.is_ascii_alphanumeric() || b"/._-+@,:".contains(&b);
    if !data_dir.is_absolute() || !dir.bytes().all(plain) || dir.contains("/../") {
        return Err(format!(
            "the data folder {dir:?} must be an absolute path of letters, digits and / . _ - + @ , : \
             (set PATCHDIFF_DATA_DIR, or HOME to an absolute path)"
        ));
    }
    Ok(dir)
}

/// Refuses a folder (`what`: the data folder, the finalizer's output directory) that another
/// user could swap or enter: every folder on the way to it (`path` is its parent) must belong to
/// root or to this user and be writable by no one else (unless sticky, as /tmp is), and no
/// symbolic link on the way may belong to anyone else. Under a folder of another user's, that
/// user made this server truncate a root-owned file through a linked lock file, hand a
/// root-owned folder to postgres, and serve a cluster of the attacker's own (helper-44), and
/// made the finalizer write a document into a folder of root's (helper-46).
pub fn check_owners(path: &Path, what: &str) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let mut walked = PathBuf::from("/");
    for part in path.components().skip(1) {
        walked.push(part);
        let Ok(meta) = fs::symlink_metadata(&walked) else {
            break; // Not made yet: created below by this user.
        };
        let shown = walked.display();
        if meta.uid() != 0 && meta.uid() != me {
            return Err(format!(
                "{shown} belongs to another user (uid {}): {what} must be reached only through \
                 folders of root or of this user",
                meta.uid()
            ));
        }
        let mode = meta.mode();
        if meta.is_dir() && mode & 0o022 != 0 && mode & 0o1000 == 0 {
            return Err(format!(
                "{shown} may be written by other users (mode {:o}): {what} must be reached only \
                 through folders no one else may change",
                mode & 0o7777
            ));
        }
        if meta.file_type().is_symlink() {
            let target =
                fs::canonicalize(&walked).map_err(|e| format!("cannot resolve {shown}: {e}"))?;
            check_owners(&target, what)?;
        }
    }
    Ok(())
}

/// Opens the start lock (mode 0600, never through a link) and takes it, waiting at most
/// [`LOCK_WAIT`]. Created 0644 and waited on without end, it let any local user hang every
/// start: a lock can be taken on a file opened for reading (helper-44).
fn take_lock(lock_path: &Path) -> Result<File, String> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
    let shown = lock_path.display();
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(lock_path)
        .map_err(|e| format!("cannot open {shown}: {e}"))?;
    let meta = lock.metadata().map_err(|e| e.to_string())?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    if meta.uid() != unsafe { libc::geteuid() } || !meta.is_file() {
        return Err(format!("{shown} is not a file of this user's: remove it"));
    }
    // A lock file made by an earlier version (0644) is closed to others from now on.
    lock.set_permissions(fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("cannot restrict {shown}: {e}"))?;
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match lock.try_lock() {
            Ok(()) => return Ok(lock),
            Err(fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            Err(fs::TryLockError::WouldBlock) => {
                return Err(format!(
                    "another process has held {shown} for {}s (another patchdiff-mcp starting \
                     this cluster, or something else): try again, or find it with `fuser {shown}`",
                    LOCK_WAIT.as_secs()
                ));
            }
            Err(fs::TryLockError::Error(e)) => return Err(format!("cannot lock {shown}: {e}")),
        }
    }
}

/// Creates (first use) and starts (if stopped) the cluster in `data_dir`; returns the
/// connection string of its `patchdiff` database, and the start lock, held: the caller keeps
/// it until it has made the database and its extension, so that servers starting at once do not
/// race to create them (all but one failed with 23505; helper-44).
pub fn ensure_cluster(data_dir: &Path) -> Result<(String, File), String> {
    let bin = bin_dir()?;
    check_extension_installed(&bin)?;
    let dir = check_path(data_dir)?;
    let parent = data_dir.parent().unwrap_or(Path::new("/"));
    check_owners(parent, "the data folder")?;
    fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    if fs::symlink_metadata(data_dir).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(format!(
            "{dir} is a symbolic link: the data folder must be a folder"
        ));
    }
    // Two servers starting at once must not both run initdb or pg_ctl start.
    let lock_path = parent.join(format!(
        ".{}.lock",
        data_dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("cluster")
    ));
    let lock = take_lock(&lock_path)?;
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
                // The socket, in the data folder (mode 0700), is the only way in: TCP is refused
                // even if a start without this server's options listens on it.
                "--auth-local=trust",
                "--auth-host=reject",
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
    if running {
        stale_lock_file(data_dir)?;
    } else {
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
    let user = if running_as_root() {
        "postgres".to_string()
    } else {
        current_user()
    };
    Ok((
        format!("host={dir} port={PORT} user={user} dbname={DATABASE}"),
        lock,
    ))
}

/// Refuses a cluster that `pg_ctl status` calls running but whose server never made its socket:
/// after a crash or a reboot, `postmaster.pid` can name a process that has nothing to do with
/// PostgreSQL but now has the same number (helper-44 F9). Neither `pg_ctl start` nor the server
/// removes such a file, and connecting would only fail with "error connecting to server".
fn stale_lock_file(data_dir: &Path) -> Result<(), String> {
    let socket = data_dir.join(format!(".s.PGSQL.{PORT}"));
    if fs::symlink_metadata(&socket).is_ok_and(|m| m.file_type().is_socket()) {
        return Ok(());
    }
    let lock = data_dir.join("postmaster.pid");
    let pid = fs::read_to_string(&lock)
        .ok()
        .and_then(|t| t.lines().next().map(str::trim).map(str::to_owned))
        .unwrap_or_default();
    Err(format!(
        "{} names process {pid}, which is running, but the cluster's socket {} does not exist: that process is not this cluster's server (most likely the file outlived a crash and its number was reused). If no PostgreSQL server runs on {}, remove {} and start again",
        lock.display(),
        socket.display(),
        data_dir.display(),
        lock.display()
    ))
}

/// What keeps the cluster reachable through its socket only, as `ALTER SYSTEM` statements: in
/// its own configuration, so that a start without this server's options (`pg_ctl start` by
/// hand) is as closed as this server's. They used to be start options only, and a cluster
/// started by hand listened on TCP with trust authentication for everyone (helper-44).
pub fn closed_settings(data_dir: &Path) -> Result<[String; 3], String> {
    let dir = check_path(data_dir)?;
    Ok([
        "ALTER SYSTEM SET listen_addresses = ''".into(),
        format!("ALTER SYSTEM SET unix_socket_directories = '{dir}'"),
        "ALTER SYSTEM SET unix_socket_permissions = '0700'".into(),
    ])
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

#[cfg(test)]
mod tests {
    use super::*;

    /// helper-44: the data folder's path goes into a shell command and a connection string, so
    /// only plain absolute paths are taken; `$(...)`, quotes and spaces are refused.
    #[test]
    fn data_folders_are_plain_absolute_paths() {
        for ok in [
            "/var/lib/patchdiff/pg15",
            "/home/a.b/.local/share/patchdiff/pg15",
        ] {
            assert_eq!(check_path(Path::new(ok)), Ok(ok));
        }
        for bad in [
            "patchdiff/pg15",
            "/tmp/w/$(id>/tmp/INJ)/pg15",
            "/tmp/it's/pg15",
            "/tmp/a b/pg15",
            "/tmp/a/../b/pg15",
        ] {
            assert!(check_path(Path::new(bad)).is_err(), "{bad}");
        }
    }

    /// helper-44: a data folder under a folder that others may write (and that is not sticky)
    /// is refused; under /tmp (sticky) and under this user's own folders it is taken.
    #[test]
    fn data_folders_under_folders_others_may_change_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let base = std::env::temp_dir().join(format!("pd-owners-{}", std::process::id()));
        let open = base.join("open");
        fs::create_dir_all(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        let e = check_owners(&open.join("patchdiff"), "the data folder").unwrap_err();
        assert!(e.contains("may be written by other users"), "{e}");
        fs::set_permissions(&open, fs::Permissions::from_mode(0o1777)).unwrap();
        assert_eq!(
            check_owners(&open.join("patchdiff"), "the data folder"),
            Ok(())
        );
        fs::set_permissions(&open, fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(
            check_owners(&open.join("patchdiff"), "the data folder"),
            Ok(())
        );
        let _ = fs::remove_dir_all(&base);
    }
}
