//! The strict decoder: accepts exactly the bytes the encoder produces, nothing else.
//!
//! Invariant: every accepted input equals `encode` of the returned value, so a digest of the
//! input is a digest of the value. Each way to deviate from canonical form has its own error
//! variant, and no input (however hostile) panics, recurses deeper than [`MAX_DEPTH`], or
//! makes the decoder reserve memory for more elements than the input could hold.
//!
//! Because the parse checks shortest heads, definite lengths and key order as it goes, the
//! acceptance check is the same as "re-encode and compare", without building the bytes twice:
//! a key's input bytes are its canonical encoding, so comparing them is comparing encodings.

use super::encode::{
    MAJOR_ARRAY, MAJOR_BYTES, MAJOR_MAP, MAJOR_NEGATIVE, MAJOR_TEXT, MAJOR_UNSIGNED,
};
use super::value::{Integer, Value};
use super::{CanonicalError, MAX_DEPTH};

const MAJOR_TAG: u8 = 6;
const MAJOR_SIMPLE: u8 = 7;

/// Elements reserved up front for an array or map, whatever its declared length; the vector
/// grows as elements actually decode. Prevents a few bytes of nested length claims from
/// reserving gigabytes.
const PREALLOCATE_LIMIT: usize = 256;

/// Decodes exactly one canonical CBOR item that spans all of `bytes`.
pub fn decode(bytes: &[u8]) -> Result<Value, CanonicalError> {
    let mut decoder = Decoder {
        input: bytes,
        pos: 0,
    };
    let value = decoder.item(0)?;
    if decoder.pos < bytes.len() {
        return Err(CanonicalError::TrailingBytes {
            offset: decoder.pos,
            count: bytes.len() - decoder.pos,
        });
    }
    Ok(value)
}

/// Checks that `bytes` is exactly one canonical CBOR item, as [`decode`] does (same errors,
/// same order), without building the value.
pub(crate) fn check(bytes: &[u8]) -> Result<(), CanonicalError> {
    let mut decoder = Decoder {
        input: bytes,
        pos: 0,
    };
    decoder.check(0)?;
    if decoder.pos < bytes.len() {
        return Err(CanonicalError::TrailingBytes {
            offset: decoder.pos,
            count: bytes.len() - decoder.pos,
        });
    }
    Ok(())
}

struct Decoder<'a> {
    input: &'a [u8],
    pos: usize,
}

fn kind_name(major: u8) -> &'static str {
    match major {
        MAJOR_BYTES => "byte string",
        MAJOR_TEXT => "text string",
        MAJOR_ARRAY => "array",
        _ => "map",
    }
}

