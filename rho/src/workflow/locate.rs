//! Finding a workflow the user names: a workflow file (relative to the current directory) or
//! the name of one of the workspace's workflows (`ci` is `.rho/workflows/ci/workflow.star`,
//! or `.rho/workflows/ci.star`). Shared by the command line and the model-facing tool.
//!
//! Invariant: a name resolves to exactly one regular file inside the workspace, and anything
//! that names nothing (a directory, a mistyped file or name) is an error listing the closest
//! workflows, never a guess.

use std::path::{Path, PathBuf};

use crate::paths::Workspace;

/// Where the workspace's named workflows live, relative to its root.
pub const WORKFLOWS_DIR: &str = ".rho/workflows";
/// The entry file of a workflow folder.
pub const ENTRY_FILE: &str = "workflow.star";

/// One workflow of the workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedWorkflow {
    /// Its name (the folder name, or the file stem of a loose `.star` file).
    pub name: String,
    /// Its entry file, relative to the workspace root.
    pub path: PathBuf,
}

/// Why a workflow could not be found.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocateError {
    /// Nothing of that name: no file, no workspace workflow.
    #[error("workflow `{given}` not found: no such file and no workflow of that name in {WORKFLOWS_DIR}{}", suggest(.suggestions))]
    NotFound {
        /// What the user gave.
        given: String,
        /// Close names or paths that do exist.
        suggestions: Vec<String>,
    },
    /// The path is a directory, not a workflow file.
    #[error("workflow `{given}` not found: it is a directory, not a workflow file{}", suggest(.suggestions))]
    Directory {
        /// What the user gave.
        given: String,
        /// Workflow files that do exist (the folder's `workflow.star` first).
        suggestions: Vec<String>,
    },
}

impl LocateError {
    /// The suggestions the error carries.
    pub fn suggestions(&self) -> &[String] {
        match self {
            LocateError::NotFound { suggestions, .. }
            | LocateError::Directory { suggestions, .. } => suggestions,
        }
    }
}

fn suggest(suggestions: &[String]) -> String {
    if suggestions.is_empty() {
        String::new()
    } else {
        format!("; did you mean {}?", suggestions.join(", "))
    }
}

/// The workspace's workflows, by name: folders holding `workflow.star` and loose `.star`
/// files directly under `.rho/workflows/`. A folder wins over a loose file of the same name.
pub fn workspace_workflows(workspace: &Path) -> Vec<NamedWorkflow> {
    let dir = workspace.join(WORKFLOWS_DIR);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut found: Vec<NamedWorkflow> = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        let path = entry.path();
        if path.join(ENTRY_FILE).is_file() {
            found.push(NamedWorkflow {
                path: Path::new(WORKFLOWS_DIR).join(&name).join(ENTRY_FILE),
                name,
            });
        } else if let Some(stem) = name.strip_suffix(".star")
            && path.is_file()
            && !stem.is_empty()
        {
            found.push(NamedWorkflow {
                name: stem.to_owned(),
                path: Path::new(WORKFLOWS_DIR).join(&name),
            });
        }
    }
    found.sort_by(|a, b| {
        a.name.cmp(&b.name).then_with(|| {
            b.path
                .ends_with(ENTRY_FILE)
                .cmp(&a.path.ends_with(ENTRY_FILE))
        })
    });
    found.dedup_by(|later, first| later.name == first.name);
    found
}

/// Whether `given` reads as a file path rather than a name or an id.
pub fn looks_like_path(given: &str) -> bool {
    given.contains('/')
        || Path::new(given)
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("star"))
}

/// Resolves a workflow the user named: an existing file (relative to the current directory)
/// or a workspace workflow's name. The result is relative to the workspace root when it lies
/// inside it.
pub fn resolve_workflow(workspace: &Workspace, given: &str) -> Result<PathBuf, LocateError> {
    let path = workspace.user_path(Path::new(given));
    let absolute = workspace.root.join(&path);
    // Any existing entry that is not a directory (a regular file, but also a FIFO, a socket
    // or a device) is the user's file: the planner opens it without blocking and reports
    // what is wrong with it. Only `stat` is used here, which never opens the entry.
    let existing = std::fs::metadata(&absolute).ok();
    if existing.as_ref().is_some_and(|m| !m.is_dir()) {
        return Ok(path);
    }
    let named = workspace_workflows(&workspace.root);
    if !looks_like_path(given)
        && let Some(w) = named.iter().find(|w| w.name == given)
    {
        return Ok(w.path.clone());
    }
    if existing.is_some() {
        let mut suggestions = Vec::new();
        if absolute.join(ENTRY_FILE).is_file() {
            suggestions.push(path.join(ENTRY_FILE).display().to_string());
        }
        suggestions.extend(close_names(given, &named));
        return Err(LocateError::Directory {
            given: given.to_owned(),
            suggestions,
        });
    }
    Err(LocateError::NotFound {
        given: given.to_owned(),
        suggestions: close_names(given, &named),
    })
}

