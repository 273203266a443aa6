//! `rho workflow status <RUN_ID>`: a run's manifest, lifecycle, outcome, nodes, exports and
//! artifacts, as text or one JSON document.
//!
//! Invariant: status never takes `mutation.lock` and never writes; it reads the snapshot plus
//! the journal after it, and detects by itself an owner that died (the recorded owner
//! process is gone while the run never closed), reporting `needs_recovery` with the attempts
//! in flight and their last known process.
//!
//! The JSON document carries Rho 1.47's `run` (`manifest`, `graph`, `state`) and `outcome`
//! (see `rho_shapes`) beside our own members. It is serialized straight from the borrowed state and the typed program:
//! building it as a generic JSON tree first (and decoding `graph.json` into one) was most of
//! the time `status` took on a 1,000-node run.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use clap::{Args, ValueEnum};
use rho_ipc::data::Data;
use rho_ipc::program::FrozenProgram;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{json_text, print_out, rho_shapes, store_error};
use crate::cli::exit::{CliError, CliResult, ExitCode};
use crate::paths::RhoHome;
use crate::workflow::runner::{self, Inspection};
use crate::workflow::state::{Completion, HookFailureRecord, Lifecycle, Outcome, State, Task};
use crate::workflow::store::StoreError;
use crate::workflow::store::runs::{self, RunDir, RunManifest, StoredManifest};

/// Output formats of `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusOutput {
    /// Lines for people.
    Text,
    /// One JSON document.
    Json,
}

/// Show a run's state.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The run id or a unique prefix of it.
    #[arg(value_name = "RUN_ID")]
    pub id: String,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub output: StatusOutput,
    /// Same as `--output json`.
    #[arg(long, hide = true, conflicts_with = "output")]
    pub json: bool,
}

/// Runs `rho workflow status`.
pub fn run_status(args: &StatusArgs) -> CliResult {
    let home = RhoHome::from_env().map_err(|e| CliError::operational(e.to_string()))?;
    let id = runs::resolve(&home, &args.id).map_err(|e| store_error(&e))?;
    let (run, manifest) =
        runner::open_inspected(&home, &id).map_err(|e| super::run::run_error(&e))?;
    let output = if args.json {
        StatusOutput::Json
    } else {
        args.output
    };
    // The JSON document shows the program of `graph.json`: it is decoded on a second thread
    // while this one reads and checks the state (failures are reported in the same order
    // as one after the other: the state's first).
    let with_graph = output == StatusOutput::Json && matches!(manifest, StoredManifest::Current(_));
    std::thread::scope(|scope| {
        let graph = with_graph.then(|| {
            std::thread::Builder::new()
                .name("rho-graph".into())
                .spawn_scoped(scope, || graph_program(&run))
        });
        let inspection =
            runner::inspect_opened(&run, manifest).map_err(|e| super::run::run_error(&e))?;
        // A run of a plan made by a degraded planner says so on every output.
        if let StoredManifest::Current(manifest) = &inspection.manifest {
            super::warn(&run_sandbox_warnings(&home, manifest));
        }
        let text = match (&inspection.manifest, graph) {
            (StoredManifest::Current(manifest), Some(graph)) => {
                let program = match graph {
                    Ok(handle) => handle.join().unwrap_or_else(|_| graph_program(&run))?,
                    Err(e) => {
                        tracing::debug!("cannot start a thread to read graph.json ({e})");
                        graph_program(&run)?
                    }
                };
                write_document(&status_document(&inspection, manifest, &program))?;
                // The process ends right after: freeing a 1,000-node run's records and
                // program one allocation at a time cost ~1 ms of a ~20 ms call.
                std::mem::forget((inspection, program));
                return Ok(ExitCode::Success);
            }
            // A format-1 run is shown as stored; it has no graph.json of this format.
            (StoredManifest::Legacy(_), _) if output == StatusOutput::Json => {
                json_text(&legacy_json(&inspection))
            }
            // Names, reasons and notes come from the workflow and its commands.
            _ => crate::terminal::escape_controls_keep_lines(&status_text(
                &id,
                run.path(),
                &inspection,
            ))
            .into_owned(),
        };
        print_out(&text)?;
        std::mem::forget(inspection);
        Ok(ExitCode::Success)
    })
}

