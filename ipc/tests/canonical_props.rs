//! Property tests for the canonical CBOR layer: one byte form per value, order-independent
//! maps, and a decoder that never panics and accepts only what the encoder writes.

// Strategy helpers sit outside `#[test]` functions, where clippy's test exemption ends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use proptest::prelude::*;
use rho_ipc::canonical::{
    CanonicalError, Integer, Value, decode, encode, from_canonical_bytes, to_canonical_bytes,
};

fn integer() -> impl Strategy<Value = Integer> {
    prop_oneof![
        (any::<bool>(), 0_u64..30).prop_map(|(n, a)| Integer::from_head(n, a)),
        (any::<bool>(), any::<u64>()).prop_map(|(n, a)| Integer::from_head(n, a)),
        (
            any::<bool>(),
            prop::sample::select(vec![
                23_u64,
                24,
                0xff,
                0x100,
                0xffff,
                0x1_0000,
                0xffff_ffff,
                0x1_0000_0000,
                u64::MAX
            ])
        )
            .prop_map(|(n, a)| Integer::from_head(n, a)),
    ]
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        integer().prop_map(Value::Integer),
        prop::collection::vec(any::<u8>(), 0..40).prop_map(Value::Bytes),
        // A small alphabet makes equal and prefix-related keys likely.
        "[ab]{0,3}".prop_map(Value::Text),
        any::<String>().prop_map(Value::Text),
    ]
}

/// Keeps the first entry of every encoded key, so the map is encodable.
fn unique_keys(entries: Vec<(Value, Value)>) -> Vec<(Value, Value)> {
    let mut seen = std::collections::BTreeSet::new();
    entries
        .into_iter()
        .filter(|(k, _)| seen.insert(encode(k).expect("generated keys encode")))
        .collect()
}

fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec((prop_oneof![scalar(), inner.clone()], inner), 0..8)
                .prop_map(|entries| Value::Map(unique_keys(entries))),
        ]
    })
}

/// The value the decoder returns for `encode(value)`: every map in encoded-key order.
fn canonical_order(value: Value) -> Value {
    match value {
        Value::Array(items) => Value::Array(items.into_iter().map(canonical_order).collect()),
        Value::Map(entries) => {
            let mut keyed: Vec<(Vec<u8>, (Value, Value))> = entries
                .into_iter()
                .map(|(k, v)| {
                    (
                        encode(&k).unwrap(),
                        (canonical_order(k), canonical_order(v)),
                    )
                })
                .collect();
            keyed.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Map(keyed.into_iter().map(|(_, entry)| entry).collect())
        }
        other => other,
    }
}

/// Writes a head one size wider than shortest form (or shortest, when `widen` is false).
/// Returns false when the argument already needs 8 bytes and cannot be widened.
fn write_head(out: &mut Vec<u8>, major: u8, argument: u64, widen: bool) -> bool {
    let shortest = if argument < 24 {
        0
    } else if argument <= 0xff {
        1
    } else if argument <= 0xffff {
        2
    } else if argument <= 0xffff_ffff {
        3
    } else {
        4
    };
    let size = if widen { shortest + 1 } else { shortest };
    let major = major << 5;
    match size {
        0 => out.push(major | u8::try_from(argument).unwrap()),
        1 => out.extend([major | 0x18, u8::try_from(argument).unwrap()]),
        2 => {
            out.push(major | 0x19);
            out.extend(u16::try_from(argument).unwrap().to_be_bytes());
        }
        3 => {
            out.push(major | 0x1a);
            out.extend(u32::try_from(argument).unwrap().to_be_bytes());
        }
        4 => {
            out.push(major | 0x1b);
            out.extend(argument.to_be_bytes());
        }
        _ => return false,
    }
    widen
}

