//! The Starlark globals of the workflow language: `define`, `workflow`, `agent`, `command`,
//! `shell`, `template`, `output`, `status`, `exit_code` and the `input`, `schema` and
//! `condition` namespaces, plus the size-checked operators that replace `*` and `+`.
//!
//! Invariant: every builtin validates its arguments completely before it returns a value
//! (names, required fields, budgets, placement rules), reports faults at its call site, and
//! charges the bytes it keeps on the Rust heap to `evaluator_heap_bytes`, which the Starlark
//! heap limit alone would not see.

use std::collections::{BTreeMap, BTreeSet};

use rho_ipc::budget::Budgets;
use rho_ipc::data::Data;
use rho_ipc::evaluated::{EvaluatedExecution, EvaluatedNode, SourceSpan};
use rho_ipc::program::{
    Access, Condition, InputDecl, InputType, RecordField, Reference, Schema, Template, TemplatePart,
};
use starlark::environment::{Globals, GlobalsBuilder};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::list::ListRef;
use starlark::values::tuple::TupleRef;
use starlark::values::{UnpackValue, Value};

use super::convert::{self, Limits};
use super::fault::{Fault, source_span};
use super::values::{Context, Define, InputDecls, Item, RhoValue, WorkflowValue};

/// Global names that `*` and `+` are rewritten to (see [`operator_rewrites`]).
pub(crate) const MUL_GUARD: &str = "__rho_checked_mul__";
/// See [`MUL_GUARD`].
pub(crate) const ADD_GUARD: &str = "__rho_checked_add__";

/// The operator rewrites applied to every parsed module: a native `*` or `+` allocates its
/// whole result in one step that tick and heap checks cannot interrupt (`'a' * 1000000000`),
/// so both go through builtins that check the result size first.
pub(crate) fn operator_rewrites() -> std::collections::HashMap<String, String> {
    [
        ("*".to_owned(), MUL_GUARD.to_owned()),
        ("+".to_owned(), ADD_GUARD.to_owned()),
    ]
    .into_iter()
    .collect()
}

fn context<'a>(eval: &Evaluator<'_, 'a, '_>) -> Result<&'a Context, Fault> {
    eval.extra
        .and_then(|extra| extra.downcast_ref::<Context>())
        .ok_or_else(|| Fault::new("internal", "workflow builtins called without their context"))
}

/// Where the builtin being run was called from.
fn call_site(eval: &Evaluator<'_, '_, '_>) -> Option<SourceSpan> {
    eval.call_stack_top_location()
        .map(|span| source_span(&span))
}

/// Runs a builtin body and reports its faults at the call site.
fn at_site<'v, T>(
    eval: &mut Evaluator<'v, '_, '_>,
    body: impl FnOnce(&mut Evaluator<'v, '_, '_>, &Context) -> Result<T, Fault>,
) -> starlark::Result<T> {
    let site = call_site(eval);
    let ctx = context(eval).map_err(|f| f.or_at(site.clone()))?;
    body(eval, ctx).map_err(|fault| fault.or_at(site).into())
}

fn alloc<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    ctx: &Context,
    item: Item,
    bytes: u64,
) -> Result<Value<'v>, Fault> {
    ctx.charge(bytes.saturating_add(64))?;
    Ok(eval.heap().alloc(RhoValue { item }))
}

/// Shortens user text for messages.
fn clip(text: &str) -> String {
    const MAX: usize = 80;
    if text.len() <= MAX {
        return text.to_owned();
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes)", &text[..end], text.len())
}

/// Checks the name rule: 1 to 63 ASCII bytes, `[a-z][a-z0-9_-]*`.
pub(crate) fn check_name(what: &str, name: &str) -> Result<(), Fault> {
    let bytes = name.as_bytes();
    let ok = !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_lowercase()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'-');
    if ok {
        Ok(())
    } else {
        Err(Fault::new(
            "invalid_name",
            format!(
                "invalid {what} name {:?}: names are 1 to 63 ASCII bytes, start with a-z and \
                 continue with a-z, 0-9, `_` or `-`",
                clip(name)
            ),
        ))
    }
}

fn expect_str<'v>(value: Value<'v>, limits: Limits, what: &str) -> Result<&'v str, Fault> {
    match value.unpack_str() {
        Some(s) => {
            convert::check_string(limits, s.len())?;
            Ok(s)
        }
        None => Err(Fault::new(
            "invalid_argument",
            format!("{what} must be a string, got {}", value.get_type()),
        )),
    }
}

