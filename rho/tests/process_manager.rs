//! The background process manager with real shells: retention larger than the caps, stale
//! cursors, waits that wake on output and exit, timeouts, stop and leader exit killing the
//! whole tree (a backgrounded grandchild included), every limit's typed error, sixteen noisy
//! processes at once, and shutdown stopping every tree.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rho::process::tree::child_environment;
use rho::process::{
    ProcessConfig, ProcessError, ProcessLimits, ProcessManager, ProcessState, Snapshot, Stream,
};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn environment() -> Vec<(OsString, OsString)> {
    child_environment(
        [
            ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
            ("OPENAI_API_KEY".into(), "sk-secret".into()),
            ("RHO_ANTHROPIC_API_KEY".into(), "sk-secret".into()),
            ("VISIBLE_TO_CHILD".into(), "yes".into()),
        ],
        &[],
    )
}

fn manager_in(root: &Path, limits: ProcessLimits) -> ProcessManager {
    ProcessManager::new(ProcessConfig {
        workspace_root: root.to_path_buf(),
        environment: environment(),
        limits,
        confinement: None,
    })
    .unwrap()
}

fn manager(limits: ProcessLimits) -> (tempfile::TempDir, ProcessManager) {
    let dir = tempfile::tempdir().unwrap();
    let manager = manager_in(dir.path(), limits);
    (dir, manager)
}

/// Polls with waits until the process is finished; returns the last snapshot and every
/// chunk text read, per stream.
fn run_to_end(manager: &ProcessManager, id: &str) -> (Snapshot, String, String) {
    let mut cursor = None;
    let (mut out, mut err) = (String::new(), String::new());
    let deadline = Instant::now() + Duration::from_mins(2);
    loop {
        let snap = manager.poll(id, cursor, secs(30), usize::MAX).unwrap();
        for chunk in &snap.chunks {
            match chunk.stream {
                Stream::Stdout => out.push_str(&chunk.text),
                Stream::Stderr => err.push_str(&chunk.text),
            }
        }
        cursor = Some(snap.next_cursor);
        if snap.state.is_terminal() && !snap.output_pending {
            return (snap, out, err);
        }
        assert!(Instant::now() < deadline, "{id} did not finish: {snap:?}");
    }
}

fn wait_terminal(manager: &ProcessManager, id: &str) -> Snapshot {
    let deadline = Instant::now() + Duration::from_mins(2);
    let mut cursor = None;
    loop {
        // From the newest cursor: the wait ends on new output or on the exit.
        let snap = manager.poll(id, cursor, secs(30), 0).unwrap();
        if snap.state.is_terminal() {
            return snap;
        }
        cursor = Some(snap.available_cursor);
        assert!(Instant::now() < deadline, "{id} did not finish: {snap:?}");
    }
}

