//! Start-up configuration, read once from the environment and fixed for the process's life.

use std::path::PathBuf;

/// `PATCHDIFF_MCP_PROFILE`: which tools a connection advertises and accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    Full,
    Workspace,
    Editor,
    ObservedWorkspace,
    ObservedEditor,
    ObservedV2,
    /// Beyond the contract (issue 19): `full` plus the tools across targets and versions.
    Extended,
    /// Beyond the contract (issue 19): the reference filesystem server's file tools, with
    /// PatchDIFF behind them.
    Files,
}

impl Profile {
    /// The contract's six profiles: their tools/list stays byte-identical.
    pub const ALL: [Profile; 6] = [
        Profile::Full,
        Profile::Workspace,
        Profile::Editor,
        Profile::ObservedWorkspace,
        Profile::ObservedEditor,
        Profile::ObservedV2,
    ];

    /// Profiles of this implementation's own, listing tools the contract does not have.
    pub const BEYOND_CONTRACT: [Profile; 2] = [Profile::Extended, Profile::Files];

    pub fn name(self) -> &'static str {
        match self {
            Profile::Full => "full",
            Profile::Workspace => "workspace",
            Profile::Editor => "editor",
            Profile::ObservedWorkspace => "observed_workspace",
            Profile::ObservedEditor => "observed_editor",
            Profile::ObservedV2 => "observed_v2",
            Profile::Extended => "extended",
            Profile::Files => "files",
        }
    }

    pub fn parse(s: &str) -> Option<Profile> {
        Profile::ALL
            .into_iter()
            .chain(Profile::BEYOND_CONTRACT)
            .find(|p| p.name() == s)
    }
}

/// `PATCHDIFF_MCP_RESPONSE_MODE`: how successful results are presented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseMode {
    Detailed,
    Compact,
}

/// `PATCHDIFF_WAYMARK_MODE`: where structural outlines are kept. Only `resident` exists here:
/// the outline cache lives in the database backend that serves the connection (docs/structural.md),
/// so there is no separate worker process to choose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaymarkMode {
    Resident,
}

/// Where the database is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Database {
    /// `PATCHDIFF_DATABASE_URL`: a libpq connection string or URL.
    Url(String),
    /// The embedded default: a private cluster in this folder, created on first use.
    Embedded { data_dir: PathBuf },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub profile: Profile,
    pub response_mode: ResponseMode,
    pub database: Database,
    /// `PATCHDIFF_MCP_MAX_LINE_BYTES`: the longest JSON-RPC line read; longer lines are
    /// discarded unread and answered with -32600.
    pub max_line_bytes: usize,
    /// `PATCHDIFF_WORKSPACE_ROOT`: the directory workspace files are imported from and
    /// published to; required by the `workspace` and `observed_workspace` profiles.
    pub workspace_root: Option<PathBuf>,
    /// `PATCHDIFF_WORKSPACE_SYNC_ON_SAVE`: what an omitted or null `sync_workspace` means.
    pub workspace_sync_on_save: bool,
    /// `PATCHDIFF_WORKSPACE_KEY_FILE`: the binding key (docs/workspace.md, "The binding proof");
    /// by default `workspace.key` in the front end's data directory. Read only when a workspace
    /// root is configured.
    pub workspace_key_file: PathBuf,
    /// `PATCHDIFF_WORKSPACE_RESERVED`: path components never imported or published (stored in
    /// ASCII lower case; the workspace compares them by their skeleton, workspace::skeleton).
    pub workspace_reserved: Vec<String>,
    /// `PATCHDIFF_WORKSPACE_TEST_HOOK` / `PATCHDIFF_WORKSPACE_TEST_HOOK_DIR` (tests only).
    pub workspace_hook: Option<crate::workspace::Hook>,
    /// `PATCHDIFF_STRICT_OBSERVATION_MODE`: set `patchdiff.strict_observation_mode = on` on every
    /// database session, so every unobserved write is an audited OBSERVATION_REQUIRED rejection.
    pub strict_observation_mode: bool,
    /// `PATCHDIFF_WAYMARK_MODE`.
    pub waymark_mode: WaymarkMode,
    /// `PATCHDIFF_MCP_STATEMENT_TIMEOUT`: the `statement_timeout` of every database session, in
    /// milliseconds; `None` (the value `0`) sets nothing, so a role's or database's own applies.
    pub statement_timeout_ms: Option<u32>,
}

