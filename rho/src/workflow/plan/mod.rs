//! The planning pipeline shared by `validate`, `plan` and `run FILE`: evaluate the sources in
//! the sandboxed worker (answering its module requests), resolve and freeze, encode and
//! digest, and — for `plan` only — store.
//!
//! Invariant: the host never parses Starlark, every error leaves the store untouched (only a
//! successful `store_plan` writes, and it writes atomically), and every output of a plan made
//! by a degraded worker carries the sandbox warning.

pub mod agents;
pub mod checks;
pub mod elf;
pub mod freeze;
pub mod modules;
pub mod resolve;
pub mod worker;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};

use rho_ipc::budget::Budgets;
use rho_ipc::canonical::CanonicalError;
use rho_ipc::data::Data;
use rho_ipc::digest::{encode_program, graph_digest, program_digest_of_bytes};
use rho_ipc::evaluated::EvaluatedWorkflow;
use rho_ipc::message::{
    Diagnostic, HardeningReport, HostMessage, PlanRequest, PlanResponse, SandboxMode, WorkerMessage,
};
use rho_ipc::program::{FrozenProgram, SchedulerSettings};

use self::modules::{ModuleService, ServedSource};
use self::worker::{Conversation, Spawned, WorkerCommand, WorkerError};
use crate::agents::CatalogSources;
use crate::config::{Config, ConfigError};
use crate::paths::RhoHome;
use crate::terminal::escape_controls;
use crate::workflow::identity::{FileFacts, open_dir};
use crate::workflow::store::StoreError;
use crate::workflow::store::plans::{
    self, NewPlan, PlanManifest, SandboxRecord, SourceText, WorkspaceIdentity,
};

/// Why planning failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The workflow (or the request) is invalid: each diagnostic names the culprit.
    #[error("{}", render_diagnostics(diagnostics))]
    Invalid {
        /// The problems, in the order found.
        diagnostics: Vec<Diagnostic>,
    },
    /// The configuration file is invalid.
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    /// `[budgets]` names a budget that does not exist.
    #[error("{}: `budgets.{name}` is not a planning budget; known budgets: {}", file.display(), Budgets::NAMES.join(", "))]
    UnknownBudget {
        /// The configuration file.
        file: PathBuf,
        /// The unknown name.
        name: String,
    },
    /// Starting or talking to the planner worker failed.
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// The workspace directory could not be opened.
    #[error("cannot open the workspace {}", path.display())]
    Workspace {
        /// The workspace.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The program could not be encoded.
    #[error("cannot encode the program")]
    Encode(#[from] CanonicalError),
    /// Storing the plan failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl PlanError {
    /// Whether the error is the workflow's (or the user's) fault rather than the machine's:
    /// invalid sources, inputs, configuration and budget overruns, including wall time.
    pub fn is_invalid(&self) -> bool {
        matches!(
            self,
            PlanError::Invalid { .. }
                | PlanError::Config(_)
                | PlanError::UnknownBudget { .. }
                | PlanError::Worker(
                    WorkerError::WallTime { .. }
                        | WorkerError::Resource { .. }
                        | WorkerError::BadSandboxSetting { .. }
                )
        )
    }

    /// The error as diagnostics (one without a location for errors that are not about the
    /// sources).
    pub fn diagnostics(&self) -> Vec<Diagnostic> {
        match self {
            PlanError::Invalid { diagnostics } => diagnostics.clone(),
            PlanError::Worker(WorkerError::WallTime { overrun }) => {
                vec![Diagnostic::budget(overrun.clone())]
            }
            PlanError::Worker(error @ WorkerError::Resource { overrun, .. }) => {
                let mut diagnostic = Diagnostic::budget(overrun.clone());
                diagnostic.message = error.to_string();
                vec![diagnostic]
            }
            other @ PlanError::Worker(WorkerError::Interrupted { .. }) => {
                vec![Diagnostic::new("interrupted", error_chain(other))]
            }
            other => vec![Diagnostic::new(
                if other.is_invalid() {
                    "invalid"
                } else {
                    "operational"
                },
                error_chain(other),
            )],
        }
    }

    fn invalid(diagnostic: Diagnostic) -> Self {
        PlanError::Invalid {
            diagnostics: vec![diagnostic],
        }
    }
}

/// An error with its sources, on one line each joined by `: `.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let _ = write!(text, ": {cause}");
        source = cause.source();
    }
    text
}

