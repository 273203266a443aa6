//! The agent executor seam: agent nodes run through an [`AgentExecutor`] that the agent
//! runtime work provides.
//!
//! Invariant: without a configured runtime an agent node fails with a reason that names the
//! agent; nothing ever reports a success that did not happen.

use std::path::PathBuf;

use rho_ipc::data::Data;
use rho_ipc::program::{AgentSetup, Schema};

use crate::workflow::exec::CancelToken;
use crate::workflow::state::NodeState;

/// One agent attempt to run.
#[derive(Debug, Clone)]
pub struct AgentRequest {
    /// The run.
    pub run_id: String,
    /// The node.
    pub node: String,
    /// The attempt number.
    pub attempt: u32,
    /// The agent id.
    pub agent: String,
    /// The frozen setup, when the program has it.
    pub setup: Option<AgentSetup>,
    /// The rendered prompt.
    pub prompt: String,
    /// The output schema, if any.
    pub output: Option<Schema>,
    /// The attempt directory (for transcripts and artifacts).
    pub attempt_dir: PathBuf,
    /// Stops the agent.
    pub cancel: CancelToken,
    /// Wall-clock time left for the attempt (the node's `timeout_seconds`, less the wait for
    /// checkout access).
    pub timeout: std::time::Duration,
    /// The node's checkout access: a read-only agent gets no write tools, and its commands
    /// run under the kernel's read-only ruleset.
    pub access: rho_ipc::program::Access,
    /// The node's `max_output_bytes`: the most answer bytes kept.
    pub max_output_bytes: u64,
}

/// How an agent attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentResult {
    /// `success`, `failure`, `denial` or `cancellation`.
    pub state: NodeState,
    /// Why, for anything but success.
    pub reason: Option<String>,
    /// The validated output value.
    pub output: Option<Data>,
}

/// Runs agent nodes.
pub trait AgentExecutor: Send + Sync {
    /// Runs one attempt to its end (blocking), honouring `request.cancel`.
    fn run(&self, request: AgentRequest) -> AgentResult;
}

/// The executor used when no agent runtime is configured: every agent node fails, saying so.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoAgentRuntime;

impl AgentExecutor for NoAgentRuntime {
    fn run(&self, request: AgentRequest) -> AgentResult {
        AgentResult {
            state: NodeState::Failure,
            reason: Some(format!(
                "no agent runtime configured for agent {}",
                request.agent
            )),
            output: None,
        }
    }
}
