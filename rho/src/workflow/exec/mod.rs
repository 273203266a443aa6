//! Launches frozen command and shell nodes through verified handles, and supervises them
//! until every process of the node is gone.
//!
//! [`verify`] opens the executable, its interpreter (for a script) and the working directory
//! without following symbolic links, compares each with its frozen identity, and copies the
//! executable bytes into sealed in-memory files while hashing exactly the bytes it copies.
//! A run keeps those copies ([`VerifiedExecutables`], [`verify_with`]): each frozen file is
//! verified at its first launch in the run and every later launch runs the same sealed copy,
//! while the workspace and working directory are still checked at every launch.
//! [`spawn`] starts the command from those handles (`fchdir` on the verified directory,
//! `execveat` on the sealed copy), in its own process group, with stdin on `/dev/null` and
//! stdout/stderr on pipes. [`RunningCommand::wait`] captures bounded artifacts, enforces the
//! timeout and cancellation by stopping the whole group (TERM, grace, KILL), and reaps.
//!
//! Invariant: between the identity check and `execveat`, no path is resolved again, and what
//! runs is a sealed copy of bytes whose digest matched the frozen one; so replacing, swapping
//! or rewriting a file after the check can never select other code. A node's process group is
//! killed before its leader is reaped, and never outlives the process that owns it (a
//! parent-death signal set from one long-lived spawner thread, plus a guardian process that
//! kills every registered group when the owner disappears).
//!
//! Frozen command execution is implemented for Linux only; elsewhere it fails closed.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rho_ipc::program::EnvironmentPolicy;
use serde::{Deserialize, Serialize};

#[cfg(target_os = "linux")]
mod capture;
#[cfg(target_os = "linux")]
mod liveness;
#[cfg(target_os = "linux")]
pub(crate) mod spawner;
#[cfg(target_os = "linux")]
mod verify;

#[cfg(target_os = "linux")]
pub use liveness::{group_alive, process_alive, process_start_time};
#[cfg(target_os = "linux")]
pub use verify::{verify, verify_in, verify_with};

/// The grace period between SIGTERM and SIGKILL when a node's group is stopped.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(2);

