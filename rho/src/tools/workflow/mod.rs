//! The model-facing `workflow` tool: `validate`, `plan`, `run`, `status`, `cancel` and
//! `resume` through the same services and store as `rho workflow`.
//!
//! Invariant: `run` and `resume` start nothing unless the host returned an explicit accept
//! for the exact program digest ([`ToolHost::confirm`], which fails closed); they then own
//! the run on a background thread and return its ID at once, and its completion is delivered
//! later through [`ToolHost::notify`] (and is visible through `status`). Command nodes are
//! authorized one by one on the same path as in the CLI; the consent grants nothing else.

pub mod render;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rho_ipc::data::Data;
use rho_policy::{OperationClass, TrustRequirement};
use serde::Deserialize;
use serde_json::{Value, json};

use super::summary::bound_lines;
use super::{
    ConfirmAnswer, ConfirmRequest, Tool, ToolContext, ToolError, ToolHost, ToolNotice, ToolOutput,
    ToolPermission, parse_args,
};
use crate::workflow::plan::{self as planning, PlanError, ProcessSettings};
use crate::workflow::runner::{self, ProgressSink, ResumeOptions, RunContext, RunError, RunReport};
use crate::workflow::service::{self, OwnerResponder, TrustCheckError};
use crate::workflow::state::{Event, State};
use crate::workflow::store::runs::{self, Confirmation, ConfirmationMethod, StoredManifest};
use crate::workflow::store::{StoreError, plans};

/// The tool's name.
pub const NAME: &str = "workflow";

/// How long `cancel` waits for the owner's acknowledgement (as the CLI).
const CANCEL_WAIT: Duration = Duration::from_secs(10);

/// How long shutdown waits for cancelled background runs to stop.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(15);

/// The arguments, after schema validation.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkflowArgs {
    action: Action,
    file: Option<String>,
    inputs: Option<serde_json::Map<String, Value>>,
    plan_id: Option<String>,
    run_id: Option<String>,
    recover_uncertain: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Action {
    Validate,
    Plan,
    Run,
    Status,
    Cancel,
    Resume,
}

impl Action {
    fn as_str(self) -> &'static str {
        match self {
            Action::Validate => "validate",
            Action::Plan => "plan",
            Action::Run => "run",
            Action::Status => "status",
            Action::Cancel => "cancel",
            Action::Resume => "resume",
        }
    }

    /// The fields this action takes besides `action`.
    fn fields(self) -> &'static [&'static str] {
        match self {
            Action::Validate | Action::Plan => &["file", "inputs"],
            Action::Run => &["plan_id"],
            Action::Status | Action::Cancel => &["run_id"],
            Action::Resume => &["run_id", "recover_uncertain"],
        }
    }
}

impl WorkflowArgs {
    fn parse(args: &Value) -> Result<Self, ToolError> {
        let parsed: WorkflowArgs = parse_args(NAME, args)?;
        let allowed = parsed.action.fields();
        for (field, present) in [
            ("file", parsed.file.is_some()),
            ("inputs", parsed.inputs.is_some()),
            ("plan_id", parsed.plan_id.is_some()),
            ("run_id", parsed.run_id.is_some()),
            ("recover_uncertain", parsed.recover_uncertain.is_some()),
        ] {
            if present && !allowed.contains(&field) {
                return Err(ToolError::invalid(
                    NAME,
                    field,
                    format!(
                        "does not apply to action `{}` (it takes: {})",
                        parsed.action.as_str(),
                        allowed.join(", ")
                    ),
                ));
            }
        }
        Ok(parsed)
    }

    fn required<'a>(
        &self,
        field: &'static str,
        value: Option<&'a String>,
    ) -> Result<&'a str, ToolError> {
        value.map(String::as_str).ok_or_else(|| {
            ToolError::invalid(
                NAME,
                field,
                format!("required for action `{}`", self.action.as_str()),
            )
        })
    }
}

/// Runs this tool owns on background threads.
#[derive(Default)]
struct BackgroundRuns {
    active: Mutex<HashMap<String, JoinHandle<()>>>,
}

impl BackgroundRuns {
    fn insert(&self, run_id: String, handle: JoinHandle<()>) {
        let mut active = self.active.lock().unwrap_or_else(PoisonError::into_inner);
        active.retain(|_, h| !h.is_finished());
        active.insert(run_id, handle);
    }

