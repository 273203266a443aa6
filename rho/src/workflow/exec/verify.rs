//! Re-verification of frozen identities and the sealed in-memory copies that run.
//!
//! Invariant: a [`Sealed`] file only ever holds bytes that were hashed while being copied
//! into it, and it is sealed against any change before its digest is compared; so what
//! `execveat` runs is exactly what matched the frozen digest, whatever happens to the file
//! on disk afterwards.
//!
//! One run verifies each frozen file once ([`SealedCopies`]): the first launch that needs
//! it opens it without following links, compares it with its frozen identity and seals a
//! copy; every later launch of the run runs that same copy without reading the disk again.
//! That is the point of the sealed copy: what runs is the frozen digest, and a file changed
//! on disk after its first use in the run cannot reach a launch. The working directory and
//! the workspace are still checked at every launch (a node runs where it was frozen).

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use nix::fcntl::{FcntlArg, OFlag, SealFlag, fcntl};
use nix::sys::memfd::{MFdFlags, memfd_create};
use rho_ipc::program::{FileIdentity, FileLocation, FrozenDirectory, FrozenExecutable};
use sha2::{Digest as _, Sha256};

use super::{VerifiedLaunch, VerifyError};
use crate::workflow::identity::{
    FileFacts, IdentityError, display_location, open_absolute_nofollow, open_frozen,
    open_nofollow_in, relative_parts,
};

/// The total size of the sealed copies one run keeps for reuse. A file that would go beyond
/// it is still verified and sealed for its launch, but verified again at its next one.
const KEPT_MAX_BYTES: u64 = 512 * 1024 * 1024;

/// A sealed, read-only in-memory copy of verified bytes.
#[derive(Debug)]
pub(super) struct Sealed {
    fd: OwnedFd,
    sha256: String,
    size: u64,
    shebang: bool,
}

impl Sealed {
    pub(super) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// The verified handles behind a [`VerifiedLaunch`].
#[derive(Debug)]
pub(super) struct Verified {
    /// What `execveat` runs: the executable, or the interpreter for a script.
    pub(super) program: Arc<Sealed>,
    /// The script passed to the interpreter as `/proc/self/fd/N`.
    pub(super) script: Option<Arc<Sealed>>,
    /// For a script: the interpreter's `argv[0]` and shebang arguments.
    pub(super) interpreter_argv: Vec<OsString>,
    /// The verified working directory.
    pub(super) cwd: OwnedFd,
}

impl Verified {
    pub(super) fn executable_sha256(&self) -> &str {
        match &self.script {
            Some(script) => &script.sha256,
            None => &self.program.sha256,
        }
    }
}

/// One slot per frozen file: filled by the first successful verification.
type Slot = Arc<Mutex<Option<Arc<Sealed>>>>;

/// The sealed copies of one run, one per frozen file identity, each verified once.
#[derive(Debug, Default)]
pub(super) struct SealedCopies {
    slots: Mutex<HashMap<FileIdentity, Slot>>,
    kept_bytes: AtomicU64,
    verifications: AtomicU64,
}

impl SealedCopies {
    /// How many times a frozen file was opened, checked and copied.
    pub(super) fn verifications(&self) -> u64 {
        self.verifications.load(Ordering::Relaxed)
    }

    /// The sealed copy of `frozen`: the one this run already verified, or a new one,
    /// verified now. Concurrent first uses of one file wait for a single verification.
    fn get(
        &self,
        ws: BorrowedFd<'_>,
        role: &'static str,
        frozen: &FileIdentity,
    ) -> Result<Arc<Sealed>, VerifyError> {
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(slots.entry(frozen.clone()).or_default())
        };
        let mut slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(sealed) = slot.as_ref() {
            return Ok(Arc::clone(sealed));
        }
        self.verifications.fetch_add(1, Ordering::Relaxed);
        let sealed = verify_file(ws, role, frozen)?;
        tracing::debug!(
            role,
            path = %display_location(&frozen.location, None),
            sha256 = %sealed.sha256,
            "verified a frozen file and sealed a copy for this run"
        );
        let kept = self.kept_bytes.load(Ordering::Relaxed);
        if kept.saturating_add(sealed.size) <= KEPT_MAX_BYTES {
            self.kept_bytes.fetch_add(sealed.size, Ordering::Relaxed);
            *slot = Some(Arc::clone(&sealed));
        }
        Ok(sealed)
    }
}

