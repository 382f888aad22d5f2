//! `raw.sse.zst`: the response bytes exactly as each socket read returned them, framed
//! by request id and arrival time, in one zstd stream. It lets a future parser re-derive
//! every chunk row. Layout of the decompressed stream:
//! `b"TTRAWSSE"`, u32 LE schema version, then frames of
//! `i64 LE request_id, i64 LE arrival_ns, u32 LE length, <length bytes>`.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use crate::SCHEMA_VERSION;
use crate::digest::HashingWriter;
use crate::error::{Error, Result};
use crate::manifest::FileStat;

/// First bytes of the decompressed stream.
pub const RAW_MAGIC: &[u8; 8] = b"TTRAWSSE";
/// Longest frame a reader accepts (a guard against garbage lengths, not a writer limit:
/// the writer splits larger reads).
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;
const HEADER_BYTES: u64 = 12;
const FRAME_HEADER_BYTES: usize = 20;

/// One socket read of one request's response body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawFrame {
    pub request_id: i64,
    pub arrival_ns: i64,
    pub bytes: Vec<u8>,
}

/// Bytes of frames gathered before they go to the compressor: a call into zstd per
/// frame header and per read cost more than the compression itself (two calls per token
/// event; measured in BENCHMARKS.md, issue 26).
const INPUT_BUFFER: usize = 64 * 1024;

/// Appends frames to a zstd stream (bounded memory: zstd's window plus two buffers).
pub struct RawWriter {
    path: PathBuf,
    enc: BufWriter<zstd::stream::write::Encoder<'static, BufWriter<HashingWriter<File>>>>,
    frames: u64,
}

impl std::fmt::Debug for RawWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawWriter")
            .field("path", &self.path)
            .field("frames", &self.frames)
            .finish()
    }
}

impl RawWriter {
    /// Creates (truncates) `path` and writes the header.
    pub fn create(path: &Path) -> Result<Self> {
        let file = File::create(path).map_err(|e| Error::io(path, e))?;
        let mut enc =
            zstd::stream::write::Encoder::new(BufWriter::new(HashingWriter::new(file)), 3)
                .map_err(|e| Error::io(path, e))?;
        enc.write_all(RAW_MAGIC)
            .and_then(|()| enc.write_all(&SCHEMA_VERSION.to_le_bytes()))
            .map_err(|e| Error::io(path, e))?;
        let enc = BufWriter::with_capacity(INPUT_BUFFER, enc);
        Ok(RawWriter {
            path: path.to_path_buf(),
            enc,
            frames: 0,
        })
    }

    /// Appends the bytes of one read; reads longer than [`MAX_FRAME_BYTES`] are split.
    pub fn write(&mut self, request_id: i64, arrival_ns: i64, bytes: &[u8]) -> Result<()> {
        for part in bytes.chunks(MAX_FRAME_BYTES).filter(|p| !p.is_empty()) {
            let len = u32::try_from(part.len()).unwrap_or(u32::MAX);
            let mut header = [0u8; FRAME_HEADER_BYTES];
            header[..8].copy_from_slice(&request_id.to_le_bytes());
            header[8..16].copy_from_slice(&arrival_ns.to_le_bytes());
            header[16..].copy_from_slice(&len.to_le_bytes());
            self.enc
                .write_all(&header)
                .and_then(|()| self.enc.write_all(part))
                .map_err(|e| Error::io(&self.path, e))?;
            self.frames += 1;
        }
        Ok(())
    }

    /// Ends the zstd stream and fsyncs the file (its digest taken as it was written).
    pub fn finish(self) -> Result<FileStat> {
        let path = self.path;
        let enc = self
            .enc
            .into_inner()
            .map_err(|e| Error::io(&path, e.into_error()))?;
        let buf = enc.finish().map_err(|e| Error::io(&path, e))?;
        let (file, sha256, bytes) = buf
            .into_inner()
            .map_err(|e| Error::io(&path, e.into_error()))?
            .finish();
        file.sync_all().map_err(|e| Error::io(&path, e))?;
        Ok(FileStat {
            rows: self.frames,
            bytes,
            sha256: Some(sha256),
        })
    }
}

