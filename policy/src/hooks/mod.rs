//! The pure parts of hooks: the `hooks.toml` format, which hooks are eligible, the JSON event
//! a hook receives, its minimal environment, and how its answer becomes a verdict.
//!
//! Invariant: a `before_tool_use` hook can only continue or deny. Anything other than a
//! well-formed `continue` answer from a cleanly exiting hook — a crash, a timeout, a missing,
//! oversized or malformed answer — is a denial naming the hook. Project hooks are dropped
//! unless the workspace's hooks are trusted.
//!
//! Running hook processes is the host's job: it spawns each command with the event on stdin
//! and [`hook_environment`], bounds its output, and hands the result to [`hook_verdict`].

mod event;
mod file;
mod verdict;

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use event::{CapabilityPayload, HookEvent, HostLabels, hook_environment};
pub use file::{parse_hooks_file, parse_timeout};
pub use verdict::{HookRun, hook_verdict, parse_hook_response};

/// The only `version` a hooks file may declare.
pub const HOOKS_FILE_VERSION: i64 = 1;
/// The longest timeout a hook may declare.
pub const MAX_HOOK_TIMEOUT: Duration = Duration::from_mins(10);
/// The most bytes of output a hook may answer with; more is a denial.
pub const HOOK_OUTPUT_LIMIT: usize = 8 * 1024;
/// `schema_version` of [`HookEvent`].
pub const HOOK_EVENT_SCHEMA_VERSION: u32 = 1;
/// Variables a hook always gets from the host's environment when set, besides its `env` list.
pub const HOOK_BASE_ENV: [&str; 6] = ["PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ"];

const HOOK_FIELDS: &str = "id, on, tools, command, timeout, env";

/// Which hooks file a hook came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookScope {
    /// `$RHO_HOME/hooks.toml`: always eligible.
    User,
    /// `<workspace>/.rho/hooks.toml`: eligible only when the workspace's hooks are trusted.
    Project,
}

impl fmt::Display for HookScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HookScope::User => "user",
            HookScope::Project => "project",
        })
    }
}

/// The events a hook can subscribe to with `on`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookEventName {
    /// Before an operation runs; the hook may deny it.
    BeforeToolUse,
    /// A workflow run started (observational).
    WorkflowStarted,
    /// A node attempt started (observational).
    WorkflowNodeStarted,
    /// A node attempt finished (observational).
    WorkflowNodeFinished,
    /// A run completed successfully (observational).
    WorkflowCompleted,
    /// A run failed (observational).
    WorkflowFailed,
    /// A run was cancelled (observational).
    WorkflowCancelled,
}

impl HookEventName {
    /// Every event name.
    pub const ALL: [HookEventName; 7] = [
        HookEventName::BeforeToolUse,
        HookEventName::WorkflowStarted,
        HookEventName::WorkflowNodeStarted,
        HookEventName::WorkflowNodeFinished,
        HookEventName::WorkflowCompleted,
        HookEventName::WorkflowFailed,
        HookEventName::WorkflowCancelled,
    ];

    /// The spelling in `on` and in the event JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            HookEventName::BeforeToolUse => "before_tool_use",
            HookEventName::WorkflowStarted => "workflow_started",
            HookEventName::WorkflowNodeStarted => "workflow_node_started",
            HookEventName::WorkflowNodeFinished => "workflow_node_finished",
            HookEventName::WorkflowCompleted => "workflow_completed",
            HookEventName::WorkflowFailed => "workflow_failed",
            HookEventName::WorkflowCancelled => "workflow_cancelled",
        }
    }

    /// Observational hooks never change the run; only `before_tool_use` can deny.
    pub const fn is_observational(self) -> bool {
        !matches!(self, HookEventName::BeforeToolUse)
    }
}

impl fmt::Display for HookEventName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One validated `[[hook]]` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookSpec {
    /// Unique within its file.
    pub id: String,
    /// The file it came from.
    pub scope: HookScope,
    /// The event it runs on.
    pub on: HookEventName,
    /// Tool names it applies to (`before_tool_use` only); `None` matches every tool. An entry
    /// is an exact name, `prefix*`, or `*`.
    pub tools: Option<Vec<String>>,
    /// The argv to execute; `command[0]` is the program.
    pub command: Vec<String>,
    /// How long it may run.
    pub timeout: Duration,
    /// Extra environment variable names passed through from the host.
    pub env: Vec<String>,
}

