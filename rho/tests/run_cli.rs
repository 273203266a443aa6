//! End to end: `rho workflow run/status/cancel/resume` with real binaries, a cleared
//! environment, a temporary `RHO_HOME` and workspace. After every run the snapshot must equal
//! a replay of the journal.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::cast_possible_wrap,
    clippy::too_many_lines
)]

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use rho::workflow::scheduler;
use rho::workflow::state::{Event, EventKind, NodeState, State, apply};

mod run_support;
use run_support::{Env, assert_snapshot_matches_journal, code, node, text};

impl Env {
    fn run_dirs(&self) -> Vec<PathBuf> {
        let runs = self.home.join("workflows/runs");
        let mut out: Vec<PathBuf> = std::fs::read_dir(runs)
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
                    .collect()
            })
            .unwrap_or_default();
        out.sort();
        out
    }

    fn run_id(out: &Output) -> String {
        let stdout = String::from_utf8_lossy(&out.stdout);
        stdout
            .lines()
            .find_map(|l| l.strip_prefix("run_id: "))
            .unwrap_or_else(|| panic!("no run_id in {stdout}"))
            .to_owned()
    }
}

fn workflow(nodes: &[String], exports: &str) -> String {
    format!(
        "def build(inputs):\n    return workflow(name = \"t\", nodes = [{}], exports = {{{exports}}})\n\nWORKFLOW = define(inputs = {{}}, build = build)\n",
        nodes.join(", ")
    )
}

