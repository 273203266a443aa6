//! The workspace tools through the real registry and permission path: each tool's schema, its
//! happy path, its policy denial, and bad arguments (a typed error naming the field, nothing
//! written).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use rho::config::Config;
use rho::paths::RhoHome;
use rho::permissions::{HostAuthorizer, HostEnvironment, ProcessHookRunner, SharedHostAuthorizer};
use rho::tools::bash::Bash;
use rho::tools::{HeadlessHost, ToolContext, ToolError, ToolRegistry, workspace_tools};
use rho_policy::{
    ApprovalAnswer, ApprovalContext, ApprovalResponder, Decider, HookScope, HookSet, ModeSelection,
    ModeSource, PermissionMode, PermissionRequest, parse_hooks_file,
};
use serde_json::{Value, json};

const TOOLS: [&str; 8] = [
    "apply_patch",
    "bash",
    "edit_file",
    "glob",
    "grep",
    "list_dir",
    "read_file",
    "write_file",
];

/// A workspace that is a git repository with `tracked.txt` and `src/lib.rs` committed to the
/// index and `untracked.txt` beside them.
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        git(root, &["init", "-q"]);
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("tracked.txt"), "alpha\nbeta\ngamma\n").unwrap();
        std::fs::write(root.join("src/lib.rs"), "fn one() {}\nfn two() {}\n").unwrap();
        std::fs::write(root.join("untracked.txt"), "loose\n").unwrap();
        std::fs::write(root.join(".gitignore"), "ignored/\n").unwrap();
        std::fs::create_dir_all(root.join("ignored")).unwrap();
        std::fs::write(root.join("ignored/needle.txt"), "needle\n").unwrap();
        git(root, &["add", "tracked.txt", "src/lib.rs", ".gitignore"]);
        Fixture { dir }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().canonicalize().unwrap()
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.root().join(rel)).unwrap()
    }

    /// Every file's path and content, to prove a failed call changed nothing.
    fn snapshot(&self) -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        let root = self.root();
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let entry = entry.unwrap();
                let path = entry.path();
                if path.file_name().is_some_and(|n| n == ".git") {
                    continue;
                }
                let kind = entry.file_type().unwrap();
                if kind.is_dir() {
                    stack.push(path.clone());
                }
                let content = if kind.is_file() {
                    std::fs::read(&path).unwrap()
                } else {
                    Vec::new()
                };
                out.push((
                    path.strip_prefix(&root).unwrap().display().to_string(),
                    content,
                ));
            }
        }
        out.sort();
        out
    }

    fn context(
        &self,
        mode: PermissionMode,
        hooks: HookSet,
        responder: Option<Box<dyn ApprovalResponder + Send>>,
    ) -> ToolContext {
        let root = self.root();
        let env = HostEnvironment::from_vars([("PATH", "/usr/bin:/bin")]);
        let runner = ProcessHookRunner::new(hooks, &root, &root, env);
        let host = HostAuthorizer::new(mode, runner, None, responder);
        let home = tempfile::tempdir().unwrap().keep();
        ToolContext::new(
            root,
            RhoHome::at(home.clone(), None),
            Arc::new(Config::empty(home.join("config.toml"))),
            ModeSelection {
                mode,
                source: ModeSource::Flag,
            },
            Arc::new(SharedHostAuthorizer::new(host)),
            Arc::new(HeadlessHost),
        )
    }

    fn ctx(&self, mode: PermissionMode) -> ToolContext {
        self.context(mode, HookSet::default(), None)
    }
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

fn registry() -> ToolRegistry {
    let mut builder = ToolRegistry::builder();
    for tool in workspace_tools() {
        builder = builder.with_shared(tool);
    }
    builder.build().unwrap()
}

/// Answers every approval with a fixed answer and records what it was asked.
struct Answer(Arc<Mutex<Vec<String>>>, bool);

