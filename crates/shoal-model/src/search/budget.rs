//! A strategy under a budget, as a session runs it: [`SearchSpec`] is what a spec's `[search]`
//! asks for, [`Search`] one shape's search — the strategy, how many candidates it may still
//! propose, which it proposed and which outcomes it has seen — rebuilt after a restart from
//! what the store holds ([`Search::resume`]).

use std::fmt;

use super::{strategy, Prior, PriorSource, Space, Strategy, STRATEGIES};

/// Why a spec's `[search]` (its budget or its strategy) is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SearchSpecError {
    /// A budget ending in `%` whose share is no number.
    #[error("budget `{budget}`: a count or a share such as 5%")]
    BudgetNotANumber { budget: String },
    /// A share of 0 % or less, or above 100 %.
    #[error("budget `{budget}`: a share in (0, 100]%")]
    BudgetShareOutOfRange { budget: String },
    /// A budget that is neither a share nor a count of at least 1.
    #[error("budget `{budget}`: a count of at least 1 or a share such as 5%")]
    BudgetNotACount { budget: String },
    /// A strategy that is not one of [`STRATEGIES`].
    #[error("unknown strategy `{name}`: exhaustive, {known}", known = STRATEGIES.join(", "))]
    UnknownStrategy { name: String },
}

/// How many candidates a search may evaluate per shape.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Budget {
    /// At most this many.
    Count(u64),
    /// This share of the shape's candidates, in percent (0, 100].
    Percent(f64),
}

impl Budget {
    /// `200` or `5%`.
    pub fn parse(text: &str) -> Result<Budget, SearchSpecError> {
        let text = text.trim();
        let budget = text.to_string();
        match text.strip_suffix('%') {
            Some(p) => {
                let p: f64 = p
                    .trim()
                    .parse()
                    .map_err(|_| SearchSpecError::BudgetNotANumber { budget })?;
                if p > 0.0 && p <= 100.0 {
                    Ok(Budget::Percent(p))
                } else {
                    Err(SearchSpecError::BudgetShareOutOfRange {
                        budget: text.to_string(),
                    })
                }
            }
            None => match text.parse::<u64>() {
                Ok(n) if n > 0 => Ok(Budget::Count(n)),
                _ => Err(SearchSpecError::BudgetNotACount { budget }),
            },
        }
    }

    /// The evaluations allowed over `size` candidates: at least 1, at most `size`.
    pub fn evaluations(self, size: usize) -> usize {
        let n = match self {
            Budget::Count(n) => usize::try_from(n).unwrap_or(usize::MAX),
            Budget::Percent(p) => (size as f64 * p / 100.0).round() as usize,
        };
        n.max(1).min(size)
    }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Budget::Count(n) => write!(f, "{n}"),
            Budget::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// A spec's `[search]`: which strategy, under which budget per shape, from which seed, and
/// how many of one shape's candidates may be out at once.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchSpec {
    /// One of [`STRATEGIES`].
    pub strategy: String,
    pub budget: Budget,
    pub seed: u64,
    /// Candidates of one shape chosen and not yet back, at most; `None`: as many as the
    /// strategy can use ([`Strategy::in_flight`]).
    pub in_flight: Option<usize>,
    /// Earlier results to start from (a warm start; see [`Prior`]); `None`: a cold start.
    pub prior: Option<PriorSource>,
}

impl SearchSpec {
    /// Checks the strategy's name.
    pub fn new(strategy: &str, budget: Budget, seed: u64) -> Result<SearchSpec, SearchSpecError> {
        if !STRATEGIES.contains(&strategy) {
            return Err(SearchSpecError::UnknownStrategy {
                name: strategy.to_string(),
            });
        }
        Ok(SearchSpec {
            strategy: strategy.to_string(),
            budget,
            seed,
            in_flight: None,
            prior: None,
        })
    }

    /// The same search with at most `n` (at least 1) of one shape's candidates out at once,
    /// whatever its strategy would use.
    pub fn with_in_flight(mut self, n: usize) -> SearchSpec {
        self.in_flight = Some(n.max(1));
        self
    }

    /// The same search, warm-started from `prior`'s results.
    pub fn with_prior(mut self, prior: PriorSource) -> SearchSpec {
        self.prior = Some(prior);
        self
    }
}

