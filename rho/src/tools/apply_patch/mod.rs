//! `apply_patch`: applies a Codex-style patch (add, delete, update and move sections across
//! one or more files).
//!
//! Invariant: the whole patch is parsed, every target checked and every new content computed
//! in memory before the first byte is written; a patch that fails anywhere in those steps
//! writes nothing. Paths are workspace-relative without `..`, `Add File` and `Move to`
//! targets must not exist, and no path is named twice.

pub mod patch;

use std::collections::BTreeSet;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::tools::edit_file::read_text;
use crate::tools::summary::bound_lines;
use crate::tools::workspace::{ResolvedPath, Workspace, open_workspace};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput, ToolPermission, parse_args};
use patch::{FileOp, Patch};
use rho_policy::OperationClass;

const NAME: &str = "apply_patch";

/// The `apply_patch` tool.
#[derive(Clone, Copy, Debug, Default)]
pub struct ApplyPatch;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    input: String,
}

fn parse_patch(input: &str) -> Result<Patch, ToolError> {
    patch::parse(input).map_err(|e| ToolError::invalid(NAME, "input", e.to_string()))
}

fn resolve(ws: &Workspace, path: &str) -> Result<ResolvedPath, ToolError> {
    ws.resolve_inside("input", path)
        .map_err(|e| e.into_tool_error(NAME, "input"))
}

/// One write or removal the patch will perform, computed before anything is written.
enum Step {
    Write { path: ResolvedPath, content: String },
    Remove { path: ResolvedPath },
}

/// Checks every operation and computes every new content.
fn plan(ws: &Workspace, patch: &Patch) -> Result<Vec<Step>, ToolError> {
    let mut seen = BTreeSet::new();
    let mut claim = |path: &ResolvedPath| {
        if seen.insert(path.display()) {
            Ok(())
        } else {
            Err(ToolError::invalid(
                NAME,
                "input",
                format!("`{path}` appears more than once in the patch"),
            ))
        }
    };
    let exists = |path: &ResolvedPath| {
        ws.lstat(path)
            .map(|facts| facts.is_some())
            .map_err(|e| e.into_tool_error(NAME, "input"))
    };
    let mut steps = Vec::new();
    for op in &patch.ops {
        match op {
            FileOp::Add { path, contents } => {
                let path = resolve(ws, path)?;
                claim(&path)?;
                if exists(&path)? {
                    return Err(ToolError::invalid(
                        NAME,
                        "input",
                        format!("`{path}` already exists; `*** Add File` only creates new files"),
                    ));
                }
                steps.push(Step::Write {
                    path,
                    content: contents.clone(),
                });
            }
            FileOp::Delete { path } => {
                let resolved = resolve(ws, path)?;
                claim(&resolved)?;
                // Reading proves it is a regular file reachable without links.
                read_text(NAME, ws, "input", path)?;
                steps.push(Step::Remove { path: resolved });
            }
            FileOp::Update {
                path,
                move_to,
                chunks,
            } => {
                let resolved = resolve(ws, path)?;
                claim(&resolved)?;
                let original = read_text(NAME, ws, "input", path)?;
                let updated = patch::apply_chunks(&original, chunks, &resolved.display())
                    .map_err(|e| ToolError::invalid(NAME, "input", e.to_string()))?;
                match move_to {
                    Some(dest) => {
                        let dest = resolve(ws, dest)?;
                        claim(&dest)?;
                        if exists(&dest)? {
                            return Err(ToolError::invalid(
                                NAME,
                                "input",
                                format!(
                                    "`{dest}` already exists; `*** Move to` does not overwrite"
                                ),
                            ));
                        }
                        steps.push(Step::Write {
                            path: dest,
                            content: updated,
                        });
                        steps.push(Step::Remove { path: resolved });
                    }
                    None => steps.push(Step::Write {
                        path: resolved,
                        content: updated,
                    }),
                }
            }
        }
    }
    Ok(steps)
}

impl Tool for ApplyPatch {
    fn name(&self) -> &'static str {
        NAME
    }

    fn description(&self) -> &'static str {
        "Applies a patch in the Codex format to one or more files. `input` is the whole \
         document:\n*** Begin Patch\n*** Add File: path\n+line\n*** Delete File: path\n\
         *** Update File: path\n*** Move to: new/path   (optional)\n@@ optional line to find \
         first\n context line\n-removed line\n+added line\n*** End of File   (optional: chunk \
         at the end)\n*** End Patch\nPaths are workspace-relative without `..`; added files \
         must not exist. Nothing is written unless every section applies."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "input": {
                    "type": "string",
                    "description": "The full patch, from *** Begin Patch to *** End Patch."
                }
            },
            "required": ["input"],
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
        let patch = parse_patch(&args.input)?;
        let ws = open_workspace(NAME, ctx)?;
        let mut requests = Vec::new();
        for op in &patch.ops {
            let mut targets = vec![(op.path(), op.to_string())];
            if let FileOp::Update {
                move_to: Some(dest),
                ..
            } = op
            {
                targets.push((dest.as_str(), format!("A {dest} (moved)")));
            }
            for (path, line) in targets {
                let resolved = resolve(&ws, path)?;
                let class = match op {
                    // Creating a file is never an edit of a tracked one.
                    FileOp::Add { .. } => OperationClass::OtherWrite,
                    _ if path != op.path() => OperationClass::OtherWrite,
                    _ => ws.write_class(&resolved),
                };
                let mut permission = ToolPermission::new(class, format!("patch: {line}"));
                permission.input = Some(
                    json!({"path": ws.absolute(&resolved).to_string_lossy(), "operation": line}),
                );
                requests.push(permission);
            }
        }
        Ok(requests)
    }

    fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: Args = parse_args(NAME, &args)?;
        let patch = parse_patch(&args.input)?;
        let ws = open_workspace(NAME, ctx)?;
        let steps = plan(&ws, &patch)?;
        for (done, step) in steps.iter().enumerate() {
            let result = match step {
                Step::Write { path, content } => {
                    ws.write_atomic(path, content.as_bytes(), true).map(|_| ())
                }
                Step::Remove { path } => ws.remove_file(path),
            };
            if let Err(err) = result {
                let message = crate::tools::workspace::error_chain(&err);
                return Err(ToolError::failed(
                    NAME,
                    format!(
                        "{message} (after {done} of {} file changes had been made)",
                        steps.len()
                    ),
                ));
            }
        }
        let mut lines = vec!["Success. Updated the following files:".to_owned()];
        lines.extend(patch.ops.iter().map(ToString::to_string));
        let files: Vec<Value> = patch
            .ops
            .iter()
            .map(|op| match op {
                FileOp::Add { path, .. } => json!({"op": "add", "path": path}),
                FileOp::Delete { path } => json!({"op": "delete", "path": path}),
                FileOp::Update { path, move_to, .. } => {
                    json!({"op": "update", "path": path, "move_to": move_to})
                }
            })
            .collect();
        Ok(ToolOutput::new(
            bound_lines(&lines, ctx.summary_limit()),
            json!({ "files": files }),
        ))
    }
}
