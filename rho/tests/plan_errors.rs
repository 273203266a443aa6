//! Every host-side planning error a user must get: each exits 2 (invalid workflow), names
//! the culprit, and leaves the store exactly as it was.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod plan_support;

use plan_support::{Env, cmd, workflow};

/// An env with one stored plan, so "untouched" is checked against a non-empty store.
fn env_with_plan() -> Env {
    let env = Env::new();
    env.write("ok.star", &workflow(&[cmd("a", "[\"true\"]", "")], ""));
    env.plan_ok("ok.star");
    env
}

/// Plans `file`, expects exit 2 with every needle on stderr and an unchanged store.
fn assert_invalid(env: &Env, file: &str, needles: &[&str]) -> String {
    let before = env.store_snapshot();
    let run = env.rho(&["workflow", "plan", file]);
    assert_eq!(
        run.code, 2,
        "stdout: {}\nstderr: {}",
        run.stdout, run.stderr
    );
    for needle in needles {
        assert!(
            run.stderr.contains(needle),
            "missing `{needle}` in:\n{}",
            run.stderr
        );
    }
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    assert_eq!(env.store_snapshot(), before, "the store changed");
    run.stderr
}

#[test]
fn unknown_need_names_node_need_and_line() {
    let env = env_with_plan();
    env.write(
        "w.star",
        &workflow(&[cmd("a", "[\"true\"]", ", needs = [\"ghost\"]")], ""),
    );
    assert_invalid(
        &env,
        "w.star",
        &["w.star:3:", "node `a` needs unknown node `ghost`"],
    );
}

#[test]
fn cycle_is_printed() {
    let env = env_with_plan();
    env.write(
        "w.star",
        &workflow(
            &[
                cmd("a", "[\"true\"]", ", needs = [\"c\"]"),
                cmd("b", "[\"true\"]", ", needs = [\"a\"]"),
                cmd("c", "[\"true\"]", ", needs = [\"b\"]"),
            ],
            "",
        ),
    );
    assert_invalid(&env, "w.star", &["dependency cycle: a -> c -> b -> a"]);
}

#[test]
fn reference_to_a_non_ancestor_is_refused() {
    let env = env_with_plan();
    env.write(
        "w.star",
        &workflow(
            &[
                cmd("a", "[\"true\"]", ""),
                cmd(
                    "b",
                    "[\"true\"]",
                    ", when = condition.equals(exit_code(\"a\"), 0)",
                ),
            ],
            "",
        ),
    );
    assert_invalid(
        &env,
        "w.star",
        &["node `b`", "references `a`, which is not an ancestor"],
    );
}

#[test]
fn reference_path_the_schema_lacks_is_refused() {
    let env = env_with_plan();
    let out = ", output = schema.stdout_json(schema.record({\"summary\": schema.string()}))";
    env.write(
        "w.star",
        &workflow(
            &[
                cmd("a", "[\"echo\", \"{}\"]", out),
                cmd(
                    "b",
                    "[\"echo\", template([\"v=\", output(\"a\", [\"verdict\"])])]",
                    ", needs = [\"a\"]",
                ),
            ],
            "",
        ),
    );
    assert_invalid(
        &env,
        "w.star",
        &["node `b`", "has no field `verdict` (fields: summary)"],
    );
}

#[test]
fn read_only_on_an_agent_that_can_write_is_refused() {
    let env = env_with_plan();
    let text = "def build(inputs):\n    n = agent(name = \"fix\", agent = \"worker\", prompt = \"fix it\", access = \"read_only\", timeout_seconds = 60, max_output_bytes = 4096)\n    return workflow(name = \"wf\", nodes = [n])\n\nWORKFLOW = define(inputs = {}, build = build)\n";
    env.write("w.star", text);
    assert_invalid(
        &env,
        "w.star",
        &[
            "node `fix`",
            "read_only is not allowed",
            "agent `worker`",
            "write_file",
        ],
    );
}

