//! The Rho-shaped `run` member of `status --output json` as borrowed, typed documents.
//!
//! `status` on a 1,000-node run spent most of its time building the `run` member as generic
//! JSON trees (one map allocation per key of every node) and tearing them down again. These
//! types serialize the same bytes straight from the program and the state.
//!
//! Invariant: every struct here prints exactly what its generic counterpart in the parent
//! module prints. The generic maps sort their keys, so every struct's fields are declared in
//! byte order of their names and every keyed collection is printed in byte order of its keys
//! (the state's maps are already in that order and are printed as they are iterated, the
//! program's nodes are sorted once); small members that are rare or already generic
//! (conditions, templates, schemas, agent set-ups, data values) reuse the generic builders.
//! `tests::*_prints_as_the_generic_shape` hold the two equal.

use std::collections::BTreeMap;
use std::sync::Arc;

use rho_ipc::program::{
    Access, Execution, FileIdentity, FileLocation, FrozenExecutable, FrozenProgram, Node,
};
use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::workflow::state::{
    Artifact, Attempt, ExitRecord, Lifecycle, NodeState, ScopeState, State,
};

/// Rho's `run`: `graph` (absent for a program only readable as generic JSON), `manifest`,
/// `state`.
#[derive(Serialize)]
pub struct RunMember<'a> {
    graph: Option<FrozenWorkflow<'a>>,
    manifest: Value,
    state: Option<RunState<'a>>,
}

/// The `run` member of a run's status (see `super::run_manifest`, `super::frozen_workflow`
/// without the program, and `super::run_state`).
pub fn run_member<'a>(
    manifest: &'a crate::workflow::store::runs::RunManifest,
    program: Option<&'a FrozenProgram>,
    state: Option<&'a State>,
    lifecycle: Option<Lifecycle>,
) -> RunMember<'a> {
    RunMember {
        graph: program
            .map(|p| frozen_workflow(p, &manifest.graph_digest, &manifest.program_digest, None)),
        manifest: super::run_manifest(manifest),
        state: state.map(|s| run_state(s, lifecycle.unwrap_or(s.lifecycle).as_str())),
    }
}

#[derive(Serialize)]
pub struct FrozenWorkflow<'a> {
    graph: Graph<'a>,
    graph_digest: &'a str,
    inputs: BTreeMap<&'a str, Value>,
    planner: Planner<'a>,
    program_digest: &'a str,
    resolved_nodes: ResolvedNodes<'a>,
    runtime_limits: RuntimeLimits,
    scheduler: Scheduler,
    schema_version: u32,
    sources: Sources<'a>,
}

#[derive(Serialize)]
struct Graph<'a> {
    name: &'a str,
    nodes: GraphNodes<'a>,
}

/// A program's nodes in byte order of their ids, as a map keyed by id holds them: of nodes
/// sharing an id (a program never has two) the last one stays, as inserting each replaced
/// the one before.
fn by_id(nodes: &[Node]) -> Arc<[&Node]> {
    let mut sorted: Vec<&Node> = nodes.iter().collect();
    // Stable: nodes with equal ids stay in program order, so the last one is kept below.
    sorted.sort_by(|a, b| a.id.cmp(&b.id));
    sorted.dedup_by(|later, kept| {
        let same = later.id == kept.id;
        if same {
            std::mem::swap(later, kept);
        }
        same
    });
    sorted.into()
}

/// `graph.nodes`: each node's Rho shape, built as it is printed.
struct GraphNodes<'a>(Arc<[&'a Node]>);

impl Serialize for GraphNodes<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|n| (n.id.as_str(), graph_node(n))))
    }
}

/// `resolved_nodes`: each node's resolution, built as it is printed.
struct ResolvedNodes<'a> {
    program: &'a FrozenProgram,
    nodes: Arc<[&'a Node]>,
}

impl Serialize for ResolvedNodes<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(
            self.nodes
                .iter()
                .map(|n| (n.id.as_str(), resolved_node(self.program, n))),
        )
    }
}

