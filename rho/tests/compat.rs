//! The Rho 1.47 compatibility corpus (`tests/compat/`), run through the built binaries.
//!
//! `cases.json` lists one case per compatibility rule: the workflow or agent files it uses,
//! the command (`validate`, `plan`, `agents_validate`, `agents_list`, `same_fingerprint`),
//! the Rho behaviour it mirrors and the result expected (exit code, text on stdout and
//! stderr, values at JSON pointers of the plan document). The corpus is written here, not
//! copied from Rho. `golden/` holds the shapes of Rho's machine-readable documents, checked
//! key by key against a real plan, run, list, status, cancel and resume; our own keys beside
//! Rho's are allowed. The root options are checked in root position.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod plan_support;

use std::path::{Path, PathBuf};

use plan_support::{Env, Run};
use serde_json::Value;

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/compat")
}

fn read_json(rel: &str) -> Value {
    let path = corpus().join(rel);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn corpus_text(rel: &str) -> String {
    std::fs::read_to_string(corpus().join(rel)).unwrap()
}

/// Checks `actual` against the shape `expected`: objects key by key (extra keys in `actual`
/// are ours and allowed), arrays element by element, `"<type>"` markers by JSON type
/// (`<string>`, `<integer>`, `<bool>`, `<null>`, `<array>`, `<object>`, `<any>`, and
/// alternatives such as `<object|null>`), anything else by equality.
fn check_shape(expected: &Value, actual: &Value, path: &str, failures: &mut Vec<String>) {
    match expected {
        Value::String(marker) if marker.starts_with('<') && marker.ends_with('>') => {
            let ok = marker[1..marker.len() - 1]
                .split('|')
                .any(|kind| match kind {
                    "string" => actual.is_string(),
                    "integer" => actual.is_i64() || actual.is_u64(),
                    "bool" => actual.is_boolean(),
                    "null" => actual.is_null(),
                    "array" => actual.is_array(),
                    "object" => actual.is_object(),
                    "any" => true,
                    other => panic!("unknown marker <{other}> at {path}"),
                });
            if !ok {
                failures.push(format!("{path}: expected {marker}, found {actual}"));
            }
        }
        Value::Object(fields) => {
            let Some(object) = actual.as_object() else {
                failures.push(format!("{path}: expected an object, found {actual}"));
                return;
            };
            for (key, shape) in fields {
                match object.get(key) {
                    Some(value) => check_shape(shape, value, &format!("{path}/{key}"), failures),
                    None => failures.push(format!("{path}: key `{key}` is missing")),
                }
            }
        }
        Value::Array(items) => {
            let Some(array) = actual.as_array() else {
                failures.push(format!("{path}: expected an array, found {actual}"));
                return;
            };
            if array.len() != items.len() {
                failures.push(format!(
                    "{path}: expected {} items, found {}: {actual}",
                    items.len(),
                    array.len()
                ));
                return;
            }
            for (i, (shape, value)) in items.iter().zip(array).enumerate() {
                check_shape(shape, value, &format!("{path}/{i}"), failures);
            }
        }
        literal => {
            if literal != actual {
                failures.push(format!("{path}: expected {literal}, found {actual}"));
            }
        }
    }
}

/// Puts a case's workflow at `.rho/workflows/<name>/workflow.star` (with its agents beside
/// it) and returns the path to pass to `rho`, after the case's setup (symbolic links).
fn place_workflow(env: &Env, case: &Value, name: &str) -> String {
    let dir = format!(".rho/workflows/{name}");
    let file = format!("{dir}/workflow.star");
    env.write(&file, &corpus_text(case["workflow"].as_str().unwrap()));
    for agent in case["agents"].as_array().into_iter().flatten() {
        let rel = agent.as_str().unwrap();
        let file_name = Path::new(rel).file_name().unwrap().to_str().unwrap();
        env.write(&format!("{dir}/agents/{file_name}"), &corpus_text(rel));
    }
    match case["setup"].as_str() {
        None => file,
        Some("entry_symlink") => {
            let link = format!("{dir}/linked.star");
            std::os::unix::fs::symlink("workflow.star", env.ws.join(&link)).unwrap();
            link
        }
        Some("directory_symlink") => {
            let link = ".rho/workflows/linked";
            std::os::unix::fs::symlink(name, env.ws.join(link)).unwrap();
            format!("{link}/workflow.star")
        }
        Some(other) => panic!("unknown setup {other}"),
    }
}

fn agent_files(env: &Env, case: &Value) -> Vec<String> {
    case["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let rel = f.as_str().unwrap();
            env.write(rel, &corpus_text(rel));
            rel.to_owned()
        })
        .collect()
}

