//! One thread per background process: launches the tree, reads both pipes into the record,
//! enforces the timeout, carries out stop requests, and finishes the record.
//!
//! Invariant: the record turns terminal only after the leader was reaped, the pipes reached
//! end of file (or their last holders outside the group were killed) and the group was sent
//! SIGKILL, so a finished record never has a process of its tree behind it. The thread
//! sleeps in `poll(2)` on the pipes, the leader's pidfd and a wake-up pipe: output reaches
//! pollers as soon as it is read, with no periodic tick while the tree runs.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read as _};
use std::os::fd::AsFd as _;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::Signal;
use nix::unistd::pipe2;

use super::output::{Stream, complete_utf8_prefix};
use super::tree::{self, ShellTree};
use super::{ProcessLimits, ProcessState, Record, StopCause};

/// Largest single read from a pipe (and so the largest chunk before UTF-8 repair).
const READ_BYTES: usize = 32 * 1024;

/// After SIGKILL, how long the pipes may stay open before their holders outside the group
/// are hunted down.
const DRAIN_AFTER_KILL: Duration = Duration::from_millis(500);

/// Re-check interval while only non-pipe group members remain after the leader exited, and
/// while waiting for a leader without a pidfd (kernels before 5.3).
const GROUP_TICK: Duration = Duration::from_millis(20);

/// What ends the tree.
#[derive(Debug, Clone, Copy)]
enum Ending {
    LeaderExited { survivors: bool },
    Stop(StopCause),
    TimedOut(Duration),
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    Running,
    /// SIGTERM was sent; SIGKILL follows at `kill_at`.
    Stopping {
        kill_at: Instant,
    },
    /// SIGKILL was sent; pipes still open at `give_up_at` have holders outside the group.
    Killed {
        give_up_at: Instant,
    },
}

struct Pipe {
    file: File,
    stream: Stream,
    /// An unfinished UTF-8 sequence waiting for its next bytes.
    carry: Vec<u8>,
}

struct Supervisor {
    record: Arc<Record>,
    tree: ShellTree,
    pipes: [Option<Pipe>; 2],
    wake: File,
    timeout: Option<(Instant, Duration)>,
    grace: Duration,
    read_bytes: usize,
}

/// The error and its sources, `: `-separated (for `terminal_detail`).
fn describe(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Marks the record as failed to start.
fn fail(record: &Record, detail: String) {
    let mut state = record.lock();
    state.state = ProcessState::FailedToStart;
    state.terminal_detail = Some(detail);
    state.ended = Some(Instant::now());
    drop(state);
    record.changed.notify_all();
}

/// Launches the record's command and hands it to a new supervisor thread. On any failure the
/// record ends `failed_to_start` with the reason, and nothing is left running.
pub(super) fn launch(
    record: &Arc<Record>,
    cwd: &Path,
    env: &[(OsString, OsString)],
    confinement: Option<Arc<crate::confinement::Confinement>>,
    timeout: Option<Duration>,
    limits: &ProcessLimits,
) {
    let wake = match pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK) {
        Ok((read, write)) => (File::from(read), File::from(write)),
        Err(e) => {
            fail(record, format!("cannot create the wake-up pipe: {e}"));
            return;
        }
    };
    let launched = match tree::launch_shell(&record.command, cwd, env, confinement) {
        Ok(launched) => launched,
        Err(e) => {
            fail(
                record,
                format!(
                    "cannot start `{}` in {}: {}",
                    tree::SHELL,
                    cwd.display(),
                    describe(&e)
                ),
            );
            return;
        }
    };
    let started = Instant::now();
    let supervisor = Supervisor {
        record: Arc::clone(record),
        tree: launched.tree,
        pipes: [
            Some(Pipe {
                file: launched.stdout,
                stream: Stream::Stdout,
                carry: Vec::new(),
            }),
            Some(Pipe {
                file: launched.stderr,
                stream: Stream::Stderr,
                carry: Vec::new(),
            }),
        ],
        wake: wake.0,
        timeout: timeout.map(|t| (started + t, t)),
        grace: limits.stop_grace,
        // Small caps get small reads, so a chunk fits beside the pinned first chunk.
        read_bytes: READ_BYTES.min(limits.max_output_bytes / 4).max(1),
    };
    {
        let mut state = record.lock();
        state.state = ProcessState::Running;
        state.wake = Some(wake.1);
    }
    record.changed.notify_all();
    let spawned = std::thread::Builder::new()
        .name(format!("rho-{}", record.id))
        .spawn(move || supervisor.run());
    if let Err(e) = spawned {
        // The closure (and with it the tree) was dropped: the tree is killed and reaped.
        let mut state = record.lock();
        state.wake = None;
        drop(state);
        fail(record, format!("cannot start the supervisor thread: {e}"));
    }
}

fn readable(fd: Option<&PollFd<'_>>) -> bool {
    fd.and_then(PollFd::revents)
        .is_some_and(|r| r.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR))
}

