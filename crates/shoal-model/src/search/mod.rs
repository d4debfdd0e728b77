//! Search strategies: which candidates of a space to try, in batches, under a budget. Each one
//! is a pure state machine: it proposes candidates it never proposed before, and observes
//! outcomes (a time, or a failure). No clock, no I/O and its own seeded generator, so a search
//! replays exactly from its seed and its observations — what resuming after a crash needs.
//!
//! Batches, not single proposals: a strategy is asked for as many candidates as there are free
//! slots, so compile slots and devices stay busy while it waits for results.
//!
//! Candidates are the valid points of the space (what the rules allow), each a vector of value
//! indexes, one per parameter; a strategy proposes only those, by their position in
//! [`Space::candidates`].

mod budget;
mod forest;
mod genetic;
mod index;
mod prior;
mod random;
mod simulate;

pub use budget::{Budget, Search, SearchSpec, SearchSpecError};
pub use forest::Forest;
pub use genetic::Genetic;
pub use prior::{Prior, PriorSource, PriorSourceError};
pub use random::Random;
pub use simulate::{simulate, simulate_warm, Simulated, Slots};

/// The candidates a strategy chooses from.
#[derive(Clone, Debug, Default)]
pub struct Space {
    /// How many values each parameter has.
    pub sizes: Vec<usize>,
    /// Every valid candidate, as one value index per parameter.
    pub candidates: Vec<Vec<u16>>,
}

impl Space {
    /// Where each candidate is in [`Space::candidates`], by its value indexes.
    fn index(&self) -> index::Index {
        index::Index::new(&self.sizes, self.candidates.iter().map(Vec::as_slice))
    }
}

/// A search strategy (see the module's documentation).
pub trait Strategy {
    /// Up to `n` candidates (positions in [`Space::candidates`]) never proposed before; fewer
    /// only when the space has no more.
    fn propose(&mut self, n: usize) -> Vec<usize>;
    /// What a proposed candidate measured: its time, or `None` when it failed.
    fn observe(&mut self, candidate: usize, time: Option<f64>);
    /// How many candidates the search may still propose, the batch about to be asked for
    /// included: told before each [`Strategy::propose`] under a budget, so that a strategy can
    /// stop exploring once no proposal will follow what it learns. Ignored by default.
    fn budget_left(&mut self, _left: usize) {}
    /// How many of its proposals it can use out at once (chosen, their outcomes not yet
    /// observed) under a budget of `budget` evaluations. A proposal made while others are out
    /// is made without knowing their outcomes: a model-based search with too many out chooses
    /// mostly blind. Unbounded by default (a random search loses nothing by it).
    fn in_flight(&self, _budget: usize) -> usize {
        usize::MAX
    }
}

/// The strategies by name, for specs and benchmarks.
pub const STRATEGIES: [&str; 3] = ["random", "genetic", "forest"];

/// A strategy by name over `space`, seeded, warm-started from `prior` where it can use one
/// (the forest; see [`Prior`]).
pub fn strategy(
    name: &str,
    space: &Space,
    seed: u64,
    prior: Option<&Prior>,
) -> Option<Box<dyn Strategy>> {
    match name {
        "random" => Some(Box::new(Random::new(space, seed))),
        "genetic" => Some(Box::new(Genetic::new(space, seed))),
        "forest" => Some(Box::new(Forest::warm(space, seed, prior))),
        _ => None,
    }
}

