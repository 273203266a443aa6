//! The direct deserializer: typed values read straight from canonical bytes, without the
//! intermediate value trees that [`from_value`](super::from_value) goes through.
//!
//! Invariant: every item the [`Reader`] reads is held to the rules of
//! [`check`](super::decode::check) as it is read (shortest heads, definite lengths, no
//! floats, tags or other simple values, valid UTF-8, keys strictly ascending, nesting within
//! [`MAX_DEPTH`]), and any deviation is an error, never a panic. Bytes passed over without
//! those checks (entries a visitor left unread) mark the reader [`Reader::unchecked`], and
//! its caller then runs the full check; on any error the caller runs the full check too, so
//! canonical-form errors keep their exact shape and precedence. The serde mapping and the error messages
//! are those of ciborium's value deserializer (`is_human_readable` false, `null` for `None`
//! and `()`, enums as text or a one-entry map, "invalid type: ..., expected ..." wording),
//! so `from_canonical_bytes` accepts and refuses exactly what `from_value(decode(..))` does.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer as _, Unexpected, Visitor};

use super::MAX_DEPTH;
use super::encode::{MAJOR_ARRAY, MAJOR_BYTES, MAJOR_MAP, MAJOR_NEGATIVE, MAJOR_TEXT};

const MAJOR_SIMPLE: u8 = 7;
/// The encoding of `null`, read as the payload of a unit variant written as text.
const NULL_ITEM: &[u8] = &[0xf6];
const TAG_NAME: &str = "@@TAG@@";
const UNTAGGED: &str = "@@UNTAGGED@@";

/// A deserialization error: serde's message, or a reader fault on unchecked input.
#[derive(Debug)]
pub(crate) struct DeError(pub(crate) String);

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DeError(msg.to_string())
    }
}

fn malformed(pos: usize) -> DeError {
    DeError(format!("malformed canonical input at byte {pos}"))
}

/// One decoded head: the item's kind with its argument, and for strings their content.
#[derive(Clone, Copy)]
enum Item<'de> {
    Bool(bool),
    Null,
    /// Major type 0 or 1: sign and head argument.
    Integer(bool, u64),
    Bytes(&'de [u8]),
    Text(&'de str),
    /// An array head with its element count; the elements follow.
    Array(usize),
    /// A map head with its entry count; the entries follow.
    Map(usize),
}

impl<'de> Item<'de> {
    /// What ciborium reports for this item in an "invalid type" error.
    fn unexpected(self) -> Unexpected<'de> {
        match self {
            Item::Bool(b) => Unexpected::Bool(b),
            Item::Null => Unexpected::Other("null"),
            Item::Integer(negative, argument) => integer_unexpected(negative, argument),
            Item::Bytes(bytes) => Unexpected::Bytes(bytes),
            Item::Text(text) => Unexpected::Str(text),
            Item::Array(_) => Unexpected::Seq,
            Item::Map(_) => Unexpected::Map,
        }
    }
}

fn integer_value(negative: bool, argument: u64) -> i128 {
    if negative {
        -1 - i128::from(argument)
    } else {
        i128::from(argument)
    }
}

fn integer_unexpected(negative: bool, argument: u64) -> Unexpected<'static> {
    if !negative {
        return Unexpected::Unsigned(argument);
    }
    i64::try_from(integer_value(negative, argument))
        .map_or(Unexpected::Other("large integer"), Unexpected::Signed)
}

/// Reads typed values from canonical bytes, checking each item it reads.
pub(crate) struct Reader<'de> {
    input: &'de [u8],
    pos: usize,
    /// Arrays and maps enclosing the next item.
    depth: usize,
    /// Whether some bytes were skipped without the canonical checks.
    unchecked: bool,
}

impl<'de> Reader<'de> {
    pub(crate) fn new(input: &'de [u8]) -> Self {
        Reader {
            input,
            pos: 0,
            depth: 0,
            unchecked: false,
        }
    }

    /// Whether every byte of the input was read, each under the canonical checks.
    pub(crate) fn read_all_checked(&self) -> bool {
        self.pos == self.input.len() && !self.unchecked
    }

