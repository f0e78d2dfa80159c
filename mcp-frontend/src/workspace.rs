//! The workspace: every file operation of the `workspace` and `observed_workspace` profiles
//! (contract, "Workspace filesystem contract"; docs/workspace.md).
//!
//! The files live beside the front end, not the database, so this module is the only place that
//! touches them. Paths are validated as text first (no escapes, no absolute paths, no reserved or
//! ambiguous components), then walked one component at a time with non-following directory
//! handles (`openat` with `O_DIRECTORY | O_NOFOLLOW`), and the file is read and replaced relative
//! to the opened parent: swapping an ancestor for a symlink after the walk cannot redirect the
//! write into another tree. An exclusive `flock` on the physical parent directory (a lease)
//! serializes imports and publications to one directory across processes, targets, overlapping
//! roots and aliases.
//!
//! A publication installs nothing unless the binding carries this front end's proof
//! (crate::binding): a SQL caller can name any file in a binding, but cannot sign it. Reserved
//! components (version-control metadata, the front end's own files) are never imported or
//! published; hard-linked files are refused, so a link cannot import or overwrite a file outside
//! the root; a replaced file keeps its owner (when running as root) and its mode without the
//! set-user-ID and set-group-ID bits; disk reads are bounded by the file's size before reading.

use crate::binding::BindingKey;
use sha2::{Digest, Sha256};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A file larger than this is not imported: its text would not fit the extension's default
/// `patchdiff.max_argument_bytes` (16 MiB) once JSON-escaped.
pub const IMPORT_MAX_BYTES: u64 = 8 * 1024 * 1024;

/// The extension's default `patchdiff.max_argument_bytes`: an import whose arguments (the file's
/// text JSON-escaped, where a control character takes six bytes and a quote two) are longer is
/// refused here, before the text is sent, as `workspace_file_too_large` (helper-50: 8 MiB of
/// control characters were sent as 48 MB and refused as `arguments_too_large`, though the model
/// had sent only a file name).
pub const IMPORT_MAX_ARGUMENT_BYTES: usize =
    patchdiff_engine::wire::limits::DEFAULT_MAX_ARGUMENT_BYTES;

/// How long an import or publication waits for another one to release the directory's lease
/// before it answers `workspace_busy`.
pub const LEASE_WAIT: Duration = Duration::from_millis(2000);

/// The longest path component a POSIX file system accepts (NAME_MAX).
const NAME_MAX: usize = 255;

/// The mode of a newly created file; an existing file keeps its own, less these bits.
pub const NEW_FILE_MODE: u32 = 0o600;

/// Set-user-ID and set-group-ID: never carried onto a published file (issue 15 item 3: a root
/// front end must not turn an edited file into a set-ID program of another owner).
pub const SET_ID_BITS: u32 = 0o6000;

/// The staged file's name: `.patchdiff-<pid>-<16 hex>.tmp`, 36 bytes at most, whatever the
/// target's name (a long target name must not make the staging name too long).
fn staging_name() -> Result<String, Refusal> {
    let mut tag = [0u8; 8];
    crate::binding::random_bytes(&mut tag)
        .map_err(|e| refuse("workspace_io_error", format!("drawing a staging name: {e}")))?;
    let tag: String = tag.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!(".patchdiff-{}-{tag}.tmp", std::process::id()))
}

/// Whether a component is a staging file's name: this version's `.patchdiff-*.tmp`, or an
/// earlier version's `.NAME.patchdiff-*.tmp`.
fn is_staging_name(component: &str) -> bool {
    let c = component.to_ascii_lowercase();
    c.starts_with('.') && c.ends_with(".tmp") && c.contains(".patchdiff-")
}

/// Unicode's Default_Ignorable_Code_Point property (DerivedCoreProperties.txt; the same ranges
/// from Unicode 14 through 17), sorted: invisible code points that HFS+ drops from a name
/// (U+200C..U+200F, U+202A..U+202E, U+206A..U+206F, U+FEFF among them), so that `.g\u{200c}it`
/// names `.git` there.
const DEFAULT_IGNORABLE: [(char, char); 17] = [
    ('\u{00AD}', '\u{00AD}'),
    ('\u{034F}', '\u{034F}'),
    ('\u{061C}', '\u{061C}'),
    ('\u{115F}', '\u{1160}'),
    ('\u{17B4}', '\u{17B5}'),
    ('\u{180B}', '\u{180F}'),
    ('\u{200B}', '\u{200F}'),
    ('\u{202A}', '\u{202E}'),
    ('\u{2060}', '\u{206F}'),
    ('\u{3164}', '\u{3164}'),
    ('\u{FE00}', '\u{FE0F}'),
    ('\u{FEFF}', '\u{FEFF}'),
    ('\u{FFA0}', '\u{FFA0}'),
    ('\u{FFF0}', '\u{FFF8}'),
    ('\u{1BCA0}', '\u{1BCA3}'),
    ('\u{1D173}', '\u{1D17A}'),
    ('\u{E0000}', '\u{E0FFF}'),
];

fn is_default_ignorable(c: char) -> bool {
    DEFAULT_IGNORABLE
        .binary_search_by(|&(lo, hi)| {
            if hi < c {
                std::cmp::Ordering::Less
            } else if lo > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// The skeleton of a path component: what names it on a file system that folds names (macOS
/// HFS+ and case-insensitive APFS, ext4 and f2fs with casefold, SMB shares of NTFS), so that two
/// components with one skeleton may name the same directory there (git's CVE-2014-9390 class).
/// Default-ignorable code points are removed; the rest is compared under Unicode's canonical
/// caseless matching (NFD, full case folding, NFD again: `ſ` is `s`, the Kelvin sign `k`, `ß`
/// `ss`, a precomposed `é` its decomposed spelling), upper-cased first, because NTFS compares
/// names through an upper-case table, whose newer versions map the dotless `ı` to `I`, which
/// case folding keeps apart from `i`; and trailing `.` and ` ` are cut (NTFS drops them: `.git.`
/// is `.git`). On NTFS a `:` starts a stream's name, and `.git::$INDEX_ALLOCATION` names the
/// directory `.git` itself (git's CVE-2019-1352), so only what comes before the first `:` counts.
pub fn skeleton(component: &str) -> String {
    use caseless::Caseless;
    use unicode_normalization::UnicodeNormalization;
    let component = component.split(':').next().unwrap_or_default();
    let folded: String = component
        .chars()
        .filter(|&c| !is_default_ignorable(c))
        .nfd()
        .flat_map(char::to_uppercase)
        .default_case_fold()
        .nfd()
        .collect();
    folded.trim_end_matches(['.', ' ']).to_owned()
}

/// A reserved component name (`PATCHDIFF_WORKSPACE_RESERVED`) with its skeleton and the stem of
/// its NTFS 8.3 short names.
#[derive(Debug)]
struct ReservedName {
    /// As configured.
    name: String,
    skeleton: String,
    /// The skeleton without its leading dots, cut to 6 characters (`git` for `.git`,
    /// `node_m` for `node_modules`): a short name is this, `~` and digits (`GIT~1`). Empty
    /// when nothing is left, and then no short name is matched.
    short_stem: String,
}

impl ReservedName {
    fn new(name: &str) -> ReservedName {
        let skeleton = skeleton(name);
        let short_stem = skeleton.trim_start_matches('.').chars().take(6).collect();
        ReservedName {
            name: name.to_owned(),
            skeleton,
            short_stem,
        }
    }

    /// Whether `skel`, a component's skeleton, is this name's NTFS 8.3 short name.
    fn is_short_name(&self, skel: &str) -> bool {
        !self.short_stem.is_empty()
            && skel
                .strip_prefix(self.short_stem.as_str())
                .and_then(|rest| rest.strip_prefix('~'))
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    }
}

/// A refusal before anything was installed: the destination is unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: &'static str,
    pub detail: String,
}

fn refuse(code: &'static str, detail: impl Into<String>) -> Refusal {
    Refusal {
        code,
        detail: detail.into(),
    }
}

fn io_refusal(what: &str, e: std::io::Error) -> Refusal {
    refuse("workspace_io_error", format!("{what}: {e}"))
}

/// A test hook (`PATCHDIFF_WORKSPACE_TEST_HOOK=<point>`, `PATCHDIFF_WORKSPACE_TEST_HOOK_DIR`):
/// at the named point the process creates `<dir>/paused` and waits until `<dir>/resume` exists,
/// so a test can change the file system, or kill the process, at exactly that point. Points:
/// `after_walk`, `after_lease`, `after_staging` (the staged file written and the disk checked
/// again, before the rename or link), `before_commit`; and `after_read`, in the files profile's
/// `read_file` once the file is read, before the database is asked for its target. It fires once
/// per process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    pub point: String,
    pub dir: PathBuf,
}

/// The configured root, opened once at start-up and held: the binding is the identity of this
/// directory (device and inode), so moving it keeps the targets bound and a different directory
/// at the same path does not.
#[derive(Debug)]
pub struct Workspace {
    root: OwnedFd,
    pub path: PathBuf,
    /// The directory opened at start-up, as the kernel names it (`/proc/self/fd`): `path` with
    /// its symbolic links resolved once, at the moment it was opened.
    pub real_path: Option<PathBuf>,
    pub device: u64,
    pub inode: u64,
    key: BindingKey,
    /// `PATCHDIFF_WORKSPACE_RESERVED`, with their skeletons.
    reserved: Vec<ReservedName>,
    hook: Option<Hook>,
    hook_fired: std::sync::atomic::AtomicBool,
}

/// What a publishing SAVE asks to install.
#[derive(Debug, Clone)]
pub struct Publication {
    pub root_device: u64,
    pub root_inode: u64,
    pub relative_path: String,
    pub baseline_sha256: String,
    /// The length of the baseline's bytes (`None` from an extension that does not send it).
    pub baseline_bytes: Option<u64>,
    pub content: String,
    pub content_eol: String,
    pub content_sha256: String,
    /// The binding's nonce and proof as recorded at import; `None` for a target bound before
    /// proofs existed, or by a SQL caller without one.
    pub binding_nonce: Option<String>,
    pub binding_proof: Option<String>,
    /// Whether the file may be absent and so created. Only the files profile's new file (its
    /// import and first publication in one transaction) may; any other target was imported from
    /// a file that existed, so a missing file was deleted or moved on disk since: drift, never
    /// re-created (which undid a `rm` or `git mv` and gave the file new owner and mode).
    pub may_create: bool,
}

/// The `workspace_sync` receipt.
#[derive(Debug, Clone)]
pub struct Receipt {
    pub synced_path: String,
    pub disk_sha256: String,
    pub bytes_written: u64,
    pub content_eol: String,
}

impl Receipt {
    pub fn to_json(&self, durability: &str) -> serde_json::Value {
        serde_json::json!({
            "synced_path": self.synced_path,
            "disk_sha256": self.disk_sha256,
            "bytes_written": self.bytes_written,
            "content_eol": self.content_eol,
            "publication": "installed",
            "durability": durability,
        })
    }
}

/// An installed file whose directory is still open and leased: the caller commits, then
/// [`Installed::finish`] releases the handles.
pub struct Installed {
    pub receipt: Receipt,
    parent: OwnedFd,
    lease: Lease,
}

/// How a publication ended before the caller's COMMIT.
pub enum Outcome {
    /// Installed and the directory fsynced.
    Installed(Installed),
    /// Nothing installed; the destination is unchanged.
    Rejected(Refusal),
    /// Installed, but the directory's durability is uncertain (`workspace_durability_uncertain`).
    DurabilityUncertain(Receipt, String),
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(bytes);
    h.finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
}

fn cstr(s: &str) -> Result<CString, Refusal> {
    CString::new(s).map_err(|_| refuse("workspace_path_invalid", "the path contains NUL"))
}

fn last_error() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// Validates a path relative to the root and splits it into components. Refused: empty,
/// absolute, `..` (escape), `.`, empty components (`a//b`, trailing `/`), backslashes, control
/// characters and components longer than NAME_MAX (ambiguous or reserved).
pub fn validate(rel: &str) -> Result<Vec<&str>, Refusal> {
    if rel.is_empty() {
        return Err(refuse("workspace_path_invalid", "the path is empty"));
    }
    if rel.starts_with('/') {
        return Err(refuse(
            "workspace_path_absolute",
            "the path must be relative to PATCHDIFF_WORKSPACE_ROOT, not absolute",
        ));
    }
    // The extension's limit on a target's filename, checked before the walk: a longer path
    // would be walked, and the file read, only for the import to be refused (helper-50).
    let max = patchdiff_engine::wire::limits::FILENAME_MAX_BYTES;
    if rel.len() > max {
        return Err(refuse(
            "workspace_path_invalid",
            format!(
                "the path is {} bytes; a target's filename is at most {max}",
                rel.len()
            ),
        ));
    }
    if rel.chars().any(|c| c.is_control()) || rel.contains('\\') {
        return Err(refuse(
            "workspace_path_invalid",
            "the path contains a control character or a backslash",
        ));
    }
    let parts: Vec<&str> = rel.split('/').collect();
    for p in &parts {
        match *p {
            ".." => {
                return Err(refuse(
                    "workspace_path_escape",
                    "the path has a '..' component, which could leave the workspace",
                ));
            }
            "" | "." => {
                return Err(refuse(
                    "workspace_path_ambiguous",
                    "the path has an empty or '.' component; write each directory once, separated by single '/'",
                ));
            }
            p if p.len() > NAME_MAX => {
                return Err(refuse(
                    "workspace_path_invalid",
                    format!("a path component is longer than {NAME_MAX} bytes"),
                ));
            }
            _ => {}
        }
    }
    Ok(parts)
}

fn fstat(fd: RawFd) -> std::io::Result<libc::stat> {
    // SAFETY: `st` is written by fstat before it is read; fd is a valid descriptor.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 {
            return Err(last_error());
        }
        Ok(st)
    }
}