/// One shape's search (see the module's documentation).
pub struct Search {
    strategy: Box<dyn Strategy>,
    budget: usize,
    proposed: Vec<bool>,
    observed: Vec<bool>,
    /// How many are observed: `room` is asked on every dispatch turn, so not counted each time.
    observations: usize,
    proposals: usize,
    size: usize,
    /// Candidates out at once, at most (see [`Search::in_flight`]).
    in_flight: usize,
}

impl Search {
    /// A search that has proposed nothing yet. A strategy this build does not know (a spec
    /// registered by a newer one; [`SearchSpec::new`] refuses it in a spec) searches at random
    /// rather than stopping the Scheduler.
    pub fn new(spec: &SearchSpec, space: &Space) -> Search {
        Search::warm(spec, space, None)
    }

    /// A search that has proposed nothing yet, warm-started from an earlier tuning's results
    /// where its strategy uses them (see [`Prior`]).
    pub fn warm(spec: &SearchSpec, space: &Space, prior: Option<&Prior>) -> Search {
        let size = space.candidates.len();
        let strategy: Box<dyn Strategy> = strategy(&spec.strategy, space, spec.seed, prior)
            .unwrap_or_else(|| Box::new(super::Random::new(space, spec.seed)));
        let budget = spec.budget.evaluations(size);
        Search {
            in_flight: spec
                .in_flight
                .unwrap_or_else(|| strategy.in_flight(budget))
                .clamp(1, budget.max(1)),
            strategy,
            budget,
            proposed: vec![false; size],
            observed: vec![false; size],
            observations: 0,
            proposals: 0,
            size,
        }
    }

    /// The search as a restart finds it: the candidates it had proposed, and the outcomes of
    /// those that finished. It goes on with the same budget, never proposes one of them again,
    /// and learns from every outcome; its own generator starts again from the seed, so what it
    /// picks next may differ from what an uninterrupted run would have picked.
    pub fn resume(
        spec: &SearchSpec,
        space: &Space,
        prior: Option<&Prior>,
        proposed: &[usize],
        outcomes: &[(usize, Option<f64>)],
    ) -> Search {
        let mut s = Search::warm(spec, space, prior);
        for &c in proposed {
            if c < s.size && !s.proposed[c] {
                s.proposed[c] = true;
                s.proposals += 1;
            }
        }
        for &(c, time) in outcomes {
            s.observe(c, time);
        }
        s
    }

    /// Up to `n` candidates never proposed before, within what is left of the budget and of
    /// the candidates it may have out at once ([`Search::room`]).
    pub fn propose(&mut self, n: usize) -> Vec<usize> {
        let want = n.min(self.room());
        let mut out = Vec::with_capacity(want);
        // The strategy does not know what was proposed before a restart: what it offers again
        // is dropped and asked for once more. Each call returns candidates it never returned, so
        // this ends.
        while out.len() < want {
            self.strategy.budget_left(self.left());
            let offered = self.strategy.propose(want - out.len());
            if offered.is_empty() {
                break;
            }
            for c in offered {
                if c < self.size && !self.proposed[c] {
                    self.proposed[c] = true;
                    self.proposals += 1;
                    out.push(c);
                }
            }
        }
        out
    }

    /// A proposed candidate's outcome: its time, or `None` when it failed. Counted once.
    pub fn observe(&mut self, candidate: usize, time: Option<f64>) {
        if candidate < self.size && self.proposed[candidate] && !self.observed[candidate] {
            self.observed[candidate] = true;
            self.observations += 1;
            self.strategy.observe(candidate, time);
        }
    }

    /// Whether `candidate` was proposed.
    pub fn was_proposed(&self, candidate: usize) -> bool {
        self.proposed.get(candidate).copied().unwrap_or(false)
    }

    /// Candidates it may still propose.
    pub fn left(&self) -> usize {
        self.budget.min(self.size).saturating_sub(self.proposals)
    }

    /// How many candidates it may propose now: what is left of the budget, and of the
    /// candidates it may have out at once.
    pub fn room(&self) -> usize {
        self.left()
            .min(self.in_flight.saturating_sub(self.outstanding()))
    }

    /// How many candidates it may have out at once (chosen and not yet back): the spec's
    /// `in_flight`, else as many as its strategy can use ([`Strategy::in_flight`]). Slots it
    /// leaves free go to the session's other shapes.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Proposed and not yet observed.
    pub fn outstanding(&self) -> usize {
        self.proposals - self.observations
    }

