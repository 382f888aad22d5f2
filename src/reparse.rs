//! `tokentrace reparse RUN --out NEW`: re-derives every complete cell's `chunks` and
//! `requests` from its `raw.sse.zst` and the recorded request facts, through the same
//! wire crate the recorder used live, into a new run folder (the original is only read).
//! With `--token-counting`, under another policy; without, the recorded one.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use tokentrace_schemas::CellKey;
use tokentrace_schemas::column::parse_arg;
use tokentrace_schemas::manifest::{
    CellMeta, CellStatus, Manifest, Reparsed, TokenCounting, ToolInfo,
};
use tokentrace_schemas::raw::RawReader;
use tokentrace_schemas::reader::{open_table, read_table};
use tokentrace_schemas::table::Table;
use tokentrace_schemas::tables::{
    ChunkRow, Chunks, EndReason, Events, Metrics, RequestRow, Requests, Role,
};
use tokentrace_schemas::writer::CellWriter;
use tokentrace_wire::{Assembler, Counting, End};

/// Arguments of `tokentrace reparse`.
#[derive(Debug, clap::Args)]
pub struct ReparseArgs {
    /// The run folder to re-derive (only read).
    pub run: PathBuf,
    /// The new run folder (must not exist).
    #[arg(long)]
    pub out: PathBuf,
    /// How chunk tokens are counted: `usage`, `token_ids` or `one_per_chunk` (default:
    /// the policy the run was recorded with). The probe request keeps its own `auto`.
    #[arg(long, value_parser = parse_arg::<TokenCounting>)]
    pub token_counting: Option<TokenCounting>,
}

/// What one cell became.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellSummary {
    pub key: CellKey,
    pub requests: usize,
    pub chunks: usize,
    /// Chunk tokens as recorded, and as re-derived.
    pub tokens_before: i64,
    pub tokens_after: i64,
}

/// Runs the command; prints one line per cell.
pub fn run(args: &ReparseArgs, out: &mut impl Write) -> anyhow::Result<ExitCode> {
    let cells = reparse(&args.run, &args.out, args.token_counting)?;
    for c in &cells {
        writeln!(
            out,
            "{}: {} requests, {} chunks, {} tokens (recorded: {})",
            c.key, c.requests, c.chunks, c.tokens_after, c.tokens_before
        )?;
    }
    writeln!(out, "reparsed into {}", args.out.display())?;
    Ok(ExitCode::SUCCESS)
}

