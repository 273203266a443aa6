//! Shared harness for the `run_*` and `policy_e2e` integration tests: the built binaries, a
//! `rho` command with a cleared environment, a temporary `RHO_HOME` and workspace, and the
//! check that a run's store is always explainable by its journal. Every test file keeps its
//! own scenario helpers (extra `impl Env` blocks, workflow builders); only what is identical
//! everywhere lives here.
// Each test file compiles this module on its own and uses only part of it, so the unused rest
// would otherwise be reported as dead code in that file's crate.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use rho::workflow::journal;
use rho::workflow::state::{Event, State, replay};

/// `state.json` equals a replay of `events.jsonl` up to its `last_event_sequence`, and the
/// journal has no torn tail (the owner closed it). Returns the fully replayed state and the
/// journal.
pub fn assert_snapshot_matches_journal(run_dir: &Path) -> (State, Vec<Event>) {
    let contents = journal::read(&run_dir.join("events.jsonl")).unwrap();
    assert_eq!(
        contents.torn_bytes,
        0,
        "{}: the journal has a torn tail",
        run_dir.display()
    );
    let snapshot: State =
        serde_json::from_slice(&std::fs::read(run_dir.join("state.json")).unwrap()).unwrap();
    let full = replay(&contents.events).unwrap();
    assert!(
        snapshot.last_event_sequence <= full.last_event_sequence,
        "{}: state.json (record {}) is ahead of the journal (record {})",
        run_dir.display(),
        snapshot.last_event_sequence,
        full.last_event_sequence
    );
    let upto: Vec<Event> = contents
        .events
        .iter()
        .filter(|e| e.seq <= snapshot.last_event_sequence)
        .cloned()
        .collect();
    assert_eq!(
        replay(&upto).unwrap(),
        snapshot,
        "{}: state.json must equal a replay of the journal",
        run_dir.display()
    );
    (full, contents.events)
}

/// The `rho` binary under test.
pub fn rho_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rho"))
}

/// The planner worker next to it (built by `cargo build -p rho-planner-worker`).
pub fn worker_bin() -> PathBuf {
    let path = rho_bin().with_file_name("rho-planner-worker");
    assert!(
        path.exists(),
        "build the planner worker first: cargo build -p rho-planner-worker ({})",
        path.display()
    );
    path
}

/// The exit code of `out`, or -1 when it ended by a signal.
pub fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

/// Stdout followed by stderr, for assertion messages and text checks.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `rho ARGS` run in `ws` with only `RHO_HOME=home`, `HOME` (its parent), a minimal `PATH`
/// and the planner worker in the environment, and stdin closed.
pub fn rho_command(home: &Path, ws: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(rho_bin());
    cmd.args(args)
        .current_dir(ws)
        .env_clear()
        .env("RHO_HOME", home)
        .env("HOME", home.parent().unwrap())
        .env("PATH", "/usr/bin:/bin")
        .env("RHO_PLANNER_WORKER", worker_bin())
        .stdin(Stdio::null());
    cmd
}

/// A temporary directory holding an empty private `home` (used as `RHO_HOME`) and an empty
/// workspace `ws` (canonical path). Test files add their own helpers in further `impl Env`
/// blocks.
pub struct Env {
    pub _dir: tempfile::TempDir,
    pub home: PathBuf,
    pub ws: PathBuf,
}