/// Whether `pid` is gone or a zombie within a few seconds (a reparented zombie may wait
/// for a container init that never reaps).
fn eventually_gone(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let gone = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .is_some_and(|state| state == "Z" || state == "X"),
        };
        if gone {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The first line of stdout, once the process wrote it.
fn first_stdout_line(manager: &ProcessManager, id: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut text = String::new();
    let mut cursor = None;
    loop {
        let snap = manager.poll(id, cursor, secs(5), usize::MAX).unwrap();
        cursor = Some(snap.next_cursor);
        for chunk in snap.chunks.iter().filter(|c| c.stream == Stream::Stdout) {
            text.push_str(&chunk.text);
        }
        if let Some((line, _)) = text.split_once('\n') {
            return line.to_owned();
        }
        assert!(Instant::now() < deadline, "no line from {id}: {snap:?}");
    }
}

fn retained_bytes(manager: &ProcessManager, id: &str) -> (Snapshot, u64) {
    let snap = manager.poll(id, Some(0), secs(0), usize::MAX).unwrap();
    let bytes = snap.chunks.iter().map(|c| c.text.len() as u64).sum();
    (snap, bytes)
}

#[test]
fn output_larger_than_retention_keeps_first_chunk_and_counts_every_dropped_byte() {
    let limits = ProcessLimits {
        max_output_bytes: 4096,
        max_output_chunks: 64,
        ..ProcessLimits::default()
    };
    let (_dir, manager) = manager(limits);
    let script = "echo FIRST; sleep 0.2; i=0; while [ $i -lt 2000 ]; do echo line-$i; \
                  i=$((i+1)); done";
    let started = manager.start(script, None).unwrap();
    let end = wait_terminal(&manager, &started.process_id);
    assert_eq!(end.state, ProcessState::Exited);
    assert_eq!(end.exit_code, Some(0));
    let total: usize = "FIRST\n".len()
        + (0..2000)
            .map(|i| format!("line-{i}\n").len())
            .sum::<usize>();
    let (snap, retained) = retained_bytes(&manager, &started.process_id);
    assert!(retained <= 4096, "retained {retained} bytes");
    assert!(snap.chunks.len() <= 64);
    assert!(snap.truncated);
    assert_eq!(snap.dropped_bytes + retained, total as u64, "{snap:?}");
    assert_eq!(snap.first_cursor, 0);
    assert_eq!(snap.chunks[0].cursor, 0);
    assert_eq!(snap.chunks[0].text, "FIRST\n");
    assert!(snap.chunks.last().unwrap().text.ends_with("line-1999\n"));
    assert!(snap.chunks[1].cursor > 1, "a gap follows the first chunk");
    assert_eq!(snap.next_cursor, snap.available_cursor);
    assert!(!snap.output_pending);
}

#[test]
fn three_megabytes_stay_within_the_default_retention() {
    let (_dir, manager) = manager(ProcessLimits::default());
    let started = manager
        .start("head -c 3000000 /dev/zero | tr '\\0' x", None)
        .unwrap();
    let end = wait_terminal(&manager, &started.process_id);
    assert_eq!(end.exit_code, Some(0));
    let (snap, retained) = retained_bytes(&manager, &started.process_id);
    assert!(retained <= 1024 * 1024, "retained {retained}");
    assert!(retained > 900 * 1024, "retained only {retained}");
    assert_eq!(snap.dropped_bytes + retained, 3_000_000);
    assert!(snap.truncated);
}

#[test]
fn paging_reports_output_pending_until_the_last_window() {
    let (_dir, manager) = manager(ProcessLimits::default());
    let started = manager
        .start("for i in 1 2 3 4 5 6; do echo $i; sleep 0.05; done", None)
        .unwrap();
    wait_terminal(&manager, &started.process_id);
    let first = manager
        .poll(&started.process_id, Some(0), secs(0), 1)
        .unwrap();
    assert_eq!(first.chunks.len(), 1);
    assert!(first.output_pending);
    assert!(!first.truncated);
    let rest = manager
        .poll(
            &started.process_id,
            Some(first.next_cursor),
            secs(0),
            usize::MAX,
        )
        .unwrap();
    assert!(!rest.output_pending);
    assert_eq!(rest.next_cursor, rest.available_cursor);
    let all: String = first
        .chunks
        .iter()
        .chain(&rest.chunks)
        .map(|c| c.text.as_str())
        .collect();
    assert_eq!(all, "1\n2\n3\n4\n5\n6\n");
}

#[test]
fn stale_cursor_is_reported_and_advanced() {
    let limits = ProcessLimits {
        max_output_chunks: 8,
        ..ProcessLimits::default()
    };
    let (_dir, manager) = manager(limits);
    let started = manager
        .start(
            "i=0; while [ $i -lt 30 ]; do echo $i; i=$((i+1)); sleep 0.02; done",
            None,
        )
        .unwrap();
    wait_terminal(&manager, &started.process_id);
    let snap = manager
        .poll(&started.process_id, Some(1), secs(0), usize::MAX)
        .unwrap();
    assert!(
        snap.available_cursor >= 10,
        "the child should have produced many chunks: {snap:?}"
    );
    assert_eq!(snap.stale_cursor, Some(1));
    assert_eq!(snap.chunks.len(), 7, "first chunk is not re-sent: {snap:?}");
    assert_eq!(snap.chunks[0].cursor, snap.available_cursor - 7);
    assert_eq!(snap.next_cursor, snap.available_cursor);
    assert!(snap.truncated);
    assert!(snap.chunks.last().unwrap().text.ends_with("29\n"));
}

#[test]
fn wait_seconds_wakes_on_new_output_and_on_exit() {
    let (_dir, manager) = manager(ProcessLimits::default());
    let started = manager.start("sleep 1; echo late; sleep 1", None).unwrap();
    assert_eq!(started.state, ProcessState::Running);
    let before = Instant::now();
    let snap = manager
        .poll(
            &started.process_id,
            Some(started.next_cursor),
            secs(20),
            usize::MAX,
        )
        .unwrap();
    let waited = before.elapsed();
    assert_eq!(snap.chunks.len(), 1, "{snap:?}");
    assert_eq!(snap.chunks[0].text, "late\n");
    assert_eq!(snap.state, ProcessState::Running);
    assert!(
        waited < Duration::from_secs(10),
        "woke only after {waited:?}"
    );
    // Nothing more is written: the next wait ends with the exit.
    let before = Instant::now();
    let end = manager
        .poll(
            &started.process_id,
            Some(snap.next_cursor),
            secs(20),
            usize::MAX,
        )
        .unwrap();
    assert!(before.elapsed() < Duration::from_secs(10));
    assert_eq!(end.state, ProcessState::Exited);
    assert!(end.chunks.is_empty());
    // A zero wait returns at once, even with nothing new.
    let instant = manager
        .poll(
            &started.process_id,
            Some(end.next_cursor),
            secs(0),
            usize::MAX,
        )
        .unwrap();
    assert!(instant.chunks.is_empty());
}

#[test]
fn timeout_ends_timed_out_with_the_tree_killed() {
    let (_dir, manager) = manager(ProcessLimits::default());
    let started = manager
        .start("sleep 300 & echo $!; sleep 300", Some(1))
        .unwrap();
    let grandchild: i32 = first_stdout_line(&manager, &started.process_id)
        .parse()
        .unwrap();
    let end = wait_terminal(&manager, &started.process_id);
    assert_eq!(end.state, ProcessState::TimedOut);
    assert!(end.runtime_seconds >= 1.0, "{end:?}");
    assert_eq!(end.exit_code, None);
    let detail = end.terminal_detail.unwrap();
    assert!(detail.contains("timed out after 1 s"), "{detail}");
    assert!(
        eventually_gone(grandchild),
        "grandchild {grandchild} survived"
    );
}

#[test]
fn stop_kills_a_backgrounded_grandchild() {
    let (_dir, manager) = manager(ProcessLimits::default());
    let started = manager.start("sleep 300 & echo $!; wait", None).unwrap();
    let grandchild: i32 = first_stdout_line(&manager, &started.process_id)
        .parse()
        .unwrap();
    let stopped = manager.stop(&started.process_id).unwrap();
    assert_eq!(stopped.state, ProcessState::Terminated);
    assert!(stopped.chunks.is_empty());
    assert!(stopped.output_pending, "the pid line is still to be read");
    assert!(
        stopped
            .terminal_detail
            .as_deref()
            .unwrap()
            .starts_with("stopped on request with SIGTERM"),
        "{stopped:?}"
    );
    assert!(
        eventually_gone(grandchild),
        "grandchild {grandchild} survived"
    );
    // Stopping again answers with the same end.
    let again = manager.stop(&started.process_id).unwrap();
    assert_eq!(again.state, ProcessState::Terminated);
}

#[test]
fn stop_escalates_to_sigkill_after_the_grace_period() {
    let limits = ProcessLimits {
        stop_grace: Duration::from_millis(300),
        ..ProcessLimits::default()
    };
    let (_dir, manager) = manager(limits);
    let started = manager
        .start("trap '' TERM; sleep 300 & echo $!; wait; wait", None)
        .unwrap();
    let grandchild: i32 = first_stdout_line(&manager, &started.process_id)
        .parse()
        .unwrap();
    let stopped = manager.stop(&started.process_id).unwrap();
    assert_eq!(stopped.state, ProcessState::Terminated);
    let detail = stopped.terminal_detail.unwrap();
    assert!(
        detail.contains("SIGKILL after the 0.3 s grace period"),
        "{detail}"
    );
    assert!(
        eventually_gone(grandchild),
        "grandchild {grandchild} survived"
    );
}

#[test]
fn leader_exit_does_not_leave_a_background_child_running() {
    let (_dir, manager) = manager(ProcessLimits::default());
    // The child keeps the pipes: without the group stop the record would never end.
    let started = manager.start("sleep 300 & echo $!; exit 4", None).unwrap();
    let (end, out, _) = run_to_end(&manager, &started.process_id);
    assert_eq!(end.state, ProcessState::Exited);
    assert_eq!(end.exit_code, Some(4));
    let grandchild: i32 = out.trim().parse().unwrap();
    assert!(
        eventually_gone(grandchild),
        "grandchild {grandchild} survived"
    );
    let detail = end.terminal_detail.unwrap();
    assert!(detail.contains("left running"), "{detail}");
}

#[test]
fn leader_exit_stops_a_child_that_closed_the_pipes() {
    let (_dir, manager) = manager(ProcessLimits::default());
    let started = manager
        .start("sleep 300 >/dev/null 2>&1 & echo $!", None)
        .unwrap();
    let (end, out, _) = run_to_end(&manager, &started.process_id);
    assert_eq!(end.state, ProcessState::Exited);
    assert_eq!(end.exit_code, Some(0));
    let grandchild: i32 = out.trim().parse().unwrap();
    assert!(
        eventually_gone(grandchild),
        "grandchild {grandchild} survived"
    );
}

#[test]
fn a_new_session_holding_the_pipes_is_found_and_killed() {
    let limits = ProcessLimits {
        stop_grace: Duration::from_millis(200),
        ..ProcessLimits::default()
    };
    let (_dir, manager) = manager(limits);
    let started = manager
        .start("setsid sh -c 'echo $$; exec sleep 300' &  sleep 0.5", None)
        .unwrap();
    let (end, out, _) = run_to_end(&manager, &started.process_id);
    assert_eq!(end.state, ProcessState::Exited);
    let escaped: i32 = out.trim().parse().unwrap();
    assert!(
        eventually_gone(escaped),
        "process {escaped} outside the group survived"
    );
    if rho::containment::owner_root().is_ok() {
        // The tree's cgroup held the escaped process: it was signalled with the group, so
        // no pipe holder was left to hunt.
        return;
    }
    let detail = end.terminal_detail.unwrap();
    assert!(detail.contains("outside the process group"), "{detail}");
}

#[test]
fn commands_run_in_the_workspace_with_closed_stdin_and_no_credentials() {
    let (dir, manager) = manager(ProcessLimits::default());
    let started = manager
        .start("pwd; cat; env; echo to-stderr >&2; exit 3", None)
        .unwrap();
    let (end, out, err) = run_to_end(&manager, &started.process_id);
    assert_eq!(end.state, ProcessState::Exited);
    assert_eq!(end.exit_code, Some(3));
    assert_eq!(end.terminal_detail, None);
    let root = dir.path().canonicalize().unwrap();
    assert_eq!(out.lines().next(), root.to_str());
    assert!(out.contains("VISIBLE_TO_CHILD=yes"), "{out}");
    assert!(!out.contains("API_KEY"), "{out}");
    assert_eq!(err, "to-stderr\n");
}

#[test]
fn a_quick_command_reports_its_result_with_the_start() {
    let (_dir, manager) = manager(ProcessLimits {
        start_wait: Duration::from_secs(20),
        ..ProcessLimits::default()
    });
    let started = manager.start("echo hello", None).unwrap();
    assert_eq!(started.state, ProcessState::Exited);
    assert_eq!(started.exit_code, Some(0));
    assert_eq!(started.chunks.len(), 1);
    assert_eq!(started.chunks[0].text, "hello\n");
    assert!(started.process_id.starts_with("proc-"));
}

#[test]
fn a_missing_workspace_fails_to_start_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let manager = manager_in(&dir.path().join("missing"), ProcessLimits::default());
    let started = manager.start("true", None).unwrap();
    assert_eq!(started.state, ProcessState::FailedToStart);
    let detail = started.terminal_detail.unwrap();
    assert!(
        detail.contains("missing") && detail.contains("working directory"),
        "{detail}"
    );
    assert_eq!(manager.live_count(), 0);
}