    fn drain(&self) -> Vec<(String, JoinHandle<()>)> {
        let mut active = self.active.lock().unwrap_or_else(PoisonError::into_inner);
        active.drain().collect()
    }

    fn running(&self) -> Vec<String> {
        let active = self.active.lock().unwrap_or_else(PoisonError::into_inner);
        active
            .iter()
            .filter(|(_, h)| !h.is_finished())
            .map(|(id, _)| id.clone())
            .collect()
    }
}

/// The `workflow` tool. Cheap to share: clones see the same background runs.
#[derive(Clone)]
pub struct WorkflowTool {
    process: ProcessSettings,
    runs: Arc<BackgroundRuns>,
}

impl std::fmt::Debug for WorkflowTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkflowTool")
            .field("running", &self.runs.running())
            .finish_non_exhaustive()
    }
}

impl WorkflowTool {
    /// The tool, planning with `process` (the planner worker, its sandbox mode, `PATH`).
    pub fn new(process: ProcessSettings) -> Self {
        WorkflowTool {
            process,
            runs: Arc::new(BackgroundRuns::default()),
        }
    }

    /// The tool with settings from this process's environment.
    pub fn from_env() -> Self {
        Self::new(ProcessSettings::from_env())
    }

    /// IDs of runs this tool still owns.
    pub fn running(&self) -> Vec<String> {
        self.runs.running()
    }

    /// Asks every run this tool owns to cancel (through the store, as `cancel` does) and
    /// waits for their owners to stop, up to a bound. Used when the host shuts down, so no
    /// run is left without an owner while its processes live on.
    pub fn shutdown(&self, home: &crate::paths::RhoHome) {
        let runs = self.runs.drain();
        for (run_id, handle) in &runs {
            if handle.is_finished() {
                continue;
            }
            if let Err(err) = runner::request_cancel(home, run_id, Duration::ZERO) {
                tracing::warn!(%run_id, error = %planning::error_chain(&err), "cannot cancel a background run at shutdown");
            }
        }
        let deadline = Instant::now() + SHUTDOWN_WAIT;
        for (run_id, handle) in runs {
            while !handle.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if handle.is_finished() {
                let _ = handle.join();
            } else {
                tracing::warn!(%run_id, "a background run did not stop within the shutdown bound");
            }
        }
    }

    fn validate_or_plan(
        &self,
        args: &WorkflowArgs,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let file = args.required("file", args.file.as_ref())?;
        let inputs = parse_inputs(args.inputs.as_ref())?;
        let path = workflow_path(ctx.workspace(), file)?;
        let result = service::plan_file(
            ctx.home(),
            ctx.workspace(),
            ctx.config(),
            &self.process,
            &path,
            inputs,
        );
        let limit = ctx.summary_limit();
        match (args.action, result) {
            (Action::Validate, Ok(planned)) => {
                let (lines, structured) = render::validate_ok(file, &planned);
                Ok(ToolOutput::new(bound_lines(&lines, limit), structured))
            }
            (Action::Plan, Ok(planned)) => {
                let manifest = planning::store_plan(ctx.home(), &planned)
                    .map_err(|e| ToolError::failed(NAME, planning::error_chain(&e)))?;
                let (lines, structured) = render::plan_ok(file, &planned, &manifest);
                Ok(ToolOutput::new(bound_lines(&lines, limit), structured))
            }
            (action, Err(error)) if error.is_invalid() => {
                let (lines, structured) = render::invalid(action.as_str(), file, &error);
                if action == Action::Validate {
                    Ok(ToolOutput::new(bound_lines(&lines, limit), structured))
                } else {
                    Err(ToolError::failed(NAME, bound_lines(&lines, limit)))
                }
            }
            (_, Err(error)) => Err(plan_failure(&error)),
            (_, Ok(_)) => Err(ToolError::failed(NAME, "unexpected action")),
        }
    }

