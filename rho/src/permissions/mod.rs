//! The host side of permissions: selecting the permission mode for this process, running
//! `before_tool_use` and observational hooks as processes, asking a configured classifier
//! executable, prompting a human on the terminal, and [`HostAuthorizer`], which feeds all of
//! them into the pure [`rho_policy::Authorizer`].
//!
//! Invariant: every rule lives in `rho_policy`; this module only performs I/O and reports what
//! it observed. Anything that goes wrong while asking (a hook or classifier that cannot start,
//! times out, crashes or answers badly; no terminal to prompt on) becomes a denial, never an
//! allow.

pub mod classifier;
pub mod credentials;
pub mod hooks;
pub mod mode;
pub mod responder;

mod host_env;
mod spawn;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use rho_policy::hooks::HostLabels;
use rho_policy::{
    ApprovalResponder, Approvers, Authorization, Authorizer, Classifier, CommandRequest, Decider,
    EscalationCounters, HookEventName, HookScope, PermissionMode, PolicyError, ToolRequest,
};

use crate::config::Config;
use crate::paths::RhoHome;
use crate::workflow::runner::authorize::{
    CommandAuthorizer, CountersUpdate, Decision, HookFailure, RunObserver, Verdict, denial_record,
};

pub use classifier::{ClassifierCommand, DEFAULT_CLASSIFIER_TIMEOUT};
pub use hooks::{LoadedHooks, ObservedEvent, ObserverFailure, ProcessHookRunner, load_hooks};
pub use host_env::HostEnvironment;
pub use mode::{select_permission_mode, select_process_mode};
pub use responder::{PromptAbandon, TerminalResponder};

/// Why the permission layer could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PermissionsError {
    /// A policy input was rejected: an unknown permission mode (naming its source), an invalid
    /// hooks file (naming file, hook and field) or a malformed `trust.json`.
    #[error(transparent)]
    Policy(#[from] PolicyError),

    /// The trust store could not be read safely or is malformed.
    #[error(transparent)]
    Trust(#[from] crate::trust::TrustError),

    /// A hooks file exists but could not be read.
    #[error("cannot read {}", file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A hooks file is larger than anything it could sensibly hold.
    #[error("{} is larger than the limit of {limit} bytes", file.display())]
    FileTooLarge {
        /// The file.
        file: PathBuf,
        /// The limit in bytes.
        limit: u64,
    },

    /// A hooks file is not UTF-8 text.
    #[error("{} is not UTF-8 text", file.display())]
    NotUtf8 {
        /// The file.
        file: PathBuf,
    },
}

/// Authorizes command nodes for one run owner: the pure [`Authorizer`] (mode and escalation
/// counters) with this process's hooks, classifier and approval responder.
///
/// `authorize` takes `&mut self`: approvals are asked one at a time, so a runner with parallel
/// nodes shares one `HostAuthorizer` behind a lock, and prompts never interleave.
pub struct HostAuthorizer {
    authorizer: Authorizer,
    hooks: ProcessHookRunner,
    classifier: Option<ClassifierCommand>,
    responder: Option<Box<dyn ApprovalResponder + Send>>,
    /// Makes the responder give up (set when the run is cancelled); absent when the
    /// responder cannot be interrupted.
    abandon: Option<PromptAbandon>,
}

impl std::fmt::Debug for HostAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostAuthorizer")
            .field("authorizer", &self.authorizer)
            .field("hooks", &self.hooks)
            .field("classifier", &self.classifier)
            .field("responder", &self.responder.is_some())
            .field("abandon", &self.abandon)
            .finish()
    }
}

impl HostAuthorizer {
    /// Assembles an authorizer from explicit parts. `mode` is the mode in force for the run:
    /// the runner narrows the frozen plan's mode with the current one before calling this.
    pub fn new(
        mode: PermissionMode,
        hooks: ProcessHookRunner,
        classifier: Option<ClassifierCommand>,
        responder: Option<Box<dyn ApprovalResponder + Send>>,
    ) -> Self {
        HostAuthorizer {
            authorizer: Authorizer::new(mode),
            hooks,
            classifier,
            responder,
            abandon: None,
        }
    }

    /// Lets [`SharedHostAuthorizer`]'s `abandon_approvals` interrupt the responder through
    /// `abandon` (the responder must watch the same flag).
    #[must_use]
    pub fn with_prompt_abandon(mut self, abandon: PromptAbandon) -> Self {
        self.abandon = Some(abandon);
        self
    }

