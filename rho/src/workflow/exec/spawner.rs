//! The process-wide spawner thread and the guardian process.
//!
//! Node processes are created by one long-lived thread, because `PR_SET_PDEATHSIG` fires
//! when the *thread* that created the child exits; a caller whose thread outlives its child
//! (the workflow runner's workers) launches on that thread instead ([`launch_here`]).
//! Creation is `CLONE_VM | CLONE_VFORK`, as `posix_spawn` does: no page tables are copied,
//! and the creating thread stays suspended until the child has executed or exited, so the
//! child may report a failed step in shared memory. A child with a cgroup is created inside
//! it (`clone3` with `CLONE_INTO_CGROUP`); where that fails it is created by `clone` and
//! joins it first thing. The child runs only async-signal-safe system calls between the
//! clone and `execveat` (everything it needs — C strings, pointer arrays, descriptors — is
//! prepared before), with every signal blocked, and it never returns: it executes the
//! sealed copy or records the failing step and calls `_exit`. No path is executed and
//! `std::process::Command` is not involved.
//!
//! The parent-death signal only reaches a node's leader. So that a process the leader put in
//! the background does not outlive the owner either, each child registers its process group
//! with a guardian: a process forked once, out of the owner's process group, with every
//! descriptor closed except the read end of a pipe whose write end only the owner holds.
//! Registration is a store into a slot of a shared anonymous mapping (no system call, no
//! wake-up per node); the guardian sleeps in `read` until the owner dies and the pipe reaches
//! end of file, then sends SIGKILL to every group still in a slot. A slot is cleared before
//! its leader is reaped, so the guardian never signals a group id that could be reused.
//!
//! The background process manager (`crate::process::tree`) launches its shell commands
//! through the same thread and guardian, so they are bound to the owner's life the same way.
//!
//! Invariant: after `clone`, the child touches no lock, allocates nothing, and writes no
//! shared memory except its guardian slot and its failure report.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

use nix::fcntl::OFlag;
use nix::unistd::pipe2;

use super::ExecError;

/// What the child needs, prepared before the fork.
pub(crate) struct LaunchRequest {
    pub(crate) argv: Vec<CString>,
    pub(crate) envp: Vec<CString>,
    /// Executed with `execveat(fd, "", ..., AT_EMPTY_PATH)`.
    pub(crate) exec_fd: RawFd,
    /// A script handed to the interpreter as `/proc/self/fd/N`: close-on-exec is cleared.
    pub(crate) script_fd: Option<RawFd>,
    pub(crate) cwd_fd: RawFd,
    pub(crate) stdin_fd: RawFd,
    pub(crate) stdout_fd: RawFd,
    pub(crate) stderr_fd: RawFd,
    /// Applied by the child right before `execveat` (read-only access, network denial).
    pub(crate) confinement: Option<std::sync::Arc<crate::confinement::Confinement>>,
    /// The directory of the cgroup the child is created in, so nothing of it ever runs
    /// outside (see [`crate::containment::Cgroup::dir_handle`]); `None` leaves it in the
    /// owner's.
    pub(crate) cgroup_fd: Option<RawFd>,
    /// `Some`: the child becomes a child subreaper (the attribute survives `execve`), so
    /// orphans of the tree stay inside it, and, when the tag is not 0 and the hard limit
    /// allows it, carries the tag as its `RLIMIT_RTTIME` soft limit, which every descendant
    /// inherits (see [`crate::containment::tracked`]).
    pub(crate) tree_tag: Option<u64>,
    /// The signals this process ignores (bit `n - 1` for signal `n`, see
    /// [`ignored_signals`]), which the child resets to their default: an ignored signal
    /// stays ignored across `execve`, a caught one does not.
    pub(crate) ignored_signals: u64,
}

/// The signals this process ignores, from the `SigIgn` mask of `/proc/self/status` (bit
/// `n - 1` for signal `n`), read at the first launch; every signal when it cannot be read,
/// so the child then resets them all. With it the child, which runs while its creator
/// waits, makes one `sigaction` per ignored signal (usually only `SIGPIPE`, which Rust
/// programs ignore) instead of one per signal (62 system calls, ~50 µs here).
///
/// Invariant: nothing in this process sets a signal to `SIG_IGN` after it started (std
/// ignores `SIGPIPE` before `main`; the runner and tokio install handlers, which `execve`
/// resets anyway), so the mask read once still holds at every later launch.
pub(crate) fn ignored_signals() -> u64 {
    static IGNORED: OnceLock<u64> = OnceLock::new();
    *IGNORED.get_or_init(|| {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix("SigIgn:"))
                    .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
            })
            .unwrap_or(u64::MAX)
    })
}

/// A child that executed the sealed copy.
pub(crate) struct Child {
    pub(crate) pid: i32,
    /// `None` on kernels without `pidfd_open`; the supervisor then polls `waitid`.
    pub(crate) pidfd: Option<OwnedFd>,
    /// The guardian slot holding this child's group; release it before reaping.
    pub(crate) slot: GuardSlot,
}

/// A guardian slot in use; [`GuardSlot::release`] clears it.
#[derive(Debug)]
pub(crate) struct GuardSlot(usize);

impl GuardSlot {
    /// Clears the slot (the group is no longer the guardian's business) and frees it.
    /// Call after the group was killed and before its leader is reaped.
    pub(crate) fn release(self) {
        if let Ok(spawner) = spawner() {
            spawner.slots[self.0].store(0, Ordering::SeqCst);
            spawner
                .free
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(self.0);
        }
    }
}

struct Job {
    request: LaunchRequest,
    slot: usize,
    reply: mpsc::SyncSender<Result<Child, ExecError>>,
}

struct Spawner {
    jobs: Mutex<mpsc::Sender<Job>>,
    /// The write end of the guardian's pipe: held, never written; closing it (the owner
    /// exiting) is the guardian's signal.
    _guardian: OwnedFd,
    /// Shared with the guardian: the group of each running command, 0 when free.
    slots: &'static [AtomicI32],
    free: Mutex<Vec<usize>>,
}