/// Opens the executable, interpreter and working directory without following symbolic
/// links, compares them with their frozen identities, and returns sealed copies ready to
/// launch. Any difference fails closed with the path and what changed.
pub fn verify(
    workspace: &Path,
    program: &FrozenExecutable,
    cwd: &FrozenDirectory,
) -> Result<VerifiedLaunch, VerifyError> {
    verify_in(
        workspace,
        super::ExpectedDirectories::default(),
        program,
        cwd,
    )
}

/// [`verify`], and the workspace directory must still be the one frozen (`(device,
/// inode)`): a whole workspace swapped for another at the same path is refused.
pub fn verify_in(
    workspace: &Path,
    expected: super::ExpectedDirectories,
    program: &FrozenExecutable,
    cwd: &FrozenDirectory,
) -> Result<VerifiedLaunch, VerifyError> {
    verify_with(
        workspace,
        expected,
        program,
        cwd,
        &super::VerifiedExecutables::new(),
    )
}

/// [`verify_in`] for one launch of a run: the executable (and interpreter) come from the
/// run's sealed copies, verified at their first use in the run; the workspace and the
/// working directory are opened and checked now.
pub fn verify_with(
    workspace: &Path,
    expected: super::ExpectedDirectories,
    program: &FrozenExecutable,
    cwd: &FrozenDirectory,
    copies: &super::VerifiedExecutables,
) -> Result<VerifiedLaunch, VerifyError> {
    let copies = &copies.inner;
    let workspace_fd = open_workspace(workspace).map_err(|source| VerifyError::Workspace {
        path: workspace.display().to_string(),
        source,
    })?;
    let ws = workspace_fd.as_fd();
    if let Some(identity) = expected.workspace {
        check_directory(ws, "workspace", &workspace.display().to_string(), identity)?;
    }
    let executable = copies.get(ws, "executable", &program.file)?;
    let inner = match &program.interpreter {
        None => {
            if executable.shebang {
                return Err(VerifyError::UnfrozenInterpreter {
                    role: "executable",
                    path: display_location(&program.file.location, None),
                });
            }
            Verified {
                program: executable,
                script: None,
                interpreter_argv: Vec::new(),
                cwd: verify_cwd(ws, cwd, expected.cwd)?,
            }
        }
        Some(interpreter) => {
            let sealed = copies.get(ws, "interpreter", &interpreter.file)?;
            if sealed.shebang {
                // The kernel would resolve the nested interpreter by path.
                return Err(VerifyError::UnfrozenInterpreter {
                    role: "interpreter",
                    path: display_location(&interpreter.file.location, None),
                });
            }
            let mut interpreter_argv = vec![interpreter_argv0(
                &interpreter.shebang,
                &interpreter.file.location,
            )];
            interpreter_argv.extend(interpreter.args.iter().map(OsString::from));
            Verified {
                program: sealed,
                script: Some(executable),
                interpreter_argv,
                cwd: verify_cwd(ws, cwd, expected.cwd)?,
            }
        }
    };
    Ok(VerifiedLaunch { inner })
}

/// Opens the workspace directory as [`open_absolute_nofollow`] does (from `/`, no symbolic
/// link in any component), in one `openat2` call where the kernel has it (Linux 5.6)
/// instead of one `openat` per component at every launch. Any failure of that call is
/// retried with the walk, which names the component at fault.
fn open_workspace(workspace: &Path) -> Result<OwnedFd, IdentityError> {
    use nix::fcntl::{OpenHow, ResolveFlag, openat2};
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY;
    // The same paths the walk accepts: absolute, without `..` or empty components.
    let walkable = workspace
        .to_str()
        .and_then(|text| text.strip_prefix('/'))
        .is_some_and(|rel| relative_parts(rel).is_ok());
    if walkable {
        let how = OpenHow::new()
            .flags(flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
            .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS);
        if let Ok(fd) = openat2(nix::fcntl::AT_FDCWD, workspace, how) {
            return Ok(fd);
        }
    }
    open_absolute_nofollow(workspace, flags)
}

/// The interpreter's `argv[0]`: what the kernel would pass (the shebang path), except for
/// `#!/usr/bin/env NAME`, where `env` would have run NAME under its own name.
fn interpreter_argv0(shebang: &str, location: &FileLocation) -> OsString {
    let shebang_name = shebang.rsplit('/').next().unwrap_or(shebang);
    if shebang_name == "env" {
        let path = match location {
            FileLocation::Workspace { path } | FileLocation::Absolute { path, .. } => path,
        };
        OsString::from(path.rsplit('/').next().unwrap_or(path))
    } else {
        OsString::from(shebang)
    }
}

