//! `rho workflow status <RUN_ID>`: a run's manifest, lifecycle, outcome, nodes, exports and
//! artifacts, as text or one JSON document.
//!
//! Invariant: status never takes `mutation.lock` and never writes; it reads the snapshot plus
//! the journal after it, and detects by itself an owner that died (the recorded owner
//! process is gone while the run never closed), reporting `needs_recovery` with the attempts
//! in flight and their last known process.

use std::fmt::Write as _;

use clap::{Args, ValueEnum};
use serde_json::json;

use super::{json_text, print_out, store_error};
use crate::cli::exit::{CliError, CliResult, ExitCode};
use crate::paths::RhoHome;
use crate::workflow::runner::{self, Inspection};
use crate::workflow::store::runs::{self, StoredManifest};

/// Output formats of `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusOutput {
    /// Lines for people.
    Text,
    /// One JSON document.
    Json,
}

/// Show a run's state.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The run id or a unique prefix of it.
    #[arg(value_name = "RUN_ID")]
    pub id: String,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub output: StatusOutput,
}

/// Runs `rho workflow status`.
pub fn run_status(args: &StatusArgs) -> CliResult {
    let home = RhoHome::from_env().map_err(|e| CliError::operational(e.to_string()))?;
    let id = runs::resolve(&home, &args.id).map_err(|e| store_error(&e))?;
    let (run, inspection) = runner::inspect(&home, &id).map_err(|e| super::run::run_error(&e))?;
    let text = match args.output {
        StatusOutput::Json => {
            // A format-1 run is shown as stored; it has no graph.json of this format.
            let program = match inspection.manifest {
                StoredManifest::Current(_) => run.graph_json().map_err(|e| store_error(&e))?,
                StoredManifest::Legacy(_) => serde_json::Value::Null,
            };
            json_text(&status_json(&inspection, &program))
        }
        StatusOutput::Text => status_text(&id, run.path(), &inspection),
    };
    print_out(&text)?;
    Ok(ExitCode::Success)
}

fn status_json(inspection: &Inspection, graph: &serde_json::Value) -> serde_json::Value {
    match &inspection.manifest {
        StoredManifest::Legacy(manifest) => json!({
            "manifest": manifest,
            "legacy": true,
            "state": inspection.legacy_state,
        }),
        StoredManifest::Current(manifest) => {
            let state = inspection.state.as_ref();
            let root = state.map(crate::workflow::state::State::root);
            json!({
                "manifest": manifest,
                "program": graph.get("program"),
                "program_digest": manifest.program_digest,
                "graph_digest": manifest.graph_digest,
                "state": state,
                "lifecycle": inspection.effective_lifecycle(),
                "outcome": root.and_then(|r| r.result.as_ref()).map(|r| r.outcome),
                "nodes": root.map(|r| &r.tasks),
                "outputs": root.map(|r| &r.outputs),
                "command_exits": root.map(|r| &r.command_exits),
                "completions": root.map(|r| &r.completions),
                "permission_mode": manifest.policy.map(|p| p.permission_mode),
                "hook_failures": state.map(|s| &s.hook_failures),
                "owner_alive": state.and_then(|s| s.owner.as_ref()).map(|_| !inspection.owner_dead),
                "needs_recovery": inspection.uncertain,
            })
        }
    }
}

