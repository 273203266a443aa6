//! The seams between the owner loop and policy: every command node attempt is authorized
//! through a [`CommandAuthorizer`] before its checkout lock, verification and spawn, and the
//! observational workflow events go to a [`RunObserver`].
//!
//! The runner defines these traits and never learns where policy comes from: the host's
//! implementation (hooks, classifier and terminal prompts) lives in `crate::permissions`,
//! which depends on this module, not the other way round.
//!
//! Invariant: the runner never decides authority itself; a denial is recorded with who
//! denied and why, the mode in force is part of every record and output, and nothing an
//! observer reports can change the run.

use std::sync::Mutex;

use rho_policy::hooks::HostLabels;
use rho_policy::{
    Approvers, Authorizer, CommandRequest, EscalationCounters, HookEventName, HookRunner, NoHooks,
    PermissionMode,
};

use crate::workflow::state::DenialRecord;

/// What authorization decided for one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The attempt may run.
    Allow,
    /// The attempt is refused.
    Deny(DenialRecord),
}

/// The classifier's escalation counters after one of its decisions, numbered in decision
/// order: workers report concurrently, so the owner journals an update only when it is newer
/// than the last one it journaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountersUpdate {
    /// 1 for this authorizer's first decision, growing by one per decision.
    pub order: u64,
    /// The counters after the decision.
    pub counters: EscalationCounters,
}

/// One authorization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Run or not, and who refused.
    pub verdict: Verdict,
    /// Present when the classifier took part: its counters afterwards, for the journal.
    pub counters: Option<CountersUpdate>,
}

/// Authorizes `workflow_command` requests for one run.
pub trait CommandAuthorizer: Send + Sync {
    /// The permission mode in force (for records and outputs).
    fn mode(&self) -> PermissionMode;
    /// Decides one request (may block, e.g. on a human prompt).
    fn authorize(&self, request: &CommandRequest) -> Decision;
    /// Continues with the escalation counters a previous owner journaled (resume).
    fn restore_counters(&self, counters: EscalationCounters);
    /// The run is being cancelled: give up any approval being asked now and ask nobody
    /// again (what is abandoned answers as a refusal, which the runner turns into
    /// `cancellation`). Must not wait for a decision in progress. The default has nobody to
    /// interrupt.
    fn abandon_approvals(&self) {}
}

/// An observational hook that did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookFailure {
    /// The hook's `id`.
    pub hook_id: String,
    /// `user` or `project`.
    pub scope: String,
    /// How it failed.
    pub detail: String,
}

/// Receives the observational workflow events (`workflow_started`, `workflow_node_started`,
/// `workflow_node_finished`, `workflow_completed`, `workflow_failed`, `workflow_cancelled`).
pub trait RunObserver: Send + Sync {
    /// Reports `event` (blocking until the observers are done) and returns their failures,
    /// which the owner journals; nothing else comes back.
    fn observe(&self, event: HookEventName, labels: &HostLabels) -> Vec<HookFailure>;

    /// Whether anything observes `event`: when nothing does, the runner may skip building
    /// the event and order its own work freely around it. The default, `true`, is always
    /// correct.
    fn observes(&self, _event: HookEventName) -> bool {
        true
    }
}

/// No observers.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoObservers;

impl RunObserver for NoObservers {
    fn observe(&self, _event: HookEventName, _labels: &HostLabels) -> Vec<HookFailure> {
        Vec::new()
    }

    fn observes(&self, _event: HookEventName) -> bool {
        false
    }
}

/// The denial record of an authorization that refused.
pub fn denial_record(authorization: &rho_policy::Authorization) -> Option<DenialRecord> {
    (!authorization.allowed).then(|| DenialRecord {
        decided_by: authorization.decided_by.to_string(),
        reason: authorization.reason.clone(),
        mode: authorization.mode.as_str().to_owned(),
    })
}

/// The policy crate's authorizer without host I/O: the mode's decision table, then the
/// `before_tool_use` hooks given, then approval, which fails closed (no responder, no
/// classifier). For embedding and tests; `rho` itself uses `permissions::SharedHostAuthorizer`.
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
    fn mode(&self) -> PermissionMode {
        self.mode
    }

    fn authorize(&self, request: &CommandRequest) -> Decision {
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
        let authorization = authorizer.authorize(request, &mut approvers);
        Decision {
            verdict: denial_record(&authorization).map_or(Verdict::Allow, Verdict::Deny),
            // Without a classifier the counters never move.
            counters: None,
        }
    }

    fn restore_counters(&self, counters: EscalationCounters) {
        let mut guard = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        guard.0 = Authorizer::with_counters(self.mode, counters);
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
            interpreter: None,
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
            PolicyAuthorizer::new(PermissionMode::Bypass)
                .authorize(&request())
                .verdict,
            Verdict::Allow
        );
        let Verdict::Deny(denial) = PolicyAuthorizer::new(PermissionMode::Plan)
            .authorize(&request())
            .verdict
        else {
            panic!("plan must deny");
        };
        assert_eq!(denial.decided_by, "policy");
        assert_eq!(denial.mode, "plan");
        assert!(denial.reason.contains("plan"), "{}", denial.reason);
    }

    #[test]
    fn headless_supervised_fails_closed() {
        let decision = PolicyAuthorizer::new(PermissionMode::Supervised).authorize(&request());
        assert!(matches!(decision.verdict, Verdict::Deny(_)));
        assert_eq!(decision.counters, None);
    }
}
