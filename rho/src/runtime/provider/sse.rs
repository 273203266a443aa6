//! An incremental decoder for server-sent events (the `text/event-stream` framing both wire
//! protocols stream in).
//!
//! Invariant: bytes are buffered only up to the end of the current event, and never more
//! than [`MAX_EVENT_BYTES`]: a server that never ends a line cannot grow our memory without
//! bound; it gets a malformed-stream error instead.

/// The largest single event accepted.
pub const MAX_EVENT_BYTES: usize = 8 * 1024 * 1024;

/// One decoded event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, when present.
    pub event: Option<String>,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
}

/// Feeds bytes in, takes whole events out.
#[derive(Debug, Default)]
pub struct SseDecoder {
    pending: Vec<u8>,
    event: Option<String>,
    data: Vec<String>,
    has_data: bool,
}

impl SseDecoder {
    /// A decoder at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds bytes; returns the events they complete.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, String> {
        self.pending.extend_from_slice(bytes);
        let mut events = Vec::new();
        let mut start = 0;
        while let Some(offset) = self.pending[start..].iter().position(|b| *b == b'\n') {
            let end = start + offset;
            let mut line = &self.pending[start..end];
            if let Some(stripped) = line.strip_suffix(b"\r") {
                line = stripped;
            }
            let line = std::str::from_utf8(line)
                .map_err(|_| "an event-stream line is not UTF-8".to_owned())?
                .to_owned();
            start = end + 1;
            if let Some(event) = self.line(&line) {
                events.push(event);
            }
        }
        self.pending.drain(..start);
        let buffered = self.pending.len() + self.data.iter().map(String::len).sum::<usize>();
        if buffered > MAX_EVENT_BYTES {
            return Err(format!(
                "an event is longer than {MAX_EVENT_BYTES} bytes without ending"
            ));
        }
        Ok(events)
    }

    /// Whether a partial event is still buffered (a stream ending here was cut).
    pub fn has_partial(&self) -> bool {
        !self.pending.iter().all(u8::is_ascii_whitespace) || self.has_data
    }

    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            if !self.has_data {
                self.event = None;
                return None;
            }
            let event = SseEvent {
                event: self.event.take(),
                data: self.data.join("\n"),
            };
            self.data.clear();
            self.has_data = false;
            return Some(event);
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => {
                self.data.push(value.to_owned());
                self.has_data = true;
            }
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_feeds_are_reassembled() {
        let mut d = SseDecoder::new();
        assert!(d.feed(b"event: ping\nda").unwrap().is_empty());
        let events = d
            .feed(b"ta: {\"a\":1}\r\n\r\ndata: x\ndata: y\n\n")
            .unwrap();
        assert_eq!(
            events,
            [
                SseEvent {
                    event: Some("ping".into()),
                    data: "{\"a\":1}".into()
                },
                SseEvent {
                    event: None,
                    data: "x\ny".into()
                }
            ]
        );
        assert!(!d.has_partial());
    }

    #[test]
    fn comments_are_ignored_and_partials_detected() {
        let mut d = SseDecoder::new();
        assert!(d.feed(b": keep-alive\n\ndata: part").unwrap().is_empty());
        assert!(d.has_partial());
    }

    #[test]
    fn an_endless_line_is_refused() {
        let mut d = SseDecoder::new();
        let big = vec![b'a'; MAX_EVENT_BYTES + 1];
        assert!(d.feed(&big).is_err());
    }
}