fn status_text(id: &str, run_dir: &std::path::Path, inspection: &Inspection) -> String {
    let mut out = String::new();
    let manifest = match &inspection.manifest {
        StoredManifest::Legacy(manifest) => {
            let _ = writeln!(
                out,
                "run: {id} (format 1, read-only: written by an older release)"
            );
            out.push_str(&json_text(manifest));
            if let Some(state) = &inspection.legacy_state {
                out.push_str(&json_text(state));
            }
            return out;
        }
        StoredManifest::Current(m) => m,
    };
    let Some(state) = &inspection.state else {
        return out;
    };
    let root = state.root();
    let _ = writeln!(out, "run: {id}");
    let _ = writeln!(out, "name: {}", manifest.name);
    let _ = writeln!(out, "plan: {}", manifest.plan_id);
    let _ = writeln!(out, "program_digest: {}", manifest.program_digest);
    let _ = writeln!(
        out,
        "consent: {} at {} to {} (for this run only; it grants nothing else)",
        match manifest.confirmation.method {
            runs::ConfirmationMethod::Yes => "--yes",
            runs::ConfirmationMethod::Prompt => "prompt",
        },
        manifest.confirmation.at,
        manifest.confirmation.digest
    );
    match &manifest.policy {
        Some(policy) => {
            let trust = policy.trust.kinds();
            let _ = writeln!(
                out,
                "permission mode: {} (recorded at creation; a resume can only narrow it)",
                policy.permission_mode
            );
            if !trust.is_empty() {
                let names: Vec<String> = trust.iter().map(ToString::to_string).collect();
                let _ = writeln!(out, "relies on trust in: {}", names.join(", "));
            }
        }
        None => {
            let _ = writeln!(out, "permission mode: not recorded (an earlier build)");
        }
    }
    let lifecycle = inspection.effective_lifecycle().unwrap_or(state.lifecycle);
    let _ = writeln!(out, "lifecycle: {lifecycle}");
    if let Some(owner) = &state.owner {
        let _ = writeln!(
            out,
            "owner: pid {} ({}), permission mode {}",
            owner.pid,
            if inspection.owner_dead {
                "gone"
            } else {
                "alive"
            },
            owner.permission_mode
        );
    }
    match &root.result {
        Some(result) => {
            let _ = writeln!(out, "outcome: {}", result.outcome);
        }
        None => {
            let _ = writeln!(out, "outcome: none yet");
        }
    }
    let done = root
        .tasks
        .values()
        .filter(|t| t.state.is_terminal())
        .count();
    let _ = writeln!(out, "nodes: {done}/{} terminal", root.tasks.len());
    for (node, task) in &root.tasks {
        let attempt = task
            .attempts
            .last()
            .map_or_else(String::new, |a| format!(" attempt {}", a.number));
        let reason = task
            .reason
            .as_ref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        let _ = writeln!(out, "  {node}: {}{attempt}{reason}", task.state);
        if let Some(a) = task.attempts.last() {
            if let Some(denial) = &a.denial {
                let _ = writeln!(
                    out,
                    "    denied by {}: {} (permission mode {})",
                    denial.decided_by, denial.reason, denial.mode
                );
            }
            for (label, art) in [
                ("stdout", &a.stdout),
                ("stderr", &a.stderr),
                ("output", &a.output),
            ] {
                if let Some(art) = art {
                    let shortfall = if art.truncated {
                        format!(" · truncated: observed {} bytes", art.observed_bytes)
                    } else {
                        String::new()
                    };
                    let _ = writeln!(
                        out,
                        "    {label}: {} · {} bytes · digest {}{shortfall}",
                        run_dir.join(&art.path).display(),
                        art.retained_bytes,
                        art.sha256
                    );
                }
            }
        }
    }
    if let Some(result) = &root.result {
        let _ = writeln!(out, "scope s0 result: {}", result.outcome);
        for (name, e) in &result.exports {
            match &e.note {
                None => {
                    let _ = writeln!(out, "  export {name} = {}", e.value);
                }
                Some(note) => {
                    let _ = writeln!(out, "  export {name} = null (unavailable: {note})");
                }
            }
        }
    }
    for f in &state.hook_failures {
        let at = match (&f.node, f.attempt) {
            (Some(node), Some(attempt)) => format!(" (node {node} attempt {attempt})"),
            (Some(node), None) => format!(" (node {node})"),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "hook failed: {} hook `{}` on {}{at}: {}",
            f.scope, f.hook_id, f.event, f.detail
        );
    }
    if !inspection.uncertain.is_empty() {
        let _ = writeln!(
            out,
            "needs recovery: {}; inspect them, then `rho workflow resume {id} --recover-uncertain`",
            inspection.uncertain.join("; ")
        );
    }
    out
}
