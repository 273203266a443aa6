//! Checkout access: read-only nodes share the canonical checkout, a mutating node holds it
//! alone. Inside one process a fair reader/writer lock decides the order (first come, first
//! served: a waiting writer stops later readers); across `rho` processes an `flock` on
//! `$RHO_HOME/workflows/checkout-locks/<WORKSPACE_KEY>.lock` enforces it (shared for readers,
//! exclusive for writers; safe but not fair).
//!
//! Invariant: a [`CheckoutGuard`] holds both the in-process lock and the file lock for its
//! access mode, and waiting for either honours the caller's deadline and cancellation.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg, OFlag, openat};
use nix::sys::stat::Mode;
use rho_ipc::program::Access;

use crate::paths::RhoHome;
use crate::workflow::exec::{CANCEL_POLL, CancelToken};
use crate::workflow::identity::FileFacts;

/// Longest pause between two attempts at the cross-process lock.
const FLOCK_MAX_BACKOFF: Duration = Duration::from_millis(20);

/// Why checkout access was not granted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckoutError {
    /// The deadline (the node's timeout) passed while waiting.
    #[error("timed out after {waited:?} waiting for {access} checkout access to {workspace}")]
    Timeout {
        /// `read-only` or `exclusive`.
        access: &'static str,
        /// The workspace.
        workspace: String,
        /// How long the wait lasted.
        waited: Duration,
    },
    /// Cancellation was requested while waiting.
    #[error("cancelled while waiting for {access} checkout access to {workspace}")]
    Cancelled {
        /// `read-only` or `exclusive`.
        access: &'static str,
        /// The workspace.
        workspace: String,
    },
    /// The lock directory or file could not be created or opened.
    #[error("cannot open checkout lock {path}")]
    Io {
        /// The directory or file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The lock directory or file is not safe to use.
    #[error("checkout lock {path} is not safe to use: {reason}")]
    Insecure {
        /// The directory or file.
        path: PathBuf,
        /// What is wrong (a link, another owner, permissions).
        reason: String,
    },
}

/// `WORKSPACE_KEY`: lowercase hex SHA-256 of the canonical workspace path.
pub fn workspace_key(canonical_workspace: &Path) -> String {
    rho_ipc::digest::sha256_hex(canonical_workspace.as_os_str().as_encoded_bytes())
}

fn access_name(access: Access) -> &'static str {
    match access {
        Access::ReadOnly => "read-only",
        Access::Mutating => "exclusive",
    }
}

/// The checkout lock of one workspace. Cheap to open; every instance for the same workspace
/// in a process shares one fair in-process lock.
#[derive(Debug)]
pub struct CheckoutLock {
    workspace: String,
    key: String,
    dir: OwnedFd,
    lock_path: PathBuf,
    fair: Arc<FairRwLock>,
}

/// Fair locks by workspace key, shared by every [`CheckoutLock`] of this process.
static FAIR_LOCKS: LazyLock<Mutex<HashMap<String, Arc<FairRwLock>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

