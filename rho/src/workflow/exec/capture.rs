//! Supervision of a started command: bounded stream capture, timeout and cancellation, and
//! the stop sequence for the whole process group.
//!
//! Invariant: the leader is reaped only after its group was sent SIGKILL and released from
//! the guardian, so the group id cannot be reused while anything still signals it; and the
//! streams are drained until every holder has closed them (or a bounded time after SIGKILL,
//! for a holder that escaped the group).

use std::ffi::{CString, OsString};
use std::fs::{File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::{Pid, pipe2};
use sha2::{Digest as _, Sha256};

use super::liveness::process_start_time;
use super::spawner::{self, LaunchRequest, above_stdio};
use super::verify::Verified;
use super::{
    CANCEL_POLL, CancelToken, CommandExit, CommandOutcome, CommandSpec, ExecError, ProcessIdentity,
    StreamArtifact,
};
use crate::containment::Tree;

/// Read size per wake-up of a stream.
const READ_CHUNK: usize = 64 * 1024;
/// Poll interval for the leader's exit when the kernel has no pidfd.
const NO_PIDFD_POLL: Duration = Duration::from_millis(10);

/// A started command under supervision.
#[derive(Debug)]
pub(super) struct Supervised {
    process: ProcessIdentity,
    pidfd: Option<OwnedFd>,
    stdout: Stream,
    stderr: Stream,
    started: Instant,
    deadline: Instant,
    cancel: CancelToken,
    grace: Duration,
    /// Kills and reaps the group when the command is dropped unwaited.
    guard: GroupGuard,
    // Kept open until the end: the sealed files and directory the child was launched from.
    _launch: Verified,
}

/// Why the group is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopReason {
    Timeout,
    Cancelled,
    /// The leader exited while something else still held its streams.
    LeaderExited,
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    Running,
    /// SIGTERM sent; SIGKILL at `kill_at`.
    Terminating {
        reason: StopReason,
        kill_at: Instant,
    },
    /// SIGKILL sent; give up on the streams at `drain_until`.
    Killed {
        reason: StopReason,
        drain_until: Instant,
    },
}

impl Phase {
    fn reason(self) -> Option<StopReason> {
        match self {
            Phase::Running => None,
            Phase::Terminating { reason, .. } | Phase::Killed { reason, .. } => Some(reason),
        }
    }
}

/// Below this bound a stream keeps only its head; at or above it, the head and the tail
/// (errors are usually printed last) with a marked gap between them.
const HEAD_AND_TAIL_MIN: u64 = 256;
/// Bytes reserved for the gap marker, so head, marker and tail stay within the bound.
const MARKER_RESERVE: u64 = 64;

/// The line that marks dropped bytes between a stream's head and tail.
fn gap_marker(omitted: u64) -> String {
    format!("\n[... rho: {omitted} bytes omitted ...]\n")
}

/// One captured stream: a pipe read end and its bounded artifact.
///
/// With a bound of at least [`HEAD_AND_TAIL_MIN`], the first half of the bound goes to the
/// file as it arrives and the latest bytes are held in a ring; at the end the ring follows,
/// after a gap marker when bytes were dropped between them.
#[derive(Debug)]
struct Stream {
    pipe: Option<File>,
    /// Created on the first retained byte: most commands print nothing, and creating a
    /// file is the most expensive step of a trivial launch.
    sink: Option<File>,
    path: PathBuf,
    /// The open directory `path` is an entry of, when the caller has it.
    dir: Option<Arc<OwnedFd>>,
    retained: u64,
    observed: u64,
    reached_end: bool,
    write_failed: bool,
    hasher: Sha256,
    /// Bytes written to the file as they arrive (the head).
    head_max: u64,
    /// The latest bytes past the head, at most `tail_max`.
    tail: std::collections::VecDeque<u8>,
    tail_max: usize,
    /// Bytes of the gap marker in the file (0 when nothing was dropped).
    marker_bytes: u64,
}

