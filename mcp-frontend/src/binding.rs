//! The workspace binding proof (issue 15 item 3, "Bindings only the importing front end can
//! publish"; docs/workspace.md, "The binding proof").
//!
//! A target's workspace binding (root device and inode, relative path) reaches the database
//! through `patchdiff_initialize_target`, which any SQL caller may call. So the binding alone
//! cannot tell a file this front end imported from one a SQL caller named. The front end holds a
//! secret key no SQL caller sees (a 32-byte file, mode 0600) and, on import, signs the binding
//! with HMAC-SHA256 over a fresh nonce; the extension stores the nonce and proof and hands them
//! back in `workspace_publication`, and a publication whose proof does not verify touches no file.
//!
//! The signed message is, with `\0` (NUL) between fields (a path cannot contain NUL, and the
//! other fields are decimal digits or hex):
//!
//! ```text
//! patchdiff-workspace-binding/1 \0 <root_device decimal> \0 <root_inode decimal> \0 <relative_path UTF-8> \0 <nonce: 32 lowercase hex>
//! ```
//!
//! (spaces for reading only: the NUL bytes are the only separators).

use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// The version tag that opens every signed message; a change of encoding changes the tag.
pub const MESSAGE_TAG: &str = "patchdiff-workspace-binding/1";

/// The key's exact length in bytes.
pub const KEY_BYTES: usize = 32;

/// The nonce's length in bytes (32 lowercase hex characters on the wire).
pub const NONCE_BYTES: usize = 16;

const BLOCK: usize = 64;

/// HMAC-SHA256 (RFC 2104) over sha2.
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| k.map(|b| b ^ byte);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Equal in time that depends only on the lengths, not on where the first difference is.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// The signed message (see the module documentation).
pub fn message(root_device: u64, root_inode: u64, relative_path: &str, nonce: &str) -> Vec<u8> {
    format!("{MESSAGE_TAG}\0{root_device}\0{root_inode}\0{relative_path}\0{nonce}").into_bytes()
}

/// Fills `buf` from the kernel's random source: getrandom(2), or /dev/urandom where the
/// system call does not exist.
pub fn random_bytes(buf: &mut [u8]) -> Result<(), String> {
    let mut filled = 0;
    while filled < buf.len() {
        let rest = &mut buf[filled..];
        // SAFETY: rest is a valid writable buffer of rest.len() bytes.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ENOSYS) => {
                    return std::fs::File::open("/dev/urandom")
                        .and_then(|mut f| f.read_exact(rest))
                        .map_err(|e| format!("reading /dev/urandom: {e}"));
                }
                _ => return Err(format!("getrandom: {e}")),
            }
        }
        filled += n as usize;
    }
    Ok(())
}

/// A fresh nonce: 16 random bytes as 32 lowercase hex characters.
pub fn fresh_nonce() -> Result<String, String> {
    let mut n = [0u8; NONCE_BYTES];
    random_bytes(&mut n)?;
    Ok(hex(&n))
}

fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The front end's binding key, loaded (or created) once at start-up.
pub struct BindingKey {
    key: [u8; KEY_BYTES],
    /// The key file's device and inode: the file is reserved if it lies under the root.
    pub file_identity: (u64, u64),
    pub path: PathBuf,
}

impl std::fmt::Debug for BindingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key itself.
        f.debug_struct("BindingKey")
            .field("path", &self.path)
            .field("file_identity", &self.file_identity)
            .finish_non_exhaustive()
    }
}

fn fstat(fd: &OwnedFd) -> std::io::Result<libc::stat> {
    // SAFETY: `st` is written by fstat before it is read; fd is open.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd.as_raw_fd(), &mut st) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(st)
    }
}

