//! Saved interactive sessions: one folder per session under
//! `$RHO_HOME/sessions/<workspace-key>/<created-at>_<session-id>/`, holding an append-only
//! `session.jsonl` whose first record names the workspace, the agent and its fingerprint,
//! followed by the conversation's messages.
//!
//! Invariant: a session is only ever appended to, one whole JSON line per record flushed to
//! disk at the end of each turn, so a crash loses at most the turn in flight and never
//! corrupts what was saved; a line that does not parse is reported with its number rather
//! than skipped.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead as _, BufReader, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Format version of `session.jsonl` written by this build.
pub const SESSION_FORMAT: u32 = 1;

/// The transcript file inside a session folder.
pub const TRANSCRIPT: &str = "session.jsonl";

/// A session file larger than this is not loaded.
const MAX_SESSION_BYTES: u64 = 256 << 20;

/// Why a session could not be created, found, loaded or saved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// A file or directory of the store could not be read or written.
    #[error("cannot {action} `{}`", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// No saved session matches the id or prefix.
    #[error("no saved session matches `{id}`")]
    NotFound {
        /// The id or prefix given.
        id: String,
    },
    /// More than one session matches the prefix.
    #[error("session prefix `{id}` is ambiguous: {}", matches.join(", "))]
    Ambiguous {
        /// The prefix given.
        id: String,
        /// The matching session ids.
        matches: Vec<String>,
    },
    /// A line of a transcript is not a valid record.
    #[error("{}:{line}: invalid session record: {problem}", path.display())]
    Corrupt {
        /// The transcript.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        problem: String,
    },
    /// A transcript exceeds the size limit.
    #[error("`{}` is larger than the {limit}-byte session limit", path.display())]
    TooLarge {
        /// The transcript.
        path: PathBuf,
        /// The limit.
        limit: u64,
    },
}

/// The first record of a session: who and where.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionMeta {
    /// [`SESSION_FORMAT`] at creation.
    pub format: u32,
    /// The session id (a UUID).
    pub id: String,
    /// Creation time, UTC, `YYYY-MM-DDTHH-MM-SSZ`.
    pub created_at: String,
    /// The canonical workspace the session works in.
    pub workspace: PathBuf,
    /// The agent the session is bound to; it never changes within the session.
    pub agent_id: String,
    /// That agent's semantic fingerprint when the session was created.
    pub fingerprint: String,
}

/// One line of `session.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum SessionRecord {
    /// The header, always first.
    Session(SessionMeta),
    /// One conversation message, as the runtime serializes it.
    Message {
        /// The message.
        message: serde_json::Value,
    },
    /// The model selected from here on (`/model`).
    Model {
        /// `provider/model` or `@alias`, as the user typed it.
        model: String,
    },
}

/// A session read back from disk.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadedSession {
    /// Its folder.
    pub dir: PathBuf,
    /// The header.
    pub meta: SessionMeta,
    /// The conversation so far.
    pub messages: Vec<serde_json::Value>,
    /// The last model selected with `/model`, if any.
    pub model: Option<String>,
}

/// The `sessions` directory of `$RHO_HOME`.
#[derive(Clone, Debug)]
pub struct SessionStore {
    root: PathBuf,
}

/// An open transcript, appended to as the conversation goes.
#[derive(Debug)]
pub struct SessionWriter {
    path: PathBuf,
    file: File,
}

impl SessionStore {
    /// The store under `rho_home`.
    pub fn new(rho_home: &Path) -> Self {
        SessionStore {
            root: rho_home.join("sessions"),
        }
    }

    /// The folder holding every session of the canonical `workspace` (the same key the
    /// checkout lock uses).
    pub fn workspace_dir(&self, workspace: &Path) -> PathBuf {
        self.root
            .join(crate::workflow::checkout::workspace_key(workspace))
    }

