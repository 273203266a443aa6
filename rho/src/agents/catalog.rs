//! Discovery: builds the agent catalog from the built-ins and the definition directories, in
//! precedence order (later wins): built-ins, `~/.agents/agents`, `$RHO_HOME/agents`, the
//! workspace's `.agents/agents` (only when the project is trusted) and, for one plan,
//! `<workflow_dir>/agents`.
//!
//! Rules at every level: only regular `*.md` files directly in the directory count; names
//! starting with `.` (editor lock and swap files) and subdirectories are skipped; a missing
//! directory is an empty level. A broken definition (unreadable, invalid, or sharing its id
//! with another file of its level) never disables the catalog: it is skipped and reported as a
//! [`CatalogProblem`] naming the file, and its id (the frontmatter `id`, else the file stem)
//! becomes unusable until a higher level defines it again, so a node naming it fails with that
//! problem rather than silently running a lower-precedence agent of the same id. (Rho 1.47
//! fails the whole catalog on one bad file; we keep the rest usable.) In the project and workflow
//! levels, which come from a checkout rather than from the user, symbolic links are refused,
//! both for the definition files and for the directories leading to them (a link could pull in
//! files from outside the workspace); the user-owned levels follow links.
//!
//! Invariant: an untrusted project contributes nothing, and every entry records the level and
//! file it came from.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use super::builtin::BUILTIN_DEFINITIONS;
use super::definition::AgentDefinition;
use super::{AgentError, MAX_DEFINITION_BYTES, fingerprint, load_definition_text};
use crate::paths::RhoHome;

/// Where a catalog entry came from, in increasing precedence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SourceLevel {
    /// Compiled into `rho`.
    Builtin,
    /// `~/.agents/agents` (shared with other agent tools; read-only to rho).
    UserAgents,
    /// `$RHO_HOME/agents` (`~/.rho/agents` by default).
    RhoHome,
    /// The workspace's `.agents/agents`, when the project is trusted.
    Project,
    /// `<workflow_dir>/agents` next to a workflow's entry file, for that plan only.
    Workflow,
}

impl SourceLevel {
    /// A short stable name (`rho agents list` prints it).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Builtin => "builtin",
            Self::UserAgents => "user",
            Self::RhoHome => "rho-home",
            Self::Project => "project",
            Self::Workflow => "workflow",
        }
    }

    /// Whether the level's files come from a checkout (links refused).
    fn refuses_links(self) -> bool {
        matches!(self, Self::Project | Self::Workflow)
    }
}

impl fmt::Display for SourceLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The inputs of discovery, computed by the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogSources {
    /// The user's home (for `~/.agents/agents`); `None` skips that level.
    pub user_home: Option<PathBuf>,
    /// The data directory (`$RHO_HOME`).
    pub rho_home: PathBuf,
    /// The canonical workspace path; `None` skips the project level.
    pub workspace: Option<PathBuf>,
    /// Whether project definitions may be loaded (from `$RHO_HOME/trust.json` or
    /// `RHO_TRUST_PROJECT_AGENTS=1`, decided by the host).
    pub project_trusted: bool,
    /// The directory of a workflow's entry file, when discovering for a plan.
    pub workflow_dir: Option<PathBuf>,
}

impl CatalogSources {
    /// Sources for `home` and an optional workspace, without a workflow level.
    pub fn new(home: &RhoHome, workspace: Option<PathBuf>, project_trusted: bool) -> Self {
        Self {
            user_home: home.user_home().map(Path::to_path_buf),
            rho_home: home.root().to_path_buf(),
            workspace,
            project_trusted,
            workflow_dir: None,
        }
    }

    /// Adds the workflow level `<dir>/agents`.
    #[must_use]
    pub fn with_workflow_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.workflow_dir = Some(dir.into());
        self
    }

    /// The directory levels in precedence order (built-ins excluded), with the path components
    /// that must not be symbolic links for levels that refuse them.
    fn directory_levels(&self) -> Vec<(SourceLevel, PathBuf, Vec<PathBuf>)> {
        let mut levels = Vec::new();
        if let Some(home) = &self.user_home {
            levels.push((
                SourceLevel::UserAgents,
                home.join(".agents").join("agents"),
                vec![],
            ));
        }
        levels.push((SourceLevel::RhoHome, self.rho_home.join("agents"), vec![]));
        if let (Some(ws), true) = (&self.workspace, self.project_trusted) {
            let dot = ws.join(".agents");
            let dir = dot.join("agents");
            levels.push((SourceLevel::Project, dir.clone(), vec![dot, dir]));
        }
        if let Some(wf) = &self.workflow_dir {
            let dir = wf.join("agents");
            levels.push((SourceLevel::Workflow, dir.clone(), vec![dir]));
        }
        levels
    }
}

