//! Shared by `rho` and `rho-planner-worker`: the canonical CBOR layer, the frozen program
//! model, planning budgets, digests and the framed messages of the planner conversation.
//!
//! This crate depends on no other crate of the workspace.

pub mod budget;
pub mod canonical;
pub mod data;
pub mod digest;
pub mod evaluated;
pub mod frame;
pub mod message;
pub mod program;
