//! HTTP/1.1 for the generation streams, written against the socket so that the recorder
//! sees its own writes and reads: the send time is when the write of the request's last
//! byte returned, every read is stamped as it returns, and connections are kept alive
//! per closed-loop worker. httparse reads the response head; the chunked body decoder is
//! here (a few dozen lines) because hyper hands body frames over a channel from its own
//! connection task, which hides the read each frame came from and costs a task wake-up
//! per frame. Control-plane calls (probe, tokenize, metrics) still use reqwest.

use std::sync::atomic::{AtomicI64, Ordering};

use tokentrace_schemas::rx_stamp::RxStamps;
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::TcpStream;

/// Longest response head accepted.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Most header lines read from a response head.
const MAX_HEADERS: usize = 64;
/// Read buffer of a connection (it grows only for a response head that needs it).
const READ_BUFFER: usize = 16 * 1024;
/// Longest chunk-size or trailer line accepted in a chunked body.
const MAX_CHUNK_LINE: usize = 4096;
/// Most new connections waiting for their first response at once. A thousand workers
/// connecting together overflow a busy server's accept queue, and each dropped SYN costs
/// a second before the kernel retries it. A permit is held until the connection's first
/// response head arrives (the server has accepted it by then), not only until the
/// handshake: a handshake completes before the server accepts.
pub const MAX_CONNECTING: usize = 64;

/// Where generation requests go, and the bytes every request carries.
pub struct Transport {
    /// `host:port` to connect to.
    addr: String,
    /// `POST <path> HTTP/1.1` and every header line but `Content-Length`.
    head: Vec<u8>,
    /// Connection ids, unique within the run.
    next_conn: AtomicI64,
    /// Permits to connect ([`MAX_CONNECTING`]).
    connecting: std::sync::Arc<tokio::sync::Semaphore>,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The head may hold an API key: never print it.
        f.debug_struct("Transport")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// A target the transport cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot send generation requests to {url}: {why}")]
pub struct BadTarget {
    pub url: String,
    pub why: String,
}

impl Transport {
    /// A transport for the endpoint `url` (`http://host:port/path`), sending `headers`
    /// (e.g. `authorization`) with every request.
    pub fn new(url: &str, headers: &[(String, String)]) -> Result<Transport, BadTarget> {
        let bad = |why: &str| BadTarget {
            url: tokentrace_schemas::redact::redact_url(url),
            why: why.to_string(),
        };
        let u = reqwest::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
        if u.scheme() != "http" {
            return Err(bad("only http:// targets are supported"));
        }
        let host = u.host_str().ok_or_else(|| bad("no host"))?;
        let port = u.port_or_known_default().unwrap_or(80);
        let host_header = match u.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.to_string(),
        };
        let mut path = u.path().to_string();
        if let Some(q) = u.query() {
            path.push('?');
            path.push_str(q);
        }
        let mut head = format!(
            "POST {path} HTTP/1.1\r\nhost: {host_header}\r\ncontent-type: application/json\r\n\
             accept: text/event-stream\r\nuser-agent: tokentrace/{}\r\n",
            env!("CARGO_PKG_VERSION")
        );
        for (k, v) in headers {
            if k.contains(['\r', '\n', ':']) || v.contains(['\r', '\n']) {
                return Err(bad(&format!("header `{k}` is not a valid header line")));
            }
            head.push_str(k);
            head.push_str(": ");
            head.push_str(v);
            head.push_str("\r\n");
        }
        Ok(Transport {
            addr: format!("{host}:{port}"),
            head: head.into_bytes(),
            next_conn: AtomicI64::new(0),
            connecting: std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTING)),
        })
    }

    /// The bytes of one request with `body` (a variant is written straight into them:
    /// no body of its own outlives the write).
    pub fn request_bytes(&self, body: &crate::send::request::Body) -> Vec<u8> {
        use crate::send::request::Body;
        use std::borrow::Cow;
        let parts = match body {
            Body::Shared(b) => [
                Cow::Borrowed(&b[..]),
                Cow::Borrowed(&[][..]),
                Cow::Borrowed(&[][..]),
            ],
            Body::Variant(v, key) => v.parts(*key),
        };
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let mut out = Vec::with_capacity(self.head.len() + 40 + len);
        out.extend_from_slice(&self.head);
        out.extend_from_slice(format!("content-length: {len}\r\n\r\n").as_bytes());
        for p in &parts {
            out.extend_from_slice(p);
        }
        out
    }

    /// Opens a new connection, at most [`MAX_CONNECTING`] at a time (no timeout here:
    /// the caller bounds it).
    pub async fn connect(&self) -> std::io::Result<Conn> {
        let permit = self
            .connecting
            .clone()
            .acquire_owned()
            .await
            .map_err(std::io::Error::other)?;
        let stream = TcpStream::connect(&self.addr).await?;
        stream.set_nodelay(true)?;
        let stamps = RxStamps::enable(&stream);
        Ok(Conn {
            stream,
            stamps,
            age_ns: 0,
            id: self.next_conn.fetch_add(1, Ordering::Relaxed),
            buf: vec![0; READ_BUFFER],
            start: 0,
            end: 0,
            served: 0,
            permit: Some(permit),
        })
    }
}

