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
        "    x = []\n    x.extend(range(100000000))\n",
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

/// The output a run may retain (two streams of `max_output_bytes` per node) is bounded by
/// `retained_output_total_bytes` at plan time.
#[test]
fn retained_output_total_is_checked_at_plan_time() {
    let env = env_with_plan();
    env.config("[budgets]\nretained_output_total_bytes = 20000\n");
    // 2 nodes × 2 streams × 4096 = 16384 fits; 3 nodes = 24576 do not.
    env.write(
        "fits.star",
        &workflow(
            &[cmd("a", "[\"true\"]", ""), cmd("b", "[\"true\"]", "")],
            "",
        ),
    );
    assert_eq!(env.rho(&["workflow", "validate", "fits.star"]).code, 0);
    env.write(
        "w.star",
        &workflow(
            &[
                cmd("a", "[\"true\"]", ""),
                cmd("b", "[\"true\"]", ""),
                cmd("c", "[\"true\"]", ""),
            ],
            "",
        ),
    );
    assert_invalid(
        &env,
        "w.star",
        &[
            "planning budget retained_output_total_bytes exceeded: accepted limit 20000, requested or measured 24576",
            "2 streams times max_output_bytes",
        ],
    );
}

/// A workflow file whose `build` body is `body` (indented already) returning node `a`, with
/// `inputs` as the declarations.
fn building(body: &str, inputs: &str) -> String {
    format!(
        "def build(inputs):\n{body}    return workflow(name = \"wf\", nodes = [{}])\n\nWORKFLOW = define(inputs = {inputs}, build = build)\n",
        cmd("a", "[\"true\"]", "")
    )
}

/// Errors found by the worker (evaluation) reach the user through the real CLI: exit 2, a
/// message naming the culprit with its file and line, and a store left as it was.
#[test]
fn worker_side_errors_exit_2_and_leave_the_store_untouched() {
    let env = env_with_plan();
    let inputs = "{\"target\": input.string(), \"n\": input.integer(default = 1)}";
    let parens = format!("    x = {}1{}\n", "(".repeat(10_000), ")".repeat(10_000));
    let many_nodes = "def build(inputs):\n    nodes = []\n    for i in range(1001):\n        nodes.append(command(name = \"n%d\" % i, argv = [\"true\"], timeout_seconds = 60, max_output_bytes = 16))\n    return workflow(name = \"wf\", nodes = nodes)\n\nWORKFLOW = define(inputs = {}, build = build)\n".to_owned();
    let cases: Vec<(&str, String, Vec<&str>, Vec<&str>)> = vec![
        (
            "missing_workflow",
            building("", "{}").replace("WORKFLOW = ", "OTHER = "),
            vec![],
            vec!["missing_workflow.star", "defines no global WORKFLOW"],
        ),
        (
            "duplicate_workflow",
            building("", "{}") + "WORKFLOW = define(inputs = {}, build = build)\n",
            vec![],
            vec!["duplicate_workflow.star:5:", "WORKFLOW is assigned more than once"],
        ),
        (
            "unknown_input",
            building("", inputs),
            vec!["--input", "target=\"x\"", "--input", "bogus=1"],
            vec!["unknown_input.star:4:", "unknown input \"bogus\""],
        ),
        (
            "missing_input",
            building("", inputs),
            vec![],
            vec!["missing_input.star:4:", "missing required input \"target\""],
        ),
        (
            "mistyped_input",
            building("", inputs),
            vec!["--input", "target=\"x\"", "--input", "n=\"three\""],
            vec!["mistyped_input.star:4:", "input \"n\" must be an integer"],
        ),
        (
            "invalid_node_name",
            building("", "{}").replace("name = \"a\"", "name = \"Bad Name\""),
            vec![],
            vec!["invalid_node_name.star:2:", "invalid node name \"Bad Name\""],
        ),
        (
            "duplicate_node_name",
            building("", "{}").replace("nodes = [", &format!("nodes = [{}, ", cmd("a", "[\"true\"]", ""))),
            vec![],
            vec!["duplicate_node_name.star:2:", "duplicate node name \"a\""],
        ),
        (
            "deep_condition",
            building(
                "    c = condition.equals(status(\"a\"), \"success\")\n    for i in range(12):\n        c = condition.not_(c)\n",
                "{}",
            )
            .replace(
                "nodes = [",
                &format!("nodes = [{}, ", cmd("b", "[\"true\"]", ", needs = [\"a\"], when = c")),
            ),
            vec![],
            vec![
                "deep_condition.star:",
                "planning budget condition_depth exceeded: accepted limit 8, requested or measured 9",
            ],
        ),
        (
            "recursion",
            "def f(n):\n    return f(n + 1)\n\n".to_owned() + &building("    f(0)\n", "{}"),
            vec![],
            vec![
                "recursion.star:2:",
                "planning budget call_stack_depth exceeded: accepted limit 25",
            ],
        ),
        (
            "huge_string",
            building("    s = 'a' * 1000000000\n", "{}"),
            vec![],
            vec![
                "huge_string.star:2:",
                "planning budget string_bytes exceeded: accepted limit 1000000, requested or measured 1000000000",
            ],
        ),
        (
            "list_bomb",
            building("    l = [0] * 1000000000\n", "{}"),
            vec![],
            vec![
                "list_bomb.star:2:",
                "planning budget list_items exceeded: accepted limit 10000, requested or measured 1000000000",
            ],
        ),
        (
            "dict_bomb",
            building("", "{}").replace(
                "])\n",
                "], exports = {\"e%d\" % i: status(\"a\") for i in range(20000)})\n",
            ),
            vec![],
            vec!["planning budget dict_items exceeded: accepted limit 10000"],
        ),
        (
            "nested_parentheses",
            building(&parens, "{}"),
            vec![],
            vec![
                "nested_parentheses.star:2:",
                "planning budget source_nesting_depth exceeded: accepted limit 100",
            ],
        ),
        (
            "too_many_nodes",
            many_nodes,
            vec![],
            vec![
                "too_many_nodes.star:5:",
                "planning budget node_count exceeded: accepted limit 1000, requested or measured 1001",
            ],
        ),
    ];
    let plans_before = env.plan_dirs();
    assert_eq!(plans_before.len(), 1);
    for (name, source, extra, needles) in cases {
        let file = format!("{name}.star");
        env.write(&file, &source);
        let before = env.store_snapshot();
        let mut args = vec!["workflow", "plan", file.as_str()];
        args.extend(extra.iter().copied());
        let run = env.rho(&args);
        assert_eq!(run.code, 2, "{name}: {}", run.stderr);
        for needle in needles {
            assert!(
                run.stderr.contains(needle),
                "{name}: missing `{needle}` in:\n{}",
                run.stderr
            );
        }
        assert!(run.stdout.is_empty(), "{name}: {}", run.stdout);
        assert!(!run.stderr.contains("panicked"), "{name}: {}", run.stderr);
        assert_eq!(env.store_snapshot(), before, "{name}: the store changed");
    }
    assert_eq!(env.plan_dirs(), plans_before);
}

