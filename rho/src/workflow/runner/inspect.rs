//! Inspecting a run for `status`, `graph` and `list` without owning it.
//!
//! Invariant: inspection never takes `mutation.lock` and never writes.

use crate::paths::RhoHome;
use crate::workflow::exec;
use crate::workflow::journal::{self};
use crate::workflow::state::{AttemptPhase, Event, EventKind, Lifecycle, State, apply};
use crate::workflow::store::StoreError;
use crate::workflow::store::runs::{self, RunDir, StoredManifest};

use super::{RunError, describe_attempt};

/// A run as `status` sees it, without owning it.
#[derive(Debug, Clone)]
pub struct Inspection {
    /// The manifest.
    pub manifest: StoredManifest,
    /// The state: the snapshot plus the journal records after it (`None` for legacy runs).
    pub state: Option<State>,
    /// A legacy run's `state.json`, verbatim.
    pub legacy_state: Option<serde_json::Value>,
    /// Whether the recorded owner is gone although the run never closed.
    pub owner_dead: bool,
    /// Attempts that are (or, with a dead owner, would become) uncertain.
    pub uncertain: Vec<String>,
    /// Bytes of a torn journal tail seen (the owner may be writing it).
    pub torn_bytes: u64,
}

impl Inspection {
    /// The lifecycle to report: `needs_recovery` when the owner died with work in flight.
    pub fn effective_lifecycle(&self) -> Option<Lifecycle> {
        let state = self.state.as_ref()?;
        if self.owner_dead && !self.uncertain.is_empty() {
            Some(Lifecycle::NeedsRecovery)
        } else {
            Some(state.lifecycle)
        }
    }
}

/// Reads a run for `status`: never takes `mutation.lock`, never writes.
pub fn inspect(home: &RhoHome, run_id: &str) -> Result<(RunDir, Inspection), RunError> {
    let (run, manifest) = open(home, run_id)?;
    let inspection = inspect_with(&run, manifest, None)?;
    Ok((run, inspection))
}

/// [`inspect`] for a long-lived process that inspects runs again and again (`rho mcp`):
/// a `state.json` whose bytes have the digest of the snapshot `cache` holds is not decoded
/// again (it is still read, hashed and vouched for by the journal, as always).
pub fn inspect_cached(
    home: &RhoHome,
    run_id: &str,
    cache: &SnapshotCache,
) -> Result<(RunDir, Inspection), RunError> {
    let (run, manifest) = open(home, run_id)?;
    let inspection = inspect_with(&run, manifest, Some(cache))?;
    Ok((run, inspection))
}

/// The last `state.json` snapshot a process decoded, by the digest of its bytes: decoding
/// is a function of the bytes alone, so bytes with the same digest decode to this state.
#[derive(Debug, Default)]
pub struct SnapshotCache(std::sync::Mutex<Option<(String, State)>>);

impl SnapshotCache {
    /// An empty cache.
    pub const fn new() -> Self {
        SnapshotCache(std::sync::Mutex::new(None))
    }

    fn is_empty(&self) -> bool {
        self.0.lock().map_or(true, |last| last.is_none())
    }

    /// The state decoded from bytes with `digest`, when it is the one held.
    fn get(&self, digest: &str) -> Option<State> {
        let last = self.0.lock().ok()?;
        last.as_ref()
            .filter(|(held, _)| held == digest)
            .map(|(_, state)| state.clone())
    }

    fn put(&self, digest: &str, state: &State) {
        if let Ok(mut last) = self.0.lock()
            && last.as_ref().is_none_or(|(held, _)| held != digest)
        {
            *last = Some((digest.to_owned(), state.clone()));
        }
    }
}

/// Opens run `run_id` and reads its manifest: the first half of [`inspect`], for a caller
/// with work of its own to start (`status --output json` decodes `graph.json` meanwhile).
pub fn open(home: &RhoHome, run_id: &str) -> Result<(RunDir, StoredManifest), RunError> {
    let run = runs::open(home, run_id)?;
    let manifest = run.manifest()?;
    Ok((run, manifest))
}

/// The second half of [`inspect`]: the state of a run opened by [`open`].
pub fn inspect_opened(run: &RunDir, manifest: StoredManifest) -> Result<Inspection, RunError> {
    inspect_with(run, manifest, None)
}

fn inspect_with(
    run: &RunDir,
    manifest: StoredManifest,
    cache: Option<&SnapshotCache>,
) -> Result<Inspection, RunError> {
    if let StoredManifest::Legacy(_) = manifest {
        let legacy_state = run
            .dir()
            .read_private(runs::STATE_FILE, 512 * 1024 * 1024)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        return Ok(Inspection {
            manifest,
            state: None,
            legacy_state,
            owner_dead: false,
            uncertain: vec![],
            torn_bytes: 0,
        });
    }
    let (state, torn_bytes) = checked_state(run, cache)?;
    let owner_dead = state
        .owner
        .as_ref()
        .is_some_and(|o| !exec::process_alive(o.pid, o.start_time));
    let mut uncertain: Vec<String> = state
        .uncertain_attempts()
        .iter()
        .map(|(n, a)| describe_attempt(n, a))
        .collect();
    if owner_dead {
        uncertain.extend(
            state
                .open_attempts()
                .iter()
                .map(|(n, a)| describe_attempt(n, a)),
        );
    }
    Ok(Inspection {
        manifest,
        state: Some(state),
        legacy_state: None,
        owner_dead,
        uncertain,
        torn_bytes,
    })
}

