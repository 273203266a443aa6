//! Keeps the loopback model server honest: the official `anthropic` and `openai` Python
//! client libraries parse its streams (text, parallel tool calls with split arguments,
//! usage), its whole responses, its HTTP errors, and report its cut streams as failures.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use rho_e2e::model_server::{ModelServer, Reply, ScriptedTurn};
use serde_json::json;

/// The Python interpreter with the client libraries, or `None` (after saying why) when this
/// machine has none and the run does not require the real clients.
fn python() -> Option<String> {
    if let Ok(python) = std::env::var("RHO_TEST_PYTHON") {
        return Some(python);
    }
    let required = std::env::var_os("CI").is_some()
        || std::env::var("RHO_REQUIRE_SANDBOX").as_deref() == Ok("1");
    assert!(
        !required,
        "RHO_TEST_PYTHON is not set but CI/RHO_REQUIRE_SANDBOX requires the real Python clients"
    );
    eprintln!(
        "SKIPPING: RHO_TEST_PYTHON is not set; the official anthropic/openai clients cannot be run"
    );
    None
}

fn tool_turn() -> ScriptedTurn {
    ScriptedTurn::text("Let me look.")
        .with_tool_call("read_file", &json!({"path": "src/lib.rs", "limit": 40}))
        .with_tool_call("bash", &json!({"command": "ls -la \"a b\""}))
}

#[test]
fn official_python_clients_parse_the_scripted_streams() {
    let Some(python) = python() else { return };
    let server = ModelServer::start([
        Reply::Turn(ScriptedTurn::text("Hello from the scripted model.").with_usage(21, 9)),
        Reply::Turn(tool_turn()),
        Reply::text("whole answer"),
        Reply::rate_limited(7),
        Reply::Cut {
            turn: ScriptedTurn::text("this answer never ends properly"),
            after_events: 4,
        },
        Reply::Turn(ScriptedTurn::text("Hi from chat completions.").with_usage(5, 3)),
        Reply::Turn(tool_turn()),
        Reply::text("whole chat answer"),
        Reply::status(503, "scripted outage"),
        Reply::Cut {
            turn: ScriptedTurn::text("this chat answer never ends"),
            after_events: 3,
        },
    ]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/model_server_clients.py");
    let out = Command::new(&python)
        .arg(&script)
        .arg(server.base_url())
        .env("NO_PROXY", "*")
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "python failed:\n{stdout}\n{stderr}");
    let got: serde_json::Value = serde_json::from_str(stdout.trim()).expect("python JSON");

    assert_eq!(got["a_text"], "Hello from the scripted model.");
    assert_eq!(got["a_text_stop"], "end_turn");
    assert_eq!(got["a_usage"], json!([21, 9]));
    assert_eq!(got["a_tools_text"], "Let me look.");
    assert_eq!(got["a_tools_stop"], "tool_use");
    let a_tools = got["a_tools"].as_array().expect("tool list");
    assert_eq!(a_tools.len(), 2, "{got}");
    assert_eq!(a_tools[0]["name"], "read_file");
    assert_eq!(
        a_tools[0]["input"],
        json!({"path": "src/lib.rs", "limit": 40})
    );
    assert_eq!(a_tools[1]["name"], "bash");
    assert_eq!(a_tools[1]["input"], json!({"command": "ls -la \"a b\""}));
    assert_ne!(a_tools[0]["id"], a_tools[1]["id"]);
    assert_eq!(got["a_whole"], "whole answer");
    assert_eq!(got["a_429"], json!([429, "7"]));
    assert!(got["a_cut"].is_string(), "a cut stream must fail: {got}");

    assert_eq!(got["o_text"], "Hi from chat completions.");
    assert_eq!(got["o_text_finish"], "stop");
    assert_eq!(got["o_usage"], json!([5, 3]));
    let o_tools = got["o_tools"].as_array().expect("tool list");
    assert_eq!(o_tools.len(), 2, "{got}");
    assert_eq!(o_tools[0]["name"], "read_file");
    assert_eq!(
        o_tools[0]["arguments"],
        json!({"path": "src/lib.rs", "limit": 40})
    );
    assert_eq!(
        o_tools[1]["arguments"],
        json!({"command": "ls -la \"a b\""})
    );
    assert_eq!(got["o_tools_finish"], "tool_calls");
    assert_eq!(got["o_whole"], "whole chat answer");
    assert_eq!(got["o_503"], 503);
    assert!(got["o_cut"].is_string(), "a cut stream must fail: {got}");

    // What reached the model: every request, on the paths real clients use.
    let requests = server.model_requests();
    assert_eq!(requests.len(), 10);
    assert_eq!(requests[1].path, "/v1/messages?beta=true");
    // Newer anthropic libraries send the key as a bearer token, older ones as x-api-key.
    let anthropic_key = requests[0]
        .header("x-api-key")
        .map(str::to_owned)
        .or_else(|| {
            requests[0]
                .header("authorization")
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::to_owned)
        });
    assert_eq!(anthropic_key.as_deref(), Some("k-anthropic"));
    assert_eq!(requests[5].path, "/v1/chat/completions");
    assert_eq!(requests[5].header("authorization"), Some("Bearer k-openai"));
    assert_eq!(requests[1].json()["tools"][0]["name"], "read_file");
    assert_eq!(server.remaining(), 0);
    assert!(server.wait_for_requests(10, Duration::from_secs(1)));
}