fn verify_cwd(
    ws: BorrowedFd<'_>,
    cwd: &FrozenDirectory,
    expected: Option<(u64, u64)>,
) -> Result<OwnedFd, VerifyError> {
    let dir = open_nofollow_in(ws, &cwd.path, OFlag::O_RDONLY | OFlag::O_DIRECTORY).map_err(
        |source| VerifyError::Open {
            role: "working directory",
            path: cwd.path.clone(),
            source,
        },
    )?;
    if let Some(identity) = expected {
        check_directory(dir.as_fd(), "working directory", &cwd.path, identity)?;
    }
    Ok(dir)
}

/// The open directory is a directory with the frozen device and inode.
fn check_directory(
    dir: BorrowedFd<'_>,
    role: &'static str,
    path: &str,
    (device, inode): (u64, u64),
) -> Result<(), VerifyError> {
    let facts = FileFacts::of(dir).map_err(|e| VerifyError::Changed {
        role,
        path: path.to_owned(),
        what: format!("cannot be inspected: {e}"),
    })?;
    if !facts.is_dir() {
        return Err(VerifyError::Changed {
            role,
            path: path.to_owned(),
            what: "is no longer a directory".to_owned(),
        });
    }
    if (facts.device, facts.inode) != (device, inode) {
        return Err(VerifyError::Changed {
            role,
            path: path.to_owned(),
            what: format!(
                "another directory is there: device {} inode {} expected, device {} inode {} found",
                device, inode, facts.device, facts.inode
            ),
        });
    }
    Ok(())
}

fn verify_file(
    ws: BorrowedFd<'_>,
    role: &'static str,
    frozen: &FileIdentity,
) -> Result<Arc<Sealed>, VerifyError> {
    let path = display_location(&frozen.location, None);
    let changed = |what: String| VerifyError::Changed {
        role,
        path: path.clone(),
        what,
    };
    let fd = open_frozen(
        ws,
        &frozen.location,
        OFlag::O_RDONLY | OFlag::O_NOCTTY | OFlag::O_NONBLOCK,
    )
    .map_err(|source| VerifyError::Open {
        role,
        path: path.clone(),
        source,
    })?;
    let seal_error = |source: io::Error| VerifyError::Seal {
        role,
        path: path.clone(),
        source,
    };
    let facts = FileFacts::of(fd.as_fd()).map_err(seal_error)?;
    if !facts.is_regular() {
        return Err(changed("is not a regular file any more".to_owned()));
    }
    if let FileLocation::Absolute { device, inode, .. } = &frozen.location
        && (*device, *inode) != (facts.device, facts.inode)
    {
        return Err(changed(format!(
            "replaced by another file: device/inode expected {device}/{inode}, found {}/{}",
            facts.device, facts.inode
        )));
    }
    if facts.size != frozen.size {
        return Err(changed(format!(
            "size expected {} bytes, found {} bytes",
            frozen.size, facts.size
        )));
    }
    let sealed = copy_and_seal(File::from(fd), facts.size).map_err(|err| match err {
        CopyError::Io(source) => seal_error(source),
        CopyError::Grew { copied } => changed(format!(
            "was modified while being verified: size expected {} bytes, read {copied} bytes",
            facts.size
        )),
    })?;
    let sealed = Arc::new(sealed);
    if sealed.sha256 != frozen.sha256 {
        return Err(changed(format!(
            "sha256 expected {} found {}",
            frozen.sha256, sealed.sha256
        )));
    }
    Ok(sealed)
}

#[derive(Debug)]
enum CopyError {
    Io(io::Error),
    Grew { copied: u64 },
}

impl From<io::Error> for CopyError {
    fn from(err: io::Error) -> Self {
        CopyError::Io(err)
    }
}

/// Copies `file` into a new memfd, hashing exactly the bytes copied, then seals the memfd
/// against writes, growth, shrinking and further seal changes.
fn copy_and_seal(mut file: File, expected_size: u64) -> Result<Sealed, CopyError> {
    let memfd = memfd_create(
        c"rho-verified",
        MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
    )
    .map_err(io::Error::from)?;
    let mut out = File::from(memfd);
    let mut hasher = Sha256::new();
    let mut buf = vec![0_u8; 128 * 1024];
    let mut copied: u64 = 0;
    let mut head = [0_u8; 2];
    let mut head_len = 0;
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        let chunk = &buf[..n];
        for byte in chunk.iter().take(head.len() - head_len) {
            head[head_len] = *byte;
            head_len += 1;
        }
        hasher.update(chunk);
        out.write_all(chunk)?;
        copied += n as u64;
        if copied > expected_size {
            return Err(CopyError::Grew { copied });
        }
    }
    if copied != expected_size {
        return Err(CopyError::Grew { copied });
    }
    fcntl(
        &out,
        FcntlArg::F_ADD_SEALS(
            SealFlag::F_SEAL_SHRINK
                | SealFlag::F_SEAL_GROW
                | SealFlag::F_SEAL_WRITE
                | SealFlag::F_SEAL_SEAL,
        ),
    )
    .map_err(io::Error::from)?;
    let fd = reopen_read_only(out)?;
    let digest: [u8; 32] = hasher.finalize().into();
    Ok(Sealed {
        fd,
        sha256: format!("sha256:{}", rho_ipc::digest::hex(&digest)),
        size: copied,
        shebang: head_len == 2 && head == *b"#!",
    })
}

