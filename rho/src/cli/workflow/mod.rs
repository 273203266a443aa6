//! `rho workflow`: validate, plan, list, delete and graph workflow plans (the runner adds
//! `run` and `status`). This module holds what the subcommands share: the `--input KEY=JSON`
//! parser, the planning context read from the environment, and the mapping of planning
//! errors to exit codes.
//!
//! Invariant: every planning failure maps to exit 2 when the workflow, inputs or
//! configuration are at fault and to exit 1 when the machine is (worker, store, I/O), and a
//! failed command leaves the store as it was.

pub mod cancel;
pub mod delete;
pub mod graph;
pub mod list;
pub mod plan;
pub mod resume;
pub mod rho_shapes;
pub mod run;
pub mod status;
pub mod validate;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use rho_ipc::data::Data;

use super::exit::{CliError, CliResult, ExitCode};
use crate::config::Config;
use crate::paths::{self, RhoHome};
use crate::workflow::plan::checks::is_valid_name;
use crate::workflow::plan::worker::WorkerError;
use crate::workflow::plan::{self as planning, PlanError, Planned, ProcessSettings};
use crate::workflow::store::StoreError;
use crate::workflow::store::plans::PlanManifest;

/// Validate, plan, run and inspect workflows.
#[derive(Debug, Args)]
pub struct WorkflowArgs {
    #[command(subcommand)]
    command: WorkflowCommand,
}

#[derive(Debug, Subcommand)]
enum WorkflowCommand {
    /// Check a workflow file without storing anything.
    Validate(validate::ValidateArgs),
    /// Freeze a workflow file into a stored plan and print its id and digest.
    Plan(plan::PlanArgs),
    /// List this workspace's plans and runs, newest first.
    List(list::ListArgs),
    /// Delete a stored plan or run (refused while another process owns the run).
    Delete(delete::DeleteArgs),
    /// Draw a plan's (or a workflow file's) node graph as Mermaid or DOT.
    Graph(graph::GraphArgs),
    /// Run a plan (or plan and run a `.star` file) after consent to its digest.
    Run(run::RunArgs),
    /// Show a run's lifecycle, outcome, nodes and artifacts.
    Status(status::StatusArgs),
    /// Ask a run's owner to cancel it.
    Cancel(cancel::CancelArgs),
    /// Resume a cancelled or interrupted run.
    Resume(resume::ResumeArgs),
}

/// Runs `rho workflow`.
pub fn run_workflow(args: WorkflowArgs) -> CliResult {
    if matches!(
        args.command,
        WorkflowCommand::Validate(_)
            | WorkflowCommand::Plan(_)
            | WorkflowCommand::Graph(_)
            | WorkflowCommand::Run(_)
    ) {
        // Planning commands: SIGINT/SIGTERM stop the planner worker at once (its watchdog
        // polls for them) and the command ends as interrupted; `run` keeps the same handlers
        // as its owner's cancellation request.
        crate::workflow::runner::signals::install()
            .map_err(|e| CliError::operational(format!("cannot install signal handlers: {e}")))?;
    }
    match args.command {
        WorkflowCommand::Validate(args) => validate::run_validate(&args),
        WorkflowCommand::Plan(args) => plan::run_plan(&args),
        WorkflowCommand::List(args) => list::run_list(&args),
        WorkflowCommand::Delete(args) => delete::run_delete(&args),
        WorkflowCommand::Graph(args) => graph::run_graph(&args),
        WorkflowCommand::Run(args) => run::run_run(&args),
        WorkflowCommand::Status(args) => status::run_status(&args),
        WorkflowCommand::Cancel(args) => cancel::run_cancel(&args),
        WorkflowCommand::Resume(args) => resume::run_resume(&args),
    }
}

/// `--input KEY=JSON`, repeatable.
#[derive(Debug, Clone, Default, Args)]
pub struct InputArgs {
    /// An input value: `KEY=JSON` (`--input 'target="src"'`); repeat for more inputs.
    #[arg(long = "input", value_name = "KEY=JSON")]
    pub inputs: Vec<String>,
}

