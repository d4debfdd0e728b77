//! The statistics of `scripts/bench-search`, in one place for both sides: each side prints the
//! raw ratios of its runs (best-found over the optimum, one per seed) as
//! `search-ratios …` (Shoal's, `shoal-bench search --ratios`) or `kerneltuner-ratios …` lines
//! (scripts/bench_search_kerneltuner.py), and this module turns them into figures with 90 %
//! bootstrap intervals: `shoal-bench search` prints its own with it, and `shoal-bench
//! search-summary` reads both sides' lines and prints every cell (space × budget × strategy),
//! the pooled lines, each space's best of each side and a verdict.
//!
//! Intervals are percentile bootstraps: [`RESAMPLES`] resamples of a cell's runs, drawn by
//! SplitMix64 from a fixed seed (FNV-1a 64 of the cell's name), so a figure repeats whatever is
//! summarised beside it; the 5th and 95th percentiles of the resampled medians and shares. A
//! pooled figure takes a strategy's runs on all the spaces of a budget together, and its
//! bootstrap resamples within each space (stratified), so every resample keeps each space's
//! count of runs.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

/// Bootstrap resamples per interval.
pub const RESAMPLES: usize = 2000;
/// A run counts as a hit when its best-found is within 2 % of the optimum.
const WITHIN: f64 = 1.02;

#[derive(Debug, Args)]
pub struct SummaryArgs {
    /// Files of `search-ratios` and `kerneltuner-ratios` lines (other lines are skipped), as
    /// `shoal-bench search --ratios` and scripts/bench_search_kerneltuner.py print them;
    /// standard input when none.
    pub files: Vec<PathBuf>,
}

/// Whose runs: Shoal's strategies or KernelTuner's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Shoal,
    KernelTuner,
}

impl Side {
    /// The word of the side's lines: `search-ratios`, `search-run`, `shoal=` …
    fn run_tag(self) -> &'static str {
        match self {
            Side::Shoal => "search",
            Side::KernelTuner => "kerneltuner",
        }
    }
    fn name(self) -> &'static str {
        match self {
            Side::Shoal => "shoal",
            Side::KernelTuner => "kerneltuner",
        }
    }
}

/// One cell: a strategy's runs on one space at one budget, one ratio per seed in seed order
/// (`inf` where a run found nothing valid).
#[derive(Debug, Clone, PartialEq)]
pub struct Runs {
    pub side: Side,
    pub space: String,
    pub budget: String,
    pub evaluations: usize,
    pub strategy: String,
    /// Shoal's candidates out at once, at most; none for KernelTuner (sequential).
    pub in_flight: Option<usize>,
    /// A warm start's prior (`prior=<file>`, for a `--prior` option): such cells are kept
    /// apart from the cold ones and take no part in the best, pooled or verdict lines.
    pub prior: Option<String>,
    /// Wall time of all the runs.
    pub secs: f64,
    pub ratios: Vec<f64>,
}

impl Runs {
    /// The raw line: `<side>-ratios space=… budget=… evaluations=… strategy=… [in_flight=…]
    /// [prior=…] secs=… ratios=r1,r2,…`, each ratio as the shortest text that reads back the same.
    pub fn ratios_line(&self) -> String {
        let mut line = format!(
            "{}-ratios space={} budget={} evaluations={} strategy={}",
            self.side.run_tag(),
            self.space,
            self.budget,
            self.evaluations,
            self.strategy
        );
        if let Some(k) = self.in_flight {
            line += &format!(" in_flight={k}");
        }
        if let Some(p) = &self.prior {
            line += &format!(" prior={p}");
        }
        let ratios: Vec<String> = self.ratios.iter().map(|r| r.to_string()).collect();
        line + &format!(" secs={:.3} ratios={}", self.secs, ratios.join(","))
    }

