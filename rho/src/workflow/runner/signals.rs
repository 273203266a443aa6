//! SIGINT and SIGTERM to the owner become a cancellation request, so a clean application
//! exit walks the same cleanup path as `rho workflow cancel`.
//!
//! Invariant: the handler only stores the signal number in an atomic (async-signal-safe);
//! the owner loop polls it. Handlers (unlike blocked masks) are reset to the default by
//! `execve`, so node processes are unaffected.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicI32, Ordering};

use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};

static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn record(signal: libc::c_int) {
    RECEIVED.store(signal, Ordering::SeqCst);
}

/// Installs the SIGINT/SIGTERM handlers.
pub fn install() -> Result<(), nix::Error> {
    let action = SigAction::new(
        SigHandler::Handler(record),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for signal in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only performs an atomic store, which is async-signal-safe, and
        // replacing the disposition of SIGINT/SIGTERM affects no other handler of ours.
        unsafe { sigaction(signal, &action) }?;
    }
    Ok(())
}

/// The last SIGINT/SIGTERM received, if any (0 when none).
pub fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        n => Some(n),
    }
}