/// Reads frames back, in the order they were written.
pub struct RawReader {
    path: PathBuf,
    dec: zstd::stream::read::Decoder<'static, BufReader<File>>,
    offset: u64,
    done: bool,
}

impl std::fmt::Debug for RawReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawReader")
            .field("path", &self.path)
            .field("offset", &self.offset)
            .finish()
    }
}

impl RawReader {
    /// Opens `path` and checks the header and schema version.
    pub fn open(path: &Path) -> Result<Self> {
        let file = crate::fsutil::open(path, "raw capture")?;
        let dec = zstd::stream::read::Decoder::new(file).map_err(|e| Error::io(path, e))?;
        let mut r = RawReader {
            path: path.to_path_buf(),
            dec,
            offset: 0,
            done: false,
        };
        let mut header = [0u8; HEADER_BYTES as usize];
        r.read_exact_or(&mut header, "header")?;
        if &header[..8] != RAW_MAGIC {
            return Err(r.format_error(0, "not a tokentrace raw capture (bad magic)"));
        }
        let mut v = [0u8; 4];
        v.copy_from_slice(&header[8..]);
        let version = u32::from_le_bytes(v);
        if version > SCHEMA_VERSION {
            return Err(Error::NewerVersion {
                path: r.path.clone(),
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        if version != SCHEMA_VERSION {
            return Err(Error::BadVersion {
                path: r.path.clone(),
                found: version.to_string(),
                supported: SCHEMA_VERSION,
            });
        }
        r.offset = HEADER_BYTES;
        Ok(r)
    }

    fn format_error(&self, offset: u64, message: &str) -> Error {
        Error::RawFormat {
            path: self.path.clone(),
            offset,
            message: message.to_string(),
        }
    }

    fn read_exact_or(&mut self, buf: &mut [u8], what: &str) -> Result<()> {
        let offset = self.offset;
        self.dec.read_exact(buf).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                self.format_error(offset, &format!("truncated {what}"))
            } else {
                self.format_error(offset, &format!("cannot decompress {what}: {e}"))
            }
        })
    }

    /// The next frame, `None` at a clean end of stream.
    pub fn next_frame(&mut self) -> Result<Option<RawFrame>> {
        if self.done {
            return Ok(None);
        }
        let mut header = [0u8; FRAME_HEADER_BYTES];
        // A clean end is an end exactly at a frame boundary.
        let mut got = 0;
        while got < FRAME_HEADER_BYTES {
            let n = self.dec.read(&mut header[got..]).map_err(|e| {
                self.format_error(self.offset, &format!("cannot decompress frame header: {e}"))
            })?;
            if n == 0 {
                if got == 0 {
                    self.done = true;
                    return Ok(None);
                }
                return Err(self.format_error(self.offset, "truncated frame header"));
            }
            got += n;
        }
        let mut b8 = [0u8; 8];
        b8.copy_from_slice(&header[..8]);
        let request_id = i64::from_le_bytes(b8);
        b8.copy_from_slice(&header[8..16]);
        let arrival_ns = i64::from_le_bytes(b8);
        let mut b4 = [0u8; 4];
        b4.copy_from_slice(&header[16..]);
        let len = u32::from_le_bytes(b4) as usize;
        if len > MAX_FRAME_BYTES {
            return Err(self.format_error(
                self.offset,
                &format!("frame length {len} exceeds the limit"),
            ));
        }
        self.offset += FRAME_HEADER_BYTES as u64;
        let mut bytes = vec![0u8; len];
        self.read_exact_or(&mut bytes, "frame body")?;
        self.offset += len as u64;
        Ok(Some(RawFrame {
            request_id,
            arrival_ns,
            bytes,
        }))
    }
}

impl Iterator for RawReader {
    type Item = Result<RawFrame>;
    fn next(&mut self) -> Option<Self::Item> {
        match self.next_frame() {
            Ok(Some(f)) => Some(Ok(f)),
            Ok(None) => None,
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}
