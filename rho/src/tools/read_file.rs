//! `read_file`: a window of a text file as numbered `N:line` rows, with the file's total
//! line count.
//!
//! Invariant: the file is opened without following links and refused unless regular; memory
//! stays bounded by the window (the rest of the file is only counted), and binary content is
//! described, never dumped.

use std::io::{BufRead as _, BufReader};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::tools::summary::bound_lines;
use crate::tools::workspace::{Workspace, open_workspace};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput, ToolPermission, parse_args};

const NAME: &str = "read_file";

/// Lines returned when `limit` is not given.
pub const DEFAULT_LIMIT: usize = 2_000;

/// Characters kept of one line; the rest is marked as cut.
pub const MAX_LINE_CHARS: usize = 2_000;

/// Bytes looked at to decide whether a file is binary (a NUL byte means binary).
const SNIFF_BYTES: usize = 8 * 1024;

/// The `read_file` tool.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadFile;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    offset: Option<usize>,
    limit: Option<usize>,
}

/// What was read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FileWindow {
    /// The file as shown.
    pub path: String,
    /// 1-based number of the first line returned.
    pub offset: usize,
    /// The lines returned (without line endings).
    pub lines: Vec<String>,
    /// Lines in the whole file.
    pub total_lines: usize,
    /// Bytes in the file.
    pub size: u64,
    /// The file is binary; no lines are returned.
    pub binary: bool,
    /// Some lines were longer than [`MAX_LINE_CHARS`] and were cut.
    pub cut_lines: usize,
}

impl FileWindow {
    /// The model-facing text.
    pub fn summary(&self, limit: usize) -> String {
        if self.binary {
            return format!(
                "`{}` is a binary file ({} bytes); its content is not shown\n",
                self.path, self.size
            );
        }
        let mut rows: Vec<String> = self
            .lines
            .iter()
            .enumerate()
            .map(|(i, line)| format!("{}:{line}", self.offset + i))
            .collect();
        let last = self.offset + self.lines.len().saturating_sub(1);
        let footer = if self.total_lines == 0 {
            format!("[`{}` is empty]", self.path)
        } else if self.lines.len() == self.total_lines {
            format!("[`{}`: {} lines]", self.path, self.total_lines)
        } else if last < self.total_lines {
            format!(
                "[`{}`: lines {}-{last} of {}; pass offset={} to continue]",
                self.path,
                self.offset,
                self.total_lines,
                last + 1
            )
        } else {
            format!(
                "[`{}`: lines {}-{last} of {}]",
                self.path, self.offset, self.total_lines
            )
        };
        rows.push(footer);
        if self.cut_lines > 0 {
            rows.push(format!(
                "[{} long line(s) cut at {MAX_LINE_CHARS} characters]",
                self.cut_lines
            ));
        }
        bound_lines(&rows, limit)
    }
}

/// Reads lines `offset..offset+limit` (1-based) of `given`.
pub fn read(
    ws: &Workspace,
    given: &str,
    offset: Option<usize>,
    limit: Option<usize>,
) -> Result<FileWindow, ToolError> {
    if offset == Some(0) {
        return Err(ToolError::invalid(
            NAME,
            "offset",
            "line numbers start at 1",
        ));
    }
    if limit == Some(0) {
        return Err(ToolError::invalid(NAME, "limit", "must be at least 1"));
    }
    let offset = offset.unwrap_or(1);
    let limit = limit.unwrap_or(DEFAULT_LIMIT);
    let path = ws
        .resolve("path", given)
        .map_err(|e| e.into_tool_error(NAME, "path"))?;
    let file = ws
        .open_file(&path)
        .map_err(|e| e.into_tool_error(NAME, "path"))?;
    let failed = |e: std::io::Error| ToolError::failed(NAME, format!("cannot read `{path}`: {e}"));
    let size = file.metadata().map_err(failed)?.len();
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    let head = reader.fill_buf().map_err(failed)?;
    if head[..head.len().min(SNIFF_BYTES)].contains(&0) {
        return Ok(FileWindow {
            path: path.display(),
            offset,
            lines: Vec::new(),
            total_lines: 0,
            size,
            binary: true,
            cut_lines: 0,
        });
    }
    let mut lines = Vec::new();
    let mut total = 0_usize;
    let mut cut = 0;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        // Read one line without letting a huge line grow the buffer unboundedly: keep what a
        // row can show and skip the rest of the line.
        let n = read_line_bounded(&mut reader, &mut buf, MAX_LINE_CHARS * 4).map_err(failed)?;
        if n == 0 {
            break;
        }
        total += 1;
        if total >= offset && total < offset.saturating_add(limit) {
            let mut text = String::from_utf8_lossy(&buf).into_owned();
            while text.ends_with('\n') || text.ends_with('\r') {
                text.pop();
            }
            if text.chars().count() > MAX_LINE_CHARS || n > buf.len() {
                text = text.chars().take(MAX_LINE_CHARS).collect();
                text.push_str(" …[line cut]");
                cut += 1;
            }
            lines.push(text);
        }
    }
    if offset > total.max(1) {
        return Err(ToolError::invalid(
            NAME,
            "offset",
            format!("line {offset} is past the end of `{path}` ({total} lines)"),
        ));
    }
    Ok(FileWindow {
        path: path.display(),
        offset,
        lines,
        total_lines: total,
        size,
        binary: false,
        cut_lines: cut,
    })
}

/// Reads one line (through `\n`) into `buf`, keeping at most `keep` bytes of it; returns the
/// line's full length (0 at end of file).
fn read_line_bounded(
    reader: &mut impl std::io::BufRead,
    buf: &mut Vec<u8>,
    keep: usize,
) -> std::io::Result<usize> {
    let mut total = 0;
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(total);
        }
        let (chunk, done) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (&available[..=i], true),
            None => (available, false),
        };
        let room = keep.saturating_sub(buf.len());
        buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = chunk.len();
        total += used;
        reader.consume(used);
        if done {
            return Ok(total);
        }
    }
}

impl Tool for ReadFile {
    fn name(&self) -> &'static str {
        NAME
    }

    fn description(&self) -> &'static str {
        "Reads a UTF-8 text file and returns numbered `N:line` rows plus the total line \
         count. `offset` (1-based first line) and `limit` (number of lines, default 2000) \
         select a window. Binary files are described, not shown. Symbolic links are not \
         followed."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File to read, relative to the workspace root or absolute."},
                "offset": {"type": "integer", "minimum": 1, "description": "First line to return (1-based)."},
                "limit": {"type": "integer", "minimum": 1, "description": "Number of lines to return."}
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }

    fn capability(&self) -> &'static str {
        NAME
    }

    fn permission_requests(
        &self,
        args: &Value,
        _ctx: &ToolContext,
    ) -> Result<Vec<ToolPermission>, ToolError> {
        let args: Args = parse_args(NAME, args)?;
        Ok(vec![ToolPermission::read(format!("read `{}`", args.path))])
    }

    fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: Args = parse_args(NAME, &args)?;
        let ws = open_workspace(NAME, ctx)?;
        let window = read(&ws, &args.path, args.offset, args.limit)?;
        let structured = json!({
            "path": window.path,
            "offset": window.offset,
            "lines_returned": window.lines.len(),
            "total_lines": window.total_lines,
            "size": window.size,
            "binary": window.binary,
        });
        Ok(ToolOutput::new(
            window.summary(ctx.summary_limit()),
            structured,
        ))
    }
}
