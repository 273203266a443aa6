//! The fallback where no delegated cgroup v2 exists (or `RHO_CONTAINMENT=subreaper`): the
//! owner is a child subreaper and tracks each tree's descendants by identity.
//!
//! Each tree's leader is made a child subreaper too (the spawner sets it between `fork` and
//! `exec`; the attribute survives `execve`), so while the leader lives, a descendant whose
//! parent exits (a double fork) is reparented to the leader instead of to init, and a
//! `setsid` never takes a process out of the leader's subtree. One tracker thread walks
//! every tree from its leader through `/proc/<pid>/task/*/children` every [`POLL`] and
//! records each new descendant as `pid start_time` in the tree's record (an append-only
//! file in the attempt directory: a write survives the death of the owner, which is all
//! a later `resume --recover-uncertain` or `delete` needs to decide by pid and start
//! time that none of them still runs). When the leader exits, what is left of its subtree
//! is reparented to the owner (a subreaper as well), where the tracker still finds it by
//! identity, process group or tag, and reaps it once it is dead.
//!
//! Each tree also carries a tag: its leader's `RLIMIT_RTTIME` soft limit is set to a
//! random value at or above [`TAG_BASE`] microseconds (more than 35 years of real-time CPU
//! without blocking: it never binds), which every descendant inherits across `fork`,
//! `exec` and `setsid`, and which `/proc/<pid>/limits` shows to anyone. A process handed to
//! the owner unseen (its parent and the leader exited between two walks) is recognised by
//! the tag, and a later process scans `/proc` for it besides checking the recorded
//! identities, so even a descendant the owner never saw before it died is found.
//! The tag is the first line of the record (`tag N`). The tags of one owner share their
//! high bits ([`owner_tags`]), so when the owner dies outright, its exec guardian (a process
//! of its own that outlives it) kills every process carrying one of them.
//!
//! Stopping a tree first freezes it (SIGSTOP to the group and to every known member, then
//! a fresh walk, until a walk finds nothing new: a stopped process cannot fork), then sends
//! SIGKILL to all of them, each through a pidfd after checking its start time, so a reused
//! pid is never signalled.
//!
//! A process adopted by the owner that belongs to no tree (the orphan of a hook or of an
//! agent runtime's child, which the owner now receives as a subreaper) is left alone: it
//! cannot be told from a child the owner started itself and will wait for, so if it dies
//! it stays a zombie until the owner exits.
//!
//! What it does not see: a descendant that changes its `RLIMIT_RTTIME` (or runs where the
//! hard limit is below the tag) and also leaves the group and loses its parent and leader
//! between two walks; a process moved by a privileged helper.
//!
//! Invariant: a process is reported gone only when `/proc` says the recorded pid now has
//! another start time, is a zombie or does not exist; anything unreadable counts as alive.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::ContainmentError;
use crate::workflow::exec::{process_alive, process_start_time};

/// How often the tracker walks every tree.
pub const POLL: Duration = Duration::from_millis(10);

/// Name of the record file in an attempt directory.
pub const RECORD_FILE: &str = "descendants";

/// The lowest tag (microseconds of `RLIMIT_RTTIME`): 2^50 µs, about 35 years.
pub const TAG_BASE: u64 = 1 << 50;

/// A tag is `TAG_BASE | owner << TREE_BITS | tree`: the low bits number the owner's trees,
/// the bits above them are random per owner, so the exec guardian can find every tree of
/// its owner by [`owner_tags`] alone.
pub const TREE_BITS: u32 = 24;

/// The tag bits shared by every tree of this process (`TAG_BASE` and the random owner
/// part); a tag `t` is this owner's when `t >> TREE_BITS == owner_tags() >> TREE_BITS`.
pub fn owner_tags() -> u64 {
    static OWNER: OnceLock<u64> = OnceLock::new();
    *OWNER.get_or_init(|| {
        let random = uuid::Uuid::new_v4().as_u64_pair().0;
        TAG_BASE | ((random << TREE_BITS) & (TAG_BASE - 1))
    })
}

