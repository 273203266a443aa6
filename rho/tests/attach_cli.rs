//! `rho attach` follows a delegated run from another process without owning it, and shows a
//! finished one; `rho limits` shows only what runs observed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a broken setup should panic

use std::io::Read as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use rho::paths::RhoHome;
use rho::runtime::claude_cli::limits;
use rho::runtime::claude_cli::stream::RateLimitObservation;
use rho::runtime::delegation::rundir::{AttachEventKind, RunDirectory};
use rho::runtime::delegation::status::{RunRuntime, RunState, RunStatus};

fn rho(home: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rho"));
    cmd.args(args)
        .current_dir("/")
        .env_clear()
        .env("RHO_HOME", home)
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::null());
    cmd
}

fn home() -> (tempfile::TempDir, RhoHome) {
    let dir = tempfile::tempdir().unwrap();
    let home = RhoHome::at(dir.path().join("rho-home"), None);
    (dir, home)
}

#[test]
fn attach_shows_a_finished_run_with_its_result_and_claude_session() {
    let (_t, home) = home();
    let mut status = RunStatus::starting("planner", Some("sha256:ab"), RunRuntime::ClaudeCli);
    let run = RunDirectory::create(&home, None, &status).unwrap();
    run.append_event(AttachEventKind::ToolUse {
        name: "Read".into(),
        summary: "{\"file_path\":\"notes.txt\"}".into(),
    })
    .unwrap();
    status.transition(RunState::Ok);
    status.result = Some("ship it \u{1b}]52;c;evil\u{7}".into());
    status.claude_session_id = Some("sess-42".into());
    run.write_status(&status).unwrap();

    let out = rho(home.root(), &["attach", run.id()]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("→ Read"), "{text}");
    assert!(text.contains("ship it"), "{text}");
    assert!(
        !text.contains('\u{1b}'),
        "control characters reach the terminal: {text:?}"
    );
    assert!(text.contains("claude --resume sess-42"), "{text}");

    let out = rho(home.root(), &["attach", run.id(), "--output", "jsonl"])
        .output()
        .unwrap();
    let last = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap()
        .to_owned();
    let value: serde_json::Value = serde_json::from_str(&last).unwrap();
    assert_eq!(value["status"]["state"], "ok");
}

#[test]
fn attach_follows_a_live_run_until_it_ends_without_owning_it() {
    let (_t, home) = home();
    let mut status = RunStatus::starting("worker", None, RunRuntime::Rho);
    let run = RunDirectory::create(&home, None, &status).unwrap();
    status.transition(RunState::Running);
    run.write_status(&status).unwrap();

    let mut child = rho(home.root(), &["attach", run.id()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "attach returned while the run is live"
    );
    run.append_event(AttachEventKind::Text {
        text: "half way".into(),
        partial: true,
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "attach returned while the run is live"
    );
    status.transition(RunState::Stopped);
    status.error = Some("cancelled through agents".into());
    run.write_status(&status).unwrap();
    run.append_event(AttachEventKind::State {
        state: RunState::Stopped,
        detail: status.error.clone(),
    })
    .unwrap();
    let code = child.wait().unwrap().code();
    let mut text = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    assert_eq!(
        code,
        Some(5),
        "a stopped run exits as a cancellation: {text}"
    );
    assert!(text.contains("half way"), "{text}");
    assert!(text.contains("cancelled through agents"), "{text}");
}

#[test]
fn attach_refuses_unknown_and_malformed_ids() {
    let (_t, home) = home();
    std::fs::create_dir_all(home.root()).unwrap();
    let out = rho(home.root(), &["attach", "abc123"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no delegated run `abc123`"));
    let out = rho(home.root(), &["attach", "../../x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a run id"));
}

#[test]
fn limits_show_nothing_until_a_run_reports_windows() {
    let (_t, home) = home();
    let out = rho(home.root(), &["limits"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("no Claude rate-limit windows observed"));
    limits::record(
        &home,
        &[RateLimitObservation {
            window: Some("five_hour".into()),
            status: "allowed_warning".into(),
            resets_at: Some(4_102_444_800),
        }],
    )
    .unwrap();
    let out = rho(home.root(), &["limits"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("claude five_hour: allowed_warning, resets in"),
        "{text}"
    );
    let out = rho(home.root(), &["limits", "--output", "json"])
        .output()
        .unwrap();
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        value["claude"]["windows"]["five_hour"]["status"],
        "allowed_warning"
    );
}
