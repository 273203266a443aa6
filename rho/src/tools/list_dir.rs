//! `list_dir`: the entries of one directory, sorted by name, with their kind and size.
//!
//! Invariant: the directory is opened without following any symbolic link on its path, and
//! entries are inspected with `fstatat(AT_SYMLINK_NOFOLLOW)`, so a link is listed as a link
//! (with its target text) and never entered.

use std::os::fd::AsFd as _;

use nix::fcntl::AtFlags;
use nix::sys::stat::fstatat;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::tools::summary::bound_lines;
use crate::tools::workspace::{Workspace, open_workspace};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput, ToolPermission, parse_args};
use crate::workflow::identity::FileFacts;

/// Entries listed at most; the rest are counted.
pub const MAX_ENTRIES: usize = 2_000;

const NAME: &str = "list_dir";

/// The `list_dir` tool.
#[derive(Clone, Copy, Debug, Default)]
pub struct ListDir;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    #[serde(default = "dot")]
    path: String,
}

fn dot() -> String {
    ".".to_owned()
}

/// One directory entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DirEntry {
    /// The entry's name.
    pub name: String,
    /// `file`, `dir`, `symlink` or `other`.
    pub kind: &'static str,
    /// Size in bytes (files only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// What a symbolic link points to (never followed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// The listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Listing {
    /// The directory as shown (workspace-relative inside it).
    pub path: String,
    /// Entries, sorted by name.
    pub entries: Vec<DirEntry>,
    /// Entries left out past [`MAX_ENTRIES`].
    pub omitted: usize,
}

impl Listing {
    /// The model-facing text: one entry a line, directories with `/`, links with their
    /// target.
    pub fn summary(&self, limit: usize) -> String {
        let mut lines = vec![format!(
            "{}/ ({} entries)",
            self.path.trim_end_matches('/'),
            self.entries.len() + self.omitted
        )];
        for e in &self.entries {
            lines.push(match (e.kind, &e.target, e.size) {
                ("dir", _, _) => format!("{}/", e.name),
                ("symlink", Some(target), _) => format!("{} -> {target}", e.name),
                ("file", _, Some(size)) => format!("{} ({size} bytes)", e.name),
                _ => format!("{} ({})", e.name, e.kind),
            });
        }
        if self.omitted > 0 {
            lines.push(format!(
                "[{} more entries not listed; limit {MAX_ENTRIES}]",
                self.omitted
            ));
        }
        bound_lines(&lines, limit)
    }
}

/// Lists the directory `given` (resolved against the workspace).
pub fn list(ws: &Workspace, given: &str) -> Result<Listing, ToolError> {
    let path = ws
        .resolve("path", given)
        .map_err(|e| e.into_tool_error(NAME, "path"))?;
    let fd = ws
        .open_directory(&path)
        .map_err(|e| e.into_tool_error(NAME, "path"))?;
    let mut dir = nix::dir::Dir::from_fd(fd)
        .map_err(|e| ToolError::failed(NAME, format!("cannot read `{path}`: {e}")))?;
    let mut names = Vec::new();
    for entry in dir.iter() {
        let entry =
            entry.map_err(|e| ToolError::failed(NAME, format!("cannot read `{path}`: {e}")))?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        names.push(entry.file_name().to_owned());
    }
    names.sort();
    let omitted = names.len().saturating_sub(MAX_ENTRIES);
    names.truncate(MAX_ENTRIES);
    let dir_fd = dir.as_fd();
    let entries = names
        .into_iter()
        .map(|name| {
            let facts = fstatat(dir_fd, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
                .ok()
                .map(|st| FileFacts::from_stat(&st));
            let shown = name.to_string_lossy().into_owned();
            match facts {
                Some(f) if f.is_symlink() => DirEntry {
                    name: shown,
                    kind: "symlink",
                    size: None,
                    target: nix::fcntl::readlinkat(dir_fd, name.as_c_str())
                        .ok()
                        .map(|t| t.to_string_lossy().into_owned()),
                },
                Some(f) if f.is_dir() => DirEntry {
                    name: shown,
                    kind: "dir",
                    size: None,
                    target: None,
                },
                Some(f) if f.is_regular() => DirEntry {
                    name: shown,
                    kind: "file",
                    size: Some(f.size),
                    target: None,
                },
                _ => DirEntry {
                    name: shown,
                    kind: "other",
                    size: None,
                    target: None,
                },
            }
        })
        .collect();
    Ok(Listing {
        path: path.display(),
        entries,
        omitted,
    })
}

impl Tool for ListDir {
    fn name(&self) -> &'static str {
        NAME
    }

    fn description(&self) -> &'static str {
        "Lists one directory's entries sorted by name: files with their size, directories \
         with a trailing `/`, symbolic links with their target (never followed). `path` \
         defaults to the workspace root; relative paths start there."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Directory to list; defaults to the workspace root."}
            },
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
        Ok(vec![ToolPermission::read(format!("list `{}`", args.path))])
    }

    fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: Args = parse_args(NAME, &args)?;
        let ws = open_workspace(NAME, ctx)?;
        let listing = list(&ws, &args.path)?;
        let structured = serde_json::to_value(&listing).unwrap_or(Value::Null);
        Ok(ToolOutput::new(
            listing.summary(ctx.summary_limit()),
            structured,
        ))
    }
}
