//! The deterministic encoder (RFC 8949 §4.2.1 core deterministic encoding).
//!
//! Invariant: output is the one canonical byte form of the value. Heads are shortest form,
//! lengths definite, and map entries are written in ascending bytewise order of their encoded
//! keys; two keys with the same encoding are an error, never silently merged.

use super::value::{Integer, Value};
use super::{CanonicalError, MAX_DEPTH};

pub(crate) const MAJOR_UNSIGNED: u8 = 0;
pub(crate) const MAJOR_NEGATIVE: u8 = 1;
pub(crate) const MAJOR_BYTES: u8 = 2;
pub(crate) const MAJOR_TEXT: u8 = 3;
pub(crate) const MAJOR_ARRAY: u8 = 4;
pub(crate) const MAJOR_MAP: u8 = 5;

// Additional-information values that announce a 1, 2, 4 or 8 byte argument.
pub(crate) const INFO_U8: u8 = 0x18;
pub(crate) const INFO_U16: u8 = 0x19;
pub(crate) const INFO_U32: u8 = 0x1a;
pub(crate) const INFO_U64: u8 = 0x1b;

pub(crate) const FALSE: u8 = 0xf4;
pub(crate) const TRUE: u8 = 0xf5;
pub(crate) const NULL: u8 = 0xf6;

/// Encodes `value` canonically into a fresh buffer.
pub fn encode(value: &Value) -> Result<Vec<u8>, CanonicalError> {
    let mut out = Vec::new();
    encode_into(value, &mut out)?;
    Ok(out)
}

/// Appends the canonical encoding of `value` to `out`.
///
/// On error `out` may hold a partial encoding after its original length; callers that reuse
/// the buffer should truncate it.
pub fn encode_into(value: &Value, out: &mut Vec<u8>) -> Result<(), CanonicalError> {
    encode_value(value, out, 0)
}

/// `depth` counts the arrays and maps enclosing `value`.
fn encode_value(value: &Value, out: &mut Vec<u8>, depth: usize) -> Result<(), CanonicalError> {
    match value {
        Value::Null => out.push(NULL),
        Value::Bool(false) => out.push(FALSE),
        Value::Bool(true) => out.push(TRUE),
        Value::Integer(integer) => write_integer(*integer, out),
        Value::Bytes(bytes) => {
            write_head(out, MAJOR_BYTES, len_u64(bytes.len()));
            out.extend_from_slice(bytes);
        }
        Value::Text(text) => {
            write_head(out, MAJOR_TEXT, len_u64(text.len()));
            out.extend_from_slice(text.as_bytes());
        }
        Value::Array(items) => {
            if depth >= MAX_DEPTH {
                return Err(CanonicalError::TooDeep { limit: MAX_DEPTH });
            }
            write_head(out, MAJOR_ARRAY, len_u64(items.len()));
            for item in items {
                encode_value(item, out, depth + 1)?;
            }
        }
        Value::Map(entries) => {
            if depth >= MAX_DEPTH {
                return Err(CanonicalError::TooDeep { limit: MAX_DEPTH });
            }
            encode_map(entries, out, depth + 1)?;
        }
    }
    Ok(())
}

/// Writes the entries in place after the head, then reorders them only if they were not
/// already ascending. Each key is encoded exactly once; sorting moves index triples, and the
/// bytes are copied once into their final order.
fn encode_map(
    entries: &[(Value, Value)],
    out: &mut Vec<u8>,
    child_depth: usize,
) -> Result<(), CanonicalError> {
    write_head(out, MAJOR_MAP, len_u64(entries.len()));
    let base = out.len();
    // (key start, key end, entry end), absolute positions in `out`.
    let mut spans: Vec<(usize, usize, usize)> = Vec::with_capacity(entries.len());
    for (key, value) in entries {
        let key_start = out.len();
        encode_value(key, out, child_depth)?;
        let key_end = out.len();
        encode_value(value, out, child_depth)?;
        spans.push((key_start, key_end, out.len()));
    }

    let key = |span: &(usize, usize, usize)| span.0..span.1;
    let ascending = spans
        .windows(2)
        .all(|pair| out[key(&pair[0])] < out[key(&pair[1])]);
    if ascending {
        return Ok(());
    }

    spans.sort_unstable_by(|a, b| out[key(a)].cmp(&out[key(b)]));
    let duplicate = spans.windows(2).find_map(|pair| match pair {
        [a, b] if out[key(a)] == out[key(b)] => Some(*a),
        _ => None,
    });
    if let Some(span) = duplicate {
        let duplicate_bytes = &out[key(&span)];
        let rendered = entries
            .iter()
            .map(|(k, _)| k)
            .find(|k| encode(k).is_ok_and(|bytes| bytes == duplicate_bytes))
            .map_or_else(|| "<unrenderable>".to_owned(), Value::describe);
        return Err(CanonicalError::DuplicateKeyInValue { key: rendered });
    }

    let unsorted = out.split_off(base);
    for (start, _, end) in spans {
        out.extend_from_slice(&unsorted[start - base..end - base]);
    }
    Ok(())
}

