//! Framing for the planner worker's pipes: a 4-byte big-endian length, then exactly one
//! canonical CBOR item of that many bytes.
//!
//! Invariant: a declared length is checked (non-zero, at most [`MAX_FRAME_BYTES`]) before any
//! buffer is sized from it, and the body buffer grows only as bytes actually arrive, so a
//! peer cannot make the reader allocate more than it sends. A clean end of stream before a
//! header is reported apart from a stream cut inside a frame.

use std::io::{self, Read, Write};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::canonical::{self, CanonicalError};

/// The largest frame body either side writes or accepts: 16 MiB.
pub const MAX_FRAME_BYTES: u32 = 16 * 1024 * 1024;

const HEADER_BYTES: usize = 4;

/// Why a frame could not be written or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The stream ended cleanly before the first header byte: the peer closed the pipe
    /// between messages.
    #[error("peer closed the stream before a frame header")]
    Closed,
    /// A frame declared (or a writer tried to send) an empty body.
    #[error("frame length is zero; a frame carries exactly one CBOR item")]
    ZeroLength,
    /// A frame declared (or a writer tried to send) a body over the limit; nothing was
    /// allocated for it.
    #[error("frame length {declared} exceeds the limit of {limit} bytes")]
    Oversized {
        /// The declared body length.
        declared: u64,
        /// The limit in force, [`MAX_FRAME_BYTES`].
        limit: u32,
    },
    /// The stream ended inside the 4-byte length header.
    #[error("stream ended inside a frame header: expected {expected} bytes, got {got}")]
    TruncatedHeader {
        /// Header size, 4.
        expected: usize,
        /// Header bytes received.
        got: usize,
    },
    /// The stream ended inside a frame body.
    #[error("stream ended inside a frame body: expected {expected} bytes, got {got}")]
    TruncatedBody {
        /// The declared body length.
        expected: u32,
        /// Body bytes received.
        got: usize,
    },
    /// The frame body is not exactly one canonical CBOR item of the expected shape
    /// (including trailing bytes after the item).
    #[error("frame payload rejected")]
    Payload(#[from] CanonicalError),
    /// The peer speaks another protocol version.
    #[error("protocol version mismatch: expected {expected}, got {got}")]
    VersionMismatch {
        /// The version this side speaks.
        expected: u32,
        /// The version the peer announced.
        got: u32,
    },
    /// Reading or writing the stream failed.
    #[error("frame I/O failed")]
    Io(#[from] io::Error),
}

/// Writes one frame carrying `payload` and flushes `w`.
///
/// The payload is sent as given; callers that hold a typed message use [`write_message`],
/// which encodes canonically.
pub fn write_frame<W: Write>(w: &mut W, payload: &[u8]) -> Result<(), FrameError> {
    let declared = u64::try_from(payload.len()).unwrap_or(u64::MAX);
    let len = match u32::try_from(payload.len()) {
        Ok(0) => return Err(FrameError::ZeroLength),
        Ok(len) if len <= MAX_FRAME_BYTES => len,
        _ => {
            return Err(FrameError::Oversized {
                declared,
                limit: MAX_FRAME_BYTES,
            });
        }
    };
    w.write_all(&len.to_be_bytes())?;
    w.write_all(payload)?;
    w.flush()?;
    Ok(())
}

/// Reads one frame body.
///
/// Returns [`FrameError::Closed`] when the stream is at its end before any header byte.
pub fn read_frame<R: Read>(r: &mut R) -> Result<Vec<u8>, FrameError> {
    let mut header = [0_u8; HEADER_BYTES];
    let got = read_full(r, &mut header)?;
    if got == 0 {
        return Err(FrameError::Closed);
    }
    if got < HEADER_BYTES {
        return Err(FrameError::TruncatedHeader {
            expected: HEADER_BYTES,
            got,
        });
    }
    let len = u32::from_be_bytes(header);
    if len == 0 {
        return Err(FrameError::ZeroLength);
    }
    if len > MAX_FRAME_BYTES {
        return Err(FrameError::Oversized {
            declared: u64::from(len),
            limit: MAX_FRAME_BYTES,
        });
    }

    // Grows with the data actually received rather than trusting `len` for the allocation.
    let mut body = Vec::new();
    r.by_ref().take(u64::from(len)).read_to_end(&mut body)?;
    if u32::try_from(body.len()) != Ok(len) {
        return Err(FrameError::TruncatedBody {
            expected: len,
            got: body.len(),
        });
    }
    Ok(body)
}

/// Encodes `message` canonically and writes it as one frame.
pub fn write_message<W: Write, T: Serialize + ?Sized>(
    w: &mut W,
    message: &T,
) -> Result<(), FrameError> {
    let payload = canonical::to_canonical_bytes(message)?;
    write_frame(w, &payload)
}

/// Reads one frame and strictly decodes it as a `T`.
pub fn read_message<R: Read, T: DeserializeOwned>(r: &mut R) -> Result<T, FrameError> {
    let payload = read_frame(r)?;
    Ok(canonical::from_canonical_bytes(&payload)?)
}

/// Rejects a peer whose announced protocol version differs from ours.
pub fn check_version(expected: u32, got: u32) -> Result<(), FrameError> {
    if expected == got {
        Ok(())
    } else {
        Err(FrameError::VersionMismatch { expected, got })
    }
}

/// Fills `buf` unless the stream ends first; returns how many bytes were read.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use serde::Deserialize;

    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Envelope {
        protocol_version: u32,
        #[serde(flatten)]
        body: Body,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[serde(tag = "kind", rename_all = "snake_case")]
    enum Body {
        PlanRequest {
            workflow: String,
            inputs: Vec<(String, i64)>,
            seed: Option<u64>,
        },
        Shutdown,
    }

    fn framed(len: u32, body: &[u8]) -> Vec<u8> {
        let mut bytes = len.to_be_bytes().to_vec();
        bytes.extend_from_slice(body);
        bytes
    }

    #[test]
    fn typed_messages_round_trip_in_sequence() {
        let first = Envelope {
            protocol_version: 1,
            body: Body::PlanRequest {
                workflow: "build".into(),
                inputs: vec![("n".into(), -4)],
                seed: None,
            },
        };
        let second = Envelope {
            protocol_version: 1,
            body: Body::Shutdown,
        };
        let mut pipe = Vec::new();
        write_message(&mut pipe, &first).unwrap();
        write_message(&mut pipe, &second).unwrap();

        let mut reader = Cursor::new(pipe);
        assert_eq!(read_message::<_, Envelope>(&mut reader).unwrap(), first);
        assert_eq!(read_message::<_, Envelope>(&mut reader).unwrap(), second);
        assert!(matches!(
            read_message::<_, Envelope>(&mut reader),
            Err(FrameError::Closed)
        ));
    }

    #[test]
    fn written_frame_is_length_prefixed_canonical_bytes() {
        let mut pipe = Vec::new();
        write_message(&mut pipe, &vec![1_u8, 2, 3]).unwrap();
        assert_eq!(pipe, [0, 0, 0, 4, 0x83, 1, 2, 3]);
    }

    #[test]
    fn empty_stream_is_a_clean_close() {
        assert!(matches!(
            read_frame(&mut Cursor::new(Vec::new())),
            Err(FrameError::Closed)
        ));
    }

    #[test]
    fn zero_length_is_rejected_on_read_and_write() {
        assert!(matches!(
            read_frame(&mut Cursor::new(framed(0, &[]))),
            Err(FrameError::ZeroLength)
        ));
        assert!(matches!(
            write_frame(&mut Vec::new(), &[]),
            Err(FrameError::ZeroLength)
        ));
    }

    /// A reader that fails the test if asked for more than the header: proves the length is
    /// judged before the body is read or a buffer sized.
    struct HeaderOnly(Cursor<Vec<u8>>);

    impl Read for HeaderOnly {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            assert!(self.0.position() < 4, "body read after an oversized header");
            let limit = buf
                .len()
                .min(4 - usize::try_from(self.0.position()).unwrap());
            self.0.read(&mut buf[..limit])
        }
    }

    #[test]
    fn oversized_length_is_rejected_before_reading_the_body() {
        let mut reader = HeaderOnly(Cursor::new(framed(MAX_FRAME_BYTES + 1, &[0x00])));
        assert!(matches!(
            read_frame(&mut reader),
            Err(FrameError::Oversized { declared, limit: MAX_FRAME_BYTES })
                if declared == u64::from(MAX_FRAME_BYTES) + 1
        ));
        let mut reader = HeaderOnly(Cursor::new(framed(u32::MAX, &[])));
        assert!(matches!(
            read_frame(&mut reader),
            Err(FrameError::Oversized { .. })
        ));
    }

    #[test]
    fn oversized_payload_is_rejected_on_write() {
        let payload = vec![0_u8; usize::try_from(MAX_FRAME_BYTES).unwrap() + 1];
        let mut pipe = Vec::new();
        assert!(matches!(
            write_frame(&mut pipe, &payload),
            Err(FrameError::Oversized {
                limit: MAX_FRAME_BYTES,
                ..
            })
        ));
        assert!(
            pipe.is_empty(),
            "nothing may be written for a refused frame"
        );
    }

    #[test]
    fn truncated_header_reports_bytes_received() {
        assert!(matches!(
            read_frame(&mut Cursor::new(vec![0, 0, 1])),
            Err(FrameError::TruncatedHeader {
                expected: 4,
                got: 3
            })
        ));
    }

    #[test]
    fn truncated_body_reports_expected_and_received() {
        assert!(matches!(
            read_frame(&mut Cursor::new(framed(10, &[0x83, 1, 2]))),
            Err(FrameError::TruncatedBody {
                expected: 10,
                got: 3
            })
        ));
    }

    #[test]
    fn trailing_bytes_inside_a_frame_are_rejected() {
        // Two items (0x01, 0x02) in one frame.
        let mut reader = Cursor::new(framed(2, &[0x01, 0x02]));
        assert!(matches!(
            read_message::<_, u8>(&mut reader),
            Err(FrameError::Payload(CanonicalError::TrailingBytes {
                offset: 1,
                count: 1
            }))
        ));
    }

    #[test]
    fn non_canonical_payload_is_rejected() {
        let mut reader = Cursor::new(framed(2, &[0x18, 0x01]));
        assert!(matches!(
            read_message::<_, u8>(&mut reader),
            Err(FrameError::Payload(
                CanonicalError::NonShortestInteger { .. }
            ))
        ));
    }

    #[test]
    fn version_mismatch_is_its_own_error() {
        assert!(check_version(3, 3).is_ok());
        assert!(matches!(
            check_version(3, 4),
            Err(FrameError::VersionMismatch {
                expected: 3,
                got: 4
            })
        ));
        let message = check_version(1, 2).unwrap_err().to_string();
        assert_eq!(message, "protocol version mismatch: expected 1, got 2");
    }

    #[test]
    fn io_errors_are_reported_as_io() {
        struct Broken;
        impl Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::Error::new(io::ErrorKind::BrokenPipe, "gone"))
            }
        }
        assert!(
            matches!(read_frame(&mut Broken), Err(FrameError::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe)
        );
    }
}
