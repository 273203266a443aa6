//! Whether git tracks a file, read straight from the repository's index file.
//!
//! Why not `git ls-files`: running git in a workspace runs whatever that repository's
//! configuration says (`core.fsmonitor` is a command), and the workspace is the very thing
//! the permission mode does not trust. Parsing the index (formats 2, 3 and 4) is small,
//! needs no process, and is what "known to git" means.
//!
//! Invariant: anything this parser does not fully understand (a split index, an unknown
//! version, a truncated entry, a hash size it cannot determine) is an error, and callers
//! treat an error as "not tracked" — the answer that asks first.

use std::fs;
use std::io::Read as _;
use std::path::{Path, PathBuf};

/// Index files larger than this are not read (a repository of several million files).
const MAX_INDEX_BYTES: u64 = 512 << 20;

/// What the index says about one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrackedState {
    /// No repository contains the path.
    NoRepository,
    /// The repository's index does not list the path.
    Untracked,
    /// Listed at stage 0 as a regular file (mode 100644 or 100755), fully tracked.
    TrackedFile,
    /// Listed, but not as a plainly tracked regular file: a symbolic link, a submodule, a
    /// sparse directory, an intent-to-add or skip-worktree entry, or a merge conflict.
    TrackedOther,
}

/// Why the index could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GitIndexError {
    /// Reading a repository file failed.
    #[error("cannot read `{}`", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The index is not in a format this parser accepts.
    #[error("`{}`: {problem}", path.display())]
    Format {
        /// The index file.
        path: PathBuf,
        /// What is wrong or unsupported.
        problem: String,
    },
}

/// The repository holding a file: its per-worktree git directory and the worktree root.
#[derive(Debug, PartialEq, Eq)]
struct Repository {
    worktree: PathBuf,
    git_dir: PathBuf,
    common_dir: PathBuf,
}

/// What the index of the innermost repository containing `file` (an absolute, normalized
/// path) says about it.
pub fn tracked_state(file: &Path) -> Result<TrackedState, GitIndexError> {
    let Some(repo) = find_repository(file)? else {
        return Ok(TrackedState::NoRepository);
    };
    let Ok(rel) = file.strip_prefix(&repo.worktree) else {
        return Ok(TrackedState::NoRepository);
    };
    let Some(rel) = rel.to_str() else {
        return Ok(TrackedState::Untracked);
    };
    let hash_len = hash_len(&repo.common_dir)?;
    let index_path = repo.git_dir.join("index");
    let bytes = match read_bounded(&index_path) {
        Ok(bytes) => bytes,
        // A fresh repository has no index yet: nothing is tracked.
        Err(GitIndexError::Read { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            return Ok(TrackedState::Untracked);
        }
        Err(err) => return Err(err),
    };
    lookup(&bytes, hash_len, rel).map_err(|problem| GitIndexError::Format {
        path: index_path,
        problem,
    })
}

/// Walks up from `file`'s directory to the first directory holding `.git` (a directory, or
/// a `gitdir:` file as in linked worktrees and submodules).
fn find_repository(file: &Path) -> Result<Option<Repository>, GitIndexError> {
    let mut dir = file.parent();
    while let Some(current) = dir {
        let dot_git = current.join(".git");
        match fs::symlink_metadata(&dot_git) {
            Ok(meta) if meta.is_dir() => {
                let common_dir = common_dir(&dot_git)?;
                return Ok(Some(Repository {
                    worktree: current.to_path_buf(),
                    git_dir: dot_git,
                    common_dir,
                }));
            }
            Ok(meta) if meta.is_file() => {
                let text = read_small(&dot_git)?;
                let Some(target) = text.trim_end().strip_prefix("gitdir: ") else {
                    return Err(GitIndexError::Format {
                        path: dot_git,
                        problem: "a `.git` file without a `gitdir:` line".to_owned(),
                    });
                };
                let git_dir = current.join(target);
                let common_dir = common_dir(&git_dir)?;
                return Ok(Some(Repository {
                    worktree: current.to_path_buf(),
                    git_dir,
                    common_dir,
                }));
            }
            _ => dir = current.parent(),
        }
    }
    Ok(None)
}

/// The common directory of a (possibly linked) git directory: where `config` lives.
fn common_dir(git_dir: &Path) -> Result<PathBuf, GitIndexError> {
    let file = git_dir.join("commondir");
    match fs::read_to_string(&file) {
        Ok(text) => Ok(git_dir.join(text.trim_end())),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(git_dir.to_path_buf()),
        Err(source) => Err(GitIndexError::Read { path: file, source }),
    }
}

/// 20 for SHA-1 repositories, 32 when `extensions.objectFormat = sha256`.
fn hash_len(common_dir: &Path) -> Result<usize, GitIndexError> {
    let config = common_dir.join("config");
    let text = match fs::read_to_string(&config) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(20),
        Err(source) => {
            return Err(GitIndexError::Read {
                path: config,
                source,
            });
        }
    };
    let mut in_extensions = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_extensions = line.to_ascii_lowercase().starts_with("[extensions");
        } else if in_extensions
            && let Some((key, value)) = line.split_once('=')
            && key.trim().eq_ignore_ascii_case("objectformat")
        {
            return match value.trim().to_ascii_lowercase().as_str() {
                "sha1" => Ok(20),
                "sha256" => Ok(32),
                other => Err(GitIndexError::Format {
                    path: config,
                    problem: format!("unknown object format `{other}`"),
                }),
            };
        }
    }
    Ok(20)
}

