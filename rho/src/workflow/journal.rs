//! `events.jsonl`: the append-only journal that is the source of truth of a run.
//!
//! Each line is one JSON object: `{"check":"<16 hex>","seq":N,"at_ms":T,"event":"...",...}`.
//! `check` is the first 64 bits (hex) of SHA-256 over the same line with the `"check":"...",`
//! member removed, i.e. over `{"seq":N,...}` exactly as written, so verification needs no
//! re-serialization. Sequence numbers are contiguous from 1.
//!
//! Invariant: records reach the file in sequence order and nothing is ever rewritten, except
//! that opening for append cuts a torn final line (a crash mid-write) back to the last valid
//! record and journals that repair. A bad record anywhere else is corruption and is refused.
//! [`Journal::sync`] makes every appended record durable; the owner calls it once per
//! scheduling pass and always before starting a process.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest as _, Sha256};

use crate::workflow::state::{Event, EventKind};

/// Why the journal could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// A file operation failed.
    #[error("journal {}: {action}", path.display())]
    Io {
        /// The journal file.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A record before the end of the file is damaged or out of sequence.
    #[error("journal {} line {line}: {problem}", path.display())]
    Corrupt {
        /// The journal file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        problem: String,
    },
    /// The journal is not a private regular file of this user (a FIFO, a device, another
    /// owner's file, or one others can read or write).
    #[error("journal {}: {problem}", path.display())]
    Unsafe {
        /// The journal file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// A record could not be serialized.
    #[error("journal {}: cannot encode record {seq}", path.display())]
    Encode {
        /// The journal file.
        path: PathBuf,
        /// The record's sequence number.
        seq: u64,
        /// The serializer's error.
        #[source]
        source: serde_json::Error,
    },
}

const CHECK_PREFIX: &str = "{\"check\":\"";
const CHECK_HEX: usize = 16;

/// Serializes one record as a journal line (with its trailing newline).
pub fn encode_line(event: &Event) -> Result<String, serde_json::Error> {
    let body = serde_json::to_string(event)?;
    let check = check_of(body.as_bytes());
    // body starts with '{'; splice the check member in front of the others.
    let mut line = String::with_capacity(body.len() + 32);
    line.push_str(CHECK_PREFIX);
    line.push_str(&check);
    line.push_str("\",");
    line.push_str(&body[1..]);
    line.push('\n');
    Ok(line)
}

fn check_of(body: &[u8]) -> String {
    let digest: [u8; 32] = Sha256::digest(body).into();
    rho_ipc::digest::hex(&digest[..CHECK_HEX / 2])
}

/// Verifies and decodes one line (without its newline).
pub fn decode_line(line: &[u8]) -> Result<Event, String> {
    let rest = line
        .strip_prefix(CHECK_PREFIX.as_bytes())
        .ok_or_else(|| "record does not start with its check".to_owned())?;
    if rest.len() < CHECK_HEX + 2 || &rest[CHECK_HEX..CHECK_HEX + 2] != b"\"," {
        return Err("record check is malformed".to_owned());
    }
    let stored = &rest[..CHECK_HEX];
    let mut body = Vec::with_capacity(rest.len() - CHECK_HEX - 1);
    body.push(b'{');
    body.extend_from_slice(&rest[CHECK_HEX + 2..]);
    if check_of(&body).as_bytes() != stored {
        return Err("record check does not match its content".to_owned());
    }
    serde_json::from_slice(&body).map_err(|e| format!("record is not a valid event: {e}"))
}

/// The records of a journal as read, and what was found after the last valid one.
#[derive(Debug, Clone, Default)]
pub struct JournalContents {
    /// Valid records, in order.
    pub events: Vec<Event>,
    /// Byte length of the valid prefix.
    pub valid_len: u64,
    /// Bytes after the valid prefix (a torn final line), 0 when the file ends cleanly.
    pub torn_bytes: u64,
}

/// Reads and verifies a journal without changing it (for `status`). A torn final line is
/// reported in `torn_bytes`, not an error: its writer may still be writing it.
pub fn read(path: &Path) -> Result<JournalContents, JournalError> {
    let mut bytes = Vec::new();
    open_read(path)?
        .read_to_end(&mut bytes)
        .map_err(|source| io_err(path, "read", source))?;
    parse(path, &bytes, 0)
}

/// Like [`read`], but decodes only records after `after_seq` (the earlier ones are still
/// verified), for a reader that already holds a snapshot.
pub fn read_after(path: &Path, after_seq: u64) -> Result<JournalContents, JournalError> {
    let mut bytes = Vec::new();
    open_read(path)?
        .read_to_end(&mut bytes)
        .map_err(|source| io_err(path, "read", source))?;
    parse(path, &bytes, after_seq)
}

/// The complete records at the end of a journal (see [`read_tail`]).
#[derive(Debug, Clone, Default)]
pub struct JournalTail {
    /// Verified records with contiguous sequence numbers, in order: from the last one that
    /// satisfied the caller's test to the last complete line of the file.
    pub events: Vec<Event>,
    /// Bytes after the last complete line (a torn final write, or one still in progress).
    pub torn_bytes: u64,
}

/// Reads the journal's last `window` bytes (the window's first line, which may start before
/// it, is left out) and verifies and decodes its complete lines from the end back to the
/// last record `from` accepts, for a reader that holds a snapshot the journal vouches for
/// near its end. `None` when no record in the window is accepted, or a line on the way
/// does not verify or breaks the sequence: [`read`] then says where and why.
pub fn read_tail(
    path: &Path,
    window: u64,
    from: impl Fn(&Event) -> bool,
) -> Result<Option<JournalTail>, JournalError> {
    let file = open_read(path)?;
    let len = file
        .metadata()
        .map_err(|source| io_err(path, "inspect", source))?
        .len();
    // The record sought is usually the last one (a finished run ends with it): a small
    // window first, the whole one only when that does not hold it. Both find the same
    // record, since lines are read from the end back to the first accepted one.
    let mut size = FIRST_TAIL_WINDOW.min(window);
    loop {
        let start = len.saturating_sub(size);
        let bytes = read_range(&file, path, start, len)?;
        if let Some(tail) = tail_of(&bytes, start > 0, &from) {
            return Ok(Some(tail));
        }
        if start == 0 || size >= window {
            return Ok(None);
        }
        size = window;
    }
}

/// The window [`read_tail`] tries before its whole one.
const FIRST_TAIL_WINDOW: u64 = 16 * 1024;

/// Bytes `start..end` of `file` (fewer if it is shorter; a journal only grows).
fn read_range(file: &File, path: &Path, start: u64, end: u64) -> Result<Vec<u8>, JournalError> {
    use std::os::unix::fs::FileExt as _;
    let mut bytes = vec![0; usize::try_from(end - start).unwrap_or(0)];
    let mut filled = 0;
    while filled < bytes.len() {
        match file.read_at(&mut bytes[filled..], start + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(source) => return Err(io_err(path, "read", source)),
        }
    }
    bytes.truncate(filled);
    Ok(bytes)
}

/// The records of `bytes` (the end of a journal; `partial_first` when its first line may
/// have started before it) from the last one `from` accepts to the last complete line.
fn tail_of(
    bytes: &[u8],
    partial_first: bool,
    from: impl Fn(&Event) -> bool,
) -> Option<JournalTail> {
    let mut first = 0;
    if partial_first {
        first = bytes.iter().position(|b| *b == b'\n')? + 1;
    }
    // Everything after the last newline is a torn (or unfinished) final write.
    let end = bytes
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(first, |p| p + 1);
    let end = end.max(first);
    let torn_bytes = (bytes.len() - end) as u64;
    let mut events: Vec<Event> = Vec::new();
    let mut line_end = end;
    while line_end > first {
        let body_end = line_end - 1;
        let line_start = bytes[first..body_end]
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(first, |p| first + p + 1);
        let event = decode_line(&bytes[line_start..body_end]).ok()?;
        if events.last().is_some_and(|next| event.seq + 1 != next.seq) {
            return None;
        }
        let accepted = from(&event);
        events.push(event);
        if accepted {
            events.reverse();
            return Some(JournalTail { events, torn_bytes });
        }
        line_end = line_start;
    }
    None
}

fn parse(path: &Path, bytes: &[u8], after_seq: u64) -> Result<JournalContents, JournalError> {
    let mut out = JournalContents::default();
    let mut offset = 0usize;
    let mut expected = 1u64;
    let mut line_no = 0usize;
    while offset < bytes.len() {
        line_no += 1;
        let Some(len) = bytes[offset..].iter().position(|b| *b == b'\n') else {
            // No newline: the final write was torn.
            out.torn_bytes = (bytes.len() - offset) as u64;
            break;
        };
        let line = &bytes[offset..offset + len];
        let is_last = offset + len + 1 == bytes.len();
        let seq = match line_seq(line) {
            Some(seq) if seq <= after_seq => {
                // Verify the check without decoding the whole record.
                verify_only(line).map(|()| seq)
            }
            _ => decode_line(line).map(|event| {
                let seq = event.seq;
                out.events.push(event);
                seq
            }),
        };
        match seq {
            Ok(seq) if seq == expected => {}
            Ok(seq) => {
                if is_last {
                    out.events.retain(|e| e.seq != seq);
                    out.torn_bytes = (len + 1) as u64;
                    break;
                }
                return Err(JournalError::Corrupt {
                    path: path.to_owned(),
                    line: line_no,
                    problem: format!("sequence {seq} where {expected} was expected"),
                });
            }
            Err(problem) => {
                if is_last {
                    out.torn_bytes = (len + 1) as u64;
                    break;
                }
                return Err(JournalError::Corrupt {
                    path: path.to_owned(),
                    line: line_no,
                    problem,
                });
            }
        }
        expected += 1;
        offset += len + 1;
        out.valid_len = offset as u64;
    }
    Ok(out)
}

fn verify_only(line: &[u8]) -> Result<(), String> {
    let rest = line
        .strip_prefix(CHECK_PREFIX.as_bytes())
        .ok_or_else(|| "record does not start with its check".to_owned())?;
    if rest.len() < CHECK_HEX + 2 || &rest[CHECK_HEX..CHECK_HEX + 2] != b"\"," {
        return Err("record check is malformed".to_owned());
    }
    let mut hasher = Sha256::new();
    hasher.update(b"{");
    hasher.update(&rest[CHECK_HEX + 2..]);
    let digest: [u8; 32] = hasher.finalize().into();
    if rho_ipc::digest::hex(&digest[..CHECK_HEX / 2]).as_bytes() == &rest[..CHECK_HEX] {
        Ok(())
    } else {
        Err("record check does not match its content".to_owned())
    }
}

/// The `seq` of a line, read textually (`seq` is the first member after the check).
fn line_seq(line: &[u8]) -> Option<u64> {
    let start = CHECK_PREFIX.len() + CHECK_HEX + 2;
    let rest = line.get(start..)?.strip_prefix(b"\"seq\":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

fn open_read(path: &Path) -> Result<File, JournalError> {
    let mut options = OpenOptions::new();
    options.read(true);
    open_checked(path, &mut options, "open for reading")
}

/// Opens an existing journal without following a link and without blocking (a FIFO put in
/// its place would otherwise hang the open), then checks, on the descriptor, that it is a
/// regular file owned by this user that nobody else can read or write — the checks
/// `state.json` gets.
fn open_checked(
    path: &Path,
    options: &mut OpenOptions,
    action: &'static str,
) -> Result<File, JournalError> {
    let file = options
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|source| {
            if source.raw_os_error() == Some(libc::ELOOP) {
                JournalError::Unsafe {
                    path: path.to_owned(),
                    problem: "is a symbolic link".to_owned(),
                }
            } else {
                io_err(path, action, source)
            }
        })?;
    let facts = crate::workflow::identity::FileFacts::of(std::os::fd::AsFd::as_fd(&file))
        .map_err(|source| io_err(path, "inspect", source))?;
    let unsafe_because = |problem: String| JournalError::Unsafe {
        path: path.to_owned(),
        problem,
    };
    if !facts.is_regular() {
        return Err(unsafe_because(format!(
            "is not a regular file (file type {:o})",
            facts.mode & libc::S_IFMT
        )));
    }
    let uid = nix::unistd::geteuid().as_raw();
    if facts.uid != uid {
        return Err(unsafe_because(format!(
            "is owned by uid {}, not by this user (uid {uid})",
            facts.uid
        )));
    }
    if facts.mode & 0o077 != 0 {
        return Err(unsafe_because(format!(
            "has mode {:o}; others may read or write it (expected no group or other bits)",
            facts.mode & 0o7777
        )));
    }
    Ok(file)
}

fn io_err(path: &Path, action: &'static str, source: std::io::Error) -> JournalError {
    JournalError::Io {
        path: path.to_owned(),
        action,
        source,
    }
}

/// Unix milliseconds now (display only; never used to decide anything).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The journal open for appending, held by the run's owner.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    next_seq: u64,
    pending: Vec<u8>,
    written_seq: u64,
    synced_seq: u64,
}

impl Journal {
    /// Creates a new, empty journal (the file must not exist).
    pub fn create(path: &Path) -> Result<Journal, JournalError> {
        let file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|source| io_err(path, "create", source))?;
        Ok(Journal {
            path: path.to_owned(),
            file,
            next_seq: 1,
            pending: Vec::new(),
            written_seq: 0,
            synced_seq: 0,
        })
    }

    /// Opens an existing journal for appending: verifies every record, cuts a torn final
    /// line and journals the repair (synced). Returns the journal and the valid records
    /// (including the repair record).
    pub fn open(path: &Path) -> Result<(Journal, Vec<Event>), JournalError> {
        let mut contents = read(path)?;
        let file = open_checked(
            path,
            OpenOptions::new().read(true).append(true),
            "open for appending",
        )?;
        let last = contents.events.last().map_or(0, |e| e.seq);
        let mut journal = Journal {
            path: path.to_owned(),
            file,
            next_seq: last + 1,
            pending: Vec::new(),
            written_seq: last,
            synced_seq: last,
        };
        if contents.torn_bytes > 0 {
            journal
                .file
                .set_len(contents.valid_len)
                .map_err(|source| io_err(path, "cut a torn final line", source))?;
            tracing::warn!(
                journal = %path.display(),
                dropped = contents.torn_bytes,
                "cut a torn final journal line"
            );
            let event = journal.append(EventKind::JournalRepaired {
                dropped_bytes: contents.torn_bytes,
            })?;
            journal.sync()?;
            contents.events.push(event);
        }
        Ok((journal, contents.events))
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The sequence number the next record gets.
    pub fn next_sequence(&self) -> u64 {
        self.next_seq
    }

    /// The last record known durable.
    pub fn synced_sequence(&self) -> u64 {
        self.synced_seq
    }

    /// Adds a record to the pending batch (not yet written) and returns it.
    pub fn append(&mut self, kind: EventKind) -> Result<Event, JournalError> {
        let event = Event {
            seq: self.next_seq,
            at_ms: now_ms(),
            kind,
        };
        let line = encode_line(&event).map_err(|source| JournalError::Encode {
            path: self.path.clone(),
            seq: event.seq,
            source,
        })?;
        self.pending.extend_from_slice(line.as_bytes());
        self.next_seq += 1;
        Ok(event)
    }

    /// Whether records were appended but not yet made durable.
    pub fn has_unsynced(&self) -> bool {
        !self.pending.is_empty() || self.written_seq > self.synced_seq
    }

    /// Writes the pending batch to the file (one `write`), without syncing.
    pub fn write(&mut self) -> Result<(), JournalError> {
        if !self.pending.is_empty() {
            self.file
                .write_all(&self.pending)
                .map_err(|source| io_err(&self.path, "append", source))?;
            self.pending.clear();
            self.written_seq = self.next_seq - 1;
            crate::workflow::crashpoint::reached("journal:written");
        }
        Ok(())
    }

    /// Writes the pending batch and makes every record so far durable.
    pub fn sync(&mut self) -> Result<(), JournalError> {
        self.write()?;
        if self.written_seq > self.synced_seq {
            self.file
                .sync_data()
                .map_err(|source| io_err(&self.path, "sync", source))?;
            self.synced_seq = self.written_seq;
            crate::workflow::crashpoint::reached("journal:synced");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflow::state::{Lifecycle, replay};
    use std::os::unix::fs::PermissionsExt as _;

    fn created() -> EventKind {
        EventKind::RunCreated {
            run_id: "r".into(),
            program_digest: "sha256:00".into(),
            nodes: vec!["a".into()],
        }
    }

    #[test]
    fn lines_carry_a_verifiable_check() {
        let event = Event {
            seq: 1,
            at_ms: 5,
            kind: created(),
        };
        let line = encode_line(&event).unwrap();
        assert!(line.starts_with("{\"check\":\""));
        assert!(line.ends_with('\n'));
        let json: serde_json::Value = serde_json::from_str(line.trim_end()).unwrap();
        assert_eq!(json["seq"], 1);
        assert_eq!(json["event"], "run_created");
        let bytes = line.trim_end().as_bytes();
        assert_eq!(decode_line(bytes).unwrap(), event);
        let tampered = line.trim_end().replace("\"at_ms\":5", "\"at_ms\":6");
        assert!(
            decode_line(tampered.as_bytes())
                .unwrap_err()
                .contains("does not match")
        );
        assert_eq!(line_seq(bytes), Some(1));
    }

    #[test]
    fn a_fifo_or_a_loose_journal_is_refused_without_hanging() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("events.jsonl");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let err = read(&fifo).unwrap_err();
        assert!(err.to_string().contains("is not a regular file"), "{err}");
        assert!(matches!(
            Journal::open(&fifo),
            Err(JournalError::Unsafe { .. })
        ));

        let loose = dir.path().join("loose.jsonl");
        let mut j = Journal::create(&loose).unwrap();
        j.append(created()).unwrap();
        j.sync().unwrap();
        drop(j);
        std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = read(&loose).unwrap_err();
        assert!(err.to_string().contains("has mode 644"), "{err}");
        assert!(matches!(
            Journal::open(&loose),
            Err(JournalError::Unsafe { .. })
        ));
        std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o600)).unwrap();
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::chown(&loose, Some(4242), None).unwrap();
            let err = read(&loose).unwrap_err();
            assert!(err.to_string().contains("owned by uid 4242"), "{err}");
        }
        let link = dir.path().join("link.jsonl");
        std::os::unix::fs::symlink(&loose, &link).unwrap();
        assert!(
            read(&link)
                .unwrap_err()
                .to_string()
                .contains("symbolic link")
        );
    }

    #[test]
    fn torn_final_line_is_cut_and_the_repair_journaled() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut j = Journal::create(&path).unwrap();
        j.append(created()).unwrap();
        j.append(EventKind::LifecycleChanged {
            lifecycle: Lifecycle::Running,
        })
        .unwrap();
        j.sync().unwrap();
        drop(j);
        let intact = std::fs::read(&path).unwrap();
        // A crash in the middle of the third record.
        let mut torn = intact.clone();
        torn.extend_from_slice(b"{\"check\":\"0011223344556677\",\"seq\":3,\"at_m");
        std::fs::write(&path, &torn).unwrap();
        // status-style reading sees two records and a torn tail, and changes nothing.
        let seen = read(&path).unwrap();
        assert_eq!(seen.events.len(), 2);
        assert_eq!(seen.torn_bytes, (torn.len() - intact.len()) as u64);
        assert_eq!(std::fs::read(&path).unwrap(), torn);
        // Opening for append repairs it.
        let (mut j, events) = Journal::open(&path).unwrap();
        assert_eq!(events.len(), 3);
        assert!(
            matches!(events[2].kind, EventKind::JournalRepaired { dropped_bytes } if dropped_bytes == (torn.len() - intact.len()) as u64)
        );
        j.append(EventKind::LifecycleChanged {
            lifecycle: Lifecycle::Completed,
        })
        .unwrap();
        j.sync().unwrap();
        let after = read(&path).unwrap();
        assert_eq!(after.torn_bytes, 0);
        let state = replay(&after.events).unwrap();
        assert_eq!(state.last_event_sequence, 4);
        assert_eq!(state.lifecycle, Lifecycle::Completed);
    }

    #[test]
    fn a_complete_but_damaged_final_line_is_also_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut j = Journal::create(&path).unwrap();
        j.append(created()).unwrap();
        j.append(EventKind::LifecycleChanged {
            lifecycle: Lifecycle::Running,
        })
        .unwrap();
        j.sync().unwrap();
        drop(j);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("running", "RUNNING")).unwrap();
        let (_, events) = Journal::open(&path).unwrap();
        assert_eq!(events.len(), 2);
        assert!(matches!(events[1].kind, EventKind::JournalRepaired { .. }));
    }

    /// A synced journal at `path`: the creation record, then `running` records `count` times.
    fn write_running_journal(path: &Path, count: usize) {
        let mut j = Journal::create(path).unwrap();
        j.append(created()).unwrap();
        for _ in 0..count {
            j.append(EventKind::LifecycleChanged {
                lifecycle: Lifecycle::Running,
            })
            .unwrap();
        }
        j.sync().unwrap();
    }

    #[test]
    fn the_tail_holds_the_records_from_the_accepted_one_and_refuses_damage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        write_running_journal(&path, 20);
        let whole = std::fs::read(&path).unwrap();
        let seqs = |tail: &JournalTail| tail.events.iter().map(|e| e.seq).collect::<Vec<_>>();
        // From the accepted record to the end, in order.
        let tail = read_tail(&path, 1 << 20, |e| e.seq == 17).unwrap().unwrap();
        assert_eq!(seqs(&tail), vec![17, 18, 19, 20, 21]);
        assert_eq!(tail.torn_bytes, 0);
        // The whole file fits: the first record can be accepted.
        let all = read_tail(&path, 1 << 20, |e| e.seq == 1).unwrap().unwrap();
        assert_eq!(seqs(&all), (1..=21).collect::<Vec<_>>());
        // A window reaching into the middle of the last-but-one line holds only the last.
        let last_line = whole[..whole.len() - 1]
            .iter()
            .rposition(|b| *b == b'\n')
            .unwrap();
        let window = (whole.len() - last_line) as u64 + 5;
        assert!(read_tail(&path, window, |e| e.seq == 20).unwrap().is_none());
        let tail = read_tail(&path, window, |e| e.seq == 21).unwrap().unwrap();
        assert_eq!(seqs(&tail), vec![21]);
        // Nothing accepted in the window: none.
        assert!(read_tail(&path, 1 << 20, |_| false).unwrap().is_none());
        // A torn final write is reported, not decoded.
        let mut torn = whole.clone();
        torn.extend_from_slice(b"{\"check\":\"12");
        std::fs::write(&path, &torn).unwrap();
        let tail = read_tail(&path, 1 << 20, |e| e.seq == 19).unwrap().unwrap();
        assert_eq!((seqs(&tail), tail.torn_bytes), (vec![19, 20, 21], 12));
        // A damaged complete line between the end and the accepted record: none.
        let text = String::from_utf8(whole).unwrap();
        std::fs::write(&path, text.replacen("running", "RUNNING", 19)).unwrap();
        assert!(
            read_tail(&path, 1 << 20, |e| e.seq == 17)
                .unwrap()
                .is_none()
        );
        assert_eq!(
            seqs(&read_tail(&path, 1 << 20, |e| e.seq == 21).unwrap().unwrap()),
            vec![21],
            "damage before the accepted record is not read"
        );
    }

    #[test]
    fn a_record_before_the_first_window_is_found_in_the_whole_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        write_running_journal(&path, 1000);
        let len = std::fs::metadata(&path).unwrap().len();
        assert!(len > 4 * FIRST_TAIL_WINDOW, "{len} bytes");
        // Record 2 is far before the first window, inside the whole one.
        let tail = read_tail(&path, len, |e| e.seq == 2).unwrap().unwrap();
        assert_eq!(tail.events.len(), 1000);
        assert_eq!(tail.events.first().map(|e| e.seq), Some(2));
        assert_eq!(tail.events.last().map(|e| e.seq), Some(1001));
        // Outside the whole window: none, as before.
        assert!(read_tail(&path, len / 2, |e| e.seq == 2).unwrap().is_none());
        // The last record is found whatever the window.
        let last = read_tail(&path, len, |e| e.seq == 1001).unwrap().unwrap();
        assert_eq!(last.events.len(), 1);
    }

    #[test]
    fn damage_before_the_end_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut j = Journal::create(&path).unwrap();
        j.append(created()).unwrap();
        j.append(EventKind::LifecycleChanged {
            lifecycle: Lifecycle::Running,
        })
        .unwrap();
        j.append(EventKind::LifecycleChanged {
            lifecycle: Lifecycle::Completed,
        })
        .unwrap();
        j.sync().unwrap();
        drop(j);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replacen("running", "RUNNING", 1)).unwrap();
        let err = Journal::open(&path).unwrap_err();
        assert!(
            matches!(err, JournalError::Corrupt { line: 2, .. }),
            "{err}"
        );
        let err = read_after(&path, 2).unwrap_err();
        assert!(
            matches!(err, JournalError::Corrupt { line: 2, .. }),
            "{err}"
        );
    }

    #[test]
    fn read_after_decodes_only_the_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut j = Journal::create(&path).unwrap();
        j.append(created()).unwrap();
        j.append(EventKind::LifecycleChanged {
            lifecycle: Lifecycle::Running,
        })
        .unwrap();
        j.append(EventKind::LifecycleChanged {
            lifecycle: Lifecycle::Completed,
        })
        .unwrap();
        j.write().unwrap();
        assert!(j.has_unsynced());
        j.sync().unwrap();
        assert!(!j.has_unsynced());
        let tail = read_after(&path, 2).unwrap();
        assert_eq!(
            tail.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
            vec![3]
        );
    }
}
