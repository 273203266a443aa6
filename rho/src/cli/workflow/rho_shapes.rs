//! The shapes of Rho 1.47's machine-readable documents, built from our plans and runs.
//!
//! Scripts written against Rho 1.47 read `plan --output json` (`manifest`, `graph`),
//! `list --json` (`plans`, `runs`), `status --output json` (`run`, `outcome`) and the run
//! JSONL events (`type`, `version`, `sequence`, `run_id`, ...). Every document we print keeps
//! those keys at those paths, with Rho's value vocabulary; what only rho knows sits beside
//! them under keys Rho does not use.
//!
//! Invariant: these functions only add keys; a key Rho defines is never reused for a value
//! of another meaning, and the tokens they print (`success`, `needs_recovery`, `read_only`,
//! ...) are the ones Rho prints.

use std::collections::BTreeMap;

use rho_ipc::data::Data;
use rho_ipc::program::{
    Condition, Execution, FileIdentity, FileLocation, FrozenExecutable, FrozenProgram, Node,
    Reference, Schema, Template, TemplatePart,
};
use serde_json::{Map, Value, json};

use crate::workflow::state::{Attempt, ExitRecord, NodeState, State};

pub mod typed;
use crate::workflow::store::plans::PlanManifest;
use crate::workflow::store::runs::RunManifest;

/// The `schema_version` Rho writes in a plan or run manifest.
const MANIFEST_SCHEMA_VERSION: u32 = 1;
/// The `schema_version` Rho writes in a run state record.
const RUN_STATE_SCHEMA_VERSION: u32 = 2;

/// Nanoseconds since the epoch of an RFC 3339 UTC timestamp as we write them
/// (`2025-01-31T12:00:00.123Z`); 0 when it does not parse (Rho's value for "unknown").
pub fn unix_nanos(timestamp: &str) -> u64 {
    parse_unix_nanos(timestamp).unwrap_or(0)
}

fn parse_unix_nanos(t: &str) -> Option<u64> {
    let t = t.strip_suffix('Z')?;
    let (date, time) = t.split_once('T')?;
    let mut d = date.splitn(3, '-');
    let year: i64 = d.next()?.parse().ok()?;
    let month: i64 = d.next()?.parse().ok()?;
    let day: i64 = d.next()?.parse().ok()?;
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut h = hms.splitn(3, ':');
    let hour: i64 = h.next()?.parse().ok()?;
    let minute: i64 = h.next()?.parse().ok()?;
    let second: i64 = h.next()?.parse().ok()?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    let mut nanos: u64 = 0;
    let mut scale = 100_000_000_u64;
    for c in frac.chars().take(9) {
        nanos += u64::from(c.to_digit(10)?) * scale;
        scale /= 10;
    }
    // Howard Hinnant's days_from_civil.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second;
    u64::try_from(secs)
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(nanos)
}

/// Rho's `source_digests` (workspace label such as `//.rho/workflows/x/workflow.star`, as
/// Rho writes it → digest).
fn source_digests(sources: &[rho_ipc::program::SourceEntry]) -> Value {
    let map: Map<String, Value> = sources
        .iter()
        .map(|s| (source_label(&s.label), Value::from(s.digest.clone())))
        .collect();
    Value::Object(map)
}

fn source_label(label: &str) -> String {
    // Both tools label sources from the workspace root with a `//` prefix.
    label.to_owned()
}

/// A plan manifest: Rho's keys (`schema_version`, `plan_id`, `created_at_unix_nanos`,
/// `graph_digest`, `workspace_identity`, `source_digests`, `name`, `step_count`) and ours.
pub fn plan_manifest(m: &PlanManifest) -> Value {
    json!({
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "plan_id": m.plan_id,
        "created_at_unix_nanos": unix_nanos(&m.created_at),
        "graph_digest": m.graph_digest,
        "workspace_identity": m.workspace.path,
        "source_digests": source_digests(&m.sources),
        "name": m.name,
        "step_count": m.node_count,
        // Ours.
        "format": m.format,
        "created_at": m.created_at,
        "program_digest": m.program_digest,
        "node_count": m.node_count,
        "workspace": m.workspace,
        "sources": m.sources,
        "sandbox": m.sandbox,
    })
}

