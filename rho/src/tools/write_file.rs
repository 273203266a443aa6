//! `write_file`: creates a file or replaces its whole content.
//!
//! Invariant: the permission request states the class of the write from what is on disk
//! (a tracked, regular workspace file is a tracked edit; anything else another write), and
//! the content lands atomically — the old bytes or the new ones, never a mix — without
//! following a symbolic link anywhere on the path.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::tools::workspace::{Workspace, open_workspace};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput, ToolPermission, parse_args};

const NAME: &str = "write_file";

/// The `write_file` tool.
#[derive(Clone, Copy, Debug, Default)]
pub struct WriteFile;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    content: String,
}

/// The permission a write of `given` needs, classified from what is on disk now.
pub fn write_permission(
    tool: &str,
    ws: &Workspace,
    field: &str,
    given: &str,
    what: &str,
) -> Result<ToolPermission, ToolError> {
    let path = ws
        .resolve("path", given)
        .map_err(|e| e.into_tool_error(tool, field))?;
    let class = ws.write_class(&path);
    let mut permission = ToolPermission::new(class, format!("{what} `{}`", path.display()));
    permission.input = Some(json!({"path": ws.absolute(&path).to_string_lossy()}));
    Ok(permission)
}

impl Tool for WriteFile {
    fn name(&self) -> &'static str {
        NAME
    }

    fn description(&self) -> &'static str {
        "Creates a file, or replaces a file's whole content, with `content` (missing parent \
         directories are created). Prefer the edit tool for targeted changes. The write is \
         atomic; symbolic links are refused, not followed."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File to write, relative to the workspace root or absolute."},
                "content": {"type": "string", "description": "The complete new content."}
            },
            "required": ["path", "content"],
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
        let mut permission = write_permission(NAME, &ws, "path", &args.path, "write")?;
        permission.summary = format!("{} ({} bytes)", permission.summary, args.content.len());
        Ok(vec![permission])
    }

    fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: Args = parse_args(NAME, &args)?;
        let ws = open_workspace(NAME, ctx)?;
        let path = ws
            .resolve("path", &args.path)
            .map_err(|e| e.into_tool_error(NAME, "path"))?;
        let outcome = ws
            .write_atomic(&path, args.content.as_bytes(), true)
            .map_err(|e| e.into_tool_error(NAME, "path"))?;
        let lines = args.content.lines().count();
        let verb = if outcome.created {
            "Created"
        } else {
            "Replaced"
        };
        Ok(ToolOutput::new(
            format!("{verb} `{path}`: {lines} lines, {} bytes\n", outcome.bytes),
            json!({
                "path": path.display(),
                "created": outcome.created,
                "bytes": outcome.bytes,
                "lines": lines,
            }),
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    use super::*;

    #[test]
    fn a_workspace_whose_path_is_not_utf8_gets_a_permission_not_a_panic() {
        let parent = tempfile::tempdir().unwrap();
        let root = parent.path().join(OsStr::from_bytes(b"ws-\xff"));
        std::fs::create_dir(&root).unwrap();
        let ws = Workspace::open(&root).unwrap();
        let permission = write_permission(NAME, &ws, "path", "notes.txt", "write").unwrap();
        let path = permission.input.unwrap()["path"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(path.ends_with("ws-\u{fffd}/notes.txt"), "{path}");
    }
}