impl ApprovalResponder for Answer {
    fn ask(&mut self, req: PermissionRequest<'_>, _context: &ApprovalContext) -> ApprovalAnswer {
        self.0.lock().unwrap().push(req.to_string());
        if self.1 {
            ApprovalAnswer::Approve
        } else {
            ApprovalAnswer::Deny {
                reason: "no".into(),
            }
        }
    }
}

fn assert_invalid(err: &ToolError, want_field: &str, needle: &str) {
    match err {
        ToolError::InvalidArguments { field, problem, .. } => {
            assert_eq!(field, want_field, "{err}");
            assert!(problem.contains(needle), "{err}");
        }
        other => panic!("expected invalid arguments on `{want_field}`, got {other}"),
    }
}

fn assert_denied_by(err: &ToolError, who: &Decider) {
    match err {
        ToolError::Denied { decided_by, .. } => assert_eq!(decided_by, who, "{err}"),
        other => panic!("expected a denial by {who}, got {other}"),
    }
}

/// A `before_tool_use` hook that denies every call of `tool`.
fn denying_hook(fx: &Fixture, tool: &str) -> HookSet {
    let script = fx.dir.path().join(format!("deny-{tool}.sh"));
    std::fs::write(
        &script,
        "#!/bin/sh\ncat >/dev/null\necho '{\"version\":1,\"decision\":\"deny\",\"reason\":\"not today\"}'\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let text = format!(
        "version = 1\n[[hook]]\nid = \"guard\"\non = \"before_tool_use\"\ntools = [\"{tool}\"]\ncommand = [\"{}\"]\ntimeout = \"10s\"\n",
        script.display()
    );
    let file = parse_hooks_file(Path::new("hooks.toml"), &text, HookScope::User).unwrap();
    HookSet::new(Some(file), None, false)
}

// ---------------------------------------------------------------- schemas

#[test]
fn every_tool_has_a_closed_object_schema_and_rejects_unknown_fields() {
    let fx = Fixture::new();
    let registry = registry();
    assert_eq!(registry.names(), TOOLS);
    let ctx = fx.ctx(PermissionMode::Bypass);
    let before = fx.snapshot();
    let valid = |tool: &str| match tool {
        "apply_patch" => {
            json!({"input": "*** Begin Patch\n*** Delete File: tracked.txt\n*** End Patch"})
        }
        "bash" => json!({"command": "touch bash-ran"}),
        "edit_file" => json!({"path": "tracked.txt", "old_string": "beta", "new_string": "x"}),
        "glob" | "grep" => json!({"pattern": "a"}),
        "list_dir" => json!({"path": "."}),
        "read_file" => json!({"path": "tracked.txt"}),
        "write_file" => json!({"path": "tracked.txt", "content": "x"}),
        other => panic!("no valid arguments for {other}"),
    };
    for spec in registry.specs() {
        assert_eq!(spec.input_schema["type"], "object", "{}", spec.name);
        assert_eq!(
            spec.input_schema["additionalProperties"], false,
            "{}",
            spec.name
        );
        assert!(!spec.description.is_empty());
        let mut args = valid(spec.name);
        args["surprise"] = json!(1);
        let err = registry.call(spec.name, args, &ctx).unwrap_err();
        assert_invalid(&err, "surprise", "unknown field");
    }
    for (tool, required) in [
        ("read_file", "path"),
        ("write_file", "path"),
        ("edit_file", "path"),
        ("apply_patch", "input"),
        ("grep", "pattern"),
        ("glob", "pattern"),
        ("bash", "command"),
    ] {
        let err = registry.call(tool, json!({}), &ctx).unwrap_err();
        assert_invalid(&err, required, "required");
    }
    assert_eq!(fx.snapshot(), before);
}

// ---------------------------------------------------------------- list_dir