fn expect_list<'v>(value: Value<'v>, limits: Limits, what: &str) -> Result<&'v [Value<'v>], Fault> {
    convert::sequence(value, limits)?.ok_or_else(|| {
        Fault::new(
            "invalid_argument",
            format!("{what} must be a list, got {}", value.get_type()),
        )
    })
}

fn expect_bool(value: Value<'_>, what: &str) -> Result<bool, Fault> {
    value.unpack_bool().ok_or_else(|| {
        Fault::new(
            "invalid_argument",
            format!("{what} must be a bool, got {}", value.get_type()),
        )
    })
}

fn expect_positive(value: Value<'_>, what: &str) -> Result<u64, Fault> {
    let n = if value.get_type() == "int" {
        i64::unpack_value(value).ok().flatten()
    } else {
        None
    };
    match n {
        Some(n) if n > 0 => Ok(n.unsigned_abs()),
        _ => Err(Fault::new(
            "invalid_argument",
            format!("{what} must be a positive integer, got {}", describe(value)),
        )),
    }
}

fn describe(value: Value<'_>) -> String {
    if value.get_type() == "int" || value.unpack_bool().is_some() || value.is_none() {
        clip(&value.to_repr())
    } else if let Some(s) = value.unpack_str() {
        format!("string {:?}", clip(s))
    } else {
        value.get_type().to_owned()
    }
}

