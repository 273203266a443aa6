//! Discovery: builds the agent catalog from the built-ins and the definition directories, in
//! precedence order (later wins): built-ins, `~/.agents/agents`, `$RHO_HOME/agents`, the
//! workspace's `.agents/agents` (only when the project is trusted) and, for one plan,
//! `<workflow_dir>/agents`.
//!
//! Rules at every level: only regular `*.md` files directly in the directory count; names
//! starting with `.` (editor lock and swap files) and subdirectories are skipped; a missing
//! directory is an empty level; an unreadable or invalid file fails discovery, naming the file;
//! two files with one id at one level fail discovery, naming both. In the project and workflow
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

/// The discovered agents, by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Catalog {
    entries: BTreeMap<String, CatalogEntry>,
    ignored_project_dir: Option<PathBuf>,
}

impl Catalog {
    /// The built-in agents alone.
    pub fn builtin() -> Result<Self, AgentError> {
        let mut catalog = Self {
            entries: BTreeMap::new(),
            ignored_project_dir: None,
        };
        let mut errors = Vec::new();
        catalog.add_builtins(&mut errors);
        finish(catalog, errors)
    }

    /// Discovers every level of `sources`, later levels replacing earlier ones by id.
    pub fn discover(sources: &CatalogSources) -> Result<Self, AgentError> {
        let mut catalog = Self {
            entries: BTreeMap::new(),
            ignored_project_dir: None,
        };
        let mut errors = Vec::new();
        catalog.add_builtins(&mut errors);
        for (level, dir, no_links) in sources.directory_levels() {
            for entry in read_level(level, &dir, &no_links, &mut errors) {
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
        finish(catalog, errors)
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

    /// The entry for `id`, or an error listing the available ids.
    pub fn resolve(&self, id: &str) -> Result<&CatalogEntry, AgentError> {
        self.get(id).ok_or_else(|| AgentError::UnknownAgent {
            id: id.to_owned(),
            available: self.entries.keys().cloned().collect(),
        })
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

/// Reads one level; problems are pushed to `errors` and the level's valid entries returned.
fn read_level(
    level: SourceLevel,
    dir: &Path,
    no_links: &[PathBuf],
    errors: &mut Vec<AgentError>,
) -> Vec<CatalogEntry> {
    for component in no_links {
        match fs::symlink_metadata(component) {
            Ok(meta) if meta.file_type().is_symlink() => {
                errors.push(AgentError::NotRegular {
                    path: component.clone(),
                    reason: format!(
                        "is a symbolic link; {level} agent directories must be real directories"
                    ),
                });
                return Vec::new();
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
            Err(source) => {
                errors.push(AgentError::Read {
                    path: component.clone(),
                    source,
                });
                return Vec::new();
            }
        }
    }
    let listing = match fs::read_dir(dir) {
        Ok(listing) => listing,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(source) => {
            errors.push(AgentError::Read {
                path: dir.to_owned(),
                source,
            });
            return Vec::new();
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
            Err(source) => errors.push(AgentError::Read {
                path: dir.to_owned(),
                source,
            }),
        }
    }
    files.sort();

    let mut by_id: BTreeMap<String, CatalogEntry> = BTreeMap::new();
    for file in files {
        let follow = !level.refuses_links();
        match fs::symlink_metadata(&file) {
            Ok(meta) if meta.is_dir() => continue,
            Ok(meta) if meta.file_type().is_symlink() && !follow => {
                errors.push(AgentError::NotRegular {
                    path: file,
                    reason: format!(
                        "is a symbolic link; {level} agent definitions must be regular files"
                    ),
                });
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
                errors.push(AgentError::Read { path: file, source });
                continue;
            }
        }
        let loaded = read_definition(&file, follow)
            .and_then(|text| load_definition_text(&file, &text))
            .and_then(|def| entry(def, level, Some(file.clone())));
        match loaded {
            Ok(e) => {
                if let Some(first) = by_id.get(e.id()) {
                    errors.push(AgentError::DuplicateId {
                        id: e.definition.id.clone(),
                        level,
                        first: first.path.clone().unwrap_or_default(),
                        second: file,
                    });
                } else {
                    by_id.insert(e.definition.id.clone(), e);
                }
            }
            Err(e) => errors.push(e),
        }
    }
    by_id.into_values().collect()
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
