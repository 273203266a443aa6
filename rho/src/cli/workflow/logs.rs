//! `rho workflow logs RUN_ID [NODE] [--attempt N] [--stream S] [--follow]`: what the nodes of
//! a run printed, from the captured stream artifacts.
//!
//! Invariant: it only reads (the snapshot, the journal and the artifact files) and never
//! takes the run's lock, so it works beside the owner; bytes go out unchanged to a pipe, and
//! with their control characters made visible to a terminal.

use std::io::{IsTerminal as _, Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde_json::json;

use super::{json_text, print_out, store_error};
use crate::cli::exit::{CliError, CliResult, ExitCode};
use crate::paths::RhoHome;
use crate::workflow::logs::{self, Stream};
use crate::workflow::runner;
use crate::workflow::state::{Lifecycle, State};
use crate::workflow::store::runs::{self, StoredManifest};

/// How often `--follow` looks for new output and new attempts.
const FOLLOW_POLL: Duration = Duration::from_millis(100);

/// Output formats of `logs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogsOutput {
    /// The bytes as printed (with headers when several streams are shown).
    Text,
    /// One JSON document (with `--follow`, one object per line).
    Json,
    /// One JSON object per line.
    Jsonl,
}

/// Which captured stream to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StreamChoice {
    /// Standard output only.
    Stdout,
    /// Standard error only.
    Stderr,
    /// Both (stdout, then stderr).
    Both,
}

/// Show what a run's nodes printed.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The run id or a unique prefix of it.
    #[arg(value_name = "RUN_ID")]
    pub id: String,
    /// Only this node (default: every node that ran, in node order).
    #[arg(value_name = "NODE")]
    pub node: Option<String>,
    /// This attempt of NODE (default: its latest).
    #[arg(long, value_name = "N", requires = "node")]
    pub attempt: Option<u32>,
    /// Which stream.
    #[arg(long, value_enum, default_value = "both")]
    pub stream: StreamChoice,
    /// Keep printing new output until the run stops running.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Output format (`json`: one document; with `--follow`, `jsonl`: one object per chunk).
    #[arg(long, value_enum, default_value = "text")]
    pub output: LogsOutput,
    /// Same as `--output json`.
    #[arg(long, hide = true, conflicts_with = "output")]
    pub json: bool,
}

/// One stream of one attempt.
#[derive(Debug, Clone)]
struct Source {
    node: String,
    attempt: u32,
    stream: Stream,
    path: PathBuf,
}

/// Runs `rho workflow logs`.
pub fn run_logs(args: &LogsArgs) -> CliResult {
    let format = if args.json {
        LogsOutput::Json
    } else {
        args.output
    };
    let home = RhoHome::from_env().map_err(|e| CliError::operational(e.to_string()))?;
    let id = runs::resolve(&home, &args.id).map_err(|e| store_error(&e))?;
    let (state, run_dir) = read_state(&home, &id)?;
    if let Some(node) = &args.node
        && !state.root().tasks.contains_key(node)
    {
        let known: Vec<&str> = state.root().tasks.keys().map(String::as_str).collect();
        return Err(CliError::invalid(format!(
            "run {id} has no node `{node}`; its nodes: {}",
            known.join(", ")
        )));
    }
    let sources = sources(&state, &run_dir, args)?;
    if args.follow {
        return follow(&home, &id, &run_dir, args, format, sources);
    }
    match format {
        LogsOutput::Json | LogsOutput::Jsonl => {
            let mut items = Vec::new();
            for s in &sources {
                let bytes = read_all(&s.path)?;
                items.push(json!({
                    "node": s.node,
                    "attempt": s.attempt,
                    "stream": s.stream.file_name(),
                    "path": s.path,
                    "bytes": bytes.len(),
                    "text": String::from_utf8_lossy(&bytes),
                }));
            }
            let doc = json!({ "run_id": id, "logs": items });
            let text = if format == LogsOutput::Jsonl {
                format!("{doc}\n")
            } else {
                json_text(&doc)
            };
            print_out(&text)?;
        }
        LogsOutput::Text => {
            let tty = std::io::stdout().is_terminal();
            let headers = args.node.is_none() || args.stream == StreamChoice::Both;
            let mut out = std::io::stdout().lock();
            let mut printed = false;
            for s in &sources {
                let bytes = read_all(&s.path)?;
                if bytes.is_empty() {
                    continue;
                }
                if headers {
                    let _ = writeln!(
                        out,
                        "==> {} (attempt {}) {} <==",
                        s.node,
                        s.attempt,
                        s.stream.file_name()
                    );
                }
                write_bytes(&mut out, &bytes, tty)?;
                if !bytes.ends_with(b"\n") && (headers || tty) {
                    let _ = writeln!(out);
                }
                printed = true;
            }
            if !printed && tty {
                let _ = writeln!(out, "(no output captured)");
            }
            out.flush()
                .map_err(|e| CliError::operational(format!("cannot write to stdout: {e}")))?;
        }
    }
    Ok(ExitCode::Success)
}

fn read_state(home: &RhoHome, id: &str) -> Result<(State, PathBuf), CliError> {
    let (run, inspection) = runner::inspect(home, id).map_err(|e| super::run::run_error(&e))?;
    if let StoredManifest::Legacy(_) = inspection.manifest {
        return Err(CliError::invalid(format!(
            "run {id} was written by an older release (format 1); its logs are in {}",
            run.path().display()
        )));
    }
    let state = inspection.state.unwrap_or_else(State::empty);
    Ok((state, run.path().to_owned()))
}

