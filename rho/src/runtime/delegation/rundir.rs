//! Run directories of delegated runs: `$RHO_HOME/subagents/<id>/` holding `result.json` (the
//! status contract), `events.jsonl` (what `rho attach` shows) and `log.txt` (claude-cli stderr),
//! plus the global run index that lets any process find a run by its id.
//!
//! Invariant: every entry is private (0700 directories, 0600 files, owned by the user, never a
//! link), `events.jsonl` is append-only with a sequence number that grows by one per line, and
//! a terminal `result.json` is never replaced by a non-terminal one.

use std::fs::File;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::Mode;
use serde::{Deserialize, Serialize};

use super::DelegationError;
use super::status::{RunState, RunStatus};
use crate::paths::RhoHome;
use crate::workflow::identity::FileFacts;
use crate::workflow::store::StoreError;
use crate::workflow::store::fs::{PrivateDir, check_private};

/// The status file.
pub const RESULT_FILE: &str = "result.json";
/// The attachment stream.
pub const EVENTS_FILE: &str = "events.jsonl";
/// The claude-cli stderr log.
pub const LOG_FILE: &str = "log.txt";
/// The global run index, one JSON line per run: `{"id":..,"dir":..}`.
pub const INDEX_FILE: &str = "index.jsonl";
/// The directory under `$RHO_HOME` that holds parentless runs and the index.
pub const SUBAGENTS_DIR: &str = "subagents";

/// Length of a run id.
pub const RUN_ID_LEN: usize = 6;
const RUN_ID_ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
/// Largest `result.json` a reader accepts.
const STATUS_LIMIT: u64 = 4 * 1024 * 1024;
/// Largest index a reader accepts.
const INDEX_LIMIT: u64 = 64 * 1024 * 1024;

/// One line of `events.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttachEvent {
    /// 1 for the first line, growing by one per line.
    pub seq: u64,
    /// Unix milliseconds when the event was written.
    pub at_ms: u64,
    /// What happened.
    #[serde(flatten)]
    pub kind: AttachEventKind,
}

/// What an attachment event reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum AttachEventKind {
    /// The run changed state.
    State {
        /// The new state.
        state: RunState,
        /// Why, for `error` and `stopped`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// Assistant text (a whole block, or a streamed piece when `partial`).
    Text {
        /// The text.
        text: String,
        /// A streamed piece of a block still being written.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        partial: bool,
    },
    /// The agent called a tool.
    ToolUse {
        /// The tool's name.
        name: String,
        /// A short rendering of its input.
        summary: String,
    },
    /// A tool answered.
    ToolResult {
        /// Whether the tool reported an error.
        is_error: bool,
        /// A short rendering of its output.
        summary: String,
    },
    /// Usage so far (or final).
    Usage {
        /// Input tokens, cache included.
        input_tokens: u64,
        /// Output tokens.
        output_tokens: u64,
        /// Of the input, read from the cache.
        cache_read_input_tokens: u64,
        /// Of the input, written to the cache.
        cache_creation_input_tokens: u64,
    },
    /// A rate-limit window the runtime reported.
    RateLimit {
        /// The window (`five_hour`, `seven_day`, ...), when named.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        window: Option<String>,
        /// Its status (`allowed`, `allowed_warning`, `rejected`).
        status: String,
        /// Unix seconds when it resets, when reported.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resets_at: Option<u64>,
    },
}

/// An entry of the global run index.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct IndexEntry {
    id: String,
    dir: PathBuf,
}

/// The directory of one delegated run, open for writing by its owner.
#[derive(Debug)]
pub struct RunDirectory {
    id: String,
    dir: PrivateDir,
    events: Mutex<EventWriter>,
    /// The last state written, so a terminal status is never demoted.
    written: Mutex<RunState>,
}

#[derive(Debug)]
struct EventWriter {
    file: File,
    seq: u64,
}

/// A new random run id: six characters of `[a-z0-9]`.
pub fn new_run_id() -> String {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    bytes[..RUN_ID_LEN]
        .iter()
        .map(|b| char::from(RUN_ID_ALPHABET[usize::from(*b) % RUN_ID_ALPHABET.len()]))
        .collect()
}

