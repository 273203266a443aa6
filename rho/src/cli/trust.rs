//! `rho trust add|remove|list`: manage the workspaces whose project agents and hooks are
//! trusted (`$RHO_HOME/trust.json`).
//!
//! Invariant: only canonical paths are recorded (symlinks resolved), and the file is
//! replaced atomically, so trust is never granted to a path other than the one the user
//! named.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::json;

use super::exit::{CliError, CliResult, ExitCode};
use super::workflow::{json_text, print_out};
use crate::paths::RhoHome;
use crate::trust::{self, TrustError};
use crate::workflow::plan::error_chain;

/// Manage trusted workspaces.
#[derive(Debug, Args)]
pub struct TrustArgs {
    #[command(subcommand)]
    command: TrustCommand,
}

#[derive(Debug, Subcommand)]
enum TrustCommand {
    /// Trust a workspace (default: the current directory).
    Add {
        /// The workspace directory.
        #[arg(value_name = "PATH")]
        path: Option<PathBuf>,
    },
    /// Stop trusting a workspace (default: the current directory).
    Remove {
        /// The workspace directory.
        #[arg(value_name = "PATH")]
        path: Option<PathBuf>,
    },
    /// List trusted workspaces.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

fn trust_error(error: &TrustError) -> CliError {
    match error {
        TrustError::Policy(_) | TrustError::Canonicalize { .. } => {
            CliError::invalid(error_chain(error))
        }
        _ => CliError::operational(error_chain(error)),
    }
}

/// Runs `rho trust`.
pub fn run_trust(args: TrustArgs) -> CliResult {
    let home = RhoHome::from_env().map_err(|e| CliError::operational(e.to_string()))?;
    match args.command {
        TrustCommand::Add { path } => {
            let path = trust::canonical_workspace(&path.unwrap_or_else(|| PathBuf::from(".")))
                .map_err(|e| trust_error(&e))?;
            if !path.is_dir() {
                return Err(CliError::invalid(format!(
                    "{} is not a directory",
                    path.display()
                )));
            }
            let mut store = trust::load(&home).map_err(|e| trust_error(&e))?;
            let added = store
                .add(path.clone())
                .map_err(|e| trust_error(&e.into()))?;
            trust::save(&home, &store).map_err(|e| trust_error(&e))?;
            let verb = if added { "trusted" } else { "already trusted" };
            print_out(&format!("{verb}: {}\n", path.display()))?;
        }
        TrustCommand::Remove { path } => {
            let given = path.unwrap_or_else(|| PathBuf::from("."));
            // A workspace that no longer exists can still be removed by its recorded path.
            let path = trust::canonical_workspace(&given).unwrap_or_else(|_| {
                if given.is_absolute() {
                    given.clone()
                } else {
                    std::env::current_dir().unwrap_or_default().join(&given)
                }
            });
            let mut store = trust::load(&home).map_err(|e| trust_error(&e))?;
            if store.remove(&path) {
                trust::save(&home, &store).map_err(|e| trust_error(&e))?;
                print_out(&format!("no longer trusted: {}\n", path.display()))?;
            } else {
                return Err(CliError::invalid(format!(
                    "{} is not trusted",
                    path.display()
                )));
            }
        }
        TrustCommand::List { json } => {
            let store = trust::load(&home).map_err(|e| trust_error(&e))?;
            let paths: Vec<String> = store
                .workspaces()
                .map(|p| p.display().to_string())
                .collect();
            let text = if json {
                json_text(&json!({ "workspaces": paths }))
            } else if paths.is_empty() {
                "no trusted workspaces\n".to_owned()
            } else {
                let mut out = String::new();
                for p in &paths {
                    let _ = writeln!(out, "{p}");
                }
                out
            };
            print_out(&text)?;
        }
    }
    Ok(ExitCode::Success)
}
