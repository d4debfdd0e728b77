//! `shoal-bench search`: Shoal's search strategies (`shoal_model::search`) on recorded spaces in
//! the T4 format, offline: each run proposes batches (as free slots would ask), is answered
//! with the recorded time or failure of each candidate, and stops at the budget. For each
//! strategy, over `--reps` seeds, it prints the median best-found over the optimum with p10 and
//! p90, the share of runs within 2 % of the optimum, and the wall time; the last line per space
//! and budget names the best strategy (the lowest median; on a tie, the larger share within 2 %):
//! `search space=<file> budget=<b> shoal=<strategy>:<median ratio>:<share within 2%>`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use shoal_model::search::{simulate, Budget, Search, SearchSpec, Slots, Space, STRATEGIES};

#[derive(Debug, Args)]
pub struct SearchArgs {
    /// A recorded space in the T4 format (`.json` or `.json.gz`); repeatable.
    #[arg(long, required = true)]
    pub space: Vec<PathBuf>,
    /// Evaluations allowed: a count, or a share of the space such as `5%`; repeatable.
    #[arg(long, default_value = "5%")]
    pub budget: Vec<String>,
    /// Seeds per strategy.
    #[arg(long, default_value_t = 10)]
    pub reps: u64,
    /// Candidates asked for at a time (free compile and eval slots).
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    /// Keep `--batch` candidates in flight instead of asking for whole batches: each result is
    /// observed as it arrives (the oldest first) and one candidate is asked for in its place,
    /// as the Scheduler refills a freed slot while the others are still being timed. Without
    /// it, every batch waits for all its results (the worst case for a model-based search).
    #[arg(long = "async")]
    pub refill: bool,
    /// Candidates of one search out at once, at most, as `in_flight` in a spec's `[search]`:
    /// by default as many as the strategy can use (the forest: a twelfth of its budget, at least
    /// 4), within `--batch`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub in_flight: Option<u64>,
    /// Only this strategy (repeatable); all of them when left out.
    #[arg(long = "strategy", value_parser = clap::builder::PossibleValuesParser::new(STRATEGIES))]
    pub strategies: Vec<String>,
}

/// A recorded space: the strategies' view, and each candidate's recorded time (`None`: failed).
struct Recorded {
    space: Space,
    times: Vec<Option<f64>>,
}

