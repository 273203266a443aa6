//! Where things live: the data directory (`RHO_HOME`, else `~/.rho`) and the workspace, found
//! as git finds a repository: the nearest directory, from the current one upwards, that holds
//! `.rho/`, else the root of the enclosing git repository, else the current directory.
//!
//! Invariant: every path handed out here is absolute; the workspace path is canonical, so
//! digests and lock keys derived from it never depend on how the user spelled it.

use std::path::{Path, PathBuf};

/// Why a location could not be determined.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PathsError {
    /// Neither `RHO_HOME` nor `HOME` is set to an absolute path.
    #[error("cannot find the data directory: set RHO_HOME or HOME to an absolute path")]
    NoHome,
    /// The current directory could not be resolved.
    #[error("cannot resolve the current directory")]
    CurrentDir(#[source] std::io::Error),
}

/// The data directory and the user's home, as resolved for this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RhoHome {
    root: PathBuf,
    user_home: Option<PathBuf>,
}

impl RhoHome {
    /// Resolves `RHO_HOME`, falling back to `$HOME/.rho`.
    pub fn from_env() -> Result<Self, PathsError> {
        let user_home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute());
        let root = match std::env::var_os("RHO_HOME").map(PathBuf::from) {
            Some(p) if p.is_absolute() => p,
            Some(p) => std::env::current_dir()
                .map_err(PathsError::CurrentDir)?
                .join(p),
            None => user_home.as_ref().ok_or(PathsError::NoHome)?.join(".rho"),
        };
        Ok(Self { root, user_home })
    }

    /// A data directory at an explicit location (tests, tools).
    pub fn at(root: impl Into<PathBuf>, user_home: Option<PathBuf>) -> Self {
        Self {
            root: root.into(),
            user_home,
        }
    }

    /// The data directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The user's home directory, when known (for `~/.agents/agents`).
    pub fn user_home(&self) -> Option<&Path> {
        self.user_home.as_deref()
    }

    /// `$RHO_HOME/workflows`.
    pub fn workflows(&self) -> PathBuf {
        self.root.join("workflows")
    }

    /// `$RHO_HOME/config.toml`.
    pub fn config_file(&self) -> PathBuf {
        self.root.join("config.toml")
    }
}

/// The workspace `rho` works on, and where it was found from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    /// The canonical workspace root.
    pub root: PathBuf,
    /// The canonical current directory (the root itself or a directory below it).
    pub cwd: PathBuf,
    /// Why `root` was chosen.
    pub found_by: WorkspaceMarker,
}

/// What marked a directory as the workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkspaceMarker {
    /// It holds `.rho/`.
    RhoDir,
    /// It is the root of a git repository (holds `.git`) and no `.rho/` was found below it.
    GitRoot,
    /// Nothing marked an ancestor: the current directory itself.
    CurrentDir,
}

impl Workspace {
    /// A note for people when the workspace is not the current directory, naming it and why
    /// it was chosen (`None` when they are the same).
    pub fn note(&self) -> Option<String> {
        if self.root == self.cwd {
            return None;
        }
        let why = match self.found_by {
            WorkspaceMarker::RhoDir => "it holds .rho/",
            WorkspaceMarker::GitRoot => "the git repository root; no .rho/ found",
            WorkspaceMarker::CurrentDir => "the current directory",
        };
        Some(format!("using workspace {} ({why})", self.root.display()))
    }

    /// `path` as the user meant it: relative paths are relative to the current directory;
    /// the result is relative to the workspace root when it lies inside it (so labels and
    /// messages stay short), else absolute.
    pub fn user_path(&self, path: &Path) -> PathBuf {
        let absolute = if path.is_absolute() {
            path.to_owned()
        } else {
            self.cwd.join(path)
        };
        let absolute = without_parent_steps(absolute);
        match absolute.strip_prefix(&self.root) {
            Ok(rel) if !rel.as_os_str().is_empty() => rel.to_owned(),
            _ => absolute,
        }
    }
}

/// `path` with its `..` steps resolved through the file system (as the kernel would walk
/// them, symbolic links included) by canonicalizing the directory part; the last component
/// is never opened or resolved, so a FIFO or a missing file is passed on as named. Unchanged
/// when there is no `..` or the directory does not exist.
fn without_parent_steps(path: PathBuf) -> PathBuf {
    if !path
        .components()
        .any(|c| c == std::path::Component::ParentDir)
    {
        return path;
    }
    let resolved = match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => parent.canonicalize().map(|dir| dir.join(name)),
        _ => path.canonicalize(),
    };
    resolved.unwrap_or(path)
}

/// Finds the workspace from the current directory (see the module documentation).
pub fn discover_workspace() -> Result<Workspace, PathsError> {
    let cwd = std::env::current_dir().map_err(PathsError::CurrentDir)?;
    let cwd = cwd.canonicalize().map_err(PathsError::CurrentDir)?;
    Ok(discover_from(&cwd))
}

/// Finds the workspace from the canonical directory `cwd`: the nearest ancestor (itself
/// included) holding a `.rho` directory, else the nearest holding `.git` (a directory, or a
/// file as in a linked worktree), else `cwd`.
pub fn discover_from(cwd: &Path) -> Workspace {
    let found = |root: &Path, found_by| Workspace {
        root: root.to_owned(),
        cwd: cwd.to_owned(),
        found_by,
    };
    for dir in cwd.ancestors() {
        if dir.join(".rho").is_dir() {
            return found(dir, WorkspaceMarker::RhoDir);
        }
    }
    for dir in cwd.ancestors() {
        if dir.join(".git").exists() {
            return found(dir, WorkspaceMarker::GitRoot);
        }
    }
    found(cwd, WorkspaceMarker::CurrentDir)
}

/// The canonical root of the workspace `rho` works on (see [`discover_workspace`]).
pub fn current_workspace() -> Result<PathBuf, PathsError> {
    discover_workspace().map(|w| w.root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_is_the_nearest_rho_dir_then_the_git_root_then_cwd() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let deep = root.join("repo/sub/deeper");
        std::fs::create_dir_all(&deep).unwrap();
        assert_eq!(discover_from(&deep).found_by, WorkspaceMarker::CurrentDir);
        assert_eq!(discover_from(&deep).note(), None);
        std::fs::create_dir(root.join("repo/.git")).unwrap();
        let ws = discover_from(&deep);
        assert_eq!(
            (ws.root.as_path(), ws.found_by),
            (root.join("repo").as_path(), WorkspaceMarker::GitRoot)
        );
        std::fs::create_dir(root.join("repo/sub/.rho")).unwrap();
        let ws = discover_from(&deep);
        assert_eq!(
            (ws.root.as_path(), ws.found_by),
            (root.join("repo/sub").as_path(), WorkspaceMarker::RhoDir)
        );
        assert!(ws.note().unwrap().contains("holds .rho/"));
        assert_eq!(
            ws.user_path(Path::new("x.star")),
            PathBuf::from("deeper/x.star")
        );
        assert_eq!(ws.user_path(Path::new("/etc/x")), PathBuf::from("/etc/x"));
    }
}