/// A process identity: pid and start time (clock ticks after boot).
type Identity = (i32, u64);

/// One tree's tracked processes.
#[derive(Debug)]
pub struct TrackedTree {
    label: String,
    tag: u64,
    state: Mutex<TreeState>,
}

#[derive(Debug, Default)]
struct TreeState {
    leader: Option<Identity>,
    /// Every descendant seen and not yet known dead (the leader is not among them).
    known: BTreeMap<i32, u64>,
    record: Option<(File, PathBuf)>,
    /// A descendant could not be recorded: the tree is stopped as soon as this is seen.
    record_failed: bool,
}

struct Tracker {
    trees: Mutex<Vec<Weak<TrackedTree>>>,
    /// Dead members that may still become zombies of this process: reaped when they do.
    retired: Mutex<Vec<Identity>>,
}

static TRACKER: OnceLock<Result<Tracker, ContainmentError>> = OnceLock::new();

fn tracker() -> Result<&'static Tracker, ContainmentError> {
    TRACKER
        .get_or_init(Tracker::start)
        .as_ref()
        .map_err(Clone::clone)
}

/// Whether this process can track trees (it becomes a child subreaper on the first call).
pub fn available() -> Result<(), ContainmentError> {
    tracker().map(drop)
}

impl Tracker {
    fn start() -> Result<Self, ContainmentError> {
        let unavailable = |reason: String| ContainmentError::Unavailable { reason };
        let me = std::process::id();
        let probe = format!("/proc/{me}/task/{me}/children");
        std::fs::read_to_string(&probe).map_err(|e| {
            unavailable(format!(
                "cannot read {probe} (a kernel without CONFIG_PROC_CHILDREN?): {e}"
            ))
        })?;
        nix::sys::prctl::set_child_subreaper(true)
            .map_err(|e| unavailable(format!("prctl(PR_SET_CHILD_SUBREAPER) failed: {e}")))?;
        std::thread::Builder::new()
            .name("rho-subreaper".to_owned())
            .spawn(|| {
                loop {
                    std::thread::sleep(POLL);
                    if let Ok(t) = tracker() {
                        t.pass();
                    }
                }
            })
            .map_err(|e| unavailable(format!("cannot start the tracker thread: {e}")))?;
        tracing::debug!("descendants tracked by a child subreaper");
        Ok(Tracker {
            trees: Mutex::new(Vec::new()),
            retired: Mutex::new(Vec::new()),
        })
    }

    fn live_trees(&self) -> Vec<Arc<TrackedTree>> {
        let mut trees = lock(&self.trees);
        trees.retain(|t| t.strong_count() > 0);
        trees.iter().filter_map(Weak::upgrade).collect()
    }

    /// One walk of every tree, then the reaping of dead members that are this process's.
    fn pass(&self) {
        let trees = self.live_trees();
        if trees.is_empty() && lock(&self.retired).is_empty() {
            return;
        }
        let adopted = own_children();
        for tree in trees {
            tree.scan(&adopted);
            if lock(&tree.state).record_failed {
                tree.signal_all(libc::SIGKILL);
            }
        }
        self.reap_retired();
    }

    fn reap_retired(&self) {
        let mut retired = lock(&self.retired);
        retired.retain(|&(pid, start)| match process_start_time(pid) {
            Ok((s, _)) if s == start => !reap_if_zombie_child(pid),
            _ => false,
        });
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The children of every thread of `pid` (`/proc/<pid>/task/*/children`).
fn children_of(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
    }
    out
}

fn own_children() -> Vec<i32> {
    children_of(i32::try_from(std::process::id()).unwrap_or(0))
}

/// The process group of `pid` (field 5 of `/proc/<pid>/stat`).
fn group_of(pid: i32) -> Option<i32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    rest.split_whitespace().nth(2)?.parse().ok()
}

