//! The values of the recorder's options, parsed: durations (`30s`), endpoints, modes,
//! arrival shapes, replay windows, `KEY=VALUE` pairs and lists (contexts like `8K`, K =
//! 1,024 tokens; rates like `1,2,inf`; positive integers).

use std::time::Duration;

use tokentrace_schemas::column::StrEnum;
use tokentrace_schemas::manifest::PrefillMode;
use tokentrace_schemas::manifest::Think;
use tokentrace_schemas::schedule::Arrival;
use tokentrace_schemas::tables::Endpoint;

use crate::run::session::Mode;

pub(super) fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("`{s}`: {e} (e.g. 30s, 2m)"))
}

pub(super) fn endpoint(s: &str) -> Result<Endpoint, String> {
    match s {
        "completions" => Ok(Endpoint::Completions),
        "chat" => Ok(Endpoint::Chat),
        _ => Err(format!("`{s}`: expected completions or chat")),
    }
}

pub(super) fn prefill_mode(s: &str) -> Result<PrefillMode, String> {
    PrefillMode::parse(s).ok_or_else(|| format!("`{s}`: expected scout or warmup"))
}

pub(super) fn arrival(s: &str) -> Result<Arrival, String> {
    Arrival::parse(s).ok_or_else(|| format!("`{s}`: expected poisson or constant"))
}

pub(super) fn time_scale(s: &str) -> Result<f64, String> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v > 0.0)
        .ok_or_else(|| format!("`{s}`: want a number above 0 (0.5 plays twice as fast)"))
}

/// `START..END` in trace time (`30s..90s`, `..2m`, `10m..`).
pub(super) fn replay_window(s: &str) -> Result<(Option<Duration>, Option<Duration>), String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("`{s}`: want START..END, e.g. 30s..90s, ..2m or 10m.."))?;
    let side = |t: &str| -> Result<Option<Duration>, String> {
        let t = t.trim();
        if t.is_empty() {
            Ok(None)
        } else if t == "0" {
            Ok(Some(Duration::ZERO))
        } else {
            duration(t).map(Some)
        }
    };
    let (a, b) = (side(a)?, side(b)?);
    if let (Some(a), Some(b)) = (a, b)
        && b <= a
    {
        return Err(format!("`{s}`: the end must come after the start"));
    }
    Ok((a, b))
}

pub(super) fn key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("`{s}`: expected KEY=VALUE"))
}

/// Parses a context list like `8K,16K,1000` (K = 1,024 tokens).
pub fn parse_contexts(s: &str) -> Result<Vec<u32>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (num, mult) = match p.strip_suffix(['K', 'k']) {
                Some(n) => (n, 1024u64),
                None => match p.strip_suffix(['M', 'm']) {
                    Some(n) => (n, 1024 * 1024),
                    None => (p, 1),
                },
            };
            let n: u64 = num
                .parse()
                .map_err(|_| format!("`{p}` is not a token count (e.g. 8K, 16384)"))?;
            u32::try_from(n * mult)
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| format!("`{p}` is out of range"))
        })
        .collect()
}

/// Parses a list of request rates like `1,2,4,8,inf` (requests per second, at most
/// three decimals), sorted, without repeats.
pub fn parse_rates(s: &str) -> Result<Vec<tokentrace_schemas::Rate>, String> {
    let mut rates = s
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            tokentrace_schemas::Rate::parse(p).ok_or_else(|| {
                format!(
                    "`{p}` is not a request rate (requests per second above 0, at most three \
                     decimals, or inf)"
                )
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    rates.sort_unstable();
    rates.dedup();
    Ok(rates)
}

/// Parses a list of modes like `matrix,burst`.
pub fn parse_modes(s: &str) -> Result<Vec<Mode>, String> {
    let mut modes = s
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            Mode::parse(p).ok_or_else(|| {
                format!("`{p}`: expected matrix, burst, rate, replay or conversation")
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    modes.sort_unstable();
    modes.dedup();
    Ok(modes)
}

/// Parses a list of positive integers like `1,2,4`.
pub fn parse_list(s: &str) -> Result<Vec<u32>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.parse::<u32>()
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| format!("`{p}` is not a positive integer"))
        })
        .collect()
}

/// Parses a session's turns: `5` (fixed) or `3..8` (drawn uniformly, both ends in).
pub fn turns(s: &str) -> Result<(u32, u32), String> {
    let positive = |p: &str| {
        p.trim()
            .parse::<u32>()
            .ok()
            .filter(|&v| v > 0)
            .ok_or_else(|| {
                format!("`{s}`: want a number of turns above 0, or MIN..MAX (e.g. 5, 3..8)")
            })
    };
    let (lo, hi) = match s.split_once("..") {
        Some((a, b)) => (positive(a)?, positive(b)?),
        None => {
            let n = positive(s)?;
            (n, n)
        }
    };
    if lo > hi {
        return Err(format!("`{s}`: the fewest turns are more than the most"));
    }
    Ok((lo, hi))
}

/// Parses how think times are drawn: `fixed` or `exponential`.
pub fn think(s: &str) -> Result<Think, String> {
    Think::parse(s.trim()).ok_or_else(|| format!("`{s}`: expected fixed or exponential"))
}
