//! `rho mcp` driven by a real MCP client: the official MCP Python SDK (`mcp` on PyPI),
//! installed by `.ci/install-clients` and named by `RHO_TEST_PYTHON`. The client lists the
//! tools and their schemas, validates, plans and runs a shipped example, receives the
//! completion notification, and is refused a run when it declines, cancels or cannot be asked.
//!
//! Without `RHO_TEST_PYTHON` the tests say loudly why they skip — and fail instead under `CI`
//! or `RHO_REQUIRE_SANDBOX=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod run_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use run_support::{Env, rho_bin, worker_bin};

/// The Python interpreter with the MCP SDK, or `None` (after saying why) when the test may
/// skip.
fn python() -> Option<PathBuf> {
    let required = std::env::var_os("CI").is_some()
        || std::env::var("RHO_REQUIRE_SANDBOX").is_ok_and(|v| v == "1");
    match std::env::var_os("RHO_TEST_PYTHON").map(PathBuf::from) {
        Some(path) if path.is_file() => Some(path),
        other => {
            let why = match other {
                Some(path) => format!("RHO_TEST_PYTHON={} does not exist", path.display()),
                None => "RHO_TEST_PYTHON is not set".to_owned(),
            };
            assert!(
                !required,
                "{why}: the real MCP client test cannot run (install it with .ci/install-clients)"
            );
            eprintln!(
                "SKIPPING the MCP Python SDK test: {why} (set it to a python with `mcp` installed, \
                 e.g. /opt/rho-clients/venv/bin/python)"
            );
            None
        }
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

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

/// Runs one scenario of `tests/mcp/python_client.py` against `rho mcp` in a fresh workspace
/// holding the `hello` example; returns stdout after checking the client succeeded.
fn scenario(env: &Env, python: &Path, name: &str) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/python_client.py");
    let command = serde_json::json!([rho_bin(), "mcp"]).to_string();
    let out = Command::new(python)
        .arg(&script)
        .arg(name)
        .current_dir(&env.ws)
        .env_clear()
        .env("RHO_MCP_COMMAND", command)
        .env("RHO_EXPECT_PROCESS_TOOL", "1")
        .env("RHO_HOME", &env.home)
        .env("HOME", env.home.parent().unwrap())
        .env("PATH", "/usr/bin:/bin")
        .env("RHO_PLANNER_WORKER", worker_bin())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "scenario {name} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    stdout
}

fn hello_env() -> Env {
    let env = Env::new();
    copy_dir(&repo_root().join("examples/hello"), &env.ws);
    env
}

#[test]
fn python_sdk_lists_validates_plans_runs_and_is_notified() {
    let Some(python) = python() else { return };
    let env = hello_env();
    let out = scenario(&env, &python, "full");
    for fact in [
        "server/discover is answered with a JSON-RPC error",
        "protocol 2025-11-25 negotiated",
        "instructions name the permission mode",
        "the workflow schema rejects unknown fields",
        "an unknown field is an error naming it",
        "consent names the digest",
        "a completion notification arrived",
        "status shows the completed run",
    ] {
        assert!(
            out.contains(&format!("ok: {fact}")),
            "missing `{fact}` in:\n{out}"
        );
    }
    let run_id = out.lines().find_map(|l| l.strip_prefix("RUN_ID=")).unwrap();
    assert_eq!(
        env.run_ids().into_iter().collect::<Vec<_>>(),
        vec![run_id.to_owned()]
    );
}

#[test]
fn python_sdk_decline_cancel_and_no_elicitation_all_refuse_the_run() {
    let Some(python) = python() else { return };
    for name in ["decline", "cancel", "no-elicitation"] {
        let env = hello_env();
        let out = scenario(&env, &python, name);
        assert!(out.contains("ok: the refusal says nothing ran"), "{out}");
        assert!(env.run_ids().is_empty(), "{name}: a run was stored");
    }
}

#[test]
fn python_sdk_in_plan_mode_is_denied_the_run_by_policy() {
    let Some(python) = python() else { return };
    let env = hello_env();
    let out = scenario(&env, &python, "plan-mode");
    assert!(
        out.contains("ok: plan mode denies the run by policy"),
        "{out}"
    );
    assert!(env.run_ids().is_empty());
}