    fn run(&self, args: &WorkflowArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let prefix = args.required("plan_id", args.plan_id.as_ref())?;
        let plan_id = plans::resolve(ctx.home(), prefix).map_err(|e| store_failure(&e))?;
        let plan = plans::load(ctx.home(), &plan_id).map_err(|e| store_failure(&e))?;
        check_trust(
            ctx,
            TrustRequirement {
                project_agents: plan.program.trust.project_agents,
                ..TrustRequirement::default()
            },
        )?;
        let confirmation = confirm(ctx, &plan_id, &plan.program_digest, "run")?;
        let run_ctx = owner_context(ctx, ctx.permission_mode())?;
        let host = Arc::clone(ctx.host());
        let limit = ctx.summary_limit();
        self.spawn_owner(ctx, move |sink| {
            let result = runner::start(&run_ctx, &plan, confirmation, sink);
            (run_ctx.home.clone(), host, limit, result)
        })
    }

    fn resume(&self, args: &WorkflowArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let prefix = args.required("run_id", args.run_id.as_ref())?;
        let run_id = runs::resolve(ctx.home(), prefix).map_err(|e| store_failure(&e))?;
        let run = runs::open(ctx.home(), &run_id).map_err(|e| store_failure(&e))?;
        let manifest = match run.manifest().map_err(|e| store_failure(&e))? {
            StoredManifest::Current(m) => m,
            StoredManifest::Legacy(_) => {
                return Err(ToolError::failed(NAME, runs::legacy_refusal(&run_id)));
            }
        };
        drop(run);
        let Some(recorded) = manifest.policy else {
            return Err(run_failure(&RunError::PolicyNotRecorded { run_id }));
        };
        check_trust(ctx, recorded.trust)?;
        let confirmation = confirm(ctx, &manifest.plan_id, &manifest.program_digest, "resume")?;
        let (mode, _) = service::resume_mode(recorded.permission_mode, ctx.mode());
        let run_ctx = owner_context(ctx, mode)?;
        let host = Arc::clone(ctx.host());
        let limit = ctx.summary_limit();
        let options = ResumeOptions {
            recover_uncertain: args.recover_uncertain.unwrap_or(false),
        };
        self.spawn_owner(ctx, move |sink| {
            let result = runner::resume(&run_ctx, &run_id, options, &confirmation, sink);
            (run_ctx.home.clone(), host, limit, result)
        })
    }

    /// Starts an owner thread running `drive`, waits until the run exists (or the owner
    /// failed before creating it), and returns the run's summary. When `drive` returns, the
    /// completion notice is delivered through the host.
    fn spawn_owner<F>(&self, ctx: &ToolContext, drive: F) -> Result<ToolOutput, ToolError>
    where
        F: FnOnce(
                &mut dyn ProgressSink,
            ) -> (
                crate::paths::RhoHome,
                Arc<dyn ToolHost>,
                usize,
                Result<RunReport, RunError>,
            ) + Send
            + 'static,
    {
        let (tx, rx) = mpsc::channel::<Started>();
        let handle = std::thread::Builder::new()
            .name("rho-workflow-owner".to_owned())
            .spawn(move || {
                let mut sink = CreatedSink {
                    tx: Some(tx),
                    run_id: None,
                };
                let (home, host, limit, result) = drive(&mut sink);
                match (&sink.run_id, result) {
                    (Some(run_id), result) => {
                        deliver_completion(&home, host.as_ref(), limit, run_id, &result);
                    }
                    (None, result) => {
                        if let Some(tx) = sink.tx.take() {
                            let _ = tx.send(Started::Failed(match result {
                                Ok(report) => format!(
                                    "the run {} ended before it was reported as created",
                                    report.run_id
                                ),
                                Err(err) => run_failure(&err).to_string(),
                            }));
                        }
                    }
                }
            })
            .map_err(|e| ToolError::failed(NAME, format!("cannot start the run owner: {e}")))?;
        let run_id = match rx.recv() {
            Ok(Started::Created(run_id)) => run_id,
            Ok(Started::Failed(message)) => {
                let _ = handle.join();
                return Err(ToolError::failed(NAME, message));
            }
            Err(_) => {
                let _ = handle.join();
                return Err(ToolError::failed(
                    NAME,
                    "the run owner stopped before creating the run",
                ));
            }
        };
        self.runs.insert(run_id.clone(), handle);
        let mut output = status_of(ctx, &run_id)?;
        output.summary = bound_lines(
            &[
                output.summary.trim_end().to_owned(),
                "started in the background: a completion notice follows when it ends; use \
                 status after it arrives, cancel to stop (do not poll)"
                    .to_owned(),
            ],
            ctx.summary_limit(),
        );
        Ok(output)
    }
}

