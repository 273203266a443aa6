//! Resume works from the run's own verified copy of the program: after the plan (and the
//! workflow source) are deleted it still runs; when the project trust the plan needed is
//! gone it is refused; a tampered `program.cbor`, `graph.json` or manifest in the run is
//! refused with the file and the mismatch named, and nothing is journaled. `graph RUN_ID`
//! draws the run's nodes with their states.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::cast_possible_wrap,
    clippy::too_many_lines
)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use rho::workflow::state::{NodeState, State};

mod run_support;
use run_support::{Env, assert_snapshot_matches_journal, code, text};

/// A node that sleeps on its first attempt (so it can be cancelled) and succeeds at once on
/// the next.
const SLEEPY: &str = r#"command(name = "s", argv = ["sh", "-c", "test -e done/again && exit 0; mkdir -p done; touch done/again; exec sleep 30"], cwd = ".", timeout_seconds = 60, max_output_bytes = 4096)"#;

fn workflow(name: &str, nodes: &[&str]) -> String {
    format!(
        "def build(inputs):\n    return workflow(name = \"{name}\", nodes = [{}])\n\nWORKFLOW = define(inputs = {{}}, build = build)\n",
        nodes.join(", ")
    )
}

fn command_node(name: &str, argv: &str, extra: &str) -> String {
    format!(
        "command(name = \"{name}\", argv = {argv}, cwd = \".\", timeout_seconds = 60, max_output_bytes = 4096{extra})"
    )
}

impl Env {
    fn plan_dir(&self, id: &str) -> PathBuf {
        self.home.join("workflows/plans").join(id)
    }

