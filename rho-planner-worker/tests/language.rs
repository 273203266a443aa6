//! The workflow language end to end through `dsl::evaluate` with an in-memory module loader,
//! plus one conversation with the real worker binary.

#![allow(clippy::expect_used, clippy::unnecessary_wraps)] // test helpers panic on purpose; spans compare as options

use std::cell::RefCell;
use std::collections::BTreeMap;

use rho_ipc::budget::Budgets;
use rho_ipc::data::Data;
use rho_ipc::evaluated::{EvaluatedExecution, EvaluatedWorkflow, SourceSpan};
use rho_ipc::message::{Diagnostic, ModuleRequest, ModuleResponse, PlanRequest, PlanResponse};
use rho_ipc::program::{
    Access, Condition, InputDecl, InputType, Network, RecordField, Reference, Schema, Template,
    TemplatePart,
};
use rho_planner_worker::dsl;

const ENTRY: &str = "//.rho/workflows/check/workflow.star";

struct Run {
    response: PlanResponse,
    requests: Vec<ModuleRequest>,
}

fn run_with(
    source: &str,
    inputs: &[(&str, Data)],
    modules: &[(&str, &str)],
    budgets: Budgets,
) -> Run {
    let request = PlanRequest {
        entry_label: ENTRY.to_owned(),
        entry_source: source.to_owned(),
        inputs: inputs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect(),
        budgets,
    };
    let modules: BTreeMap<String, String> = modules
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let requests = RefCell::new(Vec::new());
    let response = dsl::evaluate(&request, |req: ModuleRequest| {
        requests.borrow_mut().push(req.clone());
        Ok(match modules.get(&req.label) {
            Some(source) => ModuleResponse::Source {
                label: req.label,
                source: source.clone(),
            },
            None => ModuleResponse::Refused {
                diagnostic: Diagnostic::new("missing_module", format!("no module {}", req.label)),
                label: req.label,
            },
        })
    })
    .expect("evaluation answers");
    Run {
        response,
        requests: requests.into_inner(),
    }
}

fn run(source: &str) -> PlanResponse {
    run_with(source, &[], &[], Budgets::default()).response
}

fn workflow(response: PlanResponse) -> EvaluatedWorkflow {
    match response {
        PlanResponse::Workflow(w) => w,
        PlanResponse::Diagnostics(d) => panic!("expected a workflow, got {d:#?}"),
    }
}

fn diagnostic(response: PlanResponse) -> Diagnostic {
    match response {
        PlanResponse::Diagnostics(mut d) => {
            assert_eq!(d.len(), 1, "expected one diagnostic, got {d:#?}");
            d.remove(0)
        }
        PlanResponse::Workflow(w) => panic!("expected diagnostics, got {w:#?}"),
    }
}

fn diagnostics(response: PlanResponse) -> Vec<Diagnostic> {
    match response {
        PlanResponse::Diagnostics(d) => d,
        PlanResponse::Workflow(w) => panic!("expected diagnostics, got {w:#?}"),
    }
}

fn span(line: u32, column: u32) -> Option<SourceSpan> {
    Some(SourceSpan {
        label: ENTRY.to_owned(),
        line,
        column,
    })
}

/// Wraps a build body (indented by 4) into a complete entry module.
fn entry(body: &str) -> String {
    format!("def build(inputs):\n{body}\nWORKFLOW = define(inputs = {{}}, build = build)\n")
}

fn assert_budget(d: &Diagnostic, name: &str, limit: u64) {
    assert_eq!(d.code, "budget", "{d:#?}");
    let overrun = d.budget.as_ref().expect("budget details");
    assert_eq!(overrun.name, name, "{d:#?}");
    assert_eq!(overrun.limit, limit, "{d:#?}");
    assert!(overrun.measured > limit, "{d:#?}");
    assert_eq!(
        d.message,
        format!(
            "planning budget {name} exceeded: accepted limit {limit}, requested or measured {}",
            overrun.measured
        )
    );
}

const COMMON: &str = r#"
def checks(target):
    return [
        command(name = "inspect", argv = ["./inspect.sh", target], cwd = "tools",
                output = schema.stdout_json(schema.record({
                    "summary": schema.string(),
                    "decision": schema.enum(["approve", "revise"]),
                    "count": schema.optional(schema.integer()),
                    "tags": schema.list(schema.enum_([1, True, None, "x"])),
                    "nothing": schema.null(),
                    "flag": schema.bool(),
                })),
                timeout_seconds = 60, max_output_bytes = 4096),
    ]
"#;

const FULL: &str = r#"
load("//lib/common.star", "checks", mk = "checks")

def build(inputs):
    nodes = checks(inputs["target"])
    review = agent(
        name = "review", agent = "reviewer",
        prompt = template(["Review ", inputs["target"], ": ", output("inspect", ["summary"])]),
        access = "read_only",
        needs = ["inspect"],
        when = condition.all([
            condition.equals(output("inspect", ["decision"]), "approve"),
            condition.not_(condition.is_one_of(status("inspect"), ["failure", "cancelled"])),
            getattr(condition, "not")(condition.any([condition.equals(exit_code("inspect"), 1)])),
        ]),
        output = schema.record({"verdict": schema.enum(["approve", "revise"])}),
        timeout_seconds = 1800, max_output_bytes = 12000)
    test = command(name = "test", argv = ["cargo", "test", template(["--jobs=", output("inspect", ["count"])])],
                   needs = [review], allow_failure = True,
                   timeout_seconds = 600, max_output_bytes = 65536)
    sh = shell(name = "build", executable = "bash", arguments = ["-c"],
               command = "set -eu; make -j" + str(inputs["jobs"]),
               needs = ["test"], when = condition.equals(status("test"), "success"),
               timeout_seconds = 900, max_output_bytes = 1000)
    return workflow(name = "check", nodes = nodes + [review, test, sh],
                    exports = {"verdict": output("review", ["verdict"]), "tests": status("test"),
                               "exit": exit_code("build")})

WORKFLOW = define(
    inputs = {
        "target": input.string(default = "."),
        "jobs": input.integer(default = 2),
        "fast": input.bool(),
        "mode": input.enum(["quick", "full"], default = "quick"),
        "level": input.enum_([1, 2, 3]),
    },
    build = build,
)
"#;

