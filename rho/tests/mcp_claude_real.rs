//! A real agent session: the real Claude Code CLI (`$RHO_TEST_CLAUDE`, installed pinned by
//! `.ci/install-clients`) runs `claude -p` with an MCP configuration that starts `rho mcp`,
//! against the loopback scripted Anthropic model (`ANTHROPIC_BASE_URL`, a dummy key, a
//! private `HOME` and `CLAUDE_CONFIG_DIR`). The scripted model calls the `workflow` tool
//! (`mcp__rho__workflow`) to validate, plan, run and ask the status of the shipped `hello`
//! example, reading the plan id from the plan's result as a model would.
//!
//! What is proven: the summaries reach the model (Claude Code hands its model the structured
//! content, which carries them); with `-p` Claude Code answers the consent elicitation with
//! `cancel`, so the run is refused with a summary that says why and how to run it, and no
//! run is stored; following that advice in a terminal runs the plan, and `status` of that run
//! reaches the model; under `--permission-mode plan` validate and plan are allowed and the run
//! is denied by policy. Without the binary these tests skip loudly, and fail under `CI` or
//! `RHO_REQUIRE_SANDBOX=1`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a broken setup should panic

mod run_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rho_e2e::model_server::{ModelServer, Reply, Responder};
use run_support::{Env, code, rho_bin, text, worker_bin};
use serde_json::{Value, json};

const HELLO: &str = ".rho/workflows/hello/workflow.star";
const TOOL: &str = "mcp__rho__workflow";

use rho_e2e::claude_binary;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A workspace holding the shipped `hello` example, a private rho home, and a private home
/// and configuration directory for Claude Code.
fn hello_env() -> (Env, PathBuf) {
    let env = Env::new();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/hello");
    copy_dir(&examples, &env.ws);
    let claude_home = env.home.parent().unwrap().join("claude-home");
    std::fs::create_dir_all(claude_home.join("config")).unwrap();
    (env, claude_home)
}

/// What one `claude -p` session printed and what reached the model.
struct Session {
    /// The `--output-format stream-json` lines.
    lines: Vec<Value>,
    /// The model requests' JSON bodies, in order.
    requests: Vec<Value>,
}

impl Session {
    /// The text the model was given for the tool call with id `tool_use_id` (the tool
    /// result's content, its text blocks joined), and whether it was marked an error.
    fn tool_result(&self, tool_use_id: &str) -> (String, bool) {
        let last = self.requests.last().expect("a model request");
        for message in last["messages"].as_array().into_iter().flatten() {
            for block in message["content"].as_array().into_iter().flatten() {
                if block["type"] == "tool_result" && block["tool_use_id"] == tool_use_id {
                    let content = match &block["content"] {
                        Value::String(text) => text.clone(),
                        Value::Array(parts) => parts
                            .iter()
                            .filter_map(|p| p["text"].as_str())
                            .collect::<Vec<_>>()
                            .join("\n"),
                        other => other.to_string(),
                    };
                    return (content, block["is_error"] == true);
                }
            }
        }
        panic!(
            "no tool result for {tool_use_id} reached the model: {}",
            last["messages"]
        );
    }

