//! `rho workflow list`: the current workspace's workflows (name and entry file), and its plans
//! and runs newest first (or only one kind, with `--workflows`, `--plans` or `--runs`),
//! including entries written by an older release (manifest format 1), marked legacy.
//!
//! `--json` prints Rho 1.47's document: `{"plans": [...], "runs": [...]}` with Rho's item
//! keys (`id`, `name`, `step_count` / `lifecycle`, `done_steps`, `total_steps`,
//! `created_at_unix_nanos`) and ours beside them.
//!
//! Invariant: only entries whose recorded workspace is the current canonical workspace are
//! shown, so two checkouts never see each other's plans; listing never takes a run's lock;
//! a plan made by a degraded planner sandbox (and a run of one) is marked in every format.

use std::fmt::Write as _;

use clap::Args;
use serde_json::json;

use super::{DocumentOutputArgs, json_text, print_out, rho_shapes, store_error};
use crate::cli::exit::{CliError, CliResult, ExitCode};
use crate::paths::RhoHome;
use crate::workflow::locate;
use crate::workflow::store::plans::{self, StoredPlanManifest};

/// List this workspace's plans and runs, newest first.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// List only the workspace's workflows (in JSON, as `kind: "workflow"` items).
    #[arg(long, conflicts_with_all = ["plans", "runs"])]
    pub workflows: bool,
    /// List only plans.
    #[arg(long, conflicts_with = "runs")]
    pub plans: bool,
    /// List only runs.
    #[arg(long)]
    pub runs: bool,
    /// Show at most N entries of each kind.
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    #[command(flatten)]
    pub output: DocumentOutputArgs,
}

/// Runs `rho workflow list`.
pub fn run_list(args: &ListArgs) -> CliResult {
    let home = RhoHome::from_env().map_err(|e| CliError::operational(e.to_string()))?;
    let located = super::workspace()?;
    let workflows = (!args.plans && !args.runs).then(|| {
        let mut named = locate::workspace_workflows(&located.root);
        if let Some(limit) = args.limit {
            named.truncate(limit);
        }
        named
    });
    let workspace = located.root.to_string_lossy();
    let plans = if args.runs || args.workflows {
        None
    } else {
        Some(plan_items(&home, &workspace, args.limit)?)
    };
    let runs = if args.plans || args.workflows {
        None
    } else {
        Some(run_items(&home, &workspace, args.limit)?)
    };
    let text = if args.output.is_json() {
        // Rho's document: both sections always present (empty when filtered out), each
        // newest first; the workspace's workflows beside them when asked for.
        let mut document = json!({
            "plans": plans.clone().unwrap_or_default(),
            "runs": runs.clone().unwrap_or_default(),
        });
        if let Some(workflows) = workflows.as_ref().filter(|_| args.workflows) {
            document["workflows"] = workflows
                .iter()
                .map(|w| json!({ "name": w.name, "path": w.path.to_string_lossy() }))
                .collect();
        }
        json_text(&document)
    } else {
        let mut out = String::new();
        if let Some(workflows) = &workflows {
            out.push_str(&workflow_table(workflows));
        }
        if let Some(plans) = &plans {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&plan_table(plans));
        }
        if let Some(runs) = &runs {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&run_table(runs));
        }
        // Workflow names and file names come from the workspace.
        crate::terminal::escape_controls_keep_lines(&out).into_owned()
    };
    print_out(&text)?;
    Ok(ExitCode::Success)
}

fn workflow_table(items: &[locate::NamedWorkflow]) -> String {
    if items.is_empty() {
        return format!(
            "no workflows in {} (rho workflow new NAME writes one)\n",
            locate::WORKFLOWS_DIR
        );
    }
    let width = items.iter().map(|w| w.name.len()).max().unwrap_or(0).max(8);
    let mut out = format!("{:<width$}  {}\n", "WORKFLOW", "PATH");
    for w in items {
        let _ = writeln!(out, "{:<width$}  {}", w.name, w.path.display());
    }
    out
}

/// This workspace's plans, newest first.
fn plan_items(
    home: &RhoHome,
    workspace: &str,
    limit: Option<usize>,
) -> Result<Vec<serde_json::Value>, CliError> {
    let mut items = Vec::new();
    for manifest in plans::list_all(home).map_err(|e| store_error(&e))? {
        if manifest.workspace_path() != Some(workspace) {
            continue;
        }
        items.push(match &manifest {
            StoredPlanManifest::Current(m) => json!({
                "id": m.plan_id,
                "step_count": m.node_count,
                "created_at_unix_nanos": rho_shapes::unix_nanos(&m.created_at),
                "kind": "plan",
                "plan_id": m.plan_id,
                "created_at": m.created_at,
                "name": m.name,
                "node_count": m.node_count,
                "program_digest": m.program_digest,
                "sandbox_missing": m.sandbox.missing,
            }),
            StoredPlanManifest::Legacy(v) => json!({
                "id": manifest.plan_id(),
                "step_count": v["step_count"],
                "created_at_unix_nanos": v["created_at_unix_nanos"],
                "kind": "plan",
                "plan_id": manifest.plan_id(),
                "legacy": true,
                "created_at": manifest.created_at(),
                "name": v["name"],
                "node_count": v["step_count"],
                "graph_digest": v["graph_digest"],
            }),
        });
    }
    if let Some(limit) = limit {
        items.truncate(limit);
    }
    Ok(items)
}