static SPAWNER: OnceLock<Result<Spawner, String>> = OnceLock::new();

/// Stack of the child between `clone` and `execveat` (it needs a few hundred bytes).
const CHILD_STACK_BYTES: usize = 64 * 1024;

/// Commands that can run at once under the guardian's protection.
const GUARDIAN_SLOTS: usize = 4096;

/// Steps of the child, reported when one fails.
const STAGES: [&str; 13] = [
    "stdio redirection",
    "setpgid",
    "prctl(PR_SET_CHILD_SUBREAPER) or tagging RLIMIT_RTTIME",
    "prctl(PR_SET_PDEATHSIG)",
    "parent check (the owner exited)",
    "fchdir to the verified directory",
    "clearing close-on-exec on the script",
    "execveat",
    "prctl(PR_SET_NO_NEW_PRIVS) for confinement",
    "landlock_restrict_self (read-only or network confinement)",
    "seccomp (read-only or network confinement)",
    "joining the node's cgroup",
    "marking inherited descriptors close-on-exec",
];

fn spawner() -> Result<&'static Spawner, ExecError> {
    SPAWNER
        .get_or_init(start_spawner)
        .as_ref()
        .map_err(|reason| ExecError::SpawnerUnavailable {
            reason: reason.clone(),
        })
}

fn start_spawner() -> Result<Spawner, String> {
    let slots = shared_slots().map_err(|e| format!("cannot map the guardian's table: {e}"))?;
    // Every contained tree sits below the owner root: the guardian kills them all at once.
    let tree_kill = match crate::containment::owner_root() {
        Ok(root) => root
            .kill_handle()
            .map_err(|e| format!("cannot open {}/cgroup.kill: {e}", root.path()))?,
        Err(e) => {
            tracing::debug!("{e}; node trees are bound to the owner by process group only");
            None
        }
    };
    // Without cgroups, trees are tracked and tagged: the guardian kills the owner's tags.
    let tags = match crate::containment::owner_root() {
        Ok(_) => None,
        Err(_) => Some(crate::containment::tracked::owner_tags()),
    };
    let guardian = start_guardian(slots, tree_kill, tags)
        .map_err(|e| format!("cannot start the guardian: {e}"))?;
    let (tx, rx) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("rho-exec-spawner".to_owned())
        .spawn(move || spawner_loop(&rx, slots))
        .map_err(|e| format!("cannot start the spawner thread: {e}"))?;
    Ok(Spawner {
        jobs: Mutex::new(tx),
        _guardian: guardian,
        slots,
        free: Mutex::new((0..GUARDIAN_SLOTS).rev().collect()),
    })
}

/// A zeroed `MAP_SHARED | MAP_ANONYMOUS` table that stays mapped for the life of the
/// process and is inherited, still shared, by the guardian and every child until exec.
fn shared_slots() -> io::Result<&'static [AtomicI32]> {
    let len = GUARDIAN_SLOTS * std::mem::size_of::<AtomicI32>();
    // SAFETY: anonymous mapping request; the result is checked below.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the mapping is `len` bytes, page-aligned (so aligned for AtomicI32), zeroed
    // (a valid AtomicI32 is any bit pattern), never unmapped, and only accessed atomically.
    Ok(unsafe { std::slice::from_raw_parts(ptr.cast::<AtomicI32>(), GUARDIAN_SLOTS) })
}

/// Starts the spawner thread and the guardian if they are not running yet: a caller that
/// launches its trees another way (the `bash` tool's `std::process::Command`) still wants
/// the guardian to kill them, through their cgroup or their tag, when this process dies.
pub(crate) fn ensure_guardian() -> Result<(), ExecError> {
    spawner().map(drop)
}

/// A free guardian slot.
fn take_slot(spawner: &Spawner) -> Result<usize, ExecError> {
    spawner
        .free
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .pop()
        .ok_or_else(|| ExecError::SpawnerUnavailable {
            reason: format!("{GUARDIAN_SLOTS} commands are already running"),
        })
}

thread_local! {
    /// The child's stack for launches made on this thread (see [`launch_here`]).
    static CHILD_STACK: std::cell::RefCell<Vec<u8>> =
        std::cell::RefCell::new(vec![0_u8; CHILD_STACK_BYTES]);
}

/// [`launch`] on the calling thread, without the two hand-offs to the spawner thread (each
/// a wake-up that waits for a free core on a loaded machine). The child's parent-death
/// signal is bound to the calling thread, so that thread must outlive the child: the caller
/// waits for it (the workflow runner's worker threads do, and live until the run ends), and
/// a thread that may end first uses [`launch`].
pub(crate) fn launch_here(request: &LaunchRequest) -> Result<Child, ExecError> {
    let spawner = spawner()?;
    let slot = take_slot(spawner)?;
    let result = with_all_signals_blocked(|| {
        CHILD_STACK
            .with_borrow_mut(|stack| fork_exec(request, &spawner.slots[slot], slot, stack, false))
    });
    if result.is_err() {
        GuardSlot(slot).release();
    }
    result
}

/// Runs `f` with every signal blocked on this thread (the child of `clone` inherits the
/// mask, so no handler can run on memory it shares with us), then restores the mask.
fn with_all_signals_blocked<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: `all` is initialised by sigfillset and `old` is written by pthread_sigmask
    // before it is read back; both are plain data on this stack.
    let old = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&raw mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &raw const all, &raw mut old);
        old
    };
    let result = f();
    // SAFETY: restores the mask saved above; pthread_sigmask only reads `old`.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, &raw const old, std::ptr::null_mut());
    }
    result
}

