//! `rho workflow run <PLAN_ID|FILE.star>`: consent to one program digest, create a run and
//! own it to the end, streaming progress as text or JSON lines; the exit code says the
//! outcome. Also what `resume` shares: confirmation, progress output and exit mapping.
//!
//! Invariant: nothing runs without consent to the exact digest (`--yes`, or `y`/`yes` at a
//! prompt on a terminal); without both and without a terminal the command fails closed.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::time::Instant;

use clap::{Args, ValueEnum};
use serde_json::json;

use super::{Context, InputArgs, Target, create_plan, rho_shapes, store_error};
use crate::cli::exit::{CliError, CliResult, ExitCode};
use crate::cli::terminal::{self, Colour, paint};
use crate::workflow::{describe, logs};
use rho_policy::{PermissionMode, TrustRequirement};

use crate::cli::permission_args::PermissionArgs;
use crate::permissions::responder::{TerminalShare, terminal};
use crate::permissions::select_process_mode;
use crate::workflow::plan::{error_chain, recorded_sandbox_warnings};
use crate::workflow::runner::{self, ProgressSink, RunContext, RunError, RunReport, signals};
use crate::workflow::state::{Event, EventKind, NodeState, Outcome, State};
use crate::workflow::store::plans;
use crate::workflow::store::runs::{Confirmation, ConfirmationMethod};

/// Lines of each stream shown under a failed node.
const FAILURE_TAIL_LINES: usize = 20;

/// Progress formats of `run` and `resume`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProgressOutput {
    /// For people: a live view on a terminal, plain lines otherwise.
    Text,
    /// One JSON object per line.
    Jsonl,
}

/// Run a stored plan (or plan and run a `.star` file).
#[derive(Debug, Args)]
pub struct RunArgs {
    /// A plan id (or unique prefix), or a workflow file or name to plan first.
    #[arg(value_name = "PLAN_ID|FILE|NAME")]
    pub target: String,
    /// Consent to the plan's program digest without asking.
    #[arg(long, short = 'y')]
    pub yes: bool,
    #[command(flatten)]
    pub inputs: InputArgs,
    /// Progress output.
    #[arg(long, value_enum, default_value = "text")]
    pub output: ProgressOutput,
    /// Same as `--output jsonl`.
    #[arg(long, hide = true, conflicts_with = "output")]
    pub json: bool,
    #[command(flatten)]
    pub permissions: PermissionArgs,
}

/// Runs `rho workflow run`.
pub fn run_run(args: &RunArgs) -> CliResult {
    let output = if args.json {
        ProgressOutput::Jsonl
    } else {
        args.output
    };
    let ctx = Context::from_env()?;
    // An unknown mode is a configuration error before anything is planned or stored.
    let selection = select_process_mode(
        crate::cli::root::options().permission_mode(args.permissions.permission_mode.as_deref()),
        &ctx.config,
    )?;
    let target = super::target(&ctx.located, &args.target)?;
    let is_file = matches!(target, Target::File(_));
    let plan_id = if let Target::File(file) = &target {
        let manifest = create_plan(&ctx, file, &args.inputs.inputs)?.manifest;
        let line = format!(
            "plan_id: {}\nprogram_digest: {}\n",
            manifest.plan_id, manifest.program_digest
        );
        if output == ProgressOutput::Text {
            super::print_out(&line)?;
        } else {
            eprint!("{line}");
        }
        manifest.plan_id
    } else {
        if !args.inputs.inputs.is_empty() {
            return Err(CliError::invalid(
                "--input applies only when running a .star file; a stored plan's inputs are frozen",
            ));
        }
        plans::resolve(&ctx.home, &args.target)
            .map_err(|e| super::unknown_target(&ctx.located, &args.target, &e, "plan"))?
    };
    let plan = plans::load(&ctx.home, &plan_id).map_err(|e| store_error(&e))?;
    // A plan made by a degraded planner says so on every output (`plan` warned already
    // when the file was planned just now).
    let warnings = recorded_sandbox_warnings(&plan.manifest.sandbox);
    if !is_file {
        super::warn(&warnings);
    }
    check_trust(
        &ctx,
        &TrustRequirement {
            project_agents: plan.program.trust.project_agents,
            ..TrustRequirement::default()
        },
    )?;
    // Consent covers the digest and nothing else: the mode, hooks and trust below are
    // decided exactly as they would be without it.
    let confirmation = confirm(&plan_id, &plan.program_digest, args.yes, &|| {
        describe::describe(
            &plan.program,
            &format!("plan {plan_id}"),
            &plan.program_digest,
        )
    })?;
    let run_ctx = run_context(&ctx, selection.mode)?;
    let mut sink = Progress::new(
        output,
        selection.mode,
        selection.source.to_string(),
        &plan.program,
    )
    .with_warnings(warnings);
    let result = runner::start(&run_ctx, &plan, confirmation, &mut sink);
    finish(&mut sink, result)
}

