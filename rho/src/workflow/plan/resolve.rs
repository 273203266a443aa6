//! Resolution of what command and shell nodes run: executables (PATH lookup for a bare
//! name, the workspace for a relative path), script interpreters (shebang), and working
//! directories, each frozen as an identity.
//!
//! Invariant: an identity is frozen from the opened file (fstat and content digest of the
//! descriptor, opened without following links along its canonical path, non-blocking so a
//! FIFO is refused rather than waited on), never from a second lookup of the path; each
//! distinct file is hashed once per plan, and hashing stops when the `planner_wall_ms`
//! deadline passes.

use std::collections::{BTreeMap, HashMap};

use crate::workflow::store::plans::DirectoryIdentity;
use std::ffi::OsStr;
use std::os::fd::{AsFd as _, BorrowedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use rho_ipc::budget::BudgetOverrun;
use rho_ipc::program::{FileIdentity, FrozenDirectory, FrozenExecutable, FrozenInterpreter};

use crate::workflow::identity::{
    DigestCache, FileFacts, HEAD_BYTES, IdentityError, location_of, open_nofollow_in,
    open_regular_absolute, relative_parts,
};

/// The search path used when the planning process has no `PATH`.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Why an executable, interpreter or directory could not be frozen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// A bare name is on no directory of the search path.
    #[error("executable `{name}` not found on PATH ({path})")]
    NotOnPath {
        /// The name.
        name: String,
        /// The search path used.
        path: String,
    },
    /// The executable is the empty string.
    #[error("the executable is empty")]
    Empty,
    /// The file does not exist.
    #[error("`{path}` does not exist")]
    Missing {
        /// The path.
        path: String,
    },
    /// Not a regular file.
    #[error("`{path}` is {kind}, not a regular file")]
    NotRegular {
        /// The path.
        path: String,
        /// What it is instead (`a FIFO`, `a directory`, ...).
        kind: &'static str,
    },
    /// The `planner_wall_ms` budget ran out while a file was being hashed.
    #[error(
        "{overrun} while hashing `{path}` (the budget covers the whole planning pipeline, \
         hashing executables included)"
    )]
    WallTime {
        /// The file being hashed.
        path: String,
        /// `planner_wall_ms`, its limit and the milliseconds spent.
        overrun: BudgetOverrun,
    },
    /// No execute permission bit.
    #[error("`{path}` is not executable (no execute permission)")]
    NotExecutable {
        /// The path.
        path: String,
    },
    /// The file cannot be opened or read.
    #[error("`{path}` cannot be read: {problem}")]
    Unreadable {
        /// The path.
        path: String,
        /// Why.
        problem: String,
    },
    /// Neither a native executable nor a script with a `#!` line: the kernel would refuse
    /// it (ENOEXEC) when the run starts.
    #[error(
        "`{path}` is neither a native executable (ELF) nor a script starting with `#!`; the \
         run could not start it. Add an interpreter line such as `#!/bin/sh` as its first \
         line, or run it through one: argv = [\"sh\", \"{path}\", ...]"
    )]
    UnknownFormat {
        /// The path.
        path: String,
    },
    /// The script's shebang line cannot be used.
    #[error("script `{script}`: {problem}")]
    Shebang {
        /// The script.
        script: String,
        /// What is wrong with its interpreter line.
        problem: String,
    },
    /// A native executable (or a script's interpreter) would load code the check cannot pin:
    /// its program interpreter or a library search path entry could be replaced after
    /// planning, or its ELF headers cannot be read.
    #[error("`{path}`: {problem}")]
    Loader {
        /// The executable.
        path: String,
        /// What the loader would open and who could replace it.
        problem: String,
    },
    /// A working directory is not a plain path inside the workspace.
    #[error("cwd `{cwd}` {problem}")]
    Cwd {
        /// The cwd as written.
        cwd: String,
        /// What is wrong.
        problem: String,
    },
}

/// When planning started and its `planner_wall_ms` budget: the host's hashing stops at the
/// same deadline the worker's watchdog enforces on evaluation.
#[derive(Debug, Clone, Copy)]
pub struct WallClock {
    /// When planning started.
    pub started: Instant,
    /// `planner_wall_ms`.
    pub limit_ms: u64,
}

impl WallClock {
    fn deadline(&self) -> Instant {
        self.started + Duration::from_millis(self.limit_ms)
    }

