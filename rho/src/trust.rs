//! The host side of project trust: reading and writing `$RHO_HOME/trust.json` (the
//! `rho_policy` model) through the store's private-file primitives, and combining it with the
//! one-process overrides (`RHO_TRUST_PROJECT_AGENTS`, `RHO_TRUST_PROJECT_HOOKS`).
//!
//! Invariant: `trust.json` grants authority, so it is read only when it is a private regular
//! file owned by the current user (not a link), and replaced only atomically.

use std::path::{Path, PathBuf};

use rho_policy::{CurrentTrust, PolicyError, TrustOverrides, TrustStore};

use crate::paths::RhoHome;
use crate::workflow::store::StoreError;
use crate::workflow::store::fs::PrivateDir;

/// The trust file's name in the data directory.
pub const TRUST_FILE: &str = "trust.json";

/// Largest trust file read.
const MAX_TRUST_BYTES: u64 = 16 * 1024 * 1024;

/// Why trust could not be read or changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrustError {
    /// The trust file could not be read or written safely.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The trust file's content, or a path offered to it, is invalid.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// A workspace path could not be canonicalized.
    #[error("cannot resolve the workspace path {}", path.display())]
    Canonicalize {
        /// The path given.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// `$RHO_HOME/trust.json`.
pub fn trust_file(home: &RhoHome) -> PathBuf {
    home.root().join(TRUST_FILE)
}

/// Reads the trust store; a missing data directory or file is the empty store.
pub fn load(home: &RhoHome) -> Result<TrustStore, TrustError> {
    let Some(root) = PrivateDir::open_home(home.root(), false)? else {
        return Ok(TrustStore::new());
    };
    match root.read_private(TRUST_FILE, MAX_TRUST_BYTES) {
        Ok(bytes) => Ok(TrustStore::from_json(&trust_file(home), &bytes)?),
        Err(StoreError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Ok(TrustStore::new())
        }
        Err(e) => Err(e.into()),
    }
}

/// Writes the trust store atomically (0600).
pub fn save(home: &RhoHome, store: &TrustStore) -> Result<(), TrustError> {
    let root = PrivateDir::open_home(home.root(), true)?.ok_or_else(|| {
        StoreError::io(
            "create",
            home.root(),
            std::io::Error::from(std::io::ErrorKind::NotFound),
        )
    })?;
    root.write_atomic(TRUST_FILE, store.to_json().as_bytes())?;
    Ok(())
}

/// Canonicalizes a workspace path for the trust store.
pub fn canonical_workspace(path: &Path) -> Result<PathBuf, TrustError> {
    std::fs::canonicalize(path).map_err(|source| TrustError::Canonicalize {
        path: path.to_owned(),
        source,
    })
}

/// The overrides of this process.
pub fn overrides_from_env() -> TrustOverrides {
    let agents = std::env::var("RHO_TRUST_PROJECT_AGENTS").ok();
    let hooks = std::env::var("RHO_TRUST_PROJECT_HOOKS").ok();
    TrustOverrides::from_env_values(agents.as_deref(), hooks.as_deref())
}

/// The trust this process has for the canonical `workspace`.
pub fn current(
    home: &RhoHome,
    workspace: &Path,
    overrides: TrustOverrides,
) -> Result<CurrentTrust, TrustError> {
    let store = load(home)?;
    Ok(CurrentTrust::resolve(
        &store,
        workspace.to_owned(),
        overrides,
    ))
}

#[cfg(test)]
mod tests {
    use rho_policy::TrustKind;

    use super::*;

    #[test]
    fn trust_round_trips_through_a_private_file() {
        use std::os::unix::fs::PermissionsExt as _;

        let dir = tempfile::tempdir().unwrap();
        let home = RhoHome::at(dir.path().join("home"), None);
        assert_eq!(load(&home).unwrap(), TrustStore::new());
        let ws = dir.path().canonicalize().unwrap();
        let mut store = load(&home).unwrap();
        assert!(store.add(ws.clone()).unwrap());
        save(&home, &store).unwrap();
        let current = current(&home, &ws, TrustOverrides::default()).unwrap();
        assert!(current.allows(TrustKind::ProjectAgents));
        let mode = std::fs::metadata(trust_file(&home))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_world_readable_trust_file_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let home = RhoHome::at(dir.path().join("home"), None);
        save(&home, &TrustStore::new()).unwrap();
        std::fs::set_permissions(trust_file(&home), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        assert!(matches!(
            load(&home),
            Err(TrustError::Store(StoreError::Permissions { .. }))
        ));
    }
}
