//! The subreaper fallback of tree containment (what runs where no delegated cgroup v2
//! exists, or under `RHO_CONTAINMENT=subreaper`), forced here by building tracked trees
//! directly: a descendant that leaves the node's process group (`setsid`, a double fork)
//! is still stopped by timeout, cancellation, the leader's exit and a dropped command, and
//! the tree's record names every descendant by pid and start time, so a later process can
//! tell whether any still runs.
//!
//! These need `/proc/<pid>/task/<tid>/children` (CONFIG_PROC_CHILDREN). Where it is
//! missing the tests say so loudly and skip, except under `CI` or `RHO_REQUIRE_SANDBOX=1`,
//! where they fail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod exec_support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use exec_support::{
    Workspace, eventually_gone, first_line_when_written, frozen_sh, read, root_dir, run,
};
use rho::containment::{ContainmentError, TrackedTree, Tree, tracked};
use rho::workflow::exec::{self, CommandExit, CommandSpec};

const LONG: Duration = Duration::from_mins(1);

fn required() -> bool {
    std::env::var_os("CI").is_some()
        || std::env::var_os("RHO_REQUIRE_SANDBOX").is_some_and(|v| v == "1")
}

/// A tracked tree recording into `record` in the workspace, or `None` (after a loud
/// message) where the fallback cannot work and nothing requires it.
fn tracked_tree(ws: &Workspace, label: &str) -> Option<(Arc<TrackedTree>, PathBuf)> {
    if let Err(e) = tracked::available() {
        assert!(!required(), "the subreaper fallback is required here: {e}");
        eprintln!("SKIPPED (no subreaper fallback on this machine): {e}");
        return None;
    }
    let path = ws.artifacts.join(format!("{label}.descendants"));
    let file = std::fs::File::create_new(&path).unwrap();
    Some((
        TrackedTree::new(label, Some((file, path.clone()))).unwrap(),
        path,
    ))
}

fn contained(
    ws: &Workspace,
    argv: &[&str],
    timeout: Duration,
    label: &str,
) -> Option<(CommandSpec, PathBuf)> {
    let (tree, record) = tracked_tree(ws, label)?;
    let mut spec = ws.spec(argv, timeout);
    spec.kill_grace = Duration::from_millis(200);
    spec.containment = Some(Tree::Tracked(tree));
    Some((spec, record))
}

/// The record names `pid` (with its start time) and, once everything is dead, says so.
fn assert_recorded_and_dead(record: &std::path::Path, pid: i32) {
    let text = read(record);
    assert!(
        text.lines()
            .any(|l| l.split(' ').next() == Some(&pid.to_string())),
        "the record names descendant {pid}: {text:?}"
    );
    tracked::check_record(&text, record).unwrap();
}

/// Field 5 of `/proc/<pid>/stat`: the process group.
fn group_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 1..];
    rest.split_whitespace().nth(2).unwrap().parse().unwrap()
}

