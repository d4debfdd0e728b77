//! `shoal-bench search-warm`: warm starts measured offline. For each recorded space and budget,
//! the forest runs cold and warm-started from an earlier recording (`--prior`: another shape,
//! another device), on the same derived seeds, and the last line per space and budget reads
//!
//! `warm space=<file name> budget=<b> prior=<file name> cold=<median>:<share within 2%> warm=<median>:<share within 2%>`
//!
//! `cold_ci=<median lo>:<median hi>:<share lo>:<share hi> warm_ci=…`
//!
//! each median being the best found over the space's optimum, each interval a 90 % bootstrap
//! one (`shoal-bench search-summary`'s), the seeds those of `shoal-bench search` (`run_seed`:
//! derived from the space's file name and the run). A prior that names parameters
//! or values the space lacks maps onto fewer candidates; one that maps onto none is a warm
//! start with nothing to start from, which is said.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use shoal_model::search::{simulate_warm, Budget, Prior, SearchSpec, Slots};

use crate::recorded::Recorded;
use crate::search::run_seed;
use crate::summary::{Runs, Side, Stats};

#[derive(Debug, Args)]
pub struct WarmArgs {
    /// A recorded space in the T4 format to search; repeatable.
    #[arg(long, required = true)]
    pub space: Vec<PathBuf>,
    /// The earlier recording the warm searches start from (T4): another shape, device or
    /// version of the same kernel.
    #[arg(long)]
    pub prior: PathBuf,
    /// Evaluations allowed: a count, or a share of the space such as `1%`; repeatable.
    #[arg(long, default_values = ["1%", "2%"])]
    pub budget: Vec<String>,
    /// Runs per cell, each seeded from the space's file name and the run (as `search`).
    #[arg(long, default_value_t = 100)]
    pub reps: u64,
    /// Candidates in flight, each freed slot refilled at once (as the Scheduler does).
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    /// The prior upside down (its fastest taken as its slowest): the most misleading prior
    /// there is, to bound what trusting one can cost.
    #[arg(long)]
    pub inverted: bool,
}

pub fn search_warm(args: WarmArgs) -> anyhow::Result<ExitCode> {
    let mut earlier = Recorded::read(&args.prior)?;
    let mut prior_name = file_name(&args.prior);
    if args.inverted {
        for t in earlier.times.iter_mut().flatten() {
            *t = 1.0 / *t;
        }
        prior_name = format!("inverted:{prior_name}");
    }
    for path in &args.space {
        let name = file_name(path);
        let target = Recorded::read(path)?;
        let prior = target.prior_from(&earlier);
        eprintln!(
            "search-warm: {name}: {} candidates; the prior {prior_name} maps onto {} of them",
            target.times.len(),
            prior.len()
        );
        let optimum = target.optimum();
        for budget in &args.budget {
            let parsed = Budget::parse(budget).map_err(anyhow::Error::msg)?;
            let cell = |warm: Option<&Prior>| {
                let ratios: Vec<f64> = (1..=args.reps)
                    .map(|rep| {
                        let spec = SearchSpec::new("forest", parsed, run_seed(&name, rep))
                            .expect("a known strategy");
                        let run = simulate_warm(
                            &spec,
                            &target.space,
                            warm,
                            Slots::Refilled(args.batch),
                            |c| target.times[c],
                        );
                        run.best.unwrap_or(f64::INFINITY) / optimum
                    })
                    .collect();
                Runs {
                    side: Side::Shoal,
                    space: name.clone(),
                    budget: budget.clone(),
                    evaluations: parsed.evaluations(target.times.len()),
                    strategy: "forest".into(),
                    in_flight: None,
                    prior: warm.map(|_| prior_name.clone()),
                    secs: 0.0,
                    ratios,
                }
                .stats()
            };
            let (cold, warm) = (cell(None), cell(Some(&prior)));
            let ci = |s: &Stats| {
                format!(
                    "{:.4}:{:.4}:{:.2}:{:.2}",
                    s.median_ci.0, s.median_ci.1, s.within_ci.0, s.within_ci.1
                )
            };
            println!(
                "warm space={name} budget={budget} prior={prior_name} cold={:.4}:{:.2} warm={:.4}:{:.2} cold_ci={} warm_ci={}",
                cold.median,
                cold.within,
                warm.median,
                warm.within,
                ci(&cold),
                ci(&warm)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into(),
    )
}
