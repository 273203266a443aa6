//! `rho workflow cancel <RUN_ID>`: a durable cancellation request that the owner picks up,
//! and a bounded wait for its acknowledgement.
//!
//! Invariant: `acknowledged` is printed only once the owner published the acknowledgement of
//! this request, which it does last: after cleanup, the final state and releasing the run
//! lock (so a `resume` right after it finds the run free). Otherwise the answer is
//! `pending`, claiming nothing.

use std::io::IsTerminal as _;
use std::time::Duration;

use clap::Args;
use serde_json::json;

use super::{DocumentOutput, print_out, store_error};
use crate::cli::exit::{CliError, CliResult, ExitCode};
use crate::paths::RhoHome;
use crate::workflow::runner;
use crate::workflow::store::runs;

/// How long `cancel` waits for the owner.
const WAIT: Duration = Duration::from_secs(10);

/// Cancel a run.
#[derive(Debug, Args)]
pub struct CancelArgs {
    /// The run id or a unique prefix of it.
    #[arg(value_name = "RUN_ID")]
    pub id: String,
    /// Output format: `json` is Rho's one-line document; the default is text on a terminal
    /// and that JSON line otherwise, so scripts written for Rho keep working.
    #[arg(long, value_enum)]
    pub output: Option<DocumentOutput>,
    /// Same as `--output json`.
    #[arg(long, hide = true)]
    pub json: bool,
}

/// Runs `rho workflow cancel`.
pub fn run_cancel(args: &CancelArgs) -> CliResult {
    let home = RhoHome::from_env().map_err(|e| CliError::operational(e.to_string()))?;
    let id = runs::resolve(&home, &args.id).map_err(|e| store_error(&e))?;
    let answer = runner::request_cancel(&home, &id, WAIT).map_err(|e| super::run::run_error(&e))?;
    let mut line = json!({
        "run_id": id,
        "cancellation_state": answer.cancellation_state,
        "lifecycle": answer.lifecycle,
    });
    if let Some(request_id) = answer.request_id {
        line["request_id"] = json!(request_id);
    }
    let format = match (args.json, args.output) {
        (false, Some(format)) => format,
        (false, None) if std::io::stdout().is_terminal() => DocumentOutput::Text,
        // A pipe gets the JSON line `cancel` always printed, so scripts keep working.
        _ => DocumentOutput::Json,
    };
    let text = if format == DocumentOutput::Json {
        format!("{line}\n")
    } else {
        let request = line["request_id"]
            .as_str()
            .map(|r| format!(" (request {r})"))
            .unwrap_or_default();
        match answer.cancellation_state {
            "acknowledged" => format!(
                "run {id} cancelled{request}: the owner stopped its work; lifecycle {}\nresume with: rho workflow resume {id}\n",
                line["lifecycle"].as_str().unwrap_or("-")
            ),
            "already_completed" => format!(
                "run {id} had already completed (lifecycle {}); nothing to cancel\n",
                line["lifecycle"].as_str().unwrap_or("-")
            ),
            other => format!(
                "run {id}: cancellation {other}{request}; the owner has not confirmed yet, so work may still be running (check with rho workflow status {id})\n"
            ),
        }
    };
    print_out(&text)?;
    Ok(ExitCode::Success)
}