    /// Creates the transcript of a new session in its folder `dir` (created when missing;
    /// the runtime's event log lives beside it) and writes its header.
    pub fn create(&self, dir: &Path, meta: &SessionMeta) -> Result<SessionWriter, SessionError> {
        let dir = dir.to_path_buf();
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|source| SessionError::Io {
                action: "create",
                path: dir.clone(),
                source,
            })?;
        let path = dir.join(TRANSCRIPT);
        let file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|source| SessionError::Io {
                action: "create",
                path: path.clone(),
                source,
            })?;
        let mut writer = SessionWriter { path, file };
        writer.append(&[SessionRecord::Session(meta.clone())])?;
        Ok(writer)
    }

    /// Finds a session by id or unique id prefix: in `workspace` first, then in every
    /// workspace (a session always continues in its own workspace).
    pub fn find(&self, workspace: &Path, id: &str) -> Result<PathBuf, SessionError> {
        let local = Self::matches_in(&self.workspace_dir(workspace), id)?;
        let found = if local.is_empty() {
            let mut all = Vec::new();
            let entries = match fs::read_dir(&self.root) {
                Ok(entries) => entries,
                Err(err) if err.kind() == io::ErrorKind::NotFound => {
                    return Err(SessionError::NotFound { id: id.to_owned() });
                }
                Err(source) => {
                    return Err(SessionError::Io {
                        action: "list",
                        path: self.root.clone(),
                        source,
                    });
                }
            };
            for entry in entries.flatten() {
                all.extend(Self::matches_in(&entry.path(), id)?);
            }
            all
        } else {
            local
        };
        match found.len() {
            0 => Err(SessionError::NotFound { id: id.to_owned() }),
            1 => Ok(found
                .into_iter()
                .next()
                .map(|(_, dir)| dir)
                .unwrap_or_default()),
            _ => Err(SessionError::Ambiguous {
                id: id.to_owned(),
                matches: found.into_iter().map(|(id, _)| id).collect(),
            }),
        }
    }

    /// Session folders in `dir` whose id starts with `prefix`, as `(id, folder)`.
    fn matches_in(dir: &Path, prefix: &str) -> Result<Vec<(String, PathBuf)>, SessionError> {
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(SessionError::Io {
                    action: "list",
                    path: dir.to_path_buf(),
                    source,
                });
            }
        };
        let mut found = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some((_, id)) = name.split_once('_')
                && !prefix.is_empty()
                && id.starts_with(prefix)
                && entry.path().join(TRANSCRIPT).is_file()
            {
                found.push((id.to_owned(), entry.path()));
            }
        }
        found.sort();
        Ok(found)
    }

    /// The sessions of `workspace`, newest first, as `(id, folder)`.
    pub fn list(&self, workspace: &Path) -> Result<Vec<(String, PathBuf)>, SessionError> {
        let dir = self.workspace_dir(workspace);
        let mut all: Vec<(String, String, PathBuf)> = Vec::new();
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(SessionError::Io {
                    action: "list",
                    path: dir,
                    source,
                });
            }
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some((_, id)) = name.split_once('_') {
                all.push((name.clone(), id.to_owned(), entry.path()));
            }
        }
        all.sort();
        all.reverse();
        Ok(all.into_iter().map(|(_, id, dir)| (id, dir)).collect())
    }
}

/// Reads a session folder's transcript.
pub fn load(dir: &Path) -> Result<LoadedSession, SessionError> {
    let path = dir.join(TRANSCRIPT);
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|source| SessionError::Io {
            action: "open",
            path: path.clone(),
            source,
        })?;
    let len = file
        .metadata()
        .map_err(|source| SessionError::Io {
            action: "inspect",
            path: path.clone(),
            source,
        })?
        .len();
    if len > MAX_SESSION_BYTES {
        return Err(SessionError::TooLarge {
            path,
            limit: MAX_SESSION_BYTES,
        });
    }
    let mut meta = None;
    let mut messages = Vec::new();
    let mut model = None;
    for (n, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|source| SessionError::Io {
            action: "read",
            path: path.clone(),
            source,
        })?;
        let corrupt = |problem: String| SessionError::Corrupt {
            path: path.clone(),
            line: n + 1,
            problem,
        };
        if line.trim().is_empty() {
            continue;
        }
        let record: SessionRecord =
            serde_json::from_str(&line).map_err(|e| corrupt(e.to_string()))?;
        match (record, &meta) {
            (SessionRecord::Session(m), None) => {
                if m.format != SESSION_FORMAT {
                    return Err(corrupt(format!(
                        "session format {} is not supported (this rho reads {SESSION_FORMAT})",
                        m.format
                    )));
                }
                meta = Some(m);
            }
            (SessionRecord::Session(_), Some(_)) => {
                return Err(corrupt("a second session header".to_owned()));
            }
            (_, None) => {
                return Err(corrupt(
                    "the first record must be the session header".to_owned(),
                ));
            }
            (SessionRecord::Message { message }, Some(_)) => messages.push(message),
            (SessionRecord::Model { model: m }, Some(_)) => model = Some(m),
        }
    }
    let meta = meta.ok_or_else(|| SessionError::Corrupt {
        path: path.clone(),
        line: 1,
        problem: "empty transcript".to_owned(),
    })?;
    Ok(LoadedSession {
        dir: dir.to_path_buf(),
        meta,
        messages,
        model,
    })
}

