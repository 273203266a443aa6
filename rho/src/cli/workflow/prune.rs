//! `rho workflow prune [--older-than AGE] [--keep N] [--dry-run] [--yes]`: removes this
//! workspace's finished runs and the plans no run refers to, by age and/or count.
//!
//! Invariant: nothing is removed without consent (`--yes`, or `y`/`yes` at a prompt) and
//! without at least one criterion; `--dry-run` only lists.

use std::fmt::Write as _;
use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::time::SystemTime;

use clap::Args;
use serde_json::json;

use super::{DocumentOutputArgs, json_text, print_out, store_error};
use crate::cli::exit::{CliError, CliResult, ExitCode};
use crate::paths::RhoHome;
use crate::workflow::prune::{self, PruneCriteria, PruneEntry};

/// Remove finished runs and unreferenced plans of this workspace.
#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Remove entries created longer ago than AGE (`30d`, `12h`, `45m`, `2w`).
    #[arg(long, value_name = "AGE")]
    pub older_than: Option<String>,
    /// Keep the newest N finished runs and the newest N unreferenced plans.
    #[arg(long, value_name = "N")]
    pub keep: Option<usize>,
    /// List what would be removed, remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Remove without asking (required when there is no terminal to ask on).
    #[arg(long, short = 'y')]
    pub yes: bool,
    #[command(flatten)]
    pub output: DocumentOutputArgs,
}

/// Runs `rho workflow prune`.
pub fn run_prune(args: &PruneArgs) -> CliResult {
    if args.older_than.is_none() && args.keep.is_none() {
        return Err(CliError::invalid(
            "say what to prune: --older-than AGE (like 30d) and/or --keep N",
        ));
    }
    let older_than = args
        .older_than
        .as_deref()
        .map(prune::parse_age)
        .transpose()
        .map_err(|e| CliError::invalid(format!("--older-than: {e}")))?;
    let criteria = PruneCriteria {
        older_than,
        keep: args.keep,
    };
    let home = RhoHome::from_env().map_err(|e| CliError::operational(e.to_string()))?;
    let located = super::workspace()?;
    let workspace = located.root.to_string_lossy();
    let chosen = prune::plan_prune(&home, &workspace, criteria, SystemTime::now())
        .map_err(|e| store_error(&e))?;
    if chosen.is_empty() {
        let text = if args.output.is_json() {
            json_text(&json!({ "dry_run": args.dry_run, "removed": [], "failed": [] }))
        } else {
            "nothing to prune\n".to_owned()
        };
        print_out(&text)?;
        return Ok(ExitCode::Success);
    }
    if args.dry_run {
        let text = if args.output.is_json() {
            json_text(&json!({
                "dry_run": true,
                "removed": chosen.iter().map(entry_json).collect::<Vec<_>>(),
                "failed": [],
            }))
        } else {
            let mut text = String::new();
            for e in &chosen {
                let _ = writeln!(text, "would remove {}", entry_text(e));
            }
            text
        };
        print_out(&text)?;
        return Ok(ExitCode::Success);
    }
    if !args.yes {
        confirm_prune(&chosen)?;
    }
    let results = prune::apply(&home, &chosen);
    let mut removed = Vec::new();
    let mut failed = Vec::new();
    for (entry, result) in &results {
        match result {
            Ok(()) => removed.push(entry),
            Err(why) => failed.push((entry, why)),
        }
    }
    let text = if args.output.is_json() {
        json_text(&json!({
            "dry_run": false,
            "removed": removed.iter().map(|e| entry_json(e)).collect::<Vec<_>>(),
            "failed": failed.iter().map(|(e, why)| {
                let mut v = entry_json(e);
                v["error"] = json!(why);
                v
            }).collect::<Vec<_>>(),
        }))
    } else {
        let mut text = String::new();
        for e in &removed {
            let _ = writeln!(text, "removed {}", entry_text(e));
        }
        for (e, why) in &failed {
            let _ = writeln!(text, "kept {}: {why}", entry_text(e));
        }
        text
    };
    print_out(&text)?;
    if failed.is_empty() {
        Ok(ExitCode::Success)
    } else {
        Err(CliError::operational(format!(
            "{} of {} entries could not be removed",
            failed.len(),
            results.len()
        )))
    }
}

fn entry_json(e: &PruneEntry) -> serde_json::Value {
    json!({ "kind": e.kind, "id": e.id, "created_at": e.created_at, "name": e.name })
}

fn entry_text(e: &PruneEntry) -> String {
    format!("{} {} ({}, {})", e.kind, e.id, e.name, e.created_at)
}

fn confirm_prune(chosen: &[PruneEntry]) -> Result<(), CliError> {
    let runs = chosen.iter().filter(|e| e.kind == "run").count();
    let plans = chosen.len() - runs;
    let what = format!("{runs} finished run(s) and {plans} unreferenced plan(s)");
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        return Err(CliError::invalid(format!(
            "pruning {what} needs confirmation and there is no terminal to ask on: pass --yes \
             (or --dry-run to list them)"
        )));
    }
    let mut stderr = std::io::stderr().lock();
    for e in chosen {
        let _ = writeln!(stderr, "  {}", entry_text(e));
    }
    let _ = write!(stderr, "Remove {what}? [y/N] ");
    let _ = stderr.flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| CliError::operational(format!("cannot read the answer: {e}")))?;
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Ok(()),
        _ => Err(CliError::invalid("nothing was pruned (not confirmed)")),
    }
}
