//! `tokentrace import`: another tool's results file made a run folder whose cells hold
//! that tool's figures and verdicts (no tokens), so old matrices sit beside new runs in
//! `report`, `diff` and `catalog`. The file itself is kept in the folder, byte for byte.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use tokentrace_analyzer::contract::{
    CellScore, CellScoreState, Evidence, Figures, Summary, Verdict,
};
use tokentrace_analyzer::imported::FIGURES_FILE;
use tokentrace_schemas::digest::Sha256;
use tokentrace_schemas::layout::{CELL_FILE, CellKey, Phase};
use tokentrace_schemas::manifest::{
    CellEntry, CellMeta, CellStatus, Clock, EngineInfo, FileStat, Imported, Manifest, RunConfig,
    ServerCapabilities, Target, ToolInfo, write_json,
};
use tokentrace_schemas::tables::Endpoint;
use tokentrace_wire::refbench::{self, RefCell, RefPrefill, RefRun, Stats};

/// The folder of an imported run that keeps the imported file.
pub const SOURCE_DIR: &str = "source";
/// The largest results file read (the reference tool's files are a few MB: one
/// per-request sample per streamed request).
const MAX_FILE_BYTES: u64 = 1 << 30;

/// The tools whose results can be imported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum From {
    /// llm-inference-bench (`llm_decode_bench.py --output FILE`), 0.4.x to 0.6.x.
    #[value(name = "lib", alias = "llm-inference-bench")]
    Lib,
}

/// Arguments of `tokentrace import`.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// The results file (llm-inference-bench's `--output` JSON).
    pub file: PathBuf,
    /// The run folder to write (it must not exist, or be empty).
    #[arg(long)]
    pub out: PathBuf,
    /// Which tool wrote the file; detected from its content when not given.
    #[arg(long, value_enum)]
    pub from: Option<From>,
}

/// Imports `args.file` into `args.out`: exit 0; 2 when the file is not a results file
/// (the error names what was expected and where it differs); an error when the folder
/// cannot be written.
pub fn run(args: &ImportArgs, out: &mut impl std::io::Write) -> anyhow::Result<ExitCode> {
    let bytes = match read(&args.file) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("tokentrace: {}: {e:#}", args.file.display());
            return Ok(ExitCode::from(2));
        }
    };
    // One tool so far: `--from lib` and detection from the content pick the same reader.
    let parse = match args.from.unwrap_or(From::Lib) {
        From::Lib => refbench::parse,
    };
    let parsed = match parse(&bytes) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tokentrace: {}: {e}", args.file.display());
            return Ok(ExitCode::from(2));
        }
    };
    if !parsed.known {
        eprintln!(
            "tokentrace: warning: {} {} is not a version whose results file was read here ({}): imported by the fields it shares with them{}",
            refbench::TOOL,
            parsed.version,
            refbench::KNOWN_VERSIONS.join(", "),
            if parsed.skipped.is_empty() {
                String::new()
            } else {
                format!("; skipped: {}", parsed.skipped.join(", "))
            }
        );
    }
    if !parsed.complete {
        eprintln!(
            "tokentrace: warning: the {} run was interrupted (empty engine and event log): the cells it had not finished are missing",
            refbench::TOOL
        );
    }
    let cells = write_run(&args.out, &args.file, &bytes, &parsed)?;
    writeln!(
        out,
        "imported {} {} ({} cells) into {}",
        refbench::TOOL,
        parsed.version,
        cells,
        args.out.display()
    )?;
    Ok(ExitCode::SUCCESS)
}

/// The file's bytes, refusing a file too large to be a results file.
fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    let size = std::fs::metadata(path).context("cannot read")?.len();
    if size > MAX_FILE_BYTES {
        bail!("{size} bytes: larger than any results file ({MAX_FILE_BYTES} bytes at most)");
    }
    std::fs::read(path).context("cannot read")
}

