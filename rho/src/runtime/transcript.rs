//! The session transcript: `events.jsonl`, one JSON object per line, appended as the
//! session runs, under `$RHO_HOME/sessions/<workspace-key>/<created>_<session-id>/`.
//!
//! Invariant: only conversation content, tool names, ids, results and usage are written;
//! the record types carry no field for a key, and keys never enter the conversation.
//! Each line is written whole and flushed, so a crash leaves every earlier event readable
//! and at most one torn last line (which a reader skips).

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::paths::RhoHome;
use crate::workflow::checkout::workspace_key;

/// Where sessions of a workspace live.
pub fn sessions_dir(home: &RhoHome, canonical_workspace: &Path) -> PathBuf {
    home.root()
        .join("sessions")
        .join(workspace_key(canonical_workspace))
}

/// An open, append-only transcript.
#[derive(Debug)]
pub struct Transcript {
    path: PathBuf,
    file: File,
    seq: u64,
}

impl Transcript {
    /// Creates the session directory and its `events.jsonl` (owner-only permissions).
    pub fn create(dir: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let path = dir.join("events.jsonl");
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .mode(0o600)
            .open(&path)?;
        Ok(Self { path, file, seq: 0 })
    }

    /// Reopens an existing transcript to append to it (a resumed session).
    pub fn reopen(dir: &Path) -> std::io::Result<Self> {
        let path = dir.join("events.jsonl");
        let seq = read_events(&path)?.len() as u64;
        let file = OpenOptions::new().append(true).open(&path)?;
        Ok(Self { path, file, seq })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one event: `{"seq", "ts", "type", ...fields}`.
    pub fn append(&mut self, kind: &str, fields: Value) -> std::io::Result<()> {
        self.seq += 1;
        let mut event = json!({
            "seq": self.seq,
            "ts": unix_millis(),
            "type": kind,
        });
        if let (Some(obj), Value::Object(extra)) = (event.as_object_mut(), fields) {
            obj.extend(extra);
        }
        let mut line = serde_json::to_vec(&event).map_err(std::io::Error::other)?;
        line.push(b'\n');
        self.file.write_all(&line)?;
        self.file.flush()
    }

    /// Makes everything appended so far durable.
    pub fn sync(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }
}

/// Reads a transcript's events, skipping a torn last line.
pub fn read_events(path: &Path) -> std::io::Result<Vec<Value>> {
    let text = std::fs::read_to_string(path)?;
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect())
}

fn unix_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A new session id (a UUID v4) and its folder name `<created-at>_<id>`.
pub fn new_session_folder() -> (String, String) {
    let id = uuid::Uuid::new_v4().to_string();
    let created = unix_millis();
    (id.clone(), format!("{created}_{id}"))
}