/// Prints a status document (pretty, then a newline) to stdout as it is serialized, through
/// one buffer: a 1,000-node run's document is ~5 MB, and growing a string that size (copying
/// and faulting in each doubling) cost more than encoding it. Its largest member, `run`
/// (~40% of it), is encoded on a second thread while this one prints the members before
/// it. (Encoding `nodes` and `state` apart as well was measured too: on two cores, with the
/// reader of the output needing one, it gained nothing and faulted in ~2 MB more.)
fn write_document(document: &StatusDocument<'_>) -> Result<(), CliError> {
    use std::io::Write as _;
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let apart = document.nodes.map_or(0, BTreeMap::len) >= APART_FROM_NODES;
    let printed = std::thread::scope(|scope| {
        let run = apart.then(|| {
            std::thread::Builder::new()
                .name("rho-status-run".into())
                .spawn_scoped(scope, || encode_run(document))
        });
        let run = move || match run? {
            // A thread that panicked is encoded again here.
            Ok(handle) => handle.join().ok(),
            Err(e) => {
                tracing::debug!("cannot start a thread to encode the status ({e})");
                None
            }
        };
        write_members(&mut out, document, run)
    });
    printed
        .and_then(|()| out.write_all(b"\n").map_err(serde_json::Error::io))
        .and_then(|()| out.flush().map_err(serde_json::Error::io))
        .map_err(|e| {
            if e.is_io() {
                CliError::operational(format!("cannot write to stdout: {e}"))
            } else {
                CliError::operational(format!("cannot encode the status: {e}"))
            }
        })
}

/// From this many nodes up, a status document's `run` member is encoded on a thread of its
/// own (below it, the whole document encodes in less time than starting one takes).
const APART_FROM_NODES: usize = 64;

/// The `run` member of `document` as it is printed at depth 1.
fn encode_run(document: &StatusDocument<'_>) -> Result<Vec<u8>, serde_json::Error> {
    let mut bytes = Vec::new();
    write_pretty_at(&mut bytes, &document.run, 1)?;
    Ok(bytes)
}

/// Writes `document` exactly as `write_pretty` prints it, member by member; the bytes of
/// the `run` member come from `run` when it has them, else it is serialized here.
fn write_members<W: std::io::Write>(
    out: &mut W,
    d: &StatusDocument<'_>,
    run: impl FnOnce() -> Option<Result<Vec<u8>, serde_json::Error>>,
) -> Result<(), serde_json::Error> {
    let mut object = TopObject { out, empty: true };
    object.member("command_exits", &d.command_exits)?;
    object.member("completions", &d.completions)?;
    object.member("graph_digest", &d.graph_digest)?;
    object.member("hook_failures", &d.hook_failures)?;
    object.member("lifecycle", &d.lifecycle)?;
    object.member("manifest", &d.manifest)?;
    object.member("needs_recovery", &d.needs_recovery)?;
    object.member("nodes", &d.nodes)?;
    object.member("outcome", &d.outcome)?;
    object.member("outputs", &d.outputs)?;
    object.member("owner_alive", &d.owner_alive)?;
    object.member("permission_mode", &d.permission_mode)?;
    object.member("program", &d.program)?;
    object.member("program_digest", &d.program_digest)?;
    object.member_or("run", &d.run, run())?;
    object.member("state", &d.state)?;
    object.end()
}

/// A top-level JSON object written one member at a time, as `write_pretty` prints a struct.
struct TopObject<'w, W> {
    out: &'w mut W,
    empty: bool,
}

