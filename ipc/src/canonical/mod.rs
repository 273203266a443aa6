//! Canonical CBOR: the value model, the deterministic encoder, the strict decoder and the
//! serde bridge that every digest and every IPC frame goes through.
//!
//! Invariant: for every `Value` the encoder accepts, `decode(encode(v)) == v`, and every byte
//! string `decode` accepts is exactly `encode` of what it returns. So there is one byte form
//! per value (RFC 8949 §4.2.1 core deterministic encoding: shortest heads, definite lengths,
//! map keys sorted by their encoded bytes, no duplicates), no floats and no tags, and a digest
//! over these bytes never depends on who produced them.

mod de;
mod decode;
mod encode;
mod ser;
mod serde_bridge;
mod value;

pub use decode::decode;
pub use encode::{encode, encode_into};
pub use serde_bridge::{from_canonical_bytes, from_value, to_canonical_bytes, to_value};
pub use value::{Integer, Value};

/// Deepest nesting of arrays and maps the encoder writes and the decoder accepts.
///
/// 128 nested arrays are accepted; the 129th is rejected. The decoder checks the limit before
/// it descends, so hostile input cannot exhaust the native stack.
pub const MAX_DEPTH: usize = 128;

/// Why a value could not be encoded canonically, or why bytes are not canonical CBOR.
///
/// Decoder variants carry `offset`: the byte position in the input of the item at fault.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum CanonicalError {
    /// The input ended inside an item head (or was empty).
    #[error("truncated CBOR at byte {offset}: {needed} more byte(s) needed")]
    Truncated {
        /// Where the missing bytes were expected.
        offset: usize,
        /// How many more bytes the head needs.
        needed: usize,
    },
    /// A string, array or map declares more content than the input still holds.
    #[error(
        "CBOR {kind} at byte {offset} declares length {declared}, but only {remaining} byte(s) remain"
    )]
    LengthExceedsInput {
        /// Position of the item head.
        offset: usize,
        /// "byte string", "text string", "array" or "map".
        kind: &'static str,
        /// The declared element or byte count.
        declared: u64,
        /// Bytes left in the input after the head.
        remaining: usize,
    },
    /// An integer head uses more bytes than its value needs.
    #[error("non-canonical CBOR at byte {offset}: integer {value} is not in shortest form")]
    NonShortestInteger {
        /// Position of the integer head.
        offset: usize,
        /// The head's argument as written.
        value: u64,
    },
    /// A length head of a string, array or map uses more bytes than the length needs.
    #[error("non-canonical CBOR at byte {offset}: {kind} length {length} is not in shortest form")]
    NonShortestLength {
        /// Position of the head.
        offset: usize,
        /// "byte string", "text string", "array" or "map".
        kind: &'static str,
        /// The declared length.
        length: u64,
    },
    /// A string, array or map uses an indefinite length.
    #[error("non-canonical CBOR at byte {offset}: indefinite-length {kind}")]
    IndefiniteLength {
        /// Position of the head.
        offset: usize,
        /// "byte string", "text string", "array" or "map".
        kind: &'static str,
    },
    /// A break byte (0xff) where an item was expected.
    #[error("invalid CBOR at byte {offset}: break byte outside an indefinite-length item")]
    UnexpectedBreak {
        /// Position of the break byte.
        offset: usize,
    },
    /// Additional information 28, 29 or 30 (reserved), or 31 on a major type without an
    /// indefinite form.
    #[error("invalid CBOR at byte {offset}: reserved additional information {info}")]
    ReservedAdditionalInfo {
        /// Position of the head.
        offset: usize,
        /// The additional-information value (low five bits of the initial byte).
        info: u8,
    },
    /// A map key sorts before the key preceding it (keys must ascend by encoded bytes).
    #[error("non-canonical CBOR at byte {offset}: map key {key} is out of order")]
    UnsortedKeys {
        /// Position of the out-of-order key.
        offset: usize,
        /// The key, rendered for humans.
        key: String,
    },
    /// A map holds the same key twice in the input.
    #[error("non-canonical CBOR at byte {offset}: duplicate map key {key}")]
    DuplicateKey {
        /// Position of the second occurrence.
        offset: usize,
        /// The key, rendered for humans.
        key: String,
    },
    /// A value given to the encoder holds a map with two keys of identical encoding.
    #[error("cannot encode canonically: map has duplicate key {key}")]
    DuplicateKeyInValue {
        /// The key, rendered for humans.
        key: String,
    },
    /// A half, single or double precision float; the canonical model has no floats.
    #[error("unsupported CBOR at byte {offset}: {bits}-bit float")]
    Float {
        /// Position of the float head.
        offset: usize,
        /// 16, 32 or 64.
        bits: u8,
    },
    /// The simple value `undefined`.
    #[error("unsupported CBOR at byte {offset}: undefined")]
    Undefined {
        /// Position of the item.
        offset: usize,
    },
    /// A simple value other than false, true, null and undefined.
    #[error("unsupported CBOR at byte {offset}: simple value {value}")]
    SimpleValue {
        /// Position of the item.
        offset: usize,
        /// The simple value number.
        value: u8,
    },
    /// A tagged item; the canonical model has no tags.
    #[error("unsupported CBOR at byte {offset}: tag {tag}")]
    Tag {
        /// Position of the tag head.
        offset: usize,
        /// The tag number.
        tag: u64,
    },
    /// A text string that is not valid UTF-8.
    #[error("invalid CBOR at byte {offset}: text string is not valid UTF-8")]
    InvalidUtf8 {
        /// Position of the first invalid byte.
        offset: usize,
    },
    /// Bytes follow the single top-level item.
    #[error("{count} trailing byte(s) after the CBOR item, starting at byte {offset}")]
    TrailingBytes {
        /// Where the trailing bytes start.
        offset: usize,
        /// How many trailing bytes there are.
        count: usize,
    },
    /// Arrays and maps nest deeper than [`MAX_DEPTH`].
    #[error("CBOR nesting deeper than the limit of {limit} arrays/maps")]
    TooDeep {
        /// The nesting limit in force.
        limit: usize,
    },
    /// An integer outside the CBOR range [-2^64, 2^64 - 1].
    #[error("integer {value} is outside the CBOR range [-2^64, 2^64-1]")]
    IntegerOutOfRange {
        /// The offending value.
        value: i128,
    },
    /// Serialization produced a float, which has no canonical form here.
    #[error("cannot encode canonically: value contains the float {value}")]
    UnsupportedFloat {
        /// The float as produced by serialization.
        value: f64,
    },
    /// Serialization produced a CBOR tag, which has no canonical form here.
    #[error("cannot encode canonically: value contains CBOR tag {tag}")]
    UnsupportedTag {
        /// The tag number.
        tag: u64,
    },
    /// The serde `Serialize` implementation of a type failed.
    #[error("cannot serialize `{type_name}`: {message}")]
    Serialize {
        /// The Rust type being serialized.
        type_name: &'static str,
        /// The serializer's message.
        message: String,
    },
    /// Canonical CBOR decoded, but does not have the shape of the requested type.
    #[error("cannot deserialize `{type_name}` from canonical CBOR: {message}")]
    Deserialize {
        /// The Rust type being deserialized.
        type_name: &'static str,
        /// The deserializer's message (missing field, wrong type, unknown variant...).
        message: String,
    },
}
