//! Agent resolution for planning: the catalog (discovered once, only when a node names an
//! agent), bound for a delegated workflow node and frozen as an `AgentSetup`.
//!
//! Invariant: project definitions enter the catalog only when the workspace is trusted (or
//! `RHO_TRUST_PROJECT_AGENTS=1`), and the workflow-local `<workflow_dir>/agents` level wins
//! over every other level for this plan only. A listed tool the binding leaves out is never
//! dropped silently: it is logged as a warning and kept in [`CatalogAgents::withheld`].

use rho_ipc::program::AgentSetup;
use rho_policy::PermissionMode;

use super::freeze::AgentResolver;
use crate::agents::{
    BindRequest, Catalog, CatalogSources, HostCapabilities, Invocation, WithheldTool, bind,
    binder::to_agent_setup,
};
use crate::config::Config;

/// Capabilities the host offers an agent node at plan time: every built-in Rho capability
/// except `shell` (a name the binder resolves to the platform shell) and the other
/// platform's shell. `agent` and `agents` stay in the set: the binder withholds them from
/// delegated runs. No extension capability is supplied, so a name outside the Rho vocabulary
/// fails binding, and a listed `powershell` (on Unix) is withheld.
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
    withheld: Vec<(String, Vec<WithheldTool>)>,
}

impl<'a> CatalogAgents<'a> {
    /// A resolver over `sources` bound with `config`.
    pub fn new(sources: CatalogSources, config: &'a Config) -> Self {
        Self {
            sources,
            config,
            capabilities: workflow_host_capabilities(),
            catalog: None,
            withheld: Vec::new(),
        }
    }

    /// For every agent resolved so far that lists tools the binding left out: its id and
    /// those tools, in resolution order.
    pub fn withheld(&self) -> &[(String, Vec<WithheldTool>)] {
        &self.withheld
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
        let withheld = bound.withheld();
        if !withheld.is_empty() && !self.withheld.iter().any(|(agent, _)| agent == id) {
            let listed: Vec<String> = withheld.iter().map(ToString::to_string).collect();
            tracing::warn!(
                "agent `{id}`: listed tools left out of this plan's binding: {}",
                listed.join(", ")
            );
            self.withheld.push((id.to_owned(), withheld.to_vec()));
        }
        // The setup records the bound set, so the read-only rule judges what the agent holds.
        Ok(to_agent_setup(&bound))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::WithheldReason;
    use crate::paths::RhoHome;

    #[test]
    fn withheld_tools_are_recorded_and_the_setup_holds_the_bound_set() {
        let root = tempfile::tempdir().unwrap();
        let home = RhoHome::at(root.path().join("home"), None);
        let flow = root.path().join("flow");
        std::fs::create_dir_all(flow.join("agents")).unwrap();
        let other_shell = if cfg!(windows) { "bash" } else { "powershell" };
        std::fs::write(
            flow.join("agents/look.md"),
            format!("---\ndescription: d\ntools: [read_file, {other_shell}, agent]\n---\n"),
        )
        .unwrap();
        let config = Config::default();
        let sources = CatalogSources::new(&home, None, false).with_workflow_dir(&flow);
        let mut agents = CatalogAgents::new(sources, &config);

        let setup = agents.resolve("look").unwrap();
        assert_eq!(setup.capabilities, ["read_file"]);
        assert!(setup.read_only, "the read-only rule sees the bound set");
        // Resolving twice records once.
        agents.resolve("look").unwrap();
        let withheld = agents.withheld();
        assert_eq!(withheld.len(), 1);
        assert_eq!(withheld[0].0, "look");
        let reasons: Vec<_> = withheld[0]
            .1
            .iter()
            .map(|w| (w.name.as_str(), w.reason))
            .collect();
        assert_eq!(
            reasons,
            [
                (other_shell, WithheldReason::NotSupplied),
                ("agent", WithheldReason::Delegation)
            ]
        );
        // An agent that gets what it lists records nothing.
        agents.resolve("explorer").unwrap();
        assert_eq!(agents.withheld().len(), 1);
        // A name outside the vocabulary fails binding.
        std::fs::write(
            flow.join("agents/ext.md"),
            "---\ndescription: d\ntools: [my_ext]\n---\n",
        )
        .unwrap();
        let sources = CatalogSources::new(&home, None, false).with_workflow_dir(&flow);
        let err = CatalogAgents::new(sources, &config)
            .resolve("ext")
            .unwrap_err();
        assert!(err.contains("unknown tools my_ext"), "{err}");
    }
}
