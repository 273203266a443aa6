//! A shell command's process tree: launched through the platform shell in its own process
//! group, signalled as a group, and reaped only after the group was killed.
//!
//! These pieces are meant to be shared by every tool that runs a shell command for a model
//! (the background process manager, a foreground `bash` tool): [`launch_shell`] starts
//! `/bin/sh -c COMMAND` through the executor's spawner (own process group, stdin on
//! `/dev/null`, stdout and stderr on pipes, default signal dispositions, descriptors above 2
//! closed, a parent-death signal, and the guardian that kills the group if `rho` itself dies),
//! [`ShellTree::signal`] reaches every process of the group, and [`ShellTree::kill_and_reap`]
//! ends it.
//!
//! Invariant: the group is sent SIGKILL and released from the guardian before its leader is
//! reaped, so no signal can ever reach a reused process group id, and dropping a `ShellTree`
//! that was not reaped kills and reaps it (an early return never leaks a running tree).

use std::ffi::{CString, OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::ExitStatus;

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::{Pid, pipe2};

use crate::workflow::exec::ExecError;
use crate::workflow::exec::spawner::{self, GuardSlot, LaunchRequest, above_stdio};
use crate::workflow::plan::freeze::environment_policy;

/// The platform shell every command runs through.
pub const SHELL: &str = "/bin/sh";

/// The environment a shell command inherits: `vars` without the credential variables of
/// the built-in exclusion list (provider keys such as `OPENAI_API_KEY`, `ANTHROPIC_API_KEY`,
/// `RHO_*_API_KEY`, tokens, passwords) nor those matching `extra_excludes` (the user's
/// `[environment] exclude`), and without names that cannot be passed (empty, or containing
/// `=` or NUL). The same rules as for workflow command nodes.
pub fn child_environment(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
    extra_excludes: &[String],
) -> Vec<(OsString, OsString)> {
    let policy = environment_policy(extra_excludes, &[]);
    vars.into_iter()
        .filter(|(name, value)| {
            let bytes = name.as_bytes();
            !bytes.is_empty()
                && !bytes.contains(&b'=')
                && !bytes.contains(&0)
                && !value.as_bytes().contains(&0)
                && !crate::permissions::credentials::is_withheld(&policy, name, value)
        })
        .collect()
}

/// A launched shell command: the leader's pid (also the group id) and the read ends of its
/// output pipes.
#[derive(Debug)]
pub struct ShellTree {
    pid: i32,
    pidfd: Option<OwnedFd>,
    slot: Option<GuardSlot>,
    reaped: bool,
    /// The tree's containment (its own cgroup where a delegated cgroup v2 hierarchy exists,
    /// else its tracked descendants): descendants that leave the process group (`setsid`,
    /// double forks) stay inside and die with the tree.
    cgroup: Option<crate::containment::Tree>,
}

/// The running tree and its output pipes (non-blocking read ends).
#[derive(Debug)]
pub struct LaunchedShell {
    /// The process tree.
    pub tree: ShellTree,
    /// Read end of the child's standard output.
    pub stdout: File,
    /// Read end of the child's standard error.
    pub stderr: File,
}

fn setup(what: &'static str) -> impl Fn(io::Error) -> ExecError {
    move |source| ExecError::Setup { what, source }
}

fn c_string(bytes: &[u8], what: &'static str) -> Result<CString, ExecError> {
    CString::new(bytes).map_err(|_| ExecError::Setup {
        what,
        source: io::Error::new(io::ErrorKind::InvalidInput, "contains a NUL byte"),
    })
}

/// Starts `/bin/sh -c command` in `cwd` with exactly `env`, in a new process group, with
/// stdin on `/dev/null` and stdout and stderr on fresh pipes.
pub fn launch_shell(
    command: &str,
    cwd: &Path,
    env: &[(OsString, OsString)],
    confinement: Option<std::sync::Arc<crate::confinement::Confinement>>,
) -> Result<LaunchedShell, ExecError> {
    let argv = vec![
        c_string(SHELL.as_bytes(), "the shell path")?,
        c_string(b"-c", "the shell flag")?,
        c_string(command.as_bytes(), "the command")?,
    ];
    let envp = env
        .iter()
        .map(|(name, value)| {
            let mut entry = name.clone();
            entry.push("=");
            entry.push(value);
            c_string(entry.as_bytes(), "an environment variable")
        })
        .collect::<Result<Vec<_>, _>>()?;
    let shell = above_stdio(OwnedFd::from(
        File::open(SHELL).map_err(setup("opening /bin/sh"))?,
    ))
    .map_err(setup("opening /bin/sh"))?;
    let dir = above_stdio(OwnedFd::from(
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(cwd)
            .map_err(setup("opening the working directory"))?,
    ))
    .map_err(setup("opening the working directory"))?;
    let stdin = above_stdio(OwnedFd::from(
        File::open("/dev/null").map_err(setup("/dev/null"))?,
    ))
    .map_err(setup("/dev/null"))?;
    let pipe = |what| -> Result<(OwnedFd, OwnedFd), ExecError> {
        let (read, write) = pipe2(OFlag::O_CLOEXEC).map_err(|e| setup(what)(e.into()))?;
        fcntl(&read, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).map_err(|e| setup(what)(e.into()))?;
        Ok((read, above_stdio(write).map_err(setup(what))?))
    };
    // An unusable RHO_CONTAINMENT is refused, not ignored.
    crate::containment::mode().map_err(|e| ExecError::Setup {
        what: "choosing how to contain the shell",
        source: io::Error::other(e.to_string()),
    })?;
    let (out_r, out_w) = pipe("stdout pipe")?;
    let (err_r, err_w) = pipe("stderr pipe")?;
    let (cgroup, join) = tree_cgroup();
    let child = spawner::launch(LaunchRequest {
        argv,
        envp,
        exec_fd: shell.as_raw_fd(),
        script_fd: None,
        cwd_fd: dir.as_raw_fd(),
        stdin_fd: stdin.as_raw_fd(),
        stdout_fd: out_w.as_raw_fd(),
        stderr_fd: err_w.as_raw_fd(),
        confinement,
        cgroup_fd: join.as_ref().map(AsRawFd::as_raw_fd),
        tree_tag: cgroup
            .as_ref()
            .and_then(crate::containment::Tree::leader_tag),
        ignored_signals: spawner::ignored_signals(),
    })?;
    if let Some(tree) = &cgroup {
        match crate::workflow::exec::process_start_time(child.pid) {
            Ok((start, _)) => tree.started(child.pid, start),
            Err(e) => tracing::warn!(pid = child.pid, "cannot read the shell's start time: {e}"),
        }
    }
    drop(join);
    // Only the tree holds the write ends now: end of file means every holder is gone.
    drop((shell, dir, stdin, out_w, err_w));
    tracing::debug!(pid = child.pid, "background shell started");
    Ok(LaunchedShell {
        tree: ShellTree {
            pid: child.pid,
            pidfd: child.pidfd,
            slot: Some(child.slot),
            reaped: false,
            cgroup,
        },
        stdout: File::from(out_r),
        stderr: File::from(err_r),
    })
}

/// A fresh containment for one tree (a cgroup, else tracked descendants) and the
/// directory of its cgroup, which its leader is created in; with neither, the group, the
/// parent-death signal and the guardian are the containment (a `setsid` descendant can then
/// escape).
fn tree_cgroup() -> (Option<crate::containment::Tree>, Option<OwnedFd>) {
    let label = format!("process-{}", uuid::Uuid::new_v4().simple());
    let tree = match crate::containment::contain(&label, None) {
        Ok(tree) => tree,
        Err(e) => {
            tracing::warn!(error = %e, "background shells are contained by their process group only");
            return (None, None);
        }
    };
    match tree.dir_handle() {
        Ok(join) => (Some(tree), join),
        Err(e) => {
            tracing::warn!(error = %e, "cannot open a background shell's cgroup for joining");
            let _ = tree.remove();
            (None, None)
        }
    }
}

impl ShellTree {
    /// The leader's pid, which is also the process group id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// A descriptor that becomes readable when the leader exits (`None` on kernels without
    /// `pidfd_open`; use [`ShellTree::peek_exit`] periodically then).
    pub fn pidfd(&self) -> Option<BorrowedFd<'_>> {
        self.pidfd.as_ref().map(AsFd::as_fd)
    }

    /// Sends `signal` to every process of the group. A group that is already empty is not an
    /// error.
    pub fn signal(&self, signal: Signal) {
        if self.reaped {
            return;
        }
        match killpg(Pid::from_raw(self.pid), signal) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(e) => tracing::warn!(pgid = self.pid, "cannot send {signal} to the group: {e}"),
        }
        if let Some(cgroup) = &self.cgroup {
            cgroup.signal_members(signal as i32);
        }
    }

    /// The leader's exit, if it has exited, without reaping it (the group id stays reserved).
    pub fn peek_exit(&self) -> Option<ExitStatus> {
        if self.reaped {
            return None;
        }
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        match waitid(Id::Pid(Pid::from_raw(self.pid)), flags) {
            Ok(WaitStatus::Exited(_, code)) => Some(ExitStatus::from_raw((code & 0xff) << 8)),
            Ok(WaitStatus::Signaled(_, signal, _)) => Some(ExitStatus::from_raw(signal as i32)),
            _ => None,
        }
    }

    /// Whether a process of the group other than a zombie is still there.
    pub fn group_alive(&self) -> bool {
        !self.reaped && crate::workflow::exec::group_alive(self.pid)
    }

    /// Whether a process of the tree's containment (descendants that left the group
    /// included) is still there; `false` without one.
    pub fn cgroup_populated(&self) -> bool {
        self.cgroup
            .as_ref()
            .is_some_and(crate::containment::Tree::populated)
    }

    /// Kills the whole group, releases it from the guardian, then reaps the leader (waiting
    /// for it if SIGKILL has not landed yet). Returns the leader's exit status the first
    /// time, `None` after.
    pub fn kill_and_reap(&mut self) -> Option<ExitStatus> {
        if self.reaped {
            return None;
        }
        // The tree first: a tracked tree is frozen and walked before its members die.
        if let Some(cgroup) = &self.cgroup
            && let Err(e) = cgroup.kill_and_wait(CGROUP_KILL_WAIT)
        {
            tracing::warn!(error = %e, "a background shell's tree is not empty yet");
        }
        self.signal(Signal::SIGKILL);
        if let Some(slot) = self.slot.take() {
            slot.release();
        }
        self.reaped = true;
        let status = spawner::reap_blocking(self.pid).map(ExitStatus::from_raw);
        if let Some(cgroup) = &self.cgroup
            && let Err(e) = cgroup.remove()
        {
            tracing::warn!(error = %e, "cannot remove a background shell's cgroup");
        }
        status
    }
}

