//! `rho workflow plan FILE`: freezes a workflow into a stored plan and prints its id and
//! digest (text or JSON).
//!
//! Invariant: a plan id is printed only after the plan is stored completely; every output
//! of a plan made by a degraded planner carries the sandbox warning.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use serde_json::json;

use super::{InputArgs, create_plan, json_text, print_out};
use crate::cli::exit::{CliResult, ExitCode};

/// Output formats of `plan`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PlanOutput {
    /// `key: value` lines.
    Text,
    /// One JSON document.
    Json,
}

/// Freeze a workflow file into a stored plan.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The workflow file (inside the current directory, the workspace).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    #[command(flatten)]
    pub inputs: InputArgs,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub output: PlanOutput,
}

/// Runs `rho workflow plan`.
pub fn run_plan(args: &PlanArgs) -> CliResult {
    let (planned, manifest) = create_plan(&args.file, &args.inputs.inputs)?;
    let text = match args.output {
        PlanOutput::Text => format!(
            "plan_id: {}\nprogram_digest: {}\nname: {}\nnodes: {}\n",
            manifest.plan_id, manifest.program_digest, manifest.name, manifest.node_count
        ),
        PlanOutput::Json => json_text(&json!({
            "plan_id": manifest.plan_id,
            "program_digest": manifest.program_digest,
            "graph_digest": manifest.graph_digest,
            "name": manifest.name,
            "node_count": manifest.node_count,
            "created_at": manifest.created_at,
            "sources": manifest.sources,
            "warnings": planned.warnings(),
        })),
    };
    print_out(&text)?;
    Ok(ExitCode::Success)
}
