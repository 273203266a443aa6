//! The direct serializer: serde data written straight into canonical CBOR bytes, without the
//! intermediate value trees (`ciborium::Value`, then [`Value`](super::Value)) that
//! [`to_value`](super::to_value) builds.
//!
//! Invariant: for every `T: Serialize`, [`to_bytes`] returns exactly what
//! `encode(&to_value(t)?)` returns, bytes or error. The serde mapping is ciborium's (`None`
//! and `()` are null, unit variants text, other variants a one-entry map, struct fields
//! text keys, `is_human_readable` false, integers beyond the CBOR range a bignum tag). Each
//! map's entries are written in serialization order and put into ascending order of their
//! encoded keys when the map closes, through one reused scratch buffer. Error precedence is
//! that of the two-step path: an error raised by a `Serialize` implementation first, then
//! the first float, tag or too-deep container in serialization order, then the first
//! duplicate key in the order maps close.

use std::fmt;

use serde::ser::{self, Serialize};

use super::encode::{FALSE, MAJOR_ARRAY, MAJOR_BYTES, MAJOR_MAP, MAJOR_TEXT, NULL, TRUE};
use super::encode::{head_len, len_u64, write_head, write_integer};
use super::value::Integer;
use super::{CanonicalError, MAX_DEPTH, decode};

/// Serializes `value` canonically; `Err(Ok(message))` is an error a `Serialize`
/// implementation raised (the caller names the type), `Err(Err(e))` a canonical-form error.
pub(crate) fn to_bytes<T: Serialize + ?Sized>(
    value: &T,
) -> Result<Vec<u8>, Result<String, CanonicalError>> {
    let mut encoder = Encoder {
        out: Vec::with_capacity(256),
        spans: Vec::new(),
        scratch: Vec::new(),
        depth: 0,
        conversion: None,
        duplicate: None,
    };
    value.serialize(&mut encoder).map_err(|error| Ok(error.0))?;
    if let Some(error) = encoder.conversion.or(encoder.duplicate) {
        return Err(Err(error));
    }
    Ok(encoder.out)
}

/// An error raised through serde (by a `Serialize` implementation, or for a malformed tag).
#[derive(Debug)]
pub(crate) struct SerError(String);

impl fmt::Display for SerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SerError {}

impl ser::Error for SerError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        SerError(msg.to_string())
    }
}

/// One map entry written so far: (key start, key end, entry end), positions in `out`.
type Span = (usize, usize, usize);

struct Encoder {
    out: Vec<u8>,
    /// The entries of every open map, innermost last.
    spans: Vec<Span>,
    /// Reused when a map's entries must be reordered.
    scratch: Vec<u8>,
    /// Arrays and maps enclosing the next item.
    depth: usize,
    /// The first float, tag or too-deep container met.
    conversion: Option<CanonicalError>,
    /// The first duplicate map key met (maps are checked as they close).
    duplicate: Option<CanonicalError>,
}

/// An array or map whose head was written with the expected element count.
struct Open {
    major: u8,
    head_at: usize,
    expected: usize,
    count: usize,
    /// Index into `Encoder::spans` of this map's first entry.
    span_base: usize,
}

impl Encoder {
    fn convert_error(&mut self, error: CanonicalError) {
        if self.conversion.is_none() {
            self.conversion = Some(error);
        }
        // Keep the output a well-formed item; it is discarded anyway.
        self.out.push(NULL);
    }

    fn text(&mut self, text: &str) {
        write_head(&mut self.out, MAJOR_TEXT, len_u64(text.len()));
        self.out.extend_from_slice(text.as_bytes());
    }

    fn open(&mut self, major: u8, hint: Option<usize>) -> Open {
        if self.depth >= MAX_DEPTH && self.conversion.is_none() {
            self.conversion = Some(CanonicalError::TooDeep { limit: MAX_DEPTH });
        }
        self.depth += 1;
        let expected = hint.unwrap_or(0);
        let head_at = self.out.len();
        write_head(&mut self.out, major, len_u64(expected));
        Open {
            major,
            head_at,
            expected,
            count: 0,
            span_base: self.spans.len(),
        }
    }

