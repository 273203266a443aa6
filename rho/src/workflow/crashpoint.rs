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
//! Only debug builds (which the integration tests run) have the hook: in a release build
//! every call is an empty function and the variable is never read, so no environment can
//! make a shipped `rho` kill itself.
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
