//! Crash consistency: the owning `rho` is killed with SIGKILL at many points of a run, and
//! after every kill the store must tell the truth and recovery must reach the result of an
//! uninterrupted run.
//!
//! Kill points are deterministic: `RHO_TEST_CRASH_AT=<point>:<n>` (see
//! `rho::workflow::crashpoint`) makes the owner kill itself the `n`-th time it reaches a named
//! point (a journal record appended but not written, a batch written but not synced, a sync,
//! around `state.json` writes, just before and after a node process starts). For each point
//! the harness tries `n = 1, 2, ...` until the run no longer reaches it. Kills in the middle of
//! output capture come from outside, when the node's stdout artifact has grown.
//!
//! After each kill: the journal replays; `state.json` is never ahead of it and equals a replay
//! of its prefix; no node is `success` unless its command wrote its completion marker (the
//! last thing it does before exiting 0); in-flight attempts make `status` say
//! `needs_recovery` and plain `resume` exit 7; and `resume --recover-uncertain` ends with the
//! outcome, node states and exports of an uninterrupted run, without rerunning a node that
//! had already succeeded.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::cast_possible_wrap,
    clippy::too_many_lines
)]

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use rho::workflow::journal;
use rho::workflow::state::{AttemptPhase, Event, EventKind, Lifecycle, NodeState, State, replay};

mod run_support;
use run_support::{Env, code, node as cmd, text};

impl Env {
    fn done_dir(&self) -> PathBuf {
        self.ws.join("done")
    }

    /// Empties the completion markers before a scenario.
    fn reset_markers(&self) {
        let _ = std::fs::remove_dir_all(self.done_dir());
        std::fs::create_dir(self.done_dir()).unwrap();
    }

    /// Writes `source` to `file` in the workspace and plans it.
    fn plan_source(&self, file: &str, source: &str) -> String {
        std::fs::write(self.ws.join(file), source).unwrap();
        self.plan(file)
    }

    /// The id of the one run created since `before` was taken.
    fn new_run(&self, before: &BTreeSet<String>) -> String {
        let now = self.run_ids();
        let fresh: Vec<&String> = now.difference(before).collect();
        assert_eq!(fresh.len(), 1, "expected one new run, found {fresh:?}");
        fresh[0].clone()
    }
}

fn workflow(nodes: &[String], exports: &str) -> String {
    format!(
        "def build(inputs):\n    return workflow(name = \"crash\", nodes = [{}], exports = {{{exports}}})\n\nWORKFLOW = define(inputs = {{}}, build = build)\n",
        nodes.join(", ")
    )
}

/// Four nodes in a chain: stdout_json output, a template reading it, a skipped condition and
/// a plain command; outcome `success` with an export.
fn chain_workflow() -> String {
    workflow(
        &[
            cmd(
                "a",
                ", output = schema.stdout_json(schema.record({\"n\": schema.integer()}))",
                r#"["sh", "-c", "printf '{\"n\": 7}' && touch done/a"]"#,
            ),
            cmd(
                "b",
                ", needs = [\"a\"]",
                r#"["sh", "-c", template(["test ", output("a", ["n"]), " = 7 && touch done/b"])]"#,
            ),
            cmd(
                "c",
                ", needs = [\"b\"], when = condition.equals(status(\"b\"), \"failure\")",
                r#"["sh", "-c", "touch done/c"]"#,
            ),
            cmd(
                "d",
                ", needs = [\"b\"]",
                r#"["sh", "-c", "echo d && touch done/d"]"#,
            ),
        ],
        "\"n\": output(\"a\", [\"n\"])",
    )
}