fn full_run() -> Run {
    run_with(
        FULL,
        &[
            ("fast", Data::Bool(true)),
            ("level", Data::Int(2)),
            ("target", Data::String("src".into())),
        ],
        &[("//lib/common.star", COMMON)],
        Budgets::default(),
    )
}

#[test]
fn full_example_produces_the_expected_workflow() {
    let run = full_run();
    assert_eq!(
        run.requests.len(),
        1,
        "one module request for two bindings of one load"
    );
    assert_eq!(run.requests[0].label, "//lib/common.star");
    assert_eq!(run.requests[0].from, ENTRY);
    assert_eq!(run.requests[0].span, span(2, 6));
    let w = workflow(run.response);

    assert_eq!(w.name, "check");
    assert_eq!(w.span, span(25, 12));
    assert_eq!(
        w.inputs,
        BTreeMap::from([
            (
                "fast".to_owned(),
                InputDecl {
                    ty: InputType::Bool,
                    default: None
                }
            ),
            (
                "jobs".to_owned(),
                InputDecl {
                    ty: InputType::Integer,
                    default: Some(Data::Int(2))
                }
            ),
            (
                "level".to_owned(),
                InputDecl {
                    ty: InputType::Enum {
                        members: vec![Data::Int(1), Data::Int(2), Data::Int(3)]
                    },
                    default: None
                }
            ),
            (
                "mode".to_owned(),
                InputDecl {
                    ty: InputType::Enum {
                        members: vec![Data::String("quick".into()), Data::String("full".into())]
                    },
                    default: Some(Data::String("quick".into()))
                }
            ),
            (
                "target".to_owned(),
                InputDecl {
                    ty: InputType::String,
                    default: Some(Data::String(".".into()))
                }
            ),
        ])
    );
    assert_eq!(
        w.bound_inputs,
        BTreeMap::from([
            ("fast".to_owned(), Data::Bool(true)),
            ("jobs".to_owned(), Data::Int(2)),
            ("level".to_owned(), Data::Int(2)),
            ("mode".to_owned(), Data::String("quick".into())),
            ("target".to_owned(), Data::String("src".into())),
        ])
    );

    let names: Vec<&str> = w.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["inspect", "review", "test", "build"]);

    let inspect = &w.nodes[0];
    assert_eq!(
        inspect.execution,
        EvaluatedExecution::Command {
            argv0: "./inspect.sh".into(),
            args: vec![Template::text("src")],
            cwd: "tools".into()
        }
    );
    assert_eq!(
        inspect.span,
        Some(SourceSpan {
            label: "//lib/common.star".into(),
            line: 4,
            column: 9
        })
    );
    assert_eq!(inspect.access, None);
    let Some(Schema::StdoutJson { schema }) = &inspect.output else {
        panic!("{:?}", inspect.output)
    };
    let Schema::Record { fields } = schema.as_ref() else {
        panic!("{schema:?}")
    };
    assert_eq!(
        fields["count"],
        RecordField {
            schema: Schema::Integer,
            optional: true
        }
    );
    assert_eq!(
        fields["summary"],
        RecordField {
            schema: Schema::String,
            optional: false
        }
    );
    assert_eq!(
        fields["tags"].schema,
        Schema::List {
            items: Box::new(Schema::Enum {
                members: vec![
                    Data::Int(1),
                    Data::Bool(true),
                    Data::Null,
                    Data::String("x".into())
                ]
            })
        }
    );
    assert_eq!(fields["nothing"].schema, Schema::Null);
    assert_eq!(fields["flag"].schema, Schema::Bool);

    let review = &w.nodes[1];
    assert_eq!(review.access, Some(Access::ReadOnly));
    assert_eq!(review.needs, ["inspect"]);
    assert_eq!(
        (review.timeout_seconds, review.max_output_bytes),
        (1800, 12000)
    );
    let summary = Reference::Output {
        node: "inspect".into(),
        path: vec!["summary".into()],
    };
    assert_eq!(
        review.execution,
        EvaluatedExecution::Agent {
            agent: "reviewer".into(),
            prompt: Template(vec![
                TemplatePart::Text("Review src: ".into()),
                TemplatePart::Ref(summary),
            ]),
        }
    );
    assert_eq!(
        review.when,
        Some(Condition::All {
            conditions: vec![
                Condition::Equals {
                    reference: Reference::Output {
                        node: "inspect".into(),
                        path: vec!["decision".into()]
                    },
                    value: Data::String("approve".into()),
                },
                Condition::Not {
                    condition: Box::new(Condition::IsOneOf {
                        reference: Reference::Status {
                            node: "inspect".into()
                        },
                        values: vec![
                            Data::String("failure".into()),
                            Data::String("cancelled".into())
                        ],
                    })
                },
                Condition::Not {
                    condition: Box::new(Condition::Any {
                        conditions: vec![Condition::Equals {
                            reference: Reference::ExitCode {
                                node: "inspect".into()
                            },
                            value: Data::Int(1),
                        }]
                    })
                },
            ]
        })
    );
    assert_eq!(
        review.output,
        Some(Schema::Record {
            fields: BTreeMap::from([(
                "verdict".to_owned(),
                RecordField {
                    schema: Schema::Enum {
                        members: vec![
                            Data::String("approve".into()),
                            Data::String("revise".into())
                        ]
                    },
                    optional: false
                }
            )])
        })
    );

    let test = &w.nodes[2];
    assert!(test.allow_failure);
    assert_eq!(
        test.needs,
        ["review"],
        "a node value in needs becomes its name"
    );
    assert_eq!(
        test.execution,
        EvaluatedExecution::Command {
            argv0: "cargo".into(),
            args: vec![
                Template::text("test"),
                Template(vec![
                    TemplatePart::Text("--jobs=".into()),
                    TemplatePart::Ref(Reference::Output {
                        node: "inspect".into(),
                        path: vec!["count".into()]
                    })
                ]),
            ],
            cwd: ".".into()
        }
    );

    let sh = &w.nodes[3];
    assert_eq!(
        sh.execution,
        EvaluatedExecution::Shell {
            executable: "bash".into(),
            arguments: vec!["-c".into()],
            command: "set -eu; make -j2".into(),
            cwd: ".".into()
        }
    );
    assert_eq!(
        sh.when,
        Some(Condition::Equals {
            reference: Reference::Status {
                node: "test".into()
            },
            value: Data::String("success".into())
        })
    );

    assert_eq!(
        w.exports,
        BTreeMap::from([
            (
                "exit".to_owned(),
                Reference::ExitCode {
                    node: "build".into()
                }
            ),
            (
                "tests".to_owned(),
                Reference::Status {
                    node: "test".into()
                }
            ),
            (
                "verdict".to_owned(),
                Reference::Output {
                    node: "review".into(),
                    path: vec!["verdict".into()]
                }
            ),
        ])
    );
}