impl Stream {
    fn new(
        pipe: OwnedFd,
        path: &Path,
        dir: Option<&Arc<OwnedFd>>,
        max: u64,
    ) -> Result<Self, ExecError> {
        // Refuse an existing entry now (a cheap lstat, relative to the open directory when
        // there is one); the lazy create_new still refuses one that appears later.
        let existing = match (dir, path.file_name()) {
            (Some(dir), Some(name)) => {
                nix::sys::stat::fstatat(dir.as_fd(), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
                    .map(drop)
                    .map_err(io::Error::from)
            }
            _ => std::fs::symlink_metadata(path).map(drop),
        };
        match existing {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Ok(()) => {
                return Err(ExecError::Artifact {
                    path: path.to_owned(),
                    source: io::Error::from(io::ErrorKind::AlreadyExists),
                });
            }
            Err(source) => {
                return Err(ExecError::Artifact {
                    path: path.to_owned(),
                    source,
                });
            }
        }
        Ok(Self {
            pipe: Some(File::from(pipe)),
            sink: None,
            path: path.to_owned(),
            dir: dir.cloned(),
            retained: 0,
            observed: 0,
            reached_end: false,
            write_failed: false,
            hasher: Sha256::new(),
            head_max: if max >= HEAD_AND_TAIL_MIN {
                max / 2
            } else {
                max
            },
            tail: std::collections::VecDeque::new(),
            tail_max: if max >= HEAD_AND_TAIL_MIN {
                usize::try_from(max - max / 2 - MARKER_RESERVE).unwrap_or(0)
            } else {
                0
            },
            marker_bytes: 0,
        })
    }

    fn create_sink(&mut self) -> io::Result<&mut File> {
        if self.sink.is_none() {
            let file = match (&self.dir, self.path.file_name()) {
                (Some(dir), Some(name)) => File::from(
                    nix::fcntl::openat(
                        dir.as_fd(),
                        name,
                        OFlag::O_WRONLY
                            | OFlag::O_CREAT
                            | OFlag::O_EXCL
                            | OFlag::O_NOFOLLOW
                            | OFlag::O_CLOEXEC,
                        nix::sys::stat::Mode::from_bits_truncate(0o600),
                    )
                    .map_err(io::Error::from)?,
                ),
                _ => OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                    .open(&self.path)?,
            };
            self.sink = Some(file);
        }
        self.sink
            .as_mut()
            .ok_or_else(|| io::Error::other("artifact file missing"))
    }

    /// One read after the pipe became readable.
    fn read_once(&mut self, buf: &mut [u8]) {
        let Some(pipe) = self.pipe.as_mut() else {
            return;
        };
        match pipe.read(buf) {
            Ok(0) => {
                self.reached_end = true;
                self.pipe = None;
            }
            Ok(n) => self.keep(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                ) => {}
            Err(e) => {
                tracing::warn!(path = %self.path.display(), "reading command output failed: {e}");
                self.pipe = None;
            }
        }
    }

    fn keep(&mut self, bytes: &[u8]) {
        self.observed += bytes.len() as u64;
        if self.write_failed {
            return;
        }
        let room =
            usize::try_from(self.head_max.saturating_sub(self.retained)).unwrap_or(usize::MAX);
        let (kept, rest) = bytes.split_at(bytes.len().min(room));
        self.hold_tail(rest);
        if kept.is_empty() {
            return;
        }
        self.write_kept(kept);
    }

    /// Keeps the latest `tail_max` bytes seen past the head.
    fn hold_tail(&mut self, bytes: &[u8]) {
        if self.tail_max == 0 || bytes.is_empty() {
            return;
        }
        if bytes.len() >= self.tail_max {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.tail_max..]);
            return;
        }
        let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.tail_max);
        self.tail.drain(..overflow);
        self.tail.extend(bytes);
    }

    /// Appends the held tail to the file, after a gap marker when bytes were dropped.
    fn write_tail(&mut self) {
        if self.write_failed || self.tail.is_empty() {
            return;
        }
        let tail: Vec<u8> = std::mem::take(&mut self.tail).into();
        let omitted = self.observed - self.retained - tail.len() as u64;
        if omitted > 0 {
            self.write_kept(gap_marker(omitted).as_bytes());
        }
        self.write_kept(&tail);
        // The marker is not output: what the command printed and the file holds differ by
        // exactly the omitted bytes.
        self.marker_bytes = if omitted > 0 {
            gap_marker(omitted).len() as u64
        } else {
            0
        };
    }

    fn write_kept(&mut self, kept: &[u8]) {
        if self.write_failed {
            return;
        }
        match self.create_sink().and_then(|sink| sink.write_all(kept)) {
            Ok(()) => {
                self.hasher.update(kept);
                self.retained += kept.len() as u64;
            }
            Err(e) => {
                // Whatever reached the file before the error is unknown: stop retaining, and
                // the artifact reports truncation.
                tracing::warn!(path = %self.path.display(), "writing output artifact failed: {e}");
                self.write_failed = true;
            }
        }
    }

    fn finish(mut self) -> StreamArtifact {
        self.write_tail();
        let digest: [u8; 32] = self.hasher.finalize().into();
        let output_kept = self.retained - self.marker_bytes;
        StreamArtifact {
            path: self.path,
            retained_bytes: self.retained,
            observed_bytes: self.observed,
            truncated: self.observed > output_kept || self.write_failed,
            reached_end: self.reached_end,
            sha256: format!("sha256:{}", rho_ipc::digest::hex(&digest)),
        }
    }
}

