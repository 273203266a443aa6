//! A node's detached descendants (`setsid`, double fork) through the real `rho` binary:
//! they die with a killed owner, and while one outlives both its owner and the guardian,
//! `resume --recover-uncertain` and `delete` refuse, naming it, instead of starting a
//! second writer beside it or hiding it.
//!
//! These need a delegated, writable cgroup v2 hierarchy. Where there is none the tests say
//! so loudly and skip, except under `CI` or `RHO_REQUIRE_SANDBOX=1`, where they fail.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::cast_possible_wrap)]

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::{Duration, Instant};

use rho::workflow::journal;
use rho::workflow::state::{Event, EventKind, Lifecycle, NodeState};

mod run_support;
use run_support::{Env, code, node, text};

fn contained_here() -> bool {
    match rho::containment::owner_root() {
        Ok(_) => true,
        Err(e)
            if std::env::var_os("CI").is_some()
                || std::env::var_os("RHO_REQUIRE_SANDBOX").is_some_and(|v| v == "1") =>
        {
            panic!("cgroup containment is required here: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED (no cgroup containment on this machine): {e}");
            false
        }
    }
}

/// One node that detaches a sleeper into a new session, records its pid and keeps running;
/// once `again` exists in the workspace it succeeds at once instead.
fn detaching_workflow(env: &Env) -> String {
    let argv = r#"["sh", "-c", "test -e again && exit 0; setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $! > esc.tmp && mv esc.tmp esc.pid; exec sleep 1001"]"#;
    let source = format!(
        "def build(inputs):\n    return workflow(name = \"detach\", nodes = [{}], exports = {{}})\n\nWORKFLOW = define(inputs = {{}}, build = build)\n",
        node("d", "", argv)
    );
    env.write("wf.star", &source);
    env.plan("wf.star")
}

fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `/proc/<pid>/stat` exists and is not a zombie's.
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

fn sigkill(pid: i32) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

/// Starts `rho workflow run` and waits until the node's detached sleeper is recorded.
/// Returns the owner, the run id, the sleeper's pid and the cgroup the journal names.
fn start_detaching_run(env: &Env) -> (std::process::Child, String, i32, String) {
    let (owner, id, escaped, events) = launch_detaching_run(env, None);
    let cgroup = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::LaunchIntended { cgroup, .. } => cgroup.clone(),
            _ => None,
        })
        .expect("launch_intended names the attempt's cgroup");
    (owner, id, escaped, cgroup)
}

