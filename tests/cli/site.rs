//! `tokentrace site`: a fleet of recorded and imported runs published as plain files:
//! every run's page is its report plus the navigation bar, every link resolves, hostile
//! facts are text, a second build rewrites only what a new run touches, `--public` drops
//! hosts, IPs and paths and lists them, `--rules` is said on every page; a fleet in an
//! object store (`file://`) is published by its URL, and listed, not fetched, when unchanged.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::report::{copy_dir, tokentrace};

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(path)
}

/// Copies fixture run `name` to `to`, then edits its manifest with `edit`.
fn run_copy(name: &str, to: &Path, edit: impl FnOnce(&mut Value)) {
    copy_dir(&fixture("runs").join(name), to);
    let path = to.join("manifest.json");
    let mut m: Value =
        serde_json::from_slice(&std::fs::read(&path).expect("manifest")).expect("json");
    edit(&mut m);
    std::fs::write(&path, serde_json::to_string_pretty(&m).expect("json")).expect("write");
}

/// A version of the engine, started `day` days into December.
fn release(version: &str, day: u32) -> impl FnOnce(&mut Value) {
    let version = version.to_string();
    move |m: &mut Value| {
        m["engine"]["version"] = Value::from(version.clone());
        m["run_id"] = Value::from(format!("chat-{version}"));
        m["clock"]["utc_at_zero"] = Value::from(format!("2026-12-{day:02}T10:00:00.000000000Z"));
    }
}

const HOSTILE_MODEL: &str = "org/<script>alert(1)</script>\"quoted'";
const HOSTILE_LAUNCH: &str = "vllm serve \"org/model\" --chat-template '{{ \"<b>\" }}'";