impl<W: std::io::Write> TopObject<'_, W> {
    /// Starts member `key` (a name needing no escapes).
    fn key(&mut self, key: &str) -> Result<(), serde_json::Error> {
        let open: &[u8] = if self.empty { b"{\n  \"" } else { b",\n  \"" };
        self.empty = false;
        self.out
            .write_all(open)
            .and_then(|()| self.out.write_all(key.as_bytes()))
            .and_then(|()| self.out.write_all(b"\": "))
            .map_err(serde_json::Error::io)
    }

    fn member<T: Serialize + ?Sized>(
        &mut self,
        key: &str,
        value: &T,
    ) -> Result<(), serde_json::Error> {
        self.key(key)?;
        write_pretty_at(&mut *self.out, value, 1)
    }

    /// Member `key`: its bytes as `encoded` elsewhere (at depth 1) when given, else `value`
    /// serialized here.
    fn member_or<T: Serialize + ?Sized>(
        &mut self,
        key: &str,
        value: &T,
        encoded: Option<Result<Vec<u8>, serde_json::Error>>,
    ) -> Result<(), serde_json::Error> {
        match encoded {
            Some(bytes) => {
                let bytes = bytes?;
                self.key(key)?;
                self.out.write_all(&bytes).map_err(serde_json::Error::io)
            }
            None => self.member(key, value),
        }
    }

    fn end(self) -> Result<(), serde_json::Error> {
        let close: &[u8] = if self.empty { b"{}" } else { b"\n}" };
        self.out.write_all(close).map_err(serde_json::Error::io)
    }
}

/// Writes `value` exactly as `serde_json::to_writer_pretty` does (two-space indent), with
/// each line break and its indentation written at once rather than one write per level.
#[cfg(test)]
fn write_pretty<W: std::io::Write, T: Serialize + ?Sized>(
    writer: W,
    value: &T,
) -> Result<(), serde_json::Error> {
    write_pretty_at(writer, value, 0)
}

/// Writes `value` as `serde_json::to_writer_pretty` prints it `depth` levels deep (as the
/// value of a top-level member at depth 1), each line break and its indentation written at
/// once rather than one write per level.
fn write_pretty_at<W: std::io::Write, T: Serialize + ?Sized>(
    writer: W,
    value: &T,
    depth: usize,
) -> Result<(), serde_json::Error> {
    let formatter = LineFormatter {
        depth,
        has_value: false,
    };
    let mut serializer = serde_json::Serializer::with_formatter(writer, formatter);
    value.serialize(&mut serializer)
}

/// A line break followed by indentation for up to 63 levels.
const BREAK: &[u8; 127] = b"\n                                                                                                                              ";

/// `serde_json::ser::PrettyFormatter` with a two-space indent, byte for byte.
struct LineFormatter {
    depth: usize,
    has_value: bool,
}

impl LineFormatter {
    fn line<W: ?Sized + std::io::Write>(&self, writer: &mut W) -> std::io::Result<()> {
        if let Some(line) = BREAK.get(..=2 * self.depth) {
            writer.write_all(line)
        } else {
            writer.write_all(b"\n")?;
            (0..self.depth).try_for_each(|_| writer.write_all(b"  "))
        }
    }

    fn open<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        bracket: &[u8],
    ) -> std::io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        writer.write_all(bracket)
    }

    fn close<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        bracket: &[u8],
    ) -> std::io::Result<()> {
        self.depth -= 1;
        if self.has_value {
            self.line(writer)?;
        }
        writer.write_all(bracket)
    }

    fn item<W: ?Sized + std::io::Write>(&self, writer: &mut W, first: bool) -> std::io::Result<()> {
        if !first {
            writer.write_all(b",")?;
        }
        self.line(writer)
    }
}

