//! The tool host of a session: which capabilities this host supplies, and the registry
//! behind the [`ToolHost`] seam the agent loop calls.
//!
//! Invariant: the capability set offered to the binder is exactly the set of tools the
//! registry can build, so a definition asking for a tool that does not exist fails binding.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use rho_policy::PermissionMode;

use super::agent_loop::{NoTools, ToolHost};
use crate::agents::HostCapabilities;
use crate::config::Config;
use crate::paths::RhoHome;

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
    /// The permission mode in force.
    pub permission_mode: PermissionMode,
    /// `--no-tools`.
    pub no_tools: bool,
    /// `--no-subagents`.
    pub no_subagents: bool,
    /// No person can answer an approval (approvals fail closed).
    pub headless: bool,
}

/// The capabilities this host supplies to the binder.
pub fn host_capabilities(_no_subagents: bool) -> HostCapabilities {
    HostCapabilities::new(Vec::<String>::new())
}

/// The tool host for a session.
pub fn tool_host(_request: &HostRequest<'_>) -> Arc<dyn ToolHost> {
    Arc::new(NoTools)
}
