//! `rho attach <ID>`: follow a delegated run from any process and directory, or show a
//! finished one, without owning it (detaching never cancels the run).

use std::fmt::Write as _;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::exit::{CliError, CliResult, ExitCode};
use super::workflow::print_out;
use crate::paths::RhoHome;
use crate::runtime::delegation::DelegationError;
use crate::runtime::delegation::rundir::{AttachEvent, AttachEventKind, RunReader};
use crate::runtime::delegation::status::{RunState, RunStatus};
use crate::workflow::plan::error_chain;

/// How often a live run's files are re-read.
const FOLLOW_POLL: Duration = Duration::from_millis(100);

/// Follow a delegated run, or show a finished one.
#[derive(Debug, Args)]
pub struct AttachArgs {
    /// The run's six-character id.
    #[arg(value_name = "ID")]
    id: String,
    /// Print what is recorded so far and return, even while the run goes on.
    #[arg(long)]
    no_follow: bool,
    /// `text` for people, `jsonl` for the raw attachment events then the final status.
    #[arg(long, value_enum, default_value_t = AttachOutput::Text)]
    output: AttachOutput,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum AttachOutput {
    Text,
    Jsonl,
}

fn attach_error(error: &DelegationError) -> CliError {
    match error {
        DelegationError::BadRunId { .. } | DelegationError::UnknownRun { .. } => {
            CliError::invalid(error_chain(error))
        }
        _ => CliError::operational(error_chain(error)),
    }
}

/// Runs `rho attach`.
pub fn run_attach(args: &AttachArgs) -> CliResult {
    let home = RhoHome::from_env().map_err(|e| CliError::operational(e.to_string()))?;
    let reader = RunReader::open(&home, &args.id).map_err(|e| attach_error(&e))?;
    let mut events = reader.events().map_err(|e| attach_error(&e))?;
    if args.output == AttachOutput::Text {
        print_out(&format!(
            "attached to {} ({})\n",
            reader.id(),
            reader.path().display()
        ))?;
    }
    let mut partial_line = false;
    let status = loop {
        // Status first, then events: a terminal status read before the last events means every
        // event of the run is already in the file when they are read below.
        let status = reader.status().map_err(|e| attach_error(&e))?;
        let new = events.read_new().map_err(|e| attach_error(&e))?;
        let mut out = String::new();
        for event in &new {
            match args.output {
                AttachOutput::Jsonl => {
                    out.push_str(&serde_json::to_string(event).unwrap_or_default());
                    out.push('\n');
                }
                AttachOutput::Text => render(event, &mut out, &mut partial_line),
            }
        }
        if !out.is_empty() {
            print_out(&out)?;
        }
        if status.state.is_terminal() || args.no_follow {
            break status;
        }
        std::thread::sleep(FOLLOW_POLL);
    };
    let mut out = String::new();
    match args.output {
        AttachOutput::Jsonl => {
            let value = serde_json::json!({ "event": "status", "status": status });
            out.push_str(&serde_json::to_string(&value).unwrap_or_default());
            out.push('\n');
        }
        AttachOutput::Text => {
            if partial_line {
                out.push('\n');
            }
            summary(&status, &mut out);
        }
    }
    print_out(&out)?;
    Ok(match status.state {
        RunState::Ok | RunState::Starting | RunState::Running => ExitCode::Success,
        RunState::Error => ExitCode::Failure,
        RunState::Stopped => ExitCode::Cancellation,
    })
}

/// Replaces control characters (C0 but newline and tab, DEL, C1) so recorded text cannot
/// drive the terminal.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\n' | '\t' => c.to_string(),
            c if c.is_control() => c.escape_unicode().to_string(),
            c => c.to_string(),
        })
        .collect()
}

fn render(event: &AttachEvent, out: &mut String, partial_line: &mut bool) {
    let start_line = |out: &mut String, partial_line: &mut bool| {
        if *partial_line {
            out.push('\n');
            *partial_line = false;
        }
    };
    match &event.kind {
        AttachEventKind::Text {
            text,
            partial: true,
        } => {
            out.push_str(&printable(text));
            *partial_line = !text.ends_with('\n');
        }
        AttachEventKind::Text {
            text,
            partial: false,
        } => {
            // A whole block repeats what its streamed pieces already showed.
            if !*partial_line && !text.is_empty() && out.is_empty() {
                let _ = writeln!(out, "{}", printable(text));
            }
            start_line(out, partial_line);
        }
        AttachEventKind::ToolUse { name, summary } => {
            start_line(out, partial_line);
            let _ = writeln!(out, "→ {} {}", printable(name), printable(summary));
        }
        AttachEventKind::ToolResult { is_error, summary } => {
            start_line(out, partial_line);
            let mark = if *is_error { "✗" } else { "←" };
            let _ = writeln!(out, "{mark} {}", printable(summary));
        }
        AttachEventKind::State { state, detail } => {
            start_line(out, partial_line);
            match detail {
                Some(detail) => {
                    let _ = writeln!(out, "[{state}] {}", printable(detail));
                }
                None => {
                    let _ = writeln!(out, "[{state}]");
                }
            }
        }
        AttachEventKind::Usage {
            input_tokens,
            output_tokens,
            ..
        } => {
            start_line(out, partial_line);
            let _ = writeln!(out, "usage: {input_tokens} in, {output_tokens} out");
        }
        AttachEventKind::RateLimit {
            window,
            status,
            resets_at,
        } => {
            start_line(out, partial_line);
            let window = window.as_deref().unwrap_or("unnamed window");
            let _ = match resets_at {
                Some(at) => writeln!(out, "rate limit {window}: {status} (resets at {at})"),
                None => writeln!(out, "rate limit {window}: {status}"),
            };
        }
    }
}

fn summary(status: &RunStatus, out: &mut String) {
    let agent = status.agent_id.as_deref().unwrap_or("?");
    let _ = writeln!(out, "run of agent {} is {}", printable(agent), status.state);
    if let Some(result) = &status.result {
        let _ = writeln!(out, "result:\n{}", printable(result));
    }
    if let Some(error) = &status.error {
        let _ = writeln!(out, "error: {}", printable(error));
    }
    if let (Some(i), Some(o)) = (status.input_tokens, status.output_tokens) {
        let _ = writeln!(
            out,
            "usage: {} turns, {i} input tokens, {o} output tokens",
            status.turns
        );
    }
    if let Some(session) = &status.claude_session_id {
        let _ = writeln!(
            out,
            "claude session: {0} (reopen with `claude --resume {0}`)",
            printable(session)
        );
    }
}
