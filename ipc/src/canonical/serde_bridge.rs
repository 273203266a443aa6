//! The serde bridge: typed Rust values to and from canonical bytes.
//!
//! Invariant: typed data reaches bytes with the same guarantees as hand-built values. The
//! byte paths ([`to_canonical_bytes`], [`from_canonical_bytes`]) go straight between serde
//! and bytes (`ser`, and the strict check followed by `de`); the value paths ([`to_value`],
//! [`from_value`]) go through ciborium's value tree. Both use ciborium's mapping of serde's
//! data model (`None` and `()` become null, unit variants text, other variants a one-entry
//! map, structs a text-keyed map) and refuse the items the canonical model lacks (floats,
//! tags such as bignums) by name, so `to_canonical_bytes(t) == encode(&to_value(t)?)` and
//! `from_canonical_bytes(b) == from_value(decode(b)?)`, results and errors alike.

use ciborium::value::{Error as CiboriumError, Integer as CiboriumInteger, Value as Cbor};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::value::{Integer, Value};
use super::{CanonicalError, MAX_DEPTH, de, ser};

/// Serializes `value` into the canonical value model.
///
/// Map entries keep serialization order (struct fields in declaration order);
/// [`encode`](super::encode) puts them in canonical order.
pub fn to_value<T: Serialize + ?Sized>(value: &T) -> Result<Value, CanonicalError> {
    let raw = Cbor::serialized(value).map_err(|error| CanonicalError::Serialize {
        type_name: std::any::type_name::<T>(),
        message: message(error),
    })?;
    from_ciborium(raw, 0)
}

/// Serializes `value` to canonical CBOR bytes.
pub fn to_canonical_bytes<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CanonicalError> {
    ser::to_bytes(value).map_err(|error| match error {
        Ok(message) => CanonicalError::Serialize {
            type_name: std::any::type_name::<T>(),
            message,
        },
        Err(canonical) => canonical,
    })
}

/// Deserializes a `T` from a value of the canonical model.
pub fn from_value<T: DeserializeOwned>(value: Value) -> Result<T, CanonicalError> {
    into_ciborium(value, 0)?
        .deserialized()
        .map_err(|error| CanonicalError::Deserialize {
            type_name: std::any::type_name::<T>(),
            message: message(error),
        })
}

/// Strictly decodes canonical CBOR bytes and deserializes a `T` from them.
///
/// A non-canonical input is refused as such (with the error [`decode`](super::decode)
/// gives) even where its shape would not fit `T` either. The reader checks canonical form
/// as it goes; the separate full check runs only when the typed read failed or left bytes
/// unchecked.
pub fn from_canonical_bytes<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CanonicalError> {
    let mut reader = de::Reader::new(bytes);
    match T::deserialize(&mut reader) {
        Ok(value) if reader.read_all_checked() => Ok(value),
        Ok(value) => {
            super::decode::check(bytes)?;
            Ok(value)
        }
        Err(error) => {
            super::decode::check(bytes)?;
            Err(CanonicalError::Deserialize {
                type_name: std::any::type_name::<T>(),
                message: error.0,
            })
        }
    }
}

fn message(error: CiboriumError) -> String {
    let CiboriumError::Custom(message) = error;
    message
}

fn too_deep() -> CanonicalError {
    CanonicalError::TooDeep { limit: MAX_DEPTH }
}

