//! Committed test vectors for the frozen program's canonical encoding and its digests.
//!
//! Each vector is a realistic `FrozenProgram` built in code below, from a single command node
//! to a program that uses every node kind, input type, schema form, condition, reference kind
//! and file location. Its canonical bytes are committed as lowercase hex in
//! `tests/vectors/<name>.cbor.hex` (one line, newline-terminated), and its `program_digest` and
//! `graph_digest` are committed as constants in [`VECTORS`]. Any change to the program types,
//! the serde mapping, the canonical encoder or the digest domain tags changes those bytes or
//! digests and fails this suite: that is the point. The same sources, inputs and identities
//! must digest identically on every machine and every release that keeps the format version.
//!
//! Invariant: the committed files and constants change only on purpose. After an intended
//! format change, regenerate the hex files with
//!
//! ```text
//! RHO_UPDATE_VECTORS=1 cargo test -p rho-ipc --test vectors
//! ```
//!
//! which rewrites `tests/vectors/*.cbor.hex`; the digest test then fails once more and prints
//! the new constants to paste into [`VECTORS`]. Review the diff of both before committing, and
//! bump `PROGRAM_FORMAT_VERSION` when previously stored programs can no longer be read.

// Builders and checks sit outside `#[test]` functions, where clippy's test exemption ends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use rho_ipc::budget::Budgets;
use rho_ipc::canonical::{self, from_canonical_bytes};
use rho_ipc::data::Data;
use rho_ipc::digest::{
    self, encode_program, graph_digest, program_digest, program_digest_of_bytes, sha256_tagged,
};
use rho_ipc::program::{
    Access, AgentRuntime, AgentSetup, AgentSource, Condition, EnvironmentPolicy, Execution, Export,
    FileIdentity, FileLocation, FrozenDirectory, FrozenExecutable, FrozenInterpreter,
    FrozenProgram, InputDecl, InputType, Network, Node, NodeKind, PROGRAM_FORMAT_VERSION,
    PlannerIdentity, ROOT_SCOPE_ID, RecordField, Reference, RootScope, SchedulerSettings, Schema,
    SourceEntry, Template, TemplatePart, TrustRequirement,
};
use sha2::{Digest as _, Sha256};

/// One committed vector: its name (also the file stem) and its expected digests.
struct Vector {
    name: &'static str,
    build: fn(Order) -> FrozenProgram,
    program_digest: &'static str,
    graph_digest: &'static str,
}

/// The committed vectors, from trivial to complete.
const VECTORS: &[Vector] = &[
    Vector {
        name: "trivial",
        build: trivial,
        program_digest: "sha256:c3605cdb2ad222c68faf5bedf236922c8c5fff01a0b105ff30999bb3b97221fb",
        graph_digest: "sha256:11bb26d4c1380f2b146095731317891d96c4a528997d57a6f97fd2f23683c8cf",
    },
    Vector {
        name: "shell_pipeline",
        build: shell_pipeline,
        program_digest: "sha256:0ef135bb093f45bdc76f137fee862f704ccbfe6afa6cb4653e6a070d341560a3",
        graph_digest: "sha256:4072611578f68eeaba8c6575f9f46bdac3020378f28a1d6f2a52381c374e5154",
    },
    Vector {
        name: "agent_review",
        build: agent_review,
        program_digest: "sha256:71b2d5e202d73b8195f0fd68b476e5292184802167178881677e8b39fd36a042",
        graph_digest: "sha256:00cc224c64721567553879be95234de6e04b822ca2ada778c25fc8196b319b41",
    },
    Vector {
        name: "conditional_release",
        build: conditional_release,
        program_digest: "sha256:b8b2d779b9e61e8b3a09cd50d1abb6af04b48f595856ba1a3503f6ba11df28b7",
        graph_digest: "sha256:cad8c51f108f42d97ea92150b2e8db3af45b1922b923072a1637727b4bfaa871",
    },
    Vector {
        name: "boundaries",
        build: boundaries,
        program_digest: "sha256:4f4aa4402b07153182096396ad645e852ebea8944b49b688692a6fcd6894388c",
        graph_digest: "sha256:09d9b5bcfb0e19926785f82be46dbf0bf1e5d13a90417f80c8c79ba42289e794",
    },
    Vector {
        name: "complete",
        build: complete,
        program_digest: "sha256:7371429159559d2d754217404786b32f164cb0740d8943f8c9928fa248b87104",
        graph_digest: "sha256:4efdc70f30f6272619bd7c1851309d9662e716188d5eb7808adcb62e5838ba7e",
    },
];

/// The order in which builders insert into `BTreeMap` fields. The encoding must not depend
/// on it; [`map_insertion_order_does_not_change_the_bytes`] builds every vector both ways.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    AsWritten,
    Reversed,
}

/// Builds a map from entries, inserting them in `order`.
fn map<V>(order: Order, entries: Vec<(&str, V)>) -> BTreeMap<String, V> {
    let mut out = BTreeMap::new();
    let mut insert = |(k, v): (&str, V)| {
        assert!(out.insert(k.to_owned(), v).is_none(), "duplicate key {k}");
    };
    match order {
        Order::AsWritten => entries.into_iter().for_each(&mut insert),
        Order::Reversed => entries.into_iter().rev().for_each(&mut insert),
    }
    out
}

// ---------------------------------------------------------------------------------------
// Building blocks
// ---------------------------------------------------------------------------------------

/// A realistic content digest, derived from a seed so every vector is self-describing.
fn content_digest(seed: &str) -> String {
    sha256_tagged(seed.as_bytes())
}

fn absolute_file(path: &str, device: u64, inode: u64, size: u64) -> FileIdentity {
    FileIdentity {
        location: FileLocation::Absolute {
            path: path.to_owned(),
            device,
            inode,
        },
        size,
        sha256: content_digest(path),
    }
}

fn workspace_file(path: &str, size: u64) -> FileIdentity {
    FileIdentity {
        location: FileLocation::Workspace {
            path: path.to_owned(),
        },
        size,
        sha256: content_digest(path),
    }
}

fn binary(path: &str, inode: u64, size: u64) -> FrozenExecutable {
    FrozenExecutable {
        file: absolute_file(path, 2049, inode, size),
        interpreter: None,
    }
}

fn cwd(path: &str) -> FrozenDirectory {
    FrozenDirectory {
        path: path.to_owned(),
    }
}

fn text(s: &str) -> Template {
    Template::text(s)
}

fn output(node: &str, path: &[&str]) -> Reference {
    Reference::Output {
        node: node.to_owned(),
        path: path.iter().map(|p| (*p).to_owned()).collect(),
    }
}

fn status(node: &str) -> Reference {
    Reference::Status {
        node: node.to_owned(),
    }
}

fn exit_code(node: &str) -> Reference {
    Reference::ExitCode {
        node: node.to_owned(),
    }
}

fn s(v: &str) -> Data {
    Data::String(v.to_owned())
}

fn strings(values: &[&str]) -> Vec<Data> {
    values.iter().map(|v| s(v)).collect()
}

