//! Production traces as workloads: Mooncake's JSONL, Azure's LLM inference trace CSV and
//! BurstGPT's CSV, parsed strictly into one row per request (time, prompt and output
//! lengths, prefix hash ids), every error naming its line, before any request is sent.

use std::time::UNIX_EPOCH;

pub use tokentrace_schemas::manifest::TraceFormat;

/// One request of a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceRow {
    /// 1-based line of the file (a CSV's header is line 1).
    pub line: u64,
    /// Time from the trace's first request (whatever the slice), ns.
    pub time_ns: i64,
    pub input_tokens: u32,
    pub output_tokens: u32,
    /// Mooncake's prefix blocks, one id per block of prompt tokens; empty in formats
    /// without them (every prompt is then its own).
    pub hash_ids: Vec<u64>,
}

/// The part of a trace to keep: requests whose time from the trace's first request is in
/// `[start_ns, end_ns)`, at most `max` of them. The whole file is still checked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Slice {
    pub start_ns: Option<i64>,
    pub end_ns: Option<i64>,
    pub max: Option<u32>,
}

impl Slice {
    fn admits(&self, time_ns: i64, kept: usize) -> bool {
        self.start_ns.is_none_or(|s| time_ns >= s)
            && self.end_ns.is_none_or(|e| time_ns < e)
            && self.max.is_none_or(|m| kept < m as usize)
    }
}

/// Why a trace could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkloadError {
    #[error("the trace is empty (no requests)")]
    Empty,
    #[error("the format could not be told from the content: {0}")]
    Unknown(String),
    #[error("line {line}: {message}")]
    Line { line: u64, message: String },
}

type Result<T, E = WorkloadError> = std::result::Result<T, E>;

fn at(line: u64, message: impl Into<String>) -> WorkloadError {
    WorkloadError::Line {
        line,
        message: message.into(),
    }
}

/// The format of a trace file, told from its first non-blank line: a JSON object is
/// Mooncake; a CSV header naming `ContextTokens` is Azure, one naming `Request tokens`
/// BurstGPT. The error says what the line looked like.
pub fn detect(bytes: &[u8]) -> Result<TraceFormat> {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(64 * 1024)]);
    let Some(first) = text.lines().map(str::trim).find(|l| !l.is_empty()) else {
        return Err(WorkloadError::Empty);
    };
    let first = first.trim_start_matches('\u{feff}');
    if first.starts_with('{') {
        return Ok(TraceFormat::Mooncake);
    }
    let header: Vec<String> = first
        .split(',')
        .map(|c| c.trim().trim_matches('"').to_string())
        .collect();
    if header.iter().any(|c| c == "ContextTokens") {
        return Ok(TraceFormat::Azure);
    }
    if header.iter().any(|c| c == "Request tokens") {
        return Ok(TraceFormat::Burstgpt);
    }
    let shown: String = first.chars().take(80).collect();
    Err(WorkloadError::Unknown(format!(
        "its first line is `{shown}`: neither a Mooncake JSON object nor an Azure \
         (TIMESTAMP, ContextTokens, GeneratedTokens) or BurstGPT (Timestamp, Request \
         tokens, Response tokens) CSV header"
    )))
}

/// Parses a whole trace of `format`, keeping the rows `slice` admits. Every row is
/// checked, kept or not: a missing field, a negative or fractional length, a timestamp
/// before the one above it, or another format's content is an error naming the line.
pub fn parse(bytes: &[u8], format: TraceFormat, slice: Slice) -> Result<Vec<TraceRow>> {
    let rows = match format {
        TraceFormat::Mooncake => mooncake(bytes, slice)?,
        TraceFormat::Azure => csv_trace(bytes, &AZURE, slice)?,
        TraceFormat::Burstgpt => csv_trace(bytes, &BURSTGPT, slice)?,
        TraceFormat::Tokentrace => {
            return Err(WorkloadError::Unknown(
                "a tokentrace run is a folder, not a trace file".to_string(),
            ));
        }
    };
    Ok(rows)
}

/// Checks a row's time against the one before and the trace's first, and keeps it when
/// the slice admits it.
struct Timeline {
    first: Option<i64>,
    last: Option<(i64, u64)>,
    total: u64,
    out: Vec<TraceRow>,
    slice: Slice,
}

impl Timeline {
    fn new(slice: Slice) -> Self {
        Timeline {
            first: None,
            last: None,
            total: 0,
            out: Vec::new(),
            slice,
        }
    }

    fn push(&mut self, raw_ns: i64, mut row: TraceRow) -> Result<()> {
        if let Some((prev, prev_line)) = self.last
            && raw_ns < prev
        {
            return Err(at(
                row.line,
                format!(
                    "the timestamp goes backwards ({} ms before line {prev_line}'s); a trace \
                     must be in time order",
                    (prev - raw_ns) as f64 / 1e6
                ),
            ));
        }
        self.last = Some((raw_ns, row.line));
        let first = *self.first.get_or_insert(raw_ns);
        row.time_ns = raw_ns - first;
        self.total += 1;
        if self.slice.admits(row.time_ns, self.out.len()) {
            self.out.push(row);
        }
        Ok(())
    }

