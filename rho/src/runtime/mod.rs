//! How an agent runs: model providers (the wire protocols), rho's own agent loop and its
//! session transcript, the external Claude Code CLI runtime, and the delegated-run
//! machinery they share (run directories, pools, attachment).
//!
//! Invariant: rho's loop reaches tools only through one [`agent_loop::ToolHost`] — the
//! registry and its permission path — and never holds a provider key anywhere but in the
//! provider's [`provider::ApiKey`].

pub mod agent_loop;
pub mod claude_cli;
pub mod delegation;
pub mod host;
pub mod launch;
pub mod node;
pub mod provider;
pub mod transcript;