/// One open connection with its read buffer.
#[derive(Debug)]
pub struct Conn {
    stream: TcpStream,
    /// Kernel receive stamps of the reads, where the platform gives them.
    stamps: Option<RxStamps>,
    /// How long before the last read returned the kernel received its newest bytes (0
    /// where no stamp came with them).
    age_ns: i64,
    /// Recorder-assigned id, unique within the run.
    pub id: i64,
    buf: Vec<u8>,
    /// Unconsumed bytes are `buf[start..end]`.
    start: usize,
    end: usize,
    /// Responses completed on this connection.
    pub served: u32,
    /// The connect permit, held until the first response head (see [`MAX_CONNECTING`]).
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Conn {
    /// Whether the connection can carry another request: the server has not closed it
    /// and sent nothing unasked (one non-blocking read). A server may close a kept-alive
    /// connection without saying so (llama.cpp does after every streamed response).
    pub fn reusable(&self) -> bool {
        if self.start != self.end {
            return false;
        }
        let mut probe = [0u8; 1];
        matches!(self.stream.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }

    /// Writes all of `bytes`.
    pub async fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes).await
    }

    /// Reads once more into the buffer; 0 at the end of the stream.
    pub async fn read_more(&mut self) -> std::io::Result<usize> {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        } else if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                (self.start, self.end) = (0, self.end - self.start);
            } else if self.buf.len() < MAX_HEAD_BYTES {
                self.buf.resize(MAX_HEAD_BYTES, 0);
            }
        }
        if self.end == self.buf.len() {
            return Err(std::io::Error::other("response head too long"));
        }
        let Conn {
            stream,
            stamps,
            buf,
            end,
            ..
        } = self;
        let n = match stamps {
            None => stream.read(&mut buf[*end..]).await?,
            Some(stamps) => loop {
                stream.readable().await?;
                let room = buf.len() - *end;
                let mut got = None;
                let r = stream.try_io(Interest::READABLE, || {
                    let (n, age) = stamps.recv(&*stream, &mut buf[*end..])?;
                    got = Some((n, age));
                    // A short read has drained the socket: say so, and tokio clears its
                    // readiness now, as its own reads do, instead of learning it from
                    // one more read that would block (a system call per event).
                    if n > 0 && n < room {
                        Err(std::io::ErrorKind::WouldBlock.into())
                    } else {
                        Ok(())
                    }
                });
                match (r, got) {
                    (_, Some((n, age))) => {
                        self.age_ns = age.unwrap_or(0);
                        break n;
                    }
                    (Err(e), None) if e.kind() != std::io::ErrorKind::WouldBlock => {
                        return Err(e);
                    }
                    _ => continue,
                }
            },
        };
        self.end += n;
        Ok(n)
    }

    /// How long before the last read returned the kernel received the newest of its
    /// bytes (ns; 0 where the platform gives no receive stamps). A read's arrival is the
    /// clock as it returns less this, so the recorder's own delay in getting to the
    /// read (a busy core, a task queued behind others) is not counted as the server's.
    pub fn read_age_ns(&self) -> i64 {
        self.age_ns
    }

    /// The bytes read and not consumed yet.
    pub fn pending(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// The server has answered on this connection: it was accepted, its permit is freed.
    pub fn answered(&mut self) {
        self.permit = None;
    }

    /// Marks `n` pending bytes consumed.
    pub fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
    }
}

/// A response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    /// How the body is delimited.
    pub body: BodyKind,
    /// The connection may carry another request after this response.
    pub keep_alive: bool,
    /// The `x-request-id` header.
    pub request_id: Option<String>,
}

/// How a response body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    Chunked,
    Length(u64),
    /// Until the server closes the connection.
    Eof,
}

/// Parses a response head from `bytes`: `Ok(None)` when it is not complete yet, else
/// the head and its length.
pub fn parse_head(bytes: &[u8]) -> Result<Option<(Head, usize)>, String> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let len = match resp.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if bytes.len() >= MAX_HEAD_BYTES => {
            return Err(format!("response head longer than {MAX_HEAD_BYTES} bytes"));
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("unreadable response head: {e}")),
    };
    let status = resp.code.unwrap_or(0);
    let http11 = resp.version == Some(1);
    let (mut chunked, mut length, mut close, mut keep, mut request_id) =
        (false, None, false, false, None);
    for h in resp.headers.iter() {
        let value = String::from_utf8_lossy(h.value);
        let tokens = || value.split(',').map(|t| t.trim().to_ascii_lowercase());
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked |= tokens().any(|t| t == "chunked");
        } else if h.name.eq_ignore_ascii_case("content-length") {
            let n = value
                .trim()
                .parse::<u64>()
                .map_err(|_| format!("bad content-length `{value}`"))?;
            if length.is_some_and(|l| l != n) {
                return Err("conflicting content-length headers".to_string());
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("connection") {
            close |= tokens().any(|t| t == "close");
            keep |= tokens().any(|t| t == "keep-alive");
        } else if h.name.eq_ignore_ascii_case("x-request-id") {
            request_id = Some(value.into_owned());
        }
    }
    // 1xx, 204 and 304 have no body.
    let no_body = (100..200).contains(&status) || status == 204 || status == 304;
    let body = if no_body {
        BodyKind::Length(0)
    } else if chunked {
        BodyKind::Chunked
    } else if let Some(n) = length {
        BodyKind::Length(n)
    } else {
        BodyKind::Eof
    };
    let keep_alive = body != BodyKind::Eof && !close && (http11 || keep);
    Ok(Some((
        Head {
            status,
            body,
            keep_alive,
            request_id,
        },
        len,
    )))
}

