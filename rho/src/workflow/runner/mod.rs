//! Runs: creating a run from a confirmed plan, owning it (the loop in `owner`), resuming and
//! recovering it, requesting cancellation, and inspecting it without owning it.
//!
//! Invariant: only the holder of `mutation.lock` writes a run's journal and snapshot; every
//! other entry point here (`inspect`, `request_cancel`) reads, or writes only the
//! cancellation request file, and never infers that an attempt succeeded. An owner's last
//! act, after it released the lock, is publishing the acknowledgements of the cancellation
//! requests it completed, so `acknowledged` always means the run is free to resume.

pub mod agent;
pub mod authorize;
pub mod output;
mod owner;
pub mod signals;
pub mod template;
mod worker;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rho_ipc::program::FrozenProgram;
use rho_policy::{PermissionMode, TrustRequirement};

use self::agent::AgentExecutor;
use self::authorize::{CommandAuthorizer, RunObserver};
use self::owner::Owner;
use self::worker::Shared;
use crate::paths::RhoHome;
use crate::workflow::checkout::{CheckoutError, CheckoutLock};
use crate::workflow::exec;
use crate::workflow::journal::{self, Journal, JournalError};
use crate::workflow::state::{
    AttemptPhase, Event, EventKind, Lifecycle, NodeState, Outcome, State, StateError, apply, replay,
};
use crate::workflow::store::StoreError;
use crate::workflow::store::plans::{StoredPlan, WorkspaceIdentity};
use crate::workflow::store::runs::{
    self, Confirmation, RunDir, RunManifest, RunPolicy, StoredManifest,
};

/// Receives every journal record as the owner writes it (for progress output).
pub trait ProgressSink {
    /// The run exists (called once, before its first record is reported).
    fn created(&mut self, _run_id: &str) {}
    /// One record, with the state after it.
    fn event(&mut self, event: &Event, state: &State);
    /// Called while the owner waits (about every 50 ms), so a live view can keep its clock
    /// and its list of running nodes current between records.
    fn tick(&mut self, _state: &State) {}
}

/// A sink that ignores progress.
#[derive(Debug, Default)]
pub struct NoProgress;

impl ProgressSink for NoProgress {
    fn event(&mut self, _event: &Event, _state: &State) {}
}

/// What an owner needs besides the run itself.
#[derive(Clone)]
pub struct RunContext {
    /// The data directory.
    pub home: RhoHome,
    /// The canonical workspace.
    pub workspace: PathBuf,
    /// Authorizes command nodes (its mode is the one in force: for a resume, already
    /// narrowed to the run's recorded mode).
    pub authorizer: Arc<dyn CommandAuthorizer>,
    /// Receives the observational workflow events.
    pub observer: Arc<dyn RunObserver>,
    /// Project trust the current policy relies on besides the plan's (active project hooks),
    /// recorded with a new run.
    pub policy_trust: TrustRequirement,
    /// Runs agent nodes.
    pub agents: Arc<dyn AgentExecutor>,
    /// Whether SIGINT/SIGTERM (see [`signals::install`]) request cancellation.
    pub watch_signals: bool,
}

impl std::fmt::Debug for RunContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunContext")
            .field("home", &self.home)
            .field("workspace", &self.workspace)
            .field("mode", &self.authorizer.mode())
            .finish_non_exhaustive()
    }
}

/// How an owner left a run.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The run.
    pub run_id: String,
    /// Its state when the owner let go.
    pub state: State,
    /// The outcome, when the root scope closed.
    pub outcome: Option<Outcome>,
    /// The cancellation request that ended it, if any.
    pub cancelled_by: Option<String>,
}