fn plan_table(items: &[serde_json::Value]) -> String {
    if items.is_empty() {
        "no plans in this workspace\n".to_owned()
    } else {
        let mut out = format!(
            "{:<36}  {:<24}  {:>5}  {:<20}  {}\n",
            "PLAN_ID", "CREATED", "NODES", "DIGEST", "NAME"
        );
        for i in items {
            let digest = if i["legacy"] == true {
                "legacy (format 1)"
            } else {
                let d = i["program_digest"].as_str().unwrap_or("-");
                d.get(..20).unwrap_or(d)
            };
            let _ = writeln!(
                out,
                "{:<36}  {:<24}  {:>5}  {:<20}  {}",
                i["plan_id"].as_str().unwrap_or("-"),
                i["created_at"].as_str().unwrap_or("-"),
                i["node_count"].to_string(),
                digest,
                i["name"].as_str().unwrap_or("-")
            );
            mark_degraded(&mut out, i);
        }
        out
    }
}

/// Appends ` [planner sandbox degraded: missing ...]` to the row just written when the
/// plan was evaluated without every protection.
fn mark_degraded(out: &mut String, item: &serde_json::Value) {
    let missing: Vec<&str> = item["sandbox_missing"]
        .as_array()
        .map(|m| m.iter().filter_map(serde_json::Value::as_str).collect())
        .unwrap_or_default();
    if missing.is_empty() {
        return;
    }
    if out.ends_with('\n') {
        out.pop();
    }
    let _ = writeln!(
        out,
        "  [planner sandbox degraded: missing {}]",
        missing.join(", ")
    );
}

/// This workspace's runs (format-1 runs included, marked legacy), newest first.
fn run_items(
    home: &RhoHome,
    workspace: &str,
    limit: Option<usize>,
) -> Result<Vec<serde_json::Value>, CliError> {
    use crate::workflow::store::runs::{self, StoredManifest};
    let mut items = Vec::new();
    for manifest in runs::list(home).map_err(|e| store_error(&e))? {
        let item = match &manifest {
            StoredManifest::Current(m) if m.workspace.path == workspace => {
                // The snapshot plus the journal after it, and a dead owner noticed: the same
                // lifecycle `status` reports.
                let seen = crate::workflow::runner::inspect(home, &m.run_id).ok();
                let lifecycle = seen
                    .as_ref()
                    .and_then(|(_, i)| i.effective_lifecycle())
                    .map(|l| l.as_str().to_owned());
                let outcome = seen.as_ref().and_then(|(_, i)| {
                    i.state
                        .as_ref()
                        .and_then(|s| s.root().result.as_ref())
                        .map(|r| r.outcome.as_str().to_owned())
                });
                // The run's plan records how its sources were evaluated (nothing to say once
                // the plan is deleted).
                let sandbox_missing = plans::manifest(home, &m.plan_id)
                    .map(|p| p.sandbox.missing)
                    .unwrap_or_default();
                let done_steps = seen
                    .as_ref()
                    .and_then(|(_, i)| i.state.as_ref())
                    .map_or(0, |s| {
                        s.root()
                            .tasks
                            .values()
                            .filter(|t| t.state.is_terminal())
                            .count()
                    });
                json!({
                    "id": m.run_id, "done_steps": done_steps, "total_steps": m.node_count,
                    "created_at_unix_nanos": rho_shapes::unix_nanos(&m.created_at),
                    "kind": "run", "run_id": m.run_id, "plan_id": m.plan_id, "created_at": m.created_at,
                    "name": m.name, "node_count": m.node_count, "program_digest": m.program_digest,
                    "lifecycle": lifecycle, "outcome": outcome, "sandbox_missing": sandbox_missing,
                })
            }
            StoredManifest::Legacy(v) if plans::legacy_workspace_path(v) == Some(workspace) => {
                // Rho's own state record says how far the run got.
                let state = crate::workflow::runner::inspect(home, &manifest.run_id())
                    .ok()
                    .and_then(|(_, i)| i.legacy_state);
                let nodes = state.as_ref().and_then(|s| s["state"]["nodes"].as_object());
                let done_steps = nodes.map_or(0, |n| {
                    n.values().filter(|v| v["state"] == "terminal").count()
                });
                let lifecycle = state.as_ref().map(|s| s["state"]["lifecycle"].clone());
                json!({
                    "id": v["run_id"], "lifecycle": lifecycle, "done_steps": done_steps,
                    "total_steps": v["step_count"], "created_at_unix_nanos": v["created_at_unix_nanos"],
                    "kind": "run", "run_id": v["run_id"], "plan_id": v["plan_id"], "legacy": true,
                    "created_at": manifest.created_sort_key(), "name": v["name"], "node_count": v["step_count"],
                })
            }
            _ => continue,
        };
        items.push(item);
    }
    if let Some(limit) = limit {
        items.truncate(limit);
    }
    Ok(items)
}

fn run_table(items: &[serde_json::Value]) -> String {
    if items.is_empty() {
        "no runs in this workspace\n".to_owned()
    } else {
        let mut out = format!(
            "{:<36}  {:<24}  {:<14}  {:<12}  {}\n",
            "RUN_ID", "CREATED", "LIFECYCLE", "OUTCOME", "NAME"
        );
        for i in items {
            let lifecycle = if i["legacy"] == true {
                "legacy"
            } else {
                i["lifecycle"].as_str().unwrap_or("-")
            };
            let _ = writeln!(
                out,
                "{:<36}  {:<24}  {:<14}  {:<12}  {}",
                i["run_id"].as_str().unwrap_or("-"),
                i["created_at"].as_str().unwrap_or("-"),
                lifecycle,
                i["outcome"].as_str().unwrap_or("-"),
                i["name"].as_str().unwrap_or("-")
            );
            mark_degraded(&mut out, i);
        }
        out
    }
}
