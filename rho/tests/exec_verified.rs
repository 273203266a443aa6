//! Verified-handle execution: a file replaced, rewritten or swapped for a symbolic link
//! after planning or after verification never runs; canonical targets of symlinked PATH
//! entries run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod exec_support;

use std::io::{Seek as _, Write as _};
use std::path::Path;
use std::time::Duration;

use exec_support::{
    Workspace, eventually_gone, freeze_executable, frozen_sh, read, root_dir, run, run_sh,
};
use rho::workflow::exec::{self, CommandExit, ExpectedDirectories, VerifyError};
use rho_ipc::program::{FileLocation, FrozenDirectory};

const T: Duration = Duration::from_secs(30);

fn script(marker: &str, word: &str) -> Vec<u8> {
    format!("#!/bin/sh\ntouch {marker}\necho {word}\n").into_bytes()
}

#[test]
fn replaced_executable_fails_closed_and_replacement_never_runs() {
    let ws = Workspace::new();
    let tool = ws.write("bin/tool", &script("original-ran", "original"));
    let program = freeze_executable(&ws.root, &tool);
    // Rename another file over the frozen path (a new inode, other content).
    let replacement = ws.write(
        "bin/.replacement",
        &script("replacement-ran", "replacement"),
    );
    std::fs::rename(&replacement, &tool).unwrap();

    let err = exec::verify(&ws.root, &program, &root_dir()).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(
            err,
            VerifyError::Changed {
                role: "executable",
                ..
            }
        ),
        "{msg}"
    );
    assert!(msg.starts_with("executable bin/tool changed:"), "{msg}");
    assert!(!ws.path("replacement-ran").exists());
    assert!(!ws.path("original-ran").exists());
}

#[test]
fn executable_replaced_after_verification_runs_the_verified_copy() {
    let ws = Workspace::new();
    let tool = ws.write("bin/tool", &script("original-ran", "original"));
    let program = freeze_executable(&ws.root, &tool);
    let launch = exec::verify(&ws.root, &program, &root_dir()).unwrap();
    let replacement = ws.write(
        "bin/.replacement",
        &script("replacement-ran", "replacement"),
    );
    std::fs::rename(&replacement, &tool).unwrap();

    let outcome = exec::spawn(launch, ws.spec(&["bin/tool"], T))
        .unwrap()
        .wait();
    assert_eq!(outcome.exit, CommandExit::Code(0));
    assert_eq!(read(&outcome.stdout.path), "original\n");
    assert!(ws.path("original-ran").exists());
    assert!(!ws.path("replacement-ran").exists());
}

#[test]
fn absolute_executable_with_same_content_but_new_inode_fails_closed() {
    let ws = Workspace::new();
    let outside = tempfile::tempdir().unwrap();
    let bin = outside.path().canonicalize().unwrap().join("true");
    std::fs::copy("/usr/bin/true", &bin).unwrap();
    let program = freeze_executable(&ws.root, &bin);
    assert!(matches!(
        program.file.location,
        FileLocation::Absolute { .. }
    ));
    let twin = bin.with_file_name("twin");
    std::fs::copy("/usr/bin/true", &twin).unwrap();
    std::fs::rename(&twin, &bin).unwrap();

    let err = exec::verify(&ws.root, &program, &root_dir()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("executable {} changed", bin.display())),
        "{msg}"
    );
    assert!(msg.contains("replaced by another file"), "{msg}");
}

#[test]
fn script_rewritten_in_place_after_verification_never_runs_new_content() {
    let ws = Workspace::new();
    let path = ws.write("run.sh", &script("old-ran", "old"));
    let program = freeze_executable(&ws.root, &path);
    assert!(program.interpreter.is_some());
    let launch = exec::verify(&ws.root, &program, &root_dir()).unwrap();

    // Same inode, new bytes of the same length.
    let inode_before = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap());
    let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.rewind().unwrap();
    file.write_all(&script("new-ran", "new")).unwrap();
    drop(file);
    let inode_after = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap());
    assert_eq!(inode_before, inode_after);

    let outcome = exec::spawn(launch, ws.spec(&["./run.sh"], T))
        .unwrap()
        .wait();
    assert_eq!(
        outcome.exit,
        CommandExit::Code(0),
        "{:?}",
        read(&outcome.stderr.path)
    );
    assert_eq!(read(&outcome.stdout.path), "old\n");
    assert!(ws.path("old-ran").exists());
    assert!(!ws.path("new-ran").exists());

    // Verifying again sees the new content and refuses it.
    let err = exec::verify(&ws.root, &program, &root_dir()).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("executable run.sh changed: sha256 expected"),
        "{err}"
    );
    assert!(!ws.path("new-ran").exists());
}

