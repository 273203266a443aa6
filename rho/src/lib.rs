//! `rho` plans and runs workflows for coding agents.
//!
//! The command line (`cli`) calls services; services never call the command line. Storage
//! knows nothing of who drives a run, and the scheduler and policy decisions stay pure.

pub mod agents;
pub mod cli;
pub mod config;
pub mod confinement;
pub mod containment;
pub mod health;
pub mod interactive;
pub mod mcp;
pub mod paths;
pub mod permissions;
pub mod process;
pub mod runtime;
pub mod terminal;
pub mod tools;
pub mod trust;
pub mod workflow;