#[test]
fn control_characters_from_the_workflow_are_shown_escaped() {
    let env = env_with_plan();
    // Erase the line, print a fake verdict, set the clipboard (OSC 52), start a new line.
    env.write(
        "w.star",
        "fail(\"\\x1b[2K\\rvalid: 0 nodes\\x1b]52;c;SGk=\\x07\\u009b31m\\nok\")\n",
    );
    let stderr = assert_invalid(
        &env,
        "w.star",
        &["^[[2K^Mvalid: 0 nodes^[]52;c;SGk=^G\\u{9b}31m^Jok"],
    );
    assert!(
        !stderr.contains(['\u{1b}', '\u{7}', '\r', '\u{9b}']),
        "raw control characters reached the terminal: {stderr:?}"
    );
}

/// A workflow whose `build` runs `statement` first, then returns one node.
fn build_after(statement: &str) -> String {
    format!(
        "def build(inputs):\n    {statement}\n    return workflow(name = \"wf\", nodes = [command(name = \"a\", argv = [\"true\"], timeout_seconds = 5, max_output_bytes = 100)])\n\nWORKFLOW = define(inputs = {{}}, build = build)\n"
    )
}

#[test]
fn materializing_a_huge_range_is_the_list_items_budget() {
    let env = env_with_plan();
    for (i, (call, measured)) in [
        ("list(range(1000000000))", 1_000_000_000),
        ("tuple(range(1000000000))", 1_000_000_000),
        ("sorted(range(1000000000), reverse = True)", 1_000_000_000),
        ("reversed(range(1000000000))", 1_000_000_000),
        ("enumerate(range(1000000000))", 1_000_000_000),
        // zip stops at its shortest argument.
        ("zip(range(1000000000), range(5, 1000000000))", 999_999_995),
    ]
    .iter()
    .enumerate()
    {
        let file = format!("huge{i}.star");
        env.write(&file, &build_after(&format!("x = {call}")));
        let stderr = assert_invalid(
            &env,
            &file,
            &[
                &format!("{file}:2:9: planning budget list_items exceeded: accepted limit 10000"),
                &format!("requested or measured {measured}\n"),
            ],
        );
        assert!(
            !stderr.contains("planner worker failed"),
            "{call}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{call}: {stderr}");
    }
    // Small ones still work as the standard library's.
    env.write(
        "small.star",
        &build_after("x = sorted(list(zip(range(3), tuple(\"ab\".elems()))), reverse = True)"),
    );
    let run = env.rho(&["workflow", "validate", "small.star"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
}

#[test]
fn an_unchecked_allocation_over_4_gib_is_the_address_space_budget() {
    let env = env_with_plan();
    env.write(
        "w.star",
        &build_after("x = []\n    x.extend(range(1000000000))"),
    );
    let stderr = assert_invalid(
        &env,
        "w.star",
        &["planning budget planner_address_space_bytes exceeded: accepted limit 1073741824"],
    );
    assert!(!stderr.contains("planner worker failed"), "{stderr}");
}

#[test]
fn an_answer_larger_than_a_frame_is_the_program_bytes_budget() {
    let env = env_with_plan();
    // 20 nodes carrying a 1 MB argument each: about 20 MB encoded, over the 16 MiB frame.
    env.write(
        "w.star",
        "def build(inputs):\n    s = \"x\" * 1000000\n    return workflow(name = \"wf\", nodes = [command(name = \"a%d\" % i, argv = [\"true\", s], timeout_seconds = 5, max_output_bytes = 100) for i in range(20)])\n\nWORKFLOW = define(inputs = {}, build = build)\n",
    );
    let stderr = assert_invalid(
        &env,
        "w.star",
        &[
            "planning budget program_bytes exceeded: accepted limit 10000000, requested or measured 2000",
            "larger than one planner frame",
        ],
    );
    assert!(!stderr.contains("planner worker failed"), "{stderr}");
}

#[test]
fn a_binary_whose_library_path_is_writable_is_refused() {
    let env = env_with_plan();
    let source = env.ws.join("m.c");
    std::fs::write(&source, "int main(void) { return 0; }\n").unwrap();
    let built = std::process::Command::new("cc")
        .arg("-o")
        .arg(env.ws.join("tool"))
        .arg(&source)
        .arg("-Wl,-rpath,$ORIGIN/lib")
        .arg("-Wl,--enable-new-dtags")
        .status();
    match built {
        Ok(status) if status.success() => {}
        other => {
            // Not a kernel feature: the compiler only builds the fixture.
            eprintln!(
                "SKIPPING a_binary_whose_library_path_is_writable_is_refused: no C compiler to \
                 build a binary with a RUNPATH ({other:?})"
            );
            return;
        }
    }
    env.write("w.star", &workflow(&[cmd("a", "[\"./tool\"]", "")], ""));
    assert_invalid(
        &env,
        "w.star",
        &[
            "its library search path (RUNPATH/RPATH) entry `$ORIGIN/lib` is in a writable location",
            "relink it without that entry",
        ],
    );
}

#[test]
fn a_binary_whose_program_interpreter_is_writable_is_refused() {
    use std::os::unix::fs::PermissionsExt as _;
    let env = env_with_plan();
    // A copy of a system binary whose PT_INTERP names a loader in a world-writable place.
    let mut bytes = std::fs::read("/bin/true").unwrap();
    let interp = bytes
        .windows(4)
        .position(|w| w == b"/lib")
        .expect("a dynamically linked /bin/true");
    let end = interp + bytes[interp..].iter().position(|b| *b == 0).unwrap();
    let fake = b"/tmp/ld.so";
    assert!(fake.len() <= end - interp);
    bytes[interp..end].fill(0);
    bytes[interp..interp + fake.len()].copy_from_slice(fake);
    let tool = env.ws.join("tool");
    std::fs::write(&tool, bytes).unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    env.write("w.star", &workflow(&[cmd("a", "[\"./tool\"]", "")], ""));
    assert_invalid(
        &env,
        "w.star",
        &[
            "its program interpreter `/tmp/ld.so` could be replaced after planning",
            "/tmp is writable by everyone",
        ],
    );
}
