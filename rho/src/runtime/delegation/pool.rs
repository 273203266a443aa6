//! The concurrency pools of delegated runs: one global pool (4 by default,
//! `RHO_AGENT_CONCURRENCY`) and, nested inside it, a claude-cli pool of `min(total, cap)` (cap 2
//! by default, `RHO_CLAUDE_AGENT_CONCURRENCY`).
//!
//! Invariant: no setting opens a wider window. A claude-cli run holds a Claude permit *and* a
//! global permit, so claude-cli runs never exceed either limit. The Claude permit is taken
//! first, so Claude runs waiting for their own pool never sit on global permits that rho runs
//! could use.

use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use super::DelegationError;

/// Default size of the global pool.
pub const DEFAULT_TOTAL: usize = 4;
/// Default cap of the nested claude-cli pool.
pub const DEFAULT_CLAUDE_CAP: usize = 2;
/// The variable that overrides the global pool size.
pub const TOTAL_VAR: &str = "RHO_AGENT_CONCURRENCY";
/// The variable that overrides the claude-cli cap.
pub const CLAUDE_VAR: &str = "RHO_CLAUDE_AGENT_CONCURRENCY";
/// Largest pool size accepted from the environment.
const MAX_POOL: usize = 64;

/// Which pool a run draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolKind {
    /// A rho-runtime run: the global pool only.
    Rho,
    /// A claude-cli run: the Claude pool, then the global pool.
    Claude,
}

#[derive(Debug)]
struct Counter {
    limit: usize,
    used: Mutex<usize>,
    freed: Condvar,
}

impl Counter {
    fn new(limit: usize) -> Self {
        Counter {
            limit,
            used: Mutex::new(0),
            freed: Condvar::new(),
        }
    }

