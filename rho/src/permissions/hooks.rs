//! Loads the eligible hooks and runs them as processes.
//!
//! `$RHO_HOME/hooks.toml` (user) is always eligible; `<workspace>/.rho/hooks.toml` (project)
//! is not even read unless the workspace is trusted in `$RHO_HOME/trust.json` (read through
//! [`crate::trust::load`], which accepts only a private file) or `RHO_TRUST_PROJECT_HOOKS=1`. A hook runs from its argv (never through a shell), in the
//! workspace directory, with one bounded JSON event on stdin, the minimal environment of
//! [`rho_policy::hook_environment`], its declared timeout enforced on its whole process group,
//! and at most [`HOOK_OUTPUT_LIMIT`] + 1 bytes of its output kept. A relative program path
//! (one containing `/`) is resolved against the workspace for project hooks and against
//! `$RHO_HOME` for user hooks; a bare name is looked up on the hook's `PATH`.
//!
//! Invariant: the verdict of a `before_tool_use` hook comes only from
//! [`rho_policy::hook_verdict`] (so every way a hook can fail is a denial naming it), and
//! observational hooks can only report failures — nothing they do changes the run.

use std::fmt;
use std::path::{Path, PathBuf};

use rho_policy::hooks::{HOOK_OUTPUT_LIMIT, HostLabels};
use rho_policy::{
    CurrentTrust, HookEvent, HookEventName, HookRun, HookRunner, HookScope, HookSet, HookSpec,
    HookVerdict, HooksFile, PermissionRequest, TrustKind, TrustOverrides, TrustStore,
    hook_environment, hook_verdict, parse_hooks_file,
};

use super::spawn::{HelperProcess, run_helper};
use super::{HostEnvironment, PermissionsError};
use crate::paths::RhoHome;

/// The largest hooks file read.
pub const HOOKS_FILE_LIMIT: u64 = 1 << 20;
/// The largest event document a hook is given; a bigger event is a denial (the hook is not
/// started), so no hook ever sees a truncated request.
pub const HOOK_EVENT_LIMIT: usize = 1 << 20;

/// The variable that trusts project hooks for one process.
pub const TRUST_PROJECT_HOOKS_VAR: &str = "RHO_TRUST_PROJECT_HOOKS";
/// The variable that trusts project agent definitions for one process.
pub const TRUST_PROJECT_AGENTS_VAR: &str = "RHO_TRUST_PROJECT_AGENTS";

/// `$RHO_HOME/hooks.toml`.
pub fn user_hooks_file(home: &RhoHome) -> PathBuf {
    home.root().join("hooks.toml")
}

/// `<workspace>/.rho/hooks.toml`.
pub fn project_hooks_file(workspace: &Path) -> PathBuf {
    workspace.join(".rho").join("hooks.toml")
}

/// The hooks eligible in this process, and what was decided about the project file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadedHooks {
    /// User hooks, then (when trusted) project hooks.
    pub hooks: HookSet,
    /// Whether project hooks are trusted for this workspace.
    pub project_hooks_trusted: bool,
    /// A project hooks file exists but is inactive because the workspace is not trusted; it
    /// was not read.
    pub project_hooks_inactive: bool,
}

/// Loads the user hooks file and, when the workspace's hooks are trusted, the project one.
/// `workspace` must be canonical (trust is recorded by canonical path).
pub fn load_hooks(
    home: &RhoHome,
    workspace: &Path,
    env: &HostEnvironment,
) -> Result<LoadedHooks, PermissionsError> {
    let user = read_hooks_file(&user_hooks_file(home), HookScope::User)?;

    let project_file = project_hooks_file(workspace);
    let project_exists = project_file.symlink_metadata().is_ok();
    let overrides = TrustOverrides::from_env_values(
        env.get(TRUST_PROJECT_AGENTS_VAR).and_then(|v| v.to_str()),
        env.get(TRUST_PROJECT_HOOKS_VAR).and_then(|v| v.to_str()),
    );
    // The trust store is only consulted when there is something to trust, so a broken
    // trust.json does not stop runs in workspaces without project hooks.
    let trusted = project_exists && {
        let store = if overrides.project_hooks {
            TrustStore::new()
        } else {
            crate::trust::load(home)?
        };
        CurrentTrust::resolve(&store, workspace.to_path_buf(), overrides)
            .allows(TrustKind::ProjectHooks)
    };
    let project = if trusted {
        read_hooks_file(&project_file, HookScope::Project)?
    } else {
        None
    };
    Ok(LoadedHooks {
        hooks: HookSet::new(user, project, trusted),
        project_hooks_trusted: trusted,
        project_hooks_inactive: project_exists && !trusted,
    })
}