    fn close(&mut self, open: &Open) {
        self.depth -= 1;
        if open.major == MAJOR_MAP {
            self.order_entries(open.span_base);
        }
        if open.count != open.expected {
            let mut head = Vec::with_capacity(9);
            write_head(&mut head, open.major, len_u64(open.count));
            let old = open.head_at..open.head_at + head_len(len_u64(open.expected));
            self.out.splice(old, head);
        }
    }

    /// Puts the entries of the map whose spans start at `base` into canonical order.
    fn order_entries(&mut self, base: usize) {
        let spans = &mut self.spans[base..];
        let out = &self.out;
        let key = |span: &Span| &out[span.0..span.1];
        if spans.windows(2).all(|pair| key(&pair[0]) < key(&pair[1])) {
            self.spans.truncate(base);
            return;
        }
        spans.sort_unstable_by(|a, b| key(a).cmp(key(b)));
        if let Some([first, ..]) = spans.windows(2).find(|pair| key(&pair[0]) == key(&pair[1])) {
            if self.duplicate.is_none() {
                let rendered = decode(key(first))
                    .map_or_else(|_| "<unrenderable>".to_owned(), |k| k.describe());
                self.duplicate = Some(CanonicalError::DuplicateKeyInValue { key: rendered });
            }
            self.spans.truncate(base);
            return;
        }
        let start = spans.iter().map(|s| s.0).min().unwrap_or(0);
        let end = spans.iter().map(|s| s.2).max().unwrap_or(0);
        self.scratch.clear();
        self.scratch.extend_from_slice(&self.out[start..end]);
        let mut at = start;
        for &(key_start, _, entry_end) in &self.spans[base..] {
            let len = entry_end - key_start;
            self.out[at..at + len]
                .copy_from_slice(&self.scratch[key_start - start..entry_end - start]);
            at += len;
        }
        self.spans.truncate(base);
    }
}

/// An open array or map being filled, possibly inside a one-entry variant map.
pub(crate) struct Compound<'a> {
    encoder: &'a mut Encoder,
    open: Open,
    /// The one-entry `{variant: ...}` map around this container, when it is a variant.
    variant: Option<Open>,
    /// Start and end of the key whose value is awaited.
    key: Option<(usize, usize)>,
}

impl Compound<'_> {
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), SerError> {
        value.serialize(&mut *self.encoder)?;
        self.open.count += 1;
        Ok(())
    }

    fn key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), SerError> {
        let start = self.encoder.out.len();
        key.serialize(&mut *self.encoder)?;
        self.key = Some((start, self.encoder.out.len()));
        Ok(())
    }

    fn value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), SerError> {
        let (start, end) = self
            .key
            .take()
            .ok_or_else(|| SerError("map value serialized before its key".to_owned()))?;
        value.serialize(&mut *self.encoder)?;
        self.encoder
            .spans
            .push((start, end, self.encoder.out.len()));
        self.open.count += 1;
        Ok(())
    }

    fn field<T: Serialize + ?Sized>(&mut self, name: &str, value: &T) -> Result<(), SerError> {
        let start = self.encoder.out.len();
        self.encoder.text(name);
        self.key = Some((start, self.encoder.out.len()));
        self.value(value)
    }

    fn finish(self) {
        self.encoder.close(&self.open);
        if let Some(variant) = &self.variant {
            self.encoder.close(variant);
        }
    }
}

/// `("@@TAG@@", "@@TAGGED@@")`: ciborium's spelling of a CBOR tag; the canonical model
/// refuses it once its number is known.
pub(crate) struct Tagged<'a> {
    encoder: &'a mut Encoder,
    tag: Option<u64>,
    fields: usize,
}

const TAG_NAME: &str = "@@TAG@@";
const TAGGED: &str = "@@TAGGED@@";
const UNTAGGED: &str = "@@UNTAGGED@@";

impl<'a> ser::Serializer for &'a mut Encoder {
    type Ok = ();
    type Error = SerError;
    type SerializeSeq = Compound<'a>;
    type SerializeTuple = Compound<'a>;
    type SerializeTupleStruct = Compound<'a>;
    type SerializeTupleVariant = TupleVariant<'a>;
    type SerializeMap = Compound<'a>;
    type SerializeStruct = Compound<'a>;
    type SerializeStructVariant = Compound<'a>;

    fn serialize_bool(self, v: bool) -> Result<(), SerError> {
        self.out.push(if v { TRUE } else { FALSE });
        Ok(())
    }

