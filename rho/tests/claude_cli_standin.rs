//! The claude-cli runtime against a scripted stand-in `claude` (tests/fixtures/claude-standin),
//! for what the real Claude Code cannot be made to do on demand: `is_error: true` with
//! `subtype: success`, a missing `result`, a truncated stream, rate-limit events, a signed-out
//! `auth status`, a non-zero exit after a success result, and a process group to stop.
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
use rho::runtime::claude_cli::{self, ClaudeError, ClaudeRunRequest, limits};
use rho::runtime::delegation::rundir::{AttachEventKind, RunDirectory, RunReader};
use rho::runtime::delegation::status::{RunRuntime, RunState, RunStatus};
use rho::workflow::exec::CancelToken;
use rho_policy::PermissionMode;

fn standin_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/claude-standin")
}

fn launch(definition: &str, mode: PermissionMode) -> ClaudeLaunch {
    let def = load_definition_text(Path::new("/defs/planner.md"), definition).unwrap();
    let entry = CatalogEntry {
        fingerprint: fingerprint(&def).unwrap(),
        definition: def,
        level: SourceLevel::RhoHome,
        path: None,
        overrides: vec![],
    };
    let config = Config::default();
    let host = HostCapabilities::new(std::iter::empty::<&str>());
    let bound = bind(
        &entry,
        &BindRequest {
            config: &config,
            capabilities: &host,
            invocation: Invocation::Delegated,
            permission_mode: mode,
            max_turns: Some(7),
        },
    )
    .unwrap();
    let BoundRuntime::Claude(launch) = bound.runtime else {
        panic!("not a claude-cli binding");
    };
    launch
}

const DEFINITION: &str = "---\ndescription: plans\nruntime: claude-cli\nmodel: claude-standin-1\n\
                          reasoning: high\ntools: [Read, Bash(git *)]\n---\nBe brief.\n";

struct Fixture {
    _dir: tempfile::TempDir,
    home: RhoHome,
    workspace: PathBuf,
    log: PathBuf,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let home = RhoHome::at(dir.path().join("rho-home"), None);
        let workspace = dir.path().join("work");
        std::fs::create_dir(&workspace).unwrap();
        let log = dir.path().join("argv.log");
        Fixture {
            home,
            workspace,
            log,
            _dir: dir,
        }
    }

    fn env(&self, scenario: &str) -> Vec<(OsString, OsString)> {
        let path = format!("{}:/usr/bin:/bin", standin_dir().display());
        [
            ("PATH", path.as_str()),
            ("HOME", self.workspace.to_str().unwrap()),
            ("CLAUDE_STANDIN_SCENARIO", scenario),
            ("CLAUDE_STANDIN_LOG", self.log.to_str().unwrap()),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .to_vec()
    }

    fn run(
        &self,
        scenario: &str,
        cancel: CancelToken,
    ) -> (
        RunDirectory,
        Result<claude_cli::ClaudeRunOutcome, ClaudeError>,
    ) {
        let status = RunStatus::starting("planner", Some("sha256:00"), RunRuntime::ClaudeCli);
        let run = RunDirectory::create(&self.home, None, &status).unwrap();
        let launch = launch(DEFINITION, PermissionMode::Auto);
        let outcome = claude_cli::run_claude(
            &self.home,
            &run,
            status,
            &ClaudeRunRequest {
                launch: &launch,
                prompt: "plan the release",
                cwd: &self.workspace,
                env: self.env(scenario),
                cancel,
                timeout: Some(Duration::from_mins(1)),
            },
        );
        (run, outcome)
    }

    fn argv_calls(&self) -> Vec<Vec<String>> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut calls = vec![];
        let mut current = vec![];
        for line in text.lines() {
            if line == "--end--" {
                calls.push(std::mem::take(&mut current));
            } else {
                current.push(line.to_owned());
            }
        }
        calls
    }
}

fn on_disk(home: &RhoHome, run: &RunDirectory) -> RunStatus {
    RunReader::open(home, run.id()).unwrap().status().unwrap()
}

#[test]
fn success_records_answer_usage_session_and_exact_argv() {
    let fx = Fixture::new();
    let (run, outcome) = fx.run("success", CancelToken::new());
    let outcome = outcome.unwrap();
    let status = on_disk(&fx.home, &run);
    assert_eq!(status.state, RunState::Ok);
    assert_eq!(status.result.as_deref(), Some("All done."));
    assert_eq!(status.claude_session_id.as_deref(), Some("standin-session"));
    assert_eq!(status.claude_model.as_deref(), Some("claude-standin-1"));
    assert_eq!(
        status.input_tokens,
        Some(57),
        "input includes cache reads and writes"
    );
    assert_eq!(status.cache_read_input_tokens, Some(40));
    assert_eq!(status.cache_creation_input_tokens, Some(5));
    assert_eq!(status.output_tokens, Some(3));
    assert_eq!(status, outcome.status);

    // `auth status` first, then the run with the binder's exact flags.
    let calls = fx.argv_calls();
    assert_eq!(calls[0], ["auth", "status"]);
    let prompt_file = run.path().join(claude_cli::PROMPT_FILE);
    let expected: Vec<String> = [
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--include-partial-messages",
        "--permission-mode",
        "dontAsk",
        "--disallowedTools",
        "Task",
        "--tools",
        "Read,Bash",
        "--allowedTools",
        "Read",
        "Bash(git *)",
        "--setting-sources",
        "project",
        "--strict-mcp-config",
        "--append-system-prompt-file",
        prompt_file.to_str().unwrap(),
        "--model",
        "claude-standin-1",
        "--effort",
        "high",
        "--max-turns",
        "7",
    ]
    .map(str::to_owned)
    .to_vec();
    assert_eq!(calls[1], expected);
    // The body went through a private file, the task through stdin.
    assert_eq!(std::fs::read_to_string(&prompt_file).unwrap(), "Be brief.");
    let mode = std::fs::metadata(&prompt_file).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600
    );
    let stdin = std::fs::read_to_string(format!("{}.stdin", fx.log.display())).unwrap();
    assert_eq!(stdin, "plan the release");
    // stderr went to log.txt.
    let log = std::fs::read_to_string(run.path().join("log.txt")).unwrap();
    assert!(log.contains("stand-in stderr line"), "{log}");
    // The attachment stream has the streamed text and the final state.
    let events = RunReader::open(&fx.home, run.id())
        .unwrap()
        .events()
        .unwrap()
        .read_new()
        .unwrap();
    assert!(events.iter().any(
        |e| matches!(&e.kind, AttachEventKind::Text { text, partial: true } if text == "All ")
    ));
    assert!(matches!(
        events.last().map(|e| &e.kind),
        Some(AttachEventKind::State {
            state: RunState::Ok,
            ..
        })
    ));
}