#[test]
fn script_receives_its_arguments_through_the_verified_interpreter() {
    let ws = Workspace::new();
    let path = ws.write(
        "args.sh",
        b"#!/bin/sh\nprintf '%s|' \"$@\"\necho \"$0\" >&2\n",
    );
    let program = freeze_executable(&ws.root, &path);
    let outcome = run(
        &ws,
        &program,
        &root_dir(),
        ws.spec(&["./args.sh", "a b", "c"], T),
    );
    assert_eq!(outcome.exit, CommandExit::Code(0));
    assert_eq!(read(&outcome.stdout.path), "a b|c|");
    // The script is read from the sealed handle, not from its path.
    assert!(read(&outcome.stderr.path).starts_with("/proc/self/fd/"));
}

#[test]
fn cwd_swapped_for_a_symlink_fails_closed() {
    let ws = Workspace::new();
    std::fs::create_dir(ws.path("sub")).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::rename(ws.path("sub"), ws.path("sub.old")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), ws.path("sub")).unwrap();

    let cwd = FrozenDirectory {
        path: "sub".to_owned(),
    };
    let err = exec::verify(&ws.root, &frozen_sh(&ws.root), &cwd).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(
            err,
            VerifyError::Open {
                role: "working directory",
                ..
            }
        ),
        "{msg}"
    );
    assert!(msg.contains("working directory sub"), "{msg}");
}

#[test]
fn cwd_swapped_after_verification_still_runs_in_the_verified_directory() {
    let ws = Workspace::new();
    std::fs::create_dir(ws.path("sub")).unwrap();
    let cwd = FrozenDirectory {
        path: "sub".to_owned(),
    };
    let launch = exec::verify(&ws.root, &frozen_sh(&ws.root), &cwd).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::rename(ws.path("sub"), ws.path("sub.old")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), ws.path("sub")).unwrap();

    let outcome = exec::spawn(launch, ws.spec(&["sh", "-c", "touch here"], T))
        .unwrap()
        .wait();
    assert_eq!(outcome.exit, CommandExit::Code(0));
    assert!(ws.path("sub.old/here").exists());
    assert!(!elsewhere.path().join("here").exists());
}

#[test]
fn symlinked_path_entry_runs_through_its_canonical_target() {
    let ws = Workspace::new();
    // `/bin/sh` is a symbolic link (chain) here; the frozen identity is its target.
    assert!(
        std::fs::symlink_metadata("/bin/sh")
            .unwrap()
            .file_type()
            .is_symlink()
            || std::fs::symlink_metadata("/bin")
                .unwrap()
                .file_type()
                .is_symlink()
    );
    let program = frozen_sh(&ws.root);
    let FileLocation::Absolute { path, .. } = &program.file.location else {
        panic!("/bin/sh should freeze as an absolute file");
    };
    assert_ne!(path, "/bin/sh");
    let outcome = run_sh(&ws, "echo ok", T);
    assert_eq!(outcome.exit, CommandExit::Code(0));
    assert_eq!(read(&outcome.stdout.path), "ok\n");

    // Freezing the link itself instead of its target fails closed.
    let mut through_link = program.clone();
    through_link.file.location = FileLocation::Absolute {
        path: "/bin/sh".to_owned(),
        device: 0,
        inode: 0,
    };
    let err = exec::verify(&ws.root, &through_link, &root_dir()).unwrap_err();
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
}

