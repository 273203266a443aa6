//! `bash`: runs one foreground shell command in the workspace and returns its output.
//!
//! Invariant: commands run with the host environment minus every credential `rho` keeps from
//! child processes (its own provider keys included), stdin closed, a wall-clock timeout and
//! bounded output; on timeout or cancellation the whole process group is killed (see
//! [`shell`]).

pub mod output;
pub mod shell;
