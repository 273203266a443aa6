//! The confinements of one run's nodes, prepared once and reused from one attempt to the
//! next: a scratch directory with its Landlock ruleset and the shared seccomp program.
//!
//! Why: a read-only `true` node used to create a scratch directory, detect the kernel, plan,
//! build a ruleset (three paths opened) and compile its filter, then remove the directory.
//! On ext4 the directory's inode allocation dominated, and each removal made the next
//! allocations slower still (ext4 skips recently freed inodes one by one). Now a run keeps
//! at most one scratch directory per concurrent confined attempt and hands it on.
//!
//! Invariant: a scratch directory is handed to another attempt only when the attempt that
//! held it is over with its whole process tree gone (the caller says so through
//! [`ScratchLease::release`]; containment killed the tree and checked it empty) and the
//! directory, read through the descriptor of the very inode the ruleset names, is empty.
//! Anything else (content left, a tree that may live on, an error, a lease merely dropped)
//! removes the directory and its content; the next attempt gets a fresh one. So an attempt
//! never sees a byte another attempt wrote, and no two attempts hold one directory at once.
//!
//! After a crash, what is left is what was left before: the directories of the attempts
//! then running (with their content) and, now, at most one empty directory per lane; their
//! names are fresh per run, so no later attempt is ever given one of them as its scratch,
//! and none is writable by any read-only node (each ruleset grants writes beneath its own
//! directory only).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use super::{
    Confinement, ConfinementError, ConfinementPlan, ConfinementRequest, KernelSupport, ScratchDir,
};

/// One reusable scratch directory and the confinement whose ruleset grants writes beneath
/// it.
#[derive(Debug)]
struct Slot {
    request: ConfinementRequest,
    confinement: Arc<Confinement>,
    /// The directory open for reading, to check it is empty without resolving its path.
    dir: std::fs::File,
    /// Last, as fields drop in order: the directory is removed once its descriptors closed.
    scratch: ScratchDir,
}

impl Slot {
    fn is_empty(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsFd as _;
            match super::sys::directory_is_empty(self.dir.as_fd()) {
                Ok(empty) => empty,
                Err(e) => {
                    tracing::debug!(path = %self.scratch.path().display(), error = %e, "cannot read a scratch directory; it is not reused");
                    false
                }
            }
        }
        #[cfg(not(target_os = "linux"))]
        false
    }
}

/// What a run has prepared so far.
#[derive(Debug, Default)]
struct Prepared {
    /// Set when the run ends: nothing more is kept.
    closed: bool,
    support: Option<KernelSupport>,
    plans: Vec<(ConfinementRequest, ConfinementPlan)>,
    #[cfg(target_os = "linux")]
    filters: Vec<(super::FilterPlan, Option<super::SharedFilter>)>,
    /// Scratch directories no attempt holds, each verified empty.
    free: Vec<Slot>,
}

/// The confinements of one run's command nodes (see the module documentation).
#[derive(Debug)]
pub struct NodeConfinements {
    parent: PathBuf,
    prepared: Mutex<Prepared>,
}