/// The soft `RLIMIT_RTTIME` of `pid` when it is at least [`TAG_BASE`] (a tree's tag).
fn tag_of(pid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    parse_tag(&text)
}

fn parse_tag(limits: &str) -> Option<u64> {
    let line = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max realtime timeout"))?;
    let soft: u64 = line.split_whitespace().next()?.parse().ok()?;
    (soft >= TAG_BASE).then_some(soft)
}

/// Live processes (not zombies) anywhere in `/proc` that carry `tag`; `Err` when `/proc`
/// cannot be listed.
fn tagged_processes(tag: u64) -> std::io::Result<Vec<i32>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if tag_of(pid) == Some(tag)
            && process_start_time(pid).is_ok_and(|(_, state)| !matches!(state, 'Z' | 'X' | 'x'))
        {
            found.push(pid);
        }
    }
    Ok(found)
}

/// Reaps `pid` when it is a zombie child of this process; `true` once it is reaped (or is
/// not this process's child to reap).
fn reap_if_zombie_child(pid: i32) -> bool {
    use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
    match waitid(
        Id::Pid(nix::unistd::Pid::from_raw(pid)),
        WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG,
    ) {
        Ok(WaitStatus::StillAlive) | Err(nix::errno::Errno::EINTR) => false,
        Ok(_) | Err(_) => true,
    }
}

/// Sends `signal` to `pid` only if it still has `start` as its start time (pinned by a
/// pidfd, so the check and the signal concern the same process).
fn signal_identity(pid: i32, start: u64, signal: i32) {
    let Ok(pidfd) = crate::workflow::exec::spawner::pidfd_open(pid) else {
        return;
    };
    if process_start_time(pid).is_ok_and(|(s, _)| s == start) {
        crate::workflow::exec::spawner::pidfd_send_signal(&pidfd, signal);
    }
}