/// Four recorded runs (two releases of one engine, another model, a hostile copy) and
/// one imported: the fleet under `dir/fleet`.
fn fleet(dir: &Path) -> PathBuf {
    let fleet = dir.join("fleet");
    run_copy("sim-chat", &fleet.join("chat-0.31"), release("0.31.0", 1));
    run_copy("sim-chat", &fleet.join("chat-0.32"), release("0.32.0", 3));
    run_copy("sim-completions", &fleet.join("completions"), |_| {});
    run_copy("sim-completions", &fleet.join("hostile"), |m| {
        m["model"] = Value::from(HOSTILE_MODEL);
        m["launch_command"] = Value::from(HOSTILE_LAUNCH);
        m["hardware"] = Value::from("<img src=x onerror=alert(2)>");
    });
    let (code, out, err) = tokentrace(&[
        "import",
        fixture("refbench/0.4.18-sim.json").to_str().expect("utf-8"),
        "--out",
        fleet.join("imported").to_str().expect("utf-8"),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    fleet
}

fn site(args: &[&str]) -> (String, String) {
    let mut all = vec!["site"];
    all.extend_from_slice(args);
    let (code, out, err) = tokentrace(&all);
    assert_eq!(code, 0, "{out}{err}");
    (out, err)
}

/// Every file under `dir`, by path relative to it.
fn files(dir: &Path) -> BTreeMap<String, PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, PathBuf>) {
        for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p
                    .strip_prefix(root)
                    .expect("inside")
                    .to_string_lossy()
                    .into_owned();
                out.insert(rel, p);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// The `href`s of an HTML page.
fn links(page: &str) -> Vec<String> {
    page.split("href=\"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .map(str::to_string)
        .collect()
}

/// The page without its navigation bar (the run page's only addition to the report).
fn without_nav(page: &str) -> String {
    let start = page.find("<nav class=\"site\"").expect("a navigation bar");
    let end = page[start..].find("</nav>\n").expect("its end") + start + "</nav>\n".len();
    format!("{}{}", &page[..start], &page[end..])
}

/// The state file's rows.
fn rows(site: &Path) -> Vec<Value> {
    let state: Value =
        serde_json::from_slice(&std::fs::read(site.join("tokentrace-site.json")).expect("state"))
            .expect("json");
    state["runs"]
        .as_object()
        .expect("runs")
        .values()
        .map(|b| b["row"].clone())
        .collect()
}

/// The row of run `id` (a copy of a fixture under a new id).
fn row<'a>(rows: &'a [Value], id: &str) -> &'a Value {
    rows.iter()
        .find(|r| r["run_id"] == id)
        .unwrap_or_else(|| panic!("no run {id}"))
}

#[test]
fn a_fleet_becomes_pages_that_are_its_reports_with_every_link_resolving() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fleet = fleet(tmp.path());
    let out = tmp.path().join("site");
    let (printed, _) = site(&[
        fleet.to_str().expect("utf-8"),
        "--out",
        out.to_str().expect("utf-8"),
    ]);
    assert!(
        printed.contains("5 runs (5 rendered, 0 unchanged, 0 removed)"),
        "{printed}"
    );

    let all = files(&out);
    let index = std::fs::read_to_string(out.join("index.html")).expect("index");
    assert_eq!(index.matches("<tr data-model=").count(), 5, "{index}");
    // Every page's links resolve to a file of the site.
    for (rel, path) in all.iter().filter(|(r, _)| r.ends_with(".html")) {
        let page = std::fs::read_to_string(path).expect("page");
        let dir = path.parent().expect("dir");
        for href in links(&page) {
            assert!(!href.contains("://"), "{rel} links out: {href}");
            assert!(dir.join(&href).is_file(), "{rel}: {href} does not resolve");
        }
        // Hostile facts are text on every page.
        assert!(
            !page.contains("<script>alert"),
            "{rel} runs the model's name"
        );
        assert!(
            !page.contains("<img src=x"),
            "{rel} shows the hardware as markup"
        );
    }
    // Each run's page is its report, with the navigation bar.
    let by_id = rows(&out);
    let hostile = by_id
        .iter()
        .find(|r| r["model"].as_str().is_some_and(|m| m.contains("<script>")))
        .expect("the hostile run");
    for (folder, row) in [
        ("chat-0.31", row(&by_id, "chat-0.31.0")),
        ("chat-0.32", row(&by_id, "chat-0.32.0")),
        ("hostile", hostile),
    ] {
        let slug = row["slug"].as_str().expect("slug");
        let page = std::fs::read_to_string(out.join(format!("runs/{slug}.html"))).expect("page");
        let run = fleet.join(folder);
        let (code, report, err) =
            tokentrace(&["report", run.to_str().expect("utf-8"), "--format", "html"]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(
            without_nav(&page),
            report,
            "{folder}'s page is not its report"
        );
    }
    let page = std::fs::read_to_string(out.join(format!(
        "runs/{}.html",
        hostile["slug"].as_str().expect("slug")
    )))
    .expect("page");
    assert!(
        index.contains("org/&lt;script&gt;alert(1)&lt;/script&gt;&quot;quoted&#39;"),
        "{index}"
    );
    assert!(page.contains(
        "vllm serve &quot;org/model&quot; --chat-template &#39;{{ &quot;&lt;b&gt;&quot; }}&#39;"
    ));

    // The imported run is listed, marked as imported.
    assert!(
        index.contains("imported: llm-inference-bench 0.4.18"),
        "{index}"
    );
    // The two releases of one model on one box share a group page, in time order.
    let group = row(&by_id, "chat-0.31.0")["group"]["slug"]
        .as_str()
        .expect("group");
    assert_eq!(
        group,
        row(&by_id, "chat-0.32.0")["group"]["slug"]
            .as_str()
            .expect("group")
    );
    let page =
        std::fs::read_to_string(out.join(format!("groups/{group}.html"))).expect("group page");
    let (a, b) = (
        page.find("0.31.0 · 2026-12-01").expect("0.31"),
        page.find("0.32.0 · 2026-12-03").expect("0.32"),
    );
    assert!(a < b, "not in time order");
    assert!(
        page.contains("2026-12-01 10:00 → tokentrace-sim 0.32.0"),
        "no ratio map of the step"
    );
    assert!(page.contains("class=\"heat ratio\""));
}

/// Sets every file of `dir` to an old modification time.
fn age(dir: &Path) -> SystemTime {
    let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    for path in files(dir).values() {
        std::fs::File::options()
            .append(true)
            .open(path)
            .and_then(|f| f.set_modified(old))
            .expect("set mtime");
    }
    old
}

/// The files of `dir` modified since `old`.
fn touched(dir: &Path, old: SystemTime) -> BTreeSet<String> {
    files(dir)
        .into_iter()
        .filter(|(_, p)| {
            std::fs::metadata(p)
                .and_then(|m| m.modified())
                .expect("mtime")
                != old
        })
        .map(|(rel, _)| rel)
        .collect()
}

#[test]
fn a_second_build_rewrites_only_the_new_run_its_group_and_the_index() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fleet = fleet(tmp.path());
    let out = tmp.path().join("site");
    let args = [
        fleet.to_str().expect("utf-8"),
        "--out",
        out.to_str().expect("utf-8"),
    ];
    site(&args);
    let old = age(&out);

    // Nothing changed: nothing is written.
    let (printed, _) = site(&args);
    assert!(
        printed.contains(
            "5 runs (0 rendered, 5 unchanged, 0 removed), 3 groups (0 rendered), index unchanged"
        ),
        "{printed}"
    );
    assert_eq!(touched(&out, old), BTreeSet::new());

    // One new release of the chat model: its page and scoring, its group, the index.
    run_copy("sim-chat", &fleet.join("chat-0.33"), release("0.33.0", 5));
    let (printed, _) = site(&args);
    assert!(
        printed.contains(
            "6 runs (1 rendered, 5 unchanged, 0 removed), 3 groups (1 rendered), index written"
        ),
        "{printed}"
    );
    let by_id = rows(&out);
    let new = row(&by_id, "chat-0.33.0")["slug"].as_str().expect("slug");
    let group = row(&by_id, "chat-0.33.0")["group"]["slug"]
        .as_str()
        .expect("group");
    let expected: BTreeSet<String> = [
        format!("runs/{new}.html"),
        format!("runs/{new}.json"),
        format!("groups/{group}.html"),
        "index.html".to_string(),
        "tokentrace-site.json".to_string(),
    ]
    .into();
    assert_eq!(touched(&out, old), expected);

    // A run whose file changed is rendered again; a run gone takes its page with it.
    let old = age(&out);
    let chunks =
        fleet.join("chat-0.31/cells/phase=decode/context=256/concurrency=2/chunks.parquet");
    std::fs::File::options()
        .append(true)
        .open(&chunks)
        .and_then(|f| f.set_modified(SystemTime::now()))
        .expect("touch");
    std::fs::remove_dir_all(fleet.join("completions")).expect("rm");
    let (printed, _) = site(&args);
    assert!(
        printed.contains("5 runs (1 rendered, 4 unchanged, 1 removed)"),
        "{printed}"
    );
    assert!(touched(&out, old).contains(&format!("groups/{group}.html")));
    assert_eq!(
        files(&out)
            .keys()
            .filter(|k| k.starts_with("runs/"))
            .count(),
        10
    );

    // A run that cannot be read this time keeps its page of the last build; exit 1.
    let slug = row(&rows(&out), "chat-0.32.0")["slug"]
        .as_str()
        .expect("slug")
        .to_string();
    std::fs::write(fleet.join("chat-0.32/manifest.json"), "{ not json").expect("write");
    let (code, printed, err) = tokentrace(&["site", args[0], args[1], args[2]]);
    assert_eq!(code, 1, "{printed}{err}");
    assert!(err.contains("its page of the last build stays"), "{err}");
    assert!(
        printed.contains("5 runs (0 rendered, 5 unchanged, 0 removed)"),
        "{printed}"
    );
    assert!(out.join(format!("runs/{slug}.html")).is_file());
}