#[test]
fn same_sources_give_the_same_workflow() {
    assert_eq!(full_run().response, full_run().response);
}

#[test]
fn an_evaluator_started_before_its_request_evaluates_it_and_an_unused_one_is_harmless() {
    // Started and dropped without a request: its thread builds the globals and ends.
    drop(dsl::Evaluator::start().expect("evaluation thread"));
    let request = PlanRequest {
        entry_label: ENTRY.to_owned(),
        entry_source: entry(
            "    return workflow(name = \"w\", nodes = [command(name = \"a\", argv = [\"true\"], timeout_seconds = 60, max_output_bytes = 1024)])",
        ),
        inputs: BTreeMap::new(),
        budgets: Budgets::default(),
    };
    let evaluator = dsl::Evaluator::start().expect("evaluation thread");
    let response = evaluator
        .evaluate(&request, |req: ModuleRequest| {
            panic!("no module was to be loaded, got {}", req.label)
        })
        .expect("evaluation answers");
    let evaluated = workflow(response);
    assert_eq!(evaluated.name, "w");
    assert_eq!(evaluated.nodes.len(), 1);
}

#[test]
fn syntax_error_names_file_line_and_column() {
    let d = diagnostic(run(
        "def build(inputs):\n    return workflow(name = \"x\", nodes = [\n\nWORKFLOW = 1\n",
    ));
    assert_eq!(d.code, "syntax");
    let s = d.span.expect("span");
    assert_eq!(s.label, ENTRY);
    assert!(s.line >= 2, "{s:?}");
}

#[test]
fn while_is_a_syntax_error_and_lambda_is_allowed() {
    // Rho 1.47 evaluates the standard dialect, lambda included.
    let src = "step = lambda n: command(name = n, argv = [\"true\"], timeout_seconds = 1, max_output_bytes = 1)\n\
               def build(inputs):\n    return workflow(name = \"w\", nodes = [step(\"a\")])\n\
               WORKFLOW = define(inputs = {}, build = build)\n";
    let planned = workflow(run(src));
    assert_eq!(planned.nodes[0].name, "a");
    assert_eq!(
        diagnostic(run("def f():\n    while True:\n        pass\n")).code,
        "syntax"
    );
}

#[test]
fn rho_call_forms_plan_the_same_program() {
    // Positional parameters in Rho 1.47's order, node values read as dicts, a plain schema on
    // a command (its stdout JSON), stdout_json on an agent (unwrapped), empty condition lists.
    let src = "def build(inputs):\n\
               \x20   a = command(\"a\", [\"x\"], \".\", None, None, False, schema.integer(), 5, 7)\n\
               \x20   b = agent(\"b\", \"r\", \"p\", \"read_only\", [a[\"name\"]], condition.all([]), False, schema.stdout_json(schema.bool()), a[\"timeout_seconds\"], 9)\n\
               \x20   c = shell(\"c\", \"sh\", [\"-c\"], \"true\", when = condition.is_one_of(status(\"a\"), []), timeout_seconds = 1, max_output_bytes = 1)\n\
               \x20   return workflow(\"w\", [a, b, c])\n\
               WORKFLOW = define({\"s\": input.string(\"x\")}, build)\n";
    let planned = workflow(run(src));
    let (a, b, c) = (&planned.nodes[0], &planned.nodes[1], &planned.nodes[2]);
    assert_eq!((a.timeout_seconds, a.max_output_bytes), (5, 7));
    assert_eq!(
        a.output,
        Some(Schema::StdoutJson {
            schema: Box::new(Schema::Integer)
        })
    );
    assert_eq!(b.needs, ["a"]);
    assert_eq!(b.timeout_seconds, 5);
    assert_eq!(b.output, Some(Schema::Bool));
    assert_eq!(b.when, Some(Condition::All { conditions: vec![] }));
    assert!(matches!(&c.when, Some(Condition::IsOneOf { values, .. }) if values.is_empty()));
    let d = diagnostic(run(
        "x = command(name = \"a\", argv = [\"x\"], timeout_seconds = 1, max_output_bytes = 1)[\"argv\"]\n",
    ));
    assert!(
        d.message.contains("no readable key \"argv\""),
        "{}",
        d.message
    );
}

#[test]
fn missing_workflow_is_an_error() {
    let d = diagnostic(run("def build(inputs):\n    pass\n"));
    assert_eq!(d.code, "missing_workflow");
    assert!(d.message.contains(ENTRY), "{}", d.message);
}

#[test]
fn second_workflow_assignment_is_an_error() {
    let src = format!(
        "{}WORKFLOW = define(inputs = {{}}, build = build)\n",
        entry("    return None")
    );
    let d = diagnostic(run(&src));
    assert_eq!(d.code, "duplicate_workflow");
    assert_eq!(d.span, span(4, 1));
    assert!(d.message.contains(":3:1"), "{}", d.message);
}

#[test]
fn workflow_not_made_by_define_is_an_error() {
    let d = diagnostic(run("WORKFLOW = {\"name\": \"x\"}\n"));
    assert_eq!(d.code, "invalid_workflow");
    assert_eq!(d.span, span(1, 1));
}

#[test]
fn build_must_return_a_workflow() {
    let d = diagnostic(run(&entry("    return [1]")));
    assert_eq!(d.code, "invalid_workflow");
    assert!(
        d.message.contains("build(inputs) must return workflow"),
        "{}",
        d.message
    );
}

const INPUTS: &str = r#"
def build(inputs):
    return workflow(name = "w", nodes = [])
