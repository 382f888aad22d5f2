//! `tokentrace catalog`: finds every run under folders and object-store prefixes, scores
//! each under one rule set, and writes the fleet table (one row per run × cell, with the
//! run's facts and every figure and verdict) as one Parquet file.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use tokentrace_analyzer::catalog::{self, Entry};
use tokentrace_analyzer::{RuleSet, score_dir};
use tokentrace_recorder::store::bucket::{RunStore, is_url};

/// Arguments of `tokentrace catalog`.
#[derive(Debug, clap::Args)]
pub struct CatalogArgs {
    /// Folders or object-store URLs (s3://bucket/prefix, file:///path) to search: every
    /// run under them (a folder or prefix holding manifest.json, at any depth) is scored.
    #[arg(required = true)]
    pub sources: Vec<String>,
    /// Rule set every run is scored under: a TOML file or a built-in name.
    #[arg(long, default_value = crate::analyze::DEFAULT_RULES)]
    pub rules: String,
    /// The Parquet file to write.
    #[arg(long)]
    pub out: PathBuf,
    #[command(flatten)]
    pub timings: crate::analyze::Timings,
}

/// Run folders under `dir` (itself included), sorted; a run's own folders are not
/// searched.
fn local_runs(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    if dir
        .join(tokentrace_schemas::layout::MANIFEST_FILE)
        .is_file()
    {
        out.push(dir.to_path_buf());
        return Ok(());
    }
    let mut subdirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .filter(|p| {
            !p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('.'))
        })
        .collect();
    subdirs.sort();
    for d in subdirs {
        local_runs(&d, out)?;
    }
    Ok(())
}

/// Every run the sources name, as folders or URLs, in the order found.
pub(crate) fn find(sources: &[String]) -> anyhow::Result<Vec<String>> {
    let mut runs = Vec::new();
    for s in sources {
        if is_url(s) {
            let store = RunStore::open(s)?;
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("cannot start the async runtime")?;
            runs.extend(
                rt.block_on(store.find_runs())
                    .with_context(|| format!("cannot list {s}"))?,
            );
        } else {
            let mut found = Vec::new();
            local_runs(Path::new(s), &mut found)?;
            runs.extend(found.into_iter().map(|p| p.display().to_string()));
        }
    }
    Ok(runs)
}

/// `tokentrace catalog`: exit 0, or 1 when a run could not be scored (the table holds
/// the others, and stderr names it).
pub fn run(args: &CatalogArgs, out: &mut impl Write) -> anyhow::Result<ExitCode> {
    let rules = RuleSet::load(&args.rules)?;
    let runs = find(&args.sources)?;
    if runs.is_empty() {
        anyhow::bail!("no run found under {}", args.sources.join(", "));
    }
    let mut entries = Vec::new();
    let mut failed = false;
    for location in runs {
        let scored = crate::remote::local(Path::new(&location))
            .and_then(|local| Ok(score_dir(local.dir(), &rules)?));
        match scored {
            Ok(scoring) => entries.push(Entry { location, scoring }),
            Err(e) => {
                failed = true;
                eprintln!("tokentrace: {location}: not catalogued: {e:#}");
            }
        }
    }
    let rows = catalog::write(&entries, &args.out)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    writeln!(
        out,
        "{}: {rows} rows from {} runs under rule set {}",
        args.out.display(),
        entries.len(),
        rules.id()
    )
    .context("cannot write to standard output")?;
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
