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
use rho_policy::{ApprovalResponder, ModeSelection, PermissionMode};

use super::agent_loop::{NoTools, ToolHost, ToolOutcome};
use super::delegation::manager::{DelegateError, DelegationManager, DelegationSetup};
use super::provider::{ToolCall, ToolSpec};
use crate::agents::HostCapabilities;
use crate::config::Config;
use crate::confinement::{ConfinementError, ScratchConfinement};
use crate::paths::RhoHome;
use crate::permissions::{HostAuthorizer, PermissionsError, SharedHostAuthorizer};
use crate::process::{ProcessConfig, ProcessError, ProcessManager};
use crate::tools::agent::{AgentTool, AgentsTool};
use crate::tools::bash::Bash;
use crate::tools::process::ProcessTool;
use crate::tools::workflow::WorkflowTool;
use crate::tools::{
    self, CancelToken, ConfirmAnswer, ConfirmRequest, ToolContext, ToolNotice, ToolRegistry,
};

/// Names of the tools this host builds besides the workspace tools.
const PROCESS: &str = "process";
const WORKFLOW: &str = "workflow";
const AGENT: &str = "agent";
const AGENTS: &str = "agents";
const BASH: &str = "bash";
/// The tools a read-only session is not given.
const WRITE_TOOLS: [&str; 3] = ["apply_patch", "edit_file", "write_file"];

