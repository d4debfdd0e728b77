//! A search run against times known in advance (a recorded space, a test's formula), its
//! candidates asked for as the Scheduler asks for them. `shoal-bench search` measures the
//! strategies with it and their tests use it, so both run what a session runs: a [`Search`]
//! under its budget, not a bare strategy with a count beside it.

use std::collections::VecDeque;

use super::{Prior, Search, SearchSpec, Space};

/// How candidates are asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slots {
    /// `n` at a time, each batch waiting for all of its outcomes: the worst case for a
    /// model-based search, which chooses a whole batch knowing none of it. A search that may
    /// have fewer out ([`Search::room`]) takes smaller batches.
    Batches(usize),
    /// `n` slots, each outcome observed as it arrives (the oldest first) and its slot asked
    /// for again at once, as the Scheduler refills a freed slot while the others are still
    /// being timed; a search that may have fewer out leaves the rest free.
    Refilled(usize),
}

/// What one simulated search measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Simulated {
    /// The candidates measured, in the order their outcomes were observed.
    pub measured: Vec<usize>,
    /// The best time measured; `None` when every one failed or none was measured.
    pub best: Option<f64>,
}

/// Runs `spec` over `space` until its budget is spent or the space exhausted, answering each
/// candidate with `time` (`None`: it failed).
pub fn simulate(
    spec: &SearchSpec,
    space: &Space,
    slots: Slots,
    time: impl FnMut(usize) -> Option<f64>,
) -> Simulated {
    simulate_warm(spec, space, None, slots, time)
}

/// As [`simulate`], the search warm-started from `prior` ([`Search::warm`]).
pub fn simulate_warm(
    spec: &SearchSpec,
    space: &Space,
    prior: Option<&Prior>,
    slots: Slots,
    mut time: impl FnMut(usize) -> Option<f64>,
) -> Simulated {
    let mut search = Search::warm(spec, space, prior);
    let mut out = Simulated {
        measured: Vec::new(),
        best: None,
    };
    let mut measure = |search: &mut Search, c: usize| {
        let t = time(c);
        if let Some(t) = t {
            out.best = Some(out.best.map_or(t, |b: f64| b.min(t)));
        }
        search.observe(c, t);
        out.measured.push(c);
    };
    match slots {
        Slots::Batches(n) => loop {
            let batch = search.propose(n.max(1));
            if batch.is_empty() {
                break;
            }
            for c in batch {
                measure(&mut search, c);
            }
        },
        Slots::Refilled(n) => {
            let mut pending = VecDeque::new();
            loop {
                let room = n.max(1).saturating_sub(pending.len());
                if room > 0 {
                    pending.extend(search.propose(room));
                }
                let Some(c) = pending.pop_front() else {
                    break;
                };
                measure(&mut search, c);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::Budget;
    use super::*;

    fn space() -> Space {
        Space {
            sizes: vec![10],
            candidates: (0..10u16).map(|v| vec![v]).collect(),
        }
    }

    #[test]
    fn both_ways_of_asking_spend_the_budget_and_no_more() {
        let space = space();
        for slots in [Slots::Batches(4), Slots::Refilled(4)] {
            for (budget, measured) in [(Budget::Count(7), 7), (Budget::Count(50), 10)] {
                let spec = SearchSpec::new("random", budget, 1).unwrap();
                let run = simulate(&spec, &space, slots, |c| Some(1.0 + c as f64));
                assert_eq!(run.measured.len(), measured, "{slots:?} {budget}");
                let best = run.measured.iter().min().map(|c| 1.0 + *c as f64);
                assert_eq!(run.best, best, "{slots:?} {budget}");
            }
        }
    }

    #[test]
    fn failures_are_never_the_best() {
        let spec = SearchSpec::new("random", Budget::Count(10), 1).unwrap();
        let run = simulate(&spec, &space(), Slots::Refilled(3), |_| None);
        assert_eq!((run.measured.len(), run.best), (10, None));
        let run = simulate(&spec, &space(), Slots::Batches(3), |c| {
            (c % 2 == 1).then_some(c as f64)
        });
        assert_eq!(run.best, Some(1.0));
    }
}