/// Failure, blocking, an allowed failure and a condition on it; outcome `failure`.
fn mixed_workflow() -> String {
    workflow(
        &[
            cmd("s", ", allow_failure = True", r#"["sh", "-c", "exit 4"]"#),
            cmd(
                "w",
                ", needs = [\"s\"], when = condition.equals(status(\"s\"), \"failure\")",
                r#"["sh", "-c", "touch done/w"]"#,
            ),
            cmd("x", "", r#"["sh", "-c", "echo no >&2; exit 3"]"#),
            cmd("y", ", needs = [\"x\"]", r#"["sh", "-c", "touch done/y"]"#),
            cmd("z", "", r#"["sh", "-c", "touch done/z"]"#),
        ],
        "\"x\": exit_code(\"x\")",
    )
}

/// What an uninterrupted run ends with.
#[derive(Debug, Clone, PartialEq)]
struct Ending {
    exit: i32,
    outcome: String,
    states: BTreeMap<String, NodeState>,
    exports: serde_json::Value,
}

fn ending(exit: i32, state: &State) -> Ending {
    let root = state.root();
    let result = root.result.as_ref().expect("the root scope closed");
    Ending {
        exit,
        outcome: result.outcome.as_str().to_owned(),
        states: root
            .tasks
            .iter()
            .map(|(id, t)| (id.clone(), t.state))
            .collect(),
        exports: serde_json::to_value(&result.exports).unwrap(),
    }
}

/// Reads the journal, checks the snapshot against it and returns the replayed state.
fn check_store(dir: &Path, context: &str) -> State {
    let contents = journal::read(&dir.join("events.jsonl"))
        .unwrap_or_else(|e| panic!("{context}: the journal must read back: {e}"));
    let full =
        replay(&contents.events).unwrap_or_else(|e| panic!("{context}: the journal replays: {e}"));
    let snapshot: State = serde_json::from_slice(&std::fs::read(dir.join("state.json")).unwrap())
        .unwrap_or_else(|e| panic!("{context}: state.json parses: {e}"));
    assert!(
        snapshot.last_event_sequence <= full.last_event_sequence,
        "{context}: state.json (record {}) is ahead of the journal (record {})",
        snapshot.last_event_sequence,
        full.last_event_sequence
    );
    let prefix: Vec<_> = contents
        .events
        .iter()
        .filter(|e| e.seq <= snapshot.last_event_sequence)
        .cloned()
        .collect();
    assert_eq!(
        replay(&prefix).unwrap(),
        snapshot,
        "{context}: state.json must equal a replay of the journal up to its sequence"
    );
    full
}

/// No node is `success` unless its command finished successfully (wrote its marker).
fn check_success_markers(env: &Env, state: &State, context: &str) {
    for (id, task) in &state.root().tasks {
        if task.state == NodeState::Success {
            assert!(
                env.done_dir().join(id).exists(),
                "{context}: node {id} is success but its command never completed"
            );
        }
    }
}

/// Cuts the journal's last record in half, as a power loss in the middle of a write would.
/// Only for a kill right after a batch was written and before it was synced: a synced record
/// never tears (and a started process always has a synced `launch_intended`). Returns
/// whether it cut anything.
fn tear_last_record(dir: &Path, snapshot_seq: u64) -> bool {
    let path = dir.join("events.jsonl");
    let bytes = std::fs::read(&path).unwrap();
    let contents = journal::read(&path).unwrap();
    let Some(last) = contents.events.last() else {
        return false;
    };
    if last.seq <= snapshot_seq || last.seq == 1 {
        return false;
    }
    let body = &bytes[..bytes.len() - 1];
    let start = body.iter().rposition(|b| *b == b'\n').map_or(0, |p| p + 1);
    let cut = start + (bytes.len() - start) / 2;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(cut as u64)
        .unwrap();
    true
}

/// Resumes with `--recover-uncertain`, waiting (bounded) while a process of the old attempt
/// is still on its way out.
fn recover(env: &Env, id: &str) -> Output {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = env.rho(&["workflow", "resume", id, "--yes", "--recover-uncertain"]);
        if code(&out) == 7 && text(&out).contains("still alive") && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        return out;
    }
}

/// Everything checked after the owner of run `id` died (panics on a lie); returns whether the
/// journal's tail was torn on purpose.
fn check_after_kill(env: &Env, id: &str, reference: &Ending, tear: bool, context: &str) -> bool {
    let dir = env.run_dir(id);
    let crashed = check_store(&dir, context);
    check_success_markers(env, &crashed, context);
    let snapshot_seq: u64 =
        serde_json::from_slice::<State>(&std::fs::read(dir.join("state.json")).unwrap())
            .unwrap()
            .last_event_sequence;
    let torn = tear && tear_last_record(&dir, snapshot_seq);
    let crashed = if torn {
        check_store(&dir, context)
    } else {
        crashed
    };
    let in_flight = crashed.open_attempts().len();
    // Attempts the next owner will call uncertain: in flight now, or already declared so by
    // an owner that died in its turn.
    let needs = in_flight + crashed.uncertain_attempts().len();
    let succeeded: BTreeMap<String, usize> = crashed
        .root()
        .tasks
        .iter()
        .filter(|(_, t)| t.state == NodeState::Success)
        .map(|(id, t)| (id.clone(), t.attempts.len()))
        .collect();

    // status finds the dead owner by itself.
    let status = env.rho(&["workflow", "status", id, "--output", "json"]);
    assert_eq!(code(&status), 0, "{context}: {}", text(&status));
    let doc: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    if needs > 0 {
        assert_eq!(doc["lifecycle"], "needs_recovery", "{context}: {doc}");
        assert_eq!(
            doc["needs_recovery"].as_array().map(Vec::len),
            Some(needs),
            "{context}: {doc}"
        );
        let plain = env.rho(&["workflow", "resume", id, "--yes"]);
        assert_eq!(code(&plain), 7, "{context}: {}", text(&plain));
        assert!(
            text(&plain).contains("--recover-uncertain"),
            "{context}: {}",
            text(&plain)
        );
        let refused = check_store(&dir, context);
        assert_eq!(refused.lifecycle, Lifecycle::NeedsRecovery, "{context}");
        assert_eq!(refused.uncertain_attempts().len(), needs, "{context}");
        assert!(refused.open_attempts().is_empty(), "{context}");
        check_success_markers(env, &refused, context);
        let again = env.rho(&["workflow", "status", id, "--output", "json"]);
        let doc: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
        assert_eq!(doc["lifecycle"], "needs_recovery", "{context}: {doc}");
    } else {
        assert_ne!(doc["lifecycle"], "needs_recovery", "{context}: {doc}");
    }

    let out = recover(env, id);
    assert_eq!(
        code(&out),
        reference.exit,
        "{context}: recovery ends like an uninterrupted run: {}",
        text(&out)
    );
    let finished = check_store(&dir, context);
    // The final snapshot covers the whole journal but the record vouching for it.
    assert_eq!(
        finished.last_event_sequence,
        serde_json::from_slice::<State>(&std::fs::read(dir.join("state.json")).unwrap())
            .unwrap()
            .last_event_sequence
            + 1,
        "{context}: the final snapshot covers the whole journal"
    );
    assert!(
        matches!(
            journal::read(&dir.join("events.jsonl"))
                .unwrap()
                .events
                .last(),
            Some(Event {
                kind: EventKind::SnapshotWritten { .. },
                ..
            })
        ),
        "{context}: the journal ends vouching for the final snapshot"
    );
    assert_eq!(
        journal::read(&dir.join("events.jsonl")).unwrap().torn_bytes,
        0,
        "{context}"
    );
    assert_eq!(finished.lifecycle, Lifecycle::Completed, "{context}");
    assert!(finished.owner.is_none(), "{context}: the owner closed");
    assert!(finished.open_attempts().is_empty(), "{context}");
    assert_eq!(&ending(code(&out), &finished), reference, "{context}");
    check_success_markers(env, &finished, context);
    for (node, attempts) in &succeeded {
        assert_eq!(
            finished.root().tasks[node].attempts.len(),
            *attempts,
            "{context}: node {node} had succeeded and must not run again"
        );
    }
    if torn {
        let events = journal::read(&dir.join("events.jsonl")).unwrap().events;
        assert!(
            events
                .iter()
                .any(|e| matches!(e.kind, EventKind::JournalRepaired { .. })),
            "{context}: the torn tail was repaired and journaled"
        );
    }
    for task in finished.root().tasks.values() {
        for a in &task.attempts {
            assert_ne!(a.phase, AttemptPhase::Intended, "{context}");
            assert_ne!(a.phase, AttemptPhase::Launched, "{context}");
        }
    }
    torn
}

/// Every named crash point.
const POINTS: &[&str] = &[
    "record:owner_opened",
    "record:lifecycle_changed",
    "record:node_state_changed",
    "record:launch_intended",
    "record:launched",
    "record:attempt_finished",
    "record:scope_closed",
    "record:owner_closed",
    "record:snapshot_written",
    "journal:written",
    "journal:synced",
    "state:write",
    "store:rename",
    "state:written",
    "worker:spawn",
    "worker:spawned",
];

/// Runs `source` uninterrupted, then once per reachable kill point; returns the number of
/// kills checked.
fn crash_matrix(source: &str, expected_exit: i32) -> usize {
    let env = Env::new();
    let plan_id = env.plan_source("wf.star", source);

    env.reset_markers();
    let before = env.run_ids();
    let out = env.rho(&["workflow", "run", &plan_id, "--yes"]);
    assert_eq!(code(&out), expected_exit, "{}", text(&out));
    let id = env.new_run(&before);
    let state = check_store(&env.run_dir(&id), "uninterrupted run");
    check_success_markers(&env, &state, "uninterrupted run");
    let reference = ending(code(&out), &state);

    let mut kills = 0;
    let mut torn = 0;
    for point in POINTS {
        let mut reached_end = false;
        for n in 1..=40u32 {
            env.reset_markers();
            let before = env.run_ids();
            let out = env
                .command(&["workflow", "run", &plan_id, "--yes"])
                .env("RHO_TEST_CRASH_AT", format!("{point}:{n}"))
                .output()
                .unwrap();
            let id = env.new_run(&before);
            let context = format!("kill at {point}:{n} (run {id})");
            if out.status.signal() != Some(libc::SIGKILL) {
                // The run passed the point fewer than n times and finished normally.
                assert_eq!(code(&out), reference.exit, "{context}: {}", text(&out));
                let state = check_store(&env.run_dir(&id), &context);
                assert_eq!(&ending(code(&out), &state), &reference, "{context}");
                assert!(
                    n > 1,
                    "{context}: every point is reached at least once by this workflow"
                );
                reached_end = true;
                break;
            }
            kills += 1;
            let tear = *point == "journal:written" && n % 2 == 1;
            torn += usize::from(check_after_kill(&env, &id, &reference, tear, &context));
        }
        assert!(
            reached_end,
            "{point}: more occurrences than the harness tries"
        );
    }
    assert!(
        torn > 0,
        "no scenario exercised the repair of a torn journal tail"
    );
    kills
}

/// Like [`crash_matrix`], but the owner that dies at each point is the one recovering a run
/// whose first owner died at `first`.
fn recovery_crash_matrix(source: &str, expected_exit: i32, first: &str) -> usize {
    let env = Env::new();
    let plan_id = env.plan_source("wf.star", source);
    env.reset_markers();
    let before = env.run_ids();
    let out = env.rho(&["workflow", "run", &plan_id, "--yes"]);
    assert_eq!(code(&out), expected_exit, "{}", text(&out));
    let state = check_store(&env.run_dir(&env.new_run(&before)), "uninterrupted run");
    let reference = ending(code(&out), &state);

    let mut kills = 0;
    for point in POINTS {
        let mut reached_end = false;
        for n in 1..=40u32 {
            env.reset_markers();
            let before = env.run_ids();
            let out = env
                .command(&["workflow", "run", &plan_id, "--yes"])
                .env("RHO_TEST_CRASH_AT", first)
                .output()
                .unwrap();
            assert_eq!(out.status.signal(), Some(libc::SIGKILL), "{}", text(&out));
            let id = env.new_run(&before);
            let context =
                format!("kill at {first}, then while recovering at {point}:{n} (run {id})");
            let deadline = Instant::now() + Duration::from_secs(20);
            let out = loop {
                let out = env
                    .command(&["workflow", "resume", &id, "--yes", "--recover-uncertain"])
                    .env("RHO_TEST_CRASH_AT", format!("{point}:{n}"))
                    .output()
                    .unwrap();
                // The first owner's processes may still be on their way out.
                if code(&out) == 7
                    && text(&out).contains("still alive")
                    && Instant::now() < deadline
                {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
                break out;
            };
            if out.status.signal() != Some(libc::SIGKILL) {
                assert_eq!(code(&out), reference.exit, "{context}: {}", text(&out));
                let state = check_store(&env.run_dir(&id), &context);
                assert_eq!(&ending(code(&out), &state), &reference, "{context}");
                reached_end = true;
                break;
            }
            kills += 1;
            check_after_kill(&env, &id, &reference, false, &context);
        }
        assert!(
            reached_end,
            "{point}: more occurrences than the harness tries"
        );
    }
    kills
}

#[test]
fn kills_while_recovering_leave_a_truthful_store_and_recover_again() {
    let kills = recovery_crash_matrix(&chain_workflow(), 0, "record:launched:2");
    eprintln!("chain workflow, recovery: {kills} kill points checked");
    assert!(kills >= 25, "only {kills} kill points");
}

#[test]
fn kills_anywhere_in_a_chain_leave_a_truthful_store_and_recover_to_success() {
    let kills = crash_matrix(&chain_workflow(), 0);
    eprintln!("chain workflow: {kills} kill points checked");
    // How many journal batches a run writes depends on timing (records written together
    // share one sync), so the count varies a little (39-41 seen); 30 still proves breadth.
    assert!(kills >= 30, "only {kills} kill points");
}

#[test]
fn kills_anywhere_in_a_failing_workflow_recover_to_the_same_failure() {
    let kills = crash_matrix(&mixed_workflow(), 3);
    eprintln!("mixed workflow: {kills} kill points checked");
    assert!(kills >= 30, "only {kills} kill points");
}

/// Waits (bounded) until `ready` holds, polling.
fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn sigkill(child: &std::process::Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
}

#[test]
fn kills_during_output_capture_recover_like_an_uninterrupted_run() {
    let env = Env::new();
    let plan_id = env.plan_source(
        "wf.star",
        &workflow(
            &[
                cmd(
                    "p",
                    "",
                    r#"["sh", "-c", "echo one; sleep 0.1; echo two; sleep 0.1; echo three; touch done/p"]"#,
                ),
                cmd("q", ", needs = [\"p\"]", r#"["sh", "-c", "touch done/q"]"#),
            ],
            "",
        ),
    );
    env.reset_markers();
    let before = env.run_ids();
    let out = env.rho(&["workflow", "run", &plan_id, "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let id = env.new_run(&before);
    let reference = ending(0, &check_store(&env.run_dir(&id), "uninterrupted run"));

    // Kill the owner while it copies the node's output: after the first and after the second
    // line reached the artifact.
    for seen in ["one\n", "one\ntwo\n"] {
        env.reset_markers();
        let before = env.run_ids();
        let mut owner = env
            .command(&["workflow", "run", &plan_id, "--yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut id = String::new();
        wait_for("the node's output", || {
            if id.is_empty() {
                match env.run_ids().difference(&before).next() {
                    Some(new) => id.clone_from(new),
                    None => return false,
                }
            }
            std::fs::read_to_string(env.run_dir(&id).join("nodes/p/attempts/1/stdout"))
                .is_ok_and(|s| s == seen)
        });
        sigkill(&owner);
        owner.wait().unwrap();
        let context = format!("kill after {seen:?} was captured (run {id})");
        check_after_kill(&env, &id, &reference, false, &context);
        let state = check_store(&env.run_dir(&id), &context);
        let p = &state.root().tasks["p"];
        assert_eq!(p.attempts.len(), 2, "{context}: p ran again");
        assert_eq!(p.attempts[0].phase, AttemptPhase::InterruptedUncertain);
        assert_eq!(
            std::fs::read_to_string(env.run_dir(&id).join("nodes/p/attempts/2/stdout")).unwrap(),
            "one\ntwo\nthree\n",
            "{context}"
        );
    }
}

/// `/proc/<pid>/stat` says the process exists and is not a zombie.
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

#[test]
fn a_killed_owner_takes_its_node_process_tree_along() {
    let env = Env::new();
    let plan_id = env.plan_source(
        "wf.star",
        &workflow(
            &[cmd(
                "s",
                "",
                r#"["sh", "-c", "sleep 30 & echo $! > bg.pid; exec sleep 31"]"#,
            )],
            "",
        ),
    );
    let before = env.run_ids();
    let mut owner = env
        .command(&["workflow", "run", &plan_id, "--yes"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut id = String::new();
    let mut leader = None;
    wait_for("the node to be launched", || {
        if id.is_empty() {
            match env.run_ids().difference(&before).next() {
                Some(new) => id.clone_from(new),
                None => return false,
            }
        }
        let Ok(contents) = journal::read(&env.run_dir(&id).join("events.jsonl")) else {
            return false;
        };
        leader = contents.events.iter().find_map(|e| match &e.kind {
            EventKind::Launched { process, .. } => Some(*process),
            _ => None,
        });
        leader.is_some()
            && std::fs::read_to_string(env.ws.join("bg.pid")).is_ok_and(|s| s.ends_with('\n'))
    });
    let leader = leader.unwrap();
    let background: i32 = std::fs::read_to_string(env.ws.join("bg.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(running(leader.pid) && running(background));
    sigkill(&owner);
    owner.wait().unwrap();
    wait_for("the node's processes to be gone", || {
        !running(leader.pid) && !running(background)
    });
    assert!(!rho::workflow::exec::process_alive(
        leader.pid,
        leader.start_time
    ));
    assert!(!rho::workflow::exec::group_alive(leader.pgid));
    let status = env.rho(&["workflow", "status", &id, "--output", "json"]);
    let doc: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(doc["lifecycle"], "needs_recovery", "{doc}");
    assert!(
        doc["needs_recovery"][0]
            .as_str()
            .unwrap()
            .contains(&format!("last known pid {}", leader.pid)),
        "{doc}"
    );
}

#[test]
fn a_cancel_request_without_an_owner_stays_pending_until_the_next_owner_applies_it() {
    let env = Env::new();
    let plan_id = env.plan_source(
        "wf.star",
        &workflow(
            &[
                cmd("a", "", r#"["sh", "-c", "touch done/a"]"#),
                cmd("b", ", needs = [\"a\"]", r#"["sh", "-c", "touch done/b"]"#),
            ],
            "",
        ),
    );
    env.reset_markers();
    // The owner dies after the run started and before anything was launched.
    let before = env.run_ids();
    let out = env
        .command(&["workflow", "run", &plan_id, "--yes"])
        .env("RHO_TEST_CRASH_AT", "record:launch_intended:1")
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGKILL), "{}", text(&out));
    let id = env.new_run(&before);
    let dir = env.run_dir(&id);
    let crashed = check_store(&dir, "crashed");
    assert!(crashed.open_attempts().is_empty());

    let cancel = env.rho(&["workflow", "cancel", &id]);
    assert_eq!(code(&cancel), 0, "{}", text(&cancel));
    let answer: serde_json::Value = serde_json::from_slice(&cancel.stdout).unwrap();
    assert_eq!(answer["cancellation_state"], "pending", "{answer}");
    assert_eq!(answer["run_id"], id.as_str());
    let request_id = answer["request_id"].as_str().unwrap().to_owned();
    assert!(dir.join("cancel.json").exists(), "the request is durable");
    // Asking again reuses the pending request.
    let again = env.rho(&["workflow", "cancel", &id]);
    let answer: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(answer["cancellation_state"], "pending", "{answer}");
    assert_eq!(answer["request_id"], request_id.as_str());
    // Nothing changed in the run meanwhile.
    assert_eq!(check_store(&dir, "after cancel"), crashed);

    // The next owner applies it before launching anything.
    let resumed = env.rho(&["workflow", "resume", &id, "--yes"]);
    assert_eq!(
        code(&resumed),
        5,
        "cancellation exits 5: {}",
        text(&resumed)
    );
    let state = check_store(&dir, "after resume");
    let cancel = state.cancel.as_ref().unwrap();
    assert_eq!(cancel.request_id, request_id);
    assert!(cancel.completed);
    for node in ["a", "b"] {
        assert_eq!(
            state.root().node_state(node),
            Some(NodeState::Cancellation),
            "{node}"
        );
        assert!(
            state.root().tasks[node].attempts.is_empty(),
            "{node} never started"
        );
    }
    assert!(
        !dir.join("cancel.json").exists(),
        "a handled request is removed"
    );
    let answer: serde_json::Value =
        serde_json::from_slice(&env.rho(&["workflow", "cancel", &id]).stdout).unwrap();
    assert_eq!(answer["cancellation_state"], "already_completed");
    assert!(answer.get("request_id").is_none(), "{answer}");

    // A later resume runs the cancelled nodes.
    let resumed = env.rho(&["workflow", "resume", &id, "--yes"]);
    assert_eq!(code(&resumed), 0, "{}", text(&resumed));
    let state = check_store(&dir, "second resume");
    assert_eq!(state.root().node_state("b"), Some(NodeState::Success));
    check_success_markers(&env, &state, "second resume");
}

#[test]
fn recovery_refuses_while_a_process_of_the_uncertain_attempt_is_alive() {
    use std::io::Write as _;
    use std::os::unix::process::CommandExt as _;

    let env = Env::new();
    let plan_id = env.plan_source(
        "wf.star",
        &workflow(&[cmd("a", "", r#"["sh", "-c", "touch done/a"]"#)], ""),
    );
    env.reset_markers();
    // The owner dies just as it learns the process identity, before recording it.
    let before = env.run_ids();
    let out = env
        .command(&["workflow", "run", &plan_id, "--yes"])
        .env("RHO_TEST_CRASH_AT", "record:launched:1")
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGKILL), "{}", text(&out));
    let id = env.new_run(&before);
    let dir = env.run_dir(&id);

    // Make the journal name a process that is still alive, as if the old attempt had
    // outlived its owner: the record an owner writes, with a live sleep as the process.
    let mut survivor = Command::new("sleep")
        .arg("30")
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = survivor.id() as i32;
    let (start_time, _) = rho::workflow::exec::process_start_time(pid).unwrap();
    let events = journal::read(&dir.join("events.jsonl")).unwrap().events;
    let forged = rho::workflow::state::Event {
        seq: events.last().unwrap().seq + 1,
        at_ms: 0,
        kind: EventKind::Launched {
            node: "a".to_owned(),
            attempt: 1,
            process: rho::workflow::state::ProcessIdentity {
                pid,
                pgid: pid,
                start_time,
            },
        },
    };
    std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("events.jsonl"))
        .unwrap()
        .write_all(journal::encode_line(&forged).unwrap().as_bytes())
        .unwrap();

    let out = env.rho(&["workflow", "resume", &id, "--yes", "--recover-uncertain"]);
    assert_eq!(code(&out), 7, "{}", text(&out));
    assert!(
        text(&out).contains(&format!(
            "node `a` attempt 1 process {pid} (group {pid}) is still alive"
        )),
        "{}",
        text(&out)
    );
    let state = check_store(&dir, "refused recovery");
    assert_eq!(state.lifecycle, Lifecycle::NeedsRecovery);
    assert_eq!(state.root().tasks["a"].attempts.len(), 1, "no new attempt");

    survivor.kill().unwrap();
    survivor.wait().unwrap();
    let out = env.rho(&["workflow", "resume", &id, "--yes", "--recover-uncertain"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let state = check_store(&dir, "recovered");
    assert_eq!(state.root().node_state("a"), Some(NodeState::Success));
    assert_eq!(state.root().tasks["a"].attempts.len(), 2);
    check_success_markers(&env, &state, "recovered");
}

#[test]
fn a_recovered_node_is_not_recovered_again_by_a_later_resume() {
    let env = Env::new();
    let plan_id = env.plan_source(
        "wf.star",
        &workflow(
            &[
                cmd("a", "", r#"["sh", "-c", "echo a >> done/a.log; touch done/a"]"#),
                cmd(
                    "b",
                    ", needs = [\"a\"]",
                    r#"["sh", "-c", "test -e done/b.again && touch done/b && exit 0; touch done/b.again; exec sleep 30"]"#,
                ),
            ],
            "",
        ),
    );
    env.reset_markers();
    let before = env.run_ids();
    let out = env
        .command(&["workflow", "run", &plan_id, "--yes"])
        .env("RHO_TEST_CRASH_AT", "record:launch_intended:1")
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGKILL), "{}", text(&out));
    let id = env.new_run(&before);
    let dir = env.run_dir(&id);
    // `a`'s launch was never durable: no attempt, no recovery needed; crash `a` itself.
    let out = env
        .command(&["workflow", "resume", &id, "--yes"])
        .env("RHO_TEST_CRASH_AT", "record:attempt_finished:1")
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGKILL), "{}", text(&out));
    assert_eq!(check_store(&dir, "crashed").open_attempts().len(), 1);

    // Recovery runs `a` again; `b` starts and is cancelled by SIGTERM to that owner.
    let owner = env
        .command(&["workflow", "resume", &id, "--yes", "--recover-uncertain"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("b to start", || env.done_dir().join("b.again").exists());
    wait_for("b's launch to be journaled", || {
        let state = check_store(&dir, "recovering");
        state.root().tasks["b"]
            .attempts
            .last()
            .is_some_and(|a| a.process.is_some())
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(owner.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = owner.wait_with_output().unwrap();
    assert_eq!(code(&out), 5, "{}", text(&out));
    let state = check_store(&dir, "cancelled");
    assert_eq!(state.root().node_state("a"), Some(NodeState::Success));
    assert_eq!(state.root().tasks["a"].attempts.len(), 2);
    assert_eq!(
        std::fs::read_to_string(env.done_dir().join("a.log")).unwrap(),
        "a\na\n"
    );

    // The uncertain attempt was superseded by attempt 2: a plain resume goes on, runs `b`
    // again and never `a`.
    let status = env.rho(&["workflow", "status", &id, "--output", "json"]);
    let doc: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(doc["lifecycle"], "completed", "{doc}");
    assert_eq!(doc["needs_recovery"], serde_json::json!([]), "{doc}");
    let out = env.rho(&["workflow", "resume", &id, "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let state = check_store(&dir, "resumed");
    assert_eq!(state.root().tasks["a"].attempts.len(), 2, "a never reruns");
    assert_eq!(state.root().tasks["b"].attempts.len(), 2);
    assert_eq!(state.root().node_state("b"), Some(NodeState::Success));
    assert_eq!(
        std::fs::read_to_string(env.done_dir().join("a.log")).unwrap(),
        "a\na\n"
    );
}
