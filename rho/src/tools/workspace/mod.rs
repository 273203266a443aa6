//! File access for the workspace tools: where a model-supplied path points, opening it
//! without following symbolic links, atomic replacement of file contents, and the operation
//! class a write belongs to (tracked workspace edit or other write).
//!
//! Invariant: every path a tool touches is resolved lexically against the canonical
//! workspace root and then opened one component at a time with `O_NOFOLLOW` (through the
//! walkers of [`crate::workflow::identity`]), so a symbolic link anywhere on the way is
//! refused, never followed — inside the workspace or out of it. Contents are replaced by
//! writing a sibling temporary file and renaming it over the target, so a failed write never
//! leaves a half-written file behind.

mod git_index;
pub mod walk;

use std::fmt;
use std::fs::File;
use std::io::{self, Write as _};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat, renameat};
use nix::sys::stat::{Mode, fchmod, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};
use rho_policy::OperationClass;

use crate::tools::{ToolContext, ToolError};
use crate::workflow::identity::{self, FileFacts, IdentityError};

pub use git_index::{GitIndexError, TrackedState, tracked_state};

/// Why a workspace path could not be resolved, opened, read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileAccessError {
    /// The argument naming a path is empty.
    #[error("argument `{field}`: the path is empty")]
    EmptyPath {
        /// The argument at fault.
        field: &'static str,
    },
    /// The path contains a NUL byte, which no file name can hold.
    #[error("argument `{field}`: the path contains a NUL byte")]
    NulInPath {
        /// The argument at fault.
        field: &'static str,
    },
    /// The tool confines paths to the workspace and this one leaves it.
    #[error("`{path}` is outside the workspace `{}`; this tool only works inside it", root.display())]
    OutsideWorkspace {
        /// The path as given.
        path: String,
        /// The workspace root.
        root: PathBuf,
    },
    /// Walking to the path failed: a symbolic link, a missing component, a non-directory.
    #[error("`{path}`: {source}")]
    Walk {
        /// The path as given.
        path: String,
        /// What the no-follow walk found.
        #[source]
        source: IdentityError,
    },
    /// The path names something that is not what the tool needs (a directory where a file is
    /// wanted, a FIFO, a symbolic link).
    #[error("`{path}` is {kind}, not {wanted}")]
    WrongKind {
        /// The path as given.
        path: String,
        /// What it is.
        kind: &'static str,
        /// What the tool needs.
        wanted: &'static str,
    },
    /// The file to create already exists.
    #[error("`{path}` already exists")]
    AlreadyExists {
        /// The path as given.
        path: String,
    },
    /// A system call on the path failed.
    #[error("cannot {action} `{path}`")]
    Io {
        /// What was being done (`read`, `write`, `rename`, ...).
        action: &'static str,
        /// The path as given.
        path: String,
        /// The error from the kernel.
        #[source]
        source: io::Error,
    },
}

/// An error and its sources, joined with `: ` (the one rendering every front end uses).
pub use crate::workflow::plan::error_chain;

impl FileAccessError {
    /// The tool error a model reads: problems with the path argument (missing, a link, the
    /// wrong kind, outside the workspace) name the argument `field`; system-call failures
    /// are failures with their cause.
    pub fn into_tool_error(self, tool: &str, field: &str) -> ToolError {
        match self {
            FileAccessError::Io { .. } => ToolError::failed(tool, error_chain(&self)),
            other => ToolError::invalid(tool, field, error_chain(&other)),
        }
    }
}

/// Opens the workspace of a tool call.
pub fn open_workspace(tool: &str, ctx: &ToolContext) -> Result<Workspace, ToolError> {
    Workspace::open(ctx.workspace()).map_err(|err| {
        ToolError::failed(
            tool,
            format!(
                "cannot open the workspace `{}`: {err}",
                ctx.workspace().display()
            ),
        )
    })
}

