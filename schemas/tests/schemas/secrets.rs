//! Secrets never reach the manifest: URL credentials and launch-command secrets.

use tokentrace_schemas::clock::RunClock;
use tokentrace_schemas::redact::{redact_command, redact_url};

#[test]
fn urls_lose_credentials() {
    assert_eq!(
        redact_url("http://user:hunter2@gpu-box:8000/v1"),
        "http://gpu-box:8000/v1"
    );
    assert_eq!(
        redact_url("https://h/v1?api_key=abc&model=m#frag"),
        "https://h/v1?api_key=<redacted>&model=m#frag"
    );
    assert_eq!(redact_url("http://127.0.0.1:8000"), "http://127.0.0.1:8000");
    assert_eq!(redact_url("gpu-box:8000"), "gpu-box:8000");
    assert_eq!(redact_url("http://a@b@c/x"), "http://c/x");
}

#[test]
fn commands_lose_secrets() {
    let cmd = "HF_TOKEN=hf_abc vllm serve m --api-key sk-123 --port 8000 --hf-token=xyz \
               -H 'Authorization: Bearer tk-secret-9' --max-model-len 1048576";
    let r = redact_command(cmd);
    for secret in ["hf_abc", "sk-123", "xyz", "tk-secret-9"] {
        assert!(!r.contains(secret), "{secret} leaked: {r}");
    }
    assert_eq!(
        r,
        "HF_TOKEN=<redacted> vllm serve m --api-key <redacted> --port 8000 --hf-token=<redacted> \
               -H 'Authorization: Bearer <redacted>' --max-model-len 1048576"
    );
    // The reference report's command keeps everything that is not secret.
    let reference = "vllm serve deepseek --tensor-parallel-size 4 --kv-cache-dtype fp8";
    assert_eq!(redact_command(reference), reference);
}

#[test]
fn run_clock_is_monotonic_and_anchored() {
    let clock = RunClock::start();
    let a = clock.now_ns();
    let b = clock.now_ns();
    assert!(a >= 0 && b >= a);
    let anchor = clock.anchor();
    let utc = anchor.utc().expect("RFC 3339");
    assert!(anchor.utc_at_zero.ends_with('Z'), "{}", anchor.utc_at_zero);
    let later = anchor.utc_of(1_500_000_000).expect("in range");
    assert_eq!(
        later.duration_since(utc).expect("after").as_nanos(),
        1_500_000_000
    );
    let earlier = std::time::Instant::now()
        .checked_sub(std::time::Duration::from_secs(1))
        .map(|t| clock.ns_at(t));
    if let Some(ns) = earlier {
        assert!(ns < 0, "instants before the zero are negative: {ns}");
    }
    // CLOCK_MONOTONIC maps onto the run clock.
    let mono = tokentrace_schemas::clock::monotonic_ns();
    let run_ns = clock.from_monotonic(mono);
    let after = clock.now_ns();
    // The mapping is exact to within the bracket of two clock reads (µs in debug builds).
    assert!(
        run_ns >= b - 20_000 && run_ns <= after + 20_000,
        "{b} <= {run_ns} <= {after}"
    );
    assert_eq!(anchor.monotonic_at_zero_ns, Some(clock.monotonic_at_zero()));
}