impl serde_json::ser::Formatter for LineFormatter {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.open(writer, b"[")
    }

    fn end_array<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.close(writer, b"]")
    }

    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.item(writer, first)
    }

    fn end_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        _writer: &mut W,
    ) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn begin_object<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.open(writer, b"{")
    }

    fn end_object<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.close(writer, b"}")
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.item(writer, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
    ) -> std::io::Result<()> {
        writer.write_all(b": ")
    }

    fn end_object_value<W: ?Sized + std::io::Write>(
        &mut self,
        _writer: &mut W,
    ) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

/// The degraded-sandbox warnings of a run: from the record copied into its manifest, or
/// (for a run created before it was copied) from its plan while the plan exists.
pub(super) fn run_sandbox_warnings(
    home: &RhoHome,
    manifest: &crate::workflow::store::runs::RunManifest,
) -> Vec<String> {
    match &manifest.sandbox {
        Some(record) => crate::workflow::plan::recorded_sandbox_warnings(record),
        None => crate::workflow::store::plans::manifest(home, &manifest.plan_id)
            .map(|plan| crate::workflow::plan::recorded_sandbox_warnings(&plan.sandbox))
            .unwrap_or_default(),
    }
}

/// `status --output json` of a format-1 run: its manifest and state as stored, which are
/// Rho 1.47's own, also under Rho's `run` with Rho's `outcome`.
fn legacy_json(inspection: &Inspection) -> serde_json::Value {
    let manifest = match &inspection.manifest {
        StoredManifest::Legacy(manifest) => Some(manifest),
        StoredManifest::Current(_) => None,
    };
    let outcome = inspection
        .legacy_state
        .as_ref()
        .map(|s| s["state"]["outcome"].clone());
    json!({
        "run": { "manifest": manifest, "graph": null, "state": inspection.legacy_state },
        "outcome": outcome,
        "manifest": manifest,
        "legacy": true,
        "state": inspection.legacy_state,
    })
}

/// Largest `graph.json` status reads (the store's own bound for run documents).
const MAX_GRAPH_BYTES: u64 = 512 * 1024 * 1024;

/// The `program` member of a run's `graph.json`.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum GraphProgram {
    /// Read as the typed program (the usual case, and the fast one).
    Typed(Box<FrozenProgram>),
    /// Read as generic JSON, for a document the typed reader refuses: status shows what is
    /// stored rather than failing (`null` when it has no `program`).
    Generic(Option<serde_json::Value>),
}

#[derive(Deserialize)]
struct TypedGraph {
    program: Box<FrozenProgram>,
}

fn graph_program(run: &RunDir) -> Result<GraphProgram, CliError> {
    let bytes = run
        .dir()
        .read_private("graph.json", MAX_GRAPH_BYTES)
        .map_err(|e| store_error(&e))?;
    program_of(&bytes).map_err(|e| {
        store_error(&StoreError::Corrupt {
            path: run.dir().entry_path("graph.json"),
            problem: e.to_string(),
        })
    })
}

/// The `program` of `graph.json` bytes: typed when it reads as a program, else generic.
fn program_of(bytes: &[u8]) -> Result<GraphProgram, serde_json::Error> {
    // As text checked to be UTF-8 in one pass (the byte reader checks each string and key
    // on its own, which costs more); bytes that are not UTF-8 are left to the generic reader,
    // which refuses them.
    let typed = std::str::from_utf8(bytes)
        .ok()
        .and_then(|text| serde_json::from_str::<TypedGraph>(text).ok());
    if let Some(graph) = typed {
        return Ok(GraphProgram::Typed(graph.program));
    }
    let mut graph: serde_json::Value = serde_json::from_slice(bytes)?;
    Ok(GraphProgram::Generic(
        graph.get_mut("program").map(serde_json::Value::take),
    ))
}