#[derive(Serialize)]
struct Planner<'a> {
    format_version: u32,
    name: &'a str,
    starlark_version: &'static str,
    version: &'a str,
}

#[derive(Serialize)]
#[allow(clippy::struct_field_names)] // Rho's key names
struct RuntimeLimits {
    argv_expansion_bytes: u64,
    environment_expansion_bytes: u64,
    node_timeout_seconds: u64,
    prompt_expansion_bytes: u64,
    rendered_template_bytes: u64,
    retained_output_per_stream_bytes: u64,
    retained_output_total_bytes: u64,
}

#[derive(Serialize)]
#[allow(clippy::struct_field_names)] // Rho's key names
struct Scheduler {
    max_parallel_agents: u32,
    max_parallel_commands: u32,
    max_parallel_nodes: u32,
}

#[derive(Serialize)]
struct Sources<'a> {
    entry_label: String,
    modules: BTreeMap<String, Module<'a>>,
}

#[derive(Serialize)]
struct Module<'a> {
    bytes: u64,
    digest: &'a str,
}

/// The typed form of `super::frozen_workflow(.., with_program = false)`.
pub fn frozen_workflow<'a>(
    program: &'a FrozenProgram,
    graph_digest: &'a str,
    program_digest: &'a str,
    entry: Option<&str>,
) -> FrozenWorkflow<'a> {
    let entry_label = entry
        .or_else(|| program.sources.first().map(|s| s.label.as_str()))
        .map(super::source_label)
        .unwrap_or_default();
    let b = &program.budgets;
    let nodes = by_id(&program.root.nodes);
    FrozenWorkflow {
        graph: Graph {
            name: &program.name,
            nodes: GraphNodes(Arc::clone(&nodes)),
        },
        graph_digest,
        inputs: program
            .root
            .bound_inputs
            .iter()
            .map(|(k, v)| (k.as_str(), v.to_json()))
            .collect(),
        planner: Planner {
            format_version: program.format_version,
            name: &program.planner.name,
            starlark_version: "0.14",
            version: &program.planner.version,
        },
        program_digest,
        resolved_nodes: ResolvedNodes { program, nodes },
        runtime_limits: RuntimeLimits {
            argv_expansion_bytes: b.expanded_argv_bytes,
            environment_expansion_bytes: b.rendered_template_bytes,
            node_timeout_seconds: b.node_timeout_seconds,
            prompt_expansion_bytes: b.expanded_prompt_bytes,
            rendered_template_bytes: b.rendered_template_bytes,
            retained_output_per_stream_bytes: b.retained_output_per_stream_bytes,
            retained_output_total_bytes: b.retained_output_total_bytes,
        },
        scheduler: Scheduler {
            max_parallel_agents: program.scheduler.max_parallel_agents,
            max_parallel_commands: program.scheduler.max_parallel_commands,
            max_parallel_nodes: program.scheduler.max_parallel_nodes,
        },
        schema_version: program.format_version,
        sources: Sources {
            entry_label,
            modules: program
                .sources
                .iter()
                .map(|s| {
                    (
                        super::source_label(&s.label),
                        Module {
                            bytes: s.size,
                            digest: &s.digest,
                        },
                    )
                })
                .collect(),
        },
    }
}

#[derive(Serialize)]
struct GraphNode<'a> {
    access: Access,
    allow_failure: bool,
    condition: Option<Value>,
    display_name: &'a str,
    execution: GraphExecution<'a>,
    id: &'a str,
    max_output_bytes: u64,
    needs: &'a [String],
    node_kind: &'static str,
    timeout_seconds: u64,
}

#[derive(Serialize)]
#[serde(untagged)]
enum GraphExecution<'a> {
    Agent {
        agent: &'a str,
        kind: &'static str,
        output: Option<Value>,
        prompt: Value,
    },
    Command {
        arguments: Vec<Value>,
        cwd: &'a str,
        executable: &'a str,
        invocation: &'static str,
        kind: &'static str,
        output: Option<Value>,
    },
    Shell {
        arguments: &'a [String],
        command: &'a str,
        cwd: &'a str,
        executable: &'a str,
        invocation: &'static str,
        kind: &'static str,
        output: Option<Value>,
    },
}

