//! SSE framing with what a benchmark needs and SSE parsers drop: every event keeps its
//! exact length on the wire and the arrival time of the read that completed it, and
//! comment lines (`: ping`) are events of their own. Hand-written for that reason (the
//! `eventsource-stream` crate, like the SSE spec's dispatch, discards comments and byte
//! counts); it follows the spec's line rules (LF, CRLF or CR; `field: value`; a blank
//! line ends an event) and bounds its buffer.

/// Longest event accepted; a longer one is an error rather than unbounded memory.
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// One framed event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// Arrival time (run ns) of the read that completed the event.
    pub arrival_ns: i64,
    /// Bytes of the event on the wire, its terminating blank line included.
    pub wire_bytes: usize,
    /// `data:` lines joined by `\n`; `None` when the event had none.
    pub data: Option<String>,
    /// The `event:` field, if any.
    pub event: Option<String>,
    /// Comment text (after the `:`) when the event consisted of comments only.
    pub comment: Option<String>,
}

/// The framer: feed it reads, take out complete events.
#[derive(Debug, Default)]
pub struct SseFramer {
    buf: Vec<u8>,
    /// Where the event being framed starts (bytes before it are consumed).
    start: usize,
    /// Next byte of `buf` to scan.
    pos: usize,
    /// Where the line being scanned starts.
    line_start: usize,
    /// The last line break was a CR: a LF right after it is part of it.
    skip_lf: bool,
}

/// An event longer than [`MAX_EVENT_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an SSE event exceeded {MAX_EVENT_BYTES} bytes without ending")]
pub struct EventTooLong;

impl SseFramer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the bytes of one read and returns the events it completed (blank lines
    /// between events, which carry nothing, are not events).
    pub fn push(&mut self, bytes: &[u8], arrival_ns: i64) -> Result<Vec<SseEvent>, EventTooLong> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        while self.pos < self.buf.len() {
            let c = self.buf[self.pos];
            if std::mem::take(&mut self.skip_lf) && c == b'\n' {
                self.pos += 1;
                self.line_start = self.pos;
                continue;
            }
            // Jump to the next line break (memchr: this is the per-byte hot path).
            let Some(k) = memchr::memchr2(b'\n', b'\r', &self.buf[self.pos..]) else {
                self.pos = self.buf.len();
                break;
            };
            self.pos += k;
            let c = self.buf[self.pos];
            let empty_line = self.pos == self.line_start;
            self.pos += 1;
            if c == b'\r' {
                if self.buf.get(self.pos) == Some(&b'\n') {
                    self.pos += 1;
                } else {
                    self.skip_lf = self.pos == self.buf.len();
                }
            }
            self.line_start = self.pos;
            if empty_line {
                let ev = parse_event(&self.buf[self.start..self.pos], arrival_ns);
                self.start = self.pos;
                if ev.data.is_some() || ev.event.is_some() || ev.comment.is_some() {
                    out.push(ev);
                }
            }
        }
        // Drop the consumed events once per read, not once per event.
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.pos -= self.start;
            self.line_start -= self.start;
            self.start = 0;
        }
        if self.buf.len() > MAX_EVENT_BYTES {
            return Err(EventTooLong);
        }
        Ok(out)
    }

    /// Bytes of an unfinished event at the end of the stream (a server that closed
    /// mid-event); they are not an event.
    pub fn leftover(&self) -> usize {
        self.buf.len()
    }
}

fn parse_event(raw: &[u8], arrival_ns: i64) -> SseEvent {
    let text = String::from_utf8_lossy(raw);
    let mut data: Option<String> = None;
    let mut event = None;
    let mut comments: Vec<&str> = Vec::new();
    let mut fields = 0;
    for line in text.split(['\n', '\r']).filter(|l| !l.is_empty()) {
        if let Some(c) = line.strip_prefix(':') {
            comments.push(c.strip_prefix(' ').unwrap_or(c));
            continue;
        }
        fields += 1;
        let (name, value) = match line.split_once(':') {
            Some((n, v)) => (n, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match name {
            "data" => match &mut data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => data = Some(value.to_string()),
            },
            "event" => event = Some(value.to_string()),
            _ => {}
        }
    }
    SseEvent {
        arrival_ns,
        wire_bytes: raw.len(),
        data,
        event,
        comment: (fields == 0 && !comments.is_empty()).then(|| comments.join("\n")),
    }
}
