//! `rho workflow show PLAN_ID|RUN_ID|FILE|NAME`: what a plan's digest covers, in words (or
//! the frozen program as JSON): nodes, needs, conditions, argv, cwd, frozen executables and
//! interpreters with short digests, agents, access, timeouts, bounds, inputs, exports.
//!
//! Invariant: it reads a stored plan, a run's own verified copy of its program, or a
//! workflow planned without storing; it never takes a run's lock and never writes.

use clap::Args;
use serde_json::json;

use super::{Context, DocumentOutputArgs, InputArgs, Target, json_text, parse_inputs, plan_error};
use super::{print_out, store_error, warn};
use crate::cli::exit::{CliError, CliResult, ExitCode};
use crate::workflow::describe;
use crate::workflow::store::StoreError;
use crate::workflow::store::plans;
use crate::workflow::store::runs::{self, StoredManifest};

/// Show what a plan or run's program digest covers.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// A plan or run id (or unique prefix), or a workflow file or name (planned, not stored).
    #[arg(value_name = "PLAN_ID|RUN_ID|FILE|NAME")]
    pub target: String,
    #[command(flatten)]
    pub inputs: InputArgs,
    #[command(flatten)]
    pub output: DocumentOutputArgs,
}

/// Runs `rho workflow show`.
pub fn run_show(args: &ShowArgs) -> CliResult {
    let ctx = Context::from_env()?;
    let (kind, id, program, digest) = match super::target(&ctx.located, &args.target)? {
        Target::File(file) => {
            let inputs = parse_inputs(&args.inputs.inputs)?;
            let planned = ctx.plan(&file, &inputs).map_err(|e| plan_error(&e))?;
            warn(&planned.warnings());
            (
                "file",
                file.display().to_string(),
                planned.program,
                planned.program_digest,
            )
        }
        Target::Id(given) => {
            if !args.inputs.inputs.is_empty() {
                return Err(CliError::invalid(
                    "--input applies to a workflow file, not to a stored plan or run",
                ));
            }
            match plans::resolve(&ctx.home, &given) {
                Ok(id) => {
                    let plan = plans::load(&ctx.home, &id).map_err(|e| store_error(&e))?;
                    ("plan", id, plan.program, plan.program_digest)
                }
                Err(StoreError::UnknownId { .. }) => {
                    let id = runs::resolve(&ctx.home, &given).map_err(|e| {
                        super::unknown_target(&ctx.located, &given, &e, "plan or run")
                    })?;
                    let run = runs::open(&ctx.home, &id).map_err(|e| store_error(&e))?;
                    let manifest = match run.manifest().map_err(|e| store_error(&e))? {
                        StoredManifest::Current(m) => m,
                        StoredManifest::Legacy(_) => {
                            return Err(store_error(&StoreError::Legacy { kind: "run", id }));
                        }
                    };
                    let program = run.load_program(&manifest).map_err(|e| store_error(&e))?;
                    ("run", id, program, manifest.program_digest)
                }
                Err(e) => return Err(store_error(&e)),
            }
        }
    };
    let text = if args.output.is_json() {
        json_text(&json!({
            "kind": kind,
            "id": id,
            "program_digest": digest,
            "program": program,
        }))
    } else {
        describe::describe(&program, &format!("{kind} {id}"), &digest)
    };
    print_out(&text)?;
    Ok(ExitCode::Success)
}
