//! Runs: creating a run from a confirmed plan, owning it (the loop in `owner`), resuming and
//! recovering it, requesting cancellation, and inspecting it without owning it.
//!
//! Invariant: only the holder of `mutation.lock` writes a run's journal and snapshot; every
//! other entry point here (`inspect`, `request_cancel`) reads, or writes only the
//! cancellation request file, and never infers that an attempt succeeded. An owner's last
//! act, after it released the lock, is publishing the acknowledgements of the cancellation
//! requests it completed, so `acknowledged` always means the run is free to resume.

pub mod agent;
mod ahead;
pub mod authorize;
mod cancel;
mod inspect;
pub mod output;
mod owner;
mod pool;
mod resume;
pub mod signals;
mod start;
pub mod template;
mod worker;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rho_ipc::program::FrozenProgram;
use rho_policy::{PermissionMode, TrustRequirement};

use self::agent::AgentExecutor;
use self::authorize::{CommandAuthorizer, RunObserver};
use self::worker::Shared;
use crate::paths::RhoHome;
use crate::workflow::checkout::{CheckoutError, CheckoutLock};
use crate::workflow::exec;
use crate::workflow::journal::JournalError;
use crate::workflow::state::{Event, EventKind, Outcome, State, StateError};
use crate::workflow::store::StoreError;
use crate::workflow::store::plans::WorkspaceIdentity;
use crate::workflow::store::runs::{self, Confirmation, RunDir};

pub use cancel::{CancelAnswer, request_cancel};
pub use inspect::{
    Inspection, SnapshotCache, attempt_phases, inspect, inspect_cached, inspect_opened,
    live_processes, open as open_inspected, survivors,
};
pub use resume::{ResumeOptions, resume};
pub use start::start;

/// Receives every journal record as the owner writes it (for progress output).
pub trait ProgressSink {
    /// The run exists (called once, before its first record is reported).
    fn created(&mut self, _run_id: &str) {}
    /// One record, with the state after it.
    fn event(&mut self, event: &Event, state: &State);
    /// Called while the owner waits (about every 50 ms), so a live view can keep its clock
    /// and its list of running nodes current between records.
    fn tick(&mut self, _state: &State) {}
    /// Called once the owner started what a step of the run decided and before it waits: a
    /// sink that holds its output writes it now (the owner never waits with output held).
    fn flush(&mut self) {}
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
        directories: std::collections::BTreeMap::new(),
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
    if !found.same_directory(expected) {
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
    Ok(expected.clone())
}

fn shared(
    ctx: &RunContext,
    run: &Arc<RunDir>,
    program: &Arc<FrozenProgram>,
    digest: &str,
    workspace: &WorkspaceIdentity,
) -> Result<Arc<Shared>, RunError> {
    let checkout = CheckoutLock::open(&ctx.home, &ctx.workspace)?;
    let env: Vec<(OsString, OsString)> = exec::filtered_environment(&program.environment);
    Ok(Arc::new(Shared {
        run: Arc::clone(run),
        program: Arc::clone(program),
        program_digest: digest.to_owned(),
        workspace: ctx.workspace.clone(),
        workspace_identity: workspace.clone(),
        env: Arc::new(env),
        authorizer: Arc::clone(&ctx.authorizer),
        observer: Arc::clone(&ctx.observer),
        agents: Arc::clone(&ctx.agents),
        checkout: Some(Arc::new(checkout)),
        executables: exec::VerifiedExecutables::new(),
        confinements: crate::confinement::NodeConfinements::new(std::env::temp_dir()),
    }))
}

fn own_identity() -> (i32, u64) {
    let pid = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
    let start = exec::process_start_time(pid).map_or(0, |(t, _)| t);
    (pid, start)
}

/// The journal record of the consent an owner was started under.
fn consent_event(command: &str, confirmation: &Confirmation) -> EventKind {
    EventKind::ConsentGiven {
        command: command.to_owned(),
        digest: confirmation.digest.clone(),
        method: match confirmation.method {
            runs::ConfirmationMethod::Yes => "--yes",
            runs::ConfirmationMethod::Prompt => "prompt",
            runs::ConfirmationMethod::Host => "host",
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

fn describe_attempt(node: &str, a: &crate::workflow::state::Attempt) -> String {
    match a.process {
        Some(p) => format!(
            "node `{node}` attempt {} (last known pid {}, group {})",
            a.number, p.pid, p.pgid
        ),
        None => format!("node `{node}` attempt {} (no process recorded)", a.number),
    }
}