pub(crate) fn write_integer(integer: Integer, out: &mut Vec<u8>) {
    let major = if integer.is_negative() {
        MAJOR_NEGATIVE
    } else {
        MAJOR_UNSIGNED
    };
    write_head(out, major, integer.argument());
}

/// Writes a head with the shortest argument encoding.
pub(crate) fn write_head(out: &mut Vec<u8>, major: u8, argument: u64) {
    let major = major << 5;
    if let Ok(small) = u8::try_from(argument) {
        if small < 24 {
            out.push(major | small);
        } else {
            out.extend_from_slice(&[major | INFO_U8, small]);
        }
    } else if let Ok(short) = u16::try_from(argument) {
        out.push(major | INFO_U16);
        out.extend_from_slice(&short.to_be_bytes());
    } else if let Ok(word) = u32::try_from(argument) {
        out.push(major | INFO_U32);
        out.extend_from_slice(&word.to_be_bytes());
    } else {
        out.push(major | INFO_U64);
        out.extend_from_slice(&argument.to_be_bytes());
    }
}

/// How many bytes [`write_head`] uses for `argument`.
pub(crate) fn head_len(argument: u64) -> usize {
    match argument {
        0..=23 => 1,
        24..=0xff => 2,
        0x100..=0xffff => 3,
        0x1_0000..=0xffff_ffff => 5,
        _ => 9,
    }
}

