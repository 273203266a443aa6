//! Private-directory primitives for the store: create and open directories and files
//! relative to directory descriptors without following links, check owner and mode of every
//! entry, write files atomically (temporary name, write, fsync, rename, directory fsync), and
//! remove trees without leaving the store.
//!
//! Invariant: a [`PrivateDir`] always holds a descriptor of a directory that was checked
//! (not a link, owned by the effective user, no group or other permission bits); every
//! operation goes through that descriptor, never through the path again, which is kept only
//! for messages.

use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat, renameat};
use nix::sys::stat::{Mode, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, fsync, geteuid, unlinkat};

use super::StoreError;
use crate::workflow::identity::FileFacts;

/// Prefix of names that are work in progress (temporary files and directories, trees being
/// deleted); listings skip them.
pub const TEMP_PREFIX: &str = ".tmp-";

/// A checked private directory of the store.
#[derive(Debug)]
pub struct PrivateDir {
    /// Shared with whoever holds [`PrivateDir::shared_fd`].
    fd: std::sync::Arc<OwnedFd>,
    path: PathBuf,
}

/// What an entry of a private directory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A directory.
    Directory,
    /// A regular file.
    File,
}

fn current_uid() -> u32 {
    geteuid().as_raw()
}

/// Checks owner and permission bits of an entry (its type is checked by the caller).
pub fn check_private(path: &Path, facts: &FileFacts) -> Result<(), StoreError> {
    if facts.is_symlink() {
        return Err(StoreError::Symlink {
            path: path.to_owned(),
        });
    }
    let uid = current_uid();
    if facts.uid != uid {
        return Err(StoreError::ForeignOwner {
            path: path.to_owned(),
            owner: facts.uid,
            expected: uid,
        });
    }
    if facts.permissions() & 0o077 != 0 {
        return Err(StoreError::Permissions {
            path: path.to_owned(),
            mode: facts.permissions(),
        });
    }
    Ok(())
}

