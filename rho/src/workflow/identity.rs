//! File and directory identities: opening paths without following symbolic links, fstat
//! facts, and SHA-256 content digests. Planning uses these to freeze executables, scripts,
//! interpreters, working directories and module sources; the executor uses the same
//! primitives to re-verify a frozen identity before it launches anything.
//!
//! Invariant: every path walked here is opened one component at a time with `O_NOFOLLOW`
//! from a directory descriptor, so a symbolic link anywhere on the way is refused rather
//! than followed, and facts are read from the opened descriptor (`fstat`), never from the
//! path again. Files whose content is read are opened with `O_NONBLOCK` and refused unless
//! `fstat` says they are regular, so a FIFO or a device can never block planning.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use nix::errno::Errno;
use nix::fcntl::{AtFlags, FcntlArg, OFlag, fcntl, openat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat};
use rho_ipc::program::{FileIdentity, FileLocation};
use sha2::{Digest as _, Sha256};

/// How many leading bytes of a file are kept while hashing (enough for a shebang line).
pub const HEAD_BYTES: usize = 512;

/// Why a path could not be opened without following links.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IdentityError {
    /// A component of the path is a symbolic link.
    #[error("`{component}` is a symbolic link; symbolic links are not followed here")]
    Symlink {
        /// The path up to and including the link, relative to the starting directory.
        component: String,
    },
    /// A component does not exist.
    #[error("`{component}` does not exist")]
    NotFound {
        /// The path up to and including the missing component.
        component: String,
    },
    /// A component that must be a directory is something else.
    #[error("`{component}` is not a directory")]
    NotDirectory {
        /// The path up to and including the component.
        component: String,
    },
    /// The path is absolute, empty in a part, or climbs with `..`.
    #[error("`{path}` is not a plain relative path (no `..`, no empty part, not absolute)")]
    NotRelative {
        /// The rejected path.
        path: String,
    },
    /// The kernel refused to open a component.
    #[error("cannot open `{component}`: {errno}")]
    Open {
        /// The path up to and including the component.
        component: String,
        /// The error number.
        errno: Errno,
    },
    /// A file whose content is needed is a FIFO, a device, a socket or a directory.
    #[error("`{path}` is {kind}, not a regular file")]
    NotRegular {
        /// The path as walked.
        path: String,
        /// What it is instead (`a FIFO`, `a directory`, ...).
        kind: &'static str,
    },
    /// Reading or inspecting an opened file failed.
    #[error("cannot read `{path}`")]
    Read {
        /// The file.
        path: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// Facts about an opened file, read with `fstat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileFacts {
    /// `st_dev`.
    pub device: u64,
    /// `st_ino`.
    pub inode: u64,
    /// `st_size`.
    pub size: u64,
    /// `st_mode` (type and permission bits).
    pub mode: u32,
    /// `st_uid`.
    pub uid: u32,
    /// `st_mtime` seconds and nanoseconds.
    pub mtime: (i64, i64),
    /// `st_ctime` seconds and nanoseconds.
    pub ctime: (i64, i64),
}

impl FileFacts {
    /// Converts a raw `stat`.
    pub fn from_stat(st: &FileStat) -> Self {
        Self {
            device: st.st_dev,
            inode: st.st_ino,
            size: u64::try_from(st.st_size).unwrap_or(0),
            mode: st.st_mode,
            uid: st.st_uid,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
        }
    }

    /// `fstat` of an open descriptor.
    pub fn of(fd: BorrowedFd<'_>) -> io::Result<Self> {
        Ok(Self::from_stat(&fstat(fd).map_err(io::Error::from)?))
    }

    fn file_type(&self) -> u32 {
        self.mode & SFlag::S_IFMT.bits()
    }

    /// A regular file.
    pub fn is_regular(&self) -> bool {
        self.file_type() == SFlag::S_IFREG.bits()
    }

    /// A directory.
    pub fn is_dir(&self) -> bool {
        self.file_type() == SFlag::S_IFDIR.bits()
    }