/// `None` and an absent argument mean the same.
fn given(value: Option<Value<'_>>) -> Option<Value<'_>> {
    value.filter(|v| !v.is_none())
}

fn schema_of(value: Value<'_>, what: &str) -> Result<(Schema, bool), Fault> {
    match RhoValue::item_of(value) {
        Some(Item::Schema { schema, optional }) => Ok((schema.clone(), *optional)),
        _ => Err(Fault::new(
            "invalid_schema",
            format!("{what} must be a schema (schema.*), got {}", kind_of(value)),
        )),
    }
}

fn kind_of(value: Value<'_>) -> String {
    match RhoValue::item_of(value) {
        Some(item) => item.kind().to_owned(),
        None => value.get_type().to_owned(),
    }
}

/// A schema used anywhere but directly as a record field or a node output.
fn nested_schema(value: Value<'_>, what: &str) -> Result<Schema, Fault> {
    let (schema, optional) = schema_of(value, what)?;
    if optional {
        return Err(Fault::new(
            "invalid_schema",
            format!("{what}: schema.optional is allowed only directly as a record field"),
        ));
    }
    if matches!(schema, Schema::StdoutJson { .. }) {
        return Err(Fault::new(
            "invalid_schema",
            format!(
                "{what}: schema.stdout_json is allowed only as a command or shell node's output"
            ),
        ));
    }
    Ok(schema)
}

/// Nesting depth of a schema: scalars and enums are 1, lists and records one more than
/// their deepest part; `stdout_json` adds nothing.
pub(crate) fn schema_depth(schema: &Schema) -> u64 {
    let mut max = 0;
    let mut stack = vec![(schema, 1u64)];
    while let Some((s, d)) = stack.pop() {
        max = max.max(d);
        match s {
            Schema::List { items } => stack.push((items, d + 1)),
            Schema::Record { fields } => stack.extend(fields.values().map(|f| (&f.schema, d + 1))),
            Schema::StdoutJson { schema } => stack.push((schema, d)),
            _ => {}
        }
    }
    max
}

fn schema_bytes(schema: &Schema) -> u64 {
    let mut total = 0u64;
    let mut stack = vec![schema];
    while let Some(s) = stack.pop() {
        total += 16;
        match s {
            Schema::Enum { members } => total += members.iter().map(data_bytes).sum::<u64>(),
            Schema::List { items } => stack.push(items),
            Schema::Record { fields } => {
                for (name, field) in fields {
                    total += name.len() as u64;
                    stack.push(&field.schema);
                }
            }
            Schema::StdoutJson { schema } => stack.push(schema),
            _ => {}
        }
    }
    total
}

fn data_bytes(data: &Data) -> u64 {
    let mut total = 0u64;
    let mut stack = vec![data];
    while let Some(d) = stack.pop() {
        total += 16;
        match d {
            Data::String(s) => total += s.len() as u64,
            Data::List(items) => stack.extend(items.iter()),
            Data::Map(map) => {
                for (k, v) in map {
                    total += k.len() as u64;
                    stack.push(v);
                }
            }
            _ => {}
        }
    }
    total
}

fn template_bytes(template: &Template) -> u64 {
    template
        .0
        .iter()
        .map(|p| match p {
            TemplatePart::Text(t) => t.len() as u64 + 16,
            TemplatePart::Ref(r) => reference_bytes(r),
        })
        .sum()
}

fn reference_bytes(reference: &Reference) -> u64 {
    match reference {
        Reference::Output { node, path } => {
            32 + node.len() as u64 + path.iter().map(|p| p.len() as u64 + 16).sum::<u64>()
        }
        Reference::Status { node } | Reference::ExitCode { node } => 32 + node.len() as u64,
    }
}

fn condition_bytes(condition: &Condition) -> u64 {
    let mut total = 0u64;
    let mut stack = vec![condition];
    while let Some(c) = stack.pop() {
        total += 32;
        match c {
            Condition::Equals { reference, value } => {
                total += reference_bytes(reference) + data_bytes(value);
            }
            Condition::IsOneOf { reference, values } => {
                total += reference_bytes(reference) + values.iter().map(data_bytes).sum::<u64>();
            }
            Condition::All { conditions } | Condition::Any { conditions } => {
                stack.extend(conditions);
            }
            Condition::Not { condition } => stack.push(condition),
        }
    }
    total
}

fn node_bytes(node: &EvaluatedNode) -> u64 {
    let mut total = 128 + node.name.len() as u64;
    total += node.needs.iter().map(|n| n.len() as u64 + 24).sum::<u64>();
    total += node.when.as_ref().map_or(0, condition_bytes);
    total += node.output.as_ref().map_or(0, schema_bytes);
    total += match &node.execution {
        EvaluatedExecution::Agent { agent, prompt } => agent.len() as u64 + template_bytes(prompt),
        EvaluatedExecution::Command { argv0, args, cwd } => {
            argv0.len() as u64 + cwd.len() as u64 + args.iter().map(template_bytes).sum::<u64>()
        }
        EvaluatedExecution::Shell {
            executable,
            arguments,
            command,
            cwd,
        } => {
            (executable.len() + command.len() + cwd.len()) as u64
                + arguments.iter().map(|a| a.len() as u64 + 24).sum::<u64>()
        }
    };
    total
}

/// A node name given as a string or as a node value.
fn node_name(value: Value<'_>, limits: Limits, what: &str) -> Result<String, Fault> {
    if let Some(Item::Node(node)) = RhoValue::item_of(value) {
        return Ok(node.name.clone());
    }
    let name = value.unpack_str().ok_or_else(|| {
        Fault::new(
            "invalid_argument",
            format!("{what} must be a node name, got {}", kind_of(value)),
        )
    })?;
    convert::check_string(limits, name.len())?;
    check_name("node", name)?;
    Ok(name.to_owned())
}

fn reference_of(value: Value<'_>, what: &str) -> Result<Reference, Fault> {
    match RhoValue::item_of(value) {
        Some(Item::Reference(r)) => Ok(r.clone()),
        _ => Err(Fault::new(
            "invalid_argument",
            format!(
                "{what} must be a reference (output(...), status(...) or exit_code(...)), got {}",
                kind_of(value)
            ),
        )),
    }
}

fn condition_of(value: Value<'_>, what: &str) -> Result<Condition, Fault> {
    match RhoValue::item_of(value) {
        Some(Item::Condition(c)) => Ok(c.clone()),
        _ => Err(Fault::new(
            "invalid_argument",
            format!(
                "{what} must be a condition (condition.*), got {}",
                kind_of(value)
            ),
        )),
    }
}

/// A string, template or bare reference as a template.
fn template_of(value: Value<'_>, limits: Limits, what: &str) -> Result<Template, Fault> {
    if let Some(s) = value.unpack_str() {
        convert::check_string(limits, s.len())?;
        return Ok(Template::text(s));
    }
    match RhoValue::item_of(value) {
        Some(Item::Template(t)) => Ok(t.clone()),
        Some(Item::Reference(r)) => Ok(Template(vec![TemplatePart::Ref(r.clone())])),
        _ => Err(Fault::new(
            "invalid_argument",
            format!(
                "{what} must be a string or a template, got {}",
                kind_of(value)
            ),
        )),
    }
}

fn check_condition_depth(budgets: &Budgets, condition: &Condition) -> Result<(), Fault> {
    Fault::check(budgets, "condition_depth", condition.depth() as u64)
}

fn scalar_members(value: Value<'_>, limits: Limits, what: &str) -> Result<Vec<Data>, Fault> {
    let items = expect_list(value, limits, what)?;
    if items.is_empty() {
        return Err(Fault::new(
            "invalid_enum",
            format!("{what} must list at least one member"),
        ));
    }
    let mut members = Vec::with_capacity(items.len());
    let mut seen = BTreeSet::new();
    for (i, item) in items.iter().enumerate() {
        let data = convert::to_data(*item, limits, &format!("{what}[{i}]"))?;
        if !data.is_scalar() {
            return Err(Fault::new(
                "invalid_enum",
                format!(
                    "{what}[{i}]: enum members must be None, bool, integer or string, got {}",
                    data.kind()
                ),
            ));
        }
        if !seen.insert(data.clone()) {
            return Err(Fault::new(
                "invalid_enum",
                format!("{what}[{i}]: duplicate enum member {data}"),
            ));
        }
        members.push(data);
    }
    Ok(members)
}

/// The fields every node constructor shares.
struct Common<'v> {
    name: Value<'v>,
    needs: Option<Value<'v>>,
    when: Option<Value<'v>>,
    allow_failure: Option<Value<'v>>,
    output: Option<Value<'v>>,
    timeout_seconds: Value<'v>,
    max_output_bytes: Value<'v>,
}