    /// The ids of the `mcp__rho__workflow` calls the session made, in order.
    fn workflow_calls(&self) -> Vec<String> {
        self.lines
            .iter()
            .filter(|l| l["type"] == "assistant")
            .flat_map(|l| {
                l["message"]["content"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter(|b| b["type"] == "tool_use" && b["name"] == TOOL)
            .map(|b| b["id"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// Runs `claude -p PROMPT` in the workspace with `rho mcp MCP_ARGS` as its only MCP server.
fn claude_session(
    claude: &Path,
    env: &Env,
    claude_home: &Path,
    mcp_args: &[&str],
    server: &ModelServer,
    prompt: &str,
) -> Session {
    let mut args = vec!["mcp"];
    args.extend_from_slice(mcp_args);
    let config = json!({
        "mcpServers": {
            "rho": {
                "type": "stdio",
                "command": rho_bin(),
                "args": args,
                "env": {
                    "RHO_HOME": env.home,
                    "HOME": env.home.parent().unwrap(),
                    "PATH": "/usr/bin:/bin",
                    "RHO_PLANNER_WORKER": worker_bin(),
                },
            }
        }
    });
    let config_file = claude_home.join("mcp.json");
    std::fs::write(&config_file, config.to_string()).unwrap();
    let path = format!(
        "{}:/usr/local/bin:/usr/bin:/bin",
        claude.parent().unwrap().display()
    );
    let mut child = Command::new(claude)
        .args(["-p", prompt, "--mcp-config"])
        .arg(&config_file)
        .args([
            "--strict-mcp-config",
            "--allowedTools",
            TOOL,
            "--output-format",
            "stream-json",
            "--verbose",
        ])
        .current_dir(&env.ws)
        .env_clear()
        .env("PATH", path)
        .env("HOME", claude_home)
        .env("CLAUDE_CONFIG_DIR", claude_home.join("config"))
        .env("ANTHROPIC_BASE_URL", server.base_url())
        .env("ANTHROPIC_API_KEY", "sk-ant-test-dummy")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_ERROR_REPORTING", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read both pipes on threads so a chatty child cannot block on a full pipe.
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut s).unwrap();
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut s).unwrap();
        s
    });
    let deadline = Instant::now() + Duration::from_mins(4);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "claude -p did not finish within 4 minutes; stderr:\n{}",
                err.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = out.join().unwrap();
    let stderr = err.join().unwrap();
    assert!(
        status.success(),
        "claude -p failed ({status}):\n{stdout}\n{stderr}"
    );
    let lines: Vec<Value> = stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let init = lines
        .iter()
        .find(|l| l["type"] == "system" && l["subtype"] == "init")
        .unwrap_or_else(|| panic!("no init line:\n{stdout}"));
    assert_eq!(
        init["mcp_servers"],
        json!([{"name": "rho", "status": "connected", "source": "dynamic"}]),
        "rho mcp must connect: {init}\n{stderr}"
    );
    let result = lines.last().unwrap();
    assert_eq!(result["type"], "result", "{stdout}");
    assert_eq!(result["is_error"], false, "{stdout}");
    Session {
        lines,
        requests: server
            .model_requests()
            .iter()
            .map(rho_e2e::model_server::RecordedRequest::json)
            .collect(),
    }
}

/// The text of the newest tool result in a model request (what the model just read).
fn newest_tool_result(body: &Value) -> String {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    messages
        .iter()
        .rev()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find(|b| b["type"] == "tool_result")
        .map(|b| match &b["content"] {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        })
        .unwrap_or_default()
}

/// A scripted model step that reads the plan id from the plan's result and runs it.
fn run_the_planned_id() -> Reply {
    Reply::Respond(Responder::new(|body| {
        let result = newest_tool_result(body);
        let plan_id = serde_json::from_str::<Value>(&result)
            .ok()
            .and_then(|v| v["plan_id"].as_str().map(str::to_owned));
        match plan_id {
            Some(plan_id) => Reply::tool_call(TOOL, &json!({"action": "run", "plan_id": plan_id})),
            None => Reply::text(&format!("NO PLAN ID IN THE PLAN RESULT: {result}")),
        }
    }))
}

fn validate_plan_run_script() -> Vec<Reply> {
    vec![
        Reply::tool_call(TOOL, &json!({"action": "validate", "file": HELLO})),
        Reply::tool_call(TOOL, &json!({"action": "plan", "file": HELLO})),
        run_the_planned_id(),
        Reply::text("The run needs your consent first."),
    ]
}

/// The plan id the session's plan call returned to the model.
fn planned_id(session: &Session, call: &str) -> String {
    let (plan, is_error) = session.tool_result(call);
    assert!(!is_error, "plan failed: {plan}");
    let doc: Value = serde_json::from_str(&plan).unwrap();
    doc["plan_id"].as_str().unwrap().to_owned()
}

#[test]
fn claude_code_validates_plans_and_is_refused_the_run_it_cannot_consent_to() {
    let Some(claude) = claude_binary() else {
        return;
    };
    let (env, claude_home) = hello_env();
    let server = ModelServer::start(validate_plan_run_script());
    let session = claude_session(
        &claude,
        &env,
        &claude_home,
        &[],
        &server,
        "Validate, plan and run the hello workflow.",
    );
    assert_eq!(server.remaining(), 0, "every scripted turn was played");
    let calls = session.workflow_calls();
    assert_eq!(calls.len(), 3, "validate, plan, run: {:?}", session.lines);

    // The summaries reached the model, inside the structured content Claude Code forwards.
    let (validated, is_error) = session.tool_result(&calls[0]);
    assert!(!is_error, "{validated}");
    let validated: Value = serde_json::from_str(&validated).unwrap();
    let summary = validated["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("valid: workflow `hello` (4 nodes) from .rho/workflows/hello"),
        "{summary}"
    );
    assert!(summary.contains("program_digest: sha256:"), "{summary}");
    assert!(summary.contains("next: {\"action\":\"plan\""), "{summary}");

    let plan_id = planned_id(&session, &calls[1]);
    let (planned, _) = session.tool_result(&calls[1]);
    let planned: Value = serde_json::from_str(&planned).unwrap();
    let summary = planned["summary"].as_str().unwrap();
    assert!(
        summary.starts_with(&format!("plan_id: {plan_id}\n")),
        "{summary}"
    );

    // `-p` has no person to ask: Claude Code cancels the elicitation and the run is refused,
    // saying why and how to run it, with nothing stored.
    let (refused, is_error) = session.tool_result(&calls[2]);
    assert!(is_error, "the run must be refused: {refused}");
    for needle in [
        "cancelled",
        "Nothing was run and no run was stored",
        &format!("rho workflow run {plan_id} --yes"),
    ] {
        assert!(refused.contains(needle), "missing {needle:?} in: {refused}");
    }
    assert!(env.run_ids().is_empty(), "a refused run was stored");
    assert!(
        session.lines.last().unwrap()["result"]
            .as_str()
            .is_some_and(|r| r.contains("consent")),
        "{:?}",
        session.lines.last()
    );

    // Following the refusal's advice in a terminal runs the plan.
    let out = env.rho(&["workflow", "run", &plan_id, "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let run_id = env.run_ids().into_iter().next().expect("the run is stored");

    // A second session asks the status of that run; the status summary reaches the model.
    let server = ModelServer::start([
        Reply::tool_call(TOOL, &json!({"action": "status", "run_id": run_id})),
        Reply::text("The hello run succeeded."),
    ]);
    let session = claude_session(
        &claude,
        &env,
        &claude_home,
        &[],
        &server,
        "How did the hello run go?",
    );
    let calls = session.workflow_calls();
    assert_eq!(calls.len(), 1, "{:?}", session.lines);
    let (status, is_error) = session.tool_result(&calls[0]);
    assert!(!is_error, "{status}");
    let status: Value = serde_json::from_str(&status).unwrap();
    let summary = status["summary"].as_str().unwrap();
    for needle in [
        format!("run_id: {run_id}"),
        "lifecycle: completed".to_owned(),
        "outcome: success".to_owned(),
    ] {
        assert!(
            summary.contains(&needle),
            "missing {needle:?} in: {summary}"
        );
    }
    assert_eq!(status["outcome"], "success");
}

#[test]
fn claude_code_in_plan_mode_validates_and_plans_but_the_run_is_denied_by_policy() {
    let Some(claude) = claude_binary() else {
        return;
    };
    let (env, claude_home) = hello_env();
    let server = ModelServer::start(validate_plan_run_script());
    let session = claude_session(
        &claude,
        &env,
        &claude_home,
        &["--permission-mode", "plan"],
        &server,
        "Validate, plan and run the hello workflow.",
    );
    assert_eq!(server.remaining(), 0, "every scripted turn was played");
    let calls = session.workflow_calls();
    assert_eq!(calls.len(), 3, "validate, plan, run: {:?}", session.lines);
    let (validated, is_error) = session.tool_result(&calls[0]);
    assert!(
        !is_error && validated.contains("valid: workflow `hello`"),
        "{validated}"
    );
    let plan_id = planned_id(&session, &calls[1]);
    let (refused, is_error) = session.tool_result(&calls[2]);
    assert!(is_error, "plan mode must deny the run: {refused}");
    assert!(refused.contains("denied by policy"), "{refused}");
    assert!(refused.contains("plan"), "{refused}");
    assert!(env.run_ids().is_empty(), "a denied run was stored");
    // The plan the model made is stored and intact.
    let out = env.rho(&["workflow", "list", "--plans", "--json"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&plan_id));
}
