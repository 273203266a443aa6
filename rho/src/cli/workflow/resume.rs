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
use crate::cli::permission_args::PermissionArgs;
use crate::permissions::select_process_mode;
use crate::workflow::runner::{self, ResumeOptions};
use crate::workflow::service::resume_mode;
use crate::workflow::store::runs::{self, StoredManifest};

/// Resume a cancelled or interrupted run.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The run id or a unique prefix of it.
    #[arg(value_name = "RUN_ID")]
    pub id: String,
    /// Consent to the run's program digest without asking.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Give attempts whose fate is uncertain a new attempt (once none of their processes is
    /// alive).
    #[arg(long)]
    pub recover_uncertain: bool,
    /// Progress output.
    #[arg(long, value_enum, default_value = "text")]
    pub output: ProgressOutput,
    /// Same as `--output jsonl`.
    #[arg(long, hide = true, conflicts_with = "output")]
    pub json: bool,
    /// The current mode only narrows the run's recorded one, never widens it.
    #[command(flatten)]
    pub permissions: PermissionArgs,
}

/// Runs `rho workflow resume`.
pub fn run_resume(args: &ResumeArgs) -> CliResult {
    let output = if args.json {
        ProgressOutput::Jsonl
    } else {
        args.output
    };
    let ctx = Context::from_env()?;
    let selection = select_process_mode(
        crate::cli::root::options().permission_mode(args.permissions.permission_mode.as_deref()),
        &ctx.config,
    )?;
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
    let Some(recorded) = manifest.policy else {
        return Err(run_error(&runner::RunError::PolicyNotRecorded {
            run_id: id,
        }));
    };
    check_trust(&ctx, &recorded.trust)?;
    // Journaled by the new owner, so every consent that let a process own the run is on
    // record (the manifest keeps the one the run was created with).
    let confirmation = confirm(
        &manifest.plan_id,
        &manifest.program_digest,
        args.yes,
        &|| {
            crate::workflow::describe::describe(
                &program,
                &format!("run {id} (plan {})", manifest.plan_id),
                &manifest.program_digest,
            )
        },
    )?;
    let (mode, source) = resume_mode(recorded.permission_mode, selection);
    let run_ctx = run_context(&ctx, mode)?;
    // How the plan's sources were evaluated is copied into the run; a degraded planner is
    // repeated on every output, also after the plan was deleted.
    let warnings = super::status::run_sandbox_warnings(&ctx.home, &manifest);
    super::warn(&warnings);
    let mut sink = Progress::new(output, mode, source, &program).with_warnings(warnings);
    let result = runner::resume(
        &run_ctx,
        &id,
        ResumeOptions {
            recover_uncertain: args.recover_uncertain,
        },
        &confirmation,
        &mut sink,
    );
    finish(&mut sink, result)
}

#[cfg(test)]
mod tests {
    use rho_policy::{ModeSelection, ModeSource, PermissionMode};

    use super::*;

    #[test]
    fn resume_never_widens_the_recorded_mode() {
        let flag = |mode| ModeSelection {
            mode,
            source: ModeSource::Flag,
        };
        let (mode, source) = resume_mode(PermissionMode::Plan, flag(PermissionMode::Bypass));
        assert_eq!(mode, PermissionMode::Plan);
        assert!(
            source.contains("--permission-mode asked for bypass"),
            "{source}"
        );
        let (mode, source) = resume_mode(PermissionMode::Bypass, flag(PermissionMode::Supervised));
        assert_eq!(
            (mode, source.as_str()),
            (PermissionMode::Supervised, "--permission-mode")
        );
    }
}
