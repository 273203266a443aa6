//! A claude-cli agent node in a workflow, run by the real Claude Code CLI
//! (`$RHO_TEST_CLAUDE`) against the loopback scripted Anthropic model: its final answer is
//! schema-checked and feeds a downstream command node; an answer the schema rejects fails the
//! node; supervised mode refuses before anything is spawned.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a broken setup should panic

mod run_support;

use std::process::Command;

use rho_e2e::model_server::{ModelServer, Reply};
use run_support::{Env, code, text};

use rho_e2e::claude_binary;

const WORKFLOW: &str = r#"
def build(inputs):
    review = agent(
        name = "review",
        agent = "planner",
        prompt = "Judge the plan and answer JSON.",
        output = schema.record({
            "verdict": schema.enum(["approve", "revise"]),
            "summary": schema.string(),
        }),
        timeout_seconds = 300,
        max_output_bytes = 65536,
    )
    report = command(
        name = "report",
        argv = ["printf", "%s\n", template(["verdict=", output("review", ["verdict"])])],
        cwd = ".",
        needs = ["review"],
        timeout_seconds = 60,
        max_output_bytes = 4096,
    )
    return workflow(name = "claude-node", nodes = [review, report])

WORKFLOW = define(inputs = {}, build = build)
"#;

const AGENT: &str = "---\ndescription: judges plans with Claude Code\nruntime: claude-cli\n\
                     tools: [Read]\n---\nAnswer with one JSON object only.\n";

fn setup(env: &Env) {
    env.write(".rho/workflows/judge/workflow.star", WORKFLOW);
    env.write(".rho/workflows/judge/agents/planner.md", AGENT);
}

fn run(
    env: &Env,
    claude: &std::path::Path,
    server: &ModelServer,
    mode: &str,
) -> std::process::Output {
    let mut cmd: Command = env.command(&[
        "workflow",
        "run",
        ".rho/workflows/judge/workflow.star",
        "--yes",
        "--permission-mode",
        mode,
    ]);
    let user_home = env.home.parent().unwrap().join("user-home");
    std::fs::create_dir_all(&user_home).unwrap();
    cmd.env(
        "PATH",
        format!(
            "{}:/usr/local/bin:/usr/bin:/bin",
            claude.parent().unwrap().display()
        ),
    )
    .env("HOME", &user_home)
    .env("ANTHROPIC_BASE_URL", server.base_url())
    .env("ANTHROPIC_API_KEY", "sk-ant-test-dummy")
    .env("DISABLE_AUTOUPDATER", "1")
    .env("RHO_TRUST_PROJECT_AGENTS", "1");
    cmd.output().unwrap()
}

#[test]
fn a_claude_cli_agent_node_feeds_a_schema_checked_answer_downstream() {
    let Some(claude) = claude_binary() else {
        return;
    };
    let env = Env::new();
    setup(&env);
    let server = ModelServer::start([Reply::text(
        r#"{"verdict": "approve", "summary": "the plan is sound"}"#,
    )]);
    // bypass: the downstream command node needs no approval (auto would ask for it).
    let out = run(&env, &claude, &server, "bypass");
    let all = text(&out);
    assert_eq!(code(&out), 0, "{all}");
    assert!(
        all.contains("verdict=approve") || report_stdout(&env).contains("verdict=approve"),
        "{all}"
    );
    // The prompt reached the model through Claude Code.
    let requests = server.model_requests();
    assert!(
        requests.iter().any(|r| r.body.contains("Judge the plan")),
        "no request carried the prompt"
    );
}

#[test]
fn an_answer_the_schema_rejects_fails_the_node() {
    let Some(claude) = claude_binary() else {
        return;
    };
    let env = Env::new();
    setup(&env);
    let server = ModelServer::start([Reply::text(r#"{"verdict": "maybe", "summary": "unsure"}"#)]);
    let out = run(&env, &claude, &server, "auto");
    let all = text(&out);
    assert_eq!(code(&out), 3, "{all}");
    assert!(all.contains("schema"), "{all}");
    assert!(
        !report_stdout(&env).contains("verdict="),
        "the downstream node must not run"
    );
}

#[test]
fn supervised_mode_refuses_a_claude_cli_node_before_spawning() {
    let Some(claude) = claude_binary() else {
        return;
    };
    let env = Env::new();
    setup(&env);
    let server = ModelServer::start([Reply::text("{}")]);
    let out = run(&env, &claude, &server, "supervised");
    let all = text(&out);
    assert_eq!(code(&out), 4, "{all}");
    assert!(all.contains("refuses to spawn"), "{all}");
    assert!(
        server.model_requests().is_empty(),
        "nothing may reach the model"
    );
}

/// The stdout of the `report` node's last attempt, wherever the run keeps it ("" if it never
/// ran).
fn report_stdout(env: &Env) -> String {
    let mut found = String::new();
    for id in env.run_ids() {
        let dir = env.run_dir(&id);
        visit(&dir, &mut |path| {
            let p = path.to_string_lossy();
            if p.contains("report") && p.ends_with("stdout") {
                found.push_str(&std::fs::read_to_string(path).unwrap_or_default());
            }
        });
    }
    found
}

fn visit(dir: &std::path::Path, f: &mut dyn FnMut(&std::path::Path)) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            visit(&path, f);
        } else {
            f(&path);
        }
    }
}