/// Why a frozen identity could not be verified; the node fails closed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// This target has no verified-handle launch.
    #[error("frozen command execution is unsupported on this target ({target})")]
    Unsupported {
        /// The operating system name.
        target: &'static str,
    },
    /// The workspace path is not absolute or could not be opened without following links.
    #[error("workspace {path} cannot be opened without following symbolic links")]
    Workspace {
        /// The workspace path.
        path: String,
        /// What went wrong.
        #[source]
        source: crate::workflow::identity::IdentityError,
    },
    /// A frozen file or directory could not be opened without following links.
    #[error("{role} {path} cannot be opened")]
    Open {
        /// `executable`, `interpreter` or `working directory`.
        role: &'static str,
        /// The frozen path.
        path: String,
        /// What went wrong (symbolic link, missing, not a directory ...).
        #[source]
        source: crate::workflow::identity::IdentityError,
    },
    /// The file or directory differs from its frozen identity.
    #[error("{role} {path} changed: {what}")]
    Changed {
        /// `executable`, `interpreter` or `working directory`.
        role: &'static str,
        /// The frozen path.
        path: String,
        /// What changed, with the expected and found values.
        what: String,
    },
    /// The verified file would make the kernel resolve an interpreter by path (a `#!` line
    /// that was not frozen, or an interpreter that is itself a script).
    #[error("{role} {path} starts with `#!` but no interpreter is frozen for it")]
    UnfrozenInterpreter {
        /// `executable` or `interpreter`.
        role: &'static str,
        /// The frozen path.
        path: String,
    },
    /// Reading, copying or sealing the verified bytes failed.
    #[error("cannot copy {role} {path} into a sealed in-memory file")]
    Seal {
        /// `executable` or `interpreter`.
        role: &'static str,
        /// The frozen path.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// Why a verified command could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// This target has no verified-handle launch.
    #[error("frozen command execution is unsupported on this target ({target})")]
    Unsupported {
        /// The operating system name.
        target: &'static str,
    },
    /// An argument or environment entry cannot be passed to `execve`.
    #[error("invalid {field}: {reason}")]
    InvalidArgument {
        /// `argv[N]` or `environment variable NAME`.
        field: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// An output artifact file could not be created.
    #[error("cannot create output artifact {path}")]
    Artifact {
        /// The artifact path.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A pipe, `/dev/null` or process descriptor could not be set up.
    #[error("cannot prepare the launch: {what}")]
    Setup {
        /// What was being prepared.
        what: &'static str,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The spawner thread or the guardian process is gone.
    #[error("the executor's spawner is unavailable: {reason}")]
    SpawnerUnavailable {
        /// Why.
        reason: String,
    },
    /// The child failed between `fork` and `execveat`.
    #[error("launch failed at {stage}: {source}")]
    Launch {
        /// The step that failed (`execveat`, `fchdir` ...).
        stage: &'static str,
        /// The error number the child saw.
        #[source]
        source: std::io::Error,
    },
}

/// The cancellation flag shared between the runner, a waiting command or lock, the agent
/// loop and the tools it calls: one type, so a cancelled node or turn reaches every tool.
///
/// Cancelling is sticky; polling waiters notice within [`CANCEL_POLL`].
pub use crate::tools::context::CancelToken;

/// How often a blocked wait re-checks its [`CancelToken`].
pub const CANCEL_POLL: Duration = Duration::from_millis(20);

/// What to run and how to bound it, once the identities are verified.
#[derive(Debug, Clone)]
pub struct CommandSpec {
    /// `argv[0]` (the display name as written) and the rendered arguments. For a shell node:
    /// `[executable, arguments..., command]`. For a script, `argv[0]` is replaced by the
    /// verified script handle (`/proc/self/fd/N`) after the interpreter and its arguments.
    pub argv: Vec<OsString>,
    /// The complete environment of the child, already filtered by the frozen policy.
    pub env: Vec<(OsString, OsString)>,
    /// Wall-time limit; the group is stopped when it passes.
    pub timeout: Duration,
    /// Bytes retained per stream; every byte is still counted.
    pub max_output_bytes: u64,
    /// Where the retained stdout goes (created; must not exist yet).
    pub stdout_path: PathBuf,
    /// Where the retained stderr goes (created; must not exist yet).
    pub stderr_path: PathBuf,
    /// Stops the whole group when cancelled.
    pub cancel: CancelToken,
    /// Time between SIGTERM and SIGKILL when the group is stopped.
    pub kill_grace: Duration,
    /// Kernel confinement the child applies right before `execveat` (a read-only node, a
    /// node without network); `None` runs it unconfined.
    pub confinement: Option<Arc<crate::confinement::Confinement>>,
    /// What contains the whole tree: a cgroup (the child joins it before `execveat`) or the
    /// subreaper fallback's tracked descendants; the tree is killed through it, escaped
    /// members included, and it is removed once empty. `None` contains the tree by process
    /// group only.
    pub containment: Option<crate::containment::Tree>,
    /// Creates the child on the calling thread instead of the executor's spawner thread,
    /// saving two hand-offs between threads per launch. Only for a caller whose thread
    /// outlives the command: the child's parent-death signal fires when the thread that
    /// created it ends (the workflow runner's worker threads wait for their command and
    /// live until the run ends).
    pub launch_on_this_thread: bool,
    /// The directory `stdout_path` and `stderr_path` name entries of, already open: the
    /// artifacts are then checked and created relative to it, without walking their paths
    /// again (`None`: by path).
    pub artifact_dir: Option<Arc<std::os::fd::OwnedFd>>,
    /// Leaves the removal of an emptied cgroup to the caller (who removes it once it
    /// reported the command's end, off the path to the next launch). The tree is still
    /// killed and checked empty before the leader is reaped; only the `rmdir` moves.
    pub caller_removes_cgroup: bool,
}

impl CommandSpec {
    /// A spec with a fresh cancellation token and [`DEFAULT_KILL_GRACE`].
    pub fn new(
        argv: Vec<OsString>,
        env: Vec<(OsString, OsString)>,
        timeout: Duration,
        max_output_bytes: u64,
        stdout_path: PathBuf,
        stderr_path: PathBuf,
    ) -> Self {
        Self {
            argv,
            env,
            timeout,
            max_output_bytes,
            stdout_path,
            stderr_path,
            cancel: CancelToken::new(),
            kill_grace: DEFAULT_KILL_GRACE,
            confinement: None,
            containment: None,
            launch_on_this_thread: false,
            artifact_dir: None,
            caller_removes_cgroup: false,
        }
    }
}

/// The owner's environment filtered by a frozen policy, in the owner's order.
pub fn filtered_environment(policy: &EnvironmentPolicy) -> Vec<(OsString, OsString)> {
    crate::permissions::credentials::filtered_environment(policy)
}

/// The directories a launch must find where it found them at plan time: `(device,
/// inode)` of the workspace and of the node's working directory; `None` checks the path
/// only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExpectedDirectories {
    /// The workspace directory.
    pub workspace: Option<(u64, u64)>,
    /// The node's working directory.
    pub cwd: Option<(u64, u64)>,
}

/// How a process of an attempt can be recognised later (journaled before the runner relies
/// on it): the pid alone may be reused, pid plus start time may not. One type with the
/// journal's, so nothing converts between two shapes.
pub use crate::workflow::state::ProcessIdentity;

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum CommandExit {
    /// The leader exited with this code.
    Code(i32),
    /// The leader was killed by this signal.
    Signal(i32),
    /// The timeout passed; the group was stopped.
    Timeout,
    /// Cancellation was requested; the group was stopped.
    Cancelled,
    /// Supervision failed; the reason says how.
    Abnormal(String),
}

/// One captured output stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamArtifact {
    /// The artifact file. It is created on the first retained byte, so when
    /// `retained_bytes` is 0 no file exists; [`StreamArtifact::read_retained`] handles both.
    pub path: PathBuf,
    /// Bytes written to the artifact (at most `max_output_bytes`).
    pub retained_bytes: u64,
    /// Bytes the command wrote to the stream.
    pub observed_bytes: u64,
    /// Whether bytes were dropped (the command printed more than the file holds; a
    /// dropped middle is marked in the file between the kept head and tail).
    pub truncated: bool,
    /// Whether the stream was read to its end (false only when a process that escaped the
    /// group kept it open after the group was killed).
    pub reached_end: bool,
    /// `sha256:<hex>` of the retained bytes.
    pub sha256: String,
}

impl StreamArtifact {
    /// Everything observed was retained and the stream was read to its end.
    pub fn is_complete(&self) -> bool {
        !self.truncated && self.reached_end
    }

    /// The retained bytes: the artifact file's content, or nothing when no byte was
    /// retained (no file was created).
    pub fn read_retained(&self) -> std::io::Result<Vec<u8>> {
        if self.retained_bytes == 0 {
            return Ok(Vec::new());
        }
        std::fs::read(&self.path)
    }
}

/// Everything the runner journals about a finished command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandOutcome {
    /// How it ended.
    pub exit: CommandExit,
    /// The leader's process identity.
    pub process: ProcessIdentity,
    /// Captured stdout.
    pub stdout: StreamArtifact,
    /// Captured stderr.
    pub stderr: StreamArtifact,
    /// Wall time from launch to the end of supervision.
    pub duration: Duration,
}

