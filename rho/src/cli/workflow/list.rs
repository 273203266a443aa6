//! `rho workflow list`: the current workspace's plans, newest first.
//!
//! Invariant: only plans whose recorded workspace is the current canonical workspace are
//! shown, so two checkouts never see each other's plans.

use std::fmt::Write as _;

use clap::Args;
use serde_json::json;

use super::{json_text, print_out, store_error};
use crate::cli::exit::{CliError, CliResult, ExitCode};
use crate::paths::{self, RhoHome};
use crate::workflow::store::plans;

/// List this workspace's plans, newest first.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// List plans (the default).
    #[arg(long)]
    pub plans: bool,
    /// Show at most N entries.
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `rho workflow list`.
pub fn run_list(args: &ListArgs) -> CliResult {
    let home = RhoHome::from_env().map_err(|e| CliError::operational(e.to_string()))?;
    let workspace = paths::current_workspace().map_err(|e| CliError::operational(e.to_string()))?;
    let workspace = workspace.to_string_lossy();
    let mut manifests: Vec<_> = plans::list(&home)
        .map_err(|e| store_error(&e))?
        .into_iter()
        .filter(|m| m.workspace.path == workspace)
        .collect();
    if let Some(limit) = args.limit {
        manifests.truncate(limit);
    }
    let text = if args.json {
        let items: Vec<_> = manifests
            .iter()
            .map(|m| {
                json!({
                    "kind": "plan",
                    "plan_id": m.plan_id,
                    "created_at": m.created_at,
                    "name": m.name,
                    "node_count": m.node_count,
                    "program_digest": m.program_digest,
                    "sandbox_missing": m.sandbox.missing,
                })
            })
            .collect();
        json_text(&json!(items))
    } else if manifests.is_empty() {
        "no plans in this workspace\n".to_owned()
    } else {
        let mut out = format!(
            "{:<36}  {:<24}  {:>5}  {:<20}  {}\n",
            "PLAN_ID", "CREATED", "NODES", "DIGEST", "NAME"
        );
        for m in &manifests {
            let digest = m.program_digest.get(..20).unwrap_or(&m.program_digest);
            let _ = writeln!(
                out,
                "{:<36}  {:<24}  {:>5}  {:<20}  {}",
                m.plan_id, m.created_at, m.node_count, digest, m.name
            );
        }
        out
    };
    print_out(&text)?;
    Ok(ExitCode::Success)
}
