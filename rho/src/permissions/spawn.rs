//! Runs one short-lived helper process (a hook or the classifier): argv without a shell, a
//! cleared environment plus an explicit list, a bounded document on stdin, bounded captured
//! output, and a wall-clock timeout enforced on the whole process group.
//!
//! Invariant: the helper's process group is killed before its leader is reaped — on timeout
//! and after a normal exit alike — so the group id cannot be reused by an unrelated process
//! when we signal it, and nothing the helper started outlives its answer.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, waitid};
use nix::unistd::Pid;
use rho_policy::HookRun;

/// What to run and with what bounds.
pub(crate) struct HelperProcess<'a> {
    /// The program, already resolved against its base directory when relative.
    pub program: &'a Path,
    /// Arguments after the program (`argv[1..]`).
    pub args: &'a [String],
    /// Working directory.
    pub cwd: &'a Path,
    /// The complete environment; nothing else is inherited.
    pub env: &'a [(String, OsString)],
    /// Written to stdin, then stdin is closed.
    pub stdin: &'a [u8],
    /// Wall-clock limit from spawn.
    pub timeout: Duration,
    /// At most this many bytes of stdout and of stderr are kept (the rest is read and
    /// discarded, so the helper never dies of SIGPIPE and its exit status stays meaningful).
    pub keep_bytes: usize,
}

enum Event {
    Exited,
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
}

/// How many times a spawn is retried when the program is momentarily busy (ETXTBSY): another
/// thread of this process may have forked while a hook script was still open for writing, and
/// that child holds the write descriptor until it execs.
const BUSY_RETRIES: u32 = 5;

/// Runs the helper to completion or timeout and reports how it ended.
pub(crate) fn run_helper(spec: &HelperProcess<'_>) -> HookRun {
    let mut attempt = 0;
    let mut child = loop {
        let mut command = Command::new(spec.program);
        command
            .args(spec.args)
            .env_clear()
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .current_dir(spec.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        match command.spawn() {
            Ok(child) => break child,
            Err(err) if err.raw_os_error() == Some(libc::ETXTBSY) && attempt < BUSY_RETRIES => {
                attempt += 1;
                thread::sleep(Duration::from_millis(10 * u64::from(attempt)));
            }
            Err(err) => {
                return HookRun::SpawnFailed {
                    detail: format!("{}: {err}", spec.program.display()),
                };
            }
        }
    };
    let started = Instant::now();
    let Ok(raw_pid) = i32::try_from(child.id()) else {
        // Cannot happen on Linux (pids fit in i32); without a pid we cannot bound the helper.
        let _ = child.kill();
        let _ = child.wait();
        return HookRun::SpawnFailed {
            detail: "process id out of range".to_owned(),
        };
    };
    let pid = Pid::from_raw(raw_pid);

    let (tx, rx) = mpsc::channel::<Event>();
    if let Some(mut stdin) = child.stdin.take() {
        let document = spec.stdin.to_vec();
        // A helper that exits without reading its input makes this fail with EPIPE; that is
        // its choice and not an error of ours.
        thread::spawn(move || {
            let _ = stdin.write_all(&document);
        });
    }
    if let Some(stdout) = child.stdout.take() {
        let tx = tx.clone();
        let keep = spec.keep_bytes;
        thread::spawn(move || {
            let _ = tx.send(Event::Stdout(read_bounded(stdout, keep)));
        });
    }
    if let Some(stderr) = child.stderr.take() {
        let tx = tx.clone();
        let keep = spec.keep_bytes;
        thread::spawn(move || {
            let _ = tx.send(Event::Stderr(read_bounded(stderr, keep)));
        });
    }
    {
        let tx = tx.clone();
        // WNOWAIT: observe the exit without reaping, so the pid (and with it the group id)
        // stays ours until the group has been killed.
        thread::spawn(move || {
            while let Err(Errno::EINTR) =
                waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT)
            {}
            let _ = tx.send(Event::Exited);
        });
    }
    drop(tx);

    let deadline = started + spec.timeout;
    let mut exited = false;
    let mut stdout = None;
    let mut stderr = None;
    let mut timed_out = false;
    while !(exited && stdout.is_some() && stderr.is_some()) {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            timed_out = true;
            break;
        };
        match rx.recv_timeout(left) {
            Ok(Event::Exited) => {
                exited = true;
                // The leader is gone; anything it left behind in its group would keep the
                // pipes open, so end it now.
                let _ = killpg(pid, Signal::SIGKILL);
            }
            Ok(Event::Stdout(bytes)) => stdout = Some(bytes),
            Ok(Event::Stderr(bytes)) => stderr = Some(bytes),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                timed_out = true;
                break;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    // ESRCH here only means the group is already empty.
    let _ = killpg(pid, Signal::SIGKILL);
    let status = child.wait();
    if timed_out {
        return HookRun::TimedOut {
            after: spec.timeout,
        };
    }
    match status {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => HookRun::Exited {
                code,
                stdout: stdout.unwrap_or_default(),
                stderr: stderr.unwrap_or_default(),
            },
            (None, Some(signal)) => HookRun::Signaled { signal },
            (None, None) => HookRun::SpawnFailed {
                detail: format!("unexpected status {status}"),
            },
        },
        Err(err) => HookRun::SpawnFailed {
            detail: format!("cannot wait for the process: {err}"),
        },
    }
}

/// Reads `pipe` to its end, keeping the first `keep` bytes.
fn read_bounded(mut pipe: impl Read, keep: usize) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut chunk = [0_u8; 8192];
    loop {
        match pipe.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                let room = keep.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..n.min(room)]);
            }
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_bounded_keeps_a_prefix_and_consumes_the_rest() {
        let data = vec![b'x'; 20_000];
        let mut reader = std::io::Cursor::new(data);
        let kept = read_bounded(&mut reader, 8193);
        assert_eq!(kept.len(), 8193);
        assert_eq!(reader.position(), 20_000);
        assert_eq!(
            read_bounded(std::io::Cursor::new(b"ab".to_vec()), 8193),
            b"ab"
        );
    }

    fn run(script: &str, timeout: Duration) -> HookRun {
        let args = vec!["-c".to_owned(), script.to_owned()];
        run_helper(&HelperProcess {
            program: Path::new("/bin/sh"),
            args: &args,
            cwd: Path::new("/"),
            env: &[],
            stdin: b"hello",
            timeout,
            keep_bytes: 100,
        })
    }

    #[test]
    fn exit_status_output_and_stdin_are_reported() {
        let run = run("cat; echo err >&2; exit 3", Duration::from_secs(30));
        assert_eq!(
            run,
            HookRun::Exited {
                code: 3,
                stdout: b"hello".to_vec(),
                stderr: b"err\n".to_vec()
            }
        );
    }

    #[test]
    fn signal_and_missing_program_are_reported() {
        assert_eq!(
            run("kill -9 $$", Duration::from_secs(30)),
            HookRun::Signaled { signal: 9 }
        );
        let missing = run_helper(&HelperProcess {
            program: Path::new("/nonexistent/hook"),
            args: &[],
            cwd: Path::new("/"),
            env: &[],
            stdin: b"",
            timeout: Duration::from_secs(30),
            keep_bytes: 10,
        });
        assert!(
            matches!(&missing, HookRun::SpawnFailed { detail } if detail.contains("/nonexistent/hook")),
            "{missing:?}"
        );
    }

    #[test]
    fn a_helper_that_outlives_its_timeout_is_reported_as_timed_out() {
        let after = Duration::from_secs(1);
        assert_eq!(run("sleep 30", after), HookRun::TimedOut { after });
    }
}
