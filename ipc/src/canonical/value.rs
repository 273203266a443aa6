//! The canonical value model: the CBOR data items rho exchanges and digests.
//!
//! Invariant: the model cannot represent anything without a canonical form. There are no
//! floats, no tags, no undefined, and an [`Integer`] always lies in the CBOR range
//! [-2^64, 2^64 - 1] because it is stored as the CBOR head (sign, argument) itself.

use std::fmt::{self, Write as _};

use super::CanonicalError;

/// A CBOR integer (major type 0 or 1), covering exactly [-2^64, 2^64 - 1].
///
/// Stored as CBOR writes it: a sign and the 64-bit head argument `n`, meaning `n` when
/// non-negative and `-1 - n` when negative. Equality is numeric equality.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Integer {
    negative: bool,
    argument: u64,
}

impl Integer {
    /// The smallest representable integer, -2^64.
    pub const MIN: Integer = Integer {
        negative: true,
        argument: u64::MAX,
    };
    /// The largest representable integer, 2^64 - 1.
    pub const MAX: Integer = Integer {
        negative: false,
        argument: u64::MAX,
    };

    /// Builds an integer from its CBOR head parts: major type 1 when `negative`, with the
    /// given argument.
    pub const fn from_head(negative: bool, argument: u64) -> Self {
        Integer { negative, argument }
    }

    /// True for major type 1 (values below zero).
    pub const fn is_negative(self) -> bool {
        self.negative
    }

    /// The CBOR head argument: the value itself, or `-1 - value` when negative.
    pub const fn argument(self) -> u64 {
        self.argument
    }

    /// The numeric value.
    pub fn to_i128(self) -> i128 {
        if self.negative {
            -1 - i128::from(self.argument)
        } else {
            i128::from(self.argument)
        }
    }
}

impl fmt::Debug for Integer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_i128())
    }
}

impl fmt::Display for Integer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_i128())
    }
}

impl From<u64> for Integer {
    fn from(value: u64) -> Self {
        Integer {
            negative: false,
            argument: value,
        }
    }
}

impl From<i64> for Integer {
    fn from(value: i64) -> Self {
        if value < 0 {
            // -1 - value == |value| - 1, which cannot overflow for any negative i64.
            Integer {
                negative: true,
                argument: value.unsigned_abs() - 1,
            }
        } else {
            Integer {
                negative: false,
                argument: value.unsigned_abs(),
            }
        }
    }
}

macro_rules! integer_from_narrow {
    ($via:ty: $($t:ty)+) => {
        $(impl From<$t> for Integer {
            fn from(value: $t) -> Self {
                Integer::from(<$via>::from(value))
            }
        })+
    };
}
integer_from_narrow!(u64: u8 u16 u32);
integer_from_narrow!(i64: i8 i16 i32);

impl TryFrom<i128> for Integer {
    type Error = CanonicalError;

    fn try_from(value: i128) -> Result<Self, CanonicalError> {
        let out_of_range = CanonicalError::IntegerOutOfRange { value };
        if value < 0 {
            // For value >= -2^64 the argument -1 - value fits a u64; i128::MIN cannot overflow
            // here because -1 - i128::MIN == i128::MAX.
            u64::try_from(-1 - value)
                .map(|argument| Integer {
                    negative: true,
                    argument,
                })
                .map_err(|_| out_of_range)
        } else {
            u64::try_from(value)
                .map(Integer::from)
                .map_err(|_| out_of_range)
        }
    }
}

impl From<Integer> for i128 {
    fn from(value: Integer) -> Self {
        value.to_i128()
    }
}

impl TryFrom<Integer> for u64 {
    type Error = CanonicalError;

    fn try_from(value: Integer) -> Result<Self, CanonicalError> {
        if value.negative {
            Err(CanonicalError::IntegerOutOfRange {
                value: value.to_i128(),
            })
        } else {
            Ok(value.argument)
        }
    }
}

impl TryFrom<Integer> for i64 {
    type Error = CanonicalError;

    fn try_from(value: Integer) -> Result<Self, CanonicalError> {
        i64::try_from(value.to_i128()).map_err(|_| CanonicalError::IntegerOutOfRange {
            value: value.to_i128(),
        })
    }
}

/// One CBOR data item of the canonical model.
///
/// Maps keep their entries as given; the encoder sorts them by encoded key bytes, and the
/// decoder returns them in that canonical order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// `null` (simple value 22).
    Null,
    /// `false` / `true` (simple values 20 and 21).
    Bool(bool),
    /// Major types 0 and 1.
    Integer(Integer),
    /// Major type 2, definite length.
    Bytes(Vec<u8>),
    /// Major type 3, definite length, valid UTF-8.
    Text(String),
    /// Major type 4, definite length.
    Array(Vec<Value>),
    /// Major type 5, definite length, keys unique by encoding.
    Map(Vec<(Value, Value)>),
}

