//! The top-level workflow builtins: `define`, `workflow`, the node constructors `agent`,
//! `command` and `shell`, `template`, and the references `output`, `status` and `exit_code`.
//!
//! Invariant: a node value exists only when every field shared by all node kinds and every
//! field of its kind has been checked against the rules and budgets.

use std::collections::BTreeMap;

use rho_ipc::evaluated::{EvaluatedExecution, EvaluatedNode};
use rho_ipc::program::{Access, Network, Reference, Schema, Template, TemplatePart};
use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::Value;

use super::super::convert::{self, Limits};
use super::super::fault::Fault;
use super::super::values::{Context, Define, InputDecls, Item, RhoValue, WorkflowValue};
use super::args::{
    check_name, condition_of, describe, expect_bool, expect_list, expect_positive, expect_str,
    given, kind_of, node_name, reference_of, schema_of, static_string, static_strings, template_of,
};
use super::bytes::{node_bytes, reference_bytes, template_bytes};
use super::{alloc, at_site, call_site};

/// The fields every node constructor shares.
pub(super) struct Common<'v> {
    name: Value<'v>,
    needs: Option<Value<'v>>,
    when: Option<Value<'v>>,
    allow_failure: Option<Value<'v>>,
    output: Option<Value<'v>>,
    timeout_seconds: Option<Value<'v>>,
    max_output_bytes: Option<Value<'v>>,
}

pub(super) fn build_node(
    eval: &Evaluator<'_, '_, '_>,
    ctx: &Context,
    kind: &str,
    common: &Common<'_>,
    access: Option<Access>,
    execution: EvaluatedExecution,
) -> Result<EvaluatedNode, Fault> {
    let limits = ctx.limits();
    let name = expect_str(common.name, limits, &format!("{kind}(name)"))?;
    check_name("node", name)?;
    let mut needs = Vec::new();
    if let Some(list) = given(common.needs) {
        for (i, item) in expect_list(list, limits, &format!("{kind}(needs)"))?
            .iter()
            .enumerate()
        {
            needs.push(node_name(*item, limits, &format!("{kind}(needs)[{i}]"))?);
        }
    }
    let when = match given(common.when) {
        Some(v) => Some(condition_of(v, &format!("{kind}(when)"))?),
        None => None,
    };
    let allow_failure = match given(common.allow_failure) {
        Some(v) => expect_bool(v, &format!("{kind}(allow_failure)"))?,
        None => false,
    };
    let output = match given(common.output) {
        Some(v) => {
            let (schema, optional) = schema_of(v, &format!("{kind}(output)"))?;
            if optional {
                return Err(Fault::new(
                    "invalid_schema",
                    format!(
                        "{kind}(output): schema.optional is allowed only directly as a record field"
                    ),
                ));
            }
            // Rho 1.47 reads a command's plain schema as its stdout JSON and unwraps
            // `stdout_json` on an agent; the frozen program says which explicitly.
            Some(match (kind, schema) {
                ("agent", Schema::StdoutJson { schema }) => *schema,
                ("agent", schema) | (_, schema @ Schema::StdoutJson { .. }) => schema,
                (_, schema) => Schema::StdoutJson {
                    schema: Box::new(schema),
                },
            })
        }
        None => None,
    };
    let timeout_seconds = expect_positive(
        required(common.timeout_seconds, kind, "timeout_seconds")?,
        &format!("{kind}(timeout_seconds)"),
    )?;
    Fault::check(&ctx.budgets, "node_timeout_seconds", timeout_seconds)?;
    let max_output_bytes = expect_positive(
        required(common.max_output_bytes, kind, "max_output_bytes")?,
        &format!("{kind}(max_output_bytes)"),
    )?;
    Fault::check(
        &ctx.budgets,
        "retained_output_per_stream_bytes",
        max_output_bytes,
    )?;
    Ok(EvaluatedNode {
        name: name.to_owned(),
        needs,
        when,
        allow_failure,
        access,
        network: None,
        timeout_seconds,
        max_output_bytes,
        output,
        execution,
        span: call_site(eval),
    })
}

/// A bound every node must state (Rho 1.47 declares it optional but fails planning without
/// it, and so do we, with a message that says so).
fn required<'v>(value: Option<Value<'v>>, kind: &str, what: &str) -> Result<Value<'v>, Fault> {
    given(value).ok_or_else(|| {
        Fault::new(
            "invalid_argument",
            format!("{kind}({what}) is required: every node states its {what}"),
        )
    })
}

pub(super) fn alloc_node<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    ctx: &Context,
    node: EvaluatedNode,
) -> Result<Value<'v>, Fault> {
    let bytes = node_bytes(&node);
    alloc(eval, ctx, Item::Node(Box::new(node)), bytes)
}

