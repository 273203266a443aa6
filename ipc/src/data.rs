//! `Data`: the JSON-like values that workflows carry (inputs, enum members, validated
//! outputs, exports). Floats are not representable, so digests never depend on float
//! formatting.
//!
//! Invariant: maps are keyed by strings and kept sorted, so two equal values always encode to
//! the same bytes whatever order they were built in.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A JSON-like value without floats.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Data {
    /// `None` / JSON `null`.
    Null,
    /// A boolean.
    Bool(bool),
    /// A signed 64-bit integer.
    Int(i64),
    /// A UTF-8 string.
    String(String),
    /// A list.
    List(Vec<Data>),
    /// A map with string keys.
    Map(BTreeMap<String, Data>),
}

impl Data {
    /// The kind of value, for error messages (`null`, `bool`, `integer`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            Data::Null => "null",
            Data::Bool(_) => "bool",
            Data::Int(_) => "integer",
            Data::String(_) => "string",
            Data::List(_) => "list",
            Data::Map(_) => "dict",
        }
    }

    /// True for null, bool, integer and string (the values allowed as enum members).
    pub fn is_scalar(&self) -> bool {
        matches!(
            self,
            Data::Null | Data::Bool(_) | Data::Int(_) | Data::String(_)
        )
    }

    /// Converts from a JSON value; floats and integers outside i64 are rejected with the
    /// JSON path of the offending value (e.g. `$.a[2]`).
    pub fn from_json(value: &serde_json::Value) -> Result<Data, DataError> {
        from_json_at(value, &mut String::from("$"))
    }

    /// Converts to a JSON value.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Data::Null => serde_json::Value::Null,
            Data::Bool(b) => serde_json::Value::Bool(*b),
            Data::Int(i) => serde_json::Value::from(*i),
            Data::String(s) => serde_json::Value::String(s.clone()),
            Data::List(items) => {
                serde_json::Value::Array(items.iter().map(Data::to_json).collect())
            }
            Data::Map(map) => serde_json::Value::Object(
                map.iter().map(|(k, v)| (k.clone(), v.to_json())).collect(),
            ),
        }
    }

    /// Nesting depth: scalars are 0, a list or map is one more than its deepest item.
    pub fn depth(&self) -> usize {
        // Iterative so hostile input cannot overflow the native stack.
        let mut max = 0;
        let mut stack = vec![(self, 0usize)];
        while let Some((value, depth)) = stack.pop() {
            match value {
                Data::List(items) => {
                    max = max.max(depth + 1);
                    stack.extend(items.iter().map(|v| (v, depth + 1)));
                }
                Data::Map(map) => {
                    max = max.max(depth + 1);
                    stack.extend(map.values().map(|v| (v, depth + 1)));
                }
                _ => {}
            }
        }
        max
    }
}

/// Why a JSON value is not acceptable as `Data`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    /// A number that is a float or outside the signed 64-bit range.
    #[error("{path}: only integers in the signed 64-bit range are allowed, found {number}")]
    NotAnInteger {
        /// JSON path of the value.
        path: String,
        /// The number as written.
        number: String,
    },
}

fn from_json_at(value: &serde_json::Value, path: &mut String) -> Result<Data, DataError> {
    Ok(match value {
        serde_json::Value::Null => Data::Null,
        serde_json::Value::Bool(b) => Data::Bool(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Data::Int(i),
            None => {
                return Err(DataError::NotAnInteger {
                    path: path.clone(),
                    number: n.to_string(),
                });
            }
        },
        serde_json::Value::String(s) => Data::String(s.clone()),
        serde_json::Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                {
                    use std::fmt::Write as _;
                    let _ = write!(path, "[{i}]");
                }
                out.push(from_json_at(item, path)?);
                path.truncate(len);
            }
            Data::List(out)
        }
        serde_json::Value::Object(map) => {
            let mut out = BTreeMap::new();
            for (k, v) in map {
                let len = path.len();
                path.push('.');
                path.push_str(k);
                out.insert(k.clone(), from_json_at(v, path)?);
                path.truncate(len);
            }
            Data::Map(out)
        }
    })
}

impl fmt::Display for Data {
    /// Compact JSON, as templates insert non-string values.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_json())
    }
}

impl Serialize for Data {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Data::Null => serializer.serialize_unit(),
            Data::Bool(b) => serializer.serialize_bool(*b),
            Data::Int(i) => serializer.serialize_i64(*i),
            Data::String(s) => serializer.serialize_str(s),
            Data::List(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Data::Map(map) => {
                let mut m = serializer.serialize_map(Some(map.len()))?;
                for (k, v) in map {
                    m.serialize_entry(k, v)?;
                }
                m.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Data {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(DataVisitor)
    }
}

struct DataVisitor;

impl<'de> Visitor<'de> for DataVisitor {
    type Value = Data;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("null, a boolean, a 64-bit integer, a string, a list or a string-keyed map")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Data, E> {
        Ok(Data::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Data, E> {
        Ok(Data::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Data, D::Error> {
        Data::deserialize(d)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Data, E> {
        Ok(Data::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Data, E> {
        Ok(Data::Int(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Data, E> {
        i64::try_from(v)
            .map(Data::Int)
            .map_err(|_| E::custom("integer outside the signed 64-bit range"))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Data, E> {
        i64::try_from(v)
            .map(Data::Int)
            .map_err(|_| E::custom("integer outside the signed 64-bit range"))
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Data, E> {
        i64::try_from(v)
            .map(Data::Int)
            .map_err(|_| E::custom("integer outside the signed 64-bit range"))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Data, E> {
        Err(E::custom("floats are not allowed"))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Data, E> {
        Ok(Data::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Data, E> {
        Ok(Data::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Data, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Data::List(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Data, A::Error> {
        let mut map = BTreeMap::new();
        while let Some((k, v)) = access.next_entry::<String, Data>()? {
            if map.insert(k.clone(), v).is_some() {
                return Err(de::Error::custom(format!("duplicate key `{k}`")));
            }
        }
        Ok(Data::Map(map))
    }
}