fn required(schema: Schema) -> RecordField {
    RecordField {
        schema,
        optional: false,
    }
}

fn optional(schema: Schema) -> RecordField {
    RecordField {
        schema,
        optional: true,
    }
}

fn record(order: Order, fields: Vec<(&str, RecordField)>) -> Schema {
    Schema::Record {
        fields: map(order, fields),
    }
}

fn list(items: Schema) -> Schema {
    Schema::List {
        items: Box::new(items),
    }
}

fn stdout_json(schema: Schema) -> Schema {
    Schema::StdoutJson {
        schema: Box::new(schema),
    }
}

/// The schema of a `status(...)` export: the terminal state vocabulary.
fn terminal_state() -> Schema {
    Schema::Enum {
        members: strings(&[
            "success",
            "failure",
            "denial",
            "cancellation",
            "skipped",
            "blocked",
        ]),
    }
}

fn command(program: FrozenExecutable, argv0: &str, args: Vec<Template>, dir: &str) -> Execution {
    Execution::Command {
        program,
        argv0: argv0.to_owned(),
        args,
        cwd: cwd(dir),
    }
}

fn bash(command: &str) -> Execution {
    Execution::Shell {
        program: binary("/usr/bin/bash", 1_310_722, 1_446_024),
        executable: "bash".to_owned(),
        arguments: vec!["-c".to_owned()],
        command: command.to_owned(),
        cwd: cwd("."),
    }
}

/// A mutating node with the common explicit limits; callers adjust the rest.
fn node(id: &str, needs: &[&str], execution: Execution) -> Node {
    Node {
        id: id.to_owned(),
        needs: needs.iter().map(|n| (*n).to_owned()).collect(),
        when: None,
        allow_failure: false,
        access: Access::Mutating,
        network: Network::Allowed,
        timeout_seconds: 600,
        max_output_bytes: 65_536,
        output: None,
        execution,
    }
}

fn source(label: &str, size: u64) -> SourceEntry {
    SourceEntry {
        label: label.to_owned(),
        size,
        digest: content_digest(label),
    }
}

/// A program with defaults everywhere; vectors fill in what they exercise.
fn program(name: &str, nodes: Vec<Node>, sources: Vec<SourceEntry>) -> FrozenProgram {
    FrozenProgram {
        format_version: PROGRAM_FORMAT_VERSION,
        planner: PlannerIdentity {
            name: "rho-planner".to_owned(),
            version: "0.1.0".to_owned(),
        },
        name: name.to_owned(),
        root: RootScope {
            id: ROOT_SCOPE_ID.to_owned(),
            inputs: BTreeMap::new(),
            bound_inputs: BTreeMap::new(),
            exports: BTreeMap::new(),
            nodes,
        },
        agents: BTreeMap::new(),
        environment: EnvironmentPolicy {
            name: "inherit_except_credentials".to_owned(),
            exclude: ["*_API_KEY", "*_TOKEN", "ANTHROPIC_*", "OPENAI_*"]
                .iter()
                .map(|p| (*p).to_owned())
                .collect(),
            allow: vec![],
        },
        scheduler: SchedulerSettings::default(),
        budgets: Budgets::default(),
        sources,
        trust: TrustRequirement::default(),
    }
}

fn reviewer_agent() -> AgentSetup {
    AgentSetup {
        id: "reviewer".to_owned(),
        source: AgentSource::Builtin,
        fingerprint: content_digest("agent:reviewer"),
        runtime: AgentRuntime::Rho,
        prompt_policy: "extend".to_owned(),
        system_prompt: "You are rho, a careful engineer.\n\nReview changes for correctness; \
                        answer with one JSON value."
            .to_owned(),
        model_policy: "prefer".to_owned(),
        model: Some("claude-sonnet-4-5".to_owned()),
        provider: Some("anthropic".to_owned()),
        reasoning: Some("high".to_owned()),
        capabilities: ["glob", "grep", "list_dir", "read_file"]
            .iter()
            .map(|c| (*c).to_owned())
            .collect(),
        read_only: true,
        inherit_claude_config: false,
    }
}

// ---------------------------------------------------------------------------------------
// The vectors
// ---------------------------------------------------------------------------------------

/// One direct command, no inputs, no exports, defaults everywhere.
fn trivial(_order: Order) -> FrozenProgram {
    program(
        "hello",
        vec![node(
            "hello",
            &[],
            command(
                binary("/usr/bin/true", 131_077, 35_336),
                "true",
                vec![],
                ".",
            ),
        )],
        vec![source("//.rho/workflows/hello/workflow.star", 212)],
    )
}

/// Shell nodes in a chain; string, integer and bool inputs; a status export; a shell output
/// parsed as JSON; a failure that is allowed.
fn shell_pipeline(order: Order) -> FrozenProgram {
    let mut build = node("build", &["configure"], bash("set -euo pipefail; make -j2"));
    build.timeout_seconds = 1800;
    let configure = node("configure", &[], bash("./configure --prefix=/usr"));
    let mut package = node(
        "package",
        &["build"],
        bash("tar -czf dist.tgz build && sha256sum dist.tgz | jq -R '{sum: .}'"),
    );
    package.allow_failure = true;
    package.max_output_bytes = 4096;
    package.output = Some(stdout_json(record(
        order,
        vec![("sum", required(Schema::String))],
    )));

    let mut p = program(
        "build",
        vec![build, configure, package],
        vec![source("//.rho/workflows/build/workflow.star", 1_187)],
    );
    p.root.inputs = map(
        order,
        vec![
            (
                "target",
                InputDecl {
                    ty: InputType::String,
                    default: Some(s(".")),
                },
            ),
            (
                "jobs",
                InputDecl {
                    ty: InputType::Integer,
                    default: Some(Data::Int(2)),
                },
            ),
            (
                "release",
                InputDecl {
                    ty: InputType::Bool,
                    default: None,
                },
            ),
        ],
    );
    p.root.bound_inputs = map(
        order,
        vec![
            ("target", s(".")),
            ("jobs", Data::Int(2)),
            ("release", Data::Bool(true)),
        ],
    );
    p.root.exports = map(
        order,
        vec![(
            "build_state",
            Export {
                reference: status("build"),
                schema: terminal_state(),
            },
        )],
    );
    p
}

