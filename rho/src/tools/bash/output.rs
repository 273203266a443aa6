//! Bounded capture of a command's output: the first and the last bytes are kept, the middle
//! is counted and dropped.
//!
//! Invariant: memory stays at most `head + tail` bytes whatever the command writes, and the
//! rendered text says exactly how many bytes were left out.

use std::collections::VecDeque;
use std::fmt::Write as _;

/// Keeps the first `head` and the last `tail` bytes of a stream.
#[derive(Debug)]
pub struct BoundedOutput {
    head_limit: usize,
    tail_limit: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
}

impl BoundedOutput {
    /// A capture keeping at most `limit` bytes: a quarter from the start, the rest from the
    /// end (the end of a build or test log is where the error is).
    pub fn new(limit: usize) -> Self {
        let head_limit = limit / 4;
        BoundedOutput {
            head_limit,
            tail_limit: limit - head_limit,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
        }
    }

    /// Appends bytes.
    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total = self
            .total
            .saturating_add(u64::try_from(bytes.len()).unwrap_or(u64::MAX));
        let room = self.head_limit - self.head.len();
        if room > 0 {
            let take = room.min(bytes.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        if bytes.len() >= self.tail_limit {
            self.tail.clear();
            self.tail
                .extend(bytes[bytes.len() - self.tail_limit..].iter().copied());
            return;
        }
        let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.tail_limit);
        self.tail.drain(..overflow);
        self.tail.extend(bytes.iter().copied());
    }

    /// Bytes written in total.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Bytes dropped from the middle.
    pub fn omitted(&self) -> u64 {
        self.total
            .saturating_sub(u64::try_from(self.head.len() + self.tail.len()).unwrap_or(u64::MAX))
    }

    /// The kept text (invalid UTF-8 replaced), with a marker line where bytes were dropped.
    pub fn render(&self) -> String {
        let mut out = String::from_utf8_lossy(&self.head).into_owned();
        let omitted = self.omitted();
        if omitted > 0 {
            if !out.ends_with('\n') {
                out.push('\n');
            }
            let _ = writeln!(out, "[... {omitted} bytes of output omitted ...]");
        }
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        out.push_str(&String::from_utf8_lossy(&tail));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_output_is_kept_whole() {
        let mut b = BoundedOutput::new(100);
        b.push(b"hello ");
        b.push(b"world");
        assert_eq!(b.render(), "hello world");
        assert_eq!((b.total(), b.omitted()), (11, 0));
    }

    #[test]
    fn long_output_keeps_head_and_tail_in_bounded_memory() {
        let mut b = BoundedOutput::new(400);
        for i in 0..10_000 {
            b.push(format!("line {i}\n").as_bytes());
        }
        assert!(b.head.len() + b.tail.len() <= 400);
        let text = b.render();
        assert!(text.starts_with("line 0\nline 1\n"), "{text}");
        assert!(text.ends_with("line 9999\n"), "{text}");
        assert!(text.contains(&format!(
            "[... {} bytes of output omitted ...]",
            b.omitted()
        )));
        assert_eq!(
            b.total(),
            (0..10_000)
                .map(|i| format!("line {i}\n").len() as u64)
                .sum::<u64>()
        );
    }

    #[test]
    fn one_huge_chunk_is_bounded_too() {
        let mut b = BoundedOutput::new(8);
        b.push(&[b'a'; 1000]);
        b.push(b"xyz");
        assert_eq!(b.omitted(), 1003 - 8);
        // Two bytes of head, six of tail.
        assert!(
            b.render().starts_with("aa\n[... 995 bytes"),
            "{}",
            b.render()
        );
        assert!(b.render().ends_with("\naaaxyz"), "{}", b.render());
    }
}
