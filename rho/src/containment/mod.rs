//! Containment of whole process trees in cgroup v2: a process that calls `setsid` or
//! double-forks leaves its process group, but never its cgroup.
//!
//! Where this process can create cgroups (a delegated, writable cgroup v2 hierarchy: found
//! from `/proc/self/cgroup` and `/proc/self/mountinfo`, not assumed), it keeps them under
//! one directory of its own, `<its cgroup>/rho-<pid>-<start time>` ([`OwnerRoot`]). Each
//! contained tree gets a [`Cgroup`] below it. The executor's spawner creates a child inside
//! it (`clone3` with `CLONE_INTO_CGROUP` and [`Cgroup::dir_handle`]); other children join
//! it between `fork` and `exec` by writing `0` to a `cgroup.procs` descriptor opened
//! beforehand ([`Cgroup::join_handle`]). Either way nothing the child starts can ever be
//! outside it. Stopping writes `cgroup.kill`, which
//! reaches every member at once however it detached. The executor's guardian holds the
//! owner root's `cgroup.kill` too, so every tree dies with the owner.
//!
//! A durable record names a cgroup by its hierarchy path ([`Cgroup::path`]); a later process
//! checks it with [`check_empty`] before it may start another writer (recovery, `delete`).
//! A cgroup that no longer exists is empty: the kernel refuses to remove a populated one.
//! Empty directories left by owners that died are removed by the next owner.
//!
//! How a tool contains a process tree:
//! ```no_run
//! # fn demo() -> Result<(), rho::containment::ContainmentError> {
//! use rho::containment::{Cgroup, owner_root};
//! let root = owner_root()?;                    // Err: no delegated cgroup v2 here
//! let tree: Cgroup = root.create("tool-42")?;  // an empty cgroup for one tree
//! let dir = tree.dir_handle()?;                // pass to the spawner (the child starts inside)
//! // ... the tree runs ...
//! tree.kill_and_wait(std::time::Duration::from_secs(5))?; // every member, escaped or not
//! tree.remove()?;
//! # drop(dir); Ok(()) }
//! ```
//!
//! Where no delegated cgroup v2 exists, or `RHO_CONTAINMENT=subreaper` asks for it, the
//! fallback is [`tracked`]: the owner and each tree's leader are child subreapers and the
//! owner records every descendant's identity (pid and start time) as it appears; [`Tree`]
//! is either kind, and [`contain`] picks one.
//!
//! What it does not stop: a member with write access to another part of the hierarchy (a
//! node running as root can write its pid into any `cgroup.procs`) can move itself out.
//!
//! Invariant: a cgroup is reported empty only when the kernel says it is unpopulated (its
//! `cgroup.events`) or it does not exist; anything unreadable counts as occupied.

pub(crate) mod child;
pub(crate) mod hierarchy;
pub mod tracked;

use std::fs::{self, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

pub use hierarchy::cgroup_name;
pub use tracked::TrackedTree;

/// Why containment is unavailable or an operation on a cgroup failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ContainmentError {
    /// No delegated, writable cgroup v2 hierarchy is available to this process.
    #[error("cgroup v2 containment is unavailable: {reason}")]
    Unavailable {
        /// What is missing (no mount, not writable, ...).
        reason: String,
    },
    /// A cgroup file or directory could not be created, read or written.
    #[error("cannot {action} {path}: {message}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's message.
        message: String,
    },
    /// A recorded cgroup path is not an absolute hierarchy path or is outside rho's area.
    #[error("invalid cgroup path `{path}`: {reason}")]
    InvalidPath {
        /// The path as recorded.
        path: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// Processes are still in the cgroup.
    #[error(
        "cgroup {path} still holds process(es) {pids} (stop them all with \
         `echo 1 > {}/cgroup.kill`)", directory.display()
    )]
    Populated {
        /// The cgroup's hierarchy path.
        path: String,
        /// Its directory in this process's view of the hierarchy.
        directory: PathBuf,
        /// The member pids, as listed (may be empty when only a listing failed).
        pids: String,
    },
    /// Tracked descendants (the subreaper fallback) still run.
    #[error("process(es) {pids} of {tree} still run (stop them with `kill -KILL {kill}`)")]
    Alive {
        /// The tree (and where its record is).
        tree: String,
        /// The live pids, comma separated.
        pids: String,
        /// The same, space separated for `kill`.
        kill: String,
    },
}

