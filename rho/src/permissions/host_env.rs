//! A snapshot of the host's environment variables, taken once per process.
//!
//! Invariant: the permission layer reads variables (the mode, trust overrides, what hooks may
//! see) only through a snapshot, so what a hook receives is decided from one consistent view
//! and tests can supply their own without mutating the process environment.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fmt;

/// Environment variables by name; names that are not UTF-8 are left out (no setting `rho`
/// reads and no variable a hook can ask for has such a name).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct HostEnvironment {
    vars: BTreeMap<String, OsString>,
}

/// Lists names only: values may be secrets and must not reach logs.
impl fmt::Debug for HostEnvironment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.vars.keys()).finish()
    }
}

impl HostEnvironment {
    /// The current process environment.
    pub fn current() -> Self {
        Self::from_vars(std::env::vars_os())
    }

    /// An explicit set of variables.
    pub fn from_vars<K, V>(vars: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<OsString>,
        V: Into<OsString>,
    {
        let vars = vars
            .into_iter()
            .filter_map(|(k, v)| k.into().into_string().ok().map(|k| (k, v.into())))
            .collect();
        HostEnvironment { vars }
    }

    /// The value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&OsStr> {
        self.vars.get(name).map(OsString::as_os_str)
    }

    /// An owned copy of `name`'s value, in the shape `rho_policy::hook_environment` wants.
    pub fn lookup(&self, name: &str) -> Option<OsString> {
        self.vars.get(name).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_finds_only_set_names() {
        let env = HostEnvironment::from_vars([("A", "1"), ("B", "")]);
        assert_eq!(env.get("A"), Some(OsStr::new("1")));
        assert_eq!(env.lookup("B"), Some(OsString::new()));
        assert_eq!(env.get("C"), None);
    }

    #[test]
    fn debug_output_shows_names_but_never_values() {
        let env = HostEnvironment::from_vars([("API_TOKEN", "hunter2")]);
        let shown = format!("{env:?}");
        assert!(
            shown.contains("API_TOKEN") && !shown.contains("hunter2"),
            "{shown}"
        );
    }
}
