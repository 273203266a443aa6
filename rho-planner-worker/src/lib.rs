//! Sandboxed Starlark planner worker.
//!
//! The binary hardens itself ([`sandbox::harden`]) before reading its request, then serves
//! one planner conversation.

pub mod dsl;
pub mod sandbox;
pub mod session;