fn graph_node(n: &Node) -> GraphNode<'_> {
    let output = n.output.as_ref().map(super::output_schema);
    let execution = match &n.execution {
        Execution::Agent { agent, prompt } => GraphExecution::Agent {
            agent,
            kind: "agent",
            output,
            prompt: super::template(prompt),
        },
        Execution::Command {
            argv0, args, cwd, ..
        } => GraphExecution::Command {
            arguments: args.iter().map(super::template).collect(),
            cwd: &cwd.path,
            executable: argv0,
            invocation: "direct",
            kind: "command",
            output,
        },
        Execution::Shell {
            executable,
            arguments,
            command,
            cwd,
            ..
        } => GraphExecution::Shell {
            arguments,
            command,
            cwd: &cwd.path,
            executable,
            invocation: "shell",
            kind: "command",
            output,
        },
    };
    GraphNode {
        access: n.access,
        allow_failure: n.allow_failure,
        condition: n.when.as_ref().map(super::condition),
        display_name: &n.id,
        execution,
        id: &n.id,
        max_output_bytes: n.max_output_bytes,
        needs: &n.needs,
        node_kind: n.kind().as_str(),
        timeout_seconds: n.timeout_seconds,
    }
}

#[derive(Serialize)]
#[serde(untagged)]
#[allow(clippy::large_enum_variant)] // commands are the usual node; boxing would allocate per node
enum Resolved<'a> {
    Command(ResolvedCommand<'a>),
    /// An agent node's resolution (rare next to commands; generic).
    Generic(Value),
}

#[derive(Serialize)]
struct ResolvedCommand<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    value: CommandResolution<'a>,
}

#[derive(Serialize)]
struct CommandResolution<'a> {
    cwd: &'a str,
    cwd_identity: Identity<'a>,
    environment_policy: &'a str,
    exact_path: bool,
    executable: &'a str,
    executable_identity: ExecutableIdentity<'a>,
}

#[derive(Serialize)]
struct Identity<'a> {
    byte_len: u64,
    canonical_path: &'a str,
    content_digest: Option<&'a str>,
    kind: &'static str,
    platform_id: Option<PlatformId>,
}

/// Rho's `platform_id` of a file, `<device>:<inode>`, printed without building the string.
struct PlatformId {
    device: u64,
    inode: u64,
}

impl Serialize for PlatformId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&format_args!("{}:{}", self.device, self.inode))
    }
}

#[derive(Serialize)]
struct ExecutableIdentity<'a> {
    file: Identity<'a>,
    interpreter: Option<Identity<'a>>,
    interpreter_arguments: &'a [String],
}

fn location_path(file: &FileIdentity) -> &str {
    match &file.location {
        FileLocation::Workspace { path } | FileLocation::Absolute { path, .. } => path,
    }
}

fn file_identity(file: &FileIdentity) -> Identity<'_> {
    Identity {
        byte_len: file.size,
        canonical_path: location_path(file),
        content_digest: Some(&file.sha256),
        kind: "file",
        platform_id: match &file.location {
            FileLocation::Absolute { device, inode, .. } => Some(PlatformId {
                device: *device,
                inode: *inode,
            }),
            FileLocation::Workspace { .. } => None,
        },
    }
}

