//! Discovery and precedence of agent definitions, with real directories.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a broken setup should panic

use std::fs;
use std::path::{Path, PathBuf};

use rho::agents::{AgentError, Catalog, CatalogSources, SourceLevel};

/// A user home, a data directory, a workspace and a workflow directory in one temp dir.
struct Layout {
    _root: tempfile::TempDir,
    home: PathBuf,
    rho_home: PathBuf,
    workspace: PathBuf,
    workflow: PathBuf,
}

impl Layout {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().canonicalize().unwrap();
        let layout = Self {
            home: base.join("home"),
            rho_home: base.join("home/.rho"),
            workspace: base.join("ws"),
            workflow: base.join("ws/.rho/workflows/check"),
            _root: root,
        };
        fs::create_dir_all(&layout.workspace).unwrap();
        layout
    }

    fn user_dir(&self) -> PathBuf {
        self.home.join(".agents/agents")
    }
    fn rho_dir(&self) -> PathBuf {
        self.rho_home.join("agents")
    }
    fn project_dir(&self) -> PathBuf {
        self.workspace.join(".agents/agents")
    }
    fn workflow_dir(&self) -> PathBuf {
        self.workflow.join("agents")
    }

    fn sources(&self, trusted: bool) -> CatalogSources {
        CatalogSources {
            user_home: Some(self.home.clone()),
            rho_home: self.rho_home.clone(),
            workspace: Some(self.workspace.clone()),
            project_trusted: trusted,
            workflow_dir: Some(self.workflow.clone()),
        }
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    fs::write(&path, text).unwrap();
    path
}

fn def(description: &str) -> String {
    format!("---\ndescription: {description}\n---\nBody for {description}.\n")
}

#[test]
fn builtins_alone_form_the_default_catalog() {
    let layout = Layout::new();
    let catalog = Catalog::discover(&layout.sources(false)).unwrap();
    let ids: Vec<&str> = catalog
        .entries()
        .map(rho::agents::CatalogEntry::id)
        .collect();
    assert_eq!(ids, ["default", "explorer", "reviewer", "worker"]);
    assert!(
        catalog
            .entries()
            .all(|e| e.level == SourceLevel::Builtin && e.path.is_none())
    );
    assert_eq!(
        catalog.get("explorer").unwrap().display_path(),
        "<builtin>/explorer.md"
    );
    assert_eq!(Catalog::builtin().unwrap(), catalog);
}

#[test]
fn later_levels_win_and_record_what_they_override() {
    let layout = Layout::new();
    let user = write(&layout.user_dir(), "explorer.md", &def("user"));
    let rho = write(&layout.rho_dir(), "explorer.md", &def("rho"));
    let project = write(&layout.project_dir(), "explorer.md", &def("project"));
    let workflow = write(&layout.workflow_dir(), "explorer.md", &def("workflow"));

    let catalog = Catalog::discover(&layout.sources(true)).unwrap();
    let e = catalog.get("explorer").unwrap();
    assert_eq!(e.level, SourceLevel::Workflow);
    assert_eq!(e.path.as_deref(), Some(workflow.as_path()));
    assert_eq!(e.definition.description, "workflow");
    assert_eq!(
        e.overrides,
        vec![
            (SourceLevel::Builtin, None),
            (SourceLevel::UserAgents, Some(user)),
            (SourceLevel::RhoHome, Some(rho)),
            (SourceLevel::Project, Some(project.clone())),
        ]
    );

    // Without the workflow level the project definition wins.
    let mut sources = layout.sources(true);
    sources.workflow_dir = None;
    let catalog = Catalog::discover(&sources).unwrap();
    assert_eq!(
        catalog.get("explorer").unwrap().path.as_deref(),
        Some(project.as_path())
    );

    // Each level alone beats the built-in.
    fs::remove_file(&project).unwrap();
    let catalog = Catalog::discover(&sources).unwrap();
    assert_eq!(catalog.get("explorer").unwrap().level, SourceLevel::RhoHome);
}

#[test]
fn untrusted_project_definitions_are_ignored() {
    let layout = Layout::new();
    write(
        &layout.project_dir(),
        "explorer.md",
        "---\ndescription: hijack\ntools: all\n---\n",
    );
    write(&layout.project_dir(), "extra.md", &def("extra"));

    let catalog = Catalog::discover(&layout.sources(false)).unwrap();
    let explorer = catalog.get("explorer").unwrap();
    assert_eq!(explorer.level, SourceLevel::Builtin);
    assert!(catalog.get("extra").is_none());
    assert_eq!(
        catalog.ignored_project_dir(),
        Some(layout.project_dir().as_path())
    );

    let catalog = Catalog::discover(&layout.sources(true)).unwrap();
    assert_eq!(catalog.get("explorer").unwrap().level, SourceLevel::Project);
    assert_eq!(catalog.get("extra").unwrap().level, SourceLevel::Project);
    assert_eq!(catalog.ignored_project_dir(), None);
}