/// Re-checks the trust a plan (or run) needed against the trust this process has now; gone
/// trust fails with the message saying to resolve it and create a new plan.
pub fn check_trust(ctx: &Context, required: &TrustRequirement) -> Result<(), CliError> {
    use crate::workflow::service::{self, TrustCheckError};
    service::check_trust(&ctx.home, &ctx.workspace, required).map_err(|e| match e {
        TrustCheckError::Store(e) => CliError::operational(error_chain(&e)),
        TrustCheckError::Revoked(e) => CliError::invalid(e.to_string()),
    })
}

/// Asks for (or takes) consent to `digest` for one new run. At the prompt, `show` (or `s`)
/// prints `describe()` (what the digest covers) and asks again.
pub fn confirm(
    plan_id: &str,
    digest: &str,
    yes: bool,
    describe: &dyn Fn() -> String,
) -> Result<Confirmation, CliError> {
    let at = crate::workflow::store::timestamp_now();
    if yes {
        return Ok(Confirmation {
            digest: digest.to_owned(),
            method: ConfirmationMethod::Yes,
            at,
        });
    }
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        return Err(CliError::invalid(format!(
            "plan {plan_id} ({digest}) needs confirmation and there is no terminal to ask on: \
             pass --yes to consent to this digest (rho workflow show {plan_id} shows what it \
             covers)"
        )));
    }
    loop {
        let mut stderr = std::io::stderr().lock();
        let _ = write!(
            stderr,
            "Run workflow plan {plan_id} ({digest})? [y/N/show] "
        );
        let _ = stderr.flush();
        drop(stderr);
        let mut answer = String::new();
        let read = std::io::stdin()
            .lock()
            .read_line(&mut answer)
            .map_err(|e| CliError::operational(format!("cannot read the answer: {e}")))?;
        match answer.trim().to_ascii_lowercase().as_str() {
            "y" | "yes" => {
                return Ok(Confirmation {
                    digest: digest.to_owned(),
                    method: ConfirmationMethod::Prompt,
                    at: crate::workflow::store::timestamp_now(),
                });
            }
            "s" | "show" if read > 0 => {
                let mut stderr = std::io::stderr().lock();
                let _ = stderr.write_all(describe().as_bytes());
                let _ = stderr.flush();
            }
            _ => {
                return Err(CliError::invalid(format!(
                    "plan {plan_id} was not confirmed; nothing was run"
                )));
            }
        }
    }
}

/// The owner's context (see `workflow::service::run_context`: the host authorizer under
/// `mode` with a terminal responder when there is a terminal, the same hooks as observers, the
/// claude-cli runtime for claude-cli agent nodes) with SIGINT/SIGTERM as cancellation.
pub fn run_context(ctx: &Context, mode: PermissionMode) -> Result<RunContext, CliError> {
    let run_ctx = crate::workflow::service::run_context(
        &ctx.home,
        &ctx.workspace,
        &ctx.config,
        mode,
        crate::workflow::service::OwnerResponder::Terminal,
        true,
    )?;
    signals::install()
        .map_err(|e| CliError::operational(format!("cannot install signal handlers: {e}")))?;
    Ok(run_ctx)
}