/// Names (and, for a path, entry paths) of workflows close to `given`, closest first.
fn close_names(given: &str, named: &[NamedWorkflow]) -> Vec<String> {
    let stem = Path::new(given)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or(given);
    // `.rho/workflows/ci/workflow.star` mistyped: compare with the folder name.
    let key = if stem == "workflow" {
        Path::new(given)
            .parent()
            .and_then(Path::file_name)
            .and_then(|s| s.to_str())
            .unwrap_or(stem)
    } else {
        stem
    };
    let mut scored: Vec<(usize, &NamedWorkflow)> = named
        .iter()
        .map(|w| (edit_distance(key, &w.name), w))
        .filter(|(d, w)| *d <= (w.name.len().max(key.len()) / 3).max(1) || w.name.contains(key))
        .collect();
    scored.sort_by_key(|(d, w)| (*d, w.name.clone()));
    let as_path = looks_like_path(given);
    let mut out: Vec<String> = scored
        .into_iter()
        .take(3)
        .map(|(_, w)| {
            if as_path {
                w.path.display().to_string()
            } else {
                w.name.clone()
            }
        })
        .collect();
    if out.is_empty() && !named.is_empty() && named.len() <= 8 {
        // Nothing close: list what there is, so the next try can succeed.
        out = named.iter().map(|w| w.name.clone()).collect();
    }
    out
}

/// Levenshtein distance over characters.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let current = row[j + 1];
            row[j + 1] = if ca == *cb {
                previous
            } else {
                1 + previous.min(row[j]).min(row[j + 1])
            };
            previous = current;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths::discover_from;

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for (rel, text) in [
            (".rho/workflows/ci/workflow.star", "x"),
            (".rho/workflows/release.star", "x"),
            (".rho/workflows/lint/notes.txt", "x"),
            ("sub/local.star", "x"),
        ] {
            std::fs::create_dir_all(root.join(rel).parent().unwrap()).unwrap();
            std::fs::write(root.join(rel), text).unwrap();
        }
        let ws = discover_from(&root.join("sub"));
        (dir, ws)
    }

    #[test]
    fn names_and_files_resolve_from_anywhere_in_the_workspace() {
        let (_dir, ws) = workspace();
        let names: Vec<_> = workspace_workflows(&ws.root)
            .into_iter()
            .map(|w| w.name)
            .collect();
        assert_eq!(names, ["ci", "release"]);
        assert_eq!(
            resolve_workflow(&ws, "ci").unwrap(),
            Path::new(".rho/workflows/ci/workflow.star")
        );
        assert_eq!(
            resolve_workflow(&ws, "release").unwrap(),
            Path::new(".rho/workflows/release.star")
        );
        assert_eq!(
            resolve_workflow(&ws, "local.star").unwrap(),
            Path::new("sub/local.star")
        );
    }

    #[test]
    fn mistakes_get_not_found_with_suggestions() {
        let (_dir, ws) = workspace();
        let err = resolve_workflow(&ws, "cj").unwrap_err();
        assert!(matches!(err, LocateError::NotFound { .. }), "{err}");
        assert_eq!(err.suggestions(), ["ci"]);
        assert_eq!(
            err.to_string(),
            "workflow `cj` not found: no such file and no workflow of that name in \
             .rho/workflows; did you mean ci?"
        );
        let err = resolve_workflow(&ws, "../.rho/workflows/ci").unwrap_err();
        assert!(matches!(err, LocateError::Directory { .. }), "{err}");
        assert_eq!(err.suggestions()[0], ".rho/workflows/ci/workflow.star");
        let err = resolve_workflow(&ws, "../.rho/workflows/relase.star").unwrap_err();
        assert!(
            err.to_string()
                .contains("did you mean .rho/workflows/release.star"),
            "{err}"
        );
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn a_fifo_is_passed_on_without_being_opened() {
        let (_dir, ws) = workspace();
        let fifo = ws.root.join("sub/pipe.star");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        // Opening the FIFO for reading would block this test forever (no writer).
        assert_eq!(
            resolve_workflow(&ws, "pipe.star").unwrap(),
            Path::new("sub/pipe.star")
        );
    }
}