    /// What kind of file this is, with its article (`a regular file`, `a FIFO`, ...).
    pub fn kind(&self) -> &'static str {
        match self.file_type() {
            t if t == SFlag::S_IFREG.bits() => "a regular file",
            t if t == SFlag::S_IFDIR.bits() => "a directory",
            t if t == SFlag::S_IFIFO.bits() => "a FIFO",
            t if t == SFlag::S_IFCHR.bits() => "a character device",
            t if t == SFlag::S_IFBLK.bits() => "a block device",
            t if t == SFlag::S_IFSOCK.bits() => "a socket",
            t if t == SFlag::S_IFLNK.bits() => "a symbolic link",
            _ => "a file of unknown type",
        }
    }

    /// A symbolic link (only seen through `fstatat(AT_SYMLINK_NOFOLLOW)`).
    pub fn is_symlink(&self) -> bool {
        self.file_type() == SFlag::S_IFLNK.bits()
    }

    /// Any execute bit is set.
    pub fn is_executable(&self) -> bool {
        self.mode & 0o111 != 0
    }

    /// Permission bits only.
    pub fn permissions(&self) -> u32 {
        self.mode & 0o7777
    }
}

/// Opens a directory by path (following links: the caller chose this path, typically a
/// canonical one) for use as the base of no-follow walks.
pub fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    openat(
        nix::fcntl::AT_FDCWD,
        path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(io::Error::from)
}

/// Splits a `/`-separated relative path into its parts, refusing `..`, empty parts (other
/// than a trailing slash) and absolute paths. `.` parts are dropped; `""` and `"."` give no
/// parts (the starting directory itself).
pub fn relative_parts(rel: &str) -> Result<Vec<&str>, IdentityError> {
    if rel.starts_with('/') {
        return Err(IdentityError::NotRelative {
            path: rel.to_owned(),
        });
    }
    let trimmed = rel.strip_suffix('/').unwrap_or(rel);
    let mut parts = Vec::new();
    if trimmed.is_empty() {
        return Ok(parts);
    }
    for part in trimmed.split('/') {
        match part {
            "." => {}
            "" | ".." => {
                return Err(IdentityError::NotRelative {
                    path: rel.to_owned(),
                });
            }
            part => parts.push(part),
        }
    }
    Ok(parts)
}

/// Opens `rel` below `dir` one component at a time without following any symbolic link.
/// Intermediate components must be directories; the last one is opened with `flags`
/// (`O_NOFOLLOW` and `O_CLOEXEC` are always added). An empty path opens `dir` itself again.
pub fn open_nofollow_in(
    dir: BorrowedFd<'_>,
    rel: &str,
    flags: OFlag,
) -> Result<OwnedFd, IdentityError> {
    let parts = relative_parts(rel)?;
    let Some((last, intermediate)) = parts.split_last() else {
        return openat(dir, ".", flags | OFlag::O_CLOEXEC, Mode::empty()).map_err(|errno| {
            IdentityError::Open {
                component: ".".to_owned(),
                errno,
            }
        });
    };
    let mut walked = String::new();
    let mut current: Option<OwnedFd> = None;
    for part in intermediate {
        push_part(&mut walked, part);
        let base = current.as_ref().map_or(dir, AsFd::as_fd);
        let next = openat(
            base,
            *part,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| classify(base, part, &walked, errno))?;
        current = Some(next);
    }
    push_part(&mut walked, last);
    let base = current.as_ref().map_or(dir, AsFd::as_fd);
    openat(
        base,
        *last,
        flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| classify(base, last, &walked, errno))
}

/// Opens an absolute path from `/` with no symbolic link in any component.
pub fn open_absolute_nofollow(path: &Path, flags: OFlag) -> Result<OwnedFd, IdentityError> {
    let text = path.to_str().ok_or_else(|| IdentityError::NotRelative {
        path: path.to_string_lossy().into_owned(),
    })?;
    let Some(rel) = text.strip_prefix('/') else {
        return Err(IdentityError::NotRelative {
            path: text.to_owned(),
        });
    };
    let root = open_dir(Path::new("/")).map_err(|e| IdentityError::Read {
        path: "/".to_owned(),
        source: e,
    })?;
    open_nofollow_in(root.as_fd(), rel, flags).map_err(|e| prefix_component(e, "/"))
}