/// A command whose JSON output feeds an agent's templated prompt; a read-only rho agent with
/// a record output; an export through an output path.
fn agent_review(order: Order) -> FrozenProgram {
    let mut inspect = node(
        "inspect",
        &[],
        command(
            binary("/home/dev/.cargo/bin/cargo", 2_883_911, 38_920_456),
            "cargo",
            vec![
                text("metadata"),
                text("--format-version"),
                text("1"),
                text("--no-deps"),
            ],
            ".",
        ),
    );
    inspect.output = Some(stdout_json(record(
        order,
        vec![
            (
                "packages",
                required(list(record(
                    order,
                    vec![
                        ("name", required(Schema::String)),
                        ("version", required(Schema::String)),
                    ],
                ))),
            ),
            ("workspace_root", required(Schema::String)),
        ],
    )));

    let mut review = node(
        "review",
        &["inspect"],
        Execution::Agent {
            agent: "reviewer".to_owned(),
            prompt: Template(vec![
                TemplatePart::Text("Review the packages of this workspace:\n".to_owned()),
                TemplatePart::Ref(output("inspect", &["packages"])),
                TemplatePart::Text("\nAnswer with a verdict and a summary.".to_owned()),
            ]),
        },
    );
    review.access = Access::ReadOnly;
    review.timeout_seconds = 1800;
    review.max_output_bytes = 12_000;
    review.output = Some(record(
        order,
        vec![
            (
                "verdict",
                required(Schema::Enum {
                    members: strings(&["approve", "revise"]),
                }),
            ),
            ("summary", required(Schema::String)),
        ],
    ));

    let mut p = program(
        "review",
        vec![inspect, review],
        vec![source("//.rho/workflows/review/workflow.star", 903)],
    );
    p.root.inputs = map(
        order,
        vec![(
            "target",
            InputDecl {
                ty: InputType::String,
                default: Some(s("src")),
            },
        )],
    );
    p.root.bound_inputs = map(order, vec![("target", s("src"))]);
    p.root.exports = map(
        order,
        vec![(
            "verdict",
            Export {
                reference: output("review", &["verdict"]),
                schema: Schema::Enum {
                    members: strings(&["approve", "revise"]),
                },
            },
        )],
    );
    p.agents = map(order, vec![("reviewer", reviewer_agent())]);
    p
}

/// Conditions on exit codes and states, an enum input with a default, an exit-code export.
fn conditional_release(order: Order) -> FrozenProgram {
    let cargo = || binary("/home/dev/.cargo/bin/cargo", 2_883_911, 38_920_456);
    let mut test = node(
        "test",
        &[],
        command(
            cargo(),
            "cargo",
            vec![text("test"), text("--workspace")],
            ".",
        ),
    );
    test.timeout_seconds = 3600;
    let mut publish = node(
        "publish",
        &["test"],
        command(
            cargo(),
            "cargo",
            vec![text("publish"), text("--dry-run")],
            ".",
        ),
    );
    publish.when = Some(Condition::All {
        conditions: vec![
            Condition::Equals {
                reference: exit_code("test"),
                value: Data::Int(0),
            },
            Condition::IsOneOf {
                reference: status("test"),
                values: strings(&["success"]),
            },
        ],
    });
    let mut notify = node(
        "notify",
        &["publish"],
        bash("printf 'release did not publish\\n' >&2"),
    );
    notify.when = Some(Condition::Not {
        condition: Box::new(Condition::Equals {
            reference: status("publish"),
            value: s("success"),
        }),
    });
    notify.allow_failure = true;

    let mut p = program(
        "release",
        vec![notify, publish, test],
        vec![
            source("//.rho/workflows/common.star", 431),
            source("//.rho/workflows/release/workflow.star", 1_562),
        ],
    );
    p.root.inputs = map(
        order,
        vec![(
            "channel",
            InputDecl {
                ty: InputType::Enum {
                    members: strings(&["stable", "beta", "nightly"]),
                },
                default: Some(s("stable")),
            },
        )],
    );
    p.root.bound_inputs = map(order, vec![("channel", s("beta"))]);
    p.root.exports = map(
        order,
        vec![(
            "test_exit",
            Export {
                reference: exit_code("test"),
                schema: Schema::Integer,
            },
        )],
    );
    p
}

/// Values at the encoder's edges: integers at every CBOR head-size boundary (both signs),
/// empty and non-ASCII strings, an empty template, nested list and map data, 63-byte ids.
fn boundaries(order: Order) -> FrozenProgram {
    const LONG_ID: &str = "a123456789-123456789_123456789-123456789_123456789-123456789_12";
    let heads = [
        0_u64,
        23,
        24,
        255,
        256,
        65_535,
        65_536,
        4_294_967_295,
        4_294_967_296,
    ];
    let mut nodes = Vec::new();
    for (i, head) in heads.iter().enumerate() {
        let id = format!("edge-{i}");
        let mut n = node(
            &id,
            &[],
            command(
                FrozenExecutable {
                    file: absolute_file("/opt/tools/bin/probe", *head, u64::MAX - head, *head),
                    interpreter: None,
                },
                "/opt/tools/bin/probe",
                vec![Template(vec![TemplatePart::Text(String::new())]), text("")],
                ".",
            ),
        );
        n.timeout_seconds = (*head).max(1);
        n.max_output_bytes = (*head).max(1);
        nodes.push(n);
    }
    let mut last = node(
        LONG_ID,
        &["edge-0", "edge-8"],
        command(
            FrozenExecutable {
                file: absolute_file("/opt/tools/bin/probe", u64::MAX, 0, u64::MAX),
                interpreter: None,
            },
            "/opt/tools/bin/probe",
            vec![text("é✓🦀"), text("\u{0}\u{7f}\u{80}")],
            "sub dir/ünïcode",
        ),
    );
    last.timeout_seconds = u64::MAX;
    last.max_output_bytes = u64::MAX;
    last.when = Some(Condition::Any {
        conditions: vec![
            Condition::Equals {
                reference: exit_code("edge-8"),
                value: Data::Int(i64::MIN),
            },
            Condition::IsOneOf {
                reference: exit_code("edge-0"),
                values: vec![
                    Data::Int(-1),
                    Data::Int(-24),
                    Data::Int(-25),
                    Data::Int(-256),
                    Data::Int(-257),
                    Data::Int(-65_536),
                    Data::Int(-65_537),
                    Data::Int(-4_294_967_296),
                    Data::Int(-4_294_967_297),
                    Data::Int(i64::MAX),
                ],
            },
        ],
    });
    nodes.push(last);
    nodes.sort_by(|a, b| a.id.cmp(&b.id));

    let mut p = program(
        "boundaries",
        nodes,
        vec![
            source("//.rho/workflows/boundaries/workflow.star", 0),
            source("//.rho/workflows/boundaries/ünïcode.star", u64::MAX),
        ],
    );
    let members = vec![
        Data::Int(i64::MIN),
        Data::Int(-1),
        Data::Int(0),
        Data::Int(i64::MAX),
        s(""),
        s("é✓🦀"),
        Data::Bool(false),
    ];
    p.root.inputs = map(
        order,
        vec![
            (
                "edge",
                InputDecl {
                    ty: InputType::Enum { members },
                    default: Some(Data::Int(i64::MIN)),
                },
            ),
            (
                "payload",
                InputDecl {
                    ty: InputType::String,
                    default: None,
                },
            ),
        ],
    );
    p.root.bound_inputs = map(
        order,
        vec![("edge", Data::Int(i64::MAX)), ("payload", s(""))],
    );
    p.root.exports = map(
        order,
        vec![(
            "edge_exit",
            Export {
                reference: exit_code(LONG_ID),
                schema: Schema::Integer,
            },
        )],
    );
    let mut budgets = Budgets::default();
    for name in Budgets::NAMES {
        assert!(budgets.set(name, u64::MAX));
    }
    p.budgets = budgets;
    p.scheduler = SchedulerSettings {
        max_parallel_nodes: u32::MAX,
        max_parallel_agents: 1,
        max_parallel_commands: 0x1_0000,
    };
    p
}