impl Profile {
    /// Profiles whose catalog imports and publishes workspace files.
    pub fn needs_workspace(self) -> bool {
        matches!(
            self,
            Profile::Workspace | Profile::ObservedWorkspace | Profile::Files
        )
    }
}

/// Refuses a `PATCHDIFF_*`, `HOME`, `XDG_DATA_HOME` or `USER` variable whose name or value is not
/// UTF-8, naming it.
pub fn check_utf8_environment(
    vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Result<(), String> {
    for (name, value) in vars {
        let shown = name.to_string_lossy();
        if !(shown.starts_with("PATCHDIFF_")
            || ["HOME", "XDG_DATA_HOME", "USER"].contains(&&*shown))
        {
            continue;
        }
        if name.to_str().is_none() || value.to_str().is_none() {
            return Err(format!(
                "{shown} is not valid UTF-8; set it to a UTF-8 value or unset it"
            ));
        }
    }
    Ok(())
}

/// Largest `PATCHDIFF_MCP_MAX_LINE_BYTES`: 1 GiB, PostgreSQL's own limit for one value. Above it
/// nothing could reach the database anyway, and `18446744073709551615` meant no limit at all.
pub const MAX_MAX_LINE_BYTES: usize = 1 << 30;

/// 32 MiB: twice the extension's default `patchdiff.max_argument_bytes`, so the database's limit
/// is the one a normal request meets first.
pub const DEFAULT_MAX_LINE_BYTES: usize =
    2 * patchdiff_engine::wire::limits::DEFAULT_MAX_ARGUMENT_BYTES;

/// Issue 14 item 5, "the front end bounds every call": 30 s, far above any call the contract's
/// caps allow on a healthy server, so it only ends calls stuck behind a lock or a sick server.
pub const DEFAULT_STATEMENT_TIMEOUT_MS: u32 = 30_000;

/// PostgreSQL's own ceiling for `statement_timeout` (INT_MAX milliseconds, about 24.8 days).
pub const MAX_STATEMENT_TIMEOUT_MS: u64 = i32::MAX as u64;

/// A duration as PostgreSQL writes a time setting: a whole number with an optional unit
/// (`ms`, `s`, `min`, `h`, `d`; none means milliseconds, as for `statement_timeout`), spaces
/// allowed around and between. `Ok(None)` is `0`, no timeout.
pub fn parse_duration_ms(v: &str) -> Result<Option<u32>, String> {
    let t = v.trim();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = t.split_at(digits);
    let scale: u64 = match unit.trim_start() {
        "" | "ms" => 1,
        "s" => 1_000,
        "min" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => {
            return Err(format!(
                "PATCHDIFF_MCP_STATEMENT_TIMEOUT={v:?} is not a duration; use a whole number with a unit ms, s, min, h or d (e.g. 30s, 500ms), or 0 for no timeout"
            ));
        }
    };
    let n: u64 = number.parse().map_err(|_| {
        format!("PATCHDIFF_MCP_STATEMENT_TIMEOUT={v:?} is not a duration; use a whole number with a unit ms, s, min, h or d (e.g. 30s, 500ms), or 0 for no timeout")
    })?;
    match n.checked_mul(scale) {
        Some(0) => Ok(None),
        Some(ms) if ms <= MAX_STATEMENT_TIMEOUT_MS => Ok(Some(ms as u32)),
        _ => Err(format!(
            "PATCHDIFF_MCP_STATEMENT_TIMEOUT={v:?} is longer than PostgreSQL allows ({MAX_STATEMENT_TIMEOUT_MS}ms)"
        )),
    }
}

impl Config {
    /// Creates root's data directory, if the key file is to be created in it, with mode 0711:
    /// the embedded cluster's `postgres` user must pass through it to `pg15`, which the key file's
    /// 0700 parent directories would forbid (it still cannot list it). Other directories of
    /// the key's path are created 0700.
    pub fn prepare_key_dir(&self) -> Result<(), String> {
        use std::os::unix::fs::DirBuilderExt;
        let base = std::path::Path::new(ROOT_DATA_DIR);
        if !crate::embedded::running_as_root()
            || !self.workspace_key_file.starts_with(base)
            || base.exists()
        {
            return Ok(());
        }
        match std::fs::DirBuilder::new().mode(0o711).create(base) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(format!("cannot create {ROOT_DATA_DIR}: {e}")),
        }
    }

    /// The process environment's settings: [`Config::from_env`] over `std::env`, after every
    /// variable this program reads (`PATCHDIFF_*`, and `HOME`, `XDG_DATA_HOME`, `USER` for the
    /// embedded database) is checked
    /// to be UTF-8. A value that is not used to be read as unset, which failed open:
    /// `PATCHDIFF_STRICT_OBSERVATION_MODE=1\xff` turned strict mode off, and a
    /// `PATCHDIFF_DATABASE_URL` with one stray byte quietly served the embedded database
    /// (helper-44).
    pub fn from_process_env() -> Result<Config, String> {
        check_utf8_environment(std::env::vars_os())?;
        Config::from_env(|k| std::env::var(k).ok())
    }

    /// Reads the configuration through `var` (the process environment in production).
    /// Unknown values stop start-up with a message that names the variable and the choices.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Config, String> {
        let set = |k: &str| var(k).filter(|v| !v.is_empty());
        let profile = match set("PATCHDIFF_MCP_PROFILE") {
            None => Profile::Full,
            Some(p) => Profile::parse(&p).ok_or_else(|| {
                let names: Vec<&str> = Profile::ALL
                    .iter()
                    .chain(&Profile::BEYOND_CONTRACT)
                    .map(|p| p.name())
                    .collect();
                format!(
                    "PATCHDIFF_MCP_PROFILE={p:?} is not a profile; use one of: {}",
                    names.join(", ")
                )
            })?,
        };
        let response_mode = match set("PATCHDIFF_MCP_RESPONSE_MODE").as_deref() {
            None | Some("detailed") => ResponseMode::Detailed,
            Some("compact") => ResponseMode::Compact,
            Some(m) => {
                return Err(format!(
                    "PATCHDIFF_MCP_RESPONSE_MODE={m:?} is not a response mode; use detailed or compact"
                ));
            }
        };
        let database = match set("PATCHDIFF_DATABASE_URL") {
            Some(url) => Database::Url(url),
            None => Database::Embedded {
                data_dir: set("PATCHDIFF_DATA_DIR")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| default_data_dir(&var)),
            },
        };
        let max_line_bytes = match set("PATCHDIFF_MCP_MAX_LINE_BYTES") {
            None => DEFAULT_MAX_LINE_BYTES,
            Some(v) => v
                .parse::<usize>()
                .ok()
                .filter(|n| (1024..=MAX_MAX_LINE_BYTES).contains(n))
                .ok_or_else(|| {
                    format!(
                        "PATCHDIFF_MCP_MAX_LINE_BYTES={v:?} is not a number of bytes from 1024 to {MAX_MAX_LINE_BYTES}"
                    )
                })?,
        };
        let workspace_root = set("PATCHDIFF_WORKSPACE_ROOT").map(PathBuf::from);
        if profile.needs_workspace() && workspace_root.is_none() {
            return Err(format!(
                "PATCHDIFF_MCP_PROFILE={} needs PATCHDIFF_WORKSPACE_ROOT: set it to the directory whose files this server imports and publishes",
                profile.name()
            ));
        }
        if let Some(r) = workspace_root.as_ref().filter(|r| !r.is_absolute()) {
            return Err(format!(
                "PATCHDIFF_WORKSPACE_ROOT={:?} must be an absolute path",
                r.display()
            ));
        }
        let workspace_sync_on_save = match set("PATCHDIFF_WORKSPACE_SYNC_ON_SAVE").as_deref() {
            None | Some("false" | "0" | "no" | "off") => false,
            Some("true" | "1" | "yes" | "on") => true,
            Some(v) => {
                return Err(format!(
                    "PATCHDIFF_WORKSPACE_SYNC_ON_SAVE={v:?} is not a boolean; use true or false"
                ));
            }
        };
        let workspace_key_file = match set("PATCHDIFF_WORKSPACE_KEY_FILE") {
            Some(p) if !p.starts_with('/') => {
                return Err(format!(
                    "PATCHDIFF_WORKSPACE_KEY_FILE={p:?} must be an absolute path"
                ));
            }
            Some(p) => PathBuf::from(p),
            None => default_base_dir(&var).join(WORKSPACE_KEY_FILE_NAME),
        };
        let workspace_reserved = match var("PATCHDIFF_WORKSPACE_RESERVED") {
            None => DEFAULT_WORKSPACE_RESERVED
                .iter()
                .map(|s| s.to_string())
                .collect(),
            Some(v) => parse_reserved(&v)?,
        };
        let workspace_hook =
            set("PATCHDIFF_WORKSPACE_TEST_HOOK").map(|point| crate::workspace::Hook {
                point,
                dir: set("PATCHDIFF_WORKSPACE_TEST_HOOK_DIR")
                    .map(PathBuf::from)
                    .unwrap_or_else(std::env::temp_dir),
            });
        // Contract "Locked Admission Guarantees": "When PATCHDIFF_STRICT_OBSERVATION_MODE=1 is
        // enabled, all unobserved write tools ... are rejected and logged".
        let strict_observation_mode = match set("PATCHDIFF_STRICT_OBSERVATION_MODE").as_deref() {
            None | Some("0" | "false") => false,
            Some("1" | "true") => true,
            Some(v) => {
                return Err(format!(
                    "PATCHDIFF_STRICT_OBSERVATION_MODE={v:?} is not a switch; use 1 or true (on), 0 or false (off)"
                ));
            }
        };
        let waymark_mode = match set("PATCHDIFF_WAYMARK_MODE").as_deref() {
            None | Some("resident") => WaymarkMode::Resident,
            Some(v) => {
                return Err(format!(
                    "PATCHDIFF_WAYMARK_MODE={v:?} is not supported; use resident (structural outlines are kept in the database backend)"
                ));
            }
        };
        let statement_timeout_ms = match set("PATCHDIFF_MCP_STATEMENT_TIMEOUT") {
            None => Some(DEFAULT_STATEMENT_TIMEOUT_MS),
            Some(v) => parse_duration_ms(&v)?,
        };
        Ok(Config {
            profile,
            response_mode,
            database,
            max_line_bytes,
            workspace_root,
            workspace_sync_on_save,
            workspace_key_file,
            workspace_reserved,
            workspace_hook,
            strict_observation_mode,
            waymark_mode,
            statement_timeout_ms,
        })
    }

    /// Session settings (`SET name = value`) every database session of this server carries,
    /// applied right after connecting and after every reconnect. Only what the environment turns
    /// on is set: with strict mode off, or a statement timeout of 0, a role's or database's own
    /// setting stays in force.
    pub fn session_settings(&self) -> Vec<(&'static str, String)> {
        let mut settings = Vec::new();
        if let Some(ms) = self.statement_timeout_ms {
            settings.push(("statement_timeout", format!("{ms}ms")));
        }
        if self.strict_observation_mode {
            settings.push(("patchdiff.strict_observation_mode", "on".to_owned()));
        }
        settings
    }
}

