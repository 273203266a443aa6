//! Workflows: planning (the host side of the planner conversation, resolution and
//! freezing), the stores for plans and runs, the pure scheduler, the run owner, and
//! verified-handle execution.
//!
//! Dependencies inside this module point one way: `plan` and the runner use `store` and
//! `identity`; `scheduler` is pure and knows nothing of processes or files.

pub mod checkout;
pub mod crashpoint;
pub mod describe;
pub mod exec;
pub mod identity;
pub mod journal;
pub mod locate;
pub mod logs;
pub mod plan;
pub mod prune;
pub mod runner;
pub mod scheduler;
pub mod service;
pub mod state;
pub mod store;