fn c_string(bytes: Vec<u8>, field: impl FnOnce() -> String) -> Result<CString, ExecError> {
    CString::new(bytes).map_err(|_| ExecError::InvalidArgument {
        field: field(),
        reason: "contains a NUL byte",
    })
}

/// Builds `argv` and `envp` as C strings (before anything is started).
fn exec_strings(
    launch: &Verified,
    spec: &CommandSpec,
) -> Result<(Vec<CString>, Vec<CString>), ExecError> {
    if spec.argv.is_empty() {
        return Err(ExecError::InvalidArgument {
            field: "argv".to_owned(),
            reason: "is empty (argv[0] is required)",
        });
    }
    let mut argv = Vec::with_capacity(spec.argv.len() + launch.interpreter_argv.len() + 1);
    if let Some(script) = &launch.script {
        for (i, arg) in launch.interpreter_argv.iter().enumerate() {
            argv.push(c_string(arg.clone().into_vec(), || {
                format!("interpreter argv[{i}]")
            })?);
        }
        let handle = format!("/proc/self/fd/{}", script.raw_fd());
        argv.push(c_string(handle.into_bytes(), || {
            "script handle".to_owned()
        })?);
        for (i, arg) in spec.argv.iter().enumerate().skip(1) {
            argv.push(c_string(arg.clone().into_vec(), || format!("argv[{i}]"))?);
        }
    } else {
        for (i, arg) in spec.argv.iter().enumerate() {
            argv.push(c_string(arg.clone().into_vec(), || format!("argv[{i}]"))?);
        }
    }
    let mut envp = Vec::with_capacity(spec.env.len());
    for (name, value) in &spec.env {
        let shown = || format!("environment variable {}", name.to_string_lossy());
        let name_bytes = name.as_encoded_bytes();
        if name_bytes.is_empty() || name_bytes.contains(&b'=') {
            return Err(ExecError::InvalidArgument {
                field: shown(),
                reason: "a name must be non-empty and contain no `=`",
            });
        }
        let mut entry: OsString = name.clone();
        entry.push("=");
        entry.push(value);
        envp.push(c_string(entry.into_vec(), shown)?);
    }
    Ok((argv, envp))
}