/// Flags for opening a file whose content will be read: `O_NONBLOCK` so that opening a FIFO
/// (which would wait for a writer) or a device returns at once, `O_NOCTTY` so that a
/// terminal never becomes the controlling one.
const READ_CONTENT_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_NOCTTY)
    .union(OFlag::O_NONBLOCK);

/// Opens `rel` below `dir` like [`open_nofollow_in`] for reading its content, and refuses
/// anything but a regular file (naming what it is) before a byte is read. The returned
/// descriptor is blocking again.
pub fn open_regular_in(dir: BorrowedFd<'_>, rel: &str) -> Result<OwnedFd, IdentityError> {
    let fd = open_nofollow_in(dir, rel, READ_CONTENT_FLAGS)?;
    require_regular(fd, rel)
}

/// Opens an absolute path like [`open_absolute_nofollow`] for reading its content, refusing
/// anything but a regular file.
pub fn open_regular_absolute(path: &Path) -> Result<OwnedFd, IdentityError> {
    let fd = open_absolute_nofollow(path, READ_CONTENT_FLAGS)?;
    require_regular(fd, &path.to_string_lossy())
}

/// Checks with `fstat` that `fd` is a regular file, then clears `O_NONBLOCK`.
fn require_regular(fd: OwnedFd, shown: &str) -> Result<OwnedFd, IdentityError> {
    let read_error = |source: io::Error| IdentityError::Read {
        path: shown.to_owned(),
        source,
    };
    let facts = FileFacts::of(fd.as_fd()).map_err(read_error)?;
    if !facts.is_regular() {
        return Err(IdentityError::NotRegular {
            path: shown.to_owned(),
            kind: facts.kind(),
        });
    }
    let flags = fcntl(&fd, FcntlArg::F_GETFL).map_err(|e| read_error(e.into()))?;
    let flags = OFlag::from_bits_truncate(flags) - OFlag::O_NONBLOCK;
    fcntl(&fd, FcntlArg::F_SETFL(flags)).map_err(|e| read_error(e.into()))?;
    Ok(fd)
}

fn prefix_component(err: IdentityError, prefix: &str) -> IdentityError {
    match err {
        IdentityError::Symlink { component } => IdentityError::Symlink {
            component: format!("{prefix}{component}"),
        },
        IdentityError::NotFound { component } => IdentityError::NotFound {
            component: format!("{prefix}{component}"),
        },
        IdentityError::NotDirectory { component } => IdentityError::NotDirectory {
            component: format!("{prefix}{component}"),
        },
        IdentityError::Open { component, errno } => IdentityError::Open {
            component: format!("{prefix}{component}"),
            errno,
        },
        other => other,
    }
}

fn push_part(walked: &mut String, part: &str) {
    if !walked.is_empty() {
        walked.push('/');
    }
    walked.push_str(part);
}

/// Turns an `openat` failure into the reason a user can act on: a symlink is reported as
/// such even though the kernel says `ELOOP` or `ENOTDIR`.
fn classify(base: BorrowedFd<'_>, part: &str, walked: &str, errno: Errno) -> IdentityError {
    let component = walked.to_owned();
    match errno {
        Errno::ENOENT => IdentityError::NotFound { component },
        Errno::ELOOP | Errno::ENOTDIR | Errno::EMLINK => {
            match fstatat(base, part, AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) if FileFacts::from_stat(&st).is_symlink() => {
                    IdentityError::Symlink { component }
                }
                _ if errno == Errno::ENOTDIR => IdentityError::NotDirectory { component },
                _ => IdentityError::Open { component, errno },
            }
        }
        errno => IdentityError::Open { component, errno },
    }
}

/// A file's content digest and its first bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentDigest {
    /// Bytes hashed.
    pub size: u64,
    /// `sha256:<hex>`.
    pub sha256: String,
    /// Up to [`HEAD_BYTES`] leading bytes.
    pub head: Vec<u8>,
}

