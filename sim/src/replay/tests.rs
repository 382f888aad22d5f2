//! Unit tests of serving a recorded run back: requests matched in order, cells that
//! take over what an older one left unused, and the scrapes as Prometheus text.

use super::*;

fn rec(cell: usize, request_id: i64) -> Rec {
    Rec {
        cell,
        request_id,
        sent_ns: request_id * 1_000,
        headers_gap_ns: 0,
        status: Some(200),
        error: None,
        open_end: false,
    }
}

fn recording(recorded: Vec<(u32, u32, Rec)>) -> Recording {
    Recording {
        run: PathBuf::new(),
        model: "m".to_string(),
        max_model_len: None,
        engine: EngineInfo::default(),
        requests: recorded.len(),
        cells: Vec::new(),
        groups: groups(recorded),
        state: Mutex::new(State::default()),
        pacer: Pacer::start(),
        matched: AtomicU64::new(0),
        reused: AtomicU64::new(0),
        unmatched: AtomicU64::new(0),
    }
}

fn ids(r: &Recording, asks: &[(u32, u32)]) -> Vec<Option<(i64, bool)>> {
    let now = Instant::now();
    asks.iter()
        .map(|&(p, m)| {
            r.take(p, m, now)
                .map(|(rec, reused)| (rec.request_id, reused))
        })
        .collect()
}

#[test]
fn requests_match_in_order_within_their_prompt_length_and_max_tokens() {
    // Two cells of one context: a prime (16 tokens) then two streams each.
    let r = recording(vec![
        (1024, 16, rec(0, 1)),
        (1024, 4096, rec(0, 2)),
        (1024, 4096, rec(0, 3)),
        (1024, 16, rec(1, 4)),
        (1024, 4096, rec(1, 5)),
        (1024, 4096, rec(1, 6)),
        (6, 4, rec(0, 0)),
    ]);
    assert_eq!(
        ids(&r, &[(6, 4), (1030, 16), (1024, 4096), (1020, 4096)]),
        vec![
            Some((0, false)),
            Some((1, false)),
            Some((2, false)),
            Some((3, false))
        ],
        "nearest length within 5%, queue by max_tokens, in send order"
    );
    assert_eq!(
        ids(&r, &[(2048, 16), (900, 16)]),
        vec![None, None],
        "too far"
    );
}

#[test]
fn a_newer_cell_skips_what_an_older_one_left_unused() {
    let r = recording(vec![
        (512, 16, rec(0, 1)),
        (512, 128, rec(0, 2)),
        (512, 128, rec(0, 3)),
        (512, 128, rec(0, 4)),
        (512, 16, rec(1, 5)),
        (512, 128, rec(1, 6)),
    ]);
    // The replaying client sent one request fewer in the first cell: the second
    // cell's prime moves the floor, and its stream gets the second cell's request.
    assert_eq!(
        ids(
            &r,
            &[(512, 16), (512, 128), (512, 128), (512, 16), (512, 128)]
        ),
        vec![
            Some((1, false)),
            Some((2, false)),
            Some((3, false)),
            Some((5, false)),
            Some((6, false)),
        ]
    );
    // More than the recording had: its last request again, said to be reused.
    assert_eq!(ids(&r, &[(512, 128)]), vec![Some((6, true))]);
}

#[test]
fn scrapes_render_as_prometheus_text_without_the_recorders_own_series() {
    let row = |t: i64, family: &str, name: &str, labels: &str, value: f64, ty| MetricRow {
        scrape_start_ns: t,
        scrape_end_ns: t + 1,
        family: family.to_string(),
        name: name.to_string(),
        labels: labels.to_string(),
        value,
        metric_type: ty,
    };
    let rows = vec![
        row(
            10,
            "vllm:num_requests_running",
            "vllm:num_requests_running",
            "model_name=\"m\"",
            4.0,
            MetricType::Gauge,
        ),
        row(
            10,
            "vllm:ttft",
            "vllm:ttft_bucket",
            "le=\"+Inf\"",
            7.0,
            MetricType::Histogram,
        ),
        row(
            10,
            "vllm:ttft",
            "vllm:ttft_sum",
            "",
            f64::INFINITY,
            MetricType::Histogram,
        ),
        row(
            20,
            protocol::CLIENT_CPU_METRIC,
            protocol::CLIENT_CPU_METRIC,
            "",
            1.5,
            MetricType::Counter,
        ),
        row(30, "x", "x", "", f64::NAN, MetricType::Untyped),
    ];
    let s = scrapes_text(rows);
    assert_eq!(
        s.len(),
        2,
        "the recorder's own scrape is not the server's: {s:?}"
    );
    assert_eq!(
        s[0],
        (
            10,
            "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 4\n# TYPE vllm:ttft histogram\nvllm:ttft_bucket{le=\"+Inf\"} 7\nvllm:ttft_sum +Inf\n".to_string()
        )
    );
    assert_eq!(s[1], (30, "x NaN\n".to_string()));
}