/// The exit code of an outcome.
pub fn outcome_code(outcome: Outcome) -> ExitCode {
    match outcome {
        Outcome::Success => ExitCode::Success,
        Outcome::Failure => ExitCode::Failure,
        Outcome::Denial => ExitCode::Denial,
        Outcome::Cancellation => ExitCode::Cancellation,
        Outcome::Blocked => ExitCode::Blocked,
    }
}

/// A runner error as a command error.
pub fn run_error(error: &RunError) -> CliError {
    let code = match error {
        RunError::NeedsRecovery { .. } | RunError::StillAlive { .. } => ExitCode::NeedsRecovery,
        RunError::Legacy(_)
        | RunError::WorkspaceMismatch { .. }
        | RunError::PolicyNotRecorded { .. } => ExitCode::Invalid,
        RunError::Store(e) => return store_error(e),
        _ => ExitCode::Operational,
    };
    CliError::with_code(code, error_chain(error))
}

/// Prints the end of a run and maps it to the exit code.
pub fn finish(sink: &mut Progress, result: Result<RunReport, RunError>) -> CliResult {
    match result {
        Ok(report) => {
            sink.completed(&report);
            Ok(report.outcome.map_or(ExitCode::NeedsRecovery, outcome_code))
        }
        Err(error) => {
            sink.clear_live();
            match &error {
                RunError::NeedsRecovery { run_id, attempts } => {
                    // Each description names its node first: ``node `build` attempt 1 ...``.
                    let nodes: Vec<&str> = attempts
                        .iter()
                        .filter_map(|a| a.split('`').nth(1))
                        .collect();
                    sink.needs_recovery(run_id, attempts, &nodes);
                }
                RunError::StillAlive { run_id, what } => {
                    sink.needs_recovery(run_id, std::slice::from_ref(what), &[]);
                }
                _ => {}
            }
            Err(run_error(&error))
        }
    }
}

/// Progress output for `run` and `resume`.
pub struct Progress {
    format: ProgressOutput,
    live: bool,
    sequence: u64,
    run_id: String,
    run_dir: Option<PathBuf>,
    mode: PermissionMode,
    mode_source: String,
    total: usize,
    /// The nodes in reading order (needs first), for the end-of-run table.
    order: Vec<String>,
    started: Instant,
    last_draw: Option<Instant>,
    warnings: Vec<String>,
    /// Lines that arrived while an approval prompt was open, printed once it closes.
    deferred: Vec<String>,
    /// Output not on a live terminal, held until the owner flushes it (once it started
    /// what it decided, before it waits), so the records of one step of the run reach the
    /// output in one write instead of one write per line, after the launch, not before it.
    pending: Vec<u8>,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress")
            .field("run_id", &self.run_id)
            .finish_non_exhaustive()
    }
}

impl Progress {
    /// A sink for `format`; text is live only when stdout is a terminal. `mode` is the
    /// permission mode in force and `mode_source` says what selected it (shown, so an open
    /// `bypass` posture is never silent).
    pub fn new(
        format: ProgressOutput,
        mode: PermissionMode,
        mode_source: String,
        program: &rho_ipc::program::FrozenProgram,
    ) -> Self {
        Progress {
            format,
            live: format == ProgressOutput::Text && std::io::stdout().is_terminal(),
            sequence: 0,
            run_id: String::new(),
            run_dir: None,
            mode,
            mode_source,
            total: program.root.nodes.len(),
            order: describe::node_order(program),
            started: Instant::now(),
            last_draw: None,
            warnings: Vec::new(),
            deferred: Vec::new(),
            pending: Vec::new(),
        }
    }

    /// Warnings about the plan (a degraded planner sandbox), repeated in the final summary
    /// (text) and in the `completed` event (`warnings`, JSON lines).
    #[must_use]
    pub fn with_warnings(mut self, warnings: Vec<String>) -> Self {
        self.warnings = warnings;
        self
    }