#[test]
fn missing_executable_names_node_and_name() {
    let env = env_with_plan();
    env.write(
        "w.star",
        &workflow(&[cmd("build", "[\"no-such-tool-xyz\"]", "")], ""),
    );
    assert_invalid(
        &env,
        "w.star",
        &["node `build`", "`no-such-tool-xyz` not found on PATH"],
    );
    env.write(
        "w2.star",
        &workflow(&[cmd("run", "[\"scripts/missing.sh\"]", "")], ""),
    );
    assert_invalid(
        &env,
        "w2.star",
        &["node `run`", "scripts/missing.sh", "does not exist"],
    );
}

#[test]
fn non_executable_file_is_refused() {
    let env = env_with_plan();
    env.write("tool.sh", "#!/bin/sh\necho hi\n");
    env.write(
        "w.star",
        &workflow(&[cmd("run", "[\"./tool.sh\"]", "")], ""),
    );
    assert_invalid(
        &env,
        "w.star",
        &["node `run`", "tool.sh", "is not executable"],
    );
}

#[test]
fn cwd_outside_the_workspace_is_refused() {
    let env = env_with_plan();
    env.write(
        "w.star",
        &workflow(&[cmd("a", "[\"true\"]", ", cwd = \"../elsewhere\"")], ""),
    );
    assert_invalid(
        &env,
        "w.star",
        &["node `a`", "cwd `../elsewhere`", "leaves the workspace"],
    );
    std::fs::create_dir(env.ws.join("real")).unwrap();
    std::os::unix::fs::symlink("real", env.ws.join("alias")).unwrap();
    env.write(
        "w2.star",
        &workflow(&[cmd("a", "[\"true\"]", ", cwd = \"alias\"")], ""),
    );
    assert_invalid(
        &env,
        "w2.star",
        &["node `a`", "cwd `alias`", "symbolic link `alias`"],
    );
}

fn loading(label: &str) -> String {
    format!(
        "load(\"{label}\", \"helper\")\n\ndef build(inputs):\n    return workflow(name = \"wf\", nodes = [helper()])\n\nWORKFLOW = define(inputs = {{}}, build = build)\n"
    )
}

const HELPER: &str = "def helper():\n    return command(name = \"a\", argv = [\"true\"], timeout_seconds = 60, max_output_bytes = 4096)\n";

#[test]
fn load_label_with_dotdot_is_refused() {
    let env = env_with_plan();
    env.write("lib/h.star", HELPER);
    env.write("w.star", &loading("//lib/../lib/h.star"));
    assert_invalid(&env, "w.star", &["//lib/../lib/h.star", "`..`"]);
}

#[test]
fn load_label_with_absolute_path_is_refused() {
    let env = env_with_plan();
    env.write("w.star", &loading("/etc/h.star"));
    assert_invalid(&env, "w.star", &["/etc/h.star", "absolute"]);
}

#[test]
fn load_through_a_symlink_component_is_refused() {
    let env = env_with_plan();
    env.write("real/h.star", HELPER);
    std::os::unix::fs::symlink("real", env.ws.join("lib")).unwrap();
    env.write("w.star", &loading("//lib/h.star"));
    assert_invalid(
        &env,
        "w.star",
        &["//lib/h.star", "`lib` is a symbolic link"],
    );
}

#[test]
fn load_of_a_missing_file_is_refused() {
    let env = env_with_plan();
    env.write("w.star", &loading("//lib/nope.star"));
    assert_invalid(&env, "w.star", &["//lib/nope.star", "not found"]);
}

#[test]
fn import_cycle_is_printed() {
    let env = env_with_plan();
    env.write("a.star", "load(\"//b.star\", \"y\")\nx = 1\n");
    env.write("b.star", "load(\"//a.star\", \"x\")\ny = 2\n");
    env.write(
        "w.star",
        &loading("//a.star")
            .replace("\"helper\")", "\"x\")")
            .replace("helper()", "x"),
    );
    assert_invalid(&env, "w.star", &["//a.star -> //b.star -> //a.star"]);
}