/// Where a path resolves to, relative to the workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// Inside the workspace: a `/`-separated relative path without `.` or `..` parts (empty
    /// for the workspace root itself).
    Inside(String),
    /// Outside the workspace: an absolute, lexically normalized path.
    Outside(PathBuf),
}

/// A path argument resolved against the workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedPath {
    /// The path as the model gave it, for messages.
    pub given: String,
    /// Where it points.
    pub location: Location,
}

impl ResolvedPath {
    /// The path shown in results: workspace-relative inside (`.` for the root), absolute
    /// outside.
    pub fn display(&self) -> String {
        match &self.location {
            Location::Inside(rel) if rel.is_empty() => ".".to_owned(),
            Location::Inside(rel) => rel.clone(),
            Location::Outside(abs) => abs.display().to_string(),
        }
    }

    /// Whether the path is inside the workspace.
    pub fn is_inside(&self) -> bool {
        matches!(self.location, Location::Inside(_))
    }
}

impl fmt::Display for ResolvedPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display())
    }
}

/// The workspace root, canonical, with a descriptor held open for no-follow walks.
pub struct Workspace {
    root: PathBuf,
    dir: OwnedFd,
}

impl fmt::Debug for Workspace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Workspace")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

/// What an atomic write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteOutcome {
    /// The file did not exist before.
    pub created: bool,
    /// Bytes written.
    pub bytes: u64,
}

impl Workspace {
    /// Opens the workspace at `root` (canonicalized once here: the root is the user's choice,
    /// so links above it are resolved; nothing below it is ever followed).
    pub fn open(root: &Path) -> io::Result<Self> {
        let root = root.canonicalize()?;
        let dir = identity::open_dir(&root)?;
        Ok(Workspace { root, dir })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves the path argument `field` = `given`: relative paths are taken from the
    /// workspace root; `.` and `..` are resolved lexically (safe because no symbolic link is
    /// ever followed when the result is opened).
    pub fn resolve(
        &self,
        field: &'static str,
        given: &str,
    ) -> Result<ResolvedPath, FileAccessError> {
        if given.is_empty() {
            return Err(FileAccessError::EmptyPath { field });
        }
        if given.contains('\0') {
            return Err(FileAccessError::NulInPath { field });
        }
        let joined = self.root.join(given);
        let mut normal = PathBuf::from("/");
        for component in joined.components() {
            match component {
                Component::Normal(part) => normal.push(part),
                Component::ParentDir => {
                    normal.pop();
                }
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            }
        }
        let location = match normal.strip_prefix(&self.root) {
            Ok(rel) => Location::Inside(path_to_rel(rel)),
            Err(_) => Location::Outside(normal),
        };
        Ok(ResolvedPath {
            given: given.to_owned(),
            location,
        })
    }

    /// Like [`Workspace::resolve`], refusing paths outside the workspace.
    pub fn resolve_inside(
        &self,
        field: &'static str,
        given: &str,
    ) -> Result<ResolvedPath, FileAccessError> {
        let resolved = self.resolve(field, given)?;
        if resolved.is_inside() {
            Ok(resolved)
        } else {
            Err(FileAccessError::OutsideWorkspace {
                path: given.to_owned(),
                root: self.root.clone(),
            })
        }
    }

    /// The absolute path of a resolved location (for messages and child working
    /// directories; never opened by path).
    pub fn absolute(&self, path: &ResolvedPath) -> PathBuf {
        match &path.location {
            Location::Inside(rel) if rel.is_empty() => self.root.clone(),
            Location::Inside(rel) => self.root.join(rel),
            Location::Outside(abs) => abs.clone(),
        }
    }

    /// The base directory and the relative walk for `path`.
    fn base_and_rel<'p>(
        &self,
        path: &'p ResolvedPath,
    ) -> Result<(Base<'_>, &'p str), FileAccessError> {
        match &path.location {
            Location::Inside(rel) => Ok((Base::Borrowed(self.dir.as_fd()), rel.as_str())),
            Location::Outside(abs) => {
                let rel = abs
                    .to_str()
                    .and_then(|s| s.strip_prefix('/'))
                    .ok_or_else(|| FileAccessError::Walk {
                        path: path.given.clone(),
                        source: IdentityError::NotRelative {
                            path: abs.display().to_string(),
                        },
                    })?;
                let root =
                    identity::open_dir(Path::new("/")).map_err(|source| FileAccessError::Io {
                        action: "open",
                        path: "/".to_owned(),
                        source,
                    })?;
                Ok((Base::Owned(root), rel))
            }
        }
    }