/// Forks and executes a prepared request on the spawner thread.
pub(crate) fn launch(request: LaunchRequest) -> Result<Child, ExecError> {
    let spawner = spawner()?;
    let slot = take_slot(spawner)?;
    let (reply, answer) = mpsc::sync_channel(1);
    let gone = || ExecError::SpawnerUnavailable {
        reason: "spawner thread exited".to_owned(),
    };
    let sent = match spawner.jobs.lock() {
        Ok(jobs) => jobs
            .send(Job {
                request,
                slot,
                reply,
            })
            .map_err(|_| gone()),
        Err(_) => Err(gone()),
    };
    match sent.and_then(|()| answer.recv().map_err(|_| gone())) {
        Ok(Ok(child)) => Ok(child),
        Ok(Err(e)) | Err(e) => {
            GuardSlot(slot).release();
            Err(e)
        }
    }
}

/// A thread that installed one seccomp program on itself and creates the children whose
/// confinement has exactly that program: they inherit it (the kernel copies the creating
/// thread's filter into a new process) instead of each attaching it. Attaching makes the
/// kernel check, convert and JIT-compile the program, and every exit frees the compiled
/// code again; both patch kernel text and wait for the other CPUs to flush (measured here
/// at ~70 µs of CPU per read-only node, and longer waits on a loaded machine).
///
/// The thread does nothing else, so nothing but those children inherits its filter; the
/// rest of the process is not filtered. It lives as long as the process (like the spawner
/// thread), so the children's parent-death signal stays bound to a thread that outlives
/// them. A launch never waits behind another one (each suspends its thread until the child
/// has executed): it takes an idle launcher of its program or starts one, so there are at
/// most as many per program as launches ever ran at once.
struct FilteredLauncher {
    program: std::sync::Arc<seccompiler::BpfProgram>,
    jobs: mpsc::Sender<Job>,
    busy: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

static FILTERED_LAUNCHERS: Mutex<Vec<FilteredLauncher>> = Mutex::new(Vec::new());

/// Marks a claimed launcher idle again when the launch is over, however it ended.
struct Claimed(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Drop for Claimed {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// [`launch`] for a request whose confinement has a seccomp program: on an idle launcher
/// thread filtered with that same program, started when none is idle. Where no such thread
/// can be started, the request is launched by the spawner thread and the child attaches the
/// program itself, as before: either way the child runs under the program.
pub(crate) fn launch_filtered(request: LaunchRequest) -> Result<Child, ExecError> {
    let spawner = spawner()?;
    let Some(program) = request
        .confinement
        .as_ref()
        .and_then(|c| c.filter_program())
        .cloned()
    else {
        return launch(request);
    };
    let claimed = {
        let mut launchers = FILTERED_LAUNCHERS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let idle = launchers.iter().find(|l| {
            *l.program == *program
                && l.busy
                    .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
        });
        if let Some(launcher) = idle {
            Some((
                launcher.jobs.clone(),
                Claimed(std::sync::Arc::clone(&launcher.busy)),
            ))
        } else {
            match start_filtered_launcher(&program, spawner.slots) {
                Ok(jobs) => {
                    let busy = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
                    launchers.push(FilteredLauncher {
                        program,
                        jobs: jobs.clone(),
                        busy: std::sync::Arc::clone(&busy),
                    });
                    Some((jobs, Claimed(busy)))
                }
                Err(reason) => {
                    tracing::warn!("{reason}; confined children attach their filter themselves");
                    None
                }
            }
        }
    };
    let Some((jobs, _claimed)) = claimed else {
        return launch(request);
    };
    let slot = take_slot(spawner)?;
    let (reply, answer) = mpsc::sync_channel(1);
    let gone = || ExecError::SpawnerUnavailable {
        reason: "filtered launcher thread exited".to_owned(),
    };
    let sent = jobs
        .send(Job {
            request,
            slot,
            reply,
        })
        .map_err(|_| gone());
    match sent.and_then(|()| answer.recv().map_err(|_| gone())) {
        Ok(Ok(child)) => Ok(child),
        Ok(Err(e)) | Err(e) => {
            GuardSlot(slot).release();
            Err(e)
        }
    }
}

/// Starts a launcher thread filtered with `program`; answers once the filter is in force on
/// it (or why it could not be installed, in which case the thread has ended).
fn start_filtered_launcher(
    program: &std::sync::Arc<seccompiler::BpfProgram>,
    slots: &'static [AtomicI32],
) -> Result<mpsc::Sender<Job>, String> {
    let (tx, rx) = mpsc::channel::<Job>();
    let (ready_tx, ready_rx) = mpsc::sync_channel::<Result<(), String>>(1);
    let program = std::sync::Arc::clone(program);
    std::thread::Builder::new()
        .name("rho-exec-filtered".to_owned())
        .spawn(move || {
            block_all_signals();
            let installed = crate::confinement::Confinement::filter_calling_thread(&program)
                .map_err(|f| {
                    format!(
                        "cannot filter a launcher thread: {} failed: {}",
                        f.step,
                        io::Error::from_raw_os_error(f.errno)
                    )
                });
            let ok = installed.is_ok();
            if ready_tx.send(installed).is_err() || !ok {
                return;
            }
            let mut stack = vec![0_u8; CHILD_STACK_BYTES];
            while let Ok(job) = rx.recv() {
                let result = fork_exec(&job.request, &slots[job.slot], job.slot, &mut stack, true);
                if job.reply.send(result).is_err() {
                    tracing::warn!("a launch requester went away before its answer");
                }
            }
        })
        .map_err(|e| format!("cannot start a filtered launcher thread: {e}"))?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(tx),
        Ok(Err(reason)) => Err(reason),
        Err(_) => Err("the filtered launcher thread ended while starting".to_owned()),
    }
}

/// `pidfd_open(2)`.
pub(crate) fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain system call with integer arguments.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = RawFd::try_from(fd).map_err(|_| io::Error::other("pidfd out of range"))?;
    // SAFETY: the kernel just returned this new descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `pidfd_send_signal(2)`: signals exactly the process `pidfd` pins. Failures (the process
/// is gone) are ignored: the caller re-checks what is left.
pub(crate) fn pidfd_send_signal(pidfd: &OwnedFd, signal: i32) {
    // SAFETY: plain system call on a descriptor we own; a null siginfo is allowed.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0_u32,
        );
    }
}

