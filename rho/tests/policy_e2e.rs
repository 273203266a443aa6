//! End to end: permission modes, hooks, trust and consent on real runs. Each test runs the
//! built `rho` (and planner worker) with a cleared environment, a temporary `RHO_HOME` and
//! workspace, plans with `rho workflow run FILE.star --yes`, and checks exit code, output,
//! `status` and the journal together.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::cast_possible_wrap,
    clippy::too_many_lines
)]

use std::fmt::Write as _;
use std::os::fd::{AsFd as _, OwnedFd};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rho::workflow::state::{EventKind, NodeState, Outcome, State};

mod run_support;
use run_support::{assert_snapshot_matches_journal, code, rho_command, text};

struct Env {
    _dir: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
    scratch: PathBuf,
}

impl Env {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let (home, ws, scratch) = (root.join("home"), root.join("ws"), root.join("scratch"));
        for d in [&home, &ws, &scratch] {
            std::fs::create_dir(d).unwrap();
        }
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
        Env {
            _dir: dir,
            home,
            ws,
            scratch,
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        rho_command(&self.home, &self.ws, args)
    }

    /// Runs `rho`; after a `run` or `resume`, the run's snapshot must match its journal.
    fn rho(&self, args: &[&str]) -> Output {
        let out = self.command(args).output().unwrap();
        self.check_run_of(args, &out);
        out
    }

    /// After `workflow run|resume`: `state.json` equals a replay of the journal.
    fn check_run_of(&self, args: &[&str], out: &Output) {
        let id = match args {
            ["workflow", "run", ..] => String::from_utf8_lossy(&out.stdout)
                .lines()
                .find_map(|l| l.strip_prefix("run_id: "))
                .map(str::to_owned),
            ["workflow", "resume", id, ..] => Some((*id).to_owned()),
            _ => None,
        };
        if let Some(id) = id
            && self.run_dir(&id).is_dir()
        {
            assert_snapshot_matches_journal(&self.run_dir(&id));
        }
    }

    /// `rho workflow run wf.star --yes` plus `extra` arguments.
    fn run(&self, extra: &[&str]) -> Output {
        let mut args = vec!["workflow", "run", "wf.star", "--yes"];
        args.extend_from_slice(extra);
        self.rho(&args)
    }

    fn workflow(&self, nodes: &[String]) {
        let text = format!(
            "def build(inputs):\n    return workflow(name = \"t\", nodes = [{}])\n\nWORKFLOW = define(inputs = {{}}, build = build)\n",
            nodes.join(", ")
        );
        std::fs::write(self.ws.join("wf.star"), text).unwrap();
    }

    /// An executable `#!/bin/sh` script.
    #[allow(clippy::unused_self)] // a method so tests read `env.script(...)` like the rest
    fn script(&self, path: &Path, body: &str) -> PathBuf {
        std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.to_owned()
    }

    /// `$RHO_HOME/hooks.toml` with `(id, on, argv)` hooks.
    fn user_hooks(&self, hooks: &[(&str, &str, Vec<String>)]) {
        std::fs::write(self.home.join("hooks.toml"), hooks_toml(hooks)).unwrap();
    }

    fn run_dirs(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = std::fs::read_dir(self.home.join("workflows/runs"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
                    .collect()
            })
            .unwrap_or_default();
        out.sort();
        out
    }

    fn run_dir(&self, id: &str) -> PathBuf {
        self.home.join("workflows/runs").join(id)
    }

    /// The replayed state and the journal of run `id` (whose snapshot must match it).
    fn journal(&self, id: &str) -> (State, Vec<rho::workflow::state::Event>) {
        assert_snapshot_matches_journal(&self.run_dir(id))
    }

    fn status_text(&self, id: &str) -> String {
        let out = self.rho(&["workflow", "status", id]);
        assert_eq!(code(&out), 0, "{}", text(&out));
        text(&out)
    }

