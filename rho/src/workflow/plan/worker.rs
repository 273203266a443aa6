//! Spawning and talking to `rho-planner-worker`: a cleared environment, piped stdio, its own
//! process group, a host-side wall-time watchdog that kills the whole group, and the framed
//! conversation (hardening report, one request, module requests, one final answer).
//!
//! Invariant: whatever the worker does (crash, signal, garbled frame, silence), the host
//! returns an error and never a plan, and no worker process outlives the conversation: the
//! group is killed before the leader is reaped, so its id cannot be reused in between.

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::io::{self, BufReader, BufWriter, Read as _};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use rho_ipc::budget::{BudgetOverrun, Budgets};
use rho_ipc::frame::{FrameError, write_message};
use rho_ipc::message::{Envelope, HardeningReport, HostMessage, SandboxMode, WorkerMessage};

/// The worker executable's file name.
pub const WORKER_NAME: &str = "rho-planner-worker";

/// Bytes of the worker's stderr kept for error messages.
const STDERR_TAIL_BYTES: usize = 16 * 1024;

/// Lines of the worker's stderr quoted in an error.
const STDERR_TAIL_LINES: usize = 12;

/// Why a worker conversation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// No worker executable where one was expected.
    #[error(
        "planner worker not found at {}: install {WORKER_NAME} next to rho or set \
         RHO_PLANNER_WORKER",
        path.display()
    )]
    NotFound {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// `RHO_PLANNER_SANDBOX` has a value other than `required` or `best-effort`.
    #[error("RHO_PLANNER_SANDBOX must be `required` or `best-effort`, not `{value}`")]
    BadSandboxSetting {
        /// The value found.
        value: String,
    },
    /// The worker could not be started.
    #[error("cannot start the planner worker {}", path.display())]
    Spawn {
        /// The executable.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The worker could not apply a required protection and refused to evaluate.
    #[error(
        "planner sandbox unavailable: {reason} (missing: {}); set RHO_PLANNER_SANDBOX=best-effort \
         to plan with a degraded worker",
        if missing.is_empty() { "none reported".to_owned() } else { missing.join(", ") }
    )]
    SandboxRefused {
        /// The worker's reason.
        reason: String,
        /// The protections it could not apply.
        missing: Vec<String>,
    },
    /// The wall-time budget ran out; the worker's process group was killed.
    #[error("{overrun}")]
    WallTime {
        /// The overrun (`planner_wall_ms`, limit, measured milliseconds).
        overrun: BudgetOverrun,
    },
    /// The worker ran out of a resource the kernel limits for it (its address space, derived
    /// from `planner_address_space_bytes`, or its CPU time, derived from `planner_wall_ms`):
    /// a planning budget overrun caused by the workflow, not a machine fault.
    #[error("{overrun} ({note})")]
    Resource {
        /// The budget the kernel limit was derived from, its limit and what was requested.
        overrun: BudgetOverrun,
        /// Which kernel limit was hit and how the worker ended.
        note: String,
    },
    /// The worker died, closed its output early or sent something that is not a valid frame.
    #[error("planner worker failed: {what}{}", stderr_section(stderr_tail))]
    Failed {
        /// What happened (signal, exit status, frame error).
        what: String,
        /// The last lines the worker wrote on stderr.
        stderr_tail: Vec<String>,
    },
    /// The worker's hardening report does not describe the worker that was asked for: a
    /// protection is not listed (or listed twice, or unknown), or its sandbox mode is not the
    /// requested one. Nothing is sent to such a worker.
    #[error("planner worker's hardening report refused: {problem}")]
    BadReport {
        /// What is wrong with the report.
        problem: String,
    },
    /// A host thread that guards the conversation (the wall-time watchdog or the stderr
    /// drain) could not be started; the worker was killed rather than run unguarded.
    #[error("cannot start the planner's {thread} thread")]
    Thread {
        /// `watchdog` or `stderr drain`.
        thread: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// SIGINT or SIGTERM reached rho while the worker evaluated (see
    /// `runner::signals::install`); the worker's process group was killed at once.
    #[error("planning stopped by {}: the planner worker was killed", signal_name(*signal))]
    Interrupted {
        /// The signal number.
        signal: i32,
    },
    /// The worker broke the conversation's rules.
    #[error("planner worker protocol error: {problem}")]
    Protocol {
        /// What it did.
        problem: String,
    },
}

