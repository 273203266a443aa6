//! `validate` and `plan` end to end: determinism of `program_digest` across plans, data
//! directories and copied workspaces; `validate` storing nothing; the output formats.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod plan_support;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use plan_support::{Env, cmd, workflow};

fn digest_of(env: &Env, dir: &Path, file: &str) -> String {
    let run = env.rho_in(
        dir,
        &[
            "workflow",
            "plan",
            file,
            "--input",
            "who=\"you\"",
            "--output",
            "json",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let doc: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    doc["program_digest"].as_str().unwrap().to_owned()
}

fn rich_workspace(env: &Env) {
    env.write("lib/common.star", "def check(name, argv):\n    return command(name = name, argv = argv, timeout_seconds = 60, max_output_bytes = 4096)\n");
    env.write("bin/tool.sh", "#!/bin/sh\necho tool\n");
    std::fs::set_permissions(
        env.ws.join("bin/tool.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::create_dir_all(env.ws.join("sub")).unwrap();
    env.write(
        "flows/w.star",
        "load(\"//lib/common.star\", \"check\")\n\ndef build(inputs):\n    a = check(\"a\", [\"echo\", inputs[\"who\"]])\n    t = command(name = \"t\", argv = [\"bin/tool.sh\"], cwd = \"sub\", needs = [\"a\"], timeout_seconds = 60, max_output_bytes = 4096)\n    s = shell(name = \"s\", executable = \"sh\", arguments = [\"-c\"], command = \"printf '{}'\", output = schema.stdout_json(schema.record({})), needs = [\"t\", \"a\", \"a\"], timeout_seconds = 60, max_output_bytes = 4096)\n    return workflow(name = \"wf\", nodes = [s, t, a], exports = {\"a_status\": status(\"a\")})\n\nWORKFLOW = define(inputs = {\"who\": input.string()}, build = build)\n",
    );
}

#[test]
fn program_digest_is_deterministic_across_plans_homes_and_copies() {
    let env = Env::new();
    rich_workspace(&env);
    let first = digest_of(&env, &env.ws, "flows/w.star");
    assert_eq!(
        digest_of(&env, &env.ws, "flows/w.star"),
        first,
        "repeated plan"
    );

    let mut other_home = Env::new();
    other_home.ws = env.ws.clone();
    assert_eq!(
        digest_of(&other_home, &env.ws, "flows/w.star"),
        first,
        "another RHO_HOME"
    );

    let copy_dir = tempfile::tempdir().unwrap();
    let copy = copy_dir.path().canonicalize().unwrap().join("elsewhere");
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(&env.ws)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(
        digest_of(&env, &copy, "flows/w.star"),
        first,
        "copied workspace"
    );

    // Changing a loaded module changes the digest.
    std::fs::write(
        copy.join("lib/common.star"),
        std::fs::read_to_string(env.ws.join("lib/common.star")).unwrap() + "# changed\n",
    )
    .unwrap();
    assert_ne!(digest_of(&env, &copy, "flows/w.star"), first);
}

#[test]
fn frozen_program_records_sources_identities_and_normalized_needs() {
    let env = Env::new();
    rich_workspace(&env);
    let run = env.rho(&[
        "workflow",
        "plan",
        "flows/w.star",
        "--input",
        "who=\"x\"",
        "--output",
        "json",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let id = serde_json::from_str::<serde_json::Value>(&run.stdout).unwrap()["plan_id"]
        .as_str()
        .unwrap()
        .to_owned();
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
    let program = &graph["program"];
    let labels: Vec<&str> = program["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["//flows/w.star", "//lib/common.star"]);
    let nodes = program["root"]["nodes"].as_array().unwrap();
    let ids: Vec<&str> = nodes.iter().map(|n| n["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["a", "s", "t"], "sorted by id");
    assert_eq!(
        nodes[1]["needs"],
        serde_json::json!(["a", "t"]),
        "sorted and de-duplicated"
    );
    let t = &nodes[2]["execution"];
    assert_eq!(
        t["program"]["file"]["location"],
        serde_json::json!({"root": "workspace", "path": "bin/tool.sh"})
    );
    assert_eq!(t["program"]["interpreter"]["shebang"], "/bin/sh");
    assert_eq!(t["cwd"]["path"], "sub");
    let sh = &nodes[1]["execution"]["program"]["file"]["location"];
    assert_eq!(sh["root"], "absolute");
    assert_eq!(
        Path::new(sh["path"].as_str().unwrap()),
        std::fs::canonicalize("/usr/bin/sh").unwrap()
    );
    assert_eq!(program["root"]["bound_inputs"]["who"], "x");
    assert_eq!(
        program["root"]["exports"]["a_status"]["schema"]["type"],
        "enum"
    );
    assert_eq!(program["environment"]["name"], "inherit_except_credentials");
    assert!(
        program["environment"]["exclude"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e == "*_API_KEY")
    );
    assert_eq!(program["scheduler"]["max_parallel_nodes"], 4);
    assert_eq!(program["budgets"]["node_count"], 1000);
    assert_eq!(program["planner"]["name"], "rho-planner");
}

#[test]
fn validate_stores_nothing_and_reports_in_every_format() {
    let env = Env::new();
    env.write("w.star", &workflow(&[cmd("a", "[\"true\"]", "")], ""));
    let run = env.rho(&["workflow", "validate", "w.star"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .starts_with("ok: workflow `wf` is valid (1 node, program_digest sha256:"),
        "{}",
        run.stdout
    );
    let run = env.rho(&["workflow", "validate", "w.star", "--output", "json"]);
    let doc: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(doc["valid"], true);
    assert_eq!(doc["node_count"], 1);
    assert!(!env.home.exists(), "validate created the data directory");

    env.write(
        "bad.star",
        &workflow(
            &[
                cmd("a", "[\"true\"]", ", needs = [\"nope\"]"),
                cmd("b", "[\"true\"]", ", needs = [\"b2\"]"),
            ],
            "",
        ),
    );
    let run = env.rho(&["workflow", "validate", "bad.star", "--output", "github"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "::error file=bad.star,line=3,col=9::node `a` needs unknown node `nope`",
            "::error file=bad.star,line=4,col=9::node `b` needs unknown node `b2`",
        ]
    );
    let run = env.rho(&["workflow", "validate", "bad.star", "--output", "json"]);
    assert_eq!(run.code, 2);
    let doc: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(doc["valid"], false);
    assert_eq!(doc["diagnostics"][0]["code"], "unknown_need");
    assert_eq!(doc["diagnostics"][0]["file"], "bad.star");
    assert_eq!(doc["diagnostics"][0]["line"], 3);
    let run = env.rho(&["workflow", "validate", "bad.star"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr
            .contains("error: bad.star:3:9: node `a` needs unknown node `nope`"),
        "{}",
        run.stderr
    );
    assert!(!env.home.exists(), "validate created the data directory");
}

#[test]
fn worker_syntax_errors_carry_file_line_and_column() {
    let env = Env::new();
    env.write("w.star", "def build(inputs):\n    return workflow(name = \"wf\", nodes = [\n\nWORKFLOW = define(inputs = {}, build = build)\n");
    let run = env.rho(&["workflow", "validate", "w.star", "--output", "github"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stdout.starts_with("::error file=w.star,line="),
        "{}",
        run.stdout
    );
}

#[test]
fn a_missing_worker_is_an_operational_error() {
    let mut env = Env::new();
    env.write("w.star", &workflow(&[cmd("a", "[\"true\"]", "")], ""));
    env.vars.push((
        "RHO_PLANNER_WORKER".to_owned(),
        "/nonexistent/rho-planner-worker".to_owned(),
    ));
    let run = env.rho(&["workflow", "plan", "w.star"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("planner worker not found at /nonexistent/rho-planner-worker"),
        "{}",
        run.stderr
    );
    assert!(!env.home.exists());
}

#[test]
fn the_hosts_checks_come_before_the_workers_errors_and_leave_no_worker_behind() {
    // The worker is started before the host's own checks of the entry file (they overlap
    // its start-up), but their errors still come first, and a worker started for nothing
    // is ended. The entry here is a symbolic link, which planning refuses.
    let entry = |env: &Env| {
        env.write("real.star", &workflow(&[cmd("a", "[\"true\"]", "")], ""));
        std::os::unix::fs::symlink(env.ws.join("real.star"), env.ws.join("w.star")).unwrap();
    };
    let refused = |run: &plan_support::Run| {
        assert_eq!(run.code, 2, "{}", run.stderr);
        assert!(run.stderr.contains("is a symbolic link"), "{}", run.stderr);
    };

    let mut env = Env::new();
    entry(&env);
    env.vars.push((
        "RHO_PLANNER_WORKER".to_owned(),
        "/nonexistent/rho-planner-worker".to_owned(),
    ));
    refused(&env.rho(&["workflow", "validate", "w.star"]));

    // A worker that would outlive rho, recognisable by its command line at any stage.
    let mut env = Env::new();
    entry(&env);
    let marker = format!("30.{}", std::process::id());
    let fake = env.write(
        "fake-worker.sh",
        &format!("#!/bin/sh\nexec sleep {marker}\n"),
    );
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    env.vars
        .push(("RHO_PLANNER_WORKER".to_owned(), fake.display().to_string()));
    refused(&env.rho(&["workflow", "validate", "w.star"]));
    let fake = fake.display().to_string();
    let survivors: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| std::fs::read(entry.path().join("cmdline")).ok())
        .map(|cmdline| String::from_utf8_lossy(&cmdline).replace('\0', " "))
        .filter(|cmdline| cmdline.contains(&fake) || cmdline.contains(&marker))
        .collect();
    assert!(survivors.is_empty(), "outlived rho: {survivors:?}");
}

#[test]
fn a_crashing_worker_is_a_planning_error_with_its_stderr() {
    let mut env = Env::new();
    env.write("w.star", &workflow(&[cmd("a", "[\"true\"]", "")], ""));
    let fake = env.write(
        "fake-worker.sh",
        "#!/bin/sh\necho 'worker exploded: out of luck' >&2\nkill -SEGV $$\n",
    );
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    env.vars
        .push(("RHO_PLANNER_WORKER".to_owned(), fake.display().to_string()));
    let run = env.rho(&["workflow", "plan", "w.star"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("planner worker failed"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("SIGSEGV"), "{}", run.stderr);
    assert!(
        run.stderr.contains("worker exploded: out of luck"),
        "{}",
        run.stderr
    );
    assert!(!env.home.exists());
}

#[test]
fn a_garbled_worker_is_a_planning_error() {
    let mut env = Env::new();
    env.write("w.star", &workflow(&[cmd("a", "[\"true\"]", "")], ""));
    // A frame of 3 bytes that is not canonical CBOR (a non-shortest integer head).
    let fake = env.write(
        "fake-worker.sh",
        "#!/bin/sh\nprintf '\\000\\000\\000\\002\\030\\001'\nsleep 5\n",
    );
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    env.vars
        .push(("RHO_PLANNER_WORKER".to_owned(), fake.display().to_string()));
    let run = env.rho(&["workflow", "validate", "w.star"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("garbled frame from the worker"),
        "{}",
        run.stderr
    );
}

#[test]
fn doctor_reports_every_protection_and_probe() {
    let env = Env::new();
    let run = env.rho(&["doctor", "--json"]);
    let doc: serde_json::Value =
        serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stdout));
    let names: Vec<&str> = doc["protections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    for expected in [
        "parent_death_signal",
        "close_fds",
        "empty_environment",
        "rlimits",
        "no_new_privs",
        "landlock",
        "seccomp",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    let probes = doc["probes"].as_array().unwrap();
    assert_eq!(probes.len(), 4);
    if doc["healthy"] == true {
        assert_eq!(run.code, 0);
        assert!(probes.iter().all(|p| p["blocked"] == true), "{probes:?}");
    } else {
        assert_eq!(run.code, 1);
        rho_e2e::skip_or_fail(
            "doctor_reports_every_protection_and_probe (healthy-sandbox assertions)",
            &format!("this kernel lacks a protection: {}", run.stdout),
        );
    }
    let run = env.rho(&["doctor"]);
    assert!(
        run.stdout.contains("probes (each must be refused):"),
        "{}",
        run.stdout
    );
}

#[test]
fn doctor_says_how_process_trees_are_contained() {
    let containment = |value: Option<&str>| {
        let mut env = Env::new();
        if let Some(value) = value {
            env.vars
                .push(("RHO_CONTAINMENT".to_owned(), value.to_owned()));
        }
        let run = env.rho(&["doctor", "--output", "json"]);
        let doc: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
        let check = doc["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "process-tree containment")
            .cloned()
            .unwrap_or_else(|| panic!("no containment check: {doc}"));
        (run.code, check)
    };
    let (_, check) = containment(Some("subreaper"));
    assert_eq!(check["status"], "ok", "{check}");
    assert!(
        check["detail"]
            .as_str()
            .unwrap()
            .contains("selected by RHO_CONTAINMENT=subreaper"),
        "{check}"
    );
    let (code, check) = containment(Some("bogus"));
    assert_eq!(check["status"], "failed", "{check}");
    assert!(
        check["detail"].as_str().unwrap().contains("`bogus`"),
        "{check}"
    );
    assert_eq!(code, 1, "an unusable setting fails doctor");
    let (_, check) = containment(None);
    assert_eq!(check["status"], "ok", "{check}");
}

#[test]
fn shipped_examples_plan() {
    let env = Env::new();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .canonicalize()
        .unwrap();
    for (dir, file, nodes) in [
        ("hello", ".rho/workflows/hello/workflow.star", 4),
        ("review", ".rho/workflows/review/workflow.star", 4),
    ] {
        let run = env.rho_in(
            &examples.join(dir),
            &["workflow", "validate", file, "--output", "json"],
        );
        assert_eq!(run.code, 0, "{dir}: {}{}", run.stdout, run.stderr);
        let doc: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
        assert_eq!(doc["node_count"], nodes, "{dir}");
    }
    // The quick start plans hello from the repository root too (workspace = repository).
    let run = env.rho_in(
        &examples.join(".."),
        &[
            "workflow",
            "validate",
            "examples/hello/.rho/workflows/hello/workflow.star",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
}

/// A fake worker that ignores its input and replays `messages` as frames.
fn scripted_worker(env: &Env, messages: &[rho_ipc::message::WorkerMessage]) -> std::path::PathBuf {
    let mut bytes = Vec::new();
    for m in messages {
        rho_ipc::frame::write_message(&mut bytes, &rho_ipc::message::Envelope::new(m.clone()))
            .unwrap();
    }
    let frames = env.ws.join("frames.bin");
    std::fs::write(&frames, bytes).unwrap();
    let script = env.write(
        "fake-worker.sh",
        &format!("#!/bin/sh\ncat '{}'\nsleep 2\n", frames.display()),
    );
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

fn report(
    mode: rho_ipc::message::SandboxMode,
    refused: Option<&str>,
) -> rho_ipc::message::HardeningReport {
    use rho_ipc::message::ProtectionStatus;
    let status = |name: &str, applied: bool| ProtectionStatus {
        name: name.to_owned(),
        applied,
        detail: if applied {
            "applied".to_owned()
        } else {
            "kernel lacks it".to_owned()
        },
    };
    rho_ipc::message::HardeningReport {
        mode,
        // Every protection is listed (the host refuses a report that omits one); only
        // Landlock is missing.
        protections: rho_ipc::message::PROTECTIONS
            .iter()
            .map(|name| status(name, *name != "landlock"))
            .collect(),
        refused: refused.map(str::to_owned),
    }
}

#[test]
fn a_refusing_worker_names_the_missing_protection() {
    use rho_ipc::message::{SandboxMode, WorkerMessage};
    let mut env = Env::new();
    env.write("w.star", &workflow(&[cmd("a", "[\"true\"]", "")], ""));
    let fake = scripted_worker(
        &env,
        &[WorkerMessage::Hardening(report(
            SandboxMode::Required,
            Some("landlock is not available"),
        ))],
    );
    env.vars
        .push(("RHO_PLANNER_WORKER".to_owned(), fake.display().to_string()));
    let run = env.rho(&["workflow", "plan", "w.star"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("planner sandbox unavailable: landlock is not available (missing: landlock)"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("RHO_PLANNER_SANDBOX=best-effort"),
        "{}",
        run.stderr
    );
    assert!(!env.home.exists());
}

#[test]
fn a_degraded_worker_plans_only_with_best_effort_and_every_output_warns() {
    use rho_ipc::evaluated::{EvaluatedExecution, EvaluatedNode, EvaluatedWorkflow};
    use rho_ipc::message::{PlanResponse, SandboxMode, WorkerMessage};
    let mut env = Env::new();
    env.write("w.star", &workflow(&[cmd("a", "[\"true\"]", "")], ""));
    let evaluated = EvaluatedWorkflow {
        name: "wf".to_owned(),
        inputs: std::collections::BTreeMap::default(),
        bound_inputs: std::collections::BTreeMap::default(),
        nodes: vec![EvaluatedNode {
            name: "a".to_owned(),
            needs: vec![],
            when: None,
            allow_failure: false,
            access: None,
            network: None,
            timeout_seconds: 60,
            max_output_bytes: 4096,
            output: None,
            execution: EvaluatedExecution::Command {
                argv0: "true".to_owned(),
                args: vec![],
                cwd: ".".to_owned(),
            },
            span: None,
        }],
        exports: std::collections::BTreeMap::default(),
        max_parallel_commands: None,
        span: None,
    };
    // A required-mode worker that reports a gap without refusing is still refused by the host.
    let fake = scripted_worker(
        &env,
        &[
            WorkerMessage::Hardening(report(SandboxMode::Required, None)),
            WorkerMessage::Planned(PlanResponse::Workflow(evaluated.clone())),
        ],
    );
    env.vars
        .push(("RHO_PLANNER_WORKER".to_owned(), fake.display().to_string()));
    let run = env.rho(&["workflow", "validate", "w.star"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("planner sandbox unavailable"),
        "{}",
        run.stderr
    );

    let fake = scripted_worker(
        &env,
        &[
            WorkerMessage::Hardening(report(SandboxMode::BestEffort, None)),
            WorkerMessage::Planned(PlanResponse::Workflow(evaluated)),
        ],
    );
    env.vars = vec![
        ("RHO_PLANNER_WORKER".to_owned(), fake.display().to_string()),
        ("RHO_PLANNER_SANDBOX".to_owned(), "best-effort".to_owned()),
    ];
    let warning = "planner sandbox degraded (RHO_PLANNER_SANDBOX=best-effort): protections not applied: landlock";
    let run = env.rho(&["workflow", "validate", "w.star"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains(warning), "{}", run.stderr);
    let run = env.rho(&["workflow", "validate", "w.star", "--output", "github"]);
    assert!(
        run.stdout
            .contains("::warning file=w.star::planner sandbox degraded"),
        "{}",
        run.stdout
    );
    let run = env.rho(&["workflow", "plan", "w.star"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains(warning), "{}", run.stderr);
    let run = env.rho(&["workflow", "plan", "w.star", "--output", "json"]);
    let doc: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert!(
        doc["warnings"][0].as_str().unwrap().contains("landlock"),
        "{doc}"
    );
    let id = doc["plan_id"].as_str().unwrap();
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            env.home
                .join("workflows/plans")
                .join(id)
                .join("manifest.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["sandbox"]["mode"], "best-effort");
    assert_eq!(
        manifest["sandbox"]["missing"],
        serde_json::json!(["landlock"])
    );
    let run = env.rho(&["workflow", "graph", id]);
    assert!(
        run.stderr.contains("planner sandbox degraded"),
        "{}",
        run.stderr
    );
}

/// `rho` marks what it inherited close-on-exec at start-up, so the worker it spawns finds
/// no descriptor above 2 to close (the shell below leaks fds 7 and 8 into `rho`).
#[test]
fn inherited_descriptors_do_not_reach_the_worker() {
    let env = Env::new();
    let output = std::process::Command::new("/bin/sh")
        .args([
            "-c",
            "exec 7</dev/null 8>&1; exec \"$0\" doctor --json",
            plan_support::rho_bin().to_str().unwrap(),
        ])
        .current_dir(&env.ws)
        .env_clear()
        .env("RHO_HOME", &env.home)
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let doc: serde_json::Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let close_fds = doc["protections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "close_fds")
        .unwrap_or_else(|| panic!("no close_fds protection: {doc}"));
    assert_eq!(
        close_fds["detail"], "no descriptor above 2 was open",
        "{close_fds}"
    );
    assert_eq!(doc["open_fds_above_2"], serde_json::json!([]), "{doc}");
}

/// A plan stored through a best-effort worker that lacked Landlock; returns its id.
fn degraded_plan(env: &mut Env) -> String {
    use rho_ipc::evaluated::{EvaluatedExecution, EvaluatedNode, EvaluatedWorkflow};
    use rho_ipc::message::{PlanResponse, SandboxMode, WorkerMessage};
    env.write("w.star", &workflow(&[cmd("a", "[\"true\"]", "")], ""));
    let evaluated = EvaluatedWorkflow {
        name: "wf".to_owned(),
        inputs: std::collections::BTreeMap::default(),
        bound_inputs: std::collections::BTreeMap::default(),
        nodes: vec![EvaluatedNode {
            name: "a".to_owned(),
            needs: vec![],
            when: None,
            allow_failure: false,
            access: None,
            network: None,
            timeout_seconds: 60,
            max_output_bytes: 4096,
            output: None,
            execution: EvaluatedExecution::Command {
                argv0: "true".to_owned(),
                args: vec![],
                cwd: ".".to_owned(),
            },
            span: None,
        }],
        exports: std::collections::BTreeMap::default(),
        max_parallel_commands: None,
        span: None,
    };
    let fake = scripted_worker(
        env,
        &[
            WorkerMessage::Hardening(report(SandboxMode::BestEffort, None)),
            WorkerMessage::Planned(PlanResponse::Workflow(evaluated)),
        ],
    );
    env.vars = vec![
        ("RHO_PLANNER_WORKER".to_owned(), fake.display().to_string()),
        ("RHO_PLANNER_SANDBOX".to_owned(), "best-effort".to_owned()),
    ];
    let id = env.plan_ok("w.star");
    env.vars.clear();
    id
}

#[test]
fn running_a_degraded_plan_warns_in_every_format_and_list_marks_it() {
    let mut env = Env::new();
    let id = degraded_plan(&mut env);
    let warning = "planner sandbox degraded (RHO_PLANNER_SANDBOX=best-effort): protections not applied: landlock";

    let run = env.rho(&["workflow", "run", &id, "--yes"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains(warning), "{}", run.stderr);
    assert!(
        run.stdout.contains(&format!("warning: {warning}")),
        "{}",
        run.stdout
    );

    let run = env.rho(&["workflow", "run", &id, "--yes", "--output", "jsonl"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains(warning), "{}", run.stderr);
    let completed: serde_json::Value = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|e| e["event"] == "completed")
        .unwrap_or_else(|| panic!("no completed event: {}", run.stdout));
    let warnings = completed["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{completed}");
    assert!(
        warnings[0].as_str().unwrap().starts_with(warning),
        "{completed}"
    );

    let list = env.rho(&["workflow", "list"]);
    assert_eq!(list.code, 0, "{}", list.stderr);
    let marked: Vec<&str> = list
        .stdout
        .lines()
        .filter(|l| l.contains("[planner sandbox degraded: missing landlock]"))
        .collect();
    // The plan and both of its runs.
    assert_eq!(marked.len(), 3, "{}", list.stdout);
    assert!(marked.iter().any(|l| l.starts_with(&id)), "{}", list.stdout);

    // `status` of a run says so too, and so does `resume` once the plan is gone.
    let run_id = std::fs::read_dir(env.home.join("workflows/runs"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| !n.starts_with('.'))
        .unwrap();
    for format in ["text", "json"] {
        let status = env.rho(&["workflow", "status", &run_id, "--output", format]);
        assert_eq!(status.code, 0, "{}", status.stderr);
        assert!(
            status.stderr.contains(warning),
            "{format}: {}",
            status.stderr
        );
    }
    let deleted = env.rho(&["workflow", "delete", &id, "--yes"]);
    assert_eq!(deleted.code, 0, "{}", deleted.stderr);
    let resumed = env.rho(&["workflow", "resume", &run_id, "--yes"]);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    assert!(resumed.stderr.contains(warning), "{}", resumed.stderr);
    let status = env.rho(&["workflow", "status", &run_id]);
    assert!(status.stderr.contains(warning), "{}", status.stderr);
}

#[test]
fn a_fully_sandboxed_run_prints_no_sandbox_warning() {
    let env = Env::new();
    env.write("w.star", &workflow(&[cmd("a", "[\"true\"]", "")], ""));
    let id = env.plan_ok("w.star");
    let run = env.rho(&["workflow", "run", &id, "--yes", "--output", "jsonl"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!run.stderr.contains("degraded"), "{}", run.stderr);
    assert!(run.stdout.contains("\"warnings\":[]"), "{}", run.stdout);
    let list = env.rho(&["workflow", "list"]);
    assert!(!list.stdout.contains("degraded"), "{}", list.stdout);
}

#[test]
fn node_counts_are_pluralized() {
    let env = Env::new();
    env.write("one.star", &workflow(&[cmd("a", "[\"true\"]", "")], ""));
    env.write(
        "two.star",
        &workflow(
            &[cmd("a", "[\"true\"]", ""), cmd("b", "[\"true\"]", "")],
            "",
        ),
    );
    let run = env.rho(&["workflow", "validate", "one.star"]);
    assert!(
        run.stdout.contains("(1 node, program_digest"),
        "{}",
        run.stdout
    );
    let run = env.rho(&["workflow", "validate", "two.star"]);
    assert!(
        run.stdout.contains("(2 nodes, program_digest"),
        "{}",
        run.stdout
    );
    let run = env.rho(&["workflow", "validate", "one.star", "--output", "github"]);
    assert!(run.stdout.contains("is valid (1 node)"), "{}", run.stdout);
}

#[test]
fn plan_json_reports_errors_as_a_document_and_exits_2() {
    let env = Env::new();
    env.write(
        "w.star",
        &workflow(&[cmd("a", "[\"true\"]", ", needs = [\"ghost\"]")], ""),
    );
    let run = env.rho(&["workflow", "plan", "w.star", "--output", "json"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    let doc: serde_json::Value =
        serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stdout));
    assert_eq!(doc["planned"], false, "{doc}");
    let diagnostic = &doc["diagnostics"][0];
    assert_eq!(diagnostic["code"], "unknown_need", "{doc}");
    assert_eq!(diagnostic["file"], "w.star", "{doc}");
    assert!(diagnostic["line"].as_u64().is_some(), "{doc}");
    assert!(
        run.stderr.contains("needs unknown node `ghost`"),
        "{}",
        run.stderr
    );
    assert!(!env.home.join("workflows/plans").exists());

    // A budget overrun carries its figures.
    env.config("[budgets]\nnode_count = 0\n");
    let run = env.rho(&["workflow", "plan", "w.star", "--output", "json"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    let doc: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(
        doc["diagnostics"][0]["budget"],
        serde_json::json!({ "name": "node_count", "limit": 0, "measured": 1 }),
        "{doc}"
    );
}

#[test]
fn graph_of_an_unknown_id_names_both_kinds() {
    let env = Env::new();
    env.write("w.star", &workflow(&[cmd("a", "[\"true\"]", "")], ""));
    env.plan_ok("w.star");
    let run = env.rho(&["workflow", "graph", "12345678-1234-4234-8234-123456789abc"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("no plan or run matches `12345678-1234-4234-8234-123456789abc`"),
        "{}",
        run.stderr
    );
}

#[test]
fn input_depth_overrun_names_the_input() {
    let env = Env::new();
    env.write(
        "w.star",
        "def build(inputs):\n    return workflow(name = \"wf\", nodes = [])\n\nWORKFLOW = define(inputs = {\"deep\": input.string(default = \"\")}, build = build)\n",
    );
    let value = format!("deep={}1{}", "[".repeat(25), "]".repeat(25));
    let run = env.rho(&["workflow", "validate", "w.star", "--input", &value]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "input `deep`: planning budget input_depth exceeded: accepted limit 20, requested or measured 25"
        ),
        "{}",
        run.stderr
    );
}

/// A fake worker that sends `report` as its hardening report (a real frame), then waits to
/// be sent a request it must never receive: it records anything it reads in `stdin.log`.
fn reporting_worker(env: &mut Env, report: &rho_ipc::message::HardeningReport) {
    use rho_ipc::message::{Envelope, WorkerMessage};
    let mut frame = Vec::new();
    rho_ipc::frame::write_message(
        &mut frame,
        &Envelope::new(WorkerMessage::Hardening(report.clone())),
    )
    .unwrap();
    let bytes = env.ws.join("report.bin");
    std::fs::write(&bytes, frame).unwrap();
    let log = env.ws.join("stdin.log");
    let fake = env.write(
        "fake-worker.sh",
        &format!(
            "#!/bin/sh\ncat '{}'\ncat > '{}'\n",
            bytes.display(),
            log.display()
        ),
    );
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    env.vars
        .push(("RHO_PLANNER_WORKER".to_owned(), fake.display().to_string()));
}

fn report_of(
    mode: rho_ipc::message::SandboxMode,
    names: &[&str],
) -> rho_ipc::message::HardeningReport {
    rho_ipc::message::HardeningReport {
        mode,
        protections: names
            .iter()
            .map(|name| rho_ipc::message::ProtectionStatus {
                name: (*name).to_owned(),
                applied: true,
                detail: "applied".to_owned(),
            })
            .collect(),
        refused: None,
    }
}

#[test]
fn a_hardening_report_without_every_protection_is_refused() {
    use rho_ipc::message::{PROTECTIONS, SandboxMode};
    let mut env = Env::new();
    env.write("w.star", &workflow(&[cmd("a", "[\"true\"]", "")], ""));
    // Every protection "applied", but Landlock is simply not mentioned.
    let names: Vec<&str> = PROTECTIONS
        .iter()
        .copied()
        .filter(|n| *n != "landlock")
        .collect();
    reporting_worker(&mut env, &report_of(SandboxMode::Required, &names));
    let run = env.rho(&["workflow", "plan", "w.star"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "planner worker's hardening report refused: incomplete report: `landlock` is not \
             listed"
        ),
        "{}",
        run.stderr
    );
    let sent = std::fs::read(env.ws.join("stdin.log")).unwrap_or_default();
    assert!(sent.is_empty(), "the host sent {} bytes", sent.len());
    assert!(!env.home.exists(), "a refused report stored something");
}

#[test]
fn a_hardening_report_of_another_sandbox_mode_is_refused() {
    use rho_ipc::message::{PROTECTIONS, SandboxMode};
    let mut env = Env::new();
    env.write("w.star", &workflow(&[cmd("a", "[\"true\"]", "")], ""));
    reporting_worker(&mut env, &report_of(SandboxMode::BestEffort, &PROTECTIONS));
    let run = env.rho(&["workflow", "validate", "w.star"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "the worker reports sandbox mode `best-effort`, but `required` was requested"
        ),
        "{}",
        run.stderr
    );
    let sent = std::fs::read(env.ws.join("stdin.log")).unwrap_or_default();
    assert!(sent.is_empty(), "the host sent {} bytes", sent.len());
}

/// The children of `pid` (from `/proc/PID/task/*/children`).
fn children_of(pid: u32) -> Vec<u32> {
    let mut children = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
    {
        let path = task.unwrap().path().join("children");
        let text = std::fs::read_to_string(path).unwrap_or_default();
        children.extend(
            text.split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok()),
        );
    }
    children
}

#[test]
fn a_signal_stops_planning_at_once_and_kills_the_worker() {
    let env = Env::new();
    // Enough work for far longer than the wall budget, were the ticks not raised.
    env.config("[budgets]\nevaluator_ticks = 100000000000\n");
    env.write(
        "spin.star",
        "def spin(n):\n    for i in range(n):\n        pass\n    return n\n\ndef build(inputs):\n    x = [spin(100000) for i in range(100000)]\n    return workflow(name = \"wf\", nodes = [])\n\nWORKFLOW = define(inputs = {}, build = build)\n",
    );
    for (command, signal, code, name) in [
        ("validate", nix::sys::signal::Signal::SIGINT, 130, "SIGINT"),
        ("plan", nix::sys::signal::Signal::SIGTERM, 143, "SIGTERM"),
    ] {
        let child = std::process::Command::new(plan_support::rho_bin())
            .args(["workflow", command, "spin.star"])
            .current_dir(&env.ws)
            .env_clear()
            .env("RHO_HOME", &env.home)
            .env("HOME", env.home.parent().unwrap())
            .env("PATH", "/usr/bin:/bin")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        // Wait until the worker runs (it is evaluating from then on).
        let worker = loop {
            if let Some(worker) = children_of(pid).first().copied() {
                break worker;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        std::thread::sleep(std::time::Duration::from_millis(200));
        let target = nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap());
        nix::sys::signal::kill(target, signal).unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        // Exit 130/143, not the wall-time budget (exit 2) 10 s later.
        assert_eq!(out.status.code(), Some(code), "{command}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "planning stopped by {name}: the planner worker was killed"
            )),
            "{stderr}"
        );
        assert!(
            !std::path::Path::new(&format!("/proc/{worker}")).exists(),
            "the worker {worker} outlived rho"
        );
    }
    assert!(env.plan_dirs().is_empty(), "an interrupted plan was stored");
}

#[test]
fn doctor_proves_landlock_and_seccomp_each_on_its_own() {
    let env = Env::new();
    let run = env.rho(&["doctor", "--output", "json"]);
    let doc: serde_json::Value =
        serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stdout));
    if doc["healthy"] != true {
        assert_eq!(run.code, 1, "{}", run.stdout);
        rho_e2e::skip_or_fail(
            "doctor_proves_landlock_and_seccomp_each_on_its_own",
            &format!("this kernel lacks a protection: {}", run.stdout),
        );
        return;
    }
    assert_eq!(run.code, 0, "{}", run.stdout);
    let proofs = doc["proofs"].as_array().unwrap();
    let detail = |name: &str| -> String {
        let proof = proofs
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("no proof {name}: {proofs:?}"));
        assert_eq!(proof["status"], "ok", "{proof}");
        proof["detail"].as_str().unwrap().to_owned()
    };
    // Only Landlock could refuse these: its errno, not seccomp's.
    for what in ["open /etc/passwd", "execve /bin/true"] {
        let d = detail(&format!(
            "Landlock alone (seccomp left out): {what} refused"
        ));
        assert!(d.contains("Permission denied (13) by landlock"), "{d}");
    }
    let d = detail("Landlock alone (seccomp left out): signal the host refused");
    assert!(d.contains("(1) by landlock"), "{d}");
    for what in [
        "open /etc/passwd",
        "open a TCP socket",
        "execve /bin/true",
        "fork a process",
    ] {
        let d = detail(&format!(
            "seccomp alone (Landlock left out): {what} refused"
        ));
        assert!(d.contains("Operation not permitted (1) by seccomp"), "{d}");
    }
    assert_eq!(detail("no_new_privs read back"), "NoNewPrivs: 1");
    assert!(detail("seccomp filter read back").starts_with("Seccomp: 2"));
    assert_eq!(
        detail("capabilities read back"),
        "every capability set is empty"
    );
    assert!(detail("rlimits read back").contains("Max address space 1073741824"));
    assert_eq!(
        detail("parent_death_signal read back"),
        "PR_GET_PDEATHSIG answers SIGKILL"
    );
    assert_eq!(
        detail("empty_environment read back"),
        "0 environment variables"
    );
    // Setup checks are there, and no key value is ever printed.
    let checks = doc["checks"].as_array().unwrap();
    for area in ["data_directory", "config", "provider", "claude"] {
        assert!(
            checks.iter().any(|c| c["area"] == area),
            "{area}: {checks:?}"
        );
    }
}

#[test]
fn doctor_fails_on_a_missing_protection_and_says_what_to_fix() {
    use rho_ipc::message::{ProbeResult, SandboxMode, SandboxProbe, WorkerMessage};
    let mut env = Env::new();
    // A worker without Landlock whose probes all come back refused.
    let fake = scripted_worker(
        &env,
        &[
            WorkerMessage::Hardening(report(SandboxMode::BestEffort, None)),
            WorkerMessage::ProbeResult(ProbeResult {
                probe: SandboxProbe::Fork,
                succeeded: false,
                errno: Some(1),
                environment_len: Some(0),
                open_fds_above_2: Vec::new(),
                parent_death_signal: Some(9),
            }),
        ],
    );
    env.vars
        .push(("RHO_PLANNER_WORKER".to_owned(), fake.display().to_string()));
    let run = env.rho(&["doctor"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout.contains("  landlock             MISSING"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("FAILED   landlock applied: MISSING: kernel lacks it"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("fix: run on a Linux kernel with Landlock"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("\nproblem: "), "{}", run.stdout);
    let run = env.rho(&["doctor", "--json"]);
    assert_eq!(run.code, 1);
    let doc: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(doc["healthy"], false);
}

#[test]
fn doctor_checks_config_data_directory_and_provider_keys_without_printing_them() {
    use std::os::unix::fs::PermissionsExt as _;
    let mut env = Env::new();
    std::fs::create_dir_all(&env.home).unwrap();
    std::fs::set_permissions(&env.home, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        env.home.join("config.toml"),
        "[model]\nprovider = \"anthropic\"\n",
    )
    .unwrap();
    env.vars.push((
        "OPENAI_API_KEY".to_owned(),
        "sk-very-secret-1234".to_owned(),
    ));
    let run = env.rho(&["doctor", "--output", "json"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(!run.stdout.contains("sk-very-secret"), "{}", run.stdout);
    let doc: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let checks = doc["checks"].as_array().unwrap();
    let find = |area: &str, name: &str| {
        checks
            .iter()
            .find(|c| c["area"] == area && c["name"].as_str().unwrap().contains(name))
            .unwrap_or_else(|| panic!("{area} {name}: {checks:?}"))
            .clone()
    };
    let dir = find("data_directory", "");
    assert_eq!(dir["status"], "failed", "{dir}");
    assert!(
        dir["fix"].as_str().unwrap().starts_with("chmod 700 "),
        "{dir}"
    );
    let anthropic = find("provider", "anthropic");
    assert_eq!(anthropic["status"], "failed", "{anthropic}");
    assert!(
        anthropic["detail"]
            .as_str()
            .unwrap()
            .contains("ANTHROPIC_API_KEY is not set"),
        "{anthropic}"
    );
    assert_eq!(
        find("provider", "openai")["detail"],
        "OPENAI_API_KEY is set"
    );

    // A configuration that does not parse names its file and line.
    std::fs::set_permissions(&env.home, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(env.home.join("config.toml"), "[model\n").unwrap();
    let run = env.rho(&["doctor"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout.contains(&format!(
            "FAILED   {}: {}:1:",
            env.home.join("config.toml").display(),
            env.home.join("config.toml").display()
        )),
        "{}",
        run.stdout
    );
}

/// The state letter of `/proc/<pid>/stat` (after the command name, which may hold spaces).
fn proc_state(stat: &str) -> Option<char> {
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

#[test]
fn a_finished_worker_is_killed_at_once_and_reaped_when_the_conversation_drops() {
    use rho::workflow::plan::worker::{Conversation, WorkerCommand};

    let worker = plan_support::worker_bin();
    let command = WorkerCommand::locate(
        Some(worker.as_os_str()),
        None,
        &rho_ipc::budget::Budgets::default(),
    )
    .unwrap();
    let (mut conversation, report) = Conversation::start(&command).unwrap();
    assert!(report.refused.is_none(), "{report:?}");
    let pid = conversation.pid();
    let alive = conversation
        .proc_file("stat")
        .as_deref()
        .and_then(proc_state);
    assert!(
        matches!(alive, Some('R' | 'S')),
        "the worker runs or waits for its request: {alive:?}"
    );

    conversation.kill_now_reap_on_drop();
    // SIGKILL is delivered asynchronously: wait (boundedly) for the zombie.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let state = loop {
        let state = conversation
            .proc_file("stat")
            .as_deref()
            .and_then(proc_state);
        if state == Some('Z') || std::time::Instant::now() > deadline {
            break state;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    };
    assert_eq!(state, Some('Z'), "killed, and not reaped before the drop");

    drop(conversation);
    let after = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
    // The pid may only have been reused by an unrelated process if it was reaped.
    assert!(
        after.as_deref().and_then(proc_state) != Some('Z')
            || !after.as_deref().unwrap_or("").contains("rho-planner"),
        "still a zombie after the drop: {after:?}"
    );
}