/// `file:line:col: message` (the file is the label without `//`), or just the message. The
/// label and the message may come from the workflow (`fail()`, a module label), so their
/// control characters are shown escaped, newlines included: one diagnostic is one line.
pub fn render_diagnostic(diagnostic: &Diagnostic) -> String {
    let message = escape_controls(&diagnostic.message);
    match &diagnostic.span {
        Some(span) => format!("{}: {message}", escape_controls(&checks::span_text(span))),
        None => message.into_owned(),
    }
}

/// [`render_diagnostic`] followed by the source line at fault and a caret under its column,
/// read from the workspace file the span's label names (just the diagnostic when the file or
/// line cannot be read). Control characters of the source are made visible.
pub fn render_diagnostic_with_source(diagnostic: &Diagnostic, workspace: &Path) -> String {
    let mut text = render_diagnostic(diagnostic);
    let Some(span) = &diagnostic.span else {
        return text;
    };
    let Some(rel) = span.label.strip_prefix("//") else {
        return text;
    };
    let Some(source) = read_source_for_excerpt(&workspace.join(rel)) else {
        return text;
    };
    let source = String::from_utf8_lossy(&source);
    let Some(line) = source.lines().nth(
        usize::try_from(span.line)
            .unwrap_or(usize::MAX)
            .wrapping_sub(1),
    ) else {
        return text;
    };
    let number = span.line.to_string();
    let pad = " ".repeat(number.len());
    let column = usize::try_from(span.column).unwrap_or(1).max(1) - 1;
    // A long line is shown as a window around the column, marked with `…` where cut.
    let chars: Vec<char> = line.chars().collect();
    let start = if chars.len() > EXCERPT_CHARS {
        column
            .saturating_sub(EXCERPT_CHARS / 2)
            .min(chars.len() - EXCERPT_CHARS)
    } else {
        0
    };
    let end = (start + EXCERPT_CHARS).min(chars.len());
    let before: String = chars[start..column.clamp(start, end)].iter().collect();
    let shown: String = chars[start..end].iter().collect();
    let open = if start > 0 { "…" } else { "" };
    let close = if end < chars.len() { "…" } else { "" };
    // The caret sits under the column's character, counted in the text as shown (escaped
    // controls take two columns); tabs stay tabs so it lines up.
    let lead: String = crate::terminal::escape_controls_keep_tabs(&format!("{open}{before}"))
        .chars()
        .map(|c| if c == '\t' { '\t' } else { ' ' })
        .collect();
    let _ = write!(
        text,
        "\n {pad} |\n {number} | {open}{}{close}\n {pad} | {lead}^",
        crate::terminal::escape_controls_keep_tabs(&shown)
    );
    text
}

/// The most characters of a source line shown under a diagnostic.
const EXCERPT_CHARS: usize = 160;
/// The most bytes read from a source file to show an excerpt.
const EXCERPT_READ_BYTES: u64 = 4 * 1024 * 1024;

