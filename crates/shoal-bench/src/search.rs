//! `shoal-bench search`: Shoal's search strategies (`shoal_model::search`) on recorded spaces in
//! the T4 format, offline: each run proposes batches (as free slots would ask), is answered
//! with the recorded time or failure of each candidate, and stops at the budget. For each
//! strategy, over `--reps` runs seeded by [`run_seed`], it prints the median best-found over
//! the optimum with p10 and p90, the share of runs within 2 % of the optimum and the wall time,
//! with 90 % bootstrap intervals of the median and share (crate::summary, which also reads
//! KernelTuner's side for scripts/bench-search); the last line per space and budget names the
//! best strategy (the lowest median; on a tie, the larger share within 2 %):
//! `search space=<file> budget=<b> shoal=<strategy>:<median ratio>:<share within 2%>
//! shoal_ci=<median lo>:<median hi>:<share lo>:<share hi>`; with more than one space, pooled
//! lines follow. `--ratios` also prints each strategy's raw ratios (`search-ratios …`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use shoal_model::search::{simulate, Budget, Search, SearchSpec, Slots, STRATEGIES};

use crate::recorded::Recorded;
use crate::summary::{fnv1a64, Runs, Side, Summary};

#[derive(Debug, Args)]
pub struct SearchArgs {
    /// A recorded space in the T4 format (`.json` or `.json.gz`); repeatable.
    #[arg(long, required = true)]
    pub space: Vec<PathBuf>,
    /// Evaluations allowed: a count, or a share of the space such as `5%`; repeatable.
    #[arg(long, default_values = ["1%", "2%"])]
    pub budget: Vec<String>,
    /// Runs per strategy, space and budget, run r seeded by the seed rule (`run_seed`: FNV-1a
    /// 64 of "<space file name>#<r>", reduced to 1..=2^31-1), as KernelTuner's side is.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
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
    /// Also print each strategy's raw ratios, one per run in seed order (`search-ratios …`
    /// lines, which `shoal-bench search-summary` reads with KernelTuner's).
    #[arg(long)]
    pub ratios: bool,
}

/// The seed of run `rep` (1, 2, …) on the space file `name` (its file name, without the
/// directory), the same on both sides of scripts/bench-search (run_seed in
/// scripts/bench_search_kerneltuner.py): FNV-1a 64 of the UTF-8 text `"<name>#<rep>"`, reduced
/// to 1..=2^31-1 (1 + hash mod (2^31 - 1)) so that NumPy and KernelTuner take it. Seeds 1..N
/// on every space drew the same configurations on every space that lists them in the same
/// order, making pooled figures look far surer than they were (issue 38). (The Python side
/// keys its cache of runs with this rule's name, `fnv1a64-name-rep`: a change here is a new
/// name there.)
pub fn run_seed(name: &str, rep: u64) -> u64 {
    1 + fnv1a64(format!("{name}#{rep}").as_bytes()) % 0x7fff_ffff
}

pub fn search(args: SearchArgs) -> anyhow::Result<ExitCode> {
    let mut cells = Vec::new();
    for path in &args.space {
        let recorded = Recorded::read(path)?;
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
            let mut here = Vec::new();
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
                let ratios: Vec<f64> = (1..=args.reps)
                    .map(|rep| {
                        let spec = SearchSpec {
                            seed: run_seed(&name, rep),
                            ..spec.clone()
                        };
                        match best_found(&recorded, &spec, slots) {
                            f64::MAX => f64::INFINITY,
                            best => best / optimum,
                        }
                    })
                    .collect();
                let runs = Runs {
                    side: Side::Shoal,
                    space: name.to_string(),
                    budget: budget.clone(),
                    evaluations: n,
                    strategy: name_s.to_string(),
                    in_flight: Some(in_flight),
                    prior: None,
                    secs: clock.elapsed().as_secs_f64(),
                    ratios,
                };
                if args.ratios {
                    println!("{}", runs.ratios_line());
                }
                println!("{}", runs.run_line());
                here.push(runs);
            }
            Summary::new(&here).best_lines(&mut std::io::stdout().lock())?;
            cells.extend(here);
        }
    }
    // With more than one space, the pooled lines (none with one).
    let summary = Summary::new(&cells);
    summary.pooled_run_lines(&mut std::io::stdout().lock())?;
    summary.pooled_best_lines(&mut std::io::stdout().lock())?;
    Ok(ExitCode::SUCCESS)
}

/// The best time one search finds (`f64::MAX` when every candidate it measured failed).
fn best_found(recorded: &Recorded, spec: &SearchSpec, slots: Slots) -> f64 {
    simulate(spec, &recorded.space, slots, |c| recorded.times[c])
        .best
        .unwrap_or(f64::MAX)
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
            names: vec!["a".into(), "b".into()],
            values: vec![(0..6).map(|v| v.to_string()).collect(); 2],
            space: shoal_model::search::Space {
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

    /// The seed rule's documented vector, the one scripts/bench_search_kerneltuner.py gives.
    #[test]
    fn the_seed_of_a_run_comes_from_the_space_and_the_repetition() {
        let seeds: Vec<u64> = (1..=3)
            .map(|rep| run_seed("cuda_gemm_wide-1.T4.json.gz", rep))
            .collect();
        assert_eq!(seeds, [1842351183, 1842354024, 1842353077]);
        // Another space, other seeds; all within 1..=2^31-1.
        assert_ne!(run_seed("cuda_gemm_wide-2.T4.json.gz", 1), seeds[0]);
        for rep in 1..=1000 {
            assert!((1..=0x7fff_ffff).contains(&run_seed("x", rep)));
        }
    }

    /// KernelTuner's side (scripts/bench_search_kerneltuner.py --seeds, which needs nothing
    /// but Python's standard library) gives the same seeds as [`run_seed`].
    #[test]
    fn kerneltuners_side_gives_the_same_seeds() {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../scripts/bench_search_kerneltuner.py"
        );
        for name in [
            "cuda_gemm_wide-1.T4.json.gz",
            "convolution_A100_T4.json.gz",
            "é #1",
        ] {
            let out = match std::process::Command::new("python3")
                .args([script, "--seeds", name, "--reps", "20"])
                .output()
            {
                Ok(out) => out,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    eprintln!("no python3: KernelTuner's seeds not checked");
                    return;
                }
                Err(e) => panic!("python3: {e}"),
            };
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let python: Vec<u64> = String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .map(|s| s.parse().unwrap())
                .collect();
            let rust: Vec<u64> = (1..=20).map(|rep| run_seed(name, rep)).collect();
            assert_eq!(python, rust, "{name}");
        }
    }
}
