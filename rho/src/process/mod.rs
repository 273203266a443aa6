//! The background process manager: shell commands started, polled and stopped by handle,
//! for as long as the owning `rho` instance lives. It knows nothing of models; the `process`
//! tool and `rho mcp` are its front ends.
//!
//! Each command runs as `/bin/sh -c COMMAND` in the workspace root with stdin on `/dev/null`,
//! the user's rights, an environment without rho's credentials, in its own process group
//! ([`tree`]). One supervisor thread per command reads both pipes into a bounded chunk store
//! ([`output`]), enforces the timeout, carries out stop requests (SIGTERM to the group, a
//! grace period, SIGKILL), and finishes the record only when the leader has exited, the pipes
//! are closed and no process of the group is left: a shell that puts a child in the
//! background and exits does not leave it running unseen. Pollers block on a condition
//! variable that the supervisor signals on every chunk and every state change.
//!
//! Invariant: at most `max_live` trees run and at most `max_records` records exist; a record's
//! memory is bounded by its output caps whatever the child writes; when the manager shuts
//! down (explicitly, or when its last handle is dropped) every tree it started is stopped
//! and reaped before shutdown returns.

pub mod output;
mod supervisor;
pub mod tree;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::File;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use output::{Chunk, Stream};
use output::{CursorAhead, OutputBuffer};

/// The manager's limits; [`ProcessLimits::default`] gives the documented values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessLimits {
    /// Processes running at once (`max_live`, 16).
    pub max_live: usize,
    /// Records kept, running or finished (`max_records`, 64).
    pub max_records: usize,
    /// Retained output bytes per process (`max_output_bytes`, 1 MiB).
    pub max_output_bytes: usize,
    /// Retained output chunks per process (`max_output_chunks`, 8,192).
    pub max_output_chunks: usize,
    /// How long a finished record is kept (`completed_retention`, 30 minutes).
    pub completed_retention: Duration,
    /// The longest `wait_seconds` a poll accepts (`max_wait_seconds`, 30).
    pub max_wait_seconds: u64,
    /// Between SIGTERM and SIGKILL when a tree is stopped (`stop_grace`, 2 s).
    pub stop_grace: Duration,
    /// How long `start` waits for a command that finishes at once, so its result comes
    /// back with the start (100 ms).
    pub start_wait: Duration,
    /// The longest command accepted, in bytes (`max_command_bytes`, 128 KiB).
    pub max_command_bytes: usize,
}

impl Default for ProcessLimits {
    fn default() -> Self {
        ProcessLimits {
            max_live: 16,
            max_records: 64,
            max_output_bytes: 1024 * 1024,
            max_output_chunks: 8192,
            completed_retention: Duration::from_mins(30),
            max_wait_seconds: 30,
            stop_grace: Duration::from_secs(2),
            start_wait: Duration::from_millis(100),
            max_command_bytes: 128 * 1024,
        }
    }
}

/// What a manager needs: where commands run, what they inherit, and its limits.
#[derive(Debug, Clone)]
pub struct ProcessConfig {
    /// The working directory of every command (the workspace root).
    pub workspace_root: PathBuf,
    /// The complete environment of every command (see [`tree::child_environment`]).
    pub environment: Vec<(OsString, OsString)>,
    /// The limits.
    pub limits: ProcessLimits,
    /// Kernel confinement every command applies before it runs (a read-only agent's
    /// processes); its scratch directory is the commands' `TMPDIR`.
    pub confinement: Option<Arc<crate::confinement::ScratchConfinement>>,
}

impl ProcessConfig {
    /// Default limits, and this process's environment without credentials (the built-in
    /// exclusions plus `extra_excludes`).
    pub fn new(workspace_root: impl Into<PathBuf>, extra_excludes: &[String]) -> Self {
        ProcessConfig {
            workspace_root: workspace_root.into(),
            environment: tree::child_environment(std::env::vars_os(), extra_excludes),
            limits: ProcessLimits::default(),
            confinement: None,
        }
    }

    /// The same configuration with every command confined by `confinement` (and `TMPDIR`
    /// set to its scratch directory).
    #[must_use]
    pub fn confined(mut self, confinement: Arc<crate::confinement::ScratchConfinement>) -> Self {
        self.environment = confinement.environment(self.environment);
        self.confinement = Some(confinement);
        self
    }
}

