//! The Starlark values that the workflow builtins return: input declarations, schemas,
//! references, templates, conditions, nodes, workflows and the `define(...)` result.
//!
//! Invariant: every value except [`Define`] is plain contract data already validated by the
//! builtin that made it (names, budgets, placement rules that do not depend on where the
//! value is used), so consumers only check the placement rules that do.
//!
//! `unsafe` is allowed here only for the `ProvidesStaticType` derives the `starlark` crate
//! requires of every value and `Evaluator::extra` type: the derive emits an `unsafe impl`
//! asserting that the type's static form has the same layout, which holds because these
//! types have no lifetime parameters (or only the value parameter the derive understands).
#![allow(unsafe_code)]

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;

use allocative::Allocative;
use rho_ipc::budget::Budgets;
use rho_ipc::evaluated::{EvaluatedExecution, EvaluatedNode, SourceSpan};
use rho_ipc::program::{Condition, InputDecl, Reference, Schema, Template};
use starlark::coerce::Coerce;
use starlark::starlark_complex_value;
use starlark::starlark_simple_value;
use starlark::values::ValueError;
use starlark::values::list::AllocList;
use starlark::values::{
    Freeze, Heap, NoSerialize, ProvidesStaticType, StarlarkValue, Trace, Value, ValueLifetimeless,
    ValueLike, starlark_value,
};

use super::convert::Limits;
use super::fault::Fault;

/// The workflow returned by `workflow(...)`.
#[derive(Debug, Clone)]
pub(crate) struct WorkflowValue {
    pub(crate) name: String,
    pub(crate) nodes: Vec<EvaluatedNode>,
    pub(crate) exports: BTreeMap<String, Reference>,
    pub(crate) max_parallel_commands: Option<u32>,
    pub(crate) span: Option<SourceSpan>,
}

/// The input declarations given to `define(...)`, with where it was called.
#[derive(Debug, Clone)]
pub(crate) struct InputDecls {
    pub(crate) decls: BTreeMap<String, InputDecl>,
    pub(crate) span: Option<SourceSpan>,
}

/// What a workflow value holds.
#[derive(Debug, Clone)]
pub(crate) enum Item {
    /// `input.*(...)`.
    Input(InputDecl),
    /// `schema.*(...)`; `optional` is set only by `schema.optional`.
    Schema { schema: Schema, optional: bool },
    /// `output(...)`, `status(...)`, `exit_code(...)`.
    Reference(Reference),
    /// `template([...])`.
    Template(Template),
    /// `condition.*(...)`.
    Condition(Condition),
    /// `agent(...)`, `command(...)`, `shell(...)`.
    Node(Box<EvaluatedNode>),
    /// `workflow(...)`.
    Workflow(Box<WorkflowValue>),
    /// The declarations held by a `define(...)` result.
    Inputs(InputDecls),
}

impl Item {
    /// The Starlark-facing name of the kind of value.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Item::Input(_) => "input declaration",
            Item::Schema { .. } => "schema",
            Item::Reference(_) => "reference",
            Item::Template(_) => "template",
            Item::Condition(_) => "condition",
            Item::Node(_) => "node",
            Item::Workflow(_) => "workflow",
            Item::Inputs(_) => "input declarations",
        }
    }
}

/// A workflow-language value on the Starlark heap.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub(crate) struct RhoValue {
    #[allocative(skip)]
    pub(crate) item: Item,
}

starlark_simple_value!(RhoValue);

impl fmt::Display for RhoValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.item {
            Item::Node(node) => write!(f, "<node {}>", node.name),
            Item::Workflow(w) => write!(f, "<workflow {}>", w.name),
            Item::Reference(r) => write!(f, "<reference to {}>", r.node()),
            other => write!(f, "<{}>", other.kind()),
        }
    }
}

#[allow(clippy::elidable_lifetime_names)] // the `starlark_value` macro needs the name
#[starlark_value(type = "rho_value")]
impl<'v> StarlarkValue<'v> for RhoValue {
    /// A node reads like the dict Rho 1.47's constructors return (`a["name"]` in `needs`),
    /// for the keys that hold plain data; other values are not indexable.
    fn at(&self, index: Value<'v>, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        let Item::Node(node) = &self.item else {
            return ValueError::unsupported_with(self, "[]", index);
        };
        let Some(key) = index.unpack_str() else {
            return Err(node_key_error(&node.name, &index.to_repr()));
        };
        node_field(node, key, heap).ok_or_else(|| node_key_error(&node.name, &format!("{key:?}")))
    }

    fn is_in(&self, other: Value<'v>) -> starlark::Result<bool> {
        match (&self.item, other.unpack_str()) {
            (Item::Node(node), Some(key)) => Ok(node_keys(node).contains(&key)),
            _ => ValueError::unsupported_with(self, "in", other),
        }
    }
}