    /// A raw line back; `None` for a line of anything else, an error for a broken one.
    pub fn parse(line: &str) -> Option<anyhow::Result<Runs>> {
        let mut words = line.split_whitespace();
        let side = match words.next()? {
            "search-ratios" => Side::Shoal,
            "kerneltuner-ratios" => Side::KernelTuner,
            _ => return None,
        };
        let fields: Vec<(&str, &str)> = words.filter_map(|w| w.split_once('=')).collect();
        let get = |k: &str| fields.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
        let need = |k: &str| get(k).ok_or_else(|| anyhow::anyhow!("no {k}= in `{line}`"));
        Some((|| {
            let ratios = need("ratios")?
                .split(',')
                .map(|r| r.parse::<f64>())
                .collect::<Result<Vec<_>, _>>()?;
            anyhow::ensure!(
                !ratios.is_empty() && ratios.iter().all(|r| *r > 0.0),
                "ratios must be > 0: `{line}`"
            );
            Ok(Runs {
                side,
                space: need("space")?.to_string(),
                budget: need("budget")?.to_string(),
                evaluations: need("evaluations")?.parse()?,
                strategy: need("strategy")?.to_string(),
                in_flight: get("in_flight").map(str::parse).transpose()?,
                prior: get("prior").map(str::to_string),
                secs: get("secs").map_or(Ok(0.0), str::parse)?,
                ratios,
            })
        })())
    }

    fn name(&self) -> String {
        let prior = self.prior.as_deref().unwrap_or("");
        format!(
            "{} {} {} {} {prior}",
            self.side.name(),
            self.space,
            self.budget,
            self.strategy
        )
    }

    /// Median, p10, p90, share within 2 %, with the intervals of the median and share.
    pub fn stats(&self) -> Stats {
        Stats::of(&[&self.ratios], &self.name())
    }

    /// `search-run …` / `kerneltuner-run …`: the fields they had before intervals, then
    /// `median_ci=<lo>:<hi> within_ci=<lo>:<hi>`.
    pub fn run_line(&self) -> String {
        self.run_line_with(&self.stats())
    }

    fn run_line_with(&self, s: &Stats) -> String {
        let in_flight = self
            .in_flight
            .map_or(String::new(), |k| format!(" in_flight={k}"));
        let prior = self
            .prior
            .as_ref()
            .map_or(String::new(), |p| format!(" prior={p}"));
        format!(
            "{}-run space={} budget={} evaluations={} strategy={}{in_flight}{prior} median={:.4} p10={:.4} p90={:.4} within_2pct={:.2} secs={:.3} median_ci={:.4}:{:.4} within_ci={:.2}:{:.2}",
            self.side.run_tag(),
            self.space,
            self.budget,
            self.evaluations,
            self.strategy,
            s.median,
            s.p10,
            s.p90,
            s.within,
            self.secs,
            s.median_ci.0,
            s.median_ci.1,
            s.within_ci.0,
            s.within_ci.1
        )
    }
}

/// A cell's figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    pub median: f64,
    pub p10: f64,
    pub p90: f64,
    pub within: f64,
    pub median_ci: (f64, f64),
    pub within_ci: (f64, f64),
}

impl Stats {
    /// The figures of the runs of all `strata` together, the intervals by a bootstrap seeded
    /// from `name` that resamples within each stratum.
    fn of(strata: &[&[f64]], name: &str) -> Stats {
        let all = sorted(&strata.concat());
        let (median, within) = figures(&all);
        let (median_ci, within_ci) = bootstrap(strata, name);
        Stats {
            median,
            p10: quantile(&all, 0.1),
            p90: quantile(&all, 0.9),
            within,
            median_ci,
            within_ci,
        }
    }

    /// `<strategy>:<median>:<within>` and `<mlo>:<mhi>:<wlo>:<whi>`, as the best lines give them.
    fn best_fields(&self, strategy: &str) -> (String, String) {
        (
            format!("{strategy}:{:.4}:{:.2}", self.median, self.within),
            format!(
                "{:.4}:{:.4}:{:.2}:{:.2}",
                self.median_ci.0, self.median_ci.1, self.within_ci.0, self.within_ci.1
            ),
        )
    }
}