impl Tool for WorkflowTool {
    fn name(&self) -> &'static str {
        NAME
    }

    fn description(&self) -> &'static str {
        "Validate, plan, run, inspect, cancel or resume a durable rho workflow (a Starlark \
         `.star` file in the workspace). `validate` and `plan` take `file` (workspace-relative) \
         and optional `inputs`; `plan` stores a frozen plan and returns its plan_id and \
         program_digest. `run` takes a `plan_id` and `resume` a `run_id`: both ask the user to \
         confirm the exact digest, start in the background and return the run_id at once; a \
         completion notice arrives later. `status` and `cancel` take a `run_id`. Do not poll \
         status; wait for the completion notice."
    }

    fn input_schema(&self) -> Value {
        let id = json!({"type": "string", "minLength": 1, "maxLength": 128});
        json!({
            "type": "object",
            "properties": {
                "action": {
                    "type": "string",
                    "enum": ["validate", "plan", "run", "status", "cancel", "resume"],
                    "description": "What to do."
                },
                "file": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 4096,
                    "description": "validate/plan: the workflow file, relative to the workspace \
                                    root (e.g. .rho/workflows/review.star), or a workspace \
                                    workflow's name (review for \
                                    .rho/workflows/review/workflow.star)."
                },
                "inputs": {
                    "type": "object",
                    "description": "validate/plan: input values by name (JSON; integers, no \
                                    floats)."
                },
                "plan_id": merge(&id, "run: the plan ID (or a unique prefix) from plan."),
                "run_id": merge(&id, "status/cancel/resume: the run ID (or a unique prefix)."),
                "recover_uncertain": {
                    "type": "boolean",
                    "description": "resume: give attempts whose fate is uncertain a new attempt \
                                    (only once none of their processes is alive)."
                }
            },
            "required": ["action"],
            "additionalProperties": false,
            "allOf": [
                {"if": {"properties": {"action": {"enum": ["validate", "plan"]}}},
                 "then": {"required": ["file"]}},
                {"if": {"properties": {"action": {"const": "run"}}},
                 "then": {"required": ["plan_id"]}},
                {"if": {"properties": {"action": {"enum": ["status", "cancel", "resume"]}}},
                 "then": {"required": ["run_id"]}}
            ]
        })
    }

    fn capability(&self) -> &'static str {
        "workflow"
    }

    fn permission_requests(
        &self,
        args: &Value,
        _ctx: &ToolContext,
    ) -> Result<Vec<ToolPermission>, ToolError> {
        let args = WorkflowArgs::parse(args)?;
        let id = |v: &Option<String>| v.clone().unwrap_or_default();
        let permission = match args.action {
            Action::Validate => {
                ToolPermission::read(format!("validate workflow {}", id(&args.file)))
            }
            Action::Plan => ToolPermission::read(format!(
                "plan workflow {} (stores a frozen plan)",
                id(&args.file)
            )),
            Action::Status => ToolPermission::read(format!("status of run {}", id(&args.run_id))),
            Action::Cancel => ToolPermission::new(
                OperationClass::OtherWrite,
                format!("cancel workflow run {}", id(&args.run_id)),
            ),
            Action::Run => ToolPermission::new(
                OperationClass::Process,
                format!(
                    "run workflow plan {} (its command nodes are authorized one by one)",
                    id(&args.plan_id)
                ),
            ),
            Action::Resume => ToolPermission::new(
                OperationClass::Process,
                format!(
                    "resume workflow run {} (its command nodes are authorized one by one)",
                    id(&args.run_id)
                ),
            ),
        };
        Ok(vec![permission])
    }

    fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args = WorkflowArgs::parse(&args)?;
        match args.action {
            Action::Validate | Action::Plan => self.validate_or_plan(&args, ctx),
            Action::Run => self.run(&args, ctx),
            Action::Status => status(&args, ctx),
            Action::Cancel => cancel(&args, ctx),
            Action::Resume => self.resume(&args, ctx),
        }
    }
}

fn merge(base: &Value, description: &str) -> Value {
    let mut value = base.clone();
    value["description"] = json!(description);
    value
}

