//! Per-cell figures of a decode cell, computed with polars from the cell's tables: total
//! tok/s inside the window, per-request medians (TTFT, time between tokens, tok/s),
//! completed requests and output tokens. The first layer of scoring; rule sets (which
//! TTFT, which percentile method, verdicts) build on it.

use std::path::Path;

use polars::prelude::*;
use tokentrace_schemas::layout::table_file;
use tokentrace_schemas::tables::{Chunks, Events, Requests};

use crate::error::{Error, Result};

/// Figures of one decode cell (times in ms, rates in tokens/s).
#[derive(Debug, Clone, PartialEq)]
pub struct DecodeFigures {
    /// Window length in seconds (window_open → window_close).
    pub window_s: f64,
    /// Tokens that arrived inside the window.
    pub output_tokens: i64,
    pub total_tok_s: f64,
    /// Requests (warm-up or measured) that produced at least two tokens.
    pub requests: usize,
    pub ttft_ms_median: Option<f64>,
    pub time_between_tokens_ms_median: Option<f64>,
    pub per_request_tok_s_median: Option<f64>,
    /// Requests that finished (stop or length) inside the window.
    pub completed: i64,
}

fn scan(dir: &Path, file: String) -> Result<LazyFrame> {
    let path = dir.join(file);
    // One file: no Hive parsing (polars would infer the partition columns from the path,
    // and its date inference panics without date features).
    let args = ScanArgsParquet {
        hive_options: HiveOptions {
            enabled: Some(false),
            ..HiveOptions::default()
        },
        ..ScanArgsParquet::default()
    };
    LazyFrame::scan_parquet(PlRefPath::new(path.display().to_string()), args)
        .map_err(|source| Error::Polars { path, source })
}

fn collect(lf: LazyFrame, dir: &Path) -> Result<DataFrame> {
    lf.collect().map_err(polars_err(dir))
}

fn polars_err(dir: &Path) -> impl Fn(PolarsError) -> Error + '_ {
    move |source| Error::Polars {
        path: dir.to_path_buf(),
        source,
    }
}

/// The first value of a one-row frame's column, cast to `dtype`.
fn scalar(df: &DataFrame, name: &str, dtype: &DataType, dir: &Path) -> Result<Series> {
    df.column(name)
        .and_then(|c| c.cast(dtype))
        .map(|c| c.as_materialized_series().clone())
        .map_err(polars_err(dir))
}

fn scalar_i64(df: &DataFrame, name: &str, dir: &Path) -> Result<Option<i64>> {
    Ok(scalar(df, name, &DataType::Int64, dir)?
        .i64()
        .ok()
        .and_then(|ca| ca.get(0)))
}

fn scalar_f64(df: &DataFrame, name: &str, dir: &Path) -> Result<Option<f64>> {
    Ok(scalar(df, name, &DataType::Float64, dir)?
        .f64()
        .ok()
        .and_then(|ca| ca.get(0)))
}

/// Computes the figures of the decode cell in `dir`; `None` when it has no window.
pub fn decode_figures(dir: &Path) -> Result<Option<DecodeFigures>> {
    let window = collect(
        scan(dir, table_file::<Events>())?.select([
            col("time_ns")
                .filter(col("kind").eq(lit("window_open")))
                .min()
                .alias("open"),
            col("time_ns")
                .filter(col("kind").eq(lit("window_close")))
                .max()
                .alias("close"),
        ]),
        dir,
    )?;
    let (Some(open), Some(close)) = (
        scalar_i64(&window, "open", dir)?,
        scalar_i64(&window, "close", dir)?,
    ) else {
        return Ok(None);
    };
    let window_s = (close - open) as f64 / 1e9;

    let chunks = scan(dir, table_file::<Chunks>())?;
    let in_window = collect(
        chunks
            .clone()
            .filter(
                col("arrival_ns")
                    .gt_eq(lit(open))
                    .and(col("arrival_ns").lt_eq(lit(close))),
            )
            .select([col("tokens").sum().alias("tokens")]),
        dir,
    )?;
    let output_tokens = scalar_i64(&in_window, "tokens", dir)?.unwrap_or(0);

    let per_request = chunks
        .group_by([col("request_id")])
        .agg([col("tokens").sum().alias("n")]);
    let requests = scan(dir, table_file::<Requests>())?
        .filter(
            col("role")
                .eq(lit("warmup"))
                .or(col("role").eq(lit("measured"))),
        )
        .join(
            per_request,
            [col("request_id")],
            [col("request_id")],
            JoinArgs::new(JoinType::Left),
        );
    let stats = collect(
        requests
            .clone()
            .filter(col("n").gt(lit(1)))
            .select([
                len().alias("requests"),
                ((col("first_token_ns") - col("sent_ns")).cast(DataType::Float64) / lit(1e6))
                    .median()
                    .alias("ttft"),
                ((col("last_token_ns") - col("first_token_ns")).cast(DataType::Float64)
                    / (col("n") - lit(1)).cast(DataType::Float64)
                    / lit(1e6))
                .alias("tbt"),
            ])
            .select([
                col("requests").first(),
                col("ttft").first(),
                col("tbt").median().alias("tbt"),
                (lit(1000.0) / col("tbt")).median().alias("rate"),
            ]),
        dir,
    )?;
    let completed = collect(
        requests
            .filter(
                col("end_reason")
                    .eq(lit("finished_stop"))
                    .or(col("end_reason").eq(lit("finished_length")))
                    .and(col("end_ns").gt_eq(lit(open)))
                    .and(col("end_ns").lt_eq(lit(close))),
            )
            .select([len().alias("completed")]),
        dir,
    )?;
    Ok(Some(DecodeFigures {
        window_s,
        output_tokens,
        total_tok_s: if window_s > 0.0 {
            output_tokens as f64 / window_s
        } else {
            0.0
        },
        requests: scalar_i64(&stats, "requests", dir)?.unwrap_or(0).max(0) as usize,
        ttft_ms_median: scalar_f64(&stats, "ttft", dir)?,
        time_between_tokens_ms_median: scalar_f64(&stats, "tbt", dir)?,
        per_request_tok_s_median: scalar_f64(&stats, "rate", dir)?,
        completed: scalar_i64(&completed, "completed", dir)?.unwrap_or(0),
    }))
}
