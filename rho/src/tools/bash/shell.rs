//! Runs one foreground shell command: `bash -c` in its own process group, stdin from
//! `/dev/null`, stdout and stderr interleaved on one pipe into a bounded capture, a
//! wall-clock timeout and cooperative cancellation.
//!
//! Each call's tree is contained (`crate::containment`): in its own cgroup where a delegated
//! cgroup v2 exists, else with the shell a child subreaper whose descendants this process
//! tracks. A descendant that leaves the group (`setsid`, a double fork) is killed with it.
//!
//! Invariant: however the command ends — exit, timeout, cancellation — its whole tree
//! (group and containment) is killed before the leader is reaped (so the group id cannot be
//! reused under us), and nothing it started outlives the call.

use std::ffi::OsString;
use std::io::{self, Read as _};
use std::os::fd::OwnedFd;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, waitid};
use nix::unistd::{Pid, pipe2};

use super::output::BoundedOutput;
use crate::workflow::plan::freeze::environment_policy;

/// The shell every command runs under.
pub const SHELL: &str = "/bin/bash";

/// How often a running command checks for cancellation.
const CANCEL_POLL: Duration = Duration::from_millis(20);

/// How long output is still read after the process group was killed: a process that left
/// the group (`setsid`) may hold the pipe open forever, and the call must still return.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// The environment a command gets: the host's, minus the credential patterns of
/// [`environment_policy`] (provider keys among them) and the configuration's
/// `[environment] exclude`.
pub fn child_environment(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
    extra_excludes: &[String],
) -> Vec<(OsString, OsString)> {
    let policy = environment_policy(extra_excludes, &[]);
    crate::permissions::credentials::filter_environment(&policy, vars)
}

/// One command to run.
#[derive(Debug)]
pub struct ShellRequest<'a> {
    /// The script handed to `bash -c`.
    pub command: &'a str,
    /// Working directory.
    pub cwd: &'a Path,
    /// The complete environment; nothing else is inherited.
    pub env: &'a [(OsString, OsString)],
    /// Wall-clock limit from spawn.
    pub timeout: Duration,
    /// Bytes of output kept (head and tail).
    pub output_limit: usize,
    /// Kernel confinement the shell applies before it runs (a read-only agent).
    pub confinement: Option<std::sync::Arc<crate::confinement::Confinement>>,
}

/// How the command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShellEnd {
    /// The shell exited with this status.
    Exited(i32),
    /// The shell was killed by this signal (not by us).
    Signaled(i32),
    /// The timeout passed; the process group was killed.
    TimedOut,
    /// The call was cancelled; the process group was killed.
    Cancelled,
}

/// What running the command produced.
#[derive(Debug)]
pub struct ShellOutcome {
    /// How it ended.
    pub end: ShellEnd,
    /// Interleaved stdout and stderr, bounded.
    pub output: BoundedOutput,
    /// Wall-clock time from spawn to the end.
    pub elapsed: Duration,
    /// A process outside the group still held the output pipe when reading stopped.
    pub pipe_held: bool,
}

/// Spawns `bash -c command` in `cwd` with exactly `env`, stdin from `/dev/null`, stdout and
/// stderr on `output`, in a new process group, inside `tree` when given.
///
/// This is the one place a foreground command is launched, kept small so that sandboxing
/// (a Landlock ruleset for read-only agents, for example) can be added to it alone.
pub fn spawn_shell(
    command: &str,
    cwd: &Path,
    env: &[(OsString, OsString)],
    output: OwnedFd,
    confinement: Option<&std::sync::Arc<crate::confinement::Confinement>>,
    tree: Option<&crate::containment::Tree>,
) -> io::Result<Child> {
    let stderr = output.try_clone()?;
    let mut cmd = Command::new(SHELL);
    cmd.arg("-c")
        .arg(command)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::from(output))
        .stderr(Stdio::from(stderr))
        .process_group(0);
    if let Some(confinement) = confinement {
        confinement.install(&mut cmd);
    }
    // Kept open until the child has joined the cgroup through it.
    let _join = match tree {
        Some(tree) => crate::containment::child::install(&mut cmd, tree)
            .map_err(|e| io::Error::other(e.to_string()))?,
        None => None,
    };
    // `cmd` owns the write ends; dropping it (on return) closes our copies so the reader sees
    // end-of-file once the command's group is gone.
    let child = cmd.spawn()?;
    if let Some(tree) = tree {
        let pid = i32::try_from(child.id()).map_err(io::Error::other)?;
        tree.started(pid, crate::workflow::exec::process_start_time(pid)?.0);
    }
    Ok(child)
}