/// Writes the run folder: the file under `source/`, one folder per cell with its
/// figures and commit mark, then the manifest. Returns the number of cells.
fn write_run(run: &Path, file: &Path, bytes: &[u8], r: &RefRun) -> anyhow::Result<usize> {
    if run.join(tokentrace_schemas::layout::MANIFEST_FILE).exists()
        || std::fs::read_dir(run).is_ok_and(|mut d| d.next().is_some())
    {
        bail!(
            "{}: not empty: import writes a new run folder",
            run.display()
        );
    }
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("results.json")
        .to_string();
    let source = run.join(SOURCE_DIR);
    std::fs::create_dir_all(&source)
        .with_context(|| format!("cannot create {}", source.display()))?;
    let kept = source.join(&name);
    tokentrace_schemas::fsutil::write_atomic(&kept, bytes)
        .with_context(|| format!("cannot write {}", kept.display()))?;
    let scores = cells(r);
    for s in &scores {
        write_cell(run, s)?;
    }
    let imported = Imported {
        tool: refbench::TOOL.to_string(),
        version: r.version.clone(),
        file: name.clone(),
        sha256: Sha256::of_bytes(bytes),
        kept_as: format!("{SOURCE_DIR}/{name}"),
        saved_at: r.saved_at.clone(),
        complete: r.complete,
        skipped: r.skipped.clone(),
        by: ToolInfo::current(),
    };
    let m = manifest(r, &scores, imported);
    m.write(run)
        .with_context(|| format!("cannot write the manifest of {}", run.display()))?;
    Ok(scores.len())
}

/// One cell's folder: its figures, then its commit mark.
fn write_cell(run: &Path, s: &CellScore) -> anyhow::Result<()> {
    let dir = s.key().dir(run);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut json = serde_json::to_vec_pretty(s)?;
    json.push(b'\n');
    let path = dir.join(FIGURES_FILE);
    tokentrace_schemas::fsutil::write_atomic(&path, &json)
        .with_context(|| format!("cannot write {}", path.display()))?;
    let meta = CellMeta {
        schema_version: tokentrace_schemas::IMPORTED_VERSION,
        created_by: tokentrace_schemas::CREATED_BY.to_string(),
        phase: s.phase,
        context: s.context,
        concurrency: s.concurrency,
        rate: None,
        replay: None,
        complete: true,
        files: BTreeMap::from([(
            FIGURES_FILE.to_string(),
            FileStat {
                rows: 1,
                bytes: json.len() as u64,
                sha256: Some(Sha256::of_bytes(&json)),
            },
        )]),
    };
    let path = dir.join(CELL_FILE);
    write_json(&path, &meta).with_context(|| format!("cannot write {}", path.display()))
}

/// The manifest of an imported run: what the file says of the server, the model and
/// the matrix; every imported cell complete.
fn manifest(r: &RefRun, cells: &[CellScore], imported: Imported) -> Manifest {
    // The matrix's axes as the file lists them, else as its decode cells have them.
    let axis = |given: &[u32], of: fn(&CellScore) -> u32| {
        let mut v: Vec<u32> = if given.is_empty() {
            cells
                .iter()
                .filter(|c| c.phase == Phase::Decode)
                .map(of)
                .collect()
        } else {
            given.to_vec()
        };
        v.sort_unstable();
        v.dedup();
        v
    };
    let contexts = axis(&r.contexts, |c| c.context);
    let concurrency = axis(&r.concurrency, |c| c.concurrency);
    Manifest {
        schema_version: tokentrace_schemas::IMPORTED_VERSION,
        tool: ToolInfo {
            name: refbench::TOOL.to_string(),
            version: r.version.clone(),
            commit: None,
            features: Vec::new(),
        },
        run_id: format!("import-{}", &imported.sha256.to_string()[..16]),
        // The file says when it was saved (local time, no zone: `imported.saved_at`),
        // not when the run started.
        clock: Clock {
            utc_at_zero: String::new(),
            monotonic_at_zero_ns: None,
        },
        target: Target {
            // As a recording keeps it: no credentials, no secret query values.
            url: tokentrace_schemas::redact::redact_url(&r.server),
            api_key: false,
        },
        model: r.model.clone(),
        engine: EngineInfo {
            name: (!r.engine.is_empty()).then(|| r.engine.clone()),
            version: None,
            details: BTreeMap::new(),
        },
        hardware: (!r.gpus.is_empty()).then(|| {
            format!(
                "{} (nvidia-smi on the machine that ran {})",
                r.gpus.join("; "),
                refbench::TOOL
            )
        }),
        launch_command: None,
        facts: Vec::new(),
        capabilities: ServerCapabilities::default(),
        config: RunConfig {
            endpoint: Endpoint::Chat,
            contexts,
            concurrency,
            window_ns: r.duration_s.map_or(0, |s| (s * 1e9) as i64),
            max_tokens: r
                .max_tokens
                .and_then(|m| u32::try_from(m).ok())
                .unwrap_or(0),
            ignore_eos: true,
            scrape_interval_ns: 0,
            warmup_timeout_ns: 0,
            drain_timeout_ns: 0,
            stall_timeout_ns: 0,
            prompt_tolerance_tokens: 0,
            prompt_nonces: Vec::new(),
            prefill_mode: None,
            burst: None,
            rate: None,
            replay: None,
            conversation: None,
        },
        cells: cells
            .iter()
            .map(|c| CellEntry {
                status: CellStatus::Complete,
                ..CellEntry::planned(c.key())
            })
            .collect(),
        reparsed: None,
        imported: Some(imported),
        cells_sha256: None,
    }
}