    fn serialize_i8(self, v: i8) -> Result<(), SerError> {
        self.serialize_i64(i64::from(v))
    }

    fn serialize_i16(self, v: i16) -> Result<(), SerError> {
        self.serialize_i64(i64::from(v))
    }

    fn serialize_i32(self, v: i32) -> Result<(), SerError> {
        self.serialize_i64(i64::from(v))
    }

    fn serialize_i64(self, v: i64) -> Result<(), SerError> {
        write_integer(Integer::from(v), &mut self.out);
        Ok(())
    }

    fn serialize_i128(self, v: i128) -> Result<(), SerError> {
        match Integer::try_from(v) {
            Ok(integer) => write_integer(integer, &mut self.out),
            // ciborium writes these as bignums: tag 3 below the range, tag 2 above it.
            Err(_) => self.convert_error(CanonicalError::UnsupportedTag {
                tag: if v < 0 { 3 } else { 2 },
            }),
        }
        Ok(())
    }

    fn serialize_u8(self, v: u8) -> Result<(), SerError> {
        self.serialize_u64(u64::from(v))
    }

    fn serialize_u16(self, v: u16) -> Result<(), SerError> {
        self.serialize_u64(u64::from(v))
    }

    fn serialize_u32(self, v: u32) -> Result<(), SerError> {
        self.serialize_u64(u64::from(v))
    }

    fn serialize_u64(self, v: u64) -> Result<(), SerError> {
        write_integer(Integer::from(v), &mut self.out);
        Ok(())
    }

    fn serialize_u128(self, v: u128) -> Result<(), SerError> {
        match u64::try_from(v) {
            Ok(small) => write_integer(Integer::from(small), &mut self.out),
            Err(_) => self.convert_error(CanonicalError::UnsupportedTag { tag: 2 }),
        }
        Ok(())
    }

    fn serialize_f32(self, v: f32) -> Result<(), SerError> {
        self.serialize_f64(f64::from(v))
    }

    fn serialize_f64(self, v: f64) -> Result<(), SerError> {
        self.convert_error(CanonicalError::UnsupportedFloat { value: v });
        Ok(())
    }

    fn serialize_char(self, v: char) -> Result<(), SerError> {
        self.text(v.encode_utf8(&mut [0; 4]));
        Ok(())
    }

    fn serialize_str(self, v: &str) -> Result<(), SerError> {
        self.text(v);
        Ok(())
    }

    fn serialize_bytes(self, v: &[u8]) -> Result<(), SerError> {
        write_head(&mut self.out, MAJOR_BYTES, len_u64(v.len()));
        self.out.extend_from_slice(v);
        Ok(())
    }

    fn serialize_none(self) -> Result<(), SerError> {
        self.out.push(NULL);
        Ok(())
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), SerError> {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result<(), SerError> {
        self.out.push(NULL);
        Ok(())
    }

    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), SerError> {
        self.serialize_unit()
    }

    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), SerError> {
        self.text(variant);
        Ok(())
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), SerError> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), SerError> {
        if name == TAG_NAME && variant == UNTAGGED {
            return value.serialize(self);
        }
        let wrapper = self.open(MAJOR_MAP, Some(1));
        self.text(variant);
        value.serialize(&mut *self)?;
        self.close(&Open {
            count: 1,
            ..wrapper
        });
        Ok(())
    }

    fn serialize_seq(self, len: Option<usize>) -> Result<Compound<'a>, SerError> {
        let open = self.open(MAJOR_ARRAY, len);
        Ok(Compound {
            encoder: self,
            open,
            variant: None,
            key: None,
        })
    }

    fn serialize_tuple(self, len: usize) -> Result<Compound<'a>, SerError> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<Compound<'a>, SerError> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_variant(
        self,
        name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<TupleVariant<'a>, SerError> {
        if name == TAG_NAME && variant == TAGGED {
            return Ok(TupleVariant::Tagged(Tagged {
                encoder: self,
                tag: None,
                fields: 0,
            }));
        }
        let wrapper = self.open(MAJOR_MAP, Some(1));
        self.text(variant);
        let open = self.open(MAJOR_ARRAY, Some(len));
        Ok(TupleVariant::Plain(Compound {
            encoder: self,
            open,
            variant: Some(Open {
                count: 1,
                ..wrapper
            }),
            key: None,
        }))
    }

    fn serialize_map(self, len: Option<usize>) -> Result<Compound<'a>, SerError> {
        let open = self.open(MAJOR_MAP, len);
        Ok(Compound {
            encoder: self,
            open,
            variant: None,
            key: None,
        })
    }

    fn serialize_struct(self, _name: &'static str, len: usize) -> Result<Compound<'a>, SerError> {
        self.serialize_map(Some(len))
    }

    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'a>, SerError> {
        let wrapper = self.open(MAJOR_MAP, Some(1));
        self.text(variant);
        let open = self.open(MAJOR_MAP, Some(len));
        Ok(Compound {
            encoder: self,
            open,
            variant: Some(Open {
                count: 1,
                ..wrapper
            }),
            key: None,
        })
    }

    fn is_human_readable(&self) -> bool {
        false
    }
}