/// Starts the detaching workflow (under `containment` when given, as `RHO_CONTAINMENT`) and
/// waits until the node's detached sleeper runs. Returns the owner, the run id, the
/// sleeper's pid and the run's journal at that moment.
fn launch_detaching_run(
    env: &Env,
    containment: Option<&str>,
) -> (std::process::Child, String, i32, Vec<Event>) {
    let plan_id = detaching_workflow(env);
    let before: BTreeSet<String> = env.run_ids();
    let mut command = env.command(&["workflow", "run", &plan_id, "--yes"]);
    if let Some(mode) = containment {
        command.env("RHO_CONTAINMENT", mode);
    }
    let owner = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut id = String::new();
    wait_for("the detached sleeper", || {
        if id.is_empty() {
            match env.run_ids().difference(&before).next() {
                Some(new) => id.clone_from(new),
                None => return false,
            }
        }
        env.ws.join("esc.pid").exists()
    });
    let escaped: i32 = std::fs::read_to_string(env.ws.join("esc.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let events = journal::read(&env.run_dir(&id).join("events.jsonl"))
        .unwrap()
        .events;
    assert!(running(escaped));
    (owner, id, escaped, events)
}

/// While the escaped sleeper of run `id` lives, the run needs recovery and `delete` refuses
/// (exit 7, naming it, the run kept); once it is killed, recovery runs attempt 2 to success.
fn refused_until_killed_then_recovered(env: &Env, id: &str, escaped: i32) {
    let status = env.rho(&["workflow", "status", id, "--output", "json"]);
    let doc: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(doc["lifecycle"], "needs_recovery", "{doc}");

    let out = env.rho(&["workflow", "delete", id, "--yes"]);
    assert_eq!(code(&out), 7, "{}", text(&out));
    assert!(text(&out).contains(&escaped.to_string()), "{}", text(&out));
    assert!(env.run_dir(id).exists(), "the run is still there");

    // Once the user stops it, recovery starts attempt 2 and nothing runs twice.
    sigkill(escaped);
    wait_for("the sleeper to be gone", || !running(escaped));
    let out = env.rho(&["workflow", "resume", id, "--yes", "--recover-uncertain"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let state = run_support::assert_snapshot_matches_journal(&env.run_dir(id)).0;
    assert_eq!(state.lifecycle, Lifecycle::Completed);
    assert_eq!(state.root().node_state("d"), Some(NodeState::Success));
    assert_eq!(state.root().tasks["d"].attempts.len(), 2);
}

/// The owner's children running the `rho` executable: its exec guardian.
fn guardians_of(owner: i32) -> Vec<i32> {
    let mut found = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{owner}/task"))
        .unwrap()
        .flatten()
    {
        let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for pid in children
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.trim() == "rho" {
                found.push(pid);
            }
        }
    }
    found
}

#[test]
fn a_detached_descendant_dies_with_its_killed_owner() {
    if !contained_here() {
        return;
    }
    let env = Env::new();
    let (mut owner, id, escaped, cgroup) = start_detaching_run(&env);
    sigkill(owner.id() as i32);
    owner.wait().unwrap();
    wait_for("the detached sleeper to die with its owner", || {
        !running(escaped)
    });
    // Nothing of the attempt is left, so recovery proceeds (and the node now succeeds).
    std::fs::write(env.ws.join("again"), "").unwrap();
    let out = env.rho(&["workflow", "resume", &id, "--yes", "--recover-uncertain"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(
        rho::containment::Cgroup::open(&cgroup).unwrap().is_none(),
        "the emptied cgroup {cgroup} is removed"
    );
}

#[test]
fn recovery_and_delete_refuse_while_a_detached_descendant_outlives_owner_and_guardian() {
    if !contained_here() {
        return;
    }
    let env = Env::new();
    let (mut owner, id, escaped, cgroup) = start_detaching_run(&env);
    let guardians = guardians_of(owner.id() as i32);
    assert_eq!(guardians.len(), 1, "one exec guardian: {guardians:?}");
    // Both die at once, as in an OOM kill of the session: nothing kills the sleeper.
    sigkill(guardians[0]);
    sigkill(owner.id() as i32);
    owner.wait().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(running(escaped), "the sleeper outlived owner and guardian");

    std::fs::write(env.ws.join("again"), "").unwrap();
    let out = env.rho(&["workflow", "resume", &id, "--yes", "--recover-uncertain"]);
    assert_eq!(code(&out), 7, "{}", text(&out));
    let message = text(&out);
    assert!(
        message.contains(&cgroup)
            && message.contains(&escaped.to_string())
            && message.contains("cgroup.kill"),
        "the refusal names the cgroup, the pid and how to stop it: {message}"
    );
    refused_until_killed_then_recovered(&env, &id, escaped);
    assert!(rho::containment::Cgroup::open(&cgroup).unwrap().is_none());
}

/// Starts `rho workflow run` under `RHO_CONTAINMENT=subreaper` (the fallback, forced where
/// cgroups are delegated) and waits until the node's detached sleeper is recorded. Returns
/// the owner, the run id and the sleeper's pid.
fn start_tracked_run(env: &Env) -> (std::process::Child, String, i32) {
    let (owner, id, escaped, events) = launch_detaching_run(env, Some("subreaper"));
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.kind, EventKind::LaunchIntended { cgroup: None, .. })),
        "no cgroup under the fallback"
    );
    (owner, id, escaped)
}

fn tracked_here() -> bool {
    match rho::containment::tracked::available() {
        Ok(()) => true,
        Err(e)
            if std::env::var_os("CI").is_some()
                || std::env::var_os("RHO_REQUIRE_SANDBOX").is_some_and(|v| v == "1") =>
        {
            panic!("the subreaper fallback is required here: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED (no subreaper fallback on this machine): {e}");
            false
        }
    }
}

#[test]
fn without_a_cgroup_a_detached_descendant_dies_when_its_owner_is_stopped() {
    if !tracked_here() {
        return;
    }
    let env = Env::new();
    let (mut owner, id, escaped) = start_tracked_run(&env);
    // SIGTERM: the owner cancels the run and stops every tree on its way out.
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(owner.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    owner.wait().unwrap();
    wait_for("the detached sleeper to die with its tree", || {
        !running(escaped)
    });
    let state = run_support::assert_snapshot_matches_journal(&env.run_dir(&id)).0;
    assert_eq!(state.root().node_state("d"), Some(NodeState::Cancellation));
    let record = env.run_dir(&id).join("nodes/d/attempts/1/descendants");
    let text = std::fs::read_to_string(&record).unwrap();
    assert!(
        text.starts_with("tag ") && text.lines().any(|l| l.starts_with(&format!("{escaped} "))),
        "the record names the tag and the sleeper: {text}"
    );
}

#[test]
fn without_a_cgroup_recovery_and_delete_refuse_while_a_detached_descendant_outlives_its_owner() {
    if !tracked_here() {
        return;
    }
    let env = Env::new();
    let (mut owner, id, escaped) = start_tracked_run(&env);
    let guardians = guardians_of(owner.id() as i32);
    // The owner dies at once (the subreaper with it): the sleeper is handed to init, and
    // only the durable record (identities and tag) still knows it.
    for guardian in guardians {
        sigkill(guardian);
    }
    sigkill(owner.id() as i32);
    owner.wait().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(running(escaped), "the sleeper outlived its owner");

    std::fs::write(env.ws.join("again"), "").unwrap();
    let out = env.rho(&["workflow", "resume", &id, "--yes", "--recover-uncertain"]);
    assert_eq!(code(&out), 7, "{}", text(&out));
    let message = text(&out);
    assert!(
        message.contains(&escaped.to_string()) && message.contains("kill -KILL"),
        "the refusal names the pid and how to stop it: {message}"
    );
    refused_until_killed_then_recovered(&env, &id, escaped);
}

#[test]
fn without_a_cgroup_a_detached_descendant_dies_with_its_killed_owner() {
    if !tracked_here() {
        return;
    }
    let env = Env::new();
    let (mut owner, id, escaped) = start_tracked_run(&env);
    // Only the owner dies: its guardian kills every process carrying the owner's tags.
    sigkill(owner.id() as i32);
    owner.wait().unwrap();
    wait_for("the detached sleeper to die with its owner", || {
        !running(escaped)
    });
    std::fs::write(env.ws.join("again"), "").unwrap();
    let out = env.rho(&["workflow", "resume", &id, "--yes", "--recover-uncertain"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
}

/// A node that leaves a `setsid` child behind and exits: the child dies with the node, each
/// attempt has a cgroup of its own, and by the time `run` returns every attempt's cgroup is
/// removed (workers remove them after reporting the attempt's end, and the owner waits for
/// them before it closes the run).
#[test]
fn a_detached_child_dies_with_its_node_and_no_attempt_cgroup_outlives_the_run() {
    if !contained_here() {
        return;
    }
    let env = Env::new();
    let leave =
        r#"["sh", "-c", "setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $! >> left.pid"]"#;
    let nodes: Vec<String> = (0..3)
        .map(|i| {
            let needs = if i == 0 {
                String::new()
            } else {
                format!(", needs = [\"n{}\"]", i - 1)
            };
            node(&format!("n{i}"), &needs, leave)
        })
        .collect();
    env.write(
        "wf.star",
        &format!(
            "def build(inputs):\n    return workflow(name = \"leave\", nodes = [{}], exports = {{}})\n\nWORKFLOW = define(inputs = {{}}, build = build)\n",
            nodes.join(", ")
        ),
    );
    let out = env.rho(&["workflow", "run", "wf.star", "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let id = env.run_ids().into_iter().next().unwrap();
    let events = journal::read(&env.run_dir(&id).join("events.jsonl"))
        .unwrap()
        .events;
    let cgroups: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::LaunchIntended { cgroup, .. } => cgroup.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(cgroups.len(), 3, "every attempt names its cgroup");
    assert_eq!(
        cgroups.iter().collect::<BTreeSet<_>>().len(),
        3,
        "no attempt shares another's cgroup: {cgroups:?}"
    );
    for cgroup in &cgroups {
        assert!(
            rho::containment::Cgroup::open(cgroup).unwrap().is_none(),
            "the emptied cgroup {cgroup} is removed by the time run returns"
        );
    }
    let left: Vec<i32> = std::fs::read_to_string(env.ws.join("left.pid"))
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(left.len(), 3);
    for pid in left {
        wait_for("the detached child to die with its node", || !running(pid));
    }
}

/// The owner makes the cgroups of first attempts ahead of their launches (with their
/// directories): those of nodes that never start are gone when `run` returns, like their
/// directories, and the attempts that ran used the cgroup their record names.
#[test]
fn cgroups_made_ahead_for_nodes_that_never_start_do_not_outlive_the_run() {
    if !contained_here() {
        return;
    }
    let env = Env::new();
    let mut nodes = vec![
        node("a", "", r#"["false"]"#),
        node("b", ", needs = [\"a\"]", r#"["true"]"#),
    ];
    // Enough nodes that cgroups are made ahead of launches that never happen.
    for i in 0..40 {
        nodes.push(node(
            &format!("z{i:02}"),
            ", needs = [\"b\"]",
            r#"["true"]"#,
        ));
    }
    env.write(
        "wf.star",
        &format!(
            "def build(inputs):\n    return workflow(name = \"ahead\", nodes = [{}], exports = {{}})\n\nWORKFLOW = define(inputs = {{}}, build = build)\n",
            nodes.join(", ")
        ),
    );
    let out = env.rho(&["workflow", "run", "wf.star", "--yes"]);
    assert_eq!(code(&out), 3, "{}", text(&out));
    let id = env.run_ids().into_iter().next().unwrap();
    let events = journal::read(&env.run_dir(&id).join("events.jsonl"))
        .unwrap()
        .events;
    let launched: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::LaunchIntended { cgroup, .. } => cgroup.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(launched.len(), 1, "only `a` started: {launched:?}");
    let a = &launched[0];
    assert!(a.ends_with(&format!("/{id}.a.1")), "{a}");
    assert!(rho::containment::Cgroup::open(a).unwrap().is_none());
    let root = a.trim_end_matches(&format!("{id}.a.1"));
    for never in std::iter::once("b".to_owned()).chain((0..40).map(|i| format!("z{i:02}"))) {
        let path = format!("{root}{id}.{never}.1");
        assert!(
            rho::containment::Cgroup::open(&path).unwrap().is_none(),
            "the cgroup made ahead for `{never}` is removed: {path}"
        );
    }
}