    /// The authorizer for this process: hooks from `$RHO_HOME/hooks.toml` and (when trusted)
    /// `<workspace>/.rho/hooks.toml`, the classifier from `[behavior] classifier`, and a
    /// terminal responder when stdin and stderr are terminals (none when headless, so modes
    /// that need a human fail closed).
    pub fn for_process(
        mode: PermissionMode,
        home: &RhoHome,
        config: &Config,
        workspace: &Path,
    ) -> Result<Self, PermissionsError> {
        let env = HostEnvironment::current();
        let loaded = load_hooks(home, workspace, &env)?;
        if loaded.project_hooks_inactive {
            tracing::info!(
                workspace = %workspace.display(),
                "project hooks are inactive until the workspace is trusted (`rho trust add`)"
            );
        }
        let hooks = ProcessHookRunner::new(loaded.hooks, workspace, home.root(), env.clone());
        let classifier = config
            .behavior
            .classifier
            .as_ref()
            .map(|argv| ClassifierCommand::new(argv.clone(), home.root(), workspace, env));
        let terminal = TerminalResponder::detect();
        let abandon = terminal.as_ref().map(TerminalResponder::abandon_flag);
        let responder = terminal.map(|r| Box::new(r) as Box<dyn ApprovalResponder + Send>);
        let host = HostAuthorizer::new(mode, hooks, classifier, responder);
        Ok(match abandon {
            Some(flag) => host.with_prompt_abandon(flag),
            None => host,
        })
    }

    /// Continues with escalation counters restored from the run's journal (resume), so a
    /// restart cannot reset the classifier's denial count.
    #[must_use]
    pub fn with_counters(mut self, counters: EscalationCounters) -> Self {
        self.restore_counters(counters);
        self
    }

    /// [`Self::with_counters`] in place.
    pub fn restore_counters(&mut self, counters: EscalationCounters) {
        self.authorizer = Authorizer::with_counters(self.authorizer.mode(), counters);
    }

    /// Decides one attempt of one command node: policy, then hooks, then classifier and human
    /// as the mode requires. The answer says who decided and why.
    pub fn authorize(&mut self, req: &CommandRequest) -> Authorization {
        let responder = self
            .responder
            .as_deref_mut()
            .map(|r| r as &mut dyn ApprovalResponder);
        let classifier = self.classifier.as_mut().map(|c| c as &mut dyn Classifier);
        let mut approvers = Approvers {
            responder,
            classifier,
            hooks: &mut self.hooks,
        };
        let authorization = self.authorizer.authorize(req, &mut approvers);
        tracing::debug!(node = %req.node_id, attempt = req.attempt, %authorization, "authorized");
        authorization
    }

    /// Decides one model-facing tool call on the same path: policy for the tool's class, then
    /// hooks (matched on the tool's name), then classifier and human as the mode requires.
    pub fn authorize_tool(&mut self, req: &ToolRequest) -> Authorization {
        let responder = self
            .responder
            .as_deref_mut()
            .map(|r| r as &mut dyn ApprovalResponder);
        let classifier = self.classifier.as_mut().map(|c| c as &mut dyn Classifier);
        let mut approvers = Approvers {
            responder,
            classifier,
            hooks: &mut self.hooks,
        };
        let authorization = self.authorizer.authorize_tool(req, &mut approvers);
        tracing::debug!(tool = %req.tool, operation = %req.operation, %authorization, "authorized");
        authorization
    }

    /// Replaces the approval responder (an MCP client's elicitation, an interactive session's
    /// prompt); `None` makes modes that need a human fail closed.
    pub fn set_responder(&mut self, responder: Option<Box<dyn ApprovalResponder + Send>>) {
        self.responder = responder;
        self.abandon = None;
    }

    /// The mode in force.
    pub fn mode(&self) -> PermissionMode {
        self.authorizer.mode()
    }

    /// The classifier escalation counters, for the journal.
    pub fn counters(&self) -> EscalationCounters {
        self.authorizer.counters()
    }

    /// Whether a human can be asked in this process.
    pub fn has_responder(&self) -> bool {
        self.responder.is_some()
    }

    /// Whether a classifier is configured.
    pub fn has_classifier(&self) -> bool {
        self.classifier.is_some()
    }

    /// The hook runner, for observational workflow events.
    pub fn hooks(&self) -> &ProcessHookRunner {
        &self.hooks
    }