#[test]
fn list_dir_lists_sorted_entries_with_kinds_and_shows_links_unfollowed() {
    let fx = Fixture::new();
    std::os::unix::fs::symlink("/etc", fx.root().join("etc-link")).unwrap();
    let out = registry()
        .call("list_dir", json!({}), &fx.ctx(PermissionMode::Plan))
        .unwrap();
    assert!(out.summary.contains("src/\n"), "{}", out.summary);
    assert!(
        out.summary.contains("tracked.txt (17 bytes)\n"),
        "{}",
        out.summary
    );
    assert!(
        out.summary.contains("etc-link -> /etc\n"),
        "{}",
        out.summary
    );
    let names: Vec<&str> = out.structured["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);

    let err = registry()
        .call(
            "list_dir",
            json!({"path": "etc-link"}),
            &fx.ctx(PermissionMode::Plan),
        )
        .unwrap_err();
    assert_invalid(&err, "path", "symbolic link");
    let err = registry()
        .call(
            "list_dir",
            json!({"path": "tracked.txt"}),
            &fx.ctx(PermissionMode::Plan),
        )
        .unwrap_err();
    assert_invalid(&err, "path", "not a directory");
}

#[test]
fn list_dir_denied_by_a_hook() {
    let fx = Fixture::new();
    let ctx = fx.context(PermissionMode::Bypass, denying_hook(&fx, "list_dir"), None);
    let err = registry().call("list_dir", json!({}), &ctx).unwrap_err();
    assert_denied_by(&err, &Decider::Hook { id: "guard".into() });
}

// ---------------------------------------------------------------- read_file

#[test]
fn read_file_returns_numbered_windows() {
    let fx = Fixture::new();
    let ctx = fx.ctx(PermissionMode::Plan);
    let out = registry()
        .call("read_file", json!({"path": "tracked.txt"}), &ctx)
        .unwrap();
    assert_eq!(
        out.summary,
        "1:alpha\n2:beta\n3:gamma\n[`tracked.txt`: 3 lines]\n"
    );
    let out = registry()
        .call(
            "read_file",
            json!({"path": "tracked.txt", "offset": 2, "limit": 1}),
            &ctx,
        )
        .unwrap();
    assert_eq!(
        out.summary,
        "2:beta\n[`tracked.txt`: lines 2-2 of 3; pass offset=3 to continue]\n"
    );
    assert_eq!(out.structured["total_lines"], 3);
    std::fs::write(fx.root().join("bin.dat"), b"\x00\x01\x02").unwrap();
    let out = registry()
        .call("read_file", json!({"path": "bin.dat"}), &ctx)
        .unwrap();
    assert!(
        out.summary.contains("binary file (3 bytes)"),
        "{}",
        out.summary
    );
}

#[test]
fn read_file_bad_arguments_and_links() {
    let fx = Fixture::new();
    let ctx = fx.ctx(PermissionMode::Bypass);
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "s").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret"), fx.root().join("leak")).unwrap();
    let r = registry();
    assert_invalid(
        &r.call("read_file", json!({"path": "leak"}), &ctx)
            .unwrap_err(),
        "path",
        "symbolic link",
    );
    assert_invalid(
        &r.call("read_file", json!({"path": "missing.txt"}), &ctx)
            .unwrap_err(),
        "path",
        "does not exist",
    );
    assert_invalid(
        &r.call(
            "read_file",
            json!({"path": "tracked.txt", "offset": 9}),
            &ctx,
        )
        .unwrap_err(),
        "offset",
        "past the end",
    );
    assert_invalid(
        &r.call(
            "read_file",
            json!({"path": "tracked.txt", "offset": 0}),
            &ctx,
        )
        .unwrap_err(),
        "offset",
        "",
    );
    assert_invalid(
        &r.call("read_file", json!({"path": "src"}), &ctx)
            .unwrap_err(),
        "path",
        "directory",
    );
}

#[test]
fn read_file_denied_by_a_hook() {
    let fx = Fixture::new();
    let ctx = fx.context(PermissionMode::Plan, denying_hook(&fx, "read_file"), None);
    let err = registry()
        .call("read_file", json!({"path": "tracked.txt"}), &ctx)
        .unwrap_err();
    assert_denied_by(&err, &Decider::Hook { id: "guard".into() });
}

// ---------------------------------------------------------------- write_file