fn resolved_node<'a>(program: &'a FrozenProgram, n: &'a Node) -> Resolved<'a> {
    let command = |exe: &'a FrozenExecutable, written: &str, cwd: &'a str| {
        Resolved::Command(ResolvedCommand {
            kind: "command",
            value: CommandResolution {
                cwd,
                cwd_identity: Identity {
                    byte_len: 0,
                    canonical_path: cwd,
                    content_digest: None,
                    kind: "directory",
                    platform_id: None,
                },
                environment_policy: &program.environment.name,
                exact_path: written.contains('/'),
                executable: location_path(&exe.file),
                executable_identity: ExecutableIdentity {
                    file: file_identity(&exe.file),
                    interpreter: exe.interpreter.as_ref().map(|i| file_identity(&i.file)),
                    interpreter_arguments: exe
                        .interpreter
                        .as_ref()
                        .map_or(&[][..], |i| i.args.as_slice()),
                },
            },
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
        Execution::Agent { .. } => Resolved::Generic(super::resolved_node(program, n)),
    }
}

#[derive(Serialize)]
pub struct RunState<'a> {
    last_event_sequence: u64,
    schema_version: u32,
    state: RunStateBody<'a>,
}

#[derive(Serialize)]
struct RunStateBody<'a> {
    cancellation_requested: bool,
    command_exits: CommandExits<'a>,
    completions: Completions<'a>,
    lifecycle: &'a str,
    nodes: NodeStates<'a>,
    outcome: Option<&'static str>,
    outputs: Outputs<'a>,
    revision: u64,
}

// The scope's maps are keyed by node id in byte order already: each member below prints
// one entry per task as it iterates them, building nothing.

/// `state.nodes`: every task's Rho node state.
struct NodeStates<'a>(&'a ScopeState);

impl Serialize for NodeStates<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.tasks.iter().map(|(id, task)| {
            (
                id,
                node_state(task.state, task.attempts.last().map(|a| a.number)),
            )
        }))
    }
}

/// `state.command_exits`: how the last attempt's process ended, else the exit code the
/// scope recorded; tasks with neither are left out.
struct CommandExits<'a>(&'a ScopeState);

impl Serialize for CommandExits<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let root = self.0;
        serializer.collect_map(root.tasks.iter().filter_map(|(id, task)| {
            match task.attempts.last().and_then(|a| a.exit.as_ref()) {
                Some(exit) => Some((id, CommandExit::of(exit))),
                None => root.command_exits.get(id).map(|code| {
                    (
                        id,
                        CommandExit::Code {
                            code: *code,
                            kind: "code",
                        },
                    )
                }),
            }
        }))
    }
}

/// `state.completions`: the terminal tasks' completions.
struct Completions<'a>(&'a ScopeState);

impl Serialize for Completions<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let root = self.0;
        serializer.collect_map(
            root.tasks
                .iter()
                .filter(|(_, task)| task.state.is_terminal())
                .map(|(id, task)| {
                    (
                        id,
                        completion(task.state, task.attempts.last(), root.outputs.get(id)),
                    )
                }),
        )
    }
}

/// `state.outputs`: the validated outputs as JSON.
struct Outputs<'a>(&'a ScopeState);

impl Serialize for Outputs<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(
            self.0
                .outputs
                .iter()
                .map(|(id, value)| (id, value.to_json())),
        )
    }
}

/// Rho's command exit (`super::command_exit`): `{"code": 0, "type": "code"}`,
/// `{"signal": 9, "type": "signal"}`, or just the `type` (`timeout`, `cancellation`,
/// `abnormal`).
#[derive(Serialize)]
#[serde(untagged)]
enum CommandExit {
    Code {
        code: i64,
        #[serde(rename = "type")]
        kind: &'static str,
    },
    Signal {
        signal: i32,
        #[serde(rename = "type")]
        kind: &'static str,
    },
    Other {
        #[serde(rename = "type")]
        kind: &'static str,
    },
}

impl CommandExit {
    fn of(exit: &ExitRecord) -> Self {
        match exit {
            ExitRecord::Code { code } => CommandExit::Code {
                code: i64::from(*code),
                kind: "code",
            },
            ExitRecord::Signal { signal } => CommandExit::Signal {
                signal: *signal,
                kind: "signal",
            },
            ExitRecord::Timeout { .. } => CommandExit::Other { kind: "timeout" },
            ExitRecord::Cancelled => CommandExit::Other {
                kind: "cancellation",
            },
            ExitRecord::Abnormal { .. } => CommandExit::Other { kind: "abnormal" },
        }
    }
}

