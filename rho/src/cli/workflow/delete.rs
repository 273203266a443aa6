//! `rho workflow delete PLAN_ID`: removes a stored plan (a unique id prefix is accepted).
//!
//! Invariant: the plan disappears from its id at once (renamed aside, then removed), so a
//! crash never leaves a half-deleted plan that still looks valid.

use clap::Args;

use super::{print_out, store_error};
use crate::cli::exit::{CliError, CliResult, ExitCode};
use crate::paths::RhoHome;
use crate::workflow::store::{plans, runs};

/// Delete a stored plan or run.
#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// The plan or run id, or a unique prefix of it.
    #[arg(value_name = "PLAN_ID|RUN_ID")]
    pub id: String,
}

/// Runs `rho workflow delete`.
pub fn run_delete(args: &DeleteArgs) -> CliResult {
    let home = RhoHome::from_env().map_err(|e| CliError::operational(e.to_string()))?;
    match plans::resolve(&home, &args.id) {
        Ok(id) => {
            plans::delete(&home, &id).map_err(|e| store_error(&e))?;
            print_out(&format!("deleted plan {id}\n"))?;
        }
        Err(crate::workflow::store::StoreError::UnknownId { .. }) => {
            // Not a plan: a run (refused while another process owns it).
            let id = runs::resolve(&home, &args.id).map_err(|e| store_error(&e))?;
            let survivors = |run: &runs::RunDir| {
                crate::workflow::runner::live_processes(run).map_err(|e| e.to_string())
            };
            runs::delete(&home, &id, survivors).map_err(|e| match e {
                runs::DeleteError::Store(e) => store_error(&e),
                alive @ runs::DeleteError::StillAlive { .. } => {
                    CliError::with_code(ExitCode::NeedsRecovery, alive.to_string())
                }
                owned => CliError::operational(owned.to_string()),
            })?;
            print_out(&format!("deleted run {id}\n"))?;
        }
        Err(e) => return Err(store_error(&e)),
    }
    Ok(ExitCode::Success)
}
