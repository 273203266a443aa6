//! The tool host of a session: which capabilities this host supplies, and the registry
//! behind the agent loop's [`ToolHost`] seam.
//!
//! Invariant: the capability set offered to the binder is exactly the set of tools
//! [`tool_host`] can build, so a definition asking for a tool that does not exist fails
//! binding; and every call the loop makes goes through [`ToolRegistry::call`] — schema, then
//! the shared permission path (mode → `before_tool_use` hooks → classifier or person), then
//! the tool. A session without a person to ask (`rho run`, workflow nodes) gets no responder,
//! so everything that needs approval fails closed.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use rho_policy::hooks::HostLabels;
use rho_policy::{ApprovalResponder, ModeSelection};

use super::agent_loop::{NoTools, ToolHost, ToolOutcome};
use super::provider::{ToolCall, ToolSpec};
use crate::agents::HostCapabilities;
use crate::config::Config;
use crate::paths::RhoHome;
use crate::permissions::{HostAuthorizer, PermissionsError, SharedHostAuthorizer};
use crate::process::{ProcessConfig, ProcessError, ProcessManager};
use crate::tools::process::ProcessTool;
use crate::tools::workflow::WorkflowTool;
use crate::tools::{
    self, CancelToken, ConfirmAnswer, ConfirmRequest, ToolContext, ToolNotice, ToolRegistry,
};

/// Names of the tools this host builds besides the workspace tools.
const PROCESS: &str = "process";
const WORKFLOW: &str = "workflow";

/// Why a session's tools could not be assembled. Nothing was started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// The hooks or classifier configuration is invalid.
    #[error("cannot set up the permission path: {0}")]
    Permissions(#[from] PermissionsError),
    /// The background process manager could not start.
    #[error("cannot start the process manager: {0}")]
    Processes(#[from] ProcessError),
    /// Two tools claim one name (a bug in this host).
    #[error("cannot build the tool registry: {0}")]
    Registry(String),
}

/// How a person is reached from a session, when one can be.
pub struct Interaction {
    /// Answers "require approval" steps of the permission path.
    pub approvals: Box<dyn ApprovalResponder + Send>,
    /// Answers explicit consent questions (running one exact workflow digest).
    pub consent: Box<dyn Fn(&ConfirmRequest) -> ConfirmAnswer + Send + Sync>,
}

impl std::fmt::Debug for Interaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interaction").finish_non_exhaustive()
    }
}

/// What a session's tool host is built from.
#[derive(Debug, Clone, Copy)]
pub struct HostRequest<'a> {
    /// The data directory.
    pub home: &'a RhoHome,
    /// The configuration.
    pub config: &'a Config,
    /// The canonical workspace.
    pub workspace: &'a Path,
    /// The capabilities the binding granted.
    pub capabilities: &'a BTreeSet<String>,
    /// The permission mode in force and where it came from.
    pub permission_mode: ModeSelection,
    /// `--no-tools`.
    pub no_tools: bool,
    /// `--no-subagents`.
    pub no_subagents: bool,
    /// No person can answer an approval (approvals fail closed).
    pub headless: bool,
}

/// The tool names this host can build, in name order: the workspace tools, `process` and
/// `workflow`.
pub fn supplied_tools() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = tools::workspace_tools().iter().map(|t| t.name()).collect();
    names.extend([PROCESS, WORKFLOW]);
    names.sort_unstable();
    names
}

/// The capabilities this host supplies to the binder.
pub fn host_capabilities(_no_subagents: bool) -> HostCapabilities {
    HostCapabilities::new(supplied_tools())
}

