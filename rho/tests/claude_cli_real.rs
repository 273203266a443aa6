//! The claude-cli runtime against the real Claude Code CLI (`$RHO_TEST_CLAUDE`, installed
//! pinned by `.ci/install-clients`), talking to the loopback scripted Anthropic model
//! (`ANTHROPIC_BASE_URL`, a dummy key, a private `HOME`).
//!
//! Proves that the real binary accepts rho's exact argv for every flag combination the binder
//! produces, that rho decodes the real stream (text, tool use, result, usage, session id), and
//! that cancel leaves no `claude` process behind. Without the binary these tests skip loudly,
//! and fail under `CI` or `RHO_REQUIRE_SANDBOX=1`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a broken setup should panic

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rho::agents::{
    BindRequest, BoundRuntime, CatalogEntry, ClaudeLaunch, HostCapabilities, Invocation,
    SourceLevel, bind, fingerprint, load_definition_text,
};
use rho::config::Config;
use rho::paths::RhoHome;
use rho::runtime::claude_cli::{self, ClaudeRunOutcome, ClaudeRunRequest};
use rho::runtime::delegation::rundir::{AttachEventKind, RunDirectory, RunReader};
use rho::runtime::delegation::status::{RunRuntime, RunState, RunStatus};
use rho::workflow::exec::CancelToken;
use rho_e2e::model_server::{ModelServer, Reply, ScriptedTurn};
use rho_policy::PermissionMode;
use serde_json::json;

use rho_e2e::claude_binary;

fn launch(definition: &str, mode: PermissionMode, max_turns: Option<u32>) -> ClaudeLaunch {
    let def = load_definition_text(Path::new("/defs/probe.md"), definition).unwrap();
    let entry = CatalogEntry {
        fingerprint: fingerprint(&def).unwrap(),
        definition: def,
        level: SourceLevel::RhoHome,
        path: None,
        overrides: vec![],
    };
    let host = HostCapabilities::new(std::iter::empty::<&str>());
    let bound = bind(
        &entry,
        &BindRequest {
            config: &Config::default(),
            capabilities: &host,
            invocation: Invocation::Delegated,
            permission_mode: mode,
            max_turns,
        },
    )
    .unwrap();
    let BoundRuntime::Claude(launch) = bound.runtime else {
        panic!("not a claude-cli binding");
    };
    launch
}

struct Fixture {
    _dir: tempfile::TempDir,
    home: RhoHome,
    user_home: PathBuf,
    workspace: PathBuf,
    claude_dir: PathBuf,
}

