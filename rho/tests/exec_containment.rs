//! Containment of a node's whole tree in a cgroup v2: a descendant that leaves the node's
//! process group (`setsid`, a double fork) is still stopped by timeout, cancellation, the
//! leader's exit and a dropped command, and the cgroup is removed afterwards.
//!
//! These need a delegated, writable cgroup v2 hierarchy. Where there is none the tests say
//! so loudly and skip, except under `CI` or `RHO_REQUIRE_SANDBOX=1`, where they fail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod exec_support;

use std::time::Duration;

use exec_support::{
    Workspace, eventually_gone, first_line_when_written, frozen_sh, read, root_dir, run,
};
use rho::containment::{self, Cgroup, Tree};
use rho::workflow::exec::{self, CommandExit, CommandSpec};

const LONG: Duration = Duration::from_mins(1);

fn required() -> bool {
    std::env::var_os("CI").is_some()
        || std::env::var_os("RHO_REQUIRE_SANDBOX").is_some_and(|v| v == "1")
}

/// A fresh cgroup for one test's tree, or `None` (after a loud message) where the machine
/// has no delegated cgroup v2 and nothing requires one.
fn cgroup(label: &str) -> Option<Cgroup> {
    match containment::owner_root() {
        Ok(root) => Some(
            root.create(&format!("test-{label}-{}", std::process::id()))
                .unwrap(),
        ),
        Err(e) if required() => panic!("cgroup containment is required here: {e}"),
        Err(e) => {
            eprintln!("SKIPPED (no cgroup containment on this machine): {e}");
            None
        }
    }
}

fn contained(ws: &Workspace, argv: &[&str], timeout: Duration, label: &str) -> Option<CommandSpec> {
    let cgroup = cgroup(label)?;
    let mut spec = ws.spec(argv, timeout);
    spec.kill_grace = Duration::from_millis(200);
    spec.containment = Some(Tree::Cgroup(cgroup));
    Some(spec)
}

fn assert_removed(path: &str) {
    assert!(
        Cgroup::open(path).unwrap().is_none(),
        "cgroup {path} was left behind"
    );
}

#[test]
fn timeout_kills_a_descendant_that_left_the_group_with_setsid() {
    let ws = Workspace::new();
    let Some(spec) = contained(
        &ws,
        &["sh", "-c", "setsid sleep 1000 & echo $! > pid; wait"],
        Duration::from_millis(500),
        "timeout",
    ) else {
        return;
    };
    let path = spec
        .containment
        .as_ref()
        .unwrap()
        .cgroup()
        .unwrap()
        .path()
        .to_owned();
    let outcome = run(&ws, &frozen_sh(&ws.root), &root_dir(), spec);
    assert_eq!(outcome.exit, CommandExit::Timeout);
    let escaped: i32 = read(&ws.path("pid")).trim().parse().unwrap();
    assert!(
        eventually_gone(escaped),
        "the setsid descendant {escaped} survived the timeout"
    );
    assert_removed(&path);
}

