//! `report`, `rescore` and `diff` end to end: golden reports of the committed runs are
//! reproduced byte for byte; rescoring with a one-threshold change changes exactly the
//! cells designed to change; bad input is named and exits non-zero without a panic.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Parser;
use tokentrace::{Cli, run};

const RUNS: [&str; 3] = ["sim-completions", "sim-chat", "sim-open"];
/// (rule set, format) of every expected report.
const EXPECTED: [(&str, &str); 5] = [
    ("default", "md"),
    ("reference", "md"),
    ("default", "json"),
    ("default", "csv"),
    ("default", "html"),
];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/runs")
}

fn report_to(run: &Path, rules: &str, format: &str, out: &Path) -> std::process::ExitCode {
    let cli = Cli::parse_from([
        "tokentrace",
        "report",
        run.to_str().expect("utf-8"),
        "--rules",
        rules,
        "--format",
        format,
        "--out",
        out.to_str().expect("utf-8"),
    ]);
    run_ok(cli)
}

fn run_ok(cli: Cli) -> std::process::ExitCode {
    run(cli).expect("command runs")
}

/// The committed runs' reports, rendered twice, equal the committed expected files.
/// `UPDATE_GOLDEN=1` rewrites the expected files instead (check them by eye).
#[test]
fn golden_reports_are_reproduced_byte_for_byte() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    for name in RUNS {
        let run_dir = fixtures().join(name);
        for (rules, format) in EXPECTED {
            let expected = fixtures()
                .join("expected")
                .join(format!("{name}.{rules}.{format}"));
            let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
            assert_eq!(
                report_to(&run_dir, rules, format, &a),
                std::process::ExitCode::SUCCESS
            );
            assert_eq!(
                report_to(&run_dir, rules, format, &b),
                std::process::ExitCode::SUCCESS
            );
            let (a, b) = (std::fs::read(a).expect("a"), std::fs::read(b).expect("b"));
            assert_eq!(a, b, "{name} {rules} {format}: two renders differ");
            if update {
                std::fs::create_dir_all(expected.parent().expect("parent")).expect("mkdir");
                std::fs::write(&expected, &a).expect("write golden");
                continue;
            }
            let want = std::fs::read(&expected).unwrap_or_else(|e| {
                panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", expected.display())
            });
            assert!(
                a == want,
                "{name} {rules} {format} differs from {}:\n{}",
                expected.display(),
                String::from_utf8_lossy(&a)
            );
        }
    }
}

/// The `data-NAME="…"` attributes of every element that opens with `open`, in order.
fn attributes(html: &str, open: &str) -> Vec<BTreeMap<String, String>> {
    html.match_indices(open)
        .map(|(at, _)| {
            let tag = &html[at..];
            let tag = &tag[..tag.find('>').unwrap_or(tag.len())];
            let mut out = BTreeMap::new();
            let mut rest = tag;
            while let Some(i) = rest.find(" data-") {
                rest = &rest[i + 6..];
                let Some((name, after)) = rest.split_once("=\"") else {
                    break;
                };
                let Some((value, after)) = after.split_once('"') else {
                    break;
                };
                out.insert(name.to_string(), value.to_string());
                rest = after;
            }
            out
        })
        .collect()
}

/// Equal to the last bit or two: serde_json's default float parser, which reads the JSON
/// side, can miss the nearest double by one unit in the last place.
fn same(a: Option<f64>, b: Option<f64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => (a - b).abs() <= 4.0 * f64::EPSILON * a.abs().max(b.abs()),
        (a, b) => a == b,
    }
}

/// A run's HTML page and JSON scoring under `default`, rendered through the CLI.
fn page_and_scoring(run_dir: &Path, tmp: &Path) -> (String, serde_json::Value) {
    let (page, scoring) = (tmp.join("page.html"), tmp.join("s.json"));
    report_to(run_dir, "default", "html", &page);
    report_to(run_dir, "default", "json", &scoring);
    let html = std::fs::read_to_string(&page).expect("page");
    let json = serde_json::from_slice(&std::fs::read(&scoring).expect("json")).expect("json");
    (html, json)
}

