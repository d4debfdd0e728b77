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
use shoal_model::search::{simulate_warm, Budget, Prior, SearchSpec, Slots, Space};

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

/// A recorded space with its parameters' names and values: each parameter's values in the replay
/// backend's order (numbers in numeric order), every configuration a candidate, with its recorded
/// time (`None`: failed). `search`, `search-warm` and `search-overhead --from` all read spaces so.
pub struct Named {
    pub names: Vec<String>,
    pub values: Vec<Vec<String>>,
    pub space: Space,
    /// Each candidate's recorded time (`None`: failed).
    pub times: Vec<Option<f64>>,
}

impl Named {
    pub fn read(path: &Path) -> anyhow::Result<Named> {
        let t4 = shoal_backend::replay::t4::read(path)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let replay = shoal_backend::replay::ReplaySpace::new(t4)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let candidates = replay
            .entries()
            .iter()
            .map(|e| {
                e.values
                    .iter()
                    .zip(&replay.values)
                    .map(|(v, vs)| vs.iter().position(|x| x == v).unwrap_or(0) as u16)
                    .collect()
            })
            .collect();
        Ok(Named {
            space: Space {
                sizes: replay.values.iter().map(Vec::len).collect(),
                candidates,
            },
            times: replay.entries().iter().map(|e| e.time_ms).collect(),
            names: replay.names.clone(),
            values: replay.values.clone(),
        })
    }

    pub fn optimum(&self) -> f64 {
        self.times
            .iter()
            .flatten()
            .copied()
            .fold(f64::MAX, f64::min)
    }

    /// `earlier`'s outcomes as a prior over this space: its configurations matched by
    /// parameter name and value; one with a parameter or a value this space lacks is left out.
    pub fn prior_from(&self, earlier: &Named) -> Prior {
        let at: Vec<Option<usize>> = self
            .names
            .iter()
            .map(|n| earlier.names.iter().position(|e| e == n))
            .collect();
        let mapped = earlier
            .space
            .candidates
            .iter()
            .zip(&earlier.times)
            .filter_map(|(c, t)| {
                let v: Option<Vec<u16>> = at
                    .iter()
                    .zip(&self.values)
                    .map(|(a, vs)| {
                        let text = &earlier.values[(*a)?][c[(*a)?] as usize];
                        vs.iter().position(|x| x == text).map(|i| i as u16)
                    })
                    .collect();
                v.map(|v| (v, *t))
            });
        Prior::from_values(&self.space, mapped)
    }
}

pub fn search_warm(args: WarmArgs) -> anyhow::Result<ExitCode> {
    let mut earlier = Named::read(&args.prior)?;
    let mut prior_name = file_name(&args.prior);
    if args.inverted {
        for t in earlier.times.iter_mut().flatten() {
            *t = 1.0 / *t;
        }
        prior_name = format!("inverted:{prior_name}");
    }
    for path in &args.space {
        let name = file_name(path);
        let target = Named::read(path)?;
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
