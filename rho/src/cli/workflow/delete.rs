//! `rho workflow delete PLAN_ID|RUN_ID`: removes a stored plan or run (a unique id prefix is
//! accepted) after asking on a terminal, or with `--yes`.
//!
//! Invariant: nothing is removed without consent (`--yes`, or `y`/`yes` at the prompt), and
//! the entry disappears from its id at once (renamed aside, then removed), so a crash never
//! leaves a half-deleted plan or run that still looks valid.

use std::io::{BufRead as _, IsTerminal as _, Write as _};

use clap::Args;
use serde_json::json;

use super::{DocumentOutputArgs, json_text, print_out, store_error};
use crate::cli::exit::{CliError, CliResult, ExitCode};
use crate::paths::RhoHome;
use crate::workflow::store::{StoreError, plans, runs};

/// Delete a stored plan or run.
#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// The plan or run id, or a unique prefix of it.
    #[arg(value_name = "PLAN_ID|RUN_ID")]
    pub id: String,
    /// Delete without asking (required when there is no terminal to ask on).
    #[arg(long, short = 'y')]
    pub yes: bool,
    #[command(flatten)]
    pub output: DocumentOutputArgs,
}

/// What `delete` found for an id.
enum Found {
    Plan(String),
    Run(String),
}

/// Runs `rho workflow delete`.
pub fn run_delete(args: &DeleteArgs) -> CliResult {
    let home = RhoHome::from_env().map_err(|e| CliError::operational(e.to_string()))?;
    let found = match plans::resolve(&home, &args.id) {
        Ok(id) => Found::Plan(id),
        Err(StoreError::UnknownId { .. }) => match runs::resolve(&home, &args.id) {
            Ok(id) => Found::Run(id),
            Err(StoreError::UnknownId { .. }) => {
                return Err(CliError::invalid(format!(
                    "no plan or run matches `{}`; `rho workflow list` shows this workspace's ids",
                    args.id
                )));
            }
            Err(e) => return Err(store_error(&e)),
        },
        Err(e) => return Err(store_error(&e)),
    };
    let (kind, id) = match &found {
        Found::Plan(id) => ("plan", id.as_str()),
        Found::Run(id) => ("run", id.as_str()),
    };
    if !args.yes {
        confirm_delete(kind, id)?;
    }
    match &found {
        Found::Plan(id) => plans::delete(&home, id).map_err(|e| store_error(&e))?,
        // Refused while another process owns the run or its recorded processes live.
        Found::Run(id) => runs::delete(&home, id, survivors).map_err(|e| match e {
            runs::DeleteError::Store(e) => store_error(&e),
            alive @ runs::DeleteError::StillAlive { .. } => {
                CliError::with_code(ExitCode::NeedsRecovery, alive.to_string())
            }
            owned => CliError::operational(owned.to_string()),
        })?,
    }
    let text = if args.output.is_json() {
        json_text(&json!({ "deleted": kind, "id": id }))
    } else {
        format!("deleted {kind} {id}\n")
    };
    print_out(&text)?;
    Ok(ExitCode::Success)
}

/// The processes of a run's recorded attempts that still live (a delete waits for none).
fn survivors(run: &runs::RunDir) -> Result<Vec<String>, String> {
    crate::workflow::runner::live_processes(run).map_err(|e| e.to_string())
}

/// Asks `Delete <kind> <id>? [y/N]` on the terminal; without one, fails saying `--yes` is
/// needed.
fn confirm_delete(kind: &str, id: &str) -> Result<(), CliError> {
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        return Err(CliError::invalid(format!(
            "deleting {kind} {id} needs confirmation and there is no terminal to ask on: pass \
             --yes"
        )));
    }
    let mut stderr = std::io::stderr().lock();
    let _ = write!(stderr, "Delete {kind} {id}? [y/N] ");
    let _ = stderr.flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| CliError::operational(format!("cannot read the answer: {e}")))?;
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Ok(()),
        _ => Err(CliError::invalid(format!(
            "{kind} {id} was not deleted (not confirmed)"
        ))),
    }
}