/// Parses `KEY=JSON` arguments: split at the first `=`, the key a valid name, the value
/// JSON without floats, each key once.
pub fn parse_inputs(raw: &[String]) -> Result<BTreeMap<String, Data>, CliError> {
    let mut inputs = BTreeMap::new();
    for arg in raw {
        let Some((key, json)) = arg.split_once('=') else {
            return Err(CliError::invalid(format!(
                "--input `{arg}`: expected KEY=JSON, for example --input 'target=\"src\"'"
            )));
        };
        if !is_valid_name(key) {
            return Err(CliError::invalid(format!(
                "--input `{arg}`: `{key}` is not a valid input name (1 to 63 of a-z, 0-9, `_`, \
                 `-`, starting with a letter)"
            )));
        }
        let value: serde_json::Value = serde_json::from_str(json).map_err(|e| {
            CliError::invalid(format!(
                "--input `{key}`: the value is not JSON ({e}); quote strings: --input '{key}=\"text\"'"
            ))
        })?;
        let value = Data::from_json(&value)
            .map_err(|e| CliError::invalid(format!("--input `{key}`: {e}")))?;
        if inputs.insert(key.to_owned(), value).is_some() {
            return Err(CliError::invalid(format!(
                "--input `{key}` is given more than once"
            )));
        }
    }
    Ok(inputs)
}

/// Where planning runs: data directory, workspace, configuration and environment.
#[derive(Debug, Clone)]
pub struct Context {
    /// The data directory.
    pub home: RhoHome,
    /// The canonical workspace (the current directory).
    pub workspace: PathBuf,
    /// The configuration.
    pub config: Config,
    /// Environment-derived settings.
    pub process: ProcessSettings,
}

impl Context {
    /// Reads the context of this process.
    pub fn from_env() -> Result<Self, CliError> {
        let home = RhoHome::from_env().map_err(|e| CliError::operational(e.to_string()))?;
        let workspace = paths::current_workspace()
            .map_err(|e| CliError::operational(planning::error_chain(&e)))?;
        // `rho --config FILE ...` names the file; otherwise `$RHO_HOME/config.toml`.
        let config = crate::cli::root::options()
            .load_config(&home)
            .map_err(|e| {
                CliError::invalid(format!(
                    "invalid configuration: {}",
                    planning::error_chain(&e)
                ))
            })?;
        Ok(Self {
            home,
            workspace,
            config,
            process: ProcessSettings::from_env(),
        })
    }

    /// Plans `file` with `inputs` (nothing is stored).
    pub fn plan(&self, file: &Path, inputs: BTreeMap<String, Data>) -> Result<Planned, PlanError> {
        crate::workflow::service::plan_file(
            &self.home,
            &self.workspace,
            &self.config,
            &self.process,
            file,
            inputs,
        )
    }
}

/// Plans and stores `file` exactly as `rho workflow plan` does (also used by `run FILE`):
/// sandbox warnings go to stderr; the planned workflow and its manifest are returned.
pub fn create_plan(
    file: &Path,
    raw_inputs: &[String],
) -> Result<(Planned, PlanManifest), CliError> {
    try_create_plan(file, raw_inputs)?.map_err(|e| plan_error(&e))
}

/// [`create_plan`] with the planning error kept whole (for its diagnostics); the outer error
/// is a usage or environment problem found before planning started.
pub fn try_create_plan(
    file: &Path,
    raw_inputs: &[String],
) -> Result<Result<(Planned, PlanManifest), PlanError>, CliError> {
    let inputs = parse_inputs(raw_inputs)?;
    let ctx = Context::from_env()?;
    Ok(ctx.plan(file, inputs).and_then(|planned| {
        warn(&planned.warnings());
        let manifest = planning::store_plan(&ctx.home, &planned)?;
        Ok((planned, manifest))
    }))
}

