//! The `schema` namespace: the shapes of node outputs (`schema.record`, `schema.list`, ...).
//!
//! Invariant: a schema value is within `schema_depth` and `schema_bytes`, and
//! `schema.optional` and `schema.stdout_json` appear only where they mean something.

use std::collections::BTreeMap;

use rho_ipc::program::{RecordField, Schema};
use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::Value;

use super::super::convert;
use super::super::fault::Fault;
use super::super::values::{Context, Item};
use super::args::{kind_of, nested_schema, scalar_members, schema_of};
use super::bytes::{schema_bytes, schema_depth};
use super::{alloc, at_site};

pub(super) fn make_schema<'v>(
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

pub(super) fn make_enum_schema<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    members: Value<'v>,
) -> starlark::Result<Value<'v>> {
    make_schema(eval, |ctx| {
        let members = scalar_members(members, ctx.limits(), "schema.enum(members)")?;
        Ok((Schema::Enum { members }, false))
    })
}

#[starlark_module]
pub(super) fn schema_functions(builder: &mut GlobalsBuilder) {
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
    fn list<'v>(
        item: Option<Value<'v>>,
        #[starlark(require = named)] items: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        // Rho 1.47 names the parameter `item`; `items` stays an alias.
        make_schema(eval, |_| {
            let (value, what) = match (item, items) {
                (Some(v), None) => (v, "schema.list(item)"),
                (None, Some(v)) => (v, "schema.list(items)"),
                (Some(_), Some(_)) => {
                    return Err(Fault::new(
                        "invalid_schema",
                        "schema.list: give the item schema once, as `item` (or its alias `items`), not both",
                    ));
                }
                (None, None) => {
                    return Err(Fault::new(
                        "invalid_schema",
                        "schema.list needs the item schema: schema.list(schema.string()) or schema.list(item = ...)",
                    ));
                }
            };
            Ok((
                Schema::List {
                    items: Box::new(nested_schema(value, what)?),
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