    fn finish(self) -> Result<Vec<TraceRow>> {
        if self.total == 0 {
            return Err(WorkloadError::Empty);
        }
        Ok(self.out)
    }
}

/// A length field: a whole number of tokens, 0 or more.
fn length(line: u64, field: &str, v: Option<&serde_json::Value>) -> Result<u32> {
    let v = v.ok_or_else(|| at(line, format!("`{field}` is missing")))?;
    match v.as_u64() {
        Some(n) => u32::try_from(n).map_err(|_| at(line, format!("`{field}` {n} is too large"))),
        None => Err(at(
            line,
            format!("`{field}` is {v}, not a whole number of tokens of 0 or more"),
        )),
    }
}

fn mooncake(bytes: &[u8], slice: Slice) -> Result<Vec<TraceRow>> {
    let mut timeline = Timeline::new(slice);
    for (i, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let line = i as u64 + 1;
        let text = String::from_utf8_lossy(raw);
        let text = text.trim().trim_start_matches('\u{feff}');
        if text.is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| {
            at(
                line,
                format!("not a Mooncake JSON object ({e}); is the format right?"),
            )
        })?;
        let Some(obj) = v.as_object() else {
            return Err(at(line, "not a JSON object"));
        };
        let ts = obj
            .get("timestamp")
            .ok_or_else(|| at(line, "`timestamp` is missing"))?;
        let ms = ts
            .as_f64()
            .filter(|t| t.is_finite() && *t >= 0.0)
            .ok_or_else(|| {
                at(
                    line,
                    format!("`timestamp` is {ts}, not milliseconds of 0 or more"),
                )
            })?;
        let input = length(line, "input_length", obj.get("input_length"))?;
        let output = length(line, "output_length", obj.get("output_length"))?;
        let hash_ids = match obj.get("hash_ids") {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(serde_json::Value::Array(ids)) => ids
                .iter()
                .map(|h| {
                    h.as_u64()
                        .ok_or_else(|| at(line, format!("hash id {h} is not a whole number")))
                })
                .collect::<Result<_>>()?,
            Some(other) => {
                return Err(at(
                    line,
                    format!("`hash_ids` is {other}, not a list of ids"),
                ));
            }
        };
        timeline.push(
            (ms * 1e6).round() as i64,
            TraceRow {
                line,
                time_ns: 0,
                input_tokens: input,
                output_tokens: output,
                hash_ids,
            },
        )?;
    }
    timeline.finish()
}

/// A CSV trace's columns and how its timestamps read.
struct CsvShape {
    /// With its article, for messages.
    name: &'static str,
    time: &'static str,
    input: &'static str,
    output: &'static str,
    /// Timestamp text to nanoseconds.
    parse_time: fn(&str) -> Option<i64>,
    time_means: &'static str,
}

const AZURE: CsvShape = CsvShape {
    name: "an Azure",
    time: "TIMESTAMP",
    input: "ContextTokens",
    output: "GeneratedTokens",
    parse_time: azure_time,
    time_means: "a date and time like 2023-11-16 18:15:46.6805900",
};

const BURSTGPT: CsvShape = CsvShape {
    name: "a BurstGPT",
    time: "Timestamp",
    input: "Request tokens",
    output: "Response tokens",
    parse_time: seconds,
    time_means: "seconds of 0 or more",
};

/// Azure's `TIMESTAMP`: UTC date and time with up to 9 decimals (7 in the published
/// traces), as ns since the Unix epoch.
fn azure_time(s: &str) -> Option<i64> {
    let t = humantime::parse_rfc3339_weak(s.trim()).ok()?;
    i64::try_from(t.duration_since(UNIX_EPOCH).ok()?.as_nanos()).ok()
}

/// BurstGPT's `Timestamp`: seconds from the trace's start.
fn seconds(s: &str) -> Option<i64> {
    let v: f64 = s.trim().parse().ok()?;
    (v.is_finite() && v >= 0.0).then(|| (v * 1e9).round() as i64)
}