/// `depth` counts the arrays and maps enclosing `raw`.
fn from_ciborium(raw: Cbor, depth: usize) -> Result<Value, CanonicalError> {
    Ok(match raw {
        Cbor::Null => Value::Null,
        Cbor::Bool(b) => Value::Bool(b),
        Cbor::Integer(integer) => Value::Integer(Integer::try_from(i128::from(integer))?),
        Cbor::Bytes(bytes) => Value::Bytes(bytes),
        Cbor::Text(text) => Value::Text(text),
        Cbor::Float(value) => return Err(CanonicalError::UnsupportedFloat { value }),
        Cbor::Tag(tag, _) => return Err(CanonicalError::UnsupportedTag { tag }),
        Cbor::Array(items) => {
            if depth >= MAX_DEPTH {
                return Err(too_deep());
            }
            Value::Array(
                items
                    .into_iter()
                    .map(|item| from_ciborium(item, depth + 1))
                    .collect::<Result<_, _>>()?,
            )
        }
        Cbor::Map(entries) => {
            if depth >= MAX_DEPTH {
                return Err(too_deep());
            }
            Value::Map(
                entries
                    .into_iter()
                    .map(|(k, v)| Ok((from_ciborium(k, depth + 1)?, from_ciborium(v, depth + 1)?)))
                    .collect::<Result<_, CanonicalError>>()?,
            )
        }
        // ciborium::Value is non_exhaustive: an item kind added later has no canonical form
        // here until this model learns it.
        other => {
            return Err(CanonicalError::Serialize {
                type_name: "ciborium::Value",
                message: format!("unsupported CBOR item {other:?}"),
            });
        }
    })
}