fn stderr_section(lines: &[String]) -> String {
    if lines.is_empty() {
        String::new()
    } else {
        format!("\nworker stderr (last lines):\n  {}", lines.join("\n  "))
    }
}

/// How to start the worker.
#[derive(Debug, Clone)]
pub struct WorkerCommand {
    /// The executable.
    pub program: PathBuf,
    /// Required (default) or best-effort protections.
    pub mode: SandboxMode,
    /// Wall-time budget, measured by the host from spawn.
    pub wall_ms: u64,
    /// `RLIMIT_AS` for the worker.
    pub address_space_bytes: u64,
    /// A layered protection to leave out (`landlock` or `seccomp`), for `rho doctor`'s
    /// probes that prove the other one on its own. Such a worker answers probes only and
    /// reports the protection missing; planning never sets this.
    pub omit: Option<&'static str>,
}

/// The worker's `RLIMIT_CPU` soft limit in seconds for a wall-time budget (the rule shared
/// with the worker, [`rho_ipc::budget::planner_cpu_seconds`]).
pub fn cpu_seconds(wall_ms: u64) -> u64 {
    rho_ipc::budget::planner_cpu_seconds(wall_ms)
}

impl WorkerCommand {
    /// Finds the worker (`worker_override`, from `RHO_PLANNER_WORKER`, else next to the current
    /// executable) and reads the sandbox mode (`sandbox_setting`, from `RHO_PLANNER_SANDBOX`).
    pub fn locate(
        worker_override: Option<&OsStr>,
        sandbox_setting: Option<&OsStr>,
        budgets: &Budgets,
    ) -> Result<Self, WorkerError> {
        let program = if let Some(path) = worker_override.filter(|v| !v.is_empty()) {
            PathBuf::from(path)
        } else {
            let exe = std::env::current_exe().map_err(|_| WorkerError::NotFound {
                path: PathBuf::from(WORKER_NAME),
            })?;
            exe.parent()
                .unwrap_or_else(|| Path::new("/"))
                .join(WORKER_NAME)
        };
        if !program.is_file() {
            return Err(WorkerError::NotFound { path: program });
        }
        let mode = match sandbox_setting.map(|v| v.to_string_lossy().into_owned()) {
            None => SandboxMode::Required,
            Some(v) if v.is_empty() || v == "required" => SandboxMode::Required,
            Some(v) if v == "best-effort" => SandboxMode::BestEffort,
            Some(value) => return Err(WorkerError::BadSandboxSetting { value }),
        };
        Ok(Self {
            program,
            mode,
            wall_ms: budgets.planner_wall_ms,
            address_space_bytes: budgets.planner_address_space_bytes,
            omit: None,
        })
    }

    /// The worker's arguments.
    fn args(&self) -> Vec<String> {
        let mut args = Vec::with_capacity(4);
        if self.mode == SandboxMode::BestEffort {
            args.push("--sandbox=best-effort".to_owned());
        }
        args.push(format!(
            "--address-space-bytes={}",
            self.address_space_bytes.max(1)
        ));
        args.push(format!("--cpu-seconds={}", cpu_seconds(self.wall_ms)));
        args.push(format!("--parent-pid={}", std::process::id()));
        if let Some(omit) = self.omit {
            args.push(format!("--omit={omit}"));
        }
        args
    }
}

/// How often the watchdog looks for a SIGINT/SIGTERM recorded by `runner::signals`.
const SIGNAL_POLL: Duration = Duration::from_millis(20);

