//! The README's quick start, run as a user would: the shipped `examples/hello` workspace,
//! planned and run in one command with `--yes`, from a fresh data directory.

use std::path::Path;

use rho_e2e::{Sandbox, copy_tree, skip_or_fail, stderr, stdout};

fn hello_workspace(sandbox: &Sandbox) {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/hello");
    copy_tree(&example, &sandbox.workspace);
}

#[test]
fn quick_start_runs_the_hello_example_to_success() {
    let sandbox = Sandbox::new();
    hello_workspace(&sandbox);
    let out = sandbox.run(&[
        "workflow",
        "run",
        ".rho/workflows/hello/workflow.star",
        "--yes",
    ]);
    let text = stdout(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{text}\nstderr:\n{}",
        stderr(&out)
    );
    assert!(text.contains("plan_id: "), "{text}");
    assert!(text.contains("program_digest: sha256:"), "{text}");
    assert!(text.contains("outcome success"), "{text}");
    assert!(text.contains("export ready = true"), "{text}");

    // The run is durable and inspectable afterwards, without taking ownership.
    let run_id = text
        .lines()
        .find_map(|l| l.strip_prefix("run_id: "))
        .expect("run id line")
        .to_owned();
    let status = sandbox.run(&["workflow", "status", &run_id, "--output", "json"]);
    assert_eq!(status.status.code(), Some(0), "{}", stderr(&status));
    let doc: serde_json::Value = serde_json::from_slice(&status.stdout).expect("status json");
    let rendered = doc.to_string();
    assert!(rendered.contains("\"completed\""), "{rendered}");
    assert!(rendered.contains("\"success\""), "{rendered}");
}

#[test]
fn quick_start_without_consent_fails_closed_and_runs_nothing() {
    let sandbox = Sandbox::new();
    hello_workspace(&sandbox);
    let out = sandbox.run(&["workflow", "run", ".rho/workflows/hello/workflow.star"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(stderr(&out).contains("--yes"), "{}", stderr(&out));
    let runs = sandbox.home.join("workflows/runs");
    let started = std::fs::read_dir(&runs).map(|d| d.count()).unwrap_or(0);
    assert_eq!(started, 0, "no run may be created without consent");
}

#[test]
fn doctor_reports_every_planner_protection_applied() {
    let sandbox = Sandbox::new();
    let out = sandbox.run(&["doctor"]);
    let text = stdout(&out);
    // Only the kernel can say whether it has Landlock (securityfs is often not mounted):
    // doctor's own report is the evidence.
    if let Some(line) = text
        .lines()
        .find(|l| l.trim_start().starts_with("landlock") && l.contains("MISSING"))
    {
        skip_or_fail(
            "doctor_reports_every_planner_protection_applied",
            &format!("this kernel cannot apply Landlock: {}", line.trim()),
        );
        return;
    }
    assert_eq!(out.status.code(), Some(0), "{text}\n{}", stderr(&out));
    for protection in [
        "parent_death_signal",
        "close_fds",
        "empty_environment",
        "rlimits",
        "no_new_privs",
        "capabilities",
        "landlock",
        "seccomp",
    ] {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(protection))
            .unwrap_or_else(|| panic!("no line for {protection}:\n{text}"));
        assert!(line.contains("applied"), "{line}");
        assert!(!line.contains("missing"), "{line}");
    }
    assert!(text.contains("refused"), "{text}");
}

#[test]
fn list_shows_plans_and_runs_newest_first_unless_one_kind_is_asked_for() {
    let sandbox = Sandbox::new();
    hello_workspace(&sandbox);
    let out = sandbox.run(&[
        "workflow",
        "run",
        ".rho/workflows/hello/workflow.star",
        "--yes",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // Rho 1.47's document: `plans` and `runs`, each newest first.
    let listed = sandbox.run(&["workflow", "list", "--json"]);
    assert_eq!(listed.status.code(), Some(0), "{}", stderr(&listed));
    let doc: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("json");
    let plans = doc["plans"].as_array().expect("plans");
    let runs = doc["runs"].as_array().expect("runs");
    assert_eq!((plans.len(), runs.len()), (1, 1), "{doc}");
    assert_eq!(runs[0]["lifecycle"], "completed");
    assert_eq!(runs[0]["plan_id"], plans[0]["id"], "the run is of the plan");
    assert!(
        runs[0]["created_at_unix_nanos"].as_u64() >= plans[0]["created_at_unix_nanos"].as_u64(),
        "the run was created after its plan: {doc}"
    );

    let text = stdout(&sandbox.run(&["workflow", "list"]));
    assert!(
        text.contains("PLAN_ID") && text.contains("RUN_ID"),
        "{text}"
    );

    for (flag, plans, runs) in [("--plans", 1, 0), ("--runs", 0, 1)] {
        let only = sandbox.run(&["workflow", "list", flag, "--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&only.stdout).expect("json");
        assert_eq!(
            doc["plans"].as_array().map(Vec::len),
            Some(plans),
            "{flag}: {doc}"
        );
        assert_eq!(
            doc["runs"].as_array().map(Vec::len),
            Some(runs),
            "{flag}: {doc}"
        );
    }
}