impl ContainmentError {
    fn alive(tree: String, pids: &[i32]) -> Self {
        let list = |sep: &str| {
            pids.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(sep)
        };
        ContainmentError::Alive {
            tree,
            pids: list(", "),
            kill: list(" "),
        }
    }

    /// Whether this error says processes still live (rather than that it cannot be told).
    pub fn is_alive(&self) -> bool {
        matches!(
            self,
            ContainmentError::Populated { .. } | ContainmentError::Alive { .. }
        )
    }

    fn io(action: &'static str, path: &Path, e: &io::Error) -> Self {
        ContainmentError::Io {
            action,
            path: path.to_owned(),
            message: e.to_string(),
        }
    }
}

/// The cgroup v2 hierarchy as this process sees it.
#[derive(Debug)]
struct Hierarchy {
    mounts: Vec<hierarchy::Mount>,
}

impl Hierarchy {
    fn read() -> Result<Self, ContainmentError> {
        let info = fs::read_to_string("/proc/self/mountinfo").map_err(|e| {
            ContainmentError::Unavailable {
                reason: format!("cannot read /proc/self/mountinfo: {e}"),
            }
        })?;
        let mounts = hierarchy::cgroup2_mounts(&info);
        if mounts.is_empty() {
            return Err(ContainmentError::Unavailable {
                reason: "no cgroup2 file system is mounted".to_owned(),
            });
        }
        Ok(Self { mounts })
    }

    fn directory(&self, path: &str) -> Result<PathBuf, ContainmentError> {
        hierarchy::directory_of(&self.mounts, path).ok_or_else(|| ContainmentError::InvalidPath {
            path: path.to_owned(),
            reason: "no cgroup2 mount of this process shows it",
        })
    }
}

/// The directory this process keeps its cgroups in: `<own cgroup>/rho-<pid>-<start>`.
#[derive(Debug)]
pub struct OwnerRoot {
    /// Hierarchy path.
    path: String,
    dir: PathBuf,
    /// Whether `cgroup.kill` exists (Linux 5.14); otherwise members are killed one by one.
    has_kill: bool,
}

static OWNER_ROOT: OnceLock<Result<OwnerRoot, ContainmentError>> = OnceLock::new();

/// The variable that selects how trees are contained: `auto` (or unset: a cgroup where one
/// can be made, else the subreaper fallback) or `subreaper` (the fallback even where
/// cgroups are delegated).
pub const MODE_VARIABLE: &str = "RHO_CONTAINMENT";

/// How trees are contained in this process, from [`MODE_VARIABLE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A cgroup where possible, else the subreaper fallback.
    Auto,
    /// Always the subreaper fallback.
    Subreaper,
}

static MODE: OnceLock<Result<Mode, ContainmentError>> = OnceLock::new();

/// Selects the mode of this process instead of [`MODE_VARIABLE`] (a program embedding rho,
/// or a test that needs the fallback where cgroups are delegated). Call it before anything
/// is contained; `false` when the mode was already settled otherwise.
pub fn select_mode(mode: Mode) -> bool {
    MODE.get_or_init(|| Ok(mode))
        .as_ref()
        .is_ok_and(|settled| *settled == mode)
}

/// The mode of this process: from [`select_mode`], else [`MODE_VARIABLE`]; an error names
/// a value of the variable that is neither mode.
pub fn mode() -> Result<Mode, ContainmentError> {
    MODE.get_or_init(|| match std::env::var(MODE_VARIABLE) {
        Err(std::env::VarError::NotPresent) => Ok(Mode::Auto),
        Ok(v) if v.is_empty() || v == "auto" => Ok(Mode::Auto),
        Ok(v) if v == "subreaper" => Ok(Mode::Subreaper),
        Ok(v) => Err(ContainmentError::Unavailable {
            reason: format!("{MODE_VARIABLE}=`{v}` is neither `auto` nor `subreaper`"),
        }),
        Err(e) => Err(ContainmentError::Unavailable {
            reason: format!("{MODE_VARIABLE} is not valid: {e}"),
        }),
    })
    .clone()
}

/// This process's owner root, created on first use. An error says why this process cannot
/// contain trees in cgroups (it is the same error every time); under
/// `RHO_CONTAINMENT=subreaper` it is always an error.
pub fn owner_root() -> Result<&'static OwnerRoot, ContainmentError> {
    if mode()? == Mode::Subreaper {
        return Err(ContainmentError::Unavailable {
            reason: format!("{MODE_VARIABLE}=subreaper selects the subreaper fallback"),
        });
    }
    OWNER_ROOT
        .get_or_init(OwnerRoot::establish)
        .as_ref()
        .map_err(Clone::clone)
}