impl ser::SerializeSeq for Compound<'_> {
    type Ok = ();
    type Error = SerError;

    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), SerError> {
        self.element(value)
    }

    fn end(self) -> Result<(), SerError> {
        self.finish();
        Ok(())
    }
}

impl ser::SerializeTuple for Compound<'_> {
    type Ok = ();
    type Error = SerError;

    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), SerError> {
        self.element(value)
    }

    fn end(self) -> Result<(), SerError> {
        self.finish();
        Ok(())
    }
}

impl ser::SerializeTupleStruct for Compound<'_> {
    type Ok = ();
    type Error = SerError;

    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), SerError> {
        self.element(value)
    }

    fn end(self) -> Result<(), SerError> {
        self.finish();
        Ok(())
    }
}

/// A tuple variant: a plain one (`{variant: [fields]}`) or ciborium's tag spelling.
pub(crate) enum TupleVariant<'a> {
    Plain(Compound<'a>),
    Tagged(Tagged<'a>),
}

impl ser::SerializeTupleVariant for TupleVariant<'_> {
    type Ok = ();
    type Error = SerError;

    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), SerError> {
        match self {
            TupleVariant::Plain(compound) => compound.element(value),
            TupleVariant::Tagged(tagged) => {
                tagged.fields += 1;
                if tagged.tag.is_none() {
                    // The first field is the tag number; anything else is not a tag.
                    let number = to_bytes(value)
                        .ok()
                        .and_then(|bytes| decode(&bytes).ok())
                        .and_then(|v| v.as_integer())
                        .and_then(|i| u64::try_from(i).ok());
                    match number {
                        Some(number) => tagged.tag = Some(number),
                        None => return Err(SerError("expected tag".to_owned())),
                    }
                    Ok(())
                } else {
                    // The tagged content is refused with its tag, unseen (as the two-step
                    // path does); only an error of its `Serialize` implementation matters.
                    match to_bytes(value) {
                        Err(Ok(message)) => Err(SerError(message)),
                        _ => Ok(()),
                    }
                }
            }
        }
    }

    fn end(self) -> Result<(), SerError> {
        match self {
            TupleVariant::Plain(compound) => {
                compound.finish();
                Ok(())
            }
            TupleVariant::Tagged(tagged) => match tagged.tag {
                Some(tag) if tagged.fields >= 2 => {
                    tagged
                        .encoder
                        .convert_error(CanonicalError::UnsupportedTag { tag });
                    Ok(())
                }
                _ => Err(SerError("invalid tag input".to_owned())),
            },
        }
    }
}

impl ser::SerializeMap for Compound<'_> {
    type Ok = ();
    type Error = SerError;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), SerError> {
        self.key(key)
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), SerError> {
        self.value(value)
    }

    fn end(self) -> Result<(), SerError> {
        self.finish();
        Ok(())
    }
}

impl ser::SerializeStruct for Compound<'_> {
    type Ok = ();
    type Error = SerError;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), SerError> {
        self.field(key, value)
    }

    fn end(self) -> Result<(), SerError> {
        self.finish();
        Ok(())
    }
}

impl ser::SerializeStructVariant for Compound<'_> {
    type Ok = ();
    type Error = SerError;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), SerError> {
        self.field(key, value)
    }

    fn end(self) -> Result<(), SerError> {
        self.finish();
        Ok(())
    }
}
