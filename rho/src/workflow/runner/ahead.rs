//! Directories made ahead of the attempts that need them: a thread creates the store
//! directories of the first attempt of the nodes still to run (`nodes/<NODE>/attempts/1/`)
//! and, for a command or shell node where trees are contained in cgroups, the attempt's
//! empty cgroup, a few launches ahead of the owner. It hands both over already open
//! ([`Made`]), so such an attempt creates and opens no directory at all instead of three
//! (each opened and checked level by level) plus the cgroup. Creating a directory is among
//! the costliest steps of a trivial attempt (an inode and a directory block on ext4; a
//! cgroup's kernel state), and on a run of one node after another the second core is
//! otherwise idle.
//!
//! Invariant: the thread never gets more than [`AHEAD`] nodes ahead of the launches, it is
//! stopped and joined before the owner closes the run (nothing is created in a run the
//! owner let go of), and what it made for nodes that never started is removed at the close
//! (only while it is empty). An attempt never depends on it: one that finds its
//! directories or its cgroup missing creates them itself. After a crash, an empty
//! `attempts/1/` of a node that never started may remain: like the directory of an attempt
//! that had not ended, it holds no `status.json`, and the journal (the source of truth)
//! records no attempt; an empty cgroup made ahead is under the dead owner's root, which the
//! next owner removes (no record names it, so no recovery waits for it).

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

use crate::containment::Cgroup;
use crate::workflow::store::fs::PrivateDir;
use crate::workflow::store::runs::RunDir;

/// How many nodes the thread may be ahead of the launches.
const AHEAD: usize = 32;

/// Once caught up, how many launches the thread waits for before it goes on (one wake-up
/// per batch, not per launch).
const BATCH: usize = 16;

#[derive(Debug, Default)]
struct Progress {
    launched: usize,
    /// The launch count the waiting thread needs to go on (`None`: not waiting).
    wanted: Option<usize>,
    stop: bool,
}

#[derive(Debug, Default)]
struct Shared {
    progress: Mutex<Progress>,
    changed: Condvar,
    /// What was made for each node and not yet taken by its attempt.
    made: Mutex<HashMap<String, Made>>,
}

/// What was made ahead for a node's first attempt, open and ready.
#[derive(Debug)]
pub(super) struct Made {
    /// `nodes/<NODE>/attempts/1/`.
    pub dir: PrivateDir,
    /// The attempt's empty cgroup (named by [`super::owner::attempt_cgroup`]), for a
    /// command or shell node where trees are contained in cgroups.
    pub cgroup: Option<Cgroup>,
}

/// A node still to run, in launch order.
#[derive(Debug)]
pub(super) struct Ahead {
    pub node: String,
    /// The cgroup its first attempt runs in, when it is a command or shell node and trees
    /// are contained in cgroups (see [`super::owner::attempt_cgroup`]).
    pub cgroup: Option<String>,
}

/// What the thread made that no attempt took.
#[derive(Debug, Default)]
pub(super) struct Unused {
    /// Nodes whose `nodes/<NODE>/` the thread created.
    pub created: Vec<String>,
    /// What no attempt took, by node.
    pub made: HashMap<String, Made>,
}

/// The thread that makes node directories ahead of the launches.
#[derive(Debug)]
pub(super) struct DirsAhead {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<Vec<String>>>,
}

impl DirsAhead {
    /// Starts making the directories of `nodes` (in the order they are expected to launch).
    /// When no thread can be started, attempts create their directories themselves.
    pub(super) fn start(run: Arc<RunDir>, nodes: Vec<Ahead>) -> Self {
        let shared = Arc::new(Shared::default());
        let thread = if nodes.is_empty() {
            None
        } else {
            let for_thread = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("rho-dirs-ahead".to_owned())
                .spawn(move || make_ahead(&run, &nodes, &for_thread))
                .inspect_err(|e| {
                    tracing::debug!("node directories are made by each attempt: {e}");
                })
                .ok()
        };
        Self { shared, thread }
    }

    /// One more attempt was launched.
    pub(super) fn launched(&self) {
        if self.thread.is_none() {
            return;
        }
        let mut progress = self.lock();
        progress.launched += 1;
        if progress
            .wanted
            .is_some_and(|wanted| progress.launched >= wanted)
        {
            progress.wanted = None;
            self.shared.changed.notify_all();
        }
    }

    /// What was made for `node`'s first attempt, if the thread got to it (each is handed
    /// out once).
    pub(super) fn take(&self, node: &str) -> Option<Made> {
        self.shared
            .made
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(node)
    }

    /// Stops the thread and returns what it made that was not taken.
    pub(super) fn finish(mut self) -> Unused {
        self.stop()
    }

    fn stop(&mut self) -> Unused {
        let Some(thread) = self.thread.take() else {
            return Unused::default();
        };
        self.lock().stop = true;
        self.shared.changed.notify_all();
        let created = thread.join().unwrap_or_default();
        let made = std::mem::take(
            &mut *self
                .shared
                .made
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        Unused { created, made }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Progress> {
        self.shared
            .progress
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for DirsAhead {
    fn drop(&mut self) {
        // Only when the owner did not finish it (an error ended the run): what was made
        // stays until the next owner's sweep, as after a crash.
        drop(self.stop());
    }
}

fn make_ahead(run: &RunDir, nodes: &[Ahead], shared: &Shared) -> Vec<String> {
    let mut created = Vec::new();
    for (i, Ahead { node, cgroup }) in nodes.iter().enumerate() {
        {
            let mut progress = shared
                .progress
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            while !progress.stop && i >= progress.launched + AHEAD {
                progress.wanted = Some(i + BATCH - AHEAD);
                progress = shared
                    .changed
                    .wait(progress)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            if progress.stop {
                break;
            }
        }
        let dir = match run.prepare_node_dir(node) {
            Ok((made, dir)) => {
                if made {
                    created.push(node.clone());
                }
                dir
            }
            // The attempt meets the same problem and reports it.
            Err(e) => {
                tracing::debug!(node = %node, "not made ahead: {e}");
                continue;
            }
        };
        let cgroup = cgroup.as_deref().and_then(|name| {
            crate::containment::owner_root()
                .and_then(|root| root.create(name))
                .inspect_err(|e| tracing::debug!(node = %node, "cgroup not made ahead: {e}"))
                .ok()
        });
        shared
            .made
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(node.clone(), Made { dir, cgroup });
    }
    created
}