/// A run manifest: Rho's keys (`schema_version`, `run_id`, `created_at_unix_nanos`,
/// `plan_id`, `graph_digest`, `workspace_identity`, `consent`, `name`, `step_count`) and ours.
pub fn run_manifest(m: &RunManifest) -> Value {
    let mut value = json!({
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "run_id": m.run_id,
        "created_at_unix_nanos": unix_nanos(&m.created_at),
        "plan_id": m.plan_id,
        "graph_digest": m.graph_digest,
        "workspace_identity": m.workspace.path,
        "consent": { "graph_digest": m.graph_digest, "confirmed": true },
        "name": m.name,
        "step_count": m.node_count,
        // Ours.
        "format": m.format,
        "created_at": m.created_at,
        "program_digest": m.program_digest,
        "node_count": m.node_count,
        "workspace": m.workspace,
        "confirmation": m.confirmation,
    });
    if let Some(policy) = &m.policy {
        value["policy"] = json!(policy);
    }
    value
}

/// A frozen program in the shape of Rho's frozen workflow (`schema_version`, `planner`,
/// `graph_digest`, `sources`, `inputs`, `graph.name`, `graph.nodes`, `resolved_nodes`,
/// `scheduler`, `runtime_limits`), with `program_digest` beside them and, when `with_program`,
/// our program as `program`. `entry` is the entry file's label when known (a run's documents
/// do not record it; the first source stands in).
pub fn frozen_workflow(
    program: &FrozenProgram,
    graph_digest: &str,
    program_digest: &str,
    entry: Option<&str>,
    with_program: bool,
) -> Value {
    let entry = entry
        .or_else(|| program.sources.first().map(|s| s.label.as_str()))
        .map(source_label)
        .unwrap_or_default();
    let modules: Map<String, Value> = program
        .sources
        .iter()
        .map(|s| {
            (
                source_label(&s.label),
                json!({ "digest": s.digest, "bytes": s.size }),
            )
        })
        .collect();
    let inputs: Map<String, Value> = program
        .root
        .bound_inputs
        .iter()
        .map(|(k, v)| (k.clone(), v.to_json()))
        .collect();
    let nodes: Map<String, Value> = program
        .root
        .nodes
        .iter()
        .map(|n| (n.id.clone(), graph_node(n)))
        .collect();
    let resolved: Map<String, Value> = program
        .root
        .nodes
        .iter()
        .map(|n| (n.id.clone(), resolved_node(program, n)))
        .collect();
    let b = &program.budgets;
    let mut value = json!({
        "schema_version": program.format_version,
        "planner": {
            "name": program.planner.name,
            "format_version": program.format_version,
            "starlark_version": "0.14",
            "version": program.planner.version,
        },
        "graph_digest": graph_digest,
        "sources": { "entry_label": entry, "modules": modules },
        "inputs": inputs,
        "graph": { "name": program.name, "nodes": nodes },
        "resolved_nodes": resolved,
        "scheduler": {
            "max_parallel_nodes": program.scheduler.max_parallel_nodes,
            "max_parallel_agents": program.scheduler.max_parallel_agents,
            "max_parallel_commands": program.scheduler.max_parallel_commands,
        },
        "runtime_limits": {
            "retained_output_per_stream_bytes": b.retained_output_per_stream_bytes,
            "retained_output_total_bytes": b.retained_output_total_bytes,
            "rendered_template_bytes": b.rendered_template_bytes,
            "node_timeout_seconds": b.node_timeout_seconds,
            "prompt_expansion_bytes": b.expanded_prompt_bytes,
            "argv_expansion_bytes": b.expanded_argv_bytes,
            "environment_expansion_bytes": b.rendered_template_bytes,
        },
        // Ours.
        "program_digest": program_digest,
    });
    if with_program {
        value["program"] = json!(program);
    }
    value
}

fn graph_node(n: &Node) -> Value {
    let output = n.output.as_ref().map(output_schema);
    let execution = match &n.execution {
        Execution::Agent { agent, prompt } => json!({
            "kind": "agent",
            "agent": agent,
            "prompt": template(prompt),
            "output": output,
        }),
        Execution::Command {
            argv0, args, cwd, ..
        } => json!({
            "kind": "command",
            "invocation": "direct",
            "executable": argv0,
            "arguments": args.iter().map(template).collect::<Vec<_>>(),
            "cwd": cwd.path,
            "output": output,
        }),
        Execution::Shell {
            executable,
            arguments,
            command,
            cwd,
            ..
        } => json!({
            "kind": "command",
            "invocation": "shell",
            "executable": executable,
            "arguments": arguments,
            "command": command,
            "cwd": cwd.path,
            "output": output,
        }),
    };
    json!({
        "id": n.id,
        "display_name": n.id,
        "needs": n.needs,
        "condition": n.when.as_ref().map(condition),
        "execution": execution,
        "access": n.access,
        "allow_failure": n.allow_failure,
        "timeout_seconds": n.timeout_seconds,
        "max_output_bytes": n.max_output_bytes,
        // Ours: `shell` is a kind of its own here.
        "node_kind": n.kind().as_str(),
    })
}