    /// Runs `plan_id` and stops it with SIGTERM while node `s` sleeps: a cleanly cancelled
    /// run that resume would continue.
    fn cancelled_run(&self, plan_id: &str) -> String {
        let _ = std::fs::remove_dir_all(self.ws.join("done"));
        let before = self.run_ids();
        let owner = self
            .command(&["workflow", "run", plan_id, "--yes"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let id = loop {
            if let Some(id) = self.run_ids().difference(&before).next()
                && std::fs::read_to_string(self.run_dir(id).join("events.jsonl"))
                    .unwrap_or_default()
                    .contains("\"launched\"")
            {
                break id.clone();
            }
            assert!(Instant::now() < deadline, "the node never launched");
            std::thread::sleep(Duration::from_millis(10));
        };
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(owner.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let out = owner.wait_with_output().unwrap();
        assert_eq!(code(&out), 5, "cancelled: {}", text(&out));
        assert_snapshot_matches_journal(&self.run_dir(&id));
        id
    }

    /// The state of run `id`, replayed from its journal (which `state.json` must match).
    fn state(&self, id: &str) -> State {
        assert_snapshot_matches_journal(&self.run_dir(id)).0
    }
}

/// Replaces a JSON document in the store (the file keeps its mode).
fn rewrite_json(path: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let mut doc: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    edit(&mut doc);
    std::fs::write(path, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
}

fn flip_last_byte(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn resume_uses_the_run_copy_after_the_plan_and_source_were_deleted() {
    let env = Env::new();
    env.write("wf.star", &workflow("gone", &[SLEEPY]));
    let plan_id = env.plan("wf.star");
    let id = env.cancelled_run(&plan_id);

    let out = env.rho(&["workflow", "delete", &plan_id, "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(!env.plan_dir(&plan_id).exists());
    std::fs::remove_file(env.ws.join("wf.star")).unwrap();

    let out = env.rho(&["workflow", "resume", &id, "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let state = env.state(&id);
    let task = &state.root().tasks["s"];
    assert_eq!(task.state, NodeState::Success);
    assert_eq!(task.attempts.len(), 2);
    // The run still shows and draws without its plan.
    let status = env.rho(&["workflow", "status", &id, "--output", "json"]);
    let doc: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(doc["outcome"], "success", "{doc}");
    assert_eq!(doc["manifest"]["plan_id"], plan_id.as_str());
    let graph = env.rho(&["workflow", "graph", &id]);
    assert_eq!(code(&graph), 0, "{}", text(&graph));
    assert!(
        String::from_utf8_lossy(&graph.stdout).contains("s (command): success"),
        "{}",
        text(&graph)
    );
}

#[test]
fn resume_is_refused_once_the_project_agent_trust_it_needed_is_gone() {
    let env = Env::new();
    env.write(
        ".agents/agents/helper.md",
        "---\ndescription: Looks around the project\ntools: [read_file, grep]\n---\nLook around.\n",
    );
    let agent = r#"agent(name = "look", agent = "helper", prompt = "look", access = "read_only", allow_failure = True, timeout_seconds = 60, max_output_bytes = 4096)"#;
    env.write("wf.star", &workflow("trusting", &[agent, SLEEPY]));
    let ws = env.ws.to_str().unwrap().to_owned();
    let out = env.rho(&["trust", "add", &ws]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let plan_id = env.plan("wf.star");
    let graph: serde_json::Value =
        serde_json::from_slice(&std::fs::read(env.plan_dir(&plan_id).join("graph.json")).unwrap())
            .unwrap();
    assert_eq!(
        graph["program"]["trust"]["project_agents"], true,
        "the plan records that it needed project agent trust"
    );
    let id = env.cancelled_run(&plan_id);
    let journal_before = std::fs::read(env.run_dir(&id).join("events.jsonl")).unwrap();

    let out = env.rho(&["trust", "remove", &ws]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    for args in [
        &["workflow", "resume", &id, "--yes"][..],
        &["workflow", "resume", &id, "--yes", "--recover-uncertain"][..],
    ] {
        let out = env.rho(args);
        assert_eq!(code(&out), 2, "{args:?}: {}", text(&out));
        let message = String::from_utf8_lossy(&out.stderr);
        assert!(
            message.contains("trust that is gone") && message.contains("project agent definitions"),
            "{args:?}: {message}"
        );
    }
    assert_eq!(
        std::fs::read(env.run_dir(&id).join("events.jsonl")).unwrap(),
        journal_before,
        "a refused resume journals nothing"
    );

    // Trust restored: the same resume goes on (the agent fails for lack of a runtime, which
    // is allowed; the command runs again and succeeds).
    let out = env.rho(&["trust", "add", &ws]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let out = env.rho(&["workflow", "resume", &id, "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(
        env.state(&id).root().node_state("s"),
        Some(NodeState::Success)
    );
}

#[test]
fn a_tampered_program_graph_or_manifest_in_the_run_is_refused() {
    let env = Env::new();
    env.write("wf.star", &workflow("original", &[SLEEPY]));
    let plan_id = env.plan("wf.star");
    env.write(
        "other.star",
        &workflow(
            "other",
            &[&command_node("s", r#"["sh", "-c", "echo swapped"]"#, "")],
        ),
    );
    let other_dir = env.plan_dir(&env.plan("other.star"));
    let other: serde_json::Value =
        serde_json::from_slice(&std::fs::read(other_dir.join("manifest.json")).unwrap()).unwrap();
    let id = env.cancelled_run(&plan_id);
    let dir = env.run_dir(&id);
    let originals: Vec<(PathBuf, Vec<u8>)> = ["program.cbor", "graph.json", "manifest.json"]
        .iter()
        .map(|f| (dir.join(f), std::fs::read(dir.join(f)).unwrap()))
        .collect();
    let journal_before = std::fs::read(dir.join("events.jsonl")).unwrap();
    let refused = |what: &str, expect: &[&str]| {
        for args in [
            &["workflow", "resume", &id, "--yes"][..],
            &["workflow", "resume", &id, "--yes", "--recover-uncertain"][..],
        ] {
            let out = env.rho(args);
            assert_eq!(code(&out), 1, "{what}: {}", text(&out));
            let message = String::from_utf8_lossy(&out.stderr);
            for part in expect {
                assert!(message.contains(part), "{what}: `{part}` in {message}");
            }
        }
        assert_eq!(
            std::fs::read(dir.join("events.jsonl")).unwrap(),
            journal_before,
            "{what}: nothing journaled"
        );
        for (path, bytes) in &originals {
            std::fs::write(path, bytes).unwrap();
        }
    };
    let swap_in_other = || {
        for f in ["program.cbor", "graph.json"] {
            std::fs::write(dir.join(f), std::fs::read(other_dir.join(f)).unwrap()).unwrap();
        }
    };

    flip_last_byte(&dir.join("program.cbor"));
    refused(
        "a flipped byte",
        &["program.cbor is corrupt", "but the run was confirmed for"],
    );

    rewrite_json(&dir.join("graph.json"), |doc| {
        doc["program"]["root"]["nodes"][0]["timeout_seconds"] = serde_json::json!(1);
    });
    refused(
        "graph.json edited",
        &[
            "graph.json is corrupt",
            "does not describe the run's program.cbor",
        ],
    );
    rewrite_json(&dir.join("graph.json"), |doc| {
        doc["graph_digest"] = serde_json::json!("sha256:00");
    });
    refused("graph.json digest edited", &["graph.json is corrupt"]);

    // Another valid program swapped in with a manifest naming it: consent was for the
    // original digest.
    swap_in_other();
    rewrite_json(&dir.join("manifest.json"), |doc| {
        doc["program_digest"] = other["program_digest"].clone();
        doc["graph_digest"] = other["graph_digest"].clone();
    });
    refused(
        "program swapped",
        &["manifest.json is corrupt", "consent was given to"],
    );
    // ... and with the consent rewritten too: the journal still names the original.
    swap_in_other();
    rewrite_json(&dir.join("manifest.json"), |doc| {
        doc["program_digest"] = other["program_digest"].clone();
        doc["graph_digest"] = other["graph_digest"].clone();
        doc["confirmation"]["digest"] = other["program_digest"].clone();
    });
    refused(
        "program and consent swapped",
        &["events.jsonl is corrupt", "the run was created for program"],
    );

    // Restored, the run resumes: the refusals were about the tampering only.
    let out = env.rho(&["workflow", "resume", &id, "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(
        env.state(&id).root().node_state("s"),
        Some(NodeState::Success)
    );
}

#[test]
fn a_tampered_plan_is_refused_by_run() {
    let env = Env::new();
    env.write(
        "wf.star",
        &workflow("p", &[&command_node("a", r#"["true"]"#, "")]),
    );
    let plan_id = env.plan("wf.star");
    let dir = env.plan_dir(&plan_id);
    let program = std::fs::read(dir.join("program.cbor")).unwrap();
    let graph = std::fs::read(dir.join("graph.json")).unwrap();

    flip_last_byte(&dir.join("program.cbor"));
    let out = env.rho(&["workflow", "run", &plan_id, "--yes"]);
    assert_eq!(code(&out), 1, "{}", text(&out));
    assert!(
        text(&out).contains("program.cbor is corrupt"),
        "{}",
        text(&out)
    );
    std::fs::write(dir.join("program.cbor"), &program).unwrap();

    rewrite_json(&dir.join("graph.json"), |doc| {
        doc["program"]["name"] = serde_json::json!("renamed");
    });
    let out = env.rho(&["workflow", "run", &plan_id, "--yes"]);
    assert_eq!(code(&out), 1, "{}", text(&out));
    assert!(
        text(&out).contains("graph.json is corrupt")
            && text(&out).contains("does not describe the plan's program.cbor"),
        "{}",
        text(&out)
    );
    assert!(env.run_ids().is_empty(), "nothing ran");
    std::fs::write(dir.join("graph.json"), &graph).unwrap();
    let out = env.rho(&["workflow", "run", &plan_id, "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let id = env.run_ids().into_iter().next().unwrap();
    assert_eq!(
        env.state(&id).root().node_state("a"),
        Some(NodeState::Success)
    );
}

#[test]
fn graph_of_a_run_shows_node_states_as_mermaid_and_dot() {
    let env = Env::new();
    env.write(
        "wf.star",
        &workflow(
            "drawn",
            &[
                &command_node("a", r#"["true"]"#, ""),
                &command_node("b", r#"["false"]"#, ", needs = [\"a\"]"),
                &command_node("c", r#"["true"]"#, ", needs = [\"b\"]"),
            ],
        ),
    );
    let out = env.rho(&["workflow", "run", "wf.star", "--yes"]);
    assert_eq!(code(&out), 3, "{}", text(&out));
    let id = env.run_ids().into_iter().next().unwrap();
    assert_snapshot_matches_journal(&env.run_dir(&id));

    let out = env.rho(&["workflow", "graph", &id[..8]]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        concat!(
            "flowchart TD\n",
            "  n_a[\"a (command): success\"]\n",
            "  n_b[\"b (command): failure\"]\n",
            "  n_c[\"c (command): blocked\"]\n",
            "  n_a --> n_b\n",
            "  n_b --> n_c\n",
            "  classDef success fill:#c8e6c9\n",
            "  class n_a success\n",
            "  classDef failure fill:#ffcdd2\n",
            "  class n_b failure\n",
            "  classDef blocked fill:#ffe0b2\n",
            "  class n_c blocked\n",
        )
    );
    let out = env.rho(&["workflow", "graph", &id, "--format", "dot"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        concat!(
            "digraph \"drawn\" {\n",
            "  rankdir=LR;\n",
            "  node [shape=box];\n",
            "  \"a\" [label=\"a (command): success\", style=filled, fillcolor=\"#c8e6c9\"];\n",
            "  \"b\" [label=\"b (command): failure\", style=filled, fillcolor=\"#ffcdd2\"];\n",
            "  \"c\" [label=\"c (command): blocked\", style=filled, fillcolor=\"#ffe0b2\"];\n",
            "  \"a\" -> \"b\";\n",
            "  \"b\" -> \"c\";\n",
            "}\n",
        )
    );
    // --input belongs to workflow files; an unknown id says what it looked for.
    let out = env.rho(&["workflow", "graph", &id, "--input", "x=1"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    let out = env.rho(&["workflow", "graph", "ffff"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(
        text(&out).contains("no plan or run matches `ffff`"),
        "{}",
        text(&out)
    );
}
