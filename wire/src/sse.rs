//! SSE framing with what a benchmark needs and SSE parsers drop: every event keeps its
//! exact length on the wire and the arrival time of the read that completed it, and
//! comment lines (`: ping`) are events of their own. Hand-written for that reason (the
//! `eventsource-stream` crate, like the SSE spec's dispatch, discards comments and byte
//! counts); it follows the spec's line rules (LF, CRLF or CR; `field: value`; a blank
//! line ends an event), bounds its buffer, and lends events out of its buffer without
//! copying on the hot path ([`SseFramer::push_each`]).

use std::borrow::Cow;

/// Longest event accepted; a longer one is an error rather than unbounded memory.
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// One framed event; its text borrows from the framer's buffer where it can.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent<'a> {
    /// Arrival time (run ns) of the read that completed the event.
    pub arrival_ns: i64,
    /// Bytes of the event on the wire, its terminating blank line included.
    pub wire_bytes: usize,
    /// `data:` lines joined by `\n`; `None` when the event had none.
    pub data: Option<Cow<'a, str>>,
    /// The `event:` field, if any.
    pub event: Option<Cow<'a, str>>,
    /// Comment text (after the `:`) when the event consisted of comments only.
    pub comment: Option<Cow<'a, str>>,
}

impl SseEvent<'_> {
    /// The event with its text owned (to keep it past the next read).
    pub fn into_owned(self) -> SseEvent<'static> {
        let own = |c: Option<Cow<'_, str>>| c.map(|c| Cow::Owned(c.into_owned()));
        SseEvent {
            arrival_ns: self.arrival_ns,
            wire_bytes: self.wire_bytes,
            data: own(self.data),
            event: own(self.event),
            comment: own(self.comment),
        }
    }
}

/// The framer: feed it reads, take out complete events.
#[derive(Debug, Default)]
pub struct SseFramer {
    buf: Vec<u8>,
    /// Next byte of `buf` to scan (bytes before the event being framed are consumed
    /// at the end of every read).
    pos: usize,
    /// Where the line being scanned starts.
    line_start: usize,
}

/// An event longer than [`MAX_EVENT_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an SSE event exceeded {MAX_EVENT_BYTES} bytes without ending")]
pub struct EventTooLong;

impl SseFramer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the bytes of one read and returns the events it completed, owned (blank
    /// lines between events, which carry nothing, are not events).
    pub fn push(
        &mut self,
        bytes: &[u8],
        arrival_ns: i64,
    ) -> Result<Vec<SseEvent<'static>>, EventTooLong> {
        let mut out = Vec::new();
        self.push_each(bytes, arrival_ns, |ev| out.push(ev.into_owned()))?;
        Ok(out)
    }

    /// Adds the bytes of one read and hands each event it completed to `f`, borrowed:
    /// the hot path. Events complete in the read are framed in place; only the unfinished
    /// tail is kept (copied) for the next read.
    pub fn push_each(
        &mut self,
        bytes: &[u8],
        arrival_ns: i64,
        mut f: impl FnMut(SseEvent<'_>),
    ) -> Result<(), EventTooLong> {
        if self.buf.is_empty() {
            let (start, pos, line_start) = scan(bytes, 0, 0, arrival_ns, &mut f);
            self.buf.extend_from_slice(&bytes[start..]);
            (self.pos, self.line_start) = (pos - start, line_start - start);
        } else {
            self.buf.extend_from_slice(bytes);
            let (start, pos, line_start) =
                scan(&self.buf, self.pos, self.line_start, arrival_ns, &mut f);
            // Drop the consumed events once per read, not once per event.
            if start > 0 {
                self.buf.drain(..start);
            }
            (self.pos, self.line_start) = (pos - start, line_start - start);
        }
        if self.buf.len() > MAX_EVENT_BYTES {
            return Err(EventTooLong);
        }
        Ok(())
    }

    /// Bytes of an unfinished event at the end of the stream (a server that closed
    /// mid-event); they are not an event.
    pub fn leftover(&self) -> usize {
        self.buf.len()
    }
}

/// Frames the events of `data` from `pos` (scanning) and `line_start` on, handing each
/// complete one to `f`; returns where the unfinished rest starts, and the scan state.
fn scan(
    data: &[u8],
    mut pos: usize,
    mut line_start: usize,
    arrival_ns: i64,
    f: &mut impl FnMut(SseEvent<'_>),
) -> (usize, usize, usize) {
    // Where the event being framed starts.
    let mut start = 0;
    while pos < data.len() {
        // Jump to the next line break (memchr: this is the per-byte hot path).
        let Some(k) = memchr::memchr2(b'\n', b'\r', &data[pos..]) else {
            pos = data.len();
            break;
        };
        pos += k;
        let c = data[pos];
        let empty_line = pos == line_start;
        pos += 1;
        if c == b'\r' {
            match data.get(pos) {
                Some(b'\n') => pos += 1,
                Some(_) => {}
                // A CR that ends the bytes so far: its LF may come with the next read.
                // It is scanned again then, so a line break split across reads is one
                // break and an event's length does not depend on where reads fall (an
                // event ended by a lone CR completes with the next read).
                None => {
                    pos -= 1;
                    break;
                }
            }
        }
        line_start = pos;
        if empty_line {
            let ev = parse_event(&data[start..pos], arrival_ns);
            start = pos;
            if ev.data.is_some() || ev.event.is_some() || ev.comment.is_some() {
                f(ev);
            }
        }
    }
    (start, pos, line_start)
}

/// The lines of one event, split on LF, CR or CRLF, empty lines skipped.
fn lines(raw: &[u8]) -> impl Iterator<Item = &[u8]> {
    raw.split(|&b| b == b'\n' || b == b'\r')
        .filter(|l| !l.is_empty())
}

fn text(b: &[u8]) -> Cow<'_, str> {
    // The strict check first: it has a fast path for ASCII that the lossy one lacks.
    match std::str::from_utf8(b) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(b),
    }
}

fn strip_space(b: &[u8]) -> &[u8] {
    b.strip_prefix(b" ").unwrap_or(b)
}

fn parse_event(raw: &[u8], arrival_ns: i64) -> SseEvent<'_> {
    let mut data: Option<Cow<'_, str>> = None;
    let mut event = None;
    let mut comment: Option<Cow<'_, str>> = None;
    let mut fields = 0;
    for line in lines(raw) {
        if let Some(c) = line.strip_prefix(b":") {
            let c = text(strip_space(c));
            comment = Some(match comment {
                None => c,
                Some(prev) => Cow::Owned(format!("{prev}\n{c}")),
            });
            continue;
        }
        fields += 1;
        let (name, value) = match memchr::memchr(b':', line) {
            Some(i) => (&line[..i], strip_space(&line[i + 1..])),
            None => (line, &b""[..]),
        };
        match name {
            b"data" => {
                let value = text(value);
                data = Some(match data {
                    None => value,
                    Some(prev) => {
                        let mut d = prev.into_owned();
                        d.push('\n');
                        d.push_str(&value);
                        Cow::Owned(d)
                    }
                });
            }
            b"event" => event = Some(text(value)),
            _ => {}
        }
    }
    SseEvent {
        arrival_ns,
        wire_bytes: raw.len(),
        data,
        event,
        comment: if fields == 0 { comment } else { None },
    }
}