fn wait_until_detached(escaped: i32, pgid: i32) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while group_of(escaped) == pgid {
        assert!(
            std::time::Instant::now() < deadline,
            "the descendant never left the node's group"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn timeout_kills_a_setsid_descendant_without_a_cgroup() {
    let ws = Workspace::new();
    let Some((spec, record)) = contained(
        &ws,
        &["sh", "-c", "setsid sleep 1000 & echo $! > pid; wait"],
        Duration::from_millis(500),
        "timeout",
    ) else {
        return;
    };
    let outcome = run(&ws, &frozen_sh(&ws.root), &root_dir(), spec);
    assert_eq!(outcome.exit, CommandExit::Timeout);
    let escaped: i32 = read(&ws.path("pid")).trim().parse().unwrap();
    assert!(
        eventually_gone(escaped),
        "the setsid descendant {escaped} survived the timeout"
    );
    assert_recorded_and_dead(&record, escaped);
}

#[test]
fn cancellation_kills_a_double_forked_descendant_without_a_cgroup() {
    let ws = Workspace::new();
    // The subshell exits at once: the sleeper is an orphan in another group and session,
    // reparented to the node's leader (a subreaper), not to init.
    let Some((spec, record)) = contained(
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
    let cancel = spec.cancel.clone();
    let tag = spec.containment.as_ref().unwrap().leader_tag().unwrap();
    let launch = exec::verify(&ws.root, &frozen_sh(&ws.root), &root_dir()).unwrap();
    let running = exec::spawn(launch, spec).unwrap();
    let escaped: i32 = first_line_when_written(&ws.path("pid")).parse().unwrap();
    wait_until_detached(escaped, running.process().pgid);
    // The tree's tag went with it into the new session.
    let limits = read(std::path::Path::new(&format!("/proc/{escaped}/limits")));
    assert!(
        limits.lines().any(|l| l.starts_with("Max realtime timeout")
            && l.split_whitespace().nth(3) == Some(&tag.to_string())),
        "the escapee carries tag {tag}: {limits}"
    );
    // Let the tracker see it (one poll), as it would in any run that lasts.
    std::thread::sleep(tracked::POLL * 5);
    let live = tracked::check_record(&read(&record), &record).unwrap_err();
    assert!(
        matches!(live, ContainmentError::Alive { .. })
            && live.to_string().contains(&escaped.to_string()),
        "while it runs, the record says so: {live}"
    );
    let waiter = std::thread::spawn(move || running.wait());
    cancel.cancel();
    let outcome = waiter.join().unwrap();
    assert_eq!(outcome.exit, CommandExit::Cancelled);
    assert!(
        eventually_gone(escaped),
        "the double-forked descendant {escaped} survived cancellation"
    );
    assert_recorded_and_dead(&record, escaped);
}

#[test]
fn a_detached_descendant_does_not_outlive_a_node_that_succeeded_without_a_cgroup() {
    let ws = Workspace::new();
    let Some((spec, record)) = contained(
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
    let outcome = run(&ws, &frozen_sh(&ws.root), &root_dir(), spec);
    assert_eq!(outcome.exit, CommandExit::Code(0));
    let escaped: i32 = read(&ws.path("pid")).trim().parse().unwrap();
    assert!(
        eventually_gone(escaped),
        "the detached descendant {escaped} outlived its node"
    );
    assert_recorded_and_dead(&record, escaped);
}

#[test]
fn dropping_a_running_command_kills_its_detached_descendants_without_a_cgroup() {
    let ws = Workspace::new();
    let Some((spec, record)) = contained(
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
    let launch = exec::verify(&ws.root, &frozen_sh(&ws.root), &root_dir()).unwrap();
    let running = exec::spawn(launch, spec).unwrap();
    let escaped: i32 = first_line_when_written(&ws.path("pid")).parse().unwrap();
    wait_until_detached(escaped, running.process().pgid);
    drop(running);
    assert!(eventually_gone(escaped));
    assert_recorded_and_dead(&record, escaped);
}

#[test]
fn no_zombie_is_left_behind_by_a_killed_tree() {
    let ws = Workspace::new();
    // Three generations that all leave the group; the middle ones exit at once.
    let Some((spec, _record)) = contained(
        &ws,
        &[
            "sh",
            "-c",
            "(sh -c '(setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $! > pid)' &); exec sleep 1000",
        ],
        Duration::from_secs(2),
        "zombies",
    ) else {
        return;
    };
    let outcome = run(&ws, &frozen_sh(&ws.root), &root_dir(), spec);
    assert_eq!(outcome.exit, CommandExit::Timeout);
    let escaped: i32 = read(&ws.path("pid")).trim().parse().unwrap();
    assert!(eventually_gone(escaped));
    // Nothing of the tree (its group: the intermediates never left it) stays as a zombie
    // child of this process (the owner, a subreaper).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let zombies: Vec<i32> = own_zombie_children()
            .into_iter()
            .filter(|&pid| {
                std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                    stat.rsplit(')')
                        .next()
                        .unwrap_or("")
                        .split_whitespace()
                        .nth(2)
                        == Some(&outcome.process.pgid.to_string())
                })
            })
            .collect();
        if zombies.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "zombie children left: {zombies:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn own_zombie_children() -> Vec<i32> {
    let me = std::process::id();
    let mut zombies = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{me}/task"))
        .unwrap()
        .flatten()
    {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for pid in text
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .chars()
                .next();
            if state == Some('Z') {
                zombies.push(pid);
            }
        }
    }
    zombies
}

#[test]
fn fifty_double_forked_sessions_all_die_at_the_timeout() {
    let ws = Workspace::new();
    let Some((spec, record)) = contained(
        &ws,
        &[
            "sh",
            "-c",
            "i=0; while [ $i -lt 50 ]; do (setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $! >> pids); i=$((i+1)); done; echo done > ready; exec sleep 1000",
        ],
        Duration::from_secs(3),
        "fifty",
    ) else {
        return;
    };
    let outcome = run(&ws, &frozen_sh(&ws.root), &root_dir(), spec);
    assert_eq!(outcome.exit, CommandExit::Timeout);
    assert!(ws.path("ready").exists(), "every sleeper was started");
    let pids: Vec<i32> = read(&ws.path("pids"))
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 50);
    for pid in &pids {
        assert!(eventually_gone(*pid), "sleeper {pid} survived the timeout");
    }
    tracked::check_record(&read(&record), &record).unwrap();
}