impl CheckoutLock {
    /// The lock for `canonical_workspace`, creating `checkout-locks/` (mode 0700) if needed.
    /// Refuses a lock directory that is a symbolic link, belongs to someone else or is open
    /// to group or others.
    pub fn open(home: &RhoHome, canonical_workspace: &Path) -> Result<Self, CheckoutError> {
        let dir_path = home.workflows().join("checkout-locks");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir_path)
            .map_err(|source| CheckoutError::Io {
                path: dir_path.clone(),
                source,
            })?;
        let dir = nix::fcntl::open(
            &dir_path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| CheckoutError::Insecure {
            path: dir_path.clone(),
            reason: format!("cannot open it as a directory without following links ({e})"),
        })?;
        check_owned_private(dir.as_fd(), &dir_path, 0o077)?;
        let key = workspace_key(canonical_workspace);
        let lock_path = dir_path.join(format!("{key}.lock"));
        let fair = {
            let mut locks = FAIR_LOCKS
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            Arc::clone(locks.entry(key.clone()).or_default())
        };
        Ok(Self {
            workspace: canonical_workspace.display().to_string(),
            key,
            dir,
            lock_path,
            fair,
        })
    }

    /// The workspace key (file name stem of the lock).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The lock file.
    pub fn lock_path(&self) -> &Path {
        &self.lock_path
    }

    /// Waits for `access` until `deadline` (none: no limit) or cancellation. In-process
    /// order first (fair), then the cross-process file lock.
    pub fn acquire(
        &self,
        access: Access,
        deadline: Option<Instant>,
        cancel: &CancelToken,
    ) -> Result<CheckoutGuard, CheckoutError> {
        let started = Instant::now();
        let stop_error = |stop: Stop| match stop {
            Stop::Timeout => CheckoutError::Timeout {
                access: access_name(access),
                workspace: self.workspace.clone(),
                waited: started.elapsed(),
            },
            Stop::Cancelled => CheckoutError::Cancelled {
                access: access_name(access),
                workspace: self.workspace.clone(),
            },
        };
        let local = self
            .fair
            .acquire(access, deadline, cancel)
            .map_err(stop_error)?;
        let local = LocalGuard {
            fair: Arc::clone(&self.fair),
            access,
            _held: local,
        };
        let file = self.open_lock_file()?;
        let arg = match access {
            Access::ReadOnly => FlockArg::LockSharedNonblock,
            Access::Mutating => FlockArg::LockExclusiveNonblock,
        };
        let mut file = file;
        let mut backoff = Duration::from_millis(1);
        loop {
            match Flock::lock(file, arg) {
                Ok(flock) => {
                    return Ok(CheckoutGuard {
                        _file: flock,
                        _local: local,
                    });
                }
                Err((back, Errno::EWOULDBLOCK | Errno::EINTR)) => file = back,
                Err((_, errno)) => {
                    return Err(CheckoutError::Io {
                        path: self.lock_path.clone(),
                        source: io::Error::from(errno),
                    });
                }
            }
            if cancel.is_cancelled() {
                return Err(stop_error(Stop::Cancelled));
            }
            let now = Instant::now();
            let mut pause = backoff;
            if let Some(deadline) = deadline {
                if now >= deadline {
                    return Err(stop_error(Stop::Timeout));
                }
                pause = pause.min(deadline - now);
            }
            std::thread::sleep(pause);
            backoff = (backoff * 2).min(FLOCK_MAX_BACKOFF);
        }
    }

    fn open_lock_file(&self) -> Result<File, CheckoutError> {
        let name = format!("{}.lock", self.key);
        let fd = openat(
            self.dir.as_fd(),
            name.as_str(),
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(|e| CheckoutError::Io {
            path: self.lock_path.clone(),
            source: e.into(),
        })?;
        check_owned_private(fd.as_fd(), &self.lock_path, 0o077)?;
        Ok(File::from(fd))
    }
}

/// The opened object must be ours and closed to group and others.
fn check_owned_private(
    fd: std::os::fd::BorrowedFd<'_>,
    path: &Path,
    forbidden_bits: u32,
) -> Result<(), CheckoutError> {
    let facts = FileFacts::of(fd).map_err(|source| CheckoutError::Io {
        path: path.to_owned(),
        source,
    })?;
    let me = nix::unistd::geteuid().as_raw();
    if facts.uid != me {
        return Err(CheckoutError::Insecure {
            path: path.to_owned(),
            reason: format!("owned by uid {}, not {me}", facts.uid),
        });
    }
    if facts.permissions() & forbidden_bits != 0 {
        return Err(CheckoutError::Insecure {
            path: path.to_owned(),
            reason: format!(
                "mode {:o} gives access to group or others",
                facts.permissions()
            ),
        });
    }
    Ok(())
}

/// Held checkout access; dropping it releases the file lock, then the in-process lock.
#[derive(Debug)]
pub struct CheckoutGuard {
    _file: Flock<File>,
    _local: LocalGuard,
}

#[derive(Debug)]
struct LocalGuard {
    fair: Arc<FairRwLock>,
    access: Access,
    _held: Held,
}

