//! `rho workflow resume <RUN_ID>`: own a run again from its own program copy, give cancelled
//! (and, with `--recover-uncertain`, uncertain) nodes a new attempt, and run it to its end.
//!
//! Invariant: the run's `program.cbor` is re-verified against the confirmed digest, current
//! trust and policy only narrow, successful nodes never run again, and nothing uncertain is
//! retried without the explicit recovery flag.

use clap::Args;

use super::Context;
use super::run::{Progress, ProgressOutput, check_trust, confirm, finish, run_context, run_error};
use crate::cli::exit::CliResult;
use crate::workflow::runner::{self, ResumeOptions};
use crate::workflow::store::runs::{self, StoredManifest};

/// Resume a cancelled or interrupted run.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The run id or a unique prefix of it.
    #[arg(value_name = "RUN_ID")]
    pub id: String,
    /// Consent to the run's program digest without asking.
    #[arg(long)]
    pub yes: bool,
    /// Give attempts whose fate is uncertain a new attempt (once none of their processes is
    /// alive).
    #[arg(long)]
    pub recover_uncertain: bool,
    /// Progress output.
    #[arg(long, value_enum, default_value = "text")]
    pub output: ProgressOutput,
    /// The permission mode for command nodes (else RHO_PERMISSION_MODE, config, `bypass`).
    #[arg(long, value_name = "MODE")]
    pub permission_mode: Option<String>,
}

/// Runs `rho workflow resume`.
pub fn run_resume(args: &ResumeArgs) -> CliResult {
    let ctx = Context::from_env()?;
    let id = runs::resolve(&ctx.home, &args.id).map_err(|e| super::store_error(&e))?;
    let run = runs::open(&ctx.home, &id).map_err(|e| super::store_error(&e))?;
    let manifest = match run.manifest().map_err(|e| super::store_error(&e))? {
        StoredManifest::Current(m) => m,
        StoredManifest::Legacy(_) => {
            return Err(run_error(&runner::RunError::Legacy(runs::legacy_refusal(
                &id,
            ))));
        }
    };
    let program = run
        .load_program(&manifest)
        .map_err(|e| super::store_error(&e))?;
    drop(run);
    check_trust(&ctx, program.trust.project_agents)?;
    confirm(&manifest.plan_id, &manifest.program_digest, args.yes)?;
    let run_ctx = run_context(&ctx, args.permission_mode.as_deref())?;
    let mut sink = Progress::new(
        args.output,
        run_ctx.authorizer.mode(),
        program.root.nodes.len(),
    );
    let result = runner::resume(
        &run_ctx,
        &id,
        ResumeOptions {
            recover_uncertain: args.recover_uncertain,
        },
        &mut sink,
    );
    finish(&mut sink, result)
}