impl NodeConfinements {
    /// Scratch directories will be created in `parent` (the system temporary directory).
    pub fn new(parent: PathBuf) -> Self {
        Self {
            parent,
            prepared: Mutex::new(Prepared::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Prepared> {
        self.prepared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The confinement and private scratch directory for one attempt asking for `request`
    /// (`None` when it asks for nothing). Fails closed, naming what the kernel lacks.
    pub fn lease(
        &self,
        request: ConfinementRequest,
    ) -> Result<Option<ScratchLease<'_>>, ConfinementError> {
        if request.is_empty() {
            return Ok(None);
        }
        let mut prepared = self.lock();
        if let Some(at) = prepared.free.iter().position(|s| s.request == request) {
            let slot = prepared.free.swap_remove(at);
            return Ok(Some(ScratchLease { pool: self, slot }));
        }
        let plan = if let Some((_, plan)) = prepared.plans.iter().find(|(r, _)| *r == request) {
            plan.clone()
        } else {
            let support = match prepared.support {
                Some(support) => support,
                None => *prepared.support.insert(KernelSupport::detect()?),
            };
            let plan = super::plan(request, &support)?;
            prepared.plans.push((request, plan.clone()));
            plan
        };
        let slot = self.new_slot(&mut prepared, request, &plan)?;
        Ok(Some(ScratchLease { pool: self, slot }))
    }

    #[cfg(target_os = "linux")]
    fn new_slot(
        &self,
        prepared: &mut Prepared,
        request: ConfinementRequest,
        plan: &ConfinementPlan,
    ) -> Result<Slot, ConfinementError> {
        let filter =
            if let Some((_, program)) = prepared.filters.iter().find(|(f, _)| *f == plan.filter) {
                program.clone()
            } else {
                let program = Confinement::compile_filter(plan.filter)?;
                prepared.filters.push((plan.filter, program.clone()));
                program
            };
        let scratch = self.create_scratch()?;
        let dir = open_directory(scratch.path()).map_err(|source| ConfinementError::Open {
            path: scratch.path().to_owned(),
            source,
        })?;
        let confinement = Confinement::prepare_with(plan, scratch.path(), filter)?;
        Ok(Slot {
            request,
            confinement: Arc::new(confinement),
            dir,
            scratch,
        })
    }

    /// Off Linux nothing can be enforced: fail closed.
    #[cfg(not(target_os = "linux"))]
    fn new_slot(
        &self,
        _prepared: &mut Prepared,
        _request: ConfinementRequest,
        plan: &ConfinementPlan,
    ) -> Result<Slot, ConfinementError> {
        let scratch = self.create_scratch()?;
        Confinement::prepare(plan, scratch.path())?;
        Err(ConfinementError::Unsupported {
            what: "kernel confinement",
            reason: format!("{} has no Landlock", std::env::consts::OS),
        })
    }

    fn create_scratch(&self) -> Result<ScratchDir, ConfinementError> {
        ScratchDir::create_in(&self.parent).map_err(|source| ConfinementError::Open {
            path: self.parent.clone(),
            source,
        })
    }

    /// Removes every kept scratch directory and keeps none from now on (the run is over;
    /// an attempt still holding one removes it when its lease ends).
    pub fn clear(&self) {
        let free = {
            let mut prepared = self.lock();
            prepared.closed = true;
            std::mem::take(&mut prepared.free)
        };
        drop(free);
    }

    /// Scratch directories kept for reuse (for the tests).
    #[cfg(test)]
    fn kept(&self) -> usize {
        self.lock().free.len()
    }

    fn give_back(&self, slot: Slot) {
        if !slot.is_empty() {
            return; // dropped: removed with its content
        }
        let mut prepared = self.lock();
        if !prepared.closed {
            prepared.free.push(slot);
        }
    }
}

fn open_directory(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// One attempt's hold on a scratch directory and its confinement. Dropping it removes the
/// directory with its content (the slot's [`ScratchDir`] goes with it);
/// [`ScratchLease::release`] may keep it for another attempt.
#[derive(Debug)]
pub struct ScratchLease<'a> {
    pool: &'a NodeConfinements,
    slot: Slot,
}

impl ScratchLease<'_> {
    /// The confinement to apply in the attempt's child.
    pub fn confinement(&self) -> &Arc<Confinement> {
        &self.slot.confinement
    }

    /// The attempt's private scratch directory (its `TMPDIR`).
    pub fn scratch(&self) -> &Path {
        self.slot.scratch.path()
    }

    /// Ends the lease once no process of the attempt can run any more (its tree was killed
    /// and found empty, or it never started): the directory serves a later attempt of the
    /// run if it is empty, and is removed with its content otherwise.
    pub fn release(self) {
        let ScratchLease { pool, slot } = self;
        pool.give_back(slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel_ready() -> bool {
        let ready = KernelSupport::detect()
            .ok()
            .and_then(|s| super::super::plan(ConfinementRequest::READ_ONLY, &s).ok())
            .is_some();
        if !ready {
            crate::confinement::skip_unless_required(
                "this kernel cannot enforce read-only confinement (Landlock ABI 3 and seccomp \
                 needed)",
            );
        }
        ready
    }

    #[test]
    fn nothing_asked_leases_nothing() {
        let parent = tempfile::tempdir().unwrap();
        let pool = NodeConfinements::new(parent.path().to_owned());
        assert!(pool.lease(ConfinementRequest::default()).unwrap().is_none());
        assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0);
    }

    #[test]
    fn an_empty_released_scratch_is_reused_and_one_with_content_is_removed() {
        if !kernel_ready() {
            return;
        }
        let parent = tempfile::tempdir().unwrap();
        let pool = NodeConfinements::new(parent.path().to_owned());
        let first = pool.lease(ConfinementRequest::READ_ONLY).unwrap().unwrap();
        let path = first.scratch().to_owned();
        let confinement = Arc::clone(first.confinement());
        first.release();
        assert_eq!(pool.kept(), 1, "an empty directory is kept");

        let second = pool.lease(ConfinementRequest::READ_ONLY).unwrap().unwrap();
        assert_eq!(second.scratch(), path, "and handed to the next attempt");
        assert!(
            Arc::ptr_eq(second.confinement(), &confinement),
            "with the ruleset and filter prepared for it"
        );
        std::fs::create_dir(path.join("d")).unwrap();
        std::fs::write(path.join("d/left"), b"x").unwrap();
        second.release();
        assert!(!path.exists(), "a directory with content is removed");
        assert_eq!(pool.kept(), 0);

        let third = pool.lease(ConfinementRequest::READ_ONLY).unwrap().unwrap();
        assert_ne!(third.scratch(), path);
        assert_eq!(std::fs::read_dir(third.scratch()).unwrap().count(), 0);
        let third_path = third.scratch().to_owned();
        drop(third);
        assert!(
            !third_path.exists(),
            "a lease merely dropped removes its directory"
        );
    }

    #[test]
    fn concurrent_leases_never_share_a_directory_and_requests_keep_their_own() {
        if !kernel_ready() {
            return;
        }
        let parent = tempfile::tempdir().unwrap();
        let pool = NodeConfinements::new(parent.path().to_owned());
        let a = pool.lease(ConfinementRequest::READ_ONLY).unwrap().unwrap();
        let b = pool.lease(ConfinementRequest::READ_ONLY).unwrap().unwrap();
        assert_ne!(a.scratch(), b.scratch());
        let network = ConfinementRequest {
            read_only: false,
            deny_network: true,
        };
        let n = pool.lease(network).unwrap().unwrap();
        assert!(!n.confinement().plan().filter.deny_metadata);
        let n_path = n.scratch().to_owned();
        n.release();
        a.release();
        let again = pool.lease(ConfinementRequest::READ_ONLY).unwrap().unwrap();
        assert_ne!(
            again.scratch(),
            n_path,
            "a read-only attempt never gets another kind's"
        );
        assert!(again.confinement().plan().filter.deny_metadata);
        drop((again, b));
    }

    #[test]
    fn clearing_removes_what_is_kept_and_keeps_nothing_more() {
        if !kernel_ready() {
            return;
        }
        let parent = tempfile::tempdir().unwrap();
        let pool = NodeConfinements::new(parent.path().to_owned());
        let a = pool.lease(ConfinementRequest::READ_ONLY).unwrap().unwrap();
        let b = pool.lease(ConfinementRequest::READ_ONLY).unwrap().unwrap();
        a.release();
        pool.clear();
        assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 1);
        b.release();
        assert_eq!(pool.kept(), 0);
        assert_eq!(
            std::fs::read_dir(parent.path()).unwrap().count(),
            0,
            "a lease ending after the run removes its directory"
        );
    }
}
