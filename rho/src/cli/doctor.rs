//! `rho doctor`: proves the planner sandbox on this machine, each protection on its own
//! (see `health::sandbox`), and checks what a run depends on (`health::setup`): the
//! configuration, the data directory, the agent runtimes. Every finding says what to fix;
//! the exit status is non-zero when any check fails.
//!
//! Invariant: doctor inspects and grants nothing: its workers run in best-effort mode only
//! so that a gap can be shown instead of a bare refusal, evaluate no source, and the ones
//! with a protection left out answer probes only.

use std::fmt::Write as _;

use clap::{Args, ValueEnum};
use rho_ipc::budget::Budgets;
use rho_ipc::message::{HardeningReport, ProbeResult, SandboxMode, SandboxProbe};
use serde_json::json;

use super::exit::{CliError, CliResult, ExitCode};
use super::workflow::{json_text, print_out};
use crate::health::sandbox::{self as proofs, PlannedProbe, ProbeWorker};
use crate::health::{Check, CheckStatus, setup};
use crate::paths::RhoHome;
use crate::workflow::plan::worker::{WorkerCommand, cpu_seconds};
use crate::workflow::plan::{ProbeOutcome, ProcessSettings, error_chain, probe};

/// Check the planner sandbox and everything a run depends on.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// `text` or `json`.
    #[arg(long, value_enum, default_value_t = DoctorOutput::Text)]
    pub output: DoctorOutput,
    /// Same as `--output json`.
    #[arg(long, hide = true)]
    pub json: bool,
}

/// Output format of `rho doctor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DoctorOutput {
    /// Sections of findings, each with what to fix.
    Text,
    /// One JSON document.
    Json,
}

fn run_probe(
    command: &WorkerCommand,
    worker: ProbeWorker,
    p: SandboxProbe,
) -> Result<ProbeOutcome, String> {
    let mut command = command.clone();
    command.omit = worker.omit();
    probe(&command, p).map_err(|e| error_chain(&e))
}

/// Everything the sandbox part of doctor observed.
struct SandboxFindings {
    report: Option<HardeningReport>,
    probes: Vec<(PlannedProbe, Result<ProbeResult, String>)>,
    inspect: Option<ProbeResult>,
    checks: Vec<Check>,
}

fn prove_sandbox(command: &WorkerCommand) -> SandboxFindings {
    let host_pid = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
    let mut report: Option<HardeningReport> = None;
    let mut probes = Vec::new();
    let mut checks = Vec::new();
    for planned in proofs::planned_probes(host_pid) {
        let outcome = run_probe(command, planned.worker, planned.probe.clone());
        if planned.worker == ProbeWorker::Full
            && let Ok(o) = &outcome
        {
            report.get_or_insert_with(|| o.hardening.clone());
        }
        let result = outcome.map(|o| o.result);
        checks.push(proofs::judge_probe(&planned, &result));
        probes.push((planned, result));
    }
    // Read back from the hardened worker: its environment and descriptors from inside, its
    // status and limits from outside.
    let inspect = run_probe(command, ProbeWorker::Full, SandboxProbe::Inspect);
    match &inspect {
        Ok(outcome) => {
            report.get_or_insert_with(|| outcome.hardening.clone());
            checks.extend(proofs::judge_status(outcome.proc_status.as_deref()));
            checks.push(proofs::judge_limits(
                outcome.proc_limits.as_deref(),
                command.address_space_bytes,
                cpu_seconds(command.wall_ms),
            ));
        }
        Err(error) => checks.push(Check::not_ok(
            "sandbox",
            "hardened worker read back",
            CheckStatus::Failed,
            format!("the worker could not be started: {error}"),
            proofs::SANDBOX_FIX,
        )),
    }
    let inspect = inspect.map(|o| o.result);
    checks.extend(proofs::judge_inspect(&inspect));
    // `prctl` is refused by seccomp: ask the worker without it.
    let pdeath = run_probe(command, ProbeWorker::LandlockAlone, SandboxProbe::Inspect);
    checks.push(proofs::judge_parent_death_signal(&pdeath.map(|o| o.result)));
    if let Some(report) = &report {
        for p in report.protections.iter().filter(|p| !p.applied) {
            checks.insert(
                0,
                Check::not_ok(
                    "sandbox",
                    format!("{} applied", p.name),
                    CheckStatus::Failed,
                    format!("MISSING: {}", p.detail),
                    proofs::SANDBOX_FIX,
                ),
            );
        }
    }
    SandboxFindings {
        report,
        probes,
        inspect: inspect.ok(),
        checks,
    }
}