/// Kills the worker's process group when the wall-time budget runs out, or at once when
/// SIGINT or SIGTERM reaches rho (once `runner::signals::install` records them; without the
/// handlers the signal ends rho and the parent-death signal ends the worker).
struct Watchdog {
    stop: Option<mpsc::Sender<()>>,
    fired: Arc<AtomicBool>,
    interrupted: Arc<AtomicI32>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Starts the watchdog thread; `Err` when it cannot be started (the caller must not run
    /// the worker without it: nothing else bounds its wall time).
    fn start(pgid: Pid, budget: Duration) -> io::Result<Self> {
        let (stop, stopped) = mpsc::channel::<()>();
        let fired = Arc::new(AtomicBool::new(false));
        let interrupted = Arc::new(AtomicI32::new(0));
        let (flag, signalled) = (Arc::clone(&fired), Arc::clone(&interrupted));
        let deadline = Instant::now() + budget;
        let thread = std::thread::Builder::new()
            .name("planner-watchdog".to_owned())
            .spawn(move || {
                loop {
                    if let Some(signal) = crate::workflow::runner::signals::received() {
                        signalled.store(signal, Ordering::SeqCst);
                        let _ = killpg(pgid, Signal::SIGKILL);
                        return;
                    }
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        flag.store(true, Ordering::SeqCst);
                        let _ = killpg(pgid, Signal::SIGKILL);
                        return;
                    }
                    match stopped.recv_timeout(left.min(SIGNAL_POLL)) {
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        // Disarmed: the conversation is over.
                        Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                }
            })?;
        Ok(Self {
            stop: Some(stop),
            fired,
            interrupted,
            thread: Some(thread),
        })
    }

    fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    /// The signal that made the watchdog kill the worker, if one did.
    fn interrupted(&self) -> Option<i32> {
        match self.interrupted.load(Ordering::SeqCst) {
            0 => None,
            signal => Some(signal),
        }
    }

    fn disarm(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A running conversation with one worker.
pub struct Conversation {
    child: Child,
    pgid: Pid,
    stdin: Option<BufWriter<ChildStdin>>,
    stdout: BufReader<ChildStdout>,
    stderr: Option<JoinHandle<VecDeque<u8>>>,
    watchdog: Watchdog,
    started: Instant,
    wall_ms: u64,
    address_space_bytes: u64,
    reaped: Option<ExitStatus>,
}

impl std::fmt::Debug for Conversation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conversation")
            .field("pid", &self.child.id())
            .finish_non_exhaustive()
    }
}

impl Conversation {
    /// Spawns the worker and reads its hardening report. A refused report is an error
    /// naming the missing protections; in best-effort mode the report is returned with its
    /// gaps for the caller to record and warn about.
    pub fn start(command: &WorkerCommand) -> Result<(Self, HardeningReport), WorkerError> {
        Self::spawn(command)?.hardened(command)
    }

