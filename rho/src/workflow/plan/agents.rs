//! Agent resolution for planning: the catalog (discovered once, only when a node names an
//! agent), bound for a delegated workflow node and frozen as an `AgentSetup`.
//!
//! Invariant: project definitions enter the catalog only when the workspace is trusted (or
//! `RHO_TRUST_PROJECT_AGENTS=1`), and the workflow-local `<workflow_dir>/agents` level wins
//! over every other level for this plan only.

use rho_ipc::program::AgentSetup;
use rho_policy::PermissionMode;

use super::freeze::AgentResolver;
use crate::agents::{
    BindRequest, Catalog, CatalogSources, HostCapabilities, Invocation, bind,
    binder::to_agent_setup,
};
use crate::config::Config;

/// Capabilities the host offers an agent node at plan time: every built-in capability the
/// platform has (the platform's shell, not the other one), minus delegation, which the
/// binder withholds from delegated runs anyway.
pub fn workflow_host_capabilities() -> HostCapabilities {
    let other_shell = if cfg!(windows) { "bash" } else { "powershell" };
    HostCapabilities::new(
        crate::agents::definition::RHO_CAPABILITIES
            .iter()
            .copied()
            .filter(|c| *c != "shell" && *c != other_shell),
    )
}

/// Resolves agents from the catalog described by `sources`.
pub struct CatalogAgents<'a> {
    sources: CatalogSources,
    config: &'a Config,
    capabilities: HostCapabilities,
    catalog: Option<Result<Catalog, String>>,
}

impl<'a> CatalogAgents<'a> {
    /// A resolver over `sources` bound with `config`.
    pub fn new(sources: CatalogSources, config: &'a Config) -> Self {
        Self {
            sources,
            config,
            capabilities: workflow_host_capabilities(),
            catalog: None,
        }
    }
}

impl AgentResolver for CatalogAgents<'_> {
    fn resolve(&mut self, id: &str) -> Result<AgentSetup, String> {
        let sources = &self.sources;
        let catalog = self
            .catalog
            .get_or_insert_with(|| Catalog::discover(sources).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| format!("the agent catalog cannot be loaded: {e}"))?;
        let entry = catalog
            .resolve(id)
            .map_err(|e| match catalog.ignored_project_dir() {
                Some(dir) => format!(
                    "{e} (project agent definitions in {} are ignored: this workspace is not \
                 trusted; trust it with `rho trust add`, or set RHO_TRUST_PROJECT_AGENTS=1 for \
                 one process)",
                    dir.display()
                ),
                None => e.to_string(),
            })?;
        let request = BindRequest {
            config: self.config,
            capabilities: &self.capabilities,
            invocation: Invocation::Delegated,
            // Binding at plan time fixes the setup, not the permission mode the run uses;
            // `auto` is the mode in which every runtime can be bound.
            permission_mode: PermissionMode::Auto,
            max_turns: None,
        };
        let bound = bind(entry, &request).map_err(|e| e.to_string())?;
        Ok(to_agent_setup(&bound))
    }
}
