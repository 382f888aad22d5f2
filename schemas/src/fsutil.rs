//! Durable file operations: write under a temporary name, fsync, rename, then fsync the
//! folder so the rename itself survives a crash.

use std::fs::File;
use std::io::Write;
use std::path::Path;

use crate::error::{Error, Result};

/// Writes `bytes` to `path` atomically (readers see the old file or the new one, whole).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = tmp_name(path);
    let written = File::create(&tmp).and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_all()
    });
    if let Err(e) = written {
        // A full disk or a read-only folder: the old file stays as it was, and no
        // half-written temporary is left beside it.
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::io(&tmp, e));
    }
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))?;
    sync_parent(path)
}

/// `path` with `.tmp` appended to its file name.
pub fn tmp_name(path: &Path) -> std::path::PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".tmp");
    path.with_file_name(name)
}

/// fsyncs a folder so that entries created or renamed in it are durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir, e))
}

/// fsyncs the folder holding `path`.
pub fn sync_parent(path: &Path) -> Result<()> {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => sync_dir(p),
        _ => sync_dir(Path::new(".")),
    }
}

/// Opens `path` for reading; a missing file is [`Error::Missing`] naming `what` it should be.
pub fn open(path: &Path, what: &'static str) -> Result<File> {
    File::open(path).map_err(|e| missing_or_io(path, what, e))
}

/// Reads all of `path`; a missing file is [`Error::Missing`].
pub fn read(path: &Path, what: &'static str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| missing_or_io(path, what, e))
}

fn missing_or_io(path: &Path, what: &'static str, e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::NotFound {
        Error::Missing {
            path: path.to_path_buf(),
            what,
        }
    } else {
        Error::io(path, e)
    }
}
