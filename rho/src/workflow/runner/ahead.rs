//! Directories made ahead of the attempts that need them: a thread creates the store
//! directories of the first attempt of the nodes still to run (`nodes/<NODE>/attempts/1/`)
//! a few launches ahead of the owner, so such an attempt creates no directory at all
//! instead of three. Creating a directory is among the costliest steps of a trivial
//! attempt (an inode and a directory block on ext4), and on a run of one node after
//! another the second core is otherwise idle.
//!
//! Invariant: the thread never gets more than [`AHEAD`] nodes ahead of the launches, it is
//! stopped and joined before the owner closes the run (nothing is created in a run the
//! owner let go of), and what it made for nodes that never started is removed at the close
//! (only while it is empty). An attempt never depends on it: one that finds its
//! directories missing creates them itself. After a crash, an empty `attempts/1/` of a node
//! that never started may remain: like the directory of an attempt that had not ended, it
//! holds no `status.json`, and the journal (the source of truth) records no attempt.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

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
    pub(super) fn start(run: Arc<RunDir>, nodes: Vec<String>) -> Self {
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

    /// Stops the thread and returns the nodes whose directory it created.
    pub(super) fn finish(mut self) -> Vec<String> {
        self.stop()
    }

    fn stop(&mut self) -> Vec<String> {
        let Some(thread) = self.thread.take() else {
            return Vec::new();
        };
        self.lock().stop = true;
        self.shared.changed.notify_all();
        thread.join().unwrap_or_default()
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
        self.stop();
    }
}

fn make_ahead(run: &RunDir, nodes: &[String], shared: &Shared) -> Vec<String> {
    let mut made = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
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
        match run.prepare_node_dir(node) {
            Ok(true) => made.push(node.clone()),
            Ok(false) => {}
            // The attempt meets the same problem and reports it.
            Err(e) => tracing::debug!(node = %node, "not made ahead: {e}"),
        }
    }
    made
}