impl SessionWriter {
    /// Opens an existing session's transcript to continue it.
    pub fn reopen(dir: &Path) -> Result<Self, SessionError> {
        let path = dir.join(TRANSCRIPT);
        let file = OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|source| SessionError::Io {
                action: "open",
                path: path.clone(),
                source,
            })?;
        Ok(SessionWriter { path, file })
    }

    /// The transcript's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The session folder.
    pub fn dir(&self) -> &Path {
        self.path.parent().unwrap_or(&self.path)
    }

    /// Appends records as whole lines in one write, then flushes them to disk.
    pub fn append(&mut self, records: &[SessionRecord]) -> Result<(), SessionError> {
        let mut buf = Vec::new();
        for record in records {
            serde_json::to_writer(&mut buf, record).map_err(|e| SessionError::Io {
                action: "encode a record for",
                path: self.path.clone(),
                source: io::Error::other(e),
            })?;
            buf.push(b'\n');
        }
        let io_err = |source| SessionError::Io {
            action: "write",
            path: self.path.clone(),
            source,
        };
        self.file.write_all(&buf).map_err(io_err)?;
        self.file.sync_data().map_err(io_err)
    }
}

/// The current UTC time as `YYYY-MM-DDTHH-MM-SSZ` (file-name safe, sorts by time).
pub fn timestamp_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    timestamp(secs)
}

fn timestamp(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rest = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}-{:02}-{:02}Z",
        rest / 3600,
        (rest % 3600) / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(workspace: &Path, id: &str) -> SessionMeta {
        SessionMeta {
            format: SESSION_FORMAT,
            id: id.to_owned(),
            created_at: timestamp(1_700_000_000),
            workspace: workspace.to_path_buf(),
            agent_id: "default".to_owned(),
            fingerprint: "sha256:ab".to_owned(),
        }
    }

    #[test]
    fn timestamps_are_civil_utc() {
        assert_eq!(timestamp(0), "1970-01-01T00-00-00Z");
        assert_eq!(timestamp(1_700_000_000), "2023-11-14T22-13-20Z");
        assert_eq!(timestamp(951_782_400), "2000-02-29T00-00-00Z");
    }

    #[test]
    fn sessions_round_trip_and_are_found_by_prefix() {
        let home = tempfile::tempdir().unwrap();
        let store = SessionStore::new(home.path());
        let ws = Path::new("/w/one");
        let folder = |m: &SessionMeta| {
            store
                .workspace_dir(&m.workspace)
                .join(format!("{}_{}", m.created_at, m.id))
        };
        let first = meta(ws, "aaaa-1111");
        let mut writer = store.create(&folder(&first), &first).unwrap();
        writer
            .append(&[
                SessionRecord::Message {
                    message: serde_json::json!({"role": "user", "content": "hi"}),
                },
                SessionRecord::Model {
                    model: "@fast".to_owned(),
                },
            ])
            .unwrap();
        let second = meta(Path::new("/w/two"), "aaab-2222");
        store.create(&folder(&second), &second).unwrap();

        let dir = store.find(ws, "aaaa").unwrap();
        let loaded = load(&dir).unwrap();
        assert_eq!(loaded.meta, meta(ws, "aaaa-1111"));
        assert_eq!(loaded.messages.len(), 1);
        assert_eq!(loaded.model.as_deref(), Some("@fast"));
        // Found from another workspace too; an ambiguous prefix lists both.
        assert!(store.find(Path::new("/elsewhere"), "aaab").is_ok());
        assert!(matches!(
            store.find(Path::new("/elsewhere"), "aaa"),
            Err(SessionError::Ambiguous { matches, .. }) if matches.len() == 2
        ));
        assert!(matches!(
            store.find(ws, "zzz"),
            Err(SessionError::NotFound { .. })
        ));
    }

    #[test]
    fn a_corrupt_line_is_reported_with_its_number() {
        let home = tempfile::tempdir().unwrap();
        let store = SessionStore::new(home.path());
        let m = meta(Path::new("/w"), "id1");
        let writer = store
            .create(&store.workspace_dir(&m.workspace).join("x_id1"), &m)
            .unwrap();
        let mut f = OpenOptions::new().append(true).open(writer.path()).unwrap();
        writeln!(f, "{{\"type\":\"message\"}}").unwrap();
        let err = load(writer.dir()).unwrap_err();
        assert!(
            matches!(&err, SessionError::Corrupt { line: 2, .. }),
            "{err}"
        );
    }
}