fn sorted(xs: &[f64]) -> Vec<f64> {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

/// The p-quantile of sorted values: index round((len - 1) × p), halves away from zero (the
/// median of 10 runs is the 6th).
fn quantile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Median and share within 2 % of some runs.
fn figures(ratios: &[f64]) -> (f64, f64) {
    let mut v = ratios.to_vec();
    let k = ((v.len() - 1) as f64 * 0.5).round() as usize;
    let median = *v.select_nth_unstable_by(k, f64::total_cmp).1;
    let within = v.iter().filter(|r| **r <= WITHIN).count() as f64 / v.len() as f64;
    (median, within)
}

/// FNV-1a 64 of some bytes: the seed rule's hash (crate::search::run_seed) and the bootstrap's.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// SplitMix64: the bootstrap's generator.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// An index below `n`.
    fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next()) * n as u128) >> 64) as usize
    }
}

/// The 90 % intervals of the median and of the share within 2 % of the runs of all `strata`
/// together, each resample drawing as many runs from each stratum (space) as it has.
fn bootstrap(strata: &[&[f64]], name: &str) -> ((f64, f64), (f64, f64)) {
    let mut rng = SplitMix(fnv1a64(name.as_bytes()));
    let total: usize = strata.iter().map(|s| s.len()).sum();
    let mut sample = Vec::with_capacity(total);
    let (mut medians, mut shares) = (Vec::with_capacity(RESAMPLES), Vec::with_capacity(RESAMPLES));
    for _ in 0..RESAMPLES {
        sample.clear();
        for s in strata {
            sample.extend((0..s.len()).map(|_| s[rng.below(s.len())]));
        }
        let (m, w) = figures(&sample);
        medians.push(m);
        shares.push(w);
    }
    let ci = |v: Vec<f64>| {
        let v = sorted(&v);
        (quantile(&v, 0.05), quantile(&v, 0.95))
    };
    (ci(medians), ci(shares))
}

/// Items in the order they first appear.
fn firsts<'a>(items: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for i in items {
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out
}

/// A side's best cold cell among `cells`: the lowest median; on a tie, the larger share.
fn best<'a>(cells: impl Iterator<Item = (&'a str, Stats)>) -> Option<(&'a str, Stats)> {
    cells.fold(None, |b: Option<(&str, Stats)>, (s, st)| match b {
        Some(b)
            if !(st.median < b.1.median || (st.median == b.1.median && st.within > b.1.within)) =>
        {
            Some(b)
        }
        _ => Some((s, st)),
    })
}

/// `better|level|worse` for Shoal against KernelTuner (`lower`: lower is better), then
/// `:beyond` when the two 90 % intervals do not overlap, `:within` when they do.
fn compare(shoal: f64, shoal_ci: (f64, f64), kt: f64, kt_ci: (f64, f64), lower: bool) -> String {
    let (s, k) = if lower { (-shoal, -kt) } else { (shoal, kt) };
    let word = if s > k {
        "better"
    } else if s == k {
        "level"
    } else {
        "worse"
    };
    let apart = shoal_ci.1 < kt_ci.0 || kt_ci.1 < shoal_ci.0;
    format!("{word}:{}", if apart { "beyond" } else { "within" })
}

/// The verdict fields of Shoal's best against KernelTuner's best single strategy.
fn verdict(shoal: &Stats, kt: &Stats) -> String {
    let median = compare(shoal.median, shoal.median_ci, kt.median, kt.median_ci, true);
    let share = compare(
        shoal.within,
        shoal.within_ci,
        kt.within,
        kt.within_ci,
        false,
    );
    let good = |c: &str| !c.starts_with("worse");
    let at_least = match (good(&median), good(&share)) {
        (true, true) => "median,share",
        (true, false) => "median",
        (false, true) => "share",
        (false, false) => "neither",
    };
    format!("median={median} share={share} at_least_as_good={at_least}")
}

/// A strategy's runs at one budget on every space of the budget, together.
struct Pooled<'a> {
    side: Side,
    strategy: &'a str,
    runs: usize,
    stats: Stats,
}