    fn take(&mut self, count: usize) -> Result<&'de [u8], DeError> {
        let end = self
            .pos
            .checked_add(count)
            .filter(|&end| end <= self.input.len())
            .ok_or_else(|| malformed(self.pos))?;
        let bytes = &self.input[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    /// Reads a head (and a string's content), refusing anything that is not canonical.
    fn item(&mut self) -> Result<Item<'de>, DeError> {
        let at = self.pos;
        let initial = *self.input.get(at).ok_or_else(|| malformed(at))?;
        self.pos += 1;
        let major = initial >> 5;
        let info = initial & 0x1f;
        let be = |bytes: &[u8]| bytes.iter().fold(0, |n, &b| n << 8 | u64::from(b));
        let argument = match info {
            0..=23 => u64::from(info),
            24 if major != MAJOR_SIMPLE => u64::from(self.take(1)?[0]),
            25 if major != MAJOR_SIMPLE => be(self.take(2)?),
            26 if major != MAJOR_SIMPLE => be(self.take(4)?),
            27 if major != MAJOR_SIMPLE => be(self.take(8)?),
            _ => return Err(malformed(at)),
        };
        // The argument must not fit a shorter head (its bytes were read above).
        let shortest = match info {
            24 => self.input[at + 1] >= 24,
            25 => self.input[at + 1] != 0,
            26 => self.input[at + 1..at + 3] != [0, 0],
            27 => self.input[at + 1..at + 5] != [0, 0, 0, 0],
            _ => true,
        };
        if !shortest {
            return Err(malformed(at));
        }
        let len = || usize::try_from(argument).map_err(|_| malformed(at));
        Ok(match major {
            0 => Item::Integer(false, argument),
            MAJOR_NEGATIVE => Item::Integer(true, argument),
            MAJOR_BYTES => Item::Bytes(self.take(len()?)?),
            MAJOR_TEXT => {
                let raw = self.take(len()?)?;
                Item::Text(std::str::from_utf8(raw).map_err(|_| malformed(at))?)
            }
            MAJOR_ARRAY => Item::Array(len()?),
            MAJOR_MAP => Item::Map(len()?),
            MAJOR_SIMPLE => match info {
                20 => Item::Bool(false),
                21 => Item::Bool(true),
                22 => Item::Null,
                _ => return Err(malformed(at)),
            },
            _ => return Err(malformed(at)),
        })
    }

    fn peek(&mut self) -> Result<Item<'de>, DeError> {
        let at = self.pos;
        let item = self.item();
        self.pos = at;
        item
    }

    /// Skips `count` whole items (without the key-order and depth checks: the caller must
    /// check the whole input).
    fn skip(&mut self, mut count: usize) -> Result<(), DeError> {
        if count > 0 {
            self.unchecked = true;
        }
        while count > 0 {
            count -= 1;
            match self.item()? {
                Item::Array(len) => count = count.saturating_add(len),
                Item::Map(len) => count = count.saturating_add(len.saturating_mul(2)),
                _ => {}
            }
        }
        Ok(())
    }

    fn invalid(item: Item<'de>, expected: &str) -> DeError {
        de::Error::invalid_type(item.unexpected(), &expected)
    }

    fn integer<N>(&mut self, kind: &'static str) -> Result<N, DeError>
    where
        N: TryFrom<i128>,
    {
        match self.item()? {
            Item::Integer(negative, argument) => N::try_from(integer_value(negative, argument))
                .map_err(|_| {
                    de::Error::invalid_type(integer_unexpected(negative, argument), &kind)
                }),
            other => Err(Self::invalid(other, "(big)int")),
        }
    }

    /// Enters an array or map whose head was just read.
    fn enter(&mut self) -> Result<(), DeError> {
        if self.depth >= MAX_DEPTH {
            return Err(DeError(format!("nesting deeper than {MAX_DEPTH}")));
        }
        self.depth += 1;
        Ok(())
    }

    fn seq<V: Visitor<'de>>(&mut self, len: usize, visitor: V) -> Result<V::Value, DeError> {
        self.enter()?;
        let mut access = Access {
            reader: self,
            left: len,
            previous_key: None,
        };
        let value = visitor.visit_seq(&mut access)?;
        let left = access.left;
        self.skip(left)?;
        self.depth -= 1;
        Ok(value)
    }

    fn map<V: Visitor<'de>>(&mut self, len: usize, visitor: V) -> Result<V::Value, DeError> {
        self.enter()?;
        let mut access = Access {
            reader: self,
            left: len.saturating_mul(2),
            previous_key: None,
        };
        let value = visitor.visit_map(&mut access)?;
        let left = access.left;
        self.skip(left)?;
        self.depth -= 1;
        Ok(value)
    }
}

