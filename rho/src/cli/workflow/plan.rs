//! `rho workflow plan FILE`: freezes a workflow into a stored plan and prints its id and
//! digest (text or JSON).
//!
//! The JSON document is Rho 1.47's (`manifest`, `graph`: see `rho_shapes`) with our flat
//! summary (`planned`, `plan_id`, `program_digest`, ...) beside it.
//!
//! Invariant: a plan id is printed only after the plan is stored completely; every output
//! of a plan made by a degraded planner carries the sandbox warning; a failure exits non-zero
//! in every format (with `--output json`, after a document listing the diagnostics).

use clap::{Args, ValueEnum};
use serde_json::json;

use super::{
    Context, InputArgs, diagnostic_json, json_text, plan_error, print_out, rho_shapes,
    try_create_plan,
};
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
    /// The workflow file, or the name of a workflow in `.rho/workflows/`.
    #[arg(value_name = "FILE|NAME")]
    pub file: String,
    #[command(flatten)]
    pub inputs: InputArgs,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub output: PlanOutput,
    /// Same as `--output json`.
    #[arg(long, hide = true, conflicts_with = "output")]
    pub json: bool,
}

/// Runs `rho workflow plan`.
pub fn run_plan(args: &PlanArgs) -> CliResult {
    let output = if args.json {
        PlanOutput::Json
    } else {
        args.output
    };
    let attempt = Context::from_env().and_then(|ctx| {
        let file = ctx.workflow_file(&args.file)?;
        try_create_plan(&ctx, &file, &args.inputs.inputs)
    });
    let attempt = match attempt {
        Ok(a) => a,
        Err(err) => {
            // A bad --input or an unknown workflow still gives JSON consumers a document.
            if output == PlanOutput::Json {
                print_out(&json_text(&json!({
                    "planned": false,
                    "warnings": [],
                    "diagnostics": [{ "code": "usage", "message": err.message }],
                })))?;
            }
            return Err(err);
        }
    };
    let super::CreatedPlan {
        planned,
        manifest,
        reused,
    } = match attempt {
        Ok(done) => done,
        Err(error) => {
            // JSON consumers get a document with the diagnostics, as `validate` gives them;
            // the error (and its exit code) still goes to stderr for people.
            if output == PlanOutput::Json {
                let diagnostics: Vec<_> = error.diagnostics().iter().map(diagnostic_json).collect();
                print_out(&json_text(&json!({
                    "planned": false,
                    "warnings": [],
                    "diagnostics": diagnostics,
                })))?;
            }
            return Err(plan_error(&error));
        }
    };
    let text = match output {
        PlanOutput::Text => format!(
            "plan_id: {}\nprogram_digest: {}\nname: {}\nnodes: {}\n{}",
            manifest.plan_id,
            manifest.program_digest,
            crate::terminal::escape_controls(&manifest.name),
            manifest.node_count,
            if reused {
                "reused: the stored plan with this digest (same sources and inputs)\n"
            } else {
                ""
            }
        ),
        // Rho's `manifest` and `graph` first; our flat summary beside them.
        PlanOutput::Json => json_text(&json!({
            "manifest": rho_shapes::plan_manifest(&manifest),
            "graph": rho_shapes::frozen_workflow(
                &planned.program,
                &planned.graph_digest,
                &planned.program_digest,
                Some(&planned.entry_label),
                true,
            ),
            "planned": true,
            "reused": reused,
            "plan_id": manifest.plan_id,
            "program_digest": manifest.program_digest,
            "graph_digest": manifest.graph_digest,
            "name": manifest.name,
            "node_count": manifest.node_count,
            "created_at": manifest.created_at,
            "sources": manifest.sources,
            "warnings": planned.warnings(),
            "diagnostics": [],
        })),
    };
    print_out(&text)?;
    Ok(ExitCode::Success)
}