#[test]
fn untrusted_project_errors_do_not_matter() {
    let layout = Layout::new();
    write(&layout.project_dir(), "broken.md", "not a definition");
    assert!(Catalog::discover_strict(&layout.sources(false)).is_ok());
    assert!(Catalog::discover_strict(&layout.sources(true)).is_err());
}

#[test]
fn duplicate_ids_in_one_level_name_both_files() {
    let layout = Layout::new();
    let a = write(
        &layout.rho_dir(),
        "a.md",
        "---\nid: twin\ndescription: a\n---\n",
    );
    let b = write(
        &layout.rho_dir(),
        "b.md",
        "---\nid: twin\ndescription: b\n---\n",
    );
    let err = Catalog::discover_strict(&layout.sources(false)).unwrap_err();
    match &err {
        AgentError::DuplicateId {
            id,
            level,
            first,
            second,
        } => {
            assert_eq!(id, "twin");
            assert_eq!(*level, SourceLevel::RhoHome);
            assert_eq!((first, second), (&a, &b));
        }
        other => panic!("unexpected error {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains(&a.display().to_string()) && text.contains(&b.display().to_string()));
}

#[test]
fn same_id_at_different_levels_is_fine() {
    let layout = Layout::new();
    write(&layout.user_dir(), "x.md", &def("one"));
    write(&layout.rho_dir(), "x.md", &def("two"));
    let catalog = Catalog::discover(&layout.sources(false)).unwrap();
    assert_eq!(catalog.get("x").unwrap().definition.description, "two");
    assert_eq!(catalog.len(), 5);
}

#[test]
fn only_visible_markdown_files_count() {
    let layout = Layout::new();
    let dir = layout.rho_dir();
    write(&dir, "notes.txt", "ignored");
    write(&dir, "README", "ignored");
    write(&dir, ".hidden.md", "not even parsed");
    write(
        &dir.join("nested"),
        "deep.md",
        &def("nested files are not discovered"),
    );
    fs::create_dir_all(dir.join("folder.md")).unwrap();
    write(&dir, "real.md", &def("real"));
    let catalog = Catalog::discover(&layout.sources(false)).unwrap();
    let ids: Vec<&str> = catalog
        .entries()
        .map(rho::agents::CatalogEntry::id)
        .collect();
    assert_eq!(ids, ["default", "explorer", "real", "reviewer", "worker"]);
}

#[test]
fn missing_directories_are_empty_levels() {
    let layout = Layout::new();
    let sources = CatalogSources {
        user_home: None,
        rho_home: layout.rho_home.join("does-not-exist"),
        workspace: Some(layout.workspace.join("nowhere")),
        project_trusted: true,
        workflow_dir: Some(layout.workspace.join("nowhere/either")),
    };
    assert_eq!(Catalog::discover(&sources).unwrap().len(), 4);
}

#[test]
fn invalid_files_fail_discovery_naming_file_line_and_key() {
    let layout = Layout::new();
    let bad = write(
        &layout.rho_dir(),
        "bad.md",
        "---\ndescription: d\nreasoning: loud\n---\n",
    );
    let also = write(
        &layout.user_dir(),
        "also.md",
        "---\ndescription: d\ncolour: x\n---\n",
    );
    let err = Catalog::discover_strict(&layout.sources(false)).unwrap_err();
    let AgentError::Catalog { errors } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(errors.len(), 2);
    let text = err.to_string();
    assert!(
        text.contains(&format!("{}:3: reasoning: ", bad.display())),
        "{text}"
    );
    assert!(
        text.contains(&format!("{}:3: colour: ", also.display())),
        "{text}"
    );
}

#[test]
fn one_invalid_file_is_skipped_and_the_rest_stay_usable() {
    let layout = Layout::new();
    let bad = write(
        &layout.rho_dir(),
        "bad.md",
        "---\ndescription: d\nreasoning: loud\n---\n",
    );
    write(&layout.rho_dir(), "good.md", &def("fine"));
    // A lower level's `bad` is shadowed by the broken file rather than used silently.
    write(&layout.user_dir(), "bad.md", &def("older"));
    let catalog = Catalog::discover(&layout.sources(false)).unwrap();
    assert_eq!(catalog.get("good").unwrap().definition.description, "fine");
    assert_eq!(catalog.get("default").unwrap().level, SourceLevel::Builtin);
    let problems = catalog.problems();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].id.as_deref(), Some("bad"));
    assert_eq!(problems[0].path, bad);
    assert!(problems[0].message.contains("reasoning"), "{problems:?}");
    let err = catalog.resolve("bad").unwrap_err();
    assert!(matches!(err, AgentError::Skipped { .. }), "{err:?}");
    assert!(err.to_string().contains("bad.md"), "{err}");

    // A valid definition at a higher level makes the id usable again.
    write(&layout.project_dir(), "bad.md", &def("project"));
    let catalog = Catalog::discover(&layout.sources(true)).unwrap();
    assert_eq!(
        catalog.get("bad").unwrap().definition.description,
        "project"
    );
}