    fn overrun(&self) -> BudgetOverrun {
        let spent = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        BudgetOverrun {
            name: "planner_wall_ms".to_owned(),
            limit: self.limit_ms,
            measured: spent.max(self.limit_ms.saturating_add(1)),
        }
    }
}

/// Resolves and freezes files for one plan, caching by what was asked and by file identity.
#[derive(Debug)]
pub struct Resolver<'a> {
    workspace: &'a Path,
    workspace_fd: BorrowedFd<'a>,
    search_path: String,
    clock: Option<WallClock>,
    digests: DigestCache,
    executables: HashMap<String, Result<FrozenExecutable, ResolveError>>,
    directories: HashMap<String, Result<FrozenDirectory, ResolveError>>,
    /// Device and inode of each frozen directory, by its normalized path.
    directory_ids: BTreeMap<String, DirectoryIdentity>,
}

/// An opened, checked file with its digest.
struct Opened {
    identity: FileIdentity,
    head: Vec<u8>,
    /// The canonical path it was opened at.
    canonical: PathBuf,
    /// For an ELF file, what its loader opens by path (read through the same descriptor).
    loader: Option<Result<super::elf::LoaderInputs, String>>,
}

impl<'a> Resolver<'a> {
    /// A resolver for the canonical `workspace` (open as `workspace_fd`), searching bare names
    /// on `search_path` (the planning process's `PATH`; [`DEFAULT_PATH`] when unset).
    pub fn new(
        workspace: &'a Path,
        workspace_fd: BorrowedFd<'a>,
        search_path: Option<&OsStr>,
    ) -> Self {
        let search_path = search_path.map_or_else(
            || DEFAULT_PATH.to_owned(),
            |p| p.to_string_lossy().into_owned(),
        );
        Self {
            workspace,
            workspace_fd,
            search_path,
            clock: None,
            digests: DigestCache::new(),
            executables: HashMap::new(),
            directories: HashMap::new(),
            directory_ids: BTreeMap::new(),
        }
    }

    /// Stops hashing (with [`ResolveError::WallTime`]) once `clock`'s budget has run out.
    #[must_use]
    pub fn with_wall_clock(mut self, clock: WallClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Freezes the executable `argv0` as written (bare name, relative or absolute path).
    pub fn executable(&mut self, argv0: &str) -> Result<FrozenExecutable, ResolveError> {
        if let Some(hit) = self.executables.get(argv0) {
            return hit.clone();
        }
        let result = self.resolve_executable(argv0);
        self.executables.insert(argv0.to_owned(), result.clone());
        result
    }

    fn resolve_executable(&mut self, argv0: &str) -> Result<FrozenExecutable, ResolveError> {
        let candidate = self.locate(argv0)?;
        let opened = self.open_file(&candidate)?;
        let interpreter = match shebang_line(&opened.head) {
            None if !is_native_executable(&opened.head) => {
                return Err(ResolveError::UnknownFormat {
                    path: candidate.display().to_string(),
                });
            }
            None => None,
            Some(line) => {
                let line = line.map_err(|e| match e {
                    ResolveError::Shebang { problem, .. } => ResolveError::Shebang {
                        script: candidate.display().to_string(),
                        problem,
                    },
                    other => other,
                })?;
                Some(self.interpreter(&candidate, line)?)
            }
        };
        if interpreter.is_none() {
            check_loader(&opened)?;
        }
        Ok(FrozenExecutable {
            file: opened.identity,
            interpreter,
        })
    }

    /// Where `argv0` points before canonicalization.
    fn locate(&self, argv0: &str) -> Result<PathBuf, ResolveError> {
        if argv0.is_empty() {
            return Err(ResolveError::Empty);
        }
        if argv0.contains('/') {
            let path = Path::new(argv0);
            return Ok(if path.is_absolute() {
                path.to_owned()
            } else {
                self.workspace.join(path)
            });
        }
        self.search(argv0)
    }

    /// The first regular, executable `name` on the search path. Empty and relative entries
    /// are skipped: they would make the result depend on the directory `rho` runs in.
    fn search(&self, name: &str) -> Result<PathBuf, ResolveError> {
        for dir in self.search_path.split(':') {
            if dir.is_empty() || !dir.starts_with('/') {
                continue;
            }
            let candidate = Path::new(dir).join(name);
            if let Ok(meta) = std::fs::metadata(&candidate) {
                use std::os::unix::fs::PermissionsExt as _;
                if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
                    return Ok(candidate);
                }
            }
        }
        Err(ResolveError::NotOnPath {
            name: name.to_owned(),
            path: self.search_path.clone(),
        })
    }

