//! Run folders in object storage (the `object_store` crate: `s3://bucket/prefix`, or
//! `file:///path` for a local "bucket"): each committed cell uploaded with its commit
//! mark last, the manifest after it, and whole runs downloaded back, with bounded memory.
//! S3 credentials and endpoint come from the `AWS_*` environment only, never from a file.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::StreamExt;
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use tokentrace_schemas::layout::{CELL_FILE, CELLS_DIR, CellKey, MANIFEST_FILE, STAGING_DIR};
use tokio::io::AsyncWriteExt;

/// Bytes read from a file per upload part (object stores take parts of 5 MiB or more).
const PART_BYTES: usize = 8 * 1024 * 1024;

/// The `object_store` setting that makes every S3 upload carry a checksum.
const CHECKSUM_SETTING: &str = "aws_checksum_algorithm";

/// Why an object-store operation failed: what, where, and the store's own words.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{url}: {reason}")]
    Url { url: String, reason: String },
    #[error("{what} {key}: {source}")]
    Store {
        what: &'static str,
        key: String,
        #[source]
        source: object_store::Error,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{url}: no run there (no {MANIFEST_FILE})")]
    NoRun { url: String },
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Whether a run argument names an object-store URL rather than a folder.
pub fn is_url(run: &str) -> bool {
    run.starts_with("s3://") || run.starts_with("file://")
}

/// One run's place in an object store.
#[derive(Clone)]
pub struct RunStore {
    store: Arc<dyn ObjectStore>,
    root: Key,
    url: String,
}

impl std::fmt::Debug for RunStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RunStore({})", self.url)
    }
}

impl RunStore {
    /// The run at `url`: `s3://bucket/prefix` (credentials, region and endpoint from
    /// `AWS_*` variables: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
    /// `AWS_ENDPOINT`, `AWS_ALLOW_HTTP`, …) or `file:///path`.
    pub fn open(url: &str) -> Result<Self, StoreError> {
        // Only the AWS settings the environment holds; never logged, never written.
        Self::open_with(url, std::env::vars().filter(|(k, _)| k.starts_with("AWS_")))
    }

