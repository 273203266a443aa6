//! Project trust: the `$RHO_HOME/trust.json` model, the one-process environment overrides,
//! and the check run and resume make against the trust a plan needed.
//!
//! Invariant: trust is only ever granted by an exact canonical workspace path in the store or
//! by an override set to exactly `1`; and [`check_trust`] fails whenever any trust the plan
//! was made with is missing now, so a plan never runs with authority it was not confirmed
//! with.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::PolicyError;

/// The only `version` of `trust.json`.
pub const TRUST_STORE_VERSION: u32 = 1;

/// The trusted workspaces, as stored in `$RHO_HOME/trust.json`:
/// `{"version":1,"workspaces":["/abs/path", ...]}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustStore {
    version: u32,
    workspaces: BTreeSet<PathBuf>,
}

impl Default for TrustStore {
    fn default() -> Self {
        TrustStore {
            version: TRUST_STORE_VERSION,
            workspaces: BTreeSet::new(),
        }
    }
}

impl TrustStore {
    /// An empty store (what a missing `trust.json` means).
    pub fn new() -> Self {
        TrustStore::default()
    }

    /// Parses `trust.json`; `file` is only used in messages.
    pub fn from_json(file: &Path, bytes: &[u8]) -> Result<Self, PolicyError> {
        let format_error = |problem: String| PolicyError::TrustStoreFormat {
            file: file.to_path_buf(),
            problem,
        };
        let store: TrustStore =
            serde_json::from_slice(bytes).map_err(|err| format_error(err.to_string()))?;
        if store.version != TRUST_STORE_VERSION {
            return Err(format_error(format!(
                "unsupported version {}; expected {TRUST_STORE_VERSION}",
                store.version
            )));
        }
        if let Some(bad) = store
            .workspaces
            .iter()
            .find(|p| check_canonical(p).is_err())
        {
            return Err(format_error(format!(
                "workspace `{}` is not an absolute, normalized UTF-8 path",
                bad.display()
            )));
        }
        Ok(store)
    }

    /// The file contents, pretty-printed, paths sorted.
    pub fn to_json(&self) -> String {
        // Every stored path was checked to be UTF-8, so nothing is lost here.
        let workspaces: Vec<serde_json::Value> = self
            .workspaces
            .iter()
            .map(|p| serde_json::Value::from(p.to_string_lossy().into_owned()))
            .collect();
        let value = serde_json::json!({ "version": self.version, "workspaces": workspaces });
        format!("{value:#}\n")
    }

    /// Trusts `workspace` (already canonicalized by the host). Returns whether it was new.
    pub fn add(&mut self, workspace: PathBuf) -> Result<bool, PolicyError> {
        check_canonical(&workspace)?;
        Ok(self.workspaces.insert(workspace))
    }

    /// Stops trusting `workspace`. Returns whether it was trusted.
    pub fn remove(&mut self, workspace: &Path) -> bool {
        self.workspaces.remove(workspace)
    }

    /// Whether exactly this workspace path is trusted (parents and children are not).
    pub fn contains(&self, workspace: &Path) -> bool {
        self.workspaces.contains(workspace)
    }

    /// The trusted paths, sorted.
    pub fn workspaces(&self) -> impl Iterator<Item = &Path> {
        self.workspaces.iter().map(PathBuf::as_path)
    }
}

/// Lexical check that `path` looks like what canonicalization yields: absolute, UTF-8, no `.`
/// or `..` components, no repeated or trailing separators. (Resolving symlinks is I/O and the
/// host's job.)
fn check_canonical(path: &Path) -> Result<(), PolicyError> {
    let rebuilt: PathBuf = path.components().collect();
    let canonical = path.is_absolute()
        && path.to_str().is_some()
        && rebuilt.as_os_str() == path.as_os_str()
        && path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if canonical {
        Ok(())
    } else {
        Err(PolicyError::TrustPathNotCanonical {
            path: path.to_path_buf(),
        })
    }
}

/// One-process trust from the environment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustOverrides {
    /// `RHO_TRUST_PROJECT_AGENTS=1`.
    pub project_agents: bool,
    /// `RHO_TRUST_PROJECT_HOOKS=1`.
    pub project_hooks: bool,
}

impl TrustOverrides {
    /// From the values of `RHO_TRUST_PROJECT_AGENTS` and `RHO_TRUST_PROJECT_HOOKS`. Only
    /// exactly `1` grants trust; `true`, `yes`, ` 1` and everything else do not, so trust is
    /// never granted by a guess at what a value meant.
    pub fn from_env_values(project_agents: Option<&str>, project_hooks: Option<&str>) -> Self {
        TrustOverrides {
            project_agents: env_flag(project_agents),
            project_hooks: env_flag(project_hooks),
        }
    }
}

/// Whether an override variable's value grants trust: exactly `"1"`.
pub fn env_flag(value: Option<&str>) -> bool {
    value == Some("1")
}

/// A kind of project content that follows project trust.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrustKind {
    /// Workflow sources from the project.
    ProjectSources,
    /// Agent definitions from `.agents/agents`.
    ProjectAgents,
    /// `<workspace>/.rho/hooks.toml`.
    ProjectHooks,
}