impl<'de> de::Deserializer<'de> for &mut Reader<'de> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.item()? {
            Item::Bytes(bytes) => visitor.visit_borrowed_bytes(bytes),
            Item::Text(text) => visitor.visit_borrowed_str(text),
            Item::Array(len) => self.seq(len, visitor),
            Item::Map(len) => self.map(len, visitor),
            Item::Bool(b) => visitor.visit_bool(b),
            Item::Null => visitor.visit_none(),
            Item::Integer(false, argument) => visitor.visit_u64(argument),
            Item::Integer(true, argument) => {
                let value = integer_value(true, argument);
                match i64::try_from(value) {
                    Ok(small) => visitor.visit_i64(small),
                    Err(_) => visitor.visit_i128(value),
                }
            }
        }
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.item()? {
            Item::Bool(b) => visitor.visit_bool(b),
            other => Err(Reader::invalid(other, "bool")),
        }
    }

    fn deserialize_i8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_i8(self.integer("i8")?)
    }

    fn deserialize_i16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_i16(self.integer("i16")?)
    }

    fn deserialize_i32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_i32(self.integer("i32")?)
    }

    fn deserialize_i64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_i64(self.integer("i64")?)
    }

    fn deserialize_i128<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_i128(self.integer("i128")?)
    }

    fn deserialize_u8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_u8(self.integer("u8")?)
    }

    fn deserialize_u16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_u16(self.integer("u16")?)
    }

    fn deserialize_u32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_u32(self.integer("u32")?)
    }

    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_u64(self.integer("u64")?)
    }

    fn deserialize_u128<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_u128(self.integer("u128")?)
    }

    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_f64(visitor)
    }

    fn deserialize_f64<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, DeError> {
        // Canonical input holds no floats.
        Err(Reader::invalid(self.item()?, "f64"))
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let item = self.item()?;
        if let Item::Text(text) = item {
            let mut chars = text.chars();
            if let (Some(c), None) = (chars.next(), chars.next()) {
                return visitor.visit_char(c);
            }
        }
        Err(Reader::invalid(item, "char"))
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.item()? {
            Item::Text(text) => visitor.visit_borrowed_str(text),
            other => Err(Reader::invalid(other, "str")),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.item()? {
            Item::Bytes(bytes) => visitor.visit_borrowed_bytes(bytes),
            other => Err(Reader::invalid(other, "bytes")),
        }
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_bytes(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        if let Item::Null = self.peek()? {
            self.item()?;
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.item()? {
            Item::Null => visitor.visit_unit(),
            other => Err(Reader::invalid(other, "null")),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.item()? {
            Item::Array(len) => self.seq(len, visitor),
            other => Err(Reader::invalid(other, "array")),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.item()? {
            Item::Map(len) => self.map(len, visitor),
            other => Err(Reader::invalid(other, "map")),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_map(visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        if name == TAG_NAME {
            // Canonical input has no tags: ciborium's tag types see an untagged value.
            return visitor.visit_enum(Untagged { reader: self });
        }
        let at = self.pos;
        match self.item()? {
            Item::Map(1) => {
                self.enter()?;
                let value = visitor.visit_enum(EntryEnum { reader: &mut *self })?;
                self.depth -= 1;
                Ok(value)
            }
            Item::Text(_) => {
                self.pos = at;
                visitor.visit_enum(TextEnum { reader: self })
            }
            other => Err(Reader::invalid(other, "map")),
        }
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.skip(1)?;
        visitor.visit_unit()
    }

    fn is_human_readable(&self) -> bool {
        false
    }
}

/// The elements of an array, or the keys and values of a map, in order.
struct Access<'a, 'de> {
    reader: &'a mut Reader<'de>,
    /// Items not yet read (a map counts keys and values).
    left: usize,
    /// Where the previous key's bytes lie (each key must sort after it).
    previous_key: Option<(usize, usize)>,
}

impl<'de> de::SeqAccess<'de> for Access<'_, 'de> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.reader).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

impl<'de> de::MapAccess<'de> for Access<'_, 'de> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        let start = self.reader.pos;
        let key = seed.deserialize(&mut *self.reader)?;
        let end = self.reader.pos;
        let input = self.reader.input;
        if let Some((previous_start, previous_end)) = self.previous_key
            && input[start..end] <= input[previous_start..previous_end]
        {
            return Err(malformed(start));
        }
        self.previous_key = Some((start, end));
        Ok(Some(key))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        if self.left == 0 {
            return Err(DeError(
                "map value requested after the last entry".to_owned(),
            ));
        }
        self.left -= 1;
        seed.deserialize(&mut *self.reader)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.left / 2)
    }
}

/// An enum written as a one-entry map `{variant: payload}` (its head already read).
struct EntryEnum<'a, 'de> {
    reader: &'a mut Reader<'de>,
}

impl<'a, 'de> de::EnumAccess<'de> for EntryEnum<'a, 'de> {
    type Error = DeError;
    type Variant = &'a mut Reader<'de>;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, Self::Variant), DeError> {
        let variant = seed.deserialize(&mut *self.reader)?;
        Ok((variant, self.reader))
    }
}