impl Value {
    /// The text, when this is a text string.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Value::Text(text) => Some(text),
            _ => None,
        }
    }

    /// The integer, when this is one.
    pub fn as_integer(&self) -> Option<Integer> {
        match self {
            Value::Integer(integer) => Some(*integer),
            _ => None,
        }
    }

    /// The entries, when this is a map.
    pub fn as_map(&self) -> Option<&[(Value, Value)]> {
        match self {
            Value::Map(entries) => Some(entries),
            _ => None,
        }
    }

    /// The elements, when this is an array.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }

    /// The value of the entry whose key is the text `key`, when this is a map.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.as_map()?
            .iter()
            .find(|(k, _)| k.as_text() == Some(key))
            .map(|(_, v)| v)
    }

    /// A short human rendering for error messages (keys in diagnostics), at most ~64 chars.
    pub(crate) fn describe(&self) -> String {
        const LIMIT: usize = 64;
        let full = match self {
            Value::Null => "null".to_owned(),
            Value::Bool(b) => b.to_string(),
            Value::Integer(i) => i.to_string(),
            Value::Text(t) => format!("{t:?}"),
            Value::Bytes(b) => {
                let hex = b.iter().fold(String::new(), |mut hex, byte| {
                    let _ = write!(hex, "{byte:02x}");
                    hex
                });
                format!("h'{hex}'")
            }
            Value::Array(items) => format!("array of {} item(s)", items.len()),
            Value::Map(entries) => format!("map of {} entr(ies)", entries.len()),
        };
        if full.chars().count() > LIMIT {
            let mut cut: String = full.chars().take(LIMIT).collect();
            cut.push('…');
            cut
        } else {
            full
        }
    }
}

impl From<bool> for Value {
    fn from(value: bool) -> Self {
        Value::Bool(value)
    }
}

impl From<Integer> for Value {
    fn from(value: Integer) -> Self {
        Value::Integer(value)
    }
}

impl From<u64> for Value {
    fn from(value: u64) -> Self {
        Value::Integer(value.into())
    }
}

impl From<i64> for Value {
    fn from(value: i64) -> Self {
        Value::Integer(value.into())
    }
}

impl From<&str> for Value {
    fn from(value: &str) -> Self {
        Value::Text(value.to_owned())
    }
}

impl From<String> for Value {
    fn from(value: String) -> Self {
        Value::Text(value)
    }
}

impl From<Vec<u8>> for Value {
    fn from(value: Vec<u8>) -> Self {
        Value::Bytes(value)
    }
}

impl From<Vec<Value>> for Value {
    fn from(value: Vec<Value>) -> Self {
        Value::Array(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_range_is_exactly_cbor_range() {
        let min = -(1_i128 << 64);
        let max = (1_i128 << 64) - 1;
        assert_eq!(Integer::try_from(min).unwrap(), Integer::MIN);
        assert_eq!(Integer::try_from(max).unwrap(), Integer::MAX);
        assert!(matches!(
            Integer::try_from(min - 1),
            Err(CanonicalError::IntegerOutOfRange { value }) if value == min - 1
        ));
        assert!(Integer::try_from(max + 1).is_err());
        assert!(Integer::try_from(i128::MIN).is_err());
        assert!(Integer::try_from(i128::MAX).is_err());
    }

    #[test]
    fn i64_and_u64_round_trip_through_integer() {
        for v in [i64::MIN, -1_000_000, -25, -24, -1, 0, 1, 23, 24, i64::MAX] {
            let integer = Integer::from(v);
            assert_eq!(i64::try_from(integer).unwrap(), v);
            assert_eq!(integer.to_i128(), i128::from(v));
        }
        for v in [0_u64, 24, u64::from(u32::MAX) + 1, u64::MAX] {
            assert_eq!(u64::try_from(Integer::from(v)).unwrap(), v);
        }
        assert_eq!(Integer::from(-1_i64), Integer::from_head(true, 0));
        assert!(u64::try_from(Integer::from(-1_i64)).is_err());
        assert!(i64::try_from(Integer::MAX).is_err());
    }

    #[test]
    fn describe_truncates_long_keys() {
        let long = Value::Text("x".repeat(500));
        assert!(long.describe().chars().count() <= 65);
        assert_eq!(Value::from("a").describe(), "\"a\"");
        assert_eq!(Value::Bytes(vec![0xab, 0x01]).describe(), "h'ab01'");
    }

    #[test]
    fn get_finds_text_keys() {
        let map = Value::Map(vec![(Value::from("k"), Value::from(7_u64))]);
        assert_eq!(map.get("k"), Some(&Value::from(7_u64)));
        assert_eq!(map.get("missing"), None);
        assert_eq!(Value::Null.get("k"), None);
    }
}