    fn jsonl(&mut self, event: &str, mut fields: serde_json::Value) {
        self.sequence += 1;
        if let Some(obj) = fields.as_object_mut() {
            obj.insert("version".into(), json!(1));
            obj.insert("sequence".into(), json!(self.sequence));
            obj.insert("run_id".into(), json!(self.run_id));
            // Rho names the event `type`; `event` is the name we printed first.
            obj.insert("type".into(), json!(event));
            obj.insert("event".into(), json!(event));
        }
        let _ = writeln!(self.pending, "{fields}");
    }

    /// Writes the output held in `pending` (see [`ProgressSink::flush`]).
    fn flush_pending(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(&self.pending);
        let _ = out.flush();
        self.pending.clear();
    }

    /// Prints one progress line (or a few, joined by newlines). Node ids, reasons, hook
    /// details and output tails come from the workflow, its hooks and its commands, so their
    /// control characters are made visible here, once, for every line.
    fn line(&mut self, text: &str) {
        let text = &*crate::terminal::escape_controls_keep_lines(text);
        if !self.live {
            let _ = writeln!(self.pending, "{text}");
            return;
        }
        let mut share = terminal();
        if share.prompt_open() {
            // Printing now would land in the middle of the question being asked.
            self.deferred.push(text.to_owned());
            return;
        }
        self.settle(&mut share);
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{text}");
        let _ = out.flush();
    }

    /// On a live terminal with no prompt open: erases the live line and prints the lines
    /// held back while a prompt was open. The caller holds the terminal lock.
    fn settle(&mut self, share: &mut TerminalShare) {
        let mut out = std::io::stdout().lock();
        if share.live_line() {
            let _ = write!(out, "\r\x1b[2K");
            share.set_live_line(false);
        }
        for line in self.deferred.drain(..) {
            let _ = writeln!(out, "{line}");
        }
        let _ = out.flush();
    }

    /// Erases the live line (terminal only), unless an approval prompt is using the
    /// terminal.
    pub fn clear_live(&mut self) {
        self.flush_pending();
        if !self.live {
            return;
        }
        let mut share = terminal();
        if share.prompt_open() {
            return;
        }
        self.settle(&mut share);
        self.last_draw = None;
    }

    fn draw(&mut self, state: &State, force: bool) {
        if !self.live {
            return;
        }
        let now = Instant::now();
        if !force
            && self
                .last_draw
                .is_some_and(|t| now.duration_since(t).as_millis() < 100)
        {
            return;
        }
        // Paused while an approval prompt is open: a redraw starts with `\r` and would wipe
        // out the question. The prompt erased the line; the first draw after it redraws.
        let mut share = terminal();
        if share.prompt_open() {
            return;
        }
        // Counted here, on a throttled redraw, rather than on every journal event: a
        // per-event walk of all tasks would make the owner's cost grow with the run.
        let done = state
            .root()
            .tasks
            .values()
            .filter(|t| t.state.is_terminal())
            .count();
        let running: Vec<&str> = state
            .root()
            .tasks
            .iter()
            .filter(|(_, t)| t.state == NodeState::Running)
            .map(|(id, _)| id.as_str())
            .take(4)
            .collect();
        let latest = running
            .first()
            .and_then(|id| self.latest_output(state, id))
            .map(|(id, line)| format!(" · {}: {line}", crate::terminal::escape_controls(id)))
            .unwrap_or_default();
        let status = format!(
            "[{}/{}] {:.1}s running: {}{latest}",
            done,
            self.total,
            self.started.elapsed().as_secs_f64(),
            if running.is_empty() {
                "-".to_owned()
            } else {
                crate::terminal::escape_controls(&running.join(", ")).into_owned()
            }
        );
        let width = terminal::stdout_columns().unwrap_or(80);
        self.settle(&mut share);
        let mut out = std::io::stdout().lock();
        let _ = write!(
            out,
            "\r\x1b[2K{}",
            terminal::clip_to(&status, width.saturating_sub(1))
        );
        let _ = out.flush();
        share.set_live_line(true);
        self.last_draw = Some(now);
    }

