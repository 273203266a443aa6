//! End to end: read-only command nodes and `network = "none"`, enforced by the kernel
//! (Landlock and seccomp), scheduled together under the checkout lock, with real binaries, a
//! cleared environment, a temporary `RHO_HOME` and workspace.
//!
//! These tests need Landlock (ABI 3 or later). Without it they print why and skip, except
//! under `CI` or `RHO_REQUIRE_SANDBOX=1`, where a missing kernel feature is a failure.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

use std::collections::BTreeMap;
use std::io::Read as _;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Output;

use rho::confinement::{KernelSupport, REQUIRE_ABI_VAR};
use rho::workflow::scheduler;
use rho::workflow::state::{Event, EventKind, Lifecycle, NodeState, State, apply};
use rho_ipc::data::Data;
use sha2::{Digest as _, Sha256};

mod run_support;
use run_support::{Env, assert_snapshot_matches_journal, code, node, text};

/// Whether the kernel can enforce read-only nodes; prints why not, and fails instead of
/// skipping where the sandbox is required.
fn kernel_ready(test: &str) -> bool {
    let support = KernelSupport::detect().unwrap();
    let ready = support.landlock_abi.is_some_and(|abi| abi >= 3) && support.seccomp;
    if ready {
        return true;
    }
    let required = std::env::var_os("CI").is_some_and(|v| !v.is_empty())
        || std::env::var_os("RHO_REQUIRE_SANDBOX").is_some_and(|v| v == "1");
    assert!(
        !required,
        "{test}: the kernel cannot enforce read-only nodes ({}), and CI or \
         RHO_REQUIRE_SANDBOX=1 requires it",
        support.describe()
    );
    eprintln!(
        "SKIPPING {test}: the kernel cannot enforce read-only nodes ({}); set CI or \
         RHO_REQUIRE_SANDBOX=1 to make this a failure",
        support.describe()
    );
    false
}

fn workflow(nodes: &[String], exports: &str, extra: &str) -> String {
    format!(
        "def build(inputs):\n    return workflow(name = \"t\", nodes = [{}], exports = {{{exports}}}{extra})\n\nWORKFLOW = define(inputs = {{}}, build = build)\n",
        nodes.join(", ")
    )
}

fn run_id(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("run_id: "))
        .unwrap_or_else(|| panic!("no run_id in {stdout}"))
        .to_owned()
}

/// A digest of everything under `root`: names, kinds, modes, sizes, modification times and
/// contents, in name order.
fn tree_digest(root: &Path) -> String {
    fn walk(dir: &Path, rel: &str, hasher: &mut Sha256) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let name = format!("{rel}/{}", path.file_name().unwrap().to_string_lossy());
            hasher.update(format!(
                "{name} {:o} {} {} {}\n",
                meta.mode(),
                meta.len(),
                meta.mtime(),
                meta.mtime_nsec()
            ));
            if meta.is_dir() {
                walk(&path, &name, hasher);
            } else if meta.is_file() {
                hasher.update(std::fs::read(&path).unwrap());
            }
        }
    }
    let mut hasher = Sha256::new();
    walk(root, "", &mut hasher);
    hasher.finalize().iter().fold(String::new(), |mut out, b| {
        use std::fmt::Write as _;
        let _ = write!(out, "{b:02x}");
        out
    })
}

fn sh(script: &str) -> String {
    format!("[\"sh\", \"-c\", {script:?}]")
}

fn stderr_of(env: &Env, id: &str, node: &str) -> String {
    std::fs::read_to_string(
        env.run_dir(id)
            .join(format!("nodes/{node}/attempts/1/stderr")),
    )
    .unwrap_or_default()
}

