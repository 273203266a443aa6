//! The last Claude rate-limit windows observed during claude-cli runs, kept in
//! `$RHO_HOME/limits/claude.json` and shown by `rho limits`.
//!
//! Invariant: only what a run reported is kept (window, status, reset time, when observed);
//! nothing is estimated, and no run is started just to probe.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::stream::RateLimitObservation;
use crate::paths::RhoHome;
use crate::runtime::delegation::DelegationError;
use crate::runtime::delegation::status::unix_now;
use crate::workflow::store::StoreError;
use crate::workflow::store::fs::PrivateDir;

/// The directory under `$RHO_HOME`.
pub const LIMITS_DIR: &str = "limits";
/// The file in it.
pub const CLAUDE_LIMITS_FILE: &str = "claude.json";
const LIMITS_FILE_LIMIT: u64 = 1024 * 1024;

/// One observed window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedWindow {
    /// `allowed`, `allowed_warning` or `rejected`.
    pub status: String,
    /// Unix seconds when it resets, when reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resets_at: Option<u64>,
    /// Unix seconds when it was observed.
    pub observed_at: u64,
}

/// Every window observed so far, by name (`unnamed` when Claude named none).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedLimits {
    /// The windows.
    pub windows: BTreeMap<String, ObservedWindow>,
}

/// Reads the observed windows; empty when none was ever recorded.
pub fn load(home: &RhoHome) -> Result<ObservedLimits, DelegationError> {
    let Some(root) = PrivateDir::open_home(home.root(), false)? else {
        return Ok(ObservedLimits::default());
    };
    let Some(dir) = root.open_private_dir(LIMITS_DIR)? else {
        return Ok(ObservedLimits::default());
    };
    let bytes = match dir.read_private(CLAUDE_LIMITS_FILE, LIMITS_FILE_LIMIT) {
        Ok(bytes) => bytes,
        Err(StoreError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(ObservedLimits::default());
        }
        Err(e) => return Err(e.into()),
    };
    serde_json::from_slice(&bytes).map_err(|e| DelegationError::CorruptStatus {
        path: dir.entry_path(CLAUDE_LIMITS_FILE),
        problem: e.to_string(),
    })
}

/// Merges `observed` (latest wins per window) into the stored windows.
pub fn record(home: &RhoHome, observed: &[RateLimitObservation]) -> Result<(), DelegationError> {
    let mut limits = load(home)?;
    let now = unix_now();
    for o in observed {
        limits.windows.insert(
            o.window.clone().unwrap_or_else(|| "unnamed".to_owned()),
            ObservedWindow {
                status: o.status.clone(),
                resets_at: o.resets_at,
                observed_at: now,
            },
        );
    }
    let root = PrivateDir::open_home(home.root(), true)?
        .ok_or_else(|| StoreError::io("open", home.root(), nix::errno::Errno::ENOENT))?;
    let dir = root.ensure_private_dir(LIMITS_DIR)?;
    let mut bytes = serde_json::to_vec_pretty(&limits).map_err(DelegationError::Encode)?;
    bytes.push(b'\n');
    dir.write_atomic(CLAUDE_LIMITS_FILE, &bytes)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_observed_means_nothing_shown_and_latest_wins() {
        let dir = tempfile::tempdir().unwrap();
        let home = RhoHome::at(dir.path().join("h"), None);
        assert!(load(&home).unwrap().windows.is_empty());
        let first = RateLimitObservation {
            window: Some("five_hour".into()),
            status: "allowed".into(),
            resets_at: Some(10),
        };
        record(&home, std::slice::from_ref(&first)).unwrap();
        let second = RateLimitObservation {
            status: "allowed_warning".into(),
            ..first
        };
        record(&home, &[second]).unwrap();
        let limits = load(&home).unwrap();
        assert_eq!(limits.windows.len(), 1);
        assert_eq!(limits.windows["five_hour"].status, "allowed_warning");
    }
}