    /// The tail of a failed attempt's output, stderr first, as indented lines (nothing when
    /// the node printed nothing).
    fn failure_tail(&self, node: &str, attempt: u32) -> Vec<String> {
        let Some(run_dir) = &self.run_dir else {
            return Vec::new();
        };
        let mut lines = Vec::new();
        for stream in [logs::Stream::Stderr, logs::Stream::Stdout] {
            let path = logs::stream_path(run_dir, node, attempt, stream);
            let tail = logs::tail_lines(&path, FAILURE_TAIL_LINES).unwrap_or_default();
            if tail.is_empty() {
                continue;
            }
            lines.push(format!(
                "  {} of {node} (last {}):",
                stream.file_name(),
                lines_text(tail.len())
            ));
            lines.extend(tail.into_iter().map(|l| format!("  | {l}")));
        }
        if !lines.is_empty() {
            lines.push(format!(
                "  full output: rho workflow logs {} {node}",
                short_id(&self.run_id)
            ));
        }
        lines
    }

    /// The latest line the running node `id` printed (the newer of its streams).
    fn latest_output<'a>(&self, state: &State, id: &'a str) -> Option<(&'a str, String)> {
        let run_dir = self.run_dir.as_ref()?;
        let attempt = state.root().tasks.get(id)?.attempts.last()?.number;
        let mut newest: Option<(std::time::SystemTime, PathBuf)> = None;
        for stream in [logs::Stream::Stdout, logs::Stream::Stderr] {
            let path = logs::stream_path(run_dir, id, attempt, stream);
            if let Ok(modified) = std::fs::metadata(&path).and_then(|m| m.modified())
                && newest.as_ref().is_none_or(|(t, _)| modified >= *t)
            {
                newest = Some((modified, path));
            }
        }
        let line = logs::last_line(&newest?.1)?;
        Some((id, line))
    }

    fn needs_recovery(&mut self, run_id: &str, attempts: &[String], nodes: &[&str]) {
        match self.format {
            ProgressOutput::Jsonl => self.jsonl(
                "needs_recovery",
                json!({ "nodes": nodes, "attempts": attempts }),
            ),
            ProgressOutput::Text => {
                self.line(&format!(
                    "run {run_id} needs recovery: {}",
                    attempts.join("; ")
                ));
            }
        }
        self.flush_pending();
    }

    #[allow(clippy::format_push_string, reason = "a few summary lines")]
    fn completed(&mut self, report: &RunReport) {
        let state = &report.state;
        let outcome = report.outcome.map(Outcome::as_str);
        let exports = state
            .root()
            .result
            .as_ref()
            .map(|r| serde_json::to_value(&r.exports).unwrap_or_default());
        match self.format {
            ProgressOutput::Jsonl => {
                self.jsonl(
                    "completed",
                    json!({
                        "lifecycle": state.lifecycle,
                        "outcome": outcome,
                        "exports": exports,
                        "permission_mode": self.mode,
                        "permission_mode_source": self.mode_source,
                        "run_dir": self.run_dir,
                        "warnings": self.warnings,
                    }),
                );
                self.flush_pending();
                // stdout carries the JSON lines; whoever stopped the run reads stderr.
                if report.outcome == Some(Outcome::Cancellation) {
                    eprintln!("resume with: rho workflow resume {}", self.run_id);
                }
            }
            ProgressOutput::Text => {
                self.clear_live();
                let mut text = summary_table(
                    state,
                    &self.order,
                    self.run_dir.as_deref(),
                    terminal::stdout_colour(),
                );
                if let Some(result) = &state.root().result {
                    for (name, e) in &result.exports {
                        match &e.note {
                            None => text.push_str(&format!("export {name} = {}\n", e.value)),
                            Some(note) => text.push_str(&format!(
                                "export {name} = null (unavailable: {})\n",
                                crate::terminal::escape_controls(note)
                            )),
                        }
                    }
                }
                text.push_str(&format!(
                    "run {} {} in {:.1}s: outcome {} (permission mode {})\n",
                    self.run_id,
                    state.lifecycle,
                    self.started.elapsed().as_secs_f64(),
                    outcome.unwrap_or("none"),
                    self.mode
                ));
                if report.outcome == Some(Outcome::Cancellation) {
                    text.push_str(&format!(
                        "resume with: rho workflow resume {}\n",
                        self.run_id
                    ));
                }
                for warning in &self.warnings {
                    text.push_str(&format!("warning: {warning}\n"));
                }
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(text.as_bytes());
            }
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.flush_pending();
    }
}