/// `fstatat` of `name` in `dir`, not following a link.
fn stat_at(dir: &OwnedFd, name: &CString) -> std::io::Result<libc::stat> {
    // SAFETY: `st` is written before it is read; name is NUL-terminated; dir is open.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        ) != 0
        {
            return Err(last_error());
        }
        Ok(st)
    }
}

fn is_symlink_at(dir: &OwnedFd, name: &CString) -> bool {
    stat_at(dir, name).is_ok_and(|st| (st.st_mode & libc::S_IFMT) == libc::S_IFLNK)
}

fn openat(dir: RawFd, name: &CString, flags: libc::c_int, mode: u32) -> std::io::Result<OwnedFd> {
    // SAFETY: name is NUL-terminated; a non-negative result is a descriptor we now own.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags | libc::O_CLOEXEC, mode) };
    if fd < 0 {
        return Err(last_error());
    }
    // SAFETY: fd is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

const DIR_FLAGS: libc::c_int = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;

/// The exclusive advisory lease on a directory: `flock` on an open file description of its
/// own, so it conflicts with every other lease on the same physical directory, in this process
/// or another, whatever path reached it. Released when dropped (closed).
pub struct Lease(#[allow(dead_code)] OwnedFd);

impl Lease {
    fn acquire(dir: &OwnedFd) -> Result<Lease, Refusal> {
        let fd = openat(dir.as_raw_fd(), &c".".into(), DIR_FLAGS, 0)
            .map_err(|e| io_refusal("opening the directory for its lease", e))?;
        let deadline = Instant::now() + LEASE_WAIT;
        loop {
            // SAFETY: fd is open.
            if unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(Lease(fd));
            }
            let e = last_error();
            if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(io_refusal("taking the directory lease", e));
            }
            if Instant::now() >= deadline {
                return Err(refuse(
                    "workspace_busy",
                    format!(
                        "another import or publication, or any process that may read this directory, holds a lock on it (its lease; waited {} ms); retry later",
                        LEASE_WAIT.as_millis()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A file read from disk.
struct DiskFile {
    bytes: Vec<u8>,
    /// Permission bits (`st_mode & 0o7777`).
    mode: u32,
    uid: libc::uid_t,
    gid: libc::gid_t,
    /// The extended attributes a replacement keeps ([`kept_xattrs`]).
    xattrs: Vec<(CString, Vec<u8>)>,
}

/// The current bytes of `name` in `dir`: `None` when absent. Symlinks, non-regular files,
/// hard-linked files and the key file (`reserved`: its device and inode) are refused; the file is
/// opened without following, its size checked against `limit` before a byte is read, and at most
/// `limit + 1` bytes are read through its handle.
fn read_at(
    dir: &OwnedFd,
    name: &CString,
    limit: u64,
    reserved: (u64, u64),
) -> Result<Option<DiskFile>, Refusal> {
    let symlink = || {
        refuse(
            "workspace_path_symlink",
            "the file is a symbolic link; managed files must be regular files inside the workspace",
        )
    };
    let not_regular = || {
        refuse(
            "workspace_not_regular_file",
            "the path names something other than a regular file",
        )
    };
    // What the name is, before it is opened for reading: opening a device, a FIFO or a socket
    // is itself an action (a device's driver runs; a socket cannot be opened: ENXIO), so only a
    // regular file is opened (helper-50). O_PATH with O_NOFOLLOW opens a link itself.
    let probe = match openat(dir.as_raw_fd(), name, libc::O_PATH | libc::O_NOFOLLOW, 0) {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
        Err(e) => return Err(io_refusal("opening the file", e)),
    };
    let seen = fstat(probe.as_raw_fd()).map_err(|e| io_refusal("inspecting the file", e))?;
    match seen.st_mode & libc::S_IFMT {
        libc::S_IFREG => {}
        libc::S_IFLNK => return Err(symlink()),
        _ => return Err(not_regular()),
    }
    // Opened for reading through the probe itself, so the name cannot be swapped for a FIFO or
    // a device in between (helper-51); by its name again where /proc is not mounted, the
    // identity then compared below.
    const READ: libc::c_int = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY;
    let through_probe =
        CString::new(format!("/proc/self/fd/{}", probe.as_raw_fd())).expect("no NUL in a number");
    let reopened = match openat(libc::AT_FDCWD, &through_probe, READ & !libc::O_NOFOLLOW, 0) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => openat(dir.as_raw_fd(), name, READ, 0),
        r => r,
    };
    let f = match reopened {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) || is_symlink_at(dir, name) => {
            return Err(symlink());
        }
        Err(e) => return Err(io_refusal("opening the file", e)),
    };
    let st = fstat(f.as_raw_fd()).map_err(|e| io_refusal("inspecting the file", e))?;
    if (st.st_mode & libc::S_IFMT) != libc::S_IFREG {
        return Err(not_regular());
    }
    if (st.st_dev, st.st_ino) != (seen.st_dev, seen.st_ino) {
        return Err(refuse(
            "workspace_io_error",
            "the file was replaced while it was being opened; nothing was read or written. Retry.",
        ));
    }
    if (st.st_dev, st.st_ino) == reserved {
        return Err(refuse(
            "workspace_path_reserved",
            "the path names the front end's binding key file, which is never imported or published",
        ));
    }
    // A second name may lie outside the root: reading it would import an outside file, and
    // replacing this name would leave the other one stale or, for a root front end, let an
    // attacker choose which file is rewritten.
    if st.st_nlink > 1 {
        return Err(refuse(
            "workspace_hard_link",
            format!(
                "the file has {} hard links; only files with a single name are imported or published",
                st.st_nlink
            ),
        ));
    }
    if st.st_size as u64 > limit {
        return Err(refuse(
            "workspace_file_too_large",
            format!("the file has {} bytes; the limit is {limit}", st.st_size),
        ));
    }
    use std::io::Read;
    let mut file = std::fs::File::from(f);
    let mut bytes = Vec::with_capacity((st.st_size as u64).min(limit) as usize);
    file.by_ref()
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| io_refusal("reading the file", e))?;
    if bytes.len() as u64 > limit {
        return Err(refuse(
            "workspace_file_too_large",
            "the file grew past the limit while being read",
        ));
    }
    let xattrs = kept_xattrs(file.as_raw_fd())
        .map_err(|e| io_refusal("reading the file's extended attributes", e))?;
    Ok(Some(DiskFile {
        bytes,
        mode: st.st_mode & 0o7777,
        uid: st.st_uid,
        gid: st.st_gid,
        xattrs,
    }))
}

/// The POSIX access ACL (`system.posix_acl_access`).
const ACCESS_ACL: &[u8] = b"system.posix_acl_access";

/// The extended attributes a replaced file keeps: its access ACL and the `user.` ones. A file
/// with an ACL has the ACL's mask in its mode's group bits, so a copy given only the mode would
/// open the file to its owning group and close it to the users the ACL named (helper-50).
/// `security.` attributes (a capability, a label) are not carried over, as set-ID bits are not;
/// `trusted.` ones need a privilege the front end should not use for them.
fn kept_xattrs(fd: RawFd) -> std::io::Result<Vec<(CString, Vec<u8>)>> {
    // What a file's owner may attach is bounded by the file system, not by much: up to 64 KiB
    // of names, each value up to 64 KiB (XFS, btrfs), read on every check of the file. More
    // than this in all is refused (helper-51).
    const MAX_KEPT: usize = 64 * 1024;
    let unsupported = |e: &std::io::Error| e.raw_os_error() == Some(libc::ENOTSUP);
    let names = match xattr_read(|buf, len| {
        // SAFETY: buf is valid for len bytes (or null with len 0); fd is open.
        unsafe { libc::flistxattr(fd, buf.cast(), len) }
    }) {
        Err(e) if unsupported(&e) => return Ok(Vec::new()),
        r => r?,
    };
    let mut kept = Vec::new();
    let mut total = 0;
    for n in names.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        if n != ACCESS_ACL && !n.starts_with(b"user.") {
            continue;
        }
        let name = CString::new(n).map_err(std::io::Error::other)?;
        let value = xattr_read(|buf, len| {
            // SAFETY: as above; name is NUL-terminated.
            unsafe { libc::fgetxattr(fd, name.as_ptr(), buf.cast(), len) }
        })?;
        total += n.len() + value.len();
        if total > MAX_KEPT {
            return Err(std::io::Error::other(format!(
                "the file's ACL and user. extended attributes exceed {MAX_KEPT} bytes"
            )));
        }
        kept.push((name, value));
    }
    Ok(kept)
}

/// A variable-length xattr call: its size first, then its bytes (again if it grew meanwhile).
fn xattr_read(call: impl Fn(*mut u8, usize) -> libc::ssize_t) -> std::io::Result<Vec<u8>> {
    loop {
        let n = call(std::ptr::null_mut(), 0);
        if n < 0 {
            return Err(last_error());
        }
        let mut buf = vec![0u8; n as usize];
        let m = call(buf.as_mut_ptr(), buf.len());
        if m >= 0 {
            buf.truncate(m as usize);
            return Ok(buf);
        }
        let e = last_error();
        if e.raw_os_error() != Some(libc::ERANGE) {
            return Err(e);
        }
    }
}

/// Gives the staged file `fd` the replaced file's kept attributes, and no access ACL it did not
/// have (a directory's default ACL gives a new file one).
fn restore_xattrs(fd: RawFd, xattrs: &[(CString, Vec<u8>)]) -> std::io::Result<()> {
    let acl = CString::new(ACCESS_ACL).expect("no NUL");
    if !xattrs.iter().any(|(n, _)| n.as_bytes() == ACCESS_ACL) {
        // SAFETY: fd is open; acl is NUL-terminated.
        if unsafe { libc::fremovexattr(fd, acl.as_ptr()) } != 0 {
            let e = last_error();
            if !matches!(e.raw_os_error(), Some(libc::ENODATA | libc::ENOTSUP)) {
                return Err(e);
            }
        }
    }
    for (name, value) in xattrs {
        // SAFETY: fd is open; name is NUL-terminated; value is valid for its length.
        if unsafe { libc::fsetxattr(fd, name.as_ptr(), value.as_ptr().cast(), value.len(), 0) } != 0
        {
            return Err(last_error());
        }
    }
    Ok(())
}

/// Refuses to replace a file that is read-only on disk: its mode (`mode`, from the `fstat` of
/// the file opened by the drift check) has no write bit, the user's explicit mark, honoured even
/// when the front end runs as root; or this process may not write it (`faccessat` with the
/// effective IDs: `EACCES`, `EPERM` for an immutable file, `EROFS`). An editor would fail to open
/// such a file for writing, but `renameat` over it would succeed, so the publication asks first.
/// Refuses to replace a file of another user when the front end does not run as root: the new
/// file would be the front end's, and the file's owner could no longer write it (helper-50).
/// A root front end gives the new file the old one's owner and group.
fn check_owner(d: &DiskFile, rel: &str) -> Result<(), Refusal> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if me == 0 {
        return Ok(());
    }
    if d.uid != me {
        return Err(refuse(
            "workspace_file_read_only",
            format!(
                "{rel} belongs to user {} and this front end runs as user {me}: replacing it would make the file this front end's, and its owner could no longer write it; it was left as it is. Publish it from a front end running as its owner.",
                d.uid
            ),
        ));
    }
    if !member_of(d.gid) {
        return Err(refuse(
            "workspace_file_read_only",
            format!(
                "{rel} belongs to group {}, which this front end (user {me}) is not a member of: the replacing file could not keep that group, and would give the group's rights to another; it was left as it is. Publish it from a front end in that group.",
                d.gid
            ),
        ));
    }
    Ok(())
}

/// Whether this process may give a file the group `gid` (its effective or a supplementary one).
fn member_of(gid: libc::gid_t) -> bool {
    // SAFETY: getegid has no preconditions and cannot fail.
    if unsafe { libc::getegid() } == gid {
        return true;
    }
    // SAFETY: a null list with size 0 asks for the count.
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    if n <= 0 {
        return false;
    }
    let mut groups = vec![0 as libc::gid_t; n as usize];
    // SAFETY: groups has room for n entries, and getgroups writes at most n.
    let m = unsafe { libc::getgroups(n, groups.as_mut_ptr()) };
    m > 0 && groups[..m as usize].contains(&gid)
}

fn check_writable(dir: &OwnedFd, name: &CString, mode: u32, rel: &str) -> Result<(), Refusal> {
    if mode & 0o222 == 0 {
        return Err(refuse(
            "workspace_file_read_only",
            format!(
                "{rel} is read-only on disk (mode {mode:04o}); it was left as it is. Make it writable (chmod u+w) to publish it."
            ),
        ));
    }
    // SAFETY: name is NUL-terminated; dir is open. AT_SYMLINK_NOFOLLOW: a link swapped in is
    // not followed (the drift check after staging refuses it).
    let rc = unsafe {
        libc::faccessat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::W_OK,
            libc::AT_EACCESS | libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc != 0 {
        let e = last_error();
        // Any other error (the file vanished meanwhile) is left to the drift check after staging.
        if matches!(
            e.raw_os_error(),
            Some(libc::EACCES | libc::EPERM | libc::EROFS)
        ) {
            return Err(refuse(
                "workspace_file_read_only",
                format!(
                    "{rel} is not writable by this front end (mode {mode:04o}: {e}); it was left as it is. Make it writable to publish it."
                ),
            ));
        }
    }
    Ok(())
}

impl Workspace {
    /// Opens the configured root. The root itself may be reached through a symlink (its owner
    /// chose it); everything below it is walked without following.
    /// `key` signs and verifies bindings; `reserved` are the `PATCHDIFF_WORKSPACE_RESERVED`
    /// component names.
    pub fn open(
        path: &Path,
        key: BindingKey,
        reserved: Vec<String>,
        hook: Option<Hook>,
    ) -> Result<Workspace, String> {
        let c = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| "PATCHDIFF_WORKSPACE_ROOT contains NUL".to_string())?;
        let root =
            openat(libc::AT_FDCWD, &c, libc::O_RDONLY | libc::O_DIRECTORY, 0).map_err(|e| {
                format!(
                    "PATCHDIFF_WORKSPACE_ROOT={} is not an openable directory: {e}",
                    path.display()
                )
            })?;
        let st = fstat(root.as_raw_fd()).map_err(|e| e.to_string())?;
        let real_path = std::fs::read_link(format!("/proc/self/fd/{}", root.as_raw_fd())).ok();
        Ok(Workspace {
            root,
            path: path.to_owned(),
            real_path,
            device: st.st_dev,
            inode: st.st_ino,
            key,
            reserved: reserved.iter().map(|r| ReservedName::new(r)).collect(),
            hook,
            hook_fired: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Refuses a path with a reserved component or a staging file's name, before any IO. A
    /// component is reserved when its [`skeleton`] is a reserved name's, or is the NTFS 8.3
    /// short name of one (`git~1`): any spelling that a case-folding file system could resolve
    /// to the reserved directory.
    fn check_reserved(&self, parts: &[&str]) -> Result<(), Refusal> {
        for p in parts {
            let skel = skeleton(p);
            if let Some(r) = self.reserved.iter().find(|r| r.skeleton == skel) {
                let how = if p.eq_ignore_ascii_case(&r.name) {
                    String::new()
                } else {
                    format!(
                        ", which reaches {:?} on file systems that ignore case, invisible characters or trailing dots and spaces",
                        r.name
                    )
                };
                return Err(refuse(
                    "workspace_path_reserved",
                    format!(
                        "the path has the reserved component {p:?}{how} (PATCHDIFF_WORKSPACE_RESERVED); it is never imported or published"
                    ),
                ));
            }
            if let Some(r) = self.reserved.iter().find(|r| r.is_short_name(&skel)) {
                return Err(refuse(
                    "workspace_path_reserved",
                    format!(
                        "the path has the reserved component {p:?}, which reaches {:?} as its NTFS short (8.3) name (PATCHDIFF_WORKSPACE_RESERVED); it is never imported or published",
                        r.name
                    ),
                ));
            }
            if is_staging_name(p) {
                return Err(refuse(
                    "workspace_path_reserved",
                    "the path names a staging file of a publication (.patchdiff-*.tmp); it is never imported or published",
                ));
            }
        }
        // A file `HEAD` beside the directories `objects` and `refs` makes its directory a bare
        // git repository, whose `config` (`core.fsmonitor`) and hooks run commands in any git
        // run there, whether or not `.git` is near (helper-114: four files named
        // HEAD, config, objects/x and refs/x planted one). The other three names are too common
        // to reserve; without `HEAD` nothing is a repository.
        let git_reserved = self.reserved.iter().any(|r| r.skeleton == skeleton(".git"));
        if let Some(last) = parts
            .last()
            .filter(|l| git_reserved && skeleton(l) == skeleton("HEAD"))
        {
            return Err(refuse(
                "workspace_path_reserved",
                format!(
                    "the path ends in the file name {last:?}, which reaches \"HEAD\": beside objects/ and refs/ it makes its directory a bare git repository, whose config runs commands, so it is reserved with .git (PATCHDIFF_WORKSPACE_RESERVED); it is never imported or published"
                ),
            ));
        }
        Ok(())
    }

    /// The `workspace_binding` of an import of `rel`: the root's identity, the path, a fresh
    /// nonce and this front end's proof over them.
    pub fn binding(&self, rel: &str) -> Result<serde_json::Value, Refusal> {
        let nonce = crate::binding::fresh_nonce()
            .map_err(|e| refuse("workspace_io_error", format!("drawing a nonce: {e}")))?;
        let proof = self.key.proof(self.device, self.inode, rel, &nonce);
        Ok(serde_json::json!({
            "root_device": self.device, "root_inode": self.inode, "relative_path": rel,
            "nonce": nonce, "proof": proof,
        }))
    }

    /// The public name of this front end's binding key ([`BindingKey::tag`]).
    pub(crate) fn key_tag(&self) -> String {
        self.key.tag()
    }

    /// The second key of the files profile's import lock for a file's `label`
    /// ([`BindingKey::lock_key`]).
    pub(crate) fn import_lock_key(&self, label: &str) -> i32 {
        self.key.lock_key(label)
    }

    pub(crate) fn hook(&self, point: &str) {
        let Some(h) = &self.hook else { return };
        if h.point != point
            || self
                .hook_fired
                .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            return;
        }
        let _ = std::fs::write(h.dir.join("paused"), point);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !h.dir.join("resume").exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Opens the parent directory of `parts` (all but the last), one non-following component at
    /// a time.
    fn walk(&self, parts: &[&str]) -> Result<OwnedFd, Refusal> {
        self.walk_making(parts, false, &mut MadeDirs::default())
    }

    /// [`Workspace::walk`]; with `create`, missing directories are created (mode 0700), each
    /// noted in `made` for the caller to remove if what it created them for fails.
    fn walk_making(
        &self,
        parts: &[&str],
        create: bool,
        made: &mut MadeDirs,
    ) -> Result<OwnedFd, Refusal> {
        let mut dir = openat(self.root.as_raw_fd(), &c".".into(), DIR_FLAGS, 0)
            .map_err(|e| io_refusal("opening the workspace root", e))?;
        for part in &parts[..parts.len() - 1] {
            let name = cstr(part)?;
            let next = match openat(dir.as_raw_fd(), &name, DIR_FLAGS, 0) {
                Ok(d) => d,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) && create => {
                    // SAFETY: name is NUL-terminated; dir is open.
                    let created =
                        unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o700) } == 0;
                    if !created {
                        let e = last_error();
                        if e.raw_os_error() != Some(libc::EEXIST) {
                            return Err(io_refusal("creating a parent directory", e));
                        }
                    }
                    let next = openat(dir.as_raw_fd(), &name, DIR_FLAGS, 0)
                        .map_err(|e| self.walk_error(&dir, &name, e))?;
                    if created && let Ok(st) = fstat(next.as_raw_fd()) {
                        let parent = std::mem::replace(&mut dir, next);
                        made.0.push((parent, name, (st.st_dev, st.st_ino)));
                        continue;
                    }
                    next
                }
                Err(e) => return Err(self.walk_error(&dir, &name, e)),
            };
            dir = next;
        }
        Ok(dir)
    }

    fn walk_error(&self, dir: &OwnedFd, name: &CString, e: std::io::Error) -> Refusal {
        if is_symlink_at(dir, name) || e.raw_os_error() == Some(libc::ELOOP) {
            return refuse(
                "workspace_path_symlink",
                "a directory on the path is a symbolic link; the workspace is walked without following links",
            );
        }
        match e.raw_os_error() {
            Some(libc::ENOENT) => refuse(
                "workspace_file_not_found",
                "a directory on the path does not exist",
            ),
            Some(libc::ENOTDIR) => refuse(
                "workspace_path_invalid",
                "a component of the path is not a directory",
            ),
            _ => io_refusal("opening a directory on the path", e),
        }
    }

    /// Reads `rel` for an import, under the directory's lease. The bytes must be UTF-8 text.
    pub fn import(&self, rel: &str) -> Result<String, Refusal> {
        let parts = validate(rel)?;
        self.check_reserved(&parts)?;
        let parent = self.walk(&parts)?;
        let _lease = Lease::acquire(&parent)?;
        let name = cstr(parts[parts.len() - 1])?;
        let disk = read_at(&parent, &name, IMPORT_MAX_BYTES, self.key.file_identity)?;
        let bytes = disk.map(|d| d.bytes).ok_or_else(|| {
            refuse(
                "workspace_file_not_found",
                format!("{rel} does not exist under the workspace root"),
            )
        })?;
        String::from_utf8(bytes).map_err(|_| {
            refuse(
                "workspace_file_not_utf8",
                "the file is not UTF-8 text; only UTF-8 files can be imported",
            )
        })
    }

    /// Installs a publication: binding check, walk, lease, drift check, read-only check, staged
    /// write, second drift check, atomic rename (replacement) or no-clobber link (creation), fsync of file
    /// and directory. The caller owns the database transaction and commits only after
    /// [`Outcome::Installed`].
    pub fn publish(&self, p: &Publication) -> Outcome {
        match self.try_publish(p) {
            Ok(o) => o,
            Err(r) => Outcome::Rejected(r),
        }
    }

    fn try_publish(&self, p: &Publication) -> Result<Outcome, Refusal> {
        // Before any file-system access: only a binding this front end signed is published.
        let verified = match (&p.binding_nonce, &p.binding_proof) {
            (Some(nonce), Some(proof)) => {
                self.key
                    .verify(p.root_device, p.root_inode, &p.relative_path, nonce, proof)
            }
            _ => false,
        };
        if !verified {
            return Err(refuse(
                "workspace_binding_unverified",
                "the target's workspace binding carries no valid proof of this front end (it was bound over SQL, bound before binding proofs existed, or by a front end with another key); nothing was written. Initialize a new target from the file (from_workspace: true) and redo the edits there.",
            ));
        }
        if (p.root_device, p.root_inode) != (self.device, self.inode) {
            return Err(refuse(
                "workspace_root_mismatch",
                "the target was imported under a different workspace root (device and inode differ); initialize a new target from this workspace",
            ));
        }
        let parts = validate(&p.relative_path)?;
        self.check_reserved(&parts)?;
        let gone = || {
            refuse(
                "external_disk_drift",
                format!(
                    "{} is no longer on disk (deleted or moved since it was imported or last published); nothing was created. Re-initialize a target from the file where it is now, if it still exists, before publishing again.",
                    p.relative_path
                ),
            )
        };
        // Missing parent directories are created only for a file that may be created, and
        // removed again if it is not (helper-94: a new file refused on a full file system left
        // the directories made for it).
        let mut made = MadeDirs::default();
        let parent = match self.walk_making(&parts, p.may_create, &mut made) {
            Err(r) if r.code == "workspace_file_not_found" => Err(gone()),
            parent => parent,
        };
        let installed = parent.and_then(|parent| self.install_at(p, &parts, parent, gone));
        if installed.is_err() {
            made.remove();
        }
        installed
    }

    /// [`Workspace::try_publish`] from the walked parent directory on: lease, drift checks,
    /// staging and installation.
    fn install_at(
        &self,
        p: &Publication,
        parts: &[&str],
        parent: OwnedFd,
        gone: impl Fn() -> Refusal,
    ) -> Result<Outcome, Refusal> {
        self.hook("after_walk");
        let lease = Lease::acquire(&parent)?;
        self.hook("after_lease");
        let name = cstr(parts[parts.len() - 1])?;
        let bytes = p.content.as_bytes();
        // The disk can only be the baseline or the content: a file larger than both is drift,
        // known from its size without reading it. (Without the baseline's length, from an older
        // extension, an import's limit stands in for it.)
        let limit = p
            .baseline_bytes
            .unwrap_or(IMPORT_MAX_BYTES)
            .max(bytes.len() as u64);
        let drift = |what: &str| {
            refuse(
                "external_disk_drift",
                format!(
                    "{} changed on disk since it was imported or last published ({what}); it was left as it is. Re-initialize a target from the file before publishing again.",
                    p.relative_path
                ),
            )
        };
        // A disk that already holds exactly the bytes to publish is not drift: it is the state
        // a publication interrupted after installation leaves (docs/workspace.md, "Reconciling").
        let check = |what: &str| -> Result<Option<DiskFile>, Refusal> {
            match read_at(&parent, &name, limit, self.key.file_identity) {
                Ok(None) => Ok(None),
                Ok(Some(disk)) => {
                    let h = sha256_hex(&disk.bytes);
                    if h == p.baseline_sha256 || h == p.content_sha256 {
                        Ok(Some(disk))
                    } else {
                        Err(drift(what))
                    }
                }
                Err(r) if r.code == "workspace_file_too_large" => Err(drift(what)),
                Err(r) => Err(r),
            }
        };
        let existing = check("checked under the lease")?;
        if existing.is_none() && !p.may_create {
            return Err(gone());
        }
        // Before anything is staged: a read-only file is not replaced, nor one that would
        // change hands.
        if let Some(d) = &existing {
            check_writable(&parent, &name, d.mode, &p.relative_path)?;
            check_owner(d, &p.relative_path)?;
        }
        let tmp = cstr(&staging_name()?)?;
        let staged = openat(
            parent.as_raw_fd(),
            &tmp,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
            NEW_FILE_MODE,
        )
        .map_err(|e| io_refusal("creating the staged file", e))?;
        let unlink_tmp = || {
            // SAFETY: tmp is NUL-terminated; parent is open.
            unsafe { libc::unlinkat(parent.as_raw_fd(), tmp.as_ptr(), 0) };
        };
        let mut staged = std::fs::File::from(staged);
        // Every refusal from here on leaves the staged file emptied and unreadable to others,
        // wherever it is by then ([`neutralize`]), as well as unlinked under its name: whoever may
        // write the directory (one not sticky) may have moved it elsewhere on the filesystem
        // before the rename, and a root front end had already given it the replaced file's owner
        // and mode (helper-94: 30 of 30 refused SAVEs left another user's file with the published
        // bytes in a directory of the mover's choosing).
        let abandon = |staged: &std::fs::File| {
            neutralize(staged);
            unlink_tmp();
        };
        let staged_result = (|| -> std::io::Result<()> {
            use std::io::Write;
            let f = &mut staged;
            f.write_all(bytes)?;
            let mode = existing
                .as_ref()
                .map_or(NEW_FILE_MODE, |d| d.mode & !SET_ID_BITS);
            // A root front end would otherwise hand every replaced file to root; any other one
            // replaces only its own files (check_owner) and keeps their group, which it may set
            // when it is one of its groups.
            if let Some(d) = existing.as_ref() {
                // SAFETY: geteuid has no preconditions and cannot fail.
                let (uid, gid) = if unsafe { libc::geteuid() } == 0 {
                    (d.uid, d.gid)
                } else {
                    (libc::uid_t::MAX, d.gid)
                };
                // SAFETY: f is open for the whole call; fchown only reads its descriptor.
                if unsafe { libc::fchown(f.as_raw_fd(), uid, gid) } != 0 {
                    return Err(last_error());
                }
            }
            // The ACL before the mode: fchmod then sets the ACL's mask from the mode's group
            // bits, which were the mask. After fchown, which may clear set-ID bits itself. A new
            // file keeps what its directory gives every new file.
            if let Some(d) = existing.as_ref() {
                restore_xattrs(f.as_raw_fd(), &d.xattrs)?;
            }
            // SAFETY: f is open.
            if unsafe { libc::fchmod(f.as_raw_fd(), mode as libc::mode_t) } != 0 {
                return Err(last_error());
            }
            f.sync_all()
        })();
        if let Err(e) = staged_result {
            abandon(&staged);
            let what = if e.raw_os_error() == Some(libc::EPERM) {
                "giving the staged file the replaced file's group, attributes and mode"
            } else {
                "writing the staged file"
            };
            return Err(io_refusal(what, e));
        }
        let staged_identity = fstat(staged.as_raw_fd()).map(|st| (st.st_dev, st.st_ino));
        let now = match check("checked again after staging") {
            Ok(d) => d,
            Err(r) => {
                abandon(&staged);
                return Err(r);
            }
        };
        // Made read-only while the bytes were staged.
        if let Some(d) = &now
            && let Err(r) = check_writable(&parent, &name, d.mode, &p.relative_path)
        {
            abandon(&staged);
            return Err(r);
        }
        self.hook("after_staging");
        let installed = match (existing, now) {
            (Some(_), Some(_)) => {
                // SAFETY: both names are NUL-terminated and relative to the open parent.
                let rc = unsafe {
                    libc::renameat(
                        parent.as_raw_fd(),
                        tmp.as_ptr(),
                        parent.as_raw_fd(),
                        name.as_ptr(),
                    )
                };
                if rc != 0 {
                    let e = last_error();
                    abandon(&staged);
                    return Err(io_refusal("renaming the staged file into place", e));
                }
                Ok(())
            }
            (None, None) => {
                // SAFETY: as above; flags 0: never follows, never replaces.
                let rc = unsafe {
                    libc::linkat(
                        parent.as_raw_fd(),
                        tmp.as_ptr(),
                        parent.as_raw_fd(),
                        name.as_ptr(),
                        0,
                    )
                };
                let e = last_error();
                if rc != 0 {
                    abandon(&staged);
                } else {
                    unlink_tmp();
                }
                if rc != 0 {
                    if e.raw_os_error() == Some(libc::EEXIST) {
                        Err(refuse(
                            "external_disk_drift",
                            format!(
                                "{} appeared on disk while it was being created; the new file was preserved",
                                p.relative_path
                            ),
                        ))
                    } else {
                        Err(io_refusal("linking the new file into place", e))
                    }
                } else {
                    Ok(())
                }
            }
            // The file appeared or vanished between the two checks.
            _ => {
                abandon(&staged);
                Err(refuse(
                    "external_disk_drift",
                    format!(
                        "{} appeared or vanished on disk during publication; it was left as it is",
                        p.relative_path
                    ),
                ))
            }
        };
        installed?;
        // Whoever may write the directory could have put a file of its own under the staged
        // name before the rename (helper-50: 26 of 30 SAVEs installed such a file and answered
        // `saved`). The name must now be the file this publication wrote, or nothing it says
        // about the disk holds: the caller rolls back, no checkpoint.
        let installed_identity = stat_at(&parent, &name).map(|st| (st.st_dev, st.st_ino));
        match (staged_identity, installed_identity) {
            (Ok(a), Ok(b)) if a == b => {
                // A rename onto a name that was already a link to the staged file (its owner
                // linked it) does nothing and leaves the staged name: the file then had two
                // links, and every later call refused it as a hard link (helper-95).
                unlink_tmp();
            }
            (Ok(_), Ok(_)) => {
                // Under the staged name was another process's file, installed in its place;
                // this publication's bytes are wherever that process moved them.
                neutralize(&staged);
                return Err(refuse(
                    "external_disk_drift",
                    format!(
                        "another process replaced the staged file before it was installed: {} now holds that process's bytes, not this publication's; no checkpoint was created. Check the file, re-initialize a target from it, and publish again.",
                        p.relative_path
                    ),
                ));
            }
            (Err(e), _) | (_, Err(e)) => {
                neutralize(&staged);
                return Err(io_refusal("checking the installed file", e));
            }
        }
        drop(staged);
        let receipt = Receipt {
            synced_path: p.relative_path.clone(),
            disk_sha256: p.content_sha256.clone(),
            bytes_written: bytes.len() as u64,
            content_eol: p.content_eol.clone(),
        };
        // SAFETY: parent is open.
        if unsafe { libc::fsync(parent.as_raw_fd()) } != 0 {
            return Ok(Outcome::DurabilityUncertain(
                receipt,
                last_error().to_string(),
            ));
        }
        Ok(Outcome::Installed(Installed {
            receipt,
            parent,
            lease,
        }))
    }

    /// Test hook point between installation and the caller's COMMIT.
    pub fn before_commit(&self) {
        self.hook("before_commit");
    }
}

/// The directories a walk created, each with its parent and identity, newest last.
#[derive(Default)]
struct MadeDirs(Vec<(OwnedFd, CString, (libc::dev_t, libc::ino_t))>);

impl MadeDirs {
    /// Removes them, newest first, each only while its name still holds the directory made and
    /// it is empty (`rmdir` refuses a directory holding anything, such as another publication's
    /// file made meanwhile): what is left is as the walk found it.
    fn remove(&mut self) {
        while let Some((parent, name, made)) = self.0.pop() {
            let Ok(st) = stat_at(&parent, &name) else {
                return;
            };
            if (st.st_dev, st.st_ino) != made {
                return;
            }
            // SAFETY: name is NUL-terminated; parent is open.
            if unsafe { libc::unlinkat(parent.as_raw_fd(), name.as_ptr(), libc::AT_REMOVEDIR) } != 0
            {
                return;
            }
        }
    }
}

/// A staged file a publication gives up: emptied and unreadable to others, through its
/// descriptor (its name may be anywhere by now). Its owner stays the replaced file's: handing
/// it back to root gave whoever had moved it a root-owned file, into which a descriptor kept
/// open could still write (helper-95). Best effort: a step that fails leaves the ones before it
/// done, and the refusal stands either way.
fn neutralize(staged: &std::fs::File) {
    let fd = staged.as_raw_fd();
    // SAFETY: fd is open for the call; each function only reads it.
    unsafe {
        libc::fchmod(fd, 0o600);
        libc::ftruncate(fd, 0);
    }
}

impl Installed {
    /// Closes the parent directory handle, checking the close, then releases the lease.
    pub fn finish(self) -> Result<(), String> {
        let fd = self.parent.into_raw_fd();
        // SAFETY: fd was owned by `parent` and is closed exactly once here.
        let rc = unsafe { libc::close(fd) };
        let r = if rc != 0 {
            Err(last_error().to_string())
        } else {
            Ok(())
        };
        drop(self.lease);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Contract "Workspace filesystem contract": escapes, absolute paths and reserved or
    /// ambiguous components are refused before any IO.
    #[test]
    fn path_validation() {
        assert_eq!(validate("a/b.txt").unwrap(), vec!["a", "b.txt"]);
        let code = |p: &str| validate(p).err().map(|r| r.code);
        assert_eq!(code("../x"), Some("workspace_path_escape"));
        assert_eq!(code("a/../../x"), Some("workspace_path_escape"));
        assert_eq!(code("/etc/passwd"), Some("workspace_path_absolute"));
        assert_eq!(code("a//b"), Some("workspace_path_ambiguous"));
        // Components within NAME_MAX, the whole over the extension's filename limit.
        let long = vec!["d".repeat(255); 17].join("/");
        assert_eq!(long.len(), 4_351);
        assert_eq!(code(&long), Some("workspace_path_invalid"));
        assert!(validate(&long[..4_095]).is_ok());
        assert_eq!(code("./a"), Some("workspace_path_ambiguous"));
        assert_eq!(code("a/"), Some("workspace_path_ambiguous"));
        assert_eq!(code(""), Some("workspace_path_invalid"));
        assert_eq!(code("a\\b"), Some("workspace_path_invalid"));
        assert_eq!(code("a\nb"), Some("workspace_path_invalid"));
        assert_eq!(code(&"x".repeat(256)), Some("workspace_path_invalid"));
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pd-wsu-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("root")).unwrap();
        d
    }

    fn open(base: &Path, reserved: &[&str]) -> Workspace {
        let key = BindingKey::load_or_create(&base.join("root/keys/workspace.key")).unwrap();
        let reserved = reserved.iter().map(|s| s.to_string()).collect();
        Workspace::open(&base.join("root"), key, reserved, None).unwrap()
    }

    const DEFAULT_RESERVED: [&str; 3] = crate::config::DEFAULT_WORKSPACE_RESERVED;

    /// A publication of `rel` from `baseline` to `content`, bound by `ws` (a valid proof).
    fn publication(ws: &Workspace, rel: &str, baseline: &[u8], content: &str) -> Publication {
        let b = ws.binding(rel).unwrap();
        Publication {
            root_device: ws.device,
            root_inode: ws.inode,
            relative_path: rel.into(),
            baseline_sha256: sha256_hex(baseline),
            baseline_bytes: Some(baseline.len() as u64),
            content: content.into(),
            content_eol: "lf".into(),
            content_sha256: sha256_hex(content.as_bytes()),
            binding_nonce: b["nonce"].as_str().map(str::to_owned),
            binding_proof: b["proof"].as_str().map(str::to_owned),
            may_create: false,
        }
    }

    fn publish_code(ws: &Workspace, p: &Publication) -> Result<(), &'static str> {
        match ws.publish(p) {
            Outcome::Installed(i) => {
                i.finish().unwrap();
                Ok(())
            }
            Outcome::Rejected(r) => Err(r.code),
            Outcome::DurabilityUncertain(..) => panic!("durability uncertain"),
        }
    }

    /// Issue 15 item 3, "Reserved paths": .git/.hg/.svn components (any case), staging files
    /// and the key file under the root are refused at import and at publication, before any IO
    /// on them; PATCHDIFF_WORKSPACE_RESERVED empty reserves no component but still the
    /// front end's own files.
    #[test]
    fn reserved_paths_are_never_imported_or_published() {
        let base = scratch("reserved");
        let root = base.join("root");
        for d in [".git", "sub/.GIT", ".hg", "x/.svn"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for f in [
            ".git/config",
            "sub/.GIT/x",
            ".hg/hgrc",
            "x/.svn/entries",
            ".patchdiff-1-00.tmp",
            ".a.txt.patchdiff-1-2.tmp",
            "ok.txt",
        ] {
            std::fs::write(root.join(f), "x\n").unwrap();
        }
        let ws = open(&base, &DEFAULT_RESERVED);
        for f in [
            ".git/config",
            "sub/.GIT/x",
            ".hg/hgrc",
            "x/.svn/entries",
            ".git/new/dir/f",
            ".patchdiff-1-00.tmp",
            ".a.txt.patchdiff-1-2.tmp",
            "keys/workspace.key",
        ] {
            assert_eq!(
                ws.import(f).err().map(|r| r.code),
                Some("workspace_path_reserved"),
                "{f}"
            );
            let p = publication(&ws, f, b"x\n", "planted\n");
            assert_eq!(publish_code(&ws, &p), Err("workspace_path_reserved"), "{f}");
        }
        assert!(!root.join(".git/new").exists());
        assert_eq!(std::fs::read(root.join(".git/config")).unwrap(), b"x\n");
        assert_eq!(ws.import("ok.txt").unwrap(), "x\n");
        let none = open(&base, &[]);
        assert_eq!(none.import(".git/config").unwrap(), "x\n");
        for f in [".patchdiff-1-00.tmp", "keys/workspace.key"] {
            assert_eq!(
                none.import(f).err().map(|r| r.code),
                Some("workspace_path_reserved"),
                "{f}"
            );
        }
        let custom = open(&base, &["node_modules"]);
        std::fs::create_dir_all(root.join("a/Node_Modules")).unwrap();
        std::fs::write(root.join("a/Node_Modules/m.js"), "m\n").unwrap();
        assert_eq!(
            custom.import("a/Node_Modules/m.js").err().map(|r| r.code),
            Some("workspace_path_reserved")
        );
        assert_eq!(custom.import(".git/config").unwrap(), "x\n");
        let _ = std::fs::remove_dir_all(&base);
    }

    /// A component under `root` holding a file `config` ("x\n") for each spelling, so that an
    /// import or publication not refused would reach a real file.
    fn plant(root: &Path, spellings: &[&str]) {
        for d in spellings {
            std::fs::create_dir_all(root.join(d)).unwrap();
            std::fs::write(root.join(d).join("config"), "x\n").unwrap();
        }
    }

    /// `rel` is refused as reserved at import and at publication, and its file is unchanged.
    fn assert_reserved(ws: &Workspace, root: &Path, rel: &str) {
        let got = ws.import(rel);
        assert_eq!(
            got.as_ref().err().map(|r| r.code),
            Some("workspace_path_reserved"),
            "{rel:?} imported: {got:?}"
        );
        let p = publication(ws, rel, b"x\n", "planted\n");
        assert_eq!(
            publish_code(ws, &p),
            Err("workspace_path_reserved"),
            "{rel:?}"
        );
        assert_eq!(std::fs::read(root.join(rel)).unwrap(), b"x\n", "{rel:?}");
    }

    /// `rel` ("x\n" on disk) is imported and published.
    fn assert_not_reserved(ws: &Workspace, root: &Path, rel: &str) {
        assert_eq!(ws.import(rel).as_deref(), Ok("x\n"), "{rel:?}");
        let p = publication(ws, rel, b"x\n", "y\n");
        assert_eq!(publish_code(ws, &p), Ok(()), "{rel:?}");
        assert_eq!(std::fs::read(root.join(rel)).unwrap(), b"y\n", "{rel:?}");
    }

    /// docs/workspace.md, "Reserved paths": a component is reserved when a file system that
    /// folds names could resolve it to a reserved name (git's CVE-2014-9390 class): the name
    /// with default-ignorable code points inserted (HFS+ drops them), in another case under
    /// Unicode full case folding (`ſ` is `s`), with trailing dots and spaces (NTFS drops them),
    /// or its NTFS 8.3 short name (`git~1`). Each is refused at import and at publication, and
    /// its file is left as it is. Names that only look alike are not reserved.
    #[test]
    fn reserved_names_are_refused_in_every_spelling_that_reaches_them() {
        let base = scratch("spellings");
        let root = base.join("root");
        let refused = [
            // Default-ignorable code points, where HFS+ ignores them and elsewhere.
            ".g\u{200c}it",
            ".gi\u{200d}t",
            "\u{200e}.git",
            ".git\u{200f}",
            ".g\u{202a}it",
            ".g\u{202e}it",
            ".g\u{206a}it",
            ".gi\u{206f}t",
            "\u{feff}.git",
            ".\u{00ad}git",
            ".git\u{034f}",
            ".g\u{200b}it",
            ".g\u{2060}it",
            ".git\u{fe0f}",
            ".git\u{e0001}",
            ".h\u{180e}g",
            // Full case folding: LONG S is s, KELVIN SIGN is k (not in these names).
            ".\u{17f}vn",
            ".\u{17f}VN",
            ".GiT",
            // Upper-cased as NTFS does: the dotless i is I.
            ".g\u{131}t",
            // Trailing dots and spaces.
            ".git.",
            ".git ",
            ".git. .",
            ".hg..",
            ".Git\u{200c}. ",
            // NTFS 8.3 short names.
            "git~1",
            "GIT~2",
            "Git~12",
            "git~1.",
            "svn~1",
            "hg~1",
            "\u{17f}vn~3",
            // NTFS stream names: the directory itself (git's CVE-2019-1352).
            ".git::$INDEX_ALLOCATION",
            ".git:$DATA",
            ".GIT. ::$INDEX_ALLOCATION",
            "git~1::$INDEX_ALLOCATION",
        ];
        let accepted = [
            "\u{e9}.md",
            "e\u{301}.md",
            ".gitignore",
            ".github",
            "git~1x",
            "git~",
            "git~a",
            "gi~1",
            ".git~1",
            "git1",
            ".gits",
            ".g.it",
            ".gi t",
            "\u{200b}",
            ".g\u{130}t",
            ".gjt",
            "a:.git",
            ".gitx:$DATA",
        ];
        // The table is sorted and disjoint, so its binary search finds every range's ends.
        assert!(DEFAULT_IGNORABLE.windows(2).all(|w| w[0].1 < w[1].0));
        for (lo, hi) in DEFAULT_IGNORABLE {
            assert!(is_default_ignorable(lo) && is_default_ignorable(hi));
        }
        assert!(!is_default_ignorable('\u{200a}') && !is_default_ignorable('\u{e1000}'));
        plant(&root, &refused);
        plant(&root.join("sub"), &refused);
        plant(&root, &accepted);
        std::fs::create_dir_all(root.join("sub/x")).unwrap();
        let ws = open(&base, &DEFAULT_RESERVED);
        for d in refused {
            assert_reserved(&ws, &root, &format!("{d}/config"));
            assert_reserved(&ws, &root, &format!("sub/{d}/config"));
            // Never created by a publication either.
            let p = Publication {
                may_create: true,
                ..publication(&ws, &format!("sub/x/{d}/new"), b"", "planted\n")
            };
            assert_eq!(
                publish_code(&ws, &p),
                Err("workspace_path_reserved"),
                "{d:?}"
            );
            assert!(!root.join("sub/x").join(d).exists(), "{d:?}");
        }
        for d in accepted {
            assert_not_reserved(&ws, &root, &format!("{d}/config"));
        }
        // The message names the component as written and the reserved name it reaches.
        let r = ws.import(".\u{17f}vn/config").unwrap_err();
        assert!(
            r.detail.contains("\".\u{17f}vn\"") && r.detail.contains("\".svn\""),
            "{}",
            r.detail
        );
        // An invisible code point is shown escaped.
        let r = ws.import(".g\u{200c}it/config").unwrap_err();
        assert!(
            r.detail.contains("\".g\\u{200c}it\"") && r.detail.contains("\".git\""),
            "{}",
            r.detail
        );
        let r = ws.import("GIT~2/config").unwrap_err();
        assert!(
            r.detail.contains("\"GIT~2\"")
                && r.detail.contains("\".git\"")
                && r.detail.contains("8.3"),
            "{}",
            r.detail
        );
        let _ = std::fs::remove_dir_all(&base);
    }

    /// docs/workspace.md, "Reserved paths": while `.git` is reserved, so is a file named `HEAD`
    /// in any spelling that reaches it (helper-114: `HEAD`, `config`, `objects/x` and `refs/x`
    /// made a bare repository whose `core.fsmonitor` ran at the next `git status` there). It is
    /// neither imported nor published, nor created; a directory of that name and names that
    /// only begin with it are not reserved, nor is `HEAD` when the list is empty.
    #[test]
    fn a_file_named_head_is_reserved_with_git() {
        let base = scratch("head");
        let root = base.join("root");
        std::fs::create_dir_all(root.join("bare/objects")).unwrap();
        std::fs::create_dir_all(root.join("bare/refs")).unwrap();
        for f in ["HEAD", "head", "He\u{200c}ad", "HEAD.", "HEAD::$DATA"] {
            std::fs::write(root.join("bare").join(f), "x\n").unwrap();
        }
        for d in ["HEAD", "HEAD.txt", "HEADS"] {
            std::fs::create_dir_all(root.join("ok").join(d)).unwrap();
            std::fs::write(root.join("ok").join(d).join("config"), "x\n").unwrap();
            std::fs::write(root.join("ok").join(format!("{d}x")), "x\n").unwrap();
        }
        let ws = open(&base, &DEFAULT_RESERVED);
        for f in ["HEAD", "head", "He\u{200c}ad", "HEAD.", "HEAD::$DATA"] {
            assert_reserved(&ws, &root, &format!("bare/{f}"));
        }
        let p = Publication {
            may_create: true,
            ..publication(&ws, "new/HEAD", b"", "ref: refs/heads/main\n")
        };
        assert_eq!(publish_code(&ws, &p), Err("workspace_path_reserved"));
        assert!(!root.join("new").exists());
        for d in ["HEAD", "HEAD.txt", "HEADS"] {
            assert_not_reserved(&ws, &root, &format!("ok/{d}/config"));
            assert_not_reserved(&ws, &root, &format!("ok/{d}x"));
        }
        let r = ws.import("bare/head").unwrap_err();
        assert!(
            r.detail.contains("\"head\"") && r.detail.contains("bare git repository"),
            "{}",
            r.detail
        );
        let none = open(&base, &[]);
        assert_not_reserved(&none, &root, "bare/HEAD");
        let _ = std::fs::remove_dir_all(&base);
    }

    /// docs/workspace.md, "Reserved paths": a configured reserved name gets the same skeleton,
    /// so a name with non-ASCII letters is reserved in its other cases, foldings and
    /// normalization forms (`Straße` as `STRASSE`, `café` as `CAFE\u{301}`), and its short name.
    #[test]
    fn a_configured_reserved_name_is_compared_by_its_skeleton() {
        let base = scratch("custom-skeleton");
        let root = base.join("root");
        let refused = [
            "Stra\u{df}e",
            "STRASSE",
            "strasse",
            "stra\u{17f}\u{17f}e",
            "STRA\u{1e9e}E",
            "Strasse\u{200d}.",
            "strass~1",
            "caf\u{e9}",
            "cafe\u{301}",
            "CAFE\u{301}",
            "CAF\u{c9}",
            "\u{212a}ey",
            "key",
            "KEY ",
            "key~4",
        ];
        let accepted = ["strase", "straße2", "cafe", "caf\u{e9}s", "keys", "ey"];
        plant(&root, &refused);
        plant(&root, &accepted);
        let ws = open(&base, &["Stra\u{df}e", "caf\u{e9}", "\u{212a}ey"]);
        for d in refused {
            assert_reserved(&ws, &root, &format!("{d}/config"));
        }
        for d in accepted {
            assert_not_reserved(&ws, &root, &format!("{d}/config"));
        }
        // The configured names no longer reserve .git.
        plant(&root, &[".git"]);
        assert_not_reserved(&ws, &root, ".git/config");
        let _ = std::fs::remove_dir_all(&base);
    }

    /// docs/workspace.md, "Publication": a file whose mode has no write bit (0444) is not
    /// replaced, also by a root front end: `workspace_file_read_only` before anything is staged,
    /// the file's bytes, mode and inode unchanged and no staging file left. Once writable it
    /// publishes.
    #[test]
    fn a_read_only_file_is_not_replaced() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let base = scratch("readonly");
        let root = base.join("root");
        std::fs::create_dir_all(root.join("d")).unwrap();
        let f = root.join("d/ro.txt");
        std::fs::write(&f, "v1\n").unwrap();
        let ws = open(&base, &DEFAULT_RESERVED);
        for mode in [0o444, 0o400, 0o555, 0o000] {
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
            let ino = std::fs::metadata(&f).unwrap().ino();
            let p = publication(&ws, "d/ro.txt", b"v1\n", "v2\n");
            let Outcome::Rejected(r) = ws.publish(&p) else {
                panic!("a {mode:o} file was replaced");
            };
            assert_eq!(r.code, "workspace_file_read_only", "{mode:o}");
            assert!(
                r.detail.contains(&format!("mode {mode:04o}")),
                "{}",
                r.detail
            );
            let meta = std::fs::metadata(&f).unwrap();
            assert_eq!(std::fs::read(&f).unwrap(), b"v1\n", "{mode:o}");
            assert_eq!(meta.permissions().mode() & 0o7777, mode, "{mode:o}");
            assert_eq!(meta.ino(), ino, "{mode:o}");
            let names: Vec<_> = std::fs::read_dir(root.join("d"))
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(names, ["ro.txt"], "{mode:o}");
        }
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let p = publication(&ws, "d/ro.txt", b"v1\n", "v2\n");
        assert_eq!(publish_code(&ws, &p), Ok(()));
        assert_eq!(std::fs::read(&f).unwrap(), b"v2\n");
        assert_eq!(
            std::fs::metadata(&f).unwrap().permissions().mode() & 0o7777,
            0o644
        );
        // A write bit for others only: the mode has one, so the access check decides; it lets
        // root write, not the owner of a 0464 file.
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o464)).unwrap();
        let p = publication(&ws, "d/ro.txt", b"v2\n", "v3\n");
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            assert_eq!(publish_code(&ws, &p), Ok(()));
        } else {
            assert_eq!(publish_code(&ws, &p), Err("workspace_file_read_only"));
            assert_eq!(std::fs::read(&f).unwrap(), b"v2\n");
        }
        let _ = std::fs::remove_dir_all(&base);
    }

    /// Issue 15 item 3, "Binding proof": a publication whose binding has no proof, a wrong one,
    /// or a proof of another path, root or key is refused before any file-system access: no
    /// directory is created, no file written.
    #[test]
    fn an_unproven_binding_touches_no_file() {
        let base = scratch("proof");
        let root = base.join("root");
        std::fs::write(root.join("a.txt"), "a\n").unwrap();
        let ws = open(&base, &DEFAULT_RESERVED);
        // A new file (as the files profile creates one), so that only the proof stands in the way.
        let good = Publication {
            may_create: true,
            ..publication(&ws, "deep/new/dir/planted.sh", b"", "echo pwned\n")
        };
        let mut cases = vec![];
        let mut p = good.clone();
        p.binding_nonce = None;
        p.binding_proof = None;
        cases.push(p);
        let mut p = good.clone();
        p.binding_proof = Some("0".repeat(64));
        cases.push(p);
        let mut p = good.clone();
        p.binding_nonce = Some("1".repeat(32));
        cases.push(p);
        let mut p = good.clone();
        p.relative_path = "a.txt".into();
        p.baseline_sha256 = sha256_hex(b"a\n");
        cases.push(p);
        let mut p = good.clone();
        p.root_inode += 1;
        cases.push(p);
        let other_key = BindingKey::from_bytes([1; 32]);
        let mut p = good.clone();
        let nonce = crate::binding::fresh_nonce().unwrap();
        p.binding_proof = Some(other_key.proof(ws.device, ws.inode, &p.relative_path, &nonce));
        p.binding_nonce = Some(nonce);
        cases.push(p);
        for p in &cases {
            assert_eq!(
                publish_code(&ws, p),
                Err("workspace_binding_unverified"),
                "{p:?}"
            );
        }
        assert!(!root.join("deep").exists());
        assert_eq!(std::fs::read(root.join("a.txt")).unwrap(), b"a\n");
        // The same publication with its proof is installed.
        assert_eq!(publish_code(&ws, &good), Ok(()));
        assert_eq!(
            std::fs::read(root.join("deep/new/dir/planted.sh")).unwrap(),
            b"echo pwned\n"
        );
        let _ = std::fs::remove_dir_all(&base);
    }

    /// docs/workspace.md, "Install": the disk must hold the baseline or the bytes being
    /// published. A file imported from the disk and then deleted or moved (or its directory
    /// removed) holds neither: `external_disk_drift`, and nothing is created, no directory
    /// either. Only a publication that may create the file (the files profile's new file)
    /// creates it.
    #[test]
    fn a_bound_file_gone_from_disk_is_not_re_created() {
        let base = scratch("gone");
        let root = base.join("root");
        std::fs::create_dir_all(root.join("dir/sub")).unwrap();
        std::fs::write(root.join("top.sh"), "echo hi\n").unwrap();
        std::fs::write(root.join("dir/sub/f.txt"), "a\n").unwrap();
        let ws = open(&base, &DEFAULT_RESERVED);
        let top = publication(&ws, "top.sh", b"echo hi\n", "echo bye\n");
        let deep = publication(&ws, "dir/sub/f.txt", b"a\n", "b\n");
        std::fs::rename(root.join("top.sh"), root.join("moved.sh")).unwrap();
        std::fs::remove_dir_all(root.join("dir")).unwrap();
        for p in [&top, &deep] {
            assert_eq!(publish_code(&ws, p), Err("external_disk_drift"), "{p:?}");
        }
        assert!(!root.join("top.sh").exists() && !root.join("dir").exists());
        assert_eq!(std::fs::read(root.join("moved.sh")).unwrap(), b"echo hi\n");
        // Even unedited (the baseline itself), a deleted file stays deleted.
        let same = publication(&ws, "top.sh", b"echo hi\n", "echo hi\n");
        assert_eq!(publish_code(&ws, &same), Err("external_disk_drift"));
        assert!(!root.join("top.sh").exists());
        let created = Publication {
            may_create: true,
            ..deep.clone()
        };
        assert_eq!(publish_code(&ws, &created), Ok(()));
        assert_eq!(std::fs::read(root.join("dir/sub/f.txt")).unwrap(), b"b\n");
        let _ = std::fs::remove_dir_all(&base);
    }

    /// Issue 15 item 3, "Publication": the replaced file keeps its mode less set-user-ID and
    /// set-group-ID; a hard-linked file is refused at import and at publication.
    #[test]
    fn set_id_bits_are_dropped_and_hard_links_refused() {
        use std::os::unix::fs::PermissionsExt;
        let base = scratch("mode");
        let root = base.join("root");
        let f = root.join("tool.sh");
        std::fs::write(&f, "v1\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o6755)).unwrap();
        let ws = open(&base, &DEFAULT_RESERVED);
        assert_eq!(ws.import("tool.sh").unwrap(), "v1\n");
        assert_eq!(
            publish_code(&ws, &publication(&ws, "tool.sh", b"v1\n", "v2\n")),
            Ok(())
        );
        let meta = std::fs::metadata(&f).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, 0o755);
        assert_eq!(std::fs::read(&f).unwrap(), b"v2\n");

        std::fs::write(base.join("outside.txt"), "outside\n").unwrap();
        std::fs::hard_link(base.join("outside.txt"), root.join("linked.txt")).unwrap();
        assert_eq!(
            ws.import("linked.txt").err().map(|r| r.code),
            Some("workspace_hard_link")
        );
        let p = publication(&ws, "linked.txt", b"outside\n", "changed\n");
        assert_eq!(publish_code(&ws, &p), Err("workspace_hard_link"));
        assert_eq!(
            std::fs::read(base.join("outside.txt")).unwrap(),
            b"outside\n"
        );
        let _ = std::fs::remove_dir_all(&base);
    }

    /// Issue 15 item 3, "Bounded disk reads": a 64 GiB sparse file in place of the published
    /// file is drift, known from its size in milliseconds, and left untouched.
    #[test]
    fn a_huge_sparse_file_is_drift_without_being_read() {
        let base = scratch("sparse");
        let root = base.join("root");
        std::fs::write(root.join("s.txt"), "small\n").unwrap();
        let ws = open(&base, &DEFAULT_RESERVED);
        let p = publication(&ws, "s.txt", b"small\n", "edited\n");
        let f = std::fs::File::create(root.join("s.txt")).unwrap();
        f.set_len(64 << 30).unwrap();
        drop(f);
        let t = Instant::now();
        assert_eq!(publish_code(&ws, &p), Err("external_disk_drift"));
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        assert_eq!(
            std::fs::metadata(root.join("s.txt")).unwrap().len(),
            64 << 30
        );
        assert_eq!(
            ws.import("s.txt").err().map(|r| r.code),
            Some("workspace_file_too_large")
        );
        let _ = std::fs::remove_dir_all(&base);
    }

    /// Issue 15 item 3, "Bounded disk reads": the bound is the baseline's recorded length, not
    /// the import limit, so a file published above 8 MiB can later be replaced by smaller
    /// content; one byte more than the baseline is drift.
    #[test]
    fn a_baseline_above_the_import_limit_is_read_to_its_length() {
        let base = scratch("bigbaseline");
        let root = base.join("root");
        let big = vec![b'x'; IMPORT_MAX_BYTES as usize + 4096];
        std::fs::write(root.join("b.txt"), &big).unwrap();
        let ws = open(&base, &DEFAULT_RESERVED);
        let p = publication(&ws, "b.txt", &big, "small now\n");
        let mut grown = big.clone();
        grown.push(b'x');
        std::fs::write(root.join("b.txt"), &grown).unwrap();
        assert_eq!(publish_code(&ws, &p), Err("external_disk_drift"));
        std::fs::write(root.join("b.txt"), &big).unwrap();
        assert_eq!(publish_code(&ws, &p), Ok(()));
        assert_eq!(std::fs::read(root.join("b.txt")).unwrap(), b"small now\n");
        let _ = std::fs::remove_dir_all(&base);
    }

    /// Issue 15 item 3, "Staging names": the staged file's name holds none of the target's, so
    /// a target whose name is as long as the file system allows (80 CJK characters, 244 bytes)
    /// publishes.
    #[test]
    fn long_names_publish() {
        let n = staging_name().unwrap();
        assert!(is_staging_name(&n) && n.len() <= 48, "{n}");
        assert_ne!(n, staging_name().unwrap());
        let base = scratch("long");
        let root = base.join("root");
        let name = format!("{}.txt", "\u{6f22}".repeat(80));
        assert!(name.len() > 200 && name.len() <= 255);
        std::fs::write(root.join(&name), "one\n").unwrap();
        let ws = open(&base, &DEFAULT_RESERVED);
        assert_eq!(ws.import(&name).unwrap(), "one\n");
        assert_eq!(
            publish_code(&ws, &publication(&ws, &name, b"one\n", "two\n")),
            Ok(())
        );
        assert_eq!(std::fs::read(root.join(&name)).unwrap(), b"two\n");
        // The file and the key's directory: no staged file is left behind.
        assert_eq!(std::fs::read_dir(&root).unwrap().count(), 2);
        let _ = std::fs::remove_dir_all(&base);
    }

    /// A POSIX access ACL as its extended attribute holds it: version 2, then (tag, permissions,
    /// id) per entry, in tag order.
    fn acl_xattr(entries: &[(u16, u16, u32)]) -> Vec<u8> {
        let mut v = 2u32.to_le_bytes().to_vec();
        for (tag, perm, id) in entries {
            v.extend(tag.to_le_bytes());
            v.extend(perm.to_le_bytes());
            v.extend(id.to_le_bytes());
        }
        v
    }

    fn xattr_of(path: &Path, name: &str) -> Option<Vec<u8>> {
        let p = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        let n = CString::new(name).unwrap();
        let mut buf = vec![0u8; 4096];
        // SAFETY: both names are NUL-terminated; buf is valid for its length.
        let len =
            unsafe { libc::lgetxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        (len >= 0).then(|| buf[..len as usize].to_vec())
    }

    fn set_xattr(path: &Path, name: &str, value: &[u8]) {
        let p = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        let n = CString::new(name).unwrap();
        // SAFETY: as above.
        let rc = unsafe {
            libc::lsetxattr(
                p.as_ptr(),
                n.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        };
        assert_eq!(rc, 0, "setting {name}: {}", last_error());
    }

    /// docs/workspace.md, "Publication": a replaced file keeps its access ACL and its `user.`
    /// attributes, so its rights neither widen nor narrow (helper-50: the ACL's mask, taken as
    /// the group's bits, opened the file to its group and closed it to the user the ACL named),
    /// and a file without an ACL gets none from its directory's default ACL.
    #[test]
    fn acls_and_user_attributes_are_kept() {
        use std::os::unix::fs::PermissionsExt;
        const UNDEFINED: u32 = u32::MAX;
        let base = scratch("acl");
        let root = base.join("root");
        let f = root.join("acl.txt");
        std::fs::write(&f, "v1\n").unwrap();
        // user::rw- user:1234:rw- group::--- mask::rw- other::---
        let acl = acl_xattr(&[
            (0x01, 6, UNDEFINED),
            (0x02, 6, 1234),
            (0x04, 0, UNDEFINED),
            (0x10, 6, UNDEFINED),
            (0x20, 0, UNDEFINED),
        ]);
        set_xattr(&f, "system.posix_acl_access", &acl);
        set_xattr(&f, "user.tag", b"kept");
        let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o660, "the ACL's mask is the mode's group bits");
        let ws = open(&base, &DEFAULT_RESERVED);
        assert_eq!(
            publish_code(&ws, &publication(&ws, "acl.txt", b"v1\n", "v2\n")),
            Ok(())
        );
        assert_eq!(std::fs::read(&f).unwrap(), b"v2\n");
        assert_eq!(
            xattr_of(&f, "system.posix_acl_access").as_deref(),
            Some(&acl[..])
        );
        assert_eq!(xattr_of(&f, "user.tag").as_deref(), Some(&b"kept"[..]));
        assert_eq!(
            std::fs::metadata(&f).unwrap().permissions().mode() & 0o7777,
            0o660
        );
        // A directory whose default ACL would give a new file rights of its own.
        let d = root.join("inherits");
        std::fs::create_dir(&d).unwrap();
        let g = d.join("plain.txt");
        std::fs::write(&g, "v1\n").unwrap();
        std::fs::set_permissions(&g, std::fs::Permissions::from_mode(0o640)).unwrap();
        set_xattr(
            &d,
            "system.posix_acl_default",
            &acl_xattr(&[
                (0x01, 7, UNDEFINED),
                (0x02, 7, 4321),
                (0x04, 7, UNDEFINED),
                (0x10, 7, UNDEFINED),
                (0x20, 7, UNDEFINED),
            ]),
        );
        assert_eq!(
            publish_code(
                &ws,
                &publication(&ws, "inherits/plain.txt", b"v1\n", "v2\n")
            ),
            Ok(())
        );
        assert_eq!(xattr_of(&g, "system.posix_acl_access"), None);
        assert_eq!(
            std::fs::metadata(&g).unwrap().permissions().mode() & 0o7777,
            0o640
        );
        let _ = std::fs::remove_dir_all(&base);
    }

    /// A workspace `name` whose root holds `s.txt` (`v1`, prepared by `prepare`), publishing `v2`
    /// over it while `act(root, staged name)` runs at the pause after staging; the base directory
    /// and the publication's result.
    fn publish_while_staged(
        name: &str,
        prepare: impl FnOnce(&Path),
        act: impl FnOnce(&Path, &str) + Send,
    ) -> (PathBuf, Result<(), &'static str>) {
        let base = scratch(name);
        let (root, hooks) = (base.join("root"), base.join("hooks"));
        std::fs::create_dir_all(&hooks).unwrap();
        std::fs::write(root.join("s.txt"), "v1\n").unwrap();
        prepare(&base);
        let ws = hooked(&base, "after_staging");
        let p = publication(&ws, "s.txt", b"v1\n", "v2\n");
        let result = publish_paused(&ws, &p, &hooks, || {
            act(&root, &staging_name_in(&root).expect("a staged file"))
        });
        (base, result)
    }

    /// The workspace `<base>/root` with the test hook at `point` in `<base>/hooks`.
    fn hooked(base: &Path, point: &str) -> Workspace {
        let key = BindingKey::load_or_create(&base.join("root/keys/workspace.key")).unwrap();
        let reserved = DEFAULT_RESERVED.iter().map(|s| s.to_string()).collect();
        let hook = Hook {
            point: point.into(),
            dir: base.join("hooks"),
        };
        Workspace::open(&base.join("root"), key, reserved, Some(hook)).unwrap()
    }

    /// Publishes `p` in a thread of its own, runs `act` while the hook holds it paused, then
    /// lets it go on: its outcome. The hook fires again for the next call.
    fn publish_paused(
        ws: &Workspace,
        p: &Publication,
        hooks: &Path,
        act: impl FnOnce(),
    ) -> Result<(), &'static str> {
        let _ = std::fs::remove_file(hooks.join("paused"));
        let _ = std::fs::remove_file(hooks.join("resume"));
        ws.hook_fired
            .store(false, std::sync::atomic::Ordering::Relaxed);
        std::thread::scope(|scope| {
            let publishing = scope.spawn(|| publish_code(ws, p));
            let deadline = Instant::now() + Duration::from_secs(30);
            while !hooks.join("paused").exists() {
                assert!(Instant::now() < deadline, "the hook never paused");
                std::thread::sleep(Duration::from_millis(5));
            }
            act();
            std::fs::write(hooks.join("resume"), "").unwrap();
            publishing.join().unwrap()
        })
    }

    /// The staging file's name in `dir`, if there is one.
    fn staging_name_in(dir: &Path) -> Option<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .find(|n| is_staging_name(n))
    }

    /// docs/workspace.md, "Publication": the directories a new file's publication made are
    /// removed when it is refused (helper-94: one refused on a full file system left them), but
    /// only while empty: one that holds another file meanwhile stays. Here the refusal is the
    /// lease of the new directory, held by another process while the publication waits for it.
    #[test]
    fn a_refused_new_file_leaves_no_directory_made_for_it() {
        let base = scratch("made-dirs");
        let (root, hooks) = (base.join("root"), base.join("hooks"));
        std::fs::create_dir_all(&hooks).unwrap();
        std::fs::create_dir_all(root.join("old")).unwrap();
        let ws = hooked(&base, "after_walk");
        // The path, a file another process puts meanwhile, the first directory made and removed,
        // and what is left.
        for (rel, other, gone, left) in [
            ("old/new/deeper/f.txt", None, "old/new", "old"),
            ("a/b/f.txt", Some("a/other.txt"), "a/b", "a/other.txt"),
        ] {
            let mut p = publication(&ws, rel, b"", "new\n");
            p.may_create = true;
            let made = root.join(Path::new(rel).parent().unwrap());
            let mut held = None;
            let result = publish_paused(&ws, &p, &hooks, || {
                let dir = std::fs::File::open(&made).unwrap();
                // SAFETY: dir is open.
                let locked = unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
                assert_eq!(locked, 0);
                held = Some(dir);
                if let Some(other) = other {
                    std::fs::write(root.join(other), "another file\n").unwrap();
                }
            });
            drop(held);
            assert_eq!(result, Err("workspace_busy"), "{rel}");
            assert!(!root.join(gone).exists(), "{rel}: {gone} was left");
            assert!(root.join(left).exists(), "{rel}: {left} is gone");
        }
        let _ = std::fs::remove_dir_all(&base);
    }

    /// docs/workspace.md, "Publication": a process that may write the directory and puts a file
    /// of its own under the staged name before the rename does not get a `saved`: the
    /// publication answers `external_disk_drift`, so the caller rolls back (helper-50).
    #[test]
    fn a_staged_file_replaced_before_the_rename_is_not_installed() {
        let (base, result) = publish_while_staged(
            "staged",
            |_| {},
            |root, staged| {
                std::fs::write(root.join("evil.tmp"), "EVIL\n").unwrap();
                std::fs::rename(root.join("evil.tmp"), root.join(staged)).unwrap();
            },
        );
        assert_eq!(result, Err("external_disk_drift"));
        // What the other process wrote is what the disk holds: the answer says so.
        assert_eq!(std::fs::read(base.join("root/s.txt")).unwrap(), b"EVIL\n");
        let _ = std::fs::remove_dir_all(&base);
    }

    /// docs/workspace.md, "Publication" (helper-94): a process that may write the directory and
    /// moves the staged file away before the rename (to anywhere on the filesystem it may write)
    /// gets a refusal, and what it took is empty and unreadable to others: a root front end had
    /// given it the replaced file's owner and mode, and left it with the published bytes.
    #[test]
    fn a_staged_file_taken_away_before_the_rename_is_left_empty_and_unreadable() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        // SAFETY: geteuid has no preconditions and cannot fail.
        let root_user = unsafe { libc::geteuid() } == 0;
        let (base, result) = publish_while_staged(
            "taken",
            |base| {
                std::fs::create_dir_all(base.join("away")).unwrap();
                let s = base.join("root/s.txt");
                std::fs::set_permissions(&s, std::fs::Permissions::from_mode(0o644)).unwrap();
                if root_user {
                    std::os::unix::fs::chown(&s, Some(NOBODY), Some(NOBODY)).unwrap();
                }
            },
            |root, staged| {
                let away = root.parent().unwrap().join("away/taken");
                std::fs::rename(root.join(staged), away).unwrap();
            },
        );
        assert_eq!(result, Err("workspace_io_error"));
        assert_eq!(std::fs::read(base.join("root/s.txt")).unwrap(), b"v1\n");
        let taken = std::fs::metadata(base.join("away/taken")).unwrap();
        assert_eq!((taken.len(), taken.mode() & 0o7777), (0, 0o600));
        if root_user {
            // Not root's: that would hand whoever moved it a root-owned file (helper-95).
            assert_eq!((taken.uid(), taken.gid()), (NOBODY, NOBODY));
        }
        let _ = std::fs::remove_dir_all(&base);
    }

    /// helper-95: a rename onto a name that already links the staged file (its owner linked it
    /// there) does nothing and used to leave the staged name, so the file had two links and every
    /// later call refused it; the publication now removes that name.
    #[test]
    fn a_rename_onto_a_link_of_the_staged_file_leaves_one_link() {
        use std::os::unix::fs::MetadataExt;
        let (base, result) = publish_while_staged(
            "linked",
            |_| {},
            |root, staged| {
                std::fs::hard_link(root.join(staged), root.join("x")).unwrap();
                std::fs::rename(root.join("x"), root.join("s.txt")).unwrap();
            },
        );
        let root = base.join("root");
        assert_eq!(result, Ok(()));
        assert_eq!(staging_name_in(&root), None);
        assert_eq!(std::fs::metadata(root.join("s.txt")).unwrap().nlink(), 1);
        assert_eq!(std::fs::read(root.join("s.txt")).unwrap(), b"v2\n");
        let _ = std::fs::remove_dir_all(&base);
    }

    /// The uid and gid the non-root half of the next test runs as (nobody, nogroup).
    const NOBODY: u32 = 65534;

    /// docs/workspace.md, "Publication": a front end that does not run as root replaces only
    /// its own files, in one of its groups; another user's file, or one of a group it is not in,
    /// is refused with `workspace_file_read_only` before anything is staged, and left as it is
    /// (helper-50: it used to become the front end's, and its owner lost write). Run as root,
    /// this test prepares the files and runs its other half,
    /// [`non_root_publications`], in a process of its own as nobody (setpriv).
    #[test]
    fn a_non_root_front_end_replaces_only_its_own_files() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: preparing files of other users needs root");
            return;
        }
        let base = scratch("nonroot");
        let root = base.join("root");
        let keys = base.join("keys");
        std::fs::create_dir_all(&keys).unwrap();
        for d in [&base, &root] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        let chown = |path: &Path, uid: u32, gid: u32| {
            std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
        };
        chown(&keys, NOBODY, NOBODY);
        for (name, uid, gid, mode) in [
            ("others.txt", 1235, NOBODY, 0o666),
            ("groups.txt", NOBODY, 1236, 0o664),
            ("own.txt", NOBODY, NOBODY, 0o644),
        ] {
            let f = root.join(name);
            std::fs::write(&f, "v1\n").unwrap();
            chown(&f, uid, gid);
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        let before = |name: &str| {
            let m = std::fs::metadata(root.join(name)).unwrap();
            (m.ino(), m.uid(), m.gid(), m.mode())
        };
        let others = before("others.txt");
        let groups = before("groups.txt");
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "workspace::tests::non_root_publications",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("PATCHDIFF_TEST_NON_ROOT_BASE", &base)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{text}");
        for expected in [
            "others.txt: workspace_file_read_only: others.txt belongs to user 1235",
            "groups.txt: workspace_file_read_only: groups.txt belongs to group 1236",
            "own.txt: installed",
        ] {
            assert!(text.contains(expected), "{expected} in:\n{text}");
        }
        assert_eq!(before("others.txt"), others);
        assert_eq!(before("groups.txt"), groups);
        for name in ["others.txt", "groups.txt"] {
            assert_eq!(std::fs::read(root.join(name)).unwrap(), b"v1\n", "{name}");
        }
        assert_eq!(std::fs::read(root.join("own.txt")).unwrap(), b"v2\n");
        let _ = std::fs::remove_dir_all(&base);
    }

    /// The half of [`a_non_root_front_end_replaces_only_its_own_files`] that runs as nobody.
    #[test]
    #[ignore = "run by a_non_root_front_end_replaces_only_its_own_files, as another user"]
    fn non_root_publications() {
        let Some(base) = std::env::var_os("PATCHDIFF_TEST_NON_ROOT_BASE") else {
            return;
        };
        let base = PathBuf::from(base);
        let key = BindingKey::load_or_create(&base.join("keys/workspace.key")).unwrap();
        let reserved = DEFAULT_RESERVED.iter().map(|s| s.to_string()).collect();
        let ws = Workspace::open(&base.join("root"), key, reserved, None).unwrap();
        for name in ["others.txt", "groups.txt", "own.txt"] {
            let p = publication(&ws, name, b"v1\n", "v2\n");
            match ws.publish(&p) {
                Outcome::Installed(i) => {
                    i.finish().unwrap();
                    println!("{name}: installed");
                }
                Outcome::Rejected(r) => println!("{name}: {}: {}", r.code, r.detail),
                Outcome::DurabilityUncertain(..) => println!("{name}: durability uncertain"),
            }
        }
    }

    /// docs/workspace.md, "Import": only a regular file is opened. A FIFO, a socket and a
    /// directory are `workspace_not_regular_file` without being opened for reading (a FIFO
    /// opened so would wait for a writer; a socket cannot be opened and used to answer
    /// `workspace_io_error`), and a symbolic link `workspace_path_symlink`, at import and at
    /// publication.
    #[test]
    fn only_regular_files_are_opened() {
        let base = scratch("special");
        let root = base.join("root");
        let fifo = CString::new(root.join("pipe.txt").as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: the path is NUL-terminated.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        let _socket = std::os::unix::net::UnixListener::bind(root.join("sock.txt")).unwrap();
        std::fs::create_dir(root.join("dir.txt")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", root.join("link.txt")).unwrap();
        let ws = open(&base, &DEFAULT_RESERVED);
        for (name, code) in [
            ("pipe.txt", "workspace_not_regular_file"),
            ("sock.txt", "workspace_not_regular_file"),
            ("dir.txt", "workspace_not_regular_file"),
            ("link.txt", "workspace_path_symlink"),
        ] {
            assert_eq!(ws.import(name).err().map(|r| r.code), Some(code), "{name}");
            let p = publication(&ws, name, b"", "x\n");
            assert_eq!(publish_code(&ws, &p), Err(code), "{name}");
        }
        let _ = std::fs::remove_dir_all(&base);
    }
}
