//! The module service: answers the worker's `load()` requests with module text, and keeps
//! the manifest of every source served (entry included).
//!
//! Label rules (language.md): `//` prefix, `/` separators, `.star` suffix, no empty part, no
//! `.` or `..`, no backslash, no colon, not absolute. Files are opened one component at a
//! time with `O_NOFOLLOW` from the workspace directory and with `O_NONBLOCK` (a FIFO is
//! refused, never waited on), must be regular UTF-8 files, and
//! count against the `source_bytes`, `module_count` and `module_depth` budgets.
//!
//! Invariant: the host never parses Starlark. It only reads bytes, checks labels and budgets,
//! and hands text to the sandboxed worker; every byte it hands over is in the manifest.

use std::collections::{BTreeMap, HashMap};
use std::io::Read as _;
use std::os::fd::{AsFd as _, BorrowedFd};
use std::path::Path;

use rho_ipc::budget::Budgets;
use rho_ipc::evaluated::SourceSpan;
use rho_ipc::message::{Diagnostic, ModuleRequest, ModuleResponse};
use rho_ipc::program::SourceEntry;

use crate::workflow::identity::{FileFacts, IdentityError, open_regular_in};

/// A source served to the planner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedSource {
    /// Label, size and digest.
    pub entry: SourceEntry,
    /// The text.
    pub text: String,
}

/// Why a label or module file was refused; becomes a diagnostic for the worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Stable code (`module_label`, `module_symlink`, `module_missing`, `module_file`,
    /// `import_cycle`, `budget`).
    pub code: &'static str,
    /// The message.
    pub message: String,
    /// The budget overrun, for `budget`.
    pub budget: Option<rho_ipc::budget::BudgetOverrun>,
}

impl Refusal {
    fn new(code: &'static str, message: String) -> Self {
        Self {
            code,
            message,
            budget: None,
        }
    }

    /// As a diagnostic at `span`.
    pub fn into_diagnostic(self, span: Option<SourceSpan>) -> Diagnostic {
        Diagnostic {
            code: self.code.to_owned(),
            message: self.message,
            span,
            budget: self.budget,
        }
    }
}

/// Checks a label against the rules and returns the workspace-relative path it names.
// Labels are case-sensitive by definition: `.STAR` is not a module file.
#[allow(clippy::case_sensitive_file_extension_comparisons)]
pub fn label_path(label: &str) -> Result<&str, Refusal> {
    let bad = |why: &str| {
        Refusal::new(
            "module_label",
            format!("invalid module label `{label}`: {why}"),
        )
    };
    if label.contains('\\') {
        return Err(bad("backslashes are not allowed; use `/`"));
    }
    if label.contains(':') {
        return Err(bad(
            "colons (and platform prefixes such as `C:`) are not allowed",
        ));
    }
    if label.contains('\0') {
        return Err(bad("NUL bytes are not allowed"));
    }
    let Some(rel) = label.strip_prefix("//") else {
        if label.starts_with('/') {
            return Err(bad(
                "absolute paths are not allowed; labels start with `//` (the workspace root)",
            ));
        }
        return Err(bad("labels start with `//` (the workspace root)"));
    };
    if rel.starts_with('/') {
        return Err(bad("absolute paths are not allowed after `//`"));
    }
    for part in rel.split('/') {
        match part {
            "" => return Err(bad("empty path parts are not allowed")),
            "." => return Err(bad("`.` parts are not allowed")),
            ".." => {
                return Err(bad(
                    "`..` parts are not allowed: a label cannot leave the workspace",
                ));
            }
            _ => {}
        }
    }
    if !rel.ends_with(".star") || rel.rsplit('/').next() == Some(".star") {
        return Err(bad("module files end in `.star`"));
    }
    Ok(rel)
}

