//! SHA-256 checksums of a run folder's files: each committed file's in `cell.json`, each
//! `cell.json`'s in the manifest, and one digest over those for the whole run, so a copy
//! can be proven equal to what was written (FORMAT.md, "Checksums").
//!
//! SHA-256 and not BLAKE3: S3 carries `x-amz-checksum-sha256` end to end, so the digest a
//! cell records is the one S3 computes for a file uploaded in one part.

use std::fmt;
use std::io::{Read, Write};
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::Digest;

use crate::error::{Error, Result};

/// Bytes read at a time while hashing a file.
const READ_BUF: usize = 1 << 20;

/// A SHA-256 digest, written as 64 lower-case hex digits.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sha256(pub [u8; 32]);

impl Sha256 {
    /// The digest of `bytes`.
    pub fn of_bytes(bytes: &[u8]) -> Self {
        Sha256::from_hasher(sha2::Sha256::new_with_prefix(bytes))
    }

    /// The digest of the file at `path`, read a megabyte at a time (bounded memory).
    pub fn of_file(path: &Path) -> Result<Self> {
        let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let mut hasher = sha2::Sha256::new();
        let mut buf = vec![0u8; READ_BUF];
        loop {
            let n = match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io(path, e)),
            };
            hasher.update(&buf[..n]);
        }
        Ok(Sha256::from_hasher(hasher))
    }

    fn from_hasher(hasher: sha2::Sha256) -> Self {
        let mut out = [0u8; 32];
        out.copy_from_slice(&hasher.finalize());
        Sha256(out)
    }
}

impl fmt::Display for Sha256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Sha256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sha256({self})")
    }
}

impl FromStr for Sha256 {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let bytes = s.as_bytes();
        if bytes.len() != 64 {
            return Err(format!(
                "a SHA-256 is 64 hex digits, `{s}` has {}",
                bytes.len()
            ));
        }
        let digit = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks(2).enumerate() {
            match (digit(pair[0]), digit(pair[1])) {
                (Some(hi), Some(lo)) => out[i] = hi << 4 | lo,
                _ => return Err(format!("`{s}` is not lower-case hex")),
            }
        }
        Ok(Sha256(out))
    }
}

impl Serialize for Sha256 {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Sha256 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A writer that hashes every byte it passes on: the digest of a file written through it
/// comes with its last write, where reading the file back cost a 1 MiB buffer and a
/// pause of the thread that wrote it (about 50 ms for a 38 MB `chunks` part).
#[derive(Debug)]
pub struct HashingWriter<W> {
    inner: W,
    hasher: sha2::Sha256,
    bytes: u64,
}

impl<W: Write> HashingWriter<W> {
    pub fn new(inner: W) -> Self {
        HashingWriter {
            inner,
            hasher: sha2::Sha256::new(),
            bytes: 0,
        }
    }

    /// The writer, and the digest and count of the bytes written through it.
    pub fn finish(self) -> (W, Sha256, u64) {
        (self.inner, Sha256::from_hasher(self.hasher), self.bytes)
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        // Only what the inner writer took: the caller writes the rest again.
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The run's digest: SHA-256 over one line per committed cell, `<cell path> <SHA-256 of
/// its cell.json>\n`, in the order given (the manifest's, which is the run's plan).
pub fn cells_digest<'a>(cells: impl IntoIterator<Item = (String, &'a Sha256)>) -> Sha256 {
    let mut hasher = sha2::Sha256::new();
    for (path, sha) in cells {
        hasher.update(format!("{path} {sha}\n").as_bytes());
    }
    Sha256::from_hasher(hasher)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_known_digest_in_hex_round_trips() {
        // FIPS 180-2's "abc" example.
        let abc = Sha256::of_bytes(b"abc");
        assert_eq!(
            abc.to_string(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(abc.to_string().parse::<Sha256>(), Ok(abc));
    }

    #[test]
    fn a_file_hashes_as_its_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        let bytes: Vec<u8> = (0..3 * READ_BUF + 17).map(|i| (i * 7) as u8).collect();
        std::fs::write(&path, &bytes).expect("write");
        assert_eq!(
            Sha256::of_file(&path).expect("hash"),
            Sha256::of_bytes(&bytes)
        );
        assert!(Sha256::of_file(&dir.path().join("absent")).is_err());
    }

    /// Takes at most 5 bytes a call, as a pipe or a full disk may.
    struct Short(Vec<u8>);

    impl Write for Short {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let n = buf.len().min(5);
            self.0.extend_from_slice(&buf[..n]);
            Ok(n)
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_hashing_writer_hashes_what_its_writer_took() {
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 13) as u8).collect();
        let mut w = HashingWriter::new(Short(Vec::new()));
        for piece in bytes.chunks(333) {
            w.write_all(piece).expect("write");
        }
        w.flush().expect("flush");
        let (inner, sha, n) = w.finish();
        assert_eq!(inner.0, bytes);
        assert_eq!(sha, Sha256::of_bytes(&bytes));
        assert_eq!(n, bytes.len() as u64);
    }

    #[test]
    fn bad_text_is_refused_with_what_was_expected() {
        assert!(
            "abc"
                .parse::<Sha256>()
                .expect_err("refused")
                .contains("64 hex digits")
        );
        let upper = "BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD";
        assert!(
            upper
                .parse::<Sha256>()
                .expect_err("refused")
                .contains("lower-case")
        );
        let json = serde_json::from_str::<Sha256>("\"zz\"");
        assert!(json.is_err());
    }
}