/// Why a request to the manager was refused. Nothing was started or changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProcessError {
    /// No record has this ID: it never existed here, or it was finished and dropped.
    #[error(
        "unknown process_id `{process_id}`: no such process in this rho instance (finished \
         records are kept for {retention_minutes} minutes, at most {max_records} records)"
    )]
    UnknownProcess {
        /// The ID asked for.
        process_id: String,
        /// The completed-record retention, in minutes.
        retention_minutes: u64,
        /// The record cap.
        max_records: usize,
    },
    /// A manager limit is reached.
    #[error("limit `{limit}` reached: {limit_value} {what}; {advice}")]
    LimitReached {
        /// The limit's name (`max_live`, `max_records`).
        limit: &'static str,
        /// Its value.
        limit_value: usize,
        /// What is counted.
        what: &'static str,
        /// What to do about it.
        advice: &'static str,
    },
    /// An argument is out of range or malformed.
    #[error("invalid `{field}`: {reason}")]
    InvalidArgument {
        /// The argument's name.
        field: &'static str,
        /// What is wrong, with the limit where one applies.
        reason: String,
    },
    /// The limits themselves are inconsistent.
    #[error("invalid process manager limit `{limit}`: {reason}")]
    InvalidLimits {
        /// The limit's name.
        limit: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The manager has shut down and starts nothing more.
    #[error("the process manager has shut down; no new process can be started")]
    ShutDown,
}

/// Where a process is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessState {
    /// Being launched.
    Starting,
    /// The tree is running.
    Running,
    /// The shell exited on its own (`exit_code` is set unless a signal ended it).
    Exited,
    /// Stopped on request or at shutdown.
    Terminated,
    /// Stopped because `timeout_seconds` passed.
    TimedOut,
    /// Could not be launched (`terminal_detail` says why).
    FailedToStart,
}

impl ProcessState {
    /// The wire name (`running`, `timed_out` ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ProcessState::Starting => "starting",
            ProcessState::Running => "running",
            ProcessState::Exited => "exited",
            ProcessState::Terminated => "terminated",
            ProcessState::TimedOut => "timed_out",
            ProcessState::FailedToStart => "failed_to_start",
        }
    }

    /// Whether the process is finished for good.
    pub fn is_terminal(self) -> bool {
        !matches!(self, ProcessState::Starting | ProcessState::Running)
    }
}

/// A view of one process and a window of its retained output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The handle for `poll` and `stop`.
    pub process_id: String,
    /// The command as started.
    pub command: String,
    /// The state.
    pub state: ProcessState,
    /// Wall time from start to now, or to the end.
    pub runtime_seconds: f64,
    /// The oldest retained cursor.
    pub first_cursor: u64,
    /// Where the next poll should start.
    pub next_cursor: u64,
    /// One past the newest chunk.
    pub available_cursor: u64,
    /// The chunks of this window, oldest first.
    pub chunks: Vec<Chunk>,
    /// The shell's exit code, once it exited normally.
    pub exit_code: Option<i32>,
    /// How a failed or forced end came about.
    pub terminal_detail: Option<String>,
    /// Whether any output was dropped under the byte or chunk caps.
    pub truncated: bool,
    /// Whether retained output exists past this window.
    pub output_pending: bool,
    /// The requested cursor, when it pointed at dropped output (the window then starts at
    /// the oldest chunk retained after it).
    pub stale_cursor: Option<u64>,
    /// Bytes of output dropped under the caps so far.
    pub dropped_bytes: u64,
}

/// What ended a tree; decides the final state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopCause {
    /// A `stop` call.
    Request,
    /// The manager shut down.
    Shutdown,
}

/// The mutable part of a record.
#[derive(Debug)]
pub(crate) struct RecordState {
    pub(crate) state: ProcessState,
    pub(crate) exit_code: Option<i32>,
    pub(crate) terminal_detail: Option<String>,
    pub(crate) output: OutputBuffer,
    pub(crate) ended: Option<Instant>,
    /// A stop was asked for; the supervisor acts on it when woken.
    pub(crate) stop: Option<StopCause>,
    /// Write end of the supervisor's wake-up pipe (`None` once the supervisor is gone).
    pub(crate) wake: Option<File>,
}

/// One process: its identity, its state, and the condition pollers wait on.
#[derive(Debug)]
pub(crate) struct Record {
    pub(crate) id: String,
    pub(crate) command: String,
    pub(crate) started: Instant,
    pub(crate) inner: Mutex<RecordState>,
    pub(crate) changed: Condvar,
}

