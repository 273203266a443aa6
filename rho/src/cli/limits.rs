//! `rho limits`: the last Claude rate-limit windows claude-cli runs reported. Nothing is
//! probed or estimated: with no observation there is nothing to show.

use std::fmt::Write as _;

use clap::{Args, ValueEnum};

use super::exit::{CliError, CliResult, ExitCode};
use super::workflow::{json_text, print_out};
use crate::paths::RhoHome;
use crate::runtime::claude_cli::limits;
use crate::runtime::delegation::status::unix_now;
use crate::workflow::plan::error_chain;

/// Show the last observed Claude rate-limit windows.
#[derive(Debug, Args)]
pub struct LimitsArgs {
    /// `text` or `json`.
    #[arg(long, value_enum, default_value_t = LimitsOutput::Text)]
    output: LimitsOutput,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LimitsOutput {
    Text,
    Json,
}

/// Runs `rho limits`.
pub fn run_limits(args: &LimitsArgs) -> CliResult {
    let home = RhoHome::from_env().map_err(|e| CliError::operational(e.to_string()))?;
    let observed = limits::load(&home).map_err(|e| CliError::operational(error_chain(&e)))?;
    if args.output == LimitsOutput::Json {
        let value = serde_json::to_value(&observed)
            .map_err(|e| CliError::operational(format!("cannot encode limits: {e}")))?;
        print_out(&json_text(&serde_json::json!({ "claude": value })))?;
        return Ok(ExitCode::Success);
    }
    let mut out = String::new();
    if observed.windows.is_empty() {
        out.push_str("no Claude rate-limit windows observed yet (a claude-cli run reports them)\n");
    }
    let now = unix_now();
    for (window, w) in &observed.windows {
        let age = now.saturating_sub(w.observed_at);
        let _ = write!(out, "claude {window}: {}", w.status);
        if let Some(reset) = w.resets_at {
            if reset > now {
                let _ = write!(out, ", resets in {}", human(reset - now));
            } else {
                let _ = write!(out, ", reset {} ago", human(now - reset));
            }
        }
        let _ = writeln!(out, " (observed {} ago)", human(age));
    }
    print_out(&out)?;
    Ok(ExitCode::Success)
}

fn human(seconds: u64) -> String {
    match seconds {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h {}m", s / 3600, (s % 3600) / 60),
        s => format!("{}d {}h", s / 86_400, (s % 86_400) / 3600),
    }
}
