//! `rho run` end to end against a loopback scripted model: text and JSONL output, the
//! `--output-file` status contract, the step budget, the timeout, stdin handling, signals,
//! and the documented exit codes.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a broken setup should panic

mod agent_support;

use std::io::Write as _;
use std::process::Stdio;
use std::time::Duration;

use agent_support::{AgentEnv, SECRET, jsonl, stderr, stdout};
use rho_e2e::model_server::{ModelServer, Reply, ScriptedTurn};
use serde_json::json;

#[test]
fn text_output_is_the_final_answer_only() {
    let server = ModelServer::start([Reply::text("The answer is 42.")]);
    let env = AgentEnv::new(&server);
    let out = env.run(&["run", "what", "is", "the", "answer?"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "The answer is 42.\n");

    let requests = server.model_requests();
    assert_eq!(requests.len(), 1);
    let body = requests[0].json();
    assert_eq!(body["model"], "scripted-1");
    assert_eq!(body["messages"][0]["role"], "system");
    assert!(
        body["messages"][0]["content"]
            .as_str()
            .is_some_and(|s| !s.is_empty()),
        "the default agent's system prompt is sent"
    );
    assert_eq!(body["messages"][1]["content"], "what is the answer?");
    assert_eq!(
        requests[0].header("authorization"),
        Some(&*format!("Bearer {SECRET}"))
    );

    let transcripts = env.transcripts();
    assert_eq!(transcripts.len(), 1, "one session transcript");
    let events = rho::runtime::transcript::read_events(&transcripts[0]).unwrap();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(
        kinds,
        ["session.started", "user", "assistant", "turn.ended"]
    );
    assert_eq!(events[0]["agent_id"], "default");
    assert_eq!(events[3]["reason"], "completed");
    env.assert_no_secret_on_disk();
}

#[test]
fn jsonl_output_streams_versioned_events() {
    let server = ModelServer::start([Reply::Turn(ScriptedTurn::text("Done.").with_usage(30, 4))]);
    let env = AgentEnv::new(&server);
    let out = env.run(&["run", "--output", "jsonl", "go"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let events = jsonl(&out);
    assert_eq!(events[0]["type"], "run.started");
    let last = events.last().unwrap();
    assert_eq!(last["type"], "run.completed");
    assert_eq!(last["text"], "Done.");
    assert_eq!(last["usage"]["input_tokens"], 30);
    let deltas: String = events
        .iter()
        .filter(|e| e["type"] == "assistant.text_delta")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, "Done.");
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["schema_version"], 1);
        assert_eq!(e["seq"], i as u64 + 1);
    }
}