    /// Facts about what `path` names, without following a final symbolic link; `None` when
    /// nothing exists there (a missing parent directory counts as nothing).
    pub fn lstat(&self, path: &ResolvedPath) -> Result<Option<FileFacts>, FileAccessError> {
        let (base, rel) = self.base_and_rel(path)?;
        let Some((parent_rel, name)) = split_last(rel) else {
            // The base directory itself.
            return FileFacts::of(base.as_fd())
                .map(Some)
                .map_err(|source| io_error("inspect", path, source));
        };
        let parent = match identity::open_nofollow_in(
            base.as_fd(),
            parent_rel,
            OFlag::O_PATH | OFlag::O_DIRECTORY,
        ) {
            Ok(fd) => fd,
            Err(IdentityError::NotFound { .. }) => return Ok(None),
            Err(source) => return Err(walk_error(path, source)),
        };
        match fstatat(&parent, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(FileFacts::from_stat(&st))),
            Err(Errno::ENOENT) => Ok(None),
            Err(errno) => Err(io_error("inspect", path, errno.into())),
        }
    }

    /// Opens the regular file at `path` for reading (no link followed, FIFOs and devices
    /// refused before a byte is read).
    pub fn open_file(&self, path: &ResolvedPath) -> Result<File, FileAccessError> {
        let (base, rel) = self.base_and_rel(path)?;
        let fd = identity::open_regular_in(base.as_fd(), rel).map_err(|source| match source {
            IdentityError::NotRegular { kind, .. } => FileAccessError::WrongKind {
                path: path.given.clone(),
                kind,
                wanted: "a regular file",
            },
            IdentityError::Open {
                errno: Errno::ELOOP,
                ..
            } => FileAccessError::WrongKind {
                path: path.given.clone(),
                kind: "a symbolic link",
                wanted: "a regular file",
            },
            other => walk_error(path, other),
        })?;
        Ok(File::from(fd))
    }

    /// Opens the directory at `path` for listing.
    pub fn open_directory(&self, path: &ResolvedPath) -> Result<OwnedFd, FileAccessError> {
        let (base, rel) = self.base_and_rel(path)?;
        if let Some(facts) = self.lstat(path)?
            && !facts.is_dir()
        {
            return Err(FileAccessError::WrongKind {
                path: path.given.clone(),
                kind: facts.kind(),
                wanted: "a directory",
            });
        }
        identity::open_nofollow_in(base.as_fd(), rel, OFlag::O_RDONLY | OFlag::O_DIRECTORY)
            .map_err(|source| walk_error(path, source))
    }

    /// Replaces (or creates) the file at `path` with `bytes`: a temporary sibling is written,
    /// flushed to disk and renamed over the target, so readers see the old or the new
    /// content, never a mix. An existing target must be a regular file (a symbolic link is
    /// refused, not followed) and keeps its permission bits. With `create_parents`, missing
    /// parent directories are created (no link followed on the way).
    pub fn write_atomic(
        &self,
        path: &ResolvedPath,
        bytes: &[u8],
        create_parents: bool,
    ) -> Result<WriteOutcome, FileAccessError> {
        let (base, rel) = self.base_and_rel(path)?;
        let Some((parent_rel, name)) = split_last(rel) else {
            return Err(FileAccessError::WrongKind {
                path: path.given.clone(),
                kind: "a directory",
                wanted: "a file",
            });
        };
        let parent = open_parent(base.as_fd(), parent_rel, create_parents)
            .map_err(|source| walk_error(path, source))?;
        let existing = match fstatat(&parent, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Some(FileFacts::from_stat(&st)),
            Err(Errno::ENOENT) => None,
            Err(errno) => return Err(io_error("inspect", path, errno.into())),
        };
        if let Some(facts) = &existing
            && !facts.is_regular()
        {
            return Err(FileAccessError::WrongKind {
                path: path.given.clone(),
                kind: facts.kind(),
                wanted: "a regular file",
            });
        }
        let temp = temp_name(name);
        let fd = openat(
            &parent,
            temp.as_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o666),
        )
        .map_err(|errno| io_error("create a temporary file beside", path, errno.into()))?;
        let written = (|| -> io::Result<()> {
            if let Some(facts) = &existing {
                fchmod(&fd, Mode::from_bits_truncate(facts.permissions()))
                    .map_err(io::Error::from)?;
            }
            let mut file = File::from(fd);
            file.write_all(bytes)?;
            file.sync_all()
        })();
        if let Err(source) = written {
            let _ = unlinkat(&parent, temp.as_str(), UnlinkatFlags::NoRemoveDir);
            return Err(io_error("write", path, source));
        }
        if let Err(errno) = renameat(&parent, temp.as_str(), &parent, name) {
            let _ = unlinkat(&parent, temp.as_str(), UnlinkatFlags::NoRemoveDir);
            return Err(io_error("replace", path, errno.into()));
        }
        sync_dir(parent.as_fd());
        Ok(WriteOutcome {
            created: existing.is_none(),
            bytes: u64::try_from(bytes.len()).unwrap_or(u64::MAX),
        })
    }

    /// Removes the regular file at `path` (a symbolic link or anything else is refused).
    pub fn remove_file(&self, path: &ResolvedPath) -> Result<(), FileAccessError> {
        let (base, rel) = self.base_and_rel(path)?;
        let Some((parent_rel, name)) = split_last(rel) else {
            return Err(FileAccessError::WrongKind {
                path: path.given.clone(),
                kind: "a directory",
                wanted: "a regular file",
            });
        };
        let parent = open_parent(base.as_fd(), parent_rel, false)
            .map_err(|source| walk_error(path, source))?;
        let facts = fstatat(&parent, name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .map(|st| FileFacts::from_stat(&st))
            .map_err(|errno| io_error("inspect", path, errno.into()))?;
        if !facts.is_regular() {
            return Err(FileAccessError::WrongKind {
                path: path.given.clone(),
                kind: facts.kind(),
                wanted: "a regular file",
            });
        }
        unlinkat(&parent, name, UnlinkatFlags::NoRemoveDir)
            .map_err(|errno| io_error("remove", path, errno.into()))?;
        sync_dir(parent.as_fd());
        Ok(())
    }

    /// The operation class of writing `path`: a tracked workspace edit when the path is
    /// inside the workspace, names an existing regular file (not a symbolic link), lies
    /// outside any `.git` directory, and the git index of the repository holding it lists it
    /// as a regular file at stage 0 (not intent-to-add, not skip-worktree). Everything else —
    /// new files, untracked or ignored files, links, paths outside the workspace, a
    /// repository whose index cannot be read — is another write, which asks first.
    pub fn write_class(&self, path: &ResolvedPath) -> OperationClass {
        let Location::Inside(rel) = &path.location else {
            return OperationClass::OtherWrite;
        };
        if rel.is_empty() || rel.split('/').any(|part| part == ".git") {
            return OperationClass::OtherWrite;
        }
        match self.lstat(path) {
            Ok(Some(facts)) if facts.is_regular() => {}
            _ => return OperationClass::OtherWrite,
        }
        match tracked_state(&self.root.join(rel)) {
            Ok(TrackedState::TrackedFile) => OperationClass::TrackedWorkspaceEdit,
            Ok(_) => OperationClass::OtherWrite,
            Err(err) => {
                tracing::debug!(path = %path, error = %err, "git index unreadable; treating the write as untracked");
                OperationClass::OtherWrite
            }
        }
    }
}

