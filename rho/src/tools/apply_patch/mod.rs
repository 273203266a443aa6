//! `apply_patch`: applies a Codex-style patch (add, delete, update and move sections across
//! one or more files).
//!
//! Invariant: the whole patch is parsed and every new content computed before anything is
//! written (see [`patch`]).

pub mod patch;
