//! `tokentrace check RUN`: proves a run folder is readable before anyone analyzes it,
//! e.g. after copying it off the GPU box. Prints one line per cell; damaged or incomplete
//! cells are listed with the file and reason, and make the exit code 1.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use tokentrace_schemas::column::StrEnum;
use tokentrace_schemas::layout::list_cells;
use tokentrace_schemas::manifest::{CellStatus, Manifest};
use tokentrace_schemas::verify::verify_cell;

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
    let mut present = BTreeSet::new();
    for (key, dir) in &found {
        present.insert(*key);
        match verify_cell(dir) {
            Ok((_, counts)) => {
                let counts: Vec<String> = counts.iter().map(|(n, c)| format!("{n} {c}")).collect();
                writeln!(out, "ok      {key}: {}", counts.join(", "))?;
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
    let summary = CheckSummary {
        cells: found.len(),
        damaged,
        missing,
    };
    writeln!(
        out,
        "{} cell folders: {} sound, {} damaged; {} missing",
        summary.cells,
        summary.cells - summary.damaged,
        summary.damaged,
        summary.missing
    )?;
    Ok(summary)
}