    /// Spawns the worker (with its watchdog and stderr drain) without waiting for it: the
    /// caller may do its own work while the worker starts and hardens, then reads the report
    /// with [`Spawned::hardened`]. Nothing can be sent before that.
    pub fn spawn(command: &WorkerCommand) -> Result<Spawned, WorkerError> {
        let started = Instant::now();
        let mut child = Command::new(&command.program)
            .args(command.args())
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|source| WorkerError::Spawn {
                path: command.program.clone(),
                source,
            })?;
        let pgid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
        let abandon = |child: &mut Child| {
            let _ = killpg(pgid, Signal::SIGKILL);
            let _ = child.wait();
        };
        let mut watchdog = match Watchdog::start(pgid, Duration::from_millis(command.wall_ms)) {
            Ok(watchdog) => watchdog,
            Err(source) => {
                abandon(&mut child);
                return Err(WorkerError::Thread {
                    thread: "watchdog",
                    source,
                });
            }
        };
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            abandon(&mut child);
            watchdog.disarm();
            return Err(WorkerError::Protocol {
                problem: "worker pipes unavailable".to_owned(),
            });
        };
        // Without the drain, a worker that fills the stderr pipe blocks and its failure
        // could not be explained: refuse to go on rather than lose it.
        let stderr = match std::thread::Builder::new()
            .name("planner-stderr".to_owned())
            .spawn(move || drain_tail(stderr))
        {
            Ok(handle) => Some(handle),
            Err(source) => {
                abandon(&mut child);
                watchdog.disarm();
                return Err(WorkerError::Thread {
                    thread: "stderr drain",
                    source,
                });
            }
        };
        Ok(Spawned(Self {
            child,
            pgid,
            stdin: Some(BufWriter::new(stdin)),
            stdout: BufReader::new(stdout),
            stderr,
            watchdog,
            started,
            wall_ms: command.wall_ms,
            address_space_bytes: command.address_space_bytes,
            reaped: None,
        }))
    }

    /// The worker's process id (for reading its `/proc` entry while it lives).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `/proc/<pid>/<name>` of the worker as text, read from outside (the worker itself
    /// cannot: Landlock and seccomp refuse it every open). `None` once it is gone.
    pub fn proc_file(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(format!("/proc/{}/{name}", self.child.id())).ok()
    }

    /// Milliseconds since the worker was spawned.
    pub fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Sends one message.
    pub fn send(&mut self, message: HostMessage) -> Result<(), WorkerError> {
        let result = match self.stdin.as_mut() {
            Some(stdin) => write_message(stdin, &Envelope::new(message)),
            None => Err(FrameError::Io(io::Error::from(io::ErrorKind::BrokenPipe))),
        };
        match result {
            Ok(()) => Ok(()),
            // A closed pipe means the worker is gone: report why it went.
            Err(FrameError::Io(_)) => Err(self.fail_after_eof("the worker closed its input")),
            Err(e) => Err(self.fail_protocol(format!("cannot encode a message: {e}"))),
        }
    }

    /// Receives one message.
    pub fn receive(&mut self) -> Result<WorkerMessage, WorkerError> {
        match rho_ipc::message::read_envelope::<_, WorkerMessage>(&mut self.stdout) {
            Ok(message) => Ok(message),
            Err(FrameError::VersionMismatch { expected, got }) => Err(self.fail_protocol(format!(
                "protocol version mismatch: rho speaks {expected}, the worker {got}"
            ))),
            Err(FrameError::Closed) => {
                Err(self.fail_after_eof("the worker closed its output without an answer"))
            }
            Err(e @ (FrameError::TruncatedBody { .. } | FrameError::TruncatedHeader { .. })) => {
                Err(self.fail_after_eof(&format!("the worker's output ended mid-frame ({e})")))
            }
            Err(FrameError::Io(e)) => {
                Err(self.fail_after_eof(&format!("reading the worker's output failed: {e}")))
            }
            Err(e) => {
                let what = match &e {
                    FrameError::Payload(inner) => format!("garbled frame from the worker: {inner}"),
                    other => format!("garbled frame from the worker: {other}"),
                };
                self.kill_and_reap();
                Err(self.failure(what))
            }
        }
    }

    /// Ends the conversation after the final answer: the group is killed (the worker has
    /// nothing left to say) and the leader reaped.
    pub fn shutdown(&mut self) {
        drop(self.stdin.take());
        self.kill_and_reap();
    }

    /// Like [`shutdown`](Self::shutdown), but leaves reaping the leader to the drop of the
    /// conversation: the whole group is killed now, so nothing of the worker runs any more,
    /// and the host's work after planning overlaps the kernel tearing the worker down
    /// (about a third of a millisecond a plan, measured). Until the drop the leader is a
    /// zombie, which keeps its process and group ids from being reused.
    pub fn kill_now_reap_on_drop(&mut self) {
        drop(self.stdin.take());
        if self.reaped.is_none() {
            let _ = killpg(self.pgid, Signal::SIGKILL);
        }
    }

    fn kill_and_reap(&mut self) {
        if self.reaped.is_none() {
            let _ = killpg(self.pgid, Signal::SIGKILL);
            self.reaped = self.child.wait().ok();
        }
        self.watchdog.disarm();
    }

    /// The worker stopped talking: wait for it to exit (the watchdog bounds the wait) and
    /// say how it ended.
    fn fail_after_eof(&mut self, what: &str) -> WorkerError {
        drop(self.stdin.take());
        if self.reaped.is_none() {
            self.reaped = self.child.wait().ok();
            let _ = killpg(self.pgid, Signal::SIGKILL);
        }
        self.watchdog.disarm();
        if let Some(stopped) = self.stopped_by_watchdog() {
            return stopped;
        }
        let Some(reaped) = self.reaped else {
            return self.failure(format!("{what}; its exit status is unknown"));
        };
        let tail = self.stderr_tail();
        if let Some(resource) =
            resource_exhaustion(reaped, &tail, self.address_space_bytes, self.wall_ms)
        {
            return resource;
        }
        WorkerError::Failed {
            what: format!("{what}; {}", describe_status(reaped)),
            stderr_tail: tail,
        }
    }

    fn fail_protocol(&mut self, problem: String) -> WorkerError {
        self.kill_and_reap();
        if let Some(stopped) = self.stopped_by_watchdog() {
            return stopped;
        }
        WorkerError::Protocol { problem }
    }

    /// The error for a worker the watchdog killed (a signal to rho, or the wall time).
    fn stopped_by_watchdog(&self) -> Option<WorkerError> {
        if let Some(signal) = self.watchdog.interrupted() {
            return Some(WorkerError::Interrupted { signal });
        }
        self.watchdog.fired().then(|| self.wall_time())
    }

    fn wall_time(&self) -> WorkerError {
        WorkerError::WallTime {
            overrun: BudgetOverrun {
                name: "planner_wall_ms".to_owned(),
                limit: self.wall_ms,
                measured: self.elapsed_ms().max(self.wall_ms.saturating_add(1)),
            },
        }
    }

    fn failure(&mut self, what: String) -> WorkerError {
        if let Some(stopped) = self.stopped_by_watchdog() {
            return stopped;
        }
        WorkerError::Failed {
            what,
            stderr_tail: self.stderr_tail(),
        }
    }

    fn stderr_tail(&mut self) -> Vec<String> {
        let Some(handle) = self.stderr.take() else {
            return Vec::new();
        };
        let Ok(tail) = handle.join() else {
            return Vec::new();
        };
        let bytes: Vec<u8> = tail.into_iter().collect();
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let start = lines.len().saturating_sub(STDERR_TAIL_LINES);
        lines[start..].iter().map(|l| (*l).to_owned()).collect()
    }
}