#[test]
fn every_limit_gives_its_typed_error() {
    let limits = ProcessLimits {
        max_live: 2,
        max_records: 3,
        max_command_bytes: 64,
        ..ProcessLimits::default()
    };
    let (_dir, manager) = manager(limits);
    let a = manager.start("sleep 300", None).unwrap();
    let b = manager.start("sleep 300", None).unwrap();
    match manager.start("sleep 300", None) {
        Err(
            e @ ProcessError::LimitReached {
                limit: "max_live",
                limit_value: 2,
                ..
            },
        ) => {
            assert!(e.to_string().contains("`max_live`"), "{e}");
        }
        other => panic!("expected max_live, got {other:?}"),
    }
    match manager.poll(&a.process_id, None, secs(31), 10) {
        Err(
            e @ ProcessError::InvalidArgument {
                field: "wait_seconds",
                ..
            },
        ) => {
            assert!(
                e.to_string()
                    .contains("31 s is over the limit max_wait_seconds of 30"),
                "{e}"
            );
        }
        other => panic!("expected wait_seconds, got {other:?}"),
    }
    assert!(matches!(
        manager.start("true", Some(0)),
        Err(ProcessError::InvalidArgument {
            field: "timeout_seconds",
            ..
        })
    ));
    assert!(matches!(
        manager.start("  ", None),
        Err(ProcessError::InvalidArgument {
            field: "command",
            ..
        })
    ));
    match manager.start(&"x".repeat(65), None) {
        Err(
            e @ ProcessError::InvalidArgument {
                field: "command", ..
            },
        ) => {
            assert!(e.to_string().contains("max_command_bytes of 64"), "{e}");
        }
        other => panic!("expected command size, got {other:?}"),
    }
    match manager.poll(&a.process_id, Some(99), secs(0), 10) {
        Err(
            e @ ProcessError::InvalidArgument {
                field: "cursor", ..
            },
        ) => {
            assert!(e.to_string().contains("available_cursor is 0"), "{e}");
        }
        other => panic!("expected cursor, got {other:?}"),
    }
    match manager.poll("proc-nope-1", None, secs(0), 10) {
        Err(e @ ProcessError::UnknownProcess { .. }) => {
            assert!(e.to_string().contains("`proc-nope-1`"), "{e}");
        }
        other => panic!("expected unknown id, got {other:?}"),
    }
    assert!(matches!(
        manager.stop("proc-nope-1"),
        Err(ProcessError::UnknownProcess { .. })
    ));
    // The record cap drops the oldest finished record.
    manager.stop(&a.process_id).unwrap();
    let c = manager.start("true", None).unwrap();
    wait_terminal(&manager, &c.process_id);
    let d = manager.start("true", None).unwrap();
    assert!(matches!(
        manager.poll(&a.process_id, None, secs(0), 10),
        Err(ProcessError::UnknownProcess { .. })
    ));
    manager.poll(&c.process_id, None, secs(0), 10).unwrap();
    manager.poll(&d.process_id, None, secs(0), 10).unwrap();
    manager.poll(&b.process_id, None, secs(0), 10).unwrap();
    // Inconsistent limits are refused up front.
    let bad = ProcessManager::new(ProcessConfig {
        workspace_root: PathBuf::from("/"),
        environment: Vec::new(),
        limits: ProcessLimits {
            max_live: 5,
            max_records: 4,
            ..ProcessLimits::default()
        },
        confinement: None,
    });
    assert!(matches!(
        bad,
        Err(ProcessError::InvalidLimits {
            limit: "max_records",
            ..
        })
    ));
    manager.shutdown();
    assert!(matches!(
        manager.start("true", None),
        Err(ProcessError::ShutDown)
    ));
    assert_eq!(
        manager
            .poll(&b.process_id, None, secs(0), 10)
            .unwrap()
            .state,
        ProcessState::Terminated
    );
}

