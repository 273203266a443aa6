//! `grep`: searches file contents with a regular expression, in-process, with the crates
//! ripgrep is built from (`ignore` for the walk, `grep-regex` and `grep-searcher` for the
//! matching).
//!
//! Invariant: only files reached without a symbolic link are searched (each is opened
//! `O_NOFOLLOW` from the workspace), binary files are skipped, and every bound — results,
//! matches per file, line length, file size, wall time, cancellation — that cut the search
//! short is named in the summary, including when nothing was found.

use std::time::{Duration, Instant};

use grep_regex::RegexMatcherBuilder;
use grep_searcher::sinks::Lossy;
use grep_searcher::{BinaryDetection, SearcherBuilder};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::tools::summary::bound_lines;
use crate::tools::workspace::{Workspace, open_workspace, walk::walk};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput, ToolPermission, parse_args};

const NAME: &str = "grep";

/// Results (matching lines, or files) returned by default.
pub const DEFAULT_MAX_RESULTS: usize = 200;
/// The most results one call may ask for.
pub const MAX_RESULTS_CEILING: usize = 1_000;
/// Matching lines kept per file by default.
pub const DEFAULT_MAX_PER_FILE: usize = 10;
/// The most matching lines per file one call may ask for.
pub const MAX_PER_FILE_CEILING: usize = 100;
/// Files larger than this are skipped.
pub const MAX_FILE_BYTES: u64 = 5 << 20;
/// Characters of a matching line shown.
pub const MAX_LINE_CHARS: usize = 200;
/// Wall-clock bound of one search.
pub const SEARCH_DEADLINE: Duration = Duration::from_secs(15);

/// The `grep` tool.
#[derive(Clone, Copy, Debug, Default)]
pub struct Grep;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    pattern: String,
    path: Option<String>,
    glob: Option<String>,
    #[serde(default)]
    literal: bool,
    case_sensitive: Option<bool>,
    #[serde(default)]
    include_hidden: bool,
    max_results: Option<usize>,
    max_per_file: Option<usize>,
    output_mode: Option<String>,
}

/// What the caller wants back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputMode {
    /// Matching lines grouped by file.
    Content,
    /// Paths of matching files.
    FilesWithMatches,
    /// Matching-line counts per file.
    Count,
}

/// Matches in one file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FileMatches {
    /// Workspace-relative path.
    pub path: String,
    /// Matching lines kept, as (line number, text).
    pub lines: Vec<(u64, String)>,
    /// Matching lines in the file (counted up to the per-file bound in content mode).
    pub count: u64,
}

/// Why a search stopped before covering everything.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// `max_results` was reached.
    MaxResults,
    /// Some file had more matches than `max_per_file`.
    MaxPerFile,
    /// Some files were larger than [`MAX_FILE_BYTES`] and skipped.
    LargeFilesSkipped,
    /// The wall-clock bound passed.
    TimedOut,
    /// The call was cancelled.
    Cancelled,
}

/// A search's outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GrepResult {
    /// The pattern as given.
    pub pattern: String,
    /// The output mode.
    pub mode: OutputMode,
    /// Files with matches, in walk order.
    pub files: Vec<FileMatches>,
    /// Why the search is incomplete, if it is.
    pub stopped: Vec<StopReason>,
}

impl GrepResult {
    /// The model-facing text.
    pub fn summary(&self, max_results: usize, max_per_file: usize, limit: usize) -> String {
        let mut lines = Vec::new();
        for file in &self.files {
            match self.mode {
                OutputMode::Content => {
                    lines.push(file.path.clone());
                    for (n, text) in &file.lines {
                        lines.push(format!("{n} | {text}"));
                    }
                }
                OutputMode::FilesWithMatches => lines.push(file.path.clone()),
                OutputMode::Count => lines.push(format!("{}: {}", file.path, file.count)),
            }
        }
        if self.files.is_empty() {
            lines.push(format!("No matches for `{}`.", self.pattern));
        }
        for reason in &self.stopped {
            lines.push(match reason {
                StopReason::MaxResults => {
                    format!("[stopped at max_results={max_results}; narrow the search or raise it]")
                }
                StopReason::MaxPerFile => format!(
                    "[some files have more than max_per_file={max_per_file} matching lines; only \
                     the first are shown]"
                ),
                StopReason::LargeFilesSkipped => {
                    format!("[files over {MAX_FILE_BYTES} bytes were skipped]")
                }
                StopReason::TimedOut => format!(
                    "[search timed out after {}s; results are partial]",
                    SEARCH_DEADLINE.as_secs()
                ),
                StopReason::Cancelled => "[search cancelled; results are partial]".to_owned(),
            });
        }
        bound_lines(&lines, limit)
    }
}

