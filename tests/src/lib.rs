//! Helpers for the end-to-end tests: locate the built `rho` and `rho-planner-worker`
//! binaries and run them in a private data directory and workspace with a cleared
//! environment, as a user on a fresh machine would.

pub mod model_server;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The directory holding the workspace's built binaries (`target/debug`).
///
/// Test executables live in `target/debug/deps`; the binaries sit one level up. `cargo test
/// --workspace` builds them before any test runs.
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps dir");
    deps.parent().expect("profile dir").to_path_buf()
}

/// Whether a test that needs a kernel feature (Landlock, seccomp) must fail instead of
/// skipping when the feature is missing: `CI` is set (to anything but the empty string) or
/// `RHO_REQUIRE_SANDBOX=1`. `.ci/run` sets both.
pub fn sandbox_required() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
        || std::env::var_os("RHO_REQUIRE_SANDBOX").is_some_and(|v| v == "1")
}

/// Handles a missing kernel feature in `test`: panics (the test fails) where the sandbox is
/// required ([`sandbox_required`]), otherwise prints loudly why the test is skipped. The
/// caller returns after it.
pub fn skip_or_fail(test: &str, reason: &str) {
    assert!(
        !sandbox_required(),
        "{test}: {reason}, and CI or RHO_REQUIRE_SANDBOX=1 requires it"
    );
    eprintln!("SKIPPING {test}: {reason}; set CI or RHO_REQUIRE_SANDBOX=1 to make this a failure");
}

/// The real Claude Code CLI the tests drive (`RHO_TEST_CLAUDE`, installed by
/// `.ci/install-clients`). Without it: a failure under CI or `RHO_REQUIRE_SANDBOX=1`, else
/// `None` after saying loudly why the test skips.
pub fn claude_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("RHO_TEST_CLAUDE") {
        let path = PathBuf::from(path);
        assert!(
            path.exists(),
            "RHO_TEST_CLAUDE={} does not exist",
            path.display()
        );
        return Some(path);
    }
    let required = std::env::var_os("CI").is_some()
        || std::env::var_os("RHO_REQUIRE_SANDBOX").is_some_and(|v| v == "1");
    assert!(
        !required,
        "RHO_TEST_CLAUDE is not set: the real Claude Code CLI is required here (.ci/install-clients)"
    );
    eprintln!(
        "SKIPPED: RHO_TEST_CLAUDE is not set; install the pinned Claude Code with \
         `bash .ci/install-clients /opt/rho-clients` and export \
         RHO_TEST_CLAUDE=/opt/rho-clients/npm/node_modules/.bin/claude"
    );
    None
}

/// Path of a built binary, with a clear failure when it is missing.
pub fn binary(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.is_file(),
        "{} is not built; run `cargo test --workspace` (or `cargo build --workspace`) first",
        path.display()
    );
    path
}

/// A private environment for one test: a data directory, a home and a workspace.
pub struct Sandbox {
    _root: tempfile::TempDir,
    /// `RHO_HOME`.
    pub home: PathBuf,
    /// `HOME`.
    pub user_home: PathBuf,
    /// The workspace (canonical).
    pub workspace: PathBuf,
}

impl Sandbox {
    /// Creates the directories.
    pub fn new() -> Self {
        let root = tempfile::tempdir().expect("tempdir");
        let base = root.path().canonicalize().expect("canonical tempdir");
        let home = base.join("rho-home");
        let user_home = base.join("home");
        let workspace = base.join("workspace");
        for dir in [&user_home, &workspace] {
            std::fs::create_dir_all(dir).expect("create dir");
        }
        Self {
            _root: root,
            home,
            user_home,
            workspace,
        }
    }

    /// Writes a file under the workspace, creating parents.
    pub fn write(&self, rel: &str, contents: &str) -> PathBuf {
        let path = self.workspace.join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("create parents");
        std::fs::write(&path, contents).expect("write file");
        path
    }

    /// A `rho` command in the workspace with a cleared environment.
    pub fn rho(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(binary("rho"));
        cmd.args(args)
            .current_dir(&self.workspace)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &self.user_home)
            .env("RHO_HOME", &self.home)
            .env("RHO_PLANNER_WORKER", binary("rho-planner-worker"));
        cmd
    }

    /// Runs `rho` and returns its output.
    pub fn run(&self, args: &[&str]) -> Output {
        self.rho(args).output().expect("run rho")
    }
}

impl Default for Sandbox {
    fn default() -> Self {
        Self::new()
    }
}

/// Stdout as text.
pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Stderr as text.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Copies a directory tree (files and directories only).
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create target");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        let kind = entry.file_type().expect("file type");
        if kind.is_dir() {
            copy_tree(&entry.path(), &target);
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target).expect("copy file");
        }
    }
}
