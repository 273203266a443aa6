//! The Starlark globals of the workflow language: `define`, `workflow`, `agent`, `command`,
//! `shell`, `template`, `output`, `status`, `exit_code` and the `input`, `schema` and
//! `condition` namespaces, plus the size-checked operators that replace `*` and `+`.
//!
//! Invariant: every builtin validates its arguments completely before it returns a value
//! (names, required fields, budgets, placement rules), reports faults at its call site, and
//! charges the bytes it keeps on the Rust heap to `evaluator_heap_bytes`, which the Starlark
//! heap limit alone would not see.
mod args;
mod bytes;
mod collections;
mod condition;
mod input;
mod operators;
mod schema;
mod workflow;

use rho_ipc::evaluated::SourceSpan;
use starlark::environment::{Globals, GlobalsBuilder};
use starlark::eval::Evaluator;
use starlark::values::Value;

pub(crate) use input::{check_input_value, describe_data};
pub(crate) use operators::operator_rewrites;

use super::fault::{Fault, source_span};
use super::values::{Context, Item, RhoValue};

pub(super) fn context<'a>(eval: &Evaluator<'_, 'a, '_>) -> Result<&'a Context, Fault> {
    eval.extra
        .and_then(|extra| extra.downcast_ref::<Context>())
        .ok_or_else(|| Fault::new("internal", "workflow builtins called without their context"))
}

/// Where the builtin being run was called from.
pub(super) fn call_site(eval: &Evaluator<'_, '_, '_>) -> Option<SourceSpan> {
    eval.call_stack_top_location()
        .map(|span| source_span(&span))
}

/// Runs a builtin body and reports its faults at the call site.
pub(super) fn at_site<'v, T>(
    eval: &mut Evaluator<'v, '_, '_>,
    body: impl FnOnce(&mut Evaluator<'v, '_, '_>, &Context) -> Result<T, Fault>,
) -> starlark::Result<T> {
    let site = call_site(eval);
    let ctx = context(eval).map_err(|f| f.or_at(site.clone()))?;
    body(eval, ctx).map_err(|fault| fault.or_at(site).into())
}

pub(super) fn alloc<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    ctx: &Context,
    item: Item,
    bytes: u64,
) -> Result<Value<'v>, Fault> {
    ctx.charge(bytes.saturating_add(64))?;
    Ok(eval.heap().alloc(RhoValue { item }))
}

/// The globals every workflow module sees: the Starlark standard library (no `print`,
/// `json` or `struct` extensions) plus the workflow language.
pub(crate) fn globals() -> Globals {
    // The standard values are taken from the one standard library of the process, which the
    // collection guards also forward to, instead of registering (and documenting) every
    // standard builtin a second time.
    let standard = collections::standard();
    let mut builder = GlobalsBuilder::new();
    builder.frozen_heap().add_reference(standard.heap());
    for (name, value) in standard.iter() {
        builder.set(name, value);
    }
    builder
        .with(workflow::workflow_functions)
        .with(operators::operator_guards)
        .with(collections::collection_guards)
        .with_namespace("input", input::input_functions)
        .with_namespace("schema", schema::schema_functions)
        .with_namespace("condition", condition::condition_functions)
        .build()
}
