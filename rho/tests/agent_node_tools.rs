//! Workflow agent nodes using tools, against a loopback scripted model: a node reads a file,
//! edits it, runs `bash` and answers JSON that feeds a downstream command; in `plan` mode its
//! write is denied; a `before_tool_use` hook sees the node's labels and denies; the node's
//! timeout, a cancel and a SIGKILL of the owner mid-turn end the attempt as a command node's
//! would; and a read-only agent node gets no write tools while its commands cannot write the
//! checkout (the kernel refuses).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a broken setup should panic

mod agent_support;
mod run_support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use agent_support::{offered_tools, tool_results};
use rho_e2e::model_server::{ModelServer, Reply, ScriptedTurn};
use run_support::{Env, assert_snapshot_matches_journal, code, text};
use serde_json::{Value, json};

const WORKFLOW: &str = r#"def build(inputs):
    fix = agent(name = "fix", agent = "default", prompt = "Fix the greeting.",
                output = schema.record({"changed": schema.bool()}),
                timeout_seconds = TIMEOUT, max_output_bytes = 4096ACCESS)
    record = command(name = "record", needs = ["fix"],
                     argv = ["sh", "-c", template(["echo changed=", output("fix", ["changed"]), " > record.txt"])],
                     timeout_seconds = 30, max_output_bytes = 4096)
    return workflow(name = "t", nodes = [fix, record])

WORKFLOW = define(inputs = {}, build = build)
"#;

fn setup(server: &ModelServer, timeout: u32, access: &str) -> Env {
    setup_agent(server, timeout, access, "default")
}

fn setup_agent(server: &ModelServer, timeout: u32, access: &str, agent: &str) -> Env {
    let env = Env::new();
    std::fs::write(
        env.home.join("config.toml"),
        format!(
            "[model]\nprovider = \"local\"\nmodel = \"scripted-1\"\n\n\
             [providers.custom.local]\nbase_url = \"{}/v1\"\n",
            server.base_url()
        ),
    )
    .unwrap();
    let access = if access.is_empty() {
        String::new()
    } else {
        format!(", access = \"{access}\"")
    };
    std::fs::write(
        env.ws.join("wf.star"),
        WORKFLOW
            .replace("agent = \"default\"", &format!("agent = \"{agent}\""))
            .replace("TIMEOUT", &timeout.to_string())
            .replace("ACCESS", &access),
    )
    .unwrap();
    std::fs::write(env.ws.join("greeting.txt"), "helo world\n").unwrap();
    env
}

fn only_run(env: &Env) -> (String, std::path::PathBuf) {
    let ids = env.run_ids();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let id = ids.into_iter().next().unwrap();
    let dir = env.run_dir(&id);
    (id, dir)
}

/// Read, edit, run a command, answer.
fn working_script() -> Vec<Reply> {
    vec![
        Reply::tool_call("read_file", &json!({"path": "greeting.txt"})),
        Reply::tool_call(
            "edit_file",
            &json!({"path": "greeting.txt", "old_string": "helo", "new_string": "hello"}),
        ),
        Reply::tool_call("bash", &json!({"command": "cat greeting.txt"})),
        Reply::text("{\"changed\": true}"),
    ]
}