fn file_identity(file: &FileIdentity) -> Value {
    let path = match &file.location {
        FileLocation::Workspace { path } | FileLocation::Absolute { path, .. } => path,
    };
    json!({
        "canonical_path": path,
        "kind": "file",
        "byte_len": file.size,
        "content_digest": file.sha256,
        "platform_id": match &file.location {
            FileLocation::Absolute { device, inode, .. } => Some(format!("{device}:{inode}")),
            FileLocation::Workspace { .. } => None,
        },
    })
}

fn executable_identity(program: &FrozenExecutable) -> Value {
    json!({
        "file": file_identity(&program.file),
        "interpreter": program.interpreter.as_ref().map(|i| file_identity(&i.file)),
        "interpreter_arguments": program
            .interpreter
            .as_ref()
            .map(|i| i.args.clone())
            .unwrap_or_default(),
    })
}

fn resolved_node(program: &FrozenProgram, n: &Node) -> Value {
    let command = |exe: &FrozenExecutable, written: &str, cwd: &str| {
        let path = match &exe.file.location {
            FileLocation::Workspace { path } | FileLocation::Absolute { path, .. } => path,
        };
        json!({
            "type": "command",
            "value": {
                "executable": path,
                "executable_identity": executable_identity(exe),
                "exact_path": written.contains('/'),
                "cwd": cwd,
                "cwd_identity": { "canonical_path": cwd, "kind": "directory", "byte_len": 0,
                                  "content_digest": null, "platform_id": null },
                "environment_policy": program.environment.name,
            }
        })
    };
    match &n.execution {
        Execution::Command {
            program: exe,
            argv0,
            cwd,
            ..
        } => command(exe, argv0, &cwd.path),
        Execution::Shell {
            program: exe,
            executable,
            cwd,
            ..
        } => command(exe, executable, &cwd.path),
        Execution::Agent { agent, .. } => {
            let setup = program.agents.get(agent);
            json!({
                "type": "agent",
                "value": {
                    "agent_id": agent,
                    "fingerprint": setup.map(|s| s.fingerprint.clone()),
                    "runtime": setup.map(|s| match s.runtime {
                        rho_ipc::program::AgentRuntime::Rho => "rho",
                        rho_ipc::program::AgentRuntime::ClaudeCli => "claude_cli",
                    }),
                    "source_origin": setup.map(|s| s.source),
                    "trust_required": setup.is_some_and(|s| {
                        s.source == rho_ipc::program::AgentSource::Project
                    }),
                    "prompt_policy": setup.map(|s| s.prompt_policy.clone()),
                    "provider": setup.and_then(|s| s.provider.clone()),
                    "model": setup.and_then(|s| s.model.clone()),
                    "reasoning": setup.and_then(|s| s.reasoning.clone()),
                    "capabilities": setup.map(|s| s.capabilities.clone()).unwrap_or_default(),
                    "permission_ceiling": if setup.is_some_and(|s| s.read_only) {
                        "read_only"
                    } else {
                        "inherit"
                    },
                }
            })
        }
    }
}

/// Rho's output schema: a command's `stdout_json(S)` is Rho's plain `S` (Rho reads a
/// command's output schema as its stdout JSON); records are Rho's `object` with `required`.
pub fn output_schema(schema: &Schema) -> Value {
    match schema {
        Schema::Null => json!({ "type": "null" }),
        Schema::Bool => json!({ "type": "bool" }),
        Schema::Integer => json!({ "type": "integer" }),
        Schema::String => json!({ "type": "string" }),
        Schema::Enum { members } => {
            json!({ "type": "enum", "members": members.iter().map(Data::to_json).collect::<Vec<_>>() })
        }
        Schema::List { items } => json!({ "type": "list", "item": output_schema(items) }),
        Schema::Record { fields } => {
            let fields: Map<String, Value> = fields
                .iter()
                .map(|(k, f)| {
                    (
                        k.clone(),
                        json!({ "schema": output_schema(&f.schema), "required": !f.optional }),
                    )
                })
                .collect();
            json!({ "type": "object", "fields": fields })
        }
        Schema::StdoutJson { schema } => output_schema(schema),
    }
}

fn template(t: &Template) -> Value {
    Value::Array(
        t.0.iter()
            .map(|part| match part {
                TemplatePart::Text(text) => json!({ "type": "literal", "value": text }),
                TemplatePart::Ref(Reference::Output { node, path }) => {
                    json!({ "type": "output", "reference": { "node": node, "path": path } })
                }
                TemplatePart::Ref(Reference::Status { node }) => {
                    json!({ "type": "status", "reference": { "node": node } })
                }
                TemplatePart::Ref(Reference::ExitCode { node }) => {
                    json!({ "type": "exit_code", "reference": { "node": node } })
                }
            })
            .collect(),
    )
}