/// A fresh containment for one call's tree, with the exec guardian running (it kills the
/// tree if this process dies); `None` (with a warning) where neither a cgroup nor the
/// subreaper fallback is available. An unusable `RHO_CONTAINMENT` is an error.
fn call_tree() -> io::Result<Option<crate::containment::Tree>> {
    crate::containment::mode().map_err(|e| io::Error::other(e.to_string()))?;
    let label = format!("bash-{}", uuid::Uuid::new_v4().simple());
    let tree = match crate::containment::contain(&label, None) {
        Ok(tree) => tree,
        Err(e) => {
            tracing::warn!(error = %e, "bash commands are contained by their process group only");
            return Ok(None);
        }
    };
    if let Err(e) = crate::workflow::exec::spawner::ensure_guardian() {
        tracing::warn!(error = %e, "bash commands will not be killed if rho dies");
    }
    Ok(Some(tree))
}

/// How long the end of a call waits for its killed tree to empty.
const TREE_KILL_WAIT: Duration = Duration::from_secs(5);

/// Kills the tree (without waiting) and the group.
fn kill_tree(pid: Pid, tree: Option<&crate::containment::Tree>) {
    if let Some(tree) = tree
        && let Err(e) = tree.kill()
    {
        tracing::warn!(error = %e, "cannot kill a bash command's tree");
    }
    let _ = killpg(pid, Signal::SIGKILL);
}

enum Event {
    Exited,
    Eof,
}

