//! End to end, daily use through the built binary: output of failed nodes and `logs`, running
//! workflows by name, workspace discovery, `show` and the confirmation's "show" answer, one
//! output convention, typed inputs, `delete`/`prune` consent, plan reuse, plan-time format
//! checks, error locations, the end-of-run table and the live view (on a pseudo-terminal),
//! and `new`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

use std::os::unix::fs::PermissionsExt as _;
use std::process::{Output, Stdio};

mod run_support;
use run_support::{Env, Terminal, code, node, rho_command, text};

fn workflow(nodes: &[String]) -> String {
    format!(
        "def build(inputs):\n    return workflow(name = \"t\", nodes = [{}])\n\nWORKFLOW = define(inputs = {{}}, build = build)\n",
        nodes.join(", ")
    )
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn run_id(out: &Output) -> String {
    stdout(out)
        .lines()
        .find_map(|l| l.strip_prefix("run_id: "))
        .unwrap_or_else(|| panic!("no run_id in {}", text(out)))
        .to_owned()
}

/// Item 1: a failed node's output tail is printed with the failure; `logs` shows whole
/// streams, one stream, an attempt, JSON, and follows a running run; a stream over its bound
/// keeps head and tail.
#[test]
fn failed_node_output_is_shown_and_logs_reads_every_stream() {
    let env = Env::new();
    env.write(
        "wf.star",
        &workflow(&[
            node(
                "lint",
                "",
                r#"["sh", "-c", "echo checking; echo 'src/a.rs:3: unused variable' >&2; exit 1"]"#,
            ),
            "command(name = \"noisy\", argv = [\"sh\", \"-c\", \"seq 1 5000; echo the-end\"], timeout_seconds = 60, max_output_bytes = 1000)"
                .to_owned(),
        ]),
    );
    let out = env.rho(&["workflow", "run", "wf.star", "--yes"]);
    assert_eq!(code(&out), 3, "{}", text(&out));
    let shown = stdout(&out);
    assert!(
        shown.contains("finished lint (attempt 1): failure: exited with code 1"),
        "{shown}"
    );
    assert!(shown.contains("  stderr of lint (last 1 line):"), "{shown}");
    assert!(shown.contains("  | src/a.rs:3: unused variable"), "{shown}");
    assert!(shown.contains("  | checking"), "{shown}");
    let id = run_id(&out);
    assert!(
        shown.contains(&format!("full output: rho workflow logs {}", &id[..8])),
        "{shown}"
    );

    let logs = env.rho(&["workflow", "logs", &id[..8], "lint"]);
    assert_eq!(code(&logs), 0, "{}", text(&logs));
    assert_eq!(
        stdout(&logs),
        "==> lint (attempt 1) stdout <==\nchecking\n==> lint (attempt 1) stderr <==\nsrc/a.rs:3: unused variable\n"
    );
    let raw = env.rho(&["workflow", "logs", &id, "lint", "--stream", "stderr"]);
    assert_eq!(stdout(&raw), "src/a.rs:3: unused variable\n");
    let json = env.rho(&["workflow", "logs", &id, "--output", "json"]);
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(doc["run_id"], id.as_str());
    assert_eq!(doc["logs"].as_array().unwrap().len(), 4, "{doc}");
    let bad = env.rho(&["workflow", "logs", &id, "lint", "--attempt", "2"]);
    assert_eq!(code(&bad), 2);
    assert!(
        stderr(&bad).contains("node `lint` has no attempt 2; its attempts: 1"),
        "{}",
        text(&bad)
    );
    let bad = env.rho(&["workflow", "logs", &id, "lnt"]);
    assert_eq!(code(&bad), 2);
    assert!(
        stderr(&bad).contains("its nodes: lint, noisy"),
        "{}",
        text(&bad)
    );

    // Over the bound: the head and the tail are kept and the gap is marked.
    let noisy = stdout(&env.rho(&["workflow", "logs", &id, "noisy", "--stream", "stdout"]));
    assert!(noisy.starts_with("1\n2\n3\n"), "{noisy}");
    assert!(noisy.ends_with("5000\nthe-end\n"), "{noisy}");
    assert!(noisy.contains(" bytes omitted ...]"), "{noisy}");
    assert!(noisy.len() <= 1000, "{} bytes", noisy.len());

    // --follow prints output while the run goes on and returns when it ends.
    env.write(
        "slow.star",
        &workflow(&[node(
            "slow",
            "",
            r#"["sh", "-c", "echo first; sleep 1; echo second"]"#,
        )]),
    );
    let mut owner = env
        .command(&["workflow", "run", "slow.star", "--yes"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let runs = env.home.join("workflows/runs");
    let deadline = std::time::Instant::now() + std::time::Duration::from_mins(1);
    let slow_id = loop {
        let found = env
            .run_ids()
            .into_iter()
            .find(|r| r != &id && runs.join(r).join("state.json").exists());
        if let Some(found) = found {
            break found;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the run never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let followed = env.rho(&["workflow", "logs", &slow_id, "slow", "--follow"]);
    assert_eq!(code(&followed), 0, "{}", text(&followed));
    assert_eq!(stdout(&followed), "stdout | first\nstdout | second\n");
    assert!(owner.wait().unwrap().success());
}

/// Item 2: a workflow runs (validates, plans, draws) by its name; mistakes get "not found"
/// with suggestions; `list` shows the workspace's workflows.
#[test]
fn workflows_run_by_name_and_mistakes_get_suggestions() {
    let env = Env::new();
    env.write(
        ".rho/workflows/ci/workflow.star",
        &workflow(&[node("a", "", r#"["true"]"#)]),
    );
    env.write(
        ".rho/workflows/release.star",
        &workflow(&[node("b", "", r#"["true"]"#)]),
    );
    for args in [
        vec!["workflow", "validate", "ci"],
        vec!["workflow", "plan", "ci"],
        vec!["workflow", "graph", "ci"],
        vec!["workflow", "show", "release"],
    ] {
        let out = env.rho(&args);
        assert_eq!(code(&out), 0, "{args:?}: {}", text(&out));
    }
    let out = env.rho(&["workflow", "run", "ci", "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));

    let out = env.rho(&["workflow", "run", "cj", "--yes"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(
        stderr(&out).contains("workflow `cj` not found")
            && stderr(&out).contains("did you mean ci?"),
        "{}",
        text(&out)
    );
    let out = env.rho(&["workflow", "run", ".rho/workflows/ci", "--yes"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(
        stderr(&out).contains("it is a directory, not a workflow file")
            && stderr(&out).contains(".rho/workflows/ci/workflow.star"),
        "{}",
        text(&out)
    );
    let out = env.rho(&["workflow", "validate", ".rho/workflows/relase.star"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("did you mean .rho/workflows/release.star?"),
        "{}",
        text(&out)
    );
    assert!(!stderr(&out).contains("not a plan id"), "{}", text(&out));

    let out = env.rho(&["workflow", "list"]);
    assert_eq!(code(&out), 0);
    let listed = stdout(&out);
    assert!(listed.contains("WORKFLOW"), "{listed}");
    assert!(
        listed
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["ci", ".rho/workflows/ci/workflow.star"]),
        "{listed}"
    );
    let out = env.rho(&["workflow", "list", "--workflows", "--output", "json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Rho's two sections stay (empty when filtered out); the workflows are beside them.
    assert_eq!(doc["plans"], serde_json::json!([]), "{doc}");
    assert_eq!(doc["runs"], serde_json::json!([]), "{doc}");
    assert_eq!(doc["workflows"][0]["name"], "ci", "{doc}");
    assert_eq!(
        doc["workflows"][1]["path"], ".rho/workflows/release.star",
        "{doc}"
    );
}

/// Item 3: from a subdirectory, the workspace is the nearest ancestor holding `.rho/`, else
/// the git repository's root; rho says which one it uses.
#[test]
fn the_workspace_is_found_from_a_subdirectory() {
    let env = Env::new();
    env.write(
        ".rho/workflows/ci/workflow.star",
        &workflow(&[node("a", "", r#"["sh", "-c", "pwd"]"#)]),
    );
    let sub = env.ws.join("src/deep");
    std::fs::create_dir_all(&sub).unwrap();
    let out = rho_command(&env.home, &sub, &["workflow", "run", "ci", "--yes"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(
        stderr(&out).contains(&format!(
            "note: using workspace {} (it holds .rho/)",
            env.ws.display()
        )),
        "{}",
        text(&out)
    );
    let id = run_id(&out);
    // The node ran in the workspace root (cwd "."), and the run belongs to it.
    let logs = env.rho(&["workflow", "logs", &id, "a", "--stream", "stdout"]);
    assert_eq!(stdout(&logs).trim(), env.ws.display().to_string());
    let listed = env.rho(&["workflow", "list", "--runs"]);
    assert!(stdout(&listed).contains(&id), "{}", text(&listed));
    // A file relative to the subdirectory works too.
    std::fs::write(
        sub.join("local.star"),
        workflow(&[node("b", "", r#"["true"]"#)]),
    )
    .unwrap();
    let out = rho_command(&env.home, &sub, &["workflow", "validate", "local.star"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));

    // Without .rho/, the git repository's root.
    let repo = env.ws.join("elsewhere/repo");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    std::fs::create_dir_all(repo.join("pkg")).unwrap();
    std::fs::write(
        repo.join("w.star"),
        workflow(&[node("c", "", r#"["true"]"#)]),
    )
    .unwrap();
    let out = rho_command(
        &env.home,
        &repo.join("pkg"),
        &["workflow", "validate", "../w.star"],
    )
    .output()
    .unwrap();
    // The .rho/ of the enclosing directory wins over the repository: it is nearer upwards.
    assert!(stderr(&out).contains("holds .rho/"), "{}", text(&out));
    std::fs::remove_dir_all(env.ws.join(".rho")).unwrap();
    let out = rho_command(
        &env.home,
        &repo.join("pkg"),
        &["workflow", "validate", "../w.star"],
    )
    .output()
    .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(
        stderr(&out).contains(&format!(
            "using workspace {} (the git repository root",
            repo.display()
        )),
        "{}",
        text(&out)
    );
}

/// Item 4: `show` says what a digest covers, and the terminal confirmation offers it.
#[test]
fn show_describes_the_plan_and_the_prompt_offers_it() {
    let env = Env::new();
    env.write(
        "wf.star",
        &workflow(&[
            node("a", "", r#"["sh", "-c", "exit 0"]"#),
            node(
                "b",
                ", needs = [\"a\"], when = condition.equals(exit_code(\"a\"), 0)",
                r#"["true"]"#,
            ),
        ]),
    );
    let plan = env.plan("wf.star");
    let out = env.rho(&["workflow", "show", &plan[..8]]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let shown = stdout(&out);
    for needle in [
        &format!("plan {plan}: workflow `t` (2 nodes)") as &str,
        "program_digest: sha256:",
        "  a (command, mutating, timeout 60s, keeps 4096 bytes per stream)",
        "    argv: sh -c \"exit 0\"",
        "    executable: /usr/bin/dash (",
        "    cwd: .",
        "    needs: a",
        "    when: exit_code(\"a\") == 0",
        "sources:\n  //wf.star (",
    ] {
        assert!(shown.contains(needle), "missing {needle:?} in\n{shown}");
    }
    let json = env.rho(&["workflow", "show", &plan, "--output", "json"]);
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(doc["program"]["root"]["nodes"][0]["id"], "a");

    // A read-only node without network says so (shown from the file, planned only).
    env.write(
        "ro.star",
        &workflow(&[node(
            "r",
            ", access = \"read_only\", network = \"none\"",
            r#"["true"]"#,
        )]),
    );
    let out = env.rho(&["workflow", "show", "ro.star"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let shown = stdout(&out);
    assert!(
        shown.contains("  r (command, read-only, network none, timeout 60s,"),
        "{shown}"
    );
    assert!(
        shown.contains("scheduler: up to 4 nodes at once (4 agents, 4 commands)"),
        "{shown}"
    );

    let term = Terminal::spawn(env.command(&["workflow", "run", &plan]), 200);
    let asked = term.wait_for(0, "? [y/N/show] ");
    term.type_in("show\n");
    let described = term.wait_for(asked, "    when: exit_code(\"a\") == 0");
    term.wait_for(described, "? [y/N/show] ");
    term.type_in("y\n");
    let (status, all) = term.finish();
    assert_eq!(status.code(), Some(0), "{all}");
    assert!(all.contains("outcome success"), "{all}");
}

/// Item 5: one output convention: `--output text|json` everywhere, `--json` as an alias, a
/// text form for `cancel`, and JSON or annotations even for a bad `--input`.
#[test]
fn every_command_follows_one_output_convention() {
    let env = Env::new();
    env.write("wf.star", &workflow(&[node("a", "", r#"["true"]"#)]));
    let plan = env.plan("wf.star");
    let out = env.rho(&["workflow", "run", &plan, "-y"]);
    let id = run_id(&out);
    for args in [
        vec!["workflow", "list", "--json"],
        vec!["workflow", "list", "--output", "json"],
        vec!["workflow", "status", &id, "--json"],
        vec!["workflow", "plan", "wf.star", "--json"],
        vec!["workflow", "validate", "wf.star", "--json"],
        vec!["workflow", "show", &plan, "--json"],
        vec!["workflow", "cancel", &id, "--output", "json"],
    ] {
        let out = env.rho(&args);
        assert_eq!(code(&out), 0, "{args:?}: {}", text(&out));
        serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", text(&out)));
    }
    let out = env.rho(&["workflow", "cancel", &id, "--output", "text"]);
    assert_eq!(
        stdout(&out),
        format!("run {id} had already completed (lifecycle completed); nothing to cancel\n")
    );
    let out = env.rho(&["workflow", "run", &plan, "--json", "--yes"]);
    let last = stdout(&out).lines().last().unwrap().to_owned();
    let event: serde_json::Value = serde_json::from_str(&last).unwrap();
    assert_eq!(event["event"], "completed");

    let out = env.rho(&[
        "workflow", "validate", "wf.star", "--input", "Bad=1", "--output", "json",
    ]);
    assert_eq!(code(&out), 2);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["valid"], false);
    assert!(
        doc["diagnostics"][0]["message"]
            .as_str()
            .unwrap()
            .contains("`Bad` is not a valid input name"),
        "{doc}"
    );
    let out = env.rho(&[
        "workflow", "plan", "wf.star", "--input", "x", "--output", "json",
    ]);
    assert_eq!(code(&out), 2);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["planned"], false);
    let out = env.rho(&[
        "workflow", "validate", "wf.star", "--input", "x", "--output", "github",
    ]);
    assert_eq!(code(&out), 2);
    assert!(
        stdout(&out).starts_with("::error file=wf.star::--input `x`: expected KEY=VALUE"),
        "{}",
        text(&out)
    );
}

/// Item 6: inputs are read by their declared type, JSON still works, errors name the input
/// and its type.
#[test]
fn inputs_are_read_by_their_declared_type() {
    let env = Env::new();
    env.write(
        "wf.star",
        "def build(inputs):\n    return workflow(name = \"t\", nodes = [command(name = \"a\", argv = [\"echo\", inputs[\"version\"]], timeout_seconds = 60, max_output_bytes = 4096)])\n\nWORKFLOW = define(inputs = {\"version\": input.string(), \"jobs\": input.integer(default = 1), \"mode\": input.enum([\"fast\", \"full\"], default = \"fast\")}, build = build)\n",
    );
    let ok = |args: &[&str]| {
        let mut all = vec!["workflow", "show", "wf.star"];
        all.extend_from_slice(args);
        let out = env.rho(&all);
        assert_eq!(code(&out), 0, "{args:?}: {}", text(&out));
        stdout(&out)
    };
    let shown = ok(&[
        "--input",
        "version=1.2.0",
        "--input",
        "jobs=4",
        "--input",
        "mode=full",
    ]);
    assert!(shown.contains("  version = \"1.2.0\" (string)"), "{shown}");
    assert!(shown.contains("  jobs = 4 (integer, default 1)"), "{shown}");
    assert!(shown.contains("  mode = \"full\""), "{shown}");
    // A number given to a string input is the text, as typed.
    let shown = ok(&["--input", "version=2"]);
    assert!(shown.contains("  version = \"2\" (string)"), "{shown}");
    // JSON still works.
    let shown = ok(&["--input", "version=\"3.0\"", "--input", "jobs=7"]);
    assert!(shown.contains("  version = \"3.0\""), "{shown}");

    let out = env.rho(&[
        "workflow",
        "validate",
        "wf.star",
        "--input",
        "version=1",
        "--input",
        "jobs=many",
    ]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(
        stderr(&out).contains("input \"jobs\"") && stderr(&out).contains("integer"),
        "{}",
        text(&out)
    );
    let out = env.rho(&[
        "workflow",
        "run",
        "wf.star",
        "--yes",
        "--input",
        "version=1.2.0",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
}

/// Item 7: `delete` asks on a terminal, needs `--yes` otherwise, and says "no plan or run
/// matches" for an unknown id.
#[test]
fn delete_needs_consent_and_names_unknown_ids() {
    let env = Env::new();
    env.write("wf.star", &workflow(&[node("a", "", r#"["true"]"#)]));
    let plan = env.plan("wf.star");
    let out = env.rho(&["workflow", "delete", &plan]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("needs confirmation"),
        "{}",
        text(&out)
    );
    assert!(stderr(&out).contains("pass --yes"), "{}", text(&out));
    assert!(env.home.join("workflows/plans").join(&plan).exists());

    let out = env.rho(&["workflow", "delete", "0123abcd", "--yes"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("no plan or run matches `0123abcd`"),
        "{}",
        text(&out)
    );

    // On a terminal: "n" keeps it, "y" deletes it.
    let term = Terminal::spawn(env.command(&["workflow", "delete", &plan]), 120);
    term.wait_for(0, &format!("Delete plan {plan}? [y/N] "));
    term.type_in("n\n");
    let (status, all) = term.finish();
    assert_eq!(status.code(), Some(2), "{all}");
    assert!(env.home.join("workflows/plans").join(&plan).exists());
    let term = Terminal::spawn(env.command(&["workflow", "delete", &plan]), 120);
    term.wait_for(0, "[y/N] ");
    term.type_in("y\n");
    let (status, all) = term.finish();
    assert_eq!(status.code(), Some(0), "{all}");
    assert!(!env.home.join("workflows/plans").join(&plan).exists());
}

/// Item 8: planning the same sources and inputs again reuses the stored plan; `prune`
/// removes finished runs and unreferenced plans by count or age.
#[test]
fn identical_plans_are_reused_and_prune_removes_old_entries() {
    let env = Env::new();
    env.write("wf.star", &workflow(&[node("a", "", r#"["true"]"#)]));
    let first = env.plan("wf.star");
    let again = env.rho(&["workflow", "plan", "wf.star"]);
    assert!(
        stdout(&again).contains(&format!("plan_id: {first}")),
        "{}",
        text(&again)
    );
    assert!(stdout(&again).contains("reused: "), "{}", text(&again));
    let plans = || {
        std::fs::read_dir(env.home.join("workflows/plans"))
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .count()
    };
    assert_eq!(plans(), 1);
    env.write("wf.star", &workflow(&[node("b", "", r#"["true"]"#)]));
    let second = env.plan("wf.star");
    assert_ne!(second, first);
    for _ in 0..3 {
        assert_eq!(code(&env.rho(&["workflow", "run", &second, "--yes"])), 0);
    }
    assert_eq!(env.run_ids().len(), 3);

    let out = env.rho(&["workflow", "prune"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("--older-than"), "{}", text(&out));
    let out = env.rho(&["workflow", "prune", "--keep", "1"]);
    assert_eq!(code(&out), 2, "no terminal, no --yes: {}", text(&out));
    let out = env.rho(&["workflow", "prune", "--keep", "1", "--dry-run"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(
        stdout(&out).matches("would remove run ").count(),
        2,
        "{}",
        text(&out)
    );
    assert_eq!(env.run_ids().len(), 3);
    let out = env.rho(&["workflow", "prune", "--keep", "1", "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(
        stdout(&out).matches("removed run ").count(),
        2,
        "{}",
        text(&out)
    );
    // The first plan has no run: it goes only when beyond the newest one kept.
    assert_eq!(env.run_ids().len(), 1);
    let out = env.rho(&["workflow", "prune", "--older-than", "0s", "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(env.run_ids().is_empty());
    assert_eq!(plans(), 0, "{}", text(&out));
    let out = env.rho(&["workflow", "prune", "--older-than", "7x"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("the unit must be"), "{}", text(&out));
}

/// Item 9: a script without `#!` or an unknown binary format fails when planning, with a
/// hint, not when the run starts it.
#[test]
fn executables_of_unknown_format_fail_at_plan_time() {
    let env = Env::new();
    for (name, body) in [("noshebang", "echo hi\n"), ("garbage", "\u{1}\u{2}binary")] {
        env.write(name, body);
        std::fs::set_permissions(env.ws.join(name), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        env.write(
            "wf.star",
            &workflow(&[node("a", "", &format!("[\"./{name}\"]"))]),
        );
        let out = env.rho(&["workflow", "plan", "wf.star"]);
        assert_eq!(code(&out), 2, "{}", text(&out));
        assert!(
            stderr(&out)
                .contains("is neither a native executable (ELF) nor a script starting with `#!`")
                && stderr(&out).contains("#!/bin/sh"),
            "{}",
            text(&out)
        );
        assert!(env.run_ids().is_empty());
    }
}

/// Item 10: text diagnostics show the source line and a caret and the helper's call site;
/// a misspelt builtin parameter lists the valid ones; clap suggests flags; `-y` is `--yes`
/// (used throughout this file).
#[test]
fn errors_show_the_source_line_with_a_caret_and_flags_get_suggestions() {
    let env = Env::new();
    env.write(
        "lib.star",
        "def check(n):\n    if n > 1:\n        fail(\"too many: \" + str(n))\n    return n\n",
    );
    env.write(
        "wf.star",
        "load(\"//lib.star\", \"check\")\n\ndef build(inputs):\n    check(2)\n    return workflow(name = \"t\", nodes = [])\n\nWORKFLOW = define(inputs = {}, build = build)\n",
    );
    let out = env.rho(&["workflow", "validate", "wf.star"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    let err = stderr(&out);
    assert!(err.contains("too many: 2"), "{err}");
    assert!(
        err.contains(" 3 |         fail(\"too many: \" + str(n))\n   |         ^"),
        "{err}"
    );
    // The helper's caller in the workflow file is named too.
    assert!(
        err.contains("call stack, innermost first: `check` called at wf.star:4:5"),
        "{err}"
    );

    // A misspelt parameter of a builtin lists the valid ones and the closest.
    env.write(
        "typo.star",
        &workflow(&[r#"command(name = "a", argv = ["true"], timout_seconds = 5)"#.to_owned()]),
    );
    let out = env.rho(&["workflow", "validate", "typo.star"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("`command` accepts name, argv, cwd, needs, when,")
            && err.contains("did you mean `timeout_seconds` for `timout_seconds`?"),
        "{err}"
    );

    let out = env.rho(&["workflow", "run", "wf.star", "--yess"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("--yes"), "{}", text(&out));
    assert!(
        stderr(&out).to_lowercase().contains("similar"),
        "{}",
        text(&out)
    );
}

/// Item 11: the end of a run is a table of nodes and artifacts with short digests (full in
/// JSON); coloured on a terminal unless `NO_COLOR` is set. The live view shows the running
/// node's latest output line.
#[test]
fn end_of_run_table_and_live_view_on_a_terminal() {
    let env = Env::new();
    env.write(
        "wf.star",
        &workflow(&[
            node("build", "", r#"["sh", "-c", "echo built"]"#),
            // Sorts before the node it needs: the table still lists it after `build`.
            node(
                "after",
                ", needs = [\"build\"]",
                r#"["sh", "-c", "echo live-progress-marker; sleep 2; echo done"]"#,
            ),
            node("lint", ", allow_failure = True", r#"["false"]"#),
            node(
                "never",
                ", needs = [\"lint\"], allow_failure = True",
                r#"["true"]"#,
            ),
        ]),
    );
    let out = env.rho(&["workflow", "run", "wf.star", "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let shown = stdout(&out);
    let row = |name: &str| {
        shown
            .lines()
            .find(|l| {
                let mut words = l.split_whitespace();
                matches!(words.next(), Some("✓" | "✗" | "–")) && words.next() == Some(name)
            })
            .unwrap_or_else(|| panic!("no row for {name} in\n{shown}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(&row("build")[..4], ["✓", "build", "success", "#1"]);
    assert_eq!(&row("lint")[..4], ["✗", "lint", "failure", "#1"]);
    assert_eq!(&row("never")[..4], ["–", "never", "blocked", "-"]);
    assert!(row("build")[4].ends_with('s'), "a duration: {shown}");
    let rows: Vec<&str> = shown
        .lines()
        .filter(|l| l.starts_with(['✓', '✗', '–']))
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert_eq!(
        rows,
        ["build", "after", "lint", "never"],
        "needs first: {shown}"
    );
    let artifact = shown
        .lines()
        .find(|l| l.starts_with("  build: nodes/build/attempts/1/stdout"))
        .unwrap_or_else(|| panic!("no artifact line in\n{shown}"));
    let digest = artifact.rsplit(" · ").next().unwrap();
    assert_eq!(digest.len(), "sha256:".len() + 12, "{artifact}");
    assert!(shown.contains("artifacts (in "), "{shown}");
    assert!(
        !shown.contains('\u{1b}'),
        "no colour without a terminal: {shown:?}"
    );
    let id = run_id(&out);
    let status = env.rho(&["workflow", "status", &id, "--output", "json"]);
    let full = serde_json::from_slice::<serde_json::Value>(&status.stdout).unwrap()["state"]
        ["scopes"]["s0"]["tasks"]["build"]["attempts"][0]["stdout"]["sha256"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(full.starts_with(digest) && full.len() == 71, "{full}");

    let term = Terminal::spawn(env.command(&["workflow", "run", "wf.star", "--yes"]), 160);
    let at = term.wait_for(0, "running: after · after: live-progress-marker");
    term.wait_for(at, "outcome success");
    let (status, all) = term.finish();
    assert_eq!(status.code(), Some(0), "{all}");
    assert!(
        all.contains("\u{1b}[32m✓\u{1b}[0m build"),
        "colour on a terminal: {all:?}"
    );

    let mut cmd = env.command(&["workflow", "run", "wf.star", "--yes"]);
    cmd.env("NO_COLOR", "1");
    let (status, all) = Terminal::spawn(cmd, 160).finish();
    assert_eq!(status.code(), Some(0), "{all}");
    assert!(all.contains("✓ build"), "{all:?}");
    assert!(!all.contains("\u{1b}[32m"), "NO_COLOR: {all:?}");
}

/// Item 12: `new` writes a commented starter that plans and runs as is, and never
/// overwrites.
#[test]
fn new_writes_a_starter_that_runs() {
    let env = Env::new();
    let out = env.rho(&["workflow", "new", "demo"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(
        stdout(&out).starts_with("wrote .rho/workflows/demo/workflow.star\n"),
        "{}",
        text(&out)
    );
    let source = std::fs::read_to_string(env.ws.join(".rho/workflows/demo/workflow.star")).unwrap();
    assert!(
        source
            .lines()
            .filter(|l| l.trim_start().starts_with('#'))
            .count()
            > 10
    );
    let out = env.rho(&["workflow", "validate", "demo"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let out = env.rho(&["workflow", "run", "demo", "--yes", "--input", "who=tester"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let logs = env.rho(&[
        "workflow",
        "logs",
        &run_id(&out),
        "greet",
        "--stream",
        "stdout",
    ]);
    assert_eq!(stdout(&logs), "hello from demo: tester\n");
    let out = env.rho(&["workflow", "new", "demo"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("already exists"), "{}", text(&out));
    let out = env.rho(&["workflow", "new", "Bad Name"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("Bad Name"), "{}", text(&out));
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    assert!(
        readme.contains("(docs/language.md)"),
        "README links the reference"
    );
    let reference =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/language.md"))
            .unwrap();
    for builtin in [
        "define(",
        "workflow(",
        "input.string(",
        "input.integer(",
        "input.bool(",
        "input.enum(",
        "command(",
        "shell(",
        "agent(",
        "template(",
        "output(",
        "status(",
        "exit_code(",
        "condition.equals(",
        "condition.is_one_of(",
        "condition.all(",
        "condition.any(",
        "condition.not_(",
        "schema.null(",
        "schema.bool(",
        "schema.integer(",
        "schema.string(",
        "schema.enum(",
        "schema.list(",
        "schema.record(",
        "schema.optional(",
        "schema.stdout_json(",
        "load(",
    ] {
        assert!(
            reference.contains(builtin),
            "the reference documents {builtin}"
        );
    }
}

/// Item 14: `agents validate` exits 2 for an invalid definition file.
#[test]
fn agents_validate_exits_2_for_invalid_files() {
    let env = Env::new();
    env.write("bad.md", "---\nname: x\nunknown_key: 1\n---\nbody\n");
    let out = env.rho(&["agents", "validate", "bad.md"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
}