/// Bytes read per chunk while hashing; the deadline is checked between chunks.
const HASH_CHUNK_BYTES: usize = 64 * 1024;

/// SHA-256 of everything readable from `fd`, read with positional reads from offset 0 (the
/// descriptor's own offset is left alone).
pub fn hash_fd(fd: BorrowedFd<'_>) -> io::Result<ContentDigest> {
    hash_fd_until(fd, None)
}

/// [`hash_fd`] that gives up once `deadline` has passed (checked before every chunk), with an
/// error of kind [`io::ErrorKind::TimedOut`]: hashing a huge (or sparse) file cannot outlast
/// the caller's time budget by more than one chunk.
pub fn hash_fd_until(fd: BorrowedFd<'_>, deadline: Option<Instant>) -> io::Result<ContentDigest> {
    let file = File::from(fd.try_clone_to_owned()?);
    let mut hasher = Sha256::new();
    let mut buf = vec![0_u8; HASH_CHUNK_BYTES];
    let mut offset: u64 = 0;
    let mut head = Vec::new();
    loop {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the time budget ran out after hashing {offset} bytes"),
            ));
        }
        let n = match file.read_at(&mut buf, offset) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if head.len() < HEAD_BYTES {
            let take = n.min(HEAD_BYTES - head.len());
            head.extend_from_slice(&buf[..take]);
        }
        hasher.update(&buf[..n]);
        offset += n as u64;
    }
    let digest: [u8; 32] = hasher.finalize().into();
    Ok(ContentDigest {
        size: offset,
        sha256: format!("sha256:{}", rho_ipc::digest::hex(&digest)),
        head,
    })
}

/// Content digests of files already hashed in this process, keyed by the facts that change
/// whenever the content can have changed (device, inode, size, mtime, ctime). One plan hashes
/// `/usr/bin/sh` once however many nodes run it.
#[derive(Debug, Default)]
pub struct DigestCache {
    entries: HashMap<FileFacts, ContentDigest>,
}

impl DigestCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The digest of the open file `fd` whose facts are `facts`, hashed before `deadline`
    /// (see [`hash_fd_until`]).
    pub fn digest(
        &mut self,
        fd: BorrowedFd<'_>,
        facts: &FileFacts,
        deadline: Option<Instant>,
    ) -> io::Result<ContentDigest> {
        if let Some(hit) = self.entries.get(facts) {
            return Ok(hit.clone());
        }
        let digest = hash_fd_until(fd, deadline)?;
        self.entries.insert(*facts, digest.clone());
        Ok(digest)
    }
}

/// Where a canonical path lives relative to the canonical workspace: inside it as a
/// `/`-separated relative path (`.` for the workspace itself), or outside it.
pub fn workspace_relative(canonical: &Path, workspace: &Path) -> Option<String> {
    let rel = canonical.strip_prefix(workspace).ok()?;
    let mut out = String::new();
    for part in rel.components() {
        let std::path::Component::Normal(name) = part else {
            return None;
        };
        push_part(&mut out, name.to_str()?);
    }
    if out.is_empty() {
        out.push('.');
    }
    Some(out)
}

/// The frozen location of a file found at `canonical` with `facts`: relative for workspace
/// files (so a copied workspace freezes the same), absolute with device and inode otherwise.
pub fn location_of(canonical: &Path, workspace: &Path, facts: &FileFacts) -> FileLocation {
    match workspace_relative(canonical, workspace) {
        Some(path) => FileLocation::Workspace { path },
        None => FileLocation::Absolute {
            path: canonical.to_string_lossy().into_owned(),
            device: facts.device,
            inode: facts.inode,
        },
    }
}

/// Opens a frozen file again, without following links: workspace files below
/// `workspace_dir`, absolute ones from `/`.
pub fn open_frozen(
    workspace_dir: BorrowedFd<'_>,
    location: &FileLocation,
    flags: OFlag,
) -> Result<OwnedFd, IdentityError> {
    match location {
        FileLocation::Workspace { path } => open_nofollow_in(workspace_dir, path, flags),
        FileLocation::Absolute { path, .. } => open_absolute_nofollow(Path::new(path), flags),
    }
}