#[test]
fn success_with_outputs_templates_conditions_and_exports() {
    let env = Env::new();
    env.write(
        "wf.star",
        &workflow(
            &[
                node(
                    "a",
                    ", output = schema.stdout_json(schema.record({\"n\": schema.integer()}))",
                    r#"["sh", "-c", "echo '{\"n\": 7}'"]"#,
                ),
                node(
                    "b",
                    ", needs = [\"a\"]",
                    r#"["sh", "-c", template(["test ", output("a", ["n"]), " = 7"])]"#,
                ),
                node(
                    "c",
                    ", needs = [\"b\"], when = condition.equals(status(\"b\"), \"failure\")",
                    r#"["false"]"#,
                ),
                node("d", ", needs = [\"c\"]", r#"["true"]"#),
            ],
            "\"n\": output(\"a\", [\"n\"]), \"c\": exit_code(\"c\")",
        ),
    );
    let out = env.rho(&["workflow", "run", "wf.star", "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let id = Env::run_id(&out);
    let (state, _) = assert_snapshot_matches_journal(&env.run_dir(&id));
    let root = state.root();
    assert_eq!(root.node_state("a"), Some(NodeState::Success));
    assert_eq!(root.node_state("b"), Some(NodeState::Success));
    assert_eq!(root.node_state("c"), Some(NodeState::Skipped));
    assert_eq!(
        root.node_state("d"),
        Some(NodeState::Skipped),
        "a skipped need skips a node without a condition"
    );
    let result = root.result.as_ref().unwrap();
    assert_eq!(result.exports["n"].value, rho_ipc::data::Data::Int(7));
    assert!(!result.exports["c"].available);
    let status = env.rho(&["workflow", "status", &id[..8], "--output", "json"]);
    assert_eq!(code(&status), 0, "{}", text(&status));
    let doc: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(doc["outcome"], "success");
    assert_eq!(doc["lifecycle"], "completed");
    assert_eq!(
        doc["state"]["scopes"]["s0"]["result"]["exports"]["n"]["value"],
        7
    );
    assert!(doc["program"]["root"]["nodes"].is_array());
    assert_eq!(doc["manifest"]["confirmation"]["method"], "--yes");
    let status_text = text(&env.rho(&["workflow", "status", &id]));
    assert!(
        status_text.contains("lifecycle: completed") && status_text.contains("export n = 7"),
        "{status_text}"
    );
    assert!(
        status_text.contains("nodes/a/attempts/1/stdout"),
        "{status_text}"
    );
}

#[test]
fn failure_blocked_allow_failure_and_exit_codes() {
    let env = Env::new();
    env.write(
        "fail.star",
        &workflow(
            &[
                node("a", "", r#"["false"]"#),
                node("b", ", needs = [\"a\"]", r#"["true"]"#),
            ],
            "",
        ),
    );
    let out = env.rho(&["workflow", "run", "fail.star", "--yes"]);
    assert_eq!(code(&out), 3, "failure exits 3: {}", text(&out));
    let (state, _) = assert_snapshot_matches_journal(&env.run_dir(&Env::run_id(&out)));
    assert_eq!(state.root().node_state("b"), Some(NodeState::Blocked));
    assert!(
        state.root().tasks["a"]
            .reason
            .as_deref()
            .unwrap()
            .contains("exited with code 1")
    );

    // allow_failure: the node stays failed, the dependent is blocked, and the outcome is the
    // dependent's: blocked (exit 6).
    env.write(
        "soft.star",
        &workflow(
            &[
                node("a", ", allow_failure = True", r#"["false"]"#),
                node("b", ", needs = [\"a\"]", r#"["true"]"#),
            ],
            "",
        ),
    );
    let out = env.rho(&["workflow", "run", "soft.star", "--yes"]);
    assert_eq!(code(&out), 6, "blocked exits 6: {}", text(&out));
    let (state, _) = assert_snapshot_matches_journal(&env.run_dir(&Env::run_id(&out)));
    assert_eq!(state.root().node_state("a"), Some(NodeState::Failure));

    // allow_failure alone: outcome success.
    env.write(
        "soft2.star",
        &workflow(
            &[
                node("a", ", allow_failure = True", r#"["false"]"#),
                node("b", "", r#"["true"]"#),
            ],
            "",
        ),
    );
    let out = env.rho(&["workflow", "run", "soft2.star", "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
}

/// Every attempt's directory, with its `status.json`, is where Rho 1.47 readers look
/// (`nodes/<NODE>/attempts/<N>/`) when `run` returns, although the owner makes node
/// directories ahead of the launches and workers write `status.json` after reporting the
/// attempt's end; a node that never started leaves no directory.
#[test]
fn attempt_directories_are_where_readers_expect_them_and_unstarted_nodes_leave_none() {
    let env = Env::new();
    let mut nodes = vec![
        node("a", "", r#"["false"]"#),
        node("b", ", needs = [\"a\"]", r#"["true"]"#),
        node("d", "", r#"["echo", "hi"]"#),
    ];
    // Enough nodes that directories are made ahead of launches that never happen.
    for i in 0..40 {
        nodes.push(node(
            &format!("z{i:02}"),
            ", needs = [\"b\"]",
            r#"["true"]"#,
        ));
    }
    env.write("wf.star", &workflow(&nodes, ""));
    let out = env.rho(&["workflow", "run", "wf.star", "--yes"]);
    assert_eq!(code(&out), 3, "{}", text(&out));
    let run = env.run_dir(&Env::run_id(&out));
    for started in ["a", "d"] {
        let attempt = run.join("nodes").join(started).join("attempts/1");
        let status: serde_json::Value = serde_json::from_slice(
            &std::fs::read(attempt.join("status.json"))
                .unwrap_or_else(|e| panic!("{}: {e}", attempt.join("status.json").display())),
        )
        .unwrap();
        assert_eq!(status["node"], started);
        assert_eq!(status["attempt"], 1);
    }
    assert_eq!(
        std::fs::read(run.join("nodes/d/attempts/1/stdout")).unwrap(),
        b"hi\n"
    );
    let mut left: Vec<String> = std::fs::read_dir(run.join("nodes"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["a", "d"], "only nodes that started have a directory");
}

#[test]
fn stdout_json_mismatch_is_a_typed_failure() {
    let env = Env::new();
    env.write(
        "wf.star",
        &workflow(
            &[node(
                "a",
                ", output = schema.stdout_json(schema.record({\"n\": schema.integer()}))",
                r#"["sh", "-c", "echo '{\"n\": \"x\"}'"]"#,
            )],
            "",
        ),
    );
    let out = env.rho(&["workflow", "run", "wf.star", "--yes", "--output", "jsonl"]);
    assert_eq!(code(&out), 3, "{}", text(&out));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        lines
            .iter()
            .all(|l| l["version"] == 1 && l["run_id"].is_string())
    );
    let seqs: Vec<u64> = lines
        .iter()
        .map(|l| l["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    let finished = lines
        .iter()
        .find(|l| l["event"] == "node_finished")
        .unwrap();
    assert_eq!(finished["state"], "failure");
    assert!(
        finished["reason"]
            .as_str()
            .unwrap()
            .contains("$.n: expected integer, found string"),
        "{finished}"
    );
    assert_eq!(lines.last().unwrap()["event"], "completed");
    assert_eq!(lines.last().unwrap()["outcome"], "failure");
}

#[test]
fn plan_mode_denies_with_who_and_why() {
    let env = Env::new();
    env.write("wf.star", &workflow(&[node("a", "", r#"["true"]"#)], ""));
    let out = env
        .command(&["workflow", "run", "wf.star", "--yes"])
        .env("RHO_PERMISSION_MODE", "plan")
        .output()
        .unwrap();
    assert_eq!(code(&out), 4, "denial exits 4: {}", text(&out));
    let id = Env::run_id(&out);
    let (state, _) = assert_snapshot_matches_journal(&env.run_dir(&id));
    let attempt = &state.root().tasks["a"].attempts[0];
    let denial = attempt.denial.as_ref().unwrap();
    assert_eq!(denial.decided_by, "policy");
    assert_eq!(denial.mode, "plan");
    let status = text(&env.rho(&["workflow", "status", &id]));
    assert!(
        status.contains("denied by policy") && status.contains("plan"),
        "{status}"
    );
}

#[test]
fn confirmation_is_required_without_a_terminal() {
    let env = Env::new();
    env.write("wf.star", &workflow(&[node("a", "", r#"["true"]"#)], ""));
    let out = env.rho(&["workflow", "run", "wf.star"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(text(&out).contains("--yes"), "{}", text(&out));
    assert!(env.run_dirs().is_empty(), "nothing may run without consent");
}

#[test]
fn agent_node_without_a_model_fails_saying_so() {
    let env = Env::new();
    env.write(
        "wf.star",
        "def build(inputs):\n    a = agent(name = \"a\", agent = \"default\", prompt = \"hi\", timeout_seconds = 60, max_output_bytes = 4096)\n    return workflow(name = \"t\", nodes = [a])\n\nWORKFLOW = define(inputs = {}, build = build)\n",
    );
    let out = env.rho(&["workflow", "run", "wf.star", "--yes"]);
    assert_eq!(code(&out), 3, "{}", text(&out));
    assert!(text(&out).contains("no model selected"), "{}", text(&out));
}

#[test]
fn cancel_stops_the_tree_and_resume_runs_it_again() {
    let env = Env::new();
    let marker = env.ws.join("second-run");
    env.write(
        "wf.star",
        &workflow(
            &[node(
                "s",
                "",
                &format!(r#"["sh", "-c", "if [ -e {m} ]; then exit 0; fi; touch {m}; sleep 30 & echo $! > child.pid; wait"]"#, m = marker.display()),
            )],
            "",
        ),
    );
    let child = env
        .command(&["workflow", "run", "wf.star", "--yes"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the node to be launched.
    let deadline = Instant::now() + Duration::from_secs(20);
    let id = loop {
        if let Some(dir) = env.run_dirs().first()
            && std::fs::read_to_string(dir.join("events.jsonl"))
                .unwrap_or_default()
                .contains("\"launched\"")
            && env.ws.join("child.pid").exists()
        {
            break dir.file_name().unwrap().to_string_lossy().into_owned();
        }
        assert!(Instant::now() < deadline, "the node never launched");
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = env.rho(&["workflow", "cancel", &id]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["cancellation_state"], "acknowledged", "{answer}");
    assert!(answer["request_id"].is_string());
    let owner = child.wait_with_output().unwrap();
    assert_eq!(code(&owner), 5, "cancellation exits 5: {}", text(&owner));
    let grandchild: i32 = std::fs::read_to_string(env.ws.join("child.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Killed with its group; allow a moment for the reparented zombie to be reaped.
    let gone = Instant::now() + Duration::from_secs(5);
    let alive = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
    };
    while alive(grandchild) && Instant::now() < gone {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!alive(grandchild), "the background sleep must be gone");
    let (state, _) = assert_snapshot_matches_journal(&env.run_dir(&id));
    assert_eq!(state.root().node_state("s"), Some(NodeState::Cancellation));
    assert_eq!(
        state.root().result.as_ref().unwrap().outcome,
        rho::workflow::state::Outcome::Cancellation
    );
    assert!(state.cancel.as_ref().unwrap().completed);

    let again = env.rho(&["workflow", "cancel", &id]);
    let answer: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(answer["cancellation_state"], "already_completed");

    let resumed = env.rho(&["workflow", "resume", &id, "--yes"]);
    assert_eq!(code(&resumed), 0, "{}", text(&resumed));
    let (state, events) = assert_snapshot_matches_journal(&env.run_dir(&id));
    let task = &state.root().tasks["s"];
    assert_eq!(task.state, NodeState::Success);
    assert_eq!(
        task.attempts.len(),
        2,
        "resume gives the cancelled node attempt 2"
    );
    // The reopening is journaled before any task changes.
    let reopen = events
        .iter()
        .position(|e| matches!(e.kind, EventKind::ScopeReopened { .. }))
        .unwrap();
    let reset = events
        .iter()
        .position(|e| {
            matches!(
                &e.kind,
                EventKind::NodeStateChanged {
                    state: NodeState::Pending,
                    ..
                }
            )
        })
        .unwrap();
    assert!(reopen < reset);
}

#[test]
fn sigterm_to_the_owner_cancels_and_says_how_to_resume() {
    let env = Env::new();
    env.write(
        "wf.star",
        &workflow(&[node("s", "", r#"["sleep", "30"]"#)], ""),
    );
    let child = env
        .command(&["workflow", "run", "wf.star", "--yes"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(dir) = env.run_dirs().first()
            && std::fs::read_to_string(dir.join("events.jsonl"))
                .unwrap_or_default()
                .contains("\"launched\"")
        {
            break;
        }
        assert!(Instant::now() < deadline, "the node never launched");
        std::thread::sleep(Duration::from_millis(20));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 5, "{}", text(&out));
    assert!(text(&out).contains("rho workflow resume"), "{}", text(&out));
    let dir = env.run_dirs().remove(0);
    let (state, _) = assert_snapshot_matches_journal(&dir);
    assert_eq!(state.cancel.as_ref().unwrap().request_id, "signal-SIGTERM");
}

#[test]
fn dead_owner_is_detected_by_status_and_resume_needs_recovery() {
    let env = Env::new();
    let marker = env.ws.join("first-attempt");
    env.write(
        "wf.star",
        &workflow(
            &[node(
                "s",
                "",
                &format!(
                    r#"["sh", "-c", "if [ -e {m} ]; then exit 0; fi; touch {m}; exec sleep 30"]"#,
                    m = marker.display()
                ),
            )],
            "",
        ),
    );
    let mut child = env
        .command(&["workflow", "run", "wf.star", "--yes"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let dir = loop {
        if let Some(dir) = env.run_dirs().first()
            && std::fs::read_to_string(dir.join("events.jsonl"))
                .unwrap_or_default()
                .contains("\"launched\"")
        {
            break dir.clone();
        }
        assert!(Instant::now() < deadline, "the node never launched");
        std::thread::sleep(Duration::from_millis(20));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    let id = dir.file_name().unwrap().to_string_lossy().into_owned();
    let status = env.rho(&["workflow", "status", &id, "--output", "json"]);
    let doc: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(doc["lifecycle"], "needs_recovery", "{doc}");
    assert!(
        doc["needs_recovery"][0]
            .as_str()
            .unwrap()
            .contains("last known pid"),
        "{doc}"
    );
    let resumed = env.rho(&["workflow", "resume", &id, "--yes"]);
    assert_eq!(code(&resumed), 7, "{}", text(&resumed));
    assert!(
        text(&resumed).contains("--recover-uncertain"),
        "{}",
        text(&resumed)
    );
    // The exec guardian stops the orphaned tree; wait for it, then recover.
    let deadline = Instant::now() + Duration::from_secs(15);
    let recovered = loop {
        let out = env.rho(&["workflow", "resume", &id, "--yes", "--recover-uncertain"]);
        if code(&out) != 7 || Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(code(&recovered), 0, "{}", text(&recovered));
    let (state, _) = assert_snapshot_matches_journal(&dir);
    let task = &state.root().tasks["s"];
    assert_eq!(
        task.attempts[0].phase,
        rho::workflow::state::AttemptPhase::InterruptedUncertain
    );
    assert_eq!(
        task.state,
        NodeState::Success,
        "the recovery attempt ran; nothing inferred success"
    );
    assert_eq!(task.attempts.len(), 2);
}

#[test]
fn replaying_a_journal_reproduces_every_launch_decision() {
    let env = Env::new();
    let mut nodes = Vec::new();
    for i in 0..6 {
        let needs = if i >= 2 {
            format!(", needs = [\"n{}\", \"n{}\"]", i - 1, i - 2)
        } else {
            String::new()
        };
        let argv = if i == 3 {
            r#"["false"]"#
        } else {
            r#"["true"]"#
        };
        nodes.push(node(
            &format!("n{i}"),
            &format!(
                "{needs}{}",
                if i == 3 { ", allow_failure = True" } else { "" }
            ),
            argv,
        ));
    }
    nodes.push(node(
        "z",
        ", needs = [\"n3\"], when = condition.equals(status(\"n3\"), \"failure\")",
        r#"["true"]"#,
    ));
    env.write("wf.star", &workflow(&nodes, ""));
    let out = env.rho(&["workflow", "run", "wf.star", "--yes"]);
    let id = Env::run_id(&out);
    let dir = env.run_dir(&id);
    let (_, events) = assert_snapshot_matches_journal(&dir);
    let bytes = std::fs::read(dir.join("program.cbor")).unwrap();
    let program: rho_ipc::program::FrozenProgram =
        rho_ipc::canonical::from_canonical_bytes(&bytes).unwrap();
    // Every maximal block of decisions and launch intents is exactly one scheduling pass over
    // the state before it.
    let mut state = State::empty();
    let mut i = 0;
    let mut passes = 0;
    while i < events.len() {
        let is_pass_event = |e: &Event| match &e.kind {
            EventKind::NodeStateChanged { state, .. } => matches!(
                state,
                NodeState::Ready | NodeState::Skipped | NodeState::Blocked
            ),
            EventKind::LaunchIntended { .. } => true,
            _ => false,
        };
        if is_pass_event(&events[i]) && state.lifecycle == rho::workflow::state::Lifecycle::Running
        {
            let pass = scheduler::pass(&program, state.root());
            let mut j = i;
            while j < events.len() && is_pass_event(&events[j]) {
                j += 1;
            }
            let decided: Vec<(String, NodeState)> = events[i..j]
                .iter()
                .filter_map(|e| match &e.kind {
                    EventKind::NodeStateChanged { node, state, .. } => Some((node.clone(), *state)),
                    _ => None,
                })
                .collect();
            let launched: Vec<String> = events[i..j]
                .iter()
                .filter_map(|e| match &e.kind {
                    EventKind::LaunchIntended { node, .. } => Some(node.clone()),
                    _ => None,
                })
                .collect();
            assert_eq!(
                decided,
                pass.decisions
                    .iter()
                    .map(|d| (d.node.clone(), d.state))
                    .collect::<Vec<_>>()
            );
            assert_eq!(launched, pass.launches);
            for e in &events[i..j] {
                apply(&mut state, e).unwrap();
            }
            passes += 1;
            i = j;
        } else {
            apply(&mut state, &events[i]).unwrap();
            i += 1;
        }
    }
    // n0..n3 and z launch (n4 and n5 are blocked by n3's failure): five passes launched.
    assert_eq!(passes, 5, "every launch came from a replayed pass");
    assert_eq!(state.root().node_state("z"), Some(NodeState::Success));
}

#[test]
fn two_owners_never_overlap_mutating_nodes() {
    let env = Env::new();
    let log = env.ws.join("stamps.log");
    let script = format!(
        r#"["sh", "-c", "echo start $$ >> {l}; sleep 0.05; echo end $$ >> {l}"]"#,
        l = log.display()
    );
    let nodes: Vec<String> = (0..6)
        .map(|i| node(&format!("m{i}"), "", &script))
        .collect();
    env.write("wf.star", &workflow(&nodes, ""));
    let plan = env.rho(&["workflow", "plan", "wf.star"]);
    assert_eq!(code(&plan), 0, "{}", text(&plan));
    let plan_id = String::from_utf8_lossy(&plan.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("plan_id: "))
        .unwrap()
        .to_owned();
    let a = env
        .command(&["workflow", "run", &plan_id, "--yes"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let b = env
        .command(&["workflow", "run", &plan_id, "--yes"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    assert_eq!(code(&a.wait_with_output().unwrap()), 0);
    assert_eq!(code(&b.wait_with_output().unwrap()), 0);
    let stamps = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = stamps.lines().collect();
    assert_eq!(lines.len(), 24);
    for pair in lines.chunks(2) {
        let (s, e) = (pair[0], pair[1]);
        assert!(
            s.starts_with("start ") && e.starts_with("end "),
            "interleaved: {stamps}"
        );
        assert_eq!(s[6..], e[4..], "interleaved: {stamps}");
    }
    for dir in env.run_dirs() {
        assert_snapshot_matches_journal(&dir);
    }
}

#[test]
fn delete_refuses_an_owned_run_and_list_shows_runs() {
    let env = Env::new();
    env.write("wf.star", &workflow(&[node("a", "", r#"["true"]"#)], ""));
    let out = env.rho(&["workflow", "run", "wf.star", "--yes"]);
    let id = Env::run_id(&out);
    // Hold the run's lock as an owner would.
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(env.run_dir(&id).join("mutation.lock"))
        .unwrap();
    let held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusiveNonblock).unwrap();
    let refused = env.rho(&["workflow", "delete", &id, "--yes"]);
    assert_ne!(code(&refused), 0, "{}", text(&refused));
    assert!(env.run_dir(&id).exists());
    drop(held);
    let listed = env.rho(&["workflow", "list", "--runs", "--json"]);
    assert_eq!(code(&listed), 0, "{}", text(&listed));
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains(&id),
        "{}",
        text(&listed)
    );
    let deleted = env.rho(&["workflow", "delete", &id, "--yes"]);
    assert_eq!(code(&deleted), 0, "{}", text(&deleted));
    assert!(!env.run_dir(&id).exists());
}

/// The attempts of node `s` whose process started, from the journal.
fn launched_attempts(dir: &Path) -> usize {
    let contents = rho::workflow::journal::read(&dir.join("events.jsonl")).unwrap();
    contents
        .events
        .iter()
        .filter(|e| matches!(&e.kind, EventKind::Launched { node, .. } if node == "s"))
        .count()
}

/// Waits for `count` launched attempts while `owner` runs; an owner that exits first fails
/// the test with its output.
fn wait_for_launches(owner: &mut std::process::Child, dir: &Path, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while launched_attempts(dir) < count {
        if let Some(status) = owner.try_wait().unwrap() {
            let mut stderr = String::new();
            if let Some(mut pipe) = owner.stderr.take() {
                std::io::Read::read_to_string(&mut pipe, &mut stderr).unwrap();
            }
            panic!("the owner exited ({status}) before attempt {count} launched: {stderr}");
        }
        assert!(Instant::now() < deadline, "attempt {count} never launched");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn cancel_then_an_immediate_resume_always_finds_the_run_released() {
    const ROUNDS: usize = 10;
    let env = Env::new();
    let release = env.ws.join("release");
    env.write(
        "wf.star",
        &workflow(
            &[node(
                "s",
                "",
                &format!(
                    r#"["sh", "-c", "test -e {r} && exit 0; exec sleep 30"]"#,
                    r = release.display()
                ),
            )],
            "",
        ),
    );
    // Every owner pauses once it is done and still holds the run: an acknowledgement
    // published before the release would be seen during the pause, and the resume after it
    // would find the run owned.
    let owner_command = |args: &[&str]| {
        let mut cmd = env.command(args);
        cmd.env("RHO_TEST_STALL_AT", "owner:letting_go")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd
    };
    let mut owner = owner_command(&["workflow", "run", "wf.star", "--yes"])
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let dir = loop {
        if let Some(dir) = env.run_dirs().first()
            && dir.join("events.jsonl").exists()
        {
            break dir.clone();
        }
        assert!(Instant::now() < deadline, "the run never appeared");
        std::thread::sleep(Duration::from_millis(10));
    };
    let id = dir.file_name().unwrap().to_string_lossy().into_owned();
    for round in 1..=ROUNDS {
        wait_for_launches(&mut owner, &dir, round);
        let out = env.rho(&["workflow", "cancel", &id]);
        assert_eq!(code(&out), 0, "round {round}: {}", text(&out));
        let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            answer["cancellation_state"], "acknowledged",
            "round {round}: {answer}"
        );
        let request_id = answer["request_id"].as_str().unwrap();
        let ack: serde_json::Value = serde_json::from_slice(
            &std::fs::read(dir.join(format!("cancel-acknowledged-{request_id}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(ack["state"], "acknowledged");
        if round == ROUNDS {
            std::fs::write(&release, "").unwrap();
        }
        // At once: `acknowledged` means the run is already released.
        let next = owner_command(&["workflow", "resume", &id, "--yes"])
            .spawn()
            .unwrap();
        let previous = std::mem::replace(&mut owner, next)
            .wait_with_output()
            .unwrap();
        assert_eq!(code(&previous), 5, "round {round}: {}", text(&previous));
    }
    let last = owner.wait_with_output().unwrap();
    assert_eq!(code(&last), 0, "{}", text(&last));

    let (state, events) = assert_snapshot_matches_journal(&dir);
    let task = &state.root().tasks["s"];
    assert_eq!(task.state, NodeState::Success);
    assert_eq!(task.attempts.len(), ROUNDS + 1);
    assert!(
        task.attempts[..ROUNDS]
            .iter()
            .all(|a| a.state == Some(NodeState::Cancellation)),
        "{:?}",
        task.attempts
    );
    let ack = dir.join(format!(
        "cancel-acknowledged-{}.json",
        state.cancel.as_ref().unwrap().request_id
    ));
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&ack).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "acknowledgements are private");
    assert!(
        !dir.join("cancel.json").exists(),
        "a handled request is removed"
    );
    // Every owner's consent is journaled: the run's and each resume's.
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    let consents: Vec<(String, String, String)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ConsentGiven {
                command,
                digest,
                method,
                at,
            } => {
                assert!(at.ends_with('Z'), "{at}");
                Some((command.clone(), digest.clone(), method.clone()))
            }
            _ => None,
        })
        .collect();
    let digest = manifest["program_digest"].as_str().unwrap().to_owned();
    let mut expected = vec![("run".to_owned(), digest.clone(), "--yes".to_owned())];
    expected.extend((0..ROUNDS).map(|_| ("resume".to_owned(), digest.clone(), "--yes".to_owned())));
    assert_eq!(consents, expected);
}

#[test]
fn jsonl_reports_needs_recovery_once_and_the_resume_hint_on_stderr() {
    let env = Env::new();
    env.write(
        "wf.star",
        &workflow(&[node("s", "", r#"["sleep", "30"]"#)], ""),
    );
    let mut owner = env
        .command(&["workflow", "run", "wf.star", "--yes", "--output", "jsonl"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let dir = loop {
        if let Some(dir) = env.run_dirs().first()
            && dir.join("events.jsonl").exists()
        {
            break dir.clone();
        }
        assert!(Instant::now() < deadline, "the run never appeared");
        std::thread::sleep(Duration::from_millis(10));
    };
    let id = dir.file_name().unwrap().to_string_lossy().into_owned();
    wait_for_launches(&mut owner, &dir, 1);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(owner.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = owner.wait_with_output().unwrap();
    assert_eq!(code(&out), 5, "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for line in stdout.lines() {
        serde_json::from_str::<serde_json::Value>(line)
            .unwrap_or_else(|e| panic!("stdout holds only JSON lines ({e}): {line}"));
    }
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains(&format!("resume with: rho workflow resume {id}")),
        "{}",
        text(&out)
    );
    assert_snapshot_matches_journal(&dir);

    // An owner that dies with its attempt in flight: the next resume needs recovery, and
    // says so once, naming the attempt.
    let mut owner = env
        .command(&["workflow", "resume", &id, "--yes"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_launches(&mut owner, &dir, 2);
    owner.kill().unwrap();
    owner.wait().unwrap();
    let out = env.rho(&["workflow", "resume", &id, "--yes", "--output", "jsonl"]);
    assert_eq!(code(&out), 7, "{}", text(&out));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let recovery: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["event"] == "needs_recovery")
        .collect();
    assert_eq!(recovery.len(), 1, "{lines:?}");
    let attempts = recovery[0]["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{lines:?}");
    assert!(
        attempts[0].as_str().unwrap().contains("node `s` attempt 2"),
        "{lines:?}"
    );
    assert_snapshot_matches_journal(&dir);
}
