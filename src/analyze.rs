//! `tokentrace report`, `rescore` and `diff`: the analyzer's commands. They read run
//! folders (never a server), score them under a named rule set, and print or write the
//! result; the trace itself is never modified.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use tokentrace_analyzer::contract::{Scoring, Verdict};
use tokentrace_analyzer::report::{self, Format};
use tokentrace_analyzer::stages::{self, Stage};
use tokentrace_analyzer::{RuleSet, Verify, diff, score_dir_with};

/// The rule set used when none is given.
pub const DEFAULT_RULES: &str = "default";

fn format(s: &str) -> Result<Format, String> {
    Format::parse(s).ok_or_else(|| format!("`{s}`: expected md, json, csv or html"))
}

/// `--timings`: where a command's time and memory went, stage by stage.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct Timings {
    /// Print on stderr, when done, the time and memory of each stage of scoring (open,
    /// verify, load, rules, loops, render) and the wall time.
    #[arg(long)]
    pub timings: bool,
}

impl Timings {
    /// Runs the command `f`, then prints the stages' table when asked for.
    pub fn around<R>(self, f: impl FnOnce() -> R) -> R {
        let started = std::time::Instant::now();
        let r = f();
        if self.timings {
            eprint!("{}", tokentrace_analyzer::stages::table(started.elapsed()));
        }
        r
    }
}

/// Arguments of `tokentrace report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// The run folder (the one holding manifest.json), or its object-store URL
    /// (s3://bucket/prefix, file:///path); with --format html, several runs give one
    /// page with each run's matrix and ratio heat maps against the first.
    #[arg(required = true)]
    pub runs: Vec<PathBuf>,
    /// Rule set: a TOML file, or a built-in name (default, reference, reference@0.6.2, default@1.4.0).
    #[arg(long, default_value = DEFAULT_RULES)]
    pub rules: String,
    /// Output format: md (the reference layout), json (the full scoring), csv, or html
    /// (one self-contained page: the matrix as a heat map, sortable tables).
    #[arg(long, value_parser = format, default_value = "md")]
    pub format: Format,
    /// Write the report to this file instead of standard output.
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub verify: NoVerify,
    #[command(flatten)]
    pub timings: Timings,
}

/// Arguments of `tokentrace rescore`.
#[derive(Debug, clap::Args)]
pub struct RescoreArgs {
    /// Run folders (or object-store URLs) to score; each gets
    /// RUN/results/<name>@<version>.json (in the store, for a URL).
    #[arg(required = true)]
    pub runs: Vec<PathBuf>,
    /// Rule set: a TOML file, or a built-in name (default, reference, reference@0.6.2, default@1.4.0).
    #[arg(long, default_value = DEFAULT_RULES)]
    pub rules: String,
    #[command(flatten)]
    pub verify: NoVerify,
    #[command(flatten)]
    pub timings: Timings,
}

/// `--no-verify`: read the cells' files without checking their checksums.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct NoVerify {
    /// Read each cell's files without first checking them against the size and SHA-256
    /// its commit mark (cell.json) records: faster on a large run, but a damaged file is
    /// read as it is. The report says the check was skipped.
    #[arg(long)]
    pub no_verify: bool,
}

impl NoVerify {
    pub fn verify(self) -> Verify {
        if self.no_verify {
            Verify::Skip
        } else {
            Verify::Checksums
        }
    }
}

/// Arguments of `tokentrace diff`.
#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// A run folder or object-store URL, or a scoring written by `rescore`
    /// (RUN/results/NAME@VERSION.json).
    pub a: PathBuf,
    /// The other side, likewise.
    pub b: PathBuf,
    /// Rule set to score A with when A is a run folder.
    #[arg(long, default_value = DEFAULT_RULES)]
    pub rules: String,
    /// Rule set to score B with when B is a run folder [default: the one for A].
    #[arg(long)]
    pub rules_b: Option<String>,
    /// Hide figure changes smaller than this relative change (0.01 = 1%).
    #[arg(long, default_value_t = 0.0)]
    pub min_change: f64,
    /// Output format: md, json, or html (both matrices and the ratio heat map).
    #[arg(long, value_parser = format, default_value = "md")]
    pub format: Format,
    #[command(flatten)]
    pub timings: Timings,
}

fn rules(spec: &str) -> anyhow::Result<RuleSet> {
    Ok(RuleSet::load(spec)?)
}

fn scored(run: &Path, rules: &RuleSet, verify: Verify) -> anyhow::Result<Scoring> {
    score_dir_with(run, rules, verify).with_context(|| format!("cannot score {}", run.display()))
}

/// The scoring of the run in `dir` and each cell's drill-down trace for the HTML page,
/// drawn from the same read.
pub fn scored_with_traces(
    dir: &Path,
    rules: &RuleSet,
    verify: Verify,
) -> anyhow::Result<(
    Scoring,
    std::collections::BTreeMap<
        tokentrace_schemas::layout::CellKey,
        tokentrace_analyzer::trace::CellTrace,
    >,
)> {
    let run = tokentrace_analyzer::Run::open_with(dir, verify)
        .with_context(|| format!("cannot score {}", dir.display()))?;
    tokentrace_analyzer::score::score_run(&run, rules, true)
        .with_context(|| format!("cannot score {}", dir.display()))
}

/// Tells on stderr which cells could not be scored because their folder is damaged or
/// incomplete; true when there were any.
fn report_damage(run: &crate::remote::LocalRun, s: &Scoring) -> bool {
    let bad: Vec<_> = s
        .cells
        .iter()
        .filter(|c| c.state == tokentrace_analyzer::contract::CellScoreState::Incomplete)
        .collect();
    for c in &bad {
        eprintln!(
            "tokentrace: {}: cell {} context={} concurrency={} not scored: {}",
            run.shown,
            c.phase,
            c.context,
            c.concurrency,
            c.reason.as_deref().unwrap_or("incomplete")
        );
    }
    !bad.is_empty()
}

