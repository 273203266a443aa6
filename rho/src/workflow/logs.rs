//! Reading what a node printed: the tail of an attempt's captured streams (for a failure
//! summary and the live view) and whole or followed streams (for `rho workflow logs`).
//! Shared by the command line and the model-facing tool.
//!
//! Invariant: reading is bounded (a tail reads at most [`TAIL_READ_BYTES`] from the end of a
//! file, whatever its size) and never writes to the run; text shown to people has its
//! terminal control characters made visible.

use std::fs::File;
use std::io::{self, Read as _, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};

/// The most bytes a tail reads from the end of a stream file.
pub const TAIL_READ_BYTES: u64 = 64 * 1024;
/// The longest line a tail shows (in characters); longer lines are clipped with `…`.
pub const TAIL_LINE_CHARS: usize = 400;

/// The two captured streams of a command node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl Stream {
    /// The artifact's file name in an attempt directory.
    pub fn file_name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// `nodes/<node>/attempts/<attempt>/<stream>` under `run_dir`.
pub fn stream_path(run_dir: &Path, node: &str, attempt: u32, stream: Stream) -> PathBuf {
    run_dir
        .join("nodes")
        .join(node)
        .join("attempts")
        .join(attempt.to_string())
        .join(stream.file_name())
}

/// The last `max_lines` lines of `path` (reading at most [`TAIL_READ_BYTES`] from its end),
/// escaped for a terminal and clipped to [`TAIL_LINE_CHARS`]; empty when the file does not
/// exist (a stream that printed nothing has no file). The first line is dropped when the
/// read started inside it, unless it is the only one.
pub fn tail_lines(path: &Path, max_lines: usize) -> io::Result<Vec<String>> {
    let bytes = match read_tail(path, TAIL_READ_BYTES) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let (partial, bytes) = bytes;
    let text = String::from_utf8_lossy(&bytes);
    let mut lines: Vec<&str> = text.lines().collect();
    if partial && lines.len() > 1 {
        lines.remove(0);
    }
    while lines.last().is_some_and(|l| l.trim().is_empty()) {
        lines.pop();
    }
    let start = lines.len().saturating_sub(max_lines);
    Ok(lines[start..].iter().map(|l| clip(&escape(l))).collect())
}

/// The last non-empty line of `path`, for a one-line live view (`None` when there is none).
pub fn last_line(path: &Path) -> Option<String> {
    tail_lines(path, 1).ok()?.pop()
}

/// Reads up to `max` bytes from the end of `path`; `true` when bytes before them were
/// skipped.
fn read_tail(path: &Path, max: u64) -> io::Result<(bool, Vec<u8>)> {
    let mut file = File::open(path)?;
    let len = file.metadata()?.len();
    let start = len.saturating_sub(max);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    file.take(max).read_to_end(&mut bytes)?;
    Ok((start > 0, bytes))
}

/// One line of untrusted output for a terminal: controls made visible by
/// [`crate::terminal::escape_controls_keep_tabs`] (tabs kept so columns line up).
pub fn escape(line: &str) -> String {
    crate::terminal::escape_controls_keep_tabs(line).into_owned()
}

fn clip(line: &str) -> String {
    if line.chars().count() <= TAIL_LINE_CHARS {
        return line.to_owned();
    }
    let mut out: String = line.chars().take(TAIL_LINE_CHARS).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines_and_skips_a_cut_first_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stderr");
        assert!(tail_lines(&path, 5).unwrap().is_empty());
        std::fs::write(&path, "one\ntwo\nthree\n\n").unwrap();
        assert_eq!(tail_lines(&path, 2).unwrap(), ["two", "three"]);
        let mut big = "x".repeat(usize::try_from(TAIL_READ_BYTES).unwrap());
        big.push_str("\nlast\n");
        std::fs::write(&path, big).unwrap();
        assert_eq!(tail_lines(&path, 5).unwrap(), ["last"]);
        assert_eq!(last_line(&path).as_deref(), Some("last"));
    }

    #[test]
    fn control_characters_are_made_visible() {
        assert_eq!(escape("a\x1b[31mred\tb\x7f"), "a^[[31mred\tb^?");
        assert_eq!(escape("\u{9b}x"), "\\u{9b}x");
        assert_eq!(clip(&"y".repeat(500)).chars().count(), TAIL_LINE_CHARS + 1);
    }
}