fn clamp(value: Option<usize>, default: usize, ceiling: usize) -> usize {
    value.unwrap_or(default).clamp(1, ceiling)
}

/// Runs a search. `cancelled` is polled between files and lines.
fn search(
    ws: &Workspace,
    args: &Args,
    max_results: usize,
    max_per_file: usize,
    cancelled: &dyn Fn() -> bool,
) -> Result<GrepResult, ToolError> {
    let mode = match args.output_mode.as_deref().unwrap_or("content") {
        "content" => OutputMode::Content,
        "files_with_matches" => OutputMode::FilesWithMatches,
        "count" => OutputMode::Count,
        other => {
            return Err(ToolError::invalid(
                NAME,
                "output_mode",
                format!("`{other}`: expected content, files_with_matches or count"),
            ));
        }
    };
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(!args.case_sensitive.unwrap_or(true))
        .fixed_strings(args.literal)
        .size_limit(10 << 20)
        .dfa_size_limit(10 << 20)
        .build(&args.pattern)
        .map_err(|e| ToolError::invalid(NAME, "pattern", e.to_string()))?;
    let filter = match &args.glob {
        Some(glob) => Some(
            crate::tools::glob::compile(glob)
                .map_err(|problem| ToolError::invalid(NAME, "glob", problem))?,
        ),
        None => None,
    };
    let root = ws
        .resolve_inside("path", args.path.as_deref().unwrap_or("."))
        .map_err(|e| e.into_tool_error(NAME, "path"))?;
    // The starting point itself must be reachable without links.
    let facts = ws
        .lstat(&root)
        .map_err(|e| e.into_tool_error(NAME, "path"))?
        .ok_or_else(|| ToolError::invalid(NAME, "path", format!("`{root}` does not exist")))?;
    if facts.is_symlink() {
        return Err(ToolError::invalid(
            NAME,
            "path",
            format!("`{root}` is a symbolic link; symbolic links are not followed"),
        ));
    }
    let root_abs = ws.absolute(&root);
    let started = Instant::now();
    let mut searcher = SearcherBuilder::new()
        .binary_detection(BinaryDetection::quit(0))
        .line_number(true)
        .build();
    let mut files = Vec::new();
    let mut stopped = Vec::new();
    let mut results = 0_usize;
    let note = |reason: StopReason, stopped: &mut Vec<StopReason>| {
        if !stopped.contains(&reason) {
            stopped.push(reason);
        }
    };
    for entry in walk(&root_abs, args.include_hidden) {
        if cancelled() {
            note(StopReason::Cancelled, &mut stopped);
            break;
        }
        if started.elapsed() > SEARCH_DEADLINE {
            note(StopReason::TimedOut, &mut stopped);
            break;
        }
        let Ok(entry) = entry else { continue };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let abs = entry.path();
        let Some(text) = abs.to_str() else { continue };
        let Ok(resolved) = ws.resolve("path", text) else {
            continue;
        };
        let shown = resolved.display();
        if let Some(filter) = &filter {
            let rel = abs.strip_prefix(&root_abs).unwrap_or(abs);
            if !filter.is_match(rel) {
                continue;
            }
        }
        // Opened without following links: a file swapped for a link mid-walk is skipped.
        let Ok(file) = ws.open_file(&resolved) else {
            continue;
        };
        if file.metadata().is_ok_and(|m| m.len() > MAX_FILE_BYTES) {
            note(StopReason::LargeFilesSkipped, &mut stopped);
            continue;
        }
        let mut hit = FileMatches {
            path: shown,
            lines: Vec::new(),
            count: 0,
        };
        let mut over_per_file = false;
        let keep = match mode {
            OutputMode::Content => max_per_file.min(max_results - results),
            _ => 0,
        };
        let sink = Lossy(|number, line: &str| {
            hit.count += 1;
            if hit.lines.len() < keep {
                let line = line.trim_end_matches(['\n', '\r']);
                let mut shown: String = line.chars().take(MAX_LINE_CHARS).collect();
                if line.chars().count() > MAX_LINE_CHARS {
                    shown.push('…');
                }
                hit.lines.push((number, shown));
            } else if mode == OutputMode::Content {
                over_per_file = true;
                return Ok(false);
            }
            Ok(mode != OutputMode::FilesWithMatches && !cancelled())
        });
        if searcher.search_file(&matcher, &file, sink).is_err() {
            continue;
        }
        if hit.count == 0 {
            continue;
        }
        if over_per_file && hit.lines.len() == max_per_file {
            note(StopReason::MaxPerFile, &mut stopped);
        }
        results += match mode {
            OutputMode::Content => hit.lines.len(),
            _ => 1,
        };
        files.push(hit);
        if results >= max_results {
            note(StopReason::MaxResults, &mut stopped);
            break;
        }
    }
    Ok(GrepResult {
        pattern: args.pattern.clone(),
        mode,
        files,
        stopped,
    })
}