fn open_raw(path: &Path, flags: libc::c_int, mode: u32) -> std::io::Result<OwnedFd> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: c is NUL-terminated; a non-negative result is a descriptor we now own.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, mode) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is fresh and owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl BindingKey {
    /// A key from its bytes (tests).
    pub fn from_bytes(key: [u8; KEY_BYTES]) -> BindingKey {
        BindingKey {
            key,
            file_identity: (u64::MAX, u64::MAX),
            path: PathBuf::new(),
        }
    }

    /// Loads the key file at `path`, creating it first if it does not exist (32 random bytes,
    /// mode 0600, parent directories 0700; it appears whole or not at all, so two front ends
    /// starting at once agree on one key). An existing file is used only if it is a regular
    /// file owned by this effective user, with no group or other permission, of exactly 32
    /// bytes; anything else refuses start-up.
    pub fn load_or_create(path: &Path) -> Result<BindingKey, String> {
        let shown = path.display();
        let why = |what: String| {
            format!(
                "PATCHDIFF_WORKSPACE_KEY_FILE={shown}: {what} (docs/workspace.md, \"The binding proof\")"
            )
        };
        if !path.is_absolute() {
            return Err(why("the key file's path must be absolute".into()));
        }
        let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY;
        let fd = match open_raw(path, flags, 0) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                Self::create(path).map_err(|e| why(format!("cannot create the key file: {e}")))?;
                open_raw(path, flags, 0)
                    .map_err(|e| why(format!("cannot open the key file: {e}")))?
            }
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(why(
                    "the key file is a symbolic link, not a regular file".into()
                ));
            }
            Err(e) => return Err(why(format!("cannot open the key file: {e}"))),
        };
        let st = fstat(&fd).map_err(|e| why(format!("cannot inspect the key file: {e}")))?;
        if (st.st_mode & libc::S_IFMT) != libc::S_IFREG {
            return Err(why("the key file is not a regular file".into()));
        }
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        if st.st_uid != euid {
            return Err(why(format!(
                "the key file is owned by uid {}, not by this process's effective uid {euid}",
                st.st_uid
            )));
        }
        if st.st_mode & 0o077 != 0 {
            return Err(why(format!(
                "the key file's mode is {:04o}; it must give no permission to group or others (chmod 600)",
                st.st_mode & 0o7777
            )));
        }
        if st.st_size != KEY_BYTES as libc::off_t {
            return Err(why(format!(
                "the key file has {} bytes; a key is exactly {KEY_BYTES}",
                st.st_size
            )));
        }
        let mut key = [0u8; KEY_BYTES];
        let mut f = std::fs::File::from(fd);
        f.read_exact(&mut key)
            .map_err(|e| why(format!("cannot read the key file: {e}")))?;
        let mut more = [0u8; 1];
        if f.read(&mut more).map_err(|e| why(e.to_string()))? != 0 {
            return Err(why(format!(
                "the key file is longer than {KEY_BYTES} bytes"
            )));
        }
        Ok(BindingKey {
            key,
            file_identity: (st.st_dev, st.st_ino),
            path: path.to_owned(),
        })
    }

    /// Writes a new key into a staged file (O_CREAT | O_EXCL, 0600), then links it into place
    /// without replacing anything: a file another process created meanwhile wins, whole.
    fn create(path: &Path) -> Result<(), String> {
        let dir = path
            .parent()
            .ok_or_else(|| "the key file has no parent directory".to_string())?;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let mut key = [0u8; KEY_BYTES];
        random_bytes(&mut key)?;
        let mut tag = [0u8; 8];
        random_bytes(&mut tag)?;
        let staged = dir.join(format!(
            ".workspace-key-{}-{}.tmp",
            std::process::id(),
            hex(&tag)
        ));
        let fd = open_raw(
            &staged,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
            0o600,
        )
        .map_err(|e| format!("creating {}: {e}", staged.display()))?;
        let mut f = std::fs::File::from(fd);
        let written = f.write_all(&key).and_then(|()| f.sync_all());
        drop(f);
        let linked = written.and_then(|()| std::fs::hard_link(&staged, path));
        let _ = std::fs::remove_file(&staged);
        match linked {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e.to_string()),
        }
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }

    /// The proof of a binding: HMAC-SHA256 of [`message`], 64 lowercase hex characters.
    pub fn proof(
        &self,
        root_device: u64,
        root_inode: u64,
        relative_path: &str,
        nonce: &str,
    ) -> String {
        hex(&hmac_sha256(
            &self.key,
            &message(root_device, root_inode, relative_path, nonce),
        ))
    }

    /// A public name of this key: the first 8 bytes of its HMAC-SHA256 of a fixed text (no
    /// binding's message begins that way), 16 lowercase hex characters. It tells targets bound
    /// under different keys apart without revealing anything of the key (docs/files.md).
    pub fn tag(&self) -> String {
        hex(&hmac_sha256(&self.key, b"patchdiff-files-label/1")[..8])
    }

    /// The second key of the advisory lock under which the files profile imports the file of
    /// `label`: four bytes of this key's HMAC-SHA256 of the label, which a role without the key
    /// cannot compute from a label it knows (helper-120: with a key taken from the label alone,
    /// any role could hold it ahead of every import). It still shows in `pg_locks` while an import
    /// holds it, so the wait for it is short and the import looks again past it (helper-122).
    /// Two labels that share it only wait for each other.
    pub fn lock_key(&self, label: &str) -> i32 {
        let mut m = b"patchdiff-files-import-lock/1\0".to_vec();
        m.extend_from_slice(label.as_bytes());
        let h = hmac_sha256(&self.key, &m);
        i32::from_be_bytes([h[0], h[1], h[2], h[3]])
    }

    /// Whether `proof` is this key's proof of the binding and `nonce` a well-formed nonce; the
    /// comparison takes the same time wherever the proofs differ.
    pub fn verify(
        &self,
        root_device: u64,
        root_inode: u64,
        relative_path: &str,
        nonce: &str,
        proof: &str,
    ) -> bool {
        if !is_lower_hex(nonce, 2 * NONCE_BYTES) {
            return false;
        }
        let expected = self.proof(root_device, root_inode, relative_path, nonce);
        constant_time_eq(expected.as_bytes(), proof.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/files.md "Which target a file is": a key's tag is 16 lowercase hex digits, the same
    /// for the same key, another for another key, and none of a binding's proofs.
    #[test]
    fn a_key_tag_names_one_key() {
        let (a, b) = (
            BindingKey::from_bytes([7; KEY_BYTES]),
            BindingKey::from_bytes([8; KEY_BYTES]),
        );
        assert!(is_lower_hex(&a.tag(), 16), "{}", a.tag());
        assert_eq!(a.tag(), BindingKey::from_bytes([7; KEY_BYTES]).tag());
        assert_ne!(a.tag(), b.tag());
        assert!(
            !a.proof(1, 2, "x", &"0".repeat(2 * NONCE_BYTES))
                .starts_with(&a.tag())
        );
        // The import lock's key: the key's own, per label (docs/files.md "Retries").
        assert_eq!(a.lock_key("files@x:1:2:f"), a.lock_key("files@x:1:2:f"));
        assert_ne!(a.lock_key("files@x:1:2:f"), b.lock_key("files@x:1:2:f"));
        assert_ne!(a.lock_key("files@x:1:2:f"), a.lock_key("files@x:1:2:g"));
    }

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// RFC 4231, test cases 1, 2, 3, 4, 6 and 7 (case 5 is a truncated output).
    #[test]
    fn hmac_sha256_matches_rfc_4231() {
        let cases: [(Vec<u8>, Vec<u8>, &str); 6] = [
            (
                vec![0x0b; 20],
                b"Hi There".to_vec(),
                "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
            ),
            (
                b"Jefe".to_vec(),
                b"what do ya want for nothing?".to_vec(),
                "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
            ),
            (
                vec![0xaa; 20],
                vec![0xdd; 50],
                "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe",
            ),
            (
                unhex("0102030405060708090a0b0c0d0e0f10111213141516171819"),
                vec![0xcd; 50],
                "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b",
            ),
            (
                vec![0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First".to_vec(),
                "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
            ),
            (
                vec![0xaa; 131],
                b"This is a test using a larger than block-size key and a larger than block-size data. The key needs to be hashed before being used by the HMAC algorithm.".to_vec(),
                "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
            ),
        ];
        for (key, data, expected) in cases {
            assert_eq!(hex(&hmac_sha256(&key, &data)), expected);
        }
    }

    /// Issue 15 item 3: a proof covers the root's identity, the path and the nonce; changing
    /// any of them, or the key, fails verification.
    #[test]
    fn a_proof_covers_root_path_and_nonce() {
        let k = BindingKey::from_bytes([7; KEY_BYTES]);
        let nonce = fresh_nonce().unwrap();
        assert!(is_lower_hex(&nonce, 32));
        assert_ne!(nonce, fresh_nonce().unwrap());
        let p = k.proof(1, 2, "a/b.txt", &nonce);
        assert!(is_lower_hex(&p, 64));
        assert!(k.verify(1, 2, "a/b.txt", &nonce, &p));
        assert!(!k.verify(9, 2, "a/b.txt", &nonce, &p));
        assert!(!k.verify(1, 9, "a/b.txt", &nonce, &p));
        assert!(!k.verify(1, 2, "a/c.txt", &nonce, &p));
        assert!(!k.verify(1, 2, "a/b.txt", &"0".repeat(32), &p));
        assert!(!k.verify(1, 2, "a/b.txt", &nonce, &p.to_uppercase()));
        assert!(!k.verify(1, 2, "a/b.txt", &nonce, &p[..63]));
        assert!(!k.verify(1, 2, "a/b.txt", &nonce.to_uppercase(), &p));
        assert!(!BindingKey::from_bytes([8; KEY_BYTES]).verify(1, 2, "a/b.txt", &nonce, &p));
        // The fields cannot run into each other: "1"+"23" is not "12"+"3".
        assert_ne!(message(1, 23, "x", &nonce), message(12, 3, "x", &nonce));
        assert_eq!(
            message(1, 2, "a/b", "00"),
            b"patchdiff-workspace-binding/1\x001\x002\x00a/b\x0000".to_vec()
        );
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pd-key-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    /// Issue 15 item 3: the key file is created on first use (0600, parent 0700, 32 bytes) and
    /// the same key is loaded after; a file of the wrong size, with group/other permissions, or
    /// not a regular file refuses start-up.
    #[test]
    fn key_file_is_created_once_and_checked_on_load() {
        use std::os::unix::fs::PermissionsExt;
        let d = scratch("create");
        let path = d.join("deep/workspace.key");
        let a = BindingKey::load_or_create(&path).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
        assert_eq!(meta.len(), 32);
        assert_eq!(
            std::fs::metadata(d.join("deep"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o700
        );
        let b = BindingKey::load_or_create(&path).unwrap();
        assert_eq!(a.key, b.key);
        assert_eq!(std::fs::read_dir(d.join("deep")).unwrap().count(), 1);
        // Many loaders racing on a missing file agree on one key.
        let race = d.join("race/workspace.key");
        let keys: Vec<[u8; 32]> = (0..8)
            .map(|_| {
                let p = race.clone();
                std::thread::spawn(move || BindingKey::load_or_create(&p).unwrap().key)
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect();
        assert!(keys.iter().all(|k| *k == keys[0]));

        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let e = BindingKey::load_or_create(&path).unwrap_err();
        assert!(
            e.contains("PATCHDIFF_WORKSPACE_KEY_FILE") && e.contains("0640"),
            "{e}"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&path, [1u8; 31]).unwrap();
        let e = BindingKey::load_or_create(&path).unwrap_err();
        assert!(e.contains("31 bytes"), "{e}");
        let dir_key = d.join("dir.key");
        std::fs::create_dir(&dir_key).unwrap();
        let e = BindingKey::load_or_create(&dir_key).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        std::os::unix::fs::symlink(&path, d.join("link.key")).unwrap();
        let e = BindingKey::load_or_create(&d.join("link.key")).unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(BindingKey::load_or_create(Path::new("rel.key")).is_err());
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let theirs = d.join("theirs.key");
            std::fs::write(&theirs, [2u8; 32]).unwrap();
            std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o600)).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
            let e = BindingKey::load_or_create(&theirs).unwrap_err();
            assert!(e.contains("owned by uid 65534"), "{e}");
        } else {
            eprintln!("skipped the foreign-owner case: it needs root to chown");
        }
        let _ = std::fs::remove_dir_all(&d);
    }
}