/// The default `PATCHDIFF_WORKSPACE_RESERVED`: version-control metadata, whose files (hooks,
/// `core.fsmonitor`) run commands.
pub const DEFAULT_WORKSPACE_RESERVED: [&str; 3] = [".git", ".hg", ".svn"];

/// The binding key's file name in the front end's data directory.
pub const WORKSPACE_KEY_FILE_NAME: &str = "workspace.key";

/// `PATCHDIFF_WORKSPACE_RESERVED`: comma-separated component names (spaces around a name are
/// ignored), replacing the default; an empty value reserves none. A name must be one path
/// component.
pub fn parse_reserved(v: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    for name in v.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if name.contains('/') || name == "." || name == ".." || name.contains('\0') {
            return Err(format!(
                "PATCHDIFF_WORKSPACE_RESERVED={v:?}: {name:?} is not a path component name; list names such as .git,.hg,.svn separated by commas"
            ));
        }
        names.push(name.to_ascii_lowercase());
    }
    Ok(names)
}

/// Root's data directory, shared by the embedded cluster (`pg15`) and the binding key.
pub const ROOT_DATA_DIR: &str = "/var/lib/patchdiff";

/// The front end's data directory: root runs PostgreSQL as the `postgres` user, which must
/// reach the folder, so root's is a system folder rather than root's private home.
fn default_base_dir(var: &impl Fn(&str) -> Option<String>) -> PathBuf {
    if crate::embedded::running_as_root() {
        return PathBuf::from(ROOT_DATA_DIR);
    }
    let data_home = var("XDG_DATA_HOME")
        .filter(|v| v.starts_with('/'))
        .map(PathBuf::from)
        .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."));
    data_home.join("patchdiff")
}