/// Every figure in the HTML page's matrix and measurements table is the JSON scoring's,
/// to full precision.
#[test]
fn the_html_pages_figures_are_the_json_scorings() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for name in RUNS {
        let run_dir = fixtures().join(name);
        let (html, json) = page_and_scoring(&run_dir, tmp.path());
        let cells = json["cells"].as_array().expect("cells");
        let decode: Vec<&serde_json::Value> =
            cells.iter().filter(|c| c["phase"] == "decode").collect();
        let matrix = attributes(&html, "<td class=\"cell");
        assert_eq!(
            matrix.len(),
            decode.len(),
            "{name}: one matrix cell per decode cell"
        );
        for c in &decode {
            let (ctx, n) = (c["context"].to_string(), c["concurrency"].to_string());
            let m = matrix
                .iter()
                .find(|m| m["context"] == ctx && m["concurrency"] == n)
                .unwrap_or_else(|| panic!("{name}: no matrix cell {ctx} × {n}"));
            assert_eq!(
                m["verdict"],
                c["verdict"].as_str().unwrap_or(""),
                "{ctx} × {n}"
            );
            let number = |key: &str| m[key].parse::<f64>().ok();
            for (key, want) in [
                ("total-tok-s", c["figures"]["total_tok_s"].as_f64()),
                ("ttft-ms", c["figures"]["ttft_ms"]["median"].as_f64()),
            ] {
                assert!(
                    same(number(key), want),
                    "{ctx} × {n} {key}: {:?} vs {want:?}",
                    number(key)
                );
            }
        }
        // The measurements table: one row per cell, in the scoring's order, each sort
        // value equal to the JSON figure it shows.
        let rows: Vec<&str> = html
            .split("<tr data-phase=")
            .skip(1)
            .map(|r| &r[..r.find("</tr>").unwrap_or(r.len())])
            .collect();
        assert_eq!(rows.len(), cells.len(), "{name}: one row per cell");
        for (row, c) in rows.iter().zip(cells) {
            let sorts: Vec<f64> = row
                .split("data-sort=\"")
                .skip(1)
                .filter_map(|v| v[..v.find('"').unwrap_or(0)].parse().ok())
                .collect();
            let f = &c["figures"];
            if c["phase"] == "decode" && c["verdict"] == "valid" {
                let mut wanted: Vec<f64> = ["total_tok_s", "output_tokens", "completed_requests"]
                    .iter()
                    .filter_map(|k| f[*k].as_f64())
                    .collect();
                wanted.extend(f["ttft_ms"]["median"].as_f64());
                assert_eq!(wanted.len(), 4, "{name}: {f}");
                for want in wanted {
                    assert!(
                        sorts.iter().any(|v| same(Some(*v), Some(want))),
                        "{name}: {want} not in {sorts:?}"
                    );
                }
            }
        }
    }
}