impl Record {
    pub(crate) fn lock(&self) -> MutexGuard<'_, RecordState> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Builds a snapshot from `state` with an output window.
    fn snapshot(
        &self,
        state: &RecordState,
        cursor: Option<u64>,
        max_bytes: usize,
    ) -> Result<Snapshot, CursorAhead> {
        let window = state.output.read(cursor, max_bytes)?;
        let end = state.ended.unwrap_or_else(Instant::now);
        Ok(Snapshot {
            process_id: self.id.clone(),
            command: self.command.clone(),
            state: state.state,
            runtime_seconds: end.saturating_duration_since(self.started).as_secs_f64(),
            first_cursor: state.output.first_cursor(),
            output_pending: window.next_cursor < state.output.available_cursor(),
            next_cursor: window.next_cursor,
            available_cursor: state.output.available_cursor(),
            chunks: window.chunks,
            exit_code: state.exit_code,
            terminal_detail: state.terminal_detail.clone(),
            truncated: state.output.truncated(),
            stale_cursor: window.stale_cursor,
            dropped_bytes: state.output.dropped_bytes(),
        })
    }

    /// Asks the supervisor to stop the tree (once; later requests change nothing).
    fn request_stop(&self, cause: StopCause) {
        let mut state = self.lock();
        if state.state.is_terminal() || state.stop.is_some() {
            return;
        }
        state.stop = Some(cause);
        if let Some(wake) = state.wake.as_mut() {
            // A full pipe already holds a wake-up; nothing is lost by a failed write.
            let _ = wake.write(&[1]);
        }
    }

    /// Waits until `done` holds for the state, or `timeout` passes; returns the guard.
    fn wait_until(
        &self,
        timeout: Duration,
        mut done: impl FnMut(&RecordState) -> bool,
    ) -> MutexGuard<'_, RecordState> {
        let deadline = Instant::now().checked_add(timeout);
        let mut state = self.lock();
        while !done(&state) {
            let now = Instant::now();
            let left = match deadline {
                Some(deadline) if deadline > now => deadline - now,
                Some(_) => break,
                None => Duration::from_hours(1),
            };
            state = self
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        state
    }
}

#[derive(Debug, Default)]
struct Registry {
    /// By creation order (the sequence number), so the oldest finished record is first.
    records: BTreeMap<u64, Arc<Record>>,
    shut_down: bool,
}

#[derive(Debug)]
struct ManagerInner {
    config: ProcessConfig,
    registry: Mutex<Registry>,
    sequence: AtomicU64,
    /// Random per manager, so an ID from another instance is never mistaken for one of ours.
    instance: String,
}

/// Starts, polls and stops background shell commands. Cheap to clone (a shared handle);
/// dropping the last handle shuts the manager down.
#[derive(Debug, Clone)]
pub struct ProcessManager {
    inner: Arc<ManagerInner>,
}

fn check_limits(limits: &ProcessLimits) -> Result<(), ProcessError> {
    let invalid = |limit, reason: &str| {
        Err(ProcessError::InvalidLimits {
            limit,
            reason: reason.to_owned(),
        })
    };
    if limits.max_live == 0 {
        return invalid("max_live", "must be at least 1");
    }
    if limits.max_records < limits.max_live {
        return invalid("max_records", "must be at least max_live");
    }
    if limits.max_output_bytes == 0 {
        return invalid("max_output_bytes", "must be at least 1");
    }
    if limits.max_output_chunks == 0 {
        return invalid("max_output_chunks", "must be at least 1");
    }
    Ok(())
}

impl ProcessManager {
    /// A manager with no processes.
    pub fn new(config: ProcessConfig) -> Result<Self, ProcessError> {
        check_limits(&config.limits)?;
        let instance = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
        Ok(ProcessManager {
            inner: Arc::new(ManagerInner {
                config,
                registry: Mutex::new(Registry::default()),
                sequence: AtomicU64::new(0),
                instance,
            }),
        })
    }

