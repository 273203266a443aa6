//! `glob`: lists workspace paths matching a glob, with `globset` over the `ignore` walk.
//!
//! Invariant: the walk honours ignore rules and never follows a symbolic link; results come
//! in walk order (sorted by name within each directory), so a capped result is the first N
//! matches, and the summary says when the cap, the time limit or cancellation cut it short.

use std::path::Path;
use std::time::Instant;

use globset::{GlobBuilder, GlobMatcher};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::tools::grep::{DEFAULT_MAX_RESULTS, MAX_RESULTS_CEILING, SEARCH_DEADLINE};
use crate::tools::summary::bound_lines;
use crate::tools::workspace::{open_workspace, walk::walk};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput, ToolPermission, parse_args};

const NAME: &str = "glob";

/// The `glob` tool.
#[derive(Clone, Copy, Debug, Default)]
pub struct Glob;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    pattern: String,
    path: Option<String>,
    #[serde(default)]
    include_hidden: bool,
    max_results: Option<usize>,
}

/// Compiles a path glob: `*` stays within one path component, `**` crosses them, and a
/// pattern without `/` matches at any depth (`*.rs` is `**/*.rs`).
pub fn compile(pattern: &str) -> Result<GlobMatcher, String> {
    if pattern.is_empty() {
        return Err("the pattern is empty".to_owned());
    }
    let trimmed = pattern.trim_start_matches("./");
    let full = if trimmed.contains('/') {
        trimmed.trim_start_matches('/').to_owned()
    } else {
        format!("**/{trimmed}")
    };
    GlobBuilder::new(&full)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| e.to_string())
}

/// The matches.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GlobResult {
    /// The pattern as given.
    pub pattern: String,
    /// Matching paths, workspace-relative; directories end with `/`.
    pub paths: Vec<String>,
    /// The cap was reached.
    pub capped: bool,
    /// The time limit passed.
    pub timed_out: bool,
    /// The call was cancelled.
    pub cancelled: bool,
}

impl GlobResult {
    /// The model-facing text.
    pub fn summary(&self, max_results: usize, limit: usize) -> String {
        let mut lines = self.paths.clone();
        if lines.is_empty() {
            lines.push(format!("No paths match `{}`.", self.pattern));
        }
        if self.capped {
            lines.push(format!(
                "[stopped at max_results={max_results}; narrow the pattern or raise it]"
            ));
        }
        if self.timed_out {
            lines.push(format!(
                "[listing timed out after {}s; results are partial]",
                SEARCH_DEADLINE.as_secs()
            ));
        }
        if self.cancelled {
            lines.push("[listing cancelled; results are partial]".to_owned());
        }
        bound_lines(&lines, limit)
    }
}

impl Tool for Glob {
    fn name(&self) -> &'static str {
        NAME
    }

    fn description(&self) -> &'static str {
        "Lists paths under a directory (default: the workspace root) matching a glob. `*` \
         matches within one path component, `**` across them; a pattern without `/` (such as \
         `*.rs`) matches at any depth. Honours .gitignore, skips hidden entries (unless \
         include_hidden) and never follows symbolic links. Directories end with `/`. Results \
         are capped (max_results, default 200)."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Path glob, relative to `path`."},
                "path": {"type": "string", "description": "Directory to list under; defaults to the workspace root."},
                "include_hidden": {"type": "boolean", "description": "Also list hidden files and directories."},
                "max_results": {"type": "integer", "minimum": 1, "description": "Default 200, at most 1000."}
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
            "list `{}` under `{}`",
            args.pattern,
            args.path.as_deref().unwrap_or(".")
        ))])
    }

    fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: Args = parse_args(NAME, &args)?;
        let matcher = compile(&args.pattern)
            .map_err(|problem| ToolError::invalid(NAME, "pattern", problem))?;
        let max_results = args
            .max_results
            .unwrap_or(DEFAULT_MAX_RESULTS)
            .clamp(1, MAX_RESULTS_CEILING);
        let ws = open_workspace(NAME, ctx)?;
        let root = ws
            .resolve_inside("path", args.path.as_deref().unwrap_or("."))
            .map_err(|e| e.into_tool_error(NAME, "path"))?;
        match ws
            .lstat(&root)
            .map_err(|e| e.into_tool_error(NAME, "path"))?
        {
            Some(facts) if facts.is_dir() => {}
            Some(facts) => {
                return Err(ToolError::invalid(
                    NAME,
                    "path",
                    format!("`{root}` is {}, not a directory", facts.kind()),
                ));
            }
            None => {
                return Err(ToolError::invalid(
                    NAME,
                    "path",
                    format!("`{root}` does not exist"),
                ));
            }
        }
        let root_abs = ws.absolute(&root);
        let started = Instant::now();
        let mut result = GlobResult {
            pattern: args.pattern.clone(),
            paths: Vec::new(),
            capped: false,
            timed_out: false,
            cancelled: false,
        };
        for entry in walk(&root_abs, args.include_hidden) {
            if ctx.cancel().is_cancelled() {
                result.cancelled = true;
                break;
            }
            if started.elapsed() > SEARCH_DEADLINE {
                result.timed_out = true;
                break;
            }
            let Ok(entry) = entry else { continue };
            let Some(kind) = entry.file_type() else {
                continue;
            };
            if !(kind.is_file() || kind.is_dir()) || entry.depth() == 0 {
                continue;
            }
            let rel = entry
                .path()
                .strip_prefix(&root_abs)
                .unwrap_or(Path::new(""));
            if !matcher.is_match(rel) {
                continue;
            }
            if result.paths.len() >= max_results {
                // One match past the cap: the listing really is incomplete.
                result.capped = true;
                break;
            }
            let shown = ws
                .resolve("path", &entry.path().to_string_lossy())
                .map_or_else(|_| rel.display().to_string(), |p| p.display());
            result.paths.push(if kind.is_dir() {
                format!("{shown}/")
            } else {
                shown
            });
        }
        let summary = result.summary(max_results, ctx.summary_limit());
        Ok(ToolOutput::new(
            summary,
            serde_json::to_value(&result).unwrap_or(Value::Null),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_patterns_match_at_any_depth_and_star_stays_in_a_component() {
        let m = compile("*.rs").unwrap();
        assert!(m.is_match("a.rs") && m.is_match("src/deep/a.rs"));
        let m = compile("src/*.rs").unwrap();
        assert!(m.is_match("src/a.rs"));
        assert!(!m.is_match("src/deep/a.rs"));
        let m = compile("src/**/*.rs").unwrap();
        assert!(m.is_match("src/deep/a.rs"));
        assert!(compile("a[").is_err());
        assert!(compile("").is_err());
    }
}