/// The sealed copies of one run's frozen executables, interpreters and scripts: each is
/// verified against its frozen identity at its first launch in the run, and every later
/// launch runs that same sealed copy (see [`verify_with`]). Shared by the run's workers.
#[derive(Debug, Default)]
pub struct VerifiedExecutables {
    #[cfg(target_os = "linux")]
    inner: verify::SealedCopies,
}

impl VerifiedExecutables {
    /// No copy yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many times a frozen file was opened, compared with its identity and copied
    /// (once per distinct file, unless its verification failed or the run's bound on kept
    /// copies was reached).
    pub fn verifications(&self) -> u64 {
        #[cfg(target_os = "linux")]
        return self.inner.verifications();
        #[cfg(not(target_os = "linux"))]
        0
    }
}

/// Verified handles, ready to launch. Dropping it closes them.
#[derive(Debug)]
pub struct VerifiedLaunch {
    #[cfg(target_os = "linux")]
    inner: verify::Verified,
    #[cfg(not(target_os = "linux"))]
    inner: std::convert::Infallible,
}

impl VerifiedLaunch {
    /// `sha256:<hex>` of the executable bytes that will run (the script, for a script).
    pub fn executable_sha256(&self) -> &str {
        #[cfg(target_os = "linux")]
        return self.inner.executable_sha256();
        #[cfg(not(target_os = "linux"))]
        match self.inner {}
    }
}