pub fn search(args: SearchArgs) -> anyhow::Result<ExitCode> {
    for path in &args.space {
        let recorded = read(path)?;
        let name = path.file_name().map_or("?".into(), |n| n.to_string_lossy());
        let optimum = recorded
            .times
            .iter()
            .flatten()
            .copied()
            .fold(f64::MAX, f64::min);
        eprintln!(
            "search: {name}: {} candidates, {} valid, optimum {optimum:.4}",
            recorded.times.len(),
            recorded.times.iter().flatten().count()
        );
        for budget in &args.budget {
            let parsed = Budget::parse(budget).map_err(anyhow::Error::msg)?;
            let n = parsed.evaluations(recorded.times.len());
            let slots = if args.refill {
                Slots::Refilled(args.batch)
            } else {
                Slots::Batches(args.batch)
            };
            let mut best: Option<(String, f64, f64)> = None;
            let chosen = STRATEGIES
                .into_iter()
                .filter(|s| args.strategies.is_empty() || args.strategies.iter().any(|c| c == s));
            for name_s in chosen {
                let mut spec = SearchSpec::new(name_s, parsed, 1).expect("a known strategy");
                if let Some(k) = args.in_flight {
                    spec = spec.with_in_flight(usize::try_from(k).unwrap_or(usize::MAX));
                }
                let in_flight = Search::new(&spec, &recorded.space)
                    .in_flight()
                    .min(args.batch);
                let clock = Instant::now();
                let mut ratios: Vec<f64> = (1..=args.reps)
                    .map(|seed| {
                        let spec = SearchSpec {
                            seed,
                            ..spec.clone()
                        };
                        best_found(&recorded, &spec, slots) / optimum
                    })
                    .collect();
                let secs = clock.elapsed().as_secs_f64();
                ratios.sort_by(f64::total_cmp);
                let q = |p: f64| ratios[((ratios.len() - 1) as f64 * p).round() as usize];
                let within =
                    ratios.iter().filter(|r| **r <= 1.02).count() as f64 / ratios.len() as f64;
                println!(
                    "search-run space={name} budget={budget} evaluations={n} strategy={name_s} in_flight={in_flight} median={:.4} p10={:.4} p90={:.4} within_2pct={:.2} secs={secs:.3}",
                    q(0.5),
                    q(0.1),
                    q(0.9),
                    within
                );
                // The lowest median; on a tie, the larger share within 2 %.
                if best
                    .as_ref()
                    .is_none_or(|b| q(0.5) < b.1 || (q(0.5) == b.1 && within > b.2))
                {
                    best = Some((name_s.to_string(), q(0.5), within));
                }
            }
            let (s, median, within) = best.expect("strategies");
            println!("search space={name} budget={budget} shoal={s}:{median:.4}:{within:.2}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The best time one search finds (`f64::MAX` when every candidate it measured failed).
fn best_found(recorded: &Recorded, spec: &SearchSpec, slots: Slots) -> f64 {
    simulate(spec, &recorded.space, slots, |c| recorded.times[c])
        .best
        .unwrap_or(f64::MAX)
}

/// A T4 space as the strategies see it: each parameter's values (numbers in numeric order, as
/// the replay backend orders them), every configuration a candidate, with its recorded time
/// (`None`: failed).
fn read(path: &Path) -> anyhow::Result<Recorded> {
    let t4 = shoal_backend::replay::t4::read(path).map_err(anyhow::Error::msg)?;
    let space = shoal_backend::replay::ReplaySpace::new(t4)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let values = &space.values;
    let candidates = space
        .entries()
        .iter()
        .map(|e| {
            e.values
                .iter()
                .zip(values)
                .map(|(v, vs)| vs.iter().position(|x| x == v).unwrap_or(0) as u16)
                .collect()
        })
        .collect();
    let times: Vec<Option<f64>> = space.entries().iter().map(|e| e.time_ms).collect();
    Ok(Recorded {
        space: Space {
            sizes: values.iter().map(Vec::len).collect(),
            candidates,
        },
        times,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 6 × 6 space, smooth around its optimum at (4, 1); every tenth candidate failed.
    fn recorded() -> Recorded {
        let candidates: Vec<Vec<u16>> = (0..6u16)
            .flat_map(|a| (0..6u16).map(move |b| vec![a, b]))
            .collect();
        let times = candidates
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let (a, b) = (c[0] as f64 - 4.0, c[1] as f64 - 1.0);
                (i % 10 != 9).then_some(1.0 + a * a + b * b)
            })
            .collect();
        Recorded {
            space: Space {
                sizes: vec![6, 6],
                candidates,
            },
            times,
        }
    }

    fn found(r: &Recorded, name: &str, budget: Budget, seed: u64, slots: Slots) -> f64 {
        best_found(r, &SearchSpec::new(name, budget, seed).unwrap(), slots)
    }

    #[test]
    fn a_search_is_answered_with_the_recorded_times() {
        let r = recorded();
        let whole = Budget::Count(36);
        for name in STRATEGIES {
            // The whole space as the budget: the optimum is found, in batches or refilling.
            for slots in [Slots::Batches(4), Slots::Refilled(4)] {
                assert_eq!(found(&r, name, whole, 3, slots), 1.0, "{name}");
            }
            // One evaluation finds at most what that one candidate took.
            assert!(found(&r, name, Budget::Count(1), 3, Slots::Refilled(4)) >= 1.0);
        }
        // A budget of one, asked for four at a time, is one evaluation: random's first pick.
        let spec = SearchSpec::new("random", Budget::Count(1), 5).unwrap();
        let first = shoal_model::search::Search::new(&spec, &r.space).propose(4)[0];
        assert_eq!(
            found(&r, "random", Budget::Count(1), 5, Slots::Refilled(4)),
            r.times[first].unwrap_or(f64::MAX)
        );
    }
}
