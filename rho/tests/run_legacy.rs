//! Older stores: hand-written format-1 plan and run directories (the manifest shape of
//! Rho 1.47, under `tests/fixtures/legacy/`) copied into a temporary `RHO_HOME` with the
//! store's modes. They are listed, shown by `status` in their original shape and deletable
//! once no process holds the run's lock; `run`, `resume`, `cancel` (and `graph`) refuse them
//! saying to create a new plan from source, and change nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod run_support;
use run_support::{assert_snapshot_matches_journal, code, rho_bin, rho_command, text};

const PLAN_ID: &str = "0a1b2c3d-0000-4000-8000-000000000147";
const RUN_ID: &str = "1e2f3a4b-0000-4000-8000-000000000147";
const REFUSAL: &str = "create a new plan from source";

struct Env {
    _dir: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/legacy")
}

/// Copies a fixture tree with the store's modes (0700 directories, 0600 files), writing the
/// test workspace's path where the fixture says `@WORKSPACE@`.
fn copy_private(from: &Path, to: &Path, ws: &Path) {
    std::fs::create_dir(to).unwrap();
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o700)).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_private(&entry.path(), &target, ws);
        } else {
            let bytes = std::fs::read(entry.path()).unwrap();
            let bytes = match String::from_utf8(bytes) {
                Ok(t) => t.replace("@WORKSPACE@", ws.to_str().unwrap()).into_bytes(),
                Err(e) => e.into_bytes(),
            };
            std::fs::write(&target, bytes).unwrap();
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
    }
}

impl Env {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        let ws = ws.canonicalize().unwrap();
        let workflows = home.join("workflows");
        for d in [&home, &workflows] {
            std::fs::create_dir(d).unwrap();
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        copy_private(&fixtures().join("plans"), &workflows.join("plans"), &ws);
        copy_private(&fixtures().join("runs"), &workflows.join("runs"), &ws);
        Env {
            _dir: dir,
            home,
            ws,
        }
    }

    fn rho(&self, args: &[&str]) -> Output {
        rho_command(&self.home, &self.ws, args).output().unwrap()
    }

    fn plan_dir(&self) -> PathBuf {
        self.home.join("workflows/plans").join(PLAN_ID)
    }

    fn run_dir(&self) -> PathBuf {
        self.home.join("workflows/runs").join(RUN_ID)
    }

    /// Every file of a directory tree with its bytes, to prove nothing changed.
    fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_owned()];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).unwrap() {
                let entry = entry.unwrap();
                if entry.file_type().unwrap().is_dir() {
                    stack.push(entry.path());
                } else {
                    out.push((entry.path(), std::fs::read(entry.path()).unwrap()));
                }
            }
        }
        out.sort();
        out
    }

    fn fixture_json(&self, rel: &str) -> serde_json::Value {
        let text = std::fs::read_to_string(fixtures().join(rel))
            .unwrap()
            .replace("@WORKSPACE@", self.ws.to_str().unwrap());
        serde_json::from_str(&text).unwrap()
    }
}

