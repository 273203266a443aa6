//! Where things live: the data directory (`RHO_HOME`, else `~/.rho`) and the workspace (the
//! canonical path of the directory `rho` runs in).
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

/// The canonical path of the current directory: the workspace `rho` works on.
pub fn current_workspace() -> Result<PathBuf, PathsError> {
    let cwd = std::env::current_dir().map_err(PathsError::CurrentDir)?;
    cwd.canonicalize().map_err(PathsError::CurrentDir)
}