    fn status_json(&self, id: &str) -> serde_json::Value {
        let out = self.rho(&["workflow", "status", id, "--output", "json"]);
        assert_eq!(code(&out), 0, "{}", text(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

impl Drop for Env {
    /// Whatever a test did, every run it left must still be explained by its journal.
    fn drop(&mut self) {
        if !std::thread::panicking() {
            for dir in self.run_dirs() {
                assert_snapshot_matches_journal(&dir);
            }
        }
    }
}

fn hooks_toml(hooks: &[(&str, &str, Vec<String>)]) -> String {
    let mut toml = "version = 1\n".to_owned();
    for (id, on, argv) in hooks {
        let _ = write!(
            toml,
            "[[hook]]\nid = \"{id}\"\non = \"{on}\"\ncommand = {argv:?}\ntimeout = \"30s\"\n"
        );
    }
    toml
}

fn node(name: &str, argv: &str) -> String {
    format!(
        "command(name = \"{name}\", argv = {argv}, cwd = \".\", timeout_seconds = 60, max_output_bytes = 4096)"
    )
}

/// A node that creates `marker` when (and only when) it runs.
fn touch_node(name: &str, marker: &Path) -> String {
    node(name, &format!(r#"["touch", "{}"]"#, marker.display()))
}

fn run_id(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("run_id: "))
        .unwrap_or_else(|| panic!("no run_id in {}", text(out)))
        .to_owned()
}

/// Waits (generously) for `what` to hold; a deadline, not a timing assertion.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn sigterm(child: &Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
}

#[test]
fn plan_mode_denies_by_policy_even_with_consent() {
    let env = Env::new();
    let marker = env.scratch.join("ran");
    env.workflow(&[touch_node("a", &marker)]);
    let out = env.run(&["--permission-mode", "plan"]);
    assert_eq!(code(&out), 4, "a denial exits 4: {}", text(&out));
    assert!(
        text(&out).contains("permission mode: plan (--permission-mode)"),
        "{}",
        text(&out)
    );
    assert!(!marker.exists(), "a node denied by policy must not run");
    let id = run_id(&out);

    let status = env.status_text(&id);
    assert!(
        status.contains(
            "denied by policy: permission mode plan forbids process execution (permission mode plan)"
        ),
        "{status}"
    );
    assert!(status.contains("outcome: denial"), "{status}");
    assert!(status.contains("consent: --yes at "), "{status}");
    assert!(
        status.contains("permission mode: plan (recorded at creation"),
        "{status}"
    );

    let json = env.status_json(&id);
    assert_eq!(json["outcome"], "denial");
    assert_eq!(json["permission_mode"], "plan");
    assert_eq!(json["nodes"]["a"]["state"], "denial");
    let denial = &json["nodes"]["a"]["attempts"][0]["denial"];
    assert_eq!(denial["decided_by"], "policy");
    assert_eq!(denial["mode"], "plan");
    assert!(
        denial["reason"]
            .as_str()
            .unwrap()
            .contains("plan forbids process execution"),
        "{denial}"
    );
    // The consent is recorded (digest, method, time) and granted nothing.
    let confirmation = &json["manifest"]["confirmation"];
    assert_eq!(confirmation["method"], "--yes");
    assert_eq!(confirmation["digest"], json["program_digest"]);
    assert!(confirmation["at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(json["manifest"]["policy"]["permission_mode"], "plan");
}

#[test]
fn headless_supervised_fails_closed_without_prompting() {
    let env = Env::new();
    let marker = env.scratch.join("ran");
    env.workflow(&[touch_node("a", &marker)]);
    let out = env.run(&["--permission-mode", "supervised"]);
    assert_eq!(code(&out), 4, "{}", text(&out));
    assert!(!marker.exists());
    let (state, _) = env.journal(&run_id(&out));
    let denial = state.root().tasks["a"].attempts[0].denial.clone().unwrap();
    assert_eq!(
        (denial.decided_by.as_str(), denial.mode.as_str()),
        ("policy", "supervised")
    );
    assert!(
        denial.reason.contains("no approval responder is available"),
        "{}",
        denial.reason
    );
    assert!(
        !text(&out).contains("[y/N]"),
        "nothing may be asked headless: {}",
        text(&out)
    );
}

#[test]
fn bypass_is_the_default_runs_the_node_and_says_so() {
    let env = Env::new();
    let marker = env.scratch.join("ran");
    env.workflow(&[touch_node("a", &marker)]);
    let out = env.run(&[]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(marker.exists(), "bypass runs the node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("permission mode: bypass (default)"),
        "{stdout}"
    );
    assert!(stdout.contains("(permission mode bypass)"), "{stdout}");
    let json = env.status_json(&run_id(&out));
    assert_eq!(json["outcome"], "success");
    assert_eq!(json["permission_mode"], "bypass");
}

#[test]
fn a_denying_user_hook_denies_with_its_id_and_reason() {
    let env = Env::new();
    let marker = env.scratch.join("ran");
    let guard = env.script(
        &env.scratch.join("guard.sh"),
        "echo '{\"version\":1,\"decision\":\"deny\",\"reason\":\"frozen branch\"}'\nexit 2",
    );
    env.user_hooks(&[(
        "guard",
        "before_tool_use",
        vec![guard.display().to_string()],
    )]);
    env.workflow(&[touch_node("a", &marker)]);
    // The hook runs although bypass allows, and its denial stands.
    let out = env.run(&["--permission-mode", "bypass"]);
    assert_eq!(code(&out), 4, "{}", text(&out));
    assert!(!marker.exists(), "a hook-denied node must not run");
    let id = run_id(&out);
    let status = env.status_text(&id);
    assert!(
        status.contains("denied by hook `guard`: frozen branch (permission mode bypass)"),
        "{status}"
    );
    let json = env.status_json(&id);
    let denial = &json["nodes"]["a"]["attempts"][0]["denial"];
    assert_eq!(denial["decided_by"], "hook `guard`");
    assert_eq!(denial["reason"], "frozen branch");
}

#[test]
fn project_hooks_run_only_in_a_trusted_workspace_and_resume_rechecks_that_trust() {
    let env = Env::new();
    let marker = env.scratch.join("project-hook-ran");
    std::fs::create_dir(env.ws.join(".rho")).unwrap();
    env.script(
        &env.ws.join(".rho/mark.sh"),
        &format!(
            "touch {}\necho '{{\"version\":1,\"decision\":\"continue\"}}'",
            marker.display()
        ),
    );
    std::fs::write(
        env.ws.join(".rho/hooks.toml"),
        hooks_toml(&[("mark", "before_tool_use", vec!["./.rho/mark.sh".to_owned()])]),
    )
    .unwrap();
    env.workflow(&[node("a", r#"["true"]"#)]);

    let out = env.run(&["--permission-mode", "bypass"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(!marker.exists(), "an untrusted project hook must never run");
    let untrusted = env.status_json(&run_id(&out));
    assert_eq!(
        untrusted["manifest"]["policy"]["trust"]["project_hooks"],
        false
    );

    let ws = env.ws.display().to_string();
    let added = env.rho(&["trust", "add", &ws]);
    assert_eq!(code(&added), 0, "{}", text(&added));
    let out = env.run(&["--permission-mode", "bypass"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(marker.exists(), "a trusted project hook runs");
    let id = run_id(&out);
    let trusted = env.status_json(&id);
    assert_eq!(
        trusted["manifest"]["policy"]["trust"]["project_hooks"],
        true
    );
    assert!(
        env.status_text(&id)
            .contains("relies on trust in: project hooks")
    );

    // The run relied on project hooks (which may deny); without that trust it cannot go on.
    let removed = env.rho(&["trust", "remove", &ws]);
    assert_eq!(code(&removed), 0, "{}", text(&removed));
    let resumed = env.rho(&["workflow", "resume", &id, "--yes"]);
    assert_eq!(code(&resumed), 2, "{}", text(&resumed));
    let message = text(&resumed);
    assert!(
        message.contains("the plan needed trust that is gone")
            && message.contains("project hooks")
            && message.contains("create a new plan"),
        "{message}"
    );
}

#[test]
fn the_mode_comes_from_flag_then_environment_then_config() {
    let env = Env::new();
    env.workflow(&[node("a", r#"["true"]"#)]);

    let out = env
        .command(&["workflow", "run", "wf.star", "--yes"])
        .env("RHO_PERMISSION_MODE", "plan")
        .output()
        .unwrap();
    assert_eq!(code(&out), 4, "{}", text(&out));
    assert!(
        text(&out).contains("permission mode: plan (RHO_PERMISSION_MODE)"),
        "{}",
        text(&out)
    );

    let out = env
        .command(&[
            "workflow",
            "run",
            "wf.star",
            "--yes",
            "--permission-mode",
            "bypass",
        ])
        .env("RHO_PERMISSION_MODE", "plan")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "the flag wins: {}", text(&out));
    assert!(text(&out).contains("permission mode: bypass (--permission-mode)"));

    std::fs::write(
        env.home.join("config.toml"),
        "[behavior]\npermission_mode = \"plan\"\n",
    )
    .unwrap();
    let out = env.run(&[]);
    assert_eq!(code(&out), 4, "{}", text(&out));
    assert!(
        text(&out).contains("permission mode: plan ([behavior] permission_mode in config.toml)"),
        "{}",
        text(&out)
    );
    let out = env.run(&["--permission-mode", "bypass"]);
    assert_eq!(code(&out), 0, "the flag wins over config: {}", text(&out));
    let out = env
        .command(&["workflow", "run", "wf.star", "--yes"])
        .env("RHO_PERMISSION_MODE", "bypass")
        .output()
        .unwrap();
    assert_eq!(
        code(&out),
        0,
        "the environment wins over config: {}",
        text(&out)
    );
}

#[test]
fn an_unknown_mode_is_a_usage_error_naming_its_source() {
    let env = Env::new();
    env.workflow(&[node("a", r#"["true"]"#)]);

    let out = env.run(&["--permission-mode", "yolo"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(
        text(&out).contains("invalid permission mode `yolo` from --permission-mode"),
        "{}",
        text(&out)
    );

    let out = env
        .command(&["workflow", "run", "wf.star", "--yes"])
        .env("RHO_PERMISSION_MODE", "Plan")
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(
        text(&out).contains("invalid permission mode `Plan` from RHO_PERMISSION_MODE"),
        "{}",
        text(&out)
    );

    std::fs::write(
        env.home.join("config.toml"),
        "[behavior]\npermission_mode = \"sometimes\"\n",
    )
    .unwrap();
    let out = env.run(&[]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    let message = text(&out);
    assert!(
        message.contains("config.toml")
            && message.contains("permission_mode")
            && message.contains("sometimes"),
        "{message}"
    );
    assert!(env.run_dirs().is_empty(), "nothing may run with a bad mode");
}

#[test]
fn observational_hooks_see_the_run_and_their_failures_change_nothing() {
    let env = Env::new();
    let log = env.scratch.join("events.log");
    let note = env.script(
        &env.scratch.join("note.sh"),
        &format!("echo \"$1\" >> {}", log.display()),
    );
    let broken = env.script(&env.scratch.join("broken.sh"), "echo boom >&2\nexit 1");
    let note = note.display().to_string();
    let mut hooks: Vec<(&str, &str, Vec<String>)> = [
        "workflow_started",
        "workflow_node_started",
        "workflow_node_finished",
        "workflow_completed",
        "workflow_failed",
        "workflow_cancelled",
    ]
    .into_iter()
    .map(|on| (on, on, vec![note.clone(), on.to_owned()]))
    .collect();
    hooks.push((
        "broken",
        "workflow_node_finished",
        vec![broken.display().to_string()],
    ));
    env.user_hooks(&hooks);
    env.workflow(&[node("a", r#"["true"]"#)]);

    let out = env.run(&[]);
    assert_eq!(
        code(&out),
        0,
        "a failing observer changes nothing: {}",
        text(&out)
    );
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "workflow_started\nworkflow_node_started\nworkflow_node_finished\nworkflow_completed\n"
    );
    assert!(
        text(&out).contains("warning: user hook `broken` on workflow_node_finished (node a)"),
        "{}",
        text(&out)
    );
    let id = run_id(&out);
    let (state, events) = env.journal(&id);
    assert_eq!(state.root().node_state("a"), Some(NodeState::Success));
    let failed: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::HookFailed { failure } => Some(failure.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].hook_id, "broken");
    assert_eq!(failed[0].event, "workflow_node_finished");
    assert_eq!(
        (failed[0].node.as_deref(), failed[0].attempt),
        (Some("a"), Some(1))
    );
    assert!(failed[0].detail.contains("boom"), "{}", failed[0].detail);
    assert!(
        env.status_text(&id).contains(
            "hook failed: user hook `broken` on workflow_node_finished (node a attempt 1)"
        ),
    );
    assert_eq!(
        env.status_json(&id)["hook_failures"][0]["hook_id"],
        "broken"
    );

    std::fs::remove_file(&log).unwrap();
    let out = env.run(&["--permission-mode", "plan"]);
    assert_eq!(code(&out), 4, "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "workflow_started\nworkflow_node_started\nworkflow_node_finished\nworkflow_failed\n"
    );
}

#[test]
fn resume_runs_under_the_recorded_mode_when_current_settings_are_wider() {
    let env = Env::new();
    let marker = env.scratch.join("ran");
    let (waiting, release) = (env.scratch.join("waiting"), env.scratch.join("release"));
    // Holds the first owner in `workflow_started`, before any node is decided, so the run
    // can be cancelled with its node untouched.
    let hold = env.script(
        &env.scratch.join("hold.sh"),
        &format!(
            "[ -e {r} ] && exit 0\ntouch {w}\nwhile [ ! -e {r} ]; do sleep 0.05; done",
            r = release.display(),
            w = waiting.display()
        ),
    );
    env.user_hooks(&[("hold", "workflow_started", vec![hold.display().to_string()])]);
    env.workflow(&[touch_node("a", &marker)]);
    let child = env
        .command(&[
            "workflow",
            "run",
            "wf.star",
            "--yes",
            "--permission-mode",
            "plan",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the workflow_started hook", || waiting.exists());
    sigterm(&child);
    std::fs::write(&release, "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 5, "{}", text(&out));
    let id = run_id(&out);
    assert_eq!(
        env.journal(&id).0.root().node_state("a"),
        Some(NodeState::Cancellation)
    );

    let resumed = env.rho(&[
        "workflow",
        "resume",
        &id,
        "--yes",
        "--permission-mode",
        "bypass",
    ]);
    assert_eq!(
        code(&resumed),
        4,
        "the recorded plan mode still applies: {}",
        text(&resumed)
    );
    assert!(
        text(&resumed).contains(
            "permission mode: plan (recorded when the run was created; --permission-mode asked \
             for bypass"
        ),
        "{}",
        text(&resumed)
    );
    assert!(!marker.exists(), "resume must not widen plan to bypass");
    let (state, events) = env.journal(&id);
    let attempt = state.root().tasks["a"].attempts.last().unwrap().clone();
    assert_eq!(attempt.denial.unwrap().mode, "plan");
    let modes: Vec<(String, String)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::OwnerOpened {
                permission_mode,
                command,
                ..
            } => Some((command.clone(), permission_mode.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        modes,
        [
            ("run".to_owned(), "plan".to_owned()),
            ("resume".to_owned(), "plan".to_owned())
        ]
    );
}

#[test]
fn classifier_counters_are_journaled_and_carry_over_a_resume() {
    let env = Env::new();
    let release = env.scratch.join("release");
    let waiting = env.scratch.join("waiting");
    // Denies any request whose argv mentions `deny-me`, allows the rest.
    let classifier = env.script(
        &env.scratch.join("classify.sh"),
        "if grep -q deny-me; then\n  echo '{\"version\":1,\"decision\":\"deny\",\"reason\":\"not this one\"}'\nelse\n  echo '{\"version\":1,\"decision\":\"allow\"}'\nfi",
    );
    std::fs::write(
        env.home.join("config.toml"),
        format!(
            "[behavior]\npermission_mode = \"auto\"\nclassifier = [{:?}]\n",
            classifier.display().to_string()
        ),
    )
    .unwrap();
    env.workflow(&[
        node("a", r#"["echo", "deny-me"]"#),
        node(
            "b",
            &format!(
                r#"["sh", "-c", "[ -e {r} ] && exit 0; touch {w}; sleep 30"]"#,
                r = release.display(),
                w = waiting.display()
            ),
        ),
    ]);
    let child = env
        .command(&["workflow", "run", "wf.star", "--yes"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Node a was judged (denied) and b is running: stop the run there.
    wait_for("a denied and b running", || {
        waiting.exists()
            && env.run_dirs().first().is_some_and(|d| {
                std::fs::read_to_string(d.join("events.jsonl"))
                    .unwrap_or_default()
                    .contains("\"node_denied\"")
            })
    });
    sigterm(&child);
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 5, "{}", text(&out));
    let id = run_id(&out);
    let (state, _) = env.journal(&id);
    let denial = state.root().tasks["a"].attempts[0].denial.clone().unwrap();
    assert_eq!(
        (denial.decided_by.as_str(), denial.reason.as_str()),
        ("classifier", "not this one")
    );
    assert_eq!(state.escalation.unwrap().total_denials(), 1);

    std::fs::write(&release, "").unwrap();
    let resumed = env.rho(&["workflow", "resume", &id, "--yes"]);
    // a stays denied; b is allowed by the classifier and succeeds.
    assert_eq!(code(&resumed), 4, "{}", text(&resumed));
    let (state, events) = env.journal(&id);
    assert_eq!(state.root().node_state("b"), Some(NodeState::Success));
    let resume_at = events
        .iter()
        .position(
            |e| matches!(&e.kind, EventKind::OwnerOpened { command, .. } if command == "resume"),
        )
        .unwrap();
    let after_resume: Vec<_> = events[resume_at..]
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::EscalationCounters { counters } => Some(*counters),
            _ => None,
        })
        .collect();
    assert_eq!(
        after_resume.len(),
        1,
        "one classifier decision after resume"
    );
    // The allow ended the run of consecutive denials; the total survived the restart.
    assert_eq!(after_resume[0].consecutive_denials(), 0);
    assert_eq!(after_resume[0].total_denials(), 1);
}

/// A `rho` process whose stdin, stdout and stderr are one pseudo-terminal (as in an
/// interactive shell), with everything it writes collected by a reader thread.
struct OnTerminal {
    child: Child,
    master: Arc<OwnedFd>,
    output: Arc<Mutex<Vec<u8>>>,
    stop: Arc<AtomicBool>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl OnTerminal {
    fn spawn(mut cmd: Command) -> Self {
        let pty = nix::pty::openpty(None, None).unwrap();
        for fd in [&pty.master, &pty.slave] {
            // Not leaked into processes other tests start meanwhile.
            nix::fcntl::fcntl(
                fd.as_fd(),
                nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
            )
            .unwrap();
        }
        cmd.stdin(Stdio::from(pty.slave.try_clone().unwrap()))
            .stdout(Stdio::from(pty.slave.try_clone().unwrap()))
            .stderr(Stdio::from(pty.slave));
        let child = cmd.spawn().unwrap();
        let master = Arc::new(pty.master);
        let output = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (master, output, stop) =
                (Arc::clone(&master), Arc::clone(&output), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while !stop.load(Ordering::SeqCst) {
                    let mut fds = [nix::poll::PollFd::new(
                        master.as_fd(),
                        nix::poll::PollFlags::POLLIN,
                    )];
                    match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(50u16)) {
                        Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
                        Ok(_) => {}
                        Err(_) => return,
                    }
                    match nix::unistd::read(master.as_fd(), &mut buf) {
                        Ok(0) | Err(_) => return, // EIO once the terminal's last user is gone
                        Ok(n) => output.lock().unwrap().extend_from_slice(&buf[..n]),
                    }
                }
            })
        };
        OnTerminal {
            child,
            master,
            output,
            stop,
            reader: Some(reader),
        }
    }

    fn pid(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(self.child.id() as i32)
    }

    fn output(&self) -> String {
        String::from_utf8_lossy(&self.output.lock().unwrap()).into_owned()
    }

    /// Waits (generously) until the output from byte `from` on contains `needle`; returns the
    /// byte offset just past it.
    fn wait_for(&self, from: usize, needle: &str) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = self.output();
            if let Some(at) = out.get(from..).and_then(|rest| rest.find(needle)) {
                return from + at + needle.len();
            }
            assert!(
                Instant::now() < deadline,
                "gave up waiting for {needle:?} in {out:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Types `text` at the terminal.
    fn type_in(&self, text: &str) {
        nix::unistd::write(self.master.as_fd(), text.as_bytes()).unwrap();
    }

    /// Waits for the process to exit and for its last output; returns both.
    fn finish(mut self) -> (ExitStatus, String) {
        let status = self.child.wait().unwrap();
        // Drain what is still buffered in the terminal (a bound, not a timing assertion).
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut seen = usize::MAX;
        while Instant::now() < deadline {
            let now = self.output.lock().unwrap().len();
            if now == seen {
                break;
            }
            seen = now;
            std::thread::sleep(Duration::from_millis(100));
        }
        self.stop.store(true, Ordering::SeqCst);
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        (status, self.output())
    }
}

/// Starts `rho workflow run wf.star --yes --permission-mode supervised` on a terminal and
/// waits for its approval prompt; returns the process, the run id and the offset just past
/// the question.
fn supervised_run_at_its_prompt(env: &Env) -> (OnTerminal, String, usize) {
    let term = OnTerminal::spawn(env.command(&[
        "workflow",
        "run",
        "wf.star",
        "--yes",
        "--permission-mode",
        "supervised",
    ]));
    let asked = term.wait_for(0, "Run it? [y/N] ");
    let out = term.output();
    let id = out
        .lines()
        .find_map(|l| l.trim_end_matches('\r').strip_prefix("run_id: "))
        .unwrap_or_else(|| panic!("no run_id in {out:?}"))
        .trim()
        .to_owned();
    (term, id, asked)
}

/// The node was cancelled at its prompt: cancellation (not a denial), nothing ran, the
/// cancellation completed, and nobody is recorded as having refused.
fn assert_cancelled_at_the_prompt(env: &Env, id: &str, marker: &Path, request: &str) {
    assert!(!marker.exists(), "the node must not run");
    let (state, events) = env.journal(id);
    let task = &state.root().tasks["a"];
    assert_eq!(task.state, NodeState::Cancellation, "{task:?}");
    assert_eq!(task.attempts.len(), 1);
    assert_eq!(task.attempts[0].state, Some(NodeState::Cancellation));
    assert_eq!(task.attempts[0].denial, None);
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.kind, EventKind::NodeDenied { .. })),
        "an abandoned prompt is not a denial"
    );
    assert_eq!(
        state.root().result.as_ref().unwrap().outcome,
        Outcome::Cancellation
    );
    let cancel = state.cancel.as_ref().unwrap();
    assert_eq!(cancel.request_id, request);
    assert!(cancel.completed);
    assert!(events.iter().any(
        |e| matches!(&e.kind, EventKind::CancelCompleted { request_id } if request_id == request)
    ));
}

#[test]
fn sigint_at_an_open_approval_prompt_cancels_the_run() {
    let env = Env::new();
    let marker = env.scratch.join("ran");
    env.workflow(&[touch_node("a", &marker)]);
    let (term, id, asked) = supervised_run_at_its_prompt(&env);
    // The live view stays off the terminal while the question is open (it ticks every 50 ms;
    // a redraw would start with `\r` and wipe the question out).
    std::thread::sleep(Duration::from_millis(400));
    let shown = term.output();
    assert_eq!(
        &shown[asked..],
        "",
        "nothing may be drawn over an open prompt: {shown:?}"
    );
    nix::sys::signal::kill(term.pid(), nix::sys::signal::Signal::SIGINT).unwrap();
    let (status, shown) = term.finish();
    assert_eq!(status.code(), Some(5), "cancellation exits 5: {shown:?}");
    assert!(
        shown[asked..].starts_with("cancelled"),
        "the prompt says it gave up: {shown:?}"
    );
    assert!(
        shown.contains(&format!("resume with: rho workflow resume {id}")),
        "{shown:?}"
    );
    assert!(shown.contains("outcome cancellation"), "{shown:?}");
    assert_cancelled_at_the_prompt(&env, &id, &marker, "signal-SIGINT");
}

#[test]
fn cancel_at_an_open_approval_prompt_is_acknowledged() {
    let env = Env::new();
    let marker = env.scratch.join("ran");
    env.workflow(&[touch_node("a", &marker)]);
    let (term, id, _) = supervised_run_at_its_prompt(&env);
    let out = env.rho(&["workflow", "cancel", &id]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["cancellation_state"], "acknowledged", "{answer}");
    assert_eq!(answer["lifecycle"], "completed", "{answer}");
    let (status, shown) = term.finish();
    assert_eq!(status.code(), Some(5), "{shown:?}");
    assert_cancelled_at_the_prompt(&env, &id, &marker, answer["request_id"].as_str().unwrap());
}

#[test]
fn an_approved_prompt_runs_the_node_and_the_live_view_comes_back() {
    let env = Env::new();
    let (ran, go) = (env.scratch.join("ran"), env.scratch.join("go"));
    env.workflow(&[node(
        "a",
        &format!(
            r#"["sh", "-c", "touch {r}; while [ ! -e {g} ]; do sleep 0.05; done"]"#,
            r = ran.display(),
            g = go.display()
        ),
    )]);
    let (term, id, asked) = supervised_run_at_its_prompt(&env);
    term.type_in("y\n");
    let approved = term.wait_for(asked, "approved");
    // The node runs and the live line is drawn again below the answer.
    let redrawn = term.wait_for(approved, "running: a");
    std::fs::write(&go, "").unwrap();
    let (status, shown) = term.finish();
    assert_eq!(status.code(), Some(0), "{shown:?}");
    assert!(ran.exists());
    assert!(
        shown[approved..redrawn].contains("\u{1b}[2K[0/1]"),
        "{shown:?}"
    );
    let (state, _) = env.journal(&id);
    assert_eq!(state.root().node_state("a"), Some(NodeState::Success));
}

#[test]
fn credentials_in_the_owner_environment_never_reach_a_node() {
    let env = Env::new();
    std::fs::write(
        env.ws.join("wf.star"),
        "def build(inputs):\n    e = shell(name = \"e\", executable = \"sh\", arguments = [\"-c\"], command = \"env\", timeout_seconds = 60, max_output_bytes = 65536)\n    return workflow(name = \"t\", nodes = [e])\n\nWORKFLOW = define(inputs = {}, build = build)\n",
    )
    .unwrap();
    let secrets = [
        "FOO_API_KEY",
        "ANTHROPIC_BASE_URL",
        "GITHUB_TOKEN",
        "OPENAI_ORG",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "GH_TOKEN",
        "DB_PASSWORD",
        "SERVICE_SECRET",
        "SIGNING_SECRET_KEY",
        "GCP_CREDENTIALS",
        // The audit's list: any case, bare names and the wider families.
        "my_api_key",
        "Github_Token",
        "API_KEY",
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "STRIPE_APIKEY",
        "PGPASSWORD",
        "MYSQL_PWD",
        "SENTRY_DSN",
        "SLACK_WEBHOOK_URL",
        "SSH_AUTH_SOCK",
    ];
    let mut cmd = env.command(&["workflow", "run", "wf.star", "--yes"]);
    for name in secrets {
        cmd.env(name, format!("leaked-{name}"));
    }
    cmd.env("KEEP_ME", "kept-value");
    // A password in a URL is withheld whatever the variable is called.
    cmd.env("DATABASE_URL", "postgres://app:leaked-pw@db/x");
    cmd.env("APP_DB", "postgres://app:leaked-pw@db/x");
    let out = cmd.output().unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    let id = run_id(&out);
    let (state, _) = env.journal(&id);
    let stdout = state.root().tasks["e"].attempts[0].stdout.clone().unwrap();
    assert!(!stdout.truncated);
    let seen = std::fs::read_to_string(env.run_dir(&id).join(&stdout.path)).unwrap();
    assert!(
        seen.lines().any(|l| l == "KEEP_ME=kept-value"),
        "the rest of the environment is inherited: {seen}"
    );
    for name in secrets {
        assert!(
            !seen.lines().any(|l| l.starts_with(&format!("{name}=")))
                && !seen.contains(&format!("leaked-{name}")),
            "{name} reached the node: {seen}"
        );
    }
    assert!(
        !seen.contains("leaked-pw"),
        "a URL password reached the node: {seen}"
    );
    // The policy is part of the program: its name and exclusions are frozen with it.
    let status = env.status_json(&id);
    let policy = &status["program"]["environment"];
    assert_eq!(policy["name"], "inherit_except_credentials", "{policy}");
    for pattern in [
        "*_API_KEY",
        "*_TOKEN",
        "ANTHROPIC_*",
        "OPENAI_*",
        "*PASSWORD",
        "SSH_AUTH_SOCK",
    ] {
        assert!(
            policy["exclude"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p == pattern),
            "{pattern} in {policy}"
        );
    }
}

#[test]
fn a_hook_sees_the_frozen_interpreter_and_shebang_arguments_of_a_script() {
    let env = Env::new();
    let event_file = env.scratch.join("event.json");
    let recorder = env.script(
        &env.scratch.join("record.sh"),
        &format!(
            "cat > '{}'\necho '{{\"version\":1,\"decision\":\"continue\"}}'",
            event_file.display()
        ),
    );
    env.user_hooks(&[(
        "record",
        "before_tool_use",
        vec![recorder.display().to_string()],
    )]);
    // The script's own interpreter, found through `env -S`, with a shebang argument.
    env.script(&env.ws.join("tool.sh"), "true");
    std::fs::write(env.ws.join("tool.sh"), "#!/usr/bin/env -S sh -e\ntrue\n").unwrap();
    env.workflow(&[node("a", r#"["./tool.sh", "x"]"#)]);
    let out = env.run(&["--permission-mode", "bypass"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let event: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&event_file).unwrap()).unwrap();
    let payload = &event["payload"];
    assert_eq!(
        payload["executable"]["path"],
        env.ws.join("tool.sh").to_str().unwrap(),
        "{payload}"
    );
    let interpreter = &payload["interpreter"];
    let sh = std::fs::canonicalize("/bin/sh").unwrap();
    assert_eq!(interpreter["path"], sh.to_str().unwrap(), "{payload}");
    assert_eq!(interpreter["shebang"], "/usr/bin/env", "{payload}");
    assert_eq!(
        interpreter["arguments"],
        serde_json::json!(["-e"]),
        "{payload}"
    );
    assert_eq!(
        interpreter["sha256"].as_str().map(str::len),
        Some(64),
        "{payload}"
    );
    assert_eq!(payload["arguments"], serde_json::json!(["./tool.sh", "x"]));
}
