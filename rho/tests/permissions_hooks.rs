//! Hook execution as the run owner does it: real `#!/bin/sh` hook processes in a temporary
//! `RHO_HOME` and workspace, judged through `HostAuthorizer`.

// Test helpers outside `#[test]` functions unwrap too: a failed setup is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rho::paths::RhoHome;
use rho::permissions::{
    HostAuthorizer, HostEnvironment, ObservedEvent, ProcessHookRunner, load_hooks,
};
use rho_policy::hooks::HostLabels;
use rho_policy::{CommandRequest, Decider, ExecutableIdentity, PermissionMode};
use tempfile::TempDir;

struct Fixture {
    _dir: TempDir,
    home: RhoHome,
    workspace: PathBuf,
    scratch: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let home = root.join("home");
    let workspace = root.join("workspace");
    let scratch = root.join("scratch");
    for d in [&home, &workspace, &scratch] {
        fs::create_dir(d).unwrap();
    }
    Fixture {
        _dir: dir,
        home: RhoHome::at(home, None),
        workspace,
        scratch,
    }
}

impl Fixture {
    /// A `#!/bin/sh` script in the scratch directory.
    fn script(&self, name: &str, body: &str) -> PathBuf {
        let path = self.scratch.join(name);
        fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn file(&self, name: &str) -> PathBuf {
        self.scratch.join(name)
    }

    fn user_hooks(&self, body: &str) {
        fs::write(
            self.home.root().join("hooks.toml"),
            format!("version = 1\n{body}"),
        )
        .unwrap();
    }

    fn project_hooks(&self, body: &str) {
        let dir = self.workspace.join(".rho");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("hooks.toml"), format!("version = 1\n{body}")).unwrap();
    }

    fn trust_workspace(&self) {
        let mut store = rho::trust::load(&self.home).unwrap();
        store.add(self.workspace.clone()).unwrap();
        rho::trust::save(&self.home, &store).unwrap();
    }

    fn runner(&self, env: &HostEnvironment) -> ProcessHookRunner {
        let loaded = load_hooks(&self.home, &self.workspace, env).unwrap();
        ProcessHookRunner::new(loaded.hooks, &self.workspace, self.home.root(), env.clone())
    }

    fn authorizer(&self, mode: PermissionMode, env: &HostEnvironment) -> HostAuthorizer {
        HostAuthorizer::new(mode, self.runner(env), None, None)
    }

    fn request(&self) -> CommandRequest {
        CommandRequest {
            run_id: "run-7".to_owned(),
            plan_digest: "ab".repeat(32),
            node_id: "build".to_owned(),
            attempt: 2,
            executable: ExecutableIdentity {
                path: PathBuf::from("/usr/bin/make"),
                sha256: "cd".repeat(32),
            },
            interpreter: None,
            argv: vec!["make".to_owned(), "-j2".to_owned()],
            cwd: self.workspace.clone(),
            environment_policy: "minimal".to_owned(),
            timeout_ms: 60_000,
            output_limit_bytes: 1 << 20,
        }
    }
}

fn base_env() -> HostEnvironment {
    HostEnvironment::from_vars([("PATH", "/usr/bin:/bin")])
}

/// One `[[hook]]` table; `command` is rendered as a TOML array of strings.
fn hook(id: &str, on: &str, command: &[&Path], timeout: &str, extra: &str) -> String {
    let argv: Vec<String> = command
        .iter()
        .map(|p| format!("{:?}", p.display().to_string()))
        .collect();
    format!(
        "[[hook]]\nid = \"{id}\"\non = \"{on}\"\ncommand = [{}]\ntimeout = \"{timeout}\"\n{extra}\n",
        argv.join(", ")
    )
}

const CONTINUE: &str = r#"echo '{"version":1,"decision":"continue"}'"#;

#[test]
fn continue_answer_with_exit_zero_allows() {
    let fx = fixture();
    let marker = fx.file("ran");
    let script = fx.script("ok.sh", &format!("touch \"$1\"\n{CONTINUE}"));
    fx.user_hooks(&hook(
        "ok",
        "before_tool_use",
        &[&script, &marker],
        "10s",
        "",
    ));
    let mut host = fx.authorizer(PermissionMode::Bypass, &base_env());
    let auth = host.authorize(&fx.request());
    assert!(auth.allowed, "{auth}");
    assert_eq!(auth.decided_by, Decider::Policy);
    assert!(marker.exists(), "the hook did not run");
}