impl ProgressSink for Progress {
    fn tick(&mut self, state: &State) {
        self.flush_pending();
        self.draw(state, false);
    }

    fn flush(&mut self) {
        self.flush_pending();
    }

    fn created(&mut self, run_id: &str) {
        run_id.clone_into(&mut self.run_id);
        if let Ok(home) = crate::paths::RhoHome::from_env() {
            self.run_dir = Some(home.workflows().join("runs").join(run_id));
        }
        if self.format == ProgressOutput::Text {
            self.line(&format!(
                "run_id: {run_id}\npermission mode: {} ({})",
                self.mode, self.mode_source
            ));
        }
    }

    #[allow(
        clippy::collapsible_match,
        reason = "one arm per journal event reads best"
    )]
    fn event(&mut self, event: &Event, state: &State) {
        let text = self.format == ProgressOutput::Text;
        match &event.kind {
            EventKind::LifecycleChanged { lifecycle } => {
                if text {
                    if !self.live {
                        self.line(&format!("lifecycle: {lifecycle}"));
                    }
                } else {
                    let mode = self.mode;
                    self.jsonl(
                        "state_changed",
                        json!({
                            "revision": state.revision,
                            "lifecycle": lifecycle,
                            "permission_mode": mode,
                        }),
                    );
                }
            }
            EventKind::LaunchIntended { node, attempt, .. } => {
                if text {
                    if !self.live {
                        self.line(&format!("started {node} (attempt {attempt})"));
                    }
                } else {
                    self.jsonl("node_started", json!({ "node": node, "attempt": attempt }));
                }
            }
            EventKind::Launched {
                node,
                attempt,
                process,
            } => {
                if !text {
                    self.jsonl(
                        "node_progress",
                        json!({
                            "node": node,
                            "attempt": attempt,
                            "message": format!("process {} started", process.pid),
                            "pid": process.pid,
                        }),
                    );
                }
            }
            EventKind::AttemptFinished {
                node,
                attempt,
                state: s,
                reason,
                exit,
                ..
            } => {
                if text {
                    if !self.live || *s != NodeState::Success {
                        let why = reason
                            .as_ref()
                            .map(|r| format!(": {r}"))
                            .unwrap_or_default();
                        self.line(&format!("finished {node} (attempt {attempt}): {s}{why}"));
                    }
                    if *s == NodeState::Failure {
                        for line in self.failure_tail(node, *attempt) {
                            self.line(&line);
                        }
                    }
                } else {
                    self.jsonl(
                        "node_finished",
                        json!({
                            "node": node, "attempt": attempt,
                            "outcome": rho_shapes::terminal_outcome(*s),
                            "state": s, "reason": reason, "exit": exit,
                        }),
                    );
                }
            }
            EventKind::NodeDenied {
                node,
                attempt,
                denial,
            } => {
                if text {
                    self.line(&format!(
                        "finished {node} (attempt {attempt}): denial by {}: {}",
                        denial.decided_by, denial.reason
                    ));
                } else {
                    self.jsonl(
                        "node_finished",
                        json!({
                            "node": node, "attempt": attempt, "outcome": "denial",
                            "state": "denial", "decided_by": denial.decided_by,
                            "reason": denial.reason,
                        }),
                    );
                }
            }
            EventKind::HookFailed { failure } if text => {
                let at = failure
                    .node
                    .as_ref()
                    .map(|n| format!(" (node {n})"))
                    .unwrap_or_default();
                self.line(&format!(
                    "warning: {} hook `{}` on {}{at} failed: {} (recorded; the run goes on)",
                    failure.scope, failure.hook_id, failure.event, failure.detail
                ));
            }
            EventKind::NodeStateChanged {
                node,
                state: s,
                reason,
            } if s.is_terminal() => {
                if text {
                    let why = reason
                        .as_ref()
                        .map(|r| format!(": {r}"))
                        .unwrap_or_default();
                    self.line(&format!("finished {node}: {s}{why}"));
                } else {
                    self.jsonl(
                        "node_finished",
                        json!({
                            "node": node, "outcome": rho_shapes::terminal_outcome(*s),
                            "state": s, "reason": reason,
                        }),
                    );
                }
            }
            _ => {}
        }
        self.draw(state, false);
    }
}

