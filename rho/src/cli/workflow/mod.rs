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
pub mod logs;
pub mod new;
pub mod plan;
pub mod prune;
pub mod resume;
pub mod rho_shapes;
pub mod run;
pub mod show;
pub mod status;
pub mod validate;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand, ValueEnum};
use rho_ipc::data::Data;

use super::exit::{CliError, CliResult, ExitCode};
use crate::config::Config;
use crate::paths::{self, RhoHome, Workspace};
use crate::workflow::locate;
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
    /// Show what a run's nodes printed (optionally following a running run).
    Logs(logs::LogsArgs),
    /// Write a commented starter workflow to `.rho/workflows/NAME/workflow.star`.
    New(new::NewArgs),
    /// Remove finished runs and unreferenced plans by age or count.
    Prune(prune::PruneArgs),
    /// Show what a plan's (or run's) program digest covers, in words.
    Show(show::ShowArgs),
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
        WorkflowCommand::Logs(args) => logs::run_logs(&args),
        WorkflowCommand::New(args) => new::run_new(&args),
        WorkflowCommand::Prune(args) => prune::run_prune(&args),
        WorkflowCommand::Show(args) => show::run_show(&args),
    }
}

/// `--output text|json`: the output convention of every command that prints one result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DocumentOutput {
    /// For people.
    Text,
    /// One JSON document.
    Json,
}

/// `--output text|json` with `--json` as a hidden alias, flattened into a command's args.
#[derive(Debug, Clone, Copy, Args)]
pub struct DocumentOutputArgs {
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub output: DocumentOutput,
    /// Same as `--output json`.
    #[arg(long, hide = true)]
    pub json: bool,
}

impl DocumentOutputArgs {
    /// The format asked for.
    pub fn format(self) -> DocumentOutput {
        if self.json {
            DocumentOutput::Json
        } else {
            self.output
        }
    }

    /// Whether JSON was asked for.
    pub fn is_json(self) -> bool {
        self.format() == DocumentOutput::Json
    }
}

/// `--input KEY=VALUE`, repeatable.
#[derive(Debug, Clone, Default, Args)]
pub struct InputArgs {
    /// An input value: `KEY=VALUE`, the value read by the input's declared type
    /// (`--input version=1.2.0`, `--input jobs=4`, `--input full=true`); JSON is accepted too
    /// (`--input 'paths=["a","b"]'`). Repeat for more inputs.
    #[arg(long = "input", value_name = "KEY=VALUE")]
    pub inputs: Vec<String>,
}

/// Parsed `--input` values, before the declared types are known.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inputs {
    /// Each value as JSON when it parses as JSON without floats, else as its bare text.
    pub values: BTreeMap<String, Data>,
    /// The bare text of values that parsed as JSON other than a string (`1`, `true`,
    /// `null`): a declared string or enum input takes the text instead.
    pub texts: BTreeMap<String, String>,
}

impl Inputs {
    /// The values with the named inputs taken as their bare text (`None` when none of the
    /// names has an alternative reading).
    fn as_text(&self, names: &[&str]) -> Option<BTreeMap<String, Data>> {
        let mut values = self.values.clone();
        let mut changed = false;
        for name in names {
            if let Some(text) = self.texts.get(*name) {
                values.insert((*name).to_owned(), Data::String(text.clone()));
                changed = true;
            }
        }
        changed.then_some(values)
    }
}