#[test]
fn cancellation_kills_a_double_forked_descendant() {
    let ws = Workspace::new();
    // The subshell starts the sleeper in a new session and exits at once: the sleeper is
    // an orphan in another group and session, reparented away from the node.
    let Some(spec) = contained(
        &ws,
        &[
            "sh",
            "-c",
            "(setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $! > pid); exec sleep 1000",
        ],
        LONG,
        "cancel",
    ) else {
        return;
    };
    let path = spec
        .containment
        .as_ref()
        .unwrap()
        .cgroup()
        .unwrap()
        .path()
        .to_owned();
    let cancel = spec.cancel.clone();
    let launch = exec::verify(&ws.root, &frozen_sh(&ws.root), &root_dir()).unwrap();
    let running = exec::spawn(launch, spec).unwrap();
    let escaped: i32 = first_line_when_written(&ws.path("pid")).parse().unwrap();
    // `$!` is known before the child has called setsid: wait until it has.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while group_of(escaped) == running.process().pgid {
        assert!(
            std::time::Instant::now() < deadline,
            "the descendant never left the node's group"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let waiter = std::thread::spawn(move || running.wait());
    cancel.cancel();
    let outcome = waiter.join().unwrap();
    assert_eq!(outcome.exit, CommandExit::Cancelled);
    assert!(
        eventually_gone(escaped),
        "the double-forked descendant {escaped} survived cancellation"
    );
    assert_removed(&path);
}

#[test]
fn a_detached_descendant_does_not_outlive_a_node_that_succeeded() {
    let ws = Workspace::new();
    let Some(spec) = contained(
        &ws,
        &[
            "sh",
            "-c",
            "setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $! > pid",
        ],
        LONG,
        "success",
    ) else {
        return;
    };
    let path = spec
        .containment
        .as_ref()
        .unwrap()
        .cgroup()
        .unwrap()
        .path()
        .to_owned();
    let outcome = run(&ws, &frozen_sh(&ws.root), &root_dir(), spec);
    assert_eq!(outcome.exit, CommandExit::Code(0));
    let escaped: i32 = read(&ws.path("pid")).trim().parse().unwrap();
    assert!(
        eventually_gone(escaped),
        "the detached descendant {escaped} outlived its node"
    );
    assert_removed(&path);
}

#[test]
fn dropping_a_running_command_kills_its_detached_descendants() {
    let ws = Workspace::new();
    let Some(spec) = contained(
        &ws,
        &[
            "sh",
            "-c",
            "setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $! > pid; wait",
        ],
        LONG,
        "drop",
    ) else {
        return;
    };
    let cgroup = spec.containment.as_ref().unwrap().cgroup().unwrap().clone();
    let launch = exec::verify(&ws.root, &frozen_sh(&ws.root), &root_dir()).unwrap();
    let running = exec::spawn(launch, spec).unwrap();
    let escaped: i32 = first_line_when_written(&ws.path("pid")).parse().unwrap();
    assert!(
        cgroup.members().unwrap().contains(&escaped),
        "the descendant is a member of the node's cgroup"
    );
    drop(running);
    assert!(eventually_gone(escaped));
    assert_removed(cgroup.path());
}

#[test]
fn a_populated_cgroup_is_reported_with_its_members_until_it_is_killed() {
    let Some(cgroup) = cgroup("check") else {
        return;
    };
    // A process left in the cgroup, as one is when its owner and the guardian died.
    let mut sleeper = std::process::Command::new("sleep")
        .arg("1000")
        .spawn()
        .unwrap();
    let pid = sleeper.id().cast_signed();
    std::fs::write(
        format!("{}/cgroup.procs", cgroup_dir(&cgroup)),
        pid.to_string(),
    )
    .unwrap();
    assert_eq!(cgroup.members().unwrap(), vec![pid]);
    // The cgroup's creator reads `cgroup.events` through the descriptor it keeps: each read
    // sees the kernel's current value.
    assert!(cgroup.populated().unwrap());
    let err = containment::check_empty(cgroup.path()).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains(&pid.to_string()) && message.contains("cgroup.kill"),
        "{message}"
    );
    cgroup.kill_and_wait(Duration::from_secs(5)).unwrap();
    assert!(!cgroup.populated().unwrap());
    sleeper.wait().unwrap();
    containment::check_empty(cgroup.path()).unwrap();
    assert_removed(cgroup.path());
}

/// Field 5 of `/proc/<pid>/stat`: the process group.
fn group_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 1..];
    rest.split_whitespace().nth(2).unwrap().parse().unwrap()
}

/// The cgroup's directory, found the way an operator would: under the cgroup2 mount.
fn cgroup_dir(cgroup: &Cgroup) -> String {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mount = info
        .lines()
        .find(|l| {
            l.split(" - ")
                .nth(1)
                .is_some_and(|r| r.starts_with("cgroup2 "))
        })
        .and_then(|l| l.split_whitespace().nth(4))
        .unwrap()
        .to_owned();
    format!("{mount}{}", cgroup.path())
}