fn poll_timeout(wait: Option<Duration>) -> PollTimeout {
    match wait {
        None => PollTimeout::NONE,
        Some(wait) => {
            // Rounded up, so a wake-up never comes a fraction of a millisecond early and spins.
            let ms = wait.as_micros().div_ceil(1000);
            PollTimeout::from(u16::try_from(ms).unwrap_or(u16::MAX))
        }
    }
}

impl Supervisor {
    fn pipes_open(&self) -> bool {
        self.pipes.iter().any(Option::is_some)
    }

    fn run(mut self) {
        let mut phase = Phase::Running;
        let mut ending: Option<Ending> = None;
        let mut leader: Option<ExitStatus> = None;
        let mut sigkilled = false;
        let mut notes: Vec<String> = Vec::new();
        let mut buf = vec![0_u8; self.read_bytes];
        // The leader exited alone: no process was left in its group to wait for (a process
        // cannot join an empty group), so the group is not searched again.
        let mut group_emptied = false;
        // A stop requested before this thread ran.
        self.check_stop(&mut phase, &mut ending);
        loop {
            if leader.is_some()
                && !self.pipes_open()
                && (matches!(phase, Phase::Killed { .. })
                    || group_emptied
                    || !self.tree.group_alive())
            {
                break;
            }
            let now = Instant::now();
            match phase {
                Phase::Running => {
                    if let Some((deadline, limit)) = self.timeout
                        && now >= deadline
                    {
                        ending = Some(Ending::TimedOut(limit));
                        phase = self.terminate();
                        continue;
                    }
                }
                Phase::Stopping { kill_at } => {
                    if now >= kill_at {
                        self.tree.signal(Signal::SIGKILL);
                        sigkilled = true;
                        phase = Phase::Killed {
                            give_up_at: now + DRAIN_AFTER_KILL,
                        };
                        continue;
                    }
                }
                Phase::Killed { give_up_at } => {
                    if now >= give_up_at && self.pipes_open() {
                        let files: Vec<&File> =
                            self.pipes.iter().flatten().map(|p| &p.file).collect();
                        let holders = tree::kill_pipe_holders(&files);
                        notes.push(format!(
                            "the output pipes were still held by processes outside the \
                             process group ({holders:?}), which were killed"
                        ));
                        for index in 0..2 {
                            self.close_pipe(index);
                        }
                        continue;
                    }
                }
            }
            let timer = match phase {
                Phase::Running => self.timeout.map(|(deadline, _)| deadline),
                Phase::Stopping { kill_at } => Some(kill_at),
                Phase::Killed { give_up_at } => self.pipes_open().then_some(give_up_at),
            };
            let mut wait = timer.map(|t| t.saturating_duration_since(now));
            let ticking = (leader.is_some() && !self.pipes_open())
                || (leader.is_none() && self.tree.pidfd().is_none());
            if ticking {
                wait = Some(wait.map_or(GROUP_TICK, |w| w.min(GROUP_TICK)));
            }
            let (ready, leader_ready, woken) = match self.wait(wait, leader.is_none()) {
                Ok(events) => events,
                Err(e) => {
                    tracing::error!(process = %self.record.id, "poll failed: {e}");
                    notes.push(format!("supervision failed ({e}); the tree was killed"));
                    ending.get_or_insert(Ending::Stop(StopCause::Shutdown));
                    break;
                }
            };
            for (index, ready) in ready.into_iter().enumerate() {
                if ready {
                    self.read_pipe(index, &mut buf);
                }
            }
            if woken {
                let mut sink = [0_u8; 64];
                while matches!((&self.wake).read(&mut sink), Ok(n) if n > 0) {}
                self.check_stop(&mut phase, &mut ending);
            }
            if leader.is_none() && (leader_ready || ticking) {
                leader = self.tree.peek_exit();
                if leader.is_some() && matches!(phase, Phase::Running) {
                    let survivors = self.tree.group_alive();
                    ending = Some(Ending::LeaderExited { survivors });
                    if survivors {
                        phase = self.terminate();
                    } else {
                        // Pipes still open now belong to processes outside the group: they
                        // get the grace period, then the SIGKILL path hunts them down.
                        group_emptied = true;
                        phase = Phase::Stopping {
                            kill_at: Instant::now() + self.grace,
                        };
                    }
                }
            }
        }
        for index in 0..2 {
            self.close_pipe(index);
        }
        let status = self.tree.kill_and_reap().or(leader);
        self.finish(ending, status, sigkilled, notes);
    }

