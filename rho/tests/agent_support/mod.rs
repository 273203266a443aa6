//! Shared harness for the agent runtime's end-to-end tests: a private `RHO_HOME`, `HOME`
//! and workspace, a configuration pointing a custom OpenAI-compatible provider (or the
//! Anthropic provider) at a loopback scripted model server, and `rho` with a cleared
//! environment.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rho_e2e::model_server::ModelServer;

/// The key the tests give the provider; it must never appear in a file rho writes.
pub const SECRET: &str = "sk-rho-test-do-not-leak-7f3a";

/// A private home, data directory and workspace.
pub struct AgentEnv {
    _root: tempfile::TempDir,
    /// `RHO_HOME`.
    pub home: PathBuf,
    /// `HOME`.
    pub user_home: PathBuf,
    /// The workspace (canonical).
    pub workspace: PathBuf,
    /// Extra environment.
    pub env: Vec<(String, String)>,
}

impl AgentEnv {
    /// Directories and a configuration using the custom host `local` on `server`.
    pub fn new(server: &ModelServer) -> Self {
        let env = Self::bare();
        env.write_config(&format!(
            "[model]\nprovider = \"local\"\nmodel = \"scripted-1\"\n\n\
             [providers.custom.local]\nbase_url = \"{}/v1\"\n",
            server.base_url()
        ));
        let mut env = env;
        env.env.push(("RHO_LOCAL_API_KEY".into(), SECRET.into()));
        env
    }

    /// Directories without a configuration.
    pub fn bare() -> Self {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().canonicalize().unwrap();
        let home = base.join("rho-home");
        let user_home = base.join("home");
        let workspace = base.join("workspace");
        for dir in [&home, &user_home, &workspace] {
            std::fs::create_dir_all(dir).unwrap();
        }
        Self {
            _root: root,
            home,
            user_home,
            workspace,
            env: Vec::new(),
        }
    }

    /// Replaces `config.toml`.
    pub fn write_config(&self, text: &str) {
        std::fs::write(self.home.join("config.toml"), text).unwrap();
    }

    /// Writes a workspace file.
    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let path = self.workspace.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }

    /// `rho ARGS` in the workspace with a cleared environment.
    pub fn rho(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rho"));
        cmd.args(args)
            .current_dir(&self.workspace)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &self.user_home)
            .env("RHO_HOME", &self.home);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Runs `rho ARGS`.
    pub fn run(&self, args: &[&str]) -> Output {
        self.rho(args).output().unwrap()
    }

    /// Every session transcript under `RHO_HOME/sessions`.
    pub fn transcripts(&self) -> Vec<PathBuf> {
        let mut found = Vec::new();
        walk(&self.home.join("sessions"), &mut found);
        found.retain(|p| p.file_name().is_some_and(|n| n == "events.jsonl"));
        found
    }

    /// Asserts no file under `RHO_HOME` holds the key.
    pub fn assert_no_secret_on_disk(&self) {
        let mut files = Vec::new();
        walk(&self.home, &mut files);
        for file in files {
            if let Ok(bytes) = std::fs::read(&file) {
                assert!(
                    !String::from_utf8_lossy(&bytes).contains(SECRET),
                    "{} holds the API key",
                    file.display()
                );
            }
        }
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// Stdout as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Stderr as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The JSON lines of stdout.
pub fn jsonl(out: &Output) -> Vec<serde_json::Value> {
    stdout(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// The tool names offered in a recorded OpenAI-style request, sorted.
pub fn offered_tools(body: &serde_json::Value) -> Vec<String> {
    let mut names: Vec<String> = body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The content of every tool message in a recorded OpenAI-style request, in order.
pub fn tool_results(body: &serde_json::Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}