/// A small deterministic generator (xorshift64*).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        // Spread small seeds over the state, never zero.
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// A 2-parameter space, 16 × 16, without the candidates where both are odd (the rules), and
    /// a smooth time with its minimum at (12, 4).
    fn space() -> (Space, impl Fn(usize, &Space) -> Option<f64>) {
        let mut candidates = Vec::new();
        for a in 0..16u16 {
            for b in 0..16u16 {
                if !(a % 2 == 1 && b % 2 == 1) {
                    candidates.push(vec![a, b]);
                }
            }
        }
        let space = Space {
            sizes: vec![16, 16],
            candidates,
        };
        let time = |c: usize, s: &Space| {
            let v = &s.candidates[c];
            let (a, b) = (f64::from(v[0]), f64::from(v[1]));
            // A failing corner, as real spaces have.
            (v[0] + v[1] != 30).then(|| 10.0 + (a - 12.0).powi(2) + (b - 4.0).powi(2))
        };
        (space, time)
    }

    fn run(name: &str, seed: u64, budget: u64) -> (Vec<usize>, f64) {
        let (space, time) = space();
        // Eight out at once whatever the strategy would choose, so that the batches are those
        // the tests name.
        let spec = SearchSpec::new(name, Budget::Count(budget), seed)
            .unwrap()
            .with_in_flight(8);
        let run = simulate(&spec, &space, Slots::Batches(8), |c| time(c, &space));
        (run.measured, run.best.unwrap_or(f64::MAX))
    }

    /// As [`run`], but `in_flight` candidates are out at a time and each slot is refilled as
    /// soon as its outcome is observed, as the Scheduler refills freed slots.
    fn run_refilling(name: &str, seed: u64, budget: u64, in_flight: usize) -> f64 {
        let (space, time) = space();
        let spec = SearchSpec::new(name, Budget::Count(budget), seed)
            .unwrap()
            .with_in_flight(in_flight);
        let run = simulate(&spec, &space, Slots::Refilled(in_flight), |c| {
            time(c, &space)
        });
        run.best.unwrap_or(f64::MAX)
    }

    #[test]
    fn never_twice_and_only_valid_candidates() {
        for name in STRATEGIES {
            let (seen, _) = run(name, 3, 500);
            let (space, _) = space();
            assert_eq!(
                seen.len(),
                space.candidates.len(),
                "{name}: the whole space, then no more"
            );
            let unique: HashSet<usize> = seen.iter().copied().collect();
            assert_eq!(
                unique.len(),
                seen.len(),
                "{name} proposed a candidate twice"
            );
        }
    }

    #[test]
    fn the_same_seed_replays_the_same_search() {
        for name in STRATEGIES {
            assert_eq!(run(name, 7, 60).0, run(name, 7, 60).0, "{name}");
            assert_ne!(run(name, 7, 60).0, run(name, 8, 60).0, "{name}");
        }
    }

    #[test]
    fn guided_searches_beat_random_on_a_smooth_space() {
        // Median over seeds of the best found with 30 of 192 candidates.
        let median = |name: &str| {
            let mut bests: Vec<f64> = (1..=21).map(|seed| run(name, seed, 30).1).collect();
            bests.sort_by(f64::total_cmp);
            bests[10]
        };
        let random = median("random");
        for name in ["genetic", "forest"] {
            let found = median(name);
            assert!(found <= random, "{name} {found} against random {random}");
            assert!(found <= 12.0, "{name} {found}: the optimum is 10");
        }
    }

    #[test]
    fn the_forests_last_batch_stays_one_parameter_from_the_best() {
        // 24 of 192 candidates in batches of 8: the third batch is the last, and no proposal
        // follows it, so each of its picks is a neighbour of the best of the first 16 (there
        // are up to 22 of them). Earlier batches explore beyond.
        let (space, time) = space();
        let (mut explored, total) = (0, 5);
        for seed in 1..=total {
            let (seen, _) = run("forest", seed, 24);
            let best = *seen[..16]
                .iter()
                .min_by(|a, b| {
                    let t = |c: usize| time(c, &space).unwrap_or(f64::MAX);
                    t(**a).total_cmp(&t(**b))
                })
                .unwrap();
            let away = |c: usize| {
                let (x, y) = (&space.candidates[c], &space.candidates[best]);
                x.iter().zip(y).filter(|(a, b)| a != b).count()
            };
            for c in &seen[16..] {
                assert_eq!(away(*c), 1, "seed {seed}: the last batch's {c}");
            }
            explored += usize::from(seen[8..16].iter().any(|c| away(*c) > 1));
        }
        assert!(explored > 0, "the second batch explored in no seed");
    }

    /// The forest's best found with `budget` of the 192 candidates, 8 out at a time and
    /// refilled, from `prior` (each candidate's earlier time given by `earlier`) or cold.
    fn warm_median(budget: u64, earlier: Option<&dyn Fn(usize) -> Option<f64>>) -> f64 {
        let (space, time) = space();
        let prior = earlier.map(|f| Prior::new((0..space.candidates.len()).map(|c| (c, f(c)))));
        let mut bests: Vec<f64> = (1..=21)
            .map(|seed| {
                let spec = SearchSpec::new("forest", Budget::Count(budget), seed).unwrap();
                let run = simulate_warm(&spec, &space, prior.as_ref(), Slots::Refilled(8), |c| {
                    time(c, &space)
                });
                run.best.unwrap_or(f64::MAX)
            })
            .collect();
        bests.sort_by(f64::total_cmp);
        bests[10]
    }

    #[test]
    fn a_prior_that_ranks_like_the_space_starts_the_forest_near_its_optimum() {
        // Another "device": the same landscape at another scale, its optimum one step away.
        let (space, _) = space();
        let shifted = |c: usize| {
            let v = &space.candidates[c];
            let (a, b) = (f64::from(v[0]), f64::from(v[1]));
            Some(3.0 * (20.0 + (a - 11.0).powi(2) + (b - 4.0).powi(2)))
        };
        let (cold, warm) = (warm_median(12, None), warm_median(12, Some(&shifted)));
        assert!(warm < cold, "warm {warm} against cold {cold}");
        assert!(
            warm <= 11.0,
            "warm {warm}: the optimum is 10, one step from the prior's"
        );
    }

    #[test]
    fn a_prior_that_misleads_costs_little() {
        // The landscape upside down: the prior's best are the space's worst.
        let (space, time) = space();
        let inverted = |c: usize| time(c, &space).map(|t| 1_000.0 - t);
        let (cold, warm) = (warm_median(40, None), warm_median(40, Some(&inverted)));
        assert!(warm <= cold * 1.1, "warm {warm} against cold {cold}");
    }

    #[test]
    fn the_forest_guides_slots_refilled_while_others_are_in_flight() {
        // 30 of 192 candidates, 8 out at a time: the forest must start once part of its
        // initial design is back, not wait for all of it while refilling at random, and must
        // not send a freed slot to a twin of a candidate still in flight.
        let median = |name: &str| {
            let mut bests: Vec<f64> = (1..=21)
                .map(|seed| run_refilling(name, seed, 30, 8))
                .collect();
            bests.sort_by(f64::total_cmp);
            bests[10]
        };
        let (random, forest) = (median("random"), median("forest"));
        assert!(forest < random, "forest {forest} against random {random}");
        assert!(forest <= 11.0, "forest {forest}: the optimum is 10");
    }
}
