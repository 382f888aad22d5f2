//! The shared protocol: every engine's series carry its metric prefix (which is how the
//! recorder tells the engine from `/metrics`), and names round-trip.

use tokentrace_schemas::protocol::{CLIENT_CPU_METRIC, CLIENT_LAG_METRIC, Engine, LagStat};

#[test]
fn engines_name_their_series_consistently() {
    for e in Engine::ALL {
        assert_eq!(Engine::from_name(e.name()), Some(e));
        let s = e.series();
        let all = [
            Some(s.running),
            Some(s.waiting),
            Some(s.generated_tokens),
            Some(s.prompt_tokens),
            s.kv_cache_usage,
            s.preemptions,
        ];
        for name in all.into_iter().flatten() {
            assert!(name.starts_with(e.metric_prefix()), "{e:?}: {name}");
        }
        // No other engine's prefix claims these series.
        for other in Engine::ALL.into_iter().filter(|o| *o != e) {
            assert!(
                !s.running.starts_with(other.metric_prefix()),
                "{e:?} vs {other:?}"
            );
        }
    }
    assert_eq!(Engine::from_name("tokentrace-sim"), None);
    for m in [CLIENT_LAG_METRIC, CLIENT_CPU_METRIC] {
        assert!(m.starts_with("tokentrace:"), "{m}");
    }
    assert_eq!(LagStat::Max.labels(), "stat=\"max\"");
}