/// Every node kind, input type, schema form, condition, reference kind and file location;
/// non-default scheduler and budgets; several sources; project agents requiring trust.
fn complete(order: Order) -> FrozenProgram {
    let findings = record(
        order,
        vec![
            ("files", required(list(Schema::String))),
            ("summary", required(Schema::String)),
            (
                "risk",
                required(Schema::Enum {
                    members: vec![
                        Data::Null,
                        s("low"),
                        s("high"),
                        Data::Int(3),
                        Data::Bool(true),
                    ],
                }),
            ),
            (
                "counts",
                required(record(
                    order,
                    vec![
                        ("added", required(Schema::Integer)),
                        ("removed", required(Schema::Integer)),
                    ],
                )),
            ),
            ("generated", required(Schema::Bool)),
            ("notes", optional(Schema::String)),
            ("previous", optional(Schema::Null)),
        ],
    );

    // An agent defined in the project, run through the claude CLI: needs trust.
    let mut fix = node(
        "fix",
        &["review", "tests"],
        Execution::Agent {
            agent: "fixer".to_owned(),
            prompt: Template(vec![
                TemplatePart::Text("Tests ended in state ".to_owned()),
                TemplatePart::Ref(status("tests")),
                TemplatePart::Text(" with exit ".to_owned()),
                TemplatePart::Ref(exit_code("tests")),
                TemplatePart::Text(". Reviewer notes: ".to_owned()),
                TemplatePart::Ref(output("review", &["notes"])),
                TemplatePart::Text("\nFix what they describe.".to_owned()),
            ]),
        },
    );
    fix.timeout_seconds = 3600;
    fix.max_output_bytes = 200_000;
    fix.allow_failure = true;
    fix.when = Some(Condition::Any {
        conditions: vec![
            Condition::Equals {
                reference: output("review", &["verdict"]),
                value: s("revise"),
            },
            Condition::Not {
                condition: Box::new(Condition::All {
                    conditions: vec![
                        Condition::IsOneOf {
                            reference: status("tests"),
                            values: strings(&["success", "skipped"]),
                        },
                        Condition::Equals {
                            reference: exit_code("tests"),
                            value: Data::Int(0),
                        },
                        Condition::Equals {
                            reference: output("review", &["scores"]),
                            value: Data::Map(map(
                                order,
                                vec![
                                    ("style", Data::Int(5)),
                                    ("tests", Data::Int(-1)),
                                    ("tags", Data::List(vec![s("a"), Data::Null])),
                                ],
                            )),
                        },
                    ],
                }),
            },
        ],
    });

    // A workspace script run through `#!/usr/bin/env python3 -u`.
    let mut inspect = node(
        "inspect",
        &[],
        command(
            FrozenExecutable {
                file: workspace_file("scripts/inspect.py", 4_812),
                interpreter: Some(FrozenInterpreter {
                    file: absolute_file("/usr/bin/python3.12", 2049, 1_575_311, 6_830_072),
                    shebang: "/usr/bin/env".to_owned(),
                    args: vec!["-u".to_owned()],
                }),
            },
            "./scripts/inspect.py",
            vec![text("--json"), text("--base=origin/main")],
            ".",
        ),
    );
    inspect.output = Some(stdout_json(findings));
    inspect.max_output_bytes = 1_048_576;

    let mut lint = node(
        "lint",
        &[],
        Execution::Shell {
            program: binary("/usr/bin/bash", 1_310_722, 1_446_024),
            executable: "bash".to_owned(),
            arguments: vec![
                "--noprofile".to_owned(),
                "--norc".to_owned(),
                "-c".to_owned(),
            ],
            command: "set -euo pipefail\ncargo fmt --check\ncargo clippy -- -D warnings\n"
                .to_owned(),
            cwd: cwd("."),
        },
    );
    lint.timeout_seconds = 900;
    lint.allow_failure = true;
    lint.output = Some(stdout_json(list(Schema::String)));

    // A workspace `#!/bin/sh -e` script whose arguments are templates over earlier results.
    let mut report = node(
        "report",
        &["fix", "inspect", "lint"],
        command(
            FrozenExecutable {
                file: workspace_file("tools/report", 733),
                interpreter: Some(FrozenInterpreter {
                    file: absolute_file("/usr/bin/dash", 2049, 1_310_880, 125_688),
                    shebang: "/bin/sh".to_owned(),
                    args: vec!["-e".to_owned()],
                }),
            },
            "./report",
            vec![
                text("--title=nightly"),
                Template(vec![
                    TemplatePart::Text("--summary=".to_owned()),
                    TemplatePart::Ref(output("inspect", &["summary"])),
                ]),
                Template(vec![TemplatePart::Ref(output(
                    "inspect",
                    &["counts", "added"],
                ))]),
                Template(vec![TemplatePart::Ref(output("inspect", &[]))]),
                Template(vec![
                    TemplatePart::Text("--lint=".to_owned()),
                    TemplatePart::Ref(status("lint")),
                    TemplatePart::Text(",exit=".to_owned()),
                    TemplatePart::Ref(exit_code("lint")),
                ]),
                Template(vec![
                    TemplatePart::Text("--fix=".to_owned()),
                    TemplatePart::Ref(status("fix")),
                ]),
            ],
            "tools",
        ),
    );
    report.when = Some(Condition::Not {
        condition: Box::new(Condition::IsOneOf {
            reference: status("lint"),
            values: strings(&["denial", "cancellation"]),
        }),
    });
    report.timeout_seconds = 120;
    report.max_output_bytes = 8192;

    let mut review = node(
        "review",
        &["inspect"],
        Execution::Agent {
            agent: "reviewer".to_owned(),
            prompt: Template(vec![
                TemplatePart::Text("Files changed: ".to_owned()),
                TemplatePart::Ref(output("inspect", &["files"])),
                TemplatePart::Text("\nSummary: ".to_owned()),
                TemplatePart::Ref(output("inspect", &["summary"])),
            ]),
        },
    );
    review.access = Access::ReadOnly;
    review.timeout_seconds = 1800;
    review.max_output_bytes = 12_000;
    review.when = Some(Condition::Equals {
        reference: output("inspect", &["generated"]),
        value: Data::Bool(false),
    });
    review.output = Some(record(
        order,
        vec![
            (
                "verdict",
                required(Schema::Enum {
                    members: strings(&["approve", "revise"]),
                }),
            ),
            ("notes", optional(Schema::String)),
            (
                "scores",
                required(record(
                    order,
                    vec![
                        ("style", required(Schema::Integer)),
                        ("tests", required(Schema::Integer)),
                        ("tags", required(list(Schema::String))),
                    ],
                )),
            ),
        ],
    ));

    let mut tests = node(
        "tests",
        &["inspect"],
        command(
            binary("/home/dev/.cargo/bin/cargo", 2_883_911, 38_920_456),
            "cargo",
            vec![
                text("test"),
                text("--workspace"),
                text("--"),
                text("--test-threads=2"),
            ],
            ".",
        ),
    );
    tests.when = Some(Condition::Any {
        conditions: vec![
            Condition::IsOneOf {
                reference: output("inspect", &["risk"]),
                values: vec![s("high"), Data::Int(3), Data::Null],
            },
            Condition::Not {
                condition: Box::new(Condition::Equals {
                    reference: output("inspect", &["counts", "removed"]),
                    value: Data::Int(0),
                }),
            },
        ],
    });
    tests.timeout_seconds = 5400;
    tests.max_output_bytes = 8_388_608;

    let mut p = program(
        "nightly",
        vec![fix, inspect, lint, report, review, tests],
        vec![
            source("//.rho/workflows/lib/checks.star", 2_048),
            source("//.rho/workflows/lib/schemas.star", 1_311),
            source("//.rho/workflows/nightly/workflow.star", 4_377),
        ],
    );
    "0.3.1".clone_into(&mut p.planner.version);
    p.root.inputs = map(
        order,
        vec![
            (
                "base",
                InputDecl {
                    ty: InputType::String,
                    default: Some(s("origin/main")),
                },
            ),
            (
                "depth",
                InputDecl {
                    ty: InputType::Integer,
                    default: Some(Data::Int(-1)),
                },
            ),
            (
                "dry_run",
                InputDecl {
                    ty: InputType::Bool,
                    default: Some(Data::Bool(true)),
                },
            ),
            (
                "mode",
                InputDecl {
                    ty: InputType::Enum {
                        members: vec![s("fast"), s("full"), Data::Int(2), Data::Null],
                    },
                    default: Some(s("full")),
                },
            ),
            (
                "ticket",
                InputDecl {
                    ty: InputType::String,
                    default: None,
                },
            ),
        ],
    );
    p.root.bound_inputs = map(
        order,
        vec![
            ("base", s("origin/main")),
            ("depth", Data::Int(-1)),
            ("dry_run", Data::Bool(false)),
            ("mode", Data::Null),
            ("ticket", s("RHO-1234")),
        ],
    );
    p.root.exports = map(
        order,
        vec![
            (
                "summary",
                Export {
                    reference: output("inspect", &["summary"]),
                    schema: Schema::String,
                },
            ),
            (
                "added",
                Export {
                    reference: output("inspect", &["counts", "added"]),
                    schema: Schema::Integer,
                },
            ),
            (
                "review",
                Export {
                    reference: output("review", &[]),
                    schema: record(
                        order,
                        vec![
                            (
                                "verdict",
                                required(Schema::Enum {
                                    members: strings(&["approve", "revise"]),
                                }),
                            ),
                            ("notes", optional(Schema::String)),
                        ],
                    ),
                },
            ),
            (
                "fix_state",
                Export {
                    reference: status("fix"),
                    schema: terminal_state(),
                },
            ),
            (
                "tests_exit",
                Export {
                    reference: exit_code("tests"),
                    schema: Schema::Integer,
                },
            ),
        ],
    );
    p.agents = map(
        order,
        vec![
            ("reviewer", reviewer_agent()),
            (
                "fixer",
                AgentSetup {
                    id: "fixer".to_owned(),
                    source: AgentSource::Project,
                    fingerprint: content_digest("agent:fixer"),
                    runtime: AgentRuntime::ClaudeCli,
                    prompt_policy: "replace".to_owned(),
                    system_prompt: "Fix failing tests with the smallest change.".to_owned(),
                    model_policy: "require".to_owned(),
                    model: Some("opus".to_owned()),
                    provider: None,
                    reasoning: None,
                    capabilities: ["Bash(cargo test:*)", "Edit", "Read", "Write"]
                        .iter()
                        .map(|c| (*c).to_owned())
                        .collect(),
                    read_only: false,
                    inherit_claude_config: true,
                },
            ),
        ],
    );
    p.environment.exclude.push("GITHUB_TOKEN".to_owned());
    p.environment.exclude.sort();
    p.scheduler = SchedulerSettings {
        max_parallel_nodes: 6,
        max_parallel_agents: 2,
        max_parallel_commands: 3,
    };
    p.budgets.node_timeout_seconds = 7200;
    p.budgets.evaluator_ticks = 5_000_000;
    p.budgets.program_bytes = 2_000_000;
    p.budgets.condition_depth = 4;
    p.trust = TrustRequirement {
        project_agents: true,
    };
    p
}

