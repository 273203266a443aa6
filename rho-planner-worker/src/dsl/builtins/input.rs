//! The `input` namespace: the typed inputs a workflow declares in `define(inputs = ...)`.
//!
//! Invariant: a declared default always satisfies its input's type.

use rho_ipc::data::Data;
use rho_ipc::program::{InputDecl, InputType};
use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::Value;

use super::super::convert::{self, Limits};
use super::super::fault::Fault;
use super::super::values::Item;
use super::args::{clip, given, scalar_members};
use super::bytes::data_bytes;
use super::{alloc, at_site, call_site, context};

pub(super) fn input_default(
    value: Option<Value<'_>>,
    limits: Limits,
    ty: &InputType,
    what: &str,
) -> Result<Option<Data>, Fault> {
    let Some(value) = given(value) else {
        return Ok(None);
    };
    let data = convert::to_data(value, limits, &format!("{what}(default)"))?;
    if let InputType::Enum { .. } = ty {
        // As in Rho 1.47, an enum default is not checked against the members here: only
        // the value bound to the input is (a default outside the members fails planning
        // only when no value is supplied). It must still be a scalar.
        if !data.is_scalar() {
            return Err(Fault::new(
                "invalid_default",
                format!(
                    "{what}(default): the default must be a scalar (None, bool, integer or string), got {}",
                    describe_data(&data)
                ),
            ));
        }
        return Ok(Some(data));
    }
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

pub(super) fn make_input<'v>(
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

pub(super) fn make_enum_input<'v>(
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

#[starlark_module]
pub(super) fn input_functions(builder: &mut GlobalsBuilder) {
    /// A string input.
    fn string<'v>(
        default: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        make_input(eval, InputType::String, default, "input.string")
    }

    /// An integer input.
    fn integer<'v>(
        default: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        make_input(eval, InputType::Integer, default, "input.integer")
    }

    /// A bool input.
    fn bool<'v>(
        default: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        make_input(eval, InputType::Bool, default, "input.bool")
    }

    /// An input whose value is one of `members`.
    fn r#enum<'v>(
        members: Value<'v>,
        default: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        make_enum_input(eval, members, default, "input.enum")
    }

    /// The same as `input.enum`.
    fn enum_<'v>(
        members: Value<'v>,
        default: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        make_enum_input(eval, members, default, "input.enum_")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_values_are_checked_against_their_type() {
        assert!(check_input_value(&InputType::String, &Data::String("x".into())).is_ok());
        assert!(check_input_value(&InputType::Integer, &Data::Int(3)).is_ok());
        assert!(check_input_value(&InputType::Bool, &Data::Bool(true)).is_ok());
        assert_eq!(
            check_input_value(&InputType::Integer, &Data::String("3".into())),
            Err("an integer".to_owned())
        );
        let ty = InputType::Enum {
            members: vec![Data::String("dev".into()), Data::Int(2)],
        };
        assert!(check_input_value(&ty, &Data::Int(2)).is_ok());
        assert_eq!(
            check_input_value(&ty, &Data::String("prod".into())),
            Err("one of \"dev\", 2".to_owned())
        );
    }

    #[test]
    fn data_is_described_briefly() {
        assert_eq!(describe_data(&Data::String("x".into())), "\"x\"");
        assert_eq!(describe_data(&Data::List(vec![Data::Int(1)])), "list");
        assert_eq!(describe_data(&Data::Int(7)), "7");
    }
}