/// `1 node`, `3 nodes`.
pub fn node_count_text(count: usize) -> String {
    if count == 1 {
        "1 node".to_owned()
    } else {
        format!("{count} nodes")
    }
}

/// The exit code of a planning error.
pub fn plan_exit_code(error: &PlanError) -> ExitCode {
    if let PlanError::Worker(WorkerError::Interrupted { signal }) = error {
        return if *signal == libc::SIGTERM {
            ExitCode::Terminated
        } else {
            ExitCode::Interrupted
        };
    }
    if error.is_invalid() {
        ExitCode::Invalid
    } else {
        ExitCode::Operational
    }
}

/// A planning error as a command error.
pub fn plan_error(error: &PlanError) -> CliError {
    let message = match error {
        PlanError::Invalid { .. } | PlanError::Worker(WorkerError::Failed { .. }) => {
            error.to_string()
        }
        other => planning::error_chain(other),
    };
    CliError::with_code(plan_exit_code(error), message)
}

/// A store error as a command error: unknown, ambiguous or malformed ids are usage errors,
/// everything else is operational.
pub fn store_error(error: &StoreError) -> CliError {
    let code = match error {
        StoreError::UnknownId { .. }
        | StoreError::AmbiguousId { .. }
        | StoreError::InvalidId { .. }
        | StoreError::Legacy { .. } => ExitCode::Invalid,
        _ => ExitCode::Operational,
    };
    CliError::with_code(code, planning::error_chain(error))
}

/// Prints warnings on stderr.
pub fn warn(warnings: &[String]) {
    let mut stderr = std::io::stderr().lock();
    for w in warnings {
        let _ = writeln!(
            stderr,
            "warning: {}",
            crate::terminal::escape_controls_keep_lines(w)
        );
    }
}

/// Writes `text` to stdout.
pub fn print_out(text: &str) -> Result<(), CliError> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|e| CliError::operational(format!("cannot write to stdout: {e}")))
}

/// Pretty JSON plus a newline.
pub fn json_text(value: &serde_json::Value) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_else(|_| "null".to_owned());
    text.push('\n');
    text
}

/// A diagnostic as JSON: code, message, and file/line/column when known.
pub fn diagnostic_json(d: &rho_ipc::message::Diagnostic) -> serde_json::Value {
    let mut object = serde_json::json!({ "code": d.code, "message": d.message });
    if let Some(span) = &d.span {
        object["file"] = span.label.strip_prefix("//").unwrap_or(&span.label).into();
        object["line"] = span.line.into();
        object["column"] = span.column.into();
    }
    if let Some(b) = &d.budget {
        object["budget"] =
            serde_json::json!({ "name": b.name, "limit": b.limit, "measured": b.measured });
    }
    object
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn inputs_split_at_the_first_equals_and_parse_json() {
        let inputs = parse_inputs(&strings(&[
            "target=\"a=b\"",
            "n=3",
            "flags={\"x\":[true,null]}",
        ]))
        .unwrap();
        assert_eq!(inputs["target"], Data::String("a=b".into()));
        assert_eq!(inputs["n"], Data::Int(3));
        assert!(matches!(inputs["flags"], Data::Map(_)));
    }

    #[test]
    fn bad_inputs_are_usage_errors_naming_the_key() {
        for (arg, needle) in [
            (vec!["target"], "expected KEY=JSON"),
            (vec!["Bad=1"], "`Bad` is not a valid input name"),
            (vec!["t=src"], "`t`: the value is not JSON"),
            (vec!["t=1.5"], "only integers"),
            (vec!["t=1", "t=2"], "`t` is given more than once"),
        ] {
            let err = parse_inputs(&strings(&arg)).unwrap_err();
            assert_eq!(err.code, ExitCode::Invalid);
            assert!(err.message.contains(needle), "{arg:?}: {}", err.message);
        }
    }
}