    /// The limits in force.
    pub fn limits(&self) -> &ProcessLimits {
        &self.inner.config.limits
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        self.inner
            .registry
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Drops finished records older than the retention.
    fn prune(&self, registry: &mut Registry) {
        let retention = self.inner.config.limits.completed_retention;
        let now = Instant::now();
        registry.records.retain(|_, record| {
            record
                .lock()
                .ended
                .is_none_or(|ended| now.saturating_duration_since(ended) < retention)
        });
    }

    fn find(&self, process_id: &str) -> Result<Arc<Record>, ProcessError> {
        let mut registry = self.registry();
        self.prune(&mut registry);
        registry
            .records
            .values()
            .find(|r| r.id == process_id)
            .cloned()
            .ok_or_else(|| ProcessError::UnknownProcess {
                process_id: process_id.to_owned(),
                retention_minutes: self.inner.config.limits.completed_retention.as_secs() / 60,
                max_records: self.inner.config.limits.max_records,
            })
    }

    /// Starts `command` through `/bin/sh -c` in the workspace root. With `timeout_seconds`
    /// (at least 1) the tree is stopped and the record ends `timed_out` when it runs longer.
    /// Returns after the launch, or once the command finished if it does so within the
    /// start wait, with the output so far.
    pub fn start(
        &self,
        command: &str,
        timeout_seconds: Option<u64>,
    ) -> Result<Snapshot, ProcessError> {
        let limits = &self.inner.config.limits;
        if command.trim().is_empty() {
            return Err(ProcessError::InvalidArgument {
                field: "command",
                reason: "must not be empty".to_owned(),
            });
        }
        if command.len() > limits.max_command_bytes {
            return Err(ProcessError::InvalidArgument {
                field: "command",
                reason: format!(
                    "{} bytes exceed the limit max_command_bytes of {} bytes",
                    command.len(),
                    limits.max_command_bytes
                ),
            });
        }
        if command.contains('\0') {
            return Err(ProcessError::InvalidArgument {
                field: "command",
                reason: "contains a NUL character".to_owned(),
            });
        }
        let timeout = match timeout_seconds {
            None => None,
            Some(0) => {
                return Err(ProcessError::InvalidArgument {
                    field: "timeout_seconds",
                    reason: "must be at least 1".to_owned(),
                });
            }
            Some(secs) => {
                let timeout = Duration::from_secs(secs);
                if Instant::now().checked_add(timeout).is_none() {
                    return Err(ProcessError::InvalidArgument {
                        field: "timeout_seconds",
                        reason: format!("{secs} is too large"),
                    });
                }
                Some(timeout)
            }
        };
        let record = self.reserve(command)?;
        supervisor::launch(
            &record,
            &self.inner.config.workspace_root,
            &self.inner.config.environment,
            self.inner
                .config
                .confinement
                .as_ref()
                .map(|c| Arc::clone(c.confinement())),
            timeout,
            limits,
        );
        let state = record.wait_until(limits.start_wait, |s| s.state.is_terminal());
        Ok(record
            .snapshot(&state, None, limits.max_output_bytes)
            .unwrap_or_else(|_| unreachable_window(&record, &state)))
    }

    /// Creates the record in state `starting`, within the live and record caps.
    fn reserve(&self, command: &str) -> Result<Arc<Record>, ProcessError> {
        let limits = &self.inner.config.limits;
        let mut registry = self.registry();
        if registry.shut_down {
            return Err(ProcessError::ShutDown);
        }
        self.prune(&mut registry);
        let live = registry
            .records
            .values()
            .filter(|r| !r.lock().state.is_terminal())
            .count();
        if live >= limits.max_live {
            return Err(ProcessError::LimitReached {
                limit: "max_live",
                limit_value: limits.max_live,
                what: "processes are running",
                advice: "stop one (or wait for one to finish) before starting another",
            });
        }
        while registry.records.len() >= limits.max_records {
            let oldest_finished = registry
                .records
                .iter()
                .find(|(_, r)| r.lock().state.is_terminal())
                .map(|(seq, _)| *seq);
            match oldest_finished {
                Some(seq) => {
                    registry.records.remove(&seq);
                }
                None => {
                    return Err(ProcessError::LimitReached {
                        limit: "max_records",
                        limit_value: limits.max_records,
                        what: "process records exist and none is finished",
                        advice: "stop a process before starting another",
                    });
                }
            }
        }
        let seq = self.inner.sequence.fetch_add(1, Ordering::Relaxed) + 1;
        let record = Arc::new(Record {
            id: format!("proc-{}-{seq}", self.inner.instance),
            command: command.to_owned(),
            started: Instant::now(),
            inner: Mutex::new(RecordState {
                state: ProcessState::Starting,
                exit_code: None,
                terminal_detail: None,
                output: OutputBuffer::new(limits.max_output_bytes, limits.max_output_chunks),
                ended: None,
                stop: None,
                wake: None,
            }),
            changed: Condvar::new(),
        });
        registry.records.insert(seq, Arc::clone(&record));
        Ok(record)
    }

    /// Returns retained output from `cursor` (the oldest retained chunk when `None`), at most
    /// `max_bytes` of text but at least one chunk when there is one. With a `wait` (up to
    /// `max_wait_seconds`, 30) and nothing to return yet, blocks until output arrives, the
    /// process ends, or the wait passes — woken by the supervisor, not by a timer.
    pub fn poll(
        &self,
        process_id: &str,
        cursor: Option<u64>,
        wait: Duration,
        max_bytes: usize,
    ) -> Result<Snapshot, ProcessError> {
        let limits = &self.inner.config.limits;
        if wait > Duration::from_secs(limits.max_wait_seconds) {
            return Err(ProcessError::InvalidArgument {
                field: "wait_seconds",
                reason: format!(
                    "{} s is over the limit max_wait_seconds of {}",
                    wait.as_secs_f64(),
                    limits.max_wait_seconds
                ),
            });
        }
        let record = self.find(process_id)?;
        let cursor_error = |ahead: CursorAhead| ProcessError::InvalidArgument {
            field: "cursor",
            reason: format!(
                "{} is past the newest output (available_cursor is {})",
                ahead.requested, ahead.available
            ),
        };
        let state = record.lock();
        // Checked before waiting: a cursor from the future would never be satisfied.
        let from = cursor.unwrap_or_else(|| state.output.first_cursor());
        if from > state.output.available_cursor() {
            return Err(cursor_error(CursorAhead {
                requested: from,
                available: state.output.available_cursor(),
            }));
        }
        drop(state);
        let state = record.wait_until(wait, |s| {
            s.state.is_terminal() || s.output.has_output_from(from)
        });
        record
            .snapshot(&state, cursor, max_bytes)
            .map_err(cursor_error)
    }

    /// Stops the tree (SIGTERM to the process group, the grace period, then SIGKILL) and
    /// returns once it is gone, with the final state and no output (the snapshot's
    /// `next_cursor` is the oldest retained chunk, so a poll from there reads it all). A
    /// process that already ended is returned as it is.
    pub fn stop(&self, process_id: &str) -> Result<Snapshot, ProcessError> {
        let record = self.find(process_id)?;
        record.request_stop(StopCause::Request);
        let state = record.wait_until(Duration::MAX, |s| s.state.is_terminal());
        let mut snapshot = record
            .snapshot(&state, None, 0)
            .unwrap_or_else(|_| unreachable_window(&record, &state));
        snapshot.chunks.clear();
        snapshot.next_cursor = snapshot.first_cursor;
        snapshot.output_pending = snapshot.first_cursor < snapshot.available_cursor;
        Ok(snapshot)
    }

    /// How many processes are running.
    pub fn live_count(&self) -> usize {
        self.registry()
            .records
            .values()
            .filter(|r| !r.lock().state.is_terminal())
            .count()
    }

    /// Stops every tree and waits until all are reaped; later starts fail with
    /// [`ProcessError::ShutDown`]. Records stay readable.
    pub fn shutdown(&self) {
        self.inner.shutdown();
    }
}

impl ManagerInner {
    fn shutdown(&self) {
        let records: Vec<Arc<Record>> = {
            let mut registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
            registry.shut_down = true;
            registry.records.values().cloned().collect()
        };
        // Every tree gets its SIGTERM first, so the grace periods run side by side.
        for record in &records {
            record.request_stop(StopCause::Shutdown);
        }
        for record in &records {
            drop(record.wait_until(Duration::MAX, |s| s.state.is_terminal()));
        }
    }
}

impl Drop for ManagerInner {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A window from no cursor always exists; this keeps the type total without a panic.
fn unreachable_window(record: &Record, state: &RecordState) -> Snapshot {
    Snapshot {
        process_id: record.id.clone(),
        command: record.command.clone(),
        state: state.state,
        runtime_seconds: 0.0,
        first_cursor: state.output.first_cursor(),
        next_cursor: state.output.first_cursor(),
        available_cursor: state.output.available_cursor(),
        chunks: Vec::new(),
        exit_code: state.exit_code,
        terminal_detail: state.terminal_detail.clone(),
        truncated: state.output.truncated(),
        output_pending: false,
        stale_cursor: None,
        dropped_bytes: state.output.dropped_bytes(),
    }
}
