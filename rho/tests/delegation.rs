//! Delegation end to end through `rho run` against a loopback scripted model (and the
//! scripted `claude` stand-in for claude-cli children): a foreground child's final answer
//! reaches the parent, a child never receives `agent`/`agents`, independent calls in one step
//! run together, both pools cap the observed concurrency, `--no-subagents` removes the tools,
//! and each child leaves an attachable run directory.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a broken setup should panic

mod agent_support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_support::{AgentEnv, offered_tools, stderr, stdout, tool_results};
use rho_e2e::model_server::{ModelServer, Reply, ScriptedTurn};
use serde_json::{Value, json};

/// Text only the explorer's system prompt contains (its definition body).
const EXPLORER_MARKER: &str = "You are working as an explorer";

/// Every run directory named in `$RHO_HOME/subagents/index.jsonl`, in order.
fn indexed_runs(home: &Path) -> Vec<(String, PathBuf)> {
    let text = std::fs::read_to_string(home.join("subagents/index.jsonl")).unwrap_or_default();
    text.lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).unwrap();
            (
                v["id"].as_str().unwrap().to_owned(),
                PathBuf::from(v["dir"].as_str().unwrap()),
            )
        })
        .collect()
}

fn result_json(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("result.json")).unwrap()).unwrap()
}

fn slow_text(text: &str) -> Reply {
    let pieces: Vec<&str> = text.split_inclusive(' ').collect();
    Reply::Turn(
        ScriptedTurn::text(text)
            .with_text_chunks(&pieces)
            .with_chunk_delay(Duration::from_millis(250)),
    )
}