fn spawner_loop(jobs: &mpsc::Receiver<Job>, slots: &'static [AtomicI32]) {
    // This thread never handles process signals; children inherit the full mask and clear
    // it right before `execveat`.
    block_all_signals();
    let mut stack = vec![0_u8; CHILD_STACK_BYTES];
    while let Ok(job) = jobs.recv() {
        let result = fork_exec(&job.request, &slots[job.slot], job.slot, &mut stack, false);
        if job.reply.send(result).is_err() {
            tracing::warn!("a launch requester went away before its answer");
        }
    }
}

fn block_all_signals() {
    // SAFETY: `set` is initialised by sigfillset before use; pthread_sigmask only reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&raw mut set);
        libc::pthread_sigmask(libc::SIG_SETMASK, &raw const set, std::ptr::null_mut());
    }
}

/// Everything the child reads, in memory that exists before the fork.
struct ChildPlan<'a> {
    request: &'a LaunchRequest,
    argv: &'a [*const libc::c_char],
    envp: &'a [*const libc::c_char],
    parent: libc::pid_t,
    guard_slot: &'a AtomicI32,
    report: &'a ChildReport,
    empty_mask: libc::sigset_t,
    /// `cgroup.procs` the child writes `0` to first, when it could not be created in its
    /// cgroup directly (see [`create_child`]).
    join_procs: Option<RawFd>,
    /// Created by a filtered launcher thread (see [`launch_filtered`]): the child holds the
    /// confinement's seccomp program already and only checks it is in force.
    inherited_filter: bool,
}

fn fork_exec(
    request: &LaunchRequest,
    guard_slot: &AtomicI32,
    slot: usize,
    stack: &mut [u8],
    inherited_filter: bool,
) -> Result<Child, ExecError> {
    let mut argv: Vec<*const libc::c_char> = request.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = request.envp.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    // SAFETY: a zeroed sigset is a valid plain-data value, initialised by sigemptyset.
    let empty_mask = unsafe {
        let mut mask: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut mask);
        mask
    };
    let report = ChildReport {
        stage: AtomicI32::new(-1),
        errno: AtomicI32::new(0),
    };
    let mut plan = ChildPlan {
        request,
        argv: &argv,
        envp: &envp,
        // SAFETY: getpid has no preconditions.
        parent: unsafe { libc::getpid() },
        guard_slot,
        report: &report,
        empty_mask,
        join_procs: None,
        inherited_filter,
    };
    let (pid, pidfd) = create_child(&mut plan, stack)?;
    // The child has executed the sealed copy, or reported a failure and exited.
    let stage = report.stage.load(Ordering::SeqCst);
    if stage >= 0 {
        // The caller releases the slot once this error reaches it; clear it before reaping.
        guard_slot.store(0, Ordering::SeqCst);
        reap_blocking(pid);
        let stage = usize::try_from(stage)
            .ok()
            .and_then(|i| STAGES.get(i))
            .copied();
        return Err(ExecError::Launch {
            stage: stage.unwrap_or("an unknown step"),
            source: io::Error::from_raw_os_error(report.errno.load(Ordering::SeqCst)),
        });
    }
    let pidfd = pidfd.or_else(|| pidfd_open(pid).ok());
    Ok(Child {
        pid,
        pidfd,
        slot: GuardSlot(slot),
    })
}

/// Whether `clone3` with `CLONE_INTO_CGROUP` may work here: cleared once the kernel said it
/// has no `clone3` (before 5.3) or no `cgroup` field in it (before 5.7).
static CLONE_INTO_CGROUP: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(cfg!(target_arch = "x86_64"));

/// Creates the child of `plan` on `stack`, suspended-parent style (`CLONE_VM |
/// CLONE_VFORK`), and returns its pid and, when the kernel gave one, its pidfd.
///
/// A child with a cgroup is created in it (`clone3` with `CLONE_INTO_CGROUP`): it never
/// runs outside, and, unlike writing `cgroup.procs` after the fork, creation does not
/// migrate a running process (measured here at ~0.2 ms on a quiet machine and several
/// milliseconds under load, on the path from one node to the next). Where that fails (an
/// older kernel, another architecture, any refusal), the child is created in the owner's
/// cgroup and joins its own by writing `0` to `cgroup.procs` first, which reports the
/// refusal, if any, as that step's failure.
fn create_child(
    plan: &mut ChildPlan<'_>,
    stack: &mut [u8],
) -> Result<(libc::pid_t, Option<OwnedFd>), ExecError> {
    // The child runs on `stack` (it grows down from the 16-byte aligned end).
    let base = stack.as_mut_ptr() as usize;
    let top = stack.as_mut_ptr_range().end as usize & !15;
    if let Some(cgroup) = plan.request.cgroup_fd
        && CLONE_INTO_CGROUP.load(Ordering::Relaxed)
    {
        match clone3_into(plan, cgroup, base, top - base) {
            Ok(created) => return Ok(created),
            Err(e) => {
                if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::E2BIG)) {
                    CLONE_INTO_CGROUP.store(false, Ordering::Relaxed);
                }
                tracing::debug!("clone3 into the node's cgroup failed ({e}); joining after clone");
            }
        }
    }
    // Kept open until the child has executed or exited (this function's end).
    let procs = match plan.request.cgroup_fd {
        Some(cgroup) => Some(open_procs(cgroup).map_err(|source| ExecError::Launch {
            stage: STAGES[11],
            source,
        })?),
        None => None,
    };
    plan.join_procs = procs.as_ref().map(AsRawFd::as_raw_fd);
    // SAFETY: CLONE_VM | CLONE_VFORK: the child shares our memory and this thread stays
    // suspended until the child has executed or exited, so `plan`, its report and `stack`
    // outlive its use of them and nothing else touches them meanwhile. The child only runs
    // `child_entry`: async-signal-safe calls, with every signal blocked (inherited from this
    // thread) so no handler can run on the shared memory.
    let pid = unsafe {
        libc::clone(
            child_entry,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            std::ptr::from_mut(plan).cast(),
        )
    };
    if pid < 0 {
        return Err(ExecError::Setup {
            what: "clone",
            source: io::Error::last_os_error(),
        });
    }
    Ok((pid, None))
}

