//! Size-checked collection builtins: `list`, `tuple`, `sorted`, `reversed`, `enumerate` and
//! `zip` check how many items they would materialize against `list_items` before the
//! standard implementation runs.
//!
//! Invariant: one native call cannot be interrupted by the tick or heap checks, and
//! `list(range(1000000000))` would allocate gigabytes in one step (Starlark panics on an
//! allocation over 4 GiB): the item count is checked first, from `len()`, which is O(1) for
//! every sized value (a `range` included). Arguments without a length are bounded already.

use std::sync::OnceLock;

use starlark::collections::SmallMap;
use starlark::environment::{Globals, GlobalsBuilder};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::Value;
use starlark::values::tuple::UnpackTuple;

use super::super::fault::Fault;
use super::operators::checked_size;

/// The standard library, built once a process: the workflow globals are made of its values
/// (see [`super::globals`]), and these guards forward to the originals they shadow there.
/// Building it is most of a worker's start-up (Starlark parses every builtin's docstring
/// when it registers it), so it must not happen twice.
static STANDARD: OnceLock<Globals> = OnceLock::new();

/// The standard library of this process.
pub(super) fn standard() -> &'static Globals {
    STANDARD.get_or_init(Globals::standard)
}

fn standard_function<'v>(name: &str) -> Result<Value<'v>, Fault> {
    standard()
        .iter()
        .find(|(global, _)| *global == name)
        .map(|(_, value)| value.to_value())
        .ok_or_else(|| Fault::new("internal", format!("the standard `{name}` is missing")))
}

/// Items a call would materialize: the smallest length among `sized` (zip stops at the
/// shortest), or `None` when one of them has no length (and is bounded some other way).
fn items_of(sized: &[Value<'_>]) -> Option<u64> {
    sized
        .iter()
        .map(|v| v.length().ok().map(|n| u64::try_from(n).unwrap_or(0)))
        .try_fold(u64::MAX, |least, n| n.map(|n| least.min(n)))
        .filter(|n| *n != u64::MAX || !sized.is_empty())
}

/// Checks the item count, then calls the standard builtin `name` with the same arguments.
fn forward<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    name: &str,
    args: &[Value<'v>],
    kwargs: &SmallMap<String, Value<'v>>,
    sized: &[Value<'v>],
) -> starlark::Result<Value<'v>> {
    if !sized.is_empty() {
        checked_size(eval, items_of(sized).map(|n| ("list_items", n)))?;
    }
    let function = standard_function(name)?;
    let named: Vec<(&str, Value<'v>)> = kwargs.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    eval.eval_function(function, args, &named)
}

#[starlark_module]
pub(super) fn collection_guards(builder: &mut GlobalsBuilder) {
    fn list<'v>(
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        #[starlark(kwargs)] kwargs: SmallMap<String, Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let sized = args.items.first().map_or(&[][..], std::slice::from_ref);
        forward(eval, "list", &args.items, &kwargs, sized)
    }

    fn tuple<'v>(
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        #[starlark(kwargs)] kwargs: SmallMap<String, Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let sized = args.items.first().map_or(&[][..], std::slice::from_ref);
        forward(eval, "tuple", &args.items, &kwargs, sized)
    }

    fn sorted<'v>(
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        #[starlark(kwargs)] kwargs: SmallMap<String, Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let sized = args.items.first().map_or(&[][..], std::slice::from_ref);
        forward(eval, "sorted", &args.items, &kwargs, sized)
    }

    fn reversed<'v>(
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        #[starlark(kwargs)] kwargs: SmallMap<String, Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let sized = args.items.first().map_or(&[][..], std::slice::from_ref);
        forward(eval, "reversed", &args.items, &kwargs, sized)
    }

    fn enumerate<'v>(
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        #[starlark(kwargs)] kwargs: SmallMap<String, Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let sized = args.items.first().map_or(&[][..], std::slice::from_ref);
        forward(eval, "enumerate", &args.items, &kwargs, sized)
    }

    fn zip<'v>(
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        #[starlark(kwargs)] kwargs: SmallMap<String, Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        forward(eval, "zip", &args.items, &kwargs, &args.items)
    }
}

#[cfg(test)]
mod tests {
    use starlark::values::Heap;

    use super::*;

    #[test]
    fn items_are_the_shortest_length_or_unknown() {
        Heap::temp(|heap| {
            let three = heap.alloc("abc");
            let list = heap.alloc(vec![1, 2, 3, 4, 5]);
            let number = heap.alloc(7);
            assert_eq!(items_of(&[list]), Some(5));
            assert_eq!(items_of(&[list, three]), Some(3));
            assert_eq!(items_of(&[number]), None);
            assert_eq!(items_of(&[list, number]), None);
            assert_eq!(items_of(&[]), None);
        });
    }

    #[test]
    fn the_workflow_globals_reuse_the_one_standard_library_except_the_guards() {
        const GUARDED: [&str; 6] = ["list", "tuple", "sorted", "reversed", "enumerate", "zip"];
        let workflow_globals = super::super::globals();
        let ours: std::collections::HashMap<&str, _> = workflow_globals.iter().collect();
        let mut shared = 0;
        for (name, original) in standard().iter() {
            let Some(value) = ours.get(name) else {
                panic!("the workflow globals lack the standard `{name}`");
            };
            let same = value.to_value().ptr_eq(original.to_value());
            if GUARDED.contains(&name) {
                assert!(!same, "`{name}` is not guarded");
            } else {
                assert!(same, "`{name}` was registered again instead of reused");
                shared += 1;
            }
        }
        assert!(shared > 20, "only {shared} standard values reused");
    }

    #[test]
    fn every_guarded_builtin_exists_in_the_standard_library() {
        for name in ["list", "tuple", "sorted", "reversed", "enumerate", "zip"] {
            assert!(standard_function(name).is_ok(), "{name}");
        }
    }
}
