//! Runs named by an object-store URL (`s3://bucket/prefix`, `file:///path`) for the
//! analyzer's commands: the run is downloaded into a temporary folder (complete cells
//! only, streamed), analyzed there like any folder, and the folder removed afterwards.

use std::path::{Path, PathBuf};

use anyhow::Context;
use tokentrace_recorder::store::bucket::{RunStore, is_url};

/// A run on the local disk: the folder given, or a temporary copy of a stored run.
#[derive(Debug)]
pub struct LocalRun {
    dir: PathBuf,
    /// How the user named it (a folder or a URL), for messages.
    pub shown: String,
    /// The store it came from, for commands that write back (`rescore`).
    pub store: Option<RunStore>,
    _copy: Option<tempfile::TempDir>,
}

impl LocalRun {
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// `run` as a local folder: a URL is downloaded first.
pub fn local(run: &Path) -> anyhow::Result<LocalRun> {
    let shown = run.display().to_string();
    if !is_url(&shown) {
        return Ok(LocalRun {
            dir: run.to_path_buf(),
            shown,
            store: None,
            _copy: None,
        });
    }
    let store = RunStore::open(&shown)?;
    let copy = tempfile::Builder::new()
        .prefix("tokentrace-run-")
        .tempdir()
        .context("cannot create a temporary folder for the run")?;
    let dir = copy.path().join("run");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(store.download_run(&dir))
        .with_context(|| format!("cannot download {shown}"))?;
    Ok(LocalRun {
        dir,
        shown,
        store: Some(store),
        _copy: Some(copy),
    })
}

/// Uploads `file` (inside the local copy of a stored run) back to the store, at the
/// same place relative to the run.
pub fn upload_back(run: &LocalRun, file: &Path) -> anyhow::Result<String> {
    let Some(store) = &run.store else {
        return Ok(file.display().to_string());
    };
    let rel = file
        .strip_prefix(&run.dir)
        .context("the file is not inside the run")?
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(store.put_file(file, &rel))
        .with_context(|| format!("cannot upload {rel} to {}", store.url()))?;
    Ok(format!("{}/{rel}", store.url()))
}