/// The keys a node value can be indexed with: Rho's dict keys that hold plain data.
fn node_keys(node: &EvaluatedNode) -> Vec<&'static str> {
    let mut keys = vec![
        "__rho_type",
        "name",
        "needs",
        "allow_failure",
        "timeout_seconds",
        "max_output_bytes",
    ];
    keys.extend_from_slice(match node.execution {
        EvaluatedExecution::Agent { .. } => &["agent", "access"][..],
        EvaluatedExecution::Command { .. } => &["cwd"][..],
        EvaluatedExecution::Shell { .. } => &["executable", "arguments", "command", "cwd"][..],
    });
    keys
}

fn node_field<'v>(node: &EvaluatedNode, key: &str, heap: Heap<'v>) -> Option<Value<'v>> {
    let value = match (key, &node.execution) {
        ("__rho_type", EvaluatedExecution::Agent { .. }) => heap.alloc("agent"),
        ("__rho_type", EvaluatedExecution::Command { .. }) => heap.alloc("command"),
        ("__rho_type", EvaluatedExecution::Shell { .. }) => heap.alloc("shell"),
        ("name", _) => heap.alloc(node.name.as_str()),
        ("needs", _) => heap.alloc(AllocList(node.needs.iter().map(String::as_str))),
        ("allow_failure", _) => Value::new_bool(node.allow_failure),
        ("timeout_seconds", _) => heap.alloc(node.timeout_seconds),
        ("max_output_bytes", _) => heap.alloc(node.max_output_bytes),
        ("agent", EvaluatedExecution::Agent { agent, .. }) => heap.alloc(agent.as_str()),
        ("access", EvaluatedExecution::Agent { .. }) => heap.alloc(match node.access {
            Some(rho_ipc::program::Access::ReadOnly) => "read_only",
            _ => "mutating",
        }),
        (
            "cwd",
            EvaluatedExecution::Command { cwd, .. } | EvaluatedExecution::Shell { cwd, .. },
        ) => heap.alloc(cwd.as_str()),
        ("executable", EvaluatedExecution::Shell { executable, .. }) => {
            heap.alloc(executable.as_str())
        }
        ("arguments", EvaluatedExecution::Shell { arguments, .. }) => {
            heap.alloc(AllocList(arguments.iter().map(String::as_str)))
        }
        ("command", EvaluatedExecution::Shell { command, .. }) => heap.alloc(command.as_str()),
        _ => return None,
    };
    Some(value)
}

fn node_key_error(node: &str, key: &str) -> starlark::Error {
    starlark::Error::from(Fault::new(
        "invalid_argument",
        format!(
            "node {node:?} has no readable key {key}; nodes read like Rho's dicts for \
             \"name\", \"needs\", \"allow_failure\", \"timeout_seconds\", \
             \"max_output_bytes\" and their kind's plain fields (agent: \"agent\", \"access\"; \
             command: \"cwd\"; shell: \"executable\", \"arguments\", \"command\", \"cwd\")"
        ),
    ))
}

impl RhoValue {
    /// The item behind a Starlark value, when it is one of ours.
    pub(crate) fn item_of(value: Value<'_>) -> Option<&Item> {
        RhoValue::from_value(value).map(|v| &v.item)
    }
}

/// The result of `define(inputs, build)`: the declarations and the build function.
#[derive(Debug, Trace, Freeze, Coerce, ProvidesStaticType, NoSerialize, Allocative)]
#[repr(C)]
pub(crate) struct DefineGen<V: ValueLifetimeless> {
    /// A [`RhoValue`] holding [`Item::Inputs`].
    pub(crate) inputs: V,
    /// The function called once with the bound inputs.
    pub(crate) build: V,
}

starlark_complex_value!(pub(crate) Define);

impl<V: ValueLifetimeless> fmt::Display for DefineGen<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<workflow definition>")
    }
}

#[starlark_value(type = "workflow_definition")]
impl<'v, V: ValueLike<'v>> StarlarkValue<'v> for DefineGen<V> where Self: ProvidesStaticType<'v> {}

/// Evaluation state shared with the builtins through `Evaluator::extra`.
#[derive(Debug, ProvidesStaticType)]
pub(crate) struct Context {
    pub(crate) budgets: Budgets,
    /// Bytes the builtins keep on the Rust heap, across all modules.
    pub(crate) charged: Cell<u64>,
}

impl Context {
    pub(crate) fn new(budgets: Budgets) -> Self {
        Self {
            budgets,
            charged: Cell::new(0),
        }
    }

    pub(crate) fn limits(&self) -> Limits {
        Limits::from_budgets(&self.budgets)
    }

    /// Charges `bytes` kept outside the Starlark heap to `evaluator_heap_bytes`.
    pub(crate) fn charge(&self, bytes: u64) -> Result<(), Fault> {
        let total = self.charged.get().saturating_add(bytes);
        self.charged.set(total);
        Fault::check(&self.budgets, "evaluator_heap_bytes", total)
    }
}