/// `3 lines`, `1 line`.
fn lines_text(n: usize) -> String {
    if n == 1 {
        "1 line".to_owned()
    } else {
        format!("{n} lines")
    }
}

/// The first 8 characters of an id (enough as a unique prefix in practice; the full id is
/// printed at the start of the run).
fn short_id(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

/// `sha256:0123456789ab` (12 hex digits) from a full digest.
pub fn short_digest(digest: &str) -> &str {
    let cut = digest.find(':').map_or(12, |i| i + 13);
    digest.get(..cut).unwrap_or(digest)
}

/// How long an attempt took, as `0.4s`, `12s` or `3m05s` (`-` when it did not finish).
fn duration_text(attempt: &crate::workflow::state::Attempt) -> String {
    let Some(end) = attempt.finished_at_ms else {
        return "-".to_owned();
    };
    let ms = end.saturating_sub(attempt.intended_at_ms);
    if ms < 10_000 {
        format!("{}.{}s", ms / 1000, (ms % 1000) / 100)
    } else if ms < 60_000 {
        format!("{}s", ms / 1000)
    } else {
        format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60)
    }
}

/// The end-of-run table: one row per node (mark, state, attempt, duration, reason), then the
/// artifacts as run-relative paths with sizes and short digests (`status --output json` and
/// the `completed` event carry the full ones).
pub fn summary_table(
    state: &State,
    order: &[String],
    run_dir: Option<&std::path::Path>,
    colour: bool,
) -> String {
    use std::fmt::Write as _;
    // Rows follow `order` (needs first); a task it does not name still gets a row, last.
    let by_id = &state.root().tasks;
    let tasks: Vec<(&String, &crate::workflow::state::Task)> = order
        .iter()
        .filter_map(|id| by_id.get_key_value(id))
        .chain(by_id.iter().filter(|(id, _)| !order.contains(id)))
        .collect();
    let tasks = &tasks;
    let width = tasks
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(4)
        .max(4);
    let mut out = String::new();
    for (id, task) in tasks {
        let (mark, tint) = match task.state {
            NodeState::Success => ("✓", Colour::Green),
            NodeState::Failure | NodeState::Denial => ("✗", Colour::Red),
            _ => ("–", Colour::Yellow),
        };
        let last = task.attempts.last();
        let attempt = last.map_or_else(|| "-".to_owned(), |a| format!("#{}", a.number));
        let duration = last.map_or_else(|| "-".to_owned(), duration_text);
        let reason = task
            .reason
            .as_deref()
            .map(|r| format!("  {}", logs::escape(r)))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{} {:<width$}  {}  {:>3}  {:>7}{}",
            paint(mark, tint, colour),
            logs::escape(id),
            paint(&format!("{:<12}", task.state.as_str()), tint, colour),
            attempt,
            duration,
            paint(&reason, Colour::Dim, colour),
        );
    }
    let mut artifacts = String::new();
    for (id, task) in tasks {
        let Some(a) = task.attempts.last() else {
            continue;
        };
        for art in [&a.stdout, &a.stderr, &a.output].into_iter().flatten() {
            let truncated = if art.truncated {
                format!(" · truncated: observed {} bytes", art.observed_bytes)
            } else {
                String::new()
            };
            let _ = writeln!(
                artifacts,
                "  {}: {} · {} bytes · {}{truncated}",
                logs::escape(id),
                art.path,
                art.retained_bytes,
                short_digest(&art.sha256),
            );
        }
    }
    if !artifacts.is_empty() {
        match run_dir {
            Some(dir) => {
                let _ = writeln!(out, "artifacts (in {}):", dir.display());
            }
            None => out.push_str("artifacts:\n"),
        }
        out.push_str(&artifacts);
    }
    out
}