/// Why a run could not be started, driven or resumed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The store failed or holds something unexpected.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The journal failed or is corrupt.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The journal does not replay.
    #[error("the journal is inconsistent: {0}")]
    State(#[from] StateError),
    /// The checkout lock could not be opened.
    #[error(transparent)]
    Checkout(#[from] CheckoutError),
    /// Another process owns the run.
    #[error("run {run_id} is owned by another process (its mutation.lock is held)")]
    Owned {
        /// The run.
        run_id: String,
    },
    /// A format-1 run.
    #[error("{0}")]
    Legacy(String),
    /// The run or plan belongs to another workspace, or the workspace was replaced.
    #[error(
        "the plan was made for workspace {expected}, but this is {found}; run it from its workspace"
    )]
    WorkspaceMismatch {
        /// What the plan records.
        expected: String,
        /// What was found.
        found: String,
    },
    /// Attempts are uncertain and no recovery action was given.
    #[error(
        "run {run_id} needs recovery: {}; inspect them, then `rho workflow resume {run_id} --recover-uncertain`",
        attempts.join(", ")
    )]
    NeedsRecovery {
        /// The run.
        run_id: String,
        /// `node attempt N (pid P)` descriptions.
        attempts: Vec<String>,
    },
    /// Recovery was asked for but a process of an uncertain attempt still exists.
    #[error("cannot recover run {run_id}: {what} is still alive; stop it first")]
    StillAlive {
        /// The run.
        run_id: String,
        /// `node attempt N process P (group G)`.
        what: String,
    },
    /// No node can make progress although the run is not finished.
    #[error("run {run_id} cannot make progress: nodes {} are not terminal and none can start", pending.join(", "))]
    Stalled {
        /// The run.
        run_id: String,
        /// Non-terminal nodes.
        pending: Vec<String>,
    },
    /// The run records no permission mode and trust (it was created before they were
    /// recorded), so nothing says how far a resume may go.
    #[error(
        "run {run_id} records no permission mode (it was created by an earlier build); it \
         cannot be resumed: create a new run from its plan"
    )]
    PolicyNotRecorded {
        /// The run.
        run_id: String,
    },
    /// The authorizer handed to resume is wider than the run's recorded mode (the caller
    /// must narrow it first).
    #[error(
        "run {run_id} was created under permission mode {recorded}; resuming it under the \
         wider mode {requested} is refused"
    )]
    ModeWidened {
        /// The run.
        run_id: String,
        /// The mode recorded at creation.
        recorded: PermissionMode,
        /// The wider mode offered.
        requested: PermissionMode,
    },
    /// A broken internal expectation.
    #[error("internal error: {0}")]
    Internal(String),
}

/// The identity of the canonical workspace directory.
pub fn workspace_identity(workspace: &Path) -> Result<WorkspaceIdentity, StoreError> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(workspace).map_err(|e| StoreError::io("inspect", workspace, e))?;
    Ok(WorkspaceIdentity {
        path: workspace.to_string_lossy().into_owned(),
        device: meta.dev(),
        inode: meta.ino(),
    })
}

fn check_workspace(
    expected: &WorkspaceIdentity,
    workspace: &Path,
) -> Result<WorkspaceIdentity, RunError> {
    let found = workspace_identity(workspace)?;
    if &found != expected {
        return Err(RunError::WorkspaceMismatch {
            expected: format!(
                "{} (device {}, inode {})",
                expected.path, expected.device, expected.inode
            ),
            found: format!(
                "{} (device {}, inode {})",
                found.path, found.device, found.inode
            ),
        });
    }
    Ok(found)
}

fn shared(
    ctx: &RunContext,
    run: &Arc<RunDir>,
    program: &Arc<FrozenProgram>,
    digest: &str,
) -> Result<Arc<Shared>, RunError> {
    let checkout = CheckoutLock::open(&ctx.home, &ctx.workspace)?;
    let env: Vec<(OsString, OsString)> = exec::filtered_environment(&program.environment);
    Ok(Arc::new(Shared {
        run: Arc::clone(run),
        program: Arc::clone(program),
        program_digest: digest.to_owned(),
        workspace: ctx.workspace.clone(),
        env: Arc::new(env),
        authorizer: Arc::clone(&ctx.authorizer),
        observer: Arc::clone(&ctx.observer),
        agents: Arc::clone(&ctx.agents),
        checkout: Some(Arc::new(checkout)),
    }))
}

