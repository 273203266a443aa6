//! The workflow operations every front end shares — the CLI subcommands and the model-facing
//! `workflow` tool: planning a file in a workspace, re-checking a plan's trust, choosing the
//! mode of a resumed run, and assembling a run owner's context.
//!
//! Invariant: a front end decides only how it talks to people (flags, prompts, elicitation,
//! summaries); what is planned, which trust is required and under which mode and authorizer
//! a run is owned are decided here, identically for all of them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rho_ipc::data::Data;
use rho_ipc::message::Diagnostic;
use rho_policy::{
    ApprovalResponder, ModeSelection, PermissionMode, TrustKind, TrustRequirement, narrow,
};

use crate::config::Config;
use crate::paths::RhoHome;
use crate::permissions::{HostAuthorizer, PermissionsError, SharedHostAuthorizer};
use crate::runtime::claude_cli::environment::child_environment;
use crate::runtime::claude_cli::node::{ClaudeCliExecutor, ClaudeNodeContext};
use crate::runtime::node::RuntimeAgentExecutor;
use crate::workflow::plan::{self as planning, PlanError, PlanInput, Planned, ProcessSettings};
use crate::workflow::runner::RunContext;
use crate::workflow::runner::authorize::CommandAuthorizer;

/// Why a stored plan or run may not be run by this process now.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrustCheckError {
    /// The trust store could not be read.
    #[error("cannot read the trust store")]
    Store(#[source] crate::trust::TrustError),
    /// Trust the plan needed is gone; the message says to resolve it and plan again.
    #[error(transparent)]
    Revoked(rho_policy::PolicyError),
}

/// Plans `file` (relative to the process's directory, or absolute) in `workspace` with
/// `inputs`, under the trust this process has; nothing is stored.
pub fn plan_file(
    home: &RhoHome,
    workspace: &Path,
    config: &Config,
    process: &ProcessSettings,
    file: &Path,
    inputs: BTreeMap<String, Data>,
) -> Result<Planned, PlanError> {
    let current = crate::trust::current(home, workspace, crate::trust::overrides_from_env())
        .map_err(|e| PlanError::Invalid {
            diagnostics: vec![Diagnostic::new("trust", planning::error_chain(&e))],
        })?;
    planning::plan(&PlanInput {
        home,
        workspace,
        file,
        inputs,
        config,
        process,
        project_agents_trusted: current.allows(TrustKind::ProjectAgents),
    })
}

/// Re-checks the trust a plan (or run) needed against the trust this process has now.
pub fn check_trust(
    home: &RhoHome,
    workspace: &Path,
    required: &TrustRequirement,
) -> Result<(), TrustCheckError> {
    if required.kinds().is_empty() {
        return Ok(());
    }
    let current = crate::trust::current(home, workspace, crate::trust::overrides_from_env())
        .map_err(TrustCheckError::Store)?;
    rho_policy::check_trust(required, &current).map_err(TrustCheckError::Revoked)
}

/// The mode a resume runs under, `narrow(recorded, current)`, and how to describe where it
/// came from.
pub fn resume_mode(recorded: PermissionMode, current: ModeSelection) -> (PermissionMode, String) {
    let mode = narrow(recorded, current.mode);
    if mode == current.mode {
        (mode, current.source.to_string())
    } else {
        (
            mode,
            format!(
                "recorded when the run was created; {} asked for {}, and current settings only \
                 narrow",
                current.source, current.mode
            ),
        )
    }
}

/// How a run owner reaches people.
pub enum OwnerResponder {
    /// The terminal when stdin and stderr are terminals (the CLI).
    Terminal,
    /// The given responder (an MCP client's elicitation), or none: modes that need a human
    /// then fail closed.
    Given(Option<Box<dyn ApprovalResponder + Send>>),
}

impl std::fmt::Debug for OwnerResponder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OwnerResponder::Terminal => f.write_str("Terminal"),
            OwnerResponder::Given(r) => write!(f, "Given({})", r.is_some()),
        }
    }
}

/// A run owner's context: a fresh host authorizer under `mode` (hooks, classifier, and the
/// responder chosen), the same hooks as observers (they fire the `workflow_*` events), the
/// claude-cli runtime for claude-cli agent nodes (no other agent runtime yet). `watch_signals` makes SIGINT/SIGTERM cancel the run (the CLI); a server
/// that owns runs on threads leaves it off and cancels through the store.
pub fn run_context(
    home: &RhoHome,
    workspace: &Path,
    config: &Config,
    mode: PermissionMode,
    responder: OwnerResponder,
    watch_signals: bool,
) -> Result<RunContext, PermissionsError> {
    let mut host = HostAuthorizer::for_process(mode, home, config, workspace)?;
    if let OwnerResponder::Given(responder) = responder {
        host.set_responder(responder);
    }
    let shared = Arc::new(SharedHostAuthorizer::new(host));
    Ok(RunContext {
        home: home.clone(),
        workspace: PathBuf::from(workspace),
        policy_trust: TrustRequirement {
            project_hooks: shared.project_hooks_active(),
            ..TrustRequirement::default()
        },
        authorizer: Arc::clone(&shared) as Arc<dyn CommandAuthorizer>,
        observer: shared,
        agents: Arc::new(ClaudeCliExecutor::new(
            ClaudeNodeContext {
                home: home.clone(),
                workspace: PathBuf::from(workspace),
                mode,
                env: child_environment(std::env::vars_os()),
                timeout: None,
            },
            Arc::new(RuntimeAgentExecutor::new(
                home.clone(),
                config.clone(),
                PathBuf::from(workspace),
                mode,
            )),
        )),
        watch_signals,
    })
}