/// How an opened file differs from its frozen identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentityMismatch {
    /// Not a regular file any more.
    NotRegular,
    /// Another device or inode than frozen (absolute files only).
    Replaced {
        /// Frozen `(device, inode)`.
        frozen: (u64, u64),
        /// Found `(device, inode)`.
        found: (u64, u64),
    },
    /// Another size.
    Size {
        /// Frozen size.
        frozen: u64,
        /// Found size.
        found: u64,
    },
    /// Other content.
    Content {
        /// Frozen digest.
        frozen: String,
        /// Found digest.
        found: String,
    },
}

impl fmt::Display for IdentityMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdentityMismatch::NotRegular => f.write_str("is no longer a regular file"),
            IdentityMismatch::Replaced { frozen, found } => write!(
                f,
                "was replaced: frozen device {} inode {}, found device {} inode {}",
                frozen.0, frozen.1, found.0, found.1
            ),
            IdentityMismatch::Size { frozen, found } => {
                write!(f, "changed size: frozen {frozen} bytes, found {found}")
            }
            IdentityMismatch::Content { frozen, found } => {
                write!(f, "changed content: frozen {frozen}, found {found}")
            }
        }
    }
}

/// Compares an open file with its frozen identity (type, machine identity for absolute
/// files, size, then content).
pub fn check_identity(
    fd: BorrowedFd<'_>,
    frozen: &FileIdentity,
) -> io::Result<Result<(), IdentityMismatch>> {
    let facts = FileFacts::of(fd)?;
    if !facts.is_regular() {
        return Ok(Err(IdentityMismatch::NotRegular));
    }
    if let FileLocation::Absolute { device, inode, .. } = &frozen.location
        && (*device, *inode) != (facts.device, facts.inode)
    {
        return Ok(Err(IdentityMismatch::Replaced {
            frozen: (*device, *inode),
            found: (facts.device, facts.inode),
        }));
    }
    if facts.size != frozen.size {
        return Ok(Err(IdentityMismatch::Size {
            frozen: frozen.size,
            found: facts.size,
        }));
    }
    let digest = hash_fd(fd)?;
    if digest.sha256 != frozen.sha256 {
        return Ok(Err(IdentityMismatch::Content {
            frozen: frozen.sha256.clone(),
            found: digest.sha256,
        }));
    }
    Ok(Ok(()))
}

/// Display form of a workspace path for messages.
pub fn display_location(location: &FileLocation, workspace: Option<&Path>) -> String {
    match location {
        FileLocation::Workspace { path } => match workspace {
            Some(ws) => ws.join(path).display().to_string(),
            None => path.clone(),
        },
        FileLocation::Absolute { path, .. } => path.clone(),
    }
}