/// Parses `KEY=VALUE` arguments: split at the first `=`, the key a valid name, each key
/// once. The value is JSON when it parses as JSON (floats aside); otherwise it is the bare
/// text, for a string or enum input. Which reading a value gets when both are possible is
/// decided by the declared type when planning (see [`Context::plan`]).
pub fn parse_inputs(raw: &[String]) -> Result<Inputs, CliError> {
    let mut inputs = Inputs::default();
    for arg in raw {
        let Some((key, text)) = arg.split_once('=') else {
            return Err(CliError::invalid(format!(
                "--input `{arg}`: expected KEY=VALUE, for example --input target=src"
            )));
        };
        if !is_valid_name(key) {
            return Err(CliError::invalid(format!(
                "--input `{arg}`: `{key}` is not a valid input name (1 to 63 of a-z, 0-9, `_`, \
                 `-`, starting with a letter)"
            )));
        }
        let json = serde_json::from_str::<serde_json::Value>(text).ok();
        let value = match json.as_ref().map(Data::from_json) {
            Some(Ok(value)) => {
                if !matches!(value, Data::String(_)) {
                    inputs.texts.insert(key.to_owned(), text.to_owned());
                }
                value
            }
            // A JSON list or object with a float (or too deep) is meant as JSON: say why
            // it cannot be used rather than passing it on as text.
            Some(Err(e)) if text.trim_start().starts_with(['[', '{']) => {
                return Err(CliError::invalid(format!("--input `{key}`: {e}")));
            }
            _ => Data::String(text.to_owned()),
        };
        if inputs.values.insert(key.to_owned(), value).is_some() {
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
    /// The canonical workspace root (found from the current directory).
    pub workspace: PathBuf,
    /// How the workspace was found (and the current directory).
    pub located: Workspace,
    /// The configuration.
    pub config: Config,
    /// Environment-derived settings.
    pub process: ProcessSettings,
}

impl Context {
    /// Reads the context of this process.
    pub fn from_env() -> Result<Self, CliError> {
        let home = RhoHome::from_env().map_err(|e| CliError::operational(e.to_string()))?;
        let located = workspace()?;
        let workspace = located.root.clone();
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
            located,
            config,
            process: ProcessSettings::from_env(),
        })
    }

    /// The workflow file `given` names (a file, relative to the current directory, or the
    /// name of one of the workspace's workflows), relative to the workspace root.
    pub fn workflow_file(&self, given: &str) -> Result<PathBuf, CliError> {
        locate::resolve_workflow(&self.located, given).map_err(|e| CliError::invalid(e.to_string()))
    }

    /// Plans `file` with `inputs` (nothing is stored). A value that reads both as JSON and
    /// as bare text (`--input version=1`) is first given as JSON; when the workflow declares
    /// that input as a string or enum and refuses the JSON value, planning is repeated once
    /// with the text, and the first error stands if that fails too.
    pub fn plan(&self, file: &Path, inputs: &Inputs) -> Result<Planned, PlanError> {
        let first = self.plan_values(file, inputs.values.clone());
        let Err(PlanError::Invalid { diagnostics }) = &first else {
            return first;
        };
        let refused: Vec<&str> = inputs
            .texts
            .keys()
            .map(String::as_str)
            .filter(|name| {
                let quoted = format!("{name:?}");
                diagnostics.iter().any(|d| {
                    matches!(d.code.as_str(), "input_type" | "input_not_in_enum")
                        && d.message.contains(&quoted)
                })
            })
            .collect();
        match inputs.as_text(&refused) {
            Some(values) => self.plan_values(file, values).or(first),
            None => first,
        }
    }

    fn plan_values(
        &self,
        file: &Path,
        inputs: BTreeMap<String, Data>,
    ) -> Result<Planned, PlanError> {
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

/// The workspace of this process; says on stderr which one is used when it is not the
/// current directory (once per process).
pub fn workspace() -> Result<Workspace, CliError> {
    static NOTED: std::sync::Once = std::sync::Once::new();
    let located = paths::discover_workspace()
        .map_err(|e| CliError::operational(planning::error_chain(&e)))?;
    if let Some(note) = located.note() {
        NOTED.call_once(|| {
            let _ = writeln!(std::io::stderr().lock(), "note: {note}");
        });
    }
    Ok(located)
}

/// What a `PLAN_ID|FILE|NAME` argument names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A workflow file, relative to the workspace root when inside it.
    File(PathBuf),
    /// A stored plan or run id (or prefix), not yet resolved.
    Id(String),
}

/// Classifies `given`: an existing file or a path-like argument is a file; a workspace
/// workflow's name is its entry file; anything spelled like an id is an id; the rest is a
/// workflow that was not found (with suggestions).
pub fn target(ws: &Workspace, given: &str) -> Result<Target, CliError> {
    match locate::resolve_workflow(ws, given) {
        Ok(file) => Ok(Target::File(file)),
        Err(e) if locate::looks_like_path(given) || !is_id_like(given) => {
            Err(CliError::invalid(e.to_string()))
        }
        Err(_) => Ok(Target::Id(given.to_owned())),
    }
}

/// Spelled like a (prefix of a) plan or run id: lowercase hex digits and dashes.
fn is_id_like(given: &str) -> bool {
    !given.is_empty()
        && given
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b) || b == b'-')
}