/// Every cell of the file as tokentrace's scoring contract holds it.
pub fn cells(r: &RefRun) -> Vec<CellScore> {
    let mut out: BTreeMap<CellKey, CellScore> = BTreeMap::new();
    for p in &r.prefill {
        let s = prefill_cell(p);
        out.insert(s.key(), s);
    }
    for (phase, cells) in [(Phase::Decode, &r.decode), (Phase::Burst, &r.burst)] {
        for c in cells {
            let s = decode_cell(phase, c);
            // A level listed twice ran twice: the later one stands, as in the
            // tool's own summary table.
            out.insert(s.key(), s);
        }
    }
    out.into_values().collect()
}

/// A cell of `key` with the tool's verdict and what it said.
fn cell(key: CellKey, verdict: Verdict, said: Option<String>, figures: Figures) -> CellScore {
    CellScore {
        phase: key.phase,
        context: key.context,
        concurrency: key.concurrency,
        rate: None,
        replay: None,
        state: CellScoreState::Complete,
        reason: None,
        verdict: Some(verdict),
        evidence: said
            .map(|said| Evidence::Imported { verdict, said })
            .into_iter()
            .collect(),
        evidence_omitted: 0,
        warnings: Vec::new(),
        figures: Some(figures),
    }
}

/// A prefill row: the scout's TTFT and prompt tok/s as the tool rounded them.
fn prefill_cell(p: &RefPrefill) -> CellScore {
    let key = CellKey::new(Phase::Prefill, p.context, 1);
    let measured = p.tok_per_sec > 0.0 && p.ttft_s > 0.0;
    let figures = Figures {
        prompt_tokens: (p.prompt_tokens > 0).then_some(p.prompt_tokens),
        prompt_tok_s: measured.then_some(p.tok_per_sec),
        total_tok_s: measured.then_some(p.tok_per_sec),
        ttft_ms: summary(
            &Stats {
                p50: p.ttft_s,
                ..Stats::default()
            },
            1e3,
            1,
        ),
        requests_scored: usize::from(measured),
        ..Figures::default()
    };
    if measured {
        cell(key, Verdict::Valid, None, figures)
    } else {
        let said = format!(
            "{} has no prefill figure for this context (tok_per_sec {}, {} samples)",
            refbench::TOOL,
            p.tok_per_sec,
            p.samples
        );
        cell(key, Verdict::Error, Some(said), figures)
    }
}