/// A started command. Call [`RunningCommand::wait`]; dropping it instead kills the group
/// and reaps the leader.
#[derive(Debug)]
pub struct RunningCommand {
    #[cfg(target_os = "linux")]
    inner: capture::Supervised,
    #[cfg(not(target_os = "linux"))]
    inner: std::convert::Infallible,
}

impl RunningCommand {
    /// The leader's identity, to journal before waiting.
    pub fn process(&self) -> ProcessIdentity {
        #[cfg(target_os = "linux")]
        return self.inner.process();
        #[cfg(not(target_os = "linux"))]
        match self.inner {}
    }

    /// Supervises the command to its end (blocking): captures output, enforces the timeout
    /// and cancellation, kills what is left of the group, then reaps the leader.
    pub fn wait(self) -> CommandOutcome {
        #[cfg(target_os = "linux")]
        return self.inner.wait();
        #[cfg(not(target_os = "linux"))]
        match self.inner {}
    }
}

/// A verified command with its pipes and descriptors ready, not started (see [`prepare`]).
/// Dropping it starts nothing and closes them.
#[derive(Debug)]
pub struct PreparedCommand {
    #[cfg(target_os = "linux")]
    inner: capture::Prepared,
    #[cfg(not(target_os = "linux"))]
    inner: std::convert::Infallible,
}

impl PreparedCommand {
    /// Starts the command: [`spawn`] with its preparation already done. Returns once the
    /// child has executed the sealed copy (or failed trying).
    pub fn launch(self) -> Result<RunningCommand, ExecError> {
        #[cfg(target_os = "linux")]
        return self.inner.launch().map(|inner| RunningCommand { inner });
        #[cfg(not(target_os = "linux"))]
        match self.inner {}
    }
}

/// Everything of [`spawn`] but the start: builds the argument and environment strings,
/// creates the pipes, checks the artifact paths and opens the cgroup's `cgroup.procs`, so
/// a caller that must wait before it may start the process (its `launch_intended` record
/// is being made durable) does this work while it waits.
pub fn prepare(launch: VerifiedLaunch, spec: CommandSpec) -> Result<PreparedCommand, ExecError> {
    #[cfg(target_os = "linux")]
    return capture::prepare(launch.inner, spec).map(|inner| PreparedCommand { inner });
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (launch, spec);
        Err(ExecError::Unsupported {
            target: std::env::consts::OS,
        })
    }
}

