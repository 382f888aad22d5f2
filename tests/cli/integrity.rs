//! Run folders that prove their integrity: a byte flipped in each kind of committed
//! file, a truncated file, a dropped file and two cells' files swapped are each named by
//! `check` (exit 1) and refused by `report` (the cell listed as not scored, with the
//! file), while the other cells score exactly as before; runs written before checksums
//! still read; `--no-verify` reads as it is and says so.

use std::path::{Path, PathBuf};
use tokentrace_schemas::layout::{CellKey, Phase};
use tokentrace_schemas::manifest::{CellMeta, Manifest};
use tokentrace_testkit::synth;

use super::report::{copy_dir, tokentrace};

fn keys() -> Vec<CellKey> {
    vec![
        CellKey::new(Phase::Decode, 512, 1),
        CellKey::new(Phase::Decode, 512, 4),
        CellKey::new(Phase::Decode, 1024, 2),
    ]
}

/// The cell every damage is done to, and one beside it.
fn damaged_key() -> CellKey {
    keys()[0]
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// The JSON scoring of `run` (exit code, the scoring's cells by their key text).
fn scored_cells(run: &Path, extra: &[&str]) -> (i32, Vec<serde_json::Value>, String) {
    let mut args = vec!["report", path_str(run), "--format", "json"];
    args.extend_from_slice(extra);
    let (code, stdout, stderr) = tokentrace(&args);
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("json scoring");
    let cells = v["cells"].as_array().expect("cells").clone();
    (code, cells, stderr)
}

fn cell_of(cells: &[serde_json::Value], key: CellKey) -> &serde_json::Value {
    cells
        .iter()
        .find(|c| {
            c["phase"] == key.phase.to_string().as_str()
                && c["context"] == key.context
                && c["concurrency"] == key.concurrency
        })
        .unwrap_or_else(|| panic!("no cell {key} in the scoring"))
}

fn flip_byte(path: &Path) {
    let mut bytes = std::fs::read(path).expect("read");
    let at = bytes.len() / 2;
    bytes[at] ^= 0x20;
    std::fs::write(path, bytes).expect("write");
}

/// One kind of damage, done to a copy of the run; returns the file it should name.
type Damage = Box<dyn Fn(&Path) -> PathBuf>;

fn damages() -> Vec<(String, Damage)> {
    let mut out: Vec<(String, Damage)> = Vec::new();
    for file in [
        "requests.parquet",
        "chunks.parquet",
        "metrics.parquet",
        "events.parquet",
        "raw.sse.zst",
        "cell.json",
    ] {
        out.push((
            format!("a byte flipped in {file}"),
            Box::new(move |run: &Path| {
                let path = damaged_key().dir(run).join(file);
                flip_byte(&path);
                path
            }),
        ));
    }
    out.push((
        "chunks.parquet truncated".to_string(),
        Box::new(|run: &Path| {
            let path = damaged_key().dir(run).join("chunks.parquet");
            let bytes = std::fs::read(&path).expect("read");
            std::fs::write(&path, &bytes[..bytes.len() * 2 / 3]).expect("truncate");
            path
        }),
    ));
    out.push((
        "events.parquet dropped".to_string(),
        Box::new(|run: &Path| {
            let path = damaged_key().dir(run).join("events.parquet");
            std::fs::remove_file(&path).expect("remove");
            path
        }),
    ));
    out
}

#[test]
fn each_damage_is_named_by_check_and_refused_by_report_the_rest_scored_as_before() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pristine = dir.path().join("pristine");
    synth::write_run(&pristine, "integrity", &keys(), 3_000).expect("run");
    let (code, out, err) = tokentrace(&["check", path_str(&pristine)]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.matches("checksums verified").count(), 3, "{out}");
    assert!(out.contains("run digest sha256:"), "{out}");
    let (code, before, err) = scored_cells(&pristine, &[]);
    assert_eq!(code, 0, "{err}");

    for (i, (what, damage)) in damages().into_iter().enumerate() {
        let run = dir.path().join(format!("damaged-{i}"));
        copy_dir(&pristine, &run);
        let file = damage(&run);
        let shown = file.display().to_string();

        let (code, out, err) = tokentrace(&["check", path_str(&run)]);
        assert_eq!(code, 1, "{what}: check exits 1\n{out}{err}");
        let bad: Vec<&str> = out.lines().filter(|l| l.starts_with("BAD")).collect();
        assert_eq!(bad.len(), 1, "{what}: one cell named\n{out}");
        assert!(
            bad[0].contains(&damaged_key().to_string()) && bad[0].contains(&shown),
            "{what}: the cell and the file are named\n{out}"
        );

        let (code, after, err) = scored_cells(&run, &[]);
        assert_eq!(code, 1, "{what}: report exits 1\n{err}");
        let refused = cell_of(&after, damaged_key());
        assert_eq!(refused["state"], "incomplete", "{what}: {refused}");
        let reason = refused["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains(&shown),
            "{what}: the reason names the file: {reason}"
        );
        assert!(err.contains(&shown), "{what}: stderr names the file: {err}");
        for key in &keys()[1..] {
            assert_eq!(
                cell_of(&after, *key),
                cell_of(&before, *key),
                "{what}: cell {key} scored as before"
            );
        }
    }
}

