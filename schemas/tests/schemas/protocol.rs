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

/// Typed event details round-trip as JSON, and older recorders' texts read the same.
#[test]
fn readiness_and_drain_details_round_trip_and_read_old_text() {
    use tokentrace_schemas::protocol::{Drain, Readiness};
    for r in [
        Readiness::Ready,
        Readiness::NotReady {
            timeout_ns: Some(120_000_000_000),
        },
    ] {
        assert_eq!(Readiness::from_detail(&r.to_detail()), Some(r));
    }
    for d in [
        Drain::Drained,
        Drain::TimedOut {
            running: 2.0,
            waiting: 0.5,
        },
        Drain::NoMetrics {
            waited_ns: 1_000_000_000,
        },
        Drain::NotChecked,
    ] {
        assert_eq!(Drain::from_detail(&d.to_detail()), Some(d.clone()));
        // The human text of every outcome reads back as the same outcome.
        assert_eq!(
            Drain::from_detail(&d.to_string()).map(|x| std::mem::discriminant(&x)),
            Some(std::mem::discriminant(&d))
        );
    }
    assert_eq!(
        Readiness::from_detail("ready: every stream produced a token"),
        Some(Readiness::Ready)
    );
    assert_eq!(
        Readiness::from_detail("not ready after 120s: window opened anyway"),
        Some(Readiness::NotReady { timeout_ns: None })
    );
    assert_eq!(
        Drain::from_detail("drain timed out with 3 running, 1 waiting"),
        Some(Drain::TimedOut {
            running: 3.0,
            waiting: 1.0
        })
    );
    assert_eq!(
        Drain::from_detail("no metrics: waited 1 s"),
        Some(Drain::NoMetrics {
            waited_ns: 1_000_000_000
        })
    );
    assert_eq!(Drain::from_detail("something else"), None);
    assert_eq!(Readiness::from_detail("{\"readiness\":\"maybe\"}"), None);
}
