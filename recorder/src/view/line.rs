//! The line views: `live`, a bar for the matrix and a line for the cell under way with
//! its tok/s (indicatif), in place, each finished cell printed above with its live
//! score; and `plain`, one line per step, for pipes and CI.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::run::session::Progress;

/// The `live` view's bars; none when stderr is not a terminal (then lines, as `plain`).
#[derive(Debug)]
pub struct Lines {
    bars: Option<(
        indicatif::MultiProgress,
        indicatif::ProgressBar,
        indicatif::ProgressBar,
    )>,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

impl Lines {
    /// Plain lines.
    pub fn plain() -> Self {
        Lines {
            bars: None,
            ticker: None,
        }
    }

    /// The compact view in place, its tok/s from `tokens` (tokens written so far).
    pub fn live(tokens: Arc<AtomicU64>) -> Self {
        use std::io::IsTerminal;
        if !std::io::stderr().is_terminal() {
            return Lines::plain();
        }
        let multi = indicatif::MultiProgress::new();
        let matrix = multi.add(indicatif::ProgressBar::new(0));
        matrix.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:30} {pos}/{len} cells · {elapsed} · ETA {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        let cell = multi.add(indicatif::ProgressBar::new_spinner());
        cell.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {prefix} {msg} · {elapsed}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        let live = cell.clone();
        // Live tok/s: tokens written in the last half second.
        let ticker = tokio::spawn(async move {
            let mut last = tokens.load(Ordering::Relaxed);
            let mut interval = tokio::time::interval(Duration::from_millis(500));
            loop {
                interval.tick().await;
                let now = tokens.load(Ordering::Relaxed);
                live.set_message(format!(
                    "{:.0} tok/s",
                    now.saturating_sub(last) as f64 * 2.0
                ));
                live.tick();
                last = now;
            }
        });
        Lines {
            bars: Some((multi, matrix, cell)),
            ticker: Some(ticker),
        }
    }

    /// Shows `p`; `score`: a finished cell's live score, added to its line.
    pub fn show(&self, p: &Progress, score: Option<&str>) {
        if matches!(p, Progress::Plan(_)) {
            return;
        }
        let text = match score {
            Some(s) => format!("{p} · {s}"),
            None => p.to_string(),
        };
        let Some((multi, matrix, cell)) = &self.bars else {
            eprintln!("{text}");
            return;
        };
        match p {
            Progress::Line(_) | Progress::Plan(_) => {
                let _ = multi.println(text);
            }
            Progress::CellStart { total, key, .. } => {
                matrix.set_length(*total as u64);
                cell.set_prefix(key.to_string());
                cell.reset_elapsed();
            }
            Progress::CellEnd { total, .. } => {
                matrix.set_length(*total as u64);
                matrix.inc(1);
                let _ = multi.println(text);
            }
        }
    }

    pub fn finish(&self) {
        if let Some(t) = &self.ticker {
            t.abort();
        }
        if let Some((_, matrix, cell)) = &self.bars {
            cell.finish_and_clear();
            matrix.finish();
        }
    }
}