#[test]
fn two_cells_files_swapped_are_both_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path().join("run");
    synth::write_run(&run, "integrity", &keys(), 3_000).expect("run");
    let (_, before, _) = scored_cells(&run, &[]);
    let (a, b) = (
        keys()[0].dir(&run).join("requests.parquet"),
        keys()[1].dir(&run).join("requests.parquet"),
    );
    let tmp = dir.path().join("swap");
    std::fs::rename(&a, &tmp).expect("swap");
    std::fs::rename(&b, &a).expect("swap");
    std::fs::rename(&tmp, &b).expect("swap");

    let (code, out, _) = tokentrace(&["check", path_str(&run)]);
    assert_eq!(code, 1, "{out}");
    for file in [&a, &b] {
        assert!(
            out.lines()
                .any(|l| l.starts_with("BAD") && l.contains(&file.display().to_string())),
            "{} named\n{out}",
            file.display()
        );
    }
    let (code, after, _) = scored_cells(&run, &[]);
    assert_eq!(code, 1);
    for key in &keys()[..2] {
        assert_eq!(cell_of(&after, *key)["state"], "incomplete", "{key}");
    }
    assert_eq!(cell_of(&after, keys()[2]), cell_of(&before, keys()[2]));
}

#[test]
fn no_verify_reads_as_it_is_and_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path().join("run");
    synth::write_run(&run, "integrity", &keys(), 3_000).expect("run");
    // A byte of the raw capture, which scoring does not read: verified, the cell is
    // refused; unverified, it scores, and the report says the check was skipped.
    flip_byte(&damaged_key().dir(&run).join("raw.sse.zst"));
    let (code, cells, _) = scored_cells(&run, &[]);
    assert_eq!(code, 1);
    assert_eq!(cell_of(&cells, damaged_key())["state"], "incomplete");

    let (code, cells, err) = scored_cells(&run, &["--no-verify"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(cell_of(&cells, damaged_key())["state"], "complete");
    let (code, md, _) = tokentrace(&["report", path_str(&run), "--no-verify"]);
    assert_eq!(code, 0);
    assert!(md.contains("Checksums not verified (--no-verify)"), "{md}");
    let (_, md, _) = tokentrace(&["report", path_str(&run)]);
    assert!(!md.contains("Checksums not verified"), "{md}");
}

#[test]
fn a_run_written_before_checksums_still_reads_and_says_not_verified() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path().join("run");
    synth::write_run(&run, "integrity", &keys(), 3_000).expect("run");
    let (_, before, _) = scored_cells(&run, &[]);
    // Strip the checksums as an older writer wrote its files.
    for key in keys() {
        let path = key.dir(&run).join("cell.json");
        let mut meta = CellMeta::read_complete(&key.dir(&run)).expect("mark");
        for stat in meta.files.values_mut() {
            stat.sha256 = None;
        }
        let mut text = serde_json::to_vec_pretty(&meta).expect("json");
        text.push(b'\n');
        std::fs::write(&path, text).expect("write mark");
        assert!(
            !std::fs::read_to_string(&path)
                .expect("read")
                .contains("sha256")
        );
    }
    let manifest_path = run.join("manifest.json");
    let mut m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest_path).expect("read")).expect("json");
    m.as_object_mut().expect("object").remove("cells_sha256");
    for c in m["cells"].as_array_mut().expect("cells") {
        c.as_object_mut().expect("cell").remove("cell_sha256");
    }
    std::fs::write(&manifest_path, serde_json::to_vec_pretty(&m).expect("json")).expect("write");
    Manifest::read(&run).expect("an older manifest reads");

    let (code, out, err) = tokentrace(&["check", path_str(&run)]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        out.matches("· not verified: written before checksums")
            .count(),
        3,
        "{out}"
    );
    assert!(
        out.contains(
            "3 cell folders: 3 sound, 0 damaged; 0 missing; 3 not verified (written before checksums)"
        ),
        "{out}"
    );
    assert!(
        out.contains("run digest: none (written before checksums)"),
        "{out}"
    );
    let (code, after, err) = scored_cells(&run, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(after, before);
}

#[test]
fn the_run_digest_tells_a_copy_from_an_edited_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path().join("run");
    synth::write_run(&run, "integrity", &keys(), 3_000).expect("run");
    let digest = |run: &Path| {
        let (_, out, _) = tokentrace(&["check", path_str(run)]);
        out.lines()
            .find(|l| l.starts_with("run digest sha256:"))
            .map(str::to_string)
            .unwrap_or_else(|| panic!("no digest line\n{out}"))
    };
    let copy = dir.path().join("copy");
    copy_dir(&run, &copy);
    assert_eq!(digest(&run), digest(&copy));
    let m = Manifest::read(&run).expect("manifest");
    assert_eq!(
        digest(&run),
        format!("run digest sha256:{}", m.cells_sha256.expect("a digest"))
    );

    // A manifest whose cell list was edited (one cell's recorded checksum swapped for
    // another's) no longer gives its digest: named, exit 1.
    let manifest_path = copy.join("manifest.json");
    let mut v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest_path).expect("read")).expect("json");
    let cells = v["cells"].as_array_mut().expect("cells");
    let first = cells[0]["cell_sha256"].clone();
    cells[0]["cell_sha256"] = cells[1]["cell_sha256"].clone();
    cells[1]["cell_sha256"] = first;
    std::fs::write(&manifest_path, serde_json::to_vec_pretty(&v).expect("json")).expect("write");
    let (code, out, _) = tokentrace(&["check", path_str(&copy)]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("BAD     run digest"), "{out}");
    assert!(
        out.lines().filter(|l| l.starts_with("BAD")).count() >= 3,
        "both commit marks and the digest\n{out}"
    );
}

#[test]
fn check_exits_2_on_a_folder_that_is_not_a_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, out, err) = tokentrace(&["check", path_str(dir.path())]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("manifest.json"), "{err}");
}