/// One agent of the catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogEntry {
    /// The validated definition.
    pub definition: AgentDefinition,
    /// The level it came from.
    pub level: SourceLevel,
    /// Its file; `None` for built-ins.
    pub path: Option<PathBuf>,
    /// The v2 semantic fingerprint (`sha256:...`).
    pub fingerprint: String,
    /// Lower-precedence definitions with the same id that this one replaces.
    pub overrides: Vec<(SourceLevel, Option<PathBuf>)>,
}

impl CatalogEntry {
    /// The agent id.
    pub fn id(&self) -> &str {
        &self.definition.id
    }

    /// The source path for display: the file, or `<builtin>/<id>.md`.
    pub fn display_path(&self) -> String {
        match &self.path {
            Some(p) => p.display().to_string(),
            None => format!("<builtin>/{}.md", self.definition.id),
        }
    }
}

/// A definition (or a definition directory) that discovery skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogProblem {
    /// The level it belongs to.
    pub level: SourceLevel,
    /// The agent id it would have defined, when one could be told (a directory problem has
    /// none).
    pub id: Option<String>,
    /// The file or directory at fault.
    pub path: PathBuf,
    /// What is wrong (every diagnostic of the file).
    pub message: String,
}

/// The discovered agents, by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Catalog {
    entries: BTreeMap<String, CatalogEntry>,
    /// Ids whose winning definition is broken, with the problem.
    skipped: BTreeMap<String, (SourceLevel, String)>,
    problems: Vec<CatalogProblem>,
    ignored_project_dir: Option<PathBuf>,
}

impl Catalog {
    /// The built-in agents alone.
    pub fn builtin() -> Result<Self, AgentError> {
        let mut catalog = Self::empty();
        let mut errors = Vec::new();
        catalog.add_builtins(&mut errors);
        finish(catalog, errors)
    }

    /// Discovers every level of `sources`, later levels replacing earlier ones by id.
    /// Only a broken built-in (a bug in rho) fails it; broken files are skipped and listed in
    /// [`Catalog::problems`].
    pub fn discover(sources: &CatalogSources) -> Result<Self, AgentError> {
        Self::discover_collecting(sources).map(|(catalog, _)| catalog)
    }

    /// [`Catalog::discover`], failing on the first level's problems instead of skipping: every
    /// skipped file's error, as discovery met them (one error, or [`AgentError::Catalog`]).
    pub fn discover_strict(sources: &CatalogSources) -> Result<Self, AgentError> {
        let (catalog, errors) = Self::discover_collecting(sources)?;
        finish(catalog, errors)
    }

    fn discover_collecting(
        sources: &CatalogSources,
    ) -> Result<(Self, Vec<AgentError>), AgentError> {
        let mut catalog = Self::empty();
        let mut errors = Vec::new();
        catalog.add_builtins(&mut errors);
        if !errors.is_empty() {
            // A built-in that does not load is a bug in rho, never skipped.
            return Err(AgentError::Catalog { errors });
        }
        let mut skipped = Vec::new();
        for (level, dir, no_links) in sources.directory_levels() {
            let (entries, problems) = read_level(level, &dir, &no_links);
            for (problem, error) in problems {
                catalog.skip(problem);
                skipped.extend(error);
            }
            for entry in entries {
                catalog.insert(entry);
            }
        }
        if let (Some(ws), false) = (&sources.workspace, sources.project_trusted) {
            let dir = ws.join(".agents").join("agents");
            if dir.is_dir() {
                tracing::info!(dir = %dir.display(), "project agent definitions ignored: project not trusted");
                catalog.ignored_project_dir = Some(dir);
            }
        }
        Ok((catalog, skipped))
    }

    fn empty() -> Self {
        Self {
            entries: BTreeMap::new(),
            skipped: BTreeMap::new(),
            problems: Vec::new(),
            ignored_project_dir: None,
        }
    }

    /// Records a skipped definition; its id shadows lower levels' definitions of that id.
    fn skip(&mut self, problem: CatalogProblem) {
        if let Some(id) = &problem.id {
            if self
                .entries
                .get(id)
                .is_some_and(|e| e.level <= problem.level)
            {
                self.entries.remove(id);
            }
            self.skipped
                .insert(id.clone(), (problem.level, problem.message.clone()));
        }
        self.problems.push(problem);
    }

    fn add_builtins(&mut self, errors: &mut Vec<AgentError>) {
        for (name, text) in BUILTIN_DEFINITIONS {
            let file = Path::new("<builtin>").join(name);
            match load_definition_text(&file, text)
                .and_then(|d| entry(d, SourceLevel::Builtin, None))
            {
                Ok(e) => self.insert(e),
                Err(e) => errors.push(e),
            }
        }
    }