/// The bytes of the workspace file `path` for a diagnostic's excerpt: only a regular file,
/// opened without following a final symbolic link and without blocking (a FIFO put there
/// since planning must not hang the error report), at most [`EXCERPT_READ_BYTES`].
fn read_source_for_excerpt(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(EXCERPT_READ_BYTES).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

fn render_diagnostics(diagnostics: &[Diagnostic]) -> String {
    let lines: Vec<String> = diagnostics.iter().map(render_diagnostic).collect();
    if lines.is_empty() {
        "planning failed without a diagnostic".to_owned()
    } else {
        lines.join("\nerror: ")
    }
}

/// Settings read from the process environment, once, by the command line.
#[derive(Debug, Clone, Default)]
pub struct ProcessSettings {
    /// `RHO_PLANNER_WORKER`.
    pub worker: Option<OsString>,
    /// `RHO_PLANNER_SANDBOX`.
    pub sandbox: Option<OsString>,
    /// `PATH` of the planning process (executables are resolved on it).
    pub search_path: Option<OsString>,
    /// `RHO_TRUST_PROJECT_AGENTS`.
    pub trust_project_agents: Option<OsString>,
}

impl ProcessSettings {
    /// Reads the variables above from this process.
    pub fn from_env() -> Self {
        Self {
            worker: std::env::var_os("RHO_PLANNER_WORKER"),
            sandbox: std::env::var_os("RHO_PLANNER_SANDBOX"),
            search_path: std::env::var_os("PATH"),
            trust_project_agents: std::env::var_os("RHO_TRUST_PROJECT_AGENTS"),
        }
    }
}

/// The budgets, environment policy and scheduler settings in force, from the configuration.
#[derive(Debug, Clone)]
pub struct PlanSettings {
    /// Budgets (defaults with `[budgets]` applied).
    pub budgets: Budgets,
    /// `[environment] exclude`.
    pub environment_exclude: Vec<String>,
    /// `[environment] allow`.
    pub environment_allow: Vec<String>,
    /// `[scheduler]`.
    pub scheduler: SchedulerSettings,
}

impl PlanSettings {
    /// Applies a configuration to the defaults; an unknown budget name is an error.
    pub fn from_config(config: &Config) -> Result<Self, PlanError> {
        let mut budgets = Budgets::default();
        for (name, value) in &config.budgets {
            if !budgets.set(name, *value) {
                return Err(PlanError::UnknownBudget {
                    file: config.file.clone(),
                    name: name.clone(),
                });
            }
        }
        let defaults = SchedulerSettings::default();
        let scheduler = SchedulerSettings {
            max_parallel_nodes: config
                .scheduler
                .max_parallel_nodes
                .unwrap_or(defaults.max_parallel_nodes),
            max_parallel_agents: config
                .scheduler
                .max_parallel_agents
                .unwrap_or(defaults.max_parallel_agents),
            max_parallel_commands: config
                .scheduler
                .max_parallel_commands
                .unwrap_or(defaults.max_parallel_commands),
        };
        Ok(Self {
            budgets,
            environment_exclude: config.environment.exclude.clone(),
            environment_allow: config.environment.allow.clone(),
            scheduler,
        })
    }
}

/// One planning request.
#[derive(Debug, Clone)]
pub struct PlanInput<'a> {
    /// The data directory (agents, trust; plans are stored by [`store_plan`]).
    pub home: &'a RhoHome,
    /// The canonical workspace.
    pub workspace: &'a Path,
    /// The entry file as the user gave it.
    pub file: &'a Path,
    /// Input values.
    pub inputs: BTreeMap<String, Data>,
    /// The configuration.
    pub config: &'a Config,
    /// Environment-derived settings.
    pub process: &'a ProcessSettings,
    /// Whether project agent definitions may be used (trust store or override).
    pub project_agents_trusted: bool,
}

/// A planned, frozen, digested workflow (not yet stored).
#[derive(Debug, Clone)]
pub struct Planned {
    /// The program.
    pub program: FrozenProgram,
    /// Its canonical encoding.
    pub program_bytes: Vec<u8>,
    /// `program_digest`.
    pub program_digest: String,
    /// `graph_digest`.
    pub graph_digest: String,
    /// Every source served, sorted by label.
    pub sources: Vec<ServedSource>,
    /// The worker's hardening report.
    pub hardening: HardeningReport,
    /// The workspace.
    pub workspace: WorkspaceIdentity,
    /// The entry label.
    pub entry_label: String,
}

impl Planned {
    /// The sandbox record for the manifest.
    pub fn sandbox_record(&self) -> SandboxRecord {
        SandboxRecord {
            mode: self.hardening.mode,
            missing: self
                .hardening
                .missing()
                .into_iter()
                .map(str::to_owned)
                .collect(),
            protections: self.hardening.protections.clone(),
        }
    }

    /// Warnings every output must show (a degraded worker).
    pub fn warnings(&self) -> Vec<String> {
        sandbox_warnings(&self.hardening.mode, &self.hardening.missing())
    }
}

/// The warnings for a stored plan, from its manifest's sandbox record (what `graph`, `run`
/// and `resume` show for a plan made by a degraded worker).
pub fn recorded_sandbox_warnings(record: &SandboxRecord) -> Vec<String> {
    let missing: Vec<&str> = record.missing.iter().map(String::as_str).collect();
    sandbox_warnings(&record.mode, &missing)
}

