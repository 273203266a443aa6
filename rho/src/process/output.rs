//! Retained output of one background process: chunks with monotonic cursors under a byte cap
//! and a chunk cap.
//!
//! Invariant: the retained text never exceeds `max_bytes` and the retained chunks never exceed
//! `max_chunks`, whatever is pushed; cursors only grow, and every dropped byte is counted, so
//! `truncated` is exact. The first chunk (cursor 0) is dropped last: it usually holds the start
//! of a failure, which the newest output alone would not explain.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// Which pipe a chunk was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    /// The child's standard output.
    Stdout,
    /// The child's standard error.
    Stderr,
}

impl Stream {
    /// The wire name (`stdout`, `stderr`).
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// One piece of output as it was read from a pipe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk {
    /// Position of this chunk; the next chunk has `cursor + 1`.
    pub cursor: u64,
    /// The pipe it came from.
    pub stream: Stream,
    /// The text (bytes that were not UTF-8 are replaced by U+FFFD).
    pub text: String,
}

/// What a read of the retained output returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputWindow {
    /// Retained chunks from the read position on, within the byte budget of the read.
    pub chunks: Vec<Chunk>,
    /// Where the next read should start.
    pub next_cursor: u64,
    /// The requested cursor, when it pointed at output that retention had already dropped
    /// (the read then started at the oldest chunk still held after it).
    pub stale_cursor: Option<u64>,
}

/// A requested cursor lies past all output produced so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CursorAhead {
    /// The cursor asked for.
    pub requested: u64,
    /// The cursor the next chunk will get.
    pub available: u64,
}

/// Bounded chunk store of one process.
#[derive(Debug)]
pub struct OutputBuffer {
    max_bytes: usize,
    max_chunks: usize,
    chunks: VecDeque<Chunk>,
    /// `chunks[0]` is the first chunk ever (cursor 0), kept while newer chunks are dropped.
    head_pinned: bool,
    bytes: usize,
    next_cursor: u64,
    dropped_chunks: u64,
    dropped_bytes: u64,
}

impl OutputBuffer {
    /// An empty buffer holding at most `max_bytes` of text in at most `max_chunks` chunks
    /// (each at least 1).
    pub fn new(max_bytes: usize, max_chunks: usize) -> Self {
        OutputBuffer {
            max_bytes: max_bytes.max(1),
            max_chunks: max_chunks.max(1),
            chunks: VecDeque::new(),
            head_pinned: false,
            bytes: 0,
            next_cursor: 0,
            dropped_chunks: 0,
            dropped_bytes: 0,
        }
    }

    /// Appends `text` as the next chunk, dropping the oldest chunks (the first chunk last)
    /// until both caps hold. A chunk larger than the room it can have keeps only its end:
    /// the room is the whole byte cap, less the pinned first chunk when that one takes at
    /// most half of the cap.
    pub fn push(&mut self, stream: Stream, mut text: String) {
        if text.is_empty() {
            return;
        }
        let head = if self.head_pinned {
            self.chunks.front().map_or(0, |c| c.text.len())
        } else {
            0
        };
        let room = if head <= self.max_bytes / 2 {
            self.max_bytes - head
        } else {
            self.max_bytes
        };
        if text.len() > room {
            let mut cut = text.len() - room;
            while !text.is_char_boundary(cut) {
                cut += 1;
            }
            self.dropped_bytes += cut as u64;
            text.drain(..cut);
        }
        let cursor = self.next_cursor;
        self.next_cursor += 1;
        while !self.chunks.is_empty()
            && (self.bytes + text.len() > self.max_bytes || self.chunks.len() >= self.max_chunks)
        {
            let victim = if self.head_pinned && self.chunks.len() >= 2 {
                self.chunks.remove(1)
            } else {
                self.head_pinned = false;
                self.chunks.pop_front()
            };
            if let Some(victim) = victim {
                self.bytes -= victim.text.len();
                self.dropped_bytes += victim.text.len() as u64;
                self.dropped_chunks += 1;
            }
        }
        if cursor == 0 {
            self.head_pinned = true;
        }
        self.bytes += text.len();
        self.chunks.push_back(Chunk {
            cursor,
            stream,
            text,
        });
    }