#[test]
fn too_many_modules_is_a_budget_error() {
    let env = env_with_plan();
    env.config("[budgets]\nmodule_count = 2\n");
    env.write("a.star", "load(\"//b.star\", \"y\")\nx = y\n");
    env.write("b.star", "y = 2\n");
    env.write(
        "w.star",
        &loading("//a.star")
            .replace("\"helper\")", "\"x\")")
            .replace("helper()", "x"),
    );
    assert_invalid(
        &env,
        "w.star",
        &["planning budget module_count exceeded: accepted limit 2, requested or measured 3"],
    );
}

#[test]
fn planner_wall_time_kills_a_spinning_worker() {
    let env = env_with_plan();
    env.config("[budgets]\nplanner_wall_ms = 400\nevaluator_ticks = 1000000000000\n");
    env.write(
        "w.star",
        "def spin():\n    n = 0\n    for i in range(2000000000):\n        n = i\n    return n\n\ndef build(inputs):\n    spin()\n    return workflow(name = \"wf\", nodes = [])\n\nWORKFLOW = define(inputs = {}, build = build)\n",
    );
    let started = std::time::Instant::now();
    assert_invalid(
        &env,
        "w.star",
        &["planning budget planner_wall_ms exceeded: accepted limit 400"],
    );
    // Not a timing assertion on speed: only that the kill happened rather than the loop ending.
    assert!(started.elapsed() < std::time::Duration::from_mins(1));
}

#[test]
fn unknown_budget_in_configuration_is_refused() {
    let env = env_with_plan();
    env.config("[budgets]\nnode_counts = 5\n");
    assert_invalid(
        &env,
        "ok.star",
        &["budgets.node_counts", "is not a planning budget"],
    );
}

#[test]
fn node_count_budget_is_checked() {
    let env = env_with_plan();
    env.config("[budgets]\nnode_count = 1\n");
    env.write(
        "w.star",
        &workflow(
            &[cmd("a", "[\"true\"]", ""), cmd("b", "[\"true\"]", "")],
            "",
        ),
    );
    let stderr = assert_invalid(
        &env,
        "w.star",
        &["planning budget node_count exceeded: accepted limit 1, requested or measured 2"],
    );
    assert!(!stderr.contains("panicked"));
}

#[test]
fn entry_outside_the_workspace_is_refused() {
    let env = env_with_plan();
    let other = tempfile::tempdir().unwrap();
    let file = plan_support::write_file(
        &other.path().join("w.star"),
        &workflow(&[cmd("a", "[\"true\"]", "")], ""),
    );
    assert_invalid(&env, file.to_str().unwrap(), &["is outside the workspace"]);
}

#[test]
fn repeated_input_key_is_a_usage_error() {
    let env = env_with_plan();
    let before = env.store_snapshot();
    let run = env.rho(&[
        "workflow", "plan", "ok.star", "--input", "a=1", "--input", "a=2",
    ]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("--input `a` is given more than once"),
        "{}",
        run.stderr
    );
    assert_eq!(env.store_snapshot(), before);
}

/// Sources that exhaust the worker's address space in one native operation: the worker
/// aborts (or panics) on the failed allocation and the host reports the budget, exit 2.
#[test]
fn a_worker_out_of_address_space_is_a_budget_error() {
    let env = env_with_plan();
    for (i, body) in [
        "    s = \"a\" * 1000\n    s *= 1000000\n",
        "    l = [1]\n    for i in range(40):\n        l += l\n",
        "    x = \",\".join([\"a\" * 999999] * 9000)\n",
        "    x = sorted(range(100000000))\n",
    ]
    .iter()
    .enumerate()
    {
        let file = format!("oom{i}.star");
        env.write(
            &file,
            &format!(
                "def f():\n{body}    return 1\n\ndef build(inputs):\n    f()\n    return workflow(name = \"wf\", nodes = [])\n\nWORKFLOW = define(inputs = {{}}, build = build)\n"
            ),
        );
        let stderr = assert_invalid(
            &env,
            &file,
            &[
                "planning budget planner_address_space_bytes exceeded: accepted limit 1073741824, requested or measured ",
                "address space",
            ],
        );
        assert!(!stderr.contains("planner worker failed"), "{stderr}");
    }
}