/// How far from the journal's end [`vouched_snapshot`] looks for the record that vouches
/// for `state.json` (a finished run ends with it; a live one writes a snapshot every
/// 1,024 records).
const TAIL_WINDOW: u64 = 256 * 1024;

/// The run's state: the `state.json` snapshot when the journal vouches for its exact bytes
/// near its end (plus the records after it), else the journal replayed from its start with
/// the snapshot checked against the same prefix of it. A snapshot ahead of the journal or
/// different from its replay (a hand edit, a stale copy) is corruption, never believed.
/// Returns the state and the bytes of a torn journal tail (its writer may still be writing
/// it).
fn checked_state(run: &RunDir, cache: Option<&SnapshotCache>) -> Result<(State, u64), RunError> {
    if let Some(found) = vouched_snapshot(run, cache)? {
        return Ok(found);
    }
    replayed_state(run)
}

/// `state.json` as the journal vouches for it: its digest is the one of the last
/// `snapshot_written` record within the journal's last [`TAIL_WINDOW`] bytes, which directly
/// follows the snapshot's last record; that record and the ones after it (verified) are
/// applied. `None` (read the whole journal instead) for anything else. With a `cache`, a
/// snapshot it holds is not decoded again, and one the journal vouches for is kept in it.
fn vouched_snapshot(
    run: &RunDir,
    cache: Option<&SnapshotCache>,
) -> Result<Option<(State, u64)>, RunError> {
    let Some(bytes) = run.read_state_bytes()? else {
        return Ok(None);
    };
    // Decoded as text checked to be UTF-8 in one pass: the byte reader checks every string
    // and key on its own, which cost more than the one pass. Bytes that are not UTF-8 go to
    // the byte reader, which refuses them as before.
    let decode = || match std::str::from_utf8(&bytes) {
        Ok(text) => serde_json::from_str::<State>(text),
        Err(_) => serde_json::from_slice::<State>(&bytes),
    };
    let (digest, decoded) = match cache {
        Some(cache) if !cache.is_empty() => {
            let digest = rho_ipc::digest::sha256_tagged(&bytes);
            let decoded = cache.get(&digest).map_or_else(decode, Ok);
            (digest, decoded)
        }
        // The snapshot is decoded while its digest is computed; the decoded state is used
        // only once the journal vouches for that digest.
        _ => digest_while(&bytes, decode),
    };
    let vouches =
        |e: &Event| matches!(&e.kind, EventKind::SnapshotWritten { sha256 } if *sha256 == digest);
    let Some(tail) = journal::read_tail(&run.events_path(), TAIL_WINDOW, vouches)? else {
        return Ok(None);
    };
    let Ok(mut state) = decoded else {
        return Ok(None);
    };
    let snapshot = state.last_event_sequence;
    if tail.events.first().map(|e| e.seq) != Some(snapshot + 1) {
        return Ok(None);
    }
    if let Some(cache) = cache {
        cache.put(&digest, &state);
    }
    for event in &tail.events {
        apply(&mut state, event)?;
    }
    tracing::debug!(
        snapshot,
        records_applied = tail.events.len(),
        "state read from the snapshot the journal vouches for"
    );
    Ok(Some((state, tail.torn_bytes)))
}

/// Snapshots from this size up are hashed on a second thread (below it, starting one costs
/// more than hashing).
const PARALLEL_DIGEST_BYTES: usize = 64 * 1024;

/// `sha256:<hex>` of `bytes`, computed on a second thread while `work` runs on this one
/// (inline, one after the other, for small inputs or when no thread can be started).
fn digest_while<T>(bytes: &[u8], work: impl FnOnce() -> T) -> (String, T) {
    if bytes.len() < PARALLEL_DIGEST_BYTES {
        return (rho_ipc::digest::sha256_tagged(bytes), work());
    }
    std::thread::scope(|scope| {
        let hashing = std::thread::Builder::new()
            .name("rho-digest".into())
            .spawn_scoped(scope, || rho_ipc::digest::sha256_tagged(bytes));
        let done = work();
        let digest = match hashing {
            Ok(handle) => handle
                .join()
                .unwrap_or_else(|_| rho_ipc::digest::sha256_tagged(bytes)),
            Err(e) => {
                tracing::debug!("cannot start a thread to hash state.json ({e}); hashing inline");
                rho_ipc::digest::sha256_tagged(bytes)
            }
        };
        (digest, done)
    })
}