/// How long killing a tree's cgroup may take before it is reported as not empty.
const CGROUP_KILL_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl Drop for ShellTree {
    fn drop(&mut self) {
        if !self.reaped {
            tracing::debug!(pgid = self.pid, "killing an unfinished shell tree on drop");
            self.kill_and_reap();
        }
    }
}

/// Kills (SIGKILL) every process outside our own that still holds one of `pipes` open: a
/// descendant that left the process group (`setsid`) but kept the output pipes would
/// otherwise run on unseen. Returns the pids it signalled.
pub fn kill_pipe_holders(pipes: &[&File]) -> Vec<i32> {
    use std::os::unix::fs::MetadataExt as _;
    let targets: Vec<String> = pipes
        .iter()
        .filter_map(|file| file.metadata().ok())
        .map(|meta| format!("pipe:[{}]", meta.ino()))
        .collect();
    if targets.is_empty() {
        return Vec::new();
    }
    let me = std::process::id();
    let mut killed = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return killed;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|link| {
                let link: &OsStr = link.as_os_str();
                targets.iter().any(|t| link == OsStr::new(t))
            })
        });
        if holds && let Ok(pid) = i32::try_from(pid) {
            match nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL) {
                Ok(()) => killed.push(pid),
                Err(e) => tracing::warn!(pid, "cannot kill a holder of the output pipes: {e}"),
            }
        }
    }
    killed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn provider_keys_and_credentials_never_reach_the_child() {
        let vars = os(&[
            ("PATH", "/usr/bin"),
            ("HOME", "/home/u"),
            ("OPENAI_API_KEY", "sk-1"),
            ("ANTHROPIC_API_KEY", "sk-2"),
            ("RHO_OPENAI_API_KEY", "sk-3"),
            ("GITHUB_TOKEN", "t"),
            ("MY_COMPANY_SECRET", "s"),
            ("KEEP_ME", "1"),
        ]);
        let kept = child_environment(vars, &["KEEP_*X".to_owned(), "HOME".to_owned()]);
        let names: Vec<_> = kept.iter().map(|(k, _)| k.to_str().unwrap()).collect();
        assert_eq!(names, ["PATH", "KEEP_ME"]);
    }

    #[test]
    fn names_that_cannot_be_passed_are_left_out() {
        let vars = os(&[("", "x"), ("A=B", "x"), ("OK", "y")]);
        let kept = child_environment(vars, &[]);
        assert_eq!(kept, os(&[("OK", "y")]));
    }
}
