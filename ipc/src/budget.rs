//! Named planning budgets. Each has a default (from the specification), may be changed in
//! configuration, and the values in force are frozen into the program.
//!
//! Invariant: every budget is addressed by one stable snake_case name, the same in
//! configuration, error messages, the limits receipt and the frozen program.

use serde::{Deserialize, Serialize};

/// An overrun, rendered exactly as `planning budget <name> exceeded: accepted limit <L>,
/// requested or measured <M>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error(
    "planning budget {name} exceeded: accepted limit {limit}, requested or measured {measured}"
)]
pub struct BudgetOverrun {
    /// The budget's name (`node_count`, `evaluator_ticks`, ...).
    pub name: String,
    /// The accepted limit in force.
    pub limit: u64,
    /// What was requested or measured.
    pub measured: u64,
}

macro_rules! budgets {
    ($( $(#[$doc:meta])* $field:ident = $default:expr ),* $(,)?) => {
        /// The planning budgets in force for one plan.
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct Budgets {
            $( $(#[$doc])* pub $field: u64, )*
        }

        impl Default for Budgets {
            fn default() -> Self {
                Self { $( $field: $default, )* }
            }
        }

        impl Budgets {
            /// Every budget name, in declaration order.
            pub const NAMES: &'static [&'static str] = &[ $( stringify!($field), )* ];

            /// The value of a budget by name.
            pub fn get(&self, name: &str) -> Option<u64> {
                match name {
                    $( stringify!($field) => Some(self.$field), )*
                    _ => None,
                }
            }

            /// Sets a budget by name; `false` when the name is unknown.
            pub fn set(&mut self, name: &str, value: u64) -> bool {
                match name {
                    $( stringify!($field) => { self.$field = value; true } )*
                    _ => false,
                }
            }
        }
    };
}

budgets! {
    /// Total bytes of all workflow sources (entry and loaded modules).
    source_bytes = 1_000_000,
    /// Number of modules (entry included).
    module_count = 100,
    /// Depth of the `load()` chain.
    module_depth = 20,
    /// Starlark evaluator ticks (calls and loop back-edges).
    evaluator_ticks = 1_000_000,
    /// Starlark heap bytes.
    evaluator_heap_bytes = 64_000_000,
    /// Starlark call-stack depth.
    call_stack_depth = 25,
    /// Bytes of one string value.
    string_bytes = 1_000_000,
    /// Items of one list.
    list_items = 10_000,
    /// Entries of one dict.
    dict_items = 10_000,
    /// Bracket nesting depth in source, checked before parsing.
    source_nesting_depth = 100,
    /// Nesting depth of one input value.
    input_depth = 20,
    /// Serialized bytes of all input values.
    input_bytes = 1_000_000,
    /// Nodes in the workflow.
    node_count = 1_000,
    /// Dependency edges (`needs` entries) in the workflow.
    edge_count = 10_000,
    /// Nesting depth of a condition.
    condition_depth = 8,
    /// Nesting depth of an output schema.
    schema_depth = 6,
    /// Serialized bytes of all schemas.
    schema_bytes = 1_000_000,
    /// Serialized bytes of the frozen program.
    program_bytes = 10_000_000,
    /// Planner wall time in milliseconds, measured by the host.
    planner_wall_ms = 10_000,
    /// Address space of the planner worker.
    planner_address_space_bytes = 1_073_741_824,
    /// The largest node timeout.
    node_timeout_seconds = 86_400,
    /// Retained bytes per output stream of one node.
    retained_output_per_stream_bytes = 8_388_608,
    /// Retained bytes of all streams of one run.
    retained_output_total_bytes = 67_108_864,
    /// Bytes of one rendered template.
    rendered_template_bytes = 4_194_304,
    /// Bytes of one expanded agent prompt.
    expanded_prompt_bytes = 8_388_608,
    /// Bytes of one expanded argv.
    expanded_argv_bytes = 8_388_608,
}

/// Seconds of CPU time granted to the planner worker beyond its wall-time budget: the host's
/// wall clock is the real limit, the CPU rlimit only backs it up.
pub const PLANNER_CPU_MARGIN_SECONDS: u64 = 2;

/// The planner worker's `RLIMIT_CPU` soft limit, in seconds, for a wall-time budget of
/// `wall_ms`: whole seconds rounded up (at least one) plus [`PLANNER_CPU_MARGIN_SECONDS`].
/// The one rule the host (which passes it) and the worker (whose default it is) share.
pub fn planner_cpu_seconds(wall_ms: u64) -> u64 {
    wall_ms.div_ceil(1000).max(1) + PLANNER_CPU_MARGIN_SECONDS
}

impl Budgets {
    /// Checks `measured` against the budget `name`; `Err` carries the formatted overrun.
    pub fn check(&self, name: &'static str, measured: u64) -> Result<(), BudgetOverrun> {
        let limit = self.get(name).unwrap_or(0);
        if measured > limit {
            Err(BudgetOverrun {
                name: name.to_owned(),
                limit,
                measured,
            })
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_limit_rounds_wall_time_up_with_a_margin() {
        assert_eq!(planner_cpu_seconds(10_000), 10 + PLANNER_CPU_MARGIN_SECONDS);
        assert_eq!(planner_cpu_seconds(1_001), 2 + PLANNER_CPU_MARGIN_SECONDS);
        assert_eq!(planner_cpu_seconds(0), 1 + PLANNER_CPU_MARGIN_SECONDS);
    }

    #[test]
    fn overrun_message_has_the_documented_shape() {
        let err = Budgets::default().check("node_count", 1001).unwrap_err();
        assert_eq!(
            err.to_string(),
            "planning budget node_count exceeded: accepted limit 1000, requested or measured 1001"
        );
    }

    #[test]
    fn names_round_trip_through_get_and_set() {
        let mut b = Budgets::default();
        for name in Budgets::NAMES {
            assert!(b.get(name).is_some(), "{name}");
            assert!(b.set(name, 7));
            assert_eq!(b.get(name), Some(7));
        }
        assert!(!b.set("no_such_budget", 1));
    }
}
