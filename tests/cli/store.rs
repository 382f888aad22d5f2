//! Runs streamed to a real S3-compatible server (PyPI's `moto`, started here; installed
//! by fixtures/s3/install.sh, which CI runs): record with `--upload`, kill -9 the
//! recorder mid-run, damage one cell's file in the bucket, resume from the bucket on a
//! fresh folder (the damaged cell is not trusted: un-committed there and recorded
//! again), then `check` and
//! `report` the bucket's run by its URL: the report is byte-identical to the local
//! copy's; `site` publishes it by its URL, and leaves it alone while unchanged; and the
//! credentials reach no file and no output. Needs moto: `#[ignore]`d,
//! reported by `cargo test` as ignored with that reason, and run by `cargo test --
//! --include-ignored` (CI), where a missing install fails it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use tokentrace_recorder::store::bucket::RunStore;
use tokentrace_sim::{Profile, SimServer};

const KEY_ID: &str = "tokentrace-test-key";
const SECRET: &str = "tokentrace-test-secret-9f8e7d";

/// The moto server, stopped on drop.
struct Moto {
    child: Child,
    url: String,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

async fn moto(python: &str) -> Moto {
    let port = free_port();
    let child = Command::new(python)
        .args([
            "-m",
            "moto.server",
            "-H",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start moto");
    let m = Moto {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while client.get(&m.url).send().await.is_err() {
        assert!(Instant::now() < deadline, "moto did not start");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    m
}

fn aws(moto: &Moto) -> Vec<(String, String)> {
    [
        ("AWS_ACCESS_KEY_ID", KEY_ID),
        ("AWS_SECRET_ACCESS_KEY", SECRET),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ENDPOINT", moto.url.as_str()),
        ("AWS_ALLOW_HTTP", "true"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn tokentrace(args: &[&str], env: &[(String, String)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tokentrace"));
    c.args(args).envs(env.iter().map(|(k, v)| (k, v)));
    c
}

fn record_args<'a>(target: &'a str, out: &'a str, url: &'a str) -> Vec<&'a str> {
    vec![
        "record",
        "--target",
        target,
        "--out",
        out,
        "--upload",
        url,
        "--contexts",
        "512",
        "--concurrency",
        "1,2,3,4,5",
        "--duration",
        "1s",
        "--max-tokens",
        "200",
        "--metrics-interval",
        "200ms",
        "--gpu-telemetry",
        "off",
    ]
}

fn complete_local(run: &Path) -> usize {
    tokentrace_schemas::layout::list_cells(run).map_or(0, |c| {
        c.iter()
            .filter(|(_, d)| d.join("cell.json").exists())
            .count()
    })
}

fn ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("utf-8")
}

/// Every file under `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs an S3 server: eval \"$(bash fixtures/s3/install.sh)\", then --include-ignored"]
async fn a_run_survives_its_box_through_the_bucket() {
    let Ok(python) = std::env::var("TOKENTRACE_MOTO_PYTHON") else {
        panic!(
            "moto is not installed: eval \"$(bash fixtures/s3/install.sh)\" sets TOKENTRACE_MOTO_PYTHON"
        );
    };
    let moto = moto(&python).await;
    let env = aws(&moto);
    let created = reqwest::Client::new()
        .put(format!("{}/runs", moto.url))
        .send()
        .await
        .expect("create bucket");
    assert!(created.status().is_success(), "{}", created.status());
    let sim = SimServer::start(
        Profile::load("tiny").expect("tiny"),
        "127.0.0.1:0".parse().expect("addr"),
    )
    .await
    .expect("sim");
    let target = sim.url();
    let tmp = tempfile::tempdir().expect("tempdir");
    let (first, second) = (tmp.path().join("box-1"), tmp.path().join("box-2"));
    let url = "s3://runs/h200/nightly-1";
    let store = RunStore::open_with(url, env.clone()).expect("store");

    // Box 1 records with uploads and dies (SIGKILL) once two cells have committed.
    let first_s = first.to_str().expect("utf-8");
    let mut child = tokentrace(&record_args(&target, first_s, url), &env)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("recorder");
    let deadline = Instant::now() + Duration::from_secs(120);
    while complete_local(&first) < 3 {
        assert!(
            child.try_wait().expect("wait").is_none(),
            "the recorder ended before it was killed"
        );
        assert!(Instant::now() < deadline, "no cells committed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().expect("kill -9");
    let died = child.wait_with_output().expect("reaped");
    let log = String::from_utf8_lossy(&died.stderr).to_string();
    let in_bucket = store.complete_cells().await.expect("list");
    assert!(
        !in_bucket.is_empty() && in_bucket.len() <= complete_local(&first),
        "{} cells in the bucket, {} on box 1\n{log}",
        in_bucket.len(),
        complete_local(&first)
    );
    assert!(
        log.contains("uploaded 1 cell to s3://runs/h200/nightly-1"),
        "{log}"
    );

    // One cell's chunks are damaged in the bucket (a byte flipped, as a bad copy
    // would): the resume must not trust it, and records it again.
    let damaged = *in_bucket.iter().next().expect("a cell in the bucket");
    let flipped = tmp.path().join("flipped.parquet");
    let mut bytes = std::fs::read(damaged.dir(&first).join("chunks.parquet")).expect("chunks");
    let at = bytes.len() / 2;
    bytes[at] ^= 0x20;
    std::fs::write(&flipped, &bytes).expect("write");
    store
        .put_file(
            &flipped,
            &format!(
                "cells/{}/chunks.parquet",
                damaged.partition_path().display()
            ),
        )
        .await
        .expect("damage the bucket's copy");

    // A laptop watches the bucket while box 2 starts from nothing but the bucket and
    // finishes the run.
    let watcher = tokentrace(
        &["watch", url, "--every", "200ms", "--display", "plain"],
        &env,
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .expect("watch");
    let second_s = second.to_str().expect("utf-8");
    let mut resume = record_args(&target, second_s, url);
    resume.push("--resume");
    let out = tokentrace(&resume, &env).output().expect("resume");
    let resumed_log = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{}\n{resumed_log}", out.status);
    assert!(
        resumed_log.contains(&format!(
            "resuming {url}: {} complete cells downloaded",
            in_bucket.len() - 1
        )),
        "{resumed_log}"
    );
    assert!(
        resumed_log.contains(&format!(
            "cell {damaged} in the store does not verify, un-committed there and recorded again: "
        )) && resumed_log.contains("chunks.parquet: damaged: SHA-256"),
        "{resumed_log}"
    );
    let manifest = tokentrace_schemas::manifest::Manifest::read(&second).expect("manifest");
    assert!(
        manifest
            .cells
            .iter()
            .all(|c| c.status == tokentrace_schemas::manifest::CellStatus::Complete),
        "{:?}",
        manifest.cells
    );
    assert_eq!(store.complete_cells().await.expect("list").len(), 6);
    // The watcher saw every cell commit, scored, and ended with the run.
    let watched = watcher.wait_with_output().expect("watch ends");
    let watch_log = String::from_utf8_lossy(&watched.stderr).to_string();
    assert!(watched.status.success(), "{watch_log}");
    // Every cell committed, every decode cell with its figures. The prefill cell is the
    // one damaged in the bucket above: a watcher that pulled it between the damage and
    // the resumed recorder's new copy (a loaded box) could not score it, and shows it
    // bare (a watcher scores each cell once).
    assert_eq!(watch_log.matches(": committed").count(), 6, "{watch_log}");
    let decode: Vec<&str> = watch_log
        .lines()
        .filter(|l| l.contains(" decode ") && l.contains(": committed"))
        .collect();
    assert_eq!(decode.len(), 5, "{watch_log}");
    assert!(
        decode.iter().all(|l| l.contains(": committed · ")),
        "{watch_log}"
    );
    assert!(
        watch_log.contains(&format!("{url}: the run is complete")),
        "{watch_log}"
    );

    // The bucket's run is sound, and its report is the local copy's, byte for byte.
    let checked = ok(
        &tokentrace(&["check", url], &env).output().expect("check"),
        "check",
    );
    assert!(
        checked.contains("6 cell folders: 6 sound, 0 damaged; 0 missing"),
        "{checked}"
    );
    for format in ["md", "json", "html"] {
        let remote = ok(
            &tokentrace(&["report", url, "--format", format], &env)
                .output()
                .expect("report"),
            "report from the bucket",
        );
        let local = ok(
            &tokentrace(&["report", second_s, "--format", format], &[])
                .output()
                .expect("report"),
            "report of the local copy",
        );
        assert!(remote == local, "{format}: the bucket's report differs");
    }
    // rescore writes the scoring back into the bucket.
    let rescored = ok(
        &tokentrace(&["rescore", url], &env)
            .output()
            .expect("rescore"),
        "rescore",
    );
    assert!(
        rescored.starts_with(&format!("{url}/results/default@")),
        "{rescored}"
    );

    // The bucket's run published as a site by its URL; published again unchanged, it is
    // listed, not downloaded or written again.
    let site_dir = second.with_file_name("site");
    let site_s = site_dir.to_str().expect("utf-8");
    let published = ok(
        &tokentrace(&["site", url, "--out", site_s], &env)
            .output()
            .expect("site"),
        "site",
    );
    assert!(published.contains("1 runs (1 rendered"), "{published}");
    let again = ok(
        &tokentrace(&["site", url, "--out", site_s], &env)
            .output()
            .expect("site"),
        "site again",
    );
    assert!(again.contains("1 runs (0 rendered, 1 unchanged"), "{again}");

    // The secret is in no file of either box and in no output.
    for f in files(&first)
        .into_iter()
        .chain(files(&second))
        .chain(files(&site_dir))
    {
        let bytes = std::fs::read(&f).expect("read");
        assert!(
            !bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
            "{} holds the secret",
            f.display()
        );
    }
    for text in [
        &log,
        &resumed_log,
        &checked,
        &rescored,
        &watch_log,
        &published,
    ] {
        assert!(!text.contains(SECRET));
    }
    sim.stop();
}

/// One request a [`wire_s3`] server answered: method, path, its `x-amz-checksum-sha256`
/// header, and the SHA-256 of the body it carried.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    checksum: Option<String>,
    body_sha256: [u8; 32],
}

/// A loopback HTTP server that answers uploads as S3 does (200 and an ETag) and keeps
/// each request's method, path, checksum header and body digest.
async fn wire_s3() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<Seen>>>,
) {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let (r, mut w) = socket.into_split();
                let mut r = BufReader::new(r);
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let mut parts = line.split_whitespace();
                    let method = parts.next().unwrap_or_default().to_string();
                    let path = parts.next().unwrap_or_default().to_string();
                    let (mut length, mut checksum) = (0usize, None);
                    loop {
                        let mut h = String::new();
                        if r.read_line(&mut h).await.unwrap_or(0) == 0 {
                            return;
                        }
                        let h = h.trim_end();
                        if h.is_empty() {
                            break;
                        }
                        if let Some((k, v)) = h.split_once(':') {
                            match k.trim().to_ascii_lowercase().as_str() {
                                "content-length" => length = v.trim().parse().unwrap_or(0),
                                "x-amz-checksum-sha256" => checksum = Some(v.trim().to_string()),
                                _ => {}
                            }
                        }
                    }
                    let mut body = vec![0u8; length];
                    if r.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    log.lock().expect("log").push(Seen {
                        method,
                        path,
                        checksum,
                        body_sha256: tokentrace_schemas::digest::Sha256::of_bytes(&body).0,
                    });
                    let answer =
                        "HTTP/1.1 200 OK\r\nETag: \"tokentrace\"\r\nContent-Length: 0\r\n\r\n";
                    if w.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

/// Every object an upload to S3 sends carries `x-amz-checksum-sha256`, and it is the
/// SHA-256 that the cell's commit mark records for that file (base64 of the same 32
/// bytes), which S3 checks against the bytes it received. Seen on the wire, at a
/// loopback server: moto (the test above) accepts these uploads but neither checks nor
/// keeps the header unless an AWS SDK's own `x-amz-sdk-checksum-algorithm` comes too.
#[tokio::test]
async fn every_upload_carries_the_sha256_its_cell_records() {
    use base64::Engine;
    use tokentrace_schemas::layout::{CellKey, Phase};
    use tokentrace_schemas::manifest::CellMeta;
    use tokentrace_testkit::synth::{self, DecodeSpec};
    let tmp = tempfile::tempdir().expect("tempdir");
    let run = tmp.path().join("run");
    let key = CellKey::new(Phase::Decode, 1024, 2);
    synth::write_decode_cell(&run, &DecodeSpec::new(key, 3_000)).expect("cell");
    synth::manifest("checksums", &[key])
        .write(&run)
        .expect("manifest");
    let (addr, seen) = wire_s3().await;
    let settings: Vec<(String, String)> = [
        ("AWS_ACCESS_KEY_ID", KEY_ID),
        ("AWS_SECRET_ACCESS_KEY", SECRET),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ENDPOINT", &format!("http://{addr}")),
        ("AWS_ALLOW_HTTP", "true"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let store = RunStore::open_with("s3://runs/box-1", settings).expect("store");
    store.upload_cell(&run, key).await.expect("upload");
    store.upload_manifest(&run).await.expect("manifest");

    let meta = CellMeta::read_complete(&key.dir(&run)).expect("cell.json");
    let seen = seen.lock().expect("log").clone();
    let puts: Vec<&Seen> = seen.iter().filter(|s| s.method == "PUT").collect();
    // Every file of the cell, its commit mark and the manifest: one PUT each.
    assert_eq!(puts.len(), meta.files.len() + 2, "{seen:#?}");
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    for put in &puts {
        assert_eq!(
            put.checksum.as_deref(),
            Some(b64(&put.body_sha256).as_str()),
            "{}: the checksum is not the body's",
            put.path
        );
    }
    for (name, stat) in &meta.files {
        let put = puts
            .iter()
            .find(|p| p.path.ends_with(&format!("/{name}")))
            .unwrap_or_else(|| panic!("{name} was not uploaded: {seen:#?}"));
        let recorded = stat.sha256.expect("a checksum in cell.json");
        assert_eq!(
            put.checksum.as_deref(),
            Some(b64(&recorded.0).as_str()),
            "{name}: the upload's checksum is not the one cell.json records"
        );
    }
}