    fn insert(&mut self, mut entry: CatalogEntry) {
        match self.skipped.get(entry.id()) {
            // A broken definition at this level or above keeps the id unusable.
            Some((level, _)) if *level >= entry.level => return,
            Some(_) => {
                self.skipped.remove(entry.id());
            }
            None => {}
        }
        if let Some(previous) = self.entries.remove(entry.id()) {
            entry.overrides = previous.overrides;
            entry.overrides.push((previous.level, previous.path));
        }
        self.entries.insert(entry.definition.id.clone(), entry);
    }

    /// The entry for `id`.
    pub fn get(&self, id: &str) -> Option<&CatalogEntry> {
        self.entries.get(id)
    }

    /// The entry for `id`, or an error: the problem of its skipped definition, or the list
    /// of available ids.
    pub fn resolve(&self, id: &str) -> Result<&CatalogEntry, AgentError> {
        if let Some(entry) = self.get(id) {
            return Ok(entry);
        }
        if let Some((_, problem)) = self.skipped.get(id) {
            return Err(AgentError::Skipped {
                id: id.to_owned(),
                problem: problem.clone(),
            });
        }
        Err(AgentError::UnknownAgent {
            id: id.to_owned(),
            available: self.entries.keys().cloned().collect(),
        })
    }

    /// Every definition or directory discovery skipped, in discovery order.
    pub fn problems(&self) -> &[CatalogProblem] {
        &self.problems
    }

    /// Every entry, by id.
    pub fn entries(&self) -> impl Iterator<Item = &CatalogEntry> {
        self.entries.values()
    }

    /// The number of agents.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the catalog is empty (never, with built-ins).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The project `.agents/agents` directory that exists but was skipped because the project
    /// is not trusted.
    pub fn ignored_project_dir(&self) -> Option<&Path> {
        self.ignored_project_dir.as_deref()
    }
}

fn finish(catalog: Catalog, mut errors: Vec<AgentError>) -> Result<Catalog, AgentError> {
    match errors.len() {
        0 => Ok(catalog),
        1 => Err(errors.remove(0)),
        _ => Err(AgentError::Catalog { errors }),
    }
}

fn entry(
    definition: AgentDefinition,
    level: SourceLevel,
    path: Option<PathBuf>,
) -> Result<CatalogEntry, AgentError> {
    let fingerprint = fingerprint(&definition)?;
    Ok(CatalogEntry {
        definition,
        level,
        path,
        fingerprint,
        overrides: Vec::new(),
    })
}