fn build_node(
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
            if kind == "agent" && matches!(schema, Schema::StdoutJson { .. }) {
                return Err(Fault::new(
                    "invalid_schema",
                    "agent(output): schema.stdout_json is allowed only as a command or shell node's output",
                ));
            }
            Some(schema)
        }
        None => None,
    };
    let timeout_seconds =
        expect_positive(common.timeout_seconds, &format!("{kind}(timeout_seconds)"))?;
    Fault::check(&ctx.budgets, "node_timeout_seconds", timeout_seconds)?;
    let max_output_bytes = expect_positive(
        common.max_output_bytes,
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
        timeout_seconds,
        max_output_bytes,
        output,
        execution,
        span: call_site(eval),
    })
}

fn alloc_node<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    ctx: &Context,
    node: EvaluatedNode,
) -> Result<Value<'v>, Fault> {
    let bytes = node_bytes(&node);
    alloc(eval, ctx, Item::Node(Box::new(node)), bytes)
}

fn reject_access(kind: &str, access: Option<Value<'_>>) -> Result<(), Fault> {
    if access.is_some() {
        return Err(Fault::new(
            "invalid_access",
            format!("{kind} nodes are always mutating; `access` is accepted only on agent nodes"),
        ));
    }
    Ok(())
}

fn static_strings(value: Value<'_>, limits: Limits, what: &str) -> Result<Vec<String>, Fault> {
    let items = expect_list(value, limits, what)?;
    items
        .iter()
        .enumerate()
        .map(|(i, item)| static_string(*item, limits, &format!("{what}[{i}]")))
        .collect()
}

fn static_string(value: Value<'_>, limits: Limits, what: &str) -> Result<String, Fault> {
    if let Some(Item::Template(_) | Item::Reference(_)) = RhoValue::item_of(value) {
        return Err(Fault::new(
            "invalid_argument",
            format!("{what} must be a static string; output references are not allowed here"),
        ));
    }
    Ok(expect_str(value, limits, what)?.to_owned())
}

fn input_default(
    value: Option<Value<'_>>,
    limits: Limits,
    ty: &InputType,
    what: &str,
) -> Result<Option<Data>, Fault> {
    let Some(value) = given(value) else {
        return Ok(None);
    };
    let data = convert::to_data(value, limits, &format!("{what}(default)"))?;
    check_input_value(ty, &data).map_err(|expected| {
        Fault::new(
            "invalid_default",
            format!(
                "{what}(default): the default must be {expected}, got {}",
                describe_data(&data)
            ),
        )
    })?;
    Ok(Some(data))
}