WORKFLOW = define(inputs = {
    "pkg": input.string(),
    "n": input.integer(default = 3),
    "mode": input.enum(["fast", "full"], default = "fast"),
}, build = build)
"#;

#[test]
fn unknown_input_is_an_error_naming_it() {
    let d = diagnostics(
        run_with(
            INPUTS,
            &[("pkg", Data::String("a".into())), ("color", Data::Int(1))],
            &[],
            Budgets::default(),
        )
        .response,
    );
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0].code, "unknown_input");
    assert!(d[0].message.contains("\"color\""), "{}", d[0].message);
    assert_eq!(d[0].span, span(4, 12));
}

#[test]
fn missing_required_input_is_an_error_naming_it() {
    let d = diagnostic(run(INPUTS));
    assert_eq!(d.code, "missing_input");
    assert!(d.message.contains("\"pkg\""), "{}", d.message);
}

#[test]
fn mistyped_input_is_an_error_naming_it() {
    let d = diagnostic(
        run_with(
            INPUTS,
            &[
                ("pkg", Data::String("a".into())),
                ("n", Data::String("3".into())),
            ],
            &[],
            Budgets::default(),
        )
        .response,
    );
    assert_eq!(d.code, "input_type");
    assert!(
        d.message.contains("\"n\"") && d.message.contains("an integer"),
        "{}",
        d.message
    );
}

#[test]
fn input_outside_its_enum_is_an_error_naming_it() {
    let d = diagnostic(
        run_with(
            INPUTS,
            &[
                ("pkg", Data::String("a".into())),
                ("mode", Data::String("slow".into())),
            ],
            &[],
            Budgets::default(),
        )
        .response,
    );
    assert_eq!(d.code, "input_not_in_enum");
    assert!(
        d.message.contains("\"mode\"") && d.message.contains("\"fast\""),
        "{}",
        d.message
    );
}

#[test]
fn wrong_default_is_an_error_at_define() {
    let d = diagnostic(run("x = input.integer(default = \"3\")\n"));
    assert_eq!(d.code, "invalid_default");
    assert_eq!(d.span, span(1, 5));
    // As in Rho 1.47, an enum default outside the members is checked only when bound.
    let d = diagnostic(run("x = input.enum([\"a\"], default = [\"b\"])\n"));
    assert_eq!(d.code, "invalid_default");
    let src = "def build(inputs):\n    return workflow(name = \"w\", nodes = [])\n\
               WORKFLOW = define(inputs = {\"m\": input.enum([\"a\"], default = \"b\")}, build = build)\n";
    let d = diagnostic(run(src));
    assert_eq!(d.code, "input_not_in_enum");
    assert!(d.message.contains("\"b\""), "{}", d.message);
}

#[test]
fn invalid_node_name_is_an_error_at_the_call() {
    let d = diagnostic(run(&entry(
        "    return workflow(name = \"w\", nodes = [command(name = \"Lint\", argv = [\"x\"], timeout_seconds = 1, max_output_bytes = 1)])",
    )));
    assert_eq!(d.code, "invalid_name");
    assert!(d.message.contains("\"Lint\""), "{}", d.message);
    assert_eq!(d.span, span(2, 42));
}

#[test]
fn invalid_workflow_and_input_names_are_errors() {
    assert_eq!(
        diagnostic(run(&entry("    return workflow(name = \"\", nodes = [])"))).code,
        "invalid_name"
    );
    let long = "a".repeat(64);
    assert_eq!(
        diagnostic(run(&entry(&format!(
            "    return workflow(name = \"{long}\", nodes = [])"
        ))))
        .code,
        "invalid_name"
    );
    assert_eq!(
        diagnostic(run(
            "WORKFLOW = define(inputs = {\"9x\": input.string()}, build = len)\n"
        ))
        .code,
        "invalid_name"
    );
}

#[test]
fn duplicate_node_name_is_an_error() {
    let d = diagnostic(run(&entry(
        "    a = command(name = \"a\", argv = [\"x\"], timeout_seconds = 1, max_output_bytes = 1)\n    b = shell(name = \"a\", executable = \"sh\", command = \"true\", timeout_seconds = 1, max_output_bytes = 1)\n    return workflow(name = \"w\", nodes = [a, b])",
    )));
    assert_eq!(d.code, "duplicate_node");
    assert!(d.message.contains("\"a\""), "{}", d.message);
    assert_eq!(d.span, span(3, 9));
}

#[test]
fn node_fields_are_checked() {
    let cases = [
        (
            "command(name = \"a\", argv = [\"x\"], max_output_bytes = 1)",
            "timeout_seconds",
        ),
        (
            "command(name = \"a\", argv = [\"x\"], timeout_seconds = 0, max_output_bytes = 1)",
            "positive",
        ),
        (
            "command(name = \"a\", argv = [template([\"x\"])], timeout_seconds = 1, max_output_bytes = 1)",
            "static string",
        ),
        (
            "command(name = \"a\", argv = [], timeout_seconds = 1, max_output_bytes = 1)",
            "empty",
        ),
        (
            "command(name = \"a\", argv = [\"x\"], access = \"readonly\", timeout_seconds = 1, max_output_bytes = 1)",
            "command(access) must be \"read_only\" or \"mutating\"",
        ),
        (
            "shell(name = \"a\", executable = \"sh\", command = \"true\", network = \"off\", timeout_seconds = 1, max_output_bytes = 1)",
            "shell(network) must be \"none\" or \"allowed\"",
        ),
        (
            "agent(name = \"a\", agent = \"r\", prompt = \"p\", network = \"none\", timeout_seconds = 1, max_output_bytes = 1)",
            "network",
        ),
        (
            "shell(name = \"a\", executable = \"sh\", command = template([status(\"b\")]), timeout_seconds = 1, max_output_bytes = 1)",
            "static string",
        ),
        (
            "agent(name = \"a\", agent = \"r\", prompt = \"p\", access = \"write\", timeout_seconds = 1, max_output_bytes = 1)",
            "read_only",
        ),
        (
            "command(name = \"a\", argv = [\"x\"], max_output_bytes = 1)",
            "command(timeout_seconds) is required",
        ),
        (
            "schema.list(item = schema.string(), items = schema.string())",
            "not both",
        ),
        (
            "command(name = \"a\", argv = [\"x\"], output = schema.optional(schema.string()), timeout_seconds = 1, max_output_bytes = 1)",
            "optional",
        ),
        ("schema.list(schema.optional(schema.string()))", "optional"),
        ("schema.enum([])", "at least one"),
        ("schema.enum([[1]])", "enum members"),
        (
            "schema.record({\"a\": schema.stdout_json(schema.null())})",
            "stdout_json",
        ),
        ("template([1])", "string or a reference"),
    ];
    for (expr, needle) in cases {
        let d = diagnostic(run(&format!("x = {expr}\n")));
        assert!(d.message.contains(needle), "{expr}: {d:#?}");
        assert!(d.span.is_some(), "{expr}: {d:#?}");
    }
}