#[test]
fn write_file_creates_and_replaces() {
    let fx = Fixture::new();
    let ctx = fx.ctx(PermissionMode::Bypass);
    let out = registry()
        .call(
            "write_file",
            json!({"path": "new/dir/a.txt", "content": "one\ntwo\n"}),
            &ctx,
        )
        .unwrap();
    assert_eq!(out.summary, "Created `new/dir/a.txt`: 2 lines, 8 bytes\n");
    assert_eq!(fx.read("new/dir/a.txt"), "one\ntwo\n");
    registry()
        .call(
            "write_file",
            json!({"path": "tracked.txt", "content": "x"}),
            &ctx,
        )
        .unwrap();
    assert_eq!(fx.read("tracked.txt"), "x");
}

#[test]
fn write_file_in_plan_mode_is_denied_by_policy_and_writes_nothing() {
    let fx = Fixture::new();
    let before = fx.snapshot();
    let err = registry()
        .call(
            "write_file",
            json!({"path": "tracked.txt", "content": "x"}),
            &fx.ctx(PermissionMode::Plan),
        )
        .unwrap_err();
    assert_denied_by(&err, &Decider::Policy);
    assert_eq!(fx.snapshot(), before);
}

#[test]
fn allow_edits_writes_tracked_files_and_asks_for_everything_else() {
    let fx = Fixture::new();
    let r = registry();
    // A tracked, regular workspace file: allowed without asking.
    let headless = fx.ctx(PermissionMode::AllowEdits);
    r.call(
        "write_file",
        json!({"path": "tracked.txt", "content": "edited\n"}),
        &headless,
    )
    .unwrap();
    assert_eq!(fx.read("tracked.txt"), "edited\n");
    // Untracked, new, ignored, outside the workspace: approval required; headless fails
    // closed as a policy denial.
    let before = fx.snapshot();
    for path in [
        "untracked.txt",
        "brand-new.txt",
        "ignored/needle.txt",
        "../outside.txt",
    ] {
        let err = r
            .call(
                "write_file",
                json!({"path": path, "content": "x"}),
                &headless,
            )
            .unwrap_err();
        assert_denied_by(&err, &Decider::Policy);
    }
    assert_eq!(fx.snapshot(), before);
    // With a person to ask: a "no" denies, a "yes" writes.
    let asked = Arc::new(Mutex::new(Vec::new()));
    let no = fx.context(
        PermissionMode::AllowEdits,
        HookSet::default(),
        Some(Box::new(Answer(asked.clone(), false))),
    );
    let err = r
        .call(
            "write_file",
            json!({"path": "untracked.txt", "content": "x"}),
            &no,
        )
        .unwrap_err();
    assert_denied_by(&err, &Decider::Human);
    assert_eq!(fx.read("untracked.txt"), "loose\n");
    let yes = fx.context(
        PermissionMode::AllowEdits,
        HookSet::default(),
        Some(Box::new(Answer(asked.clone(), true))),
    );
    r.call(
        "write_file",
        json!({"path": "untracked.txt", "content": "x"}),
        &yes,
    )
    .unwrap();
    assert_eq!(fx.read("untracked.txt"), "x");
    let asked = asked.lock().unwrap();
    assert_eq!(asked.len(), 2);
    assert!(
        asked[0].contains("write_file") && asked[0].contains("other_write"),
        "{asked:?}"
    );
    // A symbolic link to a tracked file is not a tracked edit.
    std::os::unix::fs::symlink("tracked.txt", fx.root().join("alias")).unwrap();
    let err = r
        .call(
            "write_file",
            json!({"path": "alias", "content": "x"}),
            &headless,
        )
        .unwrap_err();
    assert_denied_by(&err, &Decider::Policy);
}