/// The page carries a drill-down trace for every decode cell: a down-sampled,
/// non-decreasing token series, the window's length, and one set of marks per warm-up
/// and measured request of the cell's table.
#[test]
fn the_html_page_has_a_trace_for_every_decode_cell() {
    use tokentrace_schemas::reader::read_table;
    use tokentrace_schemas::tables::{Requests, Role};
    let tmp = tempfile::tempdir().expect("tempdir");
    for name in RUNS {
        let run_dir = fixtures().join(name);
        let (html, json) = page_and_scoring(&run_dir, tmp.path());
        let start = html.find("id=\"cell-data\">").expect("cell data") + 15;
        let end = start + html[start..].find("</script>").expect("end");
        let data: serde_json::Value = serde_json::from_str(&html[start..end]).expect("data");
        for c in json["cells"].as_array().expect("cells") {
            if c["phase"] != "decode" {
                continue;
            }
            let key = format!("{}/{}", c["context"], c["concurrency"]);
            let t = &data["cells"][&key]["trace"];
            let times: Vec<f64> = t["times"]
                .as_array()
                .expect("times")
                .iter()
                .filter_map(|v| v.as_f64())
                .collect();
            let tokens: Vec<i64> = t["tokens"]
                .as_array()
                .expect("tokens")
                .iter()
                .filter_map(|v| v.as_i64())
                .collect();
            assert!(
                !times.is_empty() && times.len() == tokens.len(),
                "{name} {key}"
            );
            assert!(
                times.len() <= tokentrace_analyzer::trace::MAX_POINTS + 1,
                "{name} {key}"
            );
            assert!(
                times.windows(2).all(|w| w[0] <= w[1]),
                "{name} {key}: time order"
            );
            assert!(
                tokens.windows(2).all(|w| w[0] <= w[1]),
                "{name} {key}: cumulative"
            );
            let window = t["window_s"].as_f64().expect("window");
            assert!(
                same(Some(window), c["figures"]["window_s"].as_f64()),
                "{name} {key}"
            );
            let dir = tokentrace_schemas::layout::CellKey::new(
                tokentrace_schemas::layout::Phase::Decode,
                c["context"].as_u64().expect("context") as u32,
                c["concurrency"].as_u64().expect("concurrency") as u32,
            )
            .dir(&run_dir);
            let rows = read_table::<Requests>(&dir.join("requests.parquet")).expect("requests");
            let streams = rows
                .iter()
                .filter(|r| matches!(r.role, Role::Warmup | Role::Measured))
                .count();
            assert_eq!(
                t["requests"].as_array().map(Vec::len),
                Some(streams),
                "{name} {key}: one set of marks per request"
            );
            // A queued cell marks the scrapes that show its queue; others mark none.
            let marks = data["cells"][&key]["queued_marks"]
                .as_array()
                .map_or(0, Vec::len);
            assert_eq!(
                marks > 0,
                c["verdict"] == "requests_queued",
                "{name} {key}: {marks} queued marks"
            );
        }
    }
}

/// Two runs on one page: the ratio heat map holds, for every cell both runs have, the
/// second run's total tok/s and TTFT over the first's; without --format html, several
/// runs are refused.
#[test]
fn two_runs_side_by_side_show_their_ratios() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (a, b) = (
        fixtures().join("sim-completions"),
        fixtures().join("sim-chat"),
    );
    let page = tmp.path().join("compare.html");
    let cli = Cli::parse_from([
        "tokentrace",
        "report",
        a.to_str().expect("utf-8"),
        b.to_str().expect("utf-8"),
        "--format",
        "html",
        "--out",
        page.to_str().expect("utf-8"),
    ]);
    assert_eq!(run_ok(cli), std::process::ExitCode::SUCCESS);
    let html = std::fs::read_to_string(&page).expect("page");
    let scoring = |dir: &Path| {
        let out = tmp.path().join("s.json");
        report_to(dir, "default", "json", &out);
        serde_json::from_slice::<serde_json::Value>(&std::fs::read(&out).expect("json"))
            .expect("json")
    };
    let (sa, sb) = (scoring(&a), scoring(&b));
    let figure = |s: &serde_json::Value,
                  ctx: &str,
                  n: &str,
                  pick: &dyn Fn(&serde_json::Value) -> Option<f64>| {
        s["cells"].as_array().expect("cells").iter().find_map(|c| {
            let key = |k: &str| c[k].as_u64().map(|v| v.to_string());
            (c["phase"] == "decode"
                && key("context").as_deref() == Some(ctx)
                && key("concurrency").as_deref() == Some(n))
            .then(|| pick(&c["figures"]))
            .flatten()
        })
    };
    let cells = attributes(&html, "<td class=\"ratio");
    assert_eq!(cells.len(), 2, "256 × 8 and 1K × 8 are in both runs");
    for m in &cells {
        let (ctx, n) = (m["context"].as_str(), m["concurrency"].as_str());
        let rate = |s: &serde_json::Value| figure(s, ctx, n, &|f| f["total_tok_s"].as_f64());
        let ttft = |s: &serde_json::Value| figure(s, ctx, n, &|f| f["ttft_ms"]["median"].as_f64());
        let want = rate(&sb).zip(rate(&sa)).map(|(y, x)| y / x);
        assert!(
            same(m["ratio-tok-s"].parse().ok(), want),
            "{ctx} × {n}: {m:?} vs {want:?}"
        );
        let want = ttft(&sb).zip(ttft(&sa)).map(|(y, x)| y / x);
        assert!(
            same(m["ratio-ttft"].parse().ok(), want),
            "{ctx} × {n}: {m:?} vs {want:?}"
        );
    }
    let (code, _, err) = tokentrace(&[
        "report",
        a.to_str().expect("utf-8"),
        b.to_str().expect("utf-8"),
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("add --format html"), "{err}");
}

