//! The fleet table: many runs scored under one rule set, one row per run × cell with
//! the run's facts (model, engine, version, GPUs, date) and every figure and verdict, as
//! one Parquet file that DuckDB, Spark or polars query without tokentrace.

use std::path::Path;

use polars::prelude::*;
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

fn text_column(name: &str, values: Vec<Option<String>>) -> Column {
    Column::new(name.into(), values)
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
pub fn table(entries: &[Entry]) -> Result<DataFrame> {
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
        Column::new(
            "gpu_count".into(),
            rows.iter()
                .map(|(e, _)| found(e, "gpu.count").and_then(|n| n.parse::<i64>().ok()))
                .collect::<Vec<_>>(),
        ),
        text_column("host_cpu", run_text(&|e| found(e, "host.cpu"))),
        text_column("rules", run_text(&|e| Some(e.scoring.rules.id()))),
        text_column(
            "phase",
            rows.iter()
                .map(|(_, c)| Some(c.phase.to_string()))
                .collect(),
        ),
        Column::new(
            "context".into(),
            rows.iter()
                .map(|(_, c)| i64::from(c.context))
                .collect::<Vec<_>>(),
        ),
        Column::new(
            "concurrency".into(),
            rows.iter()
                .map(|(_, c)| i64::from(c.concurrency))
                .collect::<Vec<_>>(),
        ),
        // A rate cell's offered rate in requests per second (infinite for `inf`);
        // null for other cells.
        Column::new(
            "rate".into(),
            rows.iter()
                .map(|(_, c)| c.rate.map(|r| r.per_second()))
                .collect::<Vec<_>>(),
        ),
        // A replay cell's number (its `replay=<n>`, the run's replay sources); null for
        // other cells.
        Column::new(
            "replay".into(),
            rows.iter()
                .map(|(_, c)| c.replay.map(i64::from))
                .collect::<Vec<_>>(),
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
            Value::Number(_) => Column::new(
                fig.csv.into(),
                values.iter().map(Value::number).collect::<Vec<_>>(),
            ),
            Value::Count(_) => Column::new(
                fig.csv.into(),
                values
                    .iter()
                    .map(|v| match v {
                        Value::Count(c) => *c,
                        _ => None,
                    })
                    .collect::<Vec<_>>(),
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
    DataFrame::new(rows.len(), columns).map_err(|source| Error::Polars {
        path: "catalog".into(),
        source,
    })
}

/// Writes the fleet table of `entries` to `path` (Parquet, zstd); returns its rows.
pub fn write(entries: &[Entry], path: &Path) -> Result<usize> {
    let mut df = table(entries)?;
    let tmp = path.with_extension("parquet.part");
    let file = std::fs::File::create(&tmp).map_err(|e| Error::Io {
        path: tmp.clone(),
        source: e,
    })?;
    ParquetWriter::new(file)
        .with_compression(ParquetCompression::Zstd(None))
        .finish(&mut df)
        .map_err(|source| Error::Polars {
            path: path.to_path_buf(),
            source,
        })?;
    std::fs::rename(&tmp, path).map_err(|e| Error::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    Ok(df.height())
}
