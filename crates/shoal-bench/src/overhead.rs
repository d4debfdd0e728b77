//! `shoal-bench search-overhead`: what choosing costs on a large space. A synthetic space of
//! `--candidates` (default 10⁶) is searched by the forest with 16 slots refilled as the
//! Scheduler refills them; each `propose` is timed. The space is either a recorded one grown
//! (`--from FILE`: its candidates times extra parameters of up to six values, each a smooth factor
//! on the recorded time with its best at one value, until there are enough), or a known
//! function (six parameters of ten values, smooth, with interactions between pairs and a
//! deterministic ripple). One line per budget:
//!
//! `overhead candidates=<N> budget=<n> proposals=<n> per_proposal_ms=<mean> worst_call_ms=<max> ratio=<best found / optimum> secs=<wall>`
//!
//! Measuring the evaluations is not the point (each one here is a formula); the wall time is
//! the search's own.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use shoal_model::search::{Budget, Search, SearchSpec, Space};

#[derive(Debug, Args)]
pub struct OverheadArgs {
    /// Candidates of the synthetic space: 10^k for k in 2..=7 (k parameters of ten values
    /// each), or any count, rounded up to the next power of ten.
    #[arg(long, default_value_t = 1_000_000)]
    pub candidates: u64,
    /// Evaluations allowed: a count or a share; repeatable.
    #[arg(long, default_values = ["100", "1000", "5000"])]
    pub budget: Vec<String>,
    /// Seed of the search.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Slots refilled as they free.
    #[arg(long, default_value_t = 16)]
    pub slots: usize,
    /// Grow this recorded space (T4) instead of using the known function.
    #[arg(long, value_name = "FILE")]
    pub from: Option<PathBuf>,
}

/// `recorded` with extra parameters of up to six values until it has at least `candidates`: each
/// extra parameter multiplies a candidate's time by a factor that is 1 at its best value and
/// grows smoothly away from it, differently for each parameter.
fn grown(recorded: &crate::recorded::Recorded, candidates: u64) -> (Space, Vec<f64>) {
    let base = recorded.space.candidates.len().max(1);
    // Parameters of six values, the last one as wide as it takes to reach `candidates`.
    let mut sizes: Vec<usize> = Vec::new();
    while (base * sizes.iter().product::<usize>()) < candidates as usize {
        let so_far = base * sizes.iter().product::<usize>();
        sizes.push((candidates as usize).div_ceil(so_far).clamp(2, 6));
    }
    let combos: usize = sizes.iter().product();
    let mut space = Space {
        sizes: recorded
            .space
            .sizes
            .iter()
            .copied()
            .chain(sizes.iter().copied())
            .collect(),
        candidates: Vec::with_capacity(base * combos),
    };
    let mut times = Vec::with_capacity(base * combos);
    for k in 0..combos {
        let mut rest = k;
        let values: Vec<u16> = sizes
            .iter()
            .map(|s| {
                let v = (rest % s) as u16;
                rest /= s;
                v
            })
            .collect();
        let factor: f64 = values
            .iter()
            .enumerate()
            .map(|(e, v)| {
                let best = ((e * 5 + 2) % sizes[e]) as f64;
                1.0 + 0.04 * (e + 1) as f64 * (f64::from(*v) - best).abs()
            })
            .product();
        for (c, t) in recorded.space.candidates.iter().zip(&recorded.times) {
            space
                .candidates
                .push(c.iter().copied().chain(values.iter().copied()).collect());
            // A failure stays a failure: the slowest time times ten.
            times.push(t.map_or(f64::MAX, |t| t * factor));
        }
    }
    let worst = times
        .iter()
        .copied()
        .filter(|t| *t < f64::MAX)
        .fold(0.0, f64::max);
    for t in &mut times {
        if *t == f64::MAX {
            *t = worst * 10.0;
        }
    }
    (space, times)
}

/// A synthetic space of ten values a parameter, and the time of each candidate.
fn synthetic(candidates: u64) -> (Space, Vec<f64>) {
    let params = (candidates.max(100) as f64).log10().ceil().clamp(2.0, 7.0) as usize;
    let size = 10usize.pow(params as u32);
    let centre: Vec<f64> = (0..params).map(|p| ((p * 7 + 3) % 10) as f64).collect();
    let mut space = Space {
        sizes: vec![10; params],
        candidates: Vec::with_capacity(size),
    };
    let mut times = Vec::with_capacity(size);
    for i in 0..size {
        let v: Vec<u16> = (0..params)
            .map(|p| (i / 10usize.pow(p as u32) % 10) as u16)
            .collect();
        let x: Vec<f64> = v.iter().map(|a| f64::from(*a)).collect();
        let bowl: f64 = (0..params)
            .map(|p| (p + 1) as f64 * 0.05 * (x[p] - centre[p]).powi(2))
            .sum();
        // Pairs that pay only together, as a tile's width and height do.
        let pairs: f64 = (0..params - 1)
            .map(|p| 0.1 * ((x[p] - centre[p]) - (x[p + 1] - centre[p + 1])).abs())
            .sum();
        let ripple = 0.05
            * (((i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as f64 / (1u64 << 24) as f64);
        space.candidates.push(v);
        times.push(1.0 + bowl + pairs + ripple);
    }
    (space, times)
}

pub fn search_overhead(args: OverheadArgs) -> anyhow::Result<ExitCode> {
    let clock = Instant::now();
    let (space, times) = match &args.from {
        Some(path) => grown(&crate::recorded::Recorded::read(path)?, args.candidates),
        None => synthetic(args.candidates),
    };
    let optimum = times.iter().copied().fold(f64::MAX, f64::min);
    eprintln!(
        "search-overhead: {} candidates built in {:.2} s",
        times.len(),
        clock.elapsed().as_secs_f64()
    );
    for budget in &args.budget {
        let parsed = Budget::parse(budget).map_err(anyhow::Error::msg)?;
        let spec = SearchSpec::new("forest", parsed, args.seed).expect("a known strategy");
        let wall = Instant::now();
        let mut search = Search::new(&spec, &space);
        let (mut choosing, mut worst, mut proposals) = (0.0f64, 0.0f64, 0usize);
        let mut out: VecDeque<usize> = VecDeque::new();
        let mut best = f64::MAX;
        loop {
            let want = args.slots.saturating_sub(out.len());
            let t = Instant::now();
            let got = search.propose(want);
            let ms = t.elapsed().as_secs_f64() * 1e3;
            if !got.is_empty() {
                choosing += ms;
                worst = worst.max(ms);
                proposals += got.len();
            }
            out.extend(got);
            let Some(c) = out.pop_front() else { break };
            best = best.min(times[c]);
            search.observe(c, Some(times[c]));
        }
        println!(
            "overhead candidates={} budget={budget} proposals={proposals} per_proposal_ms={:.3} worst_call_ms={:.2} ratio={:.4} secs={:.2}",
            times.len(),
            choosing / proposals.max(1) as f64,
            worst,
            best / optimum,
            wall.elapsed().as_secs_f64()
        );
    }
    Ok(ExitCode::SUCCESS)
}
