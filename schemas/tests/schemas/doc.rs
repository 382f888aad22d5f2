//! FORMAT.md is the contract: it must list exactly the columns the code defines, with
//! the same types and null rules, and every value of every closed value set.

use std::collections::BTreeMap;

use arrow_schema::DataType;
use tokentrace_schemas::column::StrEnum;
use tokentrace_schemas::layout::Phase;
use tokentrace_schemas::manifest::CellStatus;
use tokentrace_schemas::table::Table;
use tokentrace_schemas::tables::*;

const FORMAT_MD: &str = include_str!("../../FORMAT.md");

/// Documented columns of each `## \`name\` table` section: (name, type, required).
fn documented() -> BTreeMap<String, Vec<(String, String, bool)>> {
    let mut out: BTreeMap<String, Vec<(String, String, bool)>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in FORMAT_MD.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            current = h
                .strip_suffix(" table")
                .and_then(|n| n.strip_prefix('`'))
                .and_then(|n| n.strip_suffix('`'))
                .map(str::to_string);
            continue;
        }
        let Some(table) = &current else { continue };
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 5 || !cells[1].starts_with('`') {
            continue;
        }
        let name = cells[1].trim_matches('`').to_string();
        out.entry(table.clone()).or_default().push((
            name,
            cells[2].to_string(),
            cells[3] == "never",
        ));
    }
    out
}

fn type_word(t: &DataType) -> &'static str {
    match t {
        DataType::Int64 => "int64",
        DataType::Int32 => "int32",
        DataType::Float64 => "float64",
        DataType::Utf8 => "utf8",
        _ => "unknown",
    }
}

fn coded<T: Table>() -> Vec<(String, String, bool)> {
    T::fields()
        .iter()
        .map(|f| {
            (
                f.name().clone(),
                type_word(f.data_type()).to_string(),
                !f.is_nullable(),
            )
        })
        .collect()
}

#[test]
fn format_md_matches_code() {
    let doc = documented();
    let code: BTreeMap<String, Vec<(String, String, bool)>> = [
        (Requests::NAME.to_string(), coded::<Requests>()),
        (Chunks::NAME.to_string(), coded::<Chunks>()),
        (Metrics::NAME.to_string(), coded::<Metrics>()),
        (Events::NAME.to_string(), coded::<Events>()),
        (Gpu::NAME.to_string(), coded::<Gpu>()),
        (Replay::NAME.to_string(), coded::<Replay>()),
        (Turns::NAME.to_string(), coded::<Turns>()),
    ]
    .into();
    assert_eq!(
        doc.keys().collect::<Vec<_>>(),
        code.keys().collect::<Vec<_>>(),
        "tables documented vs defined"
    );
    for (table, cols) in &code {
        let d = &doc[table];
        for c in cols {
            assert!(
                d.contains(c),
                "`{table}.{}` ({}, required={}) is in code but not in FORMAT.md",
                c.0,
                c.1,
                c.2
            );
        }
        for c in d {
            assert!(
                cols.contains(c),
                "`{table}.{}` ({}, required={}) is in FORMAT.md but not in code",
                c.0,
                c.1,
                c.2
            );
        }
        let order_doc: Vec<&String> = d.iter().map(|c| &c.0).collect();
        let order_code: Vec<&String> = cols.iter().map(|c| &c.0).collect();
        assert_eq!(order_doc, order_code, "`{table}` column order");
    }
}

fn all_values<E: StrEnum>() -> Vec<&'static str> {
    E::ALL.iter().map(|v| v.as_str()).collect()
}

#[test]
fn format_md_lists_every_value() {
    let sets = [
        all_values::<ChunkKind>(),
        all_values::<Role>(),
        all_values::<Endpoint>(),
        all_values::<EndReason>(),
        all_values::<MetricType>(),
        all_values::<EventKind>(),
        all_values::<Phase>(),
        all_values::<CellStatus>(),
    ];
    for v in sets.iter().flatten() {
        assert!(
            FORMAT_MD.contains(&format!("`{v}`"))
                || FORMAT_MD.contains(&format!("={v}"))
                || FORMAT_MD.contains(&format!("<{v}|"))
                || FORMAT_MD.contains(&format!("|{v}>")),
            "value `{v}` is not documented in FORMAT.md"
        );
    }
}

#[test]
fn the_doc_parser_sees_the_columns() {
    // Guards the test above against a parser that finds nothing and so passes vacuously.
    let doc = documented();
    assert_eq!(doc.len(), 7);
    assert!(
        doc["chunks"]
            .iter()
            .any(|c| c.0 == "arrival_ns" && c.1 == "int64" && c.2)
    );
    assert!(doc["chunks"].iter().any(|c| c.0 == "content" && !c.2));
}