/// Checks a value against an input type; `Err` says what was expected.
pub(crate) fn check_input_value(ty: &InputType, data: &Data) -> Result<(), String> {
    match (ty, data) {
        (InputType::String, Data::String(_))
        | (InputType::Integer, Data::Int(_))
        | (InputType::Bool, Data::Bool(_)) => Ok(()),
        (InputType::String, _) => Err("a string".to_owned()),
        (InputType::Integer, _) => Err("an integer".to_owned()),
        (InputType::Bool, _) => Err("a bool".to_owned()),
        (InputType::Enum { members }, d) => {
            if members.contains(d) {
                Ok(())
            } else {
                let list: Vec<String> = members.iter().map(describe_data).collect();
                Err(format!("one of {}", list.join(", ")))
            }
        }
    }
}

/// A short rendering of data for messages.
pub(crate) fn describe_data(data: &Data) -> String {
    match data {
        Data::List(_) | Data::Map(_) => data.kind().to_owned(),
        Data::String(s) => format!("{:?}", clip(s)),
        other => other.to_string(),
    }
}

fn make_input<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    ty: InputType,
    default: Option<Value<'v>>,
    what: &str,
) -> starlark::Result<Value<'v>> {
    at_site(eval, |eval, ctx| {
        let default = input_default(default, ctx.limits(), &ty, what)?;
        let bytes = default.as_ref().map_or(0, data_bytes)
            + match &ty {
                InputType::Enum { members } => members.iter().map(data_bytes).sum(),
                _ => 0,
            };
        alloc(eval, ctx, Item::Input(InputDecl { ty, default }), bytes)
    })
}

fn make_enum_input<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    members: Value<'v>,
    default: Option<Value<'v>>,
    what: &str,
) -> starlark::Result<Value<'v>> {
    let site = call_site(eval);
    let members = context(eval)
        .and_then(|ctx| scalar_members(members, ctx.limits(), &format!("{what}(members)")))
        .map_err(|f| f.or_at(site))?;
    make_input(eval, InputType::Enum { members }, default, what)
}

fn make_schema<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    build: impl FnOnce(&Context) -> Result<(Schema, bool), Fault>,
) -> starlark::Result<Value<'v>> {
    at_site(eval, |eval, ctx| {
        let (schema, optional) = build(ctx)?;
        Fault::check(&ctx.budgets, "schema_depth", schema_depth(&schema))?;
        let bytes = schema_bytes(&schema);
        Fault::check(&ctx.budgets, "schema_bytes", bytes)?;
        alloc(eval, ctx, Item::Schema { schema, optional }, bytes)
    })
}

fn make_enum_schema<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    members: Value<'v>,
) -> starlark::Result<Value<'v>> {
    make_schema(eval, |ctx| {
        let members = scalar_members(members, ctx.limits(), "schema.enum(members)")?;
        Ok((Schema::Enum { members }, false))
    })
}

fn make_condition<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    build: impl FnOnce(&Context) -> Result<Condition, Fault>,
) -> starlark::Result<Value<'v>> {
    at_site(eval, |eval, ctx| {
        let condition = build(ctx)?;
        check_condition_depth(&ctx.budgets, &condition)?;
        let bytes = condition_bytes(&condition);
        alloc(eval, ctx, Item::Condition(condition), bytes)
    })
}

fn make_not<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    condition: Value<'v>,
) -> starlark::Result<Value<'v>> {
    make_condition(eval, |_| {
        Ok(Condition::Not {
            condition: Box::new(condition_of(condition, "condition.not_(condition)")?),
        })
    })
}

fn condition_list(value: Value<'_>, limits: Limits, what: &str) -> Result<Vec<Condition>, Fault> {
    let items = expect_list(value, limits, what)?;
    if items.is_empty() {
        return Err(Fault::new(
            "invalid_condition",
            format!("{what} must hold at least one condition"),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| condition_of(*item, &format!("{what}[{i}]")))
        .collect()
}

fn make_reference<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    build: impl FnOnce(Limits) -> Result<Reference, Fault>,
) -> starlark::Result<Value<'v>> {
    at_site(eval, |eval, ctx| {
        let reference = build(ctx.limits())?;
        let bytes = reference_bytes(&reference);
        alloc(eval, ctx, Item::Reference(reference), bytes)
    })
}

