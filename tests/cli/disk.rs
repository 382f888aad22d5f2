//! Disk trouble mid-run, on a real filesystem: a 64 MiB tmpfs mounted in a private mount
//! namespace (`unshare -rm`: no privileges needed where user namespaces are allowed). The
//! disk fills after three cells commit, or the run folder turns read-only (a read-only
//! bind mount over it). The recorder stops with an error naming the file, exits 1, and
//! the committed cells stay byte for byte; once the disk is repaired, `--resume`
//! finishes the run and `check` passes.

use std::path::Path;
use std::process::Command;

use tokentrace_schemas::manifest::{CellStatus, Manifest};

use crate::record::{files_of, tokentrace_ok};

/// Runs inside the namespace: mount the disk, record, break the disk once CELLS cells
/// have committed, copy what is on disk out, repair it, resume, copy again.
const SCRIPT: &str = r#"
set -u
mount -t tmpfs -o size=64m tmpfs "$DISK" || exit 90
"$BIN" record --out "$DISK/run" --contexts 512,1K --concurrency 1,2 --duration 1s \
    --max-tokens 64 --gpu-telemetry off > /dev/null 2> "$OUT/record.err" &
pid=$!
while [ "$(find "$DISK/run/cells" -name cell.json 2>/dev/null | wc -l)" -lt "$CELLS" ]; do
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.02
done
case "$FAULT" in
    full) dd if=/dev/zero of="$DISK/filler" bs=1M 2> /dev/null ;;
    # One mount call binds and turns read-only (two syscalls microseconds apart): Linux
    # refuses the read-only step while a file is open for writing through the new bind,
    # so two separate mount processes raced the recorder opening its next cell's files.
    # Should the race still be lost, the read-only step is retried until those close.
    readonly)
        if ! mount -o bind,ro "$DISK/run" "$DISK/run" 2> /dev/null; then
            n=0
            until mount -o remount,bind,ro "$DISK/run" 2> /dev/null; do
                n=$((n + 1)); [ "$n" -ge 500 ] && exit 91; sleep 0.01
            done
        fi ;;
esac
wait "$pid"; echo $? > "$OUT/record.code"
cp -a "$DISK/run" "$OUT/failed"
case "$FAULT" in
    full) rm -f "$DISK/filler" ;;
    readonly) umount "$DISK/run" ;;
esac
"$BIN" record --out "$DISK/run" --resume --gpu-telemetry off > /dev/null 2> "$OUT/resume.err"
echo $? > "$OUT/resume.code"
cp -a "$DISK/run" "$OUT/after"
"#;

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Breaks the disk with `fault` after three cells and checks what the recorder did.
fn disk_trouble(fault: &str, says: &str) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let disk = tmp.path().join("disk");
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&disk).expect("mount point");
    std::fs::create_dir_all(&out).expect("out");
    let ran = Command::new("unshare")
        .args(["-rm", "sh", "-c", SCRIPT])
        .env("BIN", env!("CARGO_BIN_EXE_tokentrace"))
        .env("DISK", &disk)
        .env("OUT", &out)
        .env("FAULT", fault)
        .env("CELLS", "3")
        .output()
        .expect("unshare (util-linux) runs");
    assert!(
        ran.status.success(),
        "the namespace script failed ({}; 90: no tmpfs mount, 91: no read-only bind mount): {}",
        ran.status,
        String::from_utf8_lossy(&ran.stderr)
    );
    let err = read(&out.join("record.err"));
    assert_eq!(read(&out.join("record.code")).trim(), "1", "{err}");
    // The error names the file it could not write, under the run folder, and the cause.
    let named = err
        .lines()
        .any(|l| l.contains(&format!("{}/run/", disk.display())) && l.contains(says));
    assert!(named, "a clear error naming the file:\n{err}");

    let failed = out.join("failed");
    let m = Manifest::read(&failed).expect("the manifest survives");
    let done = m
        .cells
        .iter()
        .filter(|c| c.status == CellStatus::Complete)
        .count();
    assert!(done >= 3, "{:?}", m.cells);
    assert!(
        done < m.cells.len(),
        "the fault stopped the run: {:?}",
        m.cells
    );
    assert!(
        !failed.join("manifest.json.tmp").exists(),
        "no half-written manifest left"
    );
    let before = files_of(&failed);
    assert!(!before.is_empty());
    let check = Command::new(env!("CARGO_BIN_EXE_tokentrace"))
        .arg("check")
        .arg(&failed)
        .output()
        .expect("check");
    let said = String::from_utf8_lossy(&check.stdout);
    assert!(
        said.contains(&format!("{done} cell folders: {done} sound, 0 damaged")),
        "the committed cells are sound after the fault:\n{said}"
    );

    // Repaired, the run resumes to the end and nothing committed changed.
    let resume_err = read(&out.join("resume.err"));
    assert_eq!(read(&out.join("resume.code")).trim(), "0", "{resume_err}");
    let after = out.join("after");
    let m = Manifest::read(&after).expect("manifest");
    assert!(
        m.cells.iter().all(|c| c.status == CellStatus::Complete),
        "{:?}",
        m.cells
    );
    let now = files_of(&after);
    for (path, bytes) in &before {
        assert!(now.get(path) == Some(bytes), "{path} changed on resume");
    }
    assert!(!after.join(".staging").exists(), "a staging folder is left");
    tokentrace_ok(&["check"], &after);
}

#[test]
fn a_disk_that_fills_mid_run_loses_nothing_committed() {
    disk_trouble("full", "No space left on device");
}

#[test]
fn a_run_folder_that_turns_read_only_loses_nothing_committed() {
    disk_trouble("readonly", "Read-only file system");
}