#[test]
fn public_drops_hosts_ips_and_paths_and_says_which() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fleet = tmp.path().join("fleet");
    run_copy("sim-chat", &fleet.join("private"), |m| {
        m["target"]["url"] = Value::from("http://gpu-node-7.cluster.internal:8000");
        m["launch_command"] = Value::from(
            "vllm serve /home/alice/models/Llama-3 --host 10.1.2.3 --port 8000 \
             --dist-init-addr gpu-node-7.cluster.internal:5000 --api-key <redacted>",
        );
        m["hardware"] = Value::from("gpu-node-7.cluster.internal ×8");
        m["facts"] = serde_json::json!([
            {"key": "engine.model_path", "value": "/home/alice/models/Llama-3", "source": "vLLM /v1/models"},
            {"key": "gpu.name", "value": "NVIDIA H200", "source": "NVML"}
        ]);
    });
    // A cell whose file is gone: its reason names the cell's folder.
    std::fs::remove_file(
        fleet.join("private/cells/phase=decode/context=256/concurrency=2/chunks.parquet"),
    )
    .expect("rm");
    let out = tmp.path().join("site");
    // First published privately into the same folder: nothing of it may stay.
    site(&[
        fleet.to_str().expect("utf-8"),
        "--out",
        out.to_str().expect("utf-8"),
    ]);
    let (_, said) = site(&[
        fleet.to_str().expect("utf-8"),
        "--out",
        out.to_str().expect("utf-8"),
        "--public",
    ]);
    for line in [
        "dropped run.target: 1 host name",
        "dropped run.hardware: 1 host name",
        "dropped run.launch_command: 1 host name, 1 IP address, 1 path",
        "dropped cell decode 256×2 reason: 1 path",
        "dropped fact engine.model_path: 1 path",
    ] {
        assert!(said.contains(line), "{line} not in:\n{said}");
    }
    let fleet_path = fleet.display().to_string();
    for (rel, path) in files(&out) {
        let text = std::fs::read_to_string(&path).expect("text");
        for secret in [
            "alice",
            "10.1.2.3",
            "gpu-node-7",
            "cluster.internal",
            fleet_path.as_str(),
        ] {
            assert!(!text.contains(secret), "{rel} holds {secret}");
        }
    }
    let page = std::fs::read_to_string(
        files(&out)
            .into_iter()
            .find(|(r, _)| r.starts_with("runs/") && r.ends_with(".html"))
            .expect("page")
            .1,
    )
    .expect("page");
    assert!(
        page.contains(
            "vllm serve …/Llama-3 --host [ip] --port 8000 --dist-init-addr [host] \
             --api-key &lt;redacted&gt;"
        ),
        "the command keeps its shape"
    );
    assert!(
        page.contains("<li>run.target: 1 host name</li>"),
        "the page lists what it dropped"
    );
    assert!(page.contains("public: host names, IP addresses and paths dropped"));
}