impl Fixture {
    fn new(claude: &Path) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let user_home = dir.path().join("home");
        let workspace = dir.path().join("work");
        std::fs::create_dir_all(&user_home).unwrap();
        std::fs::create_dir_all(&workspace).unwrap();
        Fixture {
            home: RhoHome::at(dir.path().join("rho-home"), None),
            user_home,
            workspace: workspace.canonicalize().unwrap(),
            claude_dir: claude.parent().unwrap().to_owned(),
            _dir: dir,
        }
    }

    fn env(&self, server: &ModelServer) -> Vec<(OsString, OsString)> {
        let path = format!("{}:/usr/local/bin:/usr/bin:/bin", self.claude_dir.display());
        [
            ("PATH", path),
            ("HOME", self.user_home.display().to_string()),
            ("ANTHROPIC_BASE_URL", server.base_url()),
            ("ANTHROPIC_API_KEY", "sk-ant-test-dummy".to_owned()),
            ("DISABLE_AUTOUPDATER", "1".to_owned()),
            ("DISABLE_TELEMETRY", "1".to_owned()),
            ("DISABLE_ERROR_REPORTING", "1".to_owned()),
            // Must never reach the child: rho's own provider keys.
            ("RHO_LOCAL_API_KEY", "sk-rho-secret".to_owned()),
            ("OPENAI_API_KEY", "sk-openai-secret".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .filter(|(k, _)| claude_cli::environment::passes(k))
        .collect()
    }

    fn run(
        &self,
        server: &ModelServer,
        launch: &ClaudeLaunch,
        prompt: &str,
        cancel: CancelToken,
    ) -> (RunDirectory, ClaudeRunOutcome) {
        let status = RunStatus::starting("probe", Some("sha256:00"), RunRuntime::ClaudeCli);
        let run = RunDirectory::create(&self.home, None, &status).unwrap();
        let outcome = claude_cli::run_claude(
            &self.home,
            &run,
            status,
            &ClaudeRunRequest {
                launch,
                prompt,
                cwd: &self.workspace,
                env: self.env(server),
                cancel,
                timeout: Some(Duration::from_mins(3)),
            },
        )
        .unwrap();
        (run, outcome)
    }
}

fn log_of(run: &RunDirectory) -> String {
    std::fs::read_to_string(run.path().join("log.txt")).unwrap_or_default()
}

#[test]
fn the_real_claude_accepts_every_flag_combination_the_binder_produces() {
    let Some(claude) = claude_binary() else {
        return;
    };
    // Together these set and leave unset every flag the binder can emit: empty and non-empty
    // tool lists, no prompt file / append / replace, model, effort, max turns, both setting
    // sources, and both permission modes (plan, dontAsk).
    let cases = [
        (
            "---\ndescription: d\nruntime: claude-cli\n---\n",
            PermissionMode::Plan,
            None,
            None,
        ),
        (
            "---\ndescription: d\nruntime: claude-cli\nmodel: claude-sonnet-4-5\nreasoning: high\n\
             tools: [Read, Grep, Bash(git status)]\n---\nMARKER-APPEND: answer tersely.\n",
            PermissionMode::Auto,
            Some(4),
            Some("MARKER-APPEND"),
        ),
        (
            "---\ndescription: d\nruntime: claude-cli\nprompt: replace\nmodel: opus\n\
             inherit_claude_config: true\ntools: [Read]\n---\nMARKER-REPLACE: you are a probe.\n",
            PermissionMode::Plan,
            Some(2),
            Some("MARKER-REPLACE"),
        ),
    ];
    for (i, (definition, mode, max_turns, marker)) in cases.into_iter().enumerate() {
        let fx = Fixture::new(&claude);
        let answer = format!("answer number {i}");
        let server = ModelServer::start([Reply::text(&answer)]);
        let launch = launch(definition, mode, max_turns);
        let (run, outcome) = fx.run(&server, &launch, "reply please", CancelToken::new());
        let status = &outcome.status;
        assert_eq!(
            status.state,
            RunState::Ok,
            "case {i}: argv {:?}\n{status:?}\nclaude stderr:\n{}",
            launch.args(Path::new("PROMPT")),
            log_of(&run)
        );
        assert_eq!(status.result.as_deref(), Some(answer.as_str()), "case {i}");
        assert!(status.claude_session_id.is_some(), "case {i}: {status:?}");
        assert!(
            status.output_tokens.is_some_and(|n| n > 0),
            "case {i}: {status:?}"
        );
        // The flags took effect in what reached the model.
        let requests = server.model_requests();
        let request = requests.last().expect("a model request").json();
        let text = request.to_string();
        if let Some(marker) = marker {
            assert!(
                text.contains(marker),
                "case {i}: system prompt lacks {marker}"
            );
        }
        if let Some(model) = launch.model.as_deref().filter(|m| m.starts_with("claude-")) {
            assert_eq!(request["model"], model, "case {i}");
        }
        assert!(
            text.contains("reply please"),
            "case {i}: the prompt came through stdin"
        );
        assert!(!text.contains("sk-rho-secret") && !text.contains("sk-openai-secret"));
    }
}

#[test]
fn the_real_stream_of_a_tool_call_is_decoded() {
    let Some(claude) = claude_binary() else {
        return;
    };
    let fx = Fixture::new(&claude);
    let notes = fx.workspace.join("notes.txt");
    std::fs::write(&notes, "the release is on friday\n").unwrap();
    let server = ModelServer::start([
        Reply::Turn(ScriptedTurn::tool_call(
            "Read",
            &json!({ "file_path": notes.display().to_string() }),
        )),
        Reply::text("The notes say friday."),
    ]);
    let launch = launch(
        "---\ndescription: d\nruntime: claude-cli\ntools: [Read]\n---\n",
        PermissionMode::Auto,
        Some(5),
    );
    let (run, outcome) = fx.run(&server, &launch, "when is the release?", CancelToken::new());
    assert_eq!(
        outcome.status.state,
        RunState::Ok,
        "{:?}\n{}",
        outcome.status,
        log_of(&run)
    );
    assert_eq!(
        outcome.status.result.as_deref(),
        Some("The notes say friday.")
    );
    assert!(outcome.status.turns >= 2, "{:?}", outcome.status);
    let events = RunReader::open(&fx.home, run.id())
        .unwrap()
        .events()
        .unwrap()
        .read_new()
        .unwrap();
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.kind, AttachEventKind::ToolUse { name, .. } if name == "Read")),
        "{events:#?}"
    );
    assert!(
        events.iter().any(|e| matches!(
            &e.kind,
            AttachEventKind::ToolResult { is_error: false, summary } if summary.contains("friday")
        )),
        "{events:#?}"
    );
    // The tool result went back to the model in the second request.
    let second = server.model_requests()[1].json().to_string();
    assert!(
        second.contains("tool_result") && second.contains("friday"),
        "{second}"
    );
}

fn processes_in(dir: &Path) -> Vec<i32> {
    let mut found = vec![];
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if std::fs::read_link(entry.path().join("cwd")).is_ok_and(|cwd| cwd == dir) {
            let zombie = std::fs::read_to_string(entry.path().join("stat"))
                .is_ok_and(|s| s.split_whitespace().nth(2) == Some("Z"));
            if !zombie {
                found.push(pid);
            }
        }
    }
    found
}

#[test]
fn cancel_leaves_no_claude_process_behind() {
    let Some(claude) = claude_binary() else {
        return;
    };
    let fx = Fixture::new(&claude);
    let long = "word ".repeat(400);
    let server = ModelServer::start([Reply::Turn(
        ScriptedTurn::text(&long).with_chunk_delay(Duration::from_millis(200)),
    )]);
    let launch = launch(
        "---\ndescription: d\nruntime: claude-cli\n---\n",
        PermissionMode::Plan,
        None,
    );
    let cancel = CancelToken::new();
    let trigger = cancel.clone();
    let home = fx.home.clone();
    let waiter = std::thread::spawn(move || {
        // Cancel once streamed text shows the run is mid-answer.
        for _ in 0..1500 {
            std::thread::sleep(Duration::from_millis(100));
            let Ok(root) = std::fs::read_dir(home.root().join("subagents")) else {
                continue;
            };
            let streaming = root.flatten().any(|d| {
                std::fs::read_to_string(d.path().join("events.jsonl"))
                    .is_ok_and(|t| t.contains("\"partial\":true"))
            });
            if streaming {
                break;
            }
        }
        trigger.cancel();
    });
    let (run, outcome) = fx.run(&server, &launch, "write a lot", cancel);
    waiter.join().unwrap();
    assert_eq!(
        outcome.status.state,
        RunState::Stopped,
        "{:?}\n{}",
        outcome.status,
        log_of(&run)
    );
    let mut left = processes_in(&fx.workspace);
    for _ in 0..50 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        left = processes_in(&fx.workspace);
    }
    assert!(left.is_empty(), "processes left in the workspace: {left:?}");
}