impl TrackedTree {
    /// A tree to track, registered with the tracker; `record` (an append-only file) is
    /// where the tree's tag and every descendant's identity are written as they are known.
    pub fn new(
        label: &str,
        record: Option<(File, PathBuf)>,
    ) -> Result<Arc<Self>, ContainmentError> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let tracker = tracker()?;
        let tree = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) & ((1 << TREE_BITS) - 1);
        let tag = owner_tags() | tree;
        let mut state = TreeState {
            record,
            ..TreeState::default()
        };
        if let Some((file, path)) = &mut state.record {
            file.write_all(format!("tag {tag}\n").as_bytes())
                .map_err(|e| ContainmentError::io("write", path, &e))?;
        }
        let tree = Arc::new(TrackedTree {
            label: label.to_owned(),
            tag,
            state: Mutex::new(state),
        });
        lock(&tracker.trees).push(Arc::downgrade(&tree));
        Ok(tree)
    }

    /// The tag the tree's processes carry (see the module documentation).
    pub fn tag(&self) -> u64 {
        self.tag
    }

    /// The tree's leader started: walking starts from it (and it is recorded too).
    pub fn started(&self, pid: i32, start: u64) {
        let mut state = lock(&self.state);
        state.leader = Some((pid, start));
        state.write_record(pid, start);
    }

    /// Walks the tree once: the leader's and every known member's children, and this
    /// process's children (`adopted`) that are known, in the tree's group or tagged.
    fn scan(&self, adopted: &[i32]) {
        let mut state = lock(&self.state);
        let Some((leader, leader_start)) = state.leader else {
            return;
        };
        let mut frontier: Vec<Identity> = vec![(leader, leader_start)];
        frontier.extend(state.known.iter().map(|(&p, &s)| (p, s)));
        for &pid in adopted {
            if pid == leader || state.known.contains_key(&pid) {
                continue;
            }
            if (group_of(pid) == Some(leader) || tag_of(pid) == Some(self.tag))
                && let Ok((start, _)) = process_start_time(pid)
            {
                state.add(pid, start);
                frontier.push((pid, start));
            }
        }
        while let Some((pid, start)) = frontier.pop() {
            let children = children_of(pid);
            // The list is `pid`'s only if `pid` is still the same process.
            if children.is_empty() || !process_start_time(pid).is_ok_and(|(s, _)| s == start) {
                continue;
            }
            for child in children {
                let Ok((child_start, _)) = process_start_time(child) else {
                    continue;
                };
                if state.known.get(&child) == Some(&child_start) {
                    continue;
                }
                state.add(child, child_start);
                frontier.push((child, child_start));
            }
        }
    }

    fn signal_all(&self, signal: i32) {
        let state = lock(&self.state);
        // Only while the leader (even as a zombie) keeps the group id from reuse.
        if let Some((leader, start)) = state.leader
            && process_start_time(leader).is_ok_and(|(s, _)| s == start)
        {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(leader),
                nix::sys::signal::Signal::try_from(signal).ok(),
            );
        }
        for (&pid, &start) in &state.known {
            signal_identity(pid, start, signal);
        }
    }

    /// Sends `signal` to the group and to every known descendant (after a fresh walk).
    pub fn signal_members(&self, signal: i32) {
        self.scan(&own_children());
        self.signal_all(signal);
    }

    /// Whether a known member still lives.
    pub fn populated(&self) -> bool {
        self.scan(&own_children());
        !self.alive().is_empty()
    }

    fn alive(&self) -> Vec<i32> {
        let mut state = lock(&self.state);
        let dead: Vec<Identity> = state
            .known
            .iter()
            .map(|(&p, &s)| (p, s))
            .filter(|&(p, s)| !process_alive(p, s))
            .collect();
        if !dead.is_empty() {
            if let Ok(t) = tracker() {
                lock(&t.retired).extend(dead.iter().copied());
            }
            for (pid, _) in dead {
                state.known.remove(&pid);
            }
        }
        state.known.keys().copied().collect()
    }

    /// Sends SIGKILL to every member at once after freezing the tree (see the module
    /// documentation); returns without waiting.
    pub fn kill(&self) {
        // A stopped process cannot fork: walk until a walk finds nobody new.
        for _ in 0..64 {
            let before = lock(&self.state).known.len();
            self.signal_all(libc::SIGSTOP);
            self.scan(&own_children());
            if lock(&self.state).known.len() == before {
                break;
            }
        }
        self.signal_all(libc::SIGKILL);
    }

    /// Kills every member and waits until none lives, at most `limit`;
    /// [`ContainmentError::Alive`] names what is still there.
    pub fn kill_and_wait(&self, limit: Duration) -> Result<(), ContainmentError> {
        let deadline = Instant::now() + limit;
        let mut pause = Duration::from_micros(200);
        loop {
            self.kill();
            let alive = self.alive();
            if let Ok(t) = tracker() {
                t.reap_retired();
            }
            if alive.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(ContainmentError::alive(self.describe(), &alive));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(10));
        }
    }

    /// The tree stops being tracked (its members are expected to be dead). Call it after
    /// the leader was reaped: what the leader held (zombies of members that exited
    /// unseen, in its group) was handed to this process then, and is reaped here.
    pub fn remove(&self) {
        let members: Vec<Identity> = {
            let mut state = lock(&self.state);
            let mut all: Vec<Identity> = state.known.iter().map(|(&p, &s)| (p, s)).collect();
            if let Some((leader, _)) = state.leader {
                for pid in own_children() {
                    if let Ok((start, 'Z')) = process_start_time(pid)
                        && group_of(pid) == Some(leader)
                    {
                        all.push((pid, start));
                    }
                }
            }
            state.known.clear();
            state.leader = None;
            all
        };
        if let Ok(t) = tracker() {
            lock(&t.retired).extend(members);
            t.reap_retired();
        }
    }

    fn describe(&self) -> String {
        let state = lock(&self.state);
        match &state.record {
            Some((_, path)) => format!("tree `{}` (recorded in {})", self.label, path.display()),
            None => format!("tree `{}`", self.label),
        }
    }
}