fn csv_trace(bytes: &[u8], shape: &CsvShape, slice: Slice) -> Result<Vec<TraceRow>> {
    let bytes = bytes.strip_prefix("\u{feff}".as_bytes()).unwrap_or(bytes);
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .trim(csv::Trim::All)
        .from_reader(bytes);
    let headers = reader
        .headers()
        .map_err(|e| at(1, format!("not a CSV header: {e}")))?
        .clone();
    if headers.iter().all(str::is_empty) {
        return Err(WorkloadError::Empty);
    }
    let col = |name: &str| {
        headers.iter().position(|h| h == name).ok_or_else(|| {
            at(
                1,
                format!(
                    "no `{name}` column: not {} trace header (want {}, {}, {}; found {})",
                    shape.name,
                    shape.time,
                    shape.input,
                    shape.output,
                    headers.iter().collect::<Vec<_>>().join(", ")
                ),
            )
        })
    };
    let (t, i, o) = (col(shape.time)?, col(shape.input)?, col(shape.output)?);
    let mut timeline = Timeline::new(slice);
    for record in reader.records() {
        let record = record.map_err(|e| {
            let line = e.position().map_or(0, csv::Position::line);
            at(line, format!("not a CSV row: {e}"))
        })?;
        let line = record.position().map_or(0, csv::Position::line);
        let field = |idx: usize, name: &str| {
            record
                .get(idx)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| at(line, format!("`{name}` is missing")))
        };
        let time_text = field(t, shape.time)?;
        let time = (shape.parse_time)(time_text).ok_or_else(|| {
            at(
                line,
                format!(
                    "`{}` is `{time_text}`, not {}",
                    shape.time, shape.time_means
                ),
            )
        })?;
        let len = |idx: usize, name: &str| -> Result<u32> {
            let text = field(idx, name)?;
            text.parse::<u32>().map_err(|_| {
                at(
                    line,
                    format!("`{name}` is `{text}`, not a whole number of tokens of 0 or more"),
                )
            })
        };
        let (input, output) = (len(i, shape.input)?, len(o, shape.output)?);
        timeline.push(
            time,
            TraceRow {
                line,
                time_ns: 0,
                input_tokens: input,
                output_tokens: output,
                hash_ids: Vec::new(),
            },
        )?;
    }
    timeline.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(bytes: &str, f: TraceFormat) -> Result<Vec<TraceRow>> {
        parse(bytes.as_bytes(), f, Slice::default())
    }

    #[test]
    fn mooncake_rows_keep_their_lines_times_and_hash_ids() {
        let text = "{\"timestamp\": 100, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [1, 2]}\n\n{\"timestamp\": 350.5, \"input_length\": 10, \"output_length\": 0, \"hash_ids\": [1]}\n";
        let rows = all(text, TraceFormat::Mooncake).expect("parse");
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].line, rows[0].time_ns), (1, 0));
        assert_eq!((rows[1].line, rows[1].time_ns), (3, 250_500_000));
        assert_eq!(rows[0].hash_ids, vec![1, 2]);
        assert_eq!((rows[1].input_tokens, rows[1].output_tokens), (10, 0));
    }

    #[test]
    fn csv_traces_find_columns_by_name_and_read_their_times() {
        let azure = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n";
        let rows = all(azure, TraceFormat::Azure).expect("azure");
        assert_eq!(rows[1].time_ns, 4_314_579_000);
        assert_eq!(
            (rows[1].line, rows[1].input_tokens, rows[1].output_tokens),
            (3, 396, 109)
        );
        let burst = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,Conversation log\n45,\"GPT-4\",1087,0,1087,API log\n";
        let rows = all(burst, TraceFormat::Burstgpt).expect("burstgpt");
        assert_eq!(rows[1].time_ns, 40_000_000_000);
        assert_eq!((rows[1].input_tokens, rows[1].output_tokens), (1087, 0));
    }

    #[test]
    fn the_slice_keeps_a_window_and_a_count_but_checks_every_row() {
        let text = (0..10)
            .map(|i| {
                format!(
                    "{{\"timestamp\": {}, \"input_length\": 1, \"output_length\": 1}}",
                    i * 1000
                )
            })
            .collect::<Vec<_>>()
            .join("\n");
        let slice = Slice {
            start_ns: Some(2_000_000_000),
            end_ns: Some(8_000_000_000),
            max: Some(3),
        };
        let rows = parse(text.as_bytes(), TraceFormat::Mooncake, slice).expect("parse");
        assert_eq!(
            rows.iter().map(|r| r.line).collect::<Vec<_>>(),
            vec![3, 4, 5]
        );
        let bad =
            format!("{text}\n{{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1}}");
        assert!(matches!(
            parse(bad.as_bytes(), TraceFormat::Mooncake, slice),
            Err(WorkloadError::Line { line: 11, .. })
        ));
    }

    #[test]
    fn detection_reads_the_first_line() {
        assert_eq!(detect(b"\n{\"timestamp\": 1}"), Ok(TraceFormat::Mooncake));
        assert_eq!(
            detect(b"TIMESTAMP,ContextTokens,GeneratedTokens\n"),
            Ok(TraceFormat::Azure)
        );
        assert_eq!(
            detect(b"Timestamp,Model,Request tokens,Response tokens\n"),
            Ok(TraceFormat::Burstgpt)
        );
        assert_eq!(detect(b"  \n"), Err(WorkloadError::Empty));
        assert!(matches!(detect(b"a,b,c\n"), Err(WorkloadError::Unknown(_))));
    }
}