#[test]
fn legacy_plans_and_runs_are_listed() {
    let env = Env::new();
    // A current plan next to the legacy one: both listed, newest first.
    std::fs::write(
        env.ws.join("wf.star"),
        "def build(inputs):\n    a = command(name = \"a\", argv = [\"true\"], cwd = \".\", timeout_seconds = 60, max_output_bytes = 4096)\n    return workflow(name = \"now\", nodes = [a])\n\nWORKFLOW = define(inputs = {}, build = build)\n",
    )
    .unwrap();
    let planned = env.rho(&["workflow", "plan", "wf.star"]);
    assert_eq!(code(&planned), 0, "{}", text(&planned));

    let out = env.rho(&["workflow", "list", "--plans", "--json"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let items = section(&out.stdout, "plans");
    assert_eq!(items.len(), 2, "{items:?}");
    assert_eq!(items[0]["name"], "now");
    let legacy = &items[1];
    assert_eq!(legacy["plan_id"], PLAN_ID);
    assert_eq!(legacy["legacy"], true);
    assert_eq!(legacy["name"], "release");
    assert_eq!(legacy["node_count"], 2);
    assert_eq!(legacy["created_at"], "2024-05-31T16:08:37.123Z");

    let out = env.rho(&["workflow", "list"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let line = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.starts_with(PLAN_ID))
        .unwrap()
        .to_owned();
    assert!(
        line.contains("legacy (format 1)") && line.contains("release"),
        "{line}"
    );

    let out = env.rho(&["workflow", "list", "--runs", "--json"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let items = section(&out.stdout, "runs");
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0]["run_id"], RUN_ID);
    assert_eq!(items[0]["plan_id"], PLAN_ID);
    assert_eq!(items[0]["legacy"], true);
    assert_eq!(items[0]["created_at"], "2024-05-31T16:09:59.000Z");
    let out = env.rho(&["workflow", "list", "--runs"]);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.starts_with(RUN_ID) && l.contains("legacy")),
        "{}",
        text(&out)
    );

    // A current run next to the legacy one: both listed, newest first; only the current one
    // has a journal, and its snapshot matches it.
    let out = env.rho(&["workflow", "run", "wf.star", "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let current = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("run_id: "))
        .unwrap()
        .to_owned();
    assert_snapshot_matches_journal(&env.home.join("workflows/runs").join(&current));
    let out = env.rho(&["workflow", "list", "--runs", "--json"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let items = section(&out.stdout, "runs");
    assert_eq!(items.len(), 2, "{items:?}");
    assert_eq!(items[0]["run_id"], current.as_str());
    assert_ne!(items[0]["legacy"], true, "{items:?}");
    assert_eq!(items[1]["run_id"], RUN_ID);

    // Another workspace does not see them.
    let elsewhere = env.ws.join("sub");
    std::fs::create_dir(&elsewhere).unwrap();
    let out = Command::new(rho_bin())
        .args(["workflow", "list", "--runs", "--json"])
        .current_dir(&elsewhere)
        .env_clear()
        .env("RHO_HOME", &env.home)
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap(),
        serde_json::json!({"plans": [], "runs": []})
    );
}

/// One section (`plans` or `runs`) of a `list --json` document.
fn section(stdout: &[u8], name: &str) -> Vec<serde_json::Value> {
    let doc: serde_json::Value = serde_json::from_slice(stdout).unwrap();
    doc[name].as_array().cloned().unwrap_or_default()
}

#[test]
fn status_prints_a_legacy_run_in_its_original_shape() {
    let env = Env::new();
    let before = Env::snapshot(&env.run_dir());
    let out = env.rho(&["workflow", "status", RUN_ID, "--output", "json"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["legacy"], true);
    assert_eq!(
        doc["manifest"],
        env.fixture_json(&format!("runs/{RUN_ID}/manifest.json"))
    );
    assert_eq!(
        doc["state"],
        env.fixture_json(&format!("runs/{RUN_ID}/state.json"))
    );

    // By unique prefix, as text: the manifest and state verbatim after a header line.
    let out = env.rho(&["workflow", "status", &RUN_ID[..6]]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.starts_with(&format!("run: {RUN_ID} (format 1")),
        "{shown}"
    );
    assert!(
        shown.contains("\"consent\"") && shown.contains("\"step_count\": 2"),
        "{shown}"
    );
    assert!(shown.contains("\"last_event_seq\": 5"), "{shown}");
    assert_eq!(
        Env::snapshot(&env.run_dir()),
        before,
        "status changed nothing"
    );
}

#[test]
fn run_resume_cancel_and_graph_refuse_legacy_entries_and_change_nothing() {
    let env = Env::new();
    let plan_before = Env::snapshot(&env.plan_dir());
    let run_before = Env::snapshot(&env.run_dir());

    let out = env.rho(&["workflow", "run", PLAN_ID, "--yes"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    let message = String::from_utf8_lossy(&out.stderr);
    assert!(
        message.contains(&format!("plan {PLAN_ID}"))
            && message.contains("manifest format 1")
            && message.contains(REFUSAL),
        "{message}"
    );
    assert_eq!(
        std::fs::read_dir(env.home.join("workflows/runs"))
            .unwrap()
            .count(),
        1,
        "no run was created"
    );

    for args in [
        vec!["workflow", "resume", RUN_ID, "--yes"],
        vec!["workflow", "resume", RUN_ID, "--yes", "--recover-uncertain"],
        vec!["workflow", "cancel", RUN_ID],
        vec!["workflow", "graph", RUN_ID],
        vec!["workflow", "graph", PLAN_ID],
    ] {
        let out = env.rho(&args);
        assert_eq!(code(&out), 2, "{args:?}: {}", text(&out));
        let message = String::from_utf8_lossy(&out.stderr);
        assert!(
            message.contains("manifest format 1") && message.contains(REFUSAL),
            "{args:?}: {message}"
        );
        assert!(out.stdout.is_empty(), "{args:?}: {}", text(&out));
    }
    assert_eq!(Env::snapshot(&env.plan_dir()), plan_before);
    assert_eq!(
        Env::snapshot(&env.run_dir()),
        run_before,
        "no cancel request, no journal record, nothing"
    );
}

#[test]
fn legacy_entries_are_deleted_once_no_process_holds_the_run_lock() {
    let env = Env::new();
    // A process of the older release still holds the run's writer lock.
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(env.run_dir().join("mutation.lock"))
        .unwrap();
    let held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusiveNonblock).unwrap();
    let out = env.rho(&["workflow", "delete", RUN_ID, "--yes"]);
    assert_eq!(code(&out), 1, "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("mutation.lock is held"),
        "{}",
        text(&out)
    );
    assert!(env.run_dir().join("manifest.json").exists());
    drop(held);

    let out = env.rho(&["workflow", "delete", RUN_ID, "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("deleted run {RUN_ID}\n")
    );
    assert!(!env.run_dir().exists());

    let out = env.rho(&["workflow", "delete", &PLAN_ID[..8], "--yes"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("deleted plan {PLAN_ID}\n")
    );
    assert!(!env.plan_dir().exists());

    for args in [
        &["workflow", "list", "--json"][..],
        &["workflow", "list", "--runs", "--json"][..],
    ] {
        let out = env.rho(args);
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap(),
            serde_json::json!({"plans": [], "runs": []}),
            "{args:?}"
        );
    }
}