/// A command whose descriptors, pipes and strings are ready: everything of a launch but
/// the launch itself, so a caller that must wait before starting it (for its
/// `launch_intended` record to be durable) does this part while it waits.
pub(super) struct Prepared {
    launch: Verified,
    spec: CommandSpec,
    request: LaunchRequest,
    stdout: Stream,
    stderr: Stream,
    /// The child's ends: only the child holds them once it started.
    child_ends: (OwnedFd, OwnedFd, OwnedFd),
    /// The directory of the tree's cgroup, closed once the child was created in it.
    join: Option<OwnedFd>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("argv", &self.request.argv)
            .finish_non_exhaustive()
    }
}

/// Creates the pipes, checks the artifact paths and opens what the child needs, without
/// starting anything (see [`Prepared::launch`]).
pub(super) fn prepare(launch: Verified, spec: CommandSpec) -> Result<Prepared, ExecError> {
    let (argv, envp) = exec_strings(&launch, &spec)?;
    let setup = |what: &'static str| move |e: io::Error| ExecError::Setup { what, source: e };
    let stdin = above_stdio(OwnedFd::from(
        File::open("/dev/null").map_err(setup("/dev/null"))?,
    ))
    .map_err(setup("/dev/null"))?;
    let (out_r, out_w) = pipe2(OFlag::O_CLOEXEC).map_err(|e| setup("stdout pipe")(e.into()))?;
    let (err_r, err_w) = pipe2(OFlag::O_CLOEXEC).map_err(|e| setup("stderr pipe")(e.into()))?;
    let out_w = above_stdio(out_w).map_err(setup("stdout pipe"))?;
    let err_w = above_stdio(err_w).map_err(setup("stderr pipe"))?;
    let dir = spec.artifact_dir.as_ref();
    let stdout = Stream::new(out_r, &spec.stdout_path, dir, spec.max_output_bytes)?;
    let stderr = Stream::new(err_r, &spec.stderr_path, dir, spec.max_output_bytes)?;
    let join = match &spec.containment {
        Some(tree) => tree.dir_handle().map_err(|e| ExecError::Setup {
            what: "opening the node's cgroup",
            source: io::Error::other(e.to_string()),
        })?,
        None => None,
    };
    let request = LaunchRequest {
        argv,
        envp,
        exec_fd: launch.program.raw_fd(),
        script_fd: launch.script.as_ref().map(|s| s.raw_fd()),
        cwd_fd: launch.cwd.as_raw_fd(),
        stdin_fd: stdin.as_raw_fd(),
        stdout_fd: out_w.as_raw_fd(),
        stderr_fd: err_w.as_raw_fd(),
        confinement: spec.confinement.clone(),
        cgroup_fd: join.as_ref().map(AsRawFd::as_raw_fd),
        tree_tag: spec.containment.as_ref().and_then(Tree::leader_tag),
        ignored_signals: spawner::ignored_signals(),
    };
    Ok(Prepared {
        launch,
        spec,
        request,
        stdout,
        stderr,
        child_ends: (stdin, out_w, err_w),
        join,
    })
}

/// Creates the artifacts and pipes, launches through the spawner, and returns the
/// supervised command.
pub(super) fn start(launch: Verified, spec: CommandSpec) -> Result<Supervised, ExecError> {
    prepare(launch, spec)?.launch()
}

impl Prepared {
    /// Starts the prepared command and returns it under supervision.
    pub(super) fn launch(self) -> Result<Supervised, ExecError> {
        let Prepared {
            launch,
            spec,
            request,
            stdout,
            stderr,
            child_ends,
            join,
        } = self;
        let started = Instant::now();
        let filtered = request
            .confinement
            .as_ref()
            .is_some_and(|c| c.filter_program().is_some());
        let launched = if filtered {
            // The filter is inherited from a launcher thread rather than attached per child.
            spawner::launch_filtered(request)
        } else if spec.launch_on_this_thread {
            spawner::launch_here(&request)
        } else {
            spawner::launch(request)
        };
        drop(join);
        supervise(launch, spec, stdout, stderr, child_ends, started, launched)
    }
}