/// One contained process tree: a cgroup, or the tracked descendants of a subreaper.
#[derive(Debug, Clone)]
pub enum Tree {
    /// The tree runs in this cgroup.
    Cgroup(Cgroup),
    /// The tree's descendants are tracked by identity (no cgroup available).
    Tracked(Arc<TrackedTree>),
}

/// Contains a new tree named `name`: in a cgroup below the owner root where one can be
/// made, else tracked (with `record`, an append-only file, naming every descendant). The
/// error says why neither is possible.
pub fn contain(name: &str, record: Option<(fs::File, PathBuf)>) -> Result<Tree, ContainmentError> {
    match owner_root() {
        Ok(root) => root.create(name).map(Tree::Cgroup),
        Err(e) => {
            mode()?;
            tracing::debug!("{e}; tracking the tree's descendants instead");
            TrackedTree::new(name, record).map(Tree::Tracked)
        }
    }
}

impl Tree {
    /// The cgroup, when the tree is in one.
    pub fn cgroup(&self) -> Option<&Cgroup> {
        match self {
            Tree::Cgroup(c) => Some(c),
            Tree::Tracked(_) => None,
        }
    }

    /// The directory of the tree's cgroup, for the executor's spawner to create a child
    /// in it (see [`Cgroup::dir_handle`]); `None` for a tracked tree.
    pub fn dir_handle(&self) -> Result<Option<OwnedFd>, ContainmentError> {
        match self {
            Tree::Cgroup(c) => c.dir_handle().map(Some),
            Tree::Tracked(_) => Ok(None),
        }
    }

    /// The descriptor a child writes `0` to, between `fork` and `exec`, to join the
    /// tree's cgroup; `None` for a tracked tree.
    pub fn join_handle(&self) -> Result<Option<OwnedFd>, ContainmentError> {
        match self {
            Tree::Cgroup(c) => c.join_handle().map(Some),
            Tree::Tracked(_) => Ok(None),
        }
    }

    /// For a tracked tree, the tag its leader carries (0: none); the leader must become a
    /// child subreaper before `exec` (see [`child::enter_tracked`]).
    pub fn leader_tag(&self) -> Option<u64> {
        match self {
            Tree::Cgroup(_) => None,
            Tree::Tracked(t) => Some(t.tag()),
        }
    }

    /// The leader `pid`, started at `start` (clock ticks), is running.
    pub fn started(&self, pid: i32, start: u64) {
        if let Tree::Tracked(t) = self {
            t.started(pid, start);
        }
    }

    /// Sends `signal` to every member.
    pub fn signal_members(&self, signal: i32) {
        match self {
            Tree::Cgroup(c) => c.signal_members(signal),
            Tree::Tracked(t) => t.signal_members(signal),
        }
    }

    /// Sends SIGKILL to every member without waiting.
    pub fn kill(&self) -> Result<(), ContainmentError> {
        match self {
            Tree::Cgroup(c) => c.kill(),
            Tree::Tracked(t) => {
                t.kill();
                Ok(())
            }
        }
    }

    /// Kills every member and waits until none lives, at most `limit`.
    pub fn kill_and_wait(&self, limit: Duration) -> Result<(), ContainmentError> {
        match self {
            Tree::Cgroup(c) => c.kill_and_wait(limit),
            Tree::Tracked(t) => t.kill_and_wait(limit),
        }
    }

    /// Whether a member still lives (an unreadable cgroup counts as populated).
    pub fn populated(&self) -> bool {
        match self {
            Tree::Cgroup(c) => c.populated().unwrap_or(true),
            Tree::Tracked(t) => t.populated(),
        }
    }

    /// Ends the containment (removes the emptied cgroup, stops tracking).
    pub fn remove(&self) -> Result<(), ContainmentError> {
        match self {
            Tree::Cgroup(c) => c.remove(),
            Tree::Tracked(t) => {
                t.remove();
                Ok(())
            }
        }
    }
}

