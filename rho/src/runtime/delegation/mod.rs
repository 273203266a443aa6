//! Delegated runs: their run directories and status contract (`result.json`,
//! `events.jsonl`, `log.txt`, the global index), the concurrency pools, and attachment
//! (`rho attach`), shared by every runtime a delegated agent runs on.
//!
//! Invariant: a run is observed only through its files, so any process can attach to it
//! without owning it, and a status written as terminal stays terminal.

pub mod manager;
pub mod pool;
pub mod rundir;
pub mod status;

use std::path::PathBuf;

use crate::workflow::store::StoreError;

/// Why a delegated run's files or pools could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DelegationError {
    /// A store primitive failed (permissions, links, I/O), naming the path.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A status or event could not be encoded.
    #[error("cannot encode a run status")]
    Encode(#[source] serde_json::Error),
    /// `result.json`, an event line or a limits file is not what it should be.
    #[error("{} is malformed: {problem}", path.display())]
    CorruptStatus {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// A complete line of the run index does not parse.
    #[error("{} line {line} is malformed: {problem}", path.display())]
    CorruptIndex {
        /// The index.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        problem: String,
    },
    /// No free run id was found (never expected: 36^6 ids).
    #[error("cannot find a free run id")]
    IdSpace,
    /// An id that is not six characters of `[a-z0-9]`.
    #[error("`{id}` is not a run id (six characters, a-z and 0-9)")]
    BadRunId {
        /// What was given.
        id: String,
    },
    /// No run has this id.
    #[error("no delegated run `{id}` (looked in the run index and $RHO_HOME/subagents)")]
    UnknownRun {
        /// The id.
        id: String,
    },
    /// A pool size variable is not an integer in range.
    #[error("{var}={value:?} is not a pool size: use an integer from 1 to {max}")]
    BadPoolSize {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// The largest accepted size.
        max: usize,
    },
}
