//! Behaviour across processes: a node's process tree dies with its owner, and checkout
//! locks keep two owners from overlapping. The helper processes are this test binary run
//! again with `RHO_EXEC_TEST_ROLE` set, so they use the library exactly as `rho` does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod exec_support;

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use exec_support::{Workspace, eventually_gone, first_line_when_written, frozen_sh, root_dir};
use rho::paths::RhoHome;
use rho::workflow::checkout::{CheckoutError, CheckoutLock};
use rho::workflow::exec::{self, CancelToken};
use rho_ipc::program::Access;

const ROLE: &str = "RHO_EXEC_TEST_ROLE";
const DIR: &str = "RHO_EXEC_TEST_DIR";

/// Runs `test_name` of this binary as a helper with `role`.
fn helper(test_name: &str, role: &str, dir: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([test_name, "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(DIR, dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Reads helper stdout lines until one contains `prefix` (libtest may print its own
/// `test NAME ... ` on the same line first), and returns what follows it.
fn line_with(reader: &mut impl std::io::BufRead, prefix: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "helper ended before `{prefix}`"
        );
        if let Some(at) = line.find(prefix) {
            return line[at + prefix.len()..].trim().to_owned();
        }
    }
}

fn role() -> Option<(String, PathBuf)> {
    let role = std::env::var(ROLE).ok()?;
    Some((role, PathBuf::from(std::env::var_os(DIR)?)))
}

/// Owner role: start a shell that backgrounds a `sleep` and itself sleeps, report the
/// pids, then block until killed.
fn act_as_owner(dir: &Path) {
    let artifacts = dir.join("artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let spec = exec::CommandSpec::new(
        ["sh", "-c", "sleep 1000 & echo $!; sleep 1001"]
            .map(Into::into)
            .to_vec(),
        vec![("PATH".into(), "/usr/bin:/bin".into())],
        Duration::from_mins(10),
        4096,
        artifacts.join("stdout"),
        artifacts.join("stderr"),
    );
    let stdout = spec.stdout_path.clone();
    let launch = exec::verify(dir, &frozen_sh(dir), &root_dir()).unwrap();
    let running = exec::spawn(launch, spec).unwrap();
    let leader = running.process();
    let waiter = std::thread::spawn(move || running.wait());
    let grandchild = first_line_when_written(&stdout);
    let mut out = std::io::stdout().lock();
    writeln!(out, "@leader {} {}", leader.pid, leader.start_time).unwrap();
    writeln!(out, "@grandchild {grandchild}").unwrap();
    out.flush().unwrap();
    drop(out);
    let _never = waiter.join();
}

#[test]
fn process_tree_dies_with_its_owner() {
    if let Some((role, dir)) = role() {
        assert_eq!(role, "owner");
        act_as_owner(&dir);
        return;
    }
    let ws = Workspace::new();
    let mut owner = helper("process_tree_dies_with_its_owner", "owner", &ws.root);
    let mut reader = BufReader::new(owner.stdout.take().unwrap());
    let leader = line_with(&mut reader, "@leader ");
    let (pid, ticks) = leader.split_once(' ').unwrap();
    let (pid, ticks): (i32, u64) = (pid.parse().unwrap(), ticks.parse().unwrap());
    let grandchild: i32 = line_with(&mut reader, "@grandchild ").parse().unwrap();
    let (grandchild_ticks, _) = exec::process_start_time(grandchild).unwrap();
    assert!(exec::process_alive(pid, ticks));
    assert!(exec::process_alive(grandchild, grandchild_ticks));

    owner.kill().unwrap(); // SIGKILL: no cleanup code of the owner runs
    owner.wait().unwrap();

    assert!(eventually_gone(pid), "the leader {pid} outlived its owner");
    assert!(
        eventually_gone(grandchild),
        "the backgrounded {grandchild} outlived its owner"
    );
    assert!(!exec::process_alive(pid, ticks));
    assert!(!exec::process_alive(grandchild, grandchild_ticks));
}

/// Locker role: take the exclusive checkout lock repeatedly, stamping start and end.
fn act_as_locker(dir: &Path, id: &str) {
    let home = RhoHome::at(dir.join("home"), None);
    let lock = CheckoutLock::open(&home, &dir.join("workspace")).unwrap();
    let stamps = dir.join("stamps");
    let cancel = CancelToken::new();
    for round in 0..25 {
        let guard = lock.acquire(Access::Mutating, None, &cancel).unwrap();
        append(&stamps, &format!("start {id} {round}\n"));
        std::thread::sleep(Duration::from_millis(2));
        append(&stamps, &format!("end {id} {round}\n"));
        drop(guard);
    }
}

fn append(path: &Path, line: &str) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    file.write_all(line.as_bytes()).unwrap();
}

#[test]
fn two_processes_with_exclusive_locks_never_overlap() {
    if let Some((role, dir)) = role() {
        act_as_locker(&dir, &role);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let name = "two_processes_with_exclusive_locks_never_overlap";
    let mut a = helper(name, "a", &root);
    let mut b = helper(name, "b", &root);
    assert!(a.wait().unwrap().success());
    assert!(b.wait().unwrap().success());
    let stamps = std::fs::read_to_string(root.join("stamps")).unwrap();
    let lines: Vec<&str> = stamps.lines().collect();
    assert_eq!(lines.len(), 100, "{stamps}");
    for pair in lines.chunks(2) {
        let start = pair[0]
            .strip_prefix("start ")
            .unwrap_or_else(|| panic!("{stamps}"));
        let end = pair[1]
            .strip_prefix("end ")
            .unwrap_or_else(|| panic!("{stamps}"));
        assert_eq!(start, end, "critical sections interleaved:\n{stamps}");
    }
}

/// Reader role: hold a shared lock until stdin closes.
fn act_as_reader(dir: &Path) {
    let home = RhoHome::at(dir.join("home"), None);
    let lock = CheckoutLock::open(&home, &dir.join("workspace")).unwrap();
    let guard = lock
        .acquire(Access::ReadOnly, None, &CancelToken::new())
        .unwrap();
    println!("@holding");
    let mut rest = String::new();
    let _ = std::io::stdin().read_line(&mut rest);
    drop(guard);
}

#[test]
fn readers_share_across_processes_and_writers_wait() {
    if let Some((_, dir)) = role() {
        act_as_reader(&dir);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let mut reader = helper(
        "readers_share_across_processes_and_writers_wait",
        "reader",
        &root,
    );
    let mut out = BufReader::new(reader.stdout.take().unwrap());
    line_with(&mut out, "@holding");

    let home = RhoHome::at(root.join("home"), None);
    let lock = CheckoutLock::open(&home, &root.join("workspace")).unwrap();
    let cancel = CancelToken::new();
    let soon = || Some(Instant::now() + Duration::from_millis(100));
    let shared = lock.acquire(Access::ReadOnly, soon(), &cancel).unwrap();
    drop(shared);
    let err = lock.acquire(Access::Mutating, soon(), &cancel).unwrap_err();
    assert!(
        matches!(
            err,
            CheckoutError::Timeout {
                access: "exclusive",
                ..
            }
        ),
        "{err}"
    );
    let cancelled = CancelToken::new();
    cancelled.cancel();
    let err = lock
        .acquire(Access::Mutating, None, &cancelled)
        .unwrap_err();
    assert!(matches!(err, CheckoutError::Cancelled { .. }), "{err}");

    drop(reader.stdin.take()); // the reader releases and exits
    assert!(reader.wait().unwrap().success());
    let exclusive = lock.acquire(Access::Mutating, None, &cancel).unwrap();
    drop(exclusive);
    let _ = out.lines();
}
