//! Prepares an agent session from what a user selected: the agent definition (bound for
//! this invocation), the model (configuration, flags, the definition's pin), the system
//! prompt, the tools and the transcript location. `rho run`, the interactive session and
//! workflow agent nodes all start sessions through here.
//!
//! Invariant: binding happens before anything runs, so an unknown agent, a capability that
//! does not exist, or an unusable model is an error before the first model request.

use std::path::{Path, PathBuf};

use rho_policy::PermissionMode;

use super::provider::select::{self, EnvLookup, ModelOverrides, SelectError};
use super::provider::{ModelChoice, ModelClient};
use crate::agents::binder::{BindRequest, BoundAgent, BoundRuntime, Invocation};
use crate::agents::{AgentError, Catalog, HostCapabilities};
use crate::config::Config;
use crate::paths::RhoHome;

/// Why a session could not be prepared.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// The agent id is not in the catalog.
    #[error("unknown agent `{agent}`; available: {available}")]
    UnknownAgent {
        /// The id asked for.
        agent: String,
        /// The catalog's ids.
        available: String,
    },
    /// The catalog or binding failed.
    #[error("agent `{agent}` cannot be bound")]
    Bind {
        /// The agent.
        agent: String,
        /// Why.
        #[source]
        source: Box<AgentError>,
    },
    /// A `claude-cli` agent was selected where only the `rho` runtime runs.
    #[error(
        "agent `{agent}` uses runtime claude-cli, which runs only as a delegated agent; choose \
         an agent with runtime: rho here"
    )]
    NotRhoRuntime {
        /// The agent.
        agent: String,
    },
    /// No usable model.
    #[error(transparent)]
    Model(#[from] SelectError),
    /// The HTTP client could not be built.
    #[error("{0}")]
    Http(String),
}

impl LaunchError {
    /// Whether the problem is a missing credential (reported as an authentication failure).
    pub fn is_authentication(&self) -> bool {
        matches!(
            self,
            Self::Model(SelectError::MissingKey { .. } | SelectError::RequiredUnavailable { .. })
        )
    }
}

/// What a caller selects.
#[derive(Clone, Copy)]
pub struct LaunchRequest<'a> {
    /// The data directory.
    pub home: &'a RhoHome,
    /// The loaded configuration.
    pub config: &'a Config,
    /// The canonical workspace.
    pub workspace: &'a Path,
    /// The agent catalog.
    pub catalog: &'a Catalog,
    /// The agent id (`default` when the user named none).
    pub agent: &'a str,
    /// `--provider`, `--model`, `--reasoning`.
    pub overrides: &'a ModelOverrides,
    /// What the host can supply (the registry's capabilities).
    pub capabilities: &'a HostCapabilities,
    /// Root (`rho`, `rho run`) or delegated (a node, the agent tool).
    pub invocation: Invocation,
    /// The permission mode in force.
    pub permission_mode: PermissionMode,
    /// Send no system prompt (`--no-system-prompt`).
    pub no_system_prompt: bool,
    /// Reads environment variables (keys, base-URL overrides).
    pub env: EnvLookup<'a>,
}

/// A prepared session: everything but the tool host and the transcript.
#[derive(Debug)]
pub struct PreparedAgent {
    /// The bound definition.
    pub bound: BoundAgent,
    /// The model client.
    pub client: ModelClient,
    /// The system prompt sent.
    pub system_prompt: String,
    /// The capabilities the binding granted (the tool names to register).
    pub capabilities: std::collections::BTreeSet<String>,
}

/// The default agent id.
pub const DEFAULT_AGENT: &str = "default";

/// Binds the agent and resolves its model.
pub fn prepare(request: &LaunchRequest<'_>) -> Result<PreparedAgent, LaunchError> {
    let entry = request
        .catalog
        .get(request.agent)
        .ok_or_else(|| LaunchError::UnknownAgent {
            agent: request.agent.to_owned(),
            available: request
                .catalog
                .entries()
                .map(|e| e.id().to_owned())
                .collect::<Vec<_>>()
                .join(", "),
        })?;
    let bound = crate::agents::binder::bind(
        entry,
        &BindRequest {
            config: request.config,
            capabilities: request.capabilities,
            invocation: request.invocation,
            permission_mode: request.permission_mode,
            max_turns: None,
        },
    )
    .map_err(|source| LaunchError::Bind {
        agent: request.agent.to_owned(),
        source: Box::new(source),
    })?;
    let BoundRuntime::Rho(launch) = &bound.runtime else {
        return Err(LaunchError::NotRhoRuntime {
            agent: request.agent.to_owned(),
        });
    };
    let parent = select::conversation_model(request.config, request.overrides, request.env);
    let choice: ModelChoice = select::agent_model(
        request.config,
        request.agent,
        &launch.model,
        request.overrides.reasoning.or(launch.reasoning),
        parent,
        request.env,
    )?;
    let http = super::provider::http_client().map_err(LaunchError::Http)?;
    let system_prompt = if request.no_system_prompt {
        String::new()
    } else {
        launch.system_prompt.clone()
    };
    let capabilities = launch.capabilities.clone();
    Ok(PreparedAgent {
        bound,
        client: ModelClient::new(choice, http),
        system_prompt,
        capabilities,
    })
}

/// A new session folder for `workspace`: `sessions/<workspace-key>/<created>_<id>`.
pub fn new_session_dir(home: &RhoHome, workspace: &Path) -> (String, PathBuf) {
    let (id, folder) = super::transcript::new_session_folder();
    (
        id,
        super::transcript::sessions_dir(home, workspace).join(folder),
    )
}