/// A fake worker that dies by `signal` after writing `stderr` (before any frame).
fn dying_worker(env: &mut Env, stderr: &str, signal: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    let fake = env.write(
        "fake-worker.sh",
        &format!("#!/bin/sh\nprintf '%s\\n' '{stderr}' >&2\nkill -{signal} $$\n"),
    );
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    env.vars
        .push(("RHO_PLANNER_WORKER".to_owned(), fake.display().to_string()));
}

#[test]
fn a_worker_killed_by_its_cpu_limit_is_the_wall_time_budget() {
    let mut env = env_with_plan();
    env.config("[budgets]\nplanner_wall_ms = 1500\n");
    dying_worker(&mut env, "busy", "XCPU");
    assert_invalid(
        &env,
        "ok.star",
        &[
            "planning budget planner_wall_ms exceeded: accepted limit 1500, requested or measured 4000",
            "CPU-time limit of 4 s, derived from planner_wall_ms",
            "SIGXCPU",
        ],
    );
}

#[test]
fn a_worker_aborting_for_another_reason_stays_an_operational_error() {
    let mut env = env_with_plan();
    dying_worker(&mut env, "assertion failed: frames are ordered", "ABRT");
    let before = env.store_snapshot();
    let run = env.rho(&["workflow", "plan", "ok.star"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("planner worker failed")
            && run.stderr.contains("SIGABRT")
            && run.stderr.contains("assertion failed: frames are ordered"),
        "{}",
        run.stderr
    );
    assert_eq!(env.store_snapshot(), before);
}

fn mkfifo(env: &Env, rel: &str) {
    let path = env.ws.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o755)).unwrap();
}

/// A FIFO where a module, the entry file or an executable should be is refused at once
/// (opening it without `O_NONBLOCK` would wait forever for a writer).
#[test]
fn fifos_are_refused_not_waited_on() {
    let env = env_with_plan();
    mkfifo(&env, "lib/fifo.star");
    env.write("w.star", &loading("//lib/fifo.star"));
    assert_invalid(
        &env,
        "w.star",
        &["w.star:1:", "`lib/fifo.star` is a FIFO, not a regular file"],
    );

    mkfifo(&env, "entry.star");
    let before = env.store_snapshot();
    let run = env.rho(&["workflow", "validate", "entry.star"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("`entry.star` is a FIFO, not a regular file"),
        "{}",
        run.stderr
    );
    assert_eq!(env.store_snapshot(), before);

    mkfifo(&env, "bin_fifo");
    env.write("x.star", &workflow(&[cmd("a", "[\"./bin_fifo\"]", "")], ""));
    assert_invalid(
        &env,
        "x.star",
        &["node `a`", "bin_fifo` is a FIFO, not a regular file"],
    );
}

/// Hashing an executable respects the planning wall-time budget: a 20 GB sparse file is not
/// read to its end.
#[test]
fn hashing_a_huge_executable_stops_at_the_wall_budget() {
    use std::os::unix::fs::PermissionsExt as _;
    let env = env_with_plan();
    env.config("[budgets]\nplanner_wall_ms = 800\n");
    let big = std::fs::File::create(env.ws.join("huge-tool")).unwrap();
    big.set_len(20 << 30).unwrap();
    big.set_permissions(std::fs::Permissions::from_mode(0o755))
        .unwrap();
    drop(big);
    env.write(
        "w.star",
        &workflow(
            &[
                cmd("a", "[\"./huge-tool\"]", ""),
                cmd("b", "[\"./huge-tool\", \"again\"]", ""),
            ],
            "",
        ),
    );
    let stderr = assert_invalid(
        &env,
        "w.star",
        &[
            "planning budget planner_wall_ms exceeded: accepted limit 800, requested or measured ",
            "while hashing",
            "huge-tool",
        ],
    );
    // Reported once, not once per node.
    assert_eq!(stderr.matches("planning budget").count(), 1, "{stderr}");
}