#[test]
fn read_only_node_cannot_change_files_inside_or_outside_the_checkout() {
    if !kernel_ready("read_only_node_cannot_change_files_inside_or_outside_the_checkout") {
        return;
    }
    let env = Env::new();
    let outside = env.ws.parent().unwrap().join("outside");
    std::fs::create_dir(&outside).unwrap();
    for dir in [&env.ws, &outside] {
        std::fs::write(dir.join("f"), "original\n").unwrap();
        std::fs::set_permissions(dir.join("f"), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let operations = [
        ("create", "echo x > {d}/new"),
        ("append", "echo x >> {d}/f"),
        ("truncate", "truncate -s 0 {d}/f"),
        ("rename", "mv {d}/f {d}/g"),
        ("unlink", "rm -f {d}/f"),
        ("chmod", "chmod 600 {d}/f"),
        ("mkdir", "mkdir {d}/sub"),
        ("symlink", "ln -s f {d}/link"),
        ("touch", "touch -d 2001-01-01 {d}/f"),
    ];
    let mut nodes = Vec::new();
    let mut names = Vec::new();
    for (place, dir) in [("in", env.ws.clone()), ("out", outside.clone())] {
        for (op, script) in operations {
            let name = format!("{op}_{place}");
            let script = script.replace("{d}", &dir.display().to_string());
            nodes.push(node(
                &name,
                ", access = \"read_only\", allow_failure = True",
                &sh(&script),
            ));
            names.push(name);
        }
    }
    nodes.push(node(
        "scratch",
        ", access = \"read_only\"",
        &sh(
            "set -e; test -d \"$TMPDIR\"; echo ok > \"$TMPDIR/x\"; echo more >> \"$TMPDIR/x\"; \
             mkdir \"$TMPDIR/d\"; mv \"$TMPDIR/x\" \"$TMPDIR/d/y\"; cat \"$TMPDIR/d/y\"; \
             rm -r \"$TMPDIR/d\"; echo gone > /dev/null; cat f; pwd",
        ),
    ));
    env.write("wf.star", &workflow(&nodes, "", ""));
    let before = (tree_digest(&env.ws), tree_digest(&outside));
    let out = env.rho(&["workflow", "run", "wf.star", "--yes"]);
    assert_eq!(
        code(&out),
        0,
        "allow_failure keeps the outcome: {}",
        text(&out)
    );
    let id = run_id(&out);
    let (state, _) = assert_snapshot_matches_journal(&env.run_dir(&id));
    for name in &names {
        let task = &state.root().tasks[name.as_str()];
        assert_eq!(task.state, NodeState::Failure, "{name} must be refused");
        let stderr = stderr_of(&env, &id, name);
        assert!(
            stderr.contains("Permission denied") || stderr.contains("Operation not permitted"),
            "{name}: the kernel refused it: {stderr}"
        );
    }
    assert_eq!(
        state.root().node_state("scratch"),
        Some(NodeState::Success),
        "{}",
        stderr_of(&env, &id, "scratch")
    );
    let stdout =
        std::fs::read_to_string(env.run_dir(&id).join("nodes/scratch/attempts/1/stdout")).unwrap();
    assert_eq!(
        stdout,
        format!("ok\nmore\noriginal\n{}\n", env.ws.display()),
        "TMPDIR is writable, the checkout readable"
    );
    assert_eq!(
        (tree_digest(&env.ws), tree_digest(&outside)),
        before,
        "nothing changed on disk"
    );
    assert_eq!(
        std::fs::read_to_string(env.ws.join("f")).unwrap(),
        "original\n"
    );
    // The graph shows the access mode.
    let graph = env.rho(&["workflow", "graph", &id]);
    assert!(
        text(&graph).contains("scratch (command, read_only)"),
        "{}",
        text(&graph)
    );
}

#[test]
fn scratch_directory_is_private_per_attempt_and_removed_afterwards() {
    if !kernel_ready("scratch_directory_is_private_per_attempt_and_removed_afterwards") {
        return;
    }
    let env = Env::new();
    let nodes: Vec<String> = ["a", "b"]
        .iter()
        .map(|n| {
            node(
                n,
                ", access = \"read_only\", output = schema.stdout_json(schema.record({\"dir\": schema.string(), \"empty\": schema.bool()}))",
                &sh("e=true; [ -z \"$(ls -A \"$TMPDIR\")\" ] || e=false; touch \"$TMPDIR/mark\"; \
                     printf '{\"dir\": \"%s\", \"empty\": %s}' \"$TMPDIR\" $e"),
            )
        })
        .collect();
    env.write(
        "wf.star",
        &workflow(
            &nodes,
            "\"a\": output(\"a\", [\"dir\"]), \"b\": output(\"b\", [\"dir\"]), \"ea\": output(\"a\", [\"empty\"]), \"eb\": output(\"b\", [\"empty\"])",
            "",
        ),
    );
    let out = env.rho(&["workflow", "run", "wf.star", "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let (state, _) = assert_snapshot_matches_journal(&env.run_dir(&run_id(&out)));
    let exports = &state.root().result.as_ref().unwrap().exports;
    let (Data::String(a), Data::String(b)) = (&exports["a"].value, &exports["b"].value) else {
        panic!("{exports:?}");
    };
    assert_ne!(a, b, "each attempt has its own scratch directory");
    assert_eq!(exports["ea"].value, Data::Bool(true));
    assert_eq!(exports["eb"].value, Data::Bool(true));
    assert!(
        !Path::new(a).exists() && !Path::new(b).exists(),
        "removed after the attempt"
    );
}

#[test]
fn a_scratch_directory_serves_a_later_node_only_when_left_empty_and_stays_confined() {
    if !kernel_ready(
        "a_scratch_directory_serves_a_later_node_only_when_left_empty_and_stays_confined",
    ) {
        return;
    }
    let env = Env::new();
    let outside = format!("rho-outside-{}", std::process::id());
    // Each node reports its TMPDIR, whether it found it empty, and whether the kernel
    // refused a write in the checkout, one beside its scratch directory and a `chmod` in it
    // (the seccomp filter, which every node of the run gets from one launcher thread); `a`
    // leaves a file behind, `b` and `c` leave nothing.
    let script = |leave: bool| {
        sh(&format!(
            "e=true; [ -z \"$(ls -A \"$TMPDIR\")\" ] || e=false; r=true; \
             if (echo x > ./written) 2>/dev/null; then r=false; fi; \
             if (echo x > \"$(dirname \"$TMPDIR\")/{outside}\") 2>/dev/null; then r=false; fi; \
             echo mine > \"$TMPDIR/own\"; [ \"$(cat \"$TMPDIR/own\")\" = mine ] || exit 4; \
             if chmod 600 \"$TMPDIR/own\" 2>/dev/null; then r=false; fi; \
             {}printf '{{\"dir\": \"%s\", \"empty\": %s, \"refused\": %s}}' \"$TMPDIR\" $e $r",
            if leave { "" } else { "rm \"$TMPDIR/own\"; " }
        ))
    };
    let schema = ", access = \"read_only\", output = schema.stdout_json(schema.record({\"dir\": schema.string(), \"empty\": schema.bool(), \"refused\": schema.bool()}))";
    let nodes = vec![
        node("a", schema, &script(true)),
        node("b", &format!("{schema}, needs = [\"a\"]"), &script(false)),
        node("c", &format!("{schema}, needs = [\"b\"]"), &script(false)),
    ];
    let exports: Vec<String> = ["a", "b", "c"]
        .iter()
        .flat_map(|n| {
            ["dir", "empty", "refused"]
                .iter()
                .map(move |f| format!("\"{n}_{f}\": output(\"{n}\", [\"{f}\"])"))
        })
        .collect();
    env.write("wf.star", &workflow(&nodes, &exports.join(", "), ""));
    let before = tree_digest(&env.ws);
    let out = env.rho(&["workflow", "run", "wf.star", "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let (state, _) = assert_snapshot_matches_journal(&env.run_dir(&run_id(&out)));
    let exports = &state.root().result.as_ref().unwrap().exports;
    let dir = |n: &str| match &exports[&format!("{n}_dir")].value {
        Data::String(d) => PathBuf::from(d),
        other => panic!("{n}: {other:?}"),
    };
    for n in ["a", "b", "c"] {
        assert_eq!(
            exports[&format!("{n}_empty")].value,
            Data::Bool(true),
            "{n} found its scratch directory empty"
        );
        assert_eq!(
            exports[&format!("{n}_refused")].value,
            Data::Bool(true),
            "{n}: writes outside its scratch directory, and chmod inside, were refused"
        );
    }
    assert_ne!(
        dir("a"),
        dir("b"),
        "a directory left with content is not handed on"
    );
    assert_eq!(
        dir("b"),
        dir("c"),
        "an empty one serves the next node, whose prepared ruleset still confines it"
    );
    for n in ["a", "b", "c"] {
        assert!(
            !dir(n).exists(),
            "{n}'s scratch directory is gone after the run"
        );
    }
    assert!(!dir("a").with_file_name(&outside).exists());
    assert_eq!(
        tree_digest(&env.ws),
        before,
        "nothing changed in the checkout"
    );
}

#[test]
fn concurrent_read_only_nodes_cannot_write_each_others_scratch_or_anything_else() {
    if !kernel_ready("concurrent_read_only_nodes_cannot_write_each_others_scratch_or_anything_else")
    {
        return;
    }
    let env = Env::new();
    // A name no other test's scratch directory holds, so each node finds its sibling's.
    let mark = format!(
        "sibling-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    // Each node marks its scratch directory, waits (up to 10 s) until its sibling's marked
    // directory exists, then tries to write there and beside the checkout, and stays alive
    // a little so the sibling still finds it.
    let script = format!(
        "touch \"$TMPDIR/{mark}\"; parent=$(dirname \"$TMPDIR\"); other=; i=0; \
         while [ -z \"$other\" ]; do \
           for d in \"$parent\"/rho-scratch-*; do \
             [ \"$d\" != \"$TMPDIR\" ] && [ -e \"$d/{mark}\" ] && other=$d; \
           done; \
           i=$((i+1)); [ $i -gt 200 ] && {{ echo 'no sibling'; exit 3; }}; \
           [ -z \"$other\" ] && sleep 0.05; \
         done; \
         if echo x > \"$other/intruder\"; then echo 'wrote the sibling scratch'; exit 1; fi; \
         if mkdir \"$other/d\"; then echo 'made a directory in the sibling scratch'; exit 1; fi; \
         if rm \"$other/{mark}\"; then echo 'removed the sibling mark'; exit 1; fi; \
         if echo x > ./written; then echo 'wrote the checkout'; exit 1; fi; \
         echo mine > \"$TMPDIR/own\" && cat \"$TMPDIR/own\"; sleep 0.5"
    );
    let nodes: Vec<String> = ["a", "b"]
        .iter()
        .map(|n| node(n, ", access = \"read_only\"", &sh(&script)))
        .collect();
    env.write(
        "wf.star",
        &workflow(&nodes, "", ", max_parallel_commands = 2"),
    );
    let before = tree_digest(&env.ws);
    let out = env.rho(&["workflow", "run", "wf.star", "--yes"]);
    let id = run_id(&out);
    for n in ["a", "b"] {
        let stdout = std::fs::read_to_string(
            env.run_dir(&id)
                .join(format!("nodes/{n}/attempts/1/stdout")),
        )
        .unwrap_or_default();
        assert_eq!(
            stdout,
            "mine\n",
            "{n}: its own scratch is writable, its sibling's and the checkout are not: {}",
            stderr_of(&env, &id, n)
        );
        let stderr = stderr_of(&env, &id, n);
        assert!(
            stderr.matches("Permission denied").count() >= 3,
            "{n}: the kernel refused the writes: {stderr}"
        );
    }
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(
        tree_digest(&env.ws),
        before,
        "nothing changed in the checkout"
    );
}

#[test]
fn network_none_refuses_a_loopback_connection() {
    if !kernel_ready("network_none_refuses_a_loopback_connection") {
        return;
    }
    let env = Env::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    let tcp = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    let datagram = format!("echo dgram > /dev/udp/127.0.0.1/{udp_port} && echo sent");
    let bash = |script: &str| format!("[\"bash\", \"-c\", {script:?}]");
    env.write(
        "wf.star",
        &workflow(
            &[
                node(
                    "denied",
                    ", network = \"none\", allow_failure = True",
                    &bash(&tcp),
                ),
                node(
                    "denied_ro",
                    ", network = \"none\", access = \"read_only\", allow_failure = True",
                    &bash(&tcp),
                ),
                node(
                    "udp",
                    ", network = \"none\", allow_failure = True",
                    &bash(&datagram),
                ),
                node("control", "", &bash(&tcp)),
            ],
            "",
            "",
        ),
    );
    let out = env.rho(&["workflow", "run", "wf.star", "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let id = run_id(&out);
    let (state, _) = assert_snapshot_matches_journal(&env.run_dir(&id));
    for name in ["denied", "denied_ro", "udp"] {
        assert_eq!(
            state.root().node_state(name),
            Some(NodeState::Failure),
            "{name}"
        );
        let stderr = stderr_of(&env, &id, name);
        assert!(
            stderr.contains("Permission denied") || stderr.contains("Operation not permitted"),
            "{name}: {stderr}"
        );
    }
    assert_eq!(
        state.root().node_state("control"),
        Some(NodeState::Success),
        "the listener accepts unconfined nodes"
    );
    // Exactly one connection reached the listener: the control node's.
    listener.set_nonblocking(true).unwrap();
    let mut accepted = 0;
    while listener.accept().is_ok() {
        accepted += 1;
    }
    assert_eq!(accepted, 1);
    udp.set_nonblocking(true).unwrap();
    let mut buf = [0_u8; 64];
    assert!(udp.recv(&mut buf).is_err(), "no datagram got through");
    let graph = text(&env.rho(&["workflow", "graph", &id]));
    assert!(
        graph.contains("denied (command, allow_failure, network none)"),
        "{graph}"
    );
}

/// Every maximal block of decisions and launch intents in the journal is exactly one
/// scheduling pass over the state before it; returns the launches of each pass.
fn replay_launch_decisions(dir: &Path) -> Vec<Vec<String>> {
    let (_, events) = assert_snapshot_matches_journal(dir);
    let bytes = std::fs::read(dir.join("program.cbor")).unwrap();
    let program: rho_ipc::program::FrozenProgram =
        rho_ipc::canonical::from_canonical_bytes(&bytes).unwrap();
    let is_pass_event = |e: &Event| match &e.kind {
        EventKind::NodeStateChanged { state, .. } => matches!(
            state,
            NodeState::Ready | NodeState::Skipped | NodeState::Blocked
        ),
        EventKind::LaunchIntended { .. } => true,
        _ => false,
    };
    let mut state = State::empty();
    let mut passes = Vec::new();
    let mut i = 0;
    while i < events.len() {
        if is_pass_event(&events[i]) && state.lifecycle == Lifecycle::Running {
            let pass = scheduler::pass(&program, state.root());
            let mut j = i;
            while j < events.len() && is_pass_event(&events[j]) {
                j += 1;
            }
            let launched: Vec<String> = events[i..j]
                .iter()
                .filter_map(|e| match &e.kind {
                    EventKind::LaunchIntended { node, .. } => Some(node.clone()),
                    _ => None,
                })
                .collect();
            assert_eq!(launched, pass.launches, "the journal's launches replay");
            for e in &events[i..j] {
                apply(&mut state, e).unwrap();
            }
            passes.push(launched);
            i = j;
        } else {
            apply(&mut state, &events[i]).unwrap();
            i += 1;
        }
    }
    passes
}

#[test]
fn read_only_nodes_overlap_while_mutating_nodes_run_alone() {
    if !kernel_ready("read_only_nodes_overlap_while_mutating_nodes_run_alone") {
        return;
    }
    let env = Env::new();
    let stamp = "s=$(date +%s%N); echo $s > \"$TMPDIR/start\"; sleep 1; \
                 e=$(date +%s%N); echo $e > \"$TMPDIR/end\"; \
                 printf '{\"start\": %s, \"end\": %s}' $(cat \"$TMPDIR/start\") $(cat \"$TMPDIR/end\")";
    let mutating =
        "s=$(date +%s%N); sleep 0.3; e=$(date +%s%N); printf '{\"start\": %s, \"end\": %s}' $s $e";
    let schema = ", output = schema.stdout_json(schema.record({\"start\": schema.integer(), \"end\": schema.integer()}))";
    let mut nodes = vec![
        node("a_write", schema, &sh(mutating)),
        node("z_write", schema, &sh(mutating)),
    ];
    let readers = ["r1", "r2", "r3", "r4"];
    for r in readers {
        nodes.push(node(
            r,
            &format!(", access = \"read_only\"{schema}"),
            &sh(stamp),
        ));
    }
    let all = ["a_write", "r1", "r2", "r3", "r4", "z_write"];
    let exports: Vec<String> = all
        .iter()
        .flat_map(|n| {
            [
                format!("\"{n}_start\": output(\"{n}\", [\"start\"])"),
                format!("\"{n}_end\": output(\"{n}\", [\"end\"])"),
            ]
        })
        .collect();
    env.write(
        "wf.star",
        &workflow(&nodes, &exports.join(", "), ", max_parallel_commands = 3"),
    );
    let out = env.rho(&["workflow", "run", "wf.star", "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let dir = env.run_dir(&run_id(&out));
    let (state, _) = assert_snapshot_matches_journal(&dir);
    let exports = &state.root().result.as_ref().unwrap().exports;
    let int = |key: String| match &exports[&key].value {
        Data::Int(n) => *n,
        other => panic!("{key}: {other:?}"),
    };
    let spans: BTreeMap<&str, (i64, i64)> = all
        .iter()
        .map(|n| (*n, (int(format!("{n}_start")), int(format!("{n}_end")))))
        .collect();
    let overlaps = |a: (i64, i64), b: (i64, i64)| a.0 < b.1 && b.0 < a.1;
    // A mutating node never overlaps anything.
    for w in ["a_write", "z_write"] {
        for (other, span) in &spans {
            if other != &w {
                assert!(
                    !overlaps(spans[w], *span),
                    "{w} overlaps {other}: {spans:?}"
                );
            }
        }
    }
    // The first three readers ran together; the fourth waited for a lane (capacity 3).
    assert!(overlaps(spans["r1"], spans["r2"]), "{spans:?}");
    assert!(overlaps(spans["r1"], spans["r3"]), "{spans:?}");
    assert!(overlaps(spans["r2"], spans["r3"]), "{spans:?}");
    let at_once = |t: i64| spans.values().filter(|s| s.0 <= t && t < s.1).count();
    let most = spans.values().map(|s| at_once(s.0)).max().unwrap();
    assert_eq!(
        most, 3,
        "max_parallel_commands = 3 bounds the overlap: {spans:?}"
    );
    // The program froze the workflow's capacity, and the journal replays every decision.
    let program: rho_ipc::program::FrozenProgram =
        rho_ipc::canonical::from_canonical_bytes(&std::fs::read(dir.join("program.cbor")).unwrap())
            .unwrap();
    assert_eq!(program.scheduler.max_parallel_commands, 3);
    let passes = replay_launch_decisions(&dir);
    let launches: Vec<Vec<String>> = passes.into_iter().filter(|p| !p.is_empty()).collect();
    assert_eq!(
        launches.first().unwrap(),
        &vec!["a_write".to_owned()],
        "the writer goes first and alone"
    );
    assert_eq!(
        launches[1],
        vec!["r1".to_owned(), "r2".to_owned(), "r3".to_owned()],
        "three readers in one pass"
    );
    assert_eq!(launches.concat().len(), 6);
    assert_eq!(launches.last().unwrap(), &vec!["z_write".to_owned()]);
}

#[test]
fn read_only_plan_fails_closed_without_enough_landlock() {
    let env = Env::new();
    env.write(
        "wf.star",
        &workflow(
            &[node("check", ", access = \"read_only\"", r#"["true"]"#)],
            "",
            "",
        ),
    );
    let refused = env
        .command(&["workflow", "plan", "wf.star"])
        .env(REQUIRE_ABI_VAR, "99")
        .output()
        .unwrap();
    assert_eq!(code(&refused), 2, "{}", text(&refused));
    let message = text(&refused);
    assert!(
        message.contains("node `check`")
            && message.contains("access = \"read_only\" cannot be enforced by this kernel")
            && message.contains("Landlock ABI 99 is required"),
        "{message}"
    );
    assert!(
        !env.home.join("workflows/plans").exists()
            || std::fs::read_dir(env.home.join("workflows/plans"))
                .unwrap()
                .filter_map(Result::ok)
                .all(|e| e.file_name().to_string_lossy().starts_with('.')),
        "no plan was stored"
    );
    let bad = env
        .command(&["workflow", "plan", "wf.star"])
        .env(REQUIRE_ABI_VAR, "soon")
        .output()
        .unwrap();
    assert_eq!(code(&bad), 2, "{}", text(&bad));
    assert!(
        text(&bad).contains("RHO_REQUIRE_LANDLOCK_ABI"),
        "{}",
        text(&bad)
    );
    let network = env.ws.join("net.star");
    std::fs::write(
        &network,
        workflow(
            &[node("fetch", ", network = \"none\"", r#"["true"]"#)],
            "",
            "",
        ),
    )
    .unwrap();
    let refused = env
        .command(&["workflow", "plan", "net.star"])
        .env(REQUIRE_ABI_VAR, "99")
        .output()
        .unwrap();
    assert_eq!(code(&refused), 2, "{}", text(&refused));
    assert!(
        text(&refused).contains("network = \"none\" cannot be enforced"),
        "{}",
        text(&refused)
    );
}

#[test]
fn read_only_run_fails_closed_when_the_kernel_cannot_enforce_it() {
    if !kernel_ready("read_only_run_fails_closed_when_the_kernel_cannot_enforce_it") {
        return;
    }
    let env = Env::new();
    let marker = env.ws.parent().unwrap().join("ran");
    env.write(
        "wf.star",
        &workflow(
            &[node(
                "check",
                ", access = \"read_only\"",
                &sh(&format!("echo ran; echo > {}", marker.display())),
            )],
            "",
            "",
        ),
    );
    let plan = env.plan("wf.star");
    let out = env
        .command(&["workflow", "run", &plan, "--yes"])
        .env(REQUIRE_ABI_VAR, "99")
        .output()
        .unwrap();
    assert_eq!(code(&out), 3, "{}", text(&out));
    let id = run_id(&out);
    let (state, events) = assert_snapshot_matches_journal(&env.run_dir(&id));
    let task = &state.root().tasks["check"];
    assert_eq!(task.state, NodeState::Failure);
    let reason = task.reason.clone().unwrap_or_default();
    assert!(
        reason.contains("cannot be enforced by this kernel") && reason.contains("ABI 99"),
        "{reason}"
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.kind, EventKind::Launched { .. })),
        "no process started"
    );
    assert!(!marker.exists());
}

#[test]
fn plain_nodes_are_unchanged_and_keep_their_encoding() {
    // Default access and network are not encoded: a plan without them keeps the digest it
    // had before these fields existed (the committed vectors check the bytes).
    let env = Env::new();
    env.write(
        "wf.star",
        &workflow(&[node("a", "", r#"["true"]"#)], "", ""),
    );
    let plan = env.plan("wf.star");
    let stored = env
        .home
        .join("workflows/plans")
        .join(&plan)
        .join("graph.json");
    let mut doc = String::new();
    std::fs::File::open(stored)
        .unwrap()
        .read_to_string(&mut doc)
        .unwrap();
    assert!(
        doc.contains("\"access\": \"mutating\"") || doc.contains("\"access\":\"mutating\""),
        "{doc}"
    );
    assert!(!doc.contains("\"network\""), "{doc}");
    let _: PathBuf = env.ws.clone();
}
