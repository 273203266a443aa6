//! Shared checks for the `run_*` and `policy_e2e` integration tests: a run's store must
//! always be explainable by its journal.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use rho::workflow::journal;
use rho::workflow::state::{Event, State, replay};

/// `state.json` equals a replay of `events.jsonl` up to its `last_event_sequence`, and the
/// journal has no torn tail (the owner closed it). Returns the fully replayed state and the
/// journal.
pub fn assert_snapshot_matches_journal(run_dir: &Path) -> (State, Vec<Event>) {
    let contents = journal::read(&run_dir.join("events.jsonl")).unwrap();
    assert_eq!(
        contents.torn_bytes,
        0,
        "{}: the journal has a torn tail",
        run_dir.display()
    );
    let snapshot: State =
        serde_json::from_slice(&std::fs::read(run_dir.join("state.json")).unwrap()).unwrap();
    let full = replay(&contents.events).unwrap();
    assert!(
        snapshot.last_event_sequence <= full.last_event_sequence,
        "{}: state.json (record {}) is ahead of the journal (record {})",
        run_dir.display(),
        snapshot.last_event_sequence,
        full.last_event_sequence
    );
    let upto: Vec<Event> = contents
        .events
        .iter()
        .filter(|e| e.seq <= snapshot.last_event_sequence)
        .cloned()
        .collect();
    assert_eq!(
        replay(&upto).unwrap(),
        snapshot,
        "{}: state.json must equal a replay of the journal",
        run_dir.display()
    );
    (full, contents.events)
}