/// A worker spawned but not heard from yet: its hardening report is still to come. Dropping
/// it kills the worker's group and reaps it, like dropping a [`Conversation`].
pub struct Spawned(Conversation);

impl std::fmt::Debug for Spawned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Spawned").field(&self.0).finish()
    }
}

impl Spawned {
    /// Reads and checks the hardening report of a worker spawned with `command`: a refused
    /// or incomplete report is an error (the worker is killed and reaped); in best-effort
    /// mode the report is returned with its gaps for the caller to record and warn about.
    pub fn hardened(
        self,
        command: &WorkerCommand,
    ) -> Result<(Conversation, HardeningReport), WorkerError> {
        let mut conversation = self.0;
        let report = match conversation.receive()? {
            WorkerMessage::Hardening(report) => report,
            other => {
                let problem = format!("expected a hardening report first, got {}", kind_of(&other));
                return Err(conversation.fail_protocol(problem));
            }
        };
        // A report that leaves a protection out would read as "nothing missing", and one of
        // another mode would hide a downgrade: refuse both before anything is sent.
        if let Err(problem) = report.check_complete(command.mode) {
            conversation.shutdown();
            return Err(WorkerError::BadReport { problem });
        }
        if let Some(reason) = &report.refused {
            let missing = report.missing().into_iter().map(str::to_owned).collect();
            let reason = reason.clone();
            conversation.shutdown();
            return Err(WorkerError::SandboxRefused { reason, missing });
        }
        if let Some(omit) = command.omit
            && report
                .protections
                .iter()
                .any(|p| p.name == omit && p.applied)
        {
            conversation.shutdown();
            return Err(WorkerError::BadReport {
                problem: format!("`{omit}` was to be left out but is reported applied"),
            });
        }
        if command.mode == SandboxMode::Required && !report.missing().is_empty() {
            let missing: Vec<String> = report.missing().into_iter().map(str::to_owned).collect();
            conversation.shutdown();
            return Err(WorkerError::SandboxRefused {
                reason: "the worker reported missing protections without refusing".to_owned(),
                missing,
            });
        }
        Ok((conversation, report))
    }
}

impl Drop for Conversation {
    fn drop(&mut self) {
        self.kill_and_reap();
    }
}