/// At one budget, the spaces of its cold cells and, for each strategy that ran on all of them,
/// its pooled figures (intervals by a bootstrap stratified by space); none with one space.
fn pool<'a>(cells: &'a [Runs], budget: &str) -> Option<(Vec<&'a str>, Vec<Pooled<'a>>)> {
    let cold: Vec<&Runs> = cells
        .iter()
        .filter(|c| c.budget == budget && c.prior.is_none())
        .collect();
    let over = firsts(cold.iter().map(|c| c.space.as_str()));
    if over.len() < 2 {
        return None;
    }
    let mut pooled = Vec::new();
    for side in [Side::Shoal, Side::KernelTuner] {
        let of_side = || cold.iter().filter(move |c| c.side == side);
        for strategy in firsts(of_side().map(|c| c.strategy.as_str())) {
            let strata: Vec<&[f64]> = over
                .iter()
                .filter_map(|space| {
                    of_side()
                        .find(|c| c.space == *space && c.strategy == strategy)
                        .map(|c| c.ratios.as_slice())
                })
                .collect();
            if strata.len() < over.len() {
                continue;
            }
            let name = format!("pooled {} {budget} {strategy}", side.name());
            let stats = Stats::of(&strata, &name);
            pooled.push(Pooled {
                side,
                strategy,
                runs: strata.iter().map(|s| s.len()).sum(),
                stats,
            });
        }
    }
    Some((over, pooled))
}

/// Some cells with their figures, and the pooled ones of every budget of more than one space.
pub struct Summary<'a> {
    cells: &'a [Runs],
    stats: Vec<Stats>,
    spaces: Vec<&'a str>,
    budgets: Vec<&'a str>,
    /// Per budget of more than one space: the spaces, and the pooled strategies.
    pools: Vec<(&'a str, Vec<&'a str>, Vec<Pooled<'a>>)>,
    /// Whether any cell is KernelTuner's (then a best line without it says `kerneltuner=none`).
    any_kt: bool,
}