/// `access = "read_only" | "mutating"` on any node; `None` (or absent) is the default.
pub(super) fn access_of(kind: &str, access: Option<Value<'_>>) -> Result<Option<Access>, Fault> {
    match given(access) {
        None => Ok(None),
        Some(v) => match v.unpack_str() {
            Some("read_only") => Ok(Some(Access::ReadOnly)),
            Some("mutating") => Ok(Some(Access::Mutating)),
            _ => Err(Fault::new(
                "invalid_access",
                format!(
                    "{kind}(access) must be \"read_only\" or \"mutating\", got {}",
                    describe(v)
                ),
            )),
        },
    }
}

/// `network = "none" | "allowed"` on command and shell nodes.
pub(super) fn network_of(kind: &str, network: Option<Value<'_>>) -> Result<Option<Network>, Fault> {
    match given(network) {
        None => Ok(None),
        Some(v) => match v.unpack_str() {
            Some("none") => Ok(Some(Network::None)),
            Some("allowed") => Ok(Some(Network::Allowed)),
            _ => Err(Fault::new(
                "invalid_network",
                format!(
                    "{kind}(network) must be \"none\" or \"allowed\", got {}",
                    describe(v)
                ),
            )),
        },
    }
}

/// The most command and shell nodes a workflow may ask to run at once.
const MAX_PARALLEL_COMMANDS_LIMIT: u64 = 1024;

pub(super) fn make_reference<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    build: impl FnOnce(Limits) -> Result<Reference, Fault>,
) -> starlark::Result<Value<'v>> {
    at_site(eval, |eval, ctx| {
        let reference = build(ctx.limits())?;
        let bytes = reference_bytes(&reference);
        alloc(eval, ctx, Item::Reference(reference), bytes)
    })
}