/// The warning for a plan evaluated without every protection.
pub fn sandbox_warnings(mode: &SandboxMode, missing: &[&str]) -> Vec<String> {
    if missing.is_empty() {
        return Vec::new();
    }
    let how = match mode {
        SandboxMode::BestEffort => "RHO_PLANNER_SANDBOX=best-effort",
        SandboxMode::Required => "a required-mode worker",
    };
    vec![format!(
        "planner sandbox degraded ({how}): protections not applied: {}; the workflow sources were evaluated with reduced isolation",
        missing.join(", ")
    )]
}

/// Runs the whole pipeline up to (not including) storage.
pub fn plan(input: &PlanInput<'_>) -> Result<Planned, PlanError> {
    let started = std::time::Instant::now();
    let settings = PlanSettings::from_config(input.config)?;
    let budgets = &settings.budgets;

    // The worker starts and hardens (a few milliseconds) while the host does its own checks
    // below. Its failure to start is reported only after them, in the order the checks ran
    // before; a worker spawned for a plan that fails those checks is killed when dropped.
    let worker = WorkerCommand::locate(
        input.process.worker.as_deref(),
        input.process.sandbox.as_deref(),
        budgets,
    )
    .and_then(|command| Conversation::spawn(&command).map(|spawned| (command, spawned)));

    // The entry file: its canonical path must lie inside the workspace.
    let entry = entry_file(input.file, input.workspace)?;
    let workspace_fd = open_dir(input.workspace).map_err(|source| PlanError::Workspace {
        path: input.workspace.to_owned(),
        source,
    })?;
    let workspace_facts =
        FileFacts::of(workspace_fd.as_fd()).map_err(|source| PlanError::Workspace {
            path: input.workspace.to_owned(),
            source,
        })?;
    let mut service = ModuleService::new(workspace_fd.as_fd(), budgets);
    let entry_source = service
        .load_entry(&entry.label)
        .map_err(|refusal| PlanError::invalid(refusal.into_diagnostic(None)))?;

    // Input nesting is checked here too, before the worker sees the values, so that the
    // error can name the input (the worker's check only knows the deepest value).
    for (name, value) in &input.inputs {
        if let Err(overrun) = budgets.check("input_depth", value.depth() as u64) {
            let mut diagnostic = Diagnostic::budget(overrun);
            diagnostic.message = format!("input `{name}`: {}", diagnostic.message);
            return Err(PlanError::invalid(diagnostic));
        }
    }

    // Evaluate in the worker.
    let (command, spawned) = worker?;
    // `_worker` is killed already; it is reaped when dropped at the end of this function.
    let (workflow, hardening, _worker) = evaluate(
        &command,
        spawned,
        &mut service,
        &entry.label,
        entry_source.text,
        input.inputs.clone(),
        budgets,
    )?;
    let sources = service.into_sources();

    // Resolve and freeze.
    let mut resolver = resolve::Resolver::new(
        input.workspace,
        workspace_fd.as_fd(),
        input.process.search_path.as_deref(),
    )
    .with_wall_clock(resolve::WallClock {
        started,
        limit_ms: budgets.planner_wall_ms,
    });
    let catalog_sources = CatalogSources::new(
        input.home,
        Some(input.workspace.to_owned()),
        input.project_agents_trusted,
    )
    .with_workflow_dir(entry.dir.clone());
    let mut agent_resolver = agents::CatalogAgents::new(catalog_sources, input.config);
    let program = freeze::freeze(
        &workflow,
        freeze::FreezeContext {
            budgets,
            resolver: &mut resolver,
            agents: &mut agent_resolver,
            environment: freeze::environment_policy(
                &settings.environment_exclude,
                &settings.environment_allow,
            ),
            scheduler: settings.scheduler.clone(),
            sources: sources.iter().map(|s| s.entry.clone()).collect(),
        },
    )
    .map_err(|diagnostics| PlanError::Invalid { diagnostics })?;

    // Encode and digest.
    let program_bytes = encode_program(&program)?;
    if let Err(overrun) = budgets.check("program_bytes", program_bytes.len() as u64) {
        return Err(PlanError::invalid(Diagnostic::budget(overrun)));
    }
    let program_digest = program_digest_of_bytes(&program_bytes);
    let graph_digest = graph_digest(&program)?;
    Ok(Planned {
        program,
        program_bytes,
        program_digest,
        graph_digest,
        sources,
        hardening,
        workspace: WorkspaceIdentity {
            directories: resolver.directory_identities(),
            path: input.workspace.to_string_lossy().into_owned(),
            device: workspace_facts.device,
            inode: workspace_facts.inode,
        },
        entry_label: entry.label,
    })
}

