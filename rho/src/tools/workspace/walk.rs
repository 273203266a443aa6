//! The directory walk `grep` and `glob` share: ripgrep's `ignore` walker, honouring
//! `.gitignore` (also outside a git repository), `.ignore` and the global git excludes,
//! skipping hidden entries unless asked, never following symbolic links, never entering
//! `.git`, sorted by name within each directory so repeated runs agree.
//!
//! Invariant: the walk yields only regular files and directories reached without passing
//! through a symbolic link; links are skipped, never followed.

use std::path::Path;

use ignore::{Walk, WalkBuilder};

/// A walk of `root` (an absolute directory already checked to be reachable without links).
pub fn walk(root: &Path, include_hidden: bool) -> Walk {
    WalkBuilder::new(root)
        .hidden(!include_hidden)
        .follow_links(false)
        .require_git(false)
        .git_global(true)
        .git_ignore(true)
        .git_exclude(true)
        .ignore(true)
        .parents(true)
        .filter_entry(|entry| entry.file_name() != ".git")
        .sort_by_file_name(std::cmp::Ord::cmp)
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ignored_hidden_and_linked_entries_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src/b")).unwrap();
        std::fs::create_dir_all(root.join("target")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join(".gitignore"), "target/\n*.log\n").unwrap();
        for f in [
            "src/a.rs",
            "src/b/c.rs",
            "target/out",
            "x.log",
            ".hidden",
            ".git/config",
        ] {
            std::fs::write(root.join(f), "x").unwrap();
        }
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "x").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("src/link")).unwrap();
        std::os::unix::fs::symlink(root.join("src/a.rs"), root.join("alias.rs")).unwrap();
        let names = |hidden| -> Vec<String> {
            walk(root, hidden)
                .filter_map(Result::ok)
                .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
                .map(|e| e.path().strip_prefix(root).unwrap().display().to_string())
                .collect()
        };
        assert_eq!(names(false), ["src/a.rs", "src/b/c.rs"]);
        assert_eq!(
            names(true),
            [".gitignore", ".hidden", "src/a.rs", "src/b/c.rs"]
        );
    }
}