fn own_identity() -> (i32, u64) {
    let pid = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
    let start = exec::process_start_time(pid).map_or(0, |(t, _)| t);
    (pid, start)
}

/// Creates a run from a verified plan (consent given) and drives it to its end.
pub fn start(
    ctx: &RunContext,
    plan: &StoredPlan,
    confirmation: Confirmation,
    progress: &mut dyn ProgressSink,
) -> Result<RunReport, RunError> {
    let workspace = check_workspace(&plan.manifest.workspace, &ctx.workspace)?;
    if plan.program_digest != confirmation.digest {
        return Err(RunError::Internal(
            "consent names another digest than the plan".to_owned(),
        ));
    }
    let policy = RunPolicy {
        permission_mode: ctx.authorizer.mode(),
        trust: TrustRequirement {
            project_sources: ctx.policy_trust.project_sources,
            project_agents: plan.program.trust.project_agents || ctx.policy_trust.project_agents,
            project_hooks: ctx.policy_trust.project_hooks,
        },
    };
    let consent = consent_event("run", &confirmation);
    let (run, _manifest, _) = runs::create(&ctx.home, plan, workspace, confirmation, policy)?;
    progress.created(run.id());
    let lock = run.try_lock()?.ok_or_else(|| RunError::Owned {
        run_id: run.id().to_owned(),
    })?;
    let (journal, events) = Journal::open(&run.events_path())?;
    let state = replay(&events)?;
    for event in &events {
        progress.event(event, &state);
    }
    let run = Arc::new(run);
    let program = Arc::new(plan.program.clone());
    let shared = shared(ctx, &run, &program, &plan.program_digest)?;
    let mut owner = Owner::new(
        Arc::clone(&run),
        program,
        journal,
        state,
        shared,
        progress,
        ctx.watch_signals,
    );
    let (pid, start_time) = own_identity();
    owner.record(EventKind::OwnerOpened {
        pid,
        start_time,
        permission_mode: ctx.authorizer.mode().as_str().to_owned(),
        command: "run".to_owned(),
    })?;
    owner.record(consent)?;
    owner.record(EventKind::LifecycleChanged {
        lifecycle: Lifecycle::Running,
    })?;
    owner.journal.sync()?;
    let ended = owner.drive()?;
    let state = owner.state.clone();
    drop(owner);
    release_and_acknowledge(&run, lock, &ended.acknowledge);
    Ok(RunReport {
        run_id: run.id().to_owned(),
        state,
        outcome: Some(ended.outcome),
        cancelled_by: ended.cancelled_by,
    })
}

/// The journal record of the consent an owner was started under.
fn consent_event(command: &str, confirmation: &Confirmation) -> EventKind {
    EventKind::ConsentGiven {
        command: command.to_owned(),
        digest: confirmation.digest.clone(),
        method: match confirmation.method {
            runs::ConfirmationMethod::Yes => "--yes",
            runs::ConfirmationMethod::Prompt => "prompt",
        }
        .to_owned(),
        at: confirmation.at.clone(),
    }
}

/// The last steps of an owner, in the spec's order: release `mutation.lock` (the journal
/// and the final state are already written), and only then publish the acknowledgements
/// `cancel` waits for, so whoever reads one can take the run at once.
fn release_and_acknowledge(run: &RunDir, lock: runs::OwnerLock, requests: &[String]) {
    crate::workflow::crashpoint::stall("owner:letting_go");
    drop(lock);
    for request_id in requests {
        if let Err(e) = run.publish_cancel_acknowledgement(request_id) {
            // The run is cancelled and released either way; `cancel` then answers `pending`,
            // which claims nothing.
            tracing::warn!(run = run.id(), request_id, error = %e, "cannot publish the cancellation acknowledgement");
        }
    }
}