fn read_hooks_file(file: &Path, scope: HookScope) -> Result<Option<HooksFile>, PermissionsError> {
    let Some(bytes) = read_bounded_file(file, HOOKS_FILE_LIMIT, scope)? else {
        return Ok(None);
    };
    let text = String::from_utf8(bytes).map_err(|_| PermissionsError::NotUtf8 {
        file: file.to_owned(),
    })?;
    Ok(Some(parse_hooks_file(file, &text, scope)?))
}

/// The file's bytes, `None` when it does not exist, an error when it is over `limit`.
///
/// The user's file grants authority wherever rho runs: it gets the trust store's owner,
/// mode and link checks. The project's file is gated by workspace trust instead.
fn read_bounded_file(
    file: &Path,
    limit: u64,
    scope: HookScope,
) -> Result<Option<Vec<u8>>, PermissionsError> {
    let read_error = |source| PermissionsError::Read {
        file: file.to_owned(),
        source,
    };
    // Opened non-blocking and refused unless a regular file: a FIFO must not hang `rho`.
    let read = match scope {
        HookScope::User => crate::config::read_authority_file(file, limit),
        HookScope::Project => crate::config::read_user_file(file, limit),
    };
    let bytes = match read {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(None),
        Err(err) => return Err(read_error(err)),
    };
    if bytes.len() as u64 > limit {
        return Err(PermissionsError::FileTooLarge {
            file: file.to_owned(),
            limit,
        });
    }
    Ok(Some(bytes))
}

/// An observational workflow event (everything a hook can subscribe to except
/// `before_tool_use`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObservedEvent {
    /// `workflow_started`.
    Started,
    /// `workflow_node_started`.
    NodeStarted,
    /// `workflow_node_finished`.
    NodeFinished,
    /// `workflow_completed`.
    Completed,
    /// `workflow_failed`.
    Failed,
    /// `workflow_cancelled`.
    Cancelled,
}

impl ObservedEvent {
    /// The event's name in `on` and in the JSON event.
    pub const fn name(self) -> HookEventName {
        match self {
            ObservedEvent::Started => HookEventName::WorkflowStarted,
            ObservedEvent::NodeStarted => HookEventName::WorkflowNodeStarted,
            ObservedEvent::NodeFinished => HookEventName::WorkflowNodeFinished,
            ObservedEvent::Completed => HookEventName::WorkflowCompleted,
            ObservedEvent::Failed => HookEventName::WorkflowFailed,
            ObservedEvent::Cancelled => HookEventName::WorkflowCancelled,
        }
    }

    /// The observational event of that name; `None` for `before_tool_use`.
    pub const fn from_name(name: HookEventName) -> Option<Self> {
        Some(match name {
            HookEventName::BeforeToolUse => return None,
            HookEventName::WorkflowStarted => ObservedEvent::Started,
            HookEventName::WorkflowNodeStarted => ObservedEvent::NodeStarted,
            HookEventName::WorkflowNodeFinished => ObservedEvent::NodeFinished,
            HookEventName::WorkflowCompleted => ObservedEvent::Completed,
            HookEventName::WorkflowFailed => ObservedEvent::Failed,
            HookEventName::WorkflowCancelled => ObservedEvent::Cancelled,
        })
    }
}