#[test]
fn exit_two_with_a_deny_answer_denies_naming_the_hook_and_its_reason() {
    let fx = fixture();
    let script = fx.script(
        "friday.sh",
        r#"echo '{"version":1,"decision":"deny","reason":"no deploys on friday"}'; exit 2"#,
    );
    fx.user_hooks(&hook("friday", "before_tool_use", &[&script], "10s", ""));
    let auth = fx
        .authorizer(PermissionMode::Bypass, &base_env())
        .authorize(&fx.request());
    assert!(!auth.allowed);
    assert_eq!(
        auth.decided_by,
        Decider::Hook {
            id: "friday".to_owned()
        }
    );
    assert_eq!(auth.reason, "no deploys on friday");
    assert!(auth.to_string().contains("hook `friday`"), "{auth}");
}

#[test]
fn exit_two_without_an_answer_denies_with_stderr_as_the_reason() {
    let fx = fixture();
    let script = fx.script("stderr.sh", "echo 'secrets in argv' >&2; exit 2");
    fx.user_hooks(&hook("scan", "before_tool_use", &[&script], "10s", ""));
    let auth = fx
        .authorizer(PermissionMode::Bypass, &base_env())
        .authorize(&fx.request());
    assert!(!auth.allowed);
    assert_eq!(
        auth.decided_by,
        Decider::Hook {
            id: "scan".to_owned()
        }
    );
    assert_eq!(auth.reason, "secrets in argv");
}

#[test]
fn a_crashing_hook_denies() {
    let fx = fixture();
    let script = fx.script("crash.sh", "kill -SEGV $$");
    fx.user_hooks(&hook("crashy", "before_tool_use", &[&script], "10s", ""));
    let auth = fx
        .authorizer(PermissionMode::Bypass, &base_env())
        .authorize(&fx.request());
    assert!(!auth.allowed);
    assert_eq!(
        auth.decided_by,
        Decider::Hook {
            id: "crashy".to_owned()
        }
    );
    assert!(auth.reason.contains("killed by signal 11"), "{auth}");
}

#[test]
fn a_hook_that_cannot_start_denies() {
    let fx = fixture();
    fx.user_hooks(&hook(
        "gone",
        "before_tool_use",
        &[&fx.file("missing.sh")],
        "10s",
        "",
    ));
    let auth = fx
        .authorizer(PermissionMode::Bypass, &base_env())
        .authorize(&fx.request());
    assert!(!auth.allowed);
    assert_eq!(
        auth.decided_by,
        Decider::Hook {
            id: "gone".to_owned()
        }
    );
    assert!(auth.reason.contains("could not start"), "{auth}");
}

/// Whether `pid` has ended (gone, or a zombie nobody reaps — in a container, init may not).
fn process_ended(pid: &str) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[test]
fn a_hook_past_its_timeout_denies_and_its_process_group_is_killed() {
    let fx = fixture();
    let pid_file = fx.file("child.pid");
    // A background child in the hook's process group, then wait forever.
    let script = fx.script("slow.sh", "sleep 300 &\necho $! > \"$1\"\nwait");
    fx.user_hooks(&hook(
        "slow",
        "before_tool_use",
        &[&script, &pid_file],
        "1s",
        "",
    ));
    let auth = fx
        .authorizer(PermissionMode::Bypass, &base_env())
        .authorize(&fx.request());
    assert!(!auth.allowed);
    assert_eq!(
        auth.decided_by,
        Decider::Hook {
            id: "slow".to_owned()
        }
    );
    assert!(auth.reason.contains("timed out after 1000ms"), "{auth}");

    let pid = fs::read_to_string(&pid_file).unwrap();
    let pid = pid.trim();
    // SIGKILL was sent before authorize returned; allow the kernel a moment to finish it.
    let give_up = Instant::now() + Duration::from_secs(20);
    while !process_ended(pid) && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        process_ended(pid),
        "the hook's background child {pid} survived the timeout"
    );
}