/// Options of `resume`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ResumeOptions {
    /// `--recover-uncertain`: give uncertain attempts a new attempt once no process of
    /// theirs is alive.
    pub recover_uncertain: bool,
}

/// Opens a run for ownership: a current-format manifest, the run's own verified program,
/// the lock, and the journal (repairing a torn tail).
fn open_owned(
    ctx: &RunContext,
    run_id: &str,
) -> Result<
    (
        RunDir,
        RunManifest,
        FrozenProgram,
        runs::OwnerLock,
        Journal,
        State,
    ),
    RunError,
> {
    let run = runs::open(&ctx.home, run_id)?;
    let manifest = match run.manifest()? {
        StoredManifest::Current(m) => m,
        StoredManifest::Legacy(_) => return Err(RunError::Legacy(runs::legacy_refusal(run_id))),
    };
    check_workspace(&manifest.workspace, &ctx.workspace)?;
    let program = run.load_program(&manifest)?;
    let lock = run.try_lock()?.ok_or_else(|| RunError::Owned {
        run_id: run_id.to_owned(),
    })?;
    let (journal, events) = Journal::open(&run.events_path())?;
    check_created(&run, &manifest, &program, &events)?;
    let state = replay(&events)?;
    Ok((run, manifest, program, lock, journal, state))
}

/// The journal's `run_created` must name the manifest's digest and the program's nodes: a
/// program swapped together with its manifest is still caught by the journal.
fn check_created(
    run: &RunDir,
    manifest: &RunManifest,
    program: &FrozenProgram,
    events: &[crate::workflow::state::Event],
) -> Result<(), RunError> {
    let corrupt = |problem: String| {
        RunError::Store(StoreError::Corrupt {
            path: run.events_path(),
            problem,
        })
    };
    let Some(EventKind::RunCreated {
        program_digest,
        nodes,
        ..
    }) = events.first().map(|e| &e.kind)
    else {
        return Err(corrupt("its first record is not run_created".to_owned()));
    };
    if program_digest != &manifest.program_digest {
        return Err(corrupt(format!(
            "the run was created for program {program_digest}, but the manifest names {}",
            manifest.program_digest
        )));
    }
    if nodes.iter().ne(program.root.nodes.iter().map(|n| &n.id)) {
        return Err(corrupt(
            "the run was created with other nodes than program.cbor has".to_owned(),
        ));
    }
    Ok(())
}

fn describe_attempt(node: &str, a: &crate::workflow::state::Attempt) -> String {
    match a.process {
        Some(p) => format!(
            "node `{node}` attempt {} (last known pid {}, group {})",
            a.number, p.pid, p.pgid
        ),
        None => format!("node `{node}` attempt {} (no process recorded)", a.number),
    }
}

