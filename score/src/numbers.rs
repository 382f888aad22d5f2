//! Numbers as the reports write them, after the reference matrix: thousands separators,
//! `19.3K` rates, whole milliseconds, `8K` contexts. Shared by the Markdown report, the
//! figure table and the diff.

/// `8K` for multiples of 1,024 tokens, else the plain count.
pub fn context_label(tokens: u32) -> String {
    if tokens >= 1024 && tokens.is_multiple_of(1024) {
        format!("{}K", tokens / 1024)
    } else {
        thousands(i64::from(tokens))
    }
}

/// `1,234,567`.
pub fn thousands(v: i64) -> String {
    let digits = v.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0 { format!("-{out}") } else { out }
}

/// `1,259.4` with `decimals` places.
pub fn fixed(v: f64, decimals: usize) -> String {
    let s = format!("{:.*}", decimals, v.abs());
    let (int, frac) = s.split_once('.').unwrap_or((&s, ""));
    let int: i64 = int.parse().unwrap_or(0);
    let sign = if v < 0.0 && s.chars().any(|c| c.is_ascii_digit() && c != '0') {
        "-"
    } else {
        ""
    };
    if frac.is_empty() {
        format!("{sign}{}", thousands(int))
    } else {
        format!("{sign}{}.{frac}", thousands(int))
    }
}

/// A rate as the reference shows it: `19.3K` (`20K`) from 10,000 up, else `1,259.4`;
/// `whole` drops the decimal below 10,000 (its Prefill section: `8,773`).
pub fn rate(v: f64, whole: bool) -> String {
    if v >= 10_000.0 {
        let k = format!("{:.1}", v / 1000.0);
        let k = k.strip_suffix(".0").unwrap_or(&k);
        format!(
            "{}K",
            fixed(
                k.parse().unwrap_or(0.0),
                if k.contains('.') { 1 } else { 0 }
            )
        )
    } else {
        fixed(v, if whole { 0 } else { 1 })
    }
}

/// `4,454 ms`.
pub fn ms_whole(v: f64) -> String {
    format!("{} ms", fixed(v, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_as_the_reference_writes_them() {
        assert_eq!(rate(19_312.0, false), "19.3K");
        assert_eq!(rate(19_980.0, false), "20K");
        assert_eq!(rate(8_773.0, false), "8,773.0");
        assert_eq!(rate(8_773.0, true), "8,773");
        assert_eq!(rate(1_259.44, false), "1,259.4");
        assert_eq!(rate(244.6, false), "244.6");
        assert_eq!(rate(123_456.0, false), "123.5K");
        assert_eq!(ms_whole(4_454.4), "4,454 ms");
        assert_eq!(ms_whole(93.0), "93 ms");
        assert_eq!(fixed(30.0, 1), "30.0");
        assert_eq!(fixed(-0.04, 1), "0.0");
        assert_eq!(fixed(-2.5, 1), "-2.5");
        assert_eq!(thousands(196_574), "196,574");
        assert_eq!(thousands(0), "0");
        assert_eq!(context_label(8192), "8K");
        assert_eq!(context_label(1_043_456), "1019K");
        assert_eq!(context_label(300), "300");
    }
}