    /// Waits for the pipes, the leader and the wake-up pipe, at most `wait`.
    fn wait(
        &self,
        wait: Option<Duration>,
        watch_leader: bool,
    ) -> Result<([bool; 2], bool, bool), Errno> {
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(4);
        let mut slots = [None; 2];
        for (index, pipe) in self.pipes.iter().enumerate() {
            if let Some(pipe) = pipe {
                slots[index] = Some(fds.len());
                fds.push(PollFd::new(pipe.file.as_fd(), PollFlags::POLLIN));
            }
        }
        let leader_slot = match self.tree.pidfd() {
            Some(fd) if watch_leader => {
                fds.push(PollFd::new(fd, PollFlags::POLLIN));
                Some(fds.len() - 1)
            }
            _ => None,
        };
        let wake_slot = fds.len();
        fds.push(PollFd::new(self.wake.as_fd(), PollFlags::POLLIN));
        match poll(&mut fds, poll_timeout(wait)) {
            Ok(_) => {}
            Err(Errno::EINTR) => return Ok(([false; 2], false, false)),
            Err(e) => return Err(e),
        }
        let ready = slots.map(|slot| readable(slot.and_then(|s| fds.get(s))));
        let leader = readable(leader_slot.and_then(|s| fds.get(s)));
        let woken = readable(fds.get(wake_slot));
        Ok((ready, leader, woken))
    }

    /// Acts on a pending stop request while the tree still runs.
    fn check_stop(&mut self, phase: &mut Phase, ending: &mut Option<Ending>) {
        let requested = self.record.lock().stop;
        if let (Some(cause), Phase::Running) = (requested, *phase) {
            *ending = Some(Ending::Stop(cause));
            *phase = self.terminate();
        }
    }

    /// SIGTERM to the group; SIGKILL follows after the grace period.
    fn terminate(&self) -> Phase {
        self.tree.signal(Signal::SIGTERM);
        Phase::Stopping {
            kill_at: Instant::now() + self.grace,
        }
    }

    fn read_pipe(&mut self, index: usize, buf: &mut [u8]) {
        let Some(pipe) = self.pipes[index].as_mut() else {
            return;
        };
        match pipe.file.read(buf) {
            Ok(0) => self.close_pipe(index),
            Ok(n) => {
                pipe.carry.extend_from_slice(&buf[..n]);
                let complete = complete_utf8_prefix(&pipe.carry);
                let text = String::from_utf8_lossy(&pipe.carry[..complete]).into_owned();
                pipe.carry.drain(..complete);
                let stream = pipe.stream;
                self.push(stream, text);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => {
                tracing::warn!(process = %self.record.id, "reading {}: {e}", pipe.stream.as_str());
                self.close_pipe(index);
            }
        }
    }

    /// Closes our read end, keeping an unfinished UTF-8 tail as it is (lossily).
    fn close_pipe(&mut self, index: usize) {
        if let Some(pipe) = self.pipes[index].take()
            && !pipe.carry.is_empty()
        {
            let text = String::from_utf8_lossy(&pipe.carry).into_owned();
            self.push(pipe.stream, text);
        }
    }

    fn push(&self, stream: Stream, text: String) {
        if text.is_empty() {
            return;
        }
        self.record.lock().output.push(stream, text);
        self.record.changed.notify_all();
    }

    fn finish(
        &self,
        ending: Option<Ending>,
        status: Option<ExitStatus>,
        sigkilled: bool,
        mut notes: Vec<String>,
    ) {
        use std::os::unix::process::ExitStatusExt as _;
        let grace = self.grace.as_secs_f64();
        let how = if sigkilled {
            format!("SIGTERM to the process group, then SIGKILL after the {grace} s grace period")
        } else {
            "SIGTERM to the process group".to_owned()
        };
        let state = match ending {
            Some(Ending::TimedOut(limit)) => {
                notes.insert(
                    0,
                    format!("timed out after {} s; stopped with {how}", limit.as_secs()),
                );
                ProcessState::TimedOut
            }
            Some(Ending::Stop(StopCause::Request)) => {
                notes.insert(0, format!("stopped on request with {how}"));
                ProcessState::Terminated
            }
            Some(Ending::Stop(StopCause::Shutdown)) => {
                notes.insert(0, format!("stopped at shutdown of rho with {how}"));
                ProcessState::Terminated
            }
            Some(Ending::LeaderExited { .. }) | None => {
                let survivors = matches!(ending, Some(Ending::LeaderExited { survivors: true }));
                if let Some(signal) = status.and_then(|s| s.signal()) {
                    notes.insert(0, format!("the shell was ended by {}", signal_name(signal)));
                }
                if survivors {
                    notes.push(format!(
                        "processes the shell left running when it exited were stopped with {how}"
                    ));
                }
                ProcessState::Exited
            }
        };
        let mut record = self.record.lock();
        record.state = state;
        record.exit_code = status.and_then(|s| s.code());
        record.terminal_detail = (!notes.is_empty()).then(|| notes.join("; "));
        record.ended = Some(Instant::now());
        record.wake = None;
        drop(record);
        self.record.changed.notify_all();
        tracing::debug!(process = %self.record.id, state = state.as_str(), "process finished");
    }
}

fn signal_name(signal: i32) -> String {
    match Signal::try_from(signal) {
        Ok(known) => format!("signal {signal} ({})", known.as_str()),
        Err(_) => format!("signal {signal}"),
    }
}