/// Re-derives `run` into `out` under `counting` (the recorded policy when `None`). The
/// new folder is built under a temporary name beside `out` and renamed into place.
pub fn reparse(
    run: &Path,
    out: &Path,
    counting: Option<TokenCounting>,
) -> anyhow::Result<Vec<CellSummary>> {
    let manifest = Manifest::read(run).context("cannot read the run's manifest")?;
    if let Some(i) = &manifest.imported {
        bail!(
            "{}: imported from {}: no raw capture to reparse",
            run.display(),
            i.source()
        );
    }
    if out.exists() {
        bail!("{} exists: reparse writes a new run folder", out.display());
    }
    let recorded = manifest.capabilities.token_counting;
    let policy = match counting.or(recorded) {
        Some(c) => c,
        None => bail!(
            "{}: the manifest records no token-counting policy; give --token-counting",
            run.join("manifest.json").display()
        ),
    };
    let name = out
        .file_name()
        .with_context(|| format!("{}: not a folder name", out.display()))?;
    let tmp = out.with_file_name(format!(".{}.reparsing", name.to_string_lossy()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp)
            .with_context(|| format!("cannot remove {}", tmp.display()))?;
    }
    std::fs::create_dir_all(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    let cells = reparse_cells(run, &tmp, &manifest, policy);
    if cells.is_err() {
        // Nothing half-made is left behind; the original was only read.
        let _ = std::fs::remove_dir_all(&tmp);
    }
    let summaries = cells?;
    let mut new = manifest.clone();
    new.capabilities.token_counting = Some(policy);
    new.reparsed = Some(Reparsed {
        from: run.display().to_string(),
        from_run_id: manifest.run_id.clone(),
        recorded_token_counting: recorded,
        token_counting: policy,
        tool: ToolInfo::current(),
    });
    new.write(&tmp)?;
    std::fs::rename(&tmp, out)
        .with_context(|| format!("cannot rename {} to {}", tmp.display(), out.display()))?;
    Ok(summaries)
}

/// Every complete cell of `manifest`, reparsed from `run` into `tmp`.
fn reparse_cells(
    run: &Path,
    tmp: &Path,
    manifest: &Manifest,
    policy: TokenCounting,
) -> anyhow::Result<Vec<CellSummary>> {
    let mut summaries = Vec::new();
    for entry in manifest
        .cells
        .iter()
        .filter(|c| c.status == CellStatus::Complete)
    {
        let key = entry.key();
        let dir = key.dir(run);
        CellMeta::read_complete(&dir)
            .with_context(|| format!("{key}: the manifest says complete, its folder is not"))?;
        let summary = reparse_cell(&dir, tmp, key, policy)
            .with_context(|| format!("cannot reparse {}", dir.display()))?;
        summaries.push(summary);
    }
    Ok(summaries)
}

/// How the transport ended the request, as its row says. A disconnect with an error was
/// a transport failure (or a stream cut mid-event, which the assembler words the same).
fn transport_end(r: &RequestRow) -> End {
    match (r.end_reason, &r.error) {
        (EndReason::Cancelled, _) => End::Cancelled,
        (EndReason::StallTimeout, e) => End::Stalled(e.clone()),
        (EndReason::Disconnect, Some(e)) => End::Failed(e.clone()),
        _ => End::Clean,
    }
}

/// One request being re-assembled.
struct Open {
    asm: Assembler,
    /// The framer refused an event: the recorder read no further.
    stopped: bool,
}

fn start(r: &RequestRow, policy: TokenCounting) -> Open {
    // The probe was recorded before the policy was known, counting whatever it found.
    let counting = if r.role == Role::Probe {
        Counting::Auto
    } else {
        Counting::Policy(policy)
    };
    let mut asm = Assembler::new(counting, r.clone());
    if let Some(status) = r.http_status {
        asm.status(u16::try_from(status).unwrap_or(0));
    }
    Open {
        asm,
        stopped: false,
    }
}

fn reparse_cell(
    dir: &Path,
    run: &Path,
    key: CellKey,
    policy: TokenCounting,
) -> anyhow::Result<CellSummary> {
    let file = |name: &str| dir.join(name);
    let requests = read_table::<Requests>(&file("requests.parquet"))?;
    let by_id: HashMap<i64, &RequestRow> = requests.iter().map(|r| (r.request_id, r)).collect();
    // Queue delays were measured live and cannot be re-derived: they are carried over by
    // (request, position), which no policy changes.
    let mut delays: HashMap<(i64, i32), Option<i64>> = HashMap::new();
    let mut tokens_before = 0i64;
    for rows in open_table::<Chunks>(&file("chunks.parquet"))? {
        for c in rows? {
            tokens_before += i64::from(c.tokens.unwrap_or(0));
            delays.insert((c.request_id, c.seq), c.queue_delay_ns);
        }
    }
    let mut w = CellWriter::create(run, key)?;
    let (mut chunks, mut tokens_after) = (0usize, 0i64);
    let mut push = |w: &mut CellWriter, rows: Vec<ChunkRow>| -> anyhow::Result<()> {
        for mut c in rows {
            c.queue_delay_ns = delays.get(&(c.request_id, c.seq)).copied().flatten();
            tokens_after += i64::from(c.tokens.unwrap_or(0));
            chunks += 1;
            w.push_chunk(c)?;
        }
        Ok(())
    };
    let mut open: HashMap<i64, Open> = HashMap::new();
    let raw_path = file("raw.sse.zst");
    for frame in RawReader::open(&raw_path)? {
        let f = frame?;
        w.raw.write(f.request_id, f.arrival_ns, &f.bytes)?;
        let Some(facts) = by_id.get(&f.request_id) else {
            bail!(
                "{}: a frame of request {} that requests.parquet does not list",
                raw_path.display(),
                f.request_id
            );
        };
        let o = open
            .entry(f.request_id)
            .or_insert_with(|| start(facts, policy));
        if o.stopped {
            continue;
        }
        let mut rows = Vec::new();
        o.stopped = o
            .asm
            .read(f.arrival_ns, &f.bytes, &mut || 0, &mut rows)
            .is_err();
        push(&mut w, rows)?;
    }
    for r in &requests {
        let o = open
            .remove(&r.request_id)
            .unwrap_or_else(|| start(r, policy));
        let mut rows = Vec::new();
        let mut row = o
            .asm
            .finish(transport_end(r), r.end_ns.unwrap_or(0), &mut rows);
        row.end_ns = r.end_ns;
        push(&mut w, rows)?;
        w.push_request(row)?;
    }
    copy::<Metrics>(&file("metrics.parquet"), |row| Ok(w.push_metric(row)?))?;
    copy::<Events>(&file("events.parquet"), |row| Ok(w.push_event(row)?))?;
    w.commit()?;
    Ok(CellSummary {
        key,
        requests: requests.len(),
        chunks,
        tokens_before,
        tokens_after,
    })
}

/// Streams a table's rows into `f`, a batch at a time.
fn copy<T: Table>(
    path: &Path,
    mut f: impl FnMut(T::Row) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    for rows in open_table::<T>(path)? {
        for row in rows? {
            f(row)?;
        }
    }
    Ok(())
}