/// A looped cell's drill-down carries the loop's text: some text before the cycle, the
/// cycle, and after it the cycle again.
#[test]
fn a_looped_cells_page_shows_the_loop_in_its_text() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let page = tmp.path().join("loops.html");
    let rules = fixtures().join("short-loops.toml");
    report_to(
        &fixtures().join("sim-completions"),
        rules.to_str().expect("utf-8"),
        "html",
        &page,
    );
    let html = std::fs::read_to_string(&page).expect("page");
    let start = html.find("id=\"cell-data\">").expect("cell data") + 15;
    let end = start + html[start..].find("</script>").expect("end");
    let data: serde_json::Value = serde_json::from_str(&html[start..end]).expect("data");
    let cell = &data["cells"]["1024/4"];
    let cycle_chars = cell["loop"]["cycle_chars"].as_u64().expect("a loop") as usize;
    let text = cell["trace"]["loop_text"].as_array().expect("loop text");
    let part = |i: usize| text[i].as_str().unwrap_or("").to_string();
    let (before, cycle, after) = (part(0), part(1), part(2));
    assert_eq!(cycle.chars().count(), cycle_chars, "{cycle:?}");
    assert!(
        !after.is_empty() && after.chars().zip(cycle.chars()).all(|(a, b)| a == b),
        "the cycle repeats after itself: {after:?}"
    );
    assert!(before.chars().count() <= tokentrace_analyzer::trace::LOOP_CONTEXT);
    assert!(
        data["cells"]["256/4"]["trace"]["loop_text"].is_null(),
        "no loop at 256"
    );
}

/// `tokentrace diff ARGS --format json`, parsed.
fn diff_json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["tokentrace", "diff"];
    all.extend_from_slice(args);
    all.extend(["--format", "json"]);
    let tokentrace::Command::Diff(args) = Cli::parse_from(all).command else {
        panic!("parsed as another command");
    };
    let mut out = Vec::new();
    tokentrace::analyze::diff(&args, &mut out).expect("diff");
    serde_json::from_slice(&out).expect("json")
}

/// Copies a folder tree (also used by `integrity`).
pub(crate) fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copy");
        }
    }
}

fn files_of(dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
    for entry in std::fs::read_dir(dir).expect("read_dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            files_of(&path, out);
        } else {
            out.insert(path.clone(), std::fs::read(&path).expect("read"));
        }
    }
}