// ---------------------------------------------------------------------------------------
// Helpers for the checks
// ---------------------------------------------------------------------------------------

fn hex_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("vectors")
        .join(format!("{name}.cbor.hex"))
}

fn updating() -> bool {
    std::env::var_os("RHO_UPDATE_VECTORS").is_some_and(|v| v == "1")
}

/// Reads a committed hex file: exactly lowercase hex digits followed by one newline.
fn read_committed(name: &str) -> Vec<u8> {
    let path = hex_path(name);
    let content = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; regenerate with RHO_UPDATE_VECTORS=1",
            path.display()
        )
    });
    let hex = content
        .strip_suffix('\n')
        .unwrap_or_else(|| panic!("{}: must end with one newline", path.display()));
    assert!(
        hex.len().is_multiple_of(2) && !hex.is_empty(),
        "{}: odd or empty hex",
        path.display()
    );
    let nibble = |c: u8| match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => panic!(
            "{}: {:?} is not a lowercase hex digit",
            path.display(),
            char::from(c)
        ),
    };
    hex.as_bytes()
        .chunks(2)
        .map(|pair| (nibble(pair[0]) << 4) | nibble(pair[1]))
        .collect()
}

fn is_tagged_digest(d: &str) -> bool {
    d.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

fn is_name(id: &str) -> bool {
    let bytes = id.as_bytes();
    (1..=63).contains(&bytes.len())
        && bytes[0].is_ascii_lowercase()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'-')
}

fn node_references(node: &Node) -> Vec<Reference> {
    let mut out: Vec<Reference> = node
        .when
        .iter()
        .flat_map(Condition::references)
        .cloned()
        .collect();
    if let Execution::Agent { prompt, .. } = &node.execution {
        out.extend(prompt.references().cloned());
    }
    if let Execution::Command { args, .. } = &node.execution {
        out.extend(args.iter().flat_map(Template::references).cloned());
    }
    out
}

/// Every `(node, need)` pair reachable through `needs` from `node`.
fn ancestors(p: &FrozenProgram, id: &str) -> Vec<String> {
    let mut seen = Vec::new();
    let mut stack = vec![id.to_owned()];
    while let Some(n) = stack.pop() {
        for need in &p.node(&n).expect("needs name existing nodes").needs {
            if !seen.contains(need) {
                seen.push(need.clone());
                stack.push(need.clone());
            }
        }
    }
    seen
}