    /// The evaluations this search may make in all.
    pub fn budget(&self) -> usize {
        self.budget
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space(n: u16) -> Space {
        Space {
            sizes: vec![n as usize],
            candidates: (0..n).map(|i| vec![i]).collect(),
        }
    }

    #[test]
    fn budgets_are_counts_or_shares() {
        assert_eq!(Budget::parse("5%").unwrap().evaluations(4362), 218);
        assert_eq!(Budget::parse("200").unwrap().evaluations(4362), 200);
        assert_eq!(Budget::parse("200").unwrap().evaluations(50), 50);
        assert_eq!(Budget::parse("0.001%").unwrap().evaluations(100), 1);
        for bad in ["150%", "0%", "0", "many", "-3", ""] {
            assert!(Budget::parse(bad).is_err(), "{bad}");
        }
        assert!(SearchSpec::new("annealing", Budget::Count(1), 1).is_err());
    }

    #[test]
    fn a_search_stops_at_its_budget() {
        for name in STRATEGIES {
            let spec = SearchSpec::new(name, Budget::Count(30), 4).unwrap();
            let mut s = Search::new(&spec, &space(100));
            let mut all = Vec::new();
            loop {
                let batch = s.propose(7);
                if batch.is_empty() {
                    break;
                }
                for &c in &batch {
                    s.observe(c, Some(f64::from(c as u32) + 1.0));
                }
                all.extend(batch);
            }
            assert_eq!(all.len(), 30, "{name}");
            assert_eq!((s.left(), s.outstanding()), (0, 0), "{name}");
        }
    }

    #[test]
    fn a_search_has_no_more_out_than_it_may() {
        // The forest's own limit: a twelfth of its budget, at least 4; the others', none.
        for (name, budget, limit) in [
            ("forest", 37, 4),
            ("forest", 74, 6),
            ("forest", 185, 15),
            ("forest", 10, 4),
            ("random", 37, 37),
            ("genetic", 37, 37),
        ] {
            let spec = SearchSpec::new(name, Budget::Count(budget), 2).unwrap();
            let mut s = Search::new(&spec, &space(500));
            assert_eq!(s.in_flight(), limit.min(budget as usize), "{name} {budget}");
            let first = s.propose(16);
            assert_eq!(first.len(), limit.min(16), "{name} {budget}");
            if limit < 16 {
                assert!(s.propose(16).is_empty(), "{name} {budget}: full");
                // Two back, two more: never more than the limit out.
                for &c in &first[..2] {
                    s.observe(c, Some(1.0));
                }
                assert_eq!(s.propose(16).len(), 2, "{name} {budget}");
                assert_eq!(s.outstanding(), limit, "{name} {budget}");
            }
        }
        // A spec's in_flight rules over the strategy's, either way.
        for (name, n) in [("forest", 12), ("random", 3)] {
            let spec = SearchSpec::new(name, Budget::Count(37), 2)
                .unwrap()
                .with_in_flight(n);
            assert_eq!(Search::new(&spec, &space(500)).propose(16).len(), n);
        }
    }

    #[test]
    fn a_resumed_search_keeps_its_budget_and_never_repeats() {
        for name in STRATEGIES {
            let spec = SearchSpec::new(name, Budget::Count(40), 9)
                .unwrap()
                .with_in_flight(16);
            let space = space(120);
            let mut first = Search::new(&spec, &space);
            let before: Vec<usize> = [first.propose(8), first.propose(8)].concat();
            // Half of them finished before the crash.
            let outcomes: Vec<(usize, Option<f64>)> = before
                .iter()
                .take(8)
                .map(|&c| (c, Some(1.0 + c as f64)))
                .collect();
            let mut again = Search::resume(&spec, &space, None, &before, &outcomes);
            assert_eq!(again.outstanding(), 8, "{name}");
            let mut after = Vec::new();
            loop {
                let b = again.propose(5);
                if b.is_empty() {
                    break;
                }
                for &c in &b {
                    again.observe(c, Some(1.0 + c as f64));
                }
                after.extend(b);
            }
            assert_eq!(before.len() + after.len(), 40, "{name}: the same budget");
            assert!(
                after.iter().all(|c| !before.contains(c)),
                "{name} proposed again a candidate proposed before the crash"
            );
        }
    }
}