/// The workflow file `file` names: a path relative to the workspace root (any existing
/// entry that is not a directory goes to the planner, which reports what is wrong with it)
/// or the name of one of the workspace's workflows (`ci` is
/// `.rho/workflows/ci/workflow.star`), as on the command line. Anything else is an invalid
/// `file` with the closest workflow names.
fn workflow_path(workspace: &Path, file: &str) -> Result<PathBuf, ToolError> {
    let located = crate::paths::Workspace {
        root: workspace.to_path_buf(),
        cwd: workspace.to_path_buf(),
        found_by: crate::paths::WorkspaceMarker::CurrentDir,
    };
    match crate::workflow::locate::resolve_workflow(&located, file) {
        // `join` keeps an absolute path as it is.
        Ok(rel) => Ok(workspace.join(rel)),
        Err(e) => Err(ToolError::invalid(
            NAME,
            "file",
            crate::terminal::escape_controls(&e.to_string()),
        )),
    }
}

/// The `inputs` object as planner values; names and values are checked as the CLI does.
fn parse_inputs(
    inputs: Option<&serde_json::Map<String, Value>>,
) -> Result<BTreeMap<String, Data>, ToolError> {
    let mut out = BTreeMap::new();
    for (name, value) in inputs.into_iter().flatten() {
        if !crate::workflow::plan::checks::is_valid_name(name) {
            return Err(ToolError::invalid(
                NAME,
                format!("inputs.{name}"),
                "not a valid input name (1 to 63 of a-z, 0-9, `_`, `-`, starting with a letter)",
            ));
        }
        let data = Data::from_json(value)
            .map_err(|e| ToolError::invalid(NAME, format!("inputs.{name}"), e.to_string()))?;
        out.insert(name.clone(), data);
    }
    Ok(out)
}

/// Asks the host to consent to `digest` for one new run (or resume).
fn confirm(
    ctx: &ToolContext,
    plan_id: &str,
    digest: &str,
    verb: &str,
) -> Result<Confirmation, ToolError> {
    let request = ConfirmRequest {
        tool: NAME.to_owned(),
        question: format!(
            "{} workflow plan {plan_id} ({digest})?",
            if verb == "resume" { "Resume" } else { "Run" }
        ),
        detail: format!(
            "Consent covers this one {verb} of exactly this program digest. It creates no \
             session-wide rule, changes no permission mode (now {}), trusts no project file, \
             bypasses no hook and authorizes no node capability: every command node is still \
             authorized on its own.",
            ctx.permission_mode()
        ),
    };
    match ctx.host().confirm(&request) {
        ConfirmAnswer::Accepted => Ok(Confirmation {
            digest: digest.to_owned(),
            method: ConfirmationMethod::Host,
            at: crate::workflow::store::timestamp_now(),
        }),
        ConfirmAnswer::Refused { reason } => Err(ToolError::NotConfirmed {
            tool: NAME.to_owned(),
            reason: format!(
                "{reason}. Nothing was run and no run was stored. To {verb} it, the user must \
                 accept the confirmation for plan {plan_id} ({digest}) when asked, or run \
                 `rho workflow {}` in a terminal",
                if verb == "resume" {
                    "resume <RUN_ID> --yes".to_owned()
                } else {
                    format!("run {plan_id} --yes")
                }
            ),
        }),
    }
}

fn check_trust(ctx: &ToolContext, required: TrustRequirement) -> Result<(), ToolError> {
    service::check_trust(ctx.home(), ctx.workspace(), &required).map_err(|e| match e {
        TrustCheckError::Store(e) => ToolError::failed(NAME, planning::error_chain(&e)),
        TrustCheckError::Revoked(e) => ToolError::failed(NAME, e.to_string()),
    })
}

/// The last run state this process decoded for a summary: a client asking for the same
/// run's status again (or its completion notice, after a `status`) finds `state.json` with
/// the same bytes and is answered without decoding it again.
static SNAPSHOTS: runner::SnapshotCache = runner::SnapshotCache::new();

/// The summary lines and structured form of a run, read from the store.
fn summarize_run(
    home: &crate::paths::RhoHome,
    run_id: &str,
) -> Result<(Vec<String>, Value), ToolError> {
    let (run, inspection) =
        runner::inspect_cached(home, run_id, &SNAPSHOTS).map_err(|e| run_failure(&e))?;
    Ok(render::run_summary(run_id, run.path(), &inspection))
}