/// Joins a workspace-relative path onto the workspace for display.
pub fn workspace_path(workspace: &Path, rel: &str) -> PathBuf {
    if rel == "." {
        workspace.to_owned()
    } else {
        workspace.join(rel)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    #[test]
    fn relative_parts_refuse_escapes_and_absolute_paths() {
        assert_eq!(relative_parts("a/./b/").unwrap(), vec!["a", "b"]);
        assert!(relative_parts(".").unwrap().is_empty());
        assert!(relative_parts("").unwrap().is_empty());
        assert!(relative_parts("../x").is_err());
        assert!(relative_parts("a/../b").is_err());
        assert!(relative_parts("/etc").is_err());
        assert!(relative_parts("a//b").is_err());
    }

    #[test]
    fn symlinked_component_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("real/sub")).unwrap();
        std::fs::write(dir.path().join("real/sub/f.txt"), b"x").unwrap();
        symlink("real", dir.path().join("link")).unwrap();
        symlink("f.txt", dir.path().join("real/sub/flink")).unwrap();
        let base = open_dir(dir.path()).unwrap();

        let err = open_nofollow_in(base.as_fd(), "link/sub/f.txt", OFlag::O_RDONLY).unwrap_err();
        assert!(
            matches!(&err, IdentityError::Symlink { component } if component == "link"),
            "{err}"
        );
        let err = open_nofollow_in(base.as_fd(), "real/sub/flink", OFlag::O_RDONLY).unwrap_err();
        assert!(
            matches!(&err, IdentityError::Symlink { component } if component == "real/sub/flink"),
            "{err}"
        );
        let err = open_nofollow_in(base.as_fd(), "real/nope/f.txt", OFlag::O_RDONLY).unwrap_err();
        assert!(matches!(&err, IdentityError::NotFound { component } if component == "real/nope"));
        assert!(open_nofollow_in(base.as_fd(), "real/sub/f.txt", OFlag::O_RDONLY).is_ok());
    }

    #[test]
    fn hash_matches_known_vector_and_keeps_the_head() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"abc").unwrap();
        let fd = open_absolute_nofollow(&path, OFlag::O_RDONLY);
        // The temp dir may itself sit below a symlink (e.g. /tmp on some systems).
        let fd = match fd {
            Ok(fd) => fd,
            Err(_) => open_dir(dir.path())
                .and_then(|d| {
                    open_nofollow_in(d.as_fd(), "f", OFlag::O_RDONLY).map_err(io::Error::other)
                })
                .unwrap(),
        };
        let digest = hash_fd(fd.as_fd()).unwrap();
        assert_eq!(
            digest.sha256,
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(digest.size, 3);
        assert_eq!(digest.head, b"abc");
    }

    #[test]
    fn workspace_relative_paths() {
        let ws = Path::new("/w/s");
        assert_eq!(
            workspace_relative(Path::new("/w/s"), ws).as_deref(),
            Some(".")
        );
        assert_eq!(
            workspace_relative(Path::new("/w/s/a/b"), ws).as_deref(),
            Some("a/b")
        );
        assert_eq!(workspace_relative(Path::new("/w/sx"), ws), None);
        assert_eq!(workspace_relative(Path::new("/usr/bin/sh"), ws), None);
    }

    #[test]
    fn identity_check_detects_content_changes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"one").unwrap();
        let base = open_dir(dir.path()).unwrap();
        let fd = open_nofollow_in(base.as_fd(), "f", OFlag::O_RDONLY).unwrap();
        let digest = hash_fd(fd.as_fd()).unwrap();
        let frozen = FileIdentity {
            location: FileLocation::Workspace { path: "f".into() },
            size: digest.size,
            sha256: digest.sha256,
        };
        assert_eq!(check_identity(fd.as_fd(), &frozen).unwrap(), Ok(()));
        std::fs::write(dir.path().join("f"), b"two").unwrap();
        assert!(matches!(
            check_identity(fd.as_fd(), &frozen).unwrap(),
            Err(IdentityMismatch::Content { .. })
        ));
    }

    #[test]
    fn content_opens_refuse_fifos_and_directories_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        nix::unistd::mkfifo(&dir.path().join("pipe"), Mode::from_bits_truncate(0o644)).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("f"), b"x").unwrap();
        let base = open_dir(dir.path()).unwrap();
        let err = open_regular_in(base.as_fd(), "pipe").unwrap_err();
        assert_eq!(err.to_string(), "`pipe` is a FIFO, not a regular file");
        let err = open_regular_in(base.as_fd(), "sub").unwrap_err();
        assert_eq!(err.to_string(), "`sub` is a directory, not a regular file");
        let fd = open_regular_in(base.as_fd(), "f").unwrap();
        let flags = OFlag::from_bits_truncate(fcntl(&fd, FcntlArg::F_GETFL).unwrap());
        assert!(!flags.contains(OFlag::O_NONBLOCK));
    }

    #[test]
    fn hashing_stops_at_a_passed_deadline() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"abc").unwrap();
        let base = open_dir(dir.path()).unwrap();
        let fd = open_regular_in(base.as_fd(), "f").unwrap();
        let err = hash_fd_until(fd.as_fd(), Some(Instant::now())).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        let later = Instant::now() + std::time::Duration::from_hours(1);
        assert_eq!(hash_fd_until(fd.as_fd(), Some(later)).unwrap().size, 3);
    }
}