/// Re-encodes a decoded (canonically ordered) value, writing the head of the `target`-th
/// item (pre-order) in a non-shortest form. Returns whether that head was widened.
fn encode_widening(value: &Value, target: usize, seen: &mut usize, out: &mut Vec<u8>) -> bool {
    let widen = *seen == target;
    *seen += 1;
    let len = |n: usize| u64::try_from(n).unwrap();
    match value {
        Value::Null => {
            out.push(0xf6);
            false
        }
        Value::Bool(b) => {
            out.push(if *b { 0xf5 } else { 0xf4 });
            false
        }
        Value::Integer(i) => write_head(out, u8::from(i.is_negative()), i.argument(), widen),
        Value::Bytes(b) => {
            let widened = write_head(out, 2, len(b.len()), widen);
            out.extend(b);
            widened
        }
        Value::Text(t) => {
            let widened = write_head(out, 3, len(t.len()), widen);
            out.extend(t.as_bytes());
            widened
        }
        Value::Array(items) => {
            let mut widened = write_head(out, 4, len(items.len()), widen);
            for item in items {
                widened |= encode_widening(item, target, seen, out);
            }
            widened
        }
        Value::Map(entries) => {
            let mut widened = write_head(out, 5, len(entries.len()), widen);
            for (k, v) in entries {
                widened |= encode_widening(k, target, seen, out);
                widened |= encode_widening(v, target, seen, out);
            }
            widened
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn encode_decode_encode_is_identity(v in value()) {
        let bytes = encode(&v).unwrap();
        let decoded = decode(&bytes).unwrap();
        prop_assert_eq!(&decoded, &canonical_order(v));
        prop_assert_eq!(encode(&decoded).unwrap(), bytes);
    }

    #[test]
    fn map_bytes_do_not_depend_on_insertion_order(
        (entries, shuffled) in prop::collection::vec((scalar(), value()), 0..12)
            .prop_map(unique_keys)
            .prop_flat_map(|entries| (Just(entries.clone()), Just(entries).prop_shuffle()))
    ) {
        let a = encode(&Value::Map(entries)).unwrap();
        let b = encode(&Value::Map(shuffled)).unwrap();
        prop_assert_eq!(a, b);
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_accepted_bytes_are_canonical(
        bytes in prop::collection::vec(any::<u8>(), 0..64)
    ) {
        if let Ok(v) = decode(&bytes) {
            prop_assert_eq!(encode(&v).unwrap(), bytes);
        }
    }

    #[test]
    fn mutated_encodings_never_panic_and_accepted_bytes_are_canonical(
        v in value(),
        position in any::<prop::sample::Index>(),
        replacement in any::<u8>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = encode(&v).unwrap();
        let at = position.index(bytes.len());
        bytes[at] = replacement;
        let keep = cut.index(bytes.len() + 1);
        for candidate in [&bytes[..], &bytes[..keep]] {
            if let Ok(decoded) = decode(candidate) {
                prop_assert_eq!(encode(&decoded).unwrap(), candidate.to_vec());
            }
        }
    }

    #[test]
    fn i64_and_u64_round_trip_through_serde(small in any::<i64>(), big in any::<u64>()) {
        let bytes = to_canonical_bytes(&(small, big)).unwrap();
        let back: (i64, u64) = from_canonical_bytes(&bytes).unwrap();
        prop_assert_eq!(back, (small, big));
    }

    #[test]
    fn string_maps_round_trip_through_serde(
        map in prop::collection::btree_map("[a-c]{0,4}", any::<Option<i64>>(), 0..10)
    ) {
        let bytes = to_canonical_bytes(&map).unwrap();
        let back: BTreeMap<String, Option<i64>> = from_canonical_bytes(&bytes).unwrap();
        prop_assert_eq!(back, map);
    }

    #[test]
    fn widening_any_head_is_rejected(v in value(), pick in any::<prop::sample::Index>()) {
        let canonical = decode(&encode(&v).unwrap()).unwrap();
        let mut count = 0;
        let mut plain = Vec::new();
        encode_widening(&canonical, usize::MAX, &mut count, &mut plain);
        prop_assert_eq!(&plain, &encode(&v).unwrap());

        let mut widened = Vec::new();
        let did_widen = encode_widening(&canonical, pick.index(count), &mut 0, &mut widened);
        if did_widen {
            let error = decode(&widened).unwrap_err();
            prop_assert!(
                matches!(
                    error,
                    CanonicalError::NonShortestInteger { .. }
                        | CanonicalError::NonShortestLength { .. }
                ),
                "{error:?}"
            );
        }
    }

    #[test]
    fn maps_written_out_of_order_are_rejected(
        entries in prop::collection::vec((scalar(), value()), 2..8).prop_map(unique_keys)
    ) {
        prop_assume!(entries.len() >= 2);
        let Value::Map(sorted) = decode(&encode(&Value::Map(entries)).unwrap()).unwrap() else {
            unreachable!("a map decodes as a map")
        };
        // Same entries, descending: the second key is the first one out of order.
        let mut bytes = encode(&Value::Map(vec![])).unwrap();
        bytes[0] |= u8::try_from(sorted.len()).unwrap();
        for (k, v) in sorted.iter().rev() {
            bytes.extend(encode(k).unwrap());
            bytes.extend(encode(v).unwrap());
        }
        let error = decode(&bytes).unwrap_err();
        prop_assert!(matches!(error, CanonicalError::UnsortedKeys { .. }), "{error:?}");
    }
}
