//! Argument checks shared by the builtins: each turns a Starlark value into the typed value a
//! builtin needs, or a fault naming the argument (`command(needs)[2]`) and what was expected.
//!
//! Invariant: every string a check accepts has been measured against `string_bytes`, and no
//! check allocates on the Starlark heap.

use std::collections::BTreeSet;

use rho_ipc::data::Data;
use rho_ipc::program::{Condition, Reference, Schema, Template, TemplatePart};
use starlark::values::{UnpackValue, Value};

use super::super::convert::{self, Limits};
use super::super::fault::Fault;
use super::super::values::{Item, RhoValue};

/// Shortens user text for messages.
pub(super) fn clip(text: &str) -> String {
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

pub(super) fn expect_str<'v>(
    value: Value<'v>,
    limits: Limits,
    what: &str,
) -> Result<&'v str, Fault> {
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

pub(super) fn expect_list<'v>(
    value: Value<'v>,
    limits: Limits,
    what: &str,
) -> Result<&'v [Value<'v>], Fault> {
    convert::sequence(value, limits)?.ok_or_else(|| {
        Fault::new(
            "invalid_argument",
            format!("{what} must be a list, got {}", value.get_type()),
        )
    })
}

pub(super) fn expect_bool(value: Value<'_>, what: &str) -> Result<bool, Fault> {
    value.unpack_bool().ok_or_else(|| {
        Fault::new(
            "invalid_argument",
            format!("{what} must be a bool, got {}", value.get_type()),
        )
    })
}

pub(super) fn expect_positive(value: Value<'_>, what: &str) -> Result<u64, Fault> {
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

pub(super) fn describe(value: Value<'_>) -> String {
    if value.get_type() == "int" || value.unpack_bool().is_some() || value.is_none() {
        clip(&value.to_repr())
    } else if let Some(s) = value.unpack_str() {
        format!("string {:?}", clip(s))
    } else {
        value.get_type().to_owned()
    }
}

/// `None` and an absent argument mean the same.
pub(super) fn given(value: Option<Value<'_>>) -> Option<Value<'_>> {
    value.filter(|v| !v.is_none())
}

pub(super) fn schema_of(value: Value<'_>, what: &str) -> Result<(Schema, bool), Fault> {
    match RhoValue::item_of(value) {
        Some(Item::Schema { schema, optional }) => Ok((schema.clone(), *optional)),
        _ => Err(Fault::new(
            "invalid_schema",
            format!("{what} must be a schema (schema.*), got {}", kind_of(value)),
        )),
    }
}

pub(super) fn kind_of(value: Value<'_>) -> String {
    match RhoValue::item_of(value) {
        Some(item) => item.kind().to_owned(),
        None => value.get_type().to_owned(),
    }
}

/// A schema used anywhere but directly as a record field or a node output.
pub(super) fn nested_schema(value: Value<'_>, what: &str) -> Result<Schema, Fault> {
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

/// A node name given as a string or as a node value.
pub(super) fn node_name(value: Value<'_>, limits: Limits, what: &str) -> Result<String, Fault> {
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

pub(super) fn reference_of(value: Value<'_>, what: &str) -> Result<Reference, Fault> {
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

pub(super) fn condition_of(value: Value<'_>, what: &str) -> Result<Condition, Fault> {
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
pub(super) fn template_of(value: Value<'_>, limits: Limits, what: &str) -> Result<Template, Fault> {
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
pub(super) fn scalar_members(
    value: Value<'_>,
    limits: Limits,
    what: &str,
) -> Result<Vec<Data>, Fault> {
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
pub(super) fn static_strings(
    value: Value<'_>,
    limits: Limits,
    what: &str,
) -> Result<Vec<String>, Fault> {
    let items = expect_list(value, limits, what)?;
    items
        .iter()
        .enumerate()
        .map(|(i, item)| static_string(*item, limits, &format!("{what}[{i}]")))
        .collect()
}

pub(super) fn static_string(value: Value<'_>, limits: Limits, what: &str) -> Result<String, Fault> {
    if let Some(Item::Template(_) | Item::Reference(_)) = RhoValue::item_of(value) {
        return Err(Fault::new(
            "invalid_argument",
            format!("{what} must be a static string; output references are not allowed here"),
        ));
    }
    Ok(expect_str(value, limits, what)?.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_keeps_short_text_and_cuts_long_text_on_a_char_boundary() {
        assert_eq!(clip("short"), "short");
        let exact = "a".repeat(80);
        assert_eq!(clip(&exact), exact);
        let long = format!("{}é{}", "a".repeat(79), "b".repeat(10));
        // Byte 80 falls inside `é`, so the cut moves back to byte 79.
        assert_eq!(clip(&long), format!("{}... (91 bytes)", "a".repeat(79)));
    }

    #[test]
    fn names_follow_the_rule() {
        for good in ["a", "build", "a-b_c9", &"x".repeat(63)] {
            assert!(check_name("node", good).is_ok(), "{good}");
        }
        for bad in ["", "A", "9a", "-a", "a.b", "a b", "é", &"x".repeat(64)] {
            let fault = check_name("node", bad).unwrap_err();
            assert!(
                format!("{fault:?}").contains("invalid_name"),
                "{bad}: {fault:?}"
            );
        }
    }
}