impl Drop for LocalGuard {
    fn drop(&mut self) {
        self.fair.release(self.access);
    }
}

/// Proof that the fair lock was entered.
#[derive(Debug)]
struct Held;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Timeout,
    Cancelled,
}

/// A first-come, first-served reader/writer lock: waiters enter in ticket order; readers at
/// the head enter together while no writer holds the lock; a writer at the head waits for
/// the readers inside to leave, and everyone behind it waits too.
#[derive(Debug, Default)]
struct FairRwLock {
    state: Mutex<FairState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct FairState {
    next_ticket: u64,
    queue: VecDeque<(u64, Access)>,
    readers: usize,
    writer: bool,
}

impl FairState {
    fn may_enter(&self, ticket: u64, access: Access) -> bool {
        self.queue.front().is_some_and(|(head, _)| *head == ticket)
            && match access {
                Access::ReadOnly => !self.writer,
                Access::Mutating => !self.writer && self.readers == 0,
            }
    }

    fn leave_queue(&mut self, ticket: u64) {
        self.queue.retain(|(t, _)| *t != ticket);
    }
}

impl FairRwLock {
    fn state(&self) -> MutexGuard<'_, FairState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn acquire(
        &self,
        access: Access,
        deadline: Option<Instant>,
        cancel: &CancelToken,
    ) -> Result<Held, Stop> {
        let mut state = self.state();
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        state.queue.push_back((ticket, access));
        loop {
            if state.may_enter(ticket, access) {
                state.queue.pop_front();
                match access {
                    Access::ReadOnly => state.readers += 1,
                    Access::Mutating => state.writer = true,
                }
                drop(state);
                // The next waiter may be a reader that can enter beside us.
                self.changed.notify_all();
                return Ok(Held);
            }
            let now = Instant::now();
            let stop = if cancel.is_cancelled() {
                Some(Stop::Cancelled)
            } else if deadline.is_some_and(|d| now >= d) {
                Some(Stop::Timeout)
            } else {
                None
            };
            if let Some(stop) = stop {
                state.leave_queue(ticket);
                drop(state);
                self.changed.notify_all();
                return Err(stop);
            }
            let wait = deadline.map_or(CANCEL_POLL, |d| (d - now).min(CANCEL_POLL));
            state = match self.changed.wait_timeout(state, wait) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }

    fn release(&self, access: Access) {
        let mut state = self.state();
        match access {
            Access::ReadOnly => state.readers = state.readers.saturating_sub(1),
            Access::Mutating => state.writer = false,
        }
        drop(state);
        self.changed.notify_all();
    }

    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.state().queue.len()
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt as _;
    use std::sync::mpsc;

    use super::*;

    fn soon() -> Instant {
        Instant::now() + Duration::from_millis(50)
    }

    fn wait_until_queued(lock: &FairRwLock, n: usize) {
        while lock.waiting() < n {
            std::thread::yield_now();
        }
    }

    #[test]
    fn readers_share_and_writer_excludes() {
        let lock = FairRwLock::default();
        let never = CancelToken::new();
        let r1 = lock.acquire(Access::ReadOnly, None, &never);
        let r2 = lock.acquire(Access::ReadOnly, Some(soon()), &never);
        assert!(r1.is_ok() && r2.is_ok());
        assert_eq!(
            lock.acquire(Access::Mutating, Some(soon()), &never).err(),
            Some(Stop::Timeout)
        );
        // A timed-out waiter left the queue.
        assert_eq!(lock.waiting(), 0);
        lock.release(Access::ReadOnly);
        lock.release(Access::ReadOnly);
        assert!(lock.acquire(Access::Mutating, Some(soon()), &never).is_ok());
        assert_eq!(
            lock.acquire(Access::ReadOnly, Some(soon()), &never).err(),
            Some(Stop::Timeout)
        );
    }

    #[test]
    fn mutating_node_waits_for_readers_and_is_not_starved() {
        let lock = Arc::new(FairRwLock::default());
        let never = CancelToken::new();
        assert!(lock.acquire(Access::ReadOnly, None, &never).is_ok());
        let (tx, rx) = mpsc::channel();
        let writer = {
            let lock = Arc::clone(&lock);
            std::thread::spawn(move || {
                let got = lock.acquire(Access::Mutating, None, &CancelToken::new());
                tx.send(got.is_ok()).unwrap();
                lock.release(Access::Mutating);
            })
        };
        wait_until_queued(&lock, 1);
        // A later reader must not overtake the waiting writer.
        assert_eq!(
            lock.acquire(Access::ReadOnly, Some(soon()), &never).err(),
            Some(Stop::Timeout)
        );
        assert!(
            rx.try_recv().is_err(),
            "writer entered while a reader held the lock"
        );
        lock.release(Access::ReadOnly);
        assert!(rx.recv().unwrap());
        writer.join().unwrap();
        assert!(lock.acquire(Access::ReadOnly, Some(soon()), &never).is_ok());
    }

    #[test]
    fn cancellation_stops_waiting() {
        let lock = FairRwLock::default();
        let never = CancelToken::new();
        assert!(lock.acquire(Access::Mutating, None, &never).is_ok());
        let cancel = CancelToken::new();
        cancel.cancel();
        assert_eq!(
            lock.acquire(Access::ReadOnly, None, &cancel).err(),
            Some(Stop::Cancelled)
        );
        assert_eq!(lock.waiting(), 0);
    }

    #[test]
    fn workspace_key_is_hex_sha256_of_the_path() {
        let key = workspace_key(Path::new("/work/main"));
        assert_eq!(key, rho_ipc::digest::sha256_hex(b"/work/main"));
        assert_eq!(key.len(), 64);
        assert!(
            key.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
    }

    #[test]
    fn lock_directory_and_file_are_private() {
        let home = tempfile::tempdir().unwrap();
        let rho_home = RhoHome::at(home.path(), None);
        let lock = CheckoutLock::open(&rho_home, Path::new("/some/workspace")).unwrap();
        let guard = lock
            .acquire(Access::Mutating, Some(soon()), &CancelToken::new())
            .unwrap();
        let dir_mode = std::fs::metadata(home.path().join("workflows/checkout-locks"))
            .unwrap()
            .mode();
        assert_eq!(dir_mode & 0o777, 0o700);
        let file_mode = std::fs::metadata(lock.lock_path()).unwrap().mode();
        assert_eq!(file_mode & 0o777, 0o600);
        drop(guard);
    }

    #[test]
    fn symlinked_lock_directory_is_refused() {
        let home = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(home.path().join("workflows")).unwrap();
        std::os::unix::fs::symlink(
            elsewhere.path(),
            home.path().join("workflows/checkout-locks"),
        )
        .unwrap();
        let rho_home = RhoHome::at(home.path(), None);
        let err = CheckoutLock::open(&rho_home, Path::new("/w")).unwrap_err();
        assert!(matches!(err, CheckoutError::Insecure { .. }), "{err}");
    }

    #[test]
    fn two_instances_share_the_fair_lock() {
        let home = tempfile::tempdir().unwrap();
        let rho_home = RhoHome::at(home.path(), None);
        let a = CheckoutLock::open(&rho_home, Path::new("/shared/ws")).unwrap();
        let b = CheckoutLock::open(&rho_home, Path::new("/shared/ws")).unwrap();
        let never = CancelToken::new();
        let held = a.acquire(Access::Mutating, None, &never).unwrap();
        let err = b
            .acquire(Access::ReadOnly, Some(soon()), &never)
            .unwrap_err();
        assert!(
            matches!(
                err,
                CheckoutError::Timeout {
                    access: "read-only",
                    ..
                }
            ),
            "{err}"
        );
        drop(held);
        let r1 = b.acquire(Access::ReadOnly, Some(soon()), &never).unwrap();
        let r2 = a.acquire(Access::ReadOnly, Some(soon()), &never).unwrap();
        drop((r1, r2));
    }
}