/// Whether `text` has the shape of a run id.
pub fn is_run_id(text: &str) -> bool {
    text.len() == RUN_ID_LEN && text.bytes().all(|b| RUN_ID_ALPHABET.contains(&b))
}

impl RunDirectory {
    /// Reserves a new run: a fresh id unique in the index, its directory (under `parent`, a
    /// session's directory, or `$RHO_HOME/subagents/`), an index line, and the first status.
    pub fn create(
        home: &RhoHome,
        parent: Option<&PrivateDir>,
        status: &RunStatus,
    ) -> Result<Self, DelegationError> {
        let root = PrivateDir::open_home(home.root(), true)?
            .ok_or_else(|| StoreError::io("open", home.root(), Errno::ENOENT))?;
        let subagents = root.ensure_private_dir(SUBAGENTS_DIR)?;
        let owner = match parent {
            Some(session) => session.ensure_private_dir(SUBAGENTS_DIR)?,
            None => root.ensure_private_dir(SUBAGENTS_DIR)?,
        };
        let known = read_index(&subagents)?;
        for _ in 0..64 {
            let id = new_run_id();
            if known.iter().any(|e| e.id == id) {
                continue;
            }
            let dir = match owner.create_private_dir(&id) {
                Ok(dir) => dir,
                Err(StoreError::Io { source, .. })
                    if source.raw_os_error() == Some(Errno::EEXIST as i32) =>
                {
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let events = dir.create_file(EVENTS_FILE, b"")?;
            append_index(
                &subagents,
                &IndexEntry {
                    id: id.clone(),
                    dir: dir.path().to_owned(),
                },
            )?;
            let run = RunDirectory {
                id,
                dir,
                events: Mutex::new(EventWriter {
                    file: events,
                    seq: 0,
                }),
                written: Mutex::new(RunState::Starting),
            };
            run.write_status(status)?;
            return Ok(run);
        }
        Err(DelegationError::IdSpace)
    }

    /// The run's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `result.json` atomically. A non-terminal status after a terminal one is ignored
    /// (the outcome on disk stands); a terminal one is synced before this returns.
    pub fn write_status(&self, status: &RunStatus) -> Result<(), DelegationError> {
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        if written.is_terminal() && !status.state.is_terminal() {
            return Ok(());
        }
        let mut bytes = serde_json::to_vec_pretty(status).map_err(DelegationError::Encode)?;
        bytes.push(b'\n');
        self.dir.write_atomic(RESULT_FILE, &bytes)?;
        *written = status.state;
        Ok(())
    }

    /// Appends one event to `events.jsonl` with the next sequence number.
    pub fn append_event(&self, kind: AttachEventKind) -> Result<(), DelegationError> {
        let mut writer = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        let event = AttachEvent {
            seq: writer.seq + 1,
            at_ms: unix_now_ms(),
            kind,
        };
        let mut line = serde_json::to_vec(&event).map_err(DelegationError::Encode)?;
        line.push(b'\n');
        writer
            .file
            .write_all(&line)
            .map_err(|e| StoreError::io("append to", self.dir.entry_path(EVENTS_FILE), e))?;
        writer.seq = event.seq;
        Ok(())
    }

    /// Creates `log.txt` (0600) for the runtime's diagnostics.
    pub fn create_log(&self) -> Result<File, DelegationError> {
        Ok(self.dir.create_file(LOG_FILE, b"")?)
    }

    /// Writes a private file into the run directory (prompt bodies for claude-cli).
    pub fn write_private_file(&self, name: &str, bytes: &[u8]) -> Result<PathBuf, DelegationError> {
        let file = self.dir.create_file(name, bytes)?;
        file.sync_all()
            .map_err(|e| StoreError::io("sync", self.dir.entry_path(name), e))?;
        Ok(self.dir.entry_path(name))
    }
}

fn unix_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn read_index(subagents: &PrivateDir) -> Result<Vec<IndexEntry>, DelegationError> {
    let bytes = match subagents.read_private(INDEX_FILE, INDEX_LIMIT) {
        Ok(bytes) => bytes,
        Err(StoreError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Vec::new());
        }
        Err(e) => return Err(e.into()),
    };
    let mut entries = Vec::new();
    for (number, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        // A torn last line (a crash mid-append) is skipped; every complete line must parse.
        match serde_json::from_slice::<IndexEntry>(line) {
            Ok(entry) => entries.push(entry),
            Err(_) if number + 1 == bytes.split(|b| *b == b'\n').count() => {}
            Err(e) => {
                return Err(DelegationError::CorruptIndex {
                    path: subagents.entry_path(INDEX_FILE),
                    line: number + 1,
                    problem: e.to_string(),
                });
            }
        }
    }
    Ok(entries)
}

fn append_index(subagents: &PrivateDir, entry: &IndexEntry) -> Result<(), DelegationError> {
    let path = subagents.entry_path(INDEX_FILE);
    let fd = openat(
        subagents.fd(),
        INDEX_FILE,
        OFlag::O_WRONLY
            | OFlag::O_APPEND
            | OFlag::O_CREAT
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )
    .map_err(|e| StoreError::io("open", &path, e))?;
    let facts = FileFacts::of(fd.as_fd()).map_err(|e| StoreError::io("inspect", &path, e))?;
    check_private(&path, &facts)?;
    if !facts.is_regular() {
        return Err(StoreError::WrongType {
            path,
            expected: "regular file",
        }
        .into());
    }
    let mut line = serde_json::to_vec(entry).map_err(DelegationError::Encode)?;
    line.push(b'\n');
    let mut file = File::from(fd);
    file.write_all(&line)
        .and_then(|()| file.sync_data())
        .map_err(|e| StoreError::io("append to", &path, e))?;
    Ok(())
}

/// A run directory found for reading (attach, `agents` inspection): never owns the run.
#[derive(Debug)]
pub struct RunReader {
    id: String,
    dir: PrivateDir,
}

impl RunReader {
    /// Finds run `id`: the global index first, then the parentless location.
    pub fn open(home: &RhoHome, id: &str) -> Result<Self, DelegationError> {
        if !is_run_id(id) {
            return Err(DelegationError::BadRunId { id: id.to_owned() });
        }
        let not_found = || DelegationError::UnknownRun { id: id.to_owned() };
        let root = PrivateDir::open_home(home.root(), false)?.ok_or_else(not_found)?;
        let subagents = root
            .open_private_dir(SUBAGENTS_DIR)?
            .ok_or_else(not_found)?;
        let indexed = read_index(&subagents)?
            .into_iter()
            .rev()
            .find(|e| e.id == id);
        let dir = match indexed {
            Some(entry) => {
                let parent = entry.dir.parent().ok_or_else(not_found)?;
                let owner = if parent == subagents.path() {
                    subagents
                } else {
                    PrivateDir::open_home(parent, false)?.ok_or_else(not_found)?
                };
                owner.open_private_dir(id)?
            }
            None => subagents.open_private_dir(id)?,
        };
        Ok(RunReader {
            id: id.to_owned(),
            dir: dir.ok_or_else(not_found)?,
        })
    }