/// The journal replayed from its first record, the snapshot checked on the way.
fn replayed_state(run: &RunDir) -> Result<(State, u64), RunError> {
    let snapshot = run.read_state()?;
    let contents = journal::read(&run.events_path())?;
    let corrupt = |problem: String| {
        RunError::Store(StoreError::Corrupt {
            path: run.dir().entry_path(runs::STATE_FILE),
            problem,
        })
    };
    let mut state = State::empty();
    let mut checked = snapshot.is_none();
    for event in &contents.events {
        if let Some(snap) = &snapshot
            && !checked
            && state.last_event_sequence == snap.last_event_sequence
        {
            if &state != snap {
                return Err(corrupt(format!(
                    "it differs from a replay of events.jsonl up to record {} (edited by hand?)",
                    snap.last_event_sequence
                )));
            }
            checked = true;
        }
        apply(&mut state, event)?;
    }
    if let Some(snap) = &snapshot
        && !checked
    {
        if snap.last_event_sequence > state.last_event_sequence {
            return Err(corrupt(format!(
                "it claims journal record {}, but events.jsonl ends at record {}",
                snap.last_event_sequence, state.last_event_sequence
            )));
        }
        if &state != snap {
            return Err(corrupt(format!(
                "it differs from a replay of events.jsonl up to record {} (edited by hand?)",
                snap.last_event_sequence
            )));
        }
    }
    Ok((state, contents.torn_bytes))
}

/// What may still be alive of every attempt of `run` that did not finish (read without
/// taking `mutation.lock`; call it while holding the lock to decide anything).
pub fn live_processes(run: &RunDir) -> Result<Vec<String>, RunError> {
    if let StoredManifest::Legacy(_) = run.manifest()? {
        return Ok(Vec::new());
    }
    let (state, _) = checked_state(run, None)?;
    let open: Vec<(&str, &crate::workflow::state::Attempt)> = state
        .root()
        .tasks
        .iter()
        .flat_map(|(id, t)| t.attempts.iter().map(move |a| (id.as_str(), a)))
        .filter(|(_, a)| a.phase != AttemptPhase::Finished)
        .collect();
    Ok(survivors(run, open))
}

/// What may still be alive of `attempts` (each `(node, attempt)`) of `run`: a recorded
/// process or process group that still exists, a recorded cgroup that is populated or
/// cannot be checked, or a descendant named in the attempt's record of tracked descendants
/// (the subreaper fallback) that still runs or cannot be checked; anything that cannot be
/// checked counts as alive. Each entry reads `node `N` attempt A ...`.
pub fn survivors<'a>(
    run: &RunDir,
    attempts: impl IntoIterator<Item = (&'a str, &'a crate::workflow::state::Attempt)>,
) -> Vec<String> {
    use crate::containment::{self, tracked};
    let mut alive = Vec::new();
    for (node, attempt) in attempts {
        if let Some(p) = attempt.process
            && (exec::process_alive(p.pid, p.start_time) || exec::group_alive(p.pgid))
        {
            alive.push(format!(
                "node `{node}` attempt {} process {} (group {})",
                attempt.number, p.pid, p.pgid
            ));
            continue;
        }
        let checked = match &attempt.cgroup {
            Some(cgroup) => containment::check_empty(cgroup),
            None => match run.read_attempt_file(
                node,
                attempt.number,
                tracked::RECORD_FILE,
                MAX_RECORD_BYTES,
            ) {
                Ok(Some((bytes, path))) => {
                    tracked::check_record(&String::from_utf8_lossy(&bytes), &path)
                }
                Ok(None) => Ok(()),
                Err(e) => Err(containment::ContainmentError::Unavailable {
                    reason: e.to_string(),
                }),
            },
        };
        if let Err(e) = checked {
            alive.push(if e.is_alive() {
                format!("node `{node}` attempt {}: {e}", attempt.number)
            } else {
                format!(
                    "node `{node}` attempt {} (what it started cannot be checked: {e})",
                    attempt.number
                )
            });
        }
    }
    alive
}

/// The largest record of tracked descendants read (a million processes' identities).
const MAX_RECORD_BYTES: u64 = 32 << 20;

/// Attempt records of a state, flattened for display: `(node, attempt, phase)`.
pub fn attempt_phases(state: &State) -> Vec<(String, u32, AttemptPhase)> {
    state
        .root()
        .tasks
        .iter()
        .flat_map(|(id, t)| {
            t.attempts
                .iter()
                .map(move |a| (id.clone(), a.number, a.phase))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_answers_only_for_the_digest_it_holds() {
        let cache = SnapshotCache::new();
        assert!(cache.is_empty());
        let mut first = State::empty();
        first.revision = 1;
        cache.put("sha256:aa", &first);
        assert!(!cache.is_empty());
        assert_eq!(cache.get("sha256:aa"), Some(first.clone()));
        assert_eq!(cache.get("sha256:bb"), None);
        let mut second = State::empty();
        second.revision = 2;
        cache.put("sha256:bb", &second);
        assert_eq!(cache.get("sha256:aa"), None, "only the last one is kept");
        assert_eq!(cache.get("sha256:bb"), Some(second));
    }
}