impl TrustKind {
    /// The environment variable that grants this kind for one process, if any.
    pub const fn override_variable(self) -> Option<&'static str> {
        match self {
            TrustKind::ProjectSources => None,
            TrustKind::ProjectAgents => Some("RHO_TRUST_PROJECT_AGENTS"),
            TrustKind::ProjectHooks => Some("RHO_TRUST_PROJECT_HOOKS"),
        }
    }
}

impl fmt::Display for TrustKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TrustKind::ProjectSources => "project workflow sources",
            TrustKind::ProjectAgents => "project agent definitions",
            TrustKind::ProjectHooks => "project hooks",
        })
    }
}

/// The project trust a plan relied on, recorded with the plan.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustRequirement {
    /// The plan read project workflow sources.
    pub project_sources: bool,
    /// The plan bound project agent definitions.
    pub project_agents: bool,
    /// Project hooks were active when the plan was confirmed.
    pub project_hooks: bool,
}

impl TrustRequirement {
    /// The kinds required, in a fixed order.
    pub fn kinds(&self) -> Vec<TrustKind> {
        [
            (self.project_sources, TrustKind::ProjectSources),
            (self.project_agents, TrustKind::ProjectAgents),
            (self.project_hooks, TrustKind::ProjectHooks),
        ]
        .into_iter()
        .filter_map(|(needed, kind)| needed.then_some(kind))
        .collect()
    }
}

/// The trust this process has for one workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CurrentTrust {
    /// The canonical workspace path.
    pub workspace: PathBuf,
    /// Whether the store trusts it.
    pub workspace_trusted: bool,
    /// Environment overrides of this process.
    pub overrides: TrustOverrides,
}

impl CurrentTrust {
    /// Combines the store and the overrides for `workspace`.
    pub fn resolve(store: &TrustStore, workspace: PathBuf, overrides: TrustOverrides) -> Self {
        CurrentTrust {
            workspace_trusted: store.contains(&workspace),
            workspace,
            overrides,
        }
    }

    /// Whether `kind` of project content may be used now.
    pub fn allows(&self, kind: TrustKind) -> bool {
        self.workspace_trusted
            || match kind {
                TrustKind::ProjectSources => false,
                TrustKind::ProjectAgents => self.overrides.project_agents,
                TrustKind::ProjectHooks => self.overrides.project_hooks,
            }
    }

    /// What a new plan made now would record as needed, given which kinds of project content
    /// exist (`present`): each present kind that is allowed.
    pub fn requirement_for(&self, present: TrustRequirement) -> TrustRequirement {
        TrustRequirement {
            project_sources: present.project_sources && self.allows(TrustKind::ProjectSources),
            project_agents: present.project_agents && self.allows(TrustKind::ProjectAgents),
            project_hooks: present.project_hooks && self.allows(TrustKind::ProjectHooks),
        }
    }
}

/// Run and resume: fails when any trust the plan needed is gone.
pub fn check_trust(required: &TrustRequirement, current: &CurrentTrust) -> Result<(), PolicyError> {
    let missing: Vec<TrustKind> = required
        .kinds()
        .into_iter()
        .filter(|kind| !current.allows(*kind))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(PolicyError::TrustRevoked {
            workspace: current.workspace.clone(),
            missing,
        })
    }
}