/// Starts a verified command. Returns once the child has executed the sealed copy (or
/// failed trying, which is reported as [`ExecError::Launch`]).
pub fn spawn(launch: VerifiedLaunch, spec: CommandSpec) -> Result<RunningCommand, ExecError> {
    #[cfg(target_os = "linux")]
    return capture::start(launch.inner, spec).map(|inner| RunningCommand { inner });
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (launch, spec);
        Err(ExecError::Unsupported {
            target: std::env::consts::OS,
        })
    }
}

/// Verification is unavailable off Linux: fail closed.
#[cfg(not(target_os = "linux"))]
pub fn verify(
    _workspace: &std::path::Path,
    _program: &rho_ipc::program::FrozenExecutable,
    _cwd: &rho_ipc::program::FrozenDirectory,
) -> Result<VerifiedLaunch, VerifyError> {
    Err(VerifyError::Unsupported {
        target: std::env::consts::OS,
    })
}

/// Verification is unavailable off Linux: fail closed.
#[cfg(not(target_os = "linux"))]
pub fn verify_with(
    _workspace: &std::path::Path,
    _expected: ExpectedDirectories,
    _program: &rho_ipc::program::FrozenExecutable,
    _cwd: &rho_ipc::program::FrozenDirectory,
    _copies: &VerifiedExecutables,
) -> Result<VerifiedLaunch, VerifyError> {
    Err(VerifyError::Unsupported {
        target: std::env::consts::OS,
    })
}

/// Verification is unavailable off Linux: fail closed.
#[cfg(not(target_os = "linux"))]
pub fn verify_in(
    _workspace: &std::path::Path,
    _expected: ExpectedDirectories,
    _program: &rho_ipc::program::FrozenExecutable,
    _cwd: &rho_ipc::program::FrozenDirectory,
) -> Result<VerifiedLaunch, VerifyError> {
    Err(VerifyError::Unsupported {
        target: std::env::consts::OS,
    })
}

/// Off Linux no process can be checked, so every process is assumed possibly alive.
#[cfg(not(target_os = "linux"))]
pub fn process_alive(_pid: i32, _start_time_ticks: u64) -> bool {
    true
}

/// Off Linux there is no `/proc/<pid>/stat` to read.
#[cfg(not(target_os = "linux"))]
pub fn process_start_time(_pid: i32) -> std::io::Result<(u64, char)> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "process start times are only read on Linux",
    ))
}

/// Off Linux no group can be checked, so every group is assumed possibly alive.
#[cfg(not(target_os = "linux"))]
pub fn group_alive(_pgid: i32) -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancel_token_is_shared_and_sticky() {
        let token = CancelToken::new();
        let clone = token.clone();
        assert!(!clone.is_cancelled());
        token.cancel();
        assert!(clone.is_cancelled());
        assert!(token.is_cancelled());
    }

    #[test]
    fn command_exit_serializes_with_kind_and_value() {
        let json = serde_json::to_string(&CommandExit::Code(3)).unwrap_or_default();
        assert_eq!(json, r#"{"kind":"code","value":3}"#);
        let json = serde_json::to_string(&CommandExit::Timeout).unwrap_or_default();
        assert_eq!(json, r#"{"kind":"timeout"}"#);
        let back: CommandExit = serde_json::from_str(r#"{"kind":"signal","value":9}"#)
            .unwrap_or(CommandExit::Abnormal(String::new()));
        assert_eq!(back, CommandExit::Signal(9));
    }

    #[test]
    fn filtered_environment_drops_excluded_names() {
        let policy = EnvironmentPolicy {
            name: "inherit_except_credentials".to_owned(),
            exclude: vec!["*".to_owned()],
            allow: vec![],
        };
        assert!(filtered_environment(&policy).is_empty());
        let keep_all = EnvironmentPolicy {
            name: "x".to_owned(),
            exclude: vec![],
            allow: vec![],
        };
        assert_eq!(
            filtered_environment(&keep_all).len(),
            std::env::vars_os().count()
        );
    }
}