#[test]
fn rescoring_with_one_threshold_changed_changes_exactly_the_designed_cells() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let run_dir = tmp.path().join("run");
    copy_dir(&fixtures().join("sim-completions"), &run_dir);
    let mut before = BTreeMap::new();
    files_of(&run_dir, &mut before);

    let short = fixtures().join("short-loops.toml");
    // short-loops.toml extends reference@0.6.2, the set it is compared with.
    for rules in ["reference@0.6.2", short.to_str().expect("utf-8")] {
        let cli = Cli::parse_from([
            "tokentrace",
            "rescore",
            run_dir.to_str().expect("utf-8"),
            "--rules",
            rules,
        ]);
        let tokentrace::Command::Rescore(args) = cli.command else {
            panic!("parsed as another command");
        };
        let mut out = Vec::new();
        let code = tokentrace::analyze::rescore(&args, &mut out).expect("rescored");
        assert_eq!(code, std::process::ExitCode::SUCCESS);
        assert!(
            String::from_utf8_lossy(&out).contains("8 cells"),
            "{}",
            String::from_utf8_lossy(&out)
        );
    }
    let a = run_dir.join("results/reference@0.6.2.json");
    let b = run_dir.join("results/short-loops@1.json");
    assert!(a.is_file() && b.is_file());
    // The trace is untouched: every file that was there is byte-identical, and the only
    // new files are the two scorings.
    let mut after = BTreeMap::new();
    files_of(&run_dir, &mut after);
    for (path, bytes) in &before {
        assert_eq!(after.get(path), Some(bytes), "{} changed", path.display());
    }
    assert_eq!(after.len(), before.len() + 2);

    let d = diff_json(&[a.to_str().expect("utf-8"), b.to_str().expect("utf-8")]);
    let changed: Vec<(String, u64, u64, String, String)> = d["verdicts_changed"]
        .as_array()
        .expect("array")
        .iter()
        .map(|c| {
            (
                c["cell"]["phase"].as_str().unwrap_or("").to_string(),
                c["cell"]["context"].as_u64().unwrap_or(0),
                c["cell"]["concurrency"].as_u64().unwrap_or(0),
                c["status_a"].as_str().unwrap_or("").to_string(),
                c["status_b"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    // golden-sim.toml makes every 1K request loop over a few hundred characters: only
    // the three 1K decode cells change, to Looped; nothing else differs.
    assert_eq!(
        changed,
        vec![
            ("decode".into(), 1024, 1, "Valid".into(), "Looped".into()),
            ("decode".into(), 1024, 4, "Valid".into(), "Looped".into()),
            (
                "decode".into(),
                1024,
                8,
                "Requests queued".into(),
                "Looped".into()
            ),
        ]
    );
    assert_eq!(d["figures_changed"], serde_json::json!([]));
    assert_eq!(d["only_in_a"], serde_json::json!([]));
    assert_eq!(d["only_in_b"], serde_json::json!([]));
    for c in d["verdicts_changed"].as_array().expect("array") {
        assert_eq!(c["figures"], serde_json::json!([]), "{c}");
    }

    // Two runs: the chat run has other cells; diff lists them as present in one only.
    let cli = Cli::parse_from([
        "tokentrace",
        "diff",
        run_dir.to_str().expect("utf-8"),
        fixtures().join("sim-chat").to_str().expect("utf-8"),
    ]);
    let tokentrace::Command::Diff(args) = cli.command else {
        panic!("parsed as another command");
    };
    let mut out = Vec::new();
    tokentrace::analyze::diff(&args, &mut out).expect("diff");
    let text = String::from_utf8(out).expect("utf-8");
    assert!(
        text.contains("## Only in A\n\n- decode 256 × 1\n"),
        "{text}"
    );
    assert!(
        text.contains("## Only in B\n\n- decode 256 × 2\n"),
        "{text}"
    );
    assert!(text.contains("| decode 256 × 8 | total_tok_s |"), "{text}");
}

/// A scoring read back from its JSON and the same run scored afresh are the same: no
/// verdict and no figure differs (not even in a float's last bits).
#[test]
fn a_golden_scoring_and_its_run_scored_afresh_do_not_differ() {
    for name in ["sim-chat", "sim-completions"] {
        let json = fixtures().join(format!("expected/{name}.default.json"));
        let run = fixtures().join(name);
        let d = diff_json(&[
            json.to_str().expect("utf-8"),
            run.to_str().expect("utf-8"),
            "--rules",
            "default",
        ]);
        for list in [
            "verdicts_changed",
            "figures_changed",
            "only_in_a",
            "only_in_b",
        ] {
            assert_eq!(d[list], serde_json::json!([]), "{name}: {list}");
        }
    }
}

/// Asserts that a JSON scoring validates against the committed schema (also used by
/// `replay` and `import`).
pub(crate) fn assert_schema_valid(json: &serde_json::Value, what: &str) {
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../../analyzer/schema/scoring.schema.json"))
            .expect("schema");
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    let errors: Vec<String> = validator.iter_errors(json).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{what}: {errors:#?}");
}

/// Runs the CLI: exit code, stdout, stderr (also used by `integrity`).
pub(crate) fn tokentrace(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tokentrace"))
        .args(args)
        .output()
        .expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_input_is_named_and_exits_non_zero() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let run_dir = tmp.path().join("run");
    copy_dir(&fixtures().join("sim-chat"), &run_dir);
    let run_s = run_dir.to_str().expect("utf-8");

    // A corrupt table and an empty cell folder: the report still renders, lists both
    // cells as incomplete with the file at fault, and exits 1.
    let chunks = run_dir.join("cells/phase=decode/context=256/concurrency=8/chunks.parquet");
    let bytes = std::fs::read(&chunks).expect("read");
    std::fs::write(&chunks, &bytes[..bytes.len() / 2]).expect("truncate");
    let empty = run_dir.join("cells/phase=decode/context=4096/concurrency=1");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let (code, stdout, stderr) = tokentrace(&["report", run_s]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains(&chunks.display().to_string()), "{stderr}");
    assert!(stderr.contains("cell.json"), "{stderr}");
    assert!(
        stdout.contains("| Sustained decode | 256 | 8 | Incomplete |"),
        "{stdout}"
    );
    assert!(
        stdout.contains("| Sustained decode | 4K | 1 | Incomplete |"),
        "{stdout}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");

    // A manifest from a newer schema: refused, naming the file.
    let manifest = run_dir.join("manifest.json");
    let text = std::fs::read_to_string(&manifest).expect("manifest");
    std::fs::write(
        &manifest,
        text.replace("\"schema_version\": 1", "\"schema_version\": 7"),
    )
    .expect("write");
    let (code, _, stderr) = tokentrace(&["report", run_s]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains(&manifest.display().to_string()) && stderr.contains('7'),
        "{stderr}"
    );
    std::fs::remove_file(&manifest).expect("rm");
    let (code, _, stderr) = tokentrace(&["report", run_s]);
    assert_eq!(code, 1);
    assert!(stderr.contains(&manifest.display().to_string()), "{stderr}");

    // A rule file that is not one, and a scoring file that is not one.
    let bad = tmp.path().join("bad.toml");
    std::fs::write(
        &bad,
        "extends = \"reference\"\n[looped]\nmin_cycles = \"four\"\n",
    )
    .expect("write");
    let sim = fixtures().join("sim-chat");
    let (code, _, stderr) = tokentrace(&[
        "report",
        sim.to_str().expect("utf-8"),
        "--rules",
        bad.to_str().expect("utf-8"),
    ]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("bad.toml") && stderr.contains("min_cycles"),
        "{stderr}"
    );
    let not_scoring = tmp.path().join("x.json");
    std::fs::write(&not_scoring, "{\"format\": \"something else\"}").expect("write");
    let (code, _, stderr) = tokentrace(&[
        "diff",
        not_scoring.to_str().expect("utf-8"),
        sim.to_str().expect("utf-8"),
    ]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("x.json") && stderr.contains("not a tokentrace scoring"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{code}: {stderr}");
}