/// `a, b, c` for messages.
pub(crate) fn describe_kinds(kinds: &[TrustKind]) -> String {
    kinds
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `, or RHO_TRUST_PROJECT_HOOKS=1 for project hooks` for each missing kind an environment
/// variable can grant.
pub(crate) fn override_hint(kinds: &[TrustKind]) -> String {
    kinds
        .iter()
        .filter_map(|kind| {
            kind.override_variable()
                .map(|var| format!(", or {var}=1 for {kind}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store_with(paths: &[&str]) -> TrustStore {
        let mut store = TrustStore::new();
        for p in paths {
            assert!(store.add(PathBuf::from(p)).unwrap());
        }
        store
    }

    #[test]
    fn store_round_trips_in_the_documented_shape() {
        let store = store_with(&["/work/b", "/work/a"]);
        let json = store.to_json();
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"version": 1, "workspaces": ["/work/a", "/work/b"]})
        );
        let back = TrustStore::from_json(Path::new("trust.json"), json.as_bytes()).unwrap();
        assert_eq!(back, store);
        assert_eq!(
            back.workspaces().collect::<Vec<_>>(),
            [Path::new("/work/a"), Path::new("/work/b")]
        );
    }

    #[test]
    fn add_and_remove_are_exact_and_idempotent() {
        let mut store = store_with(&["/work/a"]);
        assert!(!store.add(PathBuf::from("/work/a")).unwrap());
        assert!(store.contains(Path::new("/work/a")));
        assert!(!store.contains(Path::new("/work")));
        assert!(!store.contains(Path::new("/work/a/sub")));
        assert!(store.remove(Path::new("/work/a")));
        assert!(!store.remove(Path::new("/work/a")));
        assert!(!store.contains(Path::new("/work/a")));
    }

    #[test]
    fn non_canonical_paths_are_refused() {
        let mut store = TrustStore::new();
        for bad in [
            "work/a",
            "/work/./a",
            "/work/../a",
            "/work//a",
            "/work/a/",
            "",
        ] {
            let err = store.add(PathBuf::from(bad)).unwrap_err();
            assert!(
                matches!(err, PolicyError::TrustPathNotCanonical { .. }),
                "{bad}: {err}"
            );
        }
        assert!(store.add(PathBuf::from("/")).unwrap());
    }

    #[test]
    fn malformed_store_files_are_errors_naming_the_file() {
        let file = Path::new("/home/me/.rho/trust.json");
        let cases: [(&str, &str); 5] = [
            (r#"{"version":2,"workspaces":[]}"#, "unsupported version 2"),
            (r#"{"workspaces":[]}"#, "missing field `version`"),
            (
                r#"{"version":1,"workspaces":[],"extra":1}"#,
                "unknown field `extra`",
            ),
            (
                r#"{"version":1,"workspaces":["relative/path"]}"#,
                "`relative/path` is not an absolute",
            ),
            ("not json", "expected"),
        ];
        for (text, want) in cases {
            let msg = TrustStore::from_json(file, text.as_bytes())
                .unwrap_err()
                .to_string();
            assert!(
                msg.starts_with("/home/me/.rho/trust.json: invalid trust store: "),
                "{msg}"
            );
            assert!(msg.contains(want), "{msg} should contain {want}");
        }
    }

    #[test]
    fn only_exactly_one_enables_an_override() {
        assert!(env_flag(Some("1")));
        for value in [
            None,
            Some(""),
            Some("0"),
            Some("true"),
            Some("yes"),
            Some(" 1"),
            Some("1 "),
            Some("01"),
        ] {
            assert!(!env_flag(value), "{value:?}");
        }
        assert_eq!(
            TrustOverrides::from_env_values(Some("1"), Some("true")),
            TrustOverrides {
                project_agents: true,
                project_hooks: false
            }
        );
    }

    fn current(trusted: bool, overrides: TrustOverrides) -> CurrentTrust {
        let store = if trusted {
            store_with(&["/w"])
        } else {
            TrustStore::new()
        };
        CurrentTrust::resolve(&store, PathBuf::from("/w"), overrides)
    }

    #[test]
    fn trusted_workspace_satisfies_every_requirement() {
        let all = TrustRequirement {
            project_sources: true,
            project_agents: true,
            project_hooks: true,
        };
        assert!(check_trust(&all, &current(true, TrustOverrides::default())).is_ok());
        assert!(
            check_trust(
                &TrustRequirement::default(),
                &current(false, TrustOverrides::default())
            )
            .is_ok()
        );
    }

    #[test]
    fn overrides_grant_only_their_own_kind() {
        let overrides = TrustOverrides {
            project_agents: true,
            project_hooks: true,
        };
        let now = current(false, overrides);
        let agents_hooks = TrustRequirement {
            project_sources: false,
            project_agents: true,
            project_hooks: true,
        };
        assert!(check_trust(&agents_hooks, &now).is_ok());
        let sources = TrustRequirement {
            project_sources: true,
            ..Default::default()
        };
        let err = check_trust(&sources, &now).unwrap_err();
        assert!(
            matches!(err, PolicyError::TrustRevoked { ref missing, .. } if missing == &[TrustKind::ProjectSources])
        );
    }

    #[test]
    fn removed_trust_fails_with_a_message_saying_to_replan() {
        let needed = TrustRequirement {
            project_sources: true,
            project_agents: false,
            project_hooks: true,
        };
        let err = check_trust(&needed, &current(false, TrustOverrides::default())).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the plan needed trust that is gone for workspace `/w`: project workflow sources, \
             project hooks; resolve trust (`rho trust add`, or RHO_TRUST_PROJECT_HOOKS=1 for \
             project hooks) and create a new plan"
        );
    }

    #[test]
    fn requirement_records_only_trusted_present_content() {
        let present = TrustRequirement {
            project_sources: true,
            project_agents: true,
            project_hooks: true,
        };
        let hooks_only = current(
            false,
            TrustOverrides {
                project_agents: false,
                project_hooks: true,
            },
        );
        assert_eq!(
            hooks_only.requirement_for(present),
            TrustRequirement {
                project_sources: false,
                project_agents: false,
                project_hooks: true
            }
        );
        assert_eq!(
            current(true, TrustOverrides::default()).requirement_for(present),
            present
        );
    }

    #[test]
    fn requirement_serde_shape() {
        let req = TrustRequirement {
            project_sources: true,
            project_agents: false,
            project_hooks: true,
        };
        let json = serde_json::to_value(req).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"project_sources": true, "project_agents": false, "project_hooks": true})
        );
        assert_eq!(
            serde_json::from_value::<TrustRequirement>(json).unwrap(),
            req
        );
    }
}
