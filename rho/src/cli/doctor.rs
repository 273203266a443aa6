//! `rho doctor`: reports, for this machine, each protection the planner worker applies and
//! whether it holds, then proves the sandbox by asking hardened workers to try forbidden
//! operations (open a file, open a socket, execve, fork) that must all fail.
//!
//! Invariant: doctor inspects and grants nothing: the workers it starts run in best-effort
//! mode only so that a gap can be shown instead of a bare refusal, and evaluate no source.

use std::fmt::Write as _;

use clap::Args;
use rho_ipc::budget::Budgets;
use rho_ipc::message::{HardeningReport, ProbeResult, SandboxMode, SandboxProbe};
use serde_json::json;

use super::exit::{CliError, CliResult, ExitCode};
use super::workflow::{json_text, print_out};
use crate::workflow::plan::worker::WorkerCommand;
use crate::workflow::plan::{ProcessSettings, error_chain, probe};

/// Check the planner sandbox on this machine.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// The probes doctor runs, with what they try.
fn probes() -> Vec<(SandboxProbe, &'static str)> {
    vec![
        (
            SandboxProbe::Open {
                path: "/etc/passwd".to_owned(),
            },
            "open /etc/passwd",
        ),
        (SandboxProbe::Socket, "open a TCP socket"),
        (
            SandboxProbe::Execve {
                path: "/bin/true".to_owned(),
            },
            "execve /bin/true",
        ),
        (SandboxProbe::Fork, "fork a process"),
    ]
}

fn errno_name(errno: Option<i32>) -> String {
    errno.map_or_else(
        || "killed".to_owned(),
        |e| format!("{} ({e})", nix::errno::Errno::from_raw(e).desc()),
    )
}

/// Runs `rho doctor`.
pub fn run_doctor(args: &DoctorArgs) -> CliResult {
    let process = ProcessSettings::from_env();
    let budgets = Budgets::default();
    let mut command = WorkerCommand::locate(process.worker.as_deref(), None, &budgets)
        .map_err(|e| CliError::operational(error_chain(&e)))?;
    command.mode = SandboxMode::BestEffort;

    let mut report: Option<HardeningReport> = None;
    let mut results: Vec<(&'static str, Result<ProbeResult, String>)> = Vec::new();
    for (p, what) in probes() {
        match probe(&command, p) {
            Ok((hardening, result)) => {
                report.get_or_insert(hardening);
                results.push((what, Ok(result)));
            }
            Err(e) => results.push((what, Err(error_chain(&e)))),
        }
    }
    let inspect = probe(&command, SandboxProbe::Inspect).ok().map(|(_, r)| r);
    let Some(report) = report else {
        let why = results
            .iter()
            .find_map(|(_, r)| r.as_ref().err().cloned())
            .unwrap_or_default();
        return Err(CliError::operational(format!(
            "the planner worker could not be started: {why}"
        )));
    };

    let missing = report.missing();
    let probes_hold = results
        .iter()
        .all(|(_, r)| matches!(r, Ok(p) if !p.succeeded));
    let clean = inspect
        .as_ref()
        .is_none_or(|i| i.environment_len == Some(0) && i.open_fds_above_2.is_empty());
    let healthy = missing.is_empty() && probes_hold && clean;

    let text = if args.json {
        json_text(&json!({
            "worker": command.program.display().to_string(),
            "healthy": healthy,
            "protections": report.protections,
            "probes": results.iter().map(|(what, r)| match r {
                Ok(p) => json!({ "probe": what, "blocked": !p.succeeded, "errno": p.errno }),
                Err(e) => json!({ "probe": what, "blocked": null, "error": e }),
            }).collect::<Vec<_>>(),
            "environment_len": inspect.as_ref().and_then(|i| i.environment_len),
            "open_fds_above_2": inspect.as_ref().map(|i| i.open_fds_above_2.clone()),
        }))
    } else {
        let mut out = format!(
            "planner worker: {}\n\nprotections:\n",
            command.program.display()
        );
        for p in &report.protections {
            let mark = if p.applied { "applied" } else { "MISSING" };
            let _ = writeln!(out, "  {:<20} {mark:<8} {}", p.name, p.detail);
        }
        out.push_str("\nprobes (each must be refused):\n");
        for (what, r) in &results {
            let line = match r {
                Ok(p) if !p.succeeded => format!("refused: {}", errno_name(p.errno)),
                Ok(_) => "ALLOWED (sandbox gap)".to_owned(),
                Err(e) => format!("could not run: {e}"),
            };
            let _ = writeln!(out, "  {what:<20} {line}");
        }
        if let Some(i) = &inspect {
            let _ = writeln!(
                out,
                "  {:<20} {} variables, descriptors above 2: {:?}",
                "environment/fds",
                i.environment_len.unwrap_or(0),
                i.open_fds_above_2
            );
        }
        out.push('\n');
        if healthy {
            out.push_str("ok: the planner sandbox is fully effective on this machine\n");
        } else if missing.is_empty() {
            out.push_str("problem: a probe was not refused; planning should not be trusted here\n");
        } else {
            let _ = writeln!(
                out,
                "problem: missing protections ({}); planning fails unless RHO_PLANNER_SANDBOX=best-effort",
                missing.join(", ")
            );
        }
        out
    };
    print_out(&text)?;
    Ok(if healthy {
        ExitCode::Success
    } else {
        ExitCode::Operational
    })
}