    /// The run's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The current `result.json`.
    pub fn status(&self) -> Result<RunStatus, DelegationError> {
        let bytes = self.dir.read_private(RESULT_FILE, STATUS_LIMIT)?;
        serde_json::from_slice(&bytes).map_err(|e| DelegationError::CorruptStatus {
            path: self.dir.entry_path(RESULT_FILE),
            problem: e.to_string(),
        })
    }

    /// Opens `events.jsonl` for following.
    pub fn events(&self) -> Result<EventFollower, DelegationError> {
        let path = self.dir.entry_path(EVENTS_FILE);
        let fd = openat(
            self.dir.fd(),
            EVENTS_FILE,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| StoreError::io("open", &path, e))?;
        let facts = FileFacts::of(fd.as_fd()).map_err(|e| StoreError::io("inspect", &path, e))?;
        check_private(&path, &facts)?;
        if !facts.is_regular() {
            return Err(StoreError::WrongType {
                path,
                expected: "regular file",
            }
            .into());
        }
        Ok(EventFollower {
            reader: BufReader::new(File::from(fd)),
            partial: Vec::new(),
            path,
        })
    }
}

/// Reads complete lines of `events.jsonl` as they are appended.
#[derive(Debug)]
pub struct EventFollower {
    reader: BufReader<File>,
    partial: Vec<u8>,
    path: PathBuf,
}

impl EventFollower {
    /// The complete events appended since the last call (a line still being written waits
    /// for its newline).
    pub fn read_new(&mut self) -> Result<Vec<AttachEvent>, DelegationError> {
        let mut events = Vec::new();
        loop {
            let mut chunk = Vec::new();
            let n = self
                .reader
                .read_until(b'\n', &mut chunk)
                .map_err(|e| StoreError::io("read", &self.path, e))?;
            if n == 0 {
                break;
            }
            self.partial.extend_from_slice(&chunk);
            if self.partial.last() != Some(&b'\n') {
                break;
            }
            let line = std::mem::take(&mut self.partial);
            let event =
                serde_json::from_slice(&line).map_err(|e| DelegationError::CorruptStatus {
                    path: self.path.clone(),
                    problem: e.to_string(),
                })?;
            events.push(event);
        }
        // A read at end of file returns nothing; a later append is read on the next call.
        Ok(events)
    }