#[test]
fn completed_records_expire_after_the_retention() {
    let (_dir, manager) = manager(ProcessLimits {
        completed_retention: Duration::from_millis(200),
        ..ProcessLimits::default()
    });
    let started = manager.start("true", None).unwrap();
    wait_terminal(&manager, &started.process_id);
    std::thread::sleep(Duration::from_millis(400));
    assert!(matches!(
        manager.poll(&started.process_id, None, secs(0), 10),
        Err(ProcessError::UnknownProcess { .. })
    ));
}

#[test]
fn sixteen_noisy_processes_run_at_once() {
    let (_dir, manager) = manager(ProcessLimits::default());
    // 2,000,000 bytes each, then a pause that keeps all sixteen live together.
    let script = "yes abcd | head -n 400000; echo done >&2; sleep 2";
    let ids: Vec<String> = (0..16)
        .map(|_| manager.start(script, None).unwrap().process_id)
        .collect();
    assert!(matches!(
        manager.start(script, None),
        Err(ProcessError::LimitReached {
            limit: "max_live",
            ..
        })
    ));
    for id in &ids {
        let end = wait_terminal(&manager, id);
        assert_eq!(end.state, ProcessState::Exited, "{end:?}");
        assert_eq!(end.exit_code, Some(0));
        let (snap, retained) = retained_bytes(&manager, id);
        assert!(retained <= 1024 * 1024);
        assert!(snap.chunks.len() <= 8192);
        let stderr: String = snap
            .chunks
            .iter()
            .filter(|c| c.stream == Stream::Stderr)
            .map(|c| c.text.as_str())
            .collect();
        assert_eq!(stderr, "done\n");
        assert_eq!(snap.dropped_bytes + retained, 2_000_000 + 5);
    }
    assert_eq!(manager.live_count(), 0);
}