/// An unknown id that might have been meant as a workflow name: "no `what` matches" plus the
/// workspace's closest workflows; other store errors as they are.
pub fn unknown_target(ws: &Workspace, given: &str, error: &StoreError, what: &str) -> CliError {
    if !matches!(error, StoreError::UnknownId { .. }) {
        return store_error(error);
    }
    let mut message = format!("no {what} matches `{given}`");
    match locate::resolve_workflow(ws, given) {
        Err(located) if !located.suggestions().is_empty() => {
            use std::fmt::Write as _;
            let _ = write!(
                message,
                " and no workflow is named so; did you mean {}?",
                located.suggestions().join(", ")
            );
        }
        _ => message.push_str("; `rho workflow list` shows this workspace's workflows and ids"),
    }
    CliError::invalid(message)
}

/// A plan made (or found again) by `plan` or `run FILE`.
#[derive(Debug)]
pub struct CreatedPlan {
    /// The planned workflow.
    pub planned: Planned,
    /// The stored plan's manifest.
    pub manifest: PlanManifest,
    /// Whether an identical stored plan was reused instead of storing a copy.
    pub reused: bool,
}

/// Plans and stores `file` exactly as `rho workflow plan` does (also used by `run FILE`):
/// sandbox warnings go to stderr; an identical stored plan is reused.
pub fn create_plan(
    ctx: &Context,
    file: &Path,
    raw_inputs: &[String],
) -> Result<CreatedPlan, CliError> {
    try_create_plan(ctx, file, raw_inputs)?.map_err(|e| plan_error(&e))
}

/// [`create_plan`] with the planning error kept whole (for its diagnostics); the outer error
/// is a usage or environment problem found before planning started.
pub fn try_create_plan(
    ctx: &Context,
    file: &Path,
    raw_inputs: &[String],
) -> Result<Result<CreatedPlan, PlanError>, CliError> {
    let inputs = parse_inputs(raw_inputs)?;
    Ok(ctx.plan(file, &inputs).and_then(|planned| {
        warn(&planned.warnings());
        let (manifest, reused) = planning::store_or_reuse_plan(&ctx.home, &planned)?;
        Ok(CreatedPlan {
            planned,
            manifest,
            reused,
        })
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
        // Each diagnostic with the source line at fault and a caret under the column.
        PlanError::Invalid { diagnostics } if !diagnostics.is_empty() => {
            match paths::current_workspace() {
                Ok(ws) => diagnostics
                    .iter()
                    .map(|d| planning::render_diagnostic_with_source(d, &ws))
                    .collect::<Vec<_>>()
                    .join("\nerror: "),
                Err(_) => error.to_string(),
            }
        }
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
    fn inputs_split_at_the_first_equals_and_parse_json_or_text() {
        let inputs = parse_inputs(&strings(&[
            "target=\"a=b\"",
            "n=3",
            "flags={\"x\":[true,null]}",
            "version=1.2.0",
            "ratio=1.5",
            "branch=main",
        ]))
        .unwrap();
        assert_eq!(inputs.values["target"], Data::String("a=b".into()));
        assert_eq!(inputs.values["n"], Data::Int(3));
        assert!(matches!(inputs.values["flags"], Data::Map(_)));
        assert_eq!(inputs.values["version"], Data::String("1.2.0".into()));
        assert_eq!(inputs.values["ratio"], Data::String("1.5".into()));
        assert_eq!(inputs.values["branch"], Data::String("main".into()));
        assert_eq!(
            inputs.texts.keys().collect::<Vec<_>>(),
            ["flags", "n"],
            "values with a second reading as text"
        );
        let text = inputs.as_text(&["n"]).unwrap();
        assert_eq!(text["n"], Data::String("3".into()));
        assert!(inputs.as_text(&["target"]).is_none());
    }

    #[test]
    fn bad_inputs_are_usage_errors_naming_the_key() {
        for (arg, needle) in [
            (vec!["target"], "expected KEY=VALUE"),
            (vec!["Bad=1"], "`Bad` is not a valid input name"),
            (vec!["t=[1.5]"], "only integers"),
            (vec!["t=1", "t=2"], "`t` is given more than once"),
        ] {
            let err = parse_inputs(&strings(&arg)).unwrap_err();
            assert_eq!(err.code, ExitCode::Invalid);
            assert!(err.message.contains(needle), "{arg:?}: {}", err.message);
        }
    }
}
