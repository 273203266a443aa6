//! The status contract of a delegated run: `result.json`, rewritten atomically as the run goes
//! and read by parents, `rho attach` and scripts (`rho run --output-file`).
//!
//! The keys and their meaning are Rho 1.47's, so scripts written for Rho read ours unchanged;
//! the cache token fields are our addition beside them.
//!
//! Invariant: a terminal status is sticky. Once `ok`, `error` or `stopped` is on disk, no later
//! snapshot of the same writer can turn it back into `starting` or `running`, and the terminal
//! write is synced before it is reported.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Where a delegated run is in its life.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Reserved, not yet running (waiting for a pool permit, checking `claude auth status`).
    #[default]
    Starting,
    /// The agent is working.
    Running,
    /// Finished with a final answer.
    Ok,
    /// Finished with an error (`error` says which).
    Error,
    /// Cancelled before it finished.
    Stopped,
}

impl RunState {
    /// Whether the run has ended.
    pub const fn is_terminal(self) -> bool {
        matches!(self, RunState::Ok | RunState::Error | RunState::Stopped)
    }

    /// The lowercase name used on disk and in messages.
    pub const fn as_str(self) -> &'static str {
        match self {
            RunState::Starting => "starting",
            RunState::Running => "running",
            RunState::Ok => "ok",
            RunState::Error => "error",
            RunState::Stopped => "stopped",
        }
    }
}

impl std::fmt::Display for RunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which runtime executes a delegated run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunRuntime {
    /// rho's in-process agent loop.
    Rho,
    /// The external `claude` binary.
    ClaudeCli,
}

/// The contents of `result.json`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunStatus {
    /// Where the run is.
    pub state: RunState,
    /// The agent definition's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The definition's semantic fingerprint (`sha256:...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_fingerprint: Option<String>,
    /// The provider (rho runtime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The model asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The runtime executing the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RunRuntime>,
    /// Unix seconds when the run was reserved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<u64>,
    /// Unix seconds when the run first reached a terminal state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<u64>,
    /// Model turns taken.
    #[serde(default)]
    pub turns: u64,
    /// Total input tokens, cache reads and writes included; absent when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Output tokens; absent when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Of `input_tokens`, those read from the prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_input_tokens: Option<u64>,
    /// Of `input_tokens`, those written to the prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation_input_tokens: Option<u64>,
    /// What the run did last (a tool it called, a phase).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_activity: Option<String>,
    /// The latest assistant text seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_text: Option<String>,
    /// The final answer (state `ok`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// Why the run failed or stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The Claude Code session id (claude-cli): `claude --resume <id>` reopens it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claude_session_id: Option<String>,
    /// The model Claude Code reported binding (an alias such as `opus` resolved).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claude_model: Option<String>,
    /// Claude's reported cost of the run, in US dollars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_cost_usd: Option<f64>,
    /// The interactive session that started the run, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session_id: Option<String>,
}

impl RunStatus {
    /// A new run of `agent_id` on `runtime`, reserved now.
    pub fn starting(agent_id: &str, fingerprint: Option<&str>, runtime: RunRuntime) -> Self {
        RunStatus {
            state: RunState::Starting,
            agent_id: Some(agent_id.to_owned()),
            agent_fingerprint: fingerprint.map(str::to_owned),
            runtime: Some(runtime),
            started_at: Some(unix_now()),
            ..RunStatus::default()
        }
    }

    /// Moves to `state`, stamping `finished_at` the first time a terminal state is reached.
    /// A terminal status never changes state again (the first outcome stands).
    pub fn transition(&mut self, state: RunState) {
        if self.state.is_terminal() {
            return;
        }
        self.state = state;
        if state.is_terminal() && self.finished_at.is_none() {
            self.finished_at = Some(unix_now());
        }
    }
}

/// Seconds since the Unix epoch (0 if the clock is before it).
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_state_is_sticky_and_stamped_once() {
        let mut status = RunStatus::starting("explorer", None, RunRuntime::Rho);
        status.transition(RunState::Running);
        assert_eq!(status.state, RunState::Running);
        assert!(status.finished_at.is_none());
        status.transition(RunState::Error);
        let finished = status.finished_at;
        assert!(finished.is_some());
        status.transition(RunState::Running);
        status.transition(RunState::Ok);
        assert_eq!(status.state, RunState::Error);
        assert_eq!(status.finished_at, finished);
    }

    #[test]
    fn keys_match_the_rho_status_contract() {
        let mut status = RunStatus::starting("planner", Some("sha256:ab"), RunRuntime::ClaudeCli);
        status.claude_session_id = Some("s-1".to_owned());
        status.input_tokens = Some(10);
        let value = serde_json::to_value(&status).unwrap_or_default();
        let object = value.as_object().cloned().unwrap_or_default();
        for key in [
            "state",
            "agent_id",
            "agent_fingerprint",
            "runtime",
            "started_at",
            "turns",
            "input_tokens",
            "claude_session_id",
        ] {
            assert!(object.contains_key(key), "missing {key}: {value}");
        }
        assert_eq!(value["state"], "starting");
        assert_eq!(value["runtime"], "claude-cli");
        assert!(!object.contains_key("result"), "absent fields are omitted");
        let back: RunStatus = serde_json::from_value(value).unwrap_or_default();
        assert_eq!(back, status);
    }
}