fn drain_tail(mut stderr: std::process::ChildStderr) -> VecDeque<u8> {
    let mut tail = VecDeque::with_capacity(STDERR_TAIL_BYTES);
    let mut buf = [0_u8; 4096];
    loop {
        match stderr.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                tail.extend(&buf[..n]);
                let excess = tail.len().saturating_sub(STDERR_TAIL_BYTES);
                tail.drain(..excess);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    tail
}

/// Recognizes a worker that died of a kernel resource limit: an aborted allocation under
/// `RLIMIT_AS` (Rust's allocation-failure handler prints `memory allocation of N bytes
/// failed` and aborts; a bump allocator panics with `out of memory`) or `SIGXCPU` from
/// `RLIMIT_CPU`. Anything else is left to the caller as an operational failure.
fn resource_exhaustion(
    status: ExitStatus,
    stderr_tail: &[String],
    address_space_bytes: u64,
    wall_ms: u64,
) -> Option<WorkerError> {
    if status.signal() == Some(Signal::SIGXCPU as i32) {
        let cpu = cpu_seconds(wall_ms);
        return Some(WorkerError::Resource {
            overrun: BudgetOverrun {
                name: "planner_wall_ms".to_owned(),
                limit: wall_ms,
                measured: cpu.saturating_mul(1000),
            },
            note: format!(
                "the worker used up its CPU-time limit of {cpu} s, derived from planner_wall_ms, \
                 and the kernel killed it with SIGXCPU"
            ),
        });
    }
    let failed_allocation = stderr_tail.iter().find_map(|line| allocation_failure(line));
    let panicked_at = stderr_tail.iter().position(|l| l.contains("panicked at"));
    let after_panic = |text: &str| {
        panicked_at.is_some_and(|at| stderr_tail[at..].iter().any(|l| l.trim() == text))
    };
    let panicked_oom = after_panic("out of memory");
    // Starlark refuses one heap allocation over 4 GiB with this panic (a builtin the worker
    // does not size-check, e.g. `list.extend(range(1000000000))`): more than the whole
    // address space budget, requested at once.
    let oversized = after_panic(OVERSIZED_ALLOCATION_PANIC);
    let failed_allocation =
        failed_allocation.or_else(|| oversized.then_some(u64::from(u32::MAX) + 1));
    let panicked_oom = panicked_oom || oversized;
    let aborted = status.signal() == Some(Signal::SIGABRT as i32);
    let exited_with_error = status.code().is_some_and(|c| c != 0);
    if !(aborted || exited_with_error) {
        return None;
    }
    if failed_allocation.is_none() && !panicked_oom {
        return None;
    }
    let requested = failed_allocation;
    let how = if aborted {
        "aborted (SIGABRT)".to_owned()
    } else {
        describe_status(status).replacen("the worker ", "", 1)
    };
    let what = requested.map_or_else(
        || "an allocation failed".to_owned(),
        |n| format!("an allocation of {n} more bytes failed"),
    );
    Some(WorkerError::Resource {
        overrun: BudgetOverrun {
            name: "planner_address_space_bytes".to_owned(),
            limit: address_space_bytes,
            measured: requested.unwrap_or(address_space_bytes),
        },
        note: format!(
            "the planner worker's address space (RLIMIT_AS, set from \
             planner_address_space_bytes) ran out: {what} and the worker {how}"
        ),
    })
}

/// The message of Starlark's panic for a single heap allocation over `u32::MAX` bytes.
const OVERSIZED_ALLOCATION_PANIC: &str = "AlignedSize must not exceed u32::MAX";

/// `N` of a `memory allocation of N bytes failed` line.
fn allocation_failure(line: &str) -> Option<u64> {
    let rest = line.trim().strip_prefix("memory allocation of ")?;
    let (bytes, tail) = rest.split_once(' ')?;
    if tail == "bytes failed" {
        bytes.parse().ok()
    } else {
        None
    }
}

/// `SIGINT` for 2.
fn signal_name(signal: i32) -> String {
    Signal::try_from(signal).map_or_else(|_| format!("signal {signal}"), |s| s.as_str().to_owned())
}

/// `exit status 3`, `killed by signal SIGSEGV (core dumped)`.
pub fn describe_status(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("the worker exited with status {code}");
    }
    match status.signal() {
        Some(sig) => {
            let name = Signal::try_from(sig)
                .map_or_else(|_| format!("signal {sig}"), |s| s.as_str().to_owned());
            let core = if status.core_dumped() {
                " (core dumped)"
            } else {
                ""
            };
            format!("the worker was killed by {name}{core}")
        }
        None => "the worker ended in an unknown way".to_owned(),
    }
}

fn kind_of(message: &WorkerMessage) -> &'static str {
    match message {
        WorkerMessage::Hardening(_) => "a hardening report",
        WorkerMessage::LoadModule(_) => "a module request",
        WorkerMessage::Planned(_) => "a plan response",
        WorkerMessage::ProbeResult(_) => "a probe result",
    }
}