#[test]
fn dropping_the_manager_stops_every_tree() {
    let (_dir, manager) = manager(ProcessLimits::default());
    let mut grandchildren = Vec::new();
    for _ in 0..3 {
        let started = manager.start("sleep 300 & echo $!; wait", None).unwrap();
        grandchildren.push(
            first_stdout_line(&manager, &started.process_id)
                .parse::<i32>()
                .unwrap(),
        );
    }
    let before = Instant::now();
    drop(manager);
    assert!(before.elapsed() < Duration::from_secs(10));
    for pid in grandchildren {
        assert!(eventually_gone(pid), "{pid} survived the manager");
    }
}

/// Run only by `owner_death_kills_every_tree`, as the owner process it then kills.
#[test]
#[ignore = "helper: the owner process of owner_death_kills_every_tree"]
fn owner_role() {
    let root =
        std::env::var_os("RHO_TEST_OWNER_ROOT").expect("run by owner_death_kills_every_tree");
    let manager = manager_in(Path::new(&root), ProcessLimits::default());
    let started = manager.start("sleep 300 & echo $!; wait", None).unwrap();
    let grandchild = first_stdout_line(&manager, &started.process_id);
    println!("GRANDCHILD={grandchild}");
    std::thread::sleep(Duration::from_mins(1));
}