#[test]
fn non_utf8_and_oversized_files_are_rejected() {
    let layout = Layout::new();
    let dir = layout.rho_dir();
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("latin1.md"), b"---\ndescription: caf\xe9\n---\n").unwrap();
    let err = Catalog::discover_strict(&layout.sources(false)).unwrap_err();
    assert!(matches!(err, AgentError::NotUtf8 { .. }), "{err:?}");
    fs::remove_file(dir.join("latin1.md")).unwrap();

    let big = format!("---\ndescription: d\n---\n{}", "x".repeat(1024 * 1024));
    write(&dir, "big.md", &big);
    let err = Catalog::discover_strict(&layout.sources(false)).unwrap_err();
    assert!(matches!(err, AgentError::TooLarge { .. }), "{err:?}");
}

#[cfg(unix)]
#[test]
fn symlinked_definitions_are_refused_in_project_and_workflow_levels() {
    use std::os::unix::fs::symlink;
    let layout = Layout::new();
    let outside = write(&layout.home.join("elsewhere"), "target.md", &def("linked"));

    // User-owned levels follow links.
    fs::create_dir_all(layout.rho_dir()).unwrap();
    symlink(&outside, layout.rho_dir().join("linked.md")).unwrap();
    let catalog = Catalog::discover(&layout.sources(false)).unwrap();
    assert_eq!(catalog.get("linked").unwrap().level, SourceLevel::RhoHome);
    fs::remove_file(layout.rho_dir().join("linked.md")).unwrap();

    for dir in [layout.project_dir(), layout.workflow_dir()] {
        fs::create_dir_all(&dir).unwrap();
        let link = dir.join("linked.md");
        symlink(&outside, &link).unwrap();
        let err = Catalog::discover_strict(&layout.sources(true)).unwrap_err();
        match &err {
            AgentError::NotRegular { path, reason } => {
                assert_eq!(path, &link);
                assert!(reason.contains("symbolic link"), "{reason}");
            }
            other => panic!("unexpected error {other:?}"),
        }
        fs::remove_file(&link).unwrap();
    }
}

#[cfg(unix)]
#[test]
fn symlinked_project_agent_directory_is_refused() {
    use std::os::unix::fs::symlink;
    let layout = Layout::new();
    let outside = layout.home.join("outside-agents");
    write(&outside, "x.md", &def("outside"));
    fs::create_dir_all(layout.workspace.join(".agents")).unwrap();
    symlink(&outside, layout.project_dir()).unwrap();
    let err = Catalog::discover_strict(&layout.sources(true)).unwrap_err();
    let AgentError::NotRegular { path, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(path, &layout.project_dir());

    // A linked `.agents` parent is refused too.
    fs::remove_file(layout.project_dir()).unwrap();
    fs::remove_dir(layout.workspace.join(".agents")).unwrap();
    let parent = layout.home.join("outside-dot-agents");
    write(&parent.join("agents"), "y.md", &def("outside"));
    symlink(&parent, layout.workspace.join(".agents")).unwrap();
    let err = Catalog::discover_strict(&layout.sources(true)).unwrap_err();
    let AgentError::NotRegular { path, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(path, &layout.workspace.join(".agents"));
}

#[cfg(unix)]
#[test]
fn a_fifo_named_like_a_definition_does_not_block_discovery() {
    let layout = Layout::new();
    fs::create_dir_all(layout.project_dir()).unwrap();
    let fifo = layout.project_dir().join("pipe.md");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let err = Catalog::discover_strict(&layout.sources(true)).unwrap_err();
    let AgentError::NotRegular { path, reason } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(path, &fifo);
    assert!(reason.contains("not a regular file"), "{reason}");
}

#[test]
fn fingerprints_do_not_depend_on_the_level_or_path() {
    let layout = Layout::new();
    write(
        &layout.user_dir(),
        "one.md",
        "---\nid: same\ndescription: a\n---\nB\n",
    );
    write(
        &layout.rho_dir(),
        "two.md",
        "---\ndescription: b\nid: same-too\n---\n\nB\n",
    );
    let catalog = Catalog::discover(&layout.sources(false)).unwrap();
    assert_eq!(
        catalog.get("same").unwrap().fingerprint,
        catalog.get("same-too").unwrap().fingerprint
    );
}

#[test]
fn resolve_names_the_available_agents() {
    let catalog = Catalog::builtin().unwrap();
    let err = catalog.resolve("nope").unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown agent `nope`; available: default, explorer, reviewer, worker"
    );
    assert_eq!(catalog.resolve("worker").unwrap().id(), "worker");
}