/// The body decoder of one response.
#[derive(Debug)]
pub struct BodyDecoder {
    kind: BodyKind,
    /// Bytes left of a `Length` body, or of the current chunk.
    left: u64,
    state: Chunk,
    /// Bytes of the current chunk-size or trailer line.
    line: usize,
    digits: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    Size,
    Ext,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    Trailer,
    Done,
}

impl BodyDecoder {
    pub fn new(kind: BodyKind) -> Self {
        BodyDecoder {
            kind,
            left: match kind {
                BodyKind::Length(n) => n,
                _ => 0,
            },
            state: Chunk::Size,
            line: 0,
            digits: 0,
        }
    }

    /// The body has ended (never, for a body that runs to the end of the connection).
    pub fn done(&self) -> bool {
        match self.kind {
            BodyKind::Chunked => self.state == Chunk::Done,
            BodyKind::Length(_) => self.left == 0,
            BodyKind::Eof => false,
        }
    }

    /// Ends at the end of the connection rather than by its framing.
    pub fn until_eof(&self) -> bool {
        self.kind == BodyKind::Eof
    }

    /// Decodes from `input`, appending body bytes to `out`; returns how many input bytes
    /// it consumed (all of them, unless the body ended inside `input`).
    pub fn decode(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, String> {
        match self.kind {
            BodyKind::Eof => {
                out.extend_from_slice(input);
                Ok(input.len())
            }
            BodyKind::Length(_) => {
                let take = input
                    .len()
                    .min(usize::try_from(self.left).unwrap_or(usize::MAX));
                out.extend_from_slice(&input[..take]);
                self.left -= take as u64;
                Ok(take)
            }
            BodyKind::Chunked => self.decode_chunked(input, out),
        }
    }

    fn decode_chunked(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, String> {
        let mut i = 0;
        while i < input.len() {
            let c = input[i];
            match self.state {
                Chunk::Done => return Ok(i),
                Chunk::Data => {
                    let avail = input.len() - i;
                    let take = avail.min(usize::try_from(self.left).unwrap_or(usize::MAX));
                    out.extend_from_slice(&input[i..i + take]);
                    self.left -= take as u64;
                    i += take;
                    if self.left == 0 {
                        self.state = Chunk::DataCr;
                    }
                    continue;
                }
                Chunk::Size => match c {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        let d = (c as char).to_digit(16).unwrap_or(0);
                        self.left = self
                            .left
                            .checked_mul(16)
                            .and_then(|v| v.checked_add(u64::from(d)))
                            .ok_or("chunk size overflows")?;
                        self.digits += 1;
                    }
                    b';' | b' ' | b'\t' => self.state = Chunk::Ext,
                    b'\r' => self.state = Chunk::SizeLf,
                    b'\n' => self.end_size()?,
                    _ => return Err(format!("bad chunk size byte 0x{c:02x}")),
                },
                Chunk::Ext => {
                    if c == b'\n' {
                        self.end_size()?;
                    }
                }
                Chunk::SizeLf => {
                    if c != b'\n' {
                        return Err("chunk size line without LF".to_string());
                    }
                    self.end_size()?;
                }
                Chunk::DataCr => match c {
                    b'\r' => self.state = Chunk::DataLf,
                    b'\n' => self.next_chunk(),
                    _ => return Err("chunk data longer than its size".to_string()),
                },
                Chunk::DataLf => {
                    if c != b'\n' {
                        return Err("chunk data not followed by CRLF".to_string());
                    }
                    self.next_chunk();
                }
                Chunk::Trailer => match c {
                    b'\n' if self.line == 0 => self.state = Chunk::Done,
                    b'\n' => self.line = 0,
                    b'\r' => {}
                    _ => self.line += 1,
                },
            }
            if matches!(self.state, Chunk::Size | Chunk::Ext | Chunk::Trailer) {
                self.line += usize::from(!matches!(self.state, Chunk::Trailer));
                if self.line > MAX_CHUNK_LINE {
                    return Err(format!("chunk line longer than {MAX_CHUNK_LINE} bytes"));
                }
            }
            i += 1;
        }
        Ok(i)
    }

    fn end_size(&mut self) -> Result<(), String> {
        if self.digits == 0 {
            return Err("empty chunk size".to_string());
        }
        self.line = 0;
        self.state = if self.left == 0 {
            Chunk::Trailer
        } else {
            Chunk::Data
        };
        Ok(())
    }

    fn next_chunk(&mut self) {
        (self.state, self.left, self.digits, self.line) = (Chunk::Size, 0, 0, 0);
    }
}