/// Size of `s * n` for a string, list or tuple `s`, or `None` when it is another operation.
fn repeat_size(a: Value<'_>, b: Value<'_>) -> Option<(&'static str, u64)> {
    let count = |v: Value<'_>| -> Option<u64> {
        if v.get_type() != "int" {
            return None;
        }
        // Counts beyond i32 make Starlark's own `*` fail cleanly, so report them as huge.
        Some(
            i64::unpack_value(v)
                .ok()
                .flatten()
                .map_or(u64::MAX, |n| n.max(0).unsigned_abs()),
        )
    };
    let len = |v: Value<'_>| -> Option<(&'static str, u64)> {
        if let Some(s) = v.unpack_str() {
            return Some(("string_bytes", s.len() as u64));
        }
        if let Some(l) = ListRef::from_value(v) {
            return Some(("list_items", l.len() as u64));
        }
        TupleRef::from_value(v).map(|t| ("list_items", t.len() as u64))
    };
    if let (Some((budget, n)), Some(k)) = (len(a), count(b)) {
        return Some((budget, n.saturating_mul(k)));
    }
    if let (Some(k), Some((budget, n))) = (count(a), len(b)) {
        return Some((budget, n.saturating_mul(k)));
    }
    None
}

/// Size of `a + b` for two strings, lists or tuples.
fn concat_size(a: Value<'_>, b: Value<'_>) -> Option<(&'static str, u64)> {
    if let (Some(x), Some(y)) = (a.unpack_str(), b.unpack_str()) {
        return Some(("string_bytes", (x.len() + y.len()) as u64));
    }
    let items = |v: Value<'_>| -> Option<u64> {
        ListRef::from_value(v)
            .map(|l| l.len() as u64)
            .or_else(|| TupleRef::from_value(v).map(|t| t.len() as u64))
    };
    match (items(a), items(b)) {
        (Some(x), Some(y)) => Some(("list_items", x + y)),
        _ => None,
    }
}

fn checked_size(
    eval: &Evaluator<'_, '_, '_>,
    size: Option<(&'static str, u64)>,
) -> starlark::Result<()> {
    if let Some((budget, measured)) = size {
        let site = call_site(eval);
        let ctx = context(eval).map_err(|f| f.or_at(site.clone()))?;
        Fault::check(&ctx.budgets, budget, measured).map_err(|f| f.or_at(site))?;
    }
    Ok(())
}

#[starlark_module]
fn operator_guards(builder: &mut GlobalsBuilder) {
    fn __rho_checked_mul__<'v>(
        a: Value<'v>,
        b: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        checked_size(eval, repeat_size(a, b))?;
        a.mul(b, eval.heap())
    }

    fn __rho_checked_add__<'v>(
        a: Value<'v>,
        b: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        checked_size(eval, concat_size(a, b))?;
        a.add(b, eval.heap())
    }
}

