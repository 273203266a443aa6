//! The `condition` namespace: the `when` conditions of nodes over references to earlier
//! nodes' outputs, statuses and exit codes.
//!
//! Invariant: a condition value is within `condition_depth` and never empty where it combines
//! other conditions.

use rho_ipc::budget::Budgets;
use rho_ipc::program::Condition;
use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::Value;

use super::super::convert::{self, Limits};
use super::super::fault::Fault;
use super::super::values::{Context, Item};
use super::args::{condition_of, expect_list, reference_of};
use super::bytes::condition_bytes;
use super::{alloc, at_site};

pub(super) fn check_condition_depth(budgets: &Budgets, condition: &Condition) -> Result<(), Fault> {
    Fault::check(budgets, "condition_depth", condition.depth() as u64)
}
pub(super) fn make_condition<'v>(
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

pub(super) fn make_not<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    condition: Value<'v>,
) -> starlark::Result<Value<'v>> {
    make_condition(eval, |_| {
        Ok(Condition::Not {
            condition: Box::new(condition_of(condition, "condition.not_(condition)")?),
        })
    })
}

pub(super) fn condition_list(
    value: Value<'_>,
    limits: Limits,
    what: &str,
) -> Result<Vec<Condition>, Fault> {
    // Empty lists plan as in Rho 1.47: `all([])` holds, `any([])` does not.
    let items = expect_list(value, limits, what)?;
    items
        .iter()
        .enumerate()
        .map(|(i, item)| condition_of(*item, &format!("{what}[{i}]")))
        .collect()
}

#[starlark_module]
pub(super) fn condition_functions(builder: &mut GlobalsBuilder) {
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
            // An empty list plans as in Rho 1.47: the condition never holds.
            let items = expect_list(values, limits, "condition.is_one_of(values)")?;
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