fn read_small(path: &Path) -> Result<String, GitIndexError> {
    let mut text = String::new();
    fs::File::open(path)
        .and_then(|f| f.take(64 * 1024).read_to_string(&mut text))
        .map_err(|source| GitIndexError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(text)
}

fn read_bounded(path: &Path) -> Result<Vec<u8>, GitIndexError> {
    let read_error = |source| GitIndexError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = fs::File::open(path).map_err(read_error)?;
    let len = file.metadata().map_err(read_error)?.len();
    if len > MAX_INDEX_BYTES {
        return Err(GitIndexError::Format {
            path: path.to_path_buf(),
            problem: format!("index of {len} bytes is over the {MAX_INDEX_BYTES}-byte limit"),
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(MAX_INDEX_BYTES)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    Ok(bytes)
}

/// Fixed part of an entry before the object hash: ctime, mtime, dev, ino, mode, uid, gid,
/// size (ten 32-bit fields).
const ENTRY_STAT_BYTES: usize = 40;
const MODE_REGULAR: u32 = 0o100_644;
const MODE_EXECUTABLE: u32 = 0o100_755;
const FLAG_EXTENDED: u16 = 0x4000;
const FLAG_STAGE_MASK: u16 = 0x3000;
const NAME_MASK: u16 = 0x0fff;
const EXT_SKIP_WORKTREE: u16 = 0x4000;
const EXT_INTENT_TO_ADD: u16 = 0x2000;

/// Finds `rel` in the index bytes.
fn lookup(bytes: &[u8], hash_len: usize, rel: &str) -> Result<TrackedState, String> {
    let mut r = Reader { bytes, pos: 0 };
    if r.take(4)? != b"DIRC" {
        return Err("not a git index (bad signature)".to_owned());
    }
    let version = r.u32()?;
    if !(2..=4).contains(&version) {
        return Err(format!("unsupported index version {version}"));
    }
    let count = r.u32()?;
    let mut previous: Vec<u8> = Vec::new();
    let mut found: Option<TrackedState> = None;
    for _ in 0..count {
        let start = r.pos;
        r.take(ENTRY_STAT_BYTES - 16)?; // ctime, mtime, dev, ino
        let mode = r.u32()?;
        r.take(12)?; // uid, gid, size
        r.take(hash_len)?;
        let flags = r.u16()?;
        let extended = if flags & FLAG_EXTENDED != 0 {
            if version < 3 {
                return Err("extended entry flag in a version 2 index".to_owned());
            }
            r.u16()?
        } else {
            0
        };
        let name: Vec<u8> = if version == 4 {
            let strip = r.varint()?;
            let keep = previous
                .len()
                .checked_sub(usize::try_from(strip).map_err(|_| "bad path prefix")?)
                .ok_or("path prefix longer than the previous path")?;
            let suffix = r.until_nul()?;
            let mut name = previous[..keep].to_vec();
            name.extend_from_slice(suffix);
            name
        } else {
            let len = usize::from(flags & NAME_MASK);
            let name = if len < usize::from(NAME_MASK) {
                let name = r.take(len)?.to_vec();
                if r.take(1)? != [0] {
                    return Err("entry name not NUL-terminated".to_owned());
                }
                name
            } else {
                r.until_nul()?.to_vec()
            };
            // Entries are padded with NULs to a multiple of eight bytes.
            let used = r.pos - start;
            let padded = used.div_ceil(8) * 8;
            r.take(padded - used)?;
            name
        };
        if name == rel.as_bytes() {
            let stage = flags & FLAG_STAGE_MASK;
            let plain = stage == 0
                && extended & (EXT_SKIP_WORKTREE | EXT_INTENT_TO_ADD) == 0
                && (mode == MODE_REGULAR || mode == MODE_EXECUTABLE);
            found = Some(match found {
                None if plain => TrackedState::TrackedFile,
                _ => TrackedState::TrackedOther,
            });
        }
        previous = name;
    }
    // A split index keeps most entries in a shared file this parser does not read; an
    // answer from the partial list could be wrong either way.
    while r.bytes.len().saturating_sub(r.pos) > hash_len {
        let signature = r.take(4)?;
        if signature == b"link" {
            return Err("split index (core.splitIndex) is not supported".to_owned());
        }
        let size = usize::try_from(r.u32()?).map_err(|_| "bad extension size")?;
        r.take(size)?;
    }
    Ok(found.unwrap_or(TrackedState::Untracked))
}

struct Reader<'b> {
    bytes: &'b [u8],
    pos: usize,
}

impl<'b> Reader<'b> {
    fn take(&mut self, n: usize) -> Result<&'b [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len())
            .ok_or_else(|| format!("truncated at byte {}", self.pos))?;
        let out = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn u16(&mut self) -> Result<u16, String> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Git's offset varint (each continuation adds one before shifting).
    fn varint(&mut self) -> Result<u64, String> {
        let mut byte = self.take(1)?[0];
        let mut value = u64::from(byte & 0x7f);
        while byte & 0x80 != 0 {
            byte = self.take(1)?[0];
            value = value
                .checked_add(1)
                .and_then(|v| v.checked_mul(128))
                .ok_or("path prefix varint overflows")?
                | u64::from(byte & 0x7f);
        }
        Ok(value)
    }

    fn until_nul(&mut self) -> Result<&'b [u8], String> {
        let rest = &self.bytes[self.pos..];
        let len = rest
            .iter()
            .position(|b| *b == 0)
            .ok_or("entry name not NUL-terminated")?;
        let out = &rest[..len];
        self.pos += len + 1;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }

    fn repo_with_files() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        git(root, &["init", "-q"]);
        std::fs::create_dir_all(root.join("src/deep")).unwrap();
        for f in ["a.txt", "src/lib.rs", "src/deep/mod.rs", "src/deep/mod2.rs"] {
            std::fs::write(root.join(f), f).unwrap();
        }
        std::fs::write(root.join("new.txt"), "n").unwrap();
        git(root, &["add", "a.txt", "src"]);
        dir
    }

    fn state(root: &Path, rel: &str) -> TrackedState {
        tracked_state(&root.canonicalize().unwrap().join(rel)).unwrap()
    }

    #[test]
    fn every_index_version_is_understood() {
        for version in ["2", "3", "4"] {
            let dir = repo_with_files();
            let root = dir.path();
            git(root, &["update-index", "--index-version", version]);
            assert_eq!(
                state(root, "a.txt"),
                TrackedState::TrackedFile,
                "v{version}"
            );
            assert_eq!(
                state(root, "src/deep/mod2.rs"),
                TrackedState::TrackedFile,
                "v{version}"
            );
            assert_eq!(
                state(root, "src/deep/mod.rs"),
                TrackedState::TrackedFile,
                "v{version}"
            );
            assert_eq!(
                state(root, "new.txt"),
                TrackedState::Untracked,
                "v{version}"
            );
            assert_eq!(state(root, "src"), TrackedState::Untracked, "v{version}");
        }
    }

    #[test]
    fn intent_to_add_and_skip_worktree_are_not_plainly_tracked() {
        let dir = repo_with_files();
        let root = dir.path();
        git(root, &["add", "-N", "new.txt"]);
        git(root, &["update-index", "--skip-worktree", "a.txt"]);
        assert_eq!(state(root, "new.txt"), TrackedState::TrackedOther);
        assert_eq!(state(root, "a.txt"), TrackedState::TrackedOther);
    }

    #[test]
    fn no_repository_and_fresh_repository() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), "x").unwrap();
        // The temporary directory may itself sit inside a repository on a developer's
        // machine; only a fresh repository's answer is certain.
        git(dir.path(), &["init", "-q"]);
        assert_eq!(state(dir.path(), "f"), TrackedState::Untracked);
    }

    #[test]
    fn linked_worktrees_read_their_own_index() {
        let dir = repo_with_files();
        let root = dir.path();
        git(root, &["commit", "-q", "-m", "init"]);
        let wt = tempfile::tempdir().unwrap();
        let wt_path = wt.path().join("linked");
        git(root, &["worktree", "add", "-q", wt_path.to_str().unwrap()]);
        assert_eq!(state(&wt_path, "src/lib.rs"), TrackedState::TrackedFile);
        assert_eq!(state(&wt_path, "new.txt"), TrackedState::Untracked);
    }

    #[test]
    fn truncated_or_foreign_indexes_are_errors() {
        assert!(lookup(b"XXXX", 20, "a").is_err());
        let mut bytes = b"DIRC".to_vec();
        bytes.extend_from_slice(&2_u32.to_be_bytes());
        bytes.extend_from_slice(&1_u32.to_be_bytes());
        bytes.extend_from_slice(&[0; 30]);
        assert!(lookup(&bytes, 20, "a").unwrap_err().contains("truncated"));
    }
}
