//! How an agent runs: the runtimes (rho's own loop, the external Claude Code CLI) and the
//! delegated-run machinery they share (run directories, pools, attachment).

pub mod claude_cli;
pub mod delegation;