#[starlark_module]
fn workflow_functions(builder: &mut GlobalsBuilder) {
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
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        at_site(eval, |eval, ctx| {
            let limits = ctx.limits();
            let name = expect_str(name, limits, "workflow(name)")?;
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
                span: call_site(eval),
            };
            alloc(eval, ctx, Item::Workflow(Box::new(value)), bytes)
        })
    }

    /// An agent node.
    #[allow(clippy::too_many_arguments)]
    fn agent<'v>(
        #[starlark(require = named)] name: Value<'v>,
        #[starlark(require = named)] agent: Value<'v>,
        #[starlark(require = named)] prompt: Value<'v>,
        #[starlark(require = named)] timeout_seconds: Value<'v>,
        #[starlark(require = named)] max_output_bytes: Value<'v>,
        #[starlark(require = named)] access: Option<Value<'v>>,
        #[starlark(require = named)] needs: Option<Value<'v>>,
        #[starlark(require = named)] when: Option<Value<'v>>,
        #[starlark(require = named)] allow_failure: Option<Value<'v>>,
        #[starlark(require = named)] output: Option<Value<'v>>,
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
            let access = match given(access) {
                None => None,
                Some(v) => match v.unpack_str() {
                    Some("read_only") => Some(Access::ReadOnly),
                    Some("mutating") => Some(Access::Mutating),
                    _ => {
                        return Err(Fault::new(
                            "invalid_access",
                            format!(
                                "agent(access) must be \"read_only\" or \"mutating\", got {}",
                                describe(v)
                            ),
                        ));
                    }
                },
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
        #[starlark(require = named)] name: Value<'v>,
        #[starlark(require = named)] argv: Value<'v>,
        #[starlark(require = named)] timeout_seconds: Value<'v>,
        #[starlark(require = named)] max_output_bytes: Value<'v>,
        #[starlark(require = named)] cwd: Option<Value<'v>>,
        #[starlark(require = named)] needs: Option<Value<'v>>,
        #[starlark(require = named)] when: Option<Value<'v>>,
        #[starlark(require = named)] allow_failure: Option<Value<'v>>,
        #[starlark(require = named)] output: Option<Value<'v>>,
        #[starlark(require = named)] access: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        at_site(eval, |eval, ctx| {
            let limits = ctx.limits();
            reject_access("command", access)?;
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
            let node = build_node(eval, ctx, "command", &common, None, execution)?;
            alloc_node(eval, ctx, node)
        })
    }

    /// An explicit shell node.
    #[allow(clippy::too_many_arguments)]
    fn shell<'v>(
        #[starlark(require = named)] name: Value<'v>,
        #[starlark(require = named)] executable: Value<'v>,
        #[starlark(require = named)] command: Value<'v>,
        #[starlark(require = named)] timeout_seconds: Value<'v>,
        #[starlark(require = named)] max_output_bytes: Value<'v>,
        #[starlark(require = named)] arguments: Option<Value<'v>>,
        #[starlark(require = named)] cwd: Option<Value<'v>>,
        #[starlark(require = named)] needs: Option<Value<'v>>,
        #[starlark(require = named)] when: Option<Value<'v>>,
        #[starlark(require = named)] allow_failure: Option<Value<'v>>,
        #[starlark(require = named)] output: Option<Value<'v>>,
        #[starlark(require = named)] access: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        at_site(eval, |eval, ctx| {
            let limits = ctx.limits();
            reject_access("shell", access)?;
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
            let command = static_string(command, limits, "shell(command)")?;
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
            let node = build_node(eval, ctx, "shell", &common, None, execution)?;
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

#[starlark_module]
fn input_functions(builder: &mut GlobalsBuilder) {
    /// A string input.
    fn string<'v>(
        #[starlark(require = named)] default: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        make_input(eval, InputType::String, default, "input.string")
    }

    /// An integer input.
    fn integer<'v>(
        #[starlark(require = named)] default: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        make_input(eval, InputType::Integer, default, "input.integer")
    }

    /// A bool input.
    fn bool<'v>(
        #[starlark(require = named)] default: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        make_input(eval, InputType::Bool, default, "input.bool")
    }

    /// An input whose value is one of `members`.
    fn r#enum<'v>(
        members: Value<'v>,
        #[starlark(require = named)] default: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        make_enum_input(eval, members, default, "input.enum")
    }

    /// The same as `input.enum`.
    fn enum_<'v>(
        members: Value<'v>,
        #[starlark(require = named)] default: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        make_enum_input(eval, members, default, "input.enum_")
    }
}

