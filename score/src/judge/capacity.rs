//! The rate report's judgement of a context's rate cells together: whether the server
//! saturated, its capacity, and the SLO's knee. A rule's outcome, so it is data in the
//! scoring (each rate cell's `capacity` label, the run's `rate_capacity`), not only text.

use std::collections::BTreeSet;

use tokentrace_schemas::layout::Phase;

use crate::contract::{CAPACITY_ABOVE, CAPACITY_WITHIN, CellScore, Figures, RateCapacity};
use crate::rules::RuleSet;

/// A cell's figures, when its verdict lets them be shown.
fn shown(c: &CellScore) -> Option<&Figures> {
    c.figures
        .as_ref()
        .filter(|_| c.verdict.is_some_and(|v| v.shows_figures()))
}

/// The rate a cell's schedule offered: its own where it has one, else the nominal one.
fn offered(c: &CellScore) -> Option<f64> {
    let rate = c.rate?;
    if rate.is_inf() {
        return Some(f64::INFINITY);
    }
    Some(
        shown(c)
            .and_then(|f| f.schedule_rate)
            .unwrap_or(rate.per_second()),
    )
}

/// Judges each context's rate cells of `cells` (labelling each with `capacity` where a
/// capacity was found) and returns one [`RateCapacity`] per context with rate cells.
pub fn judge(cells: &mut [CellScore], rules: &RuleSet) -> Vec<RateCapacity> {
    let share = rules.slo.saturated_share();
    let contexts: BTreeSet<u32> = cells
        .iter()
        .filter(|c| c.phase == Phase::Rate)
        .map(|c| c.context)
        .collect();
    let mut out = Vec::new();
    for ctx in contexts {
        let mut row: Vec<usize> = (0..cells.len())
            .filter(|&i| cells[i].phase == Phase::Rate && cells[i].context == ctx)
            .collect();
        row.sort_by_key(|&i| cells[i].rate);
        let achieved = |c: &CellScore| shown(c).and_then(|f| f.request_rate);
        // Saturation: a cell completed well under what its schedule offered (an `inf`
        // cell always does). An offered rate above the highest completed one cannot be
        // served in a steady state: its queue grows with every request, its latencies
        // say how long the cell was, and it is never the knee.
        let saturated = row.iter().any(|&i| {
            let c = &cells[i];
            offered(c)
                .zip(achieved(c))
                .is_some_and(|(o, a)| o.is_infinite() || a < share * o)
        });
        let capacity = row
            .iter()
            .filter_map(|&i| achieved(&cells[i]).map(|a| (a, i)))
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .filter(|_| saturated);
        let above =
            |c: &CellScore| capacity.is_some_and(|(a, _)| offered(c).is_some_and(|o| o > a));
        let met = |c: &CellScore| c.figures.as_ref().and_then(|f| f.slo_met) == Some(true);
        let knee = row
            .iter()
            .map(|&i| &cells[i])
            .take_while(|c| met(c) && !above(c))
            .last()
            .and_then(|c| c.rate);
        let first_miss = row
            .iter()
            .map(|&i| &cells[i])
            .find(|c| !met(c) || above(c))
            .and_then(|c| c.rate);
        let labels: Vec<(usize, &'static str)> = row
            .iter()
            .map(|&i| {
                (
                    i,
                    if above(&cells[i]) {
                        CAPACITY_ABOVE
                    } else {
                        CAPACITY_WITHIN
                    },
                )
            })
            .collect();
        if capacity.is_some() {
            for (i, label) in labels {
                if let Some(f) = cells[i].figures.as_mut() {
                    f.capacity = Some(label.to_string());
                }
            }
        }
        out.push(RateCapacity {
            context: ctx,
            capacity_req_s: capacity.map(|(a, _)| a),
            capacity_rate: capacity.and_then(|(_, i)| cells[i].rate),
            knee,
            first_miss,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use tokentrace_schemas::layout::{CellKey, Rate};

    use super::*;
    use crate::contract::{CellScoreState, Verdict};

    /// A Valid rate cell at 1K context: its nominal rate, the rate its schedule offered,
    /// what it completed, and whether it met the SLO.
    fn cell(rate: &str, schedule: f64, completed: f64, met: bool) -> CellScore {
        let r = Rate::parse(rate).expect("rate");
        let mut key = CellKey::new(Phase::Rate, 1024, 1);
        key.rate = Some(r);
        let mut c = super::super::new_cell(key, CellScoreState::Complete, None);
        c.verdict = Some(Verdict::Valid);
        c.figures = Some(Figures {
            schedule_rate: (!r.is_inf()).then_some(schedule),
            request_rate: Some(completed),
            slo_met: Some(met),
            ..Figures::default()
        });
        c
    }

    fn labels(cells: &[CellScore]) -> Vec<Option<&str>> {
        cells
            .iter()
            .map(|c| c.figures.as_ref().and_then(|f| f.capacity.as_deref()))
            .collect()
    }

    #[test]
    fn a_poisson_sweep_whose_lowest_rate_under_offers_keeps_its_knee() {
        let rules = RuleSet::builtin("default").expect("rules");
        // Seeded Poisson at 1 req/s offered 0.74 and completed 0.76: all of it, though
        // under 0.8 × 1. Judged against the nominal rate it saturated the server, which
        // put 3 req/s (2.94 of 3.0 completed) above a "capacity" of 2.94: knee 1.
        let mut cells = vec![cell("1", 0.74, 0.76, true), cell("3", 3.0, 2.94, true)];
        let judged = judge(&mut cells, &rules);
        assert_eq!(judged.len(), 1);
        assert_eq!(judged[0].capacity_req_s, None);
        assert_eq!(judged[0].knee, Rate::parse("3"));
        assert_eq!(judged[0].first_miss, None);
        assert_eq!(labels(&cells), vec![None, None]);

        // With a rate the server cannot serve, the capacity is what it completed at most,
        // and the knee stays at 3.
        let mut cells = vec![
            cell("1", 0.74, 0.76, true),
            cell("3", 3.0, 2.94, true),
            cell("6", 6.1, 3.2, false),
        ];
        let judged = judge(&mut cells, &rules);
        assert_eq!(judged[0].capacity_req_s, Some(3.2));
        assert_eq!(judged[0].capacity_rate, Rate::parse("6"));
        assert_eq!(judged[0].knee, Rate::parse("3"));
        assert_eq!(judged[0].first_miss, Rate::parse("6"));
        assert_eq!(
            labels(&cells),
            vec![
                Some(CAPACITY_WITHIN),
                Some(CAPACITY_WITHIN),
                Some(CAPACITY_ABOVE)
            ]
        );
    }

    #[test]
    fn the_saturated_share_is_a_rule() {
        // 3 req/s completed 2.94 of 3.0: within 0.8, saturated under a share of 0.99.
        let mut rules = RuleSet::builtin("default").expect("rules");
        let mut cells = vec![cell("1", 1.0, 1.0, true), cell("3", 3.0, 2.94, true)];
        assert_eq!(judge(&mut cells, &rules)[0].capacity_req_s, None);
        rules.slo.saturated_share = Some(0.99);
        let judged = judge(&mut cells, &rules);
        assert_eq!(judged[0].capacity_req_s, Some(2.94));
        // 3.0 offered is above the 2.94 completed: not the knee.
        assert_eq!(judged[0].knee, Rate::parse("1"));
        // An `inf` cell always saturates.
        let mut cells = vec![cell("1", 1.0, 1.0, true), cell("inf", 0.0, 5.0, false)];
        let judged = judge(&mut cells, &RuleSet::builtin("default").expect("rules"));
        assert_eq!(judged[0].capacity_req_s, Some(5.0));
        assert_eq!(judged[0].knee, Rate::parse("1"));
    }
}
