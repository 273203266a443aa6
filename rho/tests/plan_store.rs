//! The plan store through the CLI: private modes, refusal of links and loose permissions,
//! the plan/list/delete round trip, and unique-prefix ids.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod plan_support;

use std::os::unix::fs::PermissionsExt as _;

use plan_support::{Env, cmd, workflow};

fn simple(env: &Env) {
    env.write(
        "w.star",
        &workflow(
            &[
                cmd("a", "[\"true\"]", ""),
                cmd("b", "[\"echo\", \"hi\"]", ", needs = [\"a\"]"),
            ],
            "",
        ),
    );
}

#[test]
fn stored_plans_are_private_and_complete() {
    let env = Env::new();
    simple(&env);
    let id = env.plan_ok("w.star");
    let plan = env.home.join("workflows/plans").join(&id);
    for rel in ["", "sources"] {
        let mode = std::fs::metadata(plan.join(rel))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o700, "{rel}");
    }
    for rel in ["manifest.json", "graph.json", "program.cbor"] {
        let mode = std::fs::metadata(plan.join(rel))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600, "{rel}");
    }
    for dir in ["", "workflows", "workflows/plans"] {
        let mode = std::fs::metadata(env.home.join(dir))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o700, "{dir}");
    }
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(plan.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["format"], 2);
    assert_eq!(manifest["plan_id"], id.as_str());
    assert_eq!(manifest["name"], "wf");
    assert_eq!(manifest["node_count"], 2);
    assert_eq!(manifest["workspace"]["path"], env.ws.to_str().unwrap());
    assert_eq!(manifest["sandbox"]["mode"], "required");
    assert_eq!(manifest["sandbox"]["missing"], serde_json::json!([]));
    let source = &manifest["sources"][0];
    assert_eq!(source["label"], "//w.star");
    let hex = source["digest"]
        .as_str()
        .unwrap()
        .strip_prefix("sha256:")
        .unwrap();
    let stored = std::fs::read_to_string(plan.join("sources").join(format!("{hex}.star"))).unwrap();
    assert_eq!(
        stored,
        std::fs::read_to_string(env.ws.join("w.star")).unwrap()
    );
    let graph: serde_json::Value =
        serde_json::from_slice(&std::fs::read(plan.join("graph.json")).unwrap()).unwrap();
    assert_eq!(graph["program_digest"], manifest["program_digest"]);
    assert_eq!(graph["program"]["name"], "wf");
    // No temporary entries are left behind.
    assert_eq!(env.plan_dirs(), vec![id]);
}