#[test]
fn owner_death_kills_every_tree() {
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().unwrap();
    let mut owner = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "owner_role",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RHO_TEST_OWNER_ROOT", dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = std::io::BufReader::new(owner.stdout.take().unwrap());
    let grandchild: i32 = stdout
        .lines()
        .map_while(Result::ok)
        // libtest prints `test owner_role ... ` before it on the same line.
        .find_map(|line| {
            line.split_once("GRANDCHILD=")
                .map(|(_, pid)| pid.trim().parse().unwrap())
        })
        .expect("the owner reported its grandchild");
    // SIGKILL: no destructor, no shutdown runs in the owner.
    owner.kill().unwrap();
    owner.wait().unwrap();
    assert!(
        eventually_gone(grandchild),
        "grandchild {grandchild} outlived its owner"
    );
}

#[test]
fn a_confined_manager_cannot_write_outside_its_scratch_directory() {
    let confinement = match rho::confinement::ScratchConfinement::read_only() {
        Ok(c) => c,
        Err(e) => {
            assert!(
                std::env::var_os("CI").is_none()
                    && std::env::var_os("RHO_REQUIRE_SANDBOX").is_none(),
                "the read-only ruleset is required here: {e}"
            );
            eprintln!("SKIPPED: this kernel cannot confine processes read-only: {e}");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("kept.txt"), "original\n").unwrap();
    let scratch = confinement.scratch().to_path_buf();
    let config = ProcessConfig {
        workspace_root: dir.path().to_path_buf(),
        environment: environment(),
        limits: ProcessLimits::default(),
        confinement: None,
    }
    .confined(confinement);
    let manager = ProcessManager::new(config).unwrap();
    let started = manager
        .start(
            "cat kept.txt; echo changed > kept.txt; echo new > new.txt; \
             echo scratch > \"$TMPDIR/s\" && cat \"$TMPDIR/s\"",
            None,
        )
        .unwrap();
    let (snap, out, err) = run_to_end(&manager, &started.process_id);
    assert!(out.contains("original"), "reads work: {out}");
    assert!(out.contains("scratch"), "TMPDIR is writable: {out} {err}");
    assert!(err.contains("Permission denied"), "{err}");
    assert_eq!(snap.state, ProcessState::Exited, "{snap:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("kept.txt")).unwrap(),
        "original\n"
    );
    assert!(!dir.path().join("new.txt").exists());
    assert!(
        scratch.join("s").exists(),
        "written inside the scratch directory"
    );
}

#[test]
fn a_descendant_that_left_the_group_dies_with_the_tree() {
    if let Err(e) = rho::containment::owner_root() {
        assert!(
            std::env::var_os("CI").is_none() && std::env::var_os("RHO_REQUIRE_SANDBOX").is_none(),
            "a delegated cgroup v2 hierarchy is required here: {e}"
        );
        eprintln!(
            "SKIPPED: no delegated cgroup v2 hierarchy, so setsid descendants can escape: {e}"
        );
        return;
    }
    let (dir, manager) = manager(ProcessLimits::default());
    let pid_file = dir.path().join("escaped.pid");
    let started = manager
        .start(
            &format!(
                "setsid sh -c 'echo $$ > {}; exec sleep 300' </dev/null >/dev/null 2>&1 & \
                 while [ ! -s {} ]; do sleep 0.01; done; echo leader done",
                pid_file.display(),
                pid_file.display()
            ),
            None,
        )
        .unwrap();
    let (snap, out, _) = run_to_end(&manager, &started.process_id);
    assert!(out.contains("leader done"), "{out}");
    assert_eq!(snap.state, ProcessState::Exited, "{snap:?}");
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The descendant left the process group; the tree's cgroup still held it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::path::Path::new(&format!("/proc/{pid}")).exists()
        && std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
    {
        assert!(
            Instant::now() < deadline,
            "the setsid descendant {pid} survived its tree"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