/// Runs `req` to its end. `is_cancelled` is polled while the command runs.
pub fn run_shell(
    req: &ShellRequest<'_>,
    is_cancelled: &dyn Fn() -> bool,
) -> io::Result<ShellOutcome> {
    let (read_end, write_end) = pipe2(OFlag::O_CLOEXEC).map_err(io::Error::from)?;
    let started = Instant::now();
    let tree = call_tree()?;
    let spawned = spawn_shell(
        req.command,
        req.cwd,
        req.env,
        write_end,
        req.confinement.as_ref(),
        tree.as_ref(),
    );
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            if let Some(tree) = &tree {
                let _ = tree.kill_and_wait(TREE_KILL_WAIT);
                let _ = tree.remove();
            }
            return Err(e);
        }
    };
    let pid = Pid::from_raw(i32::try_from(child.id()).map_err(io::Error::other)?);

    let output = Arc::new(Mutex::new(BoundedOutput::new(req.output_limit)));
    let (tx, rx) = mpsc::channel::<Event>();
    {
        let output = Arc::clone(&output);
        let tx = tx.clone();
        thread::spawn(move || {
            let mut pipe = std::fs::File::from(read_end);
            let mut chunk = [0_u8; 16 * 1024];
            loop {
                match pipe.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => {
                        if let Ok(mut out) = output.lock() {
                            out.push(&chunk[..n]);
                        }
                    }
                    Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            let _ = tx.send(Event::Eof);
        });
    }
    {
        let tx = tx.clone();
        // WNOWAIT: observe the exit without reaping, so the pid (and the group id) stays ours
        // until the group has been killed.
        thread::spawn(move || {
            while let Err(Errno::EINTR) =
                waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT)
            {}
            let _ = tx.send(Event::Exited);
        });
    }
    drop(tx);

    let deadline = started + req.timeout;
    let mut exited = false;
    let mut eof = false;
    let mut stopped: Option<ShellEnd> = None;
    while !exited || !eof {
        if stopped.is_none() {
            if is_cancelled() {
                stopped = Some(ShellEnd::Cancelled);
            } else if Instant::now() >= deadline {
                stopped = Some(ShellEnd::TimedOut);
            }
            if stopped.is_some() {
                kill_tree(pid, tree.as_ref());
            }
        }
        let wait = if exited {
            // The leader is gone and its group killed: give the pipe a short grace to drain.
            DRAIN_GRACE
        } else {
            deadline
                .saturating_duration_since(Instant::now())
                .min(CANCEL_POLL)
        };
        match rx.recv_timeout(wait) {
            Ok(Event::Exited) => {
                exited = true;
                // Whatever the leader left in its tree would keep the pipe open: end it.
                kill_tree(pid, tree.as_ref());
            }
            Ok(Event::Eof) => eof = true,
            Err(mpsc::RecvTimeoutError::Timeout) if exited => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    // Before the leader is reaped (its pid keeps the group id from reuse). ESRCH only means
    // the group is already empty.
    let emptied = tree
        .as_ref()
        .map_or(Ok(()), |t| t.kill_and_wait(TREE_KILL_WAIT));
    let _ = killpg(pid, Signal::SIGKILL);
    let status = child.wait()?;
    if let Some(tree) = &tree {
        match &emptied {
            Ok(()) => {
                if let Err(e) = tree.remove() {
                    tracing::warn!(error = %e, "cannot remove a bash command's cgroup");
                }
            }
            Err(e) => tracing::warn!(error = %e, "a bash command's tree outlived SIGKILL"),
        }
    }
    let elapsed = started.elapsed();
    let end = match stopped {
        Some(end) => end,
        None => match (status.code(), status.signal()) {
            (Some(code), _) => ShellEnd::Exited(code),
            (None, Some(signal)) => ShellEnd::Signaled(signal),
            (None, None) => ShellEnd::Signaled(0),
        },
    };
    let output = match Arc::try_unwrap(output) {
        Ok(mutex) => mutex
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
        // The reader thread is still blocked on a pipe held by an escaped process: copy
        // what it has so far.
        Err(shared) => {
            let guard = shared
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let mut copy = BoundedOutput::new(req.output_limit);
            copy.push(guard.render().as_bytes());
            copy
        }
    };
    Ok(ShellOutcome {
        end,
        output,
        elapsed,
        pipe_held: !eof,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn env() -> Vec<(OsString, OsString)> {
        vec![("PATH".into(), "/usr/bin:/bin".into())]
    }

    fn run(command: &str, timeout: Duration) -> ShellOutcome {
        let env = env();
        run_shell(
            &ShellRequest {
                command,
                cwd: Path::new("/"),
                env: &env,
                timeout,
                output_limit: 1000,
                confinement: None,
            },
            &|| false,
        )
        .unwrap()
    }

    #[test]
    fn provider_keys_and_credentials_never_reach_the_command() {
        let vars = [
            ("PATH", "/bin"),
            ("OPENAI_API_KEY", "k"),
            ("ANTHROPIC_API_KEY", "k"),
            ("RHO_LOCAL_API_KEY", "k"),
            ("GITHUB_TOKEN", "t"),
            ("MY_SECRET", "s"),
            ("HOME", "/root"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let env = child_environment(vars, &["MY_SECRET".to_owned()]);
        let names: Vec<_> = env.iter().map(|(k, _)| k.to_str().unwrap()).collect();
        assert_eq!(names, ["PATH", "HOME"]);
    }

    #[test]
    fn output_is_interleaved_and_status_reported() {
        let out = run("echo out; echo err >&2; exit 3", Duration::from_secs(30));
        assert_eq!(out.end, ShellEnd::Exited(3));
        assert_eq!(out.output.render(), "out\nerr\n");
        assert!(!out.pipe_held);
    }

    #[test]
    fn stdin_is_closed_and_env_is_exact() {
        let out = run(
            "read -r x; echo \"[$x][${HOME:-unset}]\"",
            Duration::from_secs(30),
        );
        assert_eq!(out.output.render(), "[][unset]\n");
    }

    #[test]
    fn timeout_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("marker");
        let cmd = format!("(sleep 2; touch {}) & sleep 30", marker.display());
        let out = run(&cmd, Duration::from_millis(300));
        assert_eq!(out.end, ShellEnd::TimedOut);
        assert!(out.elapsed < Duration::from_secs(10));
        thread::sleep(Duration::from_millis(2500));
        assert!(
            !marker.exists(),
            "a process of the group survived the timeout"
        );
    }

    #[test]
    fn background_children_do_not_outlive_a_normal_exit() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("marker");
        let cmd = format!("(sleep 1; touch {}) & echo started", marker.display());
        let out = run(&cmd, Duration::from_secs(30));
        assert_eq!(out.end, ShellEnd::Exited(0));
        assert_eq!(out.output.render(), "started\n");
        thread::sleep(Duration::from_millis(1500));
        assert!(!marker.exists());
    }

    #[test]
    fn cancellation_stops_the_command() {
        let flag = Arc::new(AtomicBool::new(false));
        let setter = Arc::clone(&flag);
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(200));
            setter.store(true, Ordering::SeqCst);
        });
        let env = env();
        let out = run_shell(
            &ShellRequest {
                command: "echo begun; sleep 30",
                cwd: Path::new("/"),
                env: &env,
                timeout: Duration::from_mins(1),
                output_limit: 1000,
                confinement: None,
            },
            &|| flag.load(Ordering::SeqCst),
        )
        .unwrap();
        assert_eq!(out.end, ShellEnd::Cancelled);
        assert_eq!(out.output.render(), "begun\n");
        assert!(out.elapsed < Duration::from_secs(10));
    }

    #[test]
    fn a_process_that_leaves_the_group_dies_with_the_call() {
        // The pause lets the background child leave the group before the leader exits.
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let cmd = format!(
            "setsid sleep 1000 & echo $! > {}; sleep 1; echo hi",
            pidfile.display()
        );
        let out = run(&cmd, Duration::from_secs(30));
        assert_eq!(out.end, ShellEnd::Exited(0));
        assert!(out.elapsed < Duration::from_secs(10));
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        if let Ok(probe) = crate::containment::contain("bash-probe", None) {
            let _ = probe.remove();
        } else {
            assert!(
                std::env::var_os("CI").is_none(),
                "containment is required under CI"
            );
            eprintln!("SKIPPED the escapee check: no containment on this machine");
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
            return;
        }
        assert!(!out.pipe_held, "nothing is left to hold the output");
        let gone =
            crate::workflow::exec::process_start_time(pid).map_or(true, |(_, state)| state == 'Z');
        assert!(gone, "the setsid descendant {pid} outlived the call");
    }
}