/// Reopens the sealed memfd read-only through its own `/proc/self/fd` entry and closes the
/// writable descriptor: `execve` refuses (`ETXTBSY`) a file that is open for writing.
fn reopen_read_only(memfd: File) -> io::Result<OwnedFd> {
    let proc_path = format!("/proc/self/fd/{}", memfd.as_raw_fd());
    let read_only = std::fs::OpenOptions::new()
        .read(true)
        .open(Path::new(&proc_path))?;
    drop(memfd);
    Ok(OwnedFd::from(read_only))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    fn identity_of(path: &Path, location: FileLocation) -> FileIdentity {
        let bytes = std::fs::read(path).unwrap();
        FileIdentity {
            location,
            size: bytes.len() as u64,
            sha256: rho_ipc::digest::sha256_tagged(&bytes),
        }
    }

    fn workspace() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let canonical = dir.path().canonicalize().unwrap();
        (dir, canonical)
    }

    #[test]
    fn a_workspace_reached_through_a_symbolic_link_or_dot_dot_is_refused() {
        let (_dir, root) = workspace();
        std::fs::create_dir_all(root.join("real/ws")).unwrap();
        symlink(root.join("real"), root.join("link")).unwrap();
        symlink(root.join("real/ws"), root.join("ws-link")).unwrap();
        assert!(open_workspace(&root.join("real/ws")).is_ok());
        for refused in [
            root.join("link/ws"),
            root.join("ws-link"),
            root.join("real/ws/../ws"),
            std::path::PathBuf::from("relative/ws"),
        ] {
            let err = open_workspace(&refused).unwrap_err();
            // The walk names what is wrong, as it did before the one-call open.
            assert!(
                matches!(
                    err,
                    IdentityError::Symlink { .. } | IdentityError::NotRelative { .. }
                ),
                "{}: {err:?}",
                refused.display()
            );
        }
    }

    #[test]
    fn sealed_copy_rejects_writes_and_matches_digest() {
        let (_dir, ws) = workspace();
        std::fs::write(ws.join("data"), b"#!/bin/sh\necho hi\n").unwrap();
        let file = File::open(ws.join("data")).unwrap();
        let sealed = copy_and_seal(file, 18).unwrap();
        assert!(sealed.shebang);
        assert_eq!(
            sealed.sha256,
            rho_ipc::digest::sha256_tagged(b"#!/bin/sh\necho hi\n")
        );
        let seals = fcntl(&sealed.fd, FcntlArg::F_GET_SEALS).unwrap();
        let all = SealFlag::F_SEAL_SHRINK
            | SealFlag::F_SEAL_GROW
            | SealFlag::F_SEAL_WRITE
            | SealFlag::F_SEAL_SEAL;
        assert_eq!(SealFlag::from_bits_truncate(seals) & all, all);
        // Even a writable reopen of the memfd cannot change it.
        let path = format!("/proc/self/fd/{}", sealed.fd.as_raw_fd());
        let reopened = std::fs::OpenOptions::new().write(true).open(&path);
        if let Ok(mut w) = reopened {
            assert!(w.write_all(b"x").is_err());
        }
    }

    #[test]
    fn a_run_verifies_each_frozen_file_once_and_keeps_its_copy() {
        let (_dir, ws) = workspace();
        std::fs::write(ws.join("tool"), b"\x7fELF-one").unwrap();
        let frozen = identity_of(
            &ws.join("tool"),
            FileLocation::Workspace {
                path: "tool".to_owned(),
            },
        );
        let program = FrozenExecutable {
            file: frozen,
            interpreter: None,
        };
        let here = FrozenDirectory {
            path: ".".to_owned(),
        };
        let copies = super::super::VerifiedExecutables::new();
        let expected = super::super::ExpectedDirectories::default();
        let first = verify_with(&ws, expected, &program, &here, &copies).unwrap();
        // Rewritten after its first use: later launches of the run keep the verified copy.
        std::fs::write(ws.join("tool"), b"\x7fELF-two").unwrap();
        let second = verify_with(&ws, expected, &program, &here, &copies).unwrap();
        assert_eq!(copies.verifications(), 1);
        assert_eq!(
            first.inner.program.raw_fd(),
            second.inner.program.raw_fd(),
            "one sealed copy serves both launches"
        );
        // Another run (new copies) verifies again and refuses the changed file.
        let err = verify_with(
            &ws,
            expected,
            &program,
            &here,
            &super::super::VerifiedExecutables::new(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("sha256 expected"), "{err}");
    }

    #[test]
    fn size_mismatch_during_copy_is_reported() {
        let (_dir, ws) = workspace();
        std::fs::write(ws.join("data"), b"abcdef").unwrap();
        let file = File::open(ws.join("data")).unwrap();
        assert!(matches!(
            copy_and_seal(file, 3),
            Err(CopyError::Grew { copied: 6 })
        ));
        let file = File::open(ws.join("data")).unwrap();
        assert!(matches!(
            copy_and_seal(file, 9),
            Err(CopyError::Grew { copied: 6 })
        ));
    }

    #[test]
    fn changed_content_names_path_and_digests() {
        let (_dir, ws) = workspace();
        std::fs::create_dir(ws.join("bin")).unwrap();
        std::fs::write(ws.join("bin/tool"), b"\x7fELF-one").unwrap();
        let mut frozen = identity_of(
            &ws.join("bin/tool"),
            FileLocation::Workspace {
                path: "bin/tool".to_owned(),
            },
        );
        frozen.sha256 = rho_ipc::digest::sha256_tagged(b"\x7fELF-two");
        let program = FrozenExecutable {
            file: frozen,
            interpreter: None,
        };
        let err = verify(
            &ws,
            &program,
            &FrozenDirectory {
                path: ".".to_owned(),
            },
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("executable bin/tool changed: sha256 expected sha256:"),
            "{msg}"
        );
        assert!(msg.contains("found sha256:"), "{msg}");
    }

    #[test]
    fn unfrozen_shebang_fails_closed() {
        let (_dir, ws) = workspace();
        std::fs::write(ws.join("script"), b"#!/bin/sh\n").unwrap();
        let frozen = identity_of(
            &ws.join("script"),
            FileLocation::Workspace {
                path: "script".to_owned(),
            },
        );
        let program = FrozenExecutable {
            file: frozen,
            interpreter: None,
        };
        let err = verify(
            &ws,
            &program,
            &FrozenDirectory {
                path: ".".to_owned(),
            },
        )
        .unwrap_err();
        assert!(matches!(
            err,
            VerifyError::UnfrozenInterpreter {
                role: "executable",
                ..
            }
        ));
    }

    #[test]
    fn symlinked_file_and_absolute_replacement_fail_closed() {
        let (_dir, ws) = workspace();
        std::fs::write(ws.join("real"), b"\x7fELF").unwrap();
        symlink(ws.join("real"), ws.join("link")).unwrap();
        let frozen = identity_of(
            &ws.join("real"),
            FileLocation::Workspace {
                path: "link".to_owned(),
            },
        );
        let program = FrozenExecutable {
            file: frozen.clone(),
            interpreter: None,
        };
        let err = verify(
            &ws,
            &program,
            &FrozenDirectory {
                path: ".".to_owned(),
            },
        )
        .unwrap_err();
        assert!(
            matches!(
                err,
                VerifyError::Open {
                    role: "executable",
                    ..
                }
            ),
            "{err}"
        );

        let abs = ws.join("real").to_string_lossy().into_owned();
        let wrong_inode = FileIdentity {
            location: FileLocation::Absolute {
                path: abs,
                device: 1,
                inode: 2,
            },
            ..frozen
        };
        let program = FrozenExecutable {
            file: wrong_inode,
            interpreter: None,
        };
        let err = verify(
            &ws,
            &program,
            &FrozenDirectory {
                path: ".".to_owned(),
            },
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("replaced by another file"),
            "{err}"
        );
    }

    #[test]
    fn interpreter_argv0_follows_the_kernel_and_env() {
        let abs = FileLocation::Absolute {
            path: "/usr/bin/python3.12".to_owned(),
            device: 0,
            inode: 0,
        };
        assert_eq!(
            interpreter_argv0("/usr/bin/env", &abs),
            OsString::from("python3.12")
        );
        assert_eq!(
            interpreter_argv0("/bin/sh", &abs),
            OsString::from("/bin/sh")
        );
    }
}