/// A base directory for a walk: the workspace's own descriptor, or `/` opened for one call.
enum Base<'w> {
    Borrowed(BorrowedFd<'w>),
    Owned(OwnedFd),
}

impl Base<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Base::Borrowed(fd) => *fd,
            Base::Owned(fd) => fd.as_fd(),
        }
    }
}

fn path_to_rel(rel: &Path) -> String {
    rel.components()
        .filter_map(|c| match c {
            Component::Normal(part) => Some(part.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Splits `a/b/c` into (`a/b`, `c`); `None` for the empty path.
fn split_last(rel: &str) -> Option<(&str, &str)> {
    if rel.is_empty() {
        return None;
    }
    Some(rel.rsplit_once('/').unwrap_or(("", rel)))
}

/// Opens the directory `rel` below `base` one component at a time without following links,
/// creating missing components when `create` is set.
fn open_parent(base: BorrowedFd<'_>, rel: &str, create: bool) -> Result<OwnedFd, IdentityError> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY;
    if !create {
        return identity::open_nofollow_in(base, rel, flags);
    }
    let parts = identity::relative_parts(rel)?;
    let mut current = identity::open_nofollow_in(base, "", flags)?;
    let mut walked = String::new();
    for part in parts {
        if !walked.is_empty() {
            walked.push('/');
        }
        walked.push_str(part);
        match mkdirat(&current, part, Mode::from_bits_truncate(0o777)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(errno) => {
                return Err(IdentityError::Open {
                    component: walked,
                    errno,
                });
            }
        }
        current =
            identity::open_nofollow_in(current.as_fd(), part, flags).map_err(|e| match e {
                IdentityError::Symlink { .. } => IdentityError::Symlink {
                    component: walked.clone(),
                },
                IdentityError::NotDirectory { .. } => IdentityError::NotDirectory {
                    component: walked.clone(),
                },
                other => other,
            })?;
    }
    Ok(current)
}

/// A temporary name beside `name`, unique within this process and unlikely to collide with
/// another (the pid is part of it; creation is `O_EXCL` anyway).
fn temp_name(name: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let stem: String = name.chars().take(64).collect();
    format!(".{stem}.rho-write-{}-{n}", std::process::id())
}

/// Makes a rename durable. A failure is logged and not an error: the new content is in
/// place either way.
fn sync_dir(dir: BorrowedFd<'_>) {
    if let Err(err) = nix::unistd::fsync(dir) {
        tracing::debug!(error = %err, "fsync of a directory after a write failed");
    }
}

fn io_error(action: &'static str, path: &ResolvedPath, source: io::Error) -> FileAccessError {
    FileAccessError::Io {
        action,
        path: path.given.clone(),
        source,
    }
}

fn walk_error(path: &ResolvedPath, source: IdentityError) -> FileAccessError {
    FileAccessError::Walk {
        path: path.given.clone(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        (dir, ws)
    }

    #[test]
    fn resolve_keeps_inside_paths_relative_and_normalizes_dots() {
        let (_dir, ws) = workspace();
        let p = ws.resolve("path", "src/./a/../b.rs").unwrap();
        assert_eq!(p.location, Location::Inside("src/b.rs".to_owned()));
        assert_eq!(ws.resolve("path", ".").unwrap().display(), ".");
        let abs = ws.root().join("x/y");
        let p = ws.resolve("path", abs.to_str().unwrap()).unwrap();
        assert_eq!(p.location, Location::Inside("x/y".to_owned()));
    }

    #[test]
    fn resolve_reports_outside_paths_and_bad_input() {
        let (_dir, ws) = workspace();
        let p = ws.resolve("path", "../elsewhere").unwrap();
        assert!(matches!(p.location, Location::Outside(_)));
        assert!(matches!(
            ws.resolve_inside("path", "../../etc/passwd"),
            Err(FileAccessError::OutsideWorkspace { .. })
        ));
        assert!(matches!(
            ws.resolve("path", ""),
            Err(FileAccessError::EmptyPath { field: "path" })
        ));
        assert!(matches!(
            ws.resolve("path", "a\0b"),
            Err(FileAccessError::NulInPath { .. })
        ));
    }

    #[test]
    fn atomic_write_creates_parents_keeps_mode_and_refuses_links() {
        let (dir, ws) = workspace();
        let p = ws.resolve("path", "new/dir/file.txt").unwrap();
        assert!(matches!(
            ws.write_atomic(&p, b"x", false),
            Err(FileAccessError::Walk { .. })
        ));
        let out = ws.write_atomic(&p, b"hello", true).unwrap();
        assert!(out.created);
        assert_eq!(
            std::fs::read(dir.path().join("new/dir/file.txt")).unwrap(),
            b"hello"
        );

        let exe = dir.path().join("run.sh");
        std::fs::write(&exe, "old").unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o750)).unwrap();
        let p = ws.resolve("path", "run.sh").unwrap();
        assert!(!ws.write_atomic(&p, b"new", false).unwrap().created);
        let meta = std::fs::metadata(&exe).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o750);
        assert_eq!(std::fs::read(&exe).unwrap(), b"new");

        std::os::unix::fs::symlink(&exe, dir.path().join("link")).unwrap();
        let p = ws.resolve("path", "link").unwrap();
        assert!(matches!(
            ws.write_atomic(&p, b"through the link", false),
            Err(FileAccessError::WrongKind {
                kind: "a symbolic link",
                ..
            })
        ));
        assert_eq!(std::fs::read(&exe).unwrap(), b"new");
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| !n.contains("rho-write")), "{names:?}");
    }

    #[test]
    fn links_on_the_way_are_refused_for_reads_and_writes() {
        let (dir, ws) = workspace();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
        let p = ws.resolve("path", "out/secret").unwrap();
        let err = ws.open_file(&p).unwrap_err();
        assert!(
            matches!(
                &err,
                FileAccessError::Walk {
                    source: IdentityError::Symlink { .. },
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(ws.write_atomic(&p, b"x", true).is_err());
        assert_eq!(std::fs::read(outside.path().join("secret")).unwrap(), b"s");
    }

    #[test]
    fn write_class_is_tracked_only_for_indexed_regular_files() {
        let (dir, ws) = workspace();
        let git = |args: &[&str]| {
            let status = std::process::Command::new("git")
                .args(args)
                .current_dir(dir.path())
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .output()
                .unwrap();
            assert!(status.status.success(), "git {args:?}: {status:?}");
        };
        git(&["init", "-q"]);
        std::fs::write(dir.path().join("tracked.txt"), "t").unwrap();
        std::fs::write(dir.path().join("untracked.txt"), "u").unwrap();
        std::os::unix::fs::symlink("tracked.txt", dir.path().join("link")).unwrap();
        git(&["add", "tracked.txt", "link"]);
        let class = |p: &str| ws.write_class(&ws.resolve("path", p).unwrap());
        assert_eq!(class("tracked.txt"), OperationClass::TrackedWorkspaceEdit);
        assert_eq!(class("untracked.txt"), OperationClass::OtherWrite);
        assert_eq!(class("missing.txt"), OperationClass::OtherWrite);
        assert_eq!(class("link"), OperationClass::OtherWrite);
        assert_eq!(class(".git/config"), OperationClass::OtherWrite);
        assert_eq!(class("../x"), OperationClass::OtherWrite);
    }
}