    /// Takes one slot, waiting while none is free; gives up (false) once `cancelled` says so.
    fn take(&self, cancelled: &dyn Fn() -> bool) -> bool {
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if cancelled() {
                return false;
            }
            if *used < self.limit {
                *used += 1;
                return true;
            }
            // Woken by a release; the timeout only bounds how late a cancellation is seen.
            used = self
                .freed
                .wait_timeout(used, Duration::from_millis(50))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    fn give(&self) {
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        *used = used.saturating_sub(1);
        drop(used);
        self.freed.notify_one();
    }

    fn in_use(&self) -> usize {
        *self.used.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The pools of one `rho` process.
#[derive(Debug, Clone)]
pub struct AgentPools {
    total: Arc<Counter>,
    claude: Arc<Counter>,
}

/// A held place in the pools; released on drop.
#[derive(Debug)]
pub struct PoolPermit {
    total: Arc<Counter>,
    claude: Option<Arc<Counter>>,
}

impl Drop for PoolPermit {
    fn drop(&mut self) {
        self.total.give();
        if let Some(claude) = &self.claude {
            claude.give();
        }
    }
}

impl AgentPools {
    /// Pools of `total` runs with a claude-cli cap of `claude_cap` (the Claude pool is
    /// `min(total, claude_cap)`). Both must be at least 1.
    pub fn new(total: usize, claude_cap: usize) -> Self {
        let total = total.max(1);
        AgentPools {
            total: Arc::new(Counter::new(total)),
            claude: Arc::new(Counter::new(claude_cap.clamp(1, total))),
        }
    }

    /// Pools sized from `RHO_AGENT_CONCURRENCY` and `RHO_CLAUDE_AGENT_CONCURRENCY` (through
    /// `lookup`, so tests need not touch the process environment).
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, DelegationError> {
        let total = parse_size(TOTAL_VAR, lookup(TOTAL_VAR))?.unwrap_or(DEFAULT_TOTAL);
        let cap = parse_size(CLAUDE_VAR, lookup(CLAUDE_VAR))?.unwrap_or(DEFAULT_CLAUDE_CAP);
        Ok(AgentPools::new(total, cap))
    }

    /// The global pool's size.
    pub fn total_limit(&self) -> usize {
        self.total.limit
    }

    /// The claude-cli pool's size (never above the global one).
    pub fn claude_limit(&self) -> usize {
        self.claude.limit
    }

    /// Runs holding a global permit now.
    pub fn running(&self) -> usize {
        self.total.in_use()
    }

    /// Waits for a place for a run of `kind`; `None` when `cancelled` turned true first.
    pub fn acquire(&self, kind: PoolKind, cancelled: &dyn Fn() -> bool) -> Option<PoolPermit> {
        let claude = match kind {
            PoolKind::Rho => None,
            PoolKind::Claude => {
                if !self.claude.take(cancelled) {
                    return None;
                }
                Some(Arc::clone(&self.claude))
            }
        };
        if !self.total.take(cancelled) {
            if let Some(claude) = claude {
                claude.give();
            }
            return None;
        }
        Some(PoolPermit {
            total: Arc::clone(&self.total),
            claude,
        })
    }
}

/// The pools every delegated run of this process draws from, sized from the environment
/// on first use (an invalid size is reported each time and nothing is cached).
pub fn process_pools() -> Result<AgentPools, DelegationError> {
    static POOLS: OnceLock<AgentPools> = OnceLock::new();
    if let Some(pools) = POOLS.get() {
        return Ok(pools.clone());
    }
    let pools = AgentPools::from_env(|name| std::env::var(name).ok())?;
    Ok(POOLS.get_or_init(|| pools).clone())
}

fn parse_size(var: &'static str, value: Option<String>) -> Result<Option<usize>, DelegationError> {
    let Some(value) = value else {
        return Ok(None);
    };
    match value.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_POOL).contains(&n) => Ok(Some(n)),
        _ => Err(DelegationError::BadPoolSize {
            var,
            value,
            max: MAX_POOL,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn claude_pool_is_the_smaller_of_total_and_cap() {
        let pools = AgentPools::from_env(env(&[])).unwrap();
        assert_eq!((pools.total_limit(), pools.claude_limit()), (4, 2));
        let pools = AgentPools::from_env(env(&[(TOTAL_VAR, "1"), (CLAUDE_VAR, "8")])).unwrap();
        assert_eq!((pools.total_limit(), pools.claude_limit()), (1, 1));
        let pools = AgentPools::from_env(env(&[(CLAUDE_VAR, "3")])).unwrap();
        assert_eq!((pools.total_limit(), pools.claude_limit()), (4, 3));
    }

    #[test]
    fn bad_sizes_name_the_variable() {
        for bad in ["0", "-1", "many", "65"] {
            let err = AgentPools::from_env(env(&[(TOTAL_VAR, bad)])).unwrap_err();
            assert!(err.to_string().contains(TOTAL_VAR), "{err}");
        }
        let err = AgentPools::from_env(env(&[(CLAUDE_VAR, "0")])).unwrap_err();
        assert!(err.to_string().contains(CLAUDE_VAR), "{err}");
    }

    #[test]
    fn observed_concurrency_never_exceeds_either_cap() {
        let pools = AgentPools::new(3, 2);
        let running = Arc::new(AtomicUsize::new(0));
        let claude_running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let claude_peak = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..12)
            .map(|i| {
                let pools = pools.clone();
                let (running, claude_running) = (running.clone(), claude_running.clone());
                let (peak, claude_peak) = (peak.clone(), claude_peak.clone());
                std::thread::spawn(move || {
                    let kind = if i % 2 == 0 {
                        PoolKind::Claude
                    } else {
                        PoolKind::Rho
                    };
                    let permit = pools.acquire(kind, &|| false).unwrap();
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    if kind == PoolKind::Claude {
                        let c = claude_running.fetch_add(1, Ordering::SeqCst) + 1;
                        claude_peak.fetch_max(c, Ordering::SeqCst);
                    }
                    std::thread::sleep(Duration::from_millis(20));
                    if kind == PoolKind::Claude {
                        claude_running.fetch_sub(1, Ordering::SeqCst);
                    }
                    running.fetch_sub(1, Ordering::SeqCst);
                    drop(permit);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(peak.load(Ordering::SeqCst) <= 3);
        assert!(claude_peak.load(Ordering::SeqCst) <= 2);
        assert_eq!(pools.running(), 0);
    }

    #[test]
    fn a_cancelled_waiter_gives_up_without_holding_anything() {
        let pools = AgentPools::new(1, 1);
        let held = pools.acquire(PoolKind::Claude, &|| false).unwrap();
        assert!(pools.acquire(PoolKind::Claude, &|| true).is_none());
        assert!(pools.acquire(PoolKind::Rho, &|| true).is_none());
        drop(held);
        assert_eq!(pools.running(), 0);
        assert!(pools.acquire(PoolKind::Rho, &|| false).is_some());
    }
}