/// Sends the completion notice of a background run.
fn deliver_completion(
    home: &crate::paths::RhoHome,
    host: &dyn ToolHost,
    limit: usize,
    run_id: &str,
    result: &Result<RunReport, RunError>,
) {
    let (mut lines, mut structured) = match summarize_run(home, run_id) {
        Ok(summary) => summary,
        Err(err) => (
            vec![
                format!("run_id: {run_id}"),
                format!("status unavailable: {err}"),
            ],
            json!({"run_id": run_id}),
        ),
    };
    let headline = match result {
        Ok(report) => format!(
            "workflow run {run_id} finished: outcome {}",
            report
                .outcome
                .map_or_else(|| "none (needs recovery)".to_owned(), |o| o.to_string())
        ),
        Err(err) => format!("workflow run {run_id} stopped: {}", run_failure(err)),
    };
    lines.insert(0, headline);
    structured["event"] = json!("workflow_completed");
    host.notify(ToolNotice {
        tool: NAME.to_owned(),
        kind: "workflow_completed".to_owned(),
        summary: bound_lines(&lines, limit),
        structured,
    });
}

enum Started {
    Created(String),
    Failed(String),
}

/// Reports the run ID once the runner created the run; ignores progress otherwise.
struct CreatedSink {
    tx: Option<mpsc::Sender<Started>>,
    run_id: Option<String>,
}

impl ProgressSink for CreatedSink {
    fn created(&mut self, run_id: &str) {
        self.run_id = Some(run_id.to_owned());
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(Started::Created(run_id.to_owned()));
        }
    }

    fn event(&mut self, _event: &Event, _state: &State) {}
}

fn plan_failure(error: &PlanError) -> ToolError {
    ToolError::failed(NAME, planning::error_chain(error))
}

fn store_failure(error: &StoreError) -> ToolError {
    match error {
        StoreError::UnknownId { kind, prefix } => ToolError::UnknownId {
            tool: NAME.to_owned(),
            kind,
            id: prefix.clone(),
            hint: format!(": no stored {kind} has this ID or prefix"),
        },
        StoreError::AmbiguousId {
            kind,
            prefix,
            matches,
        } => ToolError::UnknownId {
            tool: NAME.to_owned(),
            kind,
            id: prefix.clone(),
            hint: format!(
                ": the prefix is ambiguous ({} matches: {}); give more characters",
                matches.len(),
                matches.join(", ")
            ),
        },
        other => ToolError::failed(NAME, planning::error_chain(other)),
    }
}

fn run_failure(error: &RunError) -> ToolError {
    match error {
        RunError::Store(e) => store_failure(e),
        other => ToolError::failed(NAME, planning::error_chain(other)),
    }
}

/// A run owner's context under `mode`, asking people through the tool host.
fn owner_context(
    ctx: &ToolContext,
    mode: rho_policy::PermissionMode,
) -> Result<RunContext, ToolError> {
    let responder = ctx.host().approval_responder();
    service::run_context(
        ctx.home(),
        ctx.workspace(),
        ctx.config(),
        mode,
        OwnerResponder::Given(responder),
        false,
    )
    .map_err(|e| ToolError::failed(NAME, planning::error_chain(&e)))
}

fn status_of(ctx: &ToolContext, run_id: &str) -> Result<ToolOutput, ToolError> {
    let (lines, structured) = summarize_run(ctx.home(), run_id)?;
    Ok(ToolOutput::new(
        bound_lines(&lines, ctx.summary_limit()),
        structured,
    ))
}

fn cancel(args: &WorkflowArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let prefix = args.required("run_id", args.run_id.as_ref())?;
    let run_id = runs::resolve(ctx.home(), prefix).map_err(|e| store_failure(&e))?;
    let answer =
        runner::request_cancel(ctx.home(), &run_id, CANCEL_WAIT).map_err(|e| run_failure(&e))?;
    let (lines, structured) = render::cancel(&run_id, &answer);
    Ok(ToolOutput::new(
        bound_lines(&lines, ctx.summary_limit()),
        structured,
    ))
}

fn status(args: &WorkflowArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let prefix = args.required("run_id", args.run_id.as_ref())?;
    let run_id = runs::resolve(ctx.home(), prefix).map_err(|e| store_failure(&e))?;
    status_of(ctx, &run_id)
}