#[test]
fn output_over_eight_kib_denies() {
    let fx = fixture();
    let script = fx.script("chatty.sh", "head -c 9000 /dev/zero | tr '\\0' x");
    fx.user_hooks(&hook("chatty", "before_tool_use", &[&script], "10s", ""));
    let auth = fx
        .authorizer(PermissionMode::Bypass, &base_env())
        .authorize(&fx.request());
    assert!(!auth.allowed);
    assert_eq!(
        auth.decided_by,
        Decider::Hook {
            id: "chatty".to_owned()
        }
    );
    assert!(auth.reason.contains("exceeds 8192 bytes"), "{auth}");
}

#[test]
fn malformed_answer_denies() {
    let fx = fixture();
    let script = fx.script("odd.sh", r#"echo '{"version":1,"decision":"allow"}'"#);
    fx.user_hooks(&hook("odd", "before_tool_use", &[&script], "10s", ""));
    let auth = fx
        .authorizer(PermissionMode::Bypass, &base_env())
        .authorize(&fx.request());
    assert!(!auth.allowed);
    assert!(auth.reason.contains("invalid answer"), "{auth}");
}

#[test]
fn hooks_get_the_json_event_on_stdin() {
    let fx = fixture();
    let event_file = fx.file("event.json");
    let script = fx.script("record.sh", &format!("cat > \"$1\"\n{CONTINUE}"));
    fx.user_hooks(&hook(
        "record",
        "before_tool_use",
        &[&script, &event_file],
        "10s",
        "",
    ));
    let auth = fx
        .authorizer(PermissionMode::Bypass, &base_env())
        .authorize(&fx.request());
    assert!(auth.allowed, "{auth}");

    let event: serde_json::Value = serde_json::from_slice(&fs::read(&event_file).unwrap()).unwrap();
    assert_eq!(event["schema_version"], 1);
    assert_eq!(event["event"], "before_tool_use");
    assert!(event["event_id"].as_str().is_some_and(|id| !id.is_empty()));
    assert_eq!(event["workspace"], fx.workspace.to_str().unwrap());
    let labels = &event["host_labels"];
    assert_eq!(labels["workflow_run_id"], "run-7");
    assert_eq!(labels["plan_digest"], "ab".repeat(32));
    assert_eq!(labels["node_id"], "build");
    assert_eq!(labels["attempt"], 2);
    let payload = &event["payload"];
    assert_eq!(payload["tool"], "workflow_command");
    assert_eq!(payload["operation"], "process");
    assert_eq!(payload["working_directory"], fx.workspace.to_str().unwrap());
    assert_eq!(payload["executable"]["path"], "/usr/bin/make");
    assert_eq!(payload["executable"]["sha256"], "cd".repeat(32));
    assert_eq!(payload["arguments"], serde_json::json!(["make", "-j2"]));
    assert_eq!(payload["environment_policy"], "minimal");
}

#[test]
fn hooks_get_a_minimal_environment_without_host_secrets() {
    let fx = fixture();
    let env_file = fx.file("env.txt");
    let script = fx.script("env.sh", &format!("env > \"$1\"\n{CONTINUE}"));
    fx.user_hooks(&hook(
        "env",
        "before_tool_use",
        &[&script, &env_file],
        "10s",
        "env = [\"PASSED_ON\"]",
    ));
    let env = HostEnvironment::from_vars([
        ("PATH", "/usr/bin:/bin"),
        ("HOME", "/home/someone"),
        ("SECRET_TOKEN", "hunter2"),
        ("PASSED_ON", "listed"),
    ]);
    let auth = fx
        .authorizer(PermissionMode::Bypass, &env)
        .authorize(&fx.request());
    assert!(auth.allowed, "{auth}");
    let seen = fs::read_to_string(&env_file).unwrap();
    let lines: Vec<&str> = seen.lines().collect();
    assert!(
        !seen.contains("SECRET_TOKEN") && !seen.contains("hunter2"),
        "{seen}"
    );
    for expected in [
        "PASSED_ON=listed",
        "RHO_IN_HOOK=1",
        "PATH=/usr/bin:/bin",
        "HOME=/home/someone",
    ] {
        assert!(lines.contains(&expected), "missing {expected} in {seen}");
    }

    // Nor does anything of this process's real environment leak (cargo sets CARGO_* here).
    let real = HostEnvironment::current();
    fx.authorizer(PermissionMode::Bypass, &real)
        .authorize(&fx.request());
    let seen = fs::read_to_string(&env_file).unwrap();
    assert!(!seen.contains("CARGO"), "{seen}");
}

#[test]
fn an_untrusted_project_hook_never_runs_and_runs_once_trusted() {
    let fx = fixture();
    let marker = fx.file("project-ran");
    let script = fx.script("project.sh", &format!("touch \"$1\"\n{CONTINUE}"));
    fx.project_hooks(&hook(
        "proj",
        "before_tool_use",
        &[&script, &marker],
        "10s",
        "",
    ));

    let loaded = load_hooks(&fx.home, &fx.workspace, &base_env()).unwrap();
    assert!(loaded.project_hooks_inactive && !loaded.project_hooks_trusted);
    assert!(loaded.hooks.all().is_empty());
    let auth = fx
        .authorizer(PermissionMode::Bypass, &base_env())
        .authorize(&fx.request());
    assert!(auth.allowed, "{auth}");
    assert!(!marker.exists(), "an untrusted project hook ran");

    fx.trust_workspace();
    let loaded = load_hooks(&fx.home, &fx.workspace, &base_env()).unwrap();
    assert!(loaded.project_hooks_trusted && !loaded.project_hooks_inactive);
    let auth = fx
        .authorizer(PermissionMode::Bypass, &base_env())
        .authorize(&fx.request());
    assert!(auth.allowed, "{auth}");
    assert!(marker.exists(), "the trusted project hook did not run");
}

#[test]
fn rho_trust_project_hooks_one_trusts_for_this_process_only_with_exactly_one() {
    let fx = fixture();
    let marker = fx.file("project-ran");
    let script = fx.script("project.sh", &format!("touch \"$1\"\n{CONTINUE}"));
    fx.project_hooks(&hook(
        "proj",
        "before_tool_use",
        &[&script, &marker],
        "10s",
        "",
    ));

    for almost in ["true", "yes", " 1"] {
        let env = HostEnvironment::from_vars([("RHO_TRUST_PROJECT_HOOKS", almost)]);
        fx.authorizer(PermissionMode::Bypass, &env)
            .authorize(&fx.request());
        assert!(
            !marker.exists(),
            "RHO_TRUST_PROJECT_HOOKS={almost:?} trusted project hooks"
        );
    }
    let env = HostEnvironment::from_vars([("RHO_TRUST_PROJECT_HOOKS", "1")]);
    fx.authorizer(PermissionMode::Bypass, &env)
        .authorize(&fx.request());
    assert!(marker.exists());
}

#[test]
fn user_hooks_run_first_and_the_first_denial_wins() {
    let fx = fixture();
    let marker = fx.file("project-ran");
    let deny = fx.script(
        "deny.sh",
        r#"echo '{"version":1,"decision":"deny","reason":"user says no"}'"#,
    );
    let project = fx.script("project.sh", &format!("touch \"$1\"\n{CONTINUE}"));
    fx.user_hooks(&hook("user-gate", "before_tool_use", &[&deny], "10s", ""));
    fx.project_hooks(&hook(
        "proj",
        "before_tool_use",
        &[&project, &marker],
        "10s",
        "",
    ));
    fx.trust_workspace();
    let auth = fx
        .authorizer(PermissionMode::Bypass, &base_env())
        .authorize(&fx.request());
    assert!(!auth.allowed);
    assert_eq!(
        auth.decided_by,
        Decider::Hook {
            id: "user-gate".to_owned()
        }
    );
    assert_eq!(auth.reason, "user says no");
    assert!(!marker.exists(), "a hook ran after the first denial");
}

#[test]
fn project_hook_programs_are_resolved_against_the_workspace() {
    let fx = fixture();
    let marker = fx.file("relative-ran");
    let in_ws = fx.workspace.join(".rho").join("check.sh");
    fx.project_hooks(&format!(
        "[[hook]]\nid = \"rel\"\non = \"before_tool_use\"\ncommand = [\"./.rho/check.sh\", {:?}]\ntimeout = \"10s\"\n",
        marker.display().to_string()
    ));
    fs::write(&in_ws, format!("#!/bin/sh\ntouch \"$1\"\n{CONTINUE}\n")).unwrap();
    fs::set_permissions(&in_ws, fs::Permissions::from_mode(0o755)).unwrap();
    fx.trust_workspace();
    let auth = fx
        .authorizer(PermissionMode::Bypass, &base_env())
        .authorize(&fx.request());
    assert!(auth.allowed, "{auth}");
    assert!(marker.exists());
}

#[test]
fn a_tools_matcher_that_excludes_workflow_command_skips_the_hook() {
    let fx = fixture();
    let script = fx.script("deny.sh", "exit 2");
    fx.user_hooks(&hook(
        "agents-only",
        "before_tool_use",
        &[&script],
        "10s",
        "tools = [\"agent_*\"]",
    ));
    let auth = fx
        .authorizer(PermissionMode::Bypass, &base_env())
        .authorize(&fx.request());
    assert!(auth.allowed, "{auth}");
}

#[test]
fn an_invalid_hooks_file_is_a_configuration_error_naming_file_hook_and_field() {
    let fx = fixture();
    fx.user_hooks("[[hook]]\nid = \"x\"\non = \"before_tool_use\"\ncommand = [\"/bin/true\"]\ntimeout = \"2s\"\nshell = true\n");
    let err = load_hooks(&fx.home, &fx.workspace, &base_env()).unwrap_err();
    assert_eq!(
        rho::cli::exit::permissions_exit_code(&err),
        rho::cli::exit::ExitCode::Invalid
    );
    let msg = err.to_string();
    assert!(
        msg.contains("hooks.toml") && msg.contains("`x`") && msg.contains("`shell`"),
        "{msg}"
    );
}

#[test]
fn observational_hooks_run_report_failures_and_never_run_gates() {
    let fx = fixture();
    let event_file = fx.file("observed.json");
    let gate_marker = fx.file("gate-ran");
    let record = fx.script("record.sh", "cat > \"$1\"");
    let failing = fx.script("fail.sh", "echo 'disk full' >&2; exit 1");
    let gate = fx.script("gate.sh", &format!("touch \"$1\"\n{CONTINUE}"));
    fx.user_hooks(&format!(
        "{}{}{}",
        hook("gate", "before_tool_use", &[&gate, &gate_marker], "10s", ""),
        hook("notify", "workflow_node_finished", &[&failing], "10s", ""),
        hook(
            "log",
            "workflow_node_finished",
            &[&record, &event_file],
            "10s",
            ""
        ),
    ));
    let runner = fx.runner(&base_env());
    let labels = HostLabels {
        workflow_run_id: Some("run-7".to_owned()),
        plan_digest: Some("ab".repeat(32)),
        node_id: Some("build".to_owned()),
        attempt: Some(1),
    };
    let failures = runner.observe(ObservedEvent::NodeFinished, &labels);
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].hook_id, "notify");
    assert!(failures[0].detail.contains("disk full"), "{}", failures[0]);
    // The failing hook did not stop the next one.
    let event: serde_json::Value = serde_json::from_slice(&fs::read(&event_file).unwrap()).unwrap();
    assert_eq!(event["event"], "workflow_node_finished");
    assert_eq!(event["host_labels"]["node_id"], "build");
    assert!(event.get("payload").is_none());
    assert!(
        !gate_marker.exists(),
        "a before_tool_use hook ran for an observational event"
    );
    assert!(runner.observe(ObservedEvent::Started, &labels).is_empty());
}

#[test]
fn a_trust_file_others_can_write_never_activates_project_hooks() {
    let fx = fixture();
    let marker = fx.file("project-ran");
    let script = fx.script("project.sh", &format!("touch \"$1\"\n{CONTINUE}"));
    fx.project_hooks(&hook(
        "proj",
        "before_tool_use",
        &[&script, &marker],
        "10s",
        "",
    ));
    fx.trust_workspace();
    let trust = fx.home.root().join("trust.json");
    fs::set_permissions(&trust, fs::Permissions::from_mode(0o666)).unwrap();
    let err = load_hooks(&fx.home, &fx.workspace, &base_env()).unwrap_err();
    assert!(err.to_string().contains("trust.json"), "{err}");
    assert!(!marker.exists());
}