#[test]
fn node_timeout_over_the_budget_is_a_budget_error() {
    let d = diagnostic(run(
        "x = command(name = \"a\", argv = [\"x\"], timeout_seconds = 86401, max_output_bytes = 1)\n",
    ));
    assert_budget(&d, "node_timeout_seconds", 86_400);
    assert_eq!(d.span, span(1, 5));
}

#[test]
fn condition_deeper_than_the_budget_is_a_budget_error() {
    let src = "def build(inputs):\n    c = condition.equals(status(\"a\"), \"success\")\n    for _ in range(10):\n        c = condition.not_(c)\n    return None\nWORKFLOW = define(inputs = {}, build = build)\n";
    let d = diagnostic(run(src));
    assert_budget(&d, "condition_depth", 8);
    assert_eq!(d.measured(), 9);
    assert_eq!(d.span, span(4, 13));
}

trait Measured {
    fn measured(&self) -> u64;
}

impl Measured for Diagnostic {
    fn measured(&self) -> u64 {
        self.budget.as_ref().map_or(0, |b| b.measured)
    }
}

#[test]
fn schema_deeper_than_the_budget_is_a_budget_error() {
    let d = diagnostic(run(
        "x = schema.list(schema.list(schema.list(schema.list(schema.list(schema.list(schema.string()))))))\n",
    ));
    assert_budget(&d, "schema_depth", 6);
}

#[test]
fn import_cycle_prints_the_cycle() {
    let run = run_with(
        "load(\"//a.star\", \"x\")\n",
        &[],
        &[
            ("//a.star", "load(\"//b.star\", \"y\")\nx = 1\n"),
            ("//b.star", "load(\"//a.star\", \"x\")\ny = 2\n"),
        ],
        Budgets::default(),
    );
    let d = diagnostic(run.response);
    assert_eq!(d.code, "import_cycle");
    assert_eq!(d.message, "load cycle: //a.star -> //b.star -> //a.star");
    assert_eq!(
        d.span,
        Some(SourceSpan {
            label: "//b.star".into(),
            line: 1,
            column: 6
        })
    );
    assert_eq!(
        run.requests.len(),
        2,
        "the cycle is caught before asking the host again"
    );
}

#[test]
fn entry_cycle_is_detected() {
    let d = diagnostic(
        run_with(
            "load(\"//a.star\", \"x\")\n",
            &[],
            &[("//a.star", &format!("load(\"{ENTRY}\", \"y\")\nx = 1\n"))],
            Budgets::default(),
        )
        .response,
    );
    assert_eq!(
        d.message,
        format!("load cycle: {ENTRY} -> //a.star -> {ENTRY}")
    );
}

#[test]
fn each_module_is_evaluated_once() {
    let run = run_with(
        &format!(
            "load(\"//a.star\", \"a\")\nload(\"//b.star\", \"b\")\n{}",
            entry("    return workflow(name = \"w\", nodes = [])")
        ),
        &[],
        &[
            ("//a.star", "load(\"//c.star\", \"c\")\na = c\n"),
            ("//b.star", "load(\"//c.star\", \"c\")\nb = c\n"),
            ("//c.star", "c = [1, 2]\n"),
        ],
        Budgets::default(),
    );
    workflow(run.response);
    let labels: Vec<&str> = run.requests.iter().map(|r| r.label.as_str()).collect();
    assert_eq!(labels, ["//a.star", "//c.star", "//b.star"]);
}

#[test]
fn host_refusal_is_reported_at_the_load() {
    let d = diagnostic(run("load(\"//missing.star\", \"x\")\n"));
    assert_eq!(d.code, "missing_module");
    assert_eq!(d.span, span(1, 6));
}

#[test]
fn errors_in_loaded_modules_name_that_module() {
    let d = diagnostic(
        run_with(
            "load(\"//a.star\", \"x\")\n",
            &[],
            &[("//a.star", "x = 1\ny = undefined_name\n")],
            Budgets::default(),
        )
        .response,
    );
    assert_eq!(
        d.span,
        Some(SourceSpan {
            label: "//a.star".into(),
            line: 2,
            column: 5
        }),
        "{d:#?}"
    );
}

#[test]
fn too_many_modules_is_a_budget_error() {
    let budgets = Budgets {
        module_count: 2,
        ..Budgets::default()
    };
    let d = diagnostic(
        run_with(
            "load(\"//a.star\", \"x\")\n",
            &[],
            &[
                ("//a.star", "load(\"//b.star\", \"y\")\nx = y\n"),
                ("//b.star", "y = 1\n"),
            ],
            budgets,
        )
        .response,
    );
    assert_budget(&d, "module_count", 2);
}

#[test]
fn deep_load_chain_is_a_budget_error() {
    let budgets = Budgets {
        module_depth: 2,
        ..Budgets::default()
    };
    let d = diagnostic(
        run_with(
            "load(\"//a.star\", \"x\")\n",
            &[],
            &[
                ("//a.star", "load(\"//b.star\", \"x\")\n"),
                ("//b.star", "load(\"//c.star\", \"x\")\n"),
                ("//c.star", "x = 1\n"),
            ],
            budgets,
        )
        .response,
    );
    assert_budget(&d, "module_depth", 2);
}

#[test]
fn unbounded_recursion_is_a_call_stack_budget_error() {
    let d = diagnostic(run("def f(n):\n    return f(n + 1)\nx = f(0)\n"));
    assert_budget(&d, "call_stack_depth", 25);
    assert!(d.span.is_some());
}