#[starlark_module]
fn schema_functions(builder: &mut GlobalsBuilder) {
    /// JSON null.
    fn null<'v>(eval: &mut Evaluator<'v, '_, '_>) -> starlark::Result<Value<'v>> {
        make_schema(eval, |_| Ok((Schema::Null, false)))
    }

    /// A boolean.
    fn bool<'v>(eval: &mut Evaluator<'v, '_, '_>) -> starlark::Result<Value<'v>> {
        make_schema(eval, |_| Ok((Schema::Bool, false)))
    }

    /// A signed 64-bit integer.
    fn integer<'v>(eval: &mut Evaluator<'v, '_, '_>) -> starlark::Result<Value<'v>> {
        make_schema(eval, |_| Ok((Schema::Integer, false)))
    }

    /// A string.
    fn string<'v>(eval: &mut Evaluator<'v, '_, '_>) -> starlark::Result<Value<'v>> {
        make_schema(eval, |_| Ok((Schema::String, false)))
    }

    /// One of the scalar `members`.
    fn r#enum<'v>(
        members: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        make_enum_schema(eval, members)
    }

    /// The same as `schema.enum`.
    fn enum_<'v>(
        members: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        make_enum_schema(eval, members)
    }

    /// A list of `items`.
    fn list<'v>(items: Value<'v>, eval: &mut Evaluator<'v, '_, '_>) -> starlark::Result<Value<'v>> {
        make_schema(eval, |_| {
            Ok((
                Schema::List {
                    items: Box::new(nested_schema(items, "schema.list(items)")?),
                },
                false,
            ))
        })
    }

    /// A record with named fields.
    fn record<'v>(
        fields: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        make_schema(eval, |ctx| {
            let entries = convert::string_dict(fields, ctx.limits(), "schema.record(fields)")?
                .ok_or_else(|| {
                    Fault::new(
                        "invalid_schema",
                        format!(
                            "schema.record(fields) must be a dict of schemas, got {}",
                            kind_of(fields)
                        ),
                    )
                })?;
            let mut out = BTreeMap::new();
            for (name, value) in entries {
                if name.is_empty() {
                    return Err(Fault::new(
                        "invalid_schema",
                        "schema.record(fields): field names must not be empty",
                    ));
                }
                let what = format!("schema.record(fields)[{name:?}]");
                let (schema, optional) = schema_of(value, &what)?;
                if matches!(schema, Schema::StdoutJson { .. }) {
                    return Err(Fault::new(
                        "invalid_schema",
                        format!(
                            "{what}: schema.stdout_json is allowed only as a command or shell node's output"
                        ),
                    ));
                }
                out.insert(name, RecordField { schema, optional });
            }
            Ok((Schema::Record { fields: out }, false))
        })
    }

    /// A record field that may be absent.
    fn optional<'v>(
        schema: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        make_schema(eval, |_| {
            Ok((nested_schema(schema, "schema.optional(schema)")?, true))
        })
    }

    /// Command output: the whole retained stdout is one JSON value matching `schema`.
    fn stdout_json<'v>(
        schema: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        make_schema(eval, |_| {
            Ok((
                Schema::StdoutJson {
                    schema: Box::new(nested_schema(schema, "schema.stdout_json(schema)")?),
                },
                false,
            ))
        })
    }
}

#[starlark_module]
fn condition_functions(builder: &mut GlobalsBuilder) {
    /// The referenced value equals `value`.
    fn equals<'v>(
        reference: Value<'v>,
        value: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        make_condition(eval, |ctx| {
            let reference = reference_of(reference, "condition.equals(reference)")?;
            let value = convert::to_data(value, ctx.limits(), "condition.equals(value)")?;
            Ok(Condition::Equals { reference, value })
        })
    }

    /// The referenced value is one of `values`.
    fn is_one_of<'v>(
        reference: Value<'v>,
        values: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        make_condition(eval, |ctx| {
            let reference = reference_of(reference, "condition.is_one_of(reference)")?;
            let limits = ctx.limits();
            let items = expect_list(values, limits, "condition.is_one_of(values)")?;
            if items.is_empty() {
                return Err(Fault::new(
                    "invalid_condition",
                    "condition.is_one_of(values) must not be empty",
                ));
            }
            let values = items
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    convert::to_data(*v, limits, &format!("condition.is_one_of(values)[{i}]"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Condition::IsOneOf { reference, values })
        })
    }

    /// Every condition holds.
    fn all<'v>(
        conditions: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        make_condition(eval, |ctx| {
            Ok(Condition::All {
                conditions: condition_list(conditions, ctx.limits(), "condition.all(conditions)")?,
            })
        })
    }

    /// At least one condition holds.
    fn any<'v>(
        conditions: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        make_condition(eval, |ctx| {
            Ok(Condition::Any {
                conditions: condition_list(conditions, ctx.limits(), "condition.any(conditions)")?,
            })
        })
    }

    /// The condition does not hold.
    fn not_<'v>(
        condition: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        make_not(eval, condition)
    }

    /// The same as `condition.not_` (reachable as `getattr(condition, "not")`).
    fn not<'v>(
        condition: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        make_not(eval, condition)
    }
}

/// The globals every workflow module sees: the Starlark standard library (no `print`,
/// `json` or `struct` extensions) plus the workflow language.
pub(crate) fn globals() -> Globals {
    GlobalsBuilder::standard()
        .with(workflow_functions)
        .with(operator_guards)
        .with_namespace("input", input_functions)
        .with_namespace("schema", schema_functions)
        .with_namespace("condition", condition_functions)
        .build()
}