#[test]
fn write_file_bad_arguments_write_nothing() {
    let fx = Fixture::new();
    let ctx = fx.ctx(PermissionMode::Bypass);
    std::os::unix::fs::symlink("tracked.txt", fx.root().join("alias")).unwrap();
    let before = fx.snapshot();
    let r = registry();
    assert_invalid(
        &r.call("write_file", json!({"path": "", "content": "x"}), &ctx)
            .unwrap_err(),
        "path",
        "empty",
    );
    assert_invalid(
        &r.call("write_file", json!({"path": "alias", "content": "x"}), &ctx)
            .unwrap_err(),
        "path",
        "symbolic link",
    );
    assert_invalid(
        &r.call("write_file", json!({"path": "src", "content": "x"}), &ctx)
            .unwrap_err(),
        "path",
        "directory",
    );
    assert_invalid(
        &r.call("write_file", json!({"path": "a.txt", "content": 5}), &ctx)
            .unwrap_err(),
        "content",
        "",
    );
    assert_eq!(fx.snapshot(), before);
}

// ---------------------------------------------------------------- edit_file

#[test]
fn edit_file_replaces_exactly_once_or_all() {
    let fx = Fixture::new();
    let ctx = fx.ctx(PermissionMode::AllowEdits);
    let r = registry();
    let out = r
        .call(
            "edit_file",
            json!({"path": "tracked.txt", "old_string": "beta", "new_string": "BETA"}),
            &ctx,
        )
        .unwrap();
    assert!(
        out.summary
            .starts_with("Edited `tracked.txt`: 1 replacement (first at line 2)\n"),
        "{}",
        out.summary
    );
    assert!(out.summary.contains("2:BETA\n"), "{}", out.summary);
    assert_eq!(fx.read("tracked.txt"), "alpha\nBETA\ngamma\n");
    r.call(
        "edit_file",
        json!({"path": "src/lib.rs", "old_string": "fn ", "new_string": "pub fn ", "replace_all": true}),
        &ctx,
    )
    .unwrap();
    assert_eq!(fx.read("src/lib.rs"), "pub fn one() {}\npub fn two() {}\n");
}

#[test]
fn edit_file_bad_arguments_write_nothing() {
    let fx = Fixture::new();
    let ctx = fx.ctx(PermissionMode::Bypass);
    let before = fx.snapshot();
    let r = registry();
    let call = |args: Value| r.call("edit_file", args, &ctx).unwrap_err();
    assert_invalid(
        &call(json!({"path": "src/lib.rs", "old_string": "fn ", "new_string": "x"})),
        "old_string",
        "occurs 2 times",
    );
    assert_invalid(
        &call(json!({"path": "src/lib.rs", "old_string": "nope", "new_string": "x"})),
        "old_string",
        "not found",
    );
    assert_invalid(
        &call(json!({"path": "src/lib.rs", "old_string": "", "new_string": "x"})),
        "old_string",
        "",
    );
    assert_invalid(
        &call(json!({"path": "src/lib.rs", "old_string": "one", "new_string": "one"})),
        "new_string",
        "identical",
    );
    assert_invalid(
        &call(json!({"path": "missing.rs", "old_string": "a", "new_string": "b"})),
        "path",
        "does not exist",
    );
    assert_eq!(fx.snapshot(), before);
}

#[test]
fn edit_file_in_plan_mode_is_denied_by_policy() {
    let fx = Fixture::new();
    let err = registry()
        .call(
            "edit_file",
            json!({"path": "tracked.txt", "old_string": "beta", "new_string": "x"}),
            &fx.ctx(PermissionMode::Plan),
        )
        .unwrap_err();
    assert_denied_by(&err, &Decider::Policy);
    assert_eq!(fx.read("tracked.txt"), "alpha\nbeta\ngamma\n");
}

// ---------------------------------------------------------------- apply_patch

