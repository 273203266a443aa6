//! The size-checked operators: every `*` and `+` of a workflow module is rewritten to a
//! builtin that checks the size of the result against its budget before allocating it.
//!
//! Invariant: a repetition or concatenation whose result would exceed `string_bytes` or
//! `list_items` fails before Starlark allocates anything.

use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::list::ListRef;
use starlark::values::tuple::TupleRef;
use starlark::values::{UnpackValue, Value};

use super::super::fault::Fault;
use super::{call_site, context};

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
/// Size of `s * n` for a string, list or tuple `s`, or `None` when it is another operation.
pub(super) fn repeat_size(a: Value<'_>, b: Value<'_>) -> Option<(&'static str, u64)> {
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
pub(super) fn concat_size(a: Value<'_>, b: Value<'_>) -> Option<(&'static str, u64)> {
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

pub(super) fn checked_size(
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
pub(super) fn operator_guards(builder: &mut GlobalsBuilder) {
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

#[cfg(test)]
mod tests {
    use starlark::values::Heap;
    use starlark::values::list::AllocList;
    use starlark::values::tuple::AllocTuple;

    use super::*;

    #[test]
    fn rewrites_name_both_guards() {
        let rewrites = operator_rewrites();
        assert_eq!(rewrites.len(), 2);
        assert_eq!(rewrites["*"], MUL_GUARD);
        assert_eq!(rewrites["+"], ADD_GUARD);
    }

    #[test]
    fn repetition_size_counts_either_order_and_clamps() {
        Heap::temp(|heap| {
            let s = heap.alloc("abc");
            let list = heap.alloc(AllocList([1, 2]));
            let tuple = heap.alloc(AllocTuple([1, 2, 3, 4]));
            let four = heap.alloc(4);
            let negative = heap.alloc(-5);
            assert_eq!(repeat_size(s, four), Some(("string_bytes", 12)));
            assert_eq!(repeat_size(four, s), Some(("string_bytes", 12)));
            assert_eq!(repeat_size(list, four), Some(("list_items", 8)));
            assert_eq!(repeat_size(four, tuple), Some(("list_items", 16)));
            assert_eq!(repeat_size(s, negative), Some(("string_bytes", 0)));
            // Multiplying numbers is not a repetition.
            assert_eq!(repeat_size(four, four), None);
            assert_eq!(repeat_size(s, s), None);
        });
    }

    #[test]
    fn repetition_beyond_i64_is_reported_huge() {
        Heap::temp(|heap| {
            let s = heap.alloc("ab");
            let huge = heap.alloc(u64::MAX);
            assert_eq!(repeat_size(s, huge), Some(("string_bytes", u64::MAX)));
        });
    }

    #[test]
    fn concatenation_size_of_strings_and_sequences() {
        Heap::temp(|heap| {
            let a = heap.alloc("abc");
            let b = heap.alloc("de");
            let list = heap.alloc(AllocList([1, 2]));
            let tuple = heap.alloc(AllocTuple([1]));
            let one = heap.alloc(1);
            assert_eq!(concat_size(a, b), Some(("string_bytes", 5)));
            assert_eq!(concat_size(list, list), Some(("list_items", 4)));
            assert_eq!(concat_size(tuple, list), Some(("list_items", 3)));
            assert_eq!(concat_size(a, list), None);
            assert_eq!(concat_size(one, one), None);
        });
    }
}