/// An observational hook that did not exit cleanly; the runner journals it and carries on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObserverFailure {
    /// The hook's id.
    pub hook_id: String,
    /// The file it came from.
    pub scope: HookScope,
    /// The event it observed.
    pub event: HookEventName,
    /// How it failed.
    pub detail: String,
}

impl fmt::Display for ObserverFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} hook `{}` on {} failed: {}",
            self.scope, self.hook_id, self.event, self.detail
        )
    }
}

/// Runs eligible hooks as processes; the host's [`HookRunner`].
#[derive(Clone, Debug)]
pub struct ProcessHookRunner {
    hooks: HookSet,
    workspace: PathBuf,
    user_base: PathBuf,
    env: HostEnvironment,
}

impl ProcessHookRunner {
    /// Hooks for `workspace` (canonical; the hooks' working directory and the event's
    /// `workspace`), with relative user hook programs resolved against `user_base`
    /// (`$RHO_HOME`), and `env` the host environment hooks may pick names from.
    pub fn new(hooks: HookSet, workspace: &Path, user_base: &Path, env: HostEnvironment) -> Self {
        ProcessHookRunner {
            hooks,
            workspace: workspace.to_path_buf(),
            user_base: user_base.to_path_buf(),
            env,
        }
    }

    /// The eligible hooks.
    pub fn hooks(&self) -> &HookSet {
        &self.hooks
    }

    /// Whether any eligible hook is subscribed to `event`.
    pub fn observes(&self, event: HookEventName) -> bool {
        // Observational hooks cannot declare `tools`, so any tool name matches them.
        self.hooks.matching(event, "").next().is_some()
    }

    /// Runs every hook subscribed to `event`, in order, and returns the ones that failed.
    /// A failure never stops the others and never changes the run.
    pub fn observe(&self, event: ObservedEvent, labels: &HostLabels) -> Vec<ObserverFailure> {
        let name = event.name();
        // Nothing to tell: no event document (and no event id drawn from the kernel).
        if !self.observes(name) {
            return Vec::new();
        }
        let document =
            HookEvent::workflow(name, new_event_id(), self.workspace.clone(), labels.clone());
        let mut failures = Vec::new();
        // Observational hooks cannot declare `tools`, so any tool name matches them.
        for hook in self.hooks.matching(name, "") {
            if let Some(detail) = observer_failure(&self.run_hook(hook, &document)) {
                tracing::warn!(hook = %hook.id, scope = %hook.scope, event = %name, %detail, "observational hook failed");
                failures.push(ObserverFailure {
                    hook_id: hook.id.clone(),
                    scope: hook.scope,
                    event: name,
                    detail,
                });
            }
        }
        failures
    }

    fn run_hook(&self, hook: &HookSpec, event: &HookEvent) -> HookRun {
        let document = match serde_json::to_vec(event) {
            Ok(bytes) if bytes.len() <= HOOK_EVENT_LIMIT => bytes,
            Ok(bytes) => {
                return HookRun::SpawnFailed {
                    detail: format!(
                        "the event is {} bytes, over the limit of {HOOK_EVENT_LIMIT} bytes",
                        bytes.len()
                    ),
                };
            }
            Err(err) => {
                return HookRun::SpawnFailed {
                    detail: format!("cannot encode the event: {err}"),
                };
            }
        };
        let Some((program, args)) = hook.command.split_first() else {
            return HookRun::SpawnFailed {
                detail: "empty command".to_owned(),
            };
        };
        let base = match hook.scope {
            HookScope::User => &self.user_base,
            HookScope::Project => &self.workspace,
        };
        let program = resolve_program(program, base);
        let env = hook_environment(hook, |name| self.env.lookup(name));
        run_helper(&HelperProcess {
            program: &program,
            args,
            cwd: &self.workspace,
            env: &env,
            stdin: &document,
            timeout: hook.timeout,
            keep_bytes: HOOK_OUTPUT_LIMIT + 1,
        })
    }
}