impl TreeState {
    fn add(&mut self, pid: i32, start: u64) {
        self.known.insert(pid, start);
        self.write_record(pid, start);
    }

    fn write_record(&mut self, pid: i32, start: u64) {
        if let Some((file, path)) = &mut self.record {
            // One write per line: a reader never sees half a line, and a written line
            // outlives this process (no fsync: the processes it names do not outlive the
            // machine).
            if let Err(e) = file.write_all(format!("{pid} {start}\n").as_bytes()) {
                tracing::error!(
                    "cannot record descendant {pid} in {}: {e}; stopping the tree",
                    path.display()
                );
                self.record_failed = true;
            }
        }
    }
}

/// Checks a tree's record (`text`, read from `path`): `Ok` when none of the processes it
/// names still runs and no live process carries its tag, [`ContainmentError::Alive`]
/// naming those that do, and another error when it cannot be told (which counts as alive).
pub fn check_record(text: &str, path: &Path) -> Result<(), ContainmentError> {
    let mut alive = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let malformed = |what: &str| ContainmentError::Io {
            action: "parse",
            path: path.to_owned(),
            message: format!("line {} is not `{what}`: {line:?}", n + 1),
        };
        if let Some(tag) = line.strip_prefix("tag ") {
            let tag: u64 = tag.parse().map_err(|_| malformed("tag N"))?;
            let tagged = tagged_processes(tag)
                .map_err(|e| ContainmentError::io("list processes in", Path::new("/proc"), &e))?;
            for pid in tagged {
                if !alive.contains(&pid) {
                    alive.push(pid);
                }
            }
            continue;
        }
        let parsed = line
            .split_once(' ')
            .and_then(|(p, s)| Some((p.parse::<i32>().ok()?, s.parse::<u64>().ok()?)));
        let Some((pid, start)) = parsed else {
            return Err(malformed("pid start_time"));
        };
        if process_alive(pid, start) && !alive.contains(&pid) {
            alive.push(pid);
        }
    }
    if alive.is_empty() {
        Ok(())
    } else {
        Err(ContainmentError::alive(
            format!("the descendants recorded in {}", path.display()),
            &alive,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_naming_a_live_process_is_refused_and_a_dead_one_is_not() {
        let me = i32::try_from(std::process::id()).unwrap();
        let (start, _) = process_start_time(me).unwrap();
        let path = Path::new("/run/x/descendants");
        let err = check_record(&format!("{me} {start}\n"), path).unwrap_err();
        assert!(matches!(err, ContainmentError::Alive { .. }), "{err}");
        assert!(err.to_string().contains(&me.to_string()), "{err}");
        // Same pid, another start time: a reused pid is not the recorded process.
        check_record(&format!("{me} {}\n\n", start + 1), path).unwrap();
        let err = check_record("12 x\n", path).unwrap_err();
        assert!(err.to_string().contains("line 1"), "{err}");
        let err = check_record("tag x\n", path).unwrap_err();
        assert!(err.to_string().contains("tag N"), "{err}");
    }

    #[test]
    fn the_tag_is_read_from_the_realtime_timeout_limit() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max realtime priority     0                    0                    \n\
                      Max realtime timeout      1125899906842725     unlimited            us        \n";
        assert_eq!(parse_tag(limits), Some(1_125_899_906_842_725));
        let untagged = limits.replace("1125899906842725", "unlimited");
        assert_eq!(parse_tag(&untagged), None);
        assert_eq!(parse_tag(&limits.replace("1125899906842725", "5000")), None);
    }
}
