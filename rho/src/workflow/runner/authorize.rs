//! The seam between the owner loop and policy: every command node attempt is authorized
//! through a [`CommandAuthorizer`] before its checkout lock, verification and spawn.
//!
//! Invariant: the runner never decides authority itself; a denial is recorded with who
//! denied and why, and the mode in force is part of every record and output.

use std::sync::Mutex;

use rho_policy::{Approvers, Authorizer, CommandRequest, HookRunner, NoHooks, PermissionMode};

use crate::workflow::state::DenialRecord;

/// What authorization decided for one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The attempt may run.
    Allow,
    /// The attempt is refused.
    Deny(DenialRecord),
}

/// Authorizes `workflow_command` requests for one run.
pub trait CommandAuthorizer: Send + Sync {
    /// The permission mode in force (for records and outputs).
    fn mode(&self) -> String;
    /// Decides one request (may block, e.g. on a human prompt).
    fn authorize(&self, request: &CommandRequest) -> Verdict;
}

/// The policy crate's authorizer: the mode's decision table, then the `before_tool_use`
/// hooks, then approval. Without a responder (headless) approval fails closed.
pub struct PolicyAuthorizer {
    inner: Mutex<(Authorizer, Box<dyn HookRunner + Send>)>,
    mode: PermissionMode,
}

impl std::fmt::Debug for PolicyAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyAuthorizer")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl PolicyAuthorizer {
    /// A headless authorizer under `mode` with no hooks.
    pub fn new(mode: PermissionMode) -> Self {
        Self::with_hooks(mode, Box::new(NoHooks))
    }

    /// A headless authorizer under `mode` running `hooks` before every allowed request.
    pub fn with_hooks(mode: PermissionMode, hooks: Box<dyn HookRunner + Send>) -> Self {
        PolicyAuthorizer {
            inner: Mutex::new((Authorizer::new(mode), hooks)),
            mode,
        }
    }
}

impl CommandAuthorizer for PolicyAuthorizer {
    fn mode(&self) -> String {
        self.mode.as_str().to_owned()
    }

    fn authorize(&self, request: &CommandRequest) -> Verdict {
        let mut guard = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (authorizer, hooks) = &mut *guard;
        let mut approvers = Approvers {
            responder: None,
            classifier: None,
            hooks: hooks.as_mut(),
        };
        let decision = authorizer.authorize(request, &mut approvers);
        if decision.allowed {
            Verdict::Allow
        } else {
            Verdict::Deny(DenialRecord {
                decided_by: decision.decided_by.to_string(),
                reason: decision.reason,
                mode: decision.mode.as_str().to_owned(),
            })
        }
    }
}

/// The host's authorizer (hooks, classifier, terminal responder) behind a lock, so parallel
/// nodes ask one at a time and prompts never interleave.
pub struct HostCommandAuthorizer {
    inner: Mutex<crate::permissions::HostAuthorizer>,
    mode: PermissionMode,
}

impl std::fmt::Debug for HostCommandAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostCommandAuthorizer")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl HostCommandAuthorizer {
    /// Wraps the host authorizer of this process.
    pub fn new(host: crate::permissions::HostAuthorizer) -> Self {
        let mode = host.mode();
        HostCommandAuthorizer {
            inner: Mutex::new(host),
            mode,
        }
    }
}

impl CommandAuthorizer for HostCommandAuthorizer {
    fn mode(&self) -> String {
        self.mode.as_str().to_owned()
    }

    fn authorize(&self, request: &CommandRequest) -> Verdict {
        let decision = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .authorize(request);
        if decision.allowed {
            Verdict::Allow
        } else {
            Verdict::Deny(DenialRecord {
                decided_by: decision.decided_by.to_string(),
                reason: decision.reason,
                mode: decision.mode.as_str().to_owned(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rho_policy::ExecutableIdentity;
    use std::path::PathBuf;

    fn request() -> CommandRequest {
        CommandRequest {
            run_id: "r".into(),
            plan_digest: "sha256:00".into(),
            node_id: "n".into(),
            attempt: 1,
            executable: ExecutableIdentity {
                path: PathBuf::from("/usr/bin/true"),
                sha256: "00".into(),
            },
            argv: vec!["true".into()],
            cwd: PathBuf::from("/"),
            environment_policy: "inherit_except_credentials".into(),
            timeout_ms: 1000,
            output_limit_bytes: 10,
        }
    }

    #[test]
    fn bypass_allows_and_plan_denies_with_policy_as_decider() {
        assert_eq!(
            PolicyAuthorizer::new(PermissionMode::Bypass).authorize(&request()),
            Verdict::Allow
        );
        let Verdict::Deny(denial) =
            PolicyAuthorizer::new(PermissionMode::Plan).authorize(&request())
        else {
            panic!("plan must deny");
        };
        assert_eq!(denial.decided_by, "policy");
        assert_eq!(denial.mode, "plan");
        assert!(denial.reason.contains("plan"), "{}", denial.reason);
    }

    #[test]
    fn headless_supervised_fails_closed() {
        let verdict = PolicyAuthorizer::new(PermissionMode::Supervised).authorize(&request());
        assert!(matches!(verdict, Verdict::Deny(_)));
    }
}