#[test]
fn apply_patch_adds_updates_moves_and_deletes() {
    let fx = Fixture::new();
    let patch = "*** Begin Patch\n\
                 *** Add File: docs/new.md\n+# New\n\
                 *** Update File: src/lib.rs\n*** Move to: src/main.rs\n@@\n-fn two() {}\n+fn three() {}\n\
                 *** Update File: tracked.txt\n@@ alpha\n-beta\n+BETA\n\
                 *** Delete File: untracked.txt\n\
                 *** End Patch\n";
    let out = registry()
        .call(
            "apply_patch",
            json!({"input": patch}),
            &fx.ctx(PermissionMode::Bypass),
        )
        .unwrap();
    assert_eq!(
        out.summary,
        "Success. Updated the following files:\nA docs/new.md\nM src/lib.rs -> src/main.rs\nM tracked.txt\nD untracked.txt\n"
    );
    assert_eq!(fx.read("docs/new.md"), "# New\n");
    assert_eq!(fx.read("src/main.rs"), "fn one() {}\nfn three() {}\n");
    assert!(!fx.root().join("src/lib.rs").exists());
    assert!(!fx.root().join("untracked.txt").exists());
    assert_eq!(fx.read("tracked.txt"), "alpha\nBETA\ngamma\n");
}

#[test]
fn apply_patch_that_fails_anywhere_writes_nothing() {
    let fx = Fixture::new();
    let ctx = fx.ctx(PermissionMode::Bypass);
    let before = fx.snapshot();
    let r = registry();
    let cases = [
        // The second section does not apply: the first must not be written either.
        (
            "*** Begin Patch\n*** Update File: tracked.txt\n@@\n-beta\n+B\n*** Update File: src/lib.rs\n@@\n-fn nine() {}\n+x\n*** End Patch",
            "not found",
        ),
        (
            "*** Begin Patch\n*** Add File: tracked.txt\n+x\n*** End Patch",
            "already exists",
        ),
        (
            "*** Begin Patch\n*** Add File: ../escape.txt\n+x\n*** End Patch",
            "`..`",
        ),
        (
            "*** Begin Patch\n*** Add File: /tmp/abs.txt\n+x\n*** End Patch",
            "absolute",
        ),
        (
            "*** Begin Patch\n*** Delete File: missing.txt\n*** End Patch",
            "does not exist",
        ),
        (
            "*** Begin Patch\n*** Update File: tracked.txt\n*** Move to: untracked.txt\n@@\n-beta\n+b\n*** End Patch",
            "already exists",
        ),
        ("no patch here", "Begin Patch"),
        (
            "*** Begin Patch\n*** Delete File: tracked.txt\n*** Delete File: tracked.txt\n*** End Patch",
            "more than once",
        ),
    ];
    for (patch, needle) in cases {
        let err = r
            .call("apply_patch", json!({"input": patch}), &ctx)
            .unwrap_err();
        assert_invalid(&err, "input", needle);
        assert_eq!(fx.snapshot(), before, "{patch}");
    }
}

#[test]
fn apply_patch_permissions_follow_each_file() {
    let fx = Fixture::new();
    let r = registry();
    // Updating a tracked file is an allowed edit in allow_edits...
    let update = "*** Begin Patch\n*** Update File: tracked.txt\n@@\n-beta\n+B\n*** End Patch";
    r.call(
        "apply_patch",
        json!({"input": update}),
        &fx.ctx(PermissionMode::AllowEdits),
    )
    .unwrap();
    // ...adding a file is not, and plan mode denies even the tracked edit.
    let add = "*** Begin Patch\n*** Add File: fresh.txt\n+x\n*** End Patch";
    let err = r
        .call(
            "apply_patch",
            json!({"input": add}),
            &fx.ctx(PermissionMode::AllowEdits),
        )
        .unwrap_err();
    assert_denied_by(&err, &Decider::Policy);
    let err = r
        .call(
            "apply_patch",
            json!({"input": update}),
            &fx.ctx(PermissionMode::Plan),
        )
        .unwrap_err();
    assert_denied_by(&err, &Decider::Policy);
    assert!(!fx.root().join("fresh.txt").exists());
}

// ---------------------------------------------------------------- grep