/// Takes a launched child under supervision (or cleans up after a failed launch).
fn supervise(
    launch: Verified,
    spec: CommandSpec,
    stdout: Stream,
    stderr: Stream,
    child_ends: (OwnedFd, OwnedFd, OwnedFd),
    started: Instant,
    launched: Result<spawner::Child, ExecError>,
) -> Result<Supervised, ExecError> {
    let child = match launched {
        Ok(child) => child,
        Err(e) => {
            // The child failed before executing anything; nothing of it can be left.
            if let Some(tree) = &spec.containment
                && let Err(removal) = tree.remove()
            {
                tracing::warn!("{removal}");
            }
            return Err(e);
        }
    };
    // Only the child holds the write ends now, so end of file means every holder is gone.
    drop(child_ends);
    let guard = GroupGuard {
        pgid: child.pid,
        slot: Some(child.slot),
        tree: spec.containment,
        caller_removes_cgroup: spec.caller_removes_cgroup,
    };
    let start_time_ticks = match process_start_time(child.pid) {
        Ok((ticks, _)) => ticks,
        Err(source) => {
            drop(guard);
            return Err(ExecError::Setup {
                what: "reading the child's start time",
                source,
            });
        }
    };
    let process = ProcessIdentity {
        pid: child.pid,
        pgid: child.pid,
        start_time: start_time_ticks,
    };
    if let Some(tree) = &guard.tree {
        tree.started(child.pid, start_time_ticks);
    }
    tracing::debug!(pid = child.pid, "command started");
    Ok(Supervised {
        process,
        pidfd: child.pidfd,
        stdout,
        stderr,
        started,
        deadline: started
            .checked_add(spec.timeout)
            .unwrap_or(started + Duration::from_secs(1 << 40)),
        cancel: spec.cancel,
        grace: spec.kill_grace,
        guard,
        _launch: launch,
    })
}

/// How long the end of supervision waits for a killed tree to empty.
const CGROUP_EMPTY_LIMIT: Duration = Duration::from_secs(5);

/// Kills the tree and its group, releases the group from the guardian, reaps the leader,
/// and removes the emptied containment. `Err` names what outlived the kill.
fn stop_and_reap(
    pgid: i32,
    slot: spawner::GuardSlot,
    tree: Option<&Tree>,
    caller_removes_cgroup: bool,
) -> (Option<libc::c_int>, Result<(), String>) {
    // The tree first: a tracked tree is frozen and walked before its members die (killing
    // the group first would orphan a member's unrecorded children). Before the leader is
    // reaped: the leader's pid keeps the group id from reuse, and a detached member (setsid,
    // double fork) is only reachable through the tree.
    let emptied = tree.map_or(Ok(()), |c| {
        c.kill_and_wait(CGROUP_EMPTY_LIMIT)
            .map_err(|e| e.to_string())
    });
    signal_group(pgid, Signal::SIGKILL);
    slot.release();
    let status = spawner::reap_blocking(pgid);
    if emptied.is_ok()
        && let Some(c) = tree
        && !(caller_removes_cgroup && c.cgroup().is_some())
        && let Err(e) = c.remove()
    {
        tracing::warn!("{e}");
    }
    (status, emptied)
}

fn signal_group(pgid: i32, signal: Signal) {
    match killpg(Pid::from_raw(pgid), signal) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => tracing::warn!(pgid, "cannot send {signal} to process group {pgid}: {e}"),
    }
}

/// Remaining time until `at`, rounded up to whole milliseconds.
fn until(at: Instant, now: Instant) -> Duration {
    let left = at.saturating_duration_since(now);
    let ms = left.as_nanos().div_ceil(1_000_000);
    Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
}