    /// The oldest retained cursor (the cursor of the next chunk when nothing is retained).
    pub fn first_cursor(&self) -> u64 {
        self.chunks.front().map_or(self.next_cursor, |c| c.cursor)
    }

    /// The cursor the next chunk will get: one past the newest chunk.
    pub fn available_cursor(&self) -> u64 {
        self.next_cursor
    }

    /// Whether any output was dropped under the caps.
    pub fn truncated(&self) -> bool {
        self.dropped_bytes > 0
    }

    /// Whole chunks dropped so far.
    pub fn dropped_chunks(&self) -> u64 {
        self.dropped_chunks
    }

    /// Bytes of text dropped so far (whole chunks and clipped starts).
    pub fn dropped_bytes(&self) -> u64 {
        self.dropped_bytes
    }

    /// Bytes of text retained.
    pub fn retained_bytes(&self) -> usize {
        self.bytes
    }

    /// Chunks retained.
    pub fn retained_chunks(&self) -> usize {
        self.chunks.len()
    }

    /// Index of the first retained chunk whose cursor is at least `cursor`.
    fn index_from(&self, cursor: u64) -> usize {
        self.chunks.partition_point(|c| c.cursor < cursor)
    }

    /// Whether a chunk at or after `cursor` is retained (so a read from there returns output).
    pub fn has_output_from(&self, cursor: u64) -> bool {
        self.index_from(cursor) < self.chunks.len()
    }

    /// Reads retained chunks from `from` (the oldest retained chunk when `None`), at most
    /// `max_bytes` of text but always at least one chunk when one is there.
    pub fn read(&self, from: Option<u64>, max_bytes: usize) -> Result<OutputWindow, CursorAhead> {
        let start = from.unwrap_or_else(|| self.first_cursor());
        if start > self.next_cursor {
            return Err(CursorAhead {
                requested: start,
                available: self.next_cursor,
            });
        }
        let index = self.index_from(start);
        let found = self.chunks.get(index).map(|c| c.cursor);
        // A cursor below the newest produced one that names no retained chunk was dropped.
        let stale_cursor = (start < self.next_cursor && found != Some(start)).then_some(start);
        let mut chunks = Vec::new();
        let mut used = 0_usize;
        for chunk in self.chunks.range(index..) {
            if !chunks.is_empty() && used + chunk.text.len() > max_bytes {
                break;
            }
            used += chunk.text.len();
            chunks.push(chunk.clone());
        }
        // The next read starts at the next retained chunk, so the gap after a pinned first
        // chunk is not mistaken for a stale cursor.
        let next_cursor = self
            .chunks
            .get(index + chunks.len())
            .map_or(self.next_cursor, |c| c.cursor);
        Ok(OutputWindow {
            chunks,
            next_cursor,
            stale_cursor,
        })
    }
}

