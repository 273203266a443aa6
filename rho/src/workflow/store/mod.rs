//! The workflow store below `$RHO_HOME/workflows`: private-directory primitives (`fs`), ids
//! and unique-prefix lookup (`ids`), and the plan store (`plans`). The run store builds on the
//! same primitives.
//!
//! Invariant: every directory of the store is 0700 and every file 0600, owned by the current
//! user, reached without following a symbolic link; anything else found there is rejected,
//! never repaired or followed.

pub mod fs;
pub mod ids;
pub mod plans;
pub mod runs;

use std::io;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

/// Why the store refused or failed an operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A store entry is a symbolic link.
    #[error("store entry {} is a symbolic link; the store never follows links", path.display())]
    Symlink {
        /// The entry.
        path: PathBuf,
    },
    /// A store entry belongs to another user.
    #[error("store entry {} is owned by uid {owner}, not by the current user (uid {expected})", path.display())]
    ForeignOwner {
        /// The entry.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// The current effective uid.
        expected: u32,
    },
    /// A store entry is accessible to the group or to others.
    #[error(
        "store entry {} has mode {mode:04o}: it must not be accessible to group or others \
         (directories 0700, files 0600)",
        path.display()
    )]
    Permissions {
        /// The entry.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A store entry is not of the expected type.
    #[error("store entry {} is not a {expected}", path.display())]
    WrongType {
        /// The entry.
        path: PathBuf,
        /// `directory` or `regular file`.
        expected: &'static str,
    },
    /// A store file is larger than it may be.
    #[error("store file {} is larger than {limit} bytes", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit.
        limit: u64,
    },
    /// A store file does not have the expected content.
    #[error("store file {} is corrupt: {problem}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// No stored item matches an id or prefix.
    #[error("no {kind} matches `{prefix}`")]
    UnknownId {
        /// `plan` or `run`.
        kind: &'static str,
        /// The id or prefix given.
        prefix: String,
    },
    /// Several stored items match a prefix.
    #[error("{kind} id prefix `{prefix}` is ambiguous: it matches {}", matches.join(", "))]
    AmbiguousId {
        /// `plan` or `run`.
        kind: &'static str,
        /// The prefix given.
        prefix: String,
        /// Every matching id.
        matches: Vec<String>,
    },
    /// An id or prefix contains characters no id has.
    #[error("`{prefix}` is not a {kind} id or id prefix (lowercase hexadecimal digits and dashes)")]
    InvalidId {
        /// `plan` or `run`.
        kind: &'static str,
        /// The rejected text.
        prefix: String,
    },
    /// A plan or run written by an older release (manifest format 1): listed, shown and
    /// deleted, never run, resumed or cancelled.
    #[error(
        "{kind} {id} was written by an older release (manifest format 1); it can be listed, \
         shown and deleted, but not run, resumed or cancelled: create a new plan from source"
    )]
    Legacy {
        /// `plan` or `run`.
        kind: &'static str,
        /// Its id.
        id: String,
    },
    /// A system call on a store path failed.
    #[error("cannot {action} {}", path.display())]
    Io {
        /// What was attempted (`create`, `read`, `rename`, ...).
        action: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

impl StoreError {
    /// Wraps an I/O error with the action and path.
    pub fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: impl Into<io::Error>,
    ) -> Self {
        StoreError::Io {
            action,
            path: path.into(),
            source: source.into(),
        }
    }
}

/// The current time as an RFC 3339 UTC timestamp with millisecond precision
/// (`2025-01-31T12:00:00.123Z`).
pub fn timestamp_now() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    format_timestamp(now.as_secs(), now.subsec_millis())
}

/// Formats seconds since the epoch (UTC) and milliseconds as RFC 3339.
pub fn format_timestamp(secs: u64, millis: u32) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let month = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(format_timestamp(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_timestamp(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(
            format_timestamp(1_735_689_599, 999),
            "2024-12-31T23:59:59.999Z"
        );
    }
}