impl PrivateDir {
    /// Opens (creating with 0700 when missing, parents included) the data directory at
    /// `root`. The data directory may be reached through a link the user chose, but it must
    /// be a directory owned by the current user that the group and others cannot write.
    pub fn open_home(root: &Path, create: bool) -> Result<Option<Self>, StoreError> {
        if create {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(root)
                .map_err(|e| StoreError::io("create", root, e))?;
        }
        let fd = match openat(
            nix::fcntl::AT_FDCWD,
            root,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) if !create => return Ok(None),
            Err(Errno::ENOTDIR) => {
                return Err(StoreError::WrongType {
                    path: root.to_owned(),
                    expected: "directory",
                });
            }
            Err(e) => return Err(StoreError::io("open", root, e)),
        };
        let facts = FileFacts::of(fd.as_fd()).map_err(|e| StoreError::io("inspect", root, e))?;
        let uid = current_uid();
        if facts.uid != uid {
            return Err(StoreError::ForeignOwner {
                path: root.to_owned(),
                owner: facts.uid,
                expected: uid,
            });
        }
        if facts.permissions() & 0o022 != 0 {
            return Err(StoreError::Permissions {
                path: root.to_owned(),
                mode: facts.permissions(),
            });
        }
        Ok(Some(Self {
            fd: std::sync::Arc::new(fd),
            path: root.to_owned(),
        }))
    }

    /// The directory's path (for messages only).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory's descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The directory's descriptor, for a holder that may outlive this value (the same open
    /// directory, not a path to it).
    pub fn shared_fd(&self) -> std::sync::Arc<OwnedFd> {
        std::sync::Arc::clone(&self.fd)
    }

    /// The path of an entry (for messages only).
    pub fn entry_path(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Opens the private subdirectory `name`, creating it (0700) when missing.
    pub fn ensure_private_dir(&self, name: &str) -> Result<PrivateDir, StoreError> {
        match mkdirat(self.fd(), name, Mode::from_bits_truncate(0o700)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(StoreError::io("create", self.entry_path(name), e)),
        }
        self.open_private_dir(name)?
            .ok_or_else(|| StoreError::io("open", self.entry_path(name), Errno::ENOENT))
    }

    /// Creates the private subdirectory `name`; fails when it exists.
    pub fn create_private_dir(&self, name: &str) -> Result<PrivateDir, StoreError> {
        mkdirat(self.fd(), name, Mode::from_bits_truncate(0o700))
            .map_err(|e| StoreError::io("create", self.entry_path(name), e))?;
        self.open_private_dir(name)?
            .ok_or_else(|| StoreError::io("open", self.entry_path(name), Errno::ENOENT))
    }

    /// Opens the private subdirectory `name`; `None` when it does not exist.
    pub fn open_private_dir(&self, name: &str) -> Result<Option<PrivateDir>, StoreError> {
        let path = self.entry_path(name);
        let fd = match openat(
            self.fd(),
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(None),
            Err(Errno::ELOOP | Errno::ENOTDIR) => {
                return Err(match self.check_entry(name) {
                    Ok(_) => StoreError::WrongType {
                        path,
                        expected: "directory",
                    },
                    Err(e) => e,
                });
            }
            Err(e) => return Err(StoreError::io("open", path, e)),
        };
        let facts = FileFacts::of(fd.as_fd()).map_err(|e| StoreError::io("inspect", &path, e))?;
        check_private(&path, &facts)?;
        Ok(Some(PrivateDir {
            fd: std::sync::Arc::new(fd),
            path,
        }))
    }

    /// Checks the entry `name` without following it: not a link, owned by the current user,
    /// private; returns its kind. Other kinds (sockets, devices, fifos) are rejected.
    pub fn check_entry(&self, name: &str) -> Result<EntryKind, StoreError> {
        let path = self.entry_path(name);
        let st = fstatat(self.fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .map_err(|e| StoreError::io("inspect", &path, e))?;
        let facts = FileFacts::from_stat(&st);
        check_private(&path, &facts)?;
        if facts.is_dir() {
            Ok(EntryKind::Directory)
        } else if facts.is_regular() {
            Ok(EntryKind::File)
        } else {
            Err(StoreError::WrongType {
                path,
                expected: "regular file or directory",
            })
        }
    }

    /// Names in this directory, sorted, without `.`/`..` and without work-in-progress names
    /// ([`TEMP_PREFIX`]).
    pub fn list_entries(&self) -> Result<Vec<String>, StoreError> {
        let mut dir = nix::dir::Dir::openat(
            self.fd(),
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| StoreError::io("list", &self.path, e))?;
        let mut names = Vec::new();
        for entry in dir.iter() {
            let entry = entry.map_err(|e| StoreError::io("list", &self.path, e))?;
            let Ok(name) = entry.file_name().to_str() else {
                return Err(StoreError::Corrupt {
                    path: self.path.clone(),
                    problem: "an entry name is not UTF-8".to_owned(),
                });
            };
            if name == "." || name == ".." || name.starts_with(TEMP_PREFIX) {
                continue;
            }
            names.push(name.to_owned());
        }
        names.sort();
        Ok(names)
    }

    /// Creates the new file `name` (0600, failing if it exists) and writes `bytes`; the file
    /// is returned open so the caller can sync it (or batch the syncs of several files).
    pub fn create_file(&self, name: &str, bytes: &[u8]) -> Result<File, StoreError> {
        let path = self.entry_path(name);
        let fd = openat(
            self.fd(),
            name,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(|e| StoreError::io("create", &path, e))?;
        let mut file = File::from(fd);
        file.write_all(bytes)
            .map_err(|e| StoreError::io("write", &path, e))?;
        Ok(file)
    }

    /// Replaces (or creates) the file `name` atomically: a temporary name in this directory,
    /// write, fsync, rename over `name`, fsync of the directory. Readers see the old content
    /// or the new one, never a mix, and the new content survives a crash once this returns.
    pub fn write_atomic(&self, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        if let Err(e) = self.check_entry(name) {
            // Refuse to replace a link or a foreign entry; a missing entry is fine.
            if !matches!(&e, StoreError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
            {
                return Err(e);
            }
        }
        let temp = format!("{TEMP_PREFIX}{}-{name}", super::ids::new_id());
        let file = self.create_file(&temp, bytes)?;
        let result = file
            .sync_all()
            .map_err(|e| StoreError::io("sync", self.entry_path(&temp), e))
            .and_then(|()| {
                crate::workflow::crashpoint::reached("store:rename");
                self.rename(&temp, name)
            });
        if result.is_err() {
            let _ = unlinkat(self.fd(), temp.as_str(), UnlinkatFlags::NoRemoveDir);
            return result;
        }
        self.sync()
    }

    /// Reads the private regular file `name` (at most `limit` bytes).
    pub fn read_private(&self, name: &str, limit: u64) -> Result<Vec<u8>, StoreError> {
        let path = self.entry_path(name);
        let fd = match openat(
            self.fd(),
            name,
            // Non-blocking: opening a FIFO put in a file's place must not hang; its type is
            // refused below.
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::ELOOP) => return Err(StoreError::Symlink { path }),
            Err(e) => return Err(StoreError::io("read", path, e)),
        };
        let facts = FileFacts::of(fd.as_fd()).map_err(|e| StoreError::io("inspect", &path, e))?;
        check_private(&path, &facts)?;
        if !facts.is_regular() {
            return Err(StoreError::WrongType {
                path,
                expected: "regular file",
            });
        }
        if facts.size > limit {
            return Err(StoreError::TooLarge { path, limit });
        }
        let mut bytes = Vec::with_capacity(usize::try_from(facts.size).unwrap_or(0));
        File::from(fd)
            .take(limit + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| StoreError::io("read", &path, e))?;
        if bytes.len() as u64 > limit {
            return Err(StoreError::TooLarge { path, limit });
        }
        Ok(bytes)
    }

    /// Renames `from` to `to` inside this directory (no directory sync).
    pub fn rename(&self, from: &str, to: &str) -> Result<(), StoreError> {
        renameat(self.fd(), from, self.fd(), to)
            .map_err(|e| StoreError::io("rename", self.entry_path(from), e))
    }

    /// Renames `from` to `to` only when `to` does not exist (`RENAME_NOREPLACE`).
    pub fn rename_noreplace(&self, from: &str, to: &str) -> Result<(), StoreError> {
        match nix::fcntl::renameat2(
            self.fd(),
            from,
            self.fd(),
            to,
            nix::fcntl::RenameFlags::RENAME_NOREPLACE,
        ) {
            // Filesystems without RENAME_NOREPLACE: ids are random, so a check is enough.
            Err(Errno::EINVAL) => match fstatat(self.fd(), to, AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(_) => Err(StoreError::io(
                    "rename",
                    self.entry_path(from),
                    Errno::EEXIST,
                )),
                Err(_) => self.rename(from, to),
            },
            result => result.map_err(|e| StoreError::io("rename", self.entry_path(from), e)),
        }
    }

    /// Flushes the directory itself (new, renamed and removed names) to disk.
    pub fn sync(&self) -> Result<(), StoreError> {
        fsync(self.fd()).map_err(|e| StoreError::io("sync", &self.path, e))
    }

    /// Removes the entry `name` and, for a directory, everything below it, without
    /// following links (a link found inside is removed as a link, never followed).
    pub fn remove_tree(&self, name: &str) -> Result<(), StoreError> {
        let path = self.entry_path(name);
        let st = fstatat(self.fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .map_err(|e| StoreError::io("inspect", &path, e))?;
        if FileFacts::from_stat(&st).is_dir() {
            let fd = openat(
                self.fd(),
                name,
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| StoreError::io("open", &path, e))?;
            let child = PrivateDir {
                fd: std::sync::Arc::new(fd),
                path: path.clone(),
            };
            for entry in child.all_entries()? {
                child.remove_tree(&entry)?;
            }
            unlinkat(self.fd(), name, UnlinkatFlags::RemoveDir)
                .map_err(|e| StoreError::io("remove", &path, e))
        } else {
            unlinkat(self.fd(), name, UnlinkatFlags::NoRemoveDir)
                .map_err(|e| StoreError::io("remove", &path, e))
        }
    }

    /// Every name in the directory, temporary ones included.
    fn all_entries(&self) -> Result<Vec<String>, StoreError> {
        let mut dir = nix::dir::Dir::openat(
            self.fd(),
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| StoreError::io("list", &self.path, e))?;
        let mut names = Vec::new();
        for entry in dir.iter() {
            let entry = entry.map_err(|e| StoreError::io("list", &self.path, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name != "." && name != ".." {
                names.push(name);
            }
        }
        Ok(names)
    }
}

/// Syncs several open files, in parallel: concurrent fsyncs on one filesystem share journal
/// commits, so N files cost about one sync instead of N.
pub fn sync_files(files: &[(PathBuf, File)]) -> Result<(), StoreError> {
    if files.len() <= 1 {
        for (path, file) in files {
            file.sync_all()
                .map_err(|e| StoreError::io("sync", path, e))?;
        }
        return Ok(());
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> = files
            .iter()
            .map(|(path, file)| {
                scope.spawn(move || file.sync_all().map_err(|e| StoreError::io("sync", path, e)))
            })
            .collect();
        let mut first_error = None;
        for handle in handles {
            let result = handle.join().unwrap_or_else(|_| {
                Err(StoreError::io(
                    "sync",
                    PathBuf::new(),
                    io::Error::other("sync thread panicked"),
                ))
            });
            if let Err(e) = result {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{PermissionsExt as _, symlink};

    use super::*;

    fn home() -> (tempfile::TempDir, PrivateDir) {
        let dir = tempfile::tempdir().unwrap();
        let home = PrivateDir::open_home(&dir.path().join("home"), true)
            .unwrap()
            .unwrap();
        (dir, home)
    }

    #[test]
    fn created_entries_are_private() {
        let (_tmp, home) = home();
        let sub = home.ensure_private_dir("workflows").unwrap();
        sub.write_atomic("f.json", b"{}").unwrap();
        let meta = std::fs::metadata(sub.path().join("f.json")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let meta = std::fs::metadata(sub.path()).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        assert_eq!(sub.read_private("f.json", 10).unwrap(), b"{}");
        assert_eq!(sub.list_entries().unwrap(), vec!["f.json".to_owned()]);
    }

    #[test]
    fn atomic_write_replaces_content_and_leaves_no_temp_file() {
        let (_tmp, home) = home();
        home.write_atomic("a", b"one").unwrap();
        home.write_atomic("a", b"two").unwrap();
        assert_eq!(home.read_private("a", 10).unwrap(), b"two");
        assert_eq!(home.all_entries().unwrap(), vec!["a".to_owned()]);
    }

    #[test]
    fn a_fifo_in_a_files_place_is_refused_without_hanging() {
        let (_tmp, home) = home();
        for name in ["graph.json", "manifest.json", "state.json", "trust.json"] {
            nix::unistd::mkfifo(
                &home.entry_path(name),
                nix::sys::stat::Mode::from_bits_truncate(0o600),
            )
            .unwrap();
            assert!(
                matches!(
                    home.read_private(name, 1 << 20),
                    Err(StoreError::WrongType {
                        expected: "regular file",
                        ..
                    })
                ),
                "{name}"
            );
        }
    }

    #[test]
    fn symlinks_and_open_permissions_are_rejected() {
        let (tmp, home) = home();
        std::fs::create_dir(tmp.path().join("elsewhere")).unwrap();
        symlink(tmp.path().join("elsewhere"), home.path().join("workflows")).unwrap();
        assert!(matches!(
            home.ensure_private_dir("workflows"),
            Err(StoreError::Symlink { .. })
        ));
        symlink("/etc/passwd", home.path().join("file")).unwrap();
        assert!(matches!(
            home.read_private("file", 10_000),
            Err(StoreError::Symlink { .. })
        ));
        assert!(matches!(
            home.write_atomic("file", b"x"),
            Err(StoreError::Symlink { .. })
        ));

        let open = home.ensure_private_dir("open").unwrap();
        std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(matches!(
            home.open_private_dir("open"),
            Err(StoreError::Permissions { mode: 0o755, .. })
        ));
        std::fs::write(home.path().join("loose"), b"x").unwrap();
        std::fs::set_permissions(
            home.path().join("loose"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        assert!(matches!(
            home.read_private("loose", 10),
            Err(StoreError::Permissions { .. })
        ));
    }

    #[test]
    fn remove_tree_removes_links_without_following_them() {
        let (tmp, home) = home();
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), b"x").unwrap();
        let t = home.ensure_private_dir("t").unwrap();
        let s = t.ensure_private_dir("s").unwrap();
        s.write_atomic("f", b"1").unwrap();
        symlink(&outside, t.path().join("link")).unwrap();
        home.remove_tree("t").unwrap();
        assert!(!home.path().join("t").exists());
        assert!(outside.join("keep").exists());
    }
}