/// The tool host for a session: a registry holding exactly the granted tools (none with
/// `--no-tools`), under the permission path of this process's hooks and classifier, with
/// `interaction` as the person to ask (none: approvals and consent fail closed).
///
/// `labels` mark a session running inside a workflow node, so hooks see which.
pub fn tool_host(
    request: &HostRequest<'_>,
    interaction: Option<Interaction>,
    labels: Option<HostLabels>,
) -> Result<Arc<dyn ToolHost>, HostError> {
    let granted: BTreeSet<&str> = if request.no_tools {
        BTreeSet::new()
    } else {
        request
            .capabilities
            .iter()
            .map(String::as_str)
            .filter(|name| supplied_tools().contains(name))
            .collect()
    };
    if granted.is_empty() {
        return Ok(Arc::new(NoTools));
    }
    let mut authorizer = HostAuthorizer::for_process(
        request.permission_mode.mode,
        request.home,
        request.config,
        request.workspace,
    )?;
    let (responder, consent) = match interaction {
        Some(i) if !request.headless => (Some(i.approvals), Some(i.consent)),
        _ => (None, None),
    };
    authorizer.set_responder(responder);
    let notices = Arc::new(Mutex::new(Vec::new()));
    let front = Arc::new(SessionFront {
        consent,
        notices: Arc::clone(&notices),
    });
    let mut builder = ToolRegistry::builder();
    for tool in tools::workspace_tools() {
        if granted.contains(tool.name()) {
            builder = builder.with_shared(tool);
        }
    }
    let processes = if granted.contains(PROCESS) {
        let manager = ProcessManager::new(ProcessConfig::new(
            request.workspace,
            &request.config.environment.exclude,
        ))?;
        builder = builder.with(ProcessTool::new(manager.clone()));
        Some(manager)
    } else {
        None
    };
    let workflow = granted.contains(WORKFLOW).then(WorkflowTool::from_env);
    if let Some(tool) = &workflow {
        builder = builder.with(tool.clone());
    }
    let registry = builder
        .build()
        .map_err(|e| HostError::Registry(e.to_string()))?;
    let mut ctx = ToolContext::new(
        request.workspace.to_path_buf(),
        request.home.clone(),
        Arc::new(request.config.clone()),
        request.permission_mode,
        Arc::new(SharedHostAuthorizer::new(authorizer)),
        front,
    );
    if let Some(labels) = labels {
        ctx = ctx.with_labels(labels);
    }
    Ok(Arc::new(SessionTools {
        registry,
        ctx,
        notices,
        processes,
        workflow,
        home: request.home.clone(),
    }))
}

/// The tools of one session. Dropping it stops every process and background workflow run the
/// session started.
struct SessionTools {
    registry: ToolRegistry,
    ctx: ToolContext,
    notices: Arc<Mutex<Vec<ToolNotice>>>,
    processes: Option<ProcessManager>,
    workflow: Option<WorkflowTool>,
    home: RhoHome,
}

impl ToolHost for SessionTools {
    fn specs(&self) -> Vec<ToolSpec> {
        self.registry
            .specs()
            .into_iter()
            .map(|spec| ToolSpec {
                name: spec.name.to_owned(),
                description: spec.description.to_owned(),
                input_schema: spec.input_schema,
            })
            .collect()
    }

    fn call(&self, call: &ToolCall, cancel: &CancelToken) -> ToolOutcome {
        let args = match serde_json::from_str::<serde_json::Value>(&call.arguments) {
            Ok(value) => value,
            Err(e) if call.arguments.trim().is_empty() => {
                tracing::debug!(error = %e, "empty tool arguments read as {{}}");
                serde_json::Value::Object(serde_json::Map::new())
            }
            Err(e) => {
                return ToolOutcome {
                    content: format!(
                        "invalid arguments for `{}`: not a JSON object ({e})",
                        call.name
                    ),
                    is_error: true,
                };
            }
        };
        let ctx = self.ctx.clone().with_cancel(cancel.clone());
        match self.registry.call(&call.name, args, &ctx) {
            Ok(output) => ToolOutcome {
                content: output.summary,
                is_error: false,
            },
            Err(err) => ToolOutcome {
                content: err.to_string(),
                is_error: true,
            },
        }
    }

    fn take_notices(&self) -> Vec<String> {
        let drained: Vec<ToolNotice> =
            std::mem::take(&mut *self.notices.lock().unwrap_or_else(PoisonError::into_inner));
        drained.into_iter().map(|n| n.summary).collect()
    }
}

impl Drop for SessionTools {
    fn drop(&mut self) {
        if let Some(processes) = &self.processes {
            processes.shutdown();
        }
        if let Some(workflow) = &self.workflow {
            workflow.shutdown(&self.home);
        }
    }
}

/// The front end the session's tools reach a person through.
struct SessionFront {
    consent: Option<Box<dyn Fn(&ConfirmRequest) -> ConfirmAnswer + Send + Sync>>,
    notices: Arc<Mutex<Vec<ToolNotice>>>,
}

impl tools::ToolHost for SessionFront {
    fn confirm(&self, request: &ConfirmRequest) -> ConfirmAnswer {
        match &self.consent {
            Some(ask) => ask(request),
            None => ConfirmAnswer::Refused {
                reason: "no one can answer in this session (it is not interactive); run it \
                         yourself with `rho workflow run`"
                    .to_owned(),
            },
        }
    }

    fn notify(&self, notice: ToolNotice) {
        tracing::info!(tool = %notice.tool, kind = %notice.kind, "tool notice queued for the model");
        self.notices
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(notice);
    }
}