/// Rho's node state (`super::node_state`).
#[derive(Serialize)]
#[serde(untagged)]
enum NodeStateDoc {
    Plain {
        state: &'static str,
    },
    Running {
        attempt: u32,
        state: &'static str,
    },
    Terminal {
        outcome: &'static str,
        state: &'static str,
    },
}

fn node_state(state: NodeState, attempt: Option<u32>) -> NodeStateDoc {
    match state {
        NodeState::Pending => NodeStateDoc::Plain { state: "pending" },
        NodeState::Ready => NodeStateDoc::Plain { state: "ready" },
        NodeState::Running => NodeStateDoc::Running {
            attempt: attempt.unwrap_or(1),
            state: "running",
        },
        terminal => NodeStateDoc::Terminal {
            outcome: terminal.as_str(),
            state: "terminal",
        },
    }
}

#[derive(Serialize)]
struct Completion<'a> {
    artifacts: Artifacts<'a>,
    attempt: Option<u32>,
    cancellation_resume: Option<&'static str>,
    command_exit: Option<CommandExit>,
    outcome: &'static str,
    structured_output: Option<StructuredOutput<'a>>,
}

#[derive(Serialize)]
struct Artifacts<'a> {
    answer: Option<()>,
    command_outcome: Option<()>,
    stderr: Option<ArtifactRef<'a>>,
    stdout: Option<ArtifactRef<'a>>,
    structured_output: Option<ArtifactRef<'a>>,
}

#[derive(Serialize)]
struct StructuredOutput<'a> {
    artifact: ArtifactRef<'a>,
    value: Value,
}

#[derive(Serialize)]
struct ArtifactRef<'a> {
    digest: &'a str,
    observed: Observed,
    relative_path: &'a str,
    retained_bytes: u64,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Observed {
    Complete {
        kind: &'static str,
        observed_bytes: u64,
    },
    Truncated {
        kind: &'static str,
        observed_bytes_at_least: u64,
    },
}

fn artifact_ref(a: &Artifact) -> ArtifactRef<'_> {
    ArtifactRef {
        digest: &a.sha256,
        observed: if a.truncated {
            Observed::Truncated {
                kind: "truncated",
                observed_bytes_at_least: a.observed_bytes,
            }
        } else {
            Observed::Complete {
                kind: "complete",
                observed_bytes: a.observed_bytes,
            }
        },
        relative_path: &a.path,
        retained_bytes: a.retained_bytes,
    }
}

fn completion<'a>(
    state: NodeState,
    attempt: Option<&'a Attempt>,
    output: Option<&'a rho_ipc::data::Data>,
) -> Completion<'a> {
    let artifacts = Artifacts {
        answer: None,
        command_outcome: None,
        stderr: attempt.and_then(|a| a.stderr.as_ref()).map(artifact_ref),
        stdout: attempt.and_then(|a| a.stdout.as_ref()).map(artifact_ref),
        structured_output: attempt.and_then(|a| a.output.as_ref()).map(artifact_ref),
    };
    Completion {
        artifacts,
        attempt: attempt.map(|a| a.number),
        cancellation_resume: (state == NodeState::Cancellation).then_some("ready"),
        command_exit: attempt.and_then(|a| a.exit.as_ref()).map(CommandExit::of),
        outcome: state.as_str(),
        structured_output: attempt.and_then(|a| a.output.as_ref()).zip(output).map(
            |(art, value)| StructuredOutput {
                artifact: artifact_ref(art),
                value: value.to_json(),
            },
        ),
    }
}