fn setup_checks() -> Vec<Check> {
    let env: Vec<_> = std::env::vars_os().collect();
    let mut checks = Vec::new();
    let home = match RhoHome::from_env() {
        Ok(home) => home,
        Err(e) => {
            checks.push(Check::not_ok(
                "data_directory",
                "RHO_HOME",
                CheckStatus::Failed,
                e.to_string(),
                "set RHO_HOME (or HOME) to an absolute path",
            ));
            return checks;
        }
    };
    checks.push(setup::check_data_directory(
        home.root(),
        nix::unistd::geteuid().as_raw(),
    ));
    checks.push(setup::check_containment());
    let root = super::root::options();
    let file = root.config.clone().unwrap_or_else(|| home.config_file());
    let loaded = root.load_config(&home);
    checks.push(setup::check_config(&file, &loaded));
    if let Ok(config) = &loaded {
        checks.extend(setup::check_providers(config, &env));
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| std::path::PathBuf::from("/"));
    checks.push(setup::check_claude(&cwd, &env));
    checks
}

fn mark(status: CheckStatus) -> &'static str {
    match status {
        CheckStatus::Ok => "ok",
        CheckStatus::Warning => "warning",
        CheckStatus::Failed => "FAILED",
    }
}

fn render_text(
    command: &WorkerCommand,
    sandbox: &SandboxFindings,
    setup: &[Check],
    healthy: bool,
) -> String {
    let mut out = format!(
        "planner worker: {}\n\nprotections:\n",
        command.program.display()
    );
    if let Some(report) = &sandbox.report {
        for p in &report.protections {
            let state = if p.applied { "applied" } else { "MISSING" };
            let _ = writeln!(
                out,
                "  {:<20} {state:<8} {}",
                p.name,
                crate::terminal::escape_controls(&p.detail)
            );
        }
    } else {
        out.push_str("  (no hardened worker could be started)\n");
    }
    out.push_str("\nprobes (each must be refused):\n");
    for (planned, result) in sandbox
        .probes
        .iter()
        .filter(|(p, _)| p.worker == ProbeWorker::Full)
    {
        let line = match result {
            Ok(r) if !r.succeeded => format!(
                "refused: {}",
                r.errno.map_or_else(
                    || "killed".to_owned(),
                    |e| format!("{} ({e})", nix::errno::Errno::from_raw(e).desc())
                )
            ),
            Ok(_) => "ALLOWED (sandbox gap)".to_owned(),
            Err(e) => format!("could not run: {e}"),
        };
        let _ = writeln!(out, "  {:<20} {line}", planned.what);
    }
    let mut section = "";
    for check in sandbox.checks.iter().chain(setup) {
        let title = match check.area {
            "sandbox" => "proofs (each protection on its own):",
            "config" | "data_directory" | "containment" => "setup:",
            _ => "agent runtimes:",
        };
        if title != section {
            let _ = write!(out, "\n{title}\n");
            section = title;
        }
        let _ = writeln!(
            out,
            "  {:<8} {}: {}",
            mark(check.status),
            crate::terminal::escape_controls(&check.name),
            crate::terminal::escape_controls(&check.detail)
        );
        if let Some(fix) = &check.fix
            && check.status != CheckStatus::Ok
        {
            let _ = writeln!(
                out,
                "           fix: {}",
                crate::terminal::escape_controls(fix)
            );
        }
    }
    out.push('\n');
    let failed: Vec<&Check> = sandbox
        .checks
        .iter()
        .chain(setup)
        .filter(|c| c.status == CheckStatus::Failed)
        .collect();
    if healthy {
        out.push_str("ok: the planner sandbox is fully effective and runs have what they need\n");
    } else {
        let _ = writeln!(
            out,
            "problem: {} check(s) failed ({}); see the fixes above",
            failed.len(),
            failed
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    out
}

/// Runs `rho doctor`.
pub fn run_doctor(args: &DoctorArgs) -> CliResult {
    let process = ProcessSettings::from_env();
    let budgets = Budgets::default();
    let mut command = WorkerCommand::locate(process.worker.as_deref(), None, &budgets)
        .map_err(|e| CliError::operational(error_chain(&e)))?;
    command.mode = SandboxMode::BestEffort;

    let sandbox = prove_sandbox(&command);
    let setup = setup_checks();
    let healthy = sandbox.report.is_some()
        && sandbox
            .checks
            .iter()
            .chain(&setup)
            .all(|c| c.status != CheckStatus::Failed);

    let text = if args.json || args.output == DoctorOutput::Json {
        json_text(&json!({
            "worker": command.program.display().to_string(),
            "healthy": healthy,
            "protections": sandbox.report.as_ref().map(|r| r.protections.clone()).unwrap_or_default(),
            "probes": sandbox.probes.iter().filter(|(p, _)| p.worker == ProbeWorker::Full).map(|(p, r)| match r {
                Ok(r) => json!({ "probe": p.what, "blocked": !r.succeeded, "errno": r.errno }),
                Err(e) => json!({ "probe": p.what, "blocked": null, "error": e }),
            }).collect::<Vec<_>>(),
            "environment_len": sandbox.inspect.as_ref().and_then(|i| i.environment_len),
            "open_fds_above_2": sandbox.inspect.as_ref().map(|i| i.open_fds_above_2.clone()),
            "proofs": sandbox.checks,
            "checks": setup,
        }))
    } else {
        render_text(&command, &sandbox, &setup, healthy)
    };
    print_out(&text)?;
    Ok(if healthy {
        ExitCode::Success
    } else {
        ExitCode::Operational
    })
}