#[starlark_module]
pub(super) fn workflow_functions(builder: &mut GlobalsBuilder) {
    /// Declares the workflow's inputs and its build function.
    fn define<'v>(
        inputs: Value<'v>,
        build: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        at_site(eval, |eval, ctx| {
            let limits = ctx.limits();
            let entries =
                convert::string_dict(inputs, limits, "define(inputs)")?.ok_or_else(|| {
                    Fault::new(
                        "invalid_argument",
                        format!(
                            "define(inputs) must be a dict of input declarations, got {}",
                            kind_of(inputs)
                        ),
                    )
                })?;
            let mut decls = BTreeMap::new();
            let mut bytes = 0;
            for (name, decl) in entries {
                check_name("input", &name)?;
                let Some(Item::Input(decl)) = RhoValue::item_of(decl) else {
                    return Err(Fault::new(
                        "invalid_argument",
                        format!(
                            "define(inputs)[{name:?}] must be an input declaration (input.*), got {}",
                            kind_of(decl)
                        ),
                    ));
                };
                bytes += name.len() as u64 + 64;
                decls.insert(name, decl.clone());
            }
            if build.parameters_spec().is_none() && build.function_name().is_none() {
                return Err(Fault::new(
                    "invalid_argument",
                    format!(
                        "define(build) must be a function of one argument, got {}",
                        build.get_type()
                    ),
                ));
            }
            let inputs = alloc(
                eval,
                ctx,
                Item::Inputs(InputDecls {
                    decls,
                    span: call_site(eval),
                }),
                bytes,
            )?;
            Ok(eval.heap().alloc(Define { inputs, build }))
        })
    }

    /// The workflow returned by `build`.
    fn workflow<'v>(
        name: Value<'v>,
        nodes: Value<'v>,
        exports: Option<Value<'v>>,
        #[starlark(require = named)] max_parallel_commands: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        at_site(eval, |eval, ctx| {
            let limits = ctx.limits();
            let name = expect_str(name, limits, "workflow(name)")?;
            let max_parallel_commands = match given(max_parallel_commands) {
                None => None,
                Some(v) => {
                    let n = expect_positive(v, "workflow(max_parallel_commands)")?;
                    if n > MAX_PARALLEL_COMMANDS_LIMIT {
                        return Err(Fault::new(
                            "invalid_argument",
                            format!(
                                "workflow(max_parallel_commands) must be at most \
                                 {MAX_PARALLEL_COMMANDS_LIMIT}, got {n}"
                            ),
                        ));
                    }
                    u32::try_from(n).ok()
                }
            };
            check_name("workflow", name)?;
            let items = expect_list(nodes, limits, "workflow(nodes)")?;
            Fault::check(&ctx.budgets, "node_count", items.len() as u64)?;
            let mut out: Vec<EvaluatedNode> = Vec::with_capacity(items.len());
            let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
            let mut edges = 0u64;
            let mut bytes = name.len() as u64;
            for (i, item) in items.iter().enumerate() {
                let Some(Item::Node(node)) = RhoValue::item_of(*item) else {
                    return Err(Fault::new(
                        "invalid_argument",
                        format!(
                            "workflow(nodes)[{i}] must be a node (agent, command or shell), got {}",
                            kind_of(*item)
                        ),
                    ));
                };
                if let Some(first) = seen.insert(node.name.as_str(), i) {
                    return Err(Fault::new(
                        "duplicate_node",
                        format!(
                            "duplicate node name {:?}: workflow(nodes)[{first}] and workflow(nodes)[{i}]",
                            node.name
                        ),
                    )
                    .or_at(node.span.clone()));
                }
                edges += node.needs.len() as u64;
                bytes += node_bytes(node);
                out.push((**node).clone());
            }
            Fault::check(&ctx.budgets, "edge_count", edges)?;
            let mut export_map = BTreeMap::new();
            if let Some(exports) = given(exports) {
                let entries = convert::string_dict(exports, limits, "workflow(exports)")?
                    .ok_or_else(|| {
                        Fault::new(
                            "invalid_argument",
                            format!("workflow(exports) must be a dict, got {}", kind_of(exports)),
                        )
                    })?;
                for (key, value) in entries {
                    check_name("export", &key)?;
                    let reference = reference_of(value, &format!("workflow(exports)[{key:?}]"))?;
                    bytes += reference_bytes(&reference) + key.len() as u64;
                    export_map.insert(key, reference);
                }
            }
            let value = WorkflowValue {
                name: name.to_owned(),
                nodes: out,
                exports: export_map,
                max_parallel_commands,
                span: call_site(eval),
            };
            alloc(eval, ctx, Item::Workflow(Box::new(value)), bytes)
        })
    }

    /// An agent node.
    #[allow(clippy::too_many_arguments)]
    fn agent<'v>(
        name: Value<'v>,
        agent: Value<'v>,
        prompt: Value<'v>,
        access: Option<Value<'v>>,
        needs: Option<Value<'v>>,
        when: Option<Value<'v>>,
        allow_failure: Option<Value<'v>>,
        output: Option<Value<'v>>,
        timeout_seconds: Option<Value<'v>>,
        max_output_bytes: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        at_site(eval, |eval, ctx| {
            let limits = ctx.limits();
            let agent_id = expect_str(agent, limits, "agent(agent)")?;
            if agent_id.is_empty() {
                return Err(Fault::new(
                    "invalid_argument",
                    "agent(agent) must name an agent definition",
                ));
            }
            let prompt = template_of(prompt, limits, "agent(prompt)")?;
            let access = access_of("agent", access)?;
            let common = Common {
                name,
                needs,
                when,
                allow_failure,
                output,
                timeout_seconds,
                max_output_bytes,
            };
            let execution = EvaluatedExecution::Agent {
                agent: agent_id.to_owned(),
                prompt,
            };
            let node = build_node(eval, ctx, "agent", &common, access, execution)?;
            alloc_node(eval, ctx, node)
        })
    }

    /// A direct-argv command node.
    #[allow(clippy::too_many_arguments)]
    fn command<'v>(
        name: Value<'v>,
        argv: Value<'v>,
        cwd: Option<Value<'v>>,
        needs: Option<Value<'v>>,
        when: Option<Value<'v>>,
        allow_failure: Option<Value<'v>>,
        output: Option<Value<'v>>,
        timeout_seconds: Option<Value<'v>>,
        max_output_bytes: Option<Value<'v>>,
        #[starlark(require = named)] access: Option<Value<'v>>,
        #[starlark(require = named)] network: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        at_site(eval, |eval, ctx| {
            let limits = ctx.limits();
            let access = access_of("command", access)?;
            let network = network_of("command", network)?;
            let items = expect_list(argv, limits, "command(argv)")?;
            let Some((first, rest)) = items.split_first() else {
                return Err(Fault::new(
                    "invalid_argument",
                    "command(argv) must not be empty",
                ));
            };
            let argv0 = static_string(*first, limits, "command(argv)[0]")?;
            if argv0.is_empty() {
                return Err(Fault::new(
                    "invalid_argument",
                    "command(argv)[0] must not be empty",
                ));
            }
            let args = rest
                .iter()
                .enumerate()
                .map(|(i, item)| template_of(*item, limits, &format!("command(argv)[{}]", i + 1)))
                .collect::<Result<Vec<_>, _>>()?;
            let cwd = match given(cwd) {
                Some(v) => static_string(v, limits, "command(cwd)")?,
                None => ".".to_owned(),
            };
            let common = Common {
                name,
                needs,
                when,
                allow_failure,
                output,
                timeout_seconds,
                max_output_bytes,
            };
            let execution = EvaluatedExecution::Command { argv0, args, cwd };
            let mut node = build_node(eval, ctx, "command", &common, access, execution)?;
            node.network = network;
            alloc_node(eval, ctx, node)
        })
    }

    /// An explicit shell node.
    #[allow(clippy::too_many_arguments)]
    fn shell<'v>(
        name: Value<'v>,
        executable: Value<'v>,
        arguments: Option<Value<'v>>,
        command: Option<Value<'v>>,
        cwd: Option<Value<'v>>,
        needs: Option<Value<'v>>,
        when: Option<Value<'v>>,
        allow_failure: Option<Value<'v>>,
        output: Option<Value<'v>>,
        timeout_seconds: Option<Value<'v>>,
        max_output_bytes: Option<Value<'v>>,
        #[starlark(require = named)] access: Option<Value<'v>>,
        #[starlark(require = named)] network: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        at_site(eval, |eval, ctx| {
            let limits = ctx.limits();
            let access = access_of("shell", access)?;
            let network = network_of("shell", network)?;
            let executable = static_string(executable, limits, "shell(executable)")?;
            if executable.is_empty() {
                return Err(Fault::new(
                    "invalid_argument",
                    "shell(executable) must not be empty",
                ));
            }
            let arguments = match given(arguments) {
                Some(v) => static_strings(v, limits, "shell(arguments)")?,
                None => Vec::new(),
            };
            let command = static_string(
                given(command).ok_or_else(|| {
                    Fault::new(
                        "invalid_argument",
                        "shell(command) is required: the shell source to run",
                    )
                })?,
                limits,
                "shell(command)",
            )?;
            let cwd = match given(cwd) {
                Some(v) => static_string(v, limits, "shell(cwd)")?,
                None => ".".to_owned(),
            };
            let common = Common {
                name,
                needs,
                when,
                allow_failure,
                output,
                timeout_seconds,
                max_output_bytes,
            };
            let execution = EvaluatedExecution::Shell {
                executable,
                arguments,
                command,
                cwd,
            };
            let mut node = build_node(eval, ctx, "shell", &common, access, execution)?;
            node.network = network;
            alloc_node(eval, ctx, node)
        })
    }

    /// Text and references rendered at run time.
    fn template<'v>(
        parts: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        at_site(eval, |eval, ctx| {
            let limits = ctx.limits();
            let items = expect_list(parts, limits, "template(parts)")?;
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let what = format!("template(parts)[{i}]");
                if let Some(s) = item.unpack_str() {
                    convert::check_string(limits, s.len())?;
                    out.push(TemplatePart::Text(s.to_owned()));
                    continue;
                }
                match RhoValue::item_of(*item) {
                    Some(Item::Reference(r)) => out.push(TemplatePart::Ref(r.clone())),
                    Some(Item::Template(t)) => out.extend(t.0.iter().cloned()),
                    _ => {
                        return Err(Fault::new(
                            "invalid_argument",
                            format!(
                                "{what} must be a string or a reference, got {}",
                                kind_of(*item)
                            ),
                        ));
                    }
                }
            }
            let template = Template(out).normalized();
            let text: u64 = template
                .0
                .iter()
                .map(|p| match p {
                    TemplatePart::Text(t) => t.len() as u64,
                    TemplatePart::Ref(_) => 0,
                })
                .sum();
            Fault::check(&ctx.budgets, "rendered_template_bytes", text)?;
            let bytes = template_bytes(&template);
            alloc(eval, ctx, Item::Template(template), bytes)
        })
    }

    /// A validated output value of `node`, by a path through record fields.
    fn output<'v>(
        node: Value<'v>,
        path: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        make_reference(eval, |limits| {
            let node = node_name(node, limits, "output(node)")?;
            let mut fields = Vec::new();
            if let Some(path) = given(path) {
                for (i, item) in expect_list(path, limits, "output(path)")?
                    .iter()
                    .enumerate()
                {
                    let field = expect_str(*item, limits, &format!("output(path)[{i}]"))?;
                    if field.is_empty() {
                        return Err(Fault::new(
                            "invalid_argument",
                            format!("output(path)[{i}] must not be empty"),
                        ));
                    }
                    fields.push(field.to_owned());
                }
            }
            Ok(Reference::Output { node, path: fields })
        })
    }

    /// The terminal state of `node`.
    fn status<'v>(
        node: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        make_reference(eval, |limits| {
            Ok(Reference::Status {
                node: node_name(node, limits, "status(node)")?,
            })
        })
    }

    /// The exit code of the command `node`.
    fn exit_code<'v>(
        node: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        make_reference(eval, |limits| {
            Ok(Reference::ExitCode {
                node: node_name(node, limits, "exit_code(node)")?,
            })
        })
    }
}