/// A decode or burst cell: the tool's figures, and its verdict from its flags.
fn decode_cell(phase: Phase, c: &RefCell) -> CellScore {
    let key = CellKey::new(phase, c.context, c.concurrency);
    let (verdict, said) = verdict(c);
    let n = usize::try_from(c.request_count.max(0)).unwrap_or(0);
    let valid_figure = c.aggregate_tps >= 0.0 && verdict != Verdict::Error;
    let metrics = c.avg_running > 0.0 || c.max_running > 0.0;
    let figures = Figures {
        window_s: (c.measurement_s > 0.0).then_some(c.measurement_s),
        total_tok_s: valid_figure.then_some(c.aggregate_tps),
        output_tokens: c.client_output_tokens,
        completed_requests: c.completed_request_count,
        requests_scored: n,
        ttft_ms: summary(&c.ttft_s, 1e3, n),
        time_between_tokens_ms: summary(&c.itl_s, 1e3, n),
        e2e_latency_ms: summary(&c.latency_s, 1e3, n),
        // The tool's "per request tok/s" is its total over the concurrency.
        per_request_tok_s: Summary {
            n,
            median: (valid_figure && c.per_request_avg_tps > 0.0).then_some(c.per_request_avg_tps),
            ..Summary::default()
        },
        active_requests: metrics.then_some(c.avg_running),
        active_source: metrics.then(|| "server".to_string()),
        request_rate: (phase == Phase::Burst && c.measurement_s > 0.0)
            .then(|| c.completed_request_count as f64 / c.measurement_s),
        ..Figures::default()
    };
    cell(key, verdict, said, figures)
}

/// The tool's verdict of a cell from its flags, first match: a loop; a failed stream
/// (0.6.1 on) or another invalid cell (a negative total); a cell whose every stream
/// failed, or that the tool kept empty after an exception; capacity-limited; else
/// Valid, with its failed stream workers said (0.4.x and 0.6.0 keep the figure).
fn verdict(c: &RefCell) -> (Verdict, Option<String>) {
    let tool = refbench::TOOL;
    if c.loop_detected {
        return (
            Verdict::Looped,
            Some(format!(
                "{tool} found a loop (loop_detected, {})",
                c.ready_reason
            )),
        );
    }
    if !c.failure_reason.is_empty() {
        return (
            Verdict::Error,
            Some(format!("{tool}: a stream failed: {}", c.failure_reason)),
        );
    }
    if c.aggregate_tps < 0.0 {
        return (
            Verdict::Error,
            Some(format!(
                "{tool} marked the cell invalid (aggregate_tps {})",
                c.aggregate_tps
            )),
        );
    }
    if c.request_count == 0 && c.num_errors > 0 {
        return (
            Verdict::Error,
            Some(format!(
                "{tool}: every stream failed ({} of its stream workers; no request streamed a token)",
                c.num_errors
            )),
        );
    }
    if c.aggregate_tps == 0.0
        && c.request_count == 0
        && c.measurement_s == 0.0
        && c.ready_reason.is_empty()
    {
        return (
            Verdict::Error,
            Some(format!(
                "{tool} kept an empty cell: the cell raised an error, or no stream produced a token ({} failed)",
                c.num_errors
            )),
        );
    }
    let errors = (c.num_errors > 0).then(|| {
        format!(
            "{} of its stream workers failed ({tool} kept the figure)",
            c.num_errors
        )
    });
    if c.capacity_limited {
        let mut why = vec![format!("{tool} says capacity-limited")];
        if c.warmup_timed_out {
            why.push(format!(
                "the warm-up timed out ({})",
                if c.timeout_reason.is_empty() {
                    "no reason given"
                } else {
                    &c.timeout_reason
                }
            ));
        }
        why.push(format!(
            "{} requests ran on average, at most {}; {} waited on average, in {}% of scrapes",
            c.avg_running,
            c.max_running,
            c.avg_queue,
            (c.queue_fraction * 1000.0).round() / 10.0
        ));
        why.extend(errors);
        return (Verdict::RequestsQueued, Some(why.join("; ")));
    }
    (Verdict::Valid, errors)
}

/// Median and percentiles of a statistic in the tool's unit, times `scale`; the tool
/// writes 0.0 for "no data", which stays absent here.
fn summary(s: &Stats, scale: f64, n: usize) -> Summary {
    let v = |x: f64| (x > 0.0).then_some(x * scale);
    let mut percentiles = BTreeMap::new();
    for (name, x) in [("p90", s.p90), ("p99", s.p99)] {
        if let Some(x) = v(x) {
            percentiles.insert(name.to_string(), x);
        }
    }
    let median = v(s.p50);
    Summary {
        n: if median.is_some() { n } else { 0 },
        median,
        percentiles,
        max: None,
    }
}