#[test]
fn huge_string_repeat_is_a_string_budget_error() {
    let d = diagnostic(run("x = 'a' * 1000000000\n"));
    assert_budget(&d, "string_bytes", 1_000_000);
    assert_eq!(d.measured(), 1_000_000_000);
    assert_eq!(d.span, span(1, 5));
    let d = diagnostic(run("def f():\n    return 'abc' * 2147483647\nx = f()\n"));
    assert_budget(&d, "string_bytes", 1_000_000);
}

#[test]
fn size_guards_apply_in_a_module_loaded_by_an_entry_without_operators() {
    // The entry has no `+` or `*` at all (its rewrite is skipped); the loaded module has one,
    // and its repeat must still be bounded.
    let entry_source = "load(\"//lib/bomb.star\", \"x\")\nWORKFLOW = x\n";
    let run = run_with(
        entry_source,
        &[],
        &[("//lib/bomb.star", "x = 'a' * 1000000000\n")],
        Budgets::default(),
    );
    let d = diagnostic(run.response);
    assert_budget(&d, "string_bytes", 1_000_000);
    assert_eq!(d.measured(), 1_000_000_000);
}

#[test]
fn power_operator_is_not_starlark() {
    // `10**9` is Python; Starlark rejects it before anything is allocated.
    assert_eq!(diagnostic(run("x = 'a' * 10**9\n")).code, "syntax");
}

#[test]
fn string_doubling_is_a_string_budget_error() {
    let d = diagnostic(run(
        "def f():\n    s = 'a' * 1000\n    for _ in range(40):\n        s = s + s\n    return s\nx = f()\n",
    ));
    assert_budget(&d, "string_bytes", 1_000_000);
}

#[test]
fn list_bomb_is_a_list_budget_error() {
    let d = diagnostic(run("x = [0] * 100000000\n"));
    assert_budget(&d, "list_items", 10_000);
    let d = diagnostic(run(
        "def f():\n    l = [0] * 10000\n    return l + l\nx = f()\n",
    ));
    assert_budget(&d, "list_items", 10_000);
}

#[test]
fn dict_bomb_is_a_dict_budget_error() {
    let src = entry(
        "    e = {\"e%d\" % i: status(\"a\") for i in range(20000)}\n    return workflow(name = \"w\", nodes = [], exports = e)",
    );
    assert_budget(&diagnostic(run(&src)), "dict_items", 10_000);
    let d = diagnostic(run(
        "def f():\n    return {i: i for i in range(20000)}\nx = f()\n",
    ));
    assert_budget(&d, "dict_items", 10_000);
}

#[test]
fn ten_thousand_nested_parentheses_are_a_nesting_budget_error() {
    let src = format!("x = {}1{}\n", "(".repeat(10_000), ")".repeat(10_000));
    let d = diagnostic(run(&src));
    assert_budget(&d, "source_nesting_depth", 100);
    assert_eq!(d.measured(), 10_000);
    assert_eq!(d.span, span(1, 105));
}

#[test]
fn deep_nesting_in_a_loaded_module_is_caught_before_parsing() {
    let deep = format!("x = {}1\n", "-".repeat(50_000));
    let d = diagnostic(
        run_with(
            "load(\"//a.star\", \"x\")\n",
            &[],
            &[("//a.star", &deep)],
            Budgets::default(),
        )
        .response,
    );
    assert_budget(&d, "source_nesting_depth", 100);
    assert_eq!(d.span.expect("span").label, "//a.star");
}

#[test]
fn long_loop_is_a_tick_budget_error() {
    let d = diagnostic(run(
        "def f():\n    n = 0\n    for i in range(100000000):\n        n += 1\n    return n\nx = f()\n",
    ));
    assert_budget(&d, "evaluator_ticks", 1_000_000);
}

#[test]
fn ticks_are_counted_across_modules() {
    let budgets = Budgets {
        evaluator_ticks: 30_000,
        ..Budgets::default()
    };
    let spin = "def spin():\n    for i in range(20000):\n        pass\n    return 1\nx = spin()\n";
    let d = diagnostic(
        run_with(
            &format!("load(\"//a.star\", \"x\")\n{spin}"),
            &[],
            &[("//a.star", spin)],
            budgets,
        )
        .response,
    );
    assert_budget(&d, "evaluator_ticks", 30_000);
    // Each module alone stays under the budget; only the sum exceeds it.
    let alone = run_with(
        spin,
        &[],
        &[],
        Budgets {
            evaluator_ticks: 30_000,
            ..Budgets::default()
        },
    );
    assert_eq!(diagnostic(alone.response).code, "missing_workflow");
}

#[test]
fn too_many_nodes_is_a_budget_error() {
    let budgets = Budgets {
        node_count: 5,
        ..Budgets::default()
    };
    let src = entry(
        "    nodes = [command(name = \"n%d\" % i, argv = [\"x\"], timeout_seconds = 1, max_output_bytes = 1) for i in range(6)]\n    return workflow(name = \"w\", nodes = nodes)",
    );
    let d = diagnostic(run_with(&src, &[], &[], budgets).response);
    assert_budget(&d, "node_count", 5);
    assert_eq!(d.measured(), 6);
}

#[test]
fn too_many_edges_is_a_budget_error() {
    let budgets = Budgets {
        edge_count: 3,
        ..Budgets::default()
    };
    let src = entry(
        "    a = command(name = \"a\", argv = [\"x\"], timeout_seconds = 1, max_output_bytes = 1)\n    b = command(name = \"b\", needs = [\"a\", \"a\", \"a\", \"a\"], argv = [\"x\"], timeout_seconds = 1, max_output_bytes = 1)\n    return workflow(name = \"w\", nodes = [a, b])",
    );
    assert_budget(
        &diagnostic(run_with(&src, &[], &[], budgets).response),
        "edge_count",
        3,
    );
}

#[test]
fn wall_time_budget_stops_evaluation() {
    let budgets = Budgets {
        planner_wall_ms: 1,
        evaluator_ticks: u64::MAX / 2,
        ..Budgets::default()
    };
    let src = "def f():\n    for i in range(1000000000):\n        pass\nx = f()\n";
    let d = diagnostic(run_with(src, &[], &[], budgets).response);
    assert_budget(&d, "planner_wall_ms", 1);
}