/// Lengths of in-memory buffers fit in a u64 on every target Rust supports (usize <= 64 bits).
pub(crate) fn len_u64(len: usize) -> u64 {
    u64::try_from(len).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        use std::fmt::Write as _;
        bytes.iter().fold(String::new(), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        })
    }

    fn enc(value: &Value) -> String {
        hex(&encode(value).unwrap())
    }

    fn int(v: i128) -> Value {
        Value::Integer(Integer::try_from(v).unwrap())
    }

    fn text(s: &str) -> Value {
        Value::from(s)
    }

    #[test]
    fn rfc8949_appendix_a_integers() {
        let vectors: &[(i128, &str)] = &[
            (0, "00"),
            (1, "01"),
            (10, "0a"),
            (23, "17"),
            (24, "1818"),
            (25, "1819"),
            (100, "1864"),
            (1000, "1903e8"),
            (1_000_000, "1a000f4240"),
            (1_000_000_000_000, "1b000000e8d4a51000"),
            (18_446_744_073_709_551_615, "1bffffffffffffffff"),
            (-18_446_744_073_709_551_616, "3bffffffffffffffff"),
            (-1, "20"),
            (-10, "29"),
            (-100, "3863"),
            (-1000, "3903e7"),
        ];
        for (value, expected) in vectors {
            assert_eq!(enc(&int(*value)), *expected, "encoding {value}");
        }
    }

    #[test]
    fn rfc8949_appendix_a_simple_strings_and_arrays() {
        assert_eq!(enc(&Value::Bool(false)), "f4");
        assert_eq!(enc(&Value::Bool(true)), "f5");
        assert_eq!(enc(&Value::Null), "f6");
        assert_eq!(enc(&Value::Bytes(vec![])), "40");
        assert_eq!(enc(&Value::Bytes(vec![1, 2, 3, 4])), "4401020304");
        assert_eq!(enc(&text("")), "60");
        assert_eq!(enc(&text("a")), "6161");
        assert_eq!(enc(&text("IETF")), "6449455446");
        assert_eq!(enc(&text("\"\\")), "62225c");
        assert_eq!(enc(&text("\u{00fc}")), "62c3bc");
        assert_eq!(enc(&text("\u{6c34}")), "63e6b0b4");
        assert_eq!(enc(&text("\u{10151}")), "64f0908591");
        assert_eq!(enc(&Value::Array(vec![])), "80");
        assert_eq!(enc(&Value::Array(vec![int(1), int(2), int(3)])), "83010203");
        let nested = Value::Array(vec![
            int(1),
            Value::Array(vec![int(2), int(3)]),
            Value::Array(vec![int(4), int(5)]),
        ]);
        assert_eq!(enc(&nested), "8301820203820405");
        let twenty_five: Vec<Value> = (1..=25).map(int).collect();
        assert_eq!(
            enc(&Value::Array(twenty_five)),
            "98190102030405060708090a0b0c0d0e0f101112131415161718181819"
        );
    }

    #[test]
    fn rfc8949_appendix_a_maps() {
        assert_eq!(enc(&Value::Map(vec![])), "a0");
        let ints = Value::Map(vec![(int(1), int(2)), (int(3), int(4))]);
        assert_eq!(enc(&ints), "a201020304");
        let mixed = Value::Map(vec![
            (text("a"), int(1)),
            (text("b"), Value::Array(vec![int(2), int(3)])),
        ]);
        assert_eq!(enc(&mixed), "a26161016162820203");
        let five = Value::Map(
            ["e", "d", "c", "b", "a"]
                .iter()
                .map(|k| (text(k), text(&k.to_uppercase())))
                .collect(),
        );
        assert_eq!(enc(&five), "a56161614161626142616361436164614461656145");
    }

    #[test]
    fn map_keys_sort_by_encoded_bytes_not_by_string_order() {
        let map = Value::Map(vec![
            (text("aa"), int(3)),
            (text("b"), int(2)),
            (text("a"), int(1)),
        ]);
        // "a" (61 61) < "b" (61 62) < "aa" (62 61 61): shorter text sorts first.
        assert_eq!(enc(&map), "a361610161620262616103");
    }

    #[test]
    fn integer_keys_sort_before_text_keys_and_by_head_bytes() {
        let map = Value::Map(vec![
            (text("a"), int(0)),
            (int(-1), int(1)),
            (int(24), int(2)),
            (int(10), int(3)),
            (Value::Bytes(vec![0]), int(4)),
        ]);
        // 0a < 1818 < 20 < 4100 < 6161
        assert_eq!(enc(&map), "a50a031818022001410004616100");
    }

    #[test]
    fn duplicate_keys_are_rejected() {
        let map = Value::Map(vec![
            (text("k"), int(1)),
            (text("j"), int(0)),
            (text("k"), int(2)),
        ]);
        assert_eq!(
            encode(&map),
            Err(CanonicalError::DuplicateKeyInValue {
                key: "\"k\"".to_owned()
            })
        );
        let numeric = Value::Map(vec![(int(5), Value::Null), (int(5), Value::Null)]);
        assert!(matches!(
            encode(&numeric),
            Err(CanonicalError::DuplicateKeyInValue { .. })
        ));
    }

    #[test]
    fn nested_map_entries_are_sorted_at_every_level() {
        let inner = Value::Map(vec![(text("z"), int(1)), (text("y"), int(2))]);
        let outer = Value::Map(vec![(text("o"), inner), (text("a"), Value::Null)]);
        assert_eq!(enc(&outer), "a26161f6616fa2617902617a01");
    }

    #[test]
    fn nesting_limit_applies_when_encoding() {
        let mut value = Value::Null;
        for _ in 0..MAX_DEPTH {
            value = Value::Array(vec![value]);
        }
        assert!(encode(&value).is_ok());
        let too_deep = Value::Map(vec![(Value::Null, value)]);
        assert_eq!(
            encode(&too_deep),
            Err(CanonicalError::TooDeep { limit: MAX_DEPTH })
        );
    }

    #[test]
    fn encode_into_appends() {
        let mut out = vec![0xaa];
        encode_into(&int(1), &mut out).unwrap();
        assert_eq!(out, vec![0xaa, 0x01]);
    }
}
