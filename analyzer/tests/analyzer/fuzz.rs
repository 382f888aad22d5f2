//! Property tests (proptest) of the rules loader, which reads files users write: any
//! text, TOML with random keys and values, and the built-in rule sets with lines cut,
//! swapped or altered either load or give an error naming the file; never a panic.
//! Cases: `PROPTEST_CASES` (256 in CI; `bench/fuzz.sh` runs 10 million); a run damaged
//! after it was copied: `TOKENTRACE_FUZZ_RUNS` (64 in CI).

use std::path::Path;

use proptest::prelude::*;
use tokentrace_analyzer::rules;

const BUILTIN: [&str; 3] = [
    include_str!("../../../score/rules/default.toml"),
    include_str!("../../../score/rules/reference-0.6.2.toml"),
    include_str!("../../../score/rules/default-1.1.0.toml"),
];

/// A built-in rule set with a few of its lines removed, repeated or given another value.
fn altered_builtin() -> impl Strategy<Value = String> {
    (
        0..BUILTIN.len(),
        prop::collection::vec(
            (
                any::<prop::sample::Index>(),
                0..4u8,
                prop_oneof![
                    Just("-1".to_string()),
                    Just("1e309".to_string()),
                    Just("nan".to_string()),
                    Just("\"text\"".to_string()),
                    Just("[1, 2]".to_string()),
                    Just("{ a = 1 }".to_string()),
                    Just("true".to_string()),
                    Just("18446744073709551616".to_string()),
                    "-?[0-9]{1,6}(\\.[0-9]{1,3})?",
                ],
            ),
            0..6,
        ),
        prop::option::of(prop_oneof![
            Just("default".to_string()),
            Just("reference@0.6.2".to_string()),
            Just("nope".to_string()),
            Just("default@9".to_string()),
        ]),
    )
        .prop_map(|(i, edits, extends)| {
            let mut lines: Vec<String> = BUILTIN[i].lines().map(str::to_string).collect();
            for (at, kind, value) in edits {
                if lines.is_empty() {
                    break;
                }
                let at = at.index(lines.len());
                match kind {
                    0 => {
                        lines.remove(at);
                    }
                    1 => {
                        let l = lines[at].clone();
                        lines.insert(at, l);
                    }
                    _ => {
                        if let Some((k, _)) = lines[at].split_once('=') {
                            lines[at] = format!("{k}= {value}");
                        }
                    }
                }
            }
            let mut text = lines.join("\n");
            if let Some(e) = extends {
                text = format!("extends = \"{e}\"\n{text}");
            }
            text
        })
}

proptest! {
    #[test]
    fn any_rules_text_loads_or_names_the_file(
        text in prop_oneof![any::<String>(), altered_builtin()],
    ) {
        let path = Path::new("/rules/fuzzed.toml");
        match rules::parse(&text, path) {
            Ok(r) => prop_assert!(!r.id().is_empty()),
            Err(e) => prop_assert!(e.to_string().contains("/rules/fuzzed.toml"), "{}", e),
        }
    }
}

/// A run whose table files were damaged after they were copied: scoring it gives a
/// scoring or an error, never a panic (polars reads these files, not the trace reader).
mod damaged_runs {
    use std::sync::OnceLock;

    use proptest::prelude::*;
    use tokentrace_schemas::layout::{CellKey, Phase};

    /// A one-cell synthetic run's files, written once.
    fn seed() -> &'static (tempfile::TempDir, CellKey) {
        static SEED: OnceLock<(tempfile::TempDir, CellKey)> = OnceLock::new();
        SEED.get_or_init(|| {
            let dir = tempfile::tempdir().expect("tempdir");
            let key = CellKey::new(Phase::Decode, 1024, 2);
            tokentrace_testkit::synth::write_run(dir.path(), "run-fuzz", &[key], 400)
                .expect("synthetic run");
            (dir, key)
        })
    }

    fn copy(from: &std::path::Path, to: &std::path::Path) {
        std::fs::create_dir_all(to).expect("mkdir");
        for e in std::fs::read_dir(from).expect("read").flatten() {
            let p = e.path();
            if p.is_dir() {
                copy(&p, &to.join(e.file_name()));
            } else {
                std::fs::copy(&p, to.join(e.file_name())).expect("copy");
            }
        }
    }

    proptest! {
        // Each input scores a whole run through polars: 64 by default, or
        // TOKENTRACE_FUZZ_RUNS (bench/fuzz.sh).
        #![proptest_config(ProptestConfig {
            cases: std::env::var("TOKENTRACE_FUZZ_RUNS")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(64),
            ..ProptestConfig::default()
        })]
        #[test]
        fn a_damaged_run_scores_or_says_why(
            file in prop_oneof![
                Just("chunks.parquet"),
                Just("requests.parquet"),
                Just("metrics.parquet"),
                Just("events.parquet"),
            ],
            flips in prop::collection::vec((any::<prop::sample::Index>(), 1..=255u8), 1..4),
            cut in proptest::option::of(any::<prop::sample::Index>()),
        ) {
            let (seed, key) = seed();
            let tmp = tempfile::tempdir().expect("tempdir");
            let run = tmp.path().join("run");
            copy(seed.path(), &run);
            let path = key.dir(&run).join(file);
            let mut bytes = std::fs::read(&path).expect("read");
            for (at, b) in flips {
                let at = at.index(bytes.len());
                bytes[at] ^= b;
            }
            if let Some(c) = cut {
                bytes.truncate(c.index(bytes.len() + 1));
            }
            std::fs::write(&path, &bytes).expect("write");
            let rules = tokentrace_analyzer::RuleSet::load("default").expect("rules");
            let _ = tokentrace_analyzer::score_dir(&run, &rules);
        }
    }
}
