//! Deterministic crash points for the crash-consistency tests: with
//! `RHO_TEST_CRASH_AT=<point>:<n>` in its environment, a `rho` process kills itself with
//! SIGKILL the `n`-th time it reaches `<point>` (1-based).
//!
//! Points: `record:<event>` (a journal record was appended to the pending batch and folded
//! into memory, not yet written; `<event>` is its `event` tag such as `launch_intended`),
//! `journal:written` (a batch reached the file, not yet synced), `journal:synced`,
//! `state:write` / `state:written` (around a `state.json` snapshot), `store:rename` (an atomic
//! store write is synced under its temporary name, not yet renamed into place),
//! `worker:spawn` / `worker:spawned` (just before and just after a node process starts,
//! before its identity reaches the owner).
//!
//! With `RHO_TEST_STALL_AT=<point>` a process instead pauses briefly each time it reaches
//! the point given to [`stall`] (`owner:letting_go`: the owner is done and still holds the
//! run), so a test can check what others see between two steps whose order matters.
//!
//! Only debug builds (which the integration tests run) have the hooks: in a release build
//! every call is an empty function and the variables are never read, so no environment can
//! make a shipped `rho` kill itself or stall.
//!
//! Invariant: without the variable (or with one that does not parse) every call is a single
//! load of an initialised `OnceLock` and returns; the hook never changes what the program
//! does, it can only end the process exactly as `kill -9` from outside would.

#[cfg(debug_assertions)]
use std::sync::OnceLock;
#[cfg(debug_assertions)]
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable that arms a crash point (debug builds only).
pub const CRASH_AT_VAR: &str = "RHO_TEST_CRASH_AT";

#[cfg(debug_assertions)]
struct Armed {
    point: String,
    nth: u64,
    seen: AtomicU64,
}

#[cfg(debug_assertions)]
fn armed() -> Option<&'static Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let spec = std::env::var(CRASH_AT_VAR).ok()?;
            let (point, nth) = spec.rsplit_once(':')?;
            let nth = nth.parse::<u64>().ok().filter(|n| *n > 0)?;
            tracing::warn!(point, nth, "crash point armed ({CRASH_AT_VAR})");
            Some(Armed {
                point: point.to_owned(),
                nth,
                seen: AtomicU64::new(0),
            })
        })
        .as_ref()
}

/// The environment variable that makes a [`stall`] point pause (debug builds only).
pub const STALL_AT_VAR: &str = "RHO_TEST_STALL_AT";

/// Pauses for a moment when `RHO_TEST_STALL_AT` names `point`; otherwise returns at once.
pub fn stall(point: &str) {
    #[cfg(debug_assertions)]
    {
        static STALL_AT: OnceLock<Option<String>> = OnceLock::new();
        if STALL_AT
            .get_or_init(|| std::env::var(STALL_AT_VAR).ok())
            .as_deref()
            == Some(point)
        {
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = point;
}

/// Marks that `point` was reached.
pub fn reached(point: &str) {
    reached_parts(point, "");
}

/// Marks that the point `<prefix>:<name>` was reached (without building the string).
pub fn reached_named(prefix: &str, name: &str) {
    reached_parts(prefix, name);
}

/// Release builds: inert.
#[cfg(not(debug_assertions))]
#[inline(always)]
fn reached_parts(_prefix: &str, _name: &str) {}

#[cfg(debug_assertions)]
fn reached_parts(prefix: &str, name: &str) {
    let Some(armed) = armed() else {
        return;
    };
    let matches = if name.is_empty() {
        armed.point == prefix
    } else {
        armed
            .point
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix(':'))
            == Some(name)
    };
    if matches && armed.seen.fetch_add(1, Ordering::SeqCst) + 1 == armed.nth {
        // Like `kill -9` from outside: no destructor, no flush, no unlock but the kernel's.
        let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGKILL);
        // The signal is delivered on the way out of the system call; never go on meanwhile.
        loop {
            std::thread::park();
        }
    }
}