/// The fingerprint printed by `agents validate` for one file.
fn printed_fingerprint(run: &Run) -> Option<String> {
    run.stdout
        .split_whitespace()
        .find(|w| w.starts_with("sha256:"))
        .map(|w| w.trim_end_matches(')').to_owned())
}

/// Runs one case; returns its failures.
fn run_case(case: &Value) -> Vec<String> {
    let name = case["name"].as_str().unwrap();
    let env = Env::new();
    let expect = &case["expect"];
    let mut failures = Vec::new();
    let run = match case["command"].as_str().unwrap() {
        command @ ("validate" | "plan") => {
            let file = place_workflow(&env, case, name);
            let mut args = vec!["workflow", command, file.as_str()];
            let inputs: Vec<String> = case["inputs"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|i| i.as_str().unwrap().to_owned())
                .collect();
            for input in &inputs {
                args.extend(["--input", input.as_str()]);
            }
            if command == "plan" {
                args.extend(["--output", "json"]);
            }
            env.rho(&args)
        }
        "agents_validate" => {
            let files = agent_files(&env, case);
            let mut args = vec!["agents", "validate"];
            args.extend(files.iter().map(String::as_str));
            env.rho(&args)
        }
        "agents_list" => {
            for agent in case["agents"].as_array().unwrap() {
                let rel = agent.as_str().unwrap();
                let file_name = Path::new(rel).file_name().unwrap().to_str().unwrap();
                env.write(&format!("flow/agents/{file_name}"), &corpus_text(rel));
            }
            env.rho(&["agents", "list", "--workflow-dir", "flow"])
        }
        "same_fingerprint" => {
            let files = agent_files(&env, case);
            let mut prints = Vec::new();
            for file in &files {
                let run = env.rho(&["agents", "validate", file]);
                if run.code != 0 {
                    failures.push(format!("{file}: exit {}: {}", run.code, run.stderr));
                }
                prints.push((file.clone(), printed_fingerprint(&run)));
            }
            let first = &prints[0].1;
            if first.is_none() {
                failures.push(format!("no fingerprint printed for {}", prints[0].0));
            }
            for (file, print) in &prints[1..] {
                if print != first {
                    failures.push(format!(
                        "{file}: fingerprint {print:?} differs from {}'s {first:?}",
                        prints[0].0
                    ));
                }
            }
            return failures
                .into_iter()
                .map(|f| format!("{name}: {f}"))
                .collect();
        }
        other => panic!("{name}: unknown command {other}"),
    };
    let code = expect["exit"].as_i64().unwrap();
    if i64::from(run.code) != code {
        failures.push(format!(
            "exit {} (expected {code})\nstdout: {}\nstderr: {}",
            run.code, run.stdout, run.stderr
        ));
    }
    for needle in expect["stdout"].as_array().into_iter().flatten() {
        let needle = needle.as_str().unwrap();
        if !run.stdout.contains(needle) {
            failures.push(format!("stdout lacks {needle:?}: {}", run.stdout));
        }
    }
    for needle in expect["stderr"].as_array().into_iter().flatten() {
        let needle = needle.as_str().unwrap();
        if !run.stderr.contains(needle) {
            failures.push(format!("stderr lacks {needle:?}: {}", run.stderr));
        }
    }
    if let Some(pointers) = expect["json"].as_object() {
        match serde_json::from_str::<Value>(&run.stdout) {
            Ok(doc) => {
                for (pointer, want) in pointers {
                    match doc.pointer(pointer) {
                        Some(found) if found == want => {}
                        found => {
                            failures.push(format!("{pointer}: expected {want}, found {found:?}"));
                        }
                    }
                }
            }
            Err(e) => failures.push(format!("stdout is not JSON ({e}): {}", run.stdout)),
        }
    }
    failures
        .into_iter()
        .map(|f| format!("{name}: {f}"))
        .collect()
}

