//! The bounded converter between Starlark values and [`Data`].
//!
//! `starlark`'s own `to_json` recurses once per nesting level and aborts the process at
//! a few hundred levels, so every value leaving Starlark goes through [`to_data`]: an
//! explicit-stack walk that checks each string, list and dict against its budget before
//! copying it and refuses to go deeper than `max_depth`.
//!
//! Invariant: the walk never recurses on the native stack and never copies a container
//! or string whose size it has not checked first; every error names the JSON-style path of
//! the offending value (`$.nodes[2].argv[1]`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use rho_ipc::budget::Budgets;
use rho_ipc::data::Data;
use starlark::values::dict::{AllocDict, DictRef};
use starlark::values::list::{AllocList, ListRef};
use starlark::values::tuple::TupleRef;
use starlark::values::{Heap, UnpackValue, Value};

use super::fault::Fault;

/// The limits the converter enforces.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) string_bytes: u64,
    pub(crate) list_items: u64,
    pub(crate) dict_items: u64,
    /// Deepest accepted container nesting (`input_depth`).
    pub(crate) max_depth: u64,
}

impl Limits {
    pub(crate) fn from_budgets(budgets: &Budgets) -> Self {
        Self {
            string_bytes: budgets.string_bytes,
            list_items: budgets.list_items,
            dict_items: budgets.dict_items,
            max_depth: budgets.input_depth,
        }
    }

    fn budgets(self) -> Budgets {
        Budgets {
            string_bytes: self.string_bytes,
            list_items: self.list_items,
            dict_items: self.dict_items,
            input_depth: self.max_depth,
            ..Budgets::default()
        }
    }
}

/// Checks a string length against `string_bytes`.
pub(crate) fn check_string(limits: Limits, len: usize) -> Result<(), Fault> {
    Fault::check(&limits.budgets(), "string_bytes", len as u64)
}

/// Checks a list length against `list_items`.
pub(crate) fn check_list(limits: Limits, len: usize) -> Result<(), Fault> {
    Fault::check(&limits.budgets(), "list_items", len as u64)
}

/// Checks a dict length against `dict_items`.
pub(crate) fn check_dict(limits: Limits, len: usize) -> Result<(), Fault> {
    Fault::check(&limits.budgets(), "dict_items", len as u64)
}

/// The items of a list or tuple, checked against `list_items`.
///
/// Budget messages keep their exact documented shape; the caller's span locates them.
pub(crate) fn sequence(value: Value<'_>, limits: Limits) -> Result<Option<&[Value<'_>]>, Fault> {
    let items = if let Some(list) = ListRef::from_value(value) {
        list.content()
    } else if let Some(tuple) = TupleRef::from_value(value) {
        tuple.content()
    } else {
        return Ok(None);
    };
    check_list(limits, items.len())?;
    Ok(Some(items))
}

/// The entries of a dict, checked against `dict_items`; keys must be strings.
pub(crate) fn string_dict<'v>(
    value: Value<'v>,
    limits: Limits,
    path: &str,
) -> Result<Option<Vec<(String, Value<'v>)>>, Fault> {
    let Some(dict) = DictRef::from_value(value) else {
        return Ok(None);
    };
    check_dict(limits, dict.len())?;
    let mut out = Vec::with_capacity(dict.len());
    for (key, item) in dict.iter() {
        let Some(key) = key.unpack_str() else {
            return Err(Fault::new(
                "invalid_value",
                format!(
                    "{path}: dict keys must be strings, found {}",
                    key.get_type()
                ),
            ));
        };
        check_string(limits, key.len())?;
        out.push((key.to_owned(), item));
    }
    Ok(Some(out))
}

/// A scalar value, or `None` when `value` is a container.
fn scalar(value: Value<'_>, limits: Limits, path: &str) -> Result<Option<Data>, Fault> {
    if value.is_none() {
        return Ok(Some(Data::Null));
    }
    if let Some(b) = value.unpack_bool() {
        return Ok(Some(Data::Bool(b)));
    }
    if let Some(s) = value.unpack_str() {
        check_string(limits, s.len())?;
        return Ok(Some(Data::String(s.to_owned())));
    }
    if value.get_type() == "int" {
        return match i64::unpack_value(value) {
            Ok(Some(i)) => Ok(Some(Data::Int(i))),
            _ => Err(Fault::new(
                "invalid_value",
                format!(
                    "{path}: integers must fit in signed 64 bits, found {}",
                    short_repr(value)
                ),
            )),
        };
    }
    if ListRef::from_value(value).is_some()
        || TupleRef::from_value(value).is_some()
        || DictRef::from_value(value).is_some()
    {
        return Ok(None);
    }
    Err(Fault::new(
        "invalid_value",
        format!(
            "{path}: a {} is not an accepted value (only None, bool, 64-bit int, string, list \
             and dict with string keys)",
            value.get_type()
        ),
    ))
}