#[test]
fn output_file_keeps_the_status_contract() {
    let server = ModelServer::start([Reply::text("Result text.")]);
    let env = AgentEnv::new(&server);
    let file = env.workspace.join("result.json");
    let out = env.run(&["run", "--output-file", file.to_str().unwrap(), "go"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("Result text."), "{text}");
    assert!(text.ends_with("\n[subagent run complete]\n"), "{text}");
    let status: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    // The delegated runs' result.json contract (Rho's `--output-file` document).
    assert_eq!(status["state"], "ok");
    assert_eq!(status["result"], "Result text.");
    assert_eq!(status["agent_id"], "default");
    assert_eq!(status["runtime"], "rho");
    assert_eq!(status["provider"], "local");
    assert_eq!(status["model"], "scripted-1");
    assert_eq!(status["turns"], 1);
    assert!(
        status["agent_fingerprint"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert!(status["started_at"].as_u64().is_some());
    assert!(status["finished_at"].as_u64().is_some());
    assert!(status["input_tokens"].as_u64().is_some());
    assert_eq!(status["reason"], "completed");
    // It parses as the same type `rho attach` and the agents tool read.
    let typed: rho::runtime::delegation::status::RunStatus =
        serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(typed.state, rho::runtime::delegation::status::RunState::Ok);
    assert!(!std::fs::read_to_string(&file).unwrap().contains(SECRET));
}

#[test]
fn step_budget_exhaustion_exits_124() {
    let calls = (0..3).map(|_| Reply::tool_call("read_file", &json!({"path": "a"})));
    let server = ModelServer::start(calls);
    let env = AgentEnv::new(&server);
    let file = env.workspace.join("status.json");
    let out = env.run(&[
        "run",
        "--max-steps",
        "2",
        "--output",
        "jsonl",
        "--output-file",
        file.to_str().unwrap(),
        "loop",
    ]);
    assert_eq!(out.status.code(), Some(124), "{}", stderr(&out));
    let events = jsonl(&out);
    let last = events.last().unwrap();
    assert_eq!(last["type"], "run.stopped");
    assert_eq!(last["reason"], "max_steps");
    assert_eq!(server.model_requests().len(), 2, "exactly the budget");
    let status: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(status["state"], "stopped");
    assert_eq!(status["reason"], "max_steps");
    assert!(
        status["error"]
            .as_str()
            .unwrap()
            .contains("model-step budget of 2")
    );
    assert_eq!(status["turns"], 2);
    assert!(
        stderr(&out).contains("model-step budget of 2"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn timeout_exits_124_without_waiting_for_the_model() {
    let server = ModelServer::start([Reply::Hang(Duration::from_secs(30))]);
    let env = AgentEnv::new(&server);
    let started = std::time::Instant::now();
    let out = env.run(&["run", "--timeout", "1s", "--output", "jsonl", "hello"]);
    assert_eq!(out.status.code(), Some(124), "{}", stderr(&out));
    assert!(started.elapsed() < Duration::from_secs(20));
    let last = jsonl(&out).pop().unwrap();
    assert_eq!(last["type"], "run.stopped");
    assert_eq!(last["reason"], "timeout");
}

#[test]
fn piped_stdin_needs_the_flag_and_is_appended_with_it() {
    let server = ModelServer::start([Reply::text("ok")]);
    let env = AgentEnv::new(&server);
    for (args, code) in [
        (vec!["run", "review"], 2),
        (vec!["run", "--stdin", "review"], 0),
    ] {
        let mut child = env
            .rho(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The refused run may exit before reading: a broken pipe is expected there.
        let _ = child.stdin.take().unwrap().write_all(b"diff --git a b\n");
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", stderr(&out));
        if code == 2 {
            assert!(stderr(&out).contains("--stdin"), "{}", stderr(&out));
        }
    }
    let requests = server.model_requests();
    assert_eq!(requests.len(), 1, "the refused run sent nothing");
    assert_eq!(
        requests[0].json()["messages"][1]["content"],
        "review\n\ndiff --git a b"
    );
}

#[test]
fn invalid_invocations_exit_2_and_send_nothing() {
    let server = ModelServer::start([]);
    let env = AgentEnv::new(&server);
    for (args, needle) in [
        (vec!["run"], "no prompt"),
        (vec!["run", "--max-steps", "0", "x"], "--max-steps"),
        (vec!["run", "--timeout", "soon", "x"], "--timeout"),
        (
            vec!["run", "--agent", "nobody", "x"],
            "unknown agent `nobody`",
        ),
        (vec!["run", "--reasoning", "huge", "x"], "--reasoning"),
        (vec!["run", "--model", "@nope", "x"], "@nope"),
    ] {
        let out = env.run(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{args:?}: {}", stderr(&out));
        assert!(stdout(&out).is_empty());
    }
    assert!(server.requests().is_empty());
}

#[test]
fn a_missing_key_is_an_authentication_failure() {
    let env = AgentEnv::bare();
    env.write_config("[model]\nprovider = \"anthropic\"\nmodel = \"claude-test\"\n");
    let out = env.run(&["run", "hi"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("ANTHROPIC_API_KEY"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_anthropic_provider_runs_against_a_base_url_override() {
    let server = ModelServer::start([Reply::text("from messages")]);
    let mut env = AgentEnv::bare();
    env.write_config("[model]\nprovider = \"anthropic\"\nmodel = \"claude-test\"\n");
    env.env.push(("ANTHROPIC_API_KEY".into(), SECRET.into()));
    env.env
        .push(("ANTHROPIC_BASE_URL".into(), server.base_url()));
    let out = env.run(&["run", "hi"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "from messages\n");
    let req = &server.model_requests()[0];
    assert_eq!(req.path, "/v1/messages");
    assert_eq!(req.header("x-api-key"), Some(SECRET));
    env.assert_no_secret_on_disk();
}

#[test]
fn a_provider_error_exits_1_with_the_message() {
    let server = ModelServer::start([Reply::status(400, "model `scripted-1` does not exist")]);
    let env = AgentEnv::new(&server);
    let out = env.run(&["run", "--output", "jsonl", "hi"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let last = jsonl(&out).pop().unwrap();
    assert_eq!(last["type"], "run.failed");
    assert_eq!(last["reason"], "provider_error");
    assert!(stderr(&out).contains("does not exist"), "{}", stderr(&out));
}

#[test]
fn sigint_during_a_slow_stream_exits_130() {
    let server = ModelServer::start([Reply::Turn(
        ScriptedTurn::text("slow slow slow slow slow slow slow slow")
            .with_chunk_delay(Duration::from_millis(500)),
    )]);
    let env = AgentEnv::new(&server);
    let child = env
        .rho(&["run", "--output", "jsonl", "go"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(server.wait_for_requests(1, Duration::from_secs(20)));
    std::thread::sleep(Duration::from_millis(300));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    let last = jsonl(&out).pop().unwrap();
    assert_eq!(last["type"], "run.stopped");
    assert_eq!(last["reason"], "interrupted");
}

#[test]
fn root_auth_overrides_the_configured_auth_for_one_invocation() {
    // Rho 1.47's `rho --auth PROFILE ...`: `none` sends no key to the custom host even though
    // RHO_LOCAL_API_KEY is set; without it the key is sent.
    let server = ModelServer::start([Reply::text("with key"), Reply::text("without key")]);
    let env = AgentEnv::new(&server);
    let out = env.run(&["run", "hi"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = env.run(&["--auth", "none", "run", "hi"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "without key\n");
    let requests = server.model_requests();
    let bearer = format!("Bearer {SECRET}");
    assert_eq!(requests[0].header("authorization"), Some(bearer.as_str()));
    assert_eq!(requests[1].header("authorization"), None);

    // A profile the selected provider does not have is refused, naming the option; an
    // unknown profile is a usage error. Nothing reaches the model.
    for (args, needle) in [
        (
            vec!["--auth", "anthropic-api-key", "run", "hi"],
            "local-api-key",
        ),
        (vec!["run", "--auth", "magic", "hi"], "--auth"),
    ] {
        let out = env.run(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("--auth"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    assert_eq!(server.model_requests().len(), 2);
}