/// Stores a planned workflow; returns its manifest.
pub fn store_plan(home: &RhoHome, planned: &Planned) -> Result<PlanManifest, PlanError> {
    store_or_reuse_plan(home, planned).map(|(manifest, _)| manifest)
}

/// Stores `planned`, unless this workspace already holds a plan with the same program digest
/// (same sources, inputs, frozen executables and settings) made under the same planner
/// sandbox: that plan is returned instead, with `true`. A stored plan is reused only after it
/// loads and verifies (a damaged one is passed over and a fresh copy stored).
pub fn store_or_reuse_plan(
    home: &RhoHome,
    planned: &Planned,
) -> Result<(PlanManifest, bool), PlanError> {
    let sandbox = planned.sandbox_record();
    for existing in plans::list(home)? {
        if existing.program_digest == planned.program_digest
            && existing.graph_digest == planned.graph_digest
            && existing.workspace == planned.workspace
            && existing.sandbox.missing == sandbox.missing
            && existing.sandbox.mode == sandbox.mode
            && plans::load(home, &existing.plan_id)
                .is_ok_and(|p| p.program_digest == planned.program_digest)
        {
            return Ok((existing, true));
        }
    }
    store_new_plan(home, planned).map(|m| (m, false))
}

fn store_new_plan(home: &RhoHome, planned: &Planned) -> Result<PlanManifest, PlanError> {
    let plan = NewPlan {
        program: &planned.program,
        program_bytes: &planned.program_bytes,
        program_digest: &planned.program_digest,
        graph_digest: &planned.graph_digest,
        sources: planned
            .sources
            .iter()
            .map(|s| SourceText {
                entry: &s.entry,
                text: &s.text,
            })
            .collect(),
        workspace: planned.workspace.clone(),
        sandbox: planned.sandbox_record(),
    };
    Ok(plans::store(home, &plan)?)
}

/// The entry file's label and directory.
struct Entry {
    label: String,
    dir: PathBuf,
}

fn entry_file(file: &Path, workspace: &Path) -> Result<Entry, PlanError> {
    let shown = file.display().to_string();
    let bad = |message: String| PlanError::invalid(Diagnostic::new("entry", message));
    let absolute = if file.is_absolute() {
        file.to_owned()
    } else {
        workspace.join(file)
    };
    let canonical = std::fs::canonicalize(&absolute).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => bad(format!("workflow file `{shown}` does not exist")),
        _ => bad(format!("workflow file `{shown}` cannot be read: {e}")),
    })?;
    if let Some(link) = symlink_on_the_way(&absolute, workspace) {
        return Err(bad(format!(
            "workflow file `{shown}`: `{}` is a symbolic link; a workflow entry file (and every directory above it inside the workspace) must be a real file or directory, as in Rho 1.47: name the target instead",
            link.display()
        )));
    }
    let Some(label) = modules::entry_label(&canonical, workspace) else {
        return Err(bad(format!(
            "workflow file `{shown}` is outside the workspace {} (the directory rho runs in); run rho from the workspace that contains it",
            workspace.display()
        )));
    };
    modules::label_path(&label)
        .map_err(|r| bad(format!("workflow file `{shown}`: {}", r.message)))?;
    let dir = canonical
        .parent()
        .map_or_else(|| workspace.to_owned(), Path::to_path_buf);
    Ok(Entry { label, dir })
}