/// Reads one level: its valid entries, and a problem for each file (or the directory)
/// that could not be used.
fn read_level(
    level: SourceLevel,
    dir: &Path,
    no_links: &[PathBuf],
) -> (Vec<CatalogEntry>, Vec<(CatalogProblem, Option<AgentError>)>) {
    let mut problems = Vec::new();
    let dir_problem = |path: &Path, error: AgentError| {
        (
            CatalogProblem {
                level,
                id: None,
                path: path.to_owned(),
                message: crate::workflow::plan::error_chain(&error),
            },
            Some(error),
        )
    };
    for component in no_links {
        match fs::symlink_metadata(component) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let error = AgentError::NotRegular {
                    path: component.clone(),
                    reason: format!(
                        "is a symbolic link; {level} agent directories must be real directories"
                    ),
                };
                return (Vec::new(), vec![dir_problem(component, error)]);
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return (Vec::new(), Vec::new());
            }
            Err(source) => {
                let error = AgentError::Read {
                    path: component.clone(),
                    source,
                };
                return (Vec::new(), vec![dir_problem(component, error)]);
            }
        }
    }
    let listing = match fs::read_dir(dir) {
        Ok(listing) => listing,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (Vec::new(), Vec::new()),
        Err(source) => {
            let error = AgentError::Read {
                path: dir.to_owned(),
                source,
            };
            return (Vec::new(), vec![dir_problem(dir, error)]);
        }
    };
    let mut files = Vec::new();
    for item in listing {
        match item {
            Ok(item) => {
                let name = item.file_name();
                let name = name.to_string_lossy();
                if name.starts_with('.') || !name.ends_with(".md") {
                    continue;
                }
                files.push(item.path());
            }
            Err(source) => {
                let error = AgentError::Read {
                    path: dir.to_owned(),
                    source,
                };
                problems.push(dir_problem(dir, error));
            }
        }
    }
    files.sort();

    let mut by_id: BTreeMap<String, CatalogEntry> = BTreeMap::new();
    let mut duplicates: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for file in files {
        let follow = !level.refuses_links();
        let file_problem = |error: AgentError, text: Option<&str>| {
            (
                CatalogProblem {
                    level,
                    id: Some(intended_id(&file, text)),
                    path: file.clone(),
                    message: crate::workflow::plan::error_chain(&error),
                },
                Some(error),
            )
        };
        match fs::symlink_metadata(&file) {
            Ok(meta) if meta.is_dir() => continue,
            Ok(meta) if meta.file_type().is_symlink() && !follow => {
                let error = AgentError::NotRegular {
                    path: file.clone(),
                    reason: format!(
                        "is a symbolic link; {level} agent definitions must be regular files"
                    ),
                };
                problems.push(file_problem(error, None));
                continue;
            }
            Ok(meta)
                if meta.file_type().is_symlink()
                    && fs::metadata(&file).is_ok_and(|m| m.is_dir()) =>
            {
                continue;
            }
            Ok(_) => {}
            Err(source) => {
                let error = AgentError::Read {
                    path: file.clone(),
                    source,
                };
                problems.push(file_problem(error, None));
                continue;
            }
        }
        let text = match read_definition(&file, follow) {
            Ok(text) => text,
            Err(error) => {
                problems.push(file_problem(error, None));
                continue;
            }
        };
        let loaded = load_definition_text(&file, &text)
            .and_then(|def| entry(def, level, Some(file.clone())));
        match loaded {
            Ok(e) => {
                if let Some(first) = by_id.get(e.id()) {
                    duplicates
                        .entry(e.definition.id.clone())
                        .or_insert_with(|| vec![first.path.clone().unwrap_or_default()])
                        .push(file.clone());
                } else {
                    by_id.insert(e.definition.id.clone(), e);
                }
            }
            Err(error) => problems.push(file_problem(error, Some(&text))),
        }
    }
    // Two files defining one id at one level: neither is used, since neither can be said to
    // be the one meant.
    for (id, files) in duplicates {
        by_id.remove(&id);
        let error = AgentError::DuplicateId {
            id: id.clone(),
            level,
            first: files[0].clone(),
            second: files[1].clone(),
        };
        let message = crate::workflow::plan::error_chain(&error);
        let mut error = Some(error);
        for file in files {
            let problem = CatalogProblem {
                level,
                id: Some(id.clone()),
                path: file,
                message: message.clone(),
            };
            // One error for the pair, as strict discovery reports it.
            problems.push((problem, error.take()));
        }
    }
    (by_id.into_values().collect(), problems)
}

/// The id a broken file meant to define: its frontmatter `id` when that line reads, else the
/// file stem (as for a valid file without `id`).
fn intended_id(file: &Path, text: Option<&str>) -> String {
    let declared = text
        .and_then(|t| super::frontmatter::parse_recovering(t).ok())
        .and_then(|parsed| {
            parsed.frontmatter.get("id").and_then(|f| match &f.value {
                super::frontmatter::Value::Scalar(s) if !s.text.is_empty() => Some(s.text.clone()),
                _ => None,
            })
        });
    declared.unwrap_or_else(|| {
        file.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    })
}

/// Reads a definition file as UTF-8, at most [`MAX_DEFINITION_BYTES`]. Without `follow`, a
/// symbolic link is refused at open time (no check-then-open race). Anything but a regular
/// file is refused, so a FIFO cannot block discovery.
pub(crate) fn read_definition(file: &Path, follow: bool) -> Result<String, AgentError> {
    let mut options = fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC;
        if !follow {
            flags |= libc::O_NOFOLLOW;
        }
        options.custom_flags(flags);
    }
    let handle = options.open(file).map_err(|source| {
        if !follow && source.raw_os_error() == Some(libc::ELOOP) {
            AgentError::NotRegular {
                path: file.to_owned(),
                reason: "is a symbolic link; agent definitions here must be regular files".into(),
            }
        } else {
            AgentError::Read {
                path: file.to_owned(),
                source,
            }
        }
    })?;
    let meta = handle.metadata().map_err(|source| AgentError::Read {
        path: file.to_owned(),
        source,
    })?;
    if !meta.is_file() {
        return Err(AgentError::NotRegular {
            path: file.to_owned(),
            reason: "is not a regular file".into(),
        });
    }
    let mut bytes = Vec::new();
    handle
        .take(MAX_DEFINITION_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| AgentError::Read {
            path: file.to_owned(),
            source,
        })?;
    if bytes.len() as u64 > MAX_DEFINITION_BYTES {
        return Err(AgentError::TooLarge {
            file: file.to_owned(),
            limit: MAX_DEFINITION_BYTES,
        });
    }
    String::from_utf8(bytes).map_err(|_| AgentError::NotUtf8 {
        file: file.to_owned(),
    })
}