/// Resumes (or recovers) a run under `confirmation` (consent to the run's digest, journaled
/// with the new owner): reopens its root scope, gives cancelled nodes (and, with
/// `recover_uncertain`, uncertain ones) a new attempt, never reruns a successful node.
pub fn resume(
    ctx: &RunContext,
    run_id: &str,
    options: ResumeOptions,
    confirmation: &Confirmation,
    progress: &mut dyn ProgressSink,
) -> Result<RunReport, RunError> {
    let (run, manifest, program, lock, journal, state) = open_owned(ctx, run_id)?;
    if confirmation.digest != manifest.program_digest {
        return Err(RunError::Internal(
            "consent names another digest than the run".to_owned(),
        ));
    }
    // Current policy only narrows: the mode in force may not exceed the one recorded when
    // the run was created, and the classifier's counters carry on where they were.
    let recorded = manifest.policy.ok_or_else(|| RunError::PolicyNotRecorded {
        run_id: run_id.to_owned(),
    })?;
    let mode = ctx.authorizer.mode();
    if mode > recorded.permission_mode {
        return Err(RunError::ModeWidened {
            run_id: run_id.to_owned(),
            recorded: recorded.permission_mode,
            requested: mode,
        });
    }
    if let Some(counters) = state.escalation {
        ctx.authorizer.restore_counters(counters);
    }
    let run = Arc::new(run);
    let program = Arc::new(program);
    let shared = shared(ctx, &run, &program, &manifest.program_digest)?;
    progress.created(run_id);
    let mut owner = Owner::new(
        Arc::clone(&run),
        Arc::clone(&program),
        journal,
        state,
        shared,
        progress,
        ctx.watch_signals,
    );

    // An owner that never closed died: whatever it had in flight is uncertain.
    if let Some(dead) = owner.state.owner.clone() {
        let open: Vec<(String, u32)> = owner
            .state
            .open_attempts()
            .iter()
            .map(|(n, a)| ((*n).to_owned(), a.number))
            .collect();
        for (node, attempt) in &open {
            owner.record(EventKind::AttemptUncertain {
                node: node.clone(),
                attempt: *attempt,
                reason: format!(
                    "its owner (pid {}) exited uncleanly while the attempt was in flight",
                    dead.pid
                ),
            })?;
        }
        owner.record(EventKind::OwnerClosed {
            reason: format!("owner pid {} died", dead.pid),
        })?;
        if !open.is_empty() {
            owner.record(EventKind::LifecycleChanged {
                lifecycle: Lifecycle::NeedsRecovery,
            })?;
        }
    }
    let (pid, start_time) = own_identity();
    owner.record(EventKind::OwnerOpened {
        pid,
        start_time,
        permission_mode: ctx.authorizer.mode().as_str().to_owned(),
        command: "resume".to_owned(),
    })?;
    owner.record(consent_event("resume", confirmation))?;

    let uncertain: Vec<(String, crate::workflow::state::Attempt)> = owner
        .state
        .uncertain_attempts()
        .into_iter()
        .map(|(n, a)| (n.to_owned(), a.clone()))
        .collect();
    if !uncertain.is_empty() {
        let described: Vec<String> = uncertain
            .iter()
            .map(|(n, a)| describe_attempt(n, a))
            .collect();
        if !options.recover_uncertain {
            owner.record(EventKind::OwnerClosed {
                reason: "needs_recovery".to_owned(),
            })?;
            owner.checkpoint()?;
            return Err(RunError::NeedsRecovery {
                run_id: run_id.to_owned(),
                attempts: described,
            });
        }
        for (node, attempt) in &uncertain {
            if let Some(p) = attempt.process
                && (exec::process_alive(p.pid, p.start_time) || exec::group_alive(p.pgid))
            {
                owner.record(EventKind::OwnerClosed {
                    reason: "needs_recovery".to_owned(),
                })?;
                owner.checkpoint()?;
                return Err(RunError::StillAlive {
                    run_id: run_id.to_owned(),
                    what: format!(
                        "node `{node}` attempt {} process {} (group {})",
                        attempt.number, p.pid, p.pgid
                    ),
                });
            }
        }
    }

    // Which tasks change: cancelled ones, recovered ones, and anything decided from them.
    let mut reset: Vec<String> = owner
        .state
        .root()
        .tasks
        .iter()
        .filter(|(_, t)| t.state == NodeState::Cancellation)
        .map(|(id, _)| id.clone())
        .collect();
    let recovered: Vec<String> = uncertain.iter().map(|(n, _)| n.clone()).collect();
    let mut changed: std::collections::BTreeSet<String> =
        reset.iter().chain(&recovered).cloned().collect();
    loop {
        let mut more = false;
        for node in &program.root.nodes {
            let s = owner.state.root().node_state(&node.id);
            if matches!(s, Some(NodeState::Blocked | NodeState::Skipped))
                && !changed.contains(&node.id)
                && node.needs.iter().any(|n| changed.contains(n))
            {
                changed.insert(node.id.clone());
                reset.push(node.id.clone());
                more = true;
            }
        }
        if !more {
            break;
        }
    }
    reset.sort();

    let nothing_to_do =
        reset.is_empty() && recovered.is_empty() && owner.state.lifecycle == Lifecycle::Completed;
    if nothing_to_do {
        owner.record(EventKind::OwnerClosed {
            reason: "already completed".to_owned(),
        })?;
        owner.checkpoint()?;
        drop(lock);
        let outcome = owner.state.root().result.as_ref().map(|r| r.outcome);
        return Ok(RunReport {
            run_id: run_id.to_owned(),
            state: owner.state.clone(),
            outcome,
            cancelled_by: None,
        });
    }
    if owner.state.root().result.is_some() {
        owner.record(EventKind::ScopeReopened {
            scope: rho_ipc::program::ROOT_SCOPE_ID.to_owned(),
        })?;
    }
    if !recovered.is_empty() {
        owner.record(EventKind::RecoveryStarted { nodes: recovered })?;
    }
    for node in reset {
        owner.record(EventKind::NodeStateChanged {
            node,
            state: NodeState::Pending,
            reason: Some("resume: decided again".to_owned()),
        })?;
    }
    // A cancellation request already handled by an earlier owner is not a new one.
    // (An owner that completed it and died before removing the file left it behind.)
    if let (Some(done), Ok(Some(file))) = (owner.state.cancel.clone(), run.read_cancel_request())
        && done.completed
        && done.request_id == file.request_id
    {
        run.remove_cancel_request()?;
    }
    owner.record(EventKind::LifecycleChanged {
        lifecycle: Lifecycle::Running,
    })?;
    owner.journal.sync()?;
    let ended = owner.drive()?;
    let state = owner.state.clone();
    drop(owner);
    release_and_acknowledge(&run, lock, &ended.acknowledge);
    Ok(RunReport {
        run_id: run_id.to_owned(),
        state,
        outcome: Some(ended.outcome),
        cancelled_by: ended.cancelled_by,
    })
}