#[test]
fn symlinked_store_directory_is_rejected() {
    let env = Env::new();
    simple(&env);
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(env.home.join("workflows")).unwrap();
    std::fs::set_permissions(&env.home, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(
        env.home.join("workflows"),
        std::fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), env.home.join("workflows/plans")).unwrap();
    let run = env.rho(&["workflow", "plan", "w.star"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("workflows/plans is a symbolic link"),
        "{}",
        run.stderr
    );
    assert_eq!(
        std::fs::read_dir(elsewhere.path()).unwrap().count(),
        0,
        "wrote through the link"
    );
    let run = env.rho(&["workflow", "list"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("symbolic link"), "{}", run.stderr);
}

#[test]
fn loose_permissions_in_the_store_are_rejected() {
    let env = Env::new();
    simple(&env);
    let id = env.plan_ok("w.star");
    let plan = env.home.join("workflows/plans").join(&id);
    std::fs::set_permissions(&plan, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = env.rho(&["workflow", "list"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("has mode 0755"), "{}", run.stderr);
    std::fs::set_permissions(&plan, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(
        plan.join("manifest.json"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let run = env.rho(&["workflow", "graph", &id]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("manifest.json has mode 0644"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_symlinked_plan_file_is_rejected() {
    let env = Env::new();
    simple(&env);
    let id = env.plan_ok("w.star");
    let plan = env.home.join("workflows/plans").join(&id);
    let program = plan.join("program.cbor");
    let copy = env.home.join("copy.cbor");
    std::fs::rename(&program, &copy).unwrap();
    std::os::unix::fs::symlink(&copy, &program).unwrap();
    let run = env.rho(&["workflow", "graph", &id]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("program.cbor is a symbolic link"),
        "{}",
        run.stderr
    );
}

#[test]
fn plan_list_delete_round_trip() {
    let env = Env::new();
    simple(&env);
    let first = env.plan_ok("w.star");
    // The same sources and inputs reuse the stored plan; a changed source makes a new one.
    assert_eq!(env.plan_ok("w.star"), first);
    assert_eq!(env.plan_dirs(), vec![first.clone()]);
    env.write(
        "w.star",
        &workflow(
            &[cmd("a", "[\"true\"]", ""), cmd("c", "[\"true\"]", "")],
            "",
        ),
    );
    let second = env.plan_ok("w.star");
    assert_ne!(second, first);
    let run = env.rho(&["workflow", "list", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let list: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let ids: Vec<&str> = list["plans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["plan_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [second.as_str(), first.as_str()], "newest first");
    let run = env.rho(&["workflow", "list", "--plans", "--limit", "1"]);
    assert!(
        run.stdout.contains(&second) && !run.stdout.contains(&first),
        "{}",
        run.stdout
    );

    // Another workspace does not see these plans.
    let other = tempfile::tempdir().unwrap();
    let run = env.rho_in(other.path(), &["workflow", "list", "--json"]);
    let list: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(list, serde_json::json!({"plans": [], "runs": []}));

    let run = env.rho(&["workflow", "delete", &first, "--yes"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, format!("deleted plan {first}\n"));
    assert_eq!(env.plan_dirs(), vec![second.clone()]);
    let run = env.rho(&["workflow", "delete", &first, "--yes"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains(&format!("matches `{first}`")),
        "{}",
        run.stderr
    );
}

/// Copies a stored plan under a chosen id (manifest rewritten to match).
fn clone_plan(env: &Env, from: &str, to: &str) {
    let plans = env.home.join("workflows/plans");
    let dest = plans.join(to);
    std::fs::create_dir(&dest).unwrap();
    std::fs::create_dir(dest.join("sources")).unwrap();
    for dir in [&dest, &dest.join("sources")] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    for entry in walk_files(&plans.join(from)) {
        let rel = entry.strip_prefix(plans.join(from)).unwrap();
        std::fs::copy(&entry, dest.join(rel)).unwrap();
    }
    let manifest = std::fs::read_to_string(dest.join("manifest.json"))
        .unwrap()
        .replace(from, to);
    std::fs::write(dest.join("manifest.json"), manifest).unwrap();
}

fn walk_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk_files(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn ids_resolve_by_unique_prefix_only() {
    let env = Env::new();
    simple(&env);
    let id = env.plan_ok("w.star");
    clone_plan(&env, &id, "abcd0000-0000-4000-8000-000000000001");
    clone_plan(&env, &id, "abcd0000-0000-4000-8000-000000000002");
    let run = env.rho(&[
        "workflow",
        "graph",
        "abcd0000-0000-4000-8000-000000000001",
        "--format",
        "dot",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.starts_with("digraph \"wf\""), "{}", run.stdout);

    let run = env.rho(&["workflow", "delete", "abcd", "--yes"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("plan id prefix `abcd` is ambiguous"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("abcd0000-0000-4000-8000-000000000001"),
        "{}",
        run.stderr
    );
    assert_eq!(env.plan_dirs().len(), 3);

    let run = env.rho(&["workflow", "delete", "fff", "--yes"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("matches `fff`"), "{}", run.stderr);

    let prefix = &id[..8];
    let run = env.rho(&["workflow", "graph", prefix]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("n_a --> n_b"), "{}", run.stdout);
    let run = env.rho(&[
        "workflow",
        "delete",
        "abcd0000-0000-4000-8000-000000000002",
        "--yes",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let run = env.rho(&["workflow", "delete", "abcd", "--yes"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(env.plan_dirs(), vec![id]);
}

#[test]
fn a_tampered_program_is_refused() {
    let env = Env::new();
    simple(&env);
    let id = env.plan_ok("w.star");
    let program = env
        .home
        .join("workflows/plans")
        .join(&id)
        .join("program.cbor");
    let mut bytes = std::fs::read(&program).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&program, bytes).unwrap();
    let run = env.rho(&["workflow", "graph", &id]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("program.cbor is corrupt"),
        "{}",
        run.stderr
    );
}