fn all_vectors() -> impl Iterator<Item = (&'static Vector, FrozenProgram)> {
    VECTORS.iter().map(|v| (v, (v.build)(Order::AsWritten)))
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

#[test]
fn there_are_at_least_five_vectors_and_each_has_exactly_one_file() {
    assert!(VECTORS.len() >= 5);
    let mut names: Vec<&str> = VECTORS.iter().map(|v| v.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), VECTORS.len(), "vector names must be unique");
    if updating() {
        return;
    }
    let dir = hex_path("x").parent().unwrap().to_owned();
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    on_disk.sort();
    let mut expected: Vec<String> = names.iter().map(|n| format!("{n}.cbor.hex")).collect();
    expected.sort();
    assert_eq!(
        on_disk, expected,
        "tests/vectors holds a file per vector, nothing else"
    );
}

#[test]
fn vectors_are_realistic_programs() {
    for (v, p) in all_vectors() {
        let n = v.name;
        assert_eq!(p.format_version, PROGRAM_FORMAT_VERSION, "{n}");
        assert_eq!(p.root.id, ROOT_SCOPE_ID, "{n}");
        assert!(is_name(&p.name), "{n}: workflow name {}", p.name);
        let ids: Vec<&str> = p.root.nodes.iter().map(|x| x.id.as_str()).collect();
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(ids, sorted, "{n}: nodes sorted by id, unique");
        for node in &p.root.nodes {
            assert!(is_name(&node.id), "{n}: node id {}", node.id);
            let mut needs = node.needs.clone();
            needs.sort();
            needs.dedup();
            assert_eq!(node.needs, needs, "{n}/{}: needs sorted, unique", node.id);
            assert!(!node.needs.contains(&node.id), "{n}/{}", node.id);
            let reachable = ancestors(&p, &node.id);
            assert!(!reachable.contains(&node.id), "{n}/{}: cycle", node.id);
            for r in node_references(node) {
                assert!(
                    reachable.iter().any(|a| a == r.node()),
                    "{n}/{}: reference to {} which is not an ancestor",
                    node.id,
                    r.node()
                );
            }
            let templates: Vec<&Template> = match &node.execution {
                Execution::Agent { prompt, .. } => vec![prompt],
                Execution::Command { args, .. } => args.iter().collect(),
                Execution::Shell { .. } => vec![],
            };
            for t in templates {
                assert_eq!(
                    &t.clone().normalized(),
                    t,
                    "{n}/{}: templates are frozen normalized",
                    node.id
                );
            }
            assert!(node.timeout_seconds >= 1, "{n}/{}", node.id);
            assert!(node.max_output_bytes >= 1, "{n}/{}", node.id);
            assert!(
                node.timeout_seconds <= p.budgets.node_timeout_seconds,
                "{n}/{}: timeout over budget",
                node.id
            );
            if let Some(w) = &node.when {
                assert!(
                    w.depth() <= usize::try_from(p.budgets.condition_depth).unwrap_or(usize::MAX),
                    "{n}/{}: condition too deep",
                    node.id
                );
            }
            match &node.execution {
                Execution::Agent { agent, .. } => {
                    let setup = p.agents.get(agent).expect("agent setups cover agent nodes");
                    assert_eq!(&setup.id, agent, "{n}");
                    if node.access == Access::ReadOnly {
                        assert!(
                            setup.read_only && setup.runtime == AgentRuntime::Rho,
                            "{n}/{}: only read-only rho agents may be read_only",
                            node.id
                        );
                    }
                    if setup.source == AgentSource::Project {
                        assert!(p.trust.project_agents, "{n}: project agent needs trust");
                    }
                    assert!(
                        !matches!(node.output, Some(Schema::StdoutJson { .. })),
                        "{n}/{}: stdout_json is for commands",
                        node.id
                    );
                }
                Execution::Command { .. } | Execution::Shell { .. } => {
                    assert_eq!(node.access, Access::Mutating, "{n}/{}", node.id);
                    assert!(
                        node.output.is_none()
                            || matches!(node.output, Some(Schema::StdoutJson { .. })),
                        "{n}/{}",
                        node.id
                    );
                }
            }
        }
        for (name, decl) in &p.root.inputs {
            assert!(is_name(name), "{n}: input {name}");
            assert!(p.root.bound_inputs.contains_key(name), "{n}: {name} bound");
            if let (InputType::Enum { members }, Some(d)) = (&decl.ty, &decl.default) {
                assert!(members.contains(d), "{n}: {name} default in members");
            }
        }
        assert_eq!(
            p.root.inputs.keys().collect::<Vec<_>>(),
            p.root.bound_inputs.keys().collect::<Vec<_>>(),
            "{n}: every declared input is bound, nothing else"
        );
        for export in p.root.exports.values() {
            assert!(p.node(export.reference.node()).is_some(), "{n}");
        }
        let mut sources = p.sources.clone();
        sources.sort_by(|a, b| a.label.cmp(&b.label));
        assert_eq!(p.sources, sources, "{n}: sources sorted by label");
        for src in &p.sources {
            assert!(is_tagged_digest(&src.digest), "{n}");
        }
        for (id, setup) in &p.agents {
            assert_eq!(&setup.id, id, "{n}: agents keyed by their id");
            assert!(
                setup.capabilities.is_sorted(),
                "{n}/{id}: capability set sorted"
            );
            assert!(is_tagged_digest(&setup.fingerprint), "{n}/{id}");
        }
        let bytes = encode_program(&p).unwrap();
        assert!(
            u64::try_from(bytes.len()).unwrap() <= p.budgets.program_bytes,
            "{n}: program over its program_bytes budget"
        );
    }
}

