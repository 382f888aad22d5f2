//! The fleet table: many runs scored under one rule set, one row per run × cell with
//! the run's facts (model, engine, version, GPUs, date) and every figure and verdict, as
//! one Parquet file that DuckDB, Spark or polars query without tokentrace.
//!
//! Written with arrow-rs, which writes every trace file too: polars, which wrote it
//! before, was then the analyzer's one use of polars (BENCHMARKS.md, "One way through
//! the analyzer", has what building polars cost).

use std::path::Path;
use std::sync::Arc;

use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use tokentrace_schemas::arrow_array::{
    ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray,
};
use tokentrace_schemas::manifest::fact;

use crate::contract::Scoring;
use crate::error::{Error, Result};
use crate::figures::{FIGURES, Value};

/// The run-level columns, in order (then the cell's, then the figures, then warnings).
pub const RUN_COLUMNS: [&str; 12] = [
    "location",
    "run_id",
    "figures_from",
    "started_utc",
    "model",
    "engine",
    "engine_version",
    "hardware",
    "gpu_name",
    "gpu_count",
    "host_cpu",
    "rules",
];

/// One scored run and where it was found (a folder or an object-store URL).
#[derive(Debug)]
pub struct Entry {
    pub location: String,
    pub scoring: Scoring,
}

/// A named column of the table.
type Column = (String, ArrayRef);

fn text_column(name: &str, values: Vec<Option<String>>) -> Column {
    (name.to_string(), Arc::new(StringArray::from(values)))
}

fn int_column(name: &str, values: Vec<Option<i64>>) -> Column {
    (name.to_string(), Arc::new(Int64Array::from(values)))
}

fn number_column(name: &str, values: Vec<Option<f64>>) -> Column {
    (name.to_string(), Arc::new(Float64Array::from(values)))
}

/// Where a run's figures came from: tokentrace scored its trace, or another tool
/// computed them (an imported run: `llm-inference-bench 0.4.18`).
fn figures_from(e: &Entry) -> String {
    match &e.scoring.run.imported {
        Some(i) => i.source(),
        None => "tokentrace".to_string(),
    }
}

/// The fleet table of `entries`, rows in the order given, cells in each scoring's order.
pub fn table(entries: &[Entry]) -> Result<RecordBatch> {
    let rows: Vec<(&Entry, &crate::contract::CellScore)> = entries
        .iter()
        .flat_map(|e| e.scoring.cells.iter().map(move |c| (e, c)))
        .collect();
    let run_text = |f: &dyn Fn(&Entry) -> Option<String>| -> Vec<Option<String>> {
        rows.iter().map(|(e, _)| f(e)).collect()
    };
    let found = |e: &Entry, k: &str| fact(&e.scoring.run.facts, k).map(str::to_string);
    let mut columns = vec![
        text_column("location", run_text(&|e| Some(e.location.clone()))),
        text_column("run_id", run_text(&|e| Some(e.scoring.run.run_id.clone()))),
        text_column("figures_from", run_text(&|e| Some(figures_from(e)))),
        text_column(
            "started_utc",
            run_text(&|e| Some(e.scoring.run.started_utc.clone())),
        ),
        text_column("model", run_text(&|e| Some(e.scoring.run.model.clone()))),
        text_column("engine", run_text(&|e| e.scoring.run.engine.clone())),
        text_column(
            "engine_version",
            run_text(&|e| e.scoring.run.engine_version.clone()),
        ),
        text_column("hardware", run_text(&|e| e.scoring.run.hardware.clone())),
        text_column("gpu_name", run_text(&|e| found(e, "gpu.name"))),
        int_column(
            "gpu_count",
            rows.iter()
                .map(|(e, _)| found(e, "gpu.count").and_then(|n| n.parse::<i64>().ok()))
                .collect(),
        ),
        text_column("host_cpu", run_text(&|e| found(e, "host.cpu"))),
        text_column("rules", run_text(&|e| Some(e.scoring.rules.id()))),
        text_column(
            "phase",
            rows.iter()
                .map(|(_, c)| Some(c.phase.to_string()))
                .collect(),
        ),
        int_column(
            "context",
            rows.iter()
                .map(|(_, c)| Some(i64::from(c.context)))
                .collect(),
        ),
        int_column(
            "concurrency",
            rows.iter()
                .map(|(_, c)| Some(i64::from(c.concurrency)))
                .collect(),
        ),
        // A rate cell's offered rate in requests per second (infinite for `inf`);
        // null for other cells.
        number_column(
            "rate",
            rows.iter()
                .map(|(_, c)| c.rate.map(|r| r.per_second()))
                .collect(),
        ),
        // A replay cell's number (its `replay=<n>`, the run's replay sources); null for
        // other cells.
        int_column(
            "replay",
            rows.iter().map(|(_, c)| c.replay.map(i64::from)).collect(),
        ),
        text_column(
            "state",
            rows.iter()
                .map(|(_, c)| Some(c.state.to_string()))
                .collect(),
        ),
        text_column(
            "verdict",
            rows.iter()
                .map(|(_, c)| c.verdict.map(|v| v.as_str().to_string()))
                .collect(),
        ),
    ];
    for fig in FIGURES {
        let values: Vec<Value> = rows
            .iter()
            .map(|(_, c)| {
                c.figures.as_ref().map_or_else(
                    || match fig.value(&Default::default()) {
                        Value::Number(_) => Value::Number(None),
                        Value::Count(_) => Value::Count(None),
                        Value::Text(_) => Value::Text(None),
                    },
                    |f| fig.value(f),
                )
            })
            .collect();
        let column = match fig.value(&Default::default()) {
            Value::Number(_) => number_column(fig.csv, values.iter().map(Value::number).collect()),
            Value::Count(_) => int_column(
                fig.csv,
                values
                    .iter()
                    .map(|v| match v {
                        Value::Count(c) => *c,
                        _ => None,
                    })
                    .collect(),
            ),
            Value::Text(_) => text_column(
                fig.csv,
                values
                    .iter()
                    .map(|v| match v {
                        Value::Text(t) => t.clone(),
                        _ => None,
                    })
                    .collect(),
            ),
        };
        columns.push(column);
    }
    columns.push(text_column(
        "warnings",
        rows.iter()
            .map(|(_, c)| {
                Some(
                    c.warnings
                        .iter()
                        .map(|w| w.kind())
                        .collect::<Vec<_>>()
                        .join(";"),
                )
            })
            .collect(),
    ));
    RecordBatch::try_from_iter(columns).map_err(|e| Error::Catalog {
        path: "catalog".into(),
        message: e.to_string(),
    })
}

/// Writes the fleet table of `entries` to `path` (Parquet, zstd); returns its rows.
pub fn write(entries: &[Entry], path: &Path) -> Result<usize> {
    let batch = table(entries)?;
    let tmp = path.with_extension("parquet.part");
    let file = std::fs::File::create(&tmp).map_err(|e| Error::Io {
        path: tmp.clone(),
        source: e,
    })?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .build();
    let parquet = |e: parquet::errors::ParquetError| Error::Catalog {
        path: tmp.clone(),
        message: e.to_string(),
    };
    let mut writer = ArrowWriter::try_new(file, batch.schema(), Some(props)).map_err(parquet)?;
    writer.write(&batch).map_err(parquet)?;
    writer.close().map_err(parquet)?;
    std::fs::rename(&tmp, path).map_err(|e| Error::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    Ok(batch.num_rows())
}