/// `cgroup.procs` of the cgroup directory `cgroup`, opened for writing.
fn open_procs(cgroup: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: openat on a directory descriptor the caller holds, with a constant name.
    let fd = unsafe {
        libc::openat(
            cgroup,
            c"cgroup.procs".as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `struct clone_args` of `clone3(2)`, up to its `cgroup` field (`CLONE_ARGS_SIZE_VER2`).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// `CLONE_INTO_CGROUP` (Linux 5.7).
const CLONE_INTO_CGROUP_FLAG: u64 = 0x2_0000_0000;

/// `clone3(CLONE_VM | CLONE_VFORK | CLONE_PIDFD | CLONE_INTO_CGROUP)` of `plan`'s child
/// into the cgroup directory `cgroup`, on the stack `[stack, stack + size)`.
#[cfg(target_arch = "x86_64")]
fn clone3_into(
    plan: &mut ChildPlan<'_>,
    cgroup: RawFd,
    stack: usize,
    size: usize,
) -> io::Result<(libc::pid_t, Option<OwnedFd>)> {
    let mut pidfd: libc::c_int = -1;
    let args = CloneArgs {
        flags: (libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD) as u64
            | CLONE_INTO_CGROUP_FLAG,
        pidfd: std::ptr::from_mut(&mut pidfd) as u64,
        exit_signal: libc::SIGCHLD as u64,
        stack: stack as u64,
        stack_size: size as u64,
        cgroup: u64::try_from(cgroup).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?,
        ..CloneArgs::default()
    };
    let ret: i64;
    let entry: extern "C" fn(*mut libc::c_void) -> libc::c_int = child_entry;
    let arg: *mut libc::c_void = std::ptr::from_mut(plan).cast();
    // SAFETY: as for `clone` in `create_child`: CLONE_VM | CLONE_VFORK suspends this thread
    // until the child has executed or exited, so `plan`, `args`, `pidfd` and the stack
    // outlive the child's use of them, and every signal is blocked. The kernel starts the
    // child at the instruction after `syscall` with its stack pointer at `stack + size`
    // (16-byte aligned by the caller) and every register but rax, rcx and r11 as this
    // thread had them; `entry` and `arg` are inputs, so they are in none of those three.
    // The child calls `entry(arg)`, which never returns (it executes or calls `_exit`);
    // `ud2` traps should it ever. The parent only gets rax back; the asm touches no stack
    // of its own and may read or write any memory (the child writes its report).
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "mov rdi, {arg}",
            "call {entry}",
            "ud2",
            "2:",
            entry = in(reg) entry,
            arg = in(reg) arg,
            inlateout("rax") libc::SYS_clone3 => ret,
            in("rdi") &raw const args,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            out("rcx") _,
            out("r11") _,
            options(nostack),
        );
    }
    if ret < 0 {
        return Err(io::Error::from_raw_os_error(
            i32::try_from(-ret).unwrap_or(libc::EINVAL),
        ));
    }
    let pid = libc::pid_t::try_from(ret).map_err(|_| io::Error::other("pid out of range"))?;
    // SAFETY: with CLONE_PIDFD the kernel stored a new descriptor nobody else owns.
    let pidfd = (pidfd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(pidfd) });
    Ok((pid, pidfd))
}

/// Other architectures create the child with `clone` and let it join its cgroup.
#[cfg(not(target_arch = "x86_64"))]
fn clone3_into(
    _plan: &mut ChildPlan<'_>,
    _cgroup: RawFd,
    _stack: usize,
    _size: usize,
) -> io::Result<(libc::pid_t, Option<OwnedFd>)> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

/// Where the child reports the step that failed, in memory shared with the parent.
struct ChildReport {
    stage: AtomicI32,
    errno: AtomicI32,
}