/// Serves modules from one workspace and records what it served.
#[derive(Debug)]
pub struct ModuleService<'a> {
    workspace: BorrowedFd<'a>,
    budgets: &'a Budgets,
    served: BTreeMap<String, ServedSource>,
    /// For each served label: who loaded it first and its load depth (the entry is 0).
    parents: HashMap<String, (Option<String>, u64)>,
    total_bytes: u64,
    requests: u64,
}

impl<'a> ModuleService<'a> {
    /// A service for the workspace directory `workspace`.
    pub fn new(workspace: BorrowedFd<'a>, budgets: &'a Budgets) -> Self {
        Self {
            workspace,
            budgets,
            served: BTreeMap::new(),
            parents: HashMap::new(),
            total_bytes: 0,
            requests: 0,
        }
    }

    /// Reads the entry module (its label already computed from its canonical path).
    pub fn load_entry(&mut self, label: &str) -> Result<ServedSource, Refusal> {
        let rel = label_path(label)?;
        let source = self.read(label, rel)?;
        self.parents.insert(label.to_owned(), (None, 0));
        self.served.insert(label.to_owned(), source.clone());
        Ok(source)
    }

    /// Answers one module request.
    pub fn answer(&mut self, request: &ModuleRequest) -> ModuleResponse {
        match self.serve(request) {
            Ok(source) => ModuleResponse::Source {
                label: request.label.clone(),
                source,
            },
            Err(refusal) => ModuleResponse::Refused {
                label: request.label.clone(),
                diagnostic: refusal.into_diagnostic(request.span.clone()),
            },
        }
    }

    fn serve(&mut self, request: &ModuleRequest) -> Result<String, Refusal> {
        self.requests += 1;
        let label = request.label.as_str();
        let rel = label_path(label)?;
        let Some((_, parent_depth)) = self.parents.get(&request.from).cloned() else {
            return Err(Refusal::new(
                "module_protocol",
                format!(
                    "module `{label}` was requested from `{}`, which was never served",
                    request.from
                ),
            ));
        };
        if let Some(cycle) = self.cycle(&request.from, label) {
            return Err(Refusal::new(
                "import_cycle",
                format!("import cycle: {}", cycle.join(" -> ")),
            ));
        }
        if let Some(existing) = self.served.get(label) {
            // Loaded before through another path (a diamond): same text, counted once.
            return Ok(existing.text.clone());
        }
        let depth = parent_depth + 1;
        if let Err(overrun) = self.budgets.check("module_depth", depth) {
            return Err(Refusal {
                code: "budget",
                message: overrun.to_string(),
                budget: Some(overrun),
            });
        }
        let count = self.served.len() as u64 + 1;
        if let Err(overrun) = self.budgets.check("module_count", count) {
            return Err(Refusal {
                code: "budget",
                message: overrun.to_string(),
                budget: Some(overrun),
            });
        }
        let source = self.read(label, rel)?;
        self.parents
            .insert(label.to_owned(), (Some(request.from.clone()), depth));
        let text = source.text.clone();
        self.served.insert(label.to_owned(), source);
        Ok(text)
    }

    /// When `label` is `from` or one of its loaders, the chain `label -> ... -> from -> label`.
    fn cycle(&self, from: &str, label: &str) -> Option<Vec<String>> {
        let mut chain = vec![from.to_owned()];
        let mut current = from.to_owned();
        while current != label {
            let (parent, _) = self.parents.get(&current)?;
            current = parent.clone()?;
            chain.push(current.clone());
        }
        chain.reverse();
        chain.push(label.to_owned());
        Some(chain)
    }