/// An enum written as its variant's name; the payload reads as `null`.
struct TextEnum<'a, 'de> {
    reader: &'a mut Reader<'de>,
}

impl<'de> de::EnumAccess<'de> for TextEnum<'_, 'de> {
    type Error = DeError;
    type Variant = Reader<'de>;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, Self::Variant), DeError> {
        let variant = seed.deserialize(&mut *self.reader)?;
        Ok((variant, Reader::new(NULL_ITEM)))
    }
}

impl<'de> de::VariantAccess<'de> for &mut Reader<'de> {
    type Error = DeError;

    fn unit_variant(self) -> Result<(), DeError> {
        match self.item()? {
            Item::Null => Ok(()),
            other => Err(Reader::invalid(other, "unit")),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, DeError> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_seq(visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_map(visitor)
    }
}

impl<'de> de::VariantAccess<'de> for Reader<'de> {
    type Error = DeError;

    fn unit_variant(mut self) -> Result<(), DeError> {
        de::VariantAccess::unit_variant(&mut self)
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(
        mut self,
        seed: T,
    ) -> Result<T::Value, DeError> {
        de::VariantAccess::newtype_variant_seed(&mut self, seed)
    }

    fn tuple_variant<V: Visitor<'de>>(
        mut self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        de::VariantAccess::tuple_variant(&mut self, len, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        mut self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        de::VariantAccess::struct_variant(&mut self, fields, visitor)
    }
}

/// ciborium's tag types, read from canonical input (which has no tags): the variant is
/// "@@UNTAGGED@@" and the value is the item itself.
struct Untagged<'a, 'de> {
    reader: &'a mut Reader<'de>,
}

impl<'de> de::EnumAccess<'de> for Untagged<'_, 'de> {
    type Error = DeError;
    type Variant = Self;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, Self::Variant), DeError> {
        let variant = seed.deserialize(de::value::StrDeserializer::<DeError>::new(UNTAGGED))?;
        Ok((variant, self))
    }
}

impl<'de> de::VariantAccess<'de> for Untagged<'_, 'de> {
    type Error = DeError;

    fn unit_variant(self) -> Result<(), DeError> {
        Err(de::Error::custom("expected tag"))
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, DeError> {
        seed.deserialize(self.reader)
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, _visitor: V) -> Result<V::Value, DeError> {
        Err(de::Error::custom("expected tag"))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, DeError> {
        Err(de::Error::custom("expected tag"))
    }
}
