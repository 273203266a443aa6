//! `edit_file`: replaces an exact string in one existing UTF-8 file (Rho's `str_replace`
//! format): exactly one match unless `replace_all`.
//!
//! Invariant: nothing is written unless the match rules hold; the new content replaces the
//! old atomically, with the file's permission bits and newline style kept.

pub mod replace;

use std::io::Read as _;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::tools::workspace::{Workspace, open_workspace};
use crate::tools::write_file::write_permission;
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput, ToolPermission, parse_args};

const NAME: &str = "edit_file";

/// Files larger than this are not edited in memory.
pub const MAX_EDIT_BYTES: u64 = 16 << 20;

/// Lines of context shown around the first replacement.
const SNIPPET_CONTEXT: usize = 3;

/// The `edit_file` tool.
#[derive(Clone, Copy, Debug, Default)]
pub struct EditFile;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

/// Reads the UTF-8 text of the regular file `given` (bounded), for editing tools.
pub fn read_text(
    tool: &str,
    ws: &Workspace,
    field: &str,
    given: &str,
) -> Result<String, ToolError> {
    let path = ws
        .resolve("path", given)
        .map_err(|e| e.into_tool_error(tool, field))?;
    let file = ws
        .open_file(&path)
        .map_err(|e| e.into_tool_error(tool, field))?;
    let failed = |e: std::io::Error| ToolError::failed(tool, format!("cannot read `{path}`: {e}"));
    let size = file.metadata().map_err(failed)?.len();
    if size > MAX_EDIT_BYTES {
        return Err(ToolError::Limit {
            tool: tool.to_owned(),
            limit: "max_edit_bytes",
            limit_value: format!("{MAX_EDIT_BYTES} bytes"),
            detail: format!("`{path}` is {size} bytes"),
        });
    }
    let mut bytes = Vec::new();
    file.take(MAX_EDIT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(failed)?;
    String::from_utf8(bytes).map_err(|_| {
        ToolError::invalid(
            tool,
            field,
            format!("`{path}` is not UTF-8 text; use write_file to replace it whole"),
        )
    })
}

/// Numbered lines around `line` (1-based) of `text`.
fn snippet(text: &str, line: usize, new_lines: usize) -> Vec<String> {
    let first = line.saturating_sub(SNIPPET_CONTEXT).max(1);
    let last = line + new_lines.max(1) - 1 + SNIPPET_CONTEXT;
    text.lines()
        .enumerate()
        .skip(first - 1)
        .take(last + 1 - first)
        .map(|(i, l)| {
            let l: String = l.chars().take(300).collect();
            format!("{}:{l}", i + 1)
        })
        .collect()
}

impl Tool for EditFile {
    fn name(&self) -> &'static str {
        NAME
    }

    fn description(&self) -> &'static str {
        "Edits an existing UTF-8 file by exact string replacement. `old_string` must occur \
         exactly once (include surrounding lines to make it unique) unless `replace_all` is \
         true. CRLF and LF newlines match each other and the file keeps its newline style. \
         Use write_file to create or fully rewrite a file."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Existing file to edit."},
                "old_string": {"type": "string", "minLength": 1, "description": "Exact text to find."},
                "new_string": {"type": "string", "description": "Replacement text."},
                "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false)."}
            },
            "required": ["path", "old_string", "new_string"],
            "additionalProperties": false
        })
    }

    fn capability(&self) -> &'static str {
        NAME
    }

    fn permission_requests(
        &self,
        args: &Value,
        ctx: &ToolContext,
    ) -> Result<Vec<ToolPermission>, ToolError> {
        let args: Args = parse_args(NAME, args)?;
        let ws = open_workspace(NAME, ctx)?;
        Ok(vec![write_permission(
            NAME, &ws, "path", &args.path, "edit",
        )?])
    }

    fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: Args = parse_args(NAME, &args)?;
        let ws = open_workspace(NAME, ctx)?;
        let path = ws
            .resolve("path", &args.path)
            .map_err(|e| e.into_tool_error(NAME, "path"))?;
        let text = read_text(NAME, &ws, "path", &args.path)?;
        let replaced = replace::replace(
            &text,
            &args.old_string,
            &args.new_string,
            args.replace_all,
            &path.display(),
        )
        .map_err(|e| {
            let field = match e {
                replace::ReplaceError::NoChange => "new_string",
                _ => "old_string",
            };
            ToolError::invalid(NAME, field, e.to_string())
        })?;
        ws.write_atomic(&path, replaced.text.as_bytes(), false)
            .map_err(|e| e.into_tool_error(NAME, "path"))?;
        let new_lines = args.new_string.lines().count();
        let mut lines = vec![format!(
            "Edited `{path}`: {} replacement{} (first at line {})",
            replaced.count,
            if replaced.count == 1 { "" } else { "s" },
            replaced.first_line
        )];
        lines.extend(snippet(&replaced.text, replaced.first_line, new_lines));
        Ok(ToolOutput::new(
            crate::tools::summary::bound_lines(&lines, ctx.summary_limit()),
            json!({
                "path": path.display(),
                "replacements": replaced.count,
                "first_line": replaced.first_line,
            }),
        ))
    }
}