impl Decoder<'_> {
    fn remaining(&self) -> usize {
        self.input.len() - self.pos
    }

    fn take(&mut self, count: usize) -> Result<&[u8], CanonicalError> {
        if self.remaining() < count {
            return Err(CanonicalError::Truncated {
                offset: self.input.len(),
                needed: count - self.remaining(),
            });
        }
        let start = self.pos;
        self.pos += count;
        Ok(&self.input[start..self.pos])
    }

    fn byte(&mut self) -> Result<u8, CanonicalError> {
        Ok(self.take(1)?[0])
    }

    /// Reads the argument that follows an initial byte with additional info 24..=27.
    fn argument(&mut self, info: u8) -> Result<u64, CanonicalError> {
        Ok(match info {
            24 => u64::from(self.byte()?),
            25 => {
                let b = self.take(2)?;
                u64::from(u16::from_be_bytes([b[0], b[1]]))
            }
            26 => {
                let b = self.take(4)?;
                u64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            }
            27 => {
                let b = self.take(8)?;
                u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
            }
            _ => u64::from(info),
        })
    }

    /// Checks a declared length against the input left, before anything is allocated.
    /// `min_bytes_each` is the smallest encoding of one element (2 for a map entry).
    fn length(
        &self,
        declared: u64,
        offset: usize,
        major: u8,
        min_bytes_each: u64,
    ) -> Result<usize, CanonicalError> {
        let remaining = self.remaining();
        let error = CanonicalError::LengthExceedsInput {
            offset,
            kind: kind_name(major),
            declared,
            remaining,
        };
        let needed = declared
            .checked_mul(min_bytes_each)
            .ok_or_else(|| error.clone())?;
        match usize::try_from(needed) {
            Ok(needed) if needed <= remaining => usize::try_from(declared).map_err(|_| error),
            _ => Err(error),
        }
    }

    /// Reads one head and applies every check of canonical form to it: no reserved or
    /// indefinite additional information, no float, undefined or other simple value, no tag,
    /// shortest argument. Returns the head's offset, major type and argument; false, true
    /// and null come back as major type 7 with argument 20, 21 or 22.
    fn head(&mut self) -> Result<(usize, u8, u64), CanonicalError> {
        let offset = self.pos;
        let initial = self.byte()?;
        let major = initial >> 5;
        let info = initial & 0x1f;

        match info {
            28..=30 => return Err(CanonicalError::ReservedAdditionalInfo { offset, info }),
            31 => {
                return Err(match major {
                    MAJOR_BYTES | MAJOR_TEXT | MAJOR_ARRAY | MAJOR_MAP => {
                        CanonicalError::IndefiniteLength {
                            offset,
                            kind: kind_name(major),
                        }
                    }
                    MAJOR_SIMPLE => CanonicalError::UnexpectedBreak { offset },
                    _ => CanonicalError::ReservedAdditionalInfo { offset, info },
                });
            }
            _ => {}
        }

        if major == MAJOR_SIMPLE {
            return match info {
                20..=22 => Ok((offset, major, u64::from(info))),
                23 => Err(CanonicalError::Undefined { offset }),
                24 => Err(CanonicalError::SimpleValue {
                    offset,
                    value: self.byte()?,
                }),
                25 => Err(CanonicalError::Float { offset, bits: 16 }),
                26 => Err(CanonicalError::Float { offset, bits: 32 }),
                27 => Err(CanonicalError::Float { offset, bits: 64 }),
                _ => Err(CanonicalError::SimpleValue {
                    offset,
                    value: info,
                }),
            };
        }

        let argument = self.argument(info)?;
        if major == MAJOR_TAG {
            return Err(CanonicalError::Tag {
                offset,
                tag: argument,
            });
        }
        let shortest = match info {
            24 => argument >= 24,
            25 => argument > 0xff,
            26 => argument > 0xffff,
            27 => argument > 0xffff_ffff,
            _ => true,
        };
        if !shortest {
            return Err(if major == MAJOR_UNSIGNED || major == MAJOR_NEGATIVE {
                CanonicalError::NonShortestInteger {
                    offset,
                    value: argument,
                }
            } else {
                CanonicalError::NonShortestLength {
                    offset,
                    kind: kind_name(major),
                    length: argument,
                }
            });
        }
        Ok((offset, major, argument))
    }

    /// The text of a string whose head was just read.
    fn text(&mut self, offset: usize, argument: u64) -> Result<&str, CanonicalError> {
        let len = self.length(argument, offset, MAJOR_TEXT, 1)?;
        let start = self.pos;
        let raw = self.take(len)?;
        std::str::from_utf8(raw).map_err(|error| CanonicalError::InvalidUtf8 {
            offset: start + error.valid_up_to(),
        })
    }

    /// `depth` counts the arrays and maps enclosing the item about to be read.
    fn item(&mut self, depth: usize) -> Result<Value, CanonicalError> {
        let (offset, major, argument) = self.head()?;
        match major {
            MAJOR_SIMPLE => Ok(match argument {
                20 => Value::Bool(false),
                21 => Value::Bool(true),
                _ => Value::Null,
            }),
            MAJOR_UNSIGNED => Ok(Value::Integer(Integer::from_head(false, argument))),
            MAJOR_NEGATIVE => Ok(Value::Integer(Integer::from_head(true, argument))),
            MAJOR_BYTES => {
                let len = self.length(argument, offset, major, 1)?;
                Ok(Value::Bytes(self.take(len)?.to_vec()))
            }
            MAJOR_TEXT => Ok(Value::Text(self.text(offset, argument)?.to_owned())),
            MAJOR_ARRAY => {
                if depth >= MAX_DEPTH {
                    return Err(CanonicalError::TooDeep { limit: MAX_DEPTH });
                }
                let len = self.length(argument, offset, major, 1)?;
                let mut items = Vec::with_capacity(len.min(PREALLOCATE_LIMIT));
                for _ in 0..len {
                    items.push(self.item(depth + 1)?);
                }
                Ok(Value::Array(items))
            }
            _ => {
                if depth >= MAX_DEPTH {
                    return Err(CanonicalError::TooDeep { limit: MAX_DEPTH });
                }
                let len = self.length(argument, offset, major, 2)?;
                self.map(len, depth + 1)
            }
        }
    }

    fn map(&mut self, len: usize, child_depth: usize) -> Result<Value, CanonicalError> {
        let mut entries: Vec<(Value, Value)> = Vec::with_capacity(len.min(PREALLOCATE_LIMIT));
        let mut previous_key: Option<(usize, usize)> = None;
        for _ in 0..len {
            let key_start = self.pos;
            let key = self.item(child_depth)?;
            let key_end = self.pos;
            self.check_key_order(previous_key, key_start, key_end, || key.describe())?;
            previous_key = Some((key_start, key_end));
            let value = self.item(child_depth)?;
            entries.push((key, value));
        }
        Ok(Value::Map(entries))
    }

    /// Checks one item exactly as [`Decoder::item`] does, without building it.
    fn check(&mut self, depth: usize) -> Result<(), CanonicalError> {
        let (offset, major, argument) = self.head()?;
        match major {
            MAJOR_SIMPLE | MAJOR_UNSIGNED | MAJOR_NEGATIVE => Ok(()),
            MAJOR_BYTES => {
                let len = self.length(argument, offset, major, 1)?;
                self.take(len).map(|_| ())
            }
            MAJOR_TEXT => self.text(offset, argument).map(|_| ()),
            MAJOR_ARRAY => {
                if depth >= MAX_DEPTH {
                    return Err(CanonicalError::TooDeep { limit: MAX_DEPTH });
                }
                let len = self.length(argument, offset, major, 1)?;
                for _ in 0..len {
                    self.check(depth + 1)?;
                }
                Ok(())
            }
            _ => {
                if depth >= MAX_DEPTH {
                    return Err(CanonicalError::TooDeep { limit: MAX_DEPTH });
                }
                let len = self.length(argument, offset, major, 2)?;
                let mut previous_key: Option<(usize, usize)> = None;
                for _ in 0..len {
                    let key_start = self.pos;
                    self.check(depth + 1)?;
                    let key_end = self.pos;
                    let input = self.input;
                    self.check_key_order(previous_key, key_start, key_end, || {
                        // The key checked clean, so it decodes on its own.
                        decode(&input[key_start..key_end])
                            .map_or_else(|_| "<undecodable>".to_owned(), |key| key.describe())
                    })?;
                    previous_key = Some((key_start, key_end));
                    self.check(depth + 1)?;
                }
                Ok(())
            }
        }
    }

    /// Keys must ascend strictly by their encoded bytes.
    fn check_key_order(
        &self,
        previous: Option<(usize, usize)>,
        key_start: usize,
        key_end: usize,
        describe: impl FnOnce() -> String,
    ) -> Result<(), CanonicalError> {
        let Some((start, end)) = previous else {
            return Ok(());
        };
        match self.input[key_start..key_end].cmp(&self.input[start..end]) {
            std::cmp::Ordering::Greater => Ok(()),
            std::cmp::Ordering::Equal => Err(CanonicalError::DuplicateKey {
                offset: key_start,
                key: describe(),
            }),
            std::cmp::Ordering::Less => Err(CanonicalError::UnsortedKeys {
                offset: key_start,
                key: describe(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::encode;

    fn unhex(text: &str) -> Vec<u8> {
        let clean: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
        clean
            .chunks(2)
            .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
            .collect()
    }

    fn reject(text: &str) -> CanonicalError {
        decode(&unhex(text)).expect_err(text)
    }

    #[test]
    fn accepts_canonical_vectors() {
        for text in [
            "00",
            "17",
            "1818",
            "1903e8",
            "1bffffffffffffffff",
            "3bffffffffffffffff",
            "20",
            "f4",
            "f5",
            "f6",
            "40",
            "6449455446",
            "8301820203820405",
            "a26161016162820203",
            "a361610161620262616103",
        ] {
            let bytes = unhex(text);
            let value = decode(&bytes).unwrap();
            assert_eq!(encode(&value).unwrap(), bytes, "{text}");
        }
        assert_eq!(
            decode(&unhex("3bffffffffffffffff")).unwrap(),
            Value::Integer(Integer::MIN)
        );
    }

    #[test]
    fn rejects_non_shortest_integer_head() {
        assert_eq!(
            reject("1817"),
            CanonicalError::NonShortestInteger {
                offset: 0,
                value: 23
            }
        );
        assert!(matches!(
            reject("1900ff"),
            CanonicalError::NonShortestInteger { value: 255, .. }
        ));
        assert!(matches!(
            reject("1a0000ffff"),
            CanonicalError::NonShortestInteger { value: 0xffff, .. }
        ));
        assert!(matches!(
            reject("3b00000000ffffffff"),
            CanonicalError::NonShortestInteger {
                value: 0xffff_ffff,
                ..
            }
        ));
    }

    #[test]
    fn rejects_non_shortest_text_length() {
        assert_eq!(
            reject("780161"),
            CanonicalError::NonShortestLength {
                offset: 0,
                kind: "text string",
                length: 1
            }
        );
    }

    #[test]
    fn rejects_non_shortest_bytes_length() {
        assert!(matches!(
            reject("59000101"),
            CanonicalError::NonShortestLength {
                kind: "byte string",
                length: 1,
                ..
            }
        ));
    }

    #[test]
    fn rejects_non_shortest_array_length() {
        assert!(matches!(
            reject("980101"),
            CanonicalError::NonShortestLength {
                kind: "array",
                length: 1,
                ..
            }
        ));
    }

    #[test]
    fn rejects_non_shortest_map_length() {
        assert!(matches!(
            reject("b800"),
            CanonicalError::NonShortestLength {
                kind: "map",
                length: 0,
                ..
            }
        ));
    }

    #[test]
    fn rejects_indefinite_array() {
        assert_eq!(
            reject("9f01ff"),
            CanonicalError::IndefiniteLength {
                offset: 0,
                kind: "array"
            }
        );
    }

    #[test]
    fn rejects_indefinite_map() {
        assert_eq!(
            reject("bf616101ff"),
            CanonicalError::IndefiniteLength {
                offset: 0,
                kind: "map"
            }
        );
    }

    #[test]
    fn rejects_indefinite_text() {
        assert_eq!(
            reject("7f6161ff"),
            CanonicalError::IndefiniteLength {
                offset: 0,
                kind: "text string"
            }
        );
    }

    #[test]
    fn rejects_indefinite_bytes() {
        assert_eq!(
            reject("5f4101ff"),
            CanonicalError::IndefiniteLength {
                offset: 0,
                kind: "byte string"
            }
        );
    }

    #[test]
    fn rejects_break_byte() {
        assert_eq!(reject("ff"), CanonicalError::UnexpectedBreak { offset: 0 });
        assert_eq!(
            reject("8201ff"),
            CanonicalError::UnexpectedBreak { offset: 2 }
        );
    }

    #[test]
    fn rejects_unsorted_keys() {
        // "aa" before "b": string order, not encoded-byte order.
        assert_eq!(
            reject("a2626161016162 02"),
            CanonicalError::UnsortedKeys {
                offset: 5,
                key: "\"b\"".to_owned()
            }
        );
        // Text key before an integer key.
        assert!(matches!(
            reject("a2616100 0101"),
            CanonicalError::UnsortedKeys { offset: 4, .. }
        ));
    }

    #[test]
    fn rejects_duplicate_keys() {
        assert_eq!(
            reject("a2616101616102"),
            CanonicalError::DuplicateKey {
                offset: 4,
                key: "\"a\"".to_owned()
            }
        );
    }

    #[test]
    fn rejects_half_float() {
        assert_eq!(
            reject("f93c00"),
            CanonicalError::Float {
                offset: 0,
                bits: 16
            }
        );
    }

    #[test]
    fn rejects_single_float() {
        assert_eq!(
            reject("fa47c35000"),
            CanonicalError::Float {
                offset: 0,
                bits: 32
            }
        );
    }

    #[test]
    fn rejects_double_float() {
        assert_eq!(
            reject("fb3ff199999999999a"),
            CanonicalError::Float {
                offset: 0,
                bits: 64
            }
        );
    }

    #[test]
    fn rejects_simple_values_other_than_false_true_null() {
        assert_eq!(
            reject("f0"),
            CanonicalError::SimpleValue {
                offset: 0,
                value: 16
            }
        );
        assert_eq!(
            reject("f8ff"),
            CanonicalError::SimpleValue {
                offset: 0,
                value: 255
            }
        );
        assert_eq!(
            reject("f820"),
            CanonicalError::SimpleValue {
                offset: 0,
                value: 32
            }
        );
    }

    #[test]
    fn rejects_undefined() {
        assert_eq!(reject("f7"), CanonicalError::Undefined { offset: 0 });
    }

    #[test]
    fn rejects_tags() {
        assert_eq!(
            reject("c074323031332d30332d32315432303a30343a30305a"),
            CanonicalError::Tag { offset: 0, tag: 0 }
        );
        assert!(matches!(
            reject("d818456449455446"),
            CanonicalError::Tag { tag: 24, .. }
        ));
        assert!(matches!(
            reject("c249010000000000000000"),
            CanonicalError::Tag { tag: 2, .. }
        ));
    }

    #[test]
    fn rejects_invalid_utf8() {
        assert_eq!(
            reject("63 61 ff 62"),
            CanonicalError::InvalidUtf8 { offset: 2 }
        );
        // A lone continuation byte and an overlong encoding of '/'.
        assert!(matches!(
            reject("6180"),
            CanonicalError::InvalidUtf8 { offset: 1 }
        ));
        assert!(matches!(
            reject("62c0af"),
            CanonicalError::InvalidUtf8 { offset: 1 }
        ));
    }

    #[test]
    fn rejects_trailing_bytes() {
        assert_eq!(
            reject("0000"),
            CanonicalError::TrailingBytes {
                offset: 1,
                count: 1
            }
        );
        assert_eq!(
            reject("80 f6 f6"),
            CanonicalError::TrailingBytes {
                offset: 1,
                count: 2
            }
        );
    }

    #[test]
    fn rejects_truncated_input() {
        assert_eq!(
            reject(""),
            CanonicalError::Truncated {
                offset: 0,
                needed: 1
            }
        );
        assert_eq!(
            reject("1901"),
            CanonicalError::Truncated {
                offset: 2,
                needed: 1
            }
        );
        assert_eq!(
            reject("1b0000"),
            CanonicalError::Truncated {
                offset: 3,
                needed: 6
            }
        );
        // The array length fits the input, but its last element's head does not.
        assert_eq!(
            reject("83 01 02 19"),
            CanonicalError::Truncated {
                offset: 4,
                needed: 2
            }
        );
    }

    #[test]
    fn rejects_lengths_beyond_remaining_input() {
        assert_eq!(
            reject("6361"),
            CanonicalError::LengthExceedsInput {
                offset: 0,
                kind: "text string",
                declared: 3,
                remaining: 1
            }
        );
        assert!(matches!(
            reject("5bffffffffffffffff00"),
            CanonicalError::LengthExceedsInput {
                declared: u64::MAX,
                remaining: 1,
                ..
            }
        ));
        assert!(matches!(
            reject("9bffffffffffffffff"),
            CanonicalError::LengthExceedsInput { kind: "array", .. }
        ));
        // Two entries need at least four bytes; three are left.
        assert!(matches!(
            reject("a2 00 00 01"),
            CanonicalError::LengthExceedsInput {
                kind: "map",
                declared: 2,
                remaining: 3,
                ..
            }
        ));
        assert!(matches!(
            reject("bb8000000000000000"),
            CanonicalError::LengthExceedsInput { kind: "map", .. }
        ));
    }

    #[test]
    fn rejects_nesting_deeper_than_limit() {
        let mut ok = vec![0x81; MAX_DEPTH - 1];
        ok.push(0x80);
        assert!(decode(&ok).is_ok());

        let mut deep = vec![0x81; MAX_DEPTH];
        deep.push(0x80);
        assert_eq!(
            decode(&deep),
            Err(CanonicalError::TooDeep { limit: MAX_DEPTH })
        );

        // Far past the limit: must fail cleanly instead of exhausting the stack.
        let mut hostile = vec![0xa1_u8; 1_000_000];
        hostile.extend([0x00; 2]);
        // Maps nest through their keys here: a1 a1 a1 ... each key is another map.
        assert_eq!(
            decode(&hostile),
            Err(CanonicalError::TooDeep { limit: MAX_DEPTH })
        );
    }

    #[test]
    fn rejects_reserved_additional_info_28() {
        assert_eq!(
            reject("1c"),
            CanonicalError::ReservedAdditionalInfo {
                offset: 0,
                info: 28
            }
        );
    }

    #[test]
    fn rejects_reserved_additional_info_29() {
        assert_eq!(
            reject("3d"),
            CanonicalError::ReservedAdditionalInfo {
                offset: 0,
                info: 29
            }
        );
    }

    #[test]
    fn rejects_reserved_additional_info_30() {
        assert_eq!(
            reject("fe"),
            CanonicalError::ReservedAdditionalInfo {
                offset: 0,
                info: 30
            }
        );
    }

    #[test]
    fn rejects_indefinite_form_on_integers_and_tags_as_reserved() {
        assert_eq!(
            reject("1f"),
            CanonicalError::ReservedAdditionalInfo {
                offset: 0,
                info: 31
            }
        );
        assert_eq!(
            reject("3f"),
            CanonicalError::ReservedAdditionalInfo {
                offset: 0,
                info: 31
            }
        );
        assert_eq!(
            reject("df"),
            CanonicalError::ReservedAdditionalInfo {
                offset: 0,
                info: 31
            }
        );
    }

    #[test]
    fn error_in_nested_item_reports_its_offset() {
        assert_eq!(
            reject("a1 6161 82 01 1817"),
            CanonicalError::NonShortestInteger {
                offset: 5,
                value: 23
            }
        );
    }
}