#[test]
fn complete_vector_covers_every_form() {
    let p = complete(Order::AsWritten);
    let kinds: Vec<NodeKind> = p.root.nodes.iter().map(Node::kind).collect();
    for kind in [NodeKind::Agent, NodeKind::Command, NodeKind::Shell] {
        assert!(kinds.contains(&kind), "{kind:?}");
    }

    let mut schema_forms = Vec::new();
    let mut optional_fields = 0;
    let mut stack: Vec<&Schema> = p
        .root
        .nodes
        .iter()
        .filter_map(|n| n.output.as_ref())
        .chain(p.root.exports.values().map(|e| &e.schema))
        .collect();
    while let Some(schema) = stack.pop() {
        schema_forms.push(match schema {
            Schema::Null => "null",
            Schema::Bool => "bool",
            Schema::Integer => "integer",
            Schema::String => "string",
            Schema::Enum { .. } => "enum",
            Schema::List { items } => {
                stack.push(items);
                "list"
            }
            Schema::Record { fields } => {
                optional_fields += fields.values().filter(|f| f.optional).count();
                stack.extend(fields.values().map(|f| &f.schema));
                "record"
            }
            Schema::StdoutJson { schema } => {
                stack.push(schema);
                "stdout_json"
            }
        });
    }
    for form in [
        "null",
        "bool",
        "integer",
        "string",
        "enum",
        "list",
        "record",
        "stdout_json",
    ] {
        assert!(schema_forms.contains(&form), "schema form {form}");
    }
    assert!(optional_fields > 0, "a record with an optional field");

    let mut ops = Vec::new();
    let mut max_depth = 0;
    let mut conditions: Vec<&Condition> = p
        .root
        .nodes
        .iter()
        .filter_map(|n| n.when.as_ref())
        .collect();
    for c in &conditions {
        max_depth = max_depth.max(c.depth());
    }
    while let Some(c) = conditions.pop() {
        ops.push(match c {
            Condition::Equals { .. } => "equals",
            Condition::IsOneOf { .. } => "is_one_of",
            Condition::All { conditions: cs } => {
                conditions.extend(cs);
                "all"
            }
            Condition::Any { conditions: cs } => {
                conditions.extend(cs);
                "any"
            }
            Condition::Not { condition } => {
                conditions.push(condition);
                "not"
            }
        });
    }
    for op in ["equals", "is_one_of", "all", "any", "not"] {
        assert!(ops.contains(&op), "condition {op}");
    }
    assert!(max_depth >= 3, "nested conditions");

    let refs: Vec<Reference> = p
        .root
        .nodes
        .iter()
        .flat_map(node_references)
        .chain(p.root.exports.values().map(|e| e.reference.clone()))
        .collect();
    assert!(
        refs.iter()
            .any(|r| matches!(r, Reference::Output { path, .. } if path.len() >= 2))
    );
    assert!(
        refs.iter()
            .any(|r| matches!(r, Reference::Output { path, .. } if path.is_empty()))
    );
    assert!(refs.iter().any(|r| matches!(r, Reference::Status { .. })));
    assert!(refs.iter().any(|r| matches!(r, Reference::ExitCode { .. })));
    for kind in ["output", "status", "exit_code"] {
        assert!(
            p.root.exports.values().any(|e| matches!(
                (&e.reference, kind),
                (Reference::Output { .. }, "output")
                    | (Reference::Status { .. }, "status")
                    | (Reference::ExitCode { .. }, "exit_code")
            )),
            "export of {kind}"
        );
    }

    let types: Vec<&InputType> = p.root.inputs.values().map(|d| &d.ty).collect();
    assert!(types.contains(&&InputType::String));
    assert!(types.contains(&&InputType::Integer));
    assert!(types.contains(&&InputType::Bool));
    assert!(
        p.root
            .inputs
            .values()
            .any(|d| matches!(d.ty, InputType::Enum { .. }) && d.default.is_some())
    );
    assert!(p.root.inputs.values().any(|d| d.default.is_none()));

    let mut locations = Vec::new();
    let mut interpreters = 0;
    let mut templated_args = false;
    for node in &p.root.nodes {
        let exe = match &node.execution {
            Execution::Command { program, args, .. } => {
                templated_args |= args.iter().any(|a| a.references().next().is_some());
                program
            }
            Execution::Shell { program, .. } => program,
            Execution::Agent { prompt, .. } => {
                assert!(
                    prompt.references().next().is_some(),
                    "agent template prompt"
                );
                continue;
            }
        };
        locations.push(exe.file.location.clone());
        if let Some(i) = &exe.interpreter {
            interpreters += 1;
            locations.push(i.file.location.clone());
        }
    }
    assert!(templated_args, "command args referencing outputs");
    assert!(interpreters >= 1, "a script interpreter");
    assert!(
        locations
            .iter()
            .any(|l| matches!(l, FileLocation::Workspace { .. }))
    );
    assert!(
        locations
            .iter()
            .any(|l| matches!(l, FileLocation::Absolute { .. }))
    );
    assert!(
        p.root
            .nodes
            .iter()
            .any(|n| n.kind() == NodeKind::Agent && matches!(n.output, Some(Schema::Record { .. })))
    );

    assert_ne!(p.scheduler, SchedulerSettings::default());
    assert_ne!(p.budgets, Budgets::default());
    assert!(p.sources.len() >= 2);
    assert!(p.trust.project_agents);
    assert!(!p.root.exports.is_empty());
}

#[test]
fn encoding_matches_the_committed_hex() {
    let update = updating();
    for (v, p) in all_vectors() {
        let bytes = encode_program(&p).unwrap();
        let hex = digest::hex(&bytes);
        if update {
            std::fs::create_dir_all(hex_path(v.name).parent().unwrap()).unwrap();
            std::fs::write(hex_path(v.name), format!("{hex}\n")).unwrap();
            continue;
        }
        let committed = read_committed(v.name);
        assert!(
            committed == bytes,
            "vector {}: canonical encoding changed (committed {} bytes, now {} bytes); if this \
             is intended, regenerate with RHO_UPDATE_VECTORS=1 and review the diff",
            v.name,
            committed.len(),
            bytes.len()
        );
    }
}

#[test]
fn digests_match_the_committed_strings() {
    let mut changed = Vec::new();
    for (v, p) in all_vectors() {
        let pd = program_digest(&p).unwrap();
        let gd = graph_digest(&p).unwrap();
        if pd != v.program_digest || gd != v.graph_digest {
            changed.push(format!(
                "{}:\n        program_digest: \"{pd}\",\n        graph_digest: \"{gd}\",",
                v.name
            ));
        }
        if !updating() {
            // The committed bytes and the committed digest agree with each other, too.
            assert_eq!(
                program_digest_of_bytes(&read_committed(v.name)),
                v.program_digest,
                "vector {}: committed hex and committed program_digest disagree",
                v.name
            );
        }
    }
    assert!(
        changed.is_empty(),
        "digests changed; if intended, paste into VECTORS:\n{}",
        changed.join("\n")
    );
}

#[test]
fn committed_bytes_decode_to_the_same_program() {
    for (v, p) in all_vectors() {
        let bytes = if updating() {
            encode_program(&p).unwrap()
        } else {
            read_committed(v.name)
        };
        let decoded: FrozenProgram = from_canonical_bytes(&bytes)
            .unwrap_or_else(|e| panic!("vector {}: committed bytes do not decode: {e}", v.name));
        assert_eq!(decoded, p, "vector {}", v.name);
    }
}

#[test]
fn reencoding_is_byte_identical() {
    for (v, p) in all_vectors() {
        let bytes = encode_program(&p).unwrap();
        let decoded: FrozenProgram = from_canonical_bytes(&bytes).unwrap();
        assert_eq!(
            encode_program(&decoded).unwrap(),
            bytes,
            "vector {}",
            v.name
        );
        // The untyped value model agrees: strict decode then encode is the identity.
        let value = canonical::decode(&bytes).unwrap();
        assert_eq!(
            canonical::encode(&value).unwrap(),
            bytes,
            "vector {}",
            v.name
        );
    }
}

#[test]
fn map_insertion_order_does_not_change_the_bytes() {
    for v in VECTORS {
        let forward = (v.build)(Order::AsWritten);
        let reversed = (v.build)(Order::Reversed);
        assert_eq!(forward, reversed, "vector {}", v.name);
        assert_eq!(
            encode_program(&forward).unwrap(),
            encode_program(&reversed).unwrap(),
            "vector {}",
            v.name
        );
        assert_eq!(
            graph_digest(&forward).unwrap(),
            graph_digest(&reversed).unwrap(),
            "vector {}",
            v.name
        );
    }
}