impl Supervised {
    pub(super) fn process(&self) -> ProcessIdentity {
        self.process
    }

    /// Non-blocking check of the leader; `Some` once it has exited (not reaped).
    fn leader_status(&self) -> Option<WaitStatus> {
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT | WaitPidFlag::WNOHANG;
        match waitid(Id::Pid(Pid::from_raw(self.process.pid)), flags) {
            Ok(WaitStatus::StillAlive) | Err(Errno::EINTR) => None,
            Ok(status) => Some(status),
            // The leader cannot be observed any more (reaped elsewhere): treat it as gone,
            // with an unknown status that classifies as abnormal.
            Err(e) => {
                tracing::warn!(pid = self.process.pid, "waitid failed: {e}");
                Some(WaitStatus::StillAlive)
            }
        }
    }

    pub(super) fn wait(mut self) -> CommandOutcome {
        let pgid = self.process.pgid;
        let mut buf = vec![0_u8; READ_CHUNK];
        let mut phase = Phase::Running;
        let mut leader: Option<WaitStatus> = None;
        loop {
            let now = Instant::now();
            let streams_open = self.stdout.pipe.is_some() || self.stderr.pipe.is_some();
            if leader.is_some() && !streams_open {
                break;
            }
            phase = match phase {
                Phase::Running if leader.is_some() => self.terminate(StopReason::LeaderExited, now),
                Phase::Running if self.cancel.is_cancelled() => {
                    self.terminate(StopReason::Cancelled, now)
                }
                Phase::Running if now >= self.deadline => self.terminate(StopReason::Timeout, now),
                Phase::Terminating { reason, kill_at } if now >= kill_at => {
                    if let Some(tree) = &self.guard.tree
                        && let Err(e) = tree.kill()
                    {
                        tracing::warn!("{e}");
                    }
                    signal_group(pgid, Signal::SIGKILL);
                    Phase::Killed {
                        reason,
                        drain_until: now + self.grace,
                    }
                }
                Phase::Killed { drain_until, .. } if now >= drain_until => {
                    if leader.is_none() {
                        // SIGKILL cannot be ignored: a leader still running here is stuck in
                        // the kernel; keep waiting for it but stop reading.
                        leader = self.leader_status();
                    }
                    if streams_open {
                        tracing::warn!(
                            pgid,
                            "a process outside group {pgid} still holds the command's output; \
                             closing the streams"
                        );
                        self.stdout.pipe = None;
                        self.stderr.pipe = None;
                    }
                    if leader.is_some() {
                        break;
                    }
                    phase
                }
                other => other,
            };
            let wake_at = match phase {
                Phase::Running => self.deadline,
                Phase::Terminating { kill_at, .. } => kill_at,
                Phase::Killed { drain_until, .. } => drain_until,
            };
            // Past the last deadline (streams given up, leader not yet gone) only the
            // leader's exit is awaited: poll at the cancellation pace, never spin.
            let mut timeout = if wake_at > now {
                until(wake_at, now)
            } else {
                CANCEL_POLL
            };
            timeout = timeout.min(CANCEL_POLL);
            if self.pidfd.is_none() && leader.is_none() {
                timeout = timeout.min(NO_PIDFD_POLL);
            }
            let (out_ready, err_ready, exited) = self.poll_once(timeout, leader.is_none());
            if out_ready {
                self.stdout.read_once(&mut buf);
            }
            if err_ready {
                self.stderr.read_once(&mut buf);
            }
            if leader.is_none() && (exited || self.pidfd.is_none()) {
                leader = self.leader_status();
            }
        }
        // Anything left in the group (a background process that closed its streams) goes
        // now, before the leader's pid, and so the group id, can be reused.
        let (reaped, emptied) = match self.guard.slot.take() {
            Some(slot) => stop_and_reap(
                pgid,
                slot,
                self.guard.tree.as_ref(),
                self.guard.caller_removes_cgroup,
            ),
            None => (None, Ok(())),
        };
        let exit = match (phase.reason(), leader, reaped) {
            // A process of the tree survived SIGKILL: whatever the leader did, the node is
            // not over.
            _ if emptied.is_err() => CommandExit::Abnormal(format!(
                "the process tree could not be stopped: {}",
                emptied.err().unwrap_or_default()
            )),
            (Some(StopReason::Cancelled), ..) => CommandExit::Cancelled,
            (Some(StopReason::Timeout), ..) => CommandExit::Timeout,
            (_, Some(WaitStatus::Exited(_, code)), _) => CommandExit::Code(code),
            (_, Some(WaitStatus::Signaled(_, signal, _)), _) => CommandExit::Signal(signal as i32),
            (_, _, Some(status)) if libc::WIFEXITED(status) => {
                CommandExit::Code(libc::WEXITSTATUS(status))
            }
            (_, _, Some(status)) if libc::WIFSIGNALED(status) => {
                CommandExit::Signal(libc::WTERMSIG(status))
            }
            (_, status, _) => {
                CommandExit::Abnormal(format!("cannot determine how pid {pgid} ended: {status:?}"))
            }
        };
        let duration = self.started.elapsed();
        CommandOutcome {
            exit,
            process: self.process,
            stdout: self.stdout.finish(),
            stderr: self.stderr.finish(),
            duration,
        }
    }