/// Rho's condition vocabulary: `node_status` (`matches`), `command_exit` (`predicate`),
/// `output` (`path`, `predicate`), `all`, `any`, `not`.
fn condition(c: &Condition) -> Value {
    match c {
        Condition::Equals { reference, value } => compare(reference, "equals", value.to_json()),
        Condition::IsOneOf { reference, values } => compare(
            reference,
            "is_one_of",
            Value::Array(values.iter().map(Data::to_json).collect()),
        ),
        Condition::All { conditions } => {
            json!({ "type": "all", "conditions": conditions.iter().map(condition).collect::<Vec<_>>() })
        }
        Condition::Any { conditions } => {
            json!({ "type": "any", "conditions": conditions.iter().map(condition).collect::<Vec<_>>() })
        }
        Condition::Not { condition: inner } => {
            json!({ "type": "not", "condition": condition(inner) })
        }
    }
}

fn compare(reference: &Reference, op: &str, value: Value) -> Value {
    match reference {
        Reference::Status { node } => {
            let matches = match value {
                Value::Array(items) => items,
                single => vec![single],
            };
            json!({ "type": "node_status", "node": node, "matches": matches })
        }
        Reference::ExitCode { node } => {
            json!({ "type": "command_exit", "node": node, "predicate": { "type": op, "value": value } })
        }
        Reference::Output { node, path } => json!({
            "type": "output", "node": node, "path": path,
            "predicate": { "type": op, "value": value },
        }),
    }
}

/// Rho's node state: `{"state": "pending" | "ready" | "running" (with `attempt`) |
/// "terminal" (with `outcome`)}`.
fn node_state(state: NodeState, attempt: Option<u32>) -> Value {
    match state {
        NodeState::Pending => json!({ "state": "pending" }),
        NodeState::Ready => json!({ "state": "ready" }),
        NodeState::Running => json!({ "state": "running", "attempt": attempt.unwrap_or(1) }),
        terminal => json!({ "state": "terminal", "outcome": terminal.as_str() }),
    }
}

/// Rho's command exit (`{"type": "code", "code": 0}`, `signal`, `timeout`, `cancellation`,
/// `abnormal`).
pub fn command_exit(exit: &ExitRecord) -> Value {
    match exit {
        ExitRecord::Code { code } => json!({ "type": "code", "code": code }),
        ExitRecord::Signal { signal } => json!({ "type": "signal", "signal": signal }),
        ExitRecord::Timeout { .. } => json!({ "type": "timeout" }),
        ExitRecord::Cancelled => json!({ "type": "cancellation" }),
        ExitRecord::Abnormal { .. } => json!({ "type": "abnormal" }),
    }
}

fn artifact_ref(a: &crate::workflow::state::Artifact) -> Value {
    let observed = if a.truncated {
        json!({ "kind": "truncated", "observed_bytes_at_least": a.observed_bytes })
    } else {
        json!({ "kind": "complete", "observed_bytes": a.observed_bytes })
    };
    json!({
        "relative_path": a.path,
        "retained_bytes": a.retained_bytes,
        "observed": observed,
        "digest": a.sha256,
    })
}

fn completion(state: NodeState, attempt: Option<&Attempt>, output: Option<&Data>) -> Value {
    let artifacts = attempt.map_or_else(
        || json!({ "stdout": null, "stderr": null, "answer": null, "structured_output": null, "command_outcome": null }),
        |a| {
            json!({
                "stdout": a.stdout.as_ref().map(artifact_ref),
                "stderr": a.stderr.as_ref().map(artifact_ref),
                "answer": null,
                "structured_output": a.output.as_ref().map(artifact_ref),
                "command_outcome": null,
            })
        },
    );
    let structured = attempt
        .and_then(|a| a.output.as_ref())
        .zip(output)
        .map(|(art, value)| json!({ "artifact": artifact_ref(art), "value": value.to_json() }));
    json!({
        "attempt": attempt.map(|a| a.number),
        "outcome": state.as_str(),
        "cancellation_resume": (state == NodeState::Cancellation).then_some("ready"),
        "command_exit": attempt.and_then(|a| a.exit.as_ref()).map(command_exit),
        "structured_output": structured,
        "artifacts": artifacts,
    })
}

