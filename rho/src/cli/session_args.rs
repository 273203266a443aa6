//! The options that select how an agent session runs, shared by `rho run` and the
//! interactive session: `--agent`, `--provider`, `--model`, `--reasoning`, `--no-tools`,
//! `--no-system-prompt`, `--no-subagents` and `--permission-mode`. They are global, as in
//! Rho 1.47, so they may come before or after the subcommand.

use std::path::Path;
use std::sync::Arc;

use clap::Args;
use rho_policy::{ModeSelection, PermissionMode};

use super::exit::CliError;
use crate::agents::binder::Invocation;
use crate::agents::{Catalog, Reasoning};
use crate::config::Config;
use crate::paths::RhoHome;
use crate::permissions::mode::select_process_mode;
use crate::runtime::delegation::manager::DelegationSetup;
use crate::runtime::host::{HostRequest, Interaction, SessionTools, host_capabilities, tool_host};
use crate::runtime::launch::{self, LaunchError, LaunchRequest, PreparedAgent};
use crate::runtime::provider::select::ModelOverrides;
use crate::runtime::provider::select::process_env;

/// Session selection flags.
#[derive(Debug, Clone, Default, Args)]
pub struct SessionArgs {
    /// Select the agent definition used for this session or automation run.
    #[arg(long, global = true, value_name = "ID")]
    pub agent: Option<String>,
    /// Select the provider for this invocation.
    #[arg(long, global = true, value_name = "PROVIDER")]
    pub provider: Option<String>,
    /// Select a model: an id, `provider/model`, or `@alias`.
    #[arg(long, global = true, value_name = "MODEL")]
    pub model: Option<String>,
    /// Select a reasoning level: off, minimal, low, medium, high, xhigh or max.
    #[arg(long, global = true, value_name = "LEVEL")]
    pub reasoning: Option<String>,
    /// Do not expose tools to the model.
    #[arg(long, global = true)]
    pub no_tools: bool,
    /// Do not send rho's system prompt.
    #[arg(long, global = true)]
    pub no_system_prompt: bool,
    /// Do not expose the delegated-agent tools (agent/agents) to the model.
    #[arg(long, global = true)]
    pub no_subagents: bool,
    /// Permission mode: bypass, auto, allow_edits, plan or supervised (overrides
    /// RHO_PERMISSION_MODE and `[behavior] permission_mode`).
    #[arg(long = "permission-mode", global = true, value_name = "MODE")]
    pub permission_mode: Option<String>,
}

impl SessionArgs {
    /// The model overrides, checked.
    pub fn overrides(&self) -> Result<ModelOverrides, CliError> {
        let reasoning = match &self.reasoning {
            None => None,
            Some(text) => Some(Reasoning::parse(text).ok_or_else(|| {
                CliError::invalid(format!(
                    "--reasoning `{text}`: allowed: off, minimal, low, medium, high, xhigh, max"
                ))
            })?),
        };
        for (flag, value) in [("--provider", &self.provider), ("--model", &self.model)] {
            if let Some(v) = value
                && (v.is_empty() || v.chars().any(char::is_whitespace))
            {
                return Err(CliError::invalid(format!(
                    "{flag} `{v}` must be non-empty and without whitespace"
                )));
            }
        }
        Ok(ModelOverrides {
            provider: self.provider.clone(),
            model: self.model.clone(),
            reasoning,
        })
    }

    /// Checks every value given, whichever subcommand follows (as Rho's parser does for its
    /// root options): an unknown mode or reasoning level is a usage error even for a
    /// subcommand that would not read it.
    pub fn check(&self) -> Result<(), CliError> {
        self.overrides()?;
        if self.permission_mode.is_some() {
            rho_policy::select_mode(self.permission_mode.as_deref(), None, None)
                .map_err(|e| CliError::invalid(e.to_string()))?;
        }
        Ok(())
    }

    /// The permission mode in force.
    pub fn permission_mode(&self, config: &Config) -> Result<PermissionMode, CliError> {
        self.mode_selection(config).map(|s| s.mode)
    }

    /// The permission mode in force and where it came from (flag, environment, config,
    /// default).
    pub fn mode_selection(&self, config: &Config) -> Result<ModeSelection, CliError> {
        select_process_mode(self.permission_mode.as_deref(), config)
            .map_err(|e| CliError::invalid(e.to_string()))
    }
}

/// Where a root session (`rho run`, the interactive session) runs: what its agent is bound
/// against and its tools act on.
#[derive(Debug, Clone, Copy)]
pub struct RootPlace<'a> {
    /// The data directory.
    pub home: &'a RhoHome,
    /// The configuration.
    pub config: &'a Config,
    /// The canonical workspace.
    pub workspace: &'a Path,
    /// The agent catalog.
    pub catalog: &'a Catalog,
}

impl SessionArgs {
    /// Binds `agent` as a root invocation with these flags and resolves its model.
    pub fn prepare_root(
        &self,
        place: &RootPlace<'_>,
        agent: &str,
        overrides: &ModelOverrides,
        permission_mode: PermissionMode,
    ) -> Result<PreparedAgent, LaunchError> {
        let capabilities = host_capabilities(self.no_subagents);
        let env = |name: &str| process_env(name);
        launch::prepare(&LaunchRequest {
            home: place.home,
            config: place.config,
            workspace: place.workspace,
            catalog: place.catalog,
            agent,
            overrides,
            capabilities: &capabilities,
            invocation: Invocation::Root,
            permission_mode,
            no_system_prompt: self.no_system_prompt,
            env: &env,
        })
    }

    /// The tools of root session `session_id`: the granted ones under `mode`, children started
    /// with the same flags, and `interaction` as the person to ask (`None`: headless, so
    /// approvals fail closed and background delegation is unavailable).
    pub fn root_tools(
        &self,
        place: &RootPlace<'_>,
        prepared: &PreparedAgent,
        mode: ModeSelection,
        overrides: &ModelOverrides,
        session_id: &str,
        interaction: Option<Interaction>,
    ) -> Result<Arc<SessionTools>, CliError> {
        let interactive = interaction.is_some();
        tool_host(
            &HostRequest {
                home: place.home,
                config: place.config,
                workspace: place.workspace,
                capabilities: &prepared.capabilities,
                permission_mode: mode,
                no_tools: self.no_tools,
                no_subagents: self.no_subagents,
                headless: !interactive,
                read_only: false,
            },
            interaction,
            None,
            Some(DelegationSetup {
                home: place.home.clone(),
                config: Arc::new(place.config.clone()),
                workspace: place.workspace.to_path_buf(),
                catalog: Arc::new(place.catalog.clone()),
                overrides: overrides.clone(),
                permission_mode: mode,
                parent_session_id: Some(session_id.to_owned()),
                background: interactive,
            }),
        )
        .map_err(|e| CliError::invalid(crate::workflow::plan::error_chain(&e)))
    }
}