    fn terminate(&self, reason: StopReason, now: Instant) -> Phase {
        tracing::debug!(pgid = self.process.pgid, ?reason, "stopping command group");
        signal_group(self.process.pgid, Signal::SIGTERM);
        if let Some(tree) = &self.guard.tree {
            // Detached members get the same warning and grace as the group.
            tree.signal_members(libc::SIGTERM);
        }
        Phase::Terminating {
            reason,
            kill_at: now + self.grace,
        }
    }

    /// Polls the open streams and the pidfd; returns which are ready.
    fn poll_once(&self, timeout: Duration, watch_leader: bool) -> (bool, bool, bool) {
        let ready = PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR;
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(3);
        let mut slots = [usize::MAX; 3];
        if let Some(pipe) = &self.stdout.pipe {
            slots[0] = fds.len();
            fds.push(PollFd::new(pipe.as_fd(), PollFlags::POLLIN));
        }
        if let Some(pipe) = &self.stderr.pipe {
            slots[1] = fds.len();
            fds.push(PollFd::new(pipe.as_fd(), PollFlags::POLLIN));
        }
        if watch_leader && let Some(pidfd) = &self.pidfd {
            slots[2] = fds.len();
            fds.push(PollFd::new(pidfd.as_fd(), PollFlags::POLLIN));
        }
        let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => {
                tracing::warn!("poll on command streams failed: {e}");
                std::thread::sleep(NO_PIDFD_POLL);
            }
        }
        let is_ready = |slot: usize| {
            fds.get(slot)
                .and_then(PollFd::revents)
                .is_some_and(|r| r.intersects(ready))
        };
        (is_ready(slots[0]), is_ready(slots[1]), is_ready(slots[2]))
    }
}

/// Kills and reaps the group if supervision ends without `wait` (the command is dropped).
#[derive(Debug)]
struct GroupGuard {
    pgid: i32,
    /// `None` once the group was stopped and its leader reaped.
    slot: Option<spawner::GuardSlot>,
    /// The tree's containment (cgroup or tracked descendants), when it has one.
    tree: Option<Tree>,
    /// Whether the caller removes an emptied cgroup after `wait` (see
    /// [`CommandSpec::caller_removes_cgroup`]); a command dropped unwaited removes it here.
    caller_removes_cgroup: bool,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take()
            && let (_, Err(e)) = stop_and_reap(self.pgid, slot, self.tree.as_ref(), false)
        {
            tracing::warn!("{e}");
        }
    }
}