/// The status document of a current-format run, borrowing everything it shows. Members are
/// in alphabetical order, as the generic JSON map this replaced printed them.
#[derive(Serialize)]
struct StatusDocument<'a> {
    command_exits: Option<&'a BTreeMap<String, i64>>,
    completions: Option<&'a BTreeMap<String, Completion>>,
    graph_digest: &'a str,
    hook_failures: Option<&'a Vec<HookFailureRecord>>,
    lifecycle: Option<Lifecycle>,
    manifest: &'a RunManifest,
    needs_recovery: &'a [String],
    nodes: Option<&'a BTreeMap<String, Task>>,
    outcome: Option<Outcome>,
    outputs: Option<&'a BTreeMap<String, Data>>,
    owner_alive: Option<bool>,
    permission_mode: Option<&'a rho_policy::PermissionMode>,
    program: &'a GraphProgram,
    program_digest: &'a str,
    /// Rho 1.47's `run` (`manifest`, `graph`, `state`); Rho's `outcome` is ours too.
    run: rho_shapes::typed::RunMember<'a>,
    state: Option<&'a State>,
}

fn status_document<'a>(
    inspection: &'a Inspection,
    manifest: &'a RunManifest,
    program: &'a GraphProgram,
) -> StatusDocument<'a> {
    let state = inspection.state.as_ref();
    let root = state.map(State::root);
    let lifecycle = inspection.effective_lifecycle();
    let run = rho_shapes::typed::run_member(
        manifest,
        match program {
            GraphProgram::Typed(p) => Some(p),
            GraphProgram::Generic(_) => None,
        },
        state,
        lifecycle,
    );
    StatusDocument {
        command_exits: root.map(|r| &r.command_exits),
        completions: root.map(|r| &r.completions),
        graph_digest: &manifest.graph_digest,
        hook_failures: state.map(|s| &s.hook_failures),
        lifecycle,
        manifest,
        needs_recovery: &inspection.uncertain,
        nodes: root.map(|r| &r.tasks),
        outcome: root.and_then(|r| r.result.as_ref()).map(|r| r.outcome),
        outputs: root.map(|r| &r.outputs),
        owner_alive: state
            .and_then(|s| s.owner.as_ref())
            .map(|_| !inspection.owner_dead),
        permission_mode: manifest.policy.as_ref().map(|p| &p.permission_mode),
        program,
        program_digest: &manifest.program_digest,
        run,
        state,
    }
}