#[test]
fn is_error_true_with_subtype_success_is_a_failure() {
    let fx = Fixture::new();
    let (run, outcome) = fx.run("is_error_success", CancelToken::new());
    outcome.unwrap();
    let status = on_disk(&fx.home, &run);
    assert_eq!(status.state, RunState::Error);
    assert!(
        status.error.as_deref().unwrap().contains("credit balance"),
        "{status:?}"
    );
    assert!(status.result.is_none());
}

#[test]
fn a_stream_without_result_or_cut_mid_line_is_a_failure() {
    for scenario in ["missing_result", "truncated"] {
        let fx = Fixture::new();
        let (run, outcome) = fx.run(scenario, CancelToken::new());
        outcome.unwrap();
        let status = on_disk(&fx.home, &run);
        assert_eq!(status.state, RunState::Error, "{scenario}");
        let error = status.error.unwrap();
        assert!(
            error.contains("without a final result"),
            "{scenario}: {error}"
        );
    }
}

#[test]
fn a_nonzero_exit_after_a_success_result_keeps_the_success() {
    let fx = Fixture::new();
    let (run, outcome) = fx.run("nonzero_after_success", CancelToken::new());
    let outcome = outcome.unwrap();
    assert_eq!(outcome.exit_code, Some(3));
    let status = on_disk(&fx.home, &run);
    assert_eq!(status.state, RunState::Ok);
    assert_eq!(status.result.as_deref(), Some("finished anyway"));
}

#[test]
fn rate_limit_windows_are_kept_for_rho_limits() {
    let fx = Fixture::new();
    assert!(limits::load(&fx.home).unwrap().windows.is_empty());
    let (_run, outcome) = fx.run("rate_limits", CancelToken::new());
    assert_eq!(outcome.unwrap().rate_limits.len(), 2);
    let observed = limits::load(&fx.home).unwrap();
    assert_eq!(observed.windows["five_hour"].status, "allowed_warning");
    assert_eq!(observed.windows["five_hour"].resets_at, Some(4_102_444_800));
    assert_eq!(observed.windows["seven_day"].status, "allowed");
}

#[test]
fn signed_out_fails_before_spawning_with_a_pointer_to_sign_in() {
    let fx = Fixture::new();
    let (run, outcome) = fx.run("signed_out", CancelToken::new());
    let err = outcome.unwrap_err();
    assert!(matches!(err, ClaudeError::SignedOut { .. }), "{err}");
    assert!(err.to_string().contains("claude auth login"), "{err}");
    assert_eq!(fx.argv_calls().len(), 1, "only `auth status` ran");
    let status = on_disk(&fx.home, &run);
    assert_eq!(status.state, RunState::Error);
    assert!(status.error.unwrap().contains("not signed in"));
}

#[test]
fn a_missing_binary_fails_at_once() {
    let fx = Fixture::new();
    let status = RunStatus::starting("planner", None, RunRuntime::ClaudeCli);
    let run = RunDirectory::create(&fx.home, None, &status).unwrap();
    let launch = launch(DEFINITION, PermissionMode::Plan);
    let env = vec![(OsString::from("PATH"), OsString::from("/nonexistent"))];
    let err = claude_cli::run_claude(
        &fx.home,
        &run,
        status,
        &ClaudeRunRequest {
            launch: &launch,
            prompt: "x",
            cwd: &fx.workspace,
            env,
            cancel: CancelToken::new(),
            timeout: None,
        },
    )
    .unwrap_err();
    assert!(matches!(err, ClaudeError::NotInstalled), "{err}");
    assert!(err.to_string().contains("not found on PATH"));
    assert_eq!(on_disk(&fx.home, &run).state, RunState::Error);
}

#[test]
fn cancel_stops_the_whole_process_group() {
    let fx = Fixture::new();
    let cancel = CancelToken::new();
    let trigger = cancel.clone();
    let child_file = PathBuf::from(format!("{}.child", fx.log.display()));
    let watcher = {
        let child_file = child_file.clone();
        std::thread::spawn(move || {
            for _ in 0..500 {
                if child_file.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            trigger.cancel();
        })
    };
    let (run, outcome) = fx.run("slow", cancel);
    watcher.join().unwrap();
    outcome.unwrap();
    let status = on_disk(&fx.home, &run);
    assert_eq!(status.state, RunState::Stopped);
    let pid: i32 = std::fs::read_to_string(&child_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The background child (same group) is gone: no process with that pid remains, or only a
    // zombie waiting to be reaped. SIGKILL lands asynchronously, so allow it a moment.
    let alive = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.split_whitespace().nth(2) != Some("Z"))
    };
    for _ in 0..100 {
        if !alive() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let alive = alive();
    assert!(!alive, "background child {pid} survived the cancel");
}