    fn read(&mut self, label: &str, rel: &str) -> Result<ServedSource, Refusal> {
        let fd = open_regular_in(self.workspace, rel).map_err(|e| match e {
            IdentityError::Symlink { component } => Refusal::new(
                "module_symlink",
                format!("module `{label}`: path component `{component}` is a symbolic link; module paths may not contain links"),
            ),
            IdentityError::NotFound { component } => Refusal::new(
                "module_missing",
                if component == rel {
                    format!("module `{label}` not found: no file `{rel}` in the workspace")
                } else {
                    format!("module `{label}` not found: `{component}` does not exist in the workspace")
                },
            ),
            IdentityError::NotRegular { kind, .. } => Refusal::new(
                "module_file",
                format!("module `{label}`: `{rel}` is {kind}, not a regular file"),
            ),
            other => Refusal::new("module_file", format!("module `{label}`: {other}")),
        })?;
        let facts = FileFacts::of(fd.as_fd()).map_err(|e| {
            Refusal::new(
                "module_file",
                format!("module `{label}`: cannot inspect: {e}"),
            )
        })?;
        if !facts.is_regular() {
            return Err(Refusal::new(
                "module_file",
                format!("module `{label}` is not a regular file"),
            ));
        }
        let remaining = self.budgets.source_bytes.saturating_sub(self.total_bytes);
        if facts.size > remaining {
            let measured = self.total_bytes.saturating_add(facts.size);
            let overrun = self.budgets.check("source_bytes", measured).err();
            return Err(Refusal {
                code: "budget",
                message: overrun
                    .as_ref()
                    .map_or_else(String::new, ToString::to_string),
                budget: overrun,
            });
        }
        let mut bytes = Vec::with_capacity(usize::try_from(facts.size).unwrap_or(0));
        std::fs::File::from(fd)
            .take(remaining.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| {
                Refusal::new("module_file", format!("module `{label}`: cannot read: {e}"))
            })?;
        let size = bytes.len() as u64;
        if size > remaining {
            let overrun = self
                .budgets
                .check("source_bytes", self.total_bytes + size)
                .err();
            return Err(Refusal {
                code: "budget",
                message: overrun
                    .as_ref()
                    .map_or_else(String::new, ToString::to_string),
                budget: overrun,
            });
        }
        let digest = rho_ipc::digest::sha256_tagged(&bytes);
        let text = String::from_utf8(bytes).map_err(|e| {
            Refusal::new(
                "module_file",
                format!(
                    "module `{label}` is not UTF-8 text (invalid byte at offset {})",
                    e.utf8_error().valid_up_to()
                ),
            )
        })?;
        self.total_bytes += size;
        Ok(ServedSource {
            entry: SourceEntry {
                label: label.to_owned(),
                size,
                digest,
            },
            text,
        })
    }

    /// Number of module requests answered (served or refused).
    pub fn requests(&self) -> u64 {
        self.requests
    }

    /// Every source served, sorted by label.
    pub fn into_sources(self) -> Vec<ServedSource> {
        self.served.into_values().collect()
    }
}