impl OwnerRoot {
    fn establish() -> Result<Self, ContainmentError> {
        let unavailable = |reason: String| ContainmentError::Unavailable { reason };
        let own = fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| unavailable(format!("cannot read /proc/self/cgroup: {e}")))?;
        let own = hierarchy::own_cgroup(&own).ok_or_else(|| {
            unavailable("this process is in no cgroup v2 (no `0::` line)".to_owned())
        })?;
        let hier = Hierarchy::read()?;
        let parent = hier.directory(&own).map_err(|_| {
            unavailable(format!(
                "this process's cgroup {own} is not visible under any cgroup2 mount"
            ))
        })?;
        let pid = i32::try_from(std::process::id())
            .map_err(|_| unavailable("pid out of range".to_owned()))?;
        let (start, _) = crate::workflow::exec::process_start_time(pid)
            .map_err(|e| unavailable(format!("cannot read this process's start time: {e}")))?;
        let name = hierarchy::owner_dir_name(pid, start);
        sweep_dead_owners(&parent, &name);
        let dir = parent.join(&name);
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(unavailable(format!(
                    "cannot create {} (the hierarchy is not delegated to this user): {e}",
                    dir.display()
                )));
            }
        }
        // Moving a process needs write access to cgroup.procs of the common ancestor.
        if let Err(e) = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(parent.join("cgroup.procs"))
        {
            let _ = fs::remove_dir(&dir);
            return Err(unavailable(format!(
                "cannot move processes out of {}: {e}",
                parent.display()
            )));
        }
        let path = if own == "/" {
            format!("/{name}")
        } else {
            format!("{own}/{name}")
        };
        let has_kill = dir.join("cgroup.kill").exists();
        tracing::debug!(cgroup = %path, has_kill, "cgroup containment available");
        Ok(Self {
            path,
            dir,
            has_kill,
        })
    }

    /// The hierarchy path of this root.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The hierarchy path a child cgroup named `name` (see [`cgroup_name`]) would have.
    pub fn child_path(&self, name: &str) -> String {
        format!("{}/{}", self.path, cgroup_name(name))
    }

    /// Creates (or reuses, when it exists and is empty) the cgroup `name` below this root.
    pub fn create(&self, name: &str) -> Result<Cgroup, ContainmentError> {
        let name = cgroup_name(name);
        let mut cgroup = Cgroup {
            path: format!("{}/{name}", self.path),
            dir: self.dir.join(&name),
            has_kill: self.has_kill,
            events: None,
        };
        match fs::create_dir(&cgroup.dir) {
            Ok(()) => {
                // Opened now, while the tree is prepared, so the check at its end (on the
                // path from one node to the next) is a single read; a cgroup whose file
                // cannot be opened is checked by path as before.
                cgroup.events = fs::File::open(cgroup.dir.join("cgroup.events"))
                    .ok()
                    .map(Arc::new);
                Ok(cgroup)
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                if cgroup.populated()? {
                    Err(cgroup.occupied())
                } else {
                    Ok(cgroup)
                }
            }
            Err(e) => Err(ContainmentError::io("create cgroup", &cgroup.dir, &e)),
        }
    }

    /// Opens this root's `cgroup.kill` for writing, for a process that must kill every
    /// tree later without resolving a path (the executor's guardian); `None` on kernels
    /// without `cgroup.kill` (before 5.14).
    pub(crate) fn kill_handle(&self) -> io::Result<Option<OwnedFd>> {
        if !self.has_kill {
            return Ok(None);
        }
        let f = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(self.dir.join("cgroup.kill"))?;
        Ok(Some(OwnedFd::from(f)))
    }
}

/// Removes the empty cgroups of owners that are gone (the kernel refuses to remove a
/// populated one, so a tree that outlived its owner stays for recovery to find).
fn sweep_dead_owners(parent: &Path, own_name: &str) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name == own_name {
            continue;
        }
        let Some((pid, start)) = hierarchy::parse_owner_dir_name(name) else {
            continue;
        };
        if crate::workflow::exec::process_alive(pid, start) {
            continue;
        }
        remove_empty_tree(&entry.path());
    }
}

/// Removes `dir` and every cgroup below it that is empty, deepest first; a populated one
/// (and so its ancestors) stays.
fn remove_empty_tree(dir: &Path) -> bool {
    // Almost always a node's cgroup has no cgroup below it: one `rmdir` then, instead of
    // listing it first (four more system calls per attempt). The kernel refuses to remove
    // a cgroup with a child cgroup or a process, so a refusal falls back to the walk.
    if fs::remove_dir(dir).is_ok() {
        return true;
    }
    let mut all = true;
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                all &= remove_empty_tree(&entry.path());
            }
        }
    }
    all && fs::remove_dir(dir).is_ok()
}