    /// The run at `url` with the store's settings given (`AWS_…` names, any case), not
    /// read from the environment.
    pub fn open_with(
        url: &str,
        settings: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, StoreError> {
        let bad = |reason: String| StoreError::Url {
            url: url.to_string(),
            reason,
        };
        if !is_url(url) {
            return Err(bad(
                "not an object-store URL (s3://bucket/prefix or file:///path)".to_string(),
            ));
        }
        let parsed = reqwest::Url::parse(url).map_err(|e| bad(e.to_string()))?;
        let mut settings: Vec<(String, String)> = settings
            .into_iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v))
            .collect();
        // Every upload to S3 carries its SHA-256 (x-amz-checksum-sha256), which the store
        // checks against the bytes it received and keeps with the object: the digest a
        // cell's commit mark records (FORMAT.md, "Checksums").
        if parsed.scheme() == "s3" && !settings.iter().any(|(k, _)| k == CHECKSUM_SETTING) {
            settings.push((CHECKSUM_SETTING.to_string(), "sha256".to_string()));
        }
        let (store, root) =
            object_store::parse_url_opts(&parsed, settings).map_err(|e| bad(e.to_string()))?;
        Ok(RunStore {
            store: Arc::from(store),
            root,
            url: url.trim_end_matches('/').to_string(),
        })
    }

    /// The URL it was opened with.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn key(&self, rel: &str) -> Key {
        rel.split('/')
            .filter(|p| !p.is_empty())
            .fold(self.root.clone(), |k, part| k.join(part))
    }

    /// Uploads one local file to `rel` (relative to the run), a part at a time.
    pub async fn put_file(&self, local: &Path, rel: &str) -> Result<u64, StoreError> {
        let key = self.key(rel);
        let store_err = |what| {
            let key = key.to_string();
            move |source| StoreError::Store { what, key, source }
        };
        let mut file = tokio::fs::File::open(local).await.map_err(io(local))?;
        let size = file.metadata().await.map_err(io(local))?.len();
        let mut buf = vec![0u8; PART_BYTES];
        if size <= PART_BYTES as u64 {
            let n = read_full(&mut file, &mut buf, local).await?;
            buf.truncate(n);
            self.store
                .put(&key, PutPayload::from(buf))
                .await
                .map_err(store_err("upload"))?;
            return Ok(n as u64);
        }
        let upload = self
            .store
            .put_multipart(&key)
            .await
            .map_err(store_err("upload"))?;
        let mut w = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
        let mut sent = 0u64;
        loop {
            // At most two parts in flight: memory stays a few parts whatever the file.
            w.wait_for_capacity(2).await.map_err(store_err("upload"))?;
            let n = read_full(&mut file, &mut buf, local).await?;
            if n == 0 {
                break;
            }
            w.write(&buf[..n]);
            sent += n as u64;
        }
        w.finish().await.map_err(store_err("upload"))?;
        Ok(sent)
    }

    /// Uploads a committed cell: every file, then its commit mark, so a cell whose
    /// `cell.json` is in the store is whole there. Returns the bytes sent.
    pub async fn upload_cell(&self, run: &Path, key: CellKey) -> Result<u64, StoreError> {
        let dir = key.dir(run);
        let rel_dir = format!("{CELLS_DIR}/{}", partition(key));
        let mut names: Vec<String> = Vec::new();
        let mut entries = tokio::fs::read_dir(&dir).await.map_err(io(&dir))?;
        while let Some(e) = entries.next_entry().await.map_err(io(&dir))? {
            if let Some(name) = e.file_name().to_str()
                && name != CELL_FILE
            {
                names.push(name.to_string());
            }
        }
        names.sort();
        names.push(CELL_FILE.to_string());
        let mut bytes = 0;
        for name in names {
            bytes += self
                .put_file(&dir.join(&name), &format!("{rel_dir}/{name}"))
                .await?;
        }
        Ok(bytes)
    }

    /// Uploads the run's manifest.
    pub async fn upload_manifest(&self, run: &Path) -> Result<(), StoreError> {
        self.put_file(&run.join(MANIFEST_FILE), MANIFEST_FILE)
            .await
            .map(|_| ())
    }

    /// Every object of the run, one line each (its key, size, ETag or modification
    /// time), sorted: what changes when any of its objects does, without downloading one
    /// (`tokentrace site` re-renders a stored run only when this changes).
    pub async fn listing(&self) -> Result<Vec<String>, StoreError> {
        let mut listing = self.store.list(Some(&self.root));
        let mut out = Vec::new();
        while let Some(meta) = listing.next().await {
            let meta = meta.map_err(|source| StoreError::Store {
                what: "list",
                key: self.root.to_string(),
                source,
            })?;
            out.push(format!(
                "{} {} {}",
                meta.location,
                meta.size,
                meta.e_tag
                    .clone()
                    .unwrap_or_else(|| meta.last_modified.to_rfc3339())
            ));
        }
        out.sort();
        Ok(out)
    }

    /// Every object under `prefix`, as its path's parts.
    async fn list_parts(&self, prefix: &Key) -> Result<Vec<Vec<String>>, StoreError> {
        let mut listing = self.store.list(Some(prefix));
        let mut out = Vec::new();
        while let Some(meta) = listing.next().await {
            let meta = meta.map_err(|source| StoreError::Store {
                what: "list",
                key: prefix.to_string(),
                source,
            })?;
            out.push(
                meta.location
                    .parts()
                    .map(|p| p.as_ref().to_string())
                    .collect(),
            );
        }
        Ok(out)
    }

    /// The cells whose commit mark is in the store.
    pub async fn complete_cells(&self) -> Result<BTreeSet<CellKey>, StoreError> {
        let mut out = BTreeSet::new();
        for parts in self.list_parts(&self.key(CELLS_DIR)).await? {
            if parts.last().map(String::as_str) != Some(CELL_FILE) || parts.len() < 4 {
                continue;
            }
            let rel: PathBuf = parts[parts.len() - 4..parts.len() - 1].iter().collect();
            if let Ok(k) = CellKey::from_path(&rel) {
                out.insert(k);
            }
        }
        Ok(out)
    }

    /// The URLs of every run under this one's prefix (each prefix holding a manifest),
    /// sorted; this prefix itself when it holds one.
    pub async fn find_runs(&self) -> Result<Vec<String>, StoreError> {
        let root_parts = self.root.parts().count();
        let mut out = Vec::new();
        for parts in self.list_parts(&self.root).await? {
            // A run's manifest, not a file of the same name inside a run's cells.
            if parts.last().map(String::as_str) != Some(MANIFEST_FILE)
                || parts.iter().any(|p| p == CELLS_DIR)
            {
                continue;
            }
            let rel = parts[root_parts.min(parts.len())..parts.len() - 1].join("/");
            out.push(if rel.is_empty() {
                self.url.clone()
            } else {
                format!("{}/{rel}", self.url)
            });
        }
        out.sort();
        Ok(out)
    }

    /// Whether the store holds a run (its manifest).
    pub async fn has_run(&self) -> Result<bool, StoreError> {
        match self.store.head(&self.key(MANIFEST_FILE)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(source) => Err(StoreError::Store {
                what: "look up",
                key: self.key(MANIFEST_FILE).to_string(),
                source,
            }),
        }
    }

    /// Downloads one object to a local file, streamed.
    async fn get_file(&self, rel: &str, local: &Path) -> Result<(), StoreError> {
        let key = self.key(rel);
        let got = self
            .store
            .get(&key)
            .await
            .map_err(|source| StoreError::Store {
                what: "download",
                key: key.to_string(),
                source,
            })?;
        let mut stream = got.into_stream();
        let mut file = tokio::fs::File::create(local).await.map_err(io(local))?;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|source| StoreError::Store {
                what: "download",
                key: key.to_string(),
                source,
            })?;
            file.write_all(&chunk).await.map_err(io(local))?;
        }
        file.sync_all().await.map_err(io(local))?;
        Ok(())
    }

    /// Downloads the run into the empty or missing folder `dest`: every cell whose
    /// commit mark is in the store (each into the staging folder first, then renamed
    /// into place, as the recorder commits), then the manifest. Objects of a cell
    /// without a commit mark are left behind. Returns the cells downloaded.
    pub async fn download_run(&self, dest: &Path) -> Result<usize, StoreError> {
        if !self.has_run().await? {
            return Err(StoreError::NoRun {
                url: self.url.clone(),
            });
        }
        self.pull(dest).await
    }

    /// Downloads the run into `dest` as [`RunStore::download_run`] does, but trusts no
    /// cell it has not verified: each is checked in its staging folder (every file
    /// against the size and SHA-256 its commit mark records, every row decoded) before
    /// it is put in place; one that fails stays out, with the reason, and its commit
    /// mark is deleted from the store, so a resumed run records it again and uploads it.
    pub async fn download_run_verified(&self, dest: &Path) -> Result<Pulled, StoreError> {
        if !self.has_run().await? {
            return Err(StoreError::NoRun {
                url: self.url.clone(),
            });
        }
        self.pull_checked(dest, true).await
    }

    /// Brings the local copy `dest` up to date: the cells committed in the store since
    /// (those `dest` lacks a commit mark of), then the manifest (`tokentrace watch`
    /// follows a run this way). Returns the cells downloaded.
    pub async fn pull(&self, dest: &Path) -> Result<usize, StoreError> {
        self.pull_checked(dest, false).await.map(|p| p.cells)
    }

    async fn pull_checked(&self, dest: &Path, verify: bool) -> Result<Pulled, StoreError> {
        tokio::fs::create_dir_all(dest).await.map_err(io(dest))?;
        let cells = self.complete_cells().await?;
        let mut pulled = Pulled::default();
        for key in &cells {
            if key.dir(dest).join(CELL_FILE).exists() {
                continue;
            }
            let rel_dir = format!("{CELLS_DIR}/{}", partition(*key));
            let staging = dest.join(STAGING_DIR).join(key.partition_path());
            let _ = tokio::fs::remove_dir_all(&staging).await;
            tokio::fs::create_dir_all(&staging)
                .await
                .map_err(io(&staging))?;
            let mut names: Vec<String> = self
                .list_parts(&self.key(&rel_dir))
                .await?
                .into_iter()
                .filter_map(|mut parts| parts.pop())
                .collect();
            names.sort();
            for name in &names {
                self.get_file(&format!("{rel_dir}/{name}"), &staging.join(name))
                    .await?;
            }
            if verify && let Err(reason) = verified(&staging).await {
                let _ = tokio::fs::remove_dir_all(&staging).await;
                // Its commit mark leaves the store too: no reader trusts the cell there,
                // and the recording that replaces it is uploaded whole (`sync` sends
                // the cells the store lacks).
                let mark = self.key(&format!("{rel_dir}/{CELL_FILE}"));
                self.store
                    .delete(&mark)
                    .await
                    .map_err(|source| StoreError::Store {
                        what: "un-commit",
                        key: mark.to_string(),
                        source,
                    })?;
                pulled.refused.push((*key, reason));
                continue;
            }
            let target = key.dir(dest);
            if let Some(parent) = target.parent() {
                tokio::fs::create_dir_all(parent)
                    .await
                    .map_err(io(parent))?;
            }
            let _ = tokio::fs::remove_dir_all(&target).await;
            tokio::fs::rename(&staging, &target)
                .await
                .map_err(io(&target))?;
            pulled.cells += 1;
        }
        // Written to a side file and renamed, so that a reader never sees half of it.
        let part = dest.join(format!("{MANIFEST_FILE}.part"));
        self.get_file(MANIFEST_FILE, &part).await?;
        tokio::fs::rename(&part, dest.join(MANIFEST_FILE))
            .await
            .map_err(io(dest))?;
        Ok(pulled)
    }

    /// Uploads every complete local cell the store lacks (after an interrupted
    /// upload), then the manifest. Returns the cells uploaded.
    pub async fn sync(&self, run: &Path) -> Result<usize, StoreError> {
        let there = self.complete_cells().await?;
        let local = tokentrace_schemas::layout::list_cells(run).map_err(|e| StoreError::Io {
            path: run.to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let mut sent = 0;
        for (key, dir) in local {
            if !there.contains(&key) && dir.join(CELL_FILE).exists() {
                self.upload_cell(run, key).await?;
                sent += 1;
            }
        }
        self.upload_manifest(run).await?;
        Ok(sent)
    }
}

/// What a pull brought down.
#[derive(Debug, Default)]
pub struct Pulled {
    /// Cells downloaded and put in place.
    pub cells: usize,
    /// Cells downloaded but not trusted, each with the reason (the file and what
    /// differs): left out of the folder.
    pub refused: Vec<(CellKey, String)>,
}

/// Verifies the downloaded cell in `dir` completely (off the runtime's threads); the
/// error's text when it fails.
async fn verified(dir: &Path) -> Result<(), String> {
    let dir = dir.to_path_buf();
    match tokio::task::spawn_blocking(move || tokentrace_schemas::verify::verify_cell(&dir)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(format!("verification did not finish: {e}")),
    }
}

/// A cell's partition path with `/` separators, whatever the platform.
fn partition(key: CellKey) -> String {
    key.partition_path()
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// Reads until `buf` is full or the file ends; the bytes read.
async fn read_full(
    file: &mut tokio::fs::File,
    buf: &mut [u8],
    path: &Path,
) -> Result<usize, StoreError> {
    use tokio::io::AsyncReadExt;
    let mut n = 0;
    while n < buf.len() {
        let got = file.read(&mut buf[n..]).await.map_err(io(path))?;
        if got == 0 {
            break;
        }
        n += got;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokentrace_schemas::layout::Phase;

    #[test]
    fn urls_are_told_from_folders() {
        assert!(is_url("s3://bucket/runs/a"));
        assert!(is_url("file:///tmp/bucket/a"));
        assert!(!is_url("runs/a"));
        assert!(RunStore::open("runs/a").is_err());
        let err = RunStore::open("gs://b/a")
            .expect_err("not enabled")
            .to_string();
        assert!(err.starts_with("gs://b/a: "), "{err}");
    }

    /// A cell round-trips through a `file://` store: uploaded with its commit mark, seen
    /// as complete, downloaded into place byte for byte; a cell without a commit mark in
    /// the store is not downloaded.
    #[tokio::test]
    async fn a_run_round_trips_through_a_file_store() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let run = tmp.path().join("run");
        let key = CellKey::new(Phase::Decode, 512, 3);
        let w = tokentrace_schemas::writer::CellWriter::create(&run, key).expect("cell");
        w.commit().expect("commit");
        std::fs::write(run.join(MANIFEST_FILE), b"{\"m\":1}").expect("manifest");
        // A big file goes up in parts.
        let big: Vec<u8> = (0..PART_BYTES * 2 + 123).map(|i| (i % 251) as u8).collect();
        std::fs::write(key.dir(&run).join("extra.bin"), &big).expect("big");
        let url = format!("file://{}/bucket/run-a", tmp.path().display());
        std::fs::create_dir_all(tmp.path().join("bucket/run-a")).expect("bucket");
        let store = RunStore::open(&url).expect("open");
        assert_eq!(store.sync(&run).await.expect("sync"), 1);
        assert_eq!(
            store.sync(&run).await.expect("again"),
            0,
            "nothing left to send"
        );
        assert_eq!(
            store.complete_cells().await.expect("list"),
            BTreeSet::from([key])
        );
        // A half-uploaded cell: files without its commit mark.
        let half = CellKey::new(Phase::Decode, 512, 9);
        store
            .put_file(
                &run.join(MANIFEST_FILE),
                &format!("{CELLS_DIR}/{}/requests.parquet", partition(half)),
            )
            .await
            .expect("put");
        let dest = tmp.path().join("copy");
        assert_eq!(store.download_run(&dest).await.expect("download"), 1);
        assert_eq!(
            std::fs::read(key.dir(&dest).join("extra.bin")).expect("copied"),
            big
        );
        assert!(!half.dir(&dest).exists());
        assert!(
            tokentrace_schemas::verify::verify_cell(&key.dir(&dest)).is_ok(),
            "the downloaded cell verifies"
        );
        let none =
            RunStore::open(&format!("file://{}/bucket/none", tmp.path().display())).expect("open");
        std::fs::create_dir_all(tmp.path().join("bucket/none")).expect("dir");
        assert!(matches!(
            none.download_run(&tmp.path().join("x")).await,
            Err(StoreError::NoRun { .. })
        ));
    }
}