impl HookRunner for ProcessHookRunner {
    fn before_tool_use(&mut self, req: PermissionRequest<'_>) -> HookVerdict {
        let event = HookEvent::for_request(new_event_id(), self.workspace.clone(), req);
        for hook in self
            .hooks
            .matching(HookEventName::BeforeToolUse, req.tool_name())
        {
            let verdict = hook_verdict(&hook.id, &self.run_hook(hook, &event));
            if let HookVerdict::Deny { reason, .. } = &verdict {
                tracing::info!(hook = %hook.id, scope = %hook.scope, request = %req, %reason, "hook denied");
                return verdict;
            }
        }
        HookVerdict::Continue
    }
}

/// A program with a `/` that is not absolute is relative to `base`; a bare name is left for
/// the `PATH` lookup (std resolves it with the child's `PATH`).
fn resolve_program(program: &str, base: &Path) -> PathBuf {
    let path = Path::new(program);
    if program.contains('/') && path.is_relative() {
        base.join(path)
    } else {
        path.to_path_buf()
    }
}

/// `None` when an observational hook exited 0; otherwise how it failed.
fn observer_failure(run: &HookRun) -> Option<String> {
    match run {
        HookRun::Exited { code: 0, .. } => None,
        HookRun::Exited { code, stderr, .. } => {
            let text = String::from_utf8_lossy(&stderr[..stderr.len().min(HOOK_OUTPUT_LIMIT)]);
            let text = text.trim();
            Some(if text.is_empty() {
                format!("exited with status {code}")
            } else {
                format!("exited with status {code}: {text}")
            })
        }
        HookRun::Signaled { signal } => Some(format!("killed by signal {signal}")),
        HookRun::TimedOut { after } => Some(format!("timed out after {}ms", after.as_millis())),
        HookRun::SpawnFailed { detail } => Some(format!("could not start: {detail}")),
    }
}

fn new_event_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn relative_programs_resolve_against_their_base_and_bare_names_stay_for_path() {
        let base = Path::new("/ws");
        assert_eq!(
            resolve_program("./hooks/check", base),
            PathBuf::from("/ws/./hooks/check")
        );
        assert_eq!(
            resolve_program("bin/check", base),
            PathBuf::from("/ws/bin/check")
        );
        assert_eq!(
            resolve_program("/usr/bin/true", base),
            PathBuf::from("/usr/bin/true")
        );
        assert_eq!(resolve_program("true", base), PathBuf::from("true"));
    }

    #[test]
    fn observer_failures_describe_how_the_hook_ended() {
        let clean = HookRun::Exited {
            code: 0,
            stdout: b"ignored".to_vec(),
            stderr: vec![],
        };
        assert_eq!(observer_failure(&clean), None);
        let failed = HookRun::Exited {
            code: 1,
            stdout: vec![],
            stderr: b"boom\n".to_vec(),
        };
        assert_eq!(
            observer_failure(&failed).as_deref(),
            Some("exited with status 1: boom")
        );
        let timed = HookRun::TimedOut {
            after: Duration::from_secs(2),
        };
        assert_eq!(
            observer_failure(&timed).as_deref(),
            Some("timed out after 2000ms")
        );
        assert_eq!(
            observer_failure(&HookRun::Signaled { signal: 11 }).as_deref(),
            Some("killed by signal 11")
        );
    }

    #[test]
    fn every_observed_event_is_observational() {
        for event in [
            ObservedEvent::Started,
            ObservedEvent::NodeStarted,
            ObservedEvent::NodeFinished,
            ObservedEvent::Completed,
            ObservedEvent::Failed,
            ObservedEvent::Cancelled,
        ] {
            assert!(event.name().is_observational(), "{event:?}");
            assert_eq!(ObservedEvent::from_name(event.name()), Some(event));
        }
        assert_eq!(ObservedEvent::from_name(HookEventName::BeforeToolUse), None);
    }
}
