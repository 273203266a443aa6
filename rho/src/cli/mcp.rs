//! `rho mcp`: serves the model-facing tools (`workflow`) over the Model Context Protocol on
//! stdio, for agent clients such as Claude Code and Codex to start as an MCP server.
//!
//! Invariant: the server runs under the permission mode chosen exactly as for `run`
//! (`--permission-mode`, `RHO_PERMISSION_MODE`, `[behavior] permission_mode`, else `bypass`),
//! and an unknown mode or an invalid configuration stops it before it answers anything.

use std::sync::Arc;

use clap::Args;

use super::exit::{CliError, CliResult, ExitCode};
use crate::cli::permission_args::PermissionArgs;
use crate::mcp::{McpHost, McpServeError, McpServer};
use crate::paths::{self, RhoHome};
use crate::permissions::{HostAuthorizer, SharedHostAuthorizer, select_process_mode};
use crate::process::{ProcessConfig, ProcessManager};
use crate::tools::process::ProcessTool;
use crate::tools::workflow::WorkflowTool;
use crate::tools::{ToolContext, ToolHost as _, ToolRegistry};
use crate::workflow::plan::error_chain;

/// Serve rho's tools over MCP on stdin/stdout.
#[derive(Debug, Args)]
pub struct McpArgs {
    #[command(flatten)]
    pub permissions: PermissionArgs,
}

impl From<McpServeError> for CliError {
    fn from(err: McpServeError) -> Self {
        CliError::operational(error_chain(&err))
    }
}

/// Runs `rho mcp` until the client closes stdin. The mode flag may also come before the
/// subcommand (`rho --permission-mode plan mcp`), as Rho's root options do.
pub fn run_mcp(args: &McpArgs, session: &super::session_args::SessionArgs) -> CliResult {
    let home = RhoHome::from_env().map_err(|e| CliError::operational(e.to_string()))?;
    let workspace =
        paths::current_workspace().map_err(|e| CliError::operational(error_chain(&e)))?;
    let config = super::root::options()
        .load_config(&home)
        .map_err(|e| CliError::invalid(format!("invalid configuration: {}", error_chain(&e))))?;
    let flag = args
        .permissions
        .permission_mode
        .as_deref()
        .or(session.permission_mode.as_deref());
    let selection = select_process_mode(flag, &config)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("rho-mcp")
        .enable_all()
        .build()
        .map_err(McpServeError::Runtime)?;
    let host = McpHost::new(runtime.handle().clone());
    let mut authorizer = HostAuthorizer::for_process(selection.mode, &home, &config, &workspace)?;
    // The terminal (if any) belongs to the protocol: people are asked through the client.
    authorizer.set_responder(host.approval_responder());
    let workflow = WorkflowTool::from_env();
    // Background processes live as long as this server: closing stdin stops every tree.
    let processes =
        ProcessManager::new(ProcessConfig::new(&workspace, &config.environment.exclude))
            .map_err(|e| CliError::operational(format!("cannot start the process manager: {e}")))?;
    let registry = ToolRegistry::builder()
        .with(workflow.clone())
        .with(ProcessTool::new(processes.clone()))
        .build()
        .map_err(|e| CliError::operational(e.to_string()))?;
    let ctx = ToolContext::new(
        workspace,
        home.clone(),
        Arc::new(config),
        selection,
        Arc::new(SharedHostAuthorizer::new(authorizer)),
        Arc::new(host.clone()),
    );
    tracing::info!(mode = %selection, "serving MCP on stdio");
    let server = McpServer::new(Arc::new(registry), ctx, host);
    let served = runtime.block_on(server.serve_stdio());
    // Stdin closed (or the session failed): stop what this server started.
    processes.shutdown();
    workflow.shutdown(&home);
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    served?;
    Ok(ExitCode::Success)
}