/// One cgroup holding one process tree (a clone names the same cgroup).
#[derive(Debug, Clone)]
pub struct Cgroup {
    path: String,
    dir: PathBuf,
    has_kill: bool,
    /// `cgroup.events`, kept open by the cgroup's creator (the kernel regenerates its
    /// content at every read from offset 0).
    events: Option<Arc<fs::File>>,
}

/// How long [`Cgroup::kill_and_wait`] sleeps between checks at most.
const KILL_POLL_MAX: Duration = Duration::from_millis(10);

impl Cgroup {
    /// Opens the existing cgroup at hierarchy path `path`; `None` when it does not exist
    /// (it was removed, which the kernel allows only once it was empty).
    pub fn open(path: &str) -> Result<Option<Self>, ContainmentError> {
        if !hierarchy::is_clean(path) || path == "/" {
            return Err(ContainmentError::InvalidPath {
                path: path.to_owned(),
                reason: "not an absolute cgroup path below the root",
            });
        }
        let dir = Hierarchy::read()?.directory(path)?;
        match fs::symlink_metadata(&dir) {
            Ok(meta) if meta.is_dir() => Ok(Some(Self {
                path: path.to_owned(),
                has_kill: dir.join("cgroup.kill").exists(),
                dir,
                events: None,
            })),
            Ok(_) => Err(ContainmentError::InvalidPath {
                path: path.to_owned(),
                reason: "not a directory",
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(ContainmentError::io("inspect cgroup", &dir, &e)),
        }
    }

    /// The hierarchy path, as durable records name it.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The cgroup's directory, opened for reading: a child created with `clone3`'s
    /// `CLONE_INTO_CGROUP` and this descriptor starts inside the cgroup (the executor's
    /// spawner does; it falls back to [`Cgroup::join_handle`]'s way through it).
    pub fn dir_handle(&self) -> Result<OwnedFd, ContainmentError> {
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(&self.dir)
            .map(OwnedFd::from)
            .map_err(|e| ContainmentError::io("open", &self.dir, &e))
    }

    /// `cgroup.procs`, opened for writing: a child that writes `0` to it between `fork` and
    /// `exec` joins this cgroup (with everything it will ever start).
    pub fn join_handle(&self) -> Result<OwnedFd, ContainmentError> {
        let path = self.dir.join("cgroup.procs");
        OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(&path)
            .map(OwnedFd::from)
            .map_err(|e| ContainmentError::io("open", &path, &e))
    }

    /// Whether any live process is in this cgroup or below it (`cgroup.events`).
    pub fn populated(&self) -> Result<bool, ContainmentError> {
        if let Some(events) = &self.events
            && let Some(populated) = read_populated(events)
        {
            return Ok(populated);
        }
        let path = self.dir.join("cgroup.events");
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            // Removed meanwhile: only an empty cgroup can be removed.
            Err(e) if e.kind() == io::ErrorKind::NotFound && !self.dir.exists() => {
                return Ok(false);
            }
            Err(e) => return Err(ContainmentError::io("read", &path, &e)),
        };
        text.lines()
            .find_map(|l| l.strip_prefix("populated "))
            .map(|v| v.trim() != "0")
            .ok_or_else(|| ContainmentError::Io {
                action: "parse",
                path,
                message: "no `populated` line".to_owned(),
            })
    }

    /// The pids in this cgroup and below it.
    pub fn members(&self) -> Result<Vec<i32>, ContainmentError> {
        let mut pids = Vec::new();
        collect_members(&self.dir, &mut pids)?;
        pids.sort_unstable();
        pids.dedup();
        Ok(pids)
    }

    fn occupied(&self) -> ContainmentError {
        ContainmentError::Populated {
            path: self.path.clone(),
            directory: self.dir.clone(),
            pids: self.describe_members(),
        }
    }

    fn describe_members(&self) -> String {
        match self.members() {
            Ok(pids) if pids.is_empty() => "(none listed; the kernel still counts some)".to_owned(),
            Ok(pids) => pids
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            Err(e) => format!("(cannot list them: {e})"),
        }
    }

    /// Sends `signal` to every member that is still in this cgroup when it is signalled:
    /// each pid is pinned with a pidfd and its membership checked again through it, so a
    /// pid reused by an unrelated process is never signalled.
    pub fn signal_members(&self, signal: i32) {
        let Ok(pids) = self.members() else { return };
        for pid in pids {
            #[cfg(target_os = "linux")]
            {
                let Ok(pidfd) = crate::workflow::exec::spawner::pidfd_open(pid) else {
                    continue;
                };
                let inside = fs::read_to_string(format!("/proc/{pid}/cgroup"))
                    .ok()
                    .and_then(|t| hierarchy::own_cgroup(&t))
                    .is_some_and(|p| p == self.path || p.starts_with(&format!("{}/", self.path)));
                if inside {
                    crate::workflow::exec::spawner::pidfd_send_signal(&pidfd, signal);
                }
            }
        }
    }

    /// Sends SIGKILL to every member at once (`cgroup.kill`; member by member on kernels
    /// before 5.14). Returns without waiting for them to be gone.
    pub fn kill(&self) -> Result<(), ContainmentError> {
        if self.has_kill {
            let path = self.dir.join("cgroup.kill");
            let written = OpenOptions::new()
                .write(true)
                .open(&path)
                .and_then(|mut f| f.write_all(b"1"));
            return match written {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == io::ErrorKind::NotFound && !self.dir.exists() => Ok(()),
                Err(e) => Err(ContainmentError::io("write", &path, &e)),
            };
        }
        self.signal_members(libc::SIGKILL);
        Ok(())
    }

    /// Kills every member and waits until the kernel reports the cgroup unpopulated, at
    /// most `limit`; [`ContainmentError::Populated`] when something is still there.
    pub fn kill_and_wait(&self, limit: Duration) -> Result<(), ContainmentError> {
        let deadline = Instant::now() + limit;
        let mut pause = Duration::from_micros(200);
        loop {
            if !self.populated()? {
                return Ok(());
            }
            // Again each round: without cgroup.kill a member may have forked meanwhile.
            self.kill()?;
            if Instant::now() >= deadline {
                return Err(self.occupied());
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(KILL_POLL_MAX);
        }
    }

    /// Removes the cgroup (and empty cgroups below it). Fails while it is populated.
    pub fn remove(&self) -> Result<(), ContainmentError> {
        if remove_empty_tree(&self.dir) || !self.dir.exists() {
            return Ok(());
        }
        match fs::remove_dir(&self.dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(ContainmentError::io("remove cgroup", &self.dir, &e)),
        }
    }
}

/// The `populated` value of an open `cgroup.events`, read from its start; `None` when it
/// cannot be read or parsed (the caller then reads it by path, which tells a removed cgroup
/// from an unreadable one).
fn read_populated(events: &fs::File) -> Option<bool> {
    use std::os::unix::fs::FileExt as _;
    // `populated 0\nfrozen 0\n`: far below the buffer; a longer file is read by path.
    let mut buf = [0_u8; 128];
    let n = events.read_at(&mut buf, 0).ok()?;
    if n == 0 || n == buf.len() {
        return None;
    }
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("populated "))
        .map(|v| v.trim() != "0")
}

fn collect_members(dir: &Path, pids: &mut Vec<i32>) -> Result<(), ContainmentError> {
    let procs = dir.join("cgroup.procs");
    let mut text = String::new();
    match fs::File::open(&procs).and_then(|mut f| f.read_to_string(&mut text)) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound && !dir.exists() => return Ok(()),
        Err(e) => return Err(ContainmentError::io("read", &procs, &e)),
    }
    pids.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                collect_members(&entry.path(), pids)?;
            }
        }
    }
    Ok(())
}

/// Checks that the cgroup a durable record names holds no live process: `Ok` when it is
/// unpopulated or gone (removing it when empty), [`ContainmentError::Populated`] with the
/// member pids when something lives, and any other error when it cannot be told (which a
/// caller must treat as "possibly alive").
pub fn check_empty(recorded: &str) -> Result<(), ContainmentError> {
    // Only a cgroup rho made (below an owner root) is ever removed here.
    let parent = recorded.rsplit('/').nth(1).unwrap_or_default();
    if hierarchy::parse_owner_dir_name(parent).is_none() {
        return Err(ContainmentError::InvalidPath {
            path: recorded.to_owned(),
            reason: "not below an owner's `rho-<pid>-<start>` cgroup",
        });
    }
    let Some(cgroup) = Cgroup::open(recorded)? else {
        return Ok(());
    };
    if cgroup.populated()? {
        return Err(cgroup.occupied());
    }
    if let Err(e) = cgroup.remove() {
        tracing::debug!("leaving empty cgroup in place: {e}");
    }
    Ok(())
}