#[test]
fn oversized_inputs_are_budget_errors() {
    let budgets = Budgets {
        input_bytes: 10,
        ..Budgets::default()
    };
    let d = diagnostic(
        run_with(
            INPUTS,
            &[("pkg", Data::String("x".repeat(100)))],
            &[],
            budgets,
        )
        .response,
    );
    assert_budget(&d, "input_bytes", 10);
    let mut deep = Data::Int(1);
    for _ in 0..21 {
        deep = Data::List(vec![deep]);
    }
    let d = diagnostic(run_with(INPUTS, &[("pkg", deep)], &[], Budgets::default()).response);
    assert_budget(&d, "input_depth", 20);
}

#[test]
fn bad_values_name_their_path() {
    let d = diagnostic(run(
        "x = condition.equals(status(\"a\"), {\"k\": [1, 2.5]})\n",
    ));
    assert_eq!(d.code, "invalid_value");
    assert!(
        d.message
            .starts_with("condition.equals(value).k[1]: a float"),
        "{}",
        d.message
    );
    let d = diagnostic(run(
        "x = condition.is_one_of(status(\"a\"), [1, 99999999999999999999])\n",
    ));
    assert!(
        d.message
            .starts_with("condition.is_one_of(values)[1]: integers must fit"),
        "{}",
        d.message
    );
    let d = diagnostic(run("x = schema.enum([len])\n"));
    assert!(
        d.message.contains("schema.enum(members)[0]") && d.message.contains("function"),
        "{}",
        d.message
    );
}

#[test]
fn build_is_called_exactly_once_with_bound_inputs() {
    // A second call would append a second node and fail on the duplicate name.
    let src = "calls = []\ndef build(inputs):\n    calls.append(1)\n    return workflow(name = \"w\", nodes = [command(name = \"n%d\" % len(calls), argv = [\"x\", inputs[\"p\"]], timeout_seconds = 1, max_output_bytes = 1)])\nWORKFLOW = define(inputs = {\"p\": input.string(default = \"v\")}, build = build)\n";
    let w = workflow(run(src));
    assert_eq!(w.nodes.len(), 1);
    assert_eq!(w.nodes[0].name, "n1");
    assert_eq!(
        w.nodes[0].execution,
        EvaluatedExecution::Command {
            argv0: "x".into(),
            args: vec![Template::text("v")],
            cwd: ".".into()
        }
    );
}

#[test]
fn print_and_other_extensions_are_absent() {
    assert_eq!(diagnostic(run("print(1)\n")).code, "evaluation");
    assert_eq!(diagnostic(run("x = json.encode(1)\n")).code, "evaluation");
}

#[test]
fn raised_nesting_budget_still_parses_on_the_big_stack() {
    // A debug build parses 20,000 levels slowly on a loaded machine; this test is about depth,
    // so the wall-clock budget must not be what decides it.
    let budgets = Budgets {
        source_nesting_depth: 50_000,
        planner_wall_ms: 600_000,
        ..Budgets::default()
    };
    let parens = format!("x = {}1{}\n", "(".repeat(20_000), ")".repeat(20_000));
    assert_eq!(
        diagnostic(run_with(&parens, &[], &[], budgets.clone()).response).code,
        "missing_workflow"
    );
    let chain = format!("x = 1{}\n", " + 1".repeat(20_000));
    assert_eq!(
        diagnostic(run_with(&chain, &[], &[], budgets).response).code,
        "missing_workflow"
    );
}

#[test]
fn deeply_nested_module_values_are_refused_before_freezing() {
    let module = "def f():\n    x = []\n    for i in range(100000):\n        x = [x]\n    return x\ndeep = f()\n";
    let d = diagnostic(
        run_with(
            "load(\"//a.star\", \"deep\")\n",
            &[],
            &[("//a.star", module)],
            Budgets::default(),
        )
        .response,
    );
    assert_eq!(d.code, "value_too_deep", "{d:#?}");
    assert!(d.message.contains("\"deep\""), "{}", d.message);
}

mod worker_binary {
    //! The same language through the real, hardened worker executable.

    use std::io::Write as _;
    use std::process::{Command, Stdio};

    use rho_ipc::frame::{read_message, write_message};
    use rho_ipc::message::{
        Envelope, HostMessage, ModuleResponse, PROTOCOL_VERSION, PlanRequest, PlanResponse,
        WorkerMessage,
    };

    use super::{Budgets, COMMON, Data, ENTRY, FULL, assert_budget, diagnostic, workflow};

    /// Runs one plan conversation, answering module requests from `modules`; returns the
    /// final response and every label the worker asked for.
    fn converse(
        source: &str,
        inputs: &[(&str, Data)],
        modules: &[(&str, &str)],
    ) -> (PlanResponse, Vec<String>) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rho-planner-worker"))
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the worker");
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let mut stdout = child.stdout.take().expect("stdout is piped");

        let first: Envelope<WorkerMessage> = read_message(&mut stdout).expect("hardening report");
        assert_eq!(first.protocol_version, PROTOCOL_VERSION);
        let WorkerMessage::Hardening(report) = first.message else {
            panic!(
                "first message is not the hardening report: {:?}",
                first.message
            );
        };
        assert_eq!(report.refused, None, "the worker refused: {report:?}");

        let request = PlanRequest {
            entry_label: ENTRY.to_owned(),
            entry_source: source.to_owned(),
            inputs: inputs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
            budgets: Budgets::default(),
        };
        write_message(&mut stdin, &Envelope::new(HostMessage::Plan(request))).expect("send plan");
        let mut asked = Vec::new();
        let response = loop {
            let message: Envelope<WorkerMessage> = read_message(&mut stdout).expect("worker frame");
            match message.message {
                WorkerMessage::LoadModule(request) => {
                    asked.push(request.label.clone());
                    let source = modules
                        .iter()
                        .find(|(label, _)| *label == request.label)
                        .map(|(_, source)| (*source).to_owned())
                        .expect("the worker asks only for modules that exist");
                    let answer = ModuleResponse::Source {
                        label: request.label,
                        source,
                    };
                    write_message(&mut stdin, &Envelope::new(HostMessage::Module(answer)))
                        .expect("send module");
                }
                WorkerMessage::Planned(response) => break response,
                other => panic!("unexpected worker message {other:?}"),
            }
        };
        stdin.flush().expect("flush");
        drop(stdin);
        let output = child.wait_with_output().expect("wait for the worker");
        assert!(
            output.status.success(),
            "worker failed: {:?} {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        (response, asked)
    }

