//! The planner's watchdog and stderr-drain threads fail closed: when the host cannot start
//! one, `rho workflow validate` stops with an error naming the thread, exits 1, and leaves
//! no worker running (without the watchdog nothing would bound the worker's wall time).
//!
//! The failure is real, not injected: `rho` runs as an otherwise unused user with
//! `RLIMIT_NPROC` (which counts that user's processes and threads) at each value from 1
//! up, so that one value leaves room for the worker but not for the watchdog, and the next
//! for the watchdog but not for the drain. Switching users needs root; elsewhere the test
//! says so loudly and skips, except under `CI` or `RHO_REQUIRE_SANDBOX=1`, where it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod plan_support;

use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::Command;

use plan_support::{Env, cmd, rho_bin, worker_bin, workflow};

/// A uid no account uses here, so `RLIMIT_NPROC` counts only the processes of the test.
const UID: u32 = 54_321;

fn processes_of(uid: u32) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let owner = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|u| u.parse::<u32>().ok());
        if owner == Some(uid) {
            found.push(pid);
        }
    }
    found
}

fn chown_tree(path: &Path) {
    std::os::unix::fs::lchown(path, Some(UID), Some(UID)).unwrap();
    if path.is_dir() && !path.is_symlink() {
        for entry in std::fs::read_dir(path).unwrap().flatten() {
            chown_tree(&entry.path());
        }
    }
}

/// `rho workflow validate wf.star` as [`UID`] with at most `nproc` processes and threads.
fn validate_with_nproc(env: &Env, nproc: u32) -> std::process::Output {
    Command::new("/bin/bash")
        .args([
            "-c",
            "ulimit -u \"$1\" && exec \"$0\" workflow validate wf.star",
            rho_bin().to_str().unwrap(),
            &nproc.to_string(),
        ])
        .current_dir(&env.ws)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("RHO_HOME", &env.home)
        .env("HOME", env.home.parent().unwrap())
        .env("RHO_PLANNER_WORKER", worker_bin())
        .uid(UID)
        .gid(UID)
        .output()
        .unwrap()
}

#[test]
fn a_planner_thread_that_cannot_start_stops_validation_and_leaves_no_worker() {
    // The effective uid, from /proc (field 2 of `Uid:`).
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        == Some("0");
    if !root {
        assert!(
            std::env::var_os("CI").is_none()
                && std::env::var_os("RHO_REQUIRE_SANDBOX").is_none_or(|v| v != "1"),
            "this test must run as root under CI (it switches to an unused uid)"
        );
        eprintln!("SKIPPED (not root: cannot run rho as an unused uid with RLIMIT_NPROC)");
        return;
    }
    assert!(
        processes_of(UID).is_empty(),
        "uid {UID} is in use here; the test needs it to itself"
    );
    let env = Env::new();
    env.write("wf.star", &workflow(&[cmd("a", "[\"true\"]", "")], ""));
    std::fs::create_dir_all(&env.home).unwrap();
    std::fs::set_permissions(
        &env.home,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    // Every directory from the temporary roots down belongs to the user.
    chown_tree(env.home.parent().unwrap());
    chown_tree(&env.ws);

    let mut seen_watchdog = false;
    let mut seen_drain = false;
    let mut valid_at = None;
    for nproc in 1..=32 {
        let out = validate_with_nproc(&env, nproc);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let left = processes_of(UID);
        assert!(
            left.is_empty(),
            "RLIMIT_NPROC={nproc}: processes left running after rho exited: {left:?}\n{stderr}"
        );
        if stderr.contains("watchdog thread") {
            assert_eq!(out.status.code(), Some(1), "{stderr}");
            assert!(
                stderr.contains("Resource temporarily unavailable"),
                "{stderr}"
            );
            seen_watchdog = true;
        }
        if stderr.contains("stderr drain thread") {
            assert_eq!(out.status.code(), Some(1), "{stderr}");
            seen_drain = true;
        }
        if out.status.success() {
            valid_at = Some(nproc);
            break;
        }
    }
    assert!(
        valid_at.is_some(),
        "validation never succeeded with up to 32 tasks"
    );
    assert!(
        seen_watchdog,
        "no limit made the watchdog thread fail visibly (a dropped thread would go unnoticed)"
    );
    assert!(
        seen_drain,
        "no limit made the stderr-drain thread fail visibly"
    );
}