#[test]
fn grep_finds_matches_honouring_gitignore_in_every_mode() {
    let fx = Fixture::new();
    std::os::unix::fs::symlink(fx.root().join("ignored"), fx.root().join("via-link")).unwrap();
    let ctx = fx.ctx(PermissionMode::Plan);
    let r = registry();
    let out = r.call("grep", json!({"pattern": "fn \\w+"}), &ctx).unwrap();
    assert_eq!(
        out.summary,
        "src/lib.rs\n1 | fn one() {}\n2 | fn two() {}\n"
    );
    let out = r
        .call(
            "grep",
            json!({"pattern": "needle", "include_hidden": true}),
            &ctx,
        )
        .unwrap();
    assert_eq!(out.summary, "No matches for `needle`.\n");
    let out = r
        .call(
            "grep",
            json!({"pattern": "A", "case_sensitive": false, "output_mode": "count"}),
            &ctx,
        )
        .unwrap();
    assert_eq!(out.summary, "tracked.txt: 3\n");
    let out = r
        .call(
            "grep",
            json!({"pattern": "fn", "glob": "*.txt", "output_mode": "files_with_matches"}),
            &ctx,
        )
        .unwrap();
    assert_eq!(out.summary, "No matches for `fn`.\n");
    let out = r
        .call("grep", json!({"pattern": "a", "max_results": 1}), &ctx)
        .unwrap();
    assert!(
        out.summary.contains("[stopped at max_results=1"),
        "{}",
        out.summary
    );
}

#[test]
fn grep_bad_arguments_and_hook_denial() {
    let fx = Fixture::new();
    let r = registry();
    let ctx = fx.ctx(PermissionMode::Bypass);
    assert_invalid(
        &r.call("grep", json!({"pattern": "("}), &ctx).unwrap_err(),
        "pattern",
        "",
    );
    assert_invalid(
        &r.call(
            "grep",
            json!({"pattern": "a", "output_mode": "lines"}),
            &ctx,
        )
        .unwrap_err(),
        "output_mode",
        "",
    );
    assert_invalid(
        &r.call("grep", json!({"pattern": "a", "path": "../.."}), &ctx)
            .unwrap_err(),
        "path",
        "outside the workspace",
    );
    let ctx = fx.context(PermissionMode::Bypass, denying_hook(&fx, "grep"), None);
    assert_denied_by(
        &r.call("grep", json!({"pattern": "a"}), &ctx).unwrap_err(),
        &Decider::Hook { id: "guard".into() },
    );
}

// ---------------------------------------------------------------- glob

#[test]
fn glob_lists_matching_paths_in_walk_order() {
    let fx = Fixture::new();
    std::os::unix::fs::symlink(fx.root().join("src"), fx.root().join("src-link")).unwrap();
    let ctx = fx.ctx(PermissionMode::Plan);
    let r = registry();
    let out = r.call("glob", json!({"pattern": "*.rs"}), &ctx).unwrap();
    assert_eq!(out.summary, "src/lib.rs\n");
    let out = r.call("glob", json!({"pattern": "*"}), &ctx).unwrap();
    assert_eq!(
        out.summary,
        "src/\nsrc/lib.rs\ntracked.txt\nuntracked.txt\n"
    );
    let out = r
        .call(
            "glob",
            json!({"pattern": "*", "include_hidden": true, "max_results": 2}),
            &ctx,
        )
        .unwrap();
    assert_eq!(
        out.summary,
        ".gitignore\nsrc/\n[stopped at max_results=2; narrow the pattern or raise it]\n"
    );
}

#[test]
fn glob_bad_arguments_and_hook_denial() {
    let fx = Fixture::new();
    let r = registry();
    let ctx = fx.ctx(PermissionMode::Bypass);
    assert_invalid(
        &r.call("glob", json!({"pattern": "a["}), &ctx).unwrap_err(),
        "pattern",
        "",
    );
    assert_invalid(
        &r.call("glob", json!({"pattern": "*", "path": "tracked.txt"}), &ctx)
            .unwrap_err(),
        "path",
        "not a directory",
    );
    let ctx = fx.context(PermissionMode::Bypass, denying_hook(&fx, "glob"), None);
    assert_denied_by(
        &r.call("glob", json!({"pattern": "*"}), &ctx).unwrap_err(),
        &Decider::Hook { id: "guard".into() },
    );
}

