//! Process control of a verified command: group stop on timeout and cancellation (a
//! backgrounded grandchild included), bounded artifacts, exact environment, closed stdin,
//! typed exits, and cleanup when a command is dropped unwaited.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod exec_support;

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use exec_support::{
    Workspace, eventually_gone, first_line_when_written, freeze_executable, frozen_sh, read,
    root_dir, run, run_sh,
};
use rho::workflow::exec::{self, CancelToken, CommandExit, ExecError};

const LONG: Duration = Duration::from_mins(1);
/// Timeout for the commands that print their grandchild's pid, then wait to be stopped:
/// long enough for the shell to start and print on a loaded machine (at 200 ms, under a
/// parallel test run, the shell was sometimes stopped before it printed anything).
const ECHO_THEN_TIME_OUT: Duration = Duration::from_secs(2);

#[test]
fn timeout_kills_a_backgrounded_grandchild() {
    let ws = Workspace::new();
    let mut spec = ws.spec(
        &["sh", "-c", "sleep 1000 & echo $!; wait"],
        ECHO_THEN_TIME_OUT,
    );
    spec.kill_grace = Duration::from_millis(200);
    let outcome = run(&ws, &frozen_sh(&ws.root), &root_dir(), spec);
    assert_eq!(outcome.exit, CommandExit::Timeout);
    let grandchild: i32 = read(&outcome.stdout.path).trim().parse().unwrap();
    assert!(
        eventually_gone(grandchild),
        "grandchild {grandchild} survived the timeout"
    );
    assert!(!exec::group_alive(outcome.process.pgid));
    assert!(!exec::process_alive(
        outcome.process.pid,
        outcome.process.start_time
    ));
}

#[test]
fn leader_exit_does_not_wait_forever_for_a_background_holder() {
    let ws = Workspace::new();
    let outcome = run_sh(&ws, "sleep 1000 & echo $!", LONG);
    assert_eq!(outcome.exit, CommandExit::Code(0));
    assert!(outcome.stdout.reached_end);
    let grandchild: i32 = read(&outcome.stdout.path).trim().parse().unwrap();
    assert!(
        eventually_gone(grandchild),
        "background process {grandchild} outlived its node"
    );
}

#[test]
fn term_is_followed_by_kill_after_the_grace_period() {
    let ws = Workspace::new();
    // The shell and its child ignore SIGTERM; only SIGKILL ends them.
    let mut spec = ws.spec(
        &["sh", "-c", "trap '' TERM; sleep 1000 & echo $!; wait"],
        ECHO_THEN_TIME_OUT,
    );
    spec.kill_grace = Duration::from_millis(200);
    let outcome = run(&ws, &frozen_sh(&ws.root), &root_dir(), spec);
    assert_eq!(outcome.exit, CommandExit::Timeout);
    let grandchild: i32 = read(&outcome.stdout.path).trim().parse().unwrap();
    assert!(eventually_gone(grandchild));
}

#[test]
fn cancellation_stops_the_tree() {
    let ws = Workspace::new();
    let spec = ws.spec(&["sh", "-c", "sleep 1000 & echo $!; wait"], LONG);
    let cancel: CancelToken = spec.cancel.clone();
    let stdout = spec.stdout_path.clone();
    let launch = exec::verify(&ws.root, &frozen_sh(&ws.root), &root_dir()).unwrap();
    let running = exec::spawn(launch, spec).unwrap();
    let identity = running.process();
    assert!(exec::process_alive(identity.pid, identity.start_time));
    let waiter = std::thread::spawn(move || running.wait());
    let grandchild: i32 = first_line_when_written(&stdout).parse().unwrap();
    cancel.cancel();
    let outcome = waiter.join().unwrap();
    assert_eq!(outcome.exit, CommandExit::Cancelled);
    assert_eq!(outcome.process, identity);
    assert!(eventually_gone(grandchild));
    assert!(!exec::group_alive(identity.pgid));
}

#[test]
fn dropping_a_running_command_kills_its_group() {
    let ws = Workspace::new();
    // Nobody reads the streams of an unwaited command: the pid goes to a file.
    let spec = ws.spec(&["sh", "-c", "sleep 1000 & echo $! > pid; wait"], LONG);
    let launch = exec::verify(&ws.root, &frozen_sh(&ws.root), &root_dir()).unwrap();
    let running = exec::spawn(launch, spec).unwrap();
    let identity = running.process();
    let grandchild: i32 = first_line_when_written(&ws.path("pid")).parse().unwrap();
    drop(running);
    assert!(!exec::process_alive(identity.pid, identity.start_time));
    assert!(eventually_gone(grandchild));
}

