//! Pruning a workspace's store: finished runs and plans no run refers to, chosen by age
//! (`older than`) and/or count (keep the newest N of each kind). Shared by the command line
//! and the model-facing tool.
//!
//! Invariant: only completed runs that no process owns are removed (an owned or unfinished
//! run is never touched), a plan is removed only when no remaining run of any workspace was
//! made from it, and the choice is a pure function of the listed entries, the criteria and
//! the cutoff time.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::paths::RhoHome;
use crate::workflow::runner;
use crate::workflow::state::Lifecycle;
use crate::workflow::store::plans;
use crate::workflow::store::runs::{self, StoredManifest};
use crate::workflow::store::{StoreError, format_timestamp};

/// What to prune.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PruneCriteria {
    /// Remove entries created longer ago than this.
    pub older_than: Option<Duration>,
    /// Keep this many of the newest entries of each kind (finished runs, unreferenced plans).
    pub keep: Option<usize>,
}

/// One entry the prune would remove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PruneEntry {
    /// `run` or `plan`.
    pub kind: &'static str,
    /// Its id.
    pub id: String,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// The workflow's name.
    pub name: String,
}

/// Parses `30d`, `12h`, `45m`, `90s` or `2w` into a duration.
pub fn parse_age(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not an age: expected a number and a unit, like 7d"))?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 604_800,
        _ => {
            return Err(format!(
                "`{text}` is not an age: the unit must be s, m, h, d or w (like 7d)"
            ));
        }
    };
    n.checked_mul(seconds)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("`{text}` is too long an age"))
}

/// The RFC 3339 timestamp `age` before `now` (timestamps of the store compare as strings).
pub fn cutoff(now: SystemTime, age: Duration) -> String {
    let then = now
        .checked_sub(age)
        .unwrap_or(UNIX_EPOCH)
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    format_timestamp(then.as_secs(), then.subsec_millis())
}

/// Applies the criteria to candidates of one kind, newest first: an entry goes when it is
/// older than the cutoff (if one is given) and beyond the newest `keep` (if given).
pub fn select(
    candidates: &[PruneEntry],
    criteria: PruneCriteria,
    cutoff: Option<&str>,
) -> Vec<PruneEntry> {
    let mut sorted: Vec<&PruneEntry> = candidates.iter().collect();
    sorted.sort_by(|a, b| {
        b.created_at
            .cmp(&a.created_at)
            .then_with(|| a.id.cmp(&b.id))
    });
    sorted
        .into_iter()
        .enumerate()
        .filter(|(i, e)| {
            criteria.keep.is_none_or(|k| *i >= k)
                && cutoff.is_none_or(|c| e.created_at.as_str() < c)
        })
        .map(|(_, e)| e.clone())
        .collect()
}

/// What pruning `workspace` with `criteria` would remove: finished, unowned runs, then the
/// plans no remaining run refers to.
pub fn plan_prune(
    home: &RhoHome,
    workspace: &str,
    criteria: PruneCriteria,
    now: SystemTime,
) -> Result<Vec<PruneEntry>, StoreError> {
    let cutoff = criteria.older_than.map(|age| cutoff(now, age));
    let mut finished = Vec::new();
    let mut kept_plan_refs = std::collections::BTreeSet::new();
    let mut all_runs = Vec::new();
    for manifest in runs::list(home)? {
        let StoredManifest::Current(m) = manifest else {
            continue;
        };
        all_runs.push((m.run_id.clone(), m.plan_id.clone()));
        if m.workspace.path != workspace {
            continue;
        }
        let completed = runner::inspect(home, &m.run_id)
            .ok()
            .and_then(|(_, i)| i.effective_lifecycle())
            == Some(Lifecycle::Completed);
        if completed {
            finished.push(PruneEntry {
                kind: "run",
                id: m.run_id.clone(),
                created_at: m.created_at.clone(),
                name: m.name.clone(),
            });
        }
    }
    let runs = select(&finished, criteria, cutoff.as_deref());
    for (run_id, plan_id) in &all_runs {
        if !runs.iter().any(|r| &r.id == run_id) {
            kept_plan_refs.insert(plan_id.clone());
        }
    }
    let unreferenced: Vec<PruneEntry> = plans::list(home)?
        .into_iter()
        .filter(|p| p.workspace.path == workspace && !kept_plan_refs.contains(&p.plan_id))
        .map(|p| PruneEntry {
            kind: "plan",
            id: p.plan_id,
            created_at: p.created_at,
            name: p.name,
        })
        .collect();
    let mut out = runs;
    out.extend(select(&unreferenced, criteria, cutoff.as_deref()));
    Ok(out)
}

/// Removes `entries` (runs first, so their plans are unreferenced when removed). An entry
/// that cannot be removed (a run someone started owning meanwhile, or one whose processes
/// still live) is reported, not fatal.
pub fn apply(home: &RhoHome, entries: &[PruneEntry]) -> Vec<(PruneEntry, Result<(), String>)> {
    entries
        .iter()
        .map(|e| {
            let result = match e.kind {
                // A run whose recorded processes still live is kept (and reported).
                "run" => runs::delete(home, &e.id, |run| {
                    crate::workflow::runner::live_processes(run).map_err(|err| err.to_string())
                })
                .map_err(|err| err.to_string()),
                _ => plans::delete(home, &e.id).map_err(|err| err.to_string()),
            };
            (e.clone(), result)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, at: &str) -> PruneEntry {
        PruneEntry {
            kind: "run",
            id: id.to_owned(),
            created_at: at.to_owned(),
            name: "w".to_owned(),
        }
    }

    #[test]
    fn ages_parse_with_units() {
        assert_eq!(parse_age("7d").unwrap(), Duration::from_hours(7 * 24));
        assert_eq!(parse_age("90s").unwrap(), Duration::from_secs(90));
        assert!(parse_age("7").unwrap_err().contains("unit"));
        assert!(parse_age("d").unwrap_err().contains("not an age"));
    }

    #[test]
    fn selection_keeps_the_newest_and_the_young() {
        let all = [
            entry("a", "2026-01-01T00:00:00.000Z"),
            entry("b", "2026-01-03T00:00:00.000Z"),
            entry("c", "2026-01-02T00:00:00.000Z"),
        ];
        let ids = |v: Vec<PruneEntry>| v.into_iter().map(|e| e.id).collect::<Vec<_>>();
        let keep1 = PruneCriteria {
            keep: Some(1),
            older_than: None,
        };
        assert_eq!(ids(select(&all, keep1, None)), ["c", "a"]);
        let old = PruneCriteria {
            keep: None,
            older_than: Some(Duration::from_secs(1)),
        };
        assert_eq!(
            ids(select(&all, old, Some("2026-01-02T12:00:00.000Z"))),
            ["c", "a"]
        );
        let both = PruneCriteria {
            keep: Some(2),
            older_than: Some(Duration::from_secs(1)),
        };
        assert_eq!(
            ids(select(&all, both, Some("2026-01-02T12:00:00.000Z"))),
            ["a"]
        );
        assert_eq!(
            cutoff(
                UNIX_EPOCH + Duration::from_hours(24),
                Duration::from_hours(1)
            ),
            "1970-01-01T23:00:00.000Z"
        );
    }
}