/// The first symbolic link met walking `path` (made absolute, `.` and `..` taken lexically)
/// down from the workspace; a path that only reaches the workspace through a link outside it
/// reports that link. `None` for a path outside the workspace (refused elsewhere) or one
/// without links.
fn symlink_on_the_way(path: &Path, workspace: &Path) -> Option<PathBuf> {
    let mut lexical = PathBuf::new();
    for component in path.components() {
        match component {
            std::path::Component::ParentDir => {
                // `..` after a link leaves the link's target, not its directory: the link
                // itself is the problem.
                if is_symlink(&lexical) {
                    return Some(lexical);
                }
                lexical.pop();
            }
            std::path::Component::CurDir => {}
            other => {
                lexical.push(other);
                if lexical.starts_with(workspace) && lexical != workspace && is_symlink(&lexical) {
                    return Some(lexical);
                }
            }
        }
    }
    if !lexical.starts_with(workspace) {
        // Inside the workspace only through a link somewhere above it.
        let mut prefix = PathBuf::new();
        for component in lexical.components() {
            prefix.push(component);
            if is_symlink(&prefix) {
                return Some(prefix);
            }
        }
    }
    None
}

fn is_symlink(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

/// Runs one plan conversation with the worker. On success the conversation comes back with
/// the worker's group already killed: the caller drops it (reaping the worker) when done.
fn evaluate(
    command: &WorkerCommand,
    spawned: Spawned,
    service: &mut ModuleService<'_>,
    entry_label: &str,
    entry_source: String,
    inputs: BTreeMap<String, Data>,
    budgets: &Budgets,
) -> Result<(EvaluatedWorkflow, HardeningReport, Conversation), PlanError> {
    let (mut conversation, hardening) = spawned.hardened(command)?;
    conversation.send(HostMessage::Plan(PlanRequest {
        entry_label: entry_label.to_owned(),
        entry_source,
        inputs,
        budgets: budgets.clone(),
    }))?;
    let mut refusals: Vec<Diagnostic> = Vec::new();
    let response = loop {
        match conversation.receive()? {
            WorkerMessage::LoadModule(request) => {
                let answer = service.answer(&request);
                if let rho_ipc::message::ModuleResponse::Refused { diagnostic, .. } = &answer {
                    refusals.push(diagnostic.clone());
                }
                conversation.send(HostMessage::Module(answer))?;
            }
            WorkerMessage::Planned(response) => break response,
            other => {
                conversation.shutdown();
                return Err(PlanError::Worker(WorkerError::Protocol {
                    problem: format!(
                        "unexpected {} during planning",
                        worker::message_kind(&other)
                    ),
                }));
            }
        }
    };
    conversation.kill_now_reap_on_drop();
    match response {
        PlanResponse::Diagnostics(diagnostics)
            if diagnostics.is_empty() && !refusals.is_empty() =>
        {
            Err(PlanError::Invalid {
                diagnostics: refusals,
            })
        }
        PlanResponse::Diagnostics(diagnostics) => Err(PlanError::Invalid { diagnostics }),
        // A module refusal is fatal to `load()`: a workflow after one is a worker fault.
        PlanResponse::Workflow(_) if !refusals.is_empty() => Err(PlanError::Invalid {
            diagnostics: refusals,
        }),
        PlanResponse::Workflow(workflow) => Ok((workflow, hardening, conversation)),
    }
}

/// What one probe worker showed `rho doctor`: its hardening report, its `/proc` status and
/// limits read from outside right after the report, and the probe's result.
#[derive(Debug, Clone)]
pub struct ProbeOutcome {
    /// The worker's hardening report.
    pub hardening: HardeningReport,
    /// `/proc/<pid>/status` of the hardened worker (`None` if it could not be read).
    pub proc_status: Option<String>,
    /// `/proc/<pid>/limits` of the hardened worker.
    pub proc_limits: Option<String>,
    /// The probe's result.
    pub result: rho_ipc::message::ProbeResult,
}

/// Runs one sandbox probe in a fresh worker (for `rho doctor`).
pub fn probe(
    command: &WorkerCommand,
    probe: rho_ipc::message::SandboxProbe,
) -> Result<ProbeOutcome, WorkerError> {
    let (mut conversation, hardening) = Conversation::start(command)?;
    // The worker waits for its request: it is hardened and alive now.
    let proc_status = conversation.proc_file("status");
    let proc_limits = conversation.proc_file("limits");
    conversation.send(HostMessage::Probe(probe))?;
    let result = match conversation.receive()? {
        WorkerMessage::ProbeResult(result) => result,
        other => {
            conversation.shutdown();
            return Err(WorkerError::Protocol {
                problem: format!(
                    "expected a probe result, got {}",
                    worker::message_kind(&other)
                ),
            });
        }
    };
    conversation.shutdown();
    Ok(ProbeOutcome {
        hardening,
        proc_status,
        proc_limits,
        result,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One rendering of an error with its sources for the whole crate: the tools and the
    /// runner use this one instead of keeping copies that could drift.
    #[test]
    fn error_chain_is_defined_once() {
        for (file, source) in [
            (
                "tools/workspace/mod.rs",
                include_str!("../../tools/workspace/mod.rs"),
            ),
            (
                "workflow/runner/worker.rs",
                include_str!("../runner/worker.rs"),
            ),
        ] {
            assert!(!source.contains("fn error_chain"), "{file} defines its own");
        }
        let err = std::io::Error::other(crate::workflow::store::StoreError::io(
            "read",
            "/x",
            std::io::Error::from(std::io::ErrorKind::NotFound),
        ));
        assert!(error_chain(&err).contains(": "), "{}", error_chain(&err));
    }

    /// One process identity (the journal's) and one CPU-margin rule (shared with the worker
    /// through `rho_ipc`), so the executor and the runner, or the host and the worker, cannot
    /// drift apart.
    #[test]
    fn process_identity_and_cpu_margin_are_defined_once() {
        fn same(
            p: crate::workflow::exec::ProcessIdentity,
        ) -> crate::workflow::state::ProcessIdentity {
            p
        }
        let p = crate::workflow::state::ProcessIdentity {
            pid: 1,
            pgid: 1,
            start_time: 7,
        };
        assert_eq!(same(p), p);
        assert!(!include_str!("../exec/mod.rs").contains("pub struct ProcessIdentity"));
        assert!(!include_str!("worker.rs").contains("const CPU_MARGIN_SECONDS"));
        for wall_ms in [1, 999, 1_000, 10_000, 86_400_000] {
            assert_eq!(
                worker::cpu_seconds(wall_ms),
                rho_ipc::budget::planner_cpu_seconds(wall_ms)
            );
        }
    }
    use rho_ipc::evaluated::SourceSpan;

    fn at(line: u32, column: u32) -> Diagnostic {
        Diagnostic {
            span: Some(SourceSpan {
                label: "//w.star".to_owned(),
                line,
                column,
            }),
            ..Diagnostic::new("evaluation", "boom")
        }
    }

    #[test]
    fn the_source_line_is_shown_with_a_caret_under_the_column() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("w.star"), "x = 1\n\ty = \u{1b}z + q\n").unwrap();
        let text = render_diagnostic_with_source(&at(2, 7), dir.path());
        assert_eq!(
            text,
            // Column 7 is `z`, after the escape shown as two characters.
            "w.star:2:7: boom\n   |\n 2 | \ty = ^[z + q\n   | \t      ^"
        );
    }

    #[test]
    fn a_long_line_is_windowed_around_the_column() {
        let dir = tempfile::tempdir().unwrap();
        let line = format!("{}X{}", "a".repeat(1000), "b".repeat(1000));
        std::fs::write(dir.path().join("w.star"), &line).unwrap();
        let text = render_diagnostic_with_source(&at(1, 1001), dir.path());
        let shown = text.lines().nth(2).unwrap();
        let caret = text.lines().nth(3).unwrap();
        assert!(
            shown.starts_with(" 1 | …a") && shown.ends_with("b…"),
            "{shown}"
        );
        assert!(shown.chars().count() < EXCERPT_CHARS + 10, "{shown}");
        let column = caret.chars().count() - 1;
        assert_eq!(shown.chars().nth(column), Some('X'), "{text}");
    }

    #[test]
    fn a_fifo_in_place_of_the_source_is_not_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        nix::unistd::mkfifo(
            &dir.path().join("w.star"),
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        assert_eq!(
            render_diagnostic_with_source(&at(1, 1), dir.path()),
            "w.star:1:1: boom"
        );
    }
}