/// The streams to show: each chosen node's chosen (or latest) attempt.
fn sources(state: &State, run_dir: &Path, args: &LogsArgs) -> Result<Vec<Source>, CliError> {
    let streams: &[Stream] = match args.stream {
        StreamChoice::Stdout => &[Stream::Stdout],
        StreamChoice::Stderr => &[Stream::Stderr],
        StreamChoice::Both => &[Stream::Stdout, Stream::Stderr],
    };
    let mut out = Vec::new();
    for (node, task) in &state.root().tasks {
        if args.node.as_ref().is_some_and(|n| n != node) {
            continue;
        }
        let attempt = match args.attempt {
            Some(n) => {
                if !task.attempts.iter().any(|a| a.number == n) {
                    let made: Vec<String> =
                        task.attempts.iter().map(|a| a.number.to_string()).collect();
                    return Err(CliError::invalid(format!(
                        "node `{node}` has no attempt {n}; its attempts: {}",
                        if made.is_empty() {
                            "none".to_owned()
                        } else {
                            made.join(", ")
                        }
                    )));
                }
                n
            }
            None => match task.attempts.last() {
                Some(a) => a.number,
                None => continue,
            },
        };
        for stream in streams {
            out.push(Source {
                node: node.clone(),
                attempt,
                stream: *stream,
                path: logs::stream_path(run_dir, node, attempt, *stream),
            });
        }
    }
    Ok(out)
}

fn read_all(path: &Path) -> Result<Vec<u8>, CliError> {
    match std::fs::read(path) {
        Ok(b) => Ok(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(CliError::operational(format!(
            "cannot read {}: {e}",
            path.display()
        ))),
    }
}

/// Writes node output: unchanged to a pipe or file; on a terminal, line by line with control
/// characters made visible.
fn write_bytes(out: &mut impl std::io::Write, bytes: &[u8], tty: bool) -> Result<(), CliError> {
    let result = if tty {
        let text = String::from_utf8_lossy(bytes);
        let mut r = Ok(());
        for (i, line) in text.split('\n').enumerate() {
            if i > 0 {
                r = r.and_then(|()| out.write_all(b"\n"));
            }
            r = r.and_then(|()| out.write_all(logs::escape(line).as_bytes()));
        }
        r
    } else {
        out.write_all(bytes)
    };
    result.map_err(|e| CliError::operational(format!("cannot write to stdout: {e}")))
}

/// Prints new bytes of the chosen streams as they grow, picking up new attempts, until the
/// run is no longer running and everything written was printed.
fn follow(
    home: &RhoHome,
    id: &str,
    run_dir: &Path,
    args: &LogsArgs,
    format: LogsOutput,
    mut current: Vec<Source>,
) -> CliResult {
    let tty = std::io::stdout().is_terminal();
    let prefix = args.node.is_none() || args.stream == StreamChoice::Both;
    let mut offsets: std::collections::BTreeMap<PathBuf, u64> = std::collections::BTreeMap::new();
    loop {
        let (state, _) = read_state(home, id)?;
        let running = matches!(
            state.lifecycle,
            Lifecycle::Planned | Lifecycle::Running | Lifecycle::Cancelling
        );
        if args.attempt.is_none() {
            current = sources(&state, run_dir, args)?;
        }
        let mut out = std::io::stdout().lock();
        for s in &current {
            let offset = offsets.entry(s.path.clone()).or_insert(0);
            let chunk = read_from(&s.path, *offset)?;
            if chunk.is_empty() {
                continue;
            }
            // Only whole lines while the stream may still grow; everything at the end.
            let take = if running {
                chunk.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1)
            } else {
                chunk.len()
            };
            if take == 0 {
                continue;
            }
            let bytes = &chunk[..take];
            *offset += take as u64;
            match format {
                LogsOutput::Text => {
                    if prefix {
                        let text = String::from_utf8_lossy(bytes);
                        for line in text.lines() {
                            let shown = if tty {
                                logs::escape(line)
                            } else {
                                line.to_owned()
                            };
                            let _ = writeln!(out, "{} | {shown}", label(s, args));
                        }
                    } else {
                        write_bytes(&mut out, bytes, tty)?;
                    }
                }
                LogsOutput::Json | LogsOutput::Jsonl => {
                    let line = json!({
                        "run_id": id,
                        "node": s.node,
                        "attempt": s.attempt,
                        "stream": s.stream.file_name(),
                        "text": String::from_utf8_lossy(bytes),
                    });
                    let _ = writeln!(out, "{line}");
                }
            }
        }
        let _ = out.flush();
        drop(out);
        if !running {
            return Ok(ExitCode::Success);
        }
        std::thread::sleep(FOLLOW_POLL);
    }
}

fn label(s: &Source, args: &LogsArgs) -> String {
    if args.node.is_some() {
        s.stream.file_name().to_owned()
    } else if args.stream == StreamChoice::Both {
        format!("{} {}", s.node, s.stream.file_name())
    } else {
        s.node.clone()
    }
}

/// The bytes of `path` from `offset` on (nothing when the file does not exist yet).
fn read_from(path: &Path, offset: u64) -> Result<Vec<u8>, CliError> {
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(CliError::operational(format!(
                "cannot read {}: {e}",
                path.display()
            )));
        }
    };
    let mut bytes = Vec::new();
    file.seek(SeekFrom::Start(offset))
        .and_then(|_| file.read_to_end(&mut bytes))
        .map_err(|e| CliError::operational(format!("cannot read {}: {e}", path.display())))?;
    Ok(bytes)
}