#[test]
fn a_one_field_change_changes_the_program_digest() {
    for (v, p) in all_vectors() {
        let before = program_digest(&p).unwrap();
        let graph_before = graph_digest(&p).unwrap();

        // A timeout is not part of the graph view: only the program digest moves.
        let mut changed = p.clone();
        let node = &mut changed.root.nodes[0];
        node.timeout_seconds = if node.timeout_seconds == 1 { 2 } else { 1 };
        assert_ne!(program_digest(&changed).unwrap(), before, "{}", v.name);
        assert_eq!(graph_digest(&changed).unwrap(), graph_before, "{}", v.name);

        // allow_failure is part of both.
        let mut changed = p.clone();
        changed.root.nodes[0].allow_failure ^= true;
        assert_ne!(program_digest(&changed).unwrap(), before, "{}", v.name);
        assert_ne!(graph_digest(&changed).unwrap(), graph_before, "{}", v.name);

        let mut changed = p.clone();
        changed.budgets.program_bytes ^= 1;
        assert_ne!(program_digest(&changed).unwrap(), before, "{}", v.name);

        let mut changed = p.clone();
        changed.scheduler.max_parallel_agents ^= 1;
        assert_ne!(program_digest(&changed).unwrap(), before, "{}", v.name);

        // Access and network are behaviour: both move the program digest, and a denied
        // network survives the canonical round trip (the default is simply not encoded).
        let mut changed = p.clone();
        changed.root.nodes[0].access = match changed.root.nodes[0].access {
            Access::ReadOnly => Access::Mutating,
            Access::Mutating => Access::ReadOnly,
        };
        assert_ne!(program_digest(&changed).unwrap(), before, "{}", v.name);
        let mut changed = p.clone();
        changed.root.nodes[0].network = Network::None;
        assert_ne!(program_digest(&changed).unwrap(), before, "{}", v.name);
        let bytes = canonical::to_canonical_bytes(&changed).unwrap();
        let back: FrozenProgram = from_canonical_bytes(&bytes).unwrap();
        assert_eq!(back, changed, "{}", v.name);

        let mut changed = p.clone();
        changed.sources[0].size ^= 1;
        assert_ne!(program_digest(&changed).unwrap(), before, "{}", v.name);
    }

    // Deep changes in the complete vector: an optional flag, an interpreter argument, a
    // condition literal, an agent capability.
    let p = complete(Order::AsWritten);
    let before = program_digest(&p).unwrap();
    let mut changed = p.clone();
    let review = changed
        .root
        .nodes
        .iter_mut()
        .find(|n| n.id == "review")
        .unwrap();
    let Some(Schema::Record { fields }) = &mut review.output else {
        panic!("review has a record output")
    };
    fields.get_mut("notes").unwrap().optional = false;
    assert_ne!(program_digest(&changed).unwrap(), before);
    assert_ne!(graph_digest(&changed).unwrap(), graph_digest(&p).unwrap());

    let mut changed = p.clone();
    let inspect = changed
        .root
        .nodes
        .iter_mut()
        .find(|n| n.id == "inspect")
        .unwrap();
    let Execution::Command { program, .. } = &mut inspect.execution else {
        panic!("inspect is a command")
    };
    program.interpreter.as_mut().unwrap().args.clear();
    assert_ne!(program_digest(&changed).unwrap(), before);

    let mut changed = p.clone();
    let tests = changed
        .root
        .nodes
        .iter_mut()
        .find(|n| n.id == "tests")
        .unwrap();
    let Some(Condition::Any { conditions }) = &mut tests.when else {
        panic!("tests has an any condition")
    };
    let Condition::Not { condition } = &mut conditions[1] else {
        panic!("second part is not")
    };
    let Condition::Equals { value, .. } = condition.as_mut() else {
        panic!("negated part is equals")
    };
    *value = Data::Int(1);
    assert_ne!(program_digest(&changed).unwrap(), before);

    let mut changed = p.clone();
    changed
        .agents
        .get_mut("fixer")
        .unwrap()
        .capabilities
        .retain(|c| c != "Write");
    assert_ne!(program_digest(&changed).unwrap(), before);
}

#[test]
fn digests_have_the_documented_format_and_domains() {
    for (v, p) in all_vectors() {
        let bytes = encode_program(&p).unwrap();
        let pd = program_digest(&p).unwrap();
        let gd = graph_digest(&p).unwrap();
        assert!(is_tagged_digest(&pd), "{}: {pd}", v.name);
        assert!(is_tagged_digest(&gd), "{}: {gd}", v.name);
        assert!(is_tagged_digest(v.program_digest), "{}", v.name);
        assert!(is_tagged_digest(v.graph_digest), "{}", v.name);
        assert_ne!(pd, gd, "{}", v.name);
        // Domain-separated: not a bare hash of the bytes.
        assert_ne!(pd, sha256_tagged(&bytes), "{}", v.name);

        // Recomputed independently: SHA-256 over `rho-program\0`, the format version as
        // four big-endian bytes, then the canonical program bytes.
        let mut hasher = Sha256::new();
        hasher.update(b"rho-program\0");
        hasher.update(PROGRAM_FORMAT_VERSION.to_be_bytes());
        hasher.update(&bytes);
        let expected = format!("sha256:{}", digest::hex(&hasher.finalize()));
        assert_eq!(pd, expected, "{}", v.name);

        let graph_bytes = canonical::to_canonical_bytes(&digest::graph_view(&p)).unwrap();
        let mut hasher = Sha256::new();
        hasher.update(b"rho-graph\0");
        hasher.update(PROGRAM_FORMAT_VERSION.to_be_bytes());
        hasher.update(&graph_bytes);
        let expected = format!("sha256:{}", digest::hex(&hasher.finalize()));
        assert_eq!(gd, expected, "{}", v.name);
    }
    let digests: Vec<&str> = VECTORS
        .iter()
        .flat_map(|v| [v.program_digest, v.graph_digest])
        .collect();
    let mut unique = digests.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(
        unique.len(),
        digests.len(),
        "every committed digest differs"
    );
}

#[test]
fn json_view_of_every_vector_round_trips() {
    for (v, p) in all_vectors() {
        let json = serde_json::to_string(&p).unwrap();
        let back: FrozenProgram = serde_json::from_str(&json)
            .unwrap_or_else(|e| panic!("vector {}: JSON view does not parse back: {e}", v.name));
        assert_eq!(back, p, "vector {}", v.name);
        assert_eq!(
            encode_program(&back).unwrap(),
            encode_program(&p).unwrap(),
            "vector {}",
            v.name
        );
    }
    // The complete vector's JSON shows the tags graph.json readers rely on.
    let json: serde_json::Value = serde_json::to_value(complete(Order::AsWritten)).unwrap();
    let nodes = json["root"]["nodes"].as_array().unwrap();
    let kinds: Vec<&str> = nodes
        .iter()
        .map(|n| n["execution"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["agent", "command", "shell", "command", "agent", "command"]
    );
    assert_eq!(
        json["root"]["exports"]["tests_exit"]["reference"]["ref"],
        "exit_code"
    );
    assert_eq!(
        nodes[1]["execution"]["program"]["file"]["location"]["root"],
        "workspace"
    );
}