// ---------------------------------------------------------------- bash

#[test]
fn bash_runs_in_the_workspace_with_output_and_status() {
    let fx = Fixture::new();
    let out = registry()
        .call(
            "bash",
            json!({"command": "pwd; echo oops >&2; exit 4"}),
            &fx.ctx(PermissionMode::Bypass),
        )
        .unwrap();
    let root = fx.root();
    assert!(
        out.summary
            .starts_with(&format!("{}\noops\n[exit code 4, ", root.display())),
        "{}",
        out.summary
    );
    assert_eq!(out.structured["exit_code"], 4);
}

#[test]
fn bash_times_out_with_partial_output() {
    let fx = Fixture::new();
    let out = registry()
        .call(
            "bash",
            json!({"command": "echo before; sleep 30", "timeout_seconds": 1}),
            &fx.ctx(PermissionMode::Bypass),
        )
        .unwrap();
    assert!(
        out.summary.starts_with("before\n[timed out after 1s"),
        "{}",
        out.summary
    );
    assert_eq!(out.structured["status"], "timed_out");
}

#[test]
fn bash_is_denied_in_plan_mode_and_asks_in_allow_edits() {
    let fx = Fixture::new();
    let r = registry();
    let marker = fx.root().join("ran");
    let cmd = json!({"command": format!("touch {}", marker.display())});
    assert_denied_by(
        &r.call("bash", cmd.clone(), &fx.ctx(PermissionMode::Plan))
            .unwrap_err(),
        &Decider::Policy,
    );
    assert_denied_by(
        &r.call("bash", cmd.clone(), &fx.ctx(PermissionMode::AllowEdits))
            .unwrap_err(),
        &Decider::Policy,
    );
    let asked = Arc::new(Mutex::new(Vec::new()));
    let no = fx.context(
        PermissionMode::Supervised,
        HookSet::default(),
        Some(Box::new(Answer(asked.clone(), false))),
    );
    assert_denied_by(&r.call("bash", cmd, &no).unwrap_err(), &Decider::Human);
    assert!(!marker.exists());
    assert!(
        asked.lock().unwrap()[0].contains("(process): run `touch"),
        "{asked:?}"
    );
}

#[test]
fn bash_bad_arguments() {
    let fx = Fixture::new();
    let r = registry();
    let ctx = fx.ctx(PermissionMode::Bypass);
    assert_invalid(
        &r.call("bash", json!({"command": "  "}), &ctx).unwrap_err(),
        "command",
        "empty",
    );
    assert_invalid(
        &r.call(
            "bash",
            json!({"command": "true", "timeout_seconds": 0}),
            &ctx,
        )
        .unwrap_err(),
        "timeout_seconds",
        "",
    );
    assert_invalid(
        &r.call(
            "bash",
            json!({"command": "true", "timeout_seconds": "soon"}),
            &ctx,
        )
        .unwrap_err(),
        "timeout_seconds",
        "",
    );
}

#[test]
fn bash_never_sees_provider_keys() {
    let fx = Fixture::new();
    let vars = [
        ("PATH", "/usr/bin:/bin"),
        ("OPENAI_API_KEY", "leak-openai"),
        ("ANTHROPIC_API_KEY", "leak-anthropic"),
        ("RHO_LOCAL_API_KEY", "leak-custom"),
        ("KEEP_ME", "kept"),
    ]
    .map(|(k, v)| (k.into(), v.into()));
    let registry = ToolRegistry::builder()
        .with(Bash::with_host_environment(vars))
        .build()
        .unwrap();
    let out = registry
        .call(
            "bash",
            json!({"command": "env"}),
            &fx.ctx(PermissionMode::Bypass),
        )
        .unwrap();
    assert!(!out.summary.contains("leak-"), "{}", out.summary);
    assert!(out.summary.contains("KEEP_ME=kept"), "{}", out.summary);
}