#[test]
fn every_corpus_case_behaves_as_recorded() {
    let cases = read_json("cases.json");
    let cases = cases.as_array().unwrap();
    assert!(cases.len() >= 25, "the corpus lost cases");
    let mut failures = Vec::new();
    for case in cases {
        assert!(
            case["rho"].as_str().is_some_and(|r| !r.is_empty()),
            "{}: every case says which Rho behaviour it mirrors",
            case["name"]
        );
        failures.extend(run_case(case));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn every_corpus_file_is_used_by_a_case() {
    let cases = read_json("cases.json").to_string();
    for dir in ["workflows", "agents"] {
        for entry in std::fs::read_dir(corpus().join(dir)).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            // These two feed the document tests below, not cases.
            if name == "golden.star" || name == "resumable.star" {
                continue;
            }
            assert!(
                cases.contains(&format!("{dir}/{name}")),
                "{dir}/{name} is in the corpus but no case uses it"
            );
        }
    }
}

/// Plans, runs and inspects the golden workflow; returns the environment and the documents.
struct Golden {
    env: Env,
    plan: Value,
    events: Vec<Value>,
    list: Value,
    status: Value,
}

fn golden() -> Golden {
    let env = Env::new();
    let file = ".rho/workflows/golden/workflow.star";
    env.write(file, &corpus_text("workflows/golden.star"));
    let plan_run = env.rho(&["workflow", "plan", file, "--output", "json"]);
    assert_eq!(plan_run.code, 0, "{}", plan_run.stderr);
    let plan: Value = serde_json::from_str(&plan_run.stdout).unwrap();
    let plan_id = plan["manifest"]["plan_id"].as_str().unwrap().to_owned();
    let run = env.rho(&["workflow", "run", &plan_id, "--yes", "--output", "jsonl"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let events: Vec<Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let run_id = events[0]["run_id"].as_str().unwrap().to_owned();
    let list_run = env.rho(&["workflow", "list", "--json"]);
    assert_eq!(list_run.code, 0, "{}", list_run.stderr);
    let status_run = env.rho(&["workflow", "status", &run_id, "--output", "json"]);
    assert_eq!(status_run.code, 0, "{}", status_run.stderr);
    Golden {
        env,
        plan,
        events,
        list: serde_json::from_str(&list_run.stdout).unwrap(),
        status: serde_json::from_str(&status_run.stdout).unwrap(),
    }
}

/// Checks JSONL progress events against Rho's shapes (`shapes`: `every`, `types`) and one
/// run's expectations (`expected`: `required` types, `finished` outcome per node): sequences
/// count up from 1 and the last event is `completed`.
fn check_events(
    events: &[Value],
    shapes: &Value,
    expected: &Value,
    label: &str,
    failures: &mut Vec<String>,
) {
    let mut seen = std::collections::BTreeSet::new();
    for (i, event) in events.iter().enumerate() {
        let at = format!("{label} event {i}");
        check_shape(&shapes["every"], event, &at, failures);
        if event["sequence"] != i as u64 + 1 {
            failures.push(format!("{at}: sequence is not {}: {event}", i + 1));
        }
        let kind = event["type"].as_str().unwrap_or_default();
        match shapes["types"].get(kind) {
            Some(shape) => check_shape(shape, event, &at, failures),
            None => failures.push(format!("{at}: type {kind:?} is not one of Rho's")),
        }
        if kind == "node_finished" {
            let node = event["node"].as_str().unwrap_or_default();
            match expected["finished"].get(node) {
                Some(outcome) => {
                    check_shape(
                        outcome,
                        &event["outcome"],
                        &format!("{at} ({node})"),
                        failures,
                    );
                }
                None => failures.push(format!("{at}: unexpected node {node:?}")),
            }
        }
        seen.insert(kind.to_owned());
    }
    for required in expected["required"].as_array().unwrap() {
        if !seen.contains(required.as_str().unwrap()) {
            failures.push(format!("{label}: no {required} event in {events:?}"));
        }
    }
    if events.last().map(|e| &e["type"]) != Some(&Value::from("completed")) {
        failures.push(format!(
            "{label}: the last event is not `completed`: {events:?}"
        ));
    }
}

#[test]
fn machine_readable_documents_have_rhos_shape() {
    let g = golden();
    let mut failures = Vec::new();
    check_shape(
        &read_json("golden/plan.json"),
        &g.plan,
        "plan",
        &mut failures,
    );
    check_shape(
        &read_json("golden/list.json"),
        &g.list,
        "list",
        &mut failures,
    );
    check_shape(
        &read_json("golden/status.json"),
        &g.status,
        "status",
        &mut failures,
    );

    // Identities agree across documents.
    let plan_id = &g.plan["manifest"]["plan_id"];
    assert_eq!(&g.list["plans"][0]["id"], plan_id);
    assert_eq!(&g.status["run"]["manifest"]["plan_id"], plan_id);
    assert_eq!(
        g.plan["manifest"]["graph_digest"],
        g.plan["graph"]["graph_digest"]
    );
    assert_eq!(
        &g.list["runs"][0]["id"],
        &g.status["run"]["manifest"]["run_id"]
    );

    // Run events: every line has Rho's envelope, each type its keys, sequences count up.
    let shapes = read_json("golden/run-events.json");
    check_events(&g.events, &shapes, &shapes, "run", &mut failures);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    drop(g.env);
}

#[test]
fn list_keeps_both_sections_when_filtered() {
    let env = Env::new();
    let file = ".rho/workflows/golden/workflow.star";
    env.write(file, &corpus_text("workflows/golden.star"));
    env.plan_ok(file);
    for (flag, plans, runs) in [("--plans", 1, 0), ("--runs", 0, 0)] {
        let run = env.rho(&["workflow", "list", flag, "--json"]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let doc: Value = serde_json::from_str(&run.stdout).unwrap();
        assert_eq!(doc["plans"].as_array().map(Vec::len), Some(plans), "{flag}");
        assert_eq!(doc["runs"].as_array().map(Vec::len), Some(runs), "{flag}");
    }
}

#[test]
fn root_options_work_before_the_subcommand() {
    let env = Env::new();
    let file = ".rho/workflows/golden/workflow.star";
    env.write(file, &corpus_text("workflows/golden.star"));

    // Every Rho root option parses in root position.
    let run = env.rho(&[
        "--auth",
        "anthropic-api-key",
        "--provider",
        "anthropic",
        "--model",
        "claude-opus-4",
        "--reasoning",
        "high",
        "--agent",
        "reviewer",
        "--no-subagents",
        "workflow",
        "validate",
        file,
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);

    // --permission-mode before the subcommand selects the run's mode: `plan` denies the
    // mutating command nodes.
    let plan_id = env.plan_ok(file);
    let run = env.rho(&[
        "--permission-mode",
        "plan",
        "workflow",
        "run",
        &plan_id,
        "--yes",
        "--output",
        "jsonl",
    ]);
    assert_eq!(
        run.code, 4,
        "plan mode denies: {}\n{}",
        run.stdout, run.stderr
    );
    let last: Value = serde_json::from_str(run.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["permission_mode"], "plan", "{last}");
    assert_eq!(
        last["permission_mode_source"], "--permission-mode",
        "{last}"
    );

    // --config selects the configuration file: its permission mode applies.
    let config = env.write("custom.toml", "[behavior]\npermission_mode = \"plan\"\n");
    let run = env.rho(&[
        "--config",
        config.to_str().unwrap(),
        "workflow",
        "run",
        &plan_id,
        "--yes",
        "--output",
        "jsonl",
    ]);
    assert_eq!(run.code, 4, "{}\n{}", run.stdout, run.stderr);
    // A configuration file that does not parse is named.
    let broken = env.write("broken.toml", "[behavior\n");
    let run = env.rho(&[
        "--config",
        broken.to_str().unwrap(),
        "workflow",
        "validate",
        file,
    ]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("broken.toml"), "{}", run.stderr);

    // Bad values are usage errors naming the option.
    for (option, value) in [("--permission-mode", "yolo"), ("--reasoning", "extreme")] {
        let run = env.rho(&[option, value, "workflow", "list"]);
        assert_eq!(run.code, 2, "{option}: {}", run.stderr);
        assert!(run.stderr.contains(option), "{}", run.stderr);
    }
}

/// Parses JSONL progress output.
fn jsonl(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn cancel_and_resume_documents_have_rhos_shape() {
    let env = Env::new();
    let file = ".rho/workflows/resumable/workflow.star";
    env.write(file, &corpus_text("workflows/resumable.star"));
    let plan_id = env.plan_ok(file);

    // Start the run in the background and wait until `wait` has been launched.
    let owner = std::process::Command::new(plan_support::rho_bin())
        .args(["workflow", "run", &plan_id, "--yes", "--output", "jsonl"])
        .current_dir(&env.ws)
        .env_clear()
        .env("RHO_HOME", &env.home)
        .env("HOME", env.home.parent().unwrap())
        .env("PATH", "/usr/bin:/bin")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let runs = env.home.join("workflows/runs");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let run_id = loop {
        let launched = std::fs::read_dir(&runs).ok().and_then(|entries| {
            entries.filter_map(Result::ok).find(|e| {
                !e.file_name().to_string_lossy().starts_with('.')
                    && std::fs::read_to_string(e.path().join("events.jsonl"))
                        .unwrap_or_default()
                        .contains("\"launched\"")
            })
        });
        if let Some(entry) = launched
            && env.ws.join("resumed").exists()
        {
            break entry.file_name().to_string_lossy().into_owned();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the first node never launched"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };

    // `cancel` prints Rho's document.
    let cancel = env.rho(&["workflow", "cancel", &run_id]);
    assert_eq!(cancel.code, 0, "{}", cancel.stderr);
    let cancel_doc: Value = serde_json::from_str(&cancel.stdout).unwrap();
    let mut failures = Vec::new();
    check_shape(
        &read_json("golden/cancel.json"),
        &cancel_doc,
        "cancel",
        &mut failures,
    );
    assert_eq!(cancel_doc["run_id"], run_id.as_str());
    let owner = owner.wait_with_output().unwrap();
    assert_eq!(
        owner.status.code(),
        Some(5),
        "a cancelled run exits 5: {}",
        String::from_utf8_lossy(&owner.stderr)
    );
    // The cancelled run's own events keep Rho's envelope (it ends without `completed`).
    let shapes = read_json("golden/run-events.json");
    for (i, event) in jsonl(&String::from_utf8_lossy(&owner.stdout))
        .iter()
        .enumerate()
    {
        check_shape(
            &shapes["every"],
            event,
            &format!("cancelled run event {i}"),
            &mut failures,
        );
    }

    // `status` of the cancelled run: Rho's outcome.
    let status = env.rho(&["workflow", "status", &run_id, "--output", "json"]);
    assert_eq!(status.code, 0, "{}", status.stderr);
    let status_doc: Value = serde_json::from_str(&status.stdout).unwrap();
    assert_eq!(status_doc["outcome"], "cancellation", "{status_doc}");
    assert_eq!(status_doc["run"]["manifest"]["run_id"], run_id.as_str());

    // `resume --output jsonl` streams Rho's events for the same run, numbered from 1.
    let resume = env.rho(&["workflow", "resume", &run_id, "--yes", "--output", "jsonl"]);
    assert_eq!(resume.code, 0, "{}\n{}", resume.stdout, resume.stderr);
    let events = jsonl(&resume.stdout);
    check_events(
        &events,
        &shapes,
        &read_json("golden/resume-events.json"),
        "resume",
        &mut failures,
    );
    for event in &events {
        assert_eq!(event["run_id"], run_id.as_str(), "{event}");
    }
    let status = env.rho(&["workflow", "status", &run_id, "--output", "json"]);
    let status_doc: Value = serde_json::from_str(&status.stdout).unwrap();
    assert_eq!(status_doc["outcome"], "success", "{status_doc}");
    assert_eq!(
        status_doc["run"]["state"]["state"]["lifecycle"],
        "completed"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The instructions `rho ARGS` (an MCP server) answers `initialize` with.
fn mcp_instructions(env: &Env, args: &[&str]) -> String {
    use std::io::{BufRead as _, Write as _};
    let mut child = std::process::Command::new(plan_support::rho_bin())
        .args(args)
        .current_dir(&env.ws)
        .env_clear()
        .env("RHO_HOME", &env.home)
        .env("HOME", env.home.parent().unwrap())
        .env("PATH", "/usr/bin:/bin")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let initialize = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "rho-compat-test", "version": "0"},
        },
    });
    writeln!(stdin, "{initialize}").unwrap();
    stdin.flush().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let read = stdout.read_line(&mut line).unwrap();
    // Closing stdin ends the server.
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(read > 0, "rho mcp answered nothing (exit {status})");
    let answer: Value = serde_json::from_str(&line).unwrap();
    answer["result"]["instructions"]
        .as_str()
        .unwrap_or_else(|| panic!("no instructions in {answer}"))
        .to_owned()
}

#[test]
fn root_config_and_mode_reach_the_mcp_server() {
    let env = Env::new();
    let config = env.write("custom.toml", "[behavior]\npermission_mode = \"plan\"\n");
    let config = config.to_str().unwrap();
    assert!(mcp_instructions(&env, &["mcp"]).contains("Permission mode: bypass"));
    for args in [
        &["--config", config, "mcp"][..],
        &["mcp", "--config", config][..],
        &["--permission-mode", "plan", "mcp"][..],
    ] {
        let instructions = mcp_instructions(&env, args);
        assert!(
            instructions.contains("Permission mode: plan"),
            "{args:?}: {instructions}"
        );
    }
}
