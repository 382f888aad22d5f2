//! Built-in rule sets load and differ only where documented; files may extend them;
//! bad files are refused with the file and the reason.

use std::path::Path;

use tokentrace_analyzer::rules::{BUILTIN, FirstToken, RuleSet, parse};

#[test]
fn built_in_sets_load_by_name_and_version() {
    for (name, version, _) in BUILTIN {
        let r = RuleSet::builtin(&format!("{name}@{version}")).expect("built in");
        assert_eq!((r.name.as_str(), r.version.as_str()), (name, version));
        // Without a version: the newest, listed first.
        let newest = BUILTIN.iter().find(|(n, _, _)| *n == name).expect("listed");
        let latest = RuleSet::builtin(name).expect("by name");
        assert_eq!(latest.version, newest.1);
        assert_eq!(RuleSet::load(name).expect("load"), latest);
    }
    // default 1.0.0 stays as it was: no cache checks.
    let old = RuleSet::builtin("default@1.0.0").expect("default 1.0.0");
    assert_eq!(old.cache, Default::default());
    assert_eq!(RuleSet::builtin("default").expect("d").version, "1.8.0");
    // default 1.6.0 stays as it was: no network checks.
    let before_network = RuleSet::builtin("default@1.6.0").expect("default 1.6.0");
    assert_eq!(before_network.network, Default::default());
    let d = RuleSet::builtin("default").expect("d");
    assert_eq!(d.network.rechunk_events_per_read, Some(8.0));
    assert!(d.network.rechunk_excludes_latency);
    // default 1.5.0 stays as it was: no content or connection checks.
    let before_content = RuleSet::builtin("default@1.5.0").expect("default 1.5.0");
    assert_eq!(before_content.content, Default::default());
    assert_eq!(before_content.connections, Default::default());
    let d = RuleSet::builtin("default").expect("d");
    assert_eq!(d.content.script_mix_max_share, Some(0.05));
    assert_eq!(d.connections.max_retries, Some(0));
    // default 1.2.0 stays as it was: no SLO.
    let before_slo = RuleSet::builtin("default@1.2.0").expect("default 1.2.0");
    assert_eq!(before_slo.slo, Default::default());
    assert!(RuleSet::builtin("default").expect("d").slo.is_set());
    assert_eq!(RuleSet::builtin("reference@9.9"), None);
    let r = RuleSet::builtin("reference").expect("reference");
    assert_eq!(r.id(), "reference@0.6.2-r2");
    assert_eq!(r.ttft.first, FirstToken::FirstContentOrReasoning);
    // The first reading of 0.6.2 stays loadable as it was.
    let first = RuleSet::builtin("reference@0.6.2").expect("reference 0.6.2");
    assert_eq!(first.ttft.first, FirstToken::FirstContent);
    assert_eq!(first.looped.max_cycle_chars, 16384);
    assert_eq!(r.looped.min_cycles, 4);
    assert_eq!(r.looped.min_span_chars, 4096);
    assert_eq!(r.queued.running_mean_below_fraction, Some(0.95));
    assert_eq!(r.queued.waiting_max_above, Some(0.0));
}

#[test]
fn every_difference_of_the_default_set_is_documented() {
    let text = BUILTIN
        .iter()
        .find(|(n, _, _)| *n == "default")
        .map(|(_, _, t)| *t)
        .expect("default");
    let reference = serde_json::to_value(RuleSet::builtin("reference").expect("r")).expect("j");
    let default = serde_json::to_value(RuleSet::builtin("default").expect("d")).expect("j");
    let mut differing = Vec::new();
    for (section, values) in default.as_object().expect("object") {
        // The reference tool has no rate, replay or conversation cells, so no SLO, no
        // replay lag and no prefix eviction; its CJK-leak watchdog is not a rule, and it
        // judges no connections or network: default's [slo], [replay], [content],
        // [connections], [network] and [conversation] tables are additions (documented
        // where they are set), not differences.
        if [
            "name",
            "version",
            "description",
            "slo",
            "replay",
            "content",
            "connections",
            "network",
            "conversation",
        ]
        .contains(&section.as_str())
        {
            continue;
        }
        // Both sets' keys: a setting left at its default is not written out.
        let mut keys: Vec<&String> = values.as_object().expect("section").keys().collect();
        if let Some(r) = reference[section].as_object() {
            keys.extend(r.keys());
        }
        keys.sort();
        keys.dedup();
        for k in keys {
            if reference[section].get(k) != values.get(k) {
                differing.push(format!("{section}.{k}"));
            }
        }
    }
    assert_eq!(
        differing,
        [
            "cache.ttft_excludes_cold",
            "error.scope",
            "queued.running_needs_waiting_samples",
            "queued.waiting_max_above",
            "queued.waiting_mean_above",
            "requests.per_request",
            "requests.scope",
            "requests.tbt_denominator",
        ]
    );
    // One "differs:" comment per differing setting (waiting_max/mean share one).
    assert_eq!(text.matches("# differs:").count(), differing.len() - 1);
}

#[test]
fn bad_rule_files_name_the_file_and_the_problem() {
    let cases = [
        ("name = \"x\"", "missing field"),
        ("extends = \"nope\"", "no built-in rule set `nope`"),
        (
            "extends = \"reference\"\nbogus = 1",
            "unknown field `bogus`",
        ),
        (
            "extends = \"reference\"\n[ttft]\nfirst = \"last\"",
            "unknown variant `last`",
        ),
        (
            "extends = \"reference\"\n[error]\nend_reasons = [\"oops\"]",
            "unknown end reason `oops`",
        ),
        (
            "extends = \"reference\"\n[metrics]\npreset = \"triton\"",
            "unknown preset `triton`",
        ),
        (
            "extends = \"default\"\n[content]\nscripts = [\"Klingon\"]",
            "unknown script `Klingon`",
        ),
        (
            "extends = \"default\"\n[content]\nscript_mix_max_share = 5.0",
            "content.script_mix_max_share: 5 is not within 0–1",
        ),
        (
            "extends = \"reference\"\nname = \"a/b\"",
            "must be non-empty",
        ),
        ("this is not toml", "rule set"),
    ];
    for (text, want) in cases {
        let err = parse(text, Path::new("my-rules.toml"))
            .expect_err(text)
            .to_string();
        assert!(err.contains("my-rules.toml"), "{err}");
        assert!(err.contains(want), "{text}: {err}");
    }
    let err = RuleSet::load("/no/such/rules.toml")
        .expect_err("missing")
        .to_string();
    assert!(
        err.contains("/no/such/rules.toml") && err.contains("reference@0.6.2"),
        "{err}"
    );
}