#[test]
fn rules_named_for_the_site_are_said_on_every_page() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fleet = tmp.path().join("fleet");
    run_copy("sim-chat", &fleet.join("a"), release("0.31.0", 1));
    run_copy("sim-chat", &fleet.join("b"), release("0.32.0", 2));
    // A folder that is not a run is named, and the others are published.
    std::fs::create_dir_all(fleet.join("broken")).expect("mkdir");
    std::fs::write(fleet.join("broken/manifest.json"), "{ not json").expect("write");
    let out = tmp.path().join("site");
    let (code, printed, err) = tokentrace(&[
        "site",
        fleet.to_str().expect("utf-8"),
        "--out",
        out.to_str().expect("utf-8"),
        "--rules",
        "reference",
    ]);
    assert_eq!(code, 1, "{printed}{err}");
    assert!(err.contains("broken: not published"), "{err}");
    assert!(printed.contains("2 runs (2 rendered"), "{printed}");
    let pages: Vec<(String, PathBuf)> = files(&out)
        .into_iter()
        .filter(|(r, _)| r.ends_with(".html"))
        .collect();
    assert_eq!(pages.len(), 4, "{pages:?}");
    for (rel, path) in pages {
        let text = std::fs::read_to_string(path).expect("page");
        assert!(
            text.contains("Every recorded run re-scored under rule set reference@"),
            "{rel} does not say so"
        );
    }
    for row in rows(&out) {
        assert!(
            row["rules"]
                .as_str()
                .expect("rules")
                .starts_with("reference@"),
            "{row}"
        );
    }
}

#[test]
fn a_stored_fleet_is_published_by_its_url_and_left_alone_while_unchanged() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fleet = tmp.path().join("bucket/fleet");
    run_copy("sim-chat", &fleet.join("a"), release("0.31.0", 1));
    run_copy("sim-chat", &fleet.join("b"), release("0.32.0", 2));
    let url = format!("file://{}", fleet.display());
    let out = tmp.path().join("site");
    let args = [url.as_str(), "--out", out.to_str().expect("utf-8")];
    let (printed, _) = site(&args);
    assert!(printed.contains("2 runs (2 rendered"), "{printed}");
    // The same pages as from the folders.
    let local = tmp.path().join("local");
    site(&[
        fleet.to_str().expect("utf-8"),
        "--out",
        local.to_str().expect("utf-8"),
    ]);
    let pages = |dir: &Path| -> BTreeSet<String> {
        files(dir)
            .into_iter()
            .filter(|(r, _)| r.starts_with("runs/") && r.ends_with(".html"))
            .map(|(_, p)| without_nav(&std::fs::read_to_string(p).expect("page")))
            .collect()
    };
    assert_eq!(pages(&out), pages(&local));
    // Unchanged in the store: listed, not downloaded or written again.
    let old = age(&out);
    let (printed, _) = site(&args);
    assert!(
        printed.contains("2 runs (0 rendered, 2 unchanged"),
        "{printed}"
    );
    assert_eq!(touched(&out, old), BTreeSet::new());
    // An object of one run changes in the store: that run is rendered again.
    let mark = fleet.join("b/cells/phase=decode/context=256/concurrency=2/events.parquet");
    let mut bytes = std::fs::read(&mark).expect("read");
    bytes.push(0);
    std::fs::write(&mark, bytes).expect("write");
    let (printed, _) = site(&args);
    assert!(
        printed.contains("2 runs (1 rendered, 1 unchanged"),
        "{printed}"
    );
}