#[test]
fn a_foreground_child_answers_the_parent_and_leaves_a_run_directory() {
    let server = ModelServer::start([
        Reply::tool_call(
            "agent",
            &json!({"agent_id": "explorer", "prompt": "Where is the needle?"}),
        ),
        Reply::text("The child says: notes.txt."),
    ]);
    server.route(
        EXPLORER_MARKER,
        [Reply::text("It is in notes.txt, line 2.")],
    );
    let env = AgentEnv::new(&server);
    let out = env.run(&["run", "find the needle"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "The child says: notes.txt.\n");

    let requests = server.model_requests();
    assert_eq!(requests.len(), 3);
    let parent = requests[0].json();
    let tools = offered_tools(&parent);
    assert!(tools.contains(&"agent".to_owned()), "{tools:?}");
    assert!(tools.contains(&"agents".to_owned()), "{tools:?}");
    // The agent tool lists the catalog and offers no background in `rho run`.
    let agent_schema = parent["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "agent")
        .unwrap()["function"]["parameters"]
        .clone();
    assert!(
        agent_schema["properties"]["background"].is_null(),
        "{agent_schema}"
    );
    assert!(
        agent_schema["properties"]["agent_id"]["enum"]
            .as_array()
            .unwrap()
            .contains(&json!("explorer"))
    );

    // The child: a fresh conversation with its own prompt and only its own tools.
    let child = requests[1].json();
    assert_eq!(
        offered_tools(&child),
        ["glob", "grep", "list_dir", "read_file"]
    );
    let messages = child["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "system prompt and the task only");
    assert_eq!(messages[1]["content"], "Where is the needle?");

    // The parent got the child's whole answer as the tool result.
    let results = tool_results(&requests[2].json());
    assert_eq!(results.len(), 1);
    assert!(results[0].contains("(explorer): ok"), "{}", results[0]);
    assert!(
        results[0].contains("It is in notes.txt, line 2."),
        "{}",
        results[0]
    );

    // One run directory with the status contract, attachable later.
    let runs = indexed_runs(&env.home);
    assert_eq!(runs.len(), 1);
    let (id, dir) = &runs[0];
    assert!(results[0].contains(id.as_str()), "{}", results[0]);
    let status = result_json(dir);
    assert_eq!(status["state"], "ok");
    assert_eq!(status["agent_id"], "explorer");
    assert_eq!(status["runtime"], "rho");
    assert_eq!(status["result"], "It is in notes.txt, line 2.");
    assert!(
        status["agent_fingerprint"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert!(status["parent_session_id"].is_string());
    assert_eq!(status["turns"], 1);
    let attach = env.run(&["attach", id]);
    assert_eq!(attach.status.code(), Some(0), "{}", stderr(&attach));
    assert!(
        stdout(&attach).contains("It is in notes.txt, line 2."),
        "{}",
        stdout(&attach)
    );
    env.assert_no_secret_on_disk();
}

#[test]
fn a_delegated_default_agent_gets_every_tool_but_agent_and_agents() {
    let server = ModelServer::start([
        Reply::tool_call(
            "agent",
            &json!({"agent_id": "worker", "prompt": "Do the work."}),
        ),
        Reply::text("ok"),
    ]);
    server.route("You are working as a worker", [Reply::text("worked")]);
    let env = AgentEnv::new(&server);
    let out = env.run(&["run", "go"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let child_tools = offered_tools(&server.model_requests()[1].json());
    assert!(!child_tools.is_empty());
    assert!(
        !child_tools.contains(&"agent".to_owned()),
        "{child_tools:?}"
    );
    assert!(
        !child_tools.contains(&"agents".to_owned()),
        "{child_tools:?}"
    );
}

#[test]
fn background_is_refused_in_rho_run_and_no_subagents_removes_both_tools() {
    let server = ModelServer::start([
        Reply::tool_call(
            "agent",
            &json!({"agent_id": "explorer", "prompt": "x", "background": true}),
        ),
        Reply::text("ok"),
    ]);
    let env = AgentEnv::new(&server);
    let out = env.run(&["run", "go"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let results = tool_results(&server.model_requests()[1].json());
    assert!(results[0].contains("background"), "{}", results[0]);
    assert!(indexed_runs(&env.home).is_empty(), "nothing started");

    let server = ModelServer::start([Reply::text("ok")]);
    let env = AgentEnv::new(&server);
    let out = env.run(&["--no-subagents", "run", "go"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let tools = offered_tools(&server.model_requests()[0].json());
    assert!(!tools.contains(&"agent".to_owned()), "{tools:?}");
    assert!(!tools.contains(&"agents".to_owned()), "{tools:?}");
}

/// The parent asks for two explorers in one step; each answers slowly.
fn two_children(env_vars: &[(&str, &str)]) -> (ModelServer, AgentEnv, std::process::Output) {
    let server = ModelServer::start([
        Reply::Turn(
            ScriptedTurn::text("")
                .with_tool_call("agent", &json!({"agent_id": "explorer", "prompt": "first"}))
                .with_tool_call(
                    "agent",
                    &json!({"agent_id": "explorer", "prompt": "second"}),
                ),
        ),
        Reply::text("both answered"),
    ]);
    server.route(
        EXPLORER_MARKER,
        [
            slow_text("one two three four five"),
            slow_text("six seven eight nine ten"),
        ],
    );
    let mut env = AgentEnv::new(&server);
    for (k, v) in env_vars {
        env.env.push(((*k).to_owned(), (*v).to_owned()));
    }
    let out = env.run(&["run", "go"]);
    (server, env, out)
}

#[test]
fn independent_calls_in_one_step_run_together() {
    let (server, env, out) = two_children(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        server.max_in_flight(),
        2,
        "both children asked the model at once"
    );
    let results = tool_results(&server.model_requests().last().unwrap().json());
    assert_eq!(results.len(), 2);
    assert!(
        results.iter().all(|r| r.contains("(explorer): ok")),
        "{results:?}"
    );
    assert_eq!(indexed_runs(&env.home).len(), 2);
}

#[test]
fn the_global_pool_caps_concurrency() {
    let (server, _env, out) = two_children(&[("RHO_AGENT_CONCURRENCY", "1")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(server.max_in_flight(), 1, "one child at a time");
    let results = tool_results(&server.model_requests().last().unwrap().json());
    assert!(
        results.iter().all(|r| r.contains("(explorer): ok")),
        "{results:?}"
    );
}

#[test]
fn an_invalid_pool_size_is_named() {
    let server = ModelServer::start([Reply::text("unused")]);
    let mut env = AgentEnv::new(&server);
    env.env
        .push(("RHO_AGENT_CONCURRENCY".into(), "zero".into()));
    let out = env.run(&["run", "go"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("RHO_AGENT_CONCURRENCY"),
        "{}",
        stderr(&out)
    );
    assert!(server.model_requests().is_empty());
}

/// The largest number of stand-in runs alive at once, from its start/end lines.
fn max_overlap(spans: &Path) -> usize {
    let text = std::fs::read_to_string(spans).unwrap();
    let mut events: Vec<(u128, i32)> = text
        .lines()
        .map(|line| {
            let parts: Vec<&str> = line.split_whitespace().collect();
            let at: u128 = parts[2].parse().unwrap();
            (at, if parts[0] == "start" { 1 } else { -1 })
        })
        .collect();
    // Ends sort before starts at the same instant.
    events.sort_unstable();
    let (mut now, mut max) = (0_i32, 0_i32);
    for (_, delta) in events {
        now += delta;
        max = max.max(now);
    }
    usize::try_from(max).unwrap()
}

fn claude_children(pool: &[(&str, &str)]) -> (usize, std::process::Output, AgentEnv) {
    let calls = (0..3).fold(ScriptedTurn::text(""), |turn, i| {
        turn.with_tool_call(
            "agent",
            &json!({"agent_id": "claudy", "prompt": format!("task {i}")}),
        )
    });
    let server = ModelServer::start([Reply::Turn(calls), Reply::text("all done")]);
    let mut env = AgentEnv::new(&server);
    std::fs::create_dir_all(env.home.join("agents")).unwrap();
    std::fs::write(
        env.home.join("agents/claudy.md"),
        "---\ndescription: A Claude Code child\nruntime: claude-cli\ntools: [Read]\n---\nRead only.\n",
    )
    .unwrap();
    let standin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/claude-standin");
    let spans = env.home.join("spans.txt");
    env.env.push((
        "PATH".into(),
        format!("{}:/usr/local/bin:/usr/bin:/bin", standin.display()),
    ));
    // rho passes `claude` only what the real binary reads; the stand-in reads its settings
    // from HOME.
    std::fs::write(
        env.user_home.join(".claude-standin.env"),
        format!(
            "CLAUDE_STANDIN_SCENARIO=slow_spans\nCLAUDE_STANDIN_SPANS={}\n",
            spans.display()
        ),
    )
    .unwrap();
    for (k, v) in pool {
        env.env.push(((*k).to_owned(), (*v).to_owned()));
    }
    let out = env.run(&["--permission-mode", "plan", "run", "go"]);
    let results = tool_results(&server.model_requests().last().unwrap().json());
    assert_eq!(results.len(), 3, "{}", stderr(&out));
    for result in &results {
        assert!(result.contains("(claudy): ok"), "{result}");
        assert!(result.contains("slow done"), "{result}");
    }
    (max_overlap(&spans), out, env)
}

#[test]
fn claude_children_share_the_nested_claude_pool() {
    // Default pools: 4 in all, Claude capped at 2.
    let (overlap, out, env) = claude_children(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        overlap, 2,
        "the Claude pool, not the global one, is the limit"
    );
    for (_, dir) in indexed_runs(&env.home) {
        let status = result_json(&dir);
        assert_eq!(status["runtime"], "claude-cli");
        assert_eq!(status["claude_session_id"], "standin-session");
    }
    // Raising the Claude cap above the global pool opens no wider window.
    let (overlap, out, _env) = claude_children(&[
        ("RHO_AGENT_CONCURRENCY", "1"),
        ("RHO_CLAUDE_AGENT_CONCURRENCY", "3"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(overlap, 1);
}