/// The name of a message kind, for protocol errors elsewhere in planning.
pub fn message_kind(message: &WorkerMessage) -> &'static str {
    kind_of(message)
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt as _;

    use super::*;

    fn lines(text: &[&str]) -> Vec<String> {
        text.iter().map(|l| (*l).to_owned()).collect()
    }

    fn killed_by(signal: Signal) -> ExitStatus {
        ExitStatus::from_raw(signal as i32)
    }

    fn exited(code: i32) -> ExitStatus {
        ExitStatus::from_raw(code << 8)
    }

    #[test]
    fn an_aborted_allocation_is_the_address_space_budget() {
        let tail = lines(&[
            "memory allocation of 1000000000 bytes failed",
            "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace",
        ]);
        let err = resource_exhaustion(killed_by(Signal::SIGABRT), &tail, 1 << 30, 10_000).unwrap();
        let WorkerError::Resource { overrun, note } = &err else {
            panic!("{err}")
        };
        assert_eq!(overrun.name, "planner_address_space_bytes");
        assert_eq!((overrun.limit, overrun.measured), (1 << 30, 1_000_000_000));
        assert!(
            note.contains("address space") && note.contains("SIGABRT"),
            "{note}"
        );
        assert!(err.to_string().starts_with(
            "planning budget planner_address_space_bytes exceeded: accepted limit 1073741824, \
             requested or measured 1000000000 ("
        ));
    }

    #[test]
    fn an_out_of_memory_panic_measures_the_limit() {
        let tail = lines(&[
            "thread '<unnamed>' panicked at bumpalo/src/lib.rs:2479:5:",
            "out of memory",
            "rho-planner-worker: evaluation failed: the evaluation thread panicked",
        ]);
        let err = resource_exhaustion(exited(1), &tail, 4096, 10_000).unwrap();
        let WorkerError::Resource { overrun, .. } = &err else {
            panic!("{err}")
        };
        assert_eq!((overrun.limit, overrun.measured), (4096, 4096));
    }

    #[test]
    fn an_allocation_over_4_gib_is_the_address_space_budget() {
        let tail = lines(&[
            "thread '<unnamed>' (9170) panicked at starlark-0.14.3/src/values/layout/avalue.rs:109:13:",
            "AlignedSize must not exceed u32::MAX",
            "rho-planner-worker: evaluation failed: the evaluation thread panicked",
        ]);
        let err = resource_exhaustion(exited(1), &tail, 1 << 30, 10_000).unwrap();
        let WorkerError::Resource { overrun, note } = &err else {
            panic!("{err}")
        };
        assert_eq!(overrun.name, "planner_address_space_bytes");
        assert_eq!((overrun.limit, overrun.measured), (1 << 30, 1 << 32));
        assert!(
            note.contains("an allocation of 4294967296 more bytes failed"),
            "{note}"
        );
    }

    #[test]
    fn sigxcpu_is_the_wall_time_budget_through_the_cpu_limit() {
        let err = resource_exhaustion(killed_by(Signal::SIGXCPU), &[], 1 << 30, 1500).unwrap();
        let WorkerError::Resource { overrun, note } = &err else {
            panic!("{err}")
        };
        assert_eq!(overrun.name, "planner_wall_ms");
        assert_eq!((overrun.limit, overrun.measured), (1500, 4000));
        assert!(
            note.contains("CPU-time limit of 4 s") && note.contains("SIGXCPU"),
            "{note}"
        );
    }

    #[test]
    fn other_deaths_stay_operational() {
        let alloc = lines(&["memory allocation of 12 bytes failed"]);
        assert!(resource_exhaustion(killed_by(Signal::SIGSEGV), &alloc, 1, 1).is_none());
        assert!(resource_exhaustion(killed_by(Signal::SIGABRT), &[], 1, 1).is_none());
        assert!(resource_exhaustion(killed_by(Signal::SIGKILL), &[], 1, 1).is_none());
        assert!(resource_exhaustion(exited(0), &alloc, 1, 1).is_none());
        let panic = lines(&[
            "thread 'main' panicked at src/x.rs:1:1:",
            "index out of bounds",
        ]);
        assert!(resource_exhaustion(exited(101), &panic, 1, 1).is_none());
        assert_eq!(
            allocation_failure("memory allocation of x bytes failed"),
            None
        );
        assert_eq!(
            allocation_failure("memory allocation of 7 bytes failed"),
            Some(7)
        );
        assert_eq!(allocation_failure("memory allocation of 7 bytes"), None);
    }
}