    #[test]
    fn hardened_worker_plans_a_workflow_with_a_load() {
        let (response, asked) = converse(
            FULL,
            &[("fast", Data::Bool(false)), ("level", Data::Int(3))],
            &[("//lib/common.star", COMMON)],
        );
        assert_eq!(asked, ["//lib/common.star"]);
        let w = workflow(response);
        assert_eq!(w.name, "check");
        let names: Vec<&str> = w.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["inspect", "review", "test", "build"]);
        assert_eq!(w.bound_inputs["target"], Data::String(".".into()));
    }

    #[test]
    fn hardened_worker_reports_bombs_as_budget_errors() {
        let (response, _) = converse("x = 'a' * 1000000000\n", &[], &[]);
        assert_budget(&diagnostic(response), "string_bytes", 1_000_000);
        let deep = format!("x = {}1{}\n", "(".repeat(10_000), ")".repeat(10_000));
        let (response, _) = converse(&deep, &[], &[]);
        assert_budget(&diagnostic(response), "source_nesting_depth", 100);
        let (response, _) = converse("def f(n):\n    return f(n + 1)\nx = f(0)\n", &[], &[]);
        assert_budget(&diagnostic(response), "call_stack_depth", 25);
    }
}

#[test]
fn command_and_shell_nodes_carry_access_network_and_the_workflow_capacity() {
    let w = workflow(run(&entry(
        "    a = command(name = \"a\", argv = [\"x\"], access = \"read_only\", network = \"none\", timeout_seconds = 1, max_output_bytes = 1)\n    b = shell(name = \"b\", executable = \"sh\", command = \"true\", access = \"mutating\", network = \"allowed\", timeout_seconds = 1, max_output_bytes = 1)\n    c = command(name = \"c\", argv = [\"x\"], timeout_seconds = 1, max_output_bytes = 1)\n    return workflow(name = \"w\", nodes = [a, b, c], max_parallel_commands = 8)",
    )));
    assert_eq!(w.max_parallel_commands, Some(8));
    assert_eq!(w.nodes[0].access, Some(Access::ReadOnly));
    assert_eq!(w.nodes[0].network, Some(Network::None));
    assert_eq!(w.nodes[1].access, Some(Access::Mutating));
    assert_eq!(w.nodes[1].network, Some(Network::Allowed));
    assert_eq!((w.nodes[2].access, w.nodes[2].network), (None, None));
    let plain = workflow(run(&entry(
        "    c = command(name = \"c\", argv = [\"x\"], timeout_seconds = 1, max_output_bytes = 1)\n    return workflow(name = \"w\", nodes = [c])",
    )));
    assert_eq!(plain.max_parallel_commands, None);
}

#[test]
fn workflow_capacity_must_be_a_positive_integer_within_the_limit() {
    for (value, expected) in [
        ("0", "positive integer"),
        ("\"4\"", "positive integer"),
        ("1025", "at most 1024"),
    ] {
        let d = diagnostic(run(&entry(&format!(
            "    c = command(name = \"c\", argv = [\"x\"], timeout_seconds = 1, max_output_bytes = 1)\n    return workflow(name = \"w\", nodes = [c], max_parallel_commands = {value})"
        ))));
        assert!(
            d.message.contains("workflow(max_parallel_commands)") && d.message.contains(expected),
            "{value}: {d:#?}"
        );
    }
}

/// An error raised inside a helper names the helper's line (the span) and the call site of
/// every function on the way there.
#[test]
fn errors_in_helpers_name_their_call_sites() {
    let lib = "def mk(name):\n    return command(name = name, argv = [\"true\"], timeout_seconds = -1)\n\ndef twice():\n    return [mk(\"a\"), mk(\"b\")]\n";
    let source = "load(\"//lib/steps.star\", \"twice\")\n\ndef build(inputs):\n    return workflow(name = \"w\", nodes = twice())\n\nWORKFLOW = define(inputs = {}, build = build)\n";
    let d = diagnostic(
        run_with(
            source,
            &[],
            &[("//lib/steps.star", lib)],
            Budgets::default(),
        )
        .response,
    );
    assert_eq!(
        d.span,
        Some(SourceSpan {
            label: "//lib/steps.star".to_owned(),
            line: 2,
            column: 12
        }),
        "{d:#?}"
    );
    assert!(
        d.message.ends_with(
            "; call stack, innermost first: `mk` called at lib/steps.star:5:13, `twice` called at \
             .rho/workflows/check/workflow.star:4:41"
        ),
        "{d:#?}"
    );
}

/// A misspelt named parameter of a builtin gets the list of valid ones and the closest.
#[test]
fn unknown_named_parameter_lists_the_valid_ones() {
    let d = diagnostic(run(&entry(
        "    return workflow(name = \"w\", nodes = [command(name = \"a\", argv = [\"true\"], timout_seconds = 5)])",
    )));
    assert_eq!(d.span, span(2, 42), "{d:#?}");
    assert!(
        d.message.contains(
            "`command` accepts name, argv, cwd, needs, when, allow_failure, output, \
             timeout_seconds, max_output_bytes, access, network"
        ) && d
            .message
            .contains("did you mean `timeout_seconds` for `timout_seconds`?"),
        "{d:#?}"
    );
    assert!(!d.message.contains("call stack"), "{d:#?}");
    // A missing required parameter lists them too.
    let d = diagnostic(run(&entry(
        "    return workflow(name = \"w\", nodes = [shell(name = \"a\", command = \"true\")])",
    )));
    assert!(
        d.message
            .starts_with("Missing parameter `executable` for call to `shell`")
            && d.message
                .contains("; `shell` accepts name, executable, arguments, command,"),
        "{d:#?}"
    );
}