extern "C" fn child_entry(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildPlan` of the suspended parent thread (see `fork_exec`).
    let plan = unsafe { &*arg.cast::<ChildPlan<'_>>() };
    child_exec(plan)
}

/// Waits for and reaps `pid`.
pub(crate) fn reap_blocking(pid: i32) -> Option<libc::c_int> {
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer; `pid` is our own unreaped child.
        let r = unsafe { libc::waitpid(pid, &raw mut status, 0) };
        if r == pid {
            return Some(status);
        }
        if r < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return None;
    }
}

/// The child between `fork` and `execveat`. Only async-signal-safe calls on memory prepared
/// before the fork; never returns.
fn child_exec(plan: &ChildPlan<'_>) -> ! {
    let req = plan.request;
    // SAFETY (whole block): every call is an async-signal-safe system call on descriptors
    // and memory that were valid in the parent at fork time and are private copies here.
    unsafe {
        for (from, to) in [(req.stdin_fd, 0), (req.stdout_fd, 1), (req.stderr_fd, 2)] {
            // The parent moved every source above 2, so no dup2 clobbers a later source.
            if libc::dup2(from, to) < 0 {
                child_fail(plan, 0);
            }
        }
        // Ignored signals survive exec (caught ones are reset by it); a node starts with
        // default dispositions (SIGPIPE in particular, which Rust programs ignore). Signals
        // stay blocked until exec. The system call itself, not glibc's wrapper, which
        // refuses the two signals it reserves (32 and 33) even when they were inherited
        // ignored: the kernel's `struct sigaction` with every field zero is `SIG_DFL`.
        let default_action = [0_u64; 4];
        for sig in 1..65_i32 {
            if req.ignored_signals & (1_u64 << (sig - 1)) != 0
                && sig != libc::SIGKILL
                && sig != libc::SIGSTOP
            {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    default_action.as_ptr(),
                    std::ptr::null_mut::<libc::c_void>(),
                    8_usize,
                );
            }
        }
        if libc::setpgid(0, 0) < 0 {
            child_fail(plan, 1);
        }
        // Into the node's cgroup before anything of the node runs: whatever it starts later,
        // detached or not, stays inside.
        if let Some(procs) = plan.join_procs
            && libc::write(procs, b"0".as_ptr().cast(), 1) != 1
        {
            child_fail(plan, 11);
        }
        if let Some(tag) = req.tree_tag
            && !crate::containment::child::enter_tracked(tag)
        {
            child_fail(plan, 2);
        }
        // Registered before the death signal is armed: if the owner dies in between, the
        // parent check below ends this child.
        plan.guard_slot.store(libc::getpid(), Ordering::SeqCst);
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) < 0 {
            child_fail(plan, 3);
        }
        // The owner may have died before prctl took effect.
        if libc::getppid() != plan.parent {
            libc::_exit(126);
        }
        // Any descriptor a library opened without close-on-exec must not reach the node.
        if !cloexec_from(3) {
            child_fail(plan, 12);
        }
        if libc::fchdir(req.cwd_fd) < 0 {
            child_fail(plan, 5);
        }
        if let Some(script) = req.script_fd
            && libc::fcntl(script, libc::F_SETFD, 0) < 0
        {
            child_fail(plan, 6);
        }
        // Last, so every step above still had its rights; the ruleset and filter descriptors
        // are close-on-exec and the program never holds them.
        if let Some(confinement) = &req.confinement
            && let Err(failure) = if plan.inherited_filter {
                confinement.apply_in_child_under_inherited_filter()
            } else {
                confinement.apply_in_child()
            }
        {
            *libc::__errno_location() = failure.errno;
            let stage = match failure.step.as_bytes() {
                b"landlock_restrict_self" => 9,
                b"seccomp" => 10,
                _ => 8,
            };
            child_fail(plan, stage);
        }
        libc::sigprocmask(
            libc::SIG_SETMASK,
            &raw const plan.empty_mask,
            std::ptr::null_mut(),
        );
        libc::syscall(
            libc::SYS_execveat,
            req.exec_fd,
            c"".as_ptr(),
            plan.argv.as_ptr(),
            plan.envp.as_ptr(),
            libc::AT_EMPTY_PATH,
        );
        child_fail(plan, 7)
    }
}

/// Reports the failing step and errno to the parent, then exits without running any
/// destructor or atexit handler.
fn child_fail(plan: &ChildPlan<'_>, stage: i32) -> ! {
    // SAFETY: errno's location is valid for this thread; `report` lives in the suspended
    // parent's frame; _exit is async-signal-safe.
    unsafe {
        plan.report
            .errno
            .store(*libc::__errno_location(), Ordering::SeqCst);
        plan.report.stage.store(stage, Ordering::SeqCst);
        libc::_exit(127)
    }
}

/// Forks the guardian and returns the write end of its pipe. `tree_kill` is the owner
/// root's `cgroup.kill`, written when the owner is gone.
fn start_guardian(
    slots: &'static [AtomicI32],
    tree_kill: Option<OwnedFd>,
    tags: Option<u64>,
) -> io::Result<OwnedFd> {
    let (read_end, write_end) = pipe2(OFlag::O_CLOEXEC).map_err(io::Error::from)?;
    // Both above the numbers the guardian moves them to (3 and 4), so neither move can
    // close the other.
    let read_end = dup_at_least(&read_end, 10)?;
    let tree_kill = tree_kill.map(|fd| dup_at_least(&fd, 10)).transpose()?;
    // SAFETY: sigfillset initialises the set before use.
    let full_mask = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&raw mut set);
        set
    };
    let read_fd = read_end.as_raw_fd();
    let kill_fd = tree_kill.as_ref().map(AsRawFd::as_raw_fd);
    // SAFETY: the child only runs `guardian_main`: system calls and atomic loads, no return.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        guardian_main(read_fd, kill_fd, tags, &full_mask, slots);
    }
    drop((read_end, tree_kill));
    tracing::debug!(guardian = pid, "exec guardian started");
    Ok(write_end)
}

/// A close-on-exec duplicate of `fd` numbered `min` or above.
fn dup_at_least(fd: &OwnedFd, min: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC on a valid descriptor returns a new descriptor we then own.
    let dup = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, min) };
    if dup < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `dup` is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(dup) })
}

/// The guardian: waits for the owner's end of the pipe to close, then kills every group
/// still in a slot and every contained tree (the owner root's cgroup, or every process
/// carrying one of the owner's `tags`, see [`crate::containment::tracked`]).
fn guardian_main(
    read_fd: RawFd,
    kill_fd: Option<RawFd>,
    tags: Option<u64>,
    full_mask: &libc::sigset_t,
    slots: &[AtomicI32],
) -> ! {
    // SAFETY (whole block): async-signal-safe system calls on stack memory and atomic loads
    // from the shared mapping only.
    unsafe {
        // Only SIGKILL can stop the guardian; terminal signals to the owner's group miss it.
        libc::sigprocmask(libc::SIG_SETMASK, full_mask, std::ptr::null_mut());
        libc::setpgid(0, 0);
        // Keep only the pipe (on 3) and the trees' kill switch (on 4): holding anything
        // else (another node's stdout, a lock file) would change what the owner's other
        // descriptors mean. Both sources are numbered 10 or above.
        if libc::dup3(read_fd, 3, 0) != 3 {
            libc::_exit(1);
        }
        let kill = match kill_fd {
            Some(fd) if libc::dup3(fd, 4, 0) == 4 => Some(4),
            Some(_) => libc::_exit(1),
            None => None,
        };
        if !close_from(0, 2) || !close_from(if kill.is_some() { 5 } else { 4 }, RawFd::MAX) {
            // A guardian that may hold node descriptors must not exist.
            libc::_exit(1);
        }
        let mut byte = [0_u8; 1];
        loop {
            let n = libc::read(3, byte.as_mut_ptr().cast(), 1);
            if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            // Nothing is ever written: any return is end of file (or an error, treated alike).
            break;
        }
        if let Some(kill) = kill {
            libc::write(kill, b"1".as_ptr().cast(), 1);
        }
        for slot in slots {
            let pgid = slot.load(Ordering::SeqCst);
            if pgid > 1 {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
        if let Some(tags) = tags {
            crate::containment::child::kill_tagged(tags);
        }
        libc::_exit(0)
    }
}

/// The highest descriptor number to visit when `close_range` is unavailable: the soft
/// `RLIMIT_NOFILE` (no descriptor can be numbered at or above it).
fn descriptor_limit() -> RawFd {
    // SAFETY: getrlimit writes into the struct we pass; async-signal-safe system call.
    let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) } != 0 {
        return 1 << 20;
    }
    RawFd::try_from(limit.rlim_cur.min(1 << 30)).unwrap_or(1 << 20)
}

/// Closes descriptors `first..=last`: `close_range`, or one `close` per number where the
/// kernel has no `close_range` (before 5.9). Async-signal-safe. False when neither worked.
pub(crate) fn close_from(first: RawFd, last: RawFd) -> bool {
    let (Ok(lo), Ok(hi)) = (u32::try_from(first), u32::try_from(last)) else {
        return false;
    };
    // SAFETY: plain system call with integer arguments.
    if unsafe { libc::syscall(libc::SYS_close_range, lo, hi, 0_u32) } == 0 {
        return true;
    }
    close_each(first, last)
}

/// The fallback of [`close_from`].
pub(crate) fn close_each(first: RawFd, last: RawFd) -> bool {
    let end = last.min(descriptor_limit().saturating_sub(1));
    for fd in first..=end {
        // SAFETY: closing a number we may not hold only fails with EBADF.
        unsafe { libc::close(fd) };
    }
    true
}

/// Marks every descriptor from `first` up close-on-exec: `close_range(CLOSE_RANGE_CLOEXEC)`,
/// or `fcntl` per number where the kernel lacks it (before 5.11). Async-signal-safe.
pub(crate) fn cloexec_from(first: RawFd) -> bool {
    let Ok(lo) = u32::try_from(first) else {
        return false;
    };
    // SAFETY: plain system call with integer arguments.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            lo,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    r == 0 || cloexec_each(first)
}

/// The fallback of [`cloexec_from`]; false when a descriptor that exists cannot be marked.
pub(crate) fn cloexec_each(first: RawFd) -> bool {
    for fd in first..descriptor_limit() {
        // SAFETY: fcntl on a number we may not hold only fails with EBADF.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        if flags < 0 {
            continue;
        }
        // SAFETY: as above, on a descriptor that exists.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) } < 0 {
            return false;
        }
    }
    true
}

/// `fcntl(F_DUPFD_CLOEXEC, 3)` when `fd` sits on 0, 1 or 2, so the child's `dup2` of one
/// stream can never close the source of another.
pub(crate) fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC on a valid descriptor returns a new descriptor we then own.
    let dup = unsafe { libc::fcntl(fd.as_fd().as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if dup < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `dup` is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(dup) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seccomp_mode_line(status: &str) -> String {
        status
            .lines()
            .find(|l| l.starts_with("Seccomp:"))
            .unwrap_or_default()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// A descriptor for a test launch, close-on-exec.
    fn open(path: &str, flags: libc::c_int) -> OwnedFd {
        let c = CString::new(path).unwrap();
        // SAFETY: a NUL-terminated path; the descriptor is owned below.
        let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) };
        assert!(fd >= 0, "open {path}");
        // SAFETY: just returned by open.
        unsafe { OwnedFd::from_raw_fd(fd) }
    }

    /// How a test launch runs: the program, its arguments and what the request carries.
    struct TestLaunch<'a> {
        program: &'a str,
        argv: &'a [&'a str],
        confinement: Option<std::sync::Arc<crate::confinement::Confinement>>,
        cgroup_fd: Option<RawFd>,
        ignored_signals: u64,
    }

    /// Launches `test` through `start` with stdout and stderr on one pipe, and returns what
    /// it printed once it exited with status 0.
    fn output_of(
        start: fn(LaunchRequest) -> Result<Child, ExecError>,
        test: TestLaunch<'_>,
    ) -> String {
        let program = open(test.program, libc::O_PATH);
        let cwd = open("/", libc::O_PATH | libc::O_DIRECTORY);
        let stdin = open("/dev/null", libc::O_RDONLY);
        let (read, write) = pipe2(OFlag::O_CLOEXEC).unwrap();
        let child = start(LaunchRequest {
            argv: test
                .argv
                .iter()
                .map(|a| CString::new(*a).unwrap())
                .collect(),
            envp: Vec::new(),
            exec_fd: program.as_raw_fd(),
            script_fd: None,
            cwd_fd: cwd.as_raw_fd(),
            stdin_fd: stdin.as_raw_fd(),
            stdout_fd: write.as_raw_fd(),
            stderr_fd: write.as_raw_fd(),
            confinement: test.confinement,
            cgroup_fd: test.cgroup_fd,
            tree_tag: None,
            ignored_signals: test.ignored_signals,
        })
        .unwrap();
        drop(write);
        let mut out = String::new();
        std::io::Read::read_to_string(&mut std::fs::File::from(read), &mut out).unwrap();
        child.slot.release();
        let status = reap_blocking(child.pid).unwrap();
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        out
    }

    /// The children of a filtered launcher run under its program (checked by the child before
    /// `execveat`, read back here from the child's own status), while the thread that asked
    /// for the launch, like every thread but the launcher, stays unfiltered.
    #[test]
    fn a_filtered_launcher_hands_its_filter_to_children_and_to_nothing_else() {
        use crate::confinement::{Confinement, ConfinementRequest, KernelSupport, plan};
        let support = KernelSupport {
            landlock_abi: None,
            seccomp: crate::confinement::KernelSupport::detect().unwrap().seccomp,
            required_abi: None,
        };
        if !support.seccomp {
            crate::confinement::skip_unless_required(
                "seccomp filters are unavailable on this kernel",
            );
            return;
        }
        // Network denial without Landlock: a filter and no ruleset.
        let request = ConfinementRequest {
            read_only: false,
            deny_network: true,
        };
        let confined = plan(request, &support).unwrap();
        assert!(!confined.needs_ruleset());
        let confinement = std::sync::Arc::new(
            Confinement::prepare(&confined, std::path::Path::new("/")).unwrap(),
        );
        let mine = |l: &&FilteredLauncher| Some(&l.program) == confinement.filter_program();
        let launchers = || {
            FILTERED_LAUNCHERS
                .lock()
                .unwrap()
                .iter()
                .filter(mine)
                .count()
        };
        for round in 0..3 {
            if round == 2 {
                assert_eq!(
                    launchers(),
                    1,
                    "one launcher serves launches made one after another"
                );
                // As if a launch were in progress on it: the next must not wait behind it.
                for l in FILTERED_LAUNCHERS.lock().unwrap().iter().filter(mine) {
                    l.busy.store(true, Ordering::Release);
                }
            }
            let out = output_of(
                launch_filtered,
                TestLaunch {
                    program: "/bin/sh",
                    argv: &["sh", "-c", "cat /proc/self/status"],
                    confinement: Some(std::sync::Arc::clone(&confinement)),
                    cgroup_fd: None,
                    ignored_signals: ignored_signals(),
                },
            );
            assert_eq!(
                seccomp_mode_line(&out),
                "Seccomp: 2",
                "the child is filtered"
            );
        }
        let own = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        assert_eq!(
            seccomp_mode_line(&own),
            "Seccomp: 0",
            "the thread that asked is not"
        );
        assert_eq!(
            launchers(),
            2,
            "a busy launcher made the launch start another"
        );
        for l in FILTERED_LAUNCHERS.lock().unwrap().iter().filter(mine) {
            l.busy.store(false, Ordering::Release);
        }
    }

    /// What this process ignores (Rust ignores SIGPIPE before `main`) is what the child
    /// resets: it starts with nothing ignored.
    #[test]
    fn a_child_starts_with_no_signal_ignored() {
        let ignored = ignored_signals();
        assert_ne!(
            ignored,
            u64::MAX,
            "the mask of /proc/self/status is readable"
        );
        assert_ne!(
            ignored & (1 << (libc::SIGPIPE - 1)),
            0,
            "SIGPIPE is ignored here"
        );
        let out = output_of(
            launch,
            TestLaunch {
                program: "/bin/cat",
                argv: &["cat", "/proc/self/status"],
                confinement: None,
                cgroup_fd: None,
                ignored_signals: ignored,
            },
        );
        let child_ignored = out
            .lines()
            .find_map(|l| l.strip_prefix("SigIgn:"))
            .map(str::trim);
        assert_eq!(child_ignored, Some("0000000000000000"), "{out}");
    }

    /// A child with a cgroup runs in it from its first instruction on, whether the kernel
    /// created it there (`clone3` with `CLONE_INTO_CGROUP`) or it joined after `clone` (the
    /// fallback for kernels without it): the program reads its own `/proc/self/cgroup`.
    #[test]
    fn a_child_with_a_cgroup_runs_in_it_however_it_was_created() {
        let Ok(root) = crate::containment::owner_root() else {
            crate::confinement::skip_unless_required("no delegated cgroup v2 hierarchy here");
            return;
        };
        let supported = CLONE_INTO_CGROUP.load(Ordering::Relaxed);
        for into in [true, false] {
            if into && !supported {
                eprintln!("clone3 with CLONE_INTO_CGROUP is unavailable here: fallback only");
                continue;
            }
            // Both ways are correct for every launch, so other tests running meanwhile are
            // unaffected by the switch.
            CLONE_INTO_CGROUP.store(into, Ordering::Relaxed);
            let name = format!("spawner-test-{}-{into}", std::process::id());
            let cgroup = root.create(&name).unwrap();
            let dir = cgroup.dir_handle().unwrap();
            let out = output_of(
                launch,
                TestLaunch {
                    program: "/bin/cat",
                    argv: &["cat", "/proc/self/cgroup"],
                    confinement: None,
                    cgroup_fd: Some(dir.as_raw_fd()),
                    ignored_signals: ignored_signals(),
                },
            );
            assert!(
                out.trim_end().ends_with(&format!("/{name}")),
                "created in its cgroup (clone3: {into}): {out}"
            );
            cgroup.remove().unwrap();
        }
        CLONE_INTO_CGROUP.store(supported, Ordering::Relaxed);
    }

    fn inheritable_fd() -> OwnedFd {
        let (read, _write) = pipe2(OFlag::empty()).unwrap();
        read
    }

    fn cloexec(fd: RawFd) -> bool {
        // SAFETY: F_GETFD on a descriptor this test owns.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        flags >= 0 && flags & libc::FD_CLOEXEC != 0
    }

    /// The fallback for kernels without `close_range` (before 5.9 / 5.11) does what the
    /// system call does, so a node or the guardian never inherits a stray descriptor.
    #[test]
    fn the_per_descriptor_fallbacks_mark_and_close_like_close_range() {
        let fd = inheritable_fd();
        assert!(!cloexec(fd.as_raw_fd()));
        assert!(cloexec_each(fd.as_raw_fd()));
        assert!(
            cloexec(fd.as_raw_fd()),
            "marked close-on-exec by the fallback"
        );

        // A number far above what other tests of this process open, so no thread can be
        // handed it meanwhile.
        let source = inheritable_fd();
        // SAFETY: dup2 onto a free high number; this test then owns it.
        let doomed = unsafe { libc::dup2(source.as_raw_fd(), 900) };
        assert_eq!(doomed, 900);
        assert!(close_each(doomed, doomed));
        // SAFETY: F_GETFD on a number that must now be closed.
        assert_eq!(unsafe { libc::fcntl(doomed, libc::F_GETFD) }, -1);
    }
}