    /// Canonicalizes (symlinks resolved once), opens without following links, checks it is a
    /// regular executable file and digests it.
    fn open_file(&mut self, candidate: &Path) -> Result<Opened, ResolveError> {
        let shown = candidate.display().to_string();
        let canonical = std::fs::canonicalize(candidate).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => ResolveError::Missing {
                path: shown.clone(),
            },
            _ => ResolveError::Unreadable {
                path: shown.clone(),
                problem: e.to_string(),
            },
        })?;
        let fd = open_regular_absolute(&canonical).map_err(|e| match e {
            IdentityError::NotFound { .. } => ResolveError::Missing {
                path: shown.clone(),
            },
            IdentityError::NotRegular { kind, .. } => ResolveError::NotRegular {
                path: shown.clone(),
                kind,
            },
            IdentityError::Open {
                errno: nix::errno::Errno::EACCES,
                ..
            } => ResolveError::Unreadable {
                path: shown.clone(),
                problem: "permission denied".to_owned(),
            },
            other => ResolveError::Unreadable {
                path: shown.clone(),
                problem: other.to_string(),
            },
        })?;
        let facts = FileFacts::of(fd.as_fd()).map_err(|e| ResolveError::Unreadable {
            path: shown.clone(),
            problem: e.to_string(),
        })?;
        if !facts.is_regular() {
            return Err(ResolveError::NotRegular {
                path: shown,
                kind: facts.kind(),
            });
        }
        if !facts.is_executable() {
            return Err(ResolveError::NotExecutable { path: shown });
        }
        let clock = self.clock;
        let digest = self
            .digests
            .digest(fd.as_fd(), &facts, clock.as_ref().map(WallClock::deadline))
            .map_err(|e| match clock {
                Some(clock)
                    if e.kind() == std::io::ErrorKind::TimedOut
                        && Instant::now() >= clock.deadline() =>
                {
                    ResolveError::WallTime {
                        path: shown.clone(),
                        overrun: clock.overrun(),
                    }
                }
                _ => ResolveError::Unreadable {
                    path: shown.clone(),
                    problem: e.to_string(),
                },
            })?;
        Ok(Opened {
            identity: FileIdentity {
                location: location_of(&canonical, self.workspace, &facts),
                size: digest.size,
                sha256: digest.sha256,
            },
            loader: is_native_executable(&digest.head)
                .then(|| super::elf::loader_inputs(fd.as_fd(), digest.size)),
            head: digest.head,
            canonical,
        })
    }

    /// Freezes the interpreter named by a script's shebang line.
    fn interpreter(
        &mut self,
        script: &Path,
        line: &str,
    ) -> Result<FrozenInterpreter, ResolveError> {
        let shebang_error = |problem: String| ResolveError::Shebang {
            script: script.display().to_string(),
            problem,
        };
        let mut words = line.split_whitespace();
        let Some(shebang) = words.next() else {
            return Err(shebang_error(
                "the `#!` line names no interpreter".to_owned(),
            ));
        };
        if !shebang.starts_with('/') {
            return Err(shebang_error(format!(
                "interpreter `{shebang}` must be an absolute path (or `/usr/bin/env NAME`)"
            )));
        }
        let mut args: Vec<String> = words.map(str::to_owned).collect();
        let is_env = Path::new(shebang).file_name() == Some(OsStr::new("env"));
        let target = if is_env {
            if args.first().map(String::as_str) == Some("-S") {
                args.remove(0);
            }
            let Some(name) = (!args.is_empty()).then(|| args.remove(0)) else {
                return Err(shebang_error(format!(
                    "`{shebang}` names no program to run"
                )));
            };
            if name.starts_with('-') {
                return Err(shebang_error(format!(
                    "`{shebang}` option `{name}` is not supported"
                )));
            }
            if name.contains('/') {
                if !name.starts_with('/') {
                    return Err(shebang_error(format!(
                        "interpreter `{name}` must be absolute or a bare name"
                    )));
                }
                PathBuf::from(name)
            } else {
                self.search(&name)
                    .map_err(|e| shebang_error(e.to_string()))?
            }
        } else {
            PathBuf::from(shebang)
        };
        let opened = self
            .open_file(&target)
            .map_err(|e| shebang_error(format!("interpreter {e}")))?;
        if shebang_line(&opened.head).is_some() {
            return Err(shebang_error(format!(
                "interpreter `{}` is itself a script; an interpreter must be a binary",
                target.display()
            )));
        }
        if !is_native_executable(&opened.head) {
            return Err(shebang_error(format!(
                "interpreter `{}` is not a native executable (ELF)",
                target.display()
            )));
        }
        check_loader(&opened).map_err(|e| shebang_error(format!("interpreter {e}")))?;
        Ok(FrozenInterpreter {
            file: opened.identity,
            shebang: shebang.to_owned(),
            args,
        })
    }

    /// Freezes a working directory written relative to the workspace.
    pub fn directory(&mut self, cwd: &str) -> Result<FrozenDirectory, ResolveError> {
        if let Some(hit) = self.directories.get(cwd) {
            return hit.clone();
        }
        let result = self.resolve_directory(cwd).map(|(dir, id)| {
            self.directory_ids.insert(dir.path.clone(), id);
            dir
        });
        self.directories.insert(cwd.to_owned(), result.clone());
        result
    }

    /// Device and inode of every directory frozen so far, by workspace-relative path.
    pub fn directory_identities(&self) -> BTreeMap<String, DirectoryIdentity> {
        self.directory_ids.clone()
    }

    fn resolve_directory(
        &self,
        cwd: &str,
    ) -> Result<(FrozenDirectory, DirectoryIdentity), ResolveError> {
        let bad = |problem: String| ResolveError::Cwd {
            cwd: cwd.to_owned(),
            problem,
        };
        if cwd.starts_with('/') {
            return Err(bad(
                "is absolute: a cwd is relative to the workspace and must stay inside it"
                    .to_owned(),
            ));
        }
        let parts = relative_parts(cwd).map_err(|_| {
            bad(
                "leaves the workspace or is not a plain path: `..` and empty parts are not allowed"
                    .to_owned(),
            )
        })?;
        let path = if parts.is_empty() {
            ".".to_owned()
        } else {
            parts.join("/")
        };
        let dir = open_nofollow_in(
            self.workspace_fd,
            &path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY,
        )
        .map_err(|e| match e {
            IdentityError::Symlink { component } => bad(format!(
                "goes through the symbolic link `{component}`; a cwd may not contain links"
            )),
            IdentityError::NotFound { component } => bad(format!(
                "does not exist in the workspace (`{component}` is missing)"
            )),
            IdentityError::NotDirectory { component } => {
                bad(format!("is not a directory (`{component}`)"))
            }
            other => bad(other.to_string()),
        })?;
        // Kind, device and inode: a different directory at the same path later is refused.
        let facts = crate::workflow::identity::FileFacts::of(std::os::fd::AsFd::as_fd(&dir))
            .map_err(|e| bad(format!("cannot be inspected: {e}")))?;
        Ok((
            FrozenDirectory { path },
            DirectoryIdentity {
                device: facts.device,
                inode: facts.inode,
            },
        ))
    }
}