/// Rho's run state record (`schema_version`, `last_event_sequence`, `state` with
/// `revision`, `lifecycle`, `outcome`, `cancellation_requested`, `nodes`, `command_exits`,
/// `outputs`, `completions`).
pub fn run_state(state: &State, lifecycle: &str) -> Value {
    let root = state.root();
    let mut nodes = Map::new();
    let mut exits = Map::new();
    let mut completions = Map::new();
    for (id, task) in &root.tasks {
        let last = task.attempts.last();
        nodes.insert(id.clone(), node_state(task.state, last.map(|a| a.number)));
        if let Some(exit) = last.and_then(|a| a.exit.as_ref()) {
            exits.insert(id.clone(), command_exit(exit));
        } else if let Some(code) = root.command_exits.get(id) {
            exits.insert(id.clone(), json!({ "type": "code", "code": code }));
        }
        if task.state.is_terminal() {
            completions.insert(
                id.clone(),
                completion(task.state, last, root.outputs.get(id)),
            );
        }
    }
    let outputs: BTreeMap<&String, Value> =
        root.outputs.iter().map(|(k, v)| (k, v.to_json())).collect();
    json!({
        "schema_version": RUN_STATE_SCHEMA_VERSION,
        "last_event_sequence": state.last_event_sequence,
        "state": {
            "revision": state.revision,
            "lifecycle": lifecycle,
            "outcome": root.result.as_ref().map(|r| r.outcome.as_str()),
            "cancellation_requested": state.cancel.is_some(),
            "nodes": nodes,
            "command_exits": exits,
            "outputs": outputs,
            "completions": completions,
        }
    })
}

/// Rho's terminal outcome token of a node state (`None` while it is not terminal).
pub fn terminal_outcome(state: NodeState) -> Option<&'static str> {
    state.is_terminal().then(|| state.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_convert_to_unix_nanos() {
        assert_eq!(unix_nanos("1970-01-01T00:00:00.000Z"), 0);
        assert_eq!(
            unix_nanos("2000-02-29T00:00:00.005Z"),
            951_782_400_005_000_000
        );
        assert_eq!(
            unix_nanos("2024-12-31T23:59:59.999Z"),
            1_735_689_599_999_000_000
        );
        assert_eq!(unix_nanos("yesterday"), 0);
        for secs in [0_u64, 86_399, 1_000_000_000, 4_102_444_800] {
            let text = crate::workflow::store::format_timestamp(secs, 42);
            assert_eq!(
                unix_nanos(&text),
                secs * 1_000_000_000 + 42_000_000,
                "{text}"
            );
        }
    }

    #[test]
    fn stdout_json_schema_is_rhos_plain_schema() {
        let plain = Schema::Record {
            fields: BTreeMap::from([(
                "ok".to_owned(),
                rho_ipc::program::RecordField {
                    schema: Schema::Bool,
                    optional: true,
                },
            )]),
        };
        let wrapped = Schema::StdoutJson {
            schema: Box::new(plain.clone()),
        };
        assert_eq!(output_schema(&wrapped), output_schema(&plain));
        assert_eq!(
            output_schema(&plain),
            json!({"type": "object", "fields": {"ok": {"schema": {"type": "bool"}, "required": false}}})
        );
        assert_eq!(
            output_schema(&Schema::List {
                items: Box::new(Schema::String)
            }),
            json!({"type": "list", "item": {"type": "string"}})
        );
    }

    #[test]
    fn conditions_use_rhos_vocabulary() {
        let status = Condition::Equals {
            reference: Reference::Status { node: "a".into() },
            value: Data::String("success".into()),
        };
        assert_eq!(
            condition(&status),
            json!({"type": "node_status", "node": "a", "matches": ["success"]})
        );
        let exit = Condition::IsOneOf {
            reference: Reference::ExitCode { node: "a".into() },
            values: vec![Data::Int(0), Data::Int(2)],
        };
        assert_eq!(
            condition(&exit),
            json!({"type": "command_exit", "node": "a", "predicate": {"type": "is_one_of", "value": [0, 2]}})
        );
        let not = Condition::Not {
            condition: Box::new(Condition::All { conditions: vec![] }),
        };
        assert_eq!(
            condition(&not),
            json!({"type": "not", "condition": {"type": "all", "conditions": []}})
        );
    }

    #[test]
    fn node_states_use_rhos_tags() {
        assert_eq!(
            node_state(NodeState::Running, Some(2)),
            json!({"state": "running", "attempt": 2})
        );
        assert_eq!(
            node_state(NodeState::Skipped, None),
            json!({"state": "terminal", "outcome": "skipped"})
        );
        assert_eq!(terminal_outcome(NodeState::Ready), None);
        assert_eq!(terminal_outcome(NodeState::Denial), Some("denial"));
    }
}