impl<'a> Summary<'a> {
    pub fn new(cells: &'a [Runs]) -> Summary<'a> {
        let budgets = firsts(cells.iter().map(|c| c.budget.as_str()));
        Summary {
            cells,
            stats: cells.iter().map(Runs::stats).collect(),
            spaces: firsts(cells.iter().map(|c| c.space.as_str())),
            pools: budgets
                .iter()
                .filter_map(|b| pool(cells, b).map(|(over, pooled)| (*b, over, pooled)))
                .collect(),
            budgets,
            any_kt: cells.iter().any(|c| c.side == Side::KernelTuner),
        }
    }

    /// Per space and budget, each cell's `search-run` / `kerneltuner-run` line.
    pub fn run_lines(&self, out: &mut impl Write) -> std::io::Result<()> {
        for space in &self.spaces {
            for budget in &self.budgets {
                for (c, s) in self.cells.iter().zip(&self.stats) {
                    if c.space == *space && c.budget == *budget {
                        writeln!(out, "{}", c.run_line_with(s))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Per budget of more than one space, what is pooled (`pooled-over budget=<b>
    /// spaces=<a,b,…>`) and each strategy's pooled figures (`pooled-run …`).
    pub fn pooled_run_lines(&self, out: &mut impl Write) -> std::io::Result<()> {
        for (budget, over, pooled) in &self.pools {
            writeln!(
                out,
                "pooled-over budget={budget} spaces={} pooling=all_runs_of_a_strategy_together bootstrap=stratified_by_space",
                over.join(",")
            )?;
            for p in pooled {
                let s = &p.stats;
                writeln!(
                    out,
                    "pooled-run budget={budget} spaces={} runs={} side={} strategy={} median={:.4} p10={:.4} p90={:.4} within_2pct={:.2} median_ci={:.4}:{:.4} within_ci={:.2}:{:.2}",
                    over.len(),
                    p.runs,
                    p.side.name(),
                    p.strategy,
                    s.median,
                    s.p10,
                    s.p90,
                    s.within,
                    s.median_ci.0,
                    s.median_ci.1,
                    s.within_ci.0,
                    s.within_ci.1
                )?;
            }
        }
        Ok(())
    }

    /// Per space and budget, each side's best (`search space=… budget=… shoal=… shoal_ci=…
    /// [kerneltuner=… kerneltuner_ci=…]`) and, where both sides ran, a `verdict` line.
    pub fn best_lines(&self, out: &mut impl Write) -> std::io::Result<()> {
        for space in &self.spaces {
            for budget in &self.budgets {
                let side_best = |side: Side| {
                    best(self.cells.iter().zip(&self.stats).filter_map(|(c, s)| {
                        let here = c.side == side && c.space == *space && c.budget == *budget;
                        (here && c.prior.is_none()).then_some((c.strategy.as_str(), *s))
                    }))
                };
                let place = format!("space={space} budget={budget}");
                self.best_pair(out, "search", "verdict", &place, side_best)?;
            }
        }
        Ok(())
    }

    /// Per budget of more than one space, the same of the pooled figures: `pooled budget=…
    /// spaces=<n> shoal=… shoal_ci=… …` and `verdict-pooled …`.
    pub fn pooled_best_lines(&self, out: &mut impl Write) -> std::io::Result<()> {
        for (budget, over, pooled) in &self.pools {
            let side_best = |side: Side| {
                best(
                    pooled
                        .iter()
                        .filter(|p| p.side == side)
                        .map(|p| (p.strategy, p.stats)),
                )
            };
            let place = format!("budget={budget} spaces={}", over.len());
            self.best_pair(out, "pooled", "verdict-pooled", &place, side_best)?;
        }
        Ok(())
    }

    fn best_pair<'s>(
        &self,
        out: &mut impl Write,
        head: &str,
        verdict_head: &str,
        place: &str,
        side_best: impl Fn(Side) -> Option<(&'s str, Stats)>,
    ) -> std::io::Result<()> {
        let Some(shoal) = side_best(Side::Shoal) else {
            return Ok(());
        };
        let kt = side_best(Side::KernelTuner);
        writeln!(
            out,
            "{}",
            best_line(&format!("{head} {place}"), shoal, kt, self.any_kt)
        )?;
        if let Some(kt) = kt {
            writeln!(out, "{verdict_head} {place} {}", verdict(&shoal.1, &kt.1))?;
        }
        Ok(())
    }
}

/// Everything about some cells, in this order: [`Summary::run_lines`],
/// [`Summary::pooled_run_lines`], [`Summary::best_lines`] (with the verdicts) and
/// [`Summary::pooled_best_lines`].
pub fn summarise(cells: &[Runs], out: &mut impl Write) -> std::io::Result<()> {
    let summary = Summary::new(cells);
    summary.run_lines(out)?;
    summary.pooled_run_lines(out)?;
    summary.best_lines(out)?;
    summary.pooled_best_lines(out)
}

fn best_line(head: &str, shoal: (&str, Stats), kt: Option<(&str, Stats)>, any_kt: bool) -> String {
    let (s, s_ci) = shoal.1.best_fields(shoal.0);
    let mut line = format!("{head} shoal={s} shoal_ci={s_ci}");
    match kt {
        Some((name, st)) => {
            let (k, k_ci) = st.best_fields(name);
            line += &format!(" kerneltuner={k} kerneltuner_ci={k_ci}");
        }
        None if any_kt => line += " kerneltuner=none",
        None => {}
    }
    line
}

/// `shoal-bench search-summary`: read the raw lines of the files (or standard input) and print
/// [`summarise`]'s lines.
pub fn search_summary(args: SummaryArgs) -> anyhow::Result<ExitCode> {
    let mut cells: Vec<Runs> = Vec::new();
    let mut read = |reader: &mut dyn BufRead, what: &str| -> anyhow::Result<()> {
        for (i, line) in reader.lines().enumerate() {
            let line = line?;
            let Some(runs) = Runs::parse(&line) else {
                continue;
            };
            let runs = runs.map_err(|e| anyhow::anyhow!("{what}:{}: {e}", i + 1))?;
            anyhow::ensure!(
                !cells.iter().any(|c| c.name() == runs.name()),
                "{what}:{}: {} given twice",
                i + 1,
                runs.name().trim_end()
            );
            cells.push(runs);
        }
        Ok(())
    };
    if args.files.is_empty() {
        read(&mut std::io::stdin().lock(), "stdin")?;
    }
    for f in &args.files {
        let file = std::fs::File::open(f).map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?;
        read(&mut std::io::BufReader::new(file), &f.display().to_string())?;
    }
    anyhow::ensure!(
        !cells.is_empty(),
        "no search-ratios or kerneltuner-ratios lines"
    );
    summarise(&cells, &mut std::io::stdout().lock())?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests;