/// The embedded cluster's default home.
fn default_data_dir(var: &impl Fn(&str) -> Option<String>) -> PathBuf {
    default_base_dir(var).join("pg15")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn defaults_are_full_detailed_embedded() {
        let c = Config::from_env(env(&[("PATCHDIFF_DATA_DIR", "/tmp/x")])).unwrap();
        assert_eq!(c.profile, Profile::Full);
        assert_eq!(c.response_mode, ResponseMode::Detailed);
        assert_eq!(
            c.database,
            Database::Embedded {
                data_dir: "/tmp/x".into()
            }
        );
    }

    /// Contract "External response representations": unknown values prevent start-up.
    #[test]
    fn unknown_profile_or_mode_refuses_start_up() {
        let e = Config::from_env(env(&[("PATCHDIFF_MCP_PROFILE", "everything")])).unwrap_err();
        assert!(
            e.contains("PATCHDIFF_MCP_PROFILE") && e.contains("observed_v2"),
            "{e}"
        );
        let e = Config::from_env(env(&[("PATCHDIFF_MCP_RESPONSE_MODE", "terse")])).unwrap_err();
        assert!(e.contains("PATCHDIFF_MCP_RESPONSE_MODE"), "{e}");
        let c = Config::from_env(env(&[
            ("PATCHDIFF_MCP_PROFILE", "editor"),
            ("PATCHDIFF_MCP_RESPONSE_MODE", "compact"),
            ("PATCHDIFF_DATABASE_URL", "host=/x"),
        ]))
        .unwrap();
        assert_eq!(
            (c.profile, c.response_mode),
            (Profile::Editor, ResponseMode::Compact)
        );
        assert_eq!(c.database, Database::Url("host=/x".into()));
    }

    /// Issue 7: the workspace profiles need PATCHDIFF_WORKSPACE_ROOT; sync on save is off unless
    /// PATCHDIFF_WORKSPACE_SYNC_ON_SAVE says otherwise.
    #[test]
    fn workspace_profiles_need_a_root() {
        for p in ["workspace", "observed_workspace"] {
            let e = Config::from_env(env(&[("PATCHDIFF_MCP_PROFILE", p)])).unwrap_err();
            assert!(e.contains("PATCHDIFF_WORKSPACE_ROOT"), "{e}");
        }
        let c = Config::from_env(env(&[
            ("PATCHDIFF_MCP_PROFILE", "workspace"),
            ("PATCHDIFF_WORKSPACE_ROOT", "/srv/ws"),
        ]))
        .unwrap();
        assert_eq!(c.workspace_root, Some("/srv/ws".into()));
        assert!(!c.workspace_sync_on_save);
        let c = Config::from_env(env(&[
            ("PATCHDIFF_WORKSPACE_ROOT", "/srv/ws"),
            ("PATCHDIFF_WORKSPACE_SYNC_ON_SAVE", "true"),
        ]))
        .unwrap();
        assert!(c.workspace_sync_on_save);
        assert!(Config::from_env(env(&[("PATCHDIFF_WORKSPACE_ROOT", "rel")])).is_err());
        // helper-44: no limit at all, and values that are not UTF-8, are refused by name.
        for n in ["18446744073709551615", "1073741825"] {
            let e = Config::from_env(env(&[("PATCHDIFF_MCP_MAX_LINE_BYTES", n)])).unwrap_err();
            assert!(e.contains("PATCHDIFF_MCP_MAX_LINE_BYTES"), "{e}");
        }
        assert!(Config::from_env(env(&[("PATCHDIFF_MCP_MAX_LINE_BYTES", "1073741824")])).is_ok());
        {
            use std::os::unix::ffi::OsStringExt;
            let bad = std::ffi::OsString::from_vec(b"1\xff".to_vec());
            let e = check_utf8_environment([
                ("PATH".into(), bad.clone()),
                ("PATCHDIFF_STRICT_OBSERVATION_MODE".into(), bad),
            ])
            .unwrap_err();
            assert!(
                e.starts_with("PATCHDIFF_STRICT_OBSERVATION_MODE is not valid UTF-8"),
                "{e}"
            );
            assert!(
                check_utf8_environment([("PATCHDIFF_MCP_PROFILE".into(), "full".into())]).is_ok()
            );
        }
        assert!(Config::from_env(env(&[("PATCHDIFF_WORKSPACE_SYNC_ON_SAVE", "maybe")])).is_err());
    }

    /// Issue 15 item 3: the binding key's file defaults to `workspace.key` beside the embedded
    /// cluster; PATCHDIFF_WORKSPACE_KEY_FILE must be absolute.
    #[test]
    fn workspace_key_file_defaults_to_the_data_directory() {
        let c = Config::from_env(env(&[("XDG_DATA_HOME", "/xdg"), ("HOME", "/home/u")])).unwrap();
        let expected = if crate::embedded::running_as_root() {
            "/var/lib/patchdiff/workspace.key"
        } else {
            "/xdg/patchdiff/workspace.key"
        };
        assert_eq!(c.workspace_key_file, PathBuf::from(expected));
        if !crate::embedded::running_as_root() {
            let c = Config::from_env(env(&[("HOME", "/home/u")])).unwrap();
            assert_eq!(
                c.workspace_key_file,
                PathBuf::from("/home/u/.local/share/patchdiff/workspace.key")
            );
        }
        let c = Config::from_env(env(&[("PATCHDIFF_WORKSPACE_KEY_FILE", "/k/key")])).unwrap();
        assert_eq!(c.workspace_key_file, PathBuf::from("/k/key"));
        let e = Config::from_env(env(&[("PATCHDIFF_WORKSPACE_KEY_FILE", "k")])).unwrap_err();
        assert!(e.contains("PATCHDIFF_WORKSPACE_KEY_FILE"), "{e}");
    }

    /// Issue 15 item 3, "Reserved paths": .git, .hg and .svn by default;
    /// PATCHDIFF_WORKSPACE_RESERVED replaces the list (lower-cased), an empty value reserves
    /// none, a name that is not one component refuses start-up.
    #[test]
    fn workspace_reserved_components_are_configurable() {
        let reserved = |v: Option<&str>| {
            let mut pairs = vec![];
            if let Some(v) = v {
                pairs.push(("PATCHDIFF_WORKSPACE_RESERVED", v));
            }
            Config::from_env(env(&pairs)).map(|c| c.workspace_reserved)
        };
        assert_eq!(reserved(None).unwrap(), [".git", ".hg", ".svn"]);
        assert_eq!(reserved(Some("")).unwrap(), Vec::<String>::new());
        assert_eq!(
            reserved(Some(".git, .JJ ,,node_modules")).unwrap(),
            [".git", ".jj", "node_modules"]
        );
        for bad in ["a/b", "..", ".git,."] {
            let e = reserved(Some(bad)).unwrap_err();
            assert!(e.contains("PATCHDIFF_WORKSPACE_RESERVED"), "{e}");
        }
    }

    /// Contract "Locked Admission Guarantees" (PATCHDIFF_STRICT_OBSERVATION_MODE=1) and
    /// observed-editor-v2 "Set these on the actual editing MCP process": the switch is read once;
    /// anything but 1/true/0/false refuses start-up, naming the variable.
    #[test]
    fn strict_observation_mode_is_a_strict_switch() {
        let strict = |v: &str| {
            Config::from_env(env(&[
                ("PATCHDIFF_STRICT_OBSERVATION_MODE", v),
                ("PATCHDIFF_MCP_STATEMENT_TIMEOUT", "0"),
            ]))
            .map(|c| (c.strict_observation_mode, c.session_settings()))
        };
        let on = vec![("patchdiff.strict_observation_mode", "on".to_owned())];
        assert_eq!(strict("1"), Ok((true, on.clone())));
        assert_eq!(strict("true"), Ok((true, on)));
        for off in ["0", "false", ""] {
            assert_eq!(strict(off), Ok((false, vec![])), "{off:?}");
        }
        let unset = Config::from_env(env(&[("PATCHDIFF_MCP_STATEMENT_TIMEOUT", "0")])).unwrap();
        assert!(!unset.strict_observation_mode && unset.session_settings().is_empty());
        for bad in ["yes", "on", "TRUE", "2", " 1"] {
            let e = strict(bad).unwrap_err();
            assert!(e.contains("PATCHDIFF_STRICT_OBSERVATION_MODE"), "{e}");
        }
    }

    /// PATCHDIFF_WAYMARK_MODE: `resident` (the default) is the only mode; others refuse start-up.
    #[test]
    fn waymark_mode_is_resident_only() {
        for v in ["resident", ""] {
            let c = Config::from_env(env(&[("PATCHDIFF_WAYMARK_MODE", v)])).unwrap();
            assert_eq!(c.waymark_mode, WaymarkMode::Resident);
        }
        for bad in ["worker", "subprocess", "Resident"] {
            let e = Config::from_env(env(&[("PATCHDIFF_WAYMARK_MODE", bad)])).unwrap_err();
            assert!(
                e.contains("PATCHDIFF_WAYMARK_MODE") && e.contains("resident"),
                "{e}"
            );
        }
    }

    /// Issue 14 item 5, "the front end bounds every call": every session carries
    /// statement_timeout, 30 s unless PATCHDIFF_MCP_STATEMENT_TIMEOUT says otherwise in
    /// PostgreSQL's duration syntax; `0` sets nothing; a bad value refuses start-up, naming the
    /// variable.
    #[test]
    fn statement_timeout_is_bounded_and_validated() {
        let timeout = |v: &str| {
            Config::from_env(env(&[("PATCHDIFF_MCP_STATEMENT_TIMEOUT", v)]))
                .map(|c| c.statement_timeout_ms)
        };
        let unset = Config::from_env(env(&[])).unwrap();
        assert_eq!(unset.statement_timeout_ms, Some(30_000));
        assert_eq!(
            unset.session_settings(),
            vec![("statement_timeout", "30000ms".to_owned())]
        );
        for (v, ms) in [
            ("", Some(30_000)),
            ("30s", Some(30_000)),
            ("500ms", Some(500)),
            ("200", Some(200)),
            (" 2 min ", Some(120_000)),
            ("1h", Some(3_600_000)),
            ("1d", Some(86_400_000)),
            ("2147483647ms", Some(i32::MAX as u32)),
            ("0", None),
            ("0s", None),
        ] {
            assert_eq!(timeout(v), Ok(ms), "{v:?}");
        }
        for bad in [
            "abc",
            "30 seconds",
            "-1s",
            "1.5s",
            "s",
            "30S",
            "25d",
            "99999999999999999999",
            "2147483648",
        ] {
            let e = timeout(bad).unwrap_err();
            assert!(
                e.contains("PATCHDIFF_MCP_STATEMENT_TIMEOUT"),
                "{bad:?}: {e}"
            );
        }
        let off = Config::from_env(env(&[("PATCHDIFF_MCP_STATEMENT_TIMEOUT", "0")])).unwrap();
        assert!(off.session_settings().is_empty());
        let both = Config::from_env(env(&[
            ("PATCHDIFF_MCP_STATEMENT_TIMEOUT", "200ms"),
            ("PATCHDIFF_STRICT_OBSERVATION_MODE", "1"),
        ]))
        .unwrap();
        assert_eq!(
            both.session_settings(),
            vec![
                ("statement_timeout", "200ms".to_owned()),
                ("patchdiff.strict_observation_mode", "on".to_owned())
            ]
        );
    }
}