/// A run as `status` sees it, without owning it.
#[derive(Debug, Clone)]
pub struct Inspection {
    /// The manifest.
    pub manifest: StoredManifest,
    /// The state: the snapshot plus the journal records after it (`None` for legacy runs).
    pub state: Option<State>,
    /// A legacy run's `state.json`, verbatim.
    pub legacy_state: Option<serde_json::Value>,
    /// Whether the recorded owner is gone although the run never closed.
    pub owner_dead: bool,
    /// Attempts that are (or, with a dead owner, would become) uncertain.
    pub uncertain: Vec<String>,
    /// Bytes of a torn journal tail seen (the owner may be writing it).
    pub torn_bytes: u64,
}

impl Inspection {
    /// The lifecycle to report: `needs_recovery` when the owner died with work in flight.
    pub fn effective_lifecycle(&self) -> Option<Lifecycle> {
        let state = self.state.as_ref()?;
        if self.owner_dead && !self.uncertain.is_empty() {
            Some(Lifecycle::NeedsRecovery)
        } else {
            Some(state.lifecycle)
        }
    }
}

/// Reads a run for `status`: never takes `mutation.lock`, never writes.
pub fn inspect(home: &RhoHome, run_id: &str) -> Result<(RunDir, Inspection), RunError> {
    let run = runs::open(home, run_id)?;
    let manifest = run.manifest()?;
    if let StoredManifest::Legacy(_) = manifest {
        let legacy_state = run
            .dir()
            .read_private(runs::STATE_FILE, 512 * 1024 * 1024)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        return Ok((
            run,
            Inspection {
                manifest,
                state: None,
                legacy_state,
                owner_dead: false,
                uncertain: vec![],
                torn_bytes: 0,
            },
        ));
    }
    let mut state = run.read_state()?.unwrap_or_else(State::empty);
    let tail = journal::read_after(&run.events_path(), state.last_event_sequence)?;
    for event in &tail.events {
        apply(&mut state, event)?;
    }
    let owner_dead = state
        .owner
        .as_ref()
        .is_some_and(|o| !exec::process_alive(o.pid, o.start_time));
    let mut uncertain: Vec<String> = state
        .uncertain_attempts()
        .iter()
        .map(|(n, a)| describe_attempt(n, a))
        .collect();
    if owner_dead {
        uncertain.extend(
            state
                .open_attempts()
                .iter()
                .map(|(n, a)| describe_attempt(n, a)),
        );
    }
    let torn_bytes = tail.torn_bytes;
    Ok((
        run,
        Inspection {
            manifest,
            state: Some(state),
            legacy_state: None,
            owner_dead,
            uncertain,
            torn_bytes,
        },
    ))
}