#[test]
fn output_over_the_bound_keeps_head_and_tail_with_a_marked_gap() {
    let ws = Workspace::new();
    let mut spec = ws.spec(
        &[
            "sh",
            "-c",
            "head -c 100000 /dev/zero; echo; echo the-last-line; head -c 10 /dev/zero >&2",
        ],
        LONG,
    );
    spec.max_output_bytes = 1000;
    let outcome = run(&ws, &frozen_sh(&ws.root), &root_dir(), spec);
    assert_eq!(outcome.exit, CommandExit::Code(0));
    let out = &outcome.stdout;
    assert_eq!(out.observed_bytes, 100_015);
    assert!(out.truncated && out.reached_end && !out.is_complete());
    let kept = std::fs::read(&out.path).unwrap();
    assert_eq!(out.retained_bytes, kept.len() as u64);
    assert!(kept.len() <= 1000, "{} bytes kept", kept.len());
    assert_eq!(&kept[..500], &[0_u8; 500][..], "the head comes first");
    let text = String::from_utf8_lossy(&kept);
    assert!(
        text.ends_with("\nthe-last-line\n"),
        "the tail is kept: {text:?}"
    );
    let marker = text.find("[... rho: ").expect("a gap marker");
    let omitted: u64 = text[marker + 10..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let marker_len = format!("\n[... rho: {omitted} bytes omitted ...]\n").len() as u64;
    assert_eq!(
        omitted + out.retained_bytes - marker_len,
        out.observed_bytes,
        "kept plus omitted is everything printed"
    );
    assert_eq!(out.sha256, rho_ipc::digest::sha256_tagged(&kept));
    let err = &outcome.stderr;
    assert_eq!((err.retained_bytes, err.observed_bytes), (10, 10));
    assert!(err.is_complete());
}

#[test]
fn a_small_bound_keeps_only_the_head() {
    let ws = Workspace::new();
    let mut spec = ws.spec(&["sh", "-c", "head -c 1000 /dev/zero"], LONG);
    spec.max_output_bytes = 100;
    let outcome = run(&ws, &frozen_sh(&ws.root), &root_dir(), spec);
    let out = &outcome.stdout;
    assert_eq!((out.retained_bytes, out.observed_bytes), (100, 1000));
    assert!(out.truncated);
    assert_eq!(std::fs::read(&out.path).unwrap(), vec![0_u8; 100]);
}

#[test]
fn environment_is_exactly_what_was_passed() {
    let ws = Workspace::new();
    let program = freeze_executable(&ws.root, Path::new("/usr/bin/env"));
    let mut spec = ws.spec(&["env"], LONG);
    spec.env = vec![
        (OsString::from("ALPHA"), OsString::from("1")),
        (OsString::from("BETA"), OsString::from("two words=x")),
    ];
    let outcome = run(&ws, &program, &root_dir(), spec);
    assert_eq!(outcome.exit, CommandExit::Code(0));
    assert_eq!(read(&outcome.stdout.path), "ALPHA=1\nBETA=two words=x\n");
}

#[test]
fn stdin_is_dev_null() {
    let ws = Workspace::new();
    let outcome = run_sh(&ws, "readlink /proc/$$/fd/0; cat; echo rc=$?", LONG);
    assert_eq!(outcome.exit, CommandExit::Code(0));
    assert_eq!(read(&outcome.stdout.path), "/dev/null\nrc=0\n");
}

#[test]
fn exits_are_typed() {
    let ws = Workspace::new();
    assert_eq!(run_sh(&ws, "exit 7", LONG).exit, CommandExit::Code(7));
    assert_eq!(run_sh(&ws, "true", LONG).exit, CommandExit::Code(0));
    assert_eq!(
        run_sh(&ws, "kill -USR1 $$", LONG).exit,
        CommandExit::Signal(libc::SIGUSR1)
    );
    // SIGPIPE is back to its default in the node even though the owner ignores it.
    assert_eq!(
        run_sh(&ws, "kill -PIPE $$", LONG).exit,
        CommandExit::Signal(libc::SIGPIPE)
    );
}

#[test]
fn stdout_and_stderr_are_captured_separately() {
    let ws = Workspace::new();
    let outcome = run_sh(&ws, "echo out; echo err >&2; echo more", LONG);
    assert_eq!(read(&outcome.stdout.path), "out\nmore\n");
    assert_eq!(read(&outcome.stderr.path), "err\n");
    assert_eq!(outcome.stdout.observed_bytes, 9);
}

#[test]
fn node_is_the_leader_of_its_own_process_group() {
    let ws = Workspace::new();
    let outcome = run_sh(
        &ws,
        "echo $$; ps -o pgid= -p $$ 2>/dev/null || cut -d' ' -f5 /proc/$$/stat",
        LONG,
    );
    let text = read(&outcome.stdout.path);
    let mut lines = text.lines();
    let pid: i32 = lines.next().unwrap().trim().parse().unwrap();
    let pgid: i32 = lines.next().unwrap().trim().parse().unwrap();
    assert_eq!(pid, outcome.process.pid);
    assert_eq!(pgid, pid);
    assert_eq!(outcome.process.pgid, pid);
}

#[test]
fn invalid_arguments_and_existing_artifacts_are_refused_before_launch() {
    let ws = Workspace::new();
    let launch = exec::verify(&ws.root, &frozen_sh(&ws.root), &root_dir()).unwrap();
    let mut spec = ws.spec(&["sh", "-c", "touch ran"], LONG);
    spec.argv.push(OsString::from("nul\0byte"));
    let err = exec::spawn(launch, spec).unwrap_err();
    assert!(matches!(err, ExecError::InvalidArgument { .. }), "{err}");
    assert!(err.to_string().contains("argv[3]"), "{err}");

    let launch = exec::verify(&ws.root, &frozen_sh(&ws.root), &root_dir()).unwrap();
    let mut spec = ws.spec(&["sh", "-c", "touch ran"], LONG);
    spec.env.push((OsString::from("A=B"), OsString::from("x")));
    assert!(matches!(
        exec::spawn(launch, spec),
        Err(ExecError::InvalidArgument { .. })
    ));

    let launch = exec::verify(&ws.root, &frozen_sh(&ws.root), &root_dir()).unwrap();
    let spec = ws.spec(&["sh", "-c", "touch ran"], LONG);
    std::fs::write(&spec.stdout_path, b"existing").unwrap();
    assert!(matches!(
        exec::spawn(launch, spec),
        Err(ExecError::Artifact { .. })
    ));
    assert!(!ws.path("ran").exists());
}

#[test]
fn outcome_round_trips_through_json() {
    let ws = Workspace::new();
    let outcome = run_sh(&ws, "echo hi", LONG);
    let json = serde_json::to_string(&outcome).unwrap();
    let back: exec::CommandOutcome = serde_json::from_str(&json).unwrap();
    assert_eq!(back, outcome);
}

#[test]
fn a_failed_execveat_is_reported_with_its_step_and_errno() {
    let ws = Workspace::new();
    let path = ws.write("not-a-program", b"plain text, not an executable format\n");
    let program = freeze_executable(&ws.root, &path);
    let launch = exec::verify(&ws.root, &program, &root_dir()).unwrap();
    let err = exec::spawn(launch, ws.spec(&["not-a-program"], LONG)).unwrap_err();
    let ExecError::Launch { stage, source } = &err else {
        panic!("{err}")
    };
    assert_eq!(*stage, "execveat");
    assert_eq!(source.raw_os_error(), Some(libc::ENOEXEC), "{err}");
    // Launching keeps working afterwards (the spawner and its slot survived the failure).
    assert_eq!(run_sh(&ws, "exit 3", LONG).exit, CommandExit::Code(3));
}

#[test]
fn an_empty_stream_leaves_no_artifact_file() {
    let ws = Workspace::new();
    let outcome = run_sh(&ws, "echo only-out", LONG);
    assert_eq!(outcome.exit, CommandExit::Code(0));
    assert!(outcome.stdout.path.exists());
    assert_eq!(outcome.stdout.read_retained().unwrap(), b"only-out\n");
    let err = &outcome.stderr;
    assert_eq!((err.retained_bytes, err.observed_bytes), (0, 0));
    assert!(err.is_complete());
    assert!(!err.path.exists());
    assert_eq!(err.read_retained().unwrap(), Vec::<u8>::new());
    assert_eq!(err.sha256, rho_ipc::digest::sha256_tagged(b""));
}