/// The label of the entry file at `canonical` inside the canonical `workspace`, or `None`
/// when it lies outside.
pub fn entry_label(canonical: &Path, workspace: &Path) -> Option<String> {
    let rel = crate::workflow::identity::workspace_relative(canonical, workspace)?;
    (rel != ".").then(|| format!("//{rel}"))
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd as _;

    use super::*;
    use crate::workflow::identity::open_dir;

    #[test]
    fn label_rules() {
        assert_eq!(label_path("//a/b.star").unwrap(), "a/b.star");
        assert_eq!(
            label_path("//.rho/workflows/c.star").unwrap(),
            ".rho/workflows/c.star"
        );
        for (label, needle) in [
            ("//a/../b.star", "`..`"),
            ("/etc/x.star", "absolute"),
            ("///etc/x.star", "absolute"),
            ("//a//b.star", "empty"),
            ("//./b.star", "`.`"),
            ("//a\\b.star", "backslash"),
            ("//C:/b.star", "colon"),
            ("a/b.star", "start with `//`"),
            ("//a/b.py", "`.star`"),
            ("//a/.star", "`.star`"),
        ] {
            let err = label_path(label).unwrap_err();
            assert_eq!(err.code, "module_label");
            assert!(err.message.contains(needle), "{label}: {}", err.message);
        }
    }

    fn request(label: &str, from: &str) -> ModuleRequest {
        ModuleRequest {
            label: label.to_owned(),
            from: from.to_owned(),
            span: None,
        }
    }

    #[test]
    fn serves_records_and_refuses() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("main.star"), "x").unwrap();
        std::fs::write(dir.path().join("a.star"), "aa").unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::fs::write(dir.path().join("real/b.star"), "b").unwrap();
        std::os::unix::fs::symlink("real", dir.path().join("link")).unwrap();
        let fd = open_dir(dir.path()).unwrap();
        let budgets = Budgets::default();
        let mut service = ModuleService::new(fd.as_fd(), &budgets);
        service.load_entry("//main.star").unwrap();
        assert!(
            matches!(service.answer(&request("//a.star", "//main.star")), ModuleResponse::Source { source, .. } if source == "aa")
        );
        let ModuleResponse::Refused { diagnostic, .. } =
            service.answer(&request("//link/b.star", "//a.star"))
        else {
            panic!()
        };
        assert_eq!(diagnostic.code, "module_symlink");
        assert!(
            diagnostic.message.contains("`link`"),
            "{}",
            diagnostic.message
        );
        let ModuleResponse::Refused { diagnostic, .. } =
            service.answer(&request("//nope.star", "//a.star"))
        else {
            panic!()
        };
        assert_eq!(diagnostic.code, "module_missing");
        let ModuleResponse::Refused { diagnostic, .. } =
            service.answer(&request("//main.star", "//a.star"))
        else {
            panic!()
        };
        assert_eq!(diagnostic.code, "import_cycle");
        assert_eq!(
            diagnostic.message,
            "import cycle: //main.star -> //a.star -> //main.star"
        );
        let sources = service.into_sources();
        let labels: Vec<_> = sources.iter().map(|s| s.entry.label.as_str()).collect();
        assert_eq!(labels, ["//a.star", "//main.star"]);
        assert_eq!(sources[0].entry.size, 2);
        assert!(sources[0].entry.digest.starts_with("sha256:"));
    }

    #[test]
    fn budgets_bound_modules() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["m.star", "a.star", "b.star"] {
            std::fs::write(dir.path().join(name), "0123456789").unwrap();
        }
        let fd = open_dir(dir.path()).unwrap();
        let budgets = Budgets {
            module_count: 2,
            ..Budgets::default()
        };
        let mut service = ModuleService::new(fd.as_fd(), &budgets);
        service.load_entry("//m.star").unwrap();
        assert!(matches!(
            service.answer(&request("//a.star", "//m.star")),
            ModuleResponse::Source { .. }
        ));
        let ModuleResponse::Refused { diagnostic, .. } =
            service.answer(&request("//b.star", "//m.star"))
        else {
            panic!()
        };
        assert_eq!(
            diagnostic.message,
            "planning budget module_count exceeded: accepted limit 2, requested or measured 3"
        );

        let budgets = Budgets {
            source_bytes: 15,
            ..Budgets::default()
        };
        let mut service = ModuleService::new(fd.as_fd(), &budgets);
        service.load_entry("//m.star").unwrap();
        let ModuleResponse::Refused { diagnostic, .. } =
            service.answer(&request("//a.star", "//m.star"))
        else {
            panic!()
        };
        assert_eq!(
            diagnostic.message,
            "planning budget source_bytes exceeded: accepted limit 15, requested or measured 20"
        );

        let budgets = Budgets {
            module_depth: 1,
            ..Budgets::default()
        };
        let mut service = ModuleService::new(fd.as_fd(), &budgets);
        service.load_entry("//m.star").unwrap();
        assert!(matches!(
            service.answer(&request("//a.star", "//m.star")),
            ModuleResponse::Source { .. }
        ));
        let ModuleResponse::Refused { diagnostic, .. } =
            service.answer(&request("//b.star", "//a.star"))
        else {
            panic!()
        };
        assert!(
            diagnostic
                .message
                .starts_with("planning budget module_depth exceeded"),
            "{}",
            diagnostic.message
        );
    }
}