/// Whether a file starting with `head` is a binary this kernel runs natively (ELF).
/// Refuses a native executable whose loader inputs could be replaced after planning.
fn check_loader(opened: &Opened) -> Result<(), ResolveError> {
    let path = opened.canonical.display().to_string();
    match &opened.loader {
        None => Ok(()),
        Some(Err(problem)) => Err(ResolveError::Loader {
            path,
            problem: format!("its ELF headers cannot be read: {problem}"),
        }),
        Some(Ok(inputs)) => super::elf::check_loader(&opened.canonical, inputs)
            .map_err(|problem| ResolveError::Loader { path, problem }),
    }
}

fn is_native_executable(head: &[u8]) -> bool {
    head.starts_with(b"\x7fELF")
}

/// The text after `#!` on the first line, when the file starts with `#!`.
fn shebang_line(head: &[u8]) -> Option<Result<&str, ResolveError>> {
    let rest = head.strip_prefix(b"#!")?;
    let Some(end) = rest.iter().position(|b| *b == b'\n') else {
        return Some(Err(ResolveError::Shebang {
            script: String::new(),
            problem: format!("the `#!` line is longer than {HEAD_BYTES} bytes"),
        }));
    };
    Some(
        std::str::from_utf8(&rest[..end])
            .map(str::trim)
            .map_err(|_| ResolveError::Shebang {
                script: String::new(),
                problem: "the `#!` line is not UTF-8".to_owned(),
            }),
    )
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use rho_ipc::program::FileLocation;

    use super::*;
    use crate::workflow::identity::open_dir;

    fn workspace() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        (dir, ws)
    }

    fn write_exec(path: &Path, text: &str) {
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn bare_names_resolve_on_path_and_canonicalize() {
        let (_d, ws) = workspace();
        let fd = open_dir(&ws).unwrap();
        let mut r = Resolver::new(&ws, fd.as_fd(), Some(OsStr::new("/usr/bin:/bin")));
        let sh = r.executable("sh").unwrap();
        let FileLocation::Absolute { path, .. } = &sh.file.location else {
            panic!("{sh:?}")
        };
        assert_eq!(
            Path::new(path),
            std::fs::canonicalize("/usr/bin/sh").unwrap()
        );
        assert!(sh.interpreter.is_none());
        assert!(sh.file.sha256.starts_with("sha256:"));
        let err = r.executable("definitely-not-a-command-xyz").unwrap_err();
        assert!(matches!(err, ResolveError::NotOnPath { .. }), "{err}");
    }

    #[test]
    fn workspace_scripts_freeze_relative_with_their_interpreter() {
        let (_d, ws) = workspace();
        std::fs::create_dir(ws.join("bin")).unwrap();
        write_exec(&ws.join("bin/run.sh"), "#!/bin/sh -e\necho hi\n");
        write_exec(&ws.join("bin/env.sh"), "#!/usr/bin/env sh\necho hi\n");
        write_exec(&ws.join("bin/nested.sh"), "#!/bin/sh\n");
        write_exec(
            &ws.join("bin/bad.sh"),
            &format!("#!{}\n", ws.join("bin/nested.sh").display()),
        );
        std::fs::write(ws.join("bin/noexec"), "x").unwrap();
        let fd = open_dir(&ws).unwrap();
        let mut r = Resolver::new(&ws, fd.as_fd(), Some(OsStr::new("/usr/bin:/bin")));

        let exe = r.executable("bin/run.sh").unwrap();
        assert_eq!(
            exe.file.location,
            FileLocation::Workspace {
                path: "bin/run.sh".into()
            }
        );
        let interp = exe.interpreter.unwrap();
        assert_eq!(interp.shebang, "/bin/sh");
        assert_eq!(interp.args, ["-e"]);

        let exe = r.executable("./bin/env.sh").unwrap();
        let interp = exe.interpreter.unwrap();
        assert_eq!(interp.shebang, "/usr/bin/env");
        assert!(interp.args.is_empty());
        let FileLocation::Absolute { path, .. } = &interp.file.location else {
            panic!()
        };
        assert_eq!(
            Path::new(path),
            std::fs::canonicalize("/usr/bin/sh").unwrap()
        );

        let err = r.executable("bin/bad.sh").unwrap_err();
        assert!(err.to_string().contains("is itself a script"), "{err}");
        assert!(matches!(
            r.executable("bin/noexec"),
            Err(ResolveError::NotExecutable { .. })
        ));
        assert!(matches!(
            r.executable("bin/missing"),
            Err(ResolveError::Missing { .. })
        ));
    }

    #[test]
    fn working_directories_stay_inside_without_links() {
        let (_d, ws) = workspace();
        std::fs::create_dir_all(ws.join("a/b")).unwrap();
        std::os::unix::fs::symlink("a", ws.join("l")).unwrap();
        let fd = open_dir(&ws).unwrap();
        let mut r = Resolver::new(&ws, fd.as_fd(), None);
        assert_eq!(r.directory(".").unwrap().path, ".");
        assert_eq!(r.directory("./a//b/").map(|d| d.path).ok(), None);
        assert_eq!(r.directory("a/./b/").unwrap().path, "a/b");
        assert!(
            r.directory("..")
                .unwrap_err()
                .to_string()
                .contains("leaves the workspace")
        );
        assert!(
            r.directory("/tmp")
                .unwrap_err()
                .to_string()
                .contains("absolute")
        );
        assert!(
            r.directory("l/b")
                .unwrap_err()
                .to_string()
                .contains("symbolic link `l`")
        );
        assert!(
            r.directory("nope")
                .unwrap_err()
                .to_string()
                .contains("does not exist")
        );
    }
}
