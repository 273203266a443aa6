//! `rho workflow delete PLAN_ID`: removes a stored plan (a unique id prefix is accepted).
//!
//! Invariant: the plan disappears from its id at once (renamed aside, then removed), so a
//! crash never leaves a half-deleted plan that still looks valid.

use clap::Args;

use super::{print_out, store_error};
use crate::cli::exit::{CliError, CliResult, ExitCode};
use crate::paths::RhoHome;
use crate::workflow::store::plans;

/// Delete a stored plan.
#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// The plan id or a unique prefix of it.
    #[arg(value_name = "PLAN_ID")]
    pub id: String,
}

/// Runs `rho workflow delete`.
pub fn run_delete(args: &DeleteArgs) -> CliResult {
    let home = RhoHome::from_env().map_err(|e| CliError::operational(e.to_string()))?;
    let id = plans::resolve(&home, &args.id).map_err(|e| store_error(&e))?;
    plans::delete(&home, &id).map_err(|e| store_error(&e))?;
    print_out(&format!("deleted plan {id}\n"))?;
    Ok(ExitCode::Success)
}
