//! `shoal-bench search-warm`: warm starts measured offline. For each recorded space and budget,
//! the forest runs cold and warm-started from an earlier recording (`--prior`: another shape,
//! another device), on the same derived seeds, and the last line per space and budget reads
//!
//! `warm space=<file name> budget=<b> prior=<file name> cold=<median>:<share within 2%> warm=<median>:<share within 2%>`
//!
//! each median being the best found over the space's optimum. A prior that names parameters
//! or values the space lacks maps onto fewer candidates; one that maps onto none is a warm
//! start with nothing to start from, which is said.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use shoal_model::search::{simulate_warm, Budget, Prior, SearchSpec, Slots, Space};

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
    /// Seeds per cell, derived from the space's file name and the repetition.
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

/// A recorded space with its parameters' names and values, as `shoal-bench search` reads it.
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

/// The seed of repetition `rep` on the space in `file`: FNV-1a (64 bits) of `<file>#<rep>`,
/// reduced to 1..2^31-1, so that no two spaces draw the same seeds.
pub fn derived_seed(file: &str, rep: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in format!("{file}#{rep}").bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h % 0x7fff_ffff + 1
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
                        let spec = SearchSpec::new("forest", parsed, derived_seed(&name, rep))
                            .expect("a known strategy");
                        let run = simulate_warm(
                            &spec,
                            &target.space,
                            warm,
                            Slots::Refilled(args.batch),
                            |c| target.times[c],
                        );
                        run.best.unwrap_or(f64::MAX) / optimum
                    })
                    .collect();
                summary(ratios)
            };
            let (cold, warm) = (cell(None), cell(Some(&prior)));
            println!(
                "warm space={name} budget={budget} prior={prior_name} cold={:.4}:{:.2} warm={:.4}:{:.2}",
                cold.0, cold.1, warm.0, warm.1
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The median ratio and the share within 2 % of the optimum.
fn summary(mut ratios: Vec<f64>) -> (f64, f64) {
    ratios.sort_by(f64::total_cmp);
    let median = ratios[((ratios.len() - 1) as f64 * 0.5).round() as usize];
    let within = ratios.iter().filter(|r| **r <= 1.02).count() as f64 / ratios.len() as f64;
    (median, within)
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into(),
    )
}
