//! Shared helpers for the `plan_*` integration tests: a temporary data directory and a
//! canonical temporary workspace, and the real `rho` binary run in them with a cleared
//! environment (the planner worker is found next to `rho`, as in an installation).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `rho` binary under test.
pub fn rho_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rho"))
}

/// The worker next to `rho`; the tests need it built (`cargo test --workspace` builds it,
/// `cargo test -p rho` alone does not).
pub fn worker_bin() -> PathBuf {
    let worker = rho_bin().with_file_name("rho-planner-worker");
    assert!(
        worker.is_file(),
        "{} is missing: build it first with `cargo build -p rho-planner-worker` (or run \
         `cargo test --workspace`, which builds it)",
        worker.display()
    );
    worker
}

/// A data directory and a workspace.
pub struct Env {
    _home_dir: tempfile::TempDir,
    _ws_dir: tempfile::TempDir,
    /// `RHO_HOME` (does not exist until something is stored).
    pub home: PathBuf,
    /// The canonical workspace.
    pub ws: PathBuf,
    /// Extra variables for every `rho` run.
    pub vars: Vec<(String, String)>,
}

impl Env {
    pub fn new() -> Self {
        worker_bin();
        let home_dir = tempfile::tempdir().unwrap();
        let ws_dir = tempfile::tempdir().unwrap();
        let home = home_dir.path().canonicalize().unwrap().join("rho-home");
        let ws = ws_dir.path().canonicalize().unwrap();
        Self {
            _home_dir: home_dir,
            _ws_dir: ws_dir,
            home,
            ws,
            vars: Vec::new(),
        }
    }

    /// Writes a workspace file (parents created).
    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        write_file(&self.ws.join(rel), text)
    }

    /// Writes `$RHO_HOME/config.toml`.
    pub fn config(&self, text: &str) {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::create_dir_all(&self.home).unwrap();
        std::fs::set_permissions(&self.home, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::write(self.home.join("config.toml"), text).unwrap();
    }

    /// Runs `rho args...` in the workspace with only `RHO_HOME`, `HOME` and `PATH` set.
    pub fn rho(&self, args: &[&str]) -> Run {
        self.rho_in(&self.ws, args)
    }

    /// Runs `rho` in another directory.
    pub fn rho_in(&self, dir: &Path, args: &[&str]) -> Run {
        let mut command = Command::new(rho_bin());
        command
            .args(args)
            .current_dir(dir)
            .env_clear()
            .env("RHO_HOME", &self.home)
            .env("HOME", self.home.parent().unwrap())
            .env("PATH", "/usr/bin:/bin");
        for (k, v) in &self.vars {
            command.env(k, v);
        }
        Run::from(command.output().unwrap())
    }

    /// Every path below `RHO_HOME` with its mode, sorted (empty when it does not exist).
    pub fn store_snapshot(&self) -> Vec<String> {
        let mut out = Vec::new();
        walk(&self.home, &self.home, &mut out);
        out.sort();
        out
    }

    /// The plan directory names.
    pub fn plan_dirs(&self) -> Vec<String> {
        let dir = self.home.join("workflows/plans");
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// Plans `file` and returns the plan id.
    pub fn plan_ok(&self, file: &str) -> String {
        let run = self.rho(&["workflow", "plan", file, "--output", "json"]);
        assert_eq!(run.code, 0, "plan failed: {}", run.stderr);
        let doc: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
        doc["plan_id"].as_str().unwrap().to_owned()
    }
}

pub fn write_file(path: &Path, text: &str) -> PathBuf {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, text).unwrap();
    path.to_owned()
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
    use std::os::unix::fs::PermissionsExt as _;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let entry = entry.unwrap();
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        out.push(format!(
            "{:o} {}",
            meta.permissions().mode() & 0o7777,
            path.strip_prefix(root).unwrap().display()
        ));
        if meta.is_dir() {
            walk(root, &path, out);
        }
    }
}

/// The result of one `rho` run.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(output: Output) -> Self {
        Self {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

/// A command node in Starlark with the required bounds.
pub fn cmd(name: &str, argv: &str, extra: &str) -> String {
    format!(
        "command(name = \"{name}\", argv = {argv}, timeout_seconds = 60, max_output_bytes = 4096{extra})"
    )
}

/// A workflow file whose `build` returns `nodes` (Starlark expressions) under `name`.
pub fn workflow(nodes: &[String], exports: &str) -> String {
    format!(
        "def build(inputs):\n    return workflow(name = \"wf\", nodes = [\n        {}\n    ]{exports})\n\nWORKFLOW = define(inputs = {{}}, build = build)\n",
        nodes.join(",\n        ")
    )
}