#[test]
fn missing_executable_and_directory_are_reported_by_path() {
    let ws = Workspace::new();
    let tool = ws.write("tool.sh", &script("ran", "x"));
    let program = freeze_executable(&ws.root, &tool);
    std::fs::remove_file(&tool).unwrap();
    let err = exec::verify(&ws.root, &program, &root_dir()).unwrap_err();
    assert!(err.to_string().contains("executable tool.sh"), "{err}");

    let err = exec::verify(
        &ws.root,
        &frozen_sh(&ws.root),
        &FrozenDirectory {
            path: "nope".to_owned(),
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("working directory nope"), "{err}");
    assert!(!Path::new(&ws.path("ran")).exists());
}

/// `(device, inode)` of a directory, as planning records it.
fn identity_of(path: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(path).unwrap();
    (meta.dev(), meta.ino())
}

#[test]
fn another_real_directory_at_the_frozen_cwd_path_is_refused() {
    let ws = Workspace::new();
    std::fs::create_dir(ws.path("sub")).unwrap();
    let cwd = FrozenDirectory {
        path: "sub".to_owned(),
    };
    let expected = ExpectedDirectories {
        workspace: Some(identity_of(&ws.root)),
        cwd: Some(identity_of(&ws.path("sub"))),
    };
    assert!(exec::verify_in(&ws.root, expected, &frozen_sh(&ws.root), &cwd).is_ok());
    // Not a link: a different real directory under the same name.
    std::fs::rename(ws.path("sub"), ws.path("sub.old")).unwrap();
    std::fs::create_dir(ws.path("sub")).unwrap();
    let err = exec::verify_in(&ws.root, expected, &frozen_sh(&ws.root), &cwd).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(
            err,
            VerifyError::Changed {
                role: "working directory",
                ..
            }
        ) && msg.contains("working directory sub changed: another directory is there"),
        "{msg}"
    );
}

#[test]
fn a_workspace_swapped_for_another_directory_is_refused_at_launch() {
    let outer = tempfile::tempdir().unwrap();
    let root = outer.path().canonicalize().unwrap().join("ws");
    std::fs::create_dir(&root).unwrap();
    let expected = ExpectedDirectories {
        workspace: Some(identity_of(&root)),
        cwd: Some(identity_of(&root)),
    };
    let sh = frozen_sh(&root);
    let cwd = FrozenDirectory {
        path: ".".to_owned(),
    };
    assert!(exec::verify_in(&root, expected, &sh, &cwd).is_ok());
    std::fs::rename(&root, outer.path().join("ws.old")).unwrap();
    std::fs::create_dir(&root).unwrap();
    let err = exec::verify_in(&root, expected, &sh, &cwd).unwrap_err();
    assert!(
        err.to_string().starts_with("workspace ")
            && err
                .to_string()
                .contains("changed: another directory is there"),
        "{err}"
    );
}

/// A launch made on the calling thread (as the workflow runner's workers make them) runs,
/// captures and is stopped at its timeout like one made on the spawner thread; and the
/// calling thread's signal mask is what it was before.
#[test]
fn a_command_launched_on_the_calling_thread_is_supervised_the_same() {
    let ws = Workspace::new();
    let mut spec = ws.spec(&["sh", "-c", "echo \"parent $PPID\""], T);
    spec.launch_on_this_thread = true;
    let mask_before = std::fs::read_to_string("/proc/thread-self/status")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("SigBlk:"))
        .unwrap()
        .to_owned();
    let outcome = run(&ws, &frozen_sh(&ws.root), &root_dir(), spec);
    assert_eq!(outcome.exit, CommandExit::Code(0));
    assert_eq!(
        read(&outcome.stdout.path),
        format!("parent {}\n", std::process::id())
    );
    let mask_after = std::fs::read_to_string("/proc/thread-self/status")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("SigBlk:"))
        .unwrap()
        .to_owned();
    assert_eq!(mask_before, mask_after);

    let mut spec = ws.spec(&["sh", "-c", "sleep 30"], Duration::from_millis(300));
    spec.launch_on_this_thread = true;
    spec.kill_grace = Duration::from_millis(100);
    let outcome = run(&ws, &frozen_sh(&ws.root), &root_dir(), spec);
    assert_eq!(outcome.exit, CommandExit::Timeout);
    assert!(eventually_gone(outcome.process.pid));
}