fn status_text(id: &str, run_dir: &std::path::Path, inspection: &Inspection) -> String {
    let mut out = String::new();
    let manifest = match &inspection.manifest {
        StoredManifest::Legacy(manifest) => {
            let _ = writeln!(
                out,
                "run: {id} (format 1, read-only: written by an older release)"
            );
            out.push_str(&json_text(manifest));
            if let Some(state) = &inspection.legacy_state {
                out.push_str(&json_text(state));
            }
            return out;
        }
        StoredManifest::Current(m) => m,
    };
    let Some(state) = &inspection.state else {
        return out;
    };
    let root = state.root();
    let _ = writeln!(out, "run: {id}");
    let _ = writeln!(out, "name: {}", manifest.name);
    let _ = writeln!(out, "plan: {}", manifest.plan_id);
    let _ = writeln!(out, "program_digest: {}", manifest.program_digest);
    let _ = writeln!(
        out,
        "consent: {} at {} to {} (for this run only; it grants nothing else)",
        match manifest.confirmation.method {
            runs::ConfirmationMethod::Yes => "--yes",
            runs::ConfirmationMethod::Prompt => "prompt",
            runs::ConfirmationMethod::Host => "host",
        },
        manifest.confirmation.at,
        manifest.confirmation.digest
    );
    match &manifest.policy {
        Some(policy) => {
            let trust = policy.trust.kinds();
            let _ = writeln!(
                out,
                "permission mode: {} (recorded at creation; a resume can only narrow it)",
                policy.permission_mode
            );
            if !trust.is_empty() {
                let names: Vec<String> = trust.iter().map(ToString::to_string).collect();
                let _ = writeln!(out, "relies on trust in: {}", names.join(", "));
            }
        }
        None => {
            let _ = writeln!(out, "permission mode: not recorded (an earlier build)");
        }
    }
    let lifecycle = inspection.effective_lifecycle().unwrap_or(state.lifecycle);
    let _ = writeln!(out, "lifecycle: {lifecycle}");
    if let Some(owner) = &state.owner {
        let _ = writeln!(
            out,
            "owner: pid {} ({}), permission mode {}",
            owner.pid,
            if inspection.owner_dead {
                "gone"
            } else {
                "alive"
            },
            owner.permission_mode
        );
    }
    match &root.result {
        Some(result) => {
            let _ = writeln!(out, "outcome: {}", result.outcome);
        }
        None => {
            let _ = writeln!(out, "outcome: none yet");
        }
    }
    let done = root
        .tasks
        .values()
        .filter(|t| t.state.is_terminal())
        .count();
    let _ = writeln!(out, "nodes: {done}/{} terminal", root.tasks.len());
    for (node, task) in &root.tasks {
        let attempt = task
            .attempts
            .last()
            .map_or_else(String::new, |a| format!(" attempt {}", a.number));
        let reason = task
            .reason
            .as_ref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        let _ = writeln!(out, "  {node}: {}{attempt}{reason}", task.state);
        if let Some(a) = task.attempts.last() {
            if let Some(denial) = &a.denial {
                let _ = writeln!(
                    out,
                    "    denied by {}: {} (permission mode {})",
                    denial.decided_by, denial.reason, denial.mode
                );
            }
            for (label, art) in [
                ("stdout", &a.stdout),
                ("stderr", &a.stderr),
                ("output", &a.output),
            ] {
                if let Some(art) = art {
                    let shortfall = if art.truncated {
                        format!(" · truncated: observed {} bytes", art.observed_bytes)
                    } else {
                        String::new()
                    };
                    let _ = writeln!(
                        out,
                        "    {label}: {} · {} bytes · digest {}{shortfall}",
                        run_dir.join(&art.path).display(),
                        art.retained_bytes,
                        art.sha256
                    );
                }
            }
        }
    }
    if let Some(result) = &root.result {
        let _ = writeln!(out, "scope s0 result: {}", result.outcome);
        for (name, e) in &result.exports {
            match &e.note {
                None => {
                    let _ = writeln!(out, "  export {name} = {}", e.value);
                }
                Some(note) => {
                    let _ = writeln!(out, "  export {name} = null (unavailable: {note})");
                }
            }
        }
    }
    for f in &state.hook_failures {
        let at = match (&f.node, f.attempt) {
            (Some(node), Some(attempt)) => format!(" (node {node} attempt {attempt})"),
            (Some(node), None) => format!(" (node {node})"),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "hook failed: {} hook `{}` on {}{at}: {}",
            f.scope, f.hook_id, f.event, f.detail
        );
    }
    if !inspection.uncertain.is_empty() {
        let _ = writeln!(
            out,
            "needs recovery: {}; inspect them, then `rho workflow resume {id} --recover-uncertain`",
            inspection.uncertain.join("; ")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflow::scheduler::tests::{command_node, program};
    use rho_ipc::program::SchedulerSettings;

    fn sample() -> FrozenProgram {
        program(
            vec![command_node("a", &[]), command_node("b", &["a"])],
            SchedulerSettings {
                max_parallel_nodes: 2,
                max_parallel_agents: 1,
                max_parallel_commands: 1,
            },
        )
    }

    #[test]
    fn typed_program_shows_as_the_stored_json() {
        let program = sample();
        let graph = serde_json::to_vec(&json!({
            "program": program,
            "program_digest": "sha256:00",
            "graph_digest": "sha256:11",
        }))
        .unwrap();
        let read = program_of(&graph).unwrap();
        assert!(matches!(read, GraphProgram::Typed(_)));
        let stored: serde_json::Value = serde_json::from_slice(&graph).unwrap();
        assert_eq!(serde_json::to_value(&read).unwrap(), stored["program"]);
    }

    #[test]
    fn a_program_the_typed_reader_refuses_is_shown_as_stored() {
        let read = program_of(br#"{"program": {"name": "old", "nodes": 3}}"#).unwrap();
        assert!(matches!(read, GraphProgram::Generic(Some(_))));
        assert_eq!(
            serde_json::to_value(&read).unwrap(),
            json!({"name": "old", "nodes": 3})
        );
        let none = program_of(br#"{"other": 1}"#).unwrap();
        assert_eq!(
            serde_json::to_value(&none).unwrap(),
            serde_json::Value::Null
        );
        assert!(program_of(b"{not json").is_err());
    }

    #[test]
    fn the_document_prints_member_by_member_as_serde_json_pretty() {
        use crate::workflow::state::{NodeState, ScopeState};
        let program = GraphProgram::Typed(Box::new(sample()));
        let manifest: RunManifest = serde_json::from_value(json!({
            "format": 2,
            "run_id": "r1",
            "plan_id": "p1",
            "name": "two \"nodes\"",
            "created_at": "2026-12-01T03:00:00.000Z",
            "graph_digest": "sha256:g",
            "program_digest": "sha256:p",
            "node_count": 2,
            "workspace": {"path": "/w", "device": 1, "inode": 2},
            "confirmation": {"method": "--yes", "at": "2026-12-01T03:00:00.000Z", "digest": "sha256:p"},
        }))
        .unwrap();
        let mut scope = ScopeState::default();
        scope.tasks.insert(
            "a".into(),
            Task {
                state: NodeState::Success,
                reason: Some("fine\n".into()),
                attempts: vec![],
            },
        );
        scope.command_exits.insert("a".into(), 0);
        let mut state = State::empty();
        state.scopes.insert("s0".into(), scope);
        let with_state = Inspection {
            manifest: StoredManifest::Current(manifest.clone()),
            state: Some(state),
            legacy_state: None,
            owner_dead: false,
            uncertain: vec!["node `b` attempt 1".into()],
            torn_bytes: 0,
        };
        let bare = Inspection {
            state: None,
            uncertain: vec![],
            ..with_state.clone()
        };
        for inspection in [&with_state, &bare] {
            let document = status_document(inspection, &manifest, &program);
            let expected = serde_json::to_string_pretty(&document).unwrap();
            let mut here = Vec::new();
            write_members(&mut here, &document, || None).unwrap();
            assert_eq!(String::from_utf8(here).unwrap(), expected);
            // `run` encoded elsewhere, as its thread does.
            let mut there = Vec::new();
            write_members(&mut there, &document, || Some(encode_run(&document))).unwrap();
            assert_eq!(String::from_utf8(there).unwrap(), expected);
        }
    }

    fn pretty_via_lines(value: &serde_json::Value) -> String {
        let mut out = Vec::new();
        write_pretty(&mut out, value).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn line_formatter_prints_as_serde_json_pretty() {
        // Empty and filled containers, strings needing escapes, and nesting deeper than
        // the precomputed indentation.
        let mut deep = json!({"leaf": [1, {"x": null}], "empty": {}});
        for i in 0..80 {
            deep = if i % 2 == 0 {
                json!({"k": deep, "e": [], "s": "a\"b\n\u{1}ü"})
            } else {
                json!([deep, {}, -1.5, true])
            };
        }
        for value in [
            json!(null),
            json!([]),
            json!({}),
            json!([[], {}, [[]], {"a": {}}]),
            json!({"b": [1, 2, {"c": "d"}], "a": "x"}),
            deep,
        ] {
            assert_eq!(
                pretty_via_lines(&value),
                serde_json::to_string_pretty(&value).unwrap()
            );
        }
        let program = serde_json::to_value(sample()).unwrap();
        assert_eq!(
            pretty_via_lines(&program),
            serde_json::to_string_pretty(&program).unwrap()
        );
    }
}
