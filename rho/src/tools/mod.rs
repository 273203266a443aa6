//! Model-facing tools: one module per tool, each with its JSON Schema, its permission
//! requests, a typed result and a bounded model-facing summary.
//!
//! Invariant: a tool touches the workspace only through [`workspace`] (no symbolic link
//! followed, atomic writes) and runs processes only through its own bounded launcher.

pub mod apply_patch;
pub mod bash;
pub mod edit_file;
pub mod workspace;
