//! What this build is: version, git commit, target and profile (set by the crate's build
//! script), and what each binary can do, for `--version` and the manifest's `tool`. One
//! home, so `tokentrace --version`, `tokentrace-record --version` and the manifest agree.

/// The git commit (12 hex digits) this build was made from, or `unknown`.
pub const COMMIT: &str = env!("TOKENTRACE_COMMIT");
/// The Rust target triple it was built for.
pub const TARGET: &str = env!("TOKENTRACE_TARGET");
/// The Cargo profile (`release`, `debug`).
pub const PROFILE: &str = env!("TOKENTRACE_PROFILE");

/// What the recorder in every build does, as `--version` lists it: uploads to S3-compatible
/// storage, TLS by rustls (no OpenSSL to find on the box), and NVML loaded at run time
/// (the binary links no NVIDIA library; without a driver it records no GPU telemetry).
pub const RECORDER_FEATURES: &[&str] = &["recorder", "s3", "rustls", "nvml-at-run-time"];
/// What the laptop CLI adds to the recorder's.
pub const CLI_FEATURES: &[&str] = &["analyzer", "simulator"];

/// A `--version` text after the name: version, commit, target and profile, then the
/// features line.
macro_rules! version_text {
    ($features:literal) => {
        concat!(
            env!("CARGO_PKG_VERSION"),
            " (commit ",
            env!("TOKENTRACE_COMMIT"),
            ", ",
            env!("TOKENTRACE_TARGET"),
            ", ",
            env!("TOKENTRACE_PROFILE"),
            ")\nfeatures: ",
            $features
        )
    };
}

/// `tokentrace-record --version`'s text after the name.
pub const RECORDER_VERSION: &str = version_text!("recorder, s3, rustls, nvml-at-run-time");
/// `tokentrace --version`'s text after the name.
pub const CLI_VERSION: &str =
    version_text!("recorder, s3, rustls, nvml-at-run-time, analyzer, simulator");

/// The commit, or None when the build did not know it.
pub fn commit() -> Option<&'static str> {
    (COMMIT != "unknown").then_some(COMMIT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_texts_list_the_features_they_claim() {
        let listed = |text: &str| -> Vec<String> {
            let line = text.lines().find_map(|l| l.strip_prefix("features: "));
            line.unwrap_or_default()
                .split(", ")
                .map(str::to_string)
                .collect()
        };
        assert_eq!(listed(RECORDER_VERSION), RECORDER_FEATURES);
        let cli: Vec<&str> = RECORDER_FEATURES
            .iter()
            .chain(CLI_FEATURES)
            .copied()
            .collect();
        assert_eq!(listed(CLI_VERSION), cli);
        assert!(RECORDER_VERSION.starts_with(crate::TOOL_VERSION));
        assert!(CLI_VERSION.contains(&format!("commit {COMMIT}, {TARGET}, {PROFILE})")));
    }
}