    /// Skips everything written so far (for a viewer that only wants what comes next).
    pub fn skip_existing(&mut self) -> Result<(), DelegationError> {
        let mut sink = Vec::new();
        self.reader
            .read_to_end(&mut sink)
            .map_err(|e| StoreError::io("read", &self.path, e))?;
        self.partial.clear();
        if let Some(pos) = sink.iter().rposition(|b| *b == b'\n') {
            self.partial.extend_from_slice(&sink[pos + 1..]);
        } else {
            self.partial.extend_from_slice(&sink);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::delegation::status::RunRuntime;

    fn home() -> (tempfile::TempDir, RhoHome) {
        let dir = tempfile::tempdir().unwrap();
        let home = RhoHome::at(dir.path().join("rho-home"), None);
        (dir, home)
    }

    #[test]
    fn run_ids_are_six_lowercase_alphanumerics() {
        for _ in 0..100 {
            let id = new_run_id();
            assert!(is_run_id(&id), "{id}");
        }
        assert!(!is_run_id("ABCDEF"));
        assert!(!is_run_id("abc"));
    }

    #[test]
    fn a_run_is_found_by_id_and_its_events_follow_in_order() {
        let (_t, home) = home();
        let status = RunStatus::starting("explorer", Some("sha256:00"), RunRuntime::Rho);
        let run = RunDirectory::create(&home, None, &status).unwrap();
        let reader = RunReader::open(&home, run.id()).unwrap();
        assert_eq!(reader.status().unwrap().state, RunState::Starting);
        let mut follower = reader.events().unwrap();
        assert!(follower.read_new().unwrap().is_empty());
        run.append_event(AttachEventKind::Text {
            text: "hello".into(),
            partial: false,
        })
        .unwrap();
        run.append_event(AttachEventKind::State {
            state: RunState::Ok,
            detail: None,
        })
        .unwrap();
        let events = follower.read_new().unwrap();
        assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 2]);
        run.append_event(AttachEventKind::ToolUse {
            name: "Read".into(),
            summary: "src/lib.rs".into(),
        })
        .unwrap();
        assert_eq!(follower.read_new().unwrap()[0].seq, 3);
    }

    #[test]
    fn a_terminal_status_is_never_demoted_on_disk() {
        let (_t, home) = home();
        let mut status = RunStatus::starting("worker", None, RunRuntime::ClaudeCli);
        let run = RunDirectory::create(&home, None, &status).unwrap();
        status.transition(RunState::Error);
        status.error = Some("boom".into());
        run.write_status(&status).unwrap();
        let stale = RunStatus::starting("worker", None, RunRuntime::ClaudeCli);
        run.write_status(&stale).unwrap();
        let on_disk = RunReader::open(&home, run.id()).unwrap().status().unwrap();
        assert_eq!(on_disk.state, RunState::Error);
        assert_eq!(on_disk.error.as_deref(), Some("boom"));
    }

    #[test]
    fn unknown_and_malformed_ids_are_refused_by_name() {
        let (_t, home) = home();
        let err = RunReader::open(&home, "zzzzzz").unwrap_err();
        assert!(err.to_string().contains("zzzzzz"), "{err}");
        let err = RunReader::open(&home, "../etc").unwrap_err();
        assert!(matches!(err, DelegationError::BadRunId { .. }), "{err}");
    }
}