    /// Whether any project hook (`<workspace>/.rho/hooks.toml`, trusted) is active: a run
    /// relies on that trust, since losing it would drop hooks that may deny.
    pub fn project_hooks_active(&self) -> bool {
        self.hooks
            .hooks()
            .all()
            .iter()
            .any(|h| h.scope == HookScope::Project)
    }
}

/// A [`HostAuthorizer`] shared by a run's node workers: the runner's [`CommandAuthorizer`]
/// and [`RunObserver`], and the only adapter between the two.
///
/// Requests are decided one at a time under a lock, so prompts never interleave and the
/// escalation counters see every classifier answer in order. Observational hooks run outside
/// that lock, from a copy of the hook runner, so a slow observer never holds up a decision.
pub struct SharedHostAuthorizer {
    inner: Mutex<HostAuthorizer>,
    observers: ProcessHookRunner,
    mode: PermissionMode,
    project_hooks_active: bool,
    decisions: AtomicU64,
    /// Outside the lock: a prompt holds the lock while it waits for a human.
    abandon: Option<PromptAbandon>,
}

impl std::fmt::Debug for SharedHostAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedHostAuthorizer")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl SharedHostAuthorizer {
    /// Shares `host` between the workers of one run.
    pub fn new(host: HostAuthorizer) -> Self {
        SharedHostAuthorizer {
            observers: host.hooks.clone(),
            mode: host.mode(),
            project_hooks_active: host.project_hooks_active(),
            abandon: host.abandon.clone(),
            inner: Mutex::new(host),
            decisions: AtomicU64::new(0),
        }
    }

    /// The escalation counters now, for the journal.
    pub fn counters(&self) -> EscalationCounters {
        self.lock().counters()
    }

    /// Whether trusted project hooks are active (see [`HostAuthorizer::project_hooks_active`]).
    pub fn project_hooks_active(&self) -> bool {
        self.project_hooks_active
    }

    /// Decides one request and returns the full [`Authorization`] (who, why, mode).
    pub fn authorize_request(&self, request: &CommandRequest) -> Authorization {
        self.lock().authorize(request)
    }

    /// Decides one model-facing tool call (see [`HostAuthorizer::authorize_tool`]).
    pub fn authorize_tool(&self, request: &ToolRequest) -> Authorization {
        self.lock().authorize_tool(request)
    }

    /// The mode in force.
    pub fn mode(&self) -> PermissionMode {
        self.mode
    }

    /// Runs the observational hooks for `event`; the failures are for the journal.
    pub fn observe_event(&self, event: ObservedEvent, labels: &HostLabels) -> Vec<ObserverFailure> {
        self.observers.observe(event, labels)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HostAuthorizer> {
        // A panic while deciding leaves nothing half-granted: the counters only ever count up
        // and nothing is allowed unless `authorize` returned.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl From<HostAuthorizer> for SharedHostAuthorizer {
    fn from(host: HostAuthorizer) -> Self {
        SharedHostAuthorizer::new(host)
    }
}

impl CommandAuthorizer for SharedHostAuthorizer {
    fn mode(&self) -> PermissionMode {
        self.mode
    }

    fn authorize(&self, request: &CommandRequest) -> Decision {
        let mut host = self.lock();
        let before = host.counters();
        let authorization = host.authorize(request);
        let after = host.counters();
        // Numbered while the lock is held, so the numbers follow the decisions' order.
        let order = self.decisions.fetch_add(1, Ordering::SeqCst) + 1;
        drop(host);
        let classifier_took_part =
            before != after || authorization.decided_by == Decider::Classifier;
        Decision {
            verdict: denial_record(&authorization).map_or(Verdict::Allow, Verdict::Deny),
            counters: classifier_took_part.then_some(CountersUpdate {
                order,
                counters: after,
            }),
        }
    }

    fn restore_counters(&self, counters: EscalationCounters) {
        self.lock().restore_counters(counters);
    }

    fn abandon_approvals(&self) {
        if let Some(abandon) = &self.abandon {
            abandon.abandon();
        }
    }
}

impl RunObserver for SharedHostAuthorizer {
    fn observe(&self, event: HookEventName, labels: &HostLabels) -> Vec<HookFailure> {
        let Some(event) = ObservedEvent::from_name(event) else {
            return Vec::new();
        };
        self.observe_event(event, labels)
            .into_iter()
            .map(|f| HookFailure {
                hook_id: f.hook_id,
                scope: f.scope.to_string(),
                detail: f.detail,
            })
            .collect()
    }

    fn observes(&self, event: HookEventName) -> bool {
        ObservedEvent::from_name(event).is_some() && self.observers.observes(event)
    }
}