/// The typed form of `super::run_state`.
pub fn run_state<'a>(state: &'a State, lifecycle: &'a str) -> RunState<'a> {
    let root = state.root();
    RunState {
        last_event_sequence: state.last_event_sequence,
        schema_version: super::RUN_STATE_SCHEMA_VERSION,
        state: RunStateBody {
            cancellation_requested: state.cancel.is_some(),
            command_exits: CommandExits(root),
            completions: Completions(root),
            lifecycle,
            nodes: NodeStates(root),
            outcome: root.result.as_ref().map(|r| r.outcome.as_str()),
            outputs: Outputs(root),
            revision: state.revision,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflow::scheduler::tests::{agent_node, command_node, program};
    use crate::workflow::state::{
        AttemptPhase, CancelRecord, ExitRecord, Outcome, ScopeResult, ScopeState, Task,
    };
    use rho_ipc::data::Data;
    use rho_ipc::program::{
        Condition, FrozenDirectory, FrozenInterpreter, RecordField, Reference, SchedulerSettings,
        Schema, SourceEntry, Template, TemplatePart,
    };

    /// A program with every kind of node the shapes distinguish: direct commands (absolute
    /// and workspace executables, with and without an interpreter, templated arguments,
    /// conditions, output schemas), a shell node and an agent node.
    fn varied_program() -> FrozenProgram {
        let mut script = command_node("b_script", &["a_plain"]);
        if let Execution::Command {
            program, args, cwd, ..
        } = &mut script.execution
        {
            program.file.location = FileLocation::Workspace {
                path: "tools/run.sh".into(),
            };
            program.interpreter = Some(FrozenInterpreter {
                file: program.file.clone(),
                shebang: "/usr/bin/env".into(),
                args: vec!["-e".into(), "\"q\"".into()],
            });
            *args = vec![
                Template::text("--x"),
                Template(vec![
                    TemplatePart::Text("v=".into()),
                    TemplatePart::Ref(Reference::Output {
                        node: "a_plain".into(),
                        path: vec!["k".into()],
                    }),
                    TemplatePart::Ref(Reference::Status {
                        node: "a_plain".into(),
                    }),
                    TemplatePart::Ref(Reference::ExitCode {
                        node: "a_plain".into(),
                    }),
                ]),
            ];
            *cwd = FrozenDirectory { path: "sub".into() };
        }
        script.when = Some(Condition::Any {
            conditions: vec![
                Condition::Equals {
                    reference: Reference::Status {
                        node: "a_plain".into(),
                    },
                    value: Data::String("success".into()),
                },
                Condition::Not {
                    condition: Box::new(Condition::IsOneOf {
                        reference: Reference::ExitCode {
                            node: "a_plain".into(),
                        },
                        values: vec![Data::Int(0), Data::Int(3)],
                    }),
                },
            ],
        });
        script.output = Some(Schema::StdoutJson {
            schema: Box::new(Schema::Record {
                fields: BTreeMap::from([(
                    "k".to_owned(),
                    RecordField {
                        schema: Schema::List {
                            items: Box::new(Schema::String),
                        },
                        optional: false,
                    },
                )]),
            }),
        });
        script.allow_failure = true;
        script.access = Access::ReadOnly;
        let mut shell = command_node("c_shell", &[]);
        shell.execution = Execution::Shell {
            program: match &shell.execution {
                Execution::Command { program, .. } => program.clone(),
                _ => unreachable!(),
            },
            executable: "/bin/sh".into(),
            arguments: vec!["-c".into()],
            command: "echo \"hi\"\n\tdone".into(),
            cwd: FrozenDirectory { path: ".".into() },
        };
        let mut p = program(
            vec![
                command_node("a_plain", &[]),
                script,
                shell,
                agent_node("d_agent", &["c_shell"], Access::ReadOnly),
                command_node("Z-upper", &[]),
            ],
            SchedulerSettings {
                max_parallel_nodes: 4,
                max_parallel_agents: 1,
                max_parallel_commands: 3,
            },
        );
        p.root
            .bound_inputs
            .insert("who".into(), Data::String("wörld".into()));
        p.root.bound_inputs.insert("n".into(), Data::Int(-2));
        p.sources = vec![
            SourceEntry {
                label: "//wf/workflow.star".into(),
                size: 120,
                digest: "sha256:aa".into(),
            },
            SourceEntry {
                label: "//wf/lib.star".into(),
                size: 7,
                digest: "sha256:bb".into(),
            },
        ];
        p
    }

    fn artifact(path: &str, truncated: bool) -> Artifact {
        Artifact {
            path: path.into(),
            retained_bytes: 10,
            observed_bytes: 99,
            truncated,
            sha256: "sha256:cc".into(),
        }
    }

    fn attempt(number: u32, exit: Option<ExitRecord>, with_output: bool) -> Attempt {
        Attempt {
            number,
            phase: AttemptPhase::Finished,
            process: None,
            cgroup: None,
            exit,
            state: None,
            reason: None,
            stdout: Some(artifact("nodes/x/attempts/1/stdout", false)),
            stderr: Some(artifact("nodes/x/attempts/1/stderr", true)),
            output: with_output.then(|| artifact("nodes/x/attempts/1/output.json", false)),
            denial: None,
            intended_at_ms: 1,
            finished_at_ms: Some(2),
        }
    }

    fn varied_state() -> State {
        let mut scope = ScopeState::default();
        let tasks = [
            (
                "a_plain",
                NodeState::Success,
                vec![attempt(1, Some(ExitRecord::Code { code: 0 }), true)],
            ),
            (
                "b_script",
                NodeState::Failure,
                vec![
                    attempt(1, Some(ExitRecord::Signal { signal: 9 }), false),
                    attempt(2, Some(ExitRecord::Timeout { seconds: 5 }), false),
                ],
            ),
            (
                "c_shell",
                NodeState::Cancellation,
                vec![attempt(1, Some(ExitRecord::Cancelled), false)],
            ),
            ("d_agent", NodeState::Running, vec![attempt(3, None, false)]),
            ("e_ready", NodeState::Ready, vec![]),
            ("f_pending", NodeState::Pending, vec![]),
            ("g_skipped", NodeState::Skipped, vec![]),
            ("h_blocked", NodeState::Blocked, vec![]),
            ("i_denied", NodeState::Denial, vec![attempt(1, None, false)]),
            (
                "j_abnormal",
                NodeState::Failure,
                vec![attempt(
                    1,
                    Some(ExitRecord::Abnormal {
                        reason: "lost".into(),
                    }),
                    false,
                )],
            ),
            ("Z-upper", NodeState::Running, vec![]),
        ];
        for (id, state, attempts) in tasks {
            scope.tasks.insert(
                id.to_owned(),
                Task {
                    state,
                    reason: None,
                    attempts,
                },
            );
        }
        scope.command_exits.insert("g_skipped".into(), 4);
        scope.command_exits.insert("a_plain".into(), 0);
        scope.outputs.insert(
            "a_plain".into(),
            Data::Map(BTreeMap::from([(
                "k".to_owned(),
                Data::List(vec![Data::String("x".into()), Data::Null, Data::Bool(true)]),
            )])),
        );
        scope.result = Some(ScopeResult {
            outcome: Outcome::Failure,
            exports: BTreeMap::new(),
        });
        let mut state = State::empty();
        state.revision = 17;
        state.last_event_sequence = 41;
        state.scopes.insert("s0".into(), scope);
        state
    }

    fn pretty(value: &impl Serialize) -> String {
        serde_json::to_string_pretty(value).unwrap()
    }

    #[test]
    fn frozen_workflow_prints_as_the_generic_shape() {
        let p = varied_program();
        for entry in [None, Some("//wf/workflow.star")] {
            let generic = super::super::frozen_workflow(&p, "sha256:g", "sha256:p", entry, false);
            let typed = frozen_workflow(&p, "sha256:g", "sha256:p", entry);
            assert_eq!(pretty(&typed), pretty(&generic));
            assert_eq!(
                serde_json::to_string(&typed).unwrap(),
                serde_json::to_string(&generic).unwrap()
            );
        }
        // No sources at all: an empty entry label and module map.
        let mut bare = varied_program();
        bare.sources.clear();
        assert_eq!(
            pretty(&frozen_workflow(&bare, "g", "p", None)),
            pretty(&super::super::frozen_workflow(&bare, "g", "p", None, false))
        );
    }

    #[test]
    fn nodes_sharing_an_id_print_as_the_generic_map_keeps_them() {
        let mut p = varied_program();
        let mut again = command_node("a_plain", &["c_shell"]);
        again.allow_failure = true;
        p.root.nodes.push(again);
        p.root.nodes.insert(0, command_node("c_shell", &[]));
        let typed = frozen_workflow(&p, "g", "p", None);
        let generic = super::super::frozen_workflow(&p, "g", "p", None, false);
        assert_eq!(pretty(&typed), pretty(&generic));
        assert_eq!(generic["graph"]["nodes"]["a_plain"]["allow_failure"], true);
    }

    #[test]
    fn run_state_prints_as_the_generic_shape() {
        let mut state = varied_state();
        for lifecycle in ["completed", "needs_recovery"] {
            assert_eq!(
                pretty(&run_state(&state, lifecycle)),
                pretty(&super::super::run_state(&state, lifecycle))
            );
        }
        state.cancel = Some(CancelRecord {
            request_id: "r".into(),
            completed: false,
        });
        state.scopes.clear();
        assert_eq!(
            pretty(&run_state(&state, "running")),
            pretty(&super::super::run_state(&state, "running"))
        );
    }

    /// A finished 1,000-node run like the `run` bench's: the whole `run` member, byte for
    /// byte, against the generic builders it replaced.
    #[test]
    fn a_thousand_node_run_member_prints_as_the_generic_shape() {
        let nodes: Vec<Node> = (0..1000)
            .map(|i| command_node(&format!("n{i:04}"), &[]))
            .collect();
        let p = program(
            nodes,
            SchedulerSettings {
                max_parallel_nodes: 8,
                max_parallel_agents: 1,
                max_parallel_commands: 8,
            },
        );
        let mut scope = ScopeState::default();
        for (i, node) in p.root.nodes.iter().enumerate() {
            let code = i32::try_from(i % 3).unwrap();
            scope.tasks.insert(
                node.id.clone(),
                Task {
                    state: if code == 0 {
                        NodeState::Success
                    } else {
                        NodeState::Failure
                    },
                    reason: None,
                    attempts: vec![attempt(1, Some(ExitRecord::Code { code }), false)],
                },
            );
            scope.command_exits.insert(node.id.clone(), i64::from(code));
        }
        let mut state = State::empty();
        state.scopes.insert("s0".into(), scope);
        let manifest: crate::workflow::store::runs::RunManifest =
            serde_json::from_value(serde_json::json!({
                "format": 2,
                "run_id": "r1",
                "plan_id": "p1",
                "name": "bench",
                "created_at": "2026-12-01T03:00:00.000Z",
                "graph_digest": "sha256:g",
                "program_digest": "sha256:p",
                "node_count": 1000,
                "workspace": {"path": "/w", "device": 1, "inode": 2},
                "confirmation": {"method": "--yes", "at": "2026-12-01T03:00:00.000Z", "digest": "sha256:p"},
            }))
            .unwrap();
        let generic = serde_json::json!({
            "manifest": super::super::run_manifest(&manifest),
            "graph": super::super::frozen_workflow(&p, "sha256:g", "sha256:p", None, false),
            "state": super::super::run_state(&state, "completed"),
        });
        let typed = run_member(
            &manifest,
            Some(&p),
            Some(&state),
            Some(Lifecycle::Completed),
        );
        let text = pretty(&typed);
        assert!(text.len() > 1_000_000, "{} bytes", text.len());
        assert_eq!(text, pretty(&generic));
        // Without a readable program or a state, both are `null`.
        assert_eq!(
            pretty(&run_member(&manifest, None, None, None)),
            pretty(&serde_json::json!({
                "manifest": super::super::run_manifest(&manifest),
                "graph": null,
                "state": null,
            }))
        );
    }
}