#[test]
fn an_agent_node_reads_edits_runs_and_answers_for_the_next_node() {
    let server = ModelServer::start(working_script());
    let env = setup(&server, 60, "");
    let out = env.rho(&["workflow", "run", "wf.star", "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(env.ws.join("greeting.txt")).unwrap(),
        "hello world\n"
    );
    assert_eq!(
        std::fs::read_to_string(env.ws.join("record.txt")).unwrap(),
        "changed=true\n"
    );
    let requests = server.model_requests();
    assert_eq!(requests.len(), 4);
    let results = tool_results(&requests[3].json());
    assert!(results[0].contains("helo world"), "{}", results[0]);
    assert!(results[2].contains("hello world"), "{}", results[2]);
    assert!(results[2].contains("exit code 0"), "{}", results[2]);
    let (_, dir) = only_run(&env);
    let (state, _) = assert_snapshot_matches_journal(&dir);
    assert!(state.root().tasks["fix"].attempts[0].output.is_some());
}

#[test]
fn in_plan_mode_the_nodes_edit_is_denied_and_the_model_reads_why() {
    let server = ModelServer::start([
        Reply::tool_call(
            "edit_file",
            &json!({"path": "greeting.txt", "old_string": "helo", "new_string": "hello"}),
        ),
        Reply::text("{\"changed\": false}"),
    ]);
    let env = setup(&server, 60, "");
    let out = env.rho(&[
        "workflow",
        "run",
        "wf.star",
        "--yes",
        "--permission-mode",
        "plan",
    ]);
    // The downstream command node is denied in plan mode; the agent answered.
    assert_ne!(code(&out), 0, "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(env.ws.join("greeting.txt")).unwrap(),
        "helo world\n"
    );
    let results = tool_results(&server.model_requests()[1].json());
    assert!(results[0].contains("denied"), "{}", results[0]);
    assert!(results[0].contains("plan"), "{}", results[0]);
}

#[test]
fn a_hook_sees_the_nodes_labels_and_denies_its_edit() {
    let server = ModelServer::start([
        Reply::tool_call(
            "edit_file",
            &json!({"path": "greeting.txt", "old_string": "helo", "new_string": "hello"}),
        ),
        Reply::text("{\"changed\": false}"),
    ]);
    let env = setup(&server, 60, "");
    let seen = env.home.join("hook-input.json");
    let hook = env.home.join("deny.sh");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\ncat > {}\necho '{{\"version\":1,\"decision\":\"deny\",\"reason\":\"frozen file\"}}'\n",
            seen.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(
        env.home.join("hooks.toml"),
        format!(
            "version = 1\n[[hook]]\nid = \"freeze\"\non = \"before_tool_use\"\n\
             tools = [\"edit_file\"]\ncommand = [\"{}\"]\ntimeout = \"10s\"\n",
            hook.display()
        ),
    )
    .unwrap();
    let out = env.rho(&["workflow", "run", "wf.star", "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(env.ws.join("greeting.txt")).unwrap(),
        "helo world\n"
    );
    let results = tool_results(&server.model_requests()[1].json());
    assert!(results[0].contains("frozen file"), "{}", results[0]);
    let payload: Value = serde_json::from_str(&std::fs::read_to_string(&seen).unwrap()).unwrap();
    let (id, _) = only_run(&env);
    let text = payload.to_string();
    assert!(text.contains(&id), "the hook saw the run: {text}");
    assert!(text.contains("\"fix\""), "the hook saw the node: {text}");
}

#[test]
fn the_nodes_timeout_ends_a_slow_turn() {
    let server = ModelServer::start([Reply::Turn(
        ScriptedTurn::text("a b c d e f g h")
            .with_text_chunks(&["a ", "b ", "c ", "d ", "e ", "f ", "g ", "h"])
            .with_chunk_delay(Duration::from_secs(2)),
    )]);
    let env = setup(&server, 2, "");
    let started = Instant::now();
    let out = env.rho(&["workflow", "run", "wf.star", "--yes"]);
    assert_eq!(code(&out), 3, "code {}: {}", code(&out), text(&out));
    assert!(
        started.elapsed() < Duration::from_secs(14),
        "the turn was not cut at its timeout"
    );
    let (_, dir) = only_run(&env);
    let (state, _) = assert_snapshot_matches_journal(&dir);
    let reason = state.root().tasks["fix"].attempts[0]
        .reason
        .clone()
        .unwrap_or_default();
    assert!(reason.contains("timed out"), "{reason}");
    assert!(reason.contains("timeout_seconds"), "{reason}");
}

/// Starts the run in the background and waits until the model is being asked.
fn start_slow_owner(env: &Env, server: &ModelServer) -> (std::process::Child, String) {
    let owner = env
        .command(&["workflow", "run", "wf.star", "--yes"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        server.wait_for_requests(1, Duration::from_secs(30)),
        "the agent never asked the model"
    );
    let (id, _) = only_run(env);
    (owner, id)
}

fn endless_turn() -> Reply {
    let pieces: Vec<String> = (0..60).map(|i| format!("w{i} ")).collect();
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    Reply::Turn(
        ScriptedTurn::text(&pieces.concat())
            .with_text_chunks(&refs)
            .with_chunk_delay(Duration::from_secs(1)),
    )
}

#[test]
fn cancel_stops_the_agent_mid_turn() {
    let server = ModelServer::start([endless_turn()]);
    let env = setup(&server, 600, "");
    let (owner, id) = start_slow_owner(&env, &server);
    let cancel = env.rho(&["workflow", "cancel", &id]);
    assert_eq!(code(&cancel), 0, "{}", text(&cancel));
    let out = owner.wait_with_output().unwrap();
    assert_eq!(code(&out), 5, "{}", text(&out));
    let (state, _) = assert_snapshot_matches_journal(&env.run_dir(&id));
    assert_eq!(
        format!("{:?}", state.root().tasks["fix"].state),
        "Cancellation"
    );
    assert!(!env.ws.join("record.txt").exists());
}

#[test]
fn a_killed_owner_mid_turn_leaves_an_uncertain_attempt() {
    let server = ModelServer::start([endless_turn()]);
    let env = setup(&server, 600, "");
    let (mut owner, id) = start_slow_owner(&env, &server);
    owner.kill().unwrap();
    owner.wait().unwrap();
    let status = env.rho(&["workflow", "status", &id, "--output", "json"]);
    assert_eq!(code(&status), 0, "{}", text(&status));
    let doc: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(doc["lifecycle"], "needs_recovery", "{doc}");
    let needs = doc["needs_recovery"].to_string();
    assert!(needs.contains("fix"), "{doc}");
    let plain = env.rho(&["workflow", "resume", &id, "--yes"]);
    assert_ne!(code(&plain), 0, "{}", text(&plain));
    assert!(
        text(&plain).contains("--recover-uncertain"),
        "{}",
        text(&plain)
    );
}

#[test]
fn a_read_only_agent_node_cannot_write_the_checkout() {
    let server = ModelServer::start([
        Reply::tool_call(
            "bash",
            &json!({"command": "cat greeting.txt; echo x > greeting.txt; echo tmp > \"$TMPDIR/t\" && cat \"$TMPDIR/t\""}),
        ),
        Reply::text("{\"changed\": false}"),
    ]);
    let env = setup_agent(&server, 60, "read_only", "prober");
    std::fs::create_dir_all(env.home.join("agents")).unwrap();
    std::fs::write(
        env.home.join("agents/prober.md"),
        "---\ndescription: Reads and runs read-only commands\n\
         tools: [read_file, grep, bash]\n---\nInvestigate.\n",
    )
    .unwrap();
    let out = env.rho(&["workflow", "run", "wf.star", "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(env.ws.join("greeting.txt")).unwrap(),
        "helo world\n",
        "the kernel refused the write"
    );
    let requests = server.model_requests();
    let tools = offered_tools(&requests[0].json());
    for write in ["apply_patch", "edit_file", "write_file", "workflow"] {
        assert!(
            !tools.contains(&write.to_owned()),
            "{write} offered: {tools:?}"
        );
    }
    assert!(tools.contains(&"bash".to_owned()), "{tools:?}");
    let results = tool_results(&requests[1].json());
    assert!(
        results[0].contains("helo world"),
        "reads work: {}",
        results[0]
    );
    assert!(
        results[0].contains("Permission denied") || results[0].contains("Operation not permitted"),
        "{}",
        results[0]
    );
    assert!(
        results[0].contains("\ntmp\n"),
        "the scratch directory is writable: {}",
        results[0]
    );
}