/// Splits off an unfinished UTF-8 sequence at the end of `bytes`: returns the length of the
/// prefix to decode now; the rest (at most three bytes) waits for the next read.
pub fn complete_utf8_prefix(bytes: &[u8]) -> usize {
    let len = bytes.len();
    // A sequence is at most 4 bytes: look for its lead byte among the last 3.
    for back in 1..=len.min(3) {
        let byte = bytes[len - back];
        if byte & 0xC0 == 0x80 {
            continue; // continuation byte
        }
        let needed = match byte {
            0xC2..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF4 => 4,
            _ => 1, // ASCII or an invalid lead: decodes (lossily) on its own
        };
        return if needed > back { len - back } else { len };
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push_n(buffer: &mut OutputBuffer, n: usize, text: &str) {
        for _ in 0..n {
            buffer.push(Stream::Stdout, text.to_owned());
        }
    }

    #[test]
    fn cursors_grow_and_reads_continue_where_they_stopped() {
        let mut buffer = OutputBuffer::new(1024, 16);
        buffer.push(Stream::Stdout, "a".into());
        buffer.push(Stream::Stderr, "b".into());
        let all = buffer.read(None, usize::MAX).unwrap();
        assert_eq!(
            all.chunks.iter().map(|c| c.cursor).collect::<Vec<_>>(),
            [0, 1]
        );
        assert_eq!(all.chunks[1].stream, Stream::Stderr);
        assert_eq!(all.next_cursor, 2);
        assert_eq!(all.stale_cursor, None);
        buffer.push(Stream::Stdout, "c".into());
        let rest = buffer.read(Some(all.next_cursor), usize::MAX).unwrap();
        assert_eq!(rest.chunks.len(), 1);
        assert_eq!(rest.chunks[0].text, "c");
        assert_eq!(rest.next_cursor, 3);
        let empty = buffer.read(Some(3), usize::MAX).unwrap();
        assert!(empty.chunks.is_empty());
        assert_eq!(empty.next_cursor, 3);
        assert!(!buffer.truncated());
    }

    #[test]
    fn chunk_cap_drops_oldest_but_keeps_the_first_chunk() {
        let mut buffer = OutputBuffer::new(1 << 20, 4);
        push_n(&mut buffer, 10, "x");
        assert_eq!(buffer.retained_chunks(), 4);
        let all = buffer.read(None, usize::MAX).unwrap();
        assert_eq!(
            all.chunks.iter().map(|c| c.cursor).collect::<Vec<_>>(),
            [0, 7, 8, 9]
        );
        assert_eq!(buffer.first_cursor(), 0);
        assert_eq!(buffer.available_cursor(), 10);
        assert_eq!(buffer.dropped_chunks(), 6);
        assert_eq!(buffer.dropped_bytes(), 6);
        assert!(buffer.truncated());
    }

    #[test]
    fn byte_cap_holds_exactly_and_counts_every_dropped_byte() {
        let mut buffer = OutputBuffer::new(10, 100);
        push_n(&mut buffer, 7, "abc");
        // First chunk (3) + as many newest as fit in the remaining 7 bytes: two chunks.
        assert_eq!(buffer.retained_bytes(), 9);
        assert_eq!(buffer.retained_chunks(), 3);
        assert_eq!(buffer.dropped_bytes(), 12);
        assert_eq!(buffer.dropped_chunks(), 4);
        assert!(buffer.retained_bytes() <= 10);
    }

    #[test]
    fn first_chunk_goes_when_nothing_else_can() {
        let mut buffer = OutputBuffer::new(10, 100);
        buffer.push(Stream::Stdout, "123456".into());
        buffer.push(Stream::Stdout, "abcdef".into());
        let all = buffer.read(None, usize::MAX).unwrap();
        assert_eq!(all.chunks.len(), 1);
        assert_eq!(all.chunks[0].cursor, 1);
        assert_eq!(buffer.first_cursor(), 1);
        // Later pushes never bring back a pinned head.
        buffer.push(Stream::Stdout, "ghijkl".into());
        assert_eq!(buffer.first_cursor(), 2);
    }

    #[test]
    fn a_large_chunk_is_clipped_to_keep_a_small_first_chunk() {
        let mut buffer = OutputBuffer::new(10, 100);
        buffer.push(Stream::Stdout, "ab".into());
        buffer.push(Stream::Stdout, "0123456789".into());
        let all = buffer.read(None, usize::MAX).unwrap();
        assert_eq!(all.chunks.len(), 2);
        assert_eq!(all.chunks[0].text, "ab");
        assert_eq!(all.chunks[1].text, "23456789");
        assert_eq!(buffer.dropped_bytes(), 2);
        assert_eq!(buffer.retained_bytes(), 10);
    }

    #[test]
    fn oversized_chunk_keeps_its_end_on_a_char_boundary() {
        let mut buffer = OutputBuffer::new(4, 10);
        buffer.push(Stream::Stdout, "abcdé".into()); // é is two bytes: 6 bytes in all
        let all = buffer.read(None, usize::MAX).unwrap();
        assert_eq!(all.chunks[0].text, "cdé");
        assert_eq!(buffer.dropped_bytes(), 2);
        assert_eq!(buffer.dropped_chunks(), 0);
        assert!(buffer.truncated());
    }

    #[test]
    fn stale_cursor_is_reported_and_advanced() {
        let mut buffer = OutputBuffer::new(1 << 20, 3);
        push_n(&mut buffer, 6, "x");
        // Retained: 0 (pinned), 4, 5.
        let window = buffer.read(Some(2), usize::MAX).unwrap();
        assert_eq!(window.stale_cursor, Some(2));
        assert_eq!(
            window.chunks.iter().map(|c| c.cursor).collect::<Vec<_>>(),
            [4, 5]
        );
        assert_eq!(window.next_cursor, 6);
        // Cursor 0 is still held: not stale.
        let from_zero = buffer.read(Some(0), usize::MAX).unwrap();
        assert_eq!(from_zero.stale_cursor, None);
        assert_eq!(from_zero.chunks.len(), 3);
    }

    #[test]
    fn next_cursor_skips_the_gap_after_the_first_chunk() {
        let mut buffer = OutputBuffer::new(1 << 20, 3);
        push_n(&mut buffer, 6, "x");
        let first = buffer.read(Some(0), 1).unwrap();
        assert_eq!(first.chunks.len(), 1);
        assert_eq!(first.next_cursor, 4);
        let next = buffer.read(Some(first.next_cursor), usize::MAX).unwrap();
        assert_eq!(next.stale_cursor, None);
    }

    #[test]
    fn byte_budget_pages_but_always_returns_one_chunk() {
        let mut buffer = OutputBuffer::new(1 << 20, 100);
        push_n(&mut buffer, 5, "abcd");
        let page = buffer.read(None, 9).unwrap();
        assert_eq!(page.chunks.len(), 2);
        assert_eq!(page.next_cursor, 2);
        let tiny = buffer.read(Some(2), 1).unwrap();
        assert_eq!(tiny.chunks.len(), 1);
        assert_eq!(tiny.next_cursor, 3);
    }

    #[test]
    fn cursor_past_the_output_is_refused() {
        let mut buffer = OutputBuffer::new(100, 100);
        buffer.push(Stream::Stdout, "a".into());
        assert_eq!(
            buffer.read(Some(5), 10),
            Err(CursorAhead {
                requested: 5,
                available: 1
            })
        );
    }

    #[test]
    fn empty_pushes_make_no_chunk() {
        let mut buffer = OutputBuffer::new(100, 100);
        buffer.push(Stream::Stdout, String::new());
        assert_eq!(buffer.available_cursor(), 0);
    }

    #[test]
    fn unfinished_utf8_sequences_wait_for_more_bytes() {
        assert_eq!(complete_utf8_prefix(b"abc"), 3);
        assert_eq!(complete_utf8_prefix("é".as_bytes()), 2);
        assert_eq!(complete_utf8_prefix(&"é".as_bytes()[..1]), 0);
        assert_eq!(complete_utf8_prefix(&"ab€".as_bytes()[..4]), 2);
        assert_eq!(complete_utf8_prefix(&"a😀".as_bytes()[..4]), 1);
        assert_eq!(complete_utf8_prefix("a😀".as_bytes()), 5);
        // Invalid bytes are not held back: they decode lossily.
        assert_eq!(complete_utf8_prefix(&[0xFF]), 1);
        assert_eq!(complete_utf8_prefix(&[0x80, 0x80, 0x80]), 3);
    }
}