/// Why a session's tools could not be assembled. Nothing was started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// The hooks or classifier configuration is invalid.
    #[error("cannot set up the permission path: {0}")]
    Permissions(#[from] PermissionsError),
    /// Child agents cannot be started (an invalid pool size).
    #[error("cannot set up delegation: {0}")]
    Delegation(#[from] DelegateError),
    /// A read-only session's commands cannot be confined by this kernel (fails closed).
    #[error("read-only tools cannot be confined: {0}")]
    Confinement(#[from] ConfinementError),
    /// The background process manager could not start.
    #[error("cannot start the process manager: {0}")]
    Processes(#[from] ProcessError),
    /// Two tools claim one name (a bug in this host).
    #[error("cannot build the tool registry: {0}")]
    Registry(String),
}

/// Answers an explicit consent question (see [`Interaction::consent`]).
pub type ConsentAsker = Box<dyn Fn(&ConfirmRequest) -> ConfirmAnswer + Send + Sync>;

/// How a person is reached from a session, when one can be.
pub struct Interaction {
    /// Answers "require approval" steps of the permission path.
    pub approvals: Box<dyn ApprovalResponder + Send>,
    /// Answers explicit consent questions (running one exact workflow digest).
    pub consent: ConsentAsker,
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
    /// Read-only: no write tools (nor `workflow`), and every command the agent runs is
    /// confined by the kernel to writing its scratch directory (a read-only agent node, or
    /// the `plan` mode).
    pub read_only: bool,
}

/// The tool names this host can build, in name order: the workspace tools, `process` and
/// `workflow`.
pub fn supplied_tools() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = tools::workspace_tools().iter().map(|t| t.name()).collect();
    names.extend([PROCESS, WORKFLOW]);
    names.sort_unstable();
    names
}

/// The capabilities this host supplies to the binder: every tool of [`supplied_tools`], and
/// `agent`/`agents` unless `--no-subagents` removed them.
pub fn host_capabilities(no_subagents: bool) -> HostCapabilities {
    let mut names = supplied_tools();
    if !no_subagents {
        names.extend([AGENT, AGENTS]);
    }
    HostCapabilities::new(names)
}

/// The tool host for a session: a registry holding exactly the granted tools (none with
/// `--no-tools`), under the permission path of this process's hooks and classifier, with
/// `interaction` as the person to ask (none: approvals and consent fail closed).
///
/// `labels` mark a session running inside a workflow node, so hooks see which. `delegation`
/// lets the session start child agents (the `agent` and `agents` tools, when granted).
pub fn tool_host(
    request: &HostRequest<'_>,
    interaction: Option<Interaction>,
    labels: Option<HostLabels>,
    delegation: Option<DelegationSetup>,
) -> Result<Arc<SessionTools>, HostError> {
    let granted: BTreeSet<&str> = if request.no_tools {
        BTreeSet::new()
    } else {
        request
            .capabilities
            .iter()
            .map(String::as_str)
            .filter(|name| {
                supplied_tools().contains(name)
                    || (!request.no_subagents && (*name == AGENT || *name == AGENTS))
            })
            .collect()
    };
    let inbox = Inbox::default();
    if granted.is_empty() {
        return Ok(Arc::new(SessionTools {
            inner: None,
            inbox,
            processes: None,
            workflow: None,
            delegation: None,
            home: request.home.clone(),
        }));
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
    let front = Arc::new(SessionFront {
        consent,
        inbox: inbox.clone(),
    });
    // Plan mode denies writes and processes by policy and keeps its tools (the model reads
    // why a call was denied); its commands are confined all the same. A read-only node is not
    // given write tools at all.
    let read_only = request.read_only;
    let confine = read_only || request.permission_mode.mode == PermissionMode::Plan;
    let confinement = if confine && (granted.contains(BASH) || granted.contains(PROCESS)) {
        Some(ScratchConfinement::read_only()?)
    } else {
        None
    };
    let mut builder = ToolRegistry::builder();
    for tool in tools::workspace_tools() {
        let name = tool.name();
        if !granted.contains(name) || (read_only && WRITE_TOOLS.contains(&name)) {
            continue;
        }
        builder = match (&confinement, name) {
            (Some(confinement), BASH) => builder.with(Bash::confined(Arc::clone(confinement))),
            _ => builder.with_shared(tool),
        };
    }
    let processes = if granted.contains(PROCESS) {
        let mut config = ProcessConfig::new(request.workspace, &request.config.environment.exclude);
        if let Some(confinement) = &confinement {
            config = config.confined(Arc::clone(confinement));
        }
        let manager = ProcessManager::new(config)?;
        builder = builder.with(ProcessTool::new(manager.clone()));
        Some(manager)
    } else {
        None
    };
    let workflow = (granted.contains(WORKFLOW) && !read_only).then(WorkflowTool::from_env);
    if let Some(tool) = &workflow {
        builder = builder.with(tool.clone());
    }
    let wants_delegation =
        !request.no_subagents && (granted.contains(AGENT) || granted.contains(AGENTS));
    let delegation = match delegation {
        Some(setup) if wants_delegation => Some(DelegationManager::new(setup)?),
        _ => None,
    };
    if let Some(manager) = &delegation {
        if granted.contains(AGENT) {
            builder = builder.with(AgentTool::new(manager.clone()));
        }
        if granted.contains(AGENTS) {
            builder = builder.with(AgentsTool::new(manager.clone()));
        }
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
        inner: Some((registry, ctx)),
        inbox,
        processes,
        workflow,
        delegation,
        home: request.home.clone(),
    }))
}

/// Where notices for a session wait until its next model request: background completions,
/// and messages from a parent agent. Clones share the queue.
#[derive(Clone, Debug, Default)]
pub struct Inbox(Arc<Mutex<Vec<ToolNotice>>>);

impl Inbox {
    /// Queues `notice`.
    pub fn push(&self, notice: ToolNotice) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(notice);
    }

    fn take(&self) -> Vec<ToolNotice> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The tools of one session. Dropping it stops every child agent, process and background
/// workflow run the session started.
pub struct SessionTools {
    /// The registry and the context calls run with; `None` when the session has no tools.
    inner: Option<(ToolRegistry, ToolContext)>,
    inbox: Inbox,
    processes: Option<ProcessManager>,
    workflow: Option<WorkflowTool>,
    delegation: Option<DelegationManager>,
    home: RhoHome,
}

impl std::fmt::Debug for SessionTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionTools")
            .field("tools", &self.inner.as_ref().map(|(r, _)| r.names()))
            .finish_non_exhaustive()
    }
}

impl SessionTools {
    /// The session's inbox (a parent agent's messages go there).
    pub fn inbox(&self) -> Inbox {
        self.inbox.clone()
    }
}

impl ToolHost for SessionTools {
    fn specs(&self) -> Vec<ToolSpec> {
        let Some((registry, _)) = &self.inner else {
            return Vec::new();
        };
        registry
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
        let Some((registry, ctx)) = &self.inner else {
            return NoTools.call(call, cancel);
        };
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
        let ctx = ctx.clone().with_cancel(cancel.clone());
        match registry.call(&call.name, args, &ctx) {
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
        self.inbox
            .take()
            .into_iter()
            .map(|n| {
                if n.summary.starts_with('[') {
                    n.summary
                } else {
                    format!("[{} notice: {}]\n{}", n.tool, n.kind, n.summary)
                }
            })
            .collect()
    }

    fn runs_concurrently(&self, name: &str) -> bool {
        // Foreground delegations in one step run together; everything else in order.
        name == AGENT && self.delegation.is_some()
    }
}

impl Drop for SessionTools {
    fn drop(&mut self) {
        if let Some(delegation) = &self.delegation {
            delegation.shutdown();
        }
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
    consent: Option<ConsentAsker>,
    inbox: Inbox,
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
        self.inbox.push(notice);
    }
}
