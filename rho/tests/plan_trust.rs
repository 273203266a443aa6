//! Project trust and planning: project agents are used only when the workspace is trusted
//! (`rho trust add`, or `RHO_TRUST_PROJECT_AGENTS=1`), and the plan records that it needed it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt as _;

mod plan_support;

use plan_support::Env;

const AGENT: &str =
    "---\ndescription: Looks around the project\ntools: [read_file, grep]\n---\nLook around.\n";

const FLOW: &str = "def build(inputs):\n    n = agent(name = \"look\", agent = \"helper\", prompt = \"look\", access = \"read_only\", timeout_seconds = 60, max_output_bytes = 4096)\n    return workflow(name = \"wf\", nodes = [n])\n\nWORKFLOW = define(inputs = {}, build = build)\n";

fn trust_needed(env: &Env, id: &str) -> serde_json::Value {
    let graph: serde_json::Value = serde_json::from_slice(
        &std::fs::read(env.home.join("workflows/plans").join(id).join("graph.json")).unwrap(),
    )
    .unwrap();
    graph["program"]["trust"].clone()
}

#[test]
fn project_agents_need_trust_and_the_plan_records_it() {
    let mut env = Env::new();
    env.write(".agents/agents/helper.md", AGENT);
    env.write("w.star", FLOW);

    let run = env.rho(&["workflow", "plan", "w.star"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("unknown agent `helper`"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("not trusted"), "{}", run.stderr);

    let run = env.rho(&["trust", "add"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, format!("trusted: {}\n", env.ws.display()));
    let run = env.rho(&["trust", "list", "--json"]);
    let doc: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(
        doc["workspaces"],
        serde_json::json!([env.ws.to_str().unwrap()])
    );
    let mode = std::fs::metadata(env.home.join("trust.json"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    let id = env.plan_ok("w.star");
    assert_eq!(
        trust_needed(&env, &id),
        serde_json::json!({"project_agents": true})
    );

    let run = env.rho(&["trust", "remove"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let run = env.rho(&["trust", "list"]);
    assert_eq!(run.stdout, "no trusted workspaces\n");
    let run = env.rho(&["trust", "remove"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("is not trusted"), "{}", run.stderr);

    env.vars
        .push(("RHO_TRUST_PROJECT_AGENTS".to_owned(), "1".to_owned()));
    let id = env.plan_ok("w.star");
    assert_eq!(
        trust_needed(&env, &id),
        serde_json::json!({"project_agents": true})
    );
}

#[test]
fn workflow_local_agents_win_and_need_no_trust() {
    let env = Env::new();
    env.write(".agents/agents/helper.md", AGENT);
    env.write(
        "flows/agents/helper.md",
        "---\ndescription: Local helper\ntools: [read_file]\n---\nLocal.\n",
    );
    env.write("flows/w.star", FLOW);
    let id = env.plan_ok("flows/w.star");
    assert_eq!(
        trust_needed(&env, &id),
        serde_json::json!({"project_agents": false})
    );
    let graph: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            env.home
                .join("workflows/plans")
                .join(&id)
                .join("graph.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let setup = &graph["program"]["agents"]["helper"];
    assert_eq!(setup["source"], "workflow");
    assert_eq!(setup["capabilities"], serde_json::json!(["read_file"]));
    assert_eq!(setup["read_only"], true);
    assert_eq!(graph["program"]["root"]["nodes"][0]["access"], "read_only");
}

#[test]
fn a_world_readable_trust_file_is_refused() {
    let env = Env::new();
    let run = env.rho(&["trust", "add"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    std::fs::set_permissions(
        env.home.join("trust.json"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let run = env.rho(&["trust", "list"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("trust.json has mode 0644"),
        "{}",
        run.stderr
    );
}
