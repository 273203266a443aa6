//! Directory identities through the real binary: planning freezes each node's cwd with its
//! device and inode, and a run refuses to launch a node whose cwd was replaced by another
//! real directory under the same name after planning.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod run_support;
use run_support::{Env, code, text};

#[test]
fn a_cwd_replaced_after_planning_fails_the_node_naming_the_directory() {
    let env = Env::new();
    std::fs::create_dir(env.ws.join("sub")).unwrap();
    let source = "def build(inputs):\n    return workflow(name = \"cwd\", nodes = [command(name = \"a\", argv = [\"true\"], cwd = \"sub\", timeout_seconds = 60, max_output_bytes = 4096)], exports = {})\n\nWORKFLOW = define(inputs = {}, build = build)\n";
    env.write("wf.star", source);
    let plan_id = env.plan("wf.star");

    std::fs::rename(env.ws.join("sub"), env.ws.join("sub.old")).unwrap();
    std::fs::create_dir(env.ws.join("sub")).unwrap();
    let out = env.rho(&["workflow", "run", &plan_id, "--yes"]);
    assert_eq!(code(&out), 3, "the node fails: {}", text(&out));
    let before = env.run_ids();
    let id = before.iter().next().unwrap();
    let status = env.rho(&["workflow", "status", id, "--output", "json"]);
    let doc = String::from_utf8_lossy(&status.stdout);
    assert!(
        doc.contains("working directory sub changed: another directory is there"),
        "{doc}"
    );

    // The frozen directory itself, put back, runs.
    std::fs::remove_dir(env.ws.join("sub")).unwrap();
    std::fs::rename(env.ws.join("sub.old"), env.ws.join("sub")).unwrap();
    let out = env.rho(&["workflow", "run", &plan_id, "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
}
