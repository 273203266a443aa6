//! Shared helpers for the `exec_*` integration tests: freezing files the way planning does
//! (canonical path, workspace-relative or absolute with device and inode, size, SHA-256,
//! shebang interpreter), and running a frozen command to its outcome.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rho::workflow::exec::{self, CommandOutcome, CommandSpec};
use rho_ipc::program::{
    FileIdentity, FileLocation, FrozenDirectory, FrozenExecutable, FrozenInterpreter,
};

/// A canonical temporary workspace plus a separate directory for artifacts.
pub struct Workspace {
    _dir: tempfile::TempDir,
    _artifacts_dir: tempfile::TempDir,
    pub root: PathBuf,
    pub artifacts: PathBuf,
}

static NEXT_ARTIFACT: AtomicUsize = AtomicUsize::new(0);

impl Workspace {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let artifacts_dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let artifacts = artifacts_dir.path().canonicalize().unwrap();
        Self {
            _dir: dir,
            _artifacts_dir: artifacts_dir,
            root,
            artifacts,
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    pub fn write(&self, rel: &str, content: &[u8]) -> PathBuf {
        let path = self.path(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, content).unwrap();
        path
    }

    /// A spec with fresh artifact paths, a clean minimal environment and `timeout`.
    pub fn spec(&self, argv: &[&str], timeout: Duration) -> CommandSpec {
        let n = NEXT_ARTIFACT.fetch_add(1, Ordering::SeqCst);
        CommandSpec::new(
            argv.iter().map(OsString::from).collect(),
            vec![(OsString::from("PATH"), OsString::from("/usr/bin:/bin"))],
            timeout,
            1 << 20,
            self.artifacts.join(format!("{n}.stdout")),
            self.artifacts.join(format!("{n}.stderr")),
        )
    }
}

/// The frozen identity of `path` as planning records it: the canonical target, relative
/// to the workspace when inside it, else absolute with device and inode.
pub fn freeze_file(workspace: &Path, path: &Path) -> FileIdentity {
    let canonical = path.canonicalize().unwrap();
    let bytes = std::fs::read(&canonical).unwrap();
    let meta = std::fs::metadata(&canonical).unwrap();
    let location = match canonical.strip_prefix(workspace) {
        Ok(rel) => FileLocation::Workspace {
            path: rel.to_string_lossy().into_owned(),
        },
        Err(_) => FileLocation::Absolute {
            path: canonical.to_string_lossy().into_owned(),
            device: meta.dev(),
            inode: meta.ino(),
        },
    };
    FileIdentity {
        location,
        size: bytes.len() as u64,
        sha256: rho_ipc::digest::sha256_tagged(&bytes),
    }
}

/// Freezes an executable; a `#!` file gets its interpreter frozen too (direct paths only).
pub fn freeze_executable(workspace: &Path, path: &Path) -> FrozenExecutable {
    let file = freeze_file(workspace, path);
    let bytes = std::fs::read(path.canonicalize().unwrap()).unwrap();
    let interpreter = bytes.strip_prefix(b"#!").map(|rest| {
        let line = String::from_utf8_lossy(rest.split(|b| *b == b'\n').next().unwrap());
        let mut words = line.split_whitespace();
        let shebang = words.next().unwrap().to_owned();
        FrozenInterpreter {
            file: freeze_file(workspace, Path::new(&shebang)),
            shebang,
            args: words.map(str::to_owned).collect(),
        }
    });
    FrozenExecutable { file, interpreter }
}

pub fn root_dir() -> FrozenDirectory {
    FrozenDirectory {
        path: ".".to_owned(),
    }
}

/// `/bin/sh` frozen through its canonical target (on this distribution a symlink chain).
pub fn frozen_sh(workspace: &Path) -> FrozenExecutable {
    freeze_executable(workspace, Path::new("/bin/sh"))
}

/// Verifies, spawns and waits.
pub fn run(
    workspace: &Workspace,
    program: &FrozenExecutable,
    cwd: &FrozenDirectory,
    spec: CommandSpec,
) -> CommandOutcome {
    let launch = exec::verify(&workspace.root, program, cwd).unwrap();
    exec::spawn(launch, spec).unwrap().wait()
}

/// `sh -c SCRIPT` in the workspace root.
pub fn run_sh(workspace: &Workspace, script: &str, timeout: Duration) -> CommandOutcome {
    let spec = workspace.spec(&["sh", "-c", script], timeout);
    run(workspace, &frozen_sh(&workspace.root), &root_dir(), spec)
}

pub fn read(path: &Path) -> String {
    String::from_utf8(std::fs::read(path).unwrap()).unwrap()
}

/// True once `pid` no longer runs (gone, or a zombie nobody reaped yet); waits up to 10 s
/// for the kernel and init to finish with it.
pub fn eventually_gone(pid: i32) -> bool {
    for _ in 0..1000 {
        match exec::process_start_time(pid) {
            Err(_) | Ok((_, 'Z' | 'X')) => return true,
            Ok(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    false
}

/// Reads the first line of a growing file (a pid printed by a background command).
pub fn first_line_when_written(path: &Path) -> String {
    for _ in 0..1000 {
        if let Ok(text) = std::fs::read_to_string(path)
            && let Some((line, _)) = text.split_once('\n')
        {
            return line.to_owned();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("{} never got a line", path.display());
}