fn into_ciborium(value: Value, depth: usize) -> Result<Cbor, CanonicalError> {
    Ok(match value {
        Value::Null => Cbor::Null,
        Value::Bool(b) => Cbor::Bool(b),
        Value::Integer(integer) => Cbor::Integer(if integer.is_negative() {
            CiboriumInteger::try_from(integer.to_i128()).map_err(|_| {
                CanonicalError::IntegerOutOfRange {
                    value: integer.to_i128(),
                }
            })?
        } else {
            CiboriumInteger::from(integer.argument())
        }),
        Value::Bytes(bytes) => Cbor::Bytes(bytes),
        Value::Text(text) => Cbor::Text(text),
        Value::Array(items) => {
            if depth >= MAX_DEPTH {
                return Err(too_deep());
            }
            Cbor::Array(
                items
                    .into_iter()
                    .map(|item| into_ciborium(item, depth + 1))
                    .collect::<Result<_, _>>()?,
            )
        }
        Value::Map(entries) => {
            if depth >= MAX_DEPTH {
                return Err(too_deep());
            }
            Cbor::Map(
                entries
                    .into_iter()
                    .map(|(k, v)| Ok((into_ciborium(k, depth + 1)?, into_ciborium(v, depth + 1)?)))
                    .collect::<Result<_, CanonicalError>>()?,
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use serde::Deserialize;

    use super::*;
    use crate::canonical::{decode, encode};
    use crate::data::Data;

    fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(value: &T) {
        let bytes = to_canonical_bytes(value).unwrap();
        let back: T = from_canonical_bytes(&bytes).unwrap();
        assert_eq!(&back, value);
        // Canonical: decoding and re-encoding gives the same bytes.
        assert_eq!(encode(&decode(&bytes).unwrap()).unwrap(), bytes);
        same_as_value_path::<T>(value);
    }

    /// The byte paths agree with the value paths: same bytes or error when serializing,
    /// same value or error when deserializing.
    fn same_as_value_path<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(
        value: &T,
    ) {
        let direct = to_canonical_bytes(value);
        let two_step = to_value(value).and_then(|v| encode(&v));
        assert_eq!(direct, two_step);
        if let Ok(bytes) = direct {
            same_reading::<T>(&bytes);
        }
    }

    fn same_reading<T: DeserializeOwned + PartialEq + std::fmt::Debug>(bytes: &[u8]) {
        let direct: Result<T, _> = from_canonical_bytes(bytes);
        let two_step: Result<T, _> = decode(bytes).and_then(from_value);
        assert_eq!(direct, two_step, "reading {}", std::any::type_name::<T>());
    }

    fn same_writing<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CanonicalError> {
        let direct = to_canonical_bytes(value);
        assert_eq!(direct, to_value(value).and_then(|v| encode(&v)));
        direct
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Record {
        name: String,
        note: Option<String>,
        count: Option<u32>,
        big: u64,
        small: i64,
        tags: Vec<String>,
        payload: Vec<u8>,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum External {
        Unit,
        Newtype(i64),
        Tuple(u8, String),
        Struct { a: Option<bool>, b: Vec<External> },
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[serde(tag = "kind", rename_all = "snake_case")]
    enum Internal {
        Command {
            argv: Vec<String>,
            cwd: Option<String>,
            timeout_ms: Option<u64>,
        },
        Agent {
            name: String,
            limit: i64,
        },
        Noop,
    }

    #[test]
    fn struct_with_none_fields_and_extreme_integers_round_trips() {
        round_trip(&Record {
            name: "n".into(),
            note: None,
            count: Some(7),
            big: u64::MAX,
            small: i64::MIN,
            tags: vec!["x".into(), String::new()],
            payload: vec![0, 255],
        });
        round_trip(&Record {
            name: String::new(),
            note: Some("kept".into()),
            count: None,
            big: 0,
            small: i64::MAX,
            tags: vec![],
            payload: vec![],
        });
    }

    #[test]
    fn externally_tagged_enums_round_trip() {
        round_trip(&External::Unit);
        round_trip(&External::Newtype(-5));
        round_trip(&External::Tuple(9, "t".into()));
        round_trip(&External::Struct {
            a: None,
            b: vec![
                External::Unit,
                External::Struct {
                    a: Some(true),
                    b: vec![],
                },
            ],
        });
        assert_eq!(to_value(&External::Unit).unwrap(), Value::from("Unit"));
    }

    #[test]
    fn internally_tagged_enums_round_trip() {
        round_trip(&Internal::Command {
            argv: vec!["ls".into(), "-l".into()],
            cwd: None,
            timeout_ms: Some(30_000),
        });
        round_trip(&Internal::Agent {
            name: "a".into(),
            limit: -3,
        });
        round_trip(&Internal::Noop);
        round_trip(&vec![
            Internal::Noop,
            Internal::Agent {
                name: String::new(),
                limit: 0,
            },
        ]);
    }

    #[test]
    fn struct_fields_are_written_in_canonical_key_order() {
        #[derive(Serialize)]
        struct Fields {
            bb: u8,
            a: u8,
            c: u8,
        }
        let bytes = to_canonical_bytes(&Fields { bb: 3, a: 1, c: 2 }).unwrap();
        // {"a": 1, "c": 2, "bb": 3}
        assert_eq!(
            bytes,
            [0xa3, 0x61, b'a', 1, 0x61, b'c', 2, 0x62, b'b', b'b', 3]
        );
    }

    #[test]
    fn maps_of_any_origin_encode_identically() {
        let btree: BTreeMap<String, u8> = [("aa", 1), ("b", 2), ("a", 3)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        let hash: HashMap<String, u8> = btree.clone().into_iter().collect();
        let from_btree = to_canonical_bytes(&btree).unwrap();
        assert_eq!(from_btree, to_canonical_bytes(&hash).unwrap());
        let back: BTreeMap<String, u8> = from_canonical_bytes(&from_btree).unwrap();
        assert_eq!(back, btree);
    }

    #[test]
    fn floats_are_refused_by_name() {
        assert_eq!(
            to_canonical_bytes(&1.5_f64),
            Err(CanonicalError::UnsupportedFloat { value: 1.5 })
        );
        let nested = vec![(String::from("x"), 0.25_f32)];
        assert!(matches!(
            to_canonical_bytes(&nested),
            Err(CanonicalError::UnsupportedFloat { value }) if value.to_bits() == 0.25_f64.to_bits()
        ));
    }

    #[test]
    fn integers_beyond_cbor_range_are_refused_as_tags() {
        assert_eq!(
            to_canonical_bytes(&(u128::from(u64::MAX) + 1)),
            Err(CanonicalError::UnsupportedTag { tag: 2 })
        );
        assert!(to_canonical_bytes(&u128::from(u64::MAX)).is_ok());
    }

    #[test]
    fn flattened_duplicate_keys_are_refused() {
        #[derive(Serialize)]
        struct Outer {
            name: String,
            #[serde(flatten)]
            extra: BTreeMap<String, String>,
        }
        let extra = [("name".to_owned(), "again".to_owned())]
            .into_iter()
            .collect();
        assert_eq!(
            to_canonical_bytes(&Outer {
                name: "first".into(),
                extra
            }),
            Err(CanonicalError::DuplicateKeyInValue {
                key: "\"name\"".to_owned()
            })
        );
    }

    #[test]
    fn shape_mismatch_names_the_type() {
        let bytes = to_canonical_bytes(&Internal::Noop).unwrap();
        match from_canonical_bytes::<Record>(&bytes) {
            Err(CanonicalError::Deserialize { type_name, message }) => {
                assert!(type_name.ends_with("Record"), "{type_name}");
                assert!(message.contains("missing field"), "{message}");
            }
            other => panic!("expected a deserialize error, got {other:?}"),
        }
    }

    #[test]
    fn non_canonical_bytes_are_refused_before_deserializing() {
        // {"small": 1} with a non-shortest integer head.
        let bytes = [0xa1, 0x65, b's', b'm', b'a', b'l', b'l', 0x18, 0x01];
        assert!(matches!(
            from_canonical_bytes::<BTreeMap<String, i64>>(&bytes),
            Err(CanonicalError::NonShortestInteger {
                offset: 7,
                value: 1
            })
        ));
    }

    #[test]
    fn typed_reads_refuse_every_non_canonical_form_like_decode() {
        #[derive(Debug, PartialEq, Deserialize)]
        struct Small {
            a: u8,
        }
        fn refused<T: DeserializeOwned + std::fmt::Debug + PartialEq>(bytes: &[u8]) {
            let expected = decode(bytes).expect_err("the input is not canonical");
            assert_eq!(from_canonical_bytes::<T>(bytes), Err(expected));
            same_reading::<T>(bytes);
        }
        // {"b": 1, "a": 2}: keys out of order; {"a": 1, "a": 2}: duplicate.
        refused::<BTreeMap<String, i64>>(&[0xa2, 0x61, b'b', 1, 0x61, b'a', 2]);
        refused::<BTreeMap<String, i64>>(&[0xa2, 0x61, b'a', 1, 0x61, b'a', 2]);
        // A non-shortest integer in a field the struct skips unread.
        refused::<Small>(&[0xa2, 0x61, b'a', 1, 0x61, b'z', 0x18, 0x01]);
        // Tags, floats, undefined, trailing bytes, indefinite lengths.
        refused::<i64>(&[0xc1, 0x00]);
        refused::<Data>(&[0x82, 0x01, 0xf9, 0x3c, 0x00]);
        refused::<Data>(&[0xf7]);
        refused::<u8>(&[0x01, 0x00]);
        refused::<Vec<u8>>(&[0x9f, 0x01, 0xff]);
        refused::<u16>(&[0x19, 0x00, 0xff]);
        refused::<u64>(&[0x1b, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
        // Nesting one deeper than the limit.
        let mut deep = vec![0x81; MAX_DEPTH];
        deep.push(0x80);
        refused::<Data>(&deep);
        // A shape error in canonical bytes stays a shape error.
        assert!(matches!(
            from_canonical_bytes::<Small>(&[0xa1, 0x61, b'a', 0x19, 0x01, 0x00]),
            Err(CanonicalError::Deserialize { .. })
        ));
    }

    #[test]
    fn from_value_accepts_hand_built_values() {
        let value = Value::Map(vec![
            (Value::from("kind"), Value::from("agent")),
            (Value::from("name"), Value::from("x")),
            (Value::from("limit"), Value::from(-9_i64)),
        ]);
        let agent: Internal = from_value(value).unwrap();
        assert_eq!(
            agent,
            Internal::Agent {
                name: "x".into(),
                limit: -9
            }
        );
    }

    /// A map whose `Serialize` announces a wrong length, keys out of order.
    struct LyingMap(Vec<(u64, &'static str)>, Option<usize>);

    impl Serialize for LyingMap {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeMap as _;
            let mut map = serializer.serialize_map(self.1)?;
            for (k, v) in &self.0 {
                map.serialize_entry(k, v)?;
            }
            map.end()
        }
    }

    /// A value whose `Serialize` fails.
    struct Failing;

    impl Serialize for Failing {
        fn serialize<S: serde::Serializer>(&self, _serializer: S) -> Result<S::Ok, S::Error> {
            Err(serde::ser::Error::custom("refused on purpose"))
        }
    }

    /// Raw bytes (major type 2) rather than an array of integers.
    struct Raw(&'static [u8]);

    impl Serialize for Raw {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.serialize_bytes(self.0)
        }
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[allow(clippy::option_option)] // Some(Some(_)) must survive the trip.
    struct Shapes {
        unit: (),
        tuple: (u8, i64, String),
        pair: Pair,
        marker: Marker,
        letter: char,
        wide: i128,
        huge: u128,
        nested: Option<Option<u8>>,
        variants: Vec<External>,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Pair(u16, Option<i8>);

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Marker;

    #[test]
    fn byte_paths_match_value_paths_for_every_serde_shape() {
        round_trip(&Shapes {
            unit: (),
            tuple: (7, -300, "t".into()),
            pair: Pair(65_535, Some(-128)),
            marker: Marker,
            letter: '\u{10151}',
            wide: -(1_i128 << 64),
            huge: u128::from(u64::MAX),
            nested: Some(Some(3)),
            variants: vec![
                External::Unit,
                External::Newtype(i64::MIN),
                External::Tuple(0, String::new()),
                External::Struct {
                    a: None,
                    b: vec![External::Unit],
                },
            ],
        });
        let many: HashMap<String, Vec<u32>> = (0..300)
            .map(|i| (format!("k{i}"), vec![i; (i % 3) as usize]))
            .collect();
        round_trip(&many);
        let keyed: BTreeMap<i64, bool> = [(-1, true), (24, false), (0, true), (i64::MIN, false)]
            .into_iter()
            .collect();
        round_trip(&keyed);
    }

    #[test]
    fn announced_lengths_do_not_matter() {
        let entries = vec![(300, "c"), (1, "a"), (24, "b")];
        let exact = same_writing(&LyingMap(entries.clone(), Some(3))).unwrap();
        assert_eq!(
            same_writing(&LyingMap(entries.clone(), None)).unwrap(),
            exact
        );
        assert_eq!(
            same_writing(&LyingMap(entries.clone(), Some(1))).unwrap(),
            exact
        );
        assert_eq!(
            same_writing(&LyingMap(entries, Some(70_000))).unwrap(),
            exact
        );
        let items: Vec<u8> = (0..30).collect();
        assert_eq!(same_writing(&items).unwrap()[..2], [0x98, 30]);
    }

    #[test]
    fn bytes_and_big_integers_match_value_paths() {
        assert_eq!(same_writing(&Raw(&[1, 2])).unwrap(), [0x42, 1, 2]);
        assert_eq!(
            same_writing(&(-(1_i128 << 64) - 1)),
            Err(CanonicalError::UnsupportedTag { tag: 3 })
        );
        assert_eq!(
            same_writing(&(1_i128 << 64)),
            Err(CanonicalError::UnsupportedTag { tag: 2 })
        );
    }

    #[test]
    fn error_precedence_matches_value_paths() {
        // A float before a duplicate key: the float wins.
        let dup_then_float = (LyingMap(vec![(1, "x"), (1, "y")], None), vec![0.5_f64]);
        assert!(matches!(
            same_writing(&dup_then_float),
            Err(CanonicalError::UnsupportedFloat { .. })
        ));
        // A serializer's own error wins over an earlier float.
        assert!(matches!(
            same_writing(&(1.5_f32, Failing)),
            Err(CanonicalError::Serialize { message, .. }) if message == "refused on purpose"
        ));
        // The innermost duplicate is reported first.
        let inner = LyingMap(vec![(2, "i"), (2, "j")], Some(2));
        let outer = vec![(String::from("o"), inner)];
        assert_eq!(
            same_writing(&(outer, LyingMap(vec![(9, "a"), (9, "b")], Some(2)))),
            Err(CanonicalError::DuplicateKeyInValue {
                key: "2".to_owned()
            })
        );
    }

    #[test]
    fn nesting_limit_matches_value_paths() {
        let mut ok = Data::Null;
        for _ in 0..MAX_DEPTH {
            ok = Data::List(vec![ok]);
        }
        assert!(same_writing(&ok).is_ok());
        let deep = Data::List(vec![ok]);
        assert_eq!(
            same_writing(&deep),
            Err(CanonicalError::TooDeep { limit: MAX_DEPTH })
        );
        // A newtype variant is a map level of its own.
        let mut variant = External::Unit;
        for _ in 0..MAX_DEPTH {
            variant = External::Struct {
                a: None,
                b: vec![variant],
            };
        }
        assert_eq!(
            same_writing(&variant),
            Err(CanonicalError::TooDeep { limit: MAX_DEPTH })
        );
    }

    #[test]
    fn shape_errors_match_value_paths() {
        let record = to_canonical_bytes(&Record {
            name: "n".into(),
            note: None,
            count: Some(300),
            big: u64::MAX,
            small: i64::MIN,
            tags: vec!["ab".into()],
            payload: vec![1],
        })
        .unwrap();
        same_reading::<Internal>(&record);
        same_reading::<External>(&record);
        same_reading::<BTreeMap<String, u8>>(&record);
        same_reading::<BTreeMap<String, Data>>(&record);
        same_reading::<Vec<u8>>(&record);
        same_reading::<Marker>(&record);
        same_reading::<Option<Pair>>(&record);
        for value in [
            Data::Int(300),
            Data::Int(-1),
            Data::Int(i64::MIN),
            Data::String("ab".into()),
            Data::String("a".into()),
            Data::Null,
            Data::Bool(true),
            Data::List(vec![Data::Int(1), Data::Int(2)]),
            Data::List(vec![]),
        ] {
            let bytes = to_canonical_bytes(&value).unwrap();
            same_reading::<u8>(&bytes);
            same_reading::<i8>(&bytes);
            same_reading::<u64>(&bytes);
            same_reading::<i128>(&bytes);
            same_reading::<char>(&bytes);
            same_reading::<bool>(&bytes);
            same_reading::<String>(&bytes);
            same_reading::<()>(&bytes);
            same_reading::<Option<u8>>(&bytes);
            same_reading::<Pair>(&bytes);
            same_reading::<External>(&bytes);
            same_reading::<Data>(&bytes);
            same_reading::<(u8, u8)>(&bytes);
        }
        // A unit variant written with a payload, and an unknown variant.
        same_reading::<External>(&to_canonical_bytes(&BTreeMap::from([("Unit", 1)])).unwrap());
        same_reading::<External>(&to_canonical_bytes(&"Missing").unwrap());
        same_reading::<External>(&to_canonical_bytes(&"Newtype").unwrap());
        same_reading::<External>(&to_canonical_bytes(&"Struct").unwrap());
        // Unknown fields are skipped whole, whatever they hold.
        let extra = to_canonical_bytes(&BTreeMap::from([
            (
                "extra",
                Data::List(vec![Data::Map(BTreeMap::new()), Data::Int(-5)]),
            ),
            ("kind", Data::String("noop".into())),
        ]))
        .unwrap();
        same_reading::<Internal>(&extra);
        // The smallest integer only fits an i128.
        let min = encode(&Value::Integer(Integer::MIN)).unwrap();
        same_reading::<Data>(&min);
        same_reading::<i128>(&min);
        same_reading::<i64>(&min);
    }
}
