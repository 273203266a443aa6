//! The command line: one file per subcommand, each an `XArgs` clap struct and a `run_x`
//! function. This module only parses, dispatches and maps results to exit codes.

pub mod agents;
pub mod attach;
pub mod descriptors;
pub mod doctor;
pub mod exit;
pub mod limits;
pub mod mcp;
pub mod permission_args;
pub mod root;
pub mod run;
pub mod session_args;
pub mod terminal;
pub mod trust;
pub mod workflow;

use std::io::Write as _;

use clap::{Parser, Subcommand};

pub use exit::{CliError, CliResult, ExitCode};

/// Plans and runs workflows for coding agents, safely and reproducibly.
#[derive(Debug, Parser)]
#[command(name = "rho", version, about, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    root: root::RootOptions,
    #[command(flatten)]
    session: session_args::SessionArgs,
    /// Resume a saved interactive session by id or unique id prefix (it continues in its own
    /// workspace).
    #[arg(long, short = 'R', value_name = "ID")]
    resume: Option<String>,
    /// Open the interactive session with this prompt already sent.
    #[arg(long = "prompt", value_name = "TEXT")]
    first_prompt: Option<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Send one prompt to an agent, print its answer, and exit.
    Run(run::RunArgs),
    /// Inspect and validate agent definitions.
    Agents(agents::AgentsArgs),
    /// Validate, plan, run and inspect workflows.
    Workflow(workflow::WorkflowArgs),
    /// Check the planner sandbox on this machine.
    Doctor(doctor::DoctorArgs),
    /// Manage trusted workspaces (project agents and hooks).
    Trust(trust::TrustArgs),
    /// Follow a delegated agent run, or show a finished one.
    Attach(attach::AttachArgs),
    /// Show the last Claude rate-limit windows claude-cli runs reported.
    Limits(limits::LimitsArgs),
    /// Serve rho's tools (workflow) over the Model Context Protocol on stdio.
    Mcp(mcp::McpArgs),
}

/// Parses the process arguments, runs the command and returns the exit status.
pub fn main() -> std::process::ExitCode {
    // First, before anything opens a descriptor: nothing inherited may reach a child.
    let inherited = descriptors::mark_inherited_cloexec();
    init_tracing();
    if let Err(e) = inherited {
        tracing::warn!("cannot mark inherited descriptors close-on-exec: {e}");
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let code = if err.use_stderr() {
                ExitCode::Invalid
            } else {
                ExitCode::Success
            };
            // clap renders help, version and usage errors itself.
            let _ = err.print();
            return std::process::ExitCode::from(code.code());
        }
    };
    if let Err(err) = cli.session.check() {
        return finish(Err(err));
    }
    root::install(cli.root, &cli.session);
    let result = match cli.command {
        None => crate::interactive::session::run_interactive(
            crate::interactive::session::InteractiveOptions {
                resume: cli.resume,
                prompt: cli.first_prompt,
            },
            &cli.session,
        ),
        Some(Command::Run(args)) => run::run_run(&args, &cli.session),
        Some(Command::Agents(args)) => agents::run_agents(args),
        Some(Command::Workflow(args)) => workflow::run_workflow(args),
        Some(Command::Doctor(args)) => doctor::run_doctor(&args),
        Some(Command::Trust(args)) => trust::run_trust(args),
        Some(Command::Attach(args)) => attach::run_attach(&args),
        Some(Command::Limits(args)) => limits::run_limits(&args),
        Some(Command::Mcp(args)) => mcp::run_mcp(&args, &cli.session),
    };
    finish(result)
}

fn finish(result: CliResult) -> std::process::ExitCode {
    match result {
        Ok(code) => std::process::ExitCode::from(code.code()),
        Err(err) => {
            let mut stderr = std::io::stderr().lock();
            let _ = writeln!(
                stderr,
                "error: {}",
                crate::terminal::escape_controls_keep_lines(&err.message)
            );
            std::process::ExitCode::from(err.code.code())
        }
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}