/// A short rendering of a value for messages (scalars only; containers by type).
fn short_repr(value: Value<'_>) -> String {
    if value.get_type() == "int" || value.unpack_bool().is_some() || value.is_none() {
        let text = value.to_repr();
        if text.len() <= 64 {
            return text;
        }
        return format!("{}... ({} digits)", &text[..32], text.len());
    }
    value.get_type().to_owned()
}

/// One container being converted.
enum Frame<'v> {
    List {
        items: &'v [Value<'v>],
        next: usize,
        out: Vec<Data>,
        path_len: usize,
    },
    Dict {
        entries: Vec<(String, Value<'v>)>,
        next: usize,
        out: BTreeMap<String, Data>,
        path_len: usize,
    },
}

/// Converts a Starlark value to [`Data`] with an explicit stack.
pub(crate) fn to_data(value: Value<'_>, limits: Limits, root: &str) -> Result<Data, Fault> {
    let mut path = root.to_owned();
    if let Some(data) = scalar(value, limits, &path)? {
        return Ok(data);
    }
    let mut stack: Vec<Frame<'_>> = Vec::new();
    push_container(&mut stack, value, limits, &path)?;

    loop {
        let depth = stack.len();
        let Some(frame) = stack.last_mut() else {
            // The root was a container; `finish` returns before the stack empties.
            return Err(Fault::new("internal", "value converter lost its root"));
        };
        // Pick the next child, or finish this frame.
        let child = match frame {
            Frame::List {
                items,
                next,
                path_len,
                ..
            } => {
                path.truncate(*path_len);
                if *next < items.len() {
                    let _ = write!(path, "[{next}]");
                    *next += 1;
                    Some(items[*next - 1])
                } else {
                    None
                }
            }
            Frame::Dict {
                entries,
                next,
                path_len,
                ..
            } => {
                path.truncate(*path_len);
                if *next < entries.len() {
                    push_key(&mut path, &entries[*next].0);
                    *next += 1;
                    Some(entries[*next - 1].1)
                } else {
                    None
                }
            }
        };
        if let Some(child) = child {
            if let Some(data) = scalar(child, limits, &path)? {
                attach(&mut stack, data);
            } else {
                if depth as u64 + 1 > limits.max_depth {
                    let overrun = limits.budgets().check("input_depth", depth as u64 + 1);
                    if let Err(o) = overrun {
                        return Err(Fault::budget(o));
                    }
                }
                push_container(&mut stack, child, limits, &path)?;
            }
        } else {
            let Some(done) = stack.pop() else {
                return Err(Fault::new("internal", "value converter lost its frame"));
            };
            let data = match done {
                Frame::List { out, path_len, .. } => {
                    path.truncate(path_len);
                    Data::List(out)
                }
                Frame::Dict { out, path_len, .. } => {
                    path.truncate(path_len);
                    Data::Map(out)
                }
            };
            if stack.is_empty() {
                return Ok(data);
            }
            attach(&mut stack, data);
        }
    }
}

fn push_key(path: &mut String, key: &str) {
    let plain = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain {
        path.push('.');
        path.push_str(key);
    } else {
        let _ = write!(path, "[{key:?}]");
    }
}

fn push_container<'v>(
    stack: &mut Vec<Frame<'v>>,
    value: Value<'v>,
    limits: Limits,
    path: &str,
) -> Result<(), Fault> {
    if let Some(items) = sequence(value, limits)? {
        stack.push(Frame::List {
            items,
            next: 0,
            out: Vec::with_capacity(items.len()),
            path_len: path.len(),
        });
        return Ok(());
    }
    if let Some(entries) = string_dict(value, limits, path)? {
        stack.push(Frame::Dict {
            entries,
            next: 0,
            out: BTreeMap::new(),
            path_len: path.len(),
        });
        return Ok(());
    }
    Err(Fault::new(
        "invalid_value",
        format!("{path}: a {} is not an accepted value", value.get_type()),
    ))
}

fn attach(stack: &mut [Frame<'_>], data: Data) {
    match stack.last_mut() {
        Some(Frame::List { out, .. }) => out.push(data),
        Some(Frame::Dict {
            entries, next, out, ..
        }) => {
            let key = entries[*next - 1].0.clone();
            out.insert(key, data);
        }
        None => {}
    }
}

/// Allocates a [`Data`] value on the Starlark heap. The caller has already checked its
/// depth against `input_depth`, so the recursion is bounded by the budget.
pub(crate) fn to_value<'v>(data: &Data, heap: Heap<'v>) -> Value<'v> {
    match data {
        Data::Null => Value::new_none(),
        Data::Bool(b) => Value::new_bool(*b),
        Data::Int(i) => heap.alloc(*i),
        Data::String(s) => heap.alloc(s.as_str()),
        Data::List(items) => {
            let values: Vec<Value<'v>> = items.iter().map(|d| to_value(d, heap)).collect();
            heap.alloc(AllocList(values))
        }
        Data::Map(map) => {
            let entries: Vec<(&str, Value<'v>)> = map
                .iter()
                .map(|(k, v)| (k.as_str(), to_value(v, heap)))
                .collect();
            heap.alloc(AllocDict(entries))
        }
    }
}