/// `cancel`'s answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelAnswer {
    /// The request id (absent when the run had already completed).
    pub request_id: Option<String>,
    /// `acknowledged`, `pending` or `already_completed`.
    pub cancellation_state: &'static str,
    /// The lifecycle after waiting.
    pub lifecycle: Lifecycle,
}

/// Writes a durable cancellation request (reusing a pending one) and waits up to `wait` for
/// the owner to acknowledge it.
pub fn request_cancel(
    home: &RhoHome,
    run_id: &str,
    wait: std::time::Duration,
) -> Result<CancelAnswer, RunError> {
    let (run, inspection) = inspect(home, run_id)?;
    if let StoredManifest::Legacy(_) = inspection.manifest {
        return Err(RunError::Legacy(runs::legacy_refusal(run_id)));
    }
    let state = inspection.state.unwrap_or_else(State::empty);
    if state.lifecycle == Lifecycle::Completed {
        return Ok(CancelAnswer {
            request_id: None,
            cancellation_state: "already_completed",
            lifecycle: state.lifecycle,
        });
    }
    #[allow(
        clippy::single_match_else,
        reason = "reuse or create reads side by side"
    )]
    let request_id = match run.read_cancel_request()? {
        Some(existing) => existing.request_id,
        None => {
            let request = runs::CancelRequest {
                request_id: crate::workflow::store::ids::new_id(),
                requested_at: crate::workflow::store::timestamp_now(),
            };
            run.write_cancel_request(&request)?;
            request.request_id
        }
    };
    let started = std::time::Instant::now();
    let deadline = started + wait;
    loop {
        // The owner publishes this only after it released the run: once it is seen, the
        // run can be resumed at once.
        if run.read_cancel_acknowledgement(&request_id)?.is_some() {
            let (_, now) = inspect(home, run_id)?;
            return Ok(CancelAnswer {
                request_id: Some(request_id),
                cancellation_state: "acknowledged",
                lifecycle: now.effective_lifecycle().unwrap_or(Lifecycle::Completed),
            });
        }
        let (_, now) = inspect(home, run_id)?;
        let lifecycle = now.effective_lifecycle().unwrap_or(Lifecycle::Planned);
        let state = now.state.unwrap_or_else(State::empty);
        // The owner completed this request and is releasing the run: its acknowledgement
        // follows, although the journal already shows no owner.
        let releasing = state
            .cancel
            .as_ref()
            .is_some_and(|c| c.request_id == request_id && c.completed);
        // Nobody to wait for once the recorded owner is gone (or none was ever recorded past a
        // short grace for an owner that is just starting): the next owner applies the request.
        let ownerless = !releasing
            && (now.owner_dead || (state.owner.is_none() && started.elapsed() >= NO_OWNER_GRACE));
        if ownerless || std::time::Instant::now() >= deadline {
            return Ok(CancelAnswer {
                request_id: Some(request_id),
                cancellation_state: "pending",
                lifecycle,
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
}

/// How long `cancel` waits for an owner to appear when the run records none.
const NO_OWNER_GRACE: std::time::Duration = std::time::Duration::from_millis(300);

/// Attempt records of a state, flattened for display: `(node, attempt, phase)`.
pub fn attempt_phases(state: &State) -> Vec<(String, u32, AttemptPhase)> {
    state
        .root()
        .tasks
        .iter()
        .flat_map(|(id, t)| {
            t.attempts
                .iter()
                .map(move |a| (id.clone(), a.number, a.phase))
        })
        .collect()
}