impl Env {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        std::fs::create_dir(&home).unwrap();
        std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
        let ws = ws.canonicalize().unwrap();
        Env {
            _dir: dir,
            home,
            ws,
        }
    }

    pub fn command(&self, args: &[&str]) -> Command {
        rho_command(&self.home, &self.ws, args)
    }

    pub fn rho(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Writes `text` to `rel` in the workspace, creating its parent directories.
    pub fn write(&self, rel: &str, text: &str) {
        let path = self.ws.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// `rho workflow plan FILE`, which must succeed; returns the plan id it printed.
    pub fn plan(&self, file: &str) -> String {
        let out = self.rho(&["workflow", "plan", file]);
        assert_eq!(code(&out), 0, "{}", text(&out));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("plan_id: "))
            .unwrap()
            .to_owned()
    }

    /// The ids of the runs in the store (hidden entries left out).
    pub fn run_ids(&self) -> BTreeSet<String> {
        std::fs::read_dir(self.home.join("workflows/runs"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| !n.starts_with('.'))
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn run_dir(&self, id: &str) -> PathBuf {
        self.home.join("workflows/runs").join(id)
    }
}

/// A `command(...)` node with the usual cwd, timeout and output cap; `extra` is appended to
/// its arguments (empty or starting with `, `).
pub fn node(name: &str, extra: &str, argv: &str) -> String {
    format!(
        "command(name = \"{name}\", argv = {argv}, cwd = \".\", timeout_seconds = 60, max_output_bytes = 4096{extra})"
    )
}

/// A `rho` process whose stdin, stdout and stderr are one pseudo-terminal (as in an
/// interactive shell), with everything it writes collected by a reader thread.
pub struct Terminal {
    child: std::process::Child,
    master: std::sync::Arc<std::os::fd::OwnedFd>,
    output: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Terminal {
    /// Starts `cmd` on a new pseudo-terminal of `cols` columns.
    pub fn spawn(mut cmd: Command, cols: u16) -> Self {
        use std::os::fd::AsFd as _;
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{Arc, Mutex};
        let size = nix::pty::Winsize {
            ws_row: 40,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pty = nix::pty::openpty(Some(&size), None).unwrap();
        for fd in [&pty.master, &pty.slave] {
            // Not leaked into processes other tests start meanwhile.
            nix::fcntl::fcntl(
                fd.as_fd(),
                nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
            )
            .unwrap();
        }
        cmd.stdin(Stdio::from(pty.slave.try_clone().unwrap()))
            .stdout(Stdio::from(pty.slave.try_clone().unwrap()))
            .stderr(Stdio::from(pty.slave));
        let child = cmd.spawn().unwrap();
        let master = Arc::new(pty.master);
        let output = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (master, output, stop) =
                (Arc::clone(&master), Arc::clone(&output), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while !stop.load(Ordering::SeqCst) {
                    let mut fds = [nix::poll::PollFd::new(
                        master.as_fd(),
                        nix::poll::PollFlags::POLLIN,
                    )];
                    match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(50u16)) {
                        Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
                        Ok(_) => {}
                        Err(_) => return,
                    }
                    match nix::unistd::read(master.as_fd(), &mut buf) {
                        Ok(0) | Err(_) => return, // EIO once the terminal's last user is gone
                        Ok(n) => output.lock().unwrap().extend_from_slice(&buf[..n]),
                    }
                }
            })
        };
        Terminal {
            child,
            master,
            output,
            stop,
            reader: Some(reader),
        }
    }

    /// Everything written so far.
    pub fn output(&self) -> String {
        String::from_utf8_lossy(&self.output.lock().unwrap()).into_owned()
    }

    /// Waits (generously) until the output from byte `from` on contains `needle`; returns the
    /// byte offset just past it.
    pub fn wait_for(&self, from: usize, needle: &str) -> usize {
        let deadline = std::time::Instant::now() + std::time::Duration::from_mins(1);
        loop {
            let out = self.output();
            if let Some(at) = out.get(from..).and_then(|rest| rest.find(needle)) {
                return from + at + needle.len();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "gave up waiting for {needle:?} in {out:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Types `text` at the terminal.
    pub fn type_in(&self, text: &str) {
        use std::os::fd::AsFd as _;
        nix::unistd::write(self.master.as_fd(), text.as_bytes()).unwrap();
    }

    /// Waits for the process to exit and for its last output; returns both.
    pub fn finish(mut self) -> (std::process::ExitStatus, String) {
        use std::sync::atomic::Ordering;
        let status = self.child.wait().unwrap();
        // Drain what is still buffered in the terminal (a bound, not a timing assertion).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let mut seen = usize::MAX;
        while std::time::Instant::now() < deadline {
            let now = self.output.lock().unwrap().len();
            if now == seen {
                break;
            }
            seen = now;
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        self.stop.store(true, Ordering::SeqCst);
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        (status, self.output())
    }
}