fn write_out(path: Option<&Path>, text: &str) -> anyhow::Result<()> {
    match path {
        Some(p) => tokentrace_schemas::fsutil::write_atomic(p, text.as_bytes())
            .with_context(|| format!("cannot write {}", p.display())),
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .context("cannot write to standard output")
        }
    }
}

/// `tokentrace report`: exit 0, or 1 when some cell folder could not be scored (the
/// report still lists it, with the reason).
pub fn report(args: &ReportArgs) -> anyhow::Result<ExitCode> {
    let rules = rules(&args.rules)?;
    if let [first, _, ..] = args.runs.as_slice() {
        if args.format != Format::Html {
            bail!(
                "{}: several runs are compared on one page: add --format html",
                first.display()
            );
        }
        let mut sides = Vec::new();
        let mut damaged = false;
        for (i, run) in args.runs.iter().enumerate() {
            let run = crate::remote::local(run)?;
            let s = scored(run.dir(), &rules, args.verify.verify())?;
            damaged |= report_damage(&run, &s);
            sides.push((format!("run {}", i + 1), s));
        }
        write_out(
            args.out.as_deref(),
            &tokentrace_analyzer::report::comparison(&sides),
        )?;
        return Ok(if damaged {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        });
    }
    let given = crate::remote::local(args.runs.first().context("no run folder given")?)?;
    let run_dir = given.dir();
    let (s, text) = if args.format == Format::Html {
        let (s, traces) = scored_with_traces(run_dir, &rules, args.verify.verify())?;
        let text = stages::time(Stage::Render, || {
            tokentrace_analyzer::report::html_page(&s, &traces)
        });
        (s, text)
    } else {
        let s = scored(run_dir, &rules, args.verify.verify())?;
        let text = stages::time(Stage::Render, || report::render(&s, args.format));
        (s, text)
    };
    write_out(args.out.as_deref(), &text)?;
    Ok(if report_damage(&given, &s) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Where `rescore` writes a run's scoring under `rules`.
pub fn results_path(run: &Path, rules: &RuleSet) -> PathBuf {
    run.join("results").join(format!("{}.json", rules.id()))
}

/// `tokentrace rescore`: writes each run's scoring next to (never into) its trace.
pub fn rescore(args: &RescoreArgs, out: &mut impl Write) -> anyhow::Result<ExitCode> {
    let rules = rules(&args.rules)?;
    let mut damaged = false;
    for given in &args.runs {
        let local = crate::remote::local(given)?;
        let run = local.dir();
        // An imported run holds another tool's figures: no trace to score.
        if let Ok(m) = tokentrace_schemas::manifest::Manifest::read(run)
            && let Some(i) = &m.imported
        {
            bail!(
                "{}: {}: there is no trace to score under other rules",
                given.display(),
                tokentrace_analyzer::imported::header(i)
            );
        }
        let s = scored(run, &rules, args.verify.verify())?;
        damaged |= report_damage(&local, &s);
        let path = results_path(run, &rules);
        let dir = run.join("results");
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let text = stages::time(Stage::Render, || report::json(&s));
        write_out(Some(&path), &text)?;
        // A stored run gets its scoring back in the store, next to its trace.
        let written = crate::remote::upload_back(&local, &path)?;
        let count = |v: Verdict| s.cells.iter().filter(|c| c.verdict == Some(v)).count();
        let unscored = s.cells.iter().filter(|c| c.verdict.is_none()).count();
        writeln!(
            out,
            "{}: {} cells: {} valid, {} requests queued, {} looped, {} bad output, {} error, {} not scored",
            written,
            s.cells.len(),
            count(Verdict::Valid),
            count(Verdict::RequestsQueued),
            count(Verdict::Looped),
            count(Verdict::BadOutput),
            count(Verdict::Error),
            unscored
        )
        .context("cannot write to standard output")?;
    }
    Ok(if damaged {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn side(path: &Path, rules_spec: &str) -> anyhow::Result<Scoring> {
    if tokentrace_recorder::store::bucket::is_url(&path.display().to_string()) {
        let local = crate::remote::local(path)?;
        scored(local.dir(), &rules(rules_spec)?, Verify::Checksums)
    } else if path.is_dir() {
        scored(path, &rules(rules_spec)?, Verify::Checksums)
    } else if path.is_file() {
        Ok(diff::read_scoring(path)?)
    } else {
        bail!("{}: no such run folder or scoring file", path.display())
    }
}

/// `tokentrace diff`: prints the comparison; exit 0 whether or not they differ.
pub fn diff(args: &DiffArgs, out: &mut impl Write) -> anyhow::Result<ExitCode> {
    if args.format == Format::Csv {
        bail!("diff prints md, json or html");
    }
    let a = side(&args.a, &args.rules)?;
    let b = side(&args.b, args.rules_b.as_deref().unwrap_or(&args.rules))?;
    let d = diff::diff(&a, &b, args.min_change);
    let text = match args.format {
        Format::Html => {
            tokentrace_analyzer::report::comparison(&[("A".to_string(), a), ("B".to_string(), b)])
        }
        Format::Json => {
            let mut t = serde_json::to_string_pretty(&d).context("cannot encode the diff")?;
            t.push('\n');
            t
        }
        _ => diff::markdown(&d),
    };
    out.write_all(text.as_bytes())
        .context("cannot write to standard output")?;
    Ok(ExitCode::SUCCESS)
}
