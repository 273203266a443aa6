//! The background process manager under the subreaper fallback (selected for this whole
//! test process, as `RHO_CONTAINMENT=subreaper` does for `rho`): a descendant that leaves
//! the tree's process group with `setsid` and keeps no pipe open still dies with the tree,
//! on the leader's exit and on `stop`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};

use rho::containment::{self, Mode};
use rho::process::{ProcessConfig, ProcessLimits, ProcessManager, ProcessState};

/// The manager of a fresh workspace, with the fallback selected; `None` (after a loud
/// message) where the fallback cannot work and nothing requires it.
fn manager() -> Option<(tempfile::TempDir, ProcessManager)> {
    assert!(
        containment::select_mode(Mode::Subreaper),
        "the mode was settled before the test selected the fallback"
    );
    if let Err(e) = containment::tracked::available() {
        assert!(
            std::env::var_os("CI").is_none() && std::env::var_os("RHO_REQUIRE_SANDBOX").is_none(),
            "the subreaper fallback is required here: {e}"
        );
        eprintln!("SKIPPED (no subreaper fallback on this machine): {e}");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let manager = ProcessManager::new(ProcessConfig {
        workspace_root: dir.path().to_path_buf(),
        environment: vec![(
            OsString::from("PATH"),
            OsString::from("/usr/local/bin:/usr/bin:/bin"),
        )],
        limits: ProcessLimits::default(),
        confinement: None,
    })
    .unwrap();
    Some((dir, manager))
}

/// A command that starts `sh` in a new session writing its pid to `pid_file`, with every
/// stream on `/dev/null`, and waits until it has.
fn escaping_command(pid_file: &Path, then: &str) -> String {
    format!(
        "setsid sh -c 'echo $$ > {f}; exec sleep 300' </dev/null >/dev/null 2>&1 & \
         while [ ! -s {f} ]; do sleep 0.01; done; {then}",
        f = pid_file.display()
    )
}

fn read_pid(path: &Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "{} never written",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn assert_dies(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z ")) {
        if Instant::now() > deadline {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            panic!("the setsid descendant {pid} survived its tree");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_terminal(manager: &ProcessManager, id: &str) -> ProcessState {
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        let snap = manager
            .poll(id, None, Duration::from_secs(5), usize::MAX)
            .unwrap();
        if snap.state != ProcessState::Running {
            return snap.state;
        }
        assert!(Instant::now() < deadline, "never ended: {snap:?}");
    }
}

#[test]
fn without_a_cgroup_a_setsid_descendant_dies_when_the_leader_exits() {
    let Some((dir, manager)) = manager() else {
        return;
    };
    let pid_file = dir.path().join("escaped.pid");
    let started = manager
        .start(&escaping_command(&pid_file, "echo leader done"), None)
        .unwrap();
    assert_eq!(
        wait_terminal(&manager, &started.process_id),
        ProcessState::Exited
    );
    assert_dies(read_pid(&pid_file));
}

#[test]
fn without_a_cgroup_stop_kills_a_setsid_descendant() {
    let Some((dir, manager)) = manager() else {
        return;
    };
    let pid_file = dir.path().join("escaped.pid");
    let started = manager
        .start(&escaping_command(&pid_file, "exec sleep 300"), None)
        .unwrap();
    let pid = read_pid(&pid_file);
    manager.stop(&started.process_id).unwrap();
    assert_dies(pid);
}
