//! `tokentrace check RUN`: proves a run folder is the one written and readable before
//! anyone analyzes it, e.g. after copying it off the GPU box. Prints one line per cell
//! (checksums, then every row decoded) and the run's digest; damaged or missing cells are
//! named with the file and reason. Exit codes: 0 sound, 1 damaged, 2 not a run folder.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use tokentrace_schemas::column::StrEnum;
use tokentrace_schemas::layout::list_cells;
use tokentrace_schemas::manifest::{CellStatus, Manifest};
use tokentrace_schemas::verify::{Checksums, verify_cell, verify_commit_mark};

/// Arguments of `tokentrace check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The run folder (the one holding manifest.json), or its object-store URL
    /// (s3://bucket/prefix, file:///path).
    pub run: PathBuf,
}

/// What a check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckSummary {
    /// Cell folders found under `cells/`.
    pub cells: usize,
    /// Of those, cells that failed verification.
    pub damaged: usize,
    /// Cells the manifest lists as complete whose folder is absent.
    pub missing: usize,
    /// Sound cells whose commit mark records no checksums (written before them).
    pub unverified: usize,
}

impl CheckSummary {
    pub fn sound(&self) -> bool {
        self.damaged == 0 && self.missing == 0
    }

    pub fn exit_code(&self) -> ExitCode {
        if self.sound() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        }
    }
}

/// Checks the run; writes the report to `out`.
pub fn run(args: &CheckArgs, out: &mut impl Write) -> anyhow::Result<CheckSummary> {
    let manifest = Manifest::read(&args.run).context("cannot read the run's manifest")?;
    let found = list_cells(&args.run).context("cannot list the run's cells")?;
    writeln!(
        out,
        "run {} · schema v{} · written by {} · model {} · {}",
        manifest.run_id,
        manifest.schema_version,
        manifest.tool.label(),
        manifest.model,
        manifest.target.url
    )?;
    let mut damaged = 0usize;
    let mut missing = 0usize;
    let mut unverified = 0usize;
    let mut present = BTreeSet::new();
    for (key, dir) in &found {
        present.insert(*key);
        let recorded = manifest.cell_sha256(*key);
        match verify_commit_mark(dir, recorded).and_then(|()| verify_cell(dir)) {
            Ok(v) => {
                let counts: Vec<String> =
                    v.counts.iter().map(|(n, c)| format!("{n} {c}")).collect();
                if v.checksums == Checksums::NotRecorded {
                    unverified += 1;
                }
                writeln!(
                    out,
                    "ok      {key}: {} · {}",
                    counts.join(", "),
                    v.checksums.label()
                )?;
                unread_details(dir, *key, out)?;
            }
            Err(e) => {
                damaged += 1;
                writeln!(out, "BAD     {key}: {e}")?;
            }
        }
    }
    for entry in &manifest.cells {
        if entry.status != CellStatus::Complete && !present.contains(&entry.key()) {
            writeln!(
                out,
                "{:<7} {}{}",
                entry.status.as_str(),
                entry.key(),
                entry
                    .reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            )?;
        }
        if entry.status == CellStatus::Complete && !present.contains(&entry.key()) {
            missing += 1;
            writeln!(
                out,
                "MISSING {}: the manifest lists it complete but its folder is absent",
                entry.key()
            )?;
        }
    }
    if !digest_line(&manifest, out)? {
        damaged += 1;
    }
    let summary = CheckSummary {
        cells: found.len(),
        damaged,
        missing,
        unverified,
    };
    let unverified = if summary.unverified > 0 {
        format!(
            "; {} not verified (written before checksums)",
            summary.unverified
        )
    } else {
        String::new()
    };
    writeln!(
        out,
        "{} cell folders: {} sound, {} damaged; {} missing{unverified}",
        summary.cells,
        summary.cells.saturating_sub(summary.damaged),
        summary.damaged,
        summary.missing
    )?;
    Ok(summary)
}

/// Lists a sound cell's `warmup_end` and `drain_end` events whose detail no reader form
/// matches (`protocol::unread_detail`): the report reads them as saying nothing, and
/// warns; `check` names them here, one line each, with the text. They are not damage:
/// the exit status does not change.
fn unread_details(
    dir: &std::path::Path,
    key: tokentrace_schemas::layout::CellKey,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    use tokentrace_schemas::tables::Events;
    let path = dir.join(tokentrace_schemas::layout::table_file::<Events>());
    if !path.exists() {
        // An imported cell holds figures, not a trace: no events to read.
        return Ok(());
    }
    let events = tokentrace_schemas::reader::read_table::<Events>(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    for e in events {
        if tokentrace_schemas::protocol::unread_detail(e.kind, e.detail.as_deref()) {
            writeln!(
                out,
                "note    {key}: its {} event at {} ns says `{}`, which no reader form matches: the report reads it as saying nothing, and warns",
                e.kind.as_str(),
                e.time_ns,
                e.detail.unwrap_or_default()
            )?;
        }
    }
    Ok(())
}

/// Prints the run's digest (the one line to compare with a copy's); false when the
/// manifest records one and the cells' commit marks listed there no longer give it.
fn digest_line(manifest: &Manifest, out: &mut impl Write) -> anyhow::Result<bool> {
    match (manifest.cells_sha256, manifest.cells_digest()) {
        (Some(recorded), Some(listed)) if recorded == listed => {
            writeln!(out, "run digest sha256:{recorded}")?;
            Ok(true)
        }
        (Some(recorded), listed) => {
            writeln!(
                out,
                "BAD     run digest: manifest.json records sha256:{recorded}, its cell list gives {}: the manifest was edited",
                listed.map_or("none".to_string(), |l| format!("sha256:{l}"))
            )?;
            Ok(false)
        }
        (None, _) => {
            writeln!(out, "run digest: none (written before checksums)")?;
            Ok(true)
        }
    }
}