impl HookSpec {
    /// Whether this hook applies to `event` for the tool named `tool`.
    pub fn matches(&self, event: HookEventName, tool: &str) -> bool {
        if self.on != event {
            return false;
        }
        match &self.tools {
            None => true,
            Some(patterns) => patterns
                .iter()
                .any(|pattern| match pattern.strip_suffix('*') {
                    Some(prefix) => tool.starts_with(prefix),
                    None => pattern == tool,
                }),
        }
    }
}

/// A validated hooks file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HooksFile {
    /// Where it was read from (for messages).
    pub path: PathBuf,
    /// User or project.
    pub scope: HookScope,
    /// Its hooks, in file order.
    pub hooks: Vec<HookSpec>,
}

/// The hooks eligible in one process: user hooks, then project hooks if trusted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HookSet {
    hooks: Vec<HookSpec>,
}

impl HookSet {
    /// Combines the files; project hooks are dropped unless `project_hooks_trusted`
    /// (workspace trusted, or `RHO_TRUST_PROJECT_HOOKS=1`).
    pub fn new(
        user: Option<HooksFile>,
        project: Option<HooksFile>,
        project_hooks_trusted: bool,
    ) -> Self {
        let mut hooks = user.map(|f| f.hooks).unwrap_or_default();
        if project_hooks_trusted {
            hooks.extend(project.map(|f| f.hooks).unwrap_or_default());
        }
        HookSet { hooks }
    }

    /// The hooks to run for `event` on `tool`, in order (user first); for `before_tool_use`
    /// the first denial wins.
    pub fn matching(&self, event: HookEventName, tool: &str) -> impl Iterator<Item = &HookSpec> {
        self.hooks.iter().filter(move |h| h.matches(event, tool))
    }

    /// Every eligible hook.
    pub fn all(&self) -> &[HookSpec] {
        &self.hooks
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::PolicyError;

    pub(super) const USER_FILE: &str = r#"
version = 1

[[hook]]
id = "guard"
on = "before_tool_use"
tools = ["workflow_command"]
command = ["/home/me/bin/guard", "--strict"]
timeout = "2s"
env = ["GUARD_TOKEN"]

[[hook]]
id = "log-finish"
on = "workflow_node_finished"
command = ["logger", "-t", "rho"]
timeout = "500ms"
"#;

    pub(super) fn parse(text: &str, scope: HookScope) -> Result<HooksFile, PolicyError> {
        parse_hooks_file(Path::new("/home/me/.rho/hooks.toml"), text, scope)
    }

    pub(super) fn parse_err(text: &str, scope: HookScope) -> String {
        parse(text, scope).unwrap_err().to_string()
    }

    pub(super) fn hook_table(body: &str) -> String {
        format!("version = 1\n[[hook]]\nid = \"h\"\non = \"before_tool_use\"\n{body}")
    }

    #[test]
    fn untrusted_project_hooks_are_not_eligible_and_user_hooks_come_first() {
        let user = parse(USER_FILE, HookScope::User).unwrap();
        let project_text = hook_table("command = [\"./check\"]\ntimeout = \"1s\"\n");
        let project = parse_hooks_file(
            Path::new("/w/.rho/hooks.toml"),
            &project_text,
            HookScope::Project,
        )
        .unwrap();

        let untrusted = HookSet::new(Some(user.clone()), Some(project.clone()), false);
        let ids: Vec<_> = untrusted
            .matching(HookEventName::BeforeToolUse, "workflow_command")
            .map(|h| h.id.as_str())
            .collect();
        assert_eq!(ids, ["guard"]);

        let trusted = HookSet::new(Some(user), Some(project), true);
        let ids: Vec<_> = trusted
            .matching(HookEventName::BeforeToolUse, "workflow_command")
            .map(|h| h.id.as_str())
            .collect();
        assert_eq!(ids, ["guard", "h"]);
        let ids: Vec<_> = trusted
            .matching(HookEventName::BeforeToolUse, "edit_file")
            .map(|h| h.id.as_str())
            .collect();
        assert_eq!(ids, ["h"], "guard only matches workflow_command");
        assert_eq!(trusted.all().len(), 3);
    }

    #[test]
    fn tool_matchers() {
        let mut hook = parse(USER_FILE, HookScope::User).unwrap().hooks.remove(0);
        hook.tools = Some(vec!["edit_*".to_owned(), "bash".to_owned()]);
        assert!(hook.matches(HookEventName::BeforeToolUse, "edit_file"));
        assert!(hook.matches(HookEventName::BeforeToolUse, "bash"));
        assert!(!hook.matches(HookEventName::BeforeToolUse, "bash2"));
        assert!(!hook.matches(HookEventName::WorkflowStarted, "bash"));
        hook.tools = Some(vec!["*".to_owned()]);
        assert!(hook.matches(HookEventName::BeforeToolUse, "anything"));
    }
}