impl Tool for Grep {
    fn name(&self) -> &'static str {
        NAME
    }

    fn description(&self) -> &'static str {
        "Searches file contents under a directory (default: the workspace root) with a Rust \
         regular expression. Honours .gitignore, skips hidden files (unless include_hidden), \
         binary files and symbolic links. `glob` filters file paths (`*.rs`). output_mode: \
         `content` (default, `N | text` lines grouped by file), `files_with_matches`, or \
         `count`. Results are capped (max_results, default 200; max_per_file, default 10) and \
         the summary says when a cap, the time limit or cancellation cut the search short."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Regular expression (Rust syntax), or a literal string with literal=true."},
                "path": {"type": "string", "description": "Directory or file to search; defaults to the workspace root."},
                "glob": {"type": "string", "description": "Only search files whose path matches this glob."},
                "literal": {"type": "boolean", "description": "Treat the pattern as a literal string."},
                "case_sensitive": {"type": "boolean", "description": "Default true."},
                "include_hidden": {"type": "boolean", "description": "Also search hidden files and directories."},
                "max_results": {"type": "integer", "minimum": 1, "description": "Matching lines (content) or files to return; default 200, at most 1000."},
                "max_per_file": {"type": "integer", "minimum": 1, "description": "Matching lines shown per file; default 10, at most 100."},
                "output_mode": {"type": "string", "enum": ["content", "files_with_matches", "count"]}
            },
            "required": ["pattern"],
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
        Ok(vec![ToolPermission::read(format!(
            "search `{}` for `{}`",
            args.path.as_deref().unwrap_or("."),
            args.pattern
        ))])
    }

    fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: Args = parse_args(NAME, &args)?;
        let ws = open_workspace(NAME, ctx)?;
        let max_results = clamp(args.max_results, DEFAULT_MAX_RESULTS, MAX_RESULTS_CEILING);
        let max_per_file = clamp(
            args.max_per_file,
            DEFAULT_MAX_PER_FILE,
            MAX_PER_FILE_CEILING,
        );
        let cancel = ctx.cancel().clone();
        let result = search(&ws, &args, max_results, max_per_file, &|| {
            cancel.is_cancelled()
        })?;
        let summary = result.summary(max_results, max_per_file, ctx.summary_limit());
        let structured = serde_json::to_value(&result).unwrap_or(Value::Null);
        Ok(ToolOutput::new(summary, structured))
    }
}
